//! The coordinator of a ring change (`logless cluster add|remove|replace`; docs/ring.md §4):
//! any node runs it, asked over its HTTP port ([`crate::http`]).
//!
//! From `Stable(e)` it computes the configuration of epoch `e + 1`
//! (`logless_placement::Configuration::with_node_added` and its kin), swaps `Stable(e)` for
//! `Joint(e+1)` in the stage register, waits until every node of either configuration reports
//! having installed it ([`crate::ring_watch`]), waits until every node of the new
//! configuration reports its data mover done ([`crate::ring_mover`]), swaps `Joint(e+1)` for
//! `Stable(e+1)` and waits for every node of the new configuration again. A change asked for
//! while the ring is already in the joint stage of that very change resumes it (a coordinator
//! that stopped half-way leaves the ring serving in `Joint`, which is safe, and the same
//! command finishes it); any other is refused. Nodes this node sees down are not waited for,
//! as long as every slot the change moves keeps a majority of its old and of its new replicas
//! up, and its mover up (`can_run_without`): so a dead node can be replaced or removed.
//!
//! # Syncing the moving slots
//!
//! `await_synced` waits for every node of the new configuration to report its mover done:
//! each moving slot is synced by one of its new replicas, which writes every key of the slot
//! through to a majority of the new replicas (docs/ring.md §4 step 3). A move longer than the
//! coordinator waits (`SYNC_POLLS`) stops the change with the ring in `Joint(e+1)`, serving;
//! the same command resumes the wait.
//!
//! # Nodes that gain slots hold nothing of them
//!
//! Every node a change makes a replica of a slot it does not replicate now (the node added or
//! replacing another, and the nodes whose preference walk moved onto a slot) must hold no
//! register of that slot: it holds some only from an earlier time it replicated the slot, and
//! a vote of a register that later changes were made without (one nobody else held, or a
//! deleted one, is not written through, so the rounds of its later values may start low
//! again) may outrank the register's later values once the node counts in its quorums again,
//! bringing back an overwritten value or a value never chosen. Nodes drop the states of slots
//! they no longer replicate in the background ([`crate::turn`], `ShardCore::drop_if_due`) and
//! report how many are left (`InstallReport::registers_elsewhere`); before it writes the joint
//! stage, the coordinator waits until each node gaining slots reported the ring's current
//! stage with none left ([`await_nothing_elsewhere`]), and otherwise stops with
//! [`ChangeError::HoldsRegisters`] or [`ChangeError::NotReported`]. So a removed node can be
//! added back once it has dropped its copy. (The check is of every slot the node does not
//! replicate, not only of those it gains: stricter, and one count per report.)
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use logless_placement::{Configuration, NodeId, PlacementError, Stage};
use serde::{Deserialize, Serialize};

use crate::context::NodeContext;
use crate::ring_register::{stage_name, InstallReport, RingStage};

/// How long the coordinator waits between two reads of the nodes' reports.
const REPORT_POLL: Duration = Duration::from_millis(200);

/// How many times it reads them before giving up on a node installing a stage (about 30 s,
/// some sixty of the nodes' reads of the stage register).
const REPORT_POLLS: usize = 150;

/// How many times it reads them before giving up on the movers in one run (about 60 s: a
/// change is asked over HTTP, whose answer may take 120 s in all).
pub(crate) const SYNC_POLLS: usize = 300;

/// A change of the ring's membership.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ChangeRequest {
    /// A node joins: it takes a share of the segments.
    Add(u16),
    /// A node leaves: its segments go to the others.
    Remove(u16),
    /// A node takes exactly the segments of another (a dead machine's, say).
    Replace {
        /// The node leaving.
        old: u16,
        /// The node taking its place.
        new: u16,
    },
}

impl ChangeRequest {
    /// The configuration after this change of `config`, on a ring whose nodes may be any of
    /// `peers` (the peer list, which every node of a configuration must be in).
    pub fn apply(
        &self,
        config: &Configuration,
        peers: &[u16],
    ) -> Result<Configuration, ChangeError> {
        let known = |node: u16| {
            if peers.contains(&node) {
                Ok(NodeId(node))
            } else {
                Err(ChangeError::UnknownNode(node))
            }
        };
        let member = |node: u16| {
            if config.contains(NodeId(node)) {
                Ok(NodeId(node))
            } else {
                Err(ChangeError::NotMember(node))
            }
        };
        let outsider = |node: u16| {
            if config.contains(NodeId(node)) {
                Err(ChangeError::AlreadyMember(node))
            } else {
                known(node)
            }
        };
        let placed = match *self {
            ChangeRequest::Add(node) => config.with_node_added(outsider(node)?),
            ChangeRequest::Remove(node) => config.with_node_removed(member(node)?),
            ChangeRequest::Replace { old, new } => {
                config.with_node_replaced(member(old)?, outsider(new)?)
            }
        };
        placed.map_err(|e| match e {
            PlacementError::TooFewNodes { replication, nodes } => {
                ChangeError::TooFewNodes { replication, nodes }
            }
            other => ChangeError::Placement(other.to_string()),
        })
    }
}

