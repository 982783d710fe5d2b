//! The binary encoding of single-key [`Command`]s, which the commands crate does not have (the
//! per-key engine ships register values, never commands; the log engine ships commands).
//!
//! Little-endian throughout: integers as u64/i64, floats as the bits of their f64, byte strings
//! as u32 length then bytes, vectors as u32 count then elements, options and booleans as one
//! byte (0 or 1), every enum as a one-byte tag. The layout follows the declarations in
//! `logless_commands::command` field by field; [`put_command`] and [`decode_command`] are the
//! specification. Decoding never panics, trusts no count beyond the bytes left and refuses a
//! transaction nested deeper than [`COMMAND_DEPTH_MAX`].
use std::num::NonZeroI64;

use bytes::Bytes;
use logless_commands::command::{
    Command, Condition, ExpireArgs, ExpireFlags, ExpireKind, Expiry, HashCmd, LexBound, ListCmd,
    ListEnd, ScanArgs, ScoreBound, SetArgs, ZAddFlags, ZRange, ZRangeBy, ZSetCmd,
};
use logless_commands::float::Float;

pub use crate::wire::DecodeError;
pub(crate) use crate::wire::{put_bytes, put_count, put_u64, Reader};

/// How deeply single-key transactions may nest (`Command::Transaction` inside one): Redis has
/// no nesting at all; one level more than it needs keeps decoding's recursion bounded.
pub const COMMAND_DEPTH_MAX: usize = 2;

// ---- Writing ----

pub(crate) fn put_bool(out: &mut Vec<u8>, v: bool) {
    out.push(u8::from(v));
}

pub(crate) fn put_i64(out: &mut Vec<u8>, v: i64) {
    out.extend_from_slice(&v.to_le_bytes());
}

pub(crate) fn put_float(out: &mut Vec<u8>, v: Float) {
    put_u64(out, v.get().to_bits());
}

pub(crate) fn put_list(out: &mut Vec<u8>, items: &[Bytes]) {
    put_count(out, items.len());
    for item in items {
        put_bytes(out, item);
    }
}

fn put_opt_u64(out: &mut Vec<u8>, v: Option<u64>) {
    match v {
        None => out.push(0),
        Some(v) => {
            out.push(1);
            put_u64(out, v);
        }
    }
}

fn put_opt_i64(out: &mut Vec<u8>, v: Option<i64>) {
    put_opt_u64(out, v.map(|v| v as u64));
}

fn put_end(out: &mut Vec<u8>, end: ListEnd) {
    put_bool(out, end == ListEnd::Right);
}

fn put_scan(out: &mut Vec<u8>, args: &ScanArgs) {
    put_u64(out, args.cursor);
    match &args.pattern {
        None => out.push(0),
        Some(p) => {
            out.push(1);
            put_bytes(out, p);
        }
    }
    put_u64(out, args.count);
}

fn put_score_bound(out: &mut Vec<u8>, b: &ScoreBound) {
    put_float(out, b.score);
    put_bool(out, b.exclusive);
}

fn put_lex_bound(out: &mut Vec<u8>, b: &LexBound) {
    match b {
        LexBound::Min => out.push(0),
        LexBound::Max => out.push(1),
        LexBound::Inclusive(m) => {
            out.push(2);
            put_bytes(out, m);
        }
        LexBound::Exclusive(m) => {
            out.push(3);
            put_bytes(out, m);
        }
    }
}

fn put_expiry(out: &mut Vec<u8>, e: Expiry) {
    match e {
        Expiry::Clear => out.push(0),
        Expiry::Keep => out.push(1),
        Expiry::AfterMs(ms) => {
            out.push(2);
            put_u64(out, ms);
        }
        Expiry::AtMs(ms) => {
            out.push(3);
            put_u64(out, ms);
        }
    }
}

fn put_condition(out: &mut Vec<u8>, c: &Condition) {
    match c {
        Condition::Always => out.push(0),
        Condition::Nx => out.push(1),
        Condition::Xx => out.push(2),
        Condition::IfEq(v) => {
            out.push(3);
            put_bytes(out, v);
        }
        Condition::IfNe(v) => {
            out.push(4);
            put_bytes(out, v);
        }
        Condition::IfDigestEq(d) => {
            out.push(5);
            put_u64(out, *d);
        }
        Condition::IfDigestNe(d) => {
            out.push(6);
            put_u64(out, *d);
        }
    }
}

