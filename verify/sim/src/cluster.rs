//! An in-process cluster of replicas on a simulated network, driven by one seed.
//!
//! Time is simulated (µs). Every event — a message delivery, a timer, a disk flush finishing, a
//! client issuing its next command, a crash or a restart — sits in one queue ordered by time and
//! insertion, so a seed replays exactly.
//!
//! Links behave like TCP connections: every directed link numbers its messages; the receiver
//! accepts them in order, drops duplicates, and treats a gap (a lost or overtaken message) as a
//! broken connection: it tells its replica ([`Replica::handle_link_broken`]) and drops whatever
//! the old connection still delivers. This is what Algorithm 3 assumes of its links.
//!
//! Each replica persists through a simulated disk: a committed batch becomes durable after the
//! disk latency, and only then are its acceptor replies released. A crash loses whatever was
//! not durable yet. The deliberate bug `reply_before_persist` releases the replies at once.
//!
//! With [`SimConfig::ring`] the replicas form a ring (docs/ring.md): each key's acceptors are
//! the `R` replicas a balanced configuration gives its slot, and crashes keep a majority of
//! every key's replicas up. Clients still send every key to their own node, whose proposer
//! runs against the key's acceptors (the node will forward to a replica instead: a proposer
//! that is no acceptor is one more case the protocol must get right).
use std::collections::BTreeMap;

use bytes::Bytes;
use logless_commands::command::{Command, Reply};
use logless_placement::{Configuration, Replication};
use logless_rmw::acceptor::AcceptorState;
use logless_rmw::config::ProposerConfig;
use logless_rmw::ids::{ClientTag, Key, NodeId};
use logless_rmw::message::{Envelope, Message};
use logless_rmw::persist::PersistBatch;
use logless_rmw::placement::Placement;
use logless_rmw::proposer::{ClientReply, ProposeError};
use logless_rmw::replica::Replica;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use rustc_hash::FxHashMap;

use crate::history::{History, Operation, Outcome};
use crate::link::{Arrival, Link};
use crate::queue::EventQueue;
use crate::stats::RunStats;

/// Network and node faults of a run.
#[derive(Clone, Debug)]
pub struct Faults {
    /// Probability that a message is lost.
    pub loss: f64,
    /// Probability that a message is delivered twice.
    pub duplicate: f64,
    /// Message delay bounds (µs); different delays reorder messages.
    pub delay_us: (u64, u64),
    /// Mean time between partition changes (µs); 0 for none.
    pub partition_every_us: u64,
    /// Mean time between crashes of one replica (µs); 0 for none. At most a minority is down.
    pub crash_every_us: u64,
    /// How long a crashed replica stays down (µs).
    pub down_us: u64,
}

impl Faults {
    /// A perfect network: fixed small delay, nothing lost.
    pub fn none() -> Faults {
        Faults {
            loss: 0.0,
            duplicate: 0.0,
            delay_us: (100, 100),
            partition_every_us: 0,
            crash_every_us: 0,
            down_us: 0,
        }
    }

    /// Everything at once, at rates that still let work finish.
    pub fn all() -> Faults {
        Faults {
            loss: 0.02,
            duplicate: 0.02,
            delay_us: (50, 2_000),
            partition_every_us: 40_000,
            crash_every_us: 60_000,
            down_us: 20_000,
        }
    }
}

/// Deliberate bugs of the runtime (the core has its own in [`ProposerConfig::bugs`]).
#[derive(Clone, Copy, Debug, Default)]
pub struct RuntimeBugs {
    /// Release acceptor replies before their state is durable.
    pub reply_before_persist: bool,
}

/// The workload the clients run.
#[derive(Clone, Debug)]
pub struct Workload {
    /// Closed-loop clients (each waits for its reply before the next command).
    pub clients: u32,
    /// Commands per client.
    pub commands_per_client: u32,
    /// Number of registers (counters) the commands spread over.
    pub keys: u32,
    /// Fraction of commands that are writes (INCRBY 1); the rest are GETs.
    pub write_fraction: f64,
    /// Client think time between commands (µs).
    pub think_us: u64,
    /// How long a client waits for a reply before it records the outcome as unknown (µs).
    pub client_timeout_us: u64,
}

