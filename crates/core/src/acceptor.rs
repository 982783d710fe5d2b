//! The acceptor of RMWPaxos: a pure transition from (register state, message) to (new state,
//! replies).
//!
//! The acceptor is the distributed storage of a register. Its handlers never send anything
//! themselves: they return an [`AcceptorStep`] whose replies may only leave after the new state
//! is durable, which [`crate::persist::PersistBatch`] enforces.
//!
//! Deviation from the letter of Algorithm 3, taken from §5.8 (fast writes): after voting in round
//! `r` the acceptor sets `r_ack` to `(r.n + 1, r.id)` instead of `r`, as if the proposer of `r`
//! had prepared its next round already.
use std::sync::Arc;

use logless_commands::value::Register;
use thiserror::Error;

use crate::ids::{AttemptId, Key, NodeId, ProposerId, ReqId, Round};
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
}

/// What an acceptor decided for one message.
#[derive(Debug, PartialEq, Eq)]
pub struct AcceptorStep {
    /// The new state, if it changed: it must be persisted before any of `replies` leave.
    pub next: Option<AcceptorState>,
    /// Replies (and LEARNED notifications), sealed until `next` is durable.
    pub replies: Vec<Envelope>,
}

/// Handles one message addressed to an acceptor. Messages that are not for acceptors give
/// `None`.
pub fn on_message(state: &AcceptorState, from: NodeId, message: &Message) -> Option<AcceptorStep> {
    match message {
        Message::Prepare {
            key,
            kind,
            attempt,
            known_voted,
        } => Some(on_prepare(state, from, key, *kind, *attempt, *known_voted)),
        Message::PaxosPrep {
            key,
            round,
            known_voted,
        } => Some(on_paxos_prep(state, from, key, *round, *known_voted)),
        Message::Vote {
            key,
            round,
            value,
            req_cur,
            req_prev,
        } => Some(on_vote(
            state, from, key, *round, value, *req_cur, *req_prev,
        )),
        _ => None,
    }
}

fn ack(
    state: &AcceptorState,
    to: NodeId,
    key: &Key,
    attempt: AttemptId,
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
            attempt,
            inc,
            r_ack,
            r_voted: state.r_voted,
            value,
            req: state.req,
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
fn on_prepare(
    state: &AcceptorState,
    from: NodeId,
    key: &Key,
    kind: PrepareKind,
    attempt: AttemptId,
    known_voted: Round,
) -> AcceptorStep {
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
            let reply = ack(&next, from, key, attempt, true, r_ack, known_voted);
            AcceptorStep {
                next: Some(next),
                replies: vec![reply],
            }
        }
        PrepareKind::Read => {
            let r_ack = Round {
                n: state.r_ack.n,
                id: attempt,
            };
            AcceptorStep {
                next: None,
                replies: vec![ack(state, from, key, attempt, false, r_ack, known_voted)],
            }
        }
    }
}

/// PAXOS_PREP: canonical phase 1 with an explicit round.
fn on_paxos_prep(
    state: &AcceptorState,
    from: NodeId,
    key: &Key,
    round: Round,
    known_voted: Round,
) -> AcceptorStep {
    if round <= state.r_ack {
        return AcceptorStep {
            next: None,
            replies: vec![nack(state, from, key, round)],
        };
    }
    let next = AcceptorState {
        r_ack: round,
        ..state.clone()
    };
    let reply = ack(&next, from, key, round.id, true, round, known_voted);
    AcceptorStep {
        next: Some(next),
        replies: vec![reply],
    }
}

/// VOTE: phase 2. Votes if no higher round was acknowledged, tells the previous proposer that
/// its request was chosen, and pre-acknowledges the proposer's next round.
fn on_vote(
    state: &AcceptorState,
    from: NodeId,
    key: &Key,
    round: Round,
    value: &Arc<Register>,
    req_cur: Option<ReqId>,
    req_prev: Option<ReqId>,
) -> AcceptorStep {
    if round < state.r_ack {
        return AcceptorStep {
            next: None,
            replies: vec![nack(state, from, key, round)],
        };
    }
    let mut replies = Vec::with_capacity(2);
    // The proposer of the previous request is told it was chosen, unless it is the one asking
    // now: then it built on that request's value and knows.
    if let Some(prev) = req_prev.filter(|p| p.proposer().node != from) {
        replies.push(Envelope {
            to: prev.proposer().node,
            message: Message::Learned {
                key: key.clone(),
                req: prev,
            },
        });
    }
    replies.push(Envelope {
        to: from,
        message: Message::Voted {
            key: key.clone(),
            round,
        },
    });
    AcceptorStep {
        next: Some(AcceptorState {
            r_ack: round.successor(),
            r_voted: round,
            value: value.clone(),
            req: req_cur,
        }),
        replies,
    }
}

