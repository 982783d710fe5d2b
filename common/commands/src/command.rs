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
use std::sync::LazyLock;

use bytes::Bytes;

use crate::float::Float;
use crate::value::{Data, Register};

mod collection;
mod expiry;
pub mod hash;
pub mod list;
mod lock;
mod random;
mod reply;
pub mod scan;
mod sets;
pub mod sorted_set;
mod strings;

pub use hash::HashCmd;
pub use list::{ListCmd, ListEnd};
pub use random::REPEATS_MAX;
pub use reply::{CommandError, Outcome, Reply};
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

    /// Gives the commands that choose at random (SPOP, SRANDMEMBER, HRANDFIELD) their seed;
    /// in a transaction each gets its own, derived from `seed` and its place. The proposer
    /// calls this once, before the first apply, with a number from its own seeded generator:
    /// the seed is then part of the command, and every replica and checker that applies it
    /// chooses the same. Other commands are left as they are.
    pub fn seed(&mut self, seed: u64) {
        match self {
            Command::SPop { seed: s, .. }
            | Command::SRandMember { seed: s, .. }
            | Command::Hash(HashCmd::HRandField { seed: s, .. }) => *s = seed,
            Command::Transaction(commands) => {
                for (i, command) in commands.iter_mut().enumerate() {
                    // Distinct multiples of an odd constant keep the derived seeds apart.
                    command.seed(seed ^ (i as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15));
                }
            }
            _ => {}
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
            Command::Type => Reply::Status(data.type_name()),
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
                Command::Set(args) => strings::set(args, reg, live.clone(), now_ms, limits),
                Command::Del => {
                    if *live == Data::Absent {
                        Outcome::unchanged(Reply::Int(0))
                    } else {
                        *reg = reg.cleared();
                        Outcome::changed(Reply::Int(1))
                    }
                }
                Command::DelEx(condition) => strings::del_ex(condition, reg, live.clone()),
                Command::IncrBy(delta) => strings::incr_by(*delta, reg, live.clone(), expired),
                Command::SAdd(members) => sets::sadd(members, reg, expired, limits),
                Command::SRem(members) => sets::srem(members, reg, expired),
                Command::LockAcquire { owner, lease_ms } => {
                    lock::lock_acquire(owner, *lease_ms, reg, expired, now_ms, limits)
                }
                Command::LockRelease { owner } => lock::lock_release(owner, reg, expired),
                Command::Expire(args) => expiry::expire(args, reg, expired, now_ms),
                Command::Persist => {
                    if expired || reg.data == Data::Absent || reg.expires_at_ms.is_none() {
                        Outcome::unchanged(Reply::Int(0))
                    } else {
                        reg.expires_at_ms = None;
                        Outcome::changed(Reply::Int(1))
                    }
                }
                Command::Append(suffix) => strings::append(suffix, reg, expired, limits),
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
                Command::IncrByFloat(delta) => strings::incr_by_float(*delta, reg, now_ms, limits),
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

impl Limits {
    /// No limits (for reading replies of writes on a copy, and for checkers).
    pub const UNLIMITED: Limits = Limits {
        value_bytes_max: usize::MAX,
        set_members_max: usize::MAX,
    };
}
