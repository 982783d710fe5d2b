//! Rejoining after a lost disk: a replica whose acceptor states are gone must not answer for
//! rounds it may have promised before the loss (the argument is in `docs/lost-disk.md`).
//!
//! 1. **Fence.** The rejoining replica sends FENCE to every peer (again when the link to a
//!    peer that has not answered breaks, or when a message from it arrives a retry interval
//!    after the last FENCE: a message may be lost without either end noticing). A peer's proposer restarts
//!    every operation in progress with a fresh attempt and drops its fast paths (so that no
//!    answer the replica gave before the loss completes a phase 1 or a fast write from then on),
//!    and answers FENCED.
//! 2. **Amnesia.** Until it recovers a register, the replica's acceptor answers nothing about
//!    it: for that register it counts as crashed. A register it holds a state for (recovered,
//!    or written since) is served as usual.
//! 3. **Recovery.** Once every peer answered FENCED, a VOTE or a read PREPARE about a register
//!    it does not hold (not a write's phase 1, whose VOTE the recovery would overtake and
//!    reject) makes the replica mint an attempt and prepare a round (a write PREPARE, or
//!    a PAXOS_PREP above the rounds seen when that did not agree) with every *other* acceptor.
//!    When a quorum of them acknowledged the same round and holds the same vote, the replica
//!    takes that state as its own: the vote is chosen, and no round at or below the prepared
//!    one can collect a quorum of votes any more. A recovery that got no decision within the
//!    retry interval may start again.
use std::sync::Arc;

use logless_commands::value::Register;

use crate::acceptor::AcceptorState;
use crate::ids::{AttemptId, Key, NodeId, ReqId, Round};
use crate::message::{Message, PrepareKind};
use crate::placement::StageId;
use crate::table::KeyTable;

/// What a rejoining replica still waits for, and what it recovered.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Rejoin {
    /// Peers whose proposers have not answered FENCE yet, with when FENCE last went to each.
    unfenced: Vec<(NodeId, u64)>,
    /// Recoveries in progress, by register.
    probes: KeyTable<Probe>,
    /// For a register whose last recovery did not agree, the highest round seen: the next one
    /// prepares above it.
    above: KeyTable<Round>,
    /// Registers recovered since start (a counter).
    recovered: u64,
}

/// One acceptor's answer to a recovery.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum Answer {
    /// It acknowledged the round, holding this state.
    Ack(AcceptorState),
    /// It had acknowledged the higher round `r_ack`.
    Nack(Round),
}

/// A recovery in progress.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Probe {
    attempt: AttemptId,
    /// When it started.
    started_ms: u64,
    /// By acceptor index; this replica's own stays `None`.
    answers: Vec<Option<Answer>>,
}

/// How a recovery's answers are judged.
pub(crate) struct Counting {
    /// The number of acceptors, this replica's included.
    pub acceptors: usize,
    /// A majority of them.
    pub quorum: usize,
}

/// What an acceptor answered a recovery, as the ACK or NACK carries it.
pub(crate) enum Reply<'a> {
    /// An ACK.
    Ack {
        /// The acknowledged round.
        r_ack: Round,
        /// Its vote.
        r_voted: Round,
        /// The value of the vote (none for ⊥).
        value: Option<&'a Arc<Register>>,
        /// The vote's request.
        req: Option<ReqId>,
        /// The request the vote's value was built on.
        req_prev: Option<ReqId>,
    },
    /// A NACK with the acceptor's `r_ack`.
    Nack(Round),
}

impl Rejoin {
    /// Waiting for FENCED from every one of `peers`, to whom FENCE went at `now_ms`.
    pub(crate) fn new(peers: Vec<NodeId>, now_ms: u64) -> Rejoin {
        Rejoin {
            unfenced: peers.into_iter().map(|p| (p, now_ms)).collect(),
            probes: KeyTable::new(),
            above: KeyTable::new(),
            recovered: 0,
        }
    }

    /// `peer` answered FENCE.
    pub(crate) fn on_fenced(&mut self, peer: NodeId) {
        self.unfenced.retain(|(p, _)| *p != peer);
    }

