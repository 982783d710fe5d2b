//! A segmented log of opaque records with a `u64` index, and snapshot files beside it: the
//! stable storage of a log-based engine (seed 002's FullSS: log and snapshot on disk, replayed
//! at start).
//!
//! A directory ([`Dir`]) holds:
//! * `meta`: the first kept index, in two checked 16-byte slots written alternately (the one
//!   not current is overwritten and persisted, so a crash leaves the old or the new value);
//! * `seg-<first index>`: segments of at most `segment_bytes`, each a 64-byte header (magic,
//!   first index, the *flushed end* word) and records `crc32c | len | index | bytes`, padded
//!   to 8 bytes. Records are appended in index order with no gaps;
//! * `snap-<index>`: snapshots, written to `snap-<index>.tmp`, persisted, renamed, and the
//!   directory synced; the newest two are kept and the newest valid one is read at open.
//!
//! **Group commit.** [`SegmentLog::append`] writes; [`SegmentLog::flush`] persists every
//! record written since the last flush (round 1), then stores each touched segment's flushed
//! end word with one aligned store and persists it (round 2). A flush is acknowledged when both
//! rounds are done.
//!
//! **Torn tail versus damage.** At open each segment is scanned from its header. Below its
//! flushed end word every record must be whole (checksum, length, index): a bad one there was
//! acknowledged, so it is media damage and opening fails with [`StoreError::Corrupt`]. Past the
//! flushed end the records belong to a flush that a crash interrupted: the scan keeps the whole
//! ones and the first bad one (a torn or unwritten record) ends the log; the rest of that
//! segment is zeroed and every later segment is removed, so that stale bytes can never be read
//! as a record once new ones are appended over them.
//!
//! **Prefix deletion** records the new first index in `meta` first, then removes the segments
//! wholly below it (a crash between leaves segments that the next open removes). **Tail
//! truncation** removes later segments and syncs the directory, lowers the flushed end word,
//! then zeroes the dropped records, all before it returns.
use std::collections::BTreeMap;
use std::path::Path;

use crate::dir::{Dir, FileId, FsDir};
use crate::media::Media;
use crate::slot_store::{decode_end, encode_end};
use crate::{Durability, StoreError};

/// Segment file magic.
pub const SEGMENT_MAGIC: [u8; 8] = *b"LLSEG01\n";
/// Snapshot file magic.
pub const SNAPSHOT_MAGIC: [u8; 8] = *b"LLSNAP1\n";
/// Bytes before a segment's first record.
pub const SEGMENT_HEADER_BYTES: usize = 64;
/// Bytes of a record's header: crc32c u32, len u32, index u64.
pub const RECORD_HEADER_BYTES: usize = 16;
/// Bytes before a snapshot's payload.
pub const SNAPSHOT_HEADER_BYTES: usize = 32;
/// Default segment size: 64 MiB.
pub const SEGMENT_BYTES_DEFAULT: usize = 64 << 20;
/// Default record limit: 4 MiB.
pub const RECORD_BYTES_MAX_DEFAULT: usize = 4 << 20;
/// Default snapshot limit: 1 GiB.
pub const SNAPSHOT_BYTES_MAX_DEFAULT: usize = 1 << 30;
/// Snapshots kept: the newest and the one before, to fall back on if the newest is damaged.
pub const SNAPSHOTS_KEPT: usize = 2;

const META_NAME: &str = "meta";
const META_SLOT_BYTES: usize = 16;
const END_WORD_OFFSET: usize = 16;
// Zeroing works sector by sector, so a truncation dirties only the sectors it changes.
const ZERO_CHUNK_BYTES: usize = crate::media::SECTOR_BYTES;

/// The parameters of a segmented log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SegmentLogOptions {
    /// How writes are kept.
    pub durability: Durability,
    /// The size of a segment file; a record that does not fit in the current one starts the
    /// next. At most 4 GiB (offsets are u32), and large enough for one largest record.
    pub segment_bytes: usize,
    /// The largest record accepted.
    pub record_bytes_max: usize,
    /// The largest snapshot accepted.
    pub snapshot_bytes_max: usize,
}

impl SegmentLogOptions {
    /// Defaults for `durability`: 64 MiB segments, records up to 4 MiB, snapshots up to 1 GiB.
    pub fn new(durability: Durability) -> SegmentLogOptions {
        SegmentLogOptions {
            durability,
            segment_bytes: SEGMENT_BYTES_DEFAULT,
            record_bytes_max: RECORD_BYTES_MAX_DEFAULT,
            snapshot_bytes_max: SNAPSHOT_BYTES_MAX_DEFAULT,
        }
    }

    fn check(&self) -> Result<(), StoreError> {
        if self.segment_bytes > u32::MAX as usize {
            return Err(StoreError::InvalidOptions("segment_bytes above 4 GiB"));
        }
        if SEGMENT_HEADER_BYTES + record_bytes(self.record_bytes_max) > self.segment_bytes {
            return Err(StoreError::InvalidOptions(
                "a segment cannot hold the largest record",
            ));
        }
        Ok(())
    }
}

