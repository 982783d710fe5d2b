//! What a whole-node run of the log engine is told (nodes, faults, workload, bugs) and what it
//! reports.
#[cfg(doc)]
use logless_multipaxos::config::Config;
use logless_multipaxos::config::{InjectedBugs, Recovery};
use logless_storage::Durability;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use crate::nodes::NodeFaults;
use crate::whole_node;

/// One whole-node run of the log engine.
#[derive(Clone, Debug)]
pub struct LogNodeSimConfig {
    /// Nodes (replicas of the log).
    pub nodes: u16,
    /// The seed of everything random.
    pub seed: u64,
    /// `Sync` (power failures possible), `Mmap` (process crashes only, as a node in `mmap`
    /// mode promises no more), or `Emulp`/`Pmem` for mPaxos ([`LogNodeSimConfig::mpaxos`]):
    /// the simulated directory stands for persistent memory, and a power failure keeps what
    /// was persisted and any part of the rest, as under `Sync`.
    pub durability: Durability,
    /// How a restarted node recovers: FullSS (replaying its log, the default) or mPaxos
    /// (`Recovery::Pmem`: resuming its log and voting at once, its state machine rebuilt from
    /// the persistent snapshot meanwhile, as the node does off its loop).
    pub recovery: Recovery,
    /// A deliberate bug of the node's rebuild under mPaxos (not the engine's): the state
    /// machine handed over is an empty one, the persistent snapshot skipped.
    pub rebuild_skips_snapshot: bool,
    /// mPaxosSM (`--recovery pmem-sm`, [`LogNodeSimConfig::mpaxos_sm`]): under
    /// `Recovery::Pmem`, the state machine is kept in place on its own simulated persistent
    /// memory (the node's `registers.slots`), executed idempotently per operation number, and
    /// the engine takes snapshots only for lagging peers.
    pub in_place: bool,
    /// A deliberate bug of the node's registers in place (not the engine's): operations are
    /// applied again after a restart whatever operation number their register records
    /// ([`RegistersInPlace::ignore_op_numbers`]), so an INCR whose register reached the medium
    /// before a crash and whose "applied up to" did not is applied twice.
    ///
    /// [`RegistersInPlace::ignore_op_numbers`]: logless_node::registers_in_place::RegistersInPlace::ignore_op_numbers
    pub ignore_op_numbers: bool,
    /// A deliberate bug of the node's core under mPaxosSM (not the engine's): catch-up answers
    /// carrying a snapshot are taken while the registers in place open, so the snapshot is
    /// installed into the stand-in, which then serves from memory alone, the opened registers
    /// never handed over ([`LogCore::inject_snapshots_into_the_stand_in`]).
    ///
    /// [`LogCore::inject_snapshots_into_the_stand_in`]: logless_node::log_turn::LogCore::inject_snapshots_into_the_stand_in
    pub snapshots_into_the_stand_in: bool,
    /// Under EpochSS, the share of batches that also leave a late copy, read by the peer 100
    /// to 600 ms later: if the sender crashed meanwhile, a message of its previous life (see
    /// [`LogNodeSimConfig::epoch_ss`]).
    pub late_copy_share: f64,
    /// Faults of the safety phase (the per-key engine's kinds; clock jumps move a node's wall
    /// clock, which its log core slews).
    pub faults: NodeFaults,
    /// Closed-loop clients, each connected to one node (another while that one is down).
    pub clients: u32,
    /// Commands per client.
    pub commands_per_client: u32,
    /// Single-key registers besides the counters: register `i` is a string, a set or a lock
    /// by `i % 3`, under key `k{i}.{generation}` (a fresh generation after a few writes of
    /// unknown outcome, as in the per-key engine's run).
    pub registers: u32,
    /// Client think time between commands (µs).
    pub think_us: u64,
    /// How long a client waits for an answer before it records the outcome as unknown (µs);
    /// the node answers "outcome unknown" itself after `request_timeout_ms`.
    pub client_timeout_us: u64,
    /// The node's request timeout (ms): its core retries an operation every
    /// [`RETRY_MS`](logless_node::log_turn::RETRY_MS) until then.
    pub request_timeout_ms: u64,
    /// How long a flush takes (µs).
    pub flush_us: u64,
    /// When the faults stop if the workload has not finished by then (µs).
    pub faults_until_us: u64,
    /// When the workload is cut off if it has not finished (µs).
    pub until_us: u64,
    /// How long each liveness operation may take after healing (µs).
    pub liveness_us: u64,
    /// The engine's snapshot policy: a snapshot once the log has grown by this many bytes
    /// since the last ([`Config::snapshot_log_bytes_min`])...
    pub snapshot_log_bytes_min: u64,
    /// ... and by this share of the last snapshot's size ([`Config::snapshot_ratio_percent`]).
    pub snapshot_ratio_percent: u64,
    /// How often (mean, µs; 0: never) a leader's cut starts: the leader of the moment loses
    /// everything its next turn that sends a Propose sends (its connections break), then is
    /// cut off from sending for `leader_cut_off_us` right after its next turn that sends a
    /// Propose. When that one proposes a later instance (the usual case: new requests come
    /// before the lost one is sent again), the followers voted above an instance none of them
    /// saw: a gap, which the next leader's phase 1 sees without the old leader's vote, and
    /// must fill with a no-op.
    pub leader_cut_every_us: u64,
    /// How long a leader stays cut off (µs): longer than a follower's suspect timeout, so that
    /// another node takes over.
    pub leader_cut_off_us: u64,
    /// Of the crashes that wait for a node's next flush, the share that wait for its next
    /// flush that writes a snapshot file instead.
    pub snapshot_flush_crash_share: f64,
    /// How often (mean, µs; 0: never) a disk fills up while the faults last: the node's log
    /// directory refuses new files and growth (`ENOSPC`) for `disk_full_us`, so that the next
    /// segment or snapshot it needs is refused and the node pauses (`node/src/log_turn.rs`, "A
    /// full disk"). The leader of the moment's half the time; every node's at once by
    /// `disk_full_all`. A crash ends its node's: it restarts with space.
    pub disk_full_every_us: u64,
    /// How long a disk stays full (µs).
    pub disk_full_us: u64,
    /// Of the disks' filling, the share that fill every node's at once.
    pub disk_full_all: f64,
    /// The size of the nodes' log segments (bytes): a full disk matters once a new one is
    /// needed.
    pub segment_bytes: usize,
    /// When (µs; 0: never) a disk is lost at its worst moment (`docs/lost-disk.md`): a follower
    /// `F` and the leader `L` decide while the other nodes but a quorum's worth are cut off both
    /// ways, `F` loses its disk and restarts rejoining ([`LogCore::start_rejoin`]; at every
    /// start until a rejoin completed), and the leader of the moment crashes as the cut heals:
    /// a view change can then count `F`'s new Promises with the cut-off nodes', which never saw
    /// what `F`'s lost votes helped choose. Under mPaxos too ([`LogNodeSimConfig::mpaxos`]):
    /// `F`'s persistent memory is lost, its rejoin ends the rebuild it resumed with, and the
    /// rebuilt machine is handed over anyway, later, for the replica to drop.
    ///
    /// [`LogCore::start_rejoin`]: logless_node::log_turn::LogCore::start_rejoin
    pub lost_disk_at_us: u64,
    /// When (µs; 0: never) a stray vote is staged under EpochSS (seed 002 Fig. 2; module
    /// `stray`): the leader's next Proposes reach one follower only, which crashes right after
    /// voting with its Accepts to the leader held back; the leader's Proposes of those
    /// instances are lost until it answers the restarted follower's Recovery, it is then cut
    /// off for a second, and the held Accepts reach it 100 ms into the cut, after the
    /// follower's new epoch. A leader that counts them decides a value the others never saw.
    pub stray_vote_at_us: u64,
    /// The engine's quiet time after a restart ([`Config::restart_quiet_ms`]): no view change
    /// started this long unless a leader is heard. 0 (off) by default, not the node's 2 s: the
    /// faults last 2 s, and the node's quiet time would keep every restarted node from
    /// starting a view change through all of them, so that the simulation would rarely see a
    /// view change right after a restart, the moment stale proposals are met. The quiet time
    /// is a liveness rule (nothing of safety rests on it); every fourth seed of
    /// [`LogNodeSimConfig::for_seed`] runs it, scaled to the run (300 ms).
    pub restart_quiet_ms: u64,
    /// Deliberate engine bugs in every node (the node's `--inject-bug log-*`).
    pub bugs: InjectedBugs,
}

