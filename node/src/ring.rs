//! A ring fixed at start (docs/ring.md §1, §3; issue 28): N nodes, each key replicated on the
//! R nodes its slot is given by symmetric replication, R below N.
//!
//! Every node is given the same peer list and replication degree, and derives the same
//! configuration from them: `logless_placement::Configuration::balanced` of the peer ids at
//! epoch 1. With it the per-key engine takes a placement (`logless_rmw::placement`): a
//! register's acceptors are its slot's replicas, and an acceptor drops messages about keys it
//! does not hold. A node asked for a key it does not hold forwards the command to one of the
//! key's replicas ([`crate::forward`]).
//!
//! # Every node on the same ring
//!
//! Nodes that disagree on the ring would disagree on who holds a key: a proposer's messages to
//! a node that does not hold the key are dropped and its commands time out, and two nodes
//! could each believe the other holds a key that neither does. So the ring's digest (of its
//! byte form, `logless_placement::codec`) travels in every peer hello, appended to the cluster
//! id ([`hello_cluster_id`]): the cluster id is already what the acceptor of a hello compares
//! with its own before anything else and what both proofs of the cluster secret cover, so a
//! peer on another ring is refused, before it can deliver a message, with the same checks
//! and no new field; the hello's check names the two digests ([`crate::hello`]). A cluster
//! with N = R (no ring) sends the cluster id alone, exactly as before, so its wire format is
//! unchanged.
//!
//! # Rolling changes of the peer list
//!
//! The peer list changes only by restarting nodes with a new one, and a rolling restart has
//! nodes on the old and the new list side by side. So the tag carries, besides the digest, the
//! replication degree and the sum of the peer ids ([`RingTag`]): from the sum, a node finds the
//! one node by which the other's list could differ from its own (their difference), and
//! accepts the peer if the ring of its list with that node added or removed has the other's
//! digest ([`one_node_apart`]). Why the ring shard's registers stay safe while the two lists
//! are in use, and why only one change at a time: docs/ring.md §4, "Operating".
//!
//! # What a ring refuses (for now)
//!
//! The configuration is fixed for the nodes' lives (changing it needs the joint quorums of
//! docs/ring.md §4). Removal of dead registers and rejoining after a lost disk count every
//! acceptor, and the engine refuses them with a placement, so a ring's configuration must
//! turn removal off and cannot be started with `--rejoin`. The log and psmr engines order or
//! replicate every key on every node: a ring is the per-key engine's.
use logless_placement::{codec, Configuration, NodeId, Replication, Slot};
use logless_rmw::placement::Placement;
use logless_rmw::replica::Replica;
use sha2::{Digest, Sha256};

use crate::config::{ConfigError, Engine, NodeConfig};

/// The most nodes of a ring: the per-key engine's acceptor sets hold 64.
pub const RING_NODES_MAX: usize = 64;

/// What separates the cluster id from the ring's digest in the peer hello.
pub const RING_TAG: &str = "#ring=";

/// Bytes the ring's tag adds to the cluster id in the hello: the separator and
/// [`RingTag::encode`]'s 16 hex digits, `.r`, one digit, `.` and 8 hex digits.
pub const RING_TAG_BYTES: usize = RING_TAG.len() + 16 + 3 + 9;

/// What the peer hello says of the ring a node's peer list derives: the ring's [`digest`], its
/// replication degree, and the sum of the peer ids, from which a node finds the one node by
/// which a peer's list may differ from its own ([`one_node_apart`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RingTag {
    /// The [`digest`] of the ring of the peer list.
    pub digest: u64,
    /// Each key's replicas, R.
    pub replication: u8,
    /// The sum of the peer ids.
    pub id_sum: u32,
}

impl RingTag {
    /// The tag of the ring of the peer ids `ids` with each key on `r` of them.
    pub fn of(ids: &[u16], r: usize) -> Result<RingTag, ConfigError> {
        Ok(RingTag {
            digest: digest(&balanced(ids, r)?),
            replication: u8::try_from(r).expect("checked by balanced"),
            id_sum: ids.iter().map(|&id| u32::from(id)).sum(),
        })
    }

    /// `digest.rR.sum`, in hex but for R.
    pub fn encode(&self) -> String {
        format!(
            "{:016x}.r{}.{:08x}",
            self.digest, self.replication, self.id_sum
        )
    }

    /// The tag [`RingTag::encode`] wrote, if `text` is one.
    pub fn parse(text: &str) -> Option<RingTag> {
        let mut parts = text.split('.');
        let digest = u64::from_str_radix(parts.next().filter(|d| d.len() == 16)?, 16).ok()?;
        let replication = parts.next()?.strip_prefix('r')?.parse().ok()?;
        let id_sum = u32::from_str_radix(parts.next().filter(|d| d.len() == 8)?, 16).ok()?;
        parts.next().is_none().then_some(RingTag {
            digest,
            replication,
            id_sum,
        })
    }
}

