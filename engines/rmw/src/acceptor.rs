//! The acceptor of RMWPaxos: a pure transition from (register state, message) to (new state,
//! replies).
//!
//! The acceptor is the distributed storage of a register. Its handlers never send anything
//! themselves: they hand their decision to a `Decision`. [`on_message`] returns it as an
//! [`AcceptorStep`], whose replies may only leave after the new state is durable; the replica
//! decides straight into a [`PersistBatch`](crate::persist::PersistBatch), which enforces that.
//!
//! Deviation from the letter of Algorithm 3, taken from §5.8 (fast writes): after voting in round
//! `r` the acceptor sets `r_ack` to `(r.n + 1, r.id)` instead of `r`, as if the proposer of `r`
//! had prepared its next round already.
use std::sync::Arc;

use logless_commands::value::Register;
use thiserror::Error;

use crate::codec::{put_req, put_round, CodecError, Reader};
use crate::ids::{AttemptId, Key, NodeId, ReqId, Round};
use crate::message::{Envelope, Message, PrepareKind};

/// The persistent state of one register at one acceptor.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Default, PartialOrd, Ord)]
pub struct AcceptorState {
    /// The highest acknowledged round: the acceptor votes in no lower round.
    pub r_ack: Round,
    /// The round of the last vote (⊥ if none).
    pub r_voted: Round,
    /// The value voted in `r_voted` (absent register if none).
    pub value: Arc<Register>,
    /// The request that produced `value`.
    pub req: Option<ReqId>,
    /// The request of the value that `value` was built on, as the successor proposal named it.
    /// Kept so that a write-through of `value` names it too: every acceptor that votes for a
    /// successor of a request's value, in whatever round, tells that request's proposer.
    pub req_prev: Option<ReqId>,
}

/// What an acceptor decided for one message: always one reply to the sender, and for a vote
/// that builds on another proposer's request, a LEARNED to that proposer.
#[derive(Debug, PartialEq, Eq)]
pub struct AcceptorStep {
    /// The new state, if it changed: it must be persisted before the replies leave.
    pub next: Option<AcceptorState>,
    /// The LEARNED notification, sealed until `next` is durable; it goes out before `reply`.
    pub learned: Option<Envelope>,
    /// ACK, NACK or VOTED to the sender, sealed until `next` is durable.
    pub reply: Envelope,
}

/// What a handler hands its whole decision to: the new state if it changed, the LEARNED if
/// any, and the reply. [`on_acceptor_message`] makes an [`AcceptorStep`] of it; a
/// [`PersistBatch`](crate::persist::PersistBatch) takes the parts in directly, so that the
/// replica's hot path does not move a whole step (a few hundred bytes) per message.
pub(crate) trait Decision {
    /// What deciding gives the caller.
    type Output;
    /// Takes the decision.
    fn decided(
        self,
        next: Option<AcceptorState>,
        learned: Option<Envelope>,
        reply: Envelope,
    ) -> Self::Output;
}

/// The decision as an [`AcceptorStep`].
struct Step;

impl Decision for Step {
    type Output = AcceptorStep;
    #[inline]
    fn decided(
        self,
        next: Option<AcceptorState>,
        learned: Option<Envelope>,
        reply: Envelope,
    ) -> AcceptorStep {
        AcceptorStep {
            next,
            learned,
            reply,
        }
    }
}

impl AcceptorStep {
    /// The replies in the order they leave.
    pub fn replies(&self) -> impl Iterator<Item = &Envelope> {
        self.learned.iter().chain(std::iter::once(&self.reply))
    }
}

/// Handles one message addressed to an acceptor. Messages that are not for acceptors give
/// `None`.
pub fn on_message(state: &AcceptorState, from: NodeId, message: &Message) -> Option<AcceptorStep> {
    message
        .is_for_acceptor()
        .then(|| on_acceptor_message(state, from, message))
}

/// [`on_message`] for a message known to be for acceptors ([`Message::is_for_acceptor`]). (The
/// replica's hot path decides straight into its persist batch instead; see
/// [`PersistBatch::decide`](crate::persist::PersistBatch::decide).)
///
/// # Panics
/// If the message is not for acceptors.
pub fn on_acceptor_message(state: &AcceptorState, from: NodeId, message: &Message) -> AcceptorStep {
    decide(state, from, message, Step)
}

