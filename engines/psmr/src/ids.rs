//! Workers and groups.
//!
//! A replica runs `k` worker threads `t_0 … t_{k-1}` (seed 004 numbers them from 1; here they
//! count from 0). Worker `i` belongs to its own group `g_i` and to `g_all`, the group every
//! worker belongs to; each group is one ordered stream (one Multi-Paxos log).
use std::fmt;

/// A worker thread of a replica, `0..k`.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct WorkerId(pub u16);

impl fmt::Debug for WorkerId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "t{}", self.0)
    }
}

/// A multicast group: one worker's own, or the one all workers share.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Group {
    /// `g_i`: delivered by worker `i` alone.
    Worker(WorkerId),
    /// `g_all`: delivered by every worker.
    All,
}

impl Group {
    /// The group's index among the `workers + 1` streams: `g_i` is `i`, `g_all` is `workers`.
    /// It places the group's leader (see [`crate::groups`]) and breaks ties in the merge
    /// (see [`crate::merge`]); `Ord` on groups gives the same order.
    ///
    /// # Panics
    /// If a worker's group names a worker at or beyond `workers`.
    pub fn index(self, workers: u16) -> usize {
        match self {
            Group::Worker(WorkerId(i)) => {
                assert!(i < workers, "worker {i} of {workers}");
                usize::from(i)
            }
            Group::All => usize::from(workers),
        }
    }

    /// The group of index `index` among the `workers + 1` streams, if there is one.
    pub fn from_index(index: usize, workers: u16) -> Option<Group> {
        let index = u16::try_from(index).ok()?;
        match index.cmp(&workers) {
            std::cmp::Ordering::Less => Some(Group::Worker(WorkerId(index))),
            std::cmp::Ordering::Equal => Some(Group::All),
            std::cmp::Ordering::Greater => None,
        }
    }

    /// Every group of a replica with `workers` workers, in index order.
    pub fn all(workers: u16) -> impl Iterator<Item = Group> {
        (0..workers)
            .map(|i| Group::Worker(WorkerId(i)))
            .chain(std::iter::once(Group::All))
    }
}

impl fmt::Debug for Group {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Group::Worker(WorkerId(i)) => write!(f, "g{i}"),
            Group::All => write!(f, "g_all"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_are_indexed_workers_first_then_all() {
        let groups: Vec<Group> = Group::all(2).collect();
        assert_eq!(
            groups,
            [
                Group::Worker(WorkerId(0)),
                Group::Worker(WorkerId(1)),
                Group::All
            ]
        );
        for (index, group) in groups.iter().enumerate() {
            assert_eq!(group.index(2), index);
            assert_eq!(Group::from_index(index, 2), Some(*group));
        }
        assert_eq!(Group::from_index(3, 2), None);
        assert!(Group::Worker(WorkerId(1)) < Group::All);
    }
}