/// How a peer's list differs from this node's when it differs by one node.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ListStep {
    /// The peer's list has this node more.
    Added(u16),
    /// The peer's list lacks this node.
    Removed(u16),
}

/// Whether a peer whose hello carries `theirs` runs the ring of a list one node longer or
/// shorter than `ours` (this node's peer ids, of tag `own`): the node added or removed, or
/// `None` if not (then the two lists differ otherwise, or the replication does).
pub fn one_node_apart(own: &RingTag, ours: &[u16], theirs: &RingTag) -> Option<ListStep> {
    if own.replication != theirs.replication {
        return None;
    }
    let difference = i64::from(theirs.id_sum) - i64::from(own.id_sum);
    let node = u16::try_from(difference.unsigned_abs()).ok()?;
    let (step, list): (ListStep, Vec<u16>) = if difference > 0 && !ours.contains(&node) {
        let list = ours.iter().copied().chain([node]).collect();
        (ListStep::Added(node), list)
    } else if difference < 0 && ours.contains(&node) {
        let list = ours.iter().copied().filter(|&id| id != node).collect();
        (ListStep::Removed(node), list)
    } else {
        return None;
    };
    let candidate = RingTag::of(&list, usize::from(own.replication)).ok()?;
    (candidate == *theirs).then_some(step)
}

/// Checks the settings of a ring (N > R) that cannot hold on one.
pub fn check(config: &NodeConfig) -> Result<(), ConfigError> {
    let invalid = |m: String| Err(ConfigError::Invalid(m));
    let (nodes, r) = (config.peers.len(), config.replication());
    if r > nodes {
        return invalid(format!(
            "replication {r} needs at least {r} nodes, and the peer list has {nodes}"
        ));
    }
    if ![3, 5, 7].contains(&r) {
        return invalid(format!(
            "replication must be 3, 5 or 7 (each key's replicas; an odd number, since a \
             majority of them decides), not {r}"
        ));
    }
    if nodes > RING_NODES_MAX {
        return invalid(format!(
            "a ring has at most {RING_NODES_MAX} nodes, not {nodes}"
        ));
    }
    if config.engine != Engine::Rmw {
        return invalid(format!(
            "replication {r} below the {nodes} nodes places each key on {r} of them, which is \
             the rmw engine's; the {} engine keeps every key on every node (give --engine rmw, \
             or as many peers as replicas)",
            config.engine
        ));
    }
    if config.remove_dead_registers == Some(true) {
        return invalid(format!(
            "removal of dead registers is not supported yet on a ring (replication {r} below \
             the {nodes} nodes): it counts every node as a key's acceptor; leave \
             --remove-dead-registers (remove_dead_registers) unset, or give false, to \
             have it off"
        ));
    }
    if config.rejoin {
        return invalid(format!(
            "--rejoin is not supported yet on a ring (replication {r} below the {nodes} \
             nodes): a rejoining node recovers every key from every other node, and each \
             holds only its own slots"
        ));
    }
    if config
        .acl()
        .map_err(|e| ConfigError::Invalid(e.to_string()))?
        .requires_auth()
        && config.requirepass.is_none()
        && config.requirepass_file.is_none()
    {
        return invalid(
            "a ring forwards commands on keys a node does not hold to their replicas as the \
             default user, logged in with requirepass: give requirepass (or requirepass_file) \
             rather than a default user in [[users]]"
                .into(),
        );
    }
    if config.tls_port != 0 && config.client_addr.port() == 0 {
        return invalid(
            "a ring forwards commands between nodes over their plain client ports, and \
             client_addr's port 0 serves TLS only: give every node a plain client port"
                .into(),
        );
    }
    for peer in &config.peers {
        crate::cluster::client_addr_of(config, peer, "a ring forwards commands to them")?;
    }
    Ok(())
}

/// The configuration every node of `config`'s cluster derives: the peers, balanced at epoch 1
/// with each key on [`NodeConfig::replication`] of them.
pub fn configuration(config: &NodeConfig) -> Result<Configuration, ConfigError> {
    let ids: Vec<u16> = config.peers.iter().map(|p| p.id).collect();
    balanced(&ids, config.replication())
}

