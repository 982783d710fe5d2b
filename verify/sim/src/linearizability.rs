//! A per-key linearizability checker of client histories ([`crate::history`]).
//!
//! The checker is the Wing–Gong search with Lowe's memoisation: it tries to order the
//! operations of one key so that each takes effect at one instant between its call and its
//! return, and every acknowledged reply equals what the real command semantics
//! ([`Command::apply`]) give on the state built by the operations before it. Operations whose
//! outcome is unknown may take effect at any instant after their call, or never.
//!
//! **Expiry.** A replica stamps each command with its clock when it proposes it, and a key
//! whose deadline is at or before the stamp is expired for that command. The client never sees
//! the stamp: the history says what bounds it ([`Clocks`]: a window per operation, or the
//! replicas' clock skew around its call and return). The checker keeps a key's deadline, and a
//! lock's lease end, as the window of instants they can still be: an operation that found the
//! key live raises the window's start, one that found it expired lowers its end, a PTTL answer
//! pins it to the answer plus the stamp window, and an empty window rejects the order being
//! tried. Where the reply does not tell whether the deadline had passed, each possibility is a
//! state of its own. The commands run on a concrete register at a clock far from any real one,
//! with the deadline put long before or long after it, so the data semantics are the real ones;
//! the checker maps the deadlines the command leaves back to windows. It is the same model as
//! the Porcupine checker's (`verify/checker/README.md`), and with a skew of 0 and exact stamps it is
//! plain real-time expiry.
use std::collections::BTreeMap;

use logless_commands::command::{Command, ExpireKind, Expiry, Limits, Reply};
use logless_commands::value::{Data, LockState, Register};
use logless_rmw::ids::Key;
use rustc_hash::FxHashSet;

use crate::history::{Clocks, History, Operation, Outcome};

/// A key whose history is not linearizable.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation {
    /// The key.
    pub key: Key,
    /// How many of its operations were checked.
    pub operations: usize,
}

/// The search gave up: too many states for the budget.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Inconclusive {
    /// The key.
    pub key: Key,
}

/// The result of checking a whole history.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CheckReport {
    /// Keys checked.
    pub keys: usize,
    /// Operations checked.
    pub operations: usize,
    /// Keys that are not linearizable.
    pub violations: Vec<Violation>,
    /// Keys the search could not decide within its budget.
    pub inconclusive: Vec<Inconclusive>,
}

impl CheckReport {
    /// Whether every key was shown linearizable.
    pub fn is_linearizable(&self) -> bool {
        self.violations.is_empty() && self.inconclusive.is_empty()
    }
}

const LIMITS: Limits = Limits::UNLIMITED;

/// A millisecond in the history's time unit (µs). Stamps and deadlines are whole milliseconds
/// of the replicas' clocks, so a deadline after a stamp is at least 1 ms after it.
const MS_US: i64 = 1000;
/// The end of a lease that ends after every stamp of its key's history: such a lease never
/// runs out within the history, however exactly it was granted.
const BEYOND: i64 = i64::MAX;
/// The clock the model applies commands at (ms): far from any real clock, so that a deadline
/// the command computes from it (`NOW_MS + ttl`) tells itself apart from an absolute one.
const NOW_MS: u64 = 1 << 50;
/// How far from [`NOW_MS`] the model puts a deadline that has not passed (after it) or has
/// (before it). Relative times the model accepts stay below half of it.
const FAR_MS: u64 = 1 << 40;

/// Checks every key of `history`; `states_max` bounds the search per key.
///
/// # Panics
/// On a command the model does not know ([`modelled`]): a harness that records one is wrong.
pub fn check(history: &History, states_max: usize) -> CheckReport {
    let mut by_key: BTreeMap<&Key, Vec<(usize, &Operation)>> = BTreeMap::new();
    // Operations that never happened, and reads whose answer nobody saw, constrain nothing.
    let relevant = history
        .operations
        .iter()
        .enumerate()
        .filter(|(_, o)| match o.outcome {
            Outcome::Ok(_) => true,
            Outcome::Unknown => !o.command.is_read_only(),
            Outcome::NotApplied => false,
        });
    for (index, op) in relevant {
        if let Err(reason) = modelled(&op.command, history.clocks.epoch_ms) {
            panic!("the checker does not model {:?}: {reason}", op.command);
        }
        by_key.entry(&op.key).or_default().push((index, op));
    }
    let mut report = CheckReport {
        keys: by_key.len(),
        operations: by_key.values().map(Vec::len).sum(),
        ..CheckReport::default()
    };
    for (key, ops) in by_key {
        let (timed, horizon_us) = stamp_windows(&ops, &history.clocks);
        match check_key(&timed, horizon_us, history.clocks.epoch_ms, states_max) {
            Some(true) => {}
            Some(false) => report.violations.push(Violation {
                key: key.clone(),
                operations: ops.len(),
            }),
            None => report.inconclusive.push(Inconclusive { key: key.clone() }),
        }
    }
    report
}

