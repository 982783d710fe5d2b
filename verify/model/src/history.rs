//! The clients' history, checked with stateright's linearizability tester, and its summary: what
//! the history's future verdicts depend on, which is what the checker tells states apart by.
use std::collections::BTreeSet;
use std::hash::{Hash, Hasher};

use stateright::semantics::{ConsistencyTester, LinearizabilityTester, SequentialSpec};

/// A client operation on the counter.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum CounterOp {
    /// INCRBY 1, returning the new value.
    Incr,
    /// GET, returning the value (0 when absent).
    Get,
    /// DEL, returning 1 if the key existed (the counter was above 0) and 0 if not; the counter
    /// is 0 (absent) after it.
    Del,
}

/// The sequential specification of the counter.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Counter(pub i64);

impl SequentialSpec for Counter {
    type Op = CounterOp;
    type Ret = i64;
    fn invoke(&mut self, op: &CounterOp) -> i64 {
        match op {
            CounterOp::Incr => {
                self.0 += 1;
                self.0
            }
            CounterOp::Get => self.0,
            CounterOp::Del => i64::from(std::mem::take(&mut self.0) > 0),
        }
    }
}

/// One event of the history, by client.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Event {
    Invoke(usize, CounterOp),
    Return(usize, i64),
    /// The operation definitely did not take effect (NotApplied): it is left out of the history,
    /// so the checker holds the replica to that promise.
    NotApplied(usize),
}

impl Event {
    fn client(&self) -> usize {
        match self {
            Event::Invoke(c, _) | Event::Return(c, _) | Event::NotApplied(c) => *c,
        }
    }
}

/// One operation of a history: where it was invoked and, if it returned, where and with what.
#[derive(Clone, Copy, Debug)]
struct Op {
    client: usize,
    op: CounterOp,
    invoked: usize,
    returned: Option<(usize, i64)>,
}

/// Every operation of `events`, those not applied left out.
fn ops(events: &[Event]) -> Vec<Op> {
    let mut ops: Vec<Op> = Vec::new();
    let mut open: Vec<Option<usize>> = Vec::new();
    let mut not_applied = Vec::new();
    for (at, event) in events.iter().enumerate() {
        let c = event.client();
        if open.len() <= c {
            open.resize(c + 1, None);
        }
        match *event {
            Event::Invoke(_, op) => {
                open[c] = Some(ops.len());
                ops.push(Op {
                    client: c,
                    op,
                    invoked: at,
                    returned: None,
                });
            }
            Event::Return(_, value) => {
                let i = open[c].take().expect("a return follows an invocation");
                ops[i].returned = Some((at, value));
            }
            Event::NotApplied(_) => {
                not_applied.push(open[c].take().expect("an answer follows an invocation"));
            }
        }
    }
    ops.into_iter()
        .enumerate()
        .filter(|(i, _)| !not_applied.contains(i))
        .map(|(_, op)| op)
        .collect()
}

/// A partial linearization: the operations in flight it took (by their index among those in
/// flight) with the results it gave them, and the counter after it.
type Configuration = (Vec<(usize, i64)>, i64);

/// What a history's future verdicts depend on: the operations in flight (client and operation),
/// and every way to linearize all returned operations together with some of those in flight
/// (which ones, with what results, and the counter's value after them).
///
/// Any continuation of the history adds returns of operations in flight and operations invoked
/// later, which follow every operation returned so far. A linearization of the continued
/// history therefore starts with one of these configurations, and whether one extends depends
/// only on the configuration and the continuation. Two histories with the same summary are thus
/// linearizable with exactly the same continuations, and states that differ only in such
/// histories are one state to the checker (a history of two concurrent invocations, say, has one
/// summary whichever came first).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
struct Summary {
    in_flight: Vec<(usize, CounterOp)>,
    configurations: BTreeSet<Configuration>,
}

