//! A stateright model of the log engine built from its real code
//! ([`logless_multipaxos::replica::Replica`]): three replicas over the engine's test state
//! machine ([`History`], which records every request it executes), clients that send one
//! request each and may retry it at any replica, a leader suspected through the replicas' timer
//! input, a network that loses, duplicates and reorders messages, and crashes that restart a
//! replica from what its store made durable.
//!
//! Every step is one input to one replica (a request, a message, a tick) followed by what the
//! runtime does with the output: commit the records to the store (the engine's
//! [`MemStore`](logless_multipaxos::testing::MemStore)), then send the messages and deliver the
//! replies. Messages travel encoded ([`wire`]) and are decoded by their receiver, as the node
//! carries them.
//!
//! # Properties
//!
//! Always, in every reachable state:
//! * **agreement**: no two replicas know different batches decided in one instance, and no
//!   replica hears a decision that contradicts its own;
//! * **executed prefixes consistent**: of two replicas' executed requests, one is a prefix of
//!   the other;
//! * **applied once**: no replica executes a request twice, however many instances decided it
//!   (the client table);
//! * **no gap**: execution passes only decided instances (a batch or a no-op), and a leader has
//!   proposed in its view, or knows decided, every instance from its first unexecuted one up to
//!   the next it proposes in (a gap left there would stop execution for ever);
//! * **persisted before sent**: every message leaves only once its sender's store holds what it
//!   promises (the engine's `durable_before_send`: the view of a Prepare or Promise, the vote of
//!   a Propose or Accept);
//! * **one answer per request**: every reply a client gets for its request is the same.
//!
//! Sometimes (so that the bounds are known to reach them): every request executed; with a view
//! change and two instances, a no-op decided; with retries and two instances, a request decided
//! in two instances; with a crash, a restarted replica executing.
//!
//! # The network
//!
//! What a replica sends joins a set of messages in flight, and any message of the set may be
//! delivered at any time, any number of times: every loss (a message never delivered),
//! duplication and reordering is a path of the model. A delivery leaves the message in the set,
//! so a leader's retransmissions change nothing (the network already delivers again whatever it
//! may); only messages that can no longer change their receiver leave it (`dead`, an exact
//! reduction).
//! Duplicates are unbounded, and every copy of a Forward that reaches the leader before its
//! request is executed is proposed again in a new instance, so the instances are bounded
//! ([`MultiPaxosConfig::instances_max`]).
//!
//! # Time
//!
//! Time is abstract: the clock stays at 0 and every interval and time-out of the configuration
//! is 0, so whatever a timer would do is due at each [`Action::Tick`], which may come at any
//! point of any interleaving. A tick makes a follower suspect its leader and start a view change
//! (or, at the first start and after a restart in a view it leads, run phase 1 in that view), a
//! candidate give up its view for its next one, and a leader send Alive and its unanswered
//! Proposes again; a batch is closed as soon as a request waits. The network's duplicates
//! already retransmit everything, so the interesting ticks are the view changes and the
//! heartbeats (which tell a replica behind that it is).
//!
//! # Bounds
//!
//! The views (ballots) reached are bounded ([`MultiPaxosConfig::views_max`]), as are the
//! instances any replica holds, the client retries, the crashes, and the catch-up queries sent
//! by all replicas of all incarnations (a tick gives up an outstanding query, and the next
//! settle sends another). A step beyond a bound is not taken: with no catch-up query allowed,
//! for instance, a replica behind never hears the leader's Alive before it decides by itself.
//! Within the bounds the exploration is exhaustive. Snapshots are off (their size policy is
//! never met), so the log is never truncated and a catch-up response never carries a snapshot.
mod checks;
mod dead;
mod process;

use std::collections::BTreeSet;
use std::sync::Arc;

use bytes::Bytes;
use logless_multipaxos::config::{Config, InjectedBugs, Recovery};
use logless_multipaxos::ids::{ClientId, NodeId, RequestSeq, View};
use logless_multipaxos::message::{ClientReply, Request};
use logless_multipaxos::replica::Replica;
use logless_multipaxos::testing::History;
use logless_multipaxos::wire;
use stateright::{Model, Property};

use process::{Node, Output, Process};

/// The number of replicas.
pub const REPLICAS: usize = 3;

