//! Client histories and a per-key linearizability checker.
//!
//! The checker is the Wing–Gong search with Lowe's memoisation: it tries to order the
//! operations of one key so that each takes effect at one instant between its call and its
//! return, and every acknowledged reply equals what the real command semantics
//! ([`Command::apply`]) give on the state built by the operations before it. Operations whose
//! outcome is unknown may take effect at any instant after their call, or never.
use std::collections::{BTreeMap, HashSet};

use bytes::Bytes;
use logless_commands::command::{Command, Condition, Expiry, Limits, Reply};
use logless_commands::value::Register;
use logless_core::ids::Key;

/// How an operation ended, as the client saw it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// A reply arrived.
    Ok(Reply),
    /// No reply, or "outcome unknown": it may have taken effect.
    Unknown,
    /// The store said it was not applied: it never happened and is not checked.
    NotApplied,
}

/// One client operation.
#[derive(Clone, Debug)]
pub struct Operation {
    /// The client that issued it.
    pub client: u32,
    /// The register.
    pub key: Key,
    /// The command.
    pub command: Command,
    /// When it was invoked (simulated µs).
    pub call_us: u64,
    /// When its reply arrived (`u64::MAX` when unknown).
    pub return_us: u64,
    /// How it ended.
    pub outcome: Outcome,
}

/// A whole history, all keys.
#[derive(Clone, Debug, Default)]
pub struct History {
    /// The operations, in invocation order.
    pub operations: Vec<Operation>,
}

impl History {
    /// The operations on `key` by call time, one line each: client, call and return time
    /// (µs), command and outcome.
    pub fn describe_key(&self, key: &Key) -> String {
        let mut ops: Vec<_> = self.operations.iter().filter(|o| &o.key == key).collect();
        ops.sort_by_key(|o| o.call_us);
        let mut text = String::new();
        for o in ops {
            let ret = if o.return_us == u64::MAX {
                "∞".to_string()
            } else {
                o.return_us.to_string()
            };
            let out = match &o.outcome {
                Outcome::Ok(r) => format!("{r:?}"),
                Outcome::Unknown => "unknown".into(),
                Outcome::NotApplied => "not applied".into(),
            };
            text += &format!(
                "c{:<3} {:>9} {:>9}  {:?} -> {}\n",
                o.client, o.call_us, ret, o.command, out
            );
        }
        text
    }
}

/// The Redis argument array of a command on `key`, for the commands the Porcupine checker
/// models (`checker/README.md`); `None` for the others.
pub fn redis_args(key: &str, command: &Command) -> Option<Vec<String>> {
    let text = |b: &Bytes| String::from_utf8_lossy(b).into_owned();
    let mut args = vec![String::new(), key.to_string()];
    let name = match command {
        Command::Get => "GET",
        Command::Exists => "EXISTS",
        Command::Del => "DEL",
        Command::SMembers => "SMEMBERS",
        Command::SCard => "SCARD",
        Command::IncrBy(n) => {
            args.push(n.to_string());
            "INCRBY"
        }
        Command::SIsMember(m) => {
            args.push(text(m));
            "SISMEMBER"
        }
        Command::SAdd(members) | Command::SRem(members) => {
            args.extend(members.iter().map(text));
            if matches!(command, Command::SAdd(_)) {
                "SADD"
            } else {
                "SREM"
            }
        }
        Command::Set(set) if set.expiry == Expiry::Clear => {
            args.push(text(&set.value));
            match &set.condition {
                Condition::Always => {}
                Condition::Nx => args.push("NX".into()),
                Condition::Xx => args.push("XX".into()),
                Condition::IfEq(v) => args.extend(["IFEQ".into(), text(v)]),
                Condition::IfNe(v) => args.extend(["IFNE".into(), text(v)]),
                _ => return None,
            }
            if set.get {
                args.push("GET".into());
            }
            "SET"
        }
        Command::DelEx(condition) => {
            match condition {
                Condition::IfEq(v) => args.extend(["IFEQ".into(), text(v)]),
                Condition::IfNe(v) => args.extend(["IFNE".into(), text(v)]),
                _ => return None,
            }
            "DELEX"
        }
        Command::LockAcquire { owner, lease_ms } => {
            args.extend([text(owner), lease_ms.to_string()]);
            "LOCK.ACQUIRE"
        }
        Command::LockRelease { owner } => {
            args.push(text(owner));
            "LOCK.RELEASE"
        }
        _ => return None,
    };
    args[0] = name.into();
    Some(args)
}

