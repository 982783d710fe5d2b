//! Command semantics by exact replies and resulting registers.
use std::collections::BTreeSet;

use bytes::Bytes;
use logless_commands::command::{
    digest, Command, CommandError, Condition, Expiry, Limits, Outcome, Reply, SetArgs,
};
use logless_commands::value::{Data, LockState, Register};
use proptest::prelude::*;

const LIMITS: Limits = Limits {
    value_bytes_max: 16,
    set_members_max: 3,
};

fn b(s: &str) -> Bytes {
    Bytes::copy_from_slice(s.as_bytes())
}

fn string(s: &str) -> Register {
    Register {
        data: Data::Str(b(s)),
        expires_at_ms: None,
    }
}

fn int(v: i64) -> Register {
    Register {
        data: Data::Int(v),
        expires_at_ms: None,
    }
}

fn set_of(members: &[&str]) -> Register {
    Register {
        data: Data::Set(members.iter().map(|m| b(m)).collect()),
        expires_at_ms: None,
    }
}

fn set_cmd(value: &str, condition: Condition, get: bool, expiry: Expiry) -> Command {
    Command::Set(SetArgs {
        value: b(value),
        condition,
        get,
        expiry,
    })
}

/// Applies `cmd` at time 10 and returns the outcome and the register after it.
fn run(cmd: Command, mut reg: Register) -> (Outcome, Register) {
    let before = reg.clone();
    let outcome = cmd.apply(&mut reg, 10, &LIMITS);
    if !outcome.changed {
        assert_eq!(reg, before, "unchanged must mean identical: {cmd:?}");
    }
    (outcome, reg)
}

fn reply(cmd: Command, reg: Register) -> Reply {
    run(cmd, reg).0.reply
}

#[test]
fn get_exists_and_del() {
    assert_eq!(reply(Command::Get, Register::default()), Reply::Nil);
    assert_eq!(reply(Command::Get, string("v")), Reply::Bulk(b("v")));
    assert_eq!(reply(Command::Get, int(-7)), Reply::Bulk(b("-7")));
    assert_eq!(
        reply(Command::Get, set_of(&["a"])),
        Reply::Error(CommandError::WrongType)
    );
    assert_eq!(reply(Command::Exists, Register::default()), Reply::Int(0));
    assert_eq!(reply(Command::Exists, string("")), Reply::Int(1));
    let (o, r) = run(Command::Del, string("v"));
    assert_eq!(
        (o.reply, o.changed, r),
        (Reply::Int(1), true, Register::default())
    );
    let (o, _) = run(Command::Del, Register::default());
    assert_eq!((o.reply, o.changed), (Reply::Int(0), false));
}

#[test]
fn set_conditions() {
    let plain = set_cmd("new", Condition::Always, false, Expiry::Clear);
    assert_eq!(
        run(plain, set_of(&["a"])).1,
        string("new"),
        "SET overwrites any type"
    );
    let nx = || set_cmd("new", Condition::Nx, false, Expiry::Clear);
    assert_eq!(reply(nx(), string("old")), Reply::Nil);
    assert_eq!(run(nx(), Register::default()).1, string("new"));
    let xx = || set_cmd("new", Condition::Xx, false, Expiry::Clear);
    assert_eq!(reply(xx(), Register::default()), Reply::Nil);
    assert_eq!(run(xx(), string("old")).1, string("new"));
    let ifeq = |v: &str| set_cmd("new", Condition::IfEq(b(v)), false, Expiry::Clear);
    assert_eq!(reply(ifeq("old"), string("old")), Reply::Ok);
    assert_eq!(reply(ifeq("other"), string("old")), Reply::Nil);
    assert_eq!(
        reply(ifeq("old"), Register::default()),
        Reply::Nil,
        "IFEQ needs the key"
    );
    assert_eq!(
        reply(ifeq("1"), set_of(&["1"])),
        Reply::Error(CommandError::WrongType)
    );
    assert_eq!(
        reply(ifeq("5"), int(5)),
        Reply::Ok,
        "integers compare as their string"
    );
    let ifne = |v: &str| set_cmd("new", Condition::IfNe(b(v)), false, Expiry::Clear);
    assert_eq!(reply(ifne("old"), string("old")), Reply::Nil);
    assert_eq!(
        reply(ifne("old"), Register::default()),
        Reply::Ok,
        "IFNE writes an absent key"
    );
    let ifdeq = set_cmd(
        "new",
        Condition::IfDigestEq(digest(b"old")),
        false,
        Expiry::Clear,
    );
    assert_eq!(reply(ifdeq, string("old")), Reply::Ok);
    let ifdne = set_cmd(
        "new",
        Condition::IfDigestNe(digest(b"old")),
        false,
        Expiry::Clear,
    );
    assert_eq!(reply(ifdne, string("old")), Reply::Nil);
}

