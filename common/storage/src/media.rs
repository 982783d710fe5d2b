//! The media a store lives on, behind one small trait: a memory-mapped file, DRAM, or
//! simulated media that builds the images a power failure could leave.
//!
//! What the stores assume of any media (written down in `docs/storage-format.md`):
//! * an aligned 8-byte store ([`Media::store_u64`]) is atomic: after a crash the word is
//!   entirely old or entirely new;
//! * nothing written is durable until a persist covers it; a persist returns once it is;
//! * a crash may leave any subset of the 512-byte sectors written since they were last
//!   persisted, and a sector being written may be torn (part old, part new);
//! * growing the media is durable before the grown space is used.
use std::collections::BTreeSet;
use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::os::unix::io::AsRawFd;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

use memmap2::MmapMut;

use crate::StoreError;

/// The sector size crash images are built from.
pub const SECTOR_BYTES: usize = 512;
/// The cache-line size persistent-memory flushes work in.
pub const CACHE_LINE_BYTES: usize = 64;

/// Byte-addressable media under a store. Offsets and lengths are checked by the store before
/// they reach the media; a range outside the media is a bug and panics.
pub trait Media {
    /// The current size in bytes.
    fn len(&self) -> usize;
    /// Whether the media has no bytes.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Grows the media to `len_bytes` (zero-filled); durable before it returns where the
    /// media is durable at all.
    fn grow(&mut self, len_bytes: usize) -> Result<(), StoreError>;
    /// Whether the disk under the media has at least `bytes` free now, as far as it can tell
    /// (a hint for finding a full disk before a write needs the room: a later grow may still
    /// fail, or succeed). The default, for media without a disk, says yes.
    fn has_room(&self, bytes: usize) -> bool {
        let _ = bytes;
        true
    }
    /// The bytes at `offset..offset + len`.
    fn read(&self, offset: usize, len: usize) -> &[u8];
    /// Writes `bytes` at `offset` (not durable until persisted).
    fn write(&mut self, offset: usize, bytes: &[u8]);
    /// Stores an aligned 8-byte word with one store (atomic with respect to crashes).
    fn store_u64(&mut self, offset: usize, value: u64);
    /// Makes `offset..offset + len` durable.
    fn persist(&mut self, offset: usize, len: usize) -> Result<(), StoreError>;
    /// Makes every `(offset, len)` range durable, in one persist round. The default persists
    /// the span that covers them all with one call: a system call per round instead of per
    /// range, and the kernel writes back only the dirty pages of the span. Persisting more
    /// than asked is always safe here, because the stores persist in rounds and nothing that
    /// must wait for a later round is dirty when a round starts.
    fn persist_ranges(&mut self, ranges: &[(usize, usize)]) -> Result<(), StoreError> {
        let start = ranges.iter().map(|r| r.0).min();
        let end = ranges.iter().map(|r| r.0 + r.1).max();
        match (start, end) {
            (Some(start), Some(end)) if end > start => self.persist(start, end - start),
            _ => Ok(()),
        }
    }
}

/// How a mapped file persists.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PersistBy {
    /// Not at all: the page cache holds the writes (`mmap` mode).
    Nothing,
    /// `msync(MS_SYNC)` of the range (`sync` mode).
    Msync,
    /// Cache-line flushes and a store fence, no system call (`pmem` mode, DAX files only).
    CacheLineFlush,
    /// The same cache-line flushes and fence on a file that need not be on a DAX mount
    /// (`emulp` mode: persistent memory emulated on DRAM, as seed 002 measured it). Everything
    /// else is as in [`PersistBy::CacheLineFlush`]; only the DAX check at open is skipped, so
    /// what survives is what the page cache keeps: a process crash, not a power loss.
    EmulatedCacheLineFlush,
}

impl PersistBy {
    /// Whether persisting is cache-line flushes and a fence (`pmem` and `emulp`).
    pub fn flushes_cache_lines(self) -> bool {
        matches!(
            self,
            PersistBy::CacheLineFlush | PersistBy::EmulatedCacheLineFlush
        )
    }
}

/// A memory-mapped file, locked against other openers.
pub struct MmapMedia {
    file: File,
    map: MmapMut,
    persist_by: PersistBy,
}

