//! The key-value service on the B⁺-tree: its commands, replies, C-Dep and C-G.
//!
//! C-Dep (seed 004 §V-A). A read changes nothing; an update changes the one entry of its key;
//! an insert or a delete may split, merge or rebalance nodes anywhere on its path, so it can
//! change entries and nodes that other keys' commands read. Hence:
//! * insert and delete depend on every command;
//! * an update of `k` depends on reads and updates of `k` (and on inserts and deletes);
//! * a range read depends on the updates of every key in its range (and on inserts and
//!   deletes); reads of different keys, and updates of different keys, are independent.
//!
//! C-G. A key's group is `g_{h(k) mod k}` with `h` the seedless xxh3 of the key, so it is the
//! same on every replica and in every client proxy. Read and update of `k` go to the group of
//! `k`; insert, delete and range read go to `g_all`. Every dependent pair shares a group: a pair
//! with an insert, a delete or a range read meets in `g_all`, which every worker delivers, and
//! the remaining pairs are a read or update of `k` with an update of the same `k`, which share
//! `k`'s group. A range read could go to one group only with groups that partition key ranges;
//! with hashed groups its keys are in every group, so it is ordered with all of them.
//!
//! Why updates in parallel are safe on a tree that inserts reshape: an update changes a value
//! in a leaf that already holds its key and moves no node, and no insert or delete runs while a
//! worker-group command does (they run in synchronous mode, after the barrier).
use std::ops::Bound;
use std::sync::{Mutex, MutexGuard, PoisonError};

use logless_service::wire::{put_bytes, put_message, put_varint};
use logless_service::{
    DecodeError, Digest, Digester, Group, ParallelService, Reader, Service, Wire, WorkerId,
};

use crate::tree::BPlusTree;

/// The longest key, in bytes: the limit every logless key has.
pub use logless_commands::KEY_BYTES_MAX;
/// The longest value, in bytes.
pub const VALUE_BYTES_MAX: usize = 1 << 20;
/// The most entries one range read returns.
pub const RANGE_COUNT_MAX: u64 = 10_000;

/// A command of the key-value service.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KvCommand {
    /// SET key value NX: store `value` if `key` is absent.
    Insert {
        /// The key.
        key: Vec<u8>,
        /// The value.
        value: Vec<u8>,
    },
    /// SET key value XX: replace the value of `key` if it is present.
    Update {
        /// The key.
        key: Vec<u8>,
        /// The value.
        value: Vec<u8>,
    },
    /// GET key.
    Read {
        /// The key.
        key: Vec<u8>,
    },
    /// DEL key.
    Delete {
        /// The key.
        key: Vec<u8>,
    },
    /// The entries from `start` (inclusive) in key order, at most `count` of them.
    Range {
        /// The first key to return, if present.
        start: Vec<u8>,
        /// How many entries at most, up to [`RANGE_COUNT_MAX`].
        count: u64,
    },
}

/// What a [`KvCommand`] answers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KvReply {
    /// Insert or update: whether the value was stored (Redis: `OK` or nil).
    Stored(bool),
    /// Read: the value, if the key is present.
    Value(Option<Vec<u8>>),
    /// Delete: whether the key was present (Redis: 1 or 0).
    Deleted(bool),
    /// Range read: the entries in key order.
    Entries(Vec<(Vec<u8>, Vec<u8>)>),
    /// A request that does not decode.
    Malformed(String),
}

/// A stored value. Updates of different keys run at once on different workers (parallel
/// mode) through a shared reference to the tree, so each value has its own lock; a key's
/// commands all run on one worker, so the lock is never contended.
pub type ValueCell = Mutex<Vec<u8>>;

fn lock(cell: &ValueCell) -> MutexGuard<'_, Vec<u8>> {
    // A worker that panicked while holding a value's lock was writing a whole `Vec` in one
    // `clone_from`: the value is one of the two, never torn, so the poison is ignored.
    cell.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The B⁺-tree key-value service.
