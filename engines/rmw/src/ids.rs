//! Identities: nodes, proposers, attempts, request ids, rounds and keys.
//!
//! # The ordering of rounds
//!
//! A round is `(n, id)`. logless orders rounds **lexicographically and totally**: first by `n`,
//! then by `id`. The paper orders them only partially (by `n`), which is also safe; the total
//! order is the classic Paxos ballot order and lets an acceptor compare any two rounds. What
//! safety needs is that one round carries at most one proposal, and that holds because every
//! round id is an [`AttemptId`] minted once by one proposer incarnation: a proposer uses a
//! round only if a quorum acknowledged exactly that round for it (incremental PREPARE or
//! PAXOS_PREP with a fresh id, or the pre-acknowledged round `(r.n + 1, r.id)` after its own
//! vote in `r` for a fast write), and it proposes in each round at most once.
use std::fmt;
use std::num::NonZeroU64;
use std::sync::Arc;

use bytes::Bytes;

/// A replica's identity in the cluster (the same on every shard of that replica).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct NodeId(pub u16);

/// One life of one proposer: the node and its incarnation, which grows with every restart so
/// that ids minted before a crash are never minted again. Incarnation 0 is reserved for ⊥.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct ProposerId {
    /// The node the proposer runs on.
    pub node: NodeId,
    /// Restart counter of that node, starting at 1.
    pub incarnation: u32,
}

/// A globally unique id minted by a proposer for one attempt (a phase 1 or a proposal).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct AttemptId {
    /// Who minted it.
    pub proposer: ProposerId,
    /// Per-incarnation sequence number, starting at 1.
    pub seq: u64,
}

impl AttemptId {
    /// The id of ⊥, lower than every minted id.
    pub const BOTTOM: AttemptId = AttemptId {
        proposer: ProposerId {
            node: NodeId(0),
            incarnation: 0,
        },
        seq: 0,
    };
}

/// The id of one proposal of new state (a successor proposal in Algorithm 3). Acceptors keep
/// the id of the request that produced their value; a write-through keeps it unchanged.
///
/// A request id is the [`AttemptId`] its proposer minted for it, so its sequence number is at
/// least 1: the zero left over makes `Option<ReqId>` as small as a `ReqId` (16 bytes), which
/// every acceptor state and most messages hold two of. Ordered as its attempt id.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ReqId {
    proposer: ProposerId,
    seq: NonZeroU64,
}

impl ReqId {
    /// The request minted as `attempt`; `None` for an attempt id no proposer mints (sequence
    /// number 0, as ⊥'s).
    pub fn new(attempt: AttemptId) -> Option<ReqId> {
        Some(ReqId {
            proposer: attempt.proposer,
            seq: NonZeroU64::new(attempt.seq)?,
        })
    }

    /// The attempt id the request was minted as.
    pub fn attempt(&self) -> AttemptId {
        AttemptId {
            proposer: self.proposer,
            seq: self.seq.get(),
        }
    }

    /// The proposer that made the request, to which LEARNED is sent.
    pub fn proposer(&self) -> ProposerId {
        self.proposer
    }
}

/// A round `(n, id)`, ordered lexicographically (see the module documentation).
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Round {
    /// The round number.
    pub n: u64,
    /// The attempt that owns this round number.
    pub id: AttemptId,
}

impl Round {
    /// ⊥: the round of an acceptor that has acknowledged and voted nothing.
    pub const BOTTOM: Round = Round {
        n: 0,
        id: AttemptId::BOTTOM,
    };

    /// The round an acceptor pre-acknowledges after voting in `self` (fast writes, §5.8).
    pub fn successor(&self) -> Round {
        Round {
            n: self.n.saturating_add(1),
            id: self.id,
        }
    }
}

impl fmt::Debug for Round {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if *self == Round::BOTTOM {
            return write!(f, "⊥");
        }
        let p = self.id.proposer;
        write!(
            f,
            "({}, n{}i{}#{})",
            self.n, p.node.0, p.incarnation, self.id.seq
        )
    }
}

/// The longest key kept inline in a [`Key`]: with its length and its 4-byte hash it fills the 23
/// bytes an inline key has (a `Key` is 24 bytes, one of which tells inline and shared keys
/// apart, so that a message with its destination fits in two cache lines).
pub const INLINE_KEY_BYTES_MAX: usize = 18;

