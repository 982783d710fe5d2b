//! The Redis session without a socket: what each request becomes, the connection state it
//! changes, and the replies built from engine answers, with their exact texts.
use bytes::{Bytes, BytesMut};
use logless_commands::command::{
    Command, CommandError, ExpireArgs, ExpireFlags, ExpireKind, Reply,
};
use logless_commands::float::Float;
use logless_commands::KEY_BYTES_MAX;
use logless_redis::resp::{parse_request, write_value, ParseLimits, Protocol, Value};
use logless_redis::session::{Failure, NodeQuery, Queue, Session, Step, Transaction};
use logless_redis::table::{Combine, ReplyShape, TRANSACTION_COMMANDS_MAX};

mod common;
use common::{args, bulk, error, handle, reply, simple};

/// The bytes a value is written as in `protocol`.
fn written(value: &Value, protocol: Protocol) -> Vec<u8> {
    let mut out = BytesMut::new();
    write_value(&mut out, value, protocol);
    out.to_vec()
}

#[test]
fn a_register_command_is_one_submission_with_its_shape() {
    let mut session = Session::new(7);
    assert_eq!(
        handle(&mut session, &["INCR", "visits"]),
        Step::One {
            key: Bytes::from_static(b"visits"),
            command: Command::IncrBy(1),
            shape: ReplyShape::Plain,
        }
    );
    assert!(matches!(
        handle(&mut session, &["smembers", "s"]),
        Step::One {
            shape: ReplyShape::Set,
            ..
        }
    ));
}

#[test]
fn a_command_on_several_keys_is_one_submission_per_key() {
    let mut session = Session::new(1);
    assert_eq!(
        handle(&mut session, &["DEL", "a", "b", "a"]),
        Step::Many {
            parts: vec![
                (Bytes::from_static(b"a"), Command::Del),
                (Bytes::from_static(b"b"), Command::Del),
                (Bytes::from_static(b"a"), Command::Del),
            ],
            combine: Combine::Sum,
        }
    );
}

#[test]
fn a_key_over_the_limit_is_refused_before_anything_is_submitted() {
    let mut session = Session::new(1);
    let long = "k".repeat(KEY_BYTES_MAX + 1);
    let expected = error(&format!(
        "ERR key of {} bytes exceeds the limit of {KEY_BYTES_MAX}",
        KEY_BYTES_MAX + 1
    ));
    assert_eq!(reply(&mut session, &["GET", &long]), expected);
    assert_eq!(reply(&mut session, &["MGET", "a", &long]), expected);
    let at_limit = "k".repeat(KEY_BYTES_MAX);
    assert!(matches!(
        handle(&mut session, &["GET", &at_limit]),
        Step::One { .. }
    ));
}

#[test]
fn hello_3_switches_the_protocol_and_answers_in_the_new_one() {
    let mut session = Session::new(42);
    assert_eq!(session.protocol(), Protocol::Resp2);
    let hello = reply(&mut session, &["HELLO", "3", "SETNAME", "app"]);
    assert_eq!(session.protocol(), Protocol::Resp3);
    let Value::Map(fields) = &hello else {
        panic!("HELLO answers a map: {hello:?}");
    };
    assert!(fields.contains(&(bulk("proto"), Value::Int(3))));
    assert!(fields.contains(&(bulk("id"), Value::Int(42))));
    assert!(fields.contains(&(bulk("version"), bulk("7.4.0"))));
    assert_eq!(session.name(), Some(&Bytes::from_static(b"app")));
    // In RESP3 a map is written as a map, in RESP2 as a flat array.
    assert_eq!(written(&hello, Protocol::Resp3)[0], b'%');
    assert_eq!(written(&hello, Protocol::Resp2)[0], b'*');
    reply(&mut session, &["HELLO", "2"]);
    assert_eq!(session.protocol(), Protocol::Resp2);
}

