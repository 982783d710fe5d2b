//! The log engine's turn logic without a runtime: what [`crate::log_loop`] runs on tokio, as
//! [`crate::turn`] is for the per-key engine.
//!
//! One [`LogCore`] holds the node's whole replica of the log ([`Replica`] over the
//! [`RegisterMachine`]) and its durable log ([`DurableLog`]). A turn takes everything that is
//! waiting (client operations, peer messages), ticks the replica, then commits the turn's
//! [`Ready`](logless_multipaxos::persist::Ready) once — records written, one flush — and only
//! then sends the released messages and answers the released replies (persist before send).
//!
//! # Clients of the log
//! The engine's client table keeps, per client, its last request number and reply, and a client
//! has one request outstanding at a time. A Redis connection pipelines, so the core does not
//! give each connection one client id: it keeps a pool of ids and lends one to each operation
//! in flight, numbering that id's requests upwards, and takes it back once the operation is
//! answered. The pool grows to the most operations ever in flight at once, so the client table
//! holds that many entries per incarnation. Ids are unique across restarts: node id (16 bits),
//! incarnation (24 bits) and the pool's counter (24 bits).
//!
//! An operation not answered within [`RETRY_MS`] is handed to the replica again with the same
//! id and number (it forwards it to the leader it knows now, which may have changed); the
//! client table makes a retry that was already executed answer from the table rather than run
//! twice. A follower forwards an operation to the leader it knows, and one forwarded to a
//! leader that has failed would wait for that timer; so as soon as a turn ends with the replica
//! in a view it was not in at the turn before (it learnt of a new leader, or became the
//! candidate itself), every operation in flight is handed to it again at once, the timer
//! restarting from there. A failover then takes the failure detector's time plus the view
//! change, not [`RETRY_MS`] more. One not answered within the request timeout is answered
//! "outcome unknown"; its id
//! goes back to the pool and its next number supersedes the unanswered one, which the replicas
//! then never execute once the later one was.
//!
//! A connection's pipelined operations reach the replica in the order sent and, forwarded over
//! one link, the leader in that order, so they are executed in it. A retry can change that: an
//! operation lost on its way to a failed leader and retried may execute after a later one of
//! the same pipeline that got through. Each operation is still linearizable (the client had not
//! seen either answer), but Redis's stronger promise of pipeline order is not kept then.
//!
//! # Recovery from peers (EpochSS)
//! Under `--recovery epoch` the core starts with [`LogCore::start_epoch`]: the durable log is
//! in memory and never written, and the replica's first ready writes the new epoch to the
//! epoch file before any message leaves. Every message carries its sender's epoch
//! ([`LogCore::receive_in_epochs`], [`LogCore::epoch`]). While the replica recovers its state
//! from its peers, client operations are refused at once with [`RECOVERING_ERROR`]; once the
//! replica knows that more replicas lost their state than the cluster can lose, with
//! [`STATE_LOST_ERROR`], for good: serving would serve a forgotten (empty) state.
//!
//! # A full disk
//! When the disk has no space for the turn's records ([`DurableLog::space_short`]: a new log
//! segment or snapshot file cannot be created), the commit fails and nothing of the turn
//! leaves: its messages are lost (as the network may lose them), its replies wait for the
//! retries below. The records stay in the durable log's backlog, so the replica's memory is
//! ahead of its disk by exactly them, and the replica is *paused* until they are durable:
//!
//! * it takes no message (each is dropped, as lost), is not ticked, and proposes, votes and
//!   promises nothing; a follower that cannot write its vote sends no Accept, and a leader that
//!   cannot write its own vote sends no Propose. For its peers it is a crashed replica, and a
//!   majority with space goes on without it (a paused leader is replaced after the suspect
//!   timeout);
//! * a new client operation is answered at once `MISCONF disk full: … for its log; not
//!   applied` ([`Failure::LogFull`]): it was never handed to the replica. Reads are refused
//!   too: every read is an entry of the log (see "Linearizability"), so a replica that cannot
//!   write its log cannot order one; clients read through the replicas with space;
//! * operations already in flight are not retried meanwhile; past their deadline they are
//!   answered "outcome unknown" (a forwarded one may have been decided by the others);
//! * every [`SPACE_PROBE_MS`] the backlog is written again. Once it is durable the replica goes
//!   on from where it paused, as after a long stall, and hands every operation in flight to
//!   itself again at once: those the others decided meanwhile are answered from the client
//!   table once it has caught up.
//!
//! Nothing acknowledged is lost: an answer, an Accept or a Propose leaves only after every
//! record before it is durable, as at every turn. A crash while paused loses the backlog, which
//! nothing that left depends on.
//!
//! # Snapshots off the loop
//! Under FullSS and mPaxos the node runs the engine with
//! [`Config::background_snapshots`](logless_multipaxos::config::Config::background_snapshots):
//! when a periodic snapshot is due, the turn only copies the state machine (a clone of the
//! register map, whose keys and values are shared buffers) and the client table. Once the
//! turn's records are durable, a thread encodes the copy, writes the snapshot file beside the
//! log (temporary file, `fsync`, rename, directory `fsync`:
//! [`write_snapshot_file`](logless_storage::segment_log::write_snapshot_file)) and reports
//! back; the first turn after that takes the file into the log and tells the replica
//! ([`Replica::snapshot_durable`]), which only then truncates its log, below the snapshot
//! before. One snapshot is in flight at a time (the engine takes no other meanwhile; its log
//! grows on). A crash before the rename leaves a temporary file the next open removes and the
//! previous snapshot with the whole log behind it; after it, the new snapshot and a log not yet
//! truncated: either replays to the same state. A lagging peer is served the newest durable
//! snapshot (the engine's), never one in flight. A snapshot the disk has no space for is
//! tried again [`SPACE_PROBE_MS`] later (the temporary file removed; the log goes on, not
//! truncated); any other error of its thread stops the replica, as the log's own errors do.
//! A log with no directory on the file system
//! (in memory, or a simulation's) writes the snapshot in the loop at the start of the next
//! turn, through the same steps.
//!
//! # Linearizability
//! Every operation, reads included, is a request in the log: it is answered once the replica
//! that took it has executed it in log order, and a request is executed only once its instance
//! is decided by a majority. An operation is thus executed at a point of the single log order
//! between its invocation (it entered the log after it was submitted) and its answer (it was
//! executed before it was answered), and every replica executes the same log: the history is
//! linearizable. No lease or read index is involved, so a deposed leader cannot answer a read
//! from a stale state: its own reads need a majority in the current view too.
//!
//! # WATCH
//! WATCH is an operation of the log too: executed at its place in the log order, it answers
//! each key's stamp there (when the key last changed, and whether it is live; see
//! `logless_multipaxos::kv::versions`), and the front end takes the connection's next request
//! only once it has the stamps, so the EXEC that carries them enters the log after the WATCH.
//! The map executes that EXEC's entry only if every watched key's stamp is still the same at
//! the EXEC's place in the log; else it changes nothing and answers a null array. Stamps are
//! replicated state (every replica derives them from the same log prefix, a snapshot carries
//! them), so every replica takes the same decision, whichever replica gave the stamps. A
//! committed transaction thus ran as if at the WATCH's point with nothing in between touching
//! what it watched: reads made between WATCH and MULTI (each its own log operation) still hold
//! when it executes, which is Redis's check-and-set. The check may abort spuriously, never
//! wrongly commit: a key's version only goes up, and the bounded version table reports a
//! forgotten key at a floor at least as high as anything it forgot.
use std::collections::BTreeMap;

use bytes::Bytes;
use hdrhistogram::Histogram;
use logless_multipaxos::config::{Config, Recovery};
use logless_multipaxos::ids::{Epoch, Instance, NodeId, View};
use logless_multipaxos::kv::{Operation, RegisterMachine, Response};
use logless_multipaxos::message::Message;
use logless_multipaxos::message::Snapshot;
use logless_multipaxos::persist::{Durable, LogStore, Record, SnapshotJob};
use logless_multipaxos::replica::{Replica, Status};
use logless_multipaxos::wire;
use logless_redis::session::Failure;
use logless_storage::{Dir, FsDir, StoreError};
use rustc_hash::FxHashMap;
use serde::{Deserialize, Serialize};
use tracing::{info, warn};

use crate::client_pool::{ClientPool, Due};
use crate::durable_log::DurableLog;
use crate::log_machine::{in_place_refusal, LogMachine};
use crate::turn::{ShardClock, ShardStatus};

/// What a client operation came to: the map's response, or why there is none.
pub type LogAnswer = Result<Response, Failure>;

