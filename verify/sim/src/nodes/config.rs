//! What a whole-node run is told (nodes, faults, workload, bugs) and what it reports.
use logless_node::config::NodeConfig;
use logless_node::node::Bugs;
use logless_node::turn::Sweep;
use logless_storage::Durability;

use super::ring::RingBugs;
use super::ring_change::RingChanges;

/// Faults of a whole-node run.
#[derive(Clone, Debug)]
pub struct NodeFaults {
    /// Probability that a batch of messages is lost.
    pub loss: f64,
    /// Probability that a batch is delivered twice.
    pub duplicate: f64,
    /// Network delay bounds (µs); different delays reorder batches.
    pub delay_us: (u64, u64),
    /// Mean time between partition changes (µs); 0 for none.
    pub partition_every_us: u64,
    /// Mean time between crashes (µs); 0 for none. At most a minority is down at once,
    /// except in a crash of all nodes.
    pub crash_every_us: u64,
    /// Probability that a crash takes every node down at once.
    pub crash_all: f64,
    /// In `sync` mode, the probability that a crash is a power failure (else a process crash).
    pub power_failure: f64,
    /// How long a crashed node stays down (µs).
    pub down_us: u64,
    /// Mean time between wall-clock jumps of some node (µs); 0 for none.
    pub clock_jump_every_us: u64,
    /// The largest jump, either way (ms).
    pub clock_jump_ms_max: u64,
    /// The probability that a crash of one node also loses its disk (at most one per run: the
    /// cluster tolerates one replica without its state): it restarts empty and rejoining
    /// (`docs/lost-disk.md`). 0 draws nothing, so that old schedules replay.
    pub lost_disk: f64,
    /// Whether every node's disk is full while the faults last: each store may not grow past
    /// the size it had at start, so new keys are refused once its free slots are used; space
    /// returns when the faults end.
    pub disk_full: bool,
    /// With `disk_full`, the node (by number) whose disk keeps its space, while the others'
    /// slot files cannot grow at all: its proposer has room for a new key that the other
    /// acceptors do not, and learns it from their FULL answers. `None`: every node's disk is
    /// full (80 KiB per slot file).
    pub disk_full_spared: Option<u16>,
    /// On a ring, the probability that a forwarding link resets after it delivered a request
    /// and before the reply (the forwarding node answers `UNCERTAIN`). 0 draws nothing.
    pub link_reset: f64,
}

impl NodeFaults {
    /// A perfect network, no crashes, steady clocks.
    pub fn none() -> NodeFaults {
        NodeFaults {
            loss: 0.0,
            duplicate: 0.0,
            delay_us: (100, 100),
            partition_every_us: 0,
            crash_every_us: 0,
            crash_all: 0.0,
            power_failure: 0.0,
            down_us: 0,
            clock_jump_every_us: 0,
            clock_jump_ms_max: 0,
            lost_disk: 0.0,
            disk_full: false,
            disk_full_spared: None,
            link_reset: 0.0,
        }
    }

    /// Everything at once, at rates that still let work finish.
    pub fn all() -> NodeFaults {
        NodeFaults {
            loss: 0.02,
            duplicate: 0.02,
            delay_us: (50, 2_000),
            partition_every_us: 50_000,
            crash_every_us: 60_000,
            crash_all: 0.15,
            power_failure: 0.6,
            down_us: 20_000,
            clock_jump_every_us: 80_000,
            clock_jump_ms_max: 1_500,
            lost_disk: 0.0,
            disk_full: false,
            disk_full_spared: None,
            link_reset: 0.05,
        }
    }
}

