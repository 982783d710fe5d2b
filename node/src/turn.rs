//! One shard's turn logic without a runtime: the part of a shard that the tokio loop
//! ([`crate::shard`]) and the whole-node simulation (`logless-sim`) share.
//!
//! A turn takes everything that is waiting (client commands, peer messages, broken links, due
//! timers), then follows the order the core prescribes: the acceptor states are written and
//! flushed once (group commit), and only then do acceptor replies and client answers leave.
//! The caller supplies the clocks and carries the outputs through an [`Outlet`]; nothing here
//! reads a clock, spawns or touches a socket, so a simulator can drive it deterministically.
use std::collections::{BTreeMap, VecDeque};

use bytes::Bytes;
use hdrhistogram::Histogram;
use logless_commands::command::{Command, CommandError, Reply};
use logless_placement::Stage;
use logless_redis::session::{Answer, Failure};
use logless_rmw::acceptor::AcceptorState;
use logless_rmw::ids::{ClientTag, Key, NodeId};
use logless_rmw::message::{Envelope, Message};
use logless_rmw::persist::{AcceptorStore, PersistBatch};
use logless_rmw::proposer::{ClientReply, ProposeError, ProposerStats};
use logless_rmw::replica::{Replica, SpentOutput};
use logless_rmw::timers::Timers;
use logless_storage::media::{FileMedia, Media};
use logless_storage::StoreError;
use rustc_hash::FxHashMap;

use crate::log_turn::LogStatus;
use crate::memory::needs_space;
use crate::store::ShardStore;

/// The answer a client waits for.
pub type CommandResult = Result<Reply, ProposeError>;

/// The engine's answer in the Redis session's terms.
pub fn answer_of(result: CommandResult) -> Answer {
    result.map_err(|e| match e {
        ProposeError::NotApplied => Failure::NotApplied,
        ProposeError::OutcomeUnknown => Failure::OutcomeUnknown,
        ProposeError::Overloaded => Failure::Overloaded,
        ProposeError::DiskFull => Failure::DiskFull,
        ProposeError::QuorumFull => Failure::QuorumFull,
    })
}

/// Hands over the batch in `batch`, leaving an empty vector with room for as many items in its
/// place. The next turn's batch to the same place is likely about as large: grown from empty
/// instead, its vector would be reallocated and copied about log2(n) times in every turn,
/// often into memory not touched before, which costs a page fault as well.
pub fn take_batch<T>(batch: &mut Vec<T>) -> Vec<T> {
    let room = batch.len();
    std::mem::replace(batch, Vec::with_capacity(room))
}

/// Where a turn's outputs go.
pub trait Outlet<R> {
    /// Messages for the same shard on `to`, in order (after the turn's flush).
    fn send(&mut self, to: NodeId, messages: Vec<Message>);
    /// The answer to the command submitted with `reply`.
    fn answer(&mut self, reply: R, result: CommandResult);
    /// The caller's monotonic clock now (µs, on the clock [`ShardCore::start_turn`] is given):
    /// read once per turn after the flush, so command latencies include it.
    fn mono_us(&self) -> u64;
}

/// Deliberate bugs of the shard runtime (harness tests only; the core has its own).
#[derive(Clone, Copy, Debug, Default)]
pub struct ShardBugs {
    /// Release acceptor replies at once and write their states only
    /// [`DEFERRED_WRITE_US`] later, as an asynchronous persistence would: a crash in between,
    /// a kill -9 included, contradicts promises already made.
    pub reply_before_persist: bool,
    /// Write every acceptor state without its time to live, as a record format that forgot
    /// the field would: a replica restarted from its store brings expired keys back to life.
    pub persist_without_ttl: bool,
}

/// How a shard looks for dead registers in the background (active expiry), when removal is on.
///
/// Like redis's active expiry cycle, it runs on a timer and does a bounded amount of work per
/// tick: it walks the acceptor table from where the last tick stopped, in batches of
/// [`Sweep::batch`] registers, and starts removing those it may remove (see
/// `docs/removal.md`). It goes on to another batch while more than a tenth of the last one was
/// dead, up to [`Sweep::registers_per_tick`] registers visited and [`Sweep::removals_per_tick`]
/// removals started in one tick. The bounds are counts, not time: a visit is a table read and
/// a check, and a removal a handful of messages.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sweep {
    /// Between two ticks (ms).
    pub interval_ms: u64,
    /// Registers visited before the dead share is judged.
    pub batch: usize,
    /// The most registers visited in one tick.
    pub registers_per_tick: usize,
    /// The most removals started in one tick.
    pub removals_per_tick: usize,
}

impl Default for Sweep {
    /// Ten ticks a second (redis's `hz`), at least 1,024 registers each: a table of a million
    /// registers is walked in under two minutes when little is dead, and up to 16 times faster
    /// while much is.
    fn default() -> Sweep {
        Sweep {
            interval_ms: 100,
            batch: 1024,
            registers_per_tick: 16 * 1024,
            removals_per_tick: 4096,
        }
    }
}

/// What a shard's sweep did since start.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SweepStats {
    /// Ticks run.
    pub ticks: u64,
    /// Registers visited.
    pub visited: u64,
    /// Removals started (each reads every replica; see `Replica::remove_if_dead`).
    pub removals_started: u64,
}

