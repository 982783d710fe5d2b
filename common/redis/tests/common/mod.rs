//! Helpers of the session and cluster tests: requests from words, reply values, and the
//! client addresses of a ring's nodes.
#![allow(dead_code)]
use std::collections::BTreeMap;

use bytes::Bytes;
use logless_placement::NodeId;
use logless_redis::cluster::ClusterNode;
use logless_redis::resp::Value;
use logless_redis::session::{Session, Step};

pub fn args(words: &[&str]) -> Vec<Bytes> {
    words
        .iter()
        .map(|w| Bytes::copy_from_slice(w.as_bytes()))
        .collect()
}

pub fn handle(session: &mut Session, words: &[&str]) -> Step {
    session.handle(&args(words))
}

pub fn reply(session: &mut Session, words: &[&str]) -> Value {
    match handle(session, words) {
        Step::Reply(value) => value,
        other => panic!("{words:?} gave {other:?}, not a reply"),
    }
}

pub fn error(text: &str) -> Value {
    Value::Error(text.to_owned())
}

pub fn simple(text: &str) -> Value {
    Value::Simple(text.to_owned())
}

pub fn bulk(text: &str) -> Value {
    Value::Bulk(Bytes::copy_from_slice(text.as_bytes()))
}

/// Nodes 1 to `n`, node `i` at `127.0.0.1:7000+i` with bus port `17000+i`, all online.
pub fn addresses(n: u16) -> BTreeMap<NodeId, ClusterNode> {
    (1..=n)
        .map(|i| {
            let node = ClusterNode {
                ip: "127.0.0.1".to_owned(),
                port: 7000 + i,
                bus_port: 17000 + i,
                hostname: None,
                online: true,
            };
            (NodeId(i), node)
        })
        .collect()
}
