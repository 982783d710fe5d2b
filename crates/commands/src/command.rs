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
use std::collections::BTreeSet;
use std::fmt;

use bytes::Bytes;

use crate::value::{Data, LockState, Register};

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
    /// DELEX [condition]: a conditional delete.
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
    /// A list of strings.
    Array(Vec<Bytes>),
    /// An error.
    Error(CommandError),
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
    /// The expiry is zero, negative or overflows.
    InvalidExpireTime,
}

impl fmt::Display for CommandError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            CommandError::WrongType => {
                "WRONGTYPE Operation against a key holding the wrong kind of value"
            }
            CommandError::NotAnInteger => "ERR value is not an integer or out of range",
            CommandError::Overflow => "ERR increment or decrement would overflow",
            CommandError::ValueTooLarge => "ERR value exceeds the configured size limit",
            CommandError::InvalidExpireTime => "ERR invalid expire time in 'set' command",
        })
    }
}

impl std::error::Error for CommandError {}

/// Size limits on what a register may hold.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Limits {
    /// The largest string, or the largest sum of a set's member bytes.
    pub value_bytes_max: usize,
    /// The most members of a set.
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
fn as_string(data: &Data) -> Option<Bytes> {
    match data {
        Data::Str(s) => Some(s.clone()),
        Data::Int(v) => Some(Bytes::from(v.to_string())),
        _ => None,
    }
}

/// Parses an integer with Redis's strict rules: optional '-', digits, no leading zeros, no
/// spaces, no '+'.
fn parse_i64(bytes: &[u8]) -> Option<i64> {
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
        }
    }

    /// Whether the command only reads.
    pub fn is_read_only(&self) -> bool {
        matches!(
            self,
            Command::Get
                | Command::Exists
                | Command::Digest
                | Command::SMembers
                | Command::SIsMember(_)
                | Command::SCard
        )
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
                        *reg = Register::default();
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
                _ => unreachable!("read-only commands are answered above"),
            }
        };
        outcome
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
        Expiry::AfterMs(d) => match now_ms.checked_add(d) {
            Some(at) => Some(at),
            None => return Outcome::error(CommandError::InvalidExpireTime),
        },
        Expiry::AtMs(at) => Some(at),
    };
    let next = Register {
        data: Data::Str(args.value.clone()),
        expires_at_ms,
    };
    let reply = if args.get { old } else { Reply::Ok };
    if next == *reg {
        return Outcome::unchanged(reply);
    }
    *reg = next;
    Outcome::changed(reply)
}

fn del_ex(condition: &Condition, reg: &mut Register, live: Data) -> Outcome {
    if live == Data::Absent {
        return Outcome::unchanged(Reply::Int(0));
    }
    match holds(condition, &live) {
        Err(e) => Outcome::error(e),
        Ok(false) => Outcome::unchanged(Reply::Int(0)),
        Ok(true) => {
            *reg = Register::default();
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
        *reg = Register::default();
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
    let fence = match &reg.data {
        _ if expired => 0,
        Data::Absent => 0,
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
                let fence = lock.fence;
                reg.data = Data::Lock(LockState {
                    owner: Some(owner.clone()),
                    fence,
                    lease_until_ms,
                });
                return Outcome::changed(Reply::Int(fence as i64));
            }
            lock.fence
        }
        _ => return Outcome::error(CommandError::WrongType),
    };
    let fence = fence + 1;
    *reg = Register {
        data: Data::Lock(LockState {
            owner: Some(owner.clone()),
            fence,
            lease_until_ms,
        }),
        expires_at_ms: None,
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
