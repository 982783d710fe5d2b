//! [`NetFsFuse`]: fuser's [`Filesystem`] on a NetFS reached through a [`Transport`].
//!
//! Every FUSE call becomes NetFS calls through the direct [`Client`]: the inode number the
//! kernel names is turned into the path NetFS wants ([`InodePaths`]), and the times of calls
//! that set them are stamped here. FUSE inode numbers are NetFS's own (its root is 1, as
//! FUSE's), and so are file handles. What NetFS lacks is answered as Linux does for a file
//! system without it:
//! * no `chmod` or `chown` (NetFS keeps modes as created and no owners: every file shows the
//!   mounting user's): `EPERM` unless nothing changes;
//! * truncation: to 0 (an `open` with `O_TRUNC`) and growing (a zero written at the new end);
//!   shrinking to another size is `EOPNOTSUPP`;
//! * no links, devices or symbolic links (`EPERM`), rename within one directory only (`EXDEV`,
//!   which `mv` answers by copying), no `renameat2` flags (`EINVAL`);
//! * a file unlinked while open can no longer be read or written through its handle (NetFS
//!   binds a handle to its path), only released.
use std::collections::HashMap;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, SystemTime};

use fuser::{
    AccessFlags, Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, Generation,
    INodeNo, InitFlags, KernelConfig, LockOwner, OpenFlags, RenameFlags, ReplyAttr, ReplyCreate,
    ReplyData, ReplyDirectory, ReplyEmpty, ReplyEntry, ReplyOpen, ReplyWrite, ReplyXattr, Request,
    TimeOrNow, WriteFlags,
};
use logless_netfs::{Attr, CallError, Client, Fh, FsPath, Ino, Mode, Time, Transport};

use crate::convert::{self, child, file_attr, file_type, netfs_time, now, Owner};
use crate::inodes::InodePaths;

/// How long the kernel may keep an attribute or a name it was told. Short, because a NetFS
/// shared with other clients changes under the mount.
const TTL: Duration = Duration::from_secs(1);

/// NetFS never reuses an inode number, so one generation serves.
const GENERATION: Generation = Generation(0);

/// One entry of a directory listing, as the kernel is given it.
struct Listed {
    ino: INodeNo,
    kind: FileType,
    name: Vec<u8>,
}

/// What the calls share: the client and the tables it needs.
struct State<T> {
    client: Client<T>,
    inodes: InodePaths,
    /// The listing of each open directory handle, taken at its first `readdir` so that the
    /// kernel's follow-up calls (by offset) see one snapshot.
    listings: HashMap<Fh, Vec<Listed>>,
}

/// A NetFS as a FUSE file system. The calls are serialized (one client, one lock).
pub struct NetFsFuse<T> {
    state: Mutex<State<T>>,
    owner: Owner,
}

impl<T: Transport> NetFsFuse<T> {
    /// A file system that sends its calls through `transport`; every file shows `owner`.
    pub fn new(transport: T, owner: Owner) -> NetFsFuse<T> {
        NetFsFuse {
            state: Mutex::new(State {
                client: Client::new(transport),
                inodes: InodePaths::new(),
                listings: HashMap::new(),
            }),
            owner,
        }
    }

    fn state(&self) -> MutexGuard<'_, State<T>> {
        // A call that panicked leaves the tables as consistent as between two NetFS calls.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn attr(&self, attr: &Attr) -> FileAttr {
        file_attr(attr, self.owner)
    }

    fn reply_entry(&self, reply: ReplyEntry, outcome: Result<Attr, Errno>) {
        match outcome {
            Ok(attr) => reply.entry(&TTL, &self.attr(&attr), GENERATION),
            Err(errno) => reply.error(errno),
        }
    }
}

fn reply_empty(reply: ReplyEmpty, outcome: Result<(), Errno>) {
    match outcome {
        Ok(()) => reply.ok(),
        Err(errno) => reply.error(errno),
    }
}

fn reply_opened(reply: ReplyOpen, outcome: Result<Fh, Errno>) {
    match outcome {
        Ok(handle) => reply.opened(FileHandle(handle.0), FopenFlags::empty()),
        Err(errno) => reply.error(errno),
    }
}

fn fh(handle: FileHandle) -> Fh {
    Fh(handle.0)
}

fn ino(ino: INodeNo) -> Ino {
    Ino(ino.0)
}

