//! The slot store: one record per key, replaced in place with two versions and an 8-byte
//! header word.
//!
//! A slot holds a header word (which version is current, whether the slot is in use, its size
//! class, the low bits of the current version's sequence number and a check), its key, and
//! two versions of its record. An update writes the version that is not current, persists it, then stores the
//! header word with the other version current (one aligned 8-byte store) and persists that.
//! A record that outgrows its slot moves to a slot of a larger class: the new slot is written
//! and put in use before the old one is freed, and recovery keeps the copy with the higher
//! sequence number if a crash leaves both.
//!
//! Group commit: in `sync`, `emulp` and `pmem` modes `put` only stages (the version is written, the
//! DRAM index points at it, `get` sees it) and `flush` persists the whole batch in two rounds:
//! every new version (plus the file-header and free-slot words of earlier batches), then every
//! header flip. Appending slots to the file costs one more persist per appended chunk. In
//! `memory` and `mmap` modes persisting is free, so `put` applies the whole update at once.
//!
//! The byte layout and the recovery rules are in `docs/storage-format.md`. A file of the
//! previous format (2, which kept the key in each version behind a fixed 20-byte header) is
//! migrated when it is opened by path ([`SlotStore::open_migrating`]).
use std::collections::BTreeMap;
use std::hash::BuildHasher;

use hashbrown::HashTable;
use rustc_hash::{FxBuildHasher, FxHashMap};
use std::path::Path;

use crate::media::{DramMedia, FileMedia, Media, MmapMedia};
use crate::{varint, StoreError, StoreOptions};

/// File magic.
pub const MAGIC: [u8; 8] = *b"LLSLOTS\n";
/// The format version in the file header.
pub const FORMAT_VERSION: u32 = 3;
/// The previous format version, which [`SlotStore::open_migrating`] migrates.
pub const FORMAT_VERSION_MIGRATED: u32 = 2;
/// Bytes of the file header; the first slot follows.
pub const FILE_HEADER_BYTES: usize = 64;
/// Offset of the end-of-slots word in the file header.
const END_WORD_OFFSET: usize = 16;
/// Offset of the checksum of the file header's fixed fields (bytes 0..16).
const HEADER_CRC_OFFSET: usize = 24;
/// Size classes a file may use.
pub const CLASSES_MAX: u8 = 24;
/// Format 2: bytes before the key in a version (crc32c, sequence, key length, record length).
pub const VERSION_HEADER_BYTES: usize = 4 + 8 + 4 + 4;
/// Bytes of a slot before its key: the header word and the key's length (`u16`).
const KEY_OFFSET: usize = 8 + 2;

/// The bytes before a version's record: crc32c, then the sequence number and the record's
/// length as varints.
#[inline]
fn version_head_bytes(seq: u64, record_bytes: usize) -> usize {
    4 + varint::len(seq) + varint::len(record_bytes as u64)
}

/// The bytes a slot needs to hold `key_bytes` of key and two versions of `record_bytes` at
/// sequence `seq`.
fn slot_bytes_needed(key_bytes: usize, seq: u64, record_bytes: usize) -> usize {
    KEY_OFFSET + key_bytes + 2 * (version_head_bytes(seq, record_bytes) + record_bytes)
}

/// How a file lays out a slot's key and versions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Layout {
    /// Format 3: the key once, after the header word; versions behind a varint header.
    KeyOnce,
    /// Format 2: each version holds its key behind a fixed header. Read only, to migrate it.
    KeyPerVersion,
}

/// Deliberate bugs for the crash tests: each removes one persist step. A crash test that
/// passes with one of these set proves nothing; `tests/crash.rs` asserts each is caught.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Mutation {
    /// The store as designed.
    #[default]
    None,
    /// Flip headers without first persisting the new versions.
    SkipVersionPersist,
    /// Do not persist the header flips (acknowledge what is not durable).
    SkipFlipPersist,
    /// Do not persist the words that free moved-from slots before reusing them.
    SkipFreePersist,
    /// Do not persist new slots' header words before the end-of-slots word covers them.
    SkipAppendPersist,
    /// Do not persist the end-of-slots word before slots past the old end are put in use.
    SkipEndPersist,
    /// Persist only the first version written into a newly taken slot, not the slot's key.
    SkipKeyPersist,
}

/// The decoded header word of a slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct SlotHeader {
    class: u8,
    in_use: bool,
    current: u8,
    /// The low 32 bits of the current version's sequence number (0 when free).
    seq_low: u32,
}

/// The CRC of eight zero bytes: checks are offset by it so that an all-zero word (fresh file
/// space) is a valid header (a free slot of class 0) and a valid end word check. A constant,
/// not computed per check: recovery checks a header word per slot.
const CRC_OF_ZERO_WORD: u32 = 0x8c28_b28a;

/// A 16-bit check over the 64-bit word `masked` (whose check bits are zero).
#[inline]
fn check16(masked: u64) -> u16 {
    (crc32c::crc32c(&masked.to_le_bytes()) ^ CRC_OF_ZERO_WORD) as u16
}

/// The bytes up to which a version's checksum is computed in one call over a copy of the
/// slot's key and the version, rather than in two (one call per record at recovery).
const CRC_COPY_BYTES_MAX: usize = 128;

/// The checksum of a version: over the slot's key area (length and key), then `body` (the
/// version after its checksum field).
#[inline]
fn version_crc(key_area: &[u8], body: &[u8]) -> u32 {
    let len = key_area.len() + body.len();
    if len <= CRC_COPY_BYTES_MAX {
        let mut both = [0u8; CRC_COPY_BYTES_MAX];
        both[..key_area.len()].copy_from_slice(key_area);
        both[key_area.len()..len].copy_from_slice(body);
        crc32c::crc32c(&both[..len])
    } else {
        crc32c::crc32c_append(crc32c::crc32c(key_area), body)
    }
}

const CURRENT_BIT: u64 = 1;
const IN_USE_BIT: u64 = 2;
const RESERVED_BITS: u64 = 0xfc;
const CLASS_SHIFT: u32 = 8;
const CHECK_SHIFT: u32 = 16;
const SEQ_SHIFT: u32 = 32;

impl SlotHeader {
    fn free(class: u8) -> SlotHeader {
        SlotHeader {
            class,
            in_use: false,
            current: 0,
            seq_low: 0,
        }
    }

    fn encode(self) -> u64 {
        let masked = u64::from(self.current & 1)
            | if self.in_use { IN_USE_BIT } else { 0 }
            | (u64::from(self.class) << CLASS_SHIFT)
            | (u64::from(self.seq_low) << SEQ_SHIFT);
        masked | (u64::from(check16(masked)) << CHECK_SHIFT)
    }

    /// Decodes a header word, or `None` if it fails its check (media damage).
    fn decode(word: u64) -> Option<SlotHeader> {
        let masked = word & !(0xffff << CHECK_SHIFT);
        let check = (word >> CHECK_SHIFT) as u16;
        if check != check16(masked) || word & RESERVED_BITS != 0 {
            return None;
        }
        let class = (word >> CLASS_SHIFT) as u8;
        (class < CLASSES_MAX).then_some(SlotHeader {
            class,
            in_use: word & IN_USE_BIT != 0,
            current: (word & CURRENT_BIT) as u8,
            seq_low: (word >> SEQ_SHIFT) as u32,
        })
    }
}

/// A checked size word (the end of slots, the size of a log): the value in bits 0..48, a
/// check in bits 48..64, so that a damaged word is detected instead of trusted.
pub(crate) fn encode_end(end: usize) -> u64 {
    let end = end as u64;
    assert!(end < 1 << 48, "files stay below 256 TiB");
    end | (u64::from(check16(end)) << 48)
}

/// Decodes a checked size word, or `None` if it fails its check.
pub(crate) fn decode_end(word: u64) -> Option<usize> {
    let end = word & ((1 << 48) - 1);
    ((word >> 48) as u16 == check16(end)).then_some(end as usize)
}

/// One version as read from the media, checksum verified.
struct Version<'a> {
    seq: u64,
    key: &'a [u8],
    record: &'a [u8],
}

/// Where a key's record is. No copy of the key: it is compared where the slot holds it. A
/// caller that keeps the key's [`Location`] writes without a lookup, so the lookups by key
/// left are a new key's (which compare nothing unless a hash tag matches), a removal's and
/// the recovery's; a copy of short keys, which saved a read of the slot in each, cost 16 bytes
/// per key.
#[derive(Clone, Copy, Debug)]
struct Entry {
    /// The slot's offset in units of [`SLOT_ALIGN`] (every slot starts at a multiple of it):
    /// four bytes instead of eight in every entry.
    slot_units: u32,
    class: u8,
    /// The version current on the media, or `None` while the slot is not in use on the media.
    media_current: Option<u8>,
    /// The version written since the last flush, if any.
    staged: Option<u8>,
    /// The sequence number of the newest version (staged or current).
    seq: u64,
    key_bytes: u16,
    record_bytes: u32,
    /// False once the key is quarantined (found damaged at recovery).
    live: bool,
}

/// Where a store holds a key's record: the key's entry in the store's DRAM index, which a
/// caller that keeps it beside its own copy of the key hands back to [`SlotStore::put_at`], so
/// that the store does not look the key up a second time. It stays the key's while the key is
/// present (a record that moves to a larger slot keeps it); after the key is removed, another
/// key may get it, which `put_at` detects.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Location(u32);

impl Location {
    /// The location as a number, for a caller to keep.
    pub fn to_u64(self) -> u64 {
        u64::from(self.0)
    }

    /// A location kept as [`Location::to_u64`] gave it; `None` for a number no location
    /// gives.
    pub fn from_u64(kept: u64) -> Option<Location> {
        u32::try_from(kept).ok().map(Location)
    }
}

/// Every slot starts at a multiple of this: the file header and every slot are multiples of
/// 64 bytes.
const SLOT_ALIGN: usize = 64;

/// The largest file whose slot offsets an [`Entry`] can hold.
const FILE_BYTES_MAX: u64 = (u32::MAX as u64 + 1) * SLOT_ALIGN as u64;

/// An [`Entry`]'s `slot_units` for the slot at `offset`.
fn slot_units(offset: usize) -> u32 {
    debug_assert_eq!(offset % SLOT_ALIGN, 0);
    u32::try_from(offset / SLOT_ALIGN).expect("check_options bounds the file")
}

impl Entry {
    /// The slot's offset in the file.
    fn slot(&self) -> usize {
        self.slot_units as usize * SLOT_ALIGN
    }

    fn newest(&self) -> u8 {
        self.staged
            .or(self.media_current)
            .expect("an entry has a current or a staged version")
    }
}

/// A slot whose current version failed its checksum (or sequence check) at recovery.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Damage {
    /// The slot's offset in the file.
    pub slot_offset: u64,
    /// The key as read from the damaged version without verification, if it was readable.
    /// Such a key is quarantined: neither served nor overwritten.
    pub key: Option<Vec<u8>>,
}

/// What opening a store found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RecoveryReport {
    /// Records recovered and served.
    pub records: usize,
    /// Slots free for reuse.
    pub free_slots: usize,
    /// Keys found in two slots (a move interrupted by a crash); the newer copy was kept and
    /// the older freed.
    pub duplicates_resolved: usize,
    /// Slots whose current version is damaged: reported, never served.
    pub damaged: Vec<Damage>,
    /// Bytes of slots scanned.
    pub scanned_bytes: u64,
    /// The format version the file was rewritten from at this open, if it was of an older
    /// format ([`SlotStore::open_migrating`]).
    pub migrated_from: Option<u32>,
}

