//! The workload's commands as the Redis requests a client sends, so that every command of a
//! whole-node run goes through the node's Redis session (`logless_redis::session`) and every
//! answer comes back through it, as on a real connection.
use bytes::Bytes;
use logless_commands::command::{
    Command, Condition, Expiry, HashCmd, ListCmd, ListEnd, SetArgs, ZRange, ZRangeBy, ZSetCmd,
};
use logless_node::turn::{answer_of, CommandResult};
use logless_redis::resp::Value;
use logless_redis::session::{Session, Step};
use logless_redis::table::ReplyShape;
use logless_rmw::ids::Key;

use crate::history::Outcome;

/// The Redis request that asks for `command` on `key`.
///
/// # Panics
/// For a command the workload never sends.
pub fn request(key: &Key, command: &Command) -> Vec<Bytes> {
    let word = |w: &'static str| Bytes::from_static(w.as_bytes());
    let mut args = vec![Bytes::new(), Bytes::copy_from_slice(key.as_bytes())];
    let name = match command {
        Command::Get => "GET",
        Command::Del => "DEL",
        Command::Exists => "EXISTS",
        Command::Ttl => "TTL",
        Command::PTtl => "PTTL",
        Command::Persist => "PERSIST",
        Command::SMembers => "SMEMBERS",
        Command::SCard => "SCARD",
        Command::IncrBy(1) => "INCR",
        Command::IncrBy(delta) => {
            args.push(number(*delta));
            "INCRBY"
        }
        Command::SAdd(members) | Command::SRem(members) => {
            args.extend(members.iter().cloned());
            if matches!(command, Command::SAdd(_)) {
                "SADD"
            } else {
                "SREM"
            }
        }
        Command::SIsMember(member) => {
            args.push(member.clone());
            "SISMEMBER"
        }
        Command::LockAcquire { owner, lease_ms } => {
            args.push(owner.clone());
            args.push(number(*lease_ms as i64));
            "LOCK.ACQUIRE"
        }
        Command::LockRelease { owner } => {
            args.push(owner.clone());
            "LOCK.RELEASE"
        }
        Command::DelEx(condition) => {
            push_condition(&mut args, condition);
            "DELEX"
        }
        Command::Expire(expire) => {
            args.push(number(expire.time));
            for (set, flag) in [
                (expire.flags.nx, "NX"),
                (expire.flags.xx, "XX"),
                (expire.flags.gt, "GT"),
                (expire.flags.lt, "LT"),
            ] {
                if set {
                    args.push(word(flag));
                }
            }
            expire.kind.name()
        }
        Command::Set(SetArgs {
            value,
            condition,
            get,
            expiry,
        }) => {
            args.push(value.clone());
            push_condition(&mut args, condition);
            if *get {
                args.push(word("GET"));
            }
            match expiry {
                Expiry::Clear => {}
                Expiry::Keep => args.push(word("KEEPTTL")),
                Expiry::AfterMs(ms) => args.extend([word("PX"), number(*ms as i64)]),
                Expiry::AtMs(ms) => args.extend([word("PXAT"), number(*ms as i64)]),
            }
            "SET"
        }
        Command::Hash(hash) => hash_request(&mut args, hash),
        Command::List(list) => list_request(&mut args, list),
        Command::ZSet(zset) => zset_request(&mut args, zset),
        other => panic!("the workload does not send {other:?}"),
    };
    args[0] = Bytes::from(name.to_ascii_uppercase());
    args
}

fn number(n: i64) -> Bytes {
    Bytes::from(n.to_string())
}

/// A hash command's arguments after the key, pushed on `args`; returns its name.
fn hash_request(args: &mut Vec<Bytes>, command: &HashCmd) -> &'static str {
    match command {
        HashCmd::HSet(pairs) => {
            for (field, value) in pairs {
                args.extend([field.clone(), value.clone()]);
            }
            "HSET"
        }
        HashCmd::HIncrBy { field, delta } => {
            args.extend([field.clone(), number(*delta)]);
            "HINCRBY"
        }
        HashCmd::HDel(fields) => {
            args.extend(fields.iter().cloned());
            "HDEL"
        }
        HashCmd::HGet(field) => {
            args.push(field.clone());
            "HGET"
        }
        HashCmd::HGetAll => "HGETALL",
        other => panic!("the workload does not send {other:?}"),
    }
}

/// A list command's arguments after the key, pushed on `args`; returns its name.
fn list_request(args: &mut Vec<Bytes>, command: &ListCmd) -> &'static str {
    let left = |end: &ListEnd| matches!(end, ListEnd::Left);
    match command {
        ListCmd::Push {
            end,
            values,
            only_if_exists: false,
        } => {
            args.extend(values.iter().cloned());
            if left(end) {
                "LPUSH"
            } else {
                "RPUSH"
            }
        }
        ListCmd::Pop { end, count: None } => {
            if left(end) {
                "LPOP"
            } else {
                "RPOP"
            }
        }
        ListCmd::Range { start, stop } => {
            args.extend([number(*start), number(*stop)]);
            "LRANGE"
        }
        ListCmd::Len => "LLEN",
        other => panic!("the workload does not send {other:?}"),
    }
}

