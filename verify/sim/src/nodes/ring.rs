//! Whole nodes on a ring (docs/ring.md §1, §3): N nodes, each key on the R replicas of its
//! slot, every node serving every key by forwarding the commands on keys it does not hold.
//!
//! What is the node's own code, and what is modelled:
//! * **Placement.** Each node's configuration (`NodeConfig` with its peer list and
//!   `replication`) goes through the node's [`logless_node::ring::placement`], and its shards'
//!   engines get what that returns, as a node's do at start.
//! * **Routing.** Where a client's command runs is decided by the node's own
//!   [`Forwarder::route`] over the step the client's Redis session made of it: here, at a
//!   replica chosen below, or refused (`CROSSSLOT`, a transaction on keys held elsewhere).
//! * **The link** is modelled, after `node/src/forward.rs`: the node's link is a tokio TCP
//!   connection to the replica's client port, which cannot run on the simulated network and
//!   clock. The model keeps forward.rs's rules: the first replica the forwarding node can
//!   reach (up, not cut off from it) that it did not pass over lately, else the first; a
//!   replica no link opens to (down or cut off) passed over for [`PASSED_OVER_US`] and the
//!   command sent to the next (not written: `TRYAGAIN` once every replica was tried); a
//!   command written on a link that then breaks (the replica crashed or restarted, the link
//!   was cut, or it reset after delivering the request, [`NodeFaults::link_reset`]) answered
//!   `UNCERTAIN`, never sent again. The request reaches the replica after a network delay and
//!   is submitted to the shard of its key there; the reply comes back after another.
//!   (The replica's own session is not run on the request again: it would parse what the
//!   client's session already parsed.)
use std::collections::BTreeMap;

use logless_commands::command::Command;
use logless_node::config::{NodeConfig, PeerConfig};
use logless_node::forward::{Forwarder, Route};
use logless_node::ring_register::{InstallReport, RingStage};
use logless_node::turn::CommandResult;
use logless_placement::{Configuration, ReplicaSet};
use logless_redis::session::Step;
use logless_redis::table::ReplyShape;
use logless_rmw::ids::{Key, NodeId};
use logless_rmw::placement::{Placement, StageId};

use rand::Rng;

use super::config::NodeFaults;
use super::ring_change::{Coordinator, RingChanges};
use super::{AnswerTo, Event, NodeCluster, CLIENT_DELAY_US};

/// How long a node no link could be opened to is passed over (µs). `forward.rs` passes one
/// over for a second, about as long as a restarting node is down; here nodes stay down for
/// tens of ms ([`NodeFaults::down_us`]) and partitions change as often, so the time is scaled
/// down with them.
pub const PASSED_OVER_US: u64 = 20_000;

/// Deliberate bugs of a ring run (harness tests only).
#[derive(Clone, Copy, Debug, Default)]
pub struct RingBugs {
    /// The forwarder sends a command written on a link that broke to the next replica, as if
    /// it had never been written, instead of answering `UNCERTAIN`: a command the first
    /// replica applied may be applied twice.
    pub resend_after_break: bool,
    /// Node 1 derives its ring from a peer list without the last node: it disagrees with the
    /// others on which nodes hold a key (what the ring's digest in the peer hello refuses on
    /// real nodes).
    pub node_1_misses_a_peer: bool,
    /// The coordinator of a membership change swaps `Stable(e)` for `Stable(e+1)` directly,
    /// without the joint stage and its sync: the old and the new acceptor sets may both
    /// decide, and values held by the old replicas only are lost.
    pub skip_joint_stage: bool,
}

/// The configuration node `node` of `nodes` starts with: `base` with its id, every node as a
/// peer (addresses are never dialled here) and, with the bug, node 1's list short of a peer.
pub fn node_config(base: &NodeConfig, nodes: u16, node: NodeId, bugs: RingBugs) -> NodeConfig {
    let listed = if bugs.node_1_misses_a_peer && node == NodeId(1) && nodes > 1 {
        nodes - 1
    } else {
        nodes
    };
    NodeConfig {
        node_id: node.0,
        peers: (1..=listed)
            .map(|id| PeerConfig {
                id,
                addr: format!("127.0.0.1:{}", 17_000 + id),
                client_addr: Some(format!("127.0.0.1:{}", 16_000 + id)),
            })
            .collect(),
        ..base.clone()
    }
}