#[derive(Debug, Default)]
pub struct KvService {
    tree: BPlusTree<Vec<u8>, ValueCell>,
    /// The deliberate C-G bug (see [`KvService::split_dependent_commands`]).
    split_dependent: bool,
}

impl KvService {
    /// An empty service.
    pub fn new() -> KvService {
        KvService::default()
    }

    /// An empty service whose tree has nodes of at most `fanout` entries or children.
    pub fn with_fanout(fanout: usize) -> KvService {
        KvService {
            tree: BPlusTree::with_fanout(fanout),
            split_dependent: false,
        }
    }

    /// The tree, for inspection.
    pub fn tree(&self) -> &BPlusTree<Vec<u8>, ValueCell> {
        &self.tree
    }

    /// The service's state, serialised for a snapshot: the number of entries, then each key and
    /// value (length-prefixed) in key order. Equal entries give equal bytes.
    pub fn snapshot(&self) -> Vec<u8> {
        let mut out = Vec::new();
        put_varint(&mut out, self.tree.len() as u64);
        for (key, value) in self.tree.iter() {
            put_bytes(&mut out, key);
            put_bytes(&mut out, &lock(value));
        }
        out
    }

    /// Replaces the service's entries with a [`KvService::snapshot`]'s; the tree keeps its
    /// fanout, and C-G its configuration. Bytes that are not a snapshot (cut short, keys out of
    /// order or repeated, a key or value over its limit, bytes after it) are refused, and the
    /// service is left as it was.
    pub fn restore(&mut self, snapshot: &[u8]) -> Result<(), DecodeError> {
        let mut reader = Reader::new(snapshot);
        let count = reader.varint()?;
        let mut tree = BPlusTree::with_fanout(self.tree.fanout());
        let mut last: Option<Vec<u8>> = None;
        for _ in 0..count {
            let key = key(&mut reader)?;
            if last.as_ref().is_some_and(|last| *last >= key) {
                return Err(DecodeError::Invalid("snapshot keys out of order"));
            }
            let value = value(&mut reader)?;
            last = Some(key.clone());
            tree.insert(key, Mutex::new(value));
        }
        reader.finish()?;
        self.tree = tree;
        Ok(())
    }

    /// Breaks C-G on purpose, for the engine's tests that must catch the divergence it causes:
    /// reads and updates of `k` go to the group after `k`'s, and inserts and deletes go to `k`'s
    /// group instead of `g_all`, so an insert or delete of `k` no longer shares a group with the
    /// reads and updates of `k` (with more than one worker). An update that runs before the
    /// insert of its key instead of after it stores nothing: the replicas' entries, not only
    /// their replies, diverge.
    #[cfg(any(test, feature = "fault-injection"))]
    pub fn split_dependent_commands(&mut self) {
        self.split_dependent = true;
    }

    fn key_group(key: &[u8], workers: u16) -> Group {
        Group::of_hash(xxhash_rust::xxh3::xxh3_64(key), workers)
    }

    /// The buggy C-G of [`KvService::split_dependent_commands`].
    fn split_group(command: &KvCommand, workers: u16) -> Group {
        match command {
            KvCommand::Read { key } | KvCommand::Update { key, .. } => {
                match Self::key_group(key, workers) {
                    Group::Worker(WorkerId(i)) => Group::Worker(WorkerId((i + 1) % workers)),
                    Group::All => Group::All,
                }
            }
            KvCommand::Insert { key, .. } | KvCommand::Delete { key } => {
                Self::key_group(key, workers)
            }
            KvCommand::Range { .. } => Group::All,
        }
    }
}

impl Service for KvService {
    type Command = KvCommand;
    type Reply = KvReply;

    fn depends(a: &KvCommand, b: &KvCommand) -> bool {
        use KvCommand::{Delete, Insert, Range, Read, Update};
        match (a, b) {
            (Insert { .. } | Delete { .. }, _) | (_, Insert { .. } | Delete { .. }) => true,
            // A range's extent depends on the tree (its count), so it meets every update.
            (Range { .. }, Update { .. }) | (Update { .. }, Range { .. }) => true,
            (Update { key: k, .. }, Update { key, .. } | Read { key })
            | (Read { key: k }, Update { key, .. }) => k == key,
            (Read { .. } | Range { .. }, Read { .. } | Range { .. }) => false,
        }
    }

