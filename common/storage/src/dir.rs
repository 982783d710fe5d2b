//! A directory of media files: what a store made of several files (the segmented log and its
//! snapshots) needs beyond one [`Media`]. Creating, renaming and removing a file changes the
//! directory, which is durable only after [`Dir::sync`] (`fsync` of the directory).
//!
//! What the stores assume of a directory (written down in `docs/storage-format.md`):
//! * a created file exists with at least [`FILE_BYTES_MIN`] zero bytes, durably as to its
//!   length, but its *name* may vanish in a crash until the directory is synced;
//! * a rename replaces the target atomically (the old or the new file under the name, never
//!   neither);
//! * the directory operations not yet synced survive a power failure as a *prefix*: in the
//!   order they were made, some first ones survive and the rest are lost. This is what a file
//!   system that journals its metadata in order (ext4, xfs) gives; [`SimDir`] builds exactly
//!   these images, and each store syncs the directory before it depends on an operation.
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::media::{DramMedia, FileMedia, Media, MediaSnapshot, MmapMedia, PersistBy, SimMedia};
use crate::{Durability, StoreError};

/// The length of a newly created file (a mapping needs at least one page).
pub const FILE_BYTES_MIN: usize = 4096;

/// A handle to an open file of a [`Dir`]; valid until the file is removed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct FileId(usize);

/// A directory of media files.
pub trait Dir {
    /// The media of one file.
    type File: Media;
    /// The names of the files, sorted.
    fn names(&self) -> Vec<String>;
    /// Opens the file `name`, creating it (with [`FILE_BYTES_MIN`] zero bytes) if it does not
    /// exist. A new name is durable only after [`Dir::sync`].
    fn open(&mut self, name: &str) -> Result<FileId, StoreError>;
    /// The media of an open file.
    fn file(&self, id: FileId) -> &Self::File;
    /// The media of an open file, to write.
    fn file_mut(&mut self, id: FileId) -> &mut Self::File;
    /// Removes the file `name` (closing it if open); durable after [`Dir::sync`].
    fn remove(&mut self, name: &str) -> Result<(), StoreError>;
    /// Renames `from` to `to`, replacing `to` atomically; durable after [`Dir::sync`]. Open
    /// handles stay valid.
    fn rename(&mut self, from: &str, to: &str) -> Result<(), StoreError>;
    /// Makes every earlier create, rename and remove durable.
    fn sync(&mut self) -> Result<(), StoreError>;
    /// The directory on the file system, and whether its writes are persisted, for a writer
    /// that works beside this handle on another thread
    /// ([`write_snapshot_file`](crate::segment_log::write_snapshot_file)); `None` for a
    /// directory that is not one (in memory, simulated).
    fn fs_path(&self) -> Option<(&Path, bool)> {
        None
    }
}

/// A real directory (`mmap`, `sync`, `emulp`, `pmem` modes: one mapped file per name) or none at all
/// (`memory` mode: DRAM files that vanish with the process).
pub struct FsDir {
    /// `None` in `memory` mode.
    path: Option<PathBuf>,
    persist_by: PersistBy,
    files: Vec<Option<FileMedia>>,
    /// Every file in the directory, with its handle once opened.
    names: BTreeMap<String, Option<FileId>>,
}

impl FsDir {
    /// Opens (creating) the directory at `path` for `durability` and lists its files (they are
    /// opened, mapped and locked by [`Dir::open`]).
    pub fn open(path: &Path, durability: Durability) -> Result<FsDir, StoreError> {
        let Some(persist_by) = durability.persist_by() else {
            return Ok(FsDir {
                path: None,
                persist_by: PersistBy::Nothing,
                files: Vec::new(),
                names: BTreeMap::new(),
            });
        };
        std::fs::create_dir_all(path).map_err(StoreError::io("create directory"))?;
        let mut dir = FsDir {
            path: Some(path.to_path_buf()),
            persist_by,
            files: Vec::new(),
            names: BTreeMap::new(),
        };
        let entries = std::fs::read_dir(path).map_err(StoreError::io("read directory"))?;
        for entry in entries {
            let entry = entry.map_err(StoreError::io("read directory"))?;
            if let Some(name) = entry.file_name().to_str() {
                dir.names.insert(name.to_string(), None);
            }
        }
        Ok(dir)
    }

