//! One replica (or one shard of one): the proposer and the acceptor of the registers it owns.
//!
//! The runtime feeds it client commands, messages, timer wake-ups and link failures, and takes
//! a [`ReplicaOutput`] after each step. The order the runtime must follow:
//!
//! 1. send `output.sends` (proposer messages; they promise nothing);
//! 2. commit `output.persist` through the store, which writes, flushes and only then releases
//!    the acceptor replies; send those;
//! 3. deliver `output.replies` to clients and schedule `output.timers`.
//!
//! Messages to itself go through the runtime like any other, so the local acceptor's replies
//! also wait for persistence. Acceptor states live in DRAM here as well as in the store: the
//! store is the durable copy, read back only at start-up.
use std::borrow::Cow;
use std::hash::{Hash, Hasher};

use logless_commands::command::Command;
use logless_placement::Stage;

use crate::acceptor::{self, AcceptorState};
use crate::buffers::keep_spare;
use crate::config::ProposerConfig;
use crate::held::Held;
use crate::ids::Round;
use crate::ids::{ClientTag, Key, NodeId, ProposerId};
use crate::message::PrepareKind;
use crate::message::{Envelope, Message};
use crate::persist::{Location, PersistBatch};
use crate::placement::{Placement, StageId};
use crate::proposer::{ClientReply, Proposer, ProposerOutput, ProposerStats, TimerRequest};
use crate::rejoin::{self, Counting, Rejoin};
use crate::removal::{self, Judge, ProbeReply, Removals};
use crate::table::KeyTable;
pub use crate::table::ScanCursor;

/// How many inputs ahead of the one being handled a batch asks the cache for the register
/// that input needs. A register of a large replica is rarely cached, and handling an input
/// takes a few hundred nanoseconds, about as long as a miss: this many hints keep several
/// misses in flight while the inputs before them are handled.
const PREFETCH_AHEAD: usize = 8;

/// A message's register between the two steps of a batch's prefetch: the index bucket of its
/// position in the acceptor's table or the proposer's.
#[derive(Clone, Copy)]
enum Ahead {
    Acceptor(usize),
    Proposer(usize),
}

/// What one or more steps of a replica produced.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct ReplicaOutput {
    /// Proposer messages: may be sent at once.
    pub sends: Vec<Envelope>,
    /// Acceptor state changes and their sealed replies.
    pub persist: PersistBatch,
    /// Answers to clients.
    pub replies: Vec<ClientReply>,
    /// Wake-ups to schedule.
    pub timers: Vec<TimerRequest>,
    /// A stage of the ring later than the installed placement's, the latest a peer showed
    /// since the last output: an acceptor refused this node's message with STALE, or a
    /// proposer sent one this node's acceptor holds back (it answers nothing of a stage it has
    /// not installed). The caller fetches that stage's configuration and installs its
    /// placement ([`Replica::install_placement`]); messages carry only the stage's id, not
    /// the configuration the placement is built from (docs/ring.md §4).
    pub newer_stage: Option<Stage>,
}

/// The vectors of an earlier [`ReplicaOutput`] handed back to [`Replica::recycle`]: their
/// contents are dropped and their memory reused. Any of them may be left empty (the default).
#[derive(Debug, Default)]
pub struct SpentOutput {
    /// The output's sends.
    pub sends: Vec<Envelope>,
    /// The replies its persist batch released.
    pub released: Vec<Envelope>,
    /// Its answers to clients.
    pub replies: Vec<ClientReply>,
    /// Its wake-ups.
    pub timers: Vec<TimerRequest>,
}

/// A replica's protocol state: proposer, acceptor states, and pending persistence.
#[derive(Clone, Debug)]
pub struct Replica {
    node: NodeId,
    proposer: Proposer,
    states: KeyTable<Held>,
    persist: PersistBatch,
    /// The state of every register the acceptor does not hold: ⊥ with `r_ack` at the shard's
    /// round floor, the highest `r_ack` of any register it forgot (see [`removal`]).
    fresh: AcceptorState,
    /// Removals' reads in progress.
    removals: Removals,
    /// Whether the installed placement is a joint stage that makes this node's acceptor a
    /// replica of slots it did not replicate before, and the caller has not raised the round
    /// floor for it yet ([`Replica::raise_floor_for_gained_slots`]): until then the acceptor
    /// answers nothing about a register of those slots (docs/ring.md §4, "Dead registers").
    /// A raise clears it only once the batch that writes the floor is taken
    /// ([`Replica::take_output`]), and a store that refuses that write for lack of space sets
    /// it again ([`Replica::round_floor_refused`]).
    gaining: bool,
    /// Whether the persist batch holds a raise of the round floor for the gained slots
    /// ([`Replica::raise_floor_for_gained_slots`]), to take effect once the batch is taken.
    raise_batched: bool,
    /// Whether the last output taken held that raise, whose commit the caller has not said
    /// the store refused (left out of equality: it only matters between a take and its
    /// commit).
    raise_taken: bool,
    /// Registers the acceptor forgot (a counter, left out of equality).
    registers_removed: u64,
    /// Registers forgotten since start because this node is no longer their replica
    /// ([`Replica::drop_unplaced`]).
    registers_dropped: u64,
    /// While the replica rejoins after losing its acceptor states: the peers it waits for and
    /// the registers it recovers (see [`Replica::rejoining`]).
    rejoin: Option<Rejoin>,
    /// Whether the acceptor answers nothing until the caller installs a placement (see
    /// [`Replica::awaiting_stage`]).
    awaiting_stage: bool,
    /// An emptied vector of released replies for the next batch (see [`Replica::recycle`]).
    spare_released: Vec<Envelope>,
}

