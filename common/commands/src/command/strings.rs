//! The string commands that go beyond GET and SET: INCRBYFLOAT, GETEX, GETRANGE, SETRANGE.
use bytes::Bytes;

use super::{as_string, CommandError, Expiry, Limits, Outcome, Reply};
use crate::float::{format_human, parse_f64, Float};
use crate::value::{Data, Register};

/// INCRBYFLOAT: the value read as a float plus `delta`, stored and replied as text.
pub(crate) fn incr_by_float(delta: Float, reg: &mut Register, now_ms: u64) -> Outcome {
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
