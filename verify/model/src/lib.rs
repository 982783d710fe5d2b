//! A stateright model of logless built from the real replica code ([`Replica`]): three
//! replicas (or more, with the register on three of them: [`ModelConfig::ring`]), each a
//! proposer and an acceptor, and two or three clients that increment, read and
//! delete one counter (with [`Faults::removals_max`], a replica may remove the dead register
//! at any point, `docs/removal.md`), on a network that loses, duplicates and reorders messages, with crashes that
//! keep what a replica persisted. The checker explores every state within the bounds of
//! [`ModelConfig`]; the properties are `Always` linearizable (stateright's linearizability
//! tester on the clients' history) and `Sometimes` a value chosen (and, with crashes, chosen
//! after one).
//!
//! # The network
//!
//! A replica never sees the raw network. The node carries its messages on a connection per
//! direction and pair (TCP); the real node delivers in order, at most once, and a connection
//! that breaks loses some of the messages in flight and tells the receiver
//! ([`Replica::handle_link_broken`]) before anything of the next connection arrives. Over a
//! lossy, duplicating, reordering datagram network the same guarantees come from a
//! sequence-number link layer: the receiver accepts an increasing subsequence of what was sent,
//! drops duplicates and anything older than what it accepted, and reports each gap as a broken
//! link. What a replica can observe is therefore, on each link, an in-order subsequence of the
//! messages sent, where every skip is announced before the message after it. That is exactly
//! what [`Network::Connections`] generates: [`Action::Deliver`] takes the head of a connection,
//! [`Action::Break`] loses any number of its first messages (none included) and tells the
//! receiver, at any moment, as a TCP connection's end is reported whether or not anything
//! follows it. [`Network::Datagrams`] models the datagram network and the receiving half of the
//! link layer literally (every message may arrive in any order or be lost; duplicates and
//! overtaken messages are discarded by the filter; a gap is seen only when a later message
//! arrives). A test compares the two on every state the replicas and clients can reach in a
//! small configuration: everything reachable over datagrams is reachable over connections,
//! which reach more (breaks heard before or without a later message).
//!
//! A crash restarts the replica at once from its store, with a new incarnation: its clients
//! with an operation in flight lose their connection (the outcome is unknown, the operation
//! stays in flight for ever), what was in flight to it is lost ([`Item::Reconnect`] tells it
//! of the new connection), and what the dead process sent may still arrive or be lost up to
//! the [`Item::Restart`] marker, which tells the receiver. Breaks that a crash implies spend no
//! budget; other breaks and the crashes are bounded by [`Faults`].
//!
//! # Time
//!
//! Time is abstract. The proposer's phase time-out, straggler wait, thrifty read wait and backoff
//! are zero, so each wake-up it asks for is due at once, and [`Action::Fire`] may take it at any
//! point of any interleaving: before, between or after any deliveries, which covers every
//! relation between timers and message delays. Only the latest wake-up matters (a later request
//! carries a new token and the proposer ignores older ones). The request deadline lies beyond
//! every wake-up; with [`Faults::timeouts`], [`Action::FireLate`] fires a timer after it, so
//! requests can time out with their outcome unknown.
//!
//! # Bounds and reductions
//!
//! * **Attempts.** Every phase 1 and every proposal mints an attempt. The model bounds the
//!   attempts minted by all proposers of all incarnations to those the invoked commands take
//!   without contention (two per increment, one per read) plus [`ModelConfig::retries_max`]:
//!   retries are the only source of unbounded behaviour, and within this bound the exploration
//!   is exhaustive.
//! * **The history** is kept as what its future verdicts depend on ([`History`]): two states
//!   whose histories are linearizable with the same continuations are one state.
//! * **Dead messages** ([`ModelConfig::collect_dead`]): a message whose delivery can no longer
//!   change anything is removed: a reply that leaves its proposer unchanged (replies for a round
//!   or request that is no longer current stay ignored, since rounds and requests only move
//!   forward), or a request the acceptor answers without a state change with such a reply.
//!   Removing it is the same as delivering it, so the reduction is exact; a test compares the
//!   reachable observations with and without it.
//! * **Messages to self** ([`LocalDelivery::Immediate`]): a replica's messages to itself are
//!   handled within the step that sent them. The node queues them for its next turn, so other
//!   inputs may come between; [`LocalDelivery::Queued`] models that, at the price of a larger
//!   space, and the tests check it exhaustively in a smaller configuration.
//! * **Fingerprints.** A replica's hash is computed once when it changes ([`Node`]); whether a
//!   message is dead is remembered per checker thread, by the fingerprints of the two replicas.
//!
//! # Changes of the ring
//!
//! With [`ModelConfig::stages`], the replicas run the stages of one change of the ring, or two
//! ([`RingChange`]), each installing the next at any point it may ([`Action::Install`]). A
//! replica that a joint stage makes a new acceptor of the register answers nothing about it
//! until its mover raised its round floor ([`Action::RaiseFloor`]) above the highest round
//! number a majority of the old acceptors reported once they installed that stage
//! ([`LoglessModel::raise_floor`] argues why the model's reports are ones the node may take), as
//! the node does (docs/ring.md §4, "Dead registers"); the engine's
//! [`Replica::raise_floor_for_gained_slots`] does the raising and holds the register back
//! before it. A change completes only once every new acceptor raised its floor.
//!
//! `examples/explore.rs` explores any configuration from the command line and prints the state
//! count and what it found.
pub mod explore;
mod history;
pub mod multipaxos;

use std::collections::{BTreeSet, VecDeque};
use std::hash::{Hash, Hasher};
use std::sync::Arc;

use logless_commands::command::{Command, Reply};
use logless_placement::{Configuration, Replication};
use logless_rmw::acceptor::{self, AcceptorState};
use logless_rmw::config::{InjectedBugs, ProposerConfig};
use logless_rmw::ids::{ClientTag, Key, NodeId, Round};
use logless_rmw::message::Message;
use logless_rmw::persist::AcceptorStore;
use logless_rmw::placement::Placement;
use logless_rmw::proposer::{ClientReply, ProposeError};
use logless_rmw::replica::Replica;
use stateright::{Model, Property};

use history::Event;
pub use history::{Counter, CounterOp, History};

/// The number of replicas (each a proposer and an acceptor) by default
/// ([`ModelConfig::replicas`]).
pub const REPLICAS: usize = 3;

/// The request deadline: beyond any time that wake-ups alone reach, so a request times out only
/// when the model takes the step that fires a timer late ([`Action::FireLate`]).
const REQUEST_TIMEOUT_MS: u64 = 1 << 40;

/// The most answers [`LoglessModel::is_dead_cached`] keeps per checker thread.
const DEAD_CACHE_ENTRIES_MAX: usize = 1 << 19;

/// The one register of the model.
pub fn the_key() -> Key {
    Key::new("counter")
}

/// The network between replicas.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Network {
    /// Connections as the node's TCP links show them to a replica: in order, each message at
    /// most once; a break loses the first messages in flight and tells the receiver. The crate
    /// docs argue why this is every behaviour of a lossy, duplicating, reordering network that
    /// a replica can observe.
    Connections,
    /// Datagrams that may be lost, duplicated and reordered, under the receiving half of a
    /// sequence-number link layer (the previous model's): a message from an older incarnation or
    /// below the next expected number is discarded, and a gap or a new incarnation is a broken
    /// connection. A cross-check of [`Network::Connections`] for small bounds.
    Datagrams,
}

/// How a replica's messages to itself travel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LocalDelivery {
    /// Handled within the step that sent them (a reduction, see the crate docs).
    Immediate,
    /// Through an in-order, lossless queue, each handled by a step of its own, as the node
    /// handles them in its next turn.
    Queued,
}