/// Decides on one message for acceptors and hands the decision to `out`.
///
/// This and the handlers are always inlined, so that the parts of a decision are built where
/// `out` keeps them rather than copied through temporaries (measured: a few hundred bytes per
/// message otherwise, on both the replica's path and the pure one).
///
/// # Panics
/// If the message is not for acceptors.
#[inline(always)]
pub(crate) fn decide<D: Decision>(
    state: &AcceptorState,
    from: NodeId,
    message: &Message,
    out: D,
) -> D::Output {
    match message {
        Message::Prepare {
            key,
            kind,
            attempt,
            known_voted,
            ..
        } => on_prepare(state, from, key, *kind, *attempt, *known_voted, out),
        Message::PaxosPrep {
            key,
            round,
            known_voted,
            ..
        } => on_paxos_prep(state, from, key, *round, *known_voted, out),
        Message::Vote {
            key,
            round,
            value,
            req_cur,
            req_prev,
            ..
        } => on_vote(state, from, key, *round, value, *req_cur, *req_prev, out),
        Message::Ack { .. }
        | Message::Voted { .. }
        | Message::Nack { .. }
        | Message::Learned { .. }
        | Message::Remove { .. }
        | Message::Fence { .. }
        | Message::Fenced { .. }
        | Message::Full { .. }
        | Message::Stale { .. } => panic!("not a message for acceptors: {message:?}"),
    }
}

/// Whether deciding on `message` for an acceptor whose last vote was in `r_voted` reads the
/// state's value: a VOTE replaces it, and a read's ACK leaves it out when the proposer knows
/// the value of that round already (see `ack`). A caller that keeps values elsewhere (the
/// replica's table, see `held`) may decide the others on a state with any value in its place.
#[inline]
pub(crate) fn reads_value(r_voted: Round, message: &Message) -> bool {
    match message {
        Message::Vote { .. } => false,
        Message::Prepare {
            kind: PrepareKind::Read,
            known_voted,
            ..
        } => *known_voted != r_voted,
        _ => true,
    }
}

fn ack(
    state: &AcceptorState,
    to: NodeId,
    key: &Key,
    inc: bool,
    r_ack: Round,
    known_voted: Round,
) -> Envelope {
    // The value is left out when the proposer holds it already: one round has one value.
    let value = (state.r_voted != known_voted).then(|| state.value.clone());
    Envelope {
        to,
        message: Message::Ack {
            key: key.clone(),
            inc,
            r_ack,
            r_voted: state.r_voted,
            value,
            req: state.req,
            req_prev: state.req_prev,
        },
    }
}

fn nack(state: &AcceptorState, to: NodeId, key: &Key, round: Round) -> Envelope {
    Envelope {
        to,
        message: Message::Nack {
            key: key.clone(),
            round,
            r_ack: state.r_ack,
        },
    }
}

/// PREPARE: incremental phase 1 for writes, a state snapshot for reads.
#[inline(always)]
fn on_prepare<D: Decision>(
    state: &AcceptorState,
    from: NodeId,
    key: &Key,
    kind: PrepareKind,
    attempt: AttemptId,
    known_voted: Round,
    out: D,
) -> D::Output {
    match kind {
        PrepareKind::Write => {
            let r_ack = Round {
                n: state.r_ack.n.saturating_add(1),
                id: attempt,
            };
            let next = AcceptorState {
                r_ack,
                ..state.clone()
            };
            let reply = ack(&next, from, key, true, r_ack, known_voted);
            out.decided(Some(next), None, reply)
        }
        PrepareKind::Read => {
            let r_ack = Round {
                n: state.r_ack.n,
                id: attempt,
            };
            let reply = ack(state, from, key, false, r_ack, known_voted);
            out.decided(None, None, reply)
        }
    }
}

/// PAXOS_PREP: canonical phase 1 with an explicit round.
#[inline(always)]
fn on_paxos_prep<D: Decision>(
    state: &AcceptorState,
    from: NodeId,
    key: &Key,
    round: Round,
    known_voted: Round,
    out: D,
) -> D::Output {
    if round <= state.r_ack {
        return out.decided(None, None, nack(state, from, key, round));
    }
    let next = AcceptorState {
        r_ack: round,
        ..state.clone()
    };
    let reply = ack(&next, from, key, true, round, known_voted);
    out.decided(Some(next), None, reply)
}

