//! The per-key engine's acceptor state as a slot store record, compactly (slot file format 3):
//! rounds and ids as varints, the settled case's repeats left out, a plain string value as its
//! bytes alone. Two versions of a register with a 16-byte key and a 16-byte value then fit a
//! 128-byte slot, where the engine's own encoding (two fixed 22-byte rounds, two request ids,
//! the register's general encoding: 84 bytes) needed 256.
//!
//! ```text
//! format    u8      COMPACT_FORMAT
//! flags     u8      bit 0  r_voted is r_ack (left out)
//!                   bit 1  a request (req)
//!                   bit 2  req's proposer is r_voted's (only its sequence number is written)
//!                   bit 3  a previous request (req_prev)
//!                   bit 4  req_prev's proposer is r_voted's
//!                   bit 5  the value is a string without expiry or fence: its bytes end the record
//!                   bit 6  the value is absent without expiry or fence: nothing follows
//! r_ack     n, node, incarnation, seq          varints
//! r_voted   n, node, incarnation, seq          unless bit 0
//! req       [node, incarnation,] seq           if bit 1
//! req_prev  [node, incarnation,] seq           if bit 3
//! value     bit 5: the string's bytes; bit 6: nothing; else `Register::encode`
//! ```
//!
//! Records written before (slot file format 2) hold the engine's encoding
//! ([`AcceptorState::encode`]), whose first byte is its format version, a small number;
//! [`decode`] reads both, and a format 2 file's records are rewritten compactly when it is
//! migrated ([`migrate`]).
use std::sync::Arc;

use bytes::Bytes;
use logless_commands::value::{Data, Register};
use logless_rmw::acceptor::AcceptorState;
use logless_rmw::ids::{AttemptId, NodeId, ProposerId, ReqId, Round};
use logless_storage::varint;
use thiserror::Error;

/// The first byte of a compact record; the engine's encoding starts with its format version.
const COMPACT_FORMAT: u8 = 0xc3;

const VOTED_IS_ACK: u8 = 1;
const REQ: u8 = 1 << 1;
const REQ_SAME_PROPOSER: u8 = 1 << 2;
const REQ_PREV: u8 = 1 << 3;
const REQ_PREV_SAME_PROPOSER: u8 = 1 << 4;
const PLAIN_STRING: u8 = 1 << 5;
const PLAIN_ABSENT: u8 = 1 << 6;
const FLAGS: u8 = (1 << 7) - 1;

/// Why a record is not an acceptor state.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum RecordError {
    /// The record ends inside a field, or a number does not fit its field.
    #[error("truncated or out of range")]
    Truncated,
    /// Flags this code does not know, or that contradict each other.
    #[error("unknown flags {0:#04x}")]
    Flags(u8),
    /// A request id no proposer mints (sequence number 0).
    #[error("a request id with sequence number 0")]
    Request,
    /// Bytes after the end of an absent value.
    #[error("trailing bytes")]
    Trailing,
    /// The value does not decode.
    #[error("value: {0}")]
    Value(String),
    /// A record in the engine's own encoding that does not decode.
    #[error("{0}")]
    Engine(String),
}

/// Appends `state`'s compact record to `out`.
pub fn encode(state: &AcceptorState, out: &mut Vec<u8>) {
    let voter = state.r_voted.id.proposer;
    let mut flags = 0;
    if state.r_voted == state.r_ack {
        flags |= VOTED_IS_ACK;
    }
    if let Some(req) = state.req {
        flags |= REQ;
        if req.attempt().proposer == voter {
            flags |= REQ_SAME_PROPOSER;
        }
    }
    if let Some(prev) = state.req_prev {
        flags |= REQ_PREV;
        if prev.attempt().proposer == voter {
            flags |= REQ_PREV_SAME_PROPOSER;
        }
    }
    let value = &*state.value;
    let plain = value.expires_at_ms.is_none() && value.fence == 0;
    match &value.data {
        Data::Str(_) if plain => flags |= PLAIN_STRING,
        Data::Absent if plain => flags |= PLAIN_ABSENT,
        _ => {}
    }
    out.push(COMPACT_FORMAT);
    out.push(flags);
    put_round(out, state.r_ack);
    if flags & VOTED_IS_ACK == 0 {
        put_round(out, state.r_voted);
    }
    for (req, same) in [
        (state.req, flags & REQ_SAME_PROPOSER != 0),
        (state.req_prev, flags & REQ_PREV_SAME_PROPOSER != 0),
    ] {
        if let Some(req) = req {
            put_attempt(out, req.attempt(), !same);
        }
    }
    match &value.data {
        _ if flags & PLAIN_ABSENT != 0 => {}
        Data::Str(bytes) if flags & PLAIN_STRING != 0 => out.extend_from_slice(bytes),
        _ => value.encode(out),
    }
}

