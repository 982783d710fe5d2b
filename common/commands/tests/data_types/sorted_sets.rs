//! ZADD and the rest of the sorted-set family, with the examples of Redis's documentation.
use logless_commands::command::{
    Command, CommandError, LexBound, Reply, ScanArgs, ScoreBound, ZAddFlags, ZRange, ZRangeBy,
    ZSetCmd,
};
use logless_commands::value::Register;

use crate::support::*;

fn z(cmd: ZSetCmd) -> Command {
    Command::ZSet(cmd)
}

fn zadd(flags: &str, pairs: &[(f64, &str)]) -> Command {
    let has = |flag: &str| flags.split_whitespace().any(|f| f == flag);
    z(ZSetCmd::Add {
        members: pairs.iter().map(|(s, m)| (f(*s), b(m))).collect(),
        flags: ZAddFlags {
            nx: has("NX"),
            xx: has("XX"),
            gt: has("GT"),
            lt: has("LT"),
            ch: has("CH"),
            incr: has("INCR"),
        },
    })
}

fn bound(text: &str) -> ScoreBound {
    ScoreBound::parse(text.as_bytes()).unwrap()
}

fn lex(text: &str) -> LexBound {
    LexBound::parse(&b(text)).unwrap()
}

fn zrange(by: ZRangeBy, rev: bool, limit: Option<(i64, i64)>, with_scores: bool) -> Command {
    z(ZSetCmd::Range(ZRange {
        by,
        rev,
        limit,
        with_scores,
    }))
}

fn by_index(start: i64, stop: i64) -> ZRangeBy {
    ZRangeBy::Index { start, stop }
}

fn by_score(min: &str, max: &str) -> ZRangeBy {
    ZRangeBy::Score {
        min: bound(min),
        max: bound(max),
    }
}

fn by_lex(min: &str, max: &str) -> ZRangeBy {
    ZRangeBy::Lex {
        min: lex(min),
        max: lex(max),
    }
}

fn with_scores(pairs: &[(&str, f64)]) -> Reply {
    Reply::Pairs(pairs.iter().map(|(m, s)| (bulk(m), double(*s))).collect())
}

fn one_two_three() -> Register {
    zset(&[(1.0, "one"), (2.0, "two"), (3.0, "three")])
}

#[test]
fn zadd_adds_and_orders_by_score_then_member() {
    let (o, r) = run(zadd("", &[(1.0, "one")]), Register::default());
    assert_eq!(o.reply, Reply::Int(1));
    let (_, r) = run(zadd("", &[(1.0, "uno")]), r);
    let (o, r) = run(zadd("", &[(2.0, "two"), (3.0, "three")]), r);
    assert_eq!(o.reply, Reply::Int(2));
    assert_eq!(
        reply(zrange(by_index(0, -1), false, None, true), r.clone()),
        with_scores(&[("one", 1.0), ("uno", 1.0), ("two", 2.0), ("three", 3.0)])
    );
    let (o, _) = run(zadd("", &[(1.0, "one")]), r);
    assert_eq!((o.reply, o.changed), (Reply::Int(0), false));
}

