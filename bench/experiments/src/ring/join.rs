//! `logless bench ring --join`: the throughput timeline while a node joins a loaded ring (issue
//! 28, "Performance": a node added to a loaded ring takes its share with throughput dipping by
//! no more than 20% while data moves).
//!
//! For each series, a ring of `--join-nodes` N members (5) at R = `--replication` is started
//! with one spare node in every peer list but not in the ring ([`Ring::start_with_spare`]),
//! `--join-keys` keys of 16 bytes are loaded, and `--clients` closed-loop clients send the mix
//! to the members:
//!
//! * **routed**: the ring in cluster mode; each client sends each batch to one node with keys
//!   whose first replica that node is by the slot map it holds, read from CLUSTER SLOTS; a
//!   `MOVED` reply is counted as a redirect (not as a command answered) and makes the clients
//!   read the map again from the node it names (at most every [`REFRESH_EVERY`]), so they
//!   follow the map as the ring changes;
//! * **any-node**: a plain ring; each batch goes to the next member, which forwards what it
//!   does not hold; the spare is not sent to (a new node is given clients once it is in).
//!
//! After `--baseline-seconds` (and one second of warm-up) `logless cluster add` of the spare is
//! run against the first node (and run again while the coordinator gives up waiting for the
//! movers, after about a minute, leaving the ring in its joint stage); the move lasts until it
//! returns (the ring at `Stable(e+1)`, every node's mover done), and the clients go on for
//! `--tail-seconds` more. Every [`SAMPLE`] the commands answered since the last sample (in
//! all and per node), the errors and redirects are recorded, with every node's `/status` (its
//! stage, keys moved and in transit) as last read by a thread that reads them over and over.
//! Reported ([`report`]): the baseline's median, the minimum (of single samples and of one
//! second's windows) and median during the move, the dip, the move's duration, keys moved
//! and the bytes the movers paced, each node's keys after, and whether the goal was met.
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use logless_harness::probe;
use logless_placement::{key_slot, SLOTS};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use serde::Serialize;

use crate::psmr::load::Conn;

use super::cluster::{ask_value, Ring, Series, SlotMap};
use super::join_report as report;
use super::{key, load_settled, Mix, RingArgs, VALUE};

/// How often the timeline is sampled.
pub const SAMPLE: Duration = Duration::from_millis(250);
/// Load before this is not part of the baseline.
const WARMUP: Duration = Duration::from_secs(1);
/// The least time between two reads of the slot map after `MOVED`.
pub const REFRESH_EVERY: Duration = Duration::from_millis(100);
/// How long a node's `/status` may take to answer a sample.
const STATUS_TIMEOUT: Duration = Duration::from_secs(2);
/// How many times `cluster add` is asked again when it gives up waiting (the coordinator waits
/// about a minute for the movers, then leaves the ring in its joint stage; the same command
/// waits again).
const ADD_ATTEMPTS: u32 = 5;
/// What the movers' pacing counts per key besides its bytes (node/src/ring_mover.rs).
const MOVER_BYTES_PER_KEY: u64 = 64;
/// How long the nodes may take after the load until every key is on all its R replicas.
const SETTLE: Duration = Duration::from_secs(10);
/// The throughput the goal allows during the move, as a share of the baseline's median.
pub const GOAL: f64 = 0.8;

/// The checked settings of a join run.
#[derive(Clone, Debug, Serialize)]
pub struct JoinSettings {
    /// Members before the join (the spare is node `nodes + 1`).
    pub nodes: u16,
    /// R.
    pub replication: u8,
    /// Keys loaded.
    pub keys: u64,
    /// The commands' weights.
    pub mix: Mix,
    /// Closed-loop clients.
    pub clients: u32,
    /// Commands in flight per client.
    pub pipeline: u32,
    /// Seconds of load before the add (after the warm-up).
    pub baseline_seconds: f64,
    /// Seconds of load after the add returned.
    pub tail_seconds: f64,
    /// The series run, in order.
    pub series: Vec<Series>,
    /// The nodes' durability.
    pub durability: String,
}

