//! The acceptors of a slot while the ring changes, and when their replies make a quorum.
//!
//! A change from the configuration of epoch `e` to that of `e + 1` passes through a joint
//! stage (docs/ring.md §4): while it lasts, each register of a slot whose replicas change needs
//! a majority of its old replicas **and** a majority of its new ones, for phase 1 and phase 2
//! alike. A slot whose replicas stay the same needs a majority of them, as before. This module
//! is that rule, for the node's proposers to count replies with; the rest of the protocol (the
//! stage register, the fence, the sync) lives in the node.
use crate::config::{Configuration, Epoch, NodeId, ReplicaSet};
use crate::slot::Slot;

/// Where a ring is in its changes: settled in one configuration, or moving to the next.
///
/// Stages are ordered by [`Stage::is_after`], not by a derived order (which would put every
/// `Stable` before every `Joint`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Stage {
    /// Serving with the configuration of this epoch alone.
    Stable(Epoch),
    /// Moving to the configuration of this epoch from the one before it: moving slots need
    /// joint quorums. Ordered between `Stable(e - 1)` and `Stable(e)`.
    Joint(Epoch),
}

impl Stage {
    /// The epoch whose configuration proposers move towards (or serve with, when stable).
    pub fn epoch(self) -> Epoch {
        match self {
            Stage::Stable(epoch) | Stage::Joint(epoch) => epoch,
        }
    }

    /// The `(epoch, rank)` that orders stages: `Stable(e-1) < Joint(e) < Stable(e)`.
    fn rank(self) -> (Epoch, u8) {
        match self {
            Stage::Joint(epoch) => (epoch, 0),
            Stage::Stable(epoch) => (epoch, 1),
        }
    }

    /// Whether `self` comes after `other` in a ring's history.
    pub fn is_after(self, other: Stage) -> bool {
        self.rank() > other.rank()
    }
}

/// The acceptors of one slot at one stage: its replicas, or while a change moves it, its old
/// and its new replicas.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SlotAcceptors {
    /// One acceptor set; a quorum is a majority of it.
    Single(ReplicaSet),
    /// The old and the new acceptor set; a quorum is a majority of each.
    Joint {
        /// The replicas before the change.
        old: ReplicaSet,
        /// The replicas after the change.
        new: ReplicaSet,
    },
}

impl SlotAcceptors {
    /// The acceptors of `slot` in `config`, when it is stable.
    pub fn stable(config: &Configuration, slot: Slot) -> SlotAcceptors {
        SlotAcceptors::Single(config.replicas(slot))
    }

    /// The acceptors of `slot` while the ring moves from `old` to `new`: joint if the slot's
    /// replicas change (as a set; a new order moves nothing), else the one set of `new`.
    pub fn moving(old: &Configuration, new: &Configuration, slot: Slot) -> SlotAcceptors {
        let (before, after) = (old.replicas(slot), new.replicas(slot));
        if after.without(&before).next().is_none() {
            SlotAcceptors::Single(after)
        } else {
            SlotAcceptors::Joint {
                old: before,
                new: after,
            }
        }
    }

    /// Every acceptor a proposer sends to: the old and the new replicas, each once.
    pub fn members(&self) -> Vec<NodeId> {
        match self {
            SlotAcceptors::Single(set) => set.nodes().to_vec(),
            SlotAcceptors::Joint { old, new } => {
                let mut members = old.nodes().to_vec();
                members.extend(new.without(old));
                members
            }
        }
    }

    /// Whether replies from the acceptors `replied` says yes to make a quorum (each acceptor
    /// counted once, however often it answered).
    pub fn is_quorum(&self, replied: impl Fn(NodeId) -> bool) -> bool {
        match self {
            SlotAcceptors::Single(set) => majority(set, &replied),
            SlotAcceptors::Joint { old, new } => majority(old, &replied) && majority(new, &replied),
        }
    }
}

fn majority(set: &ReplicaSet, replied: &impl Fn(NodeId) -> bool) -> bool {
    let yes = set.nodes().iter().filter(|&&n| replied(n)).count();
    yes * 2 > set.nodes().len()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Replication;

    #[test]
    fn stages_order_joint_between_the_stable_ones() {
        let (e1, e2) = (Epoch(1), Epoch(2));
        assert!(Stage::Joint(e2).is_after(Stage::Stable(e1)));
        assert!(Stage::Stable(e2).is_after(Stage::Joint(e2)));
        assert!(!Stage::Joint(e2).is_after(Stage::Stable(e2)));
        assert_eq!(Stage::Joint(e2).epoch(), e2);
    }

    #[test]
    fn a_joint_quorum_needs_a_majority_of_both_sets() {
        let nodes: Vec<NodeId> = (1..=5).map(NodeId).collect();
        let old = Configuration::balanced(&nodes, Replication::THREE).unwrap();
        let new = old.with_node_replaced(NodeId(1), NodeId(9)).unwrap();
        let slot = Slot::all()
            .find(|&s| old.replicas(s).contains(NodeId(1)))
            .unwrap();
        let acceptors = SlotAcceptors::moving(&old, &new, slot);
        let SlotAcceptors::Joint {
            old: before,
            new: after,
        } = acceptors
        else {
            panic!("the slot moves: {acceptors:?}");
        };
        assert_eq!(acceptors.members().len(), 4);
        let survivors: Vec<NodeId> = before.without(&after).collect();
        assert_eq!(survivors, vec![NodeId(1)]);
        let shared: Vec<NodeId> = before
            .nodes()
            .iter()
            .copied()
            .filter(|&n| n != NodeId(1))
            .collect();
        // The two shared replicas are a majority of both sets.
        assert!(acceptors.is_quorum(|n| shared.contains(&n)));
        // The old node and one shared replica: a majority of the old set only.
        assert!(!acceptors.is_quorum(|n| n == NodeId(1) || n == shared[0]));
        // The new node and one shared replica: a majority of the new set only.
        assert!(!acceptors.is_quorum(|n| n == NodeId(9) || n == shared[0]));
    }

    #[test]
    fn an_unmoved_slot_keeps_one_acceptor_set() {
        let nodes: Vec<NodeId> = (1..=5).map(NodeId).collect();
        let old = Configuration::balanced(&nodes, Replication::THREE).unwrap();
        let new = old.with_node_replaced(NodeId(1), NodeId(9)).unwrap();
        let slot = Slot::all()
            .find(|&s| !old.replicas(s).contains(NodeId(1)))
            .unwrap();
        assert_eq!(
            SlotAcceptors::moving(&old, &new, slot),
            SlotAcceptors::stable(&new, slot)
        );
    }
}
