//! One group's ordered stream: what its Multi-Paxos log delivers, batch by batch.
//!
//! Each group runs a `logless_multipaxos` [`Replica`](logless_multipaxos::replica::Replica)
//! whose state machine is a [`Stream`]: it executes nothing, it records every batch the log
//! executes (with the batch's execution stamp) for the merge to take. The log's client table
//! has already left out requests decided twice, so every request reaches the stream once.
//! Skip requests (see [`crate::groups`]) advance the stream's position and carry no command;
//! they are dropped here, so a batch that held only a skip arrives with no requests.
//!
//! # The stream's state: the batches since the latest durable cut
//! A group's log takes its own snapshots and truncates itself below the previous one (the log
//! engine's policy, [`crate::config::Config::group_config`]), wherever the merges and the
//! service stand. What the log drops, the stream keeps: it *retains* every batch its log
//! delivered from the group's position in the latest durable cut on ([`Stream::release`]
//! drops the batches below it once the runtime has made the cut durable), and its snapshot is
//! those batches. So a group's durable state, its snapshot and the log after it, always holds
//! every batch from the durable cut's position on: what a replica restarting from the cut needs
//! ([`crate::replica::Replica::recover_from`]), and no more than the batches since the cut plus
//! the log engine's own bound. The argument is in `docs/psmr-snapshots.md`, "Truncation".
//!
//! # The stream carries its cut
//! The stream also keeps the durable cut it retains from, with the service's state at it
//! ([`DurableCut`]), and its snapshot carries both. So a group's durable state is
//! self-contained: its snapshot's cut, then every batch from the cut's position on (the
//! snapshot's, then the log's). A peer catching up past this replica's truncation gets that
//! snapshot through the log engine's own transfer (in pieces, asked for again when lost,
//! from another sender after timeouts), and with it the cut and state its service needs to
//! skip the batches truncated ([`crate::replica::Replica::install`]; `docs/psmr-snapshots.md`,
//! "Catch-up past a peer's truncation").
use std::collections::VecDeque;

use bytes::Bytes;
use logless_multipaxos::ids::{ClientId, Instance, RequestSeq};
use logless_multipaxos::message::Request;
use logless_multipaxos::state_machine::StateMachine;

use crate::cut::{Cut, CutDecodeError, DurableCut, Reader};

/// The client a group's leader proposes skips as. Client proxies must not use it.
pub const SKIP_CLIENT: ClientId = ClientId(u64::MAX);

/// One batch a group's log decided and executed, as the merge sees it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct DeliveredBatch {
    /// The batch's instance in its group's log.
    pub instance: Instance,
    /// The batch's execution stamp: its leader's stamp raised to the highest before it in the
    /// log, so it never goes down along a stream, and every replica computes the same one.
    pub stamp_ms: u64,
    /// The batch's commands, in order (no skips, no requests executed before).
    pub requests: Vec<Request>,
}

impl DeliveredBatch {
    /// The bytes the batch's commands take, as the periodic cut counts them.
    pub fn size_bytes(&self) -> u64 {
        (self.requests.iter())
            .map(|r| 16 + r.payload.len() as u64)
            .sum::<u64>()
            + 16
    }
}

/// The state machine of a group's log: it hands the batches on instead of executing them, and
/// retains them until a durable cut covers them (see the module docs).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Stream {
    /// Every batch from the latest durable cut's position on, in log order.
    batches: VecDeque<DeliveredBatch>,
    /// How many of `batches` (a prefix) [`Stream::take`] handed on already.
    taken: usize,
    /// The newest durable cut the stream was released at or restored with: every batch from
    /// its position on is retained (or still to come from the log).
    cut: Option<DurableCut>,
}

impl Stream {
    /// Takes every batch delivered since the last call, in log order.
    pub fn take(&mut self) -> VecDeque<DeliveredBatch> {
        let fresh = self.batches.range(self.taken..).cloned().collect();
        self.taken = self.batches.len();
        fresh
    }

    /// `durable` is written: the stream carries it from now on, and drops the retained batches
    /// below `instance` that it handed on already (`durable` covers them: its position in this
    /// group is at or above `instance`). A cut older than the one the stream carries changes
    /// nothing: the stream's cut only goes forward.
    pub fn release(&mut self, durable: &DurableCut, instance: Instance) {
        if self
            .cut
            .as_ref()
            .is_some_and(|c| c.cut.is_after(&durable.cut))
        {
            return;
        }
        if self.cut.as_ref().map(|c| &c.cut) != Some(&durable.cut) {
            self.cut = Some(durable.clone());
        }
        self.release_below(instance);
    }

    /// The durable cut the stream retains from, if it was released at one or restored with one.
    pub fn cut(&self) -> Option<&DurableCut> {
        self.cut.as_ref()
    }

