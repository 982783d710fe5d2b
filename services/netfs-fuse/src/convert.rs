//! Between NetFS's types and FUSE's: times, attributes, kinds, errors and child paths.
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fuser::{Errno, FileAttr, FileType, INodeNo};
use logless_netfs::{Attr, CallError, FsPath, Kind, Time};
use logless_service::DecodeError;

/// Who owns every file of the mount (NetFS keeps no owners): the user that mounted it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Owner {
    /// The user id shown for every file.
    pub uid: u32,
    /// The group id shown for every file.
    pub gid: u32,
}

/// The block size `stat` shows.
const BLOCK_BYTES: u32 = 4096;

/// A NetFS time as the system's.
pub fn system_time(time: Time) -> SystemTime {
    UNIX_EPOCH + Duration::new(time.secs, time.nanos)
}

/// A system time as NetFS's; `EINVAL` before 1970, which NetFS cannot store.
pub fn netfs_time(time: SystemTime) -> Result<Time, Errno> {
    let since = time.duration_since(UNIX_EPOCH).map_err(|_| Errno::EINVAL)?;
    Ok(Time {
        secs: since.as_secs(),
        nanos: since.subsec_nanos(),
    })
}

/// The time now, which the front end stamps on the calls that set times (NetFS reads no
/// clock). A clock before 1970 stamps 1970.
pub fn now() -> Time {
    netfs_time(SystemTime::now()).unwrap_or_default()
}

/// FUSE's file type of a NetFS kind.
pub fn file_type(kind: Kind) -> FileType {
    match kind {
        Kind::File => FileType::RegularFile,
        Kind::Directory => FileType::Directory,
    }
}

/// FUSE's attributes of NetFS's. NetFS keeps no change or creation time: both show mtime.
pub fn file_attr(attr: &Attr, owner: Owner) -> FileAttr {
    let mtime = system_time(attr.mtime);
    FileAttr {
        ino: INodeNo(attr.ino.0),
        size: attr.size,
        blocks: attr.size.div_ceil(512),
        atime: system_time(attr.atime),
        mtime,
        ctime: mtime,
        crtime: mtime,
        kind: file_type(attr.kind),
        perm: u16::try_from(attr.mode.0).expect("NetFS modes fit in 12 bits"),
        nlink: u32::try_from(attr.nlink).unwrap_or(u32::MAX),
        uid: owner.uid,
        gid: owner.gid,
        rdev: 0,
        blksize: BLOCK_BYTES,
        flags: 0,
    }
}

/// The errno a failed call answers the kernel: NetFS's own, else `EIO` (logged: a malformed
/// request or an undecodable reply is a bug of this front end or of the transport).
pub fn errno(error: CallError) -> Errno {
    match error {
        CallError::Fs(errno) => Errno::from_i32(errno.code()),
        other => {
            tracing::warn!("NetFS call failed: {other}");
            Errno::EIO
        }
    }
}

/// The path of `name` in the directory at `parent`: `ENAMETOOLONG` beyond NetFS's limits,
/// `EINVAL` for a name NetFS refuses (the kernel sends no `/`, `.` or `..`).
pub fn child(parent: &FsPath, name: &[u8]) -> Result<FsPath, Errno> {
    let mut bytes = parent.as_bytes().to_vec();
    if bytes != b"/" {
        bytes.push(b'/');
    }
    bytes.extend_from_slice(name);
    FsPath::new(bytes).map_err(|error| match error {
        DecodeError::TooLarge { .. } => Errno::ENAMETOOLONG,
        _ => Errno::EINVAL,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use logless_netfs::{Errno as NetFsErrno, Ino, Mode};

    #[test]
    fn child_paths_are_canonical_and_bounded() {
        let root = FsPath::root();
        assert_eq!(child(&root, b"a"), Ok(FsPath::new("/a").unwrap()));
        let dir = FsPath::new("/a").unwrap();
        assert_eq!(child(&dir, b"b"), Ok(FsPath::new("/a/b").unwrap()));
        assert_eq!(child(&dir, &[b'x'; 256]), Err(Errno::ENAMETOOLONG));
        assert_eq!(child(&dir, b".."), Err(Errno::EINVAL));
    }

    #[test]
    fn times_round_trip_and_attributes_carry_over() {
        let time = Time { secs: 7, nanos: 9 };
        assert_eq!(netfs_time(system_time(time)), Ok(time));
        let before_1970 = UNIX_EPOCH - Duration::from_secs(1);
        assert_eq!(netfs_time(before_1970), Err(Errno::EINVAL));
        let attr = Attr {
            ino: Ino(5),
            kind: Kind::File,
            mode: Mode(0o640),
            size: 513,
            nlink: 1,
            atime: time,
            mtime: time,
        };
        let owner = Owner { uid: 7, gid: 8 };
        let fuse = file_attr(&attr, owner);
        assert_eq!((fuse.ino, fuse.perm, fuse.blocks), (INodeNo(5), 0o640, 2));
        assert_eq!(
            (fuse.uid, fuse.gid, fuse.kind),
            (7, 8, FileType::RegularFile)
        );
        assert_eq!(
            errno(CallError::Fs(NetFsErrno::Enotempty)),
            Errno::ENOTEMPTY
        );
        assert_eq!(errno(CallError::Malformed("x".into())), Errno::EIO);
    }
}
