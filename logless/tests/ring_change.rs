//! Changing a ring of real processes (issue 28, docs/ring.md §4): four nodes with each key on
//! three. `logless cluster status` shows the ring's stage register at `Stable(1)`; of two
//! changes asked of two nodes at once one is refused as concurrent, the other goes through
//! `Joint(2)` to `Stable(2)` and every node installs it, keys are then served through every
//! node by the new configuration, and a node restarted serves by it too. The data mover is not built, so the change runs on an empty
//! ring, and a change whose moving slots hold keys is refused and leaves the ring serving in
//! its joint stage, from which it resumes once they are gone.
mod common;

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::{peer_client_addrs, Cluster};
use logless_harness::probe::http_get;
use logless_node::status::NodeStatus;
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

/// Runs `logless cluster --http <http> <args>`.
fn cluster_command(http: SocketAddr, args: &[&str]) -> Command {
    let mut command = Command::new(common::binary());
    command
        .args(["cluster", "--http", &http.to_string()])
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    command
}

fn text(output: &Output) -> String {
    format!(
        "status {:?}\nstdout:\n{}stderr:\n{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
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

    // The ring empty: the keys the start-up probe wrote are deleted.
    empty_every_copy(&mut cons);

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
    let held: BTreeSet<String> = cons[removed - 1].keys("*").unwrap();
    assert!(held.is_empty(), "the removed node holds {held:?}");

    // A node restarted now serves by the configuration in the register, not by the one its
    // peer list derives (epoch 1, with the removed node).
    let restarted = if removed == 1 { 1 } else { 0 };
    assert!(cluster.stop(restarted));
    cluster.spawn(restarted);
    cluster.wait_serving(Duration::from_secs(30));
    assert_eq!(installed(&cluster, restarted), "Stable(2)");
    cons[restarted] = cluster.connect(restarted);
    for i in 0..NODES {
        let got: usize = cons[restarted].get(format!("after:{i}:7")).unwrap();
        assert_eq!(got, 7);
    }

    // Adding it back would move keys, which nothing moves yet: refused, and the ring stays in
    // its joint stage, serving every key.
    let output = cluster_command(http(0), &["add", &removed.to_string()])
        .output()
        .unwrap();
    let shown = text(&output);
    assert!(!output.status.success(), "{shown}");
    assert!(shown.contains("data mover not built"), "{shown}");
    assert!(shown.contains("stays in Joint(3)"), "{shown}");
    let shown = status(http(2));
    assert!(shown.contains("stage Joint(3) (epoch 3)"), "{shown}");
    every_node_installs(&cluster, "Joint(3)");
    for con in &mut cons {
        let got: usize = con.get("after:0:7").unwrap();
        assert_eq!(got, 7);
        let _: () = con.set("during:joint", 1).unwrap();
    }

    // Once no copy shows a key any more, the same change resumes from its joint stage and
    // finishes (the nodes count their keys of the moving slots again every few seconds).
    empty_every_copy(&mut cons);
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let output = cluster_command(http(0), &["add", &removed.to_string()])
            .output()
            .unwrap();
        let shown = text(&output);
        if output.status.success() {
            assert!(shown.contains("-> epoch 3 [1, 2, 3, 4]"), "{shown}");
            break;
        }
        assert!(shown.contains("data mover not built"), "{shown}");
        assert!(Instant::now() < deadline, "{shown}");
        std::thread::sleep(Duration::from_millis(500));
    }
    every_node_installs(&cluster, "Stable(3)");
}

/// Deletes every key any copy shows, until none shows one (a replica left out of a deletion's
/// quorum shows the old value until the register's next write reaches it, and a change counts
/// what every copy shows).
fn empty_every_copy(cons: &mut [redis::Connection]) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let shown: Vec<BTreeSet<String>> = cons.iter_mut().map(|c| c.keys("*").unwrap()).collect();
        if shown.iter().all(BTreeSet::is_empty) {
            return;
        }
        for (con, keys) in cons.iter_mut().zip(&shown) {
            for key in keys {
                let _: i64 = con.del(key).unwrap();
            }
        }
        assert!(Instant::now() < deadline, "copies still show {shown:?}");
        std::thread::sleep(Duration::from_millis(100));
    }
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
    // The right one gets as far as the change itself: the keys of the start-up probe are in
    // slots it would move.
    let output = cluster_command(http, &["--password", "sesame", "remove", "4"])
        .output()
        .unwrap();
    let shown = text(&output);
    assert!(shown.contains("answered 409"), "{shown}");
    assert!(shown.contains("data mover not built"), "{shown}");
}
