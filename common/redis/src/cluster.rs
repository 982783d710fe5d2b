//! Redis Cluster's view of a logless ring: the replies of `CLUSTER SLOTS`, `CLUSTER SHARDS`,
//! `CLUSTER NODES`, `CLUSTER KEYSLOT`, `CLUSTER MYID` and `CLUSTER INFO`, and the `MOVED`,
//! `ASK`, `CROSSSLOT` and `CLUSTERDOWN` error texts, as pure functions of a ring configuration
//! ([`logless_placement`]) and the nodes' client addresses.
//!
//! How the ring is shown to cluster-aware clients: every slot has `R` replicas, each of which
//! can run every command on the slot's keys (every replica proposes for its keys). The first
//! replica (the owner of the slot's own ring position) is shown as the slot's master and the
//! others as its replicas, so a client sends writes to the first and may send reads to any.
//! Redis's shards are fixed groups of one master and its replicas; a ring has no such groups
//! (a node is first replica of some slots and second or third of others), so a shard here is
//! the set of slots with the same replicas in the same order, and in `CLUSTER NODES` (whose
//! format ties a replica to one master) every node is a master of the slots it is first replica
//! of.
//!
//! [`ClusterMap`] is what a node serving in cluster mode (`cluster_enabled`) keeps: its
//! installed configuration and the nodes' client addresses, from which a session decides,
//! before a command runs, whether its keys belong together ([`CROSSSLOT`]) and here
//! ([`moved`]), and from which the node answers the `CLUSTER` subcommands
//! ([`ClusterCommand`]) with each node's liveness as it sees it.
use std::collections::BTreeMap;
use std::fmt::Write as _;

use bytes::Bytes;
use logless_placement::{key_slot, Configuration, NodeId, ReplicaSet, Slot, SlotRange, SLOTS};

use crate::resp::Value;

/// The reply to a command naming keys of more than one slot, in Redis's words.
pub const CROSSSLOT: &str = "CROSSSLOT Keys in request don't hash to the same slot";

/// The reply to a command on a slot that has no quorum of live replicas, in Redis's words.
pub const CLUSTERDOWN: &str = "CLUSTERDOWN The cluster is down";

/// The name Redis Cluster gives a node: 40 hexadecimal characters. logless derives it from
/// the node id, so it is the same on every node and across restarts.
pub fn node_name(node: NodeId) -> String {
    format!("{:040x}", node.0)
}

/// Where clients reach one node of the ring, and whether it is up.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClusterNode {
    /// The address clients connect to, as it should appear in replies (an IP address; an IPv6
    /// address is written without brackets, as Redis writes it, and clients split at the last
    /// colon).
    pub ip: String,
    /// The client port.
    pub port: u16,
    /// The port peers reach it on (Redis's cluster bus port, shown as `@port`).
    pub bus_port: u16,
    /// A host name to announce besides the address, if any.
    pub hostname: Option<String>,
    /// Whether the node is reachable (as seen by the node answering).
    pub online: bool,
}

impl ClusterNode {
    /// `ip:port`, as redirections and `CLUSTER NODES` write it.
    pub fn endpoint(&self) -> String {
        format!("{}:{}", self.ip, self.port)
    }
}

/// Why a cluster view cannot be made.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ClusterViewError {
    /// A node of the configuration whose address is not known.
    #[error("no client address is known for node {0}")]
    MissingAddress(NodeId),
}

/// A configuration together with the addresses of its nodes, seen from one node (`myself`).
#[derive(Clone, Copy, Debug)]
pub struct ClusterView<'a> {
    config: &'a Configuration,
    nodes: &'a BTreeMap<NodeId, ClusterNode>,
    myself: NodeId,
}

