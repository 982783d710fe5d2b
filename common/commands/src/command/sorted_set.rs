//! Sorted-set commands: a key holding members with scores, as Redis's ZADD family.
use bytes::Bytes;

use super::collection::{answer, read, write, Edit};
use super::scan::{scan, ScanArgs};
use super::{CommandError, Limits, Outcome, Reply};
use crate::float::Float;
use crate::value::{Data, Register, ZSet};

/// A command on a sorted set.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ZSetCmd {
    /// `ZADD [NX|XX] [GT|LT] [CH] [INCR] score member ...`: the number of members added (or
    /// added and updated with CH); with INCR, the new score or nil if a condition refused it.
    Add {
        /// The scores and members, in the order given.
        members: Vec<(Float, Bytes)>,
        /// The options.
        flags: ZAddFlags,
    },
    /// `ZREM member ...`: the number removed.
    Rem(Vec<Bytes>),
    /// `ZSCORE member`: the score or nil.
    Score(Bytes),
    /// `ZMSCORE member ...`: each score or nil.
    MScore(Vec<Bytes>),
    /// `ZINCRBY delta member`: the new score.
    IncrBy {
        /// The increment.
        delta: Float,
        /// The member (created with score `delta` if missing).
        member: Bytes,
    },
    /// ZCARD.
    Card,
    /// `ZCOUNT min max`: the number of members with a score in the range.
    Count {
        /// The lower bound.
        min: ScoreBound,
        /// The upper bound.
        max: ScoreBound,
    },
    /// ZRANK and ZREVRANK `member [WITHSCORE]`: the 0-based rank (and the score), or nil.
    Rank {
        /// The member.
        member: Bytes,
        /// ZREVRANK: rank from the highest score.
        rev: bool,
        /// WITHSCORE.
        with_score: bool,
    },
    /// ZRANGE in all its forms.
    Range(ZRange),
    /// ZPOPMIN and ZPOPMAX `[count]`: without a count, a flat `[member, score]` (empty if the
    /// key is absent); with one, up to `count` pairs.
    Pop {
        /// ZPOPMAX (highest scores first), else ZPOPMIN.
        max: bool,
        /// The count, if given (the table refuses negative ones).
        count: Option<u64>,
    },
    /// `ZSCAN cursor [MATCH pattern] [COUNT count]`: the next cursor and the members visited,
    /// each followed by its score as text.
    Scan(ScanArgs),
}

/// The options of ZADD.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ZAddFlags {
    /// NX: only add new members.
    pub nx: bool,
    /// XX: only update existing members.
    pub xx: bool,
    /// GT: only update to a greater score.
    pub gt: bool,
    /// LT: only update to a lower score.
    pub lt: bool,
    /// CH: count updated members too.
    pub ch: bool,
    /// INCR: increment (one pair only) and reply the new score.
    pub incr: bool,
}

impl ZAddFlags {
    /// Redis's checks of the options, in its order, for `pairs` score/member pairs.
    pub fn check(&self, pairs: usize) -> Result<(), CommandError> {
        if self.nx && self.xx {
            return Err(CommandError::ZAddNxXx);
        }
        if [self.gt, self.lt, self.nx].iter().filter(|on| **on).count() > 1 {
            return Err(CommandError::ZAddGtLtNx);
        }
        if self.incr && pairs > 1 {
            return Err(CommandError::ZAddIncrPairs);
        }
        Ok(())
    }
}

/// A score bound of ZCOUNT and ZRANGE BYSCORE: `1.5`, `(1.5` (exclusive), `-inf`, `+inf`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ScoreBound {
    /// The score.
    pub score: Float,
    /// Whether the score itself is excluded.
    pub exclusive: bool,
}

impl ScoreBound {
    /// Parses a bound as Redis does.
    pub fn parse(text: &[u8]) -> Result<ScoreBound, CommandError> {
        let (exclusive, number) = match text.split_first() {
            Some((b'(', rest)) => (true, rest),
            _ => (false, text),
        };
        let score = Float::parse(number).ok_or(CommandError::MinMaxNotFloat)?;
        Ok(ScoreBound { score, exclusive })
    }

