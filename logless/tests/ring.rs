//! A ring of real processes (issue 28, docs/ring.md): five nodes with each key on three, as
//! `logless up --nodes 5 --replication 3` starts them. Every key is written and read through
//! every node (forwarded by those that do not hold it), increments through forwarding count
//! exactly once, a node that does not hold a key changes nothing for it when killed and one
//! that does leaves it served; each node holds about 3/5 of the keys; a node started on
//! another ring is refused. In cluster mode the ring's slot map is what CLUSTER SLOTS shows
//! and MOVED follows (by hand, and with `redis-cli -c` where it is installed).
mod common;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use common::{array, int, metric, peer_client_addrs, Cluster};
use logless_placement::{key_slot, Configuration, NodeId, Replication};
use redis::{Commands, RedisError, Value};

const NODES: usize = 5;

/// Five nodes, each key on three of them, every node told every node's client address, with
/// `extra` flags (removal of dead registers left to its default, off on a ring).
fn ring(extra: &[&str]) -> Cluster {
    Cluster::start_each(NODES, "memory", |_, spec| {
        let clients = peer_client_addrs(&spec);
        spec.flag("--replication", 3)
            .flag("--peer-client-addrs", clients)
            .args(extra.iter().copied())
    })
}

/// The ring every node of [`ring`] derives.
fn placement() -> Configuration {
    let nodes: Vec<NodeId> = (1..=NODES as u16).map(NodeId).collect();
    Configuration::balanced(&nodes, Replication::THREE).unwrap()
}

/// The nodes (indices) that replicate `key` on `ring`.
fn replicas_of(ring: &Configuration, key: &str) -> Vec<usize> {
    let replicas = ring.replicas(key_slot(key.as_bytes()));
    replicas
        .nodes()
        .iter()
        .map(|n| usize::from(n.0) - 1)
        .collect()
}

/// INCR `key` through `con`, again while the answer is TRYAGAIN (not applied): 1 if
/// acknowledged, 0 if UNCERTAIN.
fn incr_acked(con: &mut redis::Connection, key: &str) -> i64 {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match con.incr::<_, _, i64>(key, 1) {
            Ok(_) => return 1,
            Err(e) if e.code() == Some("UNCERTAIN") => return 0,
            Err(e) if e.code() == Some("TRYAGAIN") && Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(50));
            }
            Err(e) => panic!("INCR {key}: {e}"),
        }
    }
}

