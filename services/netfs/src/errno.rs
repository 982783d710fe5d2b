//! The errors NetFS answers, with Linux's numbers so that a FUSE front end passes them through.
use thiserror::Error;

/// A file-system error, as `errno` names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Error)]
#[repr(i32)]
pub enum Errno {
    /// No such file or directory.
    #[error("ENOENT: no such file or directory")]
    Enoent = 2,
    /// The handle is not open, or not open on this path.
    #[error("EBADF: bad file handle")]
    Ebadf = 9,
    /// The mode does not allow the access asked for.
    #[error("EACCES: permission denied")]
    Eacces = 13,
    /// The root is busy (removing or renaming it).
    #[error("EBUSY: device or resource busy")]
    Ebusy = 16,
    /// The path exists.
    #[error("EEXIST: file exists")]
    Eexist = 17,
    /// A rename across directories (NetFS renames within one directory only).
    #[error("EXDEV: cross-directory rename")]
    Exdev = 18,
    /// A component of the path is not a directory.
    #[error("ENOTDIR: not a directory")]
    Enotdir = 20,
    /// The path is a directory.
    #[error("EISDIR: is a directory")]
    Eisdir = 21,
    /// An invalid argument (an access mask beyond rwx).
    #[error("EINVAL: invalid argument")]
    Einval = 22,
    /// Too many open handles ([`crate::fs::HANDLES_MAX`]).
    #[error("EMFILE: too many open files")]
    Emfile = 24,
    /// The file would grow beyond its limit.
    #[error("EFBIG: file too large")]
    Efbig = 27,
    /// The directory is full ([`crate::command::DIR_ENTRIES_MAX`]).
    #[error("ENOSPC: no space left in the directory")]
    Enospc = 28,
    /// The directory is not empty.
    #[error("ENOTEMPTY: directory not empty")]
    Enotempty = 39,
}

impl Errno {
    /// Every error, for decoding.
    const ALL: [Errno; 13] = [
        Errno::Enoent,
        Errno::Ebadf,
        Errno::Eacces,
        Errno::Ebusy,
        Errno::Eexist,
        Errno::Exdev,
        Errno::Enotdir,
        Errno::Eisdir,
        Errno::Einval,
        Errno::Emfile,
        Errno::Efbig,
        Errno::Enospc,
        Errno::Enotempty,
    ];

    /// The Linux error number.
    pub fn code(self) -> i32 {
        self as i32
    }

    /// The error of Linux error number `code`, if NetFS answers it.
    pub fn from_code(code: i32) -> Option<Errno> {
        Errno::ALL.into_iter().find(|errno| errno.code() == code)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_round_trip() {
        for errno in Errno::ALL {
            assert_eq!(Errno::from_code(errno.code()), Some(errno));
        }
        assert_eq!(Errno::from_code(0), None);
        assert_eq!(Errno::Enotempty.code(), 39);
    }
}