/// One run's parameters.
#[derive(Clone, Debug)]
pub struct SimConfig {
    /// Replicas.
    pub replicas: u16,
    /// Replicas per key when they form a ring (3, 5 or 7, at most `replicas`), or `None` for
    /// every replica an acceptor of every key.
    pub ring: Option<u8>,
    /// The seed of everything random.
    pub seed: u64,
    /// Faults during the workload.
    pub faults: Faults,
    /// The workload.
    pub workload: Workload,
    /// Disk latency of a flush (µs).
    pub flush_us: u64,
    /// Proposer configuration (acceptors are filled in).
    pub proposer: ProposerConfig,
    /// Runtime bugs.
    pub bugs: RuntimeBugs,
    /// Whether to record the history (tests) or only statistics (benchmarks).
    pub record_history: bool,
}

impl SimConfig {
    /// A configuration with sensible defaults for `replicas` and `seed`. Every third seed
    /// (those 2 modulo 3) has fast writes vote with a quorum first
    /// ([`ProposerConfig::thrifty_writes`]), so that the seeded runs cover both.
    pub fn new(replicas: u16, seed: u64) -> SimConfig {
        let acceptors = (1..=replicas).map(NodeId).collect();
        let mut proposer = ProposerConfig::new(acceptors);
        proposer.phase_timeout_ms = 20;
        proposer.request_timeout_ms = 400;
        proposer.thrifty_writes = seed % 3 == 2;
        SimConfig {
            replicas,
            ring: None,
            seed,
            faults: Faults::none(),
            workload: Workload {
                clients: 6,
                commands_per_client: 40,
                keys: 3,
                write_fraction: 0.6,
                think_us: 200,
                client_timeout_us: 600_000,
            },
            flush_us: 50,
            proposer,
            bugs: RuntimeBugs::default(),
            record_history: true,
        }
    }
}

impl SimConfig {
    /// The configuration the seeded tests run for `seed` (and `examples/replay.rs` replays):
    /// three replicas under every fault; every seventh seed (those 6 modulo 7) a ring of 5, 6
    /// or 7 replicas with 3 per key instead ([`SimConfig::ring_of`]).
    pub fn for_seed(seed: u64) -> SimConfig {
        let mut config = if seed % 7 == 6 {
            SimConfig::ring_of(5 + (seed / 7 % 3) as u16, seed)
        } else {
            SimConfig::new(3, seed)
        };
        config.faults = Faults::all();
        config
    }

    /// A ring of `replicas` with three per key and no faults, with twice the keys of
    /// [`SimConfig::new`], so that they fall on several replica sets.
    pub fn ring_of(replicas: u16, seed: u64) -> SimConfig {
        let mut config = SimConfig::new(replicas, seed);
        config.ring = Some(3);
        config.workload.keys *= 2;
        config
    }
}

#[derive(Debug)]
enum Event {
    Deliver {
        from: NodeId,
        to: NodeId,
        /// The connection it was sent on: (sender incarnation, receiver incarnation).
        connection: (u32, u32),
        seq: u64,
        message: Message,
    },
    Timer {
        node: NodeId,
        incarnation: u32,
        key: Key,
        token: u64,
    },
    Durable {
        node: NodeId,
        incarnation: u32,
        batch: Box<PersistBatchHandle>,
    },
    ClientNext {
        client: u32,
    },
    ClientTimeout {
        client: u32,
        command_seq: u64,
    },
    Crash,
    Restart {
        node: NodeId,
    },
    Partition,
}

/// A persist batch in flight to the simulated disk.
#[derive(Debug)]
struct PersistBatchHandle(PersistBatch);

struct Node {
    replica: Option<Replica>,
    incarnation: u32,
    /// The durable acceptor states (what survives a crash).
    disk: FxHashMap<Key, AcceptorState>,
    /// When the last persist batch handed to the disk completes (µs): a later batch, even one
    /// without writes, is released no earlier, since its replies may show those states.
    durable_at_us: u64,
}

