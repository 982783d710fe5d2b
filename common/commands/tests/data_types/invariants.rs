//! Properties every command keeps on any register: run through `support::run_at`'s checks
//! (unchanged means identical, reads change nothing and read as applied, the result encodes),
//! and no register holds an empty collection.
use std::num::NonZeroI64;

use logless_commands::command::{
    Command, Expiry, HashCmd, ListCmd, ListEnd, ScanArgs, ScoreBound, ZAddFlags, ZRange, ZRangeBy,
    ZSetCmd,
};
use logless_commands::value::{Data, Register};
use proptest::prelude::*;

use crate::support::*;

fn member() -> impl Strategy<Value = bytes::Bytes> {
    prop_oneof![Just(b("a")), Just(b("b")), Just(b("c"))]
}

fn hash_command() -> impl Strategy<Value = Command> {
    prop_oneof![
        (member(), member()).prop_map(|(f, v)| HashCmd::HSet(vec![(f, v)])),
        member().prop_map(|f| HashCmd::HDel(vec![f])),
        member().prop_map(HashCmd::HGet),
        (member(), -2i64..3).prop_map(|(field, delta)| HashCmd::HIncrBy { field, delta }),
        (member(), -2i8..3).prop_map(|(field, d)| HashCmd::HIncrByFloat {
            field,
            delta: f(f64::from(d) / 2.0)
        }),
        (proptest::option::of(-3i64..4), any::<bool>(), any::<u64>()).prop_map(
            |(count, with_values, seed)| HashCmd::HRandField {
                count,
                with_values,
                seed
            }
        ),
        (0u64..3).prop_map(|cursor| HashCmd::HScan {
            args: ScanArgs::from_cursor(cursor),
            no_values: false
        }),
        Just(HashCmd::HGetAll),
    ]
    .prop_map(Command::Hash)
}

fn end() -> impl Strategy<Value = ListEnd> {
    prop_oneof![Just(ListEnd::Left), Just(ListEnd::Right)]
}

fn list_command() -> impl Strategy<Value = Command> {
    prop_oneof![
        (end(), member(), any::<bool>()).prop_map(|(end, v, only_if_exists)| ListCmd::Push {
            end,
            values: vec![v],
            only_if_exists
        }),
        (end(), proptest::option::of(0u64..3)).prop_map(|(end, count)| ListCmd::Pop { end, count }),
        (-3i64..3, -3i64..3).prop_map(|(start, stop)| ListCmd::Range { start, stop }),
        (-3i64..3, member()).prop_map(|(index, value)| ListCmd::Set { index, value }),
        (any::<bool>(), member(), member()).prop_map(|(before, pivot, value)| ListCmd::Insert {
            before,
            pivot,
            value
        }),
        (-2i64..3, member()).prop_map(|(count, value)| ListCmd::Rem { count, value }),
        (-3i64..3, -3i64..3).prop_map(|(start, stop)| ListCmd::Trim { start, stop }),
        (
            member(),
            prop_oneof![Just(1i64), Just(-1), Just(2)],
            proptest::option::of(0u64..3),
            0u64..3
        )
            .prop_map(|(value, rank, count, max_len)| ListCmd::Pos {
                value,
                rank: NonZeroI64::new(rank).unwrap(),
                count,
                max_len
            }),
        (end(), end()).prop_map(|(from, to)| ListCmd::Move { from, to }),
    ]
    .prop_map(Command::List)
}

fn zset_command() -> impl Strategy<Value = Command> {
    let score = || (-2i8..3).prop_map(|s| f(f64::from(s)));
    let bound = || {
        (-2i8..3, any::<bool>()).prop_map(|(s, exclusive)| ScoreBound {
            score: f(f64::from(s)),
            exclusive,
        })
    };
    prop_oneof![
        (score(), member(), any::<[bool; 6]>()).prop_map(|(s, m, [nx, xx, gt, lt, ch, incr])| {
            ZSetCmd::Add {
                members: vec![(s, m)],
                flags: ZAddFlags {
                    nx,
                    xx,
                    gt,
                    lt,
                    ch,
                    incr,
                },
            }
        }),
        member().prop_map(|m| ZSetCmd::Rem(vec![m])),
        (score(), member()).prop_map(|(delta, member)| ZSetCmd::IncrBy { delta, member }),
        (any::<bool>(), proptest::option::of(0u64..3))
            .prop_map(|(max, count)| ZSetCmd::Pop { max, count }),
        (
            bound(),
            bound(),
            any::<bool>(),
            proptest::option::of((-1i64..2, -1i64..2))
        )
            .prop_map(|(min, max, rev, limit)| ZSetCmd::Range(ZRange {
                by: ZRangeBy::Score { min, max },
                rev,
                limit,
                with_scores: true
            })),
        (-3i64..3, -3i64..3, any::<bool>()).prop_map(|(start, stop, rev)| ZSetCmd::Range(ZRange {
            by: ZRangeBy::Index { start, stop },
            rev,
            limit: None,
            with_scores: false
        })),
        (member(), any::<bool>(), any::<bool>()).prop_map(|(member, rev, with_score)| {
            ZSetCmd::Rank {
                member,
                rev,
                with_score,
            }
        }),
    ]
    .prop_map(Command::ZSet)
}

fn other_command() -> impl Strategy<Value = Command> {
    prop_oneof![
        member().prop_map(|m| Command::SAdd(vec![m])),
        member().prop_map(|m| Command::SRem(vec![m])),
        (proptest::option::of(0u64..3), any::<u64>())
            .prop_map(|(count, seed)| Command::SPop { count, seed }),
        (proptest::option::of(-3i64..3), any::<u64>())
            .prop_map(|(count, seed)| Command::SRandMember { count, seed }),
        (-2i8..3).prop_map(|d| Command::IncrByFloat(f(f64::from(d) / 4.0))),
        prop_oneof![
            Just(Expiry::Keep),
            Just(Expiry::Clear),
            (0u64..3).prop_map(Expiry::AfterMs)
        ]
        .prop_map(Command::GetEx),
        (0u64..4, member()).prop_map(|(offset, value)| Command::SetRange { offset, value }),
        (-3i64..3, -3i64..3).prop_map(|(start, end)| Command::GetRange { start, end }),
        Just(Command::Del),
        Just(Command::IncrBy(1)),
        Just(Command::Type),
    ]
}

fn command() -> impl Strategy<Value = Command> {
    let single = prop_oneof![
        hash_command(),
        list_command(),
        zset_command(),
        other_command()
    ];
    prop_oneof![
        4 => single.clone(),
        1 => proptest::collection::vec(single, 0..4).prop_map(Command::Transaction),
    ]
}

fn no_empty_collection(reg: &Register) -> bool {
    match &reg.data {
        Data::Set(s) => !s.is_empty(),
        Data::Hash(h) => !h.is_empty(),
        Data::List(l) => !l.is_empty(),
        Data::ZSet(z) => !z.is_empty(),
        _ => true,
    }
}

proptest! {
    #[test]
    fn commands_keep_the_register_invariants(
        commands in proptest::collection::vec((command(), 0u64..3), 0..30),
    ) {
        let mut reg = Register::default();
        let mut now_ms = NOW_MS;
        for (cmd, step) in commands {
            now_ms += step;
            let name = cmd.name();
            prop_assert!(!name.is_empty());
            reg = run_at(&cmd, reg, now_ms).1;
            prop_assert!(no_empty_collection(&reg), "{:?} left {:?}", cmd, reg);
        }
    }
}
