//! List commands: a key holding a sequence of strings, as Redis's LPUSH family.
//!
//! Indexes follow Redis: 0 is the head, -1 the tail, and ranges are clamped to the list.
use std::collections::VecDeque;
use std::num::NonZeroI64;

use bytes::Bytes;

use super::collection::{answer, read, write, Edit};
use super::{CommandError, Limits, Outcome, Reply};
use crate::value::{Data, Register};

type List = VecDeque<Bytes>;

/// An end of a list: LEFT is the head, RIGHT the tail.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ListEnd {
    /// The head (LPUSH, LPOP).
    Left,
    /// The tail (RPUSH, RPOP).
    Right,
}

/// A command on a list.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ListCmd {
    /// LPUSH, RPUSH, LPUSHX and RPUSHX: push each value in turn at `end`; the new length
    /// (0 without effect when `only_if_exists` and the key is absent).
    Push {
        /// Where to push.
        end: ListEnd,
        /// The values, in the order given.
        values: Vec<Bytes>,
        /// The X variants: only push to an existing list.
        only_if_exists: bool,
    },
    /// LPOP and RPOP `[count]`. Without a count: the element or nil. With one: an array of
    /// up to `count` elements, a null array if the key is absent.
    Pop {
        /// Where to pop.
        end: ListEnd,
        /// The count, if given (the table refuses negative ones).
        count: Option<u64>,
    },
    /// LLEN.
    Len,
    /// `LRANGE start stop`: the elements from `start` to `stop`, both included.
    Range {
        /// First index.
        start: i64,
        /// Last index.
        stop: i64,
    },
    /// `LINDEX index`: the element or nil.
    Index(i64),
    /// `LSET index value`: OK, `ERR no such key` or `ERR index out of range`.
    Set {
        /// The index.
        index: i64,
        /// The new element.
        value: Bytes,
    },
    /// `LINSERT BEFORE|AFTER pivot value`: the new length, -1 without the pivot, 0 without
    /// the key.
    Insert {
        /// BEFORE (else AFTER).
        before: bool,
        /// The first element equal to this one is the pivot.
        pivot: Bytes,
        /// What to insert.
        value: Bytes,
    },
    /// `LREM count value`: removes up to `count` elements equal to `value` from the head
    /// (from the tail if negative, all if 0); the number removed.
    Rem {
        /// How many, and from which end.
        count: i64,
        /// The element to remove.
        value: Bytes,
    },
    /// `LTRIM start stop`: keeps only that range; OK.
    Trim {
        /// First index kept.
        start: i64,
        /// Last index kept.
        stop: i64,
    },
    /// `LPOS element [RANK rank] [COUNT count] [MAXLEN len]`: the index of the `rank`th match
    /// (from the tail if negative), or with a count an array of up to `count` indexes (all if
    /// 0); at most `max_len` elements are compared (all if 0).
    Pos {
        /// The element looked for.
        value: Bytes,
        /// RANK (default 1).
        rank: NonZeroI64,
        /// COUNT, if given.
        count: Option<u64>,
        /// MAXLEN (default 0).
        max_len: u64,
    },
    /// LMOVE and RPOPLPUSH with the source as destination: pops at `from`, pushes at `to`;
    /// the element moved, or nil.
    Move {
        /// Where to pop.
        from: ListEnd,
        /// Where to push.
        to: ListEnd,
    },
}

