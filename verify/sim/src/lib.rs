//! Deterministic simulations of logless clusters, driven by one seed, with a per-key
//! linearizability checker for the histories their clients record.
//!
//! * [`cluster`] — core replicas ([`logless_rmw::replica`]) on a simulated network, disk and
//!   clock: the demo and the many-seed tests of the protocol;
//! * [`nodes`] — whole nodes: the node's shard turn logic ([`logless_node::turn`]) over the
//!   real slot store on simulated media, with power failures, torn sectors and clock jumps;
//! * [`direct`] — core replicas handing messages straight to each other, no network: the CPU
//!   benchmark of the protocol;
//! * [`history`] — client histories, with expiry's clock bounds, and their form for Porcupine;
//! * [`linearizability`] — the per-key linearizability checker, expiry included;
//! * [`queue`] and [`link`] — the event queue and the TCP-like links both simulations use.
pub mod cluster;
pub mod direct;
pub mod history;
pub mod linearizability;
pub mod link;
pub mod nodes;
pub mod queue;
pub mod stats;
