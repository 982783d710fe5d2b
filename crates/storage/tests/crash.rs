//! Crash consistency of the slot store on simulated media (sync mode).
//!
//! A scenario is a sequence of acknowledged updates (put, then flush). It is replayed with a
//! crash at every media operation; at each crash point every image a power failure could leave
//! is built (any subset of the unpersisted sectors written, optionally one more sector torn)
//! and recovered. Every key must recover to its last acknowledged value or to the value of the
//! update in flight at the crash — never to anything else, never to a mix.
use std::collections::BTreeMap;

use logless_storage::slot_store::PersistBugs;
use logless_storage::{SimMedia, SlotStore, StoreError};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

const RECORD_MAX: usize = 4096;
const FILE_MAX: usize = 1 << 20;

#[derive(Clone, Debug)]
struct Update {
    key: &'static str,
    value: Vec<u8>,
}

fn value(tag: usize, len: usize) -> Vec<u8> {
    let mut v = format!("v{tag}:").into_bytes();
    v.resize(len.max(v.len()), b'a' + (tag % 26) as u8);
    v
}

/// Runs `updates` from an empty store, crashing (snapshotting) after `crash_after` media
/// operations. Returns the media and how many updates were acknowledged before the crash.
/// `exhaustive` appends one slot at a time, so that few sectors are unpersisted at once.
fn run(
    updates: &[Update],
    crash_after: Option<usize>,
    bugs: PersistBugs,
    exhaustive: bool,
) -> (SimMedia, usize) {
    let mut media = SimMedia::new();
    media.crash_after_ops = crash_after;
    let (mut store, _) = SlotStore::open(media, true, RECORD_MAX, FILE_MAX).unwrap();
    store.bugs = bugs;
    if exhaustive {
        store.append_chunk_bytes = 0;
    }
    let mut acknowledged = 0;
    for u in updates {
        store.put(u.key.as_bytes(), &u.value).unwrap();
        store.flush().unwrap();
        if crash_after.is_none_or(|n| store.media().ops <= n) {
            acknowledged += 1;
        }
    }
    (store.media().clone(), acknowledged)
}

/// What each key may recover to after `acknowledged` updates, with the next one in flight.
fn allowed(
    updates: &[Update],
    acknowledged: usize,
) -> BTreeMap<&'static str, Vec<Option<Vec<u8>>>> {
    let mut last: BTreeMap<&'static str, Option<Vec<u8>>> = BTreeMap::new();
    for u in updates {
        last.entry(u.key).or_insert(None);
    }
    for u in &updates[..acknowledged] {
        last.insert(u.key, Some(u.value.clone()));
    }
    let mut allowed: BTreeMap<_, Vec<_>> = last.into_iter().map(|(k, v)| (k, vec![v])).collect();
    if let Some(in_flight) = updates.get(acknowledged) {
        allowed
            .get_mut(in_flight.key)
            .unwrap()
            .push(Some(in_flight.value.clone()));
    }
    allowed
}

/// Recovers `image` and checks it; returns a description of a violation.
fn check_image(
    image: Vec<u8>,
    allowed: &BTreeMap<&'static str, Vec<Option<Vec<u8>>>>,
) -> Result<(), String> {
    let (store, report) = SlotStore::open(SimMedia::from_image(image), true, RECORD_MAX, FILE_MAX)
        .map_err(|e| format!("recovery failed: {e}"))?;
    if !report.damaged_slots.is_empty() {
        return Err(format!(
            "damaged slots after a crash: {:?}",
            report.damaged_slots
        ));
    }
    for (key, options) in allowed {
        let got = store
            .get(key.as_bytes())
            .map_err(|e| e.to_string())?
            .map(<[u8]>::to_vec);
        if !options.contains(&got) {
            return Err(format!(
                "key {key}: recovered {:?}, allowed {:?}",
                got.map(|g| String::from_utf8_lossy(&g[..g.len().min(12)]).into_owned()),
                options.len()
            ));
        }
    }
    if store.len() > allowed.len() {
        return Err("a key appeared that was never written".into());
    }
    Ok(())
}

