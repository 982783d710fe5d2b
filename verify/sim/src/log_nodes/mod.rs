//! Whole nodes of the log engine in simulation: every node runs the node's own log turn core
//! ([`LogCore`]: the Multi-Paxos replica of the register map, its client table, the front
//! end's retries and request timeout, one commit per turn) over its real durable log
//! ([`DurableLog`]) on a simulated directory, on a simulated network and clock driven by one
//! seed — what [`crate::nodes`] is for the per-key engine's shards.
//!
//! What is simulated, and how it matches the running node ([`logless_node::log_loop`]):
//! * **Turns.** A node takes everything queued when its turn starts, ticks its replica at
//!   least every [`TICK_MS`](logless_node::log_loop::TICK_MS) ms, and is busy for the flush
//!   time after a turn that wrote: inputs arriving meanwhile wait, and the turn's messages and
//!   answers leave when the flush ends (persist before send).
//! * **Network.** One TCP-like [`Link`](crate::link::Link) per directed pair of nodes;
//!   batches are lost, duplicated, delayed and reordered; partitions cut a node off one way
//!   or both ways. In some runs a leader's cut: the leader loses one turn's Proposes and is
//!   cut off just after a later Propose left (see
//!   [`LogNodeSimConfig::leader_cut_every_us`]), so that the next leader's phase 1 finds a
//!   gap to fill.
//! * **Crashes.** A crash (half the time of the leader of the moment, sometimes of every node)
//!   may land inside a flush (with a run's small snapshot policy, sometimes one that writes a
//!   snapshot file), at a crash point among the directory's operations. In `sync`
//!   mode it is a process crash or a power failure: the unsynced directory operations kept up
//!   to some point, any subset of the unpersisted sectors, one more torn on a word boundary.
//!   In `mmap` mode it is a process crash. A node restarts from that image as a new
//!   incarnation (new client ids), loading its newest snapshot and replaying its log.
//! * **mPaxos.** Under `--recovery pmem` ([`LogNodeSimConfig::mpaxos`]) the directory stands
//!   for persistent memory (`emulp`): crashes are power failures as in `sync` mode, keeping
//!   what was persisted, any subset of the rest and one torn on a word boundary. The medium
//!   is simulated in 512-byte sectors where persistent memory persists 64-byte cache lines: a
//!   persist here makes its whole sector durable, so the images are those of a medium that
//!   persists at sector grain (fewer than cache lines allow). A restarted node resumes its log
//!   and takes part at once; its state machine is restored from the persistent snapshot "off
//!   the loop" (an event up to [`REBUILD_US_MAX`] later, handed in as the node's loop takes
//!   it), and the run counts the turns that voted or promised before that. A node that lost
//!   its persistent memory and rejoins is handed that machine too, after its rejoin ended the
//!   rebuild itself: the replica drops it.
//! * **mPaxosSM.** Under `--recovery pmem-sm` ([`LogNodeSimConfig::mpaxos_sm`]) each node's
//!   registers in place ([`RegistersInPlace`], the node's `registers.slots`) are on a simulated
//!   persistent medium of their own. A node starts as the node does: its log resumed with the
//!   stand-in [`LogMachine::awaiting_registers`] (it votes, executes nothing), its registers
//!   opened ([`LogMachine::open_in_place`]) in an event up to [`REBUILD_US_MAX`] later, so that
//!   messages, catch-up answers carrying snapshots (which the node's core drops meanwhile),
//!   view changes and crashes land in between, and the opened machine handed over as the
//!   node's loop takes it ([`LogCore::finish_rebuild`]). A crash before the hand-over restarts
//!   from the medium as it is then (the open's own writes on it, if it ran). A node that lost
//!   its disk opens them before it starts, as the node does for a rejoin. Half the crashes
//!   inside a flush land among the registers' media operations, the turn's log records lost
//!   with them (they are persisted after the registers), and a power failure keeps any subset
//!   of both media's unpersisted sectors and tears one.
//! * **EpochSS.** Under `--recovery epoch` ([`LogNodeSimConfig::epoch_ss`]) a node starts with
//!   [`LogCore::start_epoch`] over the node's real [`EpochFile`] (in a temporary directory) and
//!   takes messages with their sender's epoch; batches sent before a crash may arrive after the
//!   restart. A node recovering counts as down; once every node crashed the run expects
//!   CLUSTERDOWN from every node to the end.
//! * **Disks.** In some runs disks fill up for a while (the leader's, another's, or every
//!   node's): the log directory refuses new segments and snapshot files, and the node pauses
//!   and answers MISCONF until space returns. In some runs one disk is lost at its worst moment
//!   and its node rejoins ([`LogNodeSimConfig::lost_disk_at_us`]; module `disks`).
//! * **Snapshots.** The engine's snapshot policy is the run's: a few hundred bytes of log
//!   between snapshots on a third of the seeds, so that logs are truncated and a replica back
//!   from a crash or a partition catches up from another's snapshot.
//! * **Clients.** Each speaks Redis to one node through the node's session (MULTI/EXEC
//!   included) and the node's mapping of its steps to log operations
//!   ([`logless_node::log_ops`]); its answers come back as the node shows them, and TRYAGAIN
//!   and UNCERTAIN are read as a client reads them. The commands and the
//!   two histories they make (module `workload`).
//! * **Phases.** Faults run while the clients work, until `faults_until_us` at the latest;
//!   then everything heals, every node must
//!   answer a write and a read of every key (the liveness phase), and once the cluster has
//!   settled every replica must hold the same map.
//!
//! The run records the histories for the per-key linearizability checker and the whole-state
//! atomicity checker ([`LogNodeCluster::check`]) and a trace hash: the same seed gives the same
//! trace.
use std::collections::hash_map::DefaultHasher;
use std::collections::{BTreeMap, VecDeque};
use std::hash::Hasher;

use logless_multipaxos::config::{Config, Recovery, Snapshots};
use logless_multipaxos::ids::{Epoch, Instance, NodeId};
use logless_multipaxos::kv::{Operation, RegisterMachine};
use logless_multipaxos::message::Message;
use logless_multipaxos::replica::Status;
use logless_multipaxos::state_machine::StateMachine;
use logless_node::durable_log::DurableLog;
use logless_node::epoch_file::{self, EpochFile};
use logless_node::log_machine::{self, LogMachine};
use logless_node::log_turn::{LogAnswer, LogCore, LogOutlet, LogStatus};
use logless_node::registers_in_place::RegistersInPlace;
use logless_storage::media::{MediaSnapshot, SimMedia, SECTOR_BYTES};
use logless_storage::{Durability, SegmentLogOptions, SimDir};
use rand::rngs::SmallRng;
use rand::seq::IndexedRandom;
use rand::{Rng, SeedableRng};

