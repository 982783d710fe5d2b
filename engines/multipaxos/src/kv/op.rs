//! Operations: what a [`Request`](crate::message::Request)'s payload carries to the
//! [`RegisterMachine`](super::RegisterMachine), and their versioned encoding.
//!
//! ```text
//! payload    version u8 (OP_VERSION), then one operation
//! operation  tag u8, then:
//!   0 Command      key, command (see `codec`)
//!   1 MSet         u32 count, (key, value)*
//!   2 MSetNx       u32 count, (key, value)*
//!   3 Rename       from, to
//!   4 RenameNx     from, to
//!   5 SMove        from, to, member
//!   6 Copy         from, to, replace u8
//!   7 Del          u32 count, key*
//!   8 Exists       u32 count, key*
//!   9 MGet         u32 count, key*
//!  10 Transaction  u32 count, operation* (none of them a transaction)
//!  11 Watch        u32 count, key*
//!  12 WatchedTransaction
//!                  u32 count, (key, stamp u64)*, u32 count, operation* (as Transaction)
//! ```
//! Watch and WatchedTransaction are never inside a transaction.
//! Byte strings are a u32 length then the bytes, integers little-endian.
use bytes::Bytes;
use logless_commands::command::Command;

use super::codec::{
    put_bool, put_bytes, put_command, put_count, put_list, put_u64, DecodeError, Reader,
};

/// The version of the operation encoding this code writes and reads.
pub const OP_VERSION: u8 = 1;

const TAG_COMMAND: u8 = 0;
const TAG_MSET: u8 = 1;
const TAG_MSETNX: u8 = 2;
const TAG_RENAME: u8 = 3;
const TAG_RENAMENX: u8 = 4;
const TAG_SMOVE: u8 = 5;
const TAG_COPY: u8 = 6;
const TAG_DEL: u8 = 7;
const TAG_EXISTS: u8 = 8;
const TAG_MGET: u8 = 9;
const TAG_TRANSACTION: u8 = 10;
const TAG_WATCH: u8 = 11;
const TAG_WATCHED_TRANSACTION: u8 = 12;

/// One step of the replicated map: a command on one key, a command on several keys, or a
/// transaction. Each executes atomically: nothing else happens between its parts.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Operation {
    /// A single-key command, with the per-key engine's semantics.
    Command {
        /// The key.
        key: Bytes,
        /// The command.
        command: Command,
    },
    /// MSET: sets every key (clearing its time to live); OK.
    MSet(Vec<(Bytes, Bytes)>),
    /// MSETNX: sets every key if none exists (1), else nothing (0).
    MSetNx(Vec<(Bytes, Bytes)>),
    /// RENAME: moves the value and its time to live; `ERR no such key` if `from` is absent.
    Rename {
        /// The source.
        from: Bytes,
        /// The destination (overwritten).
        to: Bytes,
    },
    /// RENAMENX: as RENAME, only if `to` does not exist (1), else 0.
    RenameNx {
        /// The source.
        from: Bytes,
        /// The destination.
        to: Bytes,
    },
    /// SMOVE: moves `member` from the set `from` to the set `to`; 1 if moved, else 0.
    SMove {
        /// The source set.
        from: Bytes,
        /// The destination set.
        to: Bytes,
        /// The member.
        member: Bytes,
    },
    /// COPY: copies the value and its time to live; 1 if copied, 0 if `from` is absent or
    /// `to` exists without `replace`.
    Copy {
        /// The source.
        from: Bytes,
        /// The destination.
        to: Bytes,
        /// REPLACE.
        replace: bool,
    },
    /// DEL of several keys: how many existed.
    Del(Vec<Bytes>),
    /// EXISTS of several keys: how many exist (a key named twice counts twice).
    Exists(Vec<Bytes>),
    /// MGET: each key's string value, nil if absent or not a string.
    MGet(Vec<Bytes>),
    /// MULTI ... EXEC: operations executed in order as one step, one reply each; an operation
    /// that fails answers its error in its place and the others still take effect (Redis runs
    /// the rest of a transaction after a runtime error and rolls nothing back).
    Transaction(Vec<Operation>),
    /// WATCH: each key's stamp now (its version and whether it is live, see
    /// [`super::versions`]), as the items of the response, in order.
    Watch(Vec<Bytes>),
    /// EXEC after WATCH: the transaction, if every watched key's stamp is still the one WATCH
    /// gave; else nothing runs and the response is a null array.
    WatchedTransaction {
        /// The watched keys and the stamps WATCH gave them.
        watched: Vec<(Bytes, u64)>,
        /// The queued operations (none of them a transaction), as in `Transaction`.
        operations: Vec<Operation>,
    },
}

impl Operation {
    /// Its Redis command's name, lowercase (for metrics): a single-key command's own name,
    /// the multi-key command's, and `exec` for a transaction.
    pub fn name(&self) -> &'static str {
        match self {
            Operation::Command { command, .. } => command.name(),
            Operation::MSet(_) => "mset",
            Operation::MSetNx(_) => "msetnx",
            Operation::Rename { .. } => "rename",
            Operation::RenameNx { .. } => "renamenx",
            Operation::SMove { .. } => "smove",
            Operation::Copy { .. } => "copy",
            Operation::Del(_) => "del",
            Operation::Exists(_) => "exists",
            Operation::MGet(_) => "mget",
            Operation::Transaction(_) | Operation::WatchedTransaction { .. } => "exec",
            Operation::Watch(_) => "watch",
        }
    }

    /// The operation, encoded as a request payload.
    pub fn encode(&self) -> Bytes {
        let mut out = vec![OP_VERSION];
        put_operation(&mut out, self);
        Bytes::from(out)
    }

    /// Decodes a request payload. Never panics, whatever the input.
    pub fn decode(bytes: &[u8]) -> Result<Operation, DecodeError> {
        let mut r = Reader::new(bytes);
        let version = r.u8()?;
        if version != OP_VERSION {
            return Err(DecodeError::UnknownVersion(version));
        }
        let operation = read_operation(&mut r, false)?;
        r.finish()?;
        Ok(operation)
    }
}

