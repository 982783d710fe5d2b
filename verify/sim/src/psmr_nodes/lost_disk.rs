//! A disk lost at its worst moment in the whole-node run of the psmr engine, its node
//! rejoining every group, and a second failure during the rejoin (`docs/lost-disk.md`, "The
//! psmr engine"; [`super::PsmrNodeSimConfig::lost_disk_at_us`]).
use logless_multipaxos::ids::NodeId;
use logless_multipaxos::replica::Status;
use rand::seq::{IndexedRandom, SliceRandom};

use super::{Event, PsmrNodeCluster};

/// How long the lost disk's victim and the leader decide while the others are cut off, before
/// the victim loses its disk (µs).
const CUT_BEFORE_LOSS_US: u64 = 200_000;
/// How long after the loss the victim restarts, rejoining, the leader of the moment crashes
/// and the cut heals (µs): all at once, so that the victim learns nothing from that leader
/// before it is gone, and only a rejoin that waits for every other node keeps it from counting
/// as a fresh acceptor with the node that was cut off.
const LEADER_CRASH_AFTER_LOSS_US: u64 = 250_000;
/// How long a step of the lost disk waits for a leader, or for a node that may crash.
const STEP_RETRY_US: u64 = 50_000;

/// The steps of a disk lost at its worst moment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum LostDiskStep {
    /// Cut off every node but a leader, the victim and a quorum's worth of others.
    Cut,
    /// The victim crashes and loses its disk.
    Lose { node: NodeId },
    /// The victim restarts, rejoining, and the node that leads the most groups crashes.
    CrashLeader { victim: NodeId },
}

impl PsmrNodeCluster {
    /// Takes a step of the lost disk: cut off the nodes that will not see what a leader and
    /// the victim decide, make the victim lose its disk, then restart it rejoining and
    /// crash the leader of the moment as the cut heals.
    pub(super) fn lost_disk(&mut self, step: LostDiskStep) {
        if !self.faults_active {
            return;
        }
        let retry = |cluster: &mut Self| {
            (cluster.events).schedule(STEP_RETRY_US, Event::LostDisk(step));
        };
        match step {
            LostDiskStep::Cut => {
                let leaders: Vec<NodeId> = (self.ids().into_iter())
                    .filter(|&n| self.groups_led(n) > 0)
                    .collect();
                let Some(&leader) = leaders.choose(&mut self.rng) else {
                    return retry(self);
                };
                let mut others: Vec<NodeId> =
                    (self.ids().into_iter()).filter(|&n| n != leader).collect();
                others.shuffle(&mut self.rng);
                let victim = others.pop().expect("a cluster of three or more");
                // The leader, the victim and as many more as a quorum needs decide in every
                // group (the groups a cut-off node led change leader); the rest see nothing.
                let quorum = usize::from(self.config.nodes) / 2 + 1;
                let until = self.events.now_us() + CUT_BEFORE_LOSS_US + LEADER_CRASH_AFTER_LOSS_US;
                for node in others.split_off(quorum - 2) {
                    let n = self.nodes.get_mut(&node).expect("node");
                    n.sends_cut_until_us = n.sends_cut_until_us.max(until);
                    n.receives_cut_until_us = until;
                }
                let lose = Event::LostDisk(LostDiskStep::Lose { node: victim });
                self.events.schedule(CUT_BEFORE_LOSS_US, lose);
            }
            LostDiskStep::Lose { node } => {
                if self.nodes[&node].up() {
                    if !self.one_more_may_crash() {
                        return retry(self);
                    }
                    self.crash_node(node);
                }
                self.report.lost_disks += 1;
                let n = self.nodes.get_mut(&node).expect("node");
                // Every group's directory and the snapshots' are gone.
                n.images.clear();
                n.cut_image = None;
                n.rejoining = true;
                n.second_failure_due = true;
                n.rejoin_led = false;
                // It stays down until the leader's crash (a crash's restart comes sooner).
                n.down_until_us = self.events.now_us() + LEADER_CRASH_AFTER_LOSS_US;
                let crash = Event::LostDisk(LostDiskStep::CrashLeader { victim: node });
                self.events.schedule(LEADER_CRASH_AFTER_LOSS_US, crash);
            }
            LostDiskStep::CrashLeader { victim } => {
                if !self.nodes[&victim].up() {
                    self.start_node(victim);
                }
                let leader = (self.ids().into_iter())
                    .filter(|&n| !self.nodes[&n].rejoining)
                    .max_by_key(|&n| self.groups_led(n))
                    .filter(|&n| self.groups_led(n) > 0);
                if let Some(leader) = leader.filter(|_| self.one_more_may_crash()) {
                    self.crash_node(leader);
                }
            }
        }
    }

    /// After a turn of `node` committed: ends its rejoin once its replica recovered every
    /// group and the turn that completed it is durable (the node writes its `psmr/rejoined`
    /// marker then; later starts replay its groups' logs). While it still rejoins, notes
    /// whether it leads a group, and, once some of its groups are back and others are not,
    /// makes the second failure: the leader of a group that is back crashes (or is cut off,
    /// if one more node may not go down), so that the group elects anew while `node` is
    /// one of its voters.
    pub(super) fn after_turn(&mut self, node: NodeId) {
        let n = &self.nodes[&node];
        let Some(running) = n.running.as_ref().filter(|_| n.rejoining) else {
            return;
        };
        let (rejoining, led, due) = (running.core.rejoining(), n.rejoin_led, n.second_failure_due);
        // The groups back on `node` (with the leader it knows), and the others.
        let (back, behind): (Vec<_>, Vec<_>) = {
            let replica = running.shared.replica();
            let groups = replica.groups();
            (self.config.mode.groups(self.config.workers).into_iter())
                .filter_map(|group| groups.replica(group))
                .map(|log| (log.status() == Status::Serving, log.leader()))
                .partition(|(serving, _)| *serving)
        };
        if !rejoining {
            let n = self.nodes.get_mut(&node).expect("node");
            n.rejoining = false;
            n.second_failure_due = false;
            self.report.rejoins += 1;
            return;
        }
        if !led && self.groups_led(node) > 0 {
            self.nodes.get_mut(&node).expect("node").rejoin_led = true;
            self.report.rejoins_leading += 1;
        }
        if !due || !self.faults_active || back.is_empty() || behind.is_empty() {
            return;
        }
        let leaders: Vec<NodeId> = (back.into_iter())
            .map(|(_, leader)| leader)
            .filter(|&leader| leader != node && self.nodes[&leader].up())
            .collect();
        let Some(&leader) = leaders.choose(&mut self.rng) else {
            return;
        };
        self.nodes.get_mut(&node).expect("node").second_failure_due = false;
        self.report.second_failures += 1;
        if self.one_more_may_crash() {
            self.crash_node(leader);
        } else {
            let until = self.events.now_us() + self.config.leader_cut_off_us;
            let n = self.nodes.get_mut(&leader).expect("node");
            n.sends_cut_until_us = n.sends_cut_until_us.max(until);
        }
    }
}