/// The slot store over some media: [`FileMedia`] for a node, [`crate::SimMedia`] in the
/// crash tests.
pub struct SlotStore<M: Media = FileMedia> {
    media: M,
    options: StoreOptions,
    /// The file's layout: format 3, or format 2 while it is migrated.
    layout: Layout,
    /// The class used for the largest key and record the options allow.
    class_max: u8,
    /// Entry ids by key, each with its key's 32-bit hash ([`key_hash`]). The index keeps no
    /// copy of the keys: a key is read where its slot holds it, and compared only when its
    /// hash and length match. The hash lets the index grow without reading every key from its
    /// slot (which made the whole file resident: 64 MB more at 10⁶ keys), and saves that read
    /// when only a bucket's tag matches. A boxed copy per key, found through a second
    /// pointer, cost a cache miss and 30 bytes or more per key.
    index: HashTable<(u32, u32)>,
    entries: Vec<Entry>,
    /// Ids of entries whose keys were removed, for reuse.
    vacant: Vec<u32>,
    /// Per class, slots whose free header word is durable.
    free: Vec<Vec<usize>>,
    end: usize,
    /// Entries staged since the last flush, in put order.
    dirty: Vec<u32>,
    /// The slot each entry that moved since the last flush moved from, freed once the move is
    /// durable. Kept beside the entries, not in them: a move is rare and brief, and a field
    /// of every entry for it cost 16 bytes per key.
    moved_from: FxHashMap<u32, (usize, u8)>,
    /// Ranges of words (end of slots) to persist in the next flush's first round.
    pending_words: Vec<(usize, usize)>,
    /// Slots whose free word is stored but not yet persisted: reusable after the next first
    /// round.
    pending_free: Vec<(usize, u8)>,
    /// The slots among `pending_free` that a key moved from: until their free words are
    /// durable, a crash may leave such a slot in use beside the key's newer copy, which must
    /// then not be freed first (see [`SlotStore::remove_at`]).
    pending_moved_from: Vec<usize>,
    /// Quarantined keys and the slots that hold any copy of them.
    quarantine: BTreeMap<Vec<u8>, Vec<(usize, u8)>>,
    /// Damaged slots whose key could not be read.
    damaged_unnamed: Vec<(usize, u8)>,
    poisoned: bool,
    mutation: Mutation,
    /// Whether the DRAM index (`index`, `entries`, `vacant`) was dropped
    /// ([`SlotStore::drop_index`]): entry ids are then slot offsets in units of
    /// [`SLOT_ALIGN`], and an entry lives in `touched` while its slot is read or staged in the
    /// current batch; between batches every field of it is on the media.
    index_dropped: bool,
    /// Records served, once the index is dropped.
    records: usize,
    /// Without the index: the entries of the slots read or staged since the last flush.
    touched: FxHashMap<u32, Entry>,
    /// Without the index: the slot each slot moved from since the last flush moved to. None
    /// of these slots is reused before the flush, so the chains end.
    moved_to: FxHashMap<u32, u32>,
    /// Without the index: the keys first written since the last flush, and the slot each
    /// was first written in (then followed through `moved_to`).
    new_keys: FxHashMap<Box<[u8]>, u32>,
    /// Without the index: slots whose free words became durable since the caller's last
    /// [`SlotStore::flush`], reused only after it. In `memory` and `mmap` modes every put
    /// persists at once, but the batch (`touched`, `moved_to`, `new_keys`) lasts until the
    /// caller's flush, and a location handed in it may still lead through a slot it left.
    batch_freed: Vec<(usize, u8)>,
}

fn slot_bytes(slot_bytes_min: usize, class: u8) -> usize {
    slot_bytes_min << class
}

/// Where `version` of the slot at `slot` (of `size` bytes, holding a key of `key_bytes`) starts
/// in `layout`, and how many bytes each version of the slot has.
#[inline]
fn version_at(
    layout: Layout,
    size: usize,
    slot: usize,
    key_bytes: usize,
    version: u8,
) -> (usize, usize) {
    let (start, capacity) = match layout {
        Layout::KeyOnce => {
            let start = KEY_OFFSET + key_bytes;
            (start, size.saturating_sub(start) / 2)
        }
        Layout::KeyPerVersion => (8, (size - 8) / 2),
    };
    (slot + start + usize::from(version) * capacity, capacity)
}

/// The key of entry `e` on `media`: where its slot holds it (format 3), or its newest
/// version (format 2).
fn key_in<'m, M: Media>(
    media: &'m M,
    layout: Layout,
    slot_bytes_min: usize,
    e: &Entry,
) -> &'m [u8] {
    let at = match layout {
        Layout::KeyOnce => e.slot() + KEY_OFFSET,
        Layout::KeyPerVersion => {
            let size = slot_bytes(slot_bytes_min, e.class);
            version_at(layout, size, e.slot(), 0, e.newest()).0 + VERSION_HEADER_BYTES
        }
    };
    media.read(at, usize::from(e.key_bytes))
}

/// The hash the index keeps of a key: Fx, as the engine's key tables use (fast on short keys,
/// deterministic across runs), folded to 32 bits.
fn key_hash(key: &[u8]) -> u32 {
    #[cfg(test)]
    if tests::ALL_KEYS_COLLIDE.get() {
        return 0;
    }
    let hash = FxBuildHasher.hash_one(key);
    (hash ^ (hash >> 32)) as u32
}

/// The 64-bit hash the index files a key of hash `hash` ([`key_hash`]) under: multiplied by an
/// odd constant, so that the top bits (the buckets' tags) depend on every bit of it.
#[inline]
fn index_hash(hash: u32) -> u64 {
    u64::from(hash).wrapping_mul(0x9e37_79b9_7f4a_7c15)
}

#[inline]
fn read_u16(bytes: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([bytes[at], bytes[at + 1]])
}

#[inline]
fn read_u32(bytes: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(bytes[at..at + 4].try_into().expect("4 bytes"))
}

#[inline]
fn read_u64(bytes: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(bytes[at..at + 8].try_into().expect("8 bytes"))
}

impl SlotStore<FileMedia> {
    /// Opens the store of one shard at `path` (creating the file if needed; no file in
    /// `memory` mode), rebuilds the index by scanning, and reports what it found. A file of
    /// the previous format is migrated first, its records unchanged
    /// ([`SlotStore::open_migrating`]).
    pub fn open(
        path: &Path,
        options: StoreOptions,
    ) -> Result<(SlotStore<FileMedia>, RecoveryReport), StoreError> {
        SlotStore::open_migrating(path, options, |_, record, out| {
            out.extend_from_slice(record)
        })
    }

    /// [`SlotStore::open`], migrating a file of format 2 to the current format first:
    /// every record it serves is written, through `convert(key, record, out)` (which appends
    /// the record to keep to `out`), into a new file beside it (`<path>.migrating`), which is
    /// made durable and then renamed over the old one. A crash before the rename leaves the
    /// old file as it was, and the next open migrates again. A format 2 file with a damaged
    /// record is not migrated: opening it fails with [`StoreError::Corrupt`].
    /// [`RecoveryReport::migrated_from`] tells the caller that a migration took place.
    pub fn open_migrating(
        path: &Path,
        options: StoreOptions,
        convert: impl FnMut(&[u8], &[u8], &mut Vec<u8>),
    ) -> Result<(SlotStore<FileMedia>, RecoveryReport), StoreError> {
        let Some(persist_by) = options.durability.persist_by() else {
            return SlotStore::open_on(FileMedia::Dram(DramMedia::new()), options);
        };
        let media = FileMedia::Mapped(MmapMedia::open(path, persist_by)?);
        let migrated_from = match file_format(&media) {
            Some(FORMAT_VERSION_MIGRATED) => {
                migrate(media, path, &options, convert)?;
                Some(FORMAT_VERSION_MIGRATED)
            }
            _ => {
                let (store, report) = SlotStore::open_on(media, options)?;
                return Ok((store, report));
            }
        };
        let media = FileMedia::Mapped(MmapMedia::open(path, persist_by)?);
        let (store, report) = SlotStore::open_on(media, options)?;
        Ok((
            store,
            RecoveryReport {
                migrated_from,
                ..report
            },
        ))
    }
}

/// Rewrites the format 2 file on `media` (at `path`) in the current format; see
/// [`SlotStore::open_migrating`].
fn migrate(
    media: FileMedia,
    path: &Path,
    options: &StoreOptions,
    mut convert: impl FnMut(&[u8], &[u8], &mut Vec<u8>),
) -> Result<(), StoreError> {
    // Both files are read and written by key here, with their indexes.
    let options = &StoreOptions {
        located: false,
        ..options.clone()
    };
    let (old, report) = SlotStore::open_layout(media, options.clone(), Layout::KeyPerVersion)?;
    if let Some(damage) = report.damaged.first() {
        return Err(StoreError::Corrupt {
            what: "a damaged record in a slot file of format 2, which is therefore not \
                   migrated to format 3 (restore the replica from its peers)",
            offset_bytes: damage.slot_offset,
        });
    }
    let mut name = path.as_os_str().to_owned();
    name.push(".migrating");
    let new_path = std::path::PathBuf::from(name);
    match std::fs::remove_file(&new_path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            return Err(StoreError::io("remove an interrupted migration's file")(e));
        }
        _ => {}
    }
    let persist_by = options
        .durability
        .persist_by()
        .expect("a migrated store has a file");
    let new_media = FileMedia::Mapped(MmapMedia::open(&new_path, persist_by)?);
    let (mut new, _) = SlotStore::open_on(new_media, options.clone())?;
    let mut record = Vec::new();
    for (key, old_record) in old.iter() {
        record.clear();
        convert(key, old_record, &mut record);
        new.put(key, &record)?;
    }
    new.flush()?;
    drop(new);
    // Durable before it replaces the old file, whatever the mode persists on its own.
    std::fs::File::open(&new_path)
        .and_then(|file| file.sync_all())
        .map_err(StoreError::io("sync the migrated file"))?;
    // Renamed while the old file is still locked: no other opener migrates it meanwhile.
    std::fs::rename(&new_path, path).map_err(StoreError::io("rename the migrated file"))?;
    let dir = match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    };
    std::fs::File::open(dir)
        .and_then(|dir| dir.sync_all())
        .map_err(StoreError::io("sync the directory of the migrated file"))?;
    drop(old);
    Ok(())
}

impl<M: Media> SlotStore<M> {
    /// Opens (formatting, if it is empty) the slot file on `media` and rebuilds the index.
    /// `options.durability` decides only whether puts are staged for group commit; how
    /// persisting works is the media's business. A file of format 2 is refused here: it is
    /// migrated when opened by path ([`SlotStore::open_migrating`]).
    pub fn open_on(
        media: M,
        options: StoreOptions,
    ) -> Result<(SlotStore<M>, RecoveryReport), StoreError> {
        SlotStore::open_layout(media, options, Layout::KeyOnce)
    }

