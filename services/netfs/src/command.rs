//! NetFS's calls (a subset of FUSE's, seed 004 §V-B) and their replies, with their encoding.
//!
//! Requests and replies cross the wire as lz4 frames (see [`crate::frame`]): the [`Wire`]
//! forms of [`FsCommand`] and [`FsReply`] are the compressed frames, and their plain encodings
//! (a tag byte, varints, length-prefixed byte strings) are what the frames carry.
use logless_service::wire::{put_bytes, put_message, put_varint};
use logless_service::{DecodeError, Reader, Wire};

use crate::errno::Errno;
use crate::frame;
use crate::path::FsPath;

/// The most bytes one read returns or one write carries.
pub const IO_BYTES_MAX: usize = 1 << 20;

/// A file handle, as `create`, `open` and `opendir` hand out.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Fh(pub u64);

/// An inode number; the root is [`Ino::ROOT`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Ino(pub u64);

impl Ino {
    /// The root directory's inode (FUSE's `FUSE_ROOT_ID`).
    pub const ROOT: Ino = Ino(1);
}

/// A time stamp: seconds and nanoseconds since the Unix epoch. NetFS reads no clock; calls
/// that set times carry them (the client proxy stamps them), so every replica stores the same.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Time {
    /// Whole seconds.
    pub secs: u64,
    /// Nanoseconds, below 10⁹.
    pub nanos: u32,
}

/// Permission bits (`0o7777` at most).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Mode(pub u32);

impl Mode {
    /// The bits a mode may have.
    pub const MASK: u32 = 0o7777;
}

/// What an inode is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kind {
    /// A regular file.
    File,
    /// A directory.
    Directory,
}

/// A NetFS call. Paths are canonical ([`FsPath`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FsCommand {
    /// Creates a regular file and opens it.
    Create {
        /// The new file.
        path: FsPath,
        /// Its permission bits.
        mode: Mode,
        /// Its times.
        time: Time,
    },
    /// Creates a regular file.
    Mknod {
        /// The new file.
        path: FsPath,
        /// Its permission bits.
        mode: Mode,
        /// Its times.
        time: Time,
    },
    /// Creates a directory.
    Mkdir {
        /// The new directory.
        path: FsPath,
        /// Its permission bits.
        mode: Mode,
        /// Its times.
        time: Time,
    },
    /// Removes a file.
    Unlink {
        /// The file.
        path: FsPath,
    },
    /// Removes an empty directory.
    Rmdir {
        /// The directory.
        path: FsPath,
    },
    /// Opens a file, emptying it first if `truncate` (then its mtime becomes `time`).
    Open {
        /// The file.
        path: FsPath,
        /// Whether to empty it (`O_TRUNC`).
        truncate: bool,
        /// The time of the call.
        time: Time,
    },
    /// Closes a file handle.
    Release {
        /// The handle.
        fh: Fh,
    },
    /// Opens a directory.
    Opendir {
        /// The directory.
        path: FsPath,
    },
    /// Closes a directory handle.
    Releasedir {
        /// The handle.
        fh: Fh,
    },
    /// Sets access and modification times.
    Utimens {
        /// The file or directory.
        path: FsPath,
        /// The access time.
        atime: Time,
        /// The modification time.
        mtime: Time,
    },
    /// Checks the owner's permission bits against `mask` (`R_OK` 4, `W_OK` 2, `X_OK` 1, or
    /// `F_OK` 0 for existence).
    Access {
        /// The file or directory.
        path: FsPath,
        /// The access asked for.
        mask: u32,
    },
    /// The attributes of a path.
    Lstat {
        /// The file or directory.
        path: FsPath,
    },
    /// Reads up to `size` bytes at `offset` of the open file at `path`.
    Read {
        /// The file, as its handle was opened on.
        path: FsPath,
        /// The handle.
        fh: Fh,
        /// Where to start.
        offset: u64,
        /// How many bytes at most, up to [`IO_BYTES_MAX`].
        size: u64,
    },
    /// Writes `data` at `offset` of the open file at `path`, filling a gap with zeros.
    Write {
        /// The file, as its handle was opened on.
        path: FsPath,
        /// The handle.
        fh: Fh,
        /// Where to start.
        offset: u64,
        /// The bytes, up to [`IO_BYTES_MAX`].
        data: Vec<u8>,
        /// The new mtime.
        time: Time,
    },
    /// The entries of a directory, by name (without `.` and `..`).
    Readdir {
        /// The directory.
        path: FsPath,
    },
    /// Renames `from` to `to` in the same directory, replacing `to` if it exists.
    Rename {
        /// The old path.
        from: FsPath,
        /// The new path, in the same directory.
        to: FsPath,
    },
}

