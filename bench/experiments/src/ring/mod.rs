//! `logless bench ring`: what a ring of N nodes with R replicas per key costs per operation, and
//! how it spreads the keys (issue 28, "Performance"; docs/ring.md).
//!
//! For each N of `--nodes` (3, 5, 9 by default) at R = `--replication` (3), and for each
//! [`Series`], a ring of N `logless server` processes on loopback is started
//! ([`cluster::Ring`]), `--keys` keys of 16 bytes are loaded, and `--clients` closed-loop
//! clients (or `--clients-per-node` times N, for the same load per node at every N) send a mix
//! of SET, GET and INCR of them (`--mix`) for `--seconds` ([`load`]):
//!
//! * **routed**: the ring in cluster mode; the slot map is read once from CLUSTER SLOTS and
//!   each key is sent to its first replica, so no command is forwarded;
//! * **any-node**: a plain ring; each batch goes to the next node whatever its keys, and a
//!   node that does not hold a key forwards the command to a replica (the cost of proxying).
//!   Both rings of one N derive the same placement (the same node ids and R), so this one is
//!   loaded with the routed ring's map.
//!
//! Measured: commands answered per second, and the CPU time (user + system, from `/proc`) of
//! all the ring's processes over the same seconds, giving **ops per CPU-second of the whole
//! cluster**, the figure that must not fall as N grows (each command costs its R replicas the
//! same whatever N: no traffic to all nodes per key). On a machine of few cores throughput
//! itself cannot grow with N: the nodes share the cores. Beside it, the cores the ring keeps
//! busy with no load (read just before the load), a cost that grows with N whatever the load
//! (each node's timers and its links to every other node). After loading, each node's keys
//! (DBSIZE, and `logless_ring_keys_owned`) and resident memory: **its share of the keys
//! against R/N**.
//!
//! Results in `--out` ([`report`]): `points.csv`, `nodes.csv`, `results.json`, `ring.png` and
//! `summary.md`.
//!
//! `--join` runs the other job instead: the throughput timeline while a node joins a loaded
//! ring of `--join-nodes` ([`join`]).
pub mod cluster;
pub mod join;
pub mod join_report;
pub mod load;
pub mod report;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressStyle};
use serde::Serialize;

use self::cluster::{Ring, Series, SlotMap};
use self::load::{Load, Routing};

/// Every value written (SET and the load): 16 bytes that INCR reads as an integer.
pub const VALUE: &[u8; 16] = b"1000000000000000";
/// How long the nodes may take after the load until every key is on all its R replicas (the
/// last replica of a write may still be on its way when the quorum answered); their keys are
/// counted then, or when this has passed.
const SETTLE: Duration = Duration::from_secs(5);

/// The options of `logless bench ring`.
#[derive(clap::Args, Clone, Debug)]
pub struct RingArgs {
    /// The `logless` binary (default: beside this program, else `target/release/logless`).
    #[arg(long)]
    pub logless: Option<PathBuf>,
    /// The ring sizes N, comma-separated (each at least --replication).
    #[arg(long, value_delimiter = ',', default_values_t = [3, 5, 9])]
    pub nodes: Vec<u16>,
    /// Each key's replicas, R: 3, 5 or 7.
    #[arg(long, default_value_t = 3)]
    pub replication: u8,
    /// Keys loaded before the load runs (values of 16 bytes).
    #[arg(long, default_value_t = 100_000)]
    pub keys: u64,
    /// The commands' weights: `set=W,get=W,incr=W` (any of them; those left out weigh 0).
    #[arg(long, value_delimiter = ',', default_values_t = ["set=25".to_string(), "get=50".to_string(), "incr=25".to_string()])]
    pub mix: Vec<String>,
    /// Closed-loop clients (each with a connection to every node), the same at every N.
    #[arg(long, default_value_t = 16)]
    pub clients: u32,
    /// Instead of --clients: this many clients per node (K·N at N nodes), so that every node
    /// has the same commands in flight at every N.
    #[arg(long, conflicts_with = "clients")]
    pub clients_per_node: Option<u32>,
    /// Commands each client has in flight.
    #[arg(long, default_value_t = 4)]
    pub pipeline: u32,
    /// Seconds counted per point (after a warm-up of one second, or as many as counted if fewer).
    #[arg(long, default_value_t = 10.0)]
    pub seconds: f64,
    /// Only these series, comma-separated: routed, any-node (both if none).
    #[arg(long, value_delimiter = ',')]
    pub series: Vec<String>,
    /// The nodes' durability: memory, mmap or sync.
    #[arg(long, default_value = "mmap")]
    pub durability: String,
    /// Where the results go.
    #[arg(long, default_value = "ring-results")]
    pub out: PathBuf,
    /// Instead of the ring sizes: a node joins a loaded ring of --join-nodes (the throughput
    /// timeline while its data moves; --series, --replication, --mix, --clients, --pipeline
    /// and --durability apply, --nodes, --keys and --seconds do not).
    #[arg(long)]
    pub join: bool,
    /// --join: the ring's members before the join (one more node is added).
    #[arg(long, default_value_t = 5)]
    pub join_nodes: u16,
    /// --join: keys loaded before the join (values of 16 bytes).
    #[arg(long, default_value_t = 300_000)]
    pub join_keys: u64,
    /// --join: seconds of load before the node is added (after one second of warm-up).
    #[arg(long, default_value_t = 10.0)]
    pub baseline_seconds: f64,
    /// --join: seconds of load after the ring took the node.
    #[arg(long, default_value_t = 5.0)]
    pub tail_seconds: f64,
}

