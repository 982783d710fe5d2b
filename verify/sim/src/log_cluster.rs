//! The log engine's cluster, simulated: replicas of [`logless_multipaxos`] running the register
//! map, each committing through its real durable log ([`DurableLog`]) on a simulated directory
//! ([`SimDir`]), so a crash is a kill -9 or a power failure whose image the storage layer's own
//! crash model builds.
//!
//! One seed drives everything: a network that loses, delays, duplicates and reorders messages;
//! a replica cut off for a while; replicas killed (often the leader), sometimes in the middle
//! of a step, restarting from what their directory kept (FullSS), or, under EpochSS, process
//! crashes that lose everything but the epoch, with messages sometimes delayed long enough to
//! arrive after their sender restarted (seed 002's stray messages); clients that retry at any replica
//! with the same request number. The clients run the counter workload of [`atomicity`] —
//! INCRBY, GET, transfers between counters as one MULTI/EXEC, MSET and MGET of every counter —
//! and their history is checked as one whole-state model, which sees a transaction that another
//! client observed half done. After the faults stop and the network heals, every replica must
//! hold the same map and every client must have its answer.
//!
//! [`atomicity`]: crate::atomicity
use std::collections::BTreeMap;

use bytes::Bytes;
use logless_multipaxos::config::{Config, InjectedBugs, Recovery};
use logless_multipaxos::ids::{ClientId, Epoch, NodeId, RequestSeq};
use logless_multipaxos::kv::{Command, Operation, RegisterMachine, Response};
use logless_multipaxos::message::{ClientReply, Envelope, Request};
use logless_multipaxos::persist::Durable;
use logless_multipaxos::replica::{Replica, Stats, Status};
use logless_multipaxos::testing::{durable_before_send, MemStore};
use logless_node::durable_log::DurableLog;
use logless_storage::{Durability, SegmentLogOptions, SimDir};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use crate::atomicity::{self, CounterOp, CounterResult, Event, KEYS};

/// How often a live replica's clock ticks.
const TICK_MS: u64 = 5;
/// How long a client waits for an answer before it sends the request again elsewhere.
const CLIENT_RETRY_MS: u64 = 400;
/// How many clients run the workload.
const CLIENTS: u64 = 3;
/// The states the checker may visit for one history.
const CHECK_STATES_MAX: usize = 2_000_000;

/// One run's parameters.
#[derive(Clone, Debug)]
pub struct LogSimOptions {
    /// The seed.
    pub seed: u64,
    /// How many replicas (3 or 5).
    pub replicas: u16,
    /// How long faults happen and clients start operations.
    pub faulty_ms: u64,
    /// How long the healed cluster then has to finish.
    pub healed_ms: u64,
    /// How replicas recover: FullSS from their logs (kills are process crashes or power
    /// failures), or EpochSS from their peers (kills are process crashes).
    pub recovery: Recovery,
    /// Deliberate protocol bugs in every replica.
    pub bugs: InjectedBugs,
    /// A deliberate client bug: a transfer is sent as two requests (DECRBY, then INCRBY), so
    /// it is not atomic; the checker must see it.
    pub split_transfers: bool,
}

impl LogSimOptions {
    /// Defaults for `seed` with `replicas` replicas.
    pub fn new(seed: u64, replicas: u16) -> LogSimOptions {
        LogSimOptions {
            seed,
            replicas,
            faulty_ms: 2_000,
            healed_ms: 3_000,
            recovery: Recovery::FullSs,
            bugs: InjectedBugs::default(),
            split_transfers: false,
        }
    }
}

