//! NetFS's C-G against P-SMR's freedom (seed 004 §IV, §V-B): any interleaving of the worker
//! groups' calls between two `g_all` calls gives the replies and the final state of the merged
//! order, on random call mixes over a few paths and handles; and so must running each worker
//! group's calls on a thread of its own. The deliberate C-G bug (a `write` in another group
//! than the `read` of its path) must be caught by the same checks.
use logless_netfs::{Fh, FsCommand, FsPath, Mode, NetFs, Time};
use logless_service::testing::{check_c_dep, check_interleaving, check_parallel, Divergence};
use logless_service::{Group, Service};
use proptest::prelude::*;
use proptest::test_runner::{TestRng, TestRunner};

const PATHS: [&str; 7] = ["/", "/a", "/b", "/d", "/d/x", "/d/y", "/d/x/z"];
/// Pairs in one directory, for renames.
const SIBLINGS: [(&str, &str); 4] = [
    ("/a", "/b"),
    ("/b", "/d"),
    ("/d/x", "/d/y"),
    ("/d/y", "/d/x"),
];

fn path() -> impl Strategy<Value = FsPath> {
    (0..PATHS.len()).prop_map(|i| FsPath::new(PATHS[i]).unwrap())
}

fn fh() -> impl Strategy<Value = Fh> {
    (1u64..4).prop_map(Fh)
}

fn time() -> impl Strategy<Value = Time> {
    (0u64..4).prop_map(|secs| Time { secs, nanos: 0 })
}

