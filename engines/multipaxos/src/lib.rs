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
//! * [`kv`]: the service logless runs on it, a map of keys to registers executing single-key
//!   commands, multi-key commands and transactions as atomic operations.
//! * [`config`]: limits, timeouts and deliberate bugs, passed explicitly.
//! * [`testing`]: a log store and a state machine for tests.
//!
//! The core reads no clock, socket, file or random number generator: time comes in as an
//! argument (milliseconds), effects leave as plain data. The leader stamps every batch with
//! its clock, never below a stamp it has seen, and the state machine executes at that stamp
//! (raised to the highest before it), so replicas agree on time: the argument that stamps do
//! not go back across view changes is in [`replica`], under "Stamps".
//!
//! # Where this differs from JPaxos, and what is not here yet
//! * Followers broadcast Accepts and decide on their own, as JPaxos does, so there is no
//!   separate decision message: the leader's Alive names its first undecided instance, and a
//!   replica behind it catches up. A replica that knows an instance decided answers a leader
//!   proposing it again with the decision.
//! * A catch-up query names a range of instances, not a list; its response carries the
//!   responder's snapshot when the range starts below its log (no separate snapshot request).
//! * Snapshots are taken between instances, not after any operation.
//! * The recovery modes of seed 002 §V ([`config::Recovery`]): FullSS, replaying snapshot and
//!   log; EpochSS, recovering from peers with epochs; mPaxos, resuming at once while the
//!   runtime rebuilds the state machine (see [`replica`]). For mPaxosSM the engine only offers
//!   on-demand snapshots and checkpoints ([`config::Snapshots::OnDemand`]); the state machine
//!   in persistent memory is the runtime's. Only the records are defined here
//!   ([`persist::Record`]), not their encoding on disk.
//! * Unbounded still: the client table (one entry per client ever seen), a Promise (every
//!   vote from the first undecided instance on; truncation keeps it short in practice).
//! * [`kv`] has no WATCH (the node serves it: `node/src/log_turn.rs`). Its
//!   `RegisterMachine::restore` panics on a snapshot that does not decode: the trait has no
//!   error path for a restore.
//! * A leader that lost its majority does not step down by itself; it learns the new view
//!   from the new leader's messages. Reads go through the log (no leases).
#![deny(missing_docs)]
#![forbid(unsafe_code)]

pub mod config;
pub mod ids;
pub mod kv;
pub mod message;
pub mod persist;
pub mod replica;
pub mod state_machine;
pub mod testing;
pub mod wire;
