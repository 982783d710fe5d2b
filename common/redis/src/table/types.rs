//! The parsers of the data-type commands: hashes, lists, sorted sets, and the string and set
//! commands that came with them. Each follows Redis 7.4's argument checks in Redis's order, so
//! that a malformed request gets the error Redis would give (the key's type is the register's
//! business, checked when the command applies).
use std::num::NonZeroI64;

use bytes::Bytes;
use logless_commands::command::{
    Command, Expiry, HashCmd, LexBound, ListCmd, ListEnd, ScanArgs, ScoreBound, ZAddFlags, ZRange,
    ZRangeBy, ZSetCmd,
};
use logless_commands::float::Float;

use super::{
    arity_error, error, expire_unit, hash, is, list, parse_expiry, parse_int, single, zset,
    ExpiryError, Parsed, ReplyShape, NOT_AN_INTEGER, SYNTAX_ERROR,
};
use logless_commands::command::CommandError;

const NOT_A_FLOAT: &str = "ERR value is not a valid float";
/// Redis's reply to a count that must not be negative (LPOP, SPOP, ZPOPMIN, ...), for a
/// negative count and for one that is not an integer alike.
const MUST_BE_POSITIVE: &str = "ERR value is out of range, must be positive";

/// A signed count as Redis's `getRangeLongFromObjectOrReply(-LONG_MAX, LONG_MAX)` reads it:
/// every 64-bit integer but the smallest.
fn signed_count(arg: &[u8]) -> Result<i64, String> {
    match parse_int(arg) {
        None => Err(text(NOT_AN_INTEGER)),
        Some(i64::MIN) => Err(text(
            "ERR value is out of range, must be between -9223372036854775807 and \
             9223372036854775807",
        )),
        Some(n) => Ok(n),
    }
}

/// A count that must not be negative, with Redis's text for both kinds of bad count.
fn positive_count(arg: &[u8], refusal: &str) -> Result<u64, String> {
    parse_int(arg)
        .and_then(|n| u64::try_from(n).ok())
        .ok_or_else(|| text(refusal))
}

fn int(arg: &[u8]) -> Result<i64, String> {
    parse_int(arg).ok_or_else(|| text(NOT_AN_INTEGER))
}

fn float(arg: &[u8]) -> Result<Float, String> {
    Float::parse(arg).ok_or_else(|| text(NOT_A_FLOAT))
}

fn text(text: &str) -> String {
    text.to_owned()
}

fn command_error(e: CommandError) -> Parsed {
    Parsed::Error(e.to_string())
}

/// Turns a parser written with `?` (its errors as their texts) into a [`Parsed`].
fn done(result: Result<Parsed, String>) -> Parsed {
    result.unwrap_or_else(Parsed::Error)
}

/// The cursor of the SCAN family: an unsigned 64-bit decimal, as `strtoull` reads it.
pub(super) fn cursor(arg: &[u8]) -> Result<u64, String> {
    std::str::from_utf8(arg)
        .ok()
        .filter(|s| !s.starts_with('+'))
        .and_then(|s| s.parse::<u64>().ok())
        .ok_or_else(|| text("ERR invalid cursor"))
}

/// `key cursor [MATCH pattern] [COUNT count]` and, for HSCAN, `[NOVALUES]`: the scan
/// arguments and whether NOVALUES was given.
fn scan_args(args: &[Bytes], novalues_allowed: bool) -> Result<(ScanArgs, bool), String> {
    let mut no_values = false;
    let scan = scan_options(args, 2, |option, _| {
        let known = novalues_allowed && is(option, "novalues");
        no_values |= known;
        Ok(known.then_some(0))
    })?;
    Ok((scan, no_values))
}

/// The cursor at `args[at]` and the options after it: `MATCH pattern`, `COUNT count`, and
/// those `other` takes. `other` is given each other option and the arguments after it, and
/// answers how many of those it took, or `None` if it does not know the option (a syntax
/// error).
pub(super) fn scan_options(
    args: &[Bytes],
    at: usize,
    mut other: impl FnMut(&[u8], &[Bytes]) -> Result<Option<usize>, String>,
) -> Result<ScanArgs, String> {
    let mut scan = ScanArgs::from_cursor(cursor(&args[at])?);
    let mut i = at + 1;
    while i < args.len() {
        let more = args.len() - i - 1;
        if is(&args[i], "count") && more >= 1 {
            let count = int(&args[i + 1])?;
            if count < 1 {
                return Err(text(SYNTAX_ERROR));
            }
            scan.count = count.unsigned_abs();
            i += 2;
        } else if is(&args[i], "match") && more >= 1 {
            scan.pattern = Some(args[i + 1].clone());
            i += 2;
        } else {
            match other(&args[i], &args[i + 1..])? {
                Some(took) => i += 1 + took,
                None => return Err(text(SYNTAX_ERROR)),
            }
        }
    }
    Ok(scan)
}

