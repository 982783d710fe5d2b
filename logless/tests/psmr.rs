//! The psmr engine served by real `logless` processes: the B⁺-tree key-value service through
//! Redis commands in every mode (P-SMR, sP-SMR and SMR on 3 replicas, no replication on one),
//! from several clients through every replica, with the replicas' state digests equal at the
//! end; and a replica killed with SIGKILL that restarts, replays its groups' logs and catches
//! up to the same digest.
mod common;

use std::time::{Duration, Instant};

use common::Cluster;

/// Clients writing at once, each through its own replica.
const CLIENTS: usize = 3;
/// Keys each client inserts.
const KEYS: usize = 12;

fn psmr_cluster(replicas: usize, mode: &str) -> Cluster {
    psmr_cluster_with(replicas, mode, &[])
}

/// [`psmr_cluster`], each replica started with the flags `extra` too.
fn psmr_cluster_with(replicas: usize, mode: &str, extra: &[&str]) -> Cluster {
    let mut args = vec!["--engine", "psmr", "--threads", "2", "--psmr-mode", mode];
    args.extend_from_slice(extra);
    Cluster::start_with(replicas, "mmap", &args)
}

fn cmd(con: &mut redis::Connection, args: &[&str]) -> redis::Value {
    let mut command = redis::cmd(args[0]);
    for arg in &args[1..] {
        command.arg(*arg);
    }
    command
        .query(con)
        .unwrap_or_else(|e| panic!("{args:?}: {e}"))
}

fn text(con: &mut redis::Connection, args: &[&str]) -> Option<String> {
    match cmd(con, args) {
        redis::Value::Nil => None,
        redis::Value::Okay => Some("OK".into()),
        redis::Value::SimpleString(s) => Some(s),
        redis::Value::BulkString(b) => Some(String::from_utf8(b).unwrap()),
        redis::Value::Int(i) => Some(i.to_string()),
        other => panic!("{args:?} answered {other:?}"),
    }
}

fn key(client: usize, i: usize) -> String {
    format!("c{client}:k{i:02}")
}

/// Client `client`'s run through `con`: inserts, a refused second insert, updates of the even
/// keys, an update of an absent key, reads, deletes of every third key; each answer checked.
fn client_run(con: &mut redis::Connection, client: usize) {
    for i in 0..KEYS {
        let k = key(client, i);
        assert_eq!(text(con, &["SET", &k, "v0", "NX"]).as_deref(), Some("OK"));
        assert_eq!(text(con, &["SET", &k, "again", "NX"]), None, "present");
        if i % 2 == 0 {
            assert_eq!(text(con, &["SET", &k, "v1", "XX"]).as_deref(), Some("OK"));
        }
        let absent = format!("c{client}:absent{i}");
        assert_eq!(text(con, &["SET", &absent, "x", "XX"]), None, "absent");
        let expected = if i % 2 == 0 { "v1" } else { "v0" };
        assert_eq!(text(con, &["GET", &k]).as_deref(), Some(expected));
    }
    for i in (0..KEYS).step_by(3) {
        let k = key(client, i);
        assert_eq!(text(con, &["DEL", &k]).as_deref(), Some("1"));
        assert_eq!(text(con, &["DEL", &k]).as_deref(), Some("0"));
        assert_eq!(text(con, &["GET", &k]), None);
    }
}

/// What a client's keys hold after [`client_run`], in key order.
fn expected_entries(client: usize) -> Vec<String> {
    (0..KEYS)
        .filter(|i| i % 3 != 0)
        .flat_map(|i| {
            let value = if i % 2 == 0 { "v1" } else { "v0" };
            [key(client, i), value.to_string()]
        })
        .collect()
}

fn range(con: &mut redis::Connection, start: &str, count: usize) -> Vec<String> {
    redis::cmd("LOGLESS.RANGE")
        .arg(start)
        .arg("COUNT")
        .arg(count)
        .query(con)
        .unwrap()
}