/// Why a change was refused or did not finish.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ChangeError {
    /// Another change is under way or came first.
    #[error("another change of the ring came first: {0}; see `logless cluster status`")]
    Concurrent(String),
    /// The node is not in the peer list.
    #[error(
        "node {0} is not in the peer list: every node of the ring must be started with a peer \
         list that names it (docs/ring.md §4 \"Operating\")"
    )]
    UnknownNode(u16),
    /// The node to remove or replace is not in the configuration.
    #[error("node {0} is not a node of the ring's configuration")]
    NotMember(u16),
    /// The node to add is in the configuration already.
    #[error("node {0} is a node of the ring's configuration already")]
    AlreadyMember(u16),
    /// Fewer nodes than replicas would be left.
    #[error(
        "the ring would have {nodes} nodes, fewer than its replication degree R = {replication}"
    )]
    TooFewNodes {
        /// R.
        replication: u8,
        /// The nodes left.
        nodes: usize,
    },
    /// Another reason the placement gives.
    #[error("{0}")]
    Placement(String),
    /// Nodes of the change that this node has no live link to, without which it cannot run.
    #[error(
        "nodes {0:?} of the change are down or unreachable from this node, and the change needs \
         them: every slot it moves needs a majority of its old and of its new replicas up, and \
         up the new replica that moves its data (so a dead node can be replaced or removed, but \
         only while the others are up)"
    )]
    NodesDown(Vec<u16>),
    /// Nodes that did not report a stage in time.
    #[error(
        "nodes {nodes:?} did not report installing {} in time; the ring stays in {}: run the \
         same change again to resume it",
        stage_name(*.stage),
        stage_name(*.stage)
    )]
    NotInstalled {
        /// The stage waited for.
        stage: Stage,
        /// The nodes that did not report it.
        nodes: Vec<u16>,
    },
    /// Nodes whose data movers did not finish in time.
    #[error(
        "nodes {nodes:?} are still moving the data of the moving slots ({keys} keys found so \
         far); the ring stays in {}, serving every key with joint quorums: run the same change \
         again to wait for them (`logless cluster status` shows each node's progress)",
        stage_name(*.stage)
    )]
    NotSynced {
        /// The joint stage the ring stays in.
        stage: Stage,
        /// The nodes that did not report their moving slots synced.
        nodes: Vec<u16>,
        /// Keys their movers found, summed over their reports.
        keys: u64,
    },
    /// A node the change gives slots still holds registers of slots it does not replicate.
    #[error(
        "node {node} still holds {registers} registers of slots it does not replicate (left in \
         an earlier change and being dropped in the background): the change would make it a \
         replica of some of them again, and its old votes could outrank the values given since \
         and bring back an older one; try again once `logless status` shows it has none to \
         drop (docs/ring.md §4 \"Slots a node left\")"
    )]
    HoldsRegisters {
        /// The node gaining slots.
        node: u16,
        /// The registers its copy holds of slots it does not replicate.
        registers: u64,
    },
    /// A node the change gives slots has not reported the ring's current stage.
    #[error(
        "node {0} has not reported the ring's current stage (it reports once it has read the \
         stage register; a node down reports when it starts again): try again in a moment"
    )]
    NotReported(u16),
    /// This node cannot coordinate.
    #[error("{0}")]
    Refused(String),
    /// The ring's registers failed.
    #[error("the ring's stage register: {0}")]
    Register(String),
}

impl From<String> for ChangeError {
    fn from(e: String) -> ChangeError {
        ChangeError::Register(e)
    }
}

/// A finished change.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Changed {
    /// The configuration before.
    pub from: Configuration,
    /// The configuration now stable.
    pub to: Configuration,
    /// The slots whose replicas changed.
    pub moved_slots: usize,
}

/// What the coordinator needs of the ring.
pub(crate) trait RingOps {
    /// The stage the register holds.
    async fn stage(&self) -> Result<RingStage, String>;
    /// Swaps stage `from` for `to` in the register; whether it did.
    async fn swap(&self, from: &RingStage, to: &RingStage) -> Result<bool, String>;
    /// What `node` reported installing last.
    async fn report(&self, node: u16) -> Result<Option<InstallReport>, String>;
    /// The peer list.
    fn peers(&self) -> Vec<u16>;
    /// The nodes this node reaches, itself included.
    fn up(&self) -> BTreeSet<u16>;
    /// Waits a little before reading the reports again.
    async fn pause(&self);
}

/// Runs `request` against the ring `ops` reaches, reading reports up to `polls` times per stage
/// and `sync_polls` times while the movers move.
pub(crate) async fn change<O: RingOps>(
    ops: &O,
    request: ChangeRequest,
    polls: usize,
    sync_polls: usize,
) -> Result<Changed, ChangeError> {
    let current = ops.stage().await?;
    let peers = ops.peers();
    let (old, new) = match &current {
        RingStage::Stable(config) => (config.clone(), request.apply(config, &peers)?),
        RingStage::Joint { old, new } => {
            if request.apply(old, &peers).as_ref() != Ok(new) {
                return Err(ChangeError::Concurrent(format!(
                    "the ring is moving to epoch {} by another change",
                    new.epoch().0
                )));
            }
            (old.clone(), new.clone())
        }
    };
    let joint = RingStage::Joint {
        old: old.clone(),
        new: new.clone(),
    };
    let up = ops.up();
    let down: Vec<u16> = joint
        .nodes()
        .into_iter()
        .filter(|n| !up.contains(n))
        .collect();
    if !can_run_without(&old, &new, &down) {
        return Err(ChangeError::NodesDown(down));
    }
    if matches!(current, RingStage::Stable(_)) {
        await_nothing_elsewhere(ops, current.stage(), &gaining_nodes(&old, &new), polls).await?;
    }
    if matches!(current, RingStage::Stable(_)) && !ops.swap(&current, &joint).await? {
        return Err(ChangeError::Concurrent(format!(
            "the stage register no longer holds {}",
            stage_name(current.stage())
        )));
    }
    await_installed(ops, &joint, &down, polls).await?;
    await_synced(ops, &joint, &down, sync_polls).await?;
    let stable = RingStage::Stable(new.clone());
    if !ops.swap(&joint, &stable).await? {
        return Err(ChangeError::Concurrent(format!(
            "the stage register no longer holds {}",
            stage_name(joint.stage())
        )));
    }
    await_installed(ops, &stable, &down, polls).await?;
    Ok(Changed {
        moved_slots: joint.moving_slots().len(),
        from: old,
        to: new,
    })
}

