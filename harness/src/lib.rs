//! What the project's tests, the chaos runner and the benchmarks share to run replica processes
//! on this machine: free loopback ports ([`ports`]) and the end of a process's log
//! ([`log_tail`]).
pub mod ports;

use std::path::Path;

/// The last `lines` lines of the file at `path` (empty when it cannot be read).
pub fn log_tail(path: &Path, lines: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let all: Vec<_> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}
