//! Commands on one register and their deterministic semantics.
//!
//! Every command is a read-modify-write of one register: [`Command::apply`] takes the latest
//! chosen state, the proposer's clock stamp and the size limits, changes the state in place and
//! says whether it changed. A command that does not change anything (a failed condition, an
//! error, a read) leaves the register bit-identical, so the proposer can answer it without a
//! phase 2 (the paper's DENIED). Expiry is decided here, from the stamp, never from a replica's
//! own timer, so every replica agrees on it.
//!
//! The semantics follow Redis wherever Redis has the command; the fencing lock is logless's own.
//! Hashes, lists and sorted sets have a module each ([`hash`], [`list`], [`sorted_set`]); what
//! all collections share (WRONGTYPE, deleting an emptied key, limits) is in `collection`, and
//! [`Command::Transaction`] runs several commands on one key as one.
//!
//! Commands that choose at random (SPOP, SRANDMEMBER, HRANDFIELD) carry a `seed` the proposer
//! draws, so that every replica and checker computes the same result.
use std::collections::BTreeSet;
use std::fmt;
use std::sync::LazyLock;

use bytes::Bytes;

use crate::float::Float;
use crate::value::{Data, LockState, Register};

mod collection;
pub mod hash;
pub mod list;
mod random;
pub mod scan;
mod sets;
pub mod sorted_set;
mod strings;

pub use hash::HashCmd;
pub use list::{ListCmd, ListEnd};
pub use random::REPEATS_MAX;
pub use scan::ScanArgs;
pub use sorted_set::{LexBound, ScoreBound, ZAddFlags, ZRange, ZRangeBy, ZSetCmd};

/// A command on one register.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Command {
    /// GET: the string value, or nil.
    Get,
    /// EXISTS: 1 if the key holds something, else 0.
    Exists,
    /// DIGEST: the XXH3-64 digest of the string value in hex, or nil.
    Digest,
    /// SMEMBERS: the members in byte order.
    SMembers,
    /// SISMEMBER member.
    SIsMember(Bytes),
    /// SCARD.
    SCard,
    /// SET with its options.
    Set(SetArgs),
    /// DEL: leaves a tombstone.
    Del,
    /// `DELEX [condition]`: a conditional delete.
    DelEx(Condition),
    /// INCRBY delta (INCR, DECR and DECRBY too).
    IncrBy(i64),
    /// SADD members.
    SAdd(Vec<Bytes>),
    /// SREM members.
    SRem(Vec<Bytes>),
    /// Acquire the fencing lock for `owner` for `lease_ms`.
    LockAcquire {
        /// The owner's token.
        owner: Bytes,
        /// The lease length.
        lease_ms: u64,
    },
    /// Release the fencing lock held by `owner`.
    LockRelease {
        /// The owner's token.
        owner: Bytes,
    },
    /// TTL: the remaining time to live in seconds (rounded to the nearest), -1 without one, -2
    /// if the key is absent.
    Ttl,
    /// PTTL: as TTL, in milliseconds.
    PTtl,
    /// TYPE: `string` (strings and integers), `set`, `lock` (logless's fencing lock) or `none`.
    Type,
    /// STRLEN: the length of the string value (an integer's decimal length), 0 if absent.
    StrLen,
    /// EXPIRE, PEXPIRE, EXPIREAT and PEXPIREAT.
    Expire(ExpireArgs),
    /// PERSIST: remove the time to live; 1 if there was one, else 0.
    Persist,
    /// APPEND value: the length of the string after appending.
    Append(Bytes),
    /// GETDEL: the string value, then delete the key.
    GetDel,
    /// A hash command (HSET, HGET, ...).
    Hash(HashCmd),
    /// A list command (LPUSH, LRANGE, ...).
    List(ListCmd),
    /// A sorted-set command (ZADD, ZRANGE, ...).
    ZSet(ZSetCmd),
    /// `INCRBYFLOAT delta`: the value as a float plus `delta`, stored as a string; the new
    /// value as text (see [`crate::float::format_human`]).
    IncrByFloat(Float),
    /// GETEX: the string value or nil; `Keep` without an option, `Clear` for PERSIST, EX/PX
    /// as `AfterMs`, EXAT/PXAT as `AtMs` (zero is an invalid expire time; the table refuses
    /// negative ones with the same error).
    GetEx(Expiry),
    /// `GETRANGE start end`: a substring, both ends included, negative from the end.
    GetRange {
        /// First byte.
        start: i64,
        /// Last byte.
        end: i64,
    },
    /// `SETRANGE offset value`: the new length (the table refuses a negative offset).
    SetRange {
        /// Where to write.
        offset: u64,
        /// What to write.
        value: Bytes,
    },
    /// `SPOP [count]`; the proposer draws `seed`.
    SPop {
        /// The count, if given (the table refuses negative ones).
        count: Option<u64>,
        /// The seed of the choice.
        seed: u64,
    },
    /// `SRANDMEMBER [count]`; the proposer draws `seed`.
    SRandMember {
        /// The count, if given (negative: repeats allowed).
        count: Option<i64>,
        /// The seed of the choice.
        seed: u64,
    },
    /// `SMISMEMBER member ...`: 1 or 0 for each.
    SMIsMember(Vec<Bytes>),
    /// `SSCAN cursor [MATCH pattern] [COUNT count]`.
    SScan(ScanArgs),
    /// MULTI ... EXEC of commands that all name this key: applied in order to one register
    /// in one consensus decision; one reply per command, as EXEC answers. A command that fails
    /// answers its error in its place and the others still apply; each command sees what the
    /// ones before it wrote.
    Transaction(Vec<Command>),
}

