//! A real process writes and acknowledges records (one line per put on a pipe, written after
//! the put returned) and is killed with SIGKILL at a random moment; the reopened file must
//! hold every acknowledged key with its last acknowledged value or a later one. The page
//! cache survives a process crash, so `mmap` and `emulp` modes (the latter through its
//! cache-line flushes) must pass this; power loss is tested on simulated media instead
//! (tests/crash.rs). A child that acknowledges before writing must be
//! caught, which proves the check can fail.
use std::collections::BTreeMap;
use std::io::Write;
use std::time::{Duration, Instant};

use logless_storage::{Durability, SlotStore, StoreOptions};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

mod support;

const CHILD_FILE_ENV: &str = "LOGLESS_KILL9_CHILD_FILE";
const CHILD_LIE_ENV: &str = "LOGLESS_KILL9_CHILD_ACKS_EARLY";
const CHILD_TIME_MS_MAX: u64 = 10_000;

fn options(durability: Durability) -> StoreOptions {
    let mut options = StoreOptions::new(durability);
    options.record_bytes_max = 4096;
    options.file_bytes_max = 1 << 26;
    options
}

/// The child: puts of key i%50 with value "i" (every 7th long, so records move to larger
/// slots and freed slots are reused), each acknowledged once `put` returned; ends by itself
/// after a bounded time. With `acks_early` it acknowledges first (a deliberate bug).
fn child(path: &str, acks_early: bool) {
    let options = options(support::child_durability());
    let (mut store, _) = SlotStore::open(path.as_ref(), options).unwrap();
    let started = Instant::now();
    let mut out = std::io::stdout().lock();
    let mut i: u64 = 0;
    while started.elapsed() < Duration::from_millis(CHILD_TIME_MS_MAX) {
        let key = format!("key{}", i % 50);
        let mut value = i.to_string().into_bytes();
        if i.is_multiple_of(7) {
            value.resize(300, b'x');
        }
        if acks_early {
            writeln!(out, "{key} {i}").unwrap();
            out.flush().unwrap();
            // Give the kill a chance to land between the acknowledgement and the write.
            std::thread::sleep(Duration::from_micros(200));
        }
        store.put(key.as_bytes(), &value).unwrap();
        store.flush().unwrap();
        if !acks_early {
            writeln!(out, "{key} {i}").unwrap();
            out.flush().unwrap();
        }
        i += 1;
    }
}

/// Runs one child, kills it after `kill_after_ms`, and returns the keys that went back to an
/// older value than acknowledged (empty: the run passed).
fn one_run(seed_ms: u64, acks_early: bool, (mode, durability): (&str, Durability)) -> Vec<String> {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("slots");
    let lie = if acks_early { "1" } else { "" };
    let (mut child, mut lines) = support::spawn_child(&[
        (CHILD_FILE_ENV, path.as_os_str()),
        (CHILD_LIE_ENV, lie.as_ref()),
        (support::CHILD_DURABILITY_ENV, mode.as_ref()),
    ]);
    let mut acked = BTreeMap::new();
    let record = |line: &str, acked: &mut BTreeMap<String, u64>| {
        if let Some((key, i)) = line.split_once(' ') {
            if let Ok(i) = i.parse::<u64>() {
                acked.insert(key.to_string(), i);
            }
        }
    };
    // The kill time counts from the first acknowledgement: on a loaded machine starting the
    // child alone can take longer than the shortest kill time.
    while acked.is_empty() {
        let Some(Ok(line)) = lines.next() else { break };
        record(&line, &mut acked);
    }
    let deadline = Instant::now() + Duration::from_millis(seed_ms);
    while Instant::now() < deadline {
        let Some(Ok(line)) = lines.next() else { break };
        record(&line, &mut acked);
    }
    // SIGKILL: no destructor, no flush, no unmapping.
    child.kill().unwrap();
    child.wait().unwrap();
    // Lines the child wrote before it died were acknowledged too.
    for line in lines.map_while(Result::ok) {
        record(&line, &mut acked);
    }
    assert!(!acked.is_empty(), "the child acknowledged nothing");
    let (store, report) = SlotStore::open(&path, options(durability)).unwrap();
    assert!(report.damaged.is_empty(), "{report:?}");
    let mut regressions = Vec::new();
    for (key, i) in &acked {
        let got: Option<u64> = store.get(key.as_bytes()).map(|v| {
            std::str::from_utf8(v)
                .unwrap()
                .trim_end_matches('x')
                .parse()
                .unwrap()
        });
        if got.is_none_or(|got| got < *i) {
            regressions.push(format!("{key}: acknowledged {i}, recovered {got:?}"));
        }
    }
    regressions
}

/// Not a test: the body of the child process (does nothing unless run as the child).
#[test]
fn child_process_entry() {
    if let Ok(path) = std::env::var(CHILD_FILE_ENV) {
        child(&path, std::env::var(CHILD_LIE_ENV).is_ok_and(|v| v == "1"));
    }
}

#[test]
fn acknowledged_records_survive_kill_9_fifty_times_per_mode() {
    for mode in support::PROCESS_CRASH_MODES {
        let mut rng = SmallRng::seed_from_u64(9);
        for run in 0..50 {
            let regressions = one_run(rng.random_range(20..150), false, mode);
            assert!(
                regressions.is_empty(),
                "{} run {run}: {regressions:?}",
                mode.0
            );
        }
    }
}

#[test]
fn a_child_that_acknowledges_before_writing_is_caught() {
    for mode in support::PROCESS_CRASH_MODES {
        let mut rng = SmallRng::seed_from_u64(10);
        let caught = (0..20).any(|_| !one_run(rng.random_range(20..150), true, mode).is_empty());
        assert!(
            caught,
            "the kill -9 check must catch early acknowledgements ({})",
            mode.0
        );
    }
}
