//! The binary encoding of [`Message`]s, and of the [`Record`]s a replica keeps in its durable
//! log ([`encode_record`], versioned by [`RECORD_VERSION`], with the same field encodings).
//!
//! One message per buffer (framing, checksums and the sender's identity belong to the
//! transport, as for the in-place engine's frames):
//!
//! ```text
//! version  u8      WIRE_VERSION
//! epoch    u64 LE  the sender's epoch (0 under FullSS; absent in version 2, read as 0)
//! tag      u8      which message (TAG_* below)
//! fields           per message, in declaration order:
//!   view, instance, client, seq   u64 LE
//!   batch                         stamp u64 LE, then its requests as a vector
//!   snapshot                      next instance, stamp, state bytes, client table
//!   snapshot chunk                next instance, stamp, state length u64 LE, offset u64 LE,
//!                                 bytes, optional client table
//!   chunk cursor                  next instance, offset u64 LE
//!   bytes                         u32 LE length, then the bytes
//!   vectors, batches, tables      u32 LE count, then the elements
//!   options, promised entries     u8 kind (0 or 1), then the content
//! ```
//!
//! Decoding reads only within the buffer, trusts no count beyond what the remaining bytes can
//! hold, never panics, and reports every malformation as a [`DecodeError`].
use bytes::Bytes;
use thiserror::Error;

use crate::ids::{ClientId, Epoch, Instance, RequestSeq, View};
use crate::message::{
    Batch, ChunkCursor, ClientTable, Message, PromisedEntry, Request, Snapshot, SnapshotChunk,
};
use crate::persist::Record;

/// The version this code writes.
/// Version 2 added the leader's stamp to batches and the execution stamp to snapshots;
/// version 3 the sender's epoch after the version byte, and the Recovery messages;
/// version 4 snapshots in pieces: a catch-up response carries a [`SnapshotChunk`] instead of
/// a whole snapshot, and a catch-up query an optional [`ChunkCursor`].
pub const WIRE_VERSION: u8 = 4;

/// An older version this code still reads: version 4 with a whole snapshot in a catch-up
/// response (read as its one and last piece) and no cursor in a catch-up query.
pub const WIRE_VERSION_WHOLE_SNAPSHOT: u8 = 3;

/// The oldest version this code still reads: version 3 without the epoch (read as epoch 0)
/// and without the Recovery messages.
pub const WIRE_VERSION_WITHOUT_EPOCH: u8 = 2;

const TAG_PREPARE: u8 = 1;
const TAG_PROMISE: u8 = 2;
const TAG_PROPOSE: u8 = 3;
const TAG_ACCEPT: u8 = 4;
const TAG_ALIVE: u8 = 5;
const TAG_CATCH_UP_QUERY: u8 = 6;
const TAG_CATCH_UP_RESPONSE: u8 = 7;
const TAG_FORWARD: u8 = 8;
const TAG_RECOVERY: u8 = 9;
const TAG_RECOVERY_ANSWER: u8 = 10;

/// The version of the durable encoding of [`Record`]s and snapshots that this code writes and
/// reads: a replica's own log on disk, so it changes independently of [`WIRE_VERSION`].
pub const RECORD_VERSION: u8 = 1;

const TAG_RECORD_VIEW: u8 = 1;
const TAG_RECORD_ACCEPTED: u8 = 2;
const TAG_RECORD_DECIDED: u8 = 3;
const TAG_RECORD_SNAPSHOT: u8 = 4;
const TAG_RECORD_TRUNCATE: u8 = 5;

/// The fewest bytes a request takes: client, sequence number and payload length.
const REQUEST_BYTES_MIN: usize = 8 + 8 + 4;

/// The fewest bytes a batch takes: its stamp and its request count.
const BATCH_BYTES_MIN: usize = 8 + 4;

