//! The ring's configuration as replicated state (docs/ring.md §4 "The protocol", §5 item 1):
//! the stage register, its value, and the reports of what each node installed.
//!
//! # Where the register lives
//!
//! On a ring every node runs one more shard of the per-key engine than it serves keys with: the
//! **ring shard**, peer shard number `shards` (after the data shards `0..shards`), with its own
//! store (`shard-{shards}.slots`) and its own peer links, and **without a placement**, so
//! every node of the peer list is an acceptor of each of its registers and a quorum is a
//! majority of all of them. Its registers are ordinary RMWPaxos registers, written by
//! compare-and-swap like any key, but outside the keyspace of the clients: a client's command
//! goes to the data shard its key hashes to among `0..shards` ([`crate::context::shard_of`]),
//! and KEYS, SCAN, DBSIZE and FLUSHALL walk those shards only, so no client can name, read or
//! write a register of the ring shard, whatever its key. Its keys:
//!
//! * [`STAGE_KEY`]: the stage, [`RingStage`] encoded with [`RingStage::encode`]: `Stable(e)` with
//!   the configuration of epoch `e`, or `Joint(e+1)` with those of `e` and `e + 1`, each in
//!   `logless_placement::codec`'s byte form. Changed only by compare-and-swap on the whole
//!   value (SET IFEQ), which holds the epoch, so of two changes from one stage one wins. The
//!   first node to find it empty writes the configuration every node derives from the peer
//!   list (SET NX; they all derive the same, since the peer hello refuses nodes of another
//!   peer list), so from the first start on the register, not the peer list, is the ring.
//! * [`report_key`]`(n)`: what node `n` installed last ([`InstallReport`]), written by `n` after
//!   installing, read by the coordinator ([`crate::ring_change`]) waiting for every node.
//! * [`high_key`]`(n)`: the highest round number node `n`'s data shards acknowledged, taken
//!   once it installed a joint stage ([`HighReport`], written by its data mover), read by the
//!   nodes that stage makes new replicas of a slot to start that slot above it (docs/ring.md
//!   §4 "Dead registers").
//!
//! Why every node as acceptor (rather than the R replicas of the key's slot, as for a client
//! key): every node must read the stage, and the register must survive any R − 1 failures of the
//! *ring*, not of one slot's replicas; a majority of N tolerates more failures than a majority
//! of R, and the register is read once per node per [`crate::ring_watch::READ_INTERVAL`], so the
//! N-wide quorum costs nothing that matters. Its acceptor set changes only when the peer list
//! does, which needs every node restarted with the new list (docs/ring.md §4 "Operating").
use bytes::Bytes;
use logless_commands::command::{Command, Condition, Expiry, Reply, SetArgs};
use logless_placement::{codec, Configuration, Epoch, Slot, SlotAcceptors, Stage};
use logless_rmw::ids::{Key, NodeId};
use logless_rmw::placement::Placement;
use tokio::sync::mpsc;

use crate::shard::{ReplyTo, ShardInput, Submitted};

/// The key of the stage register in the ring shard.
pub const STAGE_KEY: &[u8] = b"ring/stage";

/// The key of node `node`'s [`InstallReport`] in the ring shard.
pub fn report_key(node: u16) -> Vec<u8> {
    format!("ring/installed/{node}").into_bytes()
}

/// The key of node `node`'s [`HighReport`] in the ring shard.
pub fn high_key(node: u16) -> Vec<u8> {
    format!("ring/high/{node}").into_bytes()
}

/// The ring shard's peer shard number on a node of `shards` data shards.
pub fn ring_shard(shards: u16) -> u16 {
    shards
}

/// Whether a peer link of `shard` is the ring shard's: liveness is judged by the data shards'
/// links alone, since the ring shard's reads may go to a majority only and so never find a
/// dead peer's link broken.
pub fn is_ring_link(context: &crate::context::NodeContext, shard: u16) -> bool {
    context.ring.is_some() && shard == ring_shard(context.config.shards)
}

/// A stage as operators read it: `Stable(2)`, `Joint(3)`.
pub fn stage_name(stage: Stage) -> String {
    match stage {
        Stage::Stable(epoch) => format!("Stable({})", epoch.0),
        Stage::Joint(epoch) => format!("Joint({})", epoch.0),
    }
}

/// A stage of the ring with its configurations.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RingStage {
    /// Serving with this configuration alone.
    Stable(Configuration),
    /// Moving from `old` to `new` (`new`'s epoch is the next of `old`'s): slots whose replicas
    /// change need joint quorums.
    Joint {
        /// The configuration of epoch `e`.
        old: Configuration,
        /// The configuration of epoch `e + 1`.
        new: Configuration,
    },
}