/// Decodes a record written by [`encode`], or by the engine's [`AcceptorState::encode`].
/// Never panics.
pub fn decode(bytes: &[u8]) -> Result<AcceptorState, RecordError> {
    let Some((&COMPACT_FORMAT, rest)) = bytes.split_first() else {
        return AcceptorState::decode(bytes).map_err(|e| RecordError::Engine(e.to_string()));
    };
    let mut r = Reader { bytes: rest };
    let flags = r.byte()?;
    if flags & !FLAGS != 0
        || (flags & PLAIN_STRING != 0 && flags & PLAIN_ABSENT != 0)
        || (flags & REQ == 0 && flags & REQ_SAME_PROPOSER != 0)
        || (flags & REQ_PREV == 0 && flags & REQ_PREV_SAME_PROPOSER != 0)
    {
        return Err(RecordError::Flags(flags));
    }
    let r_ack = r.round()?;
    let r_voted = if flags & VOTED_IS_ACK != 0 {
        r_ack
    } else {
        r.round()?
    };
    let voter = r_voted.id.proposer;
    let mut request = |present: u8, same: u8| -> Result<Option<ReqId>, RecordError> {
        if flags & present == 0 {
            return Ok(None);
        }
        let proposer = if flags & same != 0 {
            voter
        } else {
            r.proposer()?
        };
        let seq = r.varint()?;
        ReqId::new(AttemptId { proposer, seq })
            .map(Some)
            .ok_or(RecordError::Request)
    };
    let req = request(REQ, REQ_SAME_PROPOSER)?;
    let req_prev = request(REQ_PREV, REQ_PREV_SAME_PROPOSER)?;
    let value = if flags & PLAIN_ABSENT != 0 {
        if !r.bytes.is_empty() {
            return Err(RecordError::Trailing);
        }
        Register::default()
    } else if flags & PLAIN_STRING != 0 {
        Register {
            data: Data::Str(Bytes::copy_from_slice(r.bytes)),
            expires_at_ms: None,
            fence: 0,
        }
    } else {
        Register::decode(r.bytes).map_err(|e| RecordError::Value(e.to_string()))?
    };
    Ok(AcceptorState {
        r_ack,
        r_voted,
        value: Arc::new(value),
        req,
        req_prev,
    })
}

/// Rewrites an acceptor state's record of a format 2 slot file for format 3 (the slot store's
/// migration): a state in the engine's encoding becomes compact; a record that does not decode
/// (which the start-up then refuses, as before) is kept as it is.
pub fn migrate(record: &[u8], out: &mut Vec<u8>) {
    match record.first() {
        Some(&COMPACT_FORMAT) | None => out.extend_from_slice(record),
        Some(_) => match AcceptorState::decode(record) {
            Ok(state) => encode(&state, out),
            Err(_) => out.extend_from_slice(record),
        },
    }
}

fn put_round(out: &mut Vec<u8>, round: Round) {
    varint::put(out, round.n);
    put_attempt(out, round.id, true);
}

fn put_attempt(out: &mut Vec<u8>, id: AttemptId, with_proposer: bool) {
    if with_proposer {
        varint::put(out, u64::from(id.proposer.node.0));
        varint::put(out, u64::from(id.proposer.incarnation));
    }
    varint::put(out, id.seq);
}

struct Reader<'a> {
    bytes: &'a [u8],
}

