//! `logless up`: a local cluster of replica processes on loopback, run until Ctrl-C.
//!
//! Replica `i` (from 0) serves Redis on `port + i`, its peers on `port + 1000 + i` and HTTP on
//! `port + 2000 + i`; its data is under `DIR/node-{i+1}` and its log in `DIR/node-{i+1}.log`
//! (the layout of [`logless_harness::server::loopback_cluster`], which starts them).
//!
//! It supervises them: a replica that exits is reported and started again after a backoff
//! (1 s, doubling to at most [`RESTART_BACKOFF_MAX`], back to 1 s after a replica has run for
//! [`RESTART_STABLE`]), while the others go on serving. Ctrl-C or SIGTERM stops them all, at
//! any moment: during start-up it stops the replicas started so far and exits with 130.
//!
//! The replicas of one data directory form one cluster: the first `logless up` on a directory
//! writes a cluster id (`DIR/cluster-id`) and a random cluster secret (`DIR/cluster-secret`,
//! readable by its owner only), and every replica is started with them, so that a replica of
//! another `logless up` on the same machine cannot join it.
//!
//! With `--tls` the Redis ports speak TLS only and peers mutual TLS, with throwaway
//! certificates in `DIR/tls/` ([`crate::up_tls`]).
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, ExitCode};
use std::time::{Duration, Instant};

use logless_harness::server::{self, ServerSpec, HTTP_PORT_OFFSET};

use crate::up_tls::UpTls;

/// The first replica's Redis port by default.
pub const PORT_DEFAULT: u16 = 7379;
/// The first replica's HTTP port by default.
pub const HTTP_PORT_DEFAULT: u16 = PORT_DEFAULT + HTTP_PORT_OFFSET;
/// How long the readiness probe waits for each answer: a read needs a quorum of replicas that
/// may still be opening their stores.
const PROBE_TIMEOUT: Duration = Duration::from_secs(6);
/// The first wait before a replica that exited is started again.
pub const RESTART_BACKOFF_MIN: Duration = Duration::from_secs(1);
/// The longest wait before a replica that keeps exiting is started again.
pub const RESTART_BACKOFF_MAX: Duration = Duration::from_secs(30);
/// A replica that ran this long before it exited is restarted after the shortest wait.
pub const RESTART_STABLE: Duration = Duration::from_secs(60);
/// The cluster id file in `logless up`'s directory.
pub const CLUSTER_ID_FILE: &str = "cluster-id";
/// The cluster secret file in `logless up`'s directory.
pub const CLUSTER_SECRET_FILE: &str = "cluster-secret";
/// The file of `--requirepass` in `logless up`'s directory.
pub const REQUIREPASS_FILE: &str = "requirepass";

