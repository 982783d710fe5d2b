//! Helpers shared by the crash and kill -9 tests (each test binary uses some of them).
#![allow(dead_code)]
use std::ffi::OsStr;
use std::io::{BufRead, BufReader, Lines};
use std::process::{Child, ChildStdout, Command, Stdio};

use logless_storage::Durability;

/// The variable that tells a kill -9 child which mode to write in.
pub const CHILD_DURABILITY_ENV: &str = "LOGLESS_KILL9_CHILD_DURABILITY";

/// The file modes whose writes a process crash must not lose (the page cache keeps them), by
/// the names the kill -9 children are given: `mmap` never persists, `emulp` persists with
/// cache-line flushes and a fence as `pmem` does.
pub const PROCESS_CRASH_MODES: [(&str, Durability); 2] =
    [("mmap", Durability::Mmap), ("emulp", Durability::Emulp)];

/// The mode a kill -9 child was started in (see [`CHILD_DURABILITY_ENV`]).
pub fn child_durability() -> Durability {
    let name = std::env::var(CHILD_DURABILITY_ENV).unwrap_or_default();
    PROCESS_CRASH_MODES
        .iter()
        .find(|(n, _)| *n == name)
        .unwrap_or_else(|| panic!("unknown child durability {name:?}"))
        .1
}

/// Every crash image shape over `dirty` sectors: each subset kept, with no tear or with one
/// unkept sector torn after `tear_step_bytes`, `2 * tear_step_bytes`, .. bytes (below a sector).
pub fn kept_and_torn<T: Copy>(
    dirty: &[T],
    sector_bytes: usize,
    tear_step_bytes: usize,
) -> impl Iterator<Item = (Vec<T>, Option<(T, usize)>)> + '_ {
    assert!(dirty.len() < 32, "too many dirty sectors: {}", dirty.len());
    (0u32..(1 << dirty.len())).flat_map(move |mask| {
        let in_mask = |i: &usize| mask & (1 << i) != 0;
        let kept: Vec<T> = (0..dirty.len()).filter(in_mask).map(|i| dirty[i]).collect();
        let unkept: Vec<T> = (0..dirty.len())
            .filter(|i| !in_mask(i))
            .map(|i| dirty[i])
            .collect();
        let tears = std::iter::once(None).chain(unkept.into_iter().flat_map(move |s| {
            (tear_step_bytes..sector_bytes)
                .step_by(tear_step_bytes)
                .map(move |b| Some((s, b)))
        }));
        tears.map(move |torn| (kept.clone(), torn))
    })
}

/// Starts this test binary again as a child running only `child_process_entry`, with `env`
/// set, and returns it with its stdout lines (the acknowledgements).
pub fn spawn_child(env: &[(&str, &OsStr)]) -> (Child, Lines<BufReader<ChildStdout>>) {
    let mut command = Command::new(std::env::current_exe().unwrap());
    command.args([
        "--exact",
        "child_process_entry",
        "--nocapture",
        "--test-threads",
        "1",
    ]);
    for (key, value) in env {
        command.env(key, value);
    }
    let mut child = command
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let lines = BufReader::new(child.stdout.take().unwrap()).lines();
    (child, lines)
}

/// Fails with the count and the first few violations, if there are any.
pub fn assert_no_violations(violations: &[String]) {
    assert!(
        violations.is_empty(),
        "{} violations, first: {}",
        violations.len(),
        violations[..violations.len().min(5)].join("\n")
    );
}

/// Fails unless the run with the deliberate bug `mutation` found a violation.
pub fn assert_caught(mutation: &impl std::fmt::Debug, violations: &[String]) {
    assert!(
        !violations.is_empty(),
        "the crash test must catch {mutation:?}"
    );
    println!("{mutation:?} caught: {}", violations[0]);
}