impl Reader<'_> {
    fn byte(&mut self) -> Result<u8, RecordError> {
        let (&byte, rest) = self.bytes.split_first().ok_or(RecordError::Truncated)?;
        self.bytes = rest;
        Ok(byte)
    }

    fn varint(&mut self) -> Result<u64, RecordError> {
        let (value, len) = varint::read(self.bytes).ok_or(RecordError::Truncated)?;
        self.bytes = &self.bytes[len..];
        Ok(value)
    }

    fn proposer(&mut self) -> Result<ProposerId, RecordError> {
        let node = u16::try_from(self.varint()?).map_err(|_| RecordError::Truncated)?;
        let incarnation = u32::try_from(self.varint()?).map_err(|_| RecordError::Truncated)?;
        Ok(ProposerId {
            node: NodeId(node),
            incarnation,
        })
    }

    fn round(&mut self) -> Result<Round, RecordError> {
        let n = self.varint()?;
        let proposer = self.proposer()?;
        let seq = self.varint()?;
        Ok(Round {
            n,
            id: AttemptId { proposer, seq },
        })
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;

    fn attempt(node: u16, incarnation: u32, seq: u64) -> AttemptId {
        AttemptId {
            proposer: ProposerId {
                node: NodeId(node),
                incarnation,
            },
            seq,
        }
    }

    /// A register written once by a proposer, as the space bench leaves 10⁶ of them.
    fn settled(value: &'static str) -> AcceptorState {
        let id = attempt(1, 3, 731_337);
        AcceptorState {
            r_ack: Round { n: 1, id },
            r_voted: Round { n: 1, id },
            value: Arc::new(Register {
                data: Data::Str(value.into()),
                expires_at_ms: None,
                fence: 0,
            }),
            req: ReqId::new(attempt(1, 3, 731_338)),
            req_prev: None,
        }
    }

    fn states() -> Vec<AcceptorState> {
        let far = attempt(u16::MAX, u32::MAX, u64::MAX);
        vec![
            AcceptorState::default(),
            settled("xxxxxxxxxxxxxxxx"),
            settled(""),
            AcceptorState {
                r_ack: Round {
                    n: u64::MAX,
                    id: far,
                },
                ..AcceptorState::default()
            },
            AcceptorState {
                r_ack: Round {
                    n: 9,
                    id: attempt(3, 70_000, 5),
                },
                r_voted: Round {
                    n: 8,
                    id: attempt(2, 1, 1 << 40),
                },
                value: Arc::new(Register {
                    data: Data::Set(BTreeSet::from(["a".into(), "b".into()])),
                    expires_at_ms: Some(1_800_000_000_000),
                    fence: 12,
                }),
                req: ReqId::new(attempt(2, 1, 1 << 40)),
                req_prev: ReqId::new(far),
            },
            AcceptorState {
                req_prev: ReqId::new(attempt(1, 3, 2)),
                ..settled("with a previous request")
            },
            AcceptorState {
                value: Arc::new(Register {
                    data: Data::Str("expiring".into()),
                    expires_at_ms: Some(5),
                    fence: 0,
                }),
                ..settled("")
            },
            AcceptorState {
                value: Arc::new(Register {
                    data: Data::Absent,
                    expires_at_ms: None,
                    fence: 4,
                }),
                ..settled("")
            },
            AcceptorState {
                value: Arc::new(Register {
                    data: Data::Int(-7),
                    expires_at_ms: None,
                    fence: 0,
                }),
                ..settled("")
            },
        ]
    }

    #[test]
    fn states_decode_to_themselves_in_both_encodings() {
        for state in states() {
            let mut compact = Vec::new();
            encode(&state, &mut compact);
            assert_eq!(decode(&compact), Ok(state.clone()), "{compact:?}");
            let mut engine = Vec::new();
            state.encode(&mut engine);
            assert_eq!(decode(&engine), Ok(state.clone()), "the engine's encoding");
            let mut migrated = Vec::new();
            migrate(&engine, &mut migrated);
            assert_eq!(migrated, compact, "migrated to the compact encoding");
            let mut again = Vec::new();
            migrate(&compact, &mut again);
            assert_eq!(again, compact, "a compact record stays as it is");
        }
    }

    /// The space bench's register: a 16-byte key's two versions fit a 128-byte slot with
    /// room to spare (10 bytes of slot header and key length, two version headers of at most
    /// 4 + 3 + 1 bytes at sequence numbers below 2²¹).
    #[test]
    fn a_settled_register_of_16_bytes_takes_27_bytes() {
        let mut record = Vec::new();
        encode(&settled("xxxxxxxxxxxxxxxx"), &mut record);
        assert_eq!(record.len(), 27);
        let mut engine = Vec::new();
        settled("xxxxxxxxxxxxxxxx").encode(&mut engine);
        assert_eq!(engine.len(), 84);
        assert!(10 + 16 + 2 * (8 + record.len()) <= 128);
    }

    #[test]
    fn damaged_records_are_errors_not_panics() {
        for state in states() {
            let mut record = Vec::new();
            encode(&state, &mut record);
            for cut in 0..record.len() {
                // A cut inside a plain string's bytes is a shorter string, not an error.
                let _ = decode(&record[..cut]);
            }
            for at in 0..record.len() {
                for bit in 0..8 {
                    let mut flipped = record.clone();
                    flipped[at] ^= 1 << bit;
                    let _ = decode(&flipped);
                }
            }
        }
        let record = |flags: u8| vec![COMPACT_FORMAT, flags, 0, 0, 0, 0];
        assert_eq!(decode(&record(1 << 7)), Err(RecordError::Flags(1 << 7)));
        let both = PLAIN_STRING | PLAIN_ABSENT;
        assert_eq!(decode(&record(both)), Err(RecordError::Flags(both)));
        assert_eq!(
            decode(&record(REQ_SAME_PROPOSER)),
            Err(RecordError::Flags(REQ_SAME_PROPOSER))
        );
        assert_eq!(
            decode(&record(PLAIN_ABSENT | VOTED_IS_ACK)),
            Ok(AcceptorState::default())
        );
        let mut trailing = record(PLAIN_ABSENT | VOTED_IS_ACK);
        trailing.push(1);
        assert_eq!(decode(&trailing), Err(RecordError::Trailing));
        let mut unminted = record(REQ | REQ_SAME_PROPOSER | VOTED_IS_ACK | PLAIN_ABSENT);
        unminted.push(0);
        assert_eq!(decode(&unminted), Err(RecordError::Request));
        // A node id past u16.
        let wide = vec![
            COMPACT_FORMAT,
            VOTED_IS_ACK | PLAIN_ABSENT,
            0,
            0x80,
            0x80,
            0x04,
            0,
            0,
        ];
        assert_eq!(decode(&wide), Err(RecordError::Truncated));
        assert!(matches!(decode(&[9]), Err(RecordError::Engine(_))));
        assert!(decode(&[]).is_err());
    }
}
