//! Unsigned LEB128 integers: seven bits a byte, low bits first, the high bit set on every
//! byte but the last. Small numbers (sequence numbers, lengths, rounds) take one or two bytes
//! where a fixed-width field takes eight.

/// The most bytes a `u64` takes.
pub const U64_BYTES_MAX: usize = 10;

/// How many bytes `value` takes.
#[inline]
pub fn len(value: u64) -> usize {
    // One byte per started group of seven significant bits, at least one.
    (64 - (value | 1).leading_zeros() as usize).div_ceil(7)
}

/// Appends `value` to `out`.
#[inline]
pub fn put(out: &mut Vec<u8>, mut value: u64) {
    while value >= 0x80 {
        out.push(value as u8 | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
}

/// Writes `value` at the start of `out` (at least [`len`] bytes); returns the bytes written.
#[inline]
pub fn write(out: &mut [u8], mut value: u64) -> usize {
    let mut at = 0;
    while value >= 0x80 {
        out[at] = value as u8 | 0x80;
        value >>= 7;
        at += 1;
    }
    out[at] = value as u8;
    at + 1
}

/// Reads an integer from the start of `bytes`: the value and the bytes it took, or `None` if
/// `bytes` ends inside it, it is longer than [`U64_BYTES_MAX`] or it overflows a `u64`.
/// Overlong encodings (a zero last byte after others) are refused as well, so that every
/// value has one encoding.
#[inline]
pub fn read(bytes: &[u8]) -> Option<(u64, usize)> {
    // Most numbers stored (lengths, sequence numbers, node ids) take one byte.
    match bytes.first() {
        Some(&byte) if byte < 0x80 => return Some((u64::from(byte), 1)),
        _ => {}
    }
    let mut value = 0u64;
    for (i, &byte) in bytes.iter().enumerate().take(U64_BYTES_MAX) {
        let bits = u64::from(byte & 0x7f);
        if i == U64_BYTES_MAX - 1 && bits > 1 {
            return None;
        }
        value |= bits << (7 * i);
        if byte & 0x80 == 0 {
            return (i == 0 || byte != 0).then_some((value, i + 1));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_read_back_in_their_length() {
        let mut values = vec![0, 1, 127, 128, 16_383, 16_384, u64::MAX - 1, u64::MAX];
        values.extend((0..64).map(|shift| 1u64 << shift));
        values.extend((1..64).map(|shift| (1u64 << shift) - 1));
        for value in values {
            let mut out = Vec::new();
            put(&mut out, value);
            assert_eq!(out.len(), len(value), "{value}");
            let mut fixed = [0xaa; U64_BYTES_MAX + 2];
            assert_eq!(write(&mut fixed, value), out.len());
            assert_eq!(&fixed[..out.len()], &out[..]);
            assert_eq!(read(&out), Some((value, out.len())), "{value}");
            out.push(0x55);
            assert_eq!(
                read(&out),
                Some((value, out.len() - 1)),
                "trailing bytes stay"
            );
            out.pop();
            for cut in 0..out.len() {
                assert_eq!(read(&out[..cut]), None, "{value} cut at {cut}");
            }
        }
        assert_eq!(len(127), 1);
        assert_eq!(len(128), 2);
        assert_eq!(len(u64::MAX), U64_BYTES_MAX);
    }

    #[test]
    fn overlong_and_overflowing_encodings_are_refused() {
        assert_eq!(read(&[0x80, 0x00]), None, "zero in two bytes");
        assert_eq!(read(&[0x81, 0x80, 0x00]), None);
        let mut too_big = vec![0xff; 9];
        too_big.push(0x02);
        assert_eq!(read(&too_big), None, "past 64 bits");
        assert_eq!(read(&[0x80; 11]), None, "longer than ten bytes");
    }
}