impl JoinSettings {
    /// Checks `args` for a join run; an error names the bad option.
    pub fn from_args(args: &RingArgs) -> Result<JoinSettings, String> {
        let base = super::Settings::from_args(args)?;
        let r = base.replication;
        let n = args.join_nodes;
        // A list of R nodes is no ring (every node holds every key, and there is no stage
        // register to change).
        if n <= u16::from(r) || n > 63 {
            return Err(format!(
                "--join-nodes: a ring of {n} with {r} replicas per key cannot take a node \
                 (N from R + 1 to 63)"
            ));
        }
        if args.durability == "memory" {
            return Err(
                "--join needs nodes that keep their stores over a restart: --durability mmap or \
                 sync, not memory"
                    .into(),
            );
        }
        for (name, value) in [
            ("--baseline-seconds", args.baseline_seconds),
            ("--tail-seconds", args.tail_seconds),
        ] {
            if value.is_nan() || value <= 0.0 {
                return Err(format!("{name} must be positive"));
            }
        }
        if args.join_keys == 0 {
            return Err("--join-keys must be at least 1".into());
        }
        Ok(JoinSettings {
            nodes: n,
            replication: r,
            keys: args.join_keys,
            mix: base.mix,
            clients: args.clients,
            pipeline: args.pipeline,
            baseline_seconds: args.baseline_seconds,
            tail_seconds: args.tail_seconds,
            series: base.series,
            durability: args.durability.clone(),
        })
    }
}

/// One point of the timeline.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Sample {
    /// Seconds since the clients started (the end of the interval counted).
    pub t_s: f64,
    /// Commands answered per second over the interval.
    pub ops_per_s: f64,
    /// The same per node the clients sent to (node 1 first; the spare last).
    pub node_ops_per_s: Vec<f64>,
    /// Error replies in the interval (not `MOVED`).
    pub errors: u64,
    /// `MOVED` replies in the interval.
    pub redirects: u64,
    /// Keys the nodes' movers wrote through so far (summed over the nodes).
    pub keys_moved: u64,
    /// Keys whose write-through was under way (summed).
    pub keys_in_transit: u64,
    /// The stages the nodes reported, distinct, in node order, `/`-separated (`?` for a node
    /// that did not answer).
    pub stage: String,
}

/// One node after the run.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct NodeAfter {
    /// Its id (the spare is the last).
    pub node: u16,
    /// DBSIZE after the tail.
    pub dbsize: u64,
    /// DBSIZE ÷ the keys loaded.
    pub share: f64,
    /// `logless_ring_keys_moved_total` after the tail.
    pub keys_moved: u64,
}

/// One series' join.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct JoinRun {
    /// How clients reached the replicas.
    pub series: Series,
    /// Members before the join.
    pub nodes: u16,
    /// The node added.
    pub added: u16,
    /// The samples, in time order.
    pub samples: Vec<Sample>,
    /// When `cluster add` was run, seconds on the samples' clock.
    pub move_start_s: f64,
    /// When it returned (the last time, if asked again), or the end of the run if it never did.
    pub move_end_s: f64,
    /// Whether it returned success.
    pub added_ok: bool,
    /// How many times it was asked.
    pub add_attempts: u32,
    /// What it printed last (stdout, then stderr).
    pub add_output: String,
    /// The median of the samples between the warm-up and the add.
    pub baseline_ops_per_s: f64,
    /// The smallest sample during the move.
    pub move_min_ops_per_s: f64,
    /// The smallest mean of one second's consecutive samples during the move.
    pub move_min_1s_ops_per_s: f64,
    /// The median of the samples during the move.
    pub move_median_ops_per_s: f64,
    /// The smallest sample of the baseline ÷ its median: how much a sample varies with no move.
    pub baseline_min_ratio: f64,
    /// The median of the samples of the tail.
    pub tail_ops_per_s: f64,
    /// Keys the movers wrote through (the last sample's count).
    pub keys_moved: u64,
    /// The bytes the movers' pacing counted for them: key, value and 64 per key.
    pub bytes_moved: u64,
    /// Errors and redirects over the whole run.
    pub errors: u64,
    /// `MOVED` replies over the whole run.
    pub redirects: u64,
    /// The first error reply seen, if any.
    pub first_error: Option<String>,
    /// Each node's keys after the tail.
    pub after: Vec<NodeAfter>,
}