/// The faults the model injects, each bounded.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Faults {
    /// The most connection breaks between replicas: a break loses any number of the first
    /// messages in flight on one connection (none included) and tells its receiver.
    pub breaks_max: u8,
    /// The most replica crashes, each followed at once by a restart from what it persisted.
    pub crashes_max: u8,
    /// Whether a proposer's timer may fire after its request's deadline (a request time-out).
    pub timeouts: bool,
    /// The most times a proposer drops its idle register (as it does beyond its bound of
    /// registers, [`ProposerConfig::registers_max`]), at any point. Not a fault, but bounded
    /// as one.
    pub drops_max: u8,
    /// The most times a replica asks to remove the register ([`Replica::remove_if_dead`]), at
    /// any point; removal is on when this is above 0. A read that starts mints an attempt,
    /// which counts as uncontended. Not a fault, but bounded as one.
    pub removals_max: u8,
}

/// The model's configuration.
#[derive(Clone, Debug)]
pub struct ModelConfig {
    /// The clients' operations: client `i` runs `clients[i]` in order against replica
    /// `i % replicas`.
    pub clients: Vec<Vec<CounterOp>>,
    /// The replicas ([`REPLICAS`] unless set).
    pub replicas: usize,
    /// With `Some(r)`, the replicas form a ring and the register's acceptors are the `r` of
    /// them a balanced configuration gives its slot ([`ProposerConfig::placement`]): the others
    /// only propose, for their clients. `None`: every replica is an acceptor.
    pub ring: Option<u8>,
    /// The faults.
    pub faults: Faults,
    /// The network between replicas.
    pub network: Network,
    /// How messages to self travel.
    pub local: LocalDelivery,
    /// The most attempts (phase 1s and proposals) beyond the uncontended path of the invoked
    /// commands (two per increment, one per read), summed over all proposers and incarnations.
    pub retries_max: u64,
    /// Whether reads ask a quorum first ([`ProposerConfig::thrifty_reads`]).
    pub thrifty_reads: bool,
    /// Whether fast writes vote with a quorum first ([`ProposerConfig::thrifty_writes`]).
    pub thrifty_writes: bool,
    /// Deliberate protocol bugs.
    pub bugs: InjectedBugs,
    /// A deliberate fault beyond the node's guarantees: a crashed replica restarts without its
    /// store. Only for the test that shows the checker notices what persistence is for.
    pub crash_forgets_store: bool,
    /// Whether messages that can no longer change anything are removed at once (an exact
    /// reduction; off only to check that it is one).
    pub collect_dead: bool,
    /// With [`ModelConfig::ring`], the stage of a change of the ring each replica runs in, one
    /// per replica (empty: every one in the ring's stable stage). The change removes the
    /// register's first acceptor, so its acceptors move from that one and two others to those
    /// two and the replica that was not an acceptor (docs/ring.md §4). A replica's stage
    /// decides how its proposer counts, which registers its acceptor holds, and which stage its
    /// messages carry: its acceptor decides only on messages of its own stage (the fence), and
    /// refuses older ones with STALE.
    pub stages: Vec<RingStage>,
    /// With [`ModelConfig::stages`], whether replicas move on to the next stage during the run
    /// ([`Action::Install`], at any point, as a node installs a stage its output or the
    /// configuration register named; a stage no replica has yet, the joining replica first, as
    /// the change's coordinator): `Joint(e+1)` at any time; `Stable(e+1)` only once the
    /// change may be completed (docs/ring.md §4, steps 2 and 3): a majority of the old
    /// acceptors installed the joint stage (the fence holds), and after that a read through a
    /// replica in the joint stage returned (the sync: its joint quorum holds the latest value,
    /// written through if need be; [`RingChange::ReplaceTwo`] has no sync read), and every
    /// acceptor of the new set installed the joint stage and, if it gained the register,
    /// raised its round floor ([`Action::RaiseFloor`]).
    pub stage_moves: bool,
    /// A deliberately broken change for [`ModelConfig::stage_moves`]: replicas install
    /// `Stable(e+1)` straight from `Stable(e)`, at any time, skipping the joint stage and the
    /// sync (the first mutation of issue 28: the old and the new set both decide).
    pub skip_joint_stage: bool,
    /// With stage moves, the last stage the coordinator installs: replicas behind it catch up
    /// to it, none goes beyond.
    pub last_stage: RingStage,
    /// With [`ModelConfig::stages`], the change (or changes) of the ring the stages belong to.
    pub change: RingChange,
    /// With `Some(n)`, the register starts deleted: every acceptor of the first stage holds a
    /// tombstone voted in round `n` (what an increment and a delete, each chosen at all of
    /// them, leave), which the history's initial 0 stands for. `None`: it starts empty.
    pub deleted_in_round: Option<u64>,
    /// With stage moves, whether clients invoke only once every replica installed the last
    /// stage: the register stays as it started through the changes (dead, with
    /// [`ModelConfig::deleted_in_round`]), so a node's mover, which writes through only the live
    /// registers it lists at a majority of the old replicas (docs/ring.md §4, "The data mover
    /// as built"), has nothing to move, and a change is synced without the model's read
    /// ([`RingChange::ReplaceTwo`]).
    pub ops_after_change: bool,
}

/// The change of the ring that [`ModelConfig::stages`] are stages of.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum RingChange {
    /// A ring of every replica, and one change that removes the register's first acceptor:
    /// `Stable(e)`, `Joint(e+1)`, `Stable(e+1)`. The change is synced by a read through a
    /// replica in the joint stage once the fence holds (the stand-in for the mover's
    /// write-through, see [`ModelConfig::stage_moves`]).
    #[default]
    RemoveFirst,
    /// A ring of all replicas but the last two, and two changes one after the other (five
    /// stages, `Stable(e)` to `Stable(e+2)`): the first replaces the register's first acceptor
    /// by the next-to-last replica, the second its second acceptor by the last one; the third
    /// stays. Needs [`ModelConfig::ops_after_change`]: each change is synced once the fence
    /// holds, every new acceptor installed the joint stage and none still waits for its round
    /// floor (the coordinator waits for every node of the new set to report its mover done,
    /// which a gaining node does only after it raised its floor), the register being dead or
    /// empty at every old acceptor, so that the movers write nothing through. This is the
    /// shape of the dead-register hole (docs/ring.md §4, "Dead registers").
    ReplaceTwo,
}

/// A replica's stage in the change of [`ModelConfig::stages`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RingStage {
    /// `Stable(e)`: the old configuration.
    Old,
    /// `Joint(e+1)`: a majority of the old acceptors and one of the new.
    Joint,
    /// `Stable(e+1)`: the new configuration.
    New,
}

impl ModelConfig {
    /// A configuration without faults or bugs, with the reductions on.
    pub fn new(clients: Vec<Vec<CounterOp>>, retries_max: u64) -> ModelConfig {
        ModelConfig {
            clients,
            replicas: REPLICAS,
            ring: None,
            faults: Faults::default(),
            network: Network::Connections,
            local: LocalDelivery::Immediate,
            retries_max,
            thrifty_reads: true,
            thrifty_writes: false,
            bugs: InjectedBugs::default(),
            crash_forgets_store: false,
            collect_dead: true,
            stages: Vec::new(),
            stage_moves: false,
            skip_joint_stage: false,
            last_stage: RingStage::New,
            change: RingChange::RemoveFirst,
            deleted_in_round: None,
            ops_after_change: false,
        }
    }

