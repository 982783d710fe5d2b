//! NetFS, the networked file system of P-SMR (seed 004 §V-B), as a deterministic state machine.
//!
//! [`NetFs`] keeps a file system in memory and executes a subset of FUSE's calls on it
//! ([`FsCommand`]): enough to create, write, read, list, rename and remove files and
//! directories. Every call names a complete path; there are no hard or symbolic links. Requests
//! and replies travel as lz4-compressed frames ([`frame`]); [`client::Client`] drives NetFS
//! without FUSE, in process or, through [`remote::RedisTransport`], replicated. The C-G and the argument that
//! dependent calls share a group are in [`fs`].
pub mod client;
pub mod command;
pub mod errno;
pub mod frame;
pub mod fs;
pub mod path;
pub mod remote;
pub mod workload;

pub use client::{CallError, Client, Transport};
pub use command::{Attr, DirEntry, Fh, FsCommand, FsReply, Ino, Kind, Mode, Time};
pub use errno::Errno;
pub use fs::NetFs;
pub use path::FsPath;