/// The model's configuration.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MultiPaxosConfig {
    /// How many clients; each sends one request, first to replica `client % REPLICAS`.
    pub clients: usize,
    /// The most retries, summed over the clients: a client without an answer sends its request
    /// again (the same id) to any replica.
    pub retries_max: u8,
    /// The most instances a replica may hold: every instance any replica knows of is below.
    pub instances_max: u64,
    /// The highest view (ballot) a replica may reach: view `v` is led by replica `v % 3`, so 1
    /// allows one view change, from the first replica to the second.
    pub views_max: u64,
    /// The most crashes, each followed at once by a restart from the store.
    pub crashes_max: u8,
    /// The most catch-up queries, summed over replicas and incarnations.
    pub catch_ups_max: u64,
    /// Whether a crash may also come in the middle of a delivery, after the replica handled the
    /// message and before it committed: what it let out ahead of its records leaves, the
    /// records are lost. Without a deliberate bug nothing leaves ahead, and such a crash
    /// reaches exactly the states of a crash before the delivery.
    pub crash_mid_step: bool,
    /// Whether messages that can no longer change their receiver are taken out of the network
    /// at once (an exact reduction, see `dead`; off only to check that it is one).
    pub collect_dead: bool,
    /// How a crashed replica recovers: from its store (FullSS), or from its peers, keeping
    /// only its epoch (EpochSS).
    pub recovery: Recovery,
    /// Deliberate protocol bugs of the engine.
    pub bugs: InjectedBugs,
}

impl MultiPaxosConfig {
    /// `clients` clients, no fault, no view change beyond the first leader's, no bug.
    pub fn new(clients: usize) -> MultiPaxosConfig {
        MultiPaxosConfig {
            clients,
            retries_max: 0,
            instances_max: clients as u64 + 1,
            views_max: 0,
            crashes_max: 0,
            catch_ups_max: 0,
            crash_mid_step: false,
            collect_dead: true,
            recovery: Recovery::FullSs,
            bugs: InjectedBugs::default(),
        }
    }

    /// The engine configuration of replica `index`: abstract time (see the module docs) and no
    /// snapshots.
    fn replica_config(&self, index: usize) -> Config {
        let mut config = Config::new((0..REPLICAS).map(node_id).collect(), node_id(index));
        config.batch_delay_ms = 0;
        config.heartbeat_interval_ms = 0;
        config.suspect_timeout_ms = 0;
        config.retransmit_interval_ms = 0;
        config.restart_quiet_ms = 0;
        config.catch_up_timeout_ms = 0;
        config.snapshot_log_bytes_min = u64::MAX;
        config.recovery = self.recovery;
        config.bugs = self.bugs;
        config
    }

    /// Builds the model.
    pub fn into_model(self) -> MultiPaxosModel {
        MultiPaxosModel { config: self }
    }
}

/// The model.
#[derive(Clone, Debug)]
pub struct MultiPaxosModel {
    config: MultiPaxosConfig,
}

/// A message in flight, encoded with its sender's epoch: sender, receiver, bytes.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Packet {
    from: u8,
    to: u8,
    bytes: Arc<[u8]>,
}

impl std::fmt::Debug for Packet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (epoch, message) = wire::decode_in_epoch(&self.bytes).map_err(|_| std::fmt::Error)?;
        write!(f, "{} → {} ({epoch:?}): {message:?}", self.from, self.to)
    }
}

/// A client.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Client {
    /// Whether it sent its request.
    sent: bool,
    /// The first answer it got.
    answer: Option<Bytes>,
}

/// A state of the model.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct State {
    nodes: Vec<Arc<Node>>,
    network: Arc<BTreeSet<Packet>>,
    clients: Vec<Client>,
    retries: u8,
    crashes: u8,
    /// A message left before what it promises was durable.
    sent_unpersisted: bool,
    /// A client got two different answers to its request.
    answers_differ: bool,
}

impl State {
    /// The messages in flight.
    pub fn network(&self) -> &BTreeSet<Packet> {
        &self.network
    }

    /// The replicas, in order.
    pub fn replicas(&self) -> impl Iterator<Item = &Replica<History>> + Clone {
        self.nodes.iter().map(|n| &n.process.replica)
    }
}