/// Runs [`client_run`] from [`CLIENTS`] clients at once, client `c` through replica
/// `c mod replicas`, then checks every key through every replica and the range reads.
fn serve_and_check(cluster: &Cluster) {
    let replicas = cluster.replicas.len();
    std::thread::scope(|scope| {
        for client in 0..CLIENTS {
            let mut con = cluster.connect(client % replicas);
            scope.spawn(move || client_run(&mut con, client));
        }
    });
    for i in 0..replicas {
        let mut con = cluster.connect(i);
        for client in 0..CLIENTS {
            let start = format!("c{client}:");
            let entries = range(&mut con, &start, KEYS - KEYS / 3);
            assert_eq!(entries, expected_entries(client), "through replica {i}");
        }
        // The range goes on into the next client's keys, in key order.
        let across = range(&mut con, "c0:k11", 2);
        assert_eq!(across, ["c0:k11", "v0", "c1:k01", "v0"]);
    }
}

fn check_refusals_and_info(con: &mut redis::Connection, mode: &str) {
    let refused = redis::cmd("SET").arg("k").arg("v").query::<String>(con);
    let text = refused.unwrap_err().to_string();
    assert!(
        text.contains("SET takes NX (insert) or XX (update)"),
        "{text}"
    );
    let refused = redis::cmd("INCR").arg("k").query::<i64>(con);
    let text = refused.unwrap_err().to_string();
    assert!(
        text.contains("this engine serves the B+-tree service"),
        "{text}"
    );
    assert_eq!(
        redis::cmd("PING").query::<String>(con).unwrap(),
        "PONG".to_string()
    );
    let info: String = redis::cmd("INFO").arg("replication").query(con).unwrap();
    assert!(info.contains("logless_engine:psmr"), "{info}");
    assert!(info.contains(&format!("psmr_mode:{mode}")), "{info}");
    assert!(info.contains("psmr_threads:2"), "{info}");
    assert!(info.contains("psmr_digest:"), "{info}");
    if mode != "no-rep" {
        assert!(info.contains("psmr_group_g_all:view="), "{info}");
    }
    assert_eq!(common::config_get(con, "logless-engine"), "psmr");
}

/// Every replica's `/status`: the engine's figures.
fn psmr_status(cluster: &Cluster, i: usize) -> logless_node::psmr_turn::PsmrStatus {
    let http = cluster.replicas[i].spec.http;
    let (_, body) =
        logless_harness::probe::http_get(http, "/status", Duration::from_secs(5)).unwrap();
    let status: logless_node::status::NodeStatus = serde_json::from_str(&body).unwrap();
    assert_eq!(status.engine, "psmr");
    status.psmr.expect("the psmr figures")
}

fn every_mode_case(mode: &str, groups: usize) {
    let cluster = psmr_cluster(3, mode);
    check_refusals_and_info(&mut cluster.connect(0), mode);
    serve_and_check(&cluster);
    let digest = cluster.digests_agree(Duration::from_secs(10));
    // Every replica executed every command, and names the same leader for each group; under
    // P-SMR the groups' first leaders are spread over the replicas.
    let statuses: Vec<_> = (0..3).map(|i| psmr_status(&cluster, i)).collect();
    let leaders = |s: &logless_node::psmr_turn::PsmrStatus| -> Vec<u16> {
        s.groups.iter().map(|g| g.leader).collect()
    };
    for status in &statuses {
        assert_eq!((status.mode.as_str(), status.threads), (mode, 2));
        assert_eq!(status.digest, digest);
        assert_eq!(status.groups.len(), groups);
        assert_eq!(leaders(status), leaders(&statuses[0]));
    }
    if mode == "psmr" {
        assert_eq!(leaders(&statuses[0]), [1, 2, 3]);
    }
    let led: usize = statuses
        .iter()
        .map(|s| s.groups.iter().filter(|g| g.is_leader).count())
        .sum();
    assert_eq!(led, groups, "each group has one leader");
    let http = cluster.replicas[1].spec.http;
    assert!(common::metric(http, "logless_psmr_executed_total") > 0);
}