#[test]
fn zadd_options() {
    let r = zset(&[(3.0, "m")]);
    let score = |r: &Register| reply(z(ZSetCmd::Score(b("m"))), r.clone());
    let (o, after) = run(zadd("NX", &[(5.0, "m"), (1.0, "new")]), r.clone());
    assert_eq!((o.reply, score(&after)), (Reply::Int(1), double(3.0)));
    let (o, after) = run(zadd("XX", &[(5.0, "m"), (1.0, "new")]), r.clone());
    assert_eq!((o.reply, score(&after)), (Reply::Int(0), double(5.0)));
    assert_eq!(
        reply(z(ZSetCmd::Card), after),
        Reply::Int(1),
        "XX adds nothing"
    );
    let (o, after) = run(zadd("XX", &[(1.0, "m")]), Register::default());
    assert_eq!((o.reply, after), (Reply::Int(0), Register::default()));
    let (_, after) = run(zadd("GT", &[(1.0, "m")]), r.clone());
    assert_eq!(score(&after), double(3.0), "GT refuses a lower score");
    let (_, after) = run(zadd("GT", &[(4.0, "m")]), r.clone());
    assert_eq!(score(&after), double(4.0));
    let (_, after) = run(zadd("LT", &[(4.0, "m")]), r.clone());
    assert_eq!(score(&after), double(3.0), "LT refuses a higher score");
    let (o, _) = run(zadd("GT", &[(0.0, "new")]), r.clone());
    assert_eq!(o.reply, Reply::Int(1), "GT still adds new members");
    let (o, _) = run(zadd("CH", &[(5.0, "m"), (1.0, "new")]), r.clone());
    assert_eq!(
        o.reply,
        Reply::Int(2),
        "CH counts added and updated members"
    );
    let (o, after) = run(zadd("CH", &[(1.0, "new"), (9.0, "new")]), r.clone());
    assert_eq!(
        o.reply,
        Reply::Int(2),
        "pairs apply in turn: added, then updated"
    );
    assert_eq!(reply(z(ZSetCmd::Score(b("new"))), after), double(9.0));
    let (o, _) = run(zadd("CH", &[(3.0, "m")]), r.clone());
    assert_eq!(o.reply, Reply::Int(0), "the same score is no update");
    let (o, after) = run(zadd("INCR", &[(2.5, "m")]), r.clone());
    assert_eq!((o.reply, score(&after)), (double(5.5), double(5.5)));
    assert_eq!(reply(zadd("INCR NX", &[(1.0, "m")]), r.clone()), Reply::Nil);
    assert_eq!(
        reply(zadd("INCR GT", &[(-1.0, "m")]), r.clone()),
        Reply::Nil
    );
    let unmoved = |flags| reply(zadd(flags, &[(0.0, "m")]), r.clone());
    assert_eq!(unmoved("INCR GT"), Reply::Nil, "equal is not greater");
    assert_eq!(unmoved("INCR LT"), Reply::Nil, "nor lower");
    assert_eq!(unmoved("INCR"), double(3.0));
    assert_eq!(
        reply(zadd("INCR XX", &[(1.0, "x")]), Register::default()),
        Reply::Nil
    );
    assert_eq!(reply(zadd("INCR", &[(2.0, "new")]), r), double(2.0));
}

#[test]
fn zadd_refuses_what_redis_refuses() {
    let r = zset(&[(f64::NEG_INFINITY, "m")]);
    assert_eq!(
        reply(zadd("NX XX", &[(1.0, "m")]), r.clone()),
        Reply::Error(CommandError::ZAddNxXx)
    );
    assert_eq!(
        reply(zadd("GT LT", &[(1.0, "m")]), r.clone()),
        Reply::Error(CommandError::ZAddGtLtNx)
    );
    assert_eq!(
        reply(zadd("GT NX", &[(1.0, "m")]), r.clone()),
        Reply::Error(CommandError::ZAddGtLtNx)
    );
    assert_eq!(
        reply(zadd("INCR", &[(1.0, "m"), (1.0, "n")]), r.clone()),
        Reply::Error(CommandError::ZAddIncrPairs)
    );
    assert_eq!(
        reply(zadd("NX XX", &[(1.0, "m")]), string("s")),
        Reply::Error(CommandError::ZAddNxXx),
        "options are checked before the key"
    );
    assert_eq!(
        reply(zadd("INCR", &[(f64::INFINITY, "m")]), r.clone()),
        Reply::Error(CommandError::ScoreNaN)
    );
    let incr = z(ZSetCmd::IncrBy {
        delta: f(f64::INFINITY),
        member: b("m"),
    });
    assert_eq!(reply(incr, r), Reply::Error(CommandError::ScoreNaN));
}

