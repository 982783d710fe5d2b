//! The log engine served by real `logless` processes: a 3-replica `--engine multipaxos`
//! cluster answering a Redis client through every replica, commands over several keys and
//! MULTI/EXEC as atomic steps, WATCH, and a data directory of the other engine refused.
mod common;

use std::time::{Duration, Instant};

use common::Cluster;
use redis::Commands;

fn log_cluster() -> Cluster {
    Cluster::start_with(3, "mmap", &["--engine", "multipaxos"])
}

#[test]
fn every_replica_serves_every_key_through_the_log() {
    let cluster = log_cluster();
    let mut cons: Vec<redis::Connection> = (0..3).map(|i| cluster.connect(i)).collect();
    for (i, con) in cons.iter_mut().enumerate() {
        let _: () = con.set(format!("k{i}"), format!("v{i}")).unwrap();
    }
    // Reads go through the log: a write through one replica is seen through any other.
    for (i, con) in cons.iter_mut().enumerate() {
        let j = (i + 1) % 3;
        assert_eq!(
            con.get::<_, String>(format!("k{j}")).unwrap(),
            format!("v{j}")
        );
    }
    assert_eq!(cons[2].incr::<_, _, i64>("n", 5).unwrap(), 5);
    assert_eq!(cons[0].incr::<_, _, i64>("n", 1).unwrap(), 6);
    let info: String = redis::cmd("INFO")
        .arg("replication")
        .query(&mut cons[1])
        .unwrap();
    assert!(info.contains("logless_engine:multipaxos"), "{info}");
    assert!(info.contains("log_leader:"), "{info}");
    let info: String = redis::cmd("INFO")
        .arg("server")
        .query(&mut cons[1])
        .unwrap();
    assert!(info.contains("engine:multipaxos"), "{info}");
    assert_eq!(
        common::config_get(&mut cons[0], "logless-engine"),
        "multipaxos"
    );
    // /metrics and /status: one leader, which every replica names, and the log executed.
    let https: Vec<_> = cluster.replicas.iter().map(|r| r.spec.http).collect();
    let leaders: u64 = https
        .iter()
        .map(|&h| common::metric(h, "logless_log_is_leader"))
        .sum();
    assert_eq!(leaders, 1);
    let named: Vec<u64> = https
        .iter()
        .map(|&h| common::metric(h, "logless_log_leader"))
        .collect();
    assert!(named.iter().all(|&l| l == named[0]), "{named:?}");
    assert!(common::metric(https[0], "logless_log_requests_executed_total") >= 5);
    let (_, body) =
        logless_harness::probe::http_get(https[2], "/status", Duration::from_secs(5)).unwrap();
    let status: logless_node::status::NodeStatus = serde_json::from_str(&body).unwrap();
    assert_eq!(status.engine, "multipaxos");
    assert_eq!(
        status.log.expect("the log's figures").leader,
        named[0] as u16
    );
}

#[test]
fn commands_over_several_keys_are_atomic_steps() {
    let cluster = log_cluster();
    let mut a = cluster.connect(0);
    let mut b = cluster.connect(1);
    let _: () = redis::cmd("MSET")
        .arg(&["x", "1", "y", "2"])
        .query(&mut a)
        .unwrap();
    let both: Vec<Option<String>> = redis::cmd("MGET")
        .arg(&["x", "y", "z"])
        .query(&mut b)
        .unwrap();
    assert_eq!(both, [Some("1".into()), Some("2".into()), None]);
    let set: i64 = redis::cmd("MSETNX")
        .arg(&["y", "9", "z", "9"])
        .query(&mut b)
        .unwrap();
    assert_eq!(set, 0, "y exists, so neither key is set");
    let _: () = redis::cmd("RENAME").arg(&["x", "w"]).query(&mut b).unwrap();
    let moved: Vec<Option<String>> = redis::cmd("MGET").arg(&["x", "w"]).query(&mut a).unwrap();
    assert_eq!(moved, [None, Some("1".into())]);
    let missing = redis::cmd("RENAME")
        .arg(&["x", "v"])
        .query::<()>(&mut a)
        .unwrap_err();
    assert!(missing.to_string().contains("no such key"), "{missing}");
    assert_eq!(a.del::<_, i64>(&["w", "y", "nothing"]).unwrap(), 2);
    assert_eq!(a.exists::<_, i64>(&["w", "y"]).unwrap(), 0);
}