/// The nodes a change from `old` to `new` makes replicas of slots they do not replicate in
/// `old`: the node added (or replacing another), and nodes the preference walk moved onto a
/// slot (docs/ring.md §1). The whole-node simulation's coordinator asks the same nodes.
pub fn gaining_nodes(old: &Configuration, new: &Configuration) -> BTreeSet<u16> {
    logless_placement::Slot::all()
        .flat_map(|slot| {
            let before = old.replicas(slot);
            new.replicas(slot)
                .without(&before)
                .map(|n| n.0)
                .collect::<Vec<_>>()
        })
        .collect()
}

/// Waits until each of `nodes` reported the ring's stage `stage` with no register of a slot it
/// does not replicate left (reading the reports up to `polls` times): a node down counts by
/// its last report, since a node takes no state of a slot it does not replicate. The reports
/// of another stage do not count (their counts are of another placement).
pub(crate) async fn await_nothing_elsewhere<O: RingOps>(
    ops: &O,
    stage: Stage,
    nodes: &BTreeSet<u16>,
    polls: usize,
) -> Result<(), ChangeError> {
    let mut left: BTreeMap<u16, Option<InstallReport>> = nodes.iter().map(|&n| (n, None)).collect();
    for poll in 0..polls.max(1) {
        if poll > 0 {
            ops.pause().await;
        }
        let waiting: Vec<u16> = left.keys().copied().collect();
        for node in waiting {
            let report = ops.report(node).await?;
            if holds_nothing_elsewhere(report.as_ref(), stage) {
                left.remove(&node);
            } else {
                left.insert(node, report);
            }
        }
        if left.is_empty() {
            return Ok(());
        }
    }
    let (&node, report) = left.iter().next().expect("some node is left");
    Err(match report {
        Some(r) if r.stage == stage => ChangeError::HoldsRegisters {
            node,
            registers: r.registers_elsewhere,
        },
        _ => ChangeError::NotReported(node),
    })
}

/// Whether a node whose last report is `report` may be given slots by a change from the ring's
/// stage `stage`: it reported `stage` with no register of a slot it does not replicate left.
/// A report of another stage does not count (its count is of another placement); a node down
/// counts by its last report, since it takes no state of a slot it does not replicate. The
/// whole-node simulation's coordinator asks the same of its nodes' reports.
pub fn holds_nothing_elsewhere(report: Option<&InstallReport>, stage: Stage) -> bool {
    report.is_some_and(|r| r.stage == stage && r.registers_elsewhere == 0)
}

/// Whether a change from `old` to `new` can run with the nodes `down` down: for every slot it
/// moves, a majority of the old replicas and of the new ones up (the fence and the joint
/// quorums of the write-throughs need them), and up every new replica not among the old ones:
/// the first moves the slot's data ([`crate::ring_mover::Plan`]), and each raises its round
/// floor above the old replicas' rounds before the change may go on (docs/ring.md §4 "Dead
/// registers"; a node down would start the slot at its old floor when it comes back in the
/// next stable stage). A dead node can so be replaced or removed: its slots keep majorities of
/// both sets, and the node taking its place moves their data.
pub(crate) fn can_run_without(old: &Configuration, new: &Configuration, down: &[u16]) -> bool {
    if down.is_empty() {
        return true;
    }
    let is_up = |n: &NodeId| !down.contains(&n.0);
    let majority_up = |set: &logless_placement::ReplicaSet| {
        set.nodes().iter().filter(|n| is_up(n)).count() * 2 > set.nodes().len()
    };
    logless_placement::Slot::all().all(|slot| {
        let (before, after) = (old.replicas(slot), new.replicas(slot));
        let mut gaining = after.without(&before).peekable();
        gaining.peek().is_none()
            || (gaining.all(|n| is_up(&n)) && majority_up(&before) && majority_up(&after))
    })
}

/// Waits until every node of `stage` but those `down` reports having installed it (or a later
/// stage); their reports. (A node down installs the ring's stage when it starts again, before
/// it serves.)
pub(crate) async fn await_installed<O: RingOps>(
    ops: &O,
    stage: &RingStage,
    down: &[u16],
    polls: usize,
) -> Result<BTreeMap<u16, InstallReport>, ChangeError> {
    let wanted = stage.stage();
    let mut nodes = stage.nodes();
    nodes.retain(|n| !down.contains(n));
    let mut reports = BTreeMap::new();
    for poll in 0..polls.max(1) {
        if poll > 0 {
            ops.pause().await;
        }
        for &node in &nodes {
            if reports.contains_key(&node) {
                continue;
            }
            if let Some(report) = ops.report(node).await? {
                if report.stage == wanted || report.stage.is_after(wanted) {
                    reports.insert(node, report);
                }
            }
        }
        if reports.len() == nodes.len() {
            return Ok(reports);
        }
    }
    Err(ChangeError::NotInstalled {
        stage: wanted,
        nodes: nodes
            .into_iter()
            .filter(|n| !reports.contains_key(n))
            .collect(),
    })
}

