//! Recovery time: writes N registers of 64-byte values to a slot file in `mmap` mode, then
//! measures how long reopening (scan, checksum, index) takes.
//! `cargo run --release -p logless-storage --example recovery -- [N]` (default 1,000,000).
use std::time::Instant;

use logless_storage::{open_file, Durability};

fn main() {
    let n: usize = std::env::args()
        .nth(1)
        .map(|a| a.parse().expect("a count"))
        .unwrap_or(1_000_000);
    let dir = tempfile::tempdir().expect("a temporary directory");
    let path = dir.path().join("slots");
    let value = [7u8; 64];
    {
        let (mut store, _) = open_file(&path, Durability::Mmap, 4096, 1 << 34).expect("open");
        let started = Instant::now();
        for i in 0..n {
            store
                .put(format!("key:{i:08}").as_bytes(), &value)
                .expect("put");
        }
        store.flush().expect("flush");
        println!("wrote {n} registers in {:.2?}", started.elapsed());
    }
    let started = Instant::now();
    let (store, report) = open_file(&path, Durability::Mmap, 4096, 1 << 34).expect("reopen");
    let elapsed = started.elapsed();
    assert_eq!(store.len(), n);
    println!(
        "reopened {} registers in {:.3} s ({} free slots, {} damaged)",
        report.records,
        elapsed.as_secs_f64(),
        report.free_slots,
        report.damaged_slots.len()
    );
}
