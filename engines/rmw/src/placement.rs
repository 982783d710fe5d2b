//! Which acceptors hold each register: every acceptor (the default), or the replicas a ring's
//! configuration gives the key's slot (docs/ring.md §1).
//!
//! A placement is pure data for one stage of the ring (`Stable(e)`, or `Joint(e)` while it
//! moves from epoch `e - 1` to `e`): this module computes, once per stage, the acceptors of each
//! of Redis Cluster's 16,384 slots as indices into
//! [`ProposerConfig::acceptors`](crate::config::ProposerConfig::acceptors) — one set, or for a
//! slot that moves in the joint stage its old and its new set, a quorum then being a majority of
//! each — and a register's acceptors are those of its key's slot. The caller installs the
//! placement of a new stage with
//! [`Replica::install_placement`](crate::replica::Replica::install_placement). Quorums, targets and every count of the proposer
//! are then taken over the register's acceptors only; an acceptor drops messages about a key
//! it is not a replica of (see [`Replica::handle_message`](crate::replica::Replica::handle_message)).
//!
//! # What the node must do
//!
//! * Give every node the same configuration and the same list of
//!   [acceptors](crate::config::ProposerConfig::acceptors) (every node of the ring, in one
//!   order), or proposers and acceptors disagree on who holds a key: a proposer's message to an acceptor that does not hold the key is dropped, and its
//!   phase times out instead of deciding.
//! * Only a key's replicas propose for it (docs/ring.md §3): a node asked for a key it does not
//!   hold forwards the command to one of the key's replicas. The engine does not refuse such a
//!   command (any proposer may safely run against the key's acceptors), but the proposer state
//!   that makes RMWPaxos cheap pays off only at the replicas.
//! * Change the configuration only through the stages of docs/ring.md §4: install the
//!   [joint](Placement::joint) placement on every node, wait until a majority of the old
//!   replicas of every moving slot installed it (from then on the fence keeps the old stage
//!   from deciding), sync the moving slots, then install the new [stable](Placement::new) one.
//! * Act on [`ReplicaOutput::newer_stage`](crate::replica::ReplicaOutput::newer_stage): a peer
//!   is at a later stage (its acceptor refused this node's message with STALE, or its proposer
//!   sent a message this node's acceptor holds back). Fetch that stage's configuration and
//!   install its placement; until then this node's acceptor answers nothing of that stage and
//!   its proposer's messages are refused.
//! * Removal of dead registers and rejoining after a lost disk count every acceptor, so a
//!   replica with a placement refuses them (they are left for the ring's own work).
use std::sync::Arc;

use logless_placement::{
    key_slot, Configuration, Epoch, ReplicaSet, Slot, SlotAcceptors, Stage, SLOTS,
};

use crate::ids::NodeId;
use crate::quorum::{AcceptorSet, Quorum};

/// The acceptors of every slot, as indices into the proposer's list of acceptors, at one stage
/// of the ring.
#[derive(Clone, PartialEq, Eq)]
pub struct Placement {
    by_slot: Arc<[Quorum]>,
    stage: Stage,
}

/// A stage of the ring as PREPARE, PAXOS_PREP and VOTE carry it (the fence, docs/ring.md §4):
/// [`StageId::NONE`] without a placement, else `2e` for `Joint(e)` and `2e + 1` for
/// `Stable(e)`, so that ids order as stages do (`Stable(e-1) < Joint(e) < Stable(e)`) and fit
/// four bytes. Epochs are below 2³¹ (one per configuration change).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct StageId(u32);

impl StageId {
    /// No placement: every acceptor holds every key, and messages carry no stage on the wire.
    pub const NONE: StageId = StageId(0);

    /// The id of `stage`.
    ///
    /// # Panics
    /// If the epoch is 2³¹ or more, or for `Joint(0)` (no configuration comes before epoch 0).
    pub fn of(stage: Stage) -> StageId {
        let (epoch, stable) = match stage {
            Stage::Joint(epoch) => (epoch, 0),
            Stage::Stable(epoch) => (epoch, 1),
        };
        let id = u32::try_from(epoch.0)
            .ok()
            .and_then(|e| e.checked_mul(2))
            .map(|e| e | stable)
            .expect("epochs stay below 2^31");
        assert_ne!(id, 0, "Joint(0) follows no configuration");
        StageId(id)
    }

    /// The stage this id names; `None` for [`StageId::NONE`].
    pub fn stage(self) -> Option<Stage> {
        let epoch = Epoch(u64::from(self.0 / 2));
        match self.0 {
            0 => None,
            id if id % 2 == 0 => Some(Stage::Joint(epoch)),
            _ => Some(Stage::Stable(epoch)),
        }
    }