impl LogNodeSimConfig {
    /// Defaults for `nodes` nodes, `seed`, `durability` and no faults.
    pub fn new(nodes: u16, seed: u64, durability: Durability) -> LogNodeSimConfig {
        LogNodeSimConfig {
            nodes,
            seed,
            durability,
            recovery: Recovery::FullSs,
            rebuild_skips_snapshot: false,
            in_place: false,
            ignore_op_numbers: false,
            snapshots_into_the_stand_in: false,
            late_copy_share: 0.0,
            faults: NodeFaults::none(),
            clients: 4,
            commands_per_client: 25,
            registers: 6,
            think_us: 20_000,
            client_timeout_us: 3_000_000,
            request_timeout_ms: 1_000,
            flush_us: if durability == Durability::Sync {
                60
            } else {
                5
            },
            faults_until_us: 2_000_000,
            until_us: 30_000_000,
            liveness_us: 5_000_000,
            // 16 KiB, not the node's 1 MiB: a run's log holds a few KiB, so this takes a
            // snapshot only in the longest runs.
            snapshot_log_bytes_min: 16 * 1024,
            snapshot_ratio_percent: 100,
            snapshot_flush_crash_share: 0.0,
            leader_cut_every_us: 0,
            leader_cut_off_us: 600_000,
            disk_full_every_us: 0,
            disk_full_us: 0,
            disk_full_all: 0.0,
            segment_bytes: 64 * 1024,
            lost_disk_at_us: 0,
            stray_vote_at_us: 0,
            restart_quiet_ms: 0,
            bugs: InjectedBugs::default(),
        }
    }