// Hashes.

/// `HSET key field value [field value ...]` (and HMSET, shown as OK).
pub(super) fn parse_hset(name: &str, args: &[Bytes]) -> Parsed {
    if args.len() % 2 == 1 {
        return arity_error(name);
    }
    let pairs = args[2..]
        .chunks_exact(2)
        .map(|p| (p[0].clone(), p[1].clone()))
        .collect();
    let command = Command::Hash(HashCmd::HSet(pairs));
    Parsed::Single {
        key: args[1].clone(),
        command,
        shape: if name == "hmset" {
            ReplyShape::Ok
        } else {
            ReplyShape::Plain
        },
    }
}

pub(super) fn parse_hincrby(args: &[Bytes]) -> Parsed {
    done(int(&args[3]).map(|delta| {
        hash(
            args,
            HashCmd::HIncrBy {
                field: args[2].clone(),
                delta,
            },
        )
    }))
}

/// `HINCRBYFLOAT key field delta`: Redis refuses an infinite delta before looking at the field.
pub(super) fn parse_hincrbyfloat(args: &[Bytes]) -> Parsed {
    done(float(&args[3]).and_then(|delta| {
        if delta.get().is_infinite() {
            return Err(text("ERR value is NaN or Infinity"));
        }
        Ok(hash(
            args,
            HashCmd::HIncrByFloat {
                field: args[2].clone(),
                delta,
            },
        ))
    }))
}

/// `HRANDFIELD key [count [WITHVALUES]]`; the session seeds it.
pub(super) fn parse_hrandfield(args: &[Bytes]) -> Parsed {
    done((|| {
        let Some(raw) = args.get(2) else {
            return Ok(hash(
                args,
                HashCmd::HRandField {
                    count: None,
                    with_values: false,
                    seed: 0,
                },
            ));
        };
        let count = signed_count(raw)?;
        let with_values = match args.get(3) {
            None => false,
            Some(option) if args.len() == 4 && is(option, "withvalues") => true,
            Some(_) => return Err(text(SYNTAX_ERROR)),
        };
        if with_values && !(-(i64::MAX / 2)..=i64::MAX / 2).contains(&count) {
            return Err(text("ERR value is out of range"));
        }
        Ok(hash(
            args,
            HashCmd::HRandField {
                count: Some(count),
                with_values,
                seed: 0,
            },
        ))
    })())
}

pub(super) fn parse_hscan(args: &[Bytes]) -> Parsed {
    done(scan_args(args, true).map(|(scan, no_values)| {
        hash(
            args,
            HashCmd::HScan {
                args: scan,
                no_values,
            },
        )
    }))
}

// Lists.

pub(super) fn parse_push(args: &[Bytes], end: ListEnd, only_if_exists: bool) -> Parsed {
    list(
        args,
        ListCmd::Push {
            end,
            values: args[2..].to_vec(),
            only_if_exists,
        },
    )
}

/// The optional count of `name key [count]` (LPOP, RPOP, ZPOPMIN, ZPOPMAX): more arguments
/// are an arity error, a negative count Redis's "must be positive".
fn pop_count(name: &str, args: &[Bytes]) -> Result<Option<u64>, String> {
    if args.len() > 3 {
        return Err(format!(
            "ERR wrong number of arguments for '{name}' command"
        ));
    }
    args.get(2)
        .map(|raw| positive_count(raw, MUST_BE_POSITIVE))
        .transpose()
}

/// `LPOP|RPOP key [count]`.
pub(super) fn parse_pop(name: &str, args: &[Bytes], end: ListEnd) -> Parsed {
    done(pop_count(name, args).map(|count| list(args, ListCmd::Pop { end, count })))
}

pub(super) fn parse_lrange(args: &[Bytes]) -> Parsed {
    done((|| {
        Ok(list(
            args,
            ListCmd::Range {
                start: int(&args[2])?,
                stop: int(&args[3])?,
            },
        ))
    })())
}