#[test]
fn set_get_and_expiry() {
    let get = set_cmd("new", Condition::Always, true, Expiry::Clear);
    assert_eq!(reply(get.clone(), string("old")), Reply::Bulk(b("old")));
    assert_eq!(reply(get.clone(), Register::default()), Reply::Nil);
    assert_eq!(
        reply(get, set_of(&["a"])),
        Reply::Error(CommandError::WrongType)
    );
    let nx_get = set_cmd("new", Condition::Nx, true, Expiry::Clear);
    assert_eq!(reply(nx_get, string("old")), Reply::Bulk(b("old")));
    let px = set_cmd("v", Condition::Always, false, Expiry::AfterMs(5));
    assert_eq!(run(px, Register::default()).1.expires_at_ms, Some(15));
    let zero = set_cmd("v", Condition::Always, false, Expiry::AfterMs(0));
    assert_eq!(
        reply(zero, Register::default()),
        Reply::Error(CommandError::InvalidExpireTime)
    );
    let overflow = set_cmd("v", Condition::Always, false, Expiry::AfterMs(u64::MAX));
    assert_eq!(
        reply(overflow, Register::default()),
        Reply::Error(CommandError::InvalidExpireTime)
    );
    let mut with_ttl = string("old");
    with_ttl.expires_at_ms = Some(50);
    let keep = set_cmd("v", Condition::Always, false, Expiry::Keep);
    assert_eq!(run(keep, with_ttl.clone()).1.expires_at_ms, Some(50));
    let clear = set_cmd("v", Condition::Always, false, Expiry::Clear);
    assert_eq!(run(clear, with_ttl).1.expires_at_ms, None);
    let big = set_cmd("0123456789abcdefX", Condition::Always, false, Expiry::Clear);
    assert_eq!(
        reply(big, Register::default()),
        Reply::Error(CommandError::ValueTooLarge)
    );
}

#[test]
fn an_expired_key_is_absent_at_its_instant() {
    let mut reg = int(3);
    reg.expires_at_ms = Some(10);
    assert_eq!(reply(Command::Get, reg.clone()), Reply::Nil);
    assert_eq!(reply(Command::Exists, reg.clone()), Reply::Int(0));
    let (o, r) = run(Command::IncrBy(1), reg.clone());
    assert_eq!(
        (o.reply, r),
        (Reply::Int(1), int(1)),
        "a write starts from absent"
    );
    reg.expires_at_ms = Some(11);
    assert_eq!(reply(Command::Get, reg), Reply::Bulk(b("3")));
}

#[test]
fn incrby() {
    assert_eq!(run(Command::IncrBy(5), Register::default()).1, int(5));
    assert_eq!(run(Command::IncrBy(-1), string("10")).1, int(9));
    for bad in [
        "",
        "1.5",
        " 1",
        "+1",
        "01",
        "-0",
        "abc",
        "9223372036854775808",
    ] {
        assert_eq!(
            reply(Command::IncrBy(1), string(bad)),
            Reply::Error(CommandError::NotAnInteger),
            "{bad:?}"
        );
    }
    assert_eq!(
        reply(Command::IncrBy(1), int(i64::MAX)),
        Reply::Error(CommandError::Overflow)
    );
    assert_eq!(
        reply(Command::IncrBy(-1), int(i64::MIN)),
        Reply::Error(CommandError::Overflow)
    );
    assert_eq!(
        reply(Command::IncrBy(1), set_of(&["a"])),
        Reply::Error(CommandError::WrongType)
    );
}

