//! A ring in cluster mode follows its changes (issue 28, docs/ring.md §4 "Operating"): four
//! nodes with each key on three and `--cluster-enabled`. A node is removed with `logless
//! cluster`; connections opened before the change redirect and serve by the stage their node
//! installed since, and a cluster-aware client (a slot map from `CLUSTER SLOTS`, reloaded on
//! `MOVED`, as redis-py's `RedisCluster` keeps one) goes on working, redirected away from the
//! removed node; once the removed node has dropped the registers of the slots it left, it is
//! added back and the client is redirected to it again.
mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use common::ring::{change, nodes_install};
use common::{array, int, metric, peer_client_addrs, Cluster};
use logless_placement::{key_slot, Configuration, NodeId, Replication, SLOTS};
use redis::{Commands, Value};

const NODES: usize = 4;

/// A cluster-aware client: each command goes to the first replica its map names for the key's
/// slot; on `MOVED` it goes where it was sent and reloads the map from that node.
struct SlotClient<'c> {
    cluster: &'c Cluster,
    /// The client port of each slot's first replica, as last loaded.
    map: Vec<u16>,
    connections: BTreeMap<u16, redis::Connection>,
    redirects: usize,
    /// Commands answered, by the client port of the node that answered.
    answered: BTreeMap<u16, usize>,
}

impl<'c> SlotClient<'c> {
    fn new(cluster: &'c Cluster) -> Self {
        let mut client = SlotClient {
            cluster,
            map: vec![0; usize::from(SLOTS)],
            connections: BTreeMap::new(),
            redirects: 0,
            answered: BTreeMap::new(),
        };
        client.load(cluster.replicas[0].spec.client.port());
        client
    }

    fn connection(&mut self, port: u16) -> &mut redis::Connection {
        let cluster = self.cluster;
        self.connections.entry(port).or_insert_with(|| {
            let i = (cluster.replicas.iter())
                .position(|r| r.spec.client.port() == port)
                .unwrap_or_else(|| panic!("no node serves clients at port {port}"));
            cluster.connect(i)
        })
    }

    /// Loads the map from the node at `port`.
    fn load(&mut self, port: u16) {
        let slots: Value = redis::cmd("CLUSTER")
            .arg("SLOTS")
            .query(self.connection(port))
            .unwrap();
        for entry in array(&slots) {
            let entry = array(entry);
            let first = u16::try_from(int(&array(&entry[2])[1])).unwrap();
            for slot in int(&entry[0])..=int(&entry[1]) {
                self.map[usize::try_from(slot).unwrap()] = first;
            }
        }
    }

    /// Runs `command` on `key`, following redirections; its reply and the port that answered.
    fn run(&mut self, key: &str, command: &redis::Cmd) -> (Value, u16) {
        let slot = usize::from(key_slot(key.as_bytes()).get());
        for _ in 0..5 {
            let port = self.map[slot];
            match command.query::<Value>(self.connection(port)) {
                Ok(value) => {
                    *self.answered.entry(port).or_default() += 1;
                    return (value, port);
                }
                Err(e) if e.code() == Some("MOVED") => {
                    self.redirects += 1;
                    let to = moved_port(&e);
                    self.map[slot] = to;
                    self.load(to);
                }
                Err(e) => panic!("{key}: {e}"),
            }
        }
        panic!("{key}: redirected five times");
    }

    fn set(&mut self, key: &str, value: usize) -> u16 {
        let (reply, port) = self.run(key, redis::cmd("SET").arg(key).arg(value));
        assert_eq!(reply, Value::Okay, "SET {key}");
        port
    }

    fn get(&mut self, key: &str) -> Option<usize> {
        let (reply, _) = self.run(key, redis::cmd("GET").arg(key));
        redis::from_redis_value(&reply).unwrap()
    }

