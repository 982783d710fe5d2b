//! The peer wire format: frames of protocol messages between replicas.
//!
//! A frame carries any number of messages from one node (messages of many registers to the same
//! peer are coalesced into one write):
//!
//! ```text
//! length   u32 LE   bytes after this field (header + payload)
//! version  u8       WIRE_VERSION
//! from     u16 LE   the sending node
//! count    u32 LE   messages in the payload
//! crc32c   u32 LE   of the payload
//! payload           the messages, each: tag u8, then its fields (see `put_message`)
//! ```
//!
//! A PREPARE, PAXOS_PREP or VOTE sent with a placement (a ring's stage, [`StageId`]) is
//! prefixed with the tag STAGED and the stage id (u32 LE, never 0); without one it is written
//! exactly as in version 6, so that a cluster without a ring sends the same message bytes.
//!
//! Decoding never trusts a length for allocation beyond the frame limit, never panics, and
//! reports every malformation as a typed error, after which the connection is dropped.
use std::sync::Arc;

use logless_commands::value::Register;
use thiserror::Error;

use crate::codec::{put_attempt, put_req, put_req_id, put_round, CodecError, Reader};
use crate::ids::{Key, NodeId};
use crate::message::{Message, PrepareKind};
use crate::placement::StageId;

/// The version this code writes and accepts.
/// Version 2 added `req_prev` to ACK; version 3 dropped ACK's attempt id, which is always its
/// `r_ack`'s; version 4 added REMOVE; version 5 added FENCE and FENCED, and the sender's
/// incarnation and life to the peer hello; version 6 added FULL; version 7 added the STAGED
/// prefix and STALE (the ring's fence; messages without a stage are unchanged). Nodes of
/// different versions refuse each other.
pub const WIRE_VERSION: u8 = 7;

/// Bytes of the length field plus the fixed header.
pub const FRAME_HEADER_BYTES: usize = 4 + 1 + 2 + 4 + 4;

/// A frame that cannot be accepted.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum WireError {
    /// The declared frame is larger than the limit.
    #[error("frame of {0} bytes exceeds the limit")]
    Oversized(usize),
    /// A version this node does not speak.
    #[error("unknown wire version {0}")]
    UnknownVersion(u8),
    /// The payload does not match its checksum.
    #[error("frame checksum mismatch")]
    Checksum,
    /// The payload does not decode.
    #[error("malformed frame: {0}")]
    Malformed(&'static str),
}

/// A decoded frame.
#[derive(Debug, PartialEq, Eq)]
pub struct Frame {
    /// The sender.
    pub from: NodeId,
    /// Its messages, in order.
    pub messages: Vec<Message>,
}

const TAG_PREPARE_READ: u8 = 1;
const TAG_PREPARE_WRITE: u8 = 2;
const TAG_PAXOS_PREP: u8 = 3;
const TAG_ACK: u8 = 4;
const TAG_VOTE: u8 = 5;
const TAG_VOTED: u8 = 6;
const TAG_NACK: u8 = 7;
const TAG_LEARNED: u8 = 8;
const TAG_REMOVE: u8 = 9;
const TAG_FENCE: u8 = 10;
const TAG_FENCED: u8 = 11;
const TAG_FULL: u8 = 12;
/// A prefix: the stage id (u32), then a PREPARE, PAXOS_PREP or VOTE sent in that stage.
const TAG_STAGED: u8 = 13;
const TAG_STALE: u8 = 14;

/// Appends one frame with `messages` from `from` to `out`.
pub fn encode_frame(from: NodeId, messages: &[Message], out: &mut Vec<u8>) {
    let start = out.len();
    out.extend_from_slice(&[0; FRAME_HEADER_BYTES]);
    for m in messages {
        put_message(out, m);
    }
    let payload = &out[start + FRAME_HEADER_BYTES..];
    let crc = crc32c::crc32c(payload);
    let length = u32::try_from(out.len() - start - 4).expect("frames are bounded");
    let count = u32::try_from(messages.len()).expect("frames are bounded");
    let header = &mut out[start..start + FRAME_HEADER_BYTES];
    header[0..4].copy_from_slice(&length.to_le_bytes());
    header[4] = WIRE_VERSION;
    header[5..7].copy_from_slice(&from.0.to_le_bytes());
    header[7..11].copy_from_slice(&count.to_le_bytes());
    header[11..15].copy_from_slice(&crc.to_le_bytes());
}

