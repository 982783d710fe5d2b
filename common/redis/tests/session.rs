//! The Redis session without a socket: what each request becomes, the connection state it
//! changes, and the replies built from engine answers, with their exact texts.
use bytes::{Bytes, BytesMut};
use logless_commands::command::{Command, CommandError, Reply};
use logless_commands::KEY_BYTES_MAX;
use logless_redis::resp::{parse_request, write_value, ParseLimits, Protocol, Value};
use logless_redis::session::{Failure, NodeQuery, Session, Step, Transaction};
use logless_redis::table::{Combine, ReplyShape};

fn args(words: &[&str]) -> Vec<Bytes> {
    words
        .iter()
        .map(|w| Bytes::copy_from_slice(w.as_bytes()))
        .collect()
}

fn handle(session: &mut Session, words: &[&str]) -> Step {
    session.handle(&args(words))
}

fn reply(session: &mut Session, words: &[&str]) -> Value {
    match handle(session, words) {
        Step::Reply(value) => value,
        other => panic!("{words:?} gave {other:?}, not a reply"),
    }
}

fn error(text: &str) -> Value {
    Value::Error(text.to_owned())
}

fn simple(text: &str) -> Value {
    Value::Simple(text.to_owned())
}

fn bulk(text: &str) -> Value {
    Value::Bulk(Bytes::copy_from_slice(text.as_bytes()))
}

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
    assert_eq!(
        reply(&mut session, &["CLIENT", "INFO"]),
        bulk("id=9 name=worker-1 db=0 resp=2\n")
    );
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

#[test]
fn a_refused_multi_runs_nothing_until_exec_or_discard() {
    let mut session = Session::new(1);
    let Value::Error(refusal) = reply(&mut session, &["MULTI"]) else {
        panic!("MULTI is refused");
    };
    assert!(refusal.starts_with("ERR logless does not support 'multi'"));
    assert_eq!(session.transaction(), Transaction::Refused);
    let queued = error(
        "ERR not run: this connection sent a MULTI, which logless refuses (every key is its own \
         register, so a transaction cannot be atomic); send EXEC or DISCARD to leave it",
    );
    assert_eq!(reply(&mut session, &["INCR", "a"]), queued);
    assert_eq!(reply(&mut session, &["SET", "a", "1"]), queued);
    assert_eq!(
        reply(&mut session, &["EXEC"]),
        error("EXECABORT Transaction discarded: logless refused the MULTI; nothing was run")
    );
    assert_eq!(session.transaction(), Transaction::None);
    assert!(matches!(
        handle(&mut session, &["INCR", "a"]),
        Step::One { .. }
    ));

    reply(&mut session, &["multi"]);
    assert_eq!(reply(&mut session, &["discard"]), simple("OK"));
    assert!(matches!(
        handle(&mut session, &["GET", "a"]),
        Step::One { .. }
    ));
}

#[test]
fn reset_and_quit_leave_a_refused_multi() {
    let mut session = Session::new(1);
    reply(&mut session, &["MULTI"]);
    assert_eq!(reply(&mut session, &["RESET"]), simple("RESET"));
    assert_eq!(session.transaction(), Transaction::None);
    reply(&mut session, &["MULTI"]);
    assert_eq!(reply(&mut session, &["QUIT"]), simple("OK"));
    assert!(session.is_closing());
}

#[test]
fn exec_and_discard_without_multi_are_refused_by_the_table() {
    let mut session = Session::new(1);
    for name in ["EXEC", "DISCARD"] {
        let Value::Error(text) = reply(&mut session, &[name]) else {
            panic!("{name} without MULTI is an error");
        };
        assert!(text.starts_with(&format!(
            "ERR logless does not support '{}'",
            name.to_lowercase()
        )));
    }
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
    let sum = |answers: &[Result<Reply, Failure>]| Session::combine(Combine::Sum, answers);
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
            &[Ok(Reply::Bulk(Bytes::from_static(b"v"))), Ok(Reply::Nil)]
        ),
        Value::Array(vec![bulk("v"), Value::Nil])
    );
    // MGET with a failed part reports the failure, not a partial array.
    assert_eq!(
        Session::combine(Combine::Array, &[Ok(Reply::Nil), Err(Failure::NotApplied)]),
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
