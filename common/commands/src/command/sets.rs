//! Set commands that write (SADD, SREM, SPOP) and read beyond SMEMBERS (SRANDMEMBER,
//! SMISMEMBER, SSCAN).
use std::collections::BTreeSet;

use bytes::Bytes;

use super::collection::{answer, read, write};
use super::random::{pick, Rng};
use super::scan::{scan, ScanArgs};
use super::{CommandError, Limits, Outcome, Reply};
use crate::value::{Data, Register};

type Set = BTreeSet<Bytes>;

/// SPOP `[count]`: without a count, one random member or nil; with one, up to `count` random
/// members (all of them, and the key deleted, if there are not more), an empty array if the key
/// is absent. The choice is a function of `seed`.
pub(crate) fn spop(
    count: Option<u64>,
    seed: u64,
    reg: &mut Register,
    now_ms: u64,
    limits: &Limits,
) -> Outcome {
    write::<Set>(reg, now_ms, limits, |set, _| {
        let members: Vec<Bytes> = set.iter().cloned().collect();
        let Some(count) = count else {
            if members.is_empty() {
                return Ok((Reply::Nil, false));
            }
            let member = members[Rng::new(seed).below(members.len())].clone();
            set.remove(&member);
            return Ok((Reply::Bulk(member), true));
        };
        let count = i64::try_from(count).unwrap_or(i64::MAX);
        let popped: Vec<Bytes> = pick(members.len(), count, seed)?
            .into_iter()
            .map(|i| members[i].clone())
            .collect();
        for member in &popped {
            set.remove(member);
        }
        let changed = !popped.is_empty();
        Ok((Reply::Array(popped), changed))
    })
}

/// SRANDMEMBER `[count]`: as SPOP without removing; a negative count allows repeats.
pub(crate) fn srandmember(count: Option<i64>, seed: u64, data: &Data) -> Reply {
    answer(read::<Set>(data).and_then(|set| {
        let members: Vec<&Bytes> = set.into_iter().flatten().collect();
        let Some(count) = count else {
            return Ok(match members.len() {
                0 => Reply::Nil,
                n => Reply::Bulk(members[Rng::new(seed).below(n)].clone()),
            });
        };
        let picked = pick(members.len(), count, seed)?;
        Ok(Reply::Array(
            picked.into_iter().map(|i| members[i].clone()).collect(),
        ))
    }))
}

/// SMISMEMBER: 1 or 0 for each member.
pub(crate) fn smismember(members: &[Bytes], data: &Data) -> Reply {
    answer(read::<Set>(data).map(|set| {
        let contains = |m: &Bytes| set.is_some_and(|s| s.contains(m));
        Reply::Items(
            members
                .iter()
                .map(|m| Reply::Int(i64::from(contains(m))))
                .collect(),
        )
    }))
}

/// SSCAN: the next cursor and the members visited.
pub(crate) fn sscan(args: &ScanArgs, data: &Data) -> Reply {
    answer(read::<Set>(data).map(|set| {
        let (next, visited) = scan(set.into_iter().flatten().map(|m| (m, ())), args);
        Reply::scan(next, visited.into_iter().map(|(m, ())| m.clone()).collect())
    }))
}

pub(super) fn set_bytes(members: &BTreeSet<Bytes>) -> usize {
    members.iter().map(Bytes::len).sum()
}

pub(super) fn sadd(
    members: &[Bytes],
    reg: &mut Register,
    expired: bool,
    limits: &Limits,
) -> Outcome {
    if expired || reg.data == Data::Absent {
        let set: BTreeSet<Bytes> = members.iter().cloned().collect();
        if set.len() > limits.set_members_max || set_bytes(&set) > limits.value_bytes_max {
            return Outcome::error(CommandError::ValueTooLarge);
        }
        let added = set.len() as i64;
        *reg = Register {
            data: Data::Set(set),
            expires_at_ms: None,
            fence: reg.fence,
        };
        return Outcome::changed(Reply::Int(added));
    }
    let Data::Set(set) = &mut reg.data else {
        return Outcome::error(CommandError::WrongType);
    };
    let new: BTreeSet<&Bytes> = members.iter().filter(|m| !set.contains(*m)).collect();
    if new.is_empty() {
        return Outcome::unchanged(Reply::Int(0));
    }
    let bytes = set_bytes(set) + new.iter().map(|m| m.len()).sum::<usize>();
    if set.len() + new.len() > limits.set_members_max || bytes > limits.value_bytes_max {
        return Outcome::error(CommandError::ValueTooLarge);
    }
    let added = new.len() as i64;
    for m in new {
        set.insert(m.clone());
    }
    Outcome::changed(Reply::Int(added))
}

pub(super) fn srem(members: &[Bytes], reg: &mut Register, expired: bool) -> Outcome {
    if expired || reg.data == Data::Absent {
        return Outcome::unchanged(Reply::Int(0));
    }
    let Data::Set(set) = &mut reg.data else {
        return Outcome::error(CommandError::WrongType);
    };
    let removed = members.iter().filter(|m| set.remove(*m)).count() as i64;
    if removed == 0 {
        return Outcome::unchanged(Reply::Int(0));
    }
    if set.is_empty() {
        *reg = reg.cleared();
    }
    Outcome::changed(Reply::Int(removed))
}