/// Every crash point and every crash image of `updates`; returns (images, violations).
fn every_crash(updates: &[Update], bugs: PersistBugs) -> (usize, Vec<String>) {
    let (done, _) = run(updates, None, bugs, true);
    let mut images = 0;
    let mut violations = Vec::new();
    for n in 0..=done.ops {
        let (media, acknowledged) = run(updates, Some(n), bugs, true);
        let snapshot = media.at_crash();
        let dirty = snapshot.dirty_sectors();
        assert!(
            dirty.len() <= 12,
            "scenario too large to enumerate: {} dirty sectors",
            dirty.len()
        );
        let allowed = allowed(updates, acknowledged);
        for mask in 0u32..(1 << dirty.len()) {
            let kept: Vec<usize> = (0..dirty.len())
                .filter(|i| mask & (1 << i) != 0)
                .map(|i| dirty[i])
                .collect();
            let unkept: Vec<usize> = dirty
                .iter()
                .copied()
                .filter(|s| !kept.contains(s))
                .collect();
            let tears = std::iter::once(None).chain(unkept.iter().map(|s| Some(*s)));
            for torn in tears {
                images += 1;
                if let Err(e) = check_image(snapshot.crash_image(&kept, torn), &allowed) {
                    violations.push(format!(
                        "crash after op {n}, kept {kept:?}, torn {torn:?}: {e}"
                    ));
                }
            }
        }
    }
    (images, violations)
}

fn scenarios() -> Vec<Vec<Update>> {
    let choices = [("a", 10), ("a", 300), ("b", 10)];
    let mut all: Vec<Vec<Update>> = vec![vec![]];
    let mut out = Vec::new();
    for _ in 0..3 {
        let mut next = Vec::new();
        for seq in &all {
            for (i, (key, len)) in choices.iter().enumerate() {
                let mut s = seq.clone();
                s.push(Update {
                    key,
                    value: value(s.len() * 10 + i, *len),
                });
                next.push(s);
            }
        }
        out.extend(next.iter().cloned());
        all = next;
    }
    out
}

#[test]
fn every_crash_state_of_up_to_three_updates_recovers_old_or_new() {
    let mut images = 0;
    let mut violations = Vec::new();
    let scenarios = scenarios();
    for s in &scenarios {
        let (n, v) = every_crash(s, PersistBugs::default());
        images += n;
        violations.extend(v);
    }
    println!("{} scenarios, {images} crash images", scenarios.len());
    assert!(
        violations.is_empty(),
        "{}",
        violations[..violations.len().min(5)].join("\n")
    );
    assert!(images > 1_000);
}

#[test]
fn removing_the_version_persist_is_caught() {
    let bugs = PersistBugs {
        skip_version_persist: true,
    };
    let violations: usize = scenarios()
        .iter()
        .map(|s| every_crash(s, bugs).1.len())
        .sum();
    assert!(
        violations > 0,
        "the crash test must catch a missing persist"
    );
}

#[test]
fn ten_thousand_sampled_crashes_of_long_random_sequences() {
    let mut rng = SmallRng::seed_from_u64(7);
    let mut checked = 0;
    while checked < 10_000 {
        let updates: Vec<Update> = (0..20)
            .map(|i| Update {
                key: ["a", "b", "c", "d"][rng.random_range(0..4)],
                value: value(i, [8, 100, 400, 900][rng.random_range(0..4)]),
            })
            .collect();
        let (done, _) = run(&updates, None, PersistBugs::default(), false);
        for _ in 0..100 {
            let n = rng.random_range(0..=done.ops);
            let (media, acknowledged) = run(&updates, Some(n), PersistBugs::default(), false);
            let snapshot = media.at_crash();
            let dirty = snapshot.dirty_sectors();
            let kept: Vec<usize> = dirty
                .iter()
                .copied()
                .filter(|_| rng.random_bool(0.5))
                .collect();
            let unkept: Vec<usize> = dirty
                .iter()
                .copied()
                .filter(|s| !kept.contains(s))
                .collect();
            let torn = (!unkept.is_empty() && rng.random_bool(0.3))
                .then(|| unkept[rng.random_range(0..unkept.len())]);
            let image = snapshot.crash_image(&kept, torn);
            if let Err(e) = check_image(image, &allowed(&updates, acknowledged)) {
                panic!("crash after op {n}: {e}");
            }
            checked += 1;
        }
    }
}

