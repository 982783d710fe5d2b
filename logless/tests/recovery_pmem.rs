//! The log engine under `--recovery pmem` (mPaxos, seed 002 §IV-A and §V-B) on `--durability
//! emulp` (persistent memory emulated on DRAM), served by real `logless` processes: a follower
//! and then the leader killed with kill -9 under concurrent INCRs resume from their persistent
//! log and snapshot, lose no acknowledged increment and serve again, as does a cluster whose
//! every replica was killed at once; the mode is refused
//! without persistent memory (real or emulated) and outside the log engine.
mod common;

use std::time::Duration;

use common::increments::{
    assert_no_increment_lost, follower_then_leader_killed, increments_across_kills, info_field,
};
use common::Cluster;

/// Snapshots every few kilobytes of log, so that a restart rebuilds from a snapshot and a
/// log suffix rather than from the log alone.
const PMEM_ARGS: [&str; 8] = [
    "--engine",
    "multipaxos",
    "--recovery",
    "pmem",
    "--multipaxos",
    "snapshot_log_bytes_min=4096",
    "--multipaxos",
    "snapshot_ratio_percent=1",
];

fn pmem_cluster() -> Cluster {
    Cluster::start_with(3, "emulp", &PMEM_ARGS)
}

/// The replica's figures from `/status`.
fn status(cluster: &Cluster, i: usize) -> logless_node::status::NodeStatus {
    let http = cluster.replicas[i].spec.http;
    let (_, body) =
        logless_harness::probe::http_get(http, "/status", Duration::from_secs(5)).unwrap();
    serde_json::from_str(&body).unwrap()
}

#[test]
fn a_killed_follower_and_leader_resume_from_persistent_memory_and_lose_no_increment() {
    let mut cluster = pmem_cluster();
    let mut cons = follower_then_leader_killed(&mut cluster);
    for (i, con) in cons.iter_mut().enumerate() {
        assert_eq!(info_field(con, "replication", "log_state"), "serving");
        assert_eq!(info_field(con, "replication", "log_recovery"), "pmem");
        assert_eq!(info_field(con, "server", "durability"), "emulp");
        assert_eq!(common::config_get(con, "logless-durability"), "emulp");
        let status = status(&cluster, i);
        assert_eq!(status.durability, "emulp");
        let log = status.log.expect("the log's figures");
        assert_eq!(log.state, "serving");
        assert!(log.snapshots_taken > 0, "replica {}: no snapshot", i + 1);
    }
    // Each restarted replica resumed (it did not replay before voting) and rebuilt its state
    // machine from the persistent snapshot.
    for i in [0, 2] {
        let log = cluster.log_tail(i);
        assert!(
            log.contains("resumed the log from persistent memory")
                && log.contains("rebuilt the state machine from persistent memory"),
            "replica {}:\n{log}",
            i + 1
        );
        assert!(!log.contains("recovered the log"), "{log}");
    }
    assert!(cluster.replicas[0].spec.dir.join("log").is_dir());
}

#[test]
fn every_replica_killed_resumes_from_its_own_persistent_memory() {
    let mut cluster = pmem_cluster();
    let (acked, uncertain) = increments_across_kills(&mut cluster, 1, &[]);
    // No peer kept a newer state to catch up from: each replica rebuilds from its own
    // persistent snapshot and log (what EpochSS cannot do, see recovery_epoch.rs).
    for i in 0..3 {
        cluster.kill(i);
    }
    for i in 0..3 {
        cluster.spawn(i);
    }
    cluster.wait_serving(Duration::from_secs(20));
    assert_no_increment_lost(&cluster, &acked, uncertain);
    for i in 0..3 {
        let log = cluster.log_tail(i);
        assert!(
            log.contains("rebuilt the state machine from persistent memory"),
            "replica {}:\n{log}",
            i + 1
        );
    }
}

#[test]
fn pmem_recovery_needs_persistent_memory_and_the_log_engine() {
    let mut cluster = pmem_cluster();
    assert!(cluster.stop(0));
    let original = cluster.replicas[0].spec.clone();

    // On media that is not persistent memory (real or emulated), before anything opens.
    let mmap = common::ServerSpec {
        durability: "mmap".into(),
        dir: original.dir.with_file_name("mmap"),
        log: original.log.with_file_name("mmap.log"),
        ..original.clone()
    };
    let log = common::refused_start(&mmap);
    assert!(
        log.contains("recovery pmem (mPaxos) keeps the log and the snapshots in persistent memory")
            && log.contains("give --durability emulp"),
        "{log}"
    );
    assert!(!mmap.dir.join("log").exists());

    // The directory keeps its mode.
    let mut fullss = original.clone();
    for arg in &mut fullss.extra {
        if arg == "pmem" {
            *arg = "fullss".into();
        }
    }
    let log = common::refused_start(&fullss);
    assert!(
        log.contains("was written under --recovery pmem, not fullss"),
        "{log}"
    );

    // The per-key engine recovers from its own store.
    let rmw = common::per_key_engine(&original);
    let log = common::refused_start(&rmw);
    assert!(log.contains("is the multipaxos engine's"), "{log}");

    // `logless up` refuses it the same way, and starts nothing.
    let dir = tempfile::tempdir().unwrap();
    let output = std::process::Command::new(common::binary())
        .arg("up")
        .arg("--dir")
        .arg(dir.path())
        .args(["--engine", "multipaxos", "--recovery", "pmem"])
        .output()
        .expect("run logless up");
    assert_eq!(output.status.code(), Some(2), "{output:?}");
    let refused = String::from_utf8_lossy(&output.stderr);
    assert!(refused.contains("not mmap"), "{refused}");
    assert!(std::fs::read_dir(dir.path()).unwrap().next().is_none());
}
