//! Identities: nodes, proposers, attempts, request ids, rounds and keys.
//!
//! # The ordering of rounds
//!
//! A round is `(n, id)`. logless orders rounds **lexicographically and totally**: first by `n`,
//! then by `id`. The paper orders them only partially (by `n`), which is also safe; the total
//! order is the classic Paxos ballot order and lets an acceptor compare any two rounds. What
//! safety needs is that one round carries at most one proposal, and that holds because every
//! round id is an [`AttemptId`] minted once by one proposer incarnation: a proposer uses a
//! round only if a quorum acknowledged exactly that round for it (incremental PREPARE or
//! PAXOS_PREP with a fresh id, or the pre-acknowledged round `(r.n + 1, r.id)` after its own
//! vote in `r` for a fast write), and it proposes in each round at most once.
use std::fmt;

use bytes::Bytes;

/// A replica's identity in the cluster (the same on every shard of that replica).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct NodeId(pub u16);

/// One life of one proposer: the node and its incarnation, which grows with every restart so
/// that ids minted before a crash are never minted again. Incarnation 0 is reserved for ⊥.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct ProposerId {
    /// The node the proposer runs on.
    pub node: NodeId,
    /// Restart counter of that node, starting at 1.
    pub incarnation: u32,
}

/// A globally unique id minted by a proposer for one attempt (a phase 1 or a proposal).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct AttemptId {
    /// Who minted it.
    pub proposer: ProposerId,
    /// Per-incarnation sequence number, starting at 1.
    pub seq: u64,
}

impl AttemptId {
    /// The id of ⊥, lower than every minted id.
    pub const BOTTOM: AttemptId = AttemptId {
        proposer: ProposerId {
            node: NodeId(0),
            incarnation: 0,
        },
        seq: 0,
    };
}

/// The id of one proposal of new state (a successor proposal in Algorithm 3). Acceptors keep
/// the id of the request that produced their value; a write-through keeps it unchanged.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ReqId(pub AttemptId);

impl ReqId {
    /// The proposer that made the request, to which LEARNED is sent.
    pub fn proposer(&self) -> ProposerId {
        self.0.proposer
    }
}

/// A round `(n, id)`, ordered lexicographically (see the module documentation).
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Round {
    /// The round number.
    pub n: u64,
    /// The attempt that owns this round number.
    pub id: AttemptId,
}

impl Round {
    /// ⊥: the round of an acceptor that has acknowledged and voted nothing.
    pub const BOTTOM: Round = Round {
        n: 0,
        id: AttemptId::BOTTOM,
    };

    /// The round an acceptor pre-acknowledges after voting in `self` (fast writes, §5.8).
    pub fn successor(&self) -> Round {
        Round {
            n: self.n.saturating_add(1),
            id: self.id,
        }
    }
}

impl fmt::Debug for Round {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if *self == Round::BOTTOM {
            return write!(f, "⊥");
        }
        let p = self.id.proposer;
        write!(
            f,
            "({}, n{}i{}#{})",
            self.n, p.node.0, p.incarnation, self.id.seq
        )
    }
}

/// A register's key.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Key(pub Bytes);

impl Key {
    /// A key from anything that is bytes.
    pub fn new(bytes: impl Into<Bytes>) -> Key {
        Key(bytes.into())
    }
}

impl fmt::Debug for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", String::from_utf8_lossy(&self.0))
    }
}

/// An opaque tag the runtime attaches to a client command and gets back with its reply.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ClientTag(pub u64);

#[cfg(test)]
mod tests {
    use super::*;

    fn id(node: u16, seq: u64) -> AttemptId {
        AttemptId {
            proposer: ProposerId {
                node: NodeId(node),
                incarnation: 1,
            },
            seq,
        }
    }

    #[test]
    fn bottom_is_lower_than_every_minted_round() {
        let r = Round { n: 0, id: id(0, 1) };
        assert!(Round::BOTTOM < r);
        assert_eq!(Round::default(), Round::BOTTOM);
    }

    #[test]
    fn rounds_order_by_number_then_id() {
        let a = Round { n: 5, id: id(2, 9) };
        let b = Round { n: 6, id: id(1, 1) };
        let c = Round { n: 6, id: id(1, 2) };
        assert!(a < b && b < c);
        assert_eq!(a.successor(), Round { n: 6, id: id(2, 9) });
        assert!(a.successor() > b, "same n: the id decides");
    }
}