/// How long [`ShardBugs::reply_before_persist`] holds back the states whose replies it sent.
pub const DEFERRED_WRITE_US: u64 = 50_000;

/// After the store refused a write for lack of space, writes of registers the replica does not
/// hold are answered "disk full" at once, without a proposal; at most this often (ms) such a
/// write first checks whether space came back (the store tries to grow by one chunk), and if
/// it did, goes ahead.
pub const DISK_FULL_RECHECK_MS: u64 = 1_000;

/// A shard's figures, for INFO, `/metrics` and `/status`; the node's are its shards' summed.
#[derive(Clone, Debug, Default)]
pub struct ShardStatus {
    /// Registers with an acceptor state here (tombstones and expired keys included).
    pub registers: u64,
    /// Registers whose value is live now.
    pub live_registers: u64,
    /// Live registers with a time to live.
    pub expiring_registers: u64,
    /// The sum of the remaining times to live of those (ms).
    pub ttl_ms_sum: u64,
    /// Registers the acceptor forgot since start (see `docs/removal.md`).
    pub registers_removed: u64,
    /// Registers the acceptor forgot since start because a change of the ring took their slot
    /// from this node (docs/ring.md §4 "Slots a node left").
    pub registers_dropped: u64,
    /// Registers the acceptor holds whose slot this node does not replicate at the installed
    /// stage: what is left to drop.
    pub registers_unplaced: u64,
    /// Those of them whose value is live now (counted by the status's walk only while some
    /// are left to drop): `live_registers` less these are the live keys this node replicates.
    pub live_unplaced: u64,
    /// Data shards whose acceptor answers no peer until the node installed the ring's stage
    /// (1 for such a shard; `Replica::awaiting_stage`, docs/ring.md §4 "A restarted node").
    pub awaiting_stage: u64,
    /// The background sweep's figures.
    pub sweep: SweepStats,
    /// The proposer's counters.
    pub proposer: ProposerStats,
    /// Commands answered, by command name and outcome (`ok`, `not_applied`, `unknown`,
    /// `overloaded`, `oom`: refused over `maxmemory`).
    pub commands: FxHashMap<(&'static str, &'static str), u64>,
    /// Command latency in microseconds, by command name.
    pub latency_us: FxHashMap<&'static str, Histogram<u64>>,
    /// Group-commit flushes and their total time.
    pub flushes: u64,
    /// Total flush time in microseconds.
    pub flush_micros: u64,
    /// Acceptor state writes.
    pub state_writes: u64,
    /// Peer links broken or replaced.
    pub links_broken: u64,
    /// The log engine's figures (its one loop reports these, with `registers` and
    /// `live_registers` its keys; the other figures stay empty).
    pub log: Option<LogStatus>,
    /// The psmr engine's figures (its one loop reports these; the other figures stay empty).
    pub psmr: Option<crate::psmr_turn::PsmrStatus>,
    /// Writes refused for lack of space: acceptor state writes the store refused, and client
    /// writes refused at once because the disk was found full.
    pub writes_refused_for_space: u64,
    /// Whether the replica rejoins after a lost disk (docs/lost-disk.md).
    pub rejoining: bool,
    /// While it rejoins: peers that have not answered FENCE yet (summed over shards).
    pub rejoin_peers_unfenced: u64,
    /// While it rejoins: registers recovered from the other replicas since start.
    pub registers_recovered: u64,
}

impl std::ops::AddAssign for ShardStatus {
    fn add_assign(&mut self, s: ShardStatus) {
        self.registers += s.registers;
        self.live_registers += s.live_registers;
        self.expiring_registers += s.expiring_registers;
        self.ttl_ms_sum = self.ttl_ms_sum.saturating_add(s.ttl_ms_sum);
        self.registers_removed += s.registers_removed;
        self.registers_dropped += s.registers_dropped;
        self.registers_unplaced += s.registers_unplaced;
        self.live_unplaced += s.live_unplaced;
        self.awaiting_stage += s.awaiting_stage;
        self.sweep.ticks += s.sweep.ticks;
        self.sweep.visited += s.sweep.visited;
        self.sweep.removals_started += s.sweep.removals_started;
        self.proposer += &s.proposer;
        for (k, v) in s.commands {
            *self.commands.entry(k).or_default() += v;
        }
        for (k, h) in s.latency_us {
            match self.latency_us.get_mut(k) {
                Some(total) => {
                    let _ = total.add(&h);
                }
                None => {
                    self.latency_us.insert(k, h);
                }
            }
        }
        self.flushes += s.flushes;
        self.flush_micros += s.flush_micros;
        self.state_writes += s.state_writes;
        self.links_broken += s.links_broken;
        if s.log.is_some() {
            self.log = s.log;
        }
        if s.psmr.is_some() {
            self.psmr = s.psmr;
        }
        self.writes_refused_for_space += s.writes_refused_for_space;
        self.rejoining |= s.rejoining;
        self.rejoin_peers_unfenced += s.rejoin_peers_unfenced;
        self.registers_recovered += s.registers_recovered;
    }
}