/// A deliberate bug for the crash tests: one persist step left out.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum LogMutation {
    /// The log as designed.
    #[default]
    None,
    /// `flush` does not persist the records (acknowledges what is not durable).
    SkipRecordPersist,
    /// The open serves what it found without making it durable first (records past a flushed
    /// end, the first index, the names in the directory).
    SkipRecoveryPersist,
    /// Prefix deletion does not persist the new first index before removing segments.
    SkipMetaPersist,
    /// Tail truncation does not persist the zeroed records.
    SkipTruncatePersist,
    /// A snapshot is renamed into place before its bytes are persisted.
    SkipSnapshotPersist,
    /// A new segment's header is not persisted and the directory not synced before records
    /// go into it.
    SkipSegmentCreatePersist,
}

/// One segment in memory: where each record starts.
struct Segment {
    name: String,
    file: FileId,
    first: u64,
    /// The offset of record `first + k` at `offsets[k]`.
    offsets: Vec<u32>,
    /// The end of the records written.
    end: usize,
    /// The end the flushed end word holds.
    flushed_end: usize,
}

impl Segment {
    fn next(&self) -> u64 {
        self.first + self.offsets.len() as u64
    }
}

/// A snapshot file found valid.
struct SnapshotFile {
    index: u64,
    name: String,
    file: FileId,
    len: usize,
}

/// A segmented log and its snapshots in one directory.
pub struct SegmentLog<D: Dir = FsDir> {
    dir: D,
    options: SegmentLogOptions,
    meta: FileId,
    meta_seq: u32,
    /// The first kept index (records below it are deleted, even where still in a segment).
    first: u64,
    /// The index the next append must have.
    next: u64,
    segments: Vec<Segment>,
    /// Valid snapshots, oldest first.
    snapshots: Vec<SnapshotFile>,
    /// Snapshot files that failed their check at open (removed by the next snapshot write).
    damaged_snapshots: Vec<String>,
    poisoned: bool,
    mutation: LogMutation,
}

/// What the open found and repaired.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LogRecovery {
    /// Records past a flushed end that were whole and kept (a flush in flight at a crash).
    pub unflushed_records_kept: u64,
    /// Whether a bad record past a flushed end ended the log (a torn tail).
    pub torn_tail: bool,
    /// Segment files removed (below the first index, after a torn tail, or never finished).
    pub segments_removed: usize,
    /// Snapshot files that failed their check.
    pub damaged_snapshots: Vec<String>,
}

impl SegmentLog<FsDir> {
    /// Opens the log in directory `path` (creating it; no files in `memory` mode).
    pub fn open(
        path: &Path,
        options: SegmentLogOptions,
    ) -> Result<(SegmentLog<FsDir>, LogRecovery), StoreError> {
        let dir = FsDir::open(path, options.durability)?;
        SegmentLog::open_on(dir, options)
    }
}

fn align8(n: usize) -> usize {
    n.div_ceil(8) * 8
}

/// The bytes a record of `len` bytes takes in a segment.
fn record_bytes(len: usize) -> usize {
    align8(RECORD_HEADER_BYTES + len)
}

fn segment_name(first: u64) -> String {
    format!("seg-{first:020}")
}

fn snapshot_name(index: u64) -> String {
    format!("snap-{index:020}")
}

fn parse_index(name: &str, prefix: &str) -> Option<u64> {
    let digits = name.strip_prefix(prefix)?;
    (digits.len() == 20 && digits.bytes().all(|b| b.is_ascii_digit()))
        .then(|| digits.parse().ok())
        .flatten()
}

fn u32_at(bytes: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(bytes[at..at + 4].try_into().expect("4 bytes"))
}

fn u64_at(bytes: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(bytes[at..at + 8].try_into().expect("8 bytes"))
}

/// `RecordTooLarge` unless `bytes` is at most `bytes_max`.
/// A snapshot file's header: magic, index, payload length, checksum of those and the payload.
fn snapshot_header(index: u64, bytes: &[u8]) -> [u8; SNAPSHOT_HEADER_BYTES] {
    let mut head = [0u8; SNAPSHOT_HEADER_BYTES];
    head[0..8].copy_from_slice(&SNAPSHOT_MAGIC);
    head[8..16].copy_from_slice(&index.to_le_bytes());
    head[16..24].copy_from_slice(&(bytes.len() as u64).to_le_bytes());
    let crc = crc32c::crc32c_append(crc32c::crc32c(&head[8..24]), bytes);
    head[24..28].copy_from_slice(&crc.to_le_bytes());
    head
}

