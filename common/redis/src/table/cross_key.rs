//! Commands that change several keys as one step: MSET, MSETNX, RENAME, RENAMENX, SMOVE and
//! COPY. Only an engine that orders every key in one log can run them (the session parses them
//! only when told so, [`crate::session::Session::with_total_order`]); the per-key engine
//! refuses them with the reason in [`super::redis_names::reason`].
use bytes::Bytes;
use logless_commands::command::Command;

use super::{spec, Combine, CommandSpec, TRANSACTION, TWO_KEYS, WRITE, WRITE_DENYOOM};

/// One atomic step over several keys, for an engine with one order over all keys.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CrossKey {
    /// MSET: sets every key; OK.
    MSet(Vec<(Bytes, Bytes)>),
    /// MSETNX: sets every key if none exists (1), else nothing (0).
    MSetNx(Vec<(Bytes, Bytes)>),
    /// RENAME: OK, or `ERR no such key`.
    Rename {
        /// The source.
        from: Bytes,
        /// The destination.
        to: Bytes,
    },
    /// RENAMENX: 1 if renamed, 0 if `to` exists.
    RenameNx {
        /// The source.
        from: Bytes,
        /// The destination.
        to: Bytes,
    },
    /// SMOVE: 1 if the member moved, else 0.
    SMove {
        /// The source set.
        from: Bytes,
        /// The destination set.
        to: Bytes,
        /// The member.
        member: Bytes,
    },
    /// COPY: 1 if copied, else 0.
    Copy {
        /// The source.
        from: Bytes,
        /// The destination.
        to: Bytes,
        /// REPLACE.
        replace: bool,
    },
    /// MULTI ... EXEC naming several keys (or queueing a command over several): the queued
    /// commands, in order, run as one step.
    Transaction(Vec<Queued>),
    /// EXEC after WATCH: the transaction runs if no watched key changed since its WATCH; else
    /// nothing runs and EXEC answers a null array.
    WatchedTransaction {
        /// The watched keys, each with the stamp the engine gave it at WATCH.
        watched: Vec<(Bytes, u64)>,
        /// The queued commands (possibly none).
        items: Vec<Queued>,
    },
}

/// One command queued in a transaction of an engine with one order over all keys.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Queued {
    /// A command on one key.
    One(Bytes, Command),
    /// DEL, EXISTS or MGET of several keys: their parts, and how their replies combine.
    Many(Vec<(Bytes, Command)>, Combine),
    /// A command over several keys (MSET, RENAME, ...; never a transaction).
    Cross(CrossKey),
}

impl Queued {
    /// The keys it names, in order.
    pub fn keys(&self) -> Vec<&Bytes> {
        match self {
            Queued::One(key, _) => vec![key],
            Queued::Many(parts, _) => parts.iter().map(|(k, _)| k).collect(),
            Queued::Cross(op) => op.keys(),
        }
    }
}

impl CrossKey {
    /// The keys it names, in order (for the ACL and the key size check).
    pub fn keys(&self) -> Vec<&Bytes> {
        match self {
            CrossKey::MSet(pairs) | CrossKey::MSetNx(pairs) => {
                pairs.iter().map(|(k, _)| k).collect()
            }
            CrossKey::Rename { from, to }
            | CrossKey::RenameNx { from, to }
            | CrossKey::SMove { from, to, .. }
            | CrossKey::Copy { from, to, .. } => vec![from, to],
            CrossKey::Transaction(items) | CrossKey::WatchedTransaction { items, .. } => {
                items.iter().flat_map(Queued::keys).collect()
            }
        }
    }
}

const SPECS: [CommandSpec; 6] = [
    spec("mset", -3, WRITE_DENYOOM, (1, -1, 2)),
    spec("msetnx", -3, WRITE_DENYOOM, (1, -1, 2)),
    spec("rename", 3, WRITE, TWO_KEYS),
    spec("renamenx", 3, WRITE, TWO_KEYS),
    spec("smove", 4, WRITE, TWO_KEYS),
    spec("copy", -3, WRITE, TWO_KEYS),
];

