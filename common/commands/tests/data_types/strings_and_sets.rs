//! INCRBYFLOAT, GETEX, GETRANGE, SETRANGE, SPOP, SRANDMEMBER, SMISMEMBER and SSCAN.
use std::collections::BTreeSet;

use bytes::Bytes;
use logless_commands::command::{Command, CommandError, Expiry, Reply, ScanArgs};
use logless_commands::value::{Data, Register};

use crate::support::*;

fn incr_by_float(delta: f64) -> Command {
    Command::IncrByFloat(f(delta))
}

#[test]
fn incrbyfloat_as_documented() {
    let (o, r) = run(incr_by_float(0.1), string("10.50"));
    assert_eq!((o.reply, r.clone()), (bulk("10.6"), string("10.6")));
    let (o, _) = run(incr_by_float(-5.0), r);
    assert_eq!(o.reply, bulk("5.6"));
    let (o, r) = run(incr_by_float(2.0e2), string("5.0e3"));
    assert_eq!((o.reply, r), (bulk("5200"), string("5200")));
    let (o, r) = run(incr_by_float(1.5), Register::default());
    assert_eq!((o.reply, r), (bulk("1.5"), string("1.5")));
    let counter = Register {
        data: Data::Int(10),
        ..Register::default()
    };
    assert_eq!(reply(incr_by_float(0.5), counter), bulk("10.5"));
    assert_eq!(reply(incr_by_float(1e-5), string("0")), bulk("0.00001"));
    assert_eq!(
        reply(incr_by_float(1e100), Register::default()),
        Reply::Error(CommandError::ValueTooLarge),
        "1e100 in plain notation is 101 bytes, past the test limit"
    );
    assert_eq!(
        reply(incr_by_float(1.0), string("abc")),
        Reply::Error(CommandError::NotAFloat)
    );
    assert_eq!(
        reply(incr_by_float(1.0), string("")),
        Reply::Error(CommandError::NotAFloat)
    );
    assert_eq!(
        reply(incr_by_float(f64::INFINITY), string("1")),
        Reply::Error(CommandError::NanOrInfinity)
    );
}

#[test]
fn incrbyfloat_keeps_a_live_ttl_and_drops_an_expired_one() {
    let (_, r) = run(incr_by_float(1.0), expiring(string("1"), NOW_MS + 5));
    assert_eq!(r, expiring(string("2"), NOW_MS + 5));
    let (_, r) = run(incr_by_float(1.0), expiring(string("1"), NOW_MS));
    assert_eq!(r, string("1"), "the expired value counts as absent");
}

#[test]
fn getex() {
    let r = string("v");
    let (o, after) = run(Command::GetEx(Expiry::Keep), r.clone());
    assert_eq!((o.reply, o.changed, after), (bulk("v"), false, r.clone()));
    let (o, after) = run(Command::GetEx(Expiry::AfterMs(50)), r.clone());
    assert_eq!(
        (o.reply, after),
        (bulk("v"), expiring(string("v"), NOW_MS + 50))
    );
    let (o, after) = run(Command::GetEx(Expiry::AtMs(NOW_MS + 7)), r.clone());
    assert_eq!(
        (o.reply, after),
        (bulk("v"), expiring(string("v"), NOW_MS + 7))
    );
    let (o, after) = run(
        Command::GetEx(Expiry::Clear),
        expiring(r.clone(), NOW_MS + 9),
    );
    assert_eq!((o.reply, after), (bulk("v"), r.clone()), "PERSIST");
    let (o, _) = run(Command::GetEx(Expiry::Clear), r.clone());
    assert!(!o.changed, "PERSIST without a TTL changes nothing");
    let (o, after) = run(Command::GetEx(Expiry::AtMs(NOW_MS - 1)), r.clone());
    assert_eq!(
        (o.reply, after),
        (bulk("v"), Register::default()),
        "a past instant deletes"
    );
    let invalid = Reply::Error(CommandError::InvalidExpireTimeIn("getex"));
    assert_eq!(
        reply(Command::GetEx(Expiry::AfterMs(0)), r.clone()),
        invalid
    );
    assert_eq!(reply(Command::GetEx(Expiry::AfterMs(u64::MAX)), r), invalid);
    assert_eq!(
        reply(Command::GetEx(Expiry::AfterMs(0)), Register::default()),
        invalid,
        "the time is checked before the key"
    );
    assert_eq!(
        invalid.clone(),
        Reply::Error(CommandError::InvalidExpireTimeIn("getex"))
    );
    assert_eq!(
        reply(Command::GetEx(Expiry::AfterMs(5)), Register::default()),
        Reply::Nil
    );
    assert_eq!(
        reply(Command::GetEx(Expiry::Keep), expiring(string("v"), NOW_MS)),
        Reply::Nil
    );
}