impl JoinRun {
    /// How long the move took, s.
    pub fn move_s(&self) -> f64 {
        self.move_end_s - self.move_start_s
    }

    /// 1 − the smallest 1 s window ÷ the baseline: the dip the goal bounds by 0.2.
    pub fn dip(&self) -> f64 {
        ratio_dip(self.move_min_1s_ops_per_s, self.baseline_ops_per_s)
    }

    /// The same for single samples.
    pub fn dip_single(&self) -> f64 {
        ratio_dip(self.move_min_ops_per_s, self.baseline_ops_per_s)
    }

    /// The same for the move's median.
    pub fn dip_median(&self) -> f64 {
        ratio_dip(self.move_median_ops_per_s, self.baseline_ops_per_s)
    }

    /// Whether the add went through and no window of one second during it fell below
    /// [`GOAL`] of the baseline.
    pub fn goal_met(&self) -> bool {
        self.added_ok && self.move_min_1s_ops_per_s >= GOAL * self.baseline_ops_per_s
    }
}

fn ratio_dip(during: f64, baseline: f64) -> f64 {
    if baseline > 0.0 {
        1.0 - during / baseline
    } else {
        0.0
    }
}

/// Everything measured in one join run.
#[derive(Debug, Serialize)]
pub struct JoinResults {
    /// The command line (options only).
    pub command: String,
    /// The settings.
    pub settings: JoinSettings,
    /// `/proc/loadavg` before and after the run.
    pub load_average: (String, String),
    /// One per series.
    pub runs: Vec<JoinRun>,
}

/// Runs the join of every series and writes the results.
pub fn run(args: &RingArgs) -> Result<(), String> {
    let settings = JoinSettings::from_args(args)?;
    let bin = crate::space::logless_binary(args.logless.as_deref())?;
    std::fs::create_dir_all(&args.out).map_err(|e| format!("{}: {e}", args.out.display()))?;
    let mut results = JoinResults {
        command: super::command_line(),
        settings: settings.clone(),
        load_average: (super::load_average(), String::new()),
        runs: Vec::new(),
    };
    println!(
        "ring join: {} + 1 nodes, R = {}, {} keys, mix {}, {} clients × {} in flight, \
         {} s baseline, {} s tail",
        settings.nodes,
        settings.replication,
        settings.keys,
        settings.mix.describe(),
        settings.clients,
        settings.pipeline,
        settings.baseline_seconds,
        settings.tail_seconds
    );
    for &series in &settings.series {
        let joined = join(&bin, &settings, series)?;
        println!(
            "{}: baseline {:.0} ops/s; during the move (add took {:.1} s, {} keys) min {:.0} \
             (1 s: {:.0}), median {:.0}: dip {:.1}% (1 s), goal {}",
            series.name(),
            joined.baseline_ops_per_s,
            joined.move_s(),
            joined.keys_moved,
            joined.move_min_ops_per_s,
            joined.move_min_1s_ops_per_s,
            joined.move_median_ops_per_s,
            100.0 * joined.dip(),
            if joined.goal_met() { "met" } else { "not met" }
        );
        results.runs.push(joined);
        results.load_average.1 = super::load_average();
        report::write(&args.out, &results)?;
    }
    let summary = report::write(&args.out, &results)?;
    println!("{summary}");
    println!("results in {}", args.out.display());
    Ok(())
}