pub(super) fn parse_ltrim(args: &[Bytes]) -> Parsed {
    done((|| {
        Ok(list(
            args,
            ListCmd::Trim {
                start: int(&args[2])?,
                stop: int(&args[3])?,
            },
        ))
    })())
}

pub(super) fn parse_lindex(args: &[Bytes]) -> Parsed {
    done(int(&args[2]).map(|index| list(args, ListCmd::Index(index))))
}

pub(super) fn parse_lset(args: &[Bytes]) -> Parsed {
    done(int(&args[2]).map(|index| {
        list(
            args,
            ListCmd::Set {
                index,
                value: args[3].clone(),
            },
        )
    }))
}

pub(super) fn parse_linsert(args: &[Bytes]) -> Parsed {
    let before = if is(&args[2], "before") {
        true
    } else if is(&args[2], "after") {
        false
    } else {
        return error(SYNTAX_ERROR);
    };
    list(
        args,
        ListCmd::Insert {
            before,
            pivot: args[3].clone(),
            value: args[4].clone(),
        },
    )
}

pub(super) fn parse_lrem(args: &[Bytes]) -> Parsed {
    done(int(&args[2]).map(|count| {
        list(
            args,
            ListCmd::Rem {
                count,
                value: args[3].clone(),
            },
        )
    }))
}

/// `LPOS key element [RANK rank] [COUNT num-matches] [MAXLEN len]`.
pub(super) fn parse_lpos(args: &[Bytes]) -> Parsed {
    done((|| {
        let mut rank = NonZeroI64::new(1).expect("one is not zero");
        let mut count = None;
        let mut max_len = 0;
        let mut i = 3;
        while i < args.len() {
            let more = i + 1 < args.len();
            if is(&args[i], "rank") && more {
                rank = NonZeroI64::new(signed_count(&args[i + 1])?).ok_or_else(|| {
                    text(
                        "ERR RANK can't be zero: use 1 to start from the first match, 2 from \
                         the second ... or use negative to start from the end of the list",
                    )
                })?;
            } else if is(&args[i], "count") && more {
                count = Some(positive_count(&args[i + 1], "ERR COUNT can't be negative")?);
            } else if is(&args[i], "maxlen") && more {
                max_len = positive_count(&args[i + 1], "ERR MAXLEN can't be negative")?;
            } else {
                return Err(text(SYNTAX_ERROR));
            }
            i += 2;
        }
        Ok(list(
            args,
            ListCmd::Pos {
                value: args[2].clone(),
                rank,
                count,
                max_len,
            },
        ))
    })())
}

fn list_end(arg: &[u8]) -> Option<ListEnd> {
    if is(arg, "left") {
        Some(ListEnd::Left)
    } else if is(arg, "right") {
        Some(ListEnd::Right)
    } else {
        None
    }
}

/// LMOVE and RPOPLPUSH: only within one key (a rotation), since a move between two keys is
/// two registers.
pub(super) fn parse_move(name: &str, args: &[Bytes], from: ListEnd, to: ListEnd) -> Parsed {
    if args[1] != args[2] {
        return Parsed::Error(format!(
            "ERR logless runs {} only with the source as destination: every key is its own \
             replicated register, and a move between keys is not atomic across keys in the \
             per-key engine",
            name.to_ascii_uppercase()
        ));
    }
    list(args, ListCmd::Move { from, to })
}

/// `LMOVE source destination LEFT|RIGHT LEFT|RIGHT`.
pub(super) fn parse_lmove(args: &[Bytes]) -> Parsed {
    match (list_end(&args[3]), list_end(&args[4])) {
        (Some(from), Some(to)) => parse_move("lmove", args, from, to),
        _ => error(SYNTAX_ERROR),
    }
}

// Sorted sets.

/// `ZADD key [NX|XX] [GT|LT] [CH] [INCR] score member [score member ...]`: the options, then
/// the count of the rest, then the options' compatibility, then the scores.
pub(super) fn parse_zadd(args: &[Bytes]) -> Parsed {
    let mut flags = ZAddFlags::default();
    let mut i = 2;
    while let Some(option) = args.get(i) {
        let flag = if is(option, "nx") {
            &mut flags.nx
        } else if is(option, "xx") {
            &mut flags.xx
        } else if is(option, "gt") {
            &mut flags.gt
        } else if is(option, "lt") {
            &mut flags.lt
        } else if is(option, "ch") {
            &mut flags.ch
        } else if is(option, "incr") {
            &mut flags.incr
        } else {
            break;
        };
        *flag = true;
        i += 1;
    }
    let elements = args.len() - i;
    if elements == 0 || elements % 2 == 1 {
        return error(SYNTAX_ERROR);
    }
    if let Err(e) = flags.check(elements / 2) {
        return command_error(e);
    }
    let members: Result<Vec<_>, _> = args[i..]
        .chunks_exact(2)
        .map(|p| Ok((float(&p[0])?, p[1].clone())))
        .collect();
    done(members.map(|members| zset(args, ZSetCmd::Add { members, flags })))
}