    /// Builds the model.
    ///
    /// # Panics
    ///
    /// If [`ModelConfig::ring`] is not a replication degree the replicas can hold.
    pub fn into_model(self) -> LoglessModel {
        let mut proposer = ProposerConfig::new((0..self.replicas).map(node_id).collect());
        if let Some(r) = self.ring {
            proposer.placement = Some(ring_placement(&proposer.acceptors, r));
        }
        proposer.bugs = self.bugs;
        proposer.remove_dead_registers = self.faults.removals_max > 0;
        proposer.thrifty_reads = self.thrifty_reads;
        proposer.thrifty_writes = self.thrifty_writes;
        proposer.read_retries_max = 1;
        // Time is abstract (see the crate docs): every wake-up is due as soon as it is asked
        // for, and only the request deadline lies ahead.
        proposer.phase_timeout_ms = 0;
        proposer.straggler_wait_ms = 0;
        proposer.thrifty_wait_ms = 0;
        proposer.backoff_base_ms = 0;
        proposer.backoff_max_ms = 0;
        proposer.request_timeout_ms = REQUEST_TIMEOUT_MS;
        let all_stages = match self.ring {
            Some(r) if !self.stages.is_empty() => {
                assert_eq!(self.stages.len(), self.replicas, "one stage per replica");
                change_placements(&proposer.acceptors, r, self.change)
            }
            _ => {
                assert!(!self.stage_moves, "stage moves need a ring and stages");
                assert!(
                    self.change == RingChange::RemoveFirst,
                    "a change needs a ring and stages"
                );
                Vec::new()
            }
        };
        assert!(
            self.change == RingChange::RemoveFirst || (self.stage_moves && self.ops_after_change),
            "two replacements are synced only with the operations after them"
        );
        let last = all_stages.len().saturating_sub(1);
        let staged: Vec<Placement> = (self.stages.iter())
            .filter(|_| !all_stages.is_empty())
            .map(|stage| all_stages[stage_index(*stage, last)].clone())
            .collect();
        if let Some(first) = all_stages.first() {
            proposer.placement = Some(first.clone());
        }
        let acceptors_at = |placement: &Placement| -> Vec<usize> {
            let set = placement.acceptors_of(the_key().as_bytes());
            (0..self.replicas).filter(|&i| set.contains(i)).collect()
        };
        let changes = (0..all_stages.len() / 2)
            .map(|k| {
                let old = acceptors_at(&all_stages[2 * k]);
                let new = acceptors_at(&all_stages[2 * k + 2]);
                let coordinator = *(new.iter())
                    .find(|i| !old.contains(i))
                    .expect("a change gives the register a new acceptor");
                ChangeSets {
                    old,
                    new,
                    coordinator,
                }
            })
            .collect();
        LoglessModel {
            config: self,
            staged,
            all_stages,
            changes,
            proposer,
        }
    }
}

/// The model: the configuration and the proposer configuration every replica runs.
#[derive(Clone, Debug)]
pub struct LoglessModel {
    config: ModelConfig,
    proposer: ProposerConfig,
    /// Each replica's placement when the replicas run in [stages](ModelConfig::stages) of a
    /// change (empty otherwise: every replica runs `proposer`).
    staged: Vec<Placement>,
    /// With stages, the placements of every stage in order: `Stable(e)`, `Joint(e+1)`,
    /// `Stable(e+1)` (and `Joint(e+2)`, `Stable(e+2)` with [`RingChange::ReplaceTwo`]).
    all_stages: Vec<Placement>,
    /// With stages, the register's acceptor sets of each change, the `k`-th from stage `2k`
    /// to stage `2k + 2`.
    changes: Vec<ChangeSets>,
}

/// The register's acceptors before and after one change of the ring.
#[derive(Clone, Debug)]
struct ChangeSets {
    /// Its acceptors in the stable stage before (`O`).
    old: Vec<usize>,
    /// Its acceptors in the stable stage after (`N`).
    new: Vec<usize>,
    /// The replica that installs each stage of the change first: the one the change gives the
    /// register (the joining one), as the change's coordinator.
    coordinator: usize,
}

/// A replica's store: its persisted acceptor state, which survives a crash.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Store {
    state: Option<AcceptorState>,
    round_floor: Round,
}

impl AcceptorStore for Store {
    type Error = std::convert::Infallible;
    fn write(&mut self, key: &Key, state: &AcceptorState) -> Result<(), Self::Error> {
        assert_eq!(*key, the_key(), "the model has one register");
        self.state = Some(state.clone());
        Ok(())
    }
    fn flush(&mut self) -> Result<(), Self::Error> {
        Ok(())
    }
    fn write_round_floor(&mut self, floor: Round) -> Result<(), Self::Error> {
        self.round_floor = floor;
        Ok(())
    }
    fn remove(&mut self, key: &Key) -> Result<(), Self::Error> {
        assert_eq!(*key, the_key(), "the model has one register");
        self.state = None;
        Ok(())
    }
}

/// A replica process.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct NodeState {
    replica: Replica,
    store: Store,
    incarnation: u32,
    now_ms: u64,
    /// The attempts earlier incarnations minted.
    minted_before: u64,
    /// The latest wake-up the proposer asked for: its token and time. Only the latest matters:
    /// a later request always carries a new token, and the proposer ignores older ones.
    timer: Option<(u64, u64)>,
}

impl NodeState {
    fn minted(&self) -> u64 {
        self.minted_before + self.replica.attempts_minted()
    }
}

/// A replica process with its fingerprint, computed once when it changes: a step changes one
/// replica, and the other two need not be hashed again for the new state's fingerprint.
#[derive(Clone, Debug)]
pub struct Node {
    state: NodeState,
    fingerprint: u64,
}

impl Node {
    fn sealed(state: NodeState) -> Arc<Node> {
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        state.hash(&mut hasher);
        Arc::new(Node {
            state,
            fingerprint: hasher.finish(),
        })
    }
}

impl PartialEq for Node {
    fn eq(&self, other: &Node) -> bool {
        self.fingerprint == other.fingerprint && self.state == other.state
    }
}

impl Eq for Node {}

impl Hash for Node {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.fingerprint.hash(state);
    }
}

/// What travels on a connection ([`Network::Connections`]).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Item {
    /// A protocol message.
    Message(Message),
    /// The sender crashed here: the messages before this may still arrive (the dead process's
    /// data in flight) or be lost, and the receiver is told before anything after it.
    Restart,
    /// The receiver crashed: whatever the sender sent before it reconnects may be lost, and the
    /// receiver's new incarnation is told before the first message of the new connection.
    Reconnect,
}

/// One direction between two replicas under [`Network::Datagrams`].
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct DatagramLink {
    /// In flight, in no order: the sender's incarnation, the sequence number, the message.
    in_flight: BTreeSet<(u32, u32, Message)>,
    /// The sender's next sequence number (numbers restart with each incarnation).
    next_seq: u32,
    /// The receiver's filter: the sender incarnation it accepts and the next number it expects,
    /// or nothing since the receiver (re)started.
    accepted: Option<(u32, u32)>,
}

impl DatagramLink {
    /// Whether the receiver's filter discards `(incarnation, seq)`.
    fn is_stale(&self, incarnation: u32, seq: u32) -> bool {
        self.accepted.is_some_and(|(known, expected)| {
            incarnation < known || (incarnation == known && seq < expected)
        })
    }

    /// Whether accepting `(incarnation, seq)` tells the receiver that its connection broke,
    /// and whether that spends the break budget (lost messages do; a restart does not).
    fn gap(&self, incarnation: u32, seq: u32, receiver_restarted: bool) -> (bool, bool) {
        match self.accepted {
            Some((known, expected)) if known == incarnation => {
                let lost = seq > expected;
                (lost, lost)
            }
            Some(_) => (true, seq > 0),
            // A restarted receiver's first connection: what was sent before it may have been
            // lost with the crash.
            None if receiver_restarted => (true, false),
            // The first connection ever: the node reports it too, but no proposer has anything
            // in flight to react to it then, except after the sender restarted.
            None => (incarnation > 1 || seq > 0, seq > 0),
        }
    }
}

/// A client.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Client {
    /// The index of its next operation.
    next: usize,
    /// Whether operation `next` was invoked and has not returned.
    waiting: bool,
    /// Whether it is done: every operation returned, one ended without a result, or its replica
    /// crashed while one was in flight (a lost connection: the outcome is unknown).
    stopped: bool,
}