    /// A snapshot after every few hundred bytes of log: the logs are truncated many times in a
    /// run, a replica down or cut off for a fraction of a second catches up from a snapshot,
    /// and restarts load one (crashes land inside flushes that write one too).
    pub fn small_snapshots(&mut self) {
        self.snapshot_log_bytes_min = SMALL_SNAPSHOT_LOG_BYTES;
        self.snapshot_ratio_percent = 50;
        self.snapshot_flush_crash_share = 0.5;
    }

    /// The faults of the many-seed runs: the per-key engine's, with crashes and partitions
    /// spaced to let a leader be suspected (300 ms) and replaced between them.
    pub fn faults() -> NodeFaults {
        NodeFaults {
            crash_every_us: 250_000,
            down_us: 150_000,
            partition_every_us: 300_000,
            clock_jump_every_us: 400_000,
            clock_jump_ms_max: 1_000,
            ..NodeFaults::all()
        }
    }

    /// Leaders cut off after a lost Propose (see [`LogNodeSimConfig::leader_cut_every_us`]),
    /// a few times a run, and the other faults rarer than usual: the view change that follows
    /// a cut then sees a gap, and few later view changes bring the old leader's vote for the
    /// gap back (as a new leader's phase 1 would if the old leader were among its quorum). A
    /// leader that left the gap empty stops execution for good.
    pub fn leader_cuts(&mut self) {
        self.leader_cut_every_us = 800_000;
        self.faults.crash_every_us = 4_000_000;
        self.faults.partition_every_us = 2_000_000;
    }

    /// mPaxos (`--recovery pmem`) on persistent memory (`--durability emulp`; the simulated
    /// directory is the medium): crashes are power failures half the time, a restarted node
    /// resumes its log and votes at once, and its state machine is rebuilt from its persistent
    /// snapshot after [`REBUILD_US_MAX`] at most, while it takes part.
    pub fn mpaxos(&mut self) {
        self.recovery = Recovery::Pmem;
        self.durability = Durability::Emulp;
        self.flush_us = 5;
    }