/// A shard's clock: the wall clock, except that it never goes back.
///
/// It follows the wall clock forwards. When the wall clock steps back, this clock does not:
/// it goes on at half the monotonic rate until the wall clock catches up (after twice the
/// step). Holding it still instead would stall every timer of the protocol for as long as the
/// step, and with them every retry and timeout.
#[derive(Clone, Copy, Debug, Default)]
pub struct ShardClock {
    clock_us: u64,
    last_mono_us: u64,
}

impl ShardClock {
    /// The clock (ms) when the wall clock reads `wall_ms` and the monotonic one `mono_us`.
    pub fn read(&mut self, wall_ms: u64, mono_us: u64) -> u64 {
        let elapsed_us = mono_us.saturating_sub(self.last_mono_us);
        self.last_mono_us = mono_us;
        let wall_us = wall_ms.saturating_mul(1000);
        self.clock_us = if wall_us >= self.clock_us {
            wall_us
        } else {
            self.clock_us + elapsed_us / 2
        };
        self.clock_us / 1000
    }
}

struct Waiting<R> {
    reply: R,
    name: &'static str,
    started_us: u64,
}

/// One shard's replica, store, timers and pending answers. `R` is how an answer finds its
/// client (a channel in the node, an index in the simulation).
pub struct ShardCore<R, M: Media = FileMedia> {
    node: NodeId,
    replica: Replica,
    store: ShardStore<M>,
    outgoing: BTreeMap<NodeId, Vec<Message>>,
    local: Vec<Message>,
    /// The turn's client commands so far, handed to the replica together (see
    /// [`ShardCore::submit`]).
    submitted: Vec<(ClientTag, Key, Command)>,
    waiting: FxHashMap<u64, Waiting<R>>,
    next_tag: u64,
    /// The replica's wake-ups, on the turn clock.
    timers: Timers,
    /// Commands are stamped with this clock, expiry is decided from the stamps, and the
    /// protocol's timers run on it (see the README's clock assumption).
    clock: ShardClock,
    /// The turn's clock (ms).
    now_ms: u64,
    /// The caller's monotonic clock at the start of the turn (µs), for latencies.
    turn_started_us: u64,
    /// States whose replies [`ShardBugs::reply_before_persist`] released, with when they are
    /// written (monotonic µs).
    deferred: VecDeque<(u64, Key, AcceptorState)>,
    bugs: ShardBugs,
    commands: FxHashMap<(&'static str, &'static str), u64>,
    latency_us: FxHashMap<&'static str, Histogram<u64>>,
    state_writes: u64,
    links_broken: u64,
    writes_refused_for_space: u64,
    /// Whether the store refused a write for lack of space and no check found space since:
    /// writes of registers the replica does not hold are answered "disk full" at once.
    disk_full: bool,
    /// When (turn clock, ms) the next such write checks for space (see
    /// [`DISK_FULL_RECHECK_MS`]).
    disk_recheck_ms: u64,
    /// Answers decided at submission, given with the turn's others.
    early_replies: Vec<ClientReply>,
    /// The background sweep's bounds; `None`: no sweep.
    sweep: Option<Sweep>,
    /// When the sweep runs next (turn clock, ms).
    next_sweep_ms: u64,
    /// Where the sweep goes on (a [`Replica::scan_states`] cursor).
    sweep_cursor: u64,
    sweep_stats: SweepStats,
    /// The registers whose removal the sweep started, and when (turn clock, ms).
    removing: FxHashMap<Key, u64>,
    /// Whether the replica is over `maxmemory` this turn (see [`crate::memory`]).
    memory_full: bool,
    /// Commands refused this turn for want of memory, answered at its end.
    refused: Vec<(R, &'static str)>,
    /// A later stage of the ring than the one installed, met in a peer's message and not yet
    /// taken by the runtime ([`ShardCore::take_newer_stage`]).
    newer_stage: Option<Stage>,
    /// Whether the acceptor may hold states of registers it is no longer a replica of (set
    /// when a placement is installed, cleared by a walk of the table that found none; see
    /// [`ShardCore::drop_if_due`]).
    dropping: bool,
    /// How many of those states the acceptor holds, counted by one walk of the table when a
    /// placement is installed and lowered by what the drop walk forgets (an acceptor takes no
    /// state of a key it does not replicate, so nothing raises it); `None` before the first
    /// installation. A status is asked often (`/status`, the ring's reader), and a walk of
    /// the table at each would hold the shard's commands back.
    unplaced: Option<u64>,
    /// Where the walk that drops them goes on (a [`Replica::drop_unplaced`] cursor).
    drop_cursor: u64,
    /// States the current walk dropped so far.
    drop_walk_dropped: u64,
    /// When the walk goes on (turn clock, ms).
    next_drop_ms: u64,
}

/// Between two ticks of the walk that drops states of slots the node left (ms).
pub const DROP_INTERVAL_MS: u64 = 25;
/// Registers the walk that drops states of slots the node left visits per call of
/// [`Replica::drop_unplaced`] (so the most one call forgets).
pub const DROP_BATCH: usize = 256;
/// The most registers that walk visits in one tick: as the removal sweep's, a table of a
/// million registers is walked in under seven seconds.
pub const DROP_PER_TICK: usize = 4 * 1024;
/// The most states that walk forgets in one tick, give or take a call's: each is a removal in
/// the turn's persist batch, and thousands in one turn held the shard's commands back for
/// tens of milliseconds at every tick (docs/results/ring-stall-2026-11-27b). A tick that
/// reaches it ends early, and the walk goes on from there at the next.
pub const DROP_FORGETS_PER_TICK: usize = 256;

impl<R, M: Media> ShardCore<R, M> {
    /// A shard around `replica` and its `store`.
    pub fn new(replica: Replica, store: ShardStore<M>) -> ShardCore<R, M> {
        ShardCore {
            node: replica.node(),
            replica,
            store,
            outgoing: BTreeMap::new(),
            local: Vec::new(),
            submitted: Vec::new(),
            waiting: FxHashMap::default(),
            next_tag: 0,
            timers: Timers::default(),
            clock: ShardClock::default(),
            now_ms: 0,
            turn_started_us: 0,
            deferred: VecDeque::new(),
            bugs: ShardBugs::default(),
            commands: FxHashMap::default(),
            latency_us: FxHashMap::default(),
            state_writes: 0,
            links_broken: 0,
            writes_refused_for_space: 0,
            disk_full: false,
            disk_recheck_ms: 0,
            early_replies: Vec::new(),
            sweep: Some(Sweep::default()),
            next_sweep_ms: 0,
            sweep_cursor: 0,
            sweep_stats: SweepStats::default(),
            removing: FxHashMap::default(),
            memory_full: false,
            refused: Vec::new(),
            newer_stage: None,
            dropping: false,
            unplaced: None,
            drop_cursor: 0,
            drop_walk_dropped: 0,
            next_drop_ms: 0,
        }
    }