/// The ring's side of the simulated cluster: each node's forwarder (its ring and routing) and
/// the forwarded commands on their way.
pub(super) struct SimRing {
    /// The ring's stage register: at first the ring every node that lists every peer derives
    /// (`ring_change.rs` models the register and its changes).
    pub register: RingStage,
    /// The ring the nodes derive from the peer list (of a node that lists every peer).
    derived: Configuration,
    /// The stage each node installed last, while the ring's membership changes.
    pub installed: BTreeMap<NodeId, RingStage>,
    /// What each node reported installing last (`ring/installed/<id>` on a node): the stage
    /// and the registers its shards held then of slots it does not replicate at it.
    pub reported: BTreeMap<NodeId, InstallReport>,
    /// The coordinator of the membership changes, if the ring has any.
    pub coordinator: Option<Coordinator>,
    /// How often (mean, µs) each node reads the stage register since its last start.
    pub read_every_us: BTreeMap<NodeId, u64>,
    /// Every node, sorted: the acceptors placements index into.
    acceptors: Vec<NodeId>,
    /// The placement of each stage installed so far.
    stage_placements: BTreeMap<StageId, Placement>,
    /// Each node's placement, as the node derives it.
    pub placements: BTreeMap<NodeId, Placement>,
    forwarders: BTreeMap<NodeId, Forwarder>,
    /// Until when (µs) a node passes over another it could open no link to.
    pub passed_over: BTreeMap<(NodeId, NodeId), u64>,
    /// Forwarded commands without their answer yet, by client and command number.
    pub pending: BTreeMap<(u32, u64), Forwarding>,
    pub bugs: RingBugs,
    /// The highest round number each node's shard acknowledged, taken when it installed a
    /// joint stage (the node's `ring/high/<id>` report, written by its mover), with the stage.
    pub highs: BTreeMap<(NodeId, u16), (StageId, u64)>,
    /// Shards holding back the slots a joint stage gives their node until their round floor is
    /// raised: the stage, the node's incarnation, and whether the raise was sent.
    pub awaiting: BTreeMap<(NodeId, u16), (StageId, u32, bool)>,
    /// Shards whose floor for the slots a joint stage gives their node is raised and durable.
    pub raised: std::collections::BTreeSet<(NodeId, u16, StageId)>,
}

/// A forwarded command on its way.
pub(super) struct Forwarding {
    /// The node the client sent it to, and its incarnation then.
    pub via: (NodeId, u32),
    /// Its operation in the history.
    pub index: usize,
    pub key: Key,
    pub command: Command,
    /// The key's replicas, first first.
    pub replicas: Vec<NodeId>,
    /// Replicas it was sent to.
    pub attempts: usize,
    /// The replica (and its incarnation) of the link it was written to, once written.
    pub written_to: Option<(NodeId, u32)>,
}

