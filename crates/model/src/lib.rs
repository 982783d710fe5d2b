//! A stateright model of logless, built from the real replica code ([`Replica`]): three
//! replicas (each a proposer and an acceptor) and two or three clients that increment and read
//! one counter, on a network that loses, duplicates and reorders messages, with at most one
//! replica crash that keeps what the replica persisted.
//!
//! Links between replicas behave like the TCP connections of the real node: each message
//! carries its sender's incarnation and a per-link sequence number; the receiver delivers in
//! order, drops duplicates, and treats a gap or a new incarnation as a broken connection
//! ([`Replica::handle_link_broken`]). This is what Algorithm 3 requires of its links; the
//! network underneath is as unreliable as stateright makes it.
//!
//! Time is abstract: a timer may fire at any moment, and the replica's clock jumps to the time
//! the timer asked for. The exploration is bounded by the number of attempts each proposer
//! mints (every retry mints one), so it is exhaustive within that bound.
use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet};

use logless_commands::command::{Command, Reply};
use logless_core::acceptor::AcceptorState;
use logless_core::config::{InjectedBugs, ProposerConfig};
use logless_core::ids::{ClientTag, Key, NodeId};
use logless_core::message::Message;
use logless_core::persist::AcceptorStore;
use logless_core::proposer::ClientReply;
use logless_core::replica::Replica;
use stateright::actor::{
    model_timeout, Actor, ActorModel, Envelope, Id, LossyNetwork, Network, Out,
};
use stateright::semantics::{ConsistencyTester, LinearizabilityTester, SequentialSpec};
use stateright::Expectation;

/// The one register of the model.
pub fn the_key() -> Key {
    Key::new("counter")
}

/// A client operation on the counter.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum CounterOp {
    /// INCRBY 1, returning the new value.
    Incr,
    /// GET, returning the value (0 when absent).
    Get,
}

/// The sequential specification of the counter.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Counter(pub i64);

impl SequentialSpec for Counter {
    type Op = CounterOp;
    type Ret = i64;
    fn invoke(&mut self, op: &CounterOp) -> i64 {
        if *op == CounterOp::Incr {
            self.0 += 1;
        }
        self.0
    }
}

/// Messages of the model.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ModelMsg {
    /// Client → replica: operation number `index` of the client.
    Request(u32, CounterOp),
    /// Replica → client: the answer to operation `index`; `None` when the outcome is unknown or
    /// the command was refused (the client then stops: the operation stays "in flight").
    Response(u32, Option<i64>),
    /// Replica → replica.
    Peer {
        /// The sender's incarnation.
        incarnation: u32,
        /// The per-link sequence number.
        seq: u32,
        /// The protocol message.
        message: Message,
    },
}

/// A replica's wake-up request: the key; the latest token and time are in the state.
pub type ModelTimer = Key;

/// What a replica keeps across a crash: its incarnation and its persisted acceptor states.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Persisted {
    incarnation: u32,
    states: BTreeMap<Key, AcceptorState>,
}

impl AcceptorStore for Persisted {
    type Error = std::convert::Infallible;
    fn write(&mut self, key: &Key, state: &AcceptorState) -> Result<(), Self::Error> {
        self.states.insert(key.clone(), state.clone());
        Ok(())
    }
    fn flush(&mut self) -> Result<(), Self::Error> {
        Ok(())
    }
}

/// A replica's model state.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ServerState {
    replica: Replica,
    persisted: Persisted,
    now_ms: u64,
    timers: BTreeMap<Key, (u64, u64)>,
    send_seq: BTreeMap<Id, u32>,
    /// Per sender: its incarnation and the next expected sequence number.
    receive: BTreeMap<Id, (u32, u32)>,
    /// Requests seen, so duplicates are not executed twice.
    requests: BTreeSet<(Id, u32)>,
}

/// A client's model state.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ClientState {
    next: u32,
    stopped: bool,
}

/// Model states.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum ModelState {
    /// A replica.
    Server(Box<ServerState>),
    /// A client.
    Client(ClientState),
}