#[derive(clap::Args, Clone, Debug)]
pub struct UpArgs {
    /// Replicas (nodes): 1, 3, 5 or 7; with --replication below it, a ring of up to 64.
    #[arg(long, visible_alias = "nodes", default_value_t = 3)]
    pub replicas: u16,
    /// Each key's replicas, R (3, 5 or 7; default: every node). Below --nodes the nodes form a
    /// ring: each key lives on R of them, and every node serves every key by forwarding
    /// (docs/ring.md; the rmw engine, without TLS).
    #[arg(long)]
    pub replication: Option<u8>,
    /// The first replica's Redis port; the others follow it.
    #[arg(long, default_value_t = PORT_DEFAULT)]
    pub port: u16,
    /// Where the replicas keep their data and logs.
    #[arg(long, default_value = "logless-data")]
    pub dir: PathBuf,
    /// memory, mmap, sync, emulp (persistent memory emulated on DRAM: the pmem code paths,
    /// surviving a process crash but not a power loss) or pmem.
    #[arg(long, default_value = "mmap")]
    pub durability: String,
    /// The replication engine: rmw (per-key registers), multipaxos (one log; multi-key
    /// commands and MULTI/EXEC are atomic) or psmr (the B+-tree key-value service on P-SMR).
    #[arg(long, default_value_t = logless_node::config::Engine::Rmw)]
    pub engine: logless_node::config::Engine,
    /// How a replica of the multipaxos engine recovers after a crash: fullss (log and
    /// snapshots on disk), epoch (EpochSS: state in memory, recovered from the peers) or pmem
    /// (mPaxos: log and snapshots in persistent memory, --durability emulp or pmem; votes at
    /// once after a restart) or pmem-sm (mPaxosSM: the state machine in place there too).
    #[arg(long, default_value_t = logless_node::config::Recovery::Fullss)]
    pub recovery: logless_node::config::Recovery,
    /// The psmr engine's worker threads per replica (0: the cores available).
    #[arg(long, default_value_t = 0)]
    pub threads: u16,
    /// The psmr engine's mode: psmr, sp-smr, smr or no-rep (one replica, no replication:
    /// --replicas must be 1).
    #[arg(long, default_value = "psmr")]
    pub psmr_mode: String,
    /// The service the psmr engine replicates: btree (the default) or netfs (NetFS, through
    /// LOGLESS.FS; mount it with `logless fs mount DIR --connect HOST:PORT`).
    #[arg(long, default_value = "btree")]
    pub service: String,
    /// A setting of the log engine for every replica, NAME=VALUE (see `logless server
    /// --multipaxos`); repeat it for several.
    #[arg(long = "multipaxos", value_name = "NAME=VALUE")]
    pub multipaxos: Vec<String>,
    /// Shards per replica (the per-key engine only: the log engine has one log).
    #[arg(long, default_value_t = 1)]
    pub shards: u16,
    /// Read retries before a read writes through (X).
    #[arg(long, default_value_t = 1)]
    pub read_retries: u32,
    /// Whether reads ask a quorum first (true) or every replica at once (false).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub thrifty_reads: bool,
    /// Whether fast writes vote with a quorum first (true) or every replica at once (false):
    /// for clients that send each key to one replica.
    #[arg(long, default_value_t = false, action = clap::ArgAction::Set)]
    pub thrifty_writes: bool,
    /// The most registers each shard's proposer keeps; beyond it, idle ones are dropped.
    #[arg(long, default_value_t = logless_rmw::config::REGISTERS_MAX_DEFAULT)]
    pub proposer_registers_max: usize,
    /// The replicas' log level.
    #[arg(long, default_value = "info")]
    pub log_level: String,
    /// The password clients must give (AUTH) on every replica: written to DIR/requirepass,
    /// readable by its owner only, so that it is on no replica's command line.
    #[arg(long, env = "LOGLESS_REQUIREPASS", hide_env_values = true)]
    pub requirepass: Option<String>,
    /// Seconds to wait for the cluster to serve.
    #[arg(long, default_value_t = 30)]
    pub ready_timeout_s: u64,
    /// Serve Redis over TLS only and connect peers with mutual TLS, with a throwaway CA and
    /// certificates in DIR/tls/ (made on first use).
    #[arg(long)]
    pub tls: bool,
    /// With --tls: yes (clients present DIR/tls/client.crt or another certificate of the CA),
    /// optional or no.
    #[arg(long, default_value = "yes", requires = "tls")]
    pub tls_auth_clients: String,
    /// Serve as a Redis Cluster (every replica with cluster-enabled): for cluster-aware
    /// clients such as `redis-cli -c`; keys of one command must then share a slot (hash tags).
    #[arg(long)]
    pub cluster_enabled: bool,
}

impl UpArgs {
    /// Every option at its default, as `logless up` alone gives them.
    pub fn defaults() -> UpArgs {
        #[derive(clap::Parser)]
        struct Only {
            #[command(flatten)]
            up: UpArgs,
        }
        <Only as clap::Parser>::parse_from(["logless"]).up
    }
}