pub use crate::client_pool::RETRY_MS;

/// A turn that holds the log's loop this long is logged (see `LogCore::note_slow_turn`).
pub const SLOW_TURN_MS: u64 = 100;

/// The tracing target of a start's timed steps (the log read and its parts, the snapshot
/// restored, the decided instances executed, the first vote, the first answer, a peer's
/// snapshot installed), each with the milliseconds since the process started: `logless
/// bench recovery` reads them from a restarted replica at `--log-level
/// warn,logless::restart=info` (docs/recovery.md, "Where an mPaxos restart spends its time").
pub const RESTART_TARGET: &str = "logless::restart";

/// How often a replica paused by a full disk tries to write its backlog again.
pub const SPACE_PROBE_MS: u64 = 1_000;

/// The most operations in flight at once; more are answered "overloaded" at once. Below the
/// 2^24 ids the pool can number per incarnation.
pub const IN_FLIGHT_MAX: usize = 1 << 20;

/// The answer to an operation while the replica recovers its state from its peers (EpochSS):
/// not applied, and served again once it caught up (Redis says LOADING while it loads its
/// dataset).
pub const RECOVERING_ERROR: &str = "LOADING this replica restarted under --recovery epoch and \
     is recovering its state from its peers; not applied, retry shortly";

/// What the commands a replica answers from its own copy (SCAN, KEYS, DBSIZE, ...) answer while
/// it resumed under mPaxos and rebuilds its state machine from the persistent snapshot, or
/// under mPaxosSM while its registers in place are being opened (operations through the log
/// are taken, and answered once it is rebuilt).
pub const REBUILDING_ERROR: &str = "LOADING this replica restarted under --recovery pmem or \
     pmem-sm and is rebuilding its state machine from persistent memory; retry shortly";

/// What the commands a replica answers from its own copy (SCAN, KEYS, DBSIZE, ...) answer while
/// it rejoins after a lost disk (operations through the log are answered "not applied").
pub const REJOINING_ERROR: &str = "TRYAGAIN this replica is rejoining after a lost disk and \
     has not caught up with its peers; not applied, retry shortly";

/// The answer to every operation once more replicas restarted under EpochSS than the cluster
/// can lose: the state lived in their memory only and is gone, so the cluster refuses service
/// rather than serve a forgotten state.
pub const STATE_LOST_ERROR: &str = "CLUSTERDOWN state lost: more replicas restarted under \
     --recovery epoch (EpochSS) than the cluster can lose, and the state they kept in memory is \
     gone; the cluster refuses service rather than serve a forgotten state. Restore the data \
     into a new cluster (docs/recovery.md); not applied";

/// Where a turn's outputs go.
pub trait LogOutlet<R> {
    /// Messages for `to`, in order (after the turn's flush).
    fn send(&mut self, to: NodeId, messages: Vec<Message>);
    /// The answer to the operation submitted with `reply`.
    fn answer(&mut self, reply: R, answer: LogAnswer);
    /// The monotonic clock now (µs, the origin of the turns' `mono_us`), for latencies.
    fn mono_us(&self) -> u64;
}

/// The log's figures, for INFO, `/metrics` and `/status`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LogStatus {
    /// The highest view this replica promised.
    pub view: u64,
    /// That view's leader.
    pub leader: u16,
    /// Whether this replica leads it (phase 1 done).
    pub is_leader: bool,
    /// The first instance still in the log.
    pub first_instance: u64,
    /// The highest instance the replica holds anything about (none: an empty log).
    pub last_instance: Option<u64>,
    /// The highest instance known decided (none: none yet).
    pub decided_instance: Option<u64>,
    /// The next instance to execute (every one below is executed).
    pub executed_below: u64,
    /// Keys in the map (expired ones not yet swept included).
    pub keys: u64,
    /// Keys that hold a value now (the map's less those expired by this replica's clock).
    pub live_keys: u64,
    /// View changes this replica started.
    pub view_changes: u64,
    /// Views it came to lead.
    pub views_led: u64,
    /// Batches it proposed (re-proposals and no-ops included).
    pub batches_proposed: u64,
    /// Requests its state machine executed.
    pub requests_executed: u64,
    /// Decided requests not executed again (the client table showed them executed).
    pub duplicates_skipped: u64,
    /// Snapshots it took.
    pub snapshots_taken: u64,
    /// Snapshots it installed from another replica (catching up past a truncation).
    pub snapshots_installed: u64,
    /// Catch-up queries it sent.
    pub catch_up_queries: u64,
    /// Operations answered with the map's response.
    pub answered: u64,
    /// Operations handed to the replica again after [`RETRY_MS`].
    pub retried: u64,
    /// Operations handed to the replica again because it moved to a new view.
    pub resent_on_view_change: u64,
    /// Operations answered "outcome unknown" after the request timeout.
    pub timed_out: u64,
    /// Operations refused because [`IN_FLIGHT_MAX`] were in flight.
    pub overloaded: u64,
    /// Operations in flight now.
    pub in_flight: u64,
    /// Turns whose records were flushed.
    pub flushes: u64,
    /// Whether the replica takes part in the protocol: `serving`, `recovering` (EpochSS: it
    /// recovers its state from its peers) or `state_lost` (EpochSS: more replicas lost their
    /// state than the cluster can lose; it refuses service).
    #[serde(default)]
    pub state: String,
    /// This replica's epoch (EpochSS; 0 under FullSS).
    #[serde(default)]
    pub epoch: u64,
    /// Recoveries from its peers it completed (EpochSS).
    #[serde(default)]
    pub recoveries: u64,
    /// Whether the replica is paused because its disk has no space for its log.
    #[serde(default)]
    pub space_short: bool,
    /// Operations refused because the disk had no space for the log.
    #[serde(default)]
    pub refused_for_space: u64,
    /// Whether the replica rejoins after a lost disk and has not recovered yet.
    #[serde(default)]
    pub rejoining: bool,
    /// Times the disk ran out of space for the log.
    #[serde(default)]
    pub space_shortages: u64,
    /// Turns of the log's loop that took [`SLOW_TURN_MS`] or more (the replica neither heard
    /// nor sent meanwhile).
    #[serde(default)]
    pub slow_turns: u64,
}

impl LogStatus {
    /// Whether the replica serves clients ([`LogStatus::state`] is `serving`; a status from a
    /// version without states always did).
    pub fn serves(&self) -> bool {
        self.refusal().is_none()
    }

    /// The error a replica that does not serve answers with: [`RECOVERING_ERROR`],
    /// [`REJOINING_ERROR`], [`STATE_LOST_ERROR`] or [`REBUILDING_ERROR`]. The commands it answers from its own copy (SCAN, KEYS, DBSIZE, ...)
    /// answer it too: that copy is empty or behind.
    pub fn refusal(&self) -> Option<&'static str> {
        match self.state.as_str() {
            "recovering" => Some(RECOVERING_ERROR),
            "rejoining" => Some(REJOINING_ERROR),
            "state_lost" => Some(STATE_LOST_ERROR),
            "rebuilding" => Some(REBUILDING_ERROR),
            _ => None,
        }
    }
}

/// An operation waiting for its answer: where the answer goes, and what the figures need.
struct Waiting<R> {
    reply: R,
    /// Its command's name, for the per-command figures.
    name: &'static str,
    /// When it was submitted (the turn's monotonic µs).
    started_us: u64,
}