    fn full(&self, name: &str) -> Option<PathBuf> {
        self.path.as_ref().map(|p| p.join(name))
    }
}

impl Dir for FsDir {
    type File = FileMedia;

    fn names(&self) -> Vec<String> {
        self.names.keys().cloned().collect()
    }

    fn open(&mut self, name: &str) -> Result<FileId, StoreError> {
        if let Some(&Some(id)) = self.names.get(name) {
            return Ok(id);
        }
        let media = match self.full(name) {
            None => {
                let mut dram = DramMedia::new();
                dram.grow(FILE_BYTES_MIN)?;
                FileMedia::Dram(dram)
            }
            Some(path) => FileMedia::Mapped(MmapMedia::open(&path, self.persist_by)?),
        };
        let id = FileId(self.files.len());
        self.files.push(Some(media));
        self.names.insert(name.to_string(), Some(id));
        Ok(id)
    }

    fn file(&self, id: FileId) -> &FileMedia {
        self.files[id.0].as_ref().expect("an open file")
    }

    fn file_mut(&mut self, id: FileId) -> &mut FileMedia {
        self.files[id.0].as_mut().expect("an open file")
    }

    fn remove(&mut self, name: &str) -> Result<(), StoreError> {
        if let Some(Some(id)) = self.names.remove(name) {
            // Unmap (and unlock) before unlinking.
            self.files[id.0] = None;
        }
        if let Some(path) = self.full(name) {
            match std::fs::remove_file(path) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                    return Err(StoreError::Io {
                        what: "remove file",
                        source: e,
                    });
                }
                _ => {}
            }
        }
        Ok(())
    }

    fn rename(&mut self, from: &str, to: &str) -> Result<(), StoreError> {
        if let (Some(a), Some(b)) = (self.full(from), self.full(to)) {
            std::fs::rename(a, b).map_err(StoreError::io("rename file"))?;
        }
        if let Some(Some(old)) = self.names.remove(to) {
            self.files[old.0] = None;
        }
        if let Some(id) = self.names.remove(from) {
            self.names.insert(to.to_string(), id);
        }
        Ok(())
    }

    fn fs_path(&self) -> Option<(&Path, bool)> {
        let path = self.path.as_deref()?;
        Some((path, self.persist_by != PersistBy::Nothing))
    }

    fn sync(&mut self) -> Result<(), StoreError> {
        match (&self.path, self.persist_by) {
            (None, _) | (_, PersistBy::Nothing) => Ok(()),
            (Some(path), _) => std::fs::File::open(path)
                .and_then(|d| d.sync_all())
                .map_err(StoreError::io("fsync directory")),
        }
    }
}

/// One directory operation not yet synced.
#[derive(Clone, Debug, PartialEq, Eq)]
enum DirOp {
    Link(String, usize),
    Unlink(String),
    Rename(String, String),
}

fn apply(entries: &mut BTreeMap<String, usize>, op: &DirOp) {
    match op {
        DirOp::Link(name, inode) => {
            entries.insert(name.clone(), *inode);
        }
        DirOp::Unlink(name) => {
            entries.remove(name);
        }
        DirOp::Rename(from, to) => {
            if let Some(inode) = entries.remove(from) {
                entries.insert(to.clone(), inode);
            }
        }
    }
}

/// The directory part of a simulated directory at one instant.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct DirState {
    live: BTreeMap<String, usize>,
    durable: BTreeMap<String, usize>,
    pending: Vec<DirOp>,
}

/// A simulated directory for the crash tests: files are [`SimMedia`] (inodes, never dropped,
/// so a crash image can still hold a removed file), names map to inodes live and durably, and
/// the operations since the last sync are kept in order. All files and the directory share
/// one operation clock, so one crash point covers them all.
#[derive(Clone, Debug, Default)]
pub struct SimDir {
    inodes: Vec<SimMedia>,
    state: DirState,
    crash: Option<DirState>,
    /// Take the crash snapshot after this many operations (of every file and the directory).
    pub crash_after_ops: Option<usize>,
    ops: usize,
    /// Directory syncs so far.
    pub sync_calls: usize,
    /// Whether the disk is full: creating a file or growing one fails with `ENOSPC`, while the
    /// bytes files already have are written as before. A crash image starts with space.
    pub full: bool,
}