#[test]
fn getrange_as_documented() {
    let range = |start, end, reg: Register| reply(Command::GetRange { start, end }, reg);
    let r = string("This is a string");
    assert_eq!(range(0, 3, r.clone()), bulk("This"));
    assert_eq!(range(-3, -1, r.clone()), bulk("ing"));
    assert_eq!(range(0, -1, r.clone()), bulk("This is a string"));
    assert_eq!(range(10, 100, r.clone()), bulk("string"));
    assert_eq!(range(-1, -5, r.clone()), bulk(""));
    assert_eq!(range(5, 3, r.clone()), bulk(""));
    assert_eq!(range(-100, 2, r), bulk("Thi"));
    assert_eq!(range(0, 1, Register::default()), bulk(""));
    let counter = Register {
        data: Data::Int(12345),
        ..Register::default()
    };
    assert_eq!(range(1, 2, counter), bulk("23"));
}

#[test]
fn setrange_as_documented() {
    let setrange = |offset, value: &str| Command::SetRange {
        offset,
        value: b(value),
    };
    let (o, r) = run(setrange(6, "Redis"), string("Hello World"));
    assert_eq!((o.reply, r), (Reply::Int(11), string("Hello Redis")));
    let (o, r) = run(setrange(6, "Redis"), Register::default());
    assert_eq!(o.reply, Reply::Int(11));
    assert_eq!(r.data, Data::Str(Bytes::from_static(b"\0\0\0\0\0\0Redis")));
    let (o, r) = run(setrange(3, ""), Register::default());
    assert_eq!(
        (o.reply, o.changed, r),
        (Reply::Int(0), false, Register::default())
    );
    let (o, _) = run(setrange(30, ""), string("abc"));
    assert_eq!((o.reply, o.changed), (Reply::Int(3), false));
    let (_, r) = run(setrange(1, "X"), expiring(string("abc"), NOW_MS + 1));
    assert_eq!(r, expiring(string("aXc"), NOW_MS + 1), "the TTL stays");
    assert_eq!(
        reply(setrange(60, "12345"), Register::default()),
        Reply::Error(CommandError::ValueTooLarge)
    );
    assert_eq!(
        reply(setrange(u64::MAX, "1"), Register::default()),
        Reply::Error(CommandError::ValueTooLarge)
    );
}

fn members(reply: &Reply) -> BTreeSet<Bytes> {
    match reply {
        Reply::Array(items) => items.iter().cloned().collect(),
        Reply::Bulk(item) => [item.clone()].into(),
        other => panic!("members expected: {other:?}"),
    }
}

#[test]
fn spop_removes_what_its_seed_picks() {
    let r = set(&["a", "b", "c", "d"]);
    let (o, after) = run(
        Command::SPop {
            count: None,
            seed: 3,
        },
        r.clone(),
    );
    assert_eq!(
        o,
        run(
            Command::SPop {
                count: None,
                seed: 3
            },
            r.clone()
        )
        .0,
        "same seed"
    );
    let popped = members(&o.reply);
    assert_eq!(popped.len(), 1);
    let Data::Set(left) = &after.data else {
        panic!("still a set")
    };
    assert_eq!(left.len(), 3);
    assert!(left.is_disjoint(&popped));
    let (o, after) = run(
        Command::SPop {
            count: Some(2),
            seed: 3,
        },
        r.clone(),
    );
    assert_eq!(members(&o.reply).len(), 2);
    let Data::Set(left) = &after.data else {
        panic!("still a set")
    };
    assert_eq!(left.len(), 2);
    let (o, after) = run(
        Command::SPop {
            count: Some(9),
            seed: 3,
        },
        r.clone(),
    );
    assert_eq!(
        (o.reply, after),
        (array(&["a", "b", "c", "d"]), Register::default())
    );
    let (o, _) = run(
        Command::SPop {
            count: Some(0),
            seed: 3,
        },
        r,
    );
    assert_eq!((o.reply, o.changed), (array(&[]), false));
    assert_eq!(
        reply(
            Command::SPop {
                count: None,
                seed: 1
            },
            Register::default()
        ),
        Reply::Nil
    );
    assert_eq!(
        reply(
            Command::SPop {
                count: Some(1),
                seed: 1
            },
            Register::default()
        ),
        array(&[])
    );
}

