//! The binary encoding of the groups' messages and records: the log engine's encoding
//! ([`logless_multipaxos::wire`]) behind the group it belongs to.
//!
//! ```text
//! group    u16 LE   0 for g_all, i + 1 for g_i (independent of the number of workers)
//! rest              the message (or record) as the log engine encodes it
//! ```
//!
//! Decoding never panics; a group this replica does not run decodes fine and is dropped by
//! [`Groups::handle_message`](crate::groups::Groups::handle_message).
use logless_multipaxos::message::Message;
use logless_multipaxos::persist::Record;
use logless_multipaxos::wire::{self as paxos_wire, DecodeError};
use logless_service::{Group, WorkerId};
use thiserror::Error;

/// Bytes that do not decode to a group's message or record.
#[derive(Clone, Copy, Debug, Error, PartialEq, Eq)]
pub enum WireError {
    /// The buffer ends inside the group.
    #[error("group truncated")]
    Truncated,
    /// The group's message or record does not decode.
    #[error("in {0:?}: {1}")]
    Message(Group, DecodeError),
}

/// Appends `group`'s `message`, encoded, to `out`.
pub fn encode(group: Group, message: &Message, out: &mut Vec<u8>) {
    put_group(group, out);
    paxos_wire::encode(message, out);
}

/// The group and message `bytes` encode.
pub fn decode(bytes: &[u8]) -> Result<(Group, Message), WireError> {
    let (group, rest) = take_group(bytes)?;
    let message = paxos_wire::decode(rest).map_err(|e| WireError::Message(group, e))?;
    Ok((group, message))
}

/// Appends `group`'s durable `record`, encoded, to `out`.
pub fn encode_record(group: Group, record: &Record, out: &mut Vec<u8>) {
    put_group(group, out);
    paxos_wire::encode_record(record, out);
}

/// The group and record `bytes` encode.
pub fn decode_record(bytes: &[u8]) -> Result<(Group, Record), WireError> {
    let (group, rest) = take_group(bytes)?;
    let record = paxos_wire::decode_record(rest).map_err(|e| WireError::Message(group, e))?;
    Ok((group, record))
}

fn put_group(group: Group, out: &mut Vec<u8>) {
    let tag = match group {
        Group::All => 0,
        Group::Worker(WorkerId(i)) => i.checked_add(1).expect("fewer than u16::MAX workers"),
    };
    out.extend_from_slice(&tag.to_le_bytes());
}

fn take_group(bytes: &[u8]) -> Result<(Group, &[u8]), WireError> {
    let Some((tag, rest)) = bytes.split_first_chunk::<2>() else {
        return Err(WireError::Truncated);
    };
    let group = match u16::from_le_bytes(*tag) {
        0 => Group::All,
        i => Group::Worker(WorkerId(i - 1)),
    };
    Ok((group, rest))
}

#[cfg(test)]
mod tests {
    use super::*;
    use logless_multipaxos::ids::{Instance, View};

    #[test]
    fn messages_and_records_round_trip_with_their_group() {
        let alive = Message::Alive {
            view: View(3),
            first_undecided: Instance(7),
        };
        for group in [
            Group::All,
            Group::Worker(WorkerId(0)),
            Group::Worker(WorkerId(9)),
        ] {
            let mut out = Vec::new();
            encode(group, &alive, &mut out);
            assert_eq!(decode(&out), Ok((group, alive.clone())));
            let record = Record::View(View(4));
            let mut out = Vec::new();
            encode_record(group, &record, &mut out);
            assert_eq!(decode_record(&out), Ok((group, record)));
        }
        let mut out = Vec::new();
        encode(Group::Worker(WorkerId(1)), &alive, &mut out);
        assert_eq!(&out[..2], [2, 0], "g_i is written i + 1");
    }

    #[test]
    fn malformed_bytes_are_errors() {
        assert_eq!(decode(&[1]), Err(WireError::Truncated));
        assert_eq!(
            decode(&[0, 0]),
            Err(WireError::Message(Group::All, DecodeError::Truncated))
        );
        let mut out = Vec::new();
        encode(Group::All, &Message::Forward { requests: vec![] }, &mut out);
        out.push(0);
        assert!(matches!(
            decode(&out),
            Err(WireError::Message(Group::All, _))
        ));
    }
}
