//! The wire encoding round-trips every message, and no byte string panics the decoder.
use bytes::Bytes;
use logless_multipaxos::ids::{ClientId, Instance, RequestSeq, View};
use logless_multipaxos::message::{Batch, ClientTable, Message, PromisedEntry, Request, Snapshot};
use logless_multipaxos::wire::{decode, encode};
use proptest::prelude::*;

fn bytes() -> impl Strategy<Value = Bytes> {
    proptest::collection::vec(any::<u8>(), 0..12).prop_map(Bytes::from)
}

fn request() -> impl Strategy<Value = Request> {
    (0u64..4, any::<u64>(), bytes()).prop_map(|(client, seq, payload)| Request {
        client: ClientId(client),
        seq: RequestSeq(seq),
        payload,
    })
}

fn batch() -> impl Strategy<Value = Batch> {
    proptest::collection::vec(request(), 0..4).prop_map(Batch::new)
}

fn snapshot() -> impl Strategy<Value = Snapshot> {
    let clients = proptest::collection::btree_map(
        any::<u64>().prop_map(ClientId),
        (any::<u64>().prop_map(RequestSeq), bytes()),
        0..4,
    );
    (any::<u64>(), bytes(), clients).prop_map(|(next, state, clients): (_, _, ClientTable)| {
        Snapshot {
            next_instance: Instance(next),
            state,
            clients,
        }
    })
}

fn entry() -> impl Strategy<Value = (Instance, PromisedEntry)> {
    let kind = prop_oneof![
        (any::<u64>(), batch()).prop_map(|(v, batch)| PromisedEntry::Voted {
            view: View(v),
            batch
        }),
        batch().prop_map(PromisedEntry::Decided),
    ];
    (any::<u64>().prop_map(Instance), kind)
}

fn message() -> impl Strategy<Value = Message> {
    let view = || any::<u64>().prop_map(View);
    let instance = || any::<u64>().prop_map(Instance);
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
        (instance(), instance()).prop_map(|(from, to)| Message::CatchUpQuery { from, to }),
        (
            view(),
            proptest::option::of(snapshot()),
            proptest::collection::vec((instance(), batch()), 0..4)
        )
            .prop_map(|(view, snapshot, decided)| Message::CatchUpResponse {
                view,
                snapshot,
                decided
            }),
        proptest::collection::vec(request(), 0..4)
            .prop_map(|requests| Message::Forward { requests }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn every_message_round_trips(message in message()) {
        let mut out = Vec::new();
        encode(&message, &mut out);
        prop_assert_eq!(decode(&out), Ok(message));
    }

    #[test]
    fn arbitrary_bytes_never_panic_the_decoder(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
        let _ = decode(&bytes);
    }

    #[test]
    fn damaged_messages_never_panic_the_decoder(
        message in message(),
        flip in any::<proptest::sample::Index>(),
        bit in 0u8..8,
        cut in any::<proptest::sample::Index>(),
    ) {
        let mut out = Vec::new();
        encode(&message, &mut out);
        let i = flip.index(out.len());
        out[i] ^= 1 << bit;
        let _ = decode(&out);
        let _ = decode(&out[..cut.index(out.len())]);
    }
}
