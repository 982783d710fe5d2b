//! A FUSE front end of NetFS (seed 004 §V-B): [`NetFsFuse`] implements fuser's `Filesystem`
//! on NetFS's direct client, so it serves any [`logless_netfs::Transport`]: a NetFS in the
//! same process now, a replicated one reached over the network later. [`mount()`] mounts it
//! and unmounts it when its guard is dropped.
//!
//! fuser is built without libfuse: as root it mounts with the mount(2) system call, otherwise
//! through the `fusermount3` helper (Debian's `fuse3`).
pub mod convert;
pub mod filesystem;
pub mod inodes;
pub mod mount;

pub use convert::Owner;
pub use filesystem::NetFsFuse;
pub use mount::{mount, MountError, Mounted, Unmounted};
