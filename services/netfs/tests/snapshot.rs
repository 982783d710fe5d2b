//! NetFS's snapshots: a file system restored from one has the digest of the one serialised
//! (directories, files and their bytes, open handles, an unlinked file still open) and answers
//! the next calls alike; bytes that are not a snapshot are refused without a panic and leave
//! the file system as it was.
use logless_netfs::{Fh, FsCommand, FsPath, FsReply, Mode, NetFs, Time};
use logless_service::Service;
use proptest::prelude::*;

fn path(path: &str) -> FsPath {
    FsPath::new(path).unwrap()
}

fn at(secs: u64) -> Time {
    Time { secs, nanos: 7 }
}

/// A file system with a directory, two files with bytes, a handle on each and one file
/// unlinked while open.
fn busy() -> (NetFs, Fh) {
    let mut fs = NetFs::new();
    let mode = Mode(0o644);
    fs.execute(&FsCommand::Mkdir {
        path: path("/d"),
        mode,
        time: at(1),
    });
    let mut fhs = Vec::new();
    for (name, secs) in [("/d/x", 2), ("/y", 3)] {
        let created = fs.execute(&FsCommand::Create {
            path: path(name),
            mode,
            time: at(secs),
        });
        let FsReply::Opened(fh) = created else {
            panic!("{created:?}")
        };
        let data = name.as_bytes().repeat(3);
        let write = FsCommand::Write {
            path: path(name),
            fh,
            offset: 1,
            data,
            time: at(secs),
        };
        assert!(matches!(fs.execute(&write), FsReply::Written(_)));
        fhs.push(fh);
    }
    fs.execute(&FsCommand::Unlink { path: path("/y") });
    fs.execute(&FsCommand::Opendir { path: path("/d") });
    (fs, fhs[0])
}

#[test]
fn a_restored_file_system_has_the_same_state_and_answers_alike() {
    let (mut original, fh) = busy();
    let mut restored = NetFs::new();
    restored.restore(&original.snapshot()).unwrap();
    assert_eq!(restored.digest(), original.digest());
    assert_eq!(restored.snapshot(), original.snapshot());
    let next = [
        FsCommand::Read {
            path: path("/d/x"),
            fh,
            offset: 0,
            size: 16,
        },
        FsCommand::Readdir { path: path("/d") },
        FsCommand::Create {
            path: path("/d/z"),
            mode: Mode(0o600),
            time: at(9),
        },
        FsCommand::Release { fh: Fh(2) },
        FsCommand::Lstat { path: path("/y") },
    ];
    for command in &next {
        assert_eq!(
            restored.execute(command),
            original.execute(command),
            "{command:?}"
        );
    }
    assert_eq!(restored.digest(), original.digest());
}

#[test]
fn a_snapshot_cut_short_or_followed_by_more_bytes_is_refused() {
    let (fs, _) = busy();
    let snapshot = fs.snapshot();
    for end in 0..snapshot.len() {
        let mut target = NetFs::new();
        let before = target.digest();
        assert!(target.restore(&snapshot[..end]).is_err(), "cut at {end}");
        assert_eq!(target.digest(), before);
    }
    let mut longer = snapshot.clone();
    longer.push(0);
    assert!(NetFs::new().restore(&longer).is_err());
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn random_bytes_never_panic_a_restore(flip in 0usize..400, bit in 0u8..8, bytes: Vec<u8>) {
        let (fs, _) = busy();
        let mut altered = fs.snapshot();
        let index = flip % altered.len();
        altered[index] ^= 1 << bit;
        for candidate in [altered, bytes] {
            let mut target = NetFs::new();
            let before = target.digest();
            if target.restore(&candidate).is_err() {
                prop_assert_eq!(target.digest(), before);
            }
        }
    }
}
