//! Which of a proposer's requested wake-ups are still live, told without looking up the
//! register.
//!
//! A busy proposer arms a timer with nearly every operation and most of them are stale when
//! they fire: the operation finished or re-armed. Each armed timer holds a slot in a dense
//! table, and the token handed to the runtime names the slot in its high bits, so a wake-up is
//! recognised as stale by one array read. A slot is reused once its timer fired or was
//! disarmed; a stale wake-up that finds its slot taken by another register's timer with the
//! same token is told apart by the register itself (see [`Proposer::handle_timer`]).
//!
//! Which slot a register's timer occupies depends on every other register's history, so it is
//! incidental state: [`TimerSlot`] compares equal to every other and hashes to nothing, and
//! with one register (the model checker's) every timer gets slot 0 and its token equals the
//! register's own timer token.
//!
//! [`Proposer::handle_timer`]: crate::proposer::Proposer::handle_timer
use crate::incidental::Incidental;

/// Bits of a token below the slot: the register's own timer count.
const SLOT_SHIFT: u32 = 40;
/// The register's timer count within a token.
const COUNT_MASK: u64 = (1 << SLOT_SHIFT) - 1;
/// The slot that stands for "no slot": the table is full, and the wake-up is checked against
/// the register alone.
const NO_SLOT: u32 = (1 << (64 - SLOT_SHIFT)) - 1;

/// The slot of a register's armed timer. Incidental: equal to every other slot.
pub(crate) type TimerSlot = Incidental<u32>;

/// The token handed out for a register's `count`-th timer in `slot`.
pub(crate) fn token(slot: TimerSlot, count: u64) -> u64 {
    (u64::from(slot.0) << SLOT_SHIFT) | (count & COUNT_MASK)
}

/// The live tokens, by slot.
#[derive(Clone, Debug, Default)]
pub(crate) struct ArmedTimers {
    /// The live token in each slot; 0 for a free slot (tokens start at 1).
    live: Vec<u64>,
    /// Free slots, reused last freed first.
    free: Vec<u32>,
}

impl ArmedTimers {
    /// A slot for a new timer.
    pub(crate) fn take(&mut self) -> TimerSlot {
        if let Some(slot) = self.free.pop() {
            return Incidental(slot);
        }
        match u32::try_from(self.live.len()) {
            Ok(slot) if slot < NO_SLOT => {
                self.live.push(0);
                Incidental(slot)
            }
            _ => Incidental(NO_SLOT),
        }
    }

    /// Records `token` as the live timer of `slot`.
    pub(crate) fn arm(&mut self, slot: TimerSlot, token: u64) {
        debug_assert!(token != 0);
        if let Some(live) = self.live.get_mut(slot.0 as usize) {
            *live = token;
        }
    }

    /// Frees `slot`: its timer fired or was disarmed.
    pub(crate) fn release(&mut self, slot: TimerSlot) {
        if let Some(live) = self.live.get_mut(slot.0 as usize) {
            *live = 0;
            self.free.push(slot.0);
        }
    }

    /// Whether `token` may be live: false means certainly stale. True means the register must
    /// still confirm it (its slot may have been reused with an equal token, or the table was
    /// full).
    pub(crate) fn may_be_live(&self, token: u64) -> bool {
        let slot = (token >> SLOT_SHIFT) as u32;
        slot == NO_SLOT || self.live.get(slot as usize) == Some(&token)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_disarmed_or_rearmed_timer_is_stale_and_its_slot_is_reused() {
        let mut armed = ArmedTimers::default();
        let a = armed.take();
        let b = armed.take();
        let (ta, tb) = (token(a, 1), token(b, 1));
        assert_ne!(
            ta, tb,
            "one register's first timer and another's differ by slot"
        );
        armed.arm(a, ta);
        armed.arm(b, tb);
        assert!(armed.may_be_live(ta) && armed.may_be_live(tb));
        // Re-armed in the same slot: the older token is stale.
        let ta2 = token(a, 2);
        armed.arm(a, ta2);
        assert!(!armed.may_be_live(ta) && armed.may_be_live(ta2));
        armed.release(a);
        assert!(!armed.may_be_live(ta2));
        let c = armed.take();
        assert_eq!(c.0, a.0, "the freed slot is reused");
        armed.arm(c, token(c, 7));
        assert!(armed.may_be_live(token(c, 7)) && !armed.may_be_live(ta2));
    }

    #[test]
    fn the_first_slot_leaves_the_token_equal_to_the_count() {
        let mut armed = ArmedTimers::default();
        let slot = armed.take();
        assert_eq!(token(slot, 5), 5);
        armed.release(slot);
        assert_eq!(token(armed.take(), 6), 6);
    }

    #[test]
    fn the_no_slot_sentinel_is_never_stored_and_always_left_to_the_register() {
        // What `take` hands out once the table is full (not reached here: it takes 2^24 - 1
        // armed timers); built directly.
        let mut armed = ArmedTimers::default();
        let none = Incidental(NO_SLOT);
        armed.arm(none, token(none, 3));
        armed.release(none);
        assert!(armed.may_be_live(token(none, 3)));
        assert!(
            armed.free.is_empty(),
            "the sentinel is never freed into the table"
        );
        assert!(armed.live.is_empty());
        let _ = armed.take();
        assert_eq!(armed.live.len(), 1);
    }
}
