//! The admin and inspection commands against a real 3-replica cluster with two shards per
//! replica: SCAN (and its VOTED), KEYS, RANDOMKEY, FLUSHALL, CONFIG SET/GET, TIME, CLIENT
//! LIST/KILL, and the refusal of Redis commands logless does not implement.
mod common;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use common::{config_get, Cluster};
use redis::{Commands, RedisError};

/// Retries `check` until it holds (a replica's copy catches up with writes another replica's
/// quorum decided) or the deadline passes.
fn eventually(what: &str, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !check() {
        assert!(Instant::now() < deadline, "{what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Every key a whole SCAN with `options` returns.
fn scan_all(con: &mut redis::Connection, options: &[&str]) -> Vec<String> {
    let mut keys = Vec::new();
    let mut cursor = "0".to_owned();
    for _ in 0..10_000 {
        let (next, page): (String, Vec<String>) = redis::cmd("SCAN")
            .arg(&cursor)
            .arg(options)
            .query(con)
            .unwrap();
        keys.extend(page);
        if next == "0" {
            return keys;
        }
        cursor = next;
    }
    panic!("the scan did not end");
}

fn sorted(keys: Vec<String>) -> BTreeSet<String> {
    keys.into_iter().collect()
}

#[test]
fn scan_keys_randomkey_and_flushall_over_a_replicas_copy() {
    let cluster = Cluster::start_with(3, "mmap", &["--shards", "2"]);
    let mut a = cluster.connect(0);
    let mut b = cluster.connect(1);
    let users: BTreeSet<String> = (0..60).map(|i| format!("user:{i}")).collect();
    for key in &users {
        let _: () = a.set(key, "x").unwrap();
    }
    let _: i64 = a.hset("profile", "name", "ada").unwrap();
    let _: i64 = a.rpush("queue", "job").unwrap();
    let _: () = a.set("gone", "soon").unwrap();
    let _: i64 = a.del("gone").unwrap();

    // KEYS and SCAN on the replica that wrote, and on another one once its copy caught up.
    for con in [&mut a, &mut b] {
        eventually("KEYS lists every user", || {
            sorted(redis::cmd("KEYS").arg("user:*").query(con).unwrap()) == users
        });
        let scanned = scan_all(con, &["MATCH", "user:*", "COUNT", "7"]);
        assert_eq!(
            sorted(scanned),
            users,
            "SCAN returns every key present throughout"
        );
        assert_eq!(scan_all(con, &["TYPE", "hash"]), ["profile"]);
        assert_eq!(scan_all(con, &["TYPE", "list", "MATCH", "q*"]), ["queue"]);
        let all: BTreeSet<String> = sorted(redis::cmd("KEYS").arg("*").query(con).unwrap());
        assert!(!all.contains("gone"), "a deleted key is not listed");
        // VOTED (a ring's data mover's listing) lists every key holding a vote: the live ones
        // and dead ones this copy still holds ("gone", unless removal forgot it already).
        let voted = sorted(scan_all(con, &["VOTED", "COUNT", "7"]));
        assert!(voted.is_superset(&all), "{voted:?}");
        assert!(voted.len() <= all.len() + 1, "{voted:?}");
        let random: String = redis::cmd("RANDOMKEY").query(con).unwrap();
        assert!(all.contains(&random), "{random}");
    }
    let err: RedisError = redis::cmd("SCAN").arg("x").query::<()>(&mut a).unwrap_err();
    assert!(err.to_string().contains("invalid cursor"), "{err}");
    // A cursor no scan made ends the scan rather than failing.
    let (next, _): (String, Vec<String>) = redis::cmd("SCAN")
        .arg(u64::MAX.to_string())
        .query(&mut a)
        .unwrap();
    assert_eq!(next, "0");

    // FLUSHALL deletes through consensus: every replica's copy empties.
    let ok: String = redis::cmd("FLUSHALL").arg("SYNC").query(&mut a).unwrap();
    assert_eq!(ok, "OK");
    assert_eq!(a.get::<_, Option<String>>("user:1").unwrap(), None);
    assert_eq!(redis::cmd("DBSIZE").query::<i64>(&mut a).unwrap(), 0);
    eventually("the other replica's copy empties too", || {
        redis::cmd("KEYS")
            .arg("*")
            .query::<Vec<String>>(&mut b)
            .unwrap()
            .is_empty()
    });
    assert_eq!(
        redis::cmd("RANDOMKEY")
            .query::<Option<String>>(&mut b)
            .unwrap(),
        None
    );
    let ok: String = redis::cmd("FLUSHDB").query(&mut b).unwrap();
    assert_eq!(ok, "OK", "flushing an empty keyspace");

    // A pipeline's writes before a KEYS show in it.
    let (_, keys): ((), Vec<String>) = redis::pipe()
        .set("p", 1)
        .cmd("KEYS")
        .arg("p")
        .query(&mut a)
        .unwrap();
    assert_eq!(keys, ["p"]);
}

fn config_set(con: &mut redis::Connection, pairs: &[&str]) -> Result<String, RedisError> {
    redis::cmd("CONFIG").arg("SET").arg(pairs).query(con)
}

#[test]
fn config_time_client_and_refusals() {
    let cluster = Cluster::start(1, "mmap");
    let mut con = cluster.connect(0);

    // proto-max-bulk-len changes at run time, within what the replica started with.
    let started = config_get(&mut con, "proto-max-bulk-len");
    assert_eq!(
        config_set(&mut con, &["proto-max-bulk-len", "100"]).unwrap(),
        "OK"
    );
    let err: RedisError = con.set::<_, _, ()>("big", "x".repeat(200)).unwrap_err();
    assert!(err.to_string().contains("exceeds"), "{err}");
    assert_eq!(
        config_set(&mut con, &["proto-max-bulk-len", &started]).unwrap(),
        "OK"
    );
    let _: () = con.set("big", "x".repeat(200)).unwrap();
    let err = config_set(&mut con, &["proto-max-bulk-len", "1gb"]).unwrap_err();
    assert!(err.to_string().contains("value_bytes_max"), "{err}");
    // Redis parameters that mean nothing here are accepted; unknown ones are refused, and a
    // refused pair changes nothing.
    let ignored = ["hash-max-listpack-entries", "512", "save", ""];
    assert_eq!(config_set(&mut con, &ignored).unwrap(), "OK");
    let err = config_set(&mut con, &["maxclients", "5", "no-such-thing", "1"]).unwrap_err();
    assert!(err.to_string().contains("Unknown option"), "{err}");
    assert_ne!(config_get(&mut con, "maxclients"), "5", "nothing changed");
    let all: Vec<String> = redis::cmd("CONFIG")
        .arg("GET")
        .arg("*")
        .query(&mut con)
        .unwrap();
    assert!(all.iter().any(|n| n == "maxmemory-policy"));
    // Thrifty reads switch off and on while the replica serves.
    for (value, shown) in [("no", "false"), ("yes", "true")] {
        assert_eq!(
            config_set(&mut con, &["logless-thrifty-reads", value]).unwrap(),
            "OK"
        );
        assert_eq!(config_get(&mut con, "logless-thrifty-reads"), shown);
        assert_eq!(con.get::<_, String>("big").unwrap().len(), 200);
    }
    for name in ["logless-shards", "timeout", "client-query-buffer-limit"] {
        let err = config_set(&mut con, &[name, "4"]).unwrap_err();
        assert!(err.to_string().contains("immutable"), "{name}: {err}");
    }
    // Each parameter is shown once, the client limits with their real values.
    let timeouts: Vec<String> = redis::cmd("CONFIG")
        .arg("GET")
        .arg("timeout")
        .query(&mut con)
        .unwrap();
    assert_eq!(timeouts, ["timeout", "0"]);
    let ok: String = redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query(&mut con)
        .unwrap();
    assert_eq!(ok, "OK");

    let (secs, micros): (String, String) = redis::cmd("TIME").query(&mut con).unwrap();
    assert!(secs.parse::<u64>().unwrap() > 1_600_000_000);
    assert!(micros.parse::<u32>().unwrap() < 1_000_000);

    // CLIENT LIST shows every connection; CLIENT KILL closes another one at once.
    let mut victim = cluster.connect(0);
    let _: () = redis::cmd("CLIENT")
        .arg("SETNAME")
        .arg("victim")
        .query(&mut victim)
        .unwrap();
    let victim_id: u64 = redis::cmd("CLIENT").arg("ID").query(&mut victim).unwrap();
    let list: String = redis::cmd("CLIENT").arg("LIST").query(&mut con).unwrap();
    let line = list
        .lines()
        .find(|l| l.starts_with(&format!("id={victim_id} ")))
        .unwrap_or_else(|| panic!("{list}"));
    assert!(line.contains(" name=victim "), "{line}");
    assert!(line.contains(" cmd=client"), "{line}");
    assert!(list.contains(" cmd=client user=default"), "{list}");
    // CLIENT INFO is the same line, of the connection asking.
    let info: String = redis::cmd("CLIENT").arg("INFO").query(&mut victim).unwrap();
    assert!(info.starts_with(&format!("id={victim_id} ")), "{info}");
    assert!(
        info.contains(" name=victim ") && info.ends_with('\n'),
        "{info}"
    );
    let killed: i64 = redis::cmd("CLIENT")
        .arg("KILL")
        .arg("ID")
        .arg(victim_id)
        .query(&mut con)
        .unwrap();
    assert_eq!(killed, 1);
    assert!(redis::cmd("PING").query::<String>(&mut victim).is_err());
    let list: String = redis::cmd("CLIENT").arg("LIST").query(&mut con).unwrap();
    assert!(!list.contains(&format!("id={victim_id} ")), "{list}");
    // The old form, by address, and SKIPME.
    let mut other = cluster.connect(0);
    let other_id: u64 = redis::cmd("CLIENT").arg("ID").query(&mut other).unwrap();
    let list: String = redis::cmd("CLIENT")
        .arg("LIST")
        .arg("ID")
        .arg(other_id)
        .query(&mut con)
        .unwrap();
    let addr = list
        .split(' ')
        .find_map(|f| f.strip_prefix("addr="))
        .unwrap()
        .to_owned();
    let ok: String = redis::cmd("CLIENT")
        .arg("KILL")
        .arg(&addr)
        .query(&mut con)
        .unwrap();
    assert_eq!(ok, "OK");
    assert!(redis::cmd("PING").query::<String>(&mut other).is_err());
    let err: RedisError = redis::cmd("CLIENT")
        .arg("KILL")
        .arg(&addr)
        .query::<()>(&mut con)
        .unwrap_err();
    assert!(err.to_string().contains("No such client"), "{err}");
    let me: u64 = redis::cmd("CLIENT").arg("ID").query(&mut con).unwrap();
    let skipped: i64 = redis::cmd("CLIENT")
        .arg("KILL")
        .arg("ID")
        .arg(me)
        .query(&mut con)
        .unwrap();
    assert_eq!(skipped, 0, "SKIPME yes is the default");
    // A connection that kills itself gets its reply, then is closed.
    let mut suicidal = cluster.connect(0);
    let its_id: u64 = redis::cmd("CLIENT").arg("ID").query(&mut suicidal).unwrap();
    let killed: i64 = redis::cmd("CLIENT")
        .arg("KILL")
        .arg("ID")
        .arg(its_id)
        .arg("SKIPME")
        .arg("no")
        .query(&mut suicidal)
        .unwrap();
    assert_eq!(killed, 1);
    assert!(redis::cmd("PING").query::<String>(&mut suicidal).is_err());

    // Redis commands logless lacks say so; only names Redis does not know are unknown.
    let err: RedisError = redis::cmd("SUBSCRIBE")
        .arg("ch")
        .query::<()>(&mut con)
        .unwrap_err();
    assert!(
        err.to_string()
            .contains("logless does not implement 'subscribe'"),
        "{err}"
    );
    let err: RedisError = redis::cmd("NOSUCHCMD").query::<()>(&mut con).unwrap_err();
    assert!(err.to_string().contains("unknown command"), "{err}");
}
