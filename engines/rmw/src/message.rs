//! The messages of RMWPaxos (Algorithm 3), plus NACKs that make retries prompt.
//!
//! Every message names the register (key) it is about; a node runs one proposer and one
//! acceptor per register, so `(from, key)` and the attempt or round inside are enough to match a
//! reply to what is waiting for it.
use std::sync::Arc;

use logless_commands::value::Register;

use crate::ids::{AttemptId, Key, NodeId, ReqId, Round};
use crate::placement::StageId;

/// Whether a PREPARE is for a read (no acceptor state change) or a write (incremental round).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum PrepareKind {
    /// Read: the acceptor answers with its state and changes nothing.
    Read,
    /// Write: the acceptor acknowledges `(r_ack.n + 1, id)`.
    Write,
}

/// A message between a proposer and an acceptor of one register.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Message {
    /// Phase 1 with an incremental round (Algorithm 3, lines 4 and 35–42).
    Prepare {
        /// The register.
        key: Key,
        /// Read or write.
        kind: PrepareKind,
        /// The attempt; for writes also the id of the round the acceptor will acknowledge.
        attempt: AttemptId,
        /// The round whose value the proposer already holds: an ACK whose `r_voted` equals it
        /// carries no value.
        known_voted: Round,
        /// The stage of the ring the proposer sent it in: an acceptor at another stage does
        /// not decide on it (the fence, docs/ring.md §4). [`StageId::NONE`] without a
        /// placement.
        stage: StageId,
    },
    /// Phase 1 with an explicit round (lines 24 and 43–47).
    PaxosPrep {
        /// The register.
        key: Key,
        /// The round to acknowledge.
        round: Round,
        /// See [`Message::Prepare`].
        known_voted: Round,
        /// See [`Message::Prepare`].
        stage: StageId,
    },
    /// The acceptor's phase 1 reply (lines 39, 42, 47).
    Ack {
        /// The register.
        key: Key,
        /// Whether the acceptor acknowledged a new round for this attempt.
        inc: bool,
        /// The acknowledged round, whose id is the attempt this answers: the PREPARE's attempt
        /// (for reads `(r_ack.n, attempt)` as in line 42) or the PAXOS_PREP round's id.
        r_ack: Round,
        /// The round of the acceptor's last vote.
        r_voted: Round,
        /// The value voted in `r_voted`, omitted when the proposer said it holds it.
        value: Option<Arc<Register>>,
        /// The request that produced the value.
        req: Option<ReqId>,
        /// The request of the value it was built on (see [`Message::Vote`]).
        req_prev: Option<ReqId>,
    },
    /// Phase 2 (lines 14, 20 and 48–57).
    Vote {
        /// The register.
        key: Key,
        /// The round of the proposal.
        round: Round,
        /// The proposed value.
        value: Arc<Register>,
        /// The request this value carries (for a write-through, the one it had).
        req_cur: Option<ReqId>,
        /// The request of the value this one was built on, whose proposer is told with LEARNED
        /// that its request was chosen. A successor proposal names the request it follows; a
        /// write-through names the one the written value was built on (Algorithm 3 leaves it
        /// empty there, which loses the notification when only write-throughs choose a
        /// successor: see the acceptor's `on_vote`).
        req_prev: Option<ReqId>,
        /// See [`Message::Prepare`].
        stage: StageId,
    },
    /// The acceptor voted (line 57).
    Voted {
        /// The register.
        key: Key,
        /// The round it voted in.
        round: Round,
    },
    /// A rejected PAXOS_PREP or VOTE: the acceptor has acknowledged a higher round.
    Nack {
        /// The register.
        key: Key,
        /// The round that was rejected (a PAXOS_PREP's round or a VOTE's round).
        round: Round,
        /// The acceptor's current `r_ack`, so the proposer can aim higher at once.
        r_ack: Round,
    },
    /// The request `req` was chosen: a successor of its value was voted (line 52).
    Learned {
        /// The register.
        key: Key,
        /// The chosen request.
        req: ReqId,
    },
    /// Every acceptor was seen holding the dead value voted in `voted` (or nothing, above it):
    /// an acceptor that still holds exactly that vote forgets the register, raising its round
    /// floor first (see the `removal` module). No reply.
    Remove {
        /// The register.
        key: Key,
        /// The round of the dead value to forget.
        voted: Round,
    },
    /// The sender lost its acceptor state (a lost disk) and rejoins: the receiver's proposer
    /// stops counting any answer the sender gave before (see the `rejoin` module) and answers
    /// FENCED. About every register; it names the empty key.
    Fence {
        /// The empty key.
        key: Key,
    },
    /// The answer to FENCE: no answer from the rejoining node's earlier life counts any more at
    /// the sender's proposer. Names the empty key.
    Fenced {
        /// The empty key.
        key: Key,
    },
    /// The acceptor could not store what it decided about `key` for want of disk space (a
    /// register it does not hold needs a new slot): its reply (ACK, VOTED or NACK) is withheld
    /// and its state stays what it durably was. This says why, so that a proposer that finds
    /// no quorum with space answers at once rather than at its timeout.
    Full {
        /// The register.
        key: Key,
        /// The round of the withheld reply: an ACK's `r_ack` (whose id is the attempt), a
        /// VOTED's or a NACK's round.
        round: Round,
    },
    /// The acceptor refused a PREPARE, PAXOS_PREP or VOTE about `key` sent in an older stage of
    /// the ring than the one it installed (the fence, docs/ring.md §4): the proposer's
    /// quorums are no longer the ones that count. Nothing changed at the acceptor.
    Stale {
        /// The register.
        key: Key,
        /// The acceptor's stage.
        stage: StageId,
    },
}

impl Message {
    /// The register this message is about.
    pub fn key(&self) -> &Key {
        match self {
            Message::Prepare { key, .. }
            | Message::PaxosPrep { key, .. }
            | Message::Ack { key, .. }
            | Message::Vote { key, .. }
            | Message::Voted { key, .. }
            | Message::Nack { key, .. }
            | Message::Learned { key, .. }
            | Message::Remove { key, .. }
            | Message::Fence { key }
            | Message::Fenced { key }
            | Message::Full { key, .. }
            | Message::Stale { key, .. } => key,
        }
    }

    /// The stage a message for acceptors was sent in ([`StageId::NONE`] for the others, which
    /// are not fenced).
    #[inline]
    pub fn stage(&self) -> StageId {
        match self {
            Message::Prepare { stage, .. }
            | Message::PaxosPrep { stage, .. }
            | Message::Vote { stage, .. } => *stage,
            _ => StageId::NONE,
        }
    }

    /// Whether an acceptor decides on it and replies (the others go to the proposer, but for
    /// REMOVE, which the replica applies to its acceptor table directly).
    pub fn is_for_acceptor(&self) -> bool {
        matches!(
            self,
            Message::Prepare { .. } | Message::PaxosPrep { .. } | Message::Vote { .. }
        )
    }
}

/// A message with its destination.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Envelope {
    /// The destination node.
    pub to: NodeId,
    /// The message.
    pub message: Message,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_message_with_its_destination_fits_two_cache_lines() {
        // Every send and every reply moves one into an output vector: up to 128 bytes the move
        // is a few vector stores, beyond it a call to memcpy. The largest variant is ACK.
        assert_eq!(std::mem::size_of::<Message>(), 120);
        assert_eq!(std::mem::size_of::<Envelope>(), 128);
    }
}