/// Decodes the frame at the start of `buf`: `Ok(None)` if it is not complete yet, otherwise
/// the frame and the bytes it used.
pub fn decode_frame(
    buf: &[u8],
    frame_bytes_max: usize,
) -> Result<Option<(Frame, usize)>, WireError> {
    if buf.len() < 4 {
        return Ok(None);
    }
    let length = u32::from_le_bytes([buf[0], buf[1], buf[2], buf[3]]) as usize;
    if length + 4 > frame_bytes_max {
        return Err(WireError::Oversized(length + 4));
    }
    if length + 4 < FRAME_HEADER_BYTES {
        return Err(WireError::Malformed("frame shorter than its header"));
    }
    if buf.len() < length + 4 {
        return Ok(None);
    }
    let frame = &buf[..length + 4];
    if frame[4] != WIRE_VERSION {
        return Err(WireError::UnknownVersion(frame[4]));
    }
    let from = NodeId(u16::from_le_bytes([frame[5], frame[6]]));
    let count = u32::from_le_bytes([frame[7], frame[8], frame[9], frame[10]]) as usize;
    let crc = u32::from_le_bytes([frame[11], frame[12], frame[13], frame[14]]);
    let payload = &frame[FRAME_HEADER_BYTES..];
    if crc32c::crc32c(payload) != crc {
        return Err(WireError::Checksum);
    }
    // Every message takes at least 2 bytes: do not trust `count` beyond that.
    if count > payload.len() / 2 {
        return Err(WireError::Malformed("message count exceeds the payload"));
    }
    let mut r = Reader::new(payload);
    let mut messages = Vec::with_capacity(count);
    for _ in 0..count {
        messages.push(take_message(&mut r)?);
    }
    if !r.is_empty() {
        return Err(WireError::Malformed("bytes after the last message"));
    }
    Ok(Some((Frame { from, messages }, length + 4)))
}

fn put_key(out: &mut Vec<u8>, key: &Key) {
    let len = u32::try_from(key.as_bytes().len()).expect("keys are bounded");
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(key.as_bytes());
}

fn put_value(out: &mut Vec<u8>, value: &Register) {
    let len = u32::try_from(value.encoded_len()).expect("values are bounded");
    out.extend_from_slice(&len.to_le_bytes());
    value.encode(out);
}

fn put_message(out: &mut Vec<u8>, m: &Message) {
    let stage = m.stage();
    if stage != StageId::NONE {
        out.push(TAG_STAGED);
        out.extend_from_slice(&stage.get().to_le_bytes());
    }
    match m {
        Message::Prepare {
            key,
            kind,
            attempt,
            known_voted,
            ..
        } => {
            out.push(match kind {
                PrepareKind::Read => TAG_PREPARE_READ,
                PrepareKind::Write => TAG_PREPARE_WRITE,
            });
            put_key(out, key);
            put_attempt(out, *attempt);
            put_round(out, *known_voted);
        }
        Message::PaxosPrep {
            key,
            round,
            known_voted,
            ..
        } => {
            out.push(TAG_PAXOS_PREP);
            put_key(out, key);
            put_round(out, *round);
            put_round(out, *known_voted);
        }
        Message::Ack {
            key,
            inc,
            r_ack,
            r_voted,
            value,
            req,
            req_prev,
        } => {
            out.push(TAG_ACK);
            put_key(out, key);
            out.push(u8::from(*inc));
            put_round(out, *r_ack);
            put_round(out, *r_voted);
            match value {
                None => out.push(0),
                Some(v) => {
                    out.push(1);
                    put_value(out, v);
                }
            }
            put_req(out, *req);
            put_req(out, *req_prev);
        }
        Message::Vote {
            key,
            round,
            value,
            req_cur,
            req_prev,
            ..
        } => {
            out.push(TAG_VOTE);
            put_key(out, key);
            put_round(out, *round);
            put_value(out, value);
            put_req(out, *req_cur);
            put_req(out, *req_prev);
        }
        Message::Voted { key, round } => {
            out.push(TAG_VOTED);
            put_key(out, key);
            put_round(out, *round);
        }
        Message::Nack { key, round, r_ack } => {
            out.push(TAG_NACK);
            put_key(out, key);
            put_round(out, *round);
            put_round(out, *r_ack);
        }
        Message::Learned { key, req } => {
            out.push(TAG_LEARNED);
            put_key(out, key);
            put_req_id(out, *req);
        }
        Message::Remove { key, voted } => {
            out.push(TAG_REMOVE);
            put_key(out, key);
            put_round(out, *voted);
        }
        Message::Fence { key } => {
            out.push(TAG_FENCE);
            put_key(out, key);
        }
        Message::Fenced { key } => {
            out.push(TAG_FENCED);
            put_key(out, key);
        }
        Message::Full { key, round } => {
            out.push(TAG_FULL);
            put_key(out, key);
            put_round(out, *round);
        }
        Message::Stale { key, stage } => {
            out.push(TAG_STALE);
            put_key(out, key);
            out.extend_from_slice(&stage.get().to_le_bytes());
        }
    }
}

