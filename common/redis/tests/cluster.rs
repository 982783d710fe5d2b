//! The Redis Cluster replies of a ring, checked against the formats Redis documents for
//! CLUSTER SLOTS, SHARDS, NODES, KEYSLOT and INFO and the MOVED/ASK redirections.
use std::collections::BTreeMap;

use bytes::{Bytes, BytesMut};
use logless_placement::{Configuration, NodeId, Replication, Slot, SLOTS};
use logless_redis::cluster::{
    ask, cluster_info, cluster_keyslot, cluster_myid, cluster_nodes, cluster_shards, cluster_slots,
    moved, node_name, ClusterNode, ClusterView, ClusterViewError, CLUSTERDOWN, CROSSSLOT,
};
use logless_redis::resp::{write_value, Protocol, Value};

mod common;
use common::addresses;

fn ring(n: u16) -> Configuration {
    let nodes: Vec<NodeId> = (1..=n).map(NodeId).collect();
    Configuration::balanced(&nodes, Replication::THREE).unwrap()
}

fn resp2(value: &Value) -> Bytes {
    let mut out = BytesMut::new();
    write_value(&mut out, value, Protocol::Resp2);
    out.freeze()
}

fn text(value: &Value) -> String {
    match value {
        Value::Bulk(bytes) => String::from_utf8(bytes.to_vec()).unwrap(),
        other => panic!("not a bulk string: {other:?}"),
    }
}

fn int(value: &Value) -> i64 {
    match value {
        Value::Int(i) => *i,
        other => panic!("not an integer: {other:?}"),
    }
}

fn array(value: &Value) -> &[Value] {
    match value {
        Value::Array(items) => items,
        other => panic!("not an array: {other:?}"),
    }
}

fn field<'v>(map: &'v Value, name: &str) -> &'v Value {
    match map {
        Value::Map(pairs) => {
            &pairs
                .iter()
                .find(|(k, _)| text(k) == name)
                .unwrap_or_else(|| panic!("no field {name}"))
                .1
        }
        other => panic!("not a map: {other:?}"),
    }
}

#[test]
fn keyslot_answers_the_slots_redis_documents() {
    assert_eq!(cluster_keyslot(b"somekey"), Value::Int(11058));
    assert_eq!(cluster_keyslot(b"foo{hash_tag}"), Value::Int(2515));
}

#[test]
fn redirections_and_errors_use_redis_words() {
    let to = &addresses(3)[&NodeId(2)];
    let slot = Slot::new(3999).unwrap();
    assert_eq!(
        resp2(&moved(slot, to)),
        Bytes::from_static(b"-MOVED 3999 127.0.0.1:7002\r\n")
    );
    assert_eq!(
        resp2(&ask(slot, to)),
        Bytes::from_static(b"-ASK 3999 127.0.0.1:7002\r\n")
    );
    assert_eq!(
        CROSSSLOT,
        "CROSSSLOT Keys in request don't hash to the same slot"
    );
    assert_eq!(CLUSTERDOWN, "CLUSTERDOWN The cluster is down");
    // A view redirects a slot to its first replica.
    let config = ring(5);
    let nodes = addresses(5);
    let view = ClusterView::new(&config, &nodes, NodeId(1)).unwrap();
    let first = config.replicas(slot).first();
    assert_eq!(view.moved(slot), moved(slot, &nodes[&first]));
}

#[test]
fn node_names_are_forty_hex_digits() {
    assert_eq!(node_name(NodeId(1)), format!("{}1", "0".repeat(39)));
    assert_eq!(node_name(NodeId(0xabc)).len(), 40);
}

#[test]
fn myid_names_the_node_answering() {
    let config = ring(3);
    let nodes = addresses(3);
    let view = ClusterView::new(&config, &nodes, NodeId(3)).unwrap();
    assert_eq!(text(&cluster_myid(&view)), node_name(NodeId(3)));
}

