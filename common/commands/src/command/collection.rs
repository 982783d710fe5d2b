//! Reading and writing a register that holds a collection (set, hash, list, sorted set).
//!
//! Every collection command goes through [`read`] or [`write`], so the rules common to all of
//! them live here once: an absent or expired key reads as an empty collection, a key of another
//! kind answers WRONGTYPE, a write that empties the collection deletes the key (keeping its
//! fencing token), a write that creates the key starts without a time to live, and a write that
//! grows the collection past [`Limits`] is refused.
//!
//! A write edits a copy and stores it only if the command succeeded and changed something: an
//! error leaves nothing half done and an unchanged register stays bit-identical. The copy costs
//! as much as encoding the value, which every vote does anyway.
use std::collections::{BTreeMap, BTreeSet, VecDeque};

use bytes::Bytes;

use super::{CommandError, Limits, Outcome, Reply};
use crate::value::{Data, Register, ZSet};

/// A kind of value that holds elements.
pub(crate) trait Collection: Clone + Default {
    /// The collection if `data` is one of this kind.
    fn view(data: &Data) -> Option<&Self>;
    /// The collection as register data.
    fn into_data(self) -> Data;
    /// The number of elements.
    fn len(&self) -> usize;
    /// The bytes of its elements (what [`Limits::value_bytes_max`] bounds).
    fn element_bytes(&self) -> usize;
}

impl Collection for BTreeSet<Bytes> {
    fn view(data: &Data) -> Option<&Self> {
        match data {
            Data::Set(set) => Some(set),
            _ => None,
        }
    }

    fn into_data(self) -> Data {
        Data::Set(self)
    }

    fn len(&self) -> usize {
        BTreeSet::len(self)
    }

    fn element_bytes(&self) -> usize {
        self.iter().map(Bytes::len).sum()
    }
}

impl Collection for BTreeMap<Bytes, Bytes> {
    fn view(data: &Data) -> Option<&Self> {
        match data {
            Data::Hash(fields) => Some(fields),
            _ => None,
        }
    }

    fn into_data(self) -> Data {
        Data::Hash(self)
    }

    fn len(&self) -> usize {
        BTreeMap::len(self)
    }

    fn element_bytes(&self) -> usize {
        self.iter().map(|(f, v)| f.len() + v.len()).sum()
    }
}

impl Collection for VecDeque<Bytes> {
    fn view(data: &Data) -> Option<&Self> {
        match data {
            Data::List(items) => Some(items),
            _ => None,
        }
    }

    fn into_data(self) -> Data {
        Data::List(self)
    }

    fn len(&self) -> usize {
        VecDeque::len(self)
    }

    fn element_bytes(&self) -> usize {
        self.iter().map(Bytes::len).sum()
    }
}

impl Collection for ZSet {
    fn view(data: &Data) -> Option<&Self> {
        match data {
            Data::ZSet(zset) => Some(zset),
            _ => None,
        }
    }

    fn into_data(self) -> Data {
        Data::ZSet(self)
    }

    fn len(&self) -> usize {
        ZSet::len(self)
    }

    fn element_bytes(&self) -> usize {
        // A score counts as the 8 bytes it is stored in.
        self.iter().map(|(m, _)| m.len() + 8).sum()
    }
}

/// The live collection in `data` (already resolved for expiry): `None` if absent, WRONGTYPE if
/// the key holds another kind.
pub(crate) fn read<T: Collection>(data: &Data) -> Result<Option<&T>, CommandError> {
    match data {
        Data::Absent => Ok(None),
        other => T::view(other).map(Some).ok_or(CommandError::WrongType),
    }
}

/// What a write did to its copy: the reply, and whether the copy changed.
pub(crate) type Edit = Result<(Reply, bool), CommandError>;

/// Runs `edit` on a copy of the live collection (empty if the key is absent or expired) and
/// stores the copy if the edit succeeded and changed it. `exists` tells the edit whether the
/// key existed (Redis answers some commands differently for an absent key).
pub(crate) fn write<T: Collection>(
    reg: &mut Register,
    now_ms: u64,
    limits: &Limits,
    edit: impl FnOnce(&mut T, bool) -> Edit,
) -> Outcome {
    let (mut copy, exists) = match reg.live_data(now_ms) {
        Data::Absent => (T::default(), false),
        other => match T::view(other) {
            Some(current) => (current.clone(), true),
            None => return Outcome::error(CommandError::WrongType),
        },
    };
    let (before_len, before_bytes) = (copy.len(), copy.element_bytes());
    let (reply, changed) = match edit(&mut copy, exists) {
        Ok(done) => done,
        Err(e) => return Outcome::error(e),
    };
    if !changed {
        return Outcome::unchanged(reply);
    }
    if copy.len() == 0 {
        if !exists {
            return Outcome::unchanged(reply);
        }
        *reg = reg.cleared();
        return Outcome::changed(reply);
    }
    let (len, bytes) = (copy.len(), copy.element_bytes());
    let grows_past = (len > limits.set_members_max && len > before_len)
        || (bytes > limits.value_bytes_max && bytes > before_bytes);
    if grows_past {
        return Outcome::error(CommandError::ValueTooLarge);
    }
    if exists {
        reg.data = copy.into_data();
    } else {
        *reg = Register {
            data: copy.into_data(),
            expires_at_ms: None,
            fence: reg.fence,
        };
    }
    Outcome::changed(reply)
}

/// The reply of a read: the error as a reply.
pub(crate) fn answer(result: Result<Reply, CommandError>) -> Reply {
    result.unwrap_or_else(Reply::Error)
}