impl SimRing {
    /// The ring of `nodes` nodes configured as `base` (with `base.replication` below `nodes`),
    /// or `None` if they do not form one.
    ///
    /// # Panics
    /// If a node would refuse its configuration: the simulation runs only rings a node runs.
    pub fn new(
        base: &NodeConfig,
        nodes: u16,
        bugs: RingBugs,
        changes: RingChanges,
    ) -> Option<SimRing> {
        let mut placements = BTreeMap::new();
        let mut forwarders = BTreeMap::new();
        for node in (1..=nodes).map(NodeId) {
            let config = node_config(base, nodes, node, bugs);
            if !config.is_ring() {
                return None;
            }
            if let Err(e) = config.validate() {
                panic!("node {} refuses its ring configuration: {e}", node.0);
            }
            let placement = logless_node::ring::placement(&config)
                .and_then(|p| Ok((p, Forwarder::of(&config)?)))
                .unwrap_or_else(|e| panic!("node {}: {e}", node.0));
            if let (Some(placement), Some(forwarder)) = placement {
                placements.insert(node, placement);
                forwarders.insert(node, forwarder);
            }
        }
        let derived = Configuration::clone(&forwarders[&NodeId(nodes)].ring());
        Some(SimRing {
            register: RingStage::Stable(derived.clone()),
            derived,
            installed: BTreeMap::new(),
            reported: BTreeMap::new(),
            coordinator: changes.any().then(|| Coordinator::new(changes)),
            read_every_us: BTreeMap::new(),
            acceptors: (1..=nodes).map(NodeId).collect(),
            stage_placements: BTreeMap::new(),
            placements,
            forwarders,
            passed_over: BTreeMap::new(),
            pending: BTreeMap::new(),
            bugs,
            highs: BTreeMap::new(),
            awaiting: BTreeMap::new(),
            raised: std::collections::BTreeSet::new(),
        })
    }

    /// Where `node` runs a client's command on `key` (`name` the request's first word),
    /// decided by the node's own routing.
    pub fn route(
        &self,
        node: NodeId,
        name: &[u8],
        key: &Key,
        command: &Command,
        shape: ReplyShape,
    ) -> Route {
        let step = Step::One {
            key: bytes::Bytes::copy_from_slice(key.as_bytes()),
            command: command.clone(),
            shape,
        };
        self.forwarders[&node].route(name, &step)
    }

    /// Whether `node` holds `key` by the configuration the ring is at or moving to.
    pub fn holds(&self, node: NodeId, key: &Key) -> bool {
        let slot = logless_placement::key_slot(key.as_bytes());
        (self.register.target().replicas(slot)).contains(logless_placement::NodeId(node.0))
    }

    /// The peer list's node ids.
    pub fn peers(&self) -> Vec<u16> {
        self.acceptors.iter().map(|n| n.0).collect()
    }

    /// The stage a node starts with: the configuration its peer list derives.
    pub fn derived_stage(&self) -> RingStage {
        RingStage::Stable(self.derived.clone())
    }

    /// The engine's placement of `stage`, as the node computes it from the register's value.
    ///
    /// # Panics
    /// If the stage names a node outside the peer list (the coordinator never writes one).
    pub fn placement_of(&mut self, stage: &RingStage) -> Placement {
        let id = StageId::of(stage.stage());
        if let Some(placement) = self.stage_placements.get(&id) {
            return placement.clone();
        }
        let placement = stage
            .placement(&self.acceptors)
            .expect("a stage of the peers");
        self.stage_placements.insert(id, placement.clone());
        placement
    }

    /// `node`'s forwarder routes by `stage` from now on.
    pub fn set_route(&self, node: NodeId, stage: &RingStage) {
        self.forwarders[&node].set_stage(stage);
    }
}

/// What a forwarding node answers a client whose command it could not forward, or whose link
/// broke after writing it, in the engine's terms the session renders: `TRYAGAIN` (not applied)
/// or `UNCERTAIN`.
fn forwarder_answer(written: bool) -> CommandResult {
    Err(if written {
        logless_rmw::proposer::ProposeError::OutcomeUnknown
    } else {
        logless_rmw::proposer::ProposeError::NotApplied
    })
}

/// Whether a link that delivered a forwarded request resets before its reply.
fn link_resets(faults: &NodeFaults, rng: &mut impl Rng) -> bool {
    faults.link_reset > 0.0 && rng.random_bool(faults.link_reset)
}

impl NodeCluster {
    pub(super) fn ring_mut(&mut self) -> &mut SimRing {
        self.ring.as_mut().expect("a ring")
    }

    /// Whether `a` can open a link to `b`'s client port: `b` is up, serves clients, and no
    /// partition cuts them apart.
    fn reachable(&self, a: NodeId, b: NodeId) -> bool {
        self.nodes[&b].ready && self.linked(a, b) && self.linked(b, a)
    }

