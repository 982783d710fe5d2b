//! The Redis commands of the psmr engine: the B⁺-tree key-value service's commands
//! ([`KvCommand`]) as Redis spells them, and their replies; or, under `--service netfs`,
//! NetFS's requests, each carried whole by one command.
//!
//! Under the B⁺-tree service (`--service btree`, the default):
//!
//! | Redis                               | service command | reply                          |
//! |-------------------------------------|-----------------|--------------------------------|
//! | `SET key value NX`                  | insert          | `OK`, or nil if present        |
//! | `SET key value XX`                  | update          | `OK`, or nil if absent         |
//! | `GET key`                           | read            | the value, or nil              |
//! | `DEL key`                           | delete          | 1, or 0 if absent              |
//! | `LOGLESS.RANGE start [COUNT n]`     | range read      | `[key, value, key, value, …]`  |
//! | `LOGLESS.DIGEST`                    | (none)          | this replica's state digest    |
//!
//! `LOGLESS.RANGE` returns the entries from `start` (inclusive) in key order, at most `n`
//! (default [`RANGE_COUNT_DEFAULT`], at most [`RANGE_COUNT_MAX`]), as one flat array like
//! `HGETALL`'s. Plain `SET` (an upsert) is refused: the service has no command that inserts or
//! updates, and running it as an update and then an insert would be two commands, not one
//! atomic step. Every other data command, `MULTI` and the commands over the whole keyspace
//! (`SCAN`, `KEYS`, `DBSIZE`, `FLUSHALL`, …) are refused with an error that lists what the engine
//! serves. Connection and server commands (`PING`, `AUTH`, `HELLO`, `INFO`, `CONFIG`, `CLIENT`,
//! `QUIT`, …) are the session's, as under the other engines, and so are logins and ACLs: a data
//! command is submitted only once the session has accepted it (or, for the two `LOGLESS.`
//! commands it does not know, once the connection is logged in; `LOGLESS.RANGE` names every
//! key, so it needs a user who may access every key, as `SCAN` does).
//!
//! Under NetFS (`--service netfs`) the data commands are two:
//!
//! | Redis                  | reply                                                      |
//! |------------------------|------------------------------------------------------------|
//! | `LOGLESS.FS <request>` | the reply frame (bulk), NetFS's lz4 frames both ways       |
//! | `LOGLESS.DIGEST`       | this replica's state digest                                |
//!
//! The request is one [`logless_netfs::FsCommand`] as NetFS encodes it; C-G (NetFS's: the
//! calls that change the tree to `g_all`, the rest by path) routes it like any command. A
//! request that does not decode is answered by NetFS with its malformed reply. The file system
//! is every key's, so `LOGLESS.FS` needs a user who may access every key. `GET`, `SET`, `DEL`
//! and `LOGLESS.RANGE` are refused under NetFS, and `LOGLESS.FS` under the B⁺-tree service,
//! with an error that says which service the replica runs.
use bytes::Bytes;
use logless_btree::service::RANGE_COUNT_MAX;
use logless_btree::{KvCommand, KvReply};
use logless_redis::acl::{self, Acl};
use logless_redis::resp::Value;
use logless_redis::session::{failure_value, NodeQuery, Session, Step};
use logless_redis::table::admin::Admin;
use logless_service::Wire;

use crate::psmr_service::ServiceKind;
use crate::psmr_turn::PsmrAnswer;

/// How many entries `LOGLESS.RANGE` returns without `COUNT`.
pub const RANGE_COUNT_DEFAULT: u64 = 10;

/// What the engine serves under the B⁺-tree service, for its refusals.
const SERVED: &str = "SET key value NX (insert), SET key value XX (update), GET key, DEL key, \
                      LOGLESS.RANGE start [COUNT n], LOGLESS.DIGEST";

/// What the engine serves under NetFS, for its refusals.
const SERVED_NETFS: &str = "LOGLESS.FS <request frame>, LOGLESS.DIGEST";

/// What the front end does with one request under the psmr engine.
#[derive(Debug, PartialEq)]
pub enum PsmrStep {
    /// What the session decided (a reply, or a node query the engine serves).
    Session(Step),
    /// Submit this command to the B⁺-tree service.
    Submit(KvCommand),
    /// Submit this NetFS request frame as it is.
    Frame(Bytes),
    /// Answer with this replica's state digest.
    Digest,
}

impl PsmrStep {
    /// The command to submit, encoded for the service, if the step submits one.
    pub fn encoded(self) -> Option<Bytes> {
        match self {
            PsmrStep::Submit(command) => Some(encode(&command)),
            PsmrStep::Frame(frame) => Some(frame),
            PsmrStep::Session(_) | PsmrStep::Digest => None,
        }
    }
}