/// The attributes `lstat` answers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Attr {
    /// The inode number.
    pub ino: Ino,
    /// File or directory.
    pub kind: Kind,
    /// Permission bits.
    pub mode: Mode,
    /// Bytes of a file; entries of a directory.
    pub size: u64,
    /// Links: 1 for a file, 2 plus its subdirectories for a directory.
    pub nlink: u64,
    /// Access time.
    pub atime: Time,
    /// Modification time.
    pub mtime: Time,
}

/// One entry of a directory listing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DirEntry {
    /// The entry's name.
    pub name: Vec<u8>,
    /// Its inode number.
    pub ino: Ino,
    /// File or directory.
    pub kind: Kind,
}

/// What a NetFS call answers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FsReply {
    /// Done, with nothing to return.
    Done,
    /// A new handle (`create`, `open`, `opendir`).
    Opened(Fh),
    /// Attributes (`lstat`).
    Attr(Attr),
    /// Bytes read.
    Data(Vec<u8>),
    /// Bytes written.
    Written(u64),
    /// A directory listing, by name.
    Entries(Vec<DirEntry>),
    /// The call failed.
    Error(Errno),
    /// The request did not decode.
    Malformed(String),
}

/// The most entries a directory holds (a listing must fit in one reply).
pub const DIR_ENTRIES_MAX: u64 = 10_000;

mod tag {
    pub const CREATE: u8 = 1;
    pub const MKNOD: u8 = 2;
    pub const MKDIR: u8 = 3;
    pub const UNLINK: u8 = 4;
    pub const RMDIR: u8 = 5;
    pub const OPEN: u8 = 6;
    pub const RELEASE: u8 = 7;
    pub const OPENDIR: u8 = 8;
    pub const RELEASEDIR: u8 = 9;
    pub const UTIMENS: u8 = 10;
    pub const ACCESS: u8 = 11;
    pub const LSTAT: u8 = 12;
    pub const READ: u8 = 13;
    pub const WRITE: u8 = 14;
    pub const READDIR: u8 = 15;
    pub const RENAME: u8 = 16;

    pub const DONE: u8 = 1;
    pub const OPENED: u8 = 2;
    pub const ATTR: u8 = 3;
    pub const DATA: u8 = 4;
    pub const WRITTEN: u8 = 5;
    pub const ENTRIES: u8 = 6;
    pub const ERROR: u8 = 7;
    pub const MALFORMED: u8 = 8;
}

fn put_path(out: &mut Vec<u8>, path: &FsPath) {
    put_bytes(out, path.as_bytes());
}

fn put_time(out: &mut Vec<u8>, time: Time) {
    put_varint(out, time.secs);
    put_varint(out, u64::from(time.nanos));
}

fn path(reader: &mut Reader<'_>) -> Result<FsPath, DecodeError> {
    FsPath::new(reader.bytes("path", crate::path::PATH_BYTES_MAX)?)
}

fn time(reader: &mut Reader<'_>) -> Result<Time, DecodeError> {
    let secs = reader.varint()?;
    let nanos = reader.varint_at_most("nanoseconds", 999_999_999)?;
    let nanos = u32::try_from(nanos).expect("below 10^9");
    Ok(Time { secs, nanos })
}

fn mode(reader: &mut Reader<'_>) -> Result<Mode, DecodeError> {
    let bits = reader.varint_at_most("mode", u64::from(Mode::MASK))?;
    Ok(Mode(u32::try_from(bits).expect("below the mask")))
}

fn data(reader: &mut Reader<'_>) -> Result<Vec<u8>, DecodeError> {
    Ok(reader.bytes("data", IO_BYTES_MAX)?.to_vec())
}

impl FsCommand {
    /// The path of a path call (`access`, `lstat`, `read`, `write`, `readdir`: the calls that
    /// touch only what their path names); `None` for a structural call.
    pub fn path_call(&self) -> Option<&FsPath> {
        match self {
            FsCommand::Access { path, .. }
            | FsCommand::Lstat { path }
            | FsCommand::Read { path, .. }
            | FsCommand::Write { path, .. }
            | FsCommand::Readdir { path } => Some(path),
            FsCommand::Create { .. }
            | FsCommand::Mknod { .. }
            | FsCommand::Mkdir { .. }
            | FsCommand::Unlink { .. }
            | FsCommand::Rmdir { .. }
            | FsCommand::Open { .. }
            | FsCommand::Release { .. }
            | FsCommand::Opendir { .. }
            | FsCommand::Releasedir { .. }
            | FsCommand::Utimens { .. }
            | FsCommand::Rename { .. } => None,
        }
    }