    /// Opens the slot file on `media`, which must be of `layout`'s format.
    fn open_layout(
        mut media: M,
        options: StoreOptions,
        layout: Layout,
    ) -> Result<(SlotStore<M>, RecoveryReport), StoreError> {
        let class_max = check_options(&options)?;
        if layout == Layout::KeyOnce && is_fresh(&media) {
            format(&mut media, &options)?;
        }
        let end = read_file_header(&media, &options, layout)?;
        let mut store = SlotStore {
            media,
            options,
            layout,
            class_max,
            index: HashTable::new(),
            entries: Vec::new(),
            vacant: Vec::new(),
            free: vec![Vec::new(); usize::from(CLASSES_MAX)],
            end,
            dirty: Vec::new(),
            moved_from: FxHashMap::default(),
            pending_words: Vec::new(),
            pending_free: Vec::new(),
            pending_moved_from: Vec::new(),
            quarantine: BTreeMap::new(),
            damaged_unnamed: Vec::new(),
            poisoned: false,
            mutation: Mutation::None,
            index_dropped: false,
            records: 0,
            touched: FxHashMap::default(),
            moved_to: FxHashMap::default(),
            new_keys: FxHashMap::default(),
            batch_freed: Vec::new(),
        };
        let report = store.recover()?;
        Ok((store, report))
    }

    /// Removes one persist step on purpose (crash tests only).
    pub fn set_mutation(&mut self, mutation: Mutation) {
        self.mutation = mutation;
    }

    /// The options the store was opened with.
    pub fn options(&self) -> &StoreOptions {
        &self.options
    }

    fn slot_bytes(&self, class: u8) -> usize {
        slot_bytes(self.options.slot_bytes_min, class)
    }

    /// Where `version` of the slot at `slot` (of `class`, holding a key of `key_bytes`)
    /// starts, and how many bytes each version of the slot has.
    fn version_at(&self, slot: usize, class: u8, key_bytes: usize, version: u8) -> (usize, usize) {
        let size = self.slot_bytes(class);
        version_at(self.layout, size, slot, key_bytes, version)
    }

    /// Whether a slot of `class` holds `key_bytes` of key and two versions of `record_bytes`
    /// at sequence `seq`.
    fn fits(&self, class: u8, key_bytes: usize, seq: u64, record_bytes: usize) -> bool {
        slot_bytes_needed(key_bytes, seq, record_bytes) <= self.slot_bytes(class)
    }

    /// The smallest class that [fits](SlotStore::fits) a key and record.
    fn class_for(&self, key_bytes: usize, seq: u64, record_bytes: usize) -> u8 {
        (0..=self.class_max)
            .find(|&c| self.fits(c, key_bytes, seq, record_bytes))
            .expect("the options make the largest class fit the largest key and record")
    }

    fn header(&self, slot: usize) -> Option<SlotHeader> {
        SlotHeader::decode(read_u64(self.media.read(slot, 8), 0))
    }

    /// Stores a slot header word, and reads it back (assertions in pairs).
    fn store_header(&mut self, slot: usize, header: SlotHeader) {
        self.media.store_u64(slot, header.encode());
        assert_eq!(self.header(slot), Some(header), "header word read back");
    }

    /// Scans every slot and rebuilds the index, the free lists and the quarantine.
    fn recover(&mut self) -> Result<RecoveryReport, StoreError> {
        let mut report = RecoveryReport::default();
        let mut stale = Vec::new();
        let mut damaged = Vec::new();
        let mut offset = FILE_HEADER_BYTES;
        // No slot is shorter than `slot_bytes_min`: the file holds at most this many records,
        // so neither the index nor the entries grow (rehashing or copying themselves) during
        // the scan. An estimate above the records found costs the index's control bytes (one
        // per bucket) and address space the entries never touch.
        let records_max = (self.end - FILE_HEADER_BYTES) / self.options.slot_bytes_min;
        self.index = HashTable::with_capacity(records_max);
        self.entries = Vec::with_capacity(records_max);
        // The key of the record at hand, out of the media's borrow (one buffer for all).
        let mut key = Vec::new();
        while offset < self.end {
            let header = self.header(offset).ok_or(StoreError::Corrupt {
                what: "slot header word fails its check",
                offset_bytes: offset as u64,
            })?;
            let size = self.slot_bytes(header.class);
            if offset + size > self.end {
                return Err(StoreError::Corrupt {
                    what: "slot extends beyond the end of slots",
                    offset_bytes: offset as u64,
                });
            }
            if !header.in_use {
                self.free[usize::from(header.class)].push(offset);
            } else if let Some(v) = self.read_version(offset, header.class, header.current) {
                if v.seq as u32 != header.seq_low {
                    // A valid version that is not the one the header names: the current bit
                    // or the sequence bits were damaged.
                    damaged.push((offset, header.class, Some(v.key.to_vec())));
                } else if v.key.len() > usize::from(u16::MAX) {
                    // Only format 2 could hold one; format 3 bounds keys by its u16 length.
                    return Err(StoreError::Corrupt {
                        what: "a key longer than 65,535 bytes, which format 3 cannot hold: \
                               not migrated",
                        offset_bytes: offset as u64,
                    });
                } else {
                    let entry = Entry {
                        slot_units: slot_units(offset),
                        class: header.class,
                        media_current: Some(header.current),
                        staged: None,
                        seq: v.seq,
                        key_bytes: v.key.len() as u16,
                        record_bytes: v.record.len() as u32,
                        live: true,
                    };
                    key.clear();
                    key.extend_from_slice(v.key);
                    if let Some(loser) = self.index_recovered(&key, entry) {
                        stale.push(loser);
                    }
                }
            } else {
                let key = self.guess_key(offset, header.class, header.current);
                damaged.push((offset, header.class, key));
            }
            offset += size;
        }
        report.scanned_bytes = (self.end - FILE_HEADER_BYTES) as u64;
        self.quarantine_damaged(damaged, &mut report);
        // Free the older copies of moved records durably before anything can reuse them.
        report.duplicates_resolved = stale.len();
        let mut ranges = Vec::with_capacity(stale.len());
        for &(slot, class) in &stale {
            self.store_header(slot, SlotHeader::free(class));
            ranges.push((slot, 8));
        }
        self.persist_ranges(&ranges)?;
        for (slot, class) in stale {
            self.free[usize::from(class)].push(slot);
        }
        // Pop the lowest offsets first: reuse fills the file from the front.
        for list in &mut self.free {
            list.sort_unstable_by(|a, b| b.cmp(a));
        }
        report.free_slots = self.free.iter().map(Vec::len).sum();
        report.records = self.index.len();
        Ok(report)
    }

    /// Indexes a recovered copy; returns the slot of the losing copy if the key was already
    /// indexed (the lower sequence number loses).
    fn index_recovered(&mut self, key: &[u8], entry: Entry) -> Option<(usize, u8)> {
        match self.find(key) {
            Some(id) => {
                let old = &mut self.entries[id as usize];
                if old.seq >= entry.seq {
                    Some((entry.slot(), entry.class))
                } else {
                    let loser = (old.slot(), old.class);
                    *old = entry;
                    Some(loser)
                }
            }
            None => {
                self.add(key, entry);
                None
            }
        }
    }

    /// Takes damaged slots and every copy of the keys they name out of service.
    fn quarantine_damaged(
        &mut self,
        damaged: Vec<(usize, u8, Option<Vec<u8>>)>,
        report: &mut RecoveryReport,
    ) {
        for (slot, class, key) in damaged {
            report.damaged.push(Damage {
                slot_offset: slot as u64,
                key: key.clone(),
            });
            let Some(key) = key else {
                self.damaged_unnamed.push((slot, class));
                continue;
            };
            let indexed = self.unindex(&key);
            let slots = self.quarantine.entry(key).or_default();
            slots.push((slot, class));
            if let Some(id) = indexed {
                let e = &mut self.entries[id as usize];
                e.live = false;
                slots.push((e.slot(), e.class));
            }
        }
    }