#[test]
fn sets() {
    let (o, r) = run(
        Command::SAdd(vec![b("b"), b("a"), b("a")]),
        Register::default(),
    );
    assert_eq!((o.reply, r.clone()), (Reply::Int(2), set_of(&["a", "b"])));
    assert_eq!(reply(Command::SAdd(vec![b("a")]), r.clone()), Reply::Int(0));
    assert_eq!(
        reply(Command::SMembers, r.clone()),
        Reply::Array(vec![b("a"), b("b")])
    );
    assert_eq!(reply(Command::SIsMember(b("a")), r.clone()), Reply::Int(1));
    assert_eq!(reply(Command::SCard, r.clone()), Reply::Int(2));
    let (o, r2) = run(Command::SRem(vec![b("a"), b("z")]), r.clone());
    assert_eq!((o.reply, r2), (Reply::Int(1), set_of(&["b"])));
    let (o, r3) = run(Command::SRem(vec![b("a"), b("b")]), r);
    assert_eq!(
        (o.reply, r3),
        (Reply::Int(2), Register::default()),
        "an empty set is absent"
    );
    assert_eq!(
        reply(Command::SMembers, Register::default()),
        Reply::Array(vec![])
    );
    assert_eq!(
        reply(Command::SAdd(vec![b("x")]), string("s")),
        Reply::Error(CommandError::WrongType)
    );
    let full = set_of(&["a", "b", "c"]);
    assert_eq!(
        reply(Command::SAdd(vec![b("d")]), full),
        Reply::Error(CommandError::ValueTooLarge)
    );
}

#[test]
fn delex_and_digest() {
    assert_eq!(
        reply(Command::DelEx(Condition::IfEq(b("v"))), string("v")),
        Reply::Int(1)
    );
    assert_eq!(
        reply(Command::DelEx(Condition::IfEq(b("w"))), string("v")),
        Reply::Int(0)
    );
    assert_eq!(
        reply(Command::DelEx(Condition::IfNe(b("w"))), string("v")),
        Reply::Int(1)
    );
    assert_eq!(
        reply(Command::DelEx(Condition::IfNe(b("w"))), Register::default()),
        Reply::Int(0)
    );
    assert_eq!(
        reply(Command::DelEx(Condition::IfEq(b("a"))), set_of(&["a"])),
        Reply::Error(CommandError::WrongType)
    );
    assert_eq!(
        reply(Command::DelEx(Condition::Always), set_of(&["a"])),
        Reply::Int(1)
    );
    let hex = format!("{:016x}", digest(b"v"));
    assert_eq!(
        reply(Command::Digest, string("v")),
        Reply::Bulk(Bytes::from(hex))
    );
    assert_eq!(reply(Command::Digest, Register::default()), Reply::Nil);
    assert_eq!(
        digest(b""),
        0x2d06800538d394c2,
        "XXH3-64 of the empty string"
    );
}

#[test]
fn the_fencing_lock() {
    let acquire = |o: &str| Command::LockAcquire {
        owner: b(o),
        lease_ms: 100,
    };
    let (o, r) = run(acquire("a"), Register::default());
    assert_eq!(o.reply, Reply::Int(1));
    assert_eq!(
        r.data,
        Data::Lock(LockState {
            owner: Some(b("a")),
            fence: 1,
            lease_until_ms: 110
        })
    );
    assert_eq!(
        reply(acquire("b"), r.clone()),
        Reply::Nil,
        "held by another"
    );
    assert_eq!(
        reply(acquire("a"), r.clone()),
        Reply::Int(1),
        "re-entry keeps the token"
    );
    assert_eq!(
        reply(Command::LockRelease { owner: b("b") }, r.clone()),
        Reply::Int(0)
    );
    let (o, released) = run(Command::LockRelease { owner: b("a") }, r);
    assert_eq!(o.reply, Reply::Int(1));
    let (o, _) = run(acquire("b"), released);
    assert_eq!(o.reply, Reply::Int(2), "the token grows across release");
    let expired = Register {
        data: Data::Lock(LockState {
            owner: Some(b("a")),
            fence: 7,
            lease_until_ms: 10,
        }),
        expires_at_ms: None,
    };
    assert_eq!(
        reply(acquire("b"), expired),
        Reply::Int(8),
        "an expired lease is free"
    );
    assert_eq!(
        reply(acquire("a"), string("s")),
        Reply::Error(CommandError::WrongType)
    );
}

