//! The event queue of a simulation: events in (time, insertion) order, so a seed replays
//! exactly.
use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};

/// Events of type `E` by due time (µs); events due at the same time come out in the order
/// they were scheduled.
pub struct EventQueue<E> {
    now_us: u64,
    scheduled: u64,
    heap: BinaryHeap<Reverse<(u64, u64, usize)>>,
    due_now: VecDeque<(u64, u64, usize)>,
    payloads: Vec<Option<E>>,
    free_slots: Vec<usize>,
}

impl<E> Default for EventQueue<E> {
    fn default() -> Self {
        EventQueue {
            now_us: 0,
            scheduled: 0,
            heap: BinaryHeap::new(),
            due_now: VecDeque::new(),
            payloads: Vec::new(),
            free_slots: Vec::new(),
        }
    }
}

impl<E> EventQueue<E> {
    /// The time of the event taken last (µs).
    pub fn now_us(&self) -> u64 {
        self.now_us
    }

    /// Schedules `event` `delay_us` from now.
    pub fn schedule(&mut self, delay_us: u64, event: E) {
        let slot = match self.free_slots.pop() {
            Some(slot) => {
                self.payloads[slot] = Some(event);
                slot
            }
            None => {
                self.payloads.push(Some(event));
                self.payloads.len() - 1
            }
        };
        self.scheduled += 1;
        let entry = (self.now_us + delay_us, self.scheduled, slot);
        // Events due now need no heap: in insertion order they come after everything already
        // due at this time, which `pop` checks against the heap's head.
        if delay_us == 0 {
            self.due_now.push_back(entry);
        } else {
            self.heap.push(Reverse(entry));
        }
    }

    /// When the next event is due, if any.
    pub fn next_due_us(&self) -> Option<u64> {
        match (self.due_now.front(), self.heap.peek()) {
            (None, None) => None,
            (Some(now), None) => Some(now.0),
            (None, Some(Reverse(next))) => Some(next.0),
            (Some(now), Some(Reverse(next))) => Some(now.0.min(next.0)),
        }
    }

    /// Takes the next event in (time, insertion) order and moves the clock to it.
    pub fn pop(&mut self) -> Option<(u64, E)> {
        let from_heap = match (self.due_now.front(), self.heap.peek()) {
            (None, None) => return None,
            (Some(_), None) => false,
            (None, Some(_)) => true,
            (Some(now), Some(Reverse(next))) => next < now,
        };
        let (at, _, slot) = if from_heap {
            self.heap.pop().expect("peeked").0
        } else {
            self.due_now.pop_front().expect("peeked")
        };
        self.now_us = at;
        let event = self.payloads[slot].take().expect("event payload");
        self.free_slots.push(slot);
        Some((at, event))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_come_out_by_time_then_insertion() {
        let mut q = EventQueue::default();
        q.schedule(5, "b");
        q.schedule(0, "a");
        q.schedule(5, "c");
        assert_eq!(q.pop(), Some((0, "a")));
        q.schedule(0, "d");
        assert_eq!(q.pop(), Some((0, "d")));
        assert_eq!(q.pop(), Some((5, "b")));
        q.schedule(0, "e");
        assert_eq!(q.pop(), Some((5, "c")));
        assert_eq!(q.pop(), Some((5, "e")));
        assert_eq!(q.pop(), None);
    }
}