impl From<CodecError> for WireError {
    fn from(e: CodecError) -> WireError {
        match e {
            CodecError::Truncated => WireError::Malformed("message truncated"),
            CodecError::BadFlag => WireError::Malformed("bad flag byte"),
            CodecError::BadRequest => WireError::Malformed("request id with sequence number 0"),
        }
    }
}

fn take_key(r: &mut Reader<'_>) -> Result<Key, WireError> {
    Ok(Key::from_slice(r.bytes()?))
}

fn take_value(r: &mut Reader<'_>) -> Result<Arc<Register>, WireError> {
    Register::decode(r.bytes()?)
        .map(Arc::new)
        .map_err(|_| WireError::Malformed("register value"))
}

/// A stage id as the wire carries it where one is required: never [`StageId::NONE`].
fn take_stage(r: &mut Reader<'_>) -> Result<StageId, WireError> {
    match r.u32()? {
        0 => Err(WireError::Malformed("stage 0")),
        id => Ok(StageId::from_wire(id)),
    }
}

fn take_message(r: &mut Reader<'_>) -> Result<Message, WireError> {
    let tag = r.u8()?;
    if tag != TAG_STAGED {
        return take_unstaged(r, tag, StageId::NONE);
    }
    let stage = take_stage(r)?;
    match r.u8()? {
        tag @ (TAG_PREPARE_READ | TAG_PREPARE_WRITE | TAG_PAXOS_PREP | TAG_VOTE) => {
            take_unstaged(r, tag, stage)
        }
        _ => Err(WireError::Malformed(
            "a stage on a message that carries none",
        )),
    }
}

