//! A real process appends records to a segmented log (`mmap` mode, then `emulp`), flushes in small groups,
//! deletes prefixes, truncates tails and writes snapshots, reporting each acknowledged step on a
//! pipe after it returned; it is killed with SIGKILL at a random moment. The reopened log must
//! hold every acknowledged record, intact and at its index, with indices contiguous from the
//! first kept one. A child that acknowledges before appending must be caught, which proves the
//! check can fail.
use std::io::Write;
use std::time::{Duration, Instant};

use logless_storage::{Durability, SegmentLog, SegmentLogOptions};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

mod support;

const CHILD_DIR_ENV: &str = "LOGLESS_LOG_KILL9_CHILD_DIR";
const CHILD_LIE_ENV: &str = "LOGLESS_LOG_KILL9_CHILD_ACKS_EARLY";
const CHILD_TIME_MS_MAX: u64 = 10_000;

fn options(durability: Durability) -> SegmentLogOptions {
    let mut options = SegmentLogOptions::new(durability);
    // Small segments so that a run rolls and deletes many.
    options.segment_bytes = 64 * 1024;
    options.record_bytes_max = 4096;
    options
}

fn record(i: u64, generation: u64) -> Vec<u8> {
    let mut v = format!("{i}:{generation}:").into_bytes();
    v.resize(v.len() + (i as usize * 131) % 3000, b'x');
    v
}

/// The child: appends, flushing every 3 records ("ack <next>", written after the flush
/// returned), every 150th record deletes the prefix below `next - 100` ("prefix <below>") and
/// writes a snapshot, every 97th drops the last two records ("tail <from>"); truncations are
/// announced before they start. With `acks_early`, an append is acknowledged before it is made
/// (a deliberate bug).
fn child(path: &str, acks_early: bool) {
    let options = options(support::child_durability());
    let (mut log, _) = SegmentLog::open(path.as_ref(), options).unwrap();
    let started = Instant::now();
    let mut out = std::io::stdout().lock();
    let mut generation = 0;
    while started.elapsed() < Duration::from_millis(CHILD_TIME_MS_MAX) {
        let i = log.next_index();
        if acks_early {
            writeln!(out, "ack {}", i + 1).unwrap();
            out.flush().unwrap();
            std::thread::sleep(Duration::from_micros(200));
        }
        log.append(i, &record(i, generation)).unwrap();
        if i % 3 == 0 {
            log.flush().unwrap();
            writeln!(out, "ack {}", i + 1).unwrap();
        }
        // A truncation is announced before it starts: from then on the records it drops
        // need not survive.
        if i % 97 == 96 {
            generation += 1;
            writeln!(out, "tail {}", i - 1).unwrap();
            out.flush().unwrap();
            log.truncate_tail(i - 1).unwrap();
        }
        if i % 150 == 149 {
            writeln!(out, "prefix {}", i - 100).unwrap();
            out.flush().unwrap();
            log.truncate_prefix(i - 100).unwrap();
            log.write_snapshot(i - 100, format!("snapshot {i}").as_bytes())
                .unwrap();
        }
        out.flush().unwrap();
    }
}

/// What the lines acknowledged: records `first..next` must be there.
#[derive(Default)]
struct Acked {
    first: u64,
    next: u64,
}

impl Acked {
    fn line(&mut self, line: &str) {
        let Some((what, n)) = line.split_once(' ') else {
            return;
        };
        let Ok(n) = n.parse::<u64>() else { return };
        match what {
            "ack" => self.next = self.next.max(n),
            "tail" => self.next = self.next.min(n),
            "prefix" => self.first = n,
            _ => {}
        }
    }
}

/// Runs one child, kills it after `kill_after_ms`, and returns what is wrong with the log it
/// left (empty: the run passed) and how many records were acknowledged.
fn one_run(
    kill_after_ms: u64,
    acks_early: bool,
    (mode, durability): (&str, Durability),
) -> (Vec<String>, u64) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("log");
    let lie = if acks_early { "1" } else { "" };
    let (mut child, mut lines) = support::spawn_child(&[
        (CHILD_DIR_ENV, path.as_os_str()),
        (CHILD_LIE_ENV, lie.as_ref()),
        (support::CHILD_DURABILITY_ENV, mode.as_ref()),
    ]);
    let mut acked = Acked::default();
    // The kill time counts from the first acknowledgement: on a loaded machine starting the
    // child alone can take longer than the shortest kill time.
    while acked.next == 0 {
        let Some(Ok(line)) = lines.next() else { break };
        acked.line(&line);
    }
    let deadline = Instant::now() + Duration::from_millis(kill_after_ms);
    while Instant::now() < deadline {
        let Some(Ok(line)) = lines.next() else { break };
        acked.line(&line);
    }
    // SIGKILL: no destructor, no flush, no unmapping.
    child.kill().unwrap();
    child.wait().unwrap();
    // Lines the child wrote before it died were acknowledged too.
    for line in lines.map_while(Result::ok) {
        acked.line(&line);
    }
    let (log, _) = SegmentLog::open(&path, options(durability)).unwrap();
    let mut wrong = Vec::new();
    if acked.first < acked.next && log.first_index() > acked.first {
        wrong.push(format!(
            "first index {} past {}",
            log.first_index(),
            acked.first
        ));
    }
    if log.next_index() < acked.next {
        wrong.push(format!(
            "log ends at {}, acknowledged up to {}",
            log.next_index(),
            acked.next
        ));
    }
    for (expected, r) in (log.first_index()..).zip(log.iter(log.first_index())) {
        match r {
            Ok((i, bytes)) if i == expected && bytes.starts_with(format!("{i}:").as_bytes()) => {}
            Ok((i, _)) => wrong.push(format!("record {i} out of place")),
            Err(e) => wrong.push(format!("record {expected}: {e}")),
        }
    }
    (wrong, acked.next)
}

/// Not a test: the body of the child process (does nothing unless run as the child).
#[test]
fn child_process_entry() {
    if let Ok(path) = std::env::var(CHILD_DIR_ENV) {
        child(&path, std::env::var(CHILD_LIE_ENV).is_ok_and(|v| v == "1"));
    }
}

#[test]
fn acknowledged_log_records_survive_kill_9_thirty_times_per_mode() {
    for mode in support::PROCESS_CRASH_MODES {
        let mut rng = SmallRng::seed_from_u64(19);
        let mut records = 0;
        for run in 0..30 {
            let (wrong, acked) = one_run(rng.random_range(20..200), false, mode);
            assert!(wrong.is_empty(), "{} run {run}: {wrong:?}", mode.0);
            records += acked;
        }
        assert!(
            records > 1_500,
            "the {} children acknowledged only {records} records",
            mode.0
        );
    }
}

#[test]
fn a_log_child_that_acknowledges_before_appending_is_caught() {
    for mode in support::PROCESS_CRASH_MODES {
        let mut rng = SmallRng::seed_from_u64(20);
        let caught = (0..20).any(|_| !one_run(rng.random_range(20..150), true, mode).0.is_empty());
        assert!(
            caught,
            "the kill -9 check must catch early acknowledgements ({})",
            mode.0
        );
    }
}