/// Waits until every node of `joint`'s new configuration but those `down` reports its data
/// mover done: every moving slot is synced by one of them ([`crate::ring_mover`]; none of
/// those down moves any, `can_run_without`).
pub(crate) async fn await_synced<O: RingOps>(
    ops: &O,
    joint: &RingStage,
    down: &[u16],
    polls: usize,
) -> Result<(), ChangeError> {
    let wanted = joint.stage();
    let nodes: Vec<u16> = joint
        .target()
        .nodes()
        .map(|n| n.0)
        .filter(|n| !down.contains(n))
        .collect();
    let mut synced = BTreeSet::new();
    let mut keys = BTreeMap::new();
    for poll in 0..polls.max(1) {
        if poll > 0 {
            ops.pause().await;
        }
        for &node in &nodes {
            if synced.contains(&node) {
                continue;
            }
            if let Some(report) = ops.report(node).await? {
                if report.stage.is_after(wanted) || (report.stage == wanted && report.synced) {
                    synced.insert(node);
                } else if report.stage == wanted {
                    keys.insert(node, report.moving_keys);
                }
            }
        }
        if synced.len() == nodes.len() {
            return Ok(());
        }
    }
    let nodes: Vec<u16> = nodes.into_iter().filter(|n| !synced.contains(n)).collect();
    Err(ChangeError::NotSynced {
        stage: wanted,
        keys: nodes.iter().filter_map(|n| keys.get(n)).sum(),
        nodes,
    })
}

/// The coordinator's view of a node's ring.
struct NodeOps<'a>(&'a NodeContext);

impl RingOps for NodeOps<'_> {
    async fn stage(&self) -> Result<RingStage, String> {
        let ring = self.0.ring.as_ref().expect("a ring");
        ring.register
            .stage()
            .await?
            .ok_or_else(|| "the ring's stage register is still empty: the ring is starting".into())
    }

    async fn swap(&self, from: &RingStage, to: &RingStage) -> Result<bool, String> {
        let ring = self.0.ring.as_ref().expect("a ring");
        ring.register.swap_stage(from, to).await
    }

    async fn report(&self, node: u16) -> Result<Option<InstallReport>, String> {
        let ring = self.0.ring.as_ref().expect("a ring");
        ring.register.report(node).await
    }

    fn peers(&self) -> Vec<u16> {
        self.0.config.peers.iter().map(|p| p.id).collect()
    }

    fn up(&self) -> BTreeSet<u16> {
        let mut up = crate::cluster::peers_up(self.0);
        up.insert(self.0.node.0);
        up
    }

    async fn pause(&self) {
        tokio::time::sleep(REPORT_POLL).await;
    }
}

/// Runs `request` with this node as the coordinator.
pub async fn coordinate(
    context: &NodeContext,
    request: ChangeRequest,
) -> Result<Changed, ChangeError> {
    if context.ring.is_none() {
        return Err(ChangeError::Refused(
            "this node is not on a ring (replication below the number of nodes): its \
             membership is fixed"
                .into(),
        ));
    }
    change(&NodeOps(context), request, REPORT_POLLS, SYNC_POLLS).await
}

/// What `logless cluster status` shows: the stage register and every node's report.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct RingChangeStatus {
    /// The stage the register holds (`Stable(e)` or `Joint(e)`).
    pub stage: String,
    /// Its epoch.
    pub epoch: u64,
    /// R.
    pub replication: u8,
    /// The nodes of the configuration it serves with (the old one while joint).
    pub nodes: Vec<u16>,
    /// The nodes of the configuration it moves to, while joint.
    #[serde(default)]
    pub joining: Vec<u16>,
    /// The slots that move, while joint.
    #[serde(default)]
    pub moving_slots: usize,
    /// Every node of the peer list with what it reported installing (`-` for nothing yet) and,
    /// while joint, whether its data mover is done and the keys it found to move.
    pub reports: BTreeMap<u16, String>,
    /// The stage the answering node installed.
    pub installed_here: String,
}

/// The ring's stage and every node's report, read through the ring's registers.
pub async fn status(context: &NodeContext) -> Result<RingChangeStatus, String> {
    let Some(ring) = &context.ring else {
        return Err("this node is not on a ring".into());
    };
    let stage = NodeOps(context).stage().await?;
    let mut reports = BTreeMap::new();
    for peer in &context.config.peers {
        let shown = match ring.register.report(peer.id).await? {
            None => "-".to_string(),
            Some(r) if matches!(r.stage, Stage::Joint(_)) => format!(
                "{} ({}, {} keys found)",
                stage_name(r.stage),
                if r.synced { "synced" } else { "moving" },
                r.moving_keys
            ),
            Some(r) => stage_name(r.stage),
        };
        reports.insert(peer.id, shown);
    }
    let (joining, moving_slots) = match &stage {
        RingStage::Stable(_) => (Vec::new(), 0),
        RingStage::Joint { new, .. } => (
            new.nodes().map(|n| n.0).collect(),
            stage.moving_slots().len(),
        ),
    };
    Ok(RingChangeStatus {
        stage: stage_name(stage.stage()),
        epoch: stage.stage().epoch().0,
        replication: stage.serving().replication().get(),
        nodes: stage.serving().nodes().map(|n| n.0).collect(),
        joining,
        moving_slots,
        reports,
        installed_here: stage_name(ring.installed().stage()),
    })
}