#[test]
fn zincrby_zscore_zmscore() {
    let incr = |delta, member: &str| {
        z(ZSetCmd::IncrBy {
            delta: f(delta),
            member: b(member),
        })
    };
    let (o, r) = run(incr(2.0, "one"), zset(&[(1.0, "one"), (2.0, "two")]));
    assert_eq!(
        (o.reply, r.clone()),
        (double(3.0), zset(&[(3.0, "one"), (2.0, "two")]))
    );
    let (o, r) = run(incr(-0.5, "new"), r);
    assert_eq!(o.reply, double(-0.5));
    assert_eq!(reply(z(ZSetCmd::Score(b("new"))), r.clone()), double(-0.5));
    assert_eq!(reply(z(ZSetCmd::Score(b("none"))), r.clone()), Reply::Nil);
    assert_eq!(
        reply(
            z(ZSetCmd::MScore(vec![b("one"), b("two"), b("nofield")])),
            r
        ),
        Reply::Items(vec![double(3.0), double(2.0), Reply::Nil])
    );
    assert_eq!(
        reply(z(ZSetCmd::MScore(vec![b("a")])), Register::default()),
        Reply::Items(vec![Reply::Nil])
    );
    let (_, r) = run(incr(0.1, "x"), Register::default());
    let (o, _) = run(incr(0.2, "x"), r);
    assert_eq!(o.reply, double(0.1 + 0.2), "scores are f64 sums");
    assert_eq!(f(0.1 + 0.2).text(), b("0.30000000000000004"));
    assert_eq!(f(5.0e3).text(), b("5000"));
    assert_eq!(f(f64::NEG_INFINITY).text(), b("-inf"));
}

#[test]
fn zrem_and_zcard_delete_the_emptied_key() {
    let rem = |members: &[&str]| z(ZSetCmd::Rem(members.iter().map(|m| b(m)).collect()));
    let (o, r) = run(rem(&["two", "nope"]), one_two_three());
    assert_eq!(
        (o.reply, r.clone()),
        (Reply::Int(1), zset(&[(1.0, "one"), (3.0, "three")]))
    );
    assert_eq!(reply(z(ZSetCmd::Card), r.clone()), Reply::Int(2));
    let (o, r) = run(rem(&["one", "three"]), r);
    assert_eq!((o.reply, r.clone()), (Reply::Int(2), Register::default()));
    assert_eq!(reply(z(ZSetCmd::Card), r), Reply::Int(0));
}

#[test]
fn zcount() {
    let count = |min: &str, max: &str| {
        z(ZSetCmd::Count {
            min: bound(min),
            max: bound(max),
        })
    };
    assert_eq!(reply(count("-inf", "+inf"), one_two_three()), Reply::Int(3));
    assert_eq!(reply(count("(1", "3"), one_two_three()), Reply::Int(2));
    assert_eq!(reply(count("(1", "(3"), one_two_three()), Reply::Int(1));
    assert_eq!(reply(count("3", "1"), one_two_three()), Reply::Int(0));
    assert_eq!(reply(count("0", "9"), Register::default()), Reply::Int(0));
    assert_eq!(ScoreBound::parse(b"x"), Err(CommandError::MinMaxNotFloat));
    assert_eq!(
        ScoreBound::parse(b"(nan"),
        Err(CommandError::MinMaxNotFloat)
    );
    assert_eq!(LexBound::parse(&b("a")), Err(CommandError::MinMaxNotLex));
    assert_eq!(LexBound::parse(&b("")), Err(CommandError::MinMaxNotLex));
}

#[test]
fn zrank_and_zrevrank() {
    let rank = |member: &str, rev, with_score| {
        z(ZSetCmd::Rank {
            member: b(member),
            rev,
            with_score,
        })
    };
    assert_eq!(
        reply(rank("three", false, false), one_two_three()),
        Reply::Int(2)
    );
    assert_eq!(
        reply(rank("four", false, false), one_two_three()),
        Reply::Nil
    );
    assert_eq!(
        reply(rank("three", false, true), one_two_three()),
        Reply::Items(vec![Reply::Int(2), double(3.0)])
    );
    assert_eq!(
        reply(rank("four", false, true), one_two_three()),
        Reply::NilArray
    );
    assert_eq!(
        reply(rank("one", true, false), one_two_three()),
        Reply::Int(2)
    );
    assert_eq!(
        reply(rank("three", true, false), one_two_three()),
        Reply::Int(0)
    );
    assert_eq!(
        reply(rank("a", false, false), Register::default()),
        Reply::Nil
    );
}