impl MmapMedia {
    /// Opens (creating if needed) and maps the file at `path`. Fails with
    /// [`StoreError::Locked`] if another store holds it, and with
    /// [`StoreError::PmemUnavailable`] for [`PersistBy::CacheLineFlush`] on a file that is not
    /// on a DAX mount, and for either cache-line mode off x86_64.
    pub fn open(path: &Path, persist_by: PersistBy) -> Result<MmapMedia, StoreError> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)
            .map_err(StoreError::io("open file"))?;
        // One writer per file: the mapping's soundness and the DRAM index depend on it.
        file.try_lock().map_err(|e| match e {
            std::fs::TryLockError::WouldBlock => StoreError::Locked,
            std::fs::TryLockError::Error(source) => StoreError::Io {
                what: "lock file",
                source,
            },
        })?;
        if persist_by.flushes_cache_lines() {
            check_cache_line_flush()?;
        }
        if persist_by == PersistBy::CacheLineFlush {
            check_dax(&file)?;
        }
        if file.metadata().map_err(StoreError::io("stat file"))?.len() == 0 {
            // A mapping needs at least one page; the stores format the first bytes.
            allocate(&file, 0, 4096)?;
            sync_length(&file, persist_by)?;
        }
        // SAFETY: the file is exclusively locked (flock) by this process, so no other
        // cooperating process maps or writes it while the mapping lives, and this process maps
        // it only here; the mapping is replaced, never aliased, when the file grows.
        let map = unsafe { MmapMut::map_mut(&file) }.map_err(StoreError::io("mmap"))?;
        Ok(MmapMedia {
            file,
            map,
            persist_by,
        })
    }

    /// How this mapping persists.
    pub fn persist_by(&self) -> PersistBy {
        self.persist_by
    }
}

/// Whether this CPU has the cache-line flush the `pmem` and `emulp` modes persist with.
fn check_cache_line_flush() -> Result<(), StoreError> {
    if cfg!(target_arch = "x86_64") {
        Ok(())
    } else {
        Err(StoreError::PmemUnavailable(
            "cache-line flushes are implemented for x86_64 only",
        ))
    }
}

/// Whether `file` is on a DAX mount (its pages are persistent memory, mapped directly).
fn check_dax(file: &File) -> Result<(), StoreError> {
    // SAFETY: `statx` only writes into `buf`, a plain C struct for which all-zero bytes are a
    // valid value; the path is an empty C string and AT_EMPTY_PATH makes the call describe the
    // open descriptor itself.
    let (rc, buf) = unsafe {
        let mut buf: libc::statx = std::mem::zeroed();
        let rc = libc::statx(
            file.as_raw_fd(),
            c"".as_ptr(),
            libc::AT_EMPTY_PATH,
            libc::STATX_BASIC_STATS,
            &mut buf,
        );
        (rc, buf)
    };
    if rc != 0 {
        return Err(StoreError::Io {
            what: "statx",
            source: std::io::Error::last_os_error(),
        });
    }
    let dax = libc::STATX_ATTR_DAX as u64;
    if buf.stx_attributes_mask & dax == 0 || buf.stx_attributes & dax == 0 {
        return Err(StoreError::PmemUnavailable(
            "the file is not on a DAX mount",
        ));
    }
    Ok(())
}

/// Reserves the blocks of `offset..offset + len` and extends the file over them. Reserving
/// (rather than a sparse `set_len`) makes a full disk an error here, not a SIGBUS on a later
/// store into the mapping.
fn allocate(file: &File, offset: usize, len: usize) -> Result<(), StoreError> {
    let too_big = || StoreError::Io {
        what: "grow file",
        source: std::io::Error::from_raw_os_error(libc::EFBIG),
    };
    let start = libc::off_t::try_from(offset).map_err(|_| too_big())?;
    let count = libc::off_t::try_from(len).map_err(|_| too_big())?;
    // SAFETY: fallocate reads no memory of this process; the descriptor is open for writing.
    let rc = unsafe { libc::fallocate(file.as_raw_fd(), 0, start, count) };
    if rc == 0 {
        return Ok(());
    }
    let error = std::io::Error::last_os_error();
    if error.raw_os_error() == Some(libc::EOPNOTSUPP) {
        // A file system without fallocate: fall back to a sparse extension.
        return file
            .set_len((offset + len) as u64)
            .map_err(StoreError::io("grow file"));
    }
    Err(StoreError::Io {
        what: "grow file",
        source: error,
    })
}

