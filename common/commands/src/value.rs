//! Register values and their binary encoding.
//!
//! A register holds one of: nothing (absent, also what a deleted key becomes: a tombstone), a
//! string, a 64-bit integer, a set of strings, a fencing lock, a hash, a list or a sorted set.
//! Integers are kept as integers so that counters do not parse and print on every increment;
//! they read as their decimal string, as in Redis.
//!
//! # Encoding
//!
//! `version (1) | flags (1) | [expiry u64] | [fence u64] | tag (1) | payload`, little-endian,
//! lengths as u32. Payloads: string `len bytes`; integer `i64`; set `count, (len bytes)*` in
//! strictly increasing byte order; lock `owned (0|1), [len owner], lease u64`; hash
//! `count, (len field, len value)*` in strictly increasing field order; list `count, (len
//! item)*` head first; sorted set `count, (len member, score f64)*` in strictly increasing
//! member order, no NaN, no minus zero. The encoding is canonical: one register, one byte
//! string, so replicas compare values by their bytes.
//!
//! # Size
//!
//! A register's size is [`Register::encoded_len`]: the bytes it takes on disk and in every
//! vote. Limits on it are enforced by whoever holds the register; the commands check
//! [`crate::command::Limits`] on what they write.
use std::collections::{BTreeMap, BTreeSet, VecDeque};

use bytes::Bytes;
use thiserror::Error;

use crate::float::Float;
pub use crate::zset::ZSet;

/// The replicated state of one key; `Register::default()` is the absent key.
#[derive(Clone, Debug, PartialEq, Eq, Default, Hash, PartialOrd, Ord)]
pub struct Register {
    /// What the key holds.
    pub data: Data,
    /// When the key expires (proposer clock, ms); `None` for never.
    pub expires_at_ms: Option<u64>,
    /// The fencing token of the latest lock acquisition on this key (0 before the first). It
    /// belongs to the key, not to the lock value: DEL, SET and expiry keep it, so the tokens one
    /// key hands out only ever grow.
    pub fence: u64,
}

/// What a register holds.
#[derive(Clone, Debug, PartialEq, Eq, Default, Hash, PartialOrd, Ord)]
pub enum Data {
    /// Nothing: never written, deleted or expired.
    #[default]
    Absent,
    /// A byte string.
    Str(Bytes),
    /// A signed 64-bit integer (a counter).
    Int(i64),
    /// A set of byte strings.
    Set(BTreeSet<Bytes>),
    /// A fencing lock.
    Lock(LockState),
    /// A hash: fields to values, in field byte order (so iteration is the same everywhere).
    Hash(BTreeMap<Bytes, Bytes>),
    /// A list, head first.
    List(VecDeque<Bytes>),
    /// A sorted set.
    ZSet(ZSet),
}

/// A fencing lock: its holder and lease. Its token is the register's [`Register::fence`].
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LockState {
    /// The current owner, if held.
    pub owner: Option<Bytes>,
    /// Until when the lease runs (proposer clock, ms).
    pub lease_until_ms: u64,
}

/// A stored register that cannot be decoded.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum DecodeError {
    /// The bytes end before the value does.
    #[error("register record truncated")]
    Truncated,
    /// An unknown format version.
    #[error("unknown register format version {0}")]
    UnknownVersion(u8),
    /// An unknown value tag.
    #[error("unknown register value tag {0}")]
    UnknownTag(u8),
    /// Bytes after the end of the value.
    #[error("{0} trailing bytes after the register value")]
    Trailing(usize),
    /// Flag bits this version does not know, or a flagged field that is not canonical.
    #[error("invalid register flags {0:#x}")]
    UnknownFlags(u8),
    /// Set members, hash fields or sorted-set members out of order or repeated (the encoding
    /// is canonical).
    #[error("set members not in strictly increasing order")]
    UnorderedSet,
    /// A sorted-set score that is NaN or minus zero.
    #[error("invalid sorted-set score")]
    InvalidScore,
}