    fn below(&self, score: Float) -> bool {
        if self.exclusive {
            self.score < score
        } else {
            self.score <= score
        }
    }

    fn above(&self, score: Float) -> bool {
        if self.exclusive {
            score < self.score
        } else {
            score <= self.score
        }
    }
}

/// A member bound of ZRANGE BYLEX: `-`, `+`, `[member` (inclusive), `(member` (exclusive).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum LexBound {
    /// `-`: below every member.
    Min,
    /// `+`: above every member.
    Max,
    /// `[member`.
    Inclusive(Bytes),
    /// `(member`.
    Exclusive(Bytes),
}

impl LexBound {
    /// Parses a bound as Redis does.
    pub fn parse(text: &Bytes) -> Result<LexBound, CommandError> {
        match text.first() {
            Some(b'-') if text.len() == 1 => Ok(LexBound::Min),
            Some(b'+') if text.len() == 1 => Ok(LexBound::Max),
            Some(b'[') => Ok(LexBound::Inclusive(text.slice(1..))),
            Some(b'(') => Ok(LexBound::Exclusive(text.slice(1..))),
            _ => Err(CommandError::MinMaxNotLex),
        }
    }

    /// Where `member` lies relative to the bound as a lower bound: true if at or above it.
    fn below(&self, member: &[u8]) -> bool {
        match self {
            LexBound::Min => true,
            LexBound::Max => false,
            LexBound::Inclusive(b) => &b[..] <= member,
            LexBound::Exclusive(b) => &b[..] < member,
        }
    }

    /// As an upper bound: true if `member` is at or below it.
    fn above(&self, member: &[u8]) -> bool {
        match self {
            LexBound::Min => false,
            LexBound::Max => true,
            LexBound::Inclusive(b) => member <= &b[..],
            LexBound::Exclusive(b) => member < &b[..],
        }
    }
}

/// What ZRANGE selects.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ZRangeBy {
    /// By rank (the default): `start` to `stop`, both included, negative from the end.
    Index {
        /// First rank.
        start: i64,
        /// Last rank.
        stop: i64,
    },
    /// BYSCORE. The bounds are the lower and the upper one whatever the direction: with REV the
    /// table swaps the arguments, which Redis takes as `max min`.
    Score {
        /// The lower bound.
        min: ScoreBound,
        /// The upper bound.
        max: ScoreBound,
    },
    /// BYLEX, with the bounds as for [`ZRangeBy::Score`]. Meant for members of equal score.
    Lex {
        /// The lower bound.
        min: LexBound,
        /// The upper bound.
        max: LexBound,
    },
}

/// The arguments of ZRANGE (and of ZRANGEBYSCORE, ZREVRANGE and the like).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ZRange {
    /// What to select.
    pub by: ZRangeBy,
    /// REV: highest score first.
    pub rev: bool,
    /// LIMIT offset count (BYSCORE and BYLEX only): skip `offset` (a negative offset selects
    /// nothing), then take `count` (all if negative).
    pub limit: Option<(i64, i64)>,
    /// WITHSCORES.
    pub with_scores: bool,
}

