//! Membership changes of a ring while the faults last (docs/ring.md §4 "The protocol"): add a
//! node, remove one, replace one by another, each through `Stable(e)` → `Joint(e+1)` → sync →
//! `Stable(e+1)`, the stages installed by the nodes one at a time, whenever each reads the
//! stage register, while nodes crash, restart and are cut off.
//!
//! What is the node's own code, and what is modelled:
//! * **The change and the stages.** The next configuration is computed by the node's
//!   [`ChangeRequest::apply`] (its refusals included); a stage is the node's [`RingStage`],
//!   whose [`RingStage::placement`] each node hands to every shard's engine
//!   (`ShardCore::install_placement`, as an input the shard takes in its next turn, like the
//!   node's `ShardInput::InstallPlacement`) and which its forwarder routes by
//!   (`Forwarder::set_stage`: the [`RingStage::serving`] configuration, and in a joint stage the
//!   node's slots of the new one run there too). The engines' fence and joint quorums run as
//!   they are.
//! * **The stage register** is modelled: on a node it is a register of the ring shard (every
//!   peer an acceptor) read every 500 ms by `ring_watch.rs` over tokio. Here it is one value
//!   that a node reads, installs and reports (`ring/installed/<id>`) at random moments
//!   ([`READ_EVERY_US`] on average, thirty times less often for one node start in two: some
//!   nodes are late) when it reaches a majority of the peer list, and at once
//!   when its engine met a newer stage (`ShardCore::take_newer_stage`, as
//!   `Shard::on_newer_stage` wakes the reader). A node that restarts comes back with the
//!   placement its peer list derives (`logless_node::ring::placement`, as a node does), its
//!   shards' acceptors answer no peer (`logless_node::ring::starting_replica`, as a node starts
//!   them) and it serves no client until its first read installed the register's stage.
//! * **The coordinator** is modelled after `ring_change::change`, whose waits are async over
//!   tokio timers: it swaps `Stable(e)` for `Joint(e+1)` (when some node reaches a majority),
//!   waits for the nodes' reports, syncs, swaps in `Stable(e+1)` and waits again. A seed
//!   chooses its waits ([`RingChanges::wait_for_every_node`]): as built (every node of both
//!   configurations reports each stage, and every one of them is up when the change starts),
//!   or only what the protocol needs (a majority of the old replicas of every moving slot has
//!   installed the joint stage before the sync, nothing after `Stable(e+1)`; nodes may be down
//!   when the change starts, so a dead node may be replaced or removed). Either way, before
//!   it writes the joint stage it asks what the node's does: that every node the change gives
//!   slots (`ring_change::gaining_nodes`) reported the current stage with no register of a
//!   slot it does not replicate (`ring_change::holds_nothing_elsewhere`; the reports count
//!   the shards' `registers_unplaced`, as a node's do), and otherwise draws a change later.
//! * **The sync** enumerates the keys of the moving slots as the node's mover does: among
//!   every key the run's clients named, those a majority of the slot's old replicas (the
//!   members up first) holds a vote of, dead registers included (`AcceptorState::holds_vote`;
//!   before chaos seed 51 the node listed only live keys, and the simulation, writing every
//!   named key through, could not see the difference) and runs, for each, the engine's write-through (`ShardCore::submit_write_through`, what the
//!   node's mover hands its shard) through a new replica that installed the joint stage, until
//!   acknowledged: the highest vote proposed again with its request ids in a new round under
//!   joint quorums, even when a consistent quorum already holds it. (A plain read, which
//!   writes through only an inconsistent quorum, was the stand-in before the mover: with it
//!   two seeds of 2,000 failed, 769 and 5802, and both pass with the write-through.)
use std::collections::{BTreeMap, BTreeSet};

use logless_node::ring_change::{self, ChangeRequest};
use logless_node::ring_mover::gained_floor;
use logless_node::ring_register::{stage_name, InstallReport, RingStage};
use logless_placement::{key_slot, ReplicaSet};
use logless_rmw::ids::{Key, NodeId};
use logless_rmw::placement::StageId;
use rand::seq::IndexedRandom;
use rand::Rng;

use super::{AnswerTo, Event, Input, NodeCluster};
use crate::history::Outcome;

/// The mean time between two reads of the stage register by a node (µs): the node reads every
/// 500 ms, scaled down as the simulation's faults are (a partition change every 50 ms).
pub const READ_EVERY_US: u64 = 10_000;