#[test]
fn a_view_needs_every_member_address() {
    let config = ring(5);
    let nodes = addresses(4);
    assert_eq!(
        ClusterView::new(&config, &nodes, NodeId(1)).unwrap_err(),
        ClusterViewError::MissingAddress(NodeId(5))
    );
}

#[test]
fn slots_cover_every_slot_once_with_the_replicas_in_ring_order() {
    let config = ring(5);
    let nodes = addresses(5);
    let view = ClusterView::new(&config, &nodes, NodeId(1)).unwrap();
    let reply = cluster_slots(&view);
    let mut next = 0;
    for entry in array(&reply) {
        let entry = array(entry);
        let (first, last) = (int(&entry[0]), int(&entry[1]));
        assert_eq!(first, next, "ranges are contiguous and in order");
        assert!(last >= first);
        next = last + 1;
        // [first, last, then one [ip, port, name, metadata] per replica, the first one first].
        assert_eq!(entry.len(), 2 + 3);
        let expected = config.replicas(Slot::new(first as u16).unwrap());
        for (node, &id) in entry[2..].iter().zip(expected.nodes()) {
            let node = array(node);
            assert_eq!(text(&node[0]), "127.0.0.1");
            assert_eq!(int(&node[1]), i64::from(7000 + id.0));
            assert_eq!(text(&node[2]), node_name(id));
            assert_eq!(node[3], Value::Map(Vec::new()));
        }
    }
    assert_eq!(next, i64::from(SLOTS));
}

#[test]
fn a_slots_entry_encodes_as_redis_writes_it() {
    let config = ring(3);
    let mut nodes = addresses(3);
    nodes.get_mut(&NodeId(1)).unwrap().hostname = Some("host-1".to_owned());
    let view = ClusterView::new(&config, &nodes, NodeId(1)).unwrap();
    let reply = cluster_slots(&view);
    let entry = &array(&reply)[0];
    let replicas = config.replicas(Slot::MIN);
    let last = int(&array(entry)[1]);
    let mut expected = format!("*5\r\n:0\r\n:{last}\r\n");
    for &id in replicas.nodes() {
        expected.push_str(&format!(
            "*4\r\n$9\r\n127.0.0.1\r\n:{}\r\n$40\r\n{}\r\n",
            7000 + id.0,
            node_name(id)
        ));
        if id == NodeId(1) {
            expected.push_str("*2\r\n$8\r\nhostname\r\n$6\r\nhost-1\r\n");
        } else {
            expected.push_str("*0\r\n");
        }
    }
    assert_eq!(resp2(entry), Bytes::from(expected));
}

#[test]
fn shards_group_slots_by_replica_list_with_one_master_each() {
    let config = ring(5);
    let mut nodes = addresses(5);
    nodes.get_mut(&NodeId(4)).unwrap().online = false;
    let view = ClusterView::new(&config, &nodes, NodeId(1)).unwrap();
    let reply = cluster_shards(&view);
    let mut covered = vec![false; usize::from(SLOTS)];
    for shard in array(&reply) {
        let slots = array(field(shard, "slots"));
        assert_eq!(slots.len() % 2, 0, "slots come as first/last pairs");
        let members = array(field(shard, "nodes"));
        assert_eq!(members.len(), 3);
        for pair in slots.chunks(2) {
            let (first, last) = (int(&pair[0]), int(&pair[1]));
            for slot in first..=last {
                assert!(!covered[slot as usize], "slot {slot} in two shards");
                covered[slot as usize] = true;
                let replicas = config.replicas(Slot::new(slot as u16).unwrap());
                let names: Vec<String> = members.iter().map(|m| text(field(m, "id"))).collect();
                let expected: Vec<String> =
                    replicas.nodes().iter().map(|&n| node_name(n)).collect();
                assert_eq!(names, expected);
            }
        }
        for (k, member) in members.iter().enumerate() {
            let role = if k == 0 { "master" } else { "replica" };
            assert_eq!(text(field(member, "role")), role);
            assert_eq!(text(field(member, "ip")), "127.0.0.1");
            assert_eq!(text(field(member, "endpoint")), "127.0.0.1");
            assert_eq!(int(field(member, "replication-offset")), 0);
            let port = int(field(member, "port"));
            let health = if port == 7004 { "failed" } else { "online" };
            assert_eq!(text(field(member, "health")), health);
        }
    }
    assert!(covered.iter().all(|&c| c));
}

