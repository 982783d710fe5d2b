//! The segmented log's behaviour: appends and reads across segments, reopening real files in
//! each mode, truncations, limits, snapshots with fallback, and damage below the flushed end.
use logless_storage::{Dir, Durability, FsDir, SegmentLog, SegmentLogOptions, SimDir, StoreError};

fn options(durability: Durability) -> SegmentLogOptions {
    let mut options = SegmentLogOptions::new(durability);
    options.segment_bytes = 4096;
    options.record_bytes_max = 1024;
    options.snapshot_bytes_max = 1 << 16;
    options
}

fn record(i: u64) -> Vec<u8> {
    let mut v = format!("record {i}:").into_bytes();
    v.resize(10 + (i as usize * 37) % 900, b'x');
    v
}

fn records<D: Dir>(log: &SegmentLog<D>) -> Vec<(u64, Vec<u8>)> {
    log.iter(log.first_index())
        .map(|r| r.map(|(i, b)| (i, b.to_vec())).unwrap())
        .collect()
}

fn expected(range: std::ops::Range<u64>) -> Vec<(u64, Vec<u8>)> {
    range.map(|i| (i, record(i))).collect()
}

/// A log in `path` (sync mode) with records `0..count`, flushed.
fn flushed_log(path: &std::path::Path, count: u64) -> SegmentLog {
    let (mut log, _) = SegmentLog::open(path, options(Durability::Sync)).unwrap();
    for i in 0..count {
        log.append(i, &record(i)).unwrap();
    }
    log.flush().unwrap();
    log
}

#[test]
fn records_survive_a_reopen_in_every_file_mode() {
    for durability in [Durability::Mmap, Durability::Sync, Durability::Emulp] {
        let dir = tempfile::tempdir().unwrap();
        {
            let (mut log, _) = SegmentLog::open(dir.path(), options(durability)).unwrap();
            for i in 0..40 {
                log.append(i, &record(i)).unwrap();
            }
            log.flush().unwrap();
            assert!(log.segment_count() >= 5, "{}", log.segment_count());
            assert_eq!(log.get(17).unwrap(), Some(&record(17)[..]));
            assert_eq!(log.get(40).unwrap(), None);
        }
        let (log, recovery) = SegmentLog::open(dir.path(), options(durability)).unwrap();
        assert_eq!(recovery, Default::default());
        assert_eq!((log.first_index(), log.next_index()), (0, 40));
        assert_eq!(records(&log), expected(0..40));
        assert_eq!(
            records(&log)[10..],
            log.iter(10)
                .map(|r| {
                    let (i, b) = r.unwrap();
                    (i, b.to_vec())
                })
                .collect::<Vec<_>>()[..]
        );
    }
}

#[test]
fn memory_mode_keeps_nothing_across_opens() {
    let dir = tempfile::tempdir().unwrap();
    let (mut log, _) = SegmentLog::open(dir.path(), options(Durability::Memory)).unwrap();
    log.append(0, b"x").unwrap();
    log.flush().unwrap();
    assert_eq!(log.get(0).unwrap(), Some(&b"x"[..]));
    drop(log);
    let (log, _) = SegmentLog::open(dir.path(), options(Durability::Memory)).unwrap();
    assert_eq!(log.next_index(), 0);
}

#[test]
fn prefix_deletion_removes_whole_segments_and_is_durable() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = flushed_log(dir.path(), 40);
    let segments = log.segment_count();
    log.truncate_prefix(25).unwrap();
    assert!(log.segment_count() < segments);
    assert_eq!(log.get(24).unwrap(), None);
    assert_eq!(records(&log), expected(25..40));
    drop(log);
    let files = std::fs::read_dir(dir.path()).unwrap().count();
    let (mut log, _) = SegmentLog::open(dir.path(), options(Durability::Sync)).unwrap();
    assert_eq!(records(&log), expected(25..40));
    assert_eq!(files, 1 + log.segment_count(), "meta and the kept segments");
    // Past the end: the log is empty and continues at the new first index.
    log.truncate_prefix(100).unwrap();
    assert_eq!(
        (log.first_index(), log.next_index(), log.segment_count()),
        (100, 100, 0)
    );
    log.append(100, &record(100)).unwrap();
    log.flush().unwrap();
    drop(log);
    let (log, _) = SegmentLog::open(dir.path(), options(Durability::Sync)).unwrap();
    assert_eq!(records(&log), expected(100..101));
}

