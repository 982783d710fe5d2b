//! Canonical absolute paths.
//!
//! C-G sends path commands to the group of their path's hash, so two spellings of one file
//! would land in different groups: only the canonical spelling is accepted (absolute, no empty,
//! `.` or `..` component, no trailing `/` but for the root, no NUL). NetFS has no links, so a
//! canonical path names at most one inode, and one inode has at most one path.
use std::fmt;

use logless_service::DecodeError;

/// The longest path, in bytes (Linux's `PATH_MAX`).
pub const PATH_BYTES_MAX: usize = 4096;
/// The longest name of one entry, in bytes (Linux's `NAME_MAX`).
pub const NAME_BYTES_MAX: usize = 255;

/// A canonical absolute path.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct FsPath(Vec<u8>);

impl FsPath {
    /// The root directory, `/`.
    pub fn root() -> FsPath {
        FsPath(b"/".to_vec())
    }

    /// `bytes` as a path, if it is canonical.
    pub fn new(bytes: impl Into<Vec<u8>>) -> Result<FsPath, DecodeError> {
        let bytes = bytes.into();
        if bytes.len() > PATH_BYTES_MAX {
            return Err(DecodeError::TooLarge {
                what: "path",
                size: bytes.len() as u64,
                limit: PATH_BYTES_MAX as u64,
            });
        }
        if bytes == b"/" {
            return Ok(FsPath(bytes));
        }
        let Some(rest) = bytes.strip_prefix(b"/") else {
            return Err(DecodeError::Invalid("path: not absolute"));
        };
        for name in rest.split(|&b| b == b'/') {
            check_name(name)?;
        }
        Ok(FsPath(bytes))
    }

    /// The path's bytes.
    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }

    /// The names from the root down; none for the root.
    pub fn names(&self) -> impl Iterator<Item = &[u8]> {
        self.0[1..]
            .split(|&b| b == b'/')
            .filter(|name| !name.is_empty())
    }

    /// The parent directory's path and the last name; `None` for the root.
    pub fn split_last(&self) -> Option<(FsPath, &[u8])> {
        let slash = self.0.iter().rposition(|&b| b == b'/')?;
        let name = &self.0[slash + 1..];
        if name.is_empty() {
            return None;
        }
        let parent = if slash == 0 {
            FsPath::root()
        } else {
            FsPath(self.0[..slash].to_vec())
        };
        Some((parent, name))
    }
}

fn check_name(name: &[u8]) -> Result<(), DecodeError> {
    if name.is_empty() || name == b"." || name == b".." {
        return Err(DecodeError::Invalid("path: empty, . or .. component"));
    }
    if name.len() > NAME_BYTES_MAX {
        return Err(DecodeError::TooLarge {
            what: "name",
            size: name.len() as u64,
            limit: NAME_BYTES_MAX as u64,
        });
    }
    if name.contains(&0) {
        return Err(DecodeError::Invalid("path: NUL byte"));
    }
    Ok(())
}

impl fmt::Debug for FsPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", String::from_utf8_lossy(&self.0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_canonical_paths_are_accepted() {
        for good in ["/", "/a", "/a/b", "/a b/.c"] {
            assert!(FsPath::new(good).is_ok(), "{good}");
        }
        for bad in ["", "a", "//", "/a/", "/a//b", "/./a", "/a/..", "/a\0b"] {
            assert!(FsPath::new(bad).is_err(), "{bad:?}");
        }
        assert!(FsPath::new(format!("/{}", "x".repeat(256))).is_err());
    }

    #[test]
    fn a_path_splits_into_its_parent_and_name() {
        let path = FsPath::new("/a/b").unwrap();
        let (parent, name) = path.split_last().unwrap();
        assert_eq!((parent, name), (FsPath::new("/a").unwrap(), &b"b"[..]));
        let top = FsPath::new("/a").unwrap();
        assert_eq!(top.split_last().unwrap().0, FsPath::root());
        assert!(FsPath::root().split_last().is_none());
        assert_eq!(path.names().collect::<Vec<_>>(), [&b"a"[..], b"b"]);
        assert_eq!(FsPath::root().names().count(), 0);
    }
}