    /// Whether `peer` has not answered FENCE yet.
    pub(crate) fn awaits_fence_from(&self, peer: NodeId) -> bool {
        self.unfenced.iter().any(|(p, _)| *p == peer)
    }

    /// Whether FENCE should go to `peer` again at `now_ms`: it has not answered, and the last
    /// one went `retry_ms` ago or more. If so, notes that it goes now.
    pub(crate) fn fence_again(&mut self, peer: NodeId, now_ms: u64, retry_ms: u64) -> bool {
        let Some((_, sent_ms)) = self.unfenced.iter_mut().find(|(p, _)| *p == peer) else {
            return false;
        };
        if now_ms < sent_ms.saturating_add(retry_ms) {
            return false;
        }
        *sent_ms = now_ms;
        true
    }

    /// How many peers have not answered FENCE yet.
    pub(crate) fn unfenced(&self) -> usize {
        self.unfenced.len()
    }

    /// How many registers were recovered since start.
    pub(crate) fn recovered(&self) -> u64 {
        self.recovered
    }

    /// Whether a recovery of `key` may start at `now_ms`: every peer is fenced, and none is
    /// running that started less than `retry_ms` ago.
    pub(crate) fn may_start(&self, key: &Key, now_ms: u64, retry_ms: u64) -> bool {
        self.unfenced.is_empty()
            && self
                .probes
                .get(key)
                .is_none_or(|p| now_ms >= p.started_ms.saturating_add(retry_ms))
    }

    /// Starts recovering `key` at `now_ms` as `attempt` with `acceptors` acceptors; returns
    /// the phase 1 message to send to every other acceptor.
    pub(crate) fn start(
        &mut self,
        key: &Key,
        now_ms: u64,
        attempt: AttemptId,
        acceptors: usize,
    ) -> Message {
        self.probes.insert(
            key.clone(),
            Probe {
                attempt,
                started_ms: now_ms,
                answers: vec![None; acceptors],
            },
        );
        match self.above.remove(key) {
            None => Message::Prepare {
                key: key.clone(),
                kind: PrepareKind::Write,
                attempt,
                known_voted: Round::BOTTOM,
                stage: StageId::NONE,
            },
            Some(above) => Message::PaxosPrep {
                key: key.clone(),
                round: Round {
                    n: above.n.saturating_add(1),
                    id: attempt,
                },
                known_voted: Round::BOTTOM,
                stage: StageId::NONE,
            },
        }
    }

    /// Whether an answer naming `attempt` about `key` is for a recovery.
    pub(crate) fn claims(&self, key: &Key, attempt: AttemptId) -> bool {
        self.probes.get(key).is_some_and(|p| p.attempt == attempt)
    }

    /// Forgets every recovery in progress: a link broke, and an answer may never come. The
    /// next message about each register starts it again.
    pub(crate) fn clear_probes(&mut self) {
        self.probes = KeyTable::new();
    }

