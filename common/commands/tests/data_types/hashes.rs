//! HSET and the rest of the hash family.
use logless_commands::command::{Command, CommandError, HashCmd, Reply, ScanArgs};
use logless_commands::value::Register;

use crate::support::*;

fn h(cmd: HashCmd) -> Command {
    Command::Hash(cmd)
}

fn hset(pairs: &[(&str, &str)]) -> Command {
    h(HashCmd::HSet(
        pairs.iter().map(|(k, v)| (b(k), b(v))).collect(),
    ))
}

#[test]
fn hset_counts_new_fields_and_creates_the_key() {
    let (o, r) = run(hset(&[("f1", "a"), ("f2", "b")]), Register::default());
    assert_eq!((o.reply, o.changed), (Reply::Int(2), true));
    assert_eq!(r, hash(&[("f1", "a"), ("f2", "b")]));
    let (o, r) = run(hset(&[("f1", "x"), ("f3", "c")]), r);
    assert_eq!(o.reply, Reply::Int(1), "an overwritten field is not new");
    assert_eq!(r, hash(&[("f1", "x"), ("f2", "b"), ("f3", "c")]));
    let (o, _) = run(hset(&[("f1", "x")]), r);
    assert_eq!((o.reply, o.changed), (Reply::Int(0), false));
    let (o, r) = run(hset(&[("f", "1"), ("f", "2")]), Register::default());
    assert_eq!((o.reply, r), (Reply::Int(1), hash(&[("f", "2")])));
}

#[test]
fn hsetnx_sets_only_a_new_field() {
    let cmd = |v: &str| {
        h(HashCmd::HSetNx {
            field: b("f"),
            value: b(v),
        })
    };
    let (o, r) = run(cmd("a"), Register::default());
    assert_eq!((o.reply, r.clone()), (Reply::Int(1), hash(&[("f", "a")])));
    let (o, r) = run(cmd("b"), r);
    assert_eq!(
        (o.reply, o.changed, r),
        (Reply::Int(0), false, hash(&[("f", "a")]))
    );
}

#[test]
fn hget_hmget_hexists_hlen_hstrlen() {
    let r = hash(&[("f", "hello"), ("g", "")]);
    assert_eq!(reply(h(HashCmd::HGet(b("f"))), r.clone()), bulk("hello"));
    assert_eq!(reply(h(HashCmd::HGet(b("x"))), r.clone()), Reply::Nil);
    assert_eq!(
        reply(h(HashCmd::HGet(b("f"))), Register::default()),
        Reply::Nil
    );
    assert_eq!(
        reply(h(HashCmd::HMGet(vec![b("f"), b("x"), b("g")])), r.clone()),
        Reply::Items(vec![bulk("hello"), Reply::Nil, bulk("")])
    );
    assert_eq!(
        reply(h(HashCmd::HMGet(vec![b("f")])), Register::default()),
        Reply::Items(vec![Reply::Nil])
    );
    assert_eq!(reply(h(HashCmd::HExists(b("g"))), r.clone()), Reply::Int(1));
    assert_eq!(reply(h(HashCmd::HExists(b("x"))), r.clone()), Reply::Int(0));
    assert_eq!(reply(h(HashCmd::HLen), r.clone()), Reply::Int(2));
    assert_eq!(reply(h(HashCmd::HLen), Register::default()), Reply::Int(0));
    assert_eq!(reply(h(HashCmd::HStrLen(b("f"))), r.clone()), Reply::Int(5));
    assert_eq!(reply(h(HashCmd::HStrLen(b("x"))), r), Reply::Int(0));
}

#[test]
fn hkeys_hvals_hgetall_in_field_order() {
    let r = hash(&[("b", "2"), ("a", "1")]);
    assert_eq!(reply(h(HashCmd::HKeys), r.clone()), array(&["a", "b"]));
    assert_eq!(reply(h(HashCmd::HVals), r.clone()), array(&["1", "2"]));
    assert_eq!(
        reply(h(HashCmd::HGetAll), r),
        Reply::Map(vec![(bulk("a"), bulk("1")), (bulk("b"), bulk("2"))])
    );
    assert_eq!(reply(h(HashCmd::HKeys), Register::default()), array(&[]));
    assert_eq!(
        reply(h(HashCmd::HGetAll), Register::default()),
        Reply::Map(vec![])
    );
}

