//! A ring of `logless server` processes on loopback (`--replication R` below the N nodes, as
//! `logless up --nodes N --replication R` starts it): started, its slot map read once from
//! CLUSTER SLOTS, loaded, and each node's keys, memory and CPU time read.
use std::io::{Read, Write};
use std::net::SocketAddr;
use std::path::Path;
use std::thread;
use std::time::Duration;

use logless_harness::probe;
use logless_harness::server::{self, ServerSpec};
use logless_placement::{key_slot, SLOTS};
use logless_redis::reply::parse_reply;
use logless_redis::resp::Value;

use crate::compare::cpu;
use crate::compare::peers::{self, Proc};
use crate::space::{dbsize, metric, progress, rss_under, spawn, wait_until, write_keys};

/// How long every node's process may live.
const PROCESS_LIMIT_S: u64 = 3_600;
/// How long a question to a node may take (a loaded machine is slow, not broken).
const TIMEOUT: Duration = Duration::from_secs(30);
/// The largest reply read (CLUSTER SLOTS of a ring has several thousand runs).
const REPLY_BYTES_MAX: usize = 64 << 20;

/// How clients reach a key's replicas, and how the ring is started for them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Series {
    /// Cluster mode (`--cluster-enabled`): clients read CLUSTER SLOTS once and send each key to
    /// its first replica, so nothing is forwarded.
    Routed,
    /// A plain ring: clients send every key to any node (round robin), and a node that does not
    /// hold the key forwards it to a replica (docs/ring.md §3).
    AnyNode,
}

impl Series {
    /// Both, in the order they run.
    pub const ALL: [Series; 2] = [Series::Routed, Series::AnyNode];

    /// Its name in the results.
    pub fn name(self) -> &'static str {
        match self {
            Series::Routed => "routed",
            Series::AnyNode => "any-node",
        }
    }
}

/// Each slot's first replica, as CLUSTER SLOTS names it (an index into the ring's nodes).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SlotMap {
    first: Vec<usize>,
}

impl SlotMap {
    /// The node clients send the keys of `slot` to.
    pub fn node_of_slot(&self, slot: u16) -> usize {
        self.first[usize::from(slot)]
    }

    /// The node clients send `key` to.
    pub fn node_of(&self, key: &str) -> usize {
        self.first[usize::from(key_slot(key.as_bytes()).get())]
    }

    /// Reads a CLUSTER SLOTS reply: each run `[start, end, [ip, port, …], …]` gives its slots
    /// to the node (of `clients`) its first replica's port names. Every slot must be covered.
    pub fn from_reply(reply: &Value, clients: &[SocketAddr]) -> Result<SlotMap, String> {
        let Value::Array(runs) = reply else {
            return Err(format!("CLUSTER SLOTS answered {reply:?}"));
        };
        let mut first = vec![usize::MAX; usize::from(SLOTS)];
        for run in runs {
            let bad = || format!("a CLUSTER SLOTS run that is not [start, end, node, …]: {run:?}");
            let Value::Array(fields) = run else {
                return Err(bad());
            };
            let (Some(Value::Int(start)), Some(Value::Int(end)), Some(Value::Array(node))) =
                (fields.first(), fields.get(1), fields.get(2))
            else {
                return Err(bad());
            };
            let Some(Value::Int(port)) = node.get(1) else {
                return Err(bad());
            };
            let index = clients
                .iter()
                .position(|c| i64::from(c.port()) == *port)
                .ok_or_else(|| format!("CLUSTER SLOTS names port {port}, no node of this ring"))?;
            let slots = usize::try_from(*start).map_err(|_| bad())?
                ..=usize::try_from(*end).map_err(|_| bad())?;
            for slot in slots {
                *first.get_mut(slot).ok_or_else(bad)? = index;
            }
        }
        match first.iter().position(|&n| n == usize::MAX) {
            Some(slot) => Err(format!("CLUSTER SLOTS leaves slot {slot} without a node")),
            None => Ok(SlotMap { first }),
        }
    }
}