/// The durable store of a simulated node: committed writes land here.
struct DiskStore<'a>(&'a mut FxHashMap<Key, AcceptorState>);

impl logless_rmw::persist::AcceptorStore for DiskStore<'_> {
    type Error = std::convert::Infallible;
    fn write(&mut self, key: &Key, state: &AcceptorState) -> Result<(), Self::Error> {
        self.0.insert(key.clone(), state.clone());
        Ok(())
    }
    fn flush(&mut self) -> Result<(), Self::Error> {
        Ok(())
    }
    fn write_round_floor(&mut self, _: logless_rmw::ids::Round) -> Result<(), Self::Error> {
        unreachable!("the simulation does not enable removing registers")
    }
    fn remove(&mut self, key: &Key) -> Result<(), Self::Error> {
        self.0.remove(key);
        Ok(())
    }
}

struct Client {
    node: NodeId,
    issued: u32,
    /// The command in flight: its sequence number, index in the history, key and command.
    in_flight: Option<(u64, usize, Key, Command)>,
    command_seq: u64,
}

/// The in-process cluster.
pub struct Cluster {
    config: SimConfig,
    now_us: u64,
    events: EventQueue<Event>,
    rng: SmallRng,
    nodes: BTreeMap<NodeId, Node>,
    links: BTreeMap<(NodeId, NodeId), Link>,
    /// Directed links currently cut by a partition.
    cut: Vec<(NodeId, NodeId)>,
    clients: Vec<Client>,
    history: History,
    /// Acknowledged and unknown increments per key, for the counter check.
    increments: BTreeMap<Key, (u64, u64)>,
    stats: RunStats,
    faults_active: bool,
    /// The reply to the final read in progress.
    read_reply: Option<Result<Reply, ProposeError>>,
}

/// The client id of the final reads.
const FINAL_READER: u32 = u32::MAX;

impl Cluster {
    /// A cluster ready to run.
    ///
    /// # Panics
    ///
    /// If [`SimConfig::ring`] is not a replication degree the replicas can hold.
    pub fn new(mut config: SimConfig) -> Cluster {
        let acceptors: Vec<NodeId> = (1..=config.replicas).map(NodeId).collect();
        config.proposer.acceptors = acceptors.clone();
        if let Some(r) = config.ring {
            let nodes: Vec<_> = (acceptors.iter())
                .map(|n| logless_placement::NodeId(n.0))
                .collect();
            let replication = Replication::new(r).expect("3, 5 or 7 replicas per key");
            let ring = Configuration::balanced(&nodes, replication).expect("a ring");
            let placement = Placement::new(&ring, &acceptors).expect("every node an acceptor");
            config.proposer.placement = Some(placement);
        }
        let mut rng = SmallRng::seed_from_u64(config.seed);
        let mut nodes = BTreeMap::new();
        for i in 1..=config.replicas {
            let node = NodeId(i);
            let proposer = config.proposer.clone();
            nodes.insert(
                node,
                Node {
                    replica: Some(Replica::new(node, 1, proposer, rng.random(), [])),
                    incarnation: 1,
                    disk: FxHashMap::default(),
                    durable_at_us: 0,
                },
            );
        }
        let clients = (0..config.workload.clients)
            .map(|c| Client {
                node: NodeId((c % u32::from(config.replicas)) as u16 + 1),
                issued: 0,
                in_flight: None,
                command_seq: 0,
            })
            .collect();
        let mut cluster = Cluster {
            now_us: 0,
            events: EventQueue::default(),
            rng,
            nodes,
            links: BTreeMap::new(),
            cut: Vec::new(),
            clients,
            history: History::default(),
            increments: BTreeMap::new(),
            stats: RunStats::default(),
            faults_active: true,
            read_reply: None,
            config,
        };
        for c in 0..cluster.config.workload.clients {
            let at = cluster
                .rng
                .random_range(0..=cluster.config.workload.think_us);
            cluster.schedule(at, Event::ClientNext { client: c });
        }
        if cluster.config.faults.crash_every_us > 0 {
            let at = cluster.exp(cluster.config.faults.crash_every_us);
            cluster.schedule(at, Event::Crash);
        }
        if cluster.config.faults.partition_every_us > 0 {
            let at = cluster.exp(cluster.config.faults.partition_every_us);
            cluster.schedule(at, Event::Partition);
        }
        cluster
    }

