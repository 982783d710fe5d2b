//! Whole nodes of the psmr engine in simulation: every node runs the node's own psmr turn core
//! ([`PsmrCore`]: the replica's `k + 1` groups, or one stream, over their real durable logs
//! ([`GroupLogs`] of [`DurableLog`]s) on simulated directories, its client pool, retries and
//! reply cache) and its workers' plan and service ([`Shared`], the B⁺-tree key-value service),
//! on a simulated network and clock driven by one seed — what [`crate::log_nodes`] is for the
//! log engine.
//!
//! What is simulated, and how it matches the running node ([`logless_node::psmr_loop`]):
//! * **Turns.** A node takes everything queued when its turn starts, ticks its replica at
//!   least every [`TICK_MS`] ms and commits every group's records before anything leaves
//!   (the core's [`PsmrCore::finish_turn`]). Flushes take no simulated time.
//! * **Workers, without threads.** The node's worker threads are replaced by steps of
//!   [`Shared::step`]: whenever the plan has work, a random runnable worker polls and executes
//!   its next command, a few µs apart, so that workers interleave differently on every node
//!   and every seed (parallel mode for a worker's own group, synchronous mode through the
//!   barrier for `g_all`), and every run replays from its seed.
//! * **Network.** One TCP-like [`Link`](crate::link::Link) per directed pair of nodes;
//!   batches are lost, duplicated, delayed and reordered; partitions cut a node off one way
//!   or both ways; a group's leader is cut off from sending now and then
//!   ([`PsmrNodeSimConfig::leader_cut_every_us`]), so that another node takes the group over.
//! * **Crashes.** A process crash (of the leader of some group half the time, sometimes of
//!   every node) keeps what each group's directory holds; the node restarts as a new
//!   incarnation, replaying every group's log into an empty service, or, on the seeds that
//!   keep snapshots ([`PsmrNodeSimConfig::snapshots`], small thresholds), from its newest
//!   snapshot and its truncated logs; a node down or cut off past its peers' truncation
//!   installs the cut their group snapshots carry (`docs/psmr-snapshots.md`).
//! * **A lost disk.** In the lost disk's runs ([`PsmrNodeSimConfig::lost_disk_at_us`];
//!   module `lost_disk`) a node loses every group's directory and its snapshots at its worst
//!   moment and restarts rejoining every group ([`Replica::start_rejoin`], at every start
//!   until a rejoin completed: the node's `psmr/rejoined` marker), while the leader that
//!   decided with its lost votes crashes; a second failure while it rejoins lets it come to
//!   lead a group while another still rejoins (`docs/lost-disk.md`, "The psmr engine").
//! * **Full disks.** In some runs a node's disk (or every node's) fills up for a while: its
//!   groups' directories refuse new files and growth, so the node pauses and answers MISCONF
//!   until space returns ([`PsmrNodeSimConfig::disk_full_every_us`]; `node/src/psmr_turn.rs`,
//!   "A full disk").
//! * **Clients.** Each speaks Redis to one node through the node's session and the psmr
//!   engine's mapping of SET NX/XX, GET and DEL to the service's commands
//!   ([`logless_node::psmr_ops`]); answers come back as the node shows them (module
//!   `workload`).
//! * **Phases.** Faults run while the clients work, until `faults_until_us` at the latest;
//!   then everything heals, every node must answer a read of every entry (the liveness
//!   phase), and once every node has executed every group's log as far as the others and its
//!   workers are idle, every replica's service digest must be equal.
//!
//! Not simulated (the log engine's whole-node run has them): power failures and crashes
//! inside a flush, leaders' cuts that lose one Propose before the cut, and the time a flush
//! takes.
//!
//! The run records the entries' history for the per-key linearizability checker
//! ([`PsmrNodeCluster::check`]) and a trace hash: the same seed gives the same trace.
use std::cell::RefCell;
use std::collections::hash_map::DefaultHasher;
use std::collections::{BTreeMap, VecDeque};
use std::hash::Hasher;
use std::sync::Arc;

use bytes::Bytes;
use logless_btree::KvService;
use logless_multipaxos::ids::{Epoch, NodeId};
use logless_multipaxos::message::Message;
use logless_node::durable_log::DurableLog;
use logless_node::psmr_loop::TICK_MS;
use logless_node::psmr_snapshot::CutFile;
use logless_node::psmr_turn::{GroupLogs, PsmrAnswer, PsmrCore, PsmrOutlet};
use logless_node::psmr_workers::{Executed, Shared};
use logless_psmr::config::Config;
use logless_psmr::replica::Replica;
use logless_service::{Digest, Group};
use logless_storage::{Durability, SegmentLogOptions, SimDir};
use rand::rngs::SmallRng;
use rand::seq::IndexedRandom;
use rand::{Rng, SeedableRng};

