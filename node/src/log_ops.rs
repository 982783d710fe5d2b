//! What the Redis session's steps become under the log engine, and how the log's answers are
//! shown to the client.
//!
//! Every step is ONE operation of the replicated map, so one log entry: a single-key command
//! as it is; DEL, EXISTS and MGET of several keys as the map's multi-key operations (one
//! atomic snapshot, where the per-key engine answers each key on its own); MSET, RENAME, ...
//! and MULTI/EXEC over several keys as the map's operations and transactions (a transaction may
//! hold any of these but another transaction; in EXEC's array each answers as it would alone:
//! DEL and EXISTS their count, MGET its array, MSET OK); WATCH as the map's stamps of its keys,
//! which the session keeps, and EXEC after it as a transaction the map checks against them.
//! The answers are
//! the map's [`Response`]s, shown as the per-key engine's replies are shown
//! (`logless_redis::table::reply_to_value`), so that a client cannot tell the engines apart by
//! a reply.
use bytes::Bytes;
use logless_commands::command::{Command, CommandError};
use logless_multipaxos::kv::{Operation, Response};
use logless_redis::resp::Value;
use logless_redis::session::{Failure, Session};
use logless_redis::table::cross_key::{CrossKey, Queued};
use logless_redis::table::{Combine, ReplyShape};

use crate::log_turn::LogAnswer;

/// How a response is shown: as one command's reply, or combined as a multi-key command's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shown {
    /// One reply, in this shape.
    Shape(ReplyShape),
    /// The combined reply of DEL, EXISTS (a sum) or MGET (an array).
    Combine(Combine),
}

/// The operation of a single-key command.
pub fn single(key: Bytes, command: Command) -> Operation {
    Operation::Command { key, command }
}

/// The one operation of a multi-key DEL, EXISTS or MGET (the session's `Step::Many`).
pub fn many(parts: Vec<(Bytes, Command)>, combine: Combine) -> Operation {
    let keys = || parts.iter().map(|(key, _)| key.clone()).collect();
    let all = |wanted: &Command| parts.iter().all(|(_, command)| command == wanted);
    match combine {
        Combine::Sum if all(&Command::Del) => Operation::Del(keys()),
        Combine::Sum if all(&Command::Exists) => Operation::Exists(keys()),
        Combine::Array if all(&Command::Get) => Operation::MGet(keys()),
        // Any other combination runs as a transaction; its items are combined below.
        Combine::Sum | Combine::Array => Operation::Transaction(
            parts
                .into_iter()
                .map(|(key, command)| single(key, command))
                .collect(),
        ),
    }
}

/// The operation of a step over several keys.
pub fn cross(op: CrossKey) -> Operation {
    match op {
        CrossKey::MSet(pairs) => Operation::MSet(pairs),
        CrossKey::MSetNx(pairs) => Operation::MSetNx(pairs),
        CrossKey::Rename { from, to } => Operation::Rename { from, to },
        CrossKey::RenameNx { from, to } => Operation::RenameNx { from, to },
        CrossKey::SMove { from, to, member } => Operation::SMove { from, to, member },
        CrossKey::Copy { from, to, replace } => Operation::Copy { from, to, replace },
        CrossKey::Transaction(items) => Operation::Transaction(queued(items)),
        CrossKey::WatchedTransaction { watched, items } => Operation::WatchedTransaction {
            watched,
            operations: queued(items),
        },
    }
}

/// A transaction's queued commands as operations.
fn queued(items: Vec<Queued>) -> Vec<Operation> {
    items
        .into_iter()
        .map(|item| match item {
            Queued::One(key, command) => single(key, command),
            Queued::Many(parts, combine) => many(parts, combine),
            Queued::Cross(op) => cross(op),
        })
        .collect()
}

/// The client's reply to WATCH of `keys` (the session's `Step::Watch`), whose operation got
/// `answer`: the session keeps the stamps and answers OK, or the failure is shown and nothing
/// is watched.
pub fn watched(session: &mut Session, keys: Vec<Bytes>, answer: LogAnswer) -> Value {
    let response = match answer {
        Err(failure) => return Session::reply(ReplyShape::Plain, &Err(failure)),
        Ok(response) => response,
    };
    let stamps: Option<Vec<u64>> = match &response {
        Response::Items(items) if items.len() == keys.len() => items
            .iter()
            .map(|item| match item {
                Response::Int(stamp) => u64::try_from(*stamp).ok(),
                _ => None,
            })
            .collect(),
        _ => None,
    };
    match (stamps, response) {
        (Some(stamps), _) => session.watched(keys, stamps),
        (None, Response::Error(text)) => Value::Error(text),
        (None, other) => Value::Error(format!("ERR WATCH got an unexpected answer: {other:?}")),
    }
}

