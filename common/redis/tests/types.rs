//! The data-type commands in the table: what each request parses to, Redis 7.4's errors for
//! malformed ones, and how their replies are written in RESP2 and RESP3.
use std::num::NonZeroI64;

use bytes::{Bytes, BytesMut};
use logless_commands::command::{
    Command, CommandError, Expiry, HashCmd, LexBound, ListCmd, ListEnd, Reply, ScanArgs,
    ScoreBound, ZAddFlags, ZRange, ZRangeBy, ZSetCmd,
};
use logless_commands::float::Float;
use logless_redis::resp::{write_value, Protocol, Value};
use logless_redis::table::{find_command, parse_command, reply_to_value, Parsed, ReplyShape};

fn b(s: &str) -> Bytes {
    Bytes::copy_from_slice(s.as_bytes())
}

fn parse(line: &str) -> Parsed {
    let args: Vec<Bytes> = line.split(' ').map(b).collect();
    parse_command(&args)
}

fn single(command: Command) -> Parsed {
    shaped(command, ReplyShape::Plain)
}

fn shaped(command: Command, shape: ReplyShape) -> Parsed {
    Parsed::Single {
        key: b("k"),
        command,
        shape,
    }
}

fn err(text: &str) -> Parsed {
    Parsed::Error(text.to_owned())
}

fn f(x: f64) -> Float {
    Float::new(x).unwrap()
}

fn written(reply: Reply, shape: ReplyShape, protocol: Protocol) -> Vec<u8> {
    let mut out = BytesMut::new();
    write_value(&mut out, &reply_to_value(&reply, shape), protocol);
    out.to_vec()
}

const SYNTAX: &str = "ERR syntax error";
const NOT_INT: &str = "ERR value is not an integer or out of range";
const NOT_FLOAT: &str = "ERR value is not a valid float";
const POSITIVE: &str = "ERR value is out of range, must be positive";

#[test]
fn hashes() {
    assert_eq!(
        parse("HSET k f1 v1 f2 v2"),
        single(Command::Hash(HashCmd::HSet(vec![
            (b("f1"), b("v1")),
            (b("f2"), b("v2"))
        ])))
    );
    assert_eq!(
        parse("hmset k f v"),
        shaped(
            Command::Hash(HashCmd::HSet(vec![(b("f"), b("v"))])),
            ReplyShape::Ok
        )
    );
    assert_eq!(
        parse("HSET k f1 v1 f2"),
        err("ERR wrong number of arguments for 'hset' command")
    );
    assert_eq!(
        parse("HMSET k f"),
        err("ERR wrong number of arguments for 'hmset' command")
    );
    assert_eq!(
        parse("HMGET k a b"),
        single(Command::Hash(HashCmd::HMGet(vec![b("a"), b("b")])))
    );
    assert_eq!(
        parse("HINCRBY k f -3"),
        single(Command::Hash(HashCmd::HIncrBy {
            field: b("f"),
            delta: -3
        }))
    );
    assert_eq!(parse("HINCRBY k f 1.5"), err(NOT_INT));
    assert_eq!(
        parse("HINCRBYFLOAT k f 2.5"),
        single(Command::Hash(HashCmd::HIncrByFloat {
            field: b("f"),
            delta: f(2.5)
        }))
    );
    assert_eq!(parse("HINCRBYFLOAT k f x"), err(NOT_FLOAT));
    assert_eq!(parse("HINCRBYFLOAT k f nan"), err(NOT_FLOAT));
    assert_eq!(
        parse("HINCRBYFLOAT k f inf"),
        err("ERR value is NaN or Infinity")
    );
    assert_eq!(parse("HGETALL k"), single(Command::Hash(HashCmd::HGetAll)));
}

#[test]
fn hrandfield_options() {
    let rand = |count, with_values| {
        single(Command::Hash(HashCmd::HRandField {
            count,
            with_values,
            seed: 0,
        }))
    };
    assert_eq!(parse("HRANDFIELD k"), rand(None, false));
    assert_eq!(parse("HRANDFIELD k -5"), rand(Some(-5), false));
    assert_eq!(parse("HRANDFIELD k 3 withvalues"), rand(Some(3), true));
    assert_eq!(parse("HRANDFIELD k 3 values"), err(SYNTAX));
    assert_eq!(parse("HRANDFIELD k 3 withvalues x"), err(SYNTAX));
    assert_eq!(parse("HRANDFIELD k x"), err(NOT_INT));
    assert_eq!(
        parse("HRANDFIELD k -9223372036854775808"),
        err("ERR value is out of range, must be between -9223372036854775807 and 9223372036854775807")
    );
    assert_eq!(
        parse("HRANDFIELD k -9223372036854775807 WITHVALUES"),
        err("ERR value is out of range")
    );
}

