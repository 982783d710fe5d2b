//! Lives, this node's and its peers': the lives of the peers this node has welcomed, kept in
//! `peers.json` in its data directory (for each peer node, the highest incarnation it welcomed
//! and the life, a random number the peer drew at its start, that spoke for it), and this
//! node's own [`Admission`] by its peers.
//!
//! A peer's incarnation only grows while its data directory lives, and one life speaks for one
//! incarnation. A hello with a lower incarnation, or with the same incarnation and another
//! life, therefore comes from a node whose data directory was lost or replaced: it may have
//! forgotten promises, and is refused (see `docs/lost-disk.md`). A record is durable before
//! the hello that raised it is welcomed, so a restart of this node forgets nothing it vouched
//! for.
use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use logless_rmw::ids::NodeId;
use serde::{Deserialize, Serialize};
use tokio::sync::watch;
use tracing::{error, info};

use crate::store::{self, OpenError};

/// One life of a peer, as its hello tells it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Life {
    /// The peer's incarnation.
    pub incarnation: u32,
    /// The random number it drew at its start.
    pub life: u64,
}

/// Why a hello was not welcomed.
#[derive(Debug, PartialEq, Eq)]
pub enum Refusal {
    /// The node is known from incarnation `known` (or another life of it): its identity is lost.
    Lost {
        /// The highest incarnation welcomed from it.
        known: u32,
    },
    /// The record could not be made durable.
    Io(String),
}

/// The record of peers' lives, shared by every inbound connection.
#[derive(Debug)]
pub struct Lives {
    path: PathBuf,
    seen: Mutex<BTreeMap<u16, Life>>,
}

impl Lives {
    /// Reads the record of the data directory `dir` (empty if there is none yet).
    pub fn open(dir: &Path) -> Result<Lives, OpenError> {
        let path = dir.join("peers.json");
        let seen = match std::fs::read(&path) {
            Ok(bytes) => serde_json::from_slice(&bytes).map_err(|e| {
                OpenError::Identity(format!("{} is not a record of peers: {e}", path.display()))
            })?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => BTreeMap::new(),
            Err(source) => {
                return Err(OpenError::Io {
                    what: "read",
                    path,
                    source,
                })
            }
        };
        Ok(Lives {
            path,
            seen: Mutex::new(seen),
        })
    }

    /// Welcomes `life` of `node` if its identity is not lost, recording it durably when it is
    /// new.
    pub fn welcome(&self, node: NodeId, life: Life) -> Result<(), Refusal> {
        let mut seen = self.seen.lock().expect("not poisoned");
        match seen.get(&node.0) {
            Some(known) if *known == life => return Ok(()),
            Some(known)
                if life.incarnation < known.incarnation
                    || (life.incarnation == known.incarnation && life.life != known.life) =>
            {
                return Err(Refusal::Lost {
                    known: known.incarnation,
                });
            }
            _ => {}
        }
        let mut next = seen.clone();
        next.insert(node.0, life);
        self.persist(&next).map_err(Refusal::Io)?;
        *seen = next;
        Ok(())
    }

    fn persist(&self, seen: &BTreeMap<u16, Life>) -> Result<(), String> {
        let tmp = self.path.with_extension("json.tmp");
        let write = || -> std::io::Result<()> {
            let mut file = std::fs::File::create(&tmp)?;
            file.write_all(&serde_json::to_vec_pretty(seen).expect("serialisable"))?;
            file.sync_all()?;
            std::fs::rename(&tmp, &self.path)?;
            let dir = self.path.parent().unwrap_or(Path::new("."));
            std::fs::File::open(dir)?.sync_all()
        };
        write().map_err(|e| format!("recording a peer's life in {}: {e}", self.path.display()))
    }
}

/// This node's admission by its peers: records the first welcome in its identity file, and
/// stops the node when a peer refuses it as lost.
#[derive(Debug)]
pub struct Admission {
    dir: PathBuf,
    /// The identity until a peer welcomed it (`None` after).
    pending: Mutex<Option<store::Identity>>,
    /// Whether the node rejoins after a lost disk.
    rejoining: bool,
    /// Why a peer refused this node, once one did.
    refusal: Mutex<Option<String>>,
    /// Stops the node.
    stop: watch::Sender<bool>,
}

impl Admission {
    /// The admission of the node of `identity` (in `dir`), which `stop` stops.
    pub fn new(dir: &Path, identity: &store::Identity, stop: watch::Sender<bool>) -> Admission {
        Admission {
            dir: dir.to_path_buf(),
            pending: Mutex::new((!identity.admitted).then(|| identity.clone())),
            rejoining: identity.rejoining,
            refusal: Mutex::new(None),
            stop,
        }
    }

    /// A peer welcomed this node: the first time, recorded durably before any frame is sent.
    pub fn welcomed(&self) -> Result<(), String> {
        let mut pending = self.pending.lock().expect("not poisoned");
        if let Some(identity) = pending.as_ref() {
            store::admit(&self.dir, identity).map_err(|e| e.to_string())?;
            info!(
                incarnation = identity.incarnation,
                "welcomed by the cluster"
            );
            *pending = None;
        }
        Ok(())
    }

    /// `peer` refused this node, in `incarnation`, as lost: it knows the node from
    /// incarnation `known`. Stops the node with the reason.
    pub fn refused(&self, peer: NodeId, incarnation: u32, known: u32) {
        let reason = if self.rejoining {
            format!(
                "node {peer} knows this node from incarnation {known}, above this rejoin's \
                 {incarnation}: start it with --rejoin again later, or check the clock",
                peer = peer.0
            )
        } else {
            format!(
                "node {peer} knows this node from incarnation {known}, but this data directory \
                 ({dir}) is new or another's (incarnation {incarnation}): the state this node had \
                 is lost, and it may have made promises it no longer remembers. Start it with \
                 --rejoin to recover its state from the other replicas (docs/lost-disk.md)",
                peer = peer.0,
                dir = self.dir.display()
            )
        };
        error!(%reason, "refused by a peer: stopping");
        self.refusal
            .lock()
            .expect("not poisoned")
            .get_or_insert(reason);
        let _ = self.stop.send(true);
    }

    /// Why a peer refused this node, if one did.
    pub fn refusal(&self) -> Option<String> {
        self.refusal.lock().expect("not poisoned").clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn life(incarnation: u32, life: u64) -> Life {
        Life { incarnation, life }
    }

    #[test]
    fn a_lower_incarnation_or_another_life_of_the_same_is_refused_across_restarts() {
        let dir = tempfile::tempdir().unwrap();
        let lives = Lives::open(dir.path()).unwrap();
        let two = NodeId(2);
        assert_eq!(lives.welcome(two, life(1, 10)), Ok(()));
        assert_eq!(lives.welcome(two, life(1, 10)), Ok(()), "a reconnect");
        assert_eq!(lives.welcome(two, life(3, 11)), Ok(()), "a restart");
        assert_eq!(lives.welcome(NodeId(3), life(1, 12)), Ok(()));
        let reopened = Lives::open(dir.path()).unwrap();
        assert_eq!(
            reopened.welcome(two, life(1, 13)),
            Err(Refusal::Lost { known: 3 }),
            "an emptied directory starts again at 1"
        );
        assert_eq!(
            reopened.welcome(two, life(3, 14)),
            Err(Refusal::Lost { known: 3 })
        );
        assert_eq!(reopened.welcome(two, life(4, 15)), Ok(()));
        assert_eq!(reopened.welcome(NodeId(3), life(1, 12)), Ok(()));
    }
}
