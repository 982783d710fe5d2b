//! The proposer of RMWPaxos, one state machine per register (Algorithm 3 with §5.8).
//!
//! A proposer takes client commands, groups the pending commands of one register into one
//! operation (a read batch answered by one read, or a write batch applied in order into one
//! proposal), and drives that operation through the phases:
//!
//! * **read**: PREPARE(read) to a quorum (this node's acceptor first, then the next ones in the
//!   configured order, skipping acceptors that failed to answer a read); if those replies agree
//!   on `r_voted`, that value answers every read of the batch and no acceptor state changes.
//!   When they disagree, or one does not answer in time ([`ProposerConfig::thrifty_wait_ms`])
//!   or its link breaks, the same PREPARE goes to the remaining acceptors. An inconsistent view
//!   keeps collecting late replies and asks everyone again up to X times
//!   ([`ProposerConfig::read_retries_max`]) without raising rounds; then it writes the highest
//!   vote through (PAXOS_PREP, VOTE) and reads again. Asking a quorum first changes no safety
//!   argument (any consistent quorum decides); it saves a third of a read's messages.
//! * **write**: PREPARE(write) to all (incremental rounds). A quorum consistent on `r_voted` and
//!   `r_ack` allows a successor proposal `cmds(v)` in the acknowledged round; a quorum that only
//!   agrees on `r_ack` gets the highest vote written through first. Anything else retries at
//!   once with PAXOS_PREP above the highest round seen (lines 21–24); if that fails too, or a
//!   VOTE is rejected, the proposer waits a randomised backoff and starts again with an
//!   incremental PREPARE. A round computed before the backoff would be stale after it: a
//!   proposer on the fast path raises `r_ack` by one round per write, so an explicit round from
//!   before the wait is rejected again and again for as long as that proposer keeps writing.
//! * **fast write**: after a successful proposal in round `r`, acceptors have pre-acknowledged
//!   `(r.n + 1, r.id)`, so the next batch skips phase 1 and is voted in one round trip. Any
//!   rejection drops that cached round. With [`ProposerConfig::thrifty_writes`] its VOTE goes
//!   to the quorum a read would ask first, and to the rest only when that quorum does not
//!   answer in time or its link breaks; the acceptor left out keeps an older vote, which makes
//!   reads through it inconsistent (they widen), so this suits a register whose commands all
//!   go to one proposer. Where phase 2 goes changes no safety argument: a value is chosen when
//!   a quorum voted for it, whichever quorum.
//!
//! Exactly-once: each proposal gets a fresh [`ReqId`]; an operation remembers every proposal
//! it made (with the replies it would give) until one is known chosen — from a consistent
//! quorum whose request id is one of them, or from LEARNED — or the request times out. When a
//! link to an acceptor breaks while proposals are outstanding, that acceptor's phase 1 replies
//! stop counting for the operation (the paper's "treat it as crashed"), because a LEARNED it
//! sent may have been lost.
//!
//! The proposer does no I/O: inputs are `handle_*` calls with the current time, outputs are
//! collected in [`ProposerOutput`] and taken with [`Proposer::drain_output`].
use std::collections::VecDeque;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

use logless_commands::command::{Command, Reply};
use logless_commands::value::Register;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use smallvec::SmallVec;
use thiserror::Error;

use crate::armed::{self, ArmedTimers, TimerSlot};
use crate::buffers::{keep_spare, room_for_next};
use crate::config::ProposerConfig;
use crate::held::{HeldValue, PackedRound};
use crate::ids::{AttemptId, ClientTag, Key, NodeId, ProposerId, ReqId, Round};
use crate::incidental::Incidental;
use crate::message::{Envelope, Message, PrepareKind};
use crate::placement::{Placement, StageId};
use crate::quorum::{AcceptorSet, AckInfo, AckTable, Quorum, Verdict};
use crate::table::{prefetch_line, KeyTable};

/// Why a command did not get a result.
#[derive(Clone, Copy, Debug, Error, PartialEq, Eq, Hash)]
pub enum ProposeError {
    /// Definitely not applied; safe to retry.
    #[error("not applied, try again")]
    NotApplied,
    /// A proposal containing the command may or may not have been chosen.
    #[error("outcome unknown: the command may or may not have been applied")]
    OutcomeUnknown,
    /// Too many commands wait on this register.
    #[error("too many pending commands on this key")]
    Overloaded,
    /// Definitely not applied: the replica's disk has no space for a register it does not
    /// hold yet. Given by the runtime, which knows its store, never by the proposer.
    #[error("no disk space for a new key")]
    DiskFull,
    /// Definitely not applied: so many acceptors answered FULL (no disk space for the register)
    /// to the operation's phase 1 that the others cannot make a quorum, and nothing of it was
    /// proposed.
    #[error("too many replicas have no disk space for a new key")]
    QuorumFull,
}

/// The answer to one client command.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ClientReply {
    /// The tag the command came with.
    pub client: ClientTag,
    /// Its result.
    pub result: Result<Reply, ProposeError>,
}

/// A wake-up the proposer asks for. Stale tokens are ignored, so the runtime never cancels.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct TimerRequest {
    /// The register to wake.
    pub key: Key,
    /// Must be passed back to [`Proposer::handle_timer`].
    pub token: u64,
    /// When, in the same milliseconds as `now_ms`.
    pub at_ms: u64,
}

/// Everything the proposer wants done, in order of production.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct ProposerOutput {
    /// Messages to acceptors (including the local one).
    pub sends: Vec<Envelope>,
    /// Answers to clients.
    pub replies: Vec<ClientReply>,
    /// Wake-ups.
    pub timers: Vec<TimerRequest>,
}

/// Counters for observability and the demo's table.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ProposerStats {
    /// Read operations (batches) completed.
    pub reads: u64,
    /// Write operations (batches) completed, including denied ones.
    pub writes: u64,
    /// Writes that took the fast path to completion.
    pub fast_writes: u64,
    /// Writes answered without phase 2 because no command changed the register.
    pub denied: u64,
    /// Reads that asked a quorum first and then had to ask the remaining acceptors.
    pub reads_widened: u64,
    /// Fast writes that voted with a quorum first and then had to ask the remaining acceptors.
    pub writes_widened: u64,
    /// Phase retries (PAXOS_PREP or read retries).
    pub retries: u64,
    /// Write-throughs of another proposal.
    pub write_throughs: u64,
    /// Rejections received.
    pub nacks: u64,
    /// Proposals completed through LEARNED or a consistent quorum with their own request id.
    pub learned: u64,
    /// Operations that timed out.
    pub timeouts: u64,
    /// Idle registers dropped to keep within [`ProposerConfig::registers_max`].
    pub registers_dropped: u64,
    /// Operations answered [`ProposeError::QuorumFull`]: too many acceptors had no space.
    pub refused_for_space: u64,
    /// STALE refusals received: an acceptor installed a later stage of the ring than this
    /// proposer (the operation backs off and retries; it succeeds once the caller installed
    /// that stage); and phases under way that an install dropped, their register's quorums
    /// changed ([`Proposer::install_placement`]).
    pub stale_stage: u64,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Pending {
    client: ClientTag,
    command: Command,
    /// Whether the command only reads (cached from the command).
    read_only: bool,
    /// Whether it asks for a write-through ([`Proposer::handle_write_through`]).
    write_through: bool,
}

/// Where a read stands with a write-through it was asked for
/// ([`Proposer::handle_write_through`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Forced {
    /// None asked for: a consistent quorum answers.
    No,
    /// Asked for and not done yet: a consistent quorum does not answer, phase 1 follows.
    Wanted,
    /// Done: the next consistent quorum answers.
    Done,
}

/// A proposal this operation made: its id and the replies its commands get if it is chosen.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Proposal {
    req: ReqId,
    replies: Replies,
}