#[test]
fn scans() {
    assert_eq!(
        parse("HSCAN k 0 MATCH f* COUNT 5 NOVALUES"),
        single(Command::Hash(HashCmd::HScan {
            args: ScanArgs {
                cursor: 0,
                pattern: Some(b("f*")),
                count: 5
            },
            no_values: true
        }))
    );
    assert_eq!(
        parse("SSCAN k 18446744073709551615"),
        single(Command::SScan(ScanArgs::from_cursor(u64::MAX)))
    );
    assert_eq!(
        parse("ZSCAN k 7 count 2"),
        single(Command::ZSet(ZSetCmd::Scan(ScanArgs {
            cursor: 7,
            pattern: None,
            count: 2
        })))
    );
    for bad in ["x", "-1", "18446744073709551616", "1.0"] {
        assert_eq!(
            parse(&format!("SSCAN k {bad}")),
            err("ERR invalid cursor"),
            "{bad}"
        );
    }
    assert_eq!(parse("SSCAN k 0 COUNT 0"), err(SYNTAX));
    assert_eq!(parse("SSCAN k 0 COUNT x"), err(NOT_INT));
    assert_eq!(parse("SSCAN k 0 COUNT"), err(SYNTAX));
    assert_eq!(parse("SSCAN k 0 NOVALUES"), err(SYNTAX));
    assert_eq!(parse("ZSCAN k 0 TYPE string"), err(SYNTAX));
}

#[test]
fn lists() {
    assert_eq!(
        parse("RPUSH k a b"),
        single(Command::List(ListCmd::Push {
            end: ListEnd::Right,
            values: vec![b("a"), b("b")],
            only_if_exists: false
        }))
    );
    assert_eq!(
        parse("LPUSHX k a"),
        single(Command::List(ListCmd::Push {
            end: ListEnd::Left,
            values: vec![b("a")],
            only_if_exists: true
        }))
    );
    assert_eq!(
        parse("LPOP k 2"),
        single(Command::List(ListCmd::Pop {
            end: ListEnd::Left,
            count: Some(2)
        }))
    );
    assert_eq!(parse("RPOP k -1"), err(POSITIVE));
    assert_eq!(parse("RPOP k x"), err(POSITIVE));
    assert_eq!(
        parse("RPOP k 1 2"),
        err("ERR wrong number of arguments for 'rpop' command")
    );
    assert_eq!(
        parse("LRANGE k 0 -1"),
        single(Command::List(ListCmd::Range { start: 0, stop: -1 }))
    );
    assert_eq!(parse("LRANGE k 0 x"), err(NOT_INT));
    assert_eq!(
        parse("LINSERT k before p v"),
        single(Command::List(ListCmd::Insert {
            before: true,
            pivot: b("p"),
            value: b("v")
        }))
    );
    assert_eq!(parse("LINSERT k under p v"), err(SYNTAX));
    assert_eq!(
        parse("LMOVE k k LEFT right"),
        single(Command::List(ListCmd::Move {
            from: ListEnd::Left,
            to: ListEnd::Right
        }))
    );
    assert_eq!(
        parse("RPOPLPUSH k k"),
        single(Command::List(ListCmd::Move {
            from: ListEnd::Right,
            to: ListEnd::Left
        }))
    );
    assert_eq!(parse("LMOVE k k UP LEFT"), err(SYNTAX));
    let Parsed::Error(cross) = parse("LMOVE a b LEFT LEFT") else {
        panic!("a move between keys is refused");
    };
    assert!(cross.contains("not atomic across keys in the per-key engine"));
}