const STABLE_TAG: u8 = b'S';
const JOINT_TAG: u8 = b'J';

impl RingStage {
    /// The stage without its configurations.
    pub fn stage(&self) -> Stage {
        match self {
            RingStage::Stable(config) => Stage::Stable(config.epoch()),
            RingStage::Joint { new, .. } => Stage::Joint(new.epoch()),
        }
    }

    /// The configuration the node routes commands by (forwarding, `MOVED`): the stable one, or
    /// the old one while joint (every old replica is an acceptor of the joint stage, and
    /// clients are sent to the new replicas only once the new configuration is stable).
    pub fn serving(&self) -> &Configuration {
        match self {
            RingStage::Stable(config) | RingStage::Joint { old: config, .. } => config,
        }
    }

    /// The configuration the ring is at or moving to.
    pub fn target(&self) -> &Configuration {
        match self {
            RingStage::Stable(config) | RingStage::Joint { new: config, .. } => config,
        }
    }

    /// Every node of the stage's configurations, sorted.
    pub fn nodes(&self) -> Vec<u16> {
        let mut nodes: Vec<u16> = match self {
            RingStage::Stable(config) => config.nodes().map(|n| n.0).collect(),
            RingStage::Joint { old, new } => old.nodes().chain(new.nodes()).map(|n| n.0).collect(),
        };
        nodes.sort_unstable();
        nodes.dedup();
        nodes
    }

    /// The slots whose acceptor set changes in a joint stage (none when stable).
    pub fn moving_slots(&self) -> Vec<Slot> {
        match self {
            RingStage::Stable(_) => Vec::new(),
            RingStage::Joint { old, new } => Slot::all()
                .filter(|&slot| {
                    matches!(
                        SlotAcceptors::moving(old, new, slot),
                        SlotAcceptors::Joint { .. }
                    )
                })
                .collect(),
        }
    }

    /// The engine's placement for this stage over `acceptors` (every node of the peer list,
    /// sorted, as every node lists them); fails naming a node the list lacks.
    pub fn placement(&self, acceptors: &[NodeId]) -> Result<Placement, String> {
        let placed = match self {
            RingStage::Stable(config) => Placement::new(config, acceptors),
            RingStage::Joint { old, new } => Placement::joint(old, new, acceptors),
        };
        placed.map_err(|e| {
            format!(
                "the ring's {} names node {} (for slot {}), which is not in this node's peer \
                 list: start it with the ring's peer list",
                stage_name(self.stage()),
                e.node,
                e.slot
            )
        })
    }

    /// The register's value.
    pub fn encode(&self) -> Bytes {
        let mut out = Vec::with_capacity(1 + 2 * codec::ENCODED_BYTES);
        match self {
            RingStage::Stable(config) => {
                out.push(STABLE_TAG);
                out.extend_from_slice(&codec::encode(config));
            }
            RingStage::Joint { old, new } => {
                out.push(JOINT_TAG);
                out.extend_from_slice(&codec::encode(old));
                out.extend_from_slice(&codec::encode(new));
            }
        }
        Bytes::from(out)
    }

    /// The stage a register value holds; refuses, with the reason, bytes that are not one.
    pub fn decode(bytes: &[u8]) -> Result<RingStage, String> {
        let config = |bytes: &[u8]| {
            codec::decode(bytes).map_err(|e| format!("the ring's stage register: {e}"))
        };
        let one = codec::ENCODED_BYTES;
        match bytes.split_first() {
            Some((&STABLE_TAG, rest)) => Ok(RingStage::Stable(config(rest)?)),
            Some((&JOINT_TAG, rest)) if rest.len() == 2 * one => {
                let (old, new) = (config(&rest[..one])?, config(&rest[one..])?);
                if new.epoch() != old.epoch().next() || new.replication() != old.replication() {
                    return Err(format!(
                        "the ring's stage register joins epoch {} (R = {}) to epoch {} (R = {})",
                        old.epoch().0,
                        old.replication().get(),
                        new.epoch().0,
                        new.replication().get()
                    ));
                }
                Ok(RingStage::Joint { old, new })
            }
            _ => Err(format!(
                "the ring's stage register holds {} bytes that are no stage",
                bytes.len()
            )),
        }
    }
}

