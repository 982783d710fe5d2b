//! Client histories: the operations clients issued, with their call and return times and
//! outcomes, the clock readings that bound when each was stamped ([`Clocks`]), and their
//! rendering as the JSON lines of the Porcupine checker (`verify/checker/README.md`). The Rust checker
//! of the same histories is [`crate::linearizability`].
use std::collections::BTreeMap;

use bytes::Bytes;
use logless_commands::command::{
    Command, Condition, ExpireKind, Expiry, HashCmd, ListCmd, ListEnd, Reply, ZRange, ZRangeBy,
    ZSetCmd,
};
use logless_commands::float::Float;
use logless_rmw::ids::Key;

/// How an operation ended, as the client saw it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// A reply arrived.
    Ok(Reply),
    /// No reply, or "outcome unknown": it may have taken effect.
    Unknown,
    /// The store said it was not applied: it never happened and is not checked.
    NotApplied,
}

/// One client operation.
#[derive(Clone, Debug)]
pub struct Operation {
    /// The client that issued it.
    pub client: u32,
    /// The register.
    pub key: Key,
    /// The command.
    pub command: Command,
    /// When it was invoked (simulated µs).
    pub call_us: u64,
    /// When its reply arrived (`u64::MAX` when unknown).
    pub return_us: u64,
    /// How it ended.
    pub outcome: Outcome,
}

/// A whole history, all keys.
#[derive(Clone, Debug, Default)]
pub struct History {
    /// The operations, in invocation order.
    pub operations: Vec<Operation>,
    /// What bounds the stamps the replicas gave the operations (for expiry).
    pub clocks: Clocks,
}

/// What the checker knows about the stamps the replicas gave the operations, in the history's
/// time base (µs). By default (all zero) a stamp lies between its operation's call and return.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Clocks {
    /// The replicas' wall clock at history time 0 (ms since the Unix epoch): maps the
    /// instants of `SET … PXAT` to the history's time base.
    pub epoch_ms: u64,
    /// How far any stamp may lie outside its operation's [call, return] (ms).
    pub skew_ms: u64,
    /// Tighter windows, by index in [`History::operations`]: the stamp lies in `[lo, hi]` µs
    /// (`hi` is `None` for an operation of unknown outcome: no end is known).
    pub stamps_us: BTreeMap<usize, (i64, Option<i64>)>,
}

impl History {
    /// The operations on `key` by call time, one line each: client, call and return time
    /// (µs), command and outcome.
    pub fn describe_key(&self, key: &Key) -> String {
        let mut ops: Vec<_> = (self.operations.iter().enumerate())
            .filter(|(_, o)| &o.key == key)
            .collect();
        ops.sort_by_key(|(_, o)| o.call_us);
        let mut text = String::new();
        for (index, o) in ops {
            let ret = if o.return_us == u64::MAX {
                "∞".to_string()
            } else {
                o.return_us.to_string()
            };
            let out = match &o.outcome {
                Outcome::Ok(r) => format!("{r:?}"),
                Outcome::Unknown => "unknown".into(),
                Outcome::NotApplied => "not applied".into(),
            };
            let stamp = match self.clocks.stamps_us.get(&index) {
                Some((lo, Some(hi))) => format!("  stamp [{lo}, {hi}]"),
                Some((lo, None)) => format!("  stamp [{lo}, ∞)"),
                None => String::new(),
            };
            text += &format!(
                "c{:<3} {:>9} {:>9}  {:?} -> {}{stamp}\n",
                o.client, o.call_us, ret, o.command, out
            );
        }
        text
    }
}