use crate::history::History;
use crate::link::Connection;
use crate::network::Network;
use crate::queue::EventQueue;
use crate::whole_node::clients::{Clients, Generations};
use crate::whole_node::{
    self, AnswerTo, Outcomes, CLIENT_DELAY_US, INPUTS_PER_TURN_MAX, SETTLE_US_MAX,
};

mod config;
mod lost_disk;
mod workload;

pub use config::{PsmrNodeSimConfig, PsmrNodeSimReport};
use lost_disk::LostDiskStep;
use workload::Record;

#[derive(Debug)]
enum Input {
    Submit { command: Bytes, to: AnswerTo },
    Messages(NodeId, Vec<(Group, Message)>),
}

#[derive(Debug)]
enum Event {
    /// A batch arrives on the link `from -> to`.
    Deliver {
        from: NodeId,
        to: NodeId,
        connection: Connection,
        seq: u64,
        messages: Vec<(Group, Message)>,
    },
    /// A client's command reaches its node.
    Arrive {
        node: NodeId,
        incarnation: u32,
        input: Box<Input>,
    },
    /// A node's turn (new input or its tick).
    Turn {
        node: NodeId,
        incarnation: u32,
    },
    /// One of a node's workers steps.
    Work {
        node: NodeId,
        incarnation: u32,
    },
    /// An answer reaches its client.
    Answer {
        to: AnswerTo,
        answer: PsmrAnswer,
    },
    ClientNext {
        client: u32,
    },
    ClientTimeout {
        client: u32,
        seq: u64,
    },
    Crash,
    Restart {
        node: NodeId,
    },
    Partition,
    ClockJump,
    LeaderCut,
    /// A disk fills up (see [`PsmrNodeSimConfig::disk_full_every_us`]).
    DiskFull,
    /// Space returns to the disk of `node`, unless it filled again since.
    DiskSpace {
        node: NodeId,
    },
    /// A step of the lost disk (see [`PsmrNodeSimConfig::lost_disk_at_us`]).
    LostDisk(LostDiskStep),
}

/// A turn's (or a worker step's) outputs.
#[derive(Default)]
struct Outputs {
    sends: Vec<(NodeId, Vec<(Group, Message)>)>,
    answers: Vec<(AnswerTo, PsmrAnswer)>,
}

impl PsmrOutlet<AnswerTo> for Outputs {
    fn send(&mut self, to: NodeId, messages: Vec<(Group, Message)>) {
        self.sends.push((to, messages));
    }

    fn answer(&mut self, reply: AnswerTo, answer: PsmrAnswer) {
        self.answers.push((reply, answer));
    }
}

/// A running node: its turn core and what its workers share.
struct Running {
    core: PsmrCore<AnswerTo, SimDir>,
    shared: Arc<Shared<KvService>>,
}

#[derive(Default)]
struct SimNode {
    running: Option<Running>,
    incarnation: u32,
    queue: VecDeque<Input>,
    /// The earliest turn already scheduled.
    wake_at_us: Option<u64>,
    /// Whether a worker step is scheduled.
    work_scheduled: bool,
    /// Each group's directory, as the node restarts from it.
    images: BTreeMap<Group, SimDir>,
    /// The snapshots' directory, as the node restarts from it (if the nodes keep snapshots).
    cut_image: Option<SimDir>,
    /// The wall clock's offset from simulated time (ms).
    clock_offset_ms: i64,
    /// What the node sends is lost until then (simulated µs): a leader's cut-off.
    sends_cut_until_us: u64,
    /// What is sent to the node is lost until then (simulated µs): the lost disk's cut.
    receives_cut_until_us: u64,
    /// Whether it lost its disk and rejoins at every start until a rejoin completed in every
    /// group (the node's `psmr/rejoined` marker).
    rejoining: bool,
    /// Whether the second failure of its rejoin is still to come (see
    /// [`PsmrNodeSimConfig::lost_disk_at_us`]).
    second_failure_due: bool,
    /// Whether it led some group during its rejoin.
    rejoin_led: bool,
    /// It stays down until then (simulated µs) while faults last: a lost disk's victim.
    down_until_us: u64,
    /// Its disk is full until then (simulated µs).
    disk_full_until_us: u64,
}

