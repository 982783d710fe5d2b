//! A staged schedule for the stage fence (docs/ring.md §4 "The protocol", step 2; issue 28's
//! mutation "a configuration change applied without its fence"): a node two stages behind the
//! ring, left with one other old replica of its slots, proposes with the old quorums.
//!
//! The random faults reach this rarely (a node lagging two stages needs a late reader and a
//! cut at the right moments; of the first 700 ring seeds one caught the mutation, and which one
//! moved with every change of the schedules), so this schedule makes it, on a ring of five
//! whose one change removes a node `L` (`NodeSimConfig::ring_fence`):
//!
//! 1. **Lag.** As the coordinator writes `Joint(e+1)`, `L` is cut off from every node, both
//!    ways: it cannot read the stage register (it reaches no majority of the peer list), so
//!    it stays in `Stable(e)`, and no node hears from it. The coordinator does not wait for it
//!    (only a majority of each moving slot's old replicas, which the other two are), the sync
//!    writes every key through under joint quorums without it, and the register becomes
//!    `Stable(e+1)`.
//! 2. **Split.** Once every other node installed `Stable(e+1)`, the cut changes: `L` and one
//!    other node `X` (the one that shares the most of the workload's keys' old replica sets
//!    with `L`) on one side, the three others on the other, for [`SPLIT_US`]. For a key whose
//!    old replicas are `{L, X, Y}`, `{L, X}` is a majority of the old set as `L` sees it, and
//!    its new replicas are three of the four nodes other than `L`, so the other side holds a
//!    majority of them. With the fence `X` refuses `L`'s `Stable(e)` messages (STALE) and only
//!    the other side decides; without it (`accept_any_stage`) `X`, a replica of the key in
//!    both configurations, votes with `L`, and both sides decide on the key: the clients of
//!    `L` and of the three others see each other's writes missing (counters incremented from
//!    the same value twice, reads missing acknowledged writes), which the checkers find.
//! 3. **Heal.** The cut is lifted; `L` reads the register at its next read, installs
//!    `Stable(e+1)` and serves on; the faults end later as in any run.
use logless_node::ring_change::ChangeRequest;
use logless_node::ring_register::RingStage;
use logless_placement::key_slot;
use logless_rmw::ids::NodeId;

use super::{Event, NodeCluster};

/// How long the split lasts (µs).
pub const SPLIT_US: u64 = 500_000;

/// How often the schedule looks at the nodes' stages while it waits (µs).
const POLL_US: u64 = 1_000;

/// Where the schedule is.
#[derive(Clone, Copy, Debug)]
pub(super) enum FenceStep {
    /// `lagging` is cut off from every node until the others installed `Stable(e+1)`.
    Lagging { lagging: NodeId },
    /// The lagging node and its partner are cut off from the others, for [`SPLIT_US`].
    Split,
    /// The cut is lifted.
    Done,
}

impl NodeCluster {
    /// The coordinator wrote the joint stage of `request`: if the schedule is on and the change
    /// removes a node of the ring (or replaces one), that node starts lagging.
    pub(super) fn fence_on_joint(&mut self, request: ChangeRequest) {
        if !self.config.fence_schedule || self.fence.is_some() {
            return;
        }
        let (ChangeRequest::Remove(node) | ChangeRequest::Replace { old: node, .. }) = request
        else {
            return;
        };
        let lagging = NodeId(node);
        self.cut.clear();
        for peer in self.peers_of(lagging) {
            self.cut.push((lagging, peer));
            self.cut.push((peer, lagging));
        }
        self.fence = Some(FenceStep::Lagging { lagging });
        self.events.schedule(POLL_US, Event::FenceStep);
    }

    /// The schedule's next step, once its moment came.
    pub(super) fn fence_step(&mut self) {
        if !self.faults_active {
            return;
        }
        let Some(FenceStep::Lagging { lagging }) = self.fence else {
            // The split ends.
            self.cut.clear();
            self.fence = Some(FenceStep::Done);
            return;
        };
        let ring = self.ring.as_ref().expect("a ring");
        let register = ring.register.clone();
        let caught_up = matches!(register, RingStage::Stable(_))
            && (1..=self.config.nodes)
                .map(NodeId)
                .filter(|&n| n != lagging)
                .all(|n| ring.installed.get(&n) == Some(&register));
        if !caught_up {
            return self.events.schedule(POLL_US, Event::FenceStep);
        }
        let with = self.fence_partner(lagging);
        self.cut.clear();
        let pair = [lagging, with];
        for a in pair {
            for b in (1..=self.config.nodes).map(NodeId) {
                if !pair.contains(&b) {
                    self.cut.push((a, b));
                    self.cut.push((b, a));
                }
            }
        }
        self.report.fence_splits += 1;
        self.fence = Some(FenceStep::Split);
        self.events.schedule(SPLIT_US, Event::FenceStep);
    }

    /// The node sharing with `lagging` the old replica sets (those of the stage `lagging` has
    /// installed) of the most of the workload's registers, the lowest of equals.
    fn fence_partner(&self, lagging: NodeId) -> NodeId {
        let ring = self.ring.as_ref().expect("a ring");
        let old = ring.installed[&lagging].serving().clone();
        let registers = self.config.keys + self.config.expiring_keys + self.config.collection_keys;
        let mut shared = vec![0u32; usize::from(self.config.nodes) + 1];
        for i in 0..registers {
            let key = self.current_key(i);
            let replicas = old.replicas(key_slot(key.as_bytes()));
            if !replicas.contains(logless_placement::NodeId(lagging.0)) {
                continue;
            }
            for n in replicas.nodes() {
                if n.0 != lagging.0 {
                    shared[usize::from(n.0)] += 1;
                }
            }
        }
        let best = (1..=self.config.nodes)
            .filter(|&n| n != lagging.0)
            .max_by_key(|&n| (shared[usize::from(n)], std::cmp::Reverse(n)))
            .expect("another node");
        NodeId(best)
    }
}