    /// Deletes every key a node's copy shows, until none shows one (a replica left out of a
    /// deletion's quorum shows the old value until the register's next write reaches it, and
    /// a change counts the keys of its moving slots in every copy).
    fn empty_every_copy(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let shown: BTreeSet<String> = (0..NODES)
                .flat_map(|i| {
                    let keys: BTreeSet<String> = self.cluster.connect(i).keys("*").unwrap();
                    keys
                })
                .collect();
            if shown.is_empty() {
                return;
            }
            for key in &shown {
                self.run(key, redis::cmd("DEL").arg(key));
            }
            assert!(Instant::now() < deadline, "copies still show {shown:?}");
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

/// The port a `MOVED slot ip:port` names.
fn moved_port(e: &redis::RedisError) -> u16 {
    let detail = e.detail().expect("MOVED names a node");
    detail.rsplit(':').next().unwrap().parse().unwrap()
}

/// The first key `key:<n>` (from `from` on) whose slot `wanted` accepts.
fn key_where(from: usize, wanted: impl Fn(logless_placement::Slot) -> bool) -> String {
    (from..)
        .map(|n| format!("key:{n}"))
        .find(|key| wanted(key_slot(key.as_bytes())))
        .unwrap()
}

#[test]
fn a_ring_in_cluster_mode_changes_and_its_clients_follow() {
    let cluster = Cluster::start_each(NODES, "memory", |_, spec| {
        let clients = peer_client_addrs(&spec);
        spec.flag("--replication", 3)
            .flag("--peer-client-addrs", clients)
            .args(["--cluster-enabled"])
    });
    let port = |node: NodeId| cluster.replicas[usize::from(node.0) - 1].spec.client.port();
    let all = 0..NODES;
    nodes_install(&cluster, all.clone(), "Stable(1)");
    let ids: Vec<NodeId> = (1..=NODES as u16).map(NodeId).collect();
    let first = Configuration::balanced(&ids, Replication::THREE).unwrap();
    let removed = first.with_node_removed(NodeId(4)).unwrap();
    let added = removed.with_node_added(NodeId(4)).unwrap();

    let mut client = SlotClient::new(&cluster);
    client.empty_every_copy();
    // Connections opened before the change, one per node.
    let mut cons: Vec<redis::Connection> = all.clone().map(|i| cluster.connect(i)).collect();

    // Node 1 redirects a key of a slot it does not replicate.
    let elsewhere = key_where(0, |slot| !first.replicas(slot).contains(NodeId(1)));
    let before = cons[0].get::<_, Option<usize>>(&elsewhere).unwrap_err();
    assert_eq!(before.code(), Some("MOVED"), "{before}");

    change(&cluster, 0, &["remove", "4"]);
    nodes_install(&cluster, all.clone(), "Stable(2)");
    for r in &cluster.replicas {
        assert_eq!(metric(r.spec.http, "logless_ring_epoch"), 2);
        assert_eq!(metric(r.spec.http, "logless_ring_joint"), 0);
    }

    // The same connection to node 1 serves the key now (three nodes, each key on three), and
    // one to node 4 redirects every key to its first replica of epoch 2.
    let () = cons[0].set(&elsewhere, 1).unwrap();
    for n in 0..20 {
        let key = format!("moved:{n}");
        let e = cons[3].set::<_, _, ()>(&key, n).unwrap_err();
        let slot = key_slot(key.as_bytes());
        assert_eq!(moved_port(&e), port(removed.replicas(slot).first()), "{e}");
    }
    // Its CLUSTER SLOTS shows epoch 2's ring: node 4 is nowhere.
    let shown: Value = redis::cmd("CLUSTER")
        .arg("SLOTS")
        .query(&mut cons[3])
        .unwrap();
    for entry in array(&shown) {
        for node in &array(entry)[2..] {
            assert_ne!(int(&array(node)[1]), i64::from(port(NodeId(4))));
        }
    }

    // The client's map of epoch 1 sends the slots node 4 was first replica of there: it is
    // redirected, reloads its map, and every key is written and read.
    const KEYS: usize = 120;
    for k in 0..KEYS {
        client.set(&format!("after:{k}"), k);
    }
    for k in 0..KEYS {
        assert_eq!(client.get(&format!("after:{k}")), Some(k));
    }
    assert!(client.redirects > 0, "its map named node 4 for some slots");
    let redirects = client.redirects;
    let answered_by_4 = client.answered.get(&port(NodeId(4))).copied();
    assert_eq!(answered_by_4, None, "node 4 holds no slot of epoch 2");

    // Node 4 added back (the coordinator waits until it has dropped the registers of the
    // slots it left; docs/ring.md §4 "Slots a node left"): the client is redirected to it for
    // the slots it is first replica of now, and each key is answered by its first replica.
    change(&cluster, 1, &["add", "4"]);
    nodes_install(&cluster, all.clone(), "Stable(3)");
    for k in 0..KEYS {
        let key = format!("again:{k}");
        let answered = client.set(&key, k);
        assert_eq!(
            answered,
            port(added.replicas(key_slot(key.as_bytes())).first())
        );
    }
    for k in 0..KEYS {
        assert_eq!(client.get(&format!("again:{k}")), Some(k));
        assert_eq!(client.get(&format!("after:{k}")), Some(k));
    }
    assert!(client.redirects > redirects, "its map of epoch 2 is stale");
    assert!(client.answered[&port(NodeId(4))] > 0, "node 4 serves again");

    // The connection to node 1 redirects, once more, the keys of slots it no longer holds.
    let gone = key_where(0, |slot| !added.replicas(slot).contains(NodeId(1)));
    let e = cons[0].get::<_, Option<usize>>(&gone).unwrap_err();
    let slot = key_slot(gone.as_bytes());
    assert_eq!(moved_port(&e), port(added.replicas(slot).first()), "{e}");
}
