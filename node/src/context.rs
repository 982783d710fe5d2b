//! What every task of a running replica may look at: its configuration, the shards' input
//! channels, the addresses bound and the grouped counters. The front end, INFO, status and
//! HTTP read it; nothing here imports them, so the node's modules depend on each other in one
//! direction only.
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize};
use std::sync::Arc;
use std::time::Instant;

use logless_redis::acl::Acl;
use logless_rmw::ids::NodeId;
use tokio::sync::mpsc;

use crate::clients::ClientRegistry;
use crate::config::NodeConfig;
use crate::forward::Forwarder;
use crate::log_loop::LogInput;
use crate::memory::Memory;
use crate::peer::PeerCounters;
use crate::psmr_loop::PsmrInput;
use crate::shard::ShardInput;

/// What every task of a running replica may look at.
pub struct NodeContext {
    /// The configuration it started with.
    pub config: NodeConfig,
    /// The users clients log in as.
    pub acl: Arc<Acl>,
    /// The ring and its nodes' client addresses, in cluster mode (`cluster_enabled`), as of
    /// the stage installed last.
    pub cluster: Option<crate::cluster::ClusterState>,
    /// On a ring (N > R), the forwarding of commands on keys this node does not hold.
    pub forwarder: Option<Arc<Forwarder>>,
    /// On a ring, its stage as this node installed it and the ring's registers.
    pub ring: Option<Arc<crate::ring_watch::RingState>>,
    /// This node.
    pub node: NodeId,
    /// This run's incarnation.
    pub incarnation: u32,
    /// The input channel of each shard (none under the log engine).
    pub shards: Vec<mpsc::Sender<ShardInput>>,
    /// The log's input channel (the log engine only).
    pub log: Option<mpsc::Sender<LogInput>>,
    /// The psmr loop's input channel (the psmr engine only).
    pub psmr: Option<mpsc::Sender<PsmrInput>>,
    /// When the node started.
    pub started: Instant,
    /// The client connections' counters.
    pub clients: ClientCounters,
    /// The client connections open now (CLIENT LIST and KILL).
    pub connections: Arc<ClientRegistry>,
    /// The settings CONFIG SET changes while the replica runs.
    pub settings: Settings,
    /// The used memory and `maxmemory` (which CONFIG SET changes).
    pub memory: Arc<Memory>,
    /// The peer transport's counters.
    pub peers: Arc<PeerCounters>,
    /// The addresses actually bound.
    pub bound: Bound,
    /// Set when a shard failed and the node is stopping.
    pub failed: AtomicU64,
    /// The deliberate bugs it runs with (only a build with fault injection has any).
    pub injected_bugs: Vec<String>,
}

/// The client connections' counters, for INFO and `/metrics`.
#[derive(Debug, Default)]
pub struct ClientCounters {
    /// Connections open now.
    pub connected: AtomicU64,
    /// Connections accepted since start.
    pub accepted: AtomicU64,
    /// Connections refused (over the limit).
    pub refused: AtomicU64,
    /// Requests received.
    pub requests: AtomicU64,
    /// Connections closed for breaking the protocol.
    pub protocol_errors: AtomicU64,
    /// Bytes read from clients.
    pub bytes_in: AtomicU64,
    /// Bytes written to clients.
    pub bytes_out: AtomicU64,
    /// Failed logins (AUTH or HELLO AUTH with a wrong password, an unknown or disabled user).
    pub rejected_auth: AtomicU64,
    /// Connections closed for being idle past `timeout`.
    pub idle_disconnects: AtomicU64,
    /// Connections closed for a pending request past `client_query_buffer_limit`.
    pub query_buffer_disconnects: AtomicU64,
    /// Connections closed for unread replies past `client_output_buffer_limit`.
    pub output_buffer_disconnects: AtomicU64,
    /// TLS connections of Redis and HTTP clients closed in their handshake (not TLS, a refused
    /// certificate, too slow).
    pub tls_handshake_failures: AtomicU64,
}

/// The settings CONFIG SET changes while a replica runs; each starts as the configuration
/// says.
#[derive(Debug)]
pub struct Settings {
    /// The longest argument a client may send (`proto-max-bulk-len`): at most the
    /// configuration's `value_bytes_max`, which the engine's limits are built from at start.
    pub value_bytes_max: AtomicUsize,
    /// The most client connections served at once (`maxclients`).
    pub clients_max: AtomicUsize,
    /// Whether reads ask a quorum first (`logless-thrifty-reads`): what the shards were last
    /// told.
    pub thrifty_reads: AtomicBool,
    /// Whether fast writes vote with a quorum first (`logless-thrifty-writes`).
    pub thrifty_writes: AtomicBool,
    /// Held by a CONFIG SET while it applies its changes, so that the shards are told the
    /// settings in the order they were made.
    pub changing: tokio::sync::Mutex<()>,
}

impl Settings {
    /// The settings `config` starts with.
    pub fn new(config: &NodeConfig) -> Settings {
        Settings {
            value_bytes_max: AtomicUsize::new(config.value_bytes_max),
            clients_max: AtomicUsize::new(config.clients_max),
            thrifty_reads: AtomicBool::new(config.thrifty_reads),
            thrifty_writes: AtomicBool::new(config.thrifty_writes),
            changing: tokio::sync::Mutex::new(()),
        }
    }
}

/// The addresses a replica listens on.
#[derive(Clone, Copy, Debug)]
pub struct Bound {
    /// Redis clients.
    pub client: SocketAddr,
    /// Peers.
    pub peer: SocketAddr,
    /// `/metrics`, `/health`, `/status`.
    pub http: Option<SocketAddr>,
    /// Redis clients over TLS.
    pub tls: Option<SocketAddr>,
}

/// The shard that owns `key`: the same on every replica.
pub fn shard_of(key: &[u8], shards: usize) -> usize {
    (crc32c::crc32c(key) as usize) % shards
}