fn put_pairs(out: &mut Vec<u8>, pairs: &[(Bytes, Bytes)]) {
    put_count(out, pairs.len());
    for (k, v) in pairs {
        put_bytes(out, k);
        put_bytes(out, v);
    }
}

fn put_operation(out: &mut Vec<u8>, operation: &Operation) {
    match operation {
        Operation::Command { key, command } => {
            out.push(TAG_COMMAND);
            put_bytes(out, key);
            put_command(out, command);
        }
        Operation::MSet(pairs) => {
            out.push(TAG_MSET);
            put_pairs(out, pairs);
        }
        Operation::MSetNx(pairs) => {
            out.push(TAG_MSETNX);
            put_pairs(out, pairs);
        }
        Operation::Rename { from, to } => {
            out.push(TAG_RENAME);
            put_bytes(out, from);
            put_bytes(out, to);
        }
        Operation::RenameNx { from, to } => {
            out.push(TAG_RENAMENX);
            put_bytes(out, from);
            put_bytes(out, to);
        }
        Operation::SMove { from, to, member } => {
            out.push(TAG_SMOVE);
            put_bytes(out, from);
            put_bytes(out, to);
            put_bytes(out, member);
        }
        Operation::Copy { from, to, replace } => {
            out.push(TAG_COPY);
            put_bytes(out, from);
            put_bytes(out, to);
            put_bool(out, *replace);
        }
        Operation::Del(keys) => {
            out.push(TAG_DEL);
            put_list(out, keys);
        }
        Operation::Exists(keys) => {
            out.push(TAG_EXISTS);
            put_list(out, keys);
        }
        Operation::MGet(keys) => {
            out.push(TAG_MGET);
            put_list(out, keys);
        }
        Operation::Transaction(operations) => {
            out.push(TAG_TRANSACTION);
            put_operations(out, operations);
        }
        Operation::Watch(keys) => {
            out.push(TAG_WATCH);
            put_list(out, keys);
        }
        Operation::WatchedTransaction {
            watched,
            operations,
        } => {
            out.push(TAG_WATCHED_TRANSACTION);
            put_count(out, watched.len());
            for (key, stamp) in watched {
                put_bytes(out, key);
                put_u64(out, *stamp);
            }
            put_operations(out, operations);
        }
    }
}

fn put_operations(out: &mut Vec<u8>, operations: &[Operation]) {
    put_count(out, operations.len());
    for operation in operations {
        put_operation(out, operation);
    }
}

fn read_pairs(r: &mut Reader<'_>) -> Result<Vec<(Bytes, Bytes)>, DecodeError> {
    let count = r.count(8)?;
    (0..count).map(|_| Ok((r.bytes()?, r.bytes()?))).collect()
}

/// An operation; `nested` inside a transaction, where another transaction is refused (Redis:
/// "MULTI calls can not be nested"), which also bounds the recursion.
fn read_operation(r: &mut Reader<'_>, nested: bool) -> Result<Operation, DecodeError> {
    Ok(match r.u8()? {
        TAG_COMMAND => Operation::Command {
            key: r.bytes()?,
            command: r.command(0)?,
        },
        TAG_MSET => Operation::MSet(read_pairs(r)?),
        TAG_MSETNX => Operation::MSetNx(read_pairs(r)?),
        TAG_RENAME => Operation::Rename {
            from: r.bytes()?,
            to: r.bytes()?,
        },
        TAG_RENAMENX => Operation::RenameNx {
            from: r.bytes()?,
            to: r.bytes()?,
        },
        TAG_SMOVE => Operation::SMove {
            from: r.bytes()?,
            to: r.bytes()?,
            member: r.bytes()?,
        },
        TAG_COPY => Operation::Copy {
            from: r.bytes()?,
            to: r.bytes()?,
            replace: r.bool()?,
        },
        TAG_DEL => Operation::Del(r.list()?),
        TAG_EXISTS => Operation::Exists(r.list()?),
        TAG_MGET => Operation::MGet(r.list()?),
        TAG_TRANSACTION | TAG_WATCH | TAG_WATCHED_TRANSACTION if nested => {
            return Err(DecodeError::Nested)
        }
        TAG_TRANSACTION => Operation::Transaction(read_operations(r)?),
        TAG_WATCH => Operation::Watch(r.list()?),
        TAG_WATCHED_TRANSACTION => {
            let count = r.count(12)?;
            let watched = (0..count)
                .map(|_| Ok((r.bytes()?, r.u64()?)))
                .collect::<Result<_, _>>()?;
            Operation::WatchedTransaction {
                watched,
                operations: read_operations(r)?,
            }
        }
        other => return Err(DecodeError::UnknownTag(other)),
    })
}

/// A transaction's operations (none of them a transaction).
fn read_operations(r: &mut Reader<'_>) -> Result<Vec<Operation>, DecodeError> {
    let count = r.count(1)?;
    (0..count).map(|_| read_operation(r, true)).collect()
}
