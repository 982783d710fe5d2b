//! The admin and inspection commands a session leaves to the node
//! ([`logless_redis::table::admin::Admin`]): SCAN, KEYS and RANDOMKEY over this
//! replica's copy of the keyspace (SCAN's VOTED, for a ring's data mover, lists every key it
//! holds a vote of, dead ones included), FLUSHALL through consensus, TIME, CLIENT LIST/KILL and
//! CONFIG RESETSTAT.
//!
//! None of them is linearizable. SCAN, KEYS and RANDOMKEY read the acceptor states this
//! replica holds, like DBSIZE: a key written through a quorum that left this replica out may
//! be missing until this replica next votes on it, and a deletion may show late the same way.
//! FLUSHALL lists the keys the same way and deletes each through consensus, one DEL each:
//! another client may see some deleted before others, and a key written meanwhile may stay.
//! Under the log engine's EpochSS, a replica that does not serve (recovering, or its cluster's
//! state lost) answers them with its refusal rather than list an empty or stale copy.
//!
//! # SCAN cursors
//!
//! A cursor is a shard number (the top 16 bits) and that shard's engine cursor (see
//! `logless_rmw::replica::ScanCursor`): a scan walks the shards in order. A key present for
//! the whole scan is returned exactly once while nothing is removed (a shard's table keeps its
//! entries in place as it grows). With removal of dead registers on (the default), removing
//! one moves another entry of its shard into its place; a scan across that may miss that
//! entry (see `ScanCursor`).
use std::collections::hash_map::Entry;
use std::sync::atomic::Ordering;
use std::time::{SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use logless_commands::command::{Command, Reply};
use logless_commands::glob::Glob;
use logless_redis::resp::Value;
use logless_redis::table::admin::{Admin, ClientFilter, KeyScan};
use logless_rmw::ids::Key;
use logless_rmw::replica::ScanCursor;
use rustc_hash::{FxHashMap, FxHashSet};
use tokio::sync::{mpsc, oneshot};

use crate::clients::Connection;
use crate::context::NodeContext;
use crate::log_loop::{LogInput, LogReplyTo, LogSubmitted};
use crate::log_turn::LogStatus;
use crate::shard::{ReplyTo, ScanPage, ShardInput, Submitted};

/// Where a SCAN cursor keeps its shard number.
const SHARD_SHIFT: u32 = 48;
const _: () = assert!(ScanCursor::MAX < 1 << SHARD_SHIFT);

/// How many registers KEYS and FLUSHALL ask a shard for at a time: a shard answers clients
/// between pages.
const PAGE: usize = 1024;

/// The most registers one SCAN visits, whatever its COUNT: a shard answers nobody else while
/// it reads a page.
const SCAN_COUNT_MAX: usize = 64 * PAGE;

/// Answers one admin command from connection `caller`.
pub async fn answer(query: Admin, caller: &Connection, context: &NodeContext) -> Value {
    let over_the_copy = matches!(
        query,
        Admin::Scan(_) | Admin::Keys(_) | Admin::RandomKey | Admin::Flush
    );
    if over_the_copy && context.log.is_some() {
        // The log engine's copy is empty or behind while it does not serve (EpochSS).
        let totals = crate::status::gather(context).await;
        if let Some(refusal) = totals.log.as_ref().and_then(LogStatus::refusal) {
            return Value::Error(refusal.to_owned());
        }
    }
    match query {
        Admin::Scan(scan) => scan_keys(&scan, context).await,
        Admin::Keys(pattern) => {
            let glob = Glob::new(&pattern);
            Value::Array(
                live_keys(context)
                    .await
                    .into_iter()
                    .filter(|key| glob.matches(key))
                    .map(Value::Bulk)
                    .collect(),
            )
        }
        Admin::RandomKey => random_key(context).await.map_or(Value::Nil, Value::Bulk),
        Admin::Flush => flush(context).await,
        Admin::Time => {
            let now = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .unwrap_or_default();
            Value::Array(vec![
                Value::Bulk(Bytes::from(now.as_secs().to_string())),
                Value::Bulk(Bytes::from(now.subsec_micros().to_string())),
            ])
        }
        Admin::ClientInfo => Value::Bulk(Bytes::from(caller.view().line())),
        Admin::ClientList(filter) => {
            let mut text = String::new();
            for connection in context.connections.connections() {
                let view = connection.view();
                if filter.matches(&view, caller.id()) {
                    text.push_str(&view.line());
                }
            }
            Value::Bulk(Bytes::from(text))
        }
        Admin::ClientKill { filter, old_form } => {
            let killed = kill(&filter, caller, context);
            match (old_form, killed) {
                (false, n) => Value::Int(n as i64),
                (true, 0) => Value::Error("ERR No such client".into()),
                (true, _) => Value::Simple("OK".into()),
            }
        }
        Admin::ConfigResetStat => {
            let c = &context.clients;
            for counter in [
                &c.refused,
                &c.requests,
                &c.protocol_errors,
                &c.bytes_in,
                &c.bytes_out,
            ] {
                counter.store(0, Ordering::Relaxed);
            }
            Value::Simple("OK".into())
        }
    }
}

/// Kills the connections `filter` names; returns how many.
fn kill(filter: &ClientFilter, caller: &Connection, context: &NodeContext) -> usize {
    let mut killed = 0;
    for connection in context.connections.connections() {
        if filter.matches(&connection.view(), caller.id()) {
            connection.kill(connection.id() == caller.id());
            killed += 1;
        }
    }
    killed
}

/// One page of a shard's live keys (if `voted`, of every key it holds a vote of, dead ones
/// included), or `None` if the shard has stopped. The log engine's copy is its one shard (and
/// it has no votes to list: `voted` is refused before).
async fn page(
    context: &NodeContext,
    shard: usize,
    cursor: u64,
    count: usize,
    voted: bool,
) -> Option<ScanPage> {
    let (reply, answer) = oneshot::channel();
    if let Some(log) = &context.log {
        let ask = LogInput::Scan {
            cursor,
            count,
            reply,
        };
        log.send(ask).await.ok()?;
        return answer.await.ok();
    }
    let ask = ShardInput::Scan {
        cursor,
        count,
        voted,
        reply,
    };
    context.shards[shard].send(ask).await.ok()?;
    answer.await.ok()
}

/// How many shards a scan walks: the per-key engine's, or the log engine's one copy.
fn scanned_shards(context: &NodeContext) -> usize {
    match context.log {
        Some(_) => 1,
        None => context.shards.len(),
    }
}

/// SCAN: one page of COUNT registers (at most [`SCAN_COUNT_MAX`]) of the shard the cursor
/// points into, from where it points; the cursor of the next call moves to the next shard once
/// a shard is done.
async fn scan_keys(scan: &KeyScan, context: &NodeContext) -> Value {
    if scan.voted && context.log.is_some() {
        return Value::Error("ERR SCAN VOTED lists the per-key engine's registers".into());
    }
    let shards = scanned_shards(context);
    let shard = usize::try_from(scan.cursor >> SHARD_SHIFT).unwrap_or(usize::MAX);
    if shard >= shards {
        return scan_reply(0, Vec::new());
    }
    let cursor = scan.cursor & ((1 << SHARD_SHIFT) - 1);
    let count = scan.count.min(SCAN_COUNT_MAX);
    let Some((next, found)) = page(context, shard, cursor, count, scan.voted).await else {
        return Value::Error("ERR the replica is stopping".into());
    };
    let glob = scan.pattern.as_deref().map(Glob::new);
    let keys = found
        .into_iter()
        .filter(|(key, type_name)| {
            glob.as_ref().is_none_or(|g| g.matches(key))
                && scan.type_name.is_none_or(|t| t == *type_name)
        })
        .map(|(key, _)| Value::Bulk(key))
        .collect();
    let next = match (next, shard + 1) {
        (0, following) if following == shards => 0,
        (0, following) => (following as u64) << SHARD_SHIFT,
        (next, _) => ((shard as u64) << SHARD_SHIFT) | next,
    };
    scan_reply(next, keys)
}

fn scan_reply(next: u64, keys: Vec<Value>) -> Value {
    Value::Array(vec![
        Value::Bulk(Bytes::from(next.to_string())),
        Value::Array(keys),
    ])
}

/// Every live key of this replica's copy, each once.
pub(crate) async fn live_keys(context: &NodeContext) -> Vec<Bytes> {
    live_keys_where(context, |_| true).await
}

/// Every live key of this replica's copy that `wanted` keeps, each once (the others are
/// neither kept nor hashed: a count of a few keys of a large copy stays a walk).
pub(crate) async fn live_keys_where(
    context: &NodeContext,
    wanted: impl Fn(&Bytes) -> bool,
) -> Vec<Bytes> {
    let mut keys = Vec::new();
    let mut seen = FxHashSet::default();
    for shard in 0..scanned_shards(context) {
        let mut cursor = 0;
        loop {
            let Some((next, found)) = page(context, shard, cursor, PAGE, false).await else {
                break;
            };
            for (key, _) in found.into_iter().filter(|(key, _)| wanted(key)) {
                // A page after the table grew starts again: keep the first copy of each key.
                if seen.insert(key.clone()) {
                    keys.push(key);
                }
            }
            if next == 0 {
                break;
            }
            cursor = next;
        }
    }
    keys
}

/// A live key of this replica's copy, from a random shard and place.
async fn random_key(context: &NodeContext) -> Option<Bytes> {
    let mut seed = [0u8; 8];
    getrandom::fill(&mut seed).ok()?;
    let seed = u64::from_le_bytes(seed);
    if context.log.is_some() {
        let keys = live_keys(context).await;
        let len = keys.len() as u64;
        return (len > 0).then(|| keys[(seed % len.max(1)) as usize].clone());
    }
    let shards = context.shards.len();
    let first = (seed % shards as u64) as usize;
    for shard in (first..shards).chain(0..first) {
        let (reply, answer) = oneshot::channel();
        if context.shards[shard]
            .send(ShardInput::RandomKey { seed, reply })
            .await
            .is_err()
        {
            continue;
        }
        if let Ok(Some(key)) = answer.await {
            return Some(key);
        }
    }
    None
}

/// FLUSHALL: a DEL of every live key of this replica's copy, each through consensus; OK once
/// every one is done, else an error saying how many got no result.
async fn flush(context: &NodeContext) -> Value {
    let keys = live_keys(context).await;
    if let Some(log) = &context.log {
        return flush_log(log, keys).await;
    }
    let total = keys.len();
    let (tx, mut rx) = mpsc::unbounded_channel();
    let mut batches: FxHashMap<usize, Vec<Submitted>> = FxHashMap::default();
    for (seq, key) in keys.into_iter().enumerate() {
        let shard = crate::context::shard_of(&key, context.shards.len());
        let batch = match batches.entry(shard) {
            Entry::Occupied(o) => o.into_mut(),
            Entry::Vacant(v) => v.insert(Vec::new()),
        };
        batch.push(Submitted {
            key: Key::new(key),
            command: Command::Del,
            reply: ReplyTo {
                tx: tx.clone(),
                seq: seq as u64,
            },
        });
        if batch.len() >= PAGE {
            let full = std::mem::take(batch);
            let _ = context.shards[shard].send(ShardInput::Commands(full)).await;
        }
    }
    for (shard, batch) in batches {
        if !batch.is_empty() {
            let _ = context.shards[shard]
                .send(ShardInput::Commands(batch))
                .await;
        }
    }
    // Every answer comes back, or its sender is dropped with the command (a stopped shard).
    drop(tx);
    let mut failed = 0;
    let mut answered = 0;
    while let Some((_, result)) = rx.recv().await {
        answered += 1;
        if !matches!(result, Ok(Reply::Int(_))) {
            failed += 1;
        }
    }
    failed += total - answered;
    if failed == 0 {
        Value::Simple("OK".into())
    } else {
        Value::Error(format!(
            "ERR FLUSHALL deleted {} of this replica's {total} keys; {failed} deletions got no \
             result (not applied, or the outcome is unknown): run it again",
            total - failed
        ))
    }
}

/// FLUSHALL under the log engine: one DEL of every live key of this replica's copy, as one
/// operation of the log (atomic; keys written meanwhile through other replicas may remain).
async fn flush_log(log: &mpsc::Sender<LogInput>, keys: Vec<Bytes>) -> Value {
    let (tx, mut rx) = mpsc::unbounded_channel();
    let submitted = LogSubmitted {
        operation: logless_multipaxos::kv::Operation::Del(keys),
        reply: LogReplyTo { tx, seq: 0 },
    };
    if log.send(LogInput::Submit(vec![submitted])).await.is_err() {
        return Value::Error("ERR the replica is stopping".into());
    }
    match rx.recv().await {
        Some((_, Ok(logless_multipaxos::kv::Response::Int(_)))) => Value::Simple("OK".into()),
        Some((_, Ok(other))) => Value::Error(format!("ERR FLUSHALL: unexpected answer {other:?}")),
        Some((_, Err(failure))) => logless_redis::session::Session::reply(
            logless_redis::table::ReplyShape::Plain,
            &Err(failure),
        ),
        None => Value::Error("ERR the replica is stopping".into()),
    }
}