    /// mPaxosSM (`--recovery pmem-sm` on `--durability emulp`): [`LogNodeSimConfig::mpaxos`],
    /// with the state machine in place on simulated persistent memory of its own. A restarted
    /// node resumes its log and votes at once, opens its registers up to [`REBUILD_US_MAX`]
    /// later and, once they are handed over, executes the decided instances after their
    /// "applied up to" and serves; a crash inside a flush lands among the registers' media
    /// operations half the time (the turn's log records lost with it, as the registers are
    /// persisted before them), and power failures keep any part of what was not persisted.
    /// The engine writes checkpoints (snapshots without state) and copies the state only for
    /// a lagging peer. Operations that write several keys (transfers, MSET) are refused by the
    /// node, so the counters' workload sends few of them.
    pub fn mpaxos_sm(&mut self) {
        self.mpaxos();
        self.in_place = true;
    }

    /// EpochSS (`--recovery epoch`): the log and the state only in memory (no flush time, no
    /// power failure: a crash loses everything but the epoch file, which is a real file, as on
    /// the node), a restarted node in the epoch after its last recovering its state from its
    /// peers before it votes or serves (answering LOADING meanwhile). A node recovering counts
    /// as down for the crashes of one node (the cluster tolerates a minority without its
    /// state); a crash of every node (the faults' `crash_all`, on every fourth seed of
    /// [`LogNodeSimConfig::for_seed`]'s) loses the state, and the cluster must then refuse
    /// service (CLUSTERDOWN) through every node to the end. Batches a node sent before it
    /// crashed may still arrive after its restart (a peer reads late what a connection of its
    /// previous life delivered): the stale messages the epochs are there to drop.
    pub fn epoch_ss(&mut self) {
        self.recovery = Recovery::Epoch;
        self.durability = Durability::Memory;
        self.late_copy_share = 0.05;
        if !self.seed.is_multiple_of(4) {
            self.faults.crash_all = 0.0;
        }
    }

    /// Disks that fill up a few times a run, for 450 ms each (several space probes of the
    /// paused node), every node's at once a third of the time, and log segments of 4 KiB so
    /// that a full disk soon refuses a new one.
    pub fn full_disks(&mut self) {
        self.disk_full_every_us = 400_000;
        self.disk_full_us = 450_000;
        self.disk_full_all = 0.3;
        self.segment_bytes = whole_node::FULL_DISK_SEGMENT_BYTES;
    }

    /// A disk lost at its worst moment (see [`LogNodeSimConfig::lost_disk_at_us`]), at a point
    /// of the faults drawn from the seed.
    pub fn lost_disk(&mut self) {
        let mut rng = SmallRng::seed_from_u64(self.seed ^ LOST_DISK_SALT);
        self.lost_disk_at_us =
            rng.random_range(self.faults_until_us / 10..self.faults_until_us / 2);
    }

    /// A stray vote (see [`LogNodeSimConfig::stray_vote_at_us`]) at a point of the faults drawn
    /// from the seed, and the other crashes and partitions rarer (one every 2 s on average,
    /// never every node), so that the follower may crash at the moment and hear the leader.
    pub fn stray_vote(&mut self) {
        let mut rng = SmallRng::seed_from_u64(self.seed ^ STRAY_VOTE_SALT);
        self.stray_vote_at_us =
            rng.random_range(self.faults_until_us / 10..self.faults_until_us / 2);
        self.faults.crash_all = 0.0;
        self.faults.crash_every_us = 2_000_000;
        self.faults.partition_every_us = 2_000_000;
    }

