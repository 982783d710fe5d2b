//! A replica's configuration: a TOML file, overridden by flags, checked before anything starts.
//!
//! ```toml
//! node_id = 1
//! client_addr = "127.0.0.1:7379"
//! peer_addr = "127.0.0.1:8379"
//! http_addr = "127.0.0.1:9379"
//! data_dir = "./logless-data/node-1"
//! durability = "mmap"          # memory | mmap | sync | emulp | pmem
//! engine = "rmw"               # rmw (per-key registers) | multipaxos (one log, atomic multi-key)
//!                              # | psmr (the B+-tree KV service on P-SMR's parallel streams)
//! recovery = "fullss"          # multipaxos: fullss (log and snapshots on disk) | epoch (EpochSS:
//!                              # state in memory, recovered from the peers) | pmem (mPaxos: log
//!                              # and snapshots in persistent memory, durability emulp or pmem,
//!                              # votes at once after a restart) | pmem-sm (mPaxosSM: the state
//!                              # machine in place in persistent memory too; docs/recovery.md)
//! threads = 0                  # psmr: worker threads, k (0: the cores available)
//! psmr_mode = "psmr"           # psmr: psmr | sp-smr | smr | no-rep (one process, no peers)
//! service = "btree"            # psmr: btree (GET/SET NX|XX/DEL/LOGLESS.RANGE) | netfs (LOGLESS.FS)
//! shards = 1
//! read_retries = 1
//! thrifty_reads = true         # reads ask a quorum first, the rest only when needed
//! thrifty_writes = false       # fast writes too: for clients that send a key to one replica
//! proposer_registers_max = 262144  # registers each shard's proposer keeps; idle ones beyond go
//! remove_dead_registers = true  # deleted and expired keys leave every replica (docs/removal.md;
//!                              # unset: on, but off on a ring)
//! removal_grace_ms = 1000      # an expired value is removed once expired this long
//! value_bytes_max = 1048576
//! maxmemory = "4gb"            # refuse commands needing new space above this RSS (0: no limit)
//! cluster_id = "prod-eu"       # peers of another cluster id are refused
//! cluster_secret_file = "/etc/logless/cluster-secret"  # proven in every peer hello
//! rejoin = false               # true once after a lost data directory (docs/lost-disk.md)
//! tls_port = 7380              # clients over TLS (0: none); client_addr's port 0: TLS only
//! tls_cert_file = "/etc/logless/tls/server.crt"
//! tls_key_file = "/etc/logless/tls/server.key"
//! tls_ca_cert_file = "/etc/logless/tls/ca.crt"
//! tls_auth_clients = "yes"     # yes | optional | no: client certificates signed by the CA
//! tls_cluster = true           # peers speak mutual TLS against tls_ca_cert_file
//! tls_http = true              # /metrics, /health, /status over TLS, clients as tls_auth_clients
//!
//! requirepass_file = "/etc/logless/requirepass"  # the default user's password (or requirepass)
//! timeout = 300                # close client connections idle this many seconds (0: never)
//! client_query_buffer_limit = 134219776   # bytes of one pending request (default shown)
//! client_output_buffer_limit = 268435456  # unwritten reply bytes of one connection
//! peer_connections_max = 64    # inbound peer connections at once (0: derived from peers)
//! peer_handshake_timeout_ms = 5000
//! cluster_enabled = false      # serve as a Redis Cluster node (CLUSTER, MOVED, CROSSSLOT);
//!                              # needs every peer's client_addr (docs/config.md)
//! replication = 0              # each key's replicas, R (3, 5 or 7); below the number of peers
//!                              # the nodes form a ring (docs/ring.md); 0: every node, N = R
//! ring_move_bytes_per_sec = 8388608  # a ring change's data mover's pace (0: no limit)
//!
//! [multipaxos]                 # the log engine's timeouts, batches, window and snapshots
//! suspect_timeout_ms = 300     # (every setting and its default: crate::log_config)
//!
//! [[peers]]                    # every replica, this one included, the same list everywhere
//! id = 1
//! addr = "127.0.0.1:8379"      # HOST:PORT; HOST may be a DNS name, resolved at each connect
//! client_addr = "127.0.0.1:7379"  # where its Redis clients connect, as cluster replies name it
//!
//! [[users]]                    # ACL users besides `default`
//! name = "app"
//! passwords_sha256 = ["<hex of sha256(password)>"]  # `printf %s PASS | sha256sum`
//! keys = ["app:*"]             # Redis glob patterns of the keys it may name
//! commands = "all"             # all | read
//! # on = false                 # disabled; nopass = true takes any password
//! ```
//!
//! The cluster secret is read from a file (at least 16 bytes; a trailing newline is not part
//! of it), so that it is on no command line and in no process listing. Without one a replica
//! still checks the cluster id in every hello but any process that can reach its peer port can
//! join as a listed node; it warns at start (see `docs/security.md`).
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use logless_commands::command::Limits;
use logless_rmw::config::ProposerConfig;
use logless_rmw::ids::NodeId;
use logless_storage::Durability;
use serde::{Deserialize, Serialize};
use thiserror::Error;

use logless_redis::acl::{self, Access, Acl, User};

use crate::hello::{ClusterAuth, CLUSTER_ID_BYTES_MAX, SECRET_BYTES_MIN};
use crate::log_config::LogTuning;

/// A configuration that cannot be used.
#[derive(Debug, Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The file is not valid TOML for this configuration.
    #[error("{path}: {message}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// The parser's message.
        message: String,
    },
    /// A value is missing or out of range.
    #[error("invalid configuration: {0}")]
    Invalid(String),
}

/// One replica of the cluster and where its peers listen.
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct PeerConfig {
    /// The replica's node id (1 to 65535).
    pub id: u16,
    /// Its peer address, `HOST:PORT`; `HOST` may be a DNS name, resolved at every connection
    /// attempt.
    pub addr: String,
    /// Where its Redis clients connect, `HOST:PORT`, as Redis Cluster replies (CLUSTER SLOTS,
    /// MOVED) name it to clients; only cluster mode uses it. For this replica it defaults to
    /// [`NodeConfig::client_addr`] when that is a specific address.
    #[serde(default)]
    pub client_addr: Option<String>,
}

/// A password in the configuration: never shown in a debug line.
#[derive(Clone, Deserialize, PartialEq, Eq)]
#[serde(transparent)]
pub struct Password(pub String);

impl std::str::FromStr for Password {
    type Err = std::convert::Infallible;

    fn from_str(s: &str) -> Result<Password, Self::Err> {
        Ok(Password(s.to_owned()))
    }
}

