//! A stray vote at its worst moment under EpochSS (seed 002 Fig. 2; the engine's scenario
//! `section_5c_figure_2_…`): a follower's vote of a life it forgot reaches the leader after the
//! follower restarted, while the others decided another value in that instance without it.
//!
//! The random faults do not make this sequence (100 seeds of three nodes and 100 of five with
//! late copies on half the batches did not, with the engine's epochs ignored): it needs a
//! Propose that reached one follower only, that follower crashing right after its vote with the
//! Accept to the leader delayed past its restart, the leader's retransmissions of the instance
//! reaching nobody (each would bring the other follower's vote, or the restarted one's, and
//! choose the value legitimately) while it still answers the restarted follower's Recovery,
//! the leader then cut off before it hears of a new view, and the stray Accept arriving in
//! between. The steps below make it: they watch the nodes' sends at the end of their turns.
use logless_multipaxos::ids::{Epoch, Instance, NodeId};
use logless_multipaxos::message::Message;
use logless_multipaxos::replica::Status;
use rand::seq::IndexedRandom;

use super::{Event, LogNodeCluster};
use crate::link::Connection;

/// How long the leader stays cut off, both ways, once it answered the follower's Recovery
/// (µs): the others suspect it (300 ms), elect another leader and decide in the instance.
const CUT_US: u64 = 1_000_000;
/// When the held Accept reaches the leader, after its cut began (µs).
const STRAY_AFTER_CUT_US: u64 = 100_000;
/// How long the steps wait for their moment before they give up (µs).
const GIVE_UP_US: u64 = 1_500_000;
/// How long the first step waits for a leader and a follower serving.
const STEP_RETRY_US: u64 = 50_000;

/// The steps of a stray vote ([`super::LogNodeSimConfig::stray_vote_at_us`]).
#[derive(Debug)]
pub(super) enum StrayVote {
    /// The leader's next turn that proposes an instance above `above` (the last it had
    /// proposed when the steps began): its Proposes reach the follower only.
    Propose {
        leader: NodeId,
        follower: NodeId,
        above: Option<Instance>,
        until_us: u64,
    },
    /// The follower's next turn that votes for one of them: its Accepts are held back and it
    /// crashes. The leader's Proposes of those instances reach the follower only.
    Vote {
        leader: NodeId,
        follower: NodeId,
        upto: Instance,
        until_us: u64,
    },
    /// The leader's Proposes of those instances are lost, until the leader answers the
    /// restarted follower's Recovery: then it is cut off, and the held Accepts reach it.
    Answer {
        leader: NodeId,
        follower: NodeId,
        upto: Instance,
        held: HeldAccepts,
        until_us: u64,
    },
}

/// The Accepts a follower sent the leader just before it crashed, held back.
#[derive(Debug)]
pub(super) struct HeldAccepts {
    connection: Connection,
    epoch: Epoch,
    messages: Vec<Message>,
}

/// What a node's turn leads to once its sends left.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum StrayAfter {
    Nothing,
    /// The follower crashes.
    CrashFollower,
    /// The leader is cut off and the held Accepts are on their way.
    CutLeader,
}

impl LogNodeCluster {
    /// Starts a stray vote on the leader of the moment and a follower serving.
    pub(super) fn stray_vote(&mut self) {
        if !self.faults_active {
            return;
        }
        let leader = self.ids().into_iter().find(|&n| self.is_leader(n));
        let serving = |cluster: &Self, n: NodeId| {
            (cluster.nodes[&n].core.as_ref())
                .is_some_and(|core| core.replica().status() == Status::Serving)
        };
        let Some(leader) = leader else {
            return self.events.schedule(STEP_RETRY_US, Event::StrayVote);
        };
        let followers: Vec<NodeId> = (self.ids().into_iter())
            .filter(|&n| n != leader && serving(self, n))
            .collect();
        let Some(&follower) = followers.choose(&mut self.rng) else {
            return self.events.schedule(STEP_RETRY_US, Event::StrayVote);
        };
        let until_us = self.events.now_us() + GIVE_UP_US;
        let above =
            (self.nodes[&leader].core.as_ref()).and_then(|core| core.replica().last_instance());
        self.stray = Some(StrayVote::Propose {
            leader,
            follower,
            above,
            until_us,
        });
    }