/// MSETs of the same value to two keys, concurrently with MGETs of both through another
/// replica: every MGET sees the two keys equal, never one MSET's half.
#[test]
fn an_mset_is_seen_whole_or_not_at_all() {
    let cluster = log_cluster();
    let mut writer = cluster.connect(0);
    let mut reader = cluster.connect(2);
    let _: () = redis::cmd("MSET")
        .arg(&["p", "0", "q", "0"])
        .query(&mut writer)
        .unwrap();
    let writes = std::thread::spawn(move || {
        for i in 1..=200 {
            let _: () = redis::cmd("MSET")
                .arg("p")
                .arg(i)
                .arg("q")
                .arg(i)
                .query(&mut writer)
                .unwrap();
        }
    });
    let mut reads = 0;
    while !writes.is_finished() {
        let pair: Vec<i64> = redis::cmd("MGET")
            .arg(&["p", "q"])
            .query(&mut reader)
            .unwrap();
        assert_eq!(pair[0], pair[1], "an MSET seen half done");
        reads += 1;
    }
    writes.join().unwrap();
    assert!(reads > 10, "only {reads} reads ran alongside the writes");
}

/// Transfers between two counters as MULTI/EXEC through every replica, concurrently with
/// reads of both in one MGET: the sum never changes, and neither does the final one.
#[test]
fn transfers_in_multi_exec_keep_the_sum() {
    let cluster = log_cluster();
    let mut setup = cluster.connect(0);
    let _: () = redis::cmd("MSET")
        .arg(&["alice", "1000", "bob", "1000"])
        .query(&mut setup)
        .unwrap();
    let mut workers = Vec::new();
    for w in 0..3usize {
        let mut con = cluster.connect(w);
        workers.push(std::thread::spawn(move || {
            for i in 0..60i64 {
                let (from, to) = if (w + i as usize).is_multiple_of(2) {
                    ("alice", "bob")
                } else {
                    ("bob", "alice")
                };
                let _: (i64, i64) = redis::pipe()
                    .atomic()
                    .cmd("DECRBY")
                    .arg(from)
                    .arg(i)
                    .cmd("INCRBY")
                    .arg(to)
                    .arg(i)
                    .query(&mut con)
                    .unwrap();
            }
        }));
    }
    let mut reader = cluster.connect(1);
    let deadline = Instant::now() + Duration::from_secs(60);
    while workers.iter().any(|w| !w.is_finished()) {
        let pair: Vec<i64> = redis::cmd("MGET")
            .arg(&["alice", "bob"])
            .query(&mut reader)
            .unwrap();
        assert_eq!(
            pair[0] + pair[1],
            2000,
            "a transfer seen half done: {pair:?}"
        );
        assert!(Instant::now() < deadline, "the transfers did not finish");
    }
    for w in workers {
        w.join().unwrap();
    }
    let pair: Vec<i64> = redis::cmd("MGET")
        .arg(&["alice", "bob"])
        .query(&mut reader)
        .unwrap();
    assert_eq!(pair[0] + pair[1], 2000);
}

