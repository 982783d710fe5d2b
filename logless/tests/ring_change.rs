//! Changing a ring of real processes (issue 28, docs/ring.md §4): four nodes with each key on
//! three. `logless cluster status` shows the ring's stage register at `Stable(1)`; of two
//! changes asked of two nodes at once one is refused as concurrent, the other goes through
//! `Joint(2)` to `Stable(2)` and every node installs it, the keys written before are moved to
//! their new replicas and served through every node, as are keys written after, and a node
//! restarted serves by the new configuration too; the removed node drops every register it
//! held (`/metrics`), and once it has, adding it back goes through `Joint(3)` to `Stable(3)`
//! with every key served with its last value (overwritten and deleted ones included) through
//! every node. A ring grown to six peers then takes a
//! node, replaces a dead one and loses one under a writer: every acknowledged write is read
//! back, counters are exact, and every key is on its new replicas.
mod common;

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use common::ring::{cluster_command, text};
use common::{metric, peer_client_addrs, Cluster, ServerSpec};
use logless_harness::probe::http_get;
use logless_node::status::NodeStatus;
use logless_placement::{key_slot, Configuration, NodeId, Replication};
use redis::Commands;

const NODES: usize = 4;

/// Four nodes, each key on three, whose stores outlive the process (mmap); with `password` as
/// their requirepass.
fn ring(password: Option<&str>) -> Cluster {
    Cluster::start_each_as(NODES, "mmap", password, |_, spec| {
        let clients = peer_client_addrs(&spec);
        let spec = spec
            .flag("--replication", 3)
            .flag("--peer-client-addrs", clients);
        match password {
            Some(password) => spec.flag("--requirepass", password),
            None => spec,
        }
    })
}