/// Where routed clients send which keys: the map they hold, and for each node the slots it is
/// first replica of that hold loaded keys.
struct Routes {
    generation: u64,
    slots_of: Vec<Vec<u16>>,
}

impl Routes {
    fn new(generation: u64, map: SlotMap, nodes: usize, slot_keys: &[Vec<u64>]) -> Routes {
        let mut slots_of = vec![Vec::new(); nodes];
        for slot in 0..SLOTS {
            if !slot_keys[usize::from(slot)].is_empty() {
                slots_of[map.node_of_slot(slot)].push(slot);
            }
        }
        Routes {
            generation,
            slots_of,
        }
    }
}

/// What the clients share: the routes (routed), the counters the sampler reads.
struct Shared<'a> {
    series: Series,
    clients: Vec<SocketAddr>,
    members: usize,
    keys: u64,
    slot_keys: &'a [Vec<u64>],
    routes: RwLock<Arc<Routes>>,
    last_refresh: Mutex<Instant>,
    ops: Vec<AtomicU64>,
    errors: AtomicU64,
    redirects: AtomicU64,
    first_error: Mutex<Option<String>>,
    stop: AtomicBool,
    mix: Mix,
    pipeline: u32,
}

impl Shared<'_> {
    /// Reads the slot map again from `from` after a `MOVED` met with the map of `generation`,
    /// unless another client did since or one did less than [`REFRESH_EVERY`] ago.
    fn refresh(&self, generation: u64, from: SocketAddr) {
        let Ok(mut last) = self.last_refresh.try_lock() else {
            return;
        };
        if self.routes.read().expect("routes").generation != generation
            || last.elapsed() < REFRESH_EVERY
        {
            return;
        }
        *last = Instant::now();
        let map = ask_value(from, &["CLUSTER", "SLOTS"])
            .and_then(|reply| SlotMap::from_reply(&reply, &self.clients));
        if let Ok(map) = map {
            let routes = Routes::new(generation + 1, map, self.clients.len(), self.slot_keys);
            *self.routes.write().expect("routes") = Arc::new(routes);
        }
    }
}

/// One closed-loop client until `shared.stop`.
fn client(id: u32, shared: &Shared<'_>) -> Result<(), String> {
    let mut conns = shared
        .clients
        .iter()
        .map(|&addr| Conn::open(addr))
        .collect::<Result<Vec<_>, _>>()?;
    let mut rng = SmallRng::seed_from_u64(u64::from(id) * 7919 + 11);
    let mut turn = id as usize;
    while !shared.stop.load(Ordering::Relaxed) {
        turn = turn.wrapping_add(1);
        let (node, generation, batch) = match shared.series {
            Series::AnyNode => {
                let node = turn % shared.members;
                let batch: Vec<Vec<String>> = (0..shared.pipeline)
                    .map(|_| {
                        let k = key(rng.random_range(0..shared.keys));
                        shared
                            .mix
                            .command(rng.random_range(0..shared.mix.total()), k)
                    })
                    .collect();
                (node, 0, batch)
            }
            Series::Routed => {
                let routes = shared.routes.read().expect("routes").clone();
                let serving: Vec<usize> = (0..routes.slots_of.len())
                    .filter(|&n| !routes.slots_of[n].is_empty())
                    .collect();
                let node = serving[turn % serving.len()];
                let slots = &routes.slots_of[node];
                let batch: Vec<Vec<String>> = (0..shared.pipeline)
                    .map(|_| {
                        let slot = slots[rng.random_range(0..slots.len())];
                        let keys = &shared.slot_keys[usize::from(slot)];
                        let k = key(keys[rng.random_range(0..keys.len())]);
                        shared
                            .mix
                            .command(rng.random_range(0..shared.mix.total()), k)
                    })
                    .collect();
                (node, routes.generation, batch)
            }
        };
        let replies = conns[node].ask(&batch)?;
        let mut good = 0;
        for reply in &replies {
            if reply.starts_with('+')
                || reply.starts_with(':')
                || (reply.starts_with('$') && reply != "$-1")
            {
                good += 1;
            } else if let Some(moved) = reply.strip_prefix("-MOVED ") {
                shared.redirects.fetch_add(1, Ordering::Relaxed);
                let to = moved
                    .split_whitespace()
                    .nth(1)
                    .and_then(|a| a.parse::<SocketAddr>().ok())
                    .unwrap_or(shared.clients[0]);
                shared.refresh(generation, to);
            } else {
                shared.errors.fetch_add(1, Ordering::Relaxed);
                let mut first = shared.first_error.lock().expect("first error");
                first.get_or_insert_with(|| reply.clone());
            }
        }
        shared.ops[node].fetch_add(good, Ordering::Relaxed);
    }
    Ok(())
}