use crate::atomicity;
use crate::history::{Clocks, History};
use crate::link::Connection;
use crate::network::Network;
use crate::queue::EventQueue;
use crate::whole_node::clients::{Clients, Generations};
use crate::whole_node::{
    self, AnswerTo, Outcomes, CHECK_STATES_MAX, CLIENT_DELAY_US, INPUTS_PER_TURN_MAX,
    SETTLE_US_MAX, WALL_START_MS,
};

mod config;
mod disks;
mod stray;
mod workload;

pub use config::{LogNodeSimConfig, LogNodeSimReport, REBUILD_US_MAX};
use disks::LostDiskStep;
use workload::Record;

#[derive(Debug)]
enum Input {
    Submit {
        operation: Operation,
        to: AnswerTo,
    },
    Messages {
        from: NodeId,
        /// The sender's epoch when it sent them (EpochSS; 0 otherwise).
        epoch: Epoch,
        messages: Vec<Message>,
    },
    /// A resumed node's state machine, rebuilt off its loop (mPaxos), or opened over its
    /// registers in place (mPaxosSM).
    Rebuilt(Box<LogMachine>),
}

#[derive(Debug)]
enum Event {
    /// A batch arrives on the link `from -> to`.
    Deliver {
        from: NodeId,
        to: NodeId,
        connection: Connection,
        seq: u64,
        epoch: Epoch,
        messages: Vec<Message>,
    },
    /// A client's operation reaches its node (boxed, as the answer below: events move
    /// through the queue by value, so the largest sets the cost of every one).
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
    /// A node's flush ends: its held outputs leave.
    TurnDone {
        node: NodeId,
        incarnation: u32,
    },
    /// An answer reaches its client.
    Answer {
        to: AnswerTo,
        answer: Box<LogAnswer>,
    },
    ClientNext {
        client: u32,
    },
    ClientTimeout {
        client: u32,
        seq: u64,
    },
    Crash,
    /// A crash inside the flush that `incarnation` of `node` is doing.
    CrashInFlush {
        node: NodeId,
        incarnation: u32,
    },
    Restart {
        node: NodeId,
    },
    /// The rebuild of the state machine of `incarnation` of `node`, resumed under mPaxos, ends;
    /// under mPaxosSM its registers in place are opened.
    Rebuilt {
        node: NodeId,
        incarnation: u32,
    },
    Partition,
    ClockJump,
    /// The leader of the moment is about to lose a Propose and be cut off (see
    /// [`LogNodeSimConfig::leader_cut_every_us`]).
    LeaderCut,
    /// A disk fills up (see [`LogNodeSimConfig::disk_full_every_us`]).
    DiskFull,
    /// Space may have returned to the disk of `node`.
    DiskSpace {
        node: NodeId,
    },
    /// A step of the lost disk (see [`LogNodeSimConfig::lost_disk_at_us`]).
    LostDisk(LostDiskStep),
    /// A stray vote starts (see [`LogNodeSimConfig::stray_vote_at_us`]).
    StrayVote,
}

/// A turn's outputs, held until its flush ends.
#[derive(Default)]
struct Held {
    sends: Vec<(NodeId, Vec<Message>)>,
    answers: Vec<(AnswerTo, LogAnswer)>,
    /// Simulated time of the turn (µs), for the core's latency figures.
    now_us: u64,
}

impl LogOutlet<AnswerTo> for Held {
    fn send(&mut self, to: NodeId, messages: Vec<Message>) {
        self.sends.push((to, messages));
    }

    fn answer(&mut self, reply: AnswerTo, answer: LogAnswer) {
        self.answers.push((reply, answer));
    }

    fn mono_us(&self) -> u64 {
        self.now_us
    }
}

/// Which flush of a node a crash waits for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum FlushCrash {
    /// The next that writes anything.
    Any,
    /// The next that writes a snapshot file.
    Snapshot,
}

#[derive(Default)]
struct SimNode {
    core: Option<LogCore<AnswerTo, SimDir>>,
    incarnation: u32,
    queue: VecDeque<Input>,
    busy: bool,
    held: Held,
    /// The earliest turn already scheduled.
    wake_at_us: Option<u64>,
    /// Whether the turn being flushed froze its directory at a crash point.
    crash_point_armed: bool,
    /// Whether that crash point is among the operations of its registers in place (mPaxosSM;
    /// the directory frozen before the turn's operations).
    registers_crash_armed: bool,
    /// A crash waits for this node's next flush (or the next that writes a snapshot), to land
    /// inside it.
    flush_crash: Option<FlushCrash>,
    /// Whether the turn being flushed wrote a snapshot file.
    flush_writes_snapshot: bool,
    /// The directory the node restarts from.
    image: SimDir,
    /// The medium of its registers in place it restarts from (mPaxosSM), or opens once its
    /// log resumed.
    registers_image: Vec<u8>,
    /// The log's snapshot at the start, which the registers opened later are checked against
    /// (mPaxosSM; the node's open off its loop takes it with it).
    registers_snapshot: Option<logless_multipaxos::message::Snapshot>,
    /// The wall clock's offset from simulated time (ms).
    clock_offset_ms: i64,
    /// A leader's fault under way: a Propose to lose, or a cut-off to make.
    leader_cut: Option<LeaderCut>,
    /// What the node sends is lost until then (simulated µs): a leader's cut-off, or a node cut
    /// off while a disk is lost.
    sends_cut_until_us: u64,
    /// What is sent to the node is lost until then (simulated µs).
    receives_cut_until_us: u64,
    /// Its disk is full until then (simulated µs).
    disk_full_until_us: u64,
    /// Whether it lost its disk and rejoins at every start until a rejoin completed (the
    /// node's `log/rejoined` marker).
    rejoining: bool,
}

/// The steps of a leader's cut (see [`LogNodeSimConfig::leader_cut_every_us`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum LeaderCut {
    /// The next turn that sends a Propose loses everything it sends.
    LoseNextPropose,
    /// Proposes of instances up to `lost` are lost, until a turn proposes a higher instance:
    /// its other messages are the last that leave for a while.
    CutOffAfterLaterPropose {
        /// The highest instance whose Propose was lost.
        lost: Instance,
    },
}

impl SimNode {
    fn up(&self) -> bool {
        self.core.is_some()
    }
}