/// Bytes that do not decode to a message (or to one of [`crate::kv`]'s payloads, which share
/// this reader).
#[derive(Clone, Copy, Debug, Error, PartialEq, Eq)]
pub enum DecodeError {
    /// The buffer ends inside the message.
    #[error("message truncated")]
    Truncated,
    /// A version this replica does not speak.
    #[error("unknown wire version {0}")]
    UnknownVersion(u8),
    /// An unknown message tag.
    #[error("unknown message tag {0}")]
    UnknownTag(u8),
    /// A kind byte that is neither 0 nor 1.
    #[error("bad kind byte {0}")]
    BadKind(u8),
    /// A count larger than the remaining bytes can hold.
    #[error("count {0} exceeds the message")]
    Count(u32),
    /// Bytes after the message.
    #[error("{0} bytes after the message")]
    Trailing(usize),
    /// A value its type refuses: a NaN float, a zero LPOS rank, a text that is not UTF-8, keys
    /// out of order in a snapshot (in the payloads of [`crate::kv`]).
    #[error("invalid value")]
    Invalid,
    /// Transactions nested deeper than allowed (in the payloads of [`crate::kv`]).
    #[error("nested too deeply")]
    Nested,
    /// A register that does not decode (in a [`crate::kv`] snapshot).
    #[error("bad register")]
    Register,
}

/// Appends `message`, encoded as sent in epoch 0 (FullSS), to `out`.
pub fn encode(message: &Message, out: &mut Vec<u8>) {
    encode_in_epoch(Epoch(0), message, out);
}

/// Appends `message`, encoded as sent by a replica in `epoch` ([`Replica::epoch`]), to `out`.
///
/// [`Replica::epoch`]: crate::replica::Replica::epoch
pub fn encode_in_epoch(epoch: Epoch, message: &Message, out: &mut Vec<u8>) {
    out.push(WIRE_VERSION);
    put_u64(out, epoch.0);
    match message {
        Message::Prepare {
            view,
            first_undecided,
        } => {
            out.push(TAG_PREPARE);
            put_u64(out, view.0);
            put_u64(out, first_undecided.0);
        }
        Message::Promise {
            view,
            log_start,
            entries,
        } => {
            out.push(TAG_PROMISE);
            put_u64(out, view.0);
            put_u64(out, log_start.0);
            put_count(out, entries.len());
            for (instance, entry) in entries {
                put_u64(out, instance.0);
                match entry {
                    PromisedEntry::Voted { view, batch } => {
                        out.push(0);
                        put_u64(out, view.0);
                        put_batch(out, batch);
                    }
                    PromisedEntry::Decided(batch) => {
                        out.push(1);
                        put_batch(out, batch);
                    }
                }
            }
        }
        Message::Propose {
            view,
            instance,
            batch,
        } => {
            out.push(TAG_PROPOSE);
            put_u64(out, view.0);
            put_u64(out, instance.0);
            put_batch(out, batch);
        }
        Message::Accept { view, instance } => {
            out.push(TAG_ACCEPT);
            put_u64(out, view.0);
            put_u64(out, instance.0);
        }
        Message::Alive {
            view,
            first_undecided,
        } => {
            out.push(TAG_ALIVE);
            put_u64(out, view.0);
            put_u64(out, first_undecided.0);
        }
        Message::CatchUpQuery { from, to, snapshot } => {
            out.push(TAG_CATCH_UP_QUERY);
            put_u64(out, from.0);
            put_u64(out, to.0);
            match snapshot {
                None => out.push(0),
                Some(cursor) => {
                    out.push(1);
                    put_u64(out, cursor.next_instance.0);
                    put_u64(out, cursor.offset);
                }
            }
        }
        Message::CatchUpResponse {
            view,
            snapshot,
            decided,
        } => {
            out.push(TAG_CATCH_UP_RESPONSE);
            put_u64(out, view.0);
            match snapshot {
                None => out.push(0),
                Some(chunk) => {
                    out.push(1);
                    put_chunk(out, chunk);
                }
            }
            put_count(out, decided.len());
            for (instance, batch) in decided {
                put_u64(out, instance.0);
                put_batch(out, batch);
            }
        }
        Message::Forward { requests } => {
            out.push(TAG_FORWARD);
            put_count(out, requests.len());
            for request in requests {
                put_request(out, request);
            }
        }
        Message::Recovery { epoch } => {
            out.push(TAG_RECOVERY);
            put_u64(out, epoch.0);
        }
        Message::RecoveryAnswer {
            epoch,
            view,
            leading,
            decided_below,
        } => {
            out.push(TAG_RECOVERY_ANSWER);
            put_u64(out, epoch.0);
            put_u64(out, view.0);
            out.push(u8::from(*leading));
            put_u64(out, decided_below.0);
        }
    }
}

