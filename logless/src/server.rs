//! `logless server`: one replica, configured by flags, `LOGLESS_…` environment variables and a
//! TOML file.
//!
//! Precedence, highest first: a flag, its environment variable (`--node-id` is
//! `LOGLESS_NODE_ID`, `--cluster-secret-file` is `LOGLESS_CLUSTER_SECRET_FILE`, and so on for
//! every flag; `--config` is `LOGLESS_CONFIG`), the file's key, the built-in default. The log
//! filter is `--log-level` (`LOGLESS_LOG_LEVEL`) if given, else `RUST_LOG`, else `info`.
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use logless_node::config::{parse_peers, set_peer_client_addrs, NodeConfig, Password};
use logless_node::node::{self, Bugs};
use tracing::{error, info};

/// The exit status of a replica its peers refused because its data directory was lost or is
/// another's (docs/lost-disk.md): restarting it as it is cannot help.
pub const EXIT_LOST_IDENTITY: u8 = 3;

#[derive(clap::Args, Clone, Debug)]
pub struct ServerArgs {
    /// A TOML configuration file; flags given as well override it.
    #[arg(long, env = "LOGLESS_CONFIG")]
    pub config: Option<PathBuf>,
    /// This replica's node id (1 to 65535).
    #[arg(long, env = "LOGLESS_NODE_ID")]
    pub node_id: Option<u16>,
    /// Every replica, this one included: ID=HOST:PORT of their peer listeners, comma-separated.
    #[arg(long, env = "LOGLESS_PEERS")]
    pub peers: Option<String>,
    /// Where Redis clients connect.
    #[arg(long, env = "LOGLESS_CLIENT_ADDR")]
    pub client_addr: Option<SocketAddr>,
    /// Serve as a node of a Redis Cluster (redis.conf's cluster-enabled): CLUSTER SLOTS,
    /// SHARDS, NODES, ..., CROSSSLOT for keys of several slots, MOVED for slots it does not
    /// replicate. Needs every replica's client address (--peer-client-addrs).
    #[arg(long, env = "LOGLESS_CLUSTER_ENABLED")]
    pub cluster_enabled: bool,
    /// Each key's replicas, R: 3, 5 or 7, the same on every node (default: every node). Fewer
    /// than the peers makes a ring: each node holds the keys of its slots and forwards the
    /// others (docs/ring.md); it needs every node's client address (--peer-client-addrs).
    #[arg(long, env = "LOGLESS_REPLICATION")]
    pub replication: Option<u8>,
    /// Every replica's client address as cluster replies name it to clients: ID=HOST:PORT,
    /// comma-separated (this replica's defaults to --client-addr when that is specific).
    #[arg(long, env = "LOGLESS_PEER_CLIENT_ADDRS")]
    pub peer_client_addrs: Option<String>,
    /// Where peers connect.
    #[arg(long, env = "LOGLESS_PEER_ADDR")]
    pub peer_addr: Option<SocketAddr>,
    /// Where /metrics, /health and /status are served.
    #[arg(long, env = "LOGLESS_HTTP_ADDR")]
    pub http_addr: Option<SocketAddr>,
    /// The data directory.
    #[arg(long, env = "LOGLESS_DIR")]
    pub dir: Option<PathBuf>,
    /// memory, mmap, sync, emulp (persistent memory emulated on DRAM: the pmem code paths,
    /// surviving a process crash but not a power loss) or pmem.
    #[arg(long, env = "LOGLESS_DURABILITY")]
    pub durability: Option<String>,
    /// The replication engine, the same on every replica: rmw (per-key registers),
    /// multipaxos (one log; multi-key commands and MULTI/EXEC are atomic) or psmr (the
    /// B+-tree key-value service on P-SMR's parallel streams).
    #[arg(long, env = "LOGLESS_ENGINE")]
    pub engine: Option<logless_node::config::Engine>,
    /// How a replica of the multipaxos engine recovers after a crash, the same on every
    /// replica: fullss (log and snapshots on disk, replayed), epoch (EpochSS: state in memory
    /// only, recovered from the peers; needs a majority up) or pmem (mPaxos: log and snapshots
    /// in persistent memory, needs --durability emulp or pmem; votes at once after a restart
    /// and rebuilds its state machine meanwhile) or pmem-sm (mPaxosSM: the state machine in
    /// place in persistent memory too; votes and serves at once). See docs/recovery.md.
    #[arg(long, env = "LOGLESS_RECOVERY")]
    pub recovery: Option<logless_node::config::Recovery>,
    /// The psmr engine's worker threads, the same on every replica (0: the cores available).
    #[arg(long, env = "LOGLESS_THREADS")]
    pub threads: Option<u16>,
    /// The psmr engine's mode: psmr, sp-smr, smr or no-rep (one process, no peers).
    #[arg(long, env = "LOGLESS_PSMR_MODE")]
    pub psmr_mode: Option<String>,
    /// The service the psmr engine replicates: btree (the B+-tree key-value service, the
    /// default) or netfs (NetFS, through LOGLESS.FS); the same on every replica.
    #[arg(long, env = "LOGLESS_SERVICE")]
    pub service: Option<String>,
    /// A setting of the log engine, NAME=VALUE with a name of the file's `[multipaxos]` table
    /// (suspect_timeout_ms=300, window_instances=10, ...); repeat it for several (the variable
    /// takes them comma-separated).
    #[arg(
        long = "multipaxos",
        value_name = "NAME=VALUE",
        env = "LOGLESS_MULTIPAXOS",
        value_delimiter = ','
    )]
    pub multipaxos: Vec<String>,
    /// Shards (event loops and store files); the same on every replica.
    #[arg(long, env = "LOGLESS_SHARDS")]
    pub shards: Option<u16>,
    /// Read retries before a read writes through (X).
    #[arg(long, env = "LOGLESS_READ_RETRIES")]
    pub read_retries: Option<u32>,
    /// Whether reads ask a quorum first (true) or every replica at once (false).
    #[arg(long, env = "LOGLESS_THRIFTY_READS")]
    pub thrifty_reads: Option<bool>,
    /// Whether fast writes vote with a quorum first (true) or every replica at once (false):
    /// for clients that send each key to one replica.
    #[arg(long, env = "LOGLESS_THRIFTY_WRITES")]
    pub thrifty_writes: Option<bool>,
    /// The most registers each shard's proposer keeps; beyond it, idle ones are dropped.
    #[arg(long, env = "LOGLESS_PROPOSER_REGISTERS_MAX")]
    pub proposer_registers_max: Option<usize>,
    /// Whether deleted and expired keys are removed from every replica (docs/removal.md).
    #[arg(long, env = "LOGLESS_REMOVE_DEAD_REGISTERS")]
    pub remove_dead_registers: Option<bool>,
    /// How long an expired value stays before it is removed, by this replica's clock, in ms
    /// (deleted ones go at once; docs/removal.md).
    #[arg(long, env = "LOGLESS_REMOVAL_GRACE_MS")]
    pub removal_grace_ms: Option<u64>,
    /// The most memory (resident set) the replica may use, in bytes or with redis's units
    /// (512mb, 4gb); above it, commands that need new space are refused (0: no limit).
    #[arg(long, env = "LOGLESS_MAXMEMORY", value_parser = parse_maxmemory)]
    pub maxmemory: Option<u64>,
    /// The largest value in bytes.
    #[arg(long, env = "LOGLESS_VALUE_BYTES_MAX")]
    pub value_bytes_max: Option<usize>,
    /// How long a command may take before its outcome is reported unknown.
    #[arg(long, env = "LOGLESS_REQUEST_TIMEOUT_MS")]
    pub request_timeout_ms: Option<u64>,
    /// The cluster's name: peers of another cluster are refused.
    #[arg(long, env = "LOGLESS_CLUSTER_ID")]
    pub cluster_id: Option<String>,
    /// A file holding the cluster secret (at least 16 bytes) every peer proves in its hello.
    #[arg(long, env = "LOGLESS_CLUSTER_SECRET_FILE")]
    pub cluster_secret_file: Option<PathBuf>,
    /// A file holding the default user's password: clients must AUTH first (Redis's
    /// requirepass, kept off the command line).
    #[arg(long, env = "LOGLESS_REQUIREPASS_FILE", conflicts_with = "requirepass")]
    pub requirepass_file: Option<PathBuf>,
    /// The default user's password. On a command line it shows in process listings: prefer
    /// --requirepass-file or the LOGLESS_REQUIREPASS variable.
    #[arg(long, env = "LOGLESS_REQUIREPASS", hide_env_values = true)]
    pub requirepass: Option<Password>,
    /// Close client connections idle this many seconds (0: never; Redis's timeout).
    #[arg(long, env = "LOGLESS_TIMEOUT")]
    pub timeout: Option<u64>,
    /// The most bytes of one pending client request (Redis's client-query-buffer-limit).
    #[arg(long, env = "LOGLESS_CLIENT_QUERY_BUFFER_LIMIT")]
    pub client_query_buffer_limit: Option<usize>,
    /// The most reply bytes a client may leave unread before it is disconnected.
    #[arg(long, env = "LOGLESS_CLIENT_OUTPUT_BUFFER_LIMIT")]
    pub client_output_buffer_limit: Option<usize>,
    /// The most inbound peer connections at once (0: four per remote peer and shard, plus 16).
    #[arg(long, env = "LOGLESS_PEER_CONNECTIONS_MAX")]
    pub peer_connections_max: Option<usize>,
    /// How long an inbound peer connection may take to prove its hello.
    #[arg(long, env = "LOGLESS_PEER_HANDSHAKE_TIMEOUT_MS")]
    pub peer_handshake_timeout_ms: Option<u64>,
    /// A second client port, on --client-addr's address, speaking TLS (0: none); with it,
    /// --client-addr's port may be 0 for TLS only.
    #[arg(long, env = "LOGLESS_TLS_PORT")]
    pub tls_port: Option<u16>,
    /// The PEM certificate this replica presents to clients and peers.
    #[arg(long, env = "LOGLESS_TLS_CERT_FILE")]
    pub tls_cert_file: Option<PathBuf>,
    /// The PEM private key of --tls-cert-file.
    #[arg(long, env = "LOGLESS_TLS_KEY_FILE")]
    pub tls_key_file: Option<PathBuf>,
    /// The PEM CA certificates that client and peer certificates must be signed by.
    #[arg(long, env = "LOGLESS_TLS_CA_CERT_FILE")]
    pub tls_ca_cert_file: Option<PathBuf>,
    /// yes (TLS clients present a certificate signed by the CA), optional or no.
    #[arg(long, env = "LOGLESS_TLS_AUTH_CLIENTS")]
    pub tls_auth_clients: Option<String>,
    /// Whether peers speak mutual TLS against --tls-ca-cert-file.
    #[arg(long, env = "LOGLESS_TLS_CLUSTER")]
    pub tls_cluster: Option<bool>,
    /// Whether /metrics, /health and /status are served over TLS (client certificates as
    /// --tls-auth-clients says).
    #[arg(long, env = "LOGLESS_TLS_HTTP")]
    pub tls_http: Option<bool>,
    /// Log level: error, warn, info, debug or trace (or a tracing filter); without it,
    /// RUST_LOG, else info.
    #[arg(long, env = "LOGLESS_LOG_LEVEL")]
    pub log_level: Option<String>,
    /// Rejoin after losing the data directory: take a new incarnation and answer for a key only
    /// once its state was recovered from the other replicas (docs/lost-disk.md). Without it, a
    /// replica the others know from an earlier directory is refused and stops.
    #[arg(long, env = "LOGLESS_REJOIN")]
    pub rejoin: bool,
    /// Log lines as text or as JSON objects, one a line.
    #[arg(long, env = "LOGLESS_LOG_FORMAT", default_value = "text", value_parser = ["text", "json"])]
    pub log_format: String,
    /// Break the protocol on purpose (test builds only, the `fault-injection` feature):
    /// accept-inconsistent-quorum, ignore-learned, reply-before-persist, persist-without-ttl,
    /// remove-before-all-hold-tombstone or skip-removal-fence;
    /// for the log engine log-skip-noop-fill, log-no-dedup, log-accept-before-persist,
    /// log-execute-at-local-clock, log-accept-stale-proposals, log-ignore-epochs,
    /// log-rejoin-without-recovery or log-release-while-space-short; for the psmr engine
    /// psmr-merge-by-arrival or psmr-no-barrier.
    #[arg(long, hide = true)]
    pub inject_bug: Vec<String>,
}

