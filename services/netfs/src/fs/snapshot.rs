//! NetFS's state serialised for a snapshot, and restored from one (issue 26).
//!
//! The encoding holds exactly what the digest covers, in the same order: the next inode and
//! handle numbers; each inode in number order (mode, atime, open handles, whether linked, then
//! a file's mtime and bytes or a directory's mtime and entries in name order); each handle in
//! number order (its inode and kind). Equal states give equal bytes, and a restored state has
//! the digest of the one serialised. All integers are varints, byte strings length-prefixed.
use std::collections::BTreeMap;
use std::sync::Mutex;

use logless_service::wire::{put_bytes, put_varint};
use logless_service::{DecodeError, Reader};

use super::{Content, FileBody, Handle, Inode, NetFs, FILE_BYTES_MAX, HANDLES_MAX};
use crate::command::{Fh, Ino, Kind, Mode, Time};

/// The longest directory entry name a snapshot may hold.
const NAME_BYTES_MAX: usize = 1 << 16;

impl NetFs {
    /// The file system's state, serialised (see the module docs).
    pub fn snapshot(&self) -> Vec<u8> {
        let mut out = Vec::new();
        put_varint(&mut out, self.next_ino);
        put_varint(&mut out, self.next_fh);
        put_varint(&mut out, self.inodes.len() as u64);
        for (ino, inode) in &self.inodes {
            put_varint(&mut out, ino.0);
            put_varint(&mut out, u64::from(inode.mode.0));
            put_time(&mut out, inode.atime);
            put_varint(&mut out, u64::from(inode.handles));
            out.push(u8::from(inode.linked));
            match &inode.content {
                Content::File(body) => {
                    let body = super::lock(body);
                    out.push(0);
                    put_time(&mut out, body.mtime);
                    put_bytes(&mut out, &body.data);
                }
                Content::Directory { entries, mtime } => {
                    out.push(1);
                    put_time(&mut out, *mtime);
                    put_varint(&mut out, entries.len() as u64);
                    for (name, child) in entries {
                        put_bytes(&mut out, name);
                        put_varint(&mut out, child.0);
                    }
                }
            }
        }
        put_varint(&mut out, self.handles.len() as u64);
        for (fh, handle) in &self.handles {
            put_varint(&mut out, fh.0);
            put_varint(&mut out, handle.ino.0);
            out.push(u8::from(handle.kind == Kind::Directory));
        }
        out
    }

    /// Replaces the state with a [`NetFs::snapshot`]'s; C-G keeps its configuration. Bytes
    /// that are not a snapshot are refused and the state is left as it was: cut short or
    /// followed by more bytes, numbers out of order or repeated, no root directory, an entry or
    /// a handle naming an inode that is not there (or a handle of the wrong kind), a number at
    /// or past the next one to hand out, a file over [`FILE_BYTES_MAX`].
    pub fn restore(&mut self, snapshot: &[u8]) -> Result<(), DecodeError> {
        let mut reader = Reader::new(snapshot);
        let next_ino = reader.varint()?;
        let next_fh = reader.varint()?;
        let mut inodes = BTreeMap::new();
        for _ in 0..reader.varint()? {
            let ino = Ino(reader.varint()?);
            if ino.0 >= next_ino || inodes.keys().next_back().is_some_and(|last| *last >= ino) {
                return Err(DecodeError::Invalid("snapshot inode number"));
            }
            let mode = u32::try_from(reader.varint()?)
                .ok()
                .filter(|mode| mode & !Mode::MASK == 0)
                .ok_or(DecodeError::Invalid("snapshot mode"))?;
            let atime = time(&mut reader)?;
            let handles = u32::try_from(reader.varint()?)
                .map_err(|_| DecodeError::Invalid("snapshot handle count"))?;
            let linked = reader.flag()?;
            let content = if reader.flag()? {
                let mtime = time(&mut reader)?;
                let mut entries = BTreeMap::new();
                for _ in 0..reader.varint()? {
                    let name = reader.bytes("entry name", NAME_BYTES_MAX)?.to_vec();
                    let child = Ino(reader.varint()?);
                    if entries.keys().next_back().is_some_and(|last| *last >= name) {
                        return Err(DecodeError::Invalid("snapshot entries out of order"));
                    }
                    entries.insert(name, child);
                }
                Content::Directory { entries, mtime }
            } else {
                let mtime = time(&mut reader)?;
                let data = reader.bytes("file", FILE_BYTES_MAX as usize)?.to_vec();
                Content::File(Mutex::new(FileBody { data, mtime }))
            };
            let inode = Inode {
                content,
                mode: Mode(mode),
                atime,
                handles,
                linked,
            };
            inodes.insert(ino, inode);
        }
        let mut handles = BTreeMap::new();
        let count = reader.varint_at_most("snapshot handles", HANDLES_MAX as u64)?;
        for _ in 0..count {
            let fh = Fh(reader.varint()?);
            if fh.0 >= next_fh || handles.keys().next_back().is_some_and(|last| *last >= fh) {
                return Err(DecodeError::Invalid("snapshot handle number"));
            }
            let ino = Ino(reader.varint()?);
            let kind = if reader.flag()? {
                Kind::Directory
            } else {
                Kind::File
            };
            if inodes.get(&ino).map(Inode::kind) != Some(kind) {
                return Err(DecodeError::Invalid("snapshot handle's inode"));
            }
            handles.insert(fh, Handle { ino, kind });
        }
        reader.finish()?;
        if inodes.get(&Ino::ROOT).map(Inode::kind) != Some(Kind::Directory) {
            return Err(DecodeError::Invalid("snapshot root"));
        }
        let dangling = inodes.values().any(|inode| match &inode.content {
            Content::Directory { entries, .. } => {
                entries.values().any(|child| !inodes.contains_key(child))
            }
            Content::File(_) => false,
        });
        if dangling {
            return Err(DecodeError::Invalid("snapshot entry's inode"));
        }
        self.inodes = inodes;
        self.handles = handles;
        self.next_ino = next_ino;
        self.next_fh = next_fh;
        Ok(())
    }
}

fn put_time(out: &mut Vec<u8>, time: Time) {
    put_varint(out, time.secs);
    put_varint(out, u64::from(time.nanos));
}

fn time(reader: &mut Reader<'_>) -> Result<Time, DecodeError> {
    let secs = reader.varint()?;
    let nanos = u32::try_from(reader.varint()?)
        .ok()
        .filter(|nanos| *nanos < 1_000_000_000)
        .ok_or(DecodeError::Invalid("snapshot time"))?;
    Ok(Time { secs, nanos })
}
