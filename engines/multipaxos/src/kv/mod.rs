//! The replicated key-value map the log drives: Redis's keyspace over the per-key engine's
//! register values, with multi-key commands and transactions as single atomic steps.
//!
//! A request's payload is an encoded [`Operation`]: one `logless_commands` [`Command`] on one
//! key (executed with exactly the semantics the per-key engine gives it), a multi-key command
//! (MSET, MSETNX, RENAME, RENAMENX, SMOVE, COPY, DEL/EXISTS/MGET of several keys), or a
//! transaction of operations on any keys (MULTI ... EXEC), possibly checked against WATCH's
//! stamps ([`versions`]). The reply is an encoded
//! [`Response`]. The log orders every operation, and one operation executes entirely before
//! the next begins, so each is atomic without locks or rollback.
//!
//! # Determinism
//! Every replica executes the same operations in the same order from the same state and must
//! reach the same state and replies:
//! * the map is a `BTreeMap` and every iteration over it is in key order;
//! * time is the batch's execution stamp ([`StateMachine::begin_batch`]), never a replica's own
//!   clock, so replicas agree on which keys have expired;
//! * commands that choose at random (SPOP, SRANDMEMBER, HRANDFIELD) get their seed from the
//!   log position (instance, position of the request in the batch, place in the transaction)
//!   through `Command::seed`: whatever seed the payload carried is replaced, so a front end need
//!   not draw one and every replica chooses the same.
//!
//! # No tombstones
//! The per-key engine keeps a deleted key as a tombstone because proposers of one key agree on
//! its next *state* without a shared order: a replica that dropped a key could not tell "never
//! written" from "deleted", and a proposer holding an old state could bring a value back. Here
//! nothing is agreed about a key apart from the log: the map is a function of the decided
//! prefix, every replica removes a key at the same operation, and later operations see "absent"
//! the same way on every replica whether the key was never written or deleted. So a key whose
//! value is deleted, emptied or found expired when an operation touches it leaves the map, and
//! expired keys nobody touches are swept at the start of batches (a bounded number per batch,
//! in expiry order). The one exception is a key that carries a fencing token
//! ([`Register::fence`]): its tokens must only grow, so it stays as an absent register with its
//! token, as DEL leaves it in the per-key engine.
//!
//! [`StateMachine::begin_batch`]: crate::state_machine::StateMachine::begin_batch
pub mod codec;
mod machine;
pub mod op;
pub mod response;
pub mod versions;

pub use logless_commands::command::Command;
pub use logless_commands::value::Register;
pub use machine::{RegisterMachine, EXPIRED_SWEEP_MAX};
pub use op::Operation;
pub use response::Response;