/// A sorted-set command's arguments after the key, pushed on `args`; returns its name. Scores
/// are written as Redis writes doubles.
fn zset_request(args: &mut Vec<Bytes>, command: &ZSetCmd) -> &'static str {
    match command {
        ZSetCmd::Add { members, flags } if *flags == Default::default() => {
            for (score, member) in members {
                args.extend([score.text(), member.clone()]);
            }
            "ZADD"
        }
        ZSetCmd::IncrBy { delta, member } => {
            args.extend([delta.text(), member.clone()]);
            "ZINCRBY"
        }
        ZSetCmd::Rem(members) => {
            args.extend(members.iter().cloned());
            "ZREM"
        }
        ZSetCmd::Score(member) => {
            args.push(member.clone());
            "ZSCORE"
        }
        ZSetCmd::Range(ZRange {
            by: ZRangeBy::Index { start, stop },
            rev: false,
            limit: None,
            with_scores,
        }) => {
            args.extend([number(*start), number(*stop)]);
            if *with_scores {
                args.push(Bytes::from_static(b"WITHSCORES"));
            }
            "ZRANGE"
        }
        other => panic!("the workload does not send {other:?}"),
    }
}

fn push_condition(args: &mut Vec<Bytes>, condition: &Condition) {
    let (option, value) = match condition {
        Condition::Always => return,
        Condition::Nx => ("NX", None),
        Condition::Xx => ("XX", None),
        Condition::IfEq(v) => ("IFEQ", Some(v.clone())),
        Condition::IfNe(v) => ("IFNE", Some(v.clone())),
        Condition::IfDigestEq(d) => ("IFDEQ", Some(Bytes::from(format!("{d:016x}")))),
        Condition::IfDigestNe(d) => ("IFDNE", Some(Bytes::from(format!("{d:016x}")))),
    };
    args.push(Bytes::from_static(option.as_bytes()));
    args.extend(value);
}

/// Gives the request for `command` on `key` to a client's session and returns the command to
/// submit with the shape of its reply, and the request's first word (`EXEC` for a
/// transaction), which a ring node routes by.
///
/// # Panics
/// If the session does not ask for exactly the command the workload meant: the table and the
/// workload disagree, and the history would check something the client never asked.
pub fn submit(session: &mut Session, key: &Key, command: &Command) -> (Command, ReplyShape, Bytes) {
    let args = match command {
        // MULTI, each command (QUEUED), then EXEC, which the session makes the transaction.
        Command::Transaction(queued) => {
            expect_status(session, &[Bytes::from_static(b"MULTI")], "OK");
            for command in queued {
                expect_status(session, &request(key, command), "QUEUED");
            }
            vec![Bytes::from_static(b"EXEC")]
        }
        _ => request(key, command),
    };
    match session.handle(&args) {
        Step::One {
            key: parsed_key,
            command: parsed,
            shape,
        } => {
            assert_eq!(
                &parsed_key[..],
                key.as_bytes(),
                "the session's key of {args:?}"
            );
            assert_eq!(&parsed, command, "the session's command for {args:?}");
            (parsed, shape, args[0].clone())
        }
        other => panic!("{args:?} should be one register command, the session gave {other:?}"),
    }
}

/// Sends `args`, which the session must answer with the status `want` at once.
fn expect_status(session: &mut Session, args: &[Bytes], want: &str) {
    match session.handle(args) {
        Step::Reply(Value::Simple(status)) if status == want => {}
        other => panic!("{args:?} should answer {want}, the session gave {other:?}"),
    }
}

/// What the client learns from the reply the session builds of `result` (`None`: no answer,
/// as after a timeout). Whether a command was applied, was not or may have been, is read from
/// the reply as a client reads it (TRYAGAIN, UNCERTAIN); the reply of an applied command is the
/// engine's, which the session showed as `shape` says.
pub fn outcome(shape: ReplyShape, result: Option<CommandResult>) -> Outcome {
    let Some(result) = result else {
        return Outcome::Unknown;
    };
    let answer = answer_of(result);
    let value = Session::reply(shape, &answer);
    match (&value, answer) {
        (Value::Error(text), Err(_)) if text.starts_with("TRYAGAIN ") => Outcome::NotApplied,
        (Value::Error(text), Err(_)) if text.starts_with("MISCONF disk full") => {
            Outcome::NotApplied
        }
        (Value::Error(text), Err(_)) if text.starts_with("UNCERTAIN ") => Outcome::Unknown,
        (_, Ok(reply)) => Outcome::Ok(reply),
        (value, Err(failure)) => {
            panic!("the session answered {failure:?} with {value:?}, which says neither")
        }
    }
}