/// A step of the model.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Action {
    /// Client `client` sends its request to replica `replica` (again, if it sent it before).
    Request {
        /// The client.
        client: usize,
        /// The replica.
        replica: usize,
    },
    /// A message in flight is delivered (and stays in flight).
    Deliver(Packet),
    /// A message in flight is delivered, and its receiver crashes before committing its step.
    DeliverAndCrash(Packet),
    /// Time passes for a replica: its timers are due.
    Tick(usize),
    /// The replica crashes between steps and restarts from its store.
    Crash(usize),
}

fn node_id(index: usize) -> NodeId {
    NodeId(u16::try_from(index + 1).expect("few replicas"))
}

fn index_of(node: NodeId) -> usize {
    usize::from(node.0) - 1
}

/// Client `index`'s request.
fn request(index: usize) -> Request {
    Request {
        client: ClientId(index as u64 + 1),
        seq: RequestSeq(1),
        payload: Bytes::from(format!("request of client {index}")),
    }
}

impl MultiPaxosModel {
    /// The configuration.
    pub fn config(&self) -> &MultiPaxosConfig {
        &self.config
    }

    /// Runs `input` on replica `index`, then lets its output out (see [`Process::commit`]).
    fn step(&self, state: &mut State, index: usize, input: impl FnOnce(&mut Process) -> Output) {
        let mut process = state.nodes[index].process.clone();
        let mut output = input(&mut process);
        let committed = process.commit();
        output.messages.extend(committed.messages);
        output.replies.extend(committed.replies);
        state.nodes[index] = Node::sealed(process);
        let sent = self.let_out(state, index, output);
        if self.config.collect_dead {
            collect_dead(state, index, &sent);
        }
    }

    /// Puts the messages on the network and delivers the replies; gives the messages sent.
    fn let_out(&self, state: &mut State, from: usize, output: Output) -> Vec<Packet> {
        let mut sent = Vec::new();
        if output.messages.is_empty() && output.replies.is_empty() {
            return sent;
        }
        let network = Arc::make_mut(&mut state.network);
        for (envelope, epoch, durable) in output.messages {
            state.sent_unpersisted |= !durable;
            let to = index_of(envelope.to);
            assert_ne!(to, from, "a replica sends nothing to itself");
            let mut bytes = Vec::new();
            wire::encode_in_epoch(epoch, &envelope.message, &mut bytes);
            let packet = Packet {
                from: from as u8,
                to: to as u8,
                bytes: bytes.into(),
            };
            network.insert(packet.clone());
            sent.push(packet);
        }
        for reply in output.replies {
            self.answer(state, reply);
        }
        sent
    }

    fn answer(&self, state: &mut State, reply: ClientReply) {
        let index = usize::try_from(reply.client.0 - 1).expect("a client of the model");
        assert_eq!(reply.seq, RequestSeq(1), "one request per client");
        let client = &mut state.clients[index];
        match &client.answer {
            Some(answer) => state.answers_differ |= *answer != reply.reply,
            None => client.answer = Some(reply.reply),
        }
    }

    fn deliver(&self, state: &mut State, packet: &Packet, crash: bool) {
        let (epoch, message) =
            wire::decode_in_epoch(&packet.bytes).expect("the engine decodes what it encodes");
        let from = node_id(usize::from(packet.from));
        self.step(state, usize::from(packet.to), |process| {
            process
                .replica
                .handle_epoch_message(0, from, epoch, message);
            if crash {
                process.crash_mid_step()
            } else {
                Output::default()
            }
        });
    }
}

/// Takes the dead messages out of the network after a step of replica `changed` that sent
/// `sent`: those to `changed`, whose state changed, and those just sent (a message is dead or
/// not by its receiver's state only, and a dead one stays dead).
fn collect_dead(state: &mut State, changed: usize, sent: &[Packet]) {
    let dead: Vec<Packet> = state
        .network
        .iter()
        .filter(|p| usize::from(p.to) == changed || sent.contains(p))
        .filter(|p| {
            let (epoch, message) =
                wire::decode_in_epoch(&p.bytes).expect("the engine decodes what it encodes");
            let receiver = &state.nodes[usize::from(p.to)].process;
            dead::is_dead(receiver, node_id(usize::from(p.from)), epoch, &message)
        })
        .cloned()
        .collect();
    if !dead.is_empty() {
        let network = Arc::make_mut(&mut state.network);
        for packet in &dead {
            network.remove(packet);
        }
    }
}