/// Answers an HTTP request for `/cluster…` ([`crate::http`]): its status code, content type and
/// body.
pub async fn answer(
    method: &[u8],
    path: &[u8],
    head: &[u8],
    context: &NodeContext,
) -> (u16, &'static str, String) {
    let text = |code, body: String| (code, "text/plain", body + "\n");
    let path = String::from_utf8_lossy(path);
    let (route, query) = path.split_once('?').unwrap_or((&path, ""));
    if route == "/cluster" && method == b"GET" {
        return match status(context).await {
            Ok(s) => (
                200,
                "application/json",
                serde_json::to_string_pretty(&s).expect("serialisable") + "\n",
            ),
            Err(e) => text(409, e),
        };
    }
    if method != b"POST" {
        return text(
            405,
            "GET /cluster shows the ring's stage; POST /cluster/add?node=ID, \
             /cluster/remove?node=ID or /cluster/replace?old=ID&new=ID changes it"
                .into(),
        );
    }
    // The default user's password, checked as AUTH checks it (in constant time).
    let logged_in = || bearer(head).and_then(|token| context.acl.authenticate(b"default", token));
    if context.acl.requires_auth() && logged_in().is_none() {
        return text(
            401,
            "a ring change needs the node's requirepass: Authorization: Bearer <password>".into(),
        );
    }
    let request = match parse_request(route, query) {
        Ok(request) => request,
        Err(e) => return text(400, e),
    };
    match coordinate(context, request).await {
        Ok(changed) => text(
            200,
            format!(
                "changed: epoch {} {:?} -> epoch {} {:?}, {} slots' replicas changed",
                changed.from.epoch().0,
                changed.from.nodes().map(|n| n.0).collect::<Vec<_>>(),
                changed.to.epoch().0,
                changed.to.nodes().map(|n| n.0).collect::<Vec<_>>(),
                changed.moved_slots
            ),
        ),
        Err(e) => text(409, format!("refused: {e}")),
    }
}

/// The change `route?query` asks for.
fn parse_request(route: &str, query: &str) -> Result<ChangeRequest, String> {
    let param = |name: &str| -> Result<u16, String> {
        let value = query
            .split('&')
            .find_map(|pair| pair.strip_prefix(name)?.strip_prefix('='))
            .ok_or_else(|| format!("{route} needs ?{name}=ID"))?;
        value
            .parse()
            .map_err(|_| format!("{name}={value} is not a node id (1 to 65535)"))
    };
    match route {
        "/cluster/add" => Ok(ChangeRequest::Add(param("node")?)),
        "/cluster/remove" => Ok(ChangeRequest::Remove(param("node")?)),
        "/cluster/replace" => Ok(ChangeRequest::Replace {
            old: param("old")?,
            new: param("new")?,
        }),
        _ => Err(format!(
            "no route {route}: /cluster/add, /cluster/remove or /cluster/replace"
        )),
    }
}

/// The token of an `Authorization: Bearer` header of the request head `head`.
fn bearer(head: &[u8]) -> Option<&[u8]> {
    head.split(|&b| b == b'\n').find_map(|line| {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        let colon = line.iter().position(|&b| b == b':')?;
        let (name, value) = line.split_at(colon);
        if !name.eq_ignore_ascii_case(b"authorization") {
            return None;
        }
        let value = value[1..].trim_ascii();
        let (scheme, token) = value.split_at(value.iter().position(|&b| b == b' ')?);
        scheme
            .eq_ignore_ascii_case(b"bearer")
            .then(|| token.trim_ascii())
    })
}

#[cfg(test)]
mod tests {
    use std::cell::RefCell;

    use logless_placement::{Epoch, Replication};

    use super::*;

    fn ring(nodes: u16) -> Configuration {
        let nodes: Vec<NodeId> = (1..=nodes).map(NodeId).collect();
        Configuration::balanced(&nodes, Replication::THREE).unwrap()
    }

    /// A ring in memory: the register, the reports every node writes on installing (nodes
    /// in `silent` never do), and the keys each would count in moving slots.
    struct Fake {
        register: RefCell<RingStage>,
        peers: Vec<u16>,
        down: Vec<u16>,
        silent: Vec<u16>,
        /// Nodes whose movers never finish.
        moving: Vec<u16>,
        /// Registers each node's copy holds of slots it does not replicate; a node in
        /// `dropping` drops one per report read.
        elsewhere: RefCell<BTreeMap<u16, u64>>,
        dropping: Vec<u16>,
        /// Nodes whose report is of the stage before the register's.
        lagging: Vec<u16>,
        /// Nodes whose report stays at the stage the register held first (they never install
        /// the next).
        stuck: Vec<u16>,
        first: Stage,
        /// A change another coordinator makes right before this one's first swap.
        racer: Option<RingStage>,
        swaps: RefCell<Vec<Stage>>,
    }

    impl Fake {
        fn new(config: Configuration, peers: u16) -> Fake {
            let first = Stage::Stable(config.epoch());
            Fake {
                register: RefCell::new(RingStage::Stable(config)),
                peers: (1..=peers).collect(),
                down: Vec::new(),
                silent: Vec::new(),
                moving: Vec::new(),
                elsewhere: RefCell::default(),
                dropping: Vec::new(),
                lagging: Vec::new(),
                stuck: Vec::new(),
                first,
                racer: None,
                swaps: RefCell::default(),
            }
        }
    }

    impl RingOps for Fake {
        async fn stage(&self) -> Result<RingStage, String> {
            Ok(self.register.borrow().clone())
        }

        async fn swap(&self, from: &RingStage, to: &RingStage) -> Result<bool, String> {
            if let Some(racer) = &self.racer {
                *self.register.borrow_mut() = racer.clone();
            }
            let mut register = self.register.borrow_mut();
            if *register != *from {
                return Ok(false);
            }
            *register = to.clone();
            self.swaps.borrow_mut().push(to.stage());
            Ok(true)
        }

