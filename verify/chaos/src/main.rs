//! `logless-chaos`: the chaos runner on real `logless server` processes.
//!
//! It starts a cluster on loopback with every peer link behind its fault-injecting proxy, runs
//! concurrent Redis clients against it while a nemesis kills, pauses and partitions replicas,
//! heals everything, reads every key, checks for lost writes and runs the Porcupine checker on
//! the recorded history. See the crate's README for the files it writes and its exit codes.
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};

mod checker;
mod client;
mod cluster;
mod digests;
mod history;
mod lost;
mod membership;
mod multikey;
mod nemesis;
mod proxy;
mod removals;
mod report;
mod run;
mod stamps;
mod wide;
mod workload;

use nemesis::{FaultKind, Schedule};
use workload::{KeyKind, WorkloadConfig};

#[derive(Parser)]
#[command(
    name = "logless-chaos",
    version,
    about = "Chaos testing of a logless cluster: faults on real processes, a checked history"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run a cluster under faults and check the history.
    Run(Box<RunArgs>),
}

#[derive(clap::Args, Debug)]
struct RunArgs {
    /// Replicas: 3 or 5.
    #[arg(long, default_value_t = 3)]
    replicas: u16,
    /// Each key's replicas when they are fewer than --replicas: the replicas form a ring
    /// (`logless server --replication`, docs/ring.md) and forward commands on keys they do not
    /// hold. 3, with --replicas 5 and --engine rmw; default: every replica holds every key.
    #[arg(long)]
    replication: Option<u8>,
    /// With `--nemesis …,member` (a ring only): nodes started with every peer list but not
    /// in the ring's first configuration, for the membership nemesis to add (default 2: it
    /// adds one, removes a member and replaces a killed one with the other). Each spare
    /// allows one addition or replacement.
    #[arg(long)]
    spares: Option<u16>,
    /// Seconds of workload and faults (default 60; 1800 with --long).
    #[arg(long)]
    duration_s: Option<u64>,
    /// The long soak: 1800 s, progress every minute, a lighter per-client rate (--think-ms 20);
    /// the other flags still apply.
    #[arg(long)]
    long: bool,
    /// Concurrent clients.
    #[arg(long, default_value_t = 12)]
    clients: usize,
    /// The seed of the workload and the fault schedule (default: from the clock).
    #[arg(long)]
    seed: Option<u64>,
    /// The replicas' durability: mmap, sync, or emulp (persistent memory emulated, for
    /// `--recovery pmem`).
    #[arg(long, default_value = "mmap")]
    durability: String,
    /// The replication engine: rmw (per-key registers), multipaxos (one log, with a leader) or
    /// psmr (the B+-tree service on P-SMR's k + 1 streams; entry keys only).
    #[arg(long, default_value = "rmw")]
    engine: String,
    /// The log engine's recovery mode (`--engine multipaxos` only): fullss (the default),
    /// epoch or pmem (mPaxos, which needs --durability emulp or pmem): kill -9 restarts go
    /// through it.
    #[arg(long)]
    recovery: Option<String>,
    /// The psmr engine's mode: psmr, sp-smr or smr (no-rep has no replicas to fault).
    #[arg(long, default_value = "psmr")]
    psmr_mode: String,
    /// The psmr engine's worker threads (k).
    #[arg(long, default_value_t = 2)]
    psmr_threads: u16,
    /// Fault kinds, comma-separated: kill, pause, partition, kill-all, kill-leader (multipaxos
    /// only), member (a ring only: add a spare, remove a member, replace a killed member,
    /// one change at a time, in a lane of its own that overlaps the partitions and pauses
    /// unless --member-serial; `kill` then kills one node at a time); or none.
    #[arg(long, default_value = "kill,pause,partition,kill-all")]
    nemesis: String,
    /// Break the replicas on purpose (accept-inconsistent-quorum, ignore-learned,
    /// reply-before-persist, persist-without-ttl, remove-before-all-hold-tombstone,
    /// skip-removal-fence; for multipaxos log-skip-noop-fill,
    /// log-no-dedup, log-accept-before-persist, log-execute-at-local-clock,
    /// log-accept-stale-proposals, log-ignore-epochs, log-rejoin-without-recovery,
    /// log-release-while-space-short — the last three bite only under `--recovery epoch`, a
    /// rejoin or a full disk, which this runner does not cause; for psmr psmr-merge-by-arrival,
    /// psmr-no-barrier);
    /// repeatable.
    #[arg(long)]
    inject_bug: Vec<String>,
    /// Where history.jsonl, faults.jsonl, replica logs, data and html go (default: a new
    /// directory under the system's temporary directory).
    #[arg(long)]
    out: Option<PathBuf>,
    /// Keys in use at once.
    #[arg(long, default_value_t = 16)]
    keys: usize,
    /// Key kinds, comma-separated: counter, register, set, expiring (registers with times to
    /// live), lock (fencing locks with leases), hash, list, zset (with single-key
    /// transactions), entry (SET NX/XX, GET, DEL; the only kind psmr serves). Default: every
    /// kind but entry; under psmr, entry.
    #[arg(long)]
    key_kinds: Option<String>,
    /// Clients of the multi-key workload (multipaxos only): MULTI/EXEC transfers between the
    /// counters of a group, MSET and MGET of all of them, checked for atomicity; and MSET of 2
    /// to 10 keys read by MGET.
    #[arg(long, default_value_t = 0)]
    multi_key_clients: usize,
    /// Operations per group of the multi-key workload before it is retired for a fresh one.
    #[arg(long, default_value_t = 100)]
    ops_per_group: usize,
    /// Operations per key before it is retired for a fresh one.
    #[arg(long, default_value_t = 200)]
    ops_per_key: usize,
    /// Operations of unknown outcome per key before it is retired.
    #[arg(long, default_value_t = 12)]
    unknowns_per_key: usize,
    /// Client-side timeout of one operation (then its outcome is unknown).
    #[arg(long, default_value_t = 2000)]
    op_timeout_ms: u64,
    /// The replicas' own request timeout (they answer UNCERTAIN or TRYAGAIN after it).
    #[arg(long, default_value_t = 1500)]
    request_timeout_ms: u64,
    /// The replicas' `--removal-grace-ms`: how long an expired value stays before the rmw
    /// engine removes it (its default of 1 s leaves keys in use no time to be removed; the
    /// replicas share one clock here, so no grace is needed).
    #[arg(long, default_value_t = 0)]
    removal_grace_ms: u64,
    /// A pause between one client's operations (default 2; 20 with --long).
    #[arg(long)]
    think_ms: Option<u64>,
    /// How long before its call a replica's stamp of a command may have been read: the stamp
    /// windows of expiring keys and locks start this much before the call (see the README).
    #[arg(long, default_value_t = 50)]
    stamp_slack_ms: u64,
    /// Mean quiet time between faults.
    #[arg(long, default_value_t = 1500)]
    fault_gap_ms: u64,
    /// With `member`: make the ring's changes in the fault cycle, one fault at a time, with
    /// the spares used once (the runner's behaviour before the member lane), instead of in a
    /// lane of their own, overlapping partitions and pauses and spread over the whole run.
    #[arg(long)]
    member_serial: bool,
    /// The member lane's mean quiet time between changes (default: a tenth of the run's
    /// duration, at least --fault-gap-ms).
    #[arg(long)]
    member_every_ms: Option<u64>,
    /// Mean duration of a fault.
    #[arg(long, default_value_t = 2500)]
    fault_ms: u64,
    /// Fewer acknowledged operations than this make the run a failure.
    #[arg(long, default_value_t = 1000)]
    min_ok: usize,
    /// Fewer fault kinds injected than this make the run a failure.
    #[arg(long, default_value_t = 2)]
    min_fault_kinds: usize,
    /// Seconds the healed cluster may take to serve again.
    #[arg(long, default_value_t = 30)]
    recover_timeout_s: u64,
    /// The checker's time limit in seconds (default: 120, or twice the duration if more: a
    /// 300 s run's 310,000 operations took the checker 123 s on 2 busy cores).
    #[arg(long)]
    checker_timeout_s: Option<u64>,
    /// The checker's directory (default: LOGLESS_CHECKER_DIR, else verify/checker/ of the source tree).
    #[arg(long)]
    checker_dir: Option<PathBuf>,
    /// The logless binary (default: LOGLESS_BIN, else `logless` next to this executable).
    #[arg(long)]
    logless_bin: Option<PathBuf>,
    /// Keep the replicas' data directories after a passing run.
    #[arg(long)]
    keep_data: bool,
    /// The replicas' log level.
    #[arg(long, default_value = "warn")]
    log_level: String,
    /// Print progress every this many seconds (0: never; default 10, 60 with --long).
    #[arg(long)]
    progress_s: Option<u64>,
}

