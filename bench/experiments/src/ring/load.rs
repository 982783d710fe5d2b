//! The load of one point: closed-loop clients sending a mix of SET, GET and INCR of the loaded
//! keys, each batch to the next node in turn, and what the ring's processes spent on it.
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use indicatif::ProgressBar;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use serde::Serialize;

use crate::psmr::load::Conn;

use super::cluster::{Ring, Series, SlotMap};
use super::Mix;

/// Load before this (or before the counted seconds, if fewer) is not counted.
const WARMUP: Duration = Duration::from_millis(1_000);
/// How long the ring's CPU is read with no load, at most.
const IDLE: Duration = Duration::from_secs(2);
/// The counters of `/metrics` read at both ends of the counted seconds.
const COUNTERS: [&str; 4] = [
    "logless_ring_forwarded_total",
    "logless_reads_total",
    "logless_writes_total",
    "logless_fast_writes_total",
];
/// How often the progress bar moves while a point is measured.
const TICK: Duration = Duration::from_millis(100);

/// How hard the clients press.
#[derive(Clone, Copy, Debug)]
pub struct Load {
    /// Seconds counted.
    pub seconds: f64,
    /// Closed-loop clients.
    pub clients: u32,
    /// Commands each has in flight.
    pub pipeline: u32,
    /// The commands' shares.
    pub mix: Mix,
}

/// Where the clients send which keys.
pub enum Routing<'a> {
    /// Each batch to the next node, with keys whose first replica it is (`by_node[node]`:
    /// indices of the loaded keys).
    Routed(&'a [Vec<u64>]),
    /// Each batch to the next node, with keys of all the `keys` loaded.
    AnyNode {
        /// The loaded keys.
        keys: u64,
    },
}

impl Routing<'_> {
    fn key(&self, node: usize, rng: &mut SmallRng) -> u64 {
        match self {
            Routing::Routed(by_node) => {
                let mine = &by_node[node];
                mine[rng.random_range(0..mine.len())]
            }
            Routing::AnyNode { keys } => rng.random_range(0..*keys),
        }
    }
}

/// The keys `0..count` (named by `name`) grouped by the node `map` sends them to.
pub fn by_node(
    map: &SlotMap,
    nodes: usize,
    count: u64,
    name: impl Fn(u64) -> String,
) -> Vec<Vec<u64>> {
    let mut by_node = vec![Vec::new(); nodes];
    for i in 0..count {
        by_node[map.node_of(&name(i))].push(i);
    }
    by_node
}

/// One measured point.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Point {
    /// How clients reached the replicas.
    pub series: Series,
    /// Nodes in the ring.
    pub nodes: u16,
    /// Each key's replicas.
    pub replication: u8,
    /// Closed-loop clients.
    pub clients: u32,
    /// Seconds counted.
    pub seconds: f64,
    /// Commands answered (with a value, `+OK` or an integer) in them.
    pub ops: u64,
    /// Commands answered with an error (MOVED, TRYAGAIN, UNCERTAIN, …) or a GET answered nil.
    pub errors: u64,
    /// The first error reply seen, if any.
    pub first_error: Option<String>,
    /// Commands answered per second.
    pub ops_per_s: f64,
    /// CPU seconds (user + system) of all the ring's processes in the counted time.
    pub cpu_s: f64,
    /// `ops / cpu_s`: the figure that should not fall as N grows.
    pub ops_per_cpu_s: f64,
    /// Cores busy on average, `cpu_s / seconds`.
    pub cores: f64,
    /// Cores the ring kept busy with no load, just before it (timers, heartbeats, links).
    pub idle_cores: f64,
    /// Commands the nodes forwarded in the counted time, per command answered.
    pub forwarded_share: f64,
    /// Commands answered per batch the nodes' proposers completed (`logless_reads_total` +
    /// `logless_writes_total`): how much each round of the protocol carried.
    pub ops_per_batch: f64,
    /// The share of write batches completed in one round trip (`logless_fast_writes_total`).
    pub fast_write_share: f64,
    /// The 99th percentile of a batch's answer time, ms.
    pub p99_ms: f64,
}

/// What one client counted.
struct Counted {
    ops: u64,
    errors: u64,
    first_error: Option<String>,
    batches: Histogram<u64>,
}

/// The cores `ring` keeps busy with nothing to do, over `window`.
pub fn idle_cores(ring: &Ring, window: Duration) -> f64 {
    let before = ring.cpu_seconds();
    std::thread::sleep(window);
    (ring.cpu_seconds() - before) / window.as_secs_f64()
}

