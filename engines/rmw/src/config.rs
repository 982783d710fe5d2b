//! The proposer's configuration, passed explicitly.
use logless_commands::command::Limits;

use crate::ids::NodeId;
use crate::placement::Placement;
use crate::quorum::{AcceptorSet, Quorum};

/// Deliberate protocol bugs, each switched off by default. They exist so that every harness
/// (unit tests, model checker, simulation, chaos runner) can prove it catches a broken protocol.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct InjectedBugs {
    /// Treat any quorum of phase 1 replies as consistent, on the lowest vote among them.
    pub accept_inconsistent_quorum: bool,
    /// Ignore LEARNED notifications and request ids in consistent quorums (breaks exactly-once).
    pub ignore_learned: bool,
    /// Write-throughs name no `req_prev`, as Algorithm 3 (line 20) has it: a successor chosen
    /// only by write-throughs then tells nobody (breaks exactly-once).
    pub write_through_forgets_req_prev: bool,
    /// A retry whose commands no longer change anything is DENIED without phase 2 even after
    /// an earlier attempt was proposed, which a later write-through may then choose behind its
    /// answers (breaks linearizability when an expiry passes between the attempts).
    pub deny_over_earlier_attempt: bool,
    /// A removal goes ahead once a quorum (not every acceptor) was seen holding the dead value:
    /// a lagging acceptor's older value comes back.
    pub remove_before_all_hold_tombstone: bool,
    /// An acceptor forgets a register without raising its round floor: a delayed VOTE of an
    /// earlier round is accepted on the forgotten register and brings an older value back.
    pub skip_removal_fence: bool,
    /// A replica that rejoins after losing its state acts as an acceptor at once, from empty
    /// registers, instead of fencing its peers and recovering each register first: promises
    /// it made before the loss are broken, and two values can be chosen.
    pub rejoin_without_fence: bool,
    /// An acceptor decides on PREPARE, PAXOS_PREP and VOTE sent in any stage of the ring, not
    /// only its own (a configuration change applied without its fence, docs/ring.md §4): a
    /// proposer still at `Stable(e)` decides with a majority of the old replicas after the
    /// change moved on, beside deciders of the new ones.
    pub accept_any_stage: bool,
    /// A joint stage's new acceptor of a slot keeps its round floor when the caller raises it
    /// above the old replicas' rounds (docs/ring.md §4, "Dead registers"): it starts a register
    /// nobody wrote through (a tombstone, an expired value, a promise or a vote only some old
    /// replicas hold) low, and after two changes a write through two new replicas is chosen
    /// below a stale vote the staying one holds, which a later quorum then shows.
    pub ignore_gained_floor: bool,
    /// A proposer installing a stage keeps the phases under way and counts the replies they
    /// collected in the stage before toward the new stage's quorums (docs/ring.md §4, "A
    /// phase across an install"): a read that heard ⊥ from the two new replicas of a moving
    /// slot in the joint stage, before the mover wrote its register through, answers absent
    /// once it installs the next stable stage, where those two are a quorum.
    pub count_replies_across_stages: bool,
}

/// The default of [`ProposerConfig::registers_max`]: a quarter of a million registers, some
/// 37 MB of proposer state when their values are short (about 140 bytes a register, its
/// table entry and index; a longer value is kept beside it).
pub const REGISTERS_MAX_DEFAULT: usize = 262_144;

