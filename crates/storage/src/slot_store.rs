//! The slot store: one record per key, updated in place with two versions and an 8-byte header.
//!
//! The layout and the recovery rules are in `docs/storage-format.md`. In short: a slot holds a
//! header word (which version is current, whether the slot is in use, its size class) and two
//! versions; an update writes the inactive version, persists it, then flips the header with
//! one 8-byte store and persists that. A record that outgrows its slot moves to a slot of a
//! larger class: the new slot is written and put in use before the old one is freed, and
//! recovery keeps the copy with the higher sequence number.
//!
//! Group commit: `put` only stages; `flush` persists a whole batch in at most three steps (all
//! new versions; all header flips and new slots; all frees of moved-from slots).
use std::collections::HashMap;

use crate::media::Media;
use crate::StoreError;

/// File magic: "logless slot file, layout 1".
pub const MAGIC: [u8; 8] = *b"LLSLOT01";
/// The format version in the file header.
pub const FORMAT_VERSION: u32 = 1;
/// Bytes of the file header; the first slot follows.
pub const FILE_HEADER_BYTES: usize = 64;
/// Offset of the end-of-slots word in the file header.
const END_WORD_OFFSET: usize = 16;
/// The smallest slot (size class 0); class `c` is `SLOT_BYTES_MIN << c`.
pub const SLOT_BYTES_MIN: usize = 128;
/// The longest key a slot file stores.
pub const KEY_BYTES_MAX: usize = 64 * 1024;
/// Bytes before the key in a version: crc32c, sequence, key length, record length.
const VERSION_HEADER_BYTES: usize = 4 + 8 + 4 + 4;

const CURRENT_BIT: u64 = 1;
const IN_USE_BIT: u64 = 2;
const CLASS_SHIFT: u32 = 8;

fn slot_bytes(class: u8) -> usize {
    SLOT_BYTES_MIN << class
}

fn version_capacity(class: u8) -> usize {
    (slot_bytes(class) - 8) / 2
}

fn version_offset(slot: usize, class: u8, version: u8) -> usize {
    slot + 8 + usize::from(version) * version_capacity(class)
}

fn header_word(class: u8, in_use: bool, current: u8) -> u64 {
    (u64::from(class) << CLASS_SHIFT) | if in_use { IN_USE_BIT } else { 0 } | u64::from(current & 1)
}

/// Deliberate bugs for the crash tests: each removes one persist step.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PersistBugs {
    /// Flip headers without first persisting the new versions.
    pub skip_version_persist: bool,
}

/// Where a key's record is.
#[derive(Clone, Copy, Debug)]
struct Entry {
    slot: usize,
    class: u8,
    /// The version current on the media, or `None` if the slot is not in use on the media yet.
    media_current: Option<u8>,
    /// The version written since the last flush, if any.
    staged: Option<u8>,
    seq: u64,
    /// A slot this key moved from, freed after the move is durable.
    moved_from: Option<(usize, u8)>,
}

impl Entry {
    fn current(&self) -> u8 {
        self.staged
            .or(self.media_current)
            .expect("an entry has a version")
    }
}

/// What opening a slot file found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RecoveryReport {
    /// Records recovered.
    pub records: usize,
    /// Slots free for reuse.
    pub free_slots: usize,
    /// Keys found in two slots (a move interrupted by a crash); the newer copy was kept.
    pub duplicates_resolved: usize,
    /// Slots whose current version failed its checksum: reported, not served.
    pub damaged_slots: Vec<usize>,
}

/// The slot store over some media.
pub struct SlotStore<M: Media> {
    media: M,
    sync: bool,
    index: HashMap<Vec<u8>, Entry>,
    free: Vec<Vec<usize>>,
    end: usize,
    record_bytes_max: usize,
    file_bytes_max: usize,
    dirty_keys: Vec<Vec<u8>>,
    poisoned: bool,
    /// Deliberate bugs (crash tests only).
    pub bugs: PersistBugs,
    /// How many bytes of new slots one append formats (at least one slot): growing costs two
    /// persists per chunk. Exhaustive crash tests set it to 0 to keep images enumerable.
    pub append_chunk_bytes: usize,
}

const CLASSES: usize = 24;
/// How many bytes of slots one append formats at once, by default.
pub const APPEND_CHUNK_BYTES: usize = 64 * 1024;

