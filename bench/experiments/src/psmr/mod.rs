//! `logless bench psmr`: P-SMR against sP-SMR, SMR and no replication on the B⁺-tree key-value
//! service (seed 004, §VI), every mode in one run.
//!
//! For every mode and thread count a cluster is started with `logless up --engine psmr
//! --psmr-mode M --threads T` (3 replicas; no-rep: 1), `--keys` keys are inserted, and then
//! each workload runs for `--duration-s` after a warm-up, from `--clients` closed-loop clients
//! spread over the replicas ([`load`]):
//!
//! * reads of uniformly chosen keys (independent commands; Fig. 3, and Fig. 5 left),
//! * inserts and deletes only (dependent commands; Fig. 4, and Fig. 5 right),
//! * reads of Zipf(1)-chosen keys (Fig. 7),
//! * mixes of reads with 0–100% inserts and deletes, for P-SMR at the most threads and SMR
//!   (Fig. 6).
//!
//! SMR runs once, with one thread (it has one executing thread whatever `--threads` says), and
//! is drawn as a flat line where the others are drawn against threads. Each point records the
//! throughput, the mean latency (Little's law: commands in flight over throughput) and the CPU
//! time of the server processes per command (user + system from `/proc`, summed over every
//! replica), which shows parallel efficiency even where cores are fewer than threads. After
//! every workload the replicas' `LOGLESS.DIGEST` values must be equal and equal to the digest
//! after the preload (each client deletes what it inserted); a difference fails the run.
//!
//! Fig. 8 runs NetFS (`--service netfs`) in every mode and thread count the same way: reads and
//! writes of 1 kB ([`netfs`]), each client on its own file with one call in flight
//! (`--netfs-clients` clients, default `--clients`); after each workload the replicas' digests
//! must be equal. `--netfs-only` runs Fig. 8 alone.
//!
//! Results: `results.csv`, `fig3-independent.png` … `fig8-netfs.png` and `summary.md` in
//! `--out` ([`report`]).
pub mod load;
pub mod netfs;
pub mod report;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressStyle};
use serde::Serialize;

use crate::compare::peers::{self, LoglessOpts, Running};
use load::{Keys, Workload};

/// The arguments of `logless bench psmr`.
#[derive(clap::Args, Clone, Debug, PartialEq)]
pub struct PsmrArgs {
    /// A short run (a few minutes on 2 cores): 1 s per point after 0.3 s of warm-up, fewer
    /// keys and mixes.
    #[arg(long)]
    pub quick: bool,
    /// Where to write results.csv, summary.md and the PNG figures.
    #[arg(long, default_value = "bench-results/psmr")]
    pub out: PathBuf,
    /// The logless binary (default: `logless` beside this executable, or on the PATH).
    #[arg(long)]
    pub logless: Option<PathBuf>,
    /// Worker-thread counts, comma-separated, any number each (default: 1, 2, 4, … up to the
    /// cores available, and the cores themselves).
    #[arg(long, value_delimiter = ',')]
    pub threads: Vec<u32>,
    /// Measured seconds per point (default: 1 with --quick, else 5).
    #[arg(long)]
    pub duration_s: Option<f64>,
    /// Keys inserted before the workloads (default: 2000 with --quick, else 50000).
    #[arg(long)]
    pub keys: Option<u64>,
    /// Closed-loop clients, spread over the replicas.
    #[arg(long, default_value_t = 32)]
    pub clients: u32,
    /// Commands each client keeps in flight. The replicated modes answer after a few ms
    /// whatever the load, so their throughput is the commands in flight over that latency until
    /// the cores are busy: 32 × 32 comes near that on 2 cores, 16 × 8 stays far below it.
    #[arg(long, default_value_t = 32)]
    pub pipeline: u32,
    /// Replicas of the replicated modes (no-rep always has one).
    #[arg(long, default_value_t = 3)]
    pub replicas: u16,
    /// Run Fig. 8 (NetFS) alone, without the key-value service's figures.
    #[arg(long)]
    pub netfs_only: bool,
    /// Fig. 8's NetFS clients, each on a file of its own with one call in flight (default:
    /// `--clients`). The replicated modes answer a call after a few ms, so with few clients
    /// every mode waits for its latency and none keeps the workers busy.
    #[arg(long)]
    pub netfs_clients: Option<u32>,
}

/// The engine's modes, in plotting order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum Mode {
    /// k + 1 Multi-Paxos groups, one per worker and g_all.
    Psmr,
    /// One group and a scheduler thread dispatching to the workers.
    SpSmr,
    /// One group, one executing thread.
    Smr,
    /// One process, no replication.
    NoRep,
}