/// Decides what to do with one request (`args` non-empty, the command name first) under
/// `service`. The session should be built [`Session::with_total_order`], so that commands over
/// several keys come back as steps, refused here as the engine's, not as the per-key engine's.
pub fn handle_for(
    session: &mut Session,
    acl: &Acl,
    service: ServiceKind,
    args: &[Bytes],
) -> PsmrStep {
    let name = args[0].to_ascii_uppercase();
    let own = match service {
        ServiceKind::Btree => matches!(&name[..], b"GET" | b"SET" | b"DEL" | b"LOGLESS.RANGE"),
        ServiceKind::NetFs => name == b"LOGLESS.FS".as_slice(),
    };
    let data = matches!(
        &name[..],
        b"GET" | b"SET" | b"DEL" | b"LOGLESS.RANGE" | b"LOGLESS.FS"
    );
    if data && !own {
        return reply_error(refusal(service, &args[0]));
    }
    match &name[..] {
        b"GET" | b"SET" | b"DEL" => match session.handle(args) {
            // The session checked the login, the ACL and the arguments' sizes.
            Step::One { .. } | Step::Many { .. } => match service_command(&name, args) {
                Ok(command) => PsmrStep::Submit(command),
                Err(text) => reply_error(text),
            },
            Step::Reply(value) => PsmrStep::Session(Step::Reply(value)),
            _ => reply_error(refusal(service, &args[0])),
        },
        b"LOGLESS.RANGE" | b"LOGLESS.DIGEST" | b"LOGLESS.FS" => {
            let Some(user) = session.user() else {
                return reply_error(acl::NOAUTH.to_owned());
            };
            let every_key = acl
                .users()
                .iter()
                .find(|u| u.name == user)
                .is_some_and(|u| u.may_access_every_key());
            if name == b"LOGLESS.DIGEST".as_slice() {
                return PsmrStep::Digest;
            }
            if !every_key {
                return reply_error(acl::NOPERM_KEY.to_owned());
            }
            if name == b"LOGLESS.FS".as_slice() {
                return match args {
                    [_, request] => PsmrStep::Frame(request.clone()),
                    _ => reply_error("ERR syntax error: LOGLESS.FS <request frame>".into()),
                };
            }
            match range(args) {
                Ok(command) => PsmrStep::Submit(command),
                Err(text) => reply_error(text),
            }
        }
        b"MULTI" => reply_error(refusal(service, &args[0])),
        _ => match session.handle(args) {
            Step::One { .. } | Step::Many { .. } | Step::Cross { .. } => {
                reply_error(refusal(service, &args[0]))
            }
            Step::Node(NodeQuery::DbSize)
            | Step::Node(NodeQuery::Admin(
                Admin::Scan(_) | Admin::Keys(_) | Admin::RandomKey | Admin::Flush,
            )) => reply_error(refusal(service, &args[0])),
            step => PsmrStep::Session(step),
        },
    }
}

fn reply_error(text: String) -> PsmrStep {
    PsmrStep::Session(Step::Reply(Value::Error(text)))
}

/// The error for a command this engine does not serve under `service`.
pub fn refusal(service: ServiceKind, name: &[u8]) -> String {
    let (what, served) = match service {
        ServiceKind::Btree => ("the B+-tree service", SERVED),
        ServiceKind::NetFs => ("NetFS (--service netfs)", SERVED_NETFS),
    };
    format!(
        "ERR this engine serves {what}: '{}' is not one of its commands ({served})",
        String::from_utf8_lossy(name).to_lowercase()
    )
}

/// GET, SET NX|XX or DEL as the service's command.
fn service_command(name: &[u8], args: &[Bytes]) -> Result<KvCommand, String> {
    let key = || args[1].to_vec();
    match (name, args.len()) {
        (b"GET", 2) => Ok(KvCommand::Read { key: key() }),
        (b"DEL", 2) => Ok(KvCommand::Delete { key: key() }),
        (b"DEL", _) => Err(
            "ERR this engine serves the B+-tree service: DEL takes one key (each delete is one \
             command of the service)"
                .into(),
        ),
        (b"SET", 4) => {
            let value = args[2].to_vec();
            match &args[3].to_ascii_uppercase()[..] {
                b"NX" => Ok(KvCommand::Insert { key: key(), value }),
                b"XX" => Ok(KvCommand::Update { key: key(), value }),
                _ => Err(set_refusal()),
            }
        }
        (b"SET", _) => Err(set_refusal()),
        _ => Err(refusal(ServiceKind::Btree, name)),
    }
}

