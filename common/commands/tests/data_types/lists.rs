//! LPUSH and the rest of the list family, with the examples of Redis's documentation.
use std::num::NonZeroI64;

use logless_commands::command::{Command, CommandError, ListCmd, ListEnd, Reply};
use logless_commands::value::Register;

use crate::support::*;

fn l(cmd: ListCmd) -> Command {
    Command::List(cmd)
}

fn push(end: ListEnd, values: &[&str], only_if_exists: bool) -> Command {
    l(ListCmd::Push {
        end,
        values: values.iter().map(|v| b(v)).collect(),
        only_if_exists,
    })
}

fn rpush(values: &[&str]) -> Command {
    push(ListEnd::Right, values, false)
}

fn lrange(start: i64, stop: i64) -> Command {
    l(ListCmd::Range { start, stop })
}

fn pos(value: &str, rank: i64, count: Option<u64>, max_len: u64) -> Command {
    l(ListCmd::Pos {
        value: b(value),
        rank: NonZeroI64::new(rank).unwrap(),
        count,
        max_len,
    })
}

#[test]
fn pushes_add_each_value_in_turn() {
    let (o, r) = run(
        push(ListEnd::Left, &["world", "hello"], false),
        Register::default(),
    );
    assert_eq!(
        (o.reply, r.clone()),
        (Reply::Int(2), list(&["hello", "world"]))
    );
    let (o, r) = run(rpush(&["!"]), r);
    assert_eq!(
        (o.reply, r),
        (Reply::Int(3), list(&["hello", "world", "!"]))
    );
    let (o, r) = run(push(ListEnd::Left, &["x"], true), Register::default());
    assert_eq!(
        (o.reply, o.changed, r),
        (Reply::Int(0), false, Register::default())
    );
    let (o, r) = run(push(ListEnd::Right, &["b"], true), list(&["a"]));
    assert_eq!((o.reply, r), (Reply::Int(2), list(&["a", "b"])));
}

#[test]
fn lrange_clamps_like_redis() {
    let r = list(&["one", "two", "three"]);
    assert_eq!(reply(lrange(0, 0), r.clone()), array(&["one"]));
    assert_eq!(
        reply(lrange(-3, 2), r.clone()),
        array(&["one", "two", "three"])
    );
    assert_eq!(
        reply(lrange(-100, 100), r.clone()),
        array(&["one", "two", "three"])
    );
    assert_eq!(reply(lrange(5, 10), r.clone()), array(&[]));
    assert_eq!(reply(lrange(2, 1), r.clone()), array(&[]));
    assert_eq!(reply(lrange(-1, -1), r), array(&["three"]));
    assert_eq!(reply(lrange(0, -1), Register::default()), array(&[]));
}

#[test]
fn llen_and_lindex() {
    let r = list(&["Hello", "World"]);
    assert_eq!(reply(l(ListCmd::Len), r.clone()), Reply::Int(2));
    assert_eq!(reply(l(ListCmd::Len), Register::default()), Reply::Int(0));
    assert_eq!(reply(l(ListCmd::Index(0)), r.clone()), bulk("Hello"));
    assert_eq!(reply(l(ListCmd::Index(-1)), r.clone()), bulk("World"));
    assert_eq!(reply(l(ListCmd::Index(3)), r.clone()), Reply::Nil);
    assert_eq!(reply(l(ListCmd::Index(-3)), r), Reply::Nil);
}

#[test]
fn pops_with_and_without_a_count() {
    let pop = |end, count| l(ListCmd::Pop { end, count });
    let r = list(&["one", "two", "three", "four", "five"]);
    let (o, r) = run(pop(ListEnd::Left, None), r);
    assert_eq!(o.reply, bulk("one"));
    let (o, r) = run(pop(ListEnd::Left, Some(2)), r);
    assert_eq!(o.reply, array(&["two", "three"]));
    let (o, r) = run(pop(ListEnd::Right, Some(0)), r);
    assert_eq!((o.reply, o.changed), (array(&[]), false));
    let (o, r) = run(pop(ListEnd::Right, Some(5)), r);
    assert_eq!(
        (o.reply, r),
        (array(&["five", "four"]), Register::default())
    );
    assert_eq!(
        reply(pop(ListEnd::Left, None), Register::default()),
        Reply::Nil
    );
    assert_eq!(
        reply(pop(ListEnd::Left, Some(1)), Register::default()),
        Reply::NilArray
    );
    assert_eq!(
        reply(pop(ListEnd::Left, Some(0)), Register::default()),
        Reply::NilArray
    );
}

