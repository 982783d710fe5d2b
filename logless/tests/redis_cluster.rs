//! Redis Cluster in the node: the real `logless` binary as 3 replicas with `--cluster-enabled`,
//! asked CLUSTER SLOTS, NODES, SHARDS, INFO, MYID, KEYSLOT, COUNTKEYSINSLOT and GETKEYSINSLOT,
//! and sent commands over keys of one slot and of several (CROSSSLOT); a replica killed shows
//! as failed in the others' replies while the cluster stays `ok`. Under the log engine, MSET
//! and RENAME run on keys of one hash tag and are refused across slots.
mod common;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use common::{array, config_get, int, peer_client_addrs, Cluster};
use redis::{Commands, RedisError, Value};

/// Three replicas in cluster mode, each told every replica's client address, with `extra`
/// flags.
fn cluster_mode(extra: &[&str]) -> Cluster {
    Cluster::start_each(3, "memory", |_, spec| {
        let clients = peer_client_addrs(&spec);
        spec.args(["--cluster-enabled"])
            .flag("--peer-client-addrs", clients)
            .args(extra.iter().copied())
    })
}

fn text(value: &Value) -> String {
    match value {
        Value::BulkString(bytes) => String::from_utf8(bytes.clone()).unwrap(),
        Value::SimpleString(s) => s.clone(),
        other => panic!("not a string: {other:?}"),
    }
}

/// `CLUSTER args...` on `con`.
fn ask(con: &mut redis::Connection, args: &[&str]) -> redis::RedisResult<Value> {
    redis::cmd("CLUSTER").arg(args).query(con)
}

/// The line of node `id` in `CLUSTER NODES`.
fn nodes_line(con: &mut redis::Connection, id: u16) -> String {
    let nodes = text(&ask(con, &["NODES"]).unwrap());
    let name = format!("{id:040x}");
    nodes
        .lines()
        .find(|line| line.starts_with(&name))
        .unwrap_or_else(|| panic!("no line for node {id}:\n{nodes}"))
        .to_owned()
}

