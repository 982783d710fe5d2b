//! Hash commands: a key holding fields with values, as Redis's HSET family.
use std::collections::BTreeMap;

use bytes::Bytes;

use super::collection::{answer, read, write, Edit};
use super::random::{pick, Rng};
use super::scan::{scan, ScanArgs};
use super::{parse_i64, CommandError, Limits, Outcome, Reply};
use crate::float::{format_human, parse_f64, Float};
use crate::value::{Data, Register};

type Hash = BTreeMap<Bytes, Bytes>;

/// A command on a hash.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum HashCmd {
    /// `HSET field value [field value ...]` (HMSET too, which replies OK instead): the number
    /// of fields that were new. A repeated field takes its last value.
    HSet(Vec<(Bytes, Bytes)>),
    /// `HSETNX field value`: 1 if the field was new and is set, else 0.
    HSetNx {
        /// The field.
        field: Bytes,
        /// Its value.
        value: Bytes,
    },
    /// `HGET field`: the value or nil.
    HGet(Bytes),
    /// `HMGET field ...`: each value or nil.
    HMGet(Vec<Bytes>),
    /// `HDEL field ...`: the number of fields removed.
    HDel(Vec<Bytes>),
    /// `HEXISTS field`: 1 or 0.
    HExists(Bytes),
    /// HLEN: the number of fields.
    HLen,
    /// `HSTRLEN field`: the value's length, 0 if the field is missing.
    HStrLen(Bytes),
    /// HKEYS: the fields in byte order.
    HKeys,
    /// HVALS: the values in their fields' byte order.
    HVals,
    /// HGETALL: fields and values in field byte order (a map in RESP3).
    HGetAll,
    /// `HINCRBY field delta`: the new value (a missing field counts as 0).
    HIncrBy {
        /// The field.
        field: Bytes,
        /// The increment.
        delta: i64,
    },
    /// `HINCRBYFLOAT field delta`: the new value as text (see [`format_human`]).
    HIncrByFloat {
        /// The field.
        field: Bytes,
        /// The increment.
        delta: Float,
    },
    /// `HRANDFIELD [count [WITHVALUES]]`. Without `count`: one field or nil. With a positive
    /// count: that many distinct fields (all of them if there are fewer, in field order); with
    /// a negative count: that many, repeats allowed. The choice is a function of `seed`, which
    /// the proposer draws, so every replica answers the same.
    HRandField {
        /// The count, if given.
        count: Option<i64>,
        /// WITHVALUES (only meaningful with a count; the table refuses it otherwise).
        with_values: bool,
        /// The seed of the choice.
        seed: u64,
    },
    /// `HSCAN cursor [MATCH pattern] [COUNT count] [NOVALUES]`: the next cursor and the fields
    /// visited, each followed by its value unless NOVALUES (see [`super::scan`]).
    HScan {
        /// Cursor, MATCH and COUNT.
        args: ScanArgs,
        /// NOVALUES.
        no_values: bool,
    },
}

