//! The log engine under `--recovery pmem-sm` (mPaxosSM, seed 002 §V-B: the state machine in
//! persistent memory) on `--durability emulp`, served by real `logless` processes: under
//! concurrent INCRs a follower and then the leader are killed with kill -9, then every replica
//! at once; each restart opens its registers in place (no snapshot restored, no log replayed
//! before it votes), and the counter is exact on every replica: no acknowledged increment lost,
//! none applied twice. Checkpoints every few kilobytes of log make a follower that was down
//! fall behind its peers' truncation, so it catches up with a snapshot taken on demand.
mod common;

use std::time::Duration;

use common::increments::{follower_then_leader_killed, info_field};
use common::Cluster;
use redis::Commands;

/// A checkpoint (and a truncation) every few kilobytes of log.
const PMEM_SM_ARGS: [&str; 6] = [
    "--engine",
    "multipaxos",
    "--recovery",
    "pmem-sm",
    "--multipaxos",
    "snapshot_log_bytes_min=1024",
];

/// The replica's figures from `/status`.
fn status(cluster: &Cluster, i: usize) -> logless_node::status::NodeStatus {
    let http = cluster.replicas[i].spec.http;
    let (_, body) =
        logless_harness::probe::http_get(http, "/status", Duration::from_secs(5)).unwrap();
    serde_json::from_str(&body).unwrap()
}

/// Every replica's counter, checked equal.
fn counters(cluster: &Cluster) -> i64 {
    let values: Vec<i64> = (0..3)
        .map(|i| cluster.connect(i).get("n").unwrap())
        .collect();
    assert!(values.windows(2).all(|w| w[0] == w[1]), "{values:?}");
    values[0]
}

#[test]
fn replicas_killed_under_increments_reopen_their_registers_in_place_and_apply_each_once() {
    let mut cluster = Cluster::start_with(3, "emulp", &PMEM_SM_ARGS);
    let mut cons = follower_then_leader_killed(&mut cluster);
    for con in &mut cons {
        assert_eq!(info_field(con, "replication", "log_state"), "serving");
        assert_eq!(info_field(con, "replication", "log_recovery"), "pmem-sm");
    }
    // One key per operation only: a multi-key write is refused with the reason.
    let refused = redis::cmd("MSET")
        .arg(&["a", "1", "b", "2"])
        .query::<()>(&mut cons[0])
        .unwrap_err();
    assert!(
        refused
            .to_string()
            .contains("not available under --recovery pmem-sm"),
        "{refused}"
    );
    drop(cons);
    // The restarted replicas were behind their peers' truncation: a peer took a snapshot for
    // them when they asked (and they installed it over their registers).
    let served: u64 = (0..3)
        .map(|i| {
            status(&cluster, i)
                .log
                .expect("the log's figures")
                .snapshots_taken
        })
        .sum();
    assert!(served >= 1, "no snapshot taken on demand");

    // Every replica killed at once, nothing in flight: each opens its own registers, and the
    // counter is exactly what it was (a batch executed again at the restart would raise it).
    let before = counters(&cluster);
    for i in 0..3 {
        cluster.kill(i);
    }
    for i in 0..3 {
        cluster.spawn(i);
    }
    cluster.wait_serving(Duration::from_secs(20));
    assert_eq!(counters(&cluster), before);
    for i in 0..3 {
        let next: i64 = cluster.connect(i).incr("n", 1).unwrap();
        assert_eq!(next, before + 1 + i as i64);
    }
    assert_eq!(counters(&cluster), before + 3);

    for i in 0..3 {
        let log = cluster.log_tail(i);
        assert!(
            log.contains("opened the state machine in place in persistent memory (mPaxosSM)"),
            "replica {}:\n{log}",
            i + 1
        );
        assert!(!log.contains("recovered the log"), "{log}");
        assert!(!log.contains("rebuilding the state machine"), "{log}");
        assert!(cluster.replicas[i]
            .spec
            .dir
            .join(logless_node::log_machine::REGISTERS_FILE)
            .is_file());
    }
}