/// A state of the model.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct State {
    nodes: Vec<Arc<Node>>,
    /// The connection from `i` to `j` at `i * replicas + j`; `i == j` is the queue of messages
    /// to itself ([`LocalDelivery::Queued`]).
    links: Vec<Arc<VecDeque<Item>>>,
    /// Under [`Network::Datagrams`], the links between replicas, indexed as `links` (which then
    /// carry only messages to self).
    datagrams: Vec<Arc<DatagramLink>>,
    clients: Vec<Client>,
    history: Arc<History>,
    breaks: u8,
    crashes: u8,
    drops: u8,
    removals: u8,
    /// The attempts the invoked commands take without contention.
    uncontended: u64,
    /// With [`ModelConfig::stage_moves`], the clients whose read in progress is the change's
    /// sync (invoked through a replica in the joint stage once the fence held), by bit.
    sync_reads: u32,
    /// Whether a sync read returned: `Stable(e+1)` may be installed.
    synced: bool,
    /// With stages, the reports of the old acceptors of each change (`ring/high/<id>` in the
    /// node): the highest round number the replica acknowledged ([`Replica::high_round`]) when
    /// it installed the change's joint stage, at `k * replicas + i` for change `k` and replica
    /// `i` (see [`LoglessModel::raise_floor`]).
    reports: Vec<Option<u64>>,
}

impl State {
    /// The clients' history.
    pub fn history(&self) -> &History {
        &self.history
    }

    /// What the replicas and the clients observed: every replica's protocol state and the
    /// history (by its summary), without the network and the model's bookkeeping. Two models
    /// of the network are compared on these.
    pub fn observed(&self) -> (Vec<Replica>, u64) {
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        self.history.hash(&mut hasher);
        (
            self.nodes.iter().map(|n| n.state.replica.clone()).collect(),
            hasher.finish(),
        )
    }

    fn link(&self, from: usize, to: usize) -> &VecDeque<Item> {
        &self.links[from * self.nodes.len() + to]
    }

    fn link_mut(&mut self, from: usize, to: usize) -> &mut VecDeque<Item> {
        Arc::make_mut(&mut self.links[from * self.nodes.len() + to])
    }

    fn datagram_mut(&mut self, from: usize, to: usize) -> &mut DatagramLink {
        Arc::make_mut(&mut self.datagrams[from * self.nodes.len() + to])
    }
}

/// A step of the model. Each is one input to one replica (or one fault), followed by what the
/// replica's runtime does with the output: persist, then send, answer and set timers.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Action {
    /// Client `client` invokes its next operation at its replica.
    Invoke(usize),
    /// The first message on the connection `from → to` is delivered.
    Deliver(usize, usize),
    /// The connection `from → to` breaks and `to` is told: `lost` messages are lost, the first
    /// ones in flight (or, with a [`Item::Reconnect`] first, the first ones after it), and a
    /// crash's marker is passed. A break that passes a marker is part of the crash and spends
    /// no budget.
    Break {
        /// The sender.
        from: usize,
        /// The receiver.
        to: usize,
        /// How many messages are lost.
        lost: usize,
    },
    /// Under [`Network::Datagrams`], the `index`-th message in flight from `from` to `to` (in
    /// the order of `(incarnation, seq, message)`) arrives.
    Arrive {
        /// The sender.
        from: usize,
        /// The receiver.
        to: usize,
        /// Which message in flight.
        index: usize,
    },
    /// Under [`Network::Datagrams`], the `index`-th message in flight from `from` to `to` is
    /// lost.
    Drop {
        /// The sender.
        from: usize,
        /// The receiver.
        to: usize,
        /// Which message in flight.
        index: usize,
    },
    /// The proposer's timer fires.
    Fire(usize),
    /// The proposer's timer fires after the request deadline.
    FireLate(usize),
    /// The replica crashes and restarts with what it persisted.
    Crash(usize),
    /// The replica's proposer drops its register, idle (no operation in progress).
    DropIdle(usize),
    /// The replica starts removing the register, if it may ([`Replica::remove_if_dead`]).
    Remove(usize),
    /// The replica installs the next stage of the ring's change ([`ModelConfig::stage_moves`]).
    Install(usize),
    /// The replica's mover raises its round floor for the register's slot, which the joint
    /// stage it installed gives it, once a majority of the old acceptors reported
    /// ([`LoglessModel::raise_floor`]).
    RaiseFloor(usize),
}

/// The placement of a balanced ring of `acceptors` with `r` replicas per key.
fn ring_placement(acceptors: &[NodeId], r: u8) -> Placement {
    Placement::new(&balanced_ring(acceptors, r), acceptors).expect("every node an acceptor")
}

/// A balanced ring of `acceptors` with `r` replicas per key.
fn balanced_ring(acceptors: &[NodeId], r: u8) -> Configuration {
    let nodes: Vec<_> = (acceptors.iter())
        .map(|n| logless_placement::NodeId(n.0))
        .collect();
    let replication = Replication::new(r).expect("3, 5 or 7 replicas per key");
    Configuration::balanced(&nodes, replication).expect("a ring")
}

/// The placements of every stage of `change` on a ring of `acceptors` with `r` replicas per
/// key, in order ([`LoglessModel::all_stages`]).
fn change_placements(acceptors: &[NodeId], r: u8, change: RingChange) -> Vec<Placement> {
    let slot = logless_placement::key_slot(the_key().as_bytes());
    let configs = match change {
        RingChange::RemoveFirst => {
            let old = balanced_ring(acceptors, r);
            let new = old
                .with_node_removed(old.replicas(slot).first())
                .expect("more replicas than replicas per key");
            vec![old, new]
        }
        RingChange::ReplaceTwo => {
            let [ring @ .., next_to_last, last] = acceptors else {
                panic!("two replicas outside the ring");
            };
            let first = balanced_ring(ring, r);
            let replicas = first.replicas(slot).nodes().to_vec();
            let node = |n: &NodeId| logless_placement::NodeId(n.0);
            let second = first
                .with_node_replaced(replicas[0], node(next_to_last))
                .expect("a replica replaced");
            let third = second
                .with_node_replaced(replicas[1], node(last))
                .expect("a replica replaced");
            vec![first, second, third]
        }
    };
    let mut stages = vec![Placement::new(&configs[0], acceptors)];
    for pair in configs.windows(2) {
        stages.push(Placement::joint(&pair[0], &pair[1], acceptors));
        stages.push(Placement::new(&pair[1], acceptors));
    }
    (stages.into_iter())
        .collect::<Result<_, _>>()
        .expect("every node an acceptor")
}

/// The index in [`LoglessModel::all_stages`] that `stage` names: the first, the first joint
/// stage, or the last (`last`).
fn stage_index(stage: RingStage, last: usize) -> usize {
    match stage {
        RingStage::Old => 0,
        RingStage::Joint => 1,
        RingStage::New => last,
    }
}

/// The replicas that are acceptors of [`the_key`] in `config` (every one without a ring; in the
/// first replica's stage with [`ModelConfig::stages`]).
pub fn acceptors_of_the_key(config: &ModelConfig) -> Vec<usize> {
    let model = config.clone().into_model();
    let set = match model.staged.first() {
        Some(placement) => placement.acceptors_of(the_key().as_bytes()),
        None => model.proposer.acceptors_of(the_key().as_bytes()),
    };
    (0..config.replicas).filter(|&i| set.contains(i)).collect()
}

fn node_id(index: usize) -> NodeId {
    NodeId(index as u16 + 1)
}

fn index_of(node: NodeId) -> usize {
    usize::from(node.0) - 1
}

fn tag(client: usize, op: usize) -> ClientTag {
    ClientTag(((client as u64) << 32) | op as u64)
}

fn untag(tag: ClientTag) -> (usize, usize) {
    ((tag.0 >> 32) as usize, (tag.0 & 0xffff_ffff) as usize)
}

/// How a break of a connection is accounted for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum BreakKind {
    /// Passing a crash's marker: part of the crash.
    Marker,
    /// A break of its own: it spends the budget.
    Budget,
}

/// The number of messages from `start` on before the next marker of `link`.
fn messages_before_marker(link: &VecDeque<Item>, start: usize) -> usize {
    link.iter()
        .skip(start)
        .take_while(|i| matches!(i, Item::Message(_)))
        .count()
}

/// What a break of `link` losing `lost` messages is, if it can be one: passing a
/// [`Item::Reconnect`] at the head (with messages after it lost), losing the rest of a crashed
/// sender's connection up to its [`Item::Restart`], or a break of its own.
fn break_kind(link: &VecDeque<Item>, lost: usize) -> Option<BreakKind> {
    match link.front() {
        Some(Item::Reconnect) => {
            (lost <= messages_before_marker(link, 1)).then_some(BreakKind::Marker)
        }
        _ => {
            let before = messages_before_marker(link, 0);
            if lost == before && matches!(link.get(lost), Some(Item::Restart)) {
                Some(BreakKind::Marker)
            } else {
                (lost <= before).then_some(BreakKind::Budget)
            }
        }
    }
}