impl PartialEq for Replica {
    fn eq(&self, other: &Replica) -> bool {
        self.node == other.node
            && self.proposer == other.proposer
            && self.states == other.states
            && self.persist == other.persist
            && self.fresh == other.fresh
            && self.removals == other.removals
            && self.gaining == other.gaining
            && self.raise_batched == other.raise_batched
            && self.rejoin == other.rejoin
            && self.awaiting_stage == other.awaiting_stage
    }
}

impl Eq for Replica {}

impl Hash for Replica {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.node.hash(state);
        self.proposer.hash(state);
        self.states.hash(state);
        self.persist.hash(state);
        self.fresh.hash(state);
        self.removals.hash(state);
        self.gaining.hash(state);
        self.raise_batched.hash(state);
        self.rejoin.hash(state);
        self.awaiting_stage.hash(state);
    }
}

impl Replica {
    /// A replica `node` in its `incarnation` (≥ 1, larger after every restart), with the
    /// acceptor states recovered from its store.
    pub fn new(
        node: NodeId,
        incarnation: u32,
        config: ProposerConfig,
        rng_seed: u64,
        recovered: impl IntoIterator<Item = (Key, AcceptorState)>,
    ) -> Replica {
        let recovered = recovered.into_iter();
        let located = recovered.map(|(key, state)| (key, state, Location::UNKNOWN));
        Replica::new_located(node, incarnation, config, rng_seed, located)
    }

    /// [`Replica::new`] with the location where the store holds each recovered state (see
    /// [`Location`]).
    pub fn new_located(
        node: NodeId,
        incarnation: u32,
        config: ProposerConfig,
        rng_seed: u64,
        recovered: impl IntoIterator<Item = (Key, AcceptorState, Location)>,
    ) -> Replica {
        let id = ProposerId { node, incarnation };
        let held = (recovered.into_iter())
            .map(|(key, state, location)| (key, Held::new(&state, location)));
        Replica {
            node,
            proposer: Proposer::new(id, config, rng_seed),
            states: held.collect(),
            persist: PersistBatch::new(),
            fresh: AcceptorState::default(),
            removals: Removals::default(),
            gaining: false,
            raise_batched: false,
            raise_taken: false,
            registers_removed: 0,
            registers_dropped: 0,
            rejoin: None,
            awaiting_stage: false,
            spare_released: Vec::new(),
        }
    }

    /// The replica rejoining the cluster after losing its acceptor states (a lost or foreign
    /// disk; see the `rejoin` module and `docs/lost-disk.md`): it sends FENCE to every peer,
    /// and its acceptor answers nothing about a register it does not hold until, every peer
    /// having answered FENCED, it recovered that register's state from a quorum of the others.
    /// Registers it holds (from its store) are served as usual: every state it wrote since it
    /// first rejoined was recovered or built on a recovered one. Must be called before any
    /// other input; the incarnation must be above every earlier one of this node.
    ///
    /// # Panics
    ///
    /// With a placement ([`ProposerConfig::placement`]): recovering a register from "a quorum
    /// of the others" would have to ask the key's replicas only, which is not built.
    pub fn rejoining(mut self) -> Replica {
        assert!(
            self.proposer.config().placement.is_none(),
            "rejoining with a placement is not supported yet"
        );
        if self.proposer.config().bugs.rejoin_without_fence {
            return self;
        }
        let peers: Vec<NodeId> = (self.proposer.config().acceptors.iter())
            .filter(|a| **a != self.node)
            .copied()
            .collect();
        for peer in &peers {
            self.send_fence(*peer);
        }
        self.rejoin = Some(Rejoin::new(peers, 0));
        self
    }

    /// The replica of a ring's node that (re)starts without knowing the ring's stage: its
    /// acceptor answers nothing (PREPARE, PAXOS_PREP and VOTE get no reply and change no
    /// state; one of a later stage than the placement's is still reported, as
    /// [`ReplicaOutput::newer_stage`]) until the caller installs a placement
    /// ([`Replica::install_placement`]), which it does once it has read the ring's stage.
    ///
    /// The placement a node starts with is the one its peer list derives, `Stable(1)`; after a
    /// change it is older than any the node installed before it stopped, and an acceptor that
    /// decided on that stage's messages would have gone back to a stage the ring left, which
    /// the fence's argument assumes no acceptor does (docs/ring.md §4, "A restarted node").
    /// Must be called before any other input.
    pub fn awaiting_stage(mut self) -> Replica {
        self.awaiting_stage = true;
        self
    }

    /// Whether the acceptor still answers nothing until a placement is installed (see
    /// [`Replica::awaiting_stage`]).
    pub fn is_awaiting_stage(&self) -> bool {
        self.awaiting_stage
    }

    fn send_fence(&mut self, peer: NodeId) {
        self.proposer.send(Envelope {
            to: peer,
            message: Message::Fence { key: Key::new("") },
        });
    }

