//! Requests, batches, snapshots and the messages replicas exchange.
//!
//! The messages follow JPaxos (seed 002 §II–§III): Prepare and Promise (PrepareOK) for the
//! view change, Propose and Accept for phase 2, where followers broadcast their Accept so that
//! every replica decides on its own as soon as it holds the Propose and a majority of Accepts;
//! Alive, the leader's heartbeat, which also names the leader's first undecided instance so a
//! lagging replica learns that it is behind; CatchUpQuery and CatchUpResponse for catching up
//! (a response carries a chunk of a snapshot when the instances asked for were truncated, and
//! the lagging replica pulls the rest chunk by chunk); and Forward,
//! which hands client requests that reached a follower to the leader; Recovery and
//! RecoveryAnswer, with which a replica restarted under EpochSS learns from its peers how far
//! the log has come (seed 002 §V-C).
use std::collections::BTreeMap;
use std::sync::Arc;

use bytes::Bytes;

use crate::ids::{ClientId, Epoch, Instance, NodeId, RequestSeq, View};

/// Bytes a request adds to a batch beyond its payload (client id, sequence number, length), for
/// the batch size limit.
pub const REQUEST_OVERHEAD_BYTES: usize = 8 + 8 + 4;

/// One client request: an opaque command for the state machine.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Request {
    /// Who sent it.
    pub client: ClientId,
    /// The client's sequence number for it.
    pub seq: RequestSeq,
    /// The command, opaque to the protocol.
    pub payload: Bytes,
}

impl Request {
    /// The bytes this request takes in a batch.
    pub fn size_bytes(&self) -> usize {
        REQUEST_OVERHEAD_BYTES + self.payload.len()
    }
}

/// The value of one instance: requests executed in order, and the stamp of the leader that
/// proposed it. An empty batch is the no-op a new leader proposes to fill a gap in the log.
///
/// The stamp is the proposing leader's clock (ms), raised to the highest stamp that leader has
/// seen (see [`Replica`](crate::replica::Replica)); the state machine evaluates expiry at it,
/// so every replica decides expiry the same way. It is part of the value: a batch proposed
/// again in a later view keeps its stamp.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Batch {
    stamp_ms: u64,
    requests: Arc<[Request]>,
}

impl Batch {
    /// A batch of `requests`, in execution order, stamped 0 (for tests and no-ops).
    pub fn new(requests: Vec<Request>) -> Batch {
        Batch::stamped(0, requests)
    }

    /// A batch of `requests` stamped `stamp_ms` by its leader.
    pub fn stamped(stamp_ms: u64, requests: Vec<Request>) -> Batch {
        Batch {
            stamp_ms,
            requests: requests.into(),
        }
    }

    /// The proposing leader's stamp.
    pub fn stamp_ms(&self) -> u64 {
        self.stamp_ms
    }

    /// The no-op: a batch of no requests.
    pub fn noop() -> Batch {
        Batch::default()
    }

    /// Whether this is the no-op.
    pub fn is_noop(&self) -> bool {
        self.requests.is_empty()
    }

    /// The requests, in execution order.
    pub fn requests(&self) -> &[Request] {
        &self.requests
    }

    /// The bytes the batch takes in the log.
    pub fn size_bytes(&self) -> usize {
        8 + 4 + self.requests.iter().map(Request::size_bytes).sum::<usize>()
    }
}

/// The client table (seed 002's Responses map): per client, the sequence number of its last
/// executed request and that request's reply. Replicated: every replica builds the same table by
/// executing the same log, and a snapshot carries it.
pub type ClientTable = BTreeMap<ClientId, (RequestSeq, Bytes)>;