/// Decodes one command that fills `bytes` exactly (what [`put_command`] wrote). Never panics,
/// whatever the input.
pub fn decode_command(bytes: &[u8]) -> Result<Command, DecodeError> {
    let mut r = Reader::new(bytes);
    let command = r.command(0)?;
    r.finish()?;
    Ok(command)
}

/// Appends `command`, encoded, to `out`.
pub fn put_command(out: &mut Vec<u8>, command: &Command) {
    match command {
        Command::Get => out.push(0),
        Command::Exists => out.push(1),
        Command::Digest => out.push(2),
        Command::SMembers => out.push(3),
        Command::SIsMember(m) => {
            out.push(4);
            put_bytes(out, m);
        }
        Command::SCard => out.push(5),
        Command::Set(args) => {
            out.push(6);
            put_bytes(out, &args.value);
            put_condition(out, &args.condition);
            put_bool(out, args.get);
            put_expiry(out, args.expiry);
        }
        Command::Del => out.push(7),
        Command::DelEx(c) => {
            out.push(8);
            put_condition(out, c);
        }
        Command::IncrBy(d) => {
            out.push(9);
            put_i64(out, *d);
        }
        Command::SAdd(m) => {
            out.push(10);
            put_list(out, m);
        }
        Command::SRem(m) => {
            out.push(11);
            put_list(out, m);
        }
        Command::LockAcquire { owner, lease_ms } => {
            out.push(12);
            put_bytes(out, owner);
            put_u64(out, *lease_ms);
        }
        Command::LockRelease { owner } => {
            out.push(13);
            put_bytes(out, owner);
        }
        Command::Ttl => out.push(14),
        Command::PTtl => out.push(15),
        Command::Type => out.push(16),
        Command::StrLen => out.push(17),
        Command::Expire(args) => {
            out.push(18);
            out.push(match args.kind {
                ExpireKind::Expire => 0,
                ExpireKind::PExpire => 1,
                ExpireKind::ExpireAt => 2,
                ExpireKind::PExpireAt => 3,
            });
            put_i64(out, args.time);
            let f = args.flags;
            let bits =
                u8::from(f.nx) | u8::from(f.xx) << 1 | u8::from(f.gt) << 2 | u8::from(f.lt) << 3;
            out.push(bits);
        }
        Command::Persist => out.push(19),
        Command::Append(v) => {
            out.push(20);
            put_bytes(out, v);
        }
        Command::GetDel => out.push(21),
        Command::Hash(c) => {
            out.push(22);
            put_hash(out, c);
        }
        Command::List(c) => {
            out.push(23);
            put_list_cmd(out, c);
        }
        Command::ZSet(c) => {
            out.push(24);
            put_zset(out, c);
        }
        Command::IncrByFloat(d) => {
            out.push(25);
            put_float(out, *d);
        }
        Command::GetEx(e) => {
            out.push(26);
            put_expiry(out, *e);
        }
        Command::GetRange { start, end } => {
            out.push(27);
            put_i64(out, *start);
            put_i64(out, *end);
        }
        Command::SetRange { offset, value } => {
            out.push(28);
            put_u64(out, *offset);
            put_bytes(out, value);
        }
        Command::SPop { count, seed } => {
            out.push(29);
            put_opt_u64(out, *count);
            put_u64(out, *seed);
        }
        Command::SRandMember { count, seed } => {
            out.push(30);
            put_opt_i64(out, *count);
            put_u64(out, *seed);
        }
        Command::SMIsMember(m) => {
            out.push(31);
            put_list(out, m);
        }
        Command::SScan(args) => {
            out.push(32);
            put_scan(out, args);
        }
        Command::Transaction(commands) => {
            out.push(33);
            put_count(out, commands.len());
            for c in commands {
                put_command(out, c);
            }
        }
    }
}