/// The readiness probe's question `q`, as a cluster of the service asks it. NetFS has no GET:
/// its read that needs the groups is a request NetFS cannot decode, which is ordered all the
/// same and answered (bulk) with NetFS's malformed reply.
fn readiness_question<'a>(netfs: bool, q: &[&'a str]) -> Vec<&'a str> {
    match q.first() {
        Some(&"GET") if netfs => vec!["LOGLESS.FS", "logless:up:"],
        _ => q.to_vec(),
    }
}

/// `n` random bytes from the operating system, as hex.
fn random_hex(n: usize) -> std::io::Result<String> {
    let mut bytes = vec![0u8; n];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut bytes)?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// The cluster id and the secret file of the cluster in `dir`, made on first use: the id as
/// `up-` and 8 random hex digits, the secret as 64 (32 bytes), readable by the owner only.
pub fn cluster_identity(dir: &Path) -> std::io::Result<(String, PathBuf)> {
    use std::os::unix::fs::OpenOptionsExt;
    let id_path = dir.join(CLUSTER_ID_FILE);
    let secret_path = dir.join(CLUSTER_SECRET_FILE);
    if !secret_path.exists() {
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&secret_path)?;
        std::io::Write::write_all(&mut file, format!("{}\n", random_hex(32)?).as_bytes())?;
    }
    if !id_path.exists() {
        std::fs::write(&id_path, format!("up-{}\n", random_hex(4)?))?;
    }
    let id = std::fs::read_to_string(&id_path)?.trim().to_string();
    Ok((id, secret_path))
}

/// Writes `password` to `DIR/requirepass`, readable by its owner only, and returns the path.
pub fn write_requirepass(dir: &Path, password: &str) -> std::io::Result<PathBuf> {
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    let path = dir.join(REQUIREPASS_FILE);
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&path)?;
    // An older file keeps its mode through `open`: make sure of it.
    file.set_permissions(std::fs::Permissions::from_mode(0o600))?;
    std::io::Write::write_all(&mut file, format!("{password}\n").as_bytes())?;
    Ok(path)
}

/// The replicas' specs: `logless up`'s layout with its options as flags.
fn specs(
    args: &UpArgs,
    cluster_id: &str,
    secret: &Path,
    requirepass: Option<&Path>,
) -> Vec<ServerSpec> {
    let specs = server::loopback_cluster(args.replicas, args.port, &args.dir, &args.durability);
    let client_addrs = server::client_addrs_flag(&specs);
    specs
        .into_iter()
        .map(|spec| {
            ServerSpec {
                shards: Some(args.shards),
                ..spec
            }
            .flag("--engine", args.engine)
            .flag("--recovery", args.recovery)
            .flag("--threads", args.threads)
            .flag("--psmr-mode", &args.psmr_mode)
            .flag("--service", &args.service)
            .flag("--read-retries", args.read_retries)
            .flag("--thrifty-reads", args.thrifty_reads)
            .flag("--thrifty-writes", args.thrifty_writes)
            .flag("--proposer-registers-max", args.proposer_registers_max)
            .flag("--log-level", &args.log_level)
            .flag("--cluster-id", cluster_id)
            .flag("--cluster-secret-file", secret.display())
        })
        .map(|spec| {
            let settings = args.multipaxos.iter();
            settings.fold(spec, |spec, setting| spec.flag("--multipaxos", setting))
        })
        .map(|spec| match requirepass {
            Some(path) => spec.flag("--requirepass-file", path.display()),
            None => spec,
        })
        .map(|spec| match args.replication {
            Some(r) => spec.flag("--replication", r),
            None => spec,
        })
        .map(|spec| {
            if args.cluster_enabled {
                spec.args(["--cluster-enabled"])
            } else {
                spec
            }
        })
        .map(|spec| {
            if args.cluster_enabled || is_ring(args) {
                spec.flag("--peer-client-addrs", &client_addrs)
            } else {
                spec
            }
        })
        .collect()
}