/// A snapshot of the state machine after executing every instance below `next_instance`,
/// extended with the protocol's metadata (the client table).
///
/// Snapshots are taken only between instances (seed 002 allows any operation; one instance is
/// at most one batch, so the difference is small and the metadata simpler).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Snapshot {
    /// The first instance the snapshot does not cover.
    pub next_instance: Instance,
    /// The execution stamp reached: the highest batch stamp below `next_instance` (execution
    /// never goes back in time, see [`StateMachine::begin_batch`]).
    ///
    /// [`StateMachine::begin_batch`]: crate::state_machine::StateMachine::begin_batch
    pub stamp_ms: u64,
    /// The state machine's own encoding of its state.
    pub state: Bytes,
    /// The client table at that point.
    pub clients: ClientTable,
}

impl Snapshot {
    /// The bytes the snapshot takes (the state and the client table), for the snapshot policy.
    pub fn size_bytes(&self) -> usize {
        8 + 8
            + self.state.len()
            + self
                .clients
                .values()
                .map(|(_, reply)| 20 + reply.len())
                .sum::<usize>()
    }
}

/// A piece of a snapshot's state on its way to a lagging replica ([`Message::CatchUpResponse`]).
///
/// A snapshot can be far larger than one message may be (the transport bounds its frames), so
/// its state travels in pieces of at most [`Config::snapshot_chunk_bytes`], each one asked for
/// by the lagging replica ([`ChunkCursor`]): the sender never queues more than one piece, and a
/// piece lost is asked for again. The last piece carries the client table, and only then is the
/// snapshot installed.
///
/// [`Config::snapshot_chunk_bytes`]: crate::config::Config::snapshot_chunk_bytes
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct SnapshotChunk {
    /// The snapshot's first instance not covered ([`Snapshot::next_instance`]).
    pub next_instance: Instance,
    /// The snapshot's execution stamp ([`Snapshot::stamp_ms`]).
    pub stamp_ms: u64,
    /// The length of the snapshot's whole state.
    pub state_bytes: u64,
    /// Where in the state these bytes start.
    pub offset: u64,
    /// The bytes of the state from `offset` on.
    pub bytes: Bytes,
    /// The snapshot's client table, on the last piece only (the one whose bytes end the state).
    pub clients: Option<ClientTable>,
}

impl SnapshotChunk {
    /// Whether this piece ends the state.
    pub fn is_last(&self) -> bool {
        self.offset.saturating_add(self.bytes.len() as u64) == self.state_bytes
    }

    /// The piece of `snapshot` whose state starts at `offset` (the end of the state if beyond
    /// it) and takes at most `chunk_bytes`; the last piece carries the client table.
    pub fn cut(snapshot: &Snapshot, offset: u64, chunk_bytes: usize) -> SnapshotChunk {
        let len = snapshot.state.len();
        let start = usize::try_from(offset).unwrap_or(len).min(len);
        let end = start.saturating_add(chunk_bytes.max(1)).min(len);
        SnapshotChunk {
            next_instance: snapshot.next_instance,
            stamp_ms: snapshot.stamp_ms,
            state_bytes: len as u64,
            offset: start as u64,
            bytes: snapshot.state.slice(start..end),
            clients: (end == len).then(|| snapshot.clients.clone()),
        }
    }
}

/// Where a lagging replica stands in receiving a snapshot ([`Message::CatchUpQuery`]): the
/// snapshot it holds the first bytes of, and how many.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ChunkCursor {
    /// The snapshot's first instance not covered: a responder whose snapshot is another one
    /// (a newer one since) starts it from the beginning instead.
    pub next_instance: Instance,
    /// The state bytes received so far: the next piece starts here.
    pub offset: u64,
}

/// What a promising replica knows about one instance.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum PromisedEntry {
    /// It voted for `batch` in `view` (its last vote in that instance).
    Voted {
        /// The view of the vote.
        view: View,
        /// The batch voted for.
        batch: Batch,
    },
    /// It knows the instance decided `batch`.
    Decided(Batch),
}

