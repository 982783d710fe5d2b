//! The wake-ups a runtime holds for a replica: what [`ReplicaOutput::timers`] asks for, kept
//! by due time and fired in that order through [`Replica::handle_timer`]. Times are on the
//! runtime's clock (ms), passed in; nothing here reads one.
//!
//! Most wake-ups are stale by the time they fall due (the operation finished or re-armed
//! another); the proposer ignores those by their token, so they are kept without lookups.
//!
//! Nearly every wake-up falls due within a few hundred milliseconds (phase timeouts, straggler
//! waits, backoffs), and a busy replica asks for one with nearly every command, so those go
//! into a wheel of one bucket per millisecond: scheduling one is a push, firing a millisecond
//! takes one bucket. Wake-ups beyond the wheel wait in an ordered map until the wheel reaches
//! them.
//!
//! [`ReplicaOutput::timers`]: crate::replica::ReplicaOutput::timers
use std::collections::BTreeMap;

use crate::ids::Key;
use crate::proposer::TimerRequest;
use crate::replica::Replica;

/// The milliseconds the wheel spans.
const WHEEL_MS: u64 = 256;

/// Wake-ups by due millisecond: the key and token of each.
#[derive(Debug)]
pub struct Timers {
    /// Every millisecond before this one has fired.
    cursor_ms: u64,
    /// Wake-ups due before `cursor_ms` when asked for, fired first, in request order.
    overdue: Vec<(u64, Key, u64)>,
    /// Wake-ups due in `cursor_ms .. cursor_ms + WHEEL_MS`, by due millisecond modulo
    /// `WHEEL_MS`, each bucket in request order.
    wheel: Vec<Vec<(Key, u64)>>,
    /// How many wake-ups the wheel holds.
    in_wheel: usize,
    /// Wake-ups due later, moved into the wheel as it turns.
    later: BTreeMap<u64, Vec<(Key, u64)>>,
}

impl Default for Timers {
    fn default() -> Timers {
        Timers {
            cursor_ms: 0,
            overdue: Vec::new(),
            wheel: (0..WHEEL_MS).map(|_| Vec::new()).collect(),
            in_wheel: 0,
            later: BTreeMap::new(),
        }
    }
}

impl Timers {
    /// Keeps `requests` until they fall due.
    pub fn schedule(&mut self, requests: impl IntoIterator<Item = TimerRequest>) {
        for timer in requests {
            self.keep(timer.at_ms, timer.key, timer.token);
        }
    }

    fn keep(&mut self, at_ms: u64, key: Key, token: u64) {
        if at_ms < self.cursor_ms {
            self.overdue.push((at_ms, key, token));
        } else if at_ms - self.cursor_ms < WHEEL_MS {
            self.wheel[bucket(at_ms)].push((key, token));
            self.in_wheel += 1;
        } else {
            self.later.entry(at_ms).or_default().push((key, token));
        }
    }

    /// When the earliest wake-up is due.
    pub fn next_due_ms(&self) -> Option<u64> {
        if let Some(earliest) = self.overdue.iter().map(|(at_ms, ..)| *at_ms).min() {
            return Some(earliest);
        }
        if self.in_wheel > 0 {
            return (self.cursor_ms..self.cursor_ms + WHEEL_MS)
                .find(|&at_ms| !self.wheel[bucket(at_ms)].is_empty());
        }
        self.later.keys().next().copied()
    }

    /// Fires every wake-up due at `now_ms` or earlier, in due order (in request order within
    /// one millisecond).
    pub fn fire_due(&mut self, now_ms: u64, replica: &mut Replica) {
        self.take_due(now_ms, |key, token| {
            replica.handle_timer(now_ms, key, token)
        });
    }

    /// Hands every wake-up due at `now_ms` or earlier to `fire`, in due order.
    fn take_due(&mut self, now_ms: u64, mut fire: impl FnMut(&Key, u64)) {
        if !self.overdue.is_empty() {
            let mut overdue = std::mem::take(&mut self.overdue);
            // Stable: request order within one millisecond.
            overdue.sort_by_key(|(at_ms, ..)| *at_ms);
            for (_, key, token) in overdue.drain(..) {
                fire(&key, token);
            }
            self.overdue = overdue;
        }
        while self.cursor_ms <= now_ms {
            if self.in_wheel == 0 {
                // Nothing in the wheel: jump to the earlier of the next due time and `now_ms`.
                let next = self.later.keys().next().copied().unwrap_or(u64::MAX);
                let jump = next.min(now_ms.saturating_add(1));
                if jump > self.cursor_ms {
                    self.cursor_ms = jump;
                    self.take_later();
                    continue;
                }
            }
            let index = bucket(self.cursor_ms);
            if !self.wheel[index].is_empty() {
                let mut due = std::mem::take(&mut self.wheel[index]);
                self.in_wheel -= due.len();
                for (key, token) in due.drain(..) {
                    fire(&key, token);
                }
                // The emptied bucket keeps its memory for a later millisecond.
                self.wheel[index] = due;
            }
            self.cursor_ms += 1;
            self.take_later();
        }
    }

