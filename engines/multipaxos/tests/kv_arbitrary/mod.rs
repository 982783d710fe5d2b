//! Strategies for arbitrary commands and operations of the register map, shared by its
//! property tests. Keys, members and values come from small alphabets, so that operations meet
//! each other's keys and values of every kind.
#![allow(dead_code)]
use std::num::NonZeroI64;

use bytes::Bytes;
use logless_commands::command::{
    Command, Condition, ExpireArgs, ExpireFlags, ExpireKind, Expiry, HashCmd, LexBound, ListCmd,
    ListEnd, ScanArgs, ScoreBound, SetArgs, ZAddFlags, ZRange, ZRangeBy, ZSetCmd,
};
use logless_commands::float::Float;
use logless_multipaxos::kv::Operation;
use proptest::prelude::*;

pub fn key() -> impl Strategy<Value = Bytes> {
    prop_oneof![Just("a"), Just("b"), Just("c"), Just("d")]
        .prop_map(|k: &'static str| Bytes::from_static(k.as_bytes()))
}

pub fn value() -> impl Strategy<Value = Bytes> {
    prop_oneof![
        3 => (0u8..4).prop_map(|v| Bytes::from(vec![b'x' + v])),
        2 => (-3i64..40).prop_map(|v| Bytes::from(v.to_string())),
        1 => proptest::collection::vec(any::<u8>(), 0..6).prop_map(Bytes::from),
    ]
}

fn values() -> impl Strategy<Value = Vec<Bytes>> {
    proptest::collection::vec(value(), 1..4)
}

fn float() -> impl Strategy<Value = Float> {
    prop_oneof![
        (-5i32..5).prop_map(|v| Float::new(f64::from(v) / 2.0).unwrap()),
        Just(Float::new(f64::INFINITY).unwrap()),
    ]
}

fn end() -> impl Strategy<Value = ListEnd> {
    prop_oneof![Just(ListEnd::Left), Just(ListEnd::Right)]
}

fn small() -> impl Strategy<Value = i64> {
    -4i64..6
}

fn scan() -> impl Strategy<Value = ScanArgs> {
    (
        any::<u64>(),
        proptest::option::of(Just(Bytes::from_static(b"*"))),
        0u64..5,
    )
        .prop_map(|(cursor, pattern, count)| ScanArgs {
            cursor,
            pattern,
            count,
        })
}

fn condition() -> impl Strategy<Value = Condition> {
    prop_oneof![
        4 => Just(Condition::Always),
        1 => Just(Condition::Nx),
        1 => Just(Condition::Xx),
        1 => value().prop_map(Condition::IfEq),
        1 => value().prop_map(Condition::IfNe),
        1 => any::<u64>().prop_map(Condition::IfDigestEq),
        1 => any::<u64>().prop_map(Condition::IfDigestNe),
    ]
}

fn expiry() -> impl Strategy<Value = Expiry> {
    prop_oneof![
        3 => Just(Expiry::Clear),
        1 => Just(Expiry::Keep),
        2 => (0u64..30).prop_map(Expiry::AfterMs),
        1 => (0u64..200).prop_map(Expiry::AtMs),
    ]
}

fn score_bound() -> impl Strategy<Value = ScoreBound> {
    (float(), any::<bool>()).prop_map(|(score, exclusive)| ScoreBound { score, exclusive })
}

fn lex_bound() -> impl Strategy<Value = LexBound> {
    prop_oneof![
        Just(LexBound::Min),
        Just(LexBound::Max),
        value().prop_map(LexBound::Inclusive),
        value().prop_map(LexBound::Exclusive),
    ]
}

fn hash() -> impl Strategy<Value = HashCmd> {
    prop_oneof![
        proptest::collection::vec((value(), value()), 1..3).prop_map(HashCmd::HSet),
        (value(), value()).prop_map(|(field, value)| HashCmd::HSetNx { field, value }),
        value().prop_map(HashCmd::HGet),
        values().prop_map(HashCmd::HMGet),
        values().prop_map(HashCmd::HDel),
        value().prop_map(HashCmd::HExists),
        Just(HashCmd::HLen),
        value().prop_map(HashCmd::HStrLen),
        Just(HashCmd::HKeys),
        Just(HashCmd::HVals),
        Just(HashCmd::HGetAll),
        (value(), small()).prop_map(|(field, delta)| HashCmd::HIncrBy { field, delta }),
        (value(), float()).prop_map(|(field, delta)| HashCmd::HIncrByFloat { field, delta }),
        (proptest::option::of(small()), any::<bool>(), any::<u64>()).prop_map(
            |(count, with_values, seed)| HashCmd::HRandField {
                count,
                with_values,
                seed
            }
        ),
        (scan(), any::<bool>()).prop_map(|(args, no_values)| HashCmd::HScan { args, no_values }),
    ]
}

fn list() -> impl Strategy<Value = ListCmd> {
    prop_oneof![
        (end(), values(), any::<bool>()).prop_map(|(end, values, only_if_exists)| ListCmd::Push {
            end,
            values,
            only_if_exists
        }),
        (end(), proptest::option::of(0u64..4)).prop_map(|(end, count)| ListCmd::Pop { end, count }),
        Just(ListCmd::Len),
        (small(), small()).prop_map(|(start, stop)| ListCmd::Range { start, stop }),
        small().prop_map(ListCmd::Index),
        (small(), value()).prop_map(|(index, value)| ListCmd::Set { index, value }),
        (any::<bool>(), value(), value()).prop_map(|(before, pivot, value)| ListCmd::Insert {
            before,
            pivot,
            value
        }),
        (small(), value()).prop_map(|(count, value)| ListCmd::Rem { count, value }),
        (small(), small()).prop_map(|(start, stop)| ListCmd::Trim { start, stop }),
        (
            value(),
            prop_oneof![Just(1i64), Just(-1), Just(2)],
            proptest::option::of(0u64..3),
            0u64..4
        )
            .prop_map(|(value, rank, count, max_len)| ListCmd::Pos {
                value,
                rank: NonZeroI64::new(rank).unwrap(),
                count,
                max_len
            }),
        (end(), end()).prop_map(|(from, to)| ListCmd::Move { from, to }),
    ]
}

fn zset() -> impl Strategy<Value = ZSetCmd> {
    let flags = (0u8..64).prop_map(|b| ZAddFlags {
        nx: b & 1 != 0,
        xx: b & 2 != 0,
        gt: b & 4 != 0,
        lt: b & 8 != 0,
        ch: b & 16 != 0,
        incr: b & 32 != 0,
    });
    let by = prop_oneof![
        (small(), small()).prop_map(|(start, stop)| ZRangeBy::Index { start, stop }),
        (score_bound(), score_bound()).prop_map(|(min, max)| ZRangeBy::Score { min, max }),
        (lex_bound(), lex_bound()).prop_map(|(min, max)| ZRangeBy::Lex { min, max }),
    ];
    prop_oneof![
        (proptest::collection::vec((float(), value()), 1..3), flags)
            .prop_map(|(members, flags)| ZSetCmd::Add { members, flags }),
        values().prop_map(ZSetCmd::Rem),
        value().prop_map(ZSetCmd::Score),
        values().prop_map(ZSetCmd::MScore),
        (float(), value()).prop_map(|(delta, member)| ZSetCmd::IncrBy { delta, member }),
        Just(ZSetCmd::Card),
        (score_bound(), score_bound()).prop_map(|(min, max)| ZSetCmd::Count { min, max }),
        (value(), any::<bool>(), any::<bool>()).prop_map(|(member, rev, with_score)| {
            ZSetCmd::Rank {
                member,
                rev,
                with_score,
            }
        }),
        (
            by,
            any::<bool>(),
            proptest::option::of((small(), small())),
            any::<bool>()
        )
            .prop_map(|(by, rev, limit, with_scores)| ZSetCmd::Range(ZRange {
                by,
                rev,
                limit,
                with_scores
            })),
        (any::<bool>(), proptest::option::of(0u64..3))
            .prop_map(|(max, count)| ZSetCmd::Pop { max, count }),
        scan().prop_map(ZSetCmd::Scan),
    ]
}

fn expire() -> impl Strategy<Value = Command> {
    let kind = prop_oneof![
        Just(ExpireKind::Expire),
        Just(ExpireKind::PExpire),
        Just(ExpireKind::ExpireAt),
        Just(ExpireKind::PExpireAt),
    ];
    (kind, -5i64..60, 0u8..16).prop_map(|(kind, time, b)| {
        Command::Expire(ExpireArgs {
            kind,
            time,
            flags: ExpireFlags {
                nx: b & 1 != 0,
                xx: b & 2 != 0,
                gt: b & 4 != 0,
                lt: b & 8 != 0,
            },
        })
    })
}

/// Any command but a transaction.
pub fn simple_command() -> impl Strategy<Value = Command> {
    prop_oneof![
        Just(Command::Get),
        Just(Command::Exists),
        Just(Command::Digest),
        Just(Command::SMembers),
        value().prop_map(Command::SIsMember),
        Just(Command::SCard),
        (value(), condition(), any::<bool>(), expiry()).prop_map(
            |(value, condition, get, expiry)| {
                Command::Set(SetArgs {
                    value,
                    condition,
                    get,
                    expiry,
                })
            }
        ),
        Just(Command::Del),
        condition().prop_map(Command::DelEx),
        small().prop_map(Command::IncrBy),
        values().prop_map(Command::SAdd),
        values().prop_map(Command::SRem),
        (value(), 0u64..50).prop_map(|(owner, lease_ms)| Command::LockAcquire { owner, lease_ms }),
        value().prop_map(|owner| Command::LockRelease { owner }),
        Just(Command::Ttl),
        Just(Command::PTtl),
        Just(Command::Type),
        Just(Command::StrLen),
        expire(),
        Just(Command::Persist),
        value().prop_map(Command::Append),
        Just(Command::GetDel),
        hash().prop_map(Command::Hash),
        list().prop_map(Command::List),
        zset().prop_map(Command::ZSet),
        float().prop_map(Command::IncrByFloat),
        expiry().prop_map(Command::GetEx),
        (small(), small()).prop_map(|(start, end)| Command::GetRange { start, end }),
        (0u64..6, value()).prop_map(|(offset, value)| Command::SetRange { offset, value }),
        (proptest::option::of(0u64..3), any::<u64>())
            .prop_map(|(count, seed)| Command::SPop { count, seed }),
        (proptest::option::of(small()), any::<u64>())
            .prop_map(|(count, seed)| Command::SRandMember { count, seed }),
        values().prop_map(Command::SMIsMember),
        scan().prop_map(Command::SScan),
    ]
}

/// Any command, a single-key transaction sometimes.
pub fn command() -> impl Strategy<Value = Command> {
    prop_oneof![
        8 => simple_command(),
        1 => proptest::collection::vec(simple_command(), 0..4).prop_map(Command::Transaction),
    ]
}

fn pairs() -> impl Strategy<Value = Vec<(Bytes, Bytes)>> {
    proptest::collection::vec((key(), value()), 1..4)
}

fn keys() -> impl Strategy<Value = Vec<Bytes>> {
    proptest::collection::vec(key(), 1..4)
}

/// A SET with a short time to live: keys that expire within a few batches, so that runs meet
/// expiry often.
fn set_px() -> impl Strategy<Value = Operation> {
    (key(), value(), 1u64..40).prop_map(|(key, value, ms)| Operation::Command {
        key,
        command: Command::Set(SetArgs {
            value,
            condition: Condition::Always,
            get: false,
            expiry: Expiry::AfterMs(ms),
        }),
    })
}

/// Any operation but a transaction.
pub fn simple_operation() -> impl Strategy<Value = Operation> {
    prop_oneof![
        3 => set_px(),
        10 => (key(), command()).prop_map(|(key, command)| Operation::Command { key, command }),
        1 => pairs().prop_map(Operation::MSet),
        1 => pairs().prop_map(Operation::MSetNx),
        1 => (key(), key()).prop_map(|(from, to)| Operation::Rename { from, to }),
        1 => (key(), key()).prop_map(|(from, to)| Operation::RenameNx { from, to }),
        1 => (key(), key(), value()).prop_map(|(from, to, member)| Operation::SMove { from, to, member }),
        1 => (key(), key(), any::<bool>()).prop_map(|(from, to, replace)| Operation::Copy { from, to, replace }),
        1 => keys().prop_map(Operation::Del),
        1 => keys().prop_map(Operation::Exists),
        1 => keys().prop_map(Operation::MGet),
    ]
}

/// Any operation, a transaction sometimes.
pub fn operation() -> impl Strategy<Value = Operation> {
    prop_oneof![
        6 => simple_operation(),
        1 => proptest::collection::vec(simple_operation(), 0..5).prop_map(Operation::Transaction),
    ]
}
