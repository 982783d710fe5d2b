//! Which path each inode number is known by.
//!
//! FUSE names files by inode number; NetFS calls name them by canonical path (its C-G hashes
//! the path). The kernel learns an inode number only from a reply that also said its path
//! (`lookup`, `create`, `mkdir`, `mknod`, `readdir`), so the front end records the path then,
//! moves it on `rename` and drops it on `unlink` and `rmdir`. NetFS never reuses an inode
//! number, so a recorded path is at worst out of date (another client of a shared NetFS moved
//! the file), which the front end notices because `lstat` then answers another inode.
use std::collections::HashMap;

use logless_netfs::{FsPath, Ino};

/// The path of every inode the kernel knows.
#[derive(Debug)]
pub struct InodePaths {
    paths: HashMap<Ino, FsPath>,
}

impl Default for InodePaths {
    fn default() -> Self {
        InodePaths::new()
    }
}

impl InodePaths {
    /// A table that knows the root.
    pub fn new() -> InodePaths {
        InodePaths {
            paths: HashMap::from([(Ino::ROOT, FsPath::root())]),
        }
    }

    /// The path `ino` is known by.
    pub fn path(&self, ino: Ino) -> Option<&FsPath> {
        self.paths.get(&ino)
    }

    /// Records that `ino` is at `path`.
    pub fn insert(&mut self, ino: Ino, path: FsPath) {
        self.paths.insert(ino, path);
    }

    /// Forgets the inode at `path` (removed, or replaced by a rename).
    pub fn remove_path(&mut self, path: &FsPath) {
        self.paths.retain(|_, known| known != path);
    }

    /// Moves `from` and every path below it to `to` (a rename), forgetting what `to` named.
    /// A scan of the table: renames are rare next to reads and writes.
    pub fn rename(&mut self, from: &FsPath, to: &FsPath) {
        self.remove_path(to);
        let from = from.as_bytes();
        for path in self.paths.values_mut() {
            let bytes = path.as_bytes();
            let below = bytes.len() > from.len() && bytes[from.len()] == b'/';
            if bytes == from || (below && bytes.starts_with(from)) {
                let mut moved = to.as_bytes().to_vec();
                moved.extend_from_slice(&bytes[from.len()..]);
                *path = FsPath::new(moved).expect("a canonical path below a canonical path");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(path: &str) -> FsPath {
        FsPath::new(path).unwrap()
    }

    #[test]
    fn a_rename_moves_the_inode_and_everything_below_it() {
        let mut table = InodePaths::new();
        table.insert(Ino(2), at("/d"));
        table.insert(Ino(3), at("/d/f"));
        table.insert(Ino(4), at("/dx"));
        table.insert(Ino(5), at("/e"));
        table.rename(&at("/d"), &at("/e"));
        assert_eq!(table.path(Ino(2)), Some(&at("/e")));
        assert_eq!(table.path(Ino(3)), Some(&at("/e/f")));
        assert_eq!(
            table.path(Ino(4)),
            Some(&at("/dx")),
            "a sibling sharing a prefix stays"
        );
        assert_eq!(table.path(Ino(5)), None, "the replaced target is forgotten");
        assert_eq!(table.path(Ino::ROOT), Some(&FsPath::root()));
    }

    #[test]
    fn a_removed_path_is_forgotten() {
        let mut table = InodePaths::new();
        table.insert(Ino(2), at("/f"));
        table.remove_path(&at("/f"));
        assert_eq!(table.path(Ino(2)), None);
    }
}