    /// The configuration the many-seed tests run for `seed` with `nodes` nodes: every fault,
    /// `sync` on even seeds and `mmap` on odd ones, [small snapshots] on every third, [leader
    /// cuts] on every eleventh.
    ///
    /// [small snapshots]: LogNodeSimConfig::small_snapshots
    /// [leader cuts]: LogNodeSimConfig::leader_cuts
    pub fn for_seed(nodes: u16, seed: u64) -> LogNodeSimConfig {
        let durability = if seed.is_multiple_of(2) {
            Durability::Sync
        } else {
            Durability::Mmap
        };
        let mut config = LogNodeSimConfig::new(nodes, seed, durability);
        config.faults = LogNodeSimConfig::faults();
        if seed.is_multiple_of(3) {
            config.small_snapshots();
        }
        // An odd modulus prime to 3: both durabilities, and small snapshots on a third (and
        // not seed 1225, which a test replays as it once failed).
        if seed % 11 == 5 {
            config.leader_cuts();
        }
        if seed % 4 == 3 {
            config.restart_quiet_ms = 300;
        }
        config
    }
}

/// The longest a resumed node's rebuild of its state machine takes (µs; the node does it on
/// a blocking thread while its loop goes on): many of its turns, votes among them, come first.
pub const REBUILD_US_MAX: u64 = 80_000;
/// The log growth between snapshots of [`LogNodeSimConfig::small_snapshots`] (bytes).
const SMALL_SNAPSHOT_LOG_BYTES: u64 = 384;
/// Mixed into the seed to draw the moment of [`LogNodeSimConfig::lost_disk`], so that the run's
/// own draws stay what they were.
const LOST_DISK_SALT: u64 = 0x6c6f_7374_6469_736b;
/// The same for [`LogNodeSimConfig::stray_vote`].
const STRAY_VOTE_SALT: u64 = 0x7374_7261_7976_6f74;