/// The node's replica of the log, its durable log and the operations waiting for answers. `R`
/// is how an answer finds its client.
pub struct LogCore<R, D: Dir = FsDir> {
    me: NodeId,
    replica: Replica<LogMachine>,
    log: DurableLog<D>,
    clients: ClientPool<Waiting<R>>,
    clock: ShardClock,
    now_ms: u64,
    request_timeout_ms: u64,
    outgoing: BTreeMap<NodeId, Vec<Message>>,
    /// Answers given without the replica (overload, a full disk, a rejoin), delivered at the
    /// end of the turn, with their commands' names.
    refused: Vec<(R, &'static str, Failure)>,
    /// Operations refused because the replica does not serve (EpochSS), with their commands'
    /// names and the refusal, delivered at the end of the turn.
    not_serving: Vec<(R, &'static str, Response)>,
    /// Whether [`LogCore::start_rejoin`] was called: the replica's recovery is a rejoin after
    /// a lost disk, not EpochSS's.
    rejoin: bool,
    /// Injected bug for the simulations: catch-up answers carrying a snapshot are taken while
    /// the registers in place open (see [`LogCore::inject_snapshots_into_the_stand_in`]).
    #[cfg(any(test, feature = "fault-injection"))]
    snapshots_into_the_stand_in: bool,
    /// The turn's monotonic clock at its start (µs).
    turn_mono_us: u64,
    /// Operations answered, by command name and outcome (`ok`, `unknown`, `overloaded`,
    /// `refused` while not serving).
    commands: FxHashMap<(&'static str, &'static str), u64>,
    /// Their latency in µs, by command name.
    latency_us: FxHashMap<&'static str, Histogram<u64>>,
    /// The replica's view at the end of the last turn (a new one re-sends what is in flight).
    view_seen: View,
    answered: u64,
    retried: u64,
    resent_on_view_change: u64,
    timed_out: u64,
    overloaded: u64,
    flushes: u64,
    /// While the disk has no space for the log: when to write the backlog again.
    next_space_probe_ms: Option<u64>,
    refused_for_space: u64,
    space_shortages: u64,
    /// Turns that took [`SLOW_TURN_MS`] or more.
    slow_turns: u64,
    /// A snapshot to start once the turn's records are durable (kept while the disk is short
    /// of space).
    snapshot_job: Option<SnapshotJob>,
    /// The snapshot being written off the loop, at most one (see "Snapshots off the loop").
    snapshot_work: Option<SnapshotWork>,
    /// After a snapshot refused for want of space: not started again before then (ms).
    snapshot_retry_ms: u64,
    /// The start lines this process has logged: its first vote, its first answer to a
    /// client, and the peers' snapshots it has installed so far (see [`RESTART_TARGET`]).
    first_vote_logged: bool,
    first_answer_logged: bool,
    installs_logged: u64,
}

/// A snapshot on its way to durability, off the loop.
enum SnapshotWork {
    /// On its thread, writing into the log's directory; the outcome comes on the channel.
    Thread {
        done: std::sync::mpsc::Receiver<Result<Written, (StoreError, SnapshotJob)>>,
        copy_us: u64,
    },
    /// For a log without a directory on the file system: written at the next turn's start.
    Inline(SnapshotJob),
}

/// A snapshot written durably beside the log, and what it took.
struct Written {
    snapshot: Snapshot,
    encode_us: u64,
    write_us: u64,
}

impl<R, D: Dir> LogCore<R, D> {
    /// Restarts the replica of `config` from `durable` (what `log` held at open): under FullSS
    /// executing the log again over `machine`; under mPaxos resuming it without executing
    /// ([`Replica::resume`]): it takes part at once, and executes nothing until
    /// [`LogCore::finish_rebuild`] hands it the state machine restored from
    /// [`LogCore::rebuild_from`]. Under mPaxosSM `machine` holds its registers in place as
    /// opened ([`LogMachine::open_in_place`]) and is handed over at once: the decided instances
    /// after the registers' "applied up to" are executed before the first turn, and the
    /// replica votes and serves from there; or `machine` is the stand-in
    /// [`LogMachine::awaiting_registers`] while they are opened off the loop: the replica votes
    /// at once, as under mPaxos, and executes and serves once [`LogCore::finish_rebuild`]
    /// hands it the opened machine (see docs/recovery.md). `incarnation` makes this run's client ids new;
    /// operations unanswered after `request_timeout_ms` are answered "outcome unknown".
    #[allow(clippy::too_many_arguments)]
    pub fn recover(
        config: Config,
        machine: impl Into<LogMachine>,
        durable: &Durable,
        log: DurableLog<D>,
        incarnation: u32,
        request_timeout_ms: u64,
        wall_ms: u64,
        mono_us: u64,
    ) -> LogCore<R, D> {
        let machine = machine.into();
        let start = |now_ms| match config.recovery {
            Recovery::Pmem if machine.is_awaiting_registers() => {
                Replica::resume(config, machine, durable, now_ms)
            }
            Recovery::Pmem if machine.in_place() => {
                let stand_in = LogMachine::from(RegisterMachine::default());
                let mut replica = Replica::resume(config, stand_in, durable, now_ms);
                replica.finish_rebuild(machine, now_ms);
                replica
            }
            Recovery::Pmem => Replica::resume(config, machine, durable, now_ms),
            _ => Replica::recover(config, machine, durable, now_ms),
        };
        LogCore::around(
            start,
            log,
            incarnation,
            request_timeout_ms,
            wall_ms,
            mono_us,
        )
    }

    /// Starts the replica of `config` under EpochSS (`config.recovery` must say so) in the epoch
    /// after `last`, the one `log`'s epoch file held (`None`: the first start here, which
    /// serves at once; after a restart the replica recovers its state from its peers first).
    /// The new epoch is written by the first turn, before anything is sent. The other
    /// arguments are [`LogCore::recover`]'s.
    #[allow(clippy::too_many_arguments)]
    pub fn start_epoch(
        config: Config,
        machine: RegisterMachine,
        last: Option<Epoch>,
        log: DurableLog<D>,
        incarnation: u32,
        request_timeout_ms: u64,
        wall_ms: u64,
        mono_us: u64,
    ) -> LogCore<R, D> {
        let machine = LogMachine::from(machine);
        let start = |now_ms| Replica::start_epoch(config, machine, last, now_ms);
        LogCore::around(
            start,
            log,
            incarnation,
            request_timeout_ms,
            wall_ms,
            mono_us,
        )
    }

    /// The encoded state a resumed replica's state machine must be restored from (`None`: no
    /// snapshot, it starts empty; or not resuming).
    pub fn rebuild_from(&self) -> Option<Bytes> {
        self.replica.rebuild_from().map(|s| s.state.clone())
    }

    /// Hands a resumed replica its rebuilt state machine ([`Replica::finish_rebuild`]): the
    /// decided instances after the snapshot are executed in this turn. Under mPaxosSM,
    /// `machine` is the one opened over the registers in place ([`LogMachine::open_file`]),
    /// which takes the place of the stand-in [`LogMachine::awaiting_registers`]: the
    /// decided instances after the registers' "applied up to" are executed, and written in
    /// place before the turn's records are committed.
    pub fn finish_rebuild(&mut self, machine: impl Into<LogMachine>) {
        let machine = machine.into();
        // Nothing but this hand-over ends the rebuild of a replica whose registers were being
        // opened: it installs no snapshot meanwhile (`take_messages`) and does not rejoin.
        debug_assert!(
            !self.replica.state_machine().is_awaiting_registers()
                || self.replica.status() == Status::Rebuilding,
            "the rebuild ended before the registers were handed over"
        );
        self.replica.finish_rebuild(machine, self.now_ms);
    }

    /// Whether the replica waits for its registers in place to be opened (mPaxosSM, see
    /// [`LogMachine::awaiting_registers`]): it votes, and executes nothing yet.
    pub fn awaiting_registers(&self) -> bool {
        self.replica.state_machine().is_awaiting_registers()
    }

    /// Injects the deliberate bug "snapshots into the stand-in": catch-up answers carrying a
    /// snapshot are taken while the registers in place open, so the snapshot is installed
    /// into the stand-in, the install ends the rebuild and the opened registers are never
    /// handed over (for the simulations that must catch it).
    #[cfg(any(test, feature = "fault-injection"))]
    pub fn inject_snapshots_into_the_stand_in(&mut self) {
        self.snapshots_into_the_stand_in = true;
    }

    /// Whether catch-up answers carrying a snapshot are dropped now (see `take_messages`).
    fn drops_snapshots(&self) -> bool {
        #[cfg(any(test, feature = "fault-injection"))]
        if self.snapshots_into_the_stand_in {
            return false;
        }
        self.awaiting_registers()
    }

    /// The core around the replica `start` makes at the first clock reading.
    fn around(
        start: impl FnOnce(u64) -> Replica<LogMachine>,
        log: DurableLog<D>,
        incarnation: u32,
        request_timeout_ms: u64,
        wall_ms: u64,
        mono_us: u64,
    ) -> LogCore<R, D> {
        let mut clock = ShardClock::default();
        let now_ms = clock.read(wall_ms, mono_us);
        let replica = start(now_ms);
        let me = replica.me();
        LogCore {
            me,
            view_seen: replica.view(),
            replica,
            log,
            clients: ClientPool::new(me.0, incarnation),
            clock,
            now_ms,
            request_timeout_ms,
            outgoing: BTreeMap::new(),
            refused: Vec::new(),
            not_serving: Vec::new(),
            rejoin: false,
            #[cfg(any(test, feature = "fault-injection"))]
            snapshots_into_the_stand_in: false,
            turn_mono_us: mono_us,
            commands: FxHashMap::default(),
            latency_us: FxHashMap::default(),
            answered: 0,
            retried: 0,
            resent_on_view_change: 0,
            timed_out: 0,
            overloaded: 0,
            flushes: 0,
            next_space_probe_ms: None,
            refused_for_space: 0,
            space_shortages: 0,
            slow_turns: 0,
            snapshot_job: None,
            snapshot_work: None,
            snapshot_retry_ms: 0,
            first_vote_logged: false,
            first_answer_logged: false,
            installs_logged: 0,
        }
    }

    /// Starts a turn at wall-clock `wall_ms` and monotonic `mono_us`.
    pub fn start_turn(&mut self, wall_ms: u64, mono_us: u64) {
        self.now_ms = self.clock.read(wall_ms, mono_us);
        self.turn_mono_us = mono_us;
    }

    /// The turn's clock (ms).
    pub fn now_ms(&self) -> u64 {
        self.now_ms
    }

    /// The replica (for figures and tests).
    pub fn replica(&self) -> &Replica<LogMachine> {
        &self.replica
    }

    /// The state machine (for tests and simulations, which crash its registers' medium).
    pub fn state_machine_mut(&mut self) -> &mut LogMachine {
        self.replica.state_machine_mut()
    }

    /// The durable log (for simulations, which crash its directory).
    pub fn log(&self) -> &DurableLog<D> {
        &self.log
    }

    /// The durable log, to arm its directory's crash points (for simulations).
    pub fn log_mut(&mut self) -> &mut DurableLog<D> {
        &mut self.log
    }

    /// Makes the replica rejoin after a lost disk ([`Replica::start_rejoin`], in attempt
    /// `incarnation`): until it has recovered, operations are answered "not applied" at once.
    ///
    /// # Panics
    /// While the registers in place are being opened ([`LogCore::awaiting_registers`]): the
    /// rejoin would catch up on the stand-in. A rejoining node opens them first.
    pub fn start_rejoin(&mut self, incarnation: u32) {
        assert!(
            !self.awaiting_registers(),
            "a rejoin while the registers in place are being opened"
        );
        self.rejoin = true;
        self.replica
            .start_rejoin(self.now_ms, Epoch(u64::from(incarnation)));
    }

    /// Whether the replica is rejoining after a lost disk and has not recovered yet.
    pub fn rejoining(&self) -> bool {
        self.rejoin && self.replica.status() != Status::Serving
    }

    /// Takes a client operation; its answer goes to `reply`.
    pub fn submit(&mut self, operation: &Operation, reply: R) {
        let name = operation.name();
        if self.rejoining() {
            self.refused.push((reply, name, Failure::NotApplied));
            return;
        }
        if let Some(refusal) = refusal(self.replica.status()) {
            self.not_serving
                .push((reply, name, Response::error(refusal.to_owned())));
            return;
        }
        if self.replica.state_machine().in_place() {
            if let Some(refusal) = in_place_refusal(operation) {
                self.not_serving
                    .push((reply, name, Response::error(refusal)));
                return;
            }
        }
        if self.next_space_probe_ms.is_some() {
            self.refused_for_space += 1;
            self.refused.push((reply, name, Failure::LogFull));
            return;
        }
        if self.clients.in_flight() >= IN_FLIGHT_MAX {
            self.overloaded += 1;
            self.refused.push((reply, name, Failure::Overloaded));
            return;
        }
        let payload = operation.encode();
        let waiting = Waiting {
            reply,
            name,
            started_us: self.turn_mono_us,
        };
        let request = self
            .clients
            .lend(payload, waiting, self.now_ms, self.request_timeout_ms);
        self.replica.handle_request(self.now_ms, request);
    }

    /// Takes protocol messages from `from`, in the order sent, all in epoch 0 (FullSS and
    /// mPaxos): [`LogCore::receive_in_epochs`].
    pub fn receive(&mut self, from: NodeId, messages: Vec<Message>) {
        self.take_messages(from, messages.into_iter().map(|m| (Epoch(0), m)));
    }

    /// Takes protocol messages from `from`, in the order sent, each with the epoch its sender
    /// sent it in (EpochSS; 0 under FullSS and mPaxos). The node's loop takes every message
    /// here, in every mode; while the replica is paused by a full disk they are dropped, as
    /// lost (see "A full disk").
    pub fn receive_in_epochs(&mut self, from: NodeId, messages: Vec<(Epoch, Message)>) {
        self.take_messages(from, messages);
    }

    /// The one way in for protocol messages: dropped while paused by a full disk.
    fn take_messages(
        &mut self,
        from: NodeId,
        messages: impl IntoIterator<Item = (Epoch, Message)>,
    ) {
        if self.next_space_probe_ms.is_some() {
            return;
        }
        let drops_snapshots = self.drops_snapshots();
        for (epoch, message) in messages {
            if drops_snapshots
                && matches!(
                    message,
                    Message::CatchUpResponse {
                        snapshot: Some(_),
                        ..
                    }
                )
            {
                // A snapshot installed now would go to the stand-in, never to the registers
                // being opened: dropped, as lost; the catch-up asks again after its timeout,
                // and the snapshot is installed once the registers are there.
                continue;
            }
            self.replica
                .handle_epoch_message(self.now_ms, from, epoch, message);
        }
    }

    /// This replica's epoch, which every message it sends carries (EpochSS; 0 under FullSS).
    pub fn epoch(&self) -> Epoch {
        self.replica.epoch()
    }

    /// Ends the turn: ticks the replica, retries or gives up on late operations, then writes
    /// and flushes the turn's records, and only then sends and answers through `outlet`. A
    /// full disk pauses the replica (see "A full disk"); any other error means the log failed:
    /// the replica must stop (fail-stop).
    pub fn finish_turn(&mut self, outlet: &mut impl LogOutlet<R>) -> Result<(), StoreError> {
        if self.next_space_probe_ms.is_some() {
            return self.finish_paused_turn(outlet);
        }
        let now_ms = self.now_ms;
        self.poll_snapshot(false)?;
        self.replica.tick(now_ms);
        self.retry_late(outlet, true);
        self.resend_on_view_change();
        // The registers in place first: durable before anything the engine persists or sends
        // after executing them (a snapshot, a decision).
        let executed_below = self.replica.executed_below();
        self.replica
            .state_machine_mut()
            .finish_turn(executed_below)?;
        let mut ready = self.replica.take_ready();
        if let Some(job) = ready.take_snapshot_job() {
            debug_assert!(self.snapshot_job.is_none(), "one snapshot in flight");
            self.snapshot_job = Some(job);
        }
        if !ready.records().is_empty() {
            self.flushes += 1;
        }
        let snapshot_bytes: usize = ready
            .records()
            .iter()
            .map(|r| match r {
                Record::Snapshot(s) => s.state.len(),
                _ => 0,
            })
            .sum();
        let votes = !self.first_vote_logged
            && ready
                .records()
                .iter()
                .any(|r| matches!(r, Record::Accepted { .. }));
        let commit_started_us = outlet.mono_us();
        let bug = self.replica.config().bugs.release_while_space_short;
        let spare = bug.then(|| ready.clone());
        let released = match ready.commit(&mut self.log) {
            Ok(released) => released,
            Err(e) if e.is_no_space() => {
                self.space_shortages += 1;
                // The deliberate bug: the refusal is ignored, what the records were to cover
                // leaves, and the replica goes on.
                if let Some(spare) = spare {
                    spare.release_unwritten()
                } else {
                    self.next_space_probe_ms = Some(now_ms + SPACE_PROBE_MS);
                    warn!(
                        error = %e,
                        "the disk has no space for the log: this replica pauses (votes for \
                         nothing, refuses new commands) until space returns"
                    );
                    self.answer_refused(outlet);
                    return Ok(());
                }
            }
            Err(e) => return Err(e),
        };
        // A snapshot installed in the turn is durable in the log now: written over the
        // registers in place.
        self.replica
            .state_machine_mut()
            .finish_install(executed_below)?;
        // The snapshot's instances are durable: it may be written now.
        self.start_snapshot()?;
        self.note_slow_turn(outlet.mono_us(), commit_started_us, snapshot_bytes);
        self.note_start_lines(outlet.mono_us(), votes);
        for envelope in released.messages {
            if envelope.to != self.me {
                self.outgoing
                    .entry(envelope.to)
                    .or_default()
                    .push(envelope.message);
            }
        }
        for (to, messages) in &mut self.outgoing {
            if !messages.is_empty() {
                outlet.send(*to, std::mem::take(messages));
            }
        }
        let answered_us = outlet.mono_us();
        for reply in released.replies {
            let Some(waiting) = self.clients.settle(reply.client, reply.seq) else {
                continue;
            };
            self.answered += 1;
            if !self.first_answer_logged {
                self.first_answer_logged = true;
                info!(
                    target: RESTART_TARGET,
                    since_start_ms = answered_us / 1_000,
                    "answered the first client operation since the start"
                );
            }
            let micros = answered_us.saturating_sub(waiting.started_us);
            self.count(waiting.name, "ok", micros);
            outlet.answer(waiting.reply, Ok(decoded(&reply.reply)));
        }
        self.answer_refused(outlet);
        Ok(())
    }

    /// A turn while paused by a full disk: answers the operations refused and those past
    /// their deadline, and once a probe is due writes the backlog again; when it is durable,
    /// the replica goes on and hands every operation in flight to itself again.
    fn finish_paused_turn(&mut self, outlet: &mut impl LogOutlet<R>) -> Result<(), StoreError> {
        self.retry_late(outlet, false);
        self.answer_refused(outlet);
        let now_ms = self.now_ms;
        if self.next_space_probe_ms.is_some_and(|probe| now_ms < probe) {
            return Ok(());
        }
        match self.log.flush() {
            Ok(()) => {
                self.next_space_probe_ms = None;
                info!("the disk has space for the log again: this replica goes on");
                let executed_below = self.replica.executed_below();
                self.replica
                    .state_machine_mut()
                    .finish_install(executed_below)?;
                for request in self.clients.resend_all(now_ms) {
                    self.replica.handle_request(now_ms, request);
                }
                self.start_snapshot()
            }
            Err(e) if e.is_no_space() => {
                self.next_space_probe_ms = Some(now_ms + SPACE_PROBE_MS);
                Ok(())
            }
            Err(e) => Err(e),
        }
    }

    /// Starts the snapshot the engine asked for, if any, now that the records before it are
    /// durable: on a thread writing into the log's directory, or (no such directory) at the
    /// next turn's start.
    fn start_snapshot(&mut self) -> Result<(), StoreError> {
        if self.now_ms < self.snapshot_retry_ms {
            return Ok(());
        }
        let Some(job) = self.snapshot_job.take() else {
            return Ok(());
        };
        debug_assert!(self.snapshot_work.is_none(), "one snapshot in flight");
        let Some((path, persist)) = self.log.fs_path() else {
            self.snapshot_work = Some(SnapshotWork::Inline(job));
            return Ok(());
        };
        let copy_us = self.replica.state_machine().last_copy_us();
        let (tx, done) = std::sync::mpsc::channel();
        std::thread::Builder::new()
            .name("log-snapshot".into())
            .spawn(move || {
                let started = std::time::Instant::now();
                let snapshot = job.encode();
                let mut bytes = Vec::new();
                wire::encode_record(&Record::Snapshot(snapshot.clone()), &mut bytes);
                let encode_us = started.elapsed().as_micros() as u64;
                let written = logless_storage::segment_log::write_snapshot_file(
                    &path,
                    snapshot.next_instance.0,
                    &bytes,
                    persist,
                )
                .map(|()| Written {
                    snapshot,
                    encode_us,
                    write_us: started.elapsed().as_micros() as u64 - encode_us,
                })
                .map_err(|e| (e, job));
                // The loop may be gone (stopped): the file is then found at the next open.
                let _ = tx.send(written);
            })
            .map_err(StoreError::io("start the snapshot's thread"))?;
        self.snapshot_work = Some(SnapshotWork::Thread { done, copy_us });
        Ok(())
    }

    /// Takes in the snapshot written off the loop if it is durable (with `wait`, once it is)
    /// and tells the replica, which truncates its log behind it in this turn's records.
    fn poll_snapshot(&mut self, wait: bool) -> Result<(), StoreError> {
        let Some(work) = self.snapshot_work.take() else {
            return Ok(());
        };
        let written = match work {
            SnapshotWork::Inline(job) => {
                let snapshot = job.encode();
                self.log.write(&Record::Snapshot(snapshot.clone()))?;
                self.log.flush()?;
                Written {
                    snapshot,
                    encode_us: 0,
                    write_us: 0,
                }
            }
            SnapshotWork::Thread { done, copy_us } => {
                let outcome = if wait {
                    done.recv().ok()
                } else {
                    match done.try_recv() {
                        Ok(outcome) => Some(outcome),
                        Err(std::sync::mpsc::TryRecvError::Empty) => {
                            self.snapshot_work = Some(SnapshotWork::Thread { done, copy_us });
                            return Ok(());
                        }
                        Err(std::sync::mpsc::TryRecvError::Disconnected) => None,
                    }
                };
                let Some(outcome) = outcome else {
                    return Err(StoreError::io("write a snapshot")(std::io::Error::other(
                        "the snapshot's thread stopped before it finished",
                    )));
                };
                let written = match outcome {
                    Ok(written) => written,
                    Err((e, job)) if e.is_no_space() => {
                        // The log goes on untruncated; the snapshot is tried again later, as
                        // the log's own writes are (see "A full disk").
                        warn!(error = %e, "no space for a snapshot beside the log: tried again in a while");
                        self.snapshot_job = Some(job);
                        self.snapshot_retry_ms = self.now_ms + SPACE_PROBE_MS;
                        return Ok(());
                    }
                    Err((e, _)) => return Err(e),
                };
                self.log.adopt_snapshot(written.snapshot.next_instance)?;
                info!(
                    next_instance = written.snapshot.next_instance.0,
                    state_bytes = written.snapshot.state.len(),
                    copy_ms_in_loop = copy_us as f64 / 1_000.0,
                    encode_ms = written.encode_us / 1_000,
                    write_ms = written.write_us / 1_000,
                    "wrote a snapshot off the log's loop"
                );
                written
            }
        };
        self.replica.snapshot_durable(written.snapshot);
        Ok(())
    }

    /// Waits for the snapshot being written off the loop, if any, and takes it in (at a stop).
    pub fn finish_snapshot(&mut self) -> Result<(), StoreError> {
        self.poll_snapshot(true)
    }

    /// Whether a snapshot is being written off the loop (for tests).
    pub fn snapshot_in_flight(&self) -> bool {
        self.snapshot_work.is_some() || self.snapshot_job.is_some()
    }

    /// Logs a turn that held the loop for [`SLOW_TURN_MS`] or more (from its start to the end
    /// of its commit at `now_us`): while it runs the replica neither hears nor heartbeats, so
    /// its peers may suspect it.
    fn note_slow_turn(&mut self, now_us: u64, commit_started_us: u64, snapshot_bytes: usize) {
        let turn_us = now_us.saturating_sub(self.turn_mono_us);
        if turn_us < SLOW_TURN_MS * 1_000 {
            return;
        }
        self.slow_turns += 1;
        warn!(
            turn_ms = turn_us / 1_000,
            commit_ms = now_us.saturating_sub(commit_started_us) / 1_000,
            snapshot_bytes,
            view = self.replica.view().0,
            leads = self.replica.is_leader(),
            "a slow turn of the log's loop"
        );
    }

    /// Logs this process's first vote (`votes`: the turn just committed wrote its first
    /// Accepted record) and each snapshot installed from a peer, at `now_us` since the start:
    /// a restart's start lines ([`RESTART_TARGET`]).
    fn note_start_lines(&mut self, now_us: u64, votes: bool) {
        if votes {
            self.first_vote_logged = true;
            info!(
                target: RESTART_TARGET,
                since_start_ms = now_us / 1_000,
                "voted for the first time since the start"
            );
        }
        let installed = self.replica.stats().snapshots_installed;
        if installed > self.installs_logged {
            self.installs_logged = installed;
            let snapshot = self.replica.snapshot();
            info!(
                target: RESTART_TARGET,
                since_start_ms = now_us / 1_000,
                next_instance = snapshot.map_or(0, |s| s.next_instance.0),
                state_bytes = snapshot.map_or(0, |s| s.state.len()),
                installed,
                "installed a snapshot from a peer"
            );
        }
    }

    /// Answers the operations refused without the replica.
    fn answer_refused(&mut self, outlet: &mut impl LogOutlet<R>) {
        for (reply, name, failure) in std::mem::take(&mut self.refused) {
            let outcome = match failure {
                Failure::LogFull => "disk_full",
                Failure::NotApplied => "not_applied",
                _ => "overloaded",
            };
            self.count(name, outcome, 0);
            outlet.answer(reply, Err(failure));
        }
        for (reply, name, refusal) in std::mem::take(&mut self.not_serving) {
            self.count(name, "refused", 0);
            outlet.answer(reply, Ok(refusal));
        }
    }

    /// Counts an answer to a `name` command with `outcome`, `micros` after it was submitted.
    fn count(&mut self, name: &'static str, outcome: &'static str, micros: u64) {
        *self.commands.entry((name, outcome)).or_default() += 1;
        self.latency_us
            .entry(name)
            .or_insert_with(|| Histogram::new(3).expect("valid histogram"))
            .saturating_record(micros.max(1));
    }

    /// Hands every operation in flight to the replica again if it is in a view it was not in
    /// at the end of the last turn: one a follower forwarded to the leader of the old view may
    /// be lost with it, and the replica sends it to the new view's leader (or proposes it, if
    /// that is itself). Their retry timers start again from now.
    fn resend_on_view_change(&mut self) {
        let view = self.replica.view();
        if view == self.view_seen {
            return;
        }
        info!(
            from = self.view_seen.0,
            view = view.0,
            leader = self.replica.leader().0,
            candidate = self.replica.is_candidate(),
            executed_below = self.replica.executed_below().0,
            "the log moved to a new view"
        );
        self.view_seen = view;
        for request in self.clients.resend_all(self.now_ms) {
            self.replica.handle_request(self.now_ms, request);
            self.resent_on_view_change += 1;
        }
    }

    /// Hands the operations due for a retry to the replica again (if `retry`; not while it is
    /// paused), and answers those past their deadline "outcome unknown".
    fn retry_late(&mut self, outlet: &mut impl LogOutlet<R>, retry: bool) {
        for due in self.clients.take_due(self.now_ms) {
            match due {
                Due::Retry(request) => {
                    if retry {
                        self.retried += 1;
                        self.replica.handle_request(self.now_ms, request);
                    }
                }
                Due::TimedOut(waiting) => {
                    self.timed_out += 1;
                    let micros = self.turn_mono_us.saturating_sub(waiting.started_us);
                    self.count(waiting.name, "unknown", micros);
                    outlet.answer(waiting.reply, Err(Failure::OutcomeUnknown));
                }
            }
        }
    }

    /// A page of the keys of this replica's copy that hold a value now, from `cursor` (a
    /// position in key order; 0 starts), with their types, and the next cursor (0 at the
    /// end). The copy is this replica's executed prefix, so it may lag the leader's.
    pub fn scan_live(&self, cursor: u64, count: usize) -> (u64, Vec<(Bytes, &'static str)>) {
        let map = self.replica.state_machine().map();
        let now_ms = self.replica.state_machine().now_ms();
        let start = usize::try_from(cursor).unwrap_or(usize::MAX);
        let mut keys = Vec::new();
        let mut visited = 0;
        for (key, register) in map.iter().skip(start).take(count.max(1)) {
            visited += 1;
            if register.is_live(now_ms) {
                keys.push((key.clone(), register.data.type_name()));
            }
        }
        let next = start + visited;
        let next = if visited == 0 || next >= map.len() {
            0
        } else {
            next as u64
        };
        (next, keys)
    }

    /// The node's figures as the per-key engine's shards report theirs: the keys, the
    /// per-command counts and latencies, and the log's own ([`LogCore::status`]).
    pub fn figures(&self) -> ShardStatus {
        let status = self.status();
        ShardStatus {
            registers: status.keys,
            live_registers: status.live_keys,
            commands: self.commands.clone(),
            latency_us: self.latency_us.clone(),
            flushes: status.flushes,
            log: Some(status),
            ..ShardStatus::default()
        }
    }

    /// The log's figures now.
    pub fn status(&self) -> LogStatus {
        let replica = &self.replica;
        let machine = replica.state_machine();
        let stats = replica.stats();
        let executed_below = replica.executed_below();
        let last_instance = replica.last_instance();
        let decided_instance = last_instance
            .and_then(|last| {
                (executed_below.0..=last.0)
                    .rev()
                    .find(|&i| replica.decided(Instance(i)).is_some())
            })
            .or_else(|| executed_below.0.checked_sub(1));
        LogStatus {
            view: replica.view().0,
            leader: replica.leader().0,
            is_leader: replica.is_leader(),
            first_instance: replica.log_start().0,
            last_instance: last_instance.map(|i| i.0),
            decided_instance,
            executed_below: executed_below.0,
            keys: machine.map().len() as u64,
            live_keys: machine.live_keys(self.now_ms) as u64,
            view_changes: stats.view_changes_started,
            views_led: stats.views_led,
            batches_proposed: stats.batches_proposed,
            requests_executed: stats.requests_executed,
            duplicates_skipped: stats.duplicates_skipped,
            snapshots_taken: stats.snapshots_taken,
            snapshots_installed: stats.snapshots_installed,
            catch_up_queries: stats.catch_up_queries,
            answered: self.answered,
            retried: self.retried,
            resent_on_view_change: self.resent_on_view_change,
            timed_out: self.timed_out,
            overloaded: self.overloaded,
            in_flight: self.clients.in_flight() as u64,
            flushes: self.flushes,
            state: if self.rejoining() {
                "rejoining".to_owned()
            } else {
                state_name(replica.status()).to_owned()
            },
            epoch: replica.epoch().0,
            recoveries: stats.recoveries,
            space_short: self.next_space_probe_ms.is_some(),
            refused_for_space: self.refused_for_space,
            space_shortages: self.space_shortages,
            rejoining: self.rejoining(),
            slow_turns: self.slow_turns,
        }
    }

    /// The view this replica promised (for tests).
    pub fn view(&self) -> View {
        self.replica.view()
    }
}

/// Why a replica in `status` refuses client operations, if it does.
fn refusal(status: Status) -> Option<&'static str> {
    match status {
        // Operations go through the log and are answered once the machine is rebuilt.
        Status::Serving | Status::Rebuilding => None,
        Status::Recovering => Some(RECOVERING_ERROR),
        Status::StateLost => Some(STATE_LOST_ERROR),
    }
}

/// `status` as [`LogStatus::state`] names it.
fn state_name(status: Status) -> &'static str {
    match status {
        Status::Serving => "serving",
        Status::Recovering => "recovering",
        Status::StateLost => "state_lost",
        Status::Rebuilding => "rebuilding",
    }
}

/// The map's response in a reply; one that does not decode (never, between replicas of one
/// version) is answered as an error rather than dropped.
fn decoded(reply: &Bytes) -> Response {
    Response::decode(reply)
        .unwrap_or_else(|e| Response::error(format!("ERR the log's reply does not decode: {e}")))
}

#[cfg(test)]
mod tests {
    use logless_multipaxos::kv::Command;
    use logless_multipaxos::message::Request;
    use logless_storage::{Durability, SegmentLogOptions, SimDir};