/// What one node's `/status` says of the ring: its stage, keys moved and in transit.
fn ring_status(http: SocketAddr) -> Option<(String, u64, u64)> {
    let (_, body) = probe::http_get(http, "/status", STATUS_TIMEOUT).ok()?;
    let status: serde_json::Value = serde_json::from_str(&body).ok()?;
    let ring = status.get("ring")?;
    Some((
        ring.get("stage")?.as_str()?.to_string(),
        ring.get("keys_moved")?.as_u64()?,
        ring.get("keys_in_transit")?.as_u64()?,
    ))
}

/// What every node's `/status` says: the distinct stages in node order, `/`-separated (`?`
/// for a node that did not answer), and the keys moved and in transit, summed.
fn read_status(https: &[SocketAddr]) -> (String, u64, u64) {
    let (mut stages, mut moved, mut transit) = (Vec::<String>::new(), 0, 0);
    for &http in https {
        let (stage, m, t) = ring_status(http).unwrap_or(("?".into(), 0, 0));
        if !stages.contains(&stage) {
            stages.push(stage);
        }
        moved += m;
        transit += t;
    }
    (stages.join("/"), moved, transit)
}

/// `logless cluster --http HTTP add NODE`, asked again while it gives up waiting: whether it
/// succeeded, the attempts, and its last output.
fn add(bin: &std::path::Path, http: SocketAddr, node: u16) -> (bool, u32, String) {
    let mut shown = String::new();
    for attempt in 1..=ADD_ATTEMPTS {
        let output = std::process::Command::new(bin)
            .args([
                "cluster",
                "--http",
                &http.to_string(),
                "add",
                &node.to_string(),
            ])
            .output();
        match output {
            Ok(output) => {
                shown = format!(
                    "{}{}",
                    String::from_utf8_lossy(&output.stdout),
                    String::from_utf8_lossy(&output.stderr)
                )
                .trim()
                .to_string();
                if output.status.success() {
                    return (true, attempt, shown);
                }
                // The coordinator gave up waiting for the movers, the ring left in its joint
                // stage: the same command waits again. Any other refusal is final.
                if !shown.contains("run the same change again") {
                    return (false, attempt, shown);
                }
            }
            Err(e) => return (false, attempt, format!("{}: {e}", bin.display())),
        }
    }
    (false, ADD_ATTEMPTS, shown)
}

/// The median of `values` (0 if none).
pub fn median(values: &[f64]) -> f64 {
    let mut v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(f64::total_cmp);
    let mid = v.len() / 2;
    if v.len() % 2 == 1 {
        v[mid]
    } else {
        (v[mid - 1] + v[mid]) / 2.0
    }
}

/// The samples of `samples` whose interval lies within `from..=to` seconds.
fn within(samples: &[Sample], from: f64, to: f64) -> Vec<f64> {
    let step = SAMPLE.as_secs_f64();
    samples
        .iter()
        .filter(|s| s.t_s - step >= from - 1e-9 && s.t_s <= to + 1e-9)
        .map(|s| s.ops_per_s)
        .collect()
}