fn command() -> impl Strategy<Value = FsCommand> {
    let mode = prop_oneof![Just(Mode(0o644)), Just(Mode(0o400))];
    let data = prop::collection::vec(any::<u8>(), 0..6);
    prop_oneof![
        3 => (path(), mode.clone(), time()).prop_map(|(path, mode, time)| FsCommand::Create { path, mode, time }),
        1 => (path(), mode.clone(), time()).prop_map(|(path, mode, time)| FsCommand::Mknod { path, mode, time }),
        1 => (path(), mode, time()).prop_map(|(path, mode, time)| FsCommand::Mkdir { path, mode, time }),
        1 => path().prop_map(|path| FsCommand::Unlink { path }),
        1 => path().prop_map(|path| FsCommand::Rmdir { path }),
        1 => (path(), any::<bool>(), time()).prop_map(|(path, truncate, time)| FsCommand::Open { path, truncate, time }),
        1 => fh().prop_map(|fh| FsCommand::Release { fh }),
        1 => path().prop_map(|path| FsCommand::Opendir { path }),
        1 => fh().prop_map(|fh| FsCommand::Releasedir { fh }),
        1 => (path(), time(), time()).prop_map(|(path, atime, mtime)| FsCommand::Utimens { path, atime, mtime }),
        1 => (path(), 0u32..8).prop_map(|(path, mask)| FsCommand::Access { path, mask }),
        2 => path().prop_map(|path| FsCommand::Lstat { path }),
        3 => (path(), fh(), 0u64..8, 0u64..8).prop_map(|(path, fh, offset, size)| FsCommand::Read { path, fh, offset, size }),
        3 => (path(), fh(), 0u64..8, data, time()).prop_map(|(path, fh, offset, data, time)| FsCommand::Write { path, fh, offset, data, time }),
        1 => path().prop_map(|path| FsCommand::Readdir { path }),
        1 => (0..SIBLINGS.len()).prop_map(|i| FsCommand::Rename {
            from: FsPath::new(SIBLINGS[i].0).unwrap(),
            to: FsPath::new(SIBLINGS[i].1).unwrap(),
        }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn every_p_smr_interleaving_matches_the_merged_order(
        commands in prop::collection::vec(command(), 1..120),
        workers in 1u16..5,
        choices in prop::collection::vec(any::<u16>(), 1..40),
    ) {
        prop_assert_eq!(check_c_dep(&NetFs::new(), &commands, workers), Ok(()));
        prop_assert_eq!(check_interleaving(NetFs::new, &commands, workers, &choices), Ok(()));
    }
}

proptest! {
    // Threads are spawned per segment: fewer cases.
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn worker_groups_run_at_once_as_in_the_merged_order(
        commands in prop::collection::vec(command(), 1..200),
        workers in 2u16..5,
    ) {
        prop_assert_eq!(check_parallel(NetFs::new, &commands, workers), Ok(()));
    }
}

#[test]
fn structural_calls_go_to_g_all_and_path_calls_to_their_path_s_group() {
    let fs = NetFs::new();
    let at = |p: &str| FsPath::new(p).unwrap();
    let time = Time::default();
    let structural = [
        FsCommand::Create {
            path: at("/a"),
            mode: Mode(0o644),
            time,
        },
        FsCommand::Mknod {
            path: at("/a"),
            mode: Mode(0o644),
            time,
        },
        FsCommand::Mkdir {
            path: at("/a"),
            mode: Mode(0o755),
            time,
        },
        FsCommand::Unlink { path: at("/a") },
        FsCommand::Rmdir { path: at("/a") },
        FsCommand::Open {
            path: at("/a"),
            truncate: false,
            time,
        },
        FsCommand::Release { fh: Fh(1) },
        FsCommand::Opendir { path: at("/a") },
        FsCommand::Releasedir { fh: Fh(1) },
        FsCommand::Utimens {
            path: at("/a"),
            atime: time,
            mtime: time,
        },
        FsCommand::Rename {
            from: at("/a"),
            to: at("/b"),
        },
    ];
    for command in &structural {
        assert_eq!(fs.group(command, 4), Group::All, "{command:?}");
    }
    let by_path = |p: &str| {
        [
            FsCommand::Access {
                path: at(p),
                mask: 4,
            },
            FsCommand::Lstat { path: at(p) },
            FsCommand::Read {
                path: at(p),
                fh: Fh(1),
                offset: 0,
                size: 1,
            },
            FsCommand::Write {
                path: at(p),
                fh: Fh(1),
                offset: 0,
                data: vec![1],
                time,
            },
            FsCommand::Readdir { path: at(p) },
        ]
        .map(|command| fs.group(&command, 4))
    };
    for p in ["/a", "/d/x", "/"] {
        let groups = by_path(p);
        assert!(matches!(groups[0], Group::Worker(_)));
        assert!(
            groups.iter().all(|&group| group == groups[0]),
            "{p}: {groups:?}"
        );
    }
}

/// NetFS with its deliberate C-G bug: `write` goes to another group than `read` of its path.
fn split_writes() -> NetFs {
    let mut fs = NetFs::new();
    fs.split_writes_from_reads();
    fs
}

#[test]
fn a_c_g_that_splits_writes_from_reads_is_caught() {
    let a = FsPath::new("/a").unwrap();
    let time = Time::default();
    let commands = [
        FsCommand::Create {
            path: a.clone(),
            mode: Mode(0o644),
            time,
        },
        FsCommand::Write {
            path: a.clone(),
            fh: Fh(1),
            offset: 0,
            data: b"new".to_vec(),
            time,
        },
        FsCommand::Read {
            path: a,
            fh: Fh(1),
            offset: 0,
            size: 3,
        },
    ];
    assert_eq!(
        check_c_dep(&split_writes(), &commands, 2),
        Err((1, 2)),
        "the write and the read of /a"
    );
    // Some interleaving runs the read before the write it depends on.
    let caught = (0..4u16).any(|choice| {
        matches!(
            check_interleaving(split_writes, &commands, 2, &[choice]),
            Err(Divergence::Reply { index: 2, .. })
        )
    });
    assert!(caught, "the split C-G went unnoticed");
    for choice in 0..4u16 {
        assert_eq!(
            check_interleaving(NetFs::new, &commands, 2, &[choice]),
            Ok(())
        );
    }
    assert_eq!(check_c_dep(&NetFs::new(), &commands, 2), Ok(()));
}

#[test]
fn random_call_mixes_catch_a_c_g_that_splits_writes_from_reads() {
    // The bug shows only where a write lands on an open handle of its path with a read of that
    // path in another interleaving: rare in one mix, found within a few thousand (seeded, so
    // every run sees the same ones).
    let config = ProptestConfig {
        cases: 4_000,
        // A failure is what this test expects: nothing to keep for the next run.
        failure_persistence: None,
        ..ProptestConfig::default()
    };
    let rng = TestRng::deterministic_rng(config.rng_algorithm);
    let mut runner = TestRunner::new_with_rng(config, rng);
    let cases = (
        prop::collection::vec(command(), 1..120),
        prop::collection::vec(any::<u16>(), 1..40),
    );
    let outcome = runner.run(&cases, |(commands, choices)| {
        prop_assert_eq!(
            check_interleaving(split_writes, &commands, 2, &choices),
            Ok(())
        );
        Ok(())
    });
    assert!(outcome.is_err(), "no random mix showed the split C-G");
}