#[test]
fn a_flipped_bit_is_reported_not_served() {
    let (mut store, _) = SlotStore::open(SimMedia::new(), true, RECORD_MAX, FILE_MAX).unwrap();
    store.put(b"k", b"precious value").unwrap();
    store.flush().unwrap();
    let mut image = store.media().now().live_image();
    let at = image.windows(8).position(|w| w == b"precious").unwrap();
    image[at] ^= 0x10;
    let (store, report) =
        SlotStore::open(SimMedia::from_image(image), true, RECORD_MAX, FILE_MAX).unwrap();
    assert_eq!(report.damaged_slots.len(), 1);
    assert!(
        store.get(b"k").unwrap().is_none(),
        "a damaged record is not served"
    );
}

#[test]
fn limits_give_typed_errors_and_damage_nothing() {
    let (mut store, _) = SlotStore::open(SimMedia::new(), true, 64, 4096).unwrap();
    store.put(b"k", b"v").unwrap();
    store.flush().unwrap();
    assert!(matches!(
        store.put(b"k", &[0; 100]),
        Err(StoreError::TooLarge { .. })
    ));
    let mut filled = 0;
    let err = loop {
        match store.put(format!("key{filled}").as_bytes(), b"x") {
            Ok(()) => filled += 1,
            Err(e) => break e,
        }
    };
    assert!(matches!(err, StoreError::FileFull { .. }), "{err}");
    store.flush().unwrap();
    assert_eq!(store.get(b"k").unwrap(), Some(&b"v"[..]));
}

/// The log: after any crash the recovered entries are the acknowledged ones, possibly followed
/// by the batch in flight, whole.
#[test]
fn every_crash_state_of_the_log_recovers_a_whole_prefix() {
    use logless_storage::LogStore;
    let batches: Vec<Vec<Vec<u8>>> = vec![
        vec![value(1, 10)],
        vec![value(2, 700), value(3, 5)],
        vec![value(4, 300)],
    ];
    let run_log = |crash_after: Option<usize>| {
        let mut media = SimMedia::new();
        media.crash_after_ops = crash_after;
        let (mut log, _) = LogStore::open(media, true, 1 << 20).unwrap();
        let mut acknowledged = 0;
        for batch in &batches {
            for entry in batch {
                log.append(entry).unwrap();
            }
            log.commit().unwrap();
            if crash_after.is_none_or(|n| log.media().ops <= n) {
                acknowledged += 1;
            }
        }
        (log.media().clone(), acknowledged)
    };
    let (done, _) = run_log(None);
    let mut images = 0;
    for n in 0..=done.ops {
        let (media, acknowledged) = run_log(Some(n));
        let snapshot = media.at_crash();
        let dirty = snapshot.dirty_sectors();
        let old: Vec<Vec<u8>> = batches[..acknowledged].concat();
        let new: Vec<Vec<u8>> = batches[..(acknowledged + 1).min(batches.len())].concat();
        for mask in 0u32..(1 << dirty.len()) {
            let kept: Vec<usize> = (0..dirty.len())
                .filter(|i| mask & (1 << i) != 0)
                .map(|i| dirty[i])
                .collect();
            images += 1;
            let (_, entries) = LogStore::open(
                SimMedia::from_image(snapshot.crash_image(&kept, None)),
                true,
                1 << 20,
            )
            .unwrap_or_else(|e| panic!("crash after op {n}, kept {kept:?}: {e}"));
            assert!(
                entries == old || entries == new,
                "crash after op {n}, kept {kept:?}: {} entries",
                entries.len()
            );
        }
    }
    assert!(images > 20);
}