#[test]
fn nodes_lines_follow_the_cluster_nodes_format() {
    let config = ring(5);
    let mut nodes = addresses(5);
    nodes.get_mut(&NodeId(3)).unwrap().online = false;
    let view = ClusterView::new(&config, &nodes, NodeId(2)).unwrap();
    let reply = text(&cluster_nodes(&view));
    assert!(reply.ends_with('\n'));
    let lines: Vec<&str> = reply.lines().collect();
    assert_eq!(lines.len(), 5);
    let mut owner = vec![None; usize::from(SLOTS)];
    for (line, id) in lines.iter().zip(1u16..) {
        let fields: Vec<&str> = line.split(' ').collect();
        assert_eq!(fields[0], node_name(NodeId(id)));
        assert_eq!(fields[1], format!("127.0.0.1:{}@{}", 7000 + id, 17000 + id));
        let flags = match id {
            2 => "myself,master",
            3 => "master,fail",
            _ => "master",
        };
        assert_eq!(fields[2], flags);
        // master (none: every node is a master), ping sent, pong received, epoch, link.
        assert_eq!(fields[3..7], ["-", "0", "0", "1"]);
        let link = if id == 3 { "disconnected" } else { "connected" };
        assert_eq!(fields[7], link);
        for range in &fields[8..] {
            let (first, last) = match range.split_once('-') {
                Some((a, b)) => (a.parse::<usize>().unwrap(), b.parse::<usize>().unwrap()),
                None => (range.parse().unwrap(), range.parse().unwrap()),
            };
            for (slot, owner) in owner.iter_mut().enumerate().take(last + 1).skip(first) {
                assert_eq!(*owner, None, "slot {slot} listed twice");
                *owner = Some(NodeId(id));
            }
        }
    }
    for slot in Slot::all() {
        assert_eq!(
            owner[usize::from(slot.get())],
            Some(config.replicas(slot).first())
        );
    }
}

#[test]
fn info_reports_the_slots_without_a_live_quorum() {
    let config = ring(5);
    let mut nodes = addresses(5);
    let info = |nodes: &BTreeMap<NodeId, ClusterNode>| {
        text(&cluster_info(
            &ClusterView::new(&config, nodes, NodeId(1)).unwrap(),
        ))
    };
    let healthy = info(&nodes);
    assert!(healthy.starts_with("cluster_state:ok\r\ncluster_slots_assigned:16384\r\n"));
    assert!(healthy.contains("\r\ncluster_slots_ok:16384\r\ncluster_slots_pfail:0\r\n"));
    assert!(healthy.contains("\r\ncluster_slots_fail:0\r\ncluster_known_nodes:5\r\n"));
    assert!(healthy.contains("\r\ncluster_current_epoch:1\r\ncluster_my_epoch:1\r\n"));
    assert!(healthy.ends_with("\r\n"));
    // One node down: every slot keeps two of its three replicas.
    nodes.get_mut(&NodeId(2)).unwrap().online = false;
    assert!(info(&nodes).starts_with("cluster_state:ok\r\n"));
    // Two down: the slots replicated on both have lost their quorum.
    nodes.get_mut(&NodeId(5)).unwrap().online = false;
    let lost = Slot::all()
        .filter(|&s| {
            let replicas = config.replicas(s);
            replicas.contains(NodeId(2)) && replicas.contains(NodeId(5))
        })
        .count();
    assert!(lost > 0);
    let degraded = info(&nodes);
    assert!(degraded.starts_with("cluster_state:fail\r\n"));
    assert!(degraded.contains(&format!("\r\ncluster_slots_ok:{}\r\n", 16384 - lost)));
    assert!(degraded.contains(&format!("\r\ncluster_slots_fail:{lost}\r\n")));
}
