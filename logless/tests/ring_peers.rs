//! A rolling change of the peer list (issue 28, docs/ring.md §4 "Operating"): a ring of four
//! nodes with each key on three grows to five without ever stopping the ring. The new node
//! starts with the new list, the four restart one at a time with it (each talking with peers
//! whose list is one node shorter or longer meanwhile), and `logless cluster add 5` then
//! places it; then it shrinks back: `logless cluster remove 5`, node 5 stopped, the four
//! restarted in turn with the list of four. Every key stays served through every node that is
//! up at each step. The data mover is not built, so the keys lie in slots the changes do not
//! move (or are deleted before them).
mod common;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use common::ring::{cluster_command, nodes_install, text};
use common::{peer_client_addrs, Cluster, ServerSpec};
use logless_placement::{key_slot, Configuration, NodeId, Replication, Slot};
use redis::Commands;

/// `spec` as a node of the ring of the peers it lists, each key on three.
fn ring_node(spec: ServerSpec) -> ServerSpec {
    let clients = peer_client_addrs(&spec);
    spec.flag("--replication", 3)
        .flag("--peer-client-addrs", clients)
}

/// `spec` with the peer list of the first four nodes.
fn of_four(mut spec: ServerSpec) -> ServerSpec {
    spec.peers.retain(|&(id, _)| id <= 4);
    ring_node(spec)
}

/// Waits until node `i` serves: a connection to it that reads `key`.
fn serving(cluster: &Cluster, i: usize, key: &str) -> redis::Connection {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let client = redis::Client::open(cluster.url(cluster.replicas[i].spec.client)).unwrap();
        let con = client.get_connection_with_timeout(Duration::from_secs(1));
        if let Ok(mut con) = con {
            con.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
            if con.get::<_, Option<i64>>(key).is_ok() {
                return con;
            }
        }
        assert!(
            Instant::now() < deadline,
            "node {} does not serve; log:\n{}",
            i + 1,
            cluster.log_tail(i)
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Every key of `keys` (each holding its index) read through every node of `up`, and one more
/// written through each (and added to `keys`).
fn served_through(cluster: &Cluster, up: &[usize], keys: &mut Vec<String>, fresh: &mut Fresh) {
    for &i in up {
        let mut con = cluster.connect(i);
        for (k, key) in keys.iter().enumerate() {
            let got: Option<usize> = retrying_tryagain(|| con.get(key));
            assert_eq!(got, Some(k), "{key} through node {}", i + 1);
        }
    }
    for &i in up {
        let key = fresh.next();
        let mut con = cluster.connect(i);
        let () = retrying_tryagain(|| con.set(&key, keys.len()));
        keys.push(key);
    }
}

/// `command`'s result, asked again (for up to 10 s) while it answers `TRYAGAIN`, as a client
/// does: a node forwarding a key passes over, for a moment, a replica whose link broke or that
/// answered nothing in time, and just after a node stops every replica of a key may be passed
/// over at once (the command was not applied).
fn retrying_tryagain<T>(mut command: impl FnMut() -> redis::RedisResult<T>) -> T {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match command() {
            Err(e) if e.code() == Some("TRYAGAIN") && Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(100));
            }
            other => return other.unwrap(),
        }
    }
}

/// Restarts node `i` with `specs[i]`, one node at a time: while each is down the others in
/// `up` serve every key, and once it serves again all of `up` do.
fn restart_in_turn(
    cluster: &mut Cluster,
    specs: &[ServerSpec],
    up: &[usize],
    keys: &mut Vec<String>,
    fresh: &mut Fresh,
) {
    for (i, spec) in specs.iter().enumerate() {
        assert!(cluster.stop(i), "node {} stops cleanly", i + 1);
        let others: Vec<usize> = up.iter().copied().filter(|&j| j != i).collect();
        served_through(cluster, &others, keys, fresh);
        cluster.replicas[i].spec = spec.clone();
        cluster.spawn(i);
        serving(cluster, i, &keys[0]);
        served_through(cluster, up, keys, fresh);
    }
}

/// Names of keys in the slots a change leaves alone.
struct Fresh {
    still: Vec<bool>,
    n: usize,
}

impl Fresh {
    fn next(&mut self) -> String {
        loop {
            self.n += 1;
            let key = format!("key:{}", self.n);
            if self.still[usize::from(key_slot(key.as_bytes()).get())] {
                return key;
            }
        }
    }
}

