//! A ring configuration: its epoch, its replication degree and the owner of every segment,
//! and the replica set it gives every slot.
//!
//! # Replica sets
//!
//! A slot's replicas are found by symmetric replication
//! ([`symmetric_positions`]): the k-th replica is the owner of
//! the segment holding the k-th position. Segments belong to nodes in no regular pattern, so two
//! slots with the same first replica usually have different other replicas, and when a node
//! fails its slots' other replicas are many nodes, not a fixed group.
//!
//! Two of a slot's positions may fall in segments of the same node. Then the later position's
//! replica is the owner of the next segment clockwise that belongs to a node not yet chosen
//! (a preference walk, as in Dynamo), so every replica set holds `R` distinct nodes whenever
//! the configuration holds at least `R` nodes, which every configuration does. The walk has a
//! price when the ring changes: a slot with two positions in segments a joining node takes
//! walks on to some other node, so a little of the copying (about 6% for R = 3, up to a
//! quarter for R = 7 on few nodes; `tests/properties.rs` measures it) goes to nodes other than
//! the joining one. Every slot whose replicas change still gains the joining node (or loses the
//! leaving one), and no other slot changes.
//!
//! # Changes
//!
//! A configuration is changed only as a whole, into a configuration of the next epoch, and only
//! by handing segments over: a joining node takes whole segments from the nodes that own the
//! most, a leaving node gives each of its segments to the node that owns the fewest, and a
//! replacement takes over exactly the segments of the node it replaces. What a change moves is
//! in [`crate::diff`].
use std::collections::BTreeMap;
use std::fmt;

use crate::ring::{symmetric_positions, Segment, SEGMENTS};
use crate::slot::{runs, Slot, SlotRange};

/// A node's identity in the ring (the same number as the node id of the engines).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct NodeId(pub u16);

impl fmt::Display for NodeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// The version of a configuration: every change makes the next epoch, and messages and
/// redirections carry it, so that what an older configuration says can be told apart and
/// refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Epoch(pub u64);

impl Epoch {
    /// The epoch after this one.
    pub fn next(self) -> Epoch {
        Epoch(
            self.0
                .checked_add(1)
                .expect("configuration epochs do not run out"),
        )
    }
}

/// How many replicas each slot has: 3, 5 or 7 (an odd number, so that majorities of the
/// acceptors tolerate `(R - 1) / 2` failures).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Replication(u8);

impl Replication {
    /// Three replicas, the default: one failure tolerated.
    pub const THREE: Replication = Replication(3);

    /// The replication degree `r`, if it is 3, 5 or 7.
    pub fn new(r: u8) -> Result<Replication, PlacementError> {
        match r {
            3 | 5 | 7 => Ok(Replication(r)),
            _ => Err(PlacementError::Replication(r)),
        }
    }

    /// The number of replicas, R.
    pub fn get(self) -> u8 {
        self.0
    }

    /// The number of replicas a quorum needs: a majority, `R / 2 + 1`.
    pub fn quorum(self) -> u8 {
        self.0 / 2 + 1
    }
}

impl Default for Replication {
    fn default() -> Replication {
        Replication::THREE
    }
}

/// The most replicas a slot has ([`Replication`] allows 7 at most).
pub const REPLICAS_MAX: usize = 7;

/// The nodes holding one slot, in the order of their positions on the ring (the first is the
/// owner of the slot's own position). Distinct nodes; as many as the replication degree.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct ReplicaSet {
    nodes: [NodeId; REPLICAS_MAX],
    len: u8,
}

impl ReplicaSet {
    fn empty() -> ReplicaSet {
        ReplicaSet {
            nodes: [NodeId::default(); REPLICAS_MAX],
            len: 0,
        }
    }

    fn push(&mut self, node: NodeId) {
        self.nodes[usize::from(self.len)] = node;
        self.len += 1;
    }

    /// The replicas, first one first.
    pub fn nodes(&self) -> &[NodeId] {
        &self.nodes[..usize::from(self.len)]
    }

    /// The replica of the slot's own position: the one cluster-aware clients are sent to.
    pub fn first(&self) -> NodeId {
        self.nodes[0]
    }

    /// Whether `node` is one of the replicas.
    pub fn contains(&self, node: NodeId) -> bool {
        self.nodes().contains(&node)
    }

