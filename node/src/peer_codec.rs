//! What the peer transport ([`crate::peer`]) carries for each engine: how a batch of an
//! engine's messages becomes a frame and back, and what the event loop behind a link is told.
//!
//! The transport (connections, hello, TLS, reconnects, limits) is the same for both engines;
//! only the frames differ:
//! * [`RmwCodec`]: the per-key engine's frames, [`logless_rmw::wire`], as they always were;
//! * [`LogCodec`]: the log engine's, below;
//! * [`PsmrCodec`]: the psmr engine's, the log engine's layout with version `'P'`, each message
//!   behind its group.
//!
//! ```text
//! length   u32 LE   bytes after this field (header + payload)
//! version  u8       LOG_FRAME_VERSION ('M', which the per-key engine refuses as a version)
//! from     u16 LE   the sending node
//! count    u32 LE   messages in the payload
//! crc32c   u32 LE   of the payload
//! payload           the messages, each: u32 LE length, then `logless_multipaxos::wire`'s bytes
//!                   (with the sender's epoch: 0 under FullSS)
//! ```
//!
//! The header has the per-key engine's layout with a version byte neither engine shares, so a
//! node of one engine that reaches a node of the other is refused at its first frame with
//! "unknown wire version" rather than misreading it.
use logless_multipaxos::ids::Epoch;
use logless_multipaxos::message::Message as LogMessage;
use logless_multipaxos::wire as log_wire;
use logless_rmw::ids::NodeId;
use logless_rmw::message::Message as RmwMessage;
use logless_rmw::wire as rmw_wire;

use logless_psmr::wire as psmr_wire;
use logless_service::Group;

use crate::log_loop::LogInput;
use crate::psmr_loop::PsmrInput;
use crate::shard::ShardInput;

/// An engine's frames and the input its event loop takes.
pub trait PeerCodec: Send + Sync + 'static {
    /// A protocol message.
    type Message: Send + 'static;
    /// What the event loop behind a link takes.
    type Input: Send + 'static;
    /// Appends one frame with `messages` from `from` to `out`.
    fn encode_frame(from: NodeId, messages: &[Self::Message], out: &mut Vec<u8>);
    /// Decodes the frame at the start of `buf`: `Ok(None)` if it is not complete yet, else the
    /// sender, its messages and the bytes used. An error drops the connection.
    #[allow(clippy::type_complexity)]
    fn decode_frame(
        buf: &[u8],
        frame_bytes_max: usize,
    ) -> Result<Option<(NodeId, Vec<Self::Message>, usize)>, String>;
    /// The input that delivers `messages` from `from`.
    fn messages(from: NodeId, messages: Vec<Self::Message>) -> Self::Input;
    /// The input that says a link to or from `peer` broke (messages on it may be lost), if the
    /// engine wants to know.
    fn link_broken(peer: NodeId) -> Option<Self::Input>;
}

/// The per-key engine's frames, for its shards.
pub struct RmwCodec;

impl PeerCodec for RmwCodec {
    type Message = RmwMessage;
    type Input = ShardInput;

    fn encode_frame(from: NodeId, messages: &[RmwMessage], out: &mut Vec<u8>) {
        rmw_wire::encode_frame(from, messages, out);
    }

    fn decode_frame(
        buf: &[u8],
        frame_bytes_max: usize,
    ) -> Result<Option<(NodeId, Vec<RmwMessage>, usize)>, String> {
        match rmw_wire::decode_frame(buf, frame_bytes_max) {
            Ok(Some((frame, used))) => Ok(Some((frame.from, frame.messages, used))),
            Ok(None) => Ok(None),
            Err(e) => Err(e.to_string()),
        }
    }

    fn messages(from: NodeId, messages: Vec<RmwMessage>) -> ShardInput {
        ShardInput::Messages { from, messages }
    }

    fn link_broken(peer: NodeId) -> Option<ShardInput> {
        // Algorithm 3 counts the peer as crashed for the requests in flight.
        Some(ShardInput::LinkBroken(peer))
    }
}

/// The log engine's frames, for its one event loop.
pub struct LogCodec;

/// The log engine's frame version byte.
pub const LOG_FRAME_VERSION: u8 = b'M';

/// Bytes of the length field plus the fixed header.
const HEADER_BYTES: usize = 4 + 1 + 2 + 4 + 4;

impl PeerCodec for LogCodec {
    /// A message with the epoch its sender sent it in.
    type Message = (Epoch, LogMessage);
    type Input = LogInput;

    fn encode_frame(from: NodeId, messages: &[(Epoch, LogMessage)], out: &mut Vec<u8>) {
        let encode = |(epoch, message): &(Epoch, LogMessage), out: &mut Vec<u8>| {
            log_wire::encode_in_epoch(*epoch, message, out);
        };
        encode_framed(LOG_FRAME_VERSION, from, messages, encode, out);
    }