    fn group(&self, command: &KvCommand, workers: u16) -> Group {
        if self.split_dependent {
            return Self::split_group(command, workers);
        }
        match command {
            KvCommand::Read { key } | KvCommand::Update { key, .. } => {
                Self::key_group(key, workers)
            }
            KvCommand::Insert { .. } | KvCommand::Delete { .. } | KvCommand::Range { .. } => {
                Group::All
            }
        }
    }

    fn execute(&mut self, command: &KvCommand) -> KvReply {
        if let Some(reply) = self.execute_shared(command) {
            return reply;
        }
        match command {
            KvCommand::Insert { key, value } => {
                let absent = self.tree.get(key).is_none();
                if absent {
                    self.tree.insert(key.clone(), Mutex::new(value.clone()));
                }
                KvReply::Stored(absent)
            }
            KvCommand::Delete { key } => KvReply::Deleted(self.tree.remove(key).is_some()),
            KvCommand::Range { start, count } => KvReply::Entries(
                self.tree
                    .range_from(Bound::Included(start))
                    .take(usize::try_from(*count).unwrap_or(usize::MAX))
                    .map(|(key, value)| (key.clone(), lock(value).clone()))
                    .collect(),
            ),
            KvCommand::Read { .. } | KvCommand::Update { .. } => {
                unreachable!("reads and updates run shared")
            }
        }
    }

    /// The digest of the entries in key order: replicas that hold the same entries agree,
    /// whatever shape their trees have.
    fn digest(&self) -> Digest {
        let mut digester = Digester::new();
        digester.u64(self.tree.len() as u64);
        for (key, value) in self.tree.iter() {
            digester.bytes(key).bytes(&lock(value));
        }
        digester.finish()
    }

    fn malformed(error: DecodeError) -> KvReply {
        KvReply::Malformed(error.to_string())
    }
}

impl ParallelService for KvService {
    /// Reads and updates run shared: they change at most the value of their key, in place.
    /// Inserts, deletes and range reads need the whole tree.
    fn execute_shared(&self, command: &KvCommand) -> Option<KvReply> {
        match command {
            KvCommand::Read { key } => {
                Some(KvReply::Value(self.tree.get(key).map(|v| lock(v).clone())))
            }
            KvCommand::Update { key, value } => Some(KvReply::Stored(
                self.tree
                    .get(key)
                    .map(|stored| lock(stored).clone_from(value))
                    .is_some(),
            )),
            KvCommand::Insert { .. } | KvCommand::Delete { .. } | KvCommand::Range { .. } => None,
        }
    }
}

const INSERT: u8 = 1;
const UPDATE: u8 = 2;
const READ: u8 = 3;
const DELETE: u8 = 4;
const RANGE: u8 = 5;

fn key(reader: &mut Reader<'_>) -> Result<Vec<u8>, DecodeError> {
    Ok(reader.bytes("key", KEY_BYTES_MAX)?.to_vec())
}

fn value(reader: &mut Reader<'_>) -> Result<Vec<u8>, DecodeError> {
    Ok(reader.bytes("value", VALUE_BYTES_MAX)?.to_vec())
}

impl Wire for KvCommand {
    fn encode(&self, out: &mut Vec<u8>) {
        match self {
            KvCommand::Insert { key, value } | KvCommand::Update { key, value } => {
                let tag = if matches!(self, KvCommand::Insert { .. }) {
                    INSERT
                } else {
                    UPDATE
                };
                out.push(tag);
                put_bytes(out, key);
                put_bytes(out, value);
            }
            KvCommand::Read { key } => {
                out.push(READ);
                put_bytes(out, key);
            }
            KvCommand::Delete { key } => {
                out.push(DELETE);
                put_bytes(out, key);
            }
            KvCommand::Range { start, count } => {
                out.push(RANGE);
                put_bytes(out, start);
                put_varint(out, *count);
            }
        }
    }