impl<T: Transport> State<T> {
    fn path(&self, ino: Ino) -> Result<FsPath, Errno> {
        self.inodes.path(ino).cloned().ok_or(Errno::ENOENT)
    }

    fn child_path(&self, parent: INodeNo, name: &OsStr) -> Result<FsPath, Errno> {
        child(&self.path(ino(parent))?, name.as_bytes())
    }

    fn lstat(&mut self, path: &FsPath) -> Result<Attr, Errno> {
        self.client.lstat(path).map_err(convert::errno)
    }

    /// The attributes of `ino`, at the path it is known by: `ENOENT` if that path now names
    /// another inode (another client moved or replaced it).
    fn attr_of(&mut self, ino: Ino) -> Result<(FsPath, Attr), Errno> {
        let path = self.path(ino)?;
        let attr = self.lstat(&path)?;
        if attr.ino != ino {
            return Err(Errno::ENOENT);
        }
        Ok((path, attr))
    }

    /// The attributes at `path`, recording its inode for the kernel's later calls.
    fn entry(&mut self, path: FsPath) -> Result<Attr, Errno> {
        let attr = self.lstat(&path)?;
        self.inodes.insert(attr.ino, path);
        Ok(attr)
    }

    /// Makes `name` in the directory `parent` with `call` and gives its attributes.
    fn make(
        &mut self,
        parent: INodeNo,
        name: &OsStr,
        call: impl FnOnce(&mut Client<T>, &FsPath) -> Result<(), CallError>,
    ) -> Result<Attr, Errno> {
        let path = self.child_path(parent, name)?;
        call(&mut self.client, &path).map_err(convert::errno)?;
        self.entry(path)
    }

    /// Removes `name` from the directory `parent` with `call`.
    fn remove(
        &mut self,
        parent: INodeNo,
        name: &OsStr,
        call: impl FnOnce(&mut Client<T>, &FsPath) -> Result<(), CallError>,
    ) -> Result<(), Errno> {
        let path = self.child_path(parent, name)?;
        call(&mut self.client, &path).map_err(convert::errno)?;
        self.inodes.remove_path(&path);
        Ok(())
    }

    fn open(&mut self, path: &FsPath, truncate: bool) -> Result<Fh, Errno> {
        self.client
            .open(path, truncate, now())
            .map_err(convert::errno)
    }

    fn release(&mut self, handle: Fh) -> Result<(), Errno> {
        self.client.release(handle).map_err(convert::errno)
    }

    /// Creates and opens the file at `path`; one that appeared meanwhile (another client
    /// made it) is opened instead unless the caller asked for `O_EXCL`.
    fn create(&mut self, path: FsPath, mode: Mode, flags: i32) -> Result<(Attr, Fh), Errno> {
        let handle = match self.client.create(&path, mode, now()) {
            Ok(handle) => handle,
            Err(CallError::Fs(logless_netfs::Errno::Eexist)) if flags & libc::O_EXCL == 0 => {
                self.open(&path, flags & libc::O_TRUNC != 0)?
            }
            Err(error) => return Err(convert::errno(error)),
        };
        match self.entry(path) {
            Ok(attr) => Ok((attr, handle)),
            Err(errno) => {
                // Removed by another client before it could be looked at: do not leak it.
                let _ = self.release(handle);
                Err(errno)
            }
        }
    }

    /// Sets the size of the file at `path` (see the module docs for what NetFS allows).
    fn resize(&mut self, path: &FsPath, size: u64, attr: &Attr) -> Result<(), Errno> {
        if size == attr.size {
            return Ok(());
        }
        if size == 0 {
            let handle = self.open(path, true)?;
            return self.release(handle);
        }
        if size < attr.size {
            return Err(Errno::EOPNOTSUPP);
        }
        let handle = self.open(path, false)?;
        // NetFS fills the gap before a write with zeros.
        let written = self.client.write(path, handle, size - 1, &[0], now());
        self.release(handle)?;
        written.map(|_| ()).map_err(convert::errno)
    }