#[test]
fn zrange_by_index() {
    let r = one_two_three();
    let range =
        |start, stop, rev| reply(zrange(by_index(start, stop), rev, None, false), r.clone());
    assert_eq!(range(0, -1, false), array(&["one", "two", "three"]));
    assert_eq!(range(2, 3, false), array(&["three"]));
    assert_eq!(range(-2, -1, false), array(&["two", "three"]));
    assert_eq!(range(5, 10, false), array(&[]));
    assert_eq!(range(0, -1, true), array(&["three", "two", "one"]));
    assert_eq!(range(0, 0, true), array(&["three"]));
    assert_eq!(
        reply(zrange(by_index(0, 1), false, None, true), r),
        with_scores(&[("one", 1.0), ("two", 2.0)])
    );
}

#[test]
fn zrange_by_score() {
    let r = one_two_three();
    let range =
        |min, max, rev, limit| reply(zrange(by_score(min, max), rev, limit, false), r.clone());
    assert_eq!(
        range("-inf", "+inf", false, None),
        array(&["one", "two", "three"])
    );
    assert_eq!(range("1", "2", false, None), array(&["one", "two"]));
    assert_eq!(range("(1", "2", false, None), array(&["two"]));
    assert_eq!(range("(1", "(2", false, None), array(&[]));
    // ZRANGE myzset (1 +inf BYSCORE LIMIT 1 1.
    assert_eq!(range("(1", "+inf", false, Some((1, 1))), array(&["three"]));
    // ZREVRANGEBYSCORE myzset +inf -inf, 2 1, 2 (1, (2 (1: the table passes min and max.
    assert_eq!(
        range("-inf", "+inf", true, None),
        array(&["three", "two", "one"])
    );
    assert_eq!(range("1", "2", true, None), array(&["two", "one"]));
    assert_eq!(range("(1", "2", true, None), array(&["two"]));
    assert_eq!(range("(1", "(2", true, None), array(&[]));
    assert_eq!(
        range("-inf", "+inf", false, Some((1, -1))),
        array(&["two", "three"])
    );
    assert_eq!(range("-inf", "+inf", false, Some((-1, 5))), array(&[]));
    assert_eq!(
        range("-inf", "+inf", true, Some((0, 2))),
        array(&["three", "two"])
    );
    assert_eq!(
        reply(zrange(by_score("2", "3"), false, None, true), r),
        with_scores(&[("two", 2.0), ("three", 3.0)])
    );
}

#[test]
fn zrange_by_lex() {
    let r = zset(&[
        (0.0, "a"),
        (0.0, "b"),
        (0.0, "c"),
        (0.0, "d"),
        (0.0, "e"),
        (0.0, "f"),
        (0.0, "g"),
    ]);
    let range =
        |min, max, rev, limit| reply(zrange(by_lex(min, max), rev, limit, false), r.clone());
    assert_eq!(range("-", "[c", false, None), array(&["a", "b", "c"]));
    assert_eq!(range("-", "(c", false, None), array(&["a", "b"]));
    assert_eq!(
        range("[aaa", "(g", false, None),
        array(&["b", "c", "d", "e", "f"])
    );
    // ZREVRANGEBYLEX myzset [c -, (c -, (g [aaa.
    assert_eq!(range("-", "[c", true, None), array(&["c", "b", "a"]));
    assert_eq!(range("-", "(c", true, None), array(&["b", "a"]));
    assert_eq!(
        range("[aaa", "(g", true, None),
        array(&["f", "e", "d", "c", "b"])
    );
    assert_eq!(range("-", "+", false, Some((2, 2))), array(&["c", "d"]));
    assert_eq!(range("+", "-", false, None), array(&[]));
}