impl ListCmd {
    /// The command's name, lowercase.
    pub fn name(&self) -> &'static str {
        match self {
            ListCmd::Push {
                end: ListEnd::Left,
                only_if_exists: false,
                ..
            } => "lpush",
            ListCmd::Push {
                end: ListEnd::Right,
                only_if_exists: false,
                ..
            } => "rpush",
            ListCmd::Push {
                end: ListEnd::Left, ..
            } => "lpushx",
            ListCmd::Push { .. } => "rpushx",
            ListCmd::Pop {
                end: ListEnd::Left, ..
            } => "lpop",
            ListCmd::Pop { .. } => "rpop",
            ListCmd::Len => "llen",
            ListCmd::Range { .. } => "lrange",
            ListCmd::Index(_) => "lindex",
            ListCmd::Set { .. } => "lset",
            ListCmd::Insert { .. } => "linsert",
            ListCmd::Rem { .. } => "lrem",
            ListCmd::Trim { .. } => "ltrim",
            ListCmd::Pos { .. } => "lpos",
            ListCmd::Move { .. } => "lmove",
        }
    }

    /// Whether the command only reads.
    pub fn is_read_only(&self) -> bool {
        matches!(
            self,
            ListCmd::Len | ListCmd::Range { .. } | ListCmd::Index(_) | ListCmd::Pos { .. }
        )
    }

    /// Answers a read-only command on the live data.
    pub(crate) fn read(&self, data: &Data) -> Reply {
        answer(read::<List>(data).map(|list| self.read_list(list)))
    }

    fn read_list(&self, list: Option<&List>) -> Reply {
        let empty = List::new();
        let items = list.unwrap_or(&empty);
        match self {
            ListCmd::Len => Reply::Int(items.len() as i64),
            ListCmd::Range { start, stop } => Reply::Array(
                range(items.len(), *start, *stop)
                    .map(|r| items.range(r).cloned().collect())
                    .unwrap_or_default(),
            ),
            ListCmd::Index(index) => {
                index_of(items.len(), *index).map_or(Reply::Nil, |i| Reply::Bulk(items[i].clone()))
            }
            ListCmd::Pos {
                value,
                rank,
                count,
                max_len,
            } => {
                let found = positions(items, value, *rank, *count, *max_len);
                match count {
                    Some(_) => Reply::Items(found.into_iter().map(Reply::Int).collect()),
                    None => found.first().map_or(Reply::Nil, |i| Reply::Int(*i)),
                }
            }
            _ => unreachable!("{} is a write", self.name()),
        }
    }

    /// Applies a write.
    pub(crate) fn write(&self, reg: &mut Register, now_ms: u64, limits: &Limits) -> Outcome {
        write::<List>(reg, now_ms, limits, |list, exists| self.edit(list, exists))
    }

    fn edit(&self, list: &mut List, exists: bool) -> Edit {
        match self {
            ListCmd::Push {
                end,
                values,
                only_if_exists,
            } => {
                if *only_if_exists && !exists {
                    return Ok((Reply::Int(0), false));
                }
                for value in values {
                    push(list, *end, value.clone());
                }
                Ok((Reply::Int(list.len() as i64), !values.is_empty()))
            }
            ListCmd::Pop { end, count } => Ok(pop(list, exists, *end, *count)),
            ListCmd::Set { index, value } => {
                if !exists {
                    return Err(CommandError::NoSuchKey);
                }
                let i = index_of(list.len(), *index).ok_or(CommandError::IndexOutOfRange)?;
                let changed = list[i] != *value;
                list[i] = value.clone();
                Ok((Reply::Ok, changed))
            }
            ListCmd::Insert {
                before,
                pivot,
                value,
            } => {
                if !exists {
                    return Ok((Reply::Int(0), false));
                }
                let Some(at) = list.iter().position(|item| item == pivot) else {
                    return Ok((Reply::Int(-1), false));
                };
                list.insert(if *before { at } else { at + 1 }, value.clone());
                Ok((Reply::Int(list.len() as i64), true))
            }
            ListCmd::Rem { count, value } => {
                let removed = remove(list, *count, value);
                Ok((Reply::Int(removed as i64), removed > 0))
            }
            ListCmd::Trim { start, stop } => {
                let len = list.len();
                match range(len, *start, *stop) {
                    Some(keep) => {
                        list.truncate(keep.end);
                        list.drain(..keep.start);
                    }
                    None => list.clear(),
                }
                Ok((Reply::Ok, list.len() != len))
            }
            ListCmd::Move { from, to } => {
                let Some(item) = pop_one(list, *from) else {
                    return Ok((Reply::Nil, false));
                };
                push(list, *to, item.clone());
                // Moving within one list changes it unless it is a rotation that lands where
                // it started: the same end, or all elements alike.
                let changed = from != to && list.iter().any(|other| *other != item);
                Ok((Reply::Bulk(item), changed))
            }
            _ => unreachable!("{} only reads", self.name()),
        }
    }
}