/// One node start in this many reads the register [`LATE_FACTOR`] times less often until its
/// next start (a node whose reads are slow or fail): it may lag stages behind the ring, which
/// only the fence keeps from deciding with quorums the ring no longer uses.
const LATE_ONE_IN: u32 = 2;

/// How much less often a late node reads the register.
const LATE_FACTOR: u64 = 30;

/// How often the coordinator looks at the nodes' reports and the sync's progress (µs).
const COORDINATOR_POLL_US: u64 = 1_000;

/// When the first change starts (µs, drawn uniformly), while the clients are busy.
const FIRST_CHANGE_US: (u64, u64) = (2_000, 40_000);

/// The mean pause between the end of a change and the start of the next (µs).
const CHANGE_GAP_US: u64 = 10_000;

/// How long a sync read may go unanswered before it is sent again, through any new replica.
const SYNC_TIMEOUT_US: u64 = 30_000;

/// The client the sync's reads answer to.
pub(super) const MOVER_CLIENT: u32 = u32::MAX;

/// Membership changes of a ring during the faults.
#[derive(Clone, Copy, Debug, Default)]
pub struct RingChanges {
    /// Changes to start while the faults last, one after the other.
    pub changes: u32,
    /// Whether the ring starts with a spare node: in every peer list but outside the
    /// configuration (as after a removal on an empty ring before the run), so that it can be
    /// added or take another's place.
    pub spare: bool,
    /// Whether the coordinator waits as the node's does (every node of a stage reports it, and
    /// a change starts only with all of them up) rather than only as the protocol needs.
    pub wait_for_every_node: bool,
}

impl RingChanges {
    /// The changes of the `i`-th ring seed: the node's waits on every other, a spare on every
    /// other pair, 2 to 4 changes by fours.
    pub fn for_ring_seed(i: u64) -> RingChanges {
        RingChanges {
            changes: 2 + (i / 4 % 3) as u32,
            spare: (i / 2).is_multiple_of(2),
            wait_for_every_node: i.is_multiple_of(2),
        }
    }

    /// Whether the ring's configuration may differ from the one its peer lists derive: the
    /// nodes then read the stage register.
    pub fn any(&self) -> bool {
        self.changes > 0 || self.spare
    }
}

/// Where the coordinator is.
pub(super) enum Step {
    /// Between changes, `left` more to start.
    Idle { left: u32 },
    /// The register holds `stage` (the joint stage, or with the bug the next stable one);
    /// waiting for the nodes to install it.
    Installing { stage: RingStage, left: u32 },
    /// The keys of the moving slots are being written through.
    Syncing {
        joint: RingStage,
        keys: BTreeMap<Key, Sync>,
        left: u32,
    },
    /// The register holds `Stable(e+1)`; waiting for the nodes to install it.
    Stabilising { stage: RingStage, left: u32 },
}

/// A key of the sync.
#[derive(Default)]
pub(super) struct Sync {
    done: bool,
    /// The read in flight: its number and when it was sent.
    sent: Option<(u64, u64)>,
}

/// The coordinator's side of a ring whose membership changes.
pub(super) struct Coordinator {
    pub changes: RingChanges,
    pub step: Step,
    /// Each moving slot's old replicas, distinct, for the change under way.
    old_sets: Vec<ReplicaSet>,
    /// Whether each slot moves in the change under way.
    moving: Vec<bool>,
    /// Each node the change under way gives slots, with one of those slots for each distinct
    /// set of old replicas they have: what `gained_floor` reads (computed once per change, a
    /// walk of every slot's replicas being too slow for every step of the sync).
    gaining: Vec<(NodeId, Vec<logless_placement::Slot>)>,
    /// The sync's reads in flight, by number.
    reads: BTreeMap<u64, Key>,
    next_read: u64,
}

impl Coordinator {
    pub fn new(changes: RingChanges) -> Coordinator {
        Coordinator {
            changes,
            step: Step::Idle {
                left: changes.changes,
            },
            old_sets: Vec::new(),
            moving: Vec::new(),
            gaining: Vec::new(),
            reads: BTreeMap::new(),
            next_read: 0,
        }
    }

    /// Whether no change is under way.
    pub fn idle(&self) -> bool {
        matches!(self.step, Step::Idle { .. })
    }
}