/// Runs `load` on `ring` (loaded with the keys `name` gives, sent as `routing` says) and
/// measures it; `bar` moves through `seconds` in tenths. First the ring's idle CPU is read,
/// over up to `IDLE` (no more than the seconds counted).
pub fn measure(
    ring: &Ring,
    series: Series,
    replication: u8,
    routing: &Routing<'_>,
    name: &(dyn Fn(u64) -> String + Sync),
    load: &Load,
    bar: &ProgressBar,
) -> Result<Point, String> {
    let idle_cores = idle_cores(ring, IDLE.min(Duration::from_secs_f64(load.seconds)));
    let clients = ring.clients();
    let stop = AtomicBool::new(false);
    let start = Instant::now() + WARMUP.min(Duration::from_secs_f64(load.seconds));
    let end = start + Duration::from_secs_f64(load.seconds);
    let (counted, cpu_s, delta) = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..load.clients)
            .map(|c| {
                let (stop, clients) = (&stop, &clients);
                scope.spawn(move || client(c, clients, routing, name, load, stop, (start, end)))
            })
            .collect();
        std::thread::sleep(start.saturating_duration_since(Instant::now()));
        let (cpu0, counted0) = (ring.cpu_seconds(), ring.counters(COUNTERS));
        bar.set_length((load.seconds / TICK.as_secs_f64()).ceil() as u64);
        bar.set_position(0);
        while Instant::now() < end {
            std::thread::sleep(TICK.min(end.saturating_duration_since(Instant::now())));
            bar.inc(1);
        }
        let (cpu1, counted1) = (ring.cpu_seconds(), ring.counters(COUNTERS));
        stop.store(true, Ordering::Relaxed);
        let counted = workers
            .into_iter()
            .map(|w| w.join().unwrap_or_else(|_| Err("a client panicked".into())))
            .collect::<Result<Vec<Counted>, String>>();
        let delta: Vec<u64> = counted1
            .iter()
            .zip(counted0)
            .map(|(after, before)| after.saturating_sub(before))
            .collect();
        (counted, cpu1 - cpu0, delta)
    });
    let [forwarded, reads, writes, fast_writes] = delta[..] else {
        unreachable!("one delta per counter")
    };
    let counted = counted.map_err(|e| ring.with_logs(e))?;
    let ops: u64 = counted.iter().map(|c| c.ops).sum();
    let mut batches = Histogram::<u64>::new(3).expect("a valid histogram");
    for c in &counted {
        batches.add(&c.batches).map_err(|e| e.to_string())?;
    }
    Ok(Point {
        series,
        nodes: clients.len() as u16,
        replication,
        clients: load.clients,
        seconds: load.seconds,
        ops,
        errors: counted.iter().map(|c| c.errors).sum(),
        first_error: counted.iter().find_map(|c| c.first_error.clone()),
        ops_per_s: ops as f64 / load.seconds,
        cpu_s,
        ops_per_cpu_s: if cpu_s > 0.0 { ops as f64 / cpu_s } else { 0.0 },
        cores: cpu_s / load.seconds,
        idle_cores,
        forwarded_share: forwarded as f64 / ops.max(1) as f64,
        ops_per_batch: ops as f64 / (reads + writes).max(1) as f64,
        fast_write_share: fast_writes as f64 / writes.max(1) as f64,
        p99_ms: batches.value_at_quantile(0.99) as f64 / 1e3,
    })
}

/// One closed-loop client: batches of `pipeline` commands of the mix, each batch to the next
/// node (starting at node `id`), until `stop`; counts the commands answered and the batch
/// times inside `window`.
fn client(
    id: u32,
    clients: &[std::net::SocketAddr],
    routing: &Routing<'_>,
    name: &(dyn Fn(u64) -> String + Sync),
    load: &Load,
    stop: &AtomicBool,
    window: (Instant, Instant),
) -> Result<Counted, String> {
    let mut conns = clients
        .iter()
        .map(|&addr| Conn::open(addr))
        .collect::<Result<Vec<_>, _>>()?;
    let mut rng = SmallRng::seed_from_u64(u64::from(id) * 7919 + 3);
    let mut node = id as usize % conns.len();
    let mut counted = Counted {
        ops: 0,
        errors: 0,
        first_error: None,
        batches: Histogram::new(3).expect("a valid histogram"),
    };
    while !stop.load(Ordering::Relaxed) {
        let batch: Vec<Vec<String>> = (0..load.pipeline.max(1))
            .map(|_| {
                let key = name(routing.key(node, &mut rng));
                load.mix.command(rng.random_range(0..load.mix.total()), key)
            })
            .collect();
        let sent = Instant::now();
        let replies = conns[node].ask(&batch)?;
        let done = Instant::now();
        node = (node + 1) % conns.len();
        if sent < window.0 || done > window.1 {
            continue;
        }
        for reply in &replies {
            let good = reply.starts_with('+')
                || reply.starts_with(':')
                || (reply.starts_with('$') && reply != "$-1");
            if good {
                counted.ops += 1;
            } else {
                counted.errors += 1;
                counted.first_error.get_or_insert_with(|| reply.clone());
            }
        }
        let micros = done.duration_since(sent).as_micros() as u64;
        counted
            .batches
            .record(micros.max(1))
            .map_err(|e| e.to_string())?;
    }
    Ok(counted)
}