    fn exp(&mut self, mean_us: u64) -> u64 {
        let u: f64 = self.rng.random_range(0.0001..1.0);
        (-(u.ln()) * mean_us as f64) as u64
    }

    fn schedule(&mut self, delay_us: u64, event: Event) {
        self.events.schedule(delay_us, event);
    }

    /// Runs until every client finished and the cluster is quiet, or `until_us` passes.
    /// Faults stop at `faults_until_us`; after that the cluster must still finish the work
    /// (the liveness phase).
    pub fn run(&mut self, faults_until_us: u64, until_us: u64) -> &RunStats {
        while let Some(at) = self.events.next_due_us() {
            if at > until_us {
                break;
            }
            if self.faults_active && at >= faults_until_us {
                self.heal();
            }
            let (at, event) = self.events.pop().expect("an event is due");
            self.now_us = at;
            self.step(event);
            if self.all_clients_done() {
                break;
            }
        }
        self.stats.sim_time_us = self.now_us;
        for node in self.nodes.values() {
            if let Some(r) = &node.replica {
                self.stats.proposer += r.stats();
            }
        }
        &self.stats
    }

    fn heal(&mut self) {
        self.faults_active = false;
        self.cut.clear();
        let down: Vec<NodeId> = self
            .nodes
            .iter()
            .filter(|(_, n)| n.replica.is_none())
            .map(|(id, _)| *id)
            .collect();
        for node in down {
            self.restart(node);
        }
    }

    fn all_clients_done(&self) -> bool {
        self.clients
            .iter()
            .all(|c| c.in_flight.is_none() && c.issued >= self.config.workload.commands_per_client)
    }

    fn step(&mut self, event: Event) {
        match event {
            Event::Deliver {
                from,
                to,
                connection,
                seq,
                message,
            } => self.deliver(from, to, connection, seq, message),
            Event::Timer {
                node,
                incarnation,
                key,
                token,
            } => {
                let now_ms = self.now_us / 1000;
                if let Some(r) = self.live_replica(node, incarnation) {
                    r.handle_timer(now_ms, &key, token);
                    self.flush_outputs(node);
                }
            }
            Event::Durable {
                node,
                incarnation,
                batch,
            } => self.durable(node, incarnation, batch.0),
            Event::ClientNext { client } => self.client_next(client),
            Event::ClientTimeout {
                client,
                command_seq,
            } => self.client_timeout(client, command_seq),
            Event::Crash => self.crash(),
            Event::Restart { node } => {
                if self.faults_active {
                    self.restart(node);
                }
            }
            Event::Partition => self.partition(),
        }
    }

    fn live_replica(&mut self, node: NodeId, incarnation: u32) -> Option<&mut Replica> {
        let n = self.nodes.get_mut(&node)?;
        if n.incarnation != incarnation {
            return None;
        }
        n.replica.as_mut()
    }

    fn deliver(
        &mut self,
        from: NodeId,
        to: NodeId,
        connection: (u32, u32),
        seq: u64,
        message: Message,
    ) {
        let now_ms = self.now_us / 1000;
        let current = (self.nodes[&from].incarnation, self.nodes[&to].incarnation);
        let arrival = self
            .links
            .entry((from, to))
            .or_default()
            .receive(connection, current, seq);
        if arrival == Arrival::Drop {
            return;
        }
        let broken = arrival == Arrival::BrokenThenDeliver;
        let Some(replica) = self.nodes.get_mut(&to).and_then(|n| n.replica.as_mut()) else {
            return;
        };
        if broken {
            self.stats.link_breaks += 1;
            replica.handle_link_broken(from);
        }
        replica.handle_message(now_ms, from, &message);
        self.flush_outputs(to);
    }