    /// While the replica rejoins (see [`Replica::rejoining`]): how many peers have not answered
    /// FENCE yet, and how many registers it recovered since start. `None` once it is a full
    /// acceptor (it never stops rejoining while it runs: a register it does not hold may be
    /// one it forgot).
    pub fn rejoin_progress(&self) -> Option<(usize, u64)> {
        self.rejoin.as_ref().map(|r| (r.unfenced(), r.recovered()))
    }

    /// The replica with the shard's round floor recovered from its store (see
    /// [`AcceptorStore::write_round_floor`](crate::persist::AcceptorStore::write_round_floor)):
    /// every register it does not hold starts with that `r_ack`.
    pub fn with_round_floor(mut self, floor: Round) -> Replica {
        self.fresh.r_ack = floor;
        self
    }

    /// The shard's round floor.
    pub fn round_floor(&self) -> Round {
        self.fresh.r_ack
    }

    /// The highest round number the acceptor acknowledged for any register, the ones it forgot
    /// included (through the round floor): at least every round it ever promised for a
    /// register of a slot it replicates. A walk over the acceptor table. A node reports it
    /// once it installed a joint stage, when the acceptor no longer decides on messages of the
    /// stage before; the new acceptors of a moving slot start above the highest of a majority
    /// of its old replicas ([`Replica::raise_floor_for_gained_slots`]; docs/ring.md §4, "Dead
    /// registers").
    pub fn high_round(&self) -> u64 {
        (self.states.iter())
            .map(|(_, held)| held.r_ack().n)
            .fold(self.fresh.r_ack.n, u64::max)
    }

    /// Whether the acceptor holds back the registers of slots the installed joint stage gives
    /// it, waiting for [`Replica::raise_floor_for_gained_slots`]: true until the output whose
    /// batch writes the floor is taken, and again if the caller then reports that the store
    /// refused it ([`Replica::round_floor_refused`]).
    pub fn awaits_gained_floor(&self) -> bool {
        self.gaining
    }

    /// Raises the shard's round floor above round number `above` (the highest
    /// [`Replica::high_round`] of a majority of the old replicas of every slot the joint stage
    /// `stage` gives this node, each reported once it installed that stage), durably in the
    /// output's persist batch, and from then on answers for the registers of those slots: each
    /// starts at the floor unless the acceptor holds it (it holds none of them before: a node
    /// gains a slot only with none of its registers, docs/ring.md §4 "Slots a node left", and
    /// it answered nothing about them since it installed the stage). Returns false, changing
    /// nothing, if `stage` is not the installed stage.
    ///
    /// The acceptor goes on holding the slots back until the batch that writes the floor is
    /// taken ([`Replica::take_output`]): no reply about them shares the floor's batch. If the
    /// store then refuses the floor for lack of space, the caller says so
    /// ([`Replica::round_floor_refused`]) and the acceptor holds them back again, until a later
    /// raise is durable. A floor never decreases; the caller must let the batch commit, and
    /// see [`Replica::awaits_gained_floor`] false after it, before it reports the node ready
    /// for the next stage.
    pub fn raise_floor_for_gained_slots(&mut self, stage: StageId, above: u64) -> bool {
        if stage != self.stage() {
            return false;
        }
        let floor = Round {
            n: above.saturating_add(1),
            id: crate::ids::AttemptId::BOTTOM,
        };
        if floor > self.fresh.r_ack && !self.proposer.config().bugs.ignore_gained_floor {
            self.fresh.r_ack = floor;
        }
        self.persist.raise_floor(self.fresh.r_ack);
        if self.gaining {
            self.raise_batched = true;
        }
        true
    }

    /// The store refused the round floor of the last output's batch for lack of space
    /// ([`Committed::floor_refused`](crate::persist::Committed::floor_refused)): a raise for
    /// gained slots in that batch did not happen, and the acceptor holds their registers back
    /// again until the caller raises the floor again and the store takes it. The in-memory
    /// floor stays raised: above the durable one, it only makes the acceptor refuse rounds
    /// below it for registers it does not hold, and every answer that promises a round writes
    /// that register's own state (docs/ring.md §4, "Dead registers", "A full store").
    pub fn round_floor_refused(&mut self) {
        if std::mem::take(&mut self.raise_taken) {
            self.gaining = true;
        }
    }

    /// How many registers the acceptor forgot since start.
    pub fn registers_removed(&self) -> u64 {
        self.registers_removed
    }

    /// How many registers the acceptor forgot since start because the installed placement no
    /// longer makes this node their replica ([`Replica::drop_unplaced`]).
    pub fn registers_dropped(&self) -> u64 {
        self.registers_dropped
    }

    /// Whether this node's acceptor is a replica of `key` at the installed placement (always
    /// without one; in a joint stage, a replica of either configuration).
    pub fn replicates(&self, key: &Key) -> bool {
        self.proposer.is_acceptor_of(key)
    }

