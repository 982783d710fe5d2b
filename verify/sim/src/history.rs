//! Client histories: the operations clients issued, with their call and return times and
//! outcomes, the clock readings that bound when each was stamped ([`Clocks`]), and their
//! rendering as the JSON lines of the Porcupine checker (`verify/checker/README.md`). The Rust checker
//! of the same histories is [`crate::linearizability`].
use std::collections::BTreeMap;

use bytes::Bytes;
use logless_commands::command::{Command, Condition, ExpireKind, Expiry, Reply};
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
/// models (`verify/checker/README.md`); `None` for the others.
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
        _ => return None,
    };
    args[0] = name.into();
    Some(args)
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
            let _ = write!(
                lines,
                r#"{{"client":{},"key":{},"cmd":{cmd},"call":{call_ns},"return":{return_ns},"outcome":"{outcome}""#,
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
                let output = match reply {
                    Reply::Ok => r#"{"type":"ok"}"#.to_string(),
                    Reply::Nil => r#"{"type":"nil"}"#.to_string(),
                    Reply::Int(n) => format!(r#"{{"type":"int","value":{n}}}"#),
                    Reply::Bulk(b) => format!(
                        r#"{{"type":"bulk","value":{}}}"#,
                        quoted(&String::from_utf8_lossy(b))
                    ),
                    Reply::Status(s) => format!(r#"{{"type":"bulk","value":{}}}"#, quoted(s)),
                    Reply::Array(items) => {
                        let mut members: Vec<String> = items
                            .iter()
                            .map(|b| String::from_utf8_lossy(b).into_owned())
                            .collect();
                        members.sort();
                        let members = serde_json::to_string(&members).expect("strings serialise");
                        format!(r#"{{"type":"array","value":{members}}}"#)
                    }
                    Reply::Error(e) => {
                        format!(r#"{{"type":"error","value":{}}}"#, quoted(&e.to_string()))
                    }
                    // The simulated workloads issue no data-type commands yet.
                    other => format!(
                        r#"{{"type":"other","value":{}}}"#,
                        quoted(&format!("{other:?}"))
                    ),
                };
                let _ = write!(lines, r#","output":{output}"#);
            }
            lines.push_str("}\n");
        }
        Ok(lines)
    }
}
