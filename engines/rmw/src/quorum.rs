//! Counting replies per acceptor and finding consistent quorums (§5.2).
//!
//! A quorum is a majority of the register's acceptors, or while a ring moves the register
//! (docs/ring.md §4), a majority of its old acceptors **and** a majority of its new ones: see
//! [`Quorum`].
//!
//! A quorum is consistent when its replies agree; since one round carries one value, agreement
//! is decided on rounds alone. Replies are kept per acceptor (a duplicate replaces, never adds),
//! so duplicated messages cannot forge a quorum.
use std::sync::Arc;

use logless_commands::value::Register;
use smallvec::SmallVec;

use crate::ids::{ReqId, Round};

/// A set of acceptors, by their index in the configuration (at most 64).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct AcceptorSet(u64);

impl AcceptorSet {
    /// Adds acceptor `index`; returns whether it was new.
    pub fn insert(&mut self, index: usize) -> bool {
        let bit = 1u64 << index;
        let new = self.0 & bit == 0;
        self.0 |= bit;
        new
    }

    /// Whether acceptor `index` is in the set.
    pub fn contains(&self, index: usize) -> bool {
        self.0 & (1u64 << index) != 0
    }

    /// The number of acceptors in the set.
    pub fn len(&self) -> usize {
        self.0.count_ones() as usize
    }

    /// Whether the set is empty.
    pub fn is_empty(&self) -> bool {
        self.0 == 0
    }

    /// The acceptors `0..count` (at most 64).
    pub fn first(count: usize) -> AcceptorSet {
        AcceptorSet(u64::MAX.checked_shr(64 - count as u32).unwrap_or(0))
    }

    /// Removes acceptor `index`.
    pub fn remove(&mut self, index: usize) {
        self.0 &= !(1u64 << index);
    }

    /// The acceptors in this set and not in `other`.
    pub fn without(self, other: AcceptorSet) -> AcceptorSet {
        AcceptorSet(self.0 & !other.0)
    }

    /// The acceptors in either set.
    pub fn union(self, other: AcceptorSet) -> AcceptorSet {
        AcceptorSet(self.0 | other.0)
    }

    /// The set as a bit mask (bit `i` for acceptor `i`).
    pub fn bits(self) -> u64 {
        self.0
    }

    /// The highest index in the set.
    pub fn last(&self) -> Option<usize> {
        (self.0 != 0).then(|| 63 - self.0.leading_zeros() as usize)
    }
}

/// The acceptors of one register and which sets of them make a quorum: a majority of one set,
/// or a majority of each of two (the joint stage of a ring's change, docs/ring.md §4).
///
/// The size of each majority is computed once, here: every VOTED and ACK of the hot path tests
/// a quorum, and a test is then one mask and one count per set (as cheap as the plain count of
/// replies it replaced).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Quorum {
    /// The acceptor set, or the old one of a joint pair.
    first: AcceptorSet,
    /// The new acceptor set of a joint pair; empty for one set.
    second: AcceptorSet,
    /// How many acceptors of `first` make a majority of it.
    first_needed: u32,
    /// How many of `second` make a majority of it: 0 for one set, so that the test passes.
    second_needed: u32,
}

/// More than half of `set`.
fn majority(set: AcceptorSet) -> u32 {
    set.bits().count_ones() / 2 + 1
}

/// How many acceptors of `set` are in `replied`.
#[inline]
fn count_in(set: AcceptorSet, replied: AcceptorSet) -> u32 {
    (set.bits() & replied.bits()).count_ones()
}

impl Quorum {
    /// A majority of `set`.
    pub fn majority_of(set: AcceptorSet) -> Quorum {
        Quorum {
            first: set,
            second: AcceptorSet::default(),
            first_needed: majority(set),
            second_needed: 0,
        }
    }

