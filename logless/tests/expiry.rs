//! Expiry and memory against a real 3-replica cluster: DBSIZE and INFO keyspace count this
//! replica's live keys exactly, deleted and expired keys leave every replica (removal is on by
//! default), and `maxmemory` refuses what needs new space with redis's OOM error while reads,
//! deletes and overwrites in place go on.
mod common;

use std::time::{Duration, Instant};

use common::{config_get, Cluster};
use redis::Commands;

/// One field of INFO `section` on `con`.
fn info_field(con: &mut redis::Connection, section: &str, field: &str) -> String {
    let info: String = redis::cmd("INFO").arg(section).query(con).unwrap();
    info.lines()
        .find_map(|line| line.strip_prefix(&format!("{field}:")))
        .unwrap_or_else(|| panic!("INFO {section} has no {field}: {info}"))
        .to_owned()
}

#[test]
fn dbsize_and_keyspace_are_exact_and_dead_keys_leave_every_replica() {
    let cluster = Cluster::start_with(3, "mmap", &["--shards", "2"]);
    // The keys the start-up check wrote (`ready:0..3`, one through each replica). A replica
    // outside the quorum of another's write receives its accept a moment later, so wait until
    // every copy holds all three.
    const READY: i64 = 3;
    let deadline = Instant::now() + Duration::from_secs(10);
    for i in 0..3 {
        let mut replica = cluster.connect(i);
        loop {
            let dbsize: i64 = redis::cmd("DBSIZE").query(&mut replica).unwrap();
            if dbsize == READY {
                break;
            }
            assert!(
                dbsize < READY && Instant::now() < deadline,
                "replica {i} holds {dbsize} keys after start, not the 3 ready keys"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    let mut con = cluster.connect(0);
    for i in 0..10 {
        let _: () = con.set(format!("plain:{i}"), "v").unwrap();
    }
    for i in 0..5 {
        let _: () = con.set_ex(format!("ttl:{i}"), "v", 1000).unwrap();
        let _: () = redis::cmd("SET")
            .arg(format!("gone:{i}"))
            .arg("v")
            .arg("PX")
            .arg(1)
            .query(&mut con)
            .unwrap();
        let _: () = con.set(format!("del:{i}"), "v").unwrap();
        let _: i64 = con.del(format!("del:{i}")).unwrap();
    }
    std::thread::sleep(Duration::from_millis(20));
    let dbsize: i64 = redis::cmd("DBSIZE").query(&mut con).unwrap();
    assert_eq!(dbsize, READY + 15);
    let keyspace = info_field(&mut con, "keyspace", "db0");
    let (counts, avg_ttl) = keyspace.rsplit_once(",avg_ttl=").unwrap();
    assert_eq!(counts, format!("keys={},expires=5", READY + 15));
    let avg_ttl: u64 = avg_ttl.parse().unwrap();
    assert!(
        (900_000..=1_000_000).contains(&avg_ttl),
        "avg_ttl {avg_ttl} ms"
    );

    // The 5 deleted and the 5 expired registers leave every replica (the expired ones once
    // past the removal grace); the live ones stay.
    let deadline = Instant::now() + Duration::from_secs(20);
    for i in 0..3 {
        let mut replica = cluster.connect(i);
        loop {
            let removed: u64 = info_field(&mut replica, "stats", "logless_registers_removed")
                .parse()
                .unwrap();
            if removed == 10 {
                break;
            }
            assert!(removed < 10, "replica {i} removed {removed}");
            assert!(
                Instant::now() < deadline,
                "replica {i} removed {removed} of 10"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        let dbsize: i64 = redis::cmd("DBSIZE").query(&mut replica).unwrap();
        assert_eq!(dbsize, READY + 15, "replica {i}");
    }
    let value: Option<String> = con.get("del:0").unwrap();
    assert_eq!(value, None);
    let value: Option<String> = cluster.connect(2).get("plain:9").unwrap();
    assert_eq!(value.as_deref(), Some("v"));
}

/// Runs `command` and returns its error's code and detail.
fn refused(con: &mut redis::Connection, command: &mut redis::Cmd) -> (String, String) {
    let e = command
        .query::<redis::Value>(con)
        .expect_err("refused over maxmemory");
    (
        e.code().unwrap_or_default().to_owned(),
        e.detail().unwrap_or_default().to_owned(),
    )
}

#[test]
fn over_maxmemory_new_space_is_refused_and_the_rest_is_served() {
    let cluster = Cluster::start_with(3, "mmap", &["--maxmemory", "1gb"]);
    let mut con = cluster.connect(0);
    assert_eq!(config_get(&mut con, "maxmemory"), "1073741824");
    let _: () = con.set("kept", "xyz").unwrap();
    let _: () = con.set("doomed", "v").unwrap();
    let _: () = con.set("count", 1).unwrap();
    let used: u64 = info_field(&mut con, "memory", "used_memory")
        .parse()
        .unwrap();
    assert!(used > 1 << 20, "used_memory {used}");

    // One byte: this replica is over it at once.
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("maxmemory")
        .arg("1")
        .query(&mut con)
        .unwrap();
    assert_eq!(info_field(&mut con, "memory", "maxmemory"), "1");
    let oom = (
        "OOM".to_owned(),
        "command not allowed when used memory > 'maxmemory'.".to_owned(),
    );
    assert_eq!(
        refused(&mut con, redis::cmd("SET").arg("new").arg("v")),
        oom
    );
    assert_eq!(
        refused(&mut con, redis::cmd("SET").arg("kept").arg("wxyz")),
        oom
    );
    assert_eq!(
        refused(&mut con, redis::cmd("SADD").arg("set").arg("m")),
        oom
    );
    assert_eq!(refused(&mut con, redis::cmd("INCR").arg("fresh")), oom);
    // Reads, deletes, overwrites in place and counters on existing keys go on.
    let value: Option<String> = con.get("kept").unwrap();
    assert_eq!(value.as_deref(), Some("xyz"));
    let _: () = con.set("kept", "abc").unwrap();
    let count: i64 = con.incr("count", 1).unwrap();
    assert_eq!(count, 2);
    let deleted: i64 = con.del("doomed").unwrap();
    assert_eq!(deleted, 1);
    // The limit is this replica's: another one takes new keys.
    let _: () = cluster.connect(1).set("new", "v").unwrap();
    // No limit again.
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("maxmemory")
        .arg("0")
        .query(&mut con)
        .unwrap();
    let _: () = con.set("newer", "v").unwrap();
    let bad = redis::cmd("CONFIG")
        .arg("SET")
        .arg("maxmemory")
        .arg("lots")
        .query::<()>(&mut con);
    assert!(bad.is_err());
}
