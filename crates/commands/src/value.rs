//! Register values and their binary encoding.
//!
//! A register holds one of: nothing (absent, also what a deleted key becomes: a tombstone), a
//! string, a 64-bit integer, a set of strings, or a fencing lock. Integers are kept as integers
//! so that counters do not parse and print on every increment; they read as their decimal
//! string, as in Redis.
use std::collections::BTreeSet;

use bytes::Bytes;
use thiserror::Error;

/// The replicated state of one key; `Register::default()` is the absent key.
#[derive(Clone, Debug, PartialEq, Eq, Default, Hash, PartialOrd, Ord)]
pub struct Register {
    /// What the key holds.
    pub data: Data,
    /// When the key expires (proposer clock, ms); `None` for never.
    pub expires_at_ms: Option<u64>,
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
}

/// A fencing lock: its holder, and a token that grows with every acquisition by a new owner.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LockState {
    /// The current owner, if held.
    pub owner: Option<Bytes>,
    /// The fencing token of the latest acquisition (0 before the first).
    pub fence: u64,
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
    /// Set members out of order or repeated (the encoding is canonical).
    #[error("set members not in strictly increasing order")]
    UnorderedSet,
}

const FORMAT_VERSION: u8 = 1;
const TAG_ABSENT: u8 = 0;
const TAG_STR: u8 = 1;
const TAG_INT: u8 = 2;
const TAG_SET: u8 = 3;
const TAG_LOCK: u8 = 4;

impl Register {
    /// Whether the key holds something at `now_ms` (not absent, not expired).
    pub fn is_live(&self, now_ms: u64) -> bool {
        self.data != Data::Absent && !self.is_expired(now_ms)
    }

    /// Whether the key has expired at `now_ms`.
    pub fn is_expired(&self, now_ms: u64) -> bool {
        self.expires_at_ms.is_some_and(|at| at <= now_ms)
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
        let expiry = 1 + self.expires_at_ms.map_or(0, |_| 8);
        let data = match &self.data {
            Data::Absent => 0,
            Data::Str(s) => 4 + s.len(),
            Data::Int(_) => 8,
            Data::Set(members) => 4 + members.iter().map(|m| 4 + m.len()).sum::<usize>(),
            Data::Lock(lock) => 1 + lock.owner.as_ref().map_or(0, |o| 4 + o.len()) + 16,
        };
        2 + expiry + data
    }

    /// Appends the versioned, canonical binary encoding of the register to `out`.
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.reserve(self.encoded_len());
        out.push(FORMAT_VERSION);
        match self.expires_at_ms {
            None => out.push(0),
            Some(at) => {
                out.push(1);
                out.extend_from_slice(&at.to_le_bytes());
            }
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
                out.extend_from_slice(&lock.fence.to_le_bytes());
                out.extend_from_slice(&lock.lease_until_ms.to_le_bytes());
            }
        }
    }

    /// Decodes what [`Register::encode`] wrote. Never panics, whatever the input.
    pub fn decode(bytes: &[u8]) -> Result<Register, DecodeError> {
        let mut r = Reader { bytes };
        let version = r.u8()?;
        if version != FORMAT_VERSION {
            return Err(DecodeError::UnknownVersion(version));
        }
        let expires_at_ms = match r.u8()? {
            0 => None,
            _ => Some(r.u64()?),
        };
        let data = match r.u8()? {
            TAG_ABSENT => Data::Absent,
            TAG_STR => Data::Str(Bytes::copy_from_slice(r.bytes()?)),
            TAG_INT => Data::Int(r.u64()? as i64),
            TAG_SET => {
                let count = r.u32()? as usize;
                let mut members = BTreeSet::new();
                let mut last: Option<&[u8]> = None;
                for _ in 0..count {
                    let m = r.bytes()?;
                    if last.is_some_and(|l| l >= m) {
                        return Err(DecodeError::UnorderedSet);
                    }
                    last = Some(m);
                    members.insert(Bytes::copy_from_slice(m));
                }
                Data::Set(members)
            }
            TAG_LOCK => {
                let owner = match r.u8()? {
                    0 => None,
                    _ => Some(Bytes::copy_from_slice(r.bytes()?)),
                };
                let fence = r.u64()?;
                let lease_until_ms = r.u64()?;
                Data::Lock(LockState {
                    owner,
                    fence,
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
            (proptest::option::of(bytes()), any::<u64>(), any::<u64>()).prop_map(
                |(owner, fence, lease_until_ms)| Data::Lock(LockState {
                    owner,
                    fence,
                    lease_until_ms
                })
            ),
        ]
    }

    proptest! {
        #[test]
        fn encode_then_decode_is_the_identity(data in data(), expires in proptest::option::of(any::<u64>())) {
            let register = Register { data, expires_at_ms: expires };
            let mut buf = Vec::new();
            register.encode(&mut buf);
            prop_assert_eq!(buf.len(), register.encoded_len());
            prop_assert_eq!(Register::decode(&buf), Ok(register));
        }

        #[test]
        fn decode_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
            let _ = Register::decode(&bytes);
        }
    }

    #[test]
    fn decode_rejects_damage_with_a_reason() {
        let mut buf = Vec::new();
        Register {
            data: Data::Str(Bytes::from_static(b"abc")),
            expires_at_ms: None,
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
    fn expiry_is_inclusive_of_its_instant() {
        let r = Register {
            data: Data::Int(1),
            expires_at_ms: Some(100),
        };
        assert!(r.is_live(99));
        assert!(!r.is_live(100));
        assert_eq!(r.live_data(100), &Data::Absent);
    }
}
