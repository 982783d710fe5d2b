//! The key-value service's C-G against P-SMR's freedom (seed 004 §IV): any interleaving of
//! the worker groups' commands between two `g_all` commands must give the replies and the
//! final tree of the merged order, and so must running each worker group on a thread of its
//! own. The deliberate C-G bug must be caught by the same check.
use logless_btree::{KvCommand, KvService};
use logless_service::testing::{check_c_dep, check_interleaving, check_parallel, Divergence};
use proptest::prelude::*;

fn key(k: u8) -> Vec<u8> {
    format!("key{k}").into_bytes()
}

fn command() -> impl Strategy<Value = KvCommand> {
    // A small key space, so that commands on one key meet often.
    let k = 0u8..12;
    let v = any::<u8>().prop_map(|v| vec![v]);
    prop_oneof![
        2 => (k.clone(), v.clone()).prop_map(|(k, value)| KvCommand::Insert { key: key(k), value }),
        4 => (k.clone(), v).prop_map(|(k, value)| KvCommand::Update { key: key(k), value }),
        4 => k.clone().prop_map(|k| KvCommand::Read { key: key(k) }),
        1 => k.clone().prop_map(|k| KvCommand::Delete { key: key(k) }),
        1 => (k, 0u64..5).prop_map(|(k, count)| KvCommand::Range { start: key(k), count }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn every_p_smr_interleaving_matches_the_merged_order(
        commands in prop::collection::vec(command(), 1..80),
        workers in 1u16..5,
        choices in prop::collection::vec(any::<u16>(), 1..40),
    ) {
        let make = || KvService::with_fanout(4);
        prop_assert_eq!(check_c_dep(&make(), &commands, workers), Ok(()));
        prop_assert_eq!(check_interleaving(make, &commands, workers, &choices), Ok(()));
    }
}

proptest! {
    // Threads are spawned per segment: fewer cases, longer runs of worker-group commands.
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn worker_groups_run_at_once_as_in_the_merged_order(
        commands in prop::collection::vec(command(), 1..300),
        workers in 2u16..5,
    ) {
        let make = || KvService::with_fanout(4);
        prop_assert_eq!(check_parallel(make, &commands, workers), Ok(()));
    }
}

#[test]
fn a_c_g_that_splits_dependent_commands_is_caught() {
    let make = || {
        let mut service = KvService::with_fanout(4);
        service.split_dependent_commands();
        service
    };
    let commands = [
        KvCommand::Insert {
            key: key(1),
            value: b"old".to_vec(),
        },
        KvCommand::Update {
            key: key(1),
            value: b"new".to_vec(),
        },
        KvCommand::Read { key: key(1) },
    ];
    // The bug sends the insert to key 1's group instead of g_all, and the update and the read
    // to the next group: some interleaving runs them before the insert.
    let caught = (0..4u16).any(|choice| {
        matches!(
            check_interleaving(make, &commands, 2, &[choice]),
            Err(Divergence::Reply { .. })
        )
    });
    assert!(caught, "the split C-G went unnoticed");
    assert_eq!(
        check_c_dep(&make(), &commands, 2),
        Err((0, 1)),
        "insert, then update of key 1"
    );
    let correct = || KvService::with_fanout(4);
    for choice in 0..4u16 {
        assert_eq!(check_interleaving(correct, &commands, 2, &[choice]), Ok(()));
    }
    assert_eq!(check_c_dep(&correct(), &commands, 2), Ok(()));
}
