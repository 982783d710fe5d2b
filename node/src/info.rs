//! The server commands a session leaves to the node, answered from its state and
//! configuration: INFO, DBSIZE and CONFIG GET/SET, and the admin commands through
//! [`crate::admin`]. Connection commands are the session's (`logless_redis::session`).
//!
//! # CONFIG
//!
//! CONFIG SET changes `proto-max-bulk-len` (down from the replica's `value_bytes_max`, and
//! back up to it: the engine's limits are built from it at start, so no more), `maxclients`
//! and `logless-thrifty-reads`/`-writes` (on this replica's proposers, from their next phase)
//! while the replica runs, until it stops. The Redis parameters that mean nothing
//! here ([`IGNORED_CONFIG`]) are accepted and ignored; logless's own (`logless-*`) and
//! `databases` are read-only; any other name is refused as Redis refuses an unknown one. A
//! CONFIG SET of several parameters changes none if one is refused.
use std::fmt::Write;
use std::sync::atomic::Ordering;

use bytes::Bytes;
use logless_redis::resp::Value;
use logless_redis::session::{NodeQuery, REDIS_COMPAT_VERSION};
use logless_redis::table::admin::{
    bad_config_value, config_name_matches, is_ignored_config, unknown_config, IGNORED_CONFIG,
};

use crate::clients::Connection;
use crate::config::{self, VALUE_BYTES_MAX_LIMIT};
use crate::context::NodeContext;
use crate::log_turn::LogStatus;
use crate::shard::ShardInput;
use crate::{admin, status};

fn bulk(s: impl Into<String>) -> Value {
    Value::Bulk(Bytes::from(s.into()))
}

/// Answers one server command from connection `caller`.
pub async fn answer(query: NodeQuery, caller: &Connection, context: &NodeContext) -> Value {
    match query {
        NodeQuery::ConfigGet(patterns) => {
            let mut pairs = Vec::new();
            for (name, value) in config_values(context) {
                if patterns.iter().any(|p| config_name_matches(p, name)) {
                    pairs.push((bulk(name), bulk(value)));
                }
            }
            Value::Map(pairs)
        }
        NodeQuery::ConfigSet(pairs) => config_set(&pairs, context).await,
        NodeQuery::Admin(query) => admin::answer(query, caller, context).await,
        NodeQuery::Cluster(command) => crate::cluster::answer(command, caller, context).await,
        NodeQuery::Info(sections) => bulk(info_text(context, &sections).await),
        NodeQuery::DbSize => {
            let totals = status::gather(context).await;
            match totals.log.as_ref().and_then(LogStatus::refusal) {
                Some(refusal) => Value::Error(refusal.to_owned()),
                None => Value::Int(totals.live_registers as i64),
            }
        }
    }
}

/// A parameter CONFIG SET changes, and its new value.
enum Change {
    ValueBytesMax(usize),
    ClientsMax(usize),
    ThriftyReads(bool),
    ThriftyWrites(bool),
    MaxMemory(u64),
    Ignored,
}

/// CONFIG SET: checks every pair, then applies them all.
async fn config_set(pairs: &[(Bytes, Bytes)], context: &NodeContext) -> Value {
    let mut changes = Vec::with_capacity(pairs.len());
    for (name, value) in pairs {
        match config_change(name, value, context) {
            Ok(change) => changes.push(change),
            Err(text) => return Value::Error(text),
        }
    }
    let settings = &context.settings;
    let _changing = settings.changing.lock().await;
    let mut thrifty_changed = false;
    for change in changes {
        match change {
            Change::ValueBytesMax(n) => settings.value_bytes_max.store(n, Ordering::Relaxed),
            Change::ClientsMax(n) => settings.clients_max.store(n, Ordering::Relaxed),
            Change::ThriftyReads(on) => {
                settings.thrifty_reads.store(on, Ordering::Relaxed);
                thrifty_changed = true;
            }
            Change::ThriftyWrites(on) => {
                settings.thrifty_writes.store(on, Ordering::Relaxed);
                thrifty_changed = true;
            }
            Change::MaxMemory(n) => context.memory.set_limit(n),
            Change::Ignored => {}
        }
    }
    if thrifty_changed {
        let reads = settings.thrifty_reads.load(Ordering::Relaxed);
        let writes = settings.thrifty_writes.load(Ordering::Relaxed);
        for shard in &context.shards {
            // A stopped shard serves nothing any more.
            let _ = shard.send(ShardInput::SetThrifty { reads, writes }).await;
        }
    }
    Value::Simple("OK".into())
}