    use super::*;

    #[derive(Default)]
    struct Collected {
        sent: Vec<(NodeId, Vec<Message>)>,
        answers: Vec<(u32, LogAnswer)>,
    }

    impl LogOutlet<u32> for Collected {
        fn send(&mut self, to: NodeId, messages: Vec<Message>) {
            self.sent.push((to, messages));
        }

        fn answer(&mut self, reply: u32, answer: LogAnswer) {
            self.answers.push((reply, answer));
        }

        fn mono_us(&self) -> u64 {
            0
        }
    }

    /// A core over `opened` with the registers' machine, started at wall time 1,000,000 ms in
    /// start number `incarnation`, its requests timing out after `request_timeout_ms`.
    fn core_over<D: Dir>(
        config: Config,
        opened: crate::durable_log::OpenedLog<D>,
        incarnation: u32,
        request_timeout_ms: u64,
    ) -> LogCore<u32, D> {
        LogCore::recover(
            config,
            RegisterMachine::default(),
            &opened.durable,
            opened.log,
            incarnation,
            request_timeout_ms,
            1_000_000,
            0,
        )
    }

    fn single_replica_core() -> LogCore<u32, SimDir> {
        let opened =
            DurableLog::open_on(SimDir::new(), SegmentLogOptions::new(Durability::Sync)).unwrap();
        let config = Config::new(vec![NodeId(1)], NodeId(1));
        core_over(config, opened, 3, 1_000)
    }