impl NodeCluster {
    fn coordinator(&mut self) -> &mut Coordinator {
        (self.ring.as_mut())
            .and_then(|ring| ring.coordinator.as_mut())
            .expect("a ring that changes")
    }

    /// Starts the ring's changes: a spare taken out of the configuration, the first change
    /// planned, every node reading the register.
    pub(super) fn plan_ring_changes(&mut self) {
        let Some(changes) = self.config_ring_changes() else {
            return;
        };
        if changes.spare {
            let ring = self.ring.as_ref().expect("a ring");
            let members: Vec<u16> = ring.register.target().nodes().map(|n| n.0).collect();
            let spare = *members.choose(&mut self.rng).expect("members");
            let peers = ring.peers();
            let ring = self.ring.as_mut().expect("a ring");
            let config = ChangeRequest::Remove(spare)
                .apply(ring.register.target(), &peers)
                .expect("a ring of 5 or more nodes can lose one");
            ring.register = RingStage::Stable(config);
        }
        if changes.changes > 0 {
            let (lo, hi) = FIRST_CHANGE_US;
            let at = self.rng.random_range(lo..=hi);
            self.events.schedule(at, Event::RingCoordinate);
        }
    }

    /// The ring's changes, if it has any.
    pub(super) fn config_ring_changes(&self) -> Option<RingChanges> {
        (self.ring.as_ref())
            .and_then(|ring| ring.coordinator.as_ref())
            .map(|c| c.changes)
    }

    /// Whether the nodes read the stage register (their ring may change).
    pub(super) fn ring_watched(&self) -> bool {
        self.config_ring_changes().is_some()
    }

    /// Whether no change of the ring is under way.
    pub(super) fn ring_settled(&self) -> bool {
        (self.ring.as_ref())
            .and_then(|ring| ring.coordinator.as_ref())
            .is_none_or(Coordinator::idle)
    }

    /// Whether `node` reaches a majority of the peer list both ways (the ring shard's quorum).
    fn reaches_majority(&self, node: NodeId) -> bool {
        let linked = (1..=self.config.nodes)
            .map(NodeId)
            .filter(|&p| p == node || (self.linked(node, p) && self.linked(p, node)))
            .count();
        2 * linked > usize::from(self.config.nodes)
    }

    /// Whether some node up reaches a majority: a compare-and-swap of the register can decide.
    fn register_writable(&self) -> bool {
        (1..=self.config.nodes)
            .map(NodeId)
            .any(|n| self.nodes[&n].up && self.reaches_majority(n))
    }

    /// A node's start: at the run's first start every node installs the register's stage at
    /// once (they all read it before serving); a restarted node comes back with the placement
    /// its peer list derives, its acceptors silent, and serves once a read installed the
    /// register's stage.
    pub(super) fn ring_node_started(&mut self, node: NodeId) {
        if !self.ring_watched() {
            return;
        }
        let incarnation = self.nodes[&node].incarnation;
        let derived = self.ring.as_ref().expect("a ring").derived_stage();
        // The fence's staged schedule makes its lagging node by a cut, and wants the others
        // prompt (the draw is made anyway, so that the other runs' schedules stay as they were).
        let late = self.rng.random_ratio(1, LATE_ONE_IN) && !self.config.fence_schedule;
        let read_every_us = if late {
            READ_EVERY_US * LATE_FACTOR
        } else {
            READ_EVERY_US
        };
        let ring = self.ring_mut();
        ring.installed.insert(node, derived);
        ring.read_every_us.insert(node, read_every_us);
        self.nodes.get_mut(&node).expect("node").ready = false;
        if incarnation == 1 {
            self.install_register(node);
        } else {
            self.events.schedule(
                0,
                Event::RingRead {
                    node,
                    incarnation,
                    periodic: false,
                },
            );
        }
        let at = self.rng.random_range(0..=2 * read_every_us);
        self.events.schedule(
            at,
            Event::RingRead {
                node,
                incarnation,
                periodic: true,
            },
        );
    }

    /// A read of the stage register by `node`: installs the stage it holds if newer, and
    /// reports it. A periodic read plans the next.
    pub(super) fn ring_read(&mut self, node: NodeId, incarnation: u32, periodic: bool) {
        let n = &self.nodes[&node];
        if !n.up || n.incarnation != incarnation {
            return;
        }
        if periodic {
            let read_every_us = self.ring.as_ref().expect("a ring").read_every_us[&node];
            let at = self.rng.random_range(1..=2 * read_every_us);
            self.events.schedule(
                at,
                Event::RingRead {
                    node,
                    incarnation,
                    periodic,
                },
            );
        }
        if self.reaches_majority(node) {
            self.install_register(node);
        }
    }

