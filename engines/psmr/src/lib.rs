//! The sans-IO core of logless's third engine: parallel state-machine replication (P-SMR,
//! seed 004), on the log engine's Multi-Paxos.
//!
//! Classic SMR has two bottlenecks: one ordered stream, and one thread executing it. P-SMR
//! removes both. A replica runs `k` worker threads; each command goes, by the service's C-G
//! function, either to one worker's group `g_i` (a command that depends only on commands of
//! that group) or to `g_all` (anything wider). Every group is an independent ordered stream, and
//! each worker delivers its own group and `g_all` merged in one order that every replica shares.
//! A worker runs its own group's commands at once (parallel mode) and meets every other worker
//! at a barrier for a `g_all` command, which the lowest-numbered worker runs alone
//! (synchronous mode, Algorithm 1).
//!
//! * The service: what P-SMR needs of one is `logless-service`'s [`logless_service::Service`]
//!   (C-G, C-Dep, execution, digest) and its workers and groups ([`logless_service::WorkerId`],
//!   [`logless_service::Group`]). The engine calls only its byte-level entry points: C-G on an
//!   encoded command ([`logless_service::Service::group_of_encoded`]) here, execution
//!   ([`logless_service::Service::execute_encoded`]) in the runtime's workers.
//! * [`ids`]: each group's place among the replica's streams.
//! * [`stream`]: a group's log as a stream of delivered batches, with their execution stamps.
//! * [`groups`]: the `k + 1` Multi-Paxos logs side by side: the group in every message, one
//!   commit (write all groups' records, flush once, then send) for persist before send, the
//!   leaders spread over the replicas, and skips proposed by idle groups' leaders.
//! * [`merge`]: the deterministic merge of a worker's streams, ordered by (execution stamp,
//!   group, instance); its module docs argue determinism and, with skips, liveness.
//! * [`plan`]: Algorithm 1's execution as worker steps (no threads); its module docs argue that
//!   it equals sequential execution of the merged order and never deadlocks.
//! * [`replica`]: the three put together for each [`config::Mode`]: P-SMR, sP-SMR (one stream,
//!   a scheduler by C-G), SMR (one stream, one worker) and no replication.
//! * [`cut`]: the point of every group's log a snapshot of the service covers.
//! * [`config`]: workers, mode, the groups' Multi-Paxos configuration, skip interval and the
//!   deliberate bugs (a merge by arrival, synchronous mode without the barrier, no skips, a
//!   cut past a group's position, streams released past the cut, cuts without client tables, a
//!   cut installed without its service state).
//! * [`wire`]: the groups' messages and records encoded behind their group.
//! * [`testing`]: a store per group in memory. The engine's tests replicate the real services,
//!   the B⁺-tree key-value store (`logless-btree`) and NetFS (`logless-netfs`).
//!
//! The core reads no clock, socket, file, thread or random number generator: time comes in as
//! an argument (milliseconds), effects leave as plain data, and the node drives the plan from
//! its worker threads.
//!
//! # Where this differs from seed 004, and what is not here yet
//! * The merge orders by the leaders' stamps instead of a round-robin over instances, and an
//!   idle group's leader proposes a skip (a batch with no command, stamped with its clock
//!   raised past the stamp the waiting merge needs) instead of a skip that declares a number
//!   of instances: a batch waits at most about the skip interval and a consensus round,
//!   whatever the skew between the groups' leaders' clocks.
//! * A replica restarts from its newest durable cut (a snapshot request of `g_all`, run with
//!   every worker at the barrier: a cut consistent across every group, the service and each
//!   group's client table, argued in `docs/psmr-snapshots.md`) and the groups' durable state
//!   after it ([`replica::Replica::recover_from`]), or from the groups' whole logs into an
//!   empty service ([`replica::Replica::recover`]). The groups take their own snapshots and
//!   truncate their logs; their streams keep the batches the durable cut lacks ([`stream`]),
//!   released once the runtime has written the cut ([`replica::Replica::cut_durable`]).
//!   `g_all`'s leader proposes a cut periodically ([`config::Config::cut_every_bytes`]).
//!   Each stream carries its durable cut with the service's state, so a replica behind a
//!   peer's truncation gets the cut with the peer's group snapshot (the log engine's chunked
//!   transfer) and installs it, all groups together ([`replica::Replica::install`]).
//! * A replica whose groups' stores were lost rejoins every group with the log engine's rejoin
//!   ([`replica::Replica::start_rejoin`]) and takes no command, merges and executes nothing,
//!   until every group is back (`docs/lost-disk.md`, "The psmr engine").
//! * The node runtime (`logless-node`'s `psmr_turn`, `psmr_loop`, `psmr_workers`) adds what
//!   the core leaves out: worker threads driving the plan, a reply cache that answers a
//!   retried command from what its execution replied (the groups' own client tables hold no
//!   replies; the engine's client tables, [`replica::Replica::answered`], serve a restart),
//!   and a limit on the commands delivered to a worker and not yet executed (it
//!   refuses new requests while [`plan::Plan::backlog`] is high).
#![deny(missing_docs)]
#![forbid(unsafe_code)]

pub mod config;
pub mod cut;
pub mod groups;
pub mod ids;
pub mod merge;
pub mod plan;
pub mod replica;
pub mod stream;
pub mod testing;
pub mod wire;