    fn incr(key: &str) -> Operation {
        Operation::Command {
            key: Bytes::from(key.to_owned()),
            command: Command::IncrBy(1),
        }
    }

    /// Runs turns, 5 ms apart, until `done` or a simulated second passed.
    fn run_until(
        core: &mut LogCore<u32, SimDir>,
        out: &mut Collected,
        done: impl Fn(&Collected) -> bool,
    ) {
        for step in 0..200u64 {
            core.start_turn(1_000_000 + step * 5, step * 5_000);
            core.finish_turn(out).unwrap();
            if done(out) {
                return;
            }
        }
        panic!("no answer in time");
    }

    #[test]
    fn operations_are_answered_after_execution_in_submission_order() {
        let mut core = single_replica_core();
        let mut out = Collected::default();
        for reply in 0..3 {
            core.submit(&incr("k"), reply);
        }
        run_until(&mut core, &mut out, |o| o.answers.len() == 3);
        let mut answers = out.answers.clone();
        answers.sort_by_key(|(reply, _)| *reply);
        let values: Vec<_> = answers.into_iter().map(|(_, a)| a.unwrap()).collect();
        assert_eq!(
            values,
            [Response::Int(1), Response::Int(2), Response::Int(3)]
        );
        assert_eq!(core.status().answered, 3);
        assert!(core.status().is_leader);
    }