/// Makes the file's new length durable where the mode promises durability.
fn sync_length(file: &File, persist_by: PersistBy) -> Result<(), StoreError> {
    match persist_by {
        PersistBy::Nothing => Ok(()),
        PersistBy::Msync | PersistBy::CacheLineFlush | PersistBy::EmulatedCacheLineFlush => file
            .sync_data()
            .map_err(StoreError::io("fdatasync after grow")),
    }
}

impl Media for MmapMedia {
    fn len(&self) -> usize {
        self.map.len()
    }

    fn has_room(&self, bytes: usize) -> bool {
        let mut stat = std::mem::MaybeUninit::<libc::statvfs>::uninit();
        // SAFETY: fstatvfs writes a statvfs into the buffer it is given, which is large enough;
        // the descriptor is open.
        let rc = unsafe { libc::fstatvfs(self.file.as_raw_fd(), stat.as_mut_ptr()) };
        if rc != 0 {
            return true;
        }
        // SAFETY: fstatvfs succeeded, so it filled the buffer.
        let stat = unsafe { stat.assume_init() };
        let free = u128::from(stat.f_bavail) * u128::from(stat.f_frsize);
        free >= bytes as u128
    }

    fn grow(&mut self, len_bytes: usize) -> Result<(), StoreError> {
        let old = self.map.len();
        assert!(len_bytes > old, "media only grows");
        allocate(&self.file, old, len_bytes - old)?;
        if self.persist_by == PersistBy::CacheLineFlush {
            // On DAX, reserved blocks are "unwritten" extents whose conversion on first store
            // is file-system metadata that cache flushes do not persist. Writing zeros through
            // the file and syncing converts them now, so later stores need only cache flushes.
            let zeros = vec![0u8; 64 * 1024];
            let mut at = old;
            while at < len_bytes {
                let n = zeros.len().min(len_bytes - at);
                self.file
                    .write_all_at(&zeros[..n], at as u64)
                    .map_err(StoreError::io("zero grown file"))?;
                at += n;
            }
        }
        sync_length(&self.file, self.persist_by)?;
        // SAFETY: as in `open`; the old mapping is unmapped when replaced and no reference into
        // it outlives this `&mut self` call.
        self.map = unsafe { MmapMut::map_mut(&self.file) }.map_err(StoreError::io("remap"))?;
        assert_eq!(
            self.map.len(),
            len_bytes,
            "the mapping covers the grown file"
        );
        Ok(())
    }

    fn read(&self, offset: usize, len: usize) -> &[u8] {
        &self.map[offset..offset + len]
    }

    fn write(&mut self, offset: usize, bytes: &[u8]) {
        self.map[offset..offset + bytes.len()].copy_from_slice(bytes);
    }

    fn store_u64(&mut self, offset: usize, value: u64) {
        let word = &mut self.map[offset..offset + 8];
        let ptr = word.as_mut_ptr().cast::<u64>();
        assert!(ptr.is_aligned(), "header words are 8-byte aligned");
        // SAFETY: `ptr` is 8-byte aligned (checked above), valid for 8 bytes of the mapping and
        // exclusively borrowed through `word` for this call, so viewing it as an AtomicU64 is
        // sound. The atomic store is one 8-byte store instruction, which is what makes the
        // header flip failure-atomic: a byte copy (`copy_from_slice` of `to_le_bytes`) may be
        // split into several stores by the compiler or `memcpy`, and a crash between them
        // would leave a mixed word. Little-endian, like every other integer in the file.
        let atomic = unsafe { AtomicU64::from_ptr(ptr) };
        atomic.store(value.to_le(), Ordering::Release);
    }

    fn persist(&mut self, offset: usize, len: usize) -> Result<(), StoreError> {
        if len == 0 {
            return Ok(());
        }
        match self.persist_by {
            PersistBy::Nothing => Ok(()),
            PersistBy::Msync => self
                .map
                .flush_range(offset, len)
                .map_err(StoreError::io("msync")),
            PersistBy::CacheLineFlush | PersistBy::EmulatedCacheLineFlush => {
                self.flush_lines(offset, len);
                fence();
                Ok(())
            }
        }
    }

