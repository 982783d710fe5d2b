//! What a whole-node run of the psmr engine is told (nodes, workers, mode, faults, workload,
//! bugs) and what it reports.
use logless_multipaxos::config::InjectedBugs as PaxosBugs;
use logless_psmr::config::{InjectedBugs, Mode};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use crate::nodes::NodeFaults;

/// One whole-node run of the psmr engine.
#[derive(Clone, Debug)]
pub struct PsmrNodeSimConfig {
    /// Nodes (replicas).
    pub nodes: u16,
    /// The seed of everything random.
    pub seed: u64,
    /// How the nodes order and execute (`--psmr-mode`; not `no-rep`, which has no replicas).
    pub mode: Mode,
    /// Worker threads per node (`--threads`): `workers + 1` groups under P-SMR.
    pub workers: u16,
    /// Faults while the clients work: loss, duplication, delays, partitions, crashes (process
    /// crashes: power failures are not drawn; full disks and a lost disk are drawn below),
    /// clock jumps.
    pub faults: NodeFaults,
    /// How often (mean, µs; 0: never) the leader of a random group is cut off from sending
    /// for `leader_cut_off_us`, so that another node takes the group over.
    pub leader_cut_every_us: u64,
    /// How long a cut-off leader sends nothing (µs).
    pub leader_cut_off_us: u64,
    /// How often (mean, µs; 0: never) a disk fills up while the faults last: every group's
    /// log directory of the node refuses new files and growth (`ENOSPC`) for `disk_full_us`,
    /// so that the next segment a group needs is refused and the node pauses
    /// (`node/src/psmr_turn.rs`, "A full disk"). A node that leads some group half the time;
    /// every node's at once by `disk_full_all`. A crash ends its node's: it restarts with
    /// space. The groups' log segments are then small, so that a full disk soon matters.
    pub disk_full_every_us: u64,
    /// How long a disk stays full (µs).
    pub disk_full_us: u64,
    /// Of the disks' filling, the share that fill every node's at once.
    pub disk_full_all: f64,
    /// Closed-loop clients, each connected to one node (another while that one is down).
    pub clients: u32,
    /// Commands per client.
    pub commands_per_client: u32,
    /// Entries of the B⁺-tree the clients share: entry `i` is key `e{i}.{generation}` (a
    /// fresh generation after a few writes of unknown outcome).
    pub entries: u32,
    /// Client think time between commands (µs).
    pub think_us: u64,
    /// How long a client waits for an answer before it records the outcome as unknown (µs).
    pub client_timeout_us: u64,
    /// The node's request timeout (ms).
    pub request_timeout_ms: u64,
    /// When the faults stop if the workload has not finished (µs).
    pub faults_until_us: u64,
    /// When the workload is cut off if it has not finished (µs).
    pub until_us: u64,
    /// How long each liveness read may take after healing (µs).
    pub liveness_us: u64,
    /// Deliberate engine bugs in every node (the node's `--inject-bug psmr-*`).
    pub bugs: InjectedBugs,
    /// Deliberate bugs of every group's log (the log engine's), in every node.
    pub paxos_bugs: PaxosBugs,
    /// When (µs; 0: never) a disk is lost at its worst moment (`docs/lost-disk.md`, "The psmr
    /// engine"; module `lost_disk`): a node `C` is cut off both ways while the two others,
    /// `V` and `L`, decide in every group; `V` crashes and loses every group's directory and
    /// its snapshots; as the cut heals, `V` restarts rejoining ([`Replica::start_rejoin`], at
    /// every start until a rejoin completed in every group: the node's `psmr/rejoined`
    /// marker) and the node leading the most groups (`L`, mostly) crashes at once, so that a
    /// view change could count `V`'s new Promises with `C`'s, which never saw what `V`'s lost
    /// votes helped choose (a rejoin waits for `L`'s answers instead). Then a
    /// second failure while `V` still rejoins: once some group of `V` is back and another is
    /// not, the leader of a group that is back (not `V`) crashes, or, if one more node may not
    /// go down, is cut off, so that `V` may come to lead a group while it still rejoins
    /// another (the window `docs/lost-disk.md` names).
    ///
    /// [`Replica::start_rejoin`]: logless_psmr::replica::Replica::start_rejoin
    pub lost_disk_at_us: u64,
    /// Snapshots, if the nodes keep them: the periodic cut's threshold (bytes of commands over
    /// all groups) and each group's own snapshot threshold (bytes of its log), small enough
    /// that the groups truncate their logs several times a run and a node that was down or
    /// cut off catches up past a peer's truncation (`docs/psmr-snapshots.md`).
    pub snapshots: Option<(u64, u64)>,
}

