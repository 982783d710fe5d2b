//! A sorted set: members with scores, ordered by (score, member) as in Redis.
use std::collections::{BTreeMap, BTreeSet};

use bytes::Bytes;

use crate::float::Float;

/// A sorted set. Each member has one score; iteration is by score, then by member bytes
/// (Redis's order), and each member's score is found by member without a scan.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ZSet {
    /// Member → score.
    scores: BTreeMap<Bytes, Float>,
    /// (score, member), the same pairs in Redis's order.
    order: BTreeSet<(Float, Bytes)>,
}

impl ZSet {
    /// The number of members.
    pub fn len(&self) -> usize {
        self.scores.len()
    }

    /// Whether there are no members.
    pub fn is_empty(&self) -> bool {
        self.scores.is_empty()
    }

    /// The score of `member`.
    pub fn score(&self, member: &[u8]) -> Option<Float> {
        self.scores.get(member).copied()
    }

    /// Sets `member`'s score; returns the old one.
    pub fn insert(&mut self, member: Bytes, score: Float) -> Option<Float> {
        let old = self.scores.insert(member.clone(), score);
        if let Some(old) = old {
            let removed = self.order.remove(&(old, member.clone()));
            assert!(
                removed,
                "the two indexes of a sorted set hold the same pairs"
            );
        }
        self.order.insert((score, member));
        old
    }

    /// Removes `member`; returns its score.
    pub fn remove(&mut self, member: &[u8]) -> Option<Float> {
        let (member, score) = self.scores.remove_entry(member)?;
        let removed = self.order.remove(&(score, member));
        assert!(
            removed,
            "the two indexes of a sorted set hold the same pairs"
        );
        Some(score)
    }

    /// The members with their scores, lowest score first (ties by member bytes).
    pub fn iter(&self) -> impl DoubleEndedIterator<Item = (&Bytes, Float)> + ExactSizeIterator {
        self.order.iter().map(|(score, member)| (member, *score))
    }

    /// The members in byte order, with their scores (the encoding's order).
    pub fn by_member(&self) -> impl Iterator<Item = (&Bytes, Float)> {
        self.scores.iter().map(|(member, score)| (member, *score))
    }

    /// The 0-based rank of `member` in ascending order.
    pub fn rank(&self, member: &[u8]) -> Option<usize> {
        let score = self.score(member)?;
        let member = Bytes::copy_from_slice(member);
        Some(self.order.range(..(score, member)).count())
    }
}

impl FromIterator<(Bytes, Float)> for ZSet {
    fn from_iter<I: IntoIterator<Item = (Bytes, Float)>>(pairs: I) -> ZSet {
        let mut zset = ZSet::default();
        for (member, score) in pairs {
            zset.insert(member, score);
        }
        zset
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f(v: f64) -> Float {
        Float::new(v).unwrap()
    }

    #[test]
    fn members_order_by_score_then_bytes_and_rescoring_moves_them() {
        let mut z: ZSet = [
            (Bytes::from_static(b"b"), f(1.0)),
            (Bytes::from_static(b"a"), f(1.0)),
            (Bytes::from_static(b"c"), f(0.5)),
        ]
        .into_iter()
        .collect();
        let order: Vec<&[u8]> = z.iter().map(|(m, _)| &m[..]).collect();
        assert_eq!(order, [&b"c"[..], b"a", b"b"]);
        assert_eq!(z.rank(b"b"), Some(2));
        assert_eq!(z.insert(Bytes::from_static(b"c"), f(2.0)), Some(f(0.5)));
        assert_eq!(z.rank(b"c"), Some(2));
        assert_eq!(z.remove(b"a"), Some(f(1.0)));
        assert_eq!(z.remove(b"a"), None);
        assert_eq!(z.len(), 2);
        assert_eq!(z.rank(b"a"), None);
    }
}