impl std::fmt::Debug for Password {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Password(..)")
    }
}

/// One ACL user besides `default` (see [`logless_redis::acl`]).
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct UserConfig {
    /// The name it logs in with (`AUTH name password`).
    pub name: String,
    /// Whether it may log in.
    #[serde(default = "enabled")]
    pub on: bool,
    /// Whether it takes any password.
    #[serde(default)]
    pub nopass: bool,
    /// The SHA-256 hashes of its passwords, in hex.
    #[serde(default)]
    pub passwords_sha256: Vec<String>,
    /// Glob patterns of the keys it may name (none by default, as in Redis: `["*"]` for all).
    #[serde(default)]
    pub keys: Vec<String>,
    /// `all` or `read`.
    pub commands: String,
}

fn enabled() -> bool {
    true
}

/// The replication engine a replica runs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Engine {
    /// RMWPaxos: every key its own replicated register (the default).
    #[default]
    Rmw,
    /// Multi-Paxos: one replicated log orders every command, so commands on several keys
    /// (MSET, MULTI/EXEC, ...) are atomic.
    Multipaxos,
    /// P-SMR (seed 004): the B⁺-tree key-value service, its commands multicast to the worker
    /// threads that need them over `threads + 1` Multi-Paxos streams.
    Psmr,
}

impl Engine {
    /// The engine's name, as the configuration and the flags spell it.
    pub fn name(self) -> &'static str {
        match self {
            Engine::Rmw => "rmw",
            Engine::Multipaxos => "multipaxos",
            Engine::Psmr => "psmr",
        }
    }
}

impl std::fmt::Display for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for Engine {
    type Err = String;

    fn from_str(name: &str) -> Result<Engine, String> {
        match name {
            "rmw" => Ok(Engine::Rmw),
            "multipaxos" => Ok(Engine::Multipaxos),
            "psmr" => Ok(Engine::Psmr),
            other => Err(format!(
                "engine must be rmw, multipaxos or psmr, not {other:?}"
            )),
        }
    }
}

/// How a replica of the log engine comes back after a crash (seed 002 §V): the node's name
/// for [`logless_multipaxos::config::Recovery`], as the configuration and the flags spell it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Recovery {
    /// FullSS: the log, the votes, the views and the snapshots on disk, replayed at start (the
    /// default, and the only mode of the other engines).
    #[default]
    Fullss,
    /// EpochSS: the state in memory only; the one stable write is an epoch counter raised at
    /// every start, and a restarted replica recovers the state from its peers, which needs a
    /// majority that kept it.
    Epoch,
    /// mPaxos: the log, the votes, the views and the snapshots in persistent memory (needs
    /// `durability` `emulp` or `pmem`); a restarted replica votes at once and rebuilds its
    /// state machine from the persistent snapshot meanwhile.
    Pmem,
    /// mPaxosSM: as mPaxos, and the state machine itself in place in persistent memory (one
    /// failure-atomic record per register, executed idempotently per operation number); a
    /// restarted replica opens it and votes and serves without restoring a snapshot.
    #[serde(rename = "pmem-sm")]
    PmemSm,
}

impl Recovery {
    /// The mode's name, as the configuration and the flags spell it.
    pub fn name(self) -> &'static str {
        match self {
            Recovery::Fullss => "fullss",
            Recovery::Epoch => "epoch",
            Recovery::Pmem => "pmem",
            Recovery::PmemSm => "pmem-sm",
        }
    }

    /// The engine's mode.
    pub fn engine(self) -> logless_multipaxos::config::Recovery {
        match self {
            Recovery::Fullss => logless_multipaxos::config::Recovery::FullSs,
            Recovery::Epoch => logless_multipaxos::config::Recovery::Epoch,
            // The engine resumes the same way; the node keeps the state machine in place.
            Recovery::Pmem | Recovery::PmemSm => logless_multipaxos::config::Recovery::Pmem,
        }
    }

    /// Checks that `engine` on a cluster of `replicas`, keeping its files by `durability`, can
    /// recover this way: EpochSS and mPaxos are the log engine's, EpochSS needs peers to
    /// recover from, and mPaxos needs persistent memory (real or emulated).
    pub fn check(
        self,
        engine: Engine,
        replicas: usize,
        durability: Durability,
    ) -> Result<(), ConfigError> {
        if self == Recovery::Fullss {
            return Ok(());
        }
        if engine != Engine::Multipaxos {
            return Err(ConfigError::Invalid(format!(
                "recovery {self} is the multipaxos engine's (the {engine} engine keeps its state \
                 on disk): give --engine multipaxos, or --recovery fullss"
            )));
        }
        if matches!(self, Recovery::Pmem | Recovery::PmemSm) {
            if !matches!(durability, Durability::Emulp | Durability::Pmem) {
                let what = if self == Recovery::Pmem {
                    "recovery pmem (mPaxos) keeps the log and the snapshots"
                } else {
                    "recovery pmem-sm (mPaxosSM) keeps the log and the state machine"
                };
                return Err(ConfigError::Invalid(format!(
                    "{what} in persistent memory, persisted by cache-line flushes: give \
                     --durability emulp (emulated on DRAM) or --durability pmem (a DAX mount), \
                     not {}; or --recovery fullss",
                    durability_name(durability)
                )));
            }
            return Ok(());
        }
        if replicas < 3 {
            return Err(ConfigError::Invalid(format!(
                "recovery {self} recovers a restarted replica's state from its peers, and a \
                 cluster of {replicas} has none: it would lose everything at each restart \
                 (give 3, 5 or 7 replicas, or --recovery fullss)"
            )));
        }
        Ok(())
    }
}

impl std::fmt::Display for Recovery {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for Recovery {
    type Err = String;