    /// Moves the wake-ups that the wheel now spans out of `later`, in due order (those came
    /// before any request for the same millisecond that went straight into the wheel).
    fn take_later(&mut self) {
        let end = self.cursor_ms.saturating_add(WHEEL_MS);
        while let Some(entry) = self.later.first_entry() {
            if *entry.key() >= end {
                break;
            }
            let at_ms = *entry.key();
            let timers = entry.remove();
            self.in_wheel += timers.len();
            self.wheel[bucket(at_ms)].extend(timers);
        }
    }
}

/// The wheel's bucket for a due millisecond.
fn bucket(at_ms: u64) -> usize {
    (at_ms % WHEEL_MS) as usize
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(key: &str, at_ms: u64, token: u64) -> TimerRequest {
        TimerRequest {
            key: Key::new(key.to_string()),
            token,
            at_ms,
        }
    }

    #[test]
    fn fires_what_is_due_and_keeps_the_rest() {
        let mut timers = Timers::default();
        assert_eq!(timers.next_due_ms(), None);
        timers.schedule([
            request("b", 20, 1),
            request("a", 10, 1),
            request("c", 20, 2),
        ]);
        assert_eq!(timers.next_due_ms(), Some(10));
        let mut replica = Replica::new(
            crate::ids::NodeId(1),
            1,
            crate::config::ProposerConfig::new(vec![crate::ids::NodeId(1)]),
            1,
            [],
        );
        timers.fire_due(15, &mut replica);
        assert_eq!(timers.next_due_ms(), Some(20));
        timers.fire_due(20, &mut replica);
        assert_eq!(timers.next_due_ms(), None);
    }

    /// What `take_due` fires at `now_ms`, as (key, token).
    fn fired(timers: &mut Timers, now_ms: u64) -> Vec<(String, u64)> {
        let mut fired = Vec::new();
        timers.take_due(now_ms, |key, token| {
            fired.push((String::from_utf8_lossy(key.as_bytes()).into_owned(), token))
        });
        fired
    }

    fn named(list: &[(&str, u64)]) -> Vec<(String, u64)> {
        list.iter().map(|(k, t)| (k.to_string(), *t)).collect()
    }

    #[test]
    fn fires_in_due_order_then_request_order_across_the_wheel_and_beyond() {
        let mut timers = Timers::default();
        let far = 10 * WHEEL_MS;
        timers.schedule([
            request("far", far, 1),
            request("b", 5, 1),
            request("a", 3, 1),
            request("edge", WHEEL_MS, 1),
            request("b2", 5, 2),
            request("far2", far, 2),
        ]);
        assert_eq!(timers.next_due_ms(), Some(3));
        assert_eq!(fired(&mut timers, 2), named(&[]));
        assert_eq!(
            fired(&mut timers, 5),
            named(&[("a", 1), ("b", 1), ("b2", 2)])
        );
        assert_eq!(timers.next_due_ms(), Some(WHEEL_MS));
        // Asked for while `far` waits outside the wheel: fires after it, in request order.
        timers.schedule([request("far3", far, 3)]);
        assert_eq!(fired(&mut timers, WHEEL_MS), named(&[("edge", 1)]));
        assert_eq!(timers.next_due_ms(), Some(far));
        timers.schedule([request("far4", far, 4)]);
        assert_eq!(fired(&mut timers, far - 1), named(&[]));
        assert_eq!(
            fired(&mut timers, far + 1),
            named(&[("far", 1), ("far2", 2), ("far3", 3), ("far4", 4)])
        );
        assert_eq!(timers.next_due_ms(), None);
    }

    #[test]
    fn a_wake_up_asked_for_in_the_past_fires_first_at_the_next_call() {
        let mut timers = Timers::default();
        assert_eq!(fired(&mut timers, 100), named(&[]));
        timers.schedule([
            request("soon", 101, 1),
            request("past", 0, 1),
            request("past2", 50, 1),
        ]);
        assert_eq!(timers.next_due_ms(), Some(0));
        assert_eq!(fired(&mut timers, 100), named(&[("past", 1), ("past2", 1)]));
        assert_eq!(timers.next_due_ms(), Some(101));
        assert_eq!(fired(&mut timers, 101), named(&[("soon", 1)]));
    }

    #[test]
    fn a_long_idle_jump_skips_empty_milliseconds() {
        let mut timers = Timers::default();
        let later = 1_000_000_000_000;
        timers.schedule([
            request("a", later, 1),
            request("b", later + 3 * WHEEL_MS, 1),
        ]);
        assert_eq!(fired(&mut timers, later - 1), named(&[]));
        assert_eq!(
            fired(&mut timers, later + 5 * WHEEL_MS),
            named(&[("a", 1), ("b", 1)])
        );
        timers.schedule([request("c", later + 5 * WHEEL_MS + 1, 1)]);
        assert_eq!(timers.next_due_ms(), Some(later + 5 * WHEEL_MS + 1));
    }
}