impl<M: Media> SlotStore<M> {
    /// Opens (or formats, if empty) the slot file on `media` and rebuilds the index. `sync`
    /// says whether `flush` must make writes durable (the media's `persist` decides how).
    pub fn open(
        mut media: M,
        sync: bool,
        record_bytes_max: usize,
        file_bytes_max: usize,
    ) -> Result<(SlotStore<M>, RecoveryReport), StoreError> {
        if media.len() < FILE_HEADER_BYTES || media.read(0, 8) == [0u8; 8] {
            if media.len() < FILE_HEADER_BYTES {
                media.grow(FILE_HEADER_BYTES)?;
            }
            let mut header = [0u8; FILE_HEADER_BYTES];
            header[..8].copy_from_slice(&MAGIC);
            header[8..12].copy_from_slice(&FORMAT_VERSION.to_le_bytes());
            header[12..16].copy_from_slice(&(SLOT_BYTES_MIN as u32).to_le_bytes());
            header[END_WORD_OFFSET..END_WORD_OFFSET + 8]
                .copy_from_slice(&(FILE_HEADER_BYTES as u64).to_le_bytes());
            media.write(0, &header);
            media.persist(0, FILE_HEADER_BYTES)?;
        }
        if media.read(0, 8) != MAGIC {
            return Err(StoreError::Format("not a logless slot file"));
        }
        let version = u32::from_le_bytes(media.read(8, 4).try_into().expect("4 bytes"));
        if version != FORMAT_VERSION {
            return Err(StoreError::Format("unknown slot file format version"));
        }
        let slot_min = u32::from_le_bytes(media.read(12, 4).try_into().expect("4 bytes"));
        if slot_min as usize != SLOT_BYTES_MIN {
            return Err(StoreError::Format(
                "slot file made with another smallest slot size",
            ));
        }
        let end = u64::from_le_bytes(media.read(END_WORD_OFFSET, 8).try_into().expect("8 bytes"))
            as usize;
        if end < FILE_HEADER_BYTES || end > media.len() {
            return Err(StoreError::Format("end of slots beyond the file"));
        }
        let mut store = SlotStore {
            media,
            sync,
            index: HashMap::new(),
            free: vec![Vec::new(); CLASSES],
            end,
            record_bytes_max,
            file_bytes_max,
            dirty_keys: Vec::new(),
            poisoned: false,
            bugs: PersistBugs::default(),
            append_chunk_bytes: APPEND_CHUNK_BYTES,
        };
        let report = store.recover()?;
        Ok((store, report))
    }

    fn recover(&mut self) -> Result<RecoveryReport, StoreError> {
        let mut report = RecoveryReport::default();
        let mut offset = FILE_HEADER_BYTES;
        let mut stale = Vec::new();
        while offset < self.end {
            let word = self.word(offset);
            let class = (word >> CLASS_SHIFT) as u8;
            if usize::from(class) >= CLASSES || offset + slot_bytes(class) > self.end {
                return Err(StoreError::Format("slot header out of range"));
            }
            if word & IN_USE_BIT == 0 {
                self.free[usize::from(class)].push(offset);
                report.free_slots += 1;
            } else {
                let current = (word & CURRENT_BIT) as u8;
                match self.read_version(offset, class, current) {
                    None => report.damaged_slots.push(offset),
                    Some((seq, key, _)) => {
                        let entry = Entry {
                            slot: offset,
                            class,
                            media_current: Some(current),
                            staged: None,
                            seq,
                            moved_from: None,
                        };
                        match self.index.get(&key) {
                            Some(old) if old.seq >= seq => stale.push((offset, class)),
                            Some(old) => {
                                stale.push((old.slot, old.class));
                                self.index.insert(key, entry);
                            }
                            None => {
                                self.index.insert(key, entry);
                            }
                        }
                    }
                }
            }
            offset += slot_bytes(class);
        }
        // Free the older copies of moved records, durably, before anything else happens.
        report.duplicates_resolved = stale.len();
        for &(slot, class) in &stale {
            self.media.store_u64(slot, header_word(class, false, 0));
            self.persist(slot, 8)?;
            self.free[usize::from(class)].push(slot);
        }
        report.records = self.index.len();
        Ok(report)
    }

    fn word(&self, offset: usize) -> u64 {
        u64::from_le_bytes(self.media.read(offset, 8).try_into().expect("8 bytes"))
    }