    fn from_str(name: &str) -> Result<Recovery, String> {
        match name {
            "fullss" => Ok(Recovery::Fullss),
            "epoch" => Ok(Recovery::Epoch),
            "pmem" => Ok(Recovery::Pmem),
            "pmem-sm" => Ok(Recovery::PmemSm),
            other => Err(format!(
                "recovery must be fullss, epoch, pmem or pmem-sm, not {other:?}"
            )),
        }
    }
}

/// Everything a replica needs to start.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct NodeConfig {
    /// This replica's id; must appear in `peers`.
    pub node_id: u16,
    /// Every replica of the cluster, this one included, identical on all of them.
    pub peers: Vec<PeerConfig>,
    /// Where Redis clients connect.
    pub client_addr: SocketAddr,
    /// Where peers connect (this replica's entry in `peers` says how others reach it).
    pub peer_addr: SocketAddr,
    /// Where `/metrics`, `/health` and `/status` are served (none if absent).
    pub http_addr: Option<SocketAddr>,
    /// The directory of this replica's store files.
    pub data_dir: PathBuf,
    /// `memory`, `mmap`, `sync`, `emulp` or `pmem`.
    pub durability: String,
    /// The replication engine; the same on every replica, and fixed for a data directory.
    pub engine: Engine,
    /// How a replica of the log engine recovers after a crash (`fullss` or `epoch`); the same
    /// on every replica, and fixed for a data directory.
    pub recovery: Recovery,
    /// The log engine's timeouts, batches, window and snapshot policy (the `[multipaxos]`
    /// table; used by that engine and the psmr engine's groups, checked whatever the engine).
    pub multipaxos: LogTuning,
    /// Shards (one event loop and one store file each); the same on every replica.
    pub shards: u16,
    /// The psmr engine's worker threads, `k` (it runs `k + 1` streams); the same on every
    /// replica. 0: the cores available ([`NodeConfig::psmr_threads`]).
    pub threads: u16,
    /// The psmr engine's mode: `psmr`, `sp-smr`, `smr` or `no-rep` (one process, no peers).
    pub psmr_mode: String,
    /// The service the psmr engine replicates: `btree` or `netfs`; the same on every replica,
    /// and fixed for a data directory.
    pub service: String,
    /// Read retries before a read writes through (X of the paper).
    pub read_retries: u32,
    /// Whether a read asks a quorum of replicas first (its own and the next) and the others
    /// only when those disagree or are slow, rather than every replica at once.
    pub thrifty_reads: bool,
    /// Whether a fast write (a replica's next write of a register it wrote last) votes with
    /// the quorum its reads ask first, and with the others only when those are slow. Saves a
    /// third of such a write's messages, but leaves the third replica's vote behind, so reads
    /// through that replica ask everyone: for clients that send each key to one replica.
    pub thrifty_writes: bool,
    /// The most registers each shard's proposer keeps. Beyond it, it drops idle registers (no
    /// command in progress), sparing those used since its last drop: they hold only caches
    /// (the value last chosen, which lets replies leave it out, and the fast path), and a
    /// dropped register's next command starts as a first one does. Bounds the proposer's
    /// memory (about 150 to 300 bytes a register, plus its value) where a replica has seen
    /// commands for many more keys than it uses at a time.
    pub proposer_registers_max: usize,
    /// Whether this replica removes deleted and expired registers it wrote last from every
    /// replica, freeing their slots, with a background sweep (`docs/removal.md`). Unset, it
    /// follows the cluster ([`NodeConfig::removes_dead_registers`]): on, but off on a ring,
    /// which does not support it yet; set on with a ring, the configuration is refused.
    /// Replicas apply removals from peers whatever this says.
    pub remove_dead_registers: Option<bool>,
    /// How long a value must have been expired, by this replica's clock, before it removes it
    /// (deleted ones go at once): a replica whose clock is behind by less than this would read
    /// the value expired too, so removal adds nothing to the clock-skew window of expiry.
    pub removal_grace_ms: u64,
    /// The most memory the replica may use, in bytes (0: no limit): above it, commands that
    /// may need new space are refused with redis's OOM error (see [`crate::memory`]). In the
    /// file an integer, or text with redis's units (`"512mb"`, `"4gb"`).
    #[serde(deserialize_with = "memory_size")]
    pub maxmemory: u64,
    /// The largest string value, or the largest sum of a collection's elements, in bytes:
    /// Redis's `proto-max-bulk-len` (a longer argument is answered with an error).
    pub value_bytes_max: usize,
    /// The most members of one set.
    pub set_members_max: usize,
    /// How long a command may take before the client is told its outcome is unknown.
    pub request_timeout_ms: u64,
    /// The most client connections served at once.
    pub clients_max: usize,
    /// The cluster's name, sent in every peer hello: peers of another cluster are refused.
    pub cluster_id: String,
    /// A file holding the cluster secret that every peer proves in its hello (none: no proof).
    pub cluster_secret_file: Option<PathBuf>,
    /// Whether this replica rejoins after losing its data directory (`--rejoin`): it takes a
    /// new incarnation and answers for a register only once it recovered that register's
    /// state from the other replicas (`docs/lost-disk.md`). Without it, a replica whose peers
    /// know it from an earlier directory is refused by them and stops.
    pub rejoin: bool,
    /// The default user's password (Redis's `requirepass`): clients must `AUTH` first.
    pub requirepass: Option<Password>,
    /// A file holding the default user's password (a trailing newline is not part of it).
    pub requirepass_file: Option<PathBuf>,
    /// ACL users besides `default`.
    pub users: Vec<UserConfig>,
    /// Seconds a client connection may go without a complete request (or without taking a
    /// reply) before it is closed; 0: never (Redis's `timeout`).
    pub timeout: u64,
    /// The most bytes one pending request may take before it is complete; a connection past
    /// it is closed (Redis's `client-query-buffer-limit`). None: twice the wire parser's
    /// longest argument ([`NodeConfig::bulk_bytes_max`]).
    pub client_query_buffer_limit: Option<usize>,
    /// The most reply bytes one connection may have waiting for the client to read them; a
    /// connection past it is closed (like Redis's `client-output-buffer-limit`).
    pub client_output_buffer_limit: usize,
    /// The most inbound peer connections open at once, in their hello or after it; more are
    /// closed at once. 0: four per remote peer and shard, plus 16.
    pub peer_connections_max: usize,
    /// How long an inbound peer connection may take to prove its hello.
    pub peer_handshake_timeout_ms: u64,
    /// A second client port, on `client_addr`'s address, speaking TLS (0: none). With it,
    /// `client_addr`'s port may be 0 to serve clients over TLS only, as in redis.
    pub tls_port: u16,
    /// The PEM certificate (chain) this replica presents to clients and peers.
    pub tls_cert_file: Option<PathBuf>,
    /// The PEM private key of `tls_cert_file`.
    pub tls_key_file: Option<PathBuf>,
    /// The PEM CA certificates that client and peer certificates must be signed by.
    pub tls_ca_cert_file: Option<PathBuf>,
    /// `yes` (every TLS client presents a certificate signed by the CA), `optional` or `no`.
    pub tls_auth_clients: String,
    /// Whether peers speak mutual TLS against `tls_ca_cert_file`.
    pub tls_cluster: bool,
    /// Whether the HTTP listener speaks TLS, asking clients for certificates as
    /// `tls_auth_clients` says.
    pub tls_http: bool,
    /// Whether the replica serves as a node of a Redis Cluster (redis.conf's `cluster-enabled`):
    /// it answers CLUSTER SLOTS, SHARDS, NODES, ... from the ring's configuration and the
    /// peers' client addresses, refuses commands whose keys hash to several slots with
    /// `CROSSSLOT`, and redirects those on a slot it does not replicate with `MOVED`
    /// (see [`crate::cluster`]). Off by default: a plain Redis client may then send any keys
    /// together.
    pub cluster_enabled: bool,
    /// Each key's replication degree R: 3, 5 or 7, at most the number of peers, the same on
    /// every node; 0 (the default) is every node. Below the number of peers N, the nodes form
    /// a ring ([`crate::ring`], docs/ring.md): each key's registers live on the R replicas
    /// its slot is given, and a node forwards commands on keys it does not hold to them.
    pub replication: u8,
    /// On a ring, the bytes per second this node's data mover may spend writing the keys of
    /// moving slots through to their new replicas during a change ([`crate::ring_mover`]);
    /// 0: no limit.
    pub ring_move_bytes_per_sec: u64,
}