/// The smallest mean of `window` consecutive values (of all of them, if fewer).
fn min_window(values: &[f64], window: usize) -> f64 {
    if values.is_empty() {
        return 0.0;
    }
    let window = window.clamp(1, values.len());
    values
        .windows(window)
        .map(|w| w.iter().sum::<f64>() / w.len() as f64)
        .fold(f64::MAX, f64::min)
}

/// Reads the figures of a finished timeline.
#[allow(clippy::too_many_arguments)]
fn summarise(
    series: Series,
    nodes: u16,
    samples: Vec<Sample>,
    (move_start_s, move_end_s): (f64, f64),
    (added_ok, add_attempts, add_output): (bool, u32, String),
    (errors, redirects, first_error): (u64, u64, Option<String>),
    after: Vec<NodeAfter>,
) -> JoinRun {
    let warmup = WARMUP.as_secs_f64();
    let baseline = within(&samples, warmup, move_start_s);
    let during = within(&samples, move_start_s, move_end_s);
    let tail = within(&samples, move_end_s, f64::MAX);
    let per_second = (1.0 / SAMPLE.as_secs_f64()).round() as usize;
    let baseline_ops_per_s = median(&baseline);
    let keys_moved = samples.last().map_or(0, |s| s.keys_moved);
    let key_bytes = key(0).len() as u64 + VALUE.len() as u64 + MOVER_BYTES_PER_KEY;
    JoinRun {
        series,
        nodes,
        added: nodes + 1,
        move_start_s,
        move_end_s,
        added_ok,
        add_attempts,
        add_output,
        baseline_ops_per_s,
        move_min_ops_per_s: min_window(&during, 1),
        move_min_1s_ops_per_s: min_window(&during, per_second),
        move_median_ops_per_s: median(&during),
        baseline_min_ratio: if baseline_ops_per_s > 0.0 {
            min_window(&baseline, 1) / baseline_ops_per_s
        } else {
            0.0
        },
        tail_ops_per_s: median(&tail),
        keys_moved,
        bytes_moved: keys_moved * key_bytes,
        errors,
        redirects,
        first_error,
        after,
        samples,
    }
}