#[test]
fn zpopmin_and_zpopmax() {
    let pop = |max, count| z(ZSetCmd::Pop { max, count });
    let (o, r) = run(pop(false, None), one_two_three());
    assert_eq!(o.reply, Reply::Items(vec![bulk("one"), double(1.0)]));
    let (o, r) = run(pop(true, Some(5)), r);
    assert_eq!(o.reply, with_scores(&[("three", 3.0), ("two", 2.0)]));
    assert_eq!(r, Register::default(), "the emptied key is deleted");
    assert_eq!(
        reply(pop(false, None), Register::default()),
        Reply::Items(vec![])
    );
    assert_eq!(
        reply(pop(false, Some(2)), Register::default()),
        Reply::Pairs(vec![])
    );
    let (o, _) = run(pop(false, Some(0)), one_two_three());
    assert_eq!((o.reply, o.changed), (Reply::Pairs(vec![]), false));
}

#[test]
fn zscan_visits_every_member_once_with_its_score() {
    let r = zset(&[(1.0, "a"), (2.5, "b"), (3.0, "c"), (4.0, "d"), (5.0, "e")]);
    let (steps, flat) = scan_all(&r, |cursor| {
        z(ZSetCmd::Scan(ScanArgs {
            cursor,
            pattern: None,
            count: 2,
        }))
    });
    assert!(steps >= 3);
    let mut seen: Vec<_> = flat
        .chunks(2)
        .map(|p| (p[0].clone(), p[1].clone()))
        .collect();
    seen.sort();
    assert_eq!(
        seen,
        [("a", "1"), ("b", "2.5"), ("c", "3"), ("d", "4"), ("e", "5")].map(|(m, s)| (b(m), b(s)))
    );
}

#[test]
fn every_sorted_set_command_answers_wrongtype_on_other_kinds() {
    let commands = [
        zadd("", &[(1.0, "a")]),
        z(ZSetCmd::Rem(vec![b("a")])),
        z(ZSetCmd::Score(b("a"))),
        z(ZSetCmd::MScore(vec![b("a")])),
        z(ZSetCmd::IncrBy {
            delta: f(1.0),
            member: b("a"),
        }),
        z(ZSetCmd::Card),
        z(ZSetCmd::Count {
            min: bound("-inf"),
            max: bound("+inf"),
        }),
        z(ZSetCmd::Rank {
            member: b("a"),
            rev: false,
            with_score: false,
        }),
        zrange(by_index(0, -1), false, None, false),
        z(ZSetCmd::Pop {
            max: false,
            count: None,
        }),
        z(ZSetCmd::Scan(ScanArgs::from_cursor(0))),
    ];
    assert_wrongtype(&commands, "zset");
}

#[test]
fn an_expired_sorted_set_is_absent() {
    let old = expiring(one_two_three(), NOW_MS);
    assert_eq!(reply(z(ZSetCmd::Card), old.clone()), Reply::Int(0));
    assert_eq!(
        reply(zadd("XX", &[(1.0, "one")]), old.clone()),
        Reply::Int(0)
    );
    let (o, r) = run(zadd("", &[(7.0, "seven")]), old);
    assert_eq!(
        (o.reply, r.clone()),
        (Reply::Int(1), zset(&[(7.0, "seven")]))
    );
    assert_eq!(reply(Command::Type, r), Reply::Status("zset"));
}

#[test]
fn a_sorted_set_may_not_grow_past_the_limits() {
    let pairs: Vec<(f64, String)> = (0..8).map(|i| (f64::from(i), format!("m{i}"))).collect();
    let pairs: Vec<(f64, &str)> = pairs.iter().map(|(s, m)| (*s, m.as_str())).collect();
    let full = zset(&pairs);
    let (o, r) = run(zadd("", &[(1.0, "new")]), full.clone());
    assert_eq!(
        (o.reply, r),
        (Reply::Error(CommandError::ValueTooLarge), full.clone())
    );
    assert_eq!(
        reply(zadd("", &[(9.0, "m0")]), full),
        Reply::Int(0),
        "rescoring is fine"
    );
}