impl Default for NodeConfig {
    fn default() -> NodeConfig {
        NodeConfig {
            node_id: 0,
            peers: Vec::new(),
            client_addr: "127.0.0.1:7379".parse().expect("address"),
            peer_addr: "127.0.0.1:8379".parse().expect("address"),
            http_addr: None,
            data_dir: PathBuf::from("logless-data"),
            durability: "mmap".to_string(),
            engine: Engine::default(),
            recovery: Recovery::default(),
            multipaxos: LogTuning::default(),
            shards: 1,
            threads: 0,
            psmr_mode: "psmr".to_string(),
            service: "btree".to_string(),
            read_retries: 1,
            thrifty_reads: true,
            thrifty_writes: false,
            proposer_registers_max: logless_rmw::config::REGISTERS_MAX_DEFAULT,
            remove_dead_registers: None,
            removal_grace_ms: 1_000,
            maxmemory: 0,
            value_bytes_max: logless_redis::session::VALUE_BYTES_MAX_DEFAULT,
            set_members_max: 100_000,
            request_timeout_ms: 5_000,
            clients_max: 10_000,
            cluster_id: String::new(),
            cluster_secret_file: None,
            rejoin: false,
            requirepass: None,
            requirepass_file: None,
            users: Vec::new(),
            timeout: 0,
            client_query_buffer_limit: None,
            client_output_buffer_limit: CLIENT_OUTPUT_BUFFER_LIMIT_DEFAULT,
            peer_connections_max: 0,
            peer_handshake_timeout_ms: 5_000,
            tls_port: 0,
            tls_cert_file: None,
            tls_key_file: None,
            tls_ca_cert_file: None,
            tls_auth_clients: "yes".to_string(),
            tls_cluster: false,
            tls_http: false,
            cluster_enabled: false,
            replication: 0,
            ring_move_bytes_per_sec: DEFAULT_RING_MOVE_BYTES_PER_SEC,
        }
    }
}

/// The default `ring_move_bytes_per_sec`: 8 MiB/s, a small share of a 1 Gbit/s link, so a
/// change leaves clients their latency.
pub const DEFAULT_RING_MOVE_BYTES_PER_SEC: u64 = 8 << 20;

/// The default `client_output_buffer_limit`: 256 MiB, room for replies of several values at
/// the largest `value_bytes_max`.
pub const CLIENT_OUTPUT_BUFFER_LIMIT_DEFAULT: usize = 256 << 20;

/// A memory size as redis's configuration writes it: digits, then optionally `k`, `kb`, `m`,
/// `mb`, `g` or `gb` (any case; `k` is 1000 and `kb` 1024).
pub fn parse_memory(text: &str) -> Option<u64> {
    let text = text.to_ascii_lowercase();
    let digits = text.trim_end_matches(|c: char| c.is_ascii_alphabetic());
    let unit: u64 = match &text[digits.len()..] {
        "" | "b" => 1,
        "k" => 1000,
        "kb" => 1024,
        "m" => 1000 * 1000,
        "mb" => 1024 * 1024,
        "g" => 1000 * 1000 * 1000,
        "gb" => 1024 * 1024 * 1024,
        _ => return None,
    };
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse::<u64>().ok()?.checked_mul(unit)
}

/// Reads a memory size from the file: an integer, or text [`parse_memory`] takes.
fn memory_size<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<u64, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Size {
        Bytes(u64),
        Text(String),
    }
    match Size::deserialize(deserializer)? {
        Size::Bytes(n) => Ok(n),
        Size::Text(text) => parse_memory(&text).ok_or_else(|| {
            serde::de::Error::custom(format!(
                "{text:?} is not a memory size (bytes, or digits with k, kb, m, mb, g or gb)"
            ))
        }),
    }
}

/// The name [`parse_durability`] reads `durability` from.
pub fn durability_name(durability: Durability) -> &'static str {
    match durability {
        Durability::Memory => "memory",
        Durability::Mmap => "mmap",
        Durability::Sync => "sync",
        Durability::Emulp => "emulp",
        Durability::Pmem => "pmem",
    }
}

/// Parses a durability mode name.
pub fn parse_durability(name: &str) -> Result<Durability, ConfigError> {
    match name {
        "memory" => Ok(Durability::Memory),
        "mmap" => Ok(Durability::Mmap),
        "sync" => Ok(Durability::Sync),
        "emulp" => Ok(Durability::Emulp),
        "pmem" => Ok(Durability::Pmem),
        other => Err(ConfigError::Invalid(format!(
            "durability must be memory, mmap, sync, emulp or pmem, not {other:?}"
        ))),
    }
}

/// Parses a peer list written `ID=HOST:PORT,ID=HOST:PORT,...`.
pub fn parse_peers(list: &str) -> Result<Vec<PeerConfig>, ConfigError> {
    list.split(',')
        .filter(|part| !part.trim().is_empty())
        .map(|part| {
            let (id, addr) = part.trim().split_once('=').ok_or_else(|| {
                ConfigError::Invalid(format!("peer {part:?} is not written ID=HOST:PORT"))
            })?;
            let id = id
                .parse()
                .map_err(|_| ConfigError::Invalid(format!("peer id {id:?} is not a number")))?;
            let addr = addr.trim().to_string();
            check_peer_addr(&addr)?;
            Ok(PeerConfig {
                id,
                addr,
                client_addr: None,
            })
        })
        .collect()
}

