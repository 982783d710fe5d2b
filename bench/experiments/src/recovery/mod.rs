//! `logless bench recovery`: seed 002's evaluation of the log engine's recovery modes.
//!
//! Each job starts its own 3-replica `--engine multipaxos` cluster of `logless server`
//! processes on loopback (one per mode and medium), fills it with a state of the asked size,
//! and measures; the jobs, in the order they run:
//!
//! 1. **Restart curves** ([`restart`]): a follower killed with SIGKILL and started again; the
//!    time from its start until it *votes* and until it *serves*, against the state's size,
//!    with the length of its log (bytes of `<data_dir>/log`) beside. "Votes" is read from
//!    INFO `replication`: the first INFO answered with `log_state:rebuilding` (mPaxos: voting
//!    while the state machine is rebuilt) or `log_state:serving`; under `fullss` the node
//!    answers nothing before its replay ends, under `epoch` it says `recovering` (not voting)
//!    until its peers have given it the state. "Serves" is the first GET of a stored key
//!    answered with its value. Beside them, the parts of the restart from the replica's own
//!    start lines (the log's read and its parts, the snapshot's restore, the decided
//!    instances' replay, the first vote and answer, a peer's snapshot installed), one read of
//!    its snapshot file, and a memory bandwidth (copy and read) measured in the same run.
//! 2. **Table II** ([`throughput`]): 50% SETs of 8 kB values and 50% GETs (9-byte requests)
//!    on states of 10 MB and 100 MB, every mode × medium in [`MODES`]: throughput and p99.
//! 3. **Fig. 3** ([`throughput`]): SETs of 128 B to 10 kB, throughput in MB/s.
//! 4. **Figs. 4–5** ([`timeline`]): every replica's throughput over time while a follower,
//!    then the leader, is killed and started again, with 3 and 5 replicas.
//!
//! Results in `--out` ([`report`], [`timeline_report`]): `restart.csv`, `table2.csv`,
//! `fig3.csv`, `figs45.csv`, `figs45-recovery.csv`, `results.json`, `restart.png`, `fig3.png`,
//! `figs45-<mode>-<replicas>.png` and `summary.md`.
pub mod cluster;
pub mod report;
pub mod restart;
pub mod throughput;
pub mod timeline;
pub mod timeline_report;

use std::path::PathBuf;

use serde::Serialize;

/// One recovery mode and the media it runs on. A mode is one entry of [`MODES`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Mode {
    /// The `--recovery` value.
    pub recovery: &'static str,
    /// Seed 002's name for it.
    pub paper: &'static str,
    /// The `--durability` values it is measured on in Table II (the valid ones: `epoch` keeps
    /// no log, so its medium does not matter and `memory` stands for all; `pmem` needs
    /// persistent memory).
    pub media: &'static [&'static str],
    /// The medium of its restart curve and Fig. 3.
    pub restart_medium: &'static str,
}

/// The modes measured, in order.
pub const MODES: [Mode; 4] = [
    Mode {
        recovery: "fullss",
        paper: "JPaxos+SS",
        media: &["memory", "emulp", "mmap", "sync"],
        restart_medium: "mmap",
    },
    Mode {
        recovery: "epoch",
        paper: "JPaxos+epochs",
        media: &["memory"],
        restart_medium: "memory",
    },
    Mode {
        recovery: "pmem",
        paper: "mPaxos",
        media: &["emulp"],
        restart_medium: "emulp",
    },
    Mode {
        recovery: "pmem-sm",
        paper: "mPaxosSM",
        media: &["emulp"],
        restart_medium: "emulp",
    },
];

/// The largest buffer of the memory bandwidth the restart job measures (twice this is
/// allocated).
const MEMORY_BANDWIDTH_BYTES: usize = 256 << 20;

/// The options of `logless bench recovery`.
#[derive(clap::Args, Clone, Debug)]
pub struct RecoveryArgs {
    /// The `logless` binary (default: beside this program, else `target/release/logless`).
    #[arg(long)]
    pub logless: Option<PathBuf>,
    /// The state sizes of the restart curves, in MB, comma-separated.
    #[arg(long, value_delimiter = ',', default_values_t = [10, 100, 200, 500, 1000])]
    pub restart_mb: Vec<u64>,
    /// The state sizes of Table II, in MB, comma-separated.
    #[arg(long, value_delimiter = ',', default_values_t = [10, 100])]
    pub table_mb: Vec<u64>,
    /// The request (value) sizes of Fig. 3, in bytes, comma-separated.
    #[arg(long, value_delimiter = ',', default_values_t = [128, 512, 1024, 2048, 4096, 6144, 10240])]
    pub fig3_bytes: Vec<usize>,
    /// The state of Fig. 3, in MB.
    #[arg(long, default_value_t = 10)]
    pub fig3_mb: u64,
    /// Seconds of load per throughput point.
    #[arg(long, default_value_t = 10.0)]
    pub seconds: f64,
    /// Closed-loop clients of the throughput points, spread over the replicas.
    #[arg(long, default_value_t = 8)]
    pub clients: u32,
    /// Commands each client has in flight.
    #[arg(long, default_value_t = 4)]
    pub pipeline: u32,
    /// Only these modes (`--recovery` names), comma-separated; all of [`MODES`] if none.
    #[arg(long, value_delimiter = ',')]
    pub modes: Vec<String>,
    /// The cluster sizes of Figs. 4–5, comma-separated.
    #[arg(long, value_delimiter = ',', default_values_t = [3, 5])]
    pub timeline_replicas: Vec<u16>,
    /// The state of Figs. 4–5, in MB.
    #[arg(long, default_value_t = 10)]
    pub timeline_mb: u64,
    /// Figs. 4–5: seconds of load before the first kill and after each restart.
    #[arg(long, default_value_t = 10.0)]
    pub settle_s: f64,
    /// Figs. 4–5: seconds a killed replica stays down.
    #[arg(long, default_value_t = 5.0)]
    pub down_s: f64,
    /// Which jobs: restart, table2, fig3, figs45 (comma-separated; all if none).
    #[arg(long, value_delimiter = ',')]
    pub jobs: Vec<String>,
    /// A CI-sized smoke run: restart at 10 and 50 MB, Table II at 10 MB, Fig. 3 at 128 B and
    /// 4 kB on 5 MB, 2 s per point, Figs. 4–5 on 5 MB with 3 s of settling and 2 s down.
    #[arg(long)]
    pub quick: bool,
    /// Where the results go.
    #[arg(long, default_value = "recovery-results")]
    pub out: PathBuf,
}