/// What one node holds, read after the keys were loaded.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
pub struct Held {
    /// DBSIZE: the keys of its own copy.
    pub dbsize: u64,
    /// `logless_ring_keys_owned` of its `/metrics`, if it answered.
    pub keys_owned: Option<u64>,
    /// Resident memory (the process and its descendants), bytes.
    pub rss_bytes: u64,
}

/// A running ring; its processes are stopped when it is dropped.
pub struct Ring {
    specs: Vec<ServerSpec>,
    procs: Vec<Proc>,
    // Removed (with the nodes' data) when the ring is dropped; none for a ring whose nodes
    // are started again by another.
    _data: Option<tempfile::TempDir>,
}

impl Ring {
    /// Starts `nodes` nodes of `bin` with each key on `replication` of them, in cluster mode for
    /// [`Series::Routed`], and waits until every node serves.
    pub fn start(
        bin: &Path,
        nodes: u16,
        replication: u8,
        series: Series,
        durability: &str,
    ) -> Result<Ring, String> {
        Ring::start_with_spare(bin, nodes, false, replication, series, durability)
    }

    /// As [`Ring::start`], with one more node (the last, id `nodes + 1`) if `spare`: in every
    /// node's peer list but not in the ring's configuration, as a node about to be added is
    /// (docs/ring.md §4 "Operating"). The `nodes` members are started first on their own list,
    /// which writes the ring's stage register (their configuration); then all are stopped and
    /// started again with the list of `nodes + 1`, the ring keeping the register's
    /// configuration. The nodes must keep their stores over a restart (not `memory`).
    pub fn start_with_spare(
        bin: &Path,
        nodes: u16,
        spare: bool,
        replication: u8,
        series: Series,
        durability: &str,
    ) -> Result<Ring, String> {
        let data = tempfile::Builder::new()
            .prefix("logless-ring-")
            .tempdir()
            .map_err(|e| e.to_string())?;
        let all = nodes + u16::from(spare);
        let port = peers::free_ports(&server::PORT_OFFSETS, all)?;
        let specs = server::loopback_cluster(all, port, data.path(), durability);
        let configure = |specs: &[ServerSpec]| -> Vec<ServerSpec> {
            let client_addrs = server::client_addrs_flag(specs);
            specs
                .iter()
                .map(|s| {
                    let mut s = s.clone();
                    s.peers.truncate(specs.len());
                    let s = s
                        .flag("--replication", replication)
                        .flag("--peer-client-addrs", &client_addrs);
                    match series {
                        Series::Routed => s.args(["--cluster-enabled"]),
                        Series::AnyNode => s,
                    }
                })
                .collect()
        };
        if spare {
            // The members alone first, until their stage register holds the ring of `nodes`
            // and every one reported installing it; stopped (gracefully, their stores kept)
            // when this ring is dropped.
            let members = Ring::serve(bin, configure(&specs[..usize::from(nodes)]), series, None)?;
            let http = members.specs[0].http;
            wait_until(Duration::from_secs(60), "the ring's stage register", || {
                registered(http, nodes)
            })
            .map_err(|e| members.with_logs(e))?;
        }
        Ring::serve(bin, configure(&specs), series, Some(data))
    }

    /// Starts `specs` and waits until every node serves.
    fn serve(
        bin: &Path,
        specs: Vec<ServerSpec>,
        series: Series,
        data: Option<tempfile::TempDir>,
    ) -> Result<Ring, String> {
        let procs = specs
            .iter()
            .map(|s| spawn(bin, s, PROCESS_LIMIT_S))
            .collect::<Result<Vec<_>, _>>()?;
        let ring = Ring {
            specs,
            procs,
            _data: data,
        };
        let clients = ring.clients();
        wait_until(Duration::from_secs(120), "the ring to serve", || {
            match series {
                Series::AnyNode => probe::cluster_serves(&clients, "ring:ready", TIMEOUT),
                // A node answers MOVED for keys it does not hold: ask the key's own.
                Series::Routed => ring.slot_map().is_ok_and(|map| {
                    let at = clients[map.node_of("ring:ready")];
                    probe::cluster_serves(&[at], "ring:ready", TIMEOUT)
                        && clients.iter().all(|&c| {
                            probe::resp_ask(c, &["PING"], TIMEOUT).is_ok_and(|r| r == "+PONG")
                        })
                }),
            }
        })
        .map_err(|e| ring.with_logs(e))?;
        Ok(ring)
    }