/// Sets the peers' client addresses from a list written `ID=HOST:PORT,ID=HOST:PORT,...`
/// (`--peer-client-addrs`); every id must be one of `peers`.
pub fn set_peer_client_addrs(peers: &mut [PeerConfig], list: &str) -> Result<(), ConfigError> {
    for part in list.split(',').filter(|part| !part.trim().is_empty()) {
        let (id, addr) = part.trim().split_once('=').ok_or_else(|| {
            ConfigError::Invalid(format!(
                "client address {part:?} is not written ID=HOST:PORT"
            ))
        })?;
        let peer = id
            .parse::<u16>()
            .ok()
            .and_then(|id| peers.iter_mut().find(|p| p.id == id))
            .ok_or_else(|| {
                ConfigError::Invalid(format!(
                    "client address {part:?}: {id:?} is not the id of a peer"
                ))
            })?;
        let addr = addr.trim().to_string();
        split_host_port("client address", &addr)?;
        peer.client_addr = Some(addr);
    }
    Ok(())
}

/// Checks that a peer address is `HOST:PORT` (a name or an address, and a port number).
fn check_peer_addr(addr: &str) -> Result<(), ConfigError> {
    split_host_port("peer address", addr).map(drop)
}

/// `HOST:PORT` (a name or an address, and a port number) as the host, without the brackets of
/// an IPv6 address, and the port; `what` names the address in the error.
pub fn split_host_port<'a>(what: &str, addr: &'a str) -> Result<(&'a str, u16), ConfigError> {
    let bad = || ConfigError::Invalid(format!("{what} {addr:?} is not HOST:PORT"));
    let (host, port) = addr.rsplit_once(':').ok_or_else(bad)?;
    let host = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host);
    match port.parse::<u16>() {
        Ok(port) if !host.is_empty() => Ok((host, port)),
        _ => Err(bad()),
    }
}

/// The longest a node's proposers back off before a retry (ms): short, since a shard's
/// contention is between the few replicas of one register.
pub const BACKOFF_MAX_MS: u64 = 20;

/// Room a request may take beyond one value at the limit, for the other arguments of commands
/// such as `SET key value IFEQ old`.
pub const ARGUMENTS_BYTES_ROOM: usize = 1024;

/// The most worker threads of the psmr engine.
pub const PSMR_THREADS_MAX: u16 = 256;

/// The largest `value_bytes_max` a replica may be configured with.
pub const VALUE_BYTES_MAX_LIMIT: usize = 64 << 20;

impl NodeConfig {
    /// The proposer configuration of every shard, with `acceptors` the cluster's nodes: the one
    /// mapping from a node's settings, used by the node and by the whole-node simulation.
    pub fn proposer_config(&self, acceptors: Vec<NodeId>) -> ProposerConfig {
        let mut proposer = ProposerConfig::new(acceptors);
        proposer.read_retries_max = self.read_retries;
        proposer.thrifty_reads = self.thrifty_reads;
        proposer.thrifty_writes = self.thrifty_writes;
        proposer.registers_max = self.proposer_registers_max;
        proposer.remove_dead_registers = self.removes_dead_registers();
        proposer.removal_grace_ms = self.removal_grace_ms;
        proposer.request_timeout_ms = self.request_timeout_ms;
        proposer.backoff_max_ms = BACKOFF_MAX_MS;
        proposer.limits = self.command_limits();
        proposer
    }

    /// The limits every command holds to, in either engine.
    pub fn command_limits(&self) -> Limits {
        Limits {
            value_bytes_max: self.value_bytes_max,
            set_members_max: self.set_members_max,
        }
    }

    /// The longest bulk string the wire parser reads: the largest `value_bytes_max` allowed
    /// plus [`ARGUMENTS_BYTES_ROOM`]. An argument over `value_bytes_max` but within this is
    /// read whole and answered with an error, and the connection goes on; a longer one breaks
    /// the protocol and closes the connection, as past Redis's `proto-max-bulk-len`.
    pub fn bulk_bytes_max(&self) -> usize {
        VALUE_BYTES_MAX_LIMIT.max(self.value_bytes_max) + ARGUMENTS_BYTES_ROOM
    }

