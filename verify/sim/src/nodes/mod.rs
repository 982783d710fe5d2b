//! Whole nodes in simulation: every node runs the node's own shard turn logic
//! ([`ShardCore`]: proposer, acceptors, batching, timers, group commit) over the real slot
//! store on simulated media, on a simulated network and clock driven by one seed.
//!
//! What is simulated, and how it matches the running node:
//! * **Shards.** Each node has several shards; a key goes to the shard
//!   [`shard_of`](logless_node::context::shard_of) picks, as in the front end. A shard takes
//!   everything queued when its turn starts (the node's batching), and is busy for the flush
//!   time after a turn that wrote: inputs arriving meanwhile wait for the next turn, and the
//!   turn's outputs leave when the flush ends.
//! * **Network.** One TCP-like [`Link`] per shard and directed pair of nodes; batches are lost,
//!   duplicated, delayed and reordered; partitions cut nodes off one way or both ways (and
//!   cut two replicas of a slot off from a ring whose membership changes). A
//!   crash breaks its links at once, as a reset TCP connection does.
//! * **Crashes.** A crash may land inside a flush (a crash point among the media operations
//!   of the turn). In `sync` mode it is either a process crash (the page cache survives) or a
//!   power failure: any subset of the unpersisted sectors reaches the media, and one more may
//!   be torn on a word boundary. In `mmap` mode it is a process crash. Sometimes every node
//!   crashes at once. A restarted node opens its store from that image, as a new incarnation.
//!   A crash may also lose the node's disk: it restarts from empty stores, rejoining. Disks may
//!   be full while the faults last: stores cannot grow, and space returns at the end.
//! * **Clocks.** Each node reads a wall clock that may jump forwards or backwards; a shard's
//!   clock never goes back (it slews, as the node's does). Expiry is decided from the stamps
//!   these clocks give, so the run records, for each operation, the readings of its shard's
//!   clock while it was pending (the window its stamp lies in), and the farthest any shard
//!   clock was from simulated time (the skew): both go to the checkers with the history.
//! * **Rings.** With `node.replication` below the nodes ([`NodeSimConfig::is_ring`]), each
//!   key lives on the R replicas of its slot: the engines run on the placement each node
//!   derives, a command sent to a node that does not hold its key is forwarded by the node's
//!   own routing over a modelled link, and crashes keep a majority of every key's replicas up
//!   (`ring.rs`). A ring's membership may change during the faults: nodes added, removed and
//!   replaced through the joint stage, installed by the nodes one at a time (`ring_change.rs`).
//! * **Phases.** Faults run until `faults_until_us`; then everything heals and every key must
//!   become writable and readable through every node again (the liveness phase).
//!
//! The run records a history for the linearizability checker and a trace hash: the same seed
//! gives the same trace.
use std::collections::{BTreeMap, VecDeque};

use bytes::Bytes;
use logless_commands::command::Command;
use logless_node::store::{store_options, ShardStore};
use logless_node::turn::{CommandResult, Outlet, ShardCore};
use logless_redis::session::Session;
use logless_redis::table::ReplyShape;
use logless_rmw::acceptor::AcceptorState;
use logless_rmw::config::ProposerConfig;
use logless_rmw::ids::{Key, NodeId, Round};
use logless_rmw::message::Message;
use logless_rmw::persist::Location;
use logless_rmw::replica::Replica;
use logless_storage::media::{Media, SECTOR_BYTES};
use logless_storage::{Durability, SimMedia};
use rand::rngs::SmallRng;
use rand::seq::IndexedRandom;
use rand::{Rng, SeedableRng};

use crate::history::{Clocks, History, Outcome};
use crate::link::{Arrival, Connection, Link};
use crate::queue::EventQueue;
use crate::whole_node::clients::LIVENESS_CLIENT;
use ring::SimRing;

use crate::whole_node::{self, AnswerTo, CLIENT_DELAY_US, INPUTS_PER_TURN_MAX, WALL_START_MS};

mod config;
mod fence;
mod requests;
mod ring;
mod ring_change;
mod workload;

pub use config::{NodeFaults, NodeSimConfig, NodeSimReport};
pub use ring::RingBugs;
pub use ring_change::RingChanges;

/// The size a slot file may reach while disks are full ([`NodeFaults::disk_full`]): its
/// header and two appends of [`FULL_DISK_CHUNK_BYTES`], 16 of the smallest slots, fewer than
/// the registers a shard of the full-disk runs holds, so that some keys find room and the
/// others do not. (Every record of the simulation's small values fits the smallest slot.)
const FULL_DISK_BYTES: usize = 64 + 2 * FULL_DISK_CHUNK_BYTES;

/// The slots one append adds while disks can be full: 1 KiB, 8 of the smallest.
const FULL_DISK_CHUNK_BYTES: usize = 1024;

#[derive(Debug)]
enum Input {
    Command {
        key: Key,
        command: Command,
        to: AnswerTo,
    },
    Messages {
        from: NodeId,
        messages: Vec<Message>,
    },
    LinkBroken(NodeId),
    /// A write-through of a register for the ring's sync (the node's
    /// `ShardInput::WriteThroughs`, its data mover's).
    WriteThrough {
        key: Key,
        to: AnswerTo,
    },
    /// A stage of the ring to install (the node's `ShardInput::InstallPlacement`).
    Install(logless_rmw::placement::Placement),
    /// Raise the round floor for the slots a joint stage gives the node (the node's
    /// `ShardInput::RaiseGainedFloor`, its mover's).
    RaiseFloor {
        stage: logless_rmw::placement::StageId,
        above: u64,
    },
}