    fn persist_ranges(&mut self, ranges: &[(usize, usize)]) -> Result<(), StoreError> {
        if !self.persist_by.flushes_cache_lines() {
            let start = ranges.iter().map(|r| r.0).min();
            let end = ranges.iter().map(|r| r.0 + r.1).max();
            return match (start, end) {
                (Some(start), Some(end)) if end > start => self.persist(start, end - start),
                _ => Ok(()),
            };
        }
        // Cache-line flushes cost per line, not per call: flush exactly the ranges, then fence
        // once for the whole round.
        for &(offset, len) in ranges {
            self.flush_lines(offset, len);
        }
        fence();
        Ok(())
    }
}

impl MmapMedia {
    /// Writes back every cache line of `offset..offset + len` (no fence).
    fn flush_lines(&self, offset: usize, len: usize) {
        let range = &self.map[offset..offset + len];
        let base = range.as_ptr() as usize;
        let first = base & !(CACHE_LINE_BYTES - 1);
        for line in (first..base + len).step_by(CACHE_LINE_BYTES) {
            flush_line(line as *const u8);
        }
    }
}

/// Writes back one cache line.
#[cfg(target_arch = "x86_64")]
fn flush_line(line: *const u8) {
    // SAFETY: `line` points into the mapping (callers pass the lines of a range they borrowed
    // from it); clflush only writes the line back and reads no data through the pointer.
    unsafe { std::arch::x86_64::_mm_clflush(line) }
}

/// Writes back one cache line (unreachable: pmem and emulp modes are refused off x86_64).
#[cfg(not(target_arch = "x86_64"))]
fn flush_line(_line: *const u8) {
    unreachable!("pmem and emulp modes are refused at open on this architecture")
}

/// Orders the cache-line flushes before every later store.
fn fence() {
    // SAFETY: sfence needs SSE, which every x86_64 CPU has; it touches no memory.
    #[cfg(target_arch = "x86_64")]
    unsafe {
        std::arch::x86_64::_mm_sfence()
    };
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

    fn grow(&mut self, len_bytes: usize) -> Result<(), StoreError> {
        self.bytes.resize(len_bytes, 0);
        Ok(())
    }

    fn read(&self, offset: usize, len: usize) -> &[u8] {
        &self.bytes[offset..offset + len]
    }

    fn write(&mut self, offset: usize, bytes: &[u8]) {
        self.bytes[offset..offset + bytes.len()].copy_from_slice(bytes);
    }

    fn store_u64(&mut self, offset: usize, value: u64) {
        // Nothing survives a crash in DRAM, so a byte copy is as good as one store here.
        self.write(offset, &value.to_le_bytes());
    }

    fn persist(&mut self, _offset: usize, _len: usize) -> Result<(), StoreError> {
        Ok(())
    }
}

/// The media a node runs on: DRAM (`memory` mode) or a mapped file (the other modes).
/// Dispatching here keeps [`crate::SlotStore`] one concrete type for the node.
pub enum FileMedia {
    /// `memory` mode.
    Dram(DramMedia),
    /// `mmap`, `sync`, `emulp` and `pmem` modes.
    Mapped(MmapMedia),
}

impl Media for FileMedia {
    fn len(&self) -> usize {
        match self {
            FileMedia::Dram(m) => m.len(),
            FileMedia::Mapped(m) => m.len(),
        }
    }

    fn grow(&mut self, len_bytes: usize) -> Result<(), StoreError> {
        match self {
            FileMedia::Dram(m) => m.grow(len_bytes),
            FileMedia::Mapped(m) => m.grow(len_bytes),
        }
    }

    fn has_room(&self, bytes: usize) -> bool {
        match self {
            FileMedia::Dram(m) => m.has_room(bytes),
            FileMedia::Mapped(m) => m.has_room(bytes),
        }
    }

    fn read(&self, offset: usize, len: usize) -> &[u8] {
        match self {
            FileMedia::Dram(m) => m.read(offset, len),
            FileMedia::Mapped(m) => m.read(offset, len),
        }
    }