/// The bytes of an inline key: its length, its hash (little-endian) and its bytes, zero after
/// them.
const INLINE_BYTES: usize = 1 + 4 + INLINE_KEY_BYTES_MAX;

/// A register's key.
///
/// Keys of up to [`INLINE_KEY_BYTES_MAX`] bytes (nearly every key in practice) are stored inline
/// with a hash of their bytes computed once: cloning one copies a few words instead of touching
/// a shared reference count, comparing one with the key in a hash table reads no other cache
/// line, and hashing one for a table lookup hashes four bytes. Every message, timer and
/// persisted state carries its key, and a shard looks keys up several times per command, so all
/// three happen on the hot path. Longer keys share their bytes and hash them when asked.
#[derive(Clone)]
pub struct Key(KeyBytes);

#[derive(Clone)]
enum KeyBytes {
    /// Length, [`hash_bytes`] of the key's bytes, the bytes: one array, so that the variant
    /// takes 23 bytes whatever the compiler's field order.
    Inline([u8; INLINE_BYTES]),
    Shared(Arc<[u8]>),
}

/// The hash of a key's bytes that [`Key`]'s `Hash` feeds to the table's hasher.
fn hash_bytes(bytes: &[u8]) -> u32 {
    use std::hash::{BuildHasher, Hasher};
    let mut hasher = rustc_hash::FxBuildHasher.build_hasher();
    hasher.write(bytes);
    // FxHash's finish moves its best-mixed bits to the low half.
    hasher.finish() as u32
}

impl Key {
    /// A key from anything that is bytes.
    pub fn new(bytes: impl Into<Bytes>) -> Key {
        Key::from_slice(&bytes.into())
    }

    /// A key with a copy of `slice`.
    pub fn from_slice(slice: &[u8]) -> Key {
        if slice.len() > INLINE_KEY_BYTES_MAX {
            return Key(KeyBytes::Shared(Arc::from(slice)));
        }
        let mut inline = [0; INLINE_BYTES];
        inline[0] = slice.len() as u8;
        inline[1..5].copy_from_slice(&hash_bytes(slice).to_le_bytes());
        inline[5..5 + slice.len()].copy_from_slice(slice);
        Key(KeyBytes::Inline(inline))
    }

    /// The key's bytes.
    pub fn as_bytes(&self) -> &[u8] {
        match &self.0 {
            KeyBytes::Inline(inline) => &inline[5..5 + usize::from(inline[0])],
            KeyBytes::Shared(bytes) => bytes,
        }
    }
}

impl PartialEq for Key {
    fn eq(&self, other: &Key) -> bool {
        match (&self.0, &other.0) {
            // Inline bytes past the key's are zero, so whole arrays compare (a few word
            // compares, no call to memcmp); equal bytes have equal hashes. A short key is always
            // inline, so an inline key never equals a shared one.
            (KeyBytes::Inline(inline), KeyBytes::Inline(other)) => inline == other,
            (KeyBytes::Shared(bytes), KeyBytes::Shared(other_bytes)) => bytes == other_bytes,
            _ => false,
        }
    }
}

impl Eq for Key {}

impl PartialOrd for Key {
    fn partial_cmp(&self, other: &Key) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Key {
    fn cmp(&self, other: &Key) -> std::cmp::Ordering {
        self.as_bytes().cmp(other.as_bytes())
    }
}

impl std::hash::Hash for Key {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        // A hash of the bytes, not the inline words: a multiplicative hasher such as FxHash
        // spreads words whose varying bytes sit high (the digits at the end of
        // `key:000000012345`) over too few buckets (measured: 10,000 distinct buckets for
        // 100,000 such keys, against 83,000 for the bytes; see the test below).
        let hash = match &self.0 {
            KeyBytes::Inline(inline) => {
                u32::from_le_bytes(inline[1..5].try_into().expect("four bytes"))
            }
            KeyBytes::Shared(bytes) => hash_bytes(bytes),
        };
        state.write_u32(hash);
    }
}

impl fmt::Debug for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", String::from_utf8_lossy(self.as_bytes()))
    }
}

/// An opaque tag the runtime attaches to a client command and gets back with its reply.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ClientTag(pub u64);

