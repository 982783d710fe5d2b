//! The in-memory file system that executes NetFS calls, and its C-G.
//!
//! State: an inode table (by inode number), a handle table (by handle), and the next inode and
//! handle numbers. Both counters advance only in calls that C-G sends to `g_all`, so every
//! replica hands out the same numbers to the same calls. Nothing reads a clock: times come in
//! the calls. Reads leave `atime` alone (as a `noatime` mount does), so a read changes nothing.
//! A file's bytes and mtime sit behind a lock of their own, so that workers can write different
//! files at once through a shared reference ([`ParallelService`]).
//!
//! C-G (seed 004 §V-B) and why dependent calls always share a group:
//! * `create`, `mknod`, `mkdir`, `unlink`, `rmdir`, `open`, `release`, `opendir`, `releasedir`,
//!   `utimens` and `rename` go to `g_all`. They change directories, the inode table or the
//!   handle table, which calls of every group read (path resolution walks directories; `read`
//!   and `write` look up their handle), so they depend on every call.
//! * `access`, `lstat`, `read`, `write` and `readdir` go to the group of their path's hash. In
//!   parallel mode they change only the data, size and mtime of the one file their path names
//!   (`write`); everything else they only read. Two of them depend on each other only when one
//!   writes what the other reads, that is when both name the same file: the same canonical
//!   path, so the same group. A `read` or `write` must name the path its handle is open on
//!   (else `EBADF`), so the file it touches is the one its path names, and the one its group
//!   covers. `readdir` lists names, inode numbers and kinds, which only `g_all` calls change.
//! * `rename` is `g_all` rather than the group of its directory: C-G sees only the call, not
//!   the state, so it cannot tell a file from a directory, and renaming a directory moves every
//!   path below it to other groups; a rename that replaces its target also frees an inode.
use std::collections::BTreeMap;
use std::sync::{Mutex, MutexGuard, PoisonError};

use logless_service::{DecodeError, Digest, Digester, Group, ParallelService, Service, WorkerId};

use crate::command::{
    Attr, DirEntry, Fh, FsCommand, FsReply, Ino, Kind, Mode, Time, DIR_ENTRIES_MAX, IO_BYTES_MAX,
};
use crate::errno::Errno;
use crate::path::FsPath;

mod snapshot;

/// The largest file, in bytes.
pub const FILE_BYTES_MAX: u64 = 64 << 20;

/// The most handles open at once (over all clients): one more open is `EMFILE`.
pub const HANDLES_MAX: usize = 1 << 16;

/// The root directory's permission bits.
const ROOT_MODE: Mode = Mode(0o755);

/// What parallel-mode writes change: a file's bytes and mtime. Writes to different files run
/// at once on different workers through a shared reference, so each file has its own lock; a
/// file's calls all run on one worker, so the lock is never contended.
#[derive(Debug)]
struct FileBody {
    data: Vec<u8>,
    mtime: Time,
}

#[derive(Debug)]
enum Content {
    File(Mutex<FileBody>),
    Directory {
        entries: BTreeMap<Vec<u8>, Ino>,
        mtime: Time,
    },
}

fn lock(body: &Mutex<FileBody>) -> MutexGuard<'_, FileBody> {
    // A worker that panicked while holding a file's lock leaves a state every replica's worker
    // would leave too; the poison is ignored.
    body.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Content {
    fn file(time: Time) -> Content {
        Content::File(Mutex::new(FileBody {
            data: Vec::new(),
            mtime: time,
        }))
    }

    fn directory(time: Time) -> Content {
        Content::Directory {
            entries: BTreeMap::new(),
            mtime: time,
        }
    }
}

#[derive(Debug)]
struct Inode {
    content: Content,
    mode: Mode,
    atime: Time,
    /// Open handles on this inode: an unlinked inode lives until the last one is released.
    handles: u32,
    /// Whether a directory entry names this inode.
    linked: bool,
}