/// What a run did, when it passed.
#[derive(Clone, Debug, Default)]
pub struct LogSimReport {
    /// Operations the clients completed.
    pub operations: usize,
    /// Kills of the leader of the moment.
    pub leader_kills: u64,
    /// Kills of another replica.
    pub follower_kills: u64,
    /// Kills that were power failures (the rest were process crashes).
    pub power_failures: u64,
    /// Kills in the middle of a step, before its records were written.
    pub mid_step_kills: u64,
    /// Messages delivered after their sender restarted (EpochSS's stray messages).
    pub strays_delivered: u64,
    /// Replicas cut off from the others for a while.
    pub partitions: u64,
    /// The replicas' counters, summed over every life.
    pub stats: Stats,
}

struct Node {
    replica: Option<Replica<RegisterMachine>>,
    /// The durable log (FullSS).
    log: Option<DurableLog<SimDir>>,
    /// What the log holds durably, for the persist-before-send check.
    durable: Durable,
    /// Where the epoch is kept (EpochSS), which crashes keep.
    epochs: MemStore,
    /// When a crashed replica restarts, and from which directory (FullSS).
    restart: Option<(Option<SimDir>, u64)>,
}

/// An operation in progress: its requests (one, or two for a split transfer), the answers so
/// far, and where it stands.
struct InFlight {
    op: CounterOp,
    call_ms: u64,
    parts: Vec<Operation>,
    answers: Vec<Response>,
    seq: RequestSeq,
    sent_ms: u64,
}

struct Client {
    id: ClientId,
    next_seq: u64,
    current: Option<InFlight>,
    next_ms: u64,
}

struct Sim {
    options: LogSimOptions,
    rng: SmallRng,
    ids: Vec<NodeId>,
    nodes: BTreeMap<NodeId, Node>,
    /// Messages in flight: (delivery time, sender, its epoch, message).
    in_flight: Vec<(u64, NodeId, Epoch, Envelope)>,
    /// Client requests on their way: (delivery time, replica, request).
    requests: Vec<(u64, NodeId, Request)>,
    clients: Vec<Client>,
    history: Vec<Event>,
    /// A replica cut off from the others, and until when.
    isolated: Option<(NodeId, u64)>,
    /// A replica that crashes in the middle of its next step.
    crash_next: Option<NodeId>,
    past: Vec<Stats>,
    report: LogSimReport,
    now_ms: u64,
    faulty: bool,
    /// The first failed check.
    failure: Option<String>,
}

/// Small segments, so that truncations remove files and rolls happen often.
fn log_options() -> SegmentLogOptions {
    SegmentLogOptions {
        segment_bytes: 64 * 1024,
        record_bytes_max: 16 * 1024,
        snapshot_bytes_max: 1 << 20,
        ..SegmentLogOptions::new(Durability::Sync)
    }
}

fn key(k: usize) -> Bytes {
    Bytes::from(format!("counter:{k}"))
}

fn command(k: usize, command: Command) -> Operation {
    Operation::Command {
        key: key(k),
        command,
    }
}

/// The requests that carry `op` (a split transfer is two).
fn parts(op: &CounterOp, split_transfers: bool) -> Vec<Operation> {
    match *op {
        CounterOp::Incr { key, by } => vec![command(key, Command::IncrBy(by))],
        CounterOp::Get { key } => vec![command(key, Command::Get)],
        CounterOp::Transfer { from, to, amount } => {
            let debit = command(from, Command::IncrBy(-amount));
            let credit = command(to, Command::IncrBy(amount));
            if split_transfers {
                vec![debit, credit]
            } else {
                vec![Operation::Transaction(vec![debit, credit])]
            }
        }
        CounterOp::MSet { values } => vec![Operation::MSet(
            (0..KEYS)
                .map(|k| (key(k), Bytes::from(values[k].to_string())))
                .collect(),
        )],
        CounterOp::MGet => vec![Operation::MGet((0..KEYS).map(key).collect())],
    }
}

fn int(response: &Response) -> Result<i64, String> {
    match response {
        Response::Int(v) => Ok(*v),
        other => Err(format!("expected an integer, got {other:?}")),
    }
}