    /// The replicas that are not in `other`, in order.
    pub fn without<'a>(&'a self, other: &'a ReplicaSet) -> impl Iterator<Item = NodeId> + 'a {
        self.nodes().iter().copied().filter(|&n| !other.contains(n))
    }
}

impl fmt::Debug for ReplicaSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.nodes()).finish()
    }
}

/// Why a configuration cannot be made.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PlacementError {
    /// A replication degree other than 3, 5 or 7.
    #[error("replication degree must be 3, 5 or 7, not {0}")]
    Replication(u8),
    /// Fewer nodes than replicas.
    #[error(
        "a ring with replication {replication} needs at least {replication} nodes, not {nodes}"
    )]
    TooFewNodes {
        /// The replication degree.
        replication: u8,
        /// The nodes there would be.
        nodes: usize,
    },
    /// More nodes than segments.
    #[error("a ring holds at most {SEGMENTS} nodes, not {0}")]
    TooManyNodes(usize),
    /// A node named twice, or added while present.
    #[error("node {0} is already in the configuration")]
    DuplicateNode(NodeId),
    /// A node removed or replaced that is not there.
    #[error("node {0} is not in the configuration")]
    UnknownNode(NodeId),
    /// A segment table of the wrong length.
    #[error("a configuration names the owner of {SEGMENTS} segments, not {0}")]
    SegmentCount(usize),
}

/// One configuration of the ring.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Configuration {
    epoch: Epoch,
    replication: Replication,
    /// The owner of each segment, by segment number.
    owners: Vec<NodeId>,
    /// How many segments each node owns; every node of the configuration owns at least one.
    counts: BTreeMap<NodeId, u16>,
}

impl Configuration {
    /// The first configuration (epoch 1) of a ring of `nodes`: each owns the same number of
    /// segments (within one), spread over the ring in a fixed pseudo-random order.
    pub fn balanced(nodes: &[NodeId], replication: Replication) -> Result<Self, PlacementError> {
        let mut distinct: Vec<NodeId> = nodes.to_vec();
        distinct.sort_unstable();
        if let Some(pair) = distinct.windows(2).find(|pair| pair[0] == pair[1]) {
            return Err(PlacementError::DuplicateNode(pair[0]));
        }
        check_node_count(distinct.len(), replication)?;
        let mut owners: Vec<NodeId> = (0..usize::from(SEGMENTS))
            .map(|i| distinct[i % distinct.len()])
            .collect();
        shuffle(&mut owners);
        Configuration::from_owners(Epoch(1), replication, owners)
    }

    /// The configuration of `epoch` whose segment `i` is owned by `owners[i]`.
    pub fn from_owners(
        epoch: Epoch,
        replication: Replication,
        owners: Vec<NodeId>,
    ) -> Result<Self, PlacementError> {
        if owners.len() != usize::from(SEGMENTS) {
            return Err(PlacementError::SegmentCount(owners.len()));
        }
        let mut counts = BTreeMap::new();
        for &owner in &owners {
            *counts.entry(owner).or_insert(0u16) += 1;
        }
        check_node_count(counts.len(), replication)?;
        Ok(Configuration {
            epoch,
            replication,
            owners,
            counts,
        })
    }

    /// This configuration's epoch.
    pub fn epoch(&self) -> Epoch {
        self.epoch
    }

    /// The replication degree.
    pub fn replication(&self) -> Replication {
        self.replication
    }

