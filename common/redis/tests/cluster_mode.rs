//! A session in cluster mode (`Session::with_cluster`) and the map it decides with: CROSSSLOT
//! for keys of several slots, MOVED for a slot the node does not replicate (on a ring wider
//! than its replication degree, which a node does not serve yet), CLUSTER, ASKING, READONLY
//! and READWRITE, and the same requests refused as by a Redis outside cluster mode.
use std::sync::Arc;

use bytes::Bytes;
use logless_placement::{key_slot, Configuration, NodeId, Replication};
use logless_redis::cluster::{
    ClusterCommand, ClusterMap, CLUSTER_DISABLED, CROSSSLOT, INVALID_SLOT,
};
use logless_redis::resp::Value;
use logless_redis::session::{NodeQuery, Session, Step};
use logless_redis::table::Combine;

mod common;
use common::{addresses, error, handle, reply, simple};

/// The map of a ring of `n` nodes with three replicas a slot, seen from node 1.
fn map(n: u16) -> Arc<ClusterMap> {
    let nodes: Vec<NodeId> = (1..=n).map(NodeId).collect();
    let config = Configuration::balanced(&nodes, Replication::THREE).unwrap();
    Arc::new(ClusterMap::new(config, addresses(n), NodeId(1)).unwrap())
}

fn session(map: &Arc<ClusterMap>) -> Session {
    Session::new(1).with_cluster(Some(map.clone()))
}

/// A key of a slot that node 1 replicates (`here`) or does not, on `map`'s ring.
fn key_where(map: &ClusterMap, here: bool) -> String {
    (0..)
        .map(|i| format!("key:{i}"))
        .find(|k| {
            map.config()
                .replicas(key_slot(k.as_bytes()))
                .contains(NodeId(1))
                == here
        })
        .unwrap()
}

#[test]
fn keys_of_one_slot_run_and_keys_of_several_are_refused_with_crossslot() {
    let ring = map(3);
    let mut s = session(&ring);
    assert_ne!(key_slot(b"a"), key_slot(b"b"));
    for words in [
        &["MGET", "a", "b"][..],
        &["DEL", "a", "b"],
        &["EXISTS", "a", "b", "a"],
        &["UNLINK", "b", "a"],
    ] {
        assert_eq!(reply(&mut s, words), error(CROSSSLOT), "{words:?}");
    }
    // Keys sharing a hash tag share a slot, so they run as they do outside cluster mode.
    assert!(matches!(
        handle(&mut s, &["MGET", "{user1}.name", "{user1}.mail"]),
        Step::Many {
            combine: Combine::Array,
            ..
        }
    ));
    assert!(matches!(
        handle(&mut s, &["DEL", "a", "a"]),
        Step::Many { .. }
    ));
    assert!(matches!(
        handle(&mut s, &["SET", "a", "1"]),
        Step::One { .. }
    ));
    // Outside cluster mode nothing is refused for its slots.
    let mut plain = Session::new(2);
    assert!(matches!(
        handle(&mut plain, &["MGET", "a", "b"]),
        Step::Many { .. }
    ));
}

#[test]
fn a_slot_the_node_does_not_replicate_is_moved_to_its_first_replica() {
    // With N = R every node replicates every slot: nothing is ever moved.
    let full = map(3);
    for i in 0..2000 {
        assert_eq!(full.redirect([format!("k{i}").as_bytes()]), None);
    }
    // On a wider ring node 1 replicates three slots in five.
    let ring = map(5);
    let mut s = session(&ring);
    let away = key_where(&ring, false);
    let slot = key_slot(away.as_bytes());
    let first = ring.config().replicas(slot).first();
    assert_ne!(first, NodeId(1));
    let moved = format!("MOVED {slot} 127.0.0.1:{}", 7000 + first.0);
    assert_eq!(reply(&mut s, &["GET", &away]), error(&moved));
    assert_eq!(reply(&mut s, &["DEL", &away, &away]), error(&moved));
    let here = key_where(&ring, true);
    assert!(matches!(handle(&mut s, &["GET", &here]), Step::One { .. }));
    // Keys of several slots are refused as such before any is redirected, as in Redis.
    assert_eq!(reply(&mut s, &["MGET", &away, &here]), error(CROSSSLOT));
}

#[test]
fn a_transaction_keeps_to_the_slot_of_its_first_key() {
    let ring = map(3);
    let mut s = session(&ring);
    assert_eq!(reply(&mut s, &["MULTI"]), simple("OK"));
    assert_eq!(reply(&mut s, &["INCR", "{t}a"]), simple("QUEUED"));
    assert_eq!(reply(&mut s, &["GET", "{t}b"]), simple("QUEUED"));
    assert_eq!(reply(&mut s, &["GET", "other"]), error(CROSSSLOT));
    let exec = reply(&mut s, &["EXEC"]);
    assert!(
        matches!(&exec, Value::Error(t) if t.starts_with("EXECABORT")),
        "{exec:?}"
    );
    // A transaction on one key runs as outside cluster mode.
    assert_eq!(reply(&mut s, &["MULTI"]), simple("OK"));
    assert_eq!(reply(&mut s, &["INCR", "n"]), simple("QUEUED"));
    assert!(matches!(handle(&mut s, &["EXEC"]), Step::One { .. }));
}