impl SimDir {
    /// An empty directory.
    pub fn new() -> SimDir {
        SimDir::default()
    }

    /// Operations so far: writes, word stores, persists and grows of every file, and
    /// directory operations.
    pub fn ops(&self) -> usize {
        self.inodes.iter().map(|m| m.ops).fold(self.ops, usize::max)
    }

    fn tick(&mut self) {
        let ops = self.ops();
        if self.crash.is_none() && self.crash_after_ops.is_some_and(|n| n <= ops) {
            self.crash = Some(self.state.clone());
        }
        self.ops = ops + 1;
    }

    /// Arms a crash point `ops_from_now` operations ahead (of every file and the directory),
    /// forgetting any earlier one.
    pub fn arm_crash_point(&mut self, ops_from_now: usize) {
        let at = self.ops() + ops_from_now;
        self.forget_crash_point();
        self.crash_after_ops = Some(at);
    }

    /// Forgets the crash point and any state kept at it: a crash now leaves what is there now.
    pub fn disarm_crash_point(&mut self) {
        self.forget_crash_point();
        self.crash_after_ops = None;
    }

    fn forget_crash_point(&mut self) {
        self.crash = None;
        for media in &mut self.inodes {
            media.arm_crash_point(0);
            media.crash_after_ops = None;
        }
    }

    /// What a crash at the crash point (or now, if it was not reached) can leave.
    pub fn at_crash(&self) -> DirCrash {
        let state = self.crash.clone().unwrap_or_else(|| self.state.clone());
        let ops = self.ops();
        let mut inodes = BTreeMap::new();
        let linked = state.pending.iter().filter_map(|op| match op {
            DirOp::Link(_, inode) => Some(inode),
            _ => None,
        });
        // Every file a crash image can name: live, durable, or linked by a pending operation
        // (a file created and removed since the last sync).
        for &inode in state
            .live
            .values()
            .chain(state.durable.values())
            .chain(linked)
        {
            let mut media = self.inodes[inode].clone();
            media.join_clock(ops, self.crash_after_ops);
            inodes.insert(inode, media.at_crash().clone());
        }
        DirCrash { state, inodes }
    }

    /// The directory after a power failure that kept only what was synced: no unsynced
    /// directory operation and no dirty sector ([`DirCrash::crash_image`] keeping nothing).
    pub fn durable_image(&self) -> SimDir {
        self.at_crash().crash_image(0, &[], None)
    }
}

impl Dir for SimDir {
    type File = SimMedia;

    fn names(&self) -> Vec<String> {
        self.state.live.keys().cloned().collect()
    }

    fn open(&mut self, name: &str) -> Result<FileId, StoreError> {
        if let Some(&inode) = self.state.live.get(name) {
            return Ok(FileId(inode));
        }
        if self.full {
            return Err(no_space("create file"));
        }
        self.tick();
        let mut media = SimMedia::new();
        media.join_clock(self.ops, None);
        // The real media creates a file with a page of zeros whose length is durable.
        media.grow(FILE_BYTES_MIN)?;
        let inode = self.inodes.len();
        self.inodes.push(media);
        let op = DirOp::Link(name.to_string(), inode);
        apply(&mut self.state.live, &op);
        self.state.pending.push(op);
        Ok(FileId(inode))
    }

    fn file(&self, id: FileId) -> &SimMedia {
        &self.inodes[id.0]
    }

    fn file_mut(&mut self, id: FileId) -> &mut SimMedia {
        let (ops, crash_after) = (self.ops(), self.crash_after_ops);
        let media = &mut self.inodes[id.0];
        media.join_clock(ops, crash_after);
        // A full disk: the file cannot grow past what it has.
        media.capacity_bytes = self.full.then(|| media.len());
        media
    }

    fn remove(&mut self, name: &str) -> Result<(), StoreError> {
        if self.state.live.contains_key(name) {
            self.tick();
            let op = DirOp::Unlink(name.to_string());
            apply(&mut self.state.live, &op);
            self.state.pending.push(op);
        }
        Ok(())
    }

    fn rename(&mut self, from: &str, to: &str) -> Result<(), StoreError> {
        assert!(
            self.state.live.contains_key(from),
            "rename of a missing file"
        );
        self.tick();
        let op = DirOp::Rename(from.to_string(), to.to_string());
        apply(&mut self.state.live, &op);
        self.state.pending.push(op);
        Ok(())
    }

