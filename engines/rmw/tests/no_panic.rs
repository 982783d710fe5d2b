//! Arbitrary inputs never panic a replica: any message sequence from any node, interleaved
//! with client commands and timer wake-ups.
mod arbitrary;

use arbitrary::{input, message, Input};
use logless_commands::command::Command;
use logless_rmw::config::ProposerConfig;
use logless_rmw::ids::{ClientTag, NodeId};
use logless_rmw::replica::Replica;
use proptest::prelude::*;

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]
    #[test]
    fn no_input_sequence_panics_a_replica(
        inputs in proptest::collection::vec(input(), 1..120),
        thrifty_writes in any::<bool>(),
    ) {
        let mut config = ProposerConfig::new(vec![NodeId(1), NodeId(2), NodeId(3)]);
        config.thrifty_writes = thrifty_writes;
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
        logless_rmw::wire::encode_frame(NodeId(2), &messages, &mut buf);
        let (frame, used) = logless_rmw::wire::decode_frame(&buf, 1 << 20).unwrap().unwrap();
        prop_assert_eq!(used, buf.len());
        prop_assert_eq!(frame.from, NodeId(2));
        prop_assert_eq!(frame.messages, messages);
    }

    #[test]
    fn decoding_arbitrary_bytes_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
        let _ = logless_rmw::wire::decode_frame(&bytes, 1 << 16);
    }

    #[test]
    fn decoding_damaged_frames_never_panics(
        messages in proptest::collection::vec(message(), 1..6),
        flip in any::<proptest::sample::Index>(),
        bit in 0u8..8,
    ) {
        let mut buf = Vec::new();
        logless_rmw::wire::encode_frame(NodeId(2), &messages, &mut buf);
        let i = flip.index(buf.len());
        buf[i] ^= 1 << bit;
        let _ = logless_rmw::wire::decode_frame(&buf, 1 << 20);
    }
}
