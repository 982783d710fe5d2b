//! Crash consistency of the segmented log and its snapshots on a simulated directory (`sync`
//! mode).
//!
//! A scenario is a sequence of operations (append, flush, prefix deletion, tail truncation,
//! snapshot). It is replayed with a crash after every operation on the media or the directory;
//! at each crash point the images a power failure could leave are built (any prefix of the
//! unsynced directory operations, any subset of the unpersisted sectors of every file, plus
//! optionally one more sector torn) and recovered. The recovered log must be a prefix of the
//! log just before or just after the operation in flight, from that state's first index, and
//! hold at least every record acknowledged (by a flush, or by a truncation, which is durable
//! when it returns); the snapshot must be the last one written or the one in flight. Each
//! [`LogMutation`] removes one persist step, and the exhaustive test must catch every one.
use std::collections::BTreeMap;

use logless_storage::media::SECTOR_BYTES;
use logless_storage::{Durability, LogMutation, SegmentLog, SegmentLogOptions, SimDir};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

mod support;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Op {
    /// Append one record of this many bytes.
    Append(usize),
    Flush,
    /// Delete every record but the last.
    Prefix,
    /// Delete the last record.
    Tail,
    /// Write a snapshot at the next index.
    Snapshot,
}

fn options() -> SegmentLogOptions {
    let mut options = SegmentLogOptions::new(Durability::Sync);
    // One sector per segment: a record of 300 bytes rolls to a new segment almost every time.
    options.segment_bytes = 512;
    options.record_bytes_max = 400;
    options.snapshot_bytes_max = 1024;
    options
}

/// The bytes of the record appended at `index` by operation number `tag` (unique, so a record
/// re-appended after a tail truncation differs from the one it replaces).
fn value(index: u64, tag: usize, len: usize) -> Vec<u8> {
    let mut v = format!("{index}/{tag}:").into_bytes();
    v.resize(len.max(v.len()), b'a' + (tag % 26) as u8);
    v
}

/// What the log holds after some operations, and what of it is acknowledged.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct Model {
    first: u64,
    next: u64,
    log: BTreeMap<u64, Vec<u8>>,
    /// Records in `first..acked_next` were acknowledged and must survive.
    acked_next: u64,
    snapshot: Option<(u64, Vec<u8>)>,
}

impl Model {
    fn prefix_below(&self) -> u64 {
        self.next.saturating_sub(1).max(self.first)
    }

    fn tail_from(&self) -> u64 {
        self.next.saturating_sub(1).max(self.first)
    }

    /// Snapshots never go back, even after a tail truncation.
    fn snapshot_index(&self) -> u64 {
        self.snapshot
            .as_ref()
            .map_or(self.next, |s| s.0.max(self.next))
    }

    fn apply(&mut self, op: Op, tag: usize) {
        match op {
            Op::Append(len) => {
                self.log.insert(self.next, value(self.next, tag, len));
                self.next += 1;
            }
            Op::Flush => self.acked_next = self.next,
            Op::Prefix => {
                let below = self.prefix_below();
                self.first = self.first.max(below);
                self.next = self.next.max(self.first);
                self.log = self.log.split_off(&self.first);
                self.acked_next = self.acked_next.max(self.first);
            }
            Op::Tail => {
                let from = self.tail_from();
                self.log.split_off(&from);
                self.next = from;
                self.acked_next = self.acked_next.min(from);
            }
            Op::Snapshot => {
                let index = self.snapshot_index();
                self.snapshot = Some((index, value(index, tag, 100)));
            }
        }
    }
}

fn perform(log: &mut SegmentLog<SimDir>, model: &Model, op: Op, tag: usize) {
    match op {
        Op::Append(len) => log
            .append(model.next, &value(model.next, tag, len))
            .unwrap(),
        Op::Flush => log.flush().unwrap(),
        Op::Prefix => log.truncate_prefix(model.prefix_below()).unwrap(),
        Op::Tail => log.truncate_tail(model.tail_from()).unwrap(),
        Op::Snapshot => {
            let index = model.snapshot_index();
            log.write_snapshot(index, &value(index, tag, 100)).unwrap();
        }
    }
}