pub(super) fn parse_zincrby(args: &[Bytes]) -> Parsed {
    done(float(&args[2]).map(|delta| {
        zset(
            args,
            ZSetCmd::IncrBy {
                delta,
                member: args[3].clone(),
            },
        )
    }))
}

pub(super) fn parse_zcount(args: &[Bytes]) -> Parsed {
    match (ScoreBound::parse(&args[2]), ScoreBound::parse(&args[3])) {
        (Ok(min), Ok(max)) => zset(args, ZSetCmd::Count { min, max }),
        (Err(e), _) | (_, Err(e)) => command_error(e),
    }
}

/// `ZRANK|ZREVRANK key member [WITHSCORE]`.
pub(super) fn parse_zrank(name: &str, args: &[Bytes], rev: bool) -> Parsed {
    if args.len() > 4 {
        return arity_error(name);
    }
    let with_score = match args.get(3) {
        None => false,
        Some(option) if is(option, "withscore") => true,
        Some(_) => return error(SYNTAX_ERROR),
    };
    zset(
        args,
        ZSetCmd::Rank {
            member: args[2].clone(),
            rev,
            with_score,
        },
    )
}

/// `ZPOPMIN|ZPOPMAX key [count]`.
pub(super) fn parse_zpop(name: &str, args: &[Bytes], max: bool) -> Parsed {
    done(pop_count(name, args).map(|count| zset(args, ZSetCmd::Pop { max, count })))
}

pub(super) fn parse_zscan(args: &[Bytes]) -> Parsed {
    done(scan_args(args, false).map(|(scan, _)| zset(args, ZSetCmd::Scan(scan))))
}

/// What a ZRANGE selects by, before the options decide it.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum RangeBy {
    Auto,
    Rank,
    Score,
    Lex,
}

/// ZRANGE and its older forms (ZREVRANGE, ZRANGEBYSCORE, ...), as Redis's
/// `zrangeGenericCommand`: `by` and `rev` are fixed by the older forms (`Auto`/`None` for
/// ZRANGE, whose options choose them); an option a form has fixed is a syntax error. With REV,
/// BYSCORE and BYLEX take `max min`, which is turned into the lower and upper bound here.
pub(super) fn parse_zrange(args: &[Bytes], mut by: RangeBy, mut rev: Option<bool>) -> Parsed {
    let mut with_scores = false;
    let mut limit: Option<(i64, i64)> = None;
    let mut i = 4;
    while i < args.len() {
        let left = args.len() - i - 1;
        let option = &args[i];
        if is(option, "withscores") {
            with_scores = true;
        } else if is(option, "limit") && left >= 2 {
            match (int(&args[i + 1]), int(&args[i + 2])) {
                (Ok(offset), Ok(count)) => limit = Some((offset, count)),
                (Err(e), _) | (_, Err(e)) => return Parsed::Error(e),
            }
            i += 2;
        } else if rev.is_none() && is(option, "rev") {
            rev = Some(true);
        } else if by == RangeBy::Auto && is(option, "bylex") {
            by = RangeBy::Lex;
        } else if by == RangeBy::Auto && is(option, "byscore") {
            by = RangeBy::Score;
        } else {
            return error(SYNTAX_ERROR);
        }
        i += 1;
    }
    let rev = rev.unwrap_or(false);
    if by == RangeBy::Auto {
        by = RangeBy::Rank;
    }
    // Redis's default is `LIMIT 0 -1`, which it cannot tell from no LIMIT.
    let limit = limit.filter(|&(_, count)| count != -1 || by != RangeBy::Rank);
    if limit.is_some() && by == RangeBy::Rank {
        return error(
            "ERR syntax error, LIMIT is only supported in combination with either BYSCORE or \
             BYLEX",
        );
    }
    if with_scores && by == RangeBy::Lex {
        return error("ERR syntax error, WITHSCORES not supported in combination with BYLEX");
    }
    let (low, high) = if rev && by != RangeBy::Rank {
        (&args[3], &args[2])
    } else {
        (&args[2], &args[3])
    };
    let by = match by {
        RangeBy::Score => match (ScoreBound::parse(low), ScoreBound::parse(high)) {
            (Ok(min), Ok(max)) => ZRangeBy::Score { min, max },
            (Err(e), _) | (_, Err(e)) => return command_error(e),
        },
        RangeBy::Lex => match (LexBound::parse(low), LexBound::parse(high)) {
            (Ok(min), Ok(max)) => ZRangeBy::Lex { min, max },
            (Err(e), _) | (_, Err(e)) => return command_error(e),
        },
        RangeBy::Rank | RangeBy::Auto => match (int(low), int(high)) {
            (Ok(start), Ok(stop)) => ZRangeBy::Index { start, stop },
            (Err(e), _) | (_, Err(e)) => return Parsed::Error(e),
        },
    };
    zset(
        args,
        ZSetCmd::Range(ZRange {
            by,
            rev,
            limit,
            with_scores,
        }),
    )
}