/// Writes the snapshot file of `index` (the format [`SegmentLog::write_snapshot`] writes) in
/// the directory `path` of a log, from any thread, without the log: to a temporary file,
/// persisted (with `persist`: `fsync`), renamed into place, the directory synced. The log
/// takes it in with [`SegmentLog::adopt_snapshot`] once this returned. A crash before the
/// rename leaves a temporary file the next open removes; after it, a snapshot the next open
/// finds (whole: it was persisted before the rename).
pub fn write_snapshot_file(
    path: &Path,
    index: u64,
    bytes: &[u8],
    persist: bool,
) -> Result<(), StoreError> {
    use std::io::Write;
    let name = snapshot_name(index);
    let tmp = path.join(format!("{name}.bg.tmp"));
    let write = || -> std::io::Result<()> {
        let mut file = std::fs::File::create(&tmp)?;
        file.write_all(&snapshot_header(index, bytes))?;
        file.write_all(bytes)?;
        if persist {
            file.sync_all()?;
        }
        Ok(())
    };
    if let Err(e) = write() {
        // Nothing of it is used: a full disk gets its space back.
        let _ = std::fs::remove_file(&tmp);
        return Err(StoreError::io("write a snapshot file")(e));
    }
    std::fs::rename(&tmp, path.join(&name)).map_err(StoreError::io("rename a snapshot file"))?;
    if persist {
        std::fs::File::open(path)
            .and_then(|d| d.sync_all())
            .map_err(StoreError::io("fsync directory"))?;
    }
    Ok(())
}

fn within_limit(bytes: usize, bytes_max: usize) -> Result<(), StoreError> {
    if bytes > bytes_max {
        return Err(StoreError::RecordTooLarge { bytes, bytes_max });
    }
    Ok(())
}

fn corrupt(what: &'static str, offset: usize) -> StoreError {
    StoreError::Corrupt {
        what,
        offset_bytes: offset as u64,
    }
}

fn record_crc(len: u32, index: u64, bytes: &[u8]) -> u32 {
    let crc = crc32c::crc32c(&len.to_le_bytes());
    let crc = crc32c::crc32c_append(crc, &index.to_le_bytes());
    crc32c::crc32c_append(crc, bytes)
}

/// Where the meta slot of sequence `seq` goes: odd and even sequences alternate, so a write
/// never overwrites the current slot.
fn meta_slot_at(seq: u32) -> usize {
    (seq as usize % 2) * META_SLOT_BYTES
}

fn meta_slot(first: u64, seq: u32) -> [u8; META_SLOT_BYTES] {
    let mut slot = [0u8; META_SLOT_BYTES];
    slot[0..8].copy_from_slice(&first.to_le_bytes());
    slot[8..12].copy_from_slice(&seq.to_le_bytes());
    let crc = crc32c::crc32c(&slot[0..12]);
    slot[12..16].copy_from_slice(&crc.to_le_bytes());
    slot
}

/// The valid meta slot with the higher sequence: (first kept index, sequence).
fn read_meta<M: Media>(media: &M) -> Option<(u64, u32)> {
    (0..2)
        .filter_map(|k| {
            let slot = media.read(k * META_SLOT_BYTES, META_SLOT_BYTES);
            let seq = u32_at(slot, 8);
            (seq != 0 && crc32c::crc32c(&slot[0..12]) == u32_at(slot, 12))
                .then(|| (u64_at(slot, 0), seq))
        })
        .max_by_key(|m| m.1)
}

/// A segment header: (first index, flushed end), or `None` if it fails its check.
fn read_segment_header<M: Media>(media: &M) -> Option<(u64, usize)> {
    if media.len() < SEGMENT_HEADER_BYTES {
        return None;
    }
    let header = media.read(0, SEGMENT_HEADER_BYTES);
    if header[0..8] != SEGMENT_MAGIC || crc32c::crc32c(&header[0..16]) != u32_at(header, 24) {
        return None;
    }
    let end = decode_end(u64_at(header, END_WORD_OFFSET))?;
    (SEGMENT_HEADER_BYTES..=media.len())
        .contains(&end)
        .then_some((u64_at(header, 8), end))
}

/// The record at `at` if it is whole and has `index`: its total bytes.
fn read_record<M: Media>(media: &M, at: usize, index: u64, bytes_max: usize) -> Option<usize> {
    if at + RECORD_HEADER_BYTES > media.len() {
        return None;
    }
    let head = media.read(at, RECORD_HEADER_BYTES);
    let (crc, len, got) = (u32_at(head, 0), u32_at(head, 4), u64_at(head, 8));
    let len_usize = len as usize;
    if got != index || len_usize > bytes_max || at + record_bytes(len_usize) > media.len() {
        return None;
    }
    let bytes = media.read(at + RECORD_HEADER_BYTES, len_usize);
    (record_crc(len, index, bytes) == crc).then_some(record_bytes(len_usize))
}