/// Whether the model knows `command`: every command, except EXPIREAT and PEXPIREAT, EXPIRE's
/// GT and LT (their outcome compares two unknown instants), and times that do not stay well
/// within 2^39 ms (the model applies commands at a clock far from any real one).
pub fn modelled(command: &Command, epoch_ms: u64) -> Result<(), String> {
    let near = |ms: u64| ms < FAR_MS / 2;
    match command {
        Command::Expire(e) => {
            if matches!(e.kind, ExpireKind::ExpireAt | ExpireKind::PExpireAt) {
                return Err("absolute EXPIRE times are not modelled".into());
            }
            if e.flags.gt || e.flags.lt {
                return Err("EXPIRE GT and LT are not modelled".into());
            }
            let unit = if e.kind == ExpireKind::Expire {
                1000
            } else {
                1
            };
            if !e
                .time
                .checked_mul(unit)
                .is_some_and(|t| near(t.unsigned_abs()))
            {
                return Err("the time is out of the modelled range".into());
            }
        }
        Command::Set(set) => match set.expiry {
            Expiry::AfterMs(ms) if !near(ms) => return Err("PX out of range".into()),
            Expiry::AtMs(at) if !near(at.abs_diff(epoch_ms)) => {
                return Err("PXAT more than 2^39 ms from the epoch".into())
            }
            _ => {}
        },
        Command::LockAcquire { lease_ms, .. } if !near(*lease_ms) => {
            return Err("the lease is out of the modelled range".into())
        }
        // A transaction is one command on the register: the model applies it whole, as the
        // replicas do, so it knows it if it knows each of its commands.
        Command::Transaction(queued) => {
            for command in queued {
                modelled(command, epoch_ms)?;
            }
        }
        _ => {}
    }
    Ok(())
}

/// An instant known only as the window `[lo, hi]` of the history's time base (µs).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct Window {
    lo: i64,
    hi: i64,
}

impl Window {
    /// This window shifted by `ms` milliseconds.
    fn after_ms(self, ms: i64) -> Window {
        Window {
            lo: self.lo.saturating_add(ms * MS_US),
            hi: self.hi.saturating_add(ms * MS_US),
        }
    }

    /// Whether this window and `other` overlap or touch, so that their union is a window.
    fn touches(self, other: Window) -> bool {
        self.lo <= other.hi.saturating_add(1) && other.lo <= self.hi.saturating_add(1)
    }
}

/// One operation of a key with the window its stamp lies in.
struct Timed<'a> {
    op: &'a Operation,
    stamp: Window,
}

/// Each operation's stamp window: the history's own where it has one, else [call − skew,
/// return + skew]. An operation of unknown outcome has no return: its stamp is bounded by the
/// key's last return (plus skew), since only an operation that returned later could see it,
/// and one that took effect after every return changed nothing anybody saw. Also returns the
/// horizon: the latest stamp of all.
fn stamp_windows<'a>(ops: &[(usize, &'a Operation)], clocks: &Clocks) -> (Vec<Timed<'a>>, i64) {
    let skew = clocks.skew_ms as i64 * MS_US;
    let last_return = (ops.iter())
        .filter(|(_, o)| matches!(o.outcome, Outcome::Ok(_)))
        .map(|(_, o)| o.return_us as i64)
        .max()
        .unwrap_or(i64::MIN);
    let timed: Vec<Timed> = (ops.iter())
        .map(|&(index, op)| {
            let call = op.call_us as i64;
            let ret = match op.outcome {
                Outcome::Ok(_) => op.return_us as i64,
                _ => last_return.max(call),
            };
            let (lo, hi) = match clocks.stamps_us.get(&index) {
                Some(&(lo, hi)) => (lo, hi.unwrap_or(ret + skew)),
                None => (call - skew, ret + skew),
            };
            Timed {
                op,
                stamp: Window { lo, hi },
            }
        })
        .collect();
    let horizon = timed.iter().map(|t| t.stamp.hi).max().unwrap_or(i64::MIN);
    (timed, horizon)
}

/// A key's state in the model: the register as the commands see it, with its deadline and its
/// lock's lease end kept apart as windows.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct ModelState {
    /// Data, fencing token and lock owner; no deadline, and a lease end of 0.
    reg: Register,
    /// The key's deadline, if it has a time to live.
    ttl: Option<Window>,
    /// When the lease of a held lock ends ([`BEYOND`] after the key's last stamp).
    lease: Option<Window>,
}

impl ModelState {
    fn encode(&self, out: &mut Vec<u8>) {
        self.reg.encode(out);
        for window in [self.ttl, self.lease] {
            match window {
                None => out.push(0),
                Some(w) => {
                    out.push(1);
                    out.extend_from_slice(&w.lo.to_le_bytes());
                    out.extend_from_slice(&w.hi.to_le_bytes());
                }
            }
        }
    }

