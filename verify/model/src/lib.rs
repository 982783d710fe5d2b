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
    /// written through if need be).
    pub stage_moves: bool,
    /// A deliberately broken change for [`ModelConfig::stage_moves`]: replicas install
    /// `Stable(e+1)` straight from `Stable(e)`, at any time, skipping the joint stage and the
    /// sync (the first mutation of issue 28: the old and the new set both decide).
    pub skip_joint_stage: bool,
    /// With stage moves, the last stage the coordinator installs: replicas behind it catch up
    /// to it, none goes beyond.
    pub last_stage: RingStage,
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
        let (staged, all_stages) = match self.ring {
            Some(r) if !self.stages.is_empty() => {
                assert_eq!(self.stages.len(), self.replicas, "one stage per replica");
                let all = [RingStage::Old, RingStage::Joint, RingStage::New];
                (
                    staged_placements(&proposer.acceptors, r, &self.stages),
                    staged_placements(&proposer.acceptors, r, &all),
                )
            }
            _ => {
                assert!(!self.stage_moves, "stage moves need a ring and stages");
                (Vec::new(), Vec::new())
            }
        };
        let old_acceptors = match all_stages.first() {
            Some(old) => {
                let set = old.acceptors_of(the_key().as_bytes());
                (0..self.replicas).filter(|&i| set.contains(i)).collect()
            }
            None => Vec::new(),
        };
        let coordinator = (0..self.replicas)
            .find(|i| !old_acceptors.contains(i))
            .unwrap_or(0);
        LoglessModel {
            config: self,
            staged,
            all_stages,
            old_acceptors,
            coordinator,
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
    /// With stages, the placements of `Stable(e)`, `Joint(e+1)` and `Stable(e+1)`, in order.
    all_stages: Vec<Placement>,
    /// With stages, the replicas that are the register's acceptors in `Stable(e)`.
    old_acceptors: Vec<usize>,
    /// With stage moves, the replica that installs each stage first: the first one that is
    /// not an old acceptor (the joining one).
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
}

/// The joint stage's index in [`LoglessModel::all_stages`].
const JOINT: usize = 1;
/// `Stable(e+1)`'s index in [`LoglessModel::all_stages`].
const NEW: usize = 2;

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

/// The placement of each replica of a ring of `acceptors` with `r` replicas per key, by its
/// stage of the change that removes [`the_key`]'s first acceptor ([`ModelConfig::stages`]).
fn staged_placements(acceptors: &[NodeId], r: u8, stages: &[RingStage]) -> Vec<Placement> {
    let old = balanced_ring(acceptors, r);
    let slot = logless_placement::key_slot(the_key().as_bytes());
    let new = old
        .with_node_removed(old.replicas(slot).first())
        .expect("more replicas than replicas per key");
    (stages.iter())
        .map(|stage| match stage {
            RingStage::Old => Placement::new(&old, acceptors),
            RingStage::Joint => Placement::joint(&old, &new, acceptors),
            RingStage::New => Placement::new(&new, acceptors),
        })
        .collect::<Result<_, _>>()
        .expect("every node an acceptor")
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
        if client.stopped || client.waiting {
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
            && self.stage_of(&state.nodes[index].state) == Some(JOINT)
            && self.fence_holds(state)
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
            // tells it); its first input is this.
            install(&mut node.replica, &self.all_stages[stage]);
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

    /// Whether a majority of the old acceptors installed the joint stage (or the next one).
    fn fence_holds(&self, state: &State) -> bool {
        let moved = (self.old_acceptors.iter())
            .filter(|&&i| self.stage_of(&state.nodes[i].state) >= Some(JOINT))
            .count();
        moved * 2 > self.old_acceptors.len()
    }

    fn install(&self, state: &mut State, index: usize) -> Option<()> {
        if !self.config.stage_moves {
            return None;
        }
        let stage = self.stage_of(&state.nodes[index].state)?;
        let next = if self.config.skip_joint_stage {
            NEW
        } else {
            stage + 1
        };
        if stage == NEW || (next == NEW && !self.config.skip_joint_stage && !state.synced) {
            return None;
        }
        // A stage no replica has yet is the coordinator's to install first (it wrote it to the
        // configuration register); the others catch up in any order.
        let latest = (state.nodes.iter())
            .filter_map(|n| self.stage_of(&n.state))
            .max()
            .unwrap_or(0);
        if next > latest && index != self.coordinator {
            return None;
        }
        let last = match self.config.last_stage {
            RingStage::Old => 0,
            RingStage::Joint => JOINT,
            RingStage::New => NEW,
        };
        if next > last {
            return None;
        }
        let mut node = state.nodes[index].state.clone();
        install(&mut node.replica, &self.all_stages[next]);
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
        let nodes = (0..self.config.replicas)
            .map(|i| Node::sealed(self.new_node(i, 1, Store::default(), 0)))
            .collect();
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
        }]
    }

    fn actions(&self, state: &State, actions: &mut Vec<Action>) {
        let faults = self.config.faults;
        for (c, client) in state.clients.iter().enumerate() {
            if !client.stopped && !client.waiting {
                actions.push(Action::Invoke(c));
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

/// Installs `placement` on `replica`, and in a joint stage that gives it the register's slot
/// lets it answer for it at once from round 1, as before the round floor was built: the model
/// leaves the floor out (the node raises it above the highest rounds a majority of the old
/// replicas reported once they installed the joint stage, docs/ring.md §4 "Dead registers",
/// which the model's actions do not stand for). The hole the floor closes is shown by
/// `engines/rmw/tests/scenarios.rs` (`ring_a_write_after_two_replacements_…`); the model's
/// bounded runs pass without it.
fn install(replica: &mut logless_rmw::replica::Replica, placement: &Placement) {
    replica.install_placement(placement.clone());
    if replica.awaits_gained_floor() {
        replica.raise_floor_for_gained_slots(placement.stage_id(), 0);
    }
}