/// A message between replicas.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Message {
    /// Phase 1a: the leader of `view` asks for promises and for every vote from instance
    /// `first_undecided` on.
    Prepare {
        /// The new view.
        view: View,
        /// The sender's first undecided instance.
        first_undecided: Instance,
    },
    /// Phase 1b (PrepareOK): the sender promises to take part in no lower view, and reports
    /// what it knows of every instance from the Prepare's `first_undecided` on.
    Promise {
        /// The view promised.
        view: View,
        /// The sender's first instance still in its log: when it is above the new leader's
        /// first undecided instance, the instances between were decided and truncated, and the
        /// leader must catch up before the promise covers its log.
        log_start: Instance,
        /// The sender's knowledge, per instance, in instance order.
        entries: Vec<(Instance, PromisedEntry)>,
    },
    /// Phase 2a: the leader of `view` proposes `batch` for `instance` (it has persisted its own
    /// vote, so the Propose counts as the leader's Accept).
    Propose {
        /// The leader's view.
        view: View,
        /// The instance.
        instance: Instance,
        /// The proposed batch.
        batch: Batch,
    },
    /// Phase 2b, broadcast to every replica: the sender voted in `instance` for the batch
    /// proposed in `view`.
    Accept {
        /// The view of the Propose voted for.
        view: View,
        /// The instance.
        instance: Instance,
    },
    /// The leader's heartbeat (failure detector), naming its first undecided instance.
    Alive {
        /// The leader's view.
        view: View,
        /// Every instance below this one is decided.
        first_undecided: Instance,
    },
    /// A lagging replica asks for the decided instances in `from..to` (seed 002 §III-C); a
    /// `from` below the responder's log start asks for its snapshot too, one piece at a time.
    CatchUpQuery {
        /// The first instance missing.
        from: Instance,
        /// The instance after the last one missing.
        to: Instance,
        /// The snapshot the sender is receiving from the responder, if any, and how far: the
        /// piece wanted is the next one.
        snapshot: Option<ChunkCursor>,
    },
    /// The answer to a [`Message::CatchUpQuery`].
    CatchUpResponse {
        /// The responder's view, which the lagging replica adopts if higher.
        view: View,
        /// A piece of the responder's last snapshot, when instances asked for were truncated.
        snapshot: Option<SnapshotChunk>,
        /// Decided instances asked for, in instance order (possibly fewer than asked, up to a
        /// limit per response); with a snapshot, only with its last piece.
        decided: Vec<(Instance, Batch)>,
    },
    /// Client requests that reached a follower, handed to the leader for ordering.
    Forward {
        /// The requests.
        requests: Vec<Request>,
    },
    /// EpochSS (seed 002 §V-C): the sender restarted in `epoch` without its state and asks
    /// every replica to note that epoch (and to drop its messages from earlier ones) and to
    /// say how far the log has come. It is sent again until enough replicas answered.
    Recovery {
        /// The sender's new epoch.
        epoch: Epoch,
    },
    /// The answer to a [`Message::Recovery`].
    RecoveryAnswer {
        /// The epoch answered: the responder drops the recovering replica's messages from
        /// every earlier one.
        epoch: Epoch,
        /// The responder's view.
        view: View,
        /// Whether the responder leads that view (its phase 1 is done).
        leading: bool,
        /// The instance after the highest one the responder knows decided: the recovering
        /// replica catches up at least to here before it takes part.
        decided_below: Instance,
    },
}

/// A message with its destination.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Envelope {
    /// The destination.
    pub to: NodeId,
    /// The message.
    pub message: Message,
}

/// The answer to a client request, produced by the replica that received the request.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ClientReply {
    /// The client.
    pub client: ClientId,
    /// The request answered.
    pub seq: RequestSeq,
    /// The state machine's reply.
    pub reply: Bytes,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_count_payloads_and_overheads() {
        let request = Request {
            client: ClientId(1),
            seq: RequestSeq(1),
            payload: Bytes::from_static(b"abc"),
        };
        assert_eq!(request.size_bytes(), 23);
        let batch = Batch::new(vec![request.clone(), request]);
        assert_eq!(batch.size_bytes(), 58);
        assert!(!batch.is_noop());
        assert!(Batch::noop().is_noop());
    }
}