    fn held_lock(&self) -> bool {
        matches!(&self.reg.data, Data::Lock(l) if l.owner.is_some())
    }
}

/// One way the clock may stand at an operation's stamp: before or after the key's deadline,
/// and for LOCK.ACQUIRE on a held lock, before or after the lease's end.
#[derive(Clone, Copy, Debug)]
struct Branch {
    expired: bool,
    /// Whether the lease was looked at.
    leased: bool,
    lease_over: bool,
    /// The stamps this branch allows.
    stamp: Window,
}

/// The feasible branches of one step (at most four), without allocating: the search takes
/// many steps.
struct Branches {
    items: [Branch; 4],
    len: usize,
}

impl Branches {
    fn as_slice(&self) -> &[Branch] {
        &self.items[..self.len]
    }
}

impl Branch {
    /// The feasible branches for `command` on `state` with a stamp in `stamp`.
    fn all(state: &ModelState, command: &Command, stamp: Window) -> Branches {
        let mut all = Branches {
            items: [Branch {
                expired: false,
                leased: false,
                lease_over: false,
                stamp,
            }; 4],
            len: 0,
        };
        for expired in [false, true] {
            if expired && state.ttl.is_none() {
                continue;
            }
            let mut s = stamp;
            if let Some(ttl) = state.ttl {
                if expired {
                    s.lo = s.lo.max(ttl.lo);
                } else {
                    s.hi = s.hi.min(ttl.hi.saturating_sub(MS_US));
                }
            }
            // Only LOCK.ACQUIRE looks at the lease, and only of a live lock somebody holds.
            let leased =
                matches!(command, Command::LockAcquire { .. }) && !expired && state.held_lock();
            for lease_over in [false, true] {
                if lease_over && !leased {
                    continue;
                }
                let mut s = s;
                if let (true, Some(lease)) = (leased, state.lease) {
                    if lease_over {
                        s.lo = s.lo.max(lease.lo);
                    } else {
                        s.hi = s.hi.min(lease.hi.saturating_sub(MS_US));
                    }
                }
                if s.lo <= s.hi {
                    all.items[all.len] = Branch {
                        expired,
                        leased,
                        lease_over,
                        stamp: s,
                    };
                    all.len += 1;
                }
            }
        }
        all
    }

    /// The key's deadline after an operation of this branch found it as the branch says: the
    /// window shrinks to what the branch implies.
    fn narrowed_ttl(&self, ttl: Option<Window>) -> Option<Window> {
        ttl.map(|mut ttl| {
            if self.expired {
                ttl.hi = ttl.hi.min(self.stamp.hi);
            } else {
                ttl.lo = ttl.lo.max(self.stamp.lo + MS_US);
            }
            ttl
        })
    }

    /// The lease's end after an operation of this branch looked at it.
    fn narrowed_lease(&self, lease: Option<Window>) -> Option<Window> {
        lease.map(|mut lease| {
            if self.leased && self.lease_over {
                lease.hi = lease.hi.min(self.stamp.hi);
            } else if self.leased {
                lease.lo = lease.lo.max(self.stamp.lo + MS_US);
            }
            lease
        })
    }

    /// Runs `command` in this branch; `None` if it cannot give `outcome`.
    fn take(&self, state: &ModelState, op: &Operation, model: &KeyModel) -> Option<ModelState> {
        let pins_deadline = matches!(op.command, Command::Ttl | Command::PTtl)
            && !self.expired
            && state.ttl.is_some()
            && state.reg.data != Data::Absent;
        if pins_deadline {
            let ttl = self.narrowed_ttl(state.ttl).expect("a key with a deadline");
            let ttl = match &op.outcome {
                Outcome::Ok(Reply::Int(left)) => self.remaining(ttl, &op.command, *left)?,
                Outcome::Ok(_) => return None,
                _ => ttl,
            };
            return Some(ModelState {
                ttl: Some(ttl),
                ..state.clone()
            });
        }
        let mut reg = state.reg.clone();
        reg.expires_at_ms = state.ttl.map(|_| encoded(!self.expired));
        if let Data::Lock(lock) = &mut reg.data {
            if lock.owner.is_some() {
                lock.lease_until_ms = encoded(!self.lease_over);
            }
        }
        let (old_ttl, old_lease) = (reg.expires_at_ms, lease_of(&reg));
        let outcome = op.command.apply(&mut reg, NOW_MS, &LIMITS);
        if matches!(&op.outcome, Outcome::Ok(reply) if *reply != outcome.reply) {
            return None;
        }
        let ttl = match reg.expires_at_ms.take() {
            None => None,
            Some(at) if Some(at) == old_ttl => self.narrowed_ttl(state.ttl),
            Some(at) => Some(model.deadline(at, self.stamp)),
        };
        let lease = match lease_of(&reg) {
            None => None,
            Some(at) if Some(at) == old_lease => self.narrowed_lease(state.lease),
            Some(at) => Some(model.beyond_horizon(model.deadline(at, self.stamp))),
        };
        if let Data::Lock(lock) = &mut reg.data {
            lock.lease_until_ms = 0;
        }
        let live = reg.data != Data::Absent;
        Some(ModelState {
            reg,
            ttl: ttl.filter(|_| live),
            lease,
        })
    }