fn value(response: &Response) -> Result<Option<i64>, String> {
    match response {
        Response::Nil => Ok(None),
        Response::Bulk(b) => std::str::from_utf8(b)
            .ok()
            .and_then(|s| s.parse().ok())
            .map(Some)
            .ok_or_else(|| format!("not a counter: {b:?}")),
        other => Err(format!("expected a value, got {other:?}")),
    }
}

/// What the answers to `op`'s requests mean in the model's terms.
pub fn result(op: &CounterOp, answers: &[Response]) -> Result<CounterResult, String> {
    Ok(match (op, answers) {
        (CounterOp::Incr { .. }, [a]) => CounterResult::Int(int(a)?),
        (CounterOp::Get { .. }, [a]) => CounterResult::Value(value(a)?),
        (CounterOp::Transfer { .. }, [Response::Items(items)]) if items.len() == 2 => {
            CounterResult::Pair(int(&items[0])?, int(&items[1])?)
        }
        (CounterOp::Transfer { .. }, [debit, credit]) => {
            CounterResult::Pair(int(debit)?, int(credit)?)
        }
        (CounterOp::MSet { .. }, [Response::Ok]) => CounterResult::Ok,
        (CounterOp::MGet, [Response::Items(items)]) if items.len() == KEYS => {
            let mut values = [None; KEYS];
            for (v, item) in values.iter_mut().zip(items) {
                *v = value(item)?;
            }
            CounterResult::Values(values)
        }
        (op, answers) => return Err(format!("{op:?} answered {answers:?}")),
    })
}

/// Adds the counters of `s` to `total`.
pub fn add_stats(total: &mut Stats, s: &Stats) {
    total.view_changes_started += s.view_changes_started;
    total.views_led += s.views_led;
    total.batches_proposed += s.batches_proposed;
    total.noops_proposed += s.noops_proposed;
    total.requests_executed += s.requests_executed;
    total.duplicates_skipped += s.duplicates_skipped;
    total.snapshots_taken += s.snapshots_taken;
    total.snapshots_installed += s.snapshots_installed;
    total.snapshot_chunks_received += s.snapshot_chunks_received;
    total.catch_up_queries += s.catch_up_queries;
    total.conflicting_decisions += s.conflicting_decisions;
    total.recoveries += s.recoveries;
}

/// Runs one seed: faults, then a healed network; returns what happened, or the first check
/// that failed.
pub fn run(options: LogSimOptions) -> Result<LogSimReport, String> {
    let mut sim = Sim::new(options);
    while sim.now_ms < sim.options.faulty_ms {
        sim.step();
    }
    sim.faulty = false;
    sim.crash_next = None;
    while sim.now_ms < sim.options.faulty_ms + sim.options.healed_ms {
        sim.step();
    }
    sim.finish()
}

impl Sim {
    fn new(options: LogSimOptions) -> Sim {
        let ids: Vec<NodeId> = (1..=options.replicas).map(NodeId).collect();
        let mut sim = Sim {
            rng: SmallRng::seed_from_u64(options.seed),
            ids: ids.clone(),
            nodes: BTreeMap::new(),
            in_flight: Vec::new(),
            requests: Vec::new(),
            clients: (1..=CLIENTS)
                .map(|id| Client {
                    id: ClientId(id),
                    next_seq: 1,
                    current: None,
                    next_ms: 0,
                })
                .collect(),
            history: Vec::new(),
            isolated: None,
            crash_next: None,
            past: Vec::new(),
            report: LogSimReport::default(),
            now_ms: 0,
            faulty: true,
            failure: None,
            options,
        };
        for id in ids {
            sim.nodes.insert(
                id,
                Node {
                    replica: None,
                    log: None,
                    durable: Durable::default(),
                    epochs: MemStore::default(),
                    restart: None,
                },
            );
            sim.start(id, Some(SimDir::new()));
        }
        sim
    }

    fn epoch_ss(&self) -> bool {
        self.options.recovery == Recovery::Epoch
    }