fn set_refusal() -> String {
    "ERR this engine serves the B+-tree service: SET takes NX (insert) or XX (update) and no \
     other option; a plain SET (insert or update) is not one command of the service"
        .into()
}

/// `LOGLESS.RANGE start [COUNT n]`.
fn range(args: &[Bytes]) -> Result<KvCommand, String> {
    let usage = || "ERR syntax error: LOGLESS.RANGE start [COUNT n]".to_string();
    let start = args.get(1).ok_or_else(usage)?.to_vec();
    let count = match &args[2..] {
        [] => RANGE_COUNT_DEFAULT,
        [word, n] if word.eq_ignore_ascii_case(b"COUNT") => std::str::from_utf8(n)
            .ok()
            .and_then(|n| n.parse::<u64>().ok())
            .filter(|n| (1..=RANGE_COUNT_MAX).contains(n))
            .ok_or_else(|| format!("ERR COUNT must be between 1 and {RANGE_COUNT_MAX}"))?,
        _ => return Err(usage()),
    };
    Ok(KvCommand::Range { start, count })
}

/// The client's reply to a command's answer under `service`: the B⁺-tree's reply as Redis
/// shows it, or NetFS's reply frame as it is.
pub fn reply_for(service: ServiceKind, answer: PsmrAnswer) -> Value {
    let bytes = match answer {
        Ok(bytes) => bytes,
        Err(failure) => return failure_value(failure),
    };
    if service == ServiceKind::NetFs {
        return Value::Bulk(bytes);
    }
    match KvReply::decode(&bytes) {
        Ok(KvReply::Stored(true)) => Value::Simple("OK".into()),
        Ok(KvReply::Stored(false)) => Value::Nil,
        Ok(KvReply::Value(Some(value))) => Value::Bulk(Bytes::from(value)),
        Ok(KvReply::Value(None)) => Value::Nil,
        Ok(KvReply::Deleted(deleted)) => Value::Int(i64::from(deleted)),
        Ok(KvReply::Entries(entries)) => Value::Array(
            entries
                .into_iter()
                .flat_map(|(key, value)| [Value::Bulk(key.into()), Value::Bulk(value.into())])
                .collect(),
        ),
        Ok(KvReply::Malformed(text)) => Value::Error(format!("ERR {text}")),
        Err(e) => Value::Error(format!("ERR the service's reply does not decode: {e}")),
    }
}

/// `LOGLESS.DIGEST`: this replica's state digest, as hex (an error if the engine stopped).
pub async fn digest(context: &crate::context::NodeContext) -> Value {
    match crate::status::psmr_status(context).await {
        Some(status) => Value::Bulk(Bytes::from(status.digest)),
        None => Value::Error("ERR the psmr engine has stopped".into()),
    }
}