/// The actors of the model.
#[derive(Clone, Debug)]
pub enum ModelActor {
    /// A replica with the ids of all replicas (itself included).
    Server {
        /// All replicas' actor ids, in node order.
        replicas: Vec<Id>,
        /// The proposer configuration (bugs included).
        config: ProposerConfig,
    },
    /// A client that runs `ops` in order against `server`.
    Client {
        /// The replica it talks to.
        server: Id,
        /// Its operations.
        ops: Vec<CounterOp>,
    },
}

fn node_of(id: Id) -> NodeId {
    NodeId(usize::from(id) as u16 + 1)
}

fn id_of(node: NodeId) -> Id {
    Id::from(usize::from(node.0 - 1))
}

impl ServerState {
    /// Moves the replica's output into the model: persist (then release), send, reply, timers.
    /// Messages to itself are handled at once (a reduction: the local link never loses or
    /// delays), which keeps the state space to what the network between replicas does.
    fn flush(&mut self, o: &mut Out<ModelActor>) {
        let me = self.replica.node();
        let mut local = Vec::new();
        loop {
            self.flush_once(o, &mut local);
            if local.is_empty() {
                return;
            }
            let now = self.now_ms;
            for message in local.drain(..) {
                self.replica.handle_message(now, me, message);
            }
        }
    }

    fn flush_once(&mut self, o: &mut Out<ModelActor>, local: &mut Vec<Message>) {
        let me = self.replica.node();
        let output = self.replica.take_output();
        let Ok(released) = output.persist.commit(&mut self.persisted);
        o.save(self.persisted.clone());
        for envelope in output.sends.into_iter().chain(released) {
            if envelope.to == me {
                local.push(envelope.message);
                continue;
            }
            let to = id_of(envelope.to);
            let seq = self.send_seq.entry(to).or_default();
            let msg = ModelMsg::Peer {
                incarnation: self.persisted.incarnation,
                seq: *seq,
                message: envelope.message,
            };
            *seq += 1;
            o.send(to, msg);
        }
        for ClientReply { client, result } in output.replies {
            let (client_id, index) = (Id::from((client.0 >> 32) as usize), client.0 as u32);
            let value = match result {
                Ok(Reply::Int(v)) => Some(v),
                Ok(Reply::Bulk(b)) => std::str::from_utf8(&b).ok().and_then(|s| s.parse().ok()),
                Ok(Reply::Nil) => Some(0),
                _ => None,
            };
            o.send(client_id, ModelMsg::Response(index, value));
        }
        for timer in output.timers {
            self.timers
                .insert(timer.key.clone(), (timer.token, timer.at_ms));
            o.set_timer(timer.key, model_timeout());
        }
    }
}

impl Actor for ModelActor {
    type Msg = ModelMsg;
    type State = ModelState;
    type Timer = ModelTimer;
    type Random = ();
    type Storage = Persisted;

    fn on_start(&self, id: Id, storage: &Option<Persisted>, o: &mut Out<Self>) -> ModelState {
        match self {
            ModelActor::Server { config, .. } => {
                let mut persisted = storage.clone().unwrap_or_default();
                persisted.incarnation += 1;
                o.save(persisted.clone());
                let recovered = persisted.states.clone();
                let replica = Replica::new(
                    node_of(id),
                    persisted.incarnation,
                    config.clone(),
                    0,
                    recovered,
                );
                ModelState::Server(Box::new(ServerState {
                    replica,
                    persisted,
                    now_ms: 0,
                    timers: BTreeMap::new(),
                    send_seq: BTreeMap::new(),
                    receive: BTreeMap::new(),
                    requests: BTreeSet::new(),
                }))
            }
            ModelActor::Client { server, ops } => {
                if let Some(op) = ops.first() {
                    o.send(*server, ModelMsg::Request(0, *op));
                }
                ModelState::Client(ClientState {
                    next: 0,
                    stopped: ops.is_empty(),
                })
            }
        }
    }