    fn config(&self, node: NodeId) -> Config {
        let mut config = Config::new(self.ids.clone(), node);
        config.batch_requests_max = 4;
        config.batch_delay_ms = 2;
        config.window_instances = 3;
        config.snapshot_log_bytes_min = 300;
        config.catch_up_instances_max = 5;
        // Snapshots of a few hundred bytes travel in several pieces, under the faults.
        config.snapshot_chunk_bytes = 32;
        config.recovery = self.options.recovery;
        config.bugs = self.options.bugs;
        config
    }

    fn live(&self) -> Vec<NodeId> {
        self.ids
            .iter()
            .copied()
            .filter(|n| self.nodes[n].replica.is_some())
            .collect()
    }

    /// The live replicas that hold their state (under EpochSS, not recovering it).
    fn serving(&self) -> Vec<NodeId> {
        self.live()
            .into_iter()
            .filter(|n| self.nodes[n].replica.as_ref().unwrap().status() == Status::Serving)
            .collect()
    }

    fn fail(&mut self, why: String) {
        if self.failure.is_none() {
            self.failure = Some(format!("at {} ms: {why}", self.now_ms));
        }
    }

    /// Commits what `node` produced (or, if it crashes now, lets out only what leaked) and
    /// puts its messages on the network and its replies to the clients.
    fn collect(&mut self, node: NodeId, crash: bool) {
        let epoch_ss = self.epoch_ss();
        let entry = self.nodes.get_mut(&node).unwrap();
        let replica = entry.replica.as_mut().unwrap();
        let epoch = replica.epoch();
        let ready = replica.take_ready();
        let (messages, replies) = if crash {
            (ready.abandon(), Vec::new())
        } else if epoch_ss {
            let Ok(released) = ready.commit(&mut entry.epochs);
            (released.messages, released.replies)
        } else {
            let records = ready.records().to_vec();
            let log = entry.log.as_mut().unwrap();
            let released = ready
                .commit(log)
                .unwrap_or_else(|e| panic!("{node:?}'s durable log failed: {e}"));
            for record in &records {
                entry.durable.apply(record);
            }
            (released.messages, released.replies)
        };
        for envelope in messages {
            if !epoch_ss && !durable_before_send(&self.nodes[&node].durable, &envelope.message) {
                self.fail(format!("{node:?} sent {envelope:?} before persisting it"));
            }
            self.send(node, epoch, envelope);
        }
        for reply in replies {
            self.deliver(reply);
        }
        if crash {
            self.crash(node);
        }
    }

    /// Kills `node`: under FullSS a process crash or a power failure, as its directory's crash
    /// model allows; under EpochSS a process crash, which keeps only the epoch.
    fn crash(&mut self, node: NodeId) {
        let leader = self.nodes[&node]
            .replica
            .as_ref()
            .is_some_and(|r| r.is_leader());
        if leader {
            self.report.leader_kills += 1;
        } else {
            self.report.follower_kills += 1;
        }
        let entry = self.nodes.get_mut(&node).unwrap();
        let replica = entry.replica.take().unwrap();
        self.past.push(replica.stats().clone());
        let log = entry.log.take();
        let image = log.map(|log| self.crash_image(&log));
        let down_ms = self.rng.random_range(50..400);
        let entry = self.nodes.get_mut(&node).unwrap();
        entry.restart = Some((image, self.now_ms + down_ms));
    }

    /// What `log`'s directory keeps at a process crash or a power failure.
    fn crash_image(&mut self, log: &DurableLog<SimDir>) -> SimDir {
        let power = self.rng.random_bool(0.5);
        let crash = log.segment_log().dir().at_crash();
        if power {
            self.report.power_failures += 1;
            let dirty = crash.dirty_sectors();
            let kept: Vec<_> = dirty
                .into_iter()
                .filter(|_| self.rng.random_bool(0.5))
                .collect();
            let dir_ops = self.rng.random_range(0..=crash.pending_dir_ops());
            crash.crash_image(dir_ops, &kept, None)
        } else {
            crash.process_crash()
        }
    }