/// Every mode, in plotting order.
pub const MODES: [Mode; 4] = [Mode::Psmr, Mode::SpSmr, Mode::Smr, Mode::NoRep];

impl Mode {
    /// Its `--psmr-mode` value and its name in results.
    pub fn name(self) -> &'static str {
        match self {
            Mode::Psmr => "psmr",
            Mode::SpSmr => "sp-smr",
            Mode::Smr => "smr",
            Mode::NoRep => "no-rep",
        }
    }
}

/// One cluster of the plan and the workloads run on it.
#[derive(Clone, Debug, PartialEq)]
pub struct Stage {
    /// Its mode.
    pub mode: Mode,
    /// Its worker threads.
    pub threads: u32,
    /// The workloads, in order.
    pub workloads: Vec<Workload>,
    /// Whether the cluster serves NetFS (Fig. 8; `dependent` 0: reads, 1: writes) instead of
    /// the key-value service.
    pub netfs: bool,
}

/// The shares of dependent commands of Fig. 6.
pub fn mixes(quick: bool) -> Vec<f64> {
    if quick {
        vec![0.0, 0.1, 0.5, 1.0]
    } else {
        vec![0.0, 0.01, 0.05, 0.1, 0.25, 0.5, 0.75, 1.0]
    }
}

/// The default thread counts: powers of two below `cores`, and `cores`.
pub fn default_threads(cores: u32) -> Vec<u32> {
    let mut out: Vec<u32> = std::iter::successors(Some(1u32), |t| t.checked_mul(2))
        .take_while(|&t| t < cores)
        .collect();
    out.push(cores.max(1));
    out
}

/// The workloads every stage runs: reads of uniform keys, inserts and deletes, reads of
/// Zipf keys.
pub const BASIC: [Workload; 3] = [
    Workload {
        dependent: 0.0,
        keys: Keys::Uniform,
    },
    Workload {
        dependent: 1.0,
        keys: Keys::Uniform,
    },
    Workload {
        dependent: 0.0,
        keys: Keys::Zipf,
    },
];

/// The stages of a run over `threads` (sorted, no repeats): every mode but SMR at every
/// thread count with the [`BASIC`] workloads, SMR once with one thread, and the mixes on SMR
/// and on P-SMR at the most threads.
pub fn plan(threads: &[u32], mixes: &[f64]) -> Vec<Stage> {
    let basic = BASIC;
    let with_mixes = || {
        let mut w = basic.to_vec();
        w.extend(
            mixes
                .iter()
                .filter(|&&m| m > 0.0 && m < 1.0)
                .map(|&dependent| Workload {
                    dependent,
                    keys: Keys::Uniform,
                }),
        );
        w
    };
    let most = threads.iter().copied().max().unwrap_or(1);
    let mut stages = vec![Stage {
        mode: Mode::Smr,
        threads: 1,
        workloads: with_mixes(),
        netfs: false,
    }];
    for &t in threads {
        for mode in [Mode::Psmr, Mode::SpSmr, Mode::NoRep] {
            stages.push(Stage {
                mode,
                threads: t,
                workloads: if mode == Mode::Psmr && t == most {
                    with_mixes()
                } else {
                    basic.to_vec()
                },
                netfs: false,
            });
        }
    }
    stages
}

/// Fig. 8's workloads: NetFS reads, then writes.
pub const NETFS: [Workload; 2] = [
    Workload {
        dependent: 0.0,
        keys: Keys::Uniform,
    },
    Workload {
        dependent: 1.0,
        keys: Keys::Uniform,
    },
];

/// Fig. 8's stages: NetFS on SMR once with one thread, and on every other mode at every
/// count of `threads`.
pub fn netfs_plan(threads: &[u32]) -> Vec<Stage> {
    let stage = |mode, threads| Stage {
        mode,
        threads,
        workloads: NETFS.to_vec(),
        netfs: true,
    };
    let mut stages = vec![stage(Mode::Smr, 1)];
    for &t in threads {
        for mode in [Mode::Psmr, Mode::SpSmr, Mode::NoRep] {
            stages.push(stage(mode, t));
        }
    }
    stages
}

