//! Redis Cluster in the node (`cluster_enabled`; docs/ring.md §2, §3 and §5 item 3): the ring
//! configuration the replica serves with, the client address of each of its nodes, and the
//! `CLUSTER` subcommands answered from them with each peer's liveness as this replica sees it.
//! The sessions decide `CROSSSLOT` and `MOVED` themselves from the same map
//! (`logless_redis::session::Session::with_cluster`).
//!
//! # The installed configuration
//!
//! A node starts with the configuration every node derives from its peer list and
//! `replication` (`crate::ring::configuration`): with N = R one `Stable` configuration of
//! epoch 1 in which every node replicates every slot and no key is ever redirected, though each
//! slot's first replica — the node `CLUSTER SLOTS` shows as its master, and the one
//! cluster-aware clients send the slot's commands to — differs from slot to slot, so the
//! clients' load spreads over the nodes. On a ring (N > R) the stage read from the ring's
//! register replaces it before any client is served, and every later stage after it.
//!
//! # Following the ring's changes
//!
//! On a ring whose configuration changes (docs/ring.md §4), the map is replaced each time the
//! node installs a stage ([`ClusterState::install`], called by [`crate::ring_watch`]), and
//! every session takes the current map before each batch of requests it reads, so no session
//! redirects by a stage its node has left. In `Stable(e)` the map is the configuration of
//! epoch `e`. In `Joint(e+1)` the replies (`CLUSTER SLOTS` and the rest) and the `MOVED`
//! targets stay those of epoch `e`, whose replicas hold the keys while the mover copies them,
//! and a node runs the commands of every slot it replicates in either configuration instead of
//! redirecting them: every replica of the old or the new configuration is an acceptor of the
//! joint quorums and serves the slot. So a redirection lands on a node that serves it, and no
//! two nodes send a client back and forth while they install a stage at different moments.
//!
//! # Client addresses
//!
//! Cluster replies name each node by the address its Redis clients connect to, which a
//! replica does not otherwise know of its peers (it knows their peer addresses). It is part of
//! the configuration: `client_addr` in each `[[peers]]` entry (or `--peer-client-addrs`); this
//! replica's own defaults to its `client_addr` when that is a specific address. docs/ring.md
//! §2 says why it is configured rather than learned in the peer hello or derived.
use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

use bytes::Bytes;
use logless_placement::{key_slot, NodeId};
use logless_redis::cluster::{ClusterCommand, ClusterMap, ClusterNode, CLUSTER_DISABLED};
use logless_redis::resp::Value;
use logless_redis::table::admin::Admin;

use crate::clients::Connection;
use crate::config::{split_host_port, ConfigError, Engine, NodeConfig, PeerConfig};
use crate::context::NodeContext;
use crate::ring_register::RingStage;

/// The map a replica of `config` serves with in cluster mode; `None` when `cluster_enabled` is
/// off. Refuses, with the reason, a configuration cluster mode cannot serve.
pub fn cluster_map(config: &NodeConfig) -> Result<Option<ClusterMap>, ConfigError> {
    if !config.cluster_enabled {
        return Ok(None);
    }
    let invalid = |m: String| ConfigError::Invalid(m);
    if config.engine == Engine::Psmr {
        return Err(invalid(
            "cluster_enabled routes keys by hash slot; the psmr engine's service keeps its keys \
             in order for range queries over all of them: run it without cluster_enabled"
                .into(),
        ));
    }
    let replicas = config.replication();
    if ![3, 5, 7].contains(&replicas) {
        return Err(invalid(format!(
            "cluster_enabled needs 3, 5 or 7 replicas (each slot's replication degree), not \
             {replicas}"
        )));
    }
    let ring = crate::ring::configuration(config)?;
    let mut nodes = BTreeMap::new();
    for peer in &config.peers {
        let client = client_addr_of(config, peer, "cluster replies name it to clients")?;
        let (ip, port) = split_host_port("client address", &client)?;
        let (_, bus_port) = split_host_port("peer address", &peer.addr)?;
        let node = ClusterNode {
            ip: ip.to_owned(),
            port,
            bus_port,
            hostname: None,
            online: true,
        };
        nodes.insert(NodeId(peer.id), node);
    }
    let map = ClusterMap::new(ring, nodes, NodeId(config.node_id));
    map.map(Some).map_err(|e| invalid(e.to_string()))
}