/// The arguments of the EXPIRE family.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ExpireArgs {
    /// Which of the four commands (the unit and whether `time` is relative).
    pub kind: ExpireKind,
    /// The time as the client gave it (seconds or milliseconds, relative or absolute; it may be
    /// zero or negative, which deletes the key).
    pub time: i64,
    /// The NX/XX/GT/LT options (the table rejects the combinations Redis rejects).
    pub flags: ExpireFlags,
}

/// Which command of the EXPIRE family.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ExpireKind {
    /// EXPIRE key seconds.
    Expire,
    /// PEXPIRE key milliseconds.
    PExpire,
    /// EXPIREAT key unix-time-seconds.
    ExpireAt,
    /// PEXPIREAT key unix-time-milliseconds.
    PExpireAt,
}

impl ExpireKind {
    /// The command's lowercase name.
    pub fn name(self) -> &'static str {
        match self {
            ExpireKind::Expire => "expire",
            ExpireKind::PExpire => "pexpire",
            ExpireKind::ExpireAt => "expireat",
            ExpireKind::PExpireAt => "pexpireat",
        }
    }

    fn in_seconds(self) -> bool {
        matches!(self, ExpireKind::Expire | ExpireKind::ExpireAt)
    }

    fn relative(self) -> bool {
        matches!(self, ExpireKind::Expire | ExpireKind::PExpire)
    }
}

/// The options of the EXPIRE family, as Redis checks them one after the other: NX (only
/// without a time to live), XX (only with one), GT (only if the new expiry is later; no time to
/// live counts as infinite), LT (only if earlier).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ExpireFlags {
    /// NX.
    pub nx: bool,
    /// XX.
    pub xx: bool,
    /// GT.
    pub gt: bool,
    /// LT.
    pub lt: bool,
}

/// The options of SET.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SetArgs {
    /// The new value.
    pub value: Bytes,
    /// When to write.
    pub condition: Condition,
    /// Reply with the old value instead of OK.
    pub get: bool,
    /// What happens to the time to live.
    pub expiry: Expiry,
}

/// A write condition (SET's NX/XX/IF*, DELEX's IF*).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Condition {
    /// Unconditional.
    Always,
    /// Only if the key does not exist.
    Nx,
    /// Only if the key exists.
    Xx,
    /// Only if the key holds exactly this string.
    IfEq(Bytes),
    /// Only if the key does not hold this string (an absent key qualifies).
    IfNe(Bytes),
    /// Only if the key's digest is this.
    IfDigestEq(u64),
    /// Only if the key's digest is not this (an absent key qualifies).
    IfDigestNe(u64),
}

/// What a SET does to the time to live.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Expiry {
    /// No time to live (plain SET).
    Clear,
    /// Keep the current one (KEEPTTL).
    Keep,
    /// Expire this many ms after the command's stamp (EX, PX).
    AfterMs(u64),
    /// Expire at this instant of the proposers' clock (EXAT, PXAT).
    AtMs(u64),
}