impl RecoveryArgs {
    /// The settings `--quick` replaces.
    pub fn effective(&self) -> RecoveryArgs {
        let mut a = self.clone();
        if a.quick {
            a.restart_mb = vec![10, 50];
            a.table_mb = vec![10];
            a.fig3_bytes = vec![128, 4096];
            a.fig3_mb = 5;
            a.seconds = 2.0;
            a.timeline_mb = 5;
            a.settle_s = 3.0;
            a.down_s = 2.0;
        }
        a
    }

    /// The modes asked for, in [`MODES`]' order; an error names an unknown one.
    pub fn modes(&self) -> Result<Vec<Mode>, String> {
        for m in &self.modes {
            if !MODES.iter().any(|k| k.recovery == m) {
                return Err(format!(
                    "no recovery mode {m:?}: the modes are {}",
                    MODES.map(|k| k.recovery).join(", ")
                ));
            }
        }
        Ok(MODES
            .into_iter()
            .filter(|k| self.modes.is_empty() || self.modes.iter().any(|m| m == k.recovery))
            .collect())
    }

    /// Whether job `name` runs; an error names an unknown job.
    pub fn runs(&self, name: &str) -> Result<bool, String> {
        const JOBS: [&str; 4] = ["restart", "table2", "fig3", "figs45"];
        if let Some(bad) = self.jobs.iter().find(|j| !JOBS.contains(&j.as_str())) {
            return Err(format!("no job {bad:?}: the jobs are {}", JOBS.join(", ")));
        }
        Ok(self.jobs.is_empty() || self.jobs.iter().any(|j| j == name))
    }
}

/// Runs the jobs asked for and writes their results.
pub fn run(args: &RecoveryArgs) -> Result<(), String> {
    let args = args.effective();
    let modes = args.modes()?;
    if args.seconds.is_nan() || args.seconds <= 0.0 || args.clients == 0 {
        return Err("--seconds must be positive and --clients at least 1".into());
    }
    let bin = crate::space::logless_binary(args.logless.as_deref())?;
    std::fs::create_dir_all(&args.out).map_err(|e| format!("{}: {e}", args.out.display()))?;
    let mut results = report::Results {
        // The options only: the program's path names this machine's checkout.
        command: std::iter::once("logless bench recovery".to_string())
            .chain(std::env::args().skip(1))
            .collect::<Vec<_>>()
            .join(" "),
        ..Default::default()
    };
    if args.runs("restart")? {
        // No larger than the largest state (a smoke run's is tiny), at least 16 MiB.
        let largest = args.restart_mb.iter().max().copied().unwrap_or(0) as usize;
        let bytes = (largest << 20).clamp(16 << 20, MEMORY_BANDWIDTH_BYTES);
        let memory = restart::memory_bandwidth(bytes, 5);
        println!(
            "memory bandwidth: copy {:.0} MB/s, read {:.0} MB/s ({} MiB, best of 5)",
            memory.copy_mb_s,
            memory.read_mb_s,
            memory.bytes >> 20
        );
        results.memory = Some(memory);
        results.restart = restart::curves(&bin, &modes, &args.restart_mb, &args.out)?;
        report::write(&args.out, &results)?;
    }
    let load = throughput::Load {
        seconds: args.seconds,
        clients: args.clients,
        pipeline: args.pipeline,
    };
    if args.runs("table2")? {
        results.table2 = throughput::table2(&bin, &modes, &args.table_mb, &load)?;
        report::write(&args.out, &results)?;
    }
    if args.runs("fig3")? {
        results.fig3 = throughput::fig3(&bin, &modes, args.fig3_mb, &args.fig3_bytes, &load)?;
        report::write(&args.out, &results)?;
    }
    if args.runs("figs45")? {
        let schedule = timeline::Schedule {
            settle_s: args.settle_s,
            down_s: args.down_s,
        };
        let clients = timeline::Clients {
            count: args.clients,
            pipeline: args.pipeline,
        };
        results.figs45 = timeline::figs45(
            &bin,
            &modes,
            &args.timeline_replicas,
            args.timeline_mb,
            &schedule,
            &clients,
        )?;
    }
    let summary = report::write(&args.out, &results)?;
    println!("{summary}");
    println!("results in {}", args.out.display());
    Ok(())
}
