//! The log engine under `--recovery epoch` (EpochSS, seed 002 §V-C) served by real `logless`
//! processes: a replica killed with kill -9 under concurrent INCRs comes back with an empty
//! memory, recovers the state from its peers and loses no acknowledged increment; once every
//! replica was killed the cluster refuses service (DBSIZE and KEYS included) and says why in
//! INFO, `/status`, `/health` and `/metrics`; a data directory is not
//! reopened under the other mode, and EpochSS is refused for the other engines.
mod common;

use std::time::{Duration, Instant};

use common::increments::{follower_then_leader_killed, info_field};
use common::Cluster;
use redis::Commands;

const EPOCH_ARGS: [&str; 4] = ["--engine", "multipaxos", "--recovery", "epoch"];

fn epoch_cluster() -> Cluster {
    Cluster::start_with(3, "mmap", &EPOCH_ARGS)
}

#[test]
fn a_killed_replica_recovers_from_its_peers_and_no_acknowledged_increment_is_lost() {
    let mut cluster = epoch_cluster();
    let mut cons = follower_then_leader_killed(&mut cluster);
    for i in [0, 2] {
        assert_eq!(
            info_field(&mut cons[i], "replication", "log_state"),
            "serving"
        );
        assert_eq!(
            info_field(&mut cons[i], "replication", "log_recovery"),
            "epoch"
        );
        assert_eq!(info_field(&mut cons[i], "replication", "log_epoch"), "2");
        assert_eq!(
            info_field(&mut cons[i], "replication", "log_recoveries_total"),
            "1"
        );
    }
    assert_eq!(info_field(&mut cons[1], "replication", "log_epoch"), "1");
    // Nothing of the log is on disk under EpochSS: only the epoch.
    let dir = &cluster.replicas[0].spec.dir;
    assert!(dir.join("epoch").is_file());
    assert!(!dir.join("log").exists(), "a log directory under EpochSS");
}

#[test]
fn every_replica_killed_leaves_a_cluster_that_refuses_service_and_says_why() {
    let mut cluster = epoch_cluster();
    let _: () = cluster.connect(0).set("k", "v").unwrap();
    for i in 0..3 {
        cluster.kill(i);
    }
    for i in 0..3 {
        cluster.spawn(i);
    }
    // Each restarted replica learns from the others' Recovery messages that they lost their
    // state too.
    let deadline = Instant::now() + Duration::from_secs(20);
    let refusal = loop {
        let answer = redis::Client::open(cluster.url(cluster.replicas[1].spec.client))
            .and_then(|c| c.get_connection_with_timeout(Duration::from_secs(1)))
            .and_then(|mut con| con.get::<_, Option<String>>("k"));
        match answer {
            Err(e) if e.code() == Some("CLUSTERDOWN") => break e.detail().unwrap_or("").to_owned(),
            Ok(value) => panic!("a cluster that lost its state served GET k: {value:?}"),
            Err(_) => {
                assert!(Instant::now() < deadline, "no refusal in time");
                std::thread::sleep(Duration::from_millis(100));
            }
        }
    };
    assert!(
        refusal.starts_with("state lost: more replicas restarted under --recovery epoch"),
        "{refusal}"
    );
    for i in 0..3 {
        let mut con = cluster.connect(i);
        let error = con.set::<_, _, ()>("k", "w").unwrap_err();
        assert_eq!(error.code(), Some("CLUSTERDOWN"), "{error}");
        // Nor does the replica's own copy pass for the store.
        let mut keys = redis::cmd("KEYS");
        keys.arg("*");
        for command in [redis::cmd("DBSIZE"), keys] {
            let error = command.query::<redis::Value>(&mut con).unwrap_err();
            assert_eq!(error.code(), Some("CLUSTERDOWN"), "{error}");
        }
        assert_eq!(
            info_field(&mut con, "replication", "log_state"),
            "state_lost"
        );
        let http = cluster.replicas[i].spec.http;
        let (code, _) =
            logless_harness::probe::http_get(http, "/health", Duration::from_secs(5)).unwrap();
        assert_eq!(code, 503, "a replica that lost its state is not healthy");
        let (_, body) =
            logless_harness::probe::http_get(http, "/status", Duration::from_secs(5)).unwrap();
        let status: logless_node::status::NodeStatus = serde_json::from_str(&body).unwrap();
        assert_eq!(status.log.expect("the log's figures").state, "state_lost");
        assert_eq!(common::metric(http, "logless_log_state_lost"), 1);
    }
}

#[test]
fn a_directory_is_not_reopened_under_the_other_mode_and_epoch_is_the_log_engines() {
    let mut cluster = epoch_cluster();
    assert!(cluster.stop(0));
    let mut spec = cluster.replicas[0].spec.clone();
    for arg in &mut spec.extra {
        if arg == "epoch" {
            *arg = "fullss".into();
        }
    }
    let log = common::refused_start(&spec);
    assert!(
        log.contains("was written under --recovery epoch, not fullss")
            && log.contains("Start it with --recovery epoch"),
        "{log}"
    );

    // Nor is a directory whose replica has run but whose epoch is gone: in epoch 1 again, its
    // peers would take it for a replica that kept its state.
    let original = &cluster.replicas[0].spec;
    std::fs::remove_file(original.dir.join("epoch")).unwrap();
    let log = common::refused_start(original);
    assert!(log.contains("has no epoch file"), "{log}");

    // EpochSS with the per-key engine, or on a cluster of one, is refused before anything
    // starts.
    let rmw = common::per_key_engine(&cluster.replicas[1].spec);
    let log = common::refused_start(&rmw);
    assert!(log.contains("is the multipaxos engine's"), "{log}");
    let alone = common::ServerSpec {
        peers: vec![(rmw.node_id, rmw.peer)],
        dir: rmw.dir.with_file_name("alone"),
        log: rmw.log.with_file_name("alone.log"),
        ..cluster.replicas[1].spec.clone()
    };
    let log = common::refused_start(&alone);
    assert!(log.contains("a cluster of 1 has none"), "{log}");
}

#[test]
fn logless_up_refuses_epoch_recovery_without_the_log_engine_or_peers() {
    let dir = tempfile::tempdir().unwrap();
    let up = |args: &[&str]| {
        let output = std::process::Command::new(common::binary())
            .arg("up")
            .arg("--dir")
            .arg(dir.path())
            .args(args)
            .output()
            .expect("run logless up");
        assert_eq!(output.status.code(), Some(2), "{output:?}");
        String::from_utf8_lossy(&output.stderr).into_owned()
    };
    let refused = up(&["--recovery", "epoch"]);
    assert!(refused.contains("is the multipaxos engine's"), "{refused}");
    let refused = up(&[
        "--recovery",
        "epoch",
        "--engine",
        "multipaxos",
        "--replicas",
        "1",
    ]);
    assert!(refused.contains("a cluster of 1 has none"), "{refused}");
    assert!(
        std::fs::read_dir(dir.path()).unwrap().next().is_none(),
        "nothing started"
    );
}