    /// A majority of `old` and a majority of `new` (neither empty).
    pub fn joint(old: AcceptorSet, new: AcceptorSet) -> Quorum {
        debug_assert!(!old.is_empty() && !new.is_empty());
        Quorum {
            first: old,
            second: new,
            first_needed: majority(old),
            second_needed: majority(new),
        }
    }

    /// Whether a majority of each set is needed (the joint stage).
    pub fn is_joint(&self) -> bool {
        self.second_needed > 0
    }

    /// Whether acceptor `index` is new to the register in this joint stage: in the new set,
    /// not in the old one (never for one set).
    pub fn gains(&self, index: usize) -> bool {
        self.is_joint() && self.second.contains(index) && !self.first.contains(index)
    }

    /// Every acceptor of the register (both sets when joint).
    pub fn everyone(&self) -> AcceptorSet {
        self.first.union(self.second)
    }

    /// Whether the acceptors `replied` make a quorum: a majority of each set.
    #[inline]
    pub fn is_met_by(&self, replied: AcceptorSet) -> bool {
        count_in(self.first, replied) >= self.first_needed
            && (self.second_needed == 0 || count_in(self.second, replied) >= self.second_needed)
    }

    /// Whether the acceptors `asked`, once those in `refused` are taken out, can no longer
    /// make a quorum (the test of NACKs and FULLs).
    pub fn is_out_of_reach(&self, refused: AcceptorSet, asked: AcceptorSet) -> bool {
        !self.is_met_by(asked.without(refused))
    }

    /// A quorum of the acceptors `order` yields, taken in that order, each only while a set it
    /// belongs to still lacks its majority; `None` if they make no quorum.
    pub fn first_quorum(&self, order: impl Iterator<Item = usize>) -> Option<AcceptorSet> {
        let mut targets = AcceptorSet::default();
        let lacks = |set: AcceptorSet, needed: u32, targets: AcceptorSet, index: usize| {
            set.contains(index) && count_in(set, targets) < needed
        };
        for index in order {
            if self.is_met_by(targets) {
                break;
            }
            if lacks(self.first, self.first_needed, targets, index)
                || lacks(self.second, self.second_needed, targets, index)
            {
                targets.insert(index);
            }
        }
        self.is_met_by(targets).then_some(targets)
    }
}

/// One acceptor's phase 1 reply, with the value resolved (elided values filled in).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct AckInfo {
    /// Whether the acceptor acknowledged a new round for this attempt.
    pub inc: bool,
    /// Its acknowledged round.
    pub r_ack: Round,
    /// Its last vote's round.
    pub r_voted: Round,
    /// The value of `r_voted`.
    pub value: Arc<Register>,
    /// The request that produced the value.
    pub req: Option<ReqId>,
    /// The request of the value it was built on.
    pub req_prev: Option<ReqId>,
}

/// The latest phase 1 reply of each acceptor.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct AckTable {
    /// Inline for up to three acceptors: every read and every phase 1 starts a table, and
    /// three replicas are the common case.
    replies: SmallVec<[Option<AckInfo>; 3]>,
}

/// What a set of phase 1 replies allows, in the order Algorithm 3 tests it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// A quorum agrees on `r_voted`: that value is chosen (and, with `prepared`, a quorum also
    /// acknowledged the same new round, so a successor may be proposed in it).
    Consistent {
        /// The chosen state's round.
        r_voted: Round,
        /// The chosen value.
        value: Arc<Register>,
        /// The request that produced it.
        req: Option<ReqId>,
        /// The request of the value it was built on: chosen too.
        req_prev: Option<ReqId>,
        /// The round a quorum consistently acknowledged for this attempt, if any.
        prepared: Option<Round>,
    },
    /// A quorum acknowledged the same new round but disagrees on votes: write the value of the
    /// highest vote through in that round.
    WriteThrough {
        /// The prepared round.
        round: Round,
        /// The value of the highest vote among the quorum.
        value: Arc<Register>,
        /// Its request id, kept.
        req: Option<ReqId>,
        /// The request of the value it was built on, kept so that the voters name it.
        req_prev: Option<ReqId>,
    },
    /// No decision from these replies.
    Inconsistent,
}

