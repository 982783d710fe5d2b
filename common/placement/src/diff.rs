//! What a configuration change moves: the segments that change owner, and for every run of
//! slots whose replica set changes, the replicas before and after.
//!
//! The slot changes are the work of a membership change: for each one, the registers of those
//! slots move from the acceptor set `before` to the acceptor set `after` (docs/ring.md says how
//! without losing or resurrecting a value). Slots whose replicas stay the same are untouched.
use crate::config::{Configuration, Epoch, NodeId, ReplicaSet};
use crate::ring::Segment;
use crate::slot::{runs, SlotRange};

/// A segment handed from one node to another.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SegmentChange {
    /// The segment.
    pub segment: Segment,
    /// Its owner before the change.
    pub from: NodeId,
    /// Its owner after the change.
    pub to: NodeId,
}

/// A run of consecutive slots whose replicas change, all in the same way.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SlotChange {
    /// The slots.
    pub slots: SlotRange,
    /// Their replicas before the change.
    pub before: ReplicaSet,
    /// Their replicas after the change.
    pub after: ReplicaSet,
}

impl SlotChange {
    /// The nodes that become replicas of these slots (they must receive the registers).
    pub fn gained(&self) -> impl Iterator<Item = NodeId> + '_ {
        self.after.without(&self.before)
    }

    /// The nodes that stop being replicas of these slots (they may drop the registers once
    /// the change is complete).
    pub fn lost(&self) -> impl Iterator<Item = NodeId> + '_ {
        self.before.without(&self.after)
    }

    /// Whether the same nodes hold the slots and only their order changed (then nothing
    /// moves: the acceptor set is the same, only the replica clients are sent to differs).
    pub fn reordered_only(&self) -> bool {
        self.gained().next().is_none()
    }
}

/// The difference between two configurations.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigDiff {
    /// The epoch changed from.
    pub from: Epoch,
    /// The epoch changed to.
    pub to: Epoch,
    /// The segments that change owner, in ring order.
    pub segments: Vec<SegmentChange>,
    /// The runs of slots whose replicas change, in slot order.
    pub slots: Vec<SlotChange>,
}

impl ConfigDiff {
    /// What changing from `old` to `new` moves.
    pub fn between(old: &Configuration, new: &Configuration) -> ConfigDiff {
        let segments = Segment::all()
            .filter(|&s| old.owner(s) != new.owner(s))
            .map(|segment| SegmentChange {
                segment,
                from: old.owner(segment),
                to: new.owner(segment),
            })
            .collect();
        let slots = runs(|slot| (old.replicas(slot), new.replicas(slot)))
            .into_iter()
            .filter(|(_, (before, after))| before != after)
            .map(|(slots, (before, after))| SlotChange {
                slots,
                before,
                after,
            })
            .collect();
        ConfigDiff {
            from: old.epoch(),
            to: new.epoch(),
            segments,
            slots,
        }
    }

    /// How many slots change replicas.
    pub fn slots_changed(&self) -> usize {
        self.slots.iter().map(|change| change.slots.len()).sum()
    }

    /// How many (slot, node) replica placements a node must receive: the copying work of the
    /// change, in slots.
    pub fn slot_copies(&self) -> usize {
        self.slots
            .iter()
            .map(|change| change.slots.len() * change.gained().count())
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Replication;

    fn ring(n: u16) -> Configuration {
        let nodes: Vec<NodeId> = (1..=n).map(NodeId).collect();
        Configuration::balanced(&nodes, Replication::THREE).unwrap()
    }

    #[test]
    fn an_unchanged_ring_moves_nothing() {
        let old = ring(5);
        let diff = ConfigDiff::between(&old, &old);
        assert!(diff.segments.is_empty());
        assert!(diff.slots.is_empty());
        assert_eq!(diff.slot_copies(), 0);
    }

    #[test]
    fn a_replacement_moves_exactly_the_replaced_nodes_slots() {
        let old = ring(5);
        let new = old.with_node_replaced(NodeId(2), NodeId(7)).unwrap();
        let diff = ConfigDiff::between(&old, &new);
        assert_eq!((diff.from, diff.to), (Epoch(1), Epoch(2)));
        assert_eq!(diff.segments.len(), usize::from(old.segments_of(NodeId(2))));
        assert!(diff
            .segments
            .iter()
            .all(|c| c.from == NodeId(2) && c.to == NodeId(7)));
        for change in &diff.slots {
            assert_eq!(change.gained().collect::<Vec<_>>(), vec![NodeId(7)]);
            assert_eq!(change.lost().collect::<Vec<_>>(), vec![NodeId(2)]);
        }
        // Every slot node 2 held moves to node 7, and no other slot moves.
        let held = crate::slot::Slot::all()
            .filter(|&s| old.replicas(s).contains(NodeId(2)))
            .count();
        assert_eq!(diff.slots_changed(), held);
        assert_eq!(diff.slot_copies(), held);
    }
}
