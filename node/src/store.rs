//! A replica's durable state: one slot file per shard holding the acceptor states, and the
//! identity file that makes every restart a new proposer incarnation.
//!
//! ```text
//! data_dir/
//!   identity.json      node id, shard count, engine, recovery mode, incarnation, whether a peer has welcomed
//!                      this directory's node and whether it rejoined after a lost disk
//!                      (rewritten atomically at each start and at the first welcome)
//!   peers.json         the peers' lives this node welcomed (see crate::lives)
//!   shard-0.slots      acceptor states of shard 0 (see docs/storage-format.md)
//!   shard-1.slots      ...
//! ```
//!
//! Besides the acceptor states, a shard's slot file holds its round floor (see
//! `docs/removal.md`) under [`ROUND_FLOOR_KEY`], a key one byte longer than any client's.
//! The states are compact records ([`crate::state_record`]); a slot file of format 2 is
//! migrated to format 3 when it is opened, its states rewritten compactly, with a log line.
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Instant;

use logless_rmw::acceptor::AcceptorState;
use logless_rmw::ids::{AttemptId, Key, NodeId, ProposerId, Round};
use logless_rmw::persist::{AcceptorStore, Location};
use logless_storage::media::{FileMedia, Media};
use logless_storage::slot_store::{self, RecoveryReport};
use logless_storage::{Durability, SlotStore, StoreError, StoreOptions};
use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::config::{Engine, Recovery};
use crate::state_record;

/// Why a replica's state could not be opened.
#[derive(Debug, Error)]
pub enum OpenError {
    /// A file operation failed.
    #[error("{what} {path}: {source}")]
    Io {
        /// What was being done.
        what: &'static str,
        /// On which file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The store refused to open.
    #[error("store {path}: {source}")]
    Store {
        /// The slot file.
        path: PathBuf,
        /// Why.
        source: StoreError,
    },
    /// The directory belongs to another node or another shard layout.
    #[error("{0}")]
    Identity(String),
    /// A stored record is damaged; serving without it could break a promise the acceptor made.
    #[error(
        "store {path}: {count} damaged record(s) found at recovery; this replica must not vote \
         without them. Move the data directory aside and start the replica empty only if the \
         other replicas hold a majority of the cluster's state"
    )]
    Damaged {
        /// The slot file.
        path: PathBuf,
        /// How many records.
        count: usize,
    },
    /// The acceptor table built from the store does not hold every register the store holds.
    #[error("store {path}: the acceptor table holds {held} registers of the store's {stored}")]
    Unheld {
        /// The slot file.
        path: PathBuf,
        /// The registers in the table.
        held: usize,
        /// The registers in the store.
        stored: usize,
    },
    /// A stored record is not an acceptor state.
    #[error("store {path}: key {key:?} holds an undecodable acceptor state: {message}")]
    Undecodable {
        /// The slot file.
        path: PathBuf,
        /// The key.
        key: String,
        /// Why.
        message: String,
    },
}

/// The identity written into the data directory.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct Identity {
    /// The node id the directory belongs to.
    pub node_id: u16,
    /// The shard count its keys are partitioned by.
    pub shards: u16,
    /// The incarnation of the current run (1 at the first start).
    pub incarnation: u32,
    /// The engine whose state the directory holds (absent in directories written before
    /// there was a choice: those are the per-key engine's).
    #[serde(default)]
    pub engine: Engine,
    /// How the log engine's replica recovers (absent in directories written before there was
    /// a choice: those recover by FullSS). A directory of one mode holds nothing the other can
    /// use: FullSS's log and snapshots, or EpochSS's epoch.
    #[serde(default)]
    pub recovery: Recovery,
    /// Whether a peer has welcomed this directory's node (a directory of a cluster of one is
    /// welcomed at once). Until then a restart keeps the incarnation: no peer knows it, and a
    /// directory that is refused as lost must not climb past the peers' record by restarting.
    /// Directories written before this field existed were welcomed.
    #[serde(default = "welcomed_before")]
    pub admitted: bool,
    /// Whether the directory's node rejoined after losing its state: its acceptor then answers
    /// for a register only once it recovered it (see `docs/lost-disk.md`), at every start.
    #[serde(default)]
    pub rejoining: bool,
}

fn welcomed_before() -> bool {
    true
}