impl<'a> ClusterView<'a> {
    /// The view of `config` from `myself`, with `nodes` holding the address of every node of
    /// the configuration (and possibly of others, which are not shown).
    pub fn new(
        config: &'a Configuration,
        nodes: &'a BTreeMap<NodeId, ClusterNode>,
        myself: NodeId,
    ) -> Result<Self, ClusterViewError> {
        if let Some(missing) = config.nodes().find(|n| !nodes.contains_key(n)) {
            return Err(ClusterViewError::MissingAddress(missing));
        }
        Ok(ClusterView {
            config,
            nodes,
            myself,
        })
    }

    fn node(&self, id: NodeId) -> &'a ClusterNode {
        &self.nodes[&id]
    }

    /// The redirection that sends a client to `slot`'s first replica.
    pub fn moved(&self, slot: Slot) -> Value {
        moved(slot, self.node(self.config.replicas(slot).first()))
    }

    /// Whether `slot` has a quorum of replicas online.
    pub fn slot_up(&self, slot: Slot) -> bool {
        quorum_online(self, self.config.replicas(slot))
    }
}

/// The `CLUSTER` subcommands logless answers (in cluster mode only; otherwise CLUSTER is
/// refused in Redis's words, [`CLUSTER_DISABLED`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ClusterCommand {
    /// `CLUSTER SLOTS`.
    Slots,
    /// `CLUSTER SHARDS`.
    Shards,
    /// `CLUSTER NODES`.
    Nodes,
    /// `CLUSTER INFO`.
    Info,
    /// `CLUSTER MYID`.
    MyId,
    /// `CLUSTER KEYSLOT key`.
    KeySlot(Bytes),
    /// `CLUSTER COUNTKEYSINSLOT slot`: the live keys of this replica's copy in the slot.
    CountKeysInSlot(Slot),
    /// `CLUSTER GETKEYSINSLOT slot count`: at most `count` of them.
    GetKeysInSlot(Slot, usize),
    /// `CLUSTER HELP`.
    Help,
}

/// The reply to `CLUSTER`, `READONLY`, `READWRITE` and `ASKING` on a node that is not in
/// cluster mode, in Redis's words.
pub const CLUSTER_DISABLED: &str = "ERR This instance has cluster support disabled";

/// The reply to a slot number out of range, in Redis's words.
pub const INVALID_SLOT: &str = "ERR Invalid or out of range slot";

/// What a node in cluster mode knows of its ring: the installed configuration, the client
/// address of each of its nodes, and which node it is.
#[derive(Clone, Debug)]
pub struct ClusterMap {
    config: Configuration,
    nodes: BTreeMap<NodeId, ClusterNode>,
    myself: NodeId,
    /// Whether `myself` replicates each slot, by slot number: the question every request asks.
    replicated: Vec<bool>,
}

impl ClusterMap {
    /// The map of `config` seen from `myself`, with the address of every node of `config` in
    /// `nodes`.
    pub fn new(
        config: Configuration,
        nodes: BTreeMap<NodeId, ClusterNode>,
        myself: NodeId,
    ) -> Result<ClusterMap, ClusterViewError> {
        ClusterView::new(&config, &nodes, myself)?;
        let replicated = Slot::all()
            .map(|slot| config.replicas(slot).contains(myself))
            .collect();
        Ok(ClusterMap {
            config,
            nodes,
            myself,
            replicated,
        })
    }

    /// The same map, also running here the commands on the slots `myself` replicates in
    /// `next`: the map of a ring's joint stage, which shows the old configuration (`self`'s)
    /// to clients and redirects them by it, while every replica of the old or the new one is
    /// an acceptor of the moving slots and serves them rather than redirecting (so no two nodes
    /// redirect a client to each other; docs/ring.md §4, "Operating").
    pub fn serving_also(mut self, next: &Configuration) -> Result<ClusterMap, ClusterViewError> {
        ClusterView::new(next, &self.nodes, self.myself)?;
        for (slot, replicated) in Slot::all().zip(&mut self.replicated) {
            *replicated |= next.replicas(slot).contains(self.myself);
        }
        Ok(self)
    }

    /// Whether this node runs the commands on `slot`'s keys rather than redirecting them.
    pub fn serves(&self, slot: Slot) -> bool {
        self.replicated[usize::from(slot.get())]
    }