    /// Forgets, among up to `count` (at least one) acceptor states from where `cursor` points
    /// (as [`Replica::scan_states`]), those of registers this node is not a replica of at the
    /// installed placement: slots a change of the ring took from it (docs/ring.md §4, "Slots a
    /// node left"). Returns the cursor of the next call (0 once the table was walked), the
    /// states visited and the states forgotten. Nothing without a placement.
    ///
    /// The acceptor answers nothing about such a register (it drops every message about a key
    /// it does not replicate) and takes no new state for it, so its state only takes room; and
    /// it must be gone before a later change makes the node a replica of its slot again, which
    /// then counts the node as a new acceptor, one that starts with nothing (the coordinator
    /// checks the node's count of such states, [`Replica::registers_unplaced`], before it
    /// gives it slots). The store forgets each one as a removal does (`PersistBatch::remove`,
    /// behind the shard's round floor, unchanged): a crash before the store forgot it leaves
    /// the state in the store, and the next walk after the restart forgets it again.
    pub fn drop_unplaced(&mut self, cursor: u64, count: usize) -> (u64, usize, usize) {
        if self.proposer.config().placement.is_none() {
            return (0, 0, 0);
        }
        let (next, found) = self.states.scan(cursor, count);
        let visited = found.len();
        let unplaced: Vec<Key> = found
            .into_iter()
            .map(|(key, _)| key)
            .filter(|key| !self.proposer.is_acceptor_of(key))
            .cloned()
            .collect();
        for key in &unplaced {
            let held = self.states.remove(key);
            let location = held.map_or(Location::UNKNOWN, |held| held.location);
            self.persist.remove(key, location, self.fresh.r_ack);
            self.proposer.forget_idle(key);
        }
        self.registers_dropped += unplaced.len() as u64;
        (next, visited, unplaced.len())
    }

    /// How many acceptor states this node holds of registers it is not a replica of at the
    /// installed placement (0 without one): what [`Replica::drop_unplaced`] has left to
    /// forget. A walk over the whole table.
    pub fn registers_unplaced(&self) -> u64 {
        if self.proposer.config().placement.is_none() {
            return 0;
        }
        (self.states.iter())
            .filter(|(key, _)| !self.proposer.is_acceptor_of(key))
            .count() as u64
    }

    /// How many registers the acceptor holds.
    pub fn acceptor_registers(&self) -> usize {
        self.states.len()
    }

    /// The registers this node's acceptor holds dead at `now_ms` whose latest request was this
    /// node's: what [`Replica::remove_if_dead`] may remove.
    pub fn removal_candidates(&self, now_ms: u64) -> impl Iterator<Item = &Key> {
        self.states
            .iter()
            .filter(move |(_, held)| self.removal_candidate(&held.state(), now_ms))
            .map(|(key, _)| key)
    }

    /// Whether this node's acceptor state `state` is one [`Replica::remove_if_dead`] may remove
    /// at `now_ms`: dead for at least the grace (see
    /// [`ProposerConfig::removal_grace_ms`]) and last written by this node.
    pub fn removal_candidate(&self, state: &AcceptorState, now_ms: u64) -> bool {
        removal::removal_candidate(state, self.node, self.removal_clock(now_ms))
    }

    /// The time a removal judges deadness at: `now_ms` less the grace, so that a value counts
    /// as dead only once it has been expired for that long.
    fn removal_clock(&self, now_ms: u64) -> u64 {
        now_ms.saturating_sub(self.proposer.config().removal_grace_ms)
    }

    /// Starts removing `key` if removal is on, its proposer has no operation on it in progress
    /// and this node's acceptor holds it dead and last written by this node: reads every
    /// acceptor, and if all hold the same dead vote (see [`removal`]), has them forget it.
    /// Returns whether the read started; never with a placement (not built). A read that another call restarts, or whose answers a
    /// broken link lost, is abandoned.
    pub fn remove_if_dead(&mut self, now_ms: u64, key: &Key) -> bool {
        let config = self.proposer.config();
        // With a placement "every acceptor" is the key's replicas, which removal does not
        // count yet: it never starts (docs/ring.md §5).
        if !config.remove_dead_registers || config.placement.is_some() || self.proposer.is_busy(key)
        {
            return false;
        }
        let candidate = self
            .states
            .get(key)
            .is_some_and(|held| self.removal_candidate(&held.state(), now_ms));
        if !candidate {
            return false;
        }
        let acceptors = config.acceptors.len();
        let attempt = self.proposer.mint_attempt();
        self.removals.start(key, attempt, acceptors);
        self.proposer.send_to_everyone(Message::Prepare {
            key: key.clone(),
            kind: PrepareKind::Read,
            attempt,
            known_voted: Round::BOTTOM,
            stage: StageId::NONE,
        });
        true
    }

    /// This replica's node id.
    pub fn node(&self) -> NodeId {
        self.node
    }

    /// Switches thrifty reads and writes while the replica runs (see
    /// [`Proposer::set_thrifty`]).
    pub fn set_thrifty(&mut self, reads: bool, writes: bool) {
        self.proposer.set_thrifty(reads, writes);
    }

    /// Installs the placement of a new stage of the ring, for the proposer and for which keys
    /// the acceptor holds (see [`Proposer::install_placement`]); from now on the acceptor
    /// decides only on messages of that stage (the fence, see [`Replica::handle_message`]).
    /// The caller learns of stages from the ring's configuration register and from
    /// [`ReplicaOutput::newer_stage`]; the engine does no I/O.
    ///
    /// A joint stage that makes this node's acceptor a replica of slots it did not replicate
    /// before holds back every message about their registers until the caller raised the round
    /// floor for that stage ([`Replica::raise_floor_for_gained_slots`]); installing the stage
    /// already installed changes nothing.
    pub fn install_placement(&mut self, placement: Placement) {
        let new_stage = placement.stage_id() != self.stage();
        self.proposer.install_placement(placement);
        self.awaiting_stage = false;
        if new_stage {
            self.gaining = self.proposer.gains_any();
            self.raise_batched = false;
            self.raise_taken = false;
        }
    }