#[test]
fn tail_truncation_drops_records_and_new_ones_replace_them() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = flushed_log(dir.path(), 30);
    log.truncate_tail(12).unwrap();
    assert_eq!(log.next_index(), 12);
    log.append(12, b"replaced").unwrap();
    log.flush().unwrap();
    drop(log);
    let (log, recovery) = SegmentLog::open(dir.path(), options(Durability::Sync)).unwrap();
    assert!(!recovery.torn_tail);
    let mut want = expected(0..12);
    want.push((12, b"replaced".to_vec()));
    assert_eq!(records(&log), want);
}

#[test]
fn limits_and_order_are_checked_and_change_nothing() {
    let (mut log, _) = SegmentLog::open_on(SimDir::new(), options(Durability::Sync)).unwrap();
    assert!(matches!(
        log.append(0, &[0; 1025]),
        Err(StoreError::RecordTooLarge {
            bytes: 1025,
            bytes_max: 1024
        })
    ));
    assert!(matches!(
        log.append(1, b"x"),
        Err(StoreError::OutOfOrder {
            index: 1,
            expected: 0
        })
    ));
    log.append(0, &[0; 1024]).unwrap();
    assert!(matches!(
        log.truncate_tail(2),
        Err(StoreError::OutOfOrder { .. })
    ));
    assert_eq!(log.next_index(), 1);
    let mut bad = options(Durability::Sync);
    bad.segment_bytes = 1024;
    assert!(matches!(
        SegmentLog::open_on(SimDir::new(), bad),
        Err(StoreError::InvalidOptions(_))
    ));
}

#[test]
fn the_newest_two_snapshots_are_kept_and_a_damaged_newest_falls_back() {
    let (mut log, _) = SegmentLog::open_on(SimDir::new(), options(Durability::Sync)).unwrap();
    assert_eq!(log.snapshot(), None);
    for index in [10, 20, 30] {
        log.write_snapshot(index, format!("state {index}").as_bytes())
            .unwrap();
    }
    assert_eq!(log.snapshot(), Some((30, &b"state 30"[..])));
    assert!(matches!(
        log.write_snapshot(25, b"old"),
        Err(StoreError::OutOfOrder { .. })
    ));
    let mut dir = log.dir().clone();
    let names = dir.names();
    assert_eq!(
        names.iter().filter(|n| n.starts_with("snap-")).count(),
        2,
        "{names:?}"
    );
    // Damage the newest snapshot's payload: the open falls back to the one before.
    let newest = dir.open("snap-00000000000000000030").unwrap();
    dir.file_mut(newest).flip_bit(34, 3);
    let (log, recovery) = SegmentLog::open_on(dir, options(Durability::Sync)).unwrap();
    assert_eq!(recovery.damaged_snapshots, ["snap-00000000000000000030"]);
    assert_eq!(log.snapshot(), Some((20, &b"state 20"[..])));
}