    /// The nodes of the ring, in id order.
    pub fn nodes(&self) -> impl ExactSizeIterator<Item = NodeId> + '_ {
        self.counts.keys().copied()
    }

    /// Whether `node` is in the ring.
    pub fn contains(&self, node: NodeId) -> bool {
        self.counts.contains_key(&node)
    }

    /// The owner of `segment`.
    pub fn owner(&self, segment: Segment) -> NodeId {
        self.owners[segment.index()]
    }

    /// The owner of each segment, by segment number.
    pub fn owners(&self) -> &[NodeId] {
        &self.owners
    }

    /// How many segments `node` owns (0 if it is not in the ring).
    pub fn segments_of(&self, node: NodeId) -> u16 {
        self.counts.get(&node).copied().unwrap_or(0)
    }

    /// The replicas of `slot`: the owners of its symmetric positions, with the preference walk
    /// past nodes already chosen (see the module docs).
    pub fn replicas(&self, slot: Slot) -> ReplicaSet {
        let mut set = ReplicaSet::empty();
        for position in symmetric_positions(slot, self.replication.get()) {
            let mut segment = position.segment();
            // Terminates: the ring holds at least R distinct nodes, and fewer than R are chosen.
            while set.contains(self.owner(segment)) {
                segment = segment.next();
            }
            set.push(self.owner(segment));
        }
        set
    }

    /// The slots in maximal runs of consecutive slots with the same replicas, in slot order
    /// (what `CLUSTER SLOTS` lists).
    pub fn slot_ranges(&self) -> Vec<(SlotRange, ReplicaSet)> {
        runs(|slot| self.replicas(slot))
    }

    /// The configuration of the next epoch with `node` added: it takes `SEGMENTS / (N + 1)`
    /// segments, each from the node that then owns the most (the lowest id among equals), so
    /// the ring stays balanced and no segment moves between two nodes that were already there.
    pub fn with_node_added(&self, node: NodeId) -> Result<Configuration, PlacementError> {
        if self.contains(node) {
            return Err(PlacementError::DuplicateNode(node));
        }
        let nodes = self.counts.len() + 1;
        check_node_count(nodes, self.replication)?;
        let mut next = self.clone();
        for _ in 0..usize::from(SEGMENTS) / nodes {
            let donor = next.most_loaded();
            // Which of the donor's segments: the first in an order that depends on the new
            // node, so that a node's segments are spread over the ring.
            let segment = Segment::all()
                .filter(|&s| next.owner(s) == donor)
                .min_by_key(|s| mix(u64::from(node.0) << 16 | u64::from(s.get())))
                .expect("the most loaded node owns a segment");
            next.hand_over(segment, node);
        }
        next.epoch = self.epoch.next();
        Ok(next)
    }

    /// The configuration of the next epoch without `node`: each of its segments goes, in ring
    /// order, to the node that then owns the fewest (the lowest id among equals).
    pub fn with_node_removed(&self, node: NodeId) -> Result<Configuration, PlacementError> {
        if !self.contains(node) {
            return Err(PlacementError::UnknownNode(node));
        }
        check_node_count(self.counts.len() - 1, self.replication)?;
        let mut next = self.clone();
        for segment in Segment::all().filter(|&s| self.owner(s) == node) {
            let heir = next.least_loaded_except(node);
            next.hand_over(segment, heir);
        }
        next.epoch = self.epoch.next();
        Ok(next)
    }

    /// The configuration of the next epoch in which `new` owns exactly the segments `old`
    /// owned (replacing a dead machine: only `old`'s registers move).
    pub fn with_node_replaced(
        &self,
        old: NodeId,
        new: NodeId,
    ) -> Result<Configuration, PlacementError> {
        if !self.contains(old) {
            return Err(PlacementError::UnknownNode(old));
        }
        if self.contains(new) {
            return Err(PlacementError::DuplicateNode(new));
        }
        let mut next = self.clone();
        for segment in Segment::all().filter(|&s| self.owner(s) == old) {
            next.hand_over(segment, new);
        }
        next.epoch = self.epoch.next();
        Ok(next)
    }

    fn hand_over(&mut self, segment: Segment, to: NodeId) {
        let from = std::mem::replace(&mut self.owners[segment.index()], to);
        let count = self.counts.get_mut(&from).expect("every owner is counted");
        *count -= 1;
        if *count == 0 {
            self.counts.remove(&from);
        }
        *self.counts.entry(to).or_insert(0) += 1;
    }

    fn most_loaded(&self) -> NodeId {
        let (&node, _) = self
            .counts
            .iter()
            .max_by_key(|&(&node, &count)| (count, std::cmp::Reverse(node)))
            .expect("a configuration has nodes");
        node
    }

    fn least_loaded_except(&self, except: NodeId) -> NodeId {
        let (&node, _) = self
            .counts
            .iter()
            .filter(|&(&node, _)| node != except)
            .min_by_key(|&(&node, &count)| (count, node))
            .expect("a configuration keeps at least R nodes");
        node
    }
}

fn check_node_count(nodes: usize, replication: Replication) -> Result<(), PlacementError> {
    if nodes < usize::from(replication.get()) {
        return Err(PlacementError::TooFewNodes {
            replication: replication.get(),
            nodes,
        });
    }
    if nodes > usize::from(SEGMENTS) {
        return Err(PlacementError::TooManyNodes(nodes));
    }
    Ok(())
}