/// The `logless` binary: the flag, `LOGLESS_BIN`, or `logless` next to this executable (the
/// same target directory).
fn logless_bin(flag: Option<PathBuf>) -> Result<PathBuf, String> {
    if let Some(path) = flag.or_else(|| std::env::var_os("LOGLESS_BIN").map(PathBuf::from)) {
        return Ok(path);
    }
    let exe = std::env::current_exe().map_err(|e| format!("current executable: {e}"))?;
    let dir = exe.parent().ok_or("the executable has no directory")?;
    // Next to this binary, or one level up when run from target/<profile>/deps.
    for candidate in [dir.join("logless"), dir.join("../logless")] {
        if candidate.is_file() {
            return Ok(candidate);
        }
    }
    Err(format!(
        "no logless binary next to {} (build it with `cargo build --release -p logless` into \
         the same target directory, or set LOGLESS_BIN)",
        exe.display()
    ))
}

fn list<T>(text: &str, parse: impl Fn(&str) -> Result<T, String>) -> Result<Vec<T>, String> {
    text.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty() && *s != "none")
        .map(parse)
        .collect()
}

/// Checks `--recovery`: a mode the log engine has, under that engine, on a medium it runs on.
fn check_recovery(
    recovery: Option<&str>,
    multipaxos: bool,
    durability: &str,
) -> Result<(), String> {
    let Some(recovery) = recovery else {
        return Ok(());
    };
    if !["fullss", "epoch", "pmem"].contains(&recovery) {
        return Err(format!(
            "--recovery must be fullss, epoch or pmem, not {recovery:?}"
        ));
    }
    if !multipaxos && recovery != "fullss" {
        return Err(format!(
            "--recovery {recovery} needs --engine multipaxos: the other engines recover from \
             their disk only"
        ));
    }
    if recovery == "pmem" && !["emulp", "pmem"].contains(&durability) {
        return Err(format!(
            "--recovery pmem keeps the log in persistent memory: it needs --durability emulp \
             (emulated) or pmem, not {durability}"
        ));
    }
    Ok(())
}

