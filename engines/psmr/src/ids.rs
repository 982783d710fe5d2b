//! The groups as the engine's streams.
//!
//! Workers and groups are the service interface's ([`logless_service::WorkerId`],
//! [`logless_service::Group`]): a replica runs `k` worker threads `t_0 … t_{k-1}`, worker `i`
//! delivers its own group `g_i` and `g_all`. What only the engine needs is where each group sits
//! among the replica's `k + 1` streams (one Multi-Paxos log each): [`GroupIndex`].
use logless_service::{Group, WorkerId};

/// A group's place among the `workers + 1` streams of a replica with `workers` workers: `g_i` is
/// stream `i`, `g_all` is stream `workers`. The index places the group's leader (see
/// [`crate::config::Config::group_config`]) and breaks ties in the merge (see [`crate::merge`]);
/// `Ord` on groups gives the same order.
pub trait GroupIndex: Sized {
    /// The group's stream index.
    ///
    /// # Panics
    /// If a worker's group names a worker at or beyond `workers`.
    fn index(self, workers: u16) -> usize;

    /// The group of stream `index`, if there is one.
    fn from_index(index: usize, workers: u16) -> Option<Self>;

    /// Every group of a replica with `workers` workers, in index order.
    fn all(workers: u16) -> impl Iterator<Item = Self>;
}

impl GroupIndex for Group {
    fn index(self, workers: u16) -> usize {
        match self {
            Group::Worker(WorkerId(i)) => {
                assert!(i < workers, "worker {i} of {workers}");
                usize::from(i)
            }
            Group::All => usize::from(workers),
        }
    }

    fn from_index(index: usize, workers: u16) -> Option<Group> {
        let index = u16::try_from(index).ok()?;
        match index.cmp(&workers) {
            std::cmp::Ordering::Less => Some(Group::Worker(WorkerId(index))),
            std::cmp::Ordering::Equal => Some(Group::All),
            std::cmp::Ordering::Greater => None,
        }
    }

    fn all(workers: u16) -> impl Iterator<Item = Group> {
        (0..workers)
            .map(|i| Group::Worker(WorkerId(i)))
            .chain(std::iter::once(Group::All))
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