/// The ring of the nodes `ids` with each key on `r` of them, balanced at epoch 1: what every
/// node of a ring derives, in whatever order its peers are listed.
pub fn balanced(ids: &[u16], r: usize) -> Result<Configuration, ConfigError> {
    let invalid = |m: String| ConfigError::Invalid(m);
    let replication = u8::try_from(r)
        .ok()
        .and_then(|r| Replication::new(r).ok())
        .ok_or_else(|| invalid(format!("replication must be 3, 5 or 7, not {r}")))?;
    let ids: Vec<NodeId> = ids.iter().map(|&id| NodeId(id)).collect();
    Configuration::balanced(&ids, replication).map_err(|e| invalid(e.to_string()))
}

/// The default user's password (`requirepass` or `requirepass_file`), which a ring's nodes log
/// in to each other's client ports with and which ring changes over HTTP must present.
pub fn requirepass(config: &NodeConfig) -> Result<Option<Vec<u8>>, ConfigError> {
    Ok(match (&config.requirepass, &config.requirepass_file) {
        (Some(crate::config::Password(password)), _) => Some(password.as_bytes().to_vec()),
        (None, Some(path)) => Some(crate::config::read_secret(path)?),
        (None, None) => None,
    })
}

/// The placement a node of `config` gives its per-key engine: on a ring, each register's
/// acceptors are its slot's replicas, over every peer as an acceptor listed in the same
/// (sorted) order on every node; `None` without a ring. The node calls it at start, and so
/// does the whole-node simulation (`verify/sim`), so that both run the engine on the placement
/// the node derives.
pub fn placement(config: &NodeConfig) -> Result<Option<Placement>, ConfigError> {
    if !config.is_ring() {
        return Ok(None);
    }
    let mut acceptors: Vec<logless_rmw::ids::NodeId> = (config.peers.iter())
        .map(|p| logless_rmw::ids::NodeId(p.id))
        .collect();
    acceptors.sort_unstable();
    let ring = configuration(config)?;
    Placement::new(&ring, &acceptors)
        .map(Some)
        .map_err(|e| ConfigError::Invalid(e.to_string()))
}

/// A data shard's replica as a ring's node starts it (the whole-node simulation starts a
/// restarted node's the same way): with the placement its peer list derives ([`placement`]),
/// its acceptor answering nothing until the node has read the ring's stage and installed it
/// (`Replica::awaiting_stage`; [`crate::ring_watch`] installs at the first read). The derived
/// placement is `Stable(1)`'s, which a restarted node may have left several stages behind:
/// deciding on that stage's messages would take the acceptor back to a stage the ring left,
/// and with a node late to read the register it could make a majority of the old replicas
/// (docs/ring.md §4, "A restarted node"). A replica without a placement (off a ring, and the
/// ring shard's) starts as it is.
pub fn starting_replica(replica: Replica) -> Replica {
    if replica.proposer_config().placement.is_some() {
        replica.awaiting_stage()
    } else {
        replica
    }
}

/// The ring's digest: the first 8 bytes of the SHA-256 of its byte form.
pub fn digest(ring: &Configuration) -> u64 {
    let hash = Sha256::digest(codec::encode(ring));
    u64::from_be_bytes(hash[..8].try_into().expect("8 bytes"))
}

/// The cluster id the peer hello carries: the configured one, followed on a ring by
/// [`RING_TAG`] and the [`RingTag`] of its peer list.
pub fn hello_cluster_id(config: &NodeConfig) -> Result<String, ConfigError> {
    if !config.is_ring() {
        return Ok(config.cluster_id.clone());
    }
    let ids: Vec<u16> = config.peers.iter().map(|p| p.id).collect();
    let tag = RingTag::of(&ids, config.replication())?;
    Ok(format!("{}{RING_TAG}{}", config.cluster_id, tag.encode()))
}

/// The slots `node` replicates on `ring` (R/N of them on a balanced ring).
pub fn slots_held(ring: &Configuration, node: NodeId) -> u64 {
    Slot::all()
        .filter(|&slot| ring.replicas(slot).contains(node))
        .count() as u64
}

/// The slot ranges of `ring` (`first-last`, as Redis writes them) whose replicas `reachable`
/// holds fewer than a majority of: the keys a cluster of those nodes cannot serve.
pub fn ranges_without_majority(
    ring: &Configuration,
    reachable: impl Fn(NodeId) -> bool,
) -> Vec<String> {
    let quorum = usize::from(ring.replication().quorum());
    ring.slot_ranges()
        .into_iter()
        .filter(|(_, replicas)| replicas.nodes().iter().filter(|&&n| reachable(n)).count() < quorum)
        .map(|(range, _)| format!("{}-{}", range.first, range.last))
        .collect()
}

#[cfg(test)]
mod tests {
    use logless_placement::SLOTS;

