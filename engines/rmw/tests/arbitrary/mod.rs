//! Strategies for arbitrary replica inputs, shared by the property tests.
use std::sync::Arc;

use logless_commands::value::{Data, Register};
use logless_rmw::ids::{AttemptId, Key, NodeId, ProposerId, ReqId, Round};
use logless_rmw::message::{Message, PrepareKind};
use logless_rmw::placement::StageId;
use proptest::prelude::*;

fn attempt() -> impl Strategy<Value = AttemptId> {
    (
        0u16..5,
        0u32..3,
        prop_oneof![Just(0u64), 1u64..5, Just(u64::MAX)],
    )
        .prop_map(|(node, incarnation, seq)| AttemptId {
            proposer: ProposerId {
                node: NodeId(node),
                incarnation,
            },
            seq,
        })
}

fn round() -> impl Strategy<Value = Round> {
    (prop_oneof![0u64..6, Just(u64::MAX)], attempt()).prop_map(|(n, id)| Round { n, id })
}

pub fn key() -> impl Strategy<Value = Key> {
    (0u8..3).prop_map(|k| Key::new(vec![b'k', k]))
}

fn value() -> impl Strategy<Value = Option<Arc<Register>>> {
    proptest::option::of((-3i64..3).prop_map(|v| {
        Arc::new(Register {
            data: Data::Int(v),
            expires_at_ms: None,
            fence: 0,
        })
    }))
}

/// Request ids are minted attempt ids (sequence number 1 or more).
fn req_id() -> impl Strategy<Value = ReqId> {
    attempt().prop_filter_map("requests are minted", ReqId::new)
}

fn req() -> impl Strategy<Value = Option<ReqId>> {
    proptest::option::of(req_id())
}

/// The stage a message was sent in: none (no placement) or a ring's.
fn stage() -> impl Strategy<Value = StageId> {
    prop_oneof![Just(StageId::NONE), ring_stage()]
}

/// A ring's stage (never [`StageId::NONE`]).
fn ring_stage() -> impl Strategy<Value = StageId> {
    (1..=u32::MAX).prop_map(StageId::from_wire)
}

pub fn message() -> impl Strategy<Value = Message> {
    prop_oneof![
        (key(), any::<bool>(), attempt(), round(), stage()).prop_map(
            |(key, read, attempt, known_voted, stage)| Message::Prepare {
                key,
                kind: if read {
                    PrepareKind::Read
                } else {
                    PrepareKind::Write
                },
                attempt,
                known_voted,
                stage,
            }
        ),
        (key(), round(), round(), stage()).prop_map(|(key, round, known_voted, stage)| {
            Message::PaxosPrep {
                key,
                round,
                known_voted,
                stage,
            }
        }),
        (
            key(),
            any::<bool>(),
            round(),
            round(),
            value(),
            (req(), req())
        )
            .prop_map(
                |(key, inc, r_ack, r_voted, value, (req, req_prev))| Message::Ack {
                    key,
                    inc,
                    r_ack,
                    r_voted,
                    value,
                    req,
                    req_prev
                }
            ),
        (key(), round(), value(), (req(), req()), stage()).prop_map(
            |(key, round, value, (req_cur, req_prev), stage)| Message::Vote {
                key,
                round,
                value: value.unwrap_or_default(),
                req_cur,
                req_prev,
                stage,
            }
        ),
        (key(), round()).prop_map(|(key, round)| Message::Voted { key, round }),
        (key(), round(), round()).prop_map(|(key, round, r_ack)| Message::Nack {
            key,
            round,
            r_ack
        }),
        (key(), req_id()).prop_map(|(key, req)| Message::Learned { key, req }),
        (key(), round()).prop_map(|(key, voted)| Message::Remove { key, voted }),
        key().prop_map(|key| Message::Fence { key }),
        key().prop_map(|key| Message::Fenced { key }),
        (key(), round()).prop_map(|(key, round)| Message::Full { key, round }),
        (key(), ring_stage()).prop_map(|(key, stage)| Message::Stale { key, stage }),
    ]
}

#[derive(Debug, Clone)]
pub enum Input {
    Message(u16, Message),
    Command(Key, bool),
    Timer(Key, u64),
    LinkBroken(u16),
}

pub fn input() -> impl Strategy<Value = Input> {
    prop_oneof![
        6 => (0u16..5, message()).prop_map(|(from, m)| Input::Message(from, m)),
        2 => (key(), any::<bool>()).prop_map(|(k, read)| Input::Command(k, read)),
        2 => (key(), 0u64..40).prop_map(|(k, t)| Input::Timer(k, t)),
        1 => (0u16..5).prop_map(Input::LinkBroken),
    ]
}