/// The client's reply to an operation's answer.
pub fn reply(answer: LogAnswer, shown: Shown) -> Value {
    match answer {
        Err(failure) => failure_value(failure, shown),
        Ok(response) => match shown {
            Shown::Shape(shape) => value(&response, shape),
            Shown::Combine(combine) => combined(&response, combine),
        },
    }
}

/// A failure shown as the session shows the per-key engine's.
fn failure_value(failure: Failure, shown: Shown) -> Value {
    match shown {
        Shown::Shape(shape) => Session::reply(shape, &Err(failure)),
        Shown::Combine(combine) => Session::combine(combine, vec![Err(failure)]),
    }
}

/// A response shown in `shape`, as `reply_to_value` shows a register reply.
fn value(response: &Response, shape: ReplyShape) -> Value {
    let plain = |r: &Response| value(r, ReplyShape::Plain);
    match (response, shape) {
        (Response::Ok, ReplyShape::SetNx) => Value::Int(1),
        (Response::Nil, ReplyShape::SetNx) => Value::Int(0),
        (Response::Error(text), ReplyShape::ExpireErrorsOf(name))
            if *text == CommandError::InvalidExpireTime.to_string() =>
        {
            Value::Error(CommandError::InvalidExpireTimeIn(name).to_string())
        }
        (Response::Error(text), _) => Value::Error(text.clone()),
        (_, ReplyShape::Ok) | (Response::Ok, _) => Value::Simple("OK".to_owned()),
        (Response::Nil, _) => Value::Nil,
        (Response::Int(i), _) => Value::Int(*i),
        (Response::Bulk(b), _) => Value::Bulk(b.clone()),
        (Response::Status(s), _) => Value::Simple(s.clone()),
        (Response::Array(items), ReplyShape::Set) => {
            Value::Set(items.iter().cloned().map(Value::Bulk).collect())
        }
        (Response::Array(items), _) => {
            Value::Array(items.iter().cloned().map(Value::Bulk).collect())
        }
        (Response::Double(d), _) => Value::Double(d.get()),
        (Response::NilArray, _) => Value::NilArray,
        (Response::Items(items), ReplyShape::Exec(shapes)) => Value::Array(
            items
                .iter()
                .enumerate()
                .map(|(i, r)| value(r, shapes.get(i)))
                .collect(),
        ),
        (Response::Items(items), _) => Value::Array(items.iter().map(plain).collect()),
        (Response::Map(pairs), _) => {
            Value::Map(pairs.iter().map(|(k, v)| (plain(k), plain(v))).collect())
        }
        (Response::Pairs(pairs), _) => {
            Value::Pairs(pairs.iter().map(|(k, v)| (plain(k), plain(v))).collect())
        }
    }
}