/// A persisted acceptor state that cannot be decoded.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum StateDecodeError {
    /// The record is shorter than its fixed part or the value is cut.
    #[error("acceptor state record truncated")]
    Truncated,
    /// The record was written by an unknown format version.
    #[error("unknown acceptor state format version {0}")]
    UnknownVersion(u8),
    /// The value inside does not decode.
    #[error("acceptor state value: {0}")]
    Value(String),
}

const STATE_FORMAT_VERSION: u8 = 1;
const ROUND_BYTES: usize = 8 + 2 + 4 + 8;

impl AcceptorState {
    /// Encodes the state as a storage record: version, `r_ack`, `r_voted`, `req`, value.
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.push(STATE_FORMAT_VERSION);
        put_round(out, self.r_ack);
        put_round(out, self.r_voted);
        match self.req {
            None => out.push(0),
            Some(req) => {
                out.push(1);
                put_attempt(out, req.0);
            }
        }
        self.value.encode(out);
    }

    /// Decodes a record written by [`AcceptorState::encode`]. Never panics.
    pub fn decode(bytes: &[u8]) -> Result<AcceptorState, StateDecodeError> {
        let (&version, rest) = bytes.split_first().ok_or(StateDecodeError::Truncated)?;
        if version != STATE_FORMAT_VERSION {
            return Err(StateDecodeError::UnknownVersion(version));
        }
        let (r_ack, rest) = take_round(rest)?;
        let (r_voted, rest) = take_round(rest)?;
        let (&has_req, mut rest) = rest.split_first().ok_or(StateDecodeError::Truncated)?;
        let req = match has_req {
            0 => None,
            _ => {
                let (attempt, tail) = take_attempt(rest)?;
                rest = tail;
                Some(ReqId(attempt))
            }
        };
        let value = Register::decode(rest).map_err(|e| StateDecodeError::Value(e.to_string()))?;
        Ok(AcceptorState {
            r_ack,
            r_voted,
            value: Arc::new(value),
            req,
        })
    }
}

fn put_attempt(out: &mut Vec<u8>, id: AttemptId) {
    out.extend_from_slice(&id.proposer.node.0.to_le_bytes());
    out.extend_from_slice(&id.proposer.incarnation.to_le_bytes());
    out.extend_from_slice(&id.seq.to_le_bytes());
}

fn put_round(out: &mut Vec<u8>, round: Round) {
    out.extend_from_slice(&round.n.to_le_bytes());
    put_attempt(out, round.id);
}

fn take_attempt(bytes: &[u8]) -> Result<(AttemptId, &[u8]), StateDecodeError> {
    if bytes.len() < ROUND_BYTES - 8 {
        return Err(StateDecodeError::Truncated);
    }
    let (b, rest) = bytes.split_at(ROUND_BYTES - 8);
    let node = u16::from_le_bytes([b[0], b[1]]);
    let incarnation = u32::from_le_bytes([b[2], b[3], b[4], b[5]]);
    let mut seq = [0u8; 8];
    seq.copy_from_slice(&b[6..14]);
    let id = AttemptId {
        proposer: ProposerId {
            node: NodeId(node),
            incarnation,
        },
        seq: u64::from_le_bytes(seq),
    };
    Ok((id, rest))
}

fn take_round(bytes: &[u8]) -> Result<(Round, &[u8]), StateDecodeError> {
    if bytes.len() < ROUND_BYTES {
        return Err(StateDecodeError::Truncated);
    }
    let (n_bytes, rest) = bytes.split_at(8);
    let mut n = [0u8; 8];
    n.copy_from_slice(n_bytes);
    let (id, rest) = take_attempt(rest)?;
    Ok((
        Round {
            n: u64::from_le_bytes(n),
            id,
        },
        rest,
    ))
}