    /// `node` installs the register's stage on every shard and its forwarder (if it is not the
    /// one installed, or if the node restarted and has not read the register yet: its shards'
    /// acceptors answer nothing until then, as a node's do), reports it and serves.
    fn install_register(&mut self, node: NodeId) {
        let n = &self.nodes[&node];
        let awaiting = !n.ready && n.incarnation > 1;
        let ring = self.ring_mut();
        let stage = ring.register.clone();
        let installing = ring.installed[&node] != stage || awaiting;
        if installing {
            let placement = ring.placement_of(&stage);
            ring.set_route(node, &stage);
            ring.installed.insert(node, stage.clone());
            for shard in 0..self.config.shards {
                self.enqueue(node, shard, Input::Install(placement.clone()));
            }
            self.report.stage_installs += 1;
        }
        let registers_elsewhere = self.registers_elsewhere(node, installing);
        let report = InstallReport {
            stage: stage.stage(),
            moving_keys: 0,
            synced: true,
            registers_elsewhere,
        };
        self.ring_mut().reported.insert(node, report);
        self.nodes.get_mut(&node).expect("node").ready = true;
    }

    /// The registers `node`'s shards hold of slots it does not replicate at its installed
    /// stage, as its report counts them (`registers_unplaced`). While a shard has not taken the
    /// stage's placement yet (`installing`, or an install still queued) that count would be of
    /// the stage before: the report then says "some" (`u64::MAX`), which a later read counts,
    /// unless the shards hold no register at all.
    fn registers_elsewhere(&self, node: NodeId, installing: bool) -> u64 {
        let n = &self.nodes[&node];
        let cores = || n.shards.iter().filter_map(|s| s.core.as_ref());
        let queued = (n.shards.iter())
            .any(|s| (s.queue.iter()).any(|input| matches!(input, Input::Install(_))));
        if installing || queued {
            return if cores().all(|core| core.registers_held() == 0) {
                0
            } else {
                u64::MAX
            };
        }
        cores().map(|core| core.status().registers_unplaced).sum()
    }

    /// The engine of `node` met a later stage: its node reads the register now.
    pub(super) fn newer_stage_met(&mut self, node: NodeId) {
        if self.ring_watched() {
            let incarnation = self.nodes[&node].incarnation;
            let (lo, hi) = self.config.faults.delay_us;
            let at = 2 * self.rng.random_range(lo..=hi);
            self.events.schedule(
                at,
                Event::RingRead {
                    node,
                    incarnation,
                    periodic: false,
                },
            );
        }
    }

    /// One step of the coordinator.
    pub(super) fn coordinate(&mut self) {
        let step = std::mem::replace(&mut self.coordinator().step, Step::Idle { left: 0 });
        let next = match step {
            Step::Idle { left } => self.start_change(left),
            Step::Installing { stage, left } => {
                if !self.installed_enough(&stage) {
                    Step::Installing { stage, left }
                } else if matches!(stage, RingStage::Joint { .. }) {
                    let keys = self.keys_to_sync(&stage);
                    Step::Syncing {
                        joint: stage,
                        keys,
                        left,
                    }
                } else {
                    // The bug: the next stable stage without the joint one.
                    Step::Stabilising { stage, left }
                }
            }
            Step::Syncing { joint, keys, left } => self.sync(joint, keys, left),
            Step::Stabilising { stage, left } => {
                if self.installed_enough(&stage) {
                    self.report.ring_changes += 1;
                    if left > 1 {
                        let at = self.exp(CHANGE_GAP_US);
                        self.events.schedule(at, Event::RingCoordinate);
                    }
                    self.coordinator().step = Step::Idle { left: left - 1 };
                    return;
                }
                Step::Stabilising { stage, left }
            }
        };
        let done = matches!(next, Step::Idle { left: 0 });
        self.coordinator().step = next;
        if !done {
            self.events
                .schedule(COORDINATOR_POLL_US, Event::RingCoordinate);
        }
    }