    /// The stage of the installed placement ([`StageId::NONE`] without one).
    pub fn stage(&self) -> StageId {
        self.proposer.stage()
    }

    /// The proposer's configuration.
    pub fn proposer_config(&self) -> &ProposerConfig {
        self.proposer.config()
    }

    /// The proposer's counters.
    pub fn stats(&self) -> &ProposerStats {
        self.proposer.stats()
    }

    /// How many attempt ids the proposer minted (see [`Proposer::attempts_minted`]).
    pub fn attempts_minted(&self) -> u64 {
        self.proposer.attempts_minted()
    }

    /// Whether the proposer holds register `key` (it drops idle registers beyond
    /// [`ProposerConfig::registers_max`](crate::config::ProposerConfig::registers_max)).
    pub fn proposer_holds(&self, key: &Key) -> bool {
        self.proposer.holds(key)
    }

    /// Has the proposer drop every register with no operation in progress (see
    /// [`Proposer::drop_idle_registers`](crate::proposer::Proposer::drop_idle_registers)).
    pub fn drop_idle_registers(&mut self) {
        self.proposer.drop_idle_registers();
    }

    /// The bytes the acceptor's and the proposer's tables of registers have allocated, in
    /// that order: their entries and indexes, not the values the entries point to.
    pub fn table_bytes(&self) -> (usize, usize) {
        (self.states.allocated_bytes(), self.proposer.table_bytes())
    }

    /// How many registers the proposer holds.
    pub fn proposer_registers(&self) -> usize {
        self.proposer.registers()
    }

    /// The acceptor state of `key` (`None` if it has none: see [`Replica::round_floor`]). The
    /// acceptor keeps small values packed (see `held`): the state returned is a copy.
    pub fn acceptor_state(&self, key: &Key) -> Option<AcceptorState> {
        self.states.get(key).map(Held::state)
    }

    /// Every register this replica's acceptor holds a state for (copies, as
    /// [`Replica::acceptor_state`]).
    pub fn acceptor_states(&self) -> impl Iterator<Item = (&Key, AcceptorState)> {
        self.states.iter().map(|(key, held)| (key, held.state()))
    }

    /// Every register this replica's acceptor holds a state for, with `None` if its value is
    /// not live at `now_ms` and otherwise when it expires (`Some(None)`: never): what a count
    /// of live registers needs from [`Replica::acceptor_states`], without copying each value.
    pub fn acceptor_liveness(
        &self,
        now_ms: u64,
    ) -> impl Iterator<Item = (&Key, Option<Option<u64>>)> {
        (self.states.iter()).map(move |(key, held)| (key, held.live_until(now_ms)))
    }

    /// Up to `count` (at least one) acceptor states from where `cursor` points, and the
    /// cursor of the next call (0 once every state was visited); cursor 0 starts. Every
    /// register this replica holds a state for from a scan's first call to its last is
    /// returned at least once, unless registers were removed meanwhile (the table may then
    /// rehash in place); a cursor from before the table grew restarts the scan (see
    /// [`ScanCursor`]). Tombstones and expired values are states
    /// too: callers filter them.
    pub fn scan_states(&self, cursor: u64, count: usize) -> (u64, Vec<(&Key, AcceptorState)>) {
        let (next, found) = self.states.scan(cursor, count);
        let states = found.into_iter().map(|(key, held)| (key, held.state()));
        (next, states.collect())
    }

    /// An acceptor state that `wanted` accepts, looked for from a position `seed` chooses (see
    /// `KeyTable::find_from`); `None` if there is none.
    pub fn find_state(
        &self,
        seed: u64,
        mut wanted: impl FnMut(&AcceptorState) -> bool,
    ) -> Option<(&Key, AcceptorState)> {
        (self.states.find_from(seed, |held| wanted(&held.state())))
            .map(|(key, held)| (key, held.state()))
    }

    /// A client command.
    pub fn handle_command(&mut self, now_ms: u64, client: ClientTag, key: Key, command: Command) {
        self.proposer.handle_command(now_ms, client, key, command);
    }

    /// A write-through of register `key` for a node's data mover, answered as GET is (see
    /// [`crate::proposer::Proposer::handle_write_through`]).
    pub fn handle_write_through(&mut self, now_ms: u64, client: ClientTag, key: Key) {
        self.proposer.handle_write_through(now_ms, client, key);
    }