impl PsmrNodeSimConfig {
    /// Defaults for `nodes` nodes with `workers` workers in `mode`, `seed`, and no faults.
    pub fn new(nodes: u16, seed: u64, mode: Mode, workers: u16) -> PsmrNodeSimConfig {
        PsmrNodeSimConfig {
            nodes,
            seed,
            mode,
            workers,
            faults: NodeFaults::none(),
            leader_cut_every_us: 0,
            disk_full_every_us: 0,
            disk_full_us: 0,
            disk_full_all: 0.0,
            leader_cut_off_us: 600_000,
            clients: 6,
            commands_per_client: 25,
            entries: 4,
            think_us: 10_000,
            client_timeout_us: 3_000_000,
            request_timeout_ms: 1_500,
            faults_until_us: 2_000_000,
            until_us: 30_000_000,
            liveness_us: 5_000_000,
            bugs: InjectedBugs::default(),
            paxos_bugs: PaxosBugs::default(),
            lost_disk_at_us: 0,
            snapshots: None,
        }
    }

    /// A disk lost at its worst moment (see [`PsmrNodeSimConfig::lost_disk_at_us`]), at a
    /// point of the faults drawn from the seed (so that the run's own draws stay what they
    /// were), with more commands per client, so that the faults, the rejoin and the second
    /// failure mostly happen while the clients work.
    pub fn lost_disk(&mut self) {
        let mut rng = SmallRng::seed_from_u64(self.seed ^ LOST_DISK_SALT);
        self.lost_disk_at_us =
            rng.random_range(self.faults_until_us / 10..self.faults_until_us / 2);
        self.commands_per_client = self.commands_per_client.max(40);
    }

    /// Snapshots with small thresholds: a cut every 1.5 kB of commands, a group snapshot
    /// every 600 bytes of its log (at that size whatever the last one's).
    pub fn small_snapshots(&mut self) {
        self.snapshots = Some((1_500, 600));
    }

    /// The faults of the many-seed runs: the log engine's whole-node faults, with crashes and
    /// partitions spaced to let a group's leader be suspected and replaced between them, and
    /// a group's leader cut off now and then. Clock jumps are up to 1 s as in the log
    /// engine's simulation; they add up to skews of seconds between groups' leaders, which
    /// the merge must not wait out: a skip is stamped past the stamp its merge waits for
    /// (see `logless_psmr::merge`). With skips stamped by the leader's clock alone, seed 69
    /// stalled a group for the skew (+697 ms against −873 ms) and its commands outlived the
    /// node's request timeout (1.5 s).
    pub fn faults() -> NodeFaults {
        NodeFaults {
            crash_every_us: 250_000,
            down_us: 150_000,
            partition_every_us: 300_000,
            clock_jump_every_us: 400_000,
            clock_jump_ms_max: 1_000,
            power_failure: 0.0,
            ..NodeFaults::all()
        }
    }

    /// The configuration the many-seed tests run for `seed`: P-SMR with two workers (three
    /// groups) on most seeds, three workers on every fourth, sP-SMR on every fifth and SMR
    /// on every seventh; every fault, leaders' cuts on every third seed and full disks on every
    /// fourth.
    pub fn for_seed(seed: u64) -> PsmrNodeSimConfig {
        let mode = if seed % 5 == 1 {
            Mode::SpSmr
        } else if seed % 7 == 2 {
            Mode::Smr
        } else {
            Mode::Psmr
        };
        let workers = if seed % 4 == 3 { 3 } else { 2 };
        let mut config = PsmrNodeSimConfig::new(3, seed, mode, workers);
        config.faults = PsmrNodeSimConfig::faults();
        if seed.is_multiple_of(3) {
            config.leader_cut_every_us = 500_000;
        }
        if seed % 4 == 1 {
            config.full_disks();
        }
        if seed % 3 != 1 {
            config.small_snapshots();
        }
        config
    }

    /// Disks that fill up a few times a run, for 450 ms each (several space probes of the
    /// paused node), every node's at once a third of the time.
    pub fn full_disks(&mut self) {
        self.disk_full_every_us = 400_000;
        self.disk_full_us = 450_000;
        self.disk_full_all = 0.3;
    }
}

/// Mixed into the seed to draw the moment of [`PsmrNodeSimConfig::lost_disk`].
const LOST_DISK_SALT: u64 = 0x6c6f_7374_6469_736b;