/// What a run did and found.
#[derive(Clone, Debug, Default)]
pub struct LogNodeSimReport {
    /// Client operations (liveness ones included).
    pub operations: u64,
    /// Of those, on the counters (checked whole by the atomicity checker).
    pub counter_operations: u64,
    /// Of those, transfers (MULTI/EXEC over two counters) and MSETs.
    pub multi_key_operations: u64,
    /// Operations acknowledged.
    pub acknowledged: u64,
    /// Operations refused as not applied.
    pub not_applied: u64,
    /// Operations with unknown outcome.
    pub unknown: u64,
    /// Message batches sent between nodes.
    pub batches: u64,
    /// Node crashes (each node of a crash of all counts).
    pub crashes: u64,
    /// Crashes of the leader of the moment.
    pub leader_kills: u64,
    /// Crashes of every node at once.
    pub crashes_all: u64,
    /// Crashes that were power failures.
    pub power_failures: u64,
    /// Crashes that landed inside a flush.
    pub crashes_in_flush: u64,
    /// Sectors torn by power failures.
    pub torn_sectors: u64,
    /// Partition changes.
    pub partitions: u64,
    /// Wall-clock jumps.
    pub clock_jumps: u64,
    /// Leaders' cuts (a turn's Proposes lost, a cut-off after the next).
    pub leader_cuts: u64,
    /// View changes the nodes started.
    pub view_changes: u64,
    /// Gaps new leaders filled with a no-op (instances no vote of their phase 1 showed, below
    /// one that did).
    pub gaps_filled: u64,
    /// Decided requests not executed again (retries agreed twice).
    pub duplicates_skipped: u64,
    /// Snapshots the nodes took (each followed by a truncation of the log).
    pub snapshots_taken: u64,
    /// Snapshots installed from another node (catching up past a truncation).
    pub snapshots_installed: u64,
    /// Restarts that loaded a snapshot from the node's directory.
    pub restarts_from_snapshot: u64,
    /// Crashes inside a flush that wrote a snapshot file (the crash point among its operations
    /// or the log's before it).
    pub crashes_in_snapshot_flush: u64,
    /// Of those, power failures.
    pub power_failures_in_snapshot_flush: u64,
    /// Disks filled up (each node of a filling of all counts).
    pub disk_fulls: u64,
    /// Times a node paused because its disk refused its log's records.
    pub space_shortages: u64,
    /// Operations refused because their node's disk had no space for its log (MISCONF).
    pub refused_for_space: u64,
    /// Disks lost (their nodes restarted rejoining).
    pub lost_disks: u64,
    /// Rejoins completed after a lost disk.
    pub rejoins: u64,
    /// Starts that resumed the log under mPaxos (voting at once, rebuilding meanwhile) or
    /// mPaxosSM (voting at once, the registers opened in place meanwhile).
    pub resumed: u64,
    /// Of those, the ones whose rebuild restored a snapshot.
    pub rebuilds_from_snapshot: u64,
    /// Turns of a resumed node, before its state machine was rebuilt, that sent a vote or a
    /// promise (an Accept, a Propose or a Promise).
    pub votes_while_rebuilding: u64,
    /// Crashes inside a flush that landed among the operations of the registers in place
    /// (mPaxosSM).
    pub crashes_in_registers: u64,
    /// Operations refused by the node because they write several keys (mPaxosSM).
    pub refused_in_place: u64,
    /// Registers in place opened after their node's log resumed, off its loop (mPaxosSM).
    pub registers_opened_late: u64,
    /// Of those, the machines handed over to a replica that took them.
    pub hand_overs: u64,
    /// Catch-up answers carrying a snapshot that reached a node while its registers opened
    /// (its core drops them).
    pub snapshots_while_opening: u64,
    /// Crashes of a node whose registers had not been handed over yet.
    pub crashes_while_opening: u64,
    /// Crashes drawn among the registers' operations of a turn that installed a snapshot
    /// (they land after the turn's log records are committed).
    pub crashes_in_installs: u64,
    /// Restarts in a new epoch, recovering from the peers (EpochSS).
    pub epoch_restarts: u64,
    /// Recoveries from the peers completed (EpochSS).
    pub recoveries: u64,
    /// Batches delivered from a sender's earlier life (EpochSS).
    pub stale_batches: u64,
    /// Stray votes staged to the end: a follower's held Accepts on their way to its cut-off
    /// leader after the follower's restart (EpochSS, [`LogNodeSimConfig::stray_vote_at_us`]).
    pub stray_votes: u64,
    /// Operations refused while their node recovered (EpochSS, LOADING).
    pub refused_recovering: u64,
    /// Runs that lost their state (every node crashed under EpochSS).
    pub states_lost: u64,
    /// Operations refused because the state was lost (EpochSS, CLUSTERDOWN).
    pub refused_state_lost: u64,
    /// Operations the nodes handed to their replica again (their front end's retry).
    pub retried: u64,
    /// Operations the nodes answered "outcome unknown".
    pub timed_out: u64,
    /// The farthest a node's log clock was from simulated time at a turn (ms).
    pub clock_skew_ms_max: u64,
    /// Simulated time at the end (µs).
    pub sim_time_us: u64,
    /// A hash of every event processed: equal for equal seeds.
    pub trace: u64,
    /// Failures of the run itself: a log that does not reopen, a store error, a reply the
    /// workload cannot read, an operation not acknowledged after healing, replicas that differ.
    pub failures: Vec<String>,
}