#[test]
fn hello_with_another_user_is_refused_and_changes_nothing() {
    let mut session = Session::new(1);
    assert_eq!(
        reply(&mut session, &["HELLO", "3", "AUTH", "alice", "pw"]),
        error("WRONGPASS invalid username-password pair or user is disabled.")
    );
    assert_eq!(session.protocol(), Protocol::Resp2);
    assert!(matches!(
        reply(&mut session, &["HELLO", "3", "AUTH", "default", "any"]),
        Value::Map(_)
    ));
}

#[test]
fn client_commands_keep_the_connection_state() {
    let mut session = Session::new(9);
    assert_eq!(reply(&mut session, &["CLIENT", "GETNAME"]), Value::Nil);
    assert_eq!(
        reply(&mut session, &["CLIENT", "SETNAME", "worker-1"]),
        simple("OK")
    );
    assert_eq!(
        reply(&mut session, &["CLIENT", "GETNAME"]),
        bulk("worker-1")
    );
    assert_eq!(reply(&mut session, &["CLIENT", "ID"]), Value::Int(9));
    // CLIENT INFO is the node's: CLIENT LIST's line of this connection.
    assert!(matches!(
        handle(&mut session, &["CLIENT", "INFO"]),
        Step::Node(NodeQuery::Admin(
            logless_redis::table::admin::Admin::ClientInfo
        ))
    ));
    // An empty name clears it.
    reply(&mut session, &["CLIENT", "SETNAME", ""]);
    assert_eq!(reply(&mut session, &["CLIENT", "GETNAME"]), Value::Nil);
    assert_eq!(
        reply(&mut session, &["CLIENT", "SETNAME", "a b"]),
        error("ERR Client names cannot contain spaces, newlines or special characters.")
    );
}

#[test]
fn reset_returns_the_connection_to_its_first_state() {
    let mut session = Session::new(3);
    reply(&mut session, &["HELLO", "3", "SETNAME", "x"]);
    assert_eq!(reply(&mut session, &["RESET"]), simple("RESET"));
    assert_eq!(session.protocol(), Protocol::Resp2);
    assert_eq!(session.name(), None);
}

#[test]
fn quit_answers_ok_and_closes() {
    let mut session = Session::new(1);
    assert!(!session.is_closing());
    assert_eq!(reply(&mut session, &["QUIT"]), simple("OK"));
    assert!(session.is_closing());
}

#[test]
fn ping_echo_select_and_auth_are_answered_at_once() {
    let mut session = Session::new(1);
    assert_eq!(reply(&mut session, &["PING"]), simple("PONG"));
    assert_eq!(reply(&mut session, &["PING", "hi"]), bulk("hi"));
    assert_eq!(reply(&mut session, &["ECHO", "x"]), bulk("x"));
    assert_eq!(reply(&mut session, &["SELECT", "0"]), simple("OK"));
    assert_eq!(
        reply(&mut session, &["SELECT", "1"]),
        error("ERR DB index is out of range (logless has one keyspace, database 0)")
    );
    assert_eq!(reply(&mut session, &["AUTH", "default", "x"]), simple("OK"));
}

#[test]
fn server_commands_go_to_the_node() {
    let mut session = Session::new(1);
    assert_eq!(
        handle(&mut session, &["INFO", "clients"]),
        Step::Node(NodeQuery::Info(args(&["clients"])))
    );
    assert_eq!(
        handle(&mut session, &["DBSIZE"]),
        Step::Node(NodeQuery::DbSize)
    );
    assert_eq!(
        handle(&mut session, &["CONFIG", "GET", "maxclients"]),
        Step::Node(NodeQuery::ConfigGet(args(&["maxclients"])))
    );
    assert_eq!(
        handle(&mut session, &["CONFIG", "SET", "a", "b"]),
        Step::Node(NodeQuery::ConfigSet(vec![(
            Bytes::from_static(b"a"),
            Bytes::from_static(b"b")
        )]))
    );
}

fn key(text: &str) -> Bytes {
    Bytes::copy_from_slice(text.as_bytes())
}