/// How often a node's loop turns when nothing else wakes it (the node's tick).
const TICK_MS: u64 = logless_node::log_loop::TICK_MS;
/// The most media operations of the registers in place in a turn (its registers' writes, their
/// persist, "applied up to" and its persist): a crash among them lands among the first this
/// many.
const REGISTERS_TURN_OPS: usize = 24;
/// How late a late copy arrives (µs): after its sender could have crashed and restarted.
const LATE_COPY_US: (u64, u64) = (100_000, 600_000);
/// The most bytes of a register's value in the workload (the registers' record size).
const REGISTER_VALUE_BYTES_MAX: usize = 256;

/// The most directory operations of a turn that writes a snapshot (its records, their persist,
/// the snapshot file's creation, writes, persist, rename and sync, the truncation): a crash
/// waiting for such a turn lands among the first this many.
const SNAPSHOT_TURN_OPS: usize = 32;

/// A simulated cluster of whole log-engine nodes.
pub struct LogNodeCluster {
    config: LogNodeSimConfig,
    events: EventQueue<Event>,
    rng: SmallRng,
    nodes: BTreeMap<NodeId, SimNode>,
    network: Network,
    clients: Clients<Record>,
    /// The single-key registers' history, for the per-key checker.
    history: History,
    /// The counters' history, for the atomicity checker (times in µs).
    counters: Vec<atomicity::Event>,
    /// The generation of each register's key.
    generations: Generations,
    /// The farthest a node's log clock was from simulated time at a turn (µs).
    skew_us_max: u64,
    faults_active: bool,
    /// The nodes' epoch files (EpochSS): a real directory, as on the node.
    epoch_dirs: Option<tempfile::TempDir>,
    /// Whether every node crashed under EpochSS: the state is lost, and the cluster must
    /// refuse service to the end.
    state_lost: bool,
    /// A stray vote under way (module `stray`).
    stray: Option<stray::StrayVote>,
    trace: DefaultHasher,
    report: LogNodeSimReport,
}