/// One series: the ring with a spare started and loaded, the clients run, the spare added.
fn join(bin: &std::path::Path, s: &JoinSettings, series: Series) -> Result<JoinRun, String> {
    let label = format!("join {}", series.name());
    let mut ring =
        Ring::start_with_spare(bin, s.nodes, true, s.replication, series, &s.durability)?;
    let clients = ring.clients();
    let members = usize::from(s.nodes);
    let map = match series {
        Series::Routed => Some(ring.slot_map()?),
        Series::AnyNode => None,
    };
    load_settled(
        &ring,
        s.keys,
        s.replication,
        map.as_ref(),
        members,
        SETTLE,
        &label,
    )?;
    let mut slot_keys = vec![Vec::new(); usize::from(SLOTS)];
    for i in 0..s.keys {
        slot_keys[usize::from(key_slot(key(i).as_bytes()).get())].push(i);
    }
    // Any-node clients pick keys of every slot and need no routes.
    let routes = match &map {
        Some(map) => Routes::new(0, map.clone(), clients.len(), &slot_keys),
        None => Routes {
            generation: 0,
            slots_of: Vec::new(),
        },
    };
    let shared = Shared {
        series,
        clients: clients.clone(),
        members,
        keys: s.keys,
        slot_keys: &slot_keys,
        routes: RwLock::new(Arc::new(routes)),
        last_refresh: Mutex::new(Instant::now() - REFRESH_EVERY),
        ops: (0..clients.len()).map(|_| AtomicU64::new(0)).collect(),
        errors: AtomicU64::new(0),
        redirects: AtomicU64::new(0),
        first_error: Mutex::new(None),
        stop: AtomicBool::new(false),
        mix: s.mix,
        pipeline: s.pipeline.max(1),
    };
    let https = ring.https();
    let added = s.nodes + 1;
    let baseline_end = WARMUP + Duration::from_secs_f64(s.baseline_seconds);
    let tail = Duration::from_secs_f64(s.tail_seconds);
    // The nodes' /status, read over and over by a thread of its own (a busy node may take a
    // while to answer): each sample takes the last read.
    let nodes_status = Mutex::new(read_status(&https));
    let status_stop = AtomicBool::new(false);
    let outcome = std::thread::scope(|scope| -> Result<_, String> {
        let workers: Vec<_> = (0..s.clients)
            .map(|c| {
                let shared = &shared;
                scope.spawn(move || {
                    let done = client(c, shared);
                    if done.is_err() {
                        // One client lost: stop the others too, the run is void.
                        shared.stop.store(true, Ordering::Relaxed);
                    }
                    done
                })
            })
            .collect();
        let status_reader = {
            let (nodes_status, status_stop, https) = (&nodes_status, &status_stop, &https);
            scope.spawn(move || {
                while !status_stop.load(Ordering::Relaxed) {
                    let read = read_status(https);
                    *nodes_status.lock().expect("status") = read;
                    std::thread::sleep(SAMPLE / 2);
                }
            })
        };
        let start = Instant::now();
        let mut samples = Vec::new();
        let mut last = (start, vec![0u64; clients.len()], 0u64, 0u64);
        let mut adding: Option<std::thread::ScopedJoinHandle<'_, (bool, u32, String)>> = None;
        let mut move_start: Option<f64> = None;
        let mut move_end: Option<(f64, (bool, u32, String))> = None;
        let mut at = start;
        loop {
            // The next tick of the grid, but at least half a sample after the last one: a
            // sampler that was kept off the core catches up without samples of almost no time
            // (which would read as no throughput).
            at += SAMPLE;
            let soonest = last.0 + SAMPLE / 2;
            while at < soonest {
                at += SAMPLE;
            }
            std::thread::sleep(at.saturating_duration_since(Instant::now()));
            let now = Instant::now();
            let ops: Vec<u64> = shared
                .ops
                .iter()
                .map(|o| o.load(Ordering::Relaxed))
                .collect();
            let errors = shared.errors.load(Ordering::Relaxed);
            let redirects = shared.redirects.load(Ordering::Relaxed);
            let secs = now.duration_since(last.0).as_secs_f64().max(1e-6);
            let node_ops_per_s: Vec<f64> = ops
                .iter()
                .zip(&last.1)
                .map(|(a, b)| (a - b) as f64 / secs)
                .collect();
            let t_s = now.duration_since(start).as_secs_f64();
            let (stage, moved, transit) = nodes_status.lock().expect("status").clone();
            samples.push(Sample {
                t_s,
                ops_per_s: node_ops_per_s.iter().sum(),
                node_ops_per_s,
                errors: errors - last.2,
                redirects: redirects - last.3,
                keys_moved: moved,
                keys_in_transit: transit,
                stage,
            });
            last = (now, ops, errors, redirects);
            if shared.stop.load(Ordering::Relaxed) {
                break;
            }
            let elapsed = now.duration_since(start);
            if move_start.is_none() && elapsed >= baseline_end {
                move_start = Some(elapsed.as_secs_f64());
                let http = https[0];
                adding = Some(scope.spawn(move || add(bin, http, added)));
            }
            if adding.as_ref().is_some_and(|a| a.is_finished()) {
                let done = adding.take().expect("a running add").join().unwrap_or((
                    false,
                    0,
                    "the add panicked".into(),
                ));
                move_end = Some((elapsed.as_secs_f64(), done));
            }
            if let Some((end, _)) = &move_end {
                if elapsed.as_secs_f64() >= end + tail.as_secs_f64() {
                    break;
                }
            }
        }
        shared.stop.store(true, Ordering::Relaxed);
        status_stop.store(true, Ordering::Relaxed);
        let _ = status_reader.join();
        for w in workers {
            w.join()
                .unwrap_or_else(|_| Err("a client panicked".into()))?;
        }
        let move_start = move_start.unwrap_or(0.0);
        let (move_end, added) = move_end.unwrap_or_else(|| {
            let end = samples.last().map_or(0.0, |s: &Sample| s.t_s);
            (
                end,
                (false, 0, "the run ended before the add returned".into()),
            )
        });
        Ok((samples, (move_start, move_end), added))
    });
    let (samples, window, added_outcome) = outcome.map_err(|e| ring.with_logs(e))?;
    if let Some(died) = ring.dead() {
        return Err(format!("{label}: {died}"));
    }
    let held = ring.held();
    let after = held
        .iter()
        .zip(&https)
        .enumerate()
        .map(|(i, (h, &http))| NodeAfter {
            node: i as u16 + 1,
            dbsize: h.dbsize,
            share: h.dbsize as f64 / s.keys as f64,
            keys_moved: ring_status(http).map_or(0, |r| r.1),
        })
        .collect();
    let first_error = shared.first_error.lock().expect("first error").clone();
    Ok(summarise(
        series,
        s.nodes,
        samples,
        window,
        added_outcome,
        (
            shared.errors.load(Ordering::Relaxed),
            shared.redirects.load(Ordering::Relaxed),
            first_error,
        ),
        after,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Samples every 250 ms for 12 s: 100 ops/s, but `dip` from 5 s to 5 + `secs` s.
    fn timeline(dip: f64, secs: f64) -> Vec<Sample> {
        (1..=48)
            .map(|i| {
                let t_s = f64::from(i) * 0.25;
                let low = t_s > 5.0 + 1e-9 && t_s <= 5.0 + secs + 1e-9;
                Sample {
                    t_s,
                    ops_per_s: if low { dip } else { 100.0 },
                    node_ops_per_s: vec![],
                    errors: 0,
                    redirects: 0,
                    keys_moved: 10,
                    keys_in_transit: 0,
                    stage: "Stable(1)".into(),
                }
            })
            .collect()
    }

    fn joined(samples: Vec<Sample>) -> JoinRun {
        summarise(
            Series::Routed,
            5,
            samples,
            (4.0, 9.0),
            (true, 1, "changed".into()),
            (0, 0, None),
            Vec::new(),
        )
    }

    #[test]
    fn a_second_below_the_goal_misses_it_and_a_shorter_dip_does_not() {
        let run = joined(timeline(70.0, 1.0));
        assert_eq!(run.baseline_ops_per_s, 100.0);
        assert_eq!(
            (run.move_min_ops_per_s, run.move_min_1s_ops_per_s),
            (70.0, 70.0)
        );
        assert!((run.dip() - 0.3).abs() < 1e-9 && !run.goal_met());
        assert_eq!(run.move_median_ops_per_s, 100.0);
        assert_eq!(run.move_s(), 5.0);
        assert_eq!(run.bytes_moved, 10 * (14 + 16 + 64));
        // Half a second at 70 averages 85 over a second: within the goal.
        let run = joined(timeline(70.0, 0.5));
        assert_eq!(run.move_min_ops_per_s, 70.0);
        assert!((run.move_min_1s_ops_per_s - 85.0).abs() < 1e-9);
        assert!(run.goal_met());
        // An add that did not go through never meets it.
        let mut run = joined(timeline(100.0, 0.0));
        run.added_ok = false;
        assert!(!run.goal_met());
    }

    #[test]
    fn medians_and_windows() {
        assert_eq!(median(&[]), 0.0);
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), 2.5);
        assert_eq!(min_window(&[], 4), 0.0);
        assert_eq!(min_window(&[5.0, 1.0, 1.0, 5.0], 2), 1.0);
        assert_eq!(min_window(&[2.0, 4.0], 4), 3.0);
    }
}