/// One whole-node run's parameters.
#[derive(Clone, Debug)]
pub struct NodeSimConfig {
    /// Nodes (replicas).
    pub nodes: u16,
    /// Shards per node.
    pub shards: u16,
    /// The seed of everything random.
    pub seed: u64,
    /// `Sync` or `Mmap`.
    pub durability: Durability,
    /// Faults of the safety phase.
    pub faults: NodeFaults,
    /// Closed-loop clients.
    pub clients: u32,
    /// Commands per client.
    pub commands_per_client: u32,
    /// Registers; register `i` is a counter, a string, a set or a lock by `i % 4`, and lives
    /// under key `k{i}.{generation}` (a fresh generation after a few writes of unknown outcome).
    pub keys: u32,
    /// Registers that expire, after the `keys` plain ones: register `keys + j` is a string
    /// whose writes carry times to live of tens to hundreds of ms (`j` even), or a lock with
    /// leases as short (`j` odd). With none, the workload draws exactly what it drew before
    /// they existed, so old schedules replay.
    pub expiring_keys: u32,
    /// Hashes, lists and sorted sets, after the expiring registers: register
    /// `keys + expiring_keys + j` is a hash, a list or a sorted set by `j % 3`, and some of its
    /// commands are single-key transactions. None by default, so that the many-seed schedules
    /// replay as they did before they existed.
    pub collection_keys: u32,
    /// Client think time between commands (µs).
    pub think_us: u64,
    /// How long a client waits for an answer before it records the outcome as unknown (µs).
    pub client_timeout_us: u64,
    /// How long a flush takes (µs).
    pub flush_us: u64,
    /// When the faults stop (µs).
    pub faults_until_us: u64,
    /// When the workload is cut off if it has not finished (µs).
    pub until_us: u64,
    /// How long the liveness phase may take for each key (µs).
    pub liveness_us: u64,
    /// The node's settings the shards run with; their proposers are configured from it as a
    /// node's are ([`NodeConfig::proposer_config`]): reads ask a quorum first and fast writes
    /// vote with everyone by default, and the proposer's register bound is never reached by
    /// the few keys here. Requests time out after 400 ms.
    pub node: NodeConfig,
    /// The shards' background sweep (it runs while `node` has removal on).
    pub sweep: Sweep,
    /// Deliberate bugs (harness tests only), the same switches a node starts with.
    pub bugs: Bugs,
    /// Deliberate bugs of a ring's forwarding and placement (harness tests only).
    pub ring_bugs: RingBugs,
    /// Membership changes of a ring during the faults (none by default).
    pub ring_changes: RingChanges,
    /// On a ring whose change removes or replaces a node: the staged schedule of the fence
    /// (module `fence`; [`NodeSimConfig::ring_fence`]). Off by default.
    pub fence_schedule: bool,
}

impl NodeSimConfig {
    /// Defaults for `nodes` nodes, `seed`, `durability` and no faults.
    pub fn new(nodes: u16, seed: u64, durability: Durability) -> NodeSimConfig {
        NodeSimConfig {
            nodes,
            shards: 2,
            seed,
            durability,
            faults: NodeFaults::none(),
            clients: 6,
            commands_per_client: 30,
            keys: 8,
            expiring_keys: 4,
            collection_keys: 0,
            think_us: 200,
            client_timeout_us: 600_000,
            flush_us: if durability == Durability::Sync {
                60
            } else {
                5
            },
            faults_until_us: 2_000_000,
            until_us: 30_000_000,
            liveness_us: 10_000_000,
            node: NodeConfig {
                request_timeout_ms: 400,
                ..NodeConfig::default()
            },
            sweep: Sweep::default(),
            bugs: Bugs::default(),
            ring_bugs: RingBugs::default(),
            ring_changes: RingChanges::default(),
            fence_schedule: false,
        }
    }
}

impl NodeSimConfig {
    /// The configuration the many-seed test runs for `seed`: every fault, `sync` mode on
    /// even seeds and `mmap` on odd ones, 5 nodes on every fifth seed and 3 otherwise, thrifty
    /// fast writes on every third seed (those 2 modulo 3; clients send a key to any node, so
    /// reads through the node a fast write left out find it behind), removal of dead registers
    /// on all but every fourth seed (those 3 modulo 4; of expired values only on those 0
    /// modulo 4, which have no clock jumps). Every seventh seed (those 6 modulo 7) is a ring
    /// of 5 to 9 nodes with R = 3 instead ([`NodeSimConfig::ring_of`]), under the same faults,
    /// whose membership changes while they last ([`RingChanges::for_ring_seed`]).
    /// The replay command rebuilds a failing run from its seed alone with this.
    pub fn for_seed(seed: u64) -> NodeSimConfig {
        let durability = if seed.is_multiple_of(2) {
            Durability::Sync
        } else {
            Durability::Mmap
        };
        let nodes = if seed % 5 == 4 { 5 } else { 3 };
        let mut config = NodeSimConfig::new(nodes, seed, durability);
        config.faults = NodeFaults::all();
        config.node.thrifty_writes = seed % 3 == 2;
        // Removal of dead registers (on by default, as on a node) is off on every fourth seed.
        // The checkers judge expiry at each command's own stamp, while a removal makes a value
        // read as expired at the remover's: exact within one clock. So expired values are
        // removed at once on the seeds without clock jumps (0 modulo 4), and only deleted
        // ones where clocks jump (1 and 2), as a grace above any skew keeps expired ones.
        match seed % 4 {
            0 => {
                config.faults.clock_jump_every_us = 0;
                config.node.removal_grace_ms = 0;
            }
            1 | 2 => config.node.removal_grace_ms = 3_600_000,
            _ => config.node.remove_dead_registers = Some(false),
        }
        if seed % 7 == 6 {
            config.nodes = 5 + (seed / 7 % 5) as u16;
            config.make_ring(3);
            config.ring_changes = RingChanges::for_ring_seed(seed / 7);
        }
        config
    }