#[test]
fn psmr_replicates_the_service_with_equal_digests() {
    every_mode_case("psmr", 3);
}

#[test]
fn sp_smr_replicates_the_service_with_equal_digests() {
    every_mode_case("sp-smr", 1);
}

#[test]
fn smr_replicates_the_service_with_equal_digests() {
    every_mode_case("smr", 1);
}

#[test]
fn no_rep_serves_the_service_from_one_process() {
    let cluster = psmr_cluster(1, "no-rep");
    check_refusals_and_info(&mut cluster.connect(0), "no-rep");
    serve_and_check(&cluster);
}

#[test]
fn a_killed_replica_replays_its_groups_and_catches_up() {
    let mut cluster = psmr_cluster(3, "psmr");
    serve_and_check(&cluster);
    let before = cluster.digests_agree(Duration::from_secs(10));
    cluster.kill(2);
    // Written while replica 3 is down, through the other two.
    let mut con = cluster.connect(0);
    for i in 0..KEYS {
        let k = format!("late:{i}");
        assert_eq!(
            text(&mut con, &["SET", &k, "x", "NX"]).as_deref(),
            Some("OK")
        );
    }
    let during = cluster.digests_agree(Duration::from_secs(10));
    assert_ne!(before, during);
    cluster.spawn(2);
    cluster.wait_serving(Duration::from_secs(30));
    let after = cluster.digests_agree(Duration::from_secs(20));
    assert_eq!(after, during, "the restarted replica caught up");
    let mut restarted = cluster.connect(2);
    assert_eq!(
        text(&mut restarted, &["GET", "late:3"]).as_deref(),
        Some("x")
    );
    assert_eq!(
        range(&mut restarted, "late:", 2),
        ["late:0", "x", "late:1", "x"]
    );
}

/// Waits for `spec`'s server to exit, refusing to start, and gives its log.
fn refused_start(spec: &logless_harness::server::ServerSpec) -> String {
    let mut child = spec.spawn(&common::binary()).expect("start logless server");
    let deadline = Instant::now() + Duration::from_secs(20);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        assert!(Instant::now() < deadline, "the server did not refuse");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(!status.success());
    common::log_tail(&spec.log)
}

/// A data directory holds one engine's state, and psmr's groups one mode's and thread
/// count's: starting otherwise on it is refused with an error that says how to start.
#[test]
fn a_directory_of_another_engine_or_layout_is_refused() {
    let mut cluster = psmr_cluster(1, "smr");
    assert!(cluster.stop(0));
    let spec = &cluster.replicas[0].spec;
    let with = |flag: &str, value: &str| {
        let mut changed = spec.clone();
        let at = changed.extra.iter().position(|a| a == flag).expect("given");
        changed.extra[at + 1] = value.into();
        changed
    };
    let log = refused_start(&with("--engine", "multipaxos"));
    assert!(log.contains("holds the psmr engine's state"), "{log}");
    let log = refused_start(&with("--threads", "3"));
    assert!(log.contains("--psmr-mode smr --threads 2"), "{log}");
    let mut netfs = spec.clone();
    netfs.extra.extend(["--service".into(), "netfs".into()]);
    let log = refused_start(&netfs);
    assert!(log.contains("--service btree"), "{log}");
}