impl ZSetCmd {
    /// The command's name, lowercase.
    pub fn name(&self) -> &'static str {
        match self {
            ZSetCmd::Add { .. } => "zadd",
            ZSetCmd::Rem(_) => "zrem",
            ZSetCmd::Score(_) => "zscore",
            ZSetCmd::MScore(_) => "zmscore",
            ZSetCmd::IncrBy { .. } => "zincrby",
            ZSetCmd::Card => "zcard",
            ZSetCmd::Count { .. } => "zcount",
            ZSetCmd::Rank { rev: false, .. } => "zrank",
            ZSetCmd::Rank { rev: true, .. } => "zrevrank",
            ZSetCmd::Range(_) => "zrange",
            ZSetCmd::Pop { max: false, .. } => "zpopmin",
            ZSetCmd::Pop { max: true, .. } => "zpopmax",
            ZSetCmd::Scan(_) => "zscan",
        }
    }

    /// Whether the command only reads.
    pub fn is_read_only(&self) -> bool {
        !matches!(
            self,
            ZSetCmd::Add { .. } | ZSetCmd::Rem(_) | ZSetCmd::IncrBy { .. } | ZSetCmd::Pop { .. }
        )
    }

    /// Answers a read-only command on the live data.
    pub(crate) fn read(&self, data: &Data) -> Reply {
        answer(read::<ZSet>(data).map(|zset| self.read_zset(zset)))
    }

    fn read_zset(&self, zset: Option<&ZSet>) -> Reply {
        let empty = ZSet::default();
        let z = zset.unwrap_or(&empty);
        let score = |m: &Bytes| z.score(m).map_or(Reply::Nil, Reply::Double);
        match self {
            ZSetCmd::Score(member) => score(member),
            ZSetCmd::MScore(members) => Reply::Items(members.iter().map(score).collect()),
            ZSetCmd::Card => Reply::Int(z.len() as i64),
            ZSetCmd::Count { min, max } => Reply::Int(
                z.iter()
                    .filter(|(_, s)| min.below(*s) && max.above(*s))
                    .count() as i64,
            ),
            ZSetCmd::Rank {
                member,
                rev,
                with_score,
            } => match (z.rank(member), z.score(member)) {
                (Some(rank), Some(s)) => {
                    let rank = if *rev { z.len() - 1 - rank } else { rank };
                    let rank = Reply::Int(rank as i64);
                    if *with_score {
                        Reply::Items(vec![rank, Reply::Double(s)])
                    } else {
                        rank
                    }
                }
                _ if *with_score => Reply::NilArray,
                _ => Reply::Nil,
            },
            ZSetCmd::Range(args) => range(z, args),
            ZSetCmd::Scan(args) => {
                let (next, visited) = scan(z.by_member(), args);
                let mut flat = Vec::new();
                for (member, s) in visited {
                    flat.push(member.clone());
                    flat.push(s.text());
                }
                Reply::scan(next, flat)
            }
            _ => unreachable!("{} is a write", self.name()),
        }
    }

    /// Applies a write.
    pub(crate) fn write(&self, reg: &mut Register, now_ms: u64, limits: &Limits) -> Outcome {
        if let ZSetCmd::Add { members, flags } = self {
            // The options are checked before the key, as Redis does.
            if let Err(e) = flags.check(members.len()) {
                return Outcome::error(e);
            }
        }
        write::<ZSet>(reg, now_ms, limits, |zset, exists| self.edit(zset, exists))
    }

    fn edit(&self, zset: &mut ZSet, exists: bool) -> Edit {
        match self {
            ZSetCmd::Add { members, flags } => {
                if flags.xx && !exists {
                    let reply = if flags.incr {
                        Reply::Nil
                    } else {
                        Reply::Int(0)
                    };
                    return Ok((reply, false));
                }
                add(zset, members, *flags)
            }
            ZSetCmd::IncrBy { delta, member } => {
                let flags = ZAddFlags {
                    incr: true,
                    ..ZAddFlags::default()
                };
                add(zset, &[(*delta, member.clone())], flags)
            }
            ZSetCmd::Rem(members) => {
                let removed = members.iter().filter(|m| zset.remove(m).is_some()).count();
                Ok((Reply::Int(removed as i64), removed > 0))
            }
            ZSetCmd::Pop { max, count } => Ok(pop(zset, *max, *count)),
            _ => unreachable!("{} only reads", self.name()),
        }
    }
}

/// ZADD's loop over its pairs (Redis's `zsetAdd` for each).
fn add(zset: &mut ZSet, members: &[(Float, Bytes)], flags: ZAddFlags) -> Edit {
    let (mut added, mut updated, mut processed) = (0, 0, 0);
    let mut last = None;
    for (score, member) in members {
        let Some(current) = zset.score(member) else {
            if !flags.xx {
                zset.insert(member.clone(), *score);
                added += 1;
                processed += 1;
                last = Some(*score);
            }
            continue;
        };
        if flags.nx {
            continue;
        }
        let next = if flags.incr {
            Float::new(current.get() + score.get()).ok_or(CommandError::ScoreNaN)?
        } else {
            *score
        };
        if (flags.lt && next >= current) || (flags.gt && next <= current) {
            continue;
        }
        processed += 1;
        last = Some(next);
        if next != current {
            zset.insert(member.clone(), next);
            updated += 1;
        }
    }
    let changed = added + updated > 0;
    let reply = if flags.incr {
        match last {
            Some(score) if processed > 0 => Reply::Double(score),
            _ => Reply::Nil,
        }
    } else if flags.ch {
        Reply::Int(added + updated)
    } else {
        Reply::Int(added)
    };
    Ok((reply, changed))
}