/// Whether `args` start a ring: fewer replicas of each key than nodes.
fn is_ring(args: &UpArgs) -> bool {
    args.replication
        .is_some_and(|r| u16::from(r) != args.replicas)
}

/// Checks the node count and the replication degree: 1, 3, 5 or 7 nodes holding every key,
/// or a ring of up to 64 nodes with 3, 5 or 7 replicas of each key.
fn check_nodes(args: &UpArgs) -> Result<(), String> {
    if !is_ring(args) {
        if [1, 3, 5, 7].contains(&args.replicas) {
            return Ok(());
        }
        return Err(
            "--replicas (--nodes) must be 1, 3, 5 or 7, or give --replication R (3, 5 \
                    or 7) for a ring of more nodes"
                .into(),
        );
    }
    let r = args.replication.map_or(0, u16::from);
    if ![3, 5, 7].contains(&r) {
        return Err(format!("--replication must be 3, 5 or 7, not {r}"));
    }
    if r > args.replicas {
        return Err(format!(
            "--replication {r} needs at least {r} nodes, not {}",
            args.replicas
        ));
    }
    let max = logless_node::ring::RING_NODES_MAX;
    if usize::from(args.replicas) > max {
        return Err(format!("a ring has at most {max} nodes"));
    }
    if args.engine != logless_node::config::Engine::Rmw {
        return Err(format!(
            "a ring (--replication below --nodes) is the rmw engine's, not {}'s",
            args.engine
        ));
    }
    if args.tls {
        return Err(
            "a ring forwards commands over the nodes' plain client ports: no --tls yet".into(),
        );
    }
    Ok(())
}

/// Stops every running replica: SIGTERM, so that each flushes and closes its store, then
/// SIGKILL to those still running after 10 s.
fn stop(children: &mut [Option<Child>]) {
    let mut children: Vec<&mut Child> = children.iter_mut().flatten().collect();
    server::stop_all(&mut children, Duration::from_secs(10));
}

/// One replica as `logless up` supervises it.
struct Supervised {
    /// Its process while it runs.
    child: Option<Child>,
    /// When it was last started.
    started: Instant,
    /// When to start it again, once it has exited.
    restart_at: Option<Instant>,
    /// The wait before its next restart.
    backoff: Duration,
}

impl Supervised {
    /// Schedules the next start after the replica exited at `now` (`exited`) or could not be
    /// started, and returns the wait: the backoff, which then doubles up to
    /// [`RESTART_BACKOFF_MAX`], back to [`RESTART_BACKOFF_MIN`] after a run of
    /// [`RESTART_STABLE`].
    fn back_off(&mut self, now: Instant, exited: bool) -> Duration {
        if exited && now.duration_since(self.started) >= RESTART_STABLE {
            self.backoff = RESTART_BACKOFF_MIN;
        }
        let wait = self.backoff;
        self.restart_at = Some(now + wait);
        self.backoff = (self.backoff * 2).min(RESTART_BACKOFF_MAX);
        wait
    }

    /// Checks on the replica: reports an exit and schedules its restart; restarts it when due.
    fn check(&mut self, spec: &ServerSpec, exe: &Path, now: Instant) {
        if let Some(child) = &mut self.child {
            let Ok(Some(status)) = child.try_wait() else {
                return;
            };
            self.child = None;
            if status.code() == Some(i32::from(crate::server::EXIT_LOST_IDENTITY)) {
                eprintln!(
                    "replica {} was refused by its peers: its data directory {} is not the one \
                     they know (lost or replaced). It is not restarted; the others keep serving. \
                     Bring it back with `logless server --rejoin` and its flags (docs/lost-disk.md; \
                     its log: {})",
                    spec.node_id,
                    spec.dir.display(),
                    spec.log.display()
                );
                return;
            }
            let wait = self.back_off(now, true);
            eprintln!(
                "replica {} exited ({status}); the others keep serving; restarting it in {} s \
                 (its log: {})",
                spec.node_id,
                wait.as_secs(),
                spec.log.display()
            );
            return;
        }
        if self.restart_at.is_some_and(|at| now >= at) {
            self.restart_at = None;
            self.started = now;
            match spec.spawn(exe) {
                Ok(child) => {
                    eprintln!("replica {} restarted", spec.node_id);
                    self.child = Some(child);
                }
                Err(e) => {
                    eprintln!("cannot restart replica {}: {e}", spec.node_id);
                    self.back_off(now, false);
                }
            }
        }
    }
}

