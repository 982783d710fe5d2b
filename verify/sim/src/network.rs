//! The simulated network between whole nodes that both engines' whole-node runs use
//! ([`crate::log_nodes`], [`crate::psmr_nodes`]): one TCP-like [`Link`] per directed pair of
//! nodes, the partition of the moment, and what [`NodeFaults`] does to a batch on its way
//! (loss, duplication, delay).
use std::collections::BTreeMap;

use logless_multipaxos::ids::NodeId;
use rand::rngs::SmallRng;
use rand::Rng;

use crate::link::{Arrival, Connection, Link};
use crate::nodes::NodeFaults;

/// The links between the nodes and the partition of the moment.
#[derive(Default)]
pub struct Network {
    links: BTreeMap<(NodeId, NodeId), Link>,
    /// The directed pairs that cannot talk now.
    cut: Vec<(NodeId, NodeId)>,
}

/// What becomes of one batch sent.
#[derive(Debug)]
pub struct Sent {
    /// Its number on its connection.
    pub seq: u64,
    /// When each copy arrives (µs from now): none if it was lost, two if duplicated.
    pub delays_us: Vec<u64>,
}

impl Network {
    /// Numbers a batch `from -> to` on `connection` and draws its fate: while `faulty`, it is
    /// lost if the pair is partitioned or `cut_off` (the sender or the receiver cut off), or by
    /// chance, and duplicated by chance; each copy takes a delay within the faults' bounds.
    #[allow(clippy::too_many_arguments)]
    pub fn send(
        &mut self,
        rng: &mut SmallRng,
        faults: &NodeFaults,
        faulty: bool,
        cut_off: bool,
        from: NodeId,
        to: NodeId,
        connection: Connection,
    ) -> Sent {
        let seq = self.links.entry((from, to)).or_default().send(connection);
        let cut = self.cut.contains(&(from, to)) || cut_off;
        if faulty && (cut || rng.random_bool(faults.loss)) {
            return Sent {
                seq,
                delays_us: Vec::new(),
            };
        }
        let copies = if faulty && rng.random_bool(faults.duplicate) {
            2
        } else {
            1
        };
        let (lo, hi) = faults.delay_us;
        let delays_us = (0..copies).map(|_| rng.random_range(lo..=hi)).collect();
        Sent { seq, delays_us }
    }

    /// Whether batch `seq` of `connection` on `from -> to`, arriving while `current` is the
    /// live connection, is delivered (the node's transport reconnects after a broken link and
    /// carries on: the engine retransmits what was lost).
    pub fn receive(
        &mut self,
        from: NodeId,
        to: NodeId,
        connection: Connection,
        current: Connection,
        seq: u64,
    ) -> bool {
        let link = self.links.entry((from, to)).or_default();
        link.receive(connection, current, seq) != Arrival::Drop
    }

    /// A partition change among `nodes` nodes: a quarter of the changes heal; the others cut
    /// one node off from the rest: from what it sends, from what it receives, or both.
    pub fn partition(&mut self, rng: &mut SmallRng, nodes: u16) {
        self.cut.clear();
        let kind = rng.random_range(0..4);
        let isolated = NodeId(rng.random_range(1..=nodes));
        for peer in (1..=nodes).map(NodeId).filter(|&p| p != isolated) {
            if kind == 1 || kind == 3 {
                self.cut.push((isolated, peer));
            }
            if kind == 2 || kind == 3 {
                self.cut.push((peer, isolated));
            }
        }
    }

    /// Ends the partition.
    pub fn heal(&mut self) {
        self.cut.clear();
    }
}