fn pop(zset: &mut ZSet, max: bool, count: Option<u64>) -> (Reply, bool) {
    let n = count
        .map_or(1, |c| usize::try_from(c).unwrap_or(usize::MAX))
        .min(zset.len());
    let picked: Vec<(Bytes, Float)> = if max {
        zset.iter()
            .rev()
            .take(n)
            .map(|(m, s)| (m.clone(), s))
            .collect()
    } else {
        zset.iter().take(n).map(|(m, s)| (m.clone(), s)).collect()
    };
    for (member, _) in &picked {
        zset.remove(member);
    }
    let changed = !picked.is_empty();
    let reply = match count {
        None => Reply::Items(
            picked
                .into_iter()
                .flat_map(|(m, s)| [Reply::Bulk(m), Reply::Double(s)])
                .collect(),
        ),
        Some(_) => Reply::Pairs(
            picked
                .into_iter()
                .map(|(m, s)| (Reply::Bulk(m), Reply::Double(s)))
                .collect(),
        ),
    };
    (reply, changed)
}

fn range(z: &ZSet, args: &ZRange) -> Reply {
    let ordered: Box<dyn Iterator<Item = (&Bytes, Float)>> = if args.rev {
        Box::new(z.iter().rev())
    } else {
        Box::new(z.iter())
    };
    let selected: Vec<(&Bytes, Float)> = match &args.by {
        ZRangeBy::Index { start, stop } => {
            let len = z.len() as i64;
            let start = if *start < 0 {
                (len + start).max(0)
            } else {
                *start
            };
            let stop = if *stop < 0 { len + stop } else { *stop };
            if start > stop || start >= len {
                Vec::new()
            } else {
                let take = (stop.min(len - 1) - start + 1) as usize;
                ordered.skip(start as usize).take(take).collect()
            }
        }
        ZRangeBy::Score { min, max } => limit(
            ordered
                .skip_while(|(_, s)| !in_score_range(min, max, *s, args.rev))
                .take_while(|(_, s)| min.below(*s) && max.above(*s)),
            args.limit,
        ),
        ZRangeBy::Lex { min, max } => limit(
            ordered
                .skip_while(|(m, _)| !in_lex_start(min, max, m, args.rev))
                .take_while(|(m, _)| min.below(m) && max.above(m)),
            args.limit,
        ),
    };
    if args.with_scores {
        Reply::Pairs(
            selected
                .into_iter()
                .map(|(m, s)| (Reply::Bulk(m.clone()), Reply::Double(s)))
                .collect(),
        )
    } else {
        Reply::Array(selected.into_iter().map(|(m, _)| m.clone()).collect())
    }
}

/// Whether iteration (ascending unless `rev`) has reached the score range: past the bound it
/// starts from.
fn in_score_range(min: &ScoreBound, max: &ScoreBound, s: Float, rev: bool) -> bool {
    if rev {
        max.above(s)
    } else {
        min.below(s)
    }
}

/// As [`in_score_range`] for member bounds.
fn in_lex_start(min: &LexBound, max: &LexBound, m: &[u8], rev: bool) -> bool {
    if rev {
        max.above(m)
    } else {
        min.below(m)
    }
}

fn limit<'a>(
    items: impl Iterator<Item = (&'a Bytes, Float)>,
    limit: Option<(i64, i64)>,
) -> Vec<(&'a Bytes, Float)> {
    match limit {
        None => items.collect(),
        Some((offset, _)) if offset < 0 => Vec::new(),
        Some((offset, count)) => {
            let take = usize::try_from(count).unwrap_or(usize::MAX);
            items.skip(offset as usize).take(take).collect()
        }
    }
}