/// The message after its tag `tag`; PREPARE, PAXOS_PREP and VOTE get `stage`.
fn take_unstaged(r: &mut Reader<'_>, tag: u8, stage: StageId) -> Result<Message, WireError> {
    let key = take_key(r)?;
    Ok(match tag {
        TAG_PREPARE_READ | TAG_PREPARE_WRITE => Message::Prepare {
            key,
            kind: if tag == TAG_PREPARE_READ {
                PrepareKind::Read
            } else {
                PrepareKind::Write
            },
            attempt: r.attempt()?,
            known_voted: r.round()?,
            stage,
        },
        TAG_PAXOS_PREP => Message::PaxosPrep {
            key,
            round: r.round()?,
            known_voted: r.round()?,
            stage,
        },
        TAG_ACK => Message::Ack {
            key,
            inc: r.flag()?,
            r_ack: r.round()?,
            r_voted: r.round()?,
            value: if r.flag()? {
                Some(take_value(r)?)
            } else {
                None
            },
            req: r.req()?,
            req_prev: r.req()?,
        },
        TAG_VOTE => Message::Vote {
            key,
            round: r.round()?,
            value: take_value(r)?,
            req_cur: r.req()?,
            req_prev: r.req()?,
            stage,
        },
        TAG_VOTED => Message::Voted {
            key,
            round: r.round()?,
        },
        TAG_NACK => Message::Nack {
            key,
            round: r.round()?,
            r_ack: r.round()?,
        },
        TAG_LEARNED => Message::Learned {
            key,
            req: r.req_id()?,
        },
        TAG_REMOVE => Message::Remove {
            key,
            voted: r.round()?,
        },
        TAG_FENCE => Message::Fence { key },
        TAG_FENCED => Message::Fenced { key },
        TAG_FULL => Message::Full {
            key,
            round: r.round()?,
        },
        TAG_STALE => Message::Stale {
            key,
            stage: take_stage(r)?,
        },
        _ => return Err(WireError::Malformed("unknown message tag")),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::{AttemptId, ProposerId, ReqId, Round};
    use logless_commands::value::Data;

    fn round(n: u64) -> Round {
        Round {
            n,
            id: AttemptId {
                proposer: ProposerId {
                    node: NodeId(2),
                    incarnation: 3,
                },
                seq: 4,
            },
        }
    }

    fn sample() -> Vec<Message> {
        let key = Key::new("k");
        let value = Arc::new(Register {
            data: Data::Int(7),
            expires_at_ms: Some(9),
            fence: 0,
        });
        vec![
            Message::Prepare {
                key: key.clone(),
                kind: PrepareKind::Read,
                attempt: round(1).id,
                known_voted: round(0),
                stage: StageId::NONE,
            },
            Message::PaxosPrep {
                key: key.clone(),
                round: round(5),
                known_voted: Round::BOTTOM,
                stage: StageId::NONE,
            },
            Message::Ack {
                key: key.clone(),
                inc: true,
                r_ack: round(6),
                r_voted: round(5),
                value: Some(value.clone()),
                req: Some(ReqId::new(round(1).id).unwrap()),
                req_prev: Some(ReqId::new(round(0).id).unwrap()),
            },
            Message::Vote {
                key: key.clone(),
                round: round(6),
                value,
                req_cur: Some(ReqId::new(round(2).id).unwrap()),
                req_prev: Some(ReqId::new(round(1).id).unwrap()),
                stage: StageId::NONE,
            },
            Message::Voted {
                key: key.clone(),
                round: round(6),
            },
            Message::Nack {
                key: key.clone(),
                round: round(6),
                r_ack: round(8),
            },
            Message::Learned {
                key: key.clone(),
                req: ReqId::new(round(1).id).unwrap(),
            },
            Message::Remove {
                key: key.clone(),
                voted: round(5),
            },
            Message::Fence { key: key.clone() },
            Message::Fenced { key: key.clone() },
            Message::Full {
                key,
                round: round(6),
            },
        ]
    }

    /// [`sample`] sent with a placement: its PREPARE, PAXOS_PREP and VOTE carry a stage, and a
    /// STALE answers one.
    fn staged_sample() -> Vec<Message> {
        let stage = StageId::of(logless_placement::Stage::Joint(logless_placement::Epoch(2)));
        let mut messages = sample();
        for m in &mut messages {
            if let Message::Prepare { stage: s, .. }
            | Message::PaxosPrep { stage: s, .. }
            | Message::Vote { stage: s, .. } = m
            {
                *s = stage;
            }
        }
        messages.push(Message::Stale {
            key: Key::new("k"),
            stage,
        });
        messages
    }

    /// The payload of [`sample`]'s frame as version 6 wrote it: without a placement, messages
    /// are written byte for byte as before the stage was added.
    const SAMPLE_PAYLOAD_V6: &str = concat!(
        "01010000006b02000300000004000000000000000000000000000000020003000000040000000000",
        "000003010000006b0500000000000000020003000000040000000000000000000000000000000000",
        "00000000000000000000000004010000006b01060000000000000002000300000004000000000000",
        "00050000000000000002000300000004000000000000000113000000020109000000000000000207",
        "00000000000000010200030000000400000000000000010200030000000400000000000000050100",
        "00006b06000000000000000200030000000400000000000000130000000201090000000000000002",
        "07000000000000000102000300000004000000000000000102000300000004000000000000000601",
        "0000006b0600000000000000020003000000040000000000000007010000006b0600000000000000",
        "02000300000004000000000000000800000000000000020003000000040000000000000008010000",
        "006b020003000000040000000000000009010000006b050000000000000002000300000004000000",
        "000000000a010000006b0b010000006b0c010000006b060000000000000002000300000004000000",
        "00000000",
    );

    #[test]
    fn messages_without_a_stage_keep_their_bytes() {
        let mut buf = Vec::new();
        encode_frame(NodeId(3), &sample(), &mut buf);
        let payload: String = buf[FRAME_HEADER_BYTES..]
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        assert_eq!(payload, SAMPLE_PAYLOAD_V6);
    }

    #[test]
    fn staged_messages_round_trip_and_cost_five_bytes_each() {
        let (mut plain, mut staged) = (Vec::new(), Vec::new());
        encode_frame(NodeId(3), &sample(), &mut plain);
        encode_frame(NodeId(3), &staged_sample(), &mut staged);
        let (frame, _) = decode_frame(&staged, 1 << 20).unwrap().unwrap();
        assert_eq!(frame.messages, staged_sample());
        // Three staged messages (5 bytes each) and a STALE (tag, key, stage).
        assert_eq!(staged.len() - plain.len(), 3 * 5 + (1 + 4 + 1 + 4));
    }

    #[test]
    fn stages_where_none_belong_are_refused() {
        let stale = Message::Stale {
            key: Key::new("k"),
            stage: StageId::from_wire(0),
        };
        let mut buf = Vec::new();
        encode_frame(NodeId(3), &[stale], &mut buf);
        assert_eq!(
            decode_frame(&buf, 1 << 20),
            Err(WireError::Malformed("stage 0"))
        );
        // A STAGED prefix before a VOTED: re-encoded by hand, with a matching checksum.
        let voted = Message::Voted {
            key: Key::new("k"),
            round: round(6),
        };
        let mut payload = vec![TAG_STAGED, 5, 0, 0, 0];
        put_message(&mut payload, &voted);
        let mut frame = Vec::new();
        encode_frame(NodeId(3), &[voted], &mut frame);
        frame.truncate(FRAME_HEADER_BYTES);
        frame.extend_from_slice(&payload);
        let length = u32::try_from(frame.len() - 4).unwrap();
        frame[0..4].copy_from_slice(&length.to_le_bytes());
        frame[11..15].copy_from_slice(&crc32c::crc32c(&payload).to_le_bytes());
        assert_eq!(
            decode_frame(&frame, 1 << 20),
            Err(WireError::Malformed(
                "a stage on a message that carries none"
            ))
        );
    }

    #[test]
    fn frames_round_trip_and_report_their_length() {
        let mut buf = Vec::new();
        encode_frame(NodeId(3), &staged_sample(), &mut buf);
        let used = buf.len();
        encode_frame(NodeId(3), &[], &mut buf);
        let (frame, n) = decode_frame(&buf, 1 << 20).unwrap().unwrap();
        assert_eq!(n, used);
        assert_eq!(
            frame,
            Frame {
                from: NodeId(3),
                messages: staged_sample()
            }
        );
        let (empty, m) = decode_frame(&buf[n..], 1 << 20).unwrap().unwrap();
        assert_eq!((empty.messages.len(), m), (0, FRAME_HEADER_BYTES));
    }

    #[test]
    fn partial_frames_ask_for_more() {
        let mut buf = Vec::new();
        encode_frame(NodeId(3), &staged_sample(), &mut buf);
        for cut in 0..buf.len() {
            assert_eq!(decode_frame(&buf[..cut], 1 << 20), Ok(None), "cut at {cut}");
        }
    }

    #[test]
    fn damage_is_reported_not_served() {
        let mut buf = Vec::new();
        encode_frame(NodeId(3), &sample(), &mut buf);
        let mut flipped = buf.clone();
        let last = flipped.len() - 1;
        flipped[last] ^= 1;
        assert_eq!(decode_frame(&flipped, 1 << 20), Err(WireError::Checksum));
        let mut version = buf.clone();
        version[4] = 9;
        assert_eq!(
            decode_frame(&version, 1 << 20),
            Err(WireError::UnknownVersion(9))
        );
        assert_eq!(decode_frame(&buf, 64), Err(WireError::Oversized(buf.len())));
        // A LEARNED whose request id has sequence number 0, which no proposer mints.
        let learned = Message::Learned {
            key: Key::from_slice(b"k"),
            req: ReqId::new(round(1).id).unwrap(),
        };
        let mut unminted = Vec::new();
        encode_frame(NodeId(3), std::slice::from_ref(&learned), &mut unminted);
        // The sequence number is the frame's last 8 bytes; the checksum is made to match.
        let seq_at = unminted.len() - 8;
        unminted[seq_at..].fill(0);
        let crc = crc32c::crc32c(&unminted[FRAME_HEADER_BYTES..]);
        unminted[11..15].copy_from_slice(&crc.to_le_bytes());
        assert_eq!(
            decode_frame(&unminted, 1 << 20),
            Err(WireError::Malformed("request id with sequence number 0"))
        );
        let huge = [0xff, 0xff, 0xff, 0x7f];
        assert!(matches!(
            decode_frame(&huge, 1 << 20),
            Err(WireError::Oversized(_))
        ));
    }
}
