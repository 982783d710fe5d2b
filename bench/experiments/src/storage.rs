//! The storage access-pattern experiment (seed 001, §6.2): how fast can one write be made
//! durable when it is appended to a log, overwritten in place in one record, or overwritten
//! in place in one of many records chosen with a Zipf(0.9) skew?
use std::time::Instant;

use hdrhistogram::Histogram;
use logless_storage::log_store::LogOptions;
use logless_storage::{Durability, LogStore, SlotStore, StoreError, StoreOptions};
use rand::rngs::SmallRng;
use rand::SeedableRng;
use rand_distr::{Distribution, Zipf};
use serde::Serialize;

/// The access patterns.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum Pattern {
    /// Append the entry, persist it, then persist the 8-byte size header.
    Log,
    /// Overwrite one value with the two-version scheme.
    SingleInPlace,
    /// Overwrite one of many values (Zipf-distributed) with the two-version scheme.
    MultiInPlace,
}

/// The media and durability settings.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum Medium {
    /// Plain copies in DRAM.
    Dram,
    /// A shared file mapping, never flushed (survives kill -9).
    Mmap,
    /// A shared file mapping, msync after every write (survives power loss).
    MmapMsyncEachWrite,
    /// A shared file mapping, msync once per group of writes (survives power loss).
    SyncGroupCommit,
}

impl Medium {
    fn durability(self) -> Durability {
        match self {
            Medium::Dram => Durability::Memory,
            Medium::Mmap => Durability::Mmap,
            Medium::MmapMsyncEachWrite | Medium::SyncGroupCommit => Durability::Sync,
        }
    }
}

/// All patterns, in plotting order.
pub const PATTERNS: [Pattern; 3] = [Pattern::Log, Pattern::SingleInPlace, Pattern::MultiInPlace];
/// All media, in plotting order.
pub const MEDIA: [Medium; 4] = [
    Medium::Dram,
    Medium::Mmap,
    Medium::MmapMsyncEachWrite,
    Medium::SyncGroupCommit,
];
/// The value sizes of the paper's figure.
pub const VALUE_BYTES: [usize; 10] = [8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096];

/// The experiment's parameters.
#[derive(Clone, Debug, Serialize)]
pub struct Settings {
    /// Writes measured per point.
    pub writes: usize,
    /// Writes measured per point when every write is msynced (each costs a disk flush).
    pub writes_synced_each: usize,
    /// Values of the multi in-place pattern.
    pub values: usize,
    /// Zipf exponent of the multi in-place key choice.
    pub zipf_skew: f64,
    /// Writes per group commit.
    pub group: usize,
}

/// One measured point.
#[derive(Clone, Debug, Serialize)]
pub struct Point {
    /// The pattern.
    pub pattern: Pattern,
    /// The medium.
    pub medium: Medium,
    /// Value size.
    pub value_bytes: usize,
    /// Writes per second.
    pub writes_per_s: f64,
    /// Median write latency (ns).
    pub p50_ns: u64,
    /// 99th percentile write latency (ns).
    pub p99_ns: u64,
}

enum Target {
    Log(LogStore),
    Slots(Box<SlotStore>),
}

const FILE_BYTES_MAX: u64 = 1 << 34;
const LOG_BYTES_MAX: usize = 256 << 20;

/// Measures one point on a fresh file (or fresh DRAM) in `dir`.
pub fn measure(
    settings: &Settings,
    pattern: Pattern,
    medium: Medium,
    value_bytes: usize,
    dir: &std::path::Path,
) -> Result<Point, StoreError> {
    let path = dir.join(format!("{pattern:?}-{medium:?}-{value_bytes}"));
    let _ = std::fs::remove_file(&path);
    let durability = medium.durability();
    let target = match pattern {
        Pattern::Log => Target::Log(
            LogStore::open(
                &path,
                LogOptions {
                    durability,
                    file_bytes_max: LOG_BYTES_MAX as u64 * 2,
                },
            )?
            .0,
        ),
        _ => {
            let options = StoreOptions {
                record_bytes_max: 8192,
                file_bytes_max: FILE_BYTES_MAX,
                ..StoreOptions::new(durability)
            };
            Target::Slots(Box::new(SlotStore::open(&path, options)?.0))
        }
    };
    run(settings, pattern, medium, value_bytes, target)
}

fn run(
    settings: &Settings,
    pattern: Pattern,
    medium: Medium,
    value_bytes: usize,
    mut target: Target,
) -> Result<Point, StoreError> {
    let mut rng = SmallRng::seed_from_u64(value_bytes as u64);
    let zipf =
        Zipf::new(settings.values as f64, settings.zipf_skew).expect("valid Zipf parameters");
    let keys: Vec<Vec<u8>> = (0..settings.values.max(1))
        .map(|i| format!("key:{i:08}").into_bytes())
        .collect();
    let mut value = vec![0u8; value_bytes];
    if let (Pattern::MultiInPlace, Target::Slots(store)) = (pattern, &mut target) {
        for key in &keys {
            store.put(key, &value)?;
        }
        store.flush()?;
    }
    let group = match medium {
        Medium::SyncGroupCommit => settings.group.max(1),
        _ => 1,
    };
    let mut latency =
        Histogram::<u64>::new_with_bounds(1, 600_000_000_000, 3).expect("valid histogram");
    let writes = match medium {
        Medium::MmapMsyncEachWrite => settings.writes_synced_each,
        _ => settings.writes,
    };
    let started = Instant::now();
    for i in 0..writes {
        value[..8.min(value_bytes)].copy_from_slice(&i.to_le_bytes()[..8.min(value_bytes)]);
        let t = Instant::now();
        let commit = (i + 1) % group == 0 || i + 1 == writes;
        match &mut target {
            Target::Log(log) => {
                if log.len_bytes() + value_bytes + 16 > LOG_BYTES_MAX {
                    log.truncate()?;
                }
                log.append(&value)?;
                if commit {
                    log.commit()?;
                }
            }
            Target::Slots(store) => {
                let key = match pattern {
                    Pattern::MultiInPlace => &keys[zipf.sample(&mut rng) as usize - 1],
                    _ => &keys[0],
                };
                store.put(key, &value)?;
                if commit {
                    store.flush()?;
                }
            }
        }
        latency.saturating_record(t.elapsed().as_nanos() as u64);
    }
    let elapsed = started.elapsed().as_secs_f64();
    Ok(Point {
        pattern,
        medium,
        value_bytes,
        writes_per_s: writes as f64 / elapsed,
        p50_ns: latency.value_at_quantile(0.5),
        p99_ns: latency.value_at_quantile(0.99),
    })
}