fn push(list: &mut List, end: ListEnd, value: Bytes) {
    match end {
        ListEnd::Left => list.push_front(value),
        ListEnd::Right => list.push_back(value),
    }
}

fn pop_one(list: &mut List, end: ListEnd) -> Option<Bytes> {
    match end {
        ListEnd::Left => list.pop_front(),
        ListEnd::Right => list.pop_back(),
    }
}

fn pop(list: &mut List, exists: bool, end: ListEnd, count: Option<u64>) -> (Reply, bool) {
    let Some(count) = count else {
        return match pop_one(list, end) {
            Some(item) => (Reply::Bulk(item), true),
            None => (Reply::Nil, false),
        };
    };
    if !exists {
        return (Reply::NilArray, false);
    }
    let n = usize::try_from(count).unwrap_or(usize::MAX).min(list.len());
    let popped: Vec<Bytes> = (0..n).filter_map(|_| pop_one(list, end)).collect();
    (Reply::Array(popped), n > 0)
}

/// The index range Redis's LRANGE and LTRIM select in a list of `len`, or `None` if empty.
fn range(len: usize, start: i64, stop: i64) -> Option<std::ops::Range<usize>> {
    let len = len as i64;
    let start = if start < 0 {
        (len + start).max(0)
    } else {
        start
    };
    let stop = if stop < 0 { len + stop } else { stop };
    if start > stop || start >= len {
        return None;
    }
    Some(start as usize..(stop.min(len - 1) + 1) as usize)
}

/// The position of Redis index `index` (negative from the tail) in a list of `len`.
fn index_of(len: usize, index: i64) -> Option<usize> {
    let len = len as i64;
    let i = if index < 0 { len + index } else { index };
    (0..len).contains(&i).then_some(i as usize)
}

fn remove(list: &mut List, count: i64, value: &Bytes) -> usize {
    let limit = if count == 0 {
        usize::MAX
    } else {
        usize::try_from(count.unsigned_abs()).unwrap_or(usize::MAX)
    };
    let mut removed = 0;
    let mut keep = |item: &Bytes| {
        let drop = removed < limit && item == value;
        removed += usize::from(drop);
        !drop
    };
    if count >= 0 {
        list.retain(|item| keep(item));
    } else {
        // From the tail: decide in reverse order, then keep in order.
        let kept: Vec<bool> = list.iter().rev().map(&mut keep).collect();
        let mut kept = kept.into_iter().rev();
        list.retain(|_| kept.next().expect("one decision per element"));
    }
    removed
}

fn positions(
    list: &List,
    value: &Bytes,
    rank: NonZeroI64,
    count: Option<u64>,
    max_len: u64,
) -> Vec<i64> {
    let len = list.len();
    let compared = if max_len == 0 {
        len
    } else {
        usize::try_from(max_len).unwrap_or(usize::MAX).min(len)
    };
    let wanted = match count {
        None => 1,
        Some(0) => usize::MAX,
        Some(n) => usize::try_from(n).unwrap_or(usize::MAX),
    };
    let skip = usize::try_from(rank.get().unsigned_abs() - 1).unwrap_or(usize::MAX);
    let indexes: Box<dyn Iterator<Item = usize>> = if rank.get() > 0 {
        Box::new(0..compared)
    } else {
        Box::new((len - compared..len).rev())
    };
    indexes
        .filter(|&i| list[i] == *value)
        .skip(skip)
        .take(wanted)
        .map(|i| i as i64)
        .collect()
}