fn queued() -> Value {
    simple("QUEUED")
}

fn in_queue(session: &Session) -> Option<&Queue> {
    match session.transaction() {
        Transaction::None => None,
        Transaction::Queued(queue) => Some(queue),
    }
}

const EXECABORT: &str = "EXECABORT Transaction discarded because of previous errors.";

/// redis-py's default `pipeline()`: MULTI, the commands, EXEC — here the rate limiter.
#[test]
fn redis_py_pipeline_on_one_key_is_one_transaction_command() {
    let mut session = Session::new(1);
    assert_eq!(reply(&mut session, &["MULTI"]), simple("OK"));
    assert_eq!(reply(&mut session, &["INCR", "hits"]), queued());
    assert_eq!(reply(&mut session, &["EXPIRE", "hits", "10"]), queued());
    assert_eq!(in_queue(&session).map(Queue::len), Some(2));
    let Step::One {
        key: submitted,
        command,
        shape,
    } = handle(&mut session, &["EXEC"])
    else {
        panic!("EXEC on one key is one submission");
    };
    assert_eq!(submitted, key("hits"));
    assert_eq!(
        command,
        Command::Transaction(vec![
            Command::IncrBy(1),
            Command::Expire(ExpireArgs {
                kind: ExpireKind::Expire,
                time: 10,
                flags: ExpireFlags::default(),
            }),
        ])
    );
    assert_eq!(session.transaction(), &Transaction::None);
    // The reply is the array of both replies.
    let answer = Ok(Reply::Items(vec![Reply::Int(1), Reply::Int(1)]));
    assert_eq!(
        Session::reply(shape, &answer),
        Value::Array(vec![Value::Int(1), Value::Int(1)])
    );
    // The connection goes on as before.
    assert!(matches!(
        handle(&mut session, &["GET", "hits"]),
        Step::One { .. }
    ));
}

#[test]
fn each_reply_of_a_transaction_keeps_its_commands_shape() {
    let mut session = Session::new(1);
    reply(&mut session, &["MULTI"]);
    for command in [
        &["SETNX", "k", "v"][..],
        &["SET", "k", "v", "NX"],
        &["SADD", "k", "a"],
        &["SMEMBERS", "k"],
        &["HMSET", "k", "f", "v"],
        &["SETEX", "k", "10", "v"],
        &["ZSCORE", "k", "m"],
    ] {
        assert_eq!(reply(&mut session, command), queued(), "{command:?}");
    }
    let Step::One { shape, .. } = handle(&mut session, &["EXEC"]) else {
        panic!("EXEC on one key is one submission");
    };
    let answer = Ok(Reply::Items(vec![
        Reply::Ok,
        Reply::Nil,
        Reply::Int(1),
        Reply::Array(vec![key("a")]),
        Reply::Int(1),
        Reply::Error(CommandError::InvalidExpireTime),
        Reply::Double(Float::new(1.5).unwrap()),
    ]));
    let value = Session::reply(shape, &answer);
    assert_eq!(
        value,
        Value::Array(vec![
            Value::Int(1),
            Value::Nil,
            Value::Int(1),
            Value::Set(vec![bulk("a")]),
            simple("OK"),
            error("ERR invalid expire time in 'setex' command"),
            Value::Double(1.5),
        ])
    );
    assert_eq!(
        written(&value, Protocol::Resp3),
        b"*7\r\n:1\r\n_\r\n:1\r\n~1\r\n$1\r\na\r\n+OK\r\n\
          -ERR invalid expire time in 'setex' command\r\n,1.5\r\n"
    );
}