/// A snapshot file's (index, payload length), if its header and checksum hold.
fn read_snapshot<M: Media>(media: &M, bytes_max: usize) -> Option<(u64, usize)> {
    if media.len() < SNAPSHOT_HEADER_BYTES {
        return None;
    }
    let head = media.read(0, SNAPSHOT_HEADER_BYTES);
    let (index, len) = (u64_at(head, 8), u64_at(head, 16));
    let len = usize::try_from(len).ok().filter(|&l| l <= bytes_max)?;
    if head[0..8] != SNAPSHOT_MAGIC || SNAPSHOT_HEADER_BYTES + len > media.len() {
        return None;
    }
    let crc = crc32c::crc32c(&head[8..24]);
    let crc = crc32c::crc32c_append(crc, media.read(SNAPSHOT_HEADER_BYTES, len));
    (crc == u32_at(head, 24)).then_some((index, len))
}

impl<D: Dir> SegmentLog<D> {
    /// Opens the log in `dir`: reads the first kept index, scans every segment (verifying each
    /// record and building the index → offset table; record bytes stay on the media), repairs
    /// a torn tail, and finds the snapshots. Iterate the records with [`SegmentLog::iter`].
    pub fn open_on(
        dir: D,
        options: SegmentLogOptions,
    ) -> Result<(SegmentLog<D>, LogRecovery), StoreError> {
        SegmentLog::open_mutated(dir, options, LogMutation::None)
    }

    /// [`SegmentLog::open_on`] with a deliberate bug switched on from the start, so that it
    /// covers the open's own repairs (crash tests only).
    pub fn open_mutated(
        mut dir: D,
        options: SegmentLogOptions,
        mutation: LogMutation,
    ) -> Result<(SegmentLog<D>, LogRecovery), StoreError> {
        options.check()?;
        let mut recovery = LogRecovery::default();
        let names = dir.names();
        let meta = dir.open(META_NAME)?;
        let (first, meta_seq) = match read_meta(dir.file(meta)) {
            Some(m) => m,
            None if dir.file(meta).read(0, 2 * META_SLOT_BYTES) == [0u8; 32] => {
                // A new log: the meta file exists durably before any segment does.
                dir.file_mut(meta).write(meta_slot_at(1), &meta_slot(0, 1));
                dir.file_mut(meta)
                    .persist(meta_slot_at(1), META_SLOT_BYTES)?;
                dir.sync()?;
                (0, 1)
            }
            None => return Err(corrupt("log meta file fails its check", 0)),
        };
        let mut log = SegmentLog {
            dir,
            options,
            meta,
            meta_seq,
            first,
            next: first,
            segments: Vec::new(),
            snapshots: Vec::new(),
            damaged_snapshots: Vec::new(),
            poisoned: false,
            mutation,
        };
        for name in names.iter().filter(|n| n.ends_with(".tmp")) {
            log.dir.remove(name)?;
        }
        log.open_snapshots(&names)?;
        recovery.damaged_snapshots = log.damaged_snapshots.clone();
        let segment_names: BTreeMap<u64, &String> = names
            .iter()
            .filter_map(|n| Some((parse_index(n, "seg-")?, n)))
            .collect();
        log.open_segments(&segment_names, &mut recovery)?;
        Ok((log, recovery))
    }

    fn open_snapshots(&mut self, names: &[String]) -> Result<(), StoreError> {
        for name in names {
            let Some(index) = parse_index(name, "snap-") else {
                continue;
            };
            let file = self.dir.open(name)?;
            match read_snapshot(self.dir.file(file), self.options.snapshot_bytes_max) {
                Some((got, len)) if got == index => self.snapshots.push(SnapshotFile {
                    index,
                    name: name.clone(),
                    file,
                    len,
                }),
                _ => self.damaged_snapshots.push(name.clone()),
            }
        }
        self.snapshots.sort_by_key(|s| s.index);
        Ok(())
    }

    fn open_segments(
        &mut self,
        names: &BTreeMap<u64, &String>,
        recovery: &mut LogRecovery,
    ) -> Result<(), StoreError> {
        let firsts: Vec<u64> = names.keys().copied().collect();
        let mut removed = Vec::new();
        let mut ended = false;
        for (k, (&first, &name)) in names.iter().enumerate() {
            let wholly_below = firsts.get(k + 1).is_some_and(|&n| n <= self.first);
            if ended || wholly_below {
                removed.push(name.clone());
                continue;
            }
            let file = self.dir.open(name)?;
            let is_last = k + 1 == firsts.len();
            let Some((header_first, flushed_end)) = read_segment_header(self.dir.file(file)) else {
                if is_last && self.unwritten_past_header(file) {
                    // A roll that a crash interrupted before the header was durable: records
                    // go into a segment only after its header is.
                    removed.push(name.clone());
                    continue;
                }
                return Err(corrupt("segment header fails its check", 0));
            };
            if header_first != first {
                return Err(corrupt("segment header names another first index", 8));
            }
            match self.segments.last() {
                None if first > self.first => {
                    return Err(corrupt("a gap between the first index and the log", 0));
                }
                Some(prev) if prev.next() != first => {
                    // The previous segment ended early (a torn tail): this one was never part
                    // of an acknowledged log.
                    removed.push(name.clone());
                    ended = true;
                    continue;
                }
                _ => {}
            }
            let segment = self.scan_segment(name, file, first, flushed_end, recovery)?;
            // After a torn tail no later segment was ever part of an acknowledged log.
            ended = recovery.torn_tail;
            self.segments.push(segment);
        }
        for name in &removed {
            self.dir.remove(name)?;
        }
        recovery.segments_removed = removed.len();
        self.next = self.segments.last().map_or(self.first, Segment::next);
        if self.next < self.first {
            // Every record left is below the first index (a prefix deletion past the end that
            // a crash interrupted).
            for segment in std::mem::take(&mut self.segments) {
                self.dir.remove(&segment.name)?;
                recovery.segments_removed += 1;
            }
            self.next = self.first;
        }
        self.repair_tail()?;
        // Every name the open saw becomes durable (after a kill -9 a rename or a removal may
        // be in the page cache only).
        if self.mutation == LogMutation::SkipRecoveryPersist {
            return Ok(());
        }
        self.dir.sync()
    }