/// One measured point.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Record {
    /// The mode.
    pub mode: &'static str,
    /// Worker threads.
    pub threads: u32,
    /// Percentage of dependent commands (inserts and deletes).
    pub dependent_pct: f64,
    /// `uniform` or `zipf`; `netfs` for Fig. 8 (`dependent_pct` 0: reads, 100: writes).
    pub keys: &'static str,
    /// Commands answered per second.
    pub ops_per_s: f64,
    /// Mean latency in ms (commands in flight over throughput).
    pub latency_ms: f64,
    /// CPU time of the server processes per command, in µs.
    pub cpu_us_per_op: f64,
    /// CPU time of the server processes per second of the run (cores busy).
    pub cpu_cores: f64,
}

/// The settings a run resolved from its arguments.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Settings {
    /// Worker-thread counts.
    pub threads: Vec<u32>,
    /// Measured seconds per point.
    pub duration_s: f64,
    /// Warm-up seconds per point.
    pub warmup_s: f64,
    /// Preloaded keys.
    pub keys: u64,
    /// Closed-loop clients.
    pub clients: u32,
    /// Commands in flight per client.
    pub pipeline: u32,
    /// NetFS clients of Fig. 8 (one call in flight each).
    pub netfs_clients: u32,
    /// Replicas of the replicated modes.
    pub replicas: u16,
    /// Shares of dependent commands of Fig. 6.
    pub mixes: Vec<f64>,
    /// The cores this machine offers.
    pub cores: u32,
}

impl Settings {
    /// Resolves `args` on a machine with `cores` cores.
    pub fn from_args(args: &PsmrArgs, cores: u32) -> Result<Settings, String> {
        let mut threads = if args.threads.is_empty() {
            default_threads(cores)
        } else {
            args.threads.clone()
        };
        threads.sort_unstable();
        threads.dedup();
        if threads.iter().any(|&t| t == 0 || t > 256) {
            return Err("--threads takes counts from 1 to 256".into());
        }
        let duration_s = args
            .duration_s
            .unwrap_or(if args.quick { 1.0 } else { 5.0 });
        if !(0.2..=3600.0).contains(&duration_s) {
            return Err("--duration-s must be from 0.2 to 3600".into());
        }
        let netfs_clients = args.netfs_clients.unwrap_or(args.clients);
        if args.clients == 0 || args.pipeline == 0 || netfs_clients == 0 {
            return Err("--clients, --pipeline and --netfs-clients must be at least 1".into());
        }
        if ![1, 3, 5, 7].contains(&args.replicas) {
            return Err("--replicas must be 1, 3, 5 or 7".into());
        }
        let keys = args.keys.unwrap_or(if args.quick { 2_000 } else { 50_000 });
        if keys == 0 {
            return Err("--keys must be at least 1".into());
        }
        Ok(Settings {
            threads,
            duration_s,
            warmup_s: if args.quick { 0.3 } else { 1.0 },
            keys,
            clients: args.clients,
            pipeline: args.pipeline,
            netfs_clients,
            replicas: args.replicas,
            mixes: mixes(args.quick),
            cores,
        })
    }
}

fn logless_binary(given: Option<&PathBuf>) -> Result<PathBuf, String> {
    if let Some(path) = given {
        return Ok(path.clone());
    }
    let sibling = std::env::current_exe()
        .ok()
        .map(|exe| exe.with_file_name("logless"));
    sibling
        .filter(|p| p.is_file())
        .or_else(|| peers::which("logless"))
        .ok_or_else(|| "no logless binary found: give --logless PATH".into())
}

/// Starts the cluster of `stage`.
fn start(bin: &Path, s: &Settings, stage: &Stage, limit_s: u64) -> Result<Running, String> {
    let opts = LoglessOpts {
        bin: bin.to_path_buf(),
        replicas: if stage.mode == Mode::NoRep {
            1
        } else {
            s.replicas
        },
        durability: "mmap".into(),
        engine: "psmr".into(),
        read_retries: 1,
        limit_s,
    };
    let service = if stage.netfs { "netfs" } else { "btree" };
    let extra = [
        "--threads".to_string(),
        stage.threads.to_string(),
        "--psmr-mode".to_string(),
        stage.mode.name().to_string(),
        "--service".to_string(),
        service.to_string(),
    ];
    let name = format!("psmr-{service}-{}-{}", stage.mode.name(), stage.threads);
    peers::start_logless_up_with(&name, &opts, &extra)
}

