//! The lost-write check: every key's final read against the writes acknowledged before it.
//!
//! Porcupine (which sees the final reads too) is the main check; this one is simple, sound (it
//! never blames a correct store) and names the write that went missing:
//!
//! * counters: the final value is at least the sum of the acknowledged increments and at most
//!   that plus the increments of unknown outcome;
//! * sets: every acknowledged SADD member is present unless an SREM of it or a DEL (answered or
//!   of unknown outcome) may come after the SADD; every member present was added by some SADD;
//! * registers (and entries, whose SET NX and SET XX count as SETs where they applied): take
//!   the acknowledged write `W` that certainly applied with the latest call; the final value is
//!   `W`'s or that of a write that certainly or possibly applied and may come after `W` (it did
//!   not return before `W` was called);
//! * expiring registers: as registers, except that the key may also read back absent if any
//!   command that sets a time to live (SET PX/PXAT, PEXPIRE) may have applied, since it may
//!   have expired. Whether it should have expired depends on the stamps, which only the
//!   Porcupine check weighs: here a present value must come from the writes as above, and an
//!   absent one is blamed only on a key that never had a time to live;
//! * locks: the final read acquires the lock for a new owner once every lease ran out, so its
//!   fence exceeds every fence acknowledged before by exactly one plus the number of new
//!   owners' acquisitions whose outcome is unknown, at most;
//! * hashes, lists and sorted sets: no check here; Porcupine's models check them with their
//!   final reads.
use std::collections::{BTreeMap, BTreeSet};

use crate::history::{Op, Outcome, Output};
use crate::workload::KeyKind;

/// A write the final state contradicts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LostWrite {
    /// The key.
    pub key: String,
    /// What is wrong.
    pub why: String,
}

/// Checks every key that has a final read; returns the violations.
pub fn check(ops: &[Op]) -> Vec<LostWrite> {
    let mut by_key: BTreeMap<&str, Vec<&Op>> = BTreeMap::new();
    for op in ops {
        by_key.entry(op.key()).or_default().push(op);
    }
    let mut lost = Vec::new();
    for (key, ops) in by_key {
        let Some(last) = ops
            .iter()
            .filter(|op| op.final_read && op.output().is_some())
            .max_by_key(|op| op.call)
        else {
            continue;
        };
        let final_output = last.output().expect("answered");
        let writes: Vec<&Op> = ops.iter().copied().filter(|op| !op.final_read).collect();
        let why = match KeyKind::of(key) {
            Some(KeyKind::Counter) => counter(&writes, final_output),
            Some(KeyKind::Set) => set(&writes, final_output),
            Some(KeyKind::Register | KeyKind::Entry) => register(&writes, final_output),
            Some(KeyKind::Expiring) => expiring(&writes, final_output),
            Some(KeyKind::Lock) => lock(&writes, final_output),
            Some(KeyKind::Hash | KeyKind::List | KeyKind::ZSet) | None => None,
        };
        if let Some(why) = why {
            lost.push(LostWrite {
                key: key.to_string(),
                why,
            });
        }
    }
    lost
}

fn delta(op: &Op) -> Option<i64> {
    match op.name() {
        "INCR" => Some(1),
        "INCRBY" => op.cmd.get(2)?.parse().ok(),
        _ => None,
    }
}

fn counter(ops: &[&Op], final_output: &Output) -> Option<String> {
    let value = match final_output {
        Output::Nil => 0,
        Output::Bulk(s) => match s.parse::<i64>() {
            Ok(v) => v,
            Err(_) => return Some(format!("final value {s:?} is not a counter")),
        },
        other => return Some(format!("final read answered {other:?}")),
    };
    let mut acked = 0i64;
    let mut unknown = 0i64;
    for op in ops {
        let Some(d) = delta(op) else { continue };
        match &op.outcome {
            Outcome::Ok(Output::Int(_)) => acked += d,
            Outcome::Unknown => unknown += d,
            _ => {}
        }
    }
    if value < acked {
        Some(format!(
            "final value {value} < {acked} acknowledged increments: {} lost",
            acked - value
        ))
    } else if value > acked + unknown {
        Some(format!(
            "final value {value} > {acked} acknowledged + {unknown} possible increments"
        ))
    } else {
        None
    }
}

/// Whether `op` certainly or possibly changed its key (answered or of unknown outcome).
fn may_have_applied(op: &Op) -> bool {
    matches!(op.outcome, Outcome::Ok(_) | Outcome::Unknown)
}