#[derive(Debug)]
enum Event {
    /// A batch arrives on the link `from -> to` of `shard`.
    Deliver {
        from: NodeId,
        to: NodeId,
        shard: u16,
        connection: Connection,
        seq: u64,
        messages: Vec<Message>,
    },
    /// A client's command reaches its node.
    Arrive {
        node: NodeId,
        incarnation: u32,
        shard: u16,
        input: Input,
    },
    /// A shard's turn (new input, messages to itself, or a timer).
    Turn {
        node: NodeId,
        incarnation: u32,
        shard: u16,
    },
    /// A shard's flush ends: its held outputs leave.
    TurnDone {
        node: NodeId,
        incarnation: u32,
        shard: u16,
    },
    /// An answer reaches its client.
    Answer {
        to: AnswerTo,
        result: CommandResult,
    },
    ClientNext {
        client: u32,
    },
    ClientTimeout {
        client: u32,
        seq: u64,
    },
    Crash {
        node: NodeId,
    },
    /// A crash inside the flush that `incarnation` of `node` is doing.
    CrashInFlush {
        node: NodeId,
        incarnation: u32,
    },
    Restart {
        node: NodeId,
    },
    Partition,
    ClockJump,
    /// A client's command on a key its node does not hold reaches that node, which forwards
    /// it (on a ring).
    Forward {
        client: u32,
        seq: u64,
    },
    /// A forwarded command reaches the replica it was written to.
    ForwardArrive {
        client: u32,
        seq: u64,
    },
    /// The replica's reply to a forwarded command reaches the forwarding node.
    ForwardReply {
        client: u32,
        seq: u64,
        result: CommandResult,
    },
    /// The link a forwarded command was written to broke before its reply came back.
    ForwardBroken {
        client: u32,
        seq: u64,
    },
    /// A node reads the ring's stage register (periodically, or woken by its engine).
    RingRead {
        node: NodeId,
        incarnation: u32,
        periodic: bool,
    },
    /// The coordinator of the ring's membership changes takes its next step.
    RingCoordinate,
    /// The staged schedule of the fence takes its next step (module `fence`).
    FenceStep,
}

/// A turn's outputs, held until its flush ends.
#[derive(Default)]
struct Held {
    sends: Vec<(NodeId, Vec<Message>)>,
    answers: Vec<(AnswerTo, CommandResult)>,
    /// Simulated time at the turn (µs).
    now_us: u64,
}

impl Outlet<AnswerTo> for Held {
    fn send(&mut self, to: NodeId, messages: Vec<Message>) {
        self.sends.push((to, messages));
    }

    fn answer(&mut self, reply: AnswerTo, result: CommandResult) {
        self.answers.push((reply, result));
    }

    fn mono_us(&self) -> u64 {
        self.now_us
    }
}

#[derive(Default)]
struct SimShard {
    core: Option<ShardCore<AnswerTo, SimMedia>>,
    queue: VecDeque<Input>,
    busy: bool,
    held: Held,
    /// The earliest turn already scheduled.
    wake_at_us: Option<u64>,
    /// Whether the turn being flushed froze its media at a crash point.
    crash_point_armed: bool,
    /// The image the store left at the last crash.
    image: Vec<u8>,
    /// The operations whose clients wait on this shard (history indices): its turns may stamp
    /// them.
    waiting: Vec<usize>,
    /// The joint stage whose round floor the turn being flushed raised: durable once flushed.
    raised_in_flush: Option<logless_rmw::placement::StageId>,
}

struct SimNode {
    up: bool,
    incarnation: u32,
    shards: Vec<SimShard>,
    /// The wall clock's offset from simulated time (ms).
    clock_offset_ms: i64,
    /// A crash waits for this node's next flush, to land inside it.
    crash_in_next_flush: bool,
    /// Whether it lost its disk and rejoins, at every start from then on.
    rejoining: bool,
    /// Whether it serves clients: on a ring whose membership changes, only once it read the
    /// ring's stage since it started.
    ready: bool,
}

struct Client {
    node: NodeId,
    /// The Redis session of the client's connection to `node`.
    session: Session,
    issued: u32,
    seq: u64,
    /// The command in flight: its number, its index in the history, its node.
    in_flight: Option<(u64, usize, NodeId)>,
    /// How the session shows the reply of the command in flight.
    shape: ReplyShape,
}

/// A simulated cluster of whole nodes.
pub struct NodeCluster {
    config: NodeSimConfig,
    events: EventQueue<Event>,
    rng: SmallRng,
    nodes: BTreeMap<NodeId, SimNode>,
    links: BTreeMap<(NodeId, NodeId, u16), Link>,
    cut: Vec<(NodeId, NodeId)>,
    clients: BTreeMap<u32, Client>,
    history: History,
    /// The value last sent in a SET, by register index.
    last_value: BTreeMap<u32, Bytes>,
    /// The generation of each register's key (see `current_key`).
    generation: BTreeMap<u32, u32>,
    /// Writes with unknown outcome, by key.
    unknown_writes: BTreeMap<Key, u32>,
    /// By history index: the first and the last reading (ms) of its shard's clock while the
    /// operation's client waited.
    stamp_readings_ms: Vec<Option<(u64, u64)>>,
    /// The farthest a shard clock was from simulated time at a turn (µs).
    skew_us_max: u64,
    faults_active: bool,
    /// The ring, when the nodes form one.
    ring: Option<SimRing>,
    /// The staged schedule of the fence, once started ([`NodeSimConfig::fence_schedule`]).
    fence: Option<fence::FenceStep>,
    report: NodeSimReport,
}