impl SimNode {
    fn up(&self) -> bool {
        self.running.is_some()
    }
}

/// Restores the key-value service from a snapshot's state.
fn restore_kv(service: &mut KvService, state: &[u8]) -> Result<(), String> {
    service.restore(state).map_err(|e| e.to_string())
}

/// How long one worker step takes (µs): the next step of the node's workers comes this much
/// later, at random within the bounds.
const WORK_US: (u64, u64) = (2, 40);

/// A simulated cluster of whole psmr-engine nodes.
pub struct PsmrNodeCluster {
    config: PsmrNodeSimConfig,
    events: EventQueue<Event>,
    rng: SmallRng,
    nodes: BTreeMap<NodeId, SimNode>,
    network: Network,
    clients: Clients<Record>,
    /// The entries' history, for the per-key checker.
    history: History,
    /// The generation of each entry's key.
    generations: Generations,
    faults_active: bool,
    trace: DefaultHasher,
    report: PsmrNodeSimReport,
}

impl PsmrNodeCluster {
    /// A cluster ready to run: every node up with empty logs.
    pub fn new(config: PsmrNodeSimConfig) -> PsmrNodeCluster {
        let mut cluster = PsmrNodeCluster {
            events: EventQueue::default(),
            rng: SmallRng::seed_from_u64(config.seed),
            nodes: BTreeMap::new(),
            network: Network::default(),
            clients: Clients::default(),
            history: History::default(),
            generations: Generations::default(),
            faults_active: true,
            trace: DefaultHasher::new(),
            report: PsmrNodeSimReport::default(),
            config,
        };
        for node in cluster.ids() {
            cluster.nodes.insert(node, SimNode::default());
            cluster.start_node(node);
        }
        cluster.start_clients();
        let f = &cluster.config.faults;
        let first = [
            (f.crash_every_us, Event::Crash),
            (f.partition_every_us, Event::Partition),
            (f.clock_jump_every_us, Event::ClockJump),
            (cluster.config.leader_cut_every_us, Event::LeaderCut),
            (cluster.config.disk_full_every_us, Event::DiskFull),
        ];
        whole_node::schedule_first(&mut cluster.events, &mut cluster.rng, first);
        if cluster.config.lost_disk_at_us > 0 {
            let at = cluster.config.lost_disk_at_us;
            (cluster.events).schedule(at, Event::LostDisk(LostDiskStep::Cut));
        }
        cluster
    }

    /// Runs the workload with faults until it is done (or, at `faults_until_us`, heals and
    /// lets it finish), runs the liveness phase, lets the cluster settle and compares the
    /// replicas' digests. Returns the report; the history is checked by
    /// [`PsmrNodeCluster::check`].
    pub fn run(&mut self) -> &PsmrNodeSimReport {
        while let Some(at) = self.events.next_due_us() {
            if at > self.config.until_us || self.workload_done() {
                break;
            }
            if self.faults_active && at >= self.config.faults_until_us {
                self.heal();
                continue;
            }
            self.step_next();
        }
        if self.faults_active {
            self.heal();
        }
        if !self.workload_done() {
            self.report
                .failures
                .push("the workload did not finish after healing".into());
        }
        self.liveness();
        self.settle();
        self.compare_replicas();
        for node in self.ids() {
            if let Some(running) = self.nodes.get_mut(&node).expect("node").running.take() {
                self.add_figures(&running);
            }
        }
        self.report.sim_time_us = self.events.now_us();
        self.report.trace = self.trace.finish();
        self.count_outcomes();
        &self.report
    }

    /// Checks the entries' history with the per-key linearizability checker; an undecided
    /// search is an error too.
    pub fn check(&self) -> Result<(), String> {
        whole_node::check_per_key(&self.history)
    }

    /// The entries' history.
    pub fn history(&self) -> &History {
        &self.history
    }

    fn ids(&self) -> Vec<NodeId> {
        (1..=self.config.nodes).map(NodeId).collect()
    }

    fn wall_ms(&self, node: NodeId) -> u64 {
        whole_node::wall_ms(self.events.now_us(), self.nodes[&node].clock_offset_ms)
    }

    fn count_outcomes(&mut self) {
        let counts = Outcomes::of(&self.history);
        self.report.operations += counts.operations;
        self.report.acknowledged += counts.acknowledged;
        self.report.not_applied += counts.not_applied;
        self.report.unknown += counts.unknown;
    }