#[cfg(test)]
mod tests {
    use super::*;

    fn id(node: u16, seq: u64) -> AttemptId {
        AttemptId {
            proposer: ProposerId {
                node: NodeId(node),
                incarnation: 1,
            },
            seq,
        }
    }

    #[test]
    fn short_and_long_keys_compare_hash_and_order_by_their_bytes() {
        use std::hash::{BuildHasher, RandomState};
        let short = Key::new("k:1");
        let at_limit = Key::from_slice(&[b'x'; INLINE_KEY_BYTES_MAX]);
        let long = Key::new(vec![b'x'; INLINE_KEY_BYTES_MAX + 1]);
        assert_eq!(short.as_bytes(), b"k:1");
        assert_eq!(at_limit.as_bytes().len(), INLINE_KEY_BYTES_MAX);
        assert_eq!(long.as_bytes().len(), INLINE_KEY_BYTES_MAX + 1);
        assert_eq!(Key::from_slice(long.as_bytes()), long);
        assert!(at_limit < long && short < at_limit && Key::new("") < short);
        let hasher = RandomState::new();
        assert_eq!(
            hasher.hash_one(&short),
            hasher.hash_one(Key::new(Bytes::from_static(b"k:1")))
        );
        assert_eq!(hasher.hash_one(&long), hasher.hash_one(long.clone()));
        assert_eq!(std::mem::size_of::<Key>(), 24);
    }

    #[test]
    fn a_request_id_is_a_minted_attempt_id_and_no_larger_when_optional() {
        let attempt = |seq| AttemptId {
            proposer: ProposerId {
                node: NodeId(2),
                incarnation: 7,
            },
            seq,
        };
        assert_eq!(ReqId::new(AttemptId::BOTTOM), None);
        assert_eq!(ReqId::new(attempt(0)), None);
        let (one, max) = (
            ReqId::new(attempt(1)).unwrap(),
            ReqId::new(attempt(u64::MAX)).unwrap(),
        );
        assert_eq!(
            (one.attempt(), max.attempt()),
            (attempt(1), attempt(u64::MAX))
        );
        assert_eq!(one.proposer(), attempt(1).proposer);
        // Ordered as the attempt ids.
        let other = AttemptId {
            proposer: ProposerId {
                node: NodeId(1),
                incarnation: 9,
            },
            seq: 5,
        };
        let other_req = ReqId::new(other).unwrap();
        assert!(one < max && other_req < one && other < attempt(1));
        assert_eq!(std::mem::size_of::<Option<ReqId>>(), 16);
    }

    #[test]
    fn keys_that_differ_only_in_their_last_digits_spread_over_the_hash_table() {
        use std::collections::HashSet;
        use std::hash::BuildHasher;
        let hasher = rustc_hash::FxBuildHasher;
        let buckets: HashSet<u64> = (0..100_000u64)
            .map(|i| hasher.hash_one(Key::new(format!("key:{i:012}"))) & 0x3_ffff)
            .collect();
        // 100,000 random hashes fill about 82,700 of 2^18 buckets.
        assert!(buckets.len() > 80_000, "{} buckets", buckets.len());
    }

    #[test]
    fn bottom_is_lower_than_every_minted_round() {
        let r = Round { n: 0, id: id(0, 1) };
        assert!(Round::BOTTOM < r);
        assert_eq!(Round::default(), Round::BOTTOM);
    }

    #[test]
    fn rounds_order_by_number_then_id() {
        let a = Round { n: 5, id: id(2, 9) };
        let b = Round { n: 6, id: id(1, 1) };
        let c = Round { n: 6, id: id(1, 2) };
        assert!(a < b && b < c);
        assert_eq!(a.successor(), Round { n: 6, id: id(2, 9) });
        assert!(a.successor() > b, "same n: the id decides");
    }
}

/// Ids for unit tests.
#[cfg(test)]
pub(crate) mod testing {
    use super::{AttemptId, NodeId, ProposerId};

    /// Attempt `seq` of node `node`'s first incarnation.
    pub(crate) fn attempt(node: u16, seq: u64) -> AttemptId {
        AttemptId {
            proposer: ProposerId {
                node: NodeId(node),
                incarnation: 1,
            },
            seq,
        }
    }
}