/// `logless cluster status` asked of `http`, once the ring's register is written.
fn status(http: SocketAddr) -> String {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let output = cluster_command(http, &["status"]).output().unwrap();
        if output.status.success() {
            return String::from_utf8_lossy(&output.stdout).into_owned();
        }
        assert!(Instant::now() < deadline, "{}", text(&output));
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// `logless status` asked of `http` (it finds the other nodes): its output, whatever its exit
/// status (a node down makes it fail).
fn node_status(http: SocketAddr) -> String {
    let output = std::process::Command::new(common::binary())
        .args(["status", "--http", &http.to_string()])
        .output()
        .unwrap();
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// The stage node `i` reports in `/status`.
fn installed(cluster: &Cluster, i: usize) -> String {
    let (_, body) = http_get(
        cluster.replicas[i].spec.http,
        "/status",
        Duration::from_secs(3),
    )
    .unwrap();
    let status: NodeStatus = serde_json::from_str(&body).unwrap();
    status.ring.expect("a ring").stage
}

/// Waits until every node reports `stage` in `/status`.
fn every_node_installs(cluster: &Cluster, stage: &str) {
    let deadline = Instant::now() + Duration::from_secs(10);
    for i in 0..NODES {
        while installed(cluster, i) != stage {
            assert!(
                Instant::now() < deadline,
                "node {} stays at {}",
                i + 1,
                installed(cluster, i)
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

#[test]
fn a_ring_changes_through_its_joint_stage_and_refuses_a_concurrent_change() {
    let mut cluster = ring(None);
    let https: Vec<SocketAddr> = cluster.replicas.iter().map(|r| r.spec.http).collect();
    let http = |i: usize| https[i];
    let mut cons: Vec<redis::Connection> = (0..NODES).map(|i| cluster.connect(i)).collect();

    let shown = status(http(0));
    assert!(
        shown.contains("stage Stable(1) (epoch 1), R = 3, nodes [1, 2, 3, 4]"),
        "{shown}"
    );
    every_node_installs(&cluster, "Stable(1)");

    // Keys before the change, on every node's slots.
    for (i, con) in cons.iter_mut().enumerate() {
        for k in 0..30 {
            let _: () = con.set(format!("before:{i}:{k}"), k).unwrap();
        }
    }

    // Two changes asked of two nodes at once: one of them wins.
    let removing_4 = cluster_command(http(0), &["remove", "4"]).spawn().unwrap();
    let removing_3 = cluster_command(http(1), &["remove", "3"]).spawn().unwrap();
    let outcomes = [
        (4, removing_4.wait_with_output().unwrap()),
        (3, removing_3.wait_with_output().unwrap()),
    ];
    let won: Vec<usize> = outcomes
        .iter()
        .filter(|(_, o)| o.status.success())
        .map(|&(node, _)| node)
        .collect();
    assert_eq!(
        won.len(),
        1,
        "{}\n{}",
        text(&outcomes[0].1),
        text(&outcomes[1].1)
    );
    let removed = won[0];
    for (node, output) in &outcomes {
        let shown = text(output);
        if *node == removed {
            assert!(
                shown.contains("changed: epoch 1 [1, 2, 3, 4] -> epoch 2"),
                "{shown}"
            );
        } else {
            assert!(
                shown.contains("another change of the ring came first"),
                "{shown}"
            );
        }
    }

    // Every node installed Stable(2), the removed one too, and the register says so.
    every_node_installs(&cluster, "Stable(2)");
    let shown = status(http(removed - 1));
    assert!(shown.contains("stage Stable(2) (epoch 2)"), "{shown}");
    for node in 1..=NODES {
        assert!(shown.contains(&format!("{node:>6}  Stable(2)")), "{shown}");
    }
    // `logless status` shows each node's data mover of the joint stage, done.
    let shown = node_status(http(0));
    assert_eq!(
        shown.matches("data mover (Joint(2)): ").count(),
        NODES,
        "{shown}"
    );
    assert_eq!(shown.matches("; done").count(), NODES, "{shown}");
    assert!(shown.contains("keys found written through"), "{shown}");
    // It judges the ring by the configuration of Stable(2), of three nodes.
    assert!(
        shown.contains("3 of 3 nodes of the ring healthy (R = 3, the configuration of Stable(2))"),
        "{shown}"
    );

    // The keys of before were moved to their new replicas: served through every node.
    for con in &mut cons {
        for i in 0..NODES {
            for k in [0, 17, 29] {
                let got: usize = con.get(format!("before:{i}:{k}")).unwrap();
                assert_eq!(got, k);
            }
        }
    }

    // Keys are served through every node by the new configuration: the removed node forwards
    // every one and holds none.
    for (i, con) in cons.iter_mut().enumerate() {
        for k in 0..30 {
            let _: () = con.set(format!("after:{i}:{k}"), k).unwrap();
        }
    }
    for con in &mut cons {
        for i in 0..NODES {
            let got: usize = con.get(format!("after:{i}:7")).unwrap();
            assert_eq!(got, 7);
        }
    }
    let held: BTreeSet<String> = cons[removed - 1].keys("after:*").unwrap();
    assert!(held.is_empty(), "the removed node holds {held:?}");

    // A node restarted now serves by the configuration in the register, not by the one its
    // peer list derives (epoch 1, with the removed node). Restarted while it cannot read the
    // register (two of the four nodes down), it starts in that derived stage and its data
    // shards answer no peer (docs/ring.md §4 "A restarted node") until its first read.
    let restarted = if removed == 1 { 1 } else { 0 };
    let others: Vec<usize> = (0..NODES)
        .filter(|&i| i != restarted && i != removed - 1)
        .collect();
    for &i in others.iter().chain([&restarted]) {
        assert!(cluster.stop(i));
    }
    cluster.spawn(restarted);
    let awaiting = || {
        let (_, body) = http_get(https[restarted], "/status", Duration::from_secs(3)).unwrap();
        let status: NodeStatus = serde_json::from_str(&body).unwrap();
        let ring = status.ring.expect("a ring");
        (ring.stage, ring.shards_awaiting_stage)
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    while http_get(https[restarted], "/status", Duration::from_secs(1)).is_err() {
        assert!(Instant::now() < deadline, "no /status");
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(Duration::from_millis(600));
    let (stage, shards) = awaiting();
    assert_eq!(stage, "Stable(1)");
    assert!(
        shards > 0,
        "its data shards answer peers before it read the stage"
    );
    let shown = node_status(https[restarted]);
    assert!(
        shown.contains(&format!("{shards} data shards await the ring's stage")),
        "{shown}"
    );
    for &i in &others {
        cluster.spawn(i);
    }
    cluster.wait_serving(Duration::from_secs(30));
    assert_eq!(installed(&cluster, restarted), "Stable(2)");
    assert_eq!(awaiting(), ("Stable(2)".to_string(), 0));
    for i in others.into_iter().chain([restarted]) {
        cons[i] = cluster.connect(i);
    }
    for i in 0..NODES {
        let got: usize = cons[restarted].get(format!("after:{i}:7")).unwrap();
        assert_eq!(got, 7);
    }

    // Values given while the node is out: some overwritten, some deleted.
    for (i, con) in cons.iter_mut().enumerate() {
        let _: () = con.set(format!("before:{i}:17"), 1017).unwrap();
        let _: () = con.del(format!("before:{i}:29")).unwrap();
    }

    // The removed node replicates no slot: it drops every register it held (dead ones too),
    // in the background, and shows it.
    let gone = https[removed - 1];
    let deadline = Instant::now() + Duration::from_secs(20);
    while metric(gone, "logless_ring_registers_to_drop") > 0 {
        assert!(Instant::now() < deadline, "node {removed} still drops");
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(metric(gone, "logless_ring_registers_dropped_total") >= 60);
    let shown = node_status(gone);
    assert!(shown.contains(" dropped, 0 to drop"), "{shown}");

    // Added back, it starts with nothing, and the data mover gives it the keys of its slots.
    let output = cluster_command(http(0), &["add", &removed.to_string()])
        .output()
        .unwrap();
    let shown = text(&output);
    assert!(output.status.success(), "{shown}");
    assert!(shown.contains("-> epoch 3 [1, 2, 3, 4]"), "{shown}");
    every_node_installs(&cluster, "Stable(3)");
    for con in &mut cons {
        for i in 0..NODES {
            let got: Option<usize> = con.get(format!("before:{i}:0")).unwrap();
            assert_eq!(got, Some(0));
            let got: Option<usize> = con.get(format!("before:{i}:17")).unwrap();
            assert_eq!(got, Some(1017));
            let got: Option<usize> = con.get(format!("before:{i}:29")).unwrap();
            assert_eq!(got, None, "a key deleted while node {removed} was out");
            for k in 0..30 {
                let got: Option<usize> = con.get(format!("after:{i}:{k}")).unwrap();
                assert_eq!(got, Some(k));
            }
        }
    }
    let held: BTreeSet<String> = cons[removed - 1].keys("after:*").unwrap();
    assert!(
        !held.is_empty(),
        "node {removed} holds keys of its slots again"
    );
    assert_eq!(metric(gone, "logless_ring_registers_to_drop"), 0);
}

#[test]
fn a_change_needs_the_password_of_a_node_that_has_one() {
    let cluster = ring(Some("sesame"));
    let http = cluster.replicas[0].spec.http;
    let shown = status(http);
    assert!(shown.contains("stage Stable(1)"), "{shown}");
    for password in [None, Some("wrong")] {
        let mut command = cluster_command(http, &["remove", "4"]);
        command.env_remove("LOGLESS_PASSWORD");
        if let Some(password) = password {
            command.env("LOGLESS_PASSWORD", password);
        }
        let output = command.output().unwrap();
        let shown = text(&output);
        assert!(!output.status.success(), "{shown}");
        assert!(shown.contains("answered 401"), "{shown}");
        assert!(shown.contains("needs the node's requirepass"), "{shown}");
    }
    // The right one changes the ring, moving the keys of the start-up probe; the mover logs
    // in to read them with the same password.
    let output = cluster_command(http, &["--password", "sesame", "remove", "4"])
        .output()
        .unwrap();
    let shown = text(&output);
    assert!(output.status.success(), "{shown}");
    assert!(shown.contains("-> epoch 2 [1, 2, 3]"), "{shown}");
}

/// `spec` with the first `peers` of its peer list (and their client addresses).
fn with_peers(spec: &ServerSpec, peers: usize) -> ServerSpec {
    let mut spec = spec.clone();
    spec.peers.truncate(peers);
    let clients = peer_client_addrs(&spec);
    spec.flag("--peer-client-addrs", clients)
}

/// Waits until the node serving `/status` at `http` has no live link of a data shard to
/// `peer` (the ring shard, the last, may never send to it).
fn sees_down(http: SocketAddr, peer: u16) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let (_, body) = http_get(http, "/status", Duration::from_secs(3)).unwrap();
        let status: NodeStatus = serde_json::from_str(&body).unwrap();
        let ring_shard = status.links.iter().map(|l| l.shard).max().unwrap_or(0);
        let up = status
            .links
            .iter()
            .any(|l| l.peer == peer && l.shard != ring_shard && l.up);
        if !up {
            return;
        }
        assert!(Instant::now() < deadline, "node {peer} still seen up");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// What a writer through every node saw: the `w:N` it wrote, and per counter `c:J` the INCRs
/// acknowledged and those with an unknown outcome.
#[derive(Default)]
struct Written {
    acked: Vec<u64>,
    incrs: BTreeMap<u64, (i64, i64)>,
}

/// Writes `w:N` and increments `c:(N % 3)` through each of `cons` in turn until `stop`.
fn write_until(mut cons: Vec<redis::Connection>, stop: Arc<AtomicBool>) -> Written {
    let mut seen = Written::default();
    let mut n = 0u64;
    while !stop.load(Ordering::Relaxed) {
        let through = (n as usize) % cons.len();
        let con = &mut cons[through];
        if con.set::<_, _, ()>(format!("w:{n}"), n).is_ok() {
            seen.acked.push(n);
        }
        let counted = seen.incrs.entry(n % 3).or_default();
        match con.incr::<_, _, i64>(format!("c:{}", n % 3), 1) {
            Ok(_) => counted.0 += 1,
            Err(_) => counted.1 += 1,
        }
        n += 1;
        std::thread::sleep(Duration::from_millis(5));
    }
    seen
}

#[test]
fn a_ring_with_keys_grows_replaces_a_dead_node_and_shrinks_under_a_writer() {
    // Six nodes' places, of which four start as the ring; every node is then restarted with
    // all six in its peer list (the way a ring takes new nodes, docs/ring.md §4 "Operating").
    let mut cluster = Cluster::prepare(
        6,
        "mmap",
        None,
        |_, spec| spec.flag("--replication", 3),
        None,
    );
    let specs: Vec<ServerSpec> = cluster.replicas.iter().map(|r| r.spec.clone()).collect();
    for (i, spec) in specs.iter().enumerate().take(4) {
        cluster.replicas[i].spec = with_peers(spec, 4);
        cluster.spawn(i);
    }
    cluster.wait_serving(Duration::from_secs(30));
    let mut con = cluster.connect(0);
    for k in 0..200 {
        let _: () = con.set(format!("k:{k}"), k).unwrap();
    }
    for j in 0..3 {
        for _ in 0..5 {
            let _: i64 = con.incr(format!("c:{j}"), 1).unwrap();
        }
    }
    for i in 0..4 {
        assert!(cluster.stop(i));
    }
    for (i, spec) in specs.iter().enumerate() {
        cluster.replicas[i].spec = with_peers(spec, 6);
        cluster.spawn(i);
    }
    cluster.wait_serving(Duration::from_secs(30));
    let http = |i: usize| specs[i].http;
    let shown = status(http(2));
    assert!(shown.contains("nodes [1, 2, 3, 4]"), "{shown}");

    // A light writer through every node while the ring changes three times.
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let cons: Vec<redis::Connection> = (0..6).map(|i| cluster.connect(i)).collect();
        let stop = stop.clone();
        std::thread::spawn(move || write_until(cons, stop))
    };
    let started = Instant::now();
    for (change, expected) in [
        (&["add", "5"][..], "-> epoch 2 [1, 2, 3, 4, 5]"),
        (&["replace", "2", "6"][..], "-> epoch 3 [1, 3, 4, 5, 6]"),
        (&["remove", "1"][..], "-> epoch 4 [3, 4, 5, 6]"),
    ] {
        if change[0] == "replace" {
            // The node replaced is dead: killed, and seen down by the coordinator.
            cluster.kill(1);
            sees_down(http(2), 2);
        }
        let output = cluster_command(http(2), change).output().unwrap();
        let shown = text(&output);
        assert!(output.status.success(), "{change:?}: {shown}");
        assert!(shown.contains(expected), "{shown}");
    }
    let took = started.elapsed();
    stop.store(true, Ordering::Relaxed);
    let written = writer.join().unwrap();
    assert!(written.acked.len() > 50, "{} writes", written.acked.len());

    // Every acknowledged write is read back through every live node, and the counters are
    // exact.
    let mut cons: BTreeMap<usize, redis::Connection> = [0, 2, 3, 4, 5]
        .into_iter()
        .map(|i| (i, cluster.connect(i)))
        .collect();
    for con in cons.values_mut() {
        for k in (0..200).step_by(7) {
            let got: u64 = con.get(format!("k:{k}")).unwrap();
            assert_eq!(got, k);
        }
    }
    for (i, &n) in written.acked.iter().enumerate() {
        let through = [0, 2, 3, 4, 5][i % 5];
        let got: u64 = cons
            .get_mut(&through)
            .unwrap()
            .get(format!("w:{n}"))
            .unwrap();
        assert_eq!(got, n);
    }
    for (j, (acked, unknown)) in &written.incrs {
        let got: i64 = cons.get_mut(&0).unwrap().get(format!("c:{j}")).unwrap();
        assert!(
            got >= 5 + acked && got <= 5 + acked + unknown,
            "c:{j} is {got}: 5 before, {acked} acknowledged and {unknown} unknown since"
        );
    }

    // Every key is on its replicas by the final configuration, and each node of it holds
    // about R/N = 3/4 of the keys.
    let nodes: Vec<NodeId> = (1..=4).map(NodeId).collect();
    let last = Configuration::balanced(&nodes, Replication::THREE)
        .and_then(|c| c.with_node_added(NodeId(5)))
        .and_then(|c| c.with_node_replaced(NodeId(2), NodeId(6)))
        .and_then(|c| c.with_node_removed(NodeId(1)))
        .unwrap();
    let mut keys: Vec<String> = (0..200).map(|k| format!("k:{k}")).collect();
    keys.extend(written.acked.iter().map(|n| format!("w:{n}")));
    let held: BTreeMap<u16, BTreeSet<String>> = (3..=6)
        .map(|node| {
            let con = cons.get_mut(&(usize::from(node) - 1)).unwrap();
            (node, con.keys("*").unwrap())
        })
        .collect();
    for key in &keys {
        let replicas = last.replicas(key_slot(key.as_bytes()));
        let holding = replicas
            .nodes()
            .iter()
            .filter(|n| held[&n.0].contains(key))
            .count();
        assert!(holding >= 2, "{key} is on {holding} of its replicas");
    }
    for (node, copy) in &held {
        let share = keys.iter().filter(|k| copy.contains(*k)).count() as f64 / keys.len() as f64;
        assert!(
            (0.6..=0.9).contains(&share),
            "node {node} holds {share:.2} of the keys"
        );
    }
    eprintln!(
        "three changes under a writer took {took:?}; {} writes acknowledged",
        written.acked.len()
    );
}