    /// Reads a TOML file.
    pub fn from_file(path: &Path) -> Result<NodeConfig, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        toml::from_str(&text).map_err(|e| ConfigError::Parse {
            path: path.to_path_buf(),
            message: e.to_string(),
        })
    }

    /// This replica's node id.
    pub fn node(&self) -> NodeId {
        NodeId(self.node_id)
    }

    /// The durability mode.
    pub fn durability(&self) -> Result<Durability, ConfigError> {
        parse_durability(&self.durability)
    }

    /// The psmr engine's mode.
    pub fn psmr_mode(&self) -> Result<logless_psmr::config::Mode, ConfigError> {
        self.psmr_mode
            .parse()
            .map_err(|e: logless_psmr::config::UnknownMode| ConfigError::Invalid(e.to_string()))
    }

    /// The service the psmr engine replicates.
    pub fn psmr_service(&self) -> Result<crate::psmr_service::ServiceKind, ConfigError> {
        self.service
            .parse()
            .map_err(|e: crate::psmr_service::UnknownService| ConfigError::Invalid(e.to_string()))
    }

    /// The psmr engine's worker threads: [`NodeConfig::threads`], or the cores available (at
    /// least one) if it is 0.
    pub fn psmr_threads(&self) -> u16 {
        match self.threads {
            0 => std::thread::available_parallelism()
                .map_or(1, |n| u16::try_from(n.get()).unwrap_or(PSMR_THREADS_MAX))
                .min(PSMR_THREADS_MAX),
            threads => threads,
        }
    }

    /// Each key's replication degree R: [`NodeConfig::replication`], or every node if it is 0.
    pub fn replication(&self) -> usize {
        match self.replication {
            0 => self.peers.len(),
            r => usize::from(r),
        }
    }

    /// Whether the nodes form a ring wider than each key's replicas (N > R): each node then
    /// holds only the keys of the slots it replicates.
    pub fn is_ring(&self) -> bool {
        self.replication() != self.peers.len()
    }

    /// Whether this replica removes dead registers: [`NodeConfig::remove_dead_registers`] if
    /// given, otherwise on except on a ring (which refuses it, [`crate::ring::check`]).
    pub fn removes_dead_registers(&self) -> bool {
        self.remove_dead_registers.unwrap_or(!self.is_ring())
    }

    /// Checks everything that can be checked before starting.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let invalid = |m: String| Err(ConfigError::Invalid(m));
        if self.node_id == 0 {
            return invalid("node_id must be between 1 and 65535".into());
        }
        if self.maxmemory > 0 && crate::memory::resident_bytes().is_none() {
            return invalid(
                "maxmemory needs the resident set size from /proc/self/status (Linux)".into(),
            );
        }
        if self.is_ring() {
            crate::ring::check(self)?;
        } else if ![1, 3, 5, 7].contains(&self.peers.len()) {
            return invalid(format!(
                "a cluster has 1, 3, 5 or 7 replicas, not {}{}",
                self.peers.len(),
                if self.replication == 0 {
                    " (give --replication 3, 5 or 7 for a ring of more nodes than each key's \
                     replicas)"
                } else {
                    ""
                }
            ));
        }
        let mut ids: Vec<u16> = self.peers.iter().map(|p| p.id).collect();
        ids.sort_unstable();
        ids.dedup();
        if ids.len() != self.peers.len() || ids.contains(&0) {
            return invalid("peer ids must be distinct and between 1 and 65535".into());
        }
        if !ids.contains(&self.node_id) {
            return invalid(format!("node_id {} is not in the peer list", self.node_id));
        }
        if self.shards == 0 || self.shards > 256 {
            return invalid("shards must be between 1 and 256".into());
        }
        if self.engine == Engine::Multipaxos && self.shards != 1 {
            return invalid(format!(
                "the multipaxos engine orders every key in one log: shards must be 1, not {}",
                self.shards
            ));
        }
        if self.engine == Engine::Psmr {
            self.validate_psmr()?;
        }
        self.recovery
            .check(self.engine, self.peers.len(), self.durability()?)?;
        if self.value_bytes_max == 0 || self.value_bytes_max > VALUE_BYTES_MAX_LIMIT {
            return invalid("value_bytes_max must be between 1 and 64 MiB".into());
        }
        if self.request_timeout_ms < 100 {
            return invalid("request_timeout_ms must be at least 100".into());
        }
        let log_engine = self.engine == Engine::Multipaxos;
        self.multipaxos
            .validate(log_engine.then_some(self.request_timeout_ms))?;
        for peer in &self.peers {
            check_peer_addr(&peer.addr)?;
        }
        if self.cluster_id.len() > CLUSTER_ID_BYTES_MAX {
            return invalid(format!(
                "cluster_id must be at most {CLUSTER_ID_BYTES_MAX} bytes"
            ));
        }
        if self.requirepass.is_some() && self.requirepass_file.is_some() {
            return invalid("give requirepass or requirepass_file, not both".into());
        }
        if self.client_query_buffer_limit() < self.value_bytes_max + ARGUMENTS_BYTES_ROOM {
            return invalid(format!(
                "client_query_buffer_limit must be at least value_bytes_max + {ARGUMENTS_BYTES_ROOM}"
            ));
        }
        if self.client_output_buffer_limit < self.value_bytes_max + ARGUMENTS_BYTES_ROOM {
            return invalid(format!(
                "client_output_buffer_limit must be at least value_bytes_max + {ARGUMENTS_BYTES_ROOM}"
            ));
        }
        if self.peer_handshake_timeout_ms < 100 {
            return invalid("peer_handshake_timeout_ms must be at least 100".into());
        }
        self.durability()?;
        crate::tls::check_config(self)?;
        crate::cluster::cluster_map(self)?;
        Ok(())
    }

    /// The psmr engine's settings: its shards, threads and mode.
    fn validate_psmr(&self) -> Result<(), ConfigError> {
        let invalid = |m: String| Err(ConfigError::Invalid(m));
        if self.shards != 1 {
            return invalid(format!(
                "the psmr engine runs one replica of the service: shards must be 1, not {}",
                self.shards
            ));
        }
        if self.threads > PSMR_THREADS_MAX {
            return invalid(format!(
                "threads must be at most {PSMR_THREADS_MAX}, not {}",
                self.threads
            ));
        }
        let mode = self.psmr_mode()?;
        self.psmr_service()?;
        if mode == logless_psmr::config::Mode::NoRep && self.peers.len() != 1 {
            return invalid(format!(
                "psmr_mode no-rep runs one process without replication: peers must list only \
                 this node, not {} nodes",
                self.peers.len()
            ));
        }
        Ok(())
    }

    /// The most bytes of one pending request: [`NodeConfig::client_query_buffer_limit`] or its
    /// default.
    pub fn client_query_buffer_limit(&self) -> usize {
        self.client_query_buffer_limit
            .unwrap_or(2 * self.bulk_bytes_max())
    }

    /// The most inbound peer connections: [`NodeConfig::peer_connections_max`] or its default.
    pub fn peer_connections_max(&self) -> usize {
        match self.peer_connections_max {
            0 => 4 * self.peers.len().saturating_sub(1) * usize::from(self.shards) + 16,
            max => max,
        }
    }

    /// The users clients log in as: `default` with [`NodeConfig::requirepass`] (or the
    /// password in [`NodeConfig::requirepass_file`]) if set, and [`NodeConfig::users`].
    pub fn acl(&self) -> Result<Acl, ConfigError> {
        let invalid = |m: String| ConfigError::Invalid(m);
        let requirepass = match (&self.requirepass, &self.requirepass_file) {
            (Some(Password(password)), _) => Some(password.as_bytes().to_vec()),
            (None, Some(path)) => Some(read_secret(path)?),
            (None, None) => None,
        };
        let mut users = Vec::new();
        if let Some(password) = requirepass {
            if password.is_empty() {
                return Err(invalid("requirepass must not be empty".into()));
            }
            if self.users.iter().any(|u| u.name == acl::DEFAULT_USER) {
                return Err(invalid(
                    "requirepass is the default user's password: configure the default user \
                     in [[users]] or with requirepass, not both"
                        .into(),
                ));
            }
            users.push(User {
                passwords: vec![acl::hash_password(&password)],
                nopass: false,
                ..User::open_default()
            });
        }
        for user in &self.users {
            users.push(user_of(user)?);
        }
        Acl::new(users).map_err(invalid)
    }

    /// The cluster id and the secret read from [`NodeConfig::cluster_secret_file`] (empty
    /// without one).
    pub fn cluster_auth(&self) -> Result<ClusterAuth, ConfigError> {
        let secret = match &self.cluster_secret_file {
            None => Vec::new(),
            Some(path) => {
                let secret = read_secret(path)?;
                if secret.len() < SECRET_BYTES_MIN {
                    return Err(ConfigError::Invalid(format!(
                        "the cluster secret in {} must be at least {SECRET_BYTES_MIN} bytes",
                        path.display()
                    )));
                }
                secret
            }
        };
        Ok(ClusterAuth {
            cluster_id: crate::ring::hello_cluster_id(self)?,
            secret,
        })
    }
}