    /// Sends what a replica produced: proposer messages now, acceptor replies after the disk.
    fn flush_outputs(&mut self, node: NodeId) {
        let (output, incarnation) = {
            let n = self.nodes.get_mut(&node).expect("node");
            let Some(replica) = n.replica.as_mut() else {
                return;
            };
            (replica.take_output(), n.incarnation)
        };
        for envelope in output.sends {
            self.send(node, envelope);
        }
        for timer in output.timers {
            let at_us = timer.at_ms * 1000;
            let delay = at_us.saturating_sub(self.now_us);
            self.schedule(
                delay,
                Event::Timer {
                    node,
                    incarnation,
                    key: timer.key,
                    token: timer.token,
                },
            );
        }
        for reply in output.replies {
            self.client_reply(reply);
        }
        if output.persist.is_empty() {
            return;
        }
        self.stats.flushes += u64::from(output.persist.writes_len() > 0);
        if self.config.bugs.reply_before_persist {
            let (writes, replies) = output.persist.release_unpersisted_for_fault_injection();
            let late = PersistBatch::writes_only_for_fault_injection(writes);
            for envelope in replies {
                self.send(node, envelope);
            }
            let flush_us = self.config.flush_us;
            self.schedule(
                flush_us,
                Event::Durable {
                    node,
                    incarnation,
                    batch: Box::new(PersistBatchHandle(late)),
                },
            );
            return;
        }
        let flush_us = if output.persist.writes_len() > 0 {
            self.config.flush_us
        } else {
            0
        };
        let now_us = self.now_us;
        let n = self.nodes.get_mut(&node).expect("node");
        n.durable_at_us = n.durable_at_us.max(now_us + flush_us);
        let delay_us = n.durable_at_us - now_us;
        self.schedule(
            delay_us,
            Event::Durable {
                node,
                incarnation,
                batch: Box::new(PersistBatchHandle(output.persist)),
            },
        );
    }

    fn durable(&mut self, node: NodeId, incarnation: u32, batch: PersistBatch) {
        let n = self.nodes.get_mut(&node).expect("node");
        if n.incarnation != incarnation || n.replica.is_none() {
            return; // crashed before the flush finished: the writes are lost
        }
        let Ok(replies) = batch.commit(&mut DiskStore(&mut n.disk));
        for envelope in replies {
            self.send(node, envelope);
        }
    }

    fn send(&mut self, from: NodeId, envelope: Envelope) {
        self.stats.messages += 1;
        let to = envelope.to;
        let connection = (self.nodes[&from].incarnation, self.nodes[&to].incarnation);
        let seq = self.links.entry((from, to)).or_default().send(connection);
        if from != to {
            if self.faults_active && self.cut.contains(&(from, to)) {
                return;
            }
            if self.faults_active && self.rng.random_bool(self.config.faults.loss) {
                return;
            }
        }
        let copies = if from != to
            && self.faults_active
            && self.rng.random_bool(self.config.faults.duplicate)
        {
            2
        } else {
            1
        };
        for _ in 0..copies {
            let (lo, hi) = if from == to {
                (0, 0)
            } else {
                self.config.faults.delay_us
            };
            let delay = self.rng.random_range(lo..=hi);
            self.schedule(
                delay,
                Event::Deliver {
                    from,
                    to,
                    connection,
                    seq,
                    message: envelope.message.clone(),
                },
            );
        }
    }

    fn crash(&mut self) {
        if !self.faults_active {
            return;
        }
        let down = self.nodes.values().filter(|n| n.replica.is_none()).count();
        // A minority of every key's acceptors: of all replicas, or of a key's `R` on a ring.
        let per_key = (self.config.ring).map_or(usize::from(self.config.replicas), usize::from);
        let minority = (per_key - 1) / 2;
        if down < minority {
            let node = NodeId(self.rng.random_range(1..=self.config.replicas));
            let n = self.nodes.get_mut(&node).expect("node");
            if n.replica.take().is_some() {
                self.stats.crashes += 1;
                n.incarnation += 1;
                let down_us = self.config.faults.down_us;
                self.schedule(down_us, Event::Restart { node });
            }
        }
        let next = self.exp(self.config.faults.crash_every_us);
        self.schedule(next, Event::Crash);
    }