    /// Hands every retained batch on again at the next [`Stream::take`] (the replica restarted
    /// its service from a cut, and drops what the cut covers).
    pub fn rewind(&mut self) {
        self.taken = 0;
    }

    fn release_below(&mut self, instance: Instance) {
        while self.taken > 0 && self.batches.front().is_some_and(|b| b.instance < instance) {
            self.batches.pop_front();
            self.taken -= 1;
        }
    }

    /// How many batches the stream retains, and their size in bytes.
    pub fn retained(&self) -> (usize, u64) {
        let bytes = self.batches.iter().map(DeliveredBatch::size_bytes).sum();
        (self.batches.len(), bytes)
    }

    /// The first instance the stream retains, if it retains any.
    pub fn retained_from(&self) -> Option<Instance> {
        self.batches.front().map(|b| b.instance)
    }
}

impl StateMachine for Stream {
    fn begin_batch(&mut self, instance: Instance, stamp_ms: u64) {
        self.batches.push_back(DeliveredBatch {
            instance,
            stamp_ms,
            requests: Vec::new(),
        });
    }

    fn execute(&mut self, request: &Request) -> Bytes {
        if request.client != SKIP_CLIENT {
            let batch = self
                .batches
                .back_mut()
                .expect("the log begins a batch before executing its requests");
            batch.requests.push(request.clone());
        }
        Bytes::new()
    }

    /// The retained batches: count (u32), then per batch its instance, stamp (u64 each),
    /// request count (u32) and per request its client, number (u64 each), payload length (u32)
    /// and payload; then, if the stream carries a cut, its length (u32), the cut
    /// ([`Cut::encode`]), the state's length (u64) and the state; little-endian.
    fn snapshot(&self) -> Bytes {
        let mut out = Vec::new();
        put_u32(&mut out, self.batches.len());
        for batch in &self.batches {
            out.extend_from_slice(&batch.instance.0.to_le_bytes());
            out.extend_from_slice(&batch.stamp_ms.to_le_bytes());
            put_u32(&mut out, batch.requests.len());
            for request in &batch.requests {
                out.extend_from_slice(&request.client.0.to_le_bytes());
                out.extend_from_slice(&request.seq.0.to_le_bytes());
                put_u32(&mut out, request.payload.len());
                out.extend_from_slice(&request.payload);
            }
        }
        if let Some(durable) = &self.cut {
            let mut cut = Vec::new();
            durable.cut.encode(&mut cut);
            put_u32(&mut out, cut.len());
            out.extend_from_slice(&cut);
            out.extend_from_slice(&(durable.state.len() as u64).to_le_bytes());
            out.extend_from_slice(&durable.state);
        }
        Bytes::from(out)
    }

    /// Takes a snapshot's batches, from this replica's store at a restart or from a peer's
    /// catch-up, and hands them all on again (the replica drops those it had). The batches
    /// this stream retains below the snapshot's first are kept: a peer's snapshot starts at
    /// the peer's durable cut, which may be above this replica's. The stream carries the
    /// newer of its cut and the snapshot's.
    ///
    /// # Panics
    /// If the bytes are not a [`Stream::snapshot`] (a store or peer outside the fault model).
    fn restore(&mut self, snapshot: &Bytes) {
        let (restored, cut) = decode(snapshot)
            .unwrap_or_else(|e| panic!("a group's stream snapshot does not decode: {e}"));
        let first = restored.front().map(|b| b.instance);
        let kept = (self.batches.iter())
            .take_while(|b| first.is_none_or(|first| b.instance < first))
            .count();
        self.batches.truncate(kept);
        self.taken = self.taken.min(kept);
        self.batches.extend(restored);
        if let Some(cut) = cut {
            if self
                .cut
                .as_ref()
                .is_none_or(|own| cut.cut.is_after(&own.cut))
            {
                self.cut = Some(cut);
            }
        }
    }
}

fn put_u32(out: &mut Vec<u8>, n: usize) {
    let n = u32::try_from(n).expect("a stream's counts fit u32");
    out.extend_from_slice(&n.to_le_bytes());
}

/// A stream snapshot's batches, and its cut if it carries one.
type Decoded = (VecDeque<DeliveredBatch>, Option<DurableCut>);