#[test]
fn exec_of_commands_on_several_keys_runs_nothing_and_says_why() {
    let mut session = Session::new(1);
    reply(&mut session, &["MULTI"]);
    assert_eq!(reply(&mut session, &["INCR", "a"]), queued());
    assert_eq!(reply(&mut session, &["INCR", "b"]), queued());
    let Value::Error(text) = reply(&mut session, &["EXEC"]) else {
        panic!("EXEC on several keys is refused");
    };
    assert!(text
        .starts_with("EXECABORT Transaction discarded: its commands name several keys ('a', 'b'"));
    assert!(text.contains("not atomic across keys in the per-key engine"));
    assert!(text.contains("send each key's commands in a MULTI of their own"));
    assert_eq!(session.transaction(), &Transaction::None);
    // A command on several keys is refused when queued and aborts the transaction.
    reply(&mut session, &["MULTI"]);
    assert_eq!(
        reply(&mut session, &["MGET", "a", "b"]),
        error(
            "ERR 'mget' on several keys cannot be queued: a transaction is not atomic across \
             keys in the per-key engine"
        )
    );
    assert_eq!(reply(&mut session, &["EXEC"]), error(EXECABORT));
}

#[test]
fn a_command_that_does_not_parse_aborts_the_transaction() {
    let mut session = Session::new(1);
    reply(&mut session, &["MULTI"]);
    assert_eq!(reply(&mut session, &["SET", "k", "v"]), queued());
    assert_eq!(
        reply(&mut session, &["SET", "k"]),
        error("ERR wrong number of arguments for 'set' command")
    );
    assert_eq!(
        reply(&mut session, &["ZADD", "k", "NX", "XX", "1", "m"]),
        error("ERR XX and NX options at the same time are not compatible")
    );
    assert!(in_queue(&session).is_some_and(Queue::is_aborted));
    // Later commands are still checked and queued, as Redis does.
    assert_eq!(reply(&mut session, &["GET", "k"]), queued());
    assert_eq!(reply(&mut session, &["EXEC"]), error(EXECABORT));
    assert_eq!(session.transaction(), &Transaction::None);
}

#[test]
fn connection_commands_are_not_queued() {
    let mut session = Session::new(1);
    reply(&mut session, &["MULTI"]);
    assert_eq!(
        reply(&mut session, &["PING"]),
        error(
            "ERR logless does not queue 'ping' in a transaction: a transaction is one register \
             command, so only commands on its key can be queued"
        )
    );
    assert_eq!(reply(&mut session, &["EXEC"]), error(EXECABORT));
}

#[test]
fn multi_exec_and_discard_in_redis_words() {
    let mut session = Session::new(1);
    assert_eq!(
        reply(&mut session, &["EXEC"]),
        error("ERR EXEC without MULTI")
    );
    assert_eq!(
        reply(&mut session, &["DISCARD"]),
        error("ERR DISCARD without MULTI")
    );
    assert_eq!(reply(&mut session, &["multi"]), simple("OK"));
    // A nested MULTI is an error that does not abort the transaction.
    assert_eq!(
        reply(&mut session, &["MULTI"]),
        error("ERR MULTI calls can not be nested")
    );
    assert!(in_queue(&session).is_some_and(|q| q.is_empty() && !q.is_aborted()));
    // EXEC of nothing is an empty array.
    assert_eq!(reply(&mut session, &["EXEC"]), Value::Array(Vec::new()));
    reply(&mut session, &["MULTI"]);
    reply(&mut session, &["INCR", "a"]);
    assert_eq!(reply(&mut session, &["DISCARD"]), simple("OK"));
    assert_eq!(session.transaction(), &Transaction::None);
    assert_eq!(
        handle(&mut session, &["INCR", "a"]),
        Step::One {
            key: key("a"),
            command: Command::IncrBy(1),
            shape: ReplyShape::Plain,
        }
    );
    // Nothing is ever watched.
    assert_eq!(reply(&mut session, &["UNWATCH"]), simple("OK"));
    let Value::Error(watch) = reply(&mut session, &["WATCH", "a"]) else {
        panic!("WATCH is refused");
    };
    assert!(watch.starts_with("ERR logless does not implement 'watch'"));
}