    fn restart(&mut self, node: NodeId) {
        let seed = self.rng.random();
        let proposer = self.config.proposer.clone();
        let n = self.nodes.get_mut(&node).expect("node");
        if n.replica.is_some() {
            return;
        }
        let recovered: Vec<(Key, AcceptorState)> =
            n.disk.iter().map(|(k, s)| (k.clone(), s.clone())).collect();
        n.replica = Some(Replica::new(node, n.incarnation, proposer, seed, recovered));
        // Every connection of the node is new (links renumber by connection); tell the peers.
        for peer in 1..=self.config.replicas {
            let peer = NodeId(peer);
            if peer != node {
                if let Some(r) = self.nodes.get_mut(&peer).and_then(|p| p.replica.as_mut()) {
                    r.handle_link_broken(node);
                }
            }
        }
    }

    fn partition(&mut self) {
        if !self.faults_active {
            return;
        }
        self.cut.clear();
        self.stats.partitions += 1;
        // Cut one random node off, one way or both ways, or heal.
        match self.rng.random_range(0..3) {
            0 => {}
            kind => {
                let isolated = NodeId(self.rng.random_range(1..=self.config.replicas));
                for peer in (1..=self.config.replicas).map(NodeId) {
                    if peer != isolated {
                        self.cut.push((isolated, peer));
                        if kind == 2 {
                            self.cut.push((peer, isolated));
                        }
                    }
                }
            }
        }
        let next = self.exp(self.config.faults.partition_every_us);
        self.schedule(next, Event::Partition);
    }

    fn client_next(&mut self, client: u32) {
        let w = self.config.workload.clone();
        let c = &self.clients[client as usize];
        if c.issued >= w.commands_per_client || c.in_flight.is_some() {
            return;
        }
        let key = Key::new(Bytes::from(format!(
            "k{}",
            self.rng.random_range(0..w.keys)
        )));
        let command = if self.rng.random_bool(w.write_fraction) {
            Command::IncrBy(1)
        } else {
            Command::Get
        };
        // A client whose node is down goes to another one.
        let mut node = self.clients[client as usize].node;
        if self.nodes[&node].replica.is_none() {
            node = NodeId(self.rng.random_range(1..=self.config.replicas));
        }
        let c = &mut self.clients[client as usize];
        c.node = node;
        c.issued += 1;
        c.command_seq += 1;
        let command_seq = c.command_seq;
        let index = self.history.operations.len();
        if self.config.record_history {
            self.history.operations.push(Operation {
                client,
                key: key.clone(),
                command: command.clone(),
                call_us: self.now_us,
                return_us: u64::MAX,
                outcome: Outcome::Unknown,
            });
        }
        c.in_flight = Some((command_seq, index, key.clone(), command.clone()));
        self.stats.latency_start(client, self.now_us);
        let timeout = w.client_timeout_us;
        self.schedule(
            timeout,
            Event::ClientTimeout {
                client,
                command_seq,
            },
        );
        let tag = ClientTag((u64::from(client) << 32) | command_seq);
        let now_ms = self.now_us / 1000;
        match self.nodes.get_mut(&node).and_then(|n| n.replica.as_mut()) {
            Some(replica) => {
                replica.handle_command(now_ms, tag, key, command);
                self.flush_outputs(node);
            }
            None => self.client_done(client, command_seq, None),
        }
    }

    fn client_timeout(&mut self, client: u32, command_seq: u64) {
        self.client_done(client, command_seq, None);
    }

