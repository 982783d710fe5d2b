//! Jobs 2 and 3, Table II and Fig. 3: closed-loop clients on every replica of a filled cluster,
//! a mix of SETs of one size and GETs of the state's keys, throughput and p99.
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use serde::Serialize;

use crate::psmr::load::Conn;

use super::cluster::{key, keys_for, Cluster, VALUE_BYTES};
use super::Mode;

/// The requests of Fig. 3 are SETs only.
const FIG3_PUT_SHARE: f64 = 1.0;
/// Table II's mix: half puts, half gets.
const TABLE2_PUT_SHARE: f64 = 0.5;
/// Load before this is not counted.
const WARMUP: Duration = Duration::from_millis(500);

/// How hard the clients press.
#[derive(Clone, Copy, Debug)]
pub struct Load {
    /// Seconds counted per point.
    pub seconds: f64,
    /// Closed-loop clients, spread over the replicas.
    pub clients: u32,
    /// Commands each has in flight.
    pub pipeline: u32,
}

/// One throughput point.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Point {
    /// The `--recovery` mode.
    pub mode: &'static str,
    /// The `--durability` medium.
    pub medium: &'static str,
    /// The state, MB.
    pub state_mb: u64,
    /// Bytes of each SET's value.
    pub put_bytes: usize,
    /// The share of SETs.
    pub put_share: f64,
    /// Commands answered per second.
    pub ops_per_s: f64,
    /// SET payload per second, MB/s (Fig. 3's measure: requests times their size).
    pub put_mb_per_s: f64,
    /// The 99th percentile of a batch's answer time, ms.
    pub p99_ms: f64,
    /// Commands answered with an error (TRYAGAIN, UNCERTAIN, …), not counted.
    pub errors: u64,
}

/// Table II: every mode × medium at every state size of `sizes_mb`.
pub fn table2(
    bin: &Path,
    modes: &[Mode],
    sizes_mb: &[u64],
    load: &Load,
) -> Result<Vec<Point>, String> {
    let mut points = Vec::new();
    for mode in modes {
        for &medium in mode.media {
            for &mb in sizes_mb {
                let cluster = Cluster::start(bin, mode, medium)?;
                let label = format!("table II {} {medium} {mb} MB", mode.recovery);
                cluster.fill(mb, &label)?;
                let p = measure(
                    &cluster,
                    mode,
                    medium,
                    mb,
                    VALUE_BYTES,
                    TABLE2_PUT_SHARE,
                    load,
                )?;
                println!("{label}: {}", line(&p));
                points.push(p);
            }
        }
    }
    Ok(points)
}

/// Fig. 3: every mode on its restart medium, SETs of each size of `sizes`.
pub fn fig3(
    bin: &Path,
    modes: &[Mode],
    state_mb: u64,
    sizes: &[usize],
    load: &Load,
) -> Result<Vec<Point>, String> {
    let mut points = Vec::new();
    for mode in modes {
        let medium = mode.restart_medium;
        let cluster = Cluster::start(bin, mode, medium)?;
        cluster.fill(state_mb, &format!("fig. 3 {}", mode.recovery))?;
        for &size in sizes {
            let p = measure(&cluster, mode, medium, state_mb, size, FIG3_PUT_SHARE, load)?;
            println!("fig. 3 {} {size} B: {}", mode.recovery, line(&p));
            points.push(p);
        }
    }
    Ok(points)
}

fn line(p: &Point) -> String {
    format!(
        "{:.0} ops/s, {:.1} MB/s put, p99 {:.1} ms, {} errors",
        p.ops_per_s, p.put_mb_per_s, p.p99_ms, p.errors
    )
}

/// What one client counted.
struct Counted {
    ops: u64,
    errors: u64,
    batches: Histogram<u64>,
}

/// Runs `load` on `cluster` (whose state has [`keys_for`]`(state_mb)` keys) and measures it.
fn measure(
    cluster: &Cluster,
    mode: &Mode,
    medium: &'static str,
    state_mb: u64,
    put_bytes: usize,
    put_share: f64,
    load: &Load,
) -> Result<Point, String> {
    let endpoints = cluster.clients();
    let keys = keys_for(state_mb);
    let stop = AtomicBool::new(false);
    let start = Instant::now() + WARMUP;
    let end = start + Duration::from_secs_f64(load.seconds);
    let counted: Vec<Counted> = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..load.clients)
            .map(|c| {
                let addr = endpoints[c as usize % endpoints.len()];
                let stop = &stop;
                scope.spawn(move || {
                    client(
                        c,
                        addr,
                        keys,
                        put_bytes,
                        put_share,
                        load.pipeline,
                        stop,
                        (start, end),
                    )
                })
            })
            .collect();
        std::thread::sleep(end.saturating_duration_since(Instant::now()));
        stop.store(true, Ordering::Relaxed);
        workers
            .into_iter()
            .map(|w| w.join().unwrap_or_else(|_| Err("a client panicked".into())))
            .collect::<Result<_, String>>()
    })?;
    let ops: u64 = counted.iter().map(|c| c.ops).sum();
    let mut batches = Histogram::<u64>::new(3).expect("a valid histogram");
    for c in &counted {
        batches.add(&c.batches).map_err(|e| e.to_string())?;
    }
    let ops_per_s = ops as f64 / load.seconds;
    Ok(Point {
        mode: mode.recovery,
        medium,
        state_mb,
        put_bytes,
        put_share,
        ops_per_s,
        put_mb_per_s: ops_per_s * put_share * put_bytes as f64 / 1e6,
        p99_ms: batches.value_at_quantile(0.99) as f64 / 1e3,
        errors: counted.iter().map(|c| c.errors).sum(),
    })
}

/// One closed-loop client: batches of `pipeline` SETs (share `put_share`, `put_bytes` each)
/// and GETs of the state's keys until `stop`; counts the commands answered and the batch
/// times inside `window`.
#[allow(clippy::too_many_arguments)]
fn client(
    id: u32,
    addr: std::net::SocketAddr,
    keys: u64,
    put_bytes: usize,
    put_share: f64,
    pipeline: u32,
    stop: &AtomicBool,
    window: (Instant, Instant),
) -> Result<Counted, String> {
    let mut conn = Conn::open(addr)?;
    let mut rng = SmallRng::seed_from_u64(u64::from(id));
    let value = "p".repeat(put_bytes);
    let mut counted = Counted {
        ops: 0,
        errors: 0,
        batches: Histogram::new(3).expect("a valid histogram"),
    };
    while !stop.load(Ordering::Relaxed) {
        let batch: Vec<Vec<String>> = (0..pipeline.max(1))
            .map(|_| {
                let k = key(rng.random_range(0..keys));
                if rng.random_bool(put_share) {
                    vec!["SET".into(), k, value.clone()]
                } else {
                    vec!["GET".into(), k]
                }
            })
            .collect();
        let sent = Instant::now();
        let replies = conn.ask(&batch)?;
        let done = Instant::now();
        if sent < window.0 || done > window.1 {
            continue;
        }
        let good = replies
            .iter()
            .filter(|r| *r == "+OK" || (r.starts_with('$') && *r != "$-1"))
            .count() as u64;
        counted.ops += good;
        counted.errors += replies.len() as u64 - good;
        let micros = done.duration_since(sent).as_micros() as u64;
        counted
            .batches
            .record(micros.max(1))
            .map_err(|e| e.to_string())?;
    }
    Ok(counted)
}