    /// Every node's client address.
    pub fn clients(&self) -> Vec<SocketAddr> {
        self.specs.iter().map(|s| s.client).collect()
    }

    /// Every node's HTTP address.
    pub fn https(&self) -> Vec<SocketAddr> {
        self.specs.iter().map(|s| s.http).collect()
    }

    /// The slot map, read from the first node's CLUSTER SLOTS (cluster mode only).
    pub fn slot_map(&self) -> Result<SlotMap, String> {
        let clients = self.clients();
        SlotMap::from_reply(&ask_value(clients[0], &["CLUSTER", "SLOTS"])?, &clients)
    }

    /// Loads `count` keys named by `name`, each `value`, every key written through the node
    /// `node_of` gives (all nodes at once), with a progress bar saying `label`.
    pub fn load(
        &self,
        count: u64,
        name: impl Fn(u64) -> String + Sync,
        node_of: impl Fn(&str) -> usize,
        value: &[u8],
        label: String,
    ) -> Result<(), String> {
        let clients = self.clients();
        let mut mine: Vec<Vec<u64>> = vec![Vec::new(); clients.len()];
        for i in 0..count {
            mine[node_of(&name(i))].push(i);
        }
        let bar = progress(count, "loading");
        bar.set_message(label);
        let loaded = thread::scope(|scope| {
            let writers: Vec<_> = mine
                .iter()
                .zip(&clients)
                .map(|(keys, &addr)| {
                    let (name, bar) = (&name, &bar);
                    scope.spawn(move || {
                        let key = |j: u64| name(keys[j as usize]);
                        write_keys(addr, keys.len() as u64, key, value, None, bar)
                    })
                })
                .collect();
            writers
                .into_iter()
                .try_for_each(|w| w.join().unwrap_or_else(|_| Err("a writer panicked".into())))
        });
        bar.finish_and_clear();
        loaded.map_err(|e| self.with_logs(e))
    }

    /// What each node holds now.
    pub fn held(&self) -> Vec<Held> {
        self.specs
            .iter()
            .zip(&self.procs)
            .map(|(spec, proc)| Held {
                dbsize: dbsize(spec.client),
                keys_owned: self.metric(spec, "logless_ring_keys_owned"),
                rss_bytes: rss_under(proc.pid()),
            })
            .collect()
    }

    /// The CPU seconds every node's process has used so far, user and system time.
    pub fn cpu_seconds(&self) -> f64 {
        let roots: Vec<u32> = self.procs.iter().map(Proc::pid).collect();
        cpu::tree_seconds(&roots)
    }

    /// The counters of `/metrics` named `names`, each summed over the nodes (a node that does
    /// not show one counts 0).
    pub fn counters<const K: usize>(&self, names: [&str; K]) -> [u64; K] {
        let mut sums = [0; K];
        for spec in &self.specs {
            let Ok((_, page)) = probe::http_get(spec.http, "/metrics", TIMEOUT) else {
                continue;
            };
            for (sum, name) in sums.iter_mut().zip(names) {
                *sum += metric(&page, name).unwrap_or(0);
            }
        }
        sums
    }

    /// A node that has exited, with its log, if any.
    pub fn dead(&mut self) -> Option<String> {
        self.procs.iter_mut().find_map(|p| {
            let status = p.exited()?;
            Some(format!(
                "{} exited ({status}); its log ends:\n{}",
                p.label,
                p.log_tail()
            ))
        })
    }