impl LoglessModel {
    /// The configuration.
    pub fn config(&self) -> &ModelConfig {
        &self.config
    }

    fn new_node(&self, index: usize, incarnation: u32, store: Store, now_ms: u64) -> NodeState {
        let recovered = store.state.clone().map(|s| (the_key(), s));
        NodeState {
            replica: Replica::new(
                node_id(index),
                incarnation,
                match self.staged.get(index) {
                    Some(placement) => ProposerConfig {
                        placement: Some(placement.clone()),
                        ..self.proposer.clone()
                    },
                    None => self.proposer.clone(),
                },
                0,
                recovered,
            )
            .with_round_floor(store.round_floor),
            store,
            incarnation,
            now_ms,
            minted_before: 0,
            timer: None,
        }
    }

    /// Takes replica `index`'s output in the runtime's order: commit the acceptor states to the
    /// store, which releases the replies; send; answer; set timers. With
    /// [`LocalDelivery::Immediate`], messages to itself are handled at once, in order.
    fn flush(&self, state: &mut State, index: usize, mut node: NodeState) {
        let mut local = VecDeque::new();
        loop {
            let output = node.replica.take_output();
            let Ok(released) = output.persist.commit(&mut node.store);
            for envelope in output.sends.into_iter().chain(released) {
                self.send(
                    state,
                    index,
                    node.incarnation,
                    envelope.to,
                    envelope.message,
                    &mut local,
                );
            }
            let finished = output
                .replies
                .iter()
                .any(|r| r.result != Err(ProposeError::Overloaded));
            for reply in output.replies {
                self.answer(state, reply);
            }
            if let Some(timer) = output.timers.last() {
                node.timer = Some((timer.token, timer.at_ms));
            } else if finished {
                // An answer ends the operation, which makes the armed token stale (a next
                // operation would have asked for a new wake-up in the same output). Keeping a
                // stale timer would only tell apart states that are the same.
                if let Some((token, _)) = node.timer.take() {
                    let mut replica = node.replica.clone();
                    replica.handle_timer(u64::MAX, &the_key(), token);
                    assert!(
                        replica == node.replica,
                        "a finished operation's timer is stale"
                    );
                }
            }
            let Some(message) = local.pop_front() else {
                break;
            };
            node.replica
                .handle_message(node.now_ms, node_id(index), &message);
        }
        state.nodes[index] = Node::sealed(node);
    }

    fn send(
        &self,
        state: &mut State,
        from: usize,
        incarnation: u32,
        to: NodeId,
        message: Message,
        local: &mut VecDeque<Message>,
    ) {
        let to = index_of(to);
        if to == from && self.config.local == LocalDelivery::Immediate {
            local.push_back(message);
        } else if to != from && self.config.network == Network::Datagrams {
            let link = state.datagram_mut(from, to);
            link.in_flight.insert((incarnation, link.next_seq, message));
            link.next_seq += 1;
        } else {
            state.link_mut(from, to).push_back(Item::Message(message));
        }
    }

    fn answer(&self, state: &mut State, reply: ClientReply) {
        let (c, op) = untag(reply.client);
        let crashes = state.crashes;
        let client = &mut state.clients[c];
        assert!(
            client.waiting && client.next == op && !client.stopped,
            "one answer per invocation"
        );
        let ops = &self.config.clients[c];
        let history = Arc::make_mut(&mut state.history);
        client.waiting = false;
        match reply.result {
            Ok(reply) => {
                let value = match reply {
                    Reply::Int(v) => v,
                    Reply::Bulk(b) => std::str::from_utf8(&b)
                        .ok()
                        .and_then(|s| s.parse().ok())
                        .expect("the counter reads as an integer"),
                    Reply::Nil => 0,
                    other => panic!("a counter command answered {other:?}"),
                };
                history.record(Event::Return(c, value));
                if state.sync_reads & (1 << c) != 0 {
                    state.sync_reads &= !(1 << c);
                    state.synced = true;
                }
                if ops[op] == CounterOp::Incr {
                    history.incremented = true;
                    history.incremented_after_crash |= crashes > 0;
                }
                client.next += 1;
                client.stopped = client.next == ops.len();
            }
            // The command may still be chosen: it stays in flight in the history for ever.
            Err(ProposeError::OutcomeUnknown) => client.stopped = true,
            Err(
                ProposeError::NotApplied
                | ProposeError::Overloaded
                | ProposeError::DiskFull
                | ProposeError::QuorumFull,
            ) => {
                history.record(Event::NotApplied(c));
                client.stopped = true;
            }
        }
    }

    fn invoke(&self, state: &mut State, c: usize) -> Option<()> {
        let client = &state.clients[c];
        if client.stopped
            || client.waiting
            || (self.config.ops_after_change && !self.change_done(state))
        {
            return None;
        }
        let op = self.config.clients[c][client.next];
        let tagged = tag(c, client.next);
        state.clients[c].waiting = true;
        state.uncontended += match op {
            CounterOp::Incr | CounterOp::Del => 2,
            CounterOp::Get => 1,
        };
        Arc::make_mut(&mut state.history).record(Event::Invoke(c, op));
        let index = c % self.config.replicas;
        if op == CounterOp::Get
            && self.config.change == RingChange::RemoveFirst
            && self.stage_of(&state.nodes[index].state) == Some(1)
            && self.fence_holds(state, 0)
        {
            state.sync_reads |= 1 << c;
        }
        let mut node = state.nodes[index].state.clone();
        let command = match op {
            CounterOp::Incr => Command::IncrBy(1),
            CounterOp::Get => Command::Get,
            CounterOp::Del => Command::Del,
        };
        node.replica
            .handle_command(node.now_ms, tagged, the_key(), command);
        self.flush(state, index, node);
        Some(())
    }

    fn deliver(&self, state: &mut State, from: usize, to: usize) -> Option<()> {
        let Some(Item::Message(_)) = state.link(from, to).front() else {
            return None;
        };
        let Some(Item::Message(message)) = state.link_mut(from, to).pop_front() else {
            unreachable!("checked");
        };
        let mut node = state.nodes[to].state.clone();
        node.replica
            .handle_message(node.now_ms, node_id(from), &message);
        self.flush(state, to, node);
        Some(())
    }

    fn break_link(&self, state: &mut State, from: usize, to: usize, lost: usize) -> Option<()> {
        if from == to {
            return None;
        }
        let kind = break_kind(state.link(from, to), lost)?;
        if kind == BreakKind::Budget && state.breaks >= self.config.faults.breaks_max {
            return None;
        }
        let link = state.link_mut(from, to);
        match link.front() {
            Some(Item::Reconnect) => drop(link.drain(..=lost)),
            _ if kind == BreakKind::Marker => drop(link.drain(..=lost)),
            _ => drop(link.drain(..lost)),
        }
        let mut node = state.nodes[to].state.clone();
        node.replica.handle_link_broken(node_id(from));
        if kind == BreakKind::Budget && lost == 0 && node.replica == state.nodes[to].state.replica {
            // A break that loses nothing and changes nothing would only spend the budget.
            return None;
        }
        if kind == BreakKind::Budget {
            state.breaks += 1;
        }
        self.flush(state, to, node);
        Some(())
    }