    /// Adds a node's figures to the report, when it crashes or at the end.
    fn add_figures(&mut self, running: &Running) {
        let status = running.core.status();
        self.report.executed += status.executed;
        self.report.executed_synchronous += status.executed_synchronous;
        self.report.skips_proposed += status.skips_proposed;
        self.report.cuts_written += status.cuts_written;
        self.report.cuts_installed += status.cuts_installed;
        self.report.retried += status.retried;
        self.report.timed_out += status.timed_out;
        self.report.space_shortages += status.space_shortages;
        self.report.refused_for_space += status.refused_for_space;
    }

    // ---- nodes -------------------------------------------------------------------------

    /// The engine's configuration on a node: the node's defaults, with the run's mode,
    /// workers and bugs.
    fn engine_config(&self, me: NodeId) -> Config {
        let mut config = Config::new(self.ids(), me, self.config.workers);
        config.mode = self.config.mode;
        config.bugs = self.config.bugs;
        config.paxos.bugs = self.config.paxos_bugs;
        // The groups' quiet time after a restart off, as in the log nodes' simulation: the
        // node's 2 s outlasts the faults, and would hide view changes right after restarts.
        config.paxos.restart_quiet_ms = 0;
        if let Some((cut_every_bytes, group_bytes)) = self.config.snapshots {
            config.cut_every_bytes = cut_every_bytes;
            config.group_snapshot_log_bytes_min = group_bytes;
            config.paxos.snapshot_ratio_percent = 0;
        }
        config
    }

    /// Small segments, so that rolls happen often; smaller still with full disks.
    fn log_options(&self) -> SegmentLogOptions {
        let segment_bytes = if self.config.disk_full_every_us > 0 {
            whole_node::FULL_DISK_SEGMENT_BYTES
        } else {
            64 * 1024
        };
        SegmentLogOptions {
            segment_bytes,
            record_bytes_max: segment_bytes / 4,
            snapshot_bytes_max: 1 << 20,
            ..SegmentLogOptions::new(Durability::Sync)
        }
    }

    /// Opens the node's groups' logs from their last images, recovers the replica into an
    /// empty service and starts a new incarnation.
    fn start_node(&mut self, node: NodeId) {
        let config = self.engine_config(node);
        let (wall_ms, now_us) = (self.wall_ms(node), self.events.now_us());
        let (mode, workers) = (self.config.mode, self.config.workers);
        let timeout_ms = self.config.request_timeout_ms;
        let options = self.log_options();
        let n = self.nodes.get_mut(&node).expect("node");
        n.incarnation += 1;
        let mut logs = BTreeMap::new();
        let mut durable = BTreeMap::new();
        for group in mode.groups(workers) {
            let image = n.images.remove(&group).unwrap_or_default();
            match DurableLog::open_on(image, options.clone()) {
                Ok(opened) => {
                    durable.insert(group, opened.durable);
                    logs.insert(group, opened.log);
                }
                Err(e) => {
                    let failure = format!("node {}: {group:?}'s log does not reopen: {e}", node.0);
                    self.report.failures.push(failure);
                    return;
                }
            }
        }
        let snapshots = self.config.snapshots.is_some();
        let cuts = if snapshots {
            let image = n.cut_image.take().unwrap_or_default();
            let opened = CutFile::open_on(image, options.clone())
                .map_err(|e| e.to_string())
                .and_then(|file| Ok((file.newest()?, file)));
            match opened {
                Ok(opened) => Some(opened),
                Err(e) => {
                    let failure = format!("node {}: its snapshots do not reopen: {e}", node.0);
                    self.report.failures.push(failure);
                    return;
                }
            }
        } else {
            None
        };
        let mut service = KvService::new();
        if let Some((Some(stored), _)) = &cuts {
            if let Err(e) = service.restore(&stored.state) {
                let failure = format!("node {}: its snapshot does not restore: {e}", node.0);
                self.report.failures.push(failure);
                return;
            }
        }
        let cut = cuts.as_ref().and_then(|(stored, _)| stored.as_ref());
        let mut replica = Replica::recover_from(
            config,
            KvService::new(),
            cut.map(|stored| &stored.cut),
            &durable,
            wall_ms,
        );
        if n.rejoining {
            // As the node does: the attempt is the start's incarnation, new at every start.
            replica.start_rejoin(wall_ms, Epoch(u64::from(n.incarnation)));
        }
        let mut shared = Shared::new(replica, service);
        if snapshots {
            shared = shared.with_snapshots(KvService::snapshot, restore_kv);
        }
        let shared = Arc::new(shared);
        let core = PsmrCore::new(
            node,
            shared.clone(),
            GroupLogs::new(logs),
            n.incarnation,
            timeout_ms,
            mode,
            workers,
            wall_ms,
            now_us,
        );
        let core = match cuts {
            Some((stored, file)) => core.with_cut_file(file, stored),
            None => core,
        };
        n.running = Some(Running { core, shared });
        n.wake_at_us = None;
        n.work_scheduled = false;
        self.wake(node, 0);
        self.schedule_work(node);
    }