/// A secret kept in a file, without the trailing whitespace an editor leaves.
pub(crate) fn read_secret(path: &Path) -> Result<Vec<u8>, ConfigError> {
    let mut secret = std::fs::read(path).map_err(|source| ConfigError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    while secret.last().is_some_and(u8::is_ascii_whitespace) {
        secret.pop();
    }
    Ok(secret)
}

/// The ACL user a `[[users]]` entry describes.
fn user_of(config: &UserConfig) -> Result<User, ConfigError> {
    let invalid = |m: String| ConfigError::Invalid(format!("user {:?}: {m}", config.name));
    let access = match config.commands.as_str() {
        "all" => Access::All,
        "read" => Access::ReadOnly,
        other => {
            return Err(invalid(format!(
                "commands must be all or read, not {other:?}"
            )))
        }
    };
    let passwords = config
        .passwords_sha256
        .iter()
        .map(|hex| {
            parse_sha256(hex).ok_or_else(|| invalid(format!("{hex:?} is not 64 hex digits")))
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(User {
        name: config.name.clone(),
        enabled: config.on,
        nopass: config.nopass,
        passwords,
        keys: config.keys.iter().map(|k| k.clone().into()).collect(),
        access,
    })
}

/// A SHA-256 hash written as 64 hex digits.
fn parse_sha256(hex: &str) -> Option<acl::PasswordHash> {
    if hex.len() != 64 || !hex.is_ascii() {
        return None;
    }
    let mut hash = [0u8; 32];
    for (i, byte) in hash.iter_mut().enumerate() {
        *byte = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).ok()?;
    }
    Some(hash)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_a_file_and_flags_style_peers() {
        let text = r#"
            node_id = 2
            client_addr = "127.0.0.1:7001"
            peer_addr = "127.0.0.1:8001"
            durability = "sync"
            [[peers]]
            id = 1
            addr = "127.0.0.1:8000"
            [[peers]]
            id = 2
            addr = "127.0.0.1:8001"
            [[peers]]
            id = 3
            addr = "127.0.0.1:8002"
        "#;
        let config: NodeConfig = toml::from_str(text).unwrap();
        config.validate().unwrap();
        assert_eq!(config.durability().unwrap(), Durability::Sync);
        assert_eq!(
            parse_peers("1=127.0.0.1:8000, 2=127.0.0.1:8001,3=127.0.0.1:8002").unwrap(),
            config.peers
        );
    }

    #[test]
    fn every_durability_name_parses_and_others_are_refused() {
        for (name, durability) in [
            ("memory", Durability::Memory),
            ("mmap", Durability::Mmap),
            ("sync", Durability::Sync),
            ("emulp", Durability::Emulp),
            ("pmem", Durability::Pmem),
        ] {
            assert_eq!(parse_durability(name).unwrap(), durability);
            assert_eq!(durability_name(durability), name);
        }
        let error = parse_durability("emulated").unwrap_err().to_string();
        assert!(
            error.contains("memory, mmap, sync, emulp or pmem"),
            "{error}"
        );
    }

    #[test]
    fn pmem_recovery_needs_persistent_memory_and_the_log_engine() {
        let peers = parse_peers("1=127.0.0.1:1").unwrap();
        for recovery in [Recovery::Pmem, Recovery::PmemSm] {
            let config = |engine, durability: &str| NodeConfig {
                node_id: 1,
                peers: peers.clone(),
                engine,
                recovery,
                durability: durability.into(),
                ..NodeConfig::default()
            };
            for durability in ["emulp", "pmem"] {
                config(Engine::Multipaxos, durability).validate().unwrap();
            }
            for durability in ["memory", "mmap", "sync"] {
                let error = config(Engine::Multipaxos, durability)
                    .validate()
                    .unwrap_err()
                    .to_string();
                assert!(
                    error.contains("give --durability emulp")
                        && error.contains(durability)
                        && error.contains(&format!("recovery {recovery} ")),
                    "{error}"
                );
            }
            for engine in [Engine::Rmw, Engine::Psmr] {
                let error = config(engine, "emulp").validate().unwrap_err();
                assert!(error.to_string().contains("is the multipaxos engine's"));
            }
        }
        let from_file: NodeConfig =
            toml::from_str("recovery = \"pmem\"\ndurability = \"emulp\"").unwrap();
        assert_eq!(from_file.recovery, Recovery::Pmem);
        assert_eq!(from_file.durability().unwrap(), Durability::Emulp);
        let from_file: NodeConfig =
            toml::from_str("recovery = \"pmem-sm\"\ndurability = \"pmem\"").unwrap();
        assert_eq!(from_file.recovery, Recovery::PmemSm);
        assert_eq!("pmem-sm".parse::<Recovery>(), Ok(Recovery::PmemSm));
        assert_eq!(Recovery::PmemSm.to_string(), "pmem-sm");
    }

    #[test]
    fn rejects_bad_configurations() {
        let peers = parse_peers("1=127.0.0.1:1,2=127.0.0.1:2,3=127.0.0.1:3").unwrap();
        let good = NodeConfig {
            node_id: 1,
            peers,
            ..NodeConfig::default()
        };
        good.validate().unwrap();
        for bad in [
            NodeConfig {
                node_id: 4,
                ..good.clone()
            },
            NodeConfig {
                shards: 0,
                ..good.clone()
            },
            NodeConfig {
                durability: "fast".into(),
                ..good.clone()
            },
            NodeConfig {
                peers: good.peers[..2].to_vec(),
                ..good.clone()
            },
        ] {
            assert!(bad.validate().is_err(), "{bad:?}");
        }
        assert!(parse_peers("1:127.0.0.1:1").is_err());
        assert!(parse_peers("1=127.0.0.1").is_err());
        assert!(parse_peers("1=:80").is_err());
        assert_eq!(
            parse_peers("1=logless-1.internal:8379").unwrap()[0].addr,
            "logless-1.internal:8379"
        );
        let long_id = NodeConfig {
            cluster_id: "x".repeat(CLUSTER_ID_BYTES_MAX + 1),
            ..good.clone()
        };
        assert!(long_id.validate().is_err());
        assert!(toml::from_str::<NodeConfig>("colour = 1").is_err());
    }

    #[test]
    fn the_deployment_example_is_a_valid_configuration() {
        let config: NodeConfig = toml::from_str(include_str!("../../deploy/logless.toml")).unwrap();
        config.validate().unwrap();
        assert_eq!(config.peers[1].addr, "logless-2.internal:8379");
        assert_eq!(config.cluster_id, "prod-eu-1");
        assert_eq!((config.client_addr.port(), config.tls_port), (0, 7379));
        assert!(config.tls_cluster);
    }

    #[test]
    fn the_cluster_secret_comes_from_a_file_without_its_newline() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("secret");
        std::fs::write(&path, "0123456789abcdef\n").unwrap();
        let config = NodeConfig {
            cluster_id: "prod".into(),
            cluster_secret_file: Some(path.clone()),
            ..NodeConfig::default()
        };
        let auth = config.cluster_auth().unwrap();
        assert_eq!(
            (auth.cluster_id.as_str(), auth.secret.as_slice()),
            ("prod", &b"0123456789abcdef"[..])
        );
        std::fs::write(&path, "short\n").unwrap();
        assert!(config.cluster_auth().is_err());
        let none = NodeConfig::default().cluster_auth().unwrap();
        assert!(none.secret.is_empty());
    }

    #[test]
    fn requirepass_and_users_make_the_acl() {
        let open = NodeConfig::default().acl().unwrap();
        assert!(!open.requires_auth());
        let hash = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";
        let text = format!(
            r#"
            requirepass = "s3cret"
            [[users]]
            name = "app"
            passwords_sha256 = ["{hash}"]
            keys = ["app:*"]
            commands = "read"
            "#
        );
        let config: NodeConfig = toml::from_str(&text).unwrap();
        assert!(!format!("{config:?}").contains("s3cret"));
        let acl = config.acl().unwrap();
        assert!(acl.requires_auth());
        assert!(acl.authenticate(b"default", b"s3cret").is_some());
        assert!(acl.authenticate(b"default", b"other").is_none());
        let app = acl
            .authenticate(b"app", b"")
            .expect("the hash of the empty password");
        assert_eq!(acl.user(app).access, Access::ReadOnly);

        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("requirepass");
        std::fs::write(&path, "from-file\n").unwrap();
        let from_file = NodeConfig {
            requirepass_file: Some(path),
            ..NodeConfig::default()
        };
        assert!(from_file
            .acl()
            .unwrap()
            .authenticate(b"default", b"from-file")
            .is_some());

        for bad in [
            r#"[[users]]
               name = "x"
               passwords_sha256 = ["abc"]
               commands = "all""#,
            r#"[[users]]
               name = "x"
               commands = "some""#,
            r#"requirepass = ""
            "#,
            r#"requirepass = "a"
               [[users]]
               name = "default"
               commands = "all""#,
        ] {
            let config: NodeConfig = toml::from_str(bad).unwrap();
            assert!(config.acl().is_err(), "{bad}");
        }
    }

    #[test]
    fn cluster_mode_needs_a_ring_and_every_client_address() {
        let mut peers = parse_peers("1=127.0.0.1:8001,2=127.0.0.1:8002,3=127.0.0.1:8003").unwrap();
        set_peer_client_addrs(&mut peers, "2=127.0.0.1:7002, 3=[::1]:7003").unwrap();
        let good = NodeConfig {
            node_id: 1,
            peers: peers.clone(),
            client_addr: "127.0.0.1:7001".parse().unwrap(),
            cluster_enabled: true,
            ..NodeConfig::default()
        };
        good.validate().unwrap();
        let map = crate::cluster::cluster_map(&good).unwrap().unwrap();
        let nodes = map.nodes();
        let own = &nodes[&logless_placement::NodeId(1)];
        assert_eq!(
            (own.ip.as_str(), own.port, own.bus_port),
            ("127.0.0.1", 7001, 8001)
        );
        let third = &nodes[&logless_placement::NodeId(3)];
        assert_eq!((third.ip.as_str(), third.port), ("::1", 7003));
        assert!(crate::cluster::cluster_map(&NodeConfig {
            cluster_enabled: false,
            ..good.clone()
        })
        .unwrap()
        .is_none());
        let refusal = |config: NodeConfig| config.validate().unwrap_err().to_string();
        // This replica's own address is not a specific one: it must be given.
        let wildcard = refusal(NodeConfig {
            client_addr: "0.0.0.0:7001".parse().unwrap(),
            ..good.clone()
        });
        assert!(wildcard.contains("give replica 1 one"), "{wildcard}");
        let other = refusal(NodeConfig {
            node_id: 2,
            peers: parse_peers("1=127.0.0.1:8001,2=127.0.0.1:8002,3=127.0.0.1:8003").unwrap(),
            ..good.clone()
        });
        assert!(other.contains("give replica 1 one"), "{other}");
        let alone = refusal(NodeConfig {
            peers: peers[..1].to_vec(),
            ..good.clone()
        });
        assert!(alone.contains("3, 5 or 7 replicas"), "{alone}");
        let psmr = refusal(NodeConfig {
            engine: Engine::Psmr,
            ..good.clone()
        });
        assert!(psmr.contains("psmr"), "{psmr}");
        for bad in ["9=127.0.0.1:1", "2=127.0.0.1", "2:127.0.0.1:1", "x=h:1"] {
            assert!(set_peer_client_addrs(&mut peers, bad).is_err(), "{bad}");
        }
        let text = r#"
            node_id = 1
            cluster_enabled = true
            [[peers]]
            id = 1
            addr = "127.0.0.1:8001"
            client_addr = "logless-1.internal:7379"
            [[peers]]
            id = 2
            addr = "127.0.0.1:8002"
            client_addr = "logless-2.internal:7379"
            [[peers]]
            id = 3
            addr = "127.0.0.1:8003"
            client_addr = "logless-3.internal:7379"
        "#;
        let config: NodeConfig = toml::from_str(text).unwrap();
        config.validate().unwrap();
        assert_eq!(
            config.peers[2].client_addr.as_deref(),
            Some("logless-3.internal:7379")
        );
    }

    #[test]
    fn limits_have_sane_defaults_and_bounds() {
        let peers = parse_peers("1=127.0.0.1:1,2=127.0.0.1:2,3=127.0.0.1:3").unwrap();
        let good = NodeConfig {
            node_id: 1,
            peers,
            ..NodeConfig::default()
        };
        assert_eq!(good.client_query_buffer_limit(), 2 * good.bulk_bytes_max());
        assert_eq!(good.peer_connections_max(), 4 * 2 + 16);
        for bad in [
            NodeConfig {
                client_query_buffer_limit: Some(1024),
                ..good.clone()
            },
            NodeConfig {
                client_output_buffer_limit: 1024,
                ..good.clone()
            },
            NodeConfig {
                peer_handshake_timeout_ms: 10,
                ..good.clone()
            },
            NodeConfig {
                requirepass: Some(Password("a".into())),
                requirepass_file: Some("/nonexistent".into()),
                ..good.clone()
            },
        ] {
            assert!(bad.validate().is_err(), "{bad:?}");
        }
    }
}