#[test]
fn under_one_log_commands_over_several_keys_need_one_slot() {
    let ring = map(3);
    let mut s = session(&ring).with_total_order(true);
    assert_eq!(
        reply(&mut s, &["MSET", "a", "1", "b", "2"]),
        error(CROSSSLOT)
    );
    assert_eq!(reply(&mut s, &["RENAME", "a", "b"]), error(CROSSSLOT));
    assert!(matches!(
        handle(&mut s, &["MSET", "{t}a", "1", "{t}b", "2"]),
        Step::Cross { .. }
    ));
    assert_eq!(reply(&mut s, &["WATCH", "a", "b"]), error(CROSSSLOT));
    assert!(matches!(
        handle(&mut s, &["WATCH", "{t}a", "{t}b"]),
        Step::Watch(_)
    ));
}

#[test]
fn cluster_subcommands_go_to_the_node_in_cluster_mode_only() {
    let ring = map(3);
    let mut s = session(&ring);
    assert_eq!(
        handle(&mut s, &["CLUSTER", "SLOTS"]),
        Step::Node(NodeQuery::Cluster(ClusterCommand::Slots))
    );
    assert_eq!(
        handle(&mut s, &["cluster", "keyslot", "{x}y"]),
        Step::Node(NodeQuery::Cluster(ClusterCommand::KeySlot(Bytes::from(
            "{x}y"
        ))))
    );
    assert_eq!(
        handle(&mut s, &["CLUSTER", "COUNTKEYSINSLOT", "16383"]),
        Step::Node(NodeQuery::Cluster(ClusterCommand::CountKeysInSlot(
            logless_placement::Slot::MAX
        )))
    );
    for words in [
        &["CLUSTER", "COUNTKEYSINSLOT", "16384"][..],
        &["CLUSTER", "GETKEYSINSLOT", "-1", "3"],
    ] {
        assert_eq!(reply(&mut s, words), error(INVALID_SLOT), "{words:?}");
    }
    assert_eq!(
        reply(&mut s, &["CLUSTER", "GETKEYSINSLOT", "1", "x"]),
        error("ERR Invalid number of keys")
    );
    assert_eq!(
        reply(&mut s, &["CLUSTER", "SLOTS", "x"]),
        error("ERR wrong number of arguments for 'cluster|slots' command")
    );
    let text = |v: Value| match v {
        Value::Error(t) => t,
        other => panic!("{other:?}"),
    };
    assert!(text(reply(&mut s, &["CLUSTER", "MEET", "h", "1"]))
        .starts_with("ERR logless does not implement 'cluster|meet': "));
    assert_eq!(
        reply(&mut s, &["CLUSTER", "BOGUS"]),
        error("ERR unknown subcommand 'BOGUS'. Try CLUSTER HELP.")
    );
    for words in [&["ASKING"][..], &["READONLY"], &["READWRITE"]] {
        assert_eq!(reply(&mut s, words), simple("OK"), "{words:?}");
    }
    let hello = reply(&mut s, &["HELLO", "3"]);
    let Value::Map(fields) = hello else {
        panic!("{hello:?}")
    };
    assert!(fields.contains(&(common::bulk("mode"), common::bulk("cluster"))));

    // Outside cluster mode, as a Redis whose cluster support is disabled.
    let mut plain = Session::new(2);
    for words in [
        &["CLUSTER", "SLOTS"][..],
        &["CLUSTER", "KEYSLOT", "a"],
        &["READONLY"],
        &["READWRITE"],
        &["ASKING"],
    ] {
        assert_eq!(
            reply(&mut plain, words),
            error(CLUSTER_DISABLED),
            "{words:?}"
        );
    }
}

#[test]
fn the_map_answers_with_the_liveness_it_is_told() {
    let ring = map(5);
    let info = |online: &dyn Fn(NodeId) -> bool| match ring.answer(&ClusterCommand::Info, online) {
        Some(Value::Bulk(text)) => String::from_utf8(text.to_vec()).unwrap(),
        other => panic!("{other:?}"),
    };
    assert!(info(&|_| true).starts_with("cluster_state:ok\r\n"));
    // Node 1 answers, so it is online whatever it is told; two others down lose some slots.
    assert!(info(&|_| false).starts_with("cluster_state:fail\r\n"));
    assert!(info(&|n| n != NodeId(2)).starts_with("cluster_state:ok\r\n"));
    assert!(info(&|n| n != NodeId(2) && n != NodeId(3)).starts_with("cluster_state:fail\r\n"));
    assert_eq!(
        ring.answer(&ClusterCommand::KeySlot(Bytes::from("somekey")), |_| true),
        Some(Value::Int(11058))
    );
    let nodes = match ring.answer(&ClusterCommand::Nodes, |n| n != NodeId(4)) {
        Some(Value::Bulk(text)) => String::from_utf8(text.to_vec()).unwrap(),
        other => panic!("{other:?}"),
    };
    assert!(nodes.lines().any(|l| l.contains(" myself,master ")));
    assert!(nodes
        .lines()
        .any(|l| l.contains("127.0.0.1:7004@17004 master,fail ")));
    assert_eq!(
        ring.answer(
            &ClusterCommand::CountKeysInSlot(logless_placement::Slot::MIN),
            |_| true
        ),
        None
    );
}