#[test]
fn reset_and_quit_leave_a_transaction() {
    let mut session = Session::new(1);
    reply(&mut session, &["MULTI"]);
    reply(&mut session, &["INCR", "a"]);
    assert_eq!(reply(&mut session, &["RESET"]), simple("RESET"));
    assert_eq!(session.transaction(), &Transaction::None);
    reply(&mut session, &["MULTI"]);
    assert_eq!(reply(&mut session, &["QUIT"]), simple("OK"));
    assert!(session.is_closing());
}

#[test]
fn a_transaction_is_bounded() {
    let mut session = Session::new(1);
    reply(&mut session, &["MULTI"]);
    for _ in 0..TRANSACTION_COMMANDS_MAX {
        assert_eq!(reply(&mut session, &["INCR", "a"]), queued());
    }
    assert_eq!(
        reply(&mut session, &["INCR", "a"]),
        error(&format!(
            "ERR a transaction may queue at most {TRANSACTION_COMMANDS_MAX} commands: it travels \
             in every vote as one register command"
        ))
    );
    assert_eq!(reply(&mut session, &["EXEC"]), error(EXECABORT));
}

#[test]
fn random_commands_get_a_seed_per_request() {
    let seed_of = |step: Step| match step {
        Step::One {
            command: Command::SPop { seed, .. },
            ..
        } => seed,
        other => panic!("not an SPOP: {other:?}"),
    };
    let mut one = Session::new(1);
    let first = seed_of(handle(&mut one, &["SPOP", "s"]));
    let second = seed_of(handle(&mut one, &["SPOP", "s"]));
    assert_ne!(first, second, "each request draws anew");
    // The same connection id and request sequence give the same seeds.
    let mut again = Session::new(1);
    assert_eq!(seed_of(handle(&mut again, &["SPOP", "s"])), first);
    let mut other = Session::new(2);
    assert_ne!(seed_of(handle(&mut other, &["SPOP", "s"])), first);
    // A transaction is seeded at EXEC, each command from its place.
    reply(&mut one, &["MULTI"]);
    reply(&mut one, &["SRANDMEMBER", "s"]);
    reply(&mut one, &["SRANDMEMBER", "s"]);
    let Step::One {
        command: Command::Transaction(commands),
        ..
    } = handle(&mut one, &["EXEC"])
    else {
        panic!("EXEC on one key is one submission");
    };
    let seeds: Vec<u64> = commands
        .iter()
        .map(|c| match c {
            Command::SRandMember { seed, .. } => *seed,
            other => panic!("not an SRANDMEMBER: {other:?}"),
        })
        .collect();
    assert!(seeds[0] != 0 && seeds[1] != 0 && seeds[0] != seeds[1]);
}

#[test]
fn an_argument_over_the_value_limit_is_answered_and_the_session_goes_on() {
    let mut session = Session::new(1).with_value_bytes_max(8);
    let too_large = error("ERR value exceeds the configured size limit");
    assert_eq!(reply(&mut session, &["SET", "k", "123456789"]), too_large);
    assert_eq!(
        reply(&mut session, &["HSET", "h", "123456789", "v"]),
        too_large
    );
    assert!(matches!(
        handle(&mut session, &["SET", "k", "12345678"]),
        Step::One { .. }
    ));
    // In a transaction it aborts it.
    reply(&mut session, &["MULTI"]);
    assert_eq!(reply(&mut session, &["SET", "k", "123456789"]), too_large);
    assert_eq!(reply(&mut session, &["EXEC"]), error(EXECABORT));
}

#[test]
fn failures_say_whether_a_retry_is_safe() {
    assert_eq!(
        Session::reply(ReplyShape::Plain, &Err(Failure::NotApplied)),
        error("TRYAGAIN not applied; safe to retry")
    );
    assert_eq!(
        Session::reply(ReplyShape::Plain, &Err(Failure::OutcomeUnknown)),
        error(
            "UNCERTAIN timed out after the command was proposed: it may or may not have been \
             applied"
        )
    );
    assert_eq!(
        Session::reply(ReplyShape::Plain, &Err(Failure::Overloaded)),
        error("TRYAGAIN too many commands wait on this key; not applied")
    );
    assert_eq!(
        Session::reply(ReplyShape::Plain, &Err(Failure::DiskFull)),
        error(
            "MISCONF disk full: no space left on this replica's disk for a new key; not \
             applied (reads and writes of existing keys go on)"
        )
    );
}