impl NodeCluster {
    /// A cluster ready to run: every node up with an empty store.
    pub fn new(config: NodeSimConfig) -> NodeCluster {
        let rng = SmallRng::seed_from_u64(config.seed);
        let mut cluster = NodeCluster {
            events: EventQueue::default(),
            rng,
            nodes: BTreeMap::new(),
            links: BTreeMap::new(),
            cut: Vec::new(),
            clients: BTreeMap::new(),
            history: History::default(),
            last_value: BTreeMap::new(),
            generation: BTreeMap::new(),
            unknown_writes: BTreeMap::new(),
            stamp_readings_ms: Vec::new(),
            skew_us_max: 0,
            faults_active: true,
            ring: SimRing::new(
                &config.node,
                config.nodes,
                config.ring_bugs,
                config.ring_changes,
            ),
            fence: None,
            report: NodeSimReport::default(),
            config,
        };
        for n in 1..=cluster.config.nodes {
            let shards = (0..cluster.config.shards)
                .map(|_| SimShard::default())
                .collect();
            cluster.nodes.insert(
                NodeId(n),
                SimNode {
                    up: false,
                    incarnation: 0,
                    shards,
                    clock_offset_ms: 0,
                    crash_in_next_flush: false,
                    rejoining: false,
                    ready: true,
                },
            );
        }
        cluster.plan_ring_changes();
        for n in 1..=cluster.config.nodes {
            cluster.start_node(NodeId(n));
        }
        for c in 0..cluster.config.clients {
            let node = NodeId((c % u32::from(cluster.config.nodes)) as u16 + 1);
            cluster.clients.insert(
                c,
                Client {
                    node,
                    session: Session::new(u64::from(c)),
                    issued: 0,
                    seq: 0,
                    in_flight: None,
                    shape: ReplyShape::Plain,
                },
            );
            let at = cluster.rng.random_range(0..=cluster.config.think_us);
            cluster.events.schedule(at, Event::ClientNext { client: c });
        }
        let f = cluster.config.faults.clone();
        if f.crash_every_us > 0 {
            cluster.plan_crash();
        }
        if f.partition_every_us > 0 {
            let at = cluster.exp(f.partition_every_us);
            cluster.events.schedule(at, Event::Partition);
        }
        if f.clock_jump_every_us > 0 {
            let at = cluster.exp(f.clock_jump_every_us);
            cluster.events.schedule(at, Event::ClockJump);
        }
        cluster
    }

    /// Runs the workload with faults until `faults_until_us`, heals, lets the workload finish,
    /// then runs the liveness phase: every key written and read through every node. Returns
    /// the report; the history is in [`NodeCluster::history`].
    pub fn run(&mut self) -> &NodeSimReport {
        let faults_until = self.config.faults_until_us;
        let until = self.config.until_us;
        while let Some(at) = self.events.next_due_us() {
            if at > until {
                break;
            }
            if self.faults_active && at >= faults_until {
                self.heal();
                continue;
            }
            if self.workload_done() && !self.faults_active && self.ring_settled() {
                break;
            }
            self.step_next();
        }
        if self.faults_active {
            self.heal();
        }
        self.liveness();
        self.check_final_replicas();
        for n in self.nodes.values() {
            for core in n.shards.iter().filter_map(|s| s.core.as_ref()) {
                let status = core.status();
                self.report.registers_dropped += status.proposer.registers_dropped;
                self.report.registers_removed += status.registers_removed;
            }
        }
        self.report.sim_time_us = self.events.now_us();
        for op in &self.history.operations {
            self.report.operations += 1;
            match op.outcome {
                Outcome::Ok(_) => self.report.acknowledged += 1,
                Outcome::NotApplied => self.report.not_applied += 1,
                Outcome::Unknown => self.report.unknown += 1,
            }
        }
        self.history.clocks = self.clocks();
        self.report.clock_skew_ms_max = self.history.clocks.skew_ms;
        self.count_expiry();
        &self.report
    }

    /// What bounds the stamps, for the checkers: each operation's stamp lies between the
    /// first and the last reading of its shard's clock while it was pending (a shard clock never
    /// goes back), and an operation of unknown outcome may have been stamped later, by at most
    /// the skew from simulated time. Stamps are whole milliseconds, so is the skew.
    fn clocks(&self) -> Clocks {
        let us = |ms: u64| (ms as i64 - WALL_START_MS as i64) * 1000;
        let stamps_us = (self.stamp_readings_ms.iter().enumerate())
            .filter_map(|(index, readings)| {
                let (first, last) = (*readings)?;
                let known = matches!(self.history.operations[index].outcome, Outcome::Ok(_));
                Some((index, (us(first), known.then(|| us(last)))))
            })
            .collect();
        Clocks {
            epoch_ms: WALL_START_MS,
            skew_ms: self.skew_us_max.div_ceil(1000),
            stamps_us,
        }
    }

    /// The recorded history.
    pub fn history(&self) -> &History {
        &self.history
    }

    /// The nodes whose store holds an acceptor state of `key` (any node up).
    pub fn holders(&self, key: &Key) -> Vec<NodeId> {
        self.holders_where(key, |_| true)
    }