/// Version 2 moved the fencing token from the lock value to the register (a flag bit and a
/// u64 after the expiry); version 1 records still decode.
const FORMAT_VERSION: u8 = 2;
const FLAG_EXPIRES: u8 = 1;
const FLAG_FENCE: u8 = 2;
const TAG_ABSENT: u8 = 0;
const TAG_STR: u8 = 1;
const TAG_INT: u8 = 2;
const TAG_SET: u8 = 3;
const TAG_LOCK: u8 = 4;
const TAG_HASH: u8 = 5;
const TAG_LIST: u8 = 6;
const TAG_ZSET: u8 = 7;

impl Data {
    /// The type's name as TYPE answers it (`none` for absent).
    pub fn type_name(&self) -> &'static str {
        match self {
            Data::Absent => "none",
            Data::Str(_) | Data::Int(_) => "string",
            Data::Set(_) => "set",
            Data::Lock(_) => "lock",
            Data::Hash(_) => "hash",
            Data::List(_) => "list",
            Data::ZSet(_) => "zset",
        }
    }
}

impl Register {
    /// Whether the key holds something at `now_ms` (not absent, not expired).
    pub fn is_live(&self, now_ms: u64) -> bool {
        self.data != Data::Absent && !self.is_expired(now_ms)
    }

    /// Whether the key has expired at `now_ms`.
    pub fn is_expired(&self, now_ms: u64) -> bool {
        self.expires_at_ms.is_some_and(|at| at <= now_ms)
    }

    /// The absent key that keeps this key's fencing token: what DEL leaves.
    pub fn cleared(&self) -> Register {
        Register {
            fence: self.fence,
            ..Register::default()
        }
    }

    /// The data as seen at `now_ms`: absent once expired.
    pub fn live_data(&self, now_ms: u64) -> &Data {
        if self.is_expired(now_ms) {
            &Data::Absent
        } else {
            &self.data
        }
    }

    /// The number of bytes [`Register::encode`] writes.
    pub fn encoded_len(&self) -> usize {
        let expiry = self.expires_at_ms.map_or(0, |_| 8);
        let fence = if self.fence == 0 { 0 } else { 8 };
        let data = match &self.data {
            Data::Absent => 0,
            Data::Str(s) => 4 + s.len(),
            Data::Int(_) => 8,
            Data::Set(members) => 4 + members.iter().map(|m| 4 + m.len()).sum::<usize>(),
            Data::Lock(lock) => 1 + lock.owner.as_ref().map_or(0, |o| 4 + o.len()) + 8,
            Data::Hash(fields) => {
                4 + fields
                    .iter()
                    .map(|(f, v)| 8 + f.len() + v.len())
                    .sum::<usize>()
            }
            Data::List(items) => 4 + items.iter().map(|i| 4 + i.len()).sum::<usize>(),
            Data::ZSet(zset) => 4 + zset.iter().map(|(m, _)| 12 + m.len()).sum::<usize>(),
        };
        3 + expiry + fence + data
    }

