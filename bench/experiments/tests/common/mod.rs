//! What the bench's smoke tests share.

use std::path::PathBuf;

/// `logless` in the target directory this test was built into (`target/debug/deps/..`).
pub fn logless() -> PathBuf {
    let exe = std::env::current_exe().expect("the test's own path");
    let bin = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("a target directory")
        .join("logless");
    assert!(
        bin.is_file(),
        "{} is missing: build it first with `cargo build -p logless`",
        bin.display()
    );
    bin
}