impl Model for MultiPaxosModel {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        let nodes = (0..REPLICAS)
            .map(|i| Node::sealed(Process::new(self.config.replica_config(i))))
            .collect();
        vec![State {
            nodes,
            network: Arc::default(),
            clients: vec![Client::default(); self.config.clients],
            retries: 0,
            crashes: 0,
            sent_unpersisted: false,
            answers_differ: false,
        }]
    }

    fn actions(&self, state: &State, actions: &mut Vec<Action>) {
        for (client, c) in state.clients.iter().enumerate() {
            if !c.sent {
                let replica = client % REPLICAS;
                actions.push(Action::Request { client, replica });
            } else if c.answer.is_none() && state.retries < self.config.retries_max {
                actions.extend((0..REPLICAS).map(|replica| Action::Request { client, replica }));
            }
        }
        let crash = state.crashes < self.config.crashes_max;
        for packet in state.network.iter() {
            actions.push(Action::Deliver(packet.clone()));
            if crash && self.config.crash_mid_step {
                actions.push(Action::DeliverAndCrash(packet.clone()));
            }
        }
        actions.extend((0..REPLICAS).map(Action::Tick));
        if crash {
            actions.extend((0..REPLICAS).map(Action::Crash));
        }
    }

    fn next_state(&self, last: &State, action: Action) -> Option<State> {
        let mut state = last.clone();
        match action {
            Action::Request { client, replica } => {
                if state.clients[client].sent {
                    state.retries += 1;
                }
                state.clients[client].sent = true;
                self.step(&mut state, replica, |process| {
                    process.replica.handle_request(0, request(client));
                    Output::default()
                });
            }
            Action::Deliver(packet) => self.deliver(&mut state, &packet, false),
            Action::DeliverAndCrash(packet) => {
                state.crashes += 1;
                self.deliver(&mut state, &packet, true);
            }
            Action::Tick(index) => self.step(&mut state, index, |process| {
                process.replica.tick(0);
                Output::default()
            }),
            Action::Crash(index) => {
                state.crashes += 1;
                self.step(&mut state, index, |process| {
                    process.restart();
                    Output::default()
                });
            }
        }
        (state != *last).then_some(state)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        let mut properties = vec![
            Property::always("agreement", |_, state: &State| {
                checks::agreement(state.replicas())
            }),
            Property::always("executed prefixes consistent", |_, state: &State| {
                checks::executed_prefixes_consistent(state.replicas())
            }),
            Property::always("applied once", |_, state: &State| {
                state.replicas().all(checks::applied_once)
            }),
            Property::always("no gap", |_, state: &State| {
                state.replicas().all(checks::no_gap)
            }),
            Property::always("persisted before sent", |_, state: &State| {
                !state.sent_unpersisted
            }),
            Property::always("one answer per request", |_, state: &State| {
                !state.answers_differ
            }),
            Property::sometimes("every request executed", |model: &Self, state: &State| {
                state.replicas().any(|r| {
                    (0..model.config.clients).all(|c| {
                        let request = request(c);
                        r.state_machine()
                            .times_executed(request.client, request.seq)
                            > 0
                    })
                })
            }),
        ];
        let instances = self.config.instances_max > 1;
        if self.config.views_max > 0 && instances {
            properties.push(Property::sometimes(
                "a no-op decided",
                |_, state: &State| state.replicas().any(checks::noop_decided),
            ));
        }
        if self.config.retries_max > 0 && instances {
            properties.push(Property::sometimes(
                "a request decided twice",
                |_, state: &State| state.replicas().any(checks::decided_twice),
            ));
        }
        if self.config.crashes_max > 0 {
            properties.push(Property::sometimes(
                "a restarted replica executes",
                |_, state: &State| {
                    state.nodes.iter().any(|n| {
                        n.process.incarnation > 1
                            && !n.process.replica.state_machine().executed().is_empty()
                    })
                },
            ));
        }
        properties
    }

    fn within_boundary(&self, state: &State) -> bool {
        let views = state
            .replicas()
            .all(|r| r.view() <= View(self.config.views_max));
        let catch_ups: u64 = state.nodes.iter().map(|n| n.process.catch_ups()).sum();
        let instances = state.replicas().all(|r| {
            r.last_instance()
                .is_none_or(|last| last.0 < self.config.instances_max)
        });
        views && instances && catch_ups <= self.config.catch_ups_max
    }
}