/// A command's reply, independent of the wire protocol.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Reply {
    /// OK.
    Ok,
    /// Nil.
    Nil,
    /// An integer.
    Int(i64),
    /// A string.
    Bulk(Bytes),
    /// A status other than OK (TYPE's type name; a simple string in RESP).
    Status(&'static str),
    /// A list of strings.
    Array(Vec<Bytes>),
    /// An error.
    Error(CommandError),
    /// A float (a RESP3 double; a bulk string of [`Float::text`] in RESP2).
    Double(Float),
    /// An array of replies of any kind (HMGET's values and nils, a scan's cursor and
    /// elements, a transaction's replies).
    Items(Vec<Reply>),
    /// Keys with values: a RESP3 map, a flat array in RESP2 (HGETALL).
    Map(Vec<(Reply, Reply)>),
    /// Pairs: an array of two-element arrays in RESP3, a flat array in RESP2 (ZRANGE
    /// WITHSCORES, ZPOPMIN with a count, HRANDFIELD WITHVALUES).
    Pairs(Vec<(Reply, Reply)>),
    /// A null array (RESP2 `*-1`, RESP3 null): LPOP with a count on an absent key, ZRANK
    /// WITHSCORE of a missing member.
    NilArray,
}

impl Reply {
    /// A scan step's reply: the next cursor as a string, then the elements.
    pub(crate) fn scan(next: u64, elements: Vec<Bytes>) -> Reply {
        Reply::Items(vec![
            Reply::Bulk(Bytes::from(next.to_string())),
            Reply::Array(elements),
        ])
    }
}

/// Why a command failed; the display texts are Redis's.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum CommandError {
    /// The key holds another kind of value.
    WrongType,
    /// The value is not a 64-bit integer.
    NotAnInteger,
    /// The increment would overflow.
    Overflow,
    /// The result would exceed a size limit.
    ValueTooLarge,
    /// The expiry is zero, negative or overflows (SET's wording).
    InvalidExpireTime,
    /// The expiry overflows, in the words of the named command (`expire`, `setex`, ...).
    InvalidExpireTimeIn(&'static str),
    /// The value or argument is not a float.
    NotAFloat,
    /// INCRBYFLOAT or HINCRBYFLOAT would produce NaN or an infinity.
    NanOrInfinity,
    /// HINCRBY on a field that is not an integer.
    HashNotInteger,
    /// HINCRBYFLOAT on a field that is not a float.
    HashNotFloat,
    /// ZADD INCR or ZINCRBY would produce NaN (`inf` plus `-inf`).
    ScoreNaN,
    /// LSET on an absent key.
    NoSuchKey,
    /// LSET past the end of the list.
    IndexOutOfRange,
    /// A count out of range (SRANDMEMBER and HRANDFIELD with a count below -[`REPEATS_MAX`]).
    OutOfRange,
    /// ZADD with NX and XX.
    ZAddNxXx,
    /// ZADD with two of GT, LT and NX.
    ZAddGtLtNx,
    /// ZADD INCR with more than one pair.
    ZAddIncrPairs,
    /// A ZCOUNT or ZRANGE BYSCORE bound that is not a float.
    MinMaxNotFloat,
    /// A ZRANGE BYLEX bound that does not start with `[` or `(` and is not `-` or `+`.
    MinMaxNotLex,
}

impl fmt::Display for CommandError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let CommandError::InvalidExpireTimeIn(command) = self {
            return write!(f, "ERR invalid expire time in '{command}' command");
        }
        f.write_str(match self {
            CommandError::WrongType => {
                "WRONGTYPE Operation against a key holding the wrong kind of value"
            }
            CommandError::NotAnInteger => "ERR value is not an integer or out of range",
            CommandError::Overflow => "ERR increment or decrement would overflow",
            CommandError::ValueTooLarge => "ERR value exceeds the configured size limit",
            CommandError::InvalidExpireTime | CommandError::InvalidExpireTimeIn(_) => {
                "ERR invalid expire time in 'set' command"
            }
            CommandError::NotAFloat => "ERR value is not a valid float",
            CommandError::NanOrInfinity => "ERR increment would produce NaN or Infinity",
            CommandError::HashNotInteger => "ERR hash value is not an integer",
            CommandError::HashNotFloat => "ERR hash value is not a float",
            CommandError::ScoreNaN => "ERR resulting score is not a number (NaN)",
            CommandError::NoSuchKey => "ERR no such key",
            CommandError::IndexOutOfRange => "ERR index out of range",
            CommandError::OutOfRange => "ERR value is out of range",
            CommandError::ZAddNxXx => "ERR XX and NX options at the same time are not compatible",
            CommandError::ZAddGtLtNx => {
                "ERR GT, LT, and/or NX options at the same time are not compatible"
            }
            CommandError::ZAddIncrPairs => {
                "ERR INCR option supports a single increment-element pair"
            }
            CommandError::MinMaxNotFloat => "ERR min or max is not a float",
            CommandError::MinMaxNotLex => "ERR min or max not valid string range item",
        })
    }
}