impl LogNodeSimReport {
    /// Adds the counts of `other` (failures and trace excepted; the skew is the larger).
    pub fn add(&mut self, other: &LogNodeSimReport) {
        self.operations += other.operations;
        self.counter_operations += other.counter_operations;
        self.multi_key_operations += other.multi_key_operations;
        self.acknowledged += other.acknowledged;
        self.not_applied += other.not_applied;
        self.unknown += other.unknown;
        self.batches += other.batches;
        self.crashes += other.crashes;
        self.leader_kills += other.leader_kills;
        self.crashes_all += other.crashes_all;
        self.power_failures += other.power_failures;
        self.crashes_in_flush += other.crashes_in_flush;
        self.torn_sectors += other.torn_sectors;
        self.partitions += other.partitions;
        self.clock_jumps += other.clock_jumps;
        self.leader_cuts += other.leader_cuts;
        self.view_changes += other.view_changes;
        self.gaps_filled += other.gaps_filled;
        self.duplicates_skipped += other.duplicates_skipped;
        self.snapshots_taken += other.snapshots_taken;
        self.snapshots_installed += other.snapshots_installed;
        self.restarts_from_snapshot += other.restarts_from_snapshot;
        self.crashes_in_snapshot_flush += other.crashes_in_snapshot_flush;
        self.power_failures_in_snapshot_flush += other.power_failures_in_snapshot_flush;
        self.disk_fulls += other.disk_fulls;
        self.space_shortages += other.space_shortages;
        self.refused_for_space += other.refused_for_space;
        self.lost_disks += other.lost_disks;
        self.rejoins += other.rejoins;
        self.resumed += other.resumed;
        self.rebuilds_from_snapshot += other.rebuilds_from_snapshot;
        self.votes_while_rebuilding += other.votes_while_rebuilding;
        self.crashes_in_registers += other.crashes_in_registers;
        self.refused_in_place += other.refused_in_place;
        self.registers_opened_late += other.registers_opened_late;
        self.hand_overs += other.hand_overs;
        self.snapshots_while_opening += other.snapshots_while_opening;
        self.crashes_while_opening += other.crashes_while_opening;
        self.crashes_in_installs += other.crashes_in_installs;
        self.epoch_restarts += other.epoch_restarts;
        self.recoveries += other.recoveries;
        self.stale_batches += other.stale_batches;
        self.stray_votes += other.stray_votes;
        self.refused_recovering += other.refused_recovering;
        self.states_lost += other.states_lost;
        self.refused_state_lost += other.refused_state_lost;
        self.retried += other.retried;
        self.timed_out += other.timed_out;
        self.clock_skew_ms_max = self.clock_skew_ms_max.max(other.clock_skew_ms_max);
        self.sim_time_us += other.sim_time_us;
    }
}

impl std::fmt::Display for LogNodeSimReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "ops {} (on counters {}, multi-key {}; ok {}, not applied {}, unknown {}), crashes {} \
             (leader {}, all-node {}, power {}, in flush {}, torn sectors {}), partitions {}, \
             clock jumps {} (skew up to {} ms), leader cuts {}, view changes {}, gaps filled {}, duplicates skipped {}, \
             snapshots taken {} (installed {}, restarts from one {}, crashes in a flush \
             writing one {}, power {}), full disks {} (pauses {}, refused for space {}), lost \
             disks {} (rejoins {}), resumed {} (rebuilt from a snapshot {}, turns voting \
             while rebuilding {}), crashes among the registers' operations {} (in installs {}), refused in place \
             {}, registers opened late {} (handed over {}, snapshots meanwhile {}, crashes \
             meanwhile {}), epoch restarts {} (recoveries {}, stale batches {}, stray votes {}, refused recovering {}), \
             states lost {} (refused {}), node retries {}, node timeouts {}, batches {}, sim \
             time {} ms, trace {:016x}",
            self.operations,
            self.counter_operations,
            self.multi_key_operations,
            self.acknowledged,
            self.not_applied,
            self.unknown,
            self.crashes,
            self.leader_kills,
            self.crashes_all,
            self.power_failures,
            self.crashes_in_flush,
            self.torn_sectors,
            self.partitions,
            self.clock_jumps,
            self.clock_skew_ms_max,
            self.leader_cuts,
            self.view_changes,
            self.gaps_filled,
            self.duplicates_skipped,
            self.snapshots_taken,
            self.snapshots_installed,
            self.restarts_from_snapshot,
            self.crashes_in_snapshot_flush,
            self.power_failures_in_snapshot_flush,
            self.disk_fulls,
            self.space_shortages,
            self.refused_for_space,
            self.lost_disks,
            self.rejoins,
            self.resumed,
            self.rebuilds_from_snapshot,
            self.votes_while_rebuilding,
            self.crashes_in_registers,
            self.crashes_in_installs,
            self.refused_in_place,
            self.registers_opened_late,
            self.hand_overs,
            self.snapshots_while_opening,
            self.crashes_while_opening,
            self.epoch_restarts,
            self.recoveries,
            self.stale_batches,
            self.stray_votes,
            self.refused_recovering,
            self.states_lost,
            self.refused_state_lost,
            self.retried,
            self.timed_out,
            self.batches,
            self.sim_time_us / 1000,
            self.trace
        )
    }
}