        async fn report(&self, node: u16) -> Result<Option<InstallReport>, String> {
            let mut stage = self.register.borrow().stage();
            if self.lagging.contains(&node) {
                stage = Stage::Stable(Epoch(stage.epoch().0 - 1));
            }
            if self.stuck.contains(&node) {
                stage = self.first;
            }
            let moving = matches!(stage, Stage::Joint(_)) && self.moving.contains(&node);
            let mut elsewhere = self.elsewhere.borrow_mut();
            let held = elsewhere.entry(node).or_default();
            let registers_elsewhere = *held;
            if self.dropping.contains(&node) {
                *held = held.saturating_sub(1);
            }
            Ok((!self.silent.contains(&node)).then_some(InstallReport {
                stage,
                moving_keys: if moving { 7 } else { 0 },
                synced: !moving,
                registers_elsewhere,
            }))
        }

        fn peers(&self) -> Vec<u16> {
            self.peers.clone()
        }

        fn up(&self) -> BTreeSet<u16> {
            self.peers
                .iter()
                .copied()
                .filter(|n| !self.down.contains(n))
                .collect()
        }

        async fn pause(&self) {}
    }

    fn run<O: RingOps>(ops: &O, request: ChangeRequest) -> Result<Changed, ChangeError> {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap()
            .block_on(change(ops, request, 3, 3))
    }

    #[test]
    fn a_change_goes_through_the_joint_stage_to_the_next_epoch() {
        let fake = Fake::new(ring(4), 5);
        let changed = run(&fake, ChangeRequest::Remove(4)).unwrap();
        assert_eq!(changed.to.epoch(), Epoch(2));
        assert!(!changed.to.contains(NodeId(4)));
        assert!(changed.moved_slots > 0);
        assert_eq!(
            *fake.swaps.borrow(),
            vec![Stage::Joint(Epoch(2)), Stage::Stable(Epoch(2))]
        );
        let fake = Fake::new(ring(4), 5);
        let changed = run(&fake, ChangeRequest::Add(5)).unwrap();
        assert!(changed.to.contains(NodeId(5)));
        let fake = Fake::new(ring(4), 5);
        let changed = run(&fake, ChangeRequest::Replace { old: 2, new: 5 }).unwrap();
        assert!(changed.to.contains(NodeId(5)) && !changed.to.contains(NodeId(2)));
    }

    #[test]
    fn bad_requests_are_refused_before_anything_is_written() {
        let refused = |fake: &Fake, request| {
            let e = run(fake, request).unwrap_err();
            assert!(fake.swaps.borrow().is_empty(), "{e}");
            e
        };
        let fake = Fake::new(ring(4), 5);
        assert_eq!(
            refused(&fake, ChangeRequest::Add(9)),
            ChangeError::UnknownNode(9)
        );
        assert_eq!(
            refused(&fake, ChangeRequest::Add(3)),
            ChangeError::AlreadyMember(3)
        );
        assert_eq!(
            refused(&fake, ChangeRequest::Remove(5)),
            ChangeError::NotMember(5)
        );
        assert_eq!(
            refused(&fake, ChangeRequest::Replace { old: 1, new: 2 }),
            ChangeError::AlreadyMember(2)
        );
        let three = Fake::new(ring(3), 3);
        let e = refused(&three, ChangeRequest::Remove(1));
        assert_eq!(
            e,
            ChangeError::TooFewNodes {
                replication: 3,
                nodes: 2
            }
        );
        assert!(e.to_string().contains("fewer than its replication degree"));
        // The node to add down; two of four down (slots without a majority).
        let mut down = Fake::new(ring(4), 5);
        down.down = vec![5];
        assert_eq!(
            refused(&down, ChangeRequest::Add(5)),
            ChangeError::NodesDown(vec![5])
        );
        let mut down = Fake::new(ring(4), 5);
        down.down = vec![1, 2];
        assert_eq!(
            refused(&down, ChangeRequest::Remove(4)),
            ChangeError::NodesDown(vec![1, 2])
        );
        // A node outside both configurations may be down.
        let mut outside = Fake::new(ring(4), 6);
        outside.down = vec![6];
        run(&outside, ChangeRequest::Add(5)).unwrap();
    }

    #[test]
    fn a_dead_node_is_replaced_or_removed_with_majorities_of_the_others() {
        // The dead node never reports; the change waits for the others only.
        for request in [
            ChangeRequest::Replace { old: 2, new: 5 },
            ChangeRequest::Remove(2),
        ] {
            let mut fake = Fake::new(ring(4), 5);
            fake.down = vec![2];
            fake.silent = vec![2];
            let changed = run(&fake, request).unwrap();
            assert!(!changed.to.contains(NodeId(2)));
        }
        // A node down that stays a member and gains slots: refused before anything is
        // written, since it must raise its round floor for them (docs/ring.md §4 "Dead
        // registers").
        let old = ring(4);
        let added = ChangeRequest::Add(5).apply(&old, &[1, 2, 3, 4, 5]).unwrap();
        assert!(gaining_nodes(&old, &added).contains(&3));
        let mut fake = Fake::new(old.clone(), 5);
        fake.down = vec![3];
        assert_eq!(
            run(&fake, ChangeRequest::Add(5)),
            Err(ChangeError::NodesDown(vec![3]))
        );
        assert!(fake.swaps.borrow().is_empty());
        // Up but without a report of the ring's stage saying it holds nothing of slots it
        // does not replicate: refused before anything is written.
        let mut fake = Fake::new(old, 5);
        fake.silent = vec![3];
        assert_eq!(
            run(&fake, ChangeRequest::Add(5)),
            Err(ChangeError::NotReported(3))
        );
        assert!(fake.swaps.borrow().is_empty());
        // A node that comes up again after the check but never installs still stops it.
        let mut fake = Fake::new(ring(4), 5);
        fake.stuck = vec![3];
        assert!(matches!(
            run(&fake, ChangeRequest::Replace { old: 2, new: 5 }),
            Err(ChangeError::NotInstalled { .. })
        ));
    }

