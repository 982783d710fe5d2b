//! Removing dead registers: a deleted or expired register leaves every acceptor's table and
//! store, without an older value ever coming back (the argument is in `docs/removal.md`).
//!
//! 1. A node asks to remove a register whose state its own acceptor holds dead (absent or
//!    expired, with no fencing token) and produced by its own proposer, which has no operation
//!    on it in progress ([`removal_candidate`]). The node mints an attempt and sends a read
//!    PREPARE to **every** acceptor.
//! 2. Once every acceptor answered, let `t` be the highest vote among them. The removal goes
//!    ahead only if the value of `t` is dead now, its request was this node's, and every
//!    acceptor holds exactly `t` or nothing with an acknowledged round above `t`
//!    (`Removals::on_ack`). Then REMOVE(`t`) goes to every acceptor.
//! 3. An acceptor that still holds exactly the vote `t` forgets the register: it raises the
//!    shard's round floor to the register's `r_ack`, and a register it does not hold starts at
//!    that floor; the floor is durable before the removal is (see
//!    [`PersistBatch`](crate::persist::PersistBatch)).
//!
//! Only the register's own request needs the ownership rule: its proposer learns that request
//! was chosen from a consistent quorum naming it, which a removed register no longer gives, so
//! only that proposer, once it will never retry the request, may remove it. Requests before it
//! were told with LEARNED, which every voter of their successor sent first.
use std::sync::Arc;

use logless_commands::value::Register;

use crate::acceptor::AcceptorState;
use crate::ids::{AttemptId, Key, NodeId, ReqId, Round};
use crate::table::KeyTable;

/// Whether `value` is indistinguishable from a register never written, at `now_ms`: absent or
/// expired, and without a fencing token (the tokens of a key must only grow, so a register that
/// handed one out keeps its tombstone).
pub fn dead(value: &Register, now_ms: u64) -> bool {
    !value.is_live(now_ms) && value.fence == 0
}

/// Whether `node` may remove a register whose latest request is `req`: it made it (in this
/// incarnation or an earlier one), or there is none.
fn owned_by(req: Option<ReqId>, node: NodeId) -> bool {
    req.is_none_or(|req| req.proposer().node == node)
}

/// Whether `node`'s acceptor state `state` makes the register worth probing for removal at
/// `now_ms` (the probe decides; this only filters).
pub fn removal_candidate(state: &AcceptorState, node: NodeId, now_ms: u64) -> bool {
    state.r_voted != Round::BOTTOM && dead(&state.value, now_ms) && owned_by(state.req, node)
}

/// Whether an acceptor holding `state` may forget it on REMOVE(`voted`): it holds exactly that
/// vote, and its value could be dead (the acceptor has no clock: the remover judged expiry).
pub(crate) fn forgettable(state: &AcceptorState, voted: Round) -> bool {
    let value = &state.value;
    state.r_voted == voted
        && voted != Round::BOTTOM
        && value.fence == 0
        && (value.data == Default::default() || value.expires_at_ms.is_some())
}

/// What one acceptor answered a removal's read.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Seen {
    /// The number of its acknowledged round.
    r_ack_n: u64,
    r_voted: Round,
    /// The value of `r_voted`; left out for ⊥.
    value: Option<Arc<Register>>,
    req: Option<ReqId>,
}

/// A removal's read in progress.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Probe {
    attempt: AttemptId,
    /// By acceptor index.
    seen: Vec<Option<Seen>>,
}

/// An acceptor's answer to a removal's read, as the ACK carries it.
pub(crate) struct ProbeReply<'a> {
    /// The acknowledged round, whose id names the probe's attempt.
    pub r_ack: Round,
    /// The acceptor's vote.
    pub r_voted: Round,
    /// Its value, if sent.
    pub value: Option<&'a Arc<Register>>,
    /// The request that produced it.
    pub req: Option<ReqId>,
}

/// How a removal's read is judged.
pub(crate) struct Judge {
    /// This node.
    pub node: NodeId,
    /// The number of acceptors.
    pub acceptors: usize,
    /// A majority of them.
    pub quorum: usize,
    /// The current time.
    pub now_ms: u64,
    /// The deliberate bug: judge on a quorum's answers.
    pub on_a_quorum: bool,
}

/// The removals' reads in progress, by register.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub(crate) struct Removals {
    probes: KeyTable<Probe>,
}

impl Removals {
    /// Whether no read is in progress.
    pub(crate) fn is_empty(&self) -> bool {
        self.probes.len() == 0
    }

    /// Starts (or restarts) the read of `key` as `attempt`.
    pub(crate) fn start(&mut self, key: &Key, attempt: AttemptId, acceptors: usize) {
        self.probes.insert(
            key.clone(),
            Probe {
                attempt,
                seen: vec![None; acceptors],
            },
        );
    }