#[test]
fn lpos_options() {
    let pos = |rank: i64, count, max_len| {
        single(Command::List(ListCmd::Pos {
            value: b("x"),
            rank: NonZeroI64::new(rank).unwrap(),
            count,
            max_len,
        }))
    };
    assert_eq!(parse("LPOS k x"), pos(1, None, 0));
    assert_eq!(
        parse("LPOS k x RANK -2 COUNT 0 MAXLEN 10"),
        pos(-2, Some(0), 10)
    );
    assert_eq!(
        parse("LPOS k x RANK 0"),
        err("ERR RANK can't be zero: use 1 to start from the first match, 2 from the second ... or use negative to start from the end of the list")
    );
    assert_eq!(
        parse("LPOS k x COUNT -1"),
        err("ERR COUNT can't be negative")
    );
    assert_eq!(
        parse("LPOS k x MAXLEN -1"),
        err("ERR MAXLEN can't be negative")
    );
    assert_eq!(parse("LPOS k x RANK"), err(SYNTAX));
    assert_eq!(parse("LPOS k x FIRST 1"), err(SYNTAX));
}

#[test]
fn zadd_options_in_redis_order() {
    assert_eq!(
        parse("ZADD k GT CH 1 a 2.5 b"),
        single(Command::ZSet(ZSetCmd::Add {
            members: vec![(f(1.0), b("a")), (f(2.5), b("b"))],
            flags: ZAddFlags {
                gt: true,
                ch: true,
                ..ZAddFlags::default()
            }
        }))
    );
    assert_eq!(parse("ZADD k CH NX"), err(SYNTAX));
    assert_eq!(parse("ZADD k NX 1 a 2"), err(SYNTAX));
    assert_eq!(
        parse("ZADD k NX XX 1 a"),
        err("ERR XX and NX options at the same time are not compatible")
    );
    assert_eq!(
        parse("ZADD k GT LT 1 a"),
        err("ERR GT, LT, and/or NX options at the same time are not compatible")
    );
    assert_eq!(
        parse("ZADD k INCR 1 a 2 b"),
        err("ERR INCR option supports a single increment-element pair")
    );
    assert_eq!(parse("ZADD k 1 a x b"), err(NOT_FLOAT));
    assert_eq!(parse("ZADD k nan a"), err(NOT_FLOAT));
    assert_eq!(
        parse("ZINCRBY k -inf m"),
        single(Command::ZSet(ZSetCmd::IncrBy {
            delta: f(f64::NEG_INFINITY),
            member: b("m")
        }))
    );
}

#[test]
fn zrange_forms() {
    let range = |by, rev, limit, with_scores| {
        single(Command::ZSet(ZSetCmd::Range(ZRange {
            by,
            rev,
            limit,
            with_scores,
        })))
    };
    let score = |s: f64, exclusive| ScoreBound {
        score: f(s),
        exclusive,
    };
    assert_eq!(
        parse("ZRANGE k 0 -1 WITHSCORES"),
        range(ZRangeBy::Index { start: 0, stop: -1 }, false, None, true)
    );
    // REV by rank keeps the indexes; by score it takes `max min`.
    assert_eq!(
        parse("ZRANGE k 0 2 REV"),
        range(ZRangeBy::Index { start: 0, stop: 2 }, true, None, false)
    );
    assert_eq!(
        parse("ZRANGE k (5 1 BYSCORE REV LIMIT 1 2"),
        range(
            ZRangeBy::Score {
                min: score(1.0, false),
                max: score(5.0, true)
            },
            true,
            Some((1, 2)),
            false
        )
    );
    assert_eq!(
        parse("ZREVRANGEBYSCORE k +inf -inf WITHSCORES"),
        range(
            ZRangeBy::Score {
                min: score(f64::NEG_INFINITY, false),
                max: score(f64::INFINITY, false)
            },
            true,
            None,
            true
        )
    );
    assert_eq!(
        parse("ZRANGE k [a + BYLEX"),
        range(
            ZRangeBy::Lex {
                min: LexBound::Inclusive(b("a")),
                max: LexBound::Max
            },
            false,
            None,
            false
        )
    );
    assert_eq!(
        parse("ZREVRANGE k 0 1"),
        range(ZRangeBy::Index { start: 0, stop: 1 }, true, None, false)
    );
    // Redis cannot tell LIMIT 0 -1 from no LIMIT, so it passes by rank.
    assert_eq!(
        parse("ZRANGE k 0 1 LIMIT 0 -1"),
        range(ZRangeBy::Index { start: 0, stop: 1 }, false, None, false)
    );
    assert_eq!(
        parse("ZRANGE k 0 1 LIMIT 0 2"),
        err(
            "ERR syntax error, LIMIT is only supported in combination with either BYSCORE or BYLEX"
        )
    );
    assert_eq!(
        parse("ZRANGE k - + BYLEX WITHSCORES"),
        err("ERR syntax error, WITHSCORES not supported in combination with BYLEX")
    );
    assert_eq!(parse("ZRANGE k 0 1 BYSCORE BYLEX"), err(SYNTAX));
    assert_eq!(parse("ZRANGE k 0 1 REV REV"), err(SYNTAX));
    assert_eq!(parse("ZREVRANGE k 0 1 REV"), err(SYNTAX));
    assert_eq!(parse("ZRANGEBYSCORE k 0 1 BYSCORE"), err(SYNTAX));
    assert_eq!(parse("ZRANGE k 0 1 LIMIT 0"), err(SYNTAX));
    assert_eq!(parse("ZRANGE k 0 1 BYSCORE LIMIT x 1"), err(NOT_INT));
    assert_eq!(parse("ZRANGE k a 1"), err(NOT_INT));
    assert_eq!(
        parse("ZRANGE k a 1 BYSCORE"),
        err("ERR min or max is not a float")
    );
    assert_eq!(
        parse("ZRANGE k a b BYLEX"),
        err("ERR min or max not valid string range item")
    );
    assert_eq!(parse("ZCOUNT k (1 x"), err("ERR min or max is not a float"));
}