    fn on_msg(
        &self,
        _id: Id,
        state: &mut Cow<ModelState>,
        src: Id,
        msg: ModelMsg,
        o: &mut Out<Self>,
    ) {
        match (self, msg) {
            (
                ModelActor::Server { replicas, .. },
                ModelMsg::Peer {
                    incarnation,
                    seq,
                    message,
                },
            ) => {
                if !replicas.contains(&src) {
                    return;
                }
                let ModelState::Server(s) = &**state else {
                    return;
                };
                let (known_incarnation, expected) = s.receive.get(&src).copied().unwrap_or((0, 0));
                if incarnation < known_incarnation
                    || (incarnation == known_incarnation && seq < expected)
                {
                    return; // an old connection, or a duplicate
                }
                let ModelState::Server(s) = state.to_mut() else {
                    return;
                };
                // A new incarnation is a new connection: the old one's undelivered messages are
                // lost, and so are earlier messages of the new one if it does not start at 0.
                let broken = if incarnation > known_incarnation {
                    known_incarnation != 0 || seq > 0
                } else {
                    seq > expected
                };
                s.receive.insert(src, (incarnation, seq + 1));
                if broken {
                    s.replica.handle_link_broken(node_of(src));
                }
                let now = s.now_ms;
                s.replica.handle_message(now, node_of(src), message);
                s.flush(o);
            }
            (ModelActor::Server { .. }, ModelMsg::Request(index, op)) => {
                let ModelState::Server(s) = &**state else {
                    return;
                };
                if s.requests.contains(&(src, index)) {
                    return;
                }
                let ModelState::Server(s) = state.to_mut() else {
                    return;
                };
                s.requests.insert((src, index));
                let command = match op {
                    CounterOp::Incr => Command::IncrBy(1),
                    CounterOp::Get => Command::Get,
                };
                let tag = ClientTag(((usize::from(src) as u64) << 32) | u64::from(index));
                let now = s.now_ms;
                s.replica.handle_command(now, tag, the_key(), command);
                s.flush(o);
            }
            (ModelActor::Client { server, ops }, ModelMsg::Response(index, value)) => {
                let ModelState::Client(c) = &**state else {
                    return;
                };
                if c.stopped || index != c.next {
                    return;
                }
                let ModelState::Client(c) = state.to_mut() else {
                    return;
                };
                if value.is_none() {
                    c.stopped = true;
                    return;
                }
                c.next += 1;
                match ops.get(c.next as usize) {
                    Some(op) => o.send(*server, ModelMsg::Request(c.next, *op)),
                    None => c.stopped = true,
                }
            }
            _ => {}
        }
    }

    fn on_timeout(&self, _id: Id, state: &mut Cow<ModelState>, timer: &Key, o: &mut Out<Self>) {
        let ModelState::Server(s) = &**state else {
            return;
        };
        let Some(&(token, at_ms)) = s.timers.get(timer) else {
            return;
        };
        let ModelState::Server(s) = state.to_mut() else {
            return;
        };
        s.timers.remove(timer);
        s.now_ms = s.now_ms.max(at_ms);
        let now = s.now_ms;
        s.replica.handle_timer(now, timer, token);
        s.flush(o);
    }
}

/// The history the model checks: the linearizability tester plus the operations already
/// returned (responses may be duplicated by the network; only the first one counts).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ModelHistory {
    tester: LinearizabilityTester<Id, Counter>,
    returned: BTreeSet<(Id, u32)>,
    invoked: BTreeMap<Id, Vec<CounterOp>>,
    /// Whether some increment was acknowledged (a value was chosen).
    pub incremented: bool,
}

impl ModelHistory {
    fn new() -> ModelHistory {
        ModelHistory {
            tester: LinearizabilityTester::new(Counter(0)),
            returned: BTreeSet::new(),
            invoked: BTreeMap::new(),
            incremented: false,
        }
    }

    /// Whether the recorded history is linearizable.
    pub fn is_linearizable(&self) -> bool {
        self.tester.serialized_history().is_some()
    }
}

/// What the network between actors may do to messages.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NetworkKind {
    /// In order per link (losses still possible with `lossy`).
    Ordered,
    /// Any order.
    Unordered,
    /// Any order, and any message any number of times.
    UnorderedDuplicating,
}