fn config_from(args: &ServerArgs) -> Result<NodeConfig, String> {
    let mut c = match &args.config {
        Some(path) => NodeConfig::from_file(path).map_err(|e| e.to_string())?,
        None => NodeConfig::default(),
    };
    if let Some(v) = args.node_id {
        c.node_id = v;
    }
    if args.rejoin {
        c.rejoin = true;
    }
    if let Some(v) = &args.peers {
        c.peers = parse_peers(v).map_err(|e| e.to_string())?;
    }
    if let Some(v) = &args.peer_client_addrs {
        set_peer_client_addrs(&mut c.peers, v).map_err(|e| e.to_string())?;
    }
    if let Some(v) = args.replication {
        c.replication = v;
    }
    if args.cluster_enabled {
        c.cluster_enabled = true;
    }
    if let Some(v) = args.client_addr {
        c.client_addr = v;
    }
    if let Some(v) = args.peer_addr {
        c.peer_addr = v;
    }
    if args.http_addr.is_some() {
        c.http_addr = args.http_addr;
    }
    if let Some(v) = &args.dir {
        c.data_dir = v.clone();
    }
    if let Some(v) = &args.durability {
        c.durability = v.clone();
    }
    if let Some(v) = args.engine {
        c.engine = v;
    }
    if let Some(v) = args.recovery {
        c.recovery = v;
    }
    for assignment in &args.multipaxos {
        c.multipaxos.set(assignment).map_err(|e| e.to_string())?;
    }
    if let Some(v) = args.shards {
        c.shards = v;
    }
    if let Some(v) = args.threads {
        c.threads = v;
    }
    if let Some(v) = &args.psmr_mode {
        c.psmr_mode = v.clone();
    }
    if let Some(v) = &args.service {
        c.service = v.clone();
    }
    if let Some(v) = args.read_retries {
        c.read_retries = v;
    }
    if let Some(v) = args.thrifty_reads {
        c.thrifty_reads = v;
    }
    if let Some(v) = args.thrifty_writes {
        c.thrifty_writes = v;
    }
    if let Some(v) = args.proposer_registers_max {
        c.proposer_registers_max = v;
    }
    if let Some(v) = args.remove_dead_registers {
        c.remove_dead_registers = Some(v);
    }
    if let Some(v) = args.removal_grace_ms {
        c.removal_grace_ms = v;
    }
    if let Some(v) = args.maxmemory {
        c.maxmemory = v;
    }
    if let Some(v) = args.value_bytes_max {
        c.value_bytes_max = v;
    }
    if let Some(v) = args.request_timeout_ms {
        c.request_timeout_ms = v;
    }
    if let Some(v) = &args.cluster_id {
        c.cluster_id = v.clone();
    }
    if let Some(v) = &args.cluster_secret_file {
        c.cluster_secret_file = Some(v.clone());
    }
    if let Some(v) = &args.requirepass_file {
        c.requirepass = None;
        c.requirepass_file = Some(v.clone());
    }
    if let Some(v) = &args.requirepass {
        c.requirepass_file = None;
        c.requirepass = Some(v.clone());
    }
    if let Some(v) = args.timeout {
        c.timeout = v;
    }
    if let Some(v) = args.client_query_buffer_limit {
        c.client_query_buffer_limit = Some(v);
    }
    if let Some(v) = args.client_output_buffer_limit {
        c.client_output_buffer_limit = v;
    }
    if let Some(v) = args.peer_connections_max {
        c.peer_connections_max = v;
    }
    if let Some(v) = args.peer_handshake_timeout_ms {
        c.peer_handshake_timeout_ms = v;
    }
    if let Some(v) = args.tls_port {
        c.tls_port = v;
    }
    if let Some(v) = &args.tls_cert_file {
        c.tls_cert_file = Some(v.clone());
    }
    if let Some(v) = &args.tls_key_file {
        c.tls_key_file = Some(v.clone());
    }
    if let Some(v) = &args.tls_ca_cert_file {
        c.tls_ca_cert_file = Some(v.clone());
    }
    if let Some(v) = &args.tls_auth_clients {
        c.tls_auth_clients = v.clone();
    }
    if let Some(v) = args.tls_cluster {
        c.tls_cluster = v;
    }
    if let Some(v) = args.tls_http {
        c.tls_http = v;
    }
    c.validate().map_err(|e| e.to_string())?;
    Ok(c)
}

