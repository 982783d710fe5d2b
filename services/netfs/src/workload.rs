//! A small workload (create, write, read back, rename within a directory, unlink, mkdir,
//! readdir, and the errors of misuse) that runs through the direct client on a NetFS, in
//! process or replicated, and through `std::fs` on a local directory, step by step: every step
//! must give the same result on both sides, errors by their errno. For tests.
use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use crate::client::{CallError, Client, Transport};
use crate::command::{Fh, Kind, Mode, Time};
use crate::path::FsPath;

/// What a step shows, on either side.
#[allow(missing_docs)]
#[derive(Debug, PartialEq, Eq)]
pub enum Seen {
    Done,
    Bytes(Vec<u8>),
    Written(u64),
    Stat { size: u64, directory: bool },
    Names(Vec<String>),
}

/// One call of the workload; handles live in numbered slots.
#[allow(missing_docs)]
#[derive(Clone, Copy, Debug)]
pub enum Step {
    Mkdir(&'static str),
    Create(&'static str, usize),
    Mknod(&'static str),
    Open(&'static str, bool, usize),
    Write(&'static str, usize, u64, &'static [u8]),
    Read(&'static str, usize, u64, u64),
    Release(usize),
    Lstat(&'static str),
    Exists(&'static str),
    Readdir(&'static str),
    Rename(&'static str, &'static str),
    Unlink(&'static str),
    Rmdir(&'static str),
}

/// The workload: every call NetFS serves, and the errors of misuse.
pub const WORKLOAD: &[Step] = &[
    Step::Mkdir("/d"),
    Step::Mkdir("/d"),
    Step::Create("/d/a", 0),
    Step::Create("/d/a", 1),
    Step::Write("/d/a", 0, 0, b"hello world"),
    Step::Write("/d/a", 0, 20, b"XYZ"),
    Step::Write("/d/a", 0, 6, b"there"),
    Step::Read("/d/a", 0, 0, 100),
    Step::Read("/d/a", 0, 18, 3),
    Step::Read("/d/a", 0, 50, 10),
    Step::Lstat("/d/a"),
    Step::Release(0),
    Step::Rename("/d/a", "/d/b"),
    Step::Readdir("/d"),
    Step::Lstat("/d/a"),
    Step::Open("/d/a", false, 2),
    Step::Open("/d/b", false, 2),
    Step::Read("/d/b", 2, 0, 5),
    Step::Release(2),
    Step::Open("/d/b", true, 3),
    Step::Lstat("/d/b"),
    Step::Write("/d/b", 3, 0, b"again"),
    Step::Release(3),
    Step::Mkdir("/d/sub"),
    Step::Mknod("/d/sub/x"),
    Step::Mknod("/d/sub/x"),
    Step::Lstat("/d/sub"),
    Step::Rmdir("/d/sub"),
    Step::Unlink("/d/sub"),
    Step::Rmdir("/d/b"),
    Step::Mkdir("/d/b/x"),
    Step::Lstat("/d/b/x"),
    Step::Rename("/d/b", "/d/sub"),
    Step::Rename("/d/sub", "/d/b"),
    Step::Mknod("/d/e"),
    Step::Rename("/d/e", "/d/b"),
    Step::Readdir("/d"),
    Step::Open("/d/b", false, 4),
    Step::Read("/d/b", 4, 0, 10),
    Step::Release(4),
    Step::Rename("/d/sub", "/d/c"),
    Step::Readdir("/d/c"),
    Step::Open("/d/c", false, 5),
    Step::Readdir("/d/b"),
    Step::Unlink("/d/c/x"),
    Step::Rmdir("/d/c"),
    Step::Unlink("/d/b"),
    Step::Unlink("/d/b"),
    Step::Exists("/d/b"),
    Step::Exists("/d"),
    Step::Readdir("/d"),
    Step::Rmdir("/d"),
    Step::Readdir("/"),
];

/// NetFS through its client.
struct Remote<T> {
    client: Client<T>,
    handles: [Option<Fh>; 8],
    clock: u64,
}

fn path(text: &str) -> FsPath {
    FsPath::new(text).expect("the workload's paths are canonical")
}

fn errno(error: CallError) -> i32 {
    match error {
        CallError::Fs(errno) => errno.code(),
        other => panic!("not a file-system error: {other}"),
    }
}

impl<T: Transport> Remote<T> {
    fn now(&mut self) -> Time {
        self.clock += 1;
        Time {
            secs: self.clock,
            nanos: 0,
        }
    }

    fn run(&mut self, step: Step) -> Result<Seen, i32> {
        let mode = Mode(0o644);
        let time = self.now();
        let client = &mut self.client;
        let result = match step {
            Step::Mkdir(p) => client
                .mkdir(&path(p), Mode(0o755), time)
                .map(|()| Seen::Done),
            Step::Create(p, slot) => client.create(&path(p), mode, time).map(|fh| {
                self.handles[slot] = Some(fh);
                Seen::Done
            }),
            Step::Mknod(p) => client.mknod(&path(p), mode, time).map(|()| Seen::Done),
            Step::Open(p, truncate, slot) => client.open(&path(p), truncate, time).map(|fh| {
                self.handles[slot] = Some(fh);
                Seen::Done
            }),
            Step::Write(p, slot, offset, data) => {
                let fh = self.handles[slot].expect("an open slot");
                client
                    .write(&path(p), fh, offset, data, time)
                    .map(Seen::Written)
            }
            Step::Read(p, slot, offset, size) => {
                let fh = self.handles[slot].expect("an open slot");
                client.read(&path(p), fh, offset, size).map(Seen::Bytes)
            }
            Step::Release(slot) => {
                let fh = self.handles[slot].take().expect("an open slot");
                client.release(fh).map(|()| Seen::Done)
            }
            Step::Lstat(p) => client.lstat(&path(p)).map(|attr| Seen::Stat {
                size: if attr.kind == Kind::File {
                    attr.size
                } else {
                    0
                },
                directory: attr.kind == Kind::Directory,
            }),
            Step::Exists(p) => client.access(&path(p), 0).map(|()| Seen::Done),
            Step::Readdir(p) => client.readdir(&path(p)).map(|entries| {
                Seen::Names(
                    entries
                        .into_iter()
                        .map(|entry| String::from_utf8(entry.name).expect("ASCII names"))
                        .collect(),
                )
            }),
            Step::Rename(from, to) => client.rename(&path(from), &path(to)).map(|()| Seen::Done),
            Step::Unlink(p) => client.unlink(&path(p)).map(|()| Seen::Done),
            Step::Rmdir(p) => client.rmdir(&path(p)).map(|()| Seen::Done),
        };
        result.map_err(errno)
    }
}

/// The same calls on a real directory.
struct Local {
    root: PathBuf,
    files: [Option<File>; 8],
}

impl Local {
    fn at(&self, p: &str) -> PathBuf {
        self.root.join(p.trim_start_matches('/'))
    }

    fn run(&mut self, step: Step) -> Result<Seen, i32> {
        self.try_run(step).map_err(|error| {
            error
                .raw_os_error()
                .unwrap_or_else(|| panic!("{step:?}: {error}"))
        })
    }

    fn try_run(&mut self, step: Step) -> io::Result<Seen> {
        Ok(match step {
            Step::Mkdir(p) => std::fs::create_dir(self.at(p)).map(|()| Seen::Done)?,
            Step::Create(p, slot) => {
                self.files[slot] = Some(create_new(&self.at(p))?);
                Seen::Done
            }
            Step::Mknod(p) => create_new(&self.at(p)).map(|_| Seen::Done)?,
            Step::Open(p, truncate, slot) => {
                let file = OpenOptions::new()
                    .read(true)
                    .write(true)
                    .truncate(truncate)
                    .open(self.at(p))?;
                self.files[slot] = Some(file);
                Seen::Done
            }
            Step::Write(_, slot, offset, data) => {
                let file = self.files[slot].as_ref().expect("an open slot");
                file.write_all_at(data, offset)?;
                Seen::Written(data.len() as u64)
            }
            Step::Read(_, slot, offset, size) => {
                let file = self.files[slot].as_ref().expect("an open slot");
                let mut buffer = vec![0; size as usize];
                let read = file.read_at(&mut buffer, offset)?;
                buffer.truncate(read);
                Seen::Bytes(buffer)
            }
            Step::Release(slot) => {
                self.files[slot].take().expect("an open slot");
                Seen::Done
            }
            Step::Lstat(p) => {
                let metadata = std::fs::symlink_metadata(self.at(p))?;
                Seen::Stat {
                    size: if metadata.is_dir() { 0 } else { metadata.len() },
                    directory: metadata.is_dir(),
                }
            }
            Step::Exists(p) => std::fs::symlink_metadata(self.at(p)).map(|_| Seen::Done)?,
            Step::Readdir(p) => {
                let mut names = std::fs::read_dir(self.at(p))?
                    .map(|entry| Ok(entry?.file_name().into_string().expect("ASCII names")))
                    .collect::<io::Result<Vec<_>>>()?;
                names.sort();
                Seen::Names(names)
            }
            Step::Rename(from, to) => {
                std::fs::rename(self.at(from), self.at(to)).map(|()| Seen::Done)?
            }
            Step::Unlink(p) => std::fs::remove_file(self.at(p)).map(|()| Seen::Done)?,
            Step::Rmdir(p) => std::fs::remove_dir(self.at(p)).map(|()| Seen::Done)?,
        })
    }
}

fn create_new(path: &Path) -> io::Result<File> {
    OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .open(path)
}

/// The workload running side by side on a NetFS and on a local directory.
pub struct Comparison<T> {
    remote: Remote<T>,
    local: Local,
    next: usize,
    errors: usize,
}

impl<T: Transport> Comparison<T> {
    /// The workload, not started, on `client`'s NetFS (empty) and in `root` (an empty
    /// directory).
    pub fn new(client: Client<T>, root: &Path) -> Comparison<T> {
        Comparison {
            remote: Remote {
                client,
                handles: [None; 8],
                clock: 0,
            },
            local: Local {
                root: root.to_path_buf(),
                files: Default::default(),
            },
            next: 0,
            errors: 0,
        }
    }

    /// Sends the next steps through `transport` (another replica of the same NetFS, say).
    pub fn set_transport(&mut self, transport: T) {
        *self.remote.client.transport_mut() = transport;
    }

    /// Runs the next `steps` steps (at most what is left) on both sides.
    ///
    /// # Panics
    /// If a step gives different results on the two sides, or the client fails other than
    /// with a file-system error.
    pub fn run(&mut self, steps: usize) {
        let end = (self.next + steps).min(WORKLOAD.len());
        for (index, &step) in WORKLOAD.iter().enumerate().take(end).skip(self.next) {
            let want = self.local.run(step);
            let got = self.remote.run(step);
            assert_eq!(got, want, "step {index}: {step:?}");
            self.errors += usize::from(want.is_err());
        }
        self.next = end;
    }

    /// Runs every step left; gives how many steps were errors on both sides.
    pub fn finish(mut self) -> (Client<T>, usize) {
        self.run(WORKLOAD.len());
        (self.remote.client, self.errors)
    }
}