    /// Client commands, in order: the same as [`Replica::handle_command`] for each, but every
    /// command's register is asked of the cache a few commands ahead (see `PREFETCH_AHEAD`).
    /// Empties `commands`.
    pub fn handle_commands(&mut self, now_ms: u64, commands: &mut Vec<(ClientTag, Key, Command)>) {
        // Three stages: a command's position in the proposer's table PREFETCH_AHEAD
        // commands ahead, its register half as far ahead, when the position has likely
        // arrived, and a quarter as far ahead, when the register has, the value it knows,
        // through the slot the first stage found. Slot `i % PREFETCH_AHEAD` is command `i`'s.
        // (Each step's address is what the step before loads: in fewer stages, the replica
        // waits for one miss before it can ask for the next.)
        const HALF: usize = PREFETCH_AHEAD / 2;
        const QUARTER: usize = PREFETCH_AHEAD / 4;
        let mut slots = [None; PREFETCH_AHEAD];
        for (slot, (_, key, _)) in slots.iter_mut().zip(commands.iter()) {
            *slot = self.proposer.prefetch_position(key);
        }
        for slot in slots.iter().take(HALF).flatten() {
            self.proposer.prefetch_slot(*slot);
        }
        let count = commands.len();
        let mut commands = commands.drain(..);
        let mut i = 0;
        while let Some((client, key, command)) = commands.next() {
            if i + HALF < count {
                if let Some(slot) = slots[(i + HALF) % PREFETCH_AHEAD] {
                    self.proposer.prefetch_slot(slot);
                }
            }
            if i + QUARTER < count {
                if let Some(slot) = slots[(i + QUARTER) % PREFETCH_AHEAD] {
                    self.proposer.prefetch_known_value(slot);
                }
            }
            slots[i % PREFETCH_AHEAD] = commands
                .as_slice()
                .get(PREFETCH_AHEAD - 1)
                .and_then(|(_, ahead, _)| self.proposer.prefetch_position(ahead));
            self.proposer.handle_command(now_ms, client, key, command);
            i += 1;
        }
    }