    fn write(&mut self, offset: usize, bytes: &[u8]) {
        match self {
            FileMedia::Dram(m) => m.write(offset, bytes),
            FileMedia::Mapped(m) => m.write(offset, bytes),
        }
    }

    fn store_u64(&mut self, offset: usize, value: u64) {
        match self {
            FileMedia::Dram(m) => m.store_u64(offset, value),
            FileMedia::Mapped(m) => m.store_u64(offset, value),
        }
    }

    fn persist(&mut self, offset: usize, len: usize) -> Result<(), StoreError> {
        match self {
            FileMedia::Dram(m) => m.persist(offset, len),
            FileMedia::Mapped(m) => m.persist(offset, len),
        }
    }

    fn persist_ranges(&mut self, ranges: &[(usize, usize)]) -> Result<(), StoreError> {
        match self {
            FileMedia::Dram(m) => m.persist_ranges(ranges),
            FileMedia::Mapped(m) => m.persist_ranges(ranges),
        }
    }
}

/// What simulated media held at one instant: the basis of the crash images at that instant.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MediaSnapshot {
    live: Vec<u8>,
    durable: Vec<u8>,
    dirty: BTreeSet<usize>,
}

impl MediaSnapshot {
    /// The sectors written but not persisted, in order.
    pub fn dirty_sectors(&self) -> Vec<usize> {
        self.dirty.iter().copied().collect()
    }

    /// The image after a power failure in which exactly the dirty sectors in `kept` reached
    /// the media, and the sector `torn.0` (if any) reached it only in its first `torn.1`
    /// bytes. A tear falls on an 8-byte boundary, since an aligned word store is atomic.
    pub fn crash_image(&self, kept: &[usize], torn: Option<(usize, usize)>) -> Vec<u8> {
        let mut image = self.durable.clone();
        for &s in kept {
            assert!(self.dirty.contains(&s), "only dirty sectors can be kept");
            let range = s * SECTOR_BYTES..((s + 1) * SECTOR_BYTES).min(self.live.len());
            image[range.clone()].copy_from_slice(&self.live[range]);
        }
        if let Some((s, new_bytes)) = torn {
            assert!(self.dirty.contains(&s), "only a dirty sector can be torn");
            assert!(
                new_bytes % 8 == 0 && new_bytes < SECTOR_BYTES,
                "a tear between words"
            );
            let start = s * SECTOR_BYTES;
            let end = (start + new_bytes).min(self.live.len());
            image[start..end].copy_from_slice(&self.live[start..end]);
        }
        image
    }

    /// The image a process crash leaves (the page cache survives): everything written.
    pub fn live_image(&self) -> Vec<u8> {
        self.live.clone()
    }

    /// The image a power failure leaves if no dirty sector reached the media.
    pub fn durable_image(&self) -> Vec<u8> {
        self.durable.clone()
    }
}

/// Simulated media for the crash tests: a live image and a durable image, with the sectors
/// written since they were last persisted. It can take a snapshot after a given number of
/// operations (a crash point), from which every power-failure image is built.
#[derive(Clone, Debug, Default)]
pub struct SimMedia {
    now: MediaSnapshot,
    /// Take a snapshot after this many operations (the crash point); read it with
    /// [`SimMedia::at_crash`].
    pub crash_after_ops: Option<usize>,
    crash: Option<MediaSnapshot>,
    /// Operations performed so far (writes, word stores, persists, grows).
    pub ops: usize,
    /// Persist calls so far (each is one system call on a real file).
    pub persist_calls: usize,
    /// The most bytes the media may grow to, as a full disk would allow (`None`: no limit).
    /// A grow beyond fails with `ENOSPC` and changes nothing.
    pub capacity_bytes: Option<usize>,
}

impl SimMedia {
    /// Empty media.
    pub fn new() -> SimMedia {
        SimMedia::default()
    }

    /// Media whose durable and live contents are `image` (a recovered crash image).
    pub fn from_image(image: Vec<u8>) -> SimMedia {
        SimMedia {
            now: MediaSnapshot {
                live: image.clone(),
                durable: image,
                dirty: BTreeSet::new(),
            },
            ..SimMedia::default()
        }
    }