    /// Reads and verifies a version: `(seq, key, record)`, or `None` if its checksum fails.
    fn read_version(&self, slot: usize, class: u8, version: u8) -> Option<(u64, Vec<u8>, &[u8])> {
        let at = version_offset(slot, class, version);
        let cap = version_capacity(class);
        let head = self.media.read(at, VERSION_HEADER_BYTES);
        let crc = u32::from_le_bytes(head[0..4].try_into().expect("4 bytes"));
        let seq = u64::from_le_bytes(head[4..12].try_into().expect("8 bytes"));
        let key_len = u32::from_le_bytes(head[12..16].try_into().expect("4 bytes")) as usize;
        let rec_len = u32::from_le_bytes(head[16..20].try_into().expect("4 bytes")) as usize;
        let body = VERSION_HEADER_BYTES
            .checked_add(key_len)?
            .checked_add(rec_len)?;
        if body > cap {
            return None;
        }
        let bytes = self.media.read(at, body);
        if crc32c::crc32c(&bytes[4..]) != crc {
            return None;
        }
        let key = bytes[VERSION_HEADER_BYTES..VERSION_HEADER_BYTES + key_len].to_vec();
        Some((seq, key, &bytes[VERSION_HEADER_BYTES + key_len..]))
    }

    /// The number of records.
    pub fn len(&self) -> usize {
        self.index.len()
    }

    /// Whether there are no records.
    pub fn is_empty(&self) -> bool {
        self.index.is_empty()
    }

    /// The current record of `key` (staged or durable), verified against its checksum.
    pub fn get(&self, key: &[u8]) -> Result<Option<&[u8]>, StoreError> {
        let Some(e) = self.index.get(key) else {
            return Ok(None);
        };
        match self.read_version(e.slot, e.class, e.current()) {
            Some((_, _, record)) => Ok(Some(record)),
            None => Err(StoreError::Damaged { slot: e.slot }),
        }
    }

