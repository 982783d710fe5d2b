//! Register operations per second of the in-process cluster without a network, on one core:
//! `cargo run --release -p logless-sim --example throughput -- [write-fraction] [clients]
//! [keys] [operations] [any|home] [all|thrifty]` (defaults 0.05, 1000, 10000, 2000000, any, all:
//! see [`Routing`] and [`DirectConfig::thrifty_writes`]). For profiling (perf, callgrind) what `cargo bench -p logless-sim` measures.
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use logless_sim::direct::{DirectCluster, DirectConfig, Routing};

/// The system allocator, counting allocations.
struct Counting;

static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);

// SAFETY: every call is passed on to the system allocator unchanged.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: the caller's contract is the system allocator's.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: as above.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: as above.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let arg = |i: usize, default: &str| args.get(i).cloned().unwrap_or(default.to_string());
    let config = DirectConfig {
        replicas: 3,
        write_fraction: arg(0, "0.05").parse().expect("write fraction"),
        clients: arg(1, "1000").parse().expect("clients"),
        keys: arg(2, "10000").parse().expect("keys"),
        routing: match arg(4, "any").as_str() {
            "any" => Routing::AnyReplica,
            "home" => Routing::HomeReplica,
            other => panic!("routing is any or home, not {other:?}"),
        },
        thrifty_writes: match arg(5, "all").as_str() {
            "all" => false,
            "thrifty" => true,
            other => panic!("fast writes vote with all or thrifty, not {other:?}"),
        },
        seed: 42,
    };
    let operations: u64 = arg(3, "2000000").parse().expect("operations");
    let mut cluster = DirectCluster::new(config.clone());
    let allocations = ALLOCATIONS.load(Ordering::Relaxed);
    let start = Instant::now();
    let report = cluster.run(operations);
    let seconds = start.elapsed().as_secs_f64();
    let allocations = ALLOCATIONS.load(Ordering::Relaxed) - allocations;
    println!(
        "{config:?}\n{} operations in {seconds:.2} s: {:.0} ops/s, {:.2} messages, {:.1} allocations and {:.1} ns per operation, {} errors\n{:?}",
        report.operations,
        report.operations as f64 / seconds,
        report.messages as f64 / report.operations as f64,
        allocations as f64 / report.operations as f64,
        seconds * 1e9 / report.operations as f64,
        report.errors,
        report.proposers,
    );
}