/// How a start claims its data directory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Claim {
    /// An ordinary start: a new directory is a new node's.
    Start,
    /// The node lost its state and rejoins (`--rejoin`), in an incarnation at least this one
    /// (from the clock: above every ordinary incarnation of the node's earlier directories).
    Rejoin {
        /// The lowest incarnation to take.
        incarnation_min: u32,
    },
}

/// Claims `dir` for `node_id` with `shards` shards of `engine` recovering by `recovery` and
/// returns the identity of this run, with the incarnation one above the last one if a peer
/// welcomed it (durably written before it is used; see [`Claim`] for a rejoin). A directory of
/// another node, shard count, engine or recovery mode is refused.
pub fn next_incarnation(
    dir: &Path,
    node_id: u16,
    shards: u16,
    (engine, recovery): (Engine, Recovery),
    claim: Claim,
) -> Result<Identity, OpenError> {
    let io = |what: &'static str, path: &Path| {
        let path = path.to_path_buf();
        move |source| OpenError::Io { what, path, source }
    };
    std::fs::create_dir_all(dir).map_err(io("create", dir))?;
    let path = dir.join("identity.json");
    let previous = match std::fs::read(&path) {
        Ok(bytes) => Some(serde_json::from_slice::<Identity>(&bytes).map_err(|e| {
            OpenError::Identity(format!("{} is not an identity file: {e}", path.display()))
        })?),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => return Err(io("read", &path)(e)),
    };
    if let Some(p) = &previous {
        if p.node_id != node_id {
            return Err(OpenError::Identity(format!(
                "{} belongs to node {}, not node {node_id}",
                dir.display(),
                p.node_id
            )));
        }
        if p.engine != engine {
            return Err(OpenError::Identity(format!(
                "{} holds the {} engine's state, not the {engine} engine's: start it with \
                 --engine {} (or engine = \"{}\"), or give this engine another data directory",
                dir.display(),
                p.engine,
                p.engine,
                p.engine
            )));
        }
        if p.recovery != recovery {
            return Err(OpenError::Identity(format!(
                "{} was written under --recovery {}, not {recovery}: the other mode cannot use \
                 what it holds. Start it with --recovery {} (or recovery = \"{}\"), or give \
                 this mode another data directory",
                dir.display(),
                p.recovery,
                p.recovery,
                p.recovery
            )));
        }
        if p.shards != shards {
            return Err(OpenError::Identity(format!(
                "{} was written with {} shards; keys are partitioned by the shard count, so it \
                 cannot be opened with {shards}",
                dir.display(),
                p.shards
            )));
        }
    }
    let next = match &previous {
        None => 1,
        Some(p) if p.admitted => p.incarnation.saturating_add(1),
        Some(p) => p.incarnation,
    };
    let identity = match claim {
        Claim::Start => Identity {
            node_id,
            shards,
            engine,
            recovery,
            incarnation: next,
            admitted: previous.as_ref().is_some_and(|p| p.admitted),
            rejoining: previous.as_ref().is_some_and(|p| p.rejoining),
        },
        Claim::Rejoin { incarnation_min } => Identity {
            node_id,
            shards,
            engine,
            recovery,
            incarnation: next.max(incarnation_min),
            admitted: false,
            rejoining: true,
        },
    };
    write_identity(dir, &identity)?;
    Ok(identity)
}

/// Records that a peer welcomed this directory's node (see [`Identity::admitted`]).
pub fn admit(dir: &Path, identity: &Identity) -> Result<(), OpenError> {
    write_identity(
        dir,
        &Identity {
            admitted: true,
            ..identity.clone()
        },
    )
}

fn write_identity(dir: &Path, identity: &Identity) -> Result<(), OpenError> {
    let io = |what: &'static str, path: &Path| {
        let path = path.to_path_buf();
        move |source| OpenError::Io { what, path, source }
    };
    let path = dir.join("identity.json");
    let tmp = dir.join("identity.json.tmp");
    let mut file = std::fs::File::create(&tmp).map_err(io("create", &tmp))?;
    file.write_all(&serde_json::to_vec_pretty(&identity).expect("serialisable"))
        .and_then(|()| file.sync_all())
        .map_err(io("write", &tmp))?;
    std::fs::rename(&tmp, &path).map_err(io("rename", &tmp))?;
    std::fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(io("sync", dir))
}

/// The key of the shard's round floor: longer than [`logless_commands::KEY_BYTES_MAX`], so no
/// client key is it.
pub const ROUND_FLOOR_KEY: [u8; logless_commands::KEY_BYTES_MAX + 1] =
    [0xff; logless_commands::KEY_BYTES_MAX + 1];