#[test]
fn zrank_and_zpop() {
    assert_eq!(
        parse("ZREVRANK k m withscore"),
        single(Command::ZSet(ZSetCmd::Rank {
            member: b("m"),
            rev: true,
            with_score: true
        }))
    );
    assert_eq!(parse("ZRANK k m scores"), err(SYNTAX));
    assert_eq!(
        parse("ZRANK k m WITHSCORE x"),
        err("ERR wrong number of arguments for 'zrank' command")
    );
    assert_eq!(
        parse("ZPOPMAX k 3"),
        single(Command::ZSet(ZSetCmd::Pop {
            max: true,
            count: Some(3)
        }))
    );
    assert_eq!(parse("ZPOPMIN k -1"), err(POSITIVE));
}

#[test]
fn strings_and_sets() {
    assert_eq!(
        parse("INCRBYFLOAT k 0.1"),
        single(Command::IncrByFloat(f(0.1)))
    );
    assert_eq!(parse("INCRBYFLOAT k 1e"), err(NOT_FLOAT));
    assert_eq!(parse("GETEX k"), single(Command::GetEx(Expiry::Keep)));
    assert_eq!(
        parse("GETEX k persist"),
        single(Command::GetEx(Expiry::Clear))
    );
    assert_eq!(
        parse("GETEX k EX 10"),
        single(Command::GetEx(Expiry::AfterMs(10_000)))
    );
    assert_eq!(
        parse("GETEX k PXAT 5"),
        single(Command::GetEx(Expiry::AtMs(5)))
    );
    assert_eq!(parse("GETEX k EX 1 PERSIST"), err(SYNTAX));
    assert_eq!(parse("GETEX k EX 1 PX 1"), err(SYNTAX));
    assert_eq!(parse("GETEX k EX"), err(SYNTAX));
    assert_eq!(parse("GETEX k EX x"), err(NOT_INT));
    assert_eq!(
        parse("GETEX k EX -1"),
        err("ERR invalid expire time in 'getex' command")
    );
    assert_eq!(
        parse("GETRANGE k 0 -1"),
        single(Command::GetRange { start: 0, end: -1 })
    );
    assert_eq!(
        parse("SETRANGE k 3 ab"),
        single(Command::SetRange {
            offset: 3,
            value: b("ab")
        })
    );
    assert_eq!(parse("SETRANGE k -1 ab"), err("ERR offset is out of range"));
    assert_eq!(
        parse("SPOP k 2"),
        shaped(
            Command::SPop {
                count: Some(2),
                seed: 0
            },
            ReplyShape::Set
        )
    );
    assert_eq!(
        parse("SPOP k"),
        single(Command::SPop {
            count: None,
            seed: 0
        })
    );
    assert_eq!(parse("SPOP k -1"), err(POSITIVE));
    assert_eq!(parse("SPOP k 1 2"), err(SYNTAX));
    assert_eq!(
        parse("SRANDMEMBER k -3"),
        single(Command::SRandMember {
            count: Some(-3),
            seed: 0
        })
    );
    assert_eq!(parse("SRANDMEMBER k 1 2"), err(SYNTAX));
    assert_eq!(
        parse("SMISMEMBER k a b"),
        single(Command::SMIsMember(vec![b("a"), b("b")]))
    );
}