    /// Whether every byte of `file` past the segment header is zero (no record was written).
    fn unwritten_past_header(&self, file: FileId) -> bool {
        let media = self.dir.file(file);
        (SEGMENT_HEADER_BYTES..media.len())
            .step_by(ZERO_CHUNK_BYTES)
            .all(|at| {
                let n = ZERO_CHUNK_BYTES.min(media.len() - at);
                media.read(at, n).iter().all(|&b| b == 0)
            })
    }

    /// Scans one segment's records. Below the flushed end a bad record is damage; past it, it
    /// ends the log.
    fn scan_segment(
        &mut self,
        name: &str,
        file: FileId,
        first: u64,
        flushed_end: usize,
        recovery: &mut LogRecovery,
    ) -> Result<Segment, StoreError> {
        let media = self.dir.file(file);
        let mut offsets = Vec::new();
        let mut at = SEGMENT_HEADER_BYTES;
        let bytes_max = self.options.record_bytes_max;
        loop {
            let index = first + offsets.len() as u64;
            match read_record(media, at, index, bytes_max) {
                Some(bytes) => {
                    offsets.push(at as u32);
                    if at >= flushed_end {
                        recovery.unflushed_records_kept += 1;
                    }
                    at += bytes;
                }
                None if at < flushed_end => {
                    return Err(corrupt("damaged record below the flushed end", at));
                }
                None => {
                    let header = media.read(at, RECORD_HEADER_BYTES.min(media.len() - at));
                    // Zeros are unwritten space (the normal end); anything else was torn.
                    recovery.torn_tail |= header.iter().any(|&b| b != 0);
                    break;
                }
            }
        }
        Ok(Segment {
            name: name.to_string(),
            file,
            first,
            offsets,
            end: at,
            flushed_end,
        })
    }

    /// After open: makes whole records past a flushed end durable, and zeroes everything past
    /// the last segment's end, so that no stale byte is ever read as a record. Everything the
    /// open found is made durable before the log is served: after a kill -9 the page cache
    /// holds writes that no persist covered (a record, a zeroed tail, a new segment's header,
    /// the first index), and a power failure after the restart must not take back what the
    /// restarted node has already read and acted on.
    fn repair_tail(&mut self) -> Result<(), StoreError> {
        if self.mutation == LogMutation::SkipRecoveryPersist {
            return Ok(());
        }
        for k in 0..self.segments.len() {
            if self.segments[k].flushed_end != self.segments[k].end {
                self.flush_segment(k)?;
            }
        }
        if let Some(last) = self.segments.last() {
            let (file, end) = (last.file, last.end);
            self.persist_ranges(file, &[(0, SEGMENT_HEADER_BYTES)])?;
            self.zero_from(file, end)?;
        }
        let meta = self.meta;
        self.persist_ranges(meta, &[(0, 2 * META_SLOT_BYTES)])
    }

    /// Zeroes the bytes of `file` from `from` to its end where they are not zero already, and
    /// persists the whole range (bytes already zero in memory may not be on the media yet).
    fn zero_from(&mut self, file: FileId, from: usize) -> Result<(), StoreError> {
        let len = self.dir.file(file).len();
        let zeros = [0u8; ZERO_CHUNK_BYTES];
        let mut at = from;
        while at < len {
            let n = ZERO_CHUNK_BYTES.min(len - at);
            if self.dir.file(file).read(at, n).iter().any(|&b| b != 0) {
                self.dir.file_mut(file).write(at, &zeros[..n]);
            }
            at += n;
        }
        if self.mutation != LogMutation::SkipTruncatePersist && from < len {
            self.persist_ranges(file, &[(from, len - from)])?;
        }
        Ok(())
    }

    fn persist_ranges(
        &mut self,
        file: FileId,
        ranges: &[(usize, usize)],
    ) -> Result<(), StoreError> {
        self.dir
            .file_mut(file)
            .persist_ranges(ranges)
            .inspect_err(|_| self.poisoned = true)
    }