impl Inode {
    fn kind(&self) -> Kind {
        match self.content {
            Content::File(_) => Kind::File,
            Content::Directory { .. } => Kind::Directory,
        }
    }

    fn set_mtime(&mut self, time: Time) {
        match &mut self.content {
            Content::File(body) => {
                body.get_mut().unwrap_or_else(PoisonError::into_inner).mtime = time;
            }
            Content::Directory { mtime, .. } => *mtime = time,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Handle {
    ino: Ino,
    kind: Kind,
}

/// NetFS's state machine.
#[derive(Debug)]
pub struct NetFs {
    inodes: BTreeMap<Ino, Inode>,
    handles: BTreeMap<Fh, Handle>,
    next_ino: u64,
    next_fh: u64,
    /// The deliberate C-G bug (see [`NetFs::split_writes_from_reads`]).
    split_writes: bool,
}

impl Default for NetFs {
    fn default() -> Self {
        NetFs::new()
    }
}

type Outcome = Result<FsReply, Errno>;

impl NetFs {
    /// A file system holding an empty root directory.
    pub fn new() -> NetFs {
        let root = Inode {
            content: Content::directory(Time::default()),
            mode: ROOT_MODE,
            atime: Time::default(),
            handles: 0,
            linked: true,
        };
        NetFs {
            inodes: BTreeMap::from([(Ino::ROOT, root)]),
            handles: BTreeMap::new(),
            next_ino: Ino::ROOT.0 + 1,
            next_fh: 1,
            split_writes: false,
        }
    }

    /// Breaks C-G on purpose, for tests that must catch the divergence it causes: a `write`
    /// goes to the group after its path's, so it no longer shares a group with the `read`,
    /// `lstat` and `access` of the same path (with more than one worker).
    #[cfg(any(test, feature = "fault-injection"))]
    pub fn split_writes_from_reads(&mut self) {
        self.split_writes = true;
    }

    /// The number of inodes, the root and unlinked-but-open ones included.
    pub fn inode_count(&self) -> usize {
        self.inodes.len()
    }

    /// The number of open handles.
    pub fn handle_count(&self) -> usize {
        self.handles.len()
    }

    fn inode(&self, ino: Ino) -> &Inode {
        self.inodes
            .get(&ino)
            .expect("a linked or open inode is in the table")
    }

    fn inode_mut(&mut self, ino: Ino) -> &mut Inode {
        self.inodes
            .get_mut(&ino)
            .expect("a linked or open inode is in the table")
    }

    fn resolve(&self, path: &FsPath) -> Result<Ino, Errno> {
        let mut ino = Ino::ROOT;
        for name in path.names() {
            match &self.inode(ino).content {
                Content::Directory { entries, .. } => {
                    ino = *entries.get(name).ok_or(Errno::Enoent)?;
                }
                Content::File(_) => return Err(Errno::Enotdir),
            }
        }
        Ok(ino)
    }

    /// The directory that holds `path` and the name in it (`path` itself need not exist). The
    /// root has no parent: `root_error` is answered for it.
    fn resolve_parent<'p>(
        &self,
        path: &'p FsPath,
        root_error: Errno,
    ) -> Result<(Ino, &'p [u8]), Errno> {
        let (parent, name) = path.split_last().ok_or(root_error)?;
        let parent = self.resolve(&parent)?;
        match self.inode(parent).content {
            Content::Directory { .. } => Ok((parent, name)),
            Content::File(_) => Err(Errno::Enotdir),
        }
    }

    fn entries_mut(&mut self, dir: Ino) -> &mut BTreeMap<Vec<u8>, Ino> {
        match &mut self.inode_mut(dir).content {
            Content::Directory { entries, .. } => entries,
            Content::File(_) => unreachable!("resolve_parent gives directories"),
        }
    }

    fn make(
        &mut self,
        path: &FsPath,
        content: Content,
        mode: Mode,
        time: Time,
    ) -> Result<Ino, Errno> {
        let (parent, name) = self.resolve_parent(path, Errno::Eexist)?;
        let entries = self.entries_mut(parent);
        if entries.contains_key(name) {
            return Err(Errno::Eexist);
        }
        if entries.len() as u64 >= DIR_ENTRIES_MAX {
            return Err(Errno::Enospc);
        }
        let ino = Ino(self.next_ino);
        self.next_ino += 1;
        self.entries_mut(parent).insert(name.to_vec(), ino);
        let inode = Inode {
            content,
            mode: Mode(mode.0 & Mode::MASK),
            atime: time,
            handles: 0,
            linked: true,
        };
        self.inodes.insert(ino, inode);
        Ok(ino)
    }

    /// `EMFILE` if no handle can be opened ([`HANDLES_MAX`]); checked before a call that opens
    /// one changes anything.
    fn room_for_a_handle(&self) -> Result<(), Errno> {
        if self.handles.len() >= HANDLES_MAX {
            return Err(Errno::Emfile);
        }
        Ok(())
    }

    fn open_handle(&mut self, ino: Ino) -> Fh {
        let fh = Fh(self.next_fh);
        self.next_fh += 1;
        let inode = self.inode_mut(ino);
        inode.handles += 1;
        let kind = inode.kind();
        self.handles.insert(fh, Handle { ino, kind });
        fh
    }

    fn release_handle(&mut self, fh: Fh, kind: Kind) -> Outcome {
        match self.handles.get(&fh) {
            Some(handle) if handle.kind == kind => {}
            _ => return Err(Errno::Ebadf),
        }
        let handle = self.handles.remove(&fh).expect("just found");
        let inode = self.inode_mut(handle.ino);
        inode.handles -= 1;
        self.forget_if_orphan(handle.ino);
        Ok(FsReply::Done)
    }

    /// Drops an inode that no entry names and no handle holds.
    fn forget_if_orphan(&mut self, ino: Ino) {
        let inode = self.inode(ino);
        if !inode.linked && inode.handles == 0 {
            self.inodes.remove(&ino);
        }
    }

    /// Removes `name` from `parent` and drops its inode unless a handle holds it.
    fn unlink_entry(&mut self, parent: Ino, name: &[u8]) {
        let ino = self
            .entries_mut(parent)
            .remove(name)
            .expect("the caller found the entry");
        self.inode_mut(ino).linked = false;
        self.forget_if_orphan(ino);
    }

    fn create(&mut self, path: &FsPath, mode: Mode, time: Time) -> Outcome {
        self.room_for_a_handle()?;
        let ino = self.make(path, Content::file(time), mode, time)?;
        Ok(FsReply::Opened(self.open_handle(ino)))
    }

    fn remove(&mut self, path: &FsPath, kind: Kind) -> Outcome {
        // Linux answers `unlink("/")` with EISDIR and `rmdir("/")` with EBUSY.
        let root_error = match kind {
            Kind::File => Errno::Eisdir,
            Kind::Directory => Errno::Ebusy,
        };
        let (parent, name) = self.resolve_parent(path, root_error)?;
        let ino = self.resolve(path)?;
        match (&self.inode(ino).content, kind) {
            (Content::Directory { .. }, Kind::File) => return Err(Errno::Eisdir),
            (Content::File(_), Kind::Directory) => return Err(Errno::Enotdir),
            (Content::Directory { entries, .. }, _) if !entries.is_empty() => {
                return Err(Errno::Enotempty)
            }
            _ => {}
        }
        self.unlink_entry(parent, name);
        Ok(FsReply::Done)
    }

    fn open(&mut self, path: &FsPath, truncate: bool, time: Time) -> Outcome {
        let ino = self.resolve(path)?;
        self.room_for_a_handle()?;
        let inode = self.inode_mut(ino);
        let Content::File(body) = &mut inode.content else {
            return Err(Errno::Eisdir);
        };
        if truncate {
            let body = body.get_mut().unwrap_or_else(PoisonError::into_inner);
            body.data.clear();
            body.mtime = time;
        }
        Ok(FsReply::Opened(self.open_handle(ino)))
    }

    fn opendir(&mut self, path: &FsPath) -> Outcome {
        let ino = self.resolve(path)?;
        if self.inode(ino).kind() != Kind::Directory {
            return Err(Errno::Enotdir);
        }
        self.room_for_a_handle()?;
        Ok(FsReply::Opened(self.open_handle(ino)))
    }

    fn utimens(&mut self, path: &FsPath, atime: Time, mtime: Time) -> Outcome {
        let ino = self.resolve(path)?;
        let inode = self.inode_mut(ino);
        inode.atime = atime;
        inode.set_mtime(mtime);
        Ok(FsReply::Done)
    }

    fn access(&self, path: &FsPath, mask: u32) -> Outcome {
        let ino = self.resolve(path)?;
        if mask > 7 {
            return Err(Errno::Einval);
        }
        let owner_bits = (self.inode(ino).mode.0 >> 6) & 7;
        if owner_bits & mask == mask {
            Ok(FsReply::Done)
        } else {
            Err(Errno::Eacces)
        }
    }

    fn lstat(&self, path: &FsPath) -> Outcome {
        let ino = self.resolve(path)?;
        let inode = self.inode(ino);
        let (size, nlink, mtime) = match &inode.content {
            Content::File(body) => {
                let body = lock(body);
                (body.data.len() as u64, 1, body.mtime)
            }
            Content::Directory { entries, mtime } => {
                let subdirectories = entries
                    .values()
                    .filter(|&&child| self.inode(child).kind() == Kind::Directory)
                    .count();
                (entries.len() as u64, 2 + subdirectories as u64, *mtime)
            }
        };
        Ok(FsReply::Attr(Attr {
            ino,
            kind: inode.kind(),
            mode: inode.mode,
            size,
            nlink,
            atime: inode.atime,
            mtime,
        }))
    }

    /// The file that `fh` is open on, which must be the one `path` names.
    fn open_file(&self, path: &FsPath, fh: Fh) -> Result<Ino, Errno> {
        let ino = self.resolve(path)?;
        match self.handles.get(&fh) {
            Some(handle) if handle.ino == ino && handle.kind == Kind::File => Ok(ino),
            _ => Err(Errno::Ebadf),
        }
    }

    fn read(&self, path: &FsPath, fh: Fh, offset: u64, size: u64) -> Outcome {
        let ino = self.open_file(path, fh)?;
        let Content::File(body) = &self.inode(ino).content else {
            unreachable!("file handles are on files")
        };
        let data = &lock(body).data;
        let start = usize::try_from(offset)
            .unwrap_or(usize::MAX)
            .min(data.len());
        // A decoded read asks for IO_BYTES_MAX at most; one built in process gets no more.
        let size = size.min(IO_BYTES_MAX as u64) as usize;
        let end = start.saturating_add(size);
        Ok(FsReply::Data(data[start..end.min(data.len())].to_vec()))
    }

    fn write(&self, path: &FsPath, fh: Fh, offset: u64, bytes: &[u8], time: Time) -> Outcome {
        let ino = self.open_file(path, fh)?;
        let end = offset
            .checked_add(bytes.len() as u64)
            .filter(|&end| end <= FILE_BYTES_MAX)
            .ok_or(Errno::Efbig)?;
        let Content::File(body) = &self.inode(ino).content else {
            unreachable!("file handles are on files")
        };
        let mut body = lock(body);
        let (start, end) = (offset as usize, end as usize);
        if body.data.len() < end {
            body.data.resize(end, 0);
        }
        body.data[start..end].copy_from_slice(bytes);
        body.mtime = time;
        Ok(FsReply::Written(bytes.len() as u64))
    }

    fn readdir(&self, path: &FsPath) -> Outcome {
        let ino = self.resolve(path)?;
        let Content::Directory { entries, .. } = &self.inode(ino).content else {
            return Err(Errno::Enotdir);
        };
        let listing = entries
            .iter()
            .map(|(name, &child)| DirEntry {
                name: name.clone(),
                ino: child,
                kind: self.inode(child).kind(),
            })
            .collect();
        Ok(FsReply::Entries(listing))
    }

    fn rename(&mut self, from: &FsPath, to: &FsPath) -> Outcome {
        let (parent, from_name) = self.resolve_parent(from, Errno::Ebusy)?;
        let ino = self.resolve(from)?;
        let (to_parent_path, to_name) = to.split_last().ok_or(Errno::Ebusy)?;
        if from.split_last().map(|(dir, _)| dir) != Some(to_parent_path) {
            return Err(Errno::Exdev);
        }
        if from == to {
            return Ok(FsReply::Done);
        }
        if let Ok(target) = self.resolve(to) {
            match (self.inode(ino).kind(), &self.inode(target).content) {
                (Kind::File, Content::Directory { .. }) => return Err(Errno::Eisdir),
                (Kind::Directory, Content::File(_)) => return Err(Errno::Enotdir),
                (Kind::Directory, Content::Directory { entries, .. }) if !entries.is_empty() => {
                    return Err(Errno::Enotempty)
                }
                _ => {}
            }
            self.unlink_entry(parent, to_name);
        }
        let entries = self.entries_mut(parent);
        entries.remove(from_name);
        entries.insert(to_name.to_vec(), ino);
        Ok(FsReply::Done)
    }

    /// The outcome of a call that runs in parallel mode (see the module docs), or `None`.
    fn shared_outcome(&self, command: &FsCommand) -> Option<Outcome> {
        Some(match command {
            FsCommand::Access { path, mask } => self.access(path, *mask),
            FsCommand::Lstat { path } => self.lstat(path),
            FsCommand::Read {
                path,
                fh,
                offset,
                size,
            } => self.read(path, *fh, *offset, *size),
            FsCommand::Write {
                path,
                fh,
                offset,
                data,
                time,
            } => self.write(path, *fh, *offset, data, *time),
            FsCommand::Readdir { path } => self.readdir(path),
            _ => return None,
        })
    }

    /// The outcome of a call that needs the whole state.
    fn exclusive_outcome(&mut self, command: &FsCommand) -> Outcome {
        match command {
            FsCommand::Create { path, mode, time } => self.create(path, *mode, *time),
            FsCommand::Mknod { path, mode, time } => self
                .make(path, Content::file(*time), *mode, *time)
                .map(|_| FsReply::Done),
            FsCommand::Mkdir { path, mode, time } => self
                .make(path, Content::directory(*time), *mode, *time)
                .map(|_| FsReply::Done),
            FsCommand::Unlink { path } => self.remove(path, Kind::File),
            FsCommand::Rmdir { path } => self.remove(path, Kind::Directory),
            FsCommand::Open {
                path,
                truncate,
                time,
            } => self.open(path, *truncate, *time),
            FsCommand::Release { fh } => self.release_handle(*fh, Kind::File),
            FsCommand::Opendir { path } => self.opendir(path),
            FsCommand::Releasedir { fh } => self.release_handle(*fh, Kind::Directory),
            FsCommand::Utimens { path, atime, mtime } => self.utimens(path, *atime, *mtime),
            FsCommand::Rename { from, to } => self.rename(from, to),
            FsCommand::Access { .. }
            | FsCommand::Lstat { .. }
            | FsCommand::Read { .. }
            | FsCommand::Write { .. }
            | FsCommand::Readdir { .. } => unreachable!("path calls run shared"),
        }
    }
}

impl Service for NetFs {
    type Command = FsCommand;
    type Reply = FsReply;

    /// Seed 004 §V-B: the structural calls depend on every call; the path calls depend on each
    /// other when they name the same path.
    fn depends(a: &FsCommand, b: &FsCommand) -> bool {
        match (a.path_call(), b.path_call()) {
            (Some(a), Some(b)) => a == b,
            _ => true,
        }
    }

    fn group(&self, command: &FsCommand, workers: u16) -> Group {
        let Some(path) = command.path_call() else {
            return Group::All;
        };
        let group = Group::of_hash(xxhash_rust::xxh3::xxh3_64(path.as_bytes()), workers);
        match group {
            Group::Worker(WorkerId(i))
                if self.split_writes && matches!(command, FsCommand::Write { .. }) =>
            {
                Group::Worker(WorkerId((i + 1) % workers))
            }
            group => group,
        }
    }

    fn execute(&mut self, command: &FsCommand) -> FsReply {
        let outcome = match self.shared_outcome(command) {
            Some(outcome) => outcome,
            None => self.exclusive_outcome(command),
        };
        outcome.unwrap_or_else(FsReply::Error)
    }

    /// The digest of the whole state in inode and handle order (both numbered the same on
    /// every replica).
    fn digest(&self) -> Digest {
        let mut digester = Digester::new();
        digester.u64(self.next_ino).u64(self.next_fh);
        for (ino, inode) in &self.inodes {
            digester
                .u64(ino.0)
                .u64(u64::from(inode.mode.0))
                .u64(inode.atime.secs)
                .u64(u64::from(inode.atime.nanos))
                .u64(u64::from(inode.handles))
                .u64(u64::from(inode.linked));
            match &inode.content {
                Content::File(body) => {
                    let body = lock(body);
                    digester.u64(0).u64(body.mtime.secs);
                    digester.u64(u64::from(body.mtime.nanos)).bytes(&body.data);
                }
                Content::Directory { entries, mtime } => {
                    digester.u64(1).u64(mtime.secs).u64(u64::from(mtime.nanos));
                    digester.u64(entries.len() as u64);
                    for (name, child) in entries {
                        digester.bytes(name).u64(child.0);
                    }
                }
            }
        }
        for (fh, handle) in &self.handles {
            let kind = u64::from(handle.kind == Kind::Directory);
            digester.u64(fh.0).u64(handle.ino.0).u64(kind);
        }
        digester.finish()
    }

    fn malformed(error: DecodeError) -> FsReply {
        FsReply::Malformed(error.to_string())
    }
}

impl ParallelService for NetFs {
    /// `access`, `lstat`, `read`, `write` and `readdir` run shared: they change at most one
    /// file's bytes and mtime, under that file's lock. Every other call needs the whole state.
    fn execute_shared(&self, command: &FsCommand) -> Option<FsReply> {
        let outcome = self.shared_outcome(command)?;
        Some(outcome.unwrap_or_else(FsReply::Error))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client::{CallError, Client};
    use logless_service::Wire;

    fn at(path: &str) -> FsPath {
        FsPath::new(path).unwrap()
    }

    const T0: Time = Time { secs: 0, nanos: 0 };
    const T1: Time = Time { secs: 1, nanos: 5 };
    const RW: Mode = Mode(0o644);

    fn fs_err(errno: Errno) -> Result<(), CallError> {
        Err(CallError::Fs(errno))
    }

    #[test]
    fn inode_and_handle_numbers_follow_the_calls() {
        let mut client = Client::new(NetFs::new());
        client.mkdir(&at("/d"), Mode(0o755), T0).unwrap();
        let fh = client.create(&at("/d/f"), RW, T0).unwrap();
        assert_eq!(fh, Fh(1));
        assert_eq!(client.lstat(&at("/d")).unwrap().ino, Ino(2));
        assert_eq!(client.lstat(&at("/d/f")).unwrap().ino, Ino(3));
        assert_eq!(client.opendir(&at("/d")).unwrap(), Fh(2));
        assert_eq!(client.lstat(&at("/")).unwrap().nlink, 3);
    }

    #[test]
    fn an_unlinked_file_lives_until_its_last_handle_is_released() {
        let mut client = Client::new(NetFs::new());
        let fh = client.create(&at("/f"), RW, T0).unwrap();
        client.write(&at("/f"), fh, 0, b"data", T1).unwrap();
        client.unlink(&at("/f")).unwrap();
        assert_eq!(client.transport().inode_count(), 2);
        assert_eq!(
            client.read(&at("/f"), fh, 0, 4),
            Err(CallError::Fs(Errno::Enoent))
        );
        client.release(fh).unwrap();
        assert_eq!(client.transport().inode_count(), 1);
        assert_eq!(client.release(fh), fs_err(Errno::Ebadf));
    }

    #[test]
    fn a_handle_serves_only_the_path_it_is_open_on() {
        let mut client = Client::new(NetFs::new());
        let fh = client.create(&at("/a"), RW, T0).unwrap();
        client.mknod(&at("/b"), RW, T0).unwrap();
        assert_eq!(
            client.read(&at("/b"), fh, 0, 1),
            Err(CallError::Fs(Errno::Ebadf))
        );
        let dir = client.opendir(&at("/")).unwrap();
        assert_eq!(client.release(dir), fs_err(Errno::Ebadf));
        assert_eq!(client.releasedir(fh), fs_err(Errno::Ebadf));
        client.releasedir(dir).unwrap();
        // A rename keeps the handle: it is open on the file, now at its new path.
        client.rename(&at("/a"), &at("/c")).unwrap();
        assert_eq!(client.write(&at("/c"), fh, 0, b"x", T1), Ok(1));
    }

    #[test]
    fn access_checks_the_owner_bits_and_lstat_shows_utimens() {
        let mut client = Client::new(NetFs::new());
        client.mknod(&at("/r"), Mode(0o400), T0).unwrap();
        client.access(&at("/r"), 0).unwrap();
        client.access(&at("/r"), 4).unwrap();
        assert_eq!(client.access(&at("/r"), 2), fs_err(Errno::Eacces));
        // A mask beyond rwx does not even decode; executed directly it is EINVAL.
        let refused = client.access(&at("/r"), 8);
        assert_eq!(
            refused,
            Err(CallError::Malformed(
                "access mask 8 is over its limit of 7".into()
            ))
        );
        let mut fs = NetFs::new();
        let wide = FsCommand::Access {
            path: at("/"),
            mask: 8,
        };
        assert_eq!(fs.execute(&wide), FsReply::Error(Errno::Einval));
        assert_eq!(client.access(&at("/x"), 0), fs_err(Errno::Enoent));
        client.utimens(&at("/r"), T1, T1).unwrap();
        let attr = client.lstat(&at("/r")).unwrap();
        assert_eq!((attr.atime, attr.mtime, attr.mode), (T1, T1, Mode(0o400)));
    }

    #[test]
    fn oversized_calls_are_refused_or_cut_not_panicked_on() {
        let mut client = Client::new(NetFs::new());
        let fh = client.create(&at("/f"), RW, T0).unwrap();
        let big = vec![1; IO_BYTES_MAX + 1];
        let refused = client.write(&at("/f"), fh, 0, &big, T1);
        assert!(
            matches!(refused, Err(CallError::Malformed(_))),
            "{refused:?}"
        );
        let mut fs = NetFs::new();
        let create = FsCommand::Create {
            path: at("/f"),
            mode: RW,
            time: T0,
        };
        let FsReply::Opened(fh) = fs.execute(&create) else {
            panic!("create opens");
        };
        let write = FsCommand::Write {
            path: at("/f"),
            fh,
            offset: 0,
            data: big,
            time: T1,
        };
        assert_eq!(
            fs.execute(&write),
            FsReply::Written(IO_BYTES_MAX as u64 + 1)
        );
        let read = FsCommand::Read {
            path: at("/f"),
            fh,
            offset: 0,
            size: u64::MAX,
        };
        let FsReply::Data(data) = fs.execute(&read) else {
            panic!("a read of an open file gives data");
        };
        assert_eq!(data.len(), IO_BYTES_MAX);
    }

    #[test]
    fn handles_run_out_at_their_limit_and_come_back_on_release() {
        let mut client = Client::new(NetFs::new());
        client.mknod(&at("/f"), RW, T0).unwrap();
        let handles: Vec<Fh> = (0..HANDLES_MAX)
            .map(|_| client.opendir(&at("/")).unwrap())
            .collect();
        assert_eq!(
            client.open(&at("/f"), true, T1),
            Err(CallError::Fs(Errno::Emfile))
        );
        assert_eq!(
            client.create(&at("/g"), RW, T1),
            Err(CallError::Fs(Errno::Emfile))
        );
        assert_eq!(
            client.lstat(&at("/f")).unwrap().mtime,
            T0,
            "a refused open truncates nothing"
        );
        assert_eq!(client.lstat(&at("/g")), Err(CallError::Fs(Errno::Enoent)));
        client.releasedir(handles[0]).unwrap();
        client.open(&at("/f"), false, T1).unwrap();
    }

    #[test]
    fn limits_and_misuse_answer_their_errno() {
        let mut client = Client::new(NetFs::new());
        client.mkdir(&at("/d"), Mode(0o755), T0).unwrap();
        client.mkdir(&at("/e"), Mode(0o755), T0).unwrap();
        let fh = client.create(&at("/d/f"), RW, T0).unwrap();
        assert_eq!(
            client.write(&at("/d/f"), fh, FILE_BYTES_MAX, b"x", T1),
            Err(CallError::Fs(Errno::Efbig))
        );
        assert_eq!(
            client.write(&at("/d/f"), fh, u64::MAX, b"x", T1),
            Err(CallError::Fs(Errno::Efbig))
        );
        assert_eq!(
            client.rename(&at("/d/f"), &at("/e/f")),
            fs_err(Errno::Exdev)
        );
        assert_eq!(
            client.rename(&at("/d/g"), &at("/e/g")),
            fs_err(Errno::Enoent)
        );
        assert_eq!(client.rename(&at("/"), &at("/x")), fs_err(Errno::Ebusy));
        assert_eq!(client.rmdir(&at("/")), fs_err(Errno::Ebusy));
        assert_eq!(client.unlink(&at("/")), fs_err(Errno::Eisdir));
        assert_eq!(client.mkdir(&at("/"), RW, T0), fs_err(Errno::Eexist));
        assert_eq!(
            client.opendir(&at("/d/f")).map(|_| ()),
            fs_err(Errno::Enotdir)
        );
        assert_eq!(
            client.open(&at("/d"), false, T0).map(|_| ()),
            fs_err(Errno::Eisdir)
        );
    }

    #[test]
    fn a_request_that_does_not_decode_is_answered_not_executed() {
        let mut fs = NetFs::new();
        let before = fs.digest();
        let reply = FsReply::decode(&fs.execute_encoded(b"\x00garbage")).unwrap();
        assert!(matches!(reply, FsReply::Malformed(_)), "{reply:?}");
        // A path that is not canonical is refused by decoding, before C-G sees it.
        let mut plain = vec![12];
        logless_service::wire::put_bytes(&mut plain, b"/a//b");
        let mut request = Vec::new();
        crate::frame::compress(&plain, &mut request);
        assert_eq!(fs.group_of_encoded(&request, 4), Group::All);
        let reply = FsReply::decode(&fs.execute_encoded(&request)).unwrap();
        assert_eq!(
            reply,
            FsReply::Malformed("invalid path: empty, . or .. component".into())
        );
        assert_eq!(fs.digest(), before);
    }

    #[test]
    fn replicas_that_execute_the_same_calls_have_the_same_digest() {
        let run = |extra: bool| {
            let mut client = Client::new(NetFs::new());
            client.mkdir(&at("/d"), Mode(0o755), T0).unwrap();
            let fh = client.create(&at("/d/f"), RW, T0).unwrap();
            client.write(&at("/d/f"), fh, 0, b"abc", T1).unwrap();
            if extra {
                client.write(&at("/d/f"), fh, 1, b"B", T1).unwrap();
            }
            client.transport().digest()
        };
        assert_eq!(run(false), run(false));
        assert_ne!(run(false), run(true));
    }
}
