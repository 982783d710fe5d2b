//! String commands: SET with its conditions, APPEND, INCRBY, DELEX, and INCRBYFLOAT, GETEX,
//! GETRANGE, SETRANGE.
use bytes::Bytes;

use super::{
    as_string, digest, parse_i64, CommandError, Condition, Expiry, Limits, Outcome, Reply, SetArgs,
};
use crate::float::{format_human, parse_f64, Float};
use crate::value::{Data, Register};

/// INCRBYFLOAT: the value read as a float plus `delta`, stored and replied as text.
pub(crate) fn incr_by_float(
    delta: Float,
    reg: &mut Register,
    now_ms: u64,
    limits: &Limits,
) -> Outcome {
    let current = match reg.live_data(now_ms) {
        Data::Absent => 0.0,
        Data::Int(v) => *v as f64,
        Data::Str(s) => match parse_f64(s) {
            Some(v) => v,
            None => return Outcome::error(CommandError::NotAFloat),
        },
        _ => return Outcome::error(CommandError::WrongType),
    };
    let next = current + delta.get();
    if !next.is_finite() {
        return Outcome::error(CommandError::NanOrInfinity);
    }
    let text = Bytes::from(format_human(next));
    if text.len() > limits.value_bytes_max {
        // Plain notation writes a large float in full: 1e300 takes 301 bytes.
        return Outcome::error(CommandError::ValueTooLarge);
    }
    if !reg.is_live(now_ms) {
        // A new key starts without a time to live; an existing one keeps its own.
        reg.expires_at_ms = None;
    }
    reg.data = Data::Str(text.clone());
    Outcome::changed(Reply::Bulk(text))
}

/// GETEX: the string value; `expiry` says what happens to the time to live (`Keep` without
/// an option, `Clear` for PERSIST). An instant already past deletes the key, as in Redis.
pub(crate) fn get_ex(expiry: Expiry, reg: &mut Register, now_ms: u64) -> Outcome {
    let invalid = Outcome::error(CommandError::InvalidExpireTimeIn("getex"));
    // The time is checked before the key, as Redis does.
    let at = match expiry {
        Expiry::AfterMs(0) | Expiry::AtMs(0) => return invalid,
        Expiry::AfterMs(d) => match now_ms
            .checked_add(d)
            .filter(|at| i64::try_from(*at).is_ok())
        {
            Some(at) => Some(at),
            None => return invalid,
        },
        Expiry::AtMs(at) if i64::try_from(at).is_err() => return invalid,
        Expiry::AtMs(at) => Some(at),
        Expiry::Keep | Expiry::Clear => None,
    };
    let value = match reg.live_data(now_ms) {
        Data::Absent => return Outcome::unchanged(Reply::Nil),
        other => match as_string(other) {
            Some(s) => s,
            None => return Outcome::error(CommandError::WrongType),
        },
    };
    let reply = Reply::Bulk(value);
    let next_expiry = match (expiry, at) {
        (Expiry::Clear, _) => None,
        (_, Some(at)) if at <= now_ms => {
            *reg = reg.cleared();
            return Outcome::changed(reply);
        }
        (_, Some(at)) => Some(at),
        _ => reg.expires_at_ms,
    };
    if next_expiry == reg.expires_at_ms {
        return Outcome::unchanged(reply);
    }
    reg.expires_at_ms = next_expiry;
    Outcome::changed(reply)
}

/// GETRANGE: the bytes from `start` to `end`, both included, negative from the end (Redis 7's
/// clamping: two negative indexes in the wrong order select nothing).
pub(crate) fn get_range(start: i64, end: i64, data: &Data) -> Reply {
    let value = match data {
        Data::Absent => Bytes::new(),
        other => match as_string(other) {
            Some(s) => s,
            None => return Reply::Error(CommandError::WrongType),
        },
    };
    let len = value.len() as i64;
    if start < 0 && end < 0 && start > end {
        return Reply::Bulk(Bytes::new());
    }
    let start = if start < 0 {
        (len + start).max(0)
    } else {
        start
    };
    let end = if end < 0 { (len + end).max(0) } else { end }.min(len - 1);
    if start > end || len == 0 {
        return Reply::Bulk(Bytes::new());
    }
    Reply::Bulk(value.slice(start as usize..=end as usize))
}

/// SETRANGE: overwrites from `offset` on, padding with zero bytes; the new length. An empty
/// `value` changes nothing (and does not create the key).
pub(crate) fn set_range(
    offset: u64,
    value: &Bytes,
    reg: &mut Register,
    now_ms: u64,
    limits: &Limits,
) -> Outcome {
    let live = reg.live_data(now_ms);
    let current = match live {
        Data::Absent => Bytes::new(),
        other => match as_string(other) {
            Some(s) => s,
            None => return Outcome::error(CommandError::WrongType),
        },
    };
    if value.is_empty() {
        return Outcome::unchanged(Reply::Int(current.len() as i64));
    }
    let end = usize::try_from(offset)
        .ok()
        .and_then(|o| o.checked_add(value.len()))
        .filter(|end| *end <= limits.value_bytes_max);
    let Some(end) = end else {
        return Outcome::error(CommandError::ValueTooLarge);
    };
    let offset = end - value.len();
    let mut next = current.to_vec();
    if next.len() < end {
        next.resize(end, 0);
    }
    next[offset..end].copy_from_slice(value);
    let len = next.len() as i64;
    if *live == Data::Absent {
        *reg = Register {
            data: Data::Str(Bytes::from(next)),
            expires_at_ms: None,
            fence: reg.fence,
        };
    } else {
        reg.data = Data::Str(Bytes::from(next));
    }
    Outcome::changed(Reply::Int(len))
}

/// Whether `condition` holds for the live data (`Err` when it needs a string and the key holds
/// another kind).
pub(super) fn holds(condition: &Condition, data: &Data) -> Result<bool, CommandError> {
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

pub(super) fn set(
    args: &SetArgs,
    reg: &mut Register,
    live: Data,
    now_ms: u64,
    limits: &Limits,
) -> Outcome {
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

pub(super) fn append(
    suffix: &Bytes,
    reg: &mut Register,
    expired: bool,
    limits: &Limits,
) -> Outcome {
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

pub(super) fn del_ex(condition: &Condition, reg: &mut Register, live: Data) -> Outcome {
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

pub(super) fn incr_by(delta: i64, reg: &mut Register, live: Data, expired: bool) -> Outcome {
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