    /// A later stage of the ring met since the last call, if any: the engine's fence held a
    /// message of that stage back until it is installed, so the runtime should read the ring's
    /// stage register now rather than at its next periodic read ([`crate::ring_watch`]).
    pub fn take_newer_stage(&mut self) -> Option<Stage> {
        self.newer_stage.take()
    }

    /// Whether the replica is over `maxmemory`: from now on, commands that may need new space
    /// are refused ([`crate::memory::needs_space`]).
    pub fn set_memory_full(&mut self, full: bool) {
        self.memory_full = full;
    }

    /// Sets the background sweep's bounds (`None`: no sweep). It runs only while removal is on.
    pub fn set_sweep(&mut self, sweep: Option<Sweep>) {
        self.sweep = sweep;
    }

    /// The sweep's bounds, if it runs (removal on).
    fn sweep_running(&self) -> Option<Sweep> {
        self.sweep
            .filter(|_| self.replica.proposer_config().remove_dead_registers)
    }

    /// Switches deliberate bugs on (harness tests only).
    pub fn inject_bugs(&mut self, bugs: ShardBugs) {
        self.bugs = bugs;
    }

    /// Starts a turn at wall-clock `wall_ms` and monotonic `mono_us`; returns the turn's
    /// clock (ms), which is [`ShardClock`]'s reading.
    pub fn start_turn(&mut self, wall_ms: u64, mono_us: u64) -> u64 {
        self.now_ms = self.clock.read(wall_ms, mono_us);
        self.turn_started_us = mono_us;
        self.now_ms
    }

    /// The turn's clock (ms).
    pub fn now_ms(&self) -> u64 {
        self.now_ms
    }

    /// Whether the next turn has work without any input (messages to itself).
    pub fn has_local_work(&self) -> bool {
        !self.local.is_empty()
    }

    /// When the earliest timer is due (ms on the turn clock).
    pub fn next_timer_ms(&self) -> Option<u64> {
        let sweep = self.sweep_running().map(|_| self.next_sweep_ms);
        let drop = self.dropping.then_some(self.next_drop_ms);
        [self.timers.next_due_ms(), sweep, drop]
            .into_iter()
            .flatten()
            .min()
    }

    /// Takes a client command; its answer goes to `reply`. The commands of a turn reach the
    /// replica together, in the order submitted, before the turn's next peer messages or at its
    /// end, so that it prefetches their registers ahead (`Replica::handle_commands`).
    pub fn submit(&mut self, key: Key, command: Command, reply: R) {
        if self.memory_full {
            let held = self.replica.acceptor_state(&key);
            if needs_space(&command, held.as_ref().map(|s| &*s.value), self.now_ms) {
                self.refused.push((reply, command.name()));
                return;
            }
        }
        let tag = self.wait_for(reply, command.name());
        // The store refused a write for space: a register this replica does not hold would
        // need new space here, so its write is refused at once rather than after a timeout,
        // unless a check finds that space came back.
        if self.disk_full
            && !command.is_read_only()
            && self.replica.acceptor_state(&key).is_none()
            && !self.space_returned()
        {
            self.writes_refused_for_space += 1;
            self.early_replies.push(ClientReply {
                client: ClientTag(tag),
                result: Err(ProposeError::DiskFull),
            });
            return;
        }
        self.submitted.push((ClientTag(tag), key, command));
    }