    fn enqueue(&mut self, node: NodeId, input: Input) {
        let n = self.nodes.get_mut(&node).expect("node");
        if !n.up() {
            return;
        }
        n.queue.push_back(input);
        self.wake(node, 0);
    }

    /// Schedules a turn of `node` in `delay_us`, unless one comes sooner.
    fn wake(&mut self, node: NodeId, delay_us: u64) {
        let at = self.events.now_us() + delay_us;
        let n = self.nodes.get_mut(&node).expect("node");
        if matches!(n.wake_at_us, Some(w) if w <= at) {
            return;
        }
        n.wake_at_us = Some(at);
        let incarnation = n.incarnation;
        self.events
            .schedule(delay_us, Event::Turn { node, incarnation });
    }

    fn turn(&mut self, node: NodeId) {
        let now_us = self.events.now_us();
        let wall_ms = self.wall_ms(node);
        let n = self.nodes.get_mut(&node).expect("node");
        n.wake_at_us = None;
        let Some(running) = n.running.as_mut() else {
            return;
        };
        let core = &mut running.core;
        core.start_turn(wall_ms, now_us);
        for _ in 0..INPUTS_PER_TURN_MAX {
            match n.queue.pop_front() {
                Some(Input::Submit { command, to }) => core.submit(command, to),
                Some(Input::Messages(from, messages)) => core.receive(from, messages),
                None => break,
            }
        }
        let mut outputs = Outputs::default();
        if let Err(e) = core.finish_turn(&mut outputs) {
            let failure = format!("node {}: a log failed: {e}", node.0);
            self.report.failures.push(failure);
            self.crash_node(node);
            return;
        }
        let more = !n.queue.is_empty();
        self.after_turn(node);
        self.release(node, outputs);
        self.wake(node, if more { 0 } else { TICK_MS * 1000 });
        self.schedule_work(node);
    }

    /// Schedules a step of `node`'s workers if one has something to do and none is due.
    fn schedule_work(&mut self, node: NodeId) {
        let delay = self.rng.random_range(WORK_US.0..=WORK_US.1);
        let n = self.nodes.get_mut(&node).expect("node");
        let Some(running) = n.running.as_ref() else {
            return;
        };
        if n.work_scheduled || running.shared.runnable().is_empty() {
            return;
        }
        n.work_scheduled = true;
        let incarnation = n.incarnation;
        self.events
            .schedule(delay, Event::Work { node, incarnation });
    }

    /// One step of a random runnable worker of `node`; the replies of its clients are
    /// answered at once, as the node's loop answers its workers' reports.
    fn work(&mut self, node: NodeId) {
        let now_us = self.events.now_us();
        let wall_ms = self.wall_ms(node);
        let n = self.nodes.get_mut(&node).expect("node");
        n.work_scheduled = false;
        let Some(running) = n.running.as_mut() else {
            return;
        };
        let Some(&worker) = running.shared.runnable().choose(&mut self.rng) else {
            return;
        };
        self.trace.write_u16(worker.0);
        let reports = RefCell::new(Vec::new());
        running
            .shared
            .step(worker, node.0, &|e: Executed| reports.borrow_mut().push(e));
        let mut outputs = Outputs::default();
        running.core.start_turn(wall_ms, now_us);
        for executed in reports.into_inner() {
            running.core.executed(executed, &mut outputs);
        }
        self.release(node, outputs);
        self.schedule_work(node);
    }

    /// Sends a turn's messages and answers.
    fn release(&mut self, node: NodeId, outputs: Outputs) {
        for (to, messages) in outputs.sends {
            self.send(node, to, messages);
        }
        for (to, answer) in outputs.answers {
            self.events
                .schedule(CLIENT_DELAY_US, Event::Answer { to, answer });
        }
    }

