//! Durable in-place storage for acceptor state.
//!
//! An in-place replicated state machine keeps no command log, so it is only as durable as the
//! place it overwrites. Every register's acceptor state (encoded to bytes by the consensus core;
//! this crate never looks inside) lives in one *slot* of a memory-mapped file and is replaced
//! with the failure-atomic two-version scheme of the log-less RSM paper (seed 001, §4.3 and
//! §6.2): write the version that is not current, persist it, flip an 8-byte header word with one
//! aligned store, persist that. A crash at any point leaves the old or the new version current,
//! never a mix, because the only write that changes which version counts is a single word that
//! the media stores atomically.
//!
//! Why this shape:
//! * **No log, no compaction.** A register's state is small and overwritten in place; recovery
//!   is a linear scan of the slots that rebuilds a DRAM index (key → slot), so restart time
//!   depends on the number of registers, not on the history of writes.
//! * **Group commit.** Persisting costs a system call (or a cache-line flush) and a device
//!   flush; [`SlotStore::flush`] makes a whole batch of puts durable with two persist rounds
//!   (every new version, then every header flip), so the cost is paid per batch, not per write.
//! * **Fail-stop.** After an I/O error the store is poisoned and refuses writes: a flush whose
//!   outcome is unknown must never be retried, and an acceptor that cannot persist must stop
//!   voting rather than promise what it may not keep.
//! * **One seam for media.** The record code talks to a small [`Media`] trait (a mapped file,
//!   DRAM, or [`SimMedia`], which builds every image a power failure could leave), so the crash
//!   tests exercise the real record code without real crashes.
//!
//! Modules:
//! * [`media`]: the backends and their persistence rules.
//! * [`slot_store`]: the slot file: size classes, moves, free-slot reuse, group commit, recovery.
//! * [`log_store`]: an append-only log in one file (seed 001's "Log" pattern), for the storage
//!   experiment.
//! * [`segment_log`]: the log-based engine's stable storage: a segmented log of indexed records
//!   (group commit, prefix deletion, tail truncation, streaming replay, torn-tail repair) and
//!   snapshot files written atomically, in one directory.
//! * [`dir`]: a directory of media files ([`FsDir`] on a real directory, [`SimDir`], which
//!   builds the images a power failure could leave of the directory operations and of every
//!   file's sectors together).
//!
//! The byte layout, the media assumptions and the recovery rules are written down in
//! `docs/storage-format.md`.
use thiserror::Error;

pub mod dir;
pub mod log_store;
pub mod media;
pub mod segment_log;
pub mod slot_store;
pub mod varint;

pub use dir::{Dir, DirCrash, FileId, FsDir, SimDir};
pub use log_store::{LogOptions, LogStore};
pub use media::{DramMedia, FileMedia, Media, MmapMedia, PersistBy, SimMedia};
pub use segment_log::{LogMutation, LogRecovery, SegmentLog, SegmentLogOptions};
pub use slot_store::{Damage, Location, Mutation, RecoveryReport, SlotStore};

/// How a store keeps its writes, chosen per node.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Durability {
    /// DRAM only, no file: nothing survives a crash (the papers' in-memory baselines).
    Memory,
    /// A shared file mapping that is never flushed explicitly: the page cache holds the
    /// writes, so they survive a process crash (kill -9) but not a power loss.
    Mmap,
    /// `msync` of the dirty ranges in [`SlotStore::flush`], group-committed: survives power loss.
    Sync,
    /// A DAX-mapped file on persistent memory, persisted with cache-line flushes and a fence
    /// (no system call). Opening fails with [`StoreError::PmemUnavailable`] where the file is
    /// not on a DAX mount.
    Pmem,
    /// Persistent memory emulated on DRAM (seed 002's `emulp`): a mapped file anywhere,
    /// persisted exactly as [`Durability::Pmem`] persists (cache-line flushes and a fence, no
    /// system call), with the DAX check skipped. The writes live in the page cache, so they
    /// survive a process crash (as in `Mmap`) but not a power loss.
    Emulp,
}

impl Durability {
    /// Whether puts are staged until [`SlotStore::flush`] (group commit) rather than applied
    /// completely at once. Staging pays off only where persisting costs something.
    pub fn group_commit(self) -> bool {
        matches!(
            self,
            Durability::Sync | Durability::Pmem | Durability::Emulp
        )
    }

    /// How a mapped file persists in this mode (`None`: no file, `memory` mode).
    pub fn persist_by(self) -> Option<PersistBy> {
        match self {
            Durability::Memory => None,
            Durability::Mmap => Some(PersistBy::Nothing),
            Durability::Sync => Some(PersistBy::Msync),
            Durability::Pmem => Some(PersistBy::CacheLineFlush),
            Durability::Emulp => Some(PersistBy::EmulatedCacheLineFlush),
        }
    }
}