impl std::error::Error for CommandError {}

/// Size limits on what a register may hold. A command that would grow a value past them is
/// refused with [`CommandError::ValueTooLarge`]; one that shrinks a value already past them
/// (after the limits were lowered) still applies.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Limits {
    /// The largest string, or the largest sum of a collection's element bytes (a hash's fields
    /// and values; a sorted set's members, each with 8 bytes for its score).
    pub value_bytes_max: usize,
    /// The most elements of a collection: a set's members, a hash's fields, a list's
    /// elements, a sorted set's members.
    pub set_members_max: usize,
}

/// What applying a command did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Outcome {
    /// The reply to the client.
    pub reply: Reply,
    /// Whether the register changed (if not, it is exactly as before).
    pub changed: bool,
}

impl Outcome {
    fn unchanged(reply: Reply) -> Outcome {
        Outcome {
            reply,
            changed: false,
        }
    }

    fn changed(reply: Reply) -> Outcome {
        Outcome {
            reply,
            changed: true,
        }
    }

    fn error(error: CommandError) -> Outcome {
        Outcome::unchanged(Reply::Error(error))
    }
}

/// The XXH3 64-bit digest DIGEST and the IFDEQ/IFDNE conditions use.
pub fn digest(bytes: &[u8]) -> u64 {
    xxhash_rust::xxh3::xxh3_64(bytes)
}

/// The string form of a string or integer value (`None` for other kinds).
pub(crate) fn as_string(data: &Data) -> Option<Bytes> {
    match data {
        Data::Str(s) => Some(s.clone()),
        Data::Int(v) => Some(int_text(*v)),
        _ => None,
    }
}

/// Integers from 0 up to this one (excluded) have their text in one shared table, as Redis
/// shares its small integer objects: reading a counter then allocates nothing.
const SHARED_INTS: i64 = 10_000;

/// The decimal text of every shared integer, back to back, and where each one ends.
static SHARED_INT_TEXT: LazyLock<(Vec<u8>, Vec<u32>)> = LazyLock::new(|| {
    let mut text = Vec::new();
    let mut ends = Vec::new();
    for v in 0..SHARED_INTS {
        text.extend_from_slice(v.to_string().as_bytes());
        ends.push(text.len() as u32);
    }
    (text, ends)
});

/// The decimal text of `v`, as GET of an integer returns it.
pub fn int_text(v: i64) -> Bytes {
    if (0..SHARED_INTS).contains(&v) {
        let (text, ends) = &*SHARED_INT_TEXT;
        let i = v as usize;
        let start = i.checked_sub(1).map_or(0, |p| ends[p] as usize);
        return Bytes::from_static(&text[start..ends[i] as usize]);
    }
    Bytes::from(v.to_string())
}

/// Parses an integer with Redis's strict rules: optional '-', digits, no leading zeros, no
/// spaces, no '+'. The front end parses integer arguments with it too.
pub fn parse_i64(bytes: &[u8]) -> Option<i64> {
    let s = std::str::from_utf8(bytes).ok()?;
    let digits = s.strip_prefix('-').unwrap_or(s);
    if digits.is_empty()
        || !digits.bytes().all(|b| b.is_ascii_digit())
        || (digits.len() > 1 && digits.starts_with('0'))
        || s == "-0"
    {
        return None;
    }
    s.parse().ok()
}

/// Whether `condition` holds for the live data (`Err` when it needs a string and the key holds
/// another kind).
fn holds(condition: &Condition, data: &Data) -> Result<bool, CommandError> {
    let exists = *data != Data::Absent;
    let string = || as_string(data).ok_or(CommandError::WrongType);
    Ok(match condition {
        Condition::Always => true,
        Condition::Nx => !exists,
        Condition::Xx => exists,
        Condition::IfEq(v) => exists && string()? == *v,
        Condition::IfNe(v) => !exists || string()? != *v,
        Condition::IfDigestEq(d) => exists && digest(&string()?) == *d,
        Condition::IfDigestNe(d) => !exists || digest(&string()?) != *d,
    })
}