    fn send(&mut self, from: NodeId, to: NodeId, messages: Vec<(Group, Message)>) {
        self.report.batches += 1;
        let connection = (self.nodes[&from].incarnation, self.nodes[&to].incarnation);
        let now_us = self.events.now_us();
        let cut_off = now_us < self.nodes[&from].sends_cut_until_us
            || now_us < self.nodes[&to].receives_cut_until_us;
        let (faults, faulty) = (&self.config.faults, self.faults_active);
        let sent =
            (self.network).send(&mut self.rng, faults, faulty, cut_off, from, to, connection);
        for delay in sent.delays_us {
            let messages = messages.clone();
            self.events.schedule(
                delay,
                Event::Deliver {
                    from,
                    to,
                    connection,
                    seq: sent.seq,
                    messages,
                },
            );
        }
    }

    fn deliver(
        &mut self,
        from: NodeId,
        to: NodeId,
        connection: Connection,
        seq: u64,
        messages: Vec<(Group, Message)>,
    ) {
        if !self.nodes[&to].up() {
            return;
        }
        let current = (self.nodes[&from].incarnation, self.nodes[&to].incarnation);
        // The node's transport reconnects and carries on: the groups retransmit what a
        // broken connection lost.
        if (self.network).receive(from, to, connection, current, seq) {
            self.enqueue(to, Input::Messages(from, messages));
        }
    }

    // ---- faults ------------------------------------------------------------------------

    /// Each group's log on `node` as (the next instance to execute, whether `node` leads
    /// the group), in group order; empty while the node is down.
    fn group_logs(&self, node: NodeId) -> Vec<(u64, bool)> {
        let Some(running) = self.nodes[&node].running.as_ref() else {
            return Vec::new();
        };
        let replica = running.shared.replica();
        let groups = replica.groups();
        (self.config.mode.groups(self.config.workers).into_iter())
            .filter_map(|group| groups.replica(group))
            .map(|log| (log.executed_below().0, log.is_leader()))
            .collect()
    }

    /// Each node's groups (next instance to execute, and `*` where it leads) and its
    /// workers' backlog, for failures.
    fn describe_nodes(&self) -> String {
        let described: Vec<String> = (self.ids().into_iter())
            .map(|node| match self.nodes[&node].running.as_ref() {
                None => format!("node {}: down", node.0),
                Some(running) => {
                    let replica = running.shared.replica();
                    let groups: Vec<String> = (self.config.mode)
                        .groups(self.config.workers)
                        .into_iter()
                        .filter_map(|group| replica.groups().replica(group))
                        .map(|log| {
                            let leads = if log.is_leader() { "*" } else { "" };
                            let (view, leader) = (log.view().0, log.leader().0);
                            let executed = log.executed_below().0;
                            format!("{executed}{leads} (view {view}, leader {leader})")
                        })
                        .collect();
                    let plan = replica.plan();
                    let backlog: Vec<usize> = (0..plan.workers())
                        .map(|w| plan.backlog(logless_service::WorkerId(w)))
                        .collect();
                    format!(
                        "node {}: groups executed below [{}], backlog {backlog:?}",
                        node.0,
                        groups.join(", ")
                    )
                }
            })
            .collect();
        described.join("; ")
    }

    /// The groups `node` leads now.
    fn groups_led(&self, node: NodeId) -> usize {
        let logs = self.group_logs(node);
        logs.iter().filter(|(_, leads)| *leads).count()
    }

    /// Crashes a node, one that leads some group half the time, or every node.
    fn crash(&mut self) {
        if !self.faults_active {
            return;
        }
        let every_us = self.config.faults.crash_every_us;
        whole_node::schedule_next(&mut self.events, &mut self.rng, every_us, Event::Crash);
        if self.rng.random_bool(self.config.faults.crash_all) {
            self.report.crashes_all += 1;
            for node in self.ids() {
                self.crash_node(node);
            }
            return;
        }
        let up = self.up_nodes();
        let leaders: Vec<NodeId> = (up.iter().copied())
            .filter(|&n| self.groups_led(n) > 0)
            .collect();
        let pick = if self.rng.random_bool(0.5) {
            leaders.choose(&mut self.rng)
        } else {
            up.choose(&mut self.rng)
        };
        if let Some(&node) = pick {
            if self.one_more_may_crash() {
                self.crash_node(node);
            }
        }
    }

    /// The nodes up now.
    fn up_nodes(&self) -> Vec<NodeId> {
        (self.ids().into_iter())
            .filter(|n| self.nodes[n].up())
            .collect()
    }

    /// Whether one more node may go down and leave a majority up.
    fn one_more_may_crash(&self) -> bool {
        let down = self.nodes.values().filter(|n| !n.up()).count();
        whole_node::one_more_may_crash(down, self.config.nodes)
    }