    /// A TTL or PTTL answer `left` on a live key whose deadline is in `ttl`: deadline = stamp +
    /// answer (TTL rounds to the nearest second) pins the window.
    fn remaining(&self, mut ttl: Window, command: &Command, left: i64) -> Option<Window> {
        // Deadlines lie within FAR_MS / 2 of the stamps; the bound keeps the arithmetic in range.
        let limit = match command {
            Command::PTtl => FAR_MS as i64,
            _ => FAR_MS as i64 / 1000,
        };
        if !(0..=limit).contains(&left) {
            return None;
        }
        let (lo, hi) = match command {
            Command::PTtl => (left, left),
            _ => (left * 1000 - 500, left * 1000 + 499),
        };
        // A live key has at least 1 ms left.
        let (lo, hi) = (lo.max(1) * MS_US, hi * MS_US);
        ttl.lo = ttl.lo.max(self.stamp.lo + lo);
        ttl.hi = ttl.hi.min(self.stamp.hi.saturating_add(hi));
        (ttl.lo <= ttl.hi).then_some(ttl)
    }
}

/// The end of a lease that ends after every stamp of its key's history.
const LEASE_BEYOND: Window = Window {
    lo: BEYOND,
    hi: BEYOND,
};

/// The concrete deadline that stands for one that has (`false`) or has not passed at NOW_MS.
fn encoded(ahead: bool) -> u64 {
    if ahead {
        NOW_MS + FAR_MS
    } else {
        NOW_MS - FAR_MS
    }
}

fn lease_of(reg: &Register) -> Option<u64> {
    match &reg.data {
        Data::Lock(LockState {
            owner: Some(_),
            lease_until_ms,
        }) => Some(*lease_until_ms),
        _ => None,
    }
}

/// What the model of one key knows beyond its operations.
struct KeyModel {
    /// The latest stamp of the key's operations (µs).
    horizon_us: i64,
    epoch_ms: u64,
}

impl KeyModel {
    /// The window of a deadline `at` that a command left on the concrete register: relative
    /// to the stamp if it is near [`NOW_MS`] (PX, EXPIRE, a lease), else an absolute instant
    /// of the replicas' clocks (PXAT).
    fn deadline(&self, at: u64, stamp: Window) -> Window {
        if at.abs_diff(NOW_MS) < FAR_MS / 2 {
            stamp.after_ms(at as i64 - NOW_MS as i64)
        } else {
            let us = (at as i64 - self.epoch_ms as i64) * MS_US;
            Window { lo: us, hi: us }
        }
    }

    /// A lease that ends after every stamp of the key becomes [`BEYOND`]: no operation can see
    /// it end, and equal states keep the search's memoisation as good as without leases.
    fn beyond_horizon(&self, lease: Window) -> Window {
        if lease.lo > self.horizon_us {
            LEASE_BEYOND
        } else {
            lease
        }
    }

    /// The states `state` may become when `timed` takes effect with its outcome.
    fn step(&self, state: &ModelState, timed: &Timed) -> Steps {
        let branches = Branch::all(state, &timed.op.command, timed.stamp);
        if let [branch] = branches.as_slice() {
            return Steps::One(branch.take(state, timed.op, self));
        }
        let next = (branches.as_slice().iter())
            .filter_map(|b| b.take(state, timed.op, self))
            .collect();
        Steps::Many(merge_windows(next).into_iter())
    }
}

/// The states one step leads to: mostly one (the clock had no choice), kept off the heap since
/// the search takes millions of steps.
enum Steps {
    One(Option<ModelState>),
    Many(std::vec::IntoIter<ModelState>),
}

impl Iterator for Steps {
    type Item = ModelState;

    fn next(&mut self) -> Option<ModelState> {
        match self {
            Steps::One(state) => state.take(),
            Steps::Many(states) => states.next(),
        }
    }
}

/// Joins alternatives that differ only in one window whose intervals overlap or touch: their
/// union is one interval, so the join loses nothing. A SET PX whose reply does not tell whether
/// the old value had expired would otherwise double the states.
fn merge_windows(mut states: Vec<ModelState>) -> Vec<ModelState> {
    let mut i = 0;
    while i < states.len() {
        let mut j = i + 1;
        while j < states.len() {
            if let Some(joined) = join(&states[i], &states[j]) {
                states[i] = joined;
                states.remove(j);
                j = i + 1;
            } else {
                j += 1;
            }
        }
        i += 1;
    }
    states
}

