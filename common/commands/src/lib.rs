//! The data model of one logless register: what a key can hold ([`value`]), the commands on it
//! and their deterministic semantics ([`command`]), and the value's binary encoding.
//!
//! The consensus core applies these commands to the latest chosen state of a register and
//! proposes the result; every replica and every checker uses the same definitions, so a
//! command means the same thing wherever it is evaluated.
pub mod command;
pub mod float;
pub mod glob;
pub mod value;
mod zset;

/// The longest key a register may have, in bytes: the stores' record layout and the Redis
/// session both hold to it.
pub const KEY_BYTES_MAX: usize = 1024;