/// SplitMix64's finaliser: a fixed bijection that scatters its input. Placement must be the
/// same on every node and in every run, so it uses no random number generator.
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A fixed Fisher–Yates shuffle driven by [`mix`].
fn shuffle(owners: &mut [NodeId]) {
    for i in (1..owners.len()).rev() {
        let j = (mix(i as u64) % (i as u64 + 1)) as usize;
        owners.swap(i, j);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(range: std::ops::RangeInclusive<u16>) -> Vec<NodeId> {
        range.map(NodeId).collect()
    }

    #[test]
    fn replication_is_three_five_or_seven() {
        for r in [3, 5, 7] {
            assert_eq!(Replication::new(r).unwrap().get(), r);
        }
        for r in [0, 1, 2, 4, 6, 8, 9] {
            assert_eq!(Replication::new(r), Err(PlacementError::Replication(r)));
        }
        assert_eq!(Replication::new(5).unwrap().quorum(), 3);
    }

    #[test]
    fn bad_configurations_are_refused_with_the_reason() {
        let three = Replication::THREE;
        assert_eq!(
            Configuration::balanced(&ids(1..=2), three),
            Err(PlacementError::TooFewNodes {
                replication: 3,
                nodes: 2
            })
        );
        assert_eq!(
            Configuration::balanced(&[NodeId(1), NodeId(2), NodeId(1)], three),
            Err(PlacementError::DuplicateNode(NodeId(1)))
        );
        assert_eq!(
            Configuration::from_owners(Epoch(1), three, vec![NodeId(1); 3]),
            Err(PlacementError::SegmentCount(3))
        );
        let ring = Configuration::balanced(&ids(1..=3), three).unwrap();
        assert_eq!(
            ring.with_node_removed(NodeId(1)),
            Err(PlacementError::TooFewNodes {
                replication: 3,
                nodes: 2
            })
        );
        assert_eq!(
            ring.with_node_added(NodeId(2)),
            Err(PlacementError::DuplicateNode(NodeId(2)))
        );
        assert_eq!(
            ring.with_node_replaced(NodeId(9), NodeId(4)),
            Err(PlacementError::UnknownNode(NodeId(9)))
        );
    }

    #[test]
    fn balanced_rings_give_each_node_its_share_of_segments() {
        let ring = Configuration::balanced(&ids(1..=5), Replication::THREE).unwrap();
        assert_eq!(ring.epoch(), Epoch(1));
        for node in ring.nodes() {
            let share = ring.segments_of(node);
            assert!((204..=205).contains(&share), "{node} owns {share}");
        }
    }

    #[test]
    fn a_three_node_ring_replicates_every_slot_on_every_node() {
        let ring = Configuration::balanced(&ids(1..=3), Replication::THREE).unwrap();
        for slot in Slot::all() {
            let mut nodes = ring.replicas(slot).nodes().to_vec();
            nodes.sort_unstable();
            assert_eq!(nodes, ids(1..=3));
        }
    }

    #[test]
    fn changes_advance_the_epoch_and_keep_the_ring_balanced() {
        let ring = Configuration::balanced(&ids(1..=5), Replication::THREE).unwrap();
        let grown = ring.with_node_added(NodeId(6)).unwrap();
        assert_eq!(grown.epoch(), Epoch(2));
        assert_eq!(grown.segments_of(NodeId(6)), SEGMENTS / 6);
        for node in grown.nodes() {
            let share = grown.segments_of(node);
            assert!((170..=171).contains(&share), "{node} owns {share}");
        }
        let shrunk = grown.with_node_removed(NodeId(2)).unwrap();
        assert_eq!(shrunk.epoch(), Epoch(3));
        assert!(!shrunk.contains(NodeId(2)));
        for node in shrunk.nodes() {
            let share = shrunk.segments_of(node);
            assert!((204..=205).contains(&share), "{node} owns {share}");
        }
        let replaced = shrunk.with_node_replaced(NodeId(3), NodeId(9)).unwrap();
        assert_eq!(
            replaced.segments_of(NodeId(9)),
            shrunk.segments_of(NodeId(3))
        );
        assert!(!replaced.contains(NodeId(3)));
    }
}