fn join(a: &ModelState, b: &ModelState) -> Option<ModelState> {
    if a == b {
        return Some(a.clone());
    }
    if a.reg != b.reg {
        return None;
    }
    let union = |x: Window, y: Window| Window {
        lo: x.lo.min(y.lo),
        hi: x.hi.max(y.hi),
    };
    match (
        a.ttl,
        b.ttl,
        a.lease == b.lease,
        a.lease,
        b.lease,
        a.ttl == b.ttl,
    ) {
        (Some(x), Some(y), true, ..) if x.touches(y) => Some(ModelState {
            ttl: Some(union(x, y)),
            ..a.clone()
        }),
        (.., Some(x), Some(y), true) if x.touches(y) => Some(ModelState {
            lease: Some(union(x, y)),
            ..a.clone()
        }),
        _ => None,
    }
}

struct Search<'a> {
    ops: &'a [Timed<'a>],
    model: KeyModel,
    done: Vec<u64>,
    /// Visited (linearized operations, state) pairs, encoded; FxHash, since SipHash costs more
    /// than the rest of a step and nothing iterates the set.
    seen: FxHashSet<Vec<u8>>,
    states_max: usize,
    required_left: usize,
}

/// `Some(true)` if linearizable, `Some(false)` if not, `None` if the budget ran out.
fn check_key(ops: &[Timed], horizon_us: i64, epoch_ms: u64, states_max: usize) -> Option<bool> {
    let required_left = ops
        .iter()
        .filter(|o| matches!(o.op.outcome, Outcome::Ok(_)))
        .count();
    let mut search = Search {
        ops,
        model: KeyModel {
            horizon_us,
            epoch_ms,
        },
        done: vec![0; ops.len().div_ceil(64)],
        seen: FxHashSet::default(),
        states_max,
        required_left,
    };
    let initial = ModelState {
        reg: Register::default(),
        ttl: None,
        lease: None,
    };
    search.explore(&initial)
}

