//! The deterministic merge of ordered streams into one delivery sequence.
//!
//! Worker `i` delivers two streams, its own group `g_i` and `g_all`; every replica must deliver
//! them to worker `i` in the same order, whatever order the two logs' decisions reach it in
//! (seed 004 §VI-A, after Aguilera and Strom's deterministic merge).
//!
//! # The order
//! Every delivered batch has an *execution stamp* ([`DeliveredBatch::stamp_ms`]): its
//! leader's clock, raised to the highest stamp before it in its log. Stamps never go down along
//! one stream, and every replica computes the same stamps from the same decided log. The merge
//! delivers batches in the order of the key `(stamp, group index, instance)`: the lower stamp
//! first, on equal stamps the worker's own group before `g_all`, and within a group log order.
//! This key is a total order on all batches of all groups, a function of the decided logs
//! alone, so:
//!
//! * **Determinism.** Every replica's worker `i` delivers exactly the batches of `g_i` and
//!   `g_all` sorted by the key, whatever the arrival order. To deliver a batch the merge must
//!   know no batch with a lower key can still arrive: a stream whose next batch is not decided
//!   yet can only bring batches of key at least `(floor, its index)`, where `floor` is the
//!   stamp of the last batch it brought (stamps do not go down). So the merge takes the
//!   stream with the lowest key, counting an empty stream at its floor, and waits when that
//!   stream is empty.
//! * **One order for all workers.** Every worker's sequence is the restriction of the same total
//!   order to the groups it delivers, so `g_all`'s commands come in the same order to every
//!   worker, and no two workers see two commands in opposite orders: the order property of
//!   atomic multicast that Algorithm 1's barrier needs to be free of deadlock (seed 004 §IV-E).
//!
//! # Liveness: skips
//! An idle stream holds its floor down and stalls every merge it is part of: worker `i` cannot
//! take a `g_all` batch stamped `s` while `g_i`'s floor is at most `s` and `g_i` has nothing
//! decided. The leader of a group that a merge waits on ([`Merge::blocked_on`]) therefore
//! proposes a *skip*: a batch with no command, which declares that the stream has nothing
//! before its stamp and raises its floor there (see [`crate::groups`]). Every replica learns
//! every decision of every group (Multi-Paxos followers decide, and catch up when behind), so
//! the leader of the group a merge waits on sees its own merge wait too, and skips.
//!
//! The skip must be stamped past `s`, and `s` came from another leader's clock, which may run
//! ahead of this leader's by any skew. A skip stamped with the waiting leader's clock alone
//! would come too early again and again until that clock passed `s`: the merge would wait out
//! the skew, and a skew past the clients' timeout stalls the group. So the wait names the
//! stamp it needs ([`Wait::stamp_ms`]: `s`, or `s + 1` when the waiting stream loses the
//! tie-break), and the leader stamps its skip at least there
//! (`Replica::raise_stamp_floor` of `logless_multipaxos`): the stamps of a group become a
//! hybrid logical clock, the leader's clock raised to the highest stamp it was asked to pass,
//! still monotonic along the stream and still a function of the decided log. A batch
//! therefore waits about one consensus round for the skip, plus at most the rest of the round
//! of the skip before it (a leader has one skip undecided at a time), whatever the skew
//! between the leaders' clocks. The group's later batches keep stamps at
//! least that high until its leader's clock catches up; a merge that then waits on another
//! group for them is unblocked the same way, in one round.
//! A merge that waits on nothing asks for no skip, so an idle cluster proposes none.
//!
//! The deliberate bug [`MergeBugs::by_arrival`] delivers batches in the order they reached this
//! replica instead: each replica then orders `g_i` against `g_all` its own way.
use std::collections::VecDeque;

use logless_multipaxos::ids::Instance;
use logless_service::Group;

use crate::cut::Cut;
use crate::stream::DeliveredBatch;

/// Deliberate bugs of the merge, each off by default, for tests that must catch them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct MergeBugs {
    /// Deliver batches in the order they were pushed (their arrival at this replica), not by
    /// their stamps: not the same order on every replica.
    pub by_arrival: bool,
}

/// What a merge waits for: a decision of `group` stamped at least `stamp_ms` lets it take its
/// next pending batch (see "Liveness: skips" above).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Wait {
    /// The stream with nothing pending that holds the lowest key.
    pub group: Group,
    /// The least stamp of that stream's next batch that lets the merge go on.
    pub stamp_ms: u64,
}

