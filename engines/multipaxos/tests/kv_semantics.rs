//! The register map's operations, reply by reply, against Redis's documented behaviour
//! (redis.io/commands: MSET, MSETNX, RENAME, RENAMENX, SMOVE, COPY, DEL, EXISTS, MGET, EXEC),
//! and how the map keeps (or drops) keys.
mod kv_ops;

use bytes::Bytes;
use logless_commands::command::{Command, Expiry, Limits};
use logless_multipaxos::ids::{ClientId, Instance, RequestSeq};
use logless_multipaxos::kv::{Operation, RegisterMachine, Response};
use logless_multipaxos::message::Request;
use logless_multipaxos::state_machine::StateMachine;

use kv_ops::{b, cmd, machine, set, set_with, T0};

/// A machine whose values may take `value_bytes_max` bytes and `set_members_max` members.
fn limited(limits: Limits) -> RegisterMachine {
    let mut m = RegisterMachine::new(limits);
    m.begin_batch(Instance(1), T0);
    m
}

/// SET key value PX ms.
fn set_px(key: &str, value: &str, ms: u64) -> Operation {
    set_with(key, value, Expiry::AfterMs(ms))
}

fn get(m: &mut RegisterMachine, key: &str) -> Response {
    m.apply(cmd(key, Command::Get))
}

fn pttl(m: &mut RegisterMachine, key: &str) -> Response {
    m.apply(cmd(key, Command::PTtl))
}

fn sadd(key: &str, members: &[&str]) -> Operation {
    cmd(key, Command::SAdd(members.iter().map(|m| b(m)).collect()))
}

fn members(m: &mut RegisterMachine, key: &str) -> Response {
    m.apply(cmd(key, Command::SMembers))
}

fn rename(from: &str, to: &str) -> Operation {
    Operation::Rename {
        from: b(from),
        to: b(to),
    }
}

fn renamenx(from: &str, to: &str) -> Operation {
    Operation::RenameNx {
        from: b(from),
        to: b(to),
    }
}

fn smove(from: &str, to: &str, member: &str) -> Operation {
    Operation::SMove {
        from: b(from),
        to: b(to),
        member: b(member),
    }
}

fn copy(from: &str, to: &str, replace: bool) -> Operation {
    Operation::Copy {
        from: b(from),
        to: b(to),
        replace,
    }
}

fn pairs(kv: &[(&str, &str)]) -> Vec<(Bytes, Bytes)> {
    kv.iter().map(|(k, v)| (b(k), b(v))).collect()
}

fn keys(ks: &[&str]) -> Vec<Bytes> {
    ks.iter().map(|k| b(k)).collect()
}

fn bulk(s: &str) -> Response {
    Response::Bulk(b(s))
}

fn err(text: &str) -> Response {
    Response::Error(text.to_owned())
}

const WRONGTYPE: &str = "WRONGTYPE Operation against a key holding the wrong kind of value";
const NO_SUCH_KEY: &str = "ERR no such key";

#[test]
fn mset_sets_every_key_the_last_of_a_repeated_one_and_clears_ttls() {
    let mut m = machine();
    m.apply(set_px("a", "old", 500));
    assert_eq!(
        m.apply(Operation::MSet(pairs(&[
            ("a", "1"),
            ("b", "2"),
            ("b", "3")
        ]))),
        Response::Ok
    );
    assert_eq!(get(&mut m, "a"), bulk("1"));
    assert_eq!(get(&mut m, "b"), bulk("3"));
    assert_eq!(pttl(&mut m, "a"), Response::Int(-1));
}

#[test]
fn mset_past_the_value_limit_sets_nothing() {
    let mut m = limited(Limits {
        value_bytes_max: 3,
        set_members_max: 10,
    });
    let reply = m.apply(Operation::MSet(pairs(&[("a", "1"), ("b", "toolong")])));
    assert_eq!(reply, err("ERR value exceeds the configured size limit"));
    assert_eq!(get(&mut m, "a"), Response::Nil);
    assert!(m.map().is_empty());
}

#[test]
fn msetnx_sets_all_or_nothing() {
    let mut m = machine();
    assert_eq!(
        m.apply(Operation::MSetNx(pairs(&[("a", "1"), ("b", "2")]))),
        Response::Int(1)
    );
    assert_eq!(
        m.apply(Operation::MSetNx(pairs(&[("c", "3"), ("b", "x")]))),
        Response::Int(0)
    );
    assert_eq!(
        get(&mut m, "c"),
        Response::Nil,
        "nothing set when one key exists"
    );
    assert_eq!(get(&mut m, "b"), bulk("2"));
}