    /// Reads and verifies a version, or `None` if it is damaged.
    fn read_version(&self, slot: usize, class: u8, version: u8) -> Option<Version<'_>> {
        if self.layout == Layout::KeyPerVersion {
            return self.read_version_with_key(slot, class, version);
        }
        let key_bytes = usize::from(read_u16(self.media.read(slot + 8, 2), 0));
        if slot_bytes_needed(key_bytes, 0, 0) > self.slot_bytes(class) {
            return None;
        }
        let (at, capacity) = self.version_at(slot, class, key_bytes, version);
        let bytes = self.media.read(at, capacity);
        let crc = read_u32(bytes, 0);
        let (seq, seq_bytes) = varint::read(&bytes[4..])?;
        let (record_bytes, len_bytes) = varint::read(&bytes[4 + seq_bytes..])?;
        let head = 4 + seq_bytes + len_bytes;
        let end = usize::try_from(record_bytes).ok()?.checked_add(head)?;
        if end > capacity {
            return None;
        }
        let key_area = self.media.read(slot + 8, 2 + key_bytes);
        if version_crc(key_area, &bytes[4..end]) != crc {
            return None;
        }
        Some(Version {
            seq,
            key: &key_area[2..],
            record: &bytes[head..end],
        })
    }

    /// Reads and verifies a version of format 2, or `None` if it is damaged.
    fn read_version_with_key(&self, slot: usize, class: u8, version: u8) -> Option<Version<'_>> {
        let (at, capacity) = self.version_at(slot, class, 0, version);
        let head = self.media.read(at, VERSION_HEADER_BYTES);
        let crc = read_u32(head, 0);
        let seq = read_u64(head, 4);
        let key_bytes = read_u32(head, 12) as usize;
        let record_bytes = read_u32(head, 16) as usize;
        let body = VERSION_HEADER_BYTES
            .checked_add(key_bytes)?
            .checked_add(record_bytes)?;
        if body > capacity {
            return None;
        }
        let bytes = self.media.read(at, body);
        if crc32c::crc32c(&bytes[4..]) != crc {
            return None;
        }
        let key_end = VERSION_HEADER_BYTES + key_bytes;
        Some(Version {
            seq,
            key: &bytes[VERSION_HEADER_BYTES..key_end],
            record: &bytes[key_end..],
        })
    }

    /// The key of a damaged version, read without verification, if its length is plausible.
    fn guess_key(&self, slot: usize, class: u8, version: u8) -> Option<Vec<u8>> {
        if self.layout == Layout::KeyOnce {
            let key_bytes = usize::from(read_u16(self.media.read(slot + 8, 2), 0));
            return (KEY_OFFSET + key_bytes <= self.slot_bytes(class))
                .then(|| self.media.read(slot + KEY_OFFSET, key_bytes).to_vec());
        }
        let (at, capacity) = self.version_at(slot, class, 0, version);
        let key_bytes = read_u32(self.media.read(at, VERSION_HEADER_BYTES), 12) as usize;
        (key_bytes <= capacity - VERSION_HEADER_BYTES).then(|| {
            self.media
                .read(at + VERSION_HEADER_BYTES, key_bytes)
                .to_vec()
        })
    }

    /// The number of records served.
    pub fn len(&self) -> usize {
        if self.index_dropped {
            self.records
        } else {
            self.index.len()
        }
    }

    /// Whether no record is served.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The id of `key`'s entry.
    ///
    /// # Panics
    /// Once the index is dropped ([`SlotStore::drop_index`]): keys are then found by their
    /// locations only.
    #[inline]
    fn find(&self, key: &[u8]) -> Option<u32> {
        assert!(
            !self.index_dropped,
            "a store without its index finds keys by their locations only"
        );
        let hash = key_hash(key);
        self.index
            .find(index_hash(hash), |&(id, of)| {
                of == hash && self.is_key_of(&self.entries[id as usize], key)
            })
            .map(|&(id, _)| id)
    }

    /// Whether entry `e` is `key`'s: its length, then its bytes where the slot holds them.
    #[inline]
    fn is_key_of(&self, e: &Entry, key: &[u8]) -> bool {
        e.key_bytes as usize == key.len() && self.key_of(e) == key
    }

    /// The id of `key`'s entry: `location`'s if it names a served entry of `key` (checked, so
    /// that a stale location, of a key removed since and its entry reused, is never trusted),
    /// else found by key.
    #[inline]
    fn find_at(&self, location: Option<Location>, key: &[u8]) -> Option<u32> {
        // A located store's locations are slots, not entry ids (used once the index is gone).
        let location = location.filter(|_| !self.options.located);
        let at = location.map(|l| l.0).filter(|&id| {
            self.entries
                .get(id as usize)
                .is_some_and(|e| e.live && self.is_key_of(e, key))
        });
        at.or_else(|| self.find(key))
    }

    /// Without the index: the slot (units) a location names now, following the moves of the
    /// current batch.
    fn moved_on(&self, mut units: u32) -> u32 {
        while let Some(&next) = self.moved_to.get(&units) {
            units = next;
        }
        units
    }

    /// Without the index: the entry of the slot at `units` as the media holds it (in use,
    /// its current version's sequence number and record length read from the version and
    /// checked against the header word's sequence bits).
    fn media_entry(&self, units: u32) -> Result<Entry, StoreError> {
        let slot = units as usize * SLOT_ALIGN;
        let not_at = StoreError::NotAtLocation {
            slot_offset: slot as u64,
        };
        if slot < FILE_HEADER_BYTES || slot + 8 > self.end {
            return Err(not_at);
        }
        let header = match self.header(slot) {
            Some(header) if header.in_use => header,
            _ => return Err(not_at),
        };
        let size = self.slot_bytes(header.class);
        let key_bytes = usize::from(read_u16(self.media.read(slot + 8, 2), 0));
        if slot + size > self.end || slot_bytes_needed(key_bytes, 0, 0) > size {
            return Err(not_at);
        }
        let damaged = || StoreError::Damaged {
            slot_offset: slot as u64,
        };
        let (at, capacity) = self.version_at(slot, header.class, key_bytes, header.current);
        let bytes = self.media.read(at, capacity);
        let (seq, seq_bytes) = varint::read(&bytes[4..]).ok_or_else(damaged)?;
        let (record_bytes, len_bytes) =
            varint::read(&bytes[4 + seq_bytes..]).ok_or_else(damaged)?;
        let fits = usize::try_from(record_bytes)
            .ok()
            .and_then(|r| r.checked_add(4 + seq_bytes + len_bytes))
            .is_some_and(|end| end <= capacity);
        if seq as u32 != header.seq_low || !fits {
            return Err(damaged());
        }
        Ok(Entry {
            slot_units: units,
            class: header.class,
            media_current: Some(header.current),
            staged: None,
            seq,
            key_bytes: key_bytes as u16,
            record_bytes: record_bytes as u32,
            live: true,
        })
    }

    /// Without the index: the id (slot units) and entry of `key`, at `location` (where the
    /// key was at the last flush, or since) or, for `None`, among the keys first written in
    /// the current batch. A location that does not hold the key is the caller's error.
    fn resolve(
        &self,
        location: Option<Location>,
        key: &[u8],
    ) -> Result<Option<(u32, Entry)>, StoreError> {
        let units = match location {
            Some(at) => self.moved_on(at.0),
            None => match self.new_keys.get(key) {
                Some(&first) => self.moved_on(first),
                None => return Ok(None),
            },
        };
        let entry = match self.touched.get(&units) {
            Some(e) if e.live => *e,
            _ => self.media_entry(units)?,
        };
        if !self.is_key_of(&entry, key) {
            return Err(StoreError::NotAtLocation {
                slot_offset: entry.slot() as u64,
            });
        }
        Ok(Some((units, entry)))
    }

    /// The id of `key`'s entry, for a write: by `location` as [`SlotStore::find_at`] does, or
    /// without the index as [`SlotStore::resolve`] does, the entry then kept in `touched`
    /// until the next flush.
    fn find_for_write(
        &mut self,
        location: Option<Location>,
        key: &[u8],
    ) -> Result<Option<u32>, StoreError> {
        if !self.index_dropped {
            return Ok(self.find_at(location, key));
        }
        let found = self.resolve(location, key)?;
        Ok(found.map(|(id, entry)| {
            self.touched.entry(id).or_insert(entry);
            id
        }))
    }

    /// The entry of id `id` (in `touched` without the index).
    #[inline]
    fn entry(&self, id: u32) -> Entry {
        if self.index_dropped {
            self.touched[&id]
        } else {
            self.entries[id as usize]
        }
    }

    /// The entry of id `id`, mutably.
    #[inline]
    fn entry_mut(&mut self, id: u32) -> &mut Entry {
        if self.index_dropped {
            self.touched.get_mut(&id).expect("a touched entry")
        } else {
            &mut self.entries[id as usize]
        }
    }

    /// Drops the DRAM index (with [`StoreOptions::located`] only; the first write does it if
    /// the caller did not): from then on the store finds a key only at the [`Location`] its
    /// caller keeps for it (`None` for a key it does not hold), and keeps in DRAM only the
    /// slots of the current batch, the free lists and what recovery quarantined. Reads by key
    /// ([`SlotStore::get`], [`SlotStore::location`], ..) panic after it; use
    /// [`SlotStore::get_at`]. See `docs/storage-format.md`, "Without the index", for what the
    /// caller must keep true.
    ///
    /// # Panics
    /// Without [`StoreOptions::located`], or with writes staged.
    pub fn drop_index(&mut self) {
        assert!(self.options.located, "only a located store drops its index");
        if self.index_dropped {
            return;
        }
        assert!(self.dirty.is_empty(), "nothing staged");
        self.records = self.index.len();
        self.index = HashTable::new();
        self.entries = Vec::new();
        self.vacant = Vec::new();
        self.index_dropped = true;
    }

    /// Whether the index was dropped ([`SlotStore::drop_index`]).
    pub fn index_dropped(&self) -> bool {
        self.index_dropped
    }

    /// The current record of the key the caller keeps at `location` (`None`: a key not held
    /// before the current batch), as [`SlotStore::get`] gives it; with the index, `location`
    /// is used as [`SlotStore::put_at`] uses it. Without the index, a location that does not
    /// hold the key is an error.
    pub fn get_at(
        &self,
        location: Option<Location>,
        key: &[u8],
    ) -> Result<Option<&[u8]>, StoreError> {
        if !self.index_dropped {
            return Ok(self
                .find_at(location, key)
                .map(|id| self.record_of(&self.entries[id as usize])));
        }
        if self.quarantine.contains_key(key) {
            return Err(StoreError::Quarantined);
        }
        Ok(self
            .resolve(location, key)?
            .map(|(_, e)| self.record_of(&e)))
    }

    /// Appends `entry`, whose slot holds `key`, and indexes it; returns its id.
    fn add(&mut self, key: &[u8], entry: Entry) -> u32 {
        let hash = key_hash(key);
        let id = match self.vacant.pop() {
            Some(id) => {
                self.entries[id as usize] = entry;
                id
            }
            None => {
                let id = u32::try_from(self.entries.len()).expect("fewer than 2^32 entries");
                self.entries.push(entry);
                id
            }
        };
        (self.index).insert_unique(index_hash(hash), (id, hash), |&(_, of)| index_hash(of));
        id
    }

    /// Takes `key` out of the index; returns its entry's id.
    fn unindex(&mut self, key: &[u8]) -> Option<u32> {
        let id = self.find(key)?;
        let found = (self.index).find_entry(index_hash(key_hash(key)), |&(i, _)| i == id);
        let ((id, _), _) = found.expect("an entry found is indexed").remove();
        Some(id)
    }

    fn record_of(&self, e: &Entry) -> &[u8] {
        let key_bytes = e.key_bytes as usize;
        let (at, _) = self.version_at(e.slot(), e.class, key_bytes, e.newest());
        let head = match self.layout {
            Layout::KeyOnce => version_head_bytes(e.seq, e.record_bytes as usize),
            Layout::KeyPerVersion => VERSION_HEADER_BYTES + key_bytes,
        };
        self.media.read(at + head, e.record_bytes as usize)
    }

    fn key_of(&self, e: &Entry) -> &[u8] {
        key_in(&self.media, self.layout, self.options.slot_bytes_min, e)
    }

    /// The current record of `key` (staged or durable). Its checksum was verified when it
    /// was recovered; [`SlotStore::get_checked`] verifies it again.
    pub fn get(&self, key: &[u8]) -> Option<&[u8]> {
        let id = self.find(key)?;
        Some(self.record_of(&self.entries[id as usize]))
    }

    /// The current record of `key`, its checksum verified at this read: damage that happened
    /// to the media since recovery is reported, not served.
    pub fn get_checked(&self, key: &[u8]) -> Result<Option<&[u8]>, StoreError> {
        if self.quarantine.contains_key(key) {
            return Err(StoreError::Quarantined);
        }
        let Some(id) = self.find(key) else {
            return Ok(None);
        };
        let e = &self.entries[id as usize];
        match self.read_version(e.slot(), e.class, e.newest()) {
            Some(v) if v.key == key && v.seq == e.seq => Ok(Some(v.record)),
            _ => Err(StoreError::Damaged {
                slot_offset: e.slot() as u64,
            }),
        }
    }

    /// Verifies every served record against its checksum (a scrub); returns the damaged.
    pub fn verify(&self) -> Vec<Damage> {
        if self.index_dropped {
            return (self.media_slots())
                .filter_map(|slot| match slot {
                    Err(at) => Some(Damage {
                        slot_offset: at as u64,
                        key: None,
                    }),
                    Ok((slot, Ok(e)))
                        if self
                            .read_version(slot, e.class, e.newest())
                            .is_some_and(|v| v.seq == e.seq) =>
                    {
                        None
                    }
                    Ok((slot, _)) => {
                        let header = self.header(slot).expect("read by the scan");
                        Some(Damage {
                            slot_offset: slot as u64,
                            key: self.guess_key(slot, header.class, header.current),
                        })
                    }
                })
                .collect();
        }
        self.entries
            .iter()
            .filter(|e| e.live)
            .filter(|e| {
                self.read_version(e.slot(), e.class, e.newest())
                    .is_none_or(|v| v.seq != e.seq)
            })
            .map(|e| Damage {
                slot_offset: e.slot() as u64,
                key: self.guess_key(e.slot(), e.class, e.newest()),
            })
            .collect()
    }

    /// The offset of the slot that holds `key`'s record (diagnostics and tests).
    pub fn slot_offset(&self, key: &[u8]) -> Option<u64> {
        let id = self.find(key)?;
        Some(self.entries[id as usize].slot() as u64)
    }

    /// Every served key and record, in recovery order (file order) and then insertion order:
    /// deterministic for a given file and sequence of puts.
    pub fn iter(&self) -> impl Iterator<Item = (&[u8], &[u8])> {
        self.iter_located().map(|(_, key, record)| (key, record))
    }

    /// [`SlotStore::iter`] with where the store holds each key (for [`SlotStore::put_at`]).
    /// Without the index ([`SlotStore::drop_index`]) it scans the media, in file order, and
    /// must not be called with writes staged.
    pub fn iter_located(&self) -> Box<dyn Iterator<Item = (Location, &[u8], &[u8])> + '_> {
        if self.index_dropped {
            assert!(self.dirty.is_empty(), "iterated between batches");
            return Box::new(
                self.media_entries()
                    .map(|e| (Location(e.slot_units), self.key_of(&e), self.record_of(&e))),
            );
        }
        let located = self.options.located;
        Box::new(
            (0..)
                .zip(&self.entries)
                .filter(|(_, e)| e.live)
                .map(move |(id, e)| {
                    // With `located`, a location is the slot, which stays valid without the
                    // index.
                    let at = if located { e.slot_units } else { id };
                    (Location(at), self.key_of(e), self.record_of(e))
                }),
        )
    }

    /// Without the index: the entries of every slot in use on the media and not quarantined,
    /// in file order (a slot whose current version does not parse is left out: `verify`
    /// reports it).
    fn media_entries(&self) -> impl Iterator<Item = Entry> + '_ {
        (self.media_slots()).filter_map(|slot| slot.ok().and_then(|(_, e)| e.ok()))
    }

    /// Without the index: every slot in use on the media and not quarantined, in file order,
    /// with its entry (or why it has none); a header word that fails its check (damage since
    /// recovery) ends the scan with `Err` of its offset.
    fn media_slots(
        &self,
    ) -> impl Iterator<Item = Result<(usize, Result<Entry, StoreError>), usize>> + '_ {
        let quarantined: Vec<usize> = (self.quarantine.values().flatten())
            .map(|&(slot, _)| slot)
            .collect();
        let mut offset = FILE_HEADER_BYTES;
        std::iter::from_fn(move || {
            while offset < self.end {
                let slot = offset;
                let Some(header) = self.header(slot) else {
                    offset = self.end;
                    return Some(Err(slot));
                };
                offset += self.slot_bytes(header.class);
                if header.in_use && !quarantined.contains(&slot) {
                    return Some(Ok((slot, self.media_entry(slot_units(slot)))));
                }
            }
            None
        })
    }

    /// The keys found damaged at recovery and not yet discarded, in key order.
    pub fn quarantined(&self) -> impl Iterator<Item = &[u8]> {
        self.quarantine.keys().map(Vec::as_slice)
    }

    /// Frees every slot quarantined at recovery, durably: the damaged keys become absent and
    /// can be written again. The caller decides when the lost state may be forgotten (for an
    /// acceptor: only once it has recovered the registers' state from its peers).
    pub fn discard_damaged(&mut self) -> Result<usize, StoreError> {
        if self.poisoned {
            return Err(StoreError::Poisoned);
        }
        let mut slots: Vec<(usize, u8)> = std::mem::take(&mut self.quarantine)
            .into_values()
            .flatten()
            .collect();
        slots.append(&mut self.damaged_unnamed);
        slots.sort_unstable();
        slots.dedup();
        let mut ranges = Vec::with_capacity(slots.len());
        for &(slot, class) in &slots {
            self.store_header(slot, SlotHeader::free(class));
            ranges.push((slot, 8));
        }
        self.persist_ranges(&ranges)?;
        for &(slot, class) in &slots {
            self.free[usize::from(class)].push(slot);
        }
        Ok(slots.len())
    }

    /// Stages `record` as the new value of `key`: visible to `get` at once, durable (per the
    /// mode) after the next `flush`. A refused put (a limit, a full file or disk) changes
    /// nothing. In `memory` and `mmap` modes the update is applied completely before this
    /// returns.
    pub fn put(&mut self, key: &[u8], record: &[u8]) -> Result<(), StoreError> {
        self.put_at(None, key, record).map(|_| ())
    }

    /// [`SlotStore::put`] of a key the store held at `location` when it last said so (`None`:
    /// not known), without a lookup by key when the location is still the key's; returns
    /// where the store holds the key now. A location that is not (or no longer) the key's is
    /// ignored: the key is then found by its bytes.
    ///
    /// Without the index ([`StoreOptions::located`]) the location is the only way to the key:
    /// `None` says the key is not stored (or was first written in the current batch), and a
    /// location that does not hold the key fails with [`StoreError::NotAtLocation`], writing
    /// nothing. A location the store gave is valid until the key is removed, also within the
    /// batch (a move in the batch is followed).
    pub fn put_at(
        &mut self,
        location: Option<Location>,
        key: &[u8],
        record: &[u8],
    ) -> Result<Location, StoreError> {
        if self.poisoned {
            return Err(StoreError::Poisoned);
        }
        if key.len() > self.options.key_bytes_max {
            return Err(StoreError::KeyTooLarge {
                bytes: key.len(),
                bytes_max: self.options.key_bytes_max,
            });
        }
        if record.len() > self.options.record_bytes_max {
            return Err(StoreError::RecordTooLarge {
                bytes: record.len(),
                bytes_max: self.options.record_bytes_max,
            });
        }
        if self.quarantine.contains_key(key) {
            return Err(StoreError::Quarantined);
        }
        assert_eq!(self.layout, Layout::KeyOnce, "a format 2 file is only read");
        if self.options.located {
            self.drop_index();
        }
        let id = match self.find_for_write(location, key)? {
            Some(id) if self.fits_in_place(id, record.len()) => {
                self.update_in_place(id, key, record);
                id
            }
            existing => self.update_moving(existing, key, record)?,
        };
        if !self.options.durability.group_commit() {
            // Durable at once, but the caller's batch goes on: without the index, a key first
            // written in it is still found as such by its next write (`None` again).
            self.persist(false)?;
        }
        Ok(Location(id))
    }

    /// Where the store holds `key`, if it does.
    pub fn location(&self, key: &[u8]) -> Option<Location> {
        let located = self.options.located;
        (self.find(key)).map(|id| {
            Location(if located {
                self.entries[id as usize].slot_units
            } else {
                id
            })
        })
    }

    /// Removes `key`: it is absent at once, and its slot's free header word is durable after
    /// the next `flush` (in `memory` and `mmap` modes before this returns); only then is the
    /// slot reused. Anything staged for the key is flushed first, so that the slot is freed
    /// from a settled state. Returns whether the key was present.
    pub fn remove(&mut self, key: &[u8]) -> Result<bool, StoreError> {
        self.remove_at(None, key)
    }

    /// [`SlotStore::remove`] of a key the store held at `location` (as [`SlotStore::put_at`]
    /// takes it): without the index, the key is found there only.
    pub fn remove_at(
        &mut self,
        location: Option<Location>,
        key: &[u8],
    ) -> Result<bool, StoreError> {
        if self.poisoned {
            return Err(StoreError::Poisoned);
        }
        if self.quarantine.contains_key(key) {
            return Err(StoreError::Quarantined);
        }
        if self.options.located {
            self.drop_index();
        }
        let Some(id) = self.find_for_write(location, key)? else {
            return Ok(false);
        };
        // Settled first: anything staged, and the free word of a slot the key moved from,
        // which must be durable before the newer copy's is (else a crash could leave the
        // older copy alone, and recovery would serve it).
        if self.entry(id).staged.is_some() || self.moved_from_pending(key) {
            self.persist(false)?;
        }
        let (slot, class) = if self.index_dropped {
            // The flush (if any) settled the key in the slot `id`, as the media now says.
            let e = match self.touched.remove(&id) {
                Some(e) if e.staged.is_none() => e,
                _ => self.media_entry(id)?,
            };
            self.records -= 1;
            // No longer held: a later write of the key in the batch (without a location)
            // takes it as new.
            self.new_keys.remove(key);
            (e.slot(), e.class)
        } else {
            let id = self.unindex(key).expect("found");
            let e = &mut self.entries[id as usize];
            e.live = false;
            self.vacant.push(id);
            (e.slot(), e.class)
        };
        debug_assert!(!self.moved_from.contains_key(&id), "settled");
        self.store_header(slot, SlotHeader::free(class));
        self.pending_words.push((slot, 8));
        self.pending_free.push((slot, class));
        if !self.options.durability.group_commit() {
            self.persist(false)?;
        }
        Ok(true)
    }

    /// Whether a slot `key` moved from has a free word that is not durable yet.
    fn moved_from_pending(&self, key: &[u8]) -> bool {
        self.pending_moved_from.iter().any(|&slot| {
            let key_bytes = usize::from(read_u16(self.media.read(slot + 8, 2), 0));
            key_bytes == key.len() && self.media.read(slot + KEY_OFFSET, key_bytes) == key
        })
    }

    /// The slots free for reuse, including those freed since the last flush.
    pub fn free_slots(&self) -> usize {
        self.free.iter().map(Vec::len).sum::<usize>()
            + self.pending_free.len()
            + self.batch_freed.len()
    }

    /// The sequence number an in-place update of entry `e` writes: a rewrite of its staged
    /// version keeps the staged version's.
    fn seq_in_place(e: &Entry) -> u64 {
        if e.staged.is_some() {
            e.seq
        } else {
            e.seq + 1
        }
    }

    /// Whether entry `id`'s slot holds a record of `record_bytes` in its next version.
    fn fits_in_place(&self, id: u32, record_bytes: usize) -> bool {
        let e = &self.entry(id);
        self.fits(
            e.class,
            e.key_bytes as usize,
            Self::seq_in_place(e),
            record_bytes,
        )
    }

    fn update_in_place(&mut self, id: u32, key: &[u8], record: &[u8]) {
        let e = self.entry(id);
        // Rewrite the version staged since the last flush, or else the one that is not current
        // on the media; never the current one.
        let version = match (e.staged, e.media_current) {
            (Some(staged), _) => staged,
            (None, Some(current)) => 1 - current,
            (None, None) => unreachable!("an entry has a current or a staged version"),
        };
        let seq = Self::seq_in_place(&e);
        self.write_version(e.slot(), e.class, version, seq, key, record);
        if e.staged.is_none() {
            self.dirty.push(id);
        }
        let e = self.entry_mut(id);
        e.staged = Some(version);
        e.seq = seq;
        e.record_bytes = record.len() as u32;
    }

    /// Writes `key`'s record into a newly taken slot, moving it from the slot of entry
    /// `existing` if it has one; returns the key's entry id (`existing`'s, kept across a move).
    fn update_moving(
        &mut self,
        existing: Option<u32>,
        key: &[u8],
        record: &[u8],
    ) -> Result<u32, StoreError> {
        let old = existing.map(|id| self.entry(id));
        let seq = old.map_or(1, |e| e.seq + 1);
        let class = self.class_for(key.len(), seq, record.len());
        let slot = self.allocate(class)?;
        self.write_key(slot, key);
        self.write_version(slot, class, 0, seq, key, record);
        let entry = Entry {
            slot_units: slot_units(slot),
            class,
            media_current: None,
            staged: Some(0),
            seq,
            key_bytes: key.len() as u16,
            record_bytes: record.len() as u32,
            live: true,
        };
        if self.index_dropped {
            return Ok(self.moved_without_index(existing.zip(old), key, entry));
        }
        match (existing, old) {
            (Some(id), Some(e)) if e.media_current.is_some() => {
                self.moved_from.insert(id, (e.slot(), e.class));
            }
            (_, Some(e)) => {
                // The old slot never became in use on the media: reusable at once (the slot
                // it moved from, if any, stays to be freed).
                self.free[usize::from(e.class)].push(e.slot());
            }
            _ => {}
        }
        match existing {
            Some(id) => {
                if old.is_some_and(|e| e.staged.is_none()) {
                    self.dirty.push(id);
                }
                self.entries[id as usize] = entry;
                Ok(id)
            }
            None => {
                let id = self.add(key, entry);
                self.dirty.push(id);
                Ok(id)
            }
        }
    }

    /// Without the index: records that the key of `old` (its id and entry, if it had one)
    /// was written into the newly taken slot of `entry`, whose slot is its id from now on;
    /// returns that id.
    fn moved_without_index(&mut self, old: Option<(u32, Entry)>, key: &[u8], entry: Entry) -> u32 {
        let id = entry.slot_units;
        self.touched.insert(id, entry);
        let Some((old_id, e)) = old else {
            self.new_keys.insert(key.into(), id);
            self.records += 1;
            self.dirty.push(id);
            return id;
        };
        self.touched.remove(&old_id);
        // A location naming the old slot leads here until the flush; the old slot is not
        // reused before it.
        self.moved_to.insert(old_id, id);
        if e.media_current.is_some() {
            self.moved_from.insert(id, (e.slot(), e.class));
        } else {
            // Never in use on the media: free once the batch is flushed (the slot it moved
            // from, if any, stays to be freed after the move is durable).
            self.pending_free.push((e.slot(), e.class));
            if let Some(from) = self.moved_from.remove(&old_id) {
                self.moved_from.insert(id, from);
            }
        }
        match (e.staged.is_some())
            .then(|| self.dirty.iter().position(|&d| d == old_id))
            .flatten()
        {
            Some(at) => self.dirty[at] = id,
            None => self.dirty.push(id),
        }
        id
    }

    /// Writes a slot's key (its length, then its bytes): into a slot just taken, before its
    /// first version.
    fn write_key(&mut self, slot: usize, key: &[u8]) {
        let len = u16::try_from(key.len()).expect("check_options bounds keys by u16");
        self.media.write(slot + 8, &len.to_le_bytes());
        self.media.write(slot + KEY_OFFSET, key);
    }

    /// Writes a version of the slot whose key is `key` (already in the slot). Its checksum
    /// covers the slot's key as well, so a version is valid only beside its own key.
    fn write_version(
        &mut self,
        slot: usize,
        class: u8,
        version: u8,
        seq: u64,
        key: &[u8],
        record: &[u8],
    ) {
        assert!(
            self.fits(class, key.len(), seq, record.len()),
            "the version fits"
        );
        let (at, _) = self.version_at(slot, class, key.len(), version);
        let mut head = [0u8; 4 + 2 * varint::U64_BYTES_MAX];
        let mut head_bytes = 4 + varint::write(&mut head[4..], seq);
        head_bytes += varint::write(&mut head[head_bytes..], record.len() as u64);
        let key_bytes = (key.len() as u16).to_le_bytes();
        let mut crc = crc32c::crc32c(&key_bytes);
        crc = crc32c::crc32c_append(crc, key);
        crc = crc32c::crc32c_append(crc, &head[4..head_bytes]);
        crc = crc32c::crc32c_append(crc, record);
        head[0..4].copy_from_slice(&crc.to_le_bytes());
        self.media.write(at, &head[..head_bytes]);
        self.media.write(at + head_bytes, record);
    }

    /// Grows the file by `bytes` beyond its length, if the disk has room: after a full disk,
    /// whether space came back. Changes nothing but the file's length, which later appends
    /// use. Errors other than a full disk poison the store.
    pub fn try_grow(&mut self, bytes: usize) -> Result<(), StoreError> {
        if self.poisoned {
            return Err(StoreError::Poisoned);
        }
        let file_bytes_max = usize::try_from(self.options.file_bytes_max).unwrap_or(usize::MAX);
        let grown = (self.media.len() + bytes).min(file_bytes_max);
        if grown <= self.media.len() {
            return Err(StoreError::FileFull {
                file_bytes_max: self.options.file_bytes_max,
            });
        }
        self.media.grow(grown).map_err(|e| self.on_grow_error(e))
    }

    /// A free slot of `class`: reused, or appended (growing the file). Changes nothing if it
    /// fails with a limit or a full disk.
    fn allocate(&mut self, class: u8) -> Result<usize, StoreError> {
        if let Some(slot) = self.free[usize::from(class)].pop() {
            assert_eq!(self.header(slot), Some(SlotHeader::free(class)));
            return Ok(slot);
        }
        let size = self.slot_bytes(class);
        let first = self.end;
        let file_bytes_max = usize::try_from(self.options.file_bytes_max).unwrap_or(usize::MAX);
        if first + size > file_bytes_max {
            return Err(StoreError::FileFull {
                file_bytes_max: self.options.file_bytes_max,
            });
        }
        let count = (self.options.append_chunk_bytes / size)
            .max(1)
            .min((file_bytes_max - first) / size);
        let new_end = first + count * size;
        if new_end > self.media.len() {
            let grown = (self.media.len() * 2).max(new_end).min(file_bytes_max);
            if let Err(e) = self.media.grow(grown) {
                // A nearly full disk may still have room for what this append needs.
                if grown == new_end || !e.is_no_space() {
                    return Err(self.on_grow_error(e));
                }
                self.media
                    .grow(new_end)
                    .map_err(|e| self.on_grow_error(e))?;
            }
        }
        // The new slots' header words are durable before the end word covers them, so a scan
        // never reads a slot size from bytes that were never a header.
        for i in 0..count {
            self.store_header(first + i * size, SlotHeader::free(class));
        }
        if self.mutation != Mutation::SkipAppendPersist {
            self.persist_ranges(&[(first, new_end - first)])?;
        }
        // The end word itself is persisted with the next round of versions: before any of the
        // new slots is put in use.
        self.media.store_u64(END_WORD_OFFSET, encode_end(new_end));
        assert_eq!(
            decode_end(read_u64(self.media.read(END_WORD_OFFSET, 8), 0)),
            Some(new_end)
        );
        self.pending_words.push((END_WORD_OFFSET, 8));
        self.end = new_end;
        let free = &mut self.free[usize::from(class)];
        free.extend((1..count).rev().map(|i| first + i * size));
        Ok(first)
    }

    /// A failed grow changed nothing; a full disk is a refusal, anything else is fail-stop.
    fn on_grow_error(&mut self, error: StoreError) -> StoreError {
        if !error.is_no_space() {
            self.poisoned = true;
        }
        error
    }

    fn persist_ranges(&mut self, ranges: &[(usize, usize)]) -> Result<(), StoreError> {
        if ranges.is_empty() {
            return Ok(());
        }
        self.media.persist_ranges(ranges).inspect_err(|_| {
            // Fail-stop: the outcome of a failed persist is unknown, so it is never retried.
            self.poisoned = true;
        })
    }

    /// Group commit: makes every put since the last flush durable, in two persist rounds
    /// (all new versions and pending words, then all header flips). Always correct to call;
    /// in `memory` and `mmap` modes it has nothing to wait for. After an error the store is
    /// poisoned and every later `put` and `flush` fails with [`StoreError::Poisoned`].
    ///
    /// It also ends the caller's batch, in every mode: without the index
    /// ([`StoreOptions::located`]), the keys first written since the last flush and the moves
    /// made since are forgotten here, and only here (not at the persist inside a put in
    /// `memory` and `mmap` modes), and the slots left since are reused only after it.
    pub fn flush(&mut self) -> Result<(), StoreError> {
        self.persist(true)
    }

    /// Makes every put since the last persist durable (see [`SlotStore::flush`]); with
    /// `ends_batch`, the caller's batch ends too (its flush). The persists inside puts and
    /// removals leave the batch going on.
    fn persist(&mut self, ends_batch: bool) -> Result<(), StoreError> {
        if self.poisoned {
            return Err(StoreError::Poisoned);
        }
        if self.dirty.is_empty() && self.pending_words.is_empty() {
            if ends_batch {
                self.end_batch();
            }
            return Ok(());
        }
        // Round 1: the new versions, the end word, and the free words of earlier moves.
        let mut ranges = Vec::with_capacity(self.dirty.len() + self.pending_words.len());
        if self.mutation != Mutation::SkipVersionPersist {
            for &id in &self.dirty {
                let e = &self.entry(id);
                let v = e.staged.expect("dirty entries are staged");
                let (at, _) = self.version_at(e.slot(), e.class, e.key_bytes as usize, v);
                let end = at
                    + version_head_bytes(e.seq, e.record_bytes as usize)
                    + e.record_bytes as usize;
                // A slot not in use on the media was just taken: its key is new too.
                let start =
                    if e.media_current.is_none() && self.mutation != Mutation::SkipKeyPersist {
                        e.slot() + 8
                    } else {
                        at
                    };
                ranges.push((start, end - start));
            }
        }
        for &(offset, len) in &self.pending_words {
            let skip = match offset {
                END_WORD_OFFSET => self.mutation == Mutation::SkipEndPersist,
                _ => self.mutation == Mutation::SkipFreePersist,
            };
            if !skip {
                ranges.push((offset, len));
            }
        }
        self.persist_ranges(&ranges)?;
        self.pending_words.clear();
        self.pending_moved_from.clear();
        for (slot, class) in self.pending_free.drain(..) {
            if self.index_dropped {
                // Perhaps on the way of a location handed in this batch: kept until its end.
                self.batch_freed.push((slot, class));
            } else {
                self.free[usize::from(class)].push(slot);
            }
        }
        // Round 2: flip the headers (putting moved records' new slots in use).
        let dirty = std::mem::take(&mut self.dirty);
        ranges.clear();
        for &id in &dirty {
            let e = self.entry(id);
            let header = SlotHeader {
                class: e.class,
                in_use: true,
                current: e.newest(),
                seq_low: e.seq as u32,
            };
            self.store_header(e.slot(), header);
            ranges.push((e.slot(), 8));
        }
        if self.mutation != Mutation::SkipFlipPersist {
            self.persist_ranges(&ranges)?;
        }
        // The moves are durable: free the old slots; their words are persisted in the next
        // round 1, and only then are the slots reused.
        for &id in &dirty {
            let e = self.entry_mut(id);
            e.media_current = e.staged.take();
            if let Some((slot, class)) = self.moved_from.remove(&id) {
                self.store_header(slot, SlotHeader::free(class));
                self.pending_words.push((slot, 8));
                self.pending_free.push((slot, class));
                self.pending_moved_from.push(slot);
            }
        }
        self.reuse_buffer(dirty);
        if ends_batch {
            self.end_batch();
        }
        Ok(())
    }

    /// Without the index, at the caller's flush: forgets the batch's entries, moves and new
    /// keys, all of which the media now holds, and lets the slots the batch left be reused.
    fn end_batch(&mut self) {
        if self.index_dropped && self.dirty.is_empty() {
            self.touched.clear();
            self.moved_to.clear();
            self.new_keys.clear();
            for (slot, class) in self.batch_freed.drain(..) {
                self.free[usize::from(class)].push(slot);
            }
        }
    }

    /// Keeps the dirty list's allocation for the next batch.
    fn reuse_buffer(&mut self, mut dirty: Vec<u32>) {
        dirty.clear();
        if self.dirty.is_empty() {
            self.dirty = dirty;
        }
    }

    /// Whether an I/O error has stopped the store.
    pub fn is_poisoned(&self) -> bool {
        self.poisoned
    }

    /// The end of the slots: the bytes of the file in use.
    pub fn end_bytes(&self) -> u64 {
        self.end as u64
    }

    /// The media (for tests that build crash images).
    pub fn media(&self) -> &M {
        &self.media
    }

    /// The media, mutably: for simulations that arm a crash point on it. Writing through it
    /// bypasses the store.
    pub fn media_mut(&mut self) -> &mut M {
        &mut self.media
    }
}

