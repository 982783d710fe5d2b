//! Whole replicas on a simulated network, running the real services: three replicas with two
//! workers each, clients that send key-value commands of the B⁺-tree service (or NetFS calls)
//! to random replicas (and again to the next one when not answered), messages delayed and
//! reordered at random, workers stepped at random; in one test, messages also lost and
//! duplicated and replicas crashed (so every group loses its leader now and then) and restarted
//! from their stores, re-executing every decided command into a fresh service.
//!
//! Replicas also take snapshots (a snapshot request in `g_all`, its cut, the service at the
//! cut) and restart from the last one and the suffix of their logs; every replica takes the
//! same cut for a snapshot request, whether the groups are idle or busy. A replica partitioned
//! while the others truncate their groups catches up when healed, through a peer's group
//! snapshot and the cut it carries (and again after a crash while waiting to install it); a
//! cut installed without its service state is caught. A replica that lost its disk rejoins
//! every group (from the peers' logs, or past their truncation through a cut, and again after
//! a crash in the middle of its rejoin), executing nothing until every group is back.
//!
//! Checked: every message leaves only once what it promises is durable in its group's log, and
//! survives its wire encoding; the groups' first leaders are spread over the replicas; every
//! replica executes every command with the same replies and ends with the same state digest,
//! in every mode (psmr, sp-smr, smr, no-rep); NetFS under every replicated mode (create, write,
//! read, rename, unlink) answers as a file system does, with equal digests; a command that does
//! not decode is ordered in `g_all` and answered with the service's error; an idle stream
//! (only `g_all` busy, or only one worker's group) stalls nothing, nor does a skew between the
//! replicas' clocks larger than a client's timeout, and an idle cluster proposes no skips. With skips turned off the idle case must stall, and a merge by arrival, synchronous
//! mode without the barrier, or the B⁺-tree's C-G that splits dependent commands
//! (`KvService::split_dependent_commands`, caught by the digests) must make replicas diverge:
//! the checks can fail.
use std::collections::BTreeMap;

use bytes::Bytes;
use logless_btree::{KvCommand, KvReply, KvService};
use logless_multipaxos::ids::{ClientId, Epoch, NodeId, RequestSeq};
use logless_multipaxos::message::Request;
use logless_multipaxos::testing::durable_before_send;
use logless_netfs::{Fh, FsCommand, FsPath, FsReply, Mode as FsMode, NetFs, Time};
use logless_psmr::config::{Config, Mode};
use logless_psmr::cut::{is_snapshot, Cut, DurableCut};
use logless_psmr::groups::{GroupEnvelope, RequestError};
use logless_psmr::ids::GroupIndex;
use logless_psmr::plan::{Delivered, Mode as ExecutionMode, Step};
use logless_psmr::replica::Replica;
use logless_psmr::testing::MemGroupStore;
use logless_psmr::wire;
use logless_service::{Digest, Group, Service, Wire, WorkerId};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

mod kv_commands;
use kv_commands::kv_command;

const NODES: [NodeId; 3] = [NodeId(1), NodeId(2), NodeId(3)];
const WORKERS: u16 = 2;
/// How long a run may take, in simulated milliseconds.
const RUN_MS_MAX: u64 = 5_000;
/// When the clients send their commands, spread from the start.
const SEND_MS_MAX: u64 = 500;
/// When the clients of a burst send their commands, from the start.
const SEND_BURST_MS: u64 = 10;
/// How long a client waits for its replica to execute its command before it sends it again.
const CLIENT_RETRY_MS: u64 = 600;

struct Node<S> {
    replica: Replica<S>,
    store: MemGroupStore,
    /// The service the workers execute, through its byte-level entry point.
    service: S,
    executing: Vec<Option<Delivered>>,
    /// Encoded replies by client, as this replica's workers executed them.
    replies: BTreeMap<u64, Vec<u8>>,
    /// Every command the service executed, in the order executed: commands of different
    /// workers' groups are independent, so executing them again in this order on one thread
    /// rebuilds the service (the test's stand-in for serialising its state).
    executed: Vec<Bytes>,
    /// The last snapshot this replica took: it survives a crash, as a file would.
    snapshot: Option<Snapshot>,
}

/// A replica's snapshot: a cut, the service at that cut, and the replies given before it.
#[derive(Clone)]
struct Snapshot {
    cut: Cut,
    executed: Vec<Bytes>,
    replies: BTreeMap<u64, Vec<u8>>,
}

impl Snapshot {
    /// The "service state" the streams carry with the cut: the commands executed and the
    /// replies (count, then length-prefixed bytes, little-endian).
    fn state(&self) -> Bytes {
        let mut out = Vec::new();
        let put = |out: &mut Vec<u8>, bytes: &[u8]| {
            out.extend_from_slice(&(bytes.len() as u64).to_le_bytes());
            out.extend_from_slice(bytes);
        };
        out.extend_from_slice(&(self.executed.len() as u64).to_le_bytes());
        for command in &self.executed {
            put(&mut out, command);
        }
        out.extend_from_slice(&(self.replies.len() as u64).to_le_bytes());
        for (client, reply) in &self.replies {
            out.extend_from_slice(&client.to_le_bytes());
            put(&mut out, reply);
        }
        Bytes::from(out)
    }

    /// The snapshot a [`Snapshot::state`] and its cut make.
    fn of(durable: DurableCut) -> Snapshot {
        let mut bytes = &durable.state[..];
        let u64_of = |bytes: &mut &[u8]| {
            let (head, rest) = bytes.split_first_chunk::<8>().unwrap();
            *bytes = rest;
            u64::from_le_bytes(*head)
        };
        let take = |bytes: &mut &[u8], len: u64| {
            let (head, rest) = bytes.split_at(len as usize);
            *bytes = rest;
            head.to_vec()
        };
        let count = u64_of(&mut bytes);
        let executed = (0..count)
            .map(|_| {
                let len = u64_of(&mut bytes);
                Bytes::from(take(&mut bytes, len))
            })
            .collect();
        let count = u64_of(&mut bytes);
        let replies = (0..count)
            .map(|_| {
                let client = u64_of(&mut bytes);
                let len = u64_of(&mut bytes);
                (client, take(&mut bytes, len))
            })
            .collect();
        Snapshot {
            cut: durable.cut,
            executed,
            replies,
        }
    }
}

/// A client with one command: it sends it, and again to another replica if that one has not
/// executed it in time.
struct Client {
    /// The encoded command.
    command: Bytes,
    /// When it sends next.
    send_ms: u64,
    /// The replica it sends to, or sent to last.
    to: NodeId,
    /// How many times it sent.
    sends: u32,
}