/// Ctrl-C (SIGINT) and SIGTERM, caught from before the first replica is spawned to the end,
/// so that a signal at any moment stops every replica started so far rather than killing
/// `logless up` alone and leaving them running.
struct Signals {
    runtime: tokio::runtime::Runtime,
    interrupt: tokio::signal::unix::Signal,
    terminate: tokio::signal::unix::Signal,
}

impl Signals {
    fn catch() -> std::io::Result<Signals> {
        use tokio::signal::unix::{signal, SignalKind};
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        // The streams register their handlers when made, inside the runtime; from then on a
        // signal is kept until it is received, even while nothing waits for it.
        let (interrupt, terminate) = runtime.block_on(async {
            Ok::<_, std::io::Error>((
                signal(SignalKind::interrupt())?,
                signal(SignalKind::terminate())?,
            ))
        })?;
        Ok(Signals {
            runtime,
            interrupt,
            terminate,
        })
    }

    /// Waits `wait`, or less if Ctrl-C or SIGTERM comes: then true.
    fn wait(&mut self, wait: Duration) -> bool {
        let Signals {
            runtime,
            interrupt,
            terminate,
        } = self;
        runtime.block_on(async {
            tokio::select! {
                _ = interrupt.recv() => true,
                _ = terminate.recv() => true,
                _ = tokio::time::sleep(wait) => false,
            }
        })
    }
}

/// Supervises the replicas until Ctrl-C or SIGTERM.
fn supervise(
    children: Vec<Option<Child>>,
    specs: &[ServerSpec],
    exe: &Path,
    signals: &mut Signals,
) -> Vec<Option<Child>> {
    let now = Instant::now();
    let mut replicas: Vec<Supervised> = children
        .into_iter()
        .map(|child| Supervised {
            child,
            started: now,
            restart_at: None,
            backoff: RESTART_BACKOFF_MIN,
        })
        .collect();
    while !signals.wait(Duration::from_millis(200)) {
        let now = Instant::now();
        for (replica, spec) in replicas.iter_mut().zip(specs) {
            replica.check(spec, exe, now);
        }
    }
    replicas.into_iter().map(|r| r.child).collect()
}