    /// The id as the wire carries it.
    pub fn get(self) -> u32 {
        self.0
    }

    /// The id the wire carried (any `u32`; 0 is [`StageId::NONE`]).
    pub fn from_wire(id: u32) -> StageId {
        StageId(id)
    }
}

/// A configuration that names a node the list of acceptors lacks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("node {node} replicates slot {slot} but is not among the acceptors")]
pub struct UnknownReplica {
    /// The node the acceptors lack.
    pub node: u16,
    /// A slot it replicates.
    pub slot: u16,
}

impl Placement {
    /// The placement `config` gives, stable in its epoch, over `acceptors` (every node of the
    /// ring, in the order every node uses; at most 64): fails if the configuration names a
    /// node that is not one of them.
    pub fn new(config: &Configuration, acceptors: &[NodeId]) -> Result<Placement, UnknownReplica> {
        Placement::build(Stage::Stable(config.epoch()), acceptors, |slot| {
            SlotAcceptors::stable(config, slot)
        })
    }

    /// The placement of the joint stage from `old` to `new` (`Joint(new.epoch())`): a slot
    /// whose replicas change needs a majority of its old and of its new replicas, the others a
    /// majority of their replicas (docs/ring.md §4). `acceptors` must hold every node of both.
    pub fn joint(
        old: &Configuration,
        new: &Configuration,
        acceptors: &[NodeId],
    ) -> Result<Placement, UnknownReplica> {
        Placement::build(Stage::Joint(new.epoch()), acceptors, |slot| {
            SlotAcceptors::moving(old, new, slot)
        })
    }

    fn build(
        stage: Stage,
        acceptors: &[NodeId],
        of_slot: impl Fn(Slot) -> SlotAcceptors,
    ) -> Result<Placement, UnknownReplica> {
        let indices = |slot: Slot, replicas: &ReplicaSet| {
            let mut set = AcceptorSet::default();
            for node in replicas.nodes() {
                let index = acceptors
                    .iter()
                    .position(|a| a.0 == node.0)
                    .ok_or(UnknownReplica {
                        node: node.0,
                        slot: slot.get(),
                    })?;
                set.insert(index);
            }
            Ok(set)
        };
        let by_slot = Slot::all()
            .map(|slot| {
                Ok(match of_slot(slot) {
                    SlotAcceptors::Single(set) => Quorum::majority_of(indices(slot, &set)?),
                    SlotAcceptors::Joint { old, new } => {
                        Quorum::joint(indices(slot, &old)?, indices(slot, &new)?)
                    }
                })
            })
            .collect::<Result<Arc<[Quorum]>, UnknownReplica>>()?;
        debug_assert_eq!(by_slot.len(), usize::from(SLOTS));
        Ok(Placement { by_slot, stage })
    }

    /// The stage of the ring this placement is for.
    pub fn stage(&self) -> Stage {
        self.stage
    }

    /// The id of [`Placement::stage`], which this node's messages carry.
    pub fn stage_id(&self) -> StageId {
        StageId::of(self.stage)
    }

    /// The acceptors of the register `key` (both sets of a moving slot in the joint stage).
    pub fn acceptors_of(&self, key: &[u8]) -> AcceptorSet {
        self.quorum_of(key).everyone()
    }

    /// Whether this joint stage makes acceptor `index` a replica of some slot it did not
    /// replicate in the old configuration (never in a stable stage): that acceptor must raise
    /// its round floor before it answers for those slots (docs/ring.md §4, "Dead registers").
    pub fn gains_any(&self, index: usize) -> bool {
        self.by_slot.iter().any(|quorum| quorum.gains(index))
    }

    /// The acceptors of the register `key` and which of them make a quorum.
    pub fn quorum_of(&self, key: &[u8]) -> Quorum {
        self.by_slot[usize::from(key_slot(key).get())]
    }
}

impl std::fmt::Debug for Placement {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // 16,384 sets say nothing at a glance; how many distinct ones there are does.
        let mut distinct: Vec<AcceptorSet> = self.by_slot.iter().map(Quorum::everyone).collect();
        distinct.sort_unstable_by_key(|s| s.bits());
        distinct.dedup();
        write!(
            f,
            "Placement({:?}, {} acceptor sets)",
            self.stage,
            distinct.len()
        )
    }
}

#[cfg(test)]
mod tests {
    use logless_placement::Replication;

    use super::*;
    use crate::config::ProposerConfig;

    fn ring(nodes: u16) -> (Configuration, Vec<NodeId>) {
        let acceptors: Vec<NodeId> = (1..=nodes).map(NodeId).collect();
        let placed: Vec<_> = (1..=nodes).map(logless_placement::NodeId).collect();
        let config = Configuration::balanced(&placed, Replication::THREE).unwrap();
        (config, acceptors)
    }