fn put_hash(out: &mut Vec<u8>, c: &HashCmd) {
    match c {
        HashCmd::HSet(pairs) => {
            out.push(0);
            put_count(out, pairs.len());
            for (f, v) in pairs {
                put_bytes(out, f);
                put_bytes(out, v);
            }
        }
        HashCmd::HSetNx { field, value } => {
            out.push(1);
            put_bytes(out, field);
            put_bytes(out, value);
        }
        HashCmd::HGet(f) => {
            out.push(2);
            put_bytes(out, f);
        }
        HashCmd::HMGet(f) => {
            out.push(3);
            put_list(out, f);
        }
        HashCmd::HDel(f) => {
            out.push(4);
            put_list(out, f);
        }
        HashCmd::HExists(f) => {
            out.push(5);
            put_bytes(out, f);
        }
        HashCmd::HLen => out.push(6),
        HashCmd::HStrLen(f) => {
            out.push(7);
            put_bytes(out, f);
        }
        HashCmd::HKeys => out.push(8),
        HashCmd::HVals => out.push(9),
        HashCmd::HGetAll => out.push(10),
        HashCmd::HIncrBy { field, delta } => {
            out.push(11);
            put_bytes(out, field);
            put_i64(out, *delta);
        }
        HashCmd::HIncrByFloat { field, delta } => {
            out.push(12);
            put_bytes(out, field);
            put_float(out, *delta);
        }
        HashCmd::HRandField {
            count,
            with_values,
            seed,
        } => {
            out.push(13);
            put_opt_i64(out, *count);
            put_bool(out, *with_values);
            put_u64(out, *seed);
        }
        HashCmd::HScan { args, no_values } => {
            out.push(14);
            put_scan(out, args);
            put_bool(out, *no_values);
        }
    }
}

fn put_list_cmd(out: &mut Vec<u8>, c: &ListCmd) {
    match c {
        ListCmd::Push {
            end,
            values,
            only_if_exists,
        } => {
            out.push(0);
            put_end(out, *end);
            put_list(out, values);
            put_bool(out, *only_if_exists);
        }
        ListCmd::Pop { end, count } => {
            out.push(1);
            put_end(out, *end);
            put_opt_u64(out, *count);
        }
        ListCmd::Len => out.push(2),
        ListCmd::Range { start, stop } => {
            out.push(3);
            put_i64(out, *start);
            put_i64(out, *stop);
        }
        ListCmd::Index(i) => {
            out.push(4);
            put_i64(out, *i);
        }
        ListCmd::Set { index, value } => {
            out.push(5);
            put_i64(out, *index);
            put_bytes(out, value);
        }
        ListCmd::Insert {
            before,
            pivot,
            value,
        } => {
            out.push(6);
            put_bool(out, *before);
            put_bytes(out, pivot);
            put_bytes(out, value);
        }
        ListCmd::Rem { count, value } => {
            out.push(7);
            put_i64(out, *count);
            put_bytes(out, value);
        }
        ListCmd::Trim { start, stop } => {
            out.push(8);
            put_i64(out, *start);
            put_i64(out, *stop);
        }
        ListCmd::Pos {
            value,
            rank,
            count,
            max_len,
        } => {
            out.push(9);
            put_bytes(out, value);
            put_i64(out, rank.get());
            put_opt_u64(out, *count);
            put_u64(out, *max_len);
        }
        ListCmd::Move { from, to } => {
            out.push(10);
            put_end(out, *from);
            put_end(out, *to);
        }
    }
}