/// The weights of the commands sent.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Mix {
    /// SET of a loaded key to [`VALUE`].
    pub set: u32,
    /// GET of a loaded key.
    pub get: u32,
    /// INCR of a loaded key.
    pub incr: u32,
}

impl Mix {
    /// Parses `set=W,get=W,incr=W` (as separate items); at least one weight must be positive.
    pub fn parse(items: &[String]) -> Result<Mix, String> {
        let mut mix = Mix::default();
        for item in items {
            let (name, weight) = item
                .split_once('=')
                .ok_or_else(|| format!("--mix {item:?}: expected COMMAND=WEIGHT"))?;
            let weight: u32 = weight
                .trim()
                .parse()
                .map_err(|_| format!("--mix {item:?}: the weight is not a whole number"))?;
            let slot = match name.trim().to_ascii_lowercase().as_str() {
                "set" => &mut mix.set,
                "get" => &mut mix.get,
                "incr" => &mut mix.incr,
                other => {
                    return Err(format!(
                        "--mix: no command {other:?}: the commands are set, get and incr"
                    ))
                }
            };
            *slot = weight;
        }
        if mix.total() == 0 {
            return Err("--mix: every weight is 0".into());
        }
        Ok(mix)
    }

    /// The weights' sum.
    pub fn total(&self) -> u32 {
        self.set + self.get + self.incr
    }

    /// The command a draw `r` below [`Mix::total`] picks, on `key`.
    pub fn command(&self, r: u32, key: String) -> Vec<String> {
        if r < self.set {
            vec![
                "SET".into(),
                key,
                String::from_utf8_lossy(VALUE).into_owned(),
            ]
        } else if r < self.set + self.get {
            vec!["GET".into(), key]
        } else {
            vec!["INCR".into(), key]
        }
    }

    /// `set=25,get=50,incr=25`.
    pub fn describe(&self) -> String {
        format!("set={},get={},incr={}", self.set, self.get, self.incr)
    }
}

/// The name of loaded key `i`.
pub fn key(i: u64) -> String {
    format!("ring:{i:09}")
}

/// The checked settings of a run.
#[derive(Clone, Debug, Serialize)]
pub struct Settings {
    /// Ring sizes, ascending.
    pub nodes: Vec<u16>,
    /// R.
    pub replication: u8,
    /// Keys loaded.
    pub keys: u64,
    /// The commands' weights.
    pub mix: Mix,
    /// Closed-loop clients.
    pub clients: u32,
    /// Clients per node instead, if given.
    pub clients_per_node: Option<u32>,
    /// Commands in flight per client.
    pub pipeline: u32,
    /// Seconds counted per point.
    pub seconds: f64,
    /// The series run, in order.
    pub series: Vec<Series>,
    /// The nodes' durability.
    pub durability: String,
}