    use super::*;
    use crate::config::PeerConfig;

    fn ring(nodes: u16, replication: u8) -> NodeConfig {
        NodeConfig {
            node_id: 1,
            peers: (1..=nodes)
                .map(|id| PeerConfig {
                    id,
                    addr: format!("127.0.0.1:{}", 8000 + id),
                    client_addr: Some(format!("127.0.0.1:{}", 7000 + id)),
                })
                .collect(),
            replication,
            ..NodeConfig::default()
        }
    }

    #[test]
    fn a_ring_validates_and_every_listing_order_gives_one_digest() {
        let config = ring(5, 3);
        config.validate().unwrap();
        assert!(config.is_ring());
        assert!(!config.removes_dead_registers(), "off by default on a ring");
        let mut reversed = config.clone();
        reversed.peers.reverse();
        reversed.node_id = 4;
        assert_eq!(
            hello_cluster_id(&config).unwrap(),
            hello_cluster_id(&reversed).unwrap()
        );
        let wider = ring(6, 3);
        assert_ne!(
            hello_cluster_id(&config).unwrap(),
            hello_cluster_id(&wider).unwrap()
        );
        let held = slots_held(&configuration(&config).unwrap(), NodeId(1));
        let share = held as f64 / f64::from(SLOTS);
        assert!((share - 0.6).abs() < 0.1, "{share}");
    }

    #[test]
    fn a_list_one_node_longer_or_shorter_is_found_and_no_other() {
        let tag = |ids: &[u16]| RingTag::of(ids, 3).unwrap();
        let ours = [1, 2, 3, 4];
        let own = tag(&ours);
        assert_eq!(RingTag::parse(&own.encode()), Some(own));
        assert_eq!(own.encode().len() + RING_TAG.len(), RING_TAG_BYTES);
        for bad in [
            "",
            "00",
            "0000000000000000.r3",
            "0000000000000000.r3.0000000a.1",
        ] {
            assert_eq!(RingTag::parse(bad), None, "{bad}");
        }
        // Listed in any order, one node more or less: found, whichever node it is.
        assert_eq!(
            one_node_apart(&own, &ours, &tag(&[5, 1, 2, 3, 4])),
            Some(ListStep::Added(5))
        );
        assert_eq!(
            one_node_apart(&own, &ours, &tag(&[1, 2, 3, 4, 900])),
            Some(ListStep::Added(900))
        );
        assert_eq!(
            one_node_apart(&own, &ours, &tag(&[1, 3, 4])),
            Some(ListStep::Removed(2))
        );
        // Two nodes apart, even with a sum one node away, or the same sum: refused.
        for other in [
            &[1, 2, 3, 4, 5, 6][..],
            &[1, 2, 5, 6],
            &[2, 3, 5],
            &[1, 2, 3, 9],
        ] {
            assert_eq!(one_node_apart(&own, &ours, &tag(other)), None, "{other:?}");
        }
        // The same nodes with another replication.
        let five = RingTag::of(&[1, 2, 3, 4, 5, 6], 5).unwrap();
        assert_eq!(one_node_apart(&own, &ours, &five), None);
        // A forged sum is caught by the digest.
        let forged = RingTag {
            id_sum: own.id_sum + 7,
            ..own
        };
        assert_eq!(one_node_apart(&own, &ours, &forged), None);
    }

    #[test]
    fn slots_without_a_majority_of_their_replicas_are_named() {
        let ring = configuration(&ring(5, 3)).unwrap();
        assert!(ranges_without_majority(&ring, |_| true).is_empty());
        // One node down leaves every slot two of its three replicas.
        assert!(ranges_without_majority(&ring, |n| n != NodeId(3)).is_empty());
        // Two down: the slots both replicate lose their majority, and only those.
        let lost = ranges_without_majority(&ring, |n| n != NodeId(3) && n != NodeId(4));
        assert!(!lost.is_empty());
        for range in &lost {
            let (first, _) = range.split_once('-').unwrap();
            let slot = Slot::new(first.parse().unwrap()).unwrap();
            let replicas = ring.replicas(slot);
            assert!(
                replicas.contains(NodeId(3)) && replicas.contains(NodeId(4)),
                "{range}"
            );
        }
        let all = ranges_without_majority(&ring, |n| n == NodeId(1));
        assert_eq!(all.len(), ring.slot_ranges().len());
    }

    #[test]
    fn without_replication_nothing_changes() {
        let mut config = ring(3, 0);
        assert!(
            config.removes_dead_registers(),
            "on by default without a ring"
        );
        config.remove_dead_registers = Some(true);
        config.validate().unwrap();
        assert!(!config.is_ring());
        assert_eq!(hello_cluster_id(&config).unwrap(), config.cluster_id);
        config.replication = 3;
        config.validate().unwrap();
        assert!(!config.is_ring());
    }