    /// A write-through of register `key` for the ring's data mover ([`crate::ring_mover`],
    /// `Replica::handle_write_through`), answered through `reply` as GET is.
    pub fn submit_write_through(&mut self, key: Key, reply: R) {
        self.hand_over_commands();
        let tag = self.wait_for(reply, Command::Get.name());
        self.replica
            .handle_write_through(self.now_ms, ClientTag(tag), key);
    }

    /// The tag of a command `name` whose answer goes to `reply`.
    fn wait_for(&mut self, reply: R, name: &'static str) -> u64 {
        self.next_tag += 1;
        let tag = self.next_tag;
        self.waiting.insert(
            tag,
            Waiting {
                reply,
                name,
                started_us: self.turn_started_us,
            },
        );
        tag
    }

    /// Hands the commands submitted so far to the replica.
    fn hand_over_commands(&mut self) {
        if !self.submitted.is_empty() {
            self.replica
                .handle_commands(self.now_ms, &mut self.submitted);
        }
    }

    /// Takes protocol messages from the same shard on `from`, in the order sent.
    pub fn receive(&mut self, from: NodeId, messages: Vec<Message>) {
        self.hand_over_commands();
        self.replica
            .handle_messages(self.now_ms, from, messages.iter());
    }

    /// A connection to or from `peer` broke or was replaced: messages on it may be lost.
    pub fn link_broken(&mut self, peer: NodeId) {
        self.hand_over_commands();
        self.links_broken += 1;
        self.replica.handle_link_broken(peer);
    }

    /// Ends the turn: delivers messages to itself, fires due timers, then persists, flushes,
    /// and sends and answers through `outlet`. An error means the store failed: the replica
    /// must stop voting (fail-stop).
    pub fn finish_turn(&mut self, outlet: &mut impl Outlet<R>) -> Result<(), StoreError> {
        let now_ms = self.now_ms;
        self.hand_over_commands();
        self.replica
            .handle_messages(now_ms, self.node, self.local.iter());
        self.local.clear();
        self.timers.fire_due(now_ms, &mut self.replica);
        self.sweep_if_due();
        self.drop_if_due();
        let mut output = self.replica.take_output();
        if let Some(stage) = output.newer_stage.take() {
            self.newer_stage = Some(stage);
        }
        for envelope in output.sends.drain(..) {
            self.route(envelope);
        }
        if !self.deferred.is_empty() {
            self.write_deferred()?;
        }
        let mut released = Vec::new();
        if !output.persist.is_empty() {
            self.state_writes += output.persist.writes_len() as u64;
            released = self.commit(output.persist)?;
            for envelope in released.drain(..) {
                self.route(envelope);
            }
            self.watch_room();
        }
        for (to, messages) in &mut self.outgoing {
            if !messages.is_empty() {
                outlet.send(*to, take_batch(messages));
            }
        }
        let answered_us = if output.replies.is_empty() {
            0
        } else {
            outlet.mono_us()
        };
        for (reply, name) in self.refused.drain(..) {
            *self.commands.entry((name, "oom")).or_default() += 1;
            outlet.answer(reply, Ok(Reply::Error(CommandError::OutOfMemory)));
        }
        let early = std::mem::take(&mut self.early_replies);
        for reply in output.replies.drain(..).chain(early) {
            let Some(waiting) = self.waiting.remove(&reply.client.0) else {
                continue;
            };
            let outcome = match &reply.result {
                Ok(_) => "ok",
                Err(ProposeError::NotApplied) => "not_applied",
                Err(ProposeError::OutcomeUnknown) => "unknown",
                Err(ProposeError::Overloaded) => "overloaded",
                Err(ProposeError::DiskFull) => "disk_full",
                Err(ProposeError::QuorumFull) => {
                    self.writes_refused_for_space += 1;
                    "disk_full"
                }
            };
            *self.commands.entry((waiting.name, outcome)).or_default() += 1;
            let micros = answered_us.saturating_sub(waiting.started_us);
            self.latency_us
                .entry(waiting.name)
                .or_insert_with(|| Histogram::new(3).expect("valid histogram"))
                .saturating_record(micros.max(1));
            outlet.answer(waiting.reply, reply.result);
        }
        self.timers.schedule(output.timers.drain(..));
        // The emptied vectors go back to the replica, whose next output fills them.
        self.replica.recycle(SpentOutput {
            sends: output.sends,
            released,
            replies: output.replies,
            timers: output.timers,
        });
        Ok(())
    }

    /// Finds a full disk before a write needs the room ([`ShardStore::short_of_room`]): from
    /// then on writes of registers this replica does not hold are refused at once ("disk
    /// full", not applied) instead of being proposed to acceptors that cannot store them, which
    /// the proposer would wait for until its timeout ("outcome unknown").
    fn watch_room(&mut self) {
        if !self.disk_full && self.store.short_of_room() {
            self.disk_full = true;
            self.disk_recheck_ms = self.now_ms + DISK_FULL_RECHECK_MS;
        }
    }