    fn sync(&mut self) -> Result<(), StoreError> {
        self.tick();
        self.sync_calls += 1;
        self.state.durable = self.state.live.clone();
        self.state.pending.clear();
        Ok(())
    }
}

/// The error of a file operation refused for want of space.
fn no_space(what: &'static str) -> StoreError {
    StoreError::Io {
        what,
        source: std::io::Error::from_raw_os_error(libc::ENOSPC),
    }
}

/// What a simulated directory held at a crash point: the basis of its crash images.
#[derive(Clone, Debug)]
pub struct DirCrash {
    state: DirState,
    inodes: BTreeMap<usize, MediaSnapshot>,
}

/// One dirty sector of one file in a [`DirCrash`].
pub type FileSector = (usize, usize);

impl DirCrash {
    /// How many directory operations were not yet synced: a crash keeps the first `k` of them
    /// for any `k` in `0..=pending_dir_ops()`.
    pub fn pending_dir_ops(&self) -> usize {
        self.state.pending.len()
    }

    /// The sectors written but not persisted, as (inode, sector), in order.
    pub fn dirty_sectors(&self) -> Vec<FileSector> {
        self.inodes
            .iter()
            .flat_map(|(&i, m)| m.dirty_sectors().into_iter().map(move |s| (i, s)))
            .collect()
    }

    /// The directory after a power failure that kept the first `dir_ops_kept` unsynced
    /// directory operations and exactly the dirty sectors in `kept` (with `torn`, if any, as
    /// in [`MediaSnapshot::crash_image`]).
    pub fn crash_image(
        &self,
        dir_ops_kept: usize,
        kept: &[FileSector],
        torn: Option<(FileSector, usize)>,
    ) -> SimDir {
        let mut entries = self.state.durable.clone();
        for op in &self.state.pending[..dir_ops_kept] {
            apply(&mut entries, op);
        }
        self.image(entries, |inode, snapshot| {
            let kept: Vec<usize> = kept.iter().filter(|k| k.0 == inode).map(|k| k.1).collect();
            let torn = torn.filter(|t| t.0 .0 == inode).map(|t| (t.0 .1, t.1));
            snapshot.crash_image(&kept, torn)
        })
    }

    /// The directory after a process crash (kill -9), as a directory that can still lose
    /// power: every write and directory operation is there, and what was not persisted or
    /// synced is still not durable.
    pub fn process_crash(&self) -> SimDir {
        let mut dir = SimDir::new();
        let mut renumber = BTreeMap::new();
        for (&inode, snapshot) in &self.inodes {
            renumber.insert(inode, dir.inodes.len());
            dir.inodes.push(SimMedia::from_snapshot(snapshot.clone()));
        }
        let map = |entries: &BTreeMap<String, usize>| -> BTreeMap<String, usize> {
            entries
                .iter()
                .map(|(name, inode)| (name.clone(), renumber[inode]))
                .collect()
        };
        dir.state.live = map(&self.state.live);
        dir.state.durable = map(&self.state.durable);
        dir.state.pending = self
            .state
            .pending
            .iter()
            .map(|op| match op {
                DirOp::Link(name, inode) => DirOp::Link(name.clone(), renumber[inode]),
                other => other.clone(),
            })
            .collect();
        dir
    }

    /// The directory after a process crash: every write and directory operation survives.
    pub fn live_image(&self) -> SimDir {
        self.image(self.state.live.clone(), |_, s| s.live_image())
    }