/// VOTE: phase 2. Votes if no higher round was acknowledged, tells the previous proposer that
/// its request was chosen, and pre-acknowledges the proposer's next round.
#[allow(clippy::too_many_arguments)] // the VOTE's fields, taken apart by `decide`
#[inline(always)]
fn on_vote<D: Decision>(
    state: &AcceptorState,
    from: NodeId,
    key: &Key,
    round: Round,
    value: &Arc<Register>,
    req_cur: Option<ReqId>,
    req_prev: Option<ReqId>,
    out: D,
) -> D::Output {
    if round < state.r_ack {
        return out.decided(None, None, nack(state, from, key, round));
    }
    // The proposer of the previous request is told it was chosen, unless it also made the
    // current request: a proposer builds on its own request's value only once it knows that
    // request was chosen. The test is on the requests, not on who sends the VOTE: a proposer
    // writing another's value through may be the one whose request that value was built on.
    let same_proposer = |prev: &ReqId| req_cur.is_some_and(|c| c.proposer() == prev.proposer());
    let next = AcceptorState {
        r_ack: round.successor(),
        r_voted: round,
        value: value.clone(),
        req: req_cur,
        req_prev,
    };
    let learned = req_prev.filter(|p| !same_proposer(p)).map(|prev| Envelope {
        to: prev.proposer().node,
        message: Message::Learned {
            key: key.clone(),
            req: prev,
        },
    });
    let reply = Envelope {
        to: from,
        message: Message::Voted {
            key: key.clone(),
            round,
        },
    };
    out.decided(Some(next), learned, reply)
}

/// A persisted acceptor state that cannot be decoded.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum StateDecodeError {
    /// The record is shorter than its fixed part, or a flag byte or request id is invalid.
    #[error("acceptor state record truncated")]
    Truncated,
    /// The record was written by an unknown format version.
    #[error("unknown acceptor state format version {0}")]
    UnknownVersion(u8),
    /// The value inside does not decode.
    #[error("acceptor state value: {0}")]
    Value(String),
}

/// Version 2 added `req_prev`; version 1 records decode with none.
const STATE_FORMAT_VERSION: u8 = 2;

impl From<CodecError> for StateDecodeError {
    fn from(_: CodecError) -> StateDecodeError {
        StateDecodeError::Truncated
    }
}

impl AcceptorState {
    /// Whether the state holds a vote (`r_voted` above ⊥), whatever its value: a live one, a
    /// tombstone or an expired value. What a ring's data mover writes through: every register
    /// a listed majority of a moving slot's old replicas holds a vote of (docs/ring.md §4 "Dead
    /// registers"). A state without one holds only a promise, which the gaining node's round
    /// floor covers.
    pub fn holds_vote(&self) -> bool {
        self.r_voted != Round::BOTTOM
    }