    /// Moves a stray vote on by one turn of `node` that sends `sends`, removing what is lost or
    /// held back.
    pub(super) fn stray_step(
        &mut self,
        node: NodeId,
        sends: &mut Vec<(NodeId, Vec<Message>)>,
    ) -> StrayAfter {
        let now_us = self.events.now_us();
        let Some(stray) = self.stray.take() else {
            return StrayAfter::Nothing;
        };
        let until = match &stray {
            StrayVote::Propose { until_us, .. }
            | StrayVote::Vote { until_us, .. }
            | StrayVote::Answer { until_us, .. } => *until_us,
        };
        if now_us > until {
            return StrayAfter::Nothing;
        }
        // The leader must still lead until it answers the follower's Recovery.
        let led = match &stray {
            StrayVote::Propose { leader, .. } | StrayVote::Vote { leader, .. } => {
                node != *leader || self.is_leader(node)
            }
            StrayVote::Answer { .. } => true,
        };
        if !led {
            return StrayAfter::Nothing;
        }
        let (next, after) = match stray {
            propose @ StrayVote::Propose {
                leader,
                follower,
                above,
                until_us,
            } if node == leader => match fresh_proposes(sends, above) {
                Some(upto) if self.undecided_at(leader, upto) => {
                    drop_proposes(sends, upto, Some(follower));
                    let vote = StrayVote::Vote {
                        leader,
                        follower,
                        upto,
                        until_us,
                    };
                    (vote, StrayAfter::Nothing)
                }
                _ => (propose, StrayAfter::Nothing),
            },
            vote @ StrayVote::Vote {
                leader,
                follower,
                upto,
                ..
            } if node == leader => {
                drop_proposes(sends, upto, Some(follower));
                (vote, StrayAfter::Nothing)
            }
            StrayVote::Vote {
                leader,
                follower,
                upto,
                until_us,
            } if node == follower => {
                let votes = |m: &Message| matches!(m, Message::Accept { instance, .. } if *instance <= upto);
                let voted = sends.iter().flat_map(|(_, m)| m).any(votes);
                if !voted {
                    let vote = StrayVote::Vote {
                        leader,
                        follower,
                        upto,
                        until_us,
                    };
                    return self.keep(vote);
                }
                if !self.one_more_may_crash() {
                    return StrayAfter::Nothing;
                }
                let mut held = Vec::new();
                for (to, messages) in sends.iter_mut() {
                    let (accepts, rest): (Vec<_>, Vec<_>) =
                        std::mem::take(messages).into_iter().partition(votes);
                    *messages = rest;
                    if *to == leader {
                        held = accepts;
                    }
                }
                sends.retain(|(_, messages)| !messages.is_empty());
                let connection = (
                    self.nodes[&follower].incarnation,
                    self.nodes[&leader].incarnation,
                );
                let epoch =
                    (self.nodes[&follower].core.as_ref()).map_or(Epoch(0), |core| core.epoch());
                let held = HeldAccepts {
                    connection,
                    epoch,
                    messages: held,
                };
                let answer = StrayVote::Answer {
                    leader,
                    follower,
                    upto,
                    held,
                    until_us,
                };
                (answer, StrayAfter::CrashFollower)
            }
            StrayVote::Answer {
                leader,
                follower,
                upto,
                held,
                until_us,
            } if node == leader => {
                drop_proposes(sends, upto, None);
                let answered = sends.iter().any(|(to, messages)| {
                    *to == follower
                        && (messages.iter()).any(|m| matches!(m, Message::RecoveryAnswer { .. }))
                });
                if answered {
                    self.report.stray_votes += 1;
                    let deliver = Event::Deliver {
                        from: follower,
                        to: leader,
                        connection: held.connection,
                        seq: 0,
                        epoch: held.epoch,
                        messages: held.messages,
                    };
                    self.events.schedule(STRAY_AFTER_CUT_US, deliver);
                    return StrayAfter::CutLeader;
                }
                let answer = StrayVote::Answer {
                    leader,
                    follower,
                    upto,
                    held,
                    until_us,
                };
                (answer, StrayAfter::Nothing)
            }
            other => (other, StrayAfter::Nothing),
        };
        self.stray = Some(next);
        after
    }

    /// Whether `node` has not learnt `instance` decided.
    fn undecided_at(&self, node: NodeId, instance: Instance) -> bool {
        (self.nodes[&node].core.as_ref())
            .is_some_and(|core| core.replica().decided(instance).is_none())
    }

    fn keep(&mut self, stray: StrayVote) -> StrayAfter {
        self.stray = Some(stray);
        StrayAfter::Nothing
    }

    /// Does what a stray vote's step asked for once `node`'s sends left.
    pub(super) fn stray_after(&mut self, node: NodeId, after: StrayAfter) {
        match after {
            StrayAfter::Nothing => {}
            StrayAfter::CrashFollower => self.crash_node(node, false),
            StrayAfter::CutLeader => {
                let until = self.events.now_us() + CUT_US;
                let n = self.nodes.get_mut(&node).expect("node");
                n.sends_cut_until_us = n.sends_cut_until_us.max(until);
                n.receives_cut_until_us = n.receives_cut_until_us.max(until);
            }
        }
    }
}

/// The highest instance proposed in `sends` above `above` (`None`: none).
fn fresh_proposes(sends: &[(NodeId, Vec<Message>)], above: Option<Instance>) -> Option<Instance> {
    (sends.iter().flat_map(|(_, m)| m))
        .filter_map(|m| match m {
            Message::Propose { instance, .. } if above.is_none_or(|a| *instance > a) => {
                Some(*instance)
            }
            _ => None,
        })
        .max()
}

/// Removes from `sends` the Proposes of instances up to `upto`, except those to `keep_to`;
/// returns the highest instance proposed to it (`None`: no Propose at all).
fn drop_proposes(
    sends: &mut Vec<(NodeId, Vec<Message>)>,
    upto: Instance,
    keep_to: Option<NodeId>,
) -> Option<Instance> {
    let highest = (sends.iter().flat_map(|(_, m)| m))
        .filter_map(|m| match m {
            Message::Propose { instance, .. } if *instance <= upto => Some(*instance),
            _ => None,
        })
        .max();
    for (to, messages) in sends.iter_mut() {
        if Some(*to) != keep_to {
            messages
                .retain(|m| !matches!(m, Message::Propose { instance, .. } if *instance <= upto));
        }
    }
    sends.retain(|(_, messages)| !messages.is_empty());
    highest
}