#[test]
fn hdel_deletes_the_key_with_its_last_field() {
    let del = |fields: &[&str]| h(HashCmd::HDel(fields.iter().map(|f| b(f)).collect()));
    let (o, r) = run(del(&["a", "x"]), hash(&[("a", "1"), ("b", "2")]));
    assert_eq!((o.reply, r.clone()), (Reply::Int(1), hash(&[("b", "2")])));
    let (o, r) = run(del(&["x"]), r);
    assert_eq!((o.reply, o.changed), (Reply::Int(0), false));
    let mut fenced = r;
    fenced.fence = 4;
    fenced.expires_at_ms = Some(NOW_MS + 5);
    let (o, r) = run(del(&["b"]), fenced);
    assert_eq!(o.reply, Reply::Int(1));
    assert_eq!(
        r,
        Register {
            fence: 4,
            ..Register::default()
        },
        "an emptied hash is a deleted key that keeps its fencing token"
    );
    assert_eq!(run(del(&["b"]), Register::default()).0.reply, Reply::Int(0));
}

#[test]
fn hincrby() {
    let incr = |field: &str, delta: i64| {
        h(HashCmd::HIncrBy {
            field: b(field),
            delta,
        })
    };
    let (o, r) = run(incr("f", 5), Register::default());
    assert_eq!((o.reply, r.clone()), (Reply::Int(5), hash(&[("f", "5")])));
    let (o, r) = run(incr("f", -7), r);
    assert_eq!((o.reply, r), (Reply::Int(-2), hash(&[("f", "-2")])));
    assert_eq!(
        reply(incr("f", 1), hash(&[("f", "x")])),
        Reply::Error(CommandError::HashNotInteger)
    );
    assert_eq!(
        reply(incr("f", 1), hash(&[("f", " 1")])),
        Reply::Error(CommandError::HashNotInteger)
    );
    assert_eq!(
        reply(incr("f", 1), hash(&[("f", &i64::MAX.to_string())])),
        Reply::Error(CommandError::Overflow)
    );
}

#[test]
fn hincrbyfloat_prints_plain_decimals() {
    let incr = |field: &str, delta: f64| {
        h(HashCmd::HIncrByFloat {
            field: b(field),
            delta: f(delta),
        })
    };
    // From Redis's documentation of HINCRBYFLOAT.
    let (o, r) = run(incr("field", 0.1), hash(&[("field", "10.50")]));
    assert_eq!(
        (o.reply, r.clone()),
        (bulk("10.6"), hash(&[("field", "10.6")]))
    );
    let (o, r) = run(incr("field", -5.0), r);
    assert_eq!(o.reply, bulk("5.6"));
    let (o, _) = run(incr("field", 2.0e2), hash(&[("field", "5.0e3")]));
    assert_eq!(o.reply, bulk("5200"));
    assert_eq!(run(incr("new", 1.5), r).0.reply, bulk("1.5"));
    assert_eq!(
        reply(incr("f", 1.0), hash(&[("f", "abc")])),
        Reply::Error(CommandError::HashNotFloat)
    );
    assert_eq!(
        reply(incr("f", f64::INFINITY), hash(&[("f", "1")])),
        Reply::Error(CommandError::NanOrInfinity)
    );
}

#[test]
fn hrandfield_is_a_function_of_its_seed() {
    let r = hash(&[("a", "1"), ("b", "2"), ("c", "3"), ("d", "4")]);
    let rand = |count: Option<i64>, with_values: bool, seed: u64| {
        h(HashCmd::HRandField {
            count,
            with_values,
            seed,
        })
    };
    let one = reply(rand(None, false, 1), r.clone());
    assert_eq!(
        one,
        reply(rand(None, false, 1), r.clone()),
        "same seed, same field"
    );
    let Reply::Bulk(field) = one else {
        panic!("HRANDFIELD without a count answers a field: {one:?}")
    };
    assert!(["a", "b", "c", "d"].contains(&std::str::from_utf8(&field).unwrap()));
    assert_eq!(reply(rand(None, false, 1), Register::default()), Reply::Nil);
    assert_eq!(
        reply(rand(Some(2), false, 1), Register::default()),
        array(&[])
    );
    assert_eq!(reply(rand(Some(0), false, 1), r.clone()), array(&[]));
    assert_eq!(
        reply(rand(Some(9), false, 1), r.clone()),
        array(&["a", "b", "c", "d"]),
        "a count past the size answers every field"
    );
    let Reply::Array(two) = reply(rand(Some(2), false, 3), r.clone()) else {
        panic!("an array")
    };
    assert_eq!(two.len(), 2);
    assert_ne!(two[0], two[1], "a positive count picks distinct fields");
    let Reply::Array(many) = reply(rand(Some(-10), false, 3), r.clone()) else {
        panic!("an array")
    };
    assert_eq!(many.len(), 10, "a negative count may repeat");
    let seeds: std::collections::BTreeSet<Reply> = (0..20)
        .map(|seed| reply(rand(Some(2), false, seed), r.clone()))
        .collect();
    assert!(seeds.len() > 1, "different seeds pick differently");
    assert_eq!(
        reply(rand(Some(9), true, 1), hash(&[("a", "1")])),
        Reply::Pairs(vec![(bulk("a"), bulk("1"))])
    );
    assert_eq!(
        reply(rand(Some(i64::MIN), false, 1), r),
        Reply::Error(CommandError::OutOfRange)
    );
}

