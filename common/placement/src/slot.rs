//! Redis Cluster's key slots: the part of a key that is hashed (its hash tag), and the slot
//! it hashes to.
//!
//! Redis Cluster hashes a key with CRC-16/XMODEM (polynomial 0x1021, initial value 0, no
//! reflection, no final xor) and keeps the low 14 bits: `HASH_SLOT = CRC16(key) mod 16384`.
//! When the key holds a `{` followed later by a `}` with at least one byte between them, only
//! the bytes between the first `{` and the first `}` after it are hashed, so that
//! `{user1000}.following` and `{user1000}.followers` share a slot. `{}` (empty) and a `{`
//! without a closing `}` leave the whole key hashed.
use std::fmt;

use crc::{Crc, CRC_16_XMODEM};

/// The number of slots of Redis Cluster: every key hashes to one of them.
pub const SLOTS: u16 = 16_384;

/// The key hash of Redis Cluster.
const KEY_CRC: Crc<u16> = Crc::<u16>::new(&CRC_16_XMODEM);

/// One of Redis Cluster's [`SLOTS`] key slots; always below [`SLOTS`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Slot(u16);

impl Slot {
    /// The first slot.
    pub const MIN: Slot = Slot(0);
    /// The last slot.
    pub const MAX: Slot = Slot(SLOTS - 1);

    /// The slot numbered `n`, if there is one.
    pub fn new(n: u16) -> Option<Slot> {
        (n < SLOTS).then_some(Slot(n))
    }

    /// The slot's number, below [`SLOTS`].
    pub fn get(self) -> u16 {
        self.0
    }

    /// Every slot, in order.
    pub fn all() -> impl DoubleEndedIterator<Item = Slot> + ExactSizeIterator + Clone {
        (0..SLOTS).map(Slot)
    }
}

impl fmt::Display for Slot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// Consecutive slots, `first..=last`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SlotRange {
    /// The first slot of the range.
    pub first: Slot,
    /// The last slot of the range (inclusive, as Redis writes ranges).
    pub last: Slot,
}

impl SlotRange {
    /// How many slots the range holds.
    pub fn len(&self) -> usize {
        usize::from(self.last.0 - self.first.0) + 1
    }

    /// Always false: a range holds at least one slot.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// Whether `slot` lies in the range.
    pub fn contains(&self, slot: Slot) -> bool {
        (self.first..=self.last).contains(&slot)
    }
}

/// Every slot in order, labelled by `label`, grouped into maximal runs of consecutive slots
/// with equal labels.
pub(crate) fn runs<T: PartialEq>(mut label: impl FnMut(Slot) -> T) -> Vec<(SlotRange, T)> {
    let mut runs: Vec<(SlotRange, T)> = Vec::new();
    for slot in Slot::all() {
        let this = label(slot);
        match runs.last_mut() {
            Some((range, last)) if *last == this => range.last = slot,
            _ => runs.push((
                SlotRange {
                    first: slot,
                    last: slot,
                },
                this,
            )),
        }
    }
    runs
}

/// The bytes of `key` that Redis Cluster hashes: the hash tag if the key has a non-empty one,
/// else the whole key.
pub fn hash_tag(key: &[u8]) -> &[u8] {
    let Some(open) = key.iter().position(|&b| b == b'{') else {
        return key;
    };
    let after = &key[open + 1..];
    match after.iter().position(|&b| b == b'}') {
        Some(close) if close > 0 => &after[..close],
        _ => key,
    }
}

/// The slot of `key`, as Redis Cluster computes it (`CLUSTER KEYSLOT`).
pub fn key_slot(key: &[u8]) -> Slot {
    Slot(KEY_CRC.checksum(hash_tag(key)) & (SLOTS - 1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc16_matches_the_cluster_specification_test_vector() {
        // The Redis Cluster specification gives CRC16("123456789") = 0x31C3.
        assert_eq!(KEY_CRC.checksum(b"123456789"), 0x31C3);
    }

    #[test]
    fn slots_match_the_ones_redis_documents() {
        // CLUSTER KEYSLOT's documented examples, and the empty key.
        assert_eq!(key_slot(b"somekey").get(), 11058);
        assert_eq!(key_slot(b"foo{hash_tag}").get(), 2515);
        assert_eq!(key_slot(b"{hash_tag}").get(), 2515);
        assert_eq!(key_slot(b"").get(), 0);
        assert_eq!(key_slot(b"foo").get(), 12182);
        assert_eq!(key_slot(b"bar").get(), 5061);
    }

    #[test]
    fn hash_tags_follow_the_specification() {
        assert_eq!(hash_tag(b"{user1000}.following"), b"user1000");
        assert_eq!(hash_tag(b"{user1000}.followers"), b"user1000");
        // Only the first `{` and the first `}` after it count.
        assert_eq!(hash_tag(b"foo{{bar}}zap"), b"{bar");
        assert_eq!(hash_tag(b"foo{bar}{zap}"), b"bar");
        // An empty tag, or a `{` never closed, hashes the whole key.
        assert_eq!(hash_tag(b"foo{}{bar}"), b"foo{}{bar}");
        assert_eq!(hash_tag(b"foo{bar"), b"foo{bar");
        assert_eq!(hash_tag(b"foo}bar{"), b"foo}bar{");
        assert_eq!(hash_tag(b"plain"), b"plain");
        assert_eq!(
            key_slot(b"{user1000}.following"),
            key_slot(b"{user1000}.followers")
        );
    }

    #[test]
    fn slot_numbers_are_bounded() {
        assert_eq!(Slot::new(SLOTS - 1), Some(Slot::MAX));
        assert_eq!(Slot::new(SLOTS), None);
        assert_eq!(Slot::all().len(), usize::from(SLOTS));
    }
}
