//! Durable in-place storage for acceptor state.
//!
//! An in-place replicated state machine is only as durable as the place it overwrites. Each
//! key's record lives in a slot of a memory-mapped file and is updated with the
//! failure-atomic two-version scheme of the log-less RSM paper (seed 001, §4.3 and §6.2): write
//! the inactive version, persist it, flip an 8-byte header with one store, persist that. The
//! byte layout, the media assumptions and the recovery rules are in `docs/storage-format.md`.
//!
//! * [`media`]: what the store runs on: a memory-mapped file, or simulated media that builds
//!   the images a power failure could leave (for the crash tests).
//! * [`slot_store`]: the store: index, size classes, moves, group commit, recovery.
//! * [`log_store`]: an append-only log on the same media (seed 001's "Log" pattern).
//!
//! Durability modes: `memory` (plain DRAM, nothing survives), `mmap` (the page
//! cache holds the writes: survives a process crash), `sync` (msync before `flush` returns:
//! survives power loss). After an I/O error the store refuses further writes (fail-stop).
use std::fs::OpenOptions;
use std::path::Path;

use thiserror::Error;

pub mod log_store;
pub mod media;
pub mod slot_store;

pub use log_store::LogStore;
pub use media::{DramMedia, Media, MmapMedia, SimMedia};
pub use slot_store::{RecoveryReport, SlotStore};

/// How a store keeps its writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Durability {
    /// DRAM only: nothing survives.
    Memory,
    /// A shared file mapping without flushes: survives a process crash (kill -9).
    Mmap,
    /// msync of the written ranges before `flush` returns: survives power loss.
    Sync,
}

/// A storage failure.
#[derive(Debug, Error)]
pub enum StoreError {
    /// An I/O call failed; the store is poisoned.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: &'static str,
        /// The OS error.
        source: std::io::Error,
    },
    /// The file is not a slot file this code can read.
    #[error("slot file format: {0}")]
    Format(&'static str),
    /// A key exceeds the key size limit.
    #[error("key of {bytes} bytes exceeds the limit of {max}")]
    KeyTooLarge {
        /// Its size.
        bytes: usize,
        /// The limit.
        max: usize,
    },
    /// A record exceeds the size limit.
    #[error("record of {bytes} bytes exceeds the limit of {max}")]
    TooLarge {
        /// Its size.
        bytes: usize,
        /// The limit.
        max: usize,
    },
    /// The file would exceed its size limit.
    #[error("slot file full (limit {max} bytes)")]
    FileFull {
        /// The limit.
        max: usize,
    },
    /// A record failed its checksum.
    #[error("record in slot at offset {slot} is damaged (checksum mismatch)")]
    Damaged {
        /// The slot's offset.
        slot: usize,
    },
    /// Another process has the slot file open.
    #[error("the slot file is in use by another process")]
    Locked,
    /// An earlier I/O error stopped the store.
    #[error("the store stopped after an I/O error")]
    Poisoned,
}

impl StoreError {
    /// A mapper from an I/O error to a store error about `what`.
    pub fn io(what: &'static str) -> impl FnOnce(std::io::Error) -> StoreError {
        move |source| StoreError::Io { what, source }
    }
}

/// Opens the slot file at `path` in `durability` mode (`Mmap` or `Sync`), creating it if needed.
pub fn open_file(
    path: &Path,
    durability: Durability,
    record_bytes_max: usize,
    file_bytes_max: usize,
) -> Result<(SlotStore<MmapMedia>, RecoveryReport), StoreError> {
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)
        .map_err(StoreError::io("open slot file"))?;
    // One writer per file: the mapping's safety and the store's index depend on it.
    file.try_lock().map_err(|e| match e {
        std::fs::TryLockError::WouldBlock => StoreError::Locked,
        std::fs::TryLockError::Error(source) => StoreError::Io {
            what: "lock slot file",
            source,
        },
    })?;
    if file
        .metadata()
        .map_err(StoreError::io("stat slot file"))?
        .len()
        == 0
    {
        file.set_len(slot_store::FILE_HEADER_BYTES as u64)
            .map_err(StoreError::io("size new slot file"))?;
    }
    let sync = durability == Durability::Sync;
    let media = MmapMedia::new(file, sync)?;
    SlotStore::open(media, sync, record_bytes_max, file_bytes_max)
}

/// Opens a store in DRAM (`Memory` mode).
pub fn open_memory(
    record_bytes_max: usize,
    file_bytes_max: usize,
) -> Result<(SlotStore<DramMedia>, RecoveryReport), StoreError> {
    SlotStore::open(DramMedia::new(), false, record_bytes_max, file_bytes_max)
}
