//! The media a slot file lives on: a memory-mapped file, or simulated media for crash tests.
//!
//! What the slot store assumes of media (see `docs/storage-format.md`):
//! * an aligned 8-byte store is atomic: after a crash it is entirely old or entirely new;
//! * nothing written is durable until `persist` covers it; `persist` returns once it is;
//! * a crash may leave any subset of the unpersisted 512-byte sectors written, and a sector
//!   that was being written may be torn (part old, part new).
use std::fs::File;
use std::sync::atomic::{AtomicU64, Ordering};

use memmap2::MmapMut;

use crate::StoreError;

/// The sector size crash images are built from.
pub const SECTOR_BYTES: usize = 512;

/// Byte-addressable media under a slot file.
pub trait Media {
    /// The current size in bytes.
    fn len(&self) -> usize;
    /// Whether the media is empty.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Grows the media to `len` bytes (zero-filled).
    fn grow(&mut self, len: usize) -> Result<(), StoreError>;
    /// The bytes at `offset..offset + len`.
    fn read(&self, offset: usize, len: usize) -> &[u8];
    /// Writes `bytes` at `offset` (not durable until persisted).
    fn write(&mut self, offset: usize, bytes: &[u8]);
    /// Stores an aligned 8-byte word with one store.
    fn store_u64(&mut self, offset: usize, value: u64);
    /// Makes `offset..offset + len` durable.
    fn persist(&mut self, offset: usize, len: usize) -> Result<(), StoreError>;
}

/// A memory-mapped file. `persist` is `msync` of the covering pages when `sync` is set and a
/// no-op otherwise (the page cache survives a process crash, not a power loss).
pub struct MmapMedia {
    file: File,
    map: MmapMut,
    sync: bool,
}

impl MmapMedia {
    /// Maps `file` (which must be at least one byte long); `sync` selects msync on persist.
    pub fn new(file: File, sync: bool) -> Result<MmapMedia, StoreError> {
        // SAFETY: `open_file` holds an exclusive lock on the file, so no other process maps or
        // writes it while this mapping lives, and this process maps it only here.
        let map = unsafe { MmapMut::map_mut(&file) }.map_err(StoreError::io("mmap"))?;
        Ok(MmapMedia { file, map, sync })
    }
}

impl Media for MmapMedia {
    fn len(&self) -> usize {
        self.map.len()
    }

    fn grow(&mut self, len: usize) -> Result<(), StoreError> {
        self.map
            .flush()
            .map_err(StoreError::io("msync before grow"))?;
        self.file
            .set_len(len as u64)
            .map_err(StoreError::io("grow file"))?;
        if self.sync {
            self.file
                .sync_all()
                .map_err(StoreError::io("fsync after grow"))?;
        }
        // SAFETY: as in `new`; the old mapping is dropped when replaced.
        self.map = unsafe { MmapMut::map_mut(&self.file) }.map_err(StoreError::io("remap"))?;
        Ok(())
    }

    fn read(&self, offset: usize, len: usize) -> &[u8] {
        &self.map[offset..offset + len]
    }

    fn write(&mut self, offset: usize, bytes: &[u8]) {
        self.map[offset..offset + bytes.len()].copy_from_slice(bytes);
    }

    fn store_u64(&mut self, offset: usize, value: u64) {
        assert_eq!(offset % 8, 0, "header words are 8-byte aligned");
        let word = &mut self.map[offset..offset + 8];
        // SAFETY: the pointer is 8-byte aligned (the mapping is page-aligned and `offset` is a
        // multiple of 8), valid for 8 bytes, and exclusively borrowed for the store, so viewing
        // it as an AtomicU64 for one store is sound; the atomic store compiles to one 8-byte
        // write, which is what makes the header flip failure-atomic.
        let atomic = unsafe { &*(word.as_mut_ptr() as *const AtomicU64) };
        atomic.store(value, Ordering::Release);
    }

    fn persist(&mut self, offset: usize, len: usize) -> Result<(), StoreError> {
        if self.sync && len > 0 {
            self.map
                .flush_range(offset, len)
                .map_err(StoreError::io("msync"))?;
        }
        Ok(())
    }
}

/// Plain DRAM: writes are copies into memory and persisting is free (`memory` mode).
#[derive(Clone, Debug, Default)]
pub struct DramMedia {
    bytes: Vec<u8>,
}

impl DramMedia {
    /// Empty DRAM media.
    pub fn new() -> DramMedia {
        DramMedia::default()
    }
}

impl Media for DramMedia {
    fn len(&self) -> usize {
        self.bytes.len()
    }

    fn grow(&mut self, len: usize) -> Result<(), StoreError> {
        self.bytes.resize(len, 0);
        Ok(())
    }

    fn read(&self, offset: usize, len: usize) -> &[u8] {
        &self.bytes[offset..offset + len]
    }

