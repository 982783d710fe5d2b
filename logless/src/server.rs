//! `logless server`: one replica, configured by a TOML file and/or flags.
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use logless_node::config::{parse_peers, NodeConfig};
use logless_node::node::{self, Bugs};
use tracing::{error, info};

#[derive(clap::Args, Clone, Debug)]
pub struct ServerArgs {
    /// A TOML configuration file; flags given as well override it.
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// This replica's node id (1 to 65535).
    #[arg(long)]
    pub node_id: Option<u16>,
    /// Every replica, this one included: ID=HOST:PORT of their peer listeners, comma-separated.
    #[arg(long)]
    pub peers: Option<String>,
    /// Where Redis clients connect.
    #[arg(long)]
    pub client_addr: Option<SocketAddr>,
    /// Where peers connect.
    #[arg(long)]
    pub peer_addr: Option<SocketAddr>,
    /// Where /metrics, /health and /status are served.
    #[arg(long)]
    pub http_addr: Option<SocketAddr>,
    /// The data directory.
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// memory, mmap, sync or pmem.
    #[arg(long)]
    pub durability: Option<String>,
    /// Shards (event loops and store files); the same on every replica.
    #[arg(long)]
    pub shards: Option<u16>,
    /// Read retries before a read writes through (X).
    #[arg(long)]
    pub read_retries: Option<u32>,
    /// Whether reads ask a quorum first (true) or every replica at once (false).
    #[arg(long)]
    pub thrifty_reads: Option<bool>,
    /// Whether fast writes vote with a quorum first (true) or every replica at once (false):
    /// for clients that send each key to one replica.
    #[arg(long)]
    pub thrifty_writes: Option<bool>,
    /// The most registers each shard's proposer keeps; beyond it, idle ones are dropped.
    #[arg(long)]
    pub proposer_registers_max: Option<usize>,
    /// The largest value in bytes.
    #[arg(long)]
    pub value_bytes_max: Option<usize>,
    /// How long a command may take before its outcome is reported unknown.
    #[arg(long)]
    pub request_timeout_ms: Option<u64>,
    /// Log level: error, warn, info, debug or trace (or a tracing filter).
    #[arg(long, default_value = "info")]
    pub log_level: String,
    /// Break the protocol on purpose (harness tests only): accept-inconsistent-quorum,
    /// ignore-learned, reply-before-persist or persist-without-ttl.
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
    if let Some(v) = &args.peers {
        c.peers = parse_peers(v).map_err(|e| e.to_string())?;
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
    if let Some(v) = args.shards {
        c.shards = v;
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
    if let Some(v) = args.value_bytes_max {
        c.value_bytes_max = v;
    }
    if let Some(v) = args.request_timeout_ms {
        c.request_timeout_ms = v;
    }
    c.validate().map_err(|e| e.to_string())?;
    Ok(c)
}

fn bugs_from(names: &[String]) -> Result<Bugs, String> {
    let mut bugs = Bugs::default();
    for name in names {
        match name.as_str() {
            "accept-inconsistent-quorum" => bugs.core.accept_inconsistent_quorum = true,
            "ignore-learned" => bugs.core.ignore_learned = true,
            "reply-before-persist" => bugs.shard.reply_before_persist = true,
            "persist-without-ttl" => bugs.shard.persist_without_ttl = true,
            other => return Err(format!("unknown bug {other:?}")),
        }
    }
    Ok(bugs)
}

pub fn init_logging(level: &str) {
    let filter = tracing_subscriber::EnvFilter::try_new(level)
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    use std::io::IsTerminal;
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr)
        .try_init();
}

pub fn server(args: &ServerArgs) -> ExitCode {
    init_logging(&args.log_level);
    let (config, bugs) = match config_from(args).and_then(|c| Ok((c, bugs_from(&args.inject_bug)?)))
    {
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
        let mut running = match node::start_with_bugs(config, bugs).await {
            Ok(n) => n,
            Err(e) => {
                error!("cannot start: {e}");
                eprintln!("error: {e}");
                return ExitCode::FAILURE;
            }
        };
        let mut terminate =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
                .expect("signal handler");
        tokio::select! {
            _ = tokio::signal::ctrl_c() => info!("interrupted: stopping"),
            _ = terminate.recv() => info!("terminated: stopping"),
            () = running.stopping() => error!("a store failed: stopping"),
        }
        if running.shutdown().await {
            info!("stopped cleanly");
            ExitCode::SUCCESS
        } else {
            ExitCode::FAILURE
        }
    })
}