    /// Every key and record (verified), in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = Result<(&[u8], &[u8]), StoreError>> {
        self.index.iter().map(|(k, e)| {
            self.read_version(e.slot, e.class, e.current())
                .map(|(_, _, r)| (k.as_slice(), r))
                .ok_or(StoreError::Damaged { slot: e.slot })
        })
    }

    /// Stages `record` as the new value of `key`; visible to `get` at once, durable after the
    /// next `flush` (in sync mode).
    pub fn put(&mut self, key: &[u8], record: &[u8]) -> Result<(), StoreError> {
        if self.poisoned {
            return Err(StoreError::Poisoned);
        }
        if key.len() > KEY_BYTES_MAX {
            return Err(StoreError::KeyTooLarge {
                bytes: key.len(),
                max: KEY_BYTES_MAX,
            });
        }
        let needed = VERSION_HEADER_BYTES + key.len() + record.len();
        if key.len() + record.len() > self.record_bytes_max {
            return Err(StoreError::TooLarge {
                bytes: key.len() + record.len(),
                max: self.record_bytes_max,
            });
        }
        let class = (0..CLASSES as u8)
            .find(|&c| version_capacity(c) >= needed)
            .ok_or(StoreError::TooLarge {
                bytes: needed,
                max: version_capacity(CLASSES as u8 - 1),
            })?;
        let existing = self.index.get(key).copied();
        let entry = match existing {
            Some(e) if version_capacity(e.class) >= needed => {
                // Write the version that is not current on the media (or the one staged since).
                let version = e.staged.unwrap_or(1 - e.media_current.unwrap_or(1));
                let seq = e.seq + u64::from(e.staged.is_none());
                self.write_version(e.slot, e.class, version, seq, key, record);
                Entry {
                    staged: Some(version),
                    seq,
                    ..e
                }
            }
            _ => {
                let slot = self.allocate(class)?;
                let seq = existing.map_or(1, |e| e.seq + 1);
                self.write_version(slot, class, 0, seq, key, record);
                let moved_from = existing.and_then(|e| match e.media_current {
                    Some(_) => Some((e.slot, e.class)),
                    None => {
                        // Never in use on the media: reusable at once.
                        self.free[usize::from(e.class)].push(e.slot);
                        e.moved_from
                    }
                });
                Entry {
                    slot,
                    class,
                    media_current: None,
                    staged: Some(0),
                    seq,
                    moved_from,
                }
            }
        };
        if existing.is_none_or(|e| e.staged.is_none()) {
            self.dirty_keys.push(key.to_vec());
        }
        self.index.insert(key.to_vec(), entry);
        if !self.sync {
            self.flush()?;
        }
        Ok(())
    }

    fn write_version(
        &mut self,
        slot: usize,
        class: u8,
        version: u8,
        seq: u64,
        key: &[u8],
        record: &[u8],
    ) {
        let mut bytes = Vec::with_capacity(VERSION_HEADER_BYTES + key.len() + record.len());
        bytes.extend_from_slice(&[0; 4]);
        bytes.extend_from_slice(&seq.to_le_bytes());
        bytes.extend_from_slice(&(key.len() as u32).to_le_bytes());
        bytes.extend_from_slice(&(record.len() as u32).to_le_bytes());
        bytes.extend_from_slice(key);
        bytes.extend_from_slice(record);
        let crc = crc32c::crc32c(&bytes[4..]);
        bytes[0..4].copy_from_slice(&crc.to_le_bytes());
        self.media
            .write(version_offset(slot, class, version), &bytes);
    }

    /// A free slot of `class`: reused, or appended (growing the file).
    fn allocate(&mut self, class: u8) -> Result<usize, StoreError> {
        if let Some(slot) = self.free[usize::from(class)].pop() {
            return Ok(slot);
        }
        // Append a chunk of slots of this class (up to 64 KiB, at least one), so that growing
        // costs two persists per chunk, not per slot.
        let size = slot_bytes(class);
        let first = self.end;
        if first + size > self.file_bytes_max {
            return Err(StoreError::FileFull {
                max: self.file_bytes_max,
            });
        }
        let count = (self.append_chunk_bytes / size)
            .max(1)
            .min((self.file_bytes_max - first) / size);
        let new_end = first + count * size;
        if new_end > self.media.len() {
            let grown = (self.media.len() * 2).max(new_end).min(self.file_bytes_max);
            self.media
                .grow(grown)
                .inspect_err(|_| self.poisoned = true)?;
        }
        // The new slots' headers (class, not in use) are durable before the end word covers
        // them, so a scan never meets a slot of unknown size.
        for i in 0..count {
            self.media
                .store_u64(first + i * size, header_word(class, false, 0));
        }
        self.persist(first, new_end - first)?;
        self.media.store_u64(END_WORD_OFFSET, new_end as u64);
        self.persist(END_WORD_OFFSET, 8)?;
        self.end = new_end;
        let free = &mut self.free[usize::from(class)];
        free.extend((1..count).rev().map(|i| first + i * size));
        Ok(first)
    }

    fn persist(&mut self, offset: usize, len: usize) -> Result<(), StoreError> {
        if !self.sync {
            return Ok(());
        }
        self.media
            .persist(offset, len)
            .inspect_err(|_| self.poisoned = true)
    }

    /// Group commit: makes every staged put durable. After an error the store is poisoned.
    pub fn flush(&mut self) -> Result<(), StoreError> {
        if self.poisoned {
            return Err(StoreError::Poisoned);
        }
        let keys = std::mem::take(&mut self.dirty_keys);
        // 1. the new versions.
        if !self.bugs.skip_version_persist {
            let ranges: Vec<_> = keys
                .iter()
                .map(|key| {
                    let e = self.index[key];
                    let v = e.staged.expect("dirty keys are staged");
                    (
                        version_offset(e.slot, e.class, v),
                        version_capacity(e.class),
                    )
                })
                .collect();
            self.persist_ranges(ranges)?;
        }
        // 2. flip headers (and put moved records' new slots in use).
        for key in &keys {
            let e = self.index[key];
            let v = e.staged.expect("dirty keys are staged");
            self.media.store_u64(e.slot, header_word(e.class, true, v));
        }
        let headers: Vec<_> = keys.iter().map(|key| (self.index[key].slot, 8)).collect();
        self.persist_ranges(headers)?;
        // 3. free the slots moved records left.
        let mut freed = Vec::new();
        for key in &keys {
            let e = self.index.get_mut(key).expect("dirty key");
            e.media_current = e.staged.take();
            if let Some((slot, class)) = e.moved_from.take() {
                freed.push((slot, class));
            }
        }
        for &(slot, class) in &freed {
            self.media.store_u64(slot, header_word(class, false, 0));
        }
        self.persist_ranges(freed.iter().map(|&(slot, _)| (slot, 8)).collect())?;
        for &(slot, class) in &freed {
            self.free[usize::from(class)].push(slot);
        }
        Ok(())
    }

    /// Persists `(offset, len)` ranges with as few calls as possible: ranges closer than a
    /// page are merged (a persist covers whole pages anyway).
    fn persist_ranges(&mut self, mut ranges: Vec<(usize, usize)>) -> Result<(), StoreError> {
        const PAGE_BYTES: usize = 4096;
        ranges.sort_unstable();
        let mut merged: Option<(usize, usize)> = None;
        for (start, len) in ranges {
            let end = start + len;
            merged = match merged {
                Some((s, e)) if start <= e + PAGE_BYTES => Some((s, e.max(end))),
                Some((s, e)) => {
                    self.persist(s, e - s)?;
                    Some((start, end))
                }
                None => Some((start, end)),
            };
        }
        if let Some((s, e)) = merged {
            self.persist(s, e - s)?;
        }
        Ok(())
    }

    /// The media (for tests that build crash images).
    pub fn media(&self) -> &M {
        &self.media
    }
}