/// What a node reports having installed: the stage, in a joint stage how far its data mover
/// got ([`crate::ring_mover`]; docs/ring.md §4 step 3), and how many registers its copy holds
/// of slots it does not replicate at that stage.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct InstallReport {
    /// The stage installed.
    pub stage: Stage,
    /// In a joint stage, the keys of the moving slots this node's mover found to write through,
    /// dead ones included (0 when stable).
    pub moving_keys: u64,
    /// In a joint stage, whether this node's mover has written through every key of the moving
    /// slots it syncs (true when stable: nothing to move).
    pub synced: bool,
    /// The registers (acceptor states, dead ones included) its data shards hold of slots the
    /// node does not replicate at the stage (in a joint stage, in neither configuration),
    /// counted when it reported: states of slots a change took from it, which it drops in the
    /// background (docs/ring.md §4 "Slots a node left"). A change gives the node slots only
    /// once its report of the ring's stage says 0 ([`crate::ring_change`]): otherwise it could
    /// become a replica of a slot again with its old votes. (A node of an earlier build
    /// reported every register its copy held here, which is never less.)
    pub registers_elsewhere: u64,
}

/// The bytes of an [`InstallReport`].
const REPORT_BYTES: usize = 1 + 8 + 8 + 1 + 8;

impl InstallReport {
    /// The report's register value: the stage's tag, its epoch, the key count, whether synced
    /// and the register count (26 bytes).
    pub fn encode(&self) -> Bytes {
        let (tag, epoch) = match self.stage {
            Stage::Stable(e) => (STABLE_TAG, e),
            Stage::Joint(e) => (JOINT_TAG, e),
        };
        let mut out = Vec::with_capacity(REPORT_BYTES);
        out.push(tag);
        out.extend_from_slice(&epoch.0.to_le_bytes());
        out.extend_from_slice(&self.moving_keys.to_le_bytes());
        out.push(u8::from(self.synced));
        out.extend_from_slice(&self.registers_elsewhere.to_le_bytes());
        Bytes::from(out)
    }

    /// The report a register value holds, if it is one.
    pub fn decode(bytes: &[u8]) -> Option<InstallReport> {
        if bytes.len() != REPORT_BYTES {
            return None;
        }
        let word = |at: usize| u64::from_le_bytes(bytes[at..at + 8].try_into().expect("8 bytes"));
        let epoch = Epoch(word(1));
        let stage = match bytes[0] {
            STABLE_TAG => Stage::Stable(epoch),
            JOINT_TAG => Stage::Joint(epoch),
            _ => return None,
        };
        let synced = match bytes[17] {
            0 => false,
            1 => true,
            _ => return None,
        };
        Some(InstallReport {
            stage,
            moving_keys: word(9),
            synced,
            registers_elsewhere: word(18),
        })
    }
}

/// The highest round number a node's data shards acknowledged for any register
/// (`Replica::high_round`, forgotten registers included through the round floor), taken after
/// the node installed the joint stage `stage`: from then on its acceptors decide on no message
/// of the stage before, so the number covers every round a majority of a moving slot's old
/// replicas promised in it. A node the stage makes a new replica of a slot raises its round
/// floor above the highest of a majority of the slot's old replicas before it answers for the
/// slot (docs/ring.md §4 "Dead registers"; [`crate::ring_mover`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HighReport {
    /// The joint stage installed before the rounds were taken.
    pub stage: Stage,
    /// The highest round number of any of the node's data shards.
    pub high: u64,
}

/// The bytes of a [`HighReport`].
const HIGH_REPORT_BYTES: usize = 1 + 8 + 8;

impl HighReport {
    /// The register value: the stage's tag, its epoch and the round number (17 bytes).
    pub fn encode(&self) -> Bytes {
        let (tag, epoch) = match self.stage {
            Stage::Stable(e) => (STABLE_TAG, e),
            Stage::Joint(e) => (JOINT_TAG, e),
        };
        let mut out = Vec::with_capacity(HIGH_REPORT_BYTES);
        out.push(tag);
        out.extend_from_slice(&epoch.0.to_le_bytes());
        out.extend_from_slice(&self.high.to_le_bytes());
        Bytes::from(out)
    }

    /// The report a register value holds, if it is one of a joint stage.
    pub fn decode(bytes: &[u8]) -> Option<HighReport> {
        if bytes.len() != HIGH_REPORT_BYTES || bytes[0] != JOINT_TAG {
            return None;
        }
        let word = |at: usize| u64::from_le_bytes(bytes[at..at + 8].try_into().expect("8 bytes"));
        Some(HighReport {
            stage: Stage::Joint(Epoch(word(1))),
            high: word(9),
        })
    }
}

