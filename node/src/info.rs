//! The server commands a session leaves to the node, answered from its state and
//! configuration: INFO, DBSIZE and CONFIG GET/SET. Connection commands are the session's
//! (`logless_redis::session`).
use std::fmt::Write;
use std::sync::atomic::Ordering;

use bytes::Bytes;
use logless_redis::resp::Value;
use logless_redis::session::{NodeQuery, CONFIG_SET_REFUSED, REDIS_COMPAT_VERSION};

use crate::context::NodeContext;
use crate::status;

fn bulk(s: impl Into<String>) -> Value {
    Value::Bulk(Bytes::from(s.into()))
}

/// Answers one server command.
pub async fn answer(query: NodeQuery, context: &NodeContext) -> Value {
    match query {
        NodeQuery::ConfigGet(patterns) => {
            let mut pairs = Vec::new();
            for (name, value) in config_values(context) {
                if patterns.iter().any(|p| glob(p, name.as_bytes())) {
                    pairs.push((bulk(name), bulk(value)));
                }
            }
            Value::Map(pairs)
        }
        NodeQuery::ConfigSet(_) => Value::Error(CONFIG_SET_REFUSED.into()),
        NodeQuery::Info(sections) => bulk(info_text(context, &sections).await),
        NodeQuery::DbSize => Value::Int(status::gather(context).await.live_registers as i64),
    }
}

fn config_values(context: &NodeContext) -> Vec<(&'static str, String)> {
    let c = &context.config;
    vec![
        ("save", String::new()),
        ("appendonly", "no".into()),
        ("databases", "1".into()),
        ("maxclients", c.clients_max.to_string()),
        ("proto-max-bulk-len", c.value_bytes_max.to_string()),
        ("timeout", c.timeout.to_string()),
        (
            "client-query-buffer-limit",
            c.client_query_buffer_limit().to_string(),
        ),
        ("logless-durability", c.durability.clone()),
        ("logless-shards", c.shards.to_string()),
        ("logless-read-retries", c.read_retries.to_string()),
        ("logless-thrifty-reads", c.thrifty_reads.to_string()),
        ("logless-thrifty-writes", c.thrifty_writes.to_string()),
        (
            "logless-proposer-registers-max",
            c.proposer_registers_max.to_string(),
        ),
    ]
}

/// Redis-style glob with `*` and `?` (case-insensitive), enough for CONFIG GET patterns.
fn glob(pattern: &[u8], name: &[u8]) -> bool {
    match (pattern.first(), name.first()) {
        (None, None) => true,
        (Some(b'*'), _) => {
            glob(&pattern[1..], name) || (!name.is_empty() && glob(pattern, &name[1..]))
        }
        (Some(b'?'), Some(_)) => glob(&pattern[1..], &name[1..]),
        (Some(p), Some(n)) if p.eq_ignore_ascii_case(n) => glob(&pattern[1..], &name[1..]),
        _ => false,
    }
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
            "# Server\r\nredis_version:{REDIS_COMPAT_VERSION}\r\nlogless_version:{}\r\nredis_mode:standalone\r\nprocess_id:{}\r\ntcp_port:{}\r\nuptime_in_seconds:{}\r\nnode_id:{}\r\nincarnation:{}\r\nshards:{}\r\ndurability:{}\r\ncluster_id:{}\r\n",
            env!("CARGO_PKG_VERSION"),
            std::process::id(),
            context.bound.client.port(),
            context.started.elapsed().as_secs(),
            context.node.0,
            context.incarnation,
            c.shards,
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
            c.clients_max,
            context.clients.refused.load(Ordering::Relaxed),
        );
    }
    if wanted("stats") {
        let p = &totals.proposer;
        let _ = write!(
            out,
            "# Stats\r\ntotal_connections_received:{}\r\ntotal_commands_processed:{}\r\ntotal_net_input_bytes:{}\r\ntotal_net_output_bytes:{}\r\nlogless_reads:{}\r\nlogless_writes:{}\r\nlogless_fast_writes:{}\r\nlogless_denied:{}\r\nlogless_reads_widened:{}\r\nlogless_writes_widened:{}\r\nlogless_retries:{}\r\nlogless_write_throughs:{}\r\nlogless_conflicts:{}\r\nlogless_timeouts:{}\r\nlogless_registers_dropped:{}\r\nlogless_flushes:{}\r\nlogless_protocol_errors:{}\r\n\r\n",
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
    }
    if wanted("keyspace") {
        let _ = write!(out, "# Keyspace\r\n");
        if totals.live_registers > 0 {
            let _ = write!(
                out,
                "db0:keys={},expires=0,avg_ttl=0\r\n",
                totals.live_registers
            );
        }
        out.push_str("\r\n");
    }
    out
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
    use super::glob;

    #[test]
    fn globs() {
        assert!(glob(b"*", b"save"));
        assert!(glob(b"SAVE", b"save"));
        assert!(glob(b"s?ve", b"save"));
        assert!(glob(b"*only", b"appendonly"));
        assert!(!glob(b"save", b"saved"));
    }
}