    /// Appends the versioned, canonical binary encoding of the register to `out`.
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.reserve(self.encoded_len());
        out.push(FORMAT_VERSION);
        let mut flags = 0;
        if self.expires_at_ms.is_some() {
            flags |= FLAG_EXPIRES;
        }
        if self.fence != 0 {
            flags |= FLAG_FENCE;
        }
        out.push(flags);
        if let Some(at) = self.expires_at_ms {
            out.extend_from_slice(&at.to_le_bytes());
        }
        if self.fence != 0 {
            out.extend_from_slice(&self.fence.to_le_bytes());
        }
        match &self.data {
            Data::Absent => out.push(TAG_ABSENT),
            Data::Str(s) => {
                out.push(TAG_STR);
                put_bytes(out, s);
            }
            Data::Int(v) => {
                out.push(TAG_INT);
                out.extend_from_slice(&v.to_le_bytes());
            }
            Data::Set(members) => {
                out.push(TAG_SET);
                put_len(out, members.len());
                for m in members {
                    put_bytes(out, m);
                }
            }
            Data::Lock(lock) => {
                out.push(TAG_LOCK);
                match &lock.owner {
                    None => out.push(0),
                    Some(owner) => {
                        out.push(1);
                        put_bytes(out, owner);
                    }
                }
                out.extend_from_slice(&lock.lease_until_ms.to_le_bytes());
            }
            Data::Hash(fields) => {
                out.push(TAG_HASH);
                put_len(out, fields.len());
                for (field, value) in fields {
                    put_bytes(out, field);
                    put_bytes(out, value);
                }
            }
            Data::List(items) => {
                out.push(TAG_LIST);
                put_len(out, items.len());
                for item in items {
                    put_bytes(out, item);
                }
            }
            Data::ZSet(zset) => {
                out.push(TAG_ZSET);
                put_len(out, zset.len());
                for (member, score) in zset.by_member() {
                    put_bytes(out, member);
                    out.extend_from_slice(&score.get().to_bits().to_le_bytes());
                }
            }
        }
    }

    /// Decodes what [`Register::encode`] wrote. Never panics, whatever the input.
    pub fn decode(bytes: &[u8]) -> Result<Register, DecodeError> {
        let mut r = Reader { bytes };
        let version = r.u8()?;
        let flags = match version {
            // Version 1: an expiry flag byte (any non-zero value), no register-level fence.
            1 => match r.u8()? {
                0 => 0,
                _ => FLAG_EXPIRES,
            },
            FORMAT_VERSION => r.u8()?,
            _ => return Err(DecodeError::UnknownVersion(version)),
        };
        if flags & !(FLAG_EXPIRES | FLAG_FENCE) != 0 {
            return Err(DecodeError::UnknownFlags(flags));
        }
        let expires_at_ms = if flags & FLAG_EXPIRES != 0 {
            Some(r.u64()?)
        } else {
            None
        };
        let mut fence = if flags & FLAG_FENCE != 0 {
            match r.u64()? {
                0 => return Err(DecodeError::UnknownFlags(flags)),
                f => f,
            }
        } else {
            0
        };
        let data = match r.u8()? {
            TAG_ABSENT => Data::Absent,
            TAG_STR => Data::Str(Bytes::copy_from_slice(r.bytes()?)),
            TAG_INT => Data::Int(r.u64()? as i64),
            TAG_SET => {
                let mut members = BTreeSet::new();
                r.ordered(|_, m| {
                    members.insert(m);
                    Ok(())
                })?;
                Data::Set(members)
            }
            TAG_HASH => {
                let mut fields = BTreeMap::new();
                r.ordered(|r, field| {
                    fields.insert(field, Bytes::copy_from_slice(r.bytes()?));
                    Ok(())
                })?;
                Data::Hash(fields)
            }
            TAG_LIST => {
                // No capacity up front: the count is untrusted until the items are read.
                let mut items = VecDeque::new();
                for _ in 0..r.u32()? {
                    items.push_back(Bytes::copy_from_slice(r.bytes()?));
                }
                Data::List(items)
            }
            TAG_ZSET => {
                let mut zset = ZSet::default();
                r.ordered(|r, member| {
                    let bits = r.u64()?;
                    let score = Float::new(f64::from_bits(bits))
                        .filter(|s| s.get().to_bits() == bits)
                        .ok_or(DecodeError::InvalidScore)?;
                    zset.insert(member, score);
                    Ok(())
                })?;
                Data::ZSet(zset)
            }
            TAG_LOCK => {
                let owner = match r.u8()? {
                    0 => None,
                    _ => Some(Bytes::copy_from_slice(r.bytes()?)),
                };
                if version == 1 {
                    fence = r.u64()?;
                }
                let lease_until_ms = r.u64()?;
                Data::Lock(LockState {
                    owner,
                    lease_until_ms,
                })
            }
            tag => return Err(DecodeError::UnknownTag(tag)),
        };
        if !r.bytes.is_empty() {
            return Err(DecodeError::Trailing(r.bytes.len()));
        }
        Ok(Register {
            data,
            expires_at_ms,
            fence,
        })
    }
}