    fn check_usable(&self) -> Result<(), StoreError> {
        if self.poisoned {
            return Err(StoreError::Poisoned);
        }
        Ok(())
    }

    /// After file `name` could not be created or grown: a full disk ([`StoreError::is_no_space`]) leaves the
    /// log usable, and the file, which no record or snapshot uses yet, is removed so that the
    /// space it took returns (a segment or snapshot is created again at the next try); any
    /// other error poisons the log (fail-stop).
    fn refused_space(&mut self, name: &str, error: &StoreError) {
        if !error.is_no_space() {
            self.poisoned = true;
            return;
        }
        let _ = self.dir_op(|d| d.remove(name));
    }

    /// Fail-stop: an error from a directory operation poisons the log.
    fn dir_op<T>(
        &mut self,
        f: impl FnOnce(&mut D) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        f(&mut self.dir).inspect_err(|_| self.poisoned = true)
    }

    /// Appends record `index` (which must be [`SegmentLog::next_index`]); it is durable after
    /// the next [`SegmentLog::flush`]. A refused append changes nothing; one refused for want of
    /// space ([`StoreError::is_no_space`], when a new segment cannot be created) leaves the
    /// log usable, and may be tried again.
    pub fn append(&mut self, index: u64, bytes: &[u8]) -> Result<(), StoreError> {
        self.check_usable()?;
        if index != self.next {
            return Err(StoreError::OutOfOrder {
                index,
                expected: self.next,
            });
        }
        within_limit(bytes.len(), self.options.record_bytes_max)?;
        let need = record_bytes(bytes.len());
        let fits = self
            .segments
            .last()
            .is_some_and(|s| s.end + need <= self.options.segment_bytes);
        if !fits {
            self.roll(index)?;
        }
        let segment = self.segments.last_mut().expect("a segment to append to");
        let at = segment.end;
        let len = bytes.len() as u32;
        let mut head = [0u8; RECORD_HEADER_BYTES];
        head[0..4].copy_from_slice(&record_crc(len, index, bytes).to_le_bytes());
        head[4..8].copy_from_slice(&len.to_le_bytes());
        head[8..16].copy_from_slice(&index.to_le_bytes());
        let media = self.dir.file_mut(segment.file);
        media.write(at, &head);
        media.write(at + RECORD_HEADER_BYTES, bytes);
        let pad = need - RECORD_HEADER_BYTES - bytes.len();
        if pad > 0 {
            media.write(at + RECORD_HEADER_BYTES + bytes.len(), &[0u8; 8][..pad]);
        }
        segment.offsets.push(at as u32);
        segment.end += need;
        self.next += 1;
        Ok(())
    }

    /// Starts segment `first`: the file at its full size, its header durable, and its name
    /// durable (directory synced) before any record in it can be acknowledged.
    fn roll(&mut self, first: u64) -> Result<(), StoreError> {
        let name = segment_name(first);
        let segment_bytes = self.options.segment_bytes;
        let file = self
            .dir
            .open(&name)
            .inspect_err(|e| self.refused_space(&name, e))?;
        let mut header = [0u8; SEGMENT_HEADER_BYTES];
        header[0..8].copy_from_slice(&SEGMENT_MAGIC);
        header[8..16].copy_from_slice(&first.to_le_bytes());
        header[16..24].copy_from_slice(&encode_end(SEGMENT_HEADER_BYTES).to_le_bytes());
        let crc = crc32c::crc32c(&header[0..16]);
        header[24..28].copy_from_slice(&crc.to_le_bytes());
        let media = self.dir.file_mut(file);
        if media.len() < segment_bytes {
            media
                .grow(segment_bytes)
                .inspect_err(|e| self.refused_space(&name, e))?;
        }
        self.dir.file_mut(file).write(0, &header);
        if self.mutation != LogMutation::SkipSegmentCreatePersist {
            self.persist_ranges(file, &[(0, SEGMENT_HEADER_BYTES)])?;
            self.dir_op(|d| d.sync())?;
        }
        self.segments.push(Segment {
            name,
            file,
            first,
            offsets: Vec::new(),
            end: SEGMENT_HEADER_BYTES,
            flushed_end: SEGMENT_HEADER_BYTES,
        });
        Ok(())
    }

    /// Makes every appended record durable (group commit): persists the records of every
    /// segment written since the last flush, oldest first, then their flushed end words.
    pub fn flush(&mut self) -> Result<(), StoreError> {
        self.check_usable()?;
        for k in 0..self.segments.len() {
            if self.segments[k].flushed_end != self.segments[k].end {
                self.flush_segment(k)?;
            }
        }
        Ok(())
    }

    fn flush_segment(&mut self, k: usize) -> Result<(), StoreError> {
        let (file, from, end) = {
            let s = &self.segments[k];
            (s.file, s.flushed_end.min(s.end), s.end)
        };
        if self.mutation != LogMutation::SkipRecordPersist && end > from {
            self.persist_ranges(file, &[(from, end - from)])?;
        }
        self.set_flushed_end(k, end)
    }