impl AckTable {
    /// A table for `acceptors` acceptors.
    pub fn new(acceptors: usize) -> AckTable {
        AckTable {
            replies: smallvec::smallvec![None; acceptors],
        }
    }

    /// Forgets every reply and makes room for `acceptors` acceptors: equal to
    /// [`AckTable::new`], without building a new table.
    pub fn reset(&mut self, acceptors: usize) {
        if self.replies.len() == acceptors {
            for reply in &mut self.replies {
                if reply.is_some() {
                    *reply = None;
                }
            }
        } else {
            self.replies.clear();
            self.replies.extend((0..acceptors).map(|_| None));
        }
    }

    /// Records a reply; a later reply of the same acceptor replaces the earlier one unless it
    /// shows an older vote (late replies of earlier attempts).
    pub fn record(&mut self, index: usize, ack: AckInfo) {
        let slot = &mut self.replies[index];
        match slot {
            Some(old) if old.r_voted > ack.r_voted => {}
            _ => *slot = Some(ack),
        }
    }

    /// The number of acceptors that replied.
    pub fn len(&self) -> usize {
        self.replies.iter().filter(|r| r.is_some()).count()
    }

    /// Whether no acceptor replied.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The highest `r_ack` any reply showed.
    pub fn r_ack_max(&self) -> Round {
        self.iter().map(|a| a.r_ack).max().unwrap_or(Round::BOTTOM)
    }

    /// The rounds of every acceptor (⊥ where none replied), to see whether anything moved.
    pub fn rounds(&self) -> Vec<(Round, Round)> {
        self.replies
            .iter()
            .map(|r| {
                r.as_ref()
                    .map_or((Round::BOTTOM, Round::BOTTOM), |a| (a.r_ack, a.r_voted))
            })
            .collect()
    }

    /// The acceptors that replied.
    pub fn replied(&self) -> AcceptorSet {
        let mut set = AcceptorSet::default();
        for (i, _) in self.indexed(AcceptorSet::default()) {
            set.insert(i);
        }
        set
    }

    /// The replies of the acceptors not in `excluded`.
    fn counted(&self, excluded: AcceptorSet) -> impl Iterator<Item = &AckInfo> + Clone {
        self.indexed(excluded).map(|(_, r)| r)
    }

    /// The replies of the acceptors not in `excluded`, with their acceptors.
    fn indexed(&self, excluded: AcceptorSet) -> impl Iterator<Item = (usize, &AckInfo)> + Clone {
        self.replies
            .iter()
            .enumerate()
            .filter(move |(i, _)| !excluded.contains(*i))
            .filter_map(|(i, r)| r.as_ref().map(|r| (i, r)))
    }

    /// The acceptors (not in `excluded`) whose replies pass `test`.
    fn those(&self, excluded: AcceptorSet, test: impl Fn(&AckInfo) -> bool) -> AcceptorSet {
        let mut set = AcceptorSet::default();
        for (i, reply) in self.indexed(excluded) {
            if test(reply) {
                set.insert(i);
            }
        }
        set
    }

    fn iter(&self) -> impl Iterator<Item = &AckInfo> {
        self.replies.iter().flatten()
    }