    /// The plain (uncompressed) encoding.
    pub fn encode_plain(&self, out: &mut Vec<u8>) {
        match self {
            FsCommand::Create { path, mode, time }
            | FsCommand::Mknod { path, mode, time }
            | FsCommand::Mkdir { path, mode, time } => {
                out.push(match self {
                    FsCommand::Create { .. } => tag::CREATE,
                    FsCommand::Mknod { .. } => tag::MKNOD,
                    _ => tag::MKDIR,
                });
                put_path(out, path);
                put_varint(out, u64::from(mode.0));
                put_time(out, *time);
            }
            FsCommand::Unlink { path }
            | FsCommand::Rmdir { path }
            | FsCommand::Opendir { path }
            | FsCommand::Lstat { path }
            | FsCommand::Readdir { path } => {
                out.push(match self {
                    FsCommand::Unlink { .. } => tag::UNLINK,
                    FsCommand::Rmdir { .. } => tag::RMDIR,
                    FsCommand::Opendir { .. } => tag::OPENDIR,
                    FsCommand::Lstat { .. } => tag::LSTAT,
                    _ => tag::READDIR,
                });
                put_path(out, path);
            }
            FsCommand::Open {
                path,
                truncate,
                time,
            } => {
                out.push(tag::OPEN);
                put_path(out, path);
                out.push(u8::from(*truncate));
                put_time(out, *time);
            }
            FsCommand::Release { fh } | FsCommand::Releasedir { fh } => {
                let release = matches!(self, FsCommand::Release { .. });
                out.push(if release {
                    tag::RELEASE
                } else {
                    tag::RELEASEDIR
                });
                put_varint(out, fh.0);
            }
            FsCommand::Utimens { path, atime, mtime } => {
                out.push(tag::UTIMENS);
                put_path(out, path);
                put_time(out, *atime);
                put_time(out, *mtime);
            }
            FsCommand::Access { path, mask } => {
                out.push(tag::ACCESS);
                put_path(out, path);
                put_varint(out, u64::from(*mask));
            }
            FsCommand::Read {
                path,
                fh,
                offset,
                size,
            } => {
                out.push(tag::READ);
                put_path(out, path);
                put_varint(out, fh.0);
                put_varint(out, *offset);
                put_varint(out, *size);
            }
            FsCommand::Write {
                path,
                fh,
                offset,
                data,
                time,
            } => {
                out.push(tag::WRITE);
                put_path(out, path);
                put_varint(out, fh.0);
                put_varint(out, *offset);
                put_bytes(out, data);
                put_time(out, *time);
            }
            FsCommand::Rename { from, to } => {
                out.push(tag::RENAME);
                put_path(out, from);
                put_path(out, to);
            }
        }
    }

    /// Reads the plain encoding.
    pub fn decode_plain(reader: &mut Reader<'_>) -> Result<FsCommand, DecodeError> {
        Ok(match reader.u8()? {
            tag::CREATE => FsCommand::Create {
                path: path(reader)?,
                mode: mode(reader)?,
                time: time(reader)?,
            },
            tag::MKNOD => FsCommand::Mknod {
                path: path(reader)?,
                mode: mode(reader)?,
                time: time(reader)?,
            },
            tag::MKDIR => FsCommand::Mkdir {
                path: path(reader)?,
                mode: mode(reader)?,
                time: time(reader)?,
            },
            tag::UNLINK => FsCommand::Unlink {
                path: path(reader)?,
            },
            tag::RMDIR => FsCommand::Rmdir {
                path: path(reader)?,
            },
            tag::OPEN => FsCommand::Open {
                path: path(reader)?,
                truncate: reader.flag()?,
                time: time(reader)?,
            },
            tag::RELEASE => FsCommand::Release {
                fh: Fh(reader.varint()?),
            },
            tag::OPENDIR => FsCommand::Opendir {
                path: path(reader)?,
            },
            tag::RELEASEDIR => FsCommand::Releasedir {
                fh: Fh(reader.varint()?),
            },
            tag::UTIMENS => FsCommand::Utimens {
                path: path(reader)?,
                atime: time(reader)?,
                mtime: time(reader)?,
            },
            tag::ACCESS => FsCommand::Access {
                path: path(reader)?,
                mask: u32::try_from(reader.varint_at_most("access mask", 7)?).expect("at most 7"),
            },
            tag::LSTAT => FsCommand::Lstat {
                path: path(reader)?,
            },
            tag::READ => FsCommand::Read {
                path: path(reader)?,
                fh: Fh(reader.varint()?),
                offset: reader.varint()?,
                size: reader.varint_at_most("read size", IO_BYTES_MAX as u64)?,
            },
            tag::WRITE => FsCommand::Write {
                path: path(reader)?,
                fh: Fh(reader.varint()?),
                offset: reader.varint()?,
                data: data(reader)?,
                time: time(reader)?,
            },
            tag::READDIR => FsCommand::Readdir {
                path: path(reader)?,
            },
            tag::RENAME => FsCommand::Rename {
                from: path(reader)?,
                to: path(reader)?,
            },
            tag => return Err(DecodeError::UnknownTag(tag)),
        })
    }
}

