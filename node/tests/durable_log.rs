//! The log engine's records on the segmented log: what a reopen rebuilds is what the engine
//! wrote, through truncations, snapshots and crashes at every point.
use bytes::Bytes;
use logless_multipaxos::ids::{ClientId, Instance, RequestSeq, View};
use logless_multipaxos::message::{Batch, ClientTable, Request, Snapshot};
use logless_multipaxos::persist::{Durable, LogStore, Record};
use logless_node::durable_log::{DurableLog, DurableLogError};
use logless_storage::{Durability, SegmentLogOptions, SimDir};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

/// Small segments, so that truncations remove files.
fn options() -> SegmentLogOptions {
    SegmentLogOptions {
        segment_bytes: 4096,
        record_bytes_max: 1024,
        snapshot_bytes_max: 1 << 16,
        ..SegmentLogOptions::new(Durability::Sync)
    }
}

/// A random sequence of records that keeps the engine's invariants (views never go down,
/// nothing below the log start, one decision per instance, truncation only below a snapshot),
/// cut into commits: each inner vector is written and then flushed.
fn commits(seed: u64, count: usize) -> Vec<Vec<Record>> {
    let mut rng = SmallRng::seed_from_u64(seed);
    let mut durable = Durable::default();
    let mut snapshot_at = 0u64;
    let mut out = Vec::new();
    for _ in 0..count {
        let mut commit = Vec::new();
        for _ in 0..rng.random_range(1..=4) {
            let record = next_record(&mut rng, &durable, &mut snapshot_at);
            durable.apply(&record);
            commit.push(record);
        }
        out.push(commit);
    }
    out
}

fn next_record(rng: &mut SmallRng, durable: &Durable, snapshot_at: &mut u64) -> Record {
    let start = durable.log_start.0;
    let instance = Instance(rng.random_range(start..start + 12));
    let decided = durable.log.get(&instance).and_then(|e| e.decided.clone());
    match rng.random_range(0..20) {
        0 | 1 => Record::View(View(durable.view.0 + rng.random_range(0..2))),
        2..=9 => Record::Accepted {
            instance,
            view: durable.view,
            batch: batch(rng),
        },
        10..=16 => Record::Decided {
            instance,
            batch: decided.unwrap_or_else(|| batch(rng)),
        },
        17 | 18 => {
            *snapshot_at = (*snapshot_at).max(start + rng.random_range(0..8));
            let mut clients = ClientTable::new();
            clients.insert(ClientId(1), (RequestSeq(*snapshot_at), Bytes::from("+OK")));
            Record::Snapshot(Snapshot {
                next_instance: Instance(*snapshot_at),
                stamp_ms: *snapshot_at * 10,
                state: Bytes::from(vec![b's'; rng.random_range(0..200)]),
                clients,
            })
        }
        _ => Record::Truncate {
            below: Instance(rng.random_range(start..=(*snapshot_at).max(start))),
        },
    }
}

fn batch(rng: &mut SmallRng) -> Batch {
    let requests = (0..rng.random_range(0..3))
        .map(|i| Request {
            client: ClientId(rng.random_range(1..4)),
            seq: RequestSeq(i),
            payload: Bytes::from(vec![b'p'; rng.random_range(0..300)]),
        })
        .collect();
    Batch::stamped(rng.random_range(0..1000), requests)
}

/// The state after each prefix of the records, in order (`states[k]` after the first `k`).
fn prefix_states(commits: &[Vec<Record>]) -> Vec<Durable> {
    let mut durable = Durable::default();
    let mut states = vec![durable.clone()];
    for record in commits.iter().flatten() {
        durable.apply(record);
        states.push(durable.clone());
    }
    states
}

/// Writes the commits through a durable log on a simulated directory that takes its crash
/// snapshot after `crash_after_ops`; returns the directory and how many records were
/// acknowledged (their commit's flush returned) before the crash point.
fn run(commits: &[Vec<Record>], crash_after_ops: Option<usize>) -> (SimDir, usize) {
    let mut dir = SimDir::new();
    dir.crash_after_ops = crash_after_ops;
    let mut log = DurableLog::open_on(dir, options()).expect("open").log;
    let mut acknowledged = 0;
    let mut written = 0;
    for commit in commits {
        for record in commit {
            log.write(record).expect("write");
        }
        log.flush().expect("flush");
        written += commit.len();
        if crash_after_ops.is_none_or(|n| log.segment_log().dir().ops() <= n) {
            acknowledged = written;
        }
    }
    (log.segment_log().dir().clone(), acknowledged)
}