    /// Stops a node (a process crash: its directories keep what was written).
    fn crash_node(&mut self, node: NodeId) {
        let leader = self.groups_led(node) > 0;
        let n = self.nodes.get_mut(&node).expect("node");
        let Some(running) = n.running.take() else {
            return;
        };
        n.images = (running.core.logs().logs().iter())
            .map(|(group, log)| (*group, log.segment_log().dir().at_crash().process_crash()))
            .collect();
        n.cut_image = (running.core.cut_file()).map(|file| file.dir().at_crash().process_crash());
        n.queue.clear();
        n.wake_at_us = None;
        n.work_scheduled = false;
        n.sends_cut_until_us = 0;
        // The node restarts with space.
        n.disk_full_until_us = 0;
        self.add_figures(&running);
        self.report.crashes += 1;
        self.report.leader_kills += u64::from(leader);
        self.connections_lost(node);
        let down_us = self.config.faults.down_us;
        self.events.schedule(down_us, Event::Restart { node });
    }

    fn partition(&mut self) {
        if !self.faults_active {
            return;
        }
        let every_us = self.config.faults.partition_every_us;
        whole_node::schedule_next(&mut self.events, &mut self.rng, every_us, Event::Partition);
        self.report.partitions += 1;
        let nodes = self.config.nodes;
        self.network.partition(&mut self.rng, nodes);
    }

    /// Cuts the leader of a random group off from sending for a while.
    fn leader_cut(&mut self) {
        if !self.faults_active {
            return;
        }
        let every_us = self.config.leader_cut_every_us;
        whole_node::schedule_next(&mut self.events, &mut self.rng, every_us, Event::LeaderCut);
        let leaders: Vec<NodeId> = (self.ids().into_iter())
            .filter(|&n| self.groups_led(n) > 0)
            .collect();
        if let Some(&node) = leaders.choose(&mut self.rng) {
            let until = self.events.now_us() + self.config.leader_cut_off_us;
            self.nodes.get_mut(&node).expect("node").sends_cut_until_us = until;
            self.report.leader_cuts += 1;
        }
    }

    fn clock_jump(&mut self) {
        if !self.faults_active {
            return;
        }
        let every_us = self.config.faults.clock_jump_every_us;
        whole_node::schedule_next(&mut self.events, &mut self.rng, every_us, Event::ClockJump);
        let max = self.config.faults.clock_jump_ms_max;
        let (node, jump) = whole_node::clock_jump(&mut self.rng, self.config.nodes, max);
        self.nodes.get_mut(&node).expect("node").clock_offset_ms += jump;
        self.report.clock_jumps += 1;
    }

    /// Ends the faults: the network heals, clocks stay where they are, down nodes restart.
    fn heal(&mut self) {
        self.faults_active = false;
        self.network.heal();
        for node in self.ids() {
            let n = self.nodes.get_mut(&node).expect("node");
            n.sends_cut_until_us = 0;
            n.receives_cut_until_us = 0;
            if !n.up() {
                self.start_node(node);
            }
            self.give_space(node);
        }
    }

    /// Fills the disk of one node (one that leads some group half the time) or of every node,
    /// for [`PsmrNodeSimConfig::disk_full_us`]: every group's directory refuses new files.
    fn disk_full(&mut self) {
        if !self.faults_active {
            return;
        }
        let every_us = self.config.disk_full_every_us;
        whole_node::schedule_next(&mut self.events, &mut self.rng, every_us, Event::DiskFull);
        let up = self.up_nodes();
        let leader = up.iter().copied().find(|&n| self.groups_led(n) > 0);
        let all = self.config.disk_full_all;
        let chosen = whole_node::disk_full_nodes(&mut self.rng, up, leader, all);
        let full_us = self.config.disk_full_us;
        let until = self.events.now_us() + full_us;
        for node in chosen {
            self.report.disk_fulls += 1;
            let n = self.nodes.get_mut(&node).expect("node");
            n.disk_full_until_us = n.disk_full_until_us.max(until);
            if let Some(running) = n.running.as_mut() {
                for log in running.core.logs_mut().logs_mut() {
                    log.dir_mut().full = true;
                }
            }
            self.events.schedule(full_us, Event::DiskSpace { node });
        }
    }

    /// Space returns to the disk of `node`.
    fn give_space(&mut self, node: NodeId) {
        let n = self.nodes.get_mut(&node).expect("node");
        n.disk_full_until_us = 0;
        if let Some(running) = n.running.as_mut() {
            for log in running.core.logs_mut().logs_mut() {
                log.dir_mut().full = false;
            }
        }
    }