    fn arrive(&self, state: &mut State, from: usize, to: usize, index: usize) -> Option<()> {
        let budget_left = state.breaks < self.config.faults.breaks_max;
        let receiver_restarted = state.nodes[to].state.incarnation > 1;
        let link = state.datagram_mut(from, to);
        let (incarnation, seq, message) = link.in_flight.iter().nth(index)?.clone();
        assert!(
            !link.is_stale(incarnation, seq),
            "discarded messages are removed"
        );
        let (broken, spends) = link.gap(incarnation, seq, receiver_restarted);
        if spends && !budget_left {
            return None;
        }
        link.in_flight.remove(&(incarnation, seq, message.clone()));
        link.accepted = Some((incarnation, seq + 1));
        // A copy of this message, or anything it overtook, would now be discarded: a duplicate
        // or a reordered message is never seen, only the gap it leaves.
        let stale: Vec<_> = link
            .in_flight
            .iter()
            .filter(|(i, s, _)| link.is_stale(*i, *s))
            .cloned()
            .collect();
        for entry in stale {
            link.in_flight.remove(&entry);
        }
        if spends {
            state.breaks += 1;
        }
        let mut node = state.nodes[to].state.clone();
        if broken {
            node.replica.handle_link_broken(node_id(from));
        }
        node.replica
            .handle_message(node.now_ms, node_id(from), &message);
        self.flush(state, to, node);
        Some(())
    }

    fn drop_datagram(&self, state: &mut State, from: usize, to: usize, index: usize) -> Option<()> {
        let link = state.datagram_mut(from, to);
        let entry = link.in_flight.iter().nth(index)?.clone();
        link.in_flight.remove(&entry);
        Some(())
    }

    fn fire(&self, state: &mut State, index: usize, late: bool) -> Option<()> {
        let (token, at_ms) = state.nodes[index].state.timer?;
        let mut node = state.nodes[index].state.clone();
        node.timer = None;
        node.now_ms = node.now_ms.max(at_ms);
        if late {
            node.now_ms += REQUEST_TIMEOUT_MS;
        }
        let before = node.replica.clone();
        node.replica.handle_timer(node.now_ms, &the_key(), token);
        assert!(
            node.replica != before,
            "the model keeps only live timers, and a live one always changes the proposer"
        );
        self.flush(state, index, node);
        Some(())
    }

    fn crash(&self, state: &mut State, index: usize) -> Option<()> {
        if state.crashes >= self.config.faults.crashes_max {
            return None;
        }
        state.crashes += 1;
        let old = &state.nodes[index].state;
        assert_eq!(
            old.store.state.as_ref(),
            old.replica.acceptor_state(&the_key()).as_ref(),
            "every acceptor state is persisted at the end of a step"
        );
        let store = if self.config.crash_forgets_store {
            Store::default()
        } else {
            old.store.clone()
        };
        let stage = self.stage_of(old);
        let mut node = self.new_node(index, old.incarnation + 1, store, old.now_ms);
        node.minted_before = old.minted();
        if let Some(stage) = stage {
            // The node restarts in the stage it had installed (the configuration register
            // tells it); its first input is this. A gaining node restarted into a joint stage
            // holds the slot back again until its restarted mover raises the floor again
            // ([`Action::RaiseFloor`]); the floor it raised before is in its store.
            node.replica
                .install_placement(self.all_stages[stage].clone());
        }
        state.nodes[index] = Node::sealed(node);
        state.link_mut(index, index).clear();
        for peer in (0..self.config.replicas).filter(|p| *p != index) {
            match self.config.network {
                Network::Connections => {
                    state.link_mut(index, peer).push_back(Item::Restart);
                    let inbound = state.link_mut(peer, index);
                    inbound.clear();
                    inbound.push_back(Item::Reconnect);
                }
                Network::Datagrams => {
                    state.datagram_mut(index, peer).next_seq = 0;
                    let inbound = state.datagram_mut(peer, index);
                    inbound.in_flight.clear();
                    inbound.accepted = None;
                }
            }
        }
        for (c, client) in state.clients.iter_mut().enumerate() {
            if c % self.config.replicas == index && client.waiting {
                client.waiting = false;
                client.stopped = true;
            }
        }
        Some(())
    }

    /// The index in [`LoglessModel::all_stages`] of the stage replica `node` installed, with
    /// stages.
    fn stage_of(&self, node: &NodeState) -> Option<usize> {
        let stage = node.replica.stage();
        self.all_stages.iter().position(|p| p.stage_id() == stage)
    }

    /// Whether every replica installed the last stage ([`ModelConfig::ops_after_change`]).
    fn change_done(&self, state: &State) -> bool {
        let last = self.all_stages.len() - 1;
        (state.nodes.iter()).all(|n| self.stage_of(&n.state) == Some(last))
    }

    /// Whether a majority of the old acceptors of change `k` installed its joint stage (or a
    /// later one).
    fn fence_holds(&self, state: &State, k: usize) -> bool {
        let old = &self.changes[k].old;
        let moved = (old.iter())
            .filter(|&&i| self.stage_of(&state.nodes[i].state) > Some(2 * k))
            .count();
        moved * 2 > old.len()
    }

    /// Whether change `k` may complete ([`ModelConfig::stage_moves`]): the coordinator swaps in
    /// its stable stage once every node of the new set reported its mover done, which a node
    /// that gains the register's slot does only after it raised its round floor.
    fn may_complete(&self, state: &State, k: usize) -> bool {
        let change = &self.changes[k];
        let floors_raised = (change.new.iter()).all(|&i| {
            let node = &state.nodes[i].state;
            self.stage_of(node) > Some(2 * k) && !node.replica.awaits_gained_floor()
        });
        if !floors_raised {
            return false;
        }
        match self.config.change {
            // The sync: a read through a replica in the joint stage returned once the fence
            // held (the stand-in for the mover's write-through).
            RingChange::RemoveFirst => state.synced,
            // The movers list the live registers at a majority of the old set (the fence
            // first); the register is dead or empty at every old acceptor, so none has anything
            // to write through.
            RingChange::ReplaceTwo => {
                let live = (change.old.iter()).any(|&i| {
                    let replica = &state.nodes[i].state.replica;
                    (replica.acceptor_state(&the_key()))
                        .is_some_and(|s| s.value.data != logless_commands::value::Data::Absent)
                });
                assert!(!live, "the operations come after the change");
                self.fence_holds(state, k)
            }
        }
    }

    fn install(&self, state: &mut State, index: usize) -> Option<()> {
        if !self.config.stage_moves {
            return None;
        }
        let stage = self.stage_of(&state.nodes[index].state)?;
        let last_stage = self.all_stages.len() - 1;
        let next = if self.config.skip_joint_stage {
            stage + 2
        } else {
            stage + 1
        };
        let last = stage_index(self.config.last_stage, last_stage);
        if next > last {
            return None;
        }
        let k = (next - 1) / 2;
        if next % 2 == 0 && !self.config.skip_joint_stage && !self.may_complete(state, k) {
            return None;
        }
        // A stage no replica has yet is the coordinator's to install first (it wrote it to the
        // configuration register); the others catch up in any order.
        let latest = (state.nodes.iter())
            .filter_map(|n| self.stage_of(&n.state))
            .max()
            .unwrap_or(0);
        if next > latest && index != self.changes[k].coordinator {
            return None;
        }
        let mut node = state.nodes[index].state.clone();
        node.replica
            .install_placement(self.all_stages[next].clone());
        if next % 2 == 1 && self.changes[k].old.contains(&index) {
            // Its mover reports the highest round it acknowledged: from the install on, the
            // acceptor refuses the messages of the stage before (the fence).
            let report = &mut state.reports[k * self.config.replicas + index];
            report.get_or_insert(node.replica.high_round());
        }
        self.flush(state, index, node);
        Some(())
    }