/// One stream of the merge.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Source {
    group: Group,
    /// Decided batches not taken yet, in log order.
    pending: VecDeque<DeliveredBatch>,
    /// The stamp of the last batch pushed: no later batch is stamped lower.
    floor_ms: u64,
    /// The instance the next batch pushed must have.
    next_instance: Instance,
}

/// The merge of some groups' streams (one worker's: its own group and `g_all`).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Merge {
    /// The streams, in group order (the tie-break).
    sources: Vec<Source>,
    /// Source indexes in the order their batches were pushed, for the bug `by_arrival` only.
    arrivals: VecDeque<usize>,
    bugs: MergeBugs,
}

impl Merge {
    /// A merge of `groups`' streams, each starting at instance 0 with stamp 0.
    ///
    /// # Panics
    /// If `groups` is empty or names a group twice.
    pub fn new(groups: &[Group], bugs: MergeBugs) -> Merge {
        let mut groups = groups.to_vec();
        groups.sort();
        groups.dedup();
        assert!(!groups.is_empty(), "a merge has a stream");
        let sources = groups
            .into_iter()
            .map(|group| Source {
                group,
                pending: VecDeque::new(),
                floor_ms: 0,
                next_instance: Instance(0),
            })
            .collect();
        Merge {
            sources,
            arrivals: VecDeque::new(),
            bugs,
        }
    }

    /// A merge of `groups`' streams starting at `cut` (see [`crate::cut`]): each stream from
    /// its position there, `g_all` with the stamp of the cut's batch, every other stream above
    /// it (all its batches after the cut are stamped higher). A floor only holds a stream back
    /// until its next batch, so these are the floors of a merge that had run up to the cut.
    pub fn resume(groups: &[Group], cut: &Cut, bugs: MergeBugs) -> Merge {
        let mut merge = Merge::new(groups, bugs);
        for source in &mut merge.sources {
            source.next_instance = cut.truncate_below(source.group);
            source.floor_ms = match source.group {
                Group::All => cut.stamp_ms,
                Group::Worker(_) => cut.stamp_ms.saturating_add(1),
            };
        }
        merge
    }

    /// The instance of `group`'s next batch this merge has not handed on: every batch below it
    /// was popped, none from it on.
    ///
    /// # Panics
    /// If the merge has no such stream.
    pub fn handed_on_below(&self, group: Group) -> Instance {
        let source = (self.sources.iter())
            .find(|s| s.group == group)
            .unwrap_or_else(|| panic!("{group:?} is not merged here"));
        source
            .pending
            .front()
            .map_or(source.next_instance, |batch| batch.instance)
    }

    /// Hands the merge the next decided batch of `group`'s stream.
    ///
    /// # Panics
    /// If the merge has no such stream, or the batch does not follow the last one pushed (the
    /// next instance, a stamp no lower): the log delivers its batches once and in order.
    pub fn push(&mut self, group: Group, batch: DeliveredBatch) {
        let index = self
            .sources
            .iter()
            .position(|s| s.group == group)
            .unwrap_or_else(|| panic!("{group:?} is not merged here"));
        let source = &mut self.sources[index];
        assert_eq!(
            batch.instance, source.next_instance,
            "{group:?} in log order"
        );
        assert!(
            batch.stamp_ms >= source.floor_ms,
            "{group:?}'s stamps go up"
        );
        source.next_instance = batch.instance.next();
        source.floor_ms = batch.stamp_ms;
        source.pending.push_back(batch);
        if self.bugs.by_arrival {
            self.arrivals.push_back(index);
        }
    }

    /// The next batch in the merged order, with its group, if it can be known yet.
    pub fn pop(&mut self) -> Option<(Group, DeliveredBatch)> {
        let index = if self.bugs.by_arrival {
            self.arrivals.pop_front()?
        } else {
            let index = self.lowest();
            self.sources[index].pending.front()?;
            index
        };
        let source = &mut self.sources[index];
        let batch = source.pending.pop_front().expect("a pending batch");
        Some((source.group, batch))
    }