/// Starts logging to stderr: `level` (a tracing filter) if given, else `RUST_LOG`, else `info`;
/// as text, or as one JSON object a line when `json`.
pub fn init_logging(level: Option<&str>, json: bool) {
    use std::io::IsTerminal;
    use tracing_subscriber::EnvFilter;
    let filter = match level {
        Some(level) => EnvFilter::try_new(level).unwrap_or_else(|_| EnvFilter::new("info")),
        None => EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info")),
    };
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let _ = if json {
        builder.json().try_init()
    } else {
        builder
            .with_ansi(std::io::stderr().is_terminal())
            .try_init()
    };
}

pub fn server(args: &ServerArgs) -> ExitCode {
    init_logging(args.log_level.as_deref(), args.log_format == "json");
    let (config, bugs) =
        match config_from(args).and_then(|c| Ok((c, Bugs::parse(&args.inject_bug)?))) {
            Ok(v) => v,
            Err(e) => {
                eprintln!("error: {e}");
                return ExitCode::from(2);
            }
        };
    let shards = usize::from(config.shards);
    let runtime = if shards == 1 {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
    } else {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(shards)
            .enable_all()
            .build()
    };
    let runtime = match runtime {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    runtime.block_on(async move {
        // Caught before the listeners open: a signal sent as soon as the replica answers must
        // stop it cleanly, not kill it. One that comes while it starts ends the process at
        // once, as the signal's default would (a start may take long: a large store's open).
        use tokio::signal::unix::{signal, SignalKind};
        let mut interrupt = signal(SignalKind::interrupt()).expect("signal handler");
        let mut terminate = signal(SignalKind::terminate()).expect("signal handler");
        let started = tokio::select! {
            started = node::start_with_bugs(config, bugs) => started,
            _ = interrupt.recv() => {
                eprintln!("interrupted while starting");
                std::process::exit(130);
            }
            _ = terminate.recv() => {
                eprintln!("terminated while starting");
                std::process::exit(143);
            }
        };
        let mut running = match started {
            Ok(n) => n,
            Err(e) => {
                error!("cannot start: {e}");
                eprintln!("error: {e}");
                return ExitCode::FAILURE;
            }
        };
        tokio::select! {
            _ = interrupt.recv() => info!("interrupted: stopping"),
            _ = terminate.recv() => info!("terminated: stopping"),
            () = running.stopping() => error!("stopping on a failure"),
        }
        if let Some(refusal) = running.refusal() {
            eprintln!("error: {refusal}");
            running.shutdown().await;
            return ExitCode::from(EXIT_LOST_IDENTITY);
        }
        if running.shutdown().await {
            info!("stopped cleanly");
            ExitCode::SUCCESS
        } else {
            ExitCode::FAILURE
        }
    })
}

/// Reads `--maxmemory`: bytes, or digits with redis's units.
fn parse_maxmemory(text: &str) -> Result<u64, String> {
    logless_node::config::parse_memory(text).ok_or_else(|| {
        format!("{text:?} is not a memory size (bytes, or digits with k, kb, m, mb, g or gb)")
    })
}