#[test]
fn a_ring_of_four_grows_to_five_and_shrinks_back_by_rolling_restarts() {
    let mut cluster = Cluster::prepare(5, "mmap", None, |_, spec| spec, None);
    let full: Vec<ServerSpec> = (cluster.replicas.iter())
        .map(|r| ring_node(r.spec.clone()))
        .collect();
    let fours: Vec<ServerSpec> = (cluster.replicas[..4].iter())
        .map(|r| of_four(r.spec.clone()))
        .collect();
    for (i, spec) in fours.iter().enumerate() {
        cluster.replicas[i].spec = spec.clone();
        cluster.spawn(i);
    }
    cluster.wait_serving(Duration::from_secs(30));
    let four: Vec<usize> = (0..4).collect();
    nodes_install(&cluster, four.clone(), "Stable(1)");

    // Keys only in the slots that adding node 5 leaves alone (nothing moves keys yet).
    let ids: Vec<NodeId> = (1..=4).map(NodeId).collect();
    let first = Configuration::balanced(&ids, Replication::THREE).unwrap();
    let grown = first.with_node_added(NodeId(5)).unwrap();
    let still = Slot::all()
        .map(|slot| first.replicas(slot).nodes() == grown.replicas(slot).nodes())
        .collect();
    let mut fresh = Fresh { still, n: 0 };
    let mut keys = Vec::new();
    served_through(&cluster, &four, &mut keys, &mut fresh);

    // The new node starts with the list of five: the others do not know it yet, and it serves
    // no client before it reads the ring's stage from a majority of its list.
    cluster.replicas[4].spec = full[4].clone();
    cluster.spawn(4);
    served_through(&cluster, &four, &mut keys, &mut fresh);

    // Each of the four restarts with the list of five, one at a time; the others serve
    // meanwhile, and it serves again once it is up.
    restart_in_turn(&mut cluster, &full[..4], &four, &mut keys, &mut fresh);
    // Every node on the list of five: the new one serves (forwarding, it holds no slot yet).
    serving(&cluster, 4, &keys[0]);
    let all: Vec<usize> = (0..5).collect();
    served_through(&cluster, &all, &mut keys, &mut fresh);
    nodes_install(&cluster, all.clone(), "Stable(1)");

    // The start-up probes' keys lie anywhere: once deleted from every copy, the change can
    // place the node.
    let probes: Vec<String> = (0..4).map(|i| format!("ready:{i}")).collect();
    change_once_deleted(&cluster, &["add", "5"], &probes);
    nodes_install(&cluster, all.clone(), "Stable(2)");
    served_through(&cluster, &all, &mut keys, &mut fresh);

    // Node 5 now holds the keys written since of the slots it replicates.
    for k in 0..60 {
        let () = cluster.connect(4).set(format!("on-five:{k}"), k).unwrap();
    }
    let held: BTreeSet<String> = cluster.connect(4).keys("on-five:*").unwrap();
    assert!(!held.is_empty(), "node 5 holds no key");
    for key in &held {
        assert!(grown.replicas(key_slot(key.as_bytes())).contains(NodeId(5)));
    }

    // And back to four, the other way round: node 5 removed (its keys deleted first, nothing
    // moves them), stopped, and the four restarted in turn with the list of four, each
    // talking meanwhile with peers whose list is one node longer.
    let mut gone: Vec<String> = keys.drain(..).chain(held).collect();
    gone.extend((0..60).map(|k| format!("on-five:{k}")));
    change_once_deleted(&cluster, &["remove", "5"], &gone);
    nodes_install(&cluster, all.clone(), "Stable(3)");
    assert!(cluster.stop(4), "node 5 stops cleanly");
    let mut fresh = Fresh {
        still: vec![true; usize::from(logless_placement::SLOTS)],
        n: fresh.n,
    };
    served_through(&cluster, &four, &mut keys, &mut fresh);
    restart_in_turn(&mut cluster, &fours, &four, &mut keys, &mut fresh);
    nodes_install(&cluster, four.clone(), "Stable(3)");
}

/// `logless cluster <args>` asked of node 2, again while it fails for keys to move (nothing
/// moves them yet) after deleting `keys` once more: a deletion writes through to a replica its
/// quorum left out only at the register's next write, and a change counts every copy's keys.
fn change_once_deleted(cluster: &Cluster, args: &[&str], keys: &[String]) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let mut con = cluster.connect(0);
        for key in keys {
            let _: i64 = con.del(key).unwrap();
        }
        let output = cluster_command(cluster.replicas[1].spec.http, args)
            .output()
            .unwrap();
        if output.status.success() {
            return;
        }
        let shown = text(&output);
        assert!(shown.contains("data mover not built"), "{shown}");
        assert!(Instant::now() < deadline, "{shown}");
        std::thread::sleep(Duration::from_millis(500));
    }
}