    /// Evaluates the replies against a quorum size, ignoring `excluded` acceptors. With
    /// `accept_inconsistent` (a deliberate bug for harness tests) any quorum of replies counts as
    /// consistent, on the lowest vote among them.
    pub fn verdict(
        &self,
        quorum: &Quorum,
        excluded: AcceptorSet,
        accept_inconsistent: bool,
    ) -> Verdict {
        let mut replies = self.indexed(excluded);
        let Some((first_index, first)) = replies.next() else {
            return Verdict::Inconsistent;
        };
        let mut counted = AcceptorSet::default();
        counted.insert(first_index);
        let (mut agree, mut same_round, mut any_inc) = (true, first.inc, first.inc);
        for (index, reply) in replies {
            counted.insert(index);
            agree &= reply.r_voted == first.r_voted;
            same_round &= reply.inc && reply.r_ack == first.r_ack;
            any_inc |= reply.inc;
        }
        // Every verdict but `Inconsistent` needs a quorum of replies.
        if !quorum.is_met_by(counted) {
            return Verdict::Inconsistent;
        }
        // The common case, decided in one pass: every reply shows the same vote, and either
        // every one acknowledged the same new round or none did (what the search below would
        // find, from its first candidate).
        if agree && (same_round || !any_inc) {
            return Verdict::Consistent {
                r_voted: first.r_voted,
                value: first.value.clone(),
                req: first.req,
                req_prev: first.req_prev,
                prepared: same_round.then_some(first.r_ack),
            };
        }
        self.search(quorum, excluded, accept_inconsistent)
    }