/// The model's configuration.
#[derive(Clone, Debug)]
pub struct ModelConfig {
    /// The clients' operations: client `i` runs `clients[i]` in order against replica `i % 3`.
    pub clients: Vec<Vec<CounterOp>>,
    /// Whether the network may lose messages.
    pub lossy: bool,
    /// The network: ordered per link (TCP-like, what Algorithm 3 assumes), unordered, or
    /// unordered and duplicating.
    pub network: NetworkKind,
    /// How many replica crashes (with restart) may happen.
    pub crashes_max: usize,
    /// The most attempts (phase 1s and proposals) each proposer may mint.
    pub attempts_max: u64,
    /// Deliberate protocol bugs.
    pub bugs: InjectedBugs,
}

impl ModelConfig {
    /// Builds the stateright model.
    pub fn into_model(self) -> ActorModel<ModelActor, ModelConfig, ModelHistory> {
        let replicas: Vec<Id> = (0..3).map(Id::from).collect();
        let mut config = ProposerConfig::new((1..=3).map(NodeId).collect());
        config.bugs = self.bugs;
        config.read_retries_max = 1;
        config.phase_timeout_ms = 10;
        config.straggler_wait_ms = 1;
        config.backoff_base_ms = 1;
        config.backoff_max_ms = 1;
        config.request_timeout_ms = 1_000;
        let clients = self.clients.clone();
        let lossy = self.lossy;
        let network = match self.network {
            NetworkKind::Ordered => Network::new_ordered([]),
            NetworkKind::Unordered => Network::new_unordered_nonduplicating([]),
            NetworkKind::UnorderedDuplicating => Network::new_unordered_duplicating([]),
        };
        let crashes_max = self.crashes_max;
        ActorModel::new(self, ModelHistory::new())
            .actors(replicas.iter().map(|_| ModelActor::Server {
                replicas: replicas.clone(),
                config: config.clone(),
            }))
            .actors(
                clients
                    .into_iter()
                    .enumerate()
                    .map(|(c, ops)| ModelActor::Client {
                        server: Id::from(c % 3),
                        ops,
                    }),
            )
            .init_network(network)
            .lossy_network(if lossy {
                LossyNetwork::Yes
            } else {
                LossyNetwork::No
            })
            .max_crashes(crashes_max)
            .property(Expectation::Always, "linearizable", |_, state| {
                state.history.is_linearizable()
            })
            .property(Expectation::Sometimes, "value chosen", |_, state| {
                state.history.incremented
            })
            .record_msg_out(|_, history: &ModelHistory, env: Envelope<&ModelMsg>| {
                let ModelMsg::Request(index, op) = env.msg else {
                    return None;
                };
                let invoked = history.invoked.get(&env.src).map_or(0, Vec::len);
                if *index as usize != invoked {
                    return None;
                }
                let mut history = history.clone();
                let _ = history.tester.on_invoke(env.src, *op);
                history.invoked.entry(env.src).or_default().push(*op);
                Some(history)
            })
            .record_msg_in(|_, history: &ModelHistory, env: Envelope<&ModelMsg>| {
                let ModelMsg::Response(index, Some(value)) = env.msg else {
                    return None;
                };
                if history.returned.contains(&(env.dst, *index)) {
                    return None;
                }
                let op = history
                    .invoked
                    .get(&env.dst)
                    .and_then(|ops| ops.get(*index as usize))?;
                let mut history = history.clone();
                history.returned.insert((env.dst, *index));
                history.incremented |= *op == CounterOp::Incr;
                let _ = history.tester.on_return(env.dst, *value);
                Some(history)
            })
            .within_boundary(|config, state| {
                state.actor_states.iter().all(|s| match &**s {
                    ModelState::Server(s) => s.replica.attempts_minted() <= config.attempts_max,
                    ModelState::Client(_) => true,
                })
            })
    }
}

/// The number of states a model of `config` explores (helper for the pinned-count test).
pub fn explored_states(config: ModelConfig) -> usize {
    use stateright::{Checker, Model};
    config
        .into_model()
        .checker()
        .spawn_bfs()
        .join()
        .unique_state_count()
}