fn set(ops: &[&Op], final_output: &Output) -> Option<String> {
    let present: BTreeSet<&str> = match final_output {
        Output::Array(members) => members.iter().map(String::as_str).collect(),
        other => return Some(format!("final read answered {other:?}")),
    };
    let removals: Vec<&Op> = ops
        .iter()
        .copied()
        .filter(|op| matches!(op.name(), "SREM" | "DEL") && may_have_applied(op))
        .collect();
    let mut added = BTreeSet::new();
    for op in ops.iter().filter(|op| op.name() == "SADD") {
        let member = op.cmd[2].as_str();
        if may_have_applied(op) {
            added.insert(member);
        }
        if !matches!(op.outcome, Outcome::Ok(Output::Int(_))) || present.contains(member) {
            continue;
        }
        let removed_later = removals.iter().any(|r| {
            (r.name() == "DEL" || r.cmd[2..].iter().any(|m| m == member))
                && r.latest_effect() >= op.call
        });
        if !removed_later {
            return Some(format!(
                "member {member:?} acknowledged by SADD (client {}, returned at {} ns) is \
                 missing and no removal may follow it",
                op.client, op.ret
            ));
        }
    }
    present
        .iter()
        .find(|m| !added.contains(*m))
        .map(|m| format!("member {m:?} is present but was never added"))
}

/// A register write's effect if it certainly applied (`Some(None)` for a deletion).
fn applied_effect(op: &Op) -> Option<Option<&str>> {
    let output = op.output()?;
    match (op.name(), output) {
        ("SET", Output::Ok) => Some(Some(op.cmd[2].as_str())),
        ("DEL" | "DELEX", Output::Int(1)) => Some(None),
        _ => None,
    }
}

/// A register write's effect if it possibly applied (its outcome is unknown).
fn possible_effect(op: &Op) -> Option<Option<&str>> {
    if op.outcome != Outcome::Unknown {
        return None;
    }
    match op.name() {
        "SET" => Some(Some(op.cmd[2].as_str())),
        "DEL" | "DELEX" => Some(None),
        _ => None,
    }
}

fn register(ops: &[&Op], final_output: &Output) -> Option<String> {
    let value = match final_output {
        Output::Nil => None,
        Output::Bulk(s) => Some(s.as_str()),
        other => return Some(format!("final read answered {other:?}")),
    };
    let last = ops
        .iter()
        .filter(|op| applied_effect(op).is_some())
        .max_by_key(|op| op.call);
    let mut candidates: BTreeSet<Option<&str>> = BTreeSet::new();
    let after = last.map_or(0, |w| w.call);
    match last {
        Some(w) => {
            candidates.insert(applied_effect(w).expect("applied"));
        }
        None => {
            candidates.insert(None);
        }
    }
    for op in ops {
        if op.latest_effect() < after {
            continue;
        }
        if let Some(effect) = applied_effect(op).or_else(|| possible_effect(op)) {
            candidates.insert(effect);
        }
    }
    if candidates.contains(&value) {
        return None;
    }
    let w = last.map_or("no acknowledged write".to_string(), |w| {
        format!(
            "the last acknowledged write {:?} (client {}, {}..{} ns)",
            w.cmd, w.client, w.call, w.ret
        )
    });
    Some(format!(
        "final value {value:?} is neither from {w} nor from a write that may follow it"
    ))
}

/// Whether `op` gives its key a time to live.
fn sets_ttl(op: &Op) -> bool {
    match op.name() {
        "PEXPIRE" | "EXPIRE" => true,
        "SET" => op.cmd[3..].iter().any(|a| {
            ["PX", "EX", "PXAT", "EXAT"]
                .iter()
                .any(|o| a.eq_ignore_ascii_case(o))
        }),
        _ => false,
    }
}

fn expiring(ops: &[&Op], final_output: &Output) -> Option<String> {
    let may_expire = ops.iter().any(|op| sets_ttl(op) && may_have_applied(op));
    if *final_output == Output::Nil && may_expire {
        return None;
    }
    register(ops, final_output)
}