/// The format of the round floor record: version, then `n`, node, incarnation and sequence
/// number of the round, little-endian.
const ROUND_FLOOR_FORMAT: u8 = 1;
const ROUND_FLOOR_BYTES: usize = 1 + 8 + 2 + 4 + 8;

fn encode_round_floor(floor: Round) -> [u8; ROUND_FLOOR_BYTES] {
    let mut out = [0; ROUND_FLOOR_BYTES];
    out[0] = ROUND_FLOOR_FORMAT;
    out[1..9].copy_from_slice(&floor.n.to_le_bytes());
    out[9..11].copy_from_slice(&floor.id.proposer.node.0.to_le_bytes());
    out[11..15].copy_from_slice(&floor.id.proposer.incarnation.to_le_bytes());
    out[15..23].copy_from_slice(&floor.id.seq.to_le_bytes());
    out
}

fn decode_round_floor(bytes: &[u8]) -> Option<Round> {
    if bytes.len() != ROUND_FLOOR_BYTES || bytes[0] != ROUND_FLOOR_FORMAT {
        return None;
    }
    let u64_at = |at: usize| u64::from_le_bytes(bytes[at..at + 8].try_into().expect("8 bytes"));
    Some(Round {
        n: u64_at(1),
        id: AttemptId {
            proposer: ProposerId {
                node: NodeId(u16::from_le_bytes([bytes[9], bytes[10]])),
                incarnation: u32::from_le_bytes(bytes[11..15].try_into().expect("4 bytes")),
            },
            seq: u64_at(15),
        },
    })
}

/// The store of one shard, as the core's [`AcceptorStore`].
pub struct ShardStore<M: Media = FileMedia> {
    slots: SlotStore<M>,
    /// The slot file's path, for errors.
    path: PathBuf,
    record: Vec<u8>,
    /// The round floor recovered at open and written since.
    round_floor: Round,
    /// Where the slot store holds the round floor, if it does: a store without its index
    /// ([`StoreOptions::located`]) finds it there only.
    round_floor_at: Option<slot_store::Location>,
    /// Flushes done, and their total time.
    pub flushes: u64,
    /// Total time spent in flushes.
    pub flush_micros: u64,
}

/// An opened shard store and the acceptor states it holds.
pub type Opened<M = FileMedia> = (ShardStore<M>, Vec<(Key, AcceptorState)>);

/// The acceptor states of a [`ShardStore`], decoded one at a time ([`ShardStore::states`]).
pub struct Decoding<'a> {
    /// The slot file's path, for errors.
    path: &'a Path,
    records: Box<dyn Iterator<Item = (slot_store::Location, &'a [u8], &'a [u8])> + 'a>,
    /// The registers not decoded yet.
    left: usize,
    /// The first record that did not decode.
    failure: Option<OpenError>,
}

impl<'a> Decoding<'a> {
    /// Whether every state decoded: the error of the first that did not, if one did not.
    pub fn finish(self) -> Result<(), OpenError> {
        self.failure.map_or(Ok(()), Err)
    }

    /// The states with where the store holds each (for
    /// [`logless_rmw::replica::Replica::new_located`]), decoded as the decoding itself does.
    pub fn located(&mut self) -> Located<'_, 'a> {
        Located(self)
    }

    /// The next register, its state decoded, and its location.
    fn next_located(&mut self) -> Option<(Key, AcceptorState, Location)> {
        if self.failure.is_some() {
            return None;
        }
        let (at, key, record) = self.records.find(|(_, key, _)| *key != ROUND_FLOOR_KEY)?;
        self.left -= 1;
        match state_record::decode(record) {
            Ok(state) => Some((Key::from_slice(key), state, Location(at.to_u64()))),
            Err(e) => {
                self.failure = Some(OpenError::Undecodable {
                    path: self.path.to_path_buf(),
                    key: String::from_utf8_lossy(key).into_owned(),
                    message: e.to_string(),
                });
                None
            }
        }
    }
}

/// The states of a [`Decoding`] with their locations ([`Decoding::located`]).
pub struct Located<'d, 'a>(&'d mut Decoding<'a>);

impl Iterator for Located<'_, '_> {
    type Item = (Key, AcceptorState, Location);

    fn next(&mut self) -> Option<(Key, AcceptorState, Location)> {
        self.0.next_located()
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        self.0.size_hint()
    }
}

