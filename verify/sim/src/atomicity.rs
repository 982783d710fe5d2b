//! A linearizability checker that sees atomicity across keys: the whole state of a few counters
//! is one model, so an operation spanning keys must appear to take effect at one instant.
//!
//! The per-key checker ([`crate::linearizability`]) splits a history by key, which is sound
//! for operations on one key and blind to a transfer between two counters that another client
//! saw half done. Here every operation names some of [`KEYS`] counters and the model is all of
//! them together: a transfer (MULTI, DECRBY, INCRBY, EXEC), an MSET of every key and an MGET of
//! every key must each fit one point of one total order that respects real time (Wing and
//! Gong's search, with Lowe's memoisation of the set of operations placed and the state
//! reached). Operations whose outcome is unknown may take effect at any point after their call,
//! or never.
use std::collections::HashSet;

/// How many counters the model has.
pub const KEYS: usize = 3;

/// The state: each counter's value, `None` while absent.
pub type Counters = [Option<i64>; KEYS];

/// An operation of the counter workload.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CounterOp {
    /// INCRBY: the new value.
    Incr {
        /// The counter.
        key: usize,
        /// The increment.
        by: i64,
    },
    /// GET: the value, nil if absent.
    Get {
        /// The counter.
        key: usize,
    },
    /// DECRBY `from` and INCRBY `to` in one transaction: both new values.
    Transfer {
        /// The counter debited.
        from: usize,
        /// The counter credited.
        to: usize,
        /// How much.
        amount: i64,
    },
    /// MSET of every counter.
    MSet {
        /// The values, by counter.
        values: [i64; KEYS],
    },
    /// MGET of every counter.
    MGet,
}

/// What an operation answered.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CounterResult {
    /// An INCRBY's new value.
    Int(i64),
    /// A GET's value.
    Value(Option<i64>),
    /// A transfer's new values of `from` and `to`.
    Pair(i64, i64),
    /// An MSET's OK.
    Ok,
    /// An MGET's values.
    Values(Counters),
}

impl CounterOp {
    /// Applies the operation to `state`: the new state and the answer.
    pub fn apply(&self, state: &Counters) -> (Counters, CounterResult) {
        let mut next = *state;
        let result = match *self {
            CounterOp::Incr { key, by } => {
                let v = next[key].unwrap_or(0) + by;
                next[key] = Some(v);
                CounterResult::Int(v)
            }
            CounterOp::Get { key } => CounterResult::Value(next[key]),
            CounterOp::Transfer { from, to, amount } => {
                let a = next[from].unwrap_or(0) - amount;
                next[from] = Some(a);
                let b = next[to].unwrap_or(0) + amount;
                next[to] = Some(b);
                CounterResult::Pair(a, b)
            }
            CounterOp::MSet { values } => {
                next = values.map(Some);
                CounterResult::Ok
            }
            CounterOp::MGet => CounterResult::Values(next),
        };
        (next, result)
    }
}

/// One operation of a history: its call, and its return if the client saw one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Event {
    /// The client that ran it.
    pub client: u64,
    /// The operation.
    pub op: CounterOp,
    /// When it was called.
    pub call_ms: u64,
    /// When it returned and what it answered; `None` if its outcome is unknown.
    pub returned: Option<(u64, CounterResult)>,
}

/// Why a history was not accepted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// No order of the operations explains the answers: not linearizable.
    NotLinearizable {
        /// The most operations any order placed before it got stuck.
        placed_max: usize,
        /// An answered operation among those that could come next at that point.
        stuck_at: Option<Event>,
    },
    /// The search visited more states than it may: no verdict.
    Inconclusive {
        /// States visited.
        states: usize,
    },
}

/// Checks that `history` is linearizable against the counters model, starting from every
/// counter absent; visits at most `states_max` states.
pub fn check(history: &[Event], states_max: usize) -> Result<(), Refusal> {
    let mut events = history.to_vec();
    events.sort_by_key(|e| e.call_ms);
    let mut search = Search {
        events: &events,
        seen: HashSet::new(),
        states_max,
        placed_max: 0,
        stuck_at: None,
        out_of_budget: false,
    };
    let placed = vec![false; events.len()];
    let answered = events.iter().filter(|e| e.returned.is_some()).count();
    if search.place(placed, [None; KEYS], 0, answered) {
        return Ok(());
    }
    if search.out_of_budget {
        return Err(Refusal::Inconclusive {
            states: search.seen.len(),
        });
    }
    Err(Refusal::NotLinearizable {
        placed_max: search.placed_max,
        stuck_at: search.stuck_at,
    })
}

struct Search<'a> {
    events: &'a [Event],
    seen: HashSet<(Vec<bool>, Counters)>,
    states_max: usize,
    placed_max: usize,
    stuck_at: Option<Event>,
    out_of_budget: bool,
}