    /// Each up node's position in every group's log, and whether its workers are idle with
    /// no cut to install.
    fn positions(&self) -> Vec<(Vec<u64>, bool)> {
        (self.nodes.iter())
            .filter_map(|(&id, n)| {
                let running = n.running.as_ref()?;
                let executed = self.group_logs(id).into_iter().map(|(e, _)| e).collect();
                // A cut that waits to be installed is work too: until it is, the service
                // holds what it held before (seed 4859 of the lost disk's runs compared a
                // replica's digest there).
                let replica = running.shared.replica();
                let idle = replica.plan().is_drained() && replica.installing().is_none();
                Some((executed, idle))
            })
            .collect()
    }

    /// Runs the healed cluster until every replica has delivered every group's log as far as
    /// the others, installed any cut it waited for and its workers executed everything, or for
    /// [`SETTLE_US_MAX`].
    fn settle(&mut self) {
        let deadline = self.events.now_us() + SETTLE_US_MAX;
        while self.events.next_due_us().is_some_and(|at| at <= deadline) {
            self.step_next();
            let positions = self.positions();
            let first = positions.first().map(|(executed, _)| executed);
            if positions
                .iter()
                .all(|(executed, idle)| *idle && Some(executed) == first)
            {
                return;
            }
        }
    }

    /// After the liveness phase and settling, every replica's service must have the same
    /// digest.
    fn compare_replicas(&mut self) {
        // Each up node's digest, and the node described for the failure.
        let digests: Vec<(Digest, String)> = (self.nodes.iter())
            .filter_map(|(&id, n)| {
                let digest = n.running.as_ref()?.shared.digest();
                let executed: Vec<u64> = (self.group_logs(id).into_iter())
                    .map(|(executed, _)| executed)
                    .collect();
                let described = format!(
                    "node {}: {digest} (groups executed below {executed:?})",
                    id.0
                );
                Some((digest, described))
            })
            .collect();
        if digests.windows(2).any(|w| w[0].0 != w[1].0) {
            let described: Vec<&str> = digests.iter().map(|(_, d)| d.as_str()).collect();
            self.report.failures.push(format!(
                "the replicas' digests differ after settling: {}",
                described.join("; ")
            ));
        }
    }

    /// Takes the next event, adds it to the trace and handles it.
    fn step_next(&mut self) {
        let (at, event) = self.events.pop().expect("an event is due");
        self.trace.write_u64(at);
        self.step(event);
    }

    fn step(&mut self, event: Event) {
        let current = |cluster: &Self, node: NodeId, incarnation: u32| {
            let n = &cluster.nodes[&node];
            n.up() && n.incarnation == incarnation
        };
        match event {
            Event::Deliver {
                from,
                to,
                connection,
                seq,
                messages,
            } => {
                self.trace.write_u64(seq);
                self.deliver(from, to, connection, seq, messages);
            }
            Event::Arrive {
                node,
                incarnation,
                input,
            } => {
                if current(self, node, incarnation) {
                    self.enqueue(node, *input);
                }
            }
            Event::Turn { node, incarnation } => {
                // A turn that an earlier one superseded (it was scheduled as a tick, and
                // input woke the node sooner) is not taken: each turn schedules its tick.
                let due = self.nodes[&node].wake_at_us == Some(self.events.now_us());
                if current(self, node, incarnation) && due {
                    self.turn(node);
                }
            }
            Event::Work { node, incarnation } => {
                if current(self, node, incarnation) {
                    self.work(node);
                }
            }
            Event::Answer { to, answer } => self.client_done(to.client, to.seq, Some(answer)),
            Event::ClientNext { client } => self.client_next(client),
            Event::ClientTimeout { client, seq } => self.client_done(client, seq, None),
            Event::Crash => self.crash(),
            Event::Restart { node } => {
                let n = &self.nodes[&node];
                if !n.up() && self.events.now_us() >= n.down_until_us {
                    self.start_node(node);
                }
            }
            Event::Partition => self.partition(),
            Event::ClockJump => self.clock_jump(),
            Event::LeaderCut => self.leader_cut(),
            Event::DiskFull => self.disk_full(),
            Event::LostDisk(step) => self.lost_disk(step),
            Event::DiskSpace { node } => {
                if self.events.now_us() >= self.nodes[&node].disk_full_until_us {
                    self.give_space(node);
                }
            }
        }
    }
}