    /// Starts a change drawn among those the configuration allows, if the faults last and
    /// the register can be written.
    fn start_change(&mut self, left: u32) -> Step {
        if !self.faults_active {
            return Step::Idle { left: 0 };
        }
        if !self.register_writable() {
            return Step::Idle { left };
        }
        let ring = self.ring.as_ref().expect("a ring");
        let RingStage::Stable(old) = ring.register.clone() else {
            unreachable!("a change starts from a stable stage");
        };
        let peers = ring.peers();
        let members: Vec<u16> = old.nodes().map(|n| n.0).collect();
        let outsiders: Vec<u16> = (peers.iter().copied())
            .filter(|p| !members.contains(p))
            .collect();
        let replication = usize::from(old.replication().get());
        let mut kinds = vec![];
        if !outsiders.is_empty() {
            kinds.extend([0, 2]); // add, replace
        }
        if members.len() > replication {
            kinds.push(1); // remove
        }
        let member = *members.choose(&mut self.rng).expect("members");
        let outsider = outsiders.choose(&mut self.rng).copied();
        let request = match kinds.choose(&mut self.rng) {
            Some(0) => ChangeRequest::Add(outsider.expect("an outsider")),
            Some(1) => ChangeRequest::Remove(member),
            Some(_) => ChangeRequest::Replace {
                old: member,
                new: outsider.expect("an outsider"),
            },
            None => return Step::Idle { left: 0 },
        };
        let new = request
            .apply(&old, &peers)
            .unwrap_or_else(|e| panic!("{request:?} of {:?}: {e}", old.epoch()));
        let joint = RingStage::Joint {
            old: old.clone(),
            new: new.clone(),
        };
        let changes = self.config_ring_changes().expect("changes");
        if changes.wait_for_every_node
            && !(joint.nodes().iter()).all(|&n| self.nodes[&NodeId(n)].up)
        {
            // The node's coordinator refuses a change with a node of it down.
            return Step::Idle { left };
        }
        // As the node's coordinator, before anything is written: every node the change gives
        // slots holds nothing of slots it does not replicate, by its report of this stage
        // (otherwise the node's waits and then refuses; here a change is drawn again later).
        let stage_now = logless_placement::Stage::Stable(old.epoch());
        let reported = &self.ring.as_ref().expect("a ring").reported;
        let held_elsewhere = (ring_change::gaining_nodes(&old, &new).into_iter())
            .any(|n| !ring_change::holds_nothing_elsewhere(reported.get(&NodeId(n)), stage_now));
        if held_elsewhere {
            self.report.changes_held_back += 1;
            return Step::Idle { left };
        }
        let moving = joint.moving_slots();
        let mut old_sets: Vec<ReplicaSet> = moving.iter().map(|&s| old.replicas(s)).collect();
        old_sets.sort_by_key(|set| set.nodes().to_vec());
        old_sets.dedup();
        let mut is_moving = vec![false; usize::from(logless_placement::SLOTS)];
        let mut gaining: BTreeMap<NodeId, BTreeMap<Vec<u16>, logless_placement::Slot>> =
            BTreeMap::new();
        for slot in moving {
            is_moving[usize::from(slot.get())] = true;
            let (before, after) = (old.replicas(slot), new.replicas(slot));
            let mut sources: Vec<u16> = before.nodes().iter().map(|n| n.0).collect();
            sources.sort_unstable();
            for node in after.without(&before) {
                (gaining.entry(NodeId(node.0)).or_default())
                    .entry(sources.clone())
                    .or_insert(slot);
            }
        }
        let c = self.coordinator();
        c.old_sets = old_sets;
        c.moving = is_moving;
        c.gaining = (gaining.into_iter())
            .map(|(node, slots)| (node, slots.into_values().collect()))
            .collect();
        let stage = if self.config.ring_bugs.skip_joint_stage {
            RingStage::Stable(new)
        } else {
            joint
        };
        self.ring_mut().register = stage.clone();
        self.fence_on_joint(request);
        Step::Installing { stage, left }
    }