    /// The nodes whose store holds a vote of `key` (any node up): a promise alone is not one.
    pub fn voters(&self, key: &Key) -> Vec<NodeId> {
        self.holders_where(key, |state| state.r_voted != Round::BOTTOM)
    }

    /// The nodes up whose store holds an acceptor state of `key` that `wanted` accepts.
    fn holders_where(&self, key: &Key, wanted: impl Fn(&AcceptorState) -> bool) -> Vec<NodeId> {
        let shard =
            logless_node::context::shard_of(key.as_bytes(), usize::from(self.config.shards));
        (self.nodes.iter())
            .filter(|(_, n)| {
                (n.shards[shard].core.as_ref()).is_some_and(
                    |core| matches!(core.durable_state(key), Ok(Some(state)) if wanted(&state)),
                )
            })
            .map(|(id, _)| *id)
            .collect()
    }

    /// On a ring, the nodes that replicate `key`; every node otherwise.
    pub fn replicas_of(&self, key: &Key) -> Vec<NodeId> {
        (1..=self.config.nodes)
            .map(NodeId)
            .filter(|&n| self.ring.as_ref().is_none_or(|ring| ring.holds(n, key)))
            .collect()
    }

    fn exp(&mut self, mean_us: u64) -> u64 {
        whole_node::exp(&mut self.rng, mean_us)
    }