pub fn up(args: &UpArgs) -> ExitCode {
    if let Err(e) = check_nodes(args) {
        eprintln!("error: {e}");
        return ExitCode::from(2);
    }
    let psmr = args.engine == logless_node::config::Engine::Psmr;
    if args.cluster_enabled && (args.replicas < 3 || psmr) {
        eprintln!(
            "error: --cluster-enabled needs 3, 5 or 7 replicas of the rmw or multipaxos engine \
             (a slot has 3, 5 or 7 replicas; the psmr engine keeps its keys in order)"
        );
        return ExitCode::from(2);
    }
    if args.engine == logless_node::config::Engine::Psmr
        && args.psmr_mode == "no-rep"
        && args.replicas != 1
    {
        eprintln!(
            "error: --psmr-mode no-rep runs one process without replication: give --replicas 1"
        );
        return ExitCode::from(2);
    }
    let durability = match logless_node::config::parse_durability(&args.durability) {
        Ok(durability) => durability,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    if let Err(e) = args
        .recovery
        .check(args.engine, usize::from(args.replicas), durability)
    {
        eprintln!("error: {e}");
        return ExitCode::from(2);
    }
    let n = args.replicas;
    if u32::from(args.port) + u32::from(HTTP_PORT_OFFSET) + u32::from(n) > 65_535
        || args.port < 1024
    {
        eprintln!("error: --port must leave room for peer and HTTP ports (1024 to 63000)");
        return ExitCode::from(2);
    }
    if let Err(e) = std::fs::create_dir_all(&args.dir) {
        eprintln!("error: cannot create {}: {e}", args.dir.display());
        return ExitCode::FAILURE;
    }
    let exe = match std::env::current_exe() {
        Ok(exe) => exe,
        Err(e) => {
            eprintln!("error: cannot find the logless binary: {e}");
            return ExitCode::FAILURE;
        }
    };
    let (cluster_id, secret) = match cluster_identity(&args.dir) {
        Ok(identity) => identity,
        Err(e) => {
            eprintln!(
                "error: cannot make the cluster secret in {}: {e}",
                args.dir.display()
            );
            return ExitCode::FAILURE;
        }
    };
    if args.requirepass.as_deref() == Some("") {
        eprintln!("error: --requirepass must not be empty");
        return ExitCode::from(2);
    }
    let requirepass = match &args.requirepass {
        None => None,
        Some(password) => match write_requirepass(&args.dir, password) {
            Ok(path) => Some(path),
            Err(e) => {
                eprintln!(
                    "error: cannot write the password file in {}: {e}",
                    args.dir.display()
                );
                return ExitCode::FAILURE;
            }
        },
    };
    let tls = match args
        .tls
        .then(|| UpTls::prepare(&args.dir, &args.tls_auth_clients))
    {
        None => None,
        Some(Ok(tls)) => Some(tls),
        Some(Err(e)) => {
            eprintln!("error: TLS: {e}");
            return ExitCode::FAILURE;
        }
    };
    let specs = specs(args, &cluster_id, &secret, requirepass.as_deref());
    let clients: Vec<_> = specs.iter().map(|s| s.client).collect();
    let specs: Vec<ServerSpec> = match &tls {
        Some(tls) => specs.into_iter().map(|spec| tls.apply(spec)).collect(),
        None => specs,
    };
    let mut signals = match Signals::catch() {
        Ok(signals) => signals,
        Err(e) => {
            eprintln!("error: cannot catch Ctrl-C: {e}");
            return ExitCode::FAILURE;
        }
    };
    let mut children: Vec<Option<Child>> = Vec::new();
    for spec in &specs {
        // Each `logless up` starts its replicas' logs afresh (the launcher appends).
        let spawned = std::fs::File::create(&spec.log).and_then(|_| spec.spawn(&exe));
        match spawned {
            Ok(child) => children.push(Some(child)),
            Err(e) => {
                eprintln!("error: cannot start replica {}: {e}", spec.node_id);
                stop(&mut children);
                return ExitCode::FAILURE;
            }
        }
    }
    // Ready when every replica answers PING and a read through the first one is answered,
    // which needs a quorum.
    let deadline = Instant::now() + Duration::from_secs(args.ready_timeout_s);
    let mut ready = false;
    while Instant::now() < deadline {
        for (child, spec) in children.iter_mut().zip(&specs) {
            if let Some(Ok(Some(status))) = child.as_mut().map(Child::try_wait) {
                eprintln!(
                    "error: replica {} exited ({status}) before serving; its log:\n{}",
                    spec.node_id,
                    logless_harness::log_tail(&spec.log, 15)
                );
                stop(&mut children);
                return ExitCode::FAILURE;
            }
        }
        let password = args.requirepass.as_deref();
        let netfs = args.service == "netfs";
        let serves = match &tls {
            None => logless_harness::probe::cluster_serves_by(&clients, "logless:up:", |a, q| {
                logless_harness::probe::resp_ask_as(
                    a,
                    password,
                    &readiness_question(netfs, q),
                    PROBE_TIMEOUT,
                )
            }),
            Some(tls) => {
                logless_harness::probe::cluster_serves_by(&clients, "logless:up:", |a, q| {
                    tls.ask(a, password, &readiness_question(netfs, q), PROBE_TIMEOUT)
                })
            }
        };
        if serves {
            ready = true;
            break;
        }
        // A Ctrl-C during start-up (or one that came while a probe waited) stops the replicas
        // started so far.
        if signals.wait(Duration::from_millis(100)) {
            println!("interrupted before the cluster served; stopping the replicas");
            stop(&mut children);
            println!("stopped");
            return ExitCode::from(130);
        }
    }
    if !ready {
        eprintln!(
            "error: the cluster did not serve within {} s; replica logs are in {}",
            args.ready_timeout_s,
            args.dir.display()
        );
        stop(&mut children);
        return ExitCode::FAILURE;
    }
    let replicas = match (is_ring(args), args.replication) {
        (true, Some(r)) => format!("a ring of {n} nodes, each key on {r} of them,"),
        _ => format!("{n} replicas"),
    };
    println!(
        "logless: {replicas} serving ({} engine, {} mode, {} shard(s) each, data in {})",
        args.engine,
        args.durability,
        args.shards,
        args.dir.display()
    );
    for (spec, client) in specs.iter().zip(&clients) {
        println!(
            "  replica {}: redis {}   metrics http://{}/metrics   log {}",
            spec.node_id,
            client,
            spec.http,
            spec.log.display()
        );
    }
    let tls_options = tls.as_ref().map(|t| t.redis_cli_options() + " ");
    println!(
        "connect with:  redis-cli {}{}-p {}{}   (any replica serves every key)",
        tls_options.unwrap_or_default(),
        if args.cluster_enabled { "-c " } else { "" },
        args.port,
        if requirepass.is_some() {
            " --askpass"
        } else {
            ""
        }
    );
    println!(
        "cluster {cluster_id}; peers prove the secret in {}",
        secret.display()
    );
    println!("a replica that exits is restarted; stop with Ctrl-C");
    let mut children = supervise(children, &specs, &exe, &mut signals);
    println!("stopping the replicas");
    stop(&mut children);
    println!("stopped");
    ExitCode::SUCCESS
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A replica's command line, as text.
    fn command_line(spec: &ServerSpec) -> Vec<String> {
        spec.command_line()
            .iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect()
    }

    #[test]
    fn logless_alone_starts_the_documented_default_cluster() {
        let d = UpArgs::defaults();
        assert_eq!(
            (d.replicas, d.port, d.shards, d.read_retries),
            (3, PORT_DEFAULT, 1, 1)
        );
        assert_eq!(d.dir, PathBuf::from("logless-data"));
        assert_eq!(
            (d.durability.as_str(), d.log_level.as_str()),
            ("mmap", "info")
        );
        assert!(d.thrifty_reads);
        assert!(!d.thrifty_writes);
        assert_eq!(
            d.proposer_registers_max,
            logless_node::config::NodeConfig::default().proposer_registers_max
        );
        assert_eq!(d.ready_timeout_s, 30);
        assert!(!d.tls);
        assert_eq!(d.tls_auth_clients, "yes");
    }

    #[test]
    fn cluster_mode_tells_every_replica_every_client_address() {
        let mut args = UpArgs::defaults();
        let plain = specs(&args, "up-x", Path::new("s"), None);
        assert!(!plain[0]
            .command_line()
            .contains(&"--cluster-enabled".into()));
        args.cluster_enabled = true;
        args.port = 20_000;
        for spec in specs(&args, "up-x", Path::new("s"), None) {
            let line = command_line(&spec);
            assert!(line.contains(&"--cluster-enabled".to_string()), "{line:?}");
            let at = line
                .iter()
                .position(|a| a == "--peer-client-addrs")
                .unwrap();
            assert_eq!(
                line[at + 1],
                "1=127.0.0.1:20000,2=127.0.0.1:20001,3=127.0.0.1:20002"
            );
        }
    }

    #[test]
    fn a_ring_is_checked_and_tells_every_node_its_replication_and_every_client_address() {
        let mut args = UpArgs::defaults();
        args.replicas = 6;
        assert!(check_nodes(&args).unwrap_err().contains("--replication"));
        args.replicas = 5;
        args.replication = Some(3);
        check_nodes(&args).unwrap();
        args.port = 20_000;
        for spec in specs(&args, "up-x", Path::new("s"), None) {
            let line = command_line(&spec);
            let value = |flag: &str| {
                let at = line.iter().position(|a| a == flag).unwrap();
                line[at + 1].clone()
            };
            assert_eq!(value("--replication"), "3");
            // Removal of dead registers is off by default on a ring (docs/ring.md §5).
            assert!(!line.contains(&"--remove-dead-registers".to_string()));
            assert!(value("--peer-client-addrs").starts_with("1=127.0.0.1:20000,2="));
            assert!(!line.contains(&"--cluster-enabled".to_string()));
        }
        for (nodes, r, refusal) in [(5, 4, "3, 5 or 7"), (3, 5, "at least 5"), (70, 3, "64")] {
            args.replicas = nodes;
            args.replication = Some(r);
            assert!(
                check_nodes(&args).unwrap_err().contains(refusal),
                "{nodes} {r}"
            );
        }
        args.replicas = 5;
        args.replication = Some(3);
        args.tls = true;
        assert!(check_nodes(&args).unwrap_err().contains("--tls"));
        args.tls = false;
        args.engine = logless_node::config::Engine::Multipaxos;
        assert!(check_nodes(&args).unwrap_err().contains("rmw"));
    }

    #[test]
    fn a_replica_that_keeps_exiting_waits_longer_each_time_until_it_ran_long_enough() {
        let start = Instant::now();
        let mut replica = Supervised {
            child: None,
            started: start,
            restart_at: None,
            backoff: RESTART_BACKOFF_MIN,
        };
        // Exits soon after each start: 1, 2, 4, 8, 16 s, then at most 30 s.
        let mut now = start;
        let mut waits = Vec::new();
        for _ in 0..7 {
            now += Duration::from_secs(1);
            let wait = replica.back_off(now, true);
            assert_eq!(replica.restart_at, Some(now + wait));
            waits.push(wait.as_secs());
            now += wait;
            replica.started = now;
        }
        assert_eq!(waits, [1, 2, 4, 8, 16, 30, 30]);
        // A start that fails doubles the wait too (it stays at the most here).
        assert_eq!(replica.back_off(now, false), RESTART_BACKOFF_MAX);
        // One that ran for RESTART_STABLE before it exited is restarted after the shortest.
        now += RESTART_STABLE;
        assert_eq!(replica.back_off(now, true), RESTART_BACKOFF_MIN);
        // And doubles again if it then exits soon after its restart.
        now += RESTART_BACKOFF_MIN;
        replica.started = now;
        now += Duration::from_secs(1);
        assert_eq!(replica.back_off(now, true).as_secs(), 2);
    }

    #[test]
    fn the_password_file_is_private_and_replaced() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let stale = dir.path().join(REQUIREPASS_FILE);
        std::fs::write(&stale, "old password, world-readable\n").unwrap();
        std::fs::set_permissions(&stale, std::fs::Permissions::from_mode(0o644)).unwrap();
        let path = write_requirepass(dir.path(), "pw-9f3k-secret").unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "pw-9f3k-secret\n");
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        let spec = &specs(&UpArgs::defaults(), "up-x", Path::new("s"), Some(&path))[0];
        let line = command_line(spec);
        assert!(line.contains(&"--requirepass-file".to_string()));
        assert!(!line.iter().any(|a| a.contains("pw-9f3k")), "{line:?}");
    }
}
