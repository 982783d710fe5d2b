//! Recovery time: writes N registers of 64-byte values to a slot file in `mmap` mode, then
//! measures how long reopening (scan, checksums, index) takes, with a cold and a warm page
//! cache not distinguished: the file was just written, as after a process restart.
//! `cargo run --release -p logless-storage --example recovery -- [N] [DIR]`
//! (default 1,000,000 registers in a temporary directory). With `LOGLESS_LOCATED=1` the store
//! runs without its DRAM index (`StoreOptions::located`); the anonymous memory of the process
//! after the writes is printed (the store's DRAM, as the index makes most of it).
use std::time::Instant;

use logless_storage::{Durability, SlotStore, StoreOptions};

fn main() {
    let n: usize = std::env::args()
        .nth(1)
        .map(|a| a.parse().expect("a count of registers"))
        .unwrap_or(1_000_000);
    let dir = match std::env::args().nth(2) {
        Some(d) => tempfile::tempdir_in(d),
        None => tempfile::tempdir(),
    }
    .expect("a temporary directory");
    let path = dir.path().join("slots");
    let mut options = StoreOptions::new(Durability::Mmap);
    options.record_bytes_max = 4096;
    options.file_bytes_max = 1 << 34;
    options.located = std::env::var("LOGLESS_LOCATED").is_ok_and(|v| v == "1");
    let value = [7u8; 64];
    {
        let (mut store, _) = SlotStore::open(&path, options.clone()).expect("open");
        let started = Instant::now();
        for i in 0..n {
            store
                .put(format!("key:{i:08}").as_bytes(), &value)
                .expect("put");
        }
        store.flush().expect("flush");
        println!(
            "wrote {n} registers ({} MiB of slots) in {:.2?}, located: {}, {}",
            store.end_bytes() >> 20,
            started.elapsed(),
            options.located,
            anonymous_memory()
        );
    }
    let started = Instant::now();
    let (store, report) = SlotStore::open(&path, options).expect("reopen");
    let elapsed = started.elapsed();
    assert_eq!(store.len(), n);
    println!(
        "reopened {} registers in {:.3} s ({} free slots, {} damaged)",
        report.records,
        elapsed.as_secs_f64(),
        report.free_slots,
        report.damaged.len()
    );
}

/// The process's anonymous resident memory, as `/proc/self/status` gives it.
fn anonymous_memory() -> String {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    (status.lines())
        .find(|l| l.starts_with("RssAnon:"))
        .map_or("RssAnon unknown".into(), |l| {
            l.split_whitespace().collect::<Vec<_>>().join(" ")
        })
}