impl Command {
    /// The command's name, lowercase (for metrics and logs; INCR and DECR count as incrby).
    pub fn name(&self) -> &'static str {
        match self {
            Command::Get => "get",
            Command::Exists => "exists",
            Command::Digest => "digest",
            Command::SMembers => "smembers",
            Command::SIsMember(_) => "sismember",
            Command::SCard => "scard",
            Command::Set(_) => "set",
            Command::Del => "del",
            Command::DelEx(_) => "delex",
            Command::IncrBy(_) => "incrby",
            Command::SAdd(_) => "sadd",
            Command::SRem(_) => "srem",
            Command::LockAcquire { .. } => "lock.acquire",
            Command::LockRelease { .. } => "lock.release",
            Command::Ttl => "ttl",
            Command::PTtl => "pttl",
            Command::Type => "type",
            Command::StrLen => "strlen",
            Command::Expire(args) => args.kind.name(),
            Command::Persist => "persist",
            Command::Append(_) => "append",
            Command::GetDel => "getdel",
            Command::Hash(c) => c.name(),
            Command::List(c) => c.name(),
            Command::ZSet(c) => c.name(),
            Command::IncrByFloat(_) => "incrbyfloat",
            Command::GetEx(_) => "getex",
            Command::GetRange { .. } => "getrange",
            Command::SetRange { .. } => "setrange",
            Command::SPop { .. } => "spop",
            Command::SRandMember { .. } => "srandmember",
            Command::SMIsMember(_) => "smismember",
            Command::SScan(_) => "sscan",
            Command::Transaction(_) => "exec",
        }
    }

    /// Whether the command only reads.
    pub fn is_read_only(&self) -> bool {
        match self {
            Command::Hash(c) => c.is_read_only(),
            Command::List(c) => c.is_read_only(),
            Command::ZSet(c) => c.is_read_only(),
            Command::Transaction(commands) => commands.iter().all(Command::is_read_only),
            _ => matches!(
                self,
                Command::Get
                    | Command::Exists
                    | Command::Digest
                    | Command::SMembers
                    | Command::SIsMember(_)
                    | Command::SCard
                    | Command::Ttl
                    | Command::PTtl
                    | Command::Type
                    | Command::StrLen
                    | Command::GetEx(Expiry::Keep)
                    | Command::GetRange { .. }
                    | Command::SRandMember { .. }
                    | Command::SMIsMember(_)
                    | Command::SScan(_)
            ),
        }
    }

    /// Answers a read-only command at `now_ms` without changing anything. Write commands are
    /// answered as if applied to a copy (their reply only).
    pub fn read(&self, reg: &Register, now_ms: u64) -> Reply {
        let data = reg.live_data(now_ms);
        match self {
            Command::Get => match data {
                Data::Absent => Reply::Nil,
                other => {
                    as_string(other).map_or(Reply::Error(CommandError::WrongType), Reply::Bulk)
                }
            },
            Command::Exists => Reply::Int(i64::from(*data != Data::Absent)),
            Command::Digest => match data {
                Data::Absent => Reply::Nil,
                other => as_string(other).map_or(Reply::Error(CommandError::WrongType), |s| {
                    Reply::Bulk(Bytes::from(format!("{:016x}", digest(&s))))
                }),
            },
            Command::SMembers => match data {
                Data::Absent => Reply::Array(Vec::new()),
                Data::Set(m) => Reply::Array(m.iter().cloned().collect()),
                _ => Reply::Error(CommandError::WrongType),
            },
            Command::SIsMember(member) => match data {
                Data::Absent => Reply::Int(0),
                Data::Set(m) => Reply::Int(i64::from(m.contains(member))),
                _ => Reply::Error(CommandError::WrongType),
            },
            Command::SCard => match data {
                Data::Absent => Reply::Int(0),
                Data::Set(m) => Reply::Int(m.len() as i64),
                _ => Reply::Error(CommandError::WrongType),
            },
            Command::Ttl | Command::PTtl => match (data, reg.expires_at_ms) {
                (Data::Absent, _) => Reply::Int(-2),
                (_, None) => Reply::Int(-1),
                (_, Some(at)) => {
                    // Live, so `at > now_ms`.
                    let ms = i64::try_from(at - now_ms).unwrap_or(i64::MAX);
                    Reply::Int(if *self == Command::PTtl {
                        ms
                    } else {
                        ms.saturating_add(500) / 1000
                    })
                }
            },
            Command::Type => Reply::Status(match data {
                Data::Absent => "none",
                Data::Str(_) | Data::Int(_) => "string",
                Data::Set(_) => "set",
                Data::Lock(_) => "lock",
                Data::Hash(_) => "hash",
                Data::List(_) => "list",
                Data::ZSet(_) => "zset",
            }),
            Command::StrLen => match data {
                Data::Absent => Reply::Int(0),
                Data::Str(s) => Reply::Int(s.len() as i64),
                Data::Int(v) => Reply::Int(v.to_string().len() as i64),
                _ => Reply::Error(CommandError::WrongType),
            },
            Command::Hash(c) if c.is_read_only() => c.read(data),
            Command::List(c) if c.is_read_only() => c.read(data),
            Command::ZSet(c) if c.is_read_only() => c.read(data),
            Command::GetEx(Expiry::Keep) => match data {
                Data::Absent => Reply::Nil,
                other => {
                    as_string(other).map_or(Reply::Error(CommandError::WrongType), Reply::Bulk)
                }
            },
            Command::GetRange { start, end } => strings::get_range(*start, *end, data),
            Command::SRandMember { count, seed } => sets::srandmember(*count, *seed, data),
            Command::SMIsMember(members) => sets::smismember(members, data),
            Command::SScan(args) => sets::sscan(args, data),
            Command::Transaction(commands) => {
                Reply::Items(commands.iter().map(|c| c.read(reg, now_ms)).collect())
            }
            _ => {
                let mut copy = reg.clone();
                self.apply(&mut copy, now_ms, &Limits::UNLIMITED).reply
            }
        }
    }

    /// Applies the command in place; `now_ms` is the proposer's stamp. If `changed` is false the
    /// register is exactly as before.
    pub fn apply(&self, reg: &mut Register, now_ms: u64, limits: &Limits) -> Outcome {
        if self.is_read_only() {
            return Outcome::unchanged(self.read(reg, now_ms));
        }
        let expired = reg.is_expired(now_ms);
        let outcome = {
            let live = if expired { &Data::Absent } else { &reg.data };
            match self {
                Command::Set(args) => set(args, reg, live.clone(), now_ms, limits),
                Command::Del => {
                    if *live == Data::Absent {
                        Outcome::unchanged(Reply::Int(0))
                    } else {
                        *reg = reg.cleared();
                        Outcome::changed(Reply::Int(1))
                    }
                }
                Command::DelEx(condition) => del_ex(condition, reg, live.clone()),
                Command::IncrBy(delta) => incr_by(*delta, reg, live.clone(), expired),
                Command::SAdd(members) => sadd(members, reg, expired, limits),
                Command::SRem(members) => srem(members, reg, expired),
                Command::LockAcquire { owner, lease_ms } => {
                    lock_acquire(owner, *lease_ms, reg, expired, now_ms, limits)
                }
                Command::LockRelease { owner } => lock_release(owner, reg, expired),
                Command::Expire(args) => expire(args, reg, expired, now_ms),
                Command::Persist => {
                    if expired || reg.data == Data::Absent || reg.expires_at_ms.is_none() {
                        Outcome::unchanged(Reply::Int(0))
                    } else {
                        reg.expires_at_ms = None;
                        Outcome::changed(Reply::Int(1))
                    }
                }
                Command::Append(suffix) => append(suffix, reg, expired, limits),
                Command::GetDel => match live {
                    Data::Absent => Outcome::unchanged(Reply::Nil),
                    other => match as_string(other) {
                        Some(s) => {
                            *reg = reg.cleared();
                            Outcome::changed(Reply::Bulk(s))
                        }
                        None => Outcome::error(CommandError::WrongType),
                    },
                },
                Command::Hash(c) => c.write(reg, now_ms, limits),
                Command::List(c) => c.write(reg, now_ms, limits),
                Command::ZSet(c) => c.write(reg, now_ms, limits),
                Command::IncrByFloat(delta) => strings::incr_by_float(*delta, reg, now_ms),
                Command::GetEx(expiry) => strings::get_ex(*expiry, reg, now_ms),
                Command::SetRange { offset, value } => {
                    strings::set_range(*offset, value, reg, now_ms, limits)
                }
                Command::SPop { count, seed } => sets::spop(*count, *seed, reg, now_ms, limits),
                Command::Transaction(commands) => transaction(commands, reg, now_ms, limits),
                _ => unreachable!("read-only commands are answered above"),
            }
        };
        outcome
    }
}