// Strings and sets.

pub(super) fn parse_incrbyfloat(args: &[Bytes]) -> Parsed {
    done(float(&args[2]).map(|delta| single(args, Command::IncrByFloat(delta))))
}

/// `GETEX key [EX s|PX ms|EXAT s|PXAT ms|PERSIST]`, with SET's rules for repeated options.
pub(super) fn parse_getex(args: &[Bytes]) -> Parsed {
    let mut persist = false;
    let mut expire = None;
    let mut i = 2;
    while i < args.len() {
        let option = &args[i];
        if is(option, "persist") && expire.is_none() {
            persist = true;
        } else if let (Some(unit), Some(value), false) =
            (expire_unit(option), args.get(i + 1), persist)
        {
            if expire.is_some_and(|(u, _)| u != unit) {
                return error(SYNTAX_ERROR);
            }
            expire = Some((unit, value));
            i += 1;
        } else {
            return error(SYNTAX_ERROR);
        }
        i += 1;
    }
    let expiry = match expire {
        None if persist => Expiry::Clear,
        None => Expiry::Keep,
        Some((unit, raw)) => match parse_expiry(unit, raw) {
            Ok(expiry) => expiry,
            Err(ExpiryError::NotAnInteger) => return error(NOT_AN_INTEGER),
            Err(ExpiryError::Invalid) => {
                return command_error(CommandError::InvalidExpireTimeIn("getex"))
            }
        },
    };
    single(args, Command::GetEx(expiry))
}

pub(super) fn parse_getrange(args: &[Bytes]) -> Parsed {
    done((|| {
        Ok(single(
            args,
            Command::GetRange {
                start: int(&args[2])?,
                end: int(&args[3])?,
            },
        ))
    })())
}

pub(super) fn parse_setrange(args: &[Bytes]) -> Parsed {
    match parse_int(&args[2]).map(u64::try_from) {
        None => error(NOT_AN_INTEGER),
        Some(Err(_)) => error("ERR offset is out of range"),
        Some(Ok(offset)) => single(
            args,
            Command::SetRange {
                offset,
                value: args[3].clone(),
            },
        ),
    }
}

/// `SPOP key [count]`: with a count the reply is a set (RESP3 `~`); the session seeds it.
pub(super) fn parse_spop(args: &[Bytes]) -> Parsed {
    let count = match args.len() {
        2 => None,
        3 => match positive_count(&args[2], MUST_BE_POSITIVE) {
            Ok(count) => Some(count),
            Err(e) => return Parsed::Error(e),
        },
        _ => return error(SYNTAX_ERROR),
    };
    Parsed::Single {
        key: args[1].clone(),
        command: Command::SPop { count, seed: 0 },
        shape: if count.is_some() {
            ReplyShape::Set
        } else {
            ReplyShape::Plain
        },
    }
}

/// `SRANDMEMBER key [count]`; the session seeds it.
pub(super) fn parse_srandmember(args: &[Bytes]) -> Parsed {
    let count = match args.len() {
        2 => None,
        3 => match signed_count(&args[2]) {
            Ok(count) => Some(count),
            Err(e) => return Parsed::Error(e),
        },
        _ => return error(SYNTAX_ERROR),
    };
    single(args, Command::SRandMember { count, seed: 0 })
}

pub(super) fn parse_sscan(args: &[Bytes]) -> Parsed {
    done(scan_args(args, false).map(|(scan, _)| single(args, Command::SScan(scan))))
}
