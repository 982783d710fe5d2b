//! The disk faults of the whole-node run of the log engine: disks that fill up for a while,
//! and a disk lost at its worst moment, its node rejoining (`docs/lost-disk.md`).
use logless_multipaxos::ids::NodeId;
use logless_storage::SimDir;
use rand::seq::SliceRandom;

use logless_multipaxos::replica::Status;
use logless_node::epoch_file::EPOCH_FILE;
use logless_node::log_turn::LogCore;

use super::{Event, LogNodeCluster};
use crate::whole_node;
use crate::whole_node::AnswerTo;

/// How long a lost disk's victim and leader decide while the others are cut off, before the
/// victim loses its disk (µs).
const CUT_BEFORE_LOSS_US: u64 = 200_000;
/// How long after the loss the leader of the moment crashes, and the cut heals (µs): after the
/// victim restarted, rejoining.
const LEADER_CRASH_AFTER_LOSS_US: u64 = 250_000;
/// How long a step of the lost disk waits for a leader, or for a node that may crash.
const STEP_RETRY_US: u64 = 50_000;

/// The steps of a disk lost at its worst moment ([`super::LogNodeSimConfig::lost_disk_at_us`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum LostDiskStep {
    /// Cut off every node but the leader, a follower and a quorum's worth of others.
    Cut,
    /// The follower crashes and loses its disk.
    Lose { node: NodeId },
    /// The leader of the moment crashes.
    CrashLeader,
}

impl LogNodeCluster {
    /// Fills the disk of one node (the leader of the moment half the time) or of every node,
    /// for [`super::LogNodeSimConfig::disk_full_us`].
    pub(super) fn disk_full(&mut self) {
        if !self.faults_active {
            return;
        }
        let every_us = self.config.disk_full_every_us;
        whole_node::schedule_next(&mut self.events, &mut self.rng, every_us, Event::DiskFull);
        let up = self.up_nodes();
        let leader = up.iter().copied().find(|&n| self.is_leader(n));
        let all = self.config.disk_full_all;
        let chosen = whole_node::disk_full_nodes(&mut self.rng, up, leader, all);
        let full_us = self.config.disk_full_us;
        let until = self.events.now_us() + full_us;
        for node in chosen {
            self.report.disk_fulls += 1;
            let n = self.nodes.get_mut(&node).expect("node");
            n.disk_full_until_us = n.disk_full_until_us.max(until);
            if let Some(core) = n.core.as_mut() {
                core.log_mut().dir_mut().full = true;
            }
            self.events.schedule(full_us, Event::DiskSpace { node });
        }
    }

    /// Space returns to the disk of `node`.
    pub(super) fn give_space(&mut self, node: NodeId) {
        let n = self.nodes.get_mut(&node).expect("node");
        n.disk_full_until_us = 0;
        if let Some(core) = n.core.as_mut() {
            core.log_mut().dir_mut().full = false;
        }
    }

    /// Takes a step of the lost disk: cut off the nodes that will not see what the leader and
    /// the victim decide, make the victim lose its disk (it restarts rejoining), then crash
    /// the leader of the moment as the cut heals.
    pub(super) fn lost_disk(&mut self, step: LostDiskStep) {
        if !self.faults_active {
            return;
        }
        let retry = |cluster: &mut Self| {
            (cluster.events).schedule(STEP_RETRY_US, Event::LostDisk(step));
        };
        match step {
            LostDiskStep::Cut => {
                let Some(leader) = self.ids().into_iter().find(|&n| self.is_leader(n)) else {
                    return retry(self);
                };
                let mut others: Vec<NodeId> =
                    (self.ids().into_iter()).filter(|&n| n != leader).collect();
                others.shuffle(&mut self.rng);
                let victim = others.pop().expect("a cluster of three or more");
                // The leader, the victim and as many more as a quorum needs decide; the rest
                // see nothing of it.
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
                    self.crash_node(node, false);
                }
                self.report.lost_disks += 1;
                if self.epoch_mode() {
                    // Under EpochSS the disk holds only the epoch file.
                    let file = self.epoch_dir(node).join(EPOCH_FILE);
                    std::fs::remove_file(file).expect("the epoch file of a node that ran");
                }
                let n = self.nodes.get_mut(&node).expect("node");
                n.image = SimDir::new();
                n.registers_image = Vec::new();
                n.rejoining = true;
                let crash = Event::LostDisk(LostDiskStep::CrashLeader);
                self.events.schedule(LEADER_CRASH_AFTER_LOSS_US, crash);
            }
            LostDiskStep::CrashLeader => {
                let leader = self.ids().into_iter().find(|&n| self.is_leader(n));
                if let Some(leader) = leader.filter(|_| self.one_more_may_crash()) {
                    let power = self.power_failure();
                    self.crash_node(leader, power);
                }
            }
        }
    }

    /// Ends the rejoin of `node` once its replica recovered and the turn that completed it is
    /// durable (the node writes its `log/rejoined` marker then): later starts replay its log.
    /// Under EpochSS, once it recovered from its peers (its epoch file holds its new epoch,
    /// later starts take the next as usual).
    pub(super) fn note_rejoined(&mut self, node: NodeId) {
        let epochs = self.epoch_mode();
        let n = self.nodes.get_mut(&node).expect("node");
        let recovered = |core: &LogCore<AnswerTo, SimDir>| match epochs {
            true => core.replica().status() == Status::Serving,
            false => !core.rejoining(),
        };
        if n.rejoining && n.core.as_ref().is_some_and(recovered) {
            n.rejoining = false;
            self.report.rejoins += 1;
        }
    }
}
