//! The sans-IO core of logless's log engine: Multi-Paxos as JPaxos builds it (seed 002,
//! §II–§IV), with batching, a window of instances in flight, snapshots, log truncation and
//! catch-up.
//!
//! Replicas agree on a *log* of batches of client requests, one Paxos instance per position,
//! and every replica executes the decided batches in log order on its copy of a deterministic
//! [`StateMachine`](state_machine::StateMachine). One replica leads each view and proposes;
//! a follower that stops hearing its leader starts a view change, whose phase 1 covers every
//! instance from the first undecided one at once. Because one log orders everything, commands
//! that span keys are atomic, which the per-key engine cannot give.
//!
//! * [`ids`]: replicas, views (leader = view mod n), instances, clients, request numbers.
//! * [`message`]: requests, batches, snapshots and the messages between replicas.
//! * [`wire`]: the versioned binary encoding of messages; decoding never panics.
//! * [`persist`]: "persist before send" as a type: a [`Ready`](persist::Ready) releases its
//!   messages and replies only once its records are written and flushed.
//! * [`replica`]: the replica's state machine (roles, phases, execution, client table,
//!   snapshots, catch-up).
//! * [`state_machine`]: the service the log drives.
//! * [`config`]: limits, timeouts and deliberate bugs, passed explicitly.
//! * [`testing`]: a log store and a state machine for tests.
//!
//! The core reads no clock, socket, file or random number generator: time comes in as an
//! argument (milliseconds), effects leave as plain data.
#![deny(missing_docs)]
#![forbid(unsafe_code)]

pub mod config;
pub mod ids;
pub mod message;
pub mod persist;
pub mod replica;
pub mod state_machine;
pub mod testing;
pub mod wire;