#[test]
fn lset() {
    let set = |index, value: &str| {
        l(ListCmd::Set {
            index,
            value: b(value),
        })
    };
    let (_, r) = run(set(0, "four"), list(&["one", "two", "three"]));
    let (o, r) = run(set(-2, "five"), r);
    assert_eq!(
        (o.reply, r.clone()),
        (Reply::Ok, list(&["four", "five", "three"]))
    );
    assert_eq!(
        reply(set(3, "x"), r.clone()),
        Reply::Error(CommandError::IndexOutOfRange)
    );
    assert_eq!(
        reply(set(-4, "x"), r),
        Reply::Error(CommandError::IndexOutOfRange)
    );
    assert_eq!(
        reply(set(0, "x"), Register::default()),
        Reply::Error(CommandError::NoSuchKey)
    );
}

#[test]
fn linsert() {
    let insert = |before, pivot: &str, value: &str| {
        l(ListCmd::Insert {
            before,
            pivot: b(pivot),
            value: b(value),
        })
    };
    let (o, r) = run(insert(true, "World", "There"), list(&["Hello", "World"]));
    assert_eq!(
        (o.reply, r.clone()),
        (Reply::Int(3), list(&["Hello", "There", "World"]))
    );
    let (o, r) = run(insert(false, "World", "!"), r);
    assert_eq!(
        (o.reply, r.clone()),
        (Reply::Int(4), list(&["Hello", "There", "World", "!"]))
    );
    assert_eq!(reply(insert(true, "nope", "x"), r), Reply::Int(-1));
    assert_eq!(
        reply(insert(true, "a", "x"), Register::default()),
        Reply::Int(0)
    );
}

#[test]
fn lrem_counts_from_either_end() {
    let rem = |count, value: &str| {
        l(ListCmd::Rem {
            count,
            value: b(value),
        })
    };
    let r = list(&["hello", "hello", "foo", "hello"]);
    let (o, after) = run(rem(-2, "hello"), r.clone());
    assert_eq!((o.reply, after), (Reply::Int(2), list(&["hello", "foo"])));
    let (o, after) = run(rem(1, "hello"), r.clone());
    assert_eq!(
        (o.reply, after),
        (Reply::Int(1), list(&["hello", "foo", "hello"]))
    );
    let (o, after) = run(rem(0, "hello"), r.clone());
    assert_eq!((o.reply, after), (Reply::Int(3), list(&["foo"])));
    let (o, _) = run(rem(0, "bar"), r);
    assert_eq!((o.reply, o.changed), (Reply::Int(0), false));
    let (o, after) = run(rem(0, "x"), list(&["x", "x"]));
    assert_eq!((o.reply, after), (Reply::Int(2), Register::default()));
}

#[test]
fn ltrim() {
    let trim = |start, stop| l(ListCmd::Trim { start, stop });
    let r = list(&["one", "two", "three"]);
    let (o, after) = run(trim(1, -1), r.clone());
    assert_eq!((o.reply, after), (Reply::Ok, list(&["two", "three"])));
    let (o, after) = run(trim(0, 100), r.clone());
    assert_eq!((o.reply, o.changed, after), (Reply::Ok, false, r.clone()));
    let (_, after) = run(trim(-1, -1), r.clone());
    assert_eq!(after, list(&["three"]));
    let (o, after) = run(trim(5, 10), r);
    assert_eq!(
        (o.reply, after),
        (Reply::Ok, Register::default()),
        "an empty range deletes"
    );
    assert_eq!(reply(trim(0, 1), Register::default()), Reply::Ok);
}