/// A node's map in cluster mode, replaced when its ring installs a new stage.
pub struct ClusterState {
    map: RwLock<Arc<ClusterMap>>,
    /// How many maps were installed after the first: sessions compare it with the one they
    /// took to know when to take the current map.
    generation: AtomicU64,
}

impl ClusterState {
    /// A node serving by `map` until a stage is installed.
    pub fn new(map: ClusterMap) -> Self {
        ClusterState {
            map: RwLock::new(Arc::new(map)),
            generation: AtomicU64::new(0),
        }
    }

    /// The current map.
    pub fn map(&self) -> Arc<ClusterMap> {
        self.map.read().expect("not poisoned").clone()
    }

    /// Which map is current: it changes with every installation.
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// Serves by `stage` from now on: its configuration, and in a joint stage also the slots
    /// this node replicates in the new one (module doc). Refused if a node of the stage has
    /// no known client address (one not in the peer list).
    pub fn install(&self, stage: &RingStage) -> Result<(), String> {
        let current = self.map();
        let (nodes, myself) = (current.nodes().clone(), current.myself());
        let map = ClusterMap::new(stage.serving().clone(), nodes, myself);
        let map = match stage {
            RingStage::Stable(_) => map,
            RingStage::Joint { new, .. } => map.and_then(|map| map.serving_also(new)),
        }
        .map_err(|e| format!("cluster mode cannot serve the ring's stage: {e}"))?;
        *self.map.write().expect("not poisoned") = Arc::new(map);
        self.generation.fetch_add(1, Ordering::AcqRel);
        Ok(())
    }
}

/// Where the Redis clients of `peer` connect: its `client_addr`, or for this node its own
/// client address when that is a specific one. Refused, saying `why` it is needed, if unknown.
pub fn client_addr_of(
    config: &NodeConfig,
    peer: &PeerConfig,
    why: &str,
) -> Result<String, ConfigError> {
    let own = (peer.id == config.node_id
        && !config.client_addr.ip().is_unspecified()
        && config.client_addr.port() != 0)
        .then(|| config.client_addr.to_string());
    peer.client_addr.clone().or(own).ok_or_else(|| {
        ConfigError::Invalid(format!(
            "every node's client address is needed ({why}): give replica {} one (client_addr \
             in its [[peers]] entry, or --peer-client-addrs ID=HOST:PORT,...)",
            peer.id
        ))
    })
}

/// Answers a `CLUSTER` subcommand from connection `caller` (the session asks only in cluster
/// mode): the ring's replies with the peers this replica has a live link to as online (a link
/// to a peer that died breaks at the next message sent to it, and every write sends one to
/// every replica), and the keys of a slot from this replica's copy (as KEYS lists them: every
/// live key, filtered, so it costs a pass over the copy).
pub async fn answer(command: ClusterCommand, caller: &Connection, context: &NodeContext) -> Value {
    let Some(cluster) = &context.cluster else {
        return Value::Error(CLUSTER_DISABLED.into());
    };
    let map = cluster.map();
    let (slot, count) = match command {
        ClusterCommand::CountKeysInSlot(slot) => (slot, None),
        ClusterCommand::GetKeysInSlot(slot, count) => (slot, Some(count)),
        command => {
            let up = peers_up(context);
            return map
                .answer(&command, |id| up.contains(&id.0))
                .expect("the ring's own replies");
        }
    };
    let every_key = Admin::Keys(Bytes::from_static(b"*"));
    let keys = match crate::admin::answer(every_key, caller, context).await {
        Value::Array(keys) => keys,
        refusal => return refusal,
    };
    let in_slot = keys.into_iter().filter(|key| match key {
        Value::Bulk(key) => key_slot(key) == slot,
        _ => false,
    });
    match count {
        None => Value::Int(in_slot.count() as i64),
        Some(count) => Value::Array(in_slot.take(count).collect()),
    }
}