/// Runs `workload` on `sys` and measures it.
fn measure(
    sys: &Running,
    endpoints: &[SocketAddr],
    s: &Settings,
    stage: &Stage,
    workload: Workload,
) -> Result<Record, String> {
    let stop = AtomicBool::new(false);
    let start = Instant::now() + Duration::from_secs_f64(s.warmup_s);
    let end = start + Duration::from_secs_f64(s.duration_s);
    let ops = AtomicU64::new(0);
    let clients = if stage.netfs {
        s.netfs_clients
    } else {
        s.clients
    };
    let (cpu_before, cpu_after) = std::thread::scope(|scope| {
        let clients: Vec<_> = (0..clients)
            .map(|c| {
                let addr = endpoints[c as usize % endpoints.len()];
                let (stop, ops) = (&stop, &ops);
                scope.spawn(move || {
                    let window = (start, end);
                    let done = if stage.netfs {
                        netfs::client(c, addr, workload.dependent > 0.0, stop, window)
                    } else {
                        load::client(c, addr, workload, s.keys, s.pipeline, stop, window)
                    };
                    if done.is_err() {
                        stop.store(true, Ordering::Relaxed);
                    }
                    done.map(|n| ops.fetch_add(n, Ordering::Relaxed))
                })
            })
            .collect();
        std::thread::sleep(start.saturating_duration_since(Instant::now()));
        let before = sys.cpu_seconds();
        std::thread::sleep(end.saturating_duration_since(Instant::now()));
        let after = sys.cpu_seconds();
        stop.store(true, Ordering::Relaxed);
        for c in clients {
            c.join()
                .map_err(|_| "a client thread panicked".to_string())??;
        }
        Ok::<_, String>((before, after))
    })?;
    let ops = ops.load(Ordering::Relaxed);
    if ops == 0 {
        return Err(format!(
            "{} with {} threads answered no command in {} s",
            stage.mode.name(),
            stage.threads,
            s.duration_s
        ));
    }
    let ops_per_s = ops as f64 / s.duration_s;
    let cpu = (cpu_after - cpu_before).max(0.0);
    let in_flight = if stage.netfs {
        s.netfs_clients
    } else {
        s.clients * s.pipeline
    };
    Ok(Record {
        mode: stage.mode.name(),
        threads: stage.threads,
        dependent_pct: workload.dependent * 100.0,
        keys: match workload.keys {
            _ if stage.netfs => "netfs",
            Keys::Uniform => "uniform",
            Keys::Zipf => "zipf",
        },
        ops_per_s,
        latency_ms: f64::from(in_flight) / ops_per_s * 1000.0,
        cpu_us_per_op: cpu / ops as f64 * 1e6,
        cpu_cores: cpu / s.duration_s,
    })
}

fn describe(stage: &Stage, w: &Workload) -> String {
    if stage.netfs {
        return if w.dependent > 0.0 {
            "NetFS writes".into()
        } else {
            "NetFS reads".into()
        };
    }
    match (w.keys, w.dependent) {
        (Keys::Zipf, _) => "zipf reads".into(),
        (_, 0.0) => "reads".into(),
        (_, 1.0) => "inserts/deletes".into(),
        (_, d) => format!("{:.0}% dependent", d * 100.0),
    }
}

/// Runs `stages` with `bin` and the settings `s` and returns the records, checking the
/// replicas' digests after every workload.
pub fn measure_all(
    bin: &Path,
    s: &Settings,
    stages: &[Stage],
    bar: &ProgressBar,
) -> Result<Vec<Record>, String> {
    let mut records = Vec::new();
    for stage in stages {
        let per_run = s.warmup_s + s.duration_s + 30.0;
        let limit_s = 120 + (per_run * stage.workloads.len() as f64) as u64 + s.keys / 100;
        bar.set_message(format!(
            "{} {}t: starting, preloading",
            stage.mode.name(),
            stage.threads,
        ));
        let mut sys = start(bin, s, stage, limit_s)?;
        let endpoints: Vec<SocketAddr> = sys
            .endpoints
            .iter()
            .map(|e| e.parse().map_err(|e| format!("bad endpoint {e}")))
            .collect::<Result<_, String>>()?;
        if stage.netfs {
            netfs::prepare(&endpoints, s.netfs_clients)?;
        } else {
            load::preload(&endpoints, s.keys, s.clients, s.pipeline)?;
        }
        let digest_limit = Duration::from_secs(30);
        let preloaded = load::equal_digests(&endpoints, digest_limit)?;
        for workload in &stage.workloads {
            bar.set_message(format!(
                "{} {}t: {}",
                stage.mode.name(),
                stage.threads,
                describe(stage, workload)
            ));
            let record =
                measure(&sys, &endpoints, s, stage, *workload).map_err(|e| match sys.dead() {
                    Some(dead) => format!("{e}; {dead}"),
                    None => e,
                })?;
            let digest = load::equal_digests(&endpoints, digest_limit).map_err(|e| {
                format!(
                    "{} with {} threads after {}: {e}",
                    stage.mode.name(),
                    stage.threads,
                    describe(stage, workload)
                )
            })?;
            // NetFS's writes change the files' times, so only the key-value service comes
            // back to its preloaded state.
            if digest != preloaded && !stage.netfs {
                return Err(format!(
                    "{} with {} threads after {}: the replicas agree on digest {digest}, but the \
                     clients deleted every key they inserted, so it should be the preloaded \
                     {preloaded}",
                    stage.mode.name(),
                    stage.threads,
                    describe(stage, workload)
                ));
            }
            records.push(record);
            bar.inc(1);
        }
        sys.stop();
    }
    Ok(records)
}