fn decode(bytes: &[u8]) -> Result<Decoded, CutDecodeError> {
    let mut reader = Reader(bytes);
    let count = u32::from_le_bytes(reader.take()?);
    let mut batches = VecDeque::new();
    for _ in 0..count {
        let instance = Instance(u64::from_le_bytes(reader.take()?));
        let stamp_ms = u64::from_le_bytes(reader.take()?);
        let requests = u32::from_le_bytes(reader.take()?);
        let mut batch = DeliveredBatch {
            instance,
            stamp_ms,
            requests: Vec::new(),
        };
        for _ in 0..requests {
            let client = ClientId(u64::from_le_bytes(reader.take()?));
            let seq = RequestSeq(u64::from_le_bytes(reader.take()?));
            let len = u32::from_le_bytes(reader.take()?);
            let payload = Bytes::copy_from_slice(reader.take_slice(len)?);
            batch.requests.push(Request {
                client,
                seq,
                payload,
            });
        }
        batches.push_back(batch);
    }
    let mut cut = None;
    if !reader.0.is_empty() {
        let len = u32::from_le_bytes(reader.take()?);
        let decoded = Cut::decode(reader.take_slice(len)?)?;
        let len = usize::try_from(u64::from_le_bytes(reader.take()?))
            .map_err(|_| CutDecodeError::Short)?;
        let state = reader.0.get(..len).ok_or(CutDecodeError::Short)?;
        let state = Bytes::copy_from_slice(state);
        reader.0 = &reader.0[len..];
        cut = Some(DurableCut {
            cut: decoded,
            state,
        });
    }
    reader.finish()?;
    Ok((batches, cut))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(seq: u64) -> Request {
        Request {
            client: ClientId(7),
            seq: RequestSeq(seq),
            payload: Bytes::from(vec![seq as u8; 3]),
        }
    }

    fn stream_of(instances: std::ops::Range<u64>) -> Stream {
        let mut stream = Stream::default();
        for i in instances {
            stream.begin_batch(Instance(i), i * 10);
            stream.execute(&request(i));
        }
        stream
    }

    #[test]
    fn batches_stay_until_a_durable_cut_covers_them_and_survive_the_snapshot() {
        let mut stream = stream_of(0..4);
        assert_eq!(stream.take().len(), 4);
        assert!(stream.take().is_empty(), "handed on once");
        stream.release_below(Instance(2));
        assert_eq!(stream.retained_from(), Some(Instance(2)));
        assert_eq!(stream.retained().0, 2);
        let mut restarted = Stream::default();
        restarted.restore(&stream.snapshot());
        let again: Vec<u64> = restarted.take().iter().map(|b| b.instance.0).collect();
        assert_eq!(again, [2, 3], "handed on again after a restart");
        assert_eq!(restarted, stream);
    }

    fn durable(all: u64, state: &'static [u8]) -> DurableCut {
        let position = crate::cut::Position {
            instance: Instance(all),
            requests: 0,
        };
        DurableCut {
            cut: Cut {
                positions: [(logless_service::Group::All, position)].into(),
                ..Cut::default()
            },
            state: Bytes::from_static(state),
        }
    }

    #[test]
    fn the_stream_carries_its_newest_cut_through_its_snapshot() {
        let mut stream = stream_of(0..4);
        stream.take();
        stream.release(&durable(2, b"two"), Instance(2));
        assert_eq!(stream.retained_from(), Some(Instance(2)));
        stream.release(&durable(1, b"one"), Instance(1));
        assert_eq!(
            stream.cut(),
            Some(&durable(2, b"two")),
            "an older cut changes nothing"
        );
        let mut restarted = Stream::default();
        restarted.restore(&stream.snapshot());
        assert_eq!(restarted.cut(), Some(&durable(2, b"two")));
        // A peer's snapshot with a newer cut replaces it; one with an older cut does not.
        let mut peer = stream_of(3..6);
        peer.release(&durable(3, b"three"), Instance(3));
        restarted.restore(&peer.snapshot());
        assert_eq!(restarted.cut(), Some(&durable(3, b"three")));
        restarted.restore(&stream.snapshot());
        assert_eq!(restarted.cut(), Some(&durable(3, b"three")));
        restarted.rewind();
        assert_eq!(restarted.take().len(), restarted.retained().0, "all again");
        let bytes = peer.snapshot();
        assert_eq!(
            decode(&bytes[..bytes.len() - 1]),
            Err(CutDecodeError::Short)
        );
    }

    #[test]
    fn a_peers_snapshot_keeps_the_batches_below_it_and_bad_bytes_are_refused() {
        let mut stream = stream_of(0..3);
        stream.take();
        let peer = stream_of(2..6);
        stream.restore(&peer.snapshot());
        let kept: Vec<u64> = stream.batches.iter().map(|b| b.instance.0).collect();
        assert_eq!(kept, [0, 1, 2, 3, 4, 5]);
        let fresh: Vec<u64> = stream.take().iter().map(|b| b.instance.0).collect();
        assert_eq!(fresh, [2, 3, 4, 5]);
        let bytes = peer.snapshot();
        assert_eq!(
            decode(&bytes[..bytes.len() - 1]),
            Err(CutDecodeError::Short)
        );
    }
}