/// How a proposer behaves.
#[derive(Clone, Debug)]
pub struct ProposerConfig {
    /// Every acceptor, in a fixed order shared by all nodes: of every register, or with a
    /// [`placement`](ProposerConfig::placement), of some register.
    pub acceptors: Vec<NodeId>,
    /// Which of the acceptors hold each register: `None` (the default) for every one of them,
    /// or the replicas a ring's configuration gives the key's slot (see the `placement`
    /// module for what the node must do).
    pub placement: Option<Placement>,
    /// Read retries without raising rounds before a read writes through (X in §5.8 and §7).
    pub read_retries_max: u32,
    /// How long a phase waits for replies before it is retried.
    pub phase_timeout_ms: u64,
    /// How long an inconsistent quorum waits for the remaining acceptors before deciding.
    pub straggler_wait_ms: u64,
    /// Whether a read asks a quorum of acceptors first and the rest only when needed, rather
    /// than every acceptor at once.
    pub thrifty_reads: bool,
    /// Whether a fast write votes with a quorum of acceptors first (the one a read asks
    /// first) and with the rest only when needed, rather than with every acceptor at once.
    /// The acceptor left out keeps an older vote, so a read from another proposer, which asks
    /// a different quorum, finds it inconsistent and widens: for registers whose commands all
    /// go to one proposer (home routing), where it saves a third of a write's messages.
    pub thrifty_writes: bool,
    /// How long a thrifty read or fast write waits for its quorum before asking the rest.
    pub thrifty_wait_ms: u64,
    /// The first randomised backoff bound; it doubles with each retry up to the maximum.
    pub backoff_base_ms: u64,
    /// The largest backoff bound.
    pub backoff_max_ms: u64,
    /// How long a command may take before its client gets "not applied" or "outcome unknown".
    pub request_timeout_ms: u64,
    /// The most commands one proposal applies.
    pub batch_commands_max: usize,
    /// The most commands waiting on one register; more are refused as overloaded.
    pub queue_commands_max: usize,
    /// Whether an uninterrupted proposer writes in one round trip (§5.8).
    pub fast_writes: bool,
    /// The most registers the proposer keeps. A register with no operation in progress holds
    /// only caches (the value it last knew chosen, which lets acceptors leave it out of their
    /// replies, and the fast path), so beyond this many the proposer drops idle registers,
    /// sparing those used since the last time it did; the next command of a dropped register
    /// starts as on a register it never saw. Registers with operations in progress are never
    /// dropped, so the bound can be exceeded while that many are busy.
    pub registers_max: usize,
    /// Whether this node removes dead registers (deleted or expired, without a fencing token)
    /// whose latest request was its own, when asked to (see the `removal` module). Acceptors
    /// apply REMOVE from any peer whatever this says.
    pub remove_dead_registers: bool,
    /// How long a value must have been expired, by this node's clock, before this node removes
    /// it (a deleted one goes at once). Removal makes a key read as expired on every replica,
    /// whatever its clock; with this margin, no replica whose clock is behind this node's by
    /// less than it would still have read the value as live.
    pub removal_grace_ms: u64,
    /// Size limits applied to values.
    pub limits: Limits,
    /// Deliberate bugs for harness tests.
    pub bugs: InjectedBugs,
}

impl ProposerConfig {
    /// Defaults for a cluster of `acceptors` on a local network.
    pub fn new(acceptors: Vec<NodeId>) -> ProposerConfig {
        ProposerConfig {
            acceptors,
            placement: None,
            read_retries_max: 1,
            phase_timeout_ms: 200,
            straggler_wait_ms: 2,
            thrifty_reads: true,
            thrifty_writes: false,
            thrifty_wait_ms: 20,
            backoff_base_ms: 2,
            backoff_max_ms: 100,
            request_timeout_ms: 5_000,
            batch_commands_max: 256,
            queue_commands_max: 100_000,
            fast_writes: true,
            registers_max: REGISTERS_MAX_DEFAULT,
            remove_dead_registers: false,
            removal_grace_ms: 0,
            limits: Limits {
                value_bytes_max: 16 * 1024 * 1024,
                set_members_max: 1_000_000,
            },
            bugs: InjectedBugs::default(),
        }
    }

    /// The size of a majority quorum of every acceptor (without a placement, of every
    /// register).
    pub fn quorum(&self) -> usize {
        self.acceptors.len() / 2 + 1
    }

    /// The acceptors of register `key`, as indices into [`ProposerConfig::acceptors`].
    pub fn acceptors_of(&self, key: &[u8]) -> AcceptorSet {
        match &self.placement {
            Some(placement) => placement.acceptors_of(key),
            None => AcceptorSet::first(self.acceptors.len()),
        }
    }

    /// The acceptors of register `key` and which of them make a quorum.
    pub fn quorum_of(&self, key: &[u8]) -> Quorum {
        match &self.placement {
            Some(placement) => placement.quorum_of(key),
            None => Quorum::majority_of(AcceptorSet::first(self.acceptors.len())),
        }
    }
}
