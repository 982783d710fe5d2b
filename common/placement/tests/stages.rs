//! The quorums of a changing ring (docs/ring.md §4), checked exhaustively on the moving slots
//! of random changes: every joint quorum meets every quorum of the stage before and of the
//! stage after, so proposers of adjacent stages may run together; and the old and the new
//! replicas alone have disjoint majorities, so skipping the joint stage would let both decide.
use std::collections::BTreeSet;

use logless_placement::{
    ConfigDiff, Configuration, NodeId, ReplicaSet, Replication, SlotAcceptors,
};
use proptest::prelude::*;

/// A ring of `n` nodes with replication `r`, and the ring after one change: a node added,
/// removed or replaced (`change` picks which).
fn changed(r: u8, n: u16, change: u8) -> (Configuration, Configuration) {
    let nodes: Vec<NodeId> = (1..=n).map(NodeId).collect();
    let old = Configuration::balanced(&nodes, Replication::new(r).unwrap()).unwrap();
    let new = match change % 3 {
        0 => old.with_node_added(NodeId(100)),
        1 if n > u16::from(r) => old.with_node_removed(NodeId(1)),
        _ => old.with_node_replaced(NodeId(1), NodeId(100)),
    }
    .unwrap();
    (old, new)
}

/// The acceptor sets (old, new) of the moving slots, each pair once.
fn moving_sets(old: &Configuration, new: &Configuration) -> Vec<(ReplicaSet, ReplicaSet)> {
    let mut seen = BTreeSet::new();
    ConfigDiff::between(old, new)
        .slots
        .into_iter()
        .filter(|change| !change.reordered_only())
        .filter(|change| {
            seen.insert((
                change.before.nodes().to_vec(),
                change.after.nodes().to_vec(),
            ))
        })
        .map(|change| (change.before, change.after))
        .collect()
}

/// Every subset of `members`, as the set of nodes that replied.
fn subsets(members: &[NodeId]) -> Vec<Vec<NodeId>> {
    (0u32..1 << members.len())
        .map(|mask| {
            (0..members.len())
                .filter(|&i| mask & (1 << i) != 0)
                .map(|i| members[i])
                .collect()
        })
        .collect()
}

fn quorums(acceptors: &SlotAcceptors, candidates: &[Vec<NodeId>]) -> Vec<Vec<NodeId>> {
    candidates
        .iter()
        .filter(|replied| acceptors.is_quorum(|n| replied.contains(&n)))
        .cloned()
        .collect()
}

fn all_meet(a: &[Vec<NodeId>], b: &[Vec<NodeId>]) -> bool {
    a.iter()
        .all(|qa| b.iter().all(|qb| qa.iter().any(|n| qb.contains(n))))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    #[test]
    fn joint_quorums_meet_both_neighbouring_stages(r in prop_oneof![Just(3u8), Just(5)], extra in 0u16..4, change in 0u8..3) {
        let (old, new) = changed(r, u16::from(r) + extra, change);
        let sets = moving_sets(&old, &new);
        prop_assert!(!sets.is_empty());
        for &(before, after) in sets.iter().take(12) {
            let joint = SlotAcceptors::Joint { old: before, new: after };
            let candidates = subsets(&joint.members());
            let old_q = quorums(&SlotAcceptors::Single(before), &candidates);
            let new_q = quorums(&SlotAcceptors::Single(after), &candidates);
            let joint_q = quorums(&joint, &candidates);
            prop_assert!(all_meet(&joint_q, &old_q), "{:?} / {:?}", before, after);
            prop_assert!(all_meet(&joint_q, &new_q), "{:?} / {:?}", before, after);
            prop_assert!(all_meet(&joint_q, &joint_q));
            // Without the joint stage, a majority of the old and one of the new replicas can
            // be disjoint: both sets could decide different values.
            prop_assert!(!all_meet(&old_q, &new_q), "{:?} / {:?}", before, after);
        }
    }
}