#[test]
fn every_node_serves_every_key_of_a_ring_and_survives_a_node_lost() {
    let mut cluster = ring(&[]);
    let mut cons: Vec<redis::Connection> = (0..NODES).map(|i| cluster.connect(i)).collect();

    // Every key written through one node and read through every node.
    const KEYS: usize = 300;
    let mut pipe = redis::pipe();
    for k in 0..KEYS {
        pipe.set(format!("key:{k}"), k).ignore();
    }
    let () = pipe.query(&mut cons[0]).unwrap();
    for (i, con) in cons.iter_mut().enumerate() {
        for k in (i..KEYS).step_by(7) {
            let got: usize = con.get(format!("key:{k}")).unwrap();
            assert_eq!(got, k, "key:{k} through node {}", i + 1);
        }
        let _: () = con.set(format!("through:{i}"), i).unwrap();
    }
    for con in &mut cons {
        for i in 0..NODES {
            let got: usize = con.get(format!("through:{i}")).unwrap();
            assert_eq!(got, i);
        }
    }

    // Increments through every node count exactly once.
    for round in 0..20 {
        for con in &mut cons {
            let _: i64 = con.incr("counter", 1).unwrap();
        }
        let seen: i64 = cons[round % NODES].get("counter").unwrap();
        assert_eq!(seen, 5 * (round as i64 + 1));
    }
    let forwarded: u64 = (0..NODES)
        .map(|i| {
            metric(
                cluster.replicas[i].spec.http,
                "logless_ring_forwarded_total",
            )
        })
        .sum();
    assert!(forwarded > 0, "some commands were forwarded");

    // Keys of one hash tag go together through any node; keys of different replicas do not.
    for con in &mut cons {
        let _: () = con.set("{user:7}.name", "ada").unwrap();
        let both: Vec<String> = con.mget(&["{user:7}.name", "{user:7}.name"]).unwrap();
        assert_eq!(both, ["ada", "ada"]);
    }
    let many: Vec<String> = (0..20).map(|k| format!("key:{k}")).collect();
    let err: RedisError = cons[0].mget::<_, Vec<String>>(&many).unwrap_err();
    assert_eq!(err.code(), Some("CROSSSLOT"), "{err}");

    // Each node holds about 3/5 of the keys, only keys of slots it replicates, and every key
    // is on a majority of its replicas at least (the third may still be on its way).
    let ring = placement();
    let held: Vec<BTreeSet<String>> = cons.iter_mut().map(|con| con.keys("*").unwrap()).collect();
    let every: BTreeSet<&String> = held.iter().flatten().collect();
    for key in &every {
        let on = held.iter().filter(|keys| keys.contains(*key)).count();
        assert!((2..=3).contains(&on), "{key} on {on} nodes");
    }
    for (i, keys) in held.iter().enumerate() {
        for key in keys {
            assert!(
                replicas_of(&ring, key).contains(&i),
                "node {} holds {key}",
                i + 1
            );
        }
        let share = keys.len() as f64 / every.len() as f64;
        println!(
            "node {}: {} of {} keys, {share:.2} (R/N = {:.2})",
            i + 1,
            keys.len(),
            every.len(),
            3.0 / NODES as f64
        );
        assert!((0.4..=0.8).contains(&share), "node {} holds {share}", i + 1);
    }

    // A node that does not hold a key killed: nothing changes for the key, through any node.
    let key = "survivor";
    let _: () = cons[0].set(key, 0).unwrap();
    let replicas = replicas_of(&ring, key);
    let outsider = (0..NODES).find(|i| !replicas.contains(i)).unwrap();
    cluster.kill(outsider);
    let mut acked = 0;
    let mut sent = 0;
    for (i, con) in cons.iter_mut().enumerate() {
        if i != outsider {
            acked += incr_acked(con, key);
            sent += 1;
        }
    }
    assert_eq!(
        acked, sent,
        "no increment uncertain with a non-replica down"
    );

    // One of its replicas killed: the other two keep it served through every live node,
    // forwarding to a live replica.
    let victim = replicas[0];
    cluster.kill(victim);
    for _ in 0..3 {
        for (i, con) in cons.iter_mut().enumerate() {
            if i != outsider && i != victim {
                acked += incr_acked(con, key);
                sent += 1;
            }
        }
    }
    let value: i64 = cons[live_node(outsider, victim)].get(key).unwrap();
    assert!(
        (acked..=sent).contains(&value),
        "{value} increments applied, {acked} acknowledged of {sent}"
    );
    for (i, con) in cons.iter_mut().enumerate() {
        if i != outsider && i != victim {
            let seen: i64 = con.get(key).unwrap();
            assert_eq!(seen, value, "through node {}", i + 1);
        }
    }

    // A node started on another ring (here every key on all five) is refused by the others,
    // which name both rings.
    let spec = &mut cluster.replicas[outsider].spec;
    let at = spec
        .extra
        .iter()
        .position(|a| a == "--replication")
        .unwrap();
    spec.extra[at + 1] = "5".into();
    cluster.spawn(outsider);
    let deadline = Instant::now() + Duration::from_secs(10);
    let live = (0..NODES).filter(|&i| i != outsider && i != victim);
    let logs: Vec<_> = live.map(|i| cluster.replicas[i].spec.log.clone()).collect();
    while !logs.iter().any(|log| {
        std::fs::read_to_string(log).is_ok_and(|text| text.contains("runs another ring"))
    }) {
        assert!(
            Instant::now() < deadline,
            "no node refused the other ring:\n{}",
            cluster.log_tail(live_node(outsider, victim))
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A node other than `a` and `b`.
fn live_node(a: usize, b: usize) -> usize {
    (0..NODES).find(|&i| i != a && i != b).unwrap()
}

#[test]
fn cluster_clients_are_redirected_to_the_replicas_of_the_ring() {
    let cluster = ring(&["--cluster-enabled"]);
    let ports: Vec<u16> = cluster
        .replicas
        .iter()
        .map(|r| r.spec.client.port())
        .collect();
    let mut a = cluster.connect(0);
    // Every slot once, each with three of the five nodes; each node replicates about 3/5.
    let slots: Value = redis::cmd("CLUSTER").arg("SLOTS").query(&mut a).unwrap();
    let mut next = 0;
    let mut held = [0i64; NODES];
    for entry in array(&slots) {
        let entry = array(entry);
        assert_eq!(int(&entry[0]), next);
        let (start, end) = (int(&entry[0]), int(&entry[1]));
        next = end + 1;
        assert_eq!(entry.len(), 2 + 3);
        let replicas: BTreeSet<u16> = entry[2..]
            .iter()
            .map(|node| u16::try_from(int(&array(node)[1])).unwrap())
            .collect();
        assert_eq!(replicas.len(), 3);
        for port in replicas {
            let i = ports.iter().position(|&p| p == port).unwrap();
            held[i] += end - start + 1;
        }
    }
    assert_eq!(next, 16384);
    for (i, slots) in held.iter().enumerate() {
        let share = *slots as f64 / 16384.0;
        assert!(
            (0.5..=0.7).contains(&share),
            "node {} replicates {share}",
            i + 1
        );
    }

    // A node asked for a key it does not hold redirects (MOVED) to the slot's first replica,
    // which serves it; following the redirections, every key is written and read.
    let mut moved = 0;
    for k in 0..40 {
        let key = format!("moved:{k}");
        let mut port = ports[0];
        let mut hops = 0;
        loop {
            let i = ports.iter().position(|&p| p == port).unwrap();
            let mut con = cluster.connect(i);
            match con.set::<_, _, ()>(&key, k) {
                Ok(()) => {
                    let got: i64 = con.get(&key).unwrap();
                    assert_eq!(got, k);
                    break;
                }
                Err(e) if e.code() == Some("MOVED") => {
                    let detail = e.detail().unwrap().to_owned();
                    let to = detail.rsplit(':').next().unwrap();
                    port = to.parse().unwrap();
                    moved += 1;
                    hops += 1;
                    assert!(hops < 2, "one redirection reaches a replica: {detail}");
                }
                Err(e) => panic!("SET {key}: {e}"),
            }
        }
    }
    assert!(moved > 0, "node 1 does not hold every key");

    // redis-cli -c, where it is installed, follows the redirections from every node.
    let cli = |port: u16, args: &[&str]| {
        std::process::Command::new("redis-cli")
            .args(["-c", "-p", &port.to_string()])
            .args(args)
            .output()
    };
    if cli(ports[0], &["PING"]).is_err() {
        println!("no redis-cli: its redirections are not checked");
        return;
    }
    for (i, &port) in ports.iter().enumerate() {
        let key = format!("cli:{i}");
        let set = cli(port, &["SET", &key, "v"]).unwrap();
        assert_eq!(String::from_utf8_lossy(&set.stdout).trim(), "OK", "{set:?}");
        for &other in &ports {
            let got = cli(other, &["GET", &key]).unwrap();
            assert_eq!(String::from_utf8_lossy(&got.stdout).trim(), "v", "{got:?}");
        }
    }
}

/// `logless status --http <one node>`: its output and whether it succeeded.
fn status_through(cluster: &Cluster, i: usize) -> (bool, String) {
    let out = std::process::Command::new(common::binary())
        .args(["status", "--http"])
        .arg(cluster.replicas[i].spec.http.to_string())
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

#[test]
fn a_ring_is_healthy_while_every_slot_has_a_majority_and_status_finds_every_node() {
    let mut cluster = ring(&[]);
    cluster.wait_serving(Duration::from_secs(30));
    let mut con = cluster.connect(0);
    assert_eq!(
        common::config_get(&mut con, "logless-remove-dead-registers"),
        "false",
        "removal off by default on a ring"
    );

    // Given one node, status finds the other four from its client addresses.
    let deadline = Instant::now() + Duration::from_secs(20);
    let text = loop {
        let (ok, text) = status_through(&cluster, 0);
        if ok {
            break text;
        }
        assert!(Instant::now() < deadline, "{text}");
        std::thread::sleep(Duration::from_millis(200));
    };
    for r in &cluster.replicas {
        assert!(text.contains(&r.spec.http.to_string()), "{text}");
    }
    assert!(text.contains("5 of 5 nodes of the ring healthy"), "{text}");
    assert!(text.contains("every slot has a majority"), "{text}");

    // Two nodes down: three of five are still a majority of all nodes, but the slots both
    // replicate have one replica of three left, so the live nodes are unhealthy and say which.
    cluster.kill(3);
    cluster.kill(4);
    let first_http = cluster.replicas[0].spec.http;
    let health = || {
        logless_harness::probe::http_get(first_http, "/health", Duration::from_secs(5))
            .map(|(code, _)| code)
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut round = 0;
    while health().ok() != Some(503) {
        // A node learns a link is down when it sends on it: commands keep messages going.
        round += 1;
        for k in 0..20 {
            let _: Result<(), RedisError> = con.set(format!("health-{round}-{k}"), k);
        }
        assert!(
            Instant::now() < deadline,
            "node 1 still healthy with 4 and 5 down: {:?}",
            logless_harness::probe::http_get(first_http, "/status", Duration::from_secs(5))
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let (ok, text) = status_through(&cluster, 0);
    assert!(!ok, "{text}");
    assert!(text.contains("slots without a majority"), "{text}");
    assert!(text.contains("reaches fewer than a majority"), "{text}");
    let lost = range_of_nodes_4_and_5(&placement());
    assert!(text.contains(&lost), "{lost} not in {text}");

    // One of them back: every slot has two of its replicas again.
    cluster.spawn(3);
    let deadline = Instant::now() + Duration::from_secs(30);
    while health().ok() != Some(200) {
        assert!(
            Instant::now() < deadline,
            "node 1 unhealthy with only node 5 down"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The first slot range that nodes 4 and 5 both replicate, as status names it.
fn range_of_nodes_4_and_5(ring: &Configuration) -> String {
    let (range, _) = ring
        .slot_ranges()
        .into_iter()
        .find(|(_, replicas)| replicas.contains(NodeId(4)) && replicas.contains(NodeId(5)))
        .unwrap();
    format!("{}-{}", range.first, range.last)
}
