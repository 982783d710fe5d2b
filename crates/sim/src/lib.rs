//! Deterministic simulations of logless clusters, driven by one seed, with a per-key
//! linearizability checker for the histories their clients record.
//!
//! * [`cluster`] — core replicas ([`logless_core::replica`]) on a simulated network, disk and
//!   clock: the demo, the many-seed tests of the protocol and its CPU benchmark;
//! * [`nodes`] — whole nodes: the node's shard turn logic ([`logless_node::turn`]) over the
//!   real slot store on simulated media, with power failures, torn sectors and clock jumps;
//! * [`history`] — histories and the linearizability checker;
//! * [`queue`] and [`link`] — the event queue and the TCP-like links both simulations use.
pub mod cluster;
pub mod history;
pub mod link;
pub mod nodes;
pub mod queue;
pub mod stats;