    fn decode_from(reader: &mut Reader<'_>) -> Result<KvCommand, DecodeError> {
        Ok(match reader.u8()? {
            INSERT => KvCommand::Insert {
                key: key(reader)?,
                value: value(reader)?,
            },
            UPDATE => KvCommand::Update {
                key: key(reader)?,
                value: value(reader)?,
            },
            READ => KvCommand::Read { key: key(reader)? },
            DELETE => KvCommand::Delete { key: key(reader)? },
            RANGE => KvCommand::Range {
                start: key(reader)?,
                count: reader.varint_at_most("range count", RANGE_COUNT_MAX)?,
            },
            tag => return Err(DecodeError::UnknownTag(tag)),
        })
    }
}

const STORED: u8 = 1;
const VALUE: u8 = 2;
const DELETED: u8 = 3;
const ENTRIES: u8 = 4;
const MALFORMED: u8 = 5;

impl Wire for KvReply {
    fn encode(&self, out: &mut Vec<u8>) {
        match self {
            KvReply::Stored(stored) => out.extend([STORED, u8::from(*stored)]),
            KvReply::Value(None) => out.extend([VALUE, 0]),
            KvReply::Value(Some(value)) => {
                out.extend([VALUE, 1]);
                put_bytes(out, value);
            }
            KvReply::Deleted(deleted) => out.extend([DELETED, u8::from(*deleted)]),
            KvReply::Entries(entries) => {
                out.push(ENTRIES);
                put_varint(out, entries.len() as u64);
                for (key, value) in entries {
                    put_bytes(out, key);
                    put_bytes(out, value);
                }
            }
            KvReply::Malformed(message) => {
                out.push(MALFORMED);
                put_message(out, message);
            }
        }
    }