    /// The installed configuration.
    pub fn config(&self) -> &Configuration {
        &self.config
    }

    /// The node this map is seen from.
    pub fn myself(&self) -> NodeId {
        self.myself
    }

    /// The nodes' addresses, each marked online as the map was made.
    pub fn nodes(&self) -> &BTreeMap<NodeId, ClusterNode> {
        &self.nodes
    }

    /// The reply to `command`, each node online as `online` says (this node always is);
    /// `None` for the subcommands about the keys this replica holds
    /// ([`ClusterCommand::CountKeysInSlot`], [`ClusterCommand::GetKeysInSlot`]), which the
    /// node answers from its copy.
    pub fn answer(
        &self,
        command: &ClusterCommand,
        online: impl Fn(NodeId) -> bool,
    ) -> Option<Value> {
        let mut nodes = self.nodes.clone();
        for (&id, node) in &mut nodes {
            node.online = id == self.myself || online(id);
        }
        let view = ClusterView {
            config: &self.config,
            nodes: &nodes,
            myself: self.myself,
        };
        Some(match command {
            ClusterCommand::Slots => cluster_slots(&view),
            ClusterCommand::Shards => cluster_shards(&view),
            ClusterCommand::Nodes => cluster_nodes(&view),
            ClusterCommand::Info => cluster_info(&view),
            ClusterCommand::MyId => cluster_myid(&view),
            ClusterCommand::KeySlot(key) => cluster_keyslot(key),
            ClusterCommand::Help => cluster_help(),
            ClusterCommand::CountKeysInSlot(_) | ClusterCommand::GetKeysInSlot(..) => return None,
        })
    }

    /// Where a command on `keys` runs, as a Redis Cluster node decides it: `None` if here (no
    /// key, or keys of one slot that this node replicates), else the text of the error reply:
    /// [`CROSSSLOT`] for keys of several slots, `MOVED` to the slot's first replica for a slot
    /// this node does not replicate.
    pub fn redirect<'k>(&self, keys: impl IntoIterator<Item = &'k [u8]>) -> Option<String> {
        let mut keys = keys.into_iter();
        let slot = key_slot(keys.next()?);
        if keys.any(|key| key_slot(key) != slot) {
            return Some(CROSSSLOT.to_owned());
        }
        if self.replicated[usize::from(slot.get())] {
            return None;
        }
        let first = self.config.replicas(slot).first();
        Some(moved_text(slot, &self.nodes[&first]))
    }
}

/// `-MOVED slot ip:port`: the slot is served at `to` from now on.
pub fn moved(slot: Slot, to: &ClusterNode) -> Value {
    Value::Error(moved_text(slot, to))
}

fn moved_text(slot: Slot, to: &ClusterNode) -> String {
    format!("MOVED {slot} {}", to.endpoint())
}

/// `-ASK slot ip:port`: this one request (after `ASKING`) is for `to`, while the slot moves.
pub fn ask(slot: Slot, to: &ClusterNode) -> Value {
    Value::Error(format!("ASK {slot} {}", to.endpoint()))
}

/// `CLUSTER HELP`: the subcommands logless answers, one line each.
pub fn cluster_help() -> Value {
    let lines = [
        "CLUSTER <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
        "COUNTKEYSINSLOT <slot>",
        "    Return the number of keys of this replica's copy in <slot>.",
        "GETKEYSINSLOT <slot> <count>",
        "    Return at most <count> keys of this replica's copy in <slot>.",
        "INFO",
        "    Return information about the cluster.",
        "KEYSLOT <key>",
        "    Return the hash slot for <key>.",
        "MYID",
        "    Return the node id.",
        "NODES",
        "    Return cluster configuration seen by node. Output format:",
        "    <id> <ip:port@bus-port> <flags> <master> <pings> <pongs> <epoch> <link> <slot> ...",
        "SHARDS",
        "    Return information about slot range mappings and the nodes serving them.",
        "SLOTS",
        "    Return information about slots range mappings. Each range is made of:",
        "    start, end, master and replicas IP addresses, ports and ids",
        "HELP",
        "    Print this help.",
    ];
    Value::Array(
        lines
            .iter()
            .map(|l| Value::Simple((*l).to_owned()))
            .collect(),
    )
}