/// The combined reply of DEL, EXISTS or MGET: the map's count or items as they are, or a
/// transaction's items combined as the per-key engine combines its parts' replies.
fn combined(response: &Response, combine: Combine) -> Value {
    match (response, combine) {
        (Response::Error(text), _) => Value::Error(text.clone()),
        (Response::Int(n), Combine::Sum) => Value::Int(*n),
        (Response::Items(items), Combine::Sum) => {
            let mut sum: i64 = 0;
            for item in items {
                match item {
                    Response::Int(n) => sum = sum.saturating_add(*n),
                    Response::Error(text) => return Value::Error(text.clone()),
                    _ => return Value::Error(CommandError::WrongType.to_string()),
                }
            }
            Value::Int(sum)
        }
        (Response::Items(items), Combine::Array) => Value::Array(
            items
                .iter()
                .map(|item| match item {
                    Response::Bulk(b) => Value::Bulk(b.clone()),
                    _ => Value::Nil,
                })
                .collect(),
        ),
        (other, _) => value(other, ReplyShape::Plain),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(k: &str) -> Bytes {
        Bytes::copy_from_slice(k.as_bytes())
    }

    #[test]
    fn multi_key_commands_are_one_operation_of_the_map() {
        let del = vec![(key("a"), Command::Del), (key("b"), Command::Del)];
        assert_eq!(
            many(del, Combine::Sum),
            Operation::Del(vec![key("a"), key("b")])
        );
        let mget = vec![(key("a"), Command::Get), (key("b"), Command::Get)];
        assert_eq!(
            many(mget, Combine::Array),
            Operation::MGet(vec![key("a"), key("b")])
        );
        assert_eq!(
            cross(CrossKey::Rename {
                from: key("a"),
                to: key("b")
            }),
            Operation::Rename {
                from: key("a"),
                to: key("b")
            }
        );
    }

    #[test]
    fn a_transaction_holds_commands_over_several_keys_as_their_own_operations() {
        let queued = CrossKey::Transaction(vec![
            Queued::One(key("a"), Command::IncrBy(1)),
            Queued::Many(
                vec![(key("a"), Command::Get), (key("b"), Command::Get)],
                Combine::Array,
            ),
            Queued::Cross(CrossKey::MSet(vec![(key("c"), key("1"))])),
        ]);
        assert_eq!(
            cross(queued),
            Operation::Transaction(vec![
                single(key("a"), Command::IncrBy(1)),
                Operation::MGet(vec![key("a"), key("b")]),
                Operation::MSet(vec![(key("c"), key("1"))]),
            ])
        );
        // In EXEC's array each shows as it would alone.
        let mut shapes = logless_redis::table::ExecShapes::default();
        for _ in 0..3 {
            shapes.push(ReplyShape::Plain);
        }
        assert_eq!(
            reply(
                Ok(Response::Items(vec![
                    Response::Int(1),
                    Response::Items(vec![Response::Bulk(key("1")), Response::Nil]),
                    Response::Ok,
                ])),
                Shown::Shape(ReplyShape::Exec(shapes))
            ),
            Value::Array(vec![
                Value::Int(1),
                Value::Array(vec![Value::Bulk(key("1")), Value::Nil]),
                Value::Simple("OK".into()),
            ])
        );
    }

    #[test]
    fn watch_keeps_the_stamps_only_of_an_answer_with_one_per_key() {
        let mut session = Session::new(1).with_total_order(true);
        let keys = || vec![key("a"), key("b")];
        let stamps = Ok(Response::Items(vec![Response::Int(4), Response::Int(9)]));
        assert_eq!(
            watched(&mut session, keys(), stamps),
            Value::Simple("OK".into())
        );
        assert_eq!(session.watched_keys(), [(key("a"), 4), (key("b"), 9)]);
        // A failure, an error or a malformed answer watches nothing more.
        let refused = watched(&mut session, keys(), Err(Failure::NotApplied));
        assert_eq!(
            refused,
            Session::reply(ReplyShape::Plain, &Err(Failure::NotApplied))
        );
        let error = Ok(Response::Error("ERR boom".into()));
        assert_eq!(
            watched(&mut session, keys(), error),
            Value::Error("ERR boom".into())
        );
        let short = Ok(Response::Items(vec![Response::Int(4)]));
        assert!(matches!(
            watched(&mut session, keys(), short),
            Value::Error(_)
        ));
        assert_eq!(session.watched_keys().len(), 2);
    }

    #[test]
    fn responses_are_shown_as_the_per_key_engines_replies() {
        let shown = |r: Response, shape| reply(Ok(r), Shown::Shape(shape));
        assert_eq!(shown(Response::Ok, ReplyShape::SetNx), Value::Int(1));
        assert_eq!(
            shown(Response::Ok, ReplyShape::Plain),
            Value::Simple("OK".into())
        );
        assert_eq!(
            shown(
                Response::Error(CommandError::InvalidExpireTime.to_string()),
                ReplyShape::ExpireErrorsOf("setex")
            ),
            Value::Error("ERR invalid expire time in 'setex' command".into())
        );
        assert_eq!(
            reply(
                Ok(Response::Items(vec![
                    Response::Bulk(key("1")),
                    Response::Int(3)
                ])),
                Shown::Combine(Combine::Array)
            ),
            Value::Array(vec![Value::Bulk(key("1")), Value::Nil])
        );
        assert_eq!(
            reply(Ok(Response::Int(2)), Shown::Combine(Combine::Sum)),
            Value::Int(2)
        );
        assert_eq!(
            reply(
                Err(Failure::OutcomeUnknown),
                Shown::Shape(ReplyShape::Plain)
            ),
            Session::reply(ReplyShape::Plain, &Err(Failure::OutcomeUnknown))
        );
    }
}