    /// Whether space came back since the store was full, checked at most once per
    /// [`DISK_FULL_RECHECK_MS`]. A store that fails otherwise is left for the next commit to
    /// report.
    fn space_returned(&mut self) -> bool {
        if self.now_ms < self.disk_recheck_ms {
            return false;
        }
        self.disk_recheck_ms = self.now_ms + DISK_FULL_RECHECK_MS;
        if matches!(self.store.space_returned(), Ok(true) | Err(_)) {
            self.disk_full = false;
        }
        !self.disk_full
    }

    /// Persists a batch and returns the replies it releases.
    fn commit(&mut self, persist: PersistBatch) -> Result<Vec<Envelope>, StoreError> {
        if self.bugs.persist_without_ttl {
            return self.commit_without_ttl(persist);
        }
        if !self.bugs.reply_before_persist {
            let committed = persist.commit_or_refuse(&mut self.store)?;
            // Placed first: a register refused after an earlier write of it in the batch
            // was stored is found at that write's location.
            self.replica.placed(&committed.placed);
            if committed.floor_refused {
                // The round floor is not durable: a raise for gained slots in the batch did
                // not happen, and the slots stay held back until a raise is (docs/ring.md §4,
                // "Dead registers", "A full store").
                self.replica.round_floor_refused();
                self.disk_full = true;
                self.disk_recheck_ms = self.now_ms + DISK_FULL_RECHECK_MS;
            }
            if !committed.refused.is_empty() {
                self.writes_refused_for_space += committed.refused.len() as u64;
                self.disk_full = true;
                self.disk_recheck_ms = self.now_ms + DISK_FULL_RECHECK_MS;
                for key in &committed.refused {
                    let location = self.replica.location(key);
                    let durable = self.store.durable_state(key, location)?;
                    self.replica.restore(key, durable);
                }
            }
            return Ok(committed.released);
        }
        let (writes, replies) = persist.release_unpersisted_for_fault_injection();
        let due = self.turn_started_us + DEFERRED_WRITE_US;
        self.deferred
            .extend(writes.into_iter().map(|(key, state)| (due, key, state)));
        Ok(replies)
    }

    /// Persists a batch with every time to live dropped, then releases its replies (the
    /// deliberate bug [`ShardBugs::persist_without_ttl`] only).
    fn commit_without_ttl(&mut self, persist: PersistBatch) -> Result<Vec<Envelope>, StoreError> {
        let (writes, replies) = persist.release_unpersisted_for_fault_injection();
        let writes = writes
            .into_iter()
            .map(|(key, mut state)| {
                if state.value.expires_at_ms.is_some() {
                    let mut value = (*state.value).clone();
                    value.expires_at_ms = None;
                    state.value = value.into();
                }
                (key, state)
            })
            .collect();
        PersistBatch::writes_only_for_fault_injection(writes).commit(&mut self.store)?;
        Ok(replies)
    }

    /// Writes and flushes the deferred states that are due (the deliberate bug only).
    fn write_deferred(&mut self) -> Result<(), StoreError> {
        let mut wrote = false;
        while let Some((due, _, _)) = self.deferred.front() {
            if *due > self.turn_started_us {
                break;
            }
            let (_, key, state) = self.deferred.pop_front().expect("checked");
            self.store.write(&key, &state)?;
            wrote = true;
        }
        if wrote {
            self.store.flush()?;
        }
        Ok(())
    }

    /// Flushes what is staged (at a stop).
    pub fn flush(&mut self) -> Result<(), StoreError> {
        self.store.flush()
    }

    fn route(&mut self, envelope: Envelope) {
        if envelope.to == self.node {
            self.local.push(envelope.message);
        } else {
            self.outgoing
                .entry(envelope.to)
                .or_default()
                .push(envelope.message);
        }
    }

    /// Starts removing up to `keys_max` of the registers this replica holds dead and wrote
    /// last (see `docs/removal.md`); returns how many it started. Finding them scans the
    /// shard's acceptor table. Does nothing unless removal is on.
    pub fn remove_dead_registers(&mut self, keys_max: usize) -> usize {
        let now_ms = self.now_ms;
        let keys: Vec<Key> = self
            .replica
            .removal_candidates(now_ms)
            .take(keys_max)
            .cloned()
            .collect();
        keys.iter()
            .filter(|key| self.replica.remove_if_dead(now_ms, key))
            .count()
    }

    /// Runs a tick of the background sweep (see [`Sweep`]) if one is due.
    fn sweep_if_due(&mut self) {
        let Some(sweep) = self.sweep_running() else {
            return;
        };
        if self.now_ms < self.next_sweep_ms {
            return;
        }
        self.next_sweep_ms = self.now_ms.saturating_add(sweep.interval_ms);
        self.sweep_stats.ticks += 1;
        let now_ms = self.now_ms;
        // A removal's read is given the request timeout to end before the sweep asks again:
        // asking again restarts it, and on a slow network one restarted every tick would
        // never end.
        let patience_ms = self.replica.proposer_config().request_timeout_ms;
        self.removing
            .retain(|_, started_ms| now_ms < started_ms.saturating_add(patience_ms));
        let mut visited = 0;
        let mut started = 0;
        let mut dead = Vec::new();
        while visited < sweep.registers_per_tick && started < sweep.removals_per_tick {
            let batch = sweep.batch.min(sweep.registers_per_tick - visited);
            let (next, states) = self.replica.scan_states(self.sweep_cursor, batch);
            self.sweep_cursor = next;
            visited += states.len();
            dead.clear();
            dead.extend(
                states
                    .into_iter()
                    .filter(|(key, state)| {
                        !self.removing.contains_key(*key)
                            && self.replica.removal_candidate(state, now_ms)
                    })
                    .map(|(key, _)| key.clone()),
            );
            let candidates = dead.len();
            for key in dead.drain(..).take(sweep.removals_per_tick - started) {
                if self.replica.remove_if_dead(now_ms, &key) {
                    self.removing.insert(key, now_ms);
                    started += 1;
                }
            }
            // Go on while more than a tenth of the batch was dead, and not past the table's
            // end (the next tick starts it again).
            if next == 0 || candidates * 10 <= batch {
                break;
            }
        }
        self.sweep_stats.visited += visited as u64;
        self.sweep_stats.removals_started += started as u64;
    }