    /// Whether enough nodes reported `stage` (or a later one) for the coordinator to go on.
    fn installed_enough(&self, stage: &RingStage) -> bool {
        let ring = self.ring.as_ref().expect("a ring");
        let wanted = stage.stage();
        let has = |n: u16| {
            (ring.reported.get(&NodeId(n)))
                .is_some_and(|r| r.stage == wanted || r.stage.is_after(wanted))
        };
        let coordinator = ring.coordinator.as_ref().expect("changes");
        if coordinator.changes.wait_for_every_node {
            return stage.nodes().into_iter().all(has);
        }
        match stage {
            // After Stable(e+1) the protocol waits for nothing.
            RingStage::Stable(_) if !self.config.ring_bugs.skip_joint_stage => true,
            // A majority of the old replicas of every moving slot.
            _ => coordinator.old_sets.iter().all(|set| {
                let count = set.nodes().iter().filter(|n| has(n.0)).count();
                2 * count > set.nodes().len()
            }),
        }
    }

    /// The keys the node's mover lists (`ring_mover`, "Enumeration"): of every key the clients
    /// named whose slot moves, those that a majority of the slot's old replicas in `joint` (the
    /// members up, in the set's order; all of them up if fewer) holds a vote of at one member
    /// at least, dead registers included (`AcceptorState::holds_vote`, what `SCAN … VOTED`
    /// lists).
    fn keys_to_sync(&mut self, joint: &RingStage) -> BTreeMap<Key, Sync> {
        let RingStage::Joint { old, .. } = joint else {
            return BTreeMap::new();
        };
        let keys: BTreeSet<Key> = (self.history.operations.iter())
            .map(|op| op.key.clone())
            .collect();
        let moving = &self.coordinator().moving;
        let moving: Vec<Key> = keys
            .into_iter()
            .filter(|k| moving[usize::from(key_slot(k.as_bytes()).get())])
            .collect();
        let shards = usize::from(self.config.shards);
        moving
            .into_iter()
            .filter(|key| {
                let set = old.replicas(key_slot(key.as_bytes()));
                let majority = set.nodes().len() / 2 + 1;
                let shard = logless_node::context::shard_of(key.as_bytes(), shards);
                (set.nodes().iter())
                    .map(|n| &self.nodes[&NodeId(n.0)])
                    .filter(|n| n.up)
                    .take(majority)
                    .any(|n| {
                        (n.shards[shard].core.as_ref()).is_some_and(|core| {
                            matches!(core.durable_state(key), Ok(Some(state)) if state.holds_vote())
                        })
                    })
            })
            .map(|k| (k, Sync::default()))
            .collect()
    }

    /// Sends the sync's reads not in flight (or in flight too long); once every key is synced,
    /// swaps in the next stable stage.
    fn sync(&mut self, joint: RingStage, mut keys: BTreeMap<Key, Sync>, left: u32) -> Step {
        let floors = self.gained_floors_raised(&joint);
        if floors && keys.values().all(|k| k.done) {
            if !self.register_writable() {
                return Step::Syncing { joint, keys, left };
            }
            self.coordinator().reads.clear();
            let stage = RingStage::Stable(joint.target().clone());
            self.ring_mut().register = stage.clone();
            return Step::Stabilising { stage, left };
        }
        let now_us = self.events.now_us();
        for (key, sync) in &mut keys {
            let waiting = sync
                .sent
                .is_some_and(|(_, at)| at + SYNC_TIMEOUT_US > now_us);
            if sync.done || waiting {
                continue;
            }
            let replicas = joint.target().replicas(key_slot(key.as_bytes()));
            let ring = self.ring.as_ref().expect("a ring");
            let candidates: Vec<NodeId> = (replicas.nodes().iter())
                .map(|n| NodeId(n.0))
                .filter(|n| {
                    let node = &self.nodes[n];
                    node.up && node.ready && ring.installed[n] == joint
                })
                .collect();
            let Some(&node) = candidates.choose(&mut self.rng) else {
                continue;
            };
            let c = self.coordinator();
            c.next_read += 1;
            let seq = c.next_read;
            c.reads.insert(seq, key.clone());
            sync.sent = Some((seq, now_us));
            let to = AnswerTo {
                client: MOVER_CLIENT,
                seq,
            };
            self.write_through_at(node, key.clone(), to);
        }
        Step::Syncing { joint, keys, left }
    }

