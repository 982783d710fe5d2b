//! Strategies for arbitrary messages and requests, shared by the property tests.
use bytes::Bytes;
use logless_multipaxos::ids::{ClientId, Epoch, Instance, RequestSeq, View};
use logless_multipaxos::message::{
    Batch, ChunkCursor, ClientTable, Message, PromisedEntry, Request, Snapshot, SnapshotChunk,
};
use proptest::prelude::*;

/// Mostly small numbers, which name views and instances replicas care about, sometimes any,
/// sometimes the largest (where arithmetic overflows).
pub fn number() -> impl Strategy<Value = u64> {
    prop_oneof![8 => 0u64..12, 1 => any::<u64>(), 1 => u64::MAX - 2..=u64::MAX]
}

pub fn bytes() -> impl Strategy<Value = Bytes> {
    proptest::collection::vec(any::<u8>(), 0..12).prop_map(Bytes::from)
}

pub fn request() -> impl Strategy<Value = Request> {
    (0u64..4, number(), bytes()).prop_map(|(client, seq, payload)| Request {
        client: ClientId(client),
        seq: RequestSeq(seq),
        payload,
    })
}

pub fn batch() -> impl Strategy<Value = Batch> {
    (number(), proptest::collection::vec(request(), 0..4))
        .prop_map(|(stamp, requests)| Batch::stamped(stamp, requests))
}

pub fn snapshot() -> impl Strategy<Value = Snapshot> {
    let clients = proptest::collection::btree_map(
        number().prop_map(ClientId),
        (number().prop_map(RequestSeq), bytes()),
        0..4,
    );
    (number(), number(), bytes(), clients).prop_map(
        |(next, stamp_ms, state, clients): (_, _, _, ClientTable)| Snapshot {
            next_instance: Instance(next),
            stamp_ms,
            state,
            clients,
        },
    )
}

/// A piece of an arbitrary snapshot, cut as a replica cuts one (the decoder refuses pieces
/// that overrun their state).
pub fn chunk() -> impl Strategy<Value = SnapshotChunk> {
    (snapshot(), 0u64..16, 1usize..8)
        .prop_map(|(snapshot, offset, bytes)| SnapshotChunk::cut(&snapshot, offset, bytes))
}

pub fn entry() -> impl Strategy<Value = (Instance, PromisedEntry)> {
    let kind = prop_oneof![
        (number(), batch()).prop_map(|(v, batch)| PromisedEntry::Voted {
            view: View(v),
            batch
        }),
        batch().prop_map(PromisedEntry::Decided),
    ];
    (number().prop_map(Instance), kind)
}

pub fn message() -> impl Strategy<Value = Message> {
    let view = || number().prop_map(View);
    let instance = || number().prop_map(Instance);
    prop_oneof![
        (view(), instance()).prop_map(|(view, first_undecided)| Message::Prepare {
            view,
            first_undecided
        }),
        (view(), instance(), proptest::collection::vec(entry(), 0..4)).prop_map(
            |(view, log_start, entries)| Message::Promise {
                view,
                log_start,
                entries
            }
        ),
        (view(), instance(), batch()).prop_map(|(view, instance, batch)| Message::Propose {
            view,
            instance,
            batch
        }),
        (view(), instance()).prop_map(|(view, instance)| Message::Accept { view, instance }),
        (view(), instance()).prop_map(|(view, first_undecided)| Message::Alive {
            view,
            first_undecided
        }),
        (
            instance(),
            instance(),
            proptest::option::of((instance(), number()))
        )
            .prop_map(|(from, to, cursor)| Message::CatchUpQuery {
                from,
                to,
                snapshot: cursor.map(|(next_instance, offset)| ChunkCursor {
                    next_instance,
                    offset
                }),
            }),
        (
            view(),
            proptest::option::of(chunk()),
            proptest::collection::vec((instance(), batch()), 0..4)
        )
            .prop_map(|(view, snapshot, decided)| Message::CatchUpResponse {
                view,
                snapshot,
                decided
            }),
        proptest::collection::vec(request(), 0..4)
            .prop_map(|requests| Message::Forward { requests }),
        number().prop_map(|e| Message::Recovery { epoch: Epoch(e) }),
        (number(), view(), any::<bool>(), instance()).prop_map(
            |(e, view, leading, decided_below)| Message::RecoveryAnswer {
                epoch: Epoch(e),
                view,
                leading,
                decided_below,
            }
        ),
    ]
}