    #[test]
    fn bad_rings_are_refused_with_the_reason() {
        let refusal = |config: NodeConfig| config.validate().unwrap_err().to_string();
        assert!(refusal(ring(3, 5)).contains("needs at least 5 nodes"));
        assert!(refusal(ring(6, 4)).contains("3, 5 or 7"));
        assert!(refusal(ring(4, 0)).contains("--replication"));
        let removal = NodeConfig {
            remove_dead_registers: Some(true),
            ..ring(5, 3)
        };
        assert!(refusal(removal).contains("removal of dead registers is not supported yet"));
        let rejoin = NodeConfig {
            rejoin: true,
            ..ring(5, 3)
        };
        assert!(refusal(rejoin).contains("--rejoin"));
        let log = NodeConfig {
            engine: Engine::Multipaxos,
            ..ring(5, 3)
        };
        assert!(refusal(log).contains("rmw"));
        let mut no_client = ring(5, 3);
        no_client.peers[2].client_addr = None;
        assert!(refusal(no_client).contains("replica 3"));
    }

    /// A restarted node's data shard, started as node.rs starts it with the placement its peer
    /// list derives (`Stable(1)`), answers a late node's PREPARE of that stage only once a
    /// stage was installed: after a change, with STALE.
    #[test]
    fn a_data_shard_answers_no_peer_until_the_node_installed_the_rings_stage() {
        use logless_rmw::ids::{AttemptId, Key, NodeId as RmwId, ProposerId, Round};
        use logless_rmw::message::{Message, PrepareKind};

        let config = ring(4, 3);
        let derived = placement(&config).unwrap().expect("a ring");
        let acceptors: Vec<RmwId> = (1..=4).map(RmwId).collect();
        let start = || {
            let mut proposer = config.proposer_config(acceptors.clone());
            proposer.placement = Some(derived.clone());
            let none: Vec<(Key, logless_rmw::acceptor::AcceptorState)> = Vec::new();
            starting_replica(Replica::new(RmwId(1), 2, proposer, 7, none))
        };
        // A key node 1 replicates, and another replica of it: the late node asking.
        let ring = configuration(&config).unwrap();
        let key = (0..)
            .map(|i| Key::new(format!("k{i}")))
            .find(|k| {
                (ring.replicas(logless_placement::key_slot(k.as_bytes()))).contains(NodeId(1))
            })
            .unwrap();
        let late = ring
            .replicas(logless_placement::key_slot(key.as_bytes()))
            .nodes()
            .iter()
            .map(|n| RmwId(n.0))
            .find(|n| *n != RmwId(1))
            .unwrap();
        let prepare = Message::Prepare {
            key: key.clone(),
            kind: PrepareKind::Write,
            attempt: AttemptId {
                proposer: ProposerId {
                    node: late,
                    incarnation: 1,
                },
                seq: 1,
            },
            known_voted: Round::BOTTOM,
            stage: derived.stage_id(),
        };
        let mut replica = start();
        assert!(replica.is_awaiting_stage());
        replica.handle_message(0, late, &prepare);
        let output = replica.take_output();
        assert!(
            output.sends.is_empty() && output.persist.is_empty(),
            "no answer"
        );
        assert!(replica.acceptor_state(&key).is_none());
        // The ring moved on while the node was down: the first read installs the stage the
        // register holds, and the late node is refused.
        let removed = ring.with_node_removed(NodeId(4)).unwrap();
        let later = Placement::joint(&ring, &removed, &acceptors).unwrap();
        replica.install_placement(later.clone());
        replica.handle_message(0, late, &prepare);
        let sends = replica.take_output().sends;
        assert_eq!(sends.len(), 1);
        assert_eq!(
            sends[0].message,
            Message::Stale {
                key: key.clone(),
                stage: later.stage_id()
            }
        );
        // A ring that never changed: the first read installs the derived stage again, and the
        // shard answers it.
        let mut replica = start();
        replica.install_placement(derived.clone());
        replica.handle_message(0, late, &prepare);
        assert!(
            !replica.take_output().persist.is_empty(),
            "a promise and its ACK"
        );
        // The ring shard has no placement, and answers from the start.
        let ring_shard = starting_replica(Replica::new(
            RmwId(1),
            2,
            config.proposer_config(acceptors.clone()),
            7,
            Vec::<(Key, logless_rmw::acceptor::AcceptorState)>::new(),
        ));
        assert!(!ring_shard.is_awaiting_stage());
    }
}