fn put_zset(out: &mut Vec<u8>, c: &ZSetCmd) {
    match c {
        ZSetCmd::Add { members, flags } => {
            out.push(0);
            put_count(out, members.len());
            for (score, member) in members {
                put_float(out, *score);
                put_bytes(out, member);
            }
            let f = flags;
            let bits = u8::from(f.nx)
                | u8::from(f.xx) << 1
                | u8::from(f.gt) << 2
                | u8::from(f.lt) << 3
                | u8::from(f.ch) << 4
                | u8::from(f.incr) << 5;
            out.push(bits);
        }
        ZSetCmd::Rem(m) => {
            out.push(1);
            put_list(out, m);
        }
        ZSetCmd::Score(m) => {
            out.push(2);
            put_bytes(out, m);
        }
        ZSetCmd::MScore(m) => {
            out.push(3);
            put_list(out, m);
        }
        ZSetCmd::IncrBy { delta, member } => {
            out.push(4);
            put_float(out, *delta);
            put_bytes(out, member);
        }
        ZSetCmd::Card => out.push(5),
        ZSetCmd::Count { min, max } => {
            out.push(6);
            put_score_bound(out, min);
            put_score_bound(out, max);
        }
        ZSetCmd::Rank {
            member,
            rev,
            with_score,
        } => {
            out.push(7);
            put_bytes(out, member);
            put_bool(out, *rev);
            put_bool(out, *with_score);
        }
        ZSetCmd::Range(range) => {
            out.push(8);
            match &range.by {
                ZRangeBy::Index { start, stop } => {
                    out.push(0);
                    put_i64(out, *start);
                    put_i64(out, *stop);
                }
                ZRangeBy::Score { min, max } => {
                    out.push(1);
                    put_score_bound(out, min);
                    put_score_bound(out, max);
                }
                ZRangeBy::Lex { min, max } => {
                    out.push(2);
                    put_lex_bound(out, min);
                    put_lex_bound(out, max);
                }
            }
            put_bool(out, range.rev);
            put_opt_u64(out, range.limit.map(|(o, _)| o as u64));
            if let Some((_, count)) = range.limit {
                put_i64(out, count);
            }
            put_bool(out, range.with_scores);
        }
        ZSetCmd::Pop { max, count } => {
            out.push(9);
            put_bool(out, *max);
            put_opt_u64(out, *count);
        }
        ZSetCmd::Scan(args) => {
            out.push(10);
            put_scan(out, args);
        }
    }
}

// ---- Reading ----