/// `CLUSTER MYID`: the name of the node answering.
pub fn cluster_myid(view: &ClusterView<'_>) -> Value {
    bulk(&node_name(view.myself))
}

/// `CLUSTER KEYSLOT key`.
pub fn cluster_keyslot(key: &[u8]) -> Value {
    Value::Int(i64::from(key_slot(key).get()))
}

/// `CLUSTER SLOTS`: each run of slots with the same replicas, as
/// `[first, last, [ip, port, name, {metadata}], ...]`, the first replica first.
pub fn cluster_slots(view: &ClusterView<'_>) -> Value {
    let ranges = view.config.slot_ranges();
    Value::Array(
        ranges
            .into_iter()
            .map(|(range, replicas)| {
                let mut entry = vec![slot_int(range.first), slot_int(range.last)];
                entry.extend(replicas.nodes().iter().map(|&id| slots_node(view, id)));
                Value::Array(entry)
            })
            .collect(),
    )
}

fn slots_node(view: &ClusterView<'_>, id: NodeId) -> Value {
    let node = view.node(id);
    let metadata = match &node.hostname {
        Some(hostname) => vec![(bulk("hostname"), bulk(hostname))],
        None => Vec::new(),
    };
    Value::Array(vec![
        bulk(&node.ip),
        Value::Int(i64::from(node.port)),
        bulk(&node_name(id)),
        Value::Map(metadata),
    ])
}

/// `CLUSTER SHARDS`: one shard per replica list (the slots with the same replicas in the same
/// order), as a map of `slots` (first and last slot of each range, flat) and `nodes` (the
/// first replica as master, the others as replicas).
pub fn cluster_shards(view: &ClusterView<'_>) -> Value {
    // Replica lists in the order of their first slot, so the reply is stable.
    let mut shards: Vec<(ReplicaSet, Vec<SlotRange>)> = Vec::new();
    let mut index: BTreeMap<Vec<NodeId>, usize> = BTreeMap::new();
    for (range, replicas) in view.config.slot_ranges() {
        let at = *index.entry(replicas.nodes().to_vec()).or_insert_with(|| {
            shards.push((replicas, Vec::new()));
            shards.len() - 1
        });
        shards[at].1.push(range);
    }
    Value::Array(
        shards
            .into_iter()
            .map(|(replicas, ranges)| shard(view, replicas, &ranges))
            .collect(),
    )
}

fn shard(view: &ClusterView<'_>, replicas: ReplicaSet, ranges: &[SlotRange]) -> Value {
    let slots = ranges
        .iter()
        .flat_map(|range| [slot_int(range.first), slot_int(range.last)])
        .collect();
    let nodes = replicas
        .nodes()
        .iter()
        .enumerate()
        .map(|(k, &id)| shard_node(view, id, k == 0))
        .collect();
    Value::Map(vec![
        (bulk("slots"), Value::Array(slots)),
        (bulk("nodes"), Value::Array(nodes)),
    ])
}

fn shard_node(view: &ClusterView<'_>, id: NodeId, master: bool) -> Value {
    let node = view.node(id);
    let mut fields = vec![
        (bulk("id"), bulk(&node_name(id))),
        (bulk("port"), Value::Int(i64::from(node.port))),
        (bulk("ip"), bulk(&node.ip)),
        (bulk("endpoint"), bulk(&node.ip)),
    ];
    if let Some(hostname) = &node.hostname {
        fields.push((bulk("hostname"), bulk(hostname)));
    }
    fields.extend([
        (
            bulk("role"),
            bulk(if master { "master" } else { "replica" }),
        ),
        // Replicas of a register agree through consensus, not by streaming a log: there is
        // no offset to report.
        (bulk("replication-offset"), Value::Int(0)),
        (
            bulk("health"),
            bulk(if node.online { "online" } else { "failed" }),
        ),
    ]);
    Value::Map(fields)
}