    #[test]
    fn answers_are_counted_by_command_and_expired_keys_are_not_live() {
        use logless_commands::command::{Condition, Expiry, SetArgs};
        let mut core = single_replica_core();
        let mut out = Collected::default();
        core.submit(&incr("k"), 0);
        core.submit(&incr("k"), 1);
        let set_px = Operation::Command {
            key: Bytes::from_static(b"short"),
            command: Command::Set(SetArgs {
                value: Bytes::from_static(b"v"),
                condition: Condition::Always,
                get: false,
                expiry: Expiry::AfterMs(20),
            }),
        };
        core.submit(&set_px, 2);
        run_until(&mut core, &mut out, |o| o.answers.len() == 3);
        let figures = core.figures();
        assert_eq!(figures.commands.get(&("incrby", "ok")), Some(&2));
        assert_eq!(figures.commands.get(&("set", "ok")), Some(&1));
        assert_eq!(figures.latency_us["incrby"].len(), 2);
        assert_eq!((figures.registers, figures.live_registers), (2, 2));
        // Past its expiry (nothing executed since, so it is not swept yet): still in the map,
        // no longer live.
        core.start_turn(1_100_000, 100_000_000);
        let figures = core.figures();
        assert_eq!((figures.registers, figures.live_registers), (2, 1));
    }