    /// The mover of replica `index`, which gained the register's slot in the joint stage it
    /// installed, raises its round floor above the highest report of the change's old
    /// acceptors, once a majority of them reported ([`Replica::raise_floor_for_gained_slots`]).
    ///
    /// The node takes the reports of `ring/high/<id>`, each written by a node's mover after it
    /// installed the joint stage: the highest round number it acknowledged then or later, at
    /// least what it acknowledged at the install. The model takes each at the install, the
    /// least a report can say, and raises the floor at any point once a majority reported,
    /// above the highest of those that reported by then, as the node raises it above the
    /// highest of the reports it read once a majority of them were there. The model's floor is
    /// therefore one the node may raise, or lower than the node's: never one that hides a round
    /// the node would let through. (What matters for safety, docs/ring.md §4 "Why it is safe",
    /// is that every majority of the old set has a member whose report covers each round a
    /// majority promised before the fence; a report taken at the install covers them already.)
    fn raise_floor(&self, state: &mut State, index: usize) -> Option<()> {
        let node = &state.nodes[index].state;
        if !node.replica.awaits_gained_floor() {
            return None;
        }
        let stage = self.stage_of(node)?;
        let k = (stage - 1) / 2;
        let old = &self.changes[k].old;
        let reports: Vec<u64> = (old.iter())
            .filter_map(|&i| state.reports[k * self.config.replicas + i])
            .collect();
        if reports.len() * 2 <= old.len() {
            return None;
        }
        let above = reports.into_iter().max().expect("a majority reported");
        let mut node = node.clone();
        let raised =
            (node.replica).raise_floor_for_gained_slots(self.all_stages[stage].stage_id(), above);
        assert!(raised, "the stage installed");
        self.flush(state, index, node);
        Some(())
    }

    fn drop_idle(&self, state: &mut State, index: usize) -> Option<()> {
        if state.drops >= self.config.faults.drops_max {
            return None;
        }
        let mut node = state.nodes[index].state.clone();
        node.replica.drop_idle_registers();
        if node.replica.proposer_registers()
            == state.nodes[index].state.replica.proposer_registers()
        {
            return None;
        }
        state.drops += 1;
        self.flush(state, index, node);
        Some(())
    }

    fn remove(&self, state: &mut State, index: usize) -> Option<()> {
        if state.removals >= self.config.faults.removals_max {
            return None;
        }
        let mut node = state.nodes[index].state.clone();
        if !node.replica.remove_if_dead(node.now_ms, &the_key()) {
            return None;
        }
        state.removals += 1;
        state.uncontended += 1;
        self.flush(state, index, node);
        Some(())
    }

    /// [`LoglessModel::is_dead`], remembered: the answer depends only on the message and the two
    /// replicas (by their fingerprints), and the same ones meet in many states.
    fn is_dead_cached(&self, state: &State, from: usize, to: usize, message: &Message) -> bool {
        type Cache = std::collections::HashMap<(u64, u64, usize, usize, Message), bool>;
        thread_local! {
            static CACHE: std::cell::RefCell<Cache> = std::cell::RefCell::new(Cache::new());
        }
        let key = (
            state.nodes[from].fingerprint,
            state.nodes[to].fingerprint,
            from,
            to,
            message.clone(),
        );
        if let Some(dead) = CACHE.with(|c| c.borrow().get(&key).copied()) {
            return dead;
        }
        let dead = self.is_dead(state, from, to, message);
        CACHE.with(|c| {
            let mut cache = c.borrow_mut();
            if cache.len() >= DEAD_CACHE_ENTRIES_MAX {
                cache.clear();
            }
            cache.insert(key, dead);
        });
        dead
    }

    /// Whether `message` from `from` to `to` can no longer change anything: a reply its
    /// proposer ignores (and will always ignore, see the crate docs), or a request the acceptor
    /// answers without a state change with such a reply.
    fn is_dead(&self, state: &State, from: usize, to: usize, message: &Message) -> bool {
        let node = &state.nodes[to].state;
        match message {
            Message::Ack { .. } | Message::Nack { .. } | Message::Voted { .. } => {
                let mut replica = node.replica.clone();
                replica.handle_message(node.now_ms, node_id(from), message);
                replica == node.replica
            }
            // Ignored by a proposer that installed that stage or a later one (stages only move
            // forward), otherwise it backs off.
            Message::Stale { stage, .. } => *stage <= node.replica.stage(),
            // Fenced: one of an older stage is answered with STALE, dead if that is; one of a
            // newer stage is held back, and may be answered once the stage is installed.
            Message::Prepare { .. } | Message::PaxosPrep { .. } | Message::Vote { .. }
                if message.stage() != node.replica.stage()
                    && !self.proposer.bugs.accept_any_stage =>
            {
                let stale = Message::Stale {
                    key: message.key().clone(),
                    stage: node.replica.stage(),
                };
                message.stage() < node.replica.stage() && self.is_dead(state, to, from, &stale)
            }
            // Dropped unanswered by a new acceptor that has not raised its round floor yet, which
            // may answer it once it has.
            Message::Prepare { .. } | Message::PaxosPrep { .. } | Message::Vote { .. }
                if node.replica.awaits_gained_floor() =>
            {
                false
            }
            Message::Prepare { .. } | Message::PaxosPrep { .. } | Message::Vote { .. } => {
                // A register the acceptor does not hold is ⊥ at the round floor.
                let fresh = AcceptorState {
                    r_ack: node.replica.round_floor(),
                    ..AcceptorState::default()
                };
                let current = node.replica.acceptor_state(&the_key()).unwrap_or(fresh);
                let step = acceptor::on_message(&current, node_id(from), message)
                    .expect("an acceptor message");
                step.next.is_none()
                    && step.replies().all(|reply| {
                        reply.to == node_id(from)
                            && !matches!(reply.message, Message::Learned { .. })
                            && self.is_dead(state, to, from, &reply.message)
                    })
            }
            // A REMOVE ignored now may apply later (its vote may still reach the acceptor
            // through a write-through): never collected. The model sends no FENCE.
            Message::Learned { .. }
            | Message::Remove { .. }
            | Message::Fence { .. }
            | Message::Fenced { .. }
            | Message::Full { .. } => false,
        }
    }

    /// Removes the dead messages whose fate may have changed in a step of replica `changed`: a
    /// message's fate depends on its receiver and, for a request, on the proposer its reply
    /// goes to, and a dead message stays dead.
    fn collect_dead(&self, state: &mut State, changed: usize) {
        for from in 0..self.config.replicas {
            for to in (0..self.config.replicas).filter(|to| from == changed || *to == changed) {
                let dead: Vec<bool> = state
                    .link(from, to)
                    .iter()
                    .map(|item| match item {
                        Item::Message(m) => self.is_dead_cached(state, from, to, m),
                        Item::Restart | Item::Reconnect => false,
                    })
                    .collect();
                if dead.contains(&true) {
                    let mut dead = dead.into_iter();
                    state
                        .link_mut(from, to)
                        .retain(|_| !dead.next().expect("one flag per item"));
                }
                if from == to || self.config.network == Network::Connections {
                    continue;
                }
                let dead: Vec<_> = state.datagrams[from * self.config.replicas + to]
                    .in_flight
                    .iter()
                    .filter(|(_, _, m)| self.is_dead_cached(state, from, to, m))
                    .cloned()
                    .collect();
                for entry in dead {
                    state.datagram_mut(from, to).in_flight.remove(&entry);
                }
            }
        }
    }

    fn connection_actions(&self, state: &State, from: usize, to: usize, actions: &mut Vec<Action>) {
        let link = state.link(from, to);
        if let Some(Item::Message(_)) = link.front() {
            actions.push(Action::Deliver(from, to));
        }
        if from == to {
            return;
        }
        let budget_left = state.breaks < self.config.faults.breaks_max;
        let longest = link.len();
        for lost in 0..=longest {
            match break_kind(link, lost) {
                Some(BreakKind::Marker) => actions.push(Action::Break { from, to, lost }),
                Some(BreakKind::Budget) if budget_left => {
                    actions.push(Action::Break { from, to, lost });
                }
                _ => {}
            }
        }
    }
}