/// The models after 0, 1, .. all operations.
fn models(ops: &[Op]) -> Vec<Model> {
    let mut model = Model::default();
    let mut out = vec![model.clone()];
    for (tag, &op) in ops.iter().enumerate() {
        model.apply(op, tag);
        out.push(model.clone());
    }
    out
}

/// Replays `ops` on a new log, taking the crash snapshot after `crash_after` operations.
/// Returns the directory and how many operations completed before the crash point.
fn run(ops: &[Op], crash_after: Option<usize>, mutation: LogMutation) -> (SimDir, usize) {
    let mut dir = SimDir::new();
    dir.crash_after_ops = crash_after;
    let (mut log, _) = SegmentLog::open_on(dir, options()).unwrap();
    log.set_mutation(mutation);
    let mut model = Model::default();
    let mut completed = 0;
    for (tag, &op) in ops.iter().enumerate() {
        perform(&mut log, &model, op, tag);
        model.apply(op, tag);
        if crash_after.is_none_or(|n| log.dir().ops() <= n) {
            completed += 1;
        }
    }
    (log.dir().clone(), completed)
}

/// The records and snapshot of a recovered log.
type Recovered = (u64, Vec<(u64, Vec<u8>)>, Option<(u64, Vec<u8>)>);

fn recovered(log: &SegmentLog<SimDir>) -> Result<Recovered, String> {
    let mut records = Vec::new();
    for r in log.iter(log.first_index()) {
        let (i, bytes) = r.map_err(|e| format!("read failed: {e}"))?;
        records.push((i, bytes.to_vec()));
    }
    let snapshot = log.snapshot().map(|(i, b)| (i, b.to_vec()));
    Ok((log.first_index(), records, snapshot))
}

/// Recovers `dir` and checks it against the models before and after the operation in flight;
/// then cuts the power at once (nothing unpersisted or unsynced kept) and checks that it
/// recovers the same again: what an open serves, it has made durable (which matters after a
/// kill -9, when the page cache holds writes that no flush persisted).
fn check(dir: SimDir, before: &Model, after: &Model, mutation: LogMutation) -> Result<(), String> {
    let (log, _) = SegmentLog::open_mutated(dir, options(), mutation)
        .map_err(|e| format!("recovery failed: {e}"))?;
    check_recovered(&log, before, after)?;
    let again = log.dir().at_crash().crash_image(0, &[], None);
    let (log2, _) =
        SegmentLog::open_on(again, options()).map_err(|e| format!("second recovery: {e}"))?;
    if recovered(&log2)? != recovered(&log)? {
        return Err("a second crash right after recovery changed the log".into());
    }
    Ok(())
}

fn check_recovered(log: &SegmentLog<SimDir>, before: &Model, after: &Model) -> Result<(), String> {
    let (first, next) = (log.first_index(), log.next_index());
    let acked = before.acked_next.min(after.acked_next).max(first);
    let mut records = Vec::new();
    for r in log.iter(first) {
        let (i, bytes) = r.map_err(|e| format!("read failed: {e}"))?;
        records.push((i, bytes.to_vec()));
    }
    if records.len() as u64 != next - first || records.iter().zip(first..).any(|(r, i)| r.0 != i) {
        return Err(format!("indices not contiguous from {first}"));
    }
    let matches = |m: &Model| {
        m.first == first
            && next <= m.next
            && next >= acked
            && records.iter().all(|(i, b)| m.log.get(i) == Some(b))
    };
    if !matches(before) && !matches(after) {
        return Err(format!(
            "recovered {first}..{next} {:?}; allowed {}..{} (acked {}) or {}..{} (acked {})",
            records
                .iter()
                .map(|r| String::from_utf8_lossy(&r.1[..r.1.len().min(8)]).into_owned())
                .collect::<Vec<_>>(),
            before.first,
            before.next,
            before.acked_next,
            after.first,
            after.next,
            after.acked_next
        ));
    }
    let snapshot = log.snapshot().map(|(i, b)| (i, b.to_vec()));
    if snapshot != before.snapshot && snapshot != after.snapshot {
        let show = |s: &Option<(u64, Vec<u8>)>| {
            s.as_ref()
                .map(|s| (s.0, String::from_utf8_lossy(&s.1[..8]).into_owned()))
        };
        return Err(format!(
            "snapshot {:?} recovered, allowed {:?} or {:?}",
            show(&snapshot),
            show(&before.snapshot),
            show(&after.snapshot)
        ));
    }
    Ok(())
}

