//! A shard store written by the slot file format 2 with the engine's own state encoding
//! (`tests/fixtures/shard-0.slots-v2`, made by commit 945d0ad) opens, migrated.
use std::collections::BTreeSet;
use std::sync::Arc;

use logless_commands::value::{Data, Register};
use logless_node::store::ShardStore;
use logless_rmw::acceptor::AcceptorState;
use logless_rmw::ids::{AttemptId, Key, NodeId, ProposerId, ReqId, Round};
use logless_storage::Durability;

fn attempt(node: u16, incarnation: u32, seq: u64) -> AttemptId {
    AttemptId {
        proposer: ProposerId {
            node: NodeId(node),
            incarnation,
        },
        seq,
    }
}

/// The registers of the fixture: every kind of state and value, short and long keys.
fn fixture_states() -> Vec<(Key, AcceptorState)> {
    let settled = |i: u64, data: Data| {
        let id = attempt(1, 2, 1000 + i);
        AcceptorState {
            r_ack: Round { n: 1, id },
            r_voted: Round { n: 1, id },
            value: Arc::new(Register {
                data,
                expires_at_ms: None,
                fence: 0,
            }),
            req: ReqId::new(id),
            req_prev: None,
        }
    };
    let mut states = vec![
        (
            Key::new("key:000000000000"),
            settled(0, Data::Str("xxxxxxxxxxxxxxxx".into())),
        ),
        (Key::new("key:000000000001"), settled(1, Data::Int(-42))),
        (Key::new("empty"), AcceptorState::default()),
        (
            Key::new("promised"),
            AcceptorState {
                r_ack: Round {
                    n: u64::MAX - 3,
                    id: attempt(u16::MAX, u32::MAX, u64::MAX),
                },
                ..AcceptorState::default()
            },
        ),
        (
            Key::new("expiring and fenced"),
            AcceptorState {
                r_ack: Round {
                    n: 9,
                    id: attempt(3, 70_000, 5),
                },
                r_voted: Round {
                    n: 8,
                    id: attempt(2, 1, 1 << 40),
                },
                value: Arc::new(Register {
                    data: Data::Set(BTreeSet::from(["a".into(), "b".into()])),
                    expires_at_ms: Some(1_800_000_000_000),
                    fence: 12,
                }),
                req: ReqId::new(attempt(2, 1, 1 << 40)),
                req_prev: ReqId::new(attempt(3, 4, 99)),
            },
        ),
        (
            Key::from_slice(&[b'k'; 300]),
            settled(5, Data::Str(vec![7u8; 3000].into())),
        ),
    ];
    for i in 10..40 {
        states.push((
            Key::new(format!("key:{i:012}")),
            settled(i, Data::Str(format!("value {i:010}").into())),
        ));
    }
    states
}

fn floor() -> Round {
    Round {
        n: 77,
        id: attempt(2, 3, 4),
    }
}

fn options() -> logless_storage::StoreOptions {
    let mut options = logless_node::store::store_options(Durability::Mmap, 4096);
    options.append_chunk_bytes = 0;
    options
}

/// What the fixture's writer did: a register written small and then moved to a larger slot,
/// a register written and removed, then every state of [`fixture_states`] and the round floor.
#[test]
fn a_format_2_store_opens_migrated_with_every_state_and_its_floor() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("shard-0.slots");
    std::fs::write(&path, include_bytes!("fixtures/shard-0.slots-v2")).unwrap();
    let mut expected = fixture_states();
    expected.sort_by(|a, b| a.0.cmp(&b.0));
    for _ in 0..2 {
        let (store, mut states) = ShardStore::open(dir.path(), 0, options()).unwrap();
        states.sort_by(|a, b| a.0.cmp(&b.0));
        assert_eq!(states, expected);
        assert_eq!(store.round_floor(), floor());
        assert_eq!(store.registers(), expected.len());
    }
    let format = u32::from_le_bytes(std::fs::read(&path).unwrap()[8..12].try_into().unwrap());
    assert_eq!(format, logless_storage::slot_store::FORMAT_VERSION);
    // The states were rewritten compactly: a settled register of 16 bytes fits the smallest
    // slot, where format 2 needed two of them.
    let (slots, _) = logless_storage::SlotStore::open(&path, options()).unwrap();
    let record = slots.get(b"key:000000000000").unwrap();
    assert!(record.len() < 32, "{record:?}");
    let floor_key = logless_node::store::ROUND_FLOOR_KEY;
    assert_eq!(
        slots.get(&floor_key).map(<[u8]>::len),
        Some(23),
        "the floor as it was"
    );
    let (a, b) = (
        slots.slot_offset(b"key:000000000010").unwrap(),
        slots.slot_offset(b"key:000000000011").unwrap(),
    );
    assert_eq!(a.abs_diff(b), 128, "neighbours in 128-byte slots");
}