impl Iterator for Decoding<'_> {
    type Item = (Key, AcceptorState);

    fn next(&mut self) -> Option<(Key, AcceptorState)> {
        (self.next_located()).map(|(key, state, _)| (key, state))
    }

    /// At most the registers left: fewer if one does not decode.
    fn size_hint(&self) -> (usize, Option<usize>) {
        (0, Some(self.left))
    }
}

/// The store options a node uses for values up to `value_bytes_max`.
pub fn store_options(durability: Durability, value_bytes_max: usize) -> StoreOptions {
    let mut options = StoreOptions::new(durability);
    // The record holds the value plus rounds, request id and encoding overhead.
    options.record_bytes_max = (value_bytes_max + 4096).next_power_of_two();
    // Room for the round floor's key, one byte longer than any client's.
    options.key_bytes_max = ROUND_FLOOR_KEY.len();
    options
}

impl ShardStore {
    /// Opens the slot file of `shard` under `dir` and returns the acceptor states it holds.
    pub fn open(dir: &Path, shard: u16, options: StoreOptions) -> Result<Opened, OpenError> {
        ShardStore::open_store(dir, shard, options)?.with_states()
    }

    /// Opens the slot file of `shard` under `dir`, refusing a damaged one, without decoding
    /// its acceptor states: [`ShardStore::states`] decodes them one at a time, so that a
    /// replica's table is built from them without a copy of them all in between (150 MB at
    /// 10⁶ registers, which the kernel must zero at start-up).
    pub fn open_store(
        dir: &Path,
        shard: u16,
        options: StoreOptions,
    ) -> Result<ShardStore, OpenError> {
        let path = dir.join(format!("shard-{shard}.slots"));
        // The round floor keeps its own record; the acceptor states become compact.
        let (slots, report) = SlotStore::open_migrating(&path, options, |key, record, out| {
            if key == ROUND_FLOOR_KEY {
                out.extend_from_slice(record);
            } else {
                state_record::migrate(record, out);
            }
        })
        .map_err(|source| OpenError::Store {
            path: path.clone(),
            source,
        })?;
        if let Some(version) = report.migrated_from {
            tracing::warn!(
                "store {}: migrated from slot file format {version} to format {}: {} records \
                 rewritten, acceptor states in the compact encoding",
                path.display(),
                logless_storage::slot_store::FORMAT_VERSION,
                report.records
            );
        }
        ShardStore::recover(slots, report, path)
    }
}

impl<M: Media> ShardStore<M> {
    /// Opens a store on `media` (the simulation's), named `path` in errors.
    pub fn open_on(media: M, options: StoreOptions, path: PathBuf) -> Result<Opened<M>, OpenError> {
        ShardStore::open_store_on(media, options, path)?.with_states()
    }

    /// Refuses a damaged store, else reads its round floor.
    fn recover(
        slots: SlotStore<M>,
        report: RecoveryReport,
        path: PathBuf,
    ) -> Result<ShardStore<M>, OpenError> {
        if !report.damaged.is_empty() {
            return Err(OpenError::Damaged {
                path,
                count: report.damaged.len(),
            });
        }
        let round_floor_at = slots.location(&ROUND_FLOOR_KEY);
        let round_floor = match slots.get(&ROUND_FLOOR_KEY) {
            None => Round::BOTTOM,
            Some(record) => decode_round_floor(record).ok_or_else(|| OpenError::Undecodable {
                path: path.clone(),
                key: "(round floor)".into(),
                message: "not a round floor record".into(),
            })?,
        };
        Ok(ShardStore {
            slots,
            path,
            record: Vec::new(),
            round_floor,
            round_floor_at,
            flushes: 0,
            flush_micros: 0,
        })
    }

    /// The store with every acceptor state it holds, decoded.
    /// Opens the slot file on `media` without decoding its acceptor states (see
    /// [`ShardStore::open_store`]).
    pub fn open_store_on(
        media: M,
        options: StoreOptions,
        path: PathBuf,
    ) -> Result<ShardStore<M>, OpenError> {
        let (slots, report) =
            SlotStore::open_on(media, options).map_err(|source| OpenError::Store {
                path: path.clone(),
                source,
            })?;
        ShardStore::recover(slots, report, path)
    }

    /// The states, without their locations: only for a store that keeps its index (a replica
    /// started from them writes each register first without a location, which a store
    /// without its index would take for a new one).
    fn with_states(self) -> Result<Opened<M>, OpenError> {
        assert!(
            !self.slots.options().located,
            "a store without its index is opened with its states' locations"
        );
        let mut decoding = self.states();
        let states: Vec<_> = (&mut decoding).collect();
        decoding.finish()?;
        Ok((self, states))
    }