/// Every crash image at every crash point from `skip_ops` on. Returns (images, violations).
fn every_crash(
    ops: &[Op],
    skip_ops: usize,
    mutation: LogMutation,
    stop_early: bool,
) -> (usize, Vec<String>) {
    let models = models(ops);
    let (done, _) = run(ops, None, mutation);
    let mut images = 0;
    let mut violations = Vec::new();
    for n in skip_ops..=done.ops() {
        let (dir, completed) = run(ops, Some(n), mutation);
        let crash = dir.at_crash();
        let dirty = crash.dirty_sectors();
        assert!(dirty.len() <= 10, "too many dirty sectors: {}", dirty.len());
        let before = &models[completed];
        let after = &models[(completed + 1).min(ops.len())];
        // kill -9 at this point, then a power failure right after the recovery.
        images += 1;
        if let Err(e) = check(crash.process_crash(), before, after, mutation) {
            violations.push(format!("{ops:?}: kill -9 after op {n}: {e}"));
            if stop_early {
                return (images, violations);
            }
        }
        for dir_ops in 0..=crash.pending_dir_ops() {
            // Tears at every 8-byte step: a word store is atomic, nothing larger is.
            for (kept, torn) in support::kept_and_torn(&dirty, SECTOR_BYTES, 8) {
                images += 1;
                let image = crash.crash_image(dir_ops, &kept, torn);
                if let Err(e) = check(image, before, after, mutation) {
                    violations.push(format!(
                        "{ops:?}: crash after op {n} ({completed} done), dir ops {dir_ops}, \
                         kept {kept:?}, torn {torn:?}: {e}"
                    ));
                    if stop_early {
                        return (images, violations);
                    }
                }
            }
        }
    }
    (images, violations)
}

const CHOICES: [Op; 6] = [
    Op::Append(20),
    Op::Append(300),
    Op::Flush,
    Op::Prefix,
    Op::Tail,
    Op::Snapshot,
];

/// Starting states (acknowledged before any crash) and every sequence of one to three
/// operations after each.
fn scenarios() -> Vec<(Vec<Op>, usize)> {
    let prefixes: Vec<Vec<Op>> = vec![
        vec![],
        // Three records over two segments, flushed, and a snapshot: truncations have segments
        // to remove and a snapshot to keep as the previous one.
        vec![
            Op::Append(20),
            Op::Append(300),
            Op::Append(300),
            Op::Flush,
            Op::Snapshot,
        ],
    ];
    let mut out = Vec::new();
    for prefix in prefixes {
        let mut level = vec![prefix.clone()];
        for _ in 0..3 {
            let mut next = Vec::new();
            for seq in &level {
                for op in CHOICES {
                    let mut s = seq.clone();
                    s.push(op);
                    next.push(s);
                }
            }
            out.extend(next.iter().map(|s| (s.clone(), prefix.len())));
            level = next;
        }
    }
    out
}

fn exhaustive(mutation: LogMutation, stop_early: bool) -> (usize, usize, Vec<String>) {
    let scenarios = scenarios();
    let (mut images, mut violations) = (0, Vec::new());
    for (ops, prefix) in &scenarios {
        let skip = if *prefix == 0 {
            0
        } else {
            run(&ops[..*prefix], None, mutation).0.ops()
        };
        let (n, v) = every_crash(ops, skip, mutation, stop_early);
        images += n;
        violations.extend(v);
        if stop_early && !violations.is_empty() {
            break;
        }
    }
    (scenarios.len(), images, violations)
}

#[test]
fn every_crash_state_of_up_to_three_log_operations_recovers_a_prefix() {
    let (scenarios, images, violations) = exhaustive(LogMutation::None, false);
    println!("{scenarios} scenarios, {images} crash images enumerated");
    support::assert_no_violations(&violations);
    assert_eq!(scenarios, 2 * (6 + 36 + 216));
    assert_eq!(images, 481_832);
}

fn assert_caught(mutation: LogMutation) {
    let (_, _, violations) = exhaustive(mutation, true);
    support::assert_caught(&mutation, &violations);
}