/// Applies `commands` in order to one register, each seeing what the ones before it wrote.
fn transaction(commands: &[Command], reg: &mut Register, now_ms: u64, limits: &Limits) -> Outcome {
    let mut changed = false;
    let replies = commands
        .iter()
        .map(|c| {
            let outcome = c.apply(reg, now_ms, limits);
            changed |= outcome.changed;
            outcome.reply
        })
        .collect();
    Outcome {
        reply: Reply::Items(replies),
        changed,
    }
}

impl Limits {
    /// No limits (for reading replies of writes on a copy, and for checkers).
    pub const UNLIMITED: Limits = Limits {
        value_bytes_max: usize::MAX,
        set_members_max: usize::MAX,
    };
}

fn set(args: &SetArgs, reg: &mut Register, live: Data, now_ms: u64, limits: &Limits) -> Outcome {
    if args.value.len() > limits.value_bytes_max {
        return Outcome::error(CommandError::ValueTooLarge);
    }
    let old = match &live {
        Data::Absent => Reply::Nil,
        other => match as_string(other) {
            Some(s) => Reply::Bulk(s),
            None if args.get => return Outcome::error(CommandError::WrongType),
            None => Reply::Nil,
        },
    };
    let applies = match holds(&args.condition, &live) {
        Ok(applies) => applies,
        Err(e) => return Outcome::error(e),
    };
    let not_done = if args.get { old.clone() } else { Reply::Nil };
    if !applies {
        return Outcome::unchanged(not_done);
    }
    let expires_at_ms = match args.expiry {
        Expiry::Clear => None,
        Expiry::Keep if live == Data::Absent => None,
        Expiry::Keep => reg.expires_at_ms,
        Expiry::AfterMs(0) | Expiry::AtMs(0) => {
            return Outcome::error(CommandError::InvalidExpireTime)
        }
        // Redis keeps expiry instants in a signed 64-bit integer.
        Expiry::AfterMs(d) => match now_ms
            .checked_add(d)
            .filter(|at| i64::try_from(*at).is_ok())
        {
            Some(at) => Some(at),
            None => return Outcome::error(CommandError::InvalidExpireTime),
        },
        Expiry::AtMs(at) => Some(at),
    };
    let next = Register {
        data: Data::Str(args.value.clone()),
        expires_at_ms,
        fence: reg.fence,
    };
    let reply = if args.get { old } else { Reply::Ok };
    if next == *reg {
        return Outcome::unchanged(reply);
    }
    *reg = next;
    Outcome::changed(reply)
}