    fn write(&mut self, offset: usize, bytes: &[u8]) {
        self.bytes[offset..offset + bytes.len()].copy_from_slice(bytes);
    }

    fn store_u64(&mut self, offset: usize, value: u64) {
        self.write(offset, &value.to_le_bytes());
    }

    fn persist(&mut self, _offset: usize, _len: usize) -> Result<(), StoreError> {
        Ok(())
    }
}

/// What the media held at one instant: the basis of the crash images at that instant.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MediaSnapshot {
    live: Vec<u8>,
    durable: Vec<u8>,
    dirty: std::collections::BTreeSet<usize>,
}

/// Simulated media: a live image and a durable image, with the sectors written since they were
/// last persisted. It builds the images a power failure could leave.
#[derive(Clone, Debug, Default)]
pub struct SimMedia {
    now: MediaSnapshot,
    /// Take a snapshot after this many operations (a crash point); read it with `at_crash`.
    pub crash_after_ops: Option<usize>,
    crash: Option<MediaSnapshot>,
    /// Operations performed (writes, stores, persists, grows).
    pub ops: usize,
    /// A deliberate bug for the crash tests: `persist` does nothing.
    pub skip_persist: bool,
}

impl SimMedia {
    /// Empty media.
    pub fn new() -> SimMedia {
        SimMedia::default()
    }

    /// Media whose durable and live contents are `image`.
    pub fn from_image(image: Vec<u8>) -> SimMedia {
        SimMedia {
            now: MediaSnapshot {
                live: image.clone(),
                durable: image,
                dirty: Default::default(),
            },
            ..SimMedia::default()
        }
    }

    /// Counts an operation and takes the crash snapshot when its turn comes.
    fn tick(&mut self) {
        if self.crash_after_ops == Some(self.ops) {
            self.crash = Some(self.now.clone());
        }
        self.ops += 1;
    }

    /// The state at the crash point, or now if the crash point was not reached.
    pub fn at_crash(&self) -> &MediaSnapshot {
        self.crash.as_ref().unwrap_or(&self.now)
    }

    /// The state now.
    pub fn now(&self) -> &MediaSnapshot {
        &self.now
    }
}

impl MediaSnapshot {
    /// The sectors written but not persisted.
    pub fn dirty_sectors(&self) -> Vec<usize> {
        self.dirty.iter().copied().collect()
    }

    /// The image after a power failure in which exactly the dirty sectors in `kept` reached the
    /// media, and `torn` (if any) reached it only in its first half.
    pub fn crash_image(&self, kept: &[usize], torn: Option<usize>) -> Vec<u8> {
        let mut image = self.durable.clone();
        image.resize(self.live.len(), 0);
        for &s in kept {
            let range = s * SECTOR_BYTES..((s + 1) * SECTOR_BYTES).min(self.live.len());
            image[range.clone()].copy_from_slice(&self.live[range]);
        }
        if let Some(s) = torn {
            let start = s * SECTOR_BYTES;
            let end = (start + SECTOR_BYTES / 2).min(self.live.len());
            image[start..end].copy_from_slice(&self.live[start..end]);
        }
        image
    }

    /// The image a process crash leaves (the page cache survives): everything written.
    pub fn live_image(&self) -> Vec<u8> {
        self.live.clone()
    }
}

impl Media for SimMedia {
    fn len(&self) -> usize {
        self.now.live.len()
    }

    fn grow(&mut self, len: usize) -> Result<(), StoreError> {
        self.tick();
        // Growing is made durable at once (the real media syncs the file length).
        self.now.live.resize(len, 0);
        self.now.durable.resize(len, 0);
        Ok(())
    }

    fn read(&self, offset: usize, len: usize) -> &[u8] {
        &self.now.live[offset..offset + len]
    }

    fn write(&mut self, offset: usize, bytes: &[u8]) {
        self.tick();
        self.now.live[offset..offset + bytes.len()].copy_from_slice(bytes);
        if !bytes.is_empty() {
            for s in offset / SECTOR_BYTES..=(offset + bytes.len() - 1) / SECTOR_BYTES {
                self.now.dirty.insert(s);
            }
        }
    }

    fn store_u64(&mut self, offset: usize, value: u64) {
        assert_eq!(offset % 8, 0, "header words are 8-byte aligned");
        self.write(offset, &value.to_le_bytes());
    }

    fn persist(&mut self, offset: usize, len: usize) -> Result<(), StoreError> {
        self.tick();
        if self.skip_persist || len == 0 {
            return Ok(());
        }
        let now = &mut self.now;
        for s in offset / SECTOR_BYTES..=(offset + len - 1) / SECTOR_BYTES {
            if now.dirty.remove(&s) {
                let range = s * SECTOR_BYTES..((s + 1) * SECTOR_BYTES).min(now.live.len());
                now.durable[range.clone()].copy_from_slice(&now.live[range]);
            }
        }
        Ok(())
    }
}