    fn decode_from(reader: &mut Reader<'_>) -> Result<KvReply, DecodeError> {
        Ok(match reader.u8()? {
            STORED => KvReply::Stored(reader.flag()?),
            VALUE => KvReply::Value(reader.flag()?.then(|| value(reader)).transpose()?),
            DELETED => KvReply::Deleted(reader.flag()?),
            ENTRIES => {
                let count = reader.varint_at_most("range count", RANGE_COUNT_MAX)?;
                let entries = (0..count)
                    .map(|_| Ok((key(reader)?, value(reader)?)))
                    .collect::<Result<_, DecodeError>>()?;
                KvReply::Entries(entries)
            }
            MALFORMED => {
                let message = reader.message()?;
                KvReply::Malformed(message)
            }
            tag => return Err(DecodeError::UnknownTag(tag)),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(key: &str) -> KvCommand {
        KvCommand::Read {
            key: key.as_bytes().to_vec(),
        }
    }

    fn update(key: &str) -> KvCommand {
        KvCommand::Update {
            key: key.as_bytes().to_vec(),
            value: b"v".to_vec(),
        }
    }

    fn insert(key: &str, value: &str) -> KvCommand {
        KvCommand::Insert {
            key: key.as_bytes().to_vec(),
            value: value.as_bytes().to_vec(),
        }
    }

    #[test]
    fn reads_and_updates_of_a_key_share_its_group_and_reshaping_commands_go_to_g_all() {
        let service = KvService::new();
        for key in ["a", "b", "user:1", ""] {
            let group = service.group(&read(key), 4);
            assert!(matches!(group, Group::Worker(WorkerId(i)) if i < 4));
            assert_eq!(service.group(&update(key), 4), group);
            assert_eq!(service.group(&insert(key, "v"), 4), Group::All);
            let delete = KvCommand::Delete {
                key: key.as_bytes().to_vec(),
            };
            assert_eq!(service.group(&delete, 4), Group::All);
        }
        let range = KvCommand::Range {
            start: Vec::new(),
            count: 3,
        };
        assert_eq!(service.group(&range, 4), Group::All);
        let spread: std::collections::BTreeSet<_> = (0..64)
            .map(|i| service.group(&read(&format!("key{i}")), 4))
            .collect();
        assert_eq!(spread.len(), 4, "keys spread over every worker group");
    }

    #[test]
    fn the_split_switch_sends_dependent_commands_to_different_groups() {
        let mut service = KvService::new();
        service.split_dependent_commands();
        for key in ["a", "b", "user:1"] {
            let inserted = service.group(&insert(key, "v"), 4);
            assert_ne!(inserted, Group::All);
            assert_ne!(service.group(&read(key), 4), inserted);
            assert_ne!(service.group(&update(key), 4), inserted);
        }
    }

    #[test]
    fn commands_do_what_redis_does() {
        let mut kv = KvService::with_fanout(4);
        assert_eq!(kv.execute(&insert("b", "1")), KvReply::Stored(true));
        assert_eq!(kv.execute(&insert("b", "2")), KvReply::Stored(false), "NX");
        assert_eq!(kv.execute(&update("c")), KvReply::Stored(false), "XX");
        assert_eq!(kv.execute(&update("b")), KvReply::Stored(true));
        assert_eq!(kv.execute(&read("b")), KvReply::Value(Some(b"v".to_vec())));
        assert_eq!(kv.execute(&read("c")), KvReply::Value(None));
        for key in ["a", "c", "d", "e", "f"] {
            kv.execute(&insert(key, key));
        }
        let range = KvCommand::Range {
            start: b"bb".to_vec(),
            count: 2,
        };
        let entries = vec![
            (b"c".to_vec(), b"c".to_vec()),
            (b"d".to_vec(), b"d".to_vec()),
        ];
        assert_eq!(kv.execute(&range), KvReply::Entries(entries));
        let delete = KvCommand::Delete { key: b"b".to_vec() };
        assert_eq!(kv.execute(&delete), KvReply::Deleted(true));
        assert_eq!(kv.execute(&delete), KvReply::Deleted(false));
        kv.tree().check();
    }

    #[test]
    fn the_digest_follows_the_entries_not_the_shape() {
        let mut forward = KvService::with_fanout(4);
        let mut backward = KvService::with_fanout(4);
        for i in 0..100 {
            forward.execute(&insert(&format!("{i:03}"), "x"));
            backward.execute(&insert(&format!("{:03}", 99 - i), "x"));
        }
        assert_eq!(forward.digest(), backward.digest());
        forward.execute(&update("050"));
        assert_ne!(forward.digest(), backward.digest());
    }

    #[test]
    fn commands_and_replies_round_trip_and_bad_requests_get_an_error_reply() {
        let commands = [
            insert("k", "v"),
            update("k"),
            read("k"),
            KvCommand::Delete { key: b"k".to_vec() },
            KvCommand::Range {
                start: b"a".to_vec(),
                count: 10,
            },
        ];
        for command in commands {
            assert_eq!(KvCommand::decode(&command.encode_to_vec()), Ok(command));
        }
        let replies = [
            KvReply::Stored(true),
            KvReply::Value(None),
            KvReply::Value(Some(b"v".to_vec())),
            KvReply::Deleted(false),
            KvReply::Entries(vec![(b"k".to_vec(), b"v".to_vec())]),
            KvReply::Malformed("bad".into()),
        ];
        for reply in replies {
            assert_eq!(KvReply::decode(&reply.encode_to_vec()), Ok(reply));
        }
        let mut kv = KvService::new();
        assert_eq!(kv.group_of_encoded(&[9], 4), Group::All);
        let reply = KvReply::decode(&kv.execute_encoded(&[9])).unwrap();
        assert_eq!(reply, KvReply::Malformed("unknown tag 9".into()));
        let too_many = KvCommand::Range {
            start: Vec::new(),
            count: RANGE_COUNT_MAX + 1,
        };
        assert!(matches!(
            KvCommand::decode(&too_many.encode_to_vec()),
            Err(DecodeError::TooLarge { .. })
        ));
    }
}