    /// Runs a tick of the walk that forgets the acceptor states of registers this node is no
    /// longer a replica of (slots a change of the ring took from it; docs/ring.md §4 "Slots a
    /// node left"), if one is due: up to [`DROP_PER_TICK`] registers visited, in calls of
    /// [`DROP_BATCH`], each state forgotten in this turn's persist batch, until about
    /// [`DROP_FORGETS_PER_TICK`] are forgotten. A walk that reaches
    /// the table's end having forgotten nothing ends the dropping until the next placement; one
    /// that forgot some walks again (forgetting may rehash the table under the cursor).
    fn drop_if_due(&mut self) {
        if !self.dropping || self.now_ms < self.next_drop_ms {
            return;
        }
        self.next_drop_ms = self.now_ms.saturating_add(DROP_INTERVAL_MS);
        let (mut visited, mut forgotten) = (0, 0);
        while visited < DROP_PER_TICK && forgotten < DROP_FORGETS_PER_TICK {
            let (next, seen, dropped) = self.replica.drop_unplaced(self.drop_cursor, DROP_BATCH);
            visited += seen.max(1);
            forgotten += dropped;
            self.drop_cursor = next;
            self.drop_walk_dropped += dropped as u64;
            self.unplaced = self
                .unplaced
                .map(|left| left.saturating_sub(dropped as u64));
            if next == 0 {
                if self.drop_walk_dropped == 0 {
                    self.dropping = false;
                    self.unplaced = Some(0);
                }
                self.drop_walk_dropped = 0;
                break;
            }
        }
    }

    /// The background sweep's figures since start.
    pub fn sweep_stats(&self) -> SweepStats {
        self.sweep_stats
    }

    /// How many registers the shard's acceptor holds in memory.
    pub fn registers_held(&self) -> usize {
        self.replica.acceptor_registers()
    }

    /// The store (the simulation reads its media).
    pub fn store(&self) -> &ShardStore<M> {
        &self.store
    }

    /// The state the store holds for `key`, found where the acceptor table says it is (the
    /// simulation's checks).
    pub fn durable_state(&self, key: &Key) -> Result<Option<AcceptorState>, StoreError> {
        self.store.durable_state(key, self.replica.location(key))
    }

    /// The store, mutably (the simulation arms crash points on its media).
    pub fn store_mut(&mut self) -> &mut ShardStore<M> {
        &mut self.store
    }