    /// Whether what `a` sends reaches `b`: `b` is up and no partition cuts `a` off from it.
    pub(super) fn linked(&self, a: NodeId, b: NodeId) -> bool {
        self.nodes[&b].up && !self.cut.contains(&(a, b))
    }

    /// Records that `node` will forward the client's command `seq` to one of `replicas`.
    pub(super) fn forwarding(
        &mut self,
        client: u32,
        seq: u64,
        (node, index): (NodeId, usize),
        key: Key,
        command: Command,
        replicas: &ReplicaSet,
    ) {
        let via = (node, self.nodes[&node].incarnation);
        let replicas = replicas.nodes().iter().map(|n| NodeId(n.0)).collect();
        let forwarding = Forwarding {
            via,
            index,
            key,
            command,
            replicas,
            attempts: 0,
            written_to: None,
        };
        self.ring_mut().pending.insert((client, seq), forwarding);
        self.report.forwarded += 1;
    }

    /// The forwarding node sends the command to the first replica it can reach and did not
    /// pass over lately (else the first it did not pass over), passing over those it cannot
    /// open a link to; `TRYAGAIN` once every replica was tried.
    pub(super) fn forward(&mut self, client: u32, seq: u64) {
        let now_us = self.events.now_us();
        let Some(p) = self.ring_mut().pending.get(&(client, seq)) else {
            return;
        };
        let (via, incarnation) = p.via;
        if !self.nodes[&via].up || self.nodes[&via].incarnation != incarnation {
            // The client's connection went with the node.
            self.ring_mut().pending.remove(&(client, seq));
            return;
        }
        loop {
            let ring = self.ring.as_ref().expect("a ring");
            let p = &ring.pending[&(client, seq)];
            let candidates: Vec<NodeId> = (p.replicas.iter().copied())
                .filter(|&n| ring.passed_over.get(&(via, n)).is_none_or(|&t| t <= now_us))
                .collect();
            let target = (candidates.iter().copied())
                .find(|&n| self.reachable(via, n))
                .or(candidates.first().copied())
                .filter(|_| p.attempts < p.replicas.len());
            let Some(target) = target else {
                self.ring_mut().pending.remove(&(client, seq));
                self.report.forwarded_unreachable += 1;
                let (to, result) = (AnswerTo { client, seq }, forwarder_answer(false));
                self.events
                    .schedule(CLIENT_DELAY_US, Event::Answer { to, result });
                return;
            };
            let reachable = self.reachable(via, target);
            let target_incarnation = self.nodes[&target].incarnation;
            let ring = self.ring_mut();
            let p = ring.pending.get_mut(&(client, seq)).expect("pending");
            p.attempts += 1;
            if !reachable {
                ring.passed_over
                    .insert((via, target), now_us + PASSED_OVER_US);
                continue;
            }
            p.written_to = Some((target, target_incarnation));
            let (lo, hi) = self.config.faults.delay_us;
            let delay = self.rng.random_range(lo..=hi);
            self.events
                .schedule(delay, Event::ForwardArrive { client, seq });
            return;
        }
    }

    /// The forwarded command reaches its replica, over a link that still stands, and goes to
    /// the shard of its key there; the link may reset after delivering it.
    pub(super) fn forward_arrive(&mut self, client: u32, seq: u64) {
        let Some(p) = self.ring_mut().pending.get(&(client, seq)) else {
            return;
        };
        let (via, (target, incarnation)) = (p.via.0, p.written_to.expect("written"));
        let (key, command, index) = (p.key.clone(), p.command.clone(), p.index);
        let standing =
            self.nodes[&target].incarnation == incarnation && self.reachable(via, target);
        if !standing {
            self.events
                .schedule(0, Event::ForwardBroken { client, seq });
            return;
        }
        // Delivered even if the client gave up waiting: the replica runs what it receives.
        self.arrive(target, index, key, command, AnswerTo { client, seq });
        if self.faults_active && link_resets(&self.config.faults, &mut self.rng) {
            let after = self
                .rng
                .random_range(0..=2 * self.config.flush_us + CLIENT_DELAY_US);
            self.events
                .schedule(after, Event::ForwardBroken { client, seq });
        }
    }