fn config(args: RunArgs) -> Result<run::RunConfig, String> {
    if ![3, 5].contains(&args.replicas) {
        return Err("--replicas must be 3 or 5".into());
    }
    if args.clients == 0 || args.keys == 0 || args.ops_per_key == 0 || args.ops_per_group == 0 {
        return Err("--clients, --keys, --ops-per-key and --ops-per-group must be positive".into());
    }
    let (multipaxos, psmr) = match args.engine.as_str() {
        "rmw" => (false, false),
        "multipaxos" => (true, false),
        "psmr" => (false, true),
        other => {
            return Err(format!(
                "--engine must be rmw, multipaxos or psmr, not {other:?}"
            ))
        }
    };
    check_recovery(args.recovery.as_deref(), multipaxos, &args.durability)?;
    for bug in &args.inject_bug {
        if ![
            "accept-inconsistent-quorum",
            "ignore-learned",
            "reply-before-persist",
            "persist-without-ttl",
            "remove-before-all-hold-tombstone",
            "skip-removal-fence",
            "log-skip-noop-fill",
            "log-no-dedup",
            "log-accept-before-persist",
            "log-execute-at-local-clock",
            "log-accept-stale-proposals",
            "log-ignore-epochs",
            "log-rejoin-without-recovery",
            "log-release-while-space-short",
            "psmr-merge-by-arrival",
            "psmr-no-barrier",
        ]
        .contains(&bug.as_str())
        {
            return Err(format!("unknown bug {bug:?}"));
        }
    }
    if args.multi_key_clients > 0 && !multipaxos {
        return Err(
            "the multi-key workload needs --engine multipaxos: rmw refuses MULTI/EXEC and \
             MSET over several keys, as it cannot make them atomic"
                .into(),
        );
    }
    let kinds: Vec<FaultKind> = list(&args.nemesis, |s| s.parse())?;
    if kinds.contains(&FaultKind::KillLeader) && !multipaxos {
        return Err(
            "the kill-leader fault needs --engine multipaxos: under rmw no replica leads, and \
             under psmr each of the k + 1 streams has its own leader (use kill)"
                .into(),
        );
    }
    if let Some(r) = args.replication {
        if multipaxos || psmr || r != 3 || args.replicas <= u16::from(r) {
            return Err(format!(
                "--replication {r} makes a ring of the replicas, each key on {r} of them: it \
                 needs --engine rmw, --replication 3 and --replicas 5 (not --engine {} with \
                 --replicas {})",
                args.engine, args.replicas
            ));
        }
    }
    let ring = args.replication.is_some();
    let spares = if kinds.contains(&FaultKind::Member) {
        if !ring {
            return Err(
                "the member fault changes a ring's configuration: it needs --replication 3 \
                 (and --replicas 5)"
                    .into(),
            );
        }
        let spares = args.spares.unwrap_or(2);
        if spares == 0 || spares > 4 {
            return Err(format!(
                "--spares must be 1 to 4 (the nodes the member fault adds), not {spares}"
            ));
        }
        spares
    } else if args.spares.is_some() {
        return Err("--spares is for the member fault (--nemesis …,member)".into());
    } else {
        0
    };
    let default_kinds = if psmr {
        "entry"
    } else if ring {
        // A ring runs MULTI ... EXEC only on a node that holds its keys, and the workload's
        // hashes, lists and sorted sets send transactions to any node.
        "counter,register,set,expiring,lock"
    } else {
        "counter,register,set,expiring,lock,hash,list,zset"
    };
    let key_kinds = list(
        args.key_kinds.as_deref().unwrap_or(default_kinds),
        KeyKind::parse,
    )?;
    if key_kinds.is_empty() {
        return Err("--key-kinds names no kind".into());
    }
    if ring
        && key_kinds
            .iter()
            .any(|k| [KeyKind::Hash, KeyKind::List, KeyKind::ZSet].contains(k))
    {
        return Err(
            "--replication: hashes, lists and sorted sets get single-key transactions, which a \
             ring runs only on a node that holds their key (others refuse EXEC), while the \
             clients send them to any replica; leave hash, list and zset out of --key-kinds"
                .into(),
        );
    }
    let psmr = if psmr {
        if key_kinds.iter().any(|&k| k != KeyKind::Entry) {
            return Err(
                "--engine psmr serves the B+-tree service's SET NX, SET XX, GET and DEL only: \
                 --key-kinds must be entry"
                    .into(),
            );
        }
        if !["psmr", "sp-smr", "smr"].contains(&args.psmr_mode.as_str()) {
            return Err(format!(
                "--psmr-mode must be psmr, sp-smr or smr (no-rep has no replicas to fault), \
                 not {:?}",
                args.psmr_mode
            ));
        }
        if args.psmr_threads == 0 {
            return Err("--psmr-threads must be positive".into());
        }
        Some(cluster::PsmrLayout {
            mode: args.psmr_mode,
            threads: args.psmr_threads,
        })
    } else {
        None
    };
    let duration_s = args.duration_s.unwrap_or(if args.long { 1800 } else { 60 });
    let seed = args.seed.unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.as_nanos() as u64)
    });
    let out = match args.out {
        Some(out) => out,
        None => tempfile::Builder::new()
            .prefix("logless-chaos-")
            .tempdir()
            .map_err(|e| format!("temporary directory: {e}"))?
            .keep(),
    };
    let think_ms = args.think_ms.unwrap_or(if args.long { 20 } else { 2 });
    let progress_s = args.progress_s.unwrap_or(if args.long { 60 } else { 10 });
    Ok(run::RunConfig {
        replicas: args.replicas,
        spares,
        duration: Duration::from_secs(duration_s),
        workload: WorkloadConfig {
            clients: args.clients,
            keys: args.keys,
            kinds: key_kinds,
            ops_per_key: args.ops_per_key,
            unknowns_per_key: args.unknowns_per_key.max(1),
            op_timeout: Duration::from_millis(args.op_timeout_ms),
            think: Duration::from_millis(think_ms),
            stamp_slack_ms: args.stamp_slack_ms,
            seed,
        },
        multi_key: multikey::MultiKeyConfig {
            clients: args.multi_key_clients,
            ops_per_group: args.ops_per_group,
            op_timeout: Duration::from_millis(args.op_timeout_ms),
            think: Duration::from_millis(think_ms),
            seed,
        },
        cluster: cluster::ClusterConfig {
            bin: logless_bin(args.logless_bin)?,
            durability: args.durability,
            engine: args.engine,
            recovery: args.recovery,
            psmr,
            bugs: args.inject_bug,
            request_timeout_ms: args.request_timeout_ms,
            removal_grace_ms: args.removal_grace_ms,
            log_level: args.log_level,
            replication: args.replication,
        },
        schedule: Schedule {
            kinds,
            gap: Duration::from_millis(args.fault_gap_ms),
            hold: Duration::from_millis(args.fault_ms),
            seed,
            member_serial: args.member_serial,
            member_every: Duration::from_millis(
                args.member_every_ms
                    .unwrap_or_else(|| (duration_s * 100).max(args.fault_gap_ms)),
            ),
        },
        out,
        keep_data: args.keep_data,
        recover_timeout: Duration::from_secs(args.recover_timeout_s),
        checker_timeout: Duration::from_secs(
            args.checker_timeout_s
                .unwrap_or_else(|| 120.max(duration_s * 2)),
        ),
        checker_dir: args.checker_dir.unwrap_or_else(checker::default_dir),
        progress: Duration::from_secs(progress_s),
    })
}

fn main() -> ExitCode {
    let Command::Run(args) = Cli::parse().command;
    let limits = report::Limits {
        min_ok: args.min_ok,
        min_fault_kinds: args.min_fault_kinds,
    };
    let config = match config(*args) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("logless-chaos: error: {e}");
            return ExitCode::from(report::EXIT_USAGE);
        }
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("logless-chaos: error: cannot start the runtime: {e}");
            return ExitCode::from(report::EXIT_INCONCLUSIVE);
        }
    };
    report::print_header(&config);
    let out = config.out.clone();
    let result = runtime.block_on(run::run(config));
    // Abandon stragglers (proxy tasks) rather than wait for them.
    runtime.shutdown_timeout(Duration::from_millis(100));
    match result {
        Ok(report) => ExitCode::from(report::print(&report, &limits, &out)),
        Err(e) => {
            eprintln!("logless-chaos: the run could not complete: {e}");
            eprintln!("logless-chaos: files are in {}", out.display());
            ExitCode::from(report::EXIT_INCONCLUSIVE)
        }
    }
}