/// Decodes one message that fills `bytes` exactly, dropping the sender's epoch (for FullSS).
pub fn decode(bytes: &[u8]) -> Result<Message, DecodeError> {
    decode_in_epoch(bytes).map(|(_, message)| message)
}

/// Decodes one message that fills `bytes` exactly, with the epoch of its sender (to hand to
/// [`Replica::handle_epoch_message`]). Version 2 messages decode as sent in epoch 0.
///
/// [`Replica::handle_epoch_message`]: crate::replica::Replica::handle_epoch_message
pub fn decode_in_epoch(bytes: &[u8]) -> Result<(Epoch, Message), DecodeError> {
    let mut r = Reader::new(bytes);
    let version = r.u8()?;
    let epoch = match version {
        WIRE_VERSION | WIRE_VERSION_WHOLE_SNAPSHOT => Epoch(r.u64()?),
        WIRE_VERSION_WITHOUT_EPOCH => Epoch(0),
        other => return Err(DecodeError::UnknownVersion(other)),
    };
    let chunked = version == WIRE_VERSION;
    let tag = r.u8()?;
    if version == WIRE_VERSION_WITHOUT_EPOCH && tag >= TAG_RECOVERY {
        return Err(DecodeError::UnknownTag(tag));
    }
    let message = match tag {
        TAG_PREPARE => Message::Prepare {
            view: View(r.u64()?),
            first_undecided: Instance(r.u64()?),
        },
        TAG_PROMISE => {
            let view = View(r.u64()?);
            let log_start = Instance(r.u64()?);
            // An entry takes an instance, a kind and an empty batch at least.
            let count = r.count(8 + 1 + BATCH_BYTES_MIN)?;
            let mut entries = Vec::with_capacity(count);
            for _ in 0..count {
                let instance = Instance(r.u64()?);
                let entry = match r.u8()? {
                    0 => PromisedEntry::Voted {
                        view: View(r.u64()?),
                        batch: r.batch()?,
                    },
                    1 => PromisedEntry::Decided(r.batch()?),
                    other => return Err(DecodeError::BadKind(other)),
                };
                entries.push((instance, entry));
            }
            Message::Promise {
                view,
                log_start,
                entries,
            }
        }
        TAG_PROPOSE => Message::Propose {
            view: View(r.u64()?),
            instance: Instance(r.u64()?),
            batch: r.batch()?,
        },
        TAG_ACCEPT => Message::Accept {
            view: View(r.u64()?),
            instance: Instance(r.u64()?),
        },
        TAG_ALIVE => Message::Alive {
            view: View(r.u64()?),
            first_undecided: Instance(r.u64()?),
        },
        TAG_CATCH_UP_QUERY => Message::CatchUpQuery {
            from: Instance(r.u64()?),
            to: Instance(r.u64()?),
            snapshot: match chunked {
                true => r.option(|r| {
                    Ok(ChunkCursor {
                        next_instance: Instance(r.u64()?),
                        offset: r.u64()?,
                    })
                })?,
                false => None,
            },
        },
        TAG_CATCH_UP_RESPONSE => {
            let view = View(r.u64()?);
            let snapshot = match chunked {
                true => r.option(Reader::chunk)?,
                // A whole snapshot: its one and last piece.
                false => r
                    .option(Reader::snapshot)?
                    .map(|snapshot| SnapshotChunk::cut(&snapshot, 0, snapshot.state.len())),
            };
            let count = r.count(8 + BATCH_BYTES_MIN)?;
            let mut decided = Vec::with_capacity(count);
            for _ in 0..count {
                decided.push((Instance(r.u64()?), r.batch()?));
            }
            Message::CatchUpResponse {
                view,
                snapshot,
                decided,
            }
        }
        TAG_FORWARD => {
            let count = r.count(REQUEST_BYTES_MIN)?;
            let mut requests = Vec::with_capacity(count);
            for _ in 0..count {
                requests.push(r.request()?);
            }
            Message::Forward { requests }
        }
        TAG_RECOVERY => Message::Recovery {
            epoch: Epoch(r.u64()?),
        },
        TAG_RECOVERY_ANSWER => Message::RecoveryAnswer {
            epoch: Epoch(r.u64()?),
            view: View(r.u64()?),
            leading: r.bool()?,
            decided_below: Instance(r.u64()?),
        },
        other => return Err(DecodeError::UnknownTag(other)),
    };
    r.finish()?;
    Ok((epoch, message))
}

