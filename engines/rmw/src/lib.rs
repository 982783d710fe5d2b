//! The sans-IO core of logless: RMWPaxos (Algorithm 3 of the RMWPaxos paper, with the
//! optimisations of its §5.8).
//!
//! Every key is its own replicated state machine. Acceptors keep, per key, only the latest
//! state (`r_ack`, `r_voted`, the value and the id of the request that produced it) and
//! overwrite it in place; proposers agree with a quorum of acceptors on the next state by
//! applying commands to the latest chosen state.
//!
//! * [`ids`]: rounds, request ids and the ordering of rounds.
//! * [`message`]: the messages of Algorithm 3.
//! * [`acceptor`]: pure handlers from (state, message) to (new state, replies).
//! * [`persist`]: "persist before reply" as a type: acceptor replies are released only by
//!   committing their states to a store.
//! * [`placement`]: which acceptors hold each register (every one, or a ring's replicas).
//! * [`quorum`]: per-acceptor reply tables and consistent-quorum verdicts.
//! * [`proposer`]: one state machine per register: reads, writes, write-through, retries,
//!   fast writes, batching, exactly-once.
//! * [`replica`]: proposer and acceptor of one node together, the unit the runtime drives.
//! * [`removal`]: removing dead registers from every acceptor without resurrecting values.
//! * `rejoin` (internal): how a replica that lost its acceptor states fences its peers and
//!   recovers each register before it answers for it again (see [`Replica::rejoining`](replica::Replica::rejoining)).
//! * [`timers`]: the wake-ups a runtime holds for a replica, fired in due order.
//! * `held` (internal): a register's state packed into the acceptor table's entry, a small
//!   value inside it.
//! * `armed`, `buffers` and `incidental` (internal): the proposer's table of armed timers,
//!   the output vectors a replica reuses between steps, and state that equality ignores.
//! * [`wire`]: the checksummed, versioned frames replicas exchange.
//!
//! The core reads no clock, socket, file or global random number generator. Time and a seeded
//! random number generator come in as arguments; effects leave as plain data.
pub mod acceptor;
mod armed;
mod buffers;
mod codec;
pub mod config;
mod held;
pub mod ids;
mod incidental;
pub mod message;
pub mod persist;
pub mod placement;
pub mod proposer;
pub mod quorum;
mod rejoin;
pub mod removal;
pub mod replica;
mod table;
pub mod timers;
pub mod wire;

pub use logless_commands as commands;
