//! Single-key transactions: MULTI ... EXEC as one command.
use logless_commands::command::{
    Command, CommandError, ExpireArgs, ExpireFlags, ExpireKind, HashCmd, ListCmd, ListEnd, Reply,
};
use logless_commands::value::{Data, Register};
use proptest::prelude::*;

use crate::support::*;

fn expire(seconds: i64) -> Command {
    Command::Expire(ExpireArgs {
        kind: ExpireKind::Expire,
        time: seconds,
        flags: ExpireFlags::default(),
    })
}

#[test]
fn the_rate_limiter_pattern_incr_then_expire() {
    let tx = Command::Transaction(vec![Command::IncrBy(1), expire(60)]);
    assert_eq!(tx.name(), "exec");
    assert!(!tx.is_read_only());
    let (o, r) = run(tx.clone(), Register::default());
    assert_eq!((o.reply, o.changed), (ints(&[1, 1]), true));
    assert_eq!(
        r,
        Register {
            data: Data::Int(1),
            expires_at_ms: Some(NOW_MS + 60_000),
            fence: 0,
        }
    );
    let (o, r) = run(tx, r);
    assert_eq!(o.reply, ints(&[2, 1]));
    assert_eq!(r.data, Data::Int(2));
}

#[test]
fn a_failing_command_answers_its_error_in_place_and_the_others_apply() {
    let tx = Command::Transaction(vec![
        Command::Append(b("a")),
        Command::IncrBy(1),
        Command::Hash(HashCmd::HLen),
        Command::Append(b("b")),
    ]);
    let (o, r) = run(tx, Register::default());
    assert_eq!(
        o.reply,
        Reply::Items(vec![
            Reply::Int(1),
            Reply::Error(CommandError::NotAnInteger),
            Reply::Error(CommandError::WrongType),
            Reply::Int(2),
        ])
    );
    assert_eq!(r, string("ab"));
}

#[test]
fn each_command_sees_the_writes_before_it() {
    let tx = Command::Transaction(vec![
        Command::List(ListCmd::Push {
            end: ListEnd::Right,
            values: vec![b("a"), b("b")],
            only_if_exists: false,
        }),
        Command::List(ListCmd::Pop {
            end: ListEnd::Left,
            count: None,
        }),
        Command::List(ListCmd::Range { start: 0, stop: -1 }),
        Command::Type,
        Command::List(ListCmd::Pop {
            end: ListEnd::Left,
            count: None,
        }),
        Command::Exists,
    ]);
    let (o, r) = run(tx, Register::default());
    assert_eq!(
        o.reply,
        Reply::Items(vec![
            Reply::Int(2),
            bulk("a"),
            array(&["b"]),
            Reply::Status("list"),
            bulk("b"),
            Reply::Int(0),
        ])
    );
    assert_eq!(r, Register::default(), "emptied within the transaction");
}

#[test]
fn a_read_only_transaction_is_a_read() {
    let tx = Command::Transaction(vec![Command::Get, Command::Ttl, Command::StrLen]);
    assert!(tx.is_read_only());
    let (o, _) = run(tx, expiring(string("abc"), NOW_MS + 2_000));
    assert_eq!(
        (o.reply, o.changed),
        (
            Reply::Items(vec![bulk("abc"), Reply::Int(2), Reply::Int(3)]),
            false
        )
    );
    assert_eq!(
        reply(Command::Transaction(vec![]), string("x")),
        Reply::Items(vec![])
    );
}

#[test]
fn limits_hold_inside_a_transaction() {
    let big = "x".repeat(40);
    let tx = Command::Transaction(vec![Command::Append(b(&big)), Command::Append(b(&big))]);
    let (o, r) = run(tx, Register::default());
    assert_eq!(
        o.reply,
        Reply::Items(vec![
            Reply::Int(40),
            Reply::Error(CommandError::ValueTooLarge)
        ])
    );
    assert_eq!(r, string(&big));
}

fn small_command() -> impl Strategy<Value = Command> {
    let member = prop_oneof![Just(b("a")), Just(b("b"))];
    prop_oneof![
        Just(Command::Get),
        Just(Command::Del),
        Just(Command::IncrBy(1)),
        member.clone().prop_map(|m| Command::SAdd(vec![m])),
        member.clone().prop_map(|m| Command::SRem(vec![m])),
        member
            .clone()
            .prop_map(|m| Command::Hash(HashCmd::HSet(vec![(m, b("v"))]))),
        member
            .clone()
            .prop_map(|m| Command::Hash(HashCmd::HDel(vec![m]))),
        member.prop_map(|m| Command::List(ListCmd::Push {
            end: ListEnd::Left,
            values: vec![m],
            only_if_exists: false
        })),
        Just(Command::List(ListCmd::Pop {
            end: ListEnd::Right,
            count: Some(1)
        })),
        (0i64..3).prop_map(expire),
        Just(Command::Type),
    ]
}

proptest! {
    #[test]
    fn a_transaction_is_its_commands_applied_in_turn(
        commands in proptest::collection::vec(small_command(), 0..8),
    ) {
        let mut one_by_one = Register::default();
        let replies: Vec<Reply> = commands
            .iter()
            .map(|c| c.apply(&mut one_by_one, NOW_MS, &LIMITS).reply)
            .collect();
        let (o, together) = run(Command::Transaction(commands), Register::default());
        prop_assert_eq!(o.reply, Reply::Items(replies));
        prop_assert_eq!(together, one_by_one);
    }
}

#[test]
fn seeding_reaches_every_random_command_and_each_gets_its_own() {
    let spop = || Command::SPop {
        count: None,
        seed: 0,
    };
    let mut tx = Command::Transaction(vec![
        spop(),
        Command::Get,
        Command::Hash(HashCmd::HRandField {
            count: None,
            with_values: false,
            seed: 0,
        }),
        spop(),
    ]);
    tx.seed(42);
    let Command::Transaction(commands) = &tx else {
        panic!("still a transaction")
    };
    let seeds: Vec<u64> = commands
        .iter()
        .filter_map(|c| match c {
            Command::SPop { seed, .. } | Command::Hash(HashCmd::HRandField { seed, .. }) => {
                Some(*seed)
            }
            _ => None,
        })
        .collect();
    assert_eq!(seeds.len(), 3);
    assert!(seeds.iter().all(|s| *s != 0));
    assert!(seeds[0] != seeds[1] && seeds[1] != seeds[2] && seeds[0] != seeds[2]);
    let mut single = spop();
    single.seed(42);
    assert_eq!(
        single,
        Command::SPop {
            count: None,
            seed: 42
        }
    );
    let mut get = Command::Get;
    get.seed(42);
    assert_eq!(get, Command::Get);
}