#[test]
fn srandmember_reads_what_its_seed_picks() {
    let r = set(&["a", "b", "c"]);
    let pick = |count, seed| reply(Command::SRandMember { count, seed }, r.clone());
    assert_eq!(pick(None, 5), pick(None, 5));
    assert_eq!(members(&pick(None, 5)).len(), 1);
    assert_eq!(members(&pick(Some(2), 5)).len(), 2, "distinct members");
    assert_eq!(pick(Some(5), 5), array(&["a", "b", "c"]));
    let Reply::Array(repeats) = pick(Some(-5), 5) else {
        panic!("an array")
    };
    assert_eq!(repeats.len(), 5);
    assert_eq!(pick(Some(0), 5), array(&[]));
    let absent = |count| reply(Command::SRandMember { count, seed: 0 }, Register::default());
    assert_eq!((absent(None), absent(Some(3))), (Reply::Nil, array(&[])));
    assert_eq!(
        pick(Some(i64::MIN), 5),
        Reply::Error(CommandError::OutOfRange)
    );
}

#[test]
fn smismember() {
    let cmd = Command::SMIsMember(vec![b("one"), b("notamember")]);
    assert_eq!(reply(cmd.clone(), set(&["one"])), ints(&[1, 0]));
    assert_eq!(reply(cmd.clone(), Register::default()), ints(&[0, 0]));
}

#[test]
fn sscan_visits_every_member_once() {
    let names: Vec<String> = (0..12).map(|i| format!("m{i:02}")).collect();
    let all: Vec<&str> = names.iter().map(String::as_str).collect();
    let r = set(&all);
    let step = |pattern: Option<&'static str>| {
        move |cursor| {
            Command::SScan(ScanArgs {
                cursor,
                pattern: pattern.map(b),
                count: 3,
            })
        }
    };
    let (steps, mut seen) = scan_all(&r, step(None));
    assert!(steps >= 4);
    seen.sort();
    assert_eq!(seen, all.iter().map(|m| b(m)).collect::<Vec<_>>());
    let (_, mut seen) = scan_all(&r, step(Some("m0?")));
    seen.sort();
    assert_eq!(seen.len(), 10);
}

#[test]
fn a_scan_returns_each_element_present_throughout_once_despite_changes() {
    let names: Vec<String> = (0..20).map(|i| format!("k{i}")).collect();
    let all: Vec<&str> = names.iter().map(String::as_str).collect();
    let step = |cursor| {
        Command::SScan(ScanArgs {
            cursor,
            pattern: None,
            count: 3,
        })
    };
    // k0..k9 stay throughout; between calls one of the rest goes and a new member comes.
    let churn = |reg: Register, call: usize| {
        let reg = run(Command::SRem(vec![b(&format!("k{}", 10 + call % 10))]), reg).1;
        run(Command::SAdd(vec![b(&format!("new{call}"))]), reg).1
    };
    let (_, seen) = scan_with(set(&all), step, churn);
    for stayed in &all[..10] {
        let times = seen.iter().filter(|m| **m == b(stayed)).count();
        assert_eq!(times, 1, "{stayed} was present throughout");
    }
}

#[test]
fn every_string_and_set_command_answers_wrongtype_on_other_kinds() {
    let strings = [
        incr_by_float(1.0),
        Command::GetEx(Expiry::AfterMs(5)),
        Command::GetRange { start: 0, end: 1 },
        Command::SetRange {
            offset: 0,
            value: b("x"),
        },
    ];
    assert_wrongtype(&strings, "string");
    let sets = [
        Command::SPop {
            count: None,
            seed: 1,
        },
        Command::SPop {
            count: Some(2),
            seed: 1,
        },
        Command::SRandMember {
            count: None,
            seed: 1,
        },
        Command::SMIsMember(vec![b("a")]),
        Command::SScan(ScanArgs::from_cursor(0)),
    ];
    assert_wrongtype(&sets, "set");
}