    /// The forwards of `request` in what was sent to `to`.
    fn forwards_of(out: &Collected, to: NodeId, request: &Request) -> usize {
        out.sent
            .iter()
            .filter(|(node, _)| *node == to)
            .flat_map(|(_, messages)| messages)
            .filter(|m| matches!(m, Message::Forward { requests } if requests.contains(request)))
            .count()
    }

    #[test]
    fn a_new_view_resends_the_operations_in_flight_without_waiting_for_the_retry() {
        let opened =
            DurableLog::open_on(SimDir::new(), SegmentLogOptions::new(Durability::Sync)).unwrap();
        // Replica 2 of three follows replica 1, the leader of view 0.
        let nodes = vec![NodeId(1), NodeId(2), NodeId(3)];
        let config = Config::new(nodes.clone(), NodeId(2));
        let mut core: LogCore<u32, SimDir> = core_over(config, opened, 1, 5_000);
        let mut out = Collected::default();
        core.submit(&incr("k"), 7);
        core.finish_turn(&mut out).unwrap();
        let request = core.clients.requests().next().unwrap().clone();
        assert_eq!(forwards_of(&out, NodeId(1), &request), 1, "to the leader");

        // 20 ms later (far from RETRY_MS and the suspicion timeout), replica 3 starts view 2,
        // which it leads: replica 2 learns of it from its Prepare.
        core.start_turn(1_000_020, 20_000);
        let view = View(2);
        assert_eq!(view.leader(&nodes), NodeId(3));
        core.receive(
            NodeId(3),
            vec![Message::Prepare {
                view,
                first_undecided: Instance(0),
            }],
        );
        core.finish_turn(&mut out).unwrap();
        assert_eq!(core.view(), view);
        assert_eq!(
            forwards_of(&out, NodeId(3), &request),
            1,
            "re-sent to the new leader at once"
        );
        let status = core.status();
        assert_eq!((status.resent_on_view_change, status.retried), (1, 0));

        // The retry timer starts again from the re-send: nothing more before it is due.
        for step in 1..=4 {
            core.start_turn(1_000_020 + step * 100, (20 + step * 100) * 1_000);
            core.finish_turn(&mut out).unwrap();
        }
        assert_eq!(forwards_of(&out, NodeId(3), &request), 1);
        core.start_turn(1_000_020 + RETRY_MS, (20 + RETRY_MS) * 1_000);
        core.finish_turn(&mut out).unwrap();
        assert_eq!(
            forwards_of(&out, NodeId(3), &request),
            2,
            "the fallback timer"
        );
        assert_eq!(core.status().retried, 1);
    }

    #[test]
    fn an_operation_without_a_majority_is_answered_outcome_unknown() {
        let opened =
            DurableLog::open_on(SimDir::new(), SegmentLogOptions::new(Durability::Sync)).unwrap();
        // Three replicas, the other two never answer: nothing is decided.
        let config = Config::new(vec![NodeId(1), NodeId(2), NodeId(3)], NodeId(1));
        let mut core: LogCore<u32, SimDir> = core_over(config, opened, 1, 600);
        let mut out = Collected::default();
        core.submit(&incr("k"), 9);
        run_until(&mut core, &mut out, |o| !o.answers.is_empty());
        assert_eq!(out.answers, [(9, Err(Failure::OutcomeUnknown))]);
        // Handed to the replica again meanwhile: on the timer, or as it started view changes.
        let status = core.status();
        assert!(status.retried + status.resent_on_view_change >= 1);
        assert_eq!(status.timed_out, 1);
    }

    /// A single replica under mPaxos resumed from `opened`, what its directory kept, in its
    /// start number `incarnation`.
    fn resumed_core(
        opened: crate::durable_log::OpenedLog<SimDir>,
        incarnation: u32,
    ) -> LogCore<u32, SimDir> {
        let mut config = Config::new(vec![NodeId(1)], NodeId(1));
        config.recovery = logless_multipaxos::config::Recovery::Pmem;
        config.snapshot_log_bytes_min = 64;
        config.snapshot_ratio_percent = 1;
        core_over(config, opened, incarnation, 1_000)
    }

    /// The state machine a runtime rebuilds for `core` (the node does it off the loop).
    fn rebuilt_machine(core: &LogCore<u32, SimDir>) -> RegisterMachine {
        use logless_multipaxos::state_machine::StateMachine;
        let mut machine = RegisterMachine::default();
        if let Some(state) = core.rebuild_from() {
            machine.restore(&state);
        }
        machine
    }

    #[test]
    fn a_resumed_replica_takes_operations_while_rebuilding_and_answers_them_once_rebuilt() {
        let options = SegmentLogOptions::new(Durability::Emulp);
        let opened = DurableLog::open_on(SimDir::new(), options.clone()).unwrap();
        let mut core = resumed_core(opened, 1);
        let machine = rebuilt_machine(&core);
        core.finish_rebuild(machine);
        let mut out = Collected::default();
        for reply in 0..30 {
            core.submit(&incr("n"), reply);
            run_until(&mut core, &mut out, |o| {
                o.answers.len() == reply as usize + 1
            });
        }
        assert!(core.status().snapshots_taken > 0);

        // A power failure that keeps nothing unpersisted: everything acknowledged was
        // persisted (persistent memory keeps it), and the replica resumes from it.
        let image = core.log().segment_log().dir().durable_image();
        let mut core = resumed_core(DurableLog::open_on(image, options).unwrap(), 2);
        assert_eq!(core.status().state, "rebuilding");
        assert!(core.rebuild_from().is_some(), "a snapshot to rebuild from");
        let mut out = Collected::default();
        core.submit(&incr("n"), 100);
        for step in 0..20u64 {
            core.start_turn(1_000_000 + step * 5, step * 5_000);
            core.finish_turn(&mut out).unwrap();
        }
        assert!(
            out.answers.is_empty(),
            "answered before the machine was back: {:?}",
            out.answers
        );
        let machine = rebuilt_machine(&core);
        core.start_turn(1_000_100, 100_000);
        core.finish_rebuild(machine);
        core.finish_turn(&mut out).unwrap();
        run_until(&mut core, &mut out, |o| !o.answers.is_empty());
        assert_eq!(out.answers[0].0, 100);
        assert_eq!(out.answers[0].1.clone().unwrap(), Response::Int(31));
        assert_eq!(core.status().state, "serving");
    }

