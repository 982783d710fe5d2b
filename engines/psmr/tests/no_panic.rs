//! No bytes panic the decoders of the groups' messages and records.
use logless_psmr::wire::{decode, decode_record};
use proptest::prelude::*;

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2_000))]

    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
        let _ = decode(&bytes);
        let _ = decode_record(&bytes);
    }

    #[test]
    fn arbitrary_tails_behind_a_valid_group_never_panic(
        group in any::<u16>(),
        tail in proptest::collection::vec(any::<u8>(), 0..64),
    ) {
        let mut bytes = group.to_le_bytes().to_vec();
        bytes.extend(tail);
        let _ = decode(&bytes);
        let _ = decode_record(&bytes);
    }
}
