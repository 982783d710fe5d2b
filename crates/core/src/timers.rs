//! The wake-ups a runtime holds for a replica: what [`ReplicaOutput::timers`] asks for, kept
//! by due time and fired in that order through [`Replica::handle_timer`]. Times are on the
//! runtime's clock (ms), passed in; nothing here reads one.
//!
//! Most wake-ups are stale by the time they fall due (the operation finished or re-armed
//! another); the proposer ignores those by their token, so they are kept without lookups.
//!
//! [`ReplicaOutput::timers`]: crate::replica::ReplicaOutput::timers
use std::collections::BTreeMap;

use crate::ids::Key;
use crate::proposer::TimerRequest;
use crate::replica::Replica;

/// Wake-ups by due millisecond: the key and token of each.
#[derive(Debug, Default)]
pub struct Timers {
    due: BTreeMap<u64, Vec<(Key, u64)>>,
}

impl Timers {
    /// Keeps `requests` until they fall due.
    pub fn schedule(&mut self, requests: impl IntoIterator<Item = TimerRequest>) {
        for timer in requests {
            self.due
                .entry(timer.at_ms)
                .or_default()
                .push((timer.key, timer.token));
        }
    }

    /// When the earliest wake-up is due.
    pub fn next_due_ms(&self) -> Option<u64> {
        self.due.keys().next().copied()
    }

    /// Fires every wake-up due at `now_ms` or earlier, in due order (in request order within
    /// one millisecond).
    pub fn fire_due(&mut self, now_ms: u64, replica: &mut Replica) {
        while let Some(entry) = self.due.first_entry() {
            if *entry.key() > now_ms {
                break;
            }
            for (key, token) in entry.remove() {
                replica.handle_timer(now_ms, &key, token);
            }
        }
    }
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
}