    /// Whether an ACK to `attempt` about `key` answers a removal's read.
    pub(crate) fn claims(&self, key: &Key, attempt: AttemptId) -> bool {
        self.probes.get(key).is_some_and(|p| p.attempt == attempt)
    }

    /// Forgets every read: a link broke, and an answer may never come.
    pub(crate) fn clear(&mut self) {
        self.probes = KeyTable::new();
    }

    /// Records acceptor `index`'s answer to the read of `key`. Once every acceptor answered,
    /// the read ends, with the vote to remove if the removal may go ahead.
    pub(crate) fn on_ack(
        &mut self,
        key: &Key,
        index: usize,
        reply: ProbeReply<'_>,
        judge: &Judge,
    ) -> Option<Round> {
        let probe = self.probes.get_mut(key)?;
        let slot = probe.seen.get_mut(index)?;
        *slot = Some(Seen {
            r_ack_n: reply.r_ack.n,
            r_voted: reply.r_voted,
            value: reply.value.cloned(),
            req: reply.req,
        });
        let needed = if judge.on_a_quorum {
            judge.quorum
        } else {
            judge.acceptors
        };
        if probe.seen.iter().flatten().count() < needed {
            return None;
        }
        let probe = self.probes.remove(key).expect("present");
        let seen: Vec<&Seen> = probe.seen.iter().flatten().collect();
        let latest = seen.iter().max_by_key(|s| s.r_voted)?;
        let t = latest.r_voted;
        let value = latest.value.as_deref()?;
        let removable = t != Round::BOTTOM
            && dead(value, judge.now_ms)
            && owned_by(latest.req, judge.node)
            && seen
                .iter()
                .all(|s| s.r_voted == t || (s.r_voted == Round::BOTTOM && s.r_ack_n > t.n));
        removable.then_some(t)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::testing::attempt;
    use logless_commands::value::Data;

    fn judge(now_ms: u64) -> Judge {
        Judge {
            node: NodeId(1),
            acceptors: 3,
            quorum: 2,
            now_ms,
            on_a_quorum: false,
        }
    }

    #[test]
    fn dead_means_absent_or_expired_without_a_token() {
        let absent = Register::default();
        let expiring = Register {
            data: Data::Int(1),
            expires_at_ms: Some(10),
            fence: 0,
        };
        assert!(dead(&absent, 0));
        assert!(!dead(&expiring, 9));
        assert!(dead(&expiring, 10));
        let fenced = Register {
            fence: 3,
            ..Register::default()
        };
        assert!(!dead(&fenced, 0), "a key's tokens must only grow");
    }

    #[test]
    fn a_removal_needs_every_acceptor_on_the_dead_vote() {
        let key = Key::new("k");
        let t = Round {
            n: 5,
            id: attempt(1, 4),
        };
        let tomb = Arc::new(Register::default());
        let req = ReqId::new(attempt(1, 4));
        let mut removals = Removals::default();
        let probe = attempt(1, 9);
        let answer = |removals: &mut Removals, index, r_ack_n, r_voted, value| {
            removals.on_ack(
                &key,
                index,
                ProbeReply {
                    r_ack: Round {
                        n: r_ack_n,
                        id: probe,
                    },
                    r_voted,
                    value,
                    req: (r_voted != Round::BOTTOM).then_some(req).flatten(),
                },
                &judge(0),
            )
        };
        removals.start(&key, probe, 3);
        assert!(removals.claims(&key, probe));
        assert_eq!(answer(&mut removals, 0, 6, t, Some(&tomb)), None);
        assert_eq!(answer(&mut removals, 1, 6, t, Some(&tomb)), None);
        // The third forgot it already, above `t`.
        assert_eq!(answer(&mut removals, 2, 6, Round::BOTTOM, None), Some(t));
        assert!(removals.is_empty());

        removals.start(&key, probe, 3);
        assert_eq!(answer(&mut removals, 0, 6, t, Some(&tomb)), None);
        assert_eq!(answer(&mut removals, 1, 6, t, Some(&tomb)), None);
        // The third holds nothing but never acknowledged a round above `t`: it may still
        // accept an older VOTE.
        assert_eq!(answer(&mut removals, 2, 5, Round::BOTTOM, None), None);

        removals.start(&key, probe, 3);
        let older = Round {
            n: 3,
            id: attempt(1, 2),
        };
        let value = Arc::new(Register {
            data: Data::Int(1),
            ..Register::default()
        });
        assert_eq!(answer(&mut removals, 0, 6, t, Some(&tomb)), None);
        assert_eq!(answer(&mut removals, 1, 6, t, Some(&tomb)), None);
        assert_eq!(answer(&mut removals, 2, 4, older, Some(&value)), None);
    }
}
