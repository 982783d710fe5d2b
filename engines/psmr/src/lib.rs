//! The sans-IO core of logless's third engine: parallel state-machine replication (P-SMR,
//! seed 004), on the log engine's Multi-Paxos.
#![deny(missing_docs)]
#![forbid(unsafe_code)]

pub mod config;
pub mod groups;
pub mod ids;
pub mod merge;
pub mod plan;
pub mod replica;
pub mod service;
pub mod stream;
pub mod testing;