fn config_change(name: &[u8], value: &[u8], context: &NodeContext) -> Result<Change, String> {
    let lower = name.to_ascii_lowercase();
    match &lower[..] {
        b"proto-max-bulk-len" => {
            let started = context.config.value_bytes_max;
            match parse_memory(value) {
                Some(n) if (1..=started as u64).contains(&n) => {
                    Ok(Change::ValueBytesMax(n as usize))
                }
                Some(n) if n > started as u64 => Err(bad_config_value(
                    name,
                    &format!(
                        "logless can lower proto-max-bulk-len, and raise it back up to the \
                         value_bytes_max the replica started with ({started}), not beyond: \
                         the engine's size limits are set at start (restart with a larger \
                         value_bytes_max, at most {VALUE_BYTES_MAX_LIMIT})"
                    ),
                )),
                _ => Err(bad_config_value(name, "argument must be a memory value")),
            }
        }
        b"maxclients" => match std::str::from_utf8(value).ok().and_then(|v| v.parse().ok()) {
            Some(n) if n >= 1 => Ok(Change::ClientsMax(n)),
            _ => Err(bad_config_value(
                name,
                "argument couldn't be parsed into an integer",
            )),
        },
        b"maxmemory" => parse_memory(value)
            .map(Change::MaxMemory)
            .ok_or_else(|| bad_config_value(name, "argument must be a memory value")),
        b"logless-thrifty-reads" => parse_bool(name, value).map(Change::ThriftyReads),
        b"logless-thrifty-writes" => parse_bool(name, value).map(Change::ThriftyWrites),
        b"databases" | b"cluster-enabled" => {
            Err(bad_config_value(name, "can't set immutable config"))
        }
        b"timeout" | b"client-query-buffer-limit" => Err(bad_config_value(
            name,
            "can't set immutable config (the client limits come from the configuration file \
             and flags, and apply to connections from their start)",
        )),
        n if n.starts_with(b"logless-")
            && config_values(context)
                .iter()
                .any(|(k, _)| k.as_bytes() == n) =>
        {
            Err(bad_config_value(
                name,
                "can't set immutable config (logless's own settings come from its \
                 configuration file and flags)",
            ))
        }
        _ if is_ignored_config(name) => Ok(Change::Ignored),
        _ => Err(unknown_config(name)),
    }
}

/// A yes/no setting as Redis's configuration reads it (`yes` or `no`; logless also takes
/// `true` and `false`, as CONFIG GET shows its own settings).
fn parse_bool(name: &[u8], value: &[u8]) -> Result<bool, String> {
    match &value.to_ascii_lowercase()[..] {
        b"yes" | b"true" => Ok(true),
        b"no" | b"false" => Ok(false),
        _ => Err(bad_config_value(name, "argument must be 'yes' or 'no'")),
    }
}

/// A memory size as redis's configuration reads it (see [`config::parse_memory`]).
fn parse_memory(value: &[u8]) -> Option<u64> {
    config::parse_memory(std::str::from_utf8(value).ok()?)
}

/// Every parameter CONFIG GET shows: logless's runtime settings and configuration, then the
/// Redis parameters it ignores.
fn config_values(context: &NodeContext) -> Vec<(&'static str, String)> {
    let c = &context.config;
    let settings = &context.settings;
    let mut values = vec![
        ("databases", "1".into()),
        (
            "cluster-enabled",
            if c.cluster_enabled { "yes" } else { "no" }.into(),
        ),
        (
            "maxclients",
            settings.clients_max.load(Ordering::Relaxed).to_string(),
        ),
        (
            "proto-max-bulk-len",
            settings.value_bytes_max.load(Ordering::Relaxed).to_string(),
        ),
        ("maxmemory", context.memory.limit().to_string()),
        ("timeout", c.timeout.to_string()),
        (
            "client-query-buffer-limit",
            c.client_query_buffer_limit().to_string(),
        ),
        ("logless-durability", c.durability.clone()),
        ("logless-engine", c.engine.to_string()),
        ("logless-recovery", c.recovery.to_string()),
        ("logless-shards", c.shards.to_string()),
        ("logless-read-retries", c.read_retries.to_string()),
        (
            "logless-thrifty-reads",
            settings.thrifty_reads.load(Ordering::Relaxed).to_string(),
        ),
        (
            "logless-thrifty-writes",
            settings.thrifty_writes.load(Ordering::Relaxed).to_string(),
        ),
        (
            "logless-proposer-registers-max",
            c.proposer_registers_max.to_string(),
        ),
        (
            "logless-remove-dead-registers",
            c.removes_dead_registers().to_string(),
        ),
        ("logless-removal-grace-ms", c.removal_grace_ms.to_string()),
    ];
    values.extend(
        IGNORED_CONFIG
            .iter()
            .map(|(name, value)| (*name, (*value).to_owned())),
    );
    values
}

