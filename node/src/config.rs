//! A replica's configuration: a TOML file, overridden by flags, checked before anything starts.
//!
//! ```toml
//! node_id = 1
//! client_addr = "127.0.0.1:7379"
//! peer_addr = "127.0.0.1:8379"
//! http_addr = "127.0.0.1:9379"
//! data_dir = "./logless-data/node-1"
//! durability = "mmap"          # memory | mmap | sync | pmem
//! shards = 1
//! read_retries = 1
//! thrifty_reads = true         # reads ask a quorum first, the rest only when needed
//! thrifty_writes = false       # fast writes too: for clients that send a key to one replica
//! proposer_registers_max = 262144  # registers each shard's proposer keeps; idle ones beyond go
//! remove_dead_registers = false  # deleted and expired keys leave every replica (docs/removal.md)
//! value_bytes_max = 1048576
//! cluster_id = "prod-eu"       # peers of another cluster id are refused
//! cluster_secret_file = "/etc/logless/cluster-secret"  # proven in every peer hello
//!
//! [[peers]]                    # every replica, this one included, the same list everywhere
//! id = 1
//! addr = "127.0.0.1:8379"      # HOST:PORT; HOST may be a DNS name, resolved at each connect
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
use serde::Deserialize;
use thiserror::Error;

use crate::hello::{ClusterAuth, CLUSTER_ID_BYTES_MAX, SECRET_BYTES_MIN};

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
    /// `memory`, `mmap`, `sync` or `pmem`.
    pub durability: String,
    /// Shards (one event loop and one store file each); the same on every replica.
    pub shards: u16,
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
    /// replica, freeing their slots (`docs/removal.md`). Replicas apply removals from peers
    /// whatever this says.
    pub remove_dead_registers: bool,
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
            shards: 1,
            read_retries: 1,
            thrifty_reads: true,
            thrifty_writes: false,
            proposer_registers_max: logless_rmw::config::REGISTERS_MAX_DEFAULT,
            remove_dead_registers: false,
            value_bytes_max: logless_redis::session::VALUE_BYTES_MAX_DEFAULT,
            set_members_max: 100_000,
            request_timeout_ms: 5_000,
            clients_max: 10_000,
            cluster_id: String::new(),
            cluster_secret_file: None,
        }
    }
}

/// Parses a durability mode name.
pub fn parse_durability(name: &str) -> Result<Durability, ConfigError> {
    match name {
        "memory" => Ok(Durability::Memory),
        "mmap" => Ok(Durability::Mmap),
        "sync" => Ok(Durability::Sync),
        "pmem" => Ok(Durability::Pmem),
        other => Err(ConfigError::Invalid(format!(
            "durability must be memory, mmap, sync or pmem, not {other:?}"
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
            Ok(PeerConfig { id, addr })
        })
        .collect()
}

/// Checks that a peer address is `HOST:PORT` (a name or an address, and a port number).
fn check_peer_addr(addr: &str) -> Result<(), ConfigError> {
    let bad = || ConfigError::Invalid(format!("peer address {addr:?} is not HOST:PORT"));
    let (host, port) = addr.rsplit_once(':').ok_or_else(bad)?;
    if host.is_empty() || port.parse::<u16>().is_err() {
        return Err(bad());
    }
    Ok(())
}

/// The longest a node's proposers back off before a retry (ms): short, since a shard's
/// contention is between the few replicas of one register.
pub const BACKOFF_MAX_MS: u64 = 20;

/// Room a request may take beyond one value at the limit, for the other arguments of commands
/// such as `SET key value IFEQ old`.
pub const ARGUMENTS_BYTES_ROOM: usize = 1024;

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
        proposer.remove_dead_registers = self.remove_dead_registers;
        proposer.request_timeout_ms = self.request_timeout_ms;
        proposer.backoff_max_ms = BACKOFF_MAX_MS;
        proposer.limits = Limits {
            value_bytes_max: self.value_bytes_max,
            set_members_max: self.set_members_max,
        };
        proposer
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

    /// Checks everything that can be checked before starting.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let invalid = |m: String| Err(ConfigError::Invalid(m));
        if self.node_id == 0 {
            return invalid("node_id must be between 1 and 65535".into());
        }
        if ![1, 3, 5, 7].contains(&self.peers.len()) {
            return invalid(format!(
                "a cluster has 1, 3, 5 or 7 replicas, not {}",
                self.peers.len()
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
        if self.value_bytes_max == 0 || self.value_bytes_max > VALUE_BYTES_MAX_LIMIT {
            return invalid("value_bytes_max must be between 1 and 64 MiB".into());
        }
        if self.request_timeout_ms < 100 {
            return invalid("request_timeout_ms must be at least 100".into());
        }
        for peer in &self.peers {
            check_peer_addr(&peer.addr)?;
        }
        if self.cluster_id.len() > CLUSTER_ID_BYTES_MAX {
            return invalid(format!(
                "cluster_id must be at most {CLUSTER_ID_BYTES_MAX} bytes"
            ));
        }
        self.durability()?;
        Ok(())
    }

    /// The cluster id and the secret read from [`NodeConfig::cluster_secret_file`] (empty
    /// without one).
    pub fn cluster_auth(&self) -> Result<ClusterAuth, ConfigError> {
        let secret = match &self.cluster_secret_file {
            None => Vec::new(),
            Some(path) => {
                let mut secret = std::fs::read(path).map_err(|source| ConfigError::Read {
                    path: path.clone(),
                    source,
                })?;
                while secret.last().is_some_and(u8::is_ascii_whitespace) {
                    secret.pop();
                }
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
            cluster_id: self.cluster_id.clone(),
            secret,
        })
    }
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
}