#[test]
fn replies_are_shown_as_their_command_asks() {
    assert_eq!(
        Session::reply(ReplyShape::SetNx, &Ok(Reply::Ok)),
        Value::Int(1)
    );
    assert_eq!(
        Session::reply(ReplyShape::SetNx, &Ok(Reply::Nil)),
        Value::Int(0)
    );
    assert_eq!(
        Session::reply(ReplyShape::Plain, &Ok(Reply::Ok)),
        simple("OK")
    );
    assert_eq!(
        Session::reply(
            ReplyShape::ExpireErrorsOf("setex"),
            &Ok(Reply::Error(CommandError::InvalidExpireTime))
        ),
        error("ERR invalid expire time in 'setex' command")
    );
}

#[test]
fn combined_replies_report_the_worst_failure() {
    let sum = |answers: &[Result<Reply, Failure>]| Session::combine(Combine::Sum, answers.to_vec());
    assert_eq!(sum(&[Ok(Reply::Int(1)), Ok(Reply::Int(1))]), Value::Int(2));
    // Nothing applied: the failure as it is.
    assert_eq!(
        sum(&[Err(Failure::NotApplied), Err(Failure::NotApplied)]),
        error("TRYAGAIN not applied; safe to retry")
    );
    // A part applied and another did not: the whole may have been partly applied.
    assert_eq!(
        sum(&[Ok(Reply::Int(1)), Err(Failure::NotApplied)]),
        Session::reply(ReplyShape::Plain, &Err(Failure::OutcomeUnknown))
    );
    assert_eq!(
        sum(&[Err(Failure::NotApplied), Err(Failure::OutcomeUnknown)]),
        Session::reply(ReplyShape::Plain, &Err(Failure::OutcomeUnknown))
    );
    assert_eq!(
        Session::combine(
            Combine::Array,
            vec![Ok(Reply::Bulk(Bytes::from_static(b"v"))), Ok(Reply::Nil)]
        ),
        Value::Array(vec![bulk("v"), Value::Nil])
    );
    // MGET with a failed part reports the failure, not a partial array.
    assert_eq!(
        Session::combine(
            Combine::Array,
            vec![Ok(Reply::Nil), Err(Failure::NotApplied)]
        ),
        error("TRYAGAIN not applied; safe to retry")
    );
}

#[test]
fn a_protocol_error_is_answered_in_redis_words() {
    let mut buffer = BytesMut::from(&b"*1\r\n$x\r\n"[..]);
    let e = parse_request(&mut buffer, &ParseLimits::default()).unwrap_err();
    assert_eq!(
        Session::protocol_error(&e),
        error("ERR Protocol error: invalid bulk length")
    );
}

#[test]
fn under_one_log_order_commands_and_transactions_over_several_keys_are_one_step() {
    use logless_redis::table::cross_key::{CrossKey, Queued};
    let mut session = Session::new(1).with_total_order(true);
    assert_eq!(
        handle(&mut session, &["MSET", "a", "1", "b", "2"]),
        Step::Cross {
            op: CrossKey::MSet(vec![
                (Bytes::from_static(b"a"), Bytes::from_static(b"1")),
                (Bytes::from_static(b"b"), Bytes::from_static(b"2")),
            ]),
            shape: ReplyShape::Plain,
        }
    );
    assert_eq!(
        handle(&mut session, &["rename", "a"]),
        Step::Reply(error("ERR wrong number of arguments for 'rename' command"))
    );
    assert_eq!(handle(&mut session, &["MULTI"]), Step::Reply(simple("OK")));
    assert_eq!(
        handle(&mut session, &["DECRBY", "a", "5"]),
        Step::Reply(simple("QUEUED"))
    );
    assert_eq!(
        handle(&mut session, &["INCRBY", "b", "5"]),
        Step::Reply(simple("QUEUED"))
    );
    let Step::Cross {
        op: CrossKey::Transaction(parts),
        shape: ReplyShape::Exec(shapes),
    } = handle(&mut session, &["EXEC"])
    else {
        panic!("EXEC over two keys is one step");
    };
    assert_eq!(
        parts,
        [
            Queued::One(Bytes::from_static(b"a"), Command::IncrBy(-5)),
            Queued::One(Bytes::from_static(b"b"), Command::IncrBy(5)),
        ]
    );
    assert_eq!(shapes.len(), 2);
}