impl Search<'_> {
    /// Whether the operations not yet `placed` can follow, from `state`; `answered_left` is
    /// how many answered ones are among them.
    fn place(
        &mut self,
        placed: Vec<bool>,
        state: Counters,
        placed_count: usize,
        answered_left: usize,
    ) -> bool {
        if answered_left == 0 {
            return true;
        }
        // An operation may come next only if no unplaced operation returned before its call.
        let first_return = self
            .events
            .iter()
            .zip(&placed)
            .filter(|(_, &p)| !p)
            .filter_map(|(e, _)| e.returned.map(|(at, _)| at))
            .min()
            .unwrap_or(u64::MAX);
        if placed_count > self.placed_max {
            self.placed_max = placed_count;
            self.stuck_at = self
                .events
                .iter()
                .zip(&placed)
                .find(|(e, &p)| !p && e.returned.is_some() && e.call_ms <= first_return)
                .map(|(e, _)| e.clone());
        }
        for i in 0..self.events.len() {
            let event = &self.events[i];
            if event.call_ms > first_return {
                break;
            }
            if placed[i] {
                continue;
            }
            let (next, result) = event.op.apply(&state);
            let left = match event.returned {
                Some((_, answer)) if answer != result => continue,
                Some(_) => answered_left - 1,
                None => answered_left,
            };
            let mut next_placed = placed.clone();
            next_placed[i] = true;
            if !self.seen.insert((next_placed.clone(), next)) {
                continue;
            }
            if self.seen.len() > self.states_max {
                self.out_of_budget = true;
                return false;
            }
            if self.place(next_placed, next, placed_count + 1, left) {
                return true;
            }
            if self.out_of_budget {
                return false;
            }
        }
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(client: u64, op: CounterOp, call_ms: u64, ret: Option<(u64, CounterResult)>) -> Event {
        Event {
            client,
            op,
            call_ms,
            returned: ret,
        }
    }

    const TRANSFER: CounterOp = CounterOp::Transfer {
        from: 0,
        to: 1,
        amount: 5,
    };

    #[test]
    fn a_transfer_seen_whole_is_linearizable() {
        let history = [
            event(1, TRANSFER, 0, Some((10, CounterResult::Pair(-5, 5)))),
            event(
                2,
                CounterOp::MGet,
                1,
                Some((9, CounterResult::Values([None; KEYS]))),
            ),
            event(
                2,
                CounterOp::MGet,
                11,
                Some((12, CounterResult::Values([Some(-5), Some(5), None]))),
            ),
        ];
        assert_eq!(check(&history, 1_000), Ok(()));
    }

    #[test]
    fn a_transfer_seen_half_done_is_refused() {
        let history = [
            event(1, TRANSFER, 0, Some((10, CounterResult::Pair(-5, 5)))),
            event(
                2,
                CounterOp::MGet,
                1,
                Some((9, CounterResult::Values([Some(-5), None, None]))),
            ),
        ];
        assert!(matches!(
            check(&history, 1_000),
            Err(Refusal::NotLinearizable { .. })
        ));
    }

    #[test]
    fn real_time_order_is_respected() {
        // The increment returned before the read was called: the read must see it.
        let history = [
            event(
                1,
                CounterOp::Incr { key: 2, by: 1 },
                0,
                Some((1, CounterResult::Int(1))),
            ),
            event(
                2,
                CounterOp::Get { key: 2 },
                2,
                Some((3, CounterResult::Value(None))),
            ),
        ];
        assert!(check(&history, 1_000).is_err());
        // Overlapping, the read may come first.
        let mut overlapping = history.clone();
        overlapping[1].call_ms = 0;
        assert_eq!(check(&overlapping, 1_000), Ok(()));
    }

    #[test]
    fn an_unknown_outcome_may_or_may_not_have_happened() {
        let lost = event(1, CounterOp::Incr { key: 0, by: 2 }, 0, None);
        let read = |v| {
            event(
                2,
                CounterOp::Get { key: 0 },
                5,
                Some((6, CounterResult::Value(v))),
            )
        };
        assert_eq!(check(&[lost.clone(), read(None)], 1_000), Ok(()));
        assert_eq!(check(&[lost.clone(), read(Some(2))], 1_000), Ok(()));
        assert!(check(&[lost, read(Some(4))], 1_000).is_err());
    }

    #[test]
    fn an_increment_applied_twice_is_refused() {
        let history = [
            event(
                1,
                CounterOp::Incr { key: 0, by: 1 },
                0,
                Some((1, CounterResult::Int(1))),
            ),
            event(
                2,
                CounterOp::MGet,
                2,
                Some((3, CounterResult::Values([Some(2), None, None]))),
            ),
        ];
        assert!(check(&history, 1_000).is_err());
    }

    #[test]
    fn the_budget_gives_no_verdict_rather_than_a_wrong_one() {
        let many: Vec<Event> = (0..12)
            .map(|c| event(c, CounterOp::Incr { key: 0, by: 1 }, 0, None))
            .chain([event(
                99,
                CounterOp::Get { key: 0 },
                0,
                Some((1, CounterResult::Value(Some(100)))),
            )])
            .collect();
        assert!(matches!(
            check(&many, 50),
            Err(Refusal::Inconclusive { .. })
        ));
    }
}