/// WATCH, which only an engine with one order over all keys serves (the session parses it
/// itself: it is a step of its own, not one over the keys' values).
pub const WATCH: CommandSpec = spec("watch", -2, TRANSACTION, (1, -1, 1));

/// The spec of the cross-key command `name` (any case), if it is one.
pub fn find(name: &[u8]) -> Option<&'static CommandSpec> {
    SPECS
        .iter()
        .find(|spec| spec.name.as_bytes().eq_ignore_ascii_case(name))
}

/// Parses the arguments of the command `spec` names (`args[0]` its name): the step, or the
/// error reply.
pub fn parse(spec: &CommandSpec, args: &[Bytes]) -> Result<CrossKey, String> {
    if !super::arity_ok(spec.arity, args.len()) {
        return Err(format!(
            "ERR wrong number of arguments for '{}' command",
            spec.name
        ));
    }
    let pairs = || -> Result<Vec<(Bytes, Bytes)>, String> {
        if args.len().is_multiple_of(2) {
            return Err(format!(
                "ERR wrong number of arguments for '{}' command",
                spec.name
            ));
        }
        Ok(args[1..]
            .chunks(2)
            .map(|kv| (kv[0].clone(), kv[1].clone()))
            .collect())
    };
    let (from, to) = (args[1].clone(), args[2].clone());
    Ok(match spec.name {
        "mset" => CrossKey::MSet(pairs()?),
        "msetnx" => CrossKey::MSetNx(pairs()?),
        "rename" => CrossKey::Rename { from, to },
        "renamenx" => CrossKey::RenameNx { from, to },
        "smove" => CrossKey::SMove {
            from,
            to,
            member: args[3].clone(),
        },
        "copy" => CrossKey::Copy {
            from,
            to,
            replace: parse_copy_options(&args[3..])?,
        },
        other => unreachable!("{other} is not a cross-key command"),
    })
}

/// COPY's options after the keys: REPLACE, and `DB 0` (the only database).
fn parse_copy_options(mut options: &[Bytes]) -> Result<bool, String> {
    let mut replace = false;
    while let Some((option, rest)) = options.split_first() {
        if option.eq_ignore_ascii_case(b"replace") {
            replace = true;
            options = rest;
        } else if option.eq_ignore_ascii_case(b"db") {
            match rest.split_first() {
                Some((db, rest)) if &db[..] == b"0" => options = rest,
                Some(_) => return Err("ERR DB index is out of range".into()),
                None => return Err("ERR syntax error".into()),
            }
        } else {
            return Err("ERR syntax error".into());
        }
    }
    Ok(replace)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(words: &[&str]) -> Vec<Bytes> {
        words
            .iter()
            .map(|w| Bytes::copy_from_slice(w.as_bytes()))
            .collect()
    }

    fn parsed(words: &[&str]) -> Result<CrossKey, String> {
        let args = args(words);
        parse(find(&args[0]).expect("a cross-key command"), &args)
    }

    #[test]
    fn cross_key_commands_parse_with_their_arities() {
        assert_eq!(
            parsed(&["MSET", "a", "1", "b", "2"]),
            Ok(CrossKey::MSet(vec![
                ("a".into(), "1".into()),
                ("b".into(), "2".into())
            ]))
        );
        assert!(parsed(&["mset", "a", "1", "b"])
            .unwrap_err()
            .contains("wrong number of arguments for 'mset'"));
        assert!(parsed(&["rename", "a"]).is_err());
        assert_eq!(
            parsed(&["copy", "a", "b", "db", "0", "replace"]),
            Ok(CrossKey::Copy {
                from: "a".into(),
                to: "b".into(),
                replace: true
            })
        );
        assert!(parsed(&["copy", "a", "b", "db", "1"]).is_err());
        assert!(find(b"GET").is_none());
        assert_eq!(
            parsed(&["smove", "s", "t", "m"]).unwrap().keys(),
            [&Bytes::from("s"), &Bytes::from("t")]
        );
    }
}