    #[test]
    fn every_slot_has_its_replicas_as_acceptors() {
        let (config, acceptors) = ring(7);
        // The acceptors listed in another order than the ring's nodes: indices follow the list.
        let shuffled: Vec<NodeId> = acceptors.iter().rev().copied().collect();
        let placement = Placement::new(&config, &shuffled).unwrap();
        for slot in Slot::all() {
            let expected: Vec<u16> = {
                let mut nodes: Vec<u16> =
                    config.replicas(slot).nodes().iter().map(|n| n.0).collect();
                nodes.sort_unstable();
                nodes
            };
            let set = placement.by_slot[usize::from(slot.get())].everyone();
            let mut got: Vec<u16> = (0..shuffled.len())
                .filter(|&i| set.contains(i))
                .map(|i| shuffled[i].0)
                .collect();
            got.sort_unstable();
            assert_eq!(got, expected, "slot {}", slot.get());
        }
    }

    #[test]
    fn keys_of_one_hash_tag_share_their_acceptors() {
        let (config, acceptors) = ring(5);
        let placement = Placement::new(&config, &acceptors).unwrap();
        assert_eq!(
            placement.acceptors_of(b"{user1}.name"),
            placement.acceptors_of(b"{user1}.mail")
        );
        assert_eq!(placement.acceptors_of(b"k").len(), 3);
    }

    #[test]
    fn a_joint_placement_has_two_sets_for_moving_slots_only() {
        let (old, _) = ring(5);
        let acceptors: Vec<NodeId> = (1..=6).map(NodeId).collect();
        let new = old
            .with_node_replaced(logless_placement::NodeId(1), logless_placement::NodeId(6))
            .unwrap();
        let joint = Placement::joint(&old, &new, &acceptors).unwrap();
        assert_eq!(joint.stage(), Stage::Joint(new.epoch()));
        assert_eq!(
            Placement::new(&new, &acceptors).unwrap().stage(),
            Stage::Stable(new.epoch())
        );
        let (node_1, node_6) = (0, 5);
        let (mut moving, mut still) = (0, 0);
        for slot in Slot::all() {
            let quorum = joint.by_slot[usize::from(slot.get())];
            if old.replicas(slot).contains(logless_placement::NodeId(1)) {
                moving += 1;
                assert!(quorum.is_joint());
                assert!(quorum.everyone().contains(node_1) && quorum.everyone().contains(node_6));
                assert_eq!(quorum.everyone().len(), 4);
            } else {
                still += 1;
                assert!(!quorum.is_joint());
                assert_eq!(quorum.everyone().len(), 3);
            }
        }
        assert!(moving > 0 && still > 0);
        // A configuration naming a node the acceptors lack is refused, in either set.
        assert_eq!(
            Placement::joint(&old, &new, &acceptors[..5])
                .unwrap_err()
                .node,
            6
        );
    }

    #[test]
    fn stage_ids_order_as_stages_and_name_them_back() {
        let stages = [
            Stage::Stable(Epoch(0)),
            Stage::Stable(Epoch(1)),
            Stage::Joint(Epoch(2)),
            Stage::Stable(Epoch(2)),
            Stage::Joint(Epoch(3)),
            Stage::Stable(Epoch((1 << 31) - 1)),
        ];
        for pair in stages.windows(2) {
            assert!(pair[1].is_after(pair[0]));
            assert!(StageId::of(pair[1]) > StageId::of(pair[0]), "{pair:?}");
        }
        for stage in stages {
            assert!(StageId::of(stage) > StageId::NONE);
            assert_eq!(StageId::of(stage).stage(), Some(stage));
            assert_eq!(
                StageId::from_wire(StageId::of(stage).get()).stage(),
                Some(stage)
            );
        }
        assert_eq!(StageId::NONE.stage(), None);
        assert!(std::panic::catch_unwind(|| StageId::of(Stage::Stable(Epoch(1 << 31)))).is_err());
        let (config, acceptors) = ring(5);
        let placement = Placement::new(&config, &acceptors).unwrap();
        assert_eq!(
            placement.stage_id(),
            StageId::of(Stage::Stable(config.epoch()))
        );
    }

    #[test]
    fn without_a_placement_every_acceptor_holds_every_key() {
        let config = ProposerConfig::new((1..=5).map(NodeId).collect());
        assert_eq!(config.acceptors_of(b"any"), AcceptorSet::first(5));
        let (ring, acceptors) = ring(5);
        let placed = ProposerConfig {
            placement: Some(Placement::new(&ring, &acceptors).unwrap()),
            ..config
        };
        assert_eq!(placed.acceptors_of(b"any").len(), 3);
    }
}