fn put_attr(out: &mut Vec<u8>, attr: &Attr) {
    put_varint(out, attr.ino.0);
    out.push(kind_byte(attr.kind));
    put_varint(out, u64::from(attr.mode.0));
    put_varint(out, attr.size);
    put_varint(out, attr.nlink);
    put_time(out, attr.atime);
    put_time(out, attr.mtime);
}

fn kind_byte(kind: Kind) -> u8 {
    match kind {
        Kind::File => 0,
        Kind::Directory => 1,
    }
}

fn kind(reader: &mut Reader<'_>) -> Result<Kind, DecodeError> {
    match reader.u8()? {
        0 => Ok(Kind::File),
        1 => Ok(Kind::Directory),
        _ => Err(DecodeError::Invalid("kind")),
    }
}

fn attr(reader: &mut Reader<'_>) -> Result<Attr, DecodeError> {
    Ok(Attr {
        ino: Ino(reader.varint()?),
        kind: kind(reader)?,
        mode: mode(reader)?,
        size: reader.varint()?,
        nlink: reader.varint()?,
        atime: time(reader)?,
        mtime: time(reader)?,
    })
}

impl FsReply {
    /// The plain (uncompressed) encoding.
    pub fn encode_plain(&self, out: &mut Vec<u8>) {
        match self {
            FsReply::Done => out.push(tag::DONE),
            FsReply::Opened(fh) => {
                out.push(tag::OPENED);
                put_varint(out, fh.0);
            }
            FsReply::Attr(attr) => {
                out.push(tag::ATTR);
                put_attr(out, attr);
            }
            FsReply::Data(data) => {
                out.push(tag::DATA);
                put_bytes(out, data);
            }
            FsReply::Written(bytes) => {
                out.push(tag::WRITTEN);
                put_varint(out, *bytes);
            }
            FsReply::Entries(entries) => {
                out.push(tag::ENTRIES);
                put_varint(out, entries.len() as u64);
                for entry in entries {
                    put_bytes(out, &entry.name);
                    put_varint(out, entry.ino.0);
                    out.push(kind_byte(entry.kind));
                }
            }
            FsReply::Error(errno) => {
                out.push(tag::ERROR);
                put_varint(out, u64::from(errno.code().unsigned_abs()));
            }
            FsReply::Malformed(message) => {
                out.push(tag::MALFORMED);
                put_message(out, message);
            }
        }
    }

    /// Reads the plain encoding.
    pub fn decode_plain(reader: &mut Reader<'_>) -> Result<FsReply, DecodeError> {
        Ok(match reader.u8()? {
            tag::DONE => FsReply::Done,
            tag::OPENED => FsReply::Opened(Fh(reader.varint()?)),
            tag::ATTR => FsReply::Attr(attr(reader)?),
            tag::DATA => FsReply::Data(data(reader)?),
            tag::WRITTEN => FsReply::Written(reader.varint()?),
            tag::ENTRIES => {
                let count = reader.varint_at_most("directory entries", DIR_ENTRIES_MAX)?;
                let entries = (0..count)
                    .map(|_| {
                        Ok(DirEntry {
                            name: reader.bytes("name", crate::path::NAME_BYTES_MAX)?.to_vec(),
                            ino: Ino(reader.varint()?),
                            kind: kind(reader)?,
                        })
                    })
                    .collect::<Result<_, DecodeError>>()?;
                FsReply::Entries(entries)
            }
            tag::ERROR => {
                let code = reader.varint_at_most("errno", i32::MAX as u64)?;
                let code = i32::try_from(code).expect("at most i32::MAX");
                FsReply::Error(Errno::from_code(code).ok_or(DecodeError::Invalid("errno"))?)
            }
            tag::MALFORMED => {
                let message = reader.message()?;
                FsReply::Malformed(message)
            }
            tag => return Err(DecodeError::UnknownTag(tag)),
        })
    }
}