/// Appends `record`, encoded for a replica's durable log, to `out`:
/// [`RECORD_VERSION`], a tag, then the record's fields as in messages.
pub fn encode_record(record: &Record, out: &mut Vec<u8>) {
    out.push(RECORD_VERSION);
    match record {
        Record::View(view) => {
            out.push(TAG_RECORD_VIEW);
            put_u64(out, view.0);
        }
        Record::Accepted {
            instance,
            view,
            batch,
        } => {
            out.push(TAG_RECORD_ACCEPTED);
            put_u64(out, instance.0);
            put_u64(out, view.0);
            put_batch(out, batch);
        }
        Record::Decided { instance, batch } => {
            out.push(TAG_RECORD_DECIDED);
            put_u64(out, instance.0);
            put_batch(out, batch);
        }
        Record::Snapshot(snapshot) => {
            out.push(TAG_RECORD_SNAPSHOT);
            put_snapshot(out, snapshot);
        }
        Record::Truncate { below } => {
            out.push(TAG_RECORD_TRUNCATE);
            put_u64(out, below.0);
        }
    }
}

/// Decodes one record that fills `bytes` exactly.
pub fn decode_record(bytes: &[u8]) -> Result<Record, DecodeError> {
    let mut r = Reader::new(bytes);
    let version = r.u8()?;
    if version != RECORD_VERSION {
        return Err(DecodeError::UnknownVersion(version));
    }
    let record = match r.u8()? {
        TAG_RECORD_VIEW => Record::View(View(r.u64()?)),
        TAG_RECORD_ACCEPTED => Record::Accepted {
            instance: Instance(r.u64()?),
            view: View(r.u64()?),
            batch: r.batch()?,
        },
        TAG_RECORD_DECIDED => Record::Decided {
            instance: Instance(r.u64()?),
            batch: r.batch()?,
        },
        TAG_RECORD_SNAPSHOT => Record::Snapshot(r.snapshot()?),
        TAG_RECORD_TRUNCATE => Record::Truncate {
            below: Instance(r.u64()?),
        },
        other => return Err(DecodeError::UnknownTag(other)),
    };
    r.finish()?;
    Ok(record)
}

pub(crate) fn put_u64(out: &mut Vec<u8>, v: u64) {
    out.extend_from_slice(&v.to_le_bytes());
}

/// # Panics
/// If `n` does not fit in 32 bits: messages are far smaller (a broken invariant).
pub(crate) fn put_count(out: &mut Vec<u8>, n: usize) {
    let n = u32::try_from(n).expect("counts fit in 32 bits");
    out.extend_from_slice(&n.to_le_bytes());
}

pub(crate) fn put_bytes(out: &mut Vec<u8>, bytes: &[u8]) {
    put_count(out, bytes.len());
    out.extend_from_slice(bytes);
}

fn put_request(out: &mut Vec<u8>, request: &Request) {
    put_u64(out, request.client.0);
    put_u64(out, request.seq.0);
    put_bytes(out, &request.payload);
}

fn put_batch(out: &mut Vec<u8>, batch: &Batch) {
    put_u64(out, batch.stamp_ms());
    put_count(out, batch.requests().len());
    for request in batch.requests() {
        put_request(out, request);
    }
}

fn put_snapshot(out: &mut Vec<u8>, snapshot: &Snapshot) {
    put_u64(out, snapshot.next_instance.0);
    put_u64(out, snapshot.stamp_ms);
    put_bytes(out, &snapshot.state);
    put_clients(out, &snapshot.clients);
}

fn put_chunk(out: &mut Vec<u8>, chunk: &SnapshotChunk) {
    put_u64(out, chunk.next_instance.0);
    put_u64(out, chunk.stamp_ms);
    put_u64(out, chunk.state_bytes);
    put_u64(out, chunk.offset);
    put_bytes(out, &chunk.bytes);
    match &chunk.clients {
        None => out.push(0),
        Some(clients) => {
            out.push(1);
            put_clients(out, clients);
        }
    }
}