    fn client_reply(&mut self, reply: ClientReply) {
        let client = (reply.client.0 >> 32) as u32;
        let command_seq = reply.client.0 & 0xffff_ffff;
        if client == FINAL_READER {
            self.read_reply = Some(reply.result);
            return;
        }
        match reply.result {
            Ok(r) => self.client_done(client, command_seq, Some(Some(r))),
            Err(ProposeError::OutcomeUnknown) => self.client_done(client, command_seq, None),
            Err(
                ProposeError::NotApplied
                | ProposeError::Overloaded
                | ProposeError::DiskFull
                | ProposeError::QuorumFull,
            ) => self.client_done(client, command_seq, Some(None)),
        }
    }

    /// `result`: `Some(Some(reply))` acknowledged, `Some(None)` definitely not applied, `None`
    /// unknown.
    fn client_done(&mut self, client: u32, command_seq: u64, result: Option<Option<Reply>>) {
        let c = &mut self.clients[client as usize];
        let Some((seq, index, key, command)) = c.in_flight.take() else {
            return;
        };
        if seq != command_seq {
            c.in_flight = Some((seq, index, key, command));
            return;
        }
        let is_incr = matches!(command, Command::IncrBy(_));
        let counts = self.increments.entry(key).or_default();
        match &result {
            Some(Some(_)) => {
                self.stats.acknowledged += 1;
                counts.0 += u64::from(is_incr);
                self.stats.latency_end(client, self.now_us);
            }
            Some(None) => self.stats.not_applied += 1,
            None => {
                self.stats.unknown += 1;
                counts.1 += u64::from(is_incr);
            }
        }
        if self.config.record_history {
            let op = &mut self.history.operations[index];
            match result {
                Some(Some(reply)) => {
                    op.return_us = self.now_us;
                    op.outcome = Outcome::Ok(reply);
                }
                Some(None) => {
                    op.return_us = self.now_us;
                    op.outcome = Outcome::NotApplied;
                }
                None => {}
            }
        }
        let think = self.config.workload.think_us;
        self.schedule(think, Event::ClientNext { client });
    }

    /// The recorded history.
    pub fn history(&self) -> &History {
        &self.history
    }

    /// The replicas whose disk holds an acceptor state of `key`.
    pub fn holders(&self, key: &Key) -> Vec<NodeId> {
        (self.nodes.iter())
            .filter(|(_, node)| node.disk.contains_key(key))
            .map(|(id, _)| *id)
            .collect()
    }

    /// Acknowledged and unknown increments per key.
    pub fn increments(&self) -> &BTreeMap<Key, (u64, u64)> {
        &self.increments
    }

    /// Reads every key through the protocol from node 1 after the run (faults healed), and
    /// returns the value of each counter, or the key whose read did not complete.
    pub fn read_all(&mut self, keys: &[Key]) -> Result<BTreeMap<Key, i64>, Key> {
        self.heal();
        let node = NodeId(1);
        let mut values = BTreeMap::new();
        for (i, key) in keys.iter().enumerate() {
            let tag = ClientTag((u64::from(FINAL_READER) << 32) | i as u64);
            let now_ms = self.now_us / 1000;
            self.nodes
                .get_mut(&node)
                .and_then(|n| n.replica.as_mut())
                .expect("node 1 is up after healing")
                .handle_command(now_ms, tag, key.clone(), Command::Get);
            self.read_reply = None;
            self.flush_outputs(node);
            let deadline = self.now_us + 5_000_000;
            while self.read_reply.is_none() {
                match self.events.next_due_us() {
                    Some(at) if at <= deadline => {}
                    _ => break,
                }
                let (at, event) = self.events.pop().expect("an event is due");
                self.now_us = at;
                self.step(event);
            }
            match self.read_reply.take() {
                Some(Ok(Reply::Bulk(b))) => {
                    let v = std::str::from_utf8(&b).ok().and_then(|s| s.parse().ok());
                    values.insert(key.clone(), v.ok_or_else(|| key.clone())?);
                }
                Some(Ok(Reply::Nil)) => {
                    values.insert(key.clone(), 0);
                }
                _ => return Err(key.clone()),
            }
        }
        Ok(values)
    }
}