#[test]
fn msetnx_counts_an_expired_key_as_absent() {
    let mut m = machine();
    m.apply(set_px("a", "1", 10));
    m.begin_batch(Instance(2), T0 + 10);
    assert_eq!(
        m.apply(Operation::MSetNx(pairs(&[("a", "2")]))),
        Response::Int(1)
    );
    assert_eq!(get(&mut m, "a"), bulk("2"));
}

#[test]
fn rename_of_a_missing_key_is_an_error() {
    let mut m = machine();
    assert_eq!(m.apply(rename("a", "b")), err(NO_SUCH_KEY));
    assert_eq!(m.apply(renamenx("a", "b")), err(NO_SUCH_KEY));
    assert_eq!(m.apply(rename("a", "a")), err(NO_SUCH_KEY));
}

#[test]
fn rename_moves_the_value_and_its_ttl_and_overwrites_any_kind() {
    let mut m = machine();
    m.apply(set_px("a", "v", 500));
    m.apply(sadd("b", &["m"]));
    assert_eq!(m.apply(rename("a", "b")), Response::Ok);
    assert_eq!(get(&mut m, "a"), Response::Nil);
    assert_eq!(get(&mut m, "b"), bulk("v"));
    assert_eq!(pttl(&mut m, "b"), Response::Int(500));
    assert_eq!(m.map().keys().cloned().collect::<Vec<_>>(), [b("b")]);
}

#[test]
fn rename_onto_itself_is_ok_and_renamenx_onto_itself_is_zero() {
    let mut m = machine();
    m.apply(set("a", "v"));
    assert_eq!(m.apply(rename("a", "a")), Response::Ok);
    assert_eq!(m.apply(renamenx("a", "a")), Response::Int(0));
    assert_eq!(get(&mut m, "a"), bulk("v"));
}

#[test]
fn renamenx_onto_an_existing_key_does_nothing() {
    let mut m = machine();
    m.apply(set("a", "1"));
    m.apply(set("b", "2"));
    assert_eq!(m.apply(renamenx("a", "b")), Response::Int(0));
    assert_eq!(get(&mut m, "a"), bulk("1"));
    assert_eq!(get(&mut m, "b"), bulk("2"));
    assert_eq!(m.apply(renamenx("a", "c")), Response::Int(1));
    assert_eq!(get(&mut m, "c"), bulk("1"));
    assert_eq!(get(&mut m, "a"), Response::Nil);
}

#[test]
fn smove_moves_a_member_and_deletes_an_emptied_source() {
    let mut m = machine();
    m.apply(sadd("s", &["x"]));
    let moving = smove("s", "t", "x");
    assert_eq!(m.apply(moving.clone()), Response::Int(1));
    assert_eq!(members(&mut m, "t"), Response::Array(vec![b("x")]));
    assert!(m.map().get(&b("s")).is_none(), "the emptied source is gone");
    assert_eq!(
        m.apply(moving),
        Response::Int(0),
        "the source is missing now"
    );
}

#[test]
fn smove_of_a_missing_member_is_zero() {
    let mut m = machine();
    m.apply(sadd("s", &["x"]));
    m.apply(sadd("t", &["y"]));
    assert_eq!(m.apply(smove("s", "t", "z")), Response::Int(0));
    assert_eq!(members(&mut m, "s"), Response::Array(vec![b("x")]));
}

#[test]
fn smove_type_errors_follow_redis_order() {
    let mut m = machine();
    m.apply(set("str", "v"));
    m.apply(sadd("s", &["x"]));
    // A missing source answers 0 before the destination's type is looked at.
    let from_missing = smove("none", "str", "x");
    assert_eq!(m.apply(from_missing), Response::Int(0));
    let from_string = smove("str", "s", "x");
    assert_eq!(m.apply(from_string), err(WRONGTYPE));
    let to_string = smove("s", "str", "x");
    assert_eq!(m.apply(to_string), err(WRONGTYPE));
    assert_eq!(
        members(&mut m, "s"),
        Response::Array(vec![b("x")]),
        "nothing moved"
    );
    let absent_member_to_string = smove("s", "str", "q");
    assert_eq!(m.apply(absent_member_to_string), err(WRONGTYPE));
}