impl Reader<'_> {
    pub(crate) fn i64(&mut self) -> Result<i64, DecodeError> {
        Ok(self.u64()? as i64)
    }

    pub(crate) fn float(&mut self) -> Result<Float, DecodeError> {
        let f = Float::new(f64::from_bits(self.u64()?)).ok_or(DecodeError::Invalid)?;
        Ok(f)
    }

    pub(crate) fn list(&mut self) -> Result<Vec<Bytes>, DecodeError> {
        let count = self.count(4)?;
        (0..count).map(|_| self.bytes()).collect()
    }

    fn opt_u64(&mut self) -> Result<Option<u64>, DecodeError> {
        Ok(if self.bool()? {
            Some(self.u64()?)
        } else {
            None
        })
    }

    fn opt_i64(&mut self) -> Result<Option<i64>, DecodeError> {
        Ok(self.opt_u64()?.map(|v| v as i64))
    }

    fn end(&mut self) -> Result<ListEnd, DecodeError> {
        Ok(if self.bool()? {
            ListEnd::Right
        } else {
            ListEnd::Left
        })
    }

    fn scan(&mut self) -> Result<ScanArgs, DecodeError> {
        let cursor = self.u64()?;
        let pattern = if self.bool()? {
            Some(self.bytes()?)
        } else {
            None
        };
        Ok(ScanArgs {
            cursor,
            pattern,
            count: self.u64()?,
        })
    }

    fn score_bound(&mut self) -> Result<ScoreBound, DecodeError> {
        Ok(ScoreBound {
            score: self.float()?,
            exclusive: self.bool()?,
        })
    }

    fn lex_bound(&mut self) -> Result<LexBound, DecodeError> {
        Ok(match self.u8()? {
            0 => LexBound::Min,
            1 => LexBound::Max,
            2 => LexBound::Inclusive(self.bytes()?),
            3 => LexBound::Exclusive(self.bytes()?),
            other => return Err(DecodeError::UnknownTag(other)),
        })
    }

    fn expiry(&mut self) -> Result<Expiry, DecodeError> {
        Ok(match self.u8()? {
            0 => Expiry::Clear,
            1 => Expiry::Keep,
            2 => Expiry::AfterMs(self.u64()?),
            3 => Expiry::AtMs(self.u64()?),
            other => return Err(DecodeError::UnknownTag(other)),
        })
    }

    fn condition(&mut self) -> Result<Condition, DecodeError> {
        Ok(match self.u8()? {
            0 => Condition::Always,
            1 => Condition::Nx,
            2 => Condition::Xx,
            3 => Condition::IfEq(self.bytes()?),
            4 => Condition::IfNe(self.bytes()?),
            5 => Condition::IfDigestEq(self.u64()?),
            6 => Condition::IfDigestNe(self.u64()?),
            other => return Err(DecodeError::UnknownTag(other)),
        })
    }

    /// A command; `depth` counts the transactions around it.
    pub(crate) fn command(&mut self, depth: usize) -> Result<Command, DecodeError> {
        Ok(match self.u8()? {
            0 => Command::Get,
            1 => Command::Exists,
            2 => Command::Digest,
            3 => Command::SMembers,
            4 => Command::SIsMember(self.bytes()?),
            5 => Command::SCard,
            6 => Command::Set(SetArgs {
                value: self.bytes()?,
                condition: self.condition()?,
                get: self.bool()?,
                expiry: self.expiry()?,
            }),
            7 => Command::Del,
            8 => Command::DelEx(self.condition()?),
            9 => Command::IncrBy(self.i64()?),
            10 => Command::SAdd(self.list()?),
            11 => Command::SRem(self.list()?),
            12 => Command::LockAcquire {
                owner: self.bytes()?,
                lease_ms: self.u64()?,
            },
            13 => Command::LockRelease {
                owner: self.bytes()?,
            },
            14 => Command::Ttl,
            15 => Command::PTtl,
            16 => Command::Type,
            17 => Command::StrLen,
            18 => {
                let kind = match self.u8()? {
                    0 => ExpireKind::Expire,
                    1 => ExpireKind::PExpire,
                    2 => ExpireKind::ExpireAt,
                    3 => ExpireKind::PExpireAt,
                    other => return Err(DecodeError::UnknownTag(other)),
                };
                let time = self.i64()?;
                let bits = self.u8()?;
                if bits > 0b1111 {
                    return Err(DecodeError::BadKind(bits));
                }
                let flags = ExpireFlags {
                    nx: bits & 1 != 0,
                    xx: bits & 2 != 0,
                    gt: bits & 4 != 0,
                    lt: bits & 8 != 0,
                };
                Command::Expire(ExpireArgs { kind, time, flags })
            }
            19 => Command::Persist,
            20 => Command::Append(self.bytes()?),
            21 => Command::GetDel,
            22 => Command::Hash(self.hash()?),
            23 => Command::List(self.list_cmd()?),
            24 => Command::ZSet(self.zset()?),
            25 => Command::IncrByFloat(self.float()?),
            26 => Command::GetEx(self.expiry()?),
            27 => Command::GetRange {
                start: self.i64()?,
                end: self.i64()?,
            },
            28 => Command::SetRange {
                offset: self.u64()?,
                value: self.bytes()?,
            },
            29 => Command::SPop {
                count: self.opt_u64()?,
                seed: self.u64()?,
            },
            30 => Command::SRandMember {
                count: self.opt_i64()?,
                seed: self.u64()?,
            },
            31 => Command::SMIsMember(self.list()?),
            32 => Command::SScan(self.scan()?),
            33 => {
                if depth >= COMMAND_DEPTH_MAX {
                    return Err(DecodeError::Nested);
                }
                let count = self.count(1)?;
                let commands = (0..count)
                    .map(|_| self.command(depth + 1))
                    .collect::<Result<_, _>>()?;
                Command::Transaction(commands)
            }
            other => return Err(DecodeError::UnknownTag(other)),
        })
    }

    fn hash(&mut self) -> Result<HashCmd, DecodeError> {
        Ok(match self.u8()? {
            0 => {
                let count = self.count(8)?;
                let pairs = (0..count)
                    .map(|_| Ok((self.bytes()?, self.bytes()?)))
                    .collect::<Result<_, DecodeError>>()?;
                HashCmd::HSet(pairs)
            }
            1 => HashCmd::HSetNx {
                field: self.bytes()?,
                value: self.bytes()?,
            },
            2 => HashCmd::HGet(self.bytes()?),
            3 => HashCmd::HMGet(self.list()?),
            4 => HashCmd::HDel(self.list()?),
            5 => HashCmd::HExists(self.bytes()?),
            6 => HashCmd::HLen,
            7 => HashCmd::HStrLen(self.bytes()?),
            8 => HashCmd::HKeys,
            9 => HashCmd::HVals,
            10 => HashCmd::HGetAll,
            11 => HashCmd::HIncrBy {
                field: self.bytes()?,
                delta: self.i64()?,
            },
            12 => HashCmd::HIncrByFloat {
                field: self.bytes()?,
                delta: self.float()?,
            },
            13 => HashCmd::HRandField {
                count: self.opt_i64()?,
                with_values: self.bool()?,
                seed: self.u64()?,
            },
            14 => HashCmd::HScan {
                args: self.scan()?,
                no_values: self.bool()?,
            },
            other => return Err(DecodeError::UnknownTag(other)),
        })
    }

    fn list_cmd(&mut self) -> Result<ListCmd, DecodeError> {
        Ok(match self.u8()? {
            0 => ListCmd::Push {
                end: self.end()?,
                values: self.list()?,
                only_if_exists: self.bool()?,
            },
            1 => ListCmd::Pop {
                end: self.end()?,
                count: self.opt_u64()?,
            },
            2 => ListCmd::Len,
            3 => ListCmd::Range {
                start: self.i64()?,
                stop: self.i64()?,
            },
            4 => ListCmd::Index(self.i64()?),
            5 => ListCmd::Set {
                index: self.i64()?,
                value: self.bytes()?,
            },
            6 => ListCmd::Insert {
                before: self.bool()?,
                pivot: self.bytes()?,
                value: self.bytes()?,
            },
            7 => ListCmd::Rem {
                count: self.i64()?,
                value: self.bytes()?,
            },
            8 => ListCmd::Trim {
                start: self.i64()?,
                stop: self.i64()?,
            },
            9 => ListCmd::Pos {
                value: self.bytes()?,
                rank: NonZeroI64::new(self.i64()?).ok_or(DecodeError::Invalid)?,
                count: self.opt_u64()?,
                max_len: self.u64()?,
            },
            10 => ListCmd::Move {
                from: self.end()?,
                to: self.end()?,
            },
            other => return Err(DecodeError::UnknownTag(other)),
        })
    }

    fn zset(&mut self) -> Result<ZSetCmd, DecodeError> {
        Ok(match self.u8()? {
            0 => {
                let count = self.count(12)?;
                let members = (0..count)
                    .map(|_| Ok((self.float()?, self.bytes()?)))
                    .collect::<Result<_, DecodeError>>()?;
                let bits = self.u8()?;
                if bits > 0b11_1111 {
                    return Err(DecodeError::BadKind(bits));
                }
                let flags = ZAddFlags {
                    nx: bits & 1 != 0,
                    xx: bits & 2 != 0,
                    gt: bits & 4 != 0,
                    lt: bits & 8 != 0,
                    ch: bits & 16 != 0,
                    incr: bits & 32 != 0,
                };
                ZSetCmd::Add { members, flags }
            }
            1 => ZSetCmd::Rem(self.list()?),
            2 => ZSetCmd::Score(self.bytes()?),
            3 => ZSetCmd::MScore(self.list()?),
            4 => ZSetCmd::IncrBy {
                delta: self.float()?,
                member: self.bytes()?,
            },
            5 => ZSetCmd::Card,
            6 => ZSetCmd::Count {
                min: self.score_bound()?,
                max: self.score_bound()?,
            },
            7 => ZSetCmd::Rank {
                member: self.bytes()?,
                rev: self.bool()?,
                with_score: self.bool()?,
            },
            8 => {
                let by = match self.u8()? {
                    0 => ZRangeBy::Index {
                        start: self.i64()?,
                        stop: self.i64()?,
                    },
                    1 => ZRangeBy::Score {
                        min: self.score_bound()?,
                        max: self.score_bound()?,
                    },
                    2 => ZRangeBy::Lex {
                        min: self.lex_bound()?,
                        max: self.lex_bound()?,
                    },
                    other => return Err(DecodeError::UnknownTag(other)),
                };
                let rev = self.bool()?;
                let limit = match self.opt_i64()? {
                    None => None,
                    Some(offset) => Some((offset, self.i64()?)),
                };
                ZSetCmd::Range(ZRange {
                    by,
                    rev,
                    limit,
                    with_scores: self.bool()?,
                })
            }
            9 => ZSetCmd::Pop {
                max: self.bool()?,
                count: self.opt_u64()?,
            },
            10 => ZSetCmd::Scan(self.scan()?),
            other => return Err(DecodeError::UnknownTag(other)),
        })
    }
}