    /// [`AckTable::verdict`] the long way, by Algorithm 3's tests in order.
    fn search(&self, quorum: &Quorum, excluded: AcceptorSet, accept_inconsistent: bool) -> Verdict {
        let counted = || self.counted(excluded);
        let mut best: Option<Verdict> = None;
        for candidate in counted() {
            if !quorum.is_met_by(self.those(excluded, |a| a.r_voted == candidate.r_voted)) {
                continue;
            }
            let prepared = candidate.inc.then_some(candidate.r_ack).filter(|r| {
                quorum.is_met_by(self.those(excluded, |a| {
                    a.r_voted == candidate.r_voted && a.inc && a.r_ack == *r
                }))
            });
            let verdict = Verdict::Consistent {
                r_voted: candidate.r_voted,
                value: candidate.value.clone(),
                req: candidate.req,
                req_prev: candidate.req_prev,
                prepared,
            };
            if prepared.is_some() {
                return verdict;
            }
            best.get_or_insert(verdict);
        }
        if let Some(verdict) = best {
            return verdict;
        }
        for candidate in counted().filter(|a| a.inc) {
            let in_round = |a: &AckInfo| a.inc && a.r_ack == candidate.r_ack;
            if quorum.is_met_by(self.those(excluded, in_round)) {
                let highest = counted()
                    .filter(|a| in_round(a))
                    .max_by_key(|a| a.r_voted)
                    .expect("a quorum is not empty");
                return Verdict::WriteThrough {
                    round: candidate.r_ack,
                    value: highest.value.clone(),
                    req: highest.req,
                    req_prev: highest.req_prev,
                };
            }
        }
        if accept_inconsistent && quorum.is_met_by(self.those(excluded, |_| true)) {
            let lowest = counted().min_by_key(|a| a.r_voted).expect("non-empty");
            return Verdict::Consistent {
                r_voted: lowest.r_voted,
                value: lowest.value.clone(),
                req: lowest.req,
                req_prev: lowest.req_prev,
                prepared: counted().filter(|a| a.inc).map(|a| a.r_ack).max(),
            };
        }
        Verdict::Inconsistent
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::{AttemptId, NodeId, ProposerId};

    /// A majority of the first `n` acceptors.
    fn of(n: usize) -> Quorum {
        Quorum::majority_of(AcceptorSet::first(n))
    }

    fn round(n: u64, seq: u64) -> Round {
        Round {
            n,
            id: AttemptId {
                proposer: ProposerId {
                    node: NodeId(1),
                    incarnation: 1,
                },
                seq,
            },
        }
    }

    #[test]
    fn acceptor_sets_combine_as_sets() {
        assert!(AcceptorSet::first(0).is_empty());
        assert_eq!(AcceptorSet::first(64).len(), 64);
        let three = AcceptorSet::first(3);
        assert_eq!((three.len(), three.last()), (3, Some(2)));
        assert!(!three.contains(3));
        let mut one = AcceptorSet::default();
        one.insert(1);
        let rest = three.without(one);
        assert_eq!(
            (rest.len(), rest.contains(1), rest.last()),
            (2, false, Some(2))
        );
        assert_eq!(rest.union(one), three);
        let mut all = three;
        all.remove(2);
        all.remove(2);
        assert_eq!((all.len(), all.last()), (2, Some(1)));
        assert_eq!(AcceptorSet::default().last(), None);
    }

    fn ack(inc: bool, r_ack: Round, r_voted: Round, v: i64) -> AckInfo {
        use logless_commands::value::Data;
        AckInfo {
            inc,
            r_ack,
            r_voted,
            value: Arc::new(Register {
                data: Data::Int(v),
                expires_at_ms: None,
                fence: 0,
            }),
            req: None,
            req_prev: None,
        }
    }

    #[test]
    fn duplicate_replies_of_one_acceptor_do_not_make_a_quorum() {
        let mut t = AckTable::new(3);
        t.record(0, ack(true, round(2, 9), round(1, 1), 1));
        t.record(0, ack(true, round(2, 9), round(1, 1), 1));
        assert_eq!(
            t.verdict(&of(3), AcceptorSet::default(), false),
            Verdict::Inconsistent
        );
    }

    #[test]
    fn consistent_votes_and_rounds_allow_a_successor() {
        let mut t = AckTable::new(3);
        t.record(0, ack(true, round(2, 9), round(1, 1), 1));
        t.record(2, ack(true, round(2, 9), round(1, 1), 1));
        match t.verdict(&of(3), AcceptorSet::default(), false) {
            Verdict::Consistent {
                prepared, r_voted, ..
            } => {
                assert_eq!(prepared, Some(round(2, 9)));
                assert_eq!(r_voted, round(1, 1));
            }
            v => panic!("unexpected {v:?}"),
        }
    }

    #[test]
    fn inconsistent_votes_with_a_prepared_round_write_the_highest_through() {
        let mut t = AckTable::new(3);
        t.record(0, ack(true, round(3, 9), round(1, 1), 1));
        t.record(1, ack(true, round(3, 9), round(2, 2), 2));
        match t.verdict(&of(3), AcceptorSet::default(), false) {
            Verdict::WriteThrough {
                round: r, value, ..
            } => {
                assert_eq!(r, round(3, 9));
                assert_eq!(*value, *ack(true, r, r, 2).value);
            }
            v => panic!("unexpected {v:?}"),
        }
    }

    #[test]
    fn excluded_acceptors_do_not_count() {
        let mut t = AckTable::new(3);
        t.record(0, ack(true, round(2, 9), round(1, 1), 1));
        t.record(1, ack(true, round(2, 9), round(1, 1), 1));
        let mut excluded = AcceptorSet::default();
        excluded.insert(1);
        assert_eq!(t.verdict(&of(3), excluded, false), Verdict::Inconsistent);
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(4_096))]
        /// The one-pass shortcuts of `verdict` decide as the search by Algorithm 3's tests.
        /// Few distinct rounds, so that agreeing and nearly agreeing tables are common.
        #[test]
        fn the_verdict_shortcuts_agree_with_the_full_search(
            replies in proptest::collection::vec(
                proptest::option::weighted(0.8, (proptest::bool::ANY, 0..2u64, 0..2u64)),
                1..=5,
            ),
            excluded in 0..32u64,
            bug in proptest::bool::ANY,
        ) {
            let mut t = AckTable::new(replies.len());
            for (i, reply) in replies.iter().enumerate() {
                if let Some((inc, r_ack, r_voted)) = *reply {
                    // One value per round, as the protocol guarantees.
                    t.record(i, ack(inc, round(r_ack + 3, 9), round(r_voted, 1), r_voted as i64));
                }
            }
            let excluded = AcceptorSet(excluded);
            let quorum = of(replies.len());
            proptest::prop_assert_eq!(
                t.verdict(&quorum, excluded, bug),
                t.search(&quorum, excluded, bug)
            );
            // And so with joint quorums: the first acceptors as the old set, the last as the
            // new one, overlapping in the middle.
            let n = replies.len();
            let joint = Quorum::joint(
                AcceptorSet::first(n.div_ceil(2) + 1),
                AcceptorSet::first(n).without(AcceptorSet::first(n / 2)),
            );
            proptest::prop_assert_eq!(
                t.verdict(&joint, excluded, bug),
                t.search(&joint, excluded, bug)
            );
        }
    }

    fn set(indices: &[usize]) -> AcceptorSet {
        let mut set = AcceptorSet::default();
        for &i in indices {
            set.insert(i);
        }
        set
    }

    #[test]
    fn a_joint_quorum_needs_a_majority_of_each_set() {
        // Old {0, 1, 2}, new {1, 2, 3}: replacing acceptor 0 by 3.
        let joint = Quorum::joint(set(&[0, 1, 2]), set(&[1, 2, 3]));
        assert_eq!(joint.everyone(), set(&[0, 1, 2, 3]));
        assert!(joint.is_met_by(set(&[1, 2])));
        assert!(joint.is_met_by(set(&[0, 1, 3])));
        // A majority of the old set alone, and of the new set alone, are not.
        assert!(!joint.is_met_by(set(&[0, 1])));
        assert!(!joint.is_met_by(set(&[2, 3])));
        // Refusals: 0 and 3 refusing leave {1, 2}, still a quorum; 1 refusing too does not.
        assert!(!joint.is_out_of_reach(set(&[0, 3]), joint.everyone()));
        assert!(joint.is_out_of_reach(set(&[0, 3, 1]), joint.everyone()));
        // Old {0, 1, 2} and new {3, 4, 5} (disjoint): two of each.
        let apart = Quorum::joint(set(&[0, 1, 2]), set(&[3, 4, 5]));
        assert_eq!(apart.first_quorum(0..6), Some(set(&[0, 1, 3, 4])));
        assert_eq!(apart.first_quorum([2, 1, 0, 5].into_iter()), None);
        assert_eq!(joint.first_quorum(0..4), Some(set(&[0, 1, 2])));
        assert_eq!(of(3).first_quorum(1..3), Some(set(&[1, 2])));
    }

    #[test]
    fn a_joint_verdict_needs_agreement_in_each_set() {
        let joint = Quorum::joint(set(&[0, 1, 2]), set(&[1, 2, 3]));
        let mut t = AckTable::new(4);
        // 0 and 1 agree: a majority of the old set, not of the new one.
        t.record(0, ack(true, round(2, 9), round(1, 1), 1));
        t.record(1, ack(true, round(2, 9), round(1, 1), 1));
        t.record(3, ack(true, round(2, 9), round(0, 1), 0));
        assert!(matches!(
            t.verdict(&of(3), AcceptorSet::default(), false),
            Verdict::Consistent { .. }
        ));
        // Jointly, a quorum acknowledged round 2 but disagrees on votes: write through.
        assert!(matches!(
            t.verdict(&joint, AcceptorSet::default(), false),
            Verdict::WriteThrough { .. }
        ));
        t.record(2, ack(true, round(2, 9), round(1, 1), 1));
        assert!(matches!(
            t.verdict(&joint, AcceptorSet::default(), false),
            Verdict::Consistent { .. }
        ));
    }

    #[test]
    fn the_deliberate_bug_accepts_an_inconsistent_quorum() {
        let mut t = AckTable::new(3);
        t.record(0, ack(false, round(2, 9), round(1, 1), 1));
        t.record(1, ack(false, round(3, 9), round(2, 2), 2));
        assert_eq!(
            t.verdict(&of(3), AcceptorSet::default(), false),
            Verdict::Inconsistent
        );
        assert!(matches!(
            t.verdict(&of(3), AcceptorSet::default(), true),
            Verdict::Consistent { .. }
        ));
    }
}