#[test]
fn a_reopen_rebuilds_what_was_written_through_truncations_and_snapshots() {
    for seed in 0..40 {
        let commits = commits(seed, 60);
        let states = prefix_states(&commits);
        let (dir, _) = run(&commits, None);
        let opened = DurableLog::open_on(dir.at_crash().live_image(), options()).expect("reopen");
        assert_eq!(&opened.durable, states.last().unwrap(), "seed {seed}");
    }
}

#[test]
fn truncation_gives_the_space_back() {
    // Decide instance after instance, snapshot and truncate every ten: the log keeps a bounded
    // number of segments however long it runs.
    let mut dir_log = DurableLog::open_on(SimDir::new(), options())
        .expect("open")
        .log;
    let mut segments_max = 0;
    for i in 0..2_000u64 {
        let batch = Batch::stamped(i, vec![]);
        dir_log
            .write(&Record::Accepted {
                instance: Instance(i),
                view: View(1),
                batch: batch.clone(),
            })
            .unwrap();
        dir_log
            .write(&Record::Decided {
                instance: Instance(i),
                batch,
            })
            .unwrap();
        if i % 10 == 9 {
            dir_log
                .write(&Record::Snapshot(Snapshot {
                    next_instance: Instance(i + 1),
                    stamp_ms: i,
                    state: Bytes::new(),
                    clients: ClientTable::new(),
                }))
                .unwrap();
            dir_log
                .write(&Record::Truncate {
                    below: Instance(i - 9),
                })
                .unwrap();
        }
        dir_log.flush().unwrap();
        segments_max = segments_max.max(dir_log.segment_log().segment_count());
    }
    assert!(segments_max <= 3, "{segments_max} segments");
    let dir = dir_log.segment_log().dir().clone();
    let durable = DurableLog::open_on(dir.at_crash().live_image(), options())
        .expect("reopen")
        .durable;
    assert_eq!(durable.log_start, Instance(1_990));
    assert_eq!(durable.log.len(), 10);
    assert_eq!(durable.snapshot.unwrap().next_instance, Instance(2_000));
    assert_eq!(durable.view, View(0), "no view was ever written");
}

#[test]
fn a_crash_at_any_point_keeps_a_prefix_holding_every_acknowledged_record() {
    let mut images = 0;
    for seed in 0..6 {
        let commits = commits(1_000 + seed, 12);
        let states = prefix_states(&commits);
        let (done, _) = run(&commits, None);
        for n in 0..=done.ops() {
            let (dir, acknowledged) = run(&commits, Some(n));
            let crash = dir.at_crash();
            let all_kept = crash.dirty_sectors();
            let candidates = [
                ("kill -9", crash.process_crash()),
                (
                    "power, nothing unsynced kept",
                    crash.crash_image(0, &[], None),
                ),
                (
                    "power, everything kept",
                    crash.crash_image(crash.pending_dir_ops(), &all_kept, None),
                ),
            ];
            for (what, image) in candidates {
                images += 1;
                let durable = DurableLog::open_on(image, options())
                    .unwrap_or_else(|e| panic!("seed {seed}, op {n}, {what}: {e}"))
                    .durable;
                assert!(
                    states[acknowledged..].contains(&durable),
                    "seed {seed}, crash after op {n} ({what}): not a prefix holding the \
                     {acknowledged} acknowledged records: {durable:?}"
                );
            }
        }
    }
    assert!(images > 1_000, "only {images} crash images");
}

#[test]
fn a_log_of_another_kind_is_refused() {
    let mut dir_log = DurableLog::open_on(SimDir::new(), options())
        .expect("open")
        .log;
    dir_log.write(&Record::View(View(3))).unwrap();
    dir_log.flush().unwrap();
    let mut dir = dir_log.segment_log().dir().at_crash().live_image();
    // A record the engine did not write, at the next index.
    let (mut log, _) = logless_storage::SegmentLog::open_on(dir, options()).unwrap();
    let next = log.next_index();
    log.append(next, b"not a record").unwrap();
    log.flush().unwrap();
    dir = log.dir().at_crash().live_image();
    assert!(matches!(
        DurableLog::open_on(dir.clone(), options()),
        Err(DurableLogError::Decode { index, .. }) if index == next
    ));
    // A view that goes down: records that decode but this engine never wrote in this order.
    let (mut log, _) = logless_storage::SegmentLog::open_on(dir, options()).unwrap();
    log.truncate_tail(next).unwrap();
    let mut bytes = Vec::new();
    logless_multipaxos::wire::encode_record(&Record::View(View(2)), &mut bytes);
    log.append(next, &bytes).unwrap();
    log.flush().unwrap();
    let dir = log.dir().at_crash().live_image();
    assert!(matches!(
        DurableLog::open_on(dir, options()),
        Err(DurableLogError::Inconsistent { index, .. }) if index == next
    ));
}