    /// What the merge waits for, if it waits: the next decision of the stream that holds the
    /// lowest key with nothing pending, stamped at least [`Wait::stamp_ms`]. `None` when a
    /// batch can be taken or nothing is pending at all.
    pub fn blocked_on(&self) -> Option<Wait> {
        let blocked = self.lowest();
        if !self.sources[blocked].pending.is_empty() {
            return None;
        }
        // The lowest key among the pending batches: the one the merge would take next.
        let (next, stamp_ms) = self
            .sources
            .iter()
            .enumerate()
            .filter_map(|(index, s)| s.pending.front().map(|b| (index, b.stamp_ms)))
            .min_by_key(|&(index, stamp_ms)| (stamp_ms, index))?;
        // The blocked stream's key must pass (stamp_ms, next): on equal stamps the stream
        // earlier in group order comes first.
        let stamp_ms = if blocked < next {
            stamp_ms.saturating_add(1)
        } else {
            stamp_ms
        };
        Some(Wait {
            group: self.sources[blocked].group,
            stamp_ms,
        })
    }

    /// The index of the stream holding the lowest key: its next batch's stamp, or its floor
    /// when it has none, then its group order.
    fn lowest(&self) -> usize {
        let key = |s: &Source| s.pending.front().map_or(s.floor_ms, |b| b.stamp_ms);
        let mut lowest = 0;
        for (index, source) in self.sources.iter().enumerate().skip(1) {
            // Sources are in group order, so a strictly lower stamp is needed to win a tie.
            if key(source) < key(&self.sources[lowest]) {
                lowest = index;
            }
        }
        lowest
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use logless_service::WorkerId;

    const OWN: Group = Group::Worker(WorkerId(0));

    fn batch(instance: u64, stamp_ms: u64) -> DeliveredBatch {
        DeliveredBatch {
            instance: Instance(instance),
            stamp_ms,
            requests: Vec::new(),
        }
    }

    fn wait(group: Group, stamp_ms: u64) -> Wait {
        Wait { group, stamp_ms }
    }

    fn drain(merge: &mut Merge) -> Vec<(Group, u64)> {
        std::iter::from_fn(|| merge.pop())
            .map(|(g, b)| (g, b.instance.0))
            .collect()
    }

    #[test]
    fn batches_come_by_stamp_then_own_group_first() {
        let mut merge = Merge::new(&[Group::All, OWN], MergeBugs::default());
        merge.push(Group::All, batch(0, 5));
        merge.push(Group::All, batch(1, 7));
        assert_eq!(
            merge.pop(),
            None,
            "g0 may still bring a batch stamped below 5"
        );
        assert_eq!(
            merge.blocked_on(),
            Some(wait(OWN, 6)),
            "g0 must pass 5: it sorts first"
        );
        merge.push(OWN, batch(0, 5));
        merge.push(OWN, batch(1, 6));
        assert_eq!(drain(&mut merge), [(OWN, 0), (Group::All, 0), (OWN, 1)]);
        assert_eq!(
            merge.blocked_on(),
            Some(wait(OWN, 8)),
            "g_all's 7 waits for g0 past 6"
        );
        merge.push(OWN, batch(2, 9));
        assert_eq!(drain(&mut merge), [(Group::All, 1)]);
        assert_eq!(
            merge.blocked_on(),
            Some(wait(Group::All, 9)),
            "g_all at 9 comes after g0's 9"
        );
    }

    #[test]
    fn a_skip_raises_an_idle_streams_floor() {
        let mut merge = Merge::new(&[OWN, Group::All], MergeBugs::default());
        merge.push(Group::All, batch(0, 10));
        assert_eq!(merge.pop(), None);
        merge.push(OWN, batch(0, 11));
        assert_eq!(drain(&mut merge), [(Group::All, 0)]);
    }

    #[test]
    fn the_arrival_bug_delivers_in_push_order() {
        let bugs = MergeBugs { by_arrival: true };
        let mut merge = Merge::new(&[OWN, Group::All], bugs);
        merge.push(Group::All, batch(0, 10));
        merge.push(OWN, batch(0, 1));
        assert_eq!(drain(&mut merge), [(Group::All, 0), (OWN, 0)]);
    }

    #[test]
    #[should_panic(expected = "in log order")]
    fn a_gap_in_a_stream_is_a_broken_invariant() {
        let mut merge = Merge::new(&[OWN], MergeBugs::default());
        merge.push(OWN, batch(1, 0));
    }
}