/// Validates the options; returns the largest size class they need.
fn check_options(options: &StoreOptions) -> Result<u8, StoreError> {
    let min = options.slot_bytes_min;
    if !min.is_power_of_two() || min < 64 {
        return Err(StoreError::InvalidOptions(
            "slot_bytes_min must be a power of two of at least 64",
        ));
    }
    if options.key_bytes_max > usize::from(u16::MAX) {
        return Err(StoreError::InvalidOptions(
            "key_bytes_max must be at most 65,535",
        ));
    }
    if options.file_bytes_max > FILE_BYTES_MAX {
        return Err(StoreError::InvalidOptions(
            "file_bytes_max must be at most 256 GiB",
        ));
    }
    let needed = slot_bytes_needed(options.key_bytes_max, u64::MAX, options.record_bytes_max);
    (0..CLASSES_MAX)
        .find(|&c| slot_bytes(min, c) >= needed)
        .ok_or(StoreError::InvalidOptions(
            "the largest size class cannot hold the largest key and record",
        ))
}

/// Whether the media was never formatted: at most one page, and no magic. The magic is the
/// last word `format` makes durable, so a crash while formatting leaves a fresh file; a larger
/// file, or one with the magic, is checked and never formatted over.
pub(crate) fn is_fresh<M: Media>(media: &M) -> bool {
    media.len() <= 4096 && (media.len() < 8 || media.read(0, 8) == [0u8; 8])
}