/// WATCH k, then MULTI ... EXEC: EXEC runs nothing (a null array) if k was changed in
/// between, by another client through another replica or by this connection, and runs the
/// transaction if nothing watched changed; UNWATCH and EXEC forget the watched keys.
#[test]
fn exec_after_watch_runs_only_if_no_watched_key_changed() {
    let cluster = log_cluster();
    let mut a = cluster.connect(0);
    let mut other = cluster.connect(1);
    let run = |con: &mut redis::Connection, words: &[&str]| -> redis::Value {
        redis::cmd(words[0]).arg(&words[1..]).query(con).unwrap()
    };
    let ok = || redis::Value::Okay;
    let _: () = a.set("k", "1").unwrap();
    let exec_set_x = |con: &mut redis::Connection, value: &str| -> redis::Value {
        assert_eq!(run(con, &["MULTI"]), ok());
        assert_eq!(
            run(con, &["SET", "x", value]),
            redis::Value::SimpleString("QUEUED".into())
        );
        run(con, &["EXEC"])
    };

    // Another client changes k through another replica: EXEC is a null array, x unset.
    assert_eq!(run(&mut a, &["WATCH", "k", "unrelated"]), ok());
    let _: () = other.set("k", "2").unwrap();
    assert_eq!(exec_set_x(&mut a, "1"), redis::Value::Nil);
    assert_eq!(other.get::<_, Option<String>>("x").unwrap(), None);
    // EXEC forgot the watch: the next transaction runs.
    assert_eq!(exec_set_x(&mut a, "2"), redis::Value::Array(vec![ok()]));
    assert_eq!(other.get::<_, String>("x").unwrap(), "2");

    // Nothing watched changes (another key does): the transaction runs.
    assert_eq!(run(&mut a, &["WATCH", "k"]), ok());
    let _: () = other.set("unrelated", "y").unwrap();
    let _: String = a.get("k").unwrap();
    assert_eq!(exec_set_x(&mut a, "3"), redis::Value::Array(vec![ok()]));

    // The watching connection changes k itself: aborted too, as in Redis.
    assert_eq!(run(&mut a, &["WATCH", "k"]), ok());
    let _: () = a.set("k", "2").unwrap();
    assert_eq!(exec_set_x(&mut a, "4"), redis::Value::Nil);

    // UNWATCH forgets: a change after it aborts nothing.
    assert_eq!(run(&mut a, &["WATCH", "k"]), ok());
    assert_eq!(run(&mut a, &["UNWATCH"]), ok());
    let _: () = other.set("k", "3").unwrap();
    assert_eq!(exec_set_x(&mut a, "5"), redis::Value::Array(vec![ok()]));
    assert_eq!(other.get::<_, String>("x").unwrap(), "5");

    // A key that expires between WATCH and EXEC counts as changed.
    let _: () = a.pset_ex("short", "v", 300).unwrap();
    assert_eq!(run(&mut a, &["WATCH", "short"]), ok());
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(exec_set_x(&mut a, "6"), redis::Value::Nil);

    // WATCH inside MULTI is refused and discards the transaction.
    assert_eq!(run(&mut a, &["MULTI"]), ok());
    let refused = redis::cmd("WATCH")
        .arg("k")
        .query::<()>(&mut a)
        .unwrap_err();
    assert!(
        refused
            .to_string()
            .contains("WATCH inside MULTI is not allowed"),
        "{refused}"
    );
    let aborted = redis::cmd("EXEC").query::<()>(&mut a).unwrap_err();
    assert_eq!(
        aborted.kind(),
        redis::ErrorKind::ExecAbortError,
        "{aborted}"
    );
    assert_eq!(other.get::<_, String>("x").unwrap(), "5");
}

/// A data directory holds one engine's state: starting the other engine on it is refused with
/// an error that says which engine it holds.
#[test]
fn a_data_directory_of_the_other_engine_is_refused() {
    let mut cluster = Cluster::start(1, "mmap");
    assert!(cluster.stop(0));
    let spec = cluster.replicas[0]
        .spec
        .clone()
        .flag("--engine", "multipaxos");
    let log = common::refused_start(&spec);
    assert!(
        log.contains("holds the rmw engine's state") && log.contains("--engine rmw"),
        "{log}"
    );
}