#[test]
fn removing_the_record_persist_is_caught() {
    assert_caught(LogMutation::SkipRecordPersist);
}

#[test]
fn removing_the_persists_of_recovery_is_caught() {
    assert_caught(LogMutation::SkipRecoveryPersist);
}

#[test]
fn removing_the_first_index_persist_is_caught() {
    assert_caught(LogMutation::SkipMetaPersist);
}

#[test]
fn removing_the_truncation_persist_is_caught() {
    assert_caught(LogMutation::SkipTruncatePersist);
}

#[test]
fn removing_the_snapshot_persist_is_caught() {
    assert_caught(LogMutation::SkipSnapshotPersist);
}

#[test]
fn removing_the_segment_create_persist_is_caught() {
    assert_caught(LogMutation::SkipSegmentCreatePersist);
}

/// A random sequence: mostly appends and flushes, with prefix deletions, tail truncations and
/// snapshots, long enough to roll through many segments.
fn random_ops(rng: &mut SmallRng, count: usize) -> Vec<Op> {
    (0..count)
        .map(|_| match rng.random_range(0..20) {
            0..=9 => Op::Append(rng.random_range(0..=400)),
            10..=14 => Op::Flush,
            15 | 16 => Op::Prefix,
            17 | 18 => Op::Tail,
            _ => Op::Snapshot,
        })
        .collect()
}

/// Samples crash images of long random sequences; returns the images checked.
fn sampled(seed: u64, images_min: usize, mutation: LogMutation) -> Result<usize, String> {
    let mut rng = SmallRng::seed_from_u64(seed);
    let mut checked = 0;
    while checked < images_min {
        let ops = random_ops(&mut rng, 60);
        let models = models(&ops);
        let (done, _) = run(&ops, None, mutation);
        for _ in 0..20 {
            let n = rng.random_range(0..=done.ops());
            let (dir, completed) = run(&ops, Some(n), mutation);
            let crash = dir.at_crash();
            let dirty = crash.dirty_sectors();
            let (kept, unkept): (Vec<_>, Vec<_>) = dirty.iter().partition(|_| rng.random_bool(0.5));
            let torn = (!unkept.is_empty() && rng.random_bool(0.3)).then(|| {
                let sector = unkept[rng.random_range(0..unkept.len())];
                (sector, rng.random_range(1..SECTOR_BYTES / 8) * 8)
            });
            let dir_ops = rng.random_range(0..=crash.pending_dir_ops());
            let image = crash.crash_image(dir_ops, &kept, torn);
            let after = &models[(completed + 1).min(ops.len())];
            check(image, &models[completed], after, mutation)
                .map_err(|e| format!("seed {seed}, crash after op {n}: {e}"))?;
            checked += 1;
        }
    }
    Ok(checked)
}

/// `LOGLESS_LOG_CRASH_SAMPLES` sets the number of sampled images (default 10,000).
fn samples() -> usize {
    std::env::var("LOGLESS_LOG_CRASH_SAMPLES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10_000)
}

#[test]
fn sampled_crashes_of_long_sequences_with_rolls_and_deletions() {
    let want = samples();
    assert!(sampled(11, want, LogMutation::None).unwrap() >= want);
}

#[test]
fn sampled_crashes_catch_a_missing_record_persist() {
    assert!(sampled(11, 4_000, LogMutation::SkipRecordPersist).is_err());
}

/// The sampled sequences really roll segments and delete them.
#[test]
fn sampled_sequences_roll_and_remove_segments() {
    let mut rng = SmallRng::seed_from_u64(11);
    let ops = random_ops(&mut rng, 60);
    let (mut log, _) = SegmentLog::open_on(SimDir::new(), options()).unwrap();
    let mut model = Model::default();
    let (mut rolls, mut removals, mut count) = (0, 0, 1);
    for (tag, &op) in ops.iter().enumerate() {
        perform(&mut log, &model, op, tag);
        model.apply(op, tag);
        let now = log.segment_count();
        rolls += usize::from(now > count);
        removals += usize::from(now < count);
        count = now;
    }
    assert!(
        rolls >= 5 && removals >= 2,
        "rolls {rolls}, removals {removals}"
    );
}