    /// Up to `count` registers of this replica's copy from `cursor` (see
    /// [`Replica::scan_states`]), and the cursor of the next call (0 at the end): the key and
    /// type of each that holds a value now (tombstones and expired values are left out, so a
    /// call may find none).
    pub fn scan_live(&self, cursor: u64, count: usize) -> (u64, Vec<(Bytes, &'static str)>) {
        let (next, states) = self.replica.scan_states(cursor, count);
        let live = states
            .into_iter()
            .filter(|(_, state)| state.value.is_live(self.now_ms))
            .map(|(key, state)| {
                (
                    Bytes::copy_from_slice(key.as_bytes()),
                    state.value.data.type_name(),
                )
            })
            .collect();
        (next, live)
    }

    /// Like [`ShardCore::scan_live`], but every key whose state holds a vote
    /// (`AcceptorState::holds_vote`): live ones, tombstones and expired values, not those
    /// holding only a promise. What a ring's data mover writes through (docs/ring.md §4 "Dead
    /// registers"); the type is the value's, `none` for a dead one.
    pub fn scan_voted(&self, cursor: u64, count: usize) -> (u64, Vec<(Bytes, &'static str)>) {
        let (next, states) = self.replica.scan_states(cursor, count);
        let voted = states
            .into_iter()
            .filter(|(_, state)| state.holds_vote())
            .map(|(key, state)| {
                let type_name = if state.value.is_live(self.now_ms) {
                    state.value.data.type_name()
                } else {
                    "none"
                };
                (Bytes::copy_from_slice(key.as_bytes()), type_name)
            })
            .collect();
        (next, voted)
    }

    /// Switches thrifty reads and writes (see `Replica::set_thrifty`).
    pub fn set_thrifty(&mut self, reads: bool, writes: bool) {
        self.replica.set_thrifty(reads, writes);
    }

    /// Counts registers by the acceptors of a new stage of the ring from now on (see
    /// `Replica::install_placement`).
    pub fn install_placement(&mut self, placement: logless_rmw::placement::Placement) {
        self.replica.install_placement(placement);
        // The new placement may take slots from this node: walk the table for their states.
        self.dropping = true;
        self.unplaced = Some(self.replica.registers_unplaced());
        self.drop_cursor = 0;
        self.drop_walk_dropped = 0;
        self.next_drop_ms = self.now_ms;
    }

    /// The highest round number this shard's acceptor acknowledged for any register, forgotten
    /// ones included (`Replica::high_round`; docs/ring.md §4 "Dead registers"). A walk of the
    /// acceptor table.
    pub fn high_round(&self) -> u64 {
        self.replica.high_round()
    }

    /// Whether the installed joint stage gives this shard's acceptor slots it answers nothing
    /// about until [`ShardCore::raise_floor_for_gained_slots`].
    pub fn awaits_gained_floor(&self) -> bool {
        self.replica.awaits_gained_floor()
    }

    /// Raises the round floor above `above` for the slots the joint stage `stage` gives this
    /// node (`Replica::raise_floor_for_gained_slots`), made durable by this turn's commit;
    /// false, changing nothing, if `stage` is not the installed stage. The raise took effect
    /// only if [`ShardCore::awaits_gained_floor`] is false after the turn: a store that
    /// refuses the floor for lack of space leaves the slots held back, to be raised again.
    pub fn raise_floor_for_gained_slots(
        &mut self,
        stage: logless_rmw::placement::StageId,
        above: u64,
    ) -> bool {
        self.replica.raise_floor_for_gained_slots(stage, above)
    }

    /// A key of this replica's copy that holds a value now, looked for from a place `seed`
    /// chooses; `None` if there is none.
    pub fn random_live_key(&self, seed: u64) -> Option<Bytes> {
        self.replica
            .find_state(seed, |state| state.value.is_live(self.now_ms))
            .map(|(key, _)| Bytes::copy_from_slice(key.as_bytes()))
    }

    /// How many states the acceptor holds of registers the installed placement does not place
    /// on this node: what the drop has left to forget (kept as a count, not walked).
    pub fn registers_unplaced(&self) -> u64 {
        self.unplaced
            .unwrap_or_else(|| self.replica.registers_unplaced())
    }

    /// The shard's figures now.
    pub fn status(&self) -> ShardStatus {
        let rejoin = self.replica.rejoin_progress();
        let mut registers = 0;
        let mut live_registers = 0;
        let mut expiring_registers = 0;
        let mut ttl_ms_sum = 0u64;
        let registers_unplaced = self.registers_unplaced();
        // Which live keys lie in slots the node left, only while it holds some: those states
        // go with the drop, and the node owns none of their keys.
        let mut live_unplaced = 0;
        for (key, live_until) in self.replica.acceptor_liveness(self.now_ms) {
            registers += 1;
            if let Some(expires_at_ms) = live_until {
                live_registers += 1;
                if registers_unplaced > 0 && !self.replica.replicates(key) {
                    live_unplaced += 1;
                }
                if let Some(at) = expires_at_ms {
                    expiring_registers += 1;
                    ttl_ms_sum = ttl_ms_sum.saturating_add(at - self.now_ms);
                }
            }
        }
        ShardStatus {
            registers,
            live_registers,
            expiring_registers,
            ttl_ms_sum,
            registers_removed: self.replica.registers_removed(),
            registers_dropped: self.replica.registers_dropped(),
            registers_unplaced,
            live_unplaced,
            awaiting_stage: u64::from(self.replica.is_awaiting_stage()),
            sweep: self.sweep_stats,
            proposer: self.replica.stats().clone(),
            commands: self.commands.clone(),
            latency_us: self.latency_us.clone(),
            flushes: self.store.flushes,
            flush_micros: self.store.flush_micros,
            state_writes: self.state_writes,
            links_broken: self.links_broken,
            log: None,
            psmr: None,
            writes_refused_for_space: self.writes_refused_for_space,
            rejoining: rejoin.is_some(),
            rejoin_peers_unfenced: rejoin.map_or(0, |(unfenced, _)| unfenced as u64),
            registers_recovered: rejoin.map_or(0, |(_, recovered)| recovered),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::ShardClock;

    #[test]
    fn the_clock_follows_the_wall_forwards_and_slews_after_a_step_back() {
        let mut clock = ShardClock::default();
        assert_eq!(clock.read(10_000, 0), 10_000);
        assert_eq!(clock.read(10_005, 5_000), 10_005);
        // A forward step is followed at once.
        assert_eq!(clock.read(20_000, 6_000), 20_000);
        // The wall steps back 1 s: the clock goes on at half speed...
        assert_eq!(clock.read(19_000, 7_000), 20_000);
        assert_eq!(clock.read(19_100, 107_000), 20_050);
        assert_eq!(clock.read(19_900, 907_000), 20_450);
        // ...and follows the wall again once it has caught up (after twice the step).
        assert_eq!(clock.read(21_000, 2_007_000), 21_000);
        assert_eq!(clock.read(21_001, 2_008_000), 21_001);
    }
}
