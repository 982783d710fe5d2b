//! A logless replica as a process: the runtime around the RMWPaxos core.
//!
//! * [`config`] — what a replica is told at start (TOML file and flags);
//! * [`context`] — what every task may look at: configuration, shard channels, counters;
//! * [`store`] — its durable state: one slot file per shard and the incarnation;
//! * [`durable_log`] — the log engine's durable state: its records on a segmented log;
//! * [`epoch_file`] — the log engine's one stable write under EpochSS, its epoch;
//! * [`turn`] — one shard's turn logic without a runtime: proposer, acceptors, timers,
//!   group commit (shared with the whole-node simulation);
//! * [`shard`] — the tokio event loop that feeds a shard's turns;
//! * [`log_turn`] — the log engine's turn logic without a runtime: its replica of the log,
//!   its durable log, and the client operations waiting for answers;
//! * [`hello`] — the peer hello: cluster id and a challenge–response proving the secret;
//! * [`lives`] — the peers' lives this node welcomed, which tell a lost data directory;
//! * [`log_loop`] — the tokio event loop of the log engine's one replica of the log;
//! * [`log_ops`] — the Redis session's steps as operations of the log, and their replies;
//! * [`psmr_turn`], [`psmr_loop`], [`psmr_workers`] and [`psmr_ops`] — the psmr engine: its
//!   groups' durable logs and clients, its event loop, its worker threads driving the
//!   execution plan, and the Redis commands of the B⁺-tree key-value service it serves;
//! * [`peer`] — the TCP transport between the same shard of every replica, and
//!   [`peer_codec`] — its frames for each engine;
//! * [`memory`] — `maxmemory`: the used memory sampled, and which commands go over it;
//! * [`limits`] — what one client or peer connection may hold, and for how long;
//! * [`tls`] — TLS for clients and peers: rustls configurations and handshakes;
//! * [`front`], [`info`] and [`admin`] — the Redis front end: sockets and buffers around each
//!   connection's `logless_redis::session::Session`, and the server and admin commands it
//!   leaves to the node; [`clients`] — the registry of open connections;
//! * [`cluster`] — Redis Cluster in the node (`cluster_enabled`): the ring it serves with,
//!   its nodes' client addresses, and the `CLUSTER` replies;
//! * [`status`] and [`http`] — figures, `/metrics`, `/health`, `/status`;
//! * [`node`] — starting and stopping it all.
#![warn(missing_docs)]

pub mod admin;
mod client_pool;
pub mod clients;
pub mod cluster;
pub mod config;
pub mod context;
pub mod durable_log;
pub mod epoch_file;
pub mod forward;
pub mod front;
pub mod hello;
pub mod http;
pub mod info;
pub mod limits;
pub mod lives;
pub mod log_config;
pub mod log_loop;
pub mod log_machine;
pub mod log_ops;
pub mod log_turn;
pub mod memory;
pub mod node;
pub mod peer;
pub mod peer_codec;
pub mod psmr_loop;
pub mod psmr_ops;
pub mod psmr_service;
pub mod psmr_snapshot;
pub mod psmr_turn;
pub mod psmr_workers;
pub mod registers_in_place;
pub mod ring;
pub mod ring_change;
pub mod ring_mover;
pub mod ring_register;
pub mod ring_watch;
pub mod shard;
pub mod state_record;
pub mod status;
pub mod store;
pub mod tls;
pub mod turn;
