//! Connection and server commands, answered by the node itself: PING, ECHO, HELLO, QUIT,
//! SELECT, CLIENT, COMMAND, CONFIG GET, INFO and DBSIZE.
use std::fmt::Write;
use std::sync::atomic::Ordering;

use bytes::Bytes;
use logless_redis::resp::{Protocol, Value};
use logless_redis::table::{self, Local};

use crate::front::Connection;
use crate::node::NodeContext;
use crate::status;

/// The Redis version logless reports to clients that ask: the command set it follows.
pub const REDIS_COMPAT_VERSION: &str = "7.4.0";

fn simple(s: &str) -> Value {
    Value::Simple(s.to_string())
}

fn bulk(s: impl Into<String>) -> Value {
    Value::Bulk(Bytes::from(s.into()))
}

/// Answers one connection or server command.
pub async fn answer_local(
    local: Local,
    connection: &mut Connection,
    context: &NodeContext,
) -> Value {
    match local {
        Local::Ping(None) => simple("PONG"),
        Local::Ping(Some(message)) | Local::Echo(message) => Value::Bulk(message),
        // There are no users: AUTH passes like Redis's default user without a password.
        Local::Hello {
            protocol,
            auth,
            setname,
        } => {
            if auth.is_some_and(|(user, _)| &user[..] != b"default") {
                return Value::Error(
                    "WRONGPASS invalid username-password pair or user is disabled.".into(),
                );
            }
            let protocol = protocol.unwrap_or(connection.protocol);
            connection.protocol = protocol;
            if let Some(name) = setname {
                connection.name = Some(name);
            }
            Value::Map(vec![
                (bulk("server"), bulk("redis")),
                (bulk("version"), bulk(REDIS_COMPAT_VERSION)),
                (
                    bulk("proto"),
                    Value::Int(if protocol == Protocol::Resp3 { 3 } else { 2 }),
                ),
                (bulk("id"), Value::Int(connection.id as i64)),
                (bulk("mode"), bulk("standalone")),
                (bulk("role"), bulk("master")),
                (bulk("modules"), Value::Array(Vec::new())),
                (bulk("logless_version"), bulk(env!("CARGO_PKG_VERSION"))),
            ])
        }
        Local::Auth => simple("OK"),
        Local::Quit => {
            connection.closing = true;
            simple("OK")
        }
        Local::Reset => {
            connection.protocol = Protocol::Resp2;
            connection.name = None;
            simple("RESET")
        }
        Local::Select(0) => simple("OK"),
        Local::Select(_) => Value::Error(
            "ERR DB index is out of range (logless has one keyspace, database 0)".into(),
        ),
        Local::ClientSetName(name) => {
            if name.iter().any(|b| *b == b' ' || *b == b'\n') {
                return Value::Error(
                    "ERR Client names cannot contain spaces, newlines or special characters."
                        .into(),
                );
            }
            connection.name = (!name.is_empty()).then_some(name);
            simple("OK")
        }
        Local::ClientGetName => connection.name.clone().map_or(Value::Nil, Value::Bulk),
        Local::ClientSetInfo => simple("OK"),
        Local::ClientId => Value::Int(connection.id as i64),
        Local::ClientInfo => bulk(format!(
            "id={} name={} db=0 resp={}\n",
            connection.id,
            connection
                .name
                .as_ref()
                .map(|n| String::from_utf8_lossy(n).into_owned())
                .unwrap_or_default(),
            if connection.protocol == Protocol::Resp3 {
                3
            } else {
                2
            }
        )),
        Local::Command => Value::Array(
            table::command_names()
                .iter()
                .map(table::command_info_value)
                .collect(),
        ),
        Local::CommandCount => Value::Int(table::command_names().len() as i64),
        Local::CommandInfo(names) => Value::Array(
            names
                .iter()
                .map(|name| table::find_command(name).map_or(Value::Nil, table::command_info_value))
                .collect(),
        ),
        Local::CommandDocs(names) => {
            // Enough for redis-cli's hints: a summary per known command.
            let specs: Vec<_> = if names.is_empty() {
                table::command_names().iter().collect()
            } else {
                names
                    .iter()
                    .filter_map(|n| table::find_command(n))
                    .collect()
            };
            Value::Map(
                specs
                    .into_iter()
                    .map(|spec| {
                        (
                            bulk(spec.name),
                            Value::Map(vec![
                                (bulk("summary"), bulk(format!("the {} command", spec.name))),
                                (bulk("since"), bulk("1.0.0")),
                                (bulk("group"), bulk("generic")),
                            ]),
                        )
                    })
                    .collect(),
            )
        }
        Local::ConfigGet(patterns) => {
            let mut pairs = Vec::new();
            for (name, value) in config_values(context) {
                if patterns.iter().any(|p| glob(p, name.as_bytes())) {
                    pairs.push((bulk(name), bulk(value)));
                }
            }
            Value::Map(pairs)
        }
        Local::ConfigSet(_) => Value::Error(
            "ERR logless is configured when a replica starts; CONFIG SET is not supported".into(),
        ),
        Local::Info(sections) => bulk(info_text(context, &sections).await),
        Local::DbSize => Value::Int(status::gather(context).await.live_registers as i64),
    }
}

fn config_values(context: &NodeContext) -> Vec<(&'static str, String)> {
    let c = &context.config;
    vec![
        ("save", String::new()),
        ("appendonly", "no".into()),
        ("databases", "1".into()),
        ("maxclients", c.clients_max.to_string()),
        (
            "proto-max-bulk-len",
            crate::front::bulk_bytes_max(c.value_bytes_max).to_string(),
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
            "# Server\r\nredis_version:{REDIS_COMPAT_VERSION}\r\nlogless_version:{}\r\nredis_mode:standalone\r\nprocess_id:{}\r\ntcp_port:{}\r\nuptime_in_seconds:{}\r\nnode_id:{}\r\nincarnation:{}\r\nshards:{}\r\ndurability:{}\r\n\r\n",
            env!("CARGO_PKG_VERSION"),
            std::process::id(),
            context.bound.client.port(),
            context.started.elapsed().as_secs(),
            context.node.0,
            context.incarnation,
            c.shards,
            c.durability,
        );
    }
    if wanted("clients") {
        let _ = write!(
            out,
            "# Clients\r\nconnected_clients:{}\r\nmaxclients:{}\r\nrejected_connections:{}\r\n\r\n",
            context.clients_connected.load(Ordering::Relaxed),
            c.clients_max,
            context.clients_refused.load(Ordering::Relaxed),
        );
    }
    if wanted("stats") {
        let p = &totals.proposer;
        let _ = write!(
            out,
            "# Stats\r\ntotal_connections_received:{}\r\ntotal_commands_processed:{}\r\ntotal_net_input_bytes:{}\r\ntotal_net_output_bytes:{}\r\nlogless_reads:{}\r\nlogless_writes:{}\r\nlogless_fast_writes:{}\r\nlogless_denied:{}\r\nlogless_reads_widened:{}\r\nlogless_writes_widened:{}\r\nlogless_retries:{}\r\nlogless_write_throughs:{}\r\nlogless_conflicts:{}\r\nlogless_timeouts:{}\r\nlogless_registers_dropped:{}\r\nlogless_flushes:{}\r\nlogless_protocol_errors:{}\r\n\r\n",
            context.clients_accepted.load(Ordering::Relaxed),
            context.client_requests.load(Ordering::Relaxed),
            context.client_bytes_in.load(Ordering::Relaxed),
            context.client_bytes_out.load(Ordering::Relaxed),
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
            context.client_protocol_errors.load(Ordering::Relaxed),
        );
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