/// The Redis argument array of a command on `key`, for the commands the Porcupine checker
/// models (`verify/checker/README.md`); `None` for the others. A transaction's record is
/// `["MULTI", key]` with its commands in `queued` ([`queued_args`]).
pub fn redis_args(key: &str, command: &Command) -> Option<Vec<String>> {
    let text = |b: &Bytes| String::from_utf8_lossy(b).into_owned();
    let mut args = vec![String::new(), key.to_string()];
    let name = match command {
        Command::Get => "GET",
        Command::Exists => "EXISTS",
        Command::Del => "DEL",
        Command::SMembers => "SMEMBERS",
        Command::SCard => "SCARD",
        Command::IncrBy(n) => {
            args.push(n.to_string());
            "INCRBY"
        }
        Command::SIsMember(m) => {
            args.push(text(m));
            "SISMEMBER"
        }
        Command::SAdd(members) | Command::SRem(members) => {
            args.extend(members.iter().map(text));
            if matches!(command, Command::SAdd(_)) {
                "SADD"
            } else {
                "SREM"
            }
        }
        Command::Set(set) => {
            args.push(text(&set.value));
            match &set.condition {
                Condition::Always => {}
                Condition::Nx => args.push("NX".into()),
                Condition::Xx => args.push("XX".into()),
                Condition::IfEq(v) => args.extend(["IFEQ".into(), text(v)]),
                Condition::IfNe(v) => args.extend(["IFNE".into(), text(v)]),
                _ => return None,
            }
            if set.get {
                args.push("GET".into());
            }
            match set.expiry {
                Expiry::Clear => {}
                Expiry::Keep => args.push("KEEPTTL".into()),
                Expiry::AfterMs(0) | Expiry::AtMs(0) => return None,
                Expiry::AfterMs(ms) => args.extend(["PX".into(), ms.to_string()]),
                Expiry::AtMs(ms) => args.extend(["PXAT".into(), ms.to_string()]),
            }
            "SET"
        }
        Command::Expire(expire) => {
            let flags = expire.flags;
            if flags.gt || flags.lt {
                return None;
            }
            args.push(expire.time.to_string());
            if flags.nx {
                args.push("NX".into());
            }
            if flags.xx {
                args.push("XX".into());
            }
            match expire.kind {
                ExpireKind::Expire => "EXPIRE",
                ExpireKind::PExpire => "PEXPIRE",
                ExpireKind::ExpireAt | ExpireKind::PExpireAt => return None,
            }
        }
        Command::Persist => "PERSIST",
        Command::Ttl => "TTL",
        Command::PTtl => "PTTL",
        Command::DelEx(condition) => {
            match condition {
                Condition::IfEq(v) => args.extend(["IFEQ".into(), text(v)]),
                Condition::IfNe(v) => args.extend(["IFNE".into(), text(v)]),
                _ => return None,
            }
            "DELEX"
        }
        Command::LockAcquire { owner, lease_ms } => {
            args.extend([text(owner), lease_ms.to_string()]);
            "LOCK.ACQUIRE"
        }
        Command::LockRelease { owner } => {
            args.push(text(owner));
            "LOCK.RELEASE"
        }
        Command::Hash(hash) => hash_args(&mut args, hash)?,
        Command::List(list) => list_args(&mut args, list)?,
        Command::ZSet(zset) => zset_args(&mut args, zset)?,
        Command::Transaction(_) => "MULTI",
        _ => return None,
    };
    args[0] = name.into();
    Some(args)
}

/// A transaction's commands as the Porcupine checker's `queued`; `None` for any other command
/// (or one holding a command the checker does not model).
pub fn queued_args(key: &str, command: &Command) -> Option<Vec<Vec<String>>> {
    match command {
        Command::Transaction(queued) => queued.iter().map(|c| redis_args(key, c)).collect(),
        _ => None,
    }
}

fn lossy(b: &Bytes) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// A score the checker models: a whole number within 2^53, as its decimal text.
fn whole(score: Float) -> Option<String> {
    let v = score.get();
    (v.fract() == 0.0 && v.abs() <= 9_007_199_254_740_992.0).then(|| format!("{}", v as i64))
}