fn expire(args: &ExpireArgs, reg: &mut Register, expired: bool, now_ms: u64) -> Outcome {
    // The checks come in Redis's order: the time first (whether or not the key exists), then
    // the key, then the options.
    let invalid = Outcome::error(CommandError::InvalidExpireTimeIn(args.kind.name()));
    let mut when = args.time;
    if args.kind.in_seconds() {
        let Some(ms) = when.checked_mul(1000) else {
            return invalid;
        };
        when = ms;
    }
    let now = i64::try_from(now_ms).unwrap_or(i64::MAX);
    if args.kind.relative() {
        let Some(at) = when.checked_add(now) else {
            return invalid;
        };
        when = at;
    }
    if expired || reg.data == Data::Absent {
        return Outcome::unchanged(Reply::Int(0));
    }
    let current = reg
        .expires_at_ms
        .map(|at| i64::try_from(at).unwrap_or(i64::MAX));
    let flags = args.flags;
    let refused = (flags.nx && current.is_some())
        || (flags.xx && current.is_none())
        || (flags.gt && current.is_none_or(|c| when <= c))
        || (flags.lt && current.is_some_and(|c| when >= c));
    if refused {
        return Outcome::unchanged(Reply::Int(0));
    }
    if when <= now {
        // A time already past deletes the key, like Redis.
        *reg = reg.cleared();
        return Outcome::changed(Reply::Int(1));
    }
    let at = when.unsigned_abs();
    if reg.expires_at_ms == Some(at) {
        return Outcome::unchanged(Reply::Int(1));
    }
    reg.expires_at_ms = Some(at);
    Outcome::changed(Reply::Int(1))
}