/// Encodes a command for the engine.
pub fn encode(command: &KvCommand) -> Bytes {
    Bytes::from(command.encode_to_vec())
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    fn args(words: &[&str]) -> Vec<Bytes> {
        words
            .iter()
            .map(|w| Bytes::copy_from_slice(w.as_bytes()))
            .collect()
    }

    fn step(words: &[&str]) -> PsmrStep {
        let acl = Arc::new(Acl::default());
        let mut session = Session::new(1).with_acl(acl.clone()).with_total_order(true);
        handle_for(&mut session, &acl, ServiceKind::Btree, &args(words))
    }

    fn step_netfs(words: &[&str]) -> PsmrStep {
        let acl = Arc::new(Acl::default());
        let mut session = Session::new(1).with_acl(acl.clone()).with_total_order(true);
        handle_for(&mut session, &acl, ServiceKind::NetFs, &args(words))
    }

    fn submit(command: KvCommand) -> PsmrStep {
        PsmrStep::Submit(command)
    }

    fn refused(words: &[&str]) -> String {
        match step(words) {
            PsmrStep::Session(Step::Reply(Value::Error(text))) => text,
            other => panic!("{words:?} gave {other:?}"),
        }
    }

    #[test]
    fn redis_commands_map_to_the_services_commands() {
        let key = b"k".to_vec();
        let value = b"v".to_vec();
        assert_eq!(
            step(&["set", "k", "v", "nx"]),
            submit(KvCommand::Insert {
                key: key.clone(),
                value: value.clone()
            })
        );
        assert_eq!(
            step(&["SET", "k", "v", "XX"]),
            submit(KvCommand::Update {
                key: key.clone(),
                value
            })
        );
        assert_eq!(
            step(&["GET", "k"]),
            submit(KvCommand::Read { key: key.clone() })
        );
        assert_eq!(
            step(&["DEL", "k"]),
            submit(KvCommand::Delete { key: key.clone() })
        );
        assert_eq!(
            step(&["logless.range", "k", "COUNT", "3"]),
            submit(KvCommand::Range {
                start: key,
                count: 3
            })
        );
        assert_eq!(step(&["LOGLESS.DIGEST"]), PsmrStep::Digest);
        assert!(matches!(step(&["PING"]), PsmrStep::Session(Step::Reply(_))));
        assert!(matches!(
            step(&["INFO"]),
            PsmrStep::Session(Step::Node(NodeQuery::Info(_)))
        ));
    }

    #[test]
    fn other_commands_are_refused_with_what_the_engine_serves() {
        assert!(refused(&["SET", "k", "v"]).contains("SET takes NX (insert) or XX (update)"));
        assert!(refused(&["SET", "k", "v", "EX", "10"]).contains("SET takes NX"));
        assert!(refused(&["DEL", "a", "b"]).contains("DEL takes one key"));
        for words in [
            &["INCR", "k"][..],
            &["MSET", "a", "1"],
            &["KEYS", "*"],
            &["MULTI"],
        ] {
            let text = refused(words);
            assert!(
                text.starts_with("ERR this engine serves the B+-tree service: '"),
                "{text}"
            );
            assert!(text.contains("LOGLESS.RANGE"), "{text}");
        }
        assert!(refused(&["LOGLESS.RANGE"]).contains("syntax error"));
        assert!(refused(&["LOGLESS.RANGE", "a", "COUNT", "0"]).contains("COUNT must be"));
        assert!(refused(&["GET"]).contains("wrong number of arguments"));
    }

    #[test]
    fn replies_show_as_redis_shows_them() {
        let shown = |reply: KvReply| {
            super::reply_for(ServiceKind::Btree, Ok(Bytes::from(reply.encode_to_vec())))
        };
        assert_eq!(shown(KvReply::Stored(true)), Value::Simple("OK".into()));
        assert_eq!(shown(KvReply::Stored(false)), Value::Nil);
        assert_eq!(shown(KvReply::Deleted(true)), Value::Int(1));
        assert_eq!(shown(KvReply::Value(None)), Value::Nil);
        assert_eq!(
            shown(KvReply::Entries(vec![(b"a".to_vec(), b"1".to_vec())])),
            Value::Array(vec![Value::Bulk("a".into()), Value::Bulk("1".into())])
        );
        assert_eq!(
            super::reply_for(
                ServiceKind::NetFs,
                Err(logless_redis::session::Failure::Overloaded)
            ),
            failure_value(logless_redis::session::Failure::Overloaded)
        );
    }

    #[test]
    fn netfs_takes_its_frames_whole_and_refuses_the_key_value_commands() {
        assert_eq!(
            step_netfs(&["logless.fs", "frame"]),
            PsmrStep::Frame(Bytes::from_static(b"frame"))
        );
        assert_eq!(step_netfs(&["LOGLESS.DIGEST"]), PsmrStep::Digest);
        let refused = |words: &[&str]| match step_netfs(words) {
            PsmrStep::Session(Step::Reply(Value::Error(text))) => text,
            other => panic!("{words:?} gave {other:?}"),
        };
        for words in [
            &["GET", "k"][..],
            &["SET", "k", "v", "NX"],
            &["DEL", "k"],
            &["LOGLESS.RANGE", "a"],
            &["INCR", "k"],
        ] {
            let text = refused(words);
            assert!(
                text.starts_with("ERR this engine serves NetFS (--service netfs): '"),
                "{text}"
            );
            assert!(text.contains("LOGLESS.FS <request frame>"), "{text}");
        }
        assert!(refused(&["LOGLESS.FS"]).contains("syntax error"));
        assert!(refused(&["LOGLESS.FS", "a", "b"]).contains("syntax error"));
        assert!(refused_btree_fs().contains("B+-tree service: 'logless.fs'"));
        let frame = Bytes::from_static(b"reply frame");
        assert_eq!(
            super::reply_for(ServiceKind::NetFs, Ok(frame.clone())),
            Value::Bulk(frame)
        );
    }

    fn refused_btree_fs() -> String {
        match step(&["LOGLESS.FS", "frame"]) {
            PsmrStep::Session(Step::Reply(Value::Error(text))) => text,
            other => panic!("LOGLESS.FS under btree gave {other:?}"),
        }
    }
}
