//! A direct client of NetFS: typed calls that encode a request, send it through a
//! [`Transport`] and decode the reply. A FUSE front end and the tests drive NetFS through it;
//! [`NetFs`] itself is the in-process transport (it executes the request on the spot);
//! [`crate::remote::RedisTransport`] carries requests to a replicated NetFS.
use logless_service::{DecodeError, Service, Wire};
use thiserror::Error;

use crate::command::{Attr, DirEntry, Fh, FsCommand, FsReply, Mode, Time};
use crate::errno::Errno;
use crate::fs::NetFs;
use crate::path::FsPath;

/// Carries an encoded request to a NetFS and brings back its encoded reply.
pub trait Transport {
    /// Executes `request` and gives the reply's bytes, or why the request or its reply was
    /// lost on the way (the request may or may not have been executed).
    fn call(&mut self, request: &[u8]) -> Result<Vec<u8>, String>;
}

impl Transport for NetFs {
    fn call(&mut self, request: &[u8]) -> Result<Vec<u8>, String> {
        Ok(self.execute_encoded(request))
    }
}

/// Why a call failed.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum CallError {
    /// The file system answered an error.
    #[error(transparent)]
    Fs(#[from] Errno),
    /// The file system could not decode the request.
    #[error("request refused as malformed: {0}")]
    Malformed(String),
    /// The reply did not decode.
    #[error("undecodable reply: {0}")]
    Reply(#[from] DecodeError),
    /// The transport lost the request or its reply (the call may or may not have happened).
    #[error("transport: {0}")]
    Transport(String),
    /// The reply does not fit the call (a protocol bug).
    #[error("unexpected reply {0:?}")]
    Unexpected(Box<FsReply>),
}

/// A typed NetFS client over a transport.
pub struct Client<T> {
    transport: T,
}

impl<T: Transport> Client<T> {
    /// A client that sends its calls through `transport`.
    pub fn new(transport: T) -> Client<T> {
        Client { transport }
    }

    /// The transport.
    pub fn transport(&self) -> &T {
        &self.transport
    }

    /// The transport, to change.
    pub fn transport_mut(&mut self) -> &mut T {
        &mut self.transport
    }

    /// Sends `command` and gives the reply, with errors split out.
    pub fn call(&mut self, command: &FsCommand) -> Result<FsReply, CallError> {
        let reply =
            (self.transport.call(&command.encode_to_vec())).map_err(CallError::Transport)?;
        let reply = FsReply::decode(&reply)?;
        match reply {
            FsReply::Error(errno) => Err(CallError::Fs(errno)),
            FsReply::Malformed(message) => Err(CallError::Malformed(message)),
            reply => Ok(reply),
        }
    }

    fn done(&mut self, command: &FsCommand) -> Result<(), CallError> {
        match self.call(command)? {
            FsReply::Done => Ok(()),
            reply => Err(CallError::Unexpected(Box::new(reply))),
        }
    }

    fn opened(&mut self, command: &FsCommand) -> Result<Fh, CallError> {
        match self.call(command)? {
            FsReply::Opened(fh) => Ok(fh),
            reply => Err(CallError::Unexpected(Box::new(reply))),
        }
    }

    /// Creates and opens a file.
    pub fn create(&mut self, path: &FsPath, mode: Mode, time: Time) -> Result<Fh, CallError> {
        let path = path.clone();
        self.opened(&FsCommand::Create { path, mode, time })
    }

    /// Creates a file.
    pub fn mknod(&mut self, path: &FsPath, mode: Mode, time: Time) -> Result<(), CallError> {
        let path = path.clone();
        self.done(&FsCommand::Mknod { path, mode, time })
    }

    /// Creates a directory.
    pub fn mkdir(&mut self, path: &FsPath, mode: Mode, time: Time) -> Result<(), CallError> {
        let path = path.clone();
        self.done(&FsCommand::Mkdir { path, mode, time })
    }

    /// Removes a file.
    pub fn unlink(&mut self, path: &FsPath) -> Result<(), CallError> {
        self.done(&FsCommand::Unlink { path: path.clone() })
    }

    /// Removes an empty directory.
    pub fn rmdir(&mut self, path: &FsPath) -> Result<(), CallError> {
        self.done(&FsCommand::Rmdir { path: path.clone() })
    }

    /// Opens a file, emptying it if `truncate`.
    pub fn open(&mut self, path: &FsPath, truncate: bool, time: Time) -> Result<Fh, CallError> {
        let path = path.clone();
        self.opened(&FsCommand::Open {
            path,
            truncate,
            time,
        })
    }

    /// Closes a file handle.
    pub fn release(&mut self, fh: Fh) -> Result<(), CallError> {
        self.done(&FsCommand::Release { fh })
    }

    /// Opens a directory.
    pub fn opendir(&mut self, path: &FsPath) -> Result<Fh, CallError> {
        self.opened(&FsCommand::Opendir { path: path.clone() })
    }

    /// Closes a directory handle.
    pub fn releasedir(&mut self, fh: Fh) -> Result<(), CallError> {
        self.done(&FsCommand::Releasedir { fh })
    }

    /// Sets access and modification times.
    pub fn utimens(&mut self, path: &FsPath, atime: Time, mtime: Time) -> Result<(), CallError> {
        let path = path.clone();
        self.done(&FsCommand::Utimens { path, atime, mtime })
    }

    /// Checks access (`mask` of `R_OK`, `W_OK`, `X_OK`, or `F_OK`).
    pub fn access(&mut self, path: &FsPath, mask: u32) -> Result<(), CallError> {
        let path = path.clone();
        self.done(&FsCommand::Access { path, mask })
    }

    /// The attributes of a path.
    pub fn lstat(&mut self, path: &FsPath) -> Result<Attr, CallError> {
        match self.call(&FsCommand::Lstat { path: path.clone() })? {
            FsReply::Attr(attr) => Ok(attr),
            reply => Err(CallError::Unexpected(Box::new(reply))),
        }
    }

    /// Reads up to `size` bytes at `offset`.
    pub fn read(
        &mut self,
        path: &FsPath,
        fh: Fh,
        offset: u64,
        size: u64,
    ) -> Result<Vec<u8>, CallError> {
        let path = path.clone();
        match self.call(&FsCommand::Read {
            path,
            fh,
            offset,
            size,
        })? {
            FsReply::Data(data) => Ok(data),
            reply => Err(CallError::Unexpected(Box::new(reply))),
        }
    }

    /// Writes `data` at `offset` and gives the bytes written.
    pub fn write(
        &mut self,
        path: &FsPath,
        fh: Fh,
        offset: u64,
        data: &[u8],
        time: Time,
    ) -> Result<u64, CallError> {
        let command = FsCommand::Write {
            path: path.clone(),
            fh,
            offset,
            data: data.to_vec(),
            time,
        };
        match self.call(&command)? {
            FsReply::Written(bytes) => Ok(bytes),
            reply => Err(CallError::Unexpected(Box::new(reply))),
        }
    }

    /// The entries of a directory, by name.
    pub fn readdir(&mut self, path: &FsPath) -> Result<Vec<DirEntry>, CallError> {
        match self.call(&FsCommand::Readdir { path: path.clone() })? {
            FsReply::Entries(entries) => Ok(entries),
            reply => Err(CallError::Unexpected(Box::new(reply))),
        }
    }

    /// Renames within one directory.
    pub fn rename(&mut self, from: &FsPath, to: &FsPath) -> Result<(), CallError> {
        let (from, to) = (from.clone(), to.clone());
        self.done(&FsCommand::Rename { from, to })
    }
}
