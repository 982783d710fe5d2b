//! Command semantics by exact replies and resulting registers.
use std::collections::BTreeSet;

use bytes::Bytes;
use logless_commands::command::{
    digest, Command, CommandError, Condition, ExpireArgs, ExpireFlags, ExpireKind, Expiry, Limits,
    Outcome, Reply, SetArgs,
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
        fence: 0,
    }
}

fn int(v: i64) -> Register {
    Register {
        data: Data::Int(v),
        expires_at_ms: None,
        fence: 0,
    }
}

fn set_of(members: &[&str]) -> Register {
    Register {
        data: Data::Set(members.iter().map(|m| b(m)).collect()),
        expires_at_ms: None,
        fence: 0,
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

fn lock_acquire(owner: &str, lease_ms: u64) -> Command {
    Command::LockAcquire {
        owner: b(owner),
        lease_ms,
    }
}

#[test]
fn the_fencing_lock() {
    let acquire = |o: &str| lock_acquire(o, 100);
    let (o, r) = run(acquire("a"), Register::default());
    assert_eq!(o.reply, Reply::Int(1));
    assert_eq!(
        r.data,
        Data::Lock(LockState {
            owner: Some(b("a")),
            lease_until_ms: 110
        })
    );
    assert_eq!(r.fence, 1);
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
            lease_until_ms: 10,
        }),
        expires_at_ms: None,
        fence: 7,
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
fn fencing_tokens_survive_del_set_and_expiry() {
    let acquire = |o: &str| lock_acquire(o, 100);
    let (_, held) = run(acquire("a"), Register::default());
    let (_, held) = run(
        acquire("b"),
        run(Command::LockRelease { owner: b("a") }, held).1,
    );
    assert_eq!(held.fence, 2);
    let (o, deleted) = run(Command::Del, held);
    assert_eq!(o.reply, Reply::Int(1));
    assert!(!deleted.is_live(10), "DEL leaves an absent key");
    let (o, again) = run(acquire("c"), deleted.clone());
    assert_eq!(
        o.reply,
        Reply::Int(3),
        "a deleted lock key does not restart its tokens"
    );
    let (_, overwritten) = run(
        Command::Set(SetArgs {
            value: b("v"),
            condition: Condition::Always,
            expiry: Expiry::Clear,
            get: false,
        }),
        again,
    );
    assert_eq!(
        reply(Command::Get, overwritten.clone()),
        Reply::Bulk(b("v"))
    );
    let (_, cleared) = run(Command::Del, overwritten);
    assert_eq!(reply(acquire("d"), cleared), Reply::Int(4));
    let expiring = Register {
        expires_at_ms: Some(5),
        ..deleted
    };
    assert_eq!(
        reply(acquire("e"), expiring),
        Reply::Int(3),
        "expiry keeps it too"
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

fn with_ttl(mut reg: Register, at: u64) -> Register {
    reg.expires_at_ms = Some(at);
    reg
}

/// Applies `cmd` at `now_ms` with the test limits, checking that "unchanged" means identical.
fn run_at(cmd: &Command, mut reg: Register, now_ms: u64) -> (Outcome, Register) {
    let before = reg.clone();
    let outcome = cmd.apply(&mut reg, now_ms, &LIMITS);
    if !outcome.changed {
        assert_eq!(reg, before, "unchanged must mean identical: {cmd:?}");
    }
    if outcome.reply != Reply::Error(CommandError::ValueTooLarge) {
        // `read` answers writes without limits.
        assert_eq!(
            cmd.read(&before, now_ms),
            outcome.reply,
            "read answers like apply: {cmd:?}"
        );
    }
    (outcome, reg)
}

fn expire_cmd(kind: ExpireKind, time: i64, flags: &str) -> Command {
    Command::Expire(ExpireArgs {
        kind,
        time,
        flags: ExpireFlags {
            nx: flags.contains("nx"),
            xx: flags.contains("xx"),
            gt: flags.contains("gt"),
            lt: flags.contains("lt"),
        },
    })
}

#[test]
fn new_commands_names_and_read_only() {
    let expire = expire_cmd(ExpireKind::Expire, 1, "");
    for (cmd, name, read_only) in [
        (Command::Ttl, "ttl", true),
        (Command::PTtl, "pttl", true),
        (Command::Type, "type", true),
        (Command::StrLen, "strlen", true),
        (expire, "expire", false),
        (expire_cmd(ExpireKind::PExpire, 1, ""), "pexpire", false),
        (expire_cmd(ExpireKind::ExpireAt, 1, ""), "expireat", false),
        (expire_cmd(ExpireKind::PExpireAt, 1, ""), "pexpireat", false),
        (Command::Persist, "persist", false),
        (Command::Append(b("x")), "append", false),
        (Command::GetDel, "getdel", false),
    ] {
        assert_eq!(cmd.name(), name);
        assert_eq!(cmd.is_read_only(), read_only, "{name}");
    }
}

#[test]
fn ttl_and_pttl() {
    let ttl = |reg: Register, now| run_at(&Command::Ttl, reg, now).0.reply;
    let pttl = |reg: Register, now| run_at(&Command::PTtl, reg, now).0.reply;
    assert_eq!(ttl(Register::default(), 10), Reply::Int(-2));
    assert_eq!(pttl(Register::default(), 10), Reply::Int(-2));
    assert_eq!(ttl(string("v"), 10), Reply::Int(-1));
    assert_eq!(pttl(set_of(&["a"]), 10), Reply::Int(-1));
    let reg = with_ttl(string("v"), 10_000);
    assert_eq!(pttl(reg.clone(), 1_000), Reply::Int(9_000));
    assert_eq!(ttl(reg.clone(), 1_000), Reply::Int(9));
    // Rounded to the nearest second, halves up: (ms + 500) / 1000.
    assert_eq!(ttl(reg.clone(), 8_500), Reply::Int(2), "1500 ms");
    assert_eq!(ttl(reg.clone(), 8_501), Reply::Int(1), "1499 ms");
    assert_eq!(ttl(reg.clone(), 9_500), Reply::Int(1), "500 ms");
    assert_eq!(ttl(reg.clone(), 9_501), Reply::Int(0), "499 ms");
    assert_eq!(pttl(reg.clone(), 9_999), Reply::Int(1));
    assert_eq!(
        ttl(reg.clone(), 10_000),
        Reply::Int(-2),
        "expired at its instant"
    );
    assert_eq!(pttl(reg, 20_000), Reply::Int(-2));
    assert_eq!(
        pttl(with_ttl(int(1), u64::MAX), 0),
        Reply::Int(i64::MAX),
        "saturates"
    );
}

#[test]
fn type_names() {
    let ty = |reg: Register| run_at(&Command::Type, reg, 10).0.reply;
    assert_eq!(ty(Register::default()), Reply::Status("none"));
    assert_eq!(ty(string("v")), Reply::Status("string"));
    assert_eq!(ty(int(3)), Reply::Status("string"));
    assert_eq!(ty(set_of(&["a"])), Reply::Status("set"));
    let lock = Register {
        data: Data::Lock(LockState {
            owner: None,
            lease_until_ms: 0,
        }),
        expires_at_ms: None,
        fence: 1,
    };
    assert_eq!(ty(lock), Reply::Status("lock"));
    assert_eq!(ty(with_ttl(string("v"), 10)), Reply::Status("none"));
}

#[test]
fn strlen() {
    let len = |reg: Register| run_at(&Command::StrLen, reg, 10).0.reply;
    assert_eq!(len(Register::default()), Reply::Int(0));
    assert_eq!(len(string("")), Reply::Int(0));
    assert_eq!(len(string("hello")), Reply::Int(5));
    assert_eq!(len(int(-120)), Reply::Int(4), "an integer's decimal length");
    assert_eq!(len(int(i64::MIN)), Reply::Int(20));
    assert_eq!(len(with_ttl(string("hello"), 10)), Reply::Int(0));
    assert_eq!(len(set_of(&["a"])), Reply::Error(CommandError::WrongType));
}

#[test]
fn expire_sets_relative_and_absolute_times() {
    let now = 1_000;
    let cases = [
        (ExpireKind::Expire, 5, 6_000),
        (ExpireKind::PExpire, 5, 1_005),
        (ExpireKind::ExpireAt, 7, 7_000),
        (ExpireKind::PExpireAt, 1_001, 1_001),
    ];
    for (kind, time, at) in cases {
        let (o, r) = run_at(&expire_cmd(kind, time, ""), string("v"), now);
        assert_eq!((o.reply, o.changed), (Reply::Int(1), true), "{kind:?}");
        assert_eq!(r, with_ttl(string("v"), at), "{kind:?}");
        // The same expiry again changes nothing.
        let (o, _) = run_at(&expire_cmd(kind, time, ""), r, now);
        assert_eq!((o.reply, o.changed), (Reply::Int(1), false), "{kind:?}");
    }
    // The data and its kind stay.
    let (_, r) = run_at(&expire_cmd(ExpireKind::PExpire, 5, ""), set_of(&["a"]), now);
    assert_eq!(r, with_ttl(set_of(&["a"]), 1_005));
    let (_, r) = run_at(&expire_cmd(ExpireKind::PExpire, 5, ""), int(4), now);
    assert_eq!(r, with_ttl(int(4), 1_005));
}

#[test]
fn expire_on_an_absent_or_expired_key_answers_0() {
    for time in [-5, 0, 5] {
        let cmd = expire_cmd(ExpireKind::PExpire, time, "");
        let (o, _) = run_at(&cmd, Register::default(), 1_000);
        assert_eq!((o.reply, o.changed), (Reply::Int(0), false));
        let (o, _) = run_at(&cmd, with_ttl(string("v"), 1_000), 1_000);
        assert_eq!((o.reply, o.changed), (Reply::Int(0), false));
    }
}

#[test]
fn expire_in_the_past_deletes() {
    let now = 1_000;
    for (kind, time) in [
        (ExpireKind::Expire, 0),
        (ExpireKind::Expire, -1),
        (ExpireKind::PExpire, 0),
        (ExpireKind::PExpire, -100),
        (ExpireKind::ExpireAt, 1),
        (ExpireKind::ExpireAt, -3),
        (ExpireKind::PExpireAt, 1_000),
        (ExpireKind::PExpireAt, 999),
        (ExpireKind::PExpireAt, i64::MIN),
    ] {
        let (o, r) = run_at(
            &expire_cmd(kind, time, ""),
            with_ttl(string("v"), 5_000),
            now,
        );
        assert_eq!(
            (o.reply, o.changed, r),
            (Reply::Int(1), true, Register::default()),
            "{kind:?} {time}"
        );
    }
    // One millisecond later than the stamp is still in the future.
    let (o, r) = run_at(
        &expire_cmd(ExpireKind::PExpireAt, 1_001, ""),
        string("v"),
        now,
    );
    assert_eq!((o.reply, r), (Reply::Int(1), with_ttl(string("v"), 1_001)));
}

#[test]
fn expire_overflow_is_an_error_naming_the_command() {
    let now = 1_000;
    for (kind, time) in [
        (ExpireKind::Expire, i64::MAX / 1000 + 1),
        (ExpireKind::Expire, i64::MIN / 1000 - 1),
        (ExpireKind::ExpireAt, i64::MAX),
        (ExpireKind::ExpireAt, i64::MIN),
        (ExpireKind::PExpire, i64::MAX),
        (ExpireKind::PExpire, i64::MAX - 999),
        (ExpireKind::Expire, i64::MAX / 1000),
    ] {
        let cmd = expire_cmd(kind, time, "");
        let expected = Reply::Error(CommandError::InvalidExpireTimeIn(kind.name()));
        // Checked before the key, like Redis.
        for reg in [string("v"), Register::default()] {
            let (o, _) = run_at(&cmd, reg, now);
            assert_eq!(
                (o.reply, o.changed),
                (expected.clone(), false),
                "{kind:?} {time}"
            );
        }
    }
    assert_eq!(
        CommandError::InvalidExpireTimeIn("pexpire").to_string(),
        "ERR invalid expire time in 'pexpire' command"
    );
    // The largest relative time that fits, and an absolute one at the limit.
    let (o, r) = run_at(
        &expire_cmd(ExpireKind::PExpire, i64::MAX - 1_000, ""),
        string("v"),
        now,
    );
    assert_eq!(
        (o.reply, r.expires_at_ms),
        (Reply::Int(1), Some(i64::MAX as u64))
    );
    let (o, _) = run_at(
        &expire_cmd(ExpireKind::PExpireAt, i64::MAX, ""),
        string("v"),
        now,
    );
    assert_eq!(o.reply, Reply::Int(1));
    let (o, _) = run_at(
        &expire_cmd(ExpireKind::Expire, i64::MIN / 1000, ""),
        string("v"),
        now,
    );
    assert_eq!(o.reply, Reply::Int(1), "a very negative time deletes");
}

#[test]
fn expire_options() {
    let now = 1_000;
    let no_ttl = string("v");
    let ttl_at_5000 = with_ttl(string("v"), 5_000);
    let cases = [
        // (flags, register, new expiry at, expected reply)
        ("nx", &no_ttl, 3_000, 1),
        ("nx", &ttl_at_5000, 3_000, 0),
        ("xx", &no_ttl, 3_000, 0),
        ("xx", &ttl_at_5000, 3_000, 1),
        ("gt", &no_ttl, 3_000, 0),
        ("gt", &ttl_at_5000, 5_000, 0),
        ("gt", &ttl_at_5000, 4_000, 0),
        ("gt", &ttl_at_5000, 6_000, 1),
        ("lt", &no_ttl, 3_000, 1),
        ("lt", &ttl_at_5000, 5_000, 0),
        ("lt", &ttl_at_5000, 6_000, 0),
        ("lt", &ttl_at_5000, 4_000, 1),
        ("xx gt", &no_ttl, 9_000, 0),
        ("xx gt", &ttl_at_5000, 9_000, 1),
        ("xx lt", &no_ttl, 3_000, 0),
        ("xx lt", &ttl_at_5000, 3_000, 1),
    ];
    for (flags, reg, at, expected) in cases {
        let cmd = expire_cmd(ExpireKind::PExpireAt, at, flags);
        let (o, r) = run_at(&cmd, reg.clone(), now);
        assert_eq!(o.reply, Reply::Int(expected), "{flags} {reg:?} {at}");
        assert_eq!(o.changed, expected == 1, "{flags} {reg:?} {at}");
        if expected == 1 {
            assert_eq!(r.expires_at_ms, Some(at as u64));
        }
    }
    // LT with a past time on a key without expiry deletes it (no expiry is infinite).
    let (o, r) = run_at(&expire_cmd(ExpireKind::PExpire, -1, "lt"), no_ttl, now);
    assert_eq!((o.reply, r), (Reply::Int(1), Register::default()));
    // A failed condition wins over a past time: nothing is deleted.
    let (o, _) = run_at(&expire_cmd(ExpireKind::PExpire, -1, "nx"), ttl_at_5000, now);
    assert_eq!((o.reply, o.changed), (Reply::Int(0), false));
}

#[test]
fn persist() {
    let (o, r) = run_at(&Command::Persist, with_ttl(string("v"), 50), 10);
    assert_eq!((o.reply, o.changed, r), (Reply::Int(1), true, string("v")));
    let (o, _) = run_at(&Command::Persist, string("v"), 10);
    assert_eq!((o.reply, o.changed), (Reply::Int(0), false));
    let (o, _) = run_at(&Command::Persist, Register::default(), 10);
    assert_eq!((o.reply, o.changed), (Reply::Int(0), false));
    let (o, _) = run_at(&Command::Persist, with_ttl(string("v"), 10), 10);
    assert_eq!((o.reply, o.changed), (Reply::Int(0), false), "expired");
    let (o, r) = run_at(&Command::Persist, with_ttl(set_of(&["a"]), 50), 10);
    assert_eq!((o.reply, r), (Reply::Int(1), set_of(&["a"])), "any kind");
}

#[test]
fn append() {
    let app = |s: &str| Command::Append(b(s));
    let (o, r) = run_at(&app("ab"), Register::default(), 10);
    assert_eq!((o.reply, o.changed, r), (Reply::Int(2), true, string("ab")));
    let (o, r) = run_at(&app(""), Register::default(), 10);
    assert_eq!(
        (o.reply, o.changed, r),
        (Reply::Int(0), true, string("")),
        "APPEND creates the key even with nothing"
    );
    let (o, r) = run_at(&app("cd"), with_ttl(string("ab"), 50), 10);
    assert_eq!(
        (o.reply, r),
        (Reply::Int(4), with_ttl(string("abcd"), 50)),
        "the time to live stays"
    );
    let (o, r) = run_at(&app("x"), with_ttl(string("old"), 10), 10);
    assert_eq!(
        (o.reply, r),
        (Reply::Int(1), string("x")),
        "an expired key starts from absent, without expiry"
    );
    let (o, r) = run_at(&app("5"), int(12), 10);
    assert_eq!((o.reply, r), (Reply::Int(3), string("125")));
    let (o, _) = run_at(&app(""), int(12), 10);
    assert_eq!(
        (o.reply, o.changed),
        (Reply::Int(2), false),
        "an empty append changes nothing"
    );
    let (o, _) = run_at(&app(""), string("abc"), 10);
    assert_eq!((o.reply, o.changed), (Reply::Int(3), false));
    assert_eq!(
        run_at(&app("x"), set_of(&["a"]), 10).0.reply,
        Reply::Error(CommandError::WrongType)
    );
    // The size limit (16 bytes).
    let (o, _) = run_at(&app("0123456789"), string("abcdef"), 10);
    assert_eq!((o.reply, o.changed), (Reply::Int(16), true));
    let (o, _) = run_at(&app("0123456789"), string("abcdefg"), 10);
    assert_eq!(
        (o.reply, o.changed),
        (Reply::Error(CommandError::ValueTooLarge), false)
    );
    let (o, _) = run_at(&app("0123456789abcdefg"), Register::default(), 10);
    assert_eq!(o.reply, Reply::Error(CommandError::ValueTooLarge));
}

#[test]
fn getdel() {
    let (o, r) = run_at(&Command::GetDel, with_ttl(string("v"), 50), 10);
    assert_eq!(
        (o.reply, o.changed, r),
        (Reply::Bulk(b("v")), true, Register::default())
    );
    let (o, r) = run_at(&Command::GetDel, int(-3), 10);
    assert_eq!((o.reply, r), (Reply::Bulk(b("-3")), Register::default()));
    let (o, _) = run_at(&Command::GetDel, Register::default(), 10);
    assert_eq!((o.reply, o.changed), (Reply::Nil, false));
    let (o, _) = run_at(&Command::GetDel, with_ttl(string("v"), 10), 10);
    assert_eq!((o.reply, o.changed), (Reply::Nil, false), "expired");
    let (o, _) = run_at(&Command::GetDel, set_of(&["a"]), 10);
    assert_eq!(
        (o.reply, o.changed),
        (Reply::Error(CommandError::WrongType), false),
        "the set stays"
    );
}

#[test]
fn set_expiry_must_fit_a_signed_instant() {
    // Redis keeps expiry instants in a signed 64-bit integer.
    let px = |ms| set_cmd("v", Condition::Always, false, Expiry::AfterMs(ms));
    let (o, _) = run_at(&px(i64::MAX as u64 - 10), Register::default(), 10);
    assert_eq!(o.reply, Reply::Ok);
    let (o, _) = run_at(&px(i64::MAX as u64 - 9), Register::default(), 10);
    assert_eq!(o.reply, Reply::Error(CommandError::InvalidExpireTime));
}

fn any_register() -> impl Strategy<Value = Register> {
    let data = prop_oneof![
        Just(Data::Absent),
        "[a-c0-9]{0,4}".prop_map(|s| Data::Str(Bytes::from(s))),
        (-20i64..20).prop_map(Data::Int),
        proptest::collection::btree_set("[a-c]", 1..3)
            .prop_map(|m| Data::Set(m.into_iter().map(Bytes::from).collect())),
    ];
    (data, proptest::option::of(0u64..40), 0u64..3).prop_map(|(data, expires_at_ms, fence)| {
        Register {
            data,
            expires_at_ms,
            fence,
        }
    })
}

fn new_command() -> impl Strategy<Value = Command> {
    let kind = prop_oneof![
        Just(ExpireKind::Expire),
        Just(ExpireKind::PExpire),
        Just(ExpireKind::ExpireAt),
        Just(ExpireKind::PExpireAt),
    ];
    let flags = prop_oneof![
        Just(ExpireFlags::default()),
        Just(ExpireFlags {
            nx: true,
            ..ExpireFlags::default()
        }),
        Just(ExpireFlags {
            xx: true,
            ..ExpireFlags::default()
        }),
        Just(ExpireFlags {
            gt: true,
            ..ExpireFlags::default()
        }),
        Just(ExpireFlags {
            lt: true,
            ..ExpireFlags::default()
        }),
        Just(ExpireFlags {
            xx: true,
            lt: true,
            ..ExpireFlags::default()
        }),
    ];
    prop_oneof![
        Just(Command::Ttl),
        Just(Command::PTtl),
        Just(Command::Type),
        Just(Command::StrLen),
        Just(Command::Persist),
        Just(Command::GetDel),
        "[a-c]{0,2}".prop_map(|s| Command::Append(Bytes::from(s))),
        (kind, -5i64..50, flags).prop_map(|(kind, time, flags)| Command::Expire(ExpireArgs {
            kind,
            time,
            flags
        })),
    ]
}

proptest! {
    #[test]
    fn new_commands_leave_unchanged_registers_identical(
        reg in any_register(),
        cmd in new_command(),
        now in 0u64..40,
    ) {
        let mut after = reg.clone();
        let outcome = cmd.apply(&mut after, now, &Limits::UNLIMITED);
        if outcome.changed {
            prop_assert_ne!(&after, &reg, "changed must mean different: {:?}", cmd);
        } else {
            prop_assert_eq!(&after, &reg);
        }
        prop_assert_eq!(cmd.read(&reg, now), outcome.reply);
        if cmd.is_read_only() {
            prop_assert!(!outcome.changed);
        }
    }
}

#[test]
fn integers_read_as_their_decimal_text_shared_or_not() {
    use logless_commands::command::int_text;
    for v in [
        0,
        1,
        9,
        10,
        99,
        100,
        4_242,
        9_999,
        10_000,
        123_456,
        -1,
        -10_000,
        i64::MAX,
        i64::MIN,
    ] {
        assert_eq!(&int_text(v)[..], v.to_string().as_bytes(), "{v}");
    }
}