/// What a run did and found.
#[derive(Clone, Debug, Default)]
pub struct PsmrNodeSimReport {
    /// Client operations (liveness ones included).
    pub operations: u64,
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
    /// Crashes of the leader of some group.
    pub leader_kills: u64,
    /// Crashes of every node at once.
    pub crashes_all: u64,
    /// Partition changes.
    pub partitions: u64,
    /// Wall-clock jumps.
    pub clock_jumps: u64,
    /// Groups' leaders cut off.
    pub leader_cuts: u64,
    /// Disks filled (each node of a filling of all counts).
    pub disk_fulls: u64,
    /// Disks lost (their nodes restarted rejoining).
    pub lost_disks: u64,
    /// Rejoins completed (in every group) after a lost disk.
    pub rejoins: u64,
    /// Second failures while a node rejoined (the leader of a group back on it crashed or
    /// was cut off).
    pub second_failures: u64,
    /// Rejoins during which the rejoining node came to lead a group that was back while
    /// another still rejoined (the window of `docs/lost-disk.md`).
    pub rejoins_leading: u64,
    /// Times a node's disk had no space for a group's log and it paused.
    pub space_shortages: u64,
    /// Operations refused (MISCONF) because their node's disk was full.
    pub refused_for_space: u64,
    /// Commands the workers executed, over every node and incarnation.
    pub executed: u64,
    /// Of those, in synchronous mode (`g_all`'s, through the barrier).
    pub executed_synchronous: u64,
    /// Skips proposed by idle groups' leaders.
    pub skips_proposed: u64,
    /// Snapshots (cut and service state) the nodes wrote.
    pub cuts_written: u64,
    /// Cuts the nodes installed from a peer's group snapshot (catch-up past its truncation).
    pub cuts_installed: u64,
    /// Operations the nodes handed to their replica again (their retry).
    pub retried: u64,
    /// Operations the nodes answered "outcome unknown".
    pub timed_out: u64,
    /// Simulated time at the end (µs).
    pub sim_time_us: u64,
    /// A hash of every event processed: equal for equal seeds.
    pub trace: u64,
    /// Failures of the run itself: a log that does not reopen, a store error, a reply the
    /// workload cannot read, a read not acknowledged after healing, replicas whose digests
    /// differ once settled.
    pub failures: Vec<String>,
}

impl PsmrNodeSimReport {
    /// Adds the counts of `other` (failures and trace excepted).
    pub fn add(&mut self, other: &PsmrNodeSimReport) {
        self.operations += other.operations;
        self.acknowledged += other.acknowledged;
        self.not_applied += other.not_applied;
        self.unknown += other.unknown;
        self.batches += other.batches;
        self.crashes += other.crashes;
        self.leader_kills += other.leader_kills;
        self.crashes_all += other.crashes_all;
        self.partitions += other.partitions;
        self.clock_jumps += other.clock_jumps;
        self.leader_cuts += other.leader_cuts;
        self.disk_fulls += other.disk_fulls;
        self.lost_disks += other.lost_disks;
        self.rejoins += other.rejoins;
        self.second_failures += other.second_failures;
        self.rejoins_leading += other.rejoins_leading;
        self.space_shortages += other.space_shortages;
        self.refused_for_space += other.refused_for_space;
        self.executed += other.executed;
        self.executed_synchronous += other.executed_synchronous;
        self.skips_proposed += other.skips_proposed;
        self.cuts_written += other.cuts_written;
        self.cuts_installed += other.cuts_installed;
        self.retried += other.retried;
        self.timed_out += other.timed_out;
        self.sim_time_us += other.sim_time_us;
    }
}

impl std::fmt::Display for PsmrNodeSimReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "ops {} (ok {}, not applied {}, unknown {}), executed {} (synchronous {}), skips {}, \
             cuts written {} (installed {}), crashes {} (group leaders {}, all-node {}), partitions {}, clock jumps {}, leader \
             cuts {}, disks full {} (pauses {}, refused {}), lost disks {} (rejoins {}, second \
             failures {}, rejoins leading {}), node retries {}, node timeouts {}, batches {}, sim time {} ms, trace \
             {:016x}",
            self.operations,
            self.acknowledged,
            self.not_applied,
            self.unknown,
            self.executed,
            self.executed_synchronous,
            self.skips_proposed,
            self.cuts_written,
            self.cuts_installed,
            self.crashes,
            self.leader_kills,
            self.crashes_all,
            self.partitions,
            self.clock_jumps,
            self.leader_cuts,
            self.disk_fulls,
            self.space_shortages,
            self.refused_for_space,
            self.lost_disks,
            self.rejoins,
            self.second_failures,
            self.rejoins_leading,
            self.retried,
            self.timed_out,
            self.batches,
            self.sim_time_us / 1000,
            self.trace
        )
    }
}