    /// Encodes the state as a storage record: version, `r_ack`, `r_voted`, `req`, `req_prev`,
    /// value.
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.push(STATE_FORMAT_VERSION);
        put_round(out, self.r_ack);
        put_round(out, self.r_voted);
        put_req(out, self.req);
        put_req(out, self.req_prev);
        self.value.encode(out);
    }

    /// Decodes a record written by [`AcceptorState::encode`]. Never panics.
    pub fn decode(bytes: &[u8]) -> Result<AcceptorState, StateDecodeError> {
        let mut r = Reader::new(bytes);
        let version = r.u8()?;
        if !(1..=STATE_FORMAT_VERSION).contains(&version) {
            return Err(StateDecodeError::UnknownVersion(version));
        }
        let r_ack = r.round()?;
        let r_voted = r.round()?;
        let req = r.req()?;
        let req_prev = if version >= 2 { r.req()? } else { None };
        let value =
            Register::decode(r.rest()).map_err(|e| StateDecodeError::Value(e.to_string()))?;
        Ok(AcceptorState {
            r_ack,
            r_voted,
            value: Arc::new(value),
            req,
            req_prev,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::ProposerId;
    use logless_commands::value::Data;

    fn state() -> AcceptorState {
        let id = AttemptId {
            proposer: ProposerId {
                node: NodeId(3),
                incarnation: 2,
            },
            seq: 9,
        };
        AcceptorState {
            r_ack: Round { n: 8, id },
            r_voted: Round { n: 7, id },
            value: Arc::new(Register {
                data: Data::Int(42),
                expires_at_ms: None,
                fence: 0,
            }),
            req: Some(ReqId::new(id).unwrap()),
            req_prev: Some(ReqId::new(AttemptId { seq: 4, ..id }).unwrap()),
        }
    }

    #[test]
    fn a_decision_that_reads_no_value_is_the_same_whatever_the_value() {
        use crate::placement::StageId;
        let key = Key::new("k");
        let other = Arc::new(Register {
            data: Data::Str(bytes::Bytes::from_static(b"other")),
            expires_at_ms: Some(3),
            fence: 5,
        });
        let s = state();
        let attempt = AttemptId {
            seq: 99,
            ..s.r_ack.id
        };
        let prepare = |kind, known_voted| Message::Prepare {
            key: key.clone(),
            kind,
            attempt,
            known_voted,
            stage: StageId::NONE,
        };
        let vote = |round| Message::Vote {
            key: key.clone(),
            round,
            value: other.clone(),
            req_cur: ReqId::new(attempt),
            req_prev: s.req,
            stage: StageId::NONE,
        };
        let messages = [
            vote(s.r_ack),
            vote(Round { n: 1, ..s.r_ack }),
            prepare(PrepareKind::Read, s.r_voted),
            prepare(PrepareKind::Read, Round::BOTTOM),
            prepare(PrepareKind::Write, s.r_voted),
            Message::PaxosPrep {
                key: key.clone(),
                round: Round { n: 20, ..s.r_ack },
                known_voted: s.r_voted,
                stage: StageId::NONE,
            },
        ];
        let mut unread = 0;
        for message in &messages {
            let with_other = AcceptorState {
                value: other.clone(),
                ..state()
            };
            let same = on_acceptor_message(&s, NodeId(1), message)
                == on_acceptor_message(&with_other, NodeId(1), message);
            if !reads_value(s.r_voted, message) {
                assert!(same, "{message:?} read the value");
                unread += 1;
            } else {
                assert!(!same, "{message:?} is said to read the value and does not");
            }
        }
        assert_eq!(unread, 3);
    }

    #[test]
    fn a_version_1_state_decodes_without_req_prev() {
        let old = state();
        let mut v1 = vec![1];
        put_round(&mut v1, old.r_ack);
        put_round(&mut v1, old.r_voted);
        put_req(&mut v1, old.req);
        old.value.encode(&mut v1);
        let expected = AcceptorState {
            req_prev: None,
            ..state()
        };
        assert_eq!(AcceptorState::decode(&v1), Ok(expected));
    }

    #[test]
    fn a_persisted_state_decodes_to_itself() {
        let mut buf = Vec::new();
        state().encode(&mut buf);
        assert_eq!(AcceptorState::decode(&buf), Ok(state()));
        let mut bottom = Vec::new();
        AcceptorState::default().encode(&mut bottom);
        assert_eq!(AcceptorState::decode(&bottom), Ok(AcceptorState::default()));
    }

    #[test]
    fn a_damaged_state_is_an_error() {
        let mut buf = Vec::new();
        state().encode(&mut buf);
        for cut in 0..buf.len() {
            assert!(AcceptorState::decode(&buf[..cut]).is_err(), "cut at {cut}");
        }
        // A request id no proposer mints (sequence number 0).
        let mut unminted = vec![STATE_FORMAT_VERSION];
        put_round(&mut unminted, state().r_ack);
        put_round(&mut unminted, state().r_voted);
        unminted.push(1);
        crate::codec::put_attempt(
            &mut unminted,
            AttemptId {
                seq: 0,
                ..state().r_ack.id
            },
        );
        put_req(&mut unminted, None);
        state().value.encode(&mut unminted);
        assert_eq!(
            AcceptorState::decode(&unminted),
            Err(StateDecodeError::Truncated)
        );
        let mut version = buf.clone();
        version[0] = 7;
        assert_eq!(
            AcceptorState::decode(&version),
            Err(StateDecodeError::UnknownVersion(7))
        );
    }
}
