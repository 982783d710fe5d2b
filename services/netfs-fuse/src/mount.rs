//! Mounting a [`NetFsFuse`] on a directory, and unmounting it when done.
use std::io;
use std::path::{Path, PathBuf};

use fuser::{BackgroundSession, Config, MountOption};
use logless_netfs::Transport;
use thiserror::Error;

use crate::filesystem::NetFsFuse;

/// Why a mount or an unmount failed.
#[derive(Debug, Error)]
pub enum MountError {
    /// The mount point is not a directory (or cannot be looked at).
    #[error("mount point {}: {source}", dir.display())]
    MountPoint {
        /// The mount point.
        dir: PathBuf,
        /// Why.
        source: io::Error,
    },
    /// The kernel refused the mount (no /dev/fuse, not root and no fusermount3, ...).
    #[error("mounting NetFS on {} failed: {source} (FUSE needs /dev/fuse, and root or the fusermount3 helper)", dir.display())]
    Mount {
        /// The mount point.
        dir: PathBuf,
        /// Why.
        source: io::Error,
    },
    /// The unmount failed, even detached.
    #[error("unmounting {} failed: {source}", dir.display())]
    Unmount {
        /// The mount point.
        dir: PathBuf,
        /// Why.
        source: io::Error,
    },
}

/// How an unmount went.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unmounted {
    /// Unmounted and the FUSE session ended.
    Clean,
    /// The mount was busy (a file open or a shell inside it) and was detached: it is gone
    /// from the directory tree, and what still uses it fails once this process exits.
    Detached,
}

/// A mounted NetFS: unmounted by [`Mounted::unmount`], or when dropped.
pub struct Mounted {
    session: Option<BackgroundSession>,
    dir: PathBuf,
}

/// Mounts `filesystem` on the directory `dir`, serving it on a thread of its own.
pub fn mount<T: Transport + Send + 'static>(
    filesystem: NetFsFuse<T>,
    dir: &Path,
) -> Result<Mounted, MountError> {
    let mount_point_error = |source| MountError::MountPoint {
        dir: dir.to_path_buf(),
        source,
    };
    let canonical = dir.canonicalize().map_err(mount_point_error)?;
    if !canonical.is_dir() {
        let source = io::Error::new(io::ErrorKind::NotADirectory, "not a directory");
        return Err(mount_point_error(source));
    }
    let mut config = Config::default();
    config.mount_options = vec![
        MountOption::FSName("logless-netfs".into()),
        MountOption::Subtype("logless".into()),
        // The kernel checks permission bits itself (NetFS keeps them; it has no owners).
        MountOption::DefaultPermissions,
        // NetFS's reads leave atime alone.
        MountOption::NoAtime,
    ];
    let session = fuser::spawn_mount(filesystem, &canonical, &config).map_err(|source| {
        MountError::Mount {
            dir: canonical.clone(),
            source,
        }
    })?;
    Ok(Mounted {
        session: Some(session),
        dir: canonical,
    })
}

impl Mounted {
    /// The mount point.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Whether the file system is still served: false once something else unmounted it
    /// (`umount DIR`, `fusermount3 -u DIR`).
    pub fn is_serving(&self) -> bool {
        self.session
            .as_ref()
            .is_some_and(|session| !session.guard.is_finished())
    }

    /// Unmounts: cleanly if nothing uses the mount, else detached ([`Unmounted::Detached`]).
    pub fn unmount(mut self) -> Result<Unmounted, MountError> {
        self.unmount_now()
    }

    fn unmount_now(&mut self) -> Result<Unmounted, MountError> {
        let Some(session) = self.session.take() else {
            return Ok(Unmounted::Clean);
        };
        if session.guard.is_finished() {
            // Unmounted from outside: the session already ended.
            let _ = session.join();
            return Ok(Unmounted::Clean);
        }
        match session.umount_and_join() {
            Ok(()) => Ok(Unmounted::Clean),
            Err(error) if error.raw_os_error() == Some(libc::EBUSY) => {
                // The session's thread is left to serve what still uses the mount until
                // the process exits.
                nix::mount::umount2(&self.dir, nix::mount::MntFlags::MNT_DETACH).map_err(
                    |errno| MountError::Unmount {
                        dir: self.dir.clone(),
                        source: errno.into(),
                    },
                )?;
                Ok(Unmounted::Detached)
            }
            Err(source) => Err(MountError::Unmount {
                dir: self.dir.clone(),
                source,
            }),
        }
    }
}

impl Drop for Mounted {
    fn drop(&mut self) {
        if let Err(error) = self.unmount_now() {
            tracing::warn!("{error}");
        }
    }
}