    /// The node's loop hands every message to [`LogCore::receive_in_epochs`], in every mode: a
    /// replica paused by a full disk drops them there too (a Prepare of a higher view changes
    /// nothing), as through [`LogCore::receive`].
    #[test]
    fn a_replica_paused_by_a_full_disk_drops_messages_in_every_mode() {
        let options = SegmentLogOptions {
            segment_bytes: 4096,
            record_bytes_max: 1024,
            ..SegmentLogOptions::new(Durability::Sync)
        };
        let opened = DurableLog::open_on(SimDir::new(), options).unwrap();
        let nodes = vec![NodeId(1), NodeId(2), NodeId(3)];
        let config = Config::new(nodes.clone(), NodeId(1));
        let mut core: LogCore<u32, SimDir> = core_over(config, opened, 1, 5_000);
        let mut out = Collected::default();
        // Alone on the network, it stands for election again and again, writing its
        // promises, until a new segment is refused.
        core.log_mut().dir_mut().full = true;
        let mut now_ms = 1_000_000;
        while !core.status().space_short {
            assert!(now_ms < 1_000_000 + 3_600_000, "the disk never refused");
            now_ms += 100;
            core.start_turn(now_ms, (now_ms - 1_000_000) * 1_000);
            core.finish_turn(&mut out).unwrap();
        }
        let paused_in = core.view();
        let prepare = |view: View| Message::Prepare {
            view,
            first_undecided: Instance(0),
        };
        let higher = (paused_in.0 + 1..)
            .map(View)
            .find(|v| v.leader(&nodes) == NodeId(2))
            .unwrap();
        core.receive_in_epochs(NodeId(2), vec![(Epoch(0), prepare(higher))]);
        core.receive(NodeId(2), vec![prepare(higher)]);
        assert_eq!(core.view(), paused_in, "dropped while paused");
        // Space returns: the next probe writes the backlog, and messages are taken again.
        core.log_mut().dir_mut().full = false;
        now_ms += SPACE_PROBE_MS;
        core.start_turn(now_ms, (now_ms - 1_000_000) * 1_000);
        core.finish_turn(&mut out).unwrap();
        assert!(!core.status().space_short);
        core.receive_in_epochs(NodeId(2), vec![(Epoch(0), prepare(higher))]);
        assert_eq!(core.view(), higher);
    }

    // ---- Snapshots off the loop ----

    fn background_config() -> Config {
        let mut config = Config::new(vec![NodeId(1)], NodeId(1));
        config.background_snapshots = true;
        config.snapshot_log_bytes_min = 64;
        config.snapshot_ratio_percent = 1;
        config
    }

    fn core_on<D: Dir>(opened: crate::durable_log::OpenedLog<D>) -> LogCore<u32, D> {
        core_over(background_config(), opened, 3, 1_000)
    }

    /// The counter `k` after a power failure of `core` now: its directory's crash image
    /// reopened with `options` and restarted ([`counter_after_restart`]).
    fn counter_after_power_failure(
        core: &LogCore<u32, SimDir>,
        options: &SegmentLogOptions,
    ) -> i64 {
        let image = core.log().segment_log().dir().durable_image();
        let opened = DurableLog::open_on(image, options.clone()).unwrap();
        counter_after_restart(&opened.durable)
    }

    /// The counter `k` of a replica restarted (FullSS) from `durable`, checking on the way
    /// that its log was never truncated past its snapshot.
    fn counter_after_restart(durable: &Durable) -> i64 {
        if let Some(snapshot) = &durable.snapshot {
            assert!(
                durable.log_start <= snapshot.next_instance,
                "the log was truncated to {:?}, past the durable snapshot at {:?}",
                durable.log_start,
                snapshot.next_instance
            );
        } else {
            assert_eq!(
                durable.log_start,
                Instance(0),
                "truncated without a snapshot"
            );
        }
        let replica = Replica::recover(
            background_config(),
            LogMachine::from(RegisterMachine::default()),
            durable,
            0,
        );
        match replica.state_machine().get(b"k").data {
            logless_commands::value::Data::Int(n) => n,
            logless_commands::value::Data::Absent => 0,
            ref other => panic!("k holds {other:?}"),
        }
    }

    /// One INCR of `k` per turn, `turns` turns, on `core`; the answers so far.
    fn incr_turns<D: Dir>(core: &mut LogCore<u32, D>, out: &mut Collected, from: u64, turns: u64) {
        for step in from..from + turns {
            core.submit(&incr("k"), step as u32);
            core.start_turn(1_000_000 + step * 5, step * 5_000);
            core.finish_turn(out).unwrap();
        }
    }

    /// Without a directory on the file system the snapshot is written at the next turn's
    /// start (as the thread would, later): after every turn a power failure, and at every
    /// operation of the turns that write a snapshot and truncate behind it, leaves a log
    /// that restarts to a state holding every answered increment and never truncated past
    /// its durable snapshot.
    #[test]
    fn a_crash_at_any_point_around_a_snapshot_off_the_loop_keeps_what_was_answered() {
        let mut options = SegmentLogOptions::new(Durability::Sync);
        // Small segments and records: every crash image copies the directory.
        options.segment_bytes = 1 << 16;
        options.record_bytes_max = 1 << 12;
        let open = || DurableLog::open_on(SimDir::new(), options.clone()).unwrap();
        // The turns of one run, each followed by a crash image.
        let mut core = core_on(open());
        let mut out = Collected::default();
        let mut in_flight_turns = Vec::new();
        for step in 0..40u64 {
            if core.snapshot_in_flight() {
                in_flight_turns.push(step);
            }
            incr_turns(&mut core, &mut out, step, 1);
            let answered = out.answers.len() as i64;
            let counter = counter_after_power_failure(&core, &options);
            assert!(
                counter >= answered,
                "lost an answered increment at turn {step}"
            );
            assert!(counter <= step as i64 + 1);
        }
        assert!(core.replica().log_start() > Instance(0), "truncated");
        assert!(
            in_flight_turns.len() >= 2,
            "snapshots in flight: {in_flight_turns:?}"
        );
        // A crash at operations spread over a turn that takes a snapshot in and truncates
        // (its first and last ones included): the snapshot's file written, the truncation
        // not yet, and every step between.
        let turn = in_flight_turns[1];
        let run_to_turn = || {
            let mut core = core_on(open());
            let mut out = Collected::default();
            incr_turns(&mut core, &mut out, 0, turn);
            assert!(core.snapshot_in_flight());
            (core, out)
        };
        let (mut core, mut out) = run_to_turn();
        let before = core.log().segment_log().dir().ops();
        incr_turns(&mut core, &mut out, turn, 1);
        let turn_ops = core.log().segment_log().dir().ops() - before;
        let stride = (turn_ops / 24).max(1);
        for ops in (0..=turn_ops)
            .step_by(stride)
            .chain([turn_ops.saturating_sub(1)])
        {
            let (mut core, mut out) = run_to_turn();
            let answered = out.answers.len() as i64;
            core.log_mut().dir_mut().arm_crash_point(ops);
            incr_turns(&mut core, &mut out, turn, 1);
            assert!(counter_after_power_failure(&core, &options) >= answered);
        }
    }

    /// On a real directory the snapshot is encoded and written by a thread while turns go
    /// on; the log is truncated only once it is taken in, only two snapshot files are kept,
    /// no temporary file is left, and a restart (the process gone, the thread's file there)
    /// holds every answered increment.
    #[test]
    fn a_snapshot_off_the_loop_on_files_is_taken_in_and_survives_a_restart() {
        let dir = tempfile::tempdir().unwrap();
        let options = SegmentLogOptions::new(Durability::Sync);
        let mut core = core_on(DurableLog::open(dir.path(), options.clone()).unwrap());
        let mut out = Collected::default();
        let mut step = 0;
        let started = std::time::Instant::now();
        while core.status().snapshots_taken < 3 {
            assert!(started.elapsed().as_secs() < 5, "no snapshots taken in");
            let start = core.replica().log_start();
            let durable_snapshot = core.replica().snapshot().map(|s| s.next_instance);
            incr_turns(&mut core, &mut out, step, 1);
            step += 1;
            if core.replica().log_start() > start {
                // Truncated in this turn: below a snapshot durable before it.
                assert!(durable_snapshot.is_some_and(|s| s >= core.replica().log_start()));
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        core.finish_snapshot().unwrap();
        assert!(core.replica().log_start() > Instance(0));
        let names: Vec<String> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        assert!(names.iter().all(|n| !n.ends_with(".tmp")), "{names:?}");
        assert!(
            names.iter().filter(|n| n.starts_with("snap-")).count() <= 2,
            "{names:?}"
        );
        let answered = out.answers.len() as i64;
        drop(core);
        let opened = DurableLog::open(dir.path(), options).unwrap();
        assert!(opened.durable.snapshot.is_some());
        assert!(counter_after_restart(&opened.durable) >= answered);
    }
}