/// The replies of a batch's commands, inline for one (a batch of one is the common case, and
/// every write makes a proposal).
type Replies = SmallVec<[Reply; 1]>;

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct PhaseOne {
    attempt: AttemptId,
    /// Whether the acceptors assign the round (PREPARE) rather than the proposer (PAXOS_PREP).
    incremental: bool,
    acks: AckTable,
    nacked: AcceptorSet,
    /// The acceptors that answered FULL.
    full: AcceptorSet,
    r_ack_seen: Round,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct PhaseTwo {
    round: Round,
    value: Arc<Register>,
    /// The proposal being voted, or `None` for a write-through.
    proposal: Option<usize>,
    /// The request ids the VOTE named, for sending it to more acceptors.
    req_cur: Option<ReqId>,
    req_prev: Option<ReqId>,
    /// The acceptors the VOTE went to: a quorum for a thrifty fast write until it widens,
    /// otherwise everyone.
    asked: AcceptorSet,
    voted: AcceptorSet,
    nacked: AcceptorSet,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct ReadCollect {
    /// Inline for the first attempt and one retry.
    attempts: SmallVec<[AttemptId; 2]>,
    acks: AckTable,
    /// The acceptors the latest attempt went to: a quorum at first, everyone once widened.
    asked: AcceptorSet,
    current_replies: AcceptorSet,
    retries: u32,
    previous_rounds: Option<Vec<(Round, Round)>>,
}

impl Phase {
    /// Whether this phase asked only a quorum (a thrifty read or fast write) and still waits
    /// for acceptor `index`.
    fn awaits_from_a_quorum(&self, index: usize, everyone: AcceptorSet) -> bool {
        let (asked, silent) = match self {
            Phase::Read(collect) => (collect.asked, collect.silent()),
            Phase::Vote(two) => (two.asked, two.silent()),
            _ => return false,
        };
        !everyone.without(asked).is_empty() && silent.contains(index)
    }
}

impl PhaseTwo {
    /// The VOTE of this phase, sent in `stage`.
    fn vote(&self, key: &Key, stage: StageId) -> Message {
        Message::Vote {
            key: key.clone(),
            round: self.round,
            value: self.value.clone(),
            req_cur: self.req_cur,
            req_prev: self.req_prev,
            stage,
        }
    }

    /// The acceptors asked that have not answered.
    fn silent(&self) -> AcceptorSet {
        self.asked.without(self.voted.union(self.nacked))
    }
}

impl ReadCollect {
    /// The acceptors the latest attempt asked that have not answered it.
    fn silent(&self) -> AcceptorSet {
        self.asked.without(self.current_replies)
    }

    /// Empties the collection for a new read: equal to a new one.
    fn reset(&mut self, acceptors: usize) {
        self.attempts.clear();
        self.acks.reset(acceptors);
        self.asked = AcceptorSet::default();
        self.current_replies = AcceptorSet::default();
        self.retries = 0;
        self.previous_rounds = None;
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum Phase {
    Read(ReadCollect),
    Prepare(PhaseOne),
    Vote(PhaseTwo),
    /// Waiting before retrying phase 1 with an incremental PREPARE.
    Backoff,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Operation {
    read: bool,
    /// Whether the first proposal went out on the fast path (no phase 1).
    fast: bool,
    batch: Vec<Pending>,
    proposals: Vec<Proposal>,
    excluded: AcceptorSet,
    deadline_ms: u64,
    retries: u32,
    phase: Phase,
    /// When the current phase gives up waiting (timeout, straggler wait or end of backoff).
    wake_ms: u64,
    /// Commands that arrived during this operation, for the next ones.
    queue: VecDeque<Pending>,
    /// A read asked to write the register through.
    forced: Forced,
}

/// The pre-acknowledged next round after our own successful proposal (§5.8): the successor of
/// the register's `known` round, on top of its `known` value (both stay as they were while the
/// fast path is held: whatever replaces them drops it first). Only the request is kept here,
/// so that an idle register stays small.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct FastPath {
    base_req: Option<ReqId>,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct RegisterProposer {
    /// The operation in progress, boxed so that an idle register stays small; it holds the
    /// commands queued behind it too, so an idle register has none.
    op: Option<Box<Operation>>,
    timer_token: u64,
    /// When the timer with the current token fires, if one is armed. A later wake-up needs no
    /// new timer: the armed one fires first and re-arms.
    timer_armed_ms: ArmedAt,
    /// The armed timer's slot in [`Shared::armed`] (incidental: equal to any other).
    timer_slot: TimerSlot,
    fast: Option<FastPath>,
    /// A round and its value that this proposer holds, so acceptors may omit it (see
    /// [`Known`]).
    known: Known,
    /// Whether a command came since the proposer last dropped idle registers: incidental to
    /// the protocol (it only chooses which idle registers are dropped).
    used: Incidental<bool>,
}

impl RegisterProposer {
    /// Asks the cache for the fields every command and reply reads first: its operation and
    /// what it knows.
    #[inline]
    fn prefetch(&self) {
        prefetch_line(&self.op);
        prefetch_line(&self.known.value);
    }

    fn new() -> RegisterProposer {
        RegisterProposer {
            op: None,
            timer_token: 0,
            timer_armed_ms: ArmedAt::NONE,
            timer_slot: TimerSlot::default(),
            fast: None,
            known: Known::new(Round::BOTTOM, &Arc::new(Register::default())),
            used: Incidental(true),
        }
    }
}

/// The round and value a register's proposer knows chosen, kept as the acceptor's table keeps
/// them (`held`): the round without its padding and a short plain value inside, any other in
/// the `Arc` it came in. Most registers the proposer caches are idle, and an `Arc` of a short
/// string took 136 bytes each (`examples/memory.rs`), more than the register's table entry:
/// the price is a copy of the value into a new `Arc` when a write applies its commands to it
/// or a reply that left it out is answered from it. The packing is canonical, so equality and
/// hashes are those of the round and value.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Known {
    value: HeldValue,
    round: PackedRound,
}

impl Known {
    fn new(round: Round, value: &Arc<Register>) -> Known {
        Known {
            value: HeldValue::new(value),
            round: PackedRound::new(round),
        }
    }

    fn round(&self) -> Round {
        self.round.get()
    }

    fn value(&self) -> Arc<Register> {
        self.value.get()
    }
}

/// When a register's armed timer fires, if one is armed: an `Option<u64>` in 8 bytes, which
/// keeps an idle register's entry within two cache lines. `u64::MAX` is none: a timer asked
/// for then is armed a millisecond earlier (either is half a billion years away).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct ArmedAt(u64);

impl ArmedAt {
    const NONE: ArmedAt = ArmedAt(u64::MAX);

    fn get(self) -> Option<u64> {
        (self != ArmedAt::NONE).then_some(self.0)
    }

    fn set(&mut self, at_ms: u64) {
        self.0 = at_ms.min(u64::MAX - 1);
    }

    fn take(&mut self) -> Option<u64> {
        std::mem::replace(self, ArmedAt::NONE).get()
    }
}

/// Finished operations kept for their buffers, at most this many.
const SPARE_OPERATIONS_MAX: usize = 1_024;

/// The proposer of one node (or one shard of it): all registers it coordinates.
///
/// Equality and hashing (for the model checker) cover the protocol state only: the random
/// number generator (which only spaces retries in time), the counters and the spare buffers are
/// left out.
#[derive(Clone, Debug)]
pub struct Proposer {
    shared: Shared,
    registers: KeyTable<RegisterProposer>,
}

/// What the steps of every register share: identity, configuration, attempt ids, randomness,
/// output and counters.
#[derive(Clone, Debug)]
struct Shared {
    id: ProposerId,
    config: ProposerConfig,
    /// The acceptors of the register being stepped (every acceptor without a placement; see
    /// [`Shared::enter`]), and which of them make a quorum.
    members: AcceptorSet,
    quorum: Quorum,
    /// The stage of the installed placement, which every PREPARE, PAXOS_PREP and VOTE carries.
    stage: StageId,
    /// The latest stage after `stage` that an acceptor's STALE or a peer's message showed
    /// since the caller last took it ([`StageId::NONE`] if none): the caller fetches and
    /// installs it.
    newer_stage: StageId,
    next_seq: u64,
    rng: SmallRng,
    out: ProposerOutput,
    stats: ProposerStats,
    /// The live token of every register's armed timer (those whose `timer_armed_ms` is set),
    /// by slot: most wake-ups are stale by the time they fire, and this dense table tells so
    /// without a lookup in the large (and likely uncached) table of registers. Derived from
    /// the registers, so left out of equality and hashing.
    armed: ArmedTimers,
    /// This node's place among the acceptors, if it is one: reads ask it first.
    own_index: Option<usize>,
    /// Acceptors that left a thrifty read or fast write unanswered or whose link broke, until a
    /// reply of theirs counts for an operation in progress: reads and fast writes ask a quorum
    /// without them. Kept only with thrifty reads or writes. Replies that are ignored (stale
    /// rounds and attempts) do not clear it, so that a reply ignored once is ignored for ever,
    /// as the model's removal of dead messages assumes.
    suspected: AcceptorSet,
    /// Finished operations, emptied, so that starting one allocates nothing. Boxed because
    /// they move into and out of the registers' `op` as boxes.
    #[allow(clippy::vec_box)]
    spare: Vec<Box<Operation>>,
    /// Emptied vectors for the next output (see [`Proposer::recycle`]).
    spare_out: ProposerOutput,
    /// How many registers a new one must exceed to drop idle ones: the bound, or more when
    /// the last drop found too few idle, so that a table of busy registers is not searched
    /// again at every new register.
    drop_at: usize,
}

impl Shared {
    fn mint(&mut self) -> AttemptId {
        self.next_seq += 1;
        AttemptId {
            proposer: self.id,
            seq: self.next_seq,
        }
    }

    fn mint_request(&mut self) -> ReqId {
        ReqId::new(self.mint()).expect("minted sequence numbers start at 1")
    }

    /// Makes the register of `key` the one whose acceptors count: every step of a register
    /// enters it first. Without a placement every register has every acceptor, set once.
    #[inline]
    fn enter(&mut self, key: &Key) {
        if self.config.placement.is_some() {
            self.quorum = self.config.quorum_of(key.as_bytes());
            self.members = self.quorum.everyone();
        }
    }

    /// How many acceptors the current register has.
    fn acceptors(&self) -> usize {
        self.members.len()
    }

    /// The size of reply tables: every acceptor of the configuration has its place, so that
    /// indices are the same for every register.
    fn table_len(&self) -> usize {
        self.config.acceptors.len()
    }

    /// Every acceptor of the current register, as a set.
    fn everyone(&self) -> AcceptorSet {
        self.members
    }

    /// The acceptors a new read asks: [`Shared::quorum_targets`] if reads are thrifty,
    /// otherwise everyone.
    fn read_targets(&self) -> AcceptorSet {
        if self.config.thrifty_reads {
            self.quorum_targets()
        } else {
            self.everyone()
        }
    }

    /// The acceptors a fast write votes with first: [`Shared::quorum_targets`] if writes are
    /// thrifty, otherwise everyone.
    fn fast_write_targets(&self) -> AcceptorSet {
        if self.config.thrifty_writes {
            self.quorum_targets()
        } else {
            self.everyone()
        }
    }

    /// How long a phase that asked `asked` waits before asking the rest (a quorum) or giving
    /// up (everyone).
    fn wait_ms(&self, asked: AcceptorSet) -> u64 {
        if !self.everyone().without(asked).is_empty() {
            self.config.thrifty_wait_ms
        } else {
            self.config.phase_timeout_ms
        }
    }

    /// A quorum of unsuspected acceptors, from this node's own onwards in the configured
    /// order; everyone if too many are suspected. Reads and fast writes of one proposer ask the
    /// same quorum, so that its reads see its fast writes consistent.
    fn quorum_targets(&self) -> AcceptorSet {
        let acceptors = self.table_len();
        let everyone = self.everyone();
        // A proposer that is no acceptor spreads its reads by their sequence number.
        let start = self
            .own_index
            .unwrap_or_else(|| (self.next_seq % acceptors as u64) as usize);
        let unsuspected = (start..acceptors)
            .chain(0..start)
            .filter(|&index| everyone.contains(index) && !self.suspected.contains(index));
        self.quorum.first_quorum(unsuspected).unwrap_or(everyone)
    }
}

/// One step of one register: its key, its state and what all registers share. Every input
/// looks its register up once and then works through this.
struct Step<'a> {
    key: &'a Key,
    reg: &'a mut RegisterProposer,
    shared: &'a mut Shared,
}

impl<'a> Step<'a> {
    /// The step of register `key`, whose acceptors count from now on.
    #[inline]
    fn new(key: &'a Key, reg: &'a mut RegisterProposer, shared: &'a mut Shared) -> Step<'a> {
        shared.enter(key);
        Step { key, reg, shared }
    }
}

impl std::ops::AddAssign<&ProposerStats> for ProposerStats {
    fn add_assign(&mut self, other: &ProposerStats) {
        self.reads += other.reads;
        self.writes += other.writes;
        self.fast_writes += other.fast_writes;
        self.denied += other.denied;
        self.reads_widened += other.reads_widened;
        self.writes_widened += other.writes_widened;
        self.retries += other.retries;
        self.write_throughs += other.write_throughs;
        self.nacks += other.nacks;
        self.learned += other.learned;
        self.timeouts += other.timeouts;
        self.registers_dropped += other.registers_dropped;
        self.refused_for_space += other.refused_for_space;
        self.stale_stage += other.stale_stage;
    }
}

impl PartialEq for Proposer {
    fn eq(&self, other: &Proposer) -> bool {
        self.shared.id == other.shared.id
            && self.shared.next_seq == other.shared.next_seq
            && self.shared.suspected == other.shared.suspected
            && self.shared.stage == other.shared.stage
            && self.shared.newer_stage == other.shared.newer_stage
            && self.registers == other.registers
            && self.shared.out == other.shared.out
    }
}

impl Eq for Proposer {}

impl Hash for Proposer {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.shared.id.hash(state);
        self.shared.next_seq.hash(state);
        self.shared.suspected.hash(state);
        self.shared.stage.hash(state);
        self.shared.newer_stage.hash(state);
        self.registers.hash(state);
        self.shared.out.hash(state);
    }
}

impl Proposer {
    /// A proposer for incarnation `id`, with a seeded random number generator for backoff.
    pub fn new(id: ProposerId, config: ProposerConfig, rng_seed: u64) -> Proposer {
        assert!(id.incarnation > 0, "incarnation 0 is reserved for ⊥");
        assert!(
            !config.acceptors.is_empty() && config.acceptors.len() <= 64,
            "1 to 64 acceptors"
        );
        let own_index = config.acceptors.iter().position(|a| *a == id.node);
        Proposer {
            shared: Shared {
                id,
                own_index,
                suspected: AcceptorSet::default(),
                armed: ArmedTimers::default(),
                members: AcceptorSet::first(config.acceptors.len()),
                quorum: Quorum::majority_of(AcceptorSet::first(config.acceptors.len())),
                stage: config
                    .placement
                    .as_ref()
                    .map_or(StageId::NONE, Placement::stage_id),
                newer_stage: StageId::NONE,
                drop_at: config.registers_max,
                config,
                next_seq: 0,
                rng: SmallRng::seed_from_u64(rng_seed),
                out: ProposerOutput::default(),
                stats: ProposerStats::default(),
                spare: Vec::new(),
                spare_out: ProposerOutput::default(),
            },
            registers: KeyTable::new(),
        }
    }

    /// Asks the cache for the position of the register of `key` in the proposer's table (the
    /// first step of a prefetch, see [`KeyTable::prefetch_position`]); returns the register's
    /// slot, for [`Proposer::prefetch_slot`] and [`Proposer::prefetch_known_value`].
    #[inline]
    pub(crate) fn prefetch_position(&self, key: &Key) -> Option<usize> {
        self.registers.prefetch_position(key)
    }

    /// Asks the cache for the register in `slot` (the second step): the fields every command
    /// and reply reads first, its operation and what it knows.
    #[inline]
    pub(crate) fn prefetch_slot(&self, slot: usize) {
        self.registers
            .prefetch_slot(slot, RegisterProposer::prefetch);
    }

    /// Asks the cache for the value the register in `slot` (from [`Proposer::prefetch_position`])
    /// knows, which a write applies its commands to as soon as they come; call it once the
    /// register itself has likely arrived.
    #[inline]
    pub(crate) fn prefetch_known_value(&self, slot: usize) {
        if let Some(register) = self.registers.in_slot(slot) {
            register.known.value.prefetch();
        }
    }

    /// This proposer's identity.
    pub fn id(&self) -> ProposerId {
        self.shared.id
    }

    /// The counters so far.
    pub fn stats(&self) -> &ProposerStats {
        &self.shared.stats
    }

    /// The configuration.
    pub fn config(&self) -> &ProposerConfig {
        &self.shared.config
    }

    /// Switches thrifty reads and thrifty fast writes (see [`ProposerConfig::thrifty_reads`]
    /// and [`ProposerConfig::thrifty_writes`]) while the proposer runs. Which acceptors a
    /// phase asks first is a matter of cost, not of safety: every phase still decides on a
    /// quorum's replies, and one that asked a quorum asks the rest when that quorum is slow.
    /// Phases under way keep the acceptors they asked; the switch applies from the next
    /// phase. Switching both off forgets the suspected acceptors, which only thrifty phases
    /// keep.
    pub fn set_thrifty(&mut self, reads: bool, writes: bool) {
        let config = &mut self.shared.config;
        config.thrifty_reads = reads;
        config.thrifty_writes = writes;
        if !reads && !writes {
            self.shared.suspected = AcceptorSet::default();
        }
    }

    /// Installs the placement of a new stage of the ring (docs/ring.md §4): from the next step
    /// of each register, its acceptors and quorums are those of `placement`. Every register's
    /// pre-acknowledged fast-write round is dropped, since it was earned from a quorum of the
    /// previous stage (a round a majority of the old replicas promised is no phase 1 for a joint
    /// quorum). A phase under way on a register whose acceptors or quorums the new stage
    /// changes (a moving slot's, from `Stable(e)` to `Joint(e+1)` and from there to
    /// `Stable(e+1)`) is dropped: its operation backs off and retries in the new stage as the
    /// same operation, its proposals remembered, as after a STALE. Replies count only toward
    /// the quorums of the stage they were asked in: a new acceptor's ⊥, given in the joint
    /// stage before the mover wrote the register through, would otherwise make with another a
    /// quorum of `Stable(e+1)` that shows the register absent (docs/ring.md §4, "A phase
    /// across an install"). Phases of registers whose quorums stay go on. Messages sent from
    /// now on carry the new stage (the fence, docs/ring.md §4). `placement` must be over the
    /// same [acceptors](ProposerConfig::acceptors).
    pub fn install_placement(&mut self, placement: Placement) {
        let stage = placement.stage_id();
        self.shared.stage = stage;
        if self.shared.newer_stage <= stage {
            self.shared.newer_stage = StageId::NONE;
        }
        let old = self.shared.config.placement.replace(placement);
        let new = self
            .shared
            .config
            .placement
            .as_ref()
            .expect("just installed");
        let restart = !self.shared.config.bugs.count_replies_across_stages
            && old.as_ref().map(Placement::stage_id) != Some(stage);
        let mut moved = Vec::new();
        for (key, reg) in self.registers.iter_mut() {
            reg.fast = None;
            let under_way = (reg.op.as_ref()).is_some_and(|op| !matches!(op.phase, Phase::Backoff));
            if restart && under_way {
                let bytes = key.as_bytes();
                if old
                    .as_ref()
                    .is_none_or(|old| old.quorum_of(bytes) != new.quorum_of(bytes))
                {
                    moved.push(key.clone());
                }
            }
        }
        for key in &moved {
            let Some(reg) = self.registers.get_mut(key) else {
                continue;
            };
            let mut step = Step::new(key, reg, &mut self.shared);
            step.shared.stats.stale_stage += 1;
            // Backing off at once: the timer fires at the next turn and sends a new phase 1.
            let op = step.op_mut();
            op.phase = Phase::Backoff;
            op.wake_ms = 0;
            step.arm_timer(0);
        }
    }

    /// The stage of the installed placement ([`StageId::NONE`] without one).
    pub fn stage(&self) -> StageId {
        self.shared.stage
    }

    /// A peer showed `stage`: if it is later than the installed one, the caller is told (see
    /// [`Proposer::take_newer_stage`]).
    pub fn note_stage(&mut self, stage: StageId) {
        if stage > self.shared.stage && stage > self.shared.newer_stage {
            self.shared.newer_stage = stage;
        }
    }

    /// The latest stage after the installed one that peers showed since the last call, if
    /// any: the caller should install its placement.
    #[inline]
    pub fn take_newer_stage(&mut self) -> Option<logless_placement::Stage> {
        // Every output asks; almost none has one.
        if self.shared.newer_stage == StageId::NONE {
            return None;
        }
        std::mem::take(&mut self.shared.newer_stage).stage()
    }

    /// Takes everything produced since the last call. The next output starts with room for half
    /// as much again as this one held, so that a busy proposer does not grow (and copy) its
    /// vectors from nothing in every turn.
    pub fn drain_output(&mut self) -> ProposerOutput {
        fn next<T>(spare: &mut Vec<T>, last: &[T]) -> Vec<T> {
            let mut next = std::mem::take(spare);
            next.reserve(room_for_next(last.len()));
            next
        }
        let (out, spare) = (&self.shared.out, &mut self.shared.spare_out);
        let next = ProposerOutput {
            sends: next(&mut spare.sends, &out.sends),
            replies: next(&mut spare.replies, &out.replies),
            timers: next(&mut spare.timers, &out.timers),
        };
        std::mem::replace(&mut self.shared.out, next)
    }

    /// Takes back the vectors of an earlier output the runtime is done with, so that a later
    /// output fills the same memory (likely still cached) rather than fresh memory. What they
    /// still hold is dropped.
    pub fn recycle(&mut self, spent: ProposerOutput) {
        let spare = &mut self.shared.spare_out;
        keep_spare(&mut spare.sends, spent.sends);
        keep_spare(&mut spare.replies, spent.replies);
        keep_spare(&mut spare.timers, spent.timers);
    }

    /// Whether this proposer holds register `key`: it has seen a command for it and not
    /// dropped it since (see [`ProposerConfig::registers_max`]).
    pub fn holds(&self, key: &Key) -> bool {
        self.registers.get(key).is_some()
    }

    /// How many registers this proposer holds.
    pub fn registers(&self) -> usize {
        self.registers.len()
    }

    /// The bytes its table of registers has allocated (see `KeyTable::allocated_bytes`).
    pub fn table_bytes(&self) -> usize {
        self.registers.allocated_bytes()
    }

    /// Whether register `key` has an operation in progress (commands waiting on it).
    pub fn is_busy(&self, key: &Key) -> bool {
        self.registers.get(key).is_some_and(|reg| reg.op.is_some())
    }

    /// Drops register `key` if it has no operation in progress (see
    /// [`Proposer::drop_idle_registers`] for why that is safe): its acceptors forgot it.
    pub fn forget_idle(&mut self, key: &Key) {
        if self.registers.get(key).is_some_and(|reg| reg.op.is_none()) {
            self.registers.remove(key);
            self.shared.stats.registers_dropped += 1;
        }
    }

    /// Mints an attempt id for a phase this proposer does not drive itself (a removal's read).
    pub(crate) fn mint_attempt(&mut self) -> AttemptId {
        self.shared.mint()
    }

    /// Sends `envelope` with this proposer's messages.
    pub(crate) fn send(&mut self, envelope: Envelope) {
        self.shared.out.sends.push(envelope);
    }

    /// Sends `message` to every acceptor, with this proposer's messages.
    pub(crate) fn send_to_everyone(&mut self, message: Message) {
        let out = &mut self.shared.out.sends;
        for to in &self.shared.config.acceptors {
            out.push(Envelope {
                to: *to,
                message: message.clone(),
            });
        }
    }

    /// Whether this node's acceptor holds register `key`: always without a placement, else if
    /// the node is one of the key's replicas.
    pub fn is_acceptor_of(&self, key: &Key) -> bool {
        let config = &self.shared.config;
        config.placement.is_none()
            || (self.shared.own_index)
                .is_some_and(|own| config.acceptors_of(key.as_bytes()).contains(own))
    }

    /// Whether the installed placement is joint and makes this node's acceptor a replica of
    /// `key`'s slot that it was not in the old configuration.
    pub fn gains(&self, key: &Key) -> bool {
        let config = &self.shared.config;
        match (&config.placement, self.shared.own_index) {
            (Some(placement), Some(own)) => placement.quorum_of(key.as_bytes()).gains(own),
            _ => false,
        }
    }

    /// Whether the installed placement is joint and makes this node's acceptor a replica of
    /// some slot it was not in the old configuration.
    pub fn gains_any(&self) -> bool {
        let config = &self.shared.config;
        match (&config.placement, self.shared.own_index) {
            (Some(placement), Some(own)) => placement.gains_any(own),
            _ => false,
        }
    }

    /// How many attempt ids this proposer minted (phase 1s and proposals): a measure of work
    /// and retries, used to bound model checking.
    pub fn attempts_minted(&self) -> u64 {
        self.shared.next_seq
    }

    fn acceptor_index(&self, node: NodeId) -> Option<usize> {
        self.shared.config.acceptors.iter().position(|a| *a == node)
    }

    /// The step of an existing register.
    fn step<'a>(&'a mut self, key: &'a Key) -> Option<Step<'a>> {
        let reg = self.registers.get_mut(key)?;
        Some(Step::new(key, reg, &mut self.shared))
    }

    /// The step of an existing register for a reply of acceptor `index`, if that acceptor is
    /// one of the register's (a reply of another one, which a proposer with a different
    /// placement could have drawn, does not count).
    fn step_from<'a>(&'a mut self, key: &'a Key, index: usize) -> Option<Step<'a>> {
        self.step(key)
            .filter(|step| step.shared.members.contains(index))
    }

    /// A client command for register `key`.
    pub fn handle_command(&mut self, now_ms: u64, client: ClientTag, key: Key, command: Command) {
        self.submit(now_ms, client, key, command, false);
    }

    /// A write-through of register `key`, answered as GET is: phase 1 under the current
    /// quorums (joint ones while the register's slot moves), and unless it finds nothing (⊥),
    /// the highest vote proposed again with its request ids in the round of that phase 1, even
    /// when a consistent quorum already holds it, then a read. So a majority of every acceptor
    /// set holds the register's value with the request that made it, and a retry of that
    /// request is recognised there. For a node's data mover during a ring change
    /// (docs/ring.md §4 step 3); no client command reaches it.
    pub fn handle_write_through(&mut self, now_ms: u64, client: ClientTag, key: Key) {
        self.submit(now_ms, client, key, Command::Get, true);
    }

    fn submit(
        &mut self,
        now_ms: u64,
        client: ClientTag,
        key: Key,
        command: Command,
        write_through: bool,
    ) {
        let reg = self
            .registers
            .get_or_insert_with(&key, RegisterProposer::new);
        reg.used = Incidental(true);
        let queued = reg.op.as_ref().map_or(0, |op| op.queue.len());
        if queued >= self.shared.config.queue_commands_max {
            self.shared.out.replies.push(ClientReply {
                client,
                result: Err(ProposeError::Overloaded),
            });
            return;
        }
        let read_only = command.is_read_only();
        let pending = Pending {
            client,
            command,
            read_only,
            write_through,
        };
        if let Some(op) = reg.op.as_mut() {
            op.queue.push_back(pending);
            return;
        }
        // An idle register has no queue: the command starts the next operation without passing
        // through one (whose buffer would be one more allocation to touch).
        Step::new(&key, reg, &mut self.shared).start(now_ms, pending);
        // Only here can the table have grown (a new register starts its first operation), and
        // that register, busy now, is not dropped.
        if self.registers.len() > self.shared.drop_at {
            self.make_room();
        }
    }

    /// Drops idle registers until at most seven eighths of [`ProposerConfig::registers_max`]
    /// remain, so that the next drop is far off. If too few are idle, the next drop waits
    /// until an eighth of the bound more registers came.
    #[cold]
    #[inline(never)]
    fn make_room(&mut self) {
        let max = self.shared.config.registers_max;
        self.drop_idle(max - max / 8);
        self.shared.drop_at = max.max(self.registers.len() + max / 8);
    }

    /// Drops every register that has no operation in progress, as the bound does when it
    /// finds them all idle (the model checker takes this step at any point).
    pub fn drop_idle_registers(&mut self) {
        self.drop_idle(0);
    }

    /// Drops idle registers until at most `target` remain: first those not used since the
    /// last drop (second chance), then any.
    ///
    /// Dropping is safe because an idle register holds no promise and no proposal: its known
    /// value and fast path are caches, and a proposer without them is one that has not seen
    /// the register yet. Its next phase 1 mints a fresh attempt and round, a reply to an
    /// attempt of the dropped register finds no operation waiting for it, and a stale
    /// wake-up that happens to match a new timer's token fires early, which re-arms it.
    fn drop_idle(&mut self, target: usize) {
        let mut dropped = 0;
        for spare_used in [true, false] {
            let mut excess = self.registers.len().saturating_sub(target);
            if excess == 0 {
                break;
            }
            self.registers.retain(|_, reg| {
                if excess == 0 || reg.op.is_some() {
                    return true;
                }
                debug_assert!(
                    reg.timer_armed_ms.get().is_none(),
                    "an idle register has no timer"
                );
                if spare_used && std::mem::take(&mut reg.used.0) {
                    return true;
                }
                excess -= 1;
                dropped += 1;
                false
            });
        }
        self.shared.stats.registers_dropped += dropped;
    }

    /// A link to `peer` broke: messages on it may have been lost. Operations with outstanding
    /// proposals stop counting that acceptor's phase 1 replies (Algorithm 3 needs in-order,
    /// reliable links for LEARNED to arrive before a consistent quorum).
    pub fn handle_link_broken(&mut self, peer: NodeId) {
        let Some(index) = self.acceptor_index(peer) else {
            return;
        };
        if self.shared.config.thrifty_reads || self.shared.config.thrifty_writes {
            self.shared.suspected.insert(index);
        }
        for (key, reg) in self.registers.iter_mut() {
            let Some(op) = reg.op.as_mut() else {
                continue;
            };
            let everyone = self.shared.config.acceptors_of(key.as_bytes());
            if !op.proposals.is_empty() {
                op.excluded.insert(index);
            }
            // A read or fast write that asked only a quorum and still waits for this acceptor's
            // reply widens at its next wake-up: now.
            if op.phase.awaits_from_a_quorum(index, everyone) {
                Step::new(key, reg, &mut self.shared).set_wake(0);
            }
        }
    }

    /// `peer` lost its acceptor state and rejoins (FENCE): no answer it gave before may count
    /// any more. Every operation in progress starts again with a fresh attempt after a backoff
    /// (its proposals stay remembered, as after a rejected VOTE), so that no phase 1 completes
    /// and no fast path is taken on a promise the peer forgot (see the `rejoin` module).
    pub fn handle_fence(&mut self, now_ms: u64) {
        for (key, reg) in self.registers.iter_mut() {
            reg.fast = None;
            if reg.op.is_none() {
                continue;
            }
            Step::new(key, reg, &mut self.shared).back_off(now_ms);
        }
    }

    /// A wake-up requested earlier.
    pub fn handle_timer(&mut self, now_ms: u64, key: &Key, token: u64) {
        if !self.shared.armed.may_be_live(token) {
            return;
        }
        let Some(mut step) = self.step(key) else {
            return;
        };
        // The slot may have been reused by another register's timer with an equal token.
        let reg = &mut *step.reg;
        if reg.timer_armed_ms.get().is_none()
            || token != armed::token(reg.timer_slot, reg.timer_token)
        {
            return;
        }
        debug_assert!(reg.op.is_some());
        reg.timer_armed_ms = ArmedAt::NONE;
        step.shared.armed.release(reg.timer_slot);
        let op = step.reg.op.as_ref().expect("checked");
        if now_ms >= op.deadline_ms {
            step.time_out(now_ms);
            return;
        }
        if now_ms < op.wake_ms {
            let at = op_wake(step.reg);
            step.arm_timer(at);
            return;
        }
        step.on_wake(now_ms);
    }

    /// A message from an acceptor (ACK, VOTED, NACK, LEARNED).
    pub fn handle_message(&mut self, now_ms: u64, from: NodeId, message: &Message) {
        let Some(index) = self.acceptor_index(from) else {
            return;
        };
        match message {
            Message::Ack {
                key,
                inc,
                r_ack,
                r_voted,
                value,
                req,
                req_prev,
            } => {
                if let Some(mut step) = self.step_from(key, index) {
                    let ack = AckParts {
                        inc: *inc,
                        r_ack: *r_ack,
                        r_voted: *r_voted,
                        value: value.as_ref(),
                        req: *req,
                        req_prev: *req_prev,
                    };
                    step.on_ack(now_ms, index, ack);
                }
            }
            Message::Voted { key, round } => {
                if let Some(mut step) = self.step_from(key, index) {
                    step.on_voted(now_ms, index, *round);
                }
            }
            Message::Nack { key, round, r_ack } => {
                if let Some(mut step) = self.step_from(key, index) {
                    step.on_nack(now_ms, index, *round, *r_ack);
                }
            }
            Message::Learned { key, req } => {
                if let Some(mut step) = self.step(key) {
                    step.on_learned(now_ms, *req);
                }
            }
            Message::Full { key, round } => {
                if let Some(mut step) = self.step_from(key, index) {
                    step.on_full(now_ms, index, *round);
                }
            }
            Message::Stale { key, stage } => {
                if *stage <= self.shared.stage {
                    // Refused a message of a stage this proposer has left since.
                    return;
                }
                self.note_stage(*stage);
                if let Some(mut step) = self.step_from(key, index) {
                    step.on_stale(now_ms);
                }
            }
            Message::Prepare { .. }
            | Message::PaxosPrep { .. }
            | Message::Vote { .. }
            | Message::Remove { .. }
            | Message::Fence { .. }
            | Message::Fenced { .. } => {}
        }
    }
}

impl Step<'_> {
    fn op(&self) -> &Operation {
        self.reg.op.as_ref().expect("operation")
    }

    fn op_mut(&mut self) -> &mut Operation {
        self.reg.op.as_mut().expect("operation")
    }

    // ----- starting operations -----

    /// Starts an operation with `arriving`, a command for an idle register (which has no
    /// queue), in a spare operation's box if there is one.
    fn start(&mut self, now_ms: u64, arriving: Pending) {
        debug_assert!(self.reg.op.is_none());
        // A spare operation lends its box, its (emptied) vectors and its phase, which the first
        // attempt replaces or, for a read, empties in place.
        let op = self.shared.spare.pop().unwrap_or_else(|| {
            Box::new(Operation {
                read: true,
                fast: false,
                batch: Vec::new(),
                proposals: Vec::new(),
                excluded: AcceptorSet::default(),
                deadline_ms: 0,
                retries: 0,
                phase: Phase::Backoff,
                wake_ms: 0,
                queue: VecDeque::new(),
                forced: Forced::No,
            })
        });
        self.begin(now_ms, op, Some(arriving));
    }

    /// Begins the operation in `op` (emptied of commands but for its queue) with `arriving`,
    /// if any, and then the queued commands of the same kind, up to a batch.
    fn begin(&mut self, now_ms: u64, mut op: Box<Operation>, arriving: Option<Pending>) {
        debug_assert!(op.batch.is_empty() && op.proposals.is_empty());
        let Some(read) = arriving
            .as_ref()
            .or(op.queue.front())
            .map(|first| first.read_only)
        else {
            return;
        };
        let batch_max = self.shared.config.batch_commands_max;
        let deadline_ms = now_ms + self.shared.config.request_timeout_ms;
        op.read = read;
        op.fast = false;
        op.excluded = AcceptorSet::default();
        op.deadline_ms = deadline_ms;
        op.retries = 0;
        op.wake_ms = deadline_ms;
        op.batch.extend(arriving);
        while op.batch.len() < batch_max && op.queue.front().is_some_and(|p| p.read_only == read) {
            let next = op.queue.pop_front().expect("checked");
            op.batch.push(next);
        }
        op.forced = if op.batch.iter().any(|p| p.write_through) {
            Forced::Wanted
        } else {
            Forced::No
        };
        self.reg.op = Some(op);
        if read {
            self.send_read(now_ms, false);
        } else if self.shared.config.fast_writes && self.reg.fast.is_some() {
            self.send_fast_write(now_ms);
        } else {
            self.send_prepare(now_ms);
        }
    }

    fn broadcast(&mut self, message: Message) {
        self.send_to(self.shared.everyone(), message);
    }

    /// Sends `message` to the acceptors in `targets` (not empty), in the configured order.
    fn send_to(&mut self, targets: AcceptorSet, message: Message) {
        let out = &mut self.shared.out.sends;
        let last = targets.last().expect("targets");
        for (index, to) in self.shared.config.acceptors.iter().enumerate() {
            if index == last {
                out.push(Envelope { to: *to, message });
                return;
            }
            if targets.contains(index) {
                out.push(Envelope {
                    to: *to,
                    message: message.clone(),
                });
            }
        }
    }

    fn arm_timer(&mut self, at_ms: u64) {
        if self
            .reg
            .timer_armed_ms
            .get()
            .is_some_and(|armed| armed <= at_ms)
        {
            return;
        }
        // Re-armed earlier: the timer keeps its slot, whose older token goes stale.
        if self.reg.timer_armed_ms.get().is_none() {
            self.reg.timer_slot = self.shared.armed.take();
        }
        self.reg.timer_armed_ms.set(at_ms);
        self.reg.timer_token += 1;
        let token = armed::token(self.reg.timer_slot, self.reg.timer_token);
        self.shared.armed.arm(self.reg.timer_slot, token);
        self.shared.out.timers.push(TimerRequest {
            key: self.key.clone(),
            token,
            at_ms,
        });
    }

    /// When the current phase gives up waiting; arms the timer for it.
    fn set_wake(&mut self, wake_ms: u64) {
        self.op_mut().wake_ms = wake_ms;
        let at = op_wake(self.reg);
        self.arm_timer(at);
    }

    /// Read phase 1: a new PREPARE(read). With `carry`, the operation is already reading and
    /// keeps the replies its earlier attempts collected, and asks everyone; without, the
    /// collection starts anew and asks a quorum first ([`Shared::read_targets`]).
    fn send_read(&mut self, now_ms: u64, carry: bool) {
        let attempt = self.shared.mint();
        let known_voted = self.reg.known.round();
        let acceptors = self.shared.table_len();
        let asked = if carry {
            self.shared.everyone()
        } else {
            self.shared.read_targets()
        };
        let wait_ms = self.shared.wait_ms(asked);
        let phase = &mut self.op_mut().phase;
        // Built in place, or emptied in place when a finished read lent it: the collection is
        // large enough that moving it costs.
        if !carry {
            match phase {
                Phase::Read(collect) => collect.reset(acceptors),
                _ => {
                    *phase = Phase::Read(ReadCollect {
                        attempts: SmallVec::new(),
                        acks: AckTable::new(acceptors),
                        asked,
                        current_replies: AcceptorSet::default(),
                        retries: 0,
                        previous_rounds: None,
                    })
                }
            }
        }
        let Phase::Read(collect) = phase else {
            unreachable!("a read carried over is still reading");
        };
        collect.attempts.push(attempt);
        collect.asked = asked;
        collect.current_replies = AcceptorSet::default();
        // The replies usually leave the value out, and taking it from here (and answering with
        // it) was the read's last cache miss: ask for it now, a turn before they come.
        self.reg.known.value.prefetch();
        self.send_to(asked, self.read_prepare(attempt, known_voted));
        self.set_wake(now_ms + wait_ms);
    }

    /// The PREPARE(read) of `attempt`.
    fn read_prepare(&self, attempt: AttemptId, known_voted: Round) -> Message {
        Message::Prepare {
            key: self.key.clone(),
            kind: PrepareKind::Read,
            attempt,
            known_voted,
            stage: self.shared.stage,
        }
    }

    /// A read that asked a quorum first sends its latest attempt to the acceptors it did not
    /// ask; those that were asked and are silent become suspected.
    fn widen_read(&mut self, now_ms: u64) {
        let everyone = self.shared.everyone();
        let known_voted = self.reg.known.round();
        let Phase::Read(collect) = &mut self.op_mut().phase else {
            unreachable!("only a read widens");
        };
        let silent = collect.silent();
        let rest = everyone.without(collect.asked);
        let attempt = *collect.attempts.last().expect("a read has an attempt");
        collect.asked = everyone;
        self.shared.suspected = self.shared.suspected.union(silent);
        self.shared.stats.reads_widened += 1;
        self.send_to(rest, self.read_prepare(attempt, known_voted));
        self.set_wake(now_ms + self.shared.config.phase_timeout_ms);
        if silent.is_empty() {
            // A quorum answered and disagrees: the rest get the straggler wait, as when
            // everyone was asked at once.
            self.wait_for_stragglers(now_ms);
        }
    }

    /// Write phase 1 with an incremental round.
    fn send_prepare(&mut self, now_ms: u64) {
        let attempt = self.shared.mint();
        self.reg.fast = None;
        let known_voted = self.reg.known.round();
        self.broadcast(Message::Prepare {
            key: self.key.clone(),
            kind: PrepareKind::Write,
            attempt,
            known_voted,
            stage: self.shared.stage,
        });
        self.enter_phase_one(now_ms, attempt, true);
    }

    /// Phase 1 with an explicit round above everything seen.
    fn send_paxos_prep(&mut self, now_ms: u64, r_ack_seen: Round) {
        let attempt = self.shared.mint();
        self.reg.fast = None;
        let round = Round {
            n: r_ack_seen.n.saturating_add(1),
            id: attempt,
        };
        let known_voted = self.reg.known.round();
        self.broadcast(Message::PaxosPrep {
            key: self.key.clone(),
            round,
            known_voted,
            stage: self.shared.stage,
        });
        self.enter_phase_one(now_ms, attempt, false);
    }

    fn enter_phase_one(&mut self, now_ms: u64, attempt: AttemptId, incremental: bool) {
        let acceptors = self.shared.table_len();
        // Assigned in place rather than passed along: a phase is a few hundred bytes.
        self.op_mut().phase = Phase::Prepare(PhaseOne {
            attempt,
            incremental,
            acks: AckTable::new(acceptors),
            nacked: AcceptorSet::default(),
            full: AcceptorSet::default(),
            r_ack_seen: Round::BOTTOM,
        });
        self.set_wake(now_ms + self.shared.config.phase_timeout_ms);
    }

    /// A fast write: vote in the pre-acknowledged round on top of our last chosen value.
    fn send_fast_write(&mut self, now_ms: u64) {
        let fast = self.reg.fast.take().expect("fast path");
        let round = self.reg.known.round().successor();
        self.op_mut().fast = true;
        // Even a batch that changes nothing (SET of the value already there, a failed
        // condition) is proposed: its answers need a quorum's confirmation that the base is
        // still the latest state, and a vote in the pre-acknowledged round gives that in one
        // round trip while keeping the fast path, where phase 1 would cost the same round
        // trip, a persisted round at every acceptor, and the fast path.
        let (value, replies, _changed) = self.apply_batch(&self.reg.known.value(), now_ms);
        self.propose(now_ms, round, value, replies, fast.base_req);
    }

    /// Applies the operation's commands in order to `base`.
    fn apply_batch(&self, base: &Register, now_ms: u64) -> (Arc<Register>, Replies, bool) {
        let limits = &self.shared.config.limits;
        let mut value = base.clone();
        let mut changed = false;
        let replies = self
            .op()
            .batch
            .iter()
            .map(|p| {
                let outcome = p.command.apply(&mut value, now_ms, limits);
                changed |= outcome.changed;
                outcome.reply
            })
            .collect();
        (Arc::new(value), replies, changed)
    }

    /// Sends a successor proposal and remembers it until it is known chosen or superseded.
    fn propose(
        &mut self,
        now_ms: u64,
        round: Round,
        value: Arc<Register>,
        replies: Replies,
        req_prev: Option<ReqId>,
    ) {
        let req = self.shared.mint_request();
        self.reg.known = Known::new(round, &value);
        let op = self.op_mut();
        op.proposals.push(Proposal { req, replies });
        let proposal = Some(op.proposals.len() - 1);
        let asked = if op.fast {
            self.shared.fast_write_targets()
        } else {
            self.shared.everyone()
        };
        let two = PhaseTwo {
            round,
            value,
            proposal,
            req_cur: Some(req),
            req_prev,
            asked,
            voted: AcceptorSet::default(),
            nacked: AcceptorSet::default(),
        };
        self.send_to(asked, two.vote(self.key, self.shared.stage));
        self.enter_phase_two(now_ms, two);
    }

    fn write_through(
        &mut self,
        now_ms: u64,
        round: Round,
        value: Arc<Register>,
        req: Option<ReqId>,
        req_prev: Option<ReqId>,
    ) {
        self.shared.stats.write_throughs += 1;
        let req_prev = req_prev.filter(|_| !self.shared.config.bugs.write_through_forgets_req_prev);
        self.reg.known = Known::new(round, &value);
        // Unlike Algorithm 3 (line 20), the VOTE names the request the value was built on, so
        // that its voters send LEARNED: a successor may be chosen only by write-throughs.
        let two = PhaseTwo {
            round,
            value,
            proposal: None,
            req_cur: req,
            req_prev,
            asked: self.shared.everyone(),
            voted: AcceptorSet::default(),
            nacked: AcceptorSet::default(),
        };
        self.broadcast(two.vote(self.key, self.shared.stage));
        self.enter_phase_two(now_ms, two);
    }

    fn enter_phase_two(&mut self, now_ms: u64, two: PhaseTwo) {
        let wait_ms = self.shared.wait_ms(two.asked);
        self.op_mut().phase = Phase::Vote(two);
        self.set_wake(now_ms + wait_ms);
    }

    /// A fast write that voted with a quorum first sends its VOTE to the acceptors it did not
    /// ask; those that were asked and are silent become suspected.
    fn widen_vote(&mut self, now_ms: u64) {
        let everyone = self.shared.everyone();
        let (key, stage) = (self.key, self.shared.stage);
        let Phase::Vote(two) = &mut self.op_mut().phase else {
            unreachable!("only a vote widens here");
        };
        let silent = two.silent();
        let rest = everyone.without(two.asked);
        two.asked = everyone;
        let vote = two.vote(key, stage);
        self.shared.suspected = self.shared.suspected.union(silent);
        self.shared.stats.writes_widened += 1;
        self.send_to(rest, vote);
        self.set_wake(now_ms + self.shared.config.phase_timeout_ms);
    }

    /// Waits a randomised, growing delay, then retries phase 1 with an incremental PREPARE.
    fn back_off(&mut self, now_ms: u64) {
        self.shared.stats.retries += 1;
        self.reg.fast = None;
        let op = self.reg.op.as_mut().expect("operation");
        op.retries += 1;
        let shift = op.retries.min(16);
        let config = &self.shared.config;
        let bound = (config.backoff_base_ms << shift).min(config.backoff_max_ms);
        let delay = self.shared.rng.random_range(0..=bound.max(1));
        self.op_mut().phase = Phase::Backoff;
        self.set_wake(now_ms + delay);
    }

    // ----- finishing operations -----

    /// Ends the operation, whose clients have their answers, and starts the next one.
    fn finish(&mut self, now_ms: u64) {
        let mut op = self.reg.op.take().expect("operation");
        self.reg.timer_token += 1;
        if self.reg.timer_armed_ms.take().is_some() {
            self.shared.armed.release(self.reg.timer_slot);
        }
        let queued = !op.queue.is_empty();
        if !queued && self.shared.spare.len() >= SPARE_OPERATIONS_MAX {
            return;
        }
        op.batch.clear();
        op.proposals.clear();
        // A read's collection stays for the next read to empty in place; its values go now.
        match &mut op.phase {
            Phase::Read(collect) => collect.acks.reset(self.shared.table_len()),
            phase => *phase = Phase::Backoff,
        }
        // The queued commands begin the next operation in the same box.
        if queued {
            self.begin(now_ms, op, None);
        } else {
            self.shared.spare.push(op);
        }
    }

    /// Answers every command of the batch with `replies`, in order.
    fn answer(&mut self, replies: impl IntoIterator<Item = Reply>) {
        let op = self.reg.op.as_ref().expect("operation");
        let out = &mut self.shared.out.replies;
        for (p, reply) in op.batch.iter().zip(replies) {
            out.push(ClientReply {
                client: p.client,
                result: Ok(reply),
            });
        }
    }

    fn time_out(&mut self, now_ms: u64) {
        self.shared.stats.timeouts += 1;
        self.reg.fast = None;
        let op = self.reg.op.as_ref().expect("operation");
        let error = if op.proposals.is_empty() {
            ProposeError::NotApplied
        } else {
            ProposeError::OutcomeUnknown
        };
        for p in &op.batch {
            self.shared.out.replies.push(ClientReply {
                client: p.client,
                result: Err(error),
            });
        }
        self.finish(now_ms);
    }

    /// Completes a write operation whose proposal `index` is known chosen.
    fn complete_proposal(&mut self, now_ms: u64, index: usize) {
        let replies = std::mem::take(&mut self.op_mut().proposals[index].replies);
        debug_assert_eq!(self.op().batch.len(), replies.len());
        self.answer(replies);
        self.shared.stats.writes += 1;
        self.finish(now_ms);
    }

    // ----- handling replies -----

    fn on_learned(&mut self, now_ms: u64, req: ReqId) {
        if self.shared.config.bugs.ignore_learned {
            return;
        }
        // Another proposer built on our value: the round we pre-hold is gone.
        self.reg.fast = None;
        let Some(op) = self.reg.op.as_ref() else {
            return;
        };
        if let Some(index) = op.proposals.iter().position(|p| p.req == req) {
            self.shared.stats.learned += 1;
            self.complete_proposal(now_ms, index);
        }
    }

    fn on_ack(&mut self, now_ms: u64, index: usize, ack: AckParts<'_>) {
        // An ACK answers the attempt its acknowledged round names.
        let attempt = ack.r_ack.id;
        let Some(op) = self.reg.op.as_mut() else {
            return;
        };
        let Some(info) = ack.resolve(&self.reg.known) else {
            return;
        };
        match &mut op.phase {
            Phase::Read(collect) if collect.attempts.contains(&attempt) => {
                self.shared.suspected.remove(index);
                if collect.attempts.last() == Some(&attempt) {
                    collect.current_replies.insert(index);
                }
                collect.acks.record(index, info);
                self.evaluate_read(now_ms, false);
            }
            Phase::Prepare(one) if one.attempt == attempt => {
                self.shared.suspected.remove(index);
                one.r_ack_seen = one.r_ack_seen.max(info.r_ack);
                one.acks.record(index, info);
                self.evaluate_phase_one(now_ms, false);
            }
            _ => {}
        }
    }

    fn on_nack(&mut self, now_ms: u64, index: usize, rejected: Round, r_ack: Round) {
        let everyone = self.shared.everyone();
        let quorum = self.shared.quorum;
        let Some(op) = self.reg.op.as_mut() else {
            return;
        };
        let failed = match &mut op.phase {
            Phase::Prepare(one) if one.attempt == rejected.id => {
                one.r_ack_seen = one.r_ack_seen.max(r_ack);
                one.nacked.insert(index);
                quorum.is_out_of_reach(one.nacked, everyone)
            }
            Phase::Vote(two) if two.round == rejected && !two.voted.contains(index) => {
                // Failed once the acceptors asked can no longer make a quorum: a thrifty fast
                // write does not widen past a rejection, which means another proposer is at
                // work on the register.
                two.nacked.insert(index);
                quorum.is_out_of_reach(two.nacked, two.asked)
            }
            _ => return,
        };
        self.shared.suspected.remove(index);
        self.shared.stats.nacks += 1;
        self.reg.fast = None;
        if failed {
            self.back_off(now_ms);
        }
    }

    /// A FULL: the acceptor could not store its answer to `round` for want of space. Once so
    /// many acceptors did in phase 1 that the others cannot make a quorum, an operation that
    /// proposed nothing yet is answered [`ProposeError::QuorumFull`] at once (not applied). In
    /// phase 2, or after an earlier attempt proposed, it waits as for a silent acceptor: a
    /// minority's votes may still be chosen by a later round.
    /// A STALE: an acceptor of the register installed a later stage of the ring, so the
    /// messages this proposer sends in its own, earlier stage are refused there, and its
    /// quorums may no longer be the ones that count. The fast-write round goes (it was earned
    /// in the earlier stage), and the operation in progress backs off and retries as the same
    /// operation, its proposals remembered: a retry after the caller installed the later stage
    /// finds a proposal of it that was chosen and answers it (the same request id) rather than
    /// applying its commands again.
    fn on_stale(&mut self, now_ms: u64) {
        self.shared.stats.stale_stage += 1;
        self.reg.fast = None;
        let waiting = self
            .reg
            .op
            .as_ref()
            .is_some_and(|op| !matches!(op.phase, Phase::Backoff));
        if waiting {
            self.back_off(now_ms);
        }
    }

    fn on_full(&mut self, now_ms: u64, index: usize, round: Round) {
        let everyone = self.shared.everyone();
        let quorum = self.shared.quorum;
        let Some(op) = self.reg.op.as_mut() else {
            return;
        };
        let Phase::Prepare(one) = &mut op.phase else {
            return;
        };
        if one.attempt != round.id {
            return;
        }
        self.shared.suspected.remove(index);
        one.full.insert(index);
        if !quorum.is_out_of_reach(one.full, everyone) || !op.proposals.is_empty() {
            return;
        }
        self.shared.stats.refused_for_space += 1;
        self.reg.fast = None;
        for p in &op.batch {
            self.shared.out.replies.push(ClientReply {
                client: p.client,
                result: Err(ProposeError::QuorumFull),
            });
        }
        self.finish(now_ms);
    }

    fn on_voted(&mut self, now_ms: u64, index: usize, round: Round) {
        let quorum = self.shared.quorum;
        let fast_writes = self.shared.config.fast_writes;
        let Some(op) = self.reg.op.as_mut() else {
            return;
        };
        let Phase::Vote(two) = &mut op.phase else {
            return;
        };
        if two.round != round {
            return;
        }
        self.shared.suspected.remove(index);
        if !two.voted.insert(index) || !quorum.is_met_by(two.voted) {
            return;
        }
        // A quorum voted: the value of `round` is chosen. `known` holds it already: proposing
        // set it, and nothing else sets it while a vote is collected.
        debug_assert!(
            self.reg.known.round() == two.round && self.reg.known.value.is(&two.value),
            "a vote's value is the known one"
        );
        let proposal = two.proposal;
        match proposal {
            Some(i) => {
                if fast_writes {
                    self.reg.fast = Some(FastPath {
                        base_req: Some(op.proposals[i].req),
                    });
                }
                if op.fast && op.proposals.len() == 1 {
                    self.shared.stats.fast_writes += 1;
                }
                self.complete_proposal(now_ms, i);
            }
            None if op.read => {
                // The interrupted write is finished; read again (it should now be consistent).
                if op.forced == Forced::Wanted {
                    op.forced = Forced::Done;
                }
                self.send_read(now_ms, false);
            }
            None => self.send_prepare(now_ms),
        }
    }

    /// Answers every read of the operation from the chosen state `(r_voted, value)`.
    fn answer_reads(&mut self, now_ms: u64, r_voted: Round, value: Arc<Register>) {
        let op = self.reg.op.as_ref().expect("operation");
        for p in &op.batch {
            self.shared.out.replies.push(ClientReply {
                client: p.client,
                result: Ok(p.command.read(&value, now_ms)),
            });
        }
        // Our pre-acknowledged round is only good while our own vote is the latest.
        if self.reg.known.round() != r_voted {
            self.reg.fast = None;
        }
        self.reg.known = Known::new(r_voted, &value);
        self.shared.stats.reads += 1;
        self.finish(now_ms);
    }

    /// Asks the acceptors again, keeping the replies collected so far. `rounds` is what the
    /// inconsistent view showed, for a retry that counts toward X; `None` for a re-send after
    /// too few replies.
    fn retry_read(&mut self, now_ms: u64, rounds: Option<Vec<(Round, Round)>>) {
        self.shared.stats.retries += 1;
        let Phase::Read(collect) = &mut self.op_mut().phase else {
            unreachable!("only a read operation retries its read");
        };
        if let Some(rounds) = rounds {
            collect.retries += 1;
            collect.previous_rounds = Some(rounds);
        }
        self.send_read(now_ms, true);
    }

    /// Decides what a read's collected replies allow.
    fn evaluate_read(&mut self, now_ms: u64, waited: bool) {
        let quorum = self.shared.quorum;
        let acceptors = self.shared.acceptors();
        let everyone = self.shared.everyone();
        let read_retries_max = self.shared.config.read_retries_max;
        let accept_inconsistent = self.shared.config.bugs.accept_inconsistent_quorum;
        let Phase::Read(collect) = &mut self.op_mut().phase else {
            return;
        };
        let verdict = collect
            .acks
            .verdict(&quorum, AcceptorSet::default(), accept_inconsistent);
        if let Verdict::Consistent { r_voted, value, .. } = verdict {
            if collect_forced(&self.reg.op) && r_voted != Round::BOTTOM {
                // A write-through asked for: phase 1 above every round seen, then the vote
                // proposed again (`evaluate_phase_one`).
                let Phase::Read(collect) = &self.op().phase else {
                    unreachable!("still reading");
                };
                let r_ack_seen = collect.acks.r_ack_max();
                self.send_paxos_prep(now_ms, r_ack_seen);
                return;
            }
            self.answer_reads(now_ms, r_voted, value);
            return;
        }
        if !everyone.without(collect.asked).is_empty() {
            // Asked a quorum only (or the acceptors of an earlier stage): ask the rest once all of it answered without agreeing, or
            // when it did not answer in time.
            if waited || collect.current_replies == collect.asked {
                self.widen_read(now_ms);
            }
            return;
        }
        let replied = collect.current_replies.len();
        let a_quorum_replied = quorum.is_met_by(collect.current_replies);
        if !a_quorum_replied && waited {
            // Too few replies before the phase timeout: ask again (not a retry of X: nothing
            // inconsistent was seen, messages were lost or acceptors are down).
            self.retry_read(now_ms, None);
            return;
        }
        if !a_quorum_replied || (replied < acceptors && !waited) {
            if a_quorum_replied && !waited {
                self.wait_for_stragglers(now_ms);
            }
            return;
        }
        // Inconsistent after hearing from everyone we can: retry, or write through.
        let rounds = collect.acks.rounds();
        let stuck = collect.previous_rounds.as_ref() == Some(&rounds);
        if collect.retries < read_retries_max && !stuck {
            self.retry_read(now_ms, Some(rounds));
        } else {
            let r_ack_seen = collect.acks.r_ack_max();
            self.send_paxos_prep(now_ms, r_ack_seen);
        }
    }

    /// Decides what phase 1 replies allow (Algorithm 3, lines 6–24).
    fn evaluate_phase_one(&mut self, now_ms: u64, waited: bool) {
        let quorum = self.shared.quorum;
        let bugs = self.shared.config.bugs;
        let op = self.reg.op.as_mut().expect("operation");
        let Phase::Prepare(one) = &mut op.phase else {
            return;
        };
        let verdict = one
            .acks
            .verdict(&quorum, op.excluded, bugs.accept_inconsistent_quorum);
        match verdict {
            Verdict::Consistent {
                r_voted,
                value,
                req,
                req_prev,
                prepared,
            } => {
                if op.read {
                    match prepared {
                        Some(round) if op.forced == Forced::Wanted && r_voted != Round::BOTTOM => {
                            // The write-through asked for: the chosen vote again, in our round.
                            self.write_through(now_ms, round, value, req, req_prev);
                        }
                        None if op.forced == Forced::Wanted && r_voted != Round::BOTTOM => {
                            self.undecided(now_ms, waited);
                        }
                        _ => self.answer_reads(now_ms, r_voted, value),
                    }
                    return;
                }
                // Our earlier proposal was chosen if the chosen value is its value (line 8) or
                // was built on it (then LEARNED is on its way too).
                let mine = [req, req_prev]
                    .into_iter()
                    .flatten()
                    .find_map(|r| op.proposals.iter().position(|p| p.req == r));
                self.reg.known = Known::new(r_voted, &value);
                if let (Some(i), false) = (mine, bugs.ignore_learned) {
                    self.shared.stats.learned += 1;
                    self.complete_proposal(now_ms, i);
                    return;
                }
                if let Some(round) = prepared {
                    // A successor in the prepared round (lines 11–16).
                    let (next, replies, changed) = self.apply_batch(&value, now_ms);
                    // Nothing to write: answered without phase 2 (DENIED), unless an earlier
                    // attempt of this operation was proposed. A minority may have voted for it,
                    // and a later write-through would choose it behind these answers (its
                    // commands applied when they no longer do here, as an expiry passed). Then
                    // the unchanged value is proposed: chosen in this round, above any vote of
                    // that attempt, it leaves that attempt nothing to be written through.
                    let vote_anyway = !self.op().proposals.is_empty()
                        && !self.shared.config.bugs.deny_over_earlier_attempt;
                    if !changed && !vote_anyway {
                        self.answer(replies);
                        self.shared.stats.denied += 1;
                        self.shared.stats.writes += 1;
                        self.finish(now_ms);
                        return;
                    }
                    self.propose(now_ms, round, next, replies, req);
                    return;
                }
                self.undecided(now_ms, waited);
            }
            Verdict::WriteThrough {
                round,
                value,
                req,
                req_prev,
            } => {
                self.write_through(now_ms, round, value, req, req_prev);
            }
            Verdict::Inconsistent => self.undecided(now_ms, waited),
        }
    }

    /// Phase 1 gave no decision yet: wait for stragglers, then retry above the highest round at
    /// once if the acceptors assigned the round (the rounds seen are fresh), or back off.
    fn undecided(&mut self, now_ms: u64, waited: bool) {
        let quorum = self.shared.quorum;
        let acceptors = self.shared.acceptors();
        let Phase::Prepare(one) = &self.op().phase else {
            return;
        };
        let heard = one.acks.replied().union(one.nacked);
        let (incremental, r_ack_seen) = (one.incremental, one.r_ack_seen);
        if !quorum.is_met_by(heard) {
            return;
        }
        if heard.len() < acceptors && !waited {
            self.wait_for_stragglers(now_ms);
            return;
        }
        if incremental {
            self.shared.stats.retries += 1;
            self.send_paxos_prep(now_ms, r_ack_seen);
        } else {
            self.back_off(now_ms);
        }
    }

    /// A quorum answered but disagrees: give the remaining acceptors a short while before
    /// deciding (their replies may make a consistent quorum).
    fn wait_for_stragglers(&mut self, now_ms: u64) {
        let wake = now_ms + self.shared.config.straggler_wait_ms;
        let op = self.op_mut();
        op.wake_ms = op.wake_ms.min(wake);
        let at = op_wake(self.reg);
        self.arm_timer(at);
    }

    /// The current phase's wake-up time arrived.
    fn on_wake(&mut self, now_ms: u64) {
        match &self.op().phase {
            Phase::Read(_) => self.evaluate_read(now_ms, true),
            Phase::Prepare(one) => {
                if (self.shared.quorum).is_met_by(one.acks.replied().union(one.nacked)) {
                    self.evaluate_phase_one(now_ms, true);
                } else {
                    self.back_off(now_ms);
                }
            }
            // Asked a quorum only, or the acceptors of an earlier stage: some were not asked.
            // (An install can also leave `asked` a superset of everyone, with none left.)
            Phase::Vote(two) if !self.shared.everyone().without(two.asked).is_empty() => {
                self.widen_vote(now_ms)
            }
            Phase::Vote(_) => self.back_off(now_ms),
            Phase::Backoff => self.send_prepare(now_ms),
        }
    }
}

/// Whether the operation `op` is a read asked to write its register through that has not yet.
fn collect_forced(op: &Option<Box<Operation>>) -> bool {
    op.as_ref().is_some_and(|op| op.forced == Forced::Wanted)
}

/// The ACK's fields before its value is resolved.
struct AckParts<'a> {
    inc: bool,
    r_ack: Round,
    r_voted: Round,
    value: Option<&'a Arc<Register>>,
    req: Option<ReqId>,
    req_prev: Option<ReqId>,
}

impl AckParts<'_> {
    /// Fills in an omitted value from what the proposer holds; `None` if it cannot.
    fn resolve(self, known: &Known) -> Option<AckInfo> {
        let value = match self.value {
            Some(v) => v.clone(),
            None if known.round() == self.r_voted => known.value(),
            None => return None,
        };
        Some(AckInfo {
            inc: self.inc,
            r_ack: self.r_ack,
            r_voted: self.r_voted,
            value,
            req: self.req,
            req_prev: self.req_prev,
        })
    }
}

