//! EXPIRE, PEXPIRE, EXPIREAT and PEXPIREAT.
use super::{CommandError, ExpireArgs, Outcome, Reply};
use crate::value::{Data, Register};

pub(super) fn expire(args: &ExpireArgs, reg: &mut Register, expired: bool, now_ms: u64) -> Outcome {
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