impl LogNodeCluster {
    /// A cluster ready to run: every node up with an empty log.
    pub fn new(config: LogNodeSimConfig) -> LogNodeCluster {
        let mut cluster = LogNodeCluster {
            events: EventQueue::default(),
            rng: SmallRng::seed_from_u64(config.seed),
            nodes: BTreeMap::new(),
            network: Network::default(),
            clients: Clients::default(),
            history: History::default(),
            counters: Vec::new(),
            generations: Generations::default(),
            skew_us_max: 0,
            faults_active: true,
            epoch_dirs: (config.recovery == Recovery::Epoch).then(|| {
                tempfile::Builder::new()
                    .prefix("logless-sim-epochs")
                    .tempdir()
                    .expect("a temporary directory for the epoch files")
            }),
            state_lost: false,
            stray: None,
            trace: DefaultHasher::new(),
            report: LogNodeSimReport::default(),
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
        if cluster.config.stray_vote_at_us > 0 {
            let at = cluster.config.stray_vote_at_us;
            cluster.events.schedule(at, Event::StrayVote);
        }
        cluster
    }

    /// Runs the workload with faults until it is done (or, at `faults_until_us`, heals and
    /// lets it finish), runs the liveness phase, lets the cluster settle and compares the replicas. Returns the
    /// report; the histories are checked by [`LogNodeCluster::check`].
    pub fn run(&mut self) -> &LogNodeSimReport {
        let faults_until = self.config.faults_until_us;
        while let Some(at) = self.events.next_due_us() {
            if at > self.config.until_us {
                break;
            }
            if self.workload_done() {
                break;
            }
            if self.faults_active && at >= faults_until {
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
            if let Some(core) = self.nodes.get_mut(&node).expect("node").core.take() {
                self.add_figures(node, &core);
                self.nodes.get_mut(&node).expect("node").core = Some(core);
            }
        }
        self.report.sim_time_us = self.events.now_us();
        self.report.clock_skew_ms_max = self.skew_us_max.div_ceil(1000);
        self.history.clocks = self.clocks();
        self.report.trace = self.trace.finish();
        self.count_outcomes();
        &self.report
    }

    /// Checks both histories: every single-key register's on its own with the per-key checker,
    /// the counters' as one whole state with the atomicity checker, which sees a transfer or
    /// an MSET taken apart. An undecided search is an error too.
    pub fn check(&self) -> Result<(), String> {
        whole_node::check_per_key(&self.history)?;
        match atomicity::check(&self.counters, CHECK_STATES_MAX) {
            Ok(()) => Ok(()),
            Err(atomicity::Refusal::Inconclusive { states }) => Err(format!(
                "counters' search budget exhausted after {states} states"
            )),
            Err(refusal) => Err(format!("counters' history not linearizable: {refusal:?}")),
        }
    }

    /// The single-key registers' history.
    pub fn history(&self) -> &History {
        &self.history
    }

    /// The counters' history (times in simulated µs).
    pub fn counter_history(&self) -> &[atomicity::Event] {
        &self.counters
    }

    fn ids(&self) -> Vec<NodeId> {
        (1..=self.config.nodes).map(NodeId).collect()
    }

    fn wall_ms(&self, node: NodeId) -> u64 {
        whole_node::wall_ms(self.events.now_us(), self.nodes[&node].clock_offset_ms)
    }

    /// What bounds the stamps, for the per-key checker: a leader stamps a batch with its
    /// clock (never below an earlier stamp) between the call and the return of each operation
    /// in it, and no clock was farther than the skew from simulated time.
    fn clocks(&self) -> Clocks {
        Clocks {
            epoch_ms: WALL_START_MS,
            // Stamps are whole milliseconds of clocks read at µs instants: one more.
            skew_ms: self.skew_us_max.div_ceil(1000) + 1,
            stamps_us: BTreeMap::new(),
        }
    }

    fn count_outcomes(&mut self) {
        let counts = Outcomes::of(&self.history);
        self.report.operations += counts.operations;
        self.report.acknowledged += counts.acknowledged;
        self.report.not_applied += counts.not_applied;
        self.report.unknown += counts.unknown;
        for event in &self.counters {
            self.report.operations += 1;
            self.report.counter_operations += 1;
            if matches!(
                event.op,
                atomicity::CounterOp::Transfer { .. } | atomicity::CounterOp::MSet { .. }
            ) {
                self.report.multi_key_operations += 1;
            }
            match event.returned {
                Some(_) => self.report.acknowledged += 1,
                None => self.report.unknown += 1,
            }
        }
    }

    /// Adds a node's figures to the report, when it crashes or at the end; a decision that
    /// contradicted one the node already knew (two values chosen in one instance) is a failure.
    fn add_figures(&mut self, node: NodeId, core: &LogCore<AnswerTo, SimDir>) {
        let stats = core.replica().stats();
        self.report.gaps_filled += stats.noops_proposed;
        let conflicts = stats.conflicting_decisions;
        if conflicts > 0 {
            self.report.failures.push(format!(
                "node {}: {conflicts} decisions contradicted one already known",
                node.0
            ));
        }
        self.add_status(&core.status());
    }

    fn add_status(&mut self, status: &LogStatus) {
        self.report.view_changes += status.view_changes;
        self.report.duplicates_skipped += status.duplicates_skipped;
        self.report.snapshots_taken += status.snapshots_taken;
        self.report.snapshots_installed += status.snapshots_installed;
        self.report.space_shortages += status.space_shortages;
        self.report.refused_for_space += status.refused_for_space;
        self.report.recoveries += status.recoveries;
        self.report.retried += status.retried;
        self.report.timed_out += status.timed_out;
    }

    // ---- nodes -------------------------------------------------------------------------

    /// The engine's configuration on a node: the node's defaults, with the run's snapshot
    /// policy and small snapshot pieces.
    fn engine_config(&self, me: NodeId) -> Config {
        let mut config = Config::new(self.ids(), me);
        config.snapshot_log_bytes_min = self.config.snapshot_log_bytes_min;
        config.snapshot_ratio_percent = self.config.snapshot_ratio_percent;
        // Snapshots travel in pieces of half a KiB (not the node's 4 MiB), through the
        // nodes' peer links and under the faults.
        config.snapshot_chunk_bytes = 512;
        config.bugs = self.config.bugs;
        config.recovery = self.config.recovery;
        config.restart_quiet_ms = self.config.restart_quiet_ms;
        if self.config.in_place {
            // As the node under pmem-sm: the registers are the durable state.
            config.snapshots = Snapshots::OnDemand;
        }
        config
    }

    fn epoch_mode(&self) -> bool {
        self.config.recovery == Recovery::Epoch
    }

    /// The directory of `node`'s epoch file (EpochSS).
    fn epoch_dir(&self, node: NodeId) -> std::path::PathBuf {
        let dirs = self
            .epoch_dirs
            .as_ref()
            .expect("EpochSS runs have epoch directories");
        dirs.path().join(format!("node-{}", node.0))
    }

    /// Opens the registers in place of `node` from its last image (mPaxosSM), as the node
    /// opens `registers.slots` ([`LogMachine::open_file`]) on the simulated medium.
    fn open_registers(
        &mut self,
        node: NodeId,
        snapshot: Option<&logless_multipaxos::message::Snapshot>,
    ) -> Result<LogMachine, String> {
        let n = self.nodes.get_mut(&node).expect("node");
        let media = SimMedia::from_image(std::mem::take(&mut n.registers_image));
        let mut options =
            log_machine::store_options(self.config.durability, REGISTER_VALUE_BYTES_MAX);
        // Small simulated media: grown as needed, in one piece.
        options.file_bytes_max = 1 << 22;
        options.append_chunk_bytes = 0;
        let (mut store, registers, _) =
            RegistersInPlace::open_on(media, options).map_err(|e| e.to_string())?;
        if self.config.ignore_op_numbers {
            store.ignore_op_numbers();
        }
        LogMachine::open_in_place(RegisterMachine::default(), store, registers, snapshot)
            .map_err(|e| e.to_string())
    }

    /// Small segments, so that truncations remove files and rolls happen often.
    fn log_options(&self) -> SegmentLogOptions {
        SegmentLogOptions {
            segment_bytes: self.config.segment_bytes,
            record_bytes_max: self.config.segment_bytes / 4,
            snapshot_bytes_max: 1 << 20,
            ..SegmentLogOptions::new(self.config.durability)
        }
    }

    /// Opens the node's log from its last image and starts a new incarnation.
    fn start_node(&mut self, node: NodeId) {
        if self.epoch_mode() {
            return self.start_epoch_node(node);
        }
        let config = self.engine_config(node);
        let options = self.log_options();
        let (wall_ms, now_us) = (self.wall_ms(node), self.events.now_us());
        let timeout_ms = self.config.request_timeout_ms;
        let n = self.nodes.get_mut(&node).expect("node");
        n.incarnation += 1;
        match DurableLog::open_on(std::mem::take(&mut n.image), options) {
            Ok(opened) => {
                let from_snapshot = opened.durable.snapshot.is_some();
                self.report.restarts_from_snapshot += u64::from(from_snapshot);
                let rejoining = self.nodes[&node].rejoining;
                let machine = if self.config.in_place && !rejoining {
                    // As the node: the log resumes at once, the registers open later.
                    let n = self.nodes.get_mut(&node).expect("node");
                    n.registers_snapshot = opened.durable.snapshot.clone();
                    LogMachine::awaiting_registers()
                } else if self.config.in_place {
                    // A rejoin catches up on the machine it starts with: opened first.
                    match self.open_registers(node, opened.durable.snapshot.as_ref()) {
                        Ok(machine) => machine,
                        Err(e) => {
                            let failure =
                                format!("node {} cannot reopen its registers: {e}", node.0);
                            self.report.failures.push(failure);
                            return;
                        }
                    }
                } else {
                    LogMachine::from(RegisterMachine::default())
                };
                let n = self.nodes.get_mut(&node).expect("node");
                let mut core = LogCore::recover(
                    config,
                    machine,
                    &opened.durable,
                    opened.log,
                    n.incarnation,
                    timeout_ms,
                    wall_ms,
                    now_us,
                );
                let resumed = core.replica().status() == Status::Rebuilding;
                if n.rejoining {
                    // Under mPaxos the rejoin ends the rebuild itself; the rebuild scheduled
                    // below still hands over a machine, which the replica must drop.
                    core.start_rejoin(n.incarnation);
                }
                if self.config.snapshots_into_the_stand_in {
                    core.inject_snapshots_into_the_stand_in();
                }
                n.core = Some(core);
                let incarnation = n.incarnation;
                if resumed {
                    self.report.resumed += 1;
                    let after_us = self.rng.random_range(0..=REBUILD_US_MAX);
                    (self.events).schedule(after_us, Event::Rebuilt { node, incarnation });
                }
                self.wake(node, 0);
            }
            Err(e) => {
                let failure = format!("node {} cannot reopen its log: {e}", node.0);
                self.report.failures.push(failure);
            }
        }
    }

    /// Starts `node` under EpochSS as the node does: its epoch file read, the epoch after it
    /// taken (after a lost disk, one above every epoch its lost life used:
    /// [`epoch_file::last_before_rejoin`], this start's incarnation counting its starts), the
    /// log in memory.
    fn start_epoch_node(&mut self, node: NodeId) {
        let config = self.engine_config(node);
        let options = self.log_options();
        let (wall_ms, now_us) = (self.wall_ms(node), self.events.now_us());
        let timeout_ms = self.config.request_timeout_ms;
        let dir = self.epoch_dir(node);
        let n = self.nodes.get_mut(&node).expect("node");
        n.incarnation += 1;
        let opened = EpochFile::open(&dir)
            .map_err(|e| e.to_string())
            .and_then(|file| {
                let log = DurableLog::open_on(SimDir::new(), options).map_err(|e| e.to_string())?;
                Ok((file, log))
            });
        let ((file, last), opened) = match opened {
            Ok(opened) => opened,
            Err(e) => {
                let failure = format!("node {} cannot open its epoch file: {e}", node.0);
                self.report.failures.push(failure);
                return;
            }
        };
        let last = if n.rejoining {
            Some(epoch_file::last_before_rejoin(last, n.incarnation))
        } else {
            last
        };
        self.report.epoch_restarts += u64::from(last.is_some());
        let core = LogCore::start_epoch(
            config,
            RegisterMachine::default(),
            last,
            opened.log.with_epoch_file(file),
            n.incarnation,
            timeout_ms,
            wall_ms,
            now_us,
        );
        n.core = Some(core);
        self.wake(node, 0);
    }

    fn enqueue(&mut self, node: NodeId, input: Input) {
        let n = self.nodes.get_mut(&node).expect("node");
        if !n.up() {
            return;
        }
        n.queue.push_back(input);
        self.wake(node, 0);
    }

    /// Schedules a turn of `node` in `delay_us`, unless one comes sooner or it is flushing.
    fn wake(&mut self, node: NodeId, delay_us: u64) {
        let at = self.events.now_us() + delay_us;
        let n = self.nodes.get_mut(&node).expect("node");
        if n.busy || matches!(n.wake_at_us, Some(w) if w <= at) {
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
        let flush_us = self.config.flush_us;
        // A turn that writes does a few operations: its records, their persist, a roll; one
        // that writes a snapshot many more.
        let flush_crash = self.nodes[&node].flush_crash;
        let crash_at_op = if flush_crash == Some(FlushCrash::Snapshot) {
            self.rng.random_range(0..SNAPSHOT_TURN_OPS)
        } else {
            self.rng.random_range(0..4usize)
        };
        // Under mPaxosSM half the crashes inside a flush land among the registers' operations
        // (persisted before the turn's log records, which the crash loses: the directory is
        // frozen before them).
        let registers_crash_at_op = (flush_crash == Some(FlushCrash::Any)
            && self.config.in_place
            && self.rng.random_bool(0.5))
        .then(|| self.rng.random_range(0..REGISTERS_TURN_OPS));
        let epochs = self.epoch_mode();
        let n = self.nodes.get_mut(&node).expect("node");
        n.wake_at_us = None;
        let Some(core) = n.core.as_mut() else {
            return;
        };
        core.start_turn(wall_ms, now_us);
        let snapshots = snapshots_written(core);
        let installs = core.replica().stats().snapshots_installed;
        n.held.now_us = now_us;
        let skew_us = (core.now_ms() * 1000).abs_diff(WALL_START_MS * 1000 + now_us);
        self.skew_us_max = self.skew_us_max.max(skew_us);
        // While the registers open, a crash drawn among their operations lands among those of
        // the machine handed over in this turn, if one is.
        let mut arm_on_hand_over = None;
        if let Some(at_op) = registers_crash_at_op {
            core.log_mut().dir_mut().arm_crash_point(0);
            match core.awaiting_registers() {
                true => arm_on_hand_over = Some(at_op),
                false => registers_media(core).arm_crash_point(at_op),
            }
        } else if flush_crash.is_some() {
            core.log_mut().dir_mut().arm_crash_point(crash_at_op);
        }
        let mut registers_ops_before = registers_ops(core);
        for _ in 0..INPUTS_PER_TURN_MAX {
            match n.queue.pop_front() {
                Some(Input::Submit { operation, to }) => core.submit(&operation, to),
                // As the node's loop: every message with its sender's epoch.
                Some(Input::Messages {
                    from,
                    epoch,
                    messages,
                }) if epochs => {
                    core.receive_in_epochs(from, messages.into_iter().map(|m| (epoch, m)).collect())
                }
                Some(Input::Messages { from, messages, .. }) => {
                    if core.awaiting_registers() {
                        let snapshots = messages.iter().filter(|m| {
                            matches!(
                                m,
                                Message::CatchUpResponse {
                                    snapshot: Some(_),
                                    ..
                                }
                            )
                        });
                        self.report.snapshots_while_opening += snapshots.count() as u64;
                    }
                    core.receive(from, messages)
                }
                Some(Input::Rebuilt(mut machine)) => {
                    let taken = core.replica().status() == Status::Rebuilding;
                    if let Some(store) = machine.in_place_store_mut::<SimMedia>() {
                        // What the turn writes in place is counted from the hand-over.
                        registers_ops_before = store.media().ops;
                        if let Some(at_op) = arm_on_hand_over.take() {
                            store.media_mut().arm_crash_point(at_op);
                        }
                        if !taken {
                            // The replica drops it: the medium stays as the open left it.
                            n.registers_image = store.media().now().live_image();
                        }
                    }
                    self.report.hand_overs += u64::from(taken && machine.in_place());
                    core.finish_rebuild(*machine);
                }
                None => break,
            }
        }
        let rebuilding = core.replica().status() == Status::Rebuilding;
        let sends_before = n.held.sends.len();
        let ops = core.log().segment_log().dir().ops();
        if let Err(e) = core.finish_turn(&mut n.held) {
            let failure = format!("node {}: its log failed: {e}", node.0);
            self.report.failures.push(failure);
            self.crash_node(node, false);
            return;
        }
        let wrote_registers = registers_ops(core) > registers_ops_before;
        if registers_crash_at_op.is_some() && core.replica().stats().snapshots_installed > installs
        {
            // The registers of a snapshot installed in the turn are written after its log
            // records are committed (`LogMachine::finish_install`): a crash among them keeps
            // the directory as the commit left it, not as it was before the turn.
            core.log_mut().dir_mut().disarm_crash_point();
            self.report.crashes_in_installs += 1;
        }
        let wrote = core.log().segment_log().dir().ops() > ops || wrote_registers;
        let votes = n.held.sends[sends_before..]
            .iter()
            .flat_map(|(_, m)| m)
            .any(|m| {
                matches!(
                    m,
                    Message::Accept { .. } | Message::Propose { .. } | Message::Promise { .. }
                )
            });
        self.report.votes_while_rebuilding += u64::from(rebuilding && votes);
        n.busy = true;
        n.flush_writes_snapshot = snapshots_written(core) > snapshots;
        let crashes = match flush_crash {
            Some(FlushCrash::Any) if registers_crash_at_op.is_some() => wrote_registers,
            Some(FlushCrash::Any) => wrote,
            Some(FlushCrash::Snapshot) => n.flush_writes_snapshot,
            None => false,
        };
        n.crash_point_armed = crashes;
        n.registers_crash_armed = crashes && registers_crash_at_op.is_some();
        let incarnation = n.incarnation;
        if crashes {
            n.flush_crash = None;
            let at = self.rng.random_range(0..flush_us);
            self.events
                .schedule(at, Event::CrashInFlush { node, incarnation });
        } else if flush_crash.is_some() {
            core.log_mut().dir_mut().disarm_crash_point();
            if registers_crash_at_op.is_some() {
                disarm_registers(core);
            }
        }
        let done = Event::TurnDone { node, incarnation };
        self.events.schedule(if wrote { flush_us } else { 0 }, done);
    }

    fn turn_done(&mut self, node: NodeId) {
        self.note_rejoined(node);
        let n = self.nodes.get_mut(&node).expect("node");
        n.busy = false;
        let registers_armed = std::mem::take(&mut n.registers_crash_armed);
        if std::mem::take(&mut n.crash_point_armed) {
            // The flush ended before the crash came: a later crash leaves what is there then.
            if let Some(core) = n.core.as_mut() {
                core.log_mut().dir_mut().disarm_crash_point();
                if registers_armed {
                    disarm_registers(core);
                }
            }
        }
        let held = std::mem::take(&mut n.held);
        let next_us = if n.queue.is_empty() {
            TICK_MS * 1000
        } else {
            0
        };
        let mut sends = held.sends;
        let cut_off = self.faults_active
            && self.nodes[&node].leader_cut.is_some()
            && self.leader_cut_step(node, &mut sends);
        let stray = match self.faults_active {
            true => self.stray_step(node, &mut sends),
            false => stray::StrayAfter::Nothing,
        };
        for (to, messages) in sends {
            self.send(node, to, messages);
        }
        if cut_off {
            let until = self.events.now_us() + self.config.leader_cut_off_us;
            self.nodes.get_mut(&node).expect("node").sends_cut_until_us = until;
        }
        for (to, answer) in held.answers {
            let answer = Box::new(answer);
            self.events
                .schedule(CLIENT_DELAY_US, Event::Answer { to, answer });
        }
        self.wake(node, next_us);
        self.stray_after(node, stray);
    }

    fn send(&mut self, from: NodeId, to: NodeId, messages: Vec<Message>) {
        self.report.batches += 1;
        let connection = (self.nodes[&from].incarnation, self.nodes[&to].incarnation);
        let now_us = self.events.now_us();
        let cut_off = now_us < self.nodes[&from].sends_cut_until_us
            || now_us < self.nodes[&to].receives_cut_until_us;
        let (faults, faulty) = (&self.config.faults, self.faults_active);
        let mut sent =
            (self.network).send(&mut self.rng, faults, faulty, cut_off, from, to, connection);
        let epoch = (self.nodes[&from].core.as_ref()).map_or(Epoch(0), |core| core.epoch());
        if faulty && self.epoch_mode() && !sent.delays_us.is_empty() {
            // A late copy: read by the peer long after, from a connection its sender's crash
            // may have closed meanwhile (see `deliver`).
            if self.rng.random_bool(self.config.late_copy_share) {
                let late = self.rng.random_range(LATE_COPY_US.0..=LATE_COPY_US.1);
                sent.delays_us.push(late);
            }
        }
        for delay in sent.delays_us {
            let messages = messages.clone();
            self.events.schedule(
                delay,
                Event::Deliver {
                    from,
                    to,
                    connection,
                    seq: sent.seq,
                    epoch,
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
        epoch: Epoch,
        messages: Vec<Message>,
    ) {
        if !self.nodes[&to].up() {
            return;
        }
        let current = (self.nodes[&from].incarnation, self.nodes[&to].incarnation);
        // Under EpochSS what a connection delivered before its sender crashed is still read
        // by a peer that did not restart: messages of the sender's previous life, in its old
        // epoch, which the peer must drop once it heard the new one.
        let stale = self.epoch_mode() && connection.1 == current.1 && connection.0 < current.0;
        if stale {
            self.report.stale_batches += 1;
            let messages = Input::Messages {
                from,
                epoch,
                messages,
            };
            self.enqueue(to, messages);
            return;
        }
        // The node's transport reconnects and carries on: the engine retransmits what a
        // broken connection lost.
        if (self.network).receive(from, to, connection, current, seq) {
            let messages = Input::Messages {
                from,
                epoch,
                messages,
            };
            self.enqueue(to, messages);
        }
    }

    // ---- faults ------------------------------------------------------------------------

    /// Crashes a node, the leader of the moment half the time, now or inside its next flush
    /// (half the time each), or every node now.
    fn crash(&mut self) {
        if !self.faults_active {
            return;
        }
        let every_us = self.config.faults.crash_every_us;
        whole_node::schedule_next(&mut self.events, &mut self.rng, every_us, Event::Crash);
        if self.rng.random_bool(self.config.faults.crash_all) {
            self.report.crashes_all += 1;
            for node in self.ids() {
                if self.nodes[&node].up() {
                    let power = self.power_failure();
                    self.crash_node(node, power);
                }
            }
            return;
        }
        let up = self.up_nodes();
        let leader = up.iter().copied().find(|n| self.is_leader(*n));
        let node = match leader {
            Some(leader) if self.rng.random_bool(0.5) => leader,
            _ => match up.choose(&mut self.rng) {
                Some(&node) => node,
                None => return,
            },
        };
        if !self.one_more_may_crash() {
            return;
        }
        // Under EpochSS nothing is flushed: the crash is now.
        if !self.epoch_mode() && self.rng.random_bool(0.5) {
            let share = self.config.snapshot_flush_crash_share;
            let flush_crash = if share > 0.0 && self.rng.random_bool(share) {
                FlushCrash::Snapshot
            } else {
                FlushCrash::Any
            };
            self.nodes.get_mut(&node).expect("node").flush_crash = Some(flush_crash);
        } else {
            let power = self.power_failure();
            self.crash_node(node, power);
        }
    }

    fn is_leader(&self, node: NodeId) -> bool {
        (self.nodes[&node].core.as_ref()).is_some_and(|core| core.replica().is_leader())
    }

    /// Whether one more node may go down and leave a majority up (under EpochSS, up and
    /// holding its state: a node recovering it counts as down).
    fn one_more_may_crash(&self) -> bool {
        let epochs = self.epoch_mode();
        let down = (self.nodes.values())
            .filter(|n| match &n.core {
                None => true,
                Some(core) => epochs && core.replica().status() == Status::Recovering,
            })
            .count();
        whole_node::one_more_may_crash(down, self.config.nodes)
    }

    /// The nodes up now.
    fn up_nodes(&self) -> Vec<NodeId> {
        (self.ids().into_iter())
            .filter(|n| self.nodes[n].up())
            .collect()
    }

    /// Whether a crash is a power failure: sometimes on a medium that promises to survive one
    /// (`sync`, and persistent memory, real or emulated, which the simulated directory stands
    /// for), never under `mmap`, whose node promises no more than surviving a process crash.
    fn power_failure(&mut self) -> bool {
        matches!(
            self.config.durability,
            Durability::Sync | Durability::Emulp | Durability::Pmem
        ) && self.rng.random_bool(self.config.faults.power_failure)
    }

    /// Hands `node` its state machine rebuilt from the persistent snapshot it resumed with
    /// (the node restores it on a blocking thread and sends it to its loop); under mPaxosSM
    /// its registers opened.
    fn rebuilt(&mut self, node: NodeId) {
        if self.config.in_place {
            return self.open_registers_late(node);
        }
        let skip = self.config.rebuild_skips_snapshot;
        let n = self.nodes.get_mut(&node).expect("node");
        let Some(core) = n.core.as_ref() else {
            return;
        };
        let mut machine = RegisterMachine::default();
        if let Some(state) = core.rebuild_from() {
            self.report.rebuilds_from_snapshot += 1;
            if !skip {
                machine.restore(&state);
            }
        }
        self.enqueue(node, Input::Rebuilt(Box::new(LogMachine::from(machine))));
    }

    /// Opens the registers in place of `node`, which resumed with the stand-in, against the
    /// log's snapshot at its start, and hands the machine to its loop, as the node does from
    /// its blocking thread: what the open writes is on the medium from now, the hand-over when
    /// the loop takes it. A failure stops the node's loop (a failure of the run here).
    fn open_registers_late(&mut self, node: NodeId) {
        let snapshot = (self.nodes.get_mut(&node).expect("node"))
            .registers_snapshot
            .take();
        match self.open_registers(node, snapshot.as_ref()) {
            Ok(machine) => {
                self.report.registers_opened_late += 1;
                self.enqueue(node, Input::Rebuilt(Box::new(machine)));
            }
            Err(e) => {
                let failure = format!("node {} cannot reopen its registers: {e}", node.0);
                self.report.failures.push(failure);
            }
        }
    }

    /// Stops a node, keeping what its directory would hold after the crash.
    fn crash_node(&mut self, node: NodeId, power: bool) {
        let leader = self.is_leader(node);
        let mut rng = SmallRng::seed_from_u64(self.rng.random());
        let n = self.nodes.get_mut(&node).expect("node");
        let Some(mut core) = n.core.take() else {
            return;
        };
        let in_flush = n.busy;
        let in_snapshot_flush = in_flush && n.flush_writes_snapshot;
        let crash = core.log().segment_log().dir().at_crash();
        n.image = if power {
            let dirty = crash.dirty_sectors();
            let (kept, rest): (Vec<_>, Vec<_>) =
                dirty.into_iter().partition(|_| rng.random_bool(0.5));
            let torn = (rest.choose(&mut rng)).map(|&sector| {
                self.report.torn_sectors += 1;
                (sector, rng.random_range(1..SECTOR_BYTES / 8) * 8)
            });
            let dir_ops = rng.random_range(0..=crash.pending_dir_ops());
            crash.crash_image(dir_ops, &kept, torn)
        } else {
            crash.process_crash()
        };
        let opening = core.awaiting_registers();
        self.report.crashes_while_opening += u64::from(opening);
        let store = match core.state_machine_mut().in_place_store_mut::<SimMedia>() {
            Some(store) => Some(store),
            // Opened and not handed over yet: the open's writes are on the medium.
            None => n.queue.iter_mut().find_map(|input| match input {
                Input::Rebuilt(machine) => machine.in_place_store_mut::<SimMedia>(),
                _ => None,
            }),
        };
        // Else not opened yet (or never handed over): the medium is as it was.
        if let Some(store) = store {
            let torn = &mut self.report.torn_sectors;
            n.registers_image = crash_image(store.media().at_crash(), power, &mut rng, torn);
            self.report.crashes_in_registers += u64::from(n.registers_crash_armed);
        }
        n.registers_crash_armed = false;
        n.queue.clear();
        n.busy = false;
        n.held = Held::default();
        n.wake_at_us = None;
        n.crash_point_armed = false;
        n.flush_crash = None;
        n.leader_cut = None;
        // The node restarts with space.
        n.disk_full_until_us = 0;
        self.add_figures(node, &core);
        self.report.crashes += 1;
        self.report.leader_kills += u64::from(leader);
        self.report.power_failures += u64::from(power);
        self.report.crashes_in_flush += u64::from(in_flush);
        self.report.crashes_in_snapshot_flush += u64::from(in_snapshot_flush);
        self.report.power_failures_in_snapshot_flush += u64::from(in_snapshot_flush && power);
        self.connections_lost(node);
        if self.epoch_mode() && self.nodes.values().all(|n| !n.up()) && !self.state_lost {
            // Every node lost what it kept in memory: the cluster must refuse service.
            self.state_lost = true;
            self.report.states_lost += 1;
        }
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

    /// Starts a leader's cut on the leader of the moment.
    fn leader_cut(&mut self) {
        if !self.faults_active {
            return;
        }
        let every_us = self.config.leader_cut_every_us;
        whole_node::schedule_next(&mut self.events, &mut self.rng, every_us, Event::LeaderCut);
        if let Some(node) = self.ids().into_iter().find(|&n| self.is_leader(n)) {
            let n = self.nodes.get_mut(&node).expect("node");
            n.leader_cut.get_or_insert(LeaderCut::LoseNextPropose);
        }
    }

    /// Moves a leader's cut on by one turn of `node` that sends `sends`, removing what is lost;
    /// whether the node is cut off once they have left.
    fn leader_cut_step(&mut self, node: NodeId, sends: &mut Vec<(NodeId, Vec<Message>)>) -> bool {
        let proposed = (sends.iter().flat_map(|(_, messages)| messages)).filter_map(|m| match m {
            Message::Propose { instance, .. } => Some(*instance),
            _ => None,
        });
        let Some(highest) = proposed.max() else {
            return false;
        };
        let n = self.nodes.get_mut(&node).expect("node");
        match n.leader_cut {
            Some(LeaderCut::LoseNextPropose) => {
                n.leader_cut = Some(LeaderCut::CutOffAfterLaterPropose { lost: highest });
                self.report.leader_cuts += 1;
                sends.clear();
                false
            }
            Some(LeaderCut::CutOffAfterLaterPropose { lost }) => {
                // Proposes of the lost instances sent again are lost again (a connection that
                // breaks before them): what the others leave with is what they saw.
                for (_, messages) in sends.iter_mut() {
                    messages.retain(
                        |m| !matches!(m, Message::Propose { instance, .. } if *instance <= lost),
                    );
                }
                sends.retain(|(_, messages)| !messages.is_empty());
                let later = highest > lost;
                if later {
                    n.leader_cut = None;
                }
                later
            }
            None => false,
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
        self.stray = None;
        self.network.heal();
        for node in self.ids() {
            let n = self.nodes.get_mut(&node).expect("node");
            n.flush_crash = None;
            n.sends_cut_until_us = 0;
            n.receives_cut_until_us = 0;
            n.leader_cut = None;
            if !n.up() {
                self.start_node(node);
            }
            self.give_space(node);
        }
    }

    /// Runs the healed cluster until every replica has executed the same prefix of the log,
    /// or for [`SETTLE_US_MAX`].
    fn settle(&mut self) {
        let deadline = self.events.now_us() + SETTLE_US_MAX;
        while self.events.next_due_us().is_some_and(|at| at <= deadline) {
            self.step_next();
            let mut executed = (self.nodes.values())
                .filter_map(|n| n.core.as_ref())
                .map(|core| core.replica().executed_below());
            let first = executed.next();
            if executed.all(|e| Some(e) == first) {
                return;
            }
        }
    }

    /// After the liveness phase and settling, every replica must have executed the same log
    /// and hold the same map.
    fn compare_replicas(&mut self) {
        if self.state_lost {
            // Nothing to compare: every replica must say the state is lost.
            for (node, n) in &self.nodes {
                let state = (n.core.as_ref()).map(|core| core.replica().status());
                if state != Some(Status::StateLost) {
                    self.report.failures.push(format!(
                        "node {} is {state:?} after every node crashed under EpochSS, not \
                         StateLost",
                        node.0
                    ));
                }
            }
            return;
        }
        let cores: Vec<_> = (self.nodes.values())
            .filter_map(|n| n.core.as_ref())
            .collect();
        let Some(first) = cores.first() else {
            return;
        };
        let (a, a_executed) = (first.replica(), first.status().executed_below);
        for other in &cores[1..] {
            let b = other.replica();
            let b_executed = other.status().executed_below;
            if a_executed != b_executed || a.state_machine().map() != b.state_machine().map() {
                self.report.failures.push(format!(
                    "replicas differ after settling: {:?} executed below {a_executed} holds \
                     {:?}; {:?} executed below {b_executed} holds {:?}",
                    a.me(),
                    a.state_machine().map(),
                    b.me(),
                    b.state_machine().map()
                ));
                return;
            }
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
                epoch,
                messages,
            } => {
                self.trace.write_u64(seq);
                self.deliver(from, to, connection, seq, epoch, messages);
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
                if current(self, node, incarnation) && !self.nodes[&node].busy {
                    self.turn(node);
                }
            }
            Event::TurnDone { node, incarnation } => {
                if current(self, node, incarnation) {
                    self.turn_done(node);
                }
            }
            Event::Answer { to, answer } => self.client_done(to.client, to.seq, Some(*answer)),
            Event::ClientNext { client } => self.client_next(client),
            Event::ClientTimeout { client, seq } => self.client_done(client, seq, None),
            Event::Crash => self.crash(),
            Event::CrashInFlush { node, incarnation } => {
                if self.faults_active
                    && current(self, node, incarnation)
                    && self.one_more_may_crash()
                {
                    let power = self.power_failure();
                    self.crash_node(node, power);
                }
            }
            Event::Restart { node } => {
                if !self.nodes[&node].up() {
                    self.start_node(node);
                }
            }
            Event::Rebuilt { node, incarnation } => {
                if current(self, node, incarnation) {
                    self.rebuilt(node);
                }
            }
            Event::Partition => self.partition(),
            Event::ClockJump => self.clock_jump(),
            Event::LeaderCut => self.leader_cut(),
            Event::DiskFull => self.disk_full(),
            Event::DiskSpace { node } => {
                if self.events.now_us() >= self.nodes[&node].disk_full_until_us {
                    self.give_space(node);
                }
            }
            Event::LostDisk(step) => self.lost_disk(step),
            Event::StrayVote => self.stray_vote(),
        }
    }
}

/// The simulated medium of a node's registers in place (mPaxosSM).
fn registers_media(core: &mut LogCore<AnswerTo, SimDir>) -> &mut SimMedia {
    (core.state_machine_mut().in_place_store_mut::<SimMedia>())
        .expect("registers in place on a simulated medium")
        .media_mut()
}

/// The media operations of a node's registers in place so far (0: not in place).
fn registers_ops(core: &mut LogCore<AnswerTo, SimDir>) -> usize {
    (core.state_machine_mut().in_place_store_mut::<SimMedia>()).map_or(0, |s| s.media().ops)
}

/// Takes back a crash point of the registers' medium, if they are open: a later crash leaves
/// what is there then.
fn disarm_registers(core: &mut LogCore<AnswerTo, SimDir>) {
    if let Some(store) = core.state_machine_mut().in_place_store_mut::<SimMedia>() {
        let media = store.media_mut();
        media.arm_crash_point(0);
        media.crash_after_ops = None;
    }
}

/// The image a crash leaves of a medium whose state at the crash was `at_crash`: under a power
/// failure the persisted bytes, any subset of the sectors written since and one more torn on a
/// word boundary (counted in `torn_sectors`); else everything written.
fn crash_image(
    at_crash: &MediaSnapshot,
    power: bool,
    rng: &mut SmallRng,
    torn_sectors: &mut u64,
) -> Vec<u8> {
    if !power {
        return at_crash.live_image();
    }
    let dirty = at_crash.dirty_sectors();
    let (kept, rest): (Vec<_>, Vec<_>) = dirty.into_iter().partition(|_| rng.random_bool(0.5));
    let torn = (rest.choose(rng)).map(|&sector| {
        *torn_sectors += 1;
        (sector, rng.random_range(1..SECTOR_BYTES / 8) * 8)
    });
    at_crash.crash_image(&kept, torn)
}

/// Snapshots a node's replica has written (taken or installed).
fn snapshots_written(core: &LogCore<AnswerTo, SimDir>) -> u64 {
    let stats = core.replica().stats();
    stats.snapshots_taken + stats.snapshots_installed
}