    #[test]
    fn liveness_asks_majorities_of_every_moving_slot_and_its_mover() {
        let old = ring(5);
        let replaced = old.with_node_replaced(NodeId(3), NodeId(6)).unwrap();
        assert!(can_run_without(&old, &replaced, &[]));
        assert!(can_run_without(&old, &replaced, &[3]));
        assert!(!can_run_without(&old, &replaced, &[6]), "the mover");
        // Two of five down: some moving slot has both among its three old replicas.
        assert!(!can_run_without(&old, &replaced, &[3, 1]));
        // A node of neither configuration's moving slots may be down: nothing moves.
        assert!(can_run_without(&old, &old, &[1, 2, 3]));
        // Adding a fifth node to four, the walk gives members slots too: each must be up to
        // raise its round floor for them, mover or not.
        let four = ring(4);
        let added = four.with_node_added(NodeId(5)).unwrap();
        let gaining = gaining_nodes(&four, &added);
        assert!(gaining.iter().any(|&n| n != 5), "{gaining:?}");
        for node in gaining {
            assert!(!can_run_without(&four, &added, &[node]), "node {node}");
        }
    }

    #[test]
    fn a_change_that_loses_the_swap_is_refused_as_concurrent() {
        let mut fake = Fake::new(ring(4), 5);
        let other = ring(4).with_node_added(NodeId(5)).unwrap();
        fake.racer = Some(RingStage::Joint {
            old: ring(4),
            new: other,
        });
        let e = run(&fake, ChangeRequest::Remove(4)).unwrap_err();
        assert!(matches!(e, ChangeError::Concurrent(_)), "{e}");
        assert!(e.to_string().contains("came first"), "{e}");
        // And while another change's joint stage is under way, a different change is refused.
        let fake = Fake::new(ring(4), 5);
        *fake.register.borrow_mut() = RingStage::Joint {
            old: ring(4),
            new: ring(4).with_node_added(NodeId(5)).unwrap(),
        };
        let e = run(&fake, ChangeRequest::Remove(4)).unwrap_err();
        assert!(e.to_string().contains("moving to epoch 2"), "{e}");
    }

    #[test]
    fn the_same_change_resumes_a_joint_stage() {
        let fake = Fake::new(ring(4), 5);
        let new = ring(4).with_node_removed(NodeId(4)).unwrap();
        *fake.register.borrow_mut() = RingStage::Joint {
            old: ring(4),
            new: new.clone(),
        };
        let changed = run(&fake, ChangeRequest::Remove(4)).unwrap();
        assert_eq!(changed.to, new);
        assert_eq!(*fake.swaps.borrow(), vec![Stage::Stable(Epoch(2))]);
    }

    #[test]
    fn a_node_that_never_installs_stops_the_change_in_joint() {
        let mut fake = Fake::new(ring(4), 5);
        fake.stuck = vec![3];
        let e = run(&fake, ChangeRequest::Remove(4)).unwrap_err();
        assert_eq!(
            e,
            ChangeError::NotInstalled {
                stage: Stage::Joint(Epoch(2)),
                nodes: vec![3]
            }
        );
        assert_eq!(fake.register.borrow().stage(), Stage::Joint(Epoch(2)));
    }

    #[test]
    fn requests_and_passwords_are_parsed() {
        assert_eq!(
            parse_request("/cluster/add", "node=5"),
            Ok(ChangeRequest::Add(5))
        );
        assert_eq!(
            parse_request("/cluster/replace", "new=6&old=2"),
            Ok(ChangeRequest::Replace { old: 2, new: 6 })
        );
        assert!(parse_request("/cluster/remove", "")
            .unwrap_err()
            .contains("?node=ID"));
        assert!(parse_request("/cluster/remove", "node=x").is_err());
        assert!(parse_request("/cluster/grow", "node=1").is_err());
        let head =
            b"POST /cluster/add?node=5 HTTP/1.1\r\nHost: a\r\nauthorization:  Bearer  pw\r\n\r\n";
        assert_eq!(bearer(head), Some(&b"pw"[..]));
        assert_eq!(
            bearer(b"POST / HTTP/1.1\r\nAuthorization: Basic x\r\n\r\n"),
            None
        );
        assert_eq!(bearer(b"POST / HTTP/1.1\r\n\r\n"), None);
    }

    #[test]
    fn a_mover_that_does_not_finish_stops_the_change_in_joint_until_resumed() {
        let mut fake = Fake::new(ring(4), 5);
        fake.moving = vec![2, 5];
        let e = run(&fake, ChangeRequest::Add(5)).unwrap_err();
        assert_eq!(
            e,
            ChangeError::NotSynced {
                stage: Stage::Joint(Epoch(2)),
                nodes: vec![2, 5],
                keys: 14
            }
        );
        assert!(e.to_string().contains("run the same change again"), "{e}");
        assert_eq!(fake.register.borrow().stage(), Stage::Joint(Epoch(2)));
        // A node of the old configuration only (node 4 leaving) is not waited for.
        let mut leaving = Fake::new(ring(4), 5);
        leaving.moving = vec![4];
        run(&leaving, ChangeRequest::Remove(4)).unwrap();
        // Once the movers are done, the same change resumes and finishes.
        fake.moving.clear();
        let changed = run(&fake, ChangeRequest::Add(5)).unwrap();
        assert_eq!(changed.to.epoch(), Epoch(2));
        assert_eq!(
            *fake.swaps.borrow(),
            vec![Stage::Joint(Epoch(2)), Stage::Stable(Epoch(2))]
        );
    }