impl Summary {
    fn of(events: &[Event]) -> Summary {
        let ops = ops(events);
        let in_flight: Vec<usize> = (0..ops.len())
            .filter(|i| ops[*i].returned.is_none())
            .collect();
        let returned: u64 = (0..ops.len())
            .filter(|i| ops[*i].returned.is_some())
            .fold(0, |mask, i| mask | 1 << i);
        // Operation `i` may come next once everything that returned before it was invoked is
        // linearized: the real-time order linearizability keeps.
        let ready = |taken: u64, i: usize| {
            taken & (1 << i) == 0
                && ops.iter().enumerate().all(|(j, other)| {
                    taken & (1 << j) != 0
                        || other.returned.is_none_or(|(at, _)| at >= ops[i].invoked)
                })
        };
        let mut configurations = BTreeSet::new();
        let mut seen = BTreeSet::new();
        let mut stack = vec![(0u64, 0i64, Vec::new())];
        while let Some((taken, value, results)) = stack.pop() {
            if !seen.insert((taken, value, results.clone())) {
                continue;
            }
            if taken & returned == returned {
                configurations.insert((results.clone(), value));
            }
            for i in (0..ops.len()).filter(|i| ready(taken, *i)) {
                let mut counter = Counter(value);
                let result = counter.invoke(&ops[i].op);
                let mut results = results.clone();
                match ops[i].returned {
                    Some((_, r)) if r != result => continue,
                    Some(_) => {}
                    None => {
                        let k = in_flight.iter().position(|x| *x == i).expect("in flight");
                        results.push((k, result));
                        results.sort_unstable();
                    }
                }
                stack.push((taken | 1 << i, counter.0, results));
            }
        }
        Summary {
            in_flight: in_flight
                .iter()
                .map(|i| (ops[*i].client, ops[*i].op))
                .collect(),
            configurations,
        }
    }
}

/// The clients' history and what the properties read of it.
///
/// Equality and hashing cover the summary and the flags, not the events: see `Summary`.
#[derive(Clone, Debug)]
pub struct History {
    events: Vec<Event>,
    summary: Summary,
    /// Whether the history is linearizable (it stays not linearizable once it is not).
    pub linearizable: bool,
    /// Whether some increment was acknowledged: a value was chosen.
    pub incremented: bool,
    /// Whether an increment was acknowledged after a crash.
    pub incremented_after_crash: bool,
}

impl PartialEq for History {
    fn eq(&self, other: &History) -> bool {
        self.summary == other.summary
            && self.linearizable == other.linearizable
            && self.incremented == other.incremented
            && self.incremented_after_crash == other.incremented_after_crash
    }
}

impl Eq for History {}

impl Hash for History {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.summary.hash(state);
        self.linearizable.hash(state);
        self.incremented.hash(state);
        self.incremented_after_crash.hash(state);
    }
}

impl History {
    pub(crate) fn new() -> History {
        History {
            events: Vec::new(),
            summary: Summary::default(),
            linearizable: true,
            incremented: false,
            incremented_after_crash: false,
        }
    }

    /// Whether stateright's linearizability tester accepts the history, the operations that
    /// were not applied left out.
    fn tester_accepts(&self) -> bool {
        let mut tester = LinearizabilityTester::new(Counter(0));
        let kept = ops(&self.events);
        for (at, event) in self.events.iter().enumerate() {
            let result = match *event {
                Event::Invoke(c, op) if kept.iter().any(|o| o.invoked == at) => {
                    tester.on_invoke(c, op).map(|_| ())
                }
                Event::Return(c, value) => tester.on_return(c, value).map(|_| ()),
                _ => Ok(()),
            };
            assert!(result.is_ok(), "the model records a well-formed history");
        }
        tester.serialized_history().is_some()
    }

    /// Records an event. The verdict comes from stateright's tester; the summary must agree
    /// with it (a history is linearizable exactly when some configuration exists).
    pub(crate) fn record(&mut self, event: Event) {
        self.events.push(event);
        if !self.linearizable {
            return;
        }
        self.summary = Summary::of(&self.events);
        if !matches!(event, Event::Invoke(..)) {
            self.linearizable = self.tester_accepts();
        }
        assert_eq!(
            self.linearizable,
            !self.summary.configurations.is_empty(),
            "the summary and stateright's linearizability tester agree"
        );
    }
}