impl Settings {
    /// Checks `args`; an error names the bad option.
    pub fn from_args(args: &RingArgs) -> Result<Settings, String> {
        let r = args.replication;
        if ![3, 5, 7].contains(&r) {
            return Err(format!("--replication must be 3, 5 or 7, not {r}"));
        }
        let mut nodes = args.nodes.clone();
        nodes.sort_unstable();
        nodes.dedup();
        if nodes.is_empty() {
            return Err("--nodes: no ring size".into());
        }
        if let Some(n) = nodes.iter().find(|&&n| n < u16::from(r) || n > 64) {
            return Err(format!(
                "--nodes: a ring of {n} cannot have {r} replicas per key (N from R to 64)"
            ));
        }
        for s in &args.series {
            if !Series::ALL.iter().any(|k| k.name() == s) {
                return Err(format!(
                    "no series {s:?}: the series are {}",
                    Series::ALL.map(Series::name).join(", ")
                ));
            }
        }
        let series = Series::ALL
            .into_iter()
            .filter(|k| args.series.is_empty() || args.series.iter().any(|s| s == k.name()))
            .collect();
        if args.seconds.is_nan() || args.seconds <= 0.0 {
            return Err("--seconds must be positive".into());
        }
        if args.clients == 0
            || args.clients_per_node == Some(0)
            || args.pipeline == 0
            || args.keys == 0
        {
            return Err(
                "--clients, --clients-per-node, --pipeline and --keys must be at least 1".into(),
            );
        }
        Ok(Settings {
            nodes,
            replication: r,
            keys: args.keys,
            mix: Mix::parse(&args.mix)?,
            clients: args.clients,
            clients_per_node: args.clients_per_node,
            pipeline: args.pipeline,
            seconds: args.seconds,
            series,
            durability: args.durability.clone(),
        })
    }

    /// The clients of a ring of `n` nodes.
    pub fn clients_for(&self, n: u16) -> u32 {
        self.clients_per_node
            .map_or(self.clients, |k| k * u32::from(n))
    }

    /// `16 clients` or `4 clients per node`.
    pub fn describe_clients(&self) -> String {
        match self.clients_per_node {
            Some(k) => format!("{k} clients per node"),
            None => format!("{} clients", self.clients),
        }
    }
}

/// One node's keys and memory after the load.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct NodeRow {
    /// The series whose ring it belongs to.
    pub series: Series,
    /// Nodes in that ring.
    pub nodes: u16,
    /// This node (from 1).
    pub node: u16,
    /// What it holds.
    #[serde(flatten)]
    pub held: cluster::Held,
    /// Its resident memory before the load, bytes.
    pub rss_empty_bytes: u64,
    /// DBSIZE ÷ the keys loaded.
    pub share: f64,
    /// R ÷ N, the share it should hold.
    pub expected_share: f64,
}

/// Everything measured in one run.
#[derive(Debug, Serialize)]
pub struct Results {
    /// The command line (options only).
    pub command: String,
    /// The settings.
    pub settings: Settings,
    /// `/proc/loadavg` before and after the run.
    pub load_average: (String, String),
    /// One per N and series.
    pub points: Vec<load::Point>,
    /// One per node of every ring.
    pub nodes: Vec<NodeRow>,
}

/// `/proc/loadavg`'s three averages.
pub(crate) fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "unknown".into())
}

/// Loads `keys` keys (the [`key`] names, [`VALUE`]) into `ring`, each sent to its node by
/// `map`, or without one through each of the first `members` nodes in turn, then waits (up to `settle`) until the
/// nodes hold `replication` copies of each; returns what each node holds then.
pub(super) fn load_settled(
    ring: &Ring,
    keys: u64,
    replication: u8,
    map: Option<&SlotMap>,
    members: usize,
    settle: Duration,
    label: &str,
) -> Result<Vec<cluster::Held>, String> {
    let loading = format!("{label}: loading");
    match map {
        Some(map) => ring.load(keys, key, |k| map.node_of(k), VALUE, loading)?,
        None => {
            let next = std::sync::atomic::AtomicUsize::new(0);
            let node_of =
                |_: &str| next.fetch_add(1, std::sync::atomic::Ordering::Relaxed) % members;
            ring.load(keys, key, node_of, VALUE, loading)?
        }
    }
    let copies = keys * u64::from(replication);
    let settled = Instant::now() + settle;
    let mut held = ring.held();
    while held.iter().map(|h| h.dbsize).sum::<u64>() < copies && Instant::now() < settled {
        std::thread::sleep(Duration::from_millis(100));
        held = ring.held();
    }
    Ok(held)
}

/// The command as run, options only: the program's path names the machine's checkout.
fn command_line() -> String {
    std::iter::once("logless bench ring".to_string())
        .chain(std::env::args().skip(1))
        .collect::<Vec<_>>()
        .join(" ")
}