    #[test]
    fn a_node_gaining_slots_while_it_holds_registers_elsewhere_is_refused_before_anything_is_written(
    ) {
        let old = ring(4);
        let added = ChangeRequest::Add(5)
            .apply(&old, &[1, 2, 3, 4, 5, 6])
            .unwrap();
        let gaining = gaining_nodes(&old, &added);
        assert!(gaining.contains(&5), "{gaining:?}");
        // The new node may not hold registers of slots it does not replicate, nor a member the
        // walk moves onto a slot (here every member gains some).
        let fake = Fake::new(old.clone(), 6);
        fake.elsewhere.borrow_mut().insert(5, 12);
        for request in [
            ChangeRequest::Add(5),
            ChangeRequest::Replace { old: 1, new: 5 },
        ] {
            let e = run(&fake, request).unwrap_err();
            assert_eq!(
                e,
                ChangeError::HoldsRegisters {
                    node: 5,
                    registers: 12
                }
            );
            assert!(e.to_string().contains("does not replicate"), "{e}");
        }
        assert!(fake.swaps.borrow().is_empty());
        let walked = *gaining.iter().find(|&&n| n != 5).expect("a member gains");
        let fake = Fake::new(old.clone(), 6);
        fake.elsewhere.borrow_mut().insert(walked, 3);
        assert_eq!(
            run(&fake, ChangeRequest::Add(5)).unwrap_err(),
            ChangeError::HoldsRegisters {
                node: walked,
                registers: 3
            }
        );
        // A node that gains nothing may hold some: node 6, outside both configurations.
        let fake = Fake::new(old.clone(), 6);
        fake.elsewhere.borrow_mut().insert(6, 1000);
        run(&fake, ChangeRequest::Add(5)).unwrap();
        // A node that has not reported, or reported an earlier stage only, is refused too.
        let mut fresh = Fake::new(old.clone(), 5);
        fresh.silent = vec![5];
        assert_eq!(
            run(&fresh, ChangeRequest::Add(5)).unwrap_err(),
            ChangeError::NotReported(5)
        );
        assert!(fresh.swaps.borrow().is_empty());
        let mut behind = Fake::new(old.clone(), 5);
        behind.lagging = vec![5];
        assert_eq!(
            run(&behind, ChangeRequest::Add(5)).unwrap_err(),
            ChangeError::NotReported(5)
        );
        assert!(behind.swaps.borrow().is_empty());
    }

    #[test]
    fn the_change_waits_for_a_node_dropping_the_registers_of_slots_it_left() {
        // Node 4 was removed and still drops what it held; adding it back waits until its
        // report says none is left (two reads here), then goes through.
        let old = ring(4)
            .with_node_removed(NodeId(4))
            .expect("three nodes left");
        let mut fake = Fake::new(old.clone(), 4);
        fake.elsewhere.borrow_mut().insert(4, 2);
        fake.dropping = vec![4];
        let changed = run(&fake, ChangeRequest::Add(4)).unwrap();
        assert!(changed.to.contains(NodeId(4)));
        // With more left than the coordinator waits for, it stops before writing anything.
        let mut slow = Fake::new(old, 4);
        slow.elsewhere.borrow_mut().insert(4, 50);
        slow.dropping = vec![4];
        assert!(matches!(
            run(&slow, ChangeRequest::Add(4)).unwrap_err(),
            ChangeError::HoldsRegisters { node: 4, .. }
        ));
        assert!(slow.swaps.borrow().is_empty());
    }

    /// The placement walk moves slots between nodes that stay (docs/ring.md §1): here a node
    /// that is a member at every epoch stops replicating a slot at one change and replicates
    /// it again at the next. So a node in every configuration may hold registers of a slot it
    /// gains; the coordinator counts it among the nodes gaining slots, whose copies must hold
    /// nothing there (docs/ring.md §4 "Slots a node left").
    #[test]
    fn a_staying_node_can_leave_a_slot_and_replicate_it_again() {
        let peers: Vec<u16> = (1..=6).collect();
        let mut found = None;
        'search: for (first, second) in [
            (ChangeRequest::Add(5), ChangeRequest::Remove(5)),
            (ChangeRequest::Add(5), ChangeRequest::Add(6)),
            (ChangeRequest::Remove(4), ChangeRequest::Add(4)),
            (ChangeRequest::Remove(4), ChangeRequest::Add(5)),
        ] {
            let e1 = ring(4);
            let e2 = first.apply(&e1, &peers).unwrap();
            let e3 = second.apply(&e2, &peers).unwrap();
            for slot in logless_placement::Slot::all() {
                let (a, b, c) = (e1.replicas(slot), e2.replicas(slot), e3.replicas(slot));
                for node in a.nodes() {
                    let stays = e2.contains(*node) && e3.contains(*node);
                    if stays && !b.contains(*node) && c.contains(*node) {
                        found = Some((first, second, slot, *node));
                        break 'search;
                    }
                }
            }
        }
        let (first, second, slot, node) = found.expect("a staying node leaves a slot and returns");
        let e2 = first.apply(&ring(4), &peers).unwrap();
        let e3 = second.apply(&e2, &peers).unwrap();
        assert!(
            gaining_nodes(&e2, &e3).contains(&node.0),
            "{slot:?} {node:?}"
        );
    }
}
