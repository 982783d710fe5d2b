//! `Replica::scan_states` and `Replica::find_state` over a replica's acceptor states.
use std::collections::BTreeSet;
use std::sync::Arc;

use bytes::Bytes;
use logless_commands::value::{Data, Register};
use logless_rmw::acceptor::AcceptorState;
use logless_rmw::config::ProposerConfig;
use logless_rmw::ids::{Key, NodeId};
use logless_rmw::replica::Replica;

fn state(value: &str) -> AcceptorState {
    AcceptorState {
        value: Arc::new(Register {
            data: Data::Str(Bytes::from(value.to_owned())),
            ..Register::default()
        }),
        ..AcceptorState::default()
    }
}

fn replica(keys: usize) -> Replica {
    let recovered = (0..keys).map(|i| (Key::new(format!("key:{i}")), state(&i.to_string())));
    Replica::new(
        NodeId(1),
        1,
        ProposerConfig::new(vec![NodeId(1), NodeId(2), NodeId(3)]),
        7,
        recovered,
    )
}

#[test]
fn a_scan_visits_every_state_of_a_replica() {
    let replica = replica(500);
    let mut seen = BTreeSet::new();
    let mut cursor = 0;
    let mut calls = 0;
    loop {
        let (next, states) = replica.scan_states(cursor, 16);
        assert!(states.len() <= 16);
        for (key, state) in states {
            assert_eq!(replica.acceptor_state(key), Some(state));
            assert!(seen.insert(key.as_bytes().to_vec()), "returned once");
        }
        calls += 1;
        if next == 0 {
            break;
        }
        cursor = next;
    }
    assert_eq!(seen.len(), 500);
    assert!(calls >= 500 / 16, "the count bounds each call");
}

#[test]
fn find_state_finds_a_wanted_state_from_any_seed() {
    let replica = replica(50);
    for seed in [0, 3, 99, u64::MAX] {
        let (key, _) = replica
            .find_state(seed, |s| *s == state("42"))
            .expect("there is one");
        assert_eq!(key.as_bytes(), b"key:42");
    }
    assert!(replica.find_state(1, |s| *s == state("x")).is_none());
    assert!(Replica::new(
        NodeId(1),
        1,
        ProposerConfig::new(vec![NodeId(1)]),
        7,
        Vec::new()
    )
    .find_state(1, |_| true)
    .is_none());
}