/// The peers this replica has at least one live outbound link of a data shard to.
pub(crate) fn peers_up(context: &NodeContext) -> BTreeSet<u16> {
    let links = context.peers.links_up.lock().expect("not poisoned");
    links
        .iter()
        .filter(|(&(_, shard), &up)| up && !crate::ring_register::is_ring_link(context, shard))
        .map(|(&(peer, _), _)| peer)
        .collect()
}

#[cfg(test)]
mod tests {
    use logless_placement::{Configuration, Replication, Slot};

    use super::*;

    /// Node 1's map of a ring of `nodes` nodes, each key on three.
    fn state(nodes: u16) -> (ClusterState, Configuration) {
        let ids: Vec<NodeId> = (1..=nodes).map(NodeId).collect();
        let ring = Configuration::balanced(&ids, Replication::THREE).unwrap();
        let addresses = (1..=nodes)
            .map(|id| {
                let node = ClusterNode {
                    ip: "127.0.0.1".into(),
                    port: 7000 + id,
                    bus_port: 8000 + id,
                    hostname: None,
                    online: true,
                };
                (NodeId(id), node)
            })
            .collect();
        let map = ClusterMap::new(ring.clone(), addresses, NodeId(1)).unwrap();
        (ClusterState::new(map), ring)
    }

    #[test]
    fn a_joint_stage_shows_the_old_ring_and_serves_the_slots_of_both() {
        let (state, old) = state(5);
        let new = old.with_node_removed(NodeId(2)).unwrap();
        let generation = state.generation();
        let joint = RingStage::Joint {
            old: old.clone(),
            new: new.clone(),
        };
        state.install(&joint).unwrap();
        assert_ne!(state.generation(), generation, "sessions take the new map");
        let map = state.map();
        assert_eq!(map.config(), &old, "clients are shown the old ring");
        let (mut gained, mut kept_away) = (0, 0);
        for slot in Slot::all() {
            let (in_old, in_new) = (
                old.replicas(slot).contains(NodeId(1)),
                new.replicas(slot).contains(NodeId(1)),
            );
            assert_eq!(map.serves(slot), in_old || in_new, "{slot:?}");
            gained += usize::from(in_new && !in_old);
            kept_away += usize::from(!in_new && !in_old);
        }
        assert!(gained > 0 && kept_away > 0);
        // A slot served by neither is redirected to its old first replica.
        let key = (0..)
            .map(|n| format!("k{n}"))
            .find(|k| !map.serves(key_slot(k.as_bytes())))
            .unwrap();
        let first = old.replicas(key_slot(key.as_bytes())).first();
        let moved = map.redirect([key.as_bytes()]).unwrap();
        assert!(moved.ends_with(&format!(":{}", 7000 + first.0)), "{moved}");

        // Stable: the new ring alone.
        state.install(&RingStage::Stable(new.clone())).unwrap();
        let map = state.map();
        assert_eq!(map.config(), &new);
        for slot in Slot::all() {
            assert_eq!(map.serves(slot), new.replicas(slot).contains(NodeId(1)));
        }
    }

    #[test]
    fn a_stage_naming_a_node_without_an_address_is_refused() {
        let (state, old) = state(5);
        let wider = old.with_node_added(NodeId(6)).unwrap();
        let refusal = state.install(&RingStage::Stable(wider)).unwrap_err();
        assert!(refusal.contains("node 6"), "{refusal}");
        assert_eq!(state.map().config(), &old, "the map in use stays");
    }
}
