//! What the project's tests, the chaos runner, the benchmarks and `logless up` share to run
//! replica processes on this machine: the one launcher of `logless server` processes
//! ([`server`]), free loopback ports ([`ports`]), one-shot HTTP and Redis questions to a running
//! server ([`probe`]) and the end of a process's log ([`log_tail`]).
//!
//! It depends on nothing but the standard library, so the `logless` binary can use it too.
pub mod ports;
pub mod probe;
pub mod server;

use std::path::Path;

/// The last `lines` lines of the file at `path` (empty when it cannot be read).
pub fn log_tail(path: &Path, lines: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let all: Vec<_> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}