    fn metric(&self, spec: &ServerSpec, name: &str) -> Option<u64> {
        let (_, page) = probe::http_get(spec.http, "/metrics", TIMEOUT).ok()?;
        metric(&page, name)
    }

    /// `error` with the end of every node's log.
    pub fn with_logs(&self, error: String) -> String {
        peers::with_logs(&self.procs, error)
    }
}

/// Whether the ring's stage register, read through the node serving HTTP at `http`
/// (`GET /cluster`, what `logless cluster status` shows), holds a ring of `nodes` members that
/// every one of them reported installing.
fn registered(http: SocketAddr, nodes: u16) -> bool {
    let Ok((200, body)) = probe::http_get(http, "/cluster", TIMEOUT) else {
        return false;
    };
    let Ok(status) = serde_json::from_str::<serde_json::Value>(&body) else {
        return false;
    };
    let members = status["nodes"].as_array().map_or(0, Vec::len);
    let reported = status["reports"].as_object().is_some_and(|reports| {
        (1..=nodes).all(|n| {
            reports
                .get(&n.to_string())
                .and_then(|r| r.as_str())
                .is_some_and(|r| r.starts_with("Stable"))
        })
    });
    members == usize::from(nodes) && reported
}

/// Asks `addr` one command and reads its whole reply, however nested.
pub fn ask_value(addr: SocketAddr, args: &[&str]) -> Result<Value, String> {
    let failed = |e: std::io::Error| format!("{} to {addr}: {e}", args.join(" "));
    let mut stream = probe::connect(addr, TIMEOUT).map_err(failed)?;
    stream.set_read_timeout(Some(TIMEOUT)).map_err(failed)?;
    stream
        .write_all(&probe::resp_request(args))
        .map_err(failed)?;
    let mut reply = Vec::new();
    let mut chunk = [0u8; 64 * 1024];
    loop {
        if let Some((value, _)) = parse_reply(&reply, REPLY_BYTES_MAX)? {
            return Ok(value);
        }
        let got = stream.read(&mut chunk).map_err(failed)?;
        if got == 0 {
            return Err(format!("{addr} closed the connection"));
        }
        reply.extend_from_slice(&chunk[..got]);
    }
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;

    use super::*;

    fn node(port: i64) -> Value {
        Value::Array(vec![
            Value::Bulk(Bytes::from_static(b"127.0.0.1")),
            Value::Int(port),
            Value::Bulk(Bytes::from_static(b"id")),
        ])
    }

    fn run(start: i64, end: i64, ports: &[i64]) -> Value {
        let mut fields = vec![Value::Int(start), Value::Int(end)];
        fields.extend(ports.iter().map(|&p| node(p)));
        Value::Array(fields)
    }

    #[test]
    fn a_slot_map_sends_each_slot_to_its_first_replica() {
        let clients: Vec<SocketAddr> = ["127.0.0.1:7001", "127.0.0.1:7002", "127.0.0.1:7003"]
            .iter()
            .map(|a| a.parse().unwrap())
            .collect();
        let reply = Value::Array(vec![
            run(0, 9_999, &[7002, 7001, 7003]),
            run(10_000, 16_383, &[7003, 7002, 7001]),
        ]);
        let map = SlotMap::from_reply(&reply, &clients).unwrap();
        // "foo" is in slot 12182, "bar" in slot 5061.
        assert_eq!(map.node_of("foo"), 2);
        assert_eq!(map.node_of("bar"), 1);

        let short = Value::Array(vec![run(0, 9_999, &[7002])]);
        let err = SlotMap::from_reply(&short, &clients).unwrap_err();
        assert!(err.contains("slot 10000 without a node"), "{err}");
        let stranger = Value::Array(vec![run(0, 16_383, &[9999])]);
        let err = SlotMap::from_reply(&stranger, &clients).unwrap_err();
        assert!(err.contains("port 9999"), "{err}");
        let err = SlotMap::from_reply(&Value::Error("ERR no".into()), &clients).unwrap_err();
        assert!(err.contains("CLUSTER SLOTS answered"), "{err}");
    }
}