    /// Stores segment `k`'s flushed end word and persists it.
    fn set_flushed_end(&mut self, k: usize, end: usize) -> Result<(), StoreError> {
        let file = self.segments[k].file;
        self.dir
            .file_mut(file)
            .store_u64(END_WORD_OFFSET, encode_end(end));
        self.persist_ranges(file, &[(END_WORD_OFFSET, 8)])?;
        self.segments[k].flushed_end = end;
        Ok(())
    }

    /// Deletes every record below `below` (durably, before it returns): the new first index is
    /// recorded in `meta`, then the segments wholly below it are removed. Past the end, the
    /// log becomes empty and its next index is `below`.
    pub fn truncate_prefix(&mut self, below: u64) -> Result<(), StoreError> {
        self.check_usable()?;
        if below <= self.first {
            return Ok(());
        }
        let seq = self.meta_seq.wrapping_add(1).max(1);
        let slot_at = meta_slot_at(seq);
        let meta = self.meta;
        self.dir
            .file_mut(meta)
            .write(slot_at, &meta_slot(below, seq));
        if self.mutation != LogMutation::SkipMetaPersist {
            self.persist_ranges(meta, &[(slot_at, META_SLOT_BYTES)])?;
        }
        self.meta_seq = seq;
        self.first = below;
        let keep_from = if below >= self.next {
            self.next = below;
            self.segments.len()
        } else {
            // The segment holding `below` and every later one stay.
            self.segments.partition_point(|s| s.first <= below) - 1
        };
        for segment in self.segments.drain(..keep_from).collect::<Vec<_>>() {
            self.dir_op(|d| d.remove(&segment.name))?;
        }
        Ok(())
    }

    /// Deletes every record from `from` on (durably, before it returns), so that the next
    /// append is `from`: for a replica whose undecided suffix is replaced. `from` must lie in
    /// `first_index()..=next_index()`.
    pub fn truncate_tail(&mut self, from: u64) -> Result<(), StoreError> {
        self.check_usable()?;
        if from < self.first || from > self.next {
            return Err(StoreError::OutOfOrder {
                index: from,
                expected: self.next,
            });
        }
        if from == self.next {
            return Ok(());
        }
        // Later segments go first, newest first, so that a crash leaves a chain of segments.
        let keep = self.segments.partition_point(|s| s.first < from);
        let dropped: Vec<Segment> = self.segments.drain(keep..).collect();
        for segment in dropped.iter().rev() {
            self.dir_op(|d| d.remove(&segment.name))?;
        }
        if !dropped.is_empty() {
            self.dir_op(|d| d.sync())?;
        }
        if let Some(k) = self.segments.len().checked_sub(1) {
            let segment = &mut self.segments[k];
            let cut = (from - segment.first) as usize;
            if cut < segment.offsets.len() {
                let at = segment.offsets[cut] as usize;
                let file = segment.file;
                segment.offsets.truncate(cut);
                segment.end = at;
                // The flushed end goes down first, so the zeroed records are never below it
                // (and never up: records below `at` not yet flushed stay for the next flush).
                let flushed_end = segment.flushed_end.min(at);
                self.set_flushed_end(k, flushed_end)?;
                self.zero_from(file, at)?;
            }
        }
        self.next = from;
        Ok(())
    }

    /// Writes a snapshot of the state up to `index` atomically (temporary file, persist,
    /// rename, directory sync) and keeps only the newest two. `index` may not be below the
    /// newest snapshot's; a snapshot at the same index replaces it.
    pub fn write_snapshot(&mut self, index: u64, bytes: &[u8]) -> Result<(), StoreError> {
        self.check_usable()?;
        if let Some(newest) = self.snapshots.last().filter(|s| s.index > index) {
            return Err(StoreError::OutOfOrder {
                index,
                expected: newest.index,
            });
        }
        within_limit(bytes.len(), self.options.snapshot_bytes_max)?;
        let name = snapshot_name(index);
        let tmp = format!("{name}.tmp");
        self.dir_op(|d| d.remove(&tmp))?;
        let file = self
            .dir
            .open(&tmp)
            .inspect_err(|e| self.refused_space(&tmp, e))?;
        let len = SNAPSHOT_HEADER_BYTES + bytes.len();
        let head = snapshot_header(index, bytes);
        let media = self.dir.file_mut(file);
        if media.len() < len {
            media
                .grow(len)
                .inspect_err(|e| self.refused_space(&tmp, e))?;
        }
        let media = self.dir.file_mut(file);
        media.write(0, &head);
        media.write(SNAPSHOT_HEADER_BYTES, bytes);
        if self.mutation != LogMutation::SkipSnapshotPersist {
            self.persist_ranges(file, &[(0, len)])?;
        }
        self.dir_op(|d| d.rename(&tmp, &name))?;
        self.dir_op(|d| d.sync())?;
        self.snapshots.retain(|s| s.index != index);
        self.snapshots.push(SnapshotFile {
            index,
            name,
            file,
            len: bytes.len(),
        });
        self.snapshots.sort_by_key(|s| s.index);
        let old = self.snapshots.len().saturating_sub(SNAPSHOTS_KEPT);
        let mut stale: Vec<String> = self.snapshots.drain(..old).map(|s| s.name).collect();
        stale.append(&mut self.damaged_snapshots);
        for name in stale {
            self.dir_op(|d| d.remove(&name))?;
        }
        Ok(())
    }