/// Runs every point and writes the results.
pub fn run(args: &RingArgs) -> Result<(), String> {
    if args.join {
        return join::run(args);
    }
    let settings = Settings::from_args(args)?;
    let bin = crate::space::logless_binary(args.logless.as_deref())?;
    std::fs::create_dir_all(&args.out).map_err(|e| format!("{}: {e}", args.out.display()))?;
    let mut results = Results {
        command: command_line(),
        settings: settings.clone(),
        load_average: (load_average(), String::new()),
        points: Vec::new(),
        nodes: Vec::new(),
    };
    println!(
        "ring: N = {:?}, R = {}, {} keys, mix {}, {} × {} in flight, {} s per point",
        settings.nodes,
        settings.replication,
        settings.keys,
        settings.mix.describe(),
        settings.describe_clients(),
        settings.pipeline,
        settings.seconds
    );
    let total = settings.nodes.len() * settings.series.len();
    for &n in &settings.nodes {
        // The routed ring's map, which the any-node ring of the same N shares.
        let mut map: Option<SlotMap> = None;
        for &series in &settings.series {
            let label = format!(
                "N={n} {} ({}/{total})",
                series.name(),
                results.points.len() + 1
            );
            let (point, rows) = run_point(&bin, &settings, n, series, &mut map, &label)?;
            println!(
                "{label}: {:.0} ops/s, {:.2} cores, {:.0} ops per CPU-s, {:.2} forwarded per op, \
                 {} errors",
                point.ops_per_s,
                point.cores,
                point.ops_per_cpu_s,
                point.forwarded_share,
                point.errors
            );
            results.points.push(point);
            results.nodes.extend(rows);
            results.load_average.1 = load_average();
            report::write(&args.out, &results)?;
        }
    }
    let summary = report::write(&args.out, &results)?;
    println!("{summary}");
    println!("results in {}", args.out.display());
    Ok(())
}

/// One ring: started, loaded, its nodes' keys read, measured.
fn run_point(
    bin: &std::path::Path,
    s: &Settings,
    n: u16,
    series: Series,
    map: &mut Option<SlotMap>,
    label: &str,
) -> Result<(load::Point, Vec<NodeRow>), String> {
    let mut ring = Ring::start(bin, n, s.replication, series, &s.durability)?;
    if series == Series::Routed {
        *map = Some(ring.slot_map()?);
    }
    let empty = ring.held();
    let held = load_settled(
        &ring,
        s.keys,
        s.replication,
        map.as_ref(),
        usize::from(n),
        SETTLE,
        label,
    )?;
    let rows = held
        .into_iter()
        .zip(empty)
        .enumerate()
        .map(|(i, (held, empty))| NodeRow {
            series,
            nodes: n,
            node: i as u16 + 1,
            share: held.dbsize as f64 / s.keys as f64,
            expected_share: f64::from(s.replication) / f64::from(n),
            rss_empty_bytes: empty.rss_bytes,
            held,
        })
        .collect();
    let by_node = map
        .as_ref()
        .map(|m| load::by_node(m, usize::from(n), s.keys, key));
    let routing = match (series, &by_node) {
        (Series::Routed, Some(by_node)) => Routing::Routed(by_node),
        _ => Routing::AnyNode { keys: s.keys },
    };
    let bar = ProgressBar::new(1);
    bar.set_style(
        ProgressStyle::with_template("{msg} [{bar:40}] {elapsed}")
            .expect("a valid template")
            .progress_chars("=> "),
    );
    bar.set_message(format!("{label}: measuring"));
    let load = Load {
        seconds: s.seconds,
        clients: s.clients_for(n),
        pipeline: s.pipeline,
        mix: s.mix,
    };
    let point = load::measure(&ring, series, s.replication, &routing, &key, &load, &bar);
    bar.finish_and_clear();
    if let Some(died) = ring.dead() {
        return Err(format!("{label}: {died}"));
    }
    Ok((point?, rows))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mix_is_read_and_bad_ones_are_named() {
        let items = |s: &str| s.split(',').map(String::from).collect::<Vec<_>>();
        let mix = Mix::parse(&items("set=1,get=2,INCR=3")).unwrap();
        assert_eq!((mix.set, mix.get, mix.incr, mix.total()), (1, 2, 3, 6));
        assert_eq!(mix.command(0, "k".into())[0], "SET");
        assert_eq!(mix.command(1, "k".into())[0], "GET");
        assert_eq!(mix.command(2, "k".into())[0], "GET");
        assert_eq!(mix.command(5, "k".into())[0], "INCR");
        assert_eq!(
            Mix::parse(&items("get=1")).unwrap().describe(),
            "set=0,get=1,incr=0"
        );
        assert!(Mix::parse(&items("del=1"))
            .unwrap_err()
            .contains("no command \"del\""));
        assert!(Mix::parse(&items("get")).is_err());
        assert!(Mix::parse(&items("get=x")).is_err());
        assert!(Mix::parse(&items("get=0"))
            .unwrap_err()
            .contains("every weight is 0"));
    }

    #[test]
    fn the_value_is_an_integer_of_sixteen_bytes() {
        assert_eq!(VALUE.len(), 16);
        assert!(std::str::from_utf8(VALUE).unwrap().parse::<i64>().is_ok());
    }
}