    /// Starts `node`: under FullSS from what `image` kept, under EpochSS in its next epoch.
    fn start(&mut self, node: NodeId, image: Option<SimDir>) {
        let config = self.config(node);
        let now_ms = self.now_ms;
        let entry = self.nodes.get_mut(&node).unwrap();
        let replica = match (config.recovery, image) {
            (Recovery::FullSs | Recovery::Pmem, Some(image)) => {
                let opened = DurableLog::open_on(image, log_options())
                    .unwrap_or_else(|e| panic!("{node:?} cannot open its log: {e}"));
                entry.log = Some(opened.log);
                entry.durable = opened.durable;
                if config.recovery == Recovery::Pmem {
                    let machine = RegisterMachine::default();
                    let mut replica = Replica::resume(config, machine, &entry.durable, now_ms);
                    replica.rebuild_now(RegisterMachine::default(), now_ms);
                    replica
                } else {
                    Replica::recover(config, RegisterMachine::default(), &entry.durable, now_ms)
                }
            }
            (Recovery::FullSs | Recovery::Pmem, None) => {
                unreachable!("a FullSS or mPaxos replica restarts from its log")
            }
            (Recovery::Epoch, _) => {
                let last = entry.epochs.epoch();
                Replica::start_epoch(config, RegisterMachine::default(), last, now_ms)
            }
        };
        entry.replica = Some(replica);
        self.collect(node, false);
    }

    fn send(&mut self, from: NodeId, epoch: Epoch, envelope: Envelope) {
        let (loss, duplicate) = if self.faulty {
            (0.05, 0.03)
        } else {
            (0.0, 0.0)
        };
        if self.rng.random_bool(loss) {
            return;
        }
        let copies = if self.rng.random_bool(duplicate) {
            2
        } else {
            1
        };
        for _ in 0..copies {
            let stray = self.faulty && self.epoch_ss() && self.rng.random_bool(0.02);
            let delay = if stray {
                self.rng.random_range(50..800)
            } else {
                self.rng.random_range(1..15)
            };
            self.in_flight
                .push((self.now_ms + delay, from, epoch, envelope.clone()));
        }
    }

    /// A reply reaches its client, which takes it if it answers the request it waits on.
    fn deliver(&mut self, reply: ClientReply) {
        let now_ms = self.now_ms;
        let client = &mut self.clients[(reply.client.0 - 1) as usize];
        let Some(current) = client.current.as_mut() else {
            return;
        };
        if reply.seq != current.seq {
            return;
        }
        let answer = match Response::decode(&reply.reply) {
            Ok(answer) => answer,
            Err(e) => {
                let why = format!("{:?} got a reply that does not decode: {e}", reply.client);
                self.fail(why);
                return;
            }
        };
        current.answers.push(answer);
        if current.answers.len() < current.parts.len() {
            // The next part of a split transfer.
            current.seq = RequestSeq(client.next_seq);
            client.next_seq += 1;
            current.sent_ms = now_ms;
            let request = Request {
                client: client.id,
                seq: current.seq,
                payload: current.parts[current.answers.len()].encode(),
            };
            self.submit(request);
            return;
        }
        let done = client.current.take().unwrap();
        client.next_ms = now_ms + self.rng.random_range(0..20);
        match result(&done.op, &done.answers) {
            Ok(result) => self.history.push(Event {
                client: reply.client.0,
                op: done.op,
                call_ms: done.call_ms,
                returned: Some((now_ms, result)),
            }),
            Err(e) => self.fail(e),
        }
    }

    /// Sends a client request to a live replica (any, as a client that does not know the
    /// leader would).
    fn submit(&mut self, request: Request) {
        let live = self.live();
        if live.is_empty() {
            return;
        }
        let node = live[self.rng.random_range(0..live.len())];
        let delay = self.rng.random_range(1..5);
        self.requests.push((self.now_ms + delay, node, request));
    }