    /// Takes in the snapshot file of `index` that [`write_snapshot_file`] made durable in
    /// this log's directory (off the thread that owns the log), as if
    /// [`SegmentLog::write_snapshot`] had written it, and keeps only the newest two. Only its
    /// header is checked here (the writer checksummed the bytes it wrote; the next open checks
    /// them all). A snapshot older than the newest kept is not taken in, and its file is
    /// removed unless a kept snapshot has its name (the same index: the same state, the rename
    /// replaced one file by its equal); the answer is then `false`.
    pub fn adopt_snapshot(&mut self, index: u64) -> Result<bool, StoreError> {
        self.check_usable()?;
        let name = snapshot_name(index);
        if self.snapshots.last().is_some_and(|s| s.index >= index) {
            if !self.snapshots.iter().any(|s| s.index == index) {
                self.dir_op(|d| d.remove(&name))?;
            }
            return Ok(false);
        }
        let file = self.dir_op(|d| d.open(&name))?;
        let media = self.dir.file(file);
        let len = (media.len() >= SNAPSHOT_HEADER_BYTES)
            .then(|| media.read(0, SNAPSHOT_HEADER_BYTES))
            .filter(|head| head[0..8] == SNAPSHOT_MAGIC && u64_at(head, 8) == index)
            .and_then(|head| usize::try_from(u64_at(head, 16)).ok())
            .filter(|&len| SNAPSHOT_HEADER_BYTES + len <= media.len());
        let Some(len) = len else {
            self.poisoned = true;
            return Err(corrupt(
                "a snapshot written beside the log has a bad header",
                0,
            ));
        };
        within_limit(len, self.options.snapshot_bytes_max)?;
        self.snapshots.push(SnapshotFile {
            index,
            name,
            file,
            len,
        });
        let old = self.snapshots.len().saturating_sub(SNAPSHOTS_KEPT);
        let mut stale: Vec<String> = self.snapshots.drain(..old).map(|s| s.name).collect();
        stale.append(&mut self.damaged_snapshots);
        for name in stale {
            self.dir_op(|d| d.remove(&name))?;
        }
        Ok(true)
    }

    /// The newest valid snapshot: its index and bytes.
    pub fn snapshot(&self) -> Option<(u64, &[u8])> {
        self.snapshots.last().map(|s| {
            (
                s.index,
                self.dir.file(s.file).read(SNAPSHOT_HEADER_BYTES, s.len),
            )
        })
    }

    /// The first index in the log (records below it are deleted).
    pub fn first_index(&self) -> u64 {
        self.first
    }

    /// The index the next append must have (one past the last record).
    pub fn next_index(&self) -> u64 {
        self.next
    }

    /// Record `index`, its checksum verified, or `None` outside the log.
    pub fn get(&self, index: u64) -> Result<Option<&[u8]>, StoreError> {
        if index < self.first || index >= self.next {
            return Ok(None);
        }
        let k = self.segments.partition_point(|s| s.first <= index) - 1;
        let segment = &self.segments[k];
        let at = segment.offsets[(index - segment.first) as usize] as usize;
        let media = self.dir.file(segment.file);
        let head = media.read(at, RECORD_HEADER_BYTES);
        let (crc, len) = (u32_at(head, 0), u32_at(head, 4));
        let bytes = media.read(at + RECORD_HEADER_BYTES, len as usize);
        if u64_at(head, 8) != index || record_crc(len, index, bytes) != crc {
            return Err(StoreError::Damaged {
                slot_offset: at as u64,
            });
        }
        Ok(Some(bytes))
    }

    /// The records from `from` on, in order, read from the media one at a time (streaming
    /// replay: nothing is copied).
    pub fn iter(&self, from: u64) -> impl Iterator<Item = Result<(u64, &[u8]), StoreError>> {
        (from.max(self.first)..self.next).map(move |i| {
            self.get(i)
                .map(|r| (i, r.expect("an index inside the log")))
        })
    }

    /// How many segment files the log has.
    pub fn segment_count(&self) -> usize {
        self.segments.len()
    }

    /// Switches on a deliberate bug (crash tests only).
    pub fn set_mutation(&mut self, mutation: LogMutation) {
        self.mutation = mutation;
    }

    /// The directory (for crash tests).
    pub fn dir(&self) -> &D {
        &self.dir
    }

    /// The directory, to arm its crash points (for crash tests and simulations).
    pub fn dir_mut(&mut self) -> &mut D {
        &mut self.dir
    }
}