    fn image(
        &self,
        entries: BTreeMap<String, usize>,
        content: impl Fn(usize, &MediaSnapshot) -> Vec<u8>,
    ) -> SimDir {
        let mut dir = SimDir::new();
        for (name, inode) in entries {
            let image = content(inode, &self.inodes[&inode]);
            let id = dir.inodes.len();
            dir.inodes.push(SimMedia::from_image(image));
            dir.state.live.insert(name, id);
        }
        dir.state.durable = dir.state.live.clone();
        dir
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The images of a directory with unsynced operations: each prefix of them, in order.
    #[test]
    fn a_crash_keeps_a_prefix_of_the_unsynced_directory_operations() {
        let mut dir = SimDir::new();
        let a = dir.open("a").unwrap();
        dir.file_mut(a).write(0, b"A");
        dir.file_mut(a).persist(0, 1).unwrap();
        dir.sync().unwrap();
        let b = dir.open("b.tmp").unwrap();
        dir.file_mut(b).write(0, b"B");
        dir.file_mut(b).persist(0, 1).unwrap();
        dir.rename("b.tmp", "b").unwrap();
        dir.remove("a").unwrap();
        let crash = dir.at_crash();
        assert_eq!(crash.pending_dir_ops(), 3);
        let names: Vec<Vec<String>> = (0..=3)
            .map(|k| crash.crash_image(k, &[], None).names())
            .collect();
        assert_eq!(
            names,
            [vec!["a"], vec!["a", "b.tmp"], vec!["a", "b"], vec!["b"]]
        );
        let image = crash.crash_image(2, &[], None);
        let b = image.state.live["b"];
        assert_eq!(image.file(FileId(b)).read(0, 1), b"B");
    }

    /// A full directory refuses new files and growth with ENOSPC, lets files be written within
    /// their size, and takes both again once it has space.
    #[test]
    fn a_full_directory_refuses_new_space_only() {
        let mut dir = SimDir::new();
        let a = dir.open("a").unwrap();
        dir.full = true;
        assert!(dir.open("b").unwrap_err().is_no_space());
        assert!(dir.names() == ["a"], "nothing created");
        dir.file_mut(a).write(0, b"A");
        let error = dir.file_mut(a).grow(2 * FILE_BYTES_MIN).unwrap_err();
        assert!(error.is_no_space(), "{error}");
        assert_eq!(dir.open("a").unwrap(), a, "an existing file opens");
        dir.full = false;
        dir.file_mut(a).grow(2 * FILE_BYTES_MIN).unwrap();
        dir.open("b").unwrap();
        assert_eq!(dir.file(a).read(0, 1), b"A");
    }

    /// The crash point covers every file and the directory with one clock: a file written
    /// after the crash point shows its content at the crash point.
    #[test]
    fn one_crash_point_covers_every_file() {
        let run = |crash_after: Option<usize>| {
            let mut dir = SimDir::new();
            dir.crash_after_ops = crash_after;
            let a = dir.open("a").unwrap();
            let b = dir.open("b").unwrap();
            dir.file_mut(a).write(0, b"1");
            dir.file_mut(b).write(0, b"2");
            dir.file_mut(a).write(0, b"3");
            dir.at_crash().live_image()
        };
        let read = |dir: &SimDir, name: &str| {
            dir.state
                .live
                .get(name)
                .map(|&i| dir.file(FileId(i)).read(0, 1).to_vec())
        };
        // Ops: open a (1 + grow 1), open b (2), then the three writes (ops 4, 5, 6).
        let at = |n| {
            let image = run(Some(n));
            (read(&image, "a"), read(&image, "b"))
        };
        assert_eq!(at(2), (Some(vec![0]), None));
        assert_eq!(at(5), (Some(b"1".to_vec()), Some(vec![0])));
        assert_eq!(at(6), (Some(b"1".to_vec()), Some(b"2".to_vec())));
        assert_eq!(at(7), (Some(b"3".to_vec()), Some(b"2".to_vec())));
    }

    /// A crash point armed between operations freezes what follows it; once disarmed, a crash
    /// leaves what is there now, and arming again forgets the state kept at the earlier point.
    #[test]
    fn crash_points_are_armed_and_disarmed_between_operations() {
        let mut dir = SimDir::new();
        let a = dir.open("a").unwrap();
        dir.file_mut(a).write(0, b"1");
        let read = |dir: &SimDir| dir.at_crash().live_image().file(FileId(0)).read(0, 1)[0];
        dir.arm_crash_point(0);
        dir.file_mut(a).write(0, b"2");
        assert_eq!(read(&dir), b'1', "frozen before the write");
        dir.disarm_crash_point();
        assert_eq!(read(&dir), b'2');
        dir.arm_crash_point(1);
        dir.file_mut(a).write(0, b"3");
        dir.file_mut(a).write(0, b"4");
        assert_eq!(read(&dir), b'3', "frozen after one write");
        dir.arm_crash_point(5);
        assert_eq!(read(&dir), b'4', "the earlier point is forgotten");
    }
}