impl Model for LoglessModel {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        let replicas = self.config.replicas;
        let first_acceptors: Vec<usize> = match self.all_stages.first() {
            Some(first) => {
                let set = first.acceptors_of(the_key().as_bytes());
                (0..replicas).filter(|&i| set.contains(i)).collect()
            }
            None => {
                let set = self.proposer.acceptors_of(the_key().as_bytes());
                (0..replicas).filter(|&i| set.contains(i)).collect()
            }
        };
        let mut nodes: Vec<NodeState> = (0..replicas)
            .map(|i| {
                let mut store = Store::default();
                if let Some(n) = self.config.deleted_in_round {
                    if first_acceptors.contains(&i) {
                        // The delete's round, minted by an earlier incarnation of the first
                        // acceptor: no proposer of the run mints it again.
                        let round = Round {
                            n,
                            id: logless_rmw::ids::AttemptId {
                                proposer: logless_rmw::ids::ProposerId {
                                    node: node_id(first_acceptors[0]),
                                    incarnation: 0,
                                },
                                seq: 1,
                            },
                        };
                        store.state = Some(AcceptorState {
                            r_ack: round,
                            r_voted: round,
                            ..AcceptorState::default()
                        });
                    }
                }
                self.new_node(i, 1, store, 0)
            })
            .collect();
        // The changes' reports so far: an old acceptor that starts past a change's joint stage
        // reported what it holds.
        let mut reports = vec![None; self.changes.len() * replicas];
        for (k, change) in self.changes.iter().enumerate() {
            for &i in &change.old {
                if self.stage_of(&nodes[i]) > Some(2 * k) {
                    reports[k * replicas + i] = Some(nodes[i].replica.high_round());
                }
            }
        }
        // A replica that starts in a joint stage that gives it the register's slot raised its
        // floor before the run (the model's replicas start with the stage's placement, which
        // holds nothing back): a majority of the old set reported.
        for (i, node) in nodes.iter_mut().enumerate() {
            let Some(stage) = self.stage_of(node) else {
                continue;
            };
            if stage % 2 == 0 || !self.all_stages[stage].gains_any(i) {
                continue;
            }
            let k = (stage - 1) / 2;
            let old = &self.changes[k].old;
            let reported: Vec<u64> = (old.iter())
                .filter_map(|&o| reports[k * replicas + o])
                .collect();
            assert!(
                reported.len() * 2 > old.len(),
                "a gaining replica starts in a joint stage only once the fence held"
            );
            let above = reported.into_iter().max().expect("a majority reported");
            let stage_id = self.all_stages[stage].stage_id();
            assert!(node.replica.raise_floor_for_gained_slots(stage_id, above));
            let output = node.replica.take_output();
            let Ok(released) = output.persist.commit(&mut node.store);
            assert!(released.is_empty() && output.sends.is_empty());
        }
        let nodes = nodes.into_iter().map(Node::sealed).collect();
        let clients = self
            .config
            .clients
            .iter()
            .map(|ops| Client {
                next: 0,
                waiting: false,
                stopped: ops.is_empty(),
            })
            .collect();
        vec![State {
            nodes,
            links: (0..self.config.replicas * self.config.replicas)
                .map(|_| Arc::new(VecDeque::new()))
                .collect(),
            datagrams: match self.config.network {
                Network::Connections => Vec::new(),
                Network::Datagrams => (0..self.config.replicas * self.config.replicas)
                    .map(|_| Arc::default())
                    .collect(),
            },
            clients,
            history: Arc::new(History::new()),
            breaks: 0,
            crashes: 0,
            drops: 0,
            removals: 0,
            uncontended: 0,
            sync_reads: 0,
            // A replica starts in `Stable(e+1)` only once the change is complete.
            synced: self.config.stages.contains(&RingStage::New),
            reports,
        }]
    }

    fn actions(&self, state: &State, actions: &mut Vec<Action>) {
        let faults = self.config.faults;
        if !self.config.ops_after_change || self.change_done(state) {
            for (c, client) in state.clients.iter().enumerate() {
                if !client.stopped && !client.waiting {
                    actions.push(Action::Invoke(c));
                }
            }
        }
        for from in 0..self.config.replicas {
            for to in 0..self.config.replicas {
                if from != to && self.config.network == Network::Datagrams {
                    let in_flight = state.datagrams[from * self.config.replicas + to]
                        .in_flight
                        .len();
                    for index in 0..in_flight {
                        actions.push(Action::Arrive { from, to, index });
                        actions.push(Action::Drop { from, to, index });
                    }
                } else {
                    self.connection_actions(state, from, to, actions);
                }
            }
        }
        for (i, node) in state.nodes.iter().enumerate() {
            if node.state.timer.is_some() {
                actions.push(Action::Fire(i));
                if faults.timeouts {
                    actions.push(Action::FireLate(i));
                }
            }
        }
        if state.crashes < faults.crashes_max {
            actions.extend((0..self.config.replicas).map(Action::Crash));
        }
        if state.drops < faults.drops_max {
            actions.extend((0..self.config.replicas).map(Action::DropIdle));
        }
        if state.removals < faults.removals_max {
            actions.extend((0..self.config.replicas).map(Action::Remove));
        }
        if self.config.stage_moves {
            actions.extend((0..self.config.replicas).map(Action::Install));
        }
        for (i, node) in state.nodes.iter().enumerate() {
            if node.state.replica.awaits_gained_floor() {
                actions.push(Action::RaiseFloor(i));
            }
        }
    }

    fn next_state(&self, last: &State, action: Action) -> Option<State> {
        let mut state = last.clone();
        let changed = match action {
            Action::Invoke(c) => self
                .invoke(&mut state, c)
                .map(|()| c % self.config.replicas)?,
            Action::Deliver(from, to) => self.deliver(&mut state, from, to).map(|()| to)?,
            Action::Break { from, to, lost } => {
                self.break_link(&mut state, from, to, lost).map(|()| to)?
            }
            Action::Arrive { from, to, index } => {
                self.arrive(&mut state, from, to, index).map(|()| to)?
            }
            Action::Drop { from, to, index } => self
                .drop_datagram(&mut state, from, to, index)
                .map(|()| to)?,
            Action::Fire(i) => self.fire(&mut state, i, false).map(|()| i)?,
            Action::FireLate(i) => self.fire(&mut state, i, true).map(|()| i)?,
            Action::Crash(i) => self.crash(&mut state, i).map(|()| i)?,
            Action::DropIdle(i) => self.drop_idle(&mut state, i).map(|()| i)?,
            Action::Remove(i) => self.remove(&mut state, i).map(|()| i)?,
            Action::Install(i) => self.install(&mut state, i).map(|()| i)?,
            Action::RaiseFloor(i) => self.raise_floor(&mut state, i).map(|()| i)?,
        };
        if self.config.collect_dead {
            self.collect_dead(&mut state, changed);
        }
        Some(state)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        let mut properties = vec![
            Property::always("linearizable", |_, state: &State| {
                state.history.linearizable
            }),
            Property::sometimes("value chosen", |_, state: &State| state.history.incremented),
        ];
        if self.config.faults.removals_max > 0 {
            properties.push(Property::sometimes(
                "register removed",
                |_, state: &State| {
                    state.nodes.iter().any(|n| {
                        let replica = &n.state.replica;
                        replica.acceptor_state(&the_key()).is_none()
                            && replica.round_floor() != Round::BOTTOM
                    })
                },
            ));
        }
        if self.config.faults.crashes_max > 0 {
            properties.push(Property::sometimes(
                "value chosen after a crash",
                |_, state: &State| state.history.incremented_after_crash,
            ));
        }
        properties
    }

    fn within_boundary(&self, state: &State) -> bool {
        let minted: u64 = state.nodes.iter().map(|n| n.state.minted()).sum();
        minted <= state.uncontended + self.config.retries_max
    }
}

/// Every state of `model` reachable within its bounds, as [`State::observed`] shows it. For
/// cross-checks of small configurations: it keeps every state in memory.
pub fn reachable_observations(
    model: &LoglessModel,
) -> std::collections::HashSet<(Vec<Replica>, u64)> {
    let fingerprint = |s: &State| {
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        s.hash(&mut hasher);
        hasher.finish()
    };
    let mut seen = std::collections::HashSet::new();
    let mut observed = std::collections::HashSet::new();
    let mut pending: Vec<State> = model.init_states();
    for s in &pending {
        seen.insert(fingerprint(s));
    }
    let mut actions = Vec::new();
    while let Some(state) = pending.pop() {
        model.actions(&state, &mut actions);
        for action in actions.drain(..) {
            let Some(next) = model.next_state(&state, action) else {
                continue;
            };
            if model.within_boundary(&next) && seen.insert(fingerprint(&next)) {
                pending.push(next);
            }
        }
        observed.insert(state.observed());
    }
    observed
}