    /// The listing of the directory `dir` open as `handle`, `.` and `..` first.
    fn listing(&mut self, dir: Ino, handle: Fh, offset: u64) -> Result<&[Listed], Errno> {
        if offset == 0 || !self.listings.contains_key(&handle) {
            let path = self.path(dir)?;
            let entries = self.client.readdir(&path).map_err(convert::errno)?;
            let parent = match path.split_last() {
                Some((parent, _)) => self.lstat(&parent)?.ino,
                None => Ino::ROOT,
            };
            let mut listing = vec![
                Listed {
                    ino: INodeNo(dir.0),
                    kind: FileType::Directory,
                    name: b".".to_vec(),
                },
                Listed {
                    ino: INodeNo(parent.0),
                    kind: FileType::Directory,
                    name: b"..".to_vec(),
                },
            ];
            for entry in entries {
                self.inodes.insert(entry.ino, child(&path, &entry.name)?);
                listing.push(Listed {
                    ino: INodeNo(entry.ino.0),
                    kind: file_type(entry.kind),
                    name: entry.name,
                });
            }
            self.listings.insert(handle, listing);
        }
        Ok(&self.listings[&handle])
    }
}

/// The permission bits of a `mode` that FUSE passes, less `umask`.
fn permissions(mode: u32, umask: u32) -> Mode {
    Mode(mode & !umask & Mode::MASK)
}

/// A time that `setattr` asks for.
fn requested_time(time: TimeOrNow) -> Result<Time, Errno> {
    match time {
        TimeOrNow::SpecificTime(time) => netfs_time(time),
        TimeOrNow::Now => Ok(now()),
    }
}