    /// Messages from `from`, in the order sent: the same as [`Replica::handle_message`] for
    /// each, but every message's register is asked of the cache a few messages ahead (see
    /// `PREFETCH_AHEAD`), so that the batch's cache misses overlap instead of following one
    /// another.
    pub fn handle_messages<'a>(
        &mut self,
        now_ms: u64,
        from: NodeId,
        messages: impl Iterator<Item = &'a Message> + Clone,
    ) {
        // Two stages, as for commands: a message's position in its table PREFETCH_AHEAD
        // messages ahead, and half as far ahead, when the position has likely arrived, the
        // entry it points to. Slot `i % PREFETCH_AHEAD` is message `i`'s. Asked for in one
        // step, the entry's miss could start only once the position's had ended, and the
        // replica would wait for the position (measured: the largest item of the replicas'
        // CPU at SET with pipelines, docs/results/bench-redis-2026-11-27).
        const HALF: usize = PREFETCH_AHEAD / 2;
        let mut slots = [None; PREFETCH_AHEAD];
        let mut ahead = messages.clone();
        for (slot, message) in slots.iter_mut().zip(ahead.by_ref()) {
            *slot = self.prefetch_position(message);
        }
        for found in slots.iter().take(HALF).flatten() {
            self.prefetch_entry(*found);
        }
        for (i, message) in messages.enumerate() {
            if let Some(found) = slots[(i + HALF) % PREFETCH_AHEAD] {
                self.prefetch_entry(found);
            }
            slots[i % PREFETCH_AHEAD] = ahead.next().and_then(|next| self.prefetch_position(next));
            self.handle_message(now_ms, from, message);
        }
    }

    /// Asks the cache for the position of the register that handling `message` reads first,
    /// in the table it is in (the first step of a prefetch: [`KeyTable::prefetch_position`]).
    #[inline]
    fn prefetch_position(&self, message: &Message) -> Option<Ahead> {
        if message.is_for_acceptor() {
            self.states
                .prefetch_position(message.key())
                .map(Ahead::Acceptor)
        } else {
            self.proposer
                .prefetch_position(message.key())
                .map(Ahead::Proposer)
        }
    }

    /// Asks the cache for the register whose position [`Replica::prefetch_position`] asked
    /// for (the second step).
    #[inline]
    fn prefetch_entry(&self, ahead: Ahead) {
        match ahead {
            // A decision reads the whole state, which spans the entry's two lines.
            Ahead::Acceptor(bucket) => self.states.prefetch_slot(bucket, Held::prefetch),
            Ahead::Proposer(bucket) => self.proposer.prefetch_slot(bucket),
        }
    }

    /// A message from `from`.
    ///
    /// The acceptor decides only on PREPARE, PAXOS_PREP and VOTE sent in the stage of the ring
    /// it installed (the fence, docs/ring.md §4; without a placement, stage and messages have
    /// none): one of an earlier stage is refused with STALE naming this node's stage, one of a
    /// later stage gets no answer, and the caller is told of that stage
    /// ([`ReplicaOutput::newer_stage`]).
    pub fn handle_message(&mut self, now_ms: u64, from: NodeId, message: &Message) {
        if let Some(rejoin) = self.rejoin.as_mut() {
            let retry_ms = self.proposer.config().phase_timeout_ms;
            if rejoin.fence_again(from, now_ms, retry_ms) {
                self.send_fence(from);
            }
        }
        if !message.is_for_acceptor() {
            match message {
                Message::Remove { key, voted } => self.forget(key, *voted),
                Message::Fence { key } => {
                    self.proposer.handle_fence(now_ms);
                    self.proposer.send(Envelope {
                        to: from,
                        message: Message::Fenced { key: key.clone() },
                    });
                }
                Message::Fenced { .. } => {
                    if let Some(rejoin) = self.rejoin.as_mut() {
                        rejoin.on_fenced(from);
                    }
                }
                Message::Ack {
                    key,
                    r_ack,
                    r_voted,
                    value,
                    req,
                    req_prev,
                    ..
                } if self
                    .rejoin
                    .as_ref()
                    .is_some_and(|r| r.claims(key, r_ack.id)) =>
                {
                    let reply = rejoin::Reply::Ack {
                        r_ack: *r_ack,
                        r_voted: *r_voted,
                        value: value.as_ref(),
                        req: *req,
                        req_prev: *req_prev,
                    };
                    self.on_recovery_answer(from, key, reply);
                }
                Message::Nack { key, round, r_ack }
                    if self
                        .rejoin
                        .as_ref()
                        .is_some_and(|r| r.claims(key, round.id)) =>
                {
                    self.on_recovery_answer(from, key, rejoin::Reply::Nack(*r_ack));
                }
                Message::Ack {
                    key,
                    r_ack,
                    r_voted,
                    value,
                    req,
                    ..
                } if !self.removals.is_empty() && self.removals.claims(key, r_ack.id) => {
                    let reply = ProbeReply {
                        r_ack: *r_ack,
                        r_voted: *r_voted,
                        value: value.as_ref(),
                        req: *req,
                    };
                    self.on_removal_ack(now_ms, from, key, reply);
                }
                _ => self.proposer.handle_message(now_ms, from, message),
            }
            return;
        }
        if self.awaiting_stage {
            // The node has not read the ring's stage since it started: silent, as a crashed
            // acceptor (see `awaiting_stage`), but a later stage still wakes the read.
            self.proposer.note_stage(message.stage());
            return;
        }
        let key = message.key();
        if message.stage() != self.proposer.stage() && !self.proposer.config().bugs.accept_any_stage
        {
            self.fence(from, message);
            return;
        }
        if !self.proposer.is_acceptor_of(key) {
            // Not a replica of the key in this node's placement, though the sender's stage is
            // this node's: the two were given different configurations for one stage, which
            // the node must not do. Dropped rather than refused: an answer (even ⊥) could
            // count towards that proposer's quorum of acceptors that do not hold the key, while
            // silence only delays it, as a crashed acceptor would. (A sender of another stage
            // was fenced above.)
            return;
        }
        if self.gaining && self.proposer.gains(key) {
            // A new replica of the key's slot whose round floor is not raised yet: silent, as
            // a crashed acceptor, so that it promises nothing below the old replicas' rounds.
            return;
        }
        if self.rejoin.is_some() && self.states.get(key).is_none() {
            // A recovery raises the other acceptors' rounds. Started at a write's phase 1 it
            // would overtake that write's VOTE and reject it, every time; started at the VOTE
            // (or at a read, which rounds do not disturb), it arrives after it.
            let disturbs_a_write = matches!(
                message,
                Message::Prepare {
                    kind: PrepareKind::Write,
                    ..
                } | Message::PaxosPrep { .. }
            );
            if !disturbs_a_write {
                self.recover(now_ms, key);
            }
            return;
        }
        let existing = self.states.get_mut(key);
        let (state, location) = match &existing {
            // A value kept in the entry is copied out only for a decision that reads it; the
            // others get the fresh state's (absent) value in its place.
            Some(held) if acceptor::reads_value(held.r_voted(), message) => {
                (Cow::Owned(held.state()), held.location)
            }
            Some(held) => (
                Cow::Owned(held.state_with(self.fresh.value.clone())),
                held.location,
            ),
            None => (Cow::Borrowed(&self.fresh), Location::UNKNOWN),
        };
        let next = self.persist.decide_at(key, location, &state, from, message);
        match (existing, next) {
            (Some(held), Some(next)) => held.set(next),
            (None, Some(next)) => {
                self.states
                    .insert(key.clone(), Held::new(next, Location::UNKNOWN));
            }
            (_, None) => {}
        }
    }

    /// A message for acceptors sent in another stage of the ring than the installed one: an
    /// earlier stage is refused with STALE (nothing changes, so the refusal needs no
    /// persistence), a later one is held back until the caller installs it.
    #[cold]
    fn fence(&mut self, from: NodeId, message: &Message) {
        let (theirs, ours) = (message.stage(), self.proposer.stage());
        if theirs > ours {
            self.proposer.note_stage(theirs);
            return;
        }
        self.proposer.send(Envelope {
            to: from,
            message: Message::Stale {
                key: message.key().clone(),
                stage: ours,
            },
        });
    }

    /// A VOTE or a read about `key`, which the rejoining replica does not hold: no answer (it
    /// counts as crashed for the register), but its recovery starts if it may.
    fn recover(&mut self, now_ms: u64, key: &Key) {
        let retry_ms = self.proposer.config().phase_timeout_ms;
        let rejoin = self.rejoin.as_mut().expect("rejoining");
        if !rejoin.may_start(key, now_ms, retry_ms) {
            return;
        }
        let attempt = self.proposer.mint_attempt();
        let acceptors = self.proposer.config().acceptors.clone();
        let prepare = rejoin.start(key, now_ms, attempt, acceptors.len());
        for to in acceptors.into_iter().filter(|a| *a != self.node) {
            self.proposer.send(Envelope {
                to,
                message: prepare.clone(),
            });
        }
    }

    /// Another acceptor's answer to the recovery of `key`: once a quorum agrees, the acceptor
    /// takes the state they hold, durably, and serves the register from then on.
    fn on_recovery_answer(&mut self, from: NodeId, key: &Key, reply: rejoin::Reply<'_>) {
        let config = self.proposer.config();
        let Some(index) = config.acceptors.iter().position(|a| *a == from) else {
            return;
        };
        let counting = Counting {
            acceptors: config.acceptors.len(),
            quorum: config.quorum(),
        };
        let rejoin = self.rejoin.as_mut().expect("rejoining");
        if let Some(state) = rejoin.on_answer(key, index, reply, &counting) {
            let location = self.location(key);
            self.states.insert(key.clone(), Held::new(&state, location));
            self.persist.write(key, location, state);
        }
    }

    /// An acceptor's answer to this node's removal read of `key`.
    fn on_removal_ack(&mut self, now_ms: u64, from: NodeId, key: &Key, reply: ProbeReply<'_>) {
        let config = self.proposer.config();
        let Some(index) = config.acceptors.iter().position(|a| *a == from) else {
            return;
        };
        let judge = Judge {
            node: self.node,
            acceptors: config.acceptors.len(),
            quorum: config.quorum(),
            now_ms: self.removal_clock(now_ms),
            on_a_quorum: config.bugs.remove_before_all_hold_tombstone,
        };
        if let Some(voted) = self.removals.on_ack(key, index, reply, &judge) {
            self.proposer.send_to_everyone(Message::Remove {
                key: key.clone(),
                voted,
            });
        }
    }

    /// REMOVE: forgets `key` if the acceptor still holds exactly the dead vote `voted`, behind
    /// the round floor raised to its `r_ack`.
    fn forget(&mut self, key: &Key, voted: Round) {
        let Some(state) = self.states.get(key).map(Held::state) else {
            return;
        };
        if !removal::forgettable(&state, voted) {
            return;
        }
        if !self.proposer.config().bugs.skip_removal_fence {
            self.fresh.r_ack = self.fresh.r_ack.max(state.r_ack);
        }
        let location = self.location(key);
        self.states.remove(key);
        self.persist.remove(key, location, self.fresh.r_ack);
        self.proposer.forget_idle(key);
        self.registers_removed += 1;
    }

    /// The store refused the last write of `key` for lack of space, and holds `durable` for it
    /// (`None`: nothing): the acceptor goes back to that state, as if the messages whose
    /// replies were dropped had been lost (see [`PersistBatch::commit_or_refuse`]).
    pub fn restore(&mut self, key: &Key, durable: Option<AcceptorState>) {
        match durable {
            Some(state) => {
                // A refused write changed nothing in the store: the location stays.
                let location = self.location(key);
                self.states.insert(key.clone(), Held::new(&state, location));
            }
            None => {
                self.states.remove(key);
            }
        }
    }

    /// Where the store holds the state of `key`, as far as the acceptor knows
    /// ([`Location::UNKNOWN`] for a register it does not hold, or whose first write's
    /// location it was not given yet).
    pub fn location(&self, key: &Key) -> Location {
        self.states
            .get(key)
            .map_or(Location::UNKNOWN, |held| held.location)
    }

    /// The store holds the states of `placed` at these locations now (see
    /// [`Committed::placed`](crate::persist::Committed::placed)): kept for their next writes.
    /// A register the acceptor no longer holds is skipped.
    pub fn placed(&mut self, placed: &[(Key, Location)]) {
        for (key, location) in placed {
            if let Some(held) = self.states.get_mut(key) {
                held.location = *location;
            }
        }
    }

    /// A wake-up requested earlier.
    pub fn handle_timer(&mut self, now_ms: u64, key: &Key, token: u64) {
        self.proposer.handle_timer(now_ms, key, token);
    }

    /// The link to `peer` broke; messages on it may have been lost.
    pub fn handle_link_broken(&mut self, peer: NodeId) {
        self.removals.clear();
        if let Some(rejoin) = self.rejoin.as_mut() {
            rejoin.clear_probes();
            if rejoin.awaits_fence_from(peer) {
                self.send_fence(peer);
            }
        }
        self.proposer.handle_link_broken(peer);
    }

    /// Takes everything produced since the last call. A raise of the round floor for gained
    /// slots in its batch takes effect now ([`Replica::raise_floor_for_gained_slots`]).
    pub fn take_output(&mut self) -> ReplicaOutput {
        self.raise_taken = std::mem::take(&mut self.raise_batched);
        if self.raise_taken {
            self.gaining = false;
        }
        let ProposerOutput {
            sends,
            replies,
            timers,
        } = self.proposer.drain_output();
        ReplicaOutput {
            sends,
            persist: self
                .persist
                .take_into(std::mem::take(&mut self.spare_released)),
            replies,
            timers,
            newer_stage: self.proposer.take_newer_stage(),
        }
    }

    /// Takes back the vectors of an earlier output the runtime is done with, so that later
    /// outputs fill the same memory, likely still cached, rather than fresh memory. Optional: a
    /// runtime may as well drop them.
    pub fn recycle(&mut self, spent: SpentOutput) {
        self.proposer.recycle(ProposerOutput {
            sends: spent.sends,
            replies: spent.replies,
            timers: spent.timers,
        });
        keep_spare(&mut self.spare_released, spent.released);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_prefetched_acceptor_state_is_asked_for_on_both_its_lines() {
        assert_eq!(crate::table::entry_bytes::<Held>(), 128);
        let lines = Held::prefetched_lines();
        assert_eq!(lines.into_iter().collect::<Vec<_>>(), [0, 1]);
    }
}