    /// The acceptor states the store holds, decoded one at a time in the slot store's order
    /// (for [`logless_rmw::replica::Replica::new`]). Decoding stops at the first record that
    /// does not decode: [`Decoding::finish`] then returns the error.
    pub fn states(&self) -> Decoding<'_> {
        Decoding {
            path: &self.path,
            records: Box::new(self.slots.iter_located()),
            left: self.registers(),
            failure: None,
        }
    }
    /// The largest key the store accepts for a register (one less than the slot store's: the
    /// longest is the round floor's).
    pub fn key_bytes_max(&self) -> usize {
        self.slots.options().key_bytes_max - 1
    }

    /// The shard's round floor, as recovered or last written: the replica starts with it
    /// ([`logless_rmw::replica::Replica::with_round_floor`]).
    pub fn round_floor(&self) -> Round {
        self.round_floor
    }

    /// How many registers the store holds.
    pub fn registers(&self) -> usize {
        self.slots.len() - usize::from(self.round_floor_at.is_some())
    }

    /// Checks that `held`, the registers of the acceptor table built from this store's
    /// states, are every register the store holds, and then (with
    /// [`StoreOptions::located`]) drops the store's index: from then on the table's
    /// locations are the only way to the registers' records, which is sound only if the table
    /// holds every one of them (`docs/storage-format.md`, "Without the index").
    pub fn started(&mut self, held: usize) -> Result<(), OpenError> {
        if held != self.registers() {
            return Err(OpenError::Unheld {
                path: self.path.clone(),
                held,
                stored: self.registers(),
            });
        }
        if self.slots.options().located {
            self.slots.drop_index();
        }
        Ok(())
    }

    /// How many slots are free for reuse.
    pub fn free_slots(&self) -> usize {
        self.slots.free_slots()
    }

    /// The durable state of `key` (as of the last flush), for a replica to go back to after
    /// the store refused a write of it for lack of space.
    pub fn durable_state(
        &self,
        key: &Key,
        location: Location,
    ) -> Result<Option<AcceptorState>, StoreError> {
        let at = slot_store::Location::from_u64(location.0);
        let Some(record) = self.slots.get_at(at, key.as_bytes())? else {
            return Ok(None);
        };
        state_record::decode(record)
            .map(Some)
            .map_err(|_| StoreError::Corrupt {
                what: "an acceptor state that does not decode",
                offset_bytes: 0,
            })
    }

    /// Whether the slot file may soon need to grow and the disk has no room for it: less than
    /// one append chunk is left past the slots in use, and the disk has less than a chunk free
    /// ([`Media::has_room`], a hint). Changes nothing.
    pub fn short_of_room(&self) -> bool {
        let chunk = self.slots.options().append_chunk_bytes;
        let room = self.slots.media().len() as u64 - self.slots.end_bytes();
        room < chunk as u64 && !self.slots.media().has_room(chunk)
    }

    /// Whether the disk has room again after it was full: grows the slot file by one append
    /// chunk if it can (later appends use that room). An error other than a full disk is
    /// returned: the store failed.
    pub fn space_returned(&mut self) -> Result<bool, StoreError> {
        let chunk = self.slots.options().append_chunk_bytes;
        match self.slots.try_grow(chunk) {
            Ok(()) => Ok(true),
            Err(e) if <Self as AcceptorStore>::is_full(&e) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// The media under the store.
    pub fn media(&self) -> &M {
        self.slots.media()
    }

    /// The media, mutably (simulations arm crash points on it).
    pub fn media_mut(&mut self) -> &mut M {
        self.slots.media_mut()
    }
}

impl<M: Media> AcceptorStore for ShardStore<M> {
    type Error = StoreError;

    fn write(&mut self, key: &Key, state: &AcceptorState) -> Result<(), StoreError> {
        self.write_at(key, Location::UNKNOWN, state).map(|_| ())
    }

    /// The slot store finds the register's record through `location`, its own
    /// [`slot_store::Location`], without a lookup by key (a stale one it detects).
    fn write_at(
        &mut self,
        key: &Key,
        location: Location,
        state: &AcceptorState,
    ) -> Result<Location, StoreError> {
        self.record.clear();
        state_record::encode(state, &mut self.record);
        let at = slot_store::Location::from_u64(location.0);
        let now = self.slots.put_at(at, key.as_bytes(), &self.record)?;
        Ok(Location(now.to_u64()))
    }

    fn flush(&mut self) -> Result<(), StoreError> {
        let started = Instant::now();
        let result = self.slots.flush();
        self.flushes += 1;
        self.flush_micros += started.elapsed().as_micros() as u64;
        result
    }

    fn write_round_floor(&mut self, floor: Round) -> Result<(), StoreError> {
        let at = (self.slots).put_at(
            self.round_floor_at,
            &ROUND_FLOOR_KEY,
            &encode_round_floor(floor),
        )?;
        self.round_floor = floor;
        self.round_floor_at = Some(at);
        Ok(())
    }

    fn remove(&mut self, key: &Key) -> Result<(), StoreError> {
        self.remove_at(key, Location::UNKNOWN)
    }

    fn remove_at(&mut self, key: &Key, location: Location) -> Result<(), StoreError> {
        let at = slot_store::Location::from_u64(location.0);
        self.slots.remove_at(at, key.as_bytes()).map(|_| ())
    }

    /// A full disk (or quota, or file size limit) when the slot file had to grow, or the
    /// file at its configured limit: the store changed nothing and goes on.
    fn is_full(error: &StoreError) -> bool {
        error.is_no_space() || matches!(error, StoreError::FileFull { .. })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const RMW: (Engine, Recovery) = (Engine::Rmw, Recovery::Fullss);
    const LOG: (Engine, Recovery) = (Engine::Multipaxos, Recovery::Fullss);
    const LOG_EPOCH: (Engine, Recovery) = (Engine::Multipaxos, Recovery::Epoch);

    #[test]
    fn a_directory_keeps_its_recovery_mode() {
        let dir = tempfile::tempdir().unwrap();
        let start = |mode| next_incarnation(dir.path(), 1, 1, mode, Claim::Start);
        assert_eq!(start(LOG_EPOCH).unwrap().recovery, Recovery::Epoch);
        let Err(OpenError::Identity(refused)) = start(LOG) else {
            panic!("an EpochSS directory is refused under FullSS");
        };
        assert!(
            refused.contains("under --recovery epoch, not fullss")
                && refused.contains("Start it with --recovery epoch"),
            "{refused}"
        );
        start(LOG_EPOCH).unwrap();
        // A directory written before the choice existed recovers by FullSS.
        let old = tempfile::tempdir().unwrap();
        std::fs::write(
            old.path().join("identity.json"),
            r#"{"node_id": 1, "shards": 1, "incarnation": 3, "engine": "multipaxos"}"#,
        )
        .unwrap();
        assert!(next_incarnation(old.path(), 1, 1, LOG_EPOCH, Claim::Start).is_err());
        let identity = next_incarnation(old.path(), 1, 1, LOG, Claim::Start).unwrap();
        assert_eq!(identity.recovery, Recovery::Fullss);
    }

    #[test]
    fn incarnations_grow_once_welcomed_and_identity_is_checked() {
        let dir = tempfile::tempdir().unwrap();
        let start = |node, shards| next_incarnation(dir.path(), node, shards, RMW, Claim::Start);
        let first = start(2, 4).unwrap();
        assert_eq!((first.incarnation, first.admitted), (1, false));
        // No peer welcomed it: a restart keeps the incarnation.
        assert_eq!(start(2, 4).unwrap().incarnation, 1);
        admit(dir.path(), &first).unwrap();
        let second = start(2, 4).unwrap();
        assert_eq!((second.incarnation, second.admitted), (2, true));
        assert_eq!(start(2, 4).unwrap().incarnation, 3);
        assert!(matches!(start(3, 4), Err(OpenError::Identity(_))));
        assert!(matches!(start(2, 8), Err(OpenError::Identity(_))));
        // A directory written before `admitted` existed was welcomed.
        std::fs::write(
            dir.path().join("identity.json"),
            br#"{"node_id": 2, "shards": 4, "incarnation": 7}"#,
        )
        .unwrap();
        assert_eq!(start(2, 4).unwrap().incarnation, 8);
        let Err(OpenError::Identity(refused)) =
            next_incarnation(dir.path(), 2, 4, LOG, Claim::Start)
        else {
            panic!("a directory of another engine is refused");
        };
        assert!(refused.contains("rmw engine's state"), "{refused}");
    }

    #[test]
    fn a_rejoin_takes_an_incarnation_from_the_clock_and_stays_rejoining() {
        let dir = tempfile::tempdir().unwrap();
        let claim = Claim::Rejoin {
            incarnation_min: 5_000,
        };
        let rejoined = next_incarnation(dir.path(), 2, 4, RMW, claim).unwrap();
        assert_eq!(
            (rejoined.incarnation, rejoined.admitted, rejoined.rejoining),
            (5_000, false, true)
        );
        admit(dir.path(), &rejoined).unwrap();
        let restarted = next_incarnation(dir.path(), 2, 4, RMW, Claim::Start).unwrap();
        assert_eq!((restarted.incarnation, restarted.rejoining), (5_001, true));
    }

    #[test]
    fn a_directory_without_an_engine_is_the_per_key_engines() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("identity.json"),
            r#"{"node_id": 1, "shards": 1, "incarnation": 7}"#,
        )
        .unwrap();
        assert!(next_incarnation(dir.path(), 1, 1, LOG, Claim::Start).is_err());
        let identity = next_incarnation(dir.path(), 1, 1, RMW, Claim::Start).unwrap();
        assert_eq!((identity.incarnation, identity.engine), (8, Engine::Rmw));
    }

    #[test]
    fn states_survive_reopening() {
        let dir = tempfile::tempdir().unwrap();
        let options = store_options(Durability::Mmap, 1024);
        let state = AcceptorState {
            r_ack: Round {
                n: 3,
                id: logless_rmw::ids::AttemptId::BOTTOM,
            },
            ..AcceptorState::default()
        };
        {
            let (mut store, states) = ShardStore::open(dir.path(), 0, options.clone()).unwrap();
            assert!(states.is_empty());
            store.write(&Key::new("k"), &state).unwrap();
            store.flush().unwrap();
            assert_eq!(store.flushes, 1);
        }
        let (_, states) = ShardStore::open(dir.path(), 0, options).unwrap();
        assert_eq!(states, vec![(Key::new("k"), state)]);
    }

    /// Removal by counts: a forgotten register leaves the store and frees its slot; the round
    /// floor survives reopening and is not counted as a register.
    #[test]
    fn a_removed_register_frees_its_slot_and_the_floor_survives_reopening() {
        let dir = tempfile::tempdir().unwrap();
        let options = store_options(Durability::Mmap, 1024);
        let floor = Round {
            n: 9,
            id: AttemptId {
                proposer: ProposerId {
                    node: NodeId(2),
                    incarnation: 3,
                },
                seq: 4,
            },
        };
        let keys: Vec<Key> = (0..4).map(|i| Key::new(format!("k{i}"))).collect();
        {
            let (mut store, _) = ShardStore::open(dir.path(), 0, options.clone()).unwrap();
            for key in &keys {
                store.write(key, &AcceptorState::default()).unwrap();
            }
            store.flush().unwrap();
            assert_eq!(store.registers(), 4);
            store.write_round_floor(floor).unwrap();
            store.flush().unwrap();
            assert_eq!(store.registers(), 4, "the floor is no register");
            let free = store.free_slots();
            store.remove(&keys[1]).unwrap();
            store.remove(&keys[2]).unwrap();
            store.flush().unwrap();
            assert_eq!(store.registers(), 2);
            assert_eq!(store.round_floor(), floor);
            assert_eq!(store.free_slots(), free + 2);
        }
        let (store, states) = ShardStore::open(dir.path(), 0, options).unwrap();
        assert_eq!(store.round_floor(), floor);
        assert_eq!(store.registers(), 2);
        let recovered: Vec<&Key> = states.iter().map(|(k, _)| k).collect();
        assert_eq!(recovered, [&keys[0], &keys[3]]);
    }

    /// Without the store's index, as the node runs (`mmap`): registers are written (a new one
    /// twice in its first batch), read back and removed at the locations the store gave, the
    /// round floor at its own, and a restart
    /// names each register's location again; a table that does not hold every register is
    /// refused.
    #[test]
    fn without_the_index_registers_live_at_their_locations() {
        let dir = tempfile::tempdir().unwrap();
        let mut options = store_options(Durability::Mmap, 1024);
        options.located = true;
        let state = |n| AcceptorState {
            r_ack: Round {
                n,
                id: AttemptId::BOTTOM,
            },
            ..AcceptorState::default()
        };
        let floor = Round {
            n: 9,
            id: AttemptId::BOTTOM,
        };
        let keys: Vec<Key> = (0..4).map(|i| Key::new(format!("k{i}"))).collect();
        let mut at = Vec::new();
        {
            let mut store = ShardStore::open_store(dir.path(), 0, options.clone()).unwrap();
            store.started(0).unwrap();
            for key in &keys {
                at.push(store.write_at(key, Location::UNKNOWN, &state(1)).unwrap());
            }
            // A new register written twice in a batch (a PREPARE, then a VOTE: the table
            // has no location for it until the batch is flushed) keeps its one slot, also
            // where every put is persisted at once.
            for (key, at) in keys.iter().zip(&at) {
                assert_eq!(
                    store.write_at(key, Location::UNKNOWN, &state(1)).unwrap(),
                    *at
                );
            }
            store.write_round_floor(floor).unwrap();
            store.flush().unwrap();
            for (key, at) in keys.iter().zip(&at) {
                assert_eq!(store.write_at(key, *at, &state(2)).unwrap(), *at);
            }
            store.write_round_floor(floor).unwrap();
            store.remove_at(&keys[1], at[1]).unwrap();
            store.flush().unwrap();
            assert_eq!(store.registers(), 3);
            assert_eq!(
                store.durable_state(&keys[0], at[0]).unwrap(),
                Some(state(2))
            );
            assert_eq!(
                store.durable_state(&keys[1], Location::UNKNOWN).unwrap(),
                None
            );
            assert!(store.durable_state(&keys[1], at[1]).is_err(), "removed");
        }
        let mut store = ShardStore::open_store(dir.path(), 0, options.clone()).unwrap();
        assert_eq!(store.round_floor(), floor);
        let mut decoding = store.states();
        let recovered: Vec<(Key, AcceptorState, Location)> = decoding.located().collect();
        decoding.finish().unwrap();
        let expected: Vec<(Key, AcceptorState, Location)> =
            [0, 2, 3].map(|i| (keys[i].clone(), state(2), at[i])).into();
        assert_eq!(recovered, expected);
        assert!(matches!(
            store.started(2),
            Err(OpenError::Unheld {
                held: 2,
                stored: 3,
                ..
            })
        ));
        store.started(3).unwrap();
        assert_eq!(store.write_at(&keys[3], at[3], &state(3)).unwrap(), at[3]);
        store.write_round_floor(floor).unwrap();
        store.flush().unwrap();
        drop(store);
        let (_, states) =
            ShardStore::open(dir.path(), 0, store_options(Durability::Mmap, 1024)).unwrap();
        assert_eq!(states.len(), 3, "one record per register, the floor apart");
        assert_eq!(states[2], (keys[3].clone(), state(3)));
    }

    /// The node's start-up decodes the states one at a time: every register but the floor,
    /// and a record that does not decode stops the decoding with the store's error.
    #[test]
    fn states_decode_one_at_a_time_and_an_undecodable_one_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let options = store_options(Durability::Mmap, 1024);
        {
            let mut store = ShardStore::open_store(dir.path(), 0, options.clone()).unwrap();
            store
                .write(&Key::new("a"), &AcceptorState::default())
                .unwrap();
            store
                .write(&Key::new("b"), &AcceptorState::default())
                .unwrap();
            store.write_round_floor(Round::BOTTOM).unwrap();
            store.flush().unwrap();
            let mut states = store.states();
            assert_eq!(states.size_hint(), (0, Some(2)));
            let keys: Vec<Key> = (&mut states).map(|(key, _)| key).collect();
            assert_eq!(keys, [Key::new("a"), Key::new("b")]);
            states.finish().unwrap();
            store.slots.put(b"c", b"not a state").unwrap();
            store.slots.flush().unwrap();
        }
        let store = ShardStore::open_store(dir.path(), 0, options).unwrap();
        let mut states = store.states();
        assert_eq!((&mut states).count(), 2);
        let error = states.finish().unwrap_err();
        assert!(
            matches!(&error, OpenError::Undecodable { key, .. } if key == "c"),
            "{error}"
        );
    }

    #[test]
    fn round_floors_decode_to_themselves_and_damage_is_refused() {
        let floor = Round {
            n: u64::MAX - 1,
            id: AttemptId {
                proposer: ProposerId {
                    node: NodeId(7),
                    incarnation: u32::MAX,
                },
                seq: 1 << 40,
            },
        };
        let bytes = encode_round_floor(floor);
        assert_eq!(decode_round_floor(&bytes), Some(floor));
        assert_eq!(decode_round_floor(&bytes[1..]), None);
        let mut version = bytes;
        version[0] = 9;
        assert_eq!(decode_round_floor(&version), None);
    }
}