    /// A ring of `nodes` nodes with three replicas per key, `seed`, `durability` and no
    /// faults, with clients on every node.
    pub fn ring_of(nodes: u16, seed: u64, durability: Durability) -> NodeSimConfig {
        let mut config = NodeSimConfig::new(nodes, seed, durability);
        config.make_ring(3);
        config
    }

    /// The staged schedule of the fence (module `fence`) for `seed`: a ring of five nodes
    /// with R = 3, one change, a removal of a node drawn from the seed, during which that node
    /// lags two stages behind and is then left with one other old replica of its slots, on a
    /// network that delays and reorders but loses nothing, without crashes or other
    /// partitions, the coordinator waiting only as the protocol needs. Two clients a node, each
    /// giving up on a command after 50 ms, so that those of the lagging node, stuck on keys it
    /// cannot reach, go on to others while the split lasts.
    pub fn ring_fence(seed: u64) -> NodeSimConfig {
        let durability = if seed.is_multiple_of(2) {
            Durability::Sync
        } else {
            Durability::Mmap
        };
        let mut config = NodeSimConfig::ring_of(5, seed, durability);
        config.faults.delay_us = (50, 1_000);
        config.clients = 10;
        config.think_us = 2_000;
        config.commands_per_client = 200;
        config.client_timeout_us = 50_000;
        config.ring_changes = RingChanges {
            changes: 1,
            spare: false,
            wait_for_every_node: false,
        };
        config.fence_schedule = true;
        config
    }

    /// Makes the nodes a ring with `replication` replicas per key, with what a ring needs:
    /// removal of dead registers off (a node refuses it on a ring), no lost disks (a ring
    /// refuses `--rejoin`) and a client on every node.
    fn make_ring(&mut self, replication: u8) {
        self.node.replication = replication;
        self.node.remove_dead_registers = Some(false);
        self.faults.lost_disk = 0.0;
        self.clients = self.clients.max(u32::from(self.nodes));
    }

    /// Whether the nodes form a ring (each key on fewer nodes than all).
    pub fn is_ring(&self) -> bool {
        self.node.replication != 0 && u16::from(self.node.replication) < self.nodes
    }
}

/// What a run did and found.
#[derive(Clone, Debug, Default)]
pub struct NodeSimReport {
    /// Client operations recorded (liveness operations included).
    pub operations: u64,
    /// Operations acknowledged.
    pub acknowledged: u64,
    /// Operations refused as not applied.
    pub not_applied: u64,
    /// Operations with unknown outcome.
    pub unknown: u64,
    /// Message batches sent between nodes.
    pub batches: u64,
    /// Broken links seen by receivers.
    pub link_breaks: u64,
    /// Node crashes (each node of a crash of all counts).
    pub crashes: u64,
    /// Crashes of every node at once.
    pub crashes_all: u64,
    /// Crashes that were power failures.
    pub power_failures: u64,
    /// Crashes that landed inside a flush.
    pub crashes_in_flush: u64,
    /// Sectors torn by power failures.
    pub torn_sectors: u64,
    /// Disks lost (their nodes rejoined).
    pub lost_disks: u64,
    /// Acceptor state writes refused for lack of space, counted when space returned (writes
    /// refused in a life that crashed before are not counted).
    pub writes_refused_for_space: u64,
    /// Of those, client writes a proposer refused because too many acceptors answered FULL
    /// (counted likewise).
    pub writes_refused_by_quorum: u64,
    /// Partition changes.
    pub partitions: u64,
    /// Wall-clock jumps.
    pub clock_jumps: u64,
    /// Operations on expiring registers (times to live and leases).
    pub expiring_ops: u64,
    /// Of those, reads that found the key absent or expired (GET nil, EXISTS 0, PTTL -2).
    pub expiring_absent_reads: u64,
    /// Lock acquisitions that took a lock whose holder's lease had run out (a new token while
    /// the previous one's owner had not released it).
    pub leases_taken_over: u64,
    /// Idle registers the proposers dropped to keep within their bound.
    pub registers_dropped: u64,
    /// Dead registers the acceptors forgot (removal, `docs/removal.md`), summed over nodes.
    pub registers_removed: u64,
    /// The farthest any shard clock was from simulated time when it stamped a turn (ms): the
    /// skew bound the checkers are given.
    pub clock_skew_ms_max: u64,
    /// Simulated time at the end (µs).
    pub sim_time_us: u64,
    /// A hash of every event processed: equal for equal seeds.
    pub trace: u64,
    /// On a ring: commands a node forwarded to a replica of their key.
    pub forwarded: u64,
    /// Of those, answered `UNCERTAIN` because their link broke after they were written.
    pub forwarded_uncertain: u64,
    /// Of those, answered `TRYAGAIN` because no replica could be reached.
    pub forwarded_unreachable: u64,
    /// Commands a ring node refused (`CROSSSLOT`: a transaction on keys it does not hold).
    pub refused_elsewhere: u64,
    /// Membership changes of the ring that reached their stable stage.
    pub ring_changes: u64,
    /// Stages installed by nodes (a node's install of one stage counts once).
    pub stage_installs: u64,
    /// Keys of moving slots written through under joint quorums (the sync step).
    pub keys_synced: u64,
    /// Raises of a gaining shard's round floor that its full store refused: not counted as
    /// raised, the shard holding its gained slots back and asked to raise again (docs/ring.md
    /// §4, "Dead registers", "A full store").
    pub floors_refused: u64,
    /// Steps of the coordinator (one per simulated millisecond while it waits) that started no
    /// change because a node it would give slots to had not reported the ring's stage with
    /// nothing of slots it does not replicate (a change is drawn again at the next).
    pub changes_held_back: u64,
    /// Splits the staged schedule of the fence made (module `fence`).
    pub fence_splits: u64,
    /// Failures of the run itself: a store refused after a crash, a store error, a key that
    /// did not become available again in the liveness phase.
    pub failures: Vec<String>,
}