fn lock(ops: &[&Op], final_output: &Output) -> Option<String> {
    let fence = match final_output {
        Output::Int(f) => *f,
        // Another owner's lease still ran: the answer tells no fence.
        Output::Nil => return None,
        other => return Some(format!("final acquisition answered {other:?}")),
    };
    let acquisitions = ops.iter().filter(|op| op.name() == "LOCK.ACQUIRE");
    let acknowledged = acquisitions
        .clone()
        .filter_map(|op| match op.output() {
            Some(Output::Int(f)) => Some(*f),
            _ => None,
        })
        .max()
        .unwrap_or(0);
    let unknown = acquisitions
        .filter(|op| op.outcome == Outcome::Unknown)
        .count();
    let most = acknowledged.saturating_add(i64::try_from(unknown).unwrap_or(i64::MAX));
    if fence <= acknowledged {
        Some(format!(
            "final fence {fence} repeats a fence: {acknowledged} was acknowledged before"
        ))
    } else if fence > most + 1 {
        Some(format!(
            "final fence {fence} > {acknowledged} acknowledged + {unknown} possible + 1"
        ))
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn op(cmd: &[&str], call: u64, ret: u64, outcome: Outcome) -> Op {
        Op {
            client: call,
            cmd: cmd.iter().map(|s| (*s).to_string()).collect(),
            queued: Vec::new(),
            call,
            ret,
            outcome,
            final_read: false,
            stamp: None,
        }
    }

    fn read(cmd: &[&str], output: Output) -> Op {
        Op {
            final_read: true,
            ..op(cmd, 1000, 1001, Outcome::Ok(output))
        }
    }

    fn ok(o: Output) -> Outcome {
        Outcome::Ok(o)
    }

    #[test]
    fn counters() {
        let h = |final_value: &str| {
            check(&[
                op(&["INCR", "c1"], 1, 2, ok(Output::Int(1))),
                op(&["INCRBY", "c1", "3"], 3, 4, ok(Output::Int(4))),
                op(&["INCR", "c1"], 5, 6, Outcome::Unknown),
                op(&["INCR", "c1"], 5, 6, Outcome::Fail),
                read(&["GET", "c1"], Output::Bulk(final_value.into())),
            ])
        };
        assert!(h("4").is_empty());
        assert!(h("5").is_empty());
        assert_eq!(h("3").len(), 1);
        assert_eq!(h("6").len(), 1);
    }

    #[test]
    fn sets() {
        let h = |members: &[&str]| {
            check(&[
                op(&["SADD", "s1", "a"], 1, 2, ok(Output::Int(1))),
                op(&["SADD", "s1", "b"], 3, 4, ok(Output::Int(1))),
                op(&["SREM", "s1", "b"], 3, 5, Outcome::Unknown),
                op(&["SADD", "s1", "c"], 6, 7, Outcome::Unknown),
                read(
                    &["SMEMBERS", "s1"],
                    Output::Array(members.iter().map(|s| (*s).to_string()).collect()),
                ),
            ])
        };
        assert!(h(&["a", "b", "c"]).is_empty());
        assert!(h(&["a"]).is_empty());
        assert_eq!(h(&["b"]).len(), 1, "a is lost");
        assert_eq!(h(&["a", "z"]).len(), 1, "z was never added");
    }

    #[test]
    fn registers() {
        let h = |value: Output| {
            check(&[
                op(&["SET", "r1", "x"], 1, 2, ok(Output::Ok)),
                op(&["SET", "r1", "y"], 3, 4, ok(Output::Ok)),
                op(&["SET", "r1", "z", "NX"], 3, 5, ok(Output::Nil)),
                op(&["DEL", "r1"], 3, 6, Outcome::Unknown),
                op(&["SET", "r1", "w"], 1, 7, ok(Output::Ok)),
                read(&["GET", "r1"], value),
            ])
        };
        assert!(h(Output::Bulk("y".into())).is_empty());
        assert!(h(Output::Bulk("w".into())).is_empty());
        assert!(h(Output::Nil).is_empty());
        assert_eq!(h(Output::Bulk("x".into())).len(), 1);
        assert_eq!(h(Output::Bulk("z".into())).len(), 1);
    }

    #[test]
    fn expiring_registers_may_read_back_absent_only_with_a_time_to_live() {
        let h = |ttl: &[&str], value: Output| {
            let mut set = vec!["SET", "e1", "x"];
            set.extend(ttl);
            check(&[
                op(&set, 1, 2, ok(Output::Ok)),
                op(&["PERSIST", "e1"], 3, 4, ok(Output::Int(1))),
                op(&["SET", "e1", "y", "KEEPTTL"], 5, 6, Outcome::Unknown),
                read(&["GET", "e1"], value),
            ])
        };
        assert!(h(&["PX", "50"], Output::Nil).is_empty());
        assert!(h(&["PXAT", "1050"], Output::Nil).is_empty());
        assert!(h(&["PX", "50"], Output::Bulk("y".into())).is_empty());
        assert_eq!(h(&[], Output::Nil).len(), 1, "no time to live: x is lost");
        assert_eq!(h(&["PX", "50"], Output::Bulk("z".into())).len(), 1);
    }

    #[test]
    fn the_final_fence_exceeds_every_acknowledged_one() {
        let h = |fence: Output| {
            check(&[
                op(
                    &["LOCK.ACQUIRE", "l1", "o1", "50"],
                    1,
                    2,
                    ok(Output::Int(1)),
                ),
                op(
                    &["LOCK.ACQUIRE", "l1", "o2", "50"],
                    3,
                    4,
                    ok(Output::Int(2)),
                ),
                op(&["LOCK.ACQUIRE", "l1", "o1", "50"], 3, 4, ok(Output::Nil)),
                op(&["LOCK.ACQUIRE", "l1", "o3", "50"], 5, 6, Outcome::Unknown),
                read(&["LOCK.ACQUIRE", "l1", "final", "600000"], fence),
            ])
        };
        assert!(h(Output::Int(3)).is_empty());
        assert!(h(Output::Int(4)).is_empty());
        assert!(h(Output::Nil).is_empty());
        assert_eq!(h(Output::Int(2)).len(), 1, "fence 2 handed out twice");
        assert_eq!(h(Output::Int(5)).len(), 1, "a fence from nowhere");
    }
}