fn hash_args(args: &mut Vec<String>, command: &HashCmd) -> Option<&'static str> {
    Some(match command {
        HashCmd::HSet(pairs) => {
            for (field, value) in pairs {
                args.extend([lossy(field), lossy(value)]);
            }
            "HSET"
        }
        HashCmd::HIncrBy { field, delta } => {
            args.extend([lossy(field), delta.to_string()]);
            "HINCRBY"
        }
        HashCmd::HDel(fields) => {
            args.extend(fields.iter().map(lossy));
            "HDEL"
        }
        HashCmd::HGet(field) => {
            args.push(lossy(field));
            "HGET"
        }
        HashCmd::HMGet(fields) => {
            args.extend(fields.iter().map(lossy));
            "HMGET"
        }
        HashCmd::HExists(field) => {
            args.push(lossy(field));
            "HEXISTS"
        }
        HashCmd::HLen => "HLEN",
        HashCmd::HKeys => "HKEYS",
        HashCmd::HVals => "HVALS",
        HashCmd::HGetAll => "HGETALL",
        _ => return None,
    })
}

fn list_args(args: &mut Vec<String>, command: &ListCmd) -> Option<&'static str> {
    let left = |end: &ListEnd| matches!(end, ListEnd::Left);
    Some(match command {
        ListCmd::Push {
            end,
            values,
            only_if_exists,
        } => {
            args.extend(values.iter().map(lossy));
            match (left(end), only_if_exists) {
                (true, false) => "LPUSH",
                (false, false) => "RPUSH",
                (true, true) => "LPUSHX",
                (false, true) => "RPUSHX",
            }
        }
        ListCmd::Pop { end, count } => {
            args.extend(count.map(|c| c.to_string()));
            if left(end) {
                "LPOP"
            } else {
                "RPOP"
            }
        }
        ListCmd::Len => "LLEN",
        ListCmd::Range { start, stop } => {
            args.extend([start.to_string(), stop.to_string()]);
            "LRANGE"
        }
        ListCmd::Index(index) => {
            args.push(index.to_string());
            "LINDEX"
        }
        _ => return None,
    })
}

fn zset_args(args: &mut Vec<String>, command: &ZSetCmd) -> Option<&'static str> {
    Some(match command {
        ZSetCmd::Add { members, flags } => {
            for (flag, word) in [
                (flags.nx, "NX"),
                (flags.xx, "XX"),
                (flags.gt, "GT"),
                (flags.lt, "LT"),
                (flags.ch, "CH"),
                (flags.incr, "INCR"),
            ] {
                if flag {
                    args.push(word.into());
                }
            }
            for (score, member) in members {
                args.extend([whole(*score)?, lossy(member)]);
            }
            "ZADD"
        }
        ZSetCmd::IncrBy { delta, member } => {
            args.extend([whole(*delta)?, lossy(member)]);
            "ZINCRBY"
        }
        ZSetCmd::Rem(members) => {
            args.extend(members.iter().map(lossy));
            "ZREM"
        }
        ZSetCmd::Score(member) => {
            args.push(lossy(member));
            "ZSCORE"
        }
        ZSetCmd::Card => "ZCARD",
        ZSetCmd::Range(ZRange {
            by: ZRangeBy::Index { start, stop },
            rev,
            limit: None,
            with_scores,
        }) => {
            args.extend([start.to_string(), stop.to_string()]);
            if *rev {
                args.push("REV".into());
            }
            if *with_scores {
                args.push("WITHSCORES".into());
            }
            "ZRANGE"
        }
        _ => return None,
    })
}