#[test]
fn hscan_visits_every_field_once() {
    let names: Vec<String> = (0..7).map(|i| format!("f{i}")).collect();
    let pairs: Vec<(&str, &str)> = names.iter().map(|k| (k.as_str(), "v")).collect();
    let r = hash(&pairs);
    let step = |pattern: Option<&'static str>, no_values: bool| {
        move |cursor| {
            h(HashCmd::HScan {
                args: ScanArgs {
                    cursor,
                    pattern: pattern.map(b),
                    count: 2,
                },
                no_values,
            })
        }
    };
    let (steps, mut flat) = scan_all(&r, step(None, false));
    assert!(steps >= 4, "COUNT 2 over 7 fields takes at least 4 steps");
    let mut seen: Vec<_> = flat
        .chunks(2)
        .map(|p| (p[0].clone(), p[1].clone()))
        .collect();
    seen.sort();
    let expected: Vec<_> = pairs.iter().map(|(k, v)| (b(k), b(v))).collect();
    assert_eq!(seen, expected, "each field once, with its value");
    (_, flat) = scan_all(&r, step(Some("f[12]"), true));
    flat.sort();
    assert_eq!(
        flat,
        [b("f1"), b("f2")],
        "MATCH filters, NOVALUES leaves the values out"
    );
    assert_eq!(
        scan_all(&Register::default(), step(None, false)),
        (1, vec![])
    );
}

#[test]
fn every_hash_command_answers_wrongtype_on_other_kinds() {
    let commands = [
        hset(&[("f", "v")]),
        h(HashCmd::HSetNx {
            field: b("f"),
            value: b("v"),
        }),
        h(HashCmd::HGet(b("f"))),
        h(HashCmd::HMGet(vec![b("f")])),
        h(HashCmd::HDel(vec![b("f")])),
        h(HashCmd::HExists(b("f"))),
        h(HashCmd::HLen),
        h(HashCmd::HStrLen(b("f"))),
        h(HashCmd::HKeys),
        h(HashCmd::HVals),
        h(HashCmd::HGetAll),
        h(HashCmd::HIncrBy {
            field: b("f"),
            delta: 1,
        }),
        h(HashCmd::HIncrByFloat {
            field: b("f"),
            delta: f(1.0),
        }),
        h(HashCmd::HRandField {
            count: Some(1),
            with_values: false,
            seed: 0,
        }),
        h(HashCmd::HScan {
            args: ScanArgs::from_cursor(0),
            no_values: false,
        }),
    ];
    assert_wrongtype(&commands, "hash");
}

#[test]
fn an_expired_hash_is_absent_and_a_new_one_has_no_ttl() {
    let old = expiring(hash(&[("f", "v")]), NOW_MS);
    assert_eq!(reply(h(HashCmd::HGet(b("f"))), old.clone()), Reply::Nil);
    assert_eq!(reply(h(HashCmd::HLen), old.clone()), Reply::Int(0));
    let (o, r) = run(hset(&[("g", "w")]), old);
    assert_eq!(o.reply, Reply::Int(1));
    assert_eq!(
        r,
        hash(&[("g", "w")]),
        "the expired fields are gone, and so is the TTL"
    );
    let live = expiring(hash(&[("f", "v")]), NOW_MS + 1);
    let (_, r) = run(hset(&[("g", "w")]), live);
    assert_eq!(r.expires_at_ms, Some(NOW_MS + 1), "a write keeps the TTL");
    assert_eq!(reply(Command::Type, r), Reply::Status("hash"));
}

#[test]
fn a_hash_may_not_grow_past_the_limits() {
    let fields: Vec<(String, String)> = (0..8).map(|i| (format!("f{i}"), "v".into())).collect();
    let pairs: Vec<(&str, &str)> = fields
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    let full = run(hset(&pairs), Register::default()).1;
    let (o, r) = run(hset(&[("new", "v")]), full.clone());
    assert_eq!(
        (o.reply, r),
        (Reply::Error(CommandError::ValueTooLarge), full.clone())
    );
    assert_eq!(
        run(hset(&[("f0", "w")]), full).0.reply,
        Reply::Int(0),
        "same size is fine"
    );
    let big = "x".repeat(65);
    assert_eq!(
        reply(hset(&[("f", &big)]), Register::default()),
        Reply::Error(CommandError::ValueTooLarge)
    );
}
