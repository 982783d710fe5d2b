//! The wire encoding round-trips every message, and no byte string panics the decoder.
mod arbitrary;

use arbitrary::message;
use logless_multipaxos::ids::Epoch;
use logless_multipaxos::wire::{decode, decode_in_epoch, encode, encode_in_epoch};
use proptest::prelude::*;

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn every_message_round_trips(message in message()) {
        let mut out = Vec::new();
        encode(&message, &mut out);
        prop_assert_eq!(decode(&out), Ok(message));
    }

    #[test]
    fn every_message_round_trips_with_its_epoch(message in message(), epoch in any::<u64>()) {
        let mut out = Vec::new();
        encode_in_epoch(Epoch(epoch), &message, &mut out);
        prop_assert_eq!(decode_in_epoch(&out), Ok((Epoch(epoch), message)));
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
        let _ = decode_in_epoch(&out);
        let _ = decode_in_epoch(&out[..cut.index(out.len())]);
    }
}