    fn next_op(&mut self) -> CounterOp {
        let k = |rng: &mut SmallRng| rng.random_range(0..KEYS);
        match self.rng.random_range(0..10) {
            0..=2 => CounterOp::Incr {
                key: k(&mut self.rng),
                by: self.rng.random_range(1..5),
            },
            3 => CounterOp::Get {
                key: k(&mut self.rng),
            },
            4..=6 => {
                let from = k(&mut self.rng);
                let to = (from + self.rng.random_range(1..KEYS)) % KEYS;
                CounterOp::Transfer {
                    from,
                    to,
                    amount: self.rng.random_range(1..10),
                }
            }
            7 => CounterOp::MSet {
                values: [(); KEYS].map(|_| self.rng.random_range(0..100)),
            },
            _ => CounterOp::MGet,
        }
    }

    fn clients_act(&mut self) {
        for i in 0..self.clients.len() {
            let resend = match &self.clients[i].current {
                Some(current) => self.now_ms >= current.sent_ms + CLIENT_RETRY_MS,
                None => false,
            };
            if resend {
                let client = &mut self.clients[i];
                let current = client.current.as_mut().unwrap();
                current.sent_ms = self.now_ms;
                let request = Request {
                    client: client.id,
                    seq: current.seq,
                    payload: current.parts[current.answers.len()].encode(),
                };
                self.submit(request);
                continue;
            }
            let idle = self.clients[i].current.is_none();
            if !(idle && self.faulty && self.now_ms >= self.clients[i].next_ms) {
                continue;
            }
            let op = self.next_op();
            let client = &mut self.clients[i];
            let seq = RequestSeq(client.next_seq);
            client.next_seq += 1;
            let parts = parts(&op, self.options.split_transfers);
            let request = Request {
                client: client.id,
                seq,
                payload: parts[0].encode(),
            };
            client.current = Some(InFlight {
                op,
                call_ms: self.now_ms,
                parts,
                answers: Vec::new(),
                seq,
                sent_ms: self.now_ms,
            });
            self.submit(request);
        }
    }

    fn step(&mut self) {
        self.now_ms += 1;
        // Deliver what is due, in random order (reordering).
        let now_ms = self.now_ms;
        let mut due: Vec<_> = Vec::new();
        self.in_flight.retain(|m| {
            if m.0 <= now_ms {
                due.push(m.clone());
                false
            } else {
                true
            }
        });
        while !due.is_empty() {
            let (_, from, epoch, envelope) = due.swap_remove(self.rng.random_range(0..due.len()));
            let to = envelope.to;
            if self.isolated.is_some_and(|(n, _)| n == to || n == from) {
                continue;
            }
            if self.nodes[&from].epochs.epoch() > Some(epoch) {
                self.report.strays_delivered += 1;
            }
            let Some(replica) = self.nodes.get_mut(&to).unwrap().replica.as_mut() else {
                continue;
            };
            replica.handle_epoch_message(now_ms, from, epoch, envelope.message);
            self.after_step(to);
        }
        let mut arrived = Vec::new();
        self.requests.retain(|r| {
            if r.0 <= now_ms {
                arrived.push(r.clone());
                false
            } else {
                true
            }
        });
        for (_, node, request) in arrived {
            let Some(replica) = self.nodes.get_mut(&node).unwrap().replica.as_mut() else {
                continue;
            };
            replica.handle_request(now_ms, request);
            self.after_step(node);
        }
        if now_ms.is_multiple_of(TICK_MS) {
            for node in self.live() {
                let replica = self.nodes.get_mut(&node).unwrap().replica.as_mut().unwrap();
                replica.tick(now_ms);
                self.after_step(node);
            }
        }
        self.faults();
        self.clients_act();
    }

