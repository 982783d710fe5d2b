//! The set commands that go beyond SADD and SMEMBERS: SPOP, SRANDMEMBER, SMISMEMBER, SSCAN.
use std::collections::BTreeSet;

use bytes::Bytes;

use super::collection::{answer, read, write};
use super::random::{pick, Rng};
use super::scan::{scan, ScanArgs};
use super::{Limits, Outcome, Reply};
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