    fn trace(&mut self, value: u64) {
        // FNV-1a over the words of the trace.
        let mut h = if self.report.trace == 0 {
            0xcbf2_9ce4_8422_2325
        } else {
            self.report.trace
        };
        for b in value.to_le_bytes() {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
        self.report.trace = h;
    }

    fn wall_ms(&self, node: NodeId) -> u64 {
        whole_node::wall_ms(self.events.now_us(), self.nodes[&node].clock_offset_ms)
    }

    fn workload_done(&self) -> bool {
        self.clients
            .values()
            .all(|c| c.in_flight.is_none() && c.issued >= self.config.commands_per_client)
    }

    // ---- nodes -------------------------------------------------------------------------

    /// The proposer of `node`'s shards: every node an acceptor, and on a ring the placement
    /// the node derives (each key's acceptors its replicas).
    fn proposer_config(&self, node: NodeId) -> ProposerConfig {
        let acceptors = (1..=self.config.nodes).map(NodeId).collect();
        let mut proposer = self.config.node.proposer_config(acceptors);
        if let Some(ring) = &self.ring {
            proposer.placement = Some(ring.placements[&node].clone());
        }
        // Phases time out sooner than on a node, so that faults are found and retried within
        // a short simulated run.
        proposer.phase_timeout_ms = 20;
        proposer.bugs = self.config.bugs.core;
        proposer
    }

    /// Opens every shard's store from its last image and starts a new incarnation.
    fn start_node(&mut self, node: NodeId) {
        let proposer = self.proposer_config(node);
        let mut options = store_options(self.config.durability, 64 * 1024);
        if self.config.faults.disk_full {
            options.append_chunk_bytes = FULL_DISK_CHUNK_BYTES;
        }
        let bugs = self.config.bugs.shard;
        // Without the stores' indexes, as a node runs (`docs/storage-format.md`, "Without the
        // index"), on seeds in even blocks of seven (0-6, 14-20, ..); in odd blocks with them,
        // each replica then starting without its registers' locations. Seven is prime to
        // what else a seed picks (durability by 2, thrifty writes by 3, removal and clock
        // jumps by 4, node count by 5), so each mode runs under all of it, `sync` and `mmap`
        // alike, and on ring seeds (6 modulo 7). Never with the deliberate bugs that write
        // states behind the batches, without their locations.
        options.located = (self.config.seed / 7).is_multiple_of(2)
            && !(bugs.reply_before_persist || bugs.persist_without_ttl);
        let seeds: Vec<u64> = (0..self.config.shards).map(|_| self.rng.random()).collect();
        let watched = self.ring_watched();
        let n = self.nodes.get_mut(&node).expect("node");
        n.incarnation += 1;
        // A restarted node of a ring that changes starts its shards as a node does, answering
        // no peer until its first read of the stage register installed a stage (at the run's
        // first start every node installs the register's stage at once).
        let awaiting = watched && n.incarnation > 1;
        let mut failures = Vec::new();
        for (s, shard) in n.shards.iter_mut().enumerate() {
            let mut media = SimMedia::from_image(std::mem::take(&mut shard.image));
            let full = self.config.faults.disk_full && self.faults_active;
            let spared = self.config.faults.disk_full_spared;
            if full && spared.is_none() {
                // Full from the start: the slot file cannot grow past what it has.
                media.capacity_bytes = Some(media.len().max(FULL_DISK_BYTES));
            }
            let path = format!("node-{}/shard-{s}", node.0).into();
            match open_shard(media, &options, path, |states| {
                Replica::new_located(node, n.incarnation, proposer.clone(), seeds[s], states)
            }) {
                Ok((mut store, replica)) => {
                    if full && spared.is_some_and(|spared| spared != node.0) {
                        // Another node has room: this one cannot grow its slot file at all, so
                        // that a new key finds no room here from the first.
                        let len = store.media().len();
                        store.media_mut().capacity_bytes = Some(len);
                    }
                    // The shard's round floor comes back from the store, as a node's does.
                    let replica = replica.with_round_floor(store.round_floor());
                    let replica = if n.rejoining {
                        replica.rejoining()
                    } else if awaiting {
                        logless_node::ring::starting_replica(replica)
                    } else {
                        replica
                    };
                    let mut core = ShardCore::new(replica, store);
                    core.inject_bugs(bugs);
                    core.set_sweep(Some(self.config.sweep));
                    shard.core = Some(core);
                }
                Err(e) => failures.push(format!(
                    "node {} did not restart: {e} (incarnation {})",
                    node.0, n.incarnation
                )),
            }
        }
        if !failures.is_empty() {
            self.report.failures.extend(failures);
            return;
        }
        n.up = true;
        // The peers' connections to this node are new: they see the break at once.
        for peer in self.peers_of(node) {
            for s in 0..self.config.shards {
                self.enqueue(peer, s, Input::LinkBroken(node));
            }
        }
        self.ring_node_started(node);
    }

    fn peers_of(&self, node: NodeId) -> Vec<NodeId> {
        (1..=self.config.nodes)
            .map(NodeId)
            .filter(|p| *p != node)
            .collect()
    }

    /// Queues an input for a shard of an up node and makes sure a turn comes.
    fn enqueue(&mut self, node: NodeId, shard: u16, input: Input) {
        let n = self.nodes.get_mut(&node).expect("node");
        if !n.up {
            return;
        }
        n.shards[usize::from(shard)].queue.push_back(input);
        self.wake(node, shard, 0);
    }

    /// Schedules a turn of a shard `delay_us` from now unless one comes earlier.
    fn wake(&mut self, node: NodeId, shard: u16, delay_us: u64) {
        let at = self.events.now_us() + delay_us;
        let n = self.nodes.get_mut(&node).expect("node");
        let incarnation = n.incarnation;
        let s = &mut n.shards[usize::from(shard)];
        if s.busy {
            return; // the end of the flush looks again
        }
        if matches!(s.wake_at_us, Some(w) if w <= at) {
            return;
        }
        s.wake_at_us = Some(at);
        self.events.schedule(
            delay_us,
            Event::Turn {
                node,
                incarnation,
                shard,
            },
        );
    }

    fn turn(&mut self, node: NodeId, shard: u16) {
        let now_us = self.events.now_us();
        let wall_ms = self.wall_ms(node);
        let flush_us = self.config.flush_us;
        let arm = self.rng.random_range(0..32usize);
        let n = self.nodes.get_mut(&node).expect("node");
        let crash_in_flush = n.crash_in_next_flush;
        let s = &mut n.shards[usize::from(shard)];
        s.wake_at_us = None;
        let Some(core) = s.core.as_mut() else {
            return;
        };
        let clock_ms = core.start_turn(wall_ms, now_us);
        // Any command this turn applies or answers is stamped with this reading.
        let skew_us = (clock_ms * 1000).abs_diff(WALL_START_MS * 1000 + now_us);
        self.skew_us_max = self.skew_us_max.max(skew_us);
        for &index in &s.waiting {
            let readings = &mut self.stamp_readings_ms[index];
            *readings = Some(readings.map_or((clock_ms, clock_ms), |(first, _)| (first, clock_ms)));
        }
        if crash_in_flush {
            // The crash falls inside this turn's flush: freeze the media at a crash point
            // among the turn's operations.
            core.store_mut().media_mut().arm_crash_point(arm);
        }
        s.crash_point_armed = crash_in_flush;
        let mut installed_joint = None;
        for _ in 0..INPUTS_PER_TURN_MAX {
            match s.queue.pop_front() {
                Some(Input::Command { key, command, to }) => core.submit(key, command, to),
                Some(Input::WriteThrough { key, to }) => core.submit_write_through(key, to),
                Some(Input::Messages { from, messages }) => core.receive(from, messages),
                Some(Input::LinkBroken(peer)) => core.link_broken(peer),
                Some(Input::Install(placement)) => {
                    let stage = placement.stage_id();
                    core.install_placement(placement);
                    if matches!(stage.stage(), Some(logless_placement::Stage::Joint(_))) {
                        installed_joint =
                            Some((stage, core.high_round(), core.awaits_gained_floor()));
                    }
                }
                Some(Input::RaiseFloor { stage, above }) => {
                    if core.raise_floor_for_gained_slots(stage, above) {
                        s.raised_in_flush = Some(stage);
                    }
                }
                None => break,
            }
        }
        let flushes = core.store().flushes;
        s.held.now_us = now_us;
        if let Err(e) = core.finish_turn(&mut s.held) {
            let failure = format!("node {} shard {shard}: store failed: {e}", node.0);
            self.report.failures.push(failure);
            self.crash_node(node, false);
            return;
        }
        // A raise whose floor the store refused for lack of space did not happen: the shard
        // still holds the slots back, and is asked to raise again.
        let raise_refused = s.raised_in_flush.is_some() && core.awaits_gained_floor();
        if raise_refused {
            s.raised_in_flush = None;
            self.report.floors_refused += 1;
        }
        let wrote = core.store().flushes > flushes;
        let newer_stage = core.take_newer_stage().is_some();
        s.busy = true;
        s.crash_point_armed &= wrote;
        let incarnation = n.incarnation;
        if crash_in_flush && wrote {
            n.crash_in_next_flush = false;
            let at = self.rng.random_range(0..flush_us);
            self.events
                .schedule(at, Event::CrashInFlush { node, incarnation });
        }
        let done = Event::TurnDone {
            node,
            incarnation,
            shard,
        };
        self.events.schedule(if wrote { flush_us } else { 0 }, done);
        if newer_stage {
            self.newer_stage_met(node);
        }
        if let (Some((stage, high, awaits)), Some(ring)) = (installed_joint, self.ring.as_mut()) {
            ring.highs.insert((node, shard), (stage, high));
            if awaits {
                ring.awaiting
                    .insert((node, shard), (stage, incarnation, false));
            }
        }
        if let (true, Some(ring)) = (raise_refused, self.ring.as_mut()) {
            if let Some(entry) = ring.awaiting.get_mut(&(node, shard)) {
                entry.2 = false;
            }
        }
    }

    fn turn_done(&mut self, node: NodeId, shard: u16) {
        let wall_ms = self.wall_ms(node);
        let n = self.nodes.get_mut(&node).expect("node");
        let s = &mut n.shards[usize::from(shard)];
        s.busy = false;
        if let (Some(stage), Some(ring)) = (s.raised_in_flush.take(), self.ring.as_mut()) {
            ring.raised.insert((node, shard, stage));
            ring.awaiting.remove(&(node, shard));
        }
        let held = std::mem::take(&mut s.held);
        let next = match &s.core {
            Some(core) if core.has_local_work() || !s.queue.is_empty() => Some(0),
            Some(core) => core
                .next_timer_ms()
                .map(|t| t.saturating_sub(core.now_ms().max(wall_ms)).max(1) * 1000),
            None => None,
        };
        for (to, messages) in held.sends {
            self.send(node, to, shard, messages);
        }
        for (to, result) in held.answers {
            if self.forwarded_answer(node, to.client) {
                if self.forwarded_here(node, to.client, to.seq) {
                    self.reply_to_forwarder(to.client, to.seq, result);
                }
            } else {
                self.events
                    .schedule(CLIENT_DELAY_US, Event::Answer { to, result });
            }
        }
        if let Some(delay) = next {
            self.wake(node, shard, delay);
        }
    }

    fn send(&mut self, from: NodeId, to: NodeId, shard: u16, messages: Vec<Message>) {
        self.report.batches += 1;
        let connection = (self.nodes[&from].incarnation, self.nodes[&to].incarnation);
        let seq = self
            .links
            .entry((from, to, shard))
            .or_default()
            .send(connection);
        let f = &self.config.faults;
        if self.faults_active && (self.cut.contains(&(from, to)) || self.rng.random_bool(f.loss)) {
            return;
        }
        let copies = if self.faults_active && self.rng.random_bool(f.duplicate) {
            2
        } else {
            1
        };
        for _ in 0..copies {
            let (lo, hi) = self.config.faults.delay_us;
            let delay = self.rng.random_range(lo..=hi);
            self.events.schedule(
                delay,
                Event::Deliver {
                    from,
                    to,
                    shard,
                    connection,
                    seq,
                    messages: messages.clone(),
                },
            );
        }
    }

    fn deliver(
        &mut self,
        from: NodeId,
        to: NodeId,
        shard: u16,
        connection: Connection,
        seq: u64,
        messages: Vec<Message>,
    ) {
        if !self.nodes[&to].up {
            return;
        }
        let current = (self.nodes[&from].incarnation, self.nodes[&to].incarnation);
        let arrival = self
            .links
            .entry((from, to, shard))
            .or_default()
            .receive(connection, current, seq);
        self.trace(seq);
        match arrival {
            Arrival::Drop => {}
            Arrival::Deliver => self.enqueue(to, shard, Input::Messages { from, messages }),
            Arrival::BrokenThenDeliver => {
                self.report.link_breaks += 1;
                self.enqueue(to, shard, Input::LinkBroken(from));
                self.enqueue(to, shard, Input::Messages { from, messages });
            }
        }
    }

    // ---- faults ------------------------------------------------------------------------

    fn plan_crash(&mut self) {
        let at = self.exp(self.config.faults.crash_every_us);
        let node = NodeId(self.rng.random_range(1..=self.config.nodes));
        self.events.schedule(at, Event::Crash { node });
    }

    /// Crashes `node` now or inside its next flush (half the time each), or every node now.
    fn crash(&mut self, node: NodeId) {
        if !self.faults_active {
            return;
        }
        if self.rng.random_bool(self.config.faults.crash_all) {
            self.report.crashes_all += 1;
            for n in (1..=self.config.nodes).map(NodeId) {
                if self.nodes[&n].up {
                    let power = self.power_failure();
                    self.crash_node(n, power);
                }
            }
        } else {
            if self.one_more_may_crash(node) && self.nodes[&node].up {
                if self.rng.random_bool(0.5) {
                    self.nodes.get_mut(&node).expect("node").crash_in_next_flush = true;
                } else {
                    let power = self.power_failure();
                    self.crash_node(node, power);
                    self.maybe_lose_disk(node);
                }
            }
        }
        self.plan_crash();
    }

    /// Whether `node` may go down too and leave a majority up: of every node, or on a ring of
    /// every key's replicas (the node's own count, [`logless_node::ring`]), by the old and the
    /// new configuration while the ring moves.
    fn one_more_may_crash(&self, node: NodeId) -> bool {
        if let Some(ring) = &self.ring {
            let up = |n: logless_placement::NodeId| n.0 != node.0 && self.nodes[&NodeId(n.0)].up;
            return [ring.register.serving(), ring.register.target()]
                .into_iter()
                .all(|config| logless_node::ring::ranges_without_majority(config, up).is_empty());
        }
        let down = self.nodes.values().filter(|n| !n.up).count();
        whole_node::one_more_may_crash(down, self.config.nodes)
    }

    fn power_failure(&mut self) -> bool {
        self.config.durability == Durability::Sync
            && self.rng.random_bool(self.config.faults.power_failure)
    }

    /// Stops a node, keeping what its media would hold after the crash.
    fn crash_node(&mut self, node: NodeId, power: bool) {
        self.report.crashes += 1;
        self.report.power_failures += u64::from(power);
        let mut torn_total = 0;
        let mut in_flush = false;
        let shards = self.config.shards;
        let mut rng = SmallRng::seed_from_u64(self.rng.random());
        let n = self.nodes.get_mut(&node).expect("node");
        n.up = false;
        n.crash_in_next_flush = false;
        let mut registers_dropped = 0;
        let mut registers_removed = 0;
        for s in &mut n.shards {
            let Some(core) = s.core.take() else {
                continue;
            };
            let status = core.status();
            registers_dropped += status.proposer.registers_dropped;
            registers_removed += status.registers_removed;
            let media = core.store().media();
            in_flush |= s.busy;
            let snapshot = if s.busy && s.crash_point_armed {
                media.at_crash()
            } else {
                media.now()
            };
            s.image = if power {
                let dirty = snapshot.dirty_sectors();
                let kept: Vec<usize> = dirty
                    .iter()
                    .copied()
                    .filter(|_| rng.random_bool(0.5))
                    .collect();
                let rest: Vec<usize> = dirty
                    .iter()
                    .copied()
                    .filter(|d| !kept.contains(d))
                    .collect();
                let torn = rest.choose(&mut rng).map(|&sector| {
                    torn_total += 1;
                    (sector, rng.random_range(1..SECTOR_BYTES / 8) * 8)
                });
                snapshot.crash_image(&kept, torn)
            } else {
                snapshot.live_image()
            };
            s.queue.clear();
            s.busy = false;
            // A raise whose flush the crash cut is not durable: the restarted shard holds
            // the slots back again and is raised again, and no later turn of it may count as
            // this one's flush.
            s.raised_in_flush = None;
            s.held = Held::default();
            s.wake_at_us = None;
        }
        self.report.torn_sectors += torn_total;
        self.report.registers_dropped += registers_dropped;
        self.report.registers_removed += registers_removed;
        self.report.crashes_in_flush += u64::from(in_flush);
        // Clients connected to it lose their connection: their outcome is unknown.
        let lost: Vec<(u32, u64)> = self
            .clients
            .iter()
            .filter_map(|(id, c)| match c.in_flight {
                Some((seq, _, at)) if at == node => Some((*id, seq)),
                _ => None,
            })
            .collect();
        for (client, seq) in lost {
            self.client_done(client, seq, None);
        }
        self.forwarding_node_crashed(node);
        // The peers' connections reset.
        for peer in self.peers_of(node) {
            for s in 0..shards {
                self.enqueue(peer, s, Input::LinkBroken(node));
            }
        }
        let down_us = self.config.faults.down_us;
        self.events.schedule(down_us, Event::Restart { node });
    }

    /// With probability `faults.lost_disk`, and only once a run, empties the disk of `node`,
    /// which is down: it restarts rejoining.
    fn maybe_lose_disk(&mut self, node: NodeId) {
        let lost_disk = self.config.faults.lost_disk;
        if lost_disk == 0.0 || self.report.lost_disks > 0 || !self.rng.random_bool(lost_disk) {
            return;
        }
        self.report.lost_disks += 1;
        let n = self.nodes.get_mut(&node).expect("node");
        n.rejoining = true;
        for s in &mut n.shards {
            s.image = Vec::new();
        }
    }

    fn restart(&mut self, node: NodeId) {
        if !self.nodes[&node].up {
            self.start_node(node);
        }
    }

    fn partition(&mut self) {
        if !self.faults_active {
            return;
        }
        self.cut.clear();
        self.report.partitions += 1;
        let nodes = self.config.nodes;
        // A ring whose membership changes may also split in two (a fifth kind, drawn only
        // there so that the other seeds' schedules stay as they were).
        let kinds = if self.ring_watched() { 5 } else { 4 };
        match self.rng.random_range(0..kinds) {
            0 => {}
            4 => self.split(),
            kind => {
                let isolated = NodeId(self.rng.random_range(1..=nodes));
                for peer in self.peers_of(isolated) {
                    if kind != 3 {
                        self.cut.push((isolated, peer));
                    }
                    if kind != 1 {
                        self.cut.push((peer, isolated));
                    }
                }
            }
        }
        let next = self.exp(self.config.faults.partition_every_us);
        self.events.schedule(next, Event::Partition);
    }

    /// Cuts two replicas of some slot (by the ring one of them routes by, which may lag the
    /// register's) off from the other nodes, both ways: they cannot read the ring's stage
    /// register, but they hold a majority of that slot's replicas as the lagging one sees them.
    fn split(&mut self) {
        let nodes = self.config.nodes;
        let first = NodeId(self.rng.random_range(1..=nodes));
        let ring = self.ring.as_ref().expect("a ring");
        let config = (ring.installed.get(&first)).map_or(ring.register.serving(), |s| s.serving());
        let held: Vec<NodeId> = loop {
            let slot =
                logless_placement::Slot::new(self.rng.random_range(0..logless_placement::SLOTS))
                    .expect("a slot");
            let replicas = config.replicas(slot);
            if replicas.contains(logless_placement::NodeId(first.0)) {
                break (replicas.nodes().iter())
                    .map(|n| NodeId(n.0))
                    .filter(|&n| n != first)
                    .collect();
            }
            if !config.contains(logless_placement::NodeId(first.0)) {
                break replicas.nodes().iter().map(|n| NodeId(n.0)).collect();
            }
        };
        let second = *held.choose(&mut self.rng).expect("replicas");
        let minority = [first, second];
        for a in minority {
            for b in (1..=nodes).map(NodeId).filter(|b| !minority.contains(b)) {
                self.cut.push((a, b));
                self.cut.push((b, a));
            }
        }
    }

    fn clock_jump(&mut self) {
        if !self.faults_active {
            return;
        }
        let max = self.config.faults.clock_jump_ms_max as i64;
        let node = NodeId(self.rng.random_range(1..=self.config.nodes));
        let jump = self.rng.random_range(-max..=max);
        self.nodes.get_mut(&node).expect("node").clock_offset_ms += jump;
        self.report.clock_jumps += 1;
        let next = self.exp(self.config.faults.clock_jump_every_us);
        self.events.schedule(next, Event::ClockJump);
    }

    /// Ends the faults: the network heals, clocks stay where they are, down nodes restart, and
    /// full disks get space again.
    fn heal(&mut self) {
        self.faults_active = false;
        for n in self.nodes.values_mut() {
            for s in &mut n.shards {
                if let Some(core) = s.core.as_mut() {
                    let status = core.status();
                    self.report.writes_refused_for_space += status.writes_refused_for_space;
                    self.report.writes_refused_by_quorum += status.proposer.refused_for_space;
                    core.store_mut().media_mut().capacity_bytes = None;
                }
            }
        }
        self.cut.clear();
        for node in (1..=self.config.nodes).map(NodeId) {
            self.nodes.get_mut(&node).expect("node").crash_in_next_flush = false;
            if !self.nodes[&node].up {
                self.start_node(node);
            }
        }
    }

    /// Takes the next event, adds it to the trace and handles it.
    fn step_next(&mut self) {
        let (at, event) = self.events.pop().expect("an event is due");
        self.trace(at);
        self.step(event);
    }

    fn step(&mut self, event: Event) {
        match event {
            Event::Deliver {
                from,
                to,
                shard,
                connection,
                seq,
                messages,
            } => self.deliver(from, to, shard, connection, seq, messages),
            Event::Arrive {
                node,
                incarnation,
                shard,
                input,
            } => {
                if self.nodes[&node].incarnation == incarnation {
                    self.enqueue(node, shard, input);
                }
            }
            Event::Turn {
                node,
                incarnation,
                shard,
            } => {
                let n = &self.nodes[&node];
                let s = &n.shards[usize::from(shard)];
                if n.up && n.incarnation == incarnation && !s.busy {
                    self.turn(node, shard);
                }
            }
            Event::TurnDone {
                node,
                incarnation,
                shard,
            } => {
                let n = &self.nodes[&node];
                if n.up && n.incarnation == incarnation {
                    self.turn_done(node, shard);
                }
            }
            Event::Answer { to, result } => self.client_done(to.client, to.seq, Some(result)),
            Event::ClientNext { client } => self.client_next(client),
            Event::ClientTimeout { client, seq } => self.client_done(client, seq, None),
            Event::Crash { node } => self.crash(node),
            Event::CrashInFlush { node, incarnation } => {
                let n = &self.nodes[&node];
                if self.faults_active
                    && n.up
                    && n.incarnation == incarnation
                    && self.one_more_may_crash(node)
                {
                    let power = self.power_failure();
                    self.crash_node(node, power);
                }
            }
            Event::Restart { node } => self.restart(node),
            Event::Partition => self.partition(),
            Event::ClockJump => self.clock_jump(),
            Event::Forward { client, seq } => self.forward(client, seq),
            Event::ForwardArrive { client, seq } => self.forward_arrive(client, seq),
            Event::ForwardReply {
                client,
                seq,
                result,
            } => self.forward_reply(client, seq, result),
            Event::ForwardBroken { client, seq } => self.forward_broken(client, seq),
            Event::RingRead {
                node,
                incarnation,
                periodic,
            } => self.ring_read(node, incarnation, periodic),
            Event::RingCoordinate => self.coordinate(),
            Event::FenceStep => self.fence_step(),
        }
    }
}

/// Opens a shard's store on `media` and starts its replica (`start`) from the states it holds,
/// with their locations if the store runs without its index, as a node does; then drops the
/// index (see [`ShardStore::started`]).
fn open_shard(
    media: SimMedia,
    options: &logless_storage::StoreOptions,
    path: std::path::PathBuf,
    start: impl FnOnce(&mut dyn Iterator<Item = (Key, AcceptorState, Location)>) -> Replica,
) -> Result<(ShardStore<SimMedia>, Replica), logless_node::store::OpenError> {
    let mut store = ShardStore::open_store_on(media, options.clone(), path)?;
    let mut states = store.states();
    let replica = if options.located {
        start(&mut states.located())
    } else {
        // No locations: each register's first write finds it by its key.
        start(&mut (&mut states).map(|(key, state)| (key, state, Location::UNKNOWN)))
    };
    states.finish()?;
    store.started(replica.acceptor_registers())?;
    Ok((store, replica))
}
