//! A real process writes and acknowledges records (one line per flushed put on a pipe) and is
//! killed with SIGKILL at a random moment; the file must hold every acknowledged record with
//! its last acknowledged value. The page cache survives a process crash, so `mmap` mode must
//! pass this; power loss is tested on simulated media instead (tests/crash.rs).
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use logless_storage::{open_file, Durability};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

const CHILD_ENV: &str = "LOGLESS_KILL9_CHILD_FILE";

/// The child: endless puts of key i%50 with value "i", acknowledging each after its flush.
fn child(path: &str) -> ! {
    let (mut store, _) = open_file(path.as_ref(), Durability::Mmap, 4096, 1 << 26).unwrap();
    let mut i: u64 = 0;
    loop {
        let key = format!("key{}", i % 50);
        // Every 7th value is long, so that records move to larger slots and free slots get reused.
        let mut value = i.to_string().into_bytes();
        if i.is_multiple_of(7) {
            value.resize(300, b'x');
        }
        store.put(key.as_bytes(), &value).unwrap();
        store.flush().unwrap();
        println!("{key} {i}");
        i += 1;
    }
}

#[test]
fn a_second_opener_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("slots");
    let _first = open_file(&path, Durability::Mmap, 4096, 1 << 20).unwrap();
    assert!(matches!(
        open_file(&path, Durability::Mmap, 4096, 1 << 20),
        Err(logless_storage::StoreError::Locked)
    ));
}

#[test]
fn acknowledged_records_survive_kill_9() {
    if let Ok(path) = std::env::var(CHILD_ENV) {
        child(&path);
    }
    let mut rng = SmallRng::seed_from_u64(9);
    let runs = 50;
    for run in 0..runs {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("slots");
        let mut acked = std::collections::BTreeMap::new();
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "acknowledged_records_survive_kill_9",
                "--nocapture",
            ])
            .env(CHILD_ENV, &path)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let mut lines = BufReader::new(stdout).lines();
        let deadline = Instant::now() + Duration::from_millis(rng.random_range(20..200));
        while Instant::now() < deadline {
            let Some(Ok(line)) = lines.next() else { break };
            if let Some((key, i)) = line.split_once(' ') {
                if let Ok(i) = i.parse::<u64>() {
                    acked.insert(key.to_string(), i);
                }
            }
        }
        // SIGKILL: no destructor, no flush.
        child.kill().unwrap();
        child.wait().unwrap();
        // Lines already written by the child before the kill are acknowledged too.
        for line in lines.map_while(Result::ok) {
            if let Some((key, i)) = line.split_once(' ') {
                if let Ok(i) = i.parse::<u64>() {
                    acked.insert(key.to_string(), i);
                }
            }
        }
        assert!(
            !acked.is_empty(),
            "run {run}: the child acknowledged nothing"
        );
        let (store, report) = open_file(&path, Durability::Mmap, 4096, 1 << 26).unwrap();
        assert!(report.damaged_slots.is_empty(), "run {run}: {report:?}");
        for (key, i) in &acked {
            let got = store
                .get(key.as_bytes())
                .unwrap()
                .expect("an acknowledged key");
            let got: u64 = std::str::from_utf8(got)
                .unwrap()
                .trim_end_matches('x')
                .parse()
                .unwrap();
            // The child may have written (not yet acknowledged) a later value: never an older one.
            assert!(got >= *i, "run {run}: {key} went back from {i} to {got}");
        }
    }
}
