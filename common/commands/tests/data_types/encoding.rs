//! The encoding of the new kinds by fixed bytes: values on disk must keep decoding. (Round
//! trips of every kind and decoding damaged bytes are property tests next to the encoding.)
use logless_commands::value::{Data, DecodeError, Register};

use crate::support::*;

fn encode(reg: &Register) -> Vec<u8> {
    let mut out = Vec::new();
    reg.encode(&mut out);
    assert_eq!(out.len(), reg.encoded_len());
    out
}

#[test]
fn the_new_kinds_have_fixed_bytes() {
    // Version 2, no flags, then the tag and the payload.
    let h = hash(&[("f", "v")]);
    assert_eq!(
        encode(&h),
        [2, 0, 5, 1, 0, 0, 0, 1, 0, 0, 0, b'f', 1, 0, 0, 0, b'v']
    );
    let l = list(&["b", "a"]);
    assert_eq!(
        encode(&l),
        [2, 0, 6, 2, 0, 0, 0, 1, 0, 0, 0, b'b', 1, 0, 0, 0, b'a']
    );
    let z = zset(&[(1.5, "m")]);
    let mut expected = vec![2, 0, 7, 1, 0, 0, 0, 1, 0, 0, 0, b'm'];
    expected.extend_from_slice(&1.5f64.to_bits().to_le_bytes());
    assert_eq!(encode(&z), expected);
    for reg in [h, l, z] {
        assert_eq!(Register::decode(&encode(&reg)), Ok(reg));
    }
}

#[test]
fn the_existing_kinds_keep_their_bytes() {
    // Bytes written before the new kinds existed decode to the same registers.
    assert_eq!(
        Register::decode(&[2, 0, 1, 2, 0, 0, 0, b'h', b'i']),
        Ok(string("hi"))
    );
    let mut counter = vec![2, 0, 2];
    counter.extend_from_slice(&(-3i64).to_le_bytes());
    assert_eq!(
        Register::decode(&counter),
        Ok(Register {
            data: Data::Int(-3),
            ..Register::default()
        })
    );
    assert_eq!(
        Register::decode(&[2, 0, 3, 2, 0, 0, 0, 1, 0, 0, 0, b'a', 1, 0, 0, 0, b'b']),
        Ok(set(&["a", "b"]))
    );
    assert_eq!(
        Register::decode(&[1, 0, 0]),
        Ok(Register::default()),
        "version 1"
    );
}

#[test]
fn non_canonical_collections_are_refused() {
    let unordered = [
        2, 0, 5, 2, 0, 0, 0, 1, 0, 0, 0, b'b', 0, 0, 0, 0, 1, 0, 0, 0, b'a', 0, 0, 0, 0,
    ];
    assert_eq!(Register::decode(&unordered), Err(DecodeError::UnorderedSet));
    let repeated = [
        2, 0, 5, 2, 0, 0, 0, 1, 0, 0, 0, b'a', 0, 0, 0, 0, 1, 0, 0, 0, b'a', 0, 0, 0, 0,
    ];
    assert_eq!(Register::decode(&repeated), Err(DecodeError::UnorderedSet));
    for bad in [f64::NAN, -0.0] {
        let mut z = vec![2, 0, 7, 1, 0, 0, 0, 1, 0, 0, 0, b'm'];
        z.extend_from_slice(&bad.to_bits().to_le_bytes());
        assert_eq!(
            Register::decode(&z),
            Err(DecodeError::InvalidScore),
            "{bad}"
        );
    }
    // A count far beyond the bytes present is truncation, found without allocating for it.
    assert_eq!(
        Register::decode(&[2, 0, 6, 255, 255, 255, 255]),
        Err(DecodeError::Truncated)
    );
}