    fn decode_frame(
        buf: &[u8],
        frame_bytes_max: usize,
    ) -> Result<Option<(NodeId, Vec<(Epoch, LogMessage)>, usize)>, String> {
        decode_framed(LOG_FRAME_VERSION, buf, frame_bytes_max, |bytes| {
            log_wire::decode_in_epoch(bytes).map_err(|e| e.to_string())
        })
    }

    fn messages(from: NodeId, messages: Vec<(Epoch, LogMessage)>) -> LogInput {
        LogInput::Messages {
            from: logless_multipaxos::ids::NodeId(from.0),
            messages,
        }
    }

    fn link_broken(_peer: NodeId) -> Option<LogInput> {
        // Multi-Paxos retransmits what a broken link lost; nothing to tell.
        None
    }
}

/// The psmr engine's frames, for its one event loop: the log engine's frame layout with its
/// own version byte, each message a group's ([`logless_psmr::wire`]).
pub struct PsmrCodec;

/// The psmr engine's frame version byte.
pub const PSMR_FRAME_VERSION: u8 = b'P';

impl PeerCodec for PsmrCodec {
    type Message = (Group, LogMessage);
    type Input = PsmrInput;

    fn encode_frame(from: NodeId, messages: &[(Group, LogMessage)], out: &mut Vec<u8>) {
        let encode = |(group, message): &(Group, LogMessage), out: &mut Vec<u8>| {
            psmr_wire::encode(*group, message, out);
        };
        encode_framed(PSMR_FRAME_VERSION, from, messages, encode, out);
    }

    fn decode_frame(
        buf: &[u8],
        frame_bytes_max: usize,
    ) -> Result<Option<(NodeId, Vec<(Group, LogMessage)>, usize)>, String> {
        decode_framed(PSMR_FRAME_VERSION, buf, frame_bytes_max, |bytes| {
            psmr_wire::decode(bytes).map_err(|e| e.to_string())
        })
    }

    fn messages(from: NodeId, messages: Vec<(Group, LogMessage)>) -> PsmrInput {
        PsmrInput::Messages {
            from: logless_multipaxos::ids::NodeId(from.0),
            messages,
        }
    }

    fn link_broken(_peer: NodeId) -> Option<PsmrInput> {
        // Every group's Multi-Paxos retransmits what a broken link lost.
        None
    }
}

/// Appends one frame of `version` with `messages` from `from`, each encoded by `encode`.
fn encode_framed<M>(
    version: u8,
    from: NodeId,
    messages: &[M],
    encode: impl Fn(&M, &mut Vec<u8>),
    out: &mut Vec<u8>,
) {
    let start = out.len();
    out.extend_from_slice(&[0; HEADER_BYTES]);
    for message in messages {
        let at = out.len();
        out.extend_from_slice(&[0; 4]);
        encode(message, out);
        let len = u32::try_from(out.len() - at - 4).expect("messages are bounded");
        out[at..at + 4].copy_from_slice(&len.to_le_bytes());
    }
    let crc = crc32c::crc32c(&out[start + HEADER_BYTES..]);
    let length = u32::try_from(out.len() - start - 4).expect("frames are bounded");
    let count = u32::try_from(messages.len()).expect("frames are bounded");
    let header = &mut out[start..start + HEADER_BYTES];
    header[0..4].copy_from_slice(&length.to_le_bytes());
    header[4] = version;
    header[5..7].copy_from_slice(&from.0.to_le_bytes());
    header[7..11].copy_from_slice(&count.to_le_bytes());
    header[11..15].copy_from_slice(&crc.to_le_bytes());
}