#[test]
fn smove_onto_the_same_set_answers_membership() {
    let mut m = machine();
    m.apply(sadd("s", &["x"]));
    let same = |member: &str| smove("s", "s", member);
    assert_eq!(m.apply(same("x")), Response::Int(1));
    assert_eq!(m.apply(same("y")), Response::Int(0));
    assert_eq!(members(&mut m, "s"), Response::Array(vec![b("x")]));
}

#[test]
fn smove_into_a_full_set_moves_nothing() {
    let mut m = limited(Limits {
        value_bytes_max: 100,
        set_members_max: 1,
    });
    m.apply(sadd("s", &["x"]));
    m.apply(sadd("t", &["y"]));
    assert_eq!(
        m.apply(smove("s", "t", "x")),
        err("ERR value exceeds the configured size limit")
    );
    assert_eq!(members(&mut m, "s"), Response::Array(vec![b("x")]));
    assert_eq!(members(&mut m, "t"), Response::Array(vec![b("y")]));
}

#[test]
fn copy_without_replace_keeps_an_existing_destination() {
    let mut m = machine();
    m.apply(set("a", "1"));
    m.apply(set("b", "2"));
    let copy = |replace| copy("a", "b", replace);
    assert_eq!(m.apply(copy(false)), Response::Int(0));
    assert_eq!(get(&mut m, "b"), bulk("2"));
    assert_eq!(m.apply(copy(true)), Response::Int(1));
    assert_eq!(get(&mut m, "b"), bulk("1"));
    assert_eq!(get(&mut m, "a"), bulk("1"), "the source stays");
}

#[test]
fn copy_of_a_missing_key_is_zero_and_onto_itself_an_error() {
    let mut m = machine();
    let missing = copy("a", "b", true);
    assert_eq!(m.apply(missing), Response::Int(0));
    m.apply(set("a", "1"));
    let itself = copy("a", "a", true);
    assert_eq!(
        m.apply(itself),
        err("ERR source and destination objects are the same")
    );
}

#[test]
fn copy_copies_the_ttl_and_the_whole_value() {
    let mut m = machine();
    m.apply(sadd("s", &["x", "y"]));
    m.apply(cmd(
        "s",
        Command::Expire(logless_commands::command::ExpireArgs {
            kind: logless_commands::command::ExpireKind::PExpire,
            time: 300,
            flags: Default::default(),
        }),
    ));
    assert_eq!(m.apply(copy("s", "t", false)), Response::Int(1));
    assert_eq!(members(&mut m, "t"), Response::Array(vec![b("x"), b("y")]));
    assert_eq!(pttl(&mut m, "t"), Response::Int(300));
}

#[test]
fn del_counts_existing_keys_once_and_exists_counts_repeats() {
    let mut m = machine();
    m.apply(set("a", "1"));
    m.apply(set("b", "2"));
    assert_eq!(
        m.apply(Operation::Exists(keys(&["a", "a", "b", "c"]))),
        Response::Int(3)
    );
    assert_eq!(
        m.apply(Operation::Del(keys(&["a", "a", "c"]))),
        Response::Int(1)
    );
    assert_eq!(
        m.apply(Operation::Exists(keys(&["a", "b"]))),
        Response::Int(1)
    );
    assert_eq!(m.map().keys().cloned().collect::<Vec<_>>(), [b("b")]);
}

#[test]
fn mget_answers_nil_for_missing_keys_and_other_kinds() {
    let mut m = machine();
    m.apply(set("a", "1"));
    m.apply(sadd("s", &["x"]));
    m.apply(cmd("n", Command::IncrBy(5)));
    assert_eq!(
        m.apply(Operation::MGet(keys(&["a", "s", "missing", "n"]))),
        Response::Items(vec![bulk("1"), Response::Nil, Response::Nil, bulk("5")])
    );
}

#[test]
fn a_transaction_answers_each_command_and_runs_past_an_error() {
    let mut m = machine();
    m.apply(sadd("s", &["x"]));
    let exec = Operation::Transaction(vec![
        set("a", "1"),
        cmd("s", Command::IncrBy(1)),
        cmd("a", Command::IncrBy(2)),
        Operation::MGet(keys(&["a"])),
        rename("a", "b"),
    ]);
    assert_eq!(
        m.apply(exec),
        Response::Items(vec![
            Response::Ok,
            err(WRONGTYPE),
            Response::Int(3),
            Response::Items(vec![bulk("3")]),
            Response::Ok,
        ])
    );
    assert_eq!(get(&mut m, "b"), bulk("3"));
}