    /// Media that holds `snapshot`: live and durable contents and dirty sectors as they were
    /// (a process crash: the page cache keeps what was written, nothing more is durable).
    pub(crate) fn from_snapshot(snapshot: MediaSnapshot) -> SimMedia {
        SimMedia {
            now: snapshot,
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

    /// Joins a clock shared by several media (a simulated directory's files): the next
    /// operation is number `ops` of that clock, and the crash point is `crash_after_ops` on it.
    /// If the crash point has passed while this media was idle, its state now is its state at
    /// the crash, so the snapshot is taken now.
    pub(crate) fn join_clock(&mut self, ops: usize, crash_after_ops: Option<usize>) {
        if self.crash.is_none() && crash_after_ops.is_some_and(|n| n <= ops) {
            self.crash = Some(self.now.clone());
        }
        self.ops = ops;
        self.crash_after_ops = crash_after_ops;
    }

    /// Arms a crash point `ops_from_now` operations ahead, forgetting any earlier one.
    pub fn arm_crash_point(&mut self, ops_from_now: usize) {
        self.crash = None;
        self.crash_after_ops = Some(self.ops + ops_from_now);
    }

    /// The state at the crash point, or now if the crash point was not reached.
    pub fn at_crash(&self) -> &MediaSnapshot {
        self.crash.as_ref().unwrap_or(&self.now)
    }

    /// The state now.
    pub fn now(&self) -> &MediaSnapshot {
        &self.now
    }

    /// Media damage: flips bit `bit` (0..8) of the byte at `offset`, in the live and the
    /// durable image, without counting as a write.
    pub fn flip_bit(&mut self, offset: usize, bit: u8) {
        assert!(bit < 8, "a byte has 8 bits");
        self.now.live[offset] ^= 1 << bit;
        self.now.durable[offset] ^= 1 << bit;
    }
}

impl Media for SimMedia {
    fn len(&self) -> usize {
        self.now.live.len()
    }

    fn grow(&mut self, len_bytes: usize) -> Result<(), StoreError> {
        self.tick();
        if self
            .capacity_bytes
            .is_some_and(|capacity| len_bytes > capacity)
        {
            return Err(StoreError::Io {
                what: "grow file",
                source: std::io::Error::from_raw_os_error(libc::ENOSPC),
            });
        }
        // Growing is durable at once: the real media syncs the file length before returning.
        self.now.live.resize(len_bytes, 0);
        self.now.durable.resize(len_bytes, 0);
        Ok(())
    }

    fn read(&self, offset: usize, len: usize) -> &[u8] {
        &self.now.live[offset..offset + len]
    }

    fn write(&mut self, offset: usize, bytes: &[u8]) {
        if bytes.is_empty() {
            return;
        }
        self.tick();
        self.now.live[offset..offset + bytes.len()].copy_from_slice(bytes);
        for s in offset / SECTOR_BYTES..=(offset + bytes.len() - 1) / SECTOR_BYTES {
            self.now.dirty.insert(s);
        }
    }

    fn store_u64(&mut self, offset: usize, value: u64) {
        assert_eq!(offset % 8, 0, "header words are 8-byte aligned");
        self.write(offset, &value.to_le_bytes());
    }

    fn persist(&mut self, offset: usize, len: usize) -> Result<(), StoreError> {
        self.persist_ranges(&[(offset, len)])
    }

    /// Persists exactly the sectors of the ranges (one call, one crash point), not their
    /// span: the crash tests check the store with the least its rounds ask for. The real
    /// media may persist more (a span), which is safe because every write dirty when a round
    /// starts belongs to that round or to an earlier one.
    fn persist_ranges(&mut self, ranges: &[(usize, usize)]) -> Result<(), StoreError> {
        self.tick();
        self.persist_calls += 1;
        let now = &mut self.now;
        for &(offset, len) in ranges.iter().filter(|r| r.1 > 0) {
            for s in offset / SECTOR_BYTES..=(offset + len - 1) / SECTOR_BYTES {
                if now.dirty.remove(&s) {
                    let range = s * SECTOR_BYTES..((s + 1) * SECTOR_BYTES).min(now.live.len());
                    now.durable[range.clone()].copy_from_slice(&now.live[range]);
                }
            }
        }
        Ok(())
    }
}