/// Reads and writes registers of the ring shard through its input channel, as a client
/// connection does with a data shard.
#[derive(Clone, Debug)]
pub struct RingRegister {
    shard: mpsc::Sender<ShardInput>,
}

impl RingRegister {
    /// The registers of the ring shard fed by `shard`.
    pub fn new(shard: mpsc::Sender<ShardInput>) -> RingRegister {
        RingRegister { shard }
    }

    /// Has the ring shard commit what is pending, flush and stop.
    pub async fn stop(&self) {
        let _ = self.shard.send(ShardInput::Stop).await;
    }

    async fn run(&self, key: &[u8], command: Command) -> Result<Reply, String> {
        let (tx, mut rx) = mpsc::unbounded_channel();
        let submitted = Submitted {
            key: Key::from_slice(key),
            command,
            reply: ReplyTo { tx, seq: 0 },
        };
        self.shard
            .send(ShardInput::Commands(vec![submitted]))
            .await
            .map_err(|_| "the node is stopping".to_string())?;
        match rx.recv().await {
            Some((_, Ok(reply))) => Ok(reply),
            Some((_, Err(e))) => Err(format!("the ring's registers: {e}")),
            None => Err("the node is stopping".to_string()),
        }
    }

    /// The value of register `key` (a consistent read through a majority of every node).
    pub async fn get(&self, key: &[u8]) -> Result<Option<Bytes>, String> {
        match self.run(key, Command::Get).await? {
            Reply::Bulk(value) => Ok(Some(value)),
            Reply::Nil => Ok(None),
            other => Err(format!("the ring's registers answered GET with {other:?}")),
        }
    }

    /// Writes `value` to register `key` if it holds `expected` (absent: `None`); whether it did.
    /// An outcome the engine cannot tell is read back: the register holding `value` then means
    /// it was written.
    pub async fn swap(
        &self,
        key: &[u8],
        expected: Option<&Bytes>,
        value: Bytes,
    ) -> Result<bool, String> {
        let condition = expected.map_or(Condition::Nx, |old| Condition::IfEq(old.clone()));
        let set = Command::Set(SetArgs {
            value: value.clone(),
            condition,
            get: false,
            expiry: Expiry::Clear,
        });
        match self.run(key, set).await {
            Ok(Reply::Ok) => Ok(true),
            Ok(Reply::Nil) => Ok(false),
            Ok(other) => Err(format!("the ring's registers answered SET with {other:?}")),
            Err(e) => match self.get(key).await? {
                Some(now) if now == value => Ok(true),
                _ => Err(e),
            },
        }
    }

    /// Writes `value` to register `key`.
    pub async fn put(&self, key: &[u8], value: Bytes) -> Result<(), String> {
        let set = Command::Set(SetArgs {
            value,
            condition: Condition::Always,
            get: false,
            expiry: Expiry::Clear,
        });
        match self.run(key, set).await? {
            Reply::Ok => Ok(()),
            other => Err(format!("the ring's registers answered SET with {other:?}")),
        }
    }

    /// The stage the register holds, `None` before the ring's first start wrote it.
    pub async fn stage(&self) -> Result<Option<RingStage>, String> {
        self.get(STAGE_KEY)
            .await?
            .map(|bytes| RingStage::decode(&bytes))
            .transpose()
    }

    /// Swaps stage `from` for `to`; whether it did (false: another change came first).
    pub async fn swap_stage(&self, from: &RingStage, to: &RingStage) -> Result<bool, String> {
        self.swap(STAGE_KEY, Some(&from.encode()), to.encode())
            .await
    }

    /// The highest round number node `node` reported, and at which stage, if it reported one.
    pub async fn high(&self, node: u16) -> Result<Option<HighReport>, String> {
        Ok(self
            .get(&high_key(node))
            .await?
            .and_then(|bytes| HighReport::decode(&bytes)))
    }

    /// What node `node` reported installing last, if anything.
    pub async fn report(&self, node: u16) -> Result<Option<InstallReport>, String> {
        Ok(self
            .get(&report_key(node))
            .await?
            .and_then(|bytes| InstallReport::decode(&bytes)))
    }
}

#[cfg(test)]
mod tests {
    use logless_placement::{NodeId as PlacedId, Replication};

    use super::*;

    fn four() -> Configuration {
        let nodes: Vec<PlacedId> = (1..=4).map(PlacedId).collect();
        Configuration::balanced(&nodes, Replication::THREE).unwrap()
    }