/// Decodes the frame of `version` at the start of `buf`, each message by `decode` (see
/// [`PeerCodec::decode_frame`]).
#[allow(clippy::type_complexity)]
fn decode_framed<M>(
    version: u8,
    buf: &[u8],
    frame_bytes_max: usize,
    decode: impl Fn(&[u8]) -> Result<M, String>,
) -> Result<Option<(NodeId, Vec<M>, usize)>, String> {
    if buf.len() < 4 {
        return Ok(None);
    }
    let length = u32::from_le_bytes([buf[0], buf[1], buf[2], buf[3]]) as usize;
    if length + 4 > frame_bytes_max {
        return Err(format!("frame of {} bytes exceeds the limit", length + 4));
    }
    if length + 4 < HEADER_BYTES {
        return Err("malformed frame: shorter than its header".into());
    }
    if buf.len() < length + 4 {
        return Ok(None);
    }
    let frame = &buf[..length + 4];
    if frame[4] != version {
        return Err(format!(
            "unknown wire version {} (a node of another engine or version?)",
            frame[4]
        ));
    }
    let from = NodeId(u16::from_le_bytes([frame[5], frame[6]]));
    let count = u32::from_le_bytes([frame[7], frame[8], frame[9], frame[10]]) as usize;
    let crc = u32::from_le_bytes([frame[11], frame[12], frame[13], frame[14]]);
    let mut payload = &frame[HEADER_BYTES..];
    if crc32c::crc32c(payload) != crc {
        return Err("frame checksum mismatch".into());
    }
    // Every message takes at least its length field: do not trust `count` beyond that.
    if count > payload.len() / 4 {
        return Err("malformed frame: message count exceeds the payload".into());
    }
    let mut messages = Vec::with_capacity(count);
    for _ in 0..count {
        let Some((len, rest)) = payload.split_first_chunk::<4>() else {
            return Err("malformed frame: a message length is cut".into());
        };
        let len = u32::from_le_bytes(*len) as usize;
        if rest.len() < len {
            return Err("malformed frame: a message is cut".into());
        }
        let (bytes, rest) = rest.split_at(len);
        messages.push(decode(bytes).map_err(|e| format!("bad message: {e}"))?);
        payload = rest;
    }
    if !payload.is_empty() {
        return Err("malformed frame: bytes after the last message".into());
    }
    Ok(Some((from, messages, length + 4)))
}

#[cfg(test)]
mod tests {
    use logless_multipaxos::ids::{Instance, View};

    use super::*;

    fn messages() -> Vec<LogMessage> {
        vec![
            LogMessage::Alive {
                view: View(3),
                first_undecided: Instance(7),
            },
            LogMessage::Accept {
                view: View(3),
                instance: Instance(9),
            },
        ]
    }

    /// [`messages`] as sent in `epoch`.
    fn in_epoch(epoch: u64) -> Vec<(Epoch, LogMessage)> {
        messages().into_iter().map(|m| (Epoch(epoch), m)).collect()
    }

    #[test]
    fn log_frames_decode_to_what_was_encoded_and_wait_for_their_end() {
        let mut out = Vec::new();
        LogCodec::encode_frame(NodeId(4), &in_epoch(5), &mut out);
        LogCodec::encode_frame(NodeId(4), &[], &mut out);
        let (from, decoded, used) = LogCodec::decode_frame(&out, 1 << 20).unwrap().unwrap();
        assert_eq!(
            (from, decoded),
            (NodeId(4), in_epoch(5)),
            "with their epoch"
        );
        let (_, empty, rest) = LogCodec::decode_frame(&out[used..], 1 << 20)
            .unwrap()
            .unwrap();
        assert!(empty.is_empty());
        assert_eq!(used + rest, out.len());
        for cut in 0..used {
            assert_eq!(LogCodec::decode_frame(&out[..cut], 1 << 20), Ok(None));
        }
    }

    #[test]
    fn damaged_frames_and_the_other_engines_frames_are_refused() {
        let mut out = Vec::new();
        LogCodec::encode_frame(NodeId(1), &in_epoch(0), &mut out);
        let mut flipped = out.clone();
        *flipped.last_mut().unwrap() ^= 1;
        assert!(LogCodec::decode_frame(&flipped, 1 << 20).is_err());
        assert!(LogCodec::decode_frame(&out, 8).is_err());
        let mut rmw = Vec::new();
        RmwCodec::encode_frame(NodeId(1), &[], &mut rmw);
        let refused = LogCodec::decode_frame(&rmw, 1 << 20).unwrap_err();
        assert!(refused.contains("unknown wire version"), "{refused}");
        assert!(RmwCodec::decode_frame(&out, 1 << 20).is_err());
        let refused = PsmrCodec::decode_frame(&out, 1 << 20).unwrap_err();
        assert!(refused.contains("unknown wire version"), "{refused}");
    }

    #[test]
    fn psmr_frames_carry_each_message_with_its_group() {
        use logless_service::WorkerId;
        let grouped: Vec<(Group, LogMessage)> = messages()
            .into_iter()
            .zip([Group::All, Group::Worker(WorkerId(2))])
            .map(|(message, group)| (group, message))
            .collect();
        let mut out = Vec::new();
        PsmrCodec::encode_frame(NodeId(3), &grouped, &mut out);
        let (from, decoded, used) = PsmrCodec::decode_frame(&out, 1 << 20).unwrap().unwrap();
        assert_eq!((from, decoded, used), (NodeId(3), grouped, out.len()));
        assert!(LogCodec::decode_frame(&out, 1 << 20).is_err());
    }
}