#[test]
fn a_cluster_enabled_node_answers_cluster_replies_and_refuses_crossslot() {
    let mut cluster = cluster_mode(&[]);
    let ports: Vec<u16> = cluster
        .replicas
        .iter()
        .map(|r| r.spec.client.port())
        .collect();
    for (i, replica) in cluster.replicas.iter().enumerate() {
        let mut con = cluster.connect(i);
        let id = replica.spec.node_id;
        let info = text(&ask(&mut con, &["INFO"]).unwrap());
        assert!(info.starts_with("cluster_state:ok\r\n"), "{info}");
        assert!(info.contains("\r\ncluster_known_nodes:3\r\n"), "{info}");
        assert!(
            info.contains("\r\ncluster_replication_degree:3\r\n"),
            "{info}"
        );
        assert_eq!(
            text(&ask(&mut con, &["MYID"]).unwrap()),
            format!("{id:040x}")
        );
        assert!(nodes_line(&mut con, id).contains(" myself,master - 0 0 1 connected "));
        assert_eq!(config_get(&mut con, "cluster-enabled"), "yes");
        let section: String = redis::cmd("INFO").arg("cluster").query(&mut con).unwrap();
        assert!(section.contains("cluster_enabled:1"), "{section}");
    }

    // CLUSTER SLOTS: every slot once, each with the three replicas at their client addresses;
    // every replica is the first of some slots, so clients spread their load.
    let mut a = cluster.connect(0);
    let slots = ask(&mut a, &["SLOTS"]).unwrap();
    let mut next = 0;
    let mut firsts = BTreeSet::new();
    for entry in array(&slots) {
        let entry = array(entry);
        assert_eq!(int(&entry[0]), next);
        next = int(&entry[1]) + 1;
        assert_eq!(entry.len(), 2 + 3);
        let mut replicas: Vec<u16> = entry[2..]
            .iter()
            .map(|node| {
                let node = array(node);
                assert_eq!(text(&node[0]), "127.0.0.1");
                u16::try_from(int(&node[1])).unwrap()
            })
            .collect();
        firsts.insert(replicas[0]);
        replicas.sort_unstable();
        assert_eq!(replicas, ports);
    }
    assert_eq!(next, 16384);
    assert_eq!(firsts.len(), 3, "every replica is the first of some slots");
    let shards = ask(&mut a, &["SHARDS"]).unwrap();
    assert!(!array(&shards).is_empty());

    // Keys of several slots are refused; a hash tag groups them; single keys run anywhere.
    let _: () = a.set("{user:1}.name", "ada").unwrap();
    let _: () = a.set("{user:1}.mail", "ada@example.org").unwrap();
    let _: () = a.set("plain", "x").unwrap();
    let mut b = cluster.connect(1);
    let both: Vec<String> = b.mget(&["{user:1}.name", "{user:1}.mail"]).unwrap();
    assert_eq!(both, ["ada", "ada@example.org"]);
    let err: RedisError = b
        .mget::<_, Vec<String>>(&["{user:1}.name", "plain"])
        .unwrap_err();
    assert_eq!(err.code(), Some("CROSSSLOT"), "{err}");
    let err: RedisError = b.del::<_, i64>(&["plain", "other"]).unwrap_err();
    assert_eq!(err.code(), Some("CROSSSLOT"), "{err}");
    assert_eq!(b.get::<_, String>("plain").unwrap(), "x");
    let slot = int(&ask(&mut b, &["KEYSLOT", "{user:1}.name"]).unwrap());
    let tag = int(&ask(&mut b, &["KEYSLOT", "user:1"]).unwrap());
    assert_eq!((slot, tag), (slot, slot));
    assert_eq!(int(&ask(&mut b, &["KEYSLOT", "somekey"]).unwrap()), 11058);
    let slot = slot.to_string();
    let count = int(&ask(&mut a, &["COUNTKEYSINSLOT", &slot]).unwrap());
    assert_eq!(count, 2);
    let keys = ask(&mut a, &["GETKEYSINSLOT", &slot, "10"]).unwrap();
    let keys: BTreeSet<String> = array(&keys).iter().map(text).collect();
    assert_eq!(
        keys,
        BTreeSet::from(["{user:1}.name".into(), "{user:1}.mail".into()])
    );
    for con in [&mut a, &mut b] {
        let ok: String = redis::cmd("READONLY").query(con).unwrap();
        assert_eq!(ok, "OK");
    }

    // A replica killed: the others show it failed and disconnected once their link to it
    // broke (at the next message sent to it: every write goes to every replica); every slot
    // keeps two of its three replicas, so the cluster stays ok and serves.
    cluster.kill(2);
    let deadline = Instant::now() + Duration::from_secs(15);
    for n in 1.. {
        assert_eq!(a.incr::<_, _, i64>("{user:1}.visits", 1).unwrap(), n);
        let line = nodes_line(&mut a, 3);
        if line.contains(" master,fail - 0 0 1 disconnected ") {
            break;
        }
        assert!(Instant::now() < deadline, "node 3 still shown live: {line}");
        std::thread::sleep(Duration::from_millis(100));
    }
    let info = text(&ask(&mut a, &["INFO"]).unwrap());
    assert!(info.starts_with("cluster_state:ok\r\n"), "{info}");
}

#[test]
fn under_the_log_engine_multi_key_commands_run_atomically_on_one_slot() {
    let cluster = cluster_mode(&["--engine", "multipaxos"]);
    let mut a = cluster.connect(0);
    let _: () = redis::cmd("MSET")
        .arg(&["{acct}.a", "10", "{acct}.b", "20"])
        .query(&mut a)
        .unwrap();
    let mut b = cluster.connect(1);
    let both: Vec<i64> = b.mget(&["{acct}.a", "{acct}.b"]).unwrap();
    assert_eq!(both, [10, 20]);
    let err: RedisError = redis::cmd("MSET")
        .arg(&["a", "1", "b", "2"])
        .query::<()>(&mut b)
        .unwrap_err();
    assert_eq!(err.code(), Some("CROSSSLOT"), "{err}");
    let err: RedisError = redis::cmd("RENAME")
        .arg(&["{acct}.a", "other"])
        .query::<()>(&mut b)
        .unwrap_err();
    assert_eq!(err.code(), Some("CROSSSLOT"), "{err}");
    let info = text(&ask(&mut b, &["INFO"]).unwrap());
    assert!(info.starts_with("cluster_state:ok\r\n"), "{info}");
}