    /// Whether every shard of every node `joint` makes a new replica of some slot raised its
    /// round floor for them, durably (the node's mover does it, and the coordinator's sync
    /// waits for it through the node's report; docs/ring.md §4 "Dead registers"). Sends the
    /// raise to each shard that awaits it and has none sent since its node installed the
    /// stage, once a majority of each gained slot's old replicas reported its highest round.
    fn gained_floors_raised(&mut self, joint: &RingStage) -> bool {
        let RingStage::Joint { old, .. } = joint else {
            return true;
        };
        let stage = StageId::of(joint.stage());
        let shards = self.config.shards;
        let mut all = true;
        let gaining = self.coordinator().gaining.clone();
        for (node, gained) in gaining {
            for shard in 0..shards {
                let ring = self.ring.as_ref().expect("a ring");
                // A shard restarted after its raise holds the slots back again until raised
                // again (its floor is durable): asked again, but not waited for.
                all &= ring.raised.contains(&(node, shard, stage));
                let n = &self.nodes[&node];
                let awaits =
                    ring.awaiting
                        .get(&(node, shard))
                        .is_some_and(|&(s, incarnation, sent)| {
                            s == stage && incarnation == n.incarnation && !sent && n.up
                        });
                if !awaits {
                    continue;
                }
                let high = |n: u16| {
                    (ring.highs.get(&(NodeId(n), shard)))
                        .filter(|(s, _)| *s == stage)
                        .map(|(_, high)| *high)
                };
                let Some(above) = gained_floor(old, &gained, high) else {
                    continue;
                };
                let ring = self.ring_mut();
                if let Some(entry) = ring.awaiting.get_mut(&(node, shard)) {
                    entry.2 = true;
                }
                self.enqueue(node, shard, Input::RaiseFloor { stage, above });
            }
        }
        all
    }

    /// The answer to the sync's read `seq`: its key is synced if it was acknowledged, read
    /// again at the next step otherwise.
    pub(super) fn sync_answered(&mut self, seq: u64, acknowledged: bool) {
        let c = self.coordinator();
        let Some(key) = c.reads.remove(&seq) else {
            return;
        };
        let Step::Syncing { keys, .. } = &mut c.step else {
            return;
        };
        let Some(sync) = keys.get_mut(&key) else {
            return;
        };
        if sync.sent.is_some_and(|(sent, _)| sent == seq) {
            sync.sent = None;
            if acknowledged && !sync.done {
                sync.done = true;
                self.report.keys_synced += 1;
            }
        }
    }

    /// After the run: the ring is stable, and each key written with an acknowledgement has its
    /// state stored on a majority of its final replicas, unless no node holds a vote of it.
    ///
    /// An acknowledged write need not have given its register a value: one that changes
    /// nothing (a lock released by another owner than its holder, a failed condition) is
    /// answered after phase 1 alone, without a vote. A register no acceptor voted for has no
    /// value to keep: it reads absent through any quorum, and the acceptors that hold a state
    /// of it hold promises only (rounds of phase 1), which the sync does not move (its
    /// write-through of a register without a vote writes nothing), and need not. Votes are
    /// never dropped on a ring (no removal, no lost disk), so a register with no vote anywhere
    /// after the run never had a value chosen. (Ring seed 1120, overall seed 7846: `k11.0`,
    /// whose one acknowledged write is a release that changed nothing, held promises on nodes
    /// 1, 3 and 4 and nothing on its final replicas 2 and 5.)
    pub(super) fn check_final_replicas(&mut self) {
        let Some(ring) = self.ring.as_ref().filter(|_| self.ring_watched()) else {
            return;
        };
        let RingStage::Stable(last) = ring.register.clone() else {
            self.report.failures.push(format!(
                "the ring's change did not finish: the register holds {}",
                stage_name(ring.register.stage())
            ));
            return;
        };
        let written: BTreeSet<Key> = (self.history.operations.iter())
            .filter(|op| !op.command.is_read_only() && matches!(op.outcome, Outcome::Ok(_)))
            .map(|op| op.key.clone())
            .collect();
        for key in written {
            if self.voters(&key).is_empty() {
                continue;
            }
            let replicas = last.replicas(key_slot(key.as_bytes()));
            let holders = self.holders(&key);
            let held = (replicas.nodes().iter())
                .filter(|n| holders.contains(&NodeId(n.0)))
                .count();
            if 2 * held <= replicas.nodes().len() {
                self.report.failures.push(format!(
                    "{} is stored on {holders:?}, not on a majority of its replicas {:?} at \
                     epoch {}",
                    String::from_utf8_lossy(key.as_bytes()),
                    replicas.nodes(),
                    last.epoch().0
                ));
            }
        }
    }
}