/// Replica 3 killed (SIGKILL) while the other two order enough commands to take several cuts
/// and truncate every group past where it stood (group snapshots every 1 kB of a group's log,
/// cuts every 16 kB of commands): restarted, it gets a peer's group snapshot and the cut it
/// carries, installs it and ends with the others' digest; inserts through it afterwards are
/// answered once each (an insert executed twice would answer nil).
#[test]
fn a_replica_behind_its_peers_truncation_installs_their_cut_and_catches_up() {
    let small_snapshots = [
        "--multipaxos",
        "snapshot_log_bytes_min=1000",
        "--multipaxos",
        "snapshot_ratio_percent=1",
    ];
    let mut cluster = psmr_cluster_with(3, "psmr", &small_snapshots);
    serve_and_check(&cluster);
    cluster.digests_agree(Duration::from_secs(10));
    cluster.kill(2);
    let mut con = cluster.connect(0);
    for i in 0..700 {
        let k = format!("behind:{i:04}");
        let reply = text(&mut con, &["SET", &k, "some value of a few bytes", "NX"]);
        assert_eq!(reply.as_deref(), Some("OK"), "{k}");
    }
    let during = cluster.digests_agree(Duration::from_secs(10));
    let peer = psmr_status(&cluster, 0);
    assert!(peer.cuts_written >= 3, "{} cuts", peer.cuts_written);
    assert!(
        peer.groups.iter().all(|g| g.log_start > 0),
        "every group truncated: {:?}",
        peer.groups
    );
    cluster.spawn(2);
    cluster.wait_serving(Duration::from_secs(30));
    let after = cluster.digests_agree(Duration::from_secs(30));
    assert_eq!(after, during, "the restarted replica caught up");
    let restarted = psmr_status(&cluster, 2);
    assert!(restarted.cuts_installed >= 1, "{restarted:?}");
    let mut con = cluster.connect(2);
    assert_eq!(
        text(&mut con, &["GET", "behind:0577"]).as_deref(),
        Some("some value of a few bytes")
    );
    for i in 0..20 {
        let k = format!("after:{i}");
        assert_eq!(
            text(&mut con, &["SET", &k, "v", "NX"]).as_deref(),
            Some("OK")
        );
    }
    cluster.digests_agree(Duration::from_secs(20));
}

/// Replica 2 leads `g1` (and replica 3 `g_all`): killed while clients write through the other
/// two, its group elects another leader and the writes go on; restarted, it replays its logs
/// and ends with the others' digest. Answers during the failover may be errors (TRYAGAIN,
/// UNCERTAIN): what counts is that the replicas agree on whatever was executed.
#[test]
fn a_group_leader_killed_under_load_is_replaced_and_catches_up() {
    let mut cluster = psmr_cluster(3, "psmr");
    let writers = |cluster: &Cluster, round: usize| {
        std::thread::scope(|scope| {
            for (w, replica) in [0, 2].into_iter().enumerate() {
                let mut con = cluster.connect(replica);
                scope.spawn(move || {
                    let mut ok = 0;
                    for i in 0..40 {
                        let k = format!("load:{round}:{w}:{i}");
                        let insert = redis::cmd("SET").arg(&k).arg("a").arg("NX").query(&mut con);
                        let update = redis::cmd("SET").arg(&k).arg("b").arg("XX").query(&mut con);
                        let results: [redis::RedisResult<Option<String>>; 2] = [insert, update];
                        ok += results.iter().filter(|r| r.is_ok()).count();
                    }
                    assert!(ok > 0, "writer {w} got no command through");
                });
            }
        });
    };
    writers(&cluster, 0);
    cluster.kill(1);
    writers(&cluster, 1);
    cluster.digests_agree(Duration::from_secs(10));
    cluster.spawn(1);
    cluster.wait_serving(Duration::from_secs(30));
    writers(&cluster, 2);
    let digest = cluster.digests_agree(Duration::from_secs(20));
    let statuses: Vec<_> = (0..3).map(|i| psmr_status(&cluster, i)).collect();
    assert!(statuses.iter().all(|s| s.digest == digest));
    let g1_leaders: Vec<u16> = statuses.iter().map(|s| s.groups[1].leader).collect();
    assert!(
        g1_leaders.iter().all(|&l| l == g1_leaders[0]),
        "{g1_leaders:?}"
    );
    assert_ne!(g1_leaders[0], 2, "g1 moved off the killed replica");
}