#[test]
fn error_texts_are_redis_texts() {
    assert_eq!(
        CommandError::WrongType.to_string(),
        "WRONGTYPE Operation against a key holding the wrong kind of value"
    );
    assert_eq!(
        CommandError::NotAnInteger.to_string(),
        "ERR value is not an integer or out of range"
    );
    assert_eq!(
        CommandError::Overflow.to_string(),
        "ERR increment or decrement would overflow"
    );
}

/// A reference model for random sequences: a counter-or-set per key written plainly.
#[derive(Clone, Debug, PartialEq)]
enum Model {
    Absent,
    Int(i64),
    Set(BTreeSet<u8>),
}

fn command() -> impl Strategy<Value = Command> {
    prop_oneof![
        Just(Command::Get),
        Just(Command::Del),
        (-3i64..3).prop_map(Command::IncrBy),
        (0u8..4).prop_map(|m| Command::SAdd(vec![Bytes::from(vec![m])])),
        (0u8..4).prop_map(|m| Command::SRem(vec![Bytes::from(vec![m])])),
        Just(Command::SCard),
    ]
}

proptest! {
    #[test]
    fn random_sequences_match_a_reference_model(cmds in proptest::collection::vec(command(), 0..40)) {
        let mut reg = Register::default();
        let mut model = Model::Absent;
        for cmd in cmds {
            let before = reg.clone();
            let outcome = cmd.apply(&mut reg, 0, &Limits::UNLIMITED);
            if !outcome.changed {
                prop_assert_eq!(&reg, &before);
            }
            let expected = match (&cmd, &mut model) {
                (Command::Get, Model::Absent) => Reply::Nil,
                (Command::Get, Model::Int(v)) => Reply::Bulk(Bytes::from(v.to_string())),
                (Command::Get, Model::Set(_)) => Reply::Error(CommandError::WrongType),
                (Command::Del, m) => {
                    let existed = *m != Model::Absent;
                    *m = Model::Absent;
                    Reply::Int(i64::from(existed))
                }
                (Command::IncrBy(d), Model::Absent) => { model = Model::Int(*d); Reply::Int(*d) }
                (Command::IncrBy(d), Model::Int(v)) => { *v += d; Reply::Int(*v) }
                (Command::IncrBy(_), Model::Set(_)) => Reply::Error(CommandError::WrongType),
                (Command::SAdd(m), Model::Absent) => {
                    model = Model::Set(BTreeSet::from([m[0][0]]));
                    Reply::Int(1)
                }
                (Command::SAdd(m), Model::Set(s)) => Reply::Int(i64::from(s.insert(m[0][0]))),
                (Command::SRem(_), Model::Absent) => Reply::Int(0),
                (Command::SRem(m), Model::Set(s)) => {
                    let removed = s.remove(&m[0][0]);
                    if s.is_empty() { model = Model::Absent; }
                    Reply::Int(i64::from(removed))
                }
                (Command::SCard, Model::Absent) => Reply::Int(0),
                (Command::SCard, Model::Set(s)) => Reply::Int(s.len() as i64),
                (_, Model::Int(_)) => Reply::Error(CommandError::WrongType),
                (c, m) => unreachable!("{c:?} on {m:?}"),
            };
            prop_assert_eq!(outcome.reply, expected);
        }
    }
}