fn append(suffix: &Bytes, reg: &mut Register, expired: bool, limits: &Limits) -> Outcome {
    if expired || reg.data == Data::Absent {
        // Like Redis, APPEND creates the key, even with an empty string.
        if suffix.len() > limits.value_bytes_max {
            return Outcome::error(CommandError::ValueTooLarge);
        }
        *reg = Register {
            data: Data::Str(suffix.clone()),
            expires_at_ms: None,
            fence: reg.fence,
        };
        return Outcome::changed(Reply::Int(suffix.len() as i64));
    }
    let Some(current) = as_string(&reg.data) else {
        return Outcome::error(CommandError::WrongType);
    };
    let len = current.len() + suffix.len();
    if suffix.is_empty() {
        // Nothing to append: an integer stays an integer, the register stays as it is.
        return Outcome::unchanged(Reply::Int(len as i64));
    }
    if len > limits.value_bytes_max {
        return Outcome::error(CommandError::ValueTooLarge);
    }
    let mut joined = Vec::with_capacity(len);
    joined.extend_from_slice(&current);
    joined.extend_from_slice(suffix);
    // The time to live stays.
    reg.data = Data::Str(Bytes::from(joined));
    Outcome::changed(Reply::Int(len as i64))
}

fn del_ex(condition: &Condition, reg: &mut Register, live: Data) -> Outcome {
    if live == Data::Absent {
        return Outcome::unchanged(Reply::Int(0));
    }
    match holds(condition, &live) {
        Err(e) => Outcome::error(e),
        Ok(false) => Outcome::unchanged(Reply::Int(0)),
        Ok(true) => {
            *reg = reg.cleared();
            Outcome::changed(Reply::Int(1))
        }
    }
}

fn incr_by(delta: i64, reg: &mut Register, live: Data, expired: bool) -> Outcome {
    let current = match &live {
        Data::Absent => 0,
        Data::Int(v) => *v,
        Data::Str(s) => match parse_i64(s) {
            Some(v) => v,
            None => return Outcome::error(CommandError::NotAnInteger),
        },
        _ => return Outcome::error(CommandError::WrongType),
    };
    let Some(next) = current.checked_add(delta) else {
        return Outcome::error(CommandError::Overflow);
    };
    reg.data = Data::Int(next);
    if expired {
        reg.expires_at_ms = None;
    }
    Outcome::changed(Reply::Int(next))
}

fn set_bytes(members: &BTreeSet<Bytes>) -> usize {
    members.iter().map(Bytes::len).sum()
}

fn sadd(members: &[Bytes], reg: &mut Register, expired: bool, limits: &Limits) -> Outcome {
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

fn srem(members: &[Bytes], reg: &mut Register, expired: bool) -> Outcome {
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

fn lock_acquire(
    owner: &Bytes,
    lease_ms: u64,
    reg: &mut Register,
    expired: bool,
    now_ms: u64,
    limits: &Limits,
) -> Outcome {
    if owner.len() > limits.value_bytes_max {
        return Outcome::error(CommandError::ValueTooLarge);
    }
    let Some(lease_until_ms) = now_ms.checked_add(lease_ms).filter(|_| lease_ms > 0) else {
        return Outcome::error(CommandError::InvalidExpireTime);
    };
    match &reg.data {
        _ if expired => {}
        Data::Absent => {}
        Data::Lock(lock) => {
            let held_by_other = lock
                .owner
                .as_ref()
                .is_some_and(|o| o != owner && lock.lease_until_ms > now_ms);
            if held_by_other {
                return Outcome::unchanged(Reply::Nil);
            }
            if lock.owner.as_ref() == Some(owner) && lock.lease_until_ms > now_ms {
                // Re-acquisition by the holder extends the lease and keeps the token.
                reg.data = Data::Lock(LockState {
                    owner: Some(owner.clone()),
                    lease_until_ms,
                });
                return Outcome::changed(Reply::Int(reg.fence as i64));
            }
        }
        _ => return Outcome::error(CommandError::WrongType),
    }
    // The token belongs to the key and survives DEL, SET and expiry: it never repeats.
    let Some(fence) = reg.fence.checked_add(1) else {
        return Outcome::error(CommandError::Overflow);
    };
    *reg = Register {
        data: Data::Lock(LockState {
            owner: Some(owner.clone()),
            lease_until_ms,
        }),
        expires_at_ms: None,
        fence,
    };
    Outcome::changed(Reply::Int(fence as i64))
}

fn lock_release(owner: &Bytes, reg: &mut Register, expired: bool) -> Outcome {
    if expired {
        return Outcome::unchanged(Reply::Int(0));
    }
    match &mut reg.data {
        Data::Absent => Outcome::unchanged(Reply::Int(0)),
        Data::Lock(lock) if lock.owner.as_ref() == Some(owner) => {
            lock.owner = None;
            Outcome::changed(Reply::Int(1))
        }
        Data::Lock(_) => Outcome::unchanged(Reply::Int(0)),
        _ => Outcome::error(CommandError::WrongType),
    }
}