#[test]
fn under_one_log_order_a_transaction_queues_commands_over_several_keys() {
    use logless_redis::table::cross_key::{CrossKey, Queued};
    use logless_redis::table::Combine;
    let mut session = Session::new(1).with_total_order(true);
    let key = |k: &'static str| Bytes::from_static(k.as_bytes());
    assert_eq!(handle(&mut session, &["MULTI"]), Step::Reply(simple("OK")));
    for request in [
        &["MSET", "a", "1", "b", "2"][..],
        &["DEL", "a", "c"],
        &["MGET", "a", "a"],
        &["EXISTS", "b", "c"],
    ] {
        assert_eq!(
            handle(&mut session, request),
            Step::Reply(simple("QUEUED")),
            "{request:?}"
        );
    }
    let Step::Cross {
        op: CrossKey::Transaction(items),
        shape: ReplyShape::Exec(shapes),
    } = handle(&mut session, &["EXEC"])
    else {
        panic!("EXEC is one step");
    };
    assert_eq!(
        items,
        [
            Queued::Cross(CrossKey::MSet(vec![
                (key("a"), key("1")),
                (key("b"), key("2"))
            ])),
            Queued::Many(
                vec![(key("a"), Command::Del), (key("c"), Command::Del)],
                Combine::Sum
            ),
            Queued::Many(
                vec![(key("a"), Command::Get), (key("a"), Command::Get)],
                Combine::Array
            ),
            Queued::Many(
                vec![(key("b"), Command::Exists), (key("c"), Command::Exists)],
                Combine::Sum
            ),
        ]
    );
    assert_eq!(shapes.len(), 4);

    // Even on one key, a command over several keys makes the transaction one log step.
    assert_eq!(handle(&mut session, &["MULTI"]), Step::Reply(simple("OK")));
    handle(&mut session, &["MGET", "a", "a"]);
    assert!(matches!(
        handle(&mut session, &["EXEC"]),
        Step::Cross {
            op: CrossKey::Transaction(_),
            ..
        }
    ));

    // A queued command over several keys that does not parse discards the transaction.
    assert_eq!(handle(&mut session, &["MULTI"]), Step::Reply(simple("OK")));
    let Step::Reply(Value::Error(text)) = handle(&mut session, &["MSET", "a", "1", "b"]) else {
        panic!("a bad MSET is refused");
    };
    assert!(
        text.contains("wrong number of arguments for 'mset'"),
        "{text}"
    );
    assert!(matches!(
        handle(&mut session, &["EXEC"]),
        Step::Reply(Value::Error(text)) if text.starts_with("EXECABORT")
    ));
}

#[test]
fn without_one_log_order_commands_over_several_keys_are_still_refused() {
    let mut session = Session::new(1);
    let Step::Reply(Value::Error(text)) = handle(&mut session, &["MSET", "a", "1", "b", "2"])
    else {
        panic!("MSET is refused by the per-key engine");
    };
    assert!(text.contains("does not implement 'mset'"), "{text}");
}