impl History {
    /// The history as the Porcupine checker's JSON lines (`checker/README.md`), every key
    /// prefixed with `key_prefix` (so that many runs can share one file). Fails on a command
    /// the checker does not model.
    pub fn to_checker_lines(&self, key_prefix: &str) -> Result<String, String> {
        let mut lines = String::new();
        for op in &self.operations {
            let key = format!("{key_prefix}{}", String::from_utf8_lossy(&op.key.0));
            let cmd = redis_args(&key, &op.command)
                .ok_or_else(|| format!("the checker does not model {:?}", op.command))?;
            let call_ns = op.call_us * 1000;
            let mut line = serde_json::json!({
                "client": op.client,
                "key": key,
                "cmd": cmd,
                "call": call_ns,
                "return": if op.return_us == u64::MAX { call_ns } else { op.return_us * 1000 },
                "outcome": match op.outcome {
                    Outcome::Ok(_) => "ok",
                    Outcome::NotApplied => "fail",
                    Outcome::Unknown => "unknown",
                },
            });
            if let Outcome::Ok(reply) = &op.outcome {
                line["output"] = match reply {
                    Reply::Ok => serde_json::json!({"type": "ok"}),
                    Reply::Nil => serde_json::json!({"type": "nil"}),
                    Reply::Int(n) => serde_json::json!({"type": "int", "value": n}),
                    Reply::Bulk(b) => {
                        serde_json::json!({"type": "bulk", "value": String::from_utf8_lossy(b)})
                    }
                    Reply::Status(s) => serde_json::json!({"type": "bulk", "value": s}),
                    Reply::Array(items) => {
                        let mut members: Vec<String> = items
                            .iter()
                            .map(|b| String::from_utf8_lossy(b).into_owned())
                            .collect();
                        members.sort();
                        serde_json::json!({"type": "array", "value": members})
                    }
                    Reply::Error(e) => serde_json::json!({"type": "error", "value": e.to_string()}),
                };
            }
            lines += &line.to_string();
            lines.push('\n');
        }
        Ok(lines)
    }
}

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

const LIMITS: Limits = Limits {
    value_bytes_max: usize::MAX,
    set_members_max: usize::MAX,
};

/// Checks every key of `history`; `states_max` bounds the search per key.
pub fn check(history: &History, states_max: usize) -> CheckReport {
    let mut by_key: BTreeMap<&Key, Vec<&Operation>> = BTreeMap::new();
    // Operations that never happened, and reads whose answer nobody saw, constrain nothing.
    let relevant = history.operations.iter().filter(|o| match o.outcome {
        Outcome::Ok(_) => true,
        Outcome::Unknown => !o.command.is_read_only(),
        Outcome::NotApplied => false,
    });
    for op in relevant {
        by_key.entry(&op.key).or_default().push(op);
    }
    let mut report = CheckReport {
        keys: by_key.len(),
        operations: by_key_total(&by_key),
        ..CheckReport::default()
    };
    for (key, ops) in by_key {
        match check_key(&ops, states_max) {
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

fn by_key_total(by_key: &BTreeMap<&Key, Vec<&Operation>>) -> usize {
    by_key.values().map(Vec::len).sum()
}

struct Search<'a> {
    ops: &'a [&'a Operation],
    done: Vec<u64>,
    seen: HashSet<(Vec<u64>, Vec<u8>)>,
    states_max: usize,
    required_left: usize,
}

/// `Some(true)` if linearizable, `Some(false)` if not, `None` if the budget ran out.
fn check_key(ops: &[&Operation], states_max: usize) -> Option<bool> {
    let required_left = ops
        .iter()
        .filter(|o| matches!(o.outcome, Outcome::Ok(_)))
        .count();
    let mut search = Search {
        ops,
        done: vec![0; ops.len().div_ceil(64)],
        seen: HashSet::new(),
        states_max,
        required_left,
    };
    search.explore(&Register::default())
}

impl Search<'_> {
    fn is_done(&self, i: usize) -> bool {
        self.done[i / 64] & (1 << (i % 64)) != 0
    }

    fn flip(&mut self, i: usize) {
        self.done[i / 64] ^= 1 << (i % 64);
    }

    fn explore(&mut self, state: &Register) -> Option<bool> {
        if self.required_left == 0 {
            return Some(true);
        }
        let mut encoded = Vec::new();
        state.encode(&mut encoded);
        if !self.seen.insert((self.done.clone(), encoded)) {
            return Some(false);
        }
        if self.seen.len() > self.states_max {
            return None;
        }
        // An operation may go next only if no pending acknowledged operation returned before
        // it was called.
        let horizon = (0..self.ops.len())
            .filter(|&i| !self.is_done(i))
            .map(|i| self.ops[i].return_us)
            .min()
            .unwrap_or(u64::MAX);
        for i in 0..self.ops.len() {
            if self.is_done(i) || self.ops[i].call_us > horizon {
                continue;
            }
            let op = self.ops[i];
            let mut next = state.clone();
            let outcome = op.command.apply(&mut next, 0, &LIMITS);
            let required = match &op.outcome {
                Outcome::Ok(reply) if *reply != outcome.reply => continue,
                Outcome::Ok(_) => true,
                Outcome::Unknown => false,
                Outcome::NotApplied => unreachable!("filtered out before the search"),
            };
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
        Some(false)
    }
}

#[cfg(test)]
mod tests {
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
        };
        let not_applied = History {
            operations: vec![
                op(1, Command::IncrBy(1), 0, u64::MAX, Outcome::Unknown),
                op(2, Command::Get, 20, 30, Outcome::Ok(Reply::Nil)),
            ],
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
        };
        assert!(!check(&history, 10_000).is_linearizable());
    }
}
