//! The byte form of a configuration, for the register that holds it and for the messages that
//! carry it between nodes.
//!
//! Little-endian: a version byte (1), the epoch (`u64`), the replication degree (`u8`), the
//! number of segments (`u16`, [`SEGMENTS`]) and then the owner of each segment in ring order
//! (`u16` each): 2,060 bytes. Decoding checks every field and builds the configuration through
//! [`Configuration::from_owners`], so bytes from the network never make an invalid
//! configuration and never panic.
use crate::config::{Configuration, Epoch, NodeId, PlacementError, Replication};
use crate::ring::SEGMENTS;

/// The version of the byte form written by [`encode`].
const VERSION: u8 = 1;

/// The length of the fixed part before the owners.
const HEADER_BYTES: usize = 1 + 8 + 1 + 2;

/// The length of an encoded configuration.
pub const ENCODED_BYTES: usize = HEADER_BYTES + 2 * SEGMENTS as usize;

/// Why bytes are not a configuration.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// Not [`ENCODED_BYTES`] long.
    #[error("an encoded configuration is {ENCODED_BYTES} bytes, not {0}")]
    Length(usize),
    /// A version this build does not read.
    #[error("configuration encoding version {0} is not supported (this build reads {VERSION})")]
    Version(u8),
    /// A segment count other than [`SEGMENTS`].
    #[error("the configuration has {0} segments; this build has {SEGMENTS}")]
    Segments(u16),
    /// Well-formed bytes of an invalid configuration.
    #[error(transparent)]
    Invalid(#[from] PlacementError),
}

/// The byte form of `config`.
pub fn encode(config: &Configuration) -> Vec<u8> {
    let mut out = Vec::with_capacity(ENCODED_BYTES);
    out.push(VERSION);
    out.extend_from_slice(&config.epoch().0.to_le_bytes());
    out.push(config.replication().get());
    out.extend_from_slice(&SEGMENTS.to_le_bytes());
    for owner in config.owners() {
        out.extend_from_slice(&owner.0.to_le_bytes());
    }
    debug_assert_eq!(out.len(), ENCODED_BYTES);
    out
}

/// The configuration `bytes` encode.
pub fn decode(bytes: &[u8]) -> Result<Configuration, DecodeError> {
    if bytes.len() != ENCODED_BYTES {
        return Err(DecodeError::Length(bytes.len()));
    }
    let (header, owners) = bytes.split_at(HEADER_BYTES);
    if header[0] != VERSION {
        return Err(DecodeError::Version(header[0]));
    }
    let epoch = Epoch(u64::from_le_bytes(
        header[1..9].try_into().expect("eight bytes"),
    ));
    let replication = Replication::new(header[9])?;
    let segments = u16::from_le_bytes([header[10], header[11]]);
    if segments != SEGMENTS {
        return Err(DecodeError::Segments(segments));
    }
    let owners = owners
        .chunks_exact(2)
        .map(|pair| NodeId(u16::from_le_bytes([pair[0], pair[1]])))
        .collect();
    Ok(Configuration::from_owners(epoch, replication, owners)?)
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    proptest! {
        #[test]
        fn any_bytes_decode_or_are_refused(bytes in proptest::collection::vec(any::<u8>(), 0..64), owners in proptest::collection::vec(0u16..12, SEGMENTS as usize)) {
            // Short garbage, and well-formed headers over random owners.
            let _ = decode(&bytes);
            let mut framed = vec![VERSION, 3, 0, 0, 0, 0, 0, 0, 0, bytes.first().map_or(3, |b| b % 8)];
            framed.extend_from_slice(&SEGMENTS.to_le_bytes());
            for owner in owners {
                framed.extend_from_slice(&owner.to_le_bytes());
            }
            if let Ok(config) = decode(&framed) {
                prop_assert_eq!(encode(&config), framed);
            }
        }
    }

    fn ring() -> Configuration {
        let nodes: Vec<NodeId> = (1..=5).map(NodeId).collect();
        Configuration::balanced(&nodes, Replication::new(5).unwrap())
            .unwrap()
            .with_node_added(NodeId(7))
            .unwrap()
    }

    #[test]
    fn configurations_round_trip() {
        let config = ring();
        let bytes = encode(&config);
        assert_eq!(bytes.len(), ENCODED_BYTES);
        assert_eq!(&bytes[..12], &[1, 2, 0, 0, 0, 0, 0, 0, 0, 5, 0, 4]);
        assert_eq!(decode(&bytes), Ok(config));
    }

    #[test]
    fn bad_bytes_are_refused_with_the_reason() {
        let good = encode(&ring());
        assert_eq!(
            decode(&good[1..]),
            Err(DecodeError::Length(ENCODED_BYTES - 1))
        );
        let mut bad = good.clone();
        bad[0] = 2;
        assert_eq!(decode(&bad), Err(DecodeError::Version(2)));
        let mut bad = good.clone();
        bad[9] = 4;
        assert_eq!(
            decode(&bad),
            Err(DecodeError::Invalid(PlacementError::Replication(4)))
        );
        let mut bad = good.clone();
        bad[11] = 8;
        assert_eq!(decode(&bad), Err(DecodeError::Segments(2048)));
        // Every segment owned by one node: fewer nodes than replicas.
        let mut bad = good;
        for pair in bad[HEADER_BYTES..].chunks_exact_mut(2) {
            pair.copy_from_slice(&[1, 0]);
        }
        assert_eq!(
            decode(&bad),
            Err(DecodeError::Invalid(PlacementError::TooFewNodes {
                replication: 5,
                nodes: 1
            }))
        );
    }
}