/// Runs the benchmark and writes its results into `--out`.
pub fn run(args: &PsmrArgs) -> Result<(), String> {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get() as u32);
    let settings = Settings::from_args(args, cores)?;
    let bin = logless_binary(args.logless.as_ref())?;
    std::fs::create_dir_all(&args.out)
        .map_err(|e| format!("cannot create {}: {e}", args.out.display()))?;
    let mut stages = if args.netfs_only {
        Vec::new()
    } else {
        plan(&settings.threads, &settings.mixes)
    };
    stages.extend(netfs_plan(&settings.threads));
    let points: usize = stages.iter().map(|s| s.workloads.len()).sum();
    println!(
        "psmr: {} clusters, {points} points of {} s, threads {:?}, {} keys, {} clients × \
         pipeline {}",
        stages.len(),
        settings.duration_s,
        settings.threads,
        settings.keys,
        settings.clients,
        settings.pipeline
    );
    let bar = ProgressBar::new(points as u64);
    bar.set_style(
        ProgressStyle::with_template("{msg:40} [{bar:40}] {pos}/{len} ({eta})")
            .expect("a valid template")
            .progress_chars("=> "),
    );
    let records = measure_all(&bin, &settings, &stages, &bar);
    bar.finish_and_clear();
    let records = records?;
    let command = std::env::args().skip(1).collect::<Vec<_>>().join(" ");
    let summary = report::write(&args.out, &settings, &records, &command)?;
    println!("{summary}");
    println!("results in {}", args.out.display());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_plan_runs_every_mode_and_smr_once() {
        assert_eq!(default_threads(1), vec![1]);
        assert_eq!(default_threads(2), vec![1, 2]);
        assert_eq!(default_threads(6), vec![1, 2, 4, 6]);
        assert_eq!(default_threads(8), vec![1, 2, 4, 8]);
        let stages = plan(&[1, 3], &mixes(true));
        assert_eq!(stages.len(), 1 + 2 * 3);
        assert_eq!(
            stages.iter().filter(|s| s.mode == Mode::Smr).count(),
            1,
            "SMR runs once"
        );
        let mixed: Vec<(Mode, u32)> = stages
            .iter()
            .filter(|s| s.workloads.len() > 3)
            .map(|s| (s.mode, s.threads))
            .collect();
        assert_eq!(mixed, vec![(Mode::Smr, 1), (Mode::Psmr, 3)]);
        for mode in MODES {
            assert!(stages.iter().any(|s| s.mode == mode), "{mode:?}");
        }
    }

    #[test]
    fn settings_refuse_bad_counts() {
        use clap::Parser;
        #[derive(Parser)]
        struct Cli {
            #[command(flatten)]
            args: PsmrArgs,
        }
        let parse = |line: &[&str]| {
            let args = Cli::parse_from(std::iter::once("psmr").chain(line.iter().copied())).args;
            Settings::from_args(&args, 2)
        };
        let s = parse(&["--quick", "--threads", "8,1,8,3"]).unwrap();
        assert_eq!(s.threads, vec![1, 3, 8]);
        assert_eq!((s.duration_s, s.keys), (1.0, 2_000));
        assert_eq!(parse(&[]).unwrap().threads, vec![1, 2]);
        assert!(parse(&["--threads", "0"]).is_err());
        assert!(parse(&["--replicas", "2"]).is_err());
        assert!(parse(&["--clients", "0"]).is_err());
        assert_eq!(parse(&["--clients", "8"]).unwrap().netfs_clients, 8);
        let netfs = parse(&["--clients", "8", "--netfs-clients", "256"]).unwrap();
        assert_eq!((netfs.clients, netfs.netfs_clients), (8, 256));
        assert!(parse(&["--netfs-clients", "0"]).is_err());
    }
}
