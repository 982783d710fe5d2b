//! Deterministic simulations of logless clusters, driven by one seed, with a per-key
//! linearizability checker for the histories their clients record.
//!
//! * [`cluster`] — core replicas ([`logless_rmw::replica`]) on a simulated network, disk and
//!   clock: the demo and the many-seed tests of the protocol;
//! * [`nodes`] — whole nodes: the node's shard turn logic ([`logless_node::turn`]) over the
//!   real slot store on simulated media, with power failures, torn sectors and clock jumps;
//! * [`log_cluster`] — the log engine's replicas ([`logless_multipaxos`]) over their real
//!   durable logs on simulated directories, with kills of the leader, power failures and
//!   partitions, checked by [`atomicity`];
//! * [`log_nodes`] — whole nodes of the log engine: the node's log turn core over its durable
//!   log on simulated directories, with power failures, leader kills and partitions;
//! * [`psmr_nodes`] — whole nodes of the psmr engine: the node's psmr turn core over its
//!   groups' durable logs on simulated directories, its workers stepped without threads,
//!   with crashes, partitions, loss and group leaders cut off, the entries checked per key and
//!   the replicas' digests compared;
//! * [`direct`] — core replicas handing messages straight to each other, no network: the CPU
//!   benchmark of the protocol;
//! * [`history`] — client histories, with expiry's clock bounds, and their form for Porcupine;
//! * [`linearizability`] — the per-key linearizability checker, expiry included;
//! * [`atomicity`] — a whole-state linearizability checker over a few counters, which sees
//!   an operation that spans keys taken apart;
//! * [`queue`] and [`link`] — the event queue and the TCP-like links both simulations use;
//!   [`network`] — the links, partitions and network faults of the whole-node runs, and
//!   `whole_node` — the rest they share (clock, faults' draws, clients' bookkeeping).
pub mod atomicity;
pub mod cluster;
pub mod direct;
pub mod history;
pub mod linearizability;
pub mod link;
pub mod log_cluster;
pub mod log_nodes;
pub mod network;
pub mod nodes;
pub mod psmr_nodes;
pub mod queue;
pub mod stats;
mod whole_node;