#[test]
fn a_transaction_inside_a_transaction_is_refused_in_its_place() {
    let mut m = machine();
    let exec = Operation::Transaction(vec![
        Operation::Transaction(vec![set("a", "1")]),
        set("b", "2"),
    ]);
    assert_eq!(
        m.apply(exec.clone()),
        Response::Items(vec![err("ERR MULTI calls can not be nested"), Response::Ok])
    );
    assert_eq!(get(&mut m, "a"), Response::Nil);
    assert!(
        Operation::decode(&exec.encode()).is_err(),
        "and never decodes"
    );
}

#[test]
fn expired_keys_leave_the_map_when_touched_or_swept() {
    let mut m = machine();
    m.apply(set_px("a", "1", 10));
    m.apply(set_px("b", "1", 10));
    m.apply(set("c", "1"));
    m.begin_batch(Instance(2), T0 + 9);
    assert_eq!(m.map().len(), 3);
    m.begin_batch(Instance(3), T0 + 10);
    assert_eq!(
        m.map().keys().cloned().collect::<Vec<_>>(),
        [b("c")],
        "swept"
    );
    m.apply(set_px("d", "1", 5));
    assert_eq!(m.map().len(), 2);
}

#[test]
fn a_deleted_key_leaves_the_map_unless_it_holds_a_fencing_token() {
    let mut m = machine();
    m.apply(set("a", "1"));
    m.apply(cmd("a", Command::Del));
    assert!(m.map().is_empty());
    let acquire = cmd(
        "l",
        Command::LockAcquire {
            owner: b("me"),
            lease_ms: 100,
        },
    );
    m.apply(acquire.clone());
    m.apply(cmd("l", Command::Del));
    let fence = m.get(b"l").fence;
    assert!(fence > 0, "the token stays: {:?}", m.map());
    m.apply(acquire);
    assert!(m.get(b"l").fence > fence, "and only grows");
}

#[test]
fn random_commands_draw_from_the_log_position_not_the_payload() {
    let spop = |seed| {
        cmd(
            "s",
            Command::SPop {
                count: Some(3),
                seed,
            },
        )
    };
    let run = |seed| {
        let mut m = machine();
        m.apply(sadd("s", &["1", "2", "3", "4", "5", "6", "7", "8", "9"]));
        m.apply(spop(seed))
    };
    assert_eq!(run(1), run(2), "the payload's seed is replaced");
    let mut m = machine();
    m.apply(sadd("s", &["1", "2", "3", "4", "5", "6", "7", "8", "9"]));
    m.begin_batch(Instance(7), T0);
    let other = m.apply(spop(1));
    assert_ne!(
        run(1),
        other,
        "another position, another choice (for this position)"
    );
}

#[test]
fn an_undecodable_payload_is_answered_with_an_error_and_changes_nothing() {
    let mut m = machine();
    let reply = m.execute(&Request {
        client: ClientId(1),
        seq: RequestSeq(1),
        payload: Bytes::from_static(b"\x01\xff"),
    });
    let Ok(Response::Error(text)) = Response::decode(&reply) else {
        panic!("an error: {reply:?}");
    };
    assert!(text.starts_with("ERR undecodable operation"), "{text}");
    assert!(m.map().is_empty());
}

#[test]
fn live_keys_leave_out_expired_keys_and_deleted_lock_keys() {
    let mut m = machine();
    m.apply(set("a", "1"));
    m.apply(set_px("short", "v", 10));
    m.apply(cmd(
        "lock",
        Command::LockAcquire {
            owner: b("me"),
            lease_ms: 60_000,
        },
    ));
    assert_eq!((m.map().len(), m.live_keys(T0)), (3, 3));
    // The lock key, deleted, stays in the map for its fencing token, holding nothing.
    assert_eq!(m.apply(cmd("lock", Command::Del)), Response::Int(1));
    assert_eq!((m.map().len(), m.live_keys(T0)), (3, 2));
    // Past its expiry, before a batch sweeps it.
    assert_eq!(m.live_keys(T0 + 10), 1);
    // The lock taken again holds a value again.
    m.apply(cmd(
        "lock",
        Command::LockAcquire {
            owner: b("me"),
            lease_ms: 60_000,
        },
    ));
    assert_eq!(m.live_keys(T0), 3);
}