async fn info_text(context: &NodeContext, sections: &[Bytes]) -> String {
    let wanted = |name: &str| {
        sections.is_empty()
            || sections.iter().any(|s| {
                s.eq_ignore_ascii_case(name.as_bytes())
                    || s.eq_ignore_ascii_case(b"all")
                    || s.eq_ignore_ascii_case(b"everything")
                    || s.eq_ignore_ascii_case(b"default")
            })
    };
    let totals = status::gather(context).await;
    let c = &context.config;
    let mut out = String::new();
    if wanted("server") {
        let _ = write!(
            out,
            "# Server\r\nredis_version:{REDIS_COMPAT_VERSION}\r\nlogless_version:{}\r\nredis_mode:{}\r\nprocess_id:{}\r\ntcp_port:{}\r\nuptime_in_seconds:{}\r\nnode_id:{}\r\nincarnation:{}\r\nshards:{}\r\nengine:{}\r\ndurability:{}\r\ncluster_id:{}\r\n",
            env!("CARGO_PKG_VERSION"),
            if context.cluster.is_some() {
                "cluster"
            } else {
                "standalone"
            },
            std::process::id(),
            context.bound.client.port(),
            context.started.elapsed().as_secs(),
            context.node.0,
            context.incarnation,
            c.shards,
            c.engine,
            c.durability,
            c.cluster_id,
        );
        if crate::node::FAULT_INJECTION {
            // A test build says so, and which deliberate bugs it runs with.
            let _ = write!(
                out,
                "fault_injection:compiled-in\r\ninjected_bugs:{}\r\n",
                if context.injected_bugs.is_empty() {
                    "none".to_string()
                } else {
                    context.injected_bugs.join(",")
                }
            );
        }
        out.push_str("\r\n");
    }
    if wanted("clients") {
        let _ = write!(
            out,
            "# Clients\r\nconnected_clients:{}\r\nmaxclients:{}\r\nrejected_connections:{}\r\n\r\n",
            context.clients.connected.load(Ordering::Relaxed),
            context.settings.clients_max.load(Ordering::Relaxed),
            context.clients.refused.load(Ordering::Relaxed),
        );
    }
    if wanted("memory") {
        let memory = &context.memory;
        let _ = write!(
            out,
            "# Memory\r\nused_memory:{}\r\nused_memory_rss:{}\r\nmaxmemory:{}\r\nmaxmemory_policy:noeviction\r\nlogless_used_memory_is:rss\r\n\r\n",
            memory.used(),
            memory.used(),
            memory.limit(),
        );
    }
    if wanted("stats") {
        let p = &totals.proposer;
        let _ = write!(
            out,
            "# Stats\r\ntotal_connections_received:{}\r\ntotal_commands_processed:{}\r\ntotal_net_input_bytes:{}\r\ntotal_net_output_bytes:{}\r\nlogless_reads:{}\r\nlogless_writes:{}\r\nlogless_fast_writes:{}\r\nlogless_denied:{}\r\nlogless_reads_widened:{}\r\nlogless_writes_widened:{}\r\nlogless_retries:{}\r\nlogless_write_throughs:{}\r\nlogless_conflicts:{}\r\nlogless_timeouts:{}\r\nlogless_registers_dropped:{}\r\nlogless_registers_removed:{}\r\nlogless_flushes:{}\r\nlogless_protocol_errors:{}\r\n\r\n",
            context.clients.accepted.load(Ordering::Relaxed),
            context.clients.requests.load(Ordering::Relaxed),
            context.clients.bytes_in.load(Ordering::Relaxed),
            context.clients.bytes_out.load(Ordering::Relaxed),
            p.reads,
            p.writes,
            p.fast_writes,
            p.denied,
            p.reads_widened,
            p.writes_widened,
            p.retries,
            p.write_throughs,
            p.nacks,
            p.timeouts,
            p.registers_dropped,
            totals.registers_removed,
            totals.flushes,
            context.clients.protocol_errors.load(Ordering::Relaxed),
        );
        guard_stats(&mut out, context);
    }
    if wanted("replication") {
        let s = status::node_status(context, &totals);
        let _ = write!(
            out,
            "# Replication\r\nrole:master\r\nlogless_replicas:{}\r\nlogless_links_up:{}\r\nlogless_links:{}\r\nlogless_healthy:{}\r\n\r\n",
            s.replicas,
            s.links.iter().filter(|l| l.up).count(),
            s.links.len(),
            u8::from(s.healthy),
        );
        if let Some(log) = &totals.log {
            // Into the section: before the blank line that ends it.
            out.truncate(out.len() - 2);
            let _ = write!(out, "logless_engine:multipaxos\r\n");
            let recovery = context.config.recovery;
            let _ = write!(
                out,
                "log_recovery:{recovery}\r\nlog_state:{}\r\n",
                log.state
            );
            for figure in status::log_figures(log) {
                let _ = write!(out, "log_{}:{}\r\n", figure.name, figure.value);
            }
            out.push_str("\r\n");
        }
        if let Some(psmr) = &totals.psmr {
            out.truncate(out.len() - 2);
            out.push_str("logless_engine:psmr\r\n");
            out.push_str(&status::psmr_info(psmr));
            out.push_str("\r\n");
        }
    }
    let named = |name: &str| {
        sections.iter().any(|s| {
            s.eq_ignore_ascii_case(name.as_bytes())
                || s.eq_ignore_ascii_case(b"all")
                || s.eq_ignore_ascii_case(b"everything")
        })
    };
    if named("commandstats") {
        command_stats(&mut out, &totals);
    }
    if wanted("cluster") {
        let enabled = u8::from(context.cluster.is_some());
        let _ = write!(out, "# Cluster\r\ncluster_enabled:{enabled}\r\n\r\n");
    }
    if wanted("keyspace") {
        let _ = write!(out, "# Keyspace\r\n");
        if totals.live_registers > 0 {
            // Exact for this replica's copy, where redis estimates `avg_ttl` from samples.
            let avg_ttl = totals
                .ttl_ms_sum
                .checked_div(totals.expiring_registers)
                .unwrap_or(0);
            let _ = write!(
                out,
                "db0:keys={},expires={},avg_ttl={avg_ttl}\r\n",
                totals.live_registers, totals.expiring_registers
            );
        }
        out.push_str("\r\n");
    }
    out
}