/// Writes a fresh file header: every field first, durably, then the magic with one store.
fn format<M: Media>(media: &mut M, options: &StoreOptions) -> Result<(), StoreError> {
    if media.len() < FILE_HEADER_BYTES {
        media.grow(FILE_HEADER_BYTES)?;
    }
    let mut header = [0u8; FILE_HEADER_BYTES];
    header[..8].copy_from_slice(&MAGIC);
    header[8..12].copy_from_slice(&FORMAT_VERSION.to_le_bytes());
    header[12..16].copy_from_slice(&(options.slot_bytes_min as u32).to_le_bytes());
    header[END_WORD_OFFSET..END_WORD_OFFSET + 8]
        .copy_from_slice(&encode_end(FILE_HEADER_BYTES).to_le_bytes());
    let crc = crc32c::crc32c(&header[..16]);
    header[HEADER_CRC_OFFSET..HEADER_CRC_OFFSET + 4].copy_from_slice(&crc.to_le_bytes());
    media.write(8, &header[8..]);
    media.persist(0, FILE_HEADER_BYTES)?;
    media.store_u64(0, read_u64(&header, 0));
    media.persist(0, 8)
}

/// The format version a slot file's header names, if it has the magic.
fn file_format<M: Media>(media: &M) -> Option<u32> {
    (media.len() >= FILE_HEADER_BYTES && media.read(0, 8) == MAGIC)
        .then(|| read_u32(media.read(0, 12), 8))
}