    #[test]
    fn stages_round_trip_and_bad_values_are_refused() {
        let old = four();
        let new = old.with_node_removed(PlacedId(4)).unwrap();
        for stage in [
            RingStage::Stable(old.clone()),
            RingStage::Joint {
                old: old.clone(),
                new: new.clone(),
            },
            RingStage::Stable(new.clone()),
        ] {
            assert_eq!(RingStage::decode(&stage.encode()), Ok(stage));
        }
        let joint = RingStage::Joint {
            old: old.clone(),
            new: new.clone(),
        };
        assert_eq!(joint.stage(), Stage::Joint(Epoch(2)));
        assert_eq!(joint.serving(), &old);
        assert_eq!(joint.target(), &new);
        assert_eq!(joint.nodes(), vec![1, 2, 3, 4]);
        // Every slot node 4 replicated moves; the others keep their replicas.
        let moving = joint.moving_slots();
        assert!(moving
            .iter()
            .all(|&s| old.replicas(s).contains(PlacedId(4))));
        let held = Slot::all()
            .filter(|&s| old.replicas(s).contains(PlacedId(4)))
            .count();
        assert_eq!(moving.len(), held);
        assert!(RingStage::decode(b"").is_err());
        assert!(RingStage::decode(b"X").is_err());
        let mut truncated = joint.encode().to_vec();
        truncated.pop();
        assert!(RingStage::decode(&truncated).is_err());
        // Two configurations of the same epoch are no joint stage.
        let mut same = vec![JOINT_TAG];
        same.extend_from_slice(&codec::encode(&old));
        same.extend_from_slice(&codec::encode(&old));
        assert!(RingStage::decode(&same)
            .unwrap_err()
            .contains("joins epoch 1"));
    }

    #[test]
    fn reports_round_trip() {
        for report in [
            InstallReport {
                stage: Stage::Stable(Epoch(1)),
                moving_keys: 0,
                synced: true,
                registers_elsewhere: 0,
            },
            InstallReport {
                stage: Stage::Joint(Epoch(9)),
                moving_keys: 12345,
                synced: false,
                registers_elsewhere: 678,
            },
        ] {
            assert_eq!(report.encode().len(), REPORT_BYTES);
            assert_eq!(InstallReport::decode(&report.encode()), Some(report));
        }
        assert_eq!(InstallReport::decode(b"S1234567"), None);
        assert_eq!(InstallReport::decode(&[b'Q'; REPORT_BYTES]), None);
        // A report of the earlier 17-byte form is none: the node writes a new one.
        assert_eq!(InstallReport::decode(&[b'S'; 17]), None);
        let mut bad_flag = InstallReport {
            stage: Stage::Stable(Epoch(1)),
            moving_keys: 0,
            synced: true,
            registers_elsewhere: 0,
        }
        .encode()
        .to_vec();
        bad_flag[17] = 2;
        assert_eq!(InstallReport::decode(&bad_flag), None);
    }

    #[test]
    fn high_reports_round_trip_and_only_of_a_joint_stage() {
        let report = HighReport {
            stage: Stage::Joint(Epoch(3)),
            high: u64::MAX - 1,
        };
        assert_eq!(report.encode().len(), HIGH_REPORT_BYTES);
        assert_eq!(HighReport::decode(&report.encode()), Some(report));
        // A stable stage's is refused (the rounds are taken after a joint stage's install),
        // as are other lengths and tags.
        let mut stable = report.encode().to_vec();
        stable[0] = STABLE_TAG;
        assert_eq!(HighReport::decode(&stable), None);
        assert_eq!(HighReport::decode(&report.encode()[..16]), None);
        let mut bad = report.encode().to_vec();
        bad[0] = b'Q';
        assert_eq!(HighReport::decode(&bad), None);
        // An install report is no high report.
        let install = InstallReport {
            stage: Stage::Joint(Epoch(3)),
            moving_keys: 0,
            synced: false,
            registers_elsewhere: 0,
        };
        assert_eq!(HighReport::decode(&install.encode()), None);
    }

    #[test]
    fn a_placement_needs_every_node_among_the_acceptors() {
        let stage = RingStage::Stable(four());
        let all: Vec<NodeId> = (1..=4).map(NodeId).collect();
        assert_eq!(
            stage.placement(&all).unwrap().stage(),
            Stage::Stable(Epoch(1))
        );
        let err = stage.placement(&all[..3]).unwrap_err();
        assert!(err.contains("node 4"), "{err}");
    }
}