/// Redis's `# Commandstats` section (asked for by name, `all` or `everything`, as in Redis): per
/// command, the answers this replica gave (`calls`), their total and mean latency in µs, and
/// those that were not a result (`failed_calls`: not applied, outcome unknown, overloaded).
fn command_stats(out: &mut String, totals: &status::Totals) {
    let _ = write!(out, "# Commandstats\r\n");
    let mut names: Vec<&str> = totals.latency_us.keys().copied().collect();
    names.sort_unstable();
    for name in names {
        let (mut calls, mut failed) = (0, 0);
        for (&(command, outcome), &n) in &totals.commands {
            if command == name {
                calls += n;
                if outcome != "ok" {
                    failed += n;
                }
            }
        }
        let usec: u64 = totals.latency_us[name]
            .iter_recorded()
            .map(|v| v.value_iterated_to() * v.count_at_value())
            .sum();
        let per_call = if calls == 0 {
            0.0
        } else {
            usec as f64 / calls as f64
        };
        let _ = write!(
            out,
            "cmdstat_{name}:calls={calls},usec={usec},usec_per_call={per_call:.2},rejected_calls=0,failed_calls={failed}\r\n"
        );
    }
    out.push_str("\r\n");
}

/// The figures of authentication and [`crate::limits`], at the end of the Stats section
/// (Redis's names where Redis has the figure).
fn guard_stats(out: &mut String, context: &NodeContext) {
    let clients = &context.clients;
    let peers = &context.peers;
    // Into the section: before the blank line that ends it.
    debug_assert!(out.ends_with("\r\n\r\n"));
    out.truncate(out.len() - 2);
    let _ = write!(
        out,
        "acl_access_denied_auth:{}\r\nclient_idle_disconnections:{}\r\nclient_query_buffer_limit_disconnections:{}\r\nclient_output_buffer_limit_disconnections:{}\r\nlogless_peer_connections_over_cap:{}\r\n\r\n",
        clients.rejected_auth.load(Ordering::Relaxed),
        clients.idle_disconnects.load(Ordering::Relaxed),
        clients.query_buffer_disconnects.load(Ordering::Relaxed),
        clients.output_buffer_disconnects.load(Ordering::Relaxed),
        peers.over_cap.load(Ordering::Relaxed),
    );
}

#[cfg(test)]
mod tests {
    use super::parse_memory;

    #[test]
    fn memory_values_read_as_redis_reads_them() {
        assert_eq!(parse_memory(b"1024"), Some(1024));
        assert_eq!(parse_memory(b"1k"), Some(1000));
        assert_eq!(parse_memory(b"1KB"), Some(1024));
        assert_eq!(parse_memory(b"2mb"), Some(2 << 20));
        assert_eq!(parse_memory(b"1g"), Some(1_000_000_000));
        assert_eq!(parse_memory(b"1gb"), Some(1 << 30));
        for bad in [
            &b""[..],
            b"mb",
            b"-1",
            b"1 mb",
            b"1tb",
            b"x",
            b"99999999999999999999gb",
        ] {
            assert_eq!(parse_memory(bad), None, "{}", String::from_utf8_lossy(bad));
        }
    }
}
