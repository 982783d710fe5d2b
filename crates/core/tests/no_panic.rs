//! Arbitrary inputs never panic a replica: any message sequence from any node, interleaved
//! with client commands and timer wake-ups.
use std::sync::Arc;

use logless_commands::command::Command;
use logless_commands::value::{Data, Register};
use logless_core::config::ProposerConfig;
use logless_core::ids::{AttemptId, ClientTag, Key, NodeId, ProposerId, ReqId, Round};
use logless_core::message::{Message, PrepareKind};
use logless_core::replica::Replica;
use proptest::prelude::*;

fn attempt() -> impl Strategy<Value = AttemptId> {
    (
        0u16..5,
        0u32..3,
        prop_oneof![Just(0u64), 1u64..5, Just(u64::MAX)],
    )
        .prop_map(|(node, incarnation, seq)| AttemptId {
            proposer: ProposerId {
                node: NodeId(node),
                incarnation,
            },
            seq,
        })
}

fn round() -> impl Strategy<Value = Round> {
    (prop_oneof![0u64..6, Just(u64::MAX)], attempt()).prop_map(|(n, id)| Round { n, id })
}

fn key() -> impl Strategy<Value = Key> {
    (0u8..3).prop_map(|k| Key::new(vec![b'k', k]))
}

fn value() -> impl Strategy<Value = Option<Arc<Register>>> {
    proptest::option::of((-3i64..3).prop_map(|v| {
        Arc::new(Register {
            data: Data::Int(v),
            expires_at_ms: None,
            fence: 0,
        })
    }))
}

/// Request ids are minted attempt ids (sequence number 1 or more).
fn req_id() -> impl Strategy<Value = ReqId> {
    attempt().prop_filter_map("requests are minted", ReqId::new)
}

fn req() -> impl Strategy<Value = Option<ReqId>> {
    proptest::option::of(req_id())
}

fn message() -> impl Strategy<Value = Message> {
    prop_oneof![
        (key(), any::<bool>(), attempt(), round()).prop_map(|(key, read, attempt, known_voted)| {
            Message::Prepare {
                key,
                kind: if read {
                    PrepareKind::Read
                } else {
                    PrepareKind::Write
                },
                attempt,
                known_voted,
            }
        }),
        (key(), round(), round()).prop_map(|(key, round, known_voted)| Message::PaxosPrep {
            key,
            round,
            known_voted
        }),
        (
            key(),
            any::<bool>(),
            round(),
            round(),
            value(),
            (req(), req())
        )
            .prop_map(
                |(key, inc, r_ack, r_voted, value, (req, req_prev))| Message::Ack {
                    key,
                    inc,
                    r_ack,
                    r_voted,
                    value,
                    req,
                    req_prev
                }
            ),
        (key(), round(), value(), req(), req()).prop_map(
            |(key, round, value, req_cur, req_prev)| Message::Vote {
                key,
                round,
                value: value.unwrap_or_default(),
                req_cur,
                req_prev
            }
        ),
        (key(), round()).prop_map(|(key, round)| Message::Voted { key, round }),
        (key(), round(), round()).prop_map(|(key, round, r_ack)| Message::Nack {
            key,
            round,
            r_ack
        }),
        (key(), req_id()).prop_map(|(key, req)| Message::Learned { key, req }),
    ]
}

#[derive(Debug, Clone)]
enum Input {
    Message(u16, Message),
    Command(Key, bool),
    Timer(Key, u64),
    LinkBroken(u16),
}

fn input() -> impl Strategy<Value = Input> {
    prop_oneof![
        6 => (0u16..5, message()).prop_map(|(from, m)| Input::Message(from, m)),
        2 => (key(), any::<bool>()).prop_map(|(k, read)| Input::Command(k, read)),
        2 => (key(), 0u64..40).prop_map(|(k, t)| Input::Timer(k, t)),
        1 => (0u16..5).prop_map(Input::LinkBroken),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]
    #[test]
    fn no_input_sequence_panics_a_replica(inputs in proptest::collection::vec(input(), 1..120)) {
        let config = ProposerConfig::new(vec![NodeId(1), NodeId(2), NodeId(3)]);
        let mut replica = Replica::new(NodeId(1), 1, config, 7, []);
        let mut now_ms = 0;
        for (i, input) in inputs.into_iter().enumerate() {
            now_ms += 1;
            match input {
                Input::Message(from, m) => replica.handle_message(now_ms, NodeId(from), &m),
                Input::Command(k, read) => {
                    let command = if read { Command::Get } else { Command::IncrBy(1) };
                    replica.handle_command(now_ms, ClientTag(i as u64), k, command);
                }
                Input::Timer(k, token) => replica.handle_timer(now_ms + 1_000, &k, token),
                Input::LinkBroken(peer) => replica.handle_link_broken(NodeId(peer)),
            }
            let _ = replica.take_output();
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]
    #[test]
    fn arbitrary_messages_round_trip_through_frames(messages in proptest::collection::vec(message(), 0..12)) {
        let mut buf = Vec::new();
        logless_core::wire::encode_frame(NodeId(2), &messages, &mut buf);
        let (frame, used) = logless_core::wire::decode_frame(&buf, 1 << 20).unwrap().unwrap();
        prop_assert_eq!(used, buf.len());
        prop_assert_eq!(frame.from, NodeId(2));
        prop_assert_eq!(frame.messages, messages);
    }

    #[test]
    fn decoding_arbitrary_bytes_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
        let _ = logless_core::wire::decode_frame(&bytes, 1 << 16);
    }

    #[test]
    fn decoding_damaged_frames_never_panics(
        messages in proptest::collection::vec(message(), 1..6),
        flip in any::<proptest::sample::Index>(),
        bit in 0u8..8,
    ) {
        let mut buf = Vec::new();
        logless_core::wire::encode_frame(NodeId(2), &messages, &mut buf);
        let i = flip.index(buf.len());
        buf[i] ^= 1 << bit;
        let _ = logless_core::wire::decode_frame(&buf, 1 << 20);
    }
}