fn op_wake(reg: &RegisterProposer) -> u64 {
    let op = reg.op.as_ref().expect("operation");
    op.wake_ms.min(op.deadline_ms)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_idle_register_takes_two_cache_lines() {
        assert_eq!(crate::table::entry_bytes::<RegisterProposer>(), 128);
    }

    #[test]
    fn a_known_value_is_the_value_it_was_made_of_and_a_short_one_is_inside() {
        use bytes::Bytes;
        use logless_commands::value::Data;
        let round = Round {
            n: 7,
            id: AttemptId {
                proposer: ProposerId {
                    node: NodeId(3),
                    incarnation: 2,
                },
                seq: 9,
            },
        };
        let value = |data, expires_at_ms, fence| {
            Arc::new(Register {
                data,
                expires_at_ms,
                fence,
            })
        };
        let short = Data::Str(Bytes::from_static(b"sixteen bytes ok"));
        let long = Data::Str(Bytes::from(vec![b'v'; 100]));
        for (value, inside) in [
            (value(short.clone(), None, 0), true),
            (value(short.clone(), Some(5), 0), false),
            (value(Data::Int(-4), None, 0), true),
            (value(Data::Absent, None, 0), true),
            (value(short, None, 1), false),
            (value(long, None, 0), false),
        ] {
            let known = Known::new(round, &value);
            assert_eq!(known.round(), round);
            assert_eq!(known.value(), value);
            assert!(known.value.is(&value));
            assert_eq!(
                !matches!(known.value, HeldValue::Shared(_)),
                inside,
                "{value:?}"
            );
        }
    }

    #[test]
    fn an_armed_time_is_an_option() {
        let mut at = ArmedAt::NONE;
        assert_eq!(at.get(), None);
        at.set(0);
        assert_eq!(at.get(), Some(0));
        assert_eq!(at.take(), Some(0));
        assert_eq!(at, ArmedAt::NONE);
        at.set(u64::MAX);
        assert_eq!(at.take(), Some(u64::MAX - 1));
    }

    #[test]
    fn a_prefetched_register_is_asked_for_on_both_its_lines() {
        // The fields `RegisterProposer::prefetch` names.
        let named = [
            std::mem::offset_of!(RegisterProposer, op),
            std::mem::offset_of!(RegisterProposer, known.value),
        ];
        let lines = crate::table::prefetched_lines::<RegisterProposer>(&named);
        assert_eq!(lines.into_iter().collect::<Vec<_>>(), [0, 1]);
    }
}
