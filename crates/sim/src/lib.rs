//! A deterministic in-process logless cluster: real replicas ([`logless_core::replica`]) on a
//! simulated network, disk and clock, driven by one seed, with a per-key linearizability
//! checker for the histories its clients record.
//!
//! It serves three purposes: the demo (`logless up` until the networked node exists), the
//! many-seed randomized tests of the protocol, and the CPU benchmark of the protocol without
//! I/O.
pub mod cluster;
pub mod history;
pub mod stats;