#[test]
fn a_damaged_record_below_the_flushed_end_is_an_error_not_a_torn_tail() {
    let (mut log, _) = SegmentLog::open_on(SimDir::new(), options(Durability::Sync)).unwrap();
    for i in 0..3 {
        log.append(i, &record(i)).unwrap();
    }
    log.flush().unwrap();
    let mut dir = log.dir().clone();
    let segment = dir.open("seg-00000000000000000000").unwrap();
    // The middle record's payload (records start at 64; the first takes 16 + 10 bytes, 8-aligned).
    dir.file_mut(segment).flip_bit(64 + 32 + 20, 0);
    assert!(matches!(
        SegmentLog::open_on(dir, options(Durability::Sync)),
        Err(StoreError::Corrupt {
            what: "damaged record below the flushed end",
            ..
        })
    ));
    // The same damage past the flushed end (not yet flushed) is a torn tail: the log ends
    // before it and the open repairs it.
    let (mut log, _) = SegmentLog::open_on(SimDir::new(), options(Durability::Sync)).unwrap();
    log.append(0, &record(0)).unwrap();
    log.flush().unwrap();
    for i in 1..3 {
        log.append(i, &record(i)).unwrap();
    }
    let mut dir = log.dir().clone();
    let segment = dir.open("seg-00000000000000000000").unwrap();
    dir.file_mut(segment).flip_bit(64 + 32 + 20, 0);
    let (log, recovery) = SegmentLog::open_on(dir, options(Durability::Sync)).unwrap();
    assert!(recovery.torn_tail);
    assert_eq!(records(&log), expected(0..1));
    let (log, recovery) =
        SegmentLog::open_on(log.dir().clone(), options(Durability::Sync)).unwrap();
    assert!(!recovery.torn_tail, "the repair zeroed the torn bytes");
    assert_eq!(records(&log), expected(0..1));
}

#[test]
fn a_second_opener_of_the_directory_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let _log = SegmentLog::open(dir.path(), options(Durability::Mmap)).unwrap();
    assert!(matches!(
        SegmentLog::<FsDir>::open(dir.path(), options(Durability::Mmap)),
        Err(StoreError::Locked)
    ));
}

#[test]
fn a_last_segment_without_a_valid_header_is_dropped_only_if_unwritten() {
    let (mut log, _) = SegmentLog::open_on(SimDir::new(), options(Durability::Sync)).unwrap();
    for i in 0..3 {
        log.append(i, &record(i)).unwrap();
    }
    log.flush().unwrap();
    // An interrupted roll: the segment file exists, its header never reached the media.
    let mut dir = log.dir().clone();
    dir.open("seg-00000000000000000003").unwrap();
    let (log, recovery) = SegmentLog::open_on(dir, options(Durability::Sync)).unwrap();
    assert_eq!(recovery.segments_removed, 1);
    assert_eq!(records(&log), expected(0..3));
    // A damaged header over written records is damage, not an interrupted roll.
    let mut dir = log.dir().clone();
    let segment = dir.open("seg-00000000000000000000").unwrap();
    dir.file_mut(segment).flip_bit(0, 0);
    assert!(matches!(
        SegmentLog::open_on(dir, options(Durability::Sync)),
        Err(StoreError::Corrupt {
            what: "segment header fails its check",
            ..
        })
    ));
}

/// A snapshot written beside the log by another writer is taken in as the newest, the newest
/// two are kept, one older than the newest is not taken in and its file is removed, and a
/// reopen reads the newest.
#[test]
fn snapshots_written_beside_the_log_are_taken_in() {
    use logless_storage::segment_log::write_snapshot_file;
    let dir = tempfile::tempdir().unwrap();
    let (mut log, _) = SegmentLog::open(dir.path(), options(Durability::Sync)).unwrap();
    log.write_snapshot(10, b"ten").unwrap();
    for (index, bytes) in [(20, &b"twenty"[..]), (30, b"thirty")] {
        write_snapshot_file(dir.path(), index, bytes, true).unwrap();
        assert!(log.adopt_snapshot(index).unwrap());
        assert_eq!(log.snapshot(), Some((index, bytes)));
    }
    write_snapshot_file(dir.path(), 25, b"late", true).unwrap();
    assert!(!log.adopt_snapshot(25).unwrap());
    let mut names: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.starts_with("snap-"))
        .collect();
    names.sort();
    assert_eq!(
        names,
        ["snap-00000000000000000020", "snap-00000000000000000030"]
    );
    drop(log);
    let (log, _) = SegmentLog::open(dir.path(), options(Durability::Sync)).unwrap();
    assert_eq!(log.snapshot(), Some((30, &b"thirty"[..])));
}
