//! The compact encoding of commands and replies: a tag byte per variant, integers as LEB128
//! varints, byte strings as a varint length and the bytes. Decoding never panics and never
//! allocates more than the input holds: every length is checked against what is left.
use thiserror::Error;

/// Why bytes do not decode.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum DecodeError {
    /// The input ended inside a value.
    #[error("truncated input")]
    Truncated,
    /// A variant tag that names nothing.
    #[error("unknown tag {0}")]
    UnknownTag(u8),
    /// A varint longer than 64 bits.
    #[error("varint overflows 64 bits")]
    VarintOverflow,
    /// Bytes left after a complete value.
    #[error("{0} trailing bytes")]
    Trailing(usize),
    /// A value outside what its field allows (named by the field).
    #[error("invalid {0}")]
    Invalid(&'static str),
    /// A value (a length, a count, a number) larger than its limit allows.
    #[error("{what} {size} is over its limit of {limit}")]
    TooLarge {
        /// The field.
        what: &'static str,
        /// Its value.
        size: u64,
        /// The limit.
        limit: u64,
    },
}

/// A value with a compact binary form.
pub trait Wire: Sized {
    /// Appends the encoding of `self` to `out`.
    fn encode(&self, out: &mut Vec<u8>);

    /// Reads one value from `reader`.
    fn decode_from(reader: &mut Reader<'_>) -> Result<Self, DecodeError>;

    /// The encoding of `self` as a new buffer.
    fn encode_to_vec(&self) -> Vec<u8> {
        let mut out = Vec::new();
        self.encode(&mut out);
        out
    }

    /// Decodes exactly one value from `bytes` (trailing bytes are an error).
    fn decode(bytes: &[u8]) -> Result<Self, DecodeError> {
        let mut reader = Reader::new(bytes);
        let value = Self::decode_from(&mut reader)?;
        reader.finish()?;
        Ok(value)
    }
}

/// Appends `value` as an unsigned LEB128 varint.
pub fn put_varint(out: &mut Vec<u8>, mut value: u64) {
    while value >= 0x80 {
        out.push((value as u8) | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
}

/// Appends `bytes` with their length in front.
pub fn put_bytes(out: &mut Vec<u8>, bytes: &[u8]) {
    put_varint(out, bytes.len() as u64);
    out.extend_from_slice(bytes);
}

/// The longest error text a reply carries, in bytes.
pub const MESSAGE_BYTES_MAX: usize = 4096;

/// Appends the text of an error reply, cut at [`MESSAGE_BYTES_MAX`] (on a character boundary).
pub fn put_message(out: &mut Vec<u8>, message: &str) {
    let mut end = message.len().min(MESSAGE_BYTES_MAX);
    while !message.is_char_boundary(end) {
        end -= 1;
    }
    put_bytes(out, &message.as_bytes()[..end]);
}

/// A cursor over encoded bytes.
#[derive(Debug)]
pub struct Reader<'a> {
    rest: &'a [u8],
}

impl<'a> Reader<'a> {
    /// A reader at the start of `bytes`.
    pub fn new(bytes: &'a [u8]) -> Reader<'a> {
        Reader { rest: bytes }
    }

    /// One byte.
    pub fn u8(&mut self) -> Result<u8, DecodeError> {
        let (&first, rest) = self.rest.split_first().ok_or(DecodeError::Truncated)?;
        self.rest = rest;
        Ok(first)
    }

    /// An unsigned LEB128 varint.
    pub fn varint(&mut self) -> Result<u64, DecodeError> {
        let mut value = 0u64;
        for shift in (0..64).step_by(7) {
            let byte = self.u8()?;
            let bits = u64::from(byte & 0x7f);
            if shift == 63 && bits > 1 {
                return Err(DecodeError::VarintOverflow);
            }
            value |= bits << shift;
            if byte & 0x80 == 0 {
                return Ok(value);
            }
        }
        Err(DecodeError::VarintOverflow)
    }

    /// A varint that must fit `limit`; `what` names the field in the error.
    pub fn varint_at_most(&mut self, what: &'static str, limit: u64) -> Result<u64, DecodeError> {
        let value = self.varint()?;
        if value > limit {
            return Err(DecodeError::TooLarge {
                what,
                size: value,
                limit,
            });
        }
        Ok(value)
    }

    /// A length-prefixed byte string of at most `limit` bytes; `what` names it in the error.
    pub fn bytes(&mut self, what: &'static str, limit: usize) -> Result<&'a [u8], DecodeError> {
        let len = self.varint_at_most(what, limit as u64)?;
        let len = usize::try_from(len).map_err(|_| DecodeError::Truncated)?;
        if len > self.rest.len() {
            return Err(DecodeError::Truncated);
        }
        let (bytes, rest) = self.rest.split_at(len);
        self.rest = rest;
        Ok(bytes)
    }

    /// A boolean, one byte of 0 or 1.
    pub fn flag(&mut self) -> Result<bool, DecodeError> {
        match self.u8()? {
            0 => Ok(false),
            1 => Ok(true),
            _ => Err(DecodeError::Invalid("flag")),
        }
    }

    /// The text of an error reply ([`put_message`]).
    pub fn message(&mut self) -> Result<String, DecodeError> {
        let bytes = self.bytes("message", MESSAGE_BYTES_MAX)?;
        String::from_utf8(bytes.to_vec()).map_err(|_| DecodeError::Invalid("message"))
    }

    /// Everything left, which the reader then has read (for a value that is the rest of its
    /// encoding, such as another service's command carried untouched).
    pub fn rest(&mut self) -> &'a [u8] {
        std::mem::take(&mut self.rest)
    }

    /// Checks that nothing is left.
    pub fn finish(self) -> Result<(), DecodeError> {
        match self.rest.len() {
            0 => Ok(()),
            left => Err(DecodeError::Trailing(left)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn varints_round_trip(value: u64) {
            let mut out = Vec::new();
            put_varint(&mut out, value);
            let mut reader = Reader::new(&out);
            prop_assert_eq!(reader.varint(), Ok(value));
            prop_assert_eq!(reader.finish(), Ok(()));
        }

        #[test]
        fn garbage_never_panics(bytes: Vec<u8>) {
            let mut reader = Reader::new(&bytes);
            let _ = reader.varint().and_then(|_| reader.bytes("field", 16));
        }
    }

    #[test]
    fn an_eleven_byte_varint_overflows() {
        let bytes = [0xff; 11];
        assert_eq!(
            Reader::new(&bytes).varint(),
            Err(DecodeError::VarintOverflow)
        );
        let high = [0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02];
        assert_eq!(
            Reader::new(&high).varint(),
            Err(DecodeError::VarintOverflow)
        );
    }

    #[test]
    fn a_length_over_its_limit_is_refused_before_reading() {
        let mut out = Vec::new();
        put_varint(&mut out, 1 << 40);
        assert_eq!(
            Reader::new(&out).bytes("value", 16),
            Err(DecodeError::TooLarge {
                what: "value",
                size: 1 << 40,
                limit: 16
            })
        );
    }

    #[test]
    fn a_long_message_is_cut_on_a_character_boundary() {
        let mut out = Vec::new();
        let long = "é".repeat(MESSAGE_BYTES_MAX);
        put_message(&mut out, &long);
        let message = Reader::new(&out).message().unwrap();
        assert_eq!(message.len(), MESSAGE_BYTES_MAX);
        assert!(long.starts_with(&message));
    }

    #[test]
    fn a_short_string_is_truncated() {
        assert_eq!(
            Reader::new(&[3, b'a']).bytes("key", 16),
            Err(DecodeError::Truncated)
        );
    }
}