fn put_clients(out: &mut Vec<u8>, clients: &ClientTable) {
    put_count(out, clients.len());
    for (client, (seq, reply)) in clients {
        put_u64(out, client.0);
        put_u64(out, seq.0);
        put_bytes(out, reply);
    }
}

/// Reads from a byte slice front to back, within bounds.
pub(crate) struct Reader<'a> {
    bytes: &'a [u8],
}

impl<'a> Reader<'a> {
    pub(crate) fn new(bytes: &'a [u8]) -> Reader<'a> {
        Reader { bytes }
    }

    /// Refuses bytes left over.
    pub(crate) fn finish(&self) -> Result<(), DecodeError> {
        match self.bytes.len() {
            0 => Ok(()),
            n => Err(DecodeError::Trailing(n)),
        }
    }

    /// A byte that is 0 or 1.
    pub(crate) fn bool(&mut self) -> Result<bool, DecodeError> {
        match self.u8()? {
            0 => Ok(false),
            1 => Ok(true),
            other => Err(DecodeError::BadKind(other)),
        }
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], DecodeError> {
        if self.bytes.len() < n {
            return Err(DecodeError::Truncated);
        }
        let (head, tail) = self.bytes.split_at(n);
        self.bytes = tail;
        Ok(head)
    }

    pub(crate) fn u8(&mut self) -> Result<u8, DecodeError> {
        Ok(self.take(1)?[0])
    }

    pub(crate) fn u32(&mut self) -> Result<u32, DecodeError> {
        let mut a = [0; 4];
        a.copy_from_slice(self.take(4)?);
        Ok(u32::from_le_bytes(a))
    }

    pub(crate) fn u64(&mut self) -> Result<u64, DecodeError> {
        let mut a = [0; 8];
        a.copy_from_slice(self.take(8)?);
        Ok(u64::from_le_bytes(a))
    }

    /// A count of elements of at least `element_bytes_min` bytes each, checked against what is
    /// left, so that no allocation exceeds the message.
    pub(crate) fn count(&mut self, element_bytes_min: usize) -> Result<usize, DecodeError> {
        let n = self.u32()?;
        let count = n as usize;
        if count > self.bytes.len() / element_bytes_min.max(1) {
            return Err(DecodeError::Count(n));
        }
        Ok(count)
    }

    pub(crate) fn bytes(&mut self) -> Result<Bytes, DecodeError> {
        Ok(Bytes::copy_from_slice(self.slice()?))
    }

    /// What [`Reader::bytes`] reads, borrowed rather than copied.
    pub(crate) fn slice(&mut self) -> Result<&'a [u8], DecodeError> {
        let len = self.u32()? as usize;
        self.take(len)
    }

    fn request(&mut self) -> Result<Request, DecodeError> {
        Ok(Request {
            client: ClientId(self.u64()?),
            seq: RequestSeq(self.u64()?),
            payload: self.bytes()?,
        })
    }

    fn batch(&mut self) -> Result<Batch, DecodeError> {
        let stamp_ms = self.u64()?;
        let count = self.count(REQUEST_BYTES_MIN)?;
        let mut requests = Vec::with_capacity(count);
        for _ in 0..count {
            requests.push(self.request()?);
        }
        Ok(Batch::stamped(stamp_ms, requests))
    }

    /// Nothing after a kind byte 0, what `read` reads after a 1.
    fn option<T>(
        &mut self,
        read: impl FnOnce(&mut Self) -> Result<T, DecodeError>,
    ) -> Result<Option<T>, DecodeError> {
        match self.u8()? {
            0 => Ok(None),
            1 => read(self).map(Some),
            other => Err(DecodeError::BadKind(other)),
        }
    }

    fn snapshot(&mut self) -> Result<Snapshot, DecodeError> {
        Ok(Snapshot {
            next_instance: Instance(self.u64()?),
            stamp_ms: self.u64()?,
            state: self.bytes()?,
            clients: self.clients()?,
        })
    }

