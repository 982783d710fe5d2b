//! Where a key lives in a ring of logless nodes (seed 001 §5): the keyspace as a ring, each
//! key replicated on `R` nodes by symmetric replication, mapped onto Redis Cluster's 16,384
//! slots so that cluster-aware Redis clients route every key straight to one of its replicas.
//!
//! * [`slot`]: hash tags and the slot of a key, exactly as Redis Cluster computes them.
//! * [`ring`]: ring positions, the fixed segments nodes own, and the `R` symmetric positions
//!   of a slot.
//! * [`config`]: a configuration (epoch, replication degree, the owner of every segment) and
//!   the replica set it gives each slot; the configurations after adding, removing or
//!   replacing a node.
//! * [`diff`]: what changing from one configuration to another moves.
//! * [`codec`]: the byte form of a configuration (for the register that will hold it).
//! * [`stage`]: the acceptors of a slot while the ring changes (joint quorums of the old and
//!   the new replicas), and when replies make a quorum.
//!
//! # Ring and slots together
//!
//! The slot is the unit of placement: every key of a slot sits at the slot's ring position, so
//! all of them have the same replicas. That is what lets the ring speak Redis Cluster: a
//! `CLUSTER SLOTS` answer lists slot ranges with their replicas, and a `MOVED` redirection names
//! a slot. It also keeps hash tags meaningful: keys that share a tag share a slot, so they share
//! their acceptors. The ring decides which nodes hold a slot: the slot's `R` positions, a
//! `1/R` of the ring apart, fall in segments of (in general) different nodes, and segments
//! rather than slots are what configurations hand between nodes. Sixteen slots start in each
//! segment, so a slot's replica set changes only when a segment one of its positions lies in
//! changes owner.
//!
//! The crate does no I/O and keeps no clock or random number generator: a configuration gives
//! the same placement on every node.
#![warn(missing_docs)]

pub mod codec;
pub mod config;
pub mod diff;
pub mod ring;
pub mod slot;
pub mod stage;

pub use config::{Configuration, Epoch, NodeId, PlacementError, ReplicaSet, Replication};
pub use diff::{ConfigDiff, SlotChange};
pub use slot::{key_slot, Slot, SlotRange, SLOTS};
pub use stage::{SlotAcceptors, Stage};