impl Search<'_> {
    fn is_done(&self, i: usize) -> bool {
        self.done[i / 64] & (1 << (i % 64)) != 0
    }

    fn flip(&mut self, i: usize) {
        self.done[i / 64] ^= 1 << (i % 64);
    }

    fn explore(&mut self, state: &ModelState) -> Option<bool> {
        if self.required_left == 0 {
            return Some(true);
        }
        // The linearized set (fixed length per key) then the state: one allocation per visit.
        let mut visit = Vec::with_capacity(self.done.len() * 8 + 64);
        for word in &self.done {
            visit.extend_from_slice(&word.to_le_bytes());
        }
        state.encode(&mut visit);
        if !self.seen.insert(visit) {
            return Some(false);
        }
        if self.seen.len() > self.states_max {
            return None;
        }
        // An operation may go next only if no pending acknowledged operation returned before
        // it was called.
        let first_return = (0..self.ops.len())
            .filter(|&i| !self.is_done(i))
            .map(|i| self.ops[i].op.return_us)
            .min()
            .unwrap_or(u64::MAX);
        for i in 0..self.ops.len() {
            if self.is_done(i) || self.ops[i].op.call_us > first_return {
                continue;
            }
            let required = matches!(self.ops[i].op.outcome, Outcome::Ok(_));
            for next in self.model.step(state, &self.ops[i]) {
                self.flip(i);
                self.required_left -= usize::from(required);
                let found = self.explore(&next);
                self.required_left += usize::from(required);
                self.flip(i);
                match found {
                    Some(false) => {}
                    other => return other,
                }
            }
        }
        Some(false)
    }
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;
    use logless_commands::command::Condition;

    use super::*;

    fn op(
        client: u32,
        command: Command,
        call_us: u64,
        return_us: u64,
        outcome: Outcome,
    ) -> Operation {
        Operation {
            client,
            key: Key::new("k"),
            command,
            call_us,
            return_us,
            outcome,
        }
    }

    #[test]
    fn sequential_increments_are_linearizable() {
        let history = History {
            operations: vec![
                op(1, Command::IncrBy(1), 0, 10, Outcome::Ok(Reply::Int(1))),
                op(2, Command::IncrBy(1), 20, 30, Outcome::Ok(Reply::Int(2))),
                op(
                    1,
                    Command::Get,
                    40,
                    50,
                    Outcome::Ok(Reply::Bulk("2".into())),
                ),
            ],
            ..History::default()
        };
        assert!(check(&history, 10_000).is_linearizable());
    }

    #[test]
    fn two_concurrent_increments_both_returning_one_are_caught() {
        let history = History {
            operations: vec![
                op(1, Command::IncrBy(1), 0, 10, Outcome::Ok(Reply::Int(1))),
                op(2, Command::IncrBy(1), 5, 15, Outcome::Ok(Reply::Int(1))),
            ],
            ..History::default()
        };
        let report = check(&history, 10_000);
        assert_eq!(report.violations.len(), 1);
    }

    #[test]
    fn a_stale_read_after_a_completed_write_is_caught() {
        let history = History {
            operations: vec![
                op(1, Command::IncrBy(1), 0, 10, Outcome::Ok(Reply::Int(1))),
                op(2, Command::Get, 20, 30, Outcome::Ok(Reply::Nil)),
            ],
            ..History::default()
        };
        assert!(!check(&history, 10_000).is_linearizable());
    }

    #[test]
    fn an_unknown_increment_may_or_may_not_have_happened() {
        let applied = History {
            operations: vec![
                op(1, Command::IncrBy(1), 0, u64::MAX, Outcome::Unknown),
                op(
                    2,
                    Command::Get,
                    20,
                    30,
                    Outcome::Ok(Reply::Bulk("1".into())),
                ),
            ],
            ..History::default()
        };
        let not_applied = History {
            operations: vec![
                op(1, Command::IncrBy(1), 0, u64::MAX, Outcome::Unknown),
                op(2, Command::Get, 20, 30, Outcome::Ok(Reply::Nil)),
            ],
            ..History::default()
        };
        assert!(check(&applied, 10_000).is_linearizable());
        assert!(check(&not_applied, 10_000).is_linearizable());
    }

    #[test]
    fn an_unknown_increment_cannot_explain_a_read_before_its_call() {
        let history = History {
            operations: vec![
                op(2, Command::Get, 0, 10, Outcome::Ok(Reply::Bulk("1".into()))),
                op(1, Command::IncrBy(1), 20, u64::MAX, Outcome::Unknown),
            ],
            ..History::default()
        };
        assert!(!check(&history, 10_000).is_linearizable());
    }

    // ---- expiry: the same cases as verify/checker/history/model_test.go's TestExpiryHistories ----

    use logless_commands::command::{ExpireArgs, ExpireFlags, SetArgs};

    /// An operation of client `c` on "k" from `call_ms` to `ret_ms`; `reply` `None` is an
    /// unknown outcome.
    fn timed(
        c: u32,
        reply: Option<Reply>,
        call_ms: u64,
        ret_ms: u64,
        command: Command,
    ) -> Operation {
        match reply {
            Some(r) => op(c, command, call_ms * 1000, ret_ms * 1000, Outcome::Ok(r)),
            None => op(c, command, call_ms * 1000, u64::MAX, Outcome::Unknown),
        }
    }

    fn set(value: &str, expiry: Expiry) -> Command {
        Command::Set(SetArgs {
            value: Bytes::copy_from_slice(value.as_bytes()),
            condition: Condition::Always,
            get: false,
            expiry,
        })
    }

    fn expire(kind: ExpireKind, time: i64) -> Command {
        Command::Expire(ExpireArgs {
            kind,
            time,
            flags: ExpireFlags::default(),
        })
    }

    fn acquire(owner: &'static str, lease_ms: u64) -> Command {
        Command::LockAcquire {
            owner: Bytes::from_static(owner.as_bytes()),
            lease_ms,
        }
    }

    fn bulk(v: &'static str) -> Option<Reply> {
        Some(Reply::Bulk(Bytes::from_static(v.as_bytes())))
    }

    fn int(v: i64) -> Option<Reply> {
        Some(Reply::Int(v))
    }

    fn linearizable(skew_ms: u64, operations: Vec<Operation>) -> bool {
        let history = History {
            operations,
            clocks: Clocks {
                skew_ms,
                ..Clocks::default()
            },
        };
        let report = check(&history, 100_000);
        assert!(report.inconclusive.is_empty());
        report.is_linearizable()
    }

    #[test]
    fn expiry_histories() {
        use Expiry::{AfterMs, Clear, Keep};
        let ok = Some(Reply::Ok);
        let none = Some(Reply::Nil);
        // The deadline is in [100, 110] ms.
        let set_px = || timed(1, ok.clone(), 0, 10, set("1", AfterMs(100)));
        let get = |reply, call, ret| timed(2, reply, call, ret, Command::Get);
        let pttl = |left, call, ret| timed(2, int(left), call, ret, Command::PTtl);
        let lock = |c, reply, call, ret, owner| timed(c, reply, call, ret, acquire(owner, 100));
        #[rustfmt::skip]
        let cases: Vec<(&str, u64, Vec<Operation>, bool)> = vec![
            ("read before the deadline", 0, vec![set_px(), get(bulk("1"), 50, 60)], true),
            ("read after the deadline", 0, vec![set_px(), get(none.clone(), 200, 210)], true),
            ("a value read after its deadline", 0, vec![set_px(), get(bulk("1"), 200, 210)], false),
            ("a value read after its deadline, within the skew", 50, vec![set_px(), get(bulk("1"), 200, 210)], true),
            ("a value read long after its deadline plus the skew", 50, vec![set_px(), get(bulk("1"), 300, 310)], false),
            ("expired long before its deadline", 0, vec![set_px(), timed(2, int(0), 50, 60, Command::Exists)], false),
            ("expired before its deadline, within the skew", 20, vec![set_px(), timed(2, int(0), 50, 60, Command::Exists)], true),
            ("expired before its deadline, beyond the skew", 10, vec![set_px(), timed(2, int(0), 50, 60, Command::Exists)], false),
            ("PTTL as it should be", 0, vec![set_px(), pttl(95, 5, 15)], true),
            ("PTTL too short", 0, vec![set_px(), pttl(30, 20, 25)], false),
            ("PTTL of an expired key", 0, vec![set_px(), pttl(-2, 200, 210)], true),
            ("PTTL of a key without a deadline", 0, vec![timed(1, ok.clone(), 0, 10, set("1", Clear)), pttl(-1, 200, 210)], true),
            ("two PTTLs that disagree", 0, vec![set_px(), pttl(90, 10, 10), pttl(50, 20, 20)], false),
            ("PTTL of a week", 0, vec![timed(1, ok.clone(), 0, 10, set("1", AfterMs(604_800_000))), pttl(604_799_995, 5, 15)], true),
            ("TTL rounds to the second", 0, vec![timed(1, ok.clone(), 0, 10, set("1", AfterMs(10_000))), timed(2, int(10), 20, 30, Command::Ttl)], true),
            ("TTL a second short", 0, vec![timed(1, ok.clone(), 0, 10, set("1", AfterMs(10_000))), timed(2, int(9), 20, 30, Command::Ttl)], false),
            ("PEXPIRE renews", 0, vec![set_px(), timed(2, int(1), 80, 90, expire(ExpireKind::PExpire, 200)), get(bulk("1"), 250, 260)], true),
            ("PEXPIRE renews until its own deadline", 0, vec![set_px(), timed(2, int(1), 80, 90, expire(ExpireKind::PExpire, 200)), get(bulk("1"), 300, 310)], false),
            ("PEXPIRE of an expired key", 0, vec![set_px(), timed(2, int(1), 150, 160, expire(ExpireKind::PExpire, 200))], false),
            ("EXPIRE 0 deletes", 0, vec![set_px(), timed(2, int(1), 20, 30, expire(ExpireKind::Expire, 0)), get(none.clone(), 40, 50)], true),
            ("PERSIST keeps the key", 0, vec![set_px(), timed(2, int(1), 50, 60, Command::Persist), get(bulk("1"), 500, 510)], true),
            ("PERSIST of an expired key", 0, vec![set_px(), timed(2, int(1), 150, 160, Command::Persist)], false),
            ("INCR keeps the deadline", 0, vec![set_px(), timed(2, int(2), 20, 30, Command::IncrBy(1)), get(bulk("2"), 200, 210)], false),
            ("INCR keeps the deadline, which passes", 0, vec![set_px(), timed(2, int(2), 20, 30, Command::IncrBy(1)), get(none.clone(), 200, 210)], true),
            ("INCR of an expired key starts without one", 0, vec![set_px(), timed(2, int(1), 200, 210, Command::IncrBy(1)), get(bulk("1"), 5000, 5010)], true),
            ("KEEPTTL keeps the deadline", 0, vec![set_px(), timed(2, ok.clone(), 20, 30, set("2", Keep)), get(bulk("2"), 200, 210)], false),
            ("SET without KEEPTTL clears it", 0, vec![set_px(), timed(2, ok.clone(), 20, 30, set("2", Clear)), get(bulk("2"), 200, 210)], true),
            ("DEL of an expired key", 0, vec![set_px(), timed(2, int(1), 200, 210, Command::Del)], false),
            // The INCR answers 1 whether or not the 0 had expired: both futures stay possible.
            ("an INCR that does not tell (deadline kept)", 0, vec![timed(1, ok.clone(), 0, 10, set("0", AfterMs(100))),
                timed(2, int(1), 95, 105, Command::IncrBy(1)), get(none.clone(), 5000, 5010)], true),
            ("an INCR that does not tell (deadline gone)", 0, vec![timed(1, ok.clone(), 0, 10, set("0", AfterMs(100))),
                timed(2, int(1), 95, 105, Command::IncrBy(1)), get(bulk("1"), 5000, 5010)], true),
            // Without skew an expired key stays expired; with it, a replica whose clock is
            // behind may see it live again.
            ("live, expired, live again", 0, vec![timed(1, None, 0, 0, set("1", AfterMs(100))),
                get(bulk("1"), 50, 60), get(none.clone(), 70, 80), get(bulk("1"), 90, 95)], false),
            ("live, expired, live again within the skew", 20, vec![timed(1, None, 0, 0, set("1", AfterMs(100))),
                get(bulk("1"), 50, 60), get(none.clone(), 70, 80), get(bulk("1"), 90, 95)], true),
            ("a lease holds", 0, vec![lock(1, int(1), 0, 10, "a"), lock(2, none.clone(), 50, 60, "b")], true),
            ("a lease runs out", 0, vec![lock(1, int(1), 0, 10, "a"), lock(2, int(2), 200, 210, "b")], true),
            ("a lease taken early", 0, vec![lock(1, int(1), 0, 10, "a"), lock(2, int(2), 50, 60, "b")], false),
            ("a lease that never ends", 0, vec![lock(1, int(1), 0, 10, "a"), lock(2, none.clone(), 200, 210, "b")], false),
            ("a lease renewed by its holder", 0, vec![lock(1, int(1), 0, 10, "a"), lock(1, int(1), 80, 90, "a"),
                lock(2, none.clone(), 150, 160, "b")], true),
            ("the holder after its lease ran out gets a new token", 0, vec![lock(1, int(1), 0, 10, "a"), lock(1, int(2), 200, 210, "a")], true),
            ("the holder may release after its lease ran out", 0, vec![lock(1, int(1), 0, 10, "a"),
                timed(1, int(1), 200, 210, Command::LockRelease { owner: Bytes::from_static(b"a") })], true),
        ];
        for (name, skew_ms, operations, want) in cases {
            assert_eq!(linearizable(skew_ms, operations), want, "{name}");
        }
    }

    #[test]
    fn stamp_windows_and_the_epoch_come_from_the_clocks() {
        let ok = Some(Reply::Ok);
        let with = |ops: Vec<Operation>, stamps: &[(usize, (i64, Option<i64>))]| History {
            operations: ops,
            clocks: Clocks {
                epoch_ms: 1_000,
                skew_ms: 0,
                stamps_us: stamps.iter().copied().collect(),
            },
        };
        let pxat = || timed(1, ok.clone(), 0, 10, set("v", Expiry::AtMs(1_100)));
        let px = || timed(1, ok.clone(), 0, 10, set("v", Expiry::AfterMs(100)));
        let get = |call, ret| timed(2, bulk("v"), call, ret, Command::Get);
        // PXAT 1100 with the wall clock at 1000 ms at time 0: the deadline is at 100 ms.
        assert!(check(&with(vec![pxat(), get(50, 60)], &[]), 1000).is_linearizable());
        assert!(!check(&with(vec![pxat(), get(150, 160)], &[]), 1000).is_linearizable());
        // A replica whose clock ran 1 s ahead stamped the SET; the GET's replica was on time.
        let ahead = [(0, (1_000_000, Some(1_010_000)))];
        assert!(check(&with(vec![px(), get(900, 910)], &ahead), 1000).is_linearizable());
        assert!(!check(&with(vec![px(), get(900, 910)], &[]), 1000).is_linearizable());
    }

    #[test]
    fn an_unchanged_set_px_does_not_double_the_states() {
        // SET PX over a key with a deadline: whether the old value had expired, the new deadline
        // window is the same interval, so the two branches join into one state.
        let state = ModelState {
            reg: Register {
                data: Data::Str(Bytes::from_static(b"1")),
                ..Register::default()
            },
            ttl: Some(Window {
                lo: 100_000,
                hi: 110_000,
            }),
            lease: None,
        };
        let operation = timed(1, Some(Reply::Ok), 90, 120, set("2", Expiry::AfterMs(100)));
        let model = KeyModel {
            horizon_us: 1_000_000,
            epoch_ms: 0,
        };
        let t = Timed {
            op: &operation,
            stamp: Window {
                lo: 90_000,
                hi: 120_000,
            },
        };
        let next: Vec<ModelState> = model.step(&state, &t).collect();
        let want = ModelState {
            reg: Register {
                data: Data::Str(Bytes::from_static(b"2")),
                ..Register::default()
            },
            ttl: Some(Window {
                lo: 190_000,
                hi: 220_000,
            }),
            lease: None,
        };
        assert_eq!(next, vec![want]);
    }

    #[test]
    #[should_panic(expected = "does not model")]
    fn an_unmodelled_command_is_refused() {
        let cmd = Command::Expire(ExpireArgs {
            kind: ExpireKind::PExpireAt,
            time: 5,
            flags: ExpireFlags::default(),
        });
        check(
            &History {
                operations: vec![timed(1, int(0), 0, 10, cmd)],
                ..History::default()
            },
            1000,
        );
    }
}