/// `CLUSTER NODES`: one line per node of the configuration, in id order, each a master of the
/// slots it is first replica of:
/// `<name> <ip>:<port>@<bus-port>[,<hostname>] <flags> - 0 0 <epoch> <link> <slots...>`.
pub fn cluster_nodes(view: &ClusterView<'_>) -> Value {
    let mut first_of: BTreeMap<NodeId, Vec<SlotRange>> =
        view.config.nodes().map(|n| (n, Vec::new())).collect();
    for (range, replicas) in view.config.slot_ranges() {
        let ranges = first_of
            .get_mut(&replicas.first())
            .expect("replicas are members");
        match ranges.last_mut() {
            Some(last) if last.last.get() + 1 == range.first.get() => last.last = range.last,
            _ => ranges.push(range),
        }
    }
    let epoch = view.config.epoch().0;
    let mut text = String::new();
    for (id, ranges) in first_of {
        let node = view.node(id);
        let mut flags = String::new();
        if id == view.myself {
            flags.push_str("myself,");
        }
        flags.push_str("master");
        if !node.online {
            flags.push_str(",fail");
        }
        let link = if node.online || id == view.myself {
            "connected"
        } else {
            "disconnected"
        };
        let _ = write!(
            text,
            "{} {}@{}",
            node_name(id),
            node.endpoint(),
            node.bus_port
        );
        if let Some(hostname) = &node.hostname {
            let _ = write!(text, ",{hostname}");
        }
        let _ = write!(text, " {flags} - 0 0 {epoch} {link}");
        for range in ranges {
            if range.first == range.last {
                let _ = write!(text, " {}", range.first);
            } else {
                let _ = write!(text, " {}-{}", range.first, range.last);
            }
        }
        text.push('\n');
    }
    Value::Bulk(Bytes::from(text))
}

/// `CLUSTER INFO`: the state is `ok` when every slot has a quorum of its replicas online (the
/// slots without one cannot be served and count as failed). Redis's fields, then logless's
/// `cluster_replication_degree` (R).
pub fn cluster_info(view: &ClusterView<'_>) -> Value {
    let failed = Slot::all().filter(|&s| !view.slot_up(s)).count();
    let state = if failed == 0 { "ok" } else { "fail" };
    let masters = view
        .config
        .slot_ranges()
        .iter()
        .map(|(_, replicas)| replicas.first())
        .collect::<std::collections::BTreeSet<_>>()
        .len();
    let epoch = view.config.epoch().0;
    let lines = [
        format!("cluster_state:{state}"),
        format!("cluster_slots_assigned:{SLOTS}"),
        format!("cluster_slots_ok:{}", usize::from(SLOTS) - failed),
        "cluster_slots_pfail:0".to_owned(),
        format!("cluster_slots_fail:{failed}"),
        format!("cluster_known_nodes:{}", view.config.nodes().len()),
        format!("cluster_size:{masters}"),
        format!("cluster_current_epoch:{epoch}"),
        format!("cluster_my_epoch:{epoch}"),
        format!(
            "cluster_replication_degree:{}",
            view.config.replication().get()
        ),
    ];
    let mut text = lines.join("\r\n");
    text.push_str("\r\n");
    Value::Bulk(Bytes::from(text))
}

fn quorum_online(view: &ClusterView<'_>, replicas: ReplicaSet) -> bool {
    let online = replicas
        .nodes()
        .iter()
        .filter(|&&id| view.node(id).online)
        .count();
    online >= usize::from(view.config.replication().quorum())
}

fn slot_int(slot: Slot) -> Value {
    Value::Int(i64::from(slot.get()))
}

fn bulk(text: &str) -> Value {
    Value::Bulk(Bytes::copy_from_slice(text.as_bytes()))
}
