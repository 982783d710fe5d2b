//! Identities and numbers: replicas, views, instances, clients and request sequence numbers.
//!
//! A view plays the part of Paxos's ballot number. Views are plain integers and every view has
//! exactly one leader, `nodes[view mod n]`, so two replicas can never propose in the same view:
//! "one proposal per ballot and instance" follows from the leader proposing each instance of
//! its view once.
use std::fmt;

/// A replica's identity in the cluster.
///
/// Crate-local rather than the in-place engine's `NodeId`: the log engine does not depend on
/// that crate's command semantics, and the two engines' ids meet only in the node.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct NodeId(pub u16);

/// A view (ballot): the period of one leader's reign.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct View(pub u64);

impl View {
    /// The leader of this view among `nodes` (the cluster, in the order all replicas share).
    ///
    /// # Panics
    /// If `nodes` is empty (a configuration error).
    pub fn leader(self, nodes: &[NodeId]) -> NodeId {
        assert!(!nodes.is_empty(), "a cluster has at least one replica");
        let n = nodes.len() as u64;
        nodes[usize::try_from(self.0 % n).expect("an index below the cluster size")]
    }

    /// The lowest view above `self` that `me` leads, or `None` if `me` is not in `nodes`.
    pub fn next_led_by(self, me: NodeId, nodes: &[NodeId]) -> Option<View> {
        let index = nodes.iter().position(|&n| n == me)? as u64;
        let n = nodes.len() as u64;
        let above = self.0.checked_add(1)?;
        let offset = (index + n - above % n) % n;
        above.checked_add(offset).map(View)
    }
}

impl fmt::Debug for View {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "v{}", self.0)
    }
}

/// A Paxos instance: one position of the log, which decides one batch.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Instance(pub u64);

impl Instance {
    /// The instance after this one.
    pub fn next(self) -> Instance {
        Instance(
            self.0
                .checked_add(1)
                .expect("instance numbers do not overflow"),
        )
    }

    /// This instance `count` places further.
    pub fn plus(self, count: u64) -> Instance {
        Instance(self.0.saturating_add(count))
    }
}

impl fmt::Debug for Instance {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "i{}", self.0)
    }
}

/// A replica's *epoch* under EpochSS (seed 002 §V-C): a counter kept on stable storage and
/// raised at every start, which every message carries so that messages a replica sent before it
/// crashed (stray ones) can be told from those it sends after. Replicas under FullSS stay in
/// epoch 0.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Epoch(pub u64);

impl Epoch {
    /// The epoch of the start after one in this epoch.
    pub fn next(self) -> Epoch {
        Epoch(self.0.checked_add(1).expect("epochs do not overflow"))
    }
}

/// A client of the replicated service.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct ClientId(pub u64);

/// A client's request sequence number. A client has one request outstanding at a time and
/// numbers its requests upwards; a retry keeps the number.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct RequestSeq(pub u64);

#[cfg(test)]
mod tests {
    use super::*;

    const NODES: [NodeId; 3] = [NodeId(1), NodeId(2), NodeId(3)];

    #[test]
    fn a_view_is_led_by_its_index_modulo_the_cluster_size() {
        let leaders: Vec<u16> = (0..6).map(|v| View(v).leader(&NODES).0).collect();
        assert_eq!(leaders, [1, 2, 3, 1, 2, 3]);
    }

    #[test]
    fn the_next_view_a_replica_leads_is_the_lowest_above() {
        assert_eq!(View(0).next_led_by(NodeId(2), &NODES), Some(View(1)));
        assert_eq!(View(0).next_led_by(NodeId(3), &NODES), Some(View(2)));
        assert_eq!(View(0).next_led_by(NodeId(1), &NODES), Some(View(3)));
        assert_eq!(View(4).next_led_by(NodeId(2), &NODES), Some(View(7)));
        assert_eq!(View(4).next_led_by(NodeId(9), &NODES), None);
        assert_eq!(View(u64::MAX).next_led_by(NodeId(1), &NODES), None);
    }
}
