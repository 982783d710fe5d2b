//! The compressed frame of a request or a reply: the plain length as a varint, then the lz4
//! block (length-prefixed). The plain length is checked against [`PLAIN_BYTES_MAX`] before
//! anything is allocated, and the block must expand to exactly that length.
use logless_service::wire::{put_bytes, put_varint};
use logless_service::{DecodeError, Reader};

/// The largest plain request or reply: a write or read of [`crate::command::IO_BYTES_MAX`], or
/// a listing of [`crate::command::DIR_ENTRIES_MAX`] names of 255 bytes, with room to spare.
pub const PLAIN_BYTES_MAX: usize = 4 << 20;

/// The largest lz4 block of [`PLAIN_BYTES_MAX`] plain bytes (incompressible input grows by
/// 1/255 and a few bytes).
const COMPRESSED_BYTES_MAX: usize = PLAIN_BYTES_MAX + PLAIN_BYTES_MAX / 255 + 16;

/// Appends the frame of `plain` to `out`. A frame over [`PLAIN_BYTES_MAX`] is written all the
/// same, and refused where it is decoded, with an error that names the limit.
pub fn compress(plain: &[u8], out: &mut Vec<u8>) {
    put_varint(out, plain.len() as u64);
    put_bytes(out, &lz4_flex::block::compress(plain));
}

/// Reads one frame and decodes its plain bytes with `decode_plain`, which must use them all.
pub fn decompress<T>(
    reader: &mut Reader<'_>,
    decode_plain: impl FnOnce(&mut Reader<'_>) -> Result<T, DecodeError>,
) -> Result<T, DecodeError> {
    let plain_len = reader.varint_at_most("frame", PLAIN_BYTES_MAX as u64)?;
    let plain_len = usize::try_from(plain_len).expect("below PLAIN_BYTES_MAX");
    let block = reader.bytes("compressed frame", COMPRESSED_BYTES_MAX)?;
    let plain = lz4_flex::block::decompress(block, plain_len)
        .map_err(|_| DecodeError::Invalid("lz4 block"))?;
    if plain.len() != plain_len {
        return Err(DecodeError::Invalid("lz4 block length"));
    }
    let mut plain_reader = Reader::new(&plain);
    let value = decode_plain(&mut plain_reader)?;
    plain_reader.finish()?;
    Ok(value)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn raw(reader: &mut Reader<'_>) -> Result<Vec<u8>, DecodeError> {
        reader.bytes("raw", PLAIN_BYTES_MAX).map(<[u8]>::to_vec)
    }

    proptest! {
        #[test]
        fn frames_round_trip(bytes: Vec<u8>) {
            let mut plain = Vec::new();
            put_bytes(&mut plain, &bytes);
            let mut out = Vec::new();
            compress(&plain, &mut out);
            let mut reader = Reader::new(&out);
            prop_assert_eq!(decompress(&mut reader, raw), Ok(bytes));
            prop_assert_eq!(reader.finish(), Ok(()));
        }

        #[test]
        fn garbage_never_panics(bytes: Vec<u8>) {
            let _ = decompress(&mut Reader::new(&bytes), raw);
        }
    }

    #[test]
    fn a_frame_over_the_limit_is_refused_where_it_is_decoded() {
        let mut out = Vec::new();
        compress(&vec![0; PLAIN_BYTES_MAX + 1], &mut out);
        assert!(matches!(
            decompress(&mut Reader::new(&out), raw),
            Err(DecodeError::TooLarge { what: "frame", .. })
        ));
    }

    #[test]
    fn repetitive_data_shrinks() {
        let mut plain = Vec::new();
        put_bytes(&mut plain, &[b'a'; 1024]);
        let mut out = Vec::new();
        compress(&plain, &mut out);
        assert!(out.len() < 64, "{} bytes", out.len());
    }

    #[test]
    fn a_block_shorter_than_its_declared_length_is_refused() {
        let mut out = Vec::new();
        put_varint(&mut out, 10);
        put_bytes(&mut out, &lz4_flex::block::compress(b"short"));
        assert_eq!(
            decompress(&mut Reader::new(&out), raw),
            Err(DecodeError::Invalid("lz4 block length"))
        );
    }
}
