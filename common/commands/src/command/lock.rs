//! logless's fencing lock: acquire with a lease, release by the owner. The token belongs to the
//! key (see [`Register::fence`]).
use bytes::Bytes;

use super::{CommandError, Limits, Outcome, Reply};
use crate::value::{Data, LockState, Register};

pub(super) fn lock_acquire(
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

pub(super) fn lock_release(owner: &Bytes, reg: &mut Register, expired: bool) -> Outcome {
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