impl NodeSimReport {
    /// Adds the counts of `other` (failures, trace and simulated time excepted; the skew is the
    /// larger).
    pub fn add(&mut self, other: &NodeSimReport) {
        self.operations += other.operations;
        self.acknowledged += other.acknowledged;
        self.not_applied += other.not_applied;
        self.unknown += other.unknown;
        self.batches += other.batches;
        self.link_breaks += other.link_breaks;
        self.crashes += other.crashes;
        self.crashes_all += other.crashes_all;
        self.power_failures += other.power_failures;
        self.crashes_in_flush += other.crashes_in_flush;
        self.torn_sectors += other.torn_sectors;
        self.lost_disks += other.lost_disks;
        self.writes_refused_for_space += other.writes_refused_for_space;
        self.writes_refused_by_quorum += other.writes_refused_by_quorum;
        self.partitions += other.partitions;
        self.clock_jumps += other.clock_jumps;
        self.expiring_ops += other.expiring_ops;
        self.expiring_absent_reads += other.expiring_absent_reads;
        self.leases_taken_over += other.leases_taken_over;
        self.registers_dropped += other.registers_dropped;
        self.registers_removed += other.registers_removed;
        self.clock_skew_ms_max = self.clock_skew_ms_max.max(other.clock_skew_ms_max);
        self.forwarded += other.forwarded;
        self.forwarded_uncertain += other.forwarded_uncertain;
        self.forwarded_unreachable += other.forwarded_unreachable;
        self.refused_elsewhere += other.refused_elsewhere;
        self.ring_changes += other.ring_changes;
        self.stage_installs += other.stage_installs;
        self.keys_synced += other.keys_synced;
        self.floors_refused += other.floors_refused;
        self.changes_held_back += other.changes_held_back;
        self.fence_splits += other.fence_splits;
    }
}

impl std::fmt::Display for NodeSimReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "ops {} (ok {}, not applied {}, unknown {}), crashes {} (all-node {}, power {}, \
             in flush {}, torn sectors {}), partitions {}, clock jumps {} (skew up to {} ms), \
             expiring ops {} (absent reads {}, leases taken over {}), batches {}, link breaks {}, \
             registers removed {}, forwarded {} (uncertain {}, unreachable {}, refused {}), \
             ring changes {} (stage installs {}, keys synced {}, floors refused {}, held back {}, fence splits {}), sim time {} ms, trace {:016x}",
            self.operations,
            self.acknowledged,
            self.not_applied,
            self.unknown,
            self.crashes,
            self.crashes_all,
            self.power_failures,
            self.crashes_in_flush,
            self.torn_sectors,
            self.partitions,
            self.clock_jumps,
            self.clock_skew_ms_max,
            self.expiring_ops,
            self.expiring_absent_reads,
            self.leases_taken_over,
            self.batches,
            self.link_breaks,
            self.registers_removed,
            self.forwarded,
            self.forwarded_uncertain,
            self.forwarded_unreachable,
            self.refused_elsewhere,
            self.ring_changes,
            self.stage_installs,
            self.keys_synced,
            self.floors_refused,
            self.changes_held_back,
            self.fence_splits,
            self.sim_time_us / 1000,
            self.trace
        )
    }
}