#[test]
fn under_one_log_order_watch_reads_stamps_that_exec_carries() {
    use logless_redis::session::WATCHED_KEYS_MAX;
    use logless_redis::table::cross_key::{CrossKey, Queued};
    let mut session = Session::new(1).with_total_order(true);
    let key = |k: &'static str| Bytes::from_static(k.as_bytes());
    assert_eq!(
        handle(&mut session, &["watch", "a", "b"]),
        Step::Watch(vec![key("a"), key("b")])
    );
    // The node reads the stamps through the log and gives them back.
    assert_eq!(
        session.watched(vec![key("a"), key("b")], vec![3, 8]),
        simple("OK")
    );
    assert_eq!(handle(&mut session, &["MULTI"]), Step::Reply(simple("OK")));
    // WATCH inside MULTI is an error that aborts the transaction.
    assert_eq!(
        handle(&mut session, &["WATCH", "c"]),
        Step::Reply(error("ERR WATCH inside MULTI is not allowed"))
    );
    assert!(matches!(
        handle(&mut session, &["EXEC"]),
        Step::Reply(Value::Error(text)) if text.starts_with("EXECABORT")
    ));
    // That EXEC forgot the watched keys: the next one is not checked.
    assert!(session.watched_keys().is_empty());

    let watch = |session: &mut Session, k: &'static str, stamp: u64| {
        assert_eq!(handle(session, &["WATCH", k]), Step::Watch(vec![key(k)]));
        session.watched(vec![key(k)], vec![stamp]);
    };
    watch(&mut session, "a", 3);
    watch(&mut session, "b", 8);
    handle(&mut session, &["MULTI"]);
    handle(&mut session, &["INCR", "a"]);
    // EXEC carries the watched keys with their stamps, even for a transaction on one key.
    let Step::Cross {
        op: CrossKey::WatchedTransaction { watched, items },
        shape: ReplyShape::Exec(shapes),
    } = handle(&mut session, &["EXEC"])
    else {
        panic!("EXEC after WATCH is one checked step");
    };
    assert_eq!(watched, [(key("a"), 3), (key("b"), 8)]);
    assert_eq!(items, [Queued::One(key("a"), Command::IncrBy(1))]);
    assert_eq!(shapes.len(), 1);
    assert!(session.watched_keys().is_empty(), "EXEC forgets them");

    // Even an empty transaction is checked; without watches it answers at once.
    watch(&mut session, "a", 3);
    handle(&mut session, &["MULTI"]);
    assert!(matches!(
        handle(&mut session, &["EXEC"]),
        Step::Cross {
            op: CrossKey::WatchedTransaction { .. },
            ..
        }
    ));
    handle(&mut session, &["MULTI"]);
    assert_eq!(
        handle(&mut session, &["EXEC"]),
        Step::Reply(Value::Array(Vec::new()))
    );

    // UNWATCH, DISCARD and RESET forget the watched keys.
    for forget in [&["UNWATCH"][..], &["MULTI"], &["RESET"]] {
        watch(&mut session, "a", 3);
        handle(&mut session, forget);
        if forget == ["MULTI"] {
            assert_eq!(
                handle(&mut session, &["DISCARD"]),
                Step::Reply(simple("OK"))
            );
        }
        assert!(session.watched_keys().is_empty(), "{forget:?}");
    }

    // Arity, key size and the bound on watched keys.
    assert_eq!(
        handle(&mut session, &["WATCH"]),
        Step::Reply(error("ERR wrong number of arguments for 'watch' command"))
    );
    let long = "k".repeat(KEY_BYTES_MAX + 1);
    assert!(matches!(
        session.handle(&args(&["WATCH", &long])),
        Step::Reply(Value::Error(text)) if text.contains("exceeds the limit")
    ));
    let many: Vec<String> = (0..=WATCHED_KEYS_MAX).map(|i| format!("k{i}")).collect();
    let mut request = vec!["WATCH"];
    request.extend(many.iter().map(String::as_str));
    assert!(matches!(
        session.handle(&args(&request)),
        Step::Reply(Value::Error(text)) if text.contains("watch at most")
    ));
}