    /// Whether `node`'s answer to the client's command `seq` is a forwarded command's (the
    /// client is connected to another node): it goes back over the link it came on, and
    /// nowhere if that link broke.
    pub(super) fn forwarded_answer(&self, node: NodeId, client: u32) -> bool {
        self.ring.is_some()
            && (self.clients.get(&client))
                .and_then(|c| c.in_flight)
                .is_some_and(|(_, _, connected)| connected != node)
    }

    /// Whether the forwarded command `seq` of `client` waits for `node`'s answer on a link
    /// that stands.
    pub(super) fn forwarded_here(&self, node: NodeId, client: u32, seq: u64) -> bool {
        (self.ring.as_ref())
            .and_then(|ring| ring.pending.get(&(client, seq)))
            .is_some_and(|p| p.written_to.is_some_and(|(target, _)| target == node))
    }

    /// Sends a replica's answer to a forwarded command back over its link.
    pub(super) fn reply_to_forwarder(&mut self, client: u32, seq: u64, result: CommandResult) {
        let (lo, hi) = self.config.faults.delay_us;
        let delay = self.rng.random_range(lo..=hi);
        self.events.schedule(
            delay,
            Event::ForwardReply {
                client,
                seq,
                result,
            },
        );
    }

    /// The replica's reply reaches the forwarding node, which hands it to the client as it
    /// came, unless the link broke on the way.
    pub(super) fn forward_reply(&mut self, client: u32, seq: u64, result: CommandResult) {
        let Some(p) = self.ring_mut().pending.get(&(client, seq)) else {
            return;
        };
        let (via, (target, incarnation)) = (p.via.0, p.written_to.expect("written"));
        let standing =
            self.nodes[&target].incarnation == incarnation && self.reachable(target, via);
        if !standing {
            self.events
                .schedule(0, Event::ForwardBroken { client, seq });
            return;
        }
        self.ring_mut().pending.remove(&(client, seq));
        let to = AnswerTo { client, seq };
        self.events
            .schedule(CLIENT_DELAY_US, Event::Answer { to, result });
    }

    /// The link a forwarded command was written to broke before its reply: `UNCERTAIN` (with
    /// the deliberate bug, the command goes to the next replica as if never written).
    pub(super) fn forward_broken(&mut self, client: u32, seq: u64) {
        let ring = self.ring_mut();
        if !ring.pending.contains_key(&(client, seq)) {
            return;
        }
        if ring.bugs.resend_after_break {
            let p = ring.pending.get_mut(&(client, seq)).expect("pending");
            let (target, _) = p.written_to.take().expect("written");
            // The broken link's replica goes to the back of the list.
            p.replicas.retain(|&n| n != target);
            p.replicas.push(target);
            self.forward(client, seq);
            return;
        }
        ring.pending.remove(&(client, seq));
        self.report.forwarded_uncertain += 1;
        let (to, result) = (AnswerTo { client, seq }, forwarder_answer(true));
        self.events
            .schedule(CLIENT_DELAY_US, Event::Answer { to, result });
    }

    /// A crash of `node` resets every link to it: the forwarded commands written to it break.
    /// (Those it was forwarding went with its clients' connections.)
    pub(super) fn forwarding_node_crashed(&mut self, node: NodeId) {
        let Some(ring) = self.ring.as_mut() else {
            return;
        };
        ring.pending.retain(|_, p| p.via.0 != node);
        let broken: Vec<(u32, u64)> = (ring.pending.iter())
            .filter(|(_, p)| p.written_to.is_some_and(|(target, _)| target == node))
            .map(|(&id, _)| id)
            .collect();
        for (client, seq) in broken {
            self.events
                .schedule(0, Event::ForwardBroken { client, seq });
        }
    }
}