    /// A snapshot chunk whose bytes lie within the state it says it is a piece of.
    fn chunk(&mut self) -> Result<SnapshotChunk, DecodeError> {
        let chunk = SnapshotChunk {
            next_instance: Instance(self.u64()?),
            stamp_ms: self.u64()?,
            state_bytes: self.u64()?,
            offset: self.u64()?,
            bytes: self.bytes()?,
            clients: self.option(Reader::clients)?,
        };
        let end = chunk.offset.checked_add(chunk.bytes.len() as u64);
        if end.is_none_or(|end| end > chunk.state_bytes) {
            return Err(DecodeError::Invalid);
        }
        Ok(chunk)
    }

    fn clients(&mut self) -> Result<ClientTable, DecodeError> {
        let count = self.count(8 + 8 + 4)?;
        let mut clients = ClientTable::new();
        for _ in 0..count {
            let client = ClientId(self.u64()?);
            let seq = RequestSeq(self.u64()?);
            clients.insert(client, (seq, self.bytes()?));
        }
        Ok(clients)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_accept_is_eighteen_bytes() {
        let mut out = Vec::new();
        encode(
            &Message::Accept {
                view: View(1),
                instance: Instance(2),
            },
            &mut out,
        );
        assert_eq!(out.len(), 26);
        assert_eq!(out[0], WIRE_VERSION);
        assert_eq!(out[9], TAG_ACCEPT);
    }

    #[test]
    fn the_epoch_travels_with_the_message_and_version_2_reads_as_epoch_0() {
        let accept = Message::Accept {
            view: View(1),
            instance: Instance(2),
        };
        let mut out = Vec::new();
        encode_in_epoch(Epoch(7), &accept, &mut out);
        assert_eq!(decode_in_epoch(&out), Ok((Epoch(7), accept.clone())));
        assert_eq!(decode(&out), Ok(accept.clone()));
        // Version 2: the same message without the epoch.
        let mut old = vec![WIRE_VERSION_WITHOUT_EPOCH];
        old.extend_from_slice(&out[9..]);
        assert_eq!(decode_in_epoch(&old), Ok((Epoch(0), accept)));
        // Version 2 has no Recovery messages.
        let mut recovery = Vec::new();
        encode(&Message::Recovery { epoch: Epoch(3) }, &mut recovery);
        let mut old = vec![WIRE_VERSION_WITHOUT_EPOCH];
        old.extend_from_slice(&recovery[9..]);
        assert_eq!(
            decode_in_epoch(&old),
            Err(DecodeError::UnknownTag(TAG_RECOVERY))
        );
    }

    /// Version 3 of `message`, as a node of that version sent it: a whole snapshot in a
    /// catch-up response, no cursor in a catch-up query.
    fn version_3(message: &Message) -> Vec<u8> {
        let mut out = vec![WIRE_VERSION_WHOLE_SNAPSHOT];
        put_u64(&mut out, 0);
        match message {
            Message::CatchUpQuery { from, to, .. } => {
                out.push(TAG_CATCH_UP_QUERY);
                put_u64(&mut out, from.0);
                put_u64(&mut out, to.0);
            }
            Message::CatchUpResponse { view, .. } => {
                out.push(TAG_CATCH_UP_RESPONSE);
                put_u64(&mut out, view.0);
            }
            other => panic!("not a catch-up message: {other:?}"),
        }
        out
    }

    #[test]
    fn a_version_3_snapshot_reads_as_its_one_and_last_piece() {
        let mut clients = ClientTable::new();
        clients.insert(ClientId(7), (RequestSeq(3), Bytes::from_static(b"+OK")));
        let snapshot = Snapshot {
            next_instance: Instance(10),
            stamp_ms: 1_000,
            state: Bytes::from_static(b"a state"),
            clients: clients.clone(),
        };
        let query = Message::CatchUpQuery {
            from: Instance(1),
            to: Instance(5),
            snapshot: None,
        };
        assert_eq!(decode(&version_3(&query)), Ok(query));
        let mut old = version_3(&Message::CatchUpResponse {
            view: View(2),
            snapshot: None,
            decided: Vec::new(),
        });
        old.push(1);
        put_snapshot(&mut old, &snapshot);
        put_count(&mut old, 0);
        let piece = SnapshotChunk {
            next_instance: Instance(10),
            stamp_ms: 1_000,
            state_bytes: 7,
            offset: 0,
            bytes: Bytes::from_static(b"a state"),
            clients: Some(clients),
        };
        assert!(piece.is_last());
        assert_eq!(
            decode(&old),
            Ok(Message::CatchUpResponse {
                view: View(2),
                snapshot: Some(piece),
                decided: Vec::new(),
            })
        );
    }

    #[test]
    fn a_piece_beyond_its_state_is_refused() {
        let snapshot = Snapshot {
            state: Bytes::from_static(b"0123456789"),
            ..Snapshot::default()
        };
        let mut piece = SnapshotChunk::cut(&snapshot, 8, 4);
        assert_eq!((piece.offset, piece.bytes.len()), (8, 2));
        assert!(piece.is_last() && piece.clients.is_some());
        let middle = SnapshotChunk::cut(&snapshot, 4, 4);
        assert!(!middle.is_last() && middle.clients.is_none());
        let response = |piece: &SnapshotChunk| {
            let mut out = Vec::new();
            let message = Message::CatchUpResponse {
                view: View(1),
                snapshot: Some(piece.clone()),
                decided: Vec::new(),
            };
            encode(&message, &mut out);
            decode(&out)
        };
        assert!(response(&piece).is_ok());
        piece.state_bytes = 9;
        assert_eq!(response(&piece), Err(DecodeError::Invalid));
        piece.offset = u64::MAX;
        assert_eq!(response(&piece), Err(DecodeError::Invalid));
    }

    #[test]
    fn a_count_beyond_the_message_is_refused_before_allocating() {
        let mut out = vec![WIRE_VERSION];
        out.extend_from_slice(&0u64.to_le_bytes());
        out.push(TAG_FORWARD);
        out.extend_from_slice(&u32::MAX.to_le_bytes());
        assert_eq!(decode(&out), Err(DecodeError::Count(u32::MAX)));
    }

    #[test]
    fn every_record_decodes_to_itself_and_checks_its_version() {
        let request = Request {
            client: ClientId(7),
            seq: RequestSeq(3),
            payload: Bytes::from_static(b"set k v"),
        };
        let batch = Batch::stamped(1_000, vec![request]);
        let mut clients = ClientTable::new();
        clients.insert(ClientId(7), (RequestSeq(3), Bytes::from_static(b"+OK")));
        let records = [
            Record::View(View(4)),
            Record::Accepted {
                instance: Instance(9),
                view: View(4),
                batch: batch.clone(),
            },
            Record::Decided {
                instance: Instance(9),
                batch,
            },
            Record::Snapshot(Snapshot {
                next_instance: Instance(10),
                stamp_ms: 1_000,
                state: Bytes::from_static(b"state"),
                clients,
            }),
            Record::Truncate { below: Instance(5) },
        ];
        for record in records {
            let mut out = Vec::new();
            encode_record(&record, &mut out);
            assert_eq!(decode_record(&out), Ok(record));
            for cut in 0..out.len() {
                assert!(decode_record(&out[..cut]).is_err(), "a prefix decodes");
            }
            out[0] = RECORD_VERSION + 1;
            assert_eq!(
                decode_record(&out),
                Err(DecodeError::UnknownVersion(RECORD_VERSION + 1))
            );
        }
        assert_eq!(
            decode_record(&[RECORD_VERSION, 0]),
            Err(DecodeError::UnknownTag(0))
        );
    }

    #[test]
    fn versions_tags_and_trailing_bytes_are_checked() {
        assert_eq!(decode(&[]), Err(DecodeError::Truncated));
        assert_eq!(decode(&[9, 1]), Err(DecodeError::UnknownVersion(9)));
        let mut unknown = vec![WIRE_VERSION];
        unknown.extend_from_slice(&0u64.to_le_bytes());
        unknown.push(99);
        assert_eq!(decode(&unknown), Err(DecodeError::UnknownTag(99)));
        assert_eq!(decode(&unknown[..5]), Err(DecodeError::Truncated));
        let mut out = Vec::new();
        encode(
            &Message::CatchUpQuery {
                from: Instance(1),
                to: Instance(5),
                snapshot: None,
            },
            &mut out,
        );
        out.push(0);
        assert_eq!(decode(&out), Err(DecodeError::Trailing(1)));
    }
}