/// The parameters of a slot store. Sizes are limits: a write beyond one is refused with a
/// typed error and changes nothing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoreOptions {
    /// How writes are kept.
    pub durability: Durability,
    /// The longest key accepted.
    pub key_bytes_max: usize,
    /// The longest record (value) accepted.
    pub record_bytes_max: usize,
    /// The largest the slot file may grow.
    pub file_bytes_max: u64,
    /// The size of the smallest slot (size class 0); class `c` is `slot_bytes_min << c`. A
    /// power of two, at least 64; written into the file header and checked at open.
    pub slot_bytes_min: usize,
    /// How many bytes of new slots one append to the file formats at once (at least one slot),
    /// so that growing the file is amortised over many new registers.
    pub append_chunk_bytes: usize,
    /// Whether the caller keeps where the store holds every key ([`slot_store::Location`]),
    /// so that the store keeps no DRAM index of its own once it is written to: see
    /// [`SlotStore::drop_index`]. Off by default.
    pub located: bool,
}

impl StoreOptions {
    /// Defaults for `durability`: keys up to 1 KiB, records up to 64 KiB, files up to 64 GiB,
    /// 128-byte smallest slots, 64 KiB appends.
    pub fn new(durability: Durability) -> StoreOptions {
        StoreOptions {
            durability,
            key_bytes_max: 1024,
            record_bytes_max: 64 * 1024,
            file_bytes_max: 64 << 30,
            slot_bytes_min: 128,
            append_chunk_bytes: 64 * 1024,
            located: false,
        }
    }
}

impl Default for StoreOptions {
    /// `StoreOptions::new(Durability::Sync)`.
    fn default() -> StoreOptions {
        StoreOptions::new(Durability::Sync)
    }
}

/// A storage failure.
#[derive(Debug, Error)]
pub enum StoreError {
    /// An I/O call failed; the store is poisoned from then on.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: &'static str,
        /// The operating system's error.
        source: std::io::Error,
    },
    /// The file is not a file this code can read, or its structure is damaged so that it
    /// cannot be scanned (a slot header word failed its check).
    #[error("{what} at offset {offset_bytes}")]
    Corrupt {
        /// What is wrong.
        what: &'static str,
        /// Where.
        offset_bytes: u64,
    },
    /// The options are inconsistent (for example, the largest slot cannot hold the largest
    /// key and record).
    #[error("invalid store options: {0}")]
    InvalidOptions(&'static str),
    /// A key exceeds `key_bytes_max`.
    #[error("key of {bytes} bytes exceeds the limit of {bytes_max}")]
    KeyTooLarge {
        /// Its size.
        bytes: usize,
        /// The limit.
        bytes_max: usize,
    },
    /// A record exceeds `record_bytes_max`.
    #[error("record of {bytes} bytes exceeds the limit of {bytes_max}")]
    RecordTooLarge {
        /// Its size.
        bytes: usize,
        /// The limit.
        bytes_max: usize,
    },
    /// The file would exceed `file_bytes_max`.
    #[error("slot file full (limit {file_bytes_max} bytes)")]
    FileFull {
        /// The limit.
        file_bytes_max: u64,
    },
    /// A record failed its checksum at read: media damage, reported instead of served.
    #[error("record in slot at offset {slot_offset} is damaged (checksum mismatch)")]
    Damaged {
        /// The slot's offset in the file.
        slot_offset: u64,
    },
    /// The key's state was found damaged at recovery; it is neither served nor overwritten
    /// until [`SlotStore::discard_damaged`] is called.
    #[error("the key's record was found damaged at recovery")]
    Quarantined,
    /// A location handed to a store without a DRAM index ([`StoreOptions::located`]) does not
    /// hold the key: the caller's record of where its keys are is wrong. Nothing was written.
    #[error("the slot at offset {slot_offset} does not hold the key it was asked for")]
    NotAtLocation {
        /// The offset the location names.
        slot_offset: u64,
    },
    /// Another process (or another store in this process) has the file open.
    #[error("the file is in use by another store")]
    Locked,
    /// [`Durability::Pmem`] was asked for but the file is not on a DAX mount (or this CPU has
    /// no cache-line flush instruction).
    #[error("persistent memory is not available here: {0}")]
    PmemUnavailable(&'static str),
    /// A log append or truncation named an index out of order (a bug in the caller).
    #[error("log index {index} out of order (expected {expected})")]
    OutOfOrder {
        /// The index given.
        index: u64,
        /// The index the log expected.
        expected: u64,
    },
    /// An earlier I/O error stopped the store (fail-stop).
    #[error("the store stopped after an I/O error")]
    Poisoned,
}

impl StoreError {
    /// A mapper from an I/O error to a store error about `what`.
    pub fn io(what: &'static str) -> impl FnOnce(std::io::Error) -> StoreError {
        move |source| StoreError::Io { what, source }
    }

    /// Whether this is a full disk, quota or file size limit met while growing a file: a
    /// refusal that changed nothing, after which the store goes on.
    pub fn is_no_space(&self) -> bool {
        matches!(
            self,
            StoreError::Io { source, .. }
                if matches!(
                    source.raw_os_error(),
                    Some(libc::ENOSPC | libc::EDQUOT | libc::EFBIG)
                )
        )
    }
}