/// Checks the file header (of `layout`'s format); returns the end of slots.
fn read_file_header<M: Media>(
    media: &M,
    options: &StoreOptions,
    layout: Layout,
) -> Result<usize, StoreError> {
    if media.len() < FILE_HEADER_BYTES {
        return Err(StoreError::Corrupt {
            what: "file shorter than its header",
            offset_bytes: 0,
        });
    }
    let header = media.read(0, FILE_HEADER_BYTES);
    let corrupt = |what| StoreError::Corrupt {
        what,
        offset_bytes: 0,
    };
    if header[..8] != MAGIC {
        return Err(corrupt("not a logless slot file (magic)"));
    }
    if read_u32(header, HEADER_CRC_OFFSET) != crc32c::crc32c(&header[..16]) {
        return Err(corrupt("file header fails its checksum"));
    }
    match (read_u32(header, 8), layout) {
        (FORMAT_VERSION, Layout::KeyOnce) | (FORMAT_VERSION_MIGRATED, Layout::KeyPerVersion) => {}
        (FORMAT_VERSION_MIGRATED, Layout::KeyOnce) => {
            return Err(corrupt(
                "slot file of format 2: open it by its path to migrate it to format 3",
            ));
        }
        _ => return Err(corrupt("unknown slot file format version")),
    }
    if read_u32(header, 12) as usize != options.slot_bytes_min {
        return Err(StoreError::InvalidOptions(
            "the file was made with another slot_bytes_min",
        ));
    }
    let end = decode_end(read_u64(header, END_WORD_OFFSET)).ok_or(StoreError::Corrupt {
        what: "end-of-slots word fails its check",
        offset_bytes: END_WORD_OFFSET as u64,
    })?;
    if end < FILE_HEADER_BYTES || end > media.len() {
        return Err(StoreError::Corrupt {
            what: "end of slots beyond the file",
            offset_bytes: END_WORD_OFFSET as u64,
        });
    }
    Ok(end)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Durability, SimMedia};

    thread_local! {
        /// Files every key under one hash, so that only the comparison of keys tells them
        /// apart.
        pub(super) static ALL_KEYS_COLLIDE: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    }

    #[test]
    fn an_index_entry_takes_24_bytes() {
        // What the DRAM index costs per key, besides its 8-byte bucket (id and hash).
        assert_eq!(std::mem::size_of::<Entry>(), 24);
        assert_eq!(FILE_BYTES_MAX, 256 << 30);
        let mut options = StoreOptions::new(Durability::Memory);
        options.file_bytes_max = FILE_BYTES_MAX + 1;
        assert!(matches!(
            check_options(&options),
            Err(StoreError::InvalidOptions(_))
        ));
    }

    /// Keys of every length from empty to 40 bytes, many sharing their first bytes, are found,
    /// overwritten in place, moved to larger slots and recovered, each with its own record: the
    /// index tells keys apart by their whole bytes, read from their slots.
    #[test]
    fn keys_short_and_long_sharing_prefixes_are_told_apart() {
        keys_are_told_apart();
    }

    #[test]
    fn keys_whose_hashes_collide_are_told_apart_by_their_bytes() {
        ALL_KEYS_COLLIDE.set(true);
        keys_are_told_apart();
        ALL_KEYS_COLLIDE.set(false);
    }

    fn keys_are_told_apart() {
        let mut options = StoreOptions::new(Durability::Sync);
        options.key_bytes_max = 64;
        options.record_bytes_max = 1024;
        options.append_chunk_bytes = 0;
        let keys: Vec<Vec<u8>> = (0..=40)
            .flat_map(|len| {
                let shared = vec![b'k'; len];
                let mut other = shared.clone();
                if let Some(last) = other.last_mut() {
                    *last = b'x';
                }
                [shared, other]
            })
            .collect();
        let record = |key: &[u8], round: usize| {
            let mut r = format!("{round}:{}:", key.len()).into_bytes();
            r.extend_from_slice(key);
            // The third round outgrows the first slots, so those keys move.
            r.resize(r.len() + round * 200, b'.');
            r
        };
        let (mut store, _) = SlotStore::open_on(SimMedia::new(), options.clone()).unwrap();
        for round in 0..3 {
            for key in &keys {
                store.put(key, &record(key, round)).unwrap();
            }
            store.flush().unwrap();
            for key in &keys {
                assert_eq!(store.get(key), Some(&record(key, round)[..]), "{key:?}");
            }
        }
        assert_eq!(store.len(), keys.len() - 1, "the two empty keys are one");
        assert_eq!(store.get(&[b'k'; 41]), None);
        assert_eq!(store.get(b"kkkkkkkkkkkkkkkkz"), None);
        let image = store.media().now().durable_image();
        let (recovered, _) = SlotStore::open_on(SimMedia::from_image(image), options).unwrap();
        for key in &keys {
            assert_eq!(recovered.get(key), Some(&record(key, 2)[..]), "{key:?}");
        }
    }

    /// Recovery sizes the index and the entries for every slot the file could hold before
    /// the scan, so that neither grows during it.
    #[test]
    fn recovery_sizes_the_index_for_every_slot_the_file_holds() {
        let mut options = StoreOptions::new(Durability::Sync);
        options.key_bytes_max = 64;
        options.record_bytes_max = 256;
        options.append_chunk_bytes = 0;
        let (mut store, _) = SlotStore::open_on(SimMedia::new(), options.clone()).unwrap();
        for i in 0..1000 {
            store.put(format!("k{i}").as_bytes(), b"record").unwrap();
        }
        store.flush().unwrap();
        let slots_max = (store.end - FILE_HEADER_BYTES) / options.slot_bytes_min;
        let image = store.media().now().durable_image();
        let (recovered, report) = SlotStore::open_on(SimMedia::from_image(image), options).unwrap();
        assert_eq!(report.records, 1000);
        assert!(slots_max >= 1000, "{slots_max}");
        assert!(recovered.index.capacity() >= slots_max);
        assert!(recovered.entries.capacity() >= slots_max);
    }

    /// A removed key is absent at once and, once flushed, after recovery; its slot is reused
    /// only after its free word is durable, and its entry by the next new key.
    #[test]
    fn a_removed_key_frees_its_slot_durably_before_the_slot_is_reused() {
        let mut options = StoreOptions::new(Durability::Sync);
        options.key_bytes_max = 64;
        options.record_bytes_max = 256;
        options.append_chunk_bytes = 0;
        let (mut store, _) = SlotStore::open_on(SimMedia::new(), options.clone()).unwrap();
        for key in [&b"a"[..], b"b", b"c"] {
            store.put(key, b"record").unwrap();
        }
        store.flush().unwrap();
        let (free_before, slot_b) = (store.free_slots(), store.slot_offset(b"b"));
        assert!(store.remove(b"b").unwrap());
        assert!(!store.remove(b"b").unwrap());
        assert_eq!((store.len(), store.get(b"b")), (2, None));
        assert_eq!(store.free_slots(), free_before + 1);
        // Not durable yet: a crash now recovers it.
        let image = store.media().now().durable_image();
        let (crashed, _) =
            SlotStore::open_on(SimMedia::from_image(image), options.clone()).unwrap();
        assert_eq!(crashed.get(b"b"), Some(&b"record"[..]));
        // A new key before the flush takes another slot.
        store.put(b"d", b"record").unwrap();
        assert_ne!(store.slot_offset(b"d"), slot_b);
        store.flush().unwrap();
        let image = store.media().now().durable_image();
        let (recovered, report) =
            SlotStore::open_on(SimMedia::from_image(image), options.clone()).unwrap();
        assert_eq!(recovered.get(b"b"), None);
        assert_eq!((recovered.len(), report.free_slots), (3, 1));
        // After the flush the freed slot is reused.
        store.put(b"e", b"record").unwrap();
        assert_eq!(store.slot_offset(b"e"), slot_b);
        let keys: Vec<&[u8]> = store.iter().map(|(k, _)| k).collect();
        assert_eq!(keys.len(), 4);
        assert!(!keys.contains(&&b"b"[..]));
    }

    /// A location stays its key's through overwrites and moves, and is found again by a scan
    /// and a recovery; once the key is removed and its entry taken by another key, the stale
    /// location is detected: a put of the old key through it writes that key, never the
    /// entry's new one.
    #[test]
    fn a_location_is_its_keys_until_removed_and_a_stale_one_is_never_trusted() {
        let mut options = StoreOptions::new(Durability::Sync);
        options.key_bytes_max = 64;
        options.record_bytes_max = 1024;
        let long = |last: u8| {
            let mut key = vec![b'k'; 30];
            key.push(last);
            key
        };
        let (mut store, _) = SlotStore::open_on(SimMedia::new(), options.clone()).unwrap();
        let a = store.put_at(None, b"a", b"a1").unwrap();
        let k = store.put_at(None, &long(b'1'), b"k1").unwrap();
        assert_ne!(a, k);
        assert_eq!(store.location(b"a"), Some(a));
        assert_eq!(store.put_at(Some(a), b"a", b"a2").unwrap(), a);
        let slot = store.slot_offset(b"a");
        assert_eq!(store.put_at(Some(a), b"a", &[b'a'; 500]).unwrap(), a);
        assert_ne!(store.slot_offset(b"a"), slot, "moved, same location");
        store.flush().unwrap();
        let located: Vec<(Location, &[u8])> =
            store.iter_located().map(|(l, k, _)| (l, k)).collect();
        assert_eq!(located, [(a, &b"a"[..]), (k, &long(b'1')[..])]);
        // A location of another key, or none the store gave, is not trusted.
        let other = long(b'2');
        let o = store.put_at(Some(k), &other, b"o1").unwrap();
        assert_ne!(o, k);
        assert_eq!(store.get(&long(b'1')), Some(&b"k1"[..]));
        let far = Location::from_u64(1 << 20);
        assert_ne!(store.put_at(far, b"z", b"z1").unwrap(), far.unwrap());
        assert_eq!(Location::from_u64(u64::MAX), None);
        // Removed: the entry goes to the next new key, and `a`'s old location is stale.
        assert!(store.remove(b"a").unwrap());
        store.flush().unwrap();
        let c = store.put_at(None, b"c", b"c1").unwrap();
        assert_eq!(c, a, "the removed key's entry is reused");
        let a_again = store.put_at(Some(a), b"a", b"a3").unwrap();
        assert_ne!(a_again, c);
        store.flush().unwrap();
        assert_eq!(store.get(b"c"), Some(&b"c1"[..]));
        assert_eq!(store.get(b"a"), Some(&b"a3"[..]));
        // Recovery gives every key a location of its own again, which the scan names.
        let image = store.media().now().durable_image();
        let (recovered, _) = SlotStore::open_on(SimMedia::from_image(image), options).unwrap();
        for (location, key, record) in recovered.iter_located() {
            assert_eq!(recovered.location(key), Some(location));
            assert_eq!(recovered.get(key), Some(record));
        }
        assert_eq!(recovered.iter_located().count(), 5);
    }

    /// Without the index: keys are found at their locations (also a location given earlier in
    /// the batch, across moves), a new key written twice in a batch stays one key, a location
    /// that does not hold its key writes nothing, removal, refusal and recovery keep the count.
    /// In every durability: in `memory` and `mmap` modes each put persists at once, but the
    /// batch lasts until the caller's flush (when it ended at each put's persist, a new key
    /// written twice took two slots with equal sequence numbers, and a key moved in the batch
    /// was no longer found at its location from before the batch).
    #[test]
    fn without_the_index_a_key_is_found_at_its_location_only() {
        for durability in [Durability::Sync, Durability::Mmap, Durability::Memory] {
            a_key_is_found_at_its_location_only(durability);
        }
    }

    fn a_key_is_found_at_its_location_only(durability: Durability) {
        let mut options = StoreOptions::new(durability);
        options.key_bytes_max = 64;
        options.record_bytes_max = 1024;
        options.file_bytes_max = 64 * 1024;
        options.append_chunk_bytes = 0;
        options.located = true;
        let (mut store, _) = SlotStore::open_on(SimMedia::new(), options.clone()).unwrap();
        assert!(!store.index_dropped());
        let a = store.put_at(None, b"a", b"a1").unwrap();
        assert!(store.index_dropped(), "the first write drops the index");
        assert_eq!(
            store.put_at(None, b"a", b"a2").unwrap(),
            a,
            "one key in the batch"
        );
        let b = store.put_at(None, b"b", b"b1").unwrap();
        // `a` moves twice in the batch; its first location still leads to it.
        let a_moved = store.put_at(Some(a), b"a", &[b'x'; 200]).unwrap();
        assert_ne!(a_moved, a);
        let a_moved_again = store.put_at(None, b"a", &[b'y'; 600]).unwrap();
        assert_eq!(store.get_at(Some(a), b"a").unwrap(), Some(&[b'y'; 600][..]));
        assert_eq!(store.len(), 2);
        store.flush().unwrap();
        let in_use = |store: &SlotStore<SimMedia>| {
            let image = store.media().now().durable_image();
            let (recovered, _) =
                SlotStore::open_on(SimMedia::from_image(image), options.clone()).unwrap();
            recovered.len()
        };
        assert_eq!(in_use(&store), 2, "{durability:?}: one slot per key");
        // A key held before the batch moves in it, then is written at its location from
        // before the batch again (as the acceptor table hands it for every write of a batch);
        // a new key is written twice, a slot left in the batch not taken by it.
        let a_before = a_moved_again;
        let a_now = store.put_at(Some(a_before), b"a", &[b'z'; 1024]).unwrap();
        assert_ne!(a_now, a_before, "moved");
        let e = store.put_at(None, b"e", b"e1").unwrap();
        let free = store.free_slots();
        let d = store.put_at(None, b"d", &[b'd'; 600]).unwrap();
        assert_ne!(d, a_before, "a slot left in the batch is not reused in it");
        assert_eq!(store.put_at(Some(a_before), b"a", b"a3").unwrap(), a_now);
        assert_eq!(
            store.put_at(None, b"d", b"d2").unwrap(),
            d,
            "one key in the batch"
        );
        assert_eq!((store.len(), store.free_slots()), (4, free));
        store.flush().unwrap();
        assert_eq!(store.get_at(Some(d), b"d").unwrap(), Some(&b"d2"[..]));
        assert_eq!(store.get_at(Some(a_now), b"a").unwrap(), Some(&b"a3"[..]));
        assert_eq!(in_use(&store), 4, "{durability:?}: one slot per key");
        assert!(store.remove_at(Some(d), b"d").unwrap());
        assert!(store.remove_at(Some(e), b"e").unwrap());
        store.flush().unwrap();
        let a_moved_again = store.put_at(Some(a_now), b"a", &[b'y'; 600]).unwrap();
        store.flush().unwrap();
        assert_eq!(
            store
                .get_at(Some(a_moved_again), b"a")
                .unwrap()
                .unwrap()
                .len(),
            600
        );
        assert_eq!(store.get_at(None, b"a").unwrap(), None, "not new any more");
        // A location that does not hold the key: refused, nothing written.
        let end = store.end_bytes();
        for (at, key) in [
            (Some(b), &b"a"[..]),
            (Some(a), b"a"),
            (Location::from_u64(0), b"b"),
        ] {
            assert!(
                matches!(
                    store.put_at(at, key, b"zz"),
                    Err(StoreError::NotAtLocation { .. })
                ),
                "{at:?}"
            );
        }
        assert_eq!((store.end_bytes(), store.len()), (end, 2));
        // Removed at its location; the slot is reused once its free word is durable.
        assert!(store.remove_at(Some(b), b"b").unwrap());
        assert!(store.get_at(Some(b), b"b").is_err());
        store.flush().unwrap();
        let c = store.put_at(None, b"c", b"c1").unwrap();
        assert_eq!(c, b, "the freed slot is reused");
        store.flush().unwrap();
        // A refused write (the file is full) changes nothing.
        let mut n = 0u32;
        let full = loop {
            let key = format!("k{n}");
            match store.put_at(None, key.as_bytes(), &[b'z'; 900]) {
                Ok(_) => n += 1,
                Err(e) => break e,
            }
        };
        assert!(matches!(full, StoreError::FileFull { .. }), "{full}");
        assert_eq!(store.len(), 2 + n as usize);
        store.flush().unwrap();
        assert_eq!(store.get_at(Some(c), b"c").unwrap(), Some(&b"c1"[..]));
        assert!(store.verify().is_empty());
        let scanned: Vec<(Location, Vec<u8>)> = (store.iter_located())
            .map(|(l, k, _)| (l, k.to_vec()))
            .collect();
        assert_eq!(scanned.len(), store.len());
        assert!(scanned.contains(&(a_moved_again, b"a".to_vec())));
        // Recovery names the same locations, and the index answers by key until dropped.
        let image = store.media().now().durable_image();
        let (recovered, _) = SlotStore::open_on(SimMedia::from_image(image), options).unwrap();
        for (location, key, record) in recovered.iter_located() {
            assert!(scanned.contains(&(location, key.to_vec())));
            assert_eq!(recovered.location(key), Some(location));
            assert_eq!(recovered.get_at(Some(location), key).unwrap(), Some(record));
        }
        assert_eq!(recovered.len(), scanned.len());
    }

    #[test]
    fn every_single_bit_flip_of_a_header_word_fails_its_check() {
        let headers = [
            SlotHeader::free(0),
            SlotHeader::free(5),
            SlotHeader {
                class: 3,
                in_use: true,
                current: 1,
                seq_low: 0xdead_beef,
            },
            SlotHeader {
                class: 0,
                in_use: true,
                current: 0,
                seq_low: 1,
            },
        ];
        for h in headers {
            let word = h.encode();
            assert_eq!(SlotHeader::decode(word), Some(h));
            for bit in 0..64 {
                assert_eq!(
                    SlotHeader::decode(word ^ (1 << bit)),
                    None,
                    "{h:?} bit {bit}"
                );
            }
        }
        assert_eq!(SlotHeader::decode(0), Some(SlotHeader::free(0)));
    }

    #[test]
    fn the_zero_word_crc_is_crc32c_of_eight_zero_bytes() {
        assert_eq!(CRC_OF_ZERO_WORD, crc32c::crc32c(&[0u8; 8]));
        let (short, long) = (vec![3u8; 40], vec![5u8; 300]);
        for body in [&short, &long] {
            let whole: Vec<u8> = [&b"\x02\x00ab"[..], body].concat();
            assert_eq!(version_crc(b"\x02\x00ab", body), crc32c::crc32c(&whole));
        }
    }

    #[test]
    fn every_single_bit_flip_of_the_end_word_fails_its_check() {
        for end in [64usize, 4096 + 64, 1 << 40] {
            let word = encode_end(end);
            assert_eq!(decode_end(word), Some(end));
            for bit in 0..64 {
                assert_eq!(decode_end(word ^ (1 << bit)), None, "end {end} bit {bit}");
            }
        }
    }

    #[test]
    fn options_whose_largest_class_is_too_small_are_refused() {
        let mut options = StoreOptions::new(Durability::Memory);
        options.record_bytes_max = 1 << 40;
        assert!(matches!(
            check_options(&options),
            Err(StoreError::InvalidOptions(_))
        ));
        options.record_bytes_max = 64;
        options.slot_bytes_min = 100;
        assert!(matches!(
            check_options(&options),
            Err(StoreError::InvalidOptions(_))
        ));
        let defaults = StoreOptions::new(Durability::Memory);
        // 20 + 1024 + 65536 bytes need class 11: 256 KiB slots, versions of 131,068 bytes
        // (class 10's versions hold 65,532).
        assert_eq!(check_options(&defaults).unwrap(), 11);
    }
}