    /// Records acceptor `index`'s answer to the recovery of `key`. Returns the state to take
    /// once a quorum of acknowledgements agrees on round and vote; gives the recovery up, to
    /// be started again above the rounds seen, once every other acceptor answered without.
    pub(crate) fn on_answer(
        &mut self,
        key: &Key,
        index: usize,
        reply: Reply<'_>,
        counting: &Counting,
    ) -> Option<AcceptorState> {
        let probe = self.probes.get_mut(key)?;
        let slot = probe.answers.get_mut(index)?;
        *slot = Some(match reply {
            Reply::Ack {
                r_ack,
                r_voted,
                value,
                req,
                req_prev,
            } => Answer::Ack(AcceptorState {
                r_ack,
                r_voted,
                value: value.cloned().unwrap_or_default(),
                req,
                req_prev,
            }),
            Reply::Nack(r_ack) => Answer::Nack(r_ack),
        });
        let agreed = probe.answers.iter().flatten().find_map(|a| {
            let Answer::Ack(candidate) = a else {
                return None;
            };
            let agreeing = probe
                .answers
                .iter()
                .flatten()
                .filter(|b| match b {
                    Answer::Ack(s) => s.r_ack == candidate.r_ack && s.r_voted == candidate.r_voted,
                    Answer::Nack(_) => false,
                })
                .count();
            (agreeing >= counting.quorum).then(|| candidate.clone())
        });
        if let Some(state) = agreed {
            self.probes.remove(key);
            self.recovered += 1;
            return Some(state);
        }
        let answered = probe.answers.iter().flatten().count();
        if answered + 1 >= counting.acceptors {
            let highest = probe
                .answers
                .iter()
                .flatten()
                .map(|a| match a {
                    Answer::Ack(s) => s.r_ack,
                    Answer::Nack(r_ack) => *r_ack,
                })
                .max()
                .unwrap_or(Round::BOTTOM);
            // Given up, but kept (claiming nothing) until the retry interval has passed, so
            // that the next recovery does not follow at once on the next message.
            probe.attempt = AttemptId::BOTTOM;
            self.above.insert(key.clone(), highest);
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::testing::attempt;

    fn counting() -> Counting {
        Counting {
            acceptors: 3,
            quorum: 2,
        }
    }

    fn ack(n: u64, id: AttemptId, voted: Round) -> Reply<'static> {
        Reply::Ack {
            r_ack: Round { n, id },
            r_voted: voted,
            value: None,
            req: None,
            req_prev: None,
        }
    }

    #[test]
    fn a_recovery_needs_every_peer_fenced_and_a_quorum_agreeing() {
        let key = Key::new("k");
        let mut rejoin = Rejoin::new(vec![NodeId(2), NodeId(3)], 0);
        assert!(!rejoin.may_start(&key, 0, 20));
        rejoin.on_fenced(NodeId(2));
        assert!(rejoin.awaits_fence_from(NodeId(3)) && !rejoin.may_start(&key, 0, 20));
        assert!(!rejoin.fence_again(NodeId(2), 50, 20), "answered");
        assert!(!rejoin.fence_again(NodeId(3), 19, 20), "too soon");
        assert!(rejoin.fence_again(NodeId(3), 20, 20));
        assert!(!rejoin.fence_again(NodeId(3), 21, 20));
        rejoin.on_fenced(NodeId(3));
        assert!(rejoin.may_start(&key, 0, 20));

        let probe = attempt(1, 7);
        let first = rejoin.start(&key, 0, probe, 3);
        assert!(matches!(
            first,
            Message::Prepare {
                kind: PrepareKind::Write,
                ..
            }
        ));
        assert!(rejoin.claims(&key, probe) && !rejoin.may_start(&key, 19, 20));
        assert!(
            rejoin.may_start(&key, 20, 20),
            "a recovery with no decision is retried"
        );
        // Two other acceptors at different rounds: no quorum agrees, the next recovery aims
        // above the highest.
        assert_eq!(
            rejoin.on_answer(&key, 1, ack(4, probe, Round::BOTTOM), &counting()),
            None
        );
        assert_eq!(
            rejoin.on_answer(&key, 2, ack(6, probe, Round::BOTTOM), &counting()),
            None
        );
        assert!(!rejoin.claims(&key, probe) && !rejoin.may_start(&key, 19, 20));
        assert!(rejoin.may_start(&key, 20, 20));
        let again = attempt(1, 8);
        let Message::PaxosPrep { round, .. } = rejoin.start(&key, 20, again, 3) else {
            panic!("a recovery that did not agree goes above the rounds seen");
        };
        assert_eq!(round, Round { n: 7, id: again });
        let voted = Round {
            n: 5,
            id: attempt(2, 1),
        };
        assert_eq!(
            rejoin.on_answer(&key, 1, ack(7, again, voted), &counting()),
            None
        );
        let state = rejoin
            .on_answer(&key, 2, ack(7, again, voted), &counting())
            .expect("a quorum agrees");
        assert_eq!((state.r_ack, state.r_voted), (round, voted));
        assert_eq!(rejoin.recovered(), 1);
        assert!(!rejoin.claims(&key, again));
    }
}