#[test]
fn lpos() {
    // The examples of Redis's documentation.
    let r = list(&["a", "b", "c", "d", "1", "2", "3", "4", "3", "3", "3"]);
    assert_eq!(reply(pos("3", 1, None, 0), r.clone()), Reply::Int(6));
    assert_eq!(reply(pos("3", 2, Some(0), 0), r.clone()), ints(&[8, 9, 10]));
    let r = list(&["a", "b", "c", "1", "2", "3", "c", "c"]);
    assert_eq!(reply(pos("c", 1, None, 0), r.clone()), Reply::Int(2));
    assert_eq!(reply(pos("c", 2, None, 0), r.clone()), Reply::Int(6));
    assert_eq!(reply(pos("c", -1, None, 0), r.clone()), Reply::Int(7));
    assert_eq!(reply(pos("c", 1, Some(2), 0), r.clone()), ints(&[2, 6]));
    assert_eq!(reply(pos("c", -1, Some(2), 0), r.clone()), ints(&[7, 6]));
    assert_eq!(reply(pos("c", 1, Some(0), 0), r.clone()), ints(&[2, 6, 7]));
    assert_eq!(
        reply(pos("c", 1, None, 2), r.clone()),
        Reply::Nil,
        "MAXLEN 2 stops before it"
    );
    assert_eq!(reply(pos("c", -1, Some(0), 2), r.clone()), ints(&[7, 6]));
    assert_eq!(reply(pos("x", 1, None, 0), r.clone()), Reply::Nil);
    assert_eq!(reply(pos("x", 1, Some(1), 0), r), ints(&[]));
    assert_eq!(reply(pos("x", 1, None, 0), Register::default()), Reply::Nil);
    assert_eq!(
        reply(pos("x", 1, Some(0), 0), Register::default()),
        ints(&[])
    );
}

#[test]
fn lmove_within_one_list_rotates_it() {
    let mv = |from, to| l(ListCmd::Move { from, to });
    let r = list(&["one", "two", "three"]);
    let (o, after) = run(mv(ListEnd::Left, ListEnd::Right), r.clone());
    assert_eq!(
        (o.reply, after),
        (bulk("one"), list(&["two", "three", "one"]))
    );
    // RPOPLPUSH k k.
    let (o, after) = run(mv(ListEnd::Right, ListEnd::Left), r.clone());
    assert_eq!(
        (o.reply, after),
        (bulk("three"), list(&["three", "one", "two"]))
    );
    let (o, after) = run(mv(ListEnd::Left, ListEnd::Left), r.clone());
    assert_eq!((o.reply, o.changed, after), (bulk("one"), false, r));
    let (o, _) = run(mv(ListEnd::Left, ListEnd::Right), list(&["x", "x"]));
    assert_eq!((o.reply, o.changed), (bulk("x"), false));
    assert_eq!(
        reply(mv(ListEnd::Left, ListEnd::Right), Register::default()),
        Reply::Nil
    );
}

#[test]
fn every_list_command_answers_wrongtype_on_other_kinds() {
    let commands = [
        rpush(&["a"]),
        push(ListEnd::Left, &["a"], true),
        l(ListCmd::Pop {
            end: ListEnd::Left,
            count: None,
        }),
        l(ListCmd::Len),
        lrange(0, -1),
        l(ListCmd::Index(0)),
        l(ListCmd::Set {
            index: 0,
            value: b("x"),
        }),
        l(ListCmd::Insert {
            before: true,
            pivot: b("a"),
            value: b("x"),
        }),
        l(ListCmd::Rem {
            count: 0,
            value: b("a"),
        }),
        l(ListCmd::Trim { start: 0, stop: 1 }),
        pos("a", 1, None, 0),
        l(ListCmd::Move {
            from: ListEnd::Left,
            to: ListEnd::Right,
        }),
    ];
    assert_wrongtype(&commands, "list");
}

#[test]
fn an_expired_list_is_absent() {
    let old = expiring(list(&["a", "b"]), NOW_MS - 1);
    assert_eq!(reply(lrange(0, -1), old.clone()), array(&[]));
    assert_eq!(reply(l(ListCmd::Len), old.clone()), Reply::Int(0));
    assert_eq!(
        reply(push(ListEnd::Left, &["x"], true), old.clone()),
        Reply::Int(0)
    );
    let (o, r) = run(rpush(&["c"]), old);
    assert_eq!((o.reply, r.clone()), (Reply::Int(1), list(&["c"])));
    assert_eq!(reply(Command::Type, r), Reply::Status("list"));
}

#[test]
fn a_list_may_not_grow_past_the_limits() {
    let full = list(&["a"; 8]);
    let (o, r) = run(rpush(&["b"]), full.clone());
    assert_eq!(
        (o.reply, r),
        (Reply::Error(CommandError::ValueTooLarge), full.clone())
    );
    let (o, _) = run(
        l(ListCmd::Set {
            index: 0,
            value: b(&"x".repeat(60)),
        }),
        full,
    );
    assert_eq!(o.reply, Reply::Error(CommandError::ValueTooLarge));
}