impl<T: Transport + Send + 'static> Filesystem for NetFsFuse<T> {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        // `open` with O_TRUNC then truncates in one NetFS call; without it the kernel sends a
        // `setattr` to size 0 first, which works too.
        let _ = config.add_capabilities(InitFlags::FUSE_ATOMIC_O_TRUNC);
        Ok(())
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        let mut state = self.state();
        let outcome = state
            .child_path(parent, name)
            .and_then(|path| state.entry(path));
        self.reply_entry(reply, outcome);
    }

    fn getattr(&self, _req: &Request, inode: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        match self.state().attr_of(ino(inode)) {
            Ok((_, attr)) => reply.attr(&TTL, &self.attr(&attr)),
            Err(errno) => reply.error(errno),
        }
    }

    fn setattr(
        &self,
        _req: &Request,
        inode: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        _fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        let mut state = self.state();
        let outcome = (|| {
            let (path, attr) = state.attr_of(ino(inode))?;
            let chmod = mode.is_some_and(|mode| mode & Mode::MASK != attr.mode.0);
            let chown = uid.is_some_and(|uid| uid != self.owner.uid)
                || gid.is_some_and(|gid| gid != self.owner.gid);
            if chmod || chown {
                return Err(Errno::EPERM);
            }
            if let Some(size) = size {
                state.resize(&path, size, &attr)?;
            }
            if atime.is_some() || mtime.is_some() {
                let attr = state.lstat(&path)?;
                let atime = atime.map_or(Ok(attr.atime), requested_time)?;
                let mtime = mtime.map_or(Ok(attr.mtime), requested_time)?;
                state
                    .client
                    .utimens(&path, atime, mtime)
                    .map_err(convert::errno)?;
            }
            state.lstat(&path)
        })();
        match outcome {
            Ok(attr) => reply.attr(&TTL, &self.attr(&attr)),
            Err(errno) => reply.error(errno),
        }
    }

    fn mknod(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        _rdev: u32,
        reply: ReplyEntry,
    ) {
        if mode & libc::S_IFMT != libc::S_IFREG {
            // Devices, pipes and sockets: NetFS keeps regular files and directories only.
            return reply.error(Errno::EPERM);
        }
        let outcome = self.state().make(parent, name, |client, path| {
            client.mknod(path, permissions(mode, umask), now())
        });
        self.reply_entry(reply, outcome);
    }

    fn mkdir(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        reply: ReplyEntry,
    ) {
        let outcome = self.state().make(parent, name, |client, path| {
            client.mkdir(path, permissions(mode, umask), now())
        });
        self.reply_entry(reply, outcome);
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let outcome = self.state().remove(parent, name, Client::unlink);
        reply_empty(reply, outcome);
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let outcome = self.state().remove(parent, name, Client::rmdir);
        reply_empty(reply, outcome);
    }

    fn rename(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        new_parent: INodeNo,
        new_name: &OsStr,
        flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        if !flags.is_empty() {
            return reply.error(Errno::EINVAL);
        }
        let mut state = self.state();
        let outcome = (|| {
            let from = state.child_path(parent, name)?;
            let to = state.child_path(new_parent, new_name)?;
            state.client.rename(&from, &to).map_err(convert::errno)?;
            state.inodes.rename(&from, &to);
            Ok(())
        })();
        reply_empty(reply, outcome);
    }

    fn open(&self, _req: &Request, inode: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        let mut state = self.state();
        let truncate = flags.0 & libc::O_TRUNC != 0;
        let outcome = state
            .path(ino(inode))
            .and_then(|path| state.open(&path, truncate));
        reply_opened(reply, outcome);
    }

    fn read(
        &self,
        _req: &Request,
        inode: INodeNo,
        handle: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        let mut state = self.state();
        let outcome = state.path(ino(inode)).and_then(|path| {
            let read = state
                .client
                .read(&path, fh(handle), offset, u64::from(size));
            read.map_err(convert::errno)
        });
        match outcome {
            Ok(data) => reply.data(&data),
            Err(errno) => reply.error(errno),
        }
    }

    fn write(
        &self,
        _req: &Request,
        inode: INodeNo,
        handle: FileHandle,
        offset: u64,
        data: &[u8],
        _write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        let mut state = self.state();
        let outcome = state.path(ino(inode)).and_then(|path| {
            let written = state.client.write(&path, fh(handle), offset, data, now());
            written.map_err(convert::errno)
        });
        // The kernel writes at most its max_write (128 KiB by default) at once, far below
        // NetFS's 1 MiB per write, so the count fits.
        match outcome.map(u32::try_from) {
            Ok(Ok(written)) => reply.written(written),
            Ok(Err(_)) => reply.error(Errno::EIO),
            Err(errno) => reply.error(errno),
        }
    }

    fn flush(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        // Nothing is buffered here: every write went to NetFS when it was made.
        reply.ok();
    }

    fn fsync(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        // As durable as the NetFS behind the transport already makes every write.
        reply.ok();
    }

    fn release(
        &self,
        _req: &Request,
        _ino: INodeNo,
        handle: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        reply_empty(reply, self.state().release(fh(handle)));
    }

    fn opendir(&self, _req: &Request, inode: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        let mut state = self.state();
        let outcome = state
            .path(ino(inode))
            .and_then(|path| state.client.opendir(&path).map_err(convert::errno));
        reply_opened(reply, outcome);
    }

    fn readdir(
        &self,
        _req: &Request,
        inode: INodeNo,
        handle: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        let mut state = self.state();
        let listing = match state.listing(ino(inode), fh(handle), offset) {
            Ok(listing) => listing,
            Err(errno) => return reply.error(errno),
        };
        let start = usize::try_from(offset).unwrap_or(usize::MAX);
        for (index, entry) in listing.iter().enumerate().skip(start) {
            // Each entry's offset is where the next call starts.
            let next = index as u64 + 1;
            if reply.add(entry.ino, next, entry.kind, OsStr::from_bytes(&entry.name)) {
                break;
            }
        }
        reply.ok();
    }

    fn releasedir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        handle: FileHandle,
        _flags: OpenFlags,
        reply: ReplyEmpty,
    ) {
        let mut state = self.state();
        state.listings.remove(&fh(handle));
        let outcome = state.client.releasedir(fh(handle));
        reply_empty(reply, outcome.map_err(convert::errno));
    }

    fn access(&self, _req: &Request, inode: INodeNo, mask: AccessFlags, reply: ReplyEmpty) {
        let mut state = self.state();
        let outcome = state.path(ino(inode)).and_then(|path| {
            let mask = u32::try_from(mask.bits()).map_err(|_| Errno::EINVAL)?;
            state.client.access(&path, mask).map_err(convert::errno)
        });
        reply_empty(reply, outcome);
    }

    // NetFS keeps no extended attributes: answered as a file system without them is, rather
    // than by fuser's defaults, which log a warning for every `ls -l`.
    fn getxattr(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _name: &OsStr,
        _size: u32,
        reply: ReplyXattr,
    ) {
        reply.error(Errno::ENOTSUP);
    }

    fn listxattr(&self, _req: &Request, _ino: INodeNo, _size: u32, reply: ReplyXattr) {
        reply.error(Errno::ENOTSUP);
    }

    fn create(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        flags: i32,
        reply: ReplyCreate,
    ) {
        let mut state = self.state();
        let outcome = state
            .child_path(parent, name)
            .and_then(|path| state.create(path, permissions(mode, umask), flags));
        match outcome {
            Ok((attr, handle)) => reply.created(
                &TTL,
                &self.attr(&attr),
                GENERATION,
                FileHandle(handle.0),
                FopenFlags::empty(),
            ),
            Err(errno) => reply.error(errno),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use logless_netfs::NetFs;

    fn state() -> State<NetFs> {
        State {
            client: Client::new(NetFs::new()),
            inodes: InodePaths::new(),
            listings: HashMap::new(),
        }
    }

    fn at(path: &str) -> FsPath {
        FsPath::new(path).unwrap()
    }

    const RW: Mode = Mode(0o644);

    #[test]
    fn create_opens_a_file_that_appeared_meanwhile_unless_exclusive() {
        let mut state = state();
        state.client.mknod(&at("/f"), RW, Time::default()).unwrap();
        let (attr, _) = state.create(at("/f"), RW, libc::O_WRONLY).unwrap();
        assert_eq!(state.inodes.path(attr.ino), Some(&at("/f")));
        let exclusive = state.create(at("/f"), RW, libc::O_WRONLY | libc::O_EXCL);
        assert_eq!(exclusive.map(|_| ()), Err(Errno::EEXIST));
    }

    #[test]
    fn a_file_grows_with_zeros_empties_and_refuses_to_shrink_otherwise() {
        let mut state = state();
        let (attr, handle) = state.create(at("/f"), RW, 0).unwrap();
        state
            .client
            .write(&at("/f"), handle, 0, b"abc", now())
            .unwrap();
        let attr = state.attr_of(attr.ino).unwrap().1;
        assert_eq!(state.resize(&at("/f"), 1, &attr), Err(Errno::EOPNOTSUPP));
        state.resize(&at("/f"), 6, &attr).unwrap();
        let read = state.client.read(&at("/f"), handle, 0, 100).unwrap();
        assert_eq!(read, b"abc\0\0\0");
        let attr = state.attr_of(attr.ino).unwrap().1;
        state.resize(&at("/f"), 0, &attr).unwrap();
        assert_eq!(state.attr_of(attr.ino).unwrap().1.size, 0);
        assert_eq!(
            state.client.transport().handle_count(),
            1,
            "resizing leaks no handle"
        );
    }

    #[test]
    fn a_listing_is_one_snapshot_per_handle_with_dot_entries_first() {
        let mut state = state();
        state.client.mkdir(&at("/d"), Mode(0o755), now()).unwrap();
        state.client.mknod(&at("/d/f"), RW, now()).unwrap();
        let dir = state.entry(at("/d")).unwrap().ino;
        let handle = state.client.opendir(&at("/d")).unwrap();
        let names = |listing: &[Listed]| -> Vec<Vec<u8>> {
            listing.iter().map(|entry| entry.name.clone()).collect()
        };
        let first = names(state.listing(dir, handle, 0).unwrap());
        assert_eq!(first, [&b"."[..], b"..", b"f"]);
        state.client.mknod(&at("/d/g"), RW, now()).unwrap();
        assert_eq!(names(state.listing(dir, handle, 2).unwrap()), first);
        assert_eq!(names(state.listing(dir, handle, 0).unwrap()).len(), 4);
        let f = state.lstat(&at("/d/f")).unwrap().ino;
        assert_eq!(
            state.inodes.path(f),
            Some(&at("/d/f")),
            "readdir records paths"
        );
    }

    #[test]
    fn an_inode_whose_path_now_names_another_is_gone() {
        let mut state = state();
        state.client.mknod(&at("/f"), RW, now()).unwrap();
        let old = state.entry(at("/f")).unwrap().ino;
        // Another client replaces it: the path now names a new inode.
        state.client.unlink(&at("/f")).unwrap();
        state.client.mknod(&at("/f"), RW, now()).unwrap();
        assert_eq!(state.attr_of(old).map(|_| ()), Err(Errno::ENOENT));
        assert_eq!(state.attr_of(Ino(99)).map(|_| ()), Err(Errno::ENOENT));
    }
}