impl Wire for FsCommand {
    fn encode(&self, out: &mut Vec<u8>) {
        let mut plain = Vec::new();
        self.encode_plain(&mut plain);
        frame::compress(&plain, out);
    }

    fn decode_from(reader: &mut Reader<'_>) -> Result<FsCommand, DecodeError> {
        frame::decompress(reader, FsCommand::decode_plain)
    }
}

impl Wire for FsReply {
    fn encode(&self, out: &mut Vec<u8>) {
        let mut plain = Vec::new();
        self.encode_plain(&mut plain);
        frame::compress(&plain, out);
    }

    fn decode_from(reader: &mut Reader<'_>) -> Result<FsReply, DecodeError> {
        frame::decompress(reader, FsReply::decode_plain)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_call_and_reply_round_trips_through_its_frame() {
        let path = FsPath::new("/d/file").unwrap();
        let time = Time { secs: 7, nanos: 9 };
        let commands = [
            FsCommand::Create {
                path: path.clone(),
                mode: Mode(0o644),
                time,
            },
            FsCommand::Mknod {
                path: path.clone(),
                mode: Mode(0o600),
                time,
            },
            FsCommand::Mkdir {
                path: path.clone(),
                mode: Mode(0o755),
                time,
            },
            FsCommand::Unlink { path: path.clone() },
            FsCommand::Rmdir { path: path.clone() },
            FsCommand::Open {
                path: path.clone(),
                truncate: true,
                time,
            },
            FsCommand::Release { fh: Fh(3) },
            FsCommand::Opendir { path: path.clone() },
            FsCommand::Releasedir { fh: Fh(4) },
            FsCommand::Utimens {
                path: path.clone(),
                atime: time,
                mtime: Time::default(),
            },
            FsCommand::Access {
                path: path.clone(),
                mask: 6,
            },
            FsCommand::Lstat { path: path.clone() },
            FsCommand::Read {
                path: path.clone(),
                fh: Fh(1),
                offset: 5,
                size: 1024,
            },
            FsCommand::Write {
                path: path.clone(),
                fh: Fh(1),
                offset: 0,
                data: vec![7; 1000],
                time,
            },
            FsCommand::Readdir { path: path.clone() },
            FsCommand::Rename {
                from: path.clone(),
                to: FsPath::new("/d/other").unwrap(),
            },
        ];
        for command in commands {
            assert_eq!(FsCommand::decode(&command.encode_to_vec()), Ok(command));
        }
        let attr = Attr {
            ino: Ino(9),
            kind: Kind::Directory,
            mode: Mode(0o755),
            size: 3,
            nlink: 2,
            atime: time,
            mtime: time,
        };
        let entry = DirEntry {
            name: b"x".to_vec(),
            ino: Ino(4),
            kind: Kind::File,
        };
        let replies = [
            FsReply::Done,
            FsReply::Opened(Fh(2)),
            FsReply::Attr(attr),
            FsReply::Data(b"bytes".to_vec()),
            FsReply::Written(5),
            FsReply::Entries(vec![entry]),
            FsReply::Error(Errno::Enotempty),
            FsReply::Malformed("why".into()),
        ];
        for reply in replies {
            assert_eq!(FsReply::decode(&reply.encode_to_vec()), Ok(reply));
        }
    }

    #[test]
    fn a_write_of_repetitive_data_travels_compressed() {
        let command = FsCommand::Write {
            path: FsPath::new("/f").unwrap(),
            fh: Fh(1),
            offset: 0,
            data: vec![b'z'; 1024],
            time: Time::default(),
        };
        assert!(command.encode_to_vec().len() < 100);
    }

    #[test]
    fn out_of_range_fields_are_refused() {
        let mut plain = vec![tag::ACCESS];
        put_bytes(&mut plain, b"/f");
        put_varint(&mut plain, 8);
        assert!(matches!(
            FsCommand::decode_plain(&mut Reader::new(&plain)),
            Err(DecodeError::TooLarge {
                what: "access mask",
                ..
            })
        ));
        let mut plain = vec![tag::ERROR];
        put_varint(&mut plain, 1000);
        assert_eq!(
            FsReply::decode_plain(&mut Reader::new(&plain)),
            Err(DecodeError::Invalid("errno"))
        );
    }
}