/// The seeds to run: `LOGLESS_PSMR_SEEDS` if set, else `default`.
fn seeds(default: u64) -> u64 {
    std::env::var("LOGLESS_PSMR_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

/// The replica after `me` in the cluster's order.
fn next(me: NodeId) -> NodeId {
    let index = NODES.iter().position(|n| *n == me).unwrap();
    NODES[(index + 1) % NODES.len()]
}

impl<S: Service> Node<S> {
    /// A replica started from `store`, with services from `make`: one for C-G, and a fresh one
    /// to execute every decided command into.
    fn new(config: Config, make: fn() -> S, store: MemGroupStore, now_ms: u64) -> Node<S> {
        Node::restore(config, make, store, None, now_ms)
    }

    /// A replica restarted from `store` and, if it took one, its last snapshot: the service
    /// restored at the snapshot's cut, and only the commands after it executed again.
    fn restore(
        config: Config,
        make: fn() -> S,
        store: MemGroupStore,
        snapshot: Option<Snapshot>,
        now_ms: u64,
    ) -> Node<S> {
        let cut = snapshot.as_ref().map(|s| &s.cut);
        let replica = Replica::recover_from(config, make(), cut, &store.durable(), now_ms);
        let mut service = make();
        let (executed, replies) = snapshot
            .as_ref()
            .map(|s| (s.executed.clone(), s.replies.clone()))
            .unwrap_or_default();
        for command in &executed {
            service.execute_encoded(command);
        }
        let mut node = Node {
            replica,
            store,
            service,
            executing: vec![None; usize::from(WORKERS)],
            replies,
            executed,
            snapshot,
        };
        if let Some(snapshot) = &node.snapshot {
            let durable = DurableCut {
                cut: snapshot.cut.clone(),
                state: snapshot.state(),
            };
            node.replica.cut_durable(&durable);
        }
        node
    }

    /// Installs the cut the replica waits for, if it can now: the service is rebuilt from the
    /// cut's state, which becomes the replica's last snapshot. Returns whether it did.
    fn install(&mut self, make: fn() -> S) -> bool {
        let Some(durable) = self.replica.install() else {
            return false;
        };
        let snapshot = Snapshot::of(durable);
        self.service = make();
        for command in &snapshot.executed {
            self.service.execute_encoded(command);
        }
        self.executed = snapshot.executed.clone();
        self.replies = snapshot.replies.clone();
        self.snapshot = Some(snapshot);
        true
    }
}

/// Faults, while the faulty period lasts.
#[derive(Clone, Copy)]
struct Faults {
    /// Until when faults are injected.
    until_ms: u64,
    /// Chance that a message is lost, and that it is duplicated.
    loss: f64,
    duplication: f64,
    /// Chance per millisecond that a replica crashes (one at a time), and how long it stays down.
    crash: f64,
    down_ms_max: u64,
}

const NO_FAULTS: Faults = Faults {
    until_ms: 0,
    loss: 0.0,
    duplication: 0.0,
    crash: 0.0,
    down_ms_max: 0,
};

struct Sim<S> {
    rng: SmallRng,
    configs: BTreeMap<NodeId, Config>,
    /// Builds the service, configured alike on every replica (C-G included).
    make: fn() -> S,
    faults: Faults,
    /// The replica that is down, and until when.
    down: Option<(NodeId, u64)>,
    crashes: u64,
    now_ms: u64,
    /// How far each replica's clock runs ahead of `now_ms` (none: not at all).
    clock_ahead_ms: BTreeMap<NodeId, u64>,
    nodes: BTreeMap<NodeId, Node<S>>,
    /// (delivery time, sender, message).
    in_flight: Vec<(u64, NodeId, GroupEnvelope)>,
    /// One client per command, numbered by the command's index.
    commands: Vec<Client>,
    /// How often a replica (a random one) asks for a snapshot; 0: never.
    snapshot_every_ms: u64,
    /// Snapshots taken, and replicas restarted from one.
    snapshots_taken: u64,
    snapshots_restored: u64,
    /// The cut of each snapshot request, by its number, as the first replica took it: every
    /// replica must take the same.
    cuts: BTreeMap<RequestSeq, Cut>,
    /// The first cut a replica took unlike the first replica's (positions or client tables).
    cut_differs: Option<String>,
    /// A replica cut off from the others (it runs on; every message to or from it is lost).
    partitioned: Option<NodeId>,
    /// Whether replicas install the cuts they wait for (off: a test catches one waiting).
    installs: bool,
    /// Cuts installed.
    cuts_installed: u64,
}

/// The key-value service the tests replicate, with small nodes so that the trees reshape often.
fn kv() -> KvService {
    KvService::with_fanout(4)
}

/// The key-value service with its deliberate C-G bug.
fn kv_split() -> KvService {
    let mut service = kv();
    service.split_dependent_commands();
    service
}

/// Encodes key-value commands.
fn encoded(commands: &[KvCommand]) -> Vec<Bytes> {
    (commands.iter())
        .map(|command| Bytes::from(command.encode_to_vec()))
        .collect()
}

impl Sim<KvService> {
    /// A cluster of the key-value service whose clients send `commands`.
    fn new(seed: u64, commands: &[KvCommand], configure: fn(&mut Config)) -> Sim<KvService> {
        Sim::with_service(seed, &encoded(commands), configure, kv)
    }
}

impl<S: Service> Sim<S> {
    fn with_service(
        seed: u64,
        commands: &[Bytes],
        configure: impl Fn(&mut Config),
        make: fn() -> S,
    ) -> Sim<S> {
        let rng = SmallRng::seed_from_u64(seed);
        let configs: BTreeMap<NodeId, Config> = NODES
            .iter()
            .map(|&me| {
                let mut config = Config::new(NODES.to_vec(), me, WORKERS);
                configure(&mut config);
                (me, config)
            })
            .collect();
        let nodes = (configs.iter())
            .map(|(me, config)| {
                (
                    *me,
                    Node::new(config.clone(), make, MemGroupStore::default(), 0),
                )
            })
            .collect();
        let mut sim = Sim {
            rng,
            configs,
            make,
            faults: NO_FAULTS,
            down: None,
            crashes: 0,
            now_ms: 0,
            clock_ahead_ms: BTreeMap::new(),
            nodes,
            in_flight: Vec::new(),
            commands: Vec::new(),
            snapshot_every_ms: 0,
            snapshots_taken: 0,
            snapshots_restored: 0,
            cuts: BTreeMap::new(),
            cut_differs: None,
            partitioned: None,
            installs: true,
            cuts_installed: 0,
        };
        sim.send(commands, SEND_MS_MAX);
        sim
    }

    /// New clients, one per command, that send within `spread_ms` from now.
    fn send(&mut self, commands: &[Bytes], spread_ms: u64) {
        for command in commands {
            let client = Client {
                command: command.clone(),
                send_ms: self.now_ms + self.rng.random_range(0..spread_ms),
                to: NODES[self.rng.random_range(0..NODES.len())],
                sends: 0,
            };
            self.commands.push(client);
        }
    }

    /// Commits what `me` produced and puts its messages on the network, checking each against
    /// its group's durable log.
    fn commit(&mut self, me: NodeId) {
        let node = self.nodes.get_mut(&me).unwrap();
        if self.installs && node.install(self.make) {
            self.cuts_installed += 1;
        }
        let Ok(released) = node.replica.take_ready().commit(&mut node.store);
        for envelope in released.messages {
            let durable = node.store.group(envelope.group).map(|s| s.durable());
            let default = Default::default();
            assert!(
                durable_before_send(durable.unwrap_or(&default), &envelope.message),
                "{me:?} sent {envelope:?} before persisting it"
            );
            let mut bytes = Vec::new();
            wire::encode(envelope.group, &envelope.message, &mut bytes);
            let decoded = wire::decode(&bytes);
            assert_eq!(decoded, Ok((envelope.group, envelope.message.clone())));
            let faulty = self.now_ms < self.faults.until_ms;
            if faulty && self.rng.random_bool(self.faults.loss) {
                continue;
            }
            if self
                .partitioned
                .is_some_and(|p| p == me || p == envelope.to)
            {
                continue;
            }
            if faulty && self.rng.random_bool(self.faults.duplication) {
                let at = self.now_ms + self.rng.random_range(0..10);
                self.in_flight.push((at, me, envelope.clone()));
            }
            let at = self.now_ms + self.rng.random_range(0..4);
            self.in_flight.push((at, me, envelope));
        }
    }

    fn step(&mut self) {
        self.crash_or_restart();
        if self.snapshot_every_ms > 0 && self.now_ms.is_multiple_of(self.snapshot_every_ms) {
            let me = NODES[self.rng.random_range(0..NODES.len())];
            if !self.is_down(me) {
                let now_ms = self.clock_ms(me);
                self.nodes
                    .get_mut(&me)
                    .unwrap()
                    .replica
                    .request_snapshot(now_ms);
                self.commit(me);
            }
        }
        let due: Vec<usize> = (0..self.commands.len())
            .filter(|&index| {
                let client = &self.commands[index];
                client.send_ms == self.now_ms
                    && !self.nodes[&client.to].replies.contains_key(&(index as u64))
            })
            .collect();
        for index in due {
            let client = &mut self.commands[index];
            // A client sends again to the next replica; so does one whose replica is down.
            let mut to = client.to;
            if client.sends > 0 || self.down.is_some_and(|(down, _)| down == to) {
                to = next(to);
            }
            if self.down.is_some_and(|(down, _)| down == to) {
                to = next(to);
            }
            client.to = to;
            client.send_ms = self.now_ms + CLIENT_RETRY_MS;
            client.sends += 1;
            let request = Request {
                client: ClientId(index as u64),
                seq: RequestSeq(1),
                payload: client.command.clone(),
            };
            let now_ms = self.clock_ms(to);
            let node = self.nodes.get_mut(&to).unwrap();
            match node.replica.handle_request(now_ms, request) {
                // A replica rejoining after a lost disk takes no request: the client sends
                // again later, to the next replica.
                Ok(()) | Err(RequestError::Rejoining) => {}
                Err(e) => panic!("{to:?} refused a request: {e}"),
            }
            self.commit(to);
        }
        let (due, later): (Vec<_>, Vec<_>) = std::mem::take(&mut self.in_flight)
            .into_iter()
            .partition(|(at, _, _)| *at <= self.now_ms);
        self.in_flight = later;
        for (_, from, envelope) in due {
            if self.is_down(envelope.to) {
                continue;
            }
            let now_ms = self.clock_ms(envelope.to);
            let node = self.nodes.get_mut(&envelope.to).unwrap();
            node.replica
                .handle_message(now_ms, from, envelope.group, envelope.message);
            self.commit(envelope.to);
        }
        for me in NODES {
            if self.is_down(me) {
                continue;
            }
            let now_ms = self.clock_ms(me);
            self.nodes.get_mut(&me).unwrap().replica.tick(now_ms);
            self.commit(me);
            self.step_workers(me);
        }
    }

    /// `me`'s clock.
    fn clock_ms(&self, me: NodeId) -> u64 {
        self.now_ms + self.clock_ahead_ms.get(&me).copied().unwrap_or(0)
    }

    fn is_down(&self, me: NodeId) -> bool {
        self.down.is_some_and(|(down, _)| down == me)
    }

    /// Crashes a replica now and then while faults last (its unflushed writes are lost, its
    /// service and plan are gone), and restarts it from its store when its time is up.
    fn crash_or_restart(&mut self) {
        match self.down {
            Some((me, until_ms)) if self.now_ms >= until_ms => {
                let Node {
                    mut store,
                    snapshot,
                    ..
                } = self.nodes.remove(&me).unwrap();
                store.crash();
                let now_ms = self.clock_ms(me);
                self.snapshots_restored += u64::from(snapshot.is_some());
                let config = self.configs[&me].clone();
                let node = Node::restore(config, self.make, store, snapshot, now_ms);
                self.nodes.insert(me, node);
                self.down = None;
            }
            Some(_) => {}
            None => {
                let faulty = self.now_ms < self.faults.until_ms;
                if faulty && self.rng.random_bool(self.faults.crash) {
                    let me = NODES[self.rng.random_range(0..NODES.len())];
                    let until_ms = self.now_ms + self.rng.random_range(1..=self.faults.down_ms_max);
                    self.down = Some((me, until_ms));
                    self.crashes += 1;
                }
            }
        }
    }

    /// Some random steps of `me`'s workers: polls, and executions finishing.
    fn step_workers(&mut self, me: NodeId) {
        let node = self.nodes.get_mut(&me).unwrap();
        let workers = node.replica.plan().workers();
        for _ in 0..8 {
            let w = self.rng.random_range(0..workers);
            let worker = WorkerId(w);
            match node.executing[usize::from(w)].take() {
                Some(command) if self.rng.random_bool(0.5) => {
                    if is_snapshot(&command.request) {
                        let cut = node.replica.take_cut(&command.request);
                        let cut = cut.expect("every worker handed the snapshot request on");
                        let first = self.cuts.entry(command.request.seq).or_insert(cut.clone());
                        if *first != cut && self.cut_differs.is_none() {
                            self.cut_differs = Some(format!("{me:?}'s cut {cut:?}, not {first:?}"));
                        }
                        // The snapshot "file" is durable at once: the streams may let go.
                        let snapshot = Snapshot {
                            cut,
                            executed: node.executed.clone(),
                            replies: node.replies.clone(),
                        };
                        let durable = DurableCut {
                            cut: snapshot.cut.clone(),
                            state: snapshot.state(),
                        };
                        node.replica.cut_durable(&durable);
                        node.snapshot = Some(snapshot);
                        self.snapshots_taken += 1;
                    } else {
                        let reply = node.service.execute_encoded(&command.request.payload);
                        node.replica.answered(&command, Bytes::from(reply.clone()));
                        node.replies.insert(command.request.client.0, reply);
                        node.executed.push(command.request.payload.clone());
                    }
                    node.replica.executed(worker);
                }
                Some(command) => node.executing[usize::from(w)] = Some(command),
                None => {
                    if let Step::Execute { command, .. } = node.replica.poll(worker) {
                        node.executing[usize::from(w)] = Some(command);
                    }
                }
            }
        }
    }

    /// Runs until every replica executed every command, or the time limit.
    fn run(&mut self) -> Result<u64, String> {
        self.run_watching(|_| {})
    }

    /// [`Sim::run`], calling `watch` after every step.
    fn run_watching(&mut self, mut watch: impl FnMut(&Self)) -> Result<u64, String> {
        while self.now_ms < RUN_MS_MAX {
            self.step();
            watch(self);
            let total = self.commands.len();
            // A replica down for good is not waited for; one that restarts is.
            let restarting = self.down.is_some_and(|(_, until_ms)| until_ms != u64::MAX);
            if !restarting && self.live().all(|(_, n)| n.replies.len() == total) {
                return Ok(self.now_ms);
            }
            self.now_ms += 1;
        }
        let executed: Vec<usize> = self.nodes.values().map(|n| n.replies.len()).collect();
        Err(format!(
            "stalled: {executed:?} of {} executed",
            self.commands.len()
        ))
    }

    /// The replicas that are up.
    fn live(&self) -> impl Iterator<Item = (&NodeId, &Node<S>)> {
        self.nodes.iter().filter(|(me, _)| !self.is_down(**me))
    }

    /// Runs until every replica executed every command; then `me` must have found no gap,
    /// the replicas must agree, and each must have executed every one of the `commands`
    /// exactly once.
    fn run_exactly_once(&mut self, me: NodeId, commands: usize) -> Result<(), String> {
        self.run()?;
        if let Some(group) = self.nodes[&me].replica.behind() {
            return Err(format!("{me:?} found a gap in {group:?}"));
        }
        self.agreement()?;
        for (id, node) in &self.nodes {
            if node.executed.len() != commands {
                let executed = node.executed.len();
                return Err(format!("{id:?} executed {executed} of {commands}"));
            }
        }
        Ok(())
    }

    /// Whether the live replicas' states have equal digests.
    fn digests_agree(&self) -> Result<(), String> {
        let digests: BTreeMap<NodeId, Digest> = (self.live())
            .map(|(me, node)| (*me, node.service.digest()))
            .collect();
        let first = digests.values().next().expect("a live replica");
        if digests.values().all(|digest| digest == first) {
            Ok(())
        } else {
            Err(format!("state digests {digests:?}"))
        }
    }

    /// Whether the live replicas agree on their state, on every reply and on every cut.
    fn agreement(&self) -> Result<(), String> {
        if let Some(differs) = &self.cut_differs {
            return Err(differs.clone());
        }
        self.digests_agree()?;
        let (_, first) = self.live().next().expect("a live replica");
        for (me, node) in self.live() {
            if node.replies != first.replies {
                return Err(format!("{me:?}'s replies {:?}", node.replies));
            }
        }
        Ok(())
    }

    fn check_agreement(&self) {
        if let Err(e) = self.agreement() {
            panic!("replicas disagree: {e}");
        }
    }

    /// New clients send `commands`; runs until every replica executed them, checks that the
    /// replicas agree, and gives the commands' replies.
    fn round(&mut self, commands: &[S::Command]) -> Vec<S::Reply> {
        let first = self.commands.len() as u64;
        let encoded: Vec<Bytes> = (commands.iter())
            .map(|command| Bytes::from(command.encode_to_vec()))
            .collect();
        self.send(&encoded, SEND_MS_MAX);
        self.run().unwrap_or_else(|e| panic!("{e}"));
        self.check_agreement();
        let (_, node) = self.live().next().expect("a live replica");
        (first..self.commands.len() as u64)
            .map(|client| S::Reply::decode(&node.replies[&client]).expect("a reply decodes"))
            .collect()
    }
}

fn random_commands(rng: &mut SmallRng, count: usize) -> Vec<KvCommand> {
    (0..count)
        .map(|_| kv_command(rng.random(), rng.random_range(0..6), rng.random()))
        .collect()
}

fn random_runs_agree(configure: fn(&mut Config)) {
    for seed in 0..seeds(20) {
        let mut rng = SmallRng::seed_from_u64(seed);
        let commands = random_commands(&mut rng, 60);
        let mut sim = Sim::new(seed, &commands, configure);
        sim.run().unwrap_or_else(|e| panic!("seed {seed}: {e}"));
        sim.check_agreement();
    }
}

#[test]
fn every_replica_executes_random_commands_with_the_same_replies_and_state() {
    random_runs_agree(|_| {});
}

#[test]
fn replicas_agree_under_loss_duplication_and_crashes() {
    let mut crashes = 0;
    for seed in 0..seeds(20) {
        let mut rng = SmallRng::seed_from_u64(seed);
        let commands = random_commands(&mut rng, 60);
        let mut sim = Sim::new(seed, &commands, |_| {});
        sim.faults = Faults {
            until_ms: 1_500,
            loss: 0.05,
            duplication: 0.03,
            crash: 0.004,
            down_ms_max: 600,
        };
        sim.run().unwrap_or_else(|e| panic!("seed {seed}: {e}"));
        sim.check_agreement();
        crashes += sim.crashes;
    }
    assert!(
        crashes >= 20,
        "{crashes} crashes: the faults barely happened"
    );
}

/// Crashes and restarts with snapshots taken every `snapshot_every_ms`; returns how many
/// replicas restarted from a snapshot, and whether every seed agreed.
fn crashes_with_snapshots(configure: fn(&mut Config), seeds: u64) -> (u64, bool) {
    let (mut restored, mut taken, mut agreed) = (0, 0, true);
    for seed in 0..seeds {
        let mut rng = SmallRng::seed_from_u64(seed);
        let commands = random_commands(&mut rng, 60);
        let mut sim = Sim::new(seed, &commands, configure);
        sim.snapshot_every_ms = 40;
        sim.faults = Faults {
            until_ms: 1_500,
            loss: 0.02,
            duplication: 0.02,
            crash: 0.004,
            down_ms_max: 400,
        };
        let outcome = sim.run().and_then(|_| sim.agreement());
        agreed &= outcome.is_ok();
        restored += sim.snapshots_restored;
        taken += sim.snapshots_taken;
        // The cuts (equal on every replica, checked as they are taken) stand past the start
        // of some log: snapshots were taken while the groups were busy.
        let busy = |cut: &Cut| cut.positions.values().any(|p| p.instance.0 > 0);
        assert!(
            sim.cuts.values().any(busy),
            "seed {seed}: no cut of a busy log"
        );
    }
    assert!(
        taken >= seeds,
        "{taken} snapshots taken: the test takes none"
    );
    (restored, agreed)
}

#[test]
fn replicas_restarted_from_snapshots_and_their_logs_agree_in_every_replicated_mode() {
    for (mode, configure) in [
        ("psmr", (|_| {}) as fn(&mut Config)),
        ("sp-smr", |c| c.mode = Mode::SpSmr),
        ("smr", |c| c.mode = Mode::Smr),
    ] {
        let (restored, agreed) = crashes_with_snapshots(configure, seeds(8));
        assert!(
            agreed,
            "{mode}: replicas disagree after restarts from snapshots"
        );
        assert!(restored >= 4, "{mode}: {restored} restarts from a snapshot");
    }
}

#[test]
fn an_idle_cluster_takes_the_same_cuts_on_every_replica() {
    let mut sim = Sim::new(3, &[], |_| {});
    sim.snapshot_every_ms = 50;
    while sim.now_ms < 600 {
        sim.step();
        sim.now_ms += 1;
    }
    assert!(
        sim.snapshots_taken >= 3 * 5,
        "{} snapshots",
        sim.snapshots_taken
    );
    assert!(sim.cuts.len() >= 5, "{} snapshot requests", sim.cuts.len());
    assert_eq!(sim.cut_differs, None);
}

#[test]
fn a_cut_past_a_groups_position_loses_commands_and_is_caught() {
    let (restored, agreed) = crashes_with_snapshots(|c| c.bugs.cut.past_position = true, seeds(8));
    assert!(restored >= 4, "{restored} restarts from a snapshot");
    assert!(!agreed, "a cut past its position went unnoticed");
}

/// Periodic cuts and group snapshots small enough that a run of a few hundred commands takes
/// many of each.
fn small_cuts(config: &mut Config) {
    config.cut_every_bytes = 3_000;
    config.cut_every_instances = 400;
    config.group_snapshot_log_bytes_min = 600;
    // Each command has a client of its own, so the groups' client tables (in their snapshots)
    // grow with the run, and so does the state the streams carry with their cut (here every
    // command executed, the test's stand-in for the service's state): snapshot at the
    // threshold, whatever the last one's size.
    config.paxos.snapshot_ratio_percent = 0;
}

/// The most batches any live replica's group holds in its log (from its log start to what it
/// executed) or retains in its stream.
fn held_batches<S: Service>(sim: &Sim<S>) -> (u64, usize) {
    let sizes = sim.live().flat_map(|(_, n)| n.replica.groups().sizes());
    sizes.fold((0, 0), |(log, retained), size| {
        let held = size.executed_below.0 - size.log_start.0;
        (log.max(held), retained.max(size.retained_batches))
    })
}

#[test]
fn periodic_cuts_keep_every_groups_log_and_stream_bounded_in_a_long_run() {
    let mut rng = SmallRng::seed_from_u64(21);
    let commands = random_commands(&mut rng, 800);
    let mut sim = Sim::new(21, &[], small_cuts);
    sim.send(&encoded(&commands), 3_000);
    let (mut log_max, mut retained_max) = (0, 0);
    sim.run_watching(|sim| {
        let (log, retained) = held_batches(sim);
        log_max = log_max.max(log);
        retained_max = retained_max.max(retained);
    })
    .unwrap();
    sim.check_agreement();
    let sizes = sim.nodes[&NODES[0]].replica.groups().sizes();
    let delivered = sizes.iter().map(|s| s.executed_below.0).max().unwrap();
    let group_snapshots: u64 = sizes.iter().map(|s| s.snapshots_taken).sum();
    assert!(sim.snapshots_taken >= 3 * 5, "{} cuts", sim.snapshots_taken);
    assert!(group_snapshots >= 5, "{group_snapshots} group snapshots");
    assert!(
        log_max * 4 < delivered && (retained_max as u64) * 4 < delivered,
        "logs held up to {log_max} batches and streams {retained_max}, of {delivered}"
    );
    assert!(sim.live().all(|(_, n)| n.replica.behind().is_none()));
}

/// Restarts replica 1 in the middle of a run with periodic cuts (its unflushed writes lost),
/// from its last cut and its truncated logs, then retries there a command its cut covers:
/// the replica must answer it from the cut's client table, and every replica must end having
/// executed every command exactly once, with equal states and replies.
fn restart_from_a_cut_and_retry(seed: u64, configure: fn(&mut Config)) -> Result<(), String> {
    let mut rng = SmallRng::seed_from_u64(seed);
    let commands = random_commands(&mut rng, 400);
    let configure = |c: &mut Config| {
        small_cuts(c);
        configure(c);
    };
    let mut sim = Sim::with_service(seed, &[], configure, kv);
    sim.send(&encoded(&commands), 2_000);
    while sim.now_ms < 1_000 {
        sim.step();
        sim.now_ms += 1;
    }
    let me = NODES[0];
    let truncated = sim.nodes[&me].replica.groups().sizes();
    assert!(
        truncated.iter().any(|s| s.log_start.0 > 0),
        "seed {seed}: no log truncated before the restart: {truncated:?}"
    );
    let Node {
        mut store,
        snapshot,
        ..
    } = sim.nodes.remove(&me).unwrap();
    store.crash();
    let snapshot = snapshot.expect("a cut taken by then");
    let (client, reply) = (snapshot.replies.iter().next())
        .map(|(client, reply)| (*client, reply.clone()))
        .expect("a command before the cut");
    let config = sim.configs[&me].clone();
    let node = Node::restore(config, sim.make, store, Some(snapshot), sim.clock_ms(me));
    sim.nodes.insert(me, node);
    let retry = Request {
        client: ClientId(client),
        seq: RequestSeq(1),
        payload: sim.commands[client as usize].command.clone(),
    };
    let node = sim.nodes.get_mut(&me).unwrap();
    match node.replica.answer_of(&retry) {
        Some(answer) if answer[..] == reply[..] => {}
        other => return Err(format!("the retry answered {other:?}, not {reply:?}")),
    }
    node.replica.handle_request(sim.now_ms, retry).unwrap();
    sim.run_exactly_once(me, commands.len())
}

#[test]
fn a_replica_restarted_from_a_cut_answers_a_retry_from_its_client_table_and_runs_it_once() {
    for seed in 0..seeds(4) {
        restart_from_a_cut_and_retry(seed, |_| {}).unwrap_or_else(|e| panic!("seed {seed}: {e}"));
    }
}

#[test]
fn streams_released_past_their_cut_are_caught() {
    let caught = (0..seeds(4))
        .filter(|&seed| {
            restart_from_a_cut_and_retry(seed, |c| c.bugs.cut.release_past_cut = true).is_err()
        })
        .count();
    assert!(caught > 0, "releasing past the cut went unnoticed");
}

#[test]
fn a_cut_without_its_client_tables_is_caught() {
    let outcome = restart_from_a_cut_and_retry(0, |c| c.bugs.cut.drop_client_tables = true);
    let error = outcome.expect_err("a cut without client tables went unnoticed");
    assert!(error.starts_with("the retry answered None"), "{error}");
}

/// How a catch-up run ends.
#[derive(Clone, Copy, PartialEq, Eq)]
enum CatchUpEnd {
    /// The partitioned replica installs the cut as soon as it can.
    Install,
    /// It crashes once it waits to install a cut (its unflushed writes lost) and restarts
    /// from its own last snapshot and store.
    CrashMidInstall,
}

/// Partitions replica 1 early in a run with periodic cuts while the others order hundreds of
/// commands (so they truncate their groups several times past what replica 1 has), then heals
/// it: it must catch up through a peer's group snapshot and the cut it carries, and every
/// replica must end having executed every command exactly once, with equal states and replies.
/// Returns the cuts installed.
fn catch_up_after_a_partition(
    seed: u64,
    configure: fn(&mut Config),
    end: CatchUpEnd,
) -> Result<u64, String> {
    let mut rng = SmallRng::seed_from_u64(seed);
    let commands = random_commands(&mut rng, 500);
    let configure = |c: &mut Config| {
        small_cuts(c);
        configure(c);
    };
    let mut sim = Sim::with_service(seed, &[], configure, kv);
    sim.send(&encoded(&commands), 1_500);
    let me = NODES[0];
    let mut cut_off_at = Vec::new();
    while sim.now_ms < 1_600 {
        if sim.now_ms == 100 {
            sim.partitioned = Some(me);
            cut_off_at = sim.nodes[&me].replica.groups().sizes();
        }
        sim.step();
        sim.now_ms += 1;
    }
    // The others truncated their logs past where replica 1 stood, several times over.
    let peer = sim.nodes[&NODES[1]].replica.groups().sizes();
    let passed = (peer.iter().zip(&cut_off_at))
        .filter(|(p, mine)| p.log_start > mine.executed_below)
        .count();
    let snapshots: u64 = peer.iter().map(|p| p.snapshots_taken).sum();
    if passed == 0 || snapshots < 6 {
        return Err(format!(
            "the peers did not truncate past replica 1: {peer:?} against {cut_off_at:?}"
        ));
    }
    sim.partitioned = None;
    if end == CatchUpEnd::CrashMidInstall {
        sim.installs = false;
        while sim.nodes[&me].replica.installing().is_none() {
            if sim.now_ms > 3_000 {
                return Err("replica 1 never waited for a cut".to_owned());
            }
            sim.step();
            sim.now_ms += 1;
        }
        let Node {
            mut store,
            snapshot,
            ..
        } = sim.nodes.remove(&me).unwrap();
        store.crash();
        let config = sim.configs[&me].clone();
        let node = Node::restore(config, sim.make, store, snapshot, sim.clock_ms(me));
        sim.nodes.insert(me, node);
        sim.installs = true;
    }
    sim.run_exactly_once(me, commands.len())?;
    Ok(sim.cuts_installed)
}

#[test]
fn a_replica_partitioned_while_the_others_truncate_catches_up_from_a_peers_cut() {
    for seed in 0..seeds(2) {
        let installed = catch_up_after_a_partition(seed, |_| {}, CatchUpEnd::Install)
            .unwrap_or_else(|e| panic!("seed {seed}: {e}"));
        assert!(installed >= 1, "seed {seed}: no cut installed");
    }
}

#[test]
fn a_replica_that_crashes_waiting_to_install_a_cut_restarts_and_installs_it() {
    for seed in 0..seeds(2) {
        catch_up_after_a_partition(seed, |_| {}, CatchUpEnd::CrashMidInstall)
            .unwrap_or_else(|e| panic!("seed {seed}: {e}"));
    }
}

/// How a rejoin after a lost disk runs.
#[derive(Clone, Copy, PartialEq, Eq)]
enum RejoinRun {
    /// The disk is lost early in a run without cuts: the rejoined replica catches up from the
    /// peers' logs.
    FromTheLogs,
    /// The disk is lost once the peers truncated their groups (small cuts), while they go on
    /// truncating: the rejoined replica installs a peer's cut.
    PastTheirTruncation,
    /// As `PastTheirTruncation`, and the replica crashes in the middle of its rejoin, once a
    /// group's store holds a snapshot it installed (its unflushed writes lost): it restarts
    /// from what its groups' stores hold, and rejoins again (the node writes its `rejoined`
    /// marker only once a rejoin completed, so every start until then is a rejoin).
    CrashMidRejoin,
}

impl<S: Service> Sim<S> {
    /// Replica `me` loses its disk: its process ends (with its messages still on the way,
    /// its links are gone), and it starts again from empty stores, with no snapshot, as a
    /// rejoin in `attempt`.
    fn lose_the_disk(&mut self, me: NodeId, attempt: u64) {
        self.nodes.remove(&me);
        self.in_flight
            .retain(|(_, from, e)| *from != me && e.to != me);
        self.restart_rejoining(me, MemGroupStore::default(), attempt);
    }

    /// Starts `me` from `store` (no snapshot), rejoining in `attempt`.
    fn restart_rejoining(&mut self, me: NodeId, store: MemGroupStore, attempt: u64) {
        let now_ms = self.clock_ms(me);
        let config = self.configs[&me].clone();
        let mut node = Node::restore(config, self.make, store, None, now_ms);
        node.replica.start_rejoin(now_ms, Epoch(attempt));
        assert!(node.replica.rejoining());
        self.nodes.insert(me, node);
        self.commit(me);
    }
}

/// Replica 1 (the first leader of `g_0`) loses its disk in the
/// middle of a run and rejoins every group (see [`RejoinRun`]). While it rejoins it must
/// execute nothing and hand nothing to its workers; it must then end with the others' digest
/// and replies, every replica having executed every command exactly once. Returns the cuts
/// the rejoined replica installed.
fn rejoin_after_a_lost_disk(seed: u64, run: RejoinRun) -> Result<u64, String> {
    let mut rng = SmallRng::seed_from_u64(seed);
    let truncating = run != RejoinRun::FromTheLogs;
    let commands = random_commands(&mut rng, if truncating { 500 } else { 150 });
    let configure = move |c: &mut Config| {
        if truncating {
            small_cuts(c);
        }
    };
    let mut sim = Sim::with_service(seed, &[], configure, kv);
    sim.send(&encoded(&commands), 1_500);
    let me = NODES[0];
    let lost_at_ms = if truncating { 700 } else { 300 };
    while sim.now_ms < lost_at_ms {
        sim.step();
        sim.now_ms += 1;
    }
    if truncating {
        let peer = sim.nodes[&NODES[1]].replica.groups().sizes();
        if peer.iter().all(|s| s.log_start.0 == 0) {
            return Err(format!("no peer truncated before the loss: {peer:?}"));
        }
    }
    sim.lose_the_disk(me, 1_000);
    let mut crashed = run != RejoinRun::CrashMidRejoin;
    let mut rejoined_at_ms = None;
    while sim.now_ms < RUN_MS_MAX {
        sim.step();
        let node = &sim.nodes[&me];
        if node.replica.rejoining() {
            if !node.executed.is_empty() || !node.replies.is_empty() {
                return Err(format!("{me:?} executed commands while rejoining"));
            }
            let plan = node.replica.plan();
            let backlog: usize = (0..plan.workers()).map(|w| plan.backlog(WorkerId(w))).sum();
            if backlog > 0 || node.replica.installing().is_some() {
                return Err(format!("{me:?} handed commands on while rejoining"));
            }
            let installed = (node.replica.groups().sizes().iter()).any(|s| {
                node.store
                    .group(s.group)
                    .is_some_and(|g| g.durable().snapshot.is_some())
            });
            if !crashed && installed {
                let Node { mut store, .. } = sim.nodes.remove(&me).unwrap();
                store.crash();
                sim.restart_rejoining(me, store, 1_001);
                crashed = true;
            }
        } else if rejoined_at_ms.is_none() {
            rejoined_at_ms = Some(sim.now_ms);
            if !crashed {
                return Err("the rejoin completed before a group installed a snapshot".into());
            }
        }
        sim.now_ms += 1;
        if rejoined_at_ms.is_some() {
            break;
        }
    }
    if rejoined_at_ms.is_none() {
        return Err(format!("{me:?} never completed its rejoin"));
    }
    sim.run_exactly_once(me, commands.len())?;
    Ok(sim.nodes[&me].replica.cuts_installed())
}

#[test]
fn a_replica_that_lost_its_disk_rejoins_every_group_and_ends_with_the_others_state() {
    for seed in 0..seeds(3) {
        rejoin_after_a_lost_disk(seed, RejoinRun::FromTheLogs)
            .unwrap_or_else(|e| panic!("seed {seed}: {e}"));
    }
}

#[test]
fn a_replica_that_lost_its_disk_while_the_others_truncate_installs_their_cut() {
    for seed in 0..seeds(2) {
        let installed = rejoin_after_a_lost_disk(seed, RejoinRun::PastTheirTruncation)
            .unwrap_or_else(|e| panic!("seed {seed}: {e}"));
        assert!(installed >= 1, "seed {seed}: no cut installed");
    }
}

#[test]
fn a_replica_that_crashes_in_the_middle_of_its_rejoin_rejoins_again() {
    for seed in 0..seeds(2) {
        rejoin_after_a_lost_disk(seed, RejoinRun::CrashMidRejoin)
            .unwrap_or_else(|e| panic!("seed {seed}: {e}"));
    }
}

#[test]
fn a_cut_installed_without_its_service_state_is_caught() {
    let bug = |c: &mut Config| c.bugs.cut.install_without_state = true;
    let caught = (0..seeds(2))
        .any(|seed| catch_up_after_a_partition(seed, bug, CatchUpEnd::Install).is_err());
    assert!(caught, "a cut installed without its state went unnoticed");
}

#[test]
fn when_g_alls_leader_dies_the_next_replica_leads_it_and_commands_keep_flowing() {
    let mut rng = SmallRng::seed_from_u64(5);
    let commands = random_commands(&mut rng, 60);
    let mut sim = Sim::new(5, &commands, |_| {});
    // g_all is group 2 of 3: its replicas in the order [3, 1, 2], so replica 3 leads view 0.
    let leads_g_all = |sim: &Sim<KvService>, me: NodeId| {
        let log = sim.nodes[&me].replica.groups().replica(Group::All).unwrap();
        log.is_leader()
    };
    while sim.now_ms < 100 {
        sim.step();
        sim.now_ms += 1;
    }
    assert!(leads_g_all(&sim, NODES[2]));
    sim.down = Some((NODES[2], u64::MAX));
    sim.run().unwrap();
    sim.check_agreement();
    assert!(
        leads_g_all(&sim, NODES[0]),
        "view 1 of g_all is replica 1's"
    );
    assert!(!leads_g_all(&sim, NODES[1]));
}

#[test]
fn sp_smr_replicas_agree() {
    random_runs_agree(|c| c.mode = Mode::SpSmr);
}

#[test]
fn smr_replicas_agree_and_run_one_stream() {
    random_runs_agree(|c| c.mode = Mode::Smr);
    let sim = Sim::new(0, &[], |c| c.mode = Mode::Smr);
    let replica = &sim.nodes[&NODES[0]].replica;
    assert_eq!(replica.plan().workers(), 1);
    assert!(replica.groups().replica(Group::All).is_some());
    assert!(replica
        .groups()
        .replica(Group::Worker(WorkerId(0)))
        .is_none());
}

#[test]
fn without_replication_every_command_runs_as_in_arrival_order() {
    let mut rng = SmallRng::seed_from_u64(11);
    let commands = random_commands(&mut rng, 60);
    let mut config = Config::new(NODES.to_vec(), NODES[0], WORKERS);
    config.mode = Mode::NoRep;
    let mut replica = Replica::new(config, kv(), 0);
    let mut sequential = kv();
    let mut expected = BTreeMap::new();
    for (i, payload) in encoded(&commands).into_iter().enumerate() {
        expected.insert(i as u64, sequential.execute_encoded(&payload));
        let request = Request {
            client: ClientId(i as u64),
            seq: RequestSeq(1),
            payload,
        };
        replica.handle_request(0, request).unwrap();
    }
    assert!(replica.take_ready().is_empty(), "nothing to replicate");
    let mut service = kv();
    let mut replies = BTreeMap::new();
    while !replica.plan().is_drained() {
        for w in (0..WORKERS).rev() {
            if let Step::Execute { command, .. } = replica.poll(WorkerId(w)) {
                let reply = service.execute_encoded(&command.request.payload);
                replies.insert(command.request.client.0, reply);
                replica.executed(WorkerId(w));
            }
        }
    }
    assert_eq!(replies, expected);
    assert_eq!(service.digest(), sequential.digest());
}

#[test]
fn the_groups_first_leaders_are_spread_over_the_replicas_and_an_idle_cluster_skips_nothing() {
    let mut sim = Sim::new(1, &[], |_| {});
    for _ in 0..200 {
        sim.step();
        sim.now_ms += 1;
    }
    for (index, group) in Group::all(WORKERS).enumerate() {
        let leaders: Vec<NodeId> = NODES
            .iter()
            .filter(|me| {
                sim.nodes[me]
                    .replica
                    .groups()
                    .replica(group)
                    .unwrap()
                    .is_leader()
            })
            .copied()
            .collect();
        assert_eq!(leaders, [NODES[index % NODES.len()]], "{group:?}");
    }
    for node in sim.nodes.values() {
        assert_eq!(
            node.replica.groups().stats().skips_proposed,
            0,
            "no merge waited"
        );
    }
}

/// Only `g_all` commands (inserts, deletes, range reads): both workers' streams stay idle.
fn all_only() -> Vec<KvCommand> {
    (0..20u8)
        .map(|i| kv_command([0, 2, 3][usize::from(i % 3)], i % 4, i))
        .collect()
}

/// Only worker 0's commands (reads and updates of keys in `g_0`): `g_1` and `g_all` stay idle.
fn worker_0_only() -> Vec<KvCommand> {
    let in_g_0 = |k: &u8| {
        let read = kv_command(7, *k, 0);
        kv().group(&read, WORKERS) == Group::Worker(WorkerId(0))
    };
    let keys: Vec<u8> = (0..).filter(in_g_0).take(3).collect();
    (0..20u8)
        .map(|i| kv_command(4 + i % 4, keys[usize::from(i % 3)], i))
        .collect()
}

#[test]
fn idle_streams_do_not_stall_the_merge() {
    for commands in [all_only(), worker_0_only()] {
        let mut sim = Sim::new(3, &commands, |_| {});
        let done_ms = sim.run().unwrap();
        assert!(
            done_ms < SEND_MS_MAX + 200,
            "done at {done_ms} ms, long after the last command"
        );
        sim.check_agreement();
        let skips: u64 = sim
            .nodes
            .values()
            .map(|n| n.replica.groups().stats().skips_proposed)
            .sum();
        assert!(skips > 0, "idle leaders proposed skips");
    }
}

/// Two replicas' clocks ahead of the third's by 1 s and 2 s, more than a client waits before
/// it retries: a batch stamped by a leader ahead must not wait for the other groups' leaders'
/// clocks to catch up (their skips are stamped past it at once, see `logless_psmr::merge`).
#[test]
fn a_skew_between_the_groups_leaders_does_not_stall_the_merge() {
    for commands in [
        all_only(),
        worker_0_only(),
        random_commands(&mut SmallRng::seed_from_u64(5), 60),
    ] {
        let mut sim = Sim::new(5, &commands, |_| {});
        sim.clock_ahead_ms = BTreeMap::from([(NODES[1], 1_000), (NODES[2], 2_000)]);
        let done_ms = sim.run().unwrap();
        assert!(
            done_ms < SEND_MS_MAX + 200,
            "done at {done_ms} ms: the merge waited out the skew"
        );
        sim.check_agreement();
    }
}

#[test]
fn without_skips_an_idle_stream_stalls_the_merge() {
    for commands in [all_only(), worker_0_only()] {
        let mut sim = Sim::new(3, &commands, |config| config.bugs.no_skips = true);
        assert!(sim.run().is_err(), "nothing moved the idle streams on");
    }
}

/// Whether some seed's random run ends with replicas that disagree, under `configure`.
fn some_run_diverges(configure: fn(&mut Config)) -> bool {
    (0..10).any(|seed| {
        let mut rng = SmallRng::seed_from_u64(seed);
        let commands = random_commands(&mut rng, 60);
        let mut sim = Sim::new(seed, &commands, configure);
        sim.run().is_err() || sim.agreement().is_err()
    })
}

/// Whether the replicas' digests differ at the end of a burst of random commands (seed
/// `seed`) on the key-value service from `make`. The commands are sent at once, so that
/// commands of different groups often reach the replicas close enough together to run in
/// different orders on them.
fn burst_diverges(seed: u64, make: fn() -> KvService) -> bool {
    let mut rng = SmallRng::seed_from_u64(seed);
    let commands = encoded(&random_commands(&mut rng, 60));
    let mut sim = Sim::with_service(seed, &[], |_| {}, make);
    sim.send(&commands, SEND_BURST_MS);
    sim.run().unwrap_or_else(|e| panic!("seed {seed}: {e}"));
    sim.digests_agree().is_err()
}

#[test]
fn a_c_g_that_splits_dependent_commands_makes_the_replicas_digests_differ() {
    assert!(
        (0..10).any(|seed| burst_diverges(seed, kv_split)),
        "no run showed the split C-G in the digests"
    );
    assert!(
        (0..10).all(|seed| !burst_diverges(seed, kv)),
        "the same bursts with the correct C-G agree"
    );
}

#[test]
fn a_merge_by_arrival_makes_replicas_diverge() {
    assert!(some_run_diverges(|c| c.bugs.merge.by_arrival = true));
}

#[test]
fn synchronous_mode_without_the_barrier_makes_replicas_diverge() {
    assert!(some_run_diverges(|c| c.bugs.plan.no_barrier = true));
}

#[test]
fn netfs_creates_writes_reads_renames_and_unlinks_with_equal_digests_in_every_replicated_mode() {
    let at = |path: String| FsPath::new(path).unwrap();
    let time = |secs| Time { secs, nanos: 0 };
    let data = |i: usize| format!("file {i}").into_bytes();
    for mode in [Mode::Psmr, Mode::SpSmr, Mode::Smr] {
        let mut sim = Sim::with_service(9, &[], |c| c.mode = mode, NetFs::new);
        let files: Vec<FsPath> = (0..6).map(|i| at(format!("/f{i}"))).collect();
        let moved: Vec<FsPath> = (0..6).map(|i| at(format!("/moved{i}"))).collect();
        let creates: Vec<FsCommand> = (files.iter())
            .map(|path| FsCommand::Create {
                path: path.clone(),
                mode: FsMode(0o644),
                time: time(1),
            })
            .collect();
        let handles: Vec<Fh> = (sim.round(&creates).into_iter())
            .map(|reply| match reply {
                FsReply::Opened(fh) => fh,
                other => panic!("{mode}: create answered {other:?}"),
            })
            .collect();
        let open = || {
            files
                .iter()
                .cloned()
                .zip(handles.iter().copied())
                .enumerate()
        };
        let writes: Vec<FsCommand> = (open())
            .map(|(i, (path, fh))| FsCommand::Write {
                path,
                fh,
                offset: 0,
                data: data(i),
                time: time(2),
            })
            .collect();
        for (i, reply) in sim.round(&writes).into_iter().enumerate() {
            assert_eq!(reply, FsReply::Written(data(i).len() as u64), "{mode}");
        }
        let reads: Vec<FsCommand> = (open())
            .map(|(_, (path, fh))| FsCommand::Read {
                path,
                fh,
                offset: 0,
                size: 64,
            })
            .collect();
        for (i, reply) in sim.round(&reads).into_iter().enumerate() {
            assert_eq!(reply, FsReply::Data(data(i)), "{mode}");
        }
        let releases = handles.iter().map(|&fh| FsCommand::Release { fh });
        let renames = (files.iter().zip(&moved)).map(|(from, to)| FsCommand::Rename {
            from: from.clone(),
            to: to.clone(),
        });
        let releases_and_renames: Vec<FsCommand> = releases.chain(renames).collect();
        let replies = sim.round(&releases_and_renames);
        assert!(
            replies.iter().all(|r| *r == FsReply::Done),
            "{mode}: {replies:?}"
        );
        let lstats: Vec<FsCommand> = (moved.iter())
            .map(|path| FsCommand::Lstat { path: path.clone() })
            .collect();
        for (i, reply) in sim.round(&lstats).into_iter().enumerate() {
            let FsReply::Attr(attr) = reply else {
                panic!("{mode}: lstat answered {reply:?}");
            };
            assert_eq!(attr.size, data(i).len() as u64, "{mode}");
        }
        let unlinks: Vec<FsCommand> = (moved.iter())
            .map(|path| FsCommand::Unlink { path: path.clone() })
            .collect();
        let replies = sim.round(&unlinks);
        assert!(
            replies.iter().all(|r| *r == FsReply::Done),
            "{mode}: {replies:?}"
        );
        let listed = sim.round(&[FsCommand::Readdir {
            path: at("/".into()),
        }]);
        assert_eq!(listed, [FsReply::Entries(Vec::new())], "{mode}");
    }
}

#[test]
fn a_command_that_does_not_decode_runs_alone_and_gets_the_service_s_error() {
    let garbage = Bytes::from_static(&[0xff, 1, 2]);
    let malformed = |reply: &[u8]| matches!(KvReply::decode(reply), Ok(KvReply::Malformed(_)));
    // Replicated: ordered in g_all like any command C-G cannot place, answered alike everywhere.
    let mut sim = Sim::with_service(4, std::slice::from_ref(&garbage), |_| {}, kv);
    sim.run().unwrap();
    sim.check_agreement();
    for node in sim.nodes.values() {
        assert!(malformed(&node.replies[&0]));
        for group in Group::all(WORKERS) {
            let log = node.replica.groups().replica(group).unwrap();
            let ordered = log.client_table().get(&ClientId(0)).is_some();
            assert_eq!(ordered, group == Group::All, "{group:?}");
        }
    }
    // Without replication: synchronous mode, worker 0 executes once worker 1 has arrived.
    let mut config = Config::new(NODES.to_vec(), NODES[0], WORKERS);
    config.mode = Mode::NoRep;
    let mut replica = Replica::new(config, kv(), 0);
    let request = Request {
        client: ClientId(0),
        seq: RequestSeq(1),
        payload: garbage,
    };
    replica.handle_request(0, request).unwrap();
    assert_eq!(replica.poll(WorkerId(0)), Step::Wait);
    assert_eq!(replica.poll(WorkerId(1)), Step::Wait);
    let Step::Execute { mode, command } = replica.poll(WorkerId(0)) else {
        panic!("worker 0 executes once every worker arrived");
    };
    assert_eq!(
        (mode, command.group),
        (ExecutionMode::Synchronous, Group::All)
    );
    assert!(malformed(&kv().execute_encoded(&command.request.payload)));
}