fn put_len(out: &mut Vec<u8>, len: usize) {
    let len = u32::try_from(len).expect("lengths are bounded by the value limits");
    out.extend_from_slice(&len.to_le_bytes());
}

fn put_bytes(out: &mut Vec<u8>, bytes: &[u8]) {
    put_len(out, bytes.len());
    out.extend_from_slice(bytes);
}

struct Reader<'a> {
    bytes: &'a [u8],
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], DecodeError> {
        if self.bytes.len() < n {
            return Err(DecodeError::Truncated);
        }
        let (head, tail) = self.bytes.split_at(n);
        self.bytes = tail;
        Ok(head)
    }

    fn u8(&mut self) -> Result<u8, DecodeError> {
        Ok(self.take(1)?[0])
    }

    fn u32(&mut self) -> Result<u32, DecodeError> {
        let mut b = [0u8; 4];
        b.copy_from_slice(self.take(4)?);
        Ok(u32::from_le_bytes(b))
    }

    fn u64(&mut self) -> Result<u64, DecodeError> {
        let mut b = [0u8; 8];
        b.copy_from_slice(self.take(8)?);
        Ok(u64::from_le_bytes(b))
    }

    fn bytes(&mut self) -> Result<&'a [u8], DecodeError> {
        let len = self.u32()? as usize;
        self.take(len)
    }

    /// Reads a count, then that many keys in strictly increasing byte order, each followed by
    /// what `rest` reads.
    fn ordered(
        &mut self,
        mut rest: impl FnMut(&mut Self, Bytes) -> Result<(), DecodeError>,
    ) -> Result<(), DecodeError> {
        let count = self.u32()?;
        let mut last: Option<&[u8]> = None;
        for _ in 0..count {
            let key = self.bytes()?;
            if last.is_some_and(|l| l >= key) {
                return Err(DecodeError::UnorderedSet);
            }
            last = Some(key);
            rest(self, Bytes::copy_from_slice(key))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn data() -> impl Strategy<Value = Data> {
        let bytes = || proptest::collection::vec(any::<u8>(), 0..8).prop_map(Bytes::from);
        prop_oneof![
            Just(Data::Absent),
            bytes().prop_map(Data::Str),
            any::<i64>().prop_map(Data::Int),
            proptest::collection::btree_set(bytes(), 0..5).prop_map(Data::Set),
            (proptest::option::of(bytes()), any::<u64>()).prop_map(|(owner, lease_until_ms)| {
                Data::Lock(LockState {
                    owner,
                    lease_until_ms,
                })
            }),
            proptest::collection::btree_map(bytes(), bytes(), 0..5).prop_map(Data::Hash),
            proptest::collection::vec_deque(bytes(), 0..5).prop_map(Data::List),
            proptest::collection::vec((bytes(), score()), 0..5)
                .prop_map(|pairs| Data::ZSet(pairs.into_iter().collect())),
        ]
    }

    fn score() -> impl Strategy<Value = Float> {
        prop_oneof![
            any::<f64>().prop_filter_map("not NaN", Float::new),
            Just(Float::new(f64::INFINITY).unwrap()),
            Just(Float::new(f64::NEG_INFINITY).unwrap()),
            (-3i8..3).prop_map(|v| Float::new(f64::from(v)).unwrap()),
        ]
    }

    proptest! {
        #[test]
        fn encode_then_decode_is_the_identity(
            data in data(),
            expires in proptest::option::of(any::<u64>()),
            fence in prop_oneof![Just(0u64), any::<u64>()],
        ) {
            let register = Register { data, expires_at_ms: expires, fence };
            let mut buf = Vec::new();
            register.encode(&mut buf);
            prop_assert_eq!(buf.len(), register.encoded_len());
            prop_assert_eq!(Register::decode(&buf), Ok(register));
        }

        #[test]
        fn decode_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
            let _ = Register::decode(&bytes);
        }

        #[test]
        fn damaged_encodings_decode_or_fail_without_panicking(
            data in data(),
            expires in proptest::option::of(any::<u64>()),
            cut in any::<prop::sample::Index>(),
            flip in any::<prop::sample::Index>(),
            byte in any::<u8>(),
        ) {
            let mut encoded = Vec::new();
            Register { data, expires_at_ms: expires, fence: 0 }.encode(&mut encoded);
            let _ = Register::decode(&encoded[..cut.index(encoded.len() + 1)]);
            let at = flip.index(encoded.len());
            encoded[at] = byte;
            if let Ok(decoded) = Register::decode(&encoded) {
                // Whatever decodes is a register like any other.
                let mut again = Vec::new();
                decoded.encode(&mut again);
                prop_assert_eq!(Register::decode(&again), Ok(decoded));
            }
        }
    }

    #[test]
    fn decode_rejects_damage_with_a_reason() {
        let mut buf = Vec::new();
        Register {
            data: Data::Str(Bytes::from_static(b"abc")),
            expires_at_ms: None,
            fence: 0,
        }
        .encode(&mut buf);
        assert_eq!(
            Register::decode(&buf[..buf.len() - 1]),
            Err(DecodeError::Truncated)
        );
        let mut trailing = buf.clone();
        trailing.push(0);
        assert_eq!(Register::decode(&trailing), Err(DecodeError::Trailing(1)));
        let mut version = buf.clone();
        version[0] = 9;
        assert_eq!(
            Register::decode(&version),
            Err(DecodeError::UnknownVersion(9))
        );
        let mut tag = buf;
        tag[2] = 77;
        assert_eq!(Register::decode(&tag), Err(DecodeError::UnknownTag(77)));
    }

    #[test]
    fn a_version_1_lock_decodes_with_its_token_on_the_register() {
        // Version 1, expiry at 7, a lock held by "o" with token 5 and lease until 9.
        let mut v1 = vec![1, 1];
        v1.extend_from_slice(&7u64.to_le_bytes());
        v1.extend_from_slice(&[TAG_LOCK, 1, 1, 0, 0, 0, b'o']);
        v1.extend_from_slice(&5u64.to_le_bytes());
        v1.extend_from_slice(&9u64.to_le_bytes());
        let expected = Register {
            data: Data::Lock(LockState {
                owner: Some(Bytes::from_static(b"o")),
                lease_until_ms: 9,
            }),
            expires_at_ms: Some(7),
            fence: 5,
        };
        assert_eq!(Register::decode(&v1), Ok(expected.clone()));
        let mut v2 = Vec::new();
        expected.encode(&mut v2);
        assert_eq!(v2[0], FORMAT_VERSION);
        assert_eq!(Register::decode(&v2), Ok(expected));
    }

    #[test]
    fn a_zero_fence_has_one_encoding() {
        let mut buf = vec![FORMAT_VERSION, FLAG_FENCE];
        buf.extend_from_slice(&0u64.to_le_bytes());
        buf.push(TAG_ABSENT);
        assert_eq!(
            Register::decode(&buf),
            Err(DecodeError::UnknownFlags(FLAG_FENCE))
        );
        assert_eq!(
            Register::decode(&[FORMAT_VERSION, 4, TAG_ABSENT]),
            Err(DecodeError::UnknownFlags(4))
        );
    }

    #[test]
    fn expiry_is_inclusive_of_its_instant() {
        let r = Register {
            data: Data::Int(1),
            expires_at_ms: Some(100),
            fence: 0,
        };
        assert!(r.is_live(99));
        assert!(!r.is_live(100));
        assert_eq!(r.live_data(100), &Data::Absent);
    }
}