    /// Collects a step's output, crashing the replica instead if it was chosen to crash now.
    fn after_step(&mut self, node: NodeId) {
        let crash = self.crash_next == Some(node);
        if crash {
            self.crash_next = None;
            self.report.mid_step_kills += 1;
        }
        self.collect(node, crash);
    }

    fn faults(&mut self) {
        let restarts: Vec<NodeId> = self
            .ids
            .iter()
            .copied()
            .filter(|n| {
                self.nodes[n]
                    .restart
                    .as_ref()
                    .is_some_and(|(_, at)| *at <= self.now_ms || !self.faulty)
            })
            .collect();
        for node in restarts {
            let (image, _) = self.nodes.get_mut(&node).unwrap().restart.take().unwrap();
            self.start(node, image);
        }
        if !self.faulty {
            self.isolated = None;
            return;
        }
        // At most a minority down at once (a replica cut off may come on top); under EpochSS a
        // replica recovering its state counts as down.
        let down = self.ids.len() - self.serving().len();
        let may_crash = down < (self.ids.len() - 1) / 2;
        if may_crash && self.crash_next.is_none() && self.rng.random_bool(0.002) {
            let live = self.live();
            let leader = live
                .iter()
                .copied()
                .find(|n| self.nodes[n].replica.as_ref().unwrap().is_leader());
            let node = match leader {
                Some(leader) if self.rng.random_bool(0.5) => leader,
                _ => live[self.rng.random_range(0..live.len())],
            };
            if self.rng.random_bool(0.3) {
                self.crash_next = Some(node);
            } else {
                self.crash(node);
            }
        }
        if self.isolated.is_some_and(|(_, until)| until <= self.now_ms) {
            self.isolated = None;
        }
        if self.isolated.is_none() && self.rng.random_bool(0.0005) {
            let node = self.ids[self.rng.random_range(0..self.ids.len())];
            let until = self.now_ms + self.rng.random_range(300..1_500);
            self.isolated = Some((node, until));
            self.report.partitions += 1;
        }
    }

    /// The end-of-run checks: nothing failed on the way, every client has its answer, every
    /// replica holds the same map, and the history is linearizable as a whole.
    fn finish(mut self) -> Result<LogSimReport, String> {
        if let Some(failure) = self.failure.take() {
            return Err(failure);
        }
        if let Some(c) = self.clients.iter().find(|c| c.current.is_some()) {
            return Err(format!("{:?} still waits after healing", c.id));
        }
        let replicas: Vec<&Replica<RegisterMachine>> = self
            .nodes
            .values()
            .map(|n| n.replica.as_ref().expect("every replica restarted"))
            .collect();
        if let Some(r) = replicas.iter().find(|r| r.status() != Status::Serving) {
            return Err(format!("{:?} is {:?} after healing", r.me(), r.status()));
        }
        let first = replicas[0];
        for other in &replicas[1..] {
            if other.executed_below() != first.executed_below()
                || other.state_machine().map() != first.state_machine().map()
            {
                return Err(format!(
                    "replicas differ after healing: {:?} executed below {:?} holds {:?}; \
                     {:?} executed below {:?} holds {:?}",
                    first.me(),
                    first.executed_below(),
                    first.state_machine().map(),
                    other.me(),
                    other.executed_below(),
                    other.state_machine().map()
                ));
            }
        }
        if let Err(refusal) = atomicity::check(&self.history, CHECK_STATES_MAX) {
            return Err(format!("history refused: {refusal:?}"));
        }
        let mut stats = Stats::default();
        let lives = self.nodes.values().filter_map(|n| n.replica.as_ref());
        for s in self.past.iter().chain(lives.map(|r| r.stats())) {
            add_stats(&mut stats, s);
        }
        if stats.conflicting_decisions > 0 {
            return Err(format!(
                "{} decisions contradicted one already known",
                stats.conflicting_decisions
            ));
        }
        self.report.stats = stats;
        self.report.operations = self.history.len();
        Ok(self.report)
    }
}