impl HashCmd {
    /// The command's name, lowercase.
    pub fn name(&self) -> &'static str {
        match self {
            HashCmd::HSet(_) => "hset",
            HashCmd::HSetNx { .. } => "hsetnx",
            HashCmd::HGet(_) => "hget",
            HashCmd::HMGet(_) => "hmget",
            HashCmd::HDel(_) => "hdel",
            HashCmd::HExists(_) => "hexists",
            HashCmd::HLen => "hlen",
            HashCmd::HStrLen(_) => "hstrlen",
            HashCmd::HKeys => "hkeys",
            HashCmd::HVals => "hvals",
            HashCmd::HGetAll => "hgetall",
            HashCmd::HIncrBy { .. } => "hincrby",
            HashCmd::HIncrByFloat { .. } => "hincrbyfloat",
            HashCmd::HRandField { .. } => "hrandfield",
            HashCmd::HScan { .. } => "hscan",
        }
    }

    /// Whether the command only reads.
    pub fn is_read_only(&self) -> bool {
        !matches!(
            self,
            HashCmd::HSet(_)
                | HashCmd::HSetNx { .. }
                | HashCmd::HDel(_)
                | HashCmd::HIncrBy { .. }
                | HashCmd::HIncrByFloat { .. }
        )
    }

    /// Answers a read-only command on the live data.
    pub(crate) fn read(&self, data: &Data) -> Reply {
        answer(read::<Hash>(data).map(|hash| self.read_hash(hash.unwrap_or(&Hash::new()))))
    }

    fn read_hash(&self, hash: &Hash) -> Reply {
        let get = |field: &Bytes| hash.get(field).cloned().map_or(Reply::Nil, Reply::Bulk);
        match self {
            HashCmd::HGet(field) => get(field),
            HashCmd::HMGet(fields) => Reply::Items(fields.iter().map(get).collect()),
            HashCmd::HExists(field) => Reply::Int(i64::from(hash.contains_key(field))),
            HashCmd::HLen => Reply::Int(hash.len() as i64),
            HashCmd::HStrLen(field) => Reply::Int(hash.get(field).map_or(0, Bytes::len) as i64),
            HashCmd::HKeys => Reply::Array(hash.keys().cloned().collect()),
            HashCmd::HVals => Reply::Array(hash.values().cloned().collect()),
            HashCmd::HGetAll => Reply::Map(
                hash.iter()
                    .map(|(f, v)| (Reply::Bulk(f.clone()), Reply::Bulk(v.clone())))
                    .collect(),
            ),
            HashCmd::HRandField {
                count,
                with_values,
                seed,
            } => rand_field(hash, *count, *with_values, *seed),
            HashCmd::HScan { args, no_values } => {
                let (next, visited) = scan(hash.iter(), args);
                let mut flat = Vec::new();
                for (field, value) in visited {
                    flat.push(field.clone());
                    if !no_values {
                        flat.push(value.clone());
                    }
                }
                Reply::scan(next, flat)
            }
            _ => unreachable!("{} is a write", self.name()),
        }
    }

    /// Applies a write.
    pub(crate) fn write(&self, reg: &mut Register, now_ms: u64, limits: &Limits) -> Outcome {
        write::<Hash>(reg, now_ms, limits, |hash, _| self.edit(hash))
    }

    fn edit(&self, hash: &mut Hash) -> Edit {
        match self {
            HashCmd::HSet(pairs) => {
                let mut added = 0;
                let mut changed = false;
                for (field, value) in pairs {
                    match hash.insert(field.clone(), value.clone()) {
                        None => {
                            added += 1;
                            changed = true;
                        }
                        Some(old) => changed |= old != *value,
                    }
                }
                Ok((Reply::Int(added), changed))
            }
            HashCmd::HSetNx { field, value } => {
                if hash.contains_key(field) {
                    return Ok((Reply::Int(0), false));
                }
                hash.insert(field.clone(), value.clone());
                Ok((Reply::Int(1), true))
            }
            HashCmd::HDel(fields) => {
                let removed = fields.iter().filter(|f| hash.remove(*f).is_some()).count();
                Ok((Reply::Int(removed as i64), removed > 0))
            }
            HashCmd::HIncrBy { field, delta } => {
                let current = match hash.get(field) {
                    None => 0,
                    Some(v) => parse_i64(v).ok_or(CommandError::HashNotInteger)?,
                };
                let next = current.checked_add(*delta).ok_or(CommandError::Overflow)?;
                hash.insert(field.clone(), Bytes::from(next.to_string()));
                Ok((Reply::Int(next), true))
            }
            HashCmd::HIncrByFloat { field, delta } => {
                let current = match hash.get(field) {
                    None => 0.0,
                    Some(v) => parse_f64(v).ok_or(CommandError::HashNotFloat)?,
                };
                let next = current + delta.get();
                if !next.is_finite() {
                    return Err(CommandError::NanOrInfinity);
                }
                let text = Bytes::from(format_human(next));
                hash.insert(field.clone(), text.clone());
                Ok((Reply::Bulk(text), true))
            }
            _ => unreachable!("{} only reads", self.name()),
        }
    }
}

fn rand_field(hash: &Hash, count: Option<i64>, with_values: bool, seed: u64) -> Reply {
    let Some(count) = count else {
        if hash.is_empty() {
            return Reply::Nil;
        }
        let i = Rng::new(seed).below(hash.len());
        return Reply::Bulk(hash.keys().nth(i).cloned().expect("i < len"));
    };
    let fields: Vec<(&Bytes, &Bytes)> = hash.iter().collect();
    let picked = match pick(fields.len(), count, seed) {
        Ok(picked) => picked,
        Err(e) => return Reply::Error(e),
    };
    if with_values {
        Reply::Pairs(
            picked
                .into_iter()
                .map(|i| {
                    (
                        Reply::Bulk(fields[i].0.clone()),
                        Reply::Bulk(fields[i].1.clone()),
                    )
                })
                .collect(),
        )
    } else {
        Reply::Array(picked.into_iter().map(|i| fields[i].0.clone()).collect())
    }
}