#[test]
fn the_new_commands_are_in_the_table_with_redis_arity() {
    for (name, arity) in [
        ("hset", -4),
        ("hmset", -4),
        ("hgetall", 2),
        ("hrandfield", -2),
        ("hscan", -3),
        ("lpush", -3),
        ("lpop", -2),
        ("lpos", -3),
        ("lmove", 5),
        ("rpoplpush", 3),
        ("zadd", -4),
        ("zrange", -4),
        ("zrank", -3),
        ("zpopmin", -2),
        ("incrbyfloat", 3),
        ("getex", -2),
        ("spop", -2),
        ("srandmember", -2),
        ("smismember", -3),
        ("sscan", -3),
        ("multi", 1),
        ("exec", 1),
    ] {
        let spec = find_command(name.as_bytes()).unwrap_or_else(|| panic!("{name} is missing"));
        assert_eq!(spec.arity, arity, "{name}");
    }
    assert_eq!(find_command(b"lmove").map(|s| s.last_key), Some(2));
}

#[test]
fn replies_in_resp2_and_resp3() {
    let plain = ReplyShape::Plain;
    let pairs = Reply::Pairs(vec![
        (Reply::Bulk(b("a")), Reply::Double(f(1.0))),
        (Reply::Bulk(b("b")), Reply::Double(f(2.5))),
    ]);
    assert_eq!(
        written(pairs.clone(), plain, Protocol::Resp2),
        b"*4\r\n$1\r\na\r\n$1\r\n1\r\n$1\r\nb\r\n$3\r\n2.5\r\n"
    );
    assert_eq!(
        written(pairs, plain, Protocol::Resp3),
        b"*2\r\n*2\r\n$1\r\na\r\n,1\r\n*2\r\n$1\r\nb\r\n,2.5\r\n"
    );
    let map = Reply::Map(vec![(Reply::Bulk(b("f")), Reply::Bulk(b("v")))]);
    assert_eq!(
        written(map.clone(), plain, Protocol::Resp2),
        b"*2\r\n$1\r\nf\r\n$1\r\nv\r\n"
    );
    assert_eq!(
        written(map, plain, Protocol::Resp3),
        b"%1\r\n$1\r\nf\r\n$1\r\nv\r\n"
    );
    assert_eq!(written(Reply::NilArray, plain, Protocol::Resp2), b"*-1\r\n");
    assert_eq!(written(Reply::NilArray, plain, Protocol::Resp3), b"_\r\n");
    assert_eq!(
        written(Reply::Double(f(1e17)), plain, Protocol::Resp2),
        b"$18\r\n100000000000000000\r\n"
    );
    // SPOP with a count answers a set in RESP3.
    let popped = Reply::Array(vec![b("x")]);
    assert_eq!(
        written(popped.clone(), ReplyShape::Set, Protocol::Resp3),
        b"~1\r\n$1\r\nx\r\n"
    );
    assert_eq!(
        written(popped, ReplyShape::Set, Protocol::Resp2),
        b"*1\r\n$1\r\nx\r\n"
    );
    // HMSET shows HSET's count as OK, and its errors as they are.
    assert_eq!(
        reply_to_value(&Reply::Int(2), ReplyShape::Ok),
        Value::Simple("OK".into())
    );
    assert_eq!(
        reply_to_value(&Reply::Error(CommandError::WrongType), ReplyShape::Ok),
        Value::Error(CommandError::WrongType.to_string())
    );
    // HMGET: values and nils.
    assert_eq!(
        written(
            Reply::Items(vec![Reply::Bulk(b("v")), Reply::Nil]),
            plain,
            Protocol::Resp3
        ),
        b"*2\r\n$1\r\nv\r\n_\r\n"
    );
}