/// A reply as the checker's output (JSON) to `command`: arrays in the order sent, except
/// SMEMBERS's, sorted as the model's sets are; doubles as their text; RESP3's maps and pairs
/// flattened as RESP2 sends them; a transaction's replies as `items`, each to its command.
fn output_json(command: &Command, reply: &Reply) -> String {
    let quoted = |text: &str| serde_json::to_string(text).expect("a string serialises");
    let array = |items: Vec<String>| {
        let items = serde_json::to_string(&items).expect("strings serialise");
        format!(r#"{{"type":"array","value":{items}}}"#)
    };
    // An element of a flattened map or pairs: a string or a double.
    let element = |r: &Reply| match r {
        Reply::Bulk(b) => lossy(b),
        Reply::Double(f) => lossy(&f.text()),
        other => format!("{other:?}"),
    };
    match reply {
        Reply::Ok => r#"{"type":"ok"}"#.to_string(),
        Reply::Nil | Reply::NilArray => r#"{"type":"nil"}"#.to_string(),
        Reply::Int(n) => format!(r#"{{"type":"int","value":{n}}}"#),
        Reply::Bulk(b) => format!(r#"{{"type":"bulk","value":{}}}"#, quoted(&lossy(b))),
        Reply::Double(f) => format!(r#"{{"type":"bulk","value":{}}}"#, quoted(&lossy(&f.text()))),
        Reply::Status(s) => format!(r#"{{"type":"bulk","value":{}}}"#, quoted(s)),
        Reply::Array(items) => {
            let mut members: Vec<String> = items.iter().map(lossy).collect();
            if matches!(command, Command::SMembers) {
                members.sort();
            }
            array(members)
        }
        Reply::Map(pairs) | Reply::Pairs(pairs) => array(
            pairs
                .iter()
                .flat_map(|(a, b)| [element(a), element(b)])
                .collect(),
        ),
        Reply::Items(items) => {
            let texts: Vec<String> = match command {
                Command::Transaction(queued) => (queued.iter().zip(items))
                    .map(|(c, r)| output_json(c, r))
                    .collect(),
                _ => items.iter().map(|r| output_json(command, r)).collect(),
            };
            format!(r#"{{"type":"items","value":[{}]}}"#, texts.join(","))
        }
        Reply::Error(e) => format!(r#"{{"type":"error","value":{}}}"#, quoted(&e.to_string())),
    }
}

impl History {
    /// The history as the Porcupine checker's JSON lines (`verify/checker/README.md`), every key
    /// prefixed with `key_prefix` (so that many runs can share one file). Fails on a command
    /// the checker does not model.
    pub fn to_checker_lines(&self, key_prefix: &str) -> Result<String, String> {
        use std::fmt::Write;
        // Written field by field rather than through serde_json::Value: the many-seed test
        // writes millions of lines. Strings go through serde_json for their escaping.
        let quoted = |text: &str| serde_json::to_string(text).expect("a string serialises");
        let mut lines = String::new();
        for (index, op) in self.operations.iter().enumerate() {
            let key = format!("{key_prefix}{}", String::from_utf8_lossy(op.key.as_bytes()));
            let cmd = redis_args(&key, &op.command)
                .ok_or_else(|| format!("the checker does not model {:?}", op.command))?;
            let call_ns = op.call_us * 1000;
            let return_ns = match op.return_us {
                u64::MAX => call_ns,
                us => us * 1000,
            };
            let outcome = match op.outcome {
                Outcome::Ok(_) => "ok",
                Outcome::NotApplied => "fail",
                Outcome::Unknown => "unknown",
            };
            let cmd = serde_json::to_string(&cmd).expect("strings serialise");
            let queued = match queued_args(&key, &op.command) {
                Some(queued) => format!(
                    r#","queued":{}"#,
                    serde_json::to_string(&queued).expect("strings serialise")
                ),
                None if matches!(op.command, Command::Transaction(_)) => {
                    return Err(format!("the checker does not model {:?}", op.command))
                }
                None => String::new(),
            };
            let _ = write!(
                lines,
                r#"{{"client":{},"key":{},"cmd":{cmd}{queued},"call":{call_ns},"return":{return_ns},"outcome":"{outcome}""#,
                op.client,
                quoted(&key),
            );
            if self.clocks.skew_ms != 0 {
                let _ = write!(lines, r#","skew_ms":{}"#, self.clocks.skew_ms);
            }
            if self.clocks.epoch_ms != 0 {
                let _ = write!(lines, r#","epoch_ms":{}"#, self.clocks.epoch_ms);
            }
            if let Some((lo, hi)) = self.clocks.stamps_us.get(&index) {
                let _ = write!(lines, r#","stamp_lo":{}"#, lo * 1000);
                if let Some(hi) = hi {
                    let _ = write!(lines, r#","stamp_hi":{}"#, hi * 1000);
                }
            }
            if let Outcome::Ok(reply) = &op.outcome {
                let output = output_json(&op.command, reply);
                let _ = write!(lines, r#","output":{output}"#);
            }
            lines.push_str("}\n");
        }
        Ok(lines)
    }
}
