//! Crash consistency of the slot store on simulated media (`sync` mode).
//!
//! A scenario is a sequence of acknowledged batches (puts, then one flush). It is replayed
//! with a crash after every media operation; at each crash point the images a power failure
//! could leave are built (any subset of the unpersisted sectors written, plus optionally one
//! more sector torn) and recovered. Every key must recover to its last acknowledged value or to
//! its value in the batch in flight at the crash: never anything else, never a mix, never a
//! damaged record. Each [`Mutation`] removes one persist step, and the exhaustive test must
//! catch every one of them.
//!
//! Every test runs twice: with the store's DRAM index, and without it
//! ([`StoreOptions::located`]), the test then keeping each key's location as the acceptor
//! table does (the one from before a batch, or none for a new key, handed back with every write
//! in the batch, and the new ones taken after its flush); each recovered store is then
//! written again through the locations its scan gave.
use std::cell::Cell;
use std::collections::BTreeMap;

use logless_storage::media::SECTOR_BYTES;
use logless_storage::{Durability, Location, Mutation, SimMedia, SlotStore, StoreOptions};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

mod support;

/// Puts, each of a key and its new value; an empty value removes the key.
type Batch = Vec<(&'static str, Vec<u8>)>;
type Allowed = BTreeMap<&'static str, Vec<Option<Vec<u8>>>>;

thread_local! {
    /// Whether this thread's stores run without their index ([`StoreOptions::located`]).
    static LOCATED: Cell<bool> = const { Cell::new(false) };
    /// Whether this thread's stores run in `mmap` mode (each put persisted at once) rather
    /// than `sync` (puts staged until the flush).
    static MMAP: Cell<bool> = const { Cell::new(false) };
}

/// Runs `test` with the store's index, then without it.
fn in_both_modes(test: impl Fn(bool)) {
    for located in [false, true] {
        LOCATED.set(located);
        test(located);
    }
    LOCATED.set(false);
}

/// A family of crash scenarios run under `mutation`: the crash images checked and the
/// violations found (the first only when `stop_early`).
type Family = fn(Mutation, bool) -> (usize, Vec<String>);

/// Every crash image of `family` recovers old or new in both modes, and there are as many as
/// `pinned` says for the mode.
fn family_recovers_old_or_new(what: &str, family: Family, pinned: impl Fn(bool) -> usize) {
    in_both_modes(|located| {
        let (images, violations) = family(Mutation::None, false);
        println!("{images} {what} (located: {located})");
        support::assert_no_violations(&violations);
        assert_eq!(images, pinned(located));
    });
}

/// `family` catches `mutation` in both modes.
fn family_catches(family: Family, mutation: Mutation) {
    in_both_modes(|_| {
        let (_, violations) = family(mutation, true);
        support::assert_caught(&mutation, &violations);
    });
}

fn options(exhaustive: bool) -> StoreOptions {
    let durability = match MMAP.get() {
        true => Durability::Mmap,
        false => Durability::Sync,
    };
    let mut options = StoreOptions::new(durability);
    options.located = LOCATED.get();
    options.key_bytes_max = 1024;
    options.record_bytes_max = 2048;
    options.file_bytes_max = 1 << 20;
    // Exhaustive runs append one slot at a time, so few sectors are unpersisted at once.
    options.append_chunk_bytes = if exhaustive { 0 } else { 4096 };
    options
}

fn value(tag: usize, len: usize) -> Vec<u8> {
    let mut v = format!("v{tag}:").into_bytes();
    v.resize(len.max(v.len()), b'a' + (tag % 26) as u8);
    v
}

/// Replays `batches` from an empty store, taking the crash snapshot after `crash_after`
/// media operations. Returns the media and how many batches were acknowledged before it.
fn run(
    batches: &[Batch],
    crash_after: Option<usize>,
    mutation: Mutation,
    exhaustive: bool,
) -> (SimMedia, usize) {
    let mut media = SimMedia::new();
    media.crash_after_ops = crash_after;
    let (mut store, _) = SlotStore::open_on(media, options(exhaustive)).unwrap();
    store.set_mutation(mutation);
    let mut acknowledged = 0;
    // The locations as of the last flush, as the acceptor table keeps them.
    let mut located: BTreeMap<&str, Location> = BTreeMap::new();
    for batch in batches {
        let mut placed = BTreeMap::new();
        let mut removed = std::collections::BTreeSet::new();
        for (key, value) in batch {
            // A key removed in this batch is a new one for its later writes in it.
            let at = match removed.contains(key) {
                true => None,
                false => located.get(key).copied(),
            };
            if value.is_empty() {
                store.remove_at(at, key.as_bytes()).unwrap();
                removed.insert(*key);
                placed.insert(*key, None);
            } else {
                let now = store.put_at(at, key.as_bytes(), value).unwrap();
                placed.insert(*key, Some(now));
            }
        }
        store.flush().unwrap();
        for (key, now) in placed {
            match now {
                Some(now) => located.insert(key, now),
                None => located.remove(key),
            };
        }
        if crash_after.is_none_or(|n| store.media().ops <= n) {
            acknowledged += 1;
        }
    }
    (store.media().clone(), acknowledged)
}

/// What each key may recover to after `acknowledged` batches, with the next one in flight.
fn allowed(batches: &[Batch], acknowledged: usize) -> Allowed {
    let mut last: BTreeMap<&'static str, Option<Vec<u8>>> = BTreeMap::new();
    for (key, _) in batches.iter().flatten() {
        last.entry(key).or_insert(None);
    }
    let state = |value: &Vec<u8>| (!value.is_empty()).then(|| value.clone());
    for (key, value) in batches[..acknowledged].iter().flatten() {
        last.insert(key, state(value));
    }
    let mut allowed: Allowed = last.into_iter().map(|(k, v)| (k, vec![v])).collect();
    if let Some(in_flight) = batches.get(acknowledged) {
        let mut newest: BTreeMap<&'static str, &Vec<u8>> = BTreeMap::new();
        for (key, value) in in_flight {
            newest.insert(key, value);
        }
        for (key, value) in newest {
            allowed.get_mut(key).unwrap().push(state(value));
        }
    }
    allowed
}

/// Recovers `image` and checks it against `allowed`.
fn check_image(image: Vec<u8>, allowed: &Allowed, exhaustive: bool) -> Result<(), String> {
    let (store, report) = SlotStore::open_on(SimMedia::from_image(image), options(exhaustive))
        .map_err(|e| format!("recovery failed: {e}"))?;
    if !report.damaged.is_empty() {
        return Err(format!("damage after a crash: {:?}", report.damaged));
    }
    for (key, options) in allowed {
        let got = store.get(key.as_bytes()).map(<[u8]>::to_vec);
        if !options.contains(&got) {
            let show = |v: &Option<Vec<u8>>| {
                v.as_ref()
                    .map(|g| String::from_utf8_lossy(&g[..g.len().min(8)]).into_owned())
            };
            return Err(format!(
                "key {key}: recovered {:?}, allowed {:?}",
                show(&got),
                options.iter().map(show).collect::<Vec<_>>()
            ));
        }
    }
    if store.len() > allowed.len() {
        return Err("a key appeared that was never written".into());
    }
    if options(exhaustive).located {
        write_located(store)?;
    }
    Ok(())
}

/// Without the index: every recovered key is found at the location the scan gave, and can be
/// written there (in place, or moved by a longer record), read back at the new location.
fn write_located(mut store: SlotStore<SimMedia>) -> Result<(), String> {
    let recovered: Vec<(Location, Vec<u8>, Vec<u8>)> = (store.iter_located())
        .map(|(at, key, record)| (at, key.to_vec(), record.to_vec()))
        .collect();
    let len = store.len();
    store.drop_index();
    let mut placed = Vec::new();
    for (i, (at, key, record)) in recovered.iter().enumerate() {
        let read = store.get_at(Some(*at), key).map_err(|e| e.to_string())?;
        if read != Some(record.as_slice()) {
            return Err(format!(
                "key {key:?} not found at its location without the index"
            ));
        }
        let next = value(1000 + i, [10, 700][i % 2]);
        let now = (store.put_at(Some(*at), key, &next)).map_err(|e| format!("write: {e}"))?;
        placed.push((now, key, next));
    }
    store.flush().map_err(|e| format!("flush: {e}"))?;
    for (at, key, next) in placed {
        let read = store.get_at(Some(at), key).map_err(|e| e.to_string())?;
        if read != Some(next.as_slice()) {
            return Err(format!("key {key:?} not rewritten at its location"));
        }
    }
    if store.len() != len || store.iter_located().count() != len {
        return Err("the rewrite changed the number of keys".into());
    }
    Ok(())
}

/// Crash images at every crash point after `skip_ops` operations: every subset of the dirty
/// sectors, each with no tear or one unkept sector torn. Stops at the first violation if
/// `stop_early`. Returns (images checked, violations).
fn every_crash(
    batches: &[Batch],
    skip_ops: usize,
    mutation: Mutation,
    stop_early: bool,
) -> (usize, Vec<String>) {
    let (done, _) = run(batches, None, mutation, true);
    let mut images = 0;
    let mut violations = Vec::new();
    for n in skip_ops..=done.ops {
        let (media, acknowledged) = run(batches, Some(n), mutation, true);
        let snapshot = media.at_crash();
        let dirty = snapshot.dirty_sectors();
        assert!(dirty.len() <= 10, "too many dirty sectors: {}", dirty.len());
        let allowed = allowed(batches, acknowledged);
        // A torn sector: its first 64, 128, .. 448 bytes new (cache-line steps).
        for (kept, torn) in support::kept_and_torn(&dirty, SECTOR_BYTES, 64) {
            images += 1;
            let image = snapshot.crash_image(&kept, torn);
            if let Err(e) = check_image(image, &allowed, true) {
                violations.push(format!(
                    "crash after op {n}, kept {kept:?}, torn {torn:?}: {e}"
                ));
                if stop_early {
                    return (images, violations);
                }
            }
        }
    }
    (images, violations)
}

/// A key of 600 bytes: in format 3 a slot's key lies before its versions, so a long key and
/// the first version written after it fall in different sectors.
fn long_key(c: char) -> &'static str {
    c.to_string().repeat(600).leak()
}

/// Every sequence of one or two updates of two long keys (a new key, an update in place, a
/// move to a larger class), from an empty store.
fn long_key_scenarios() -> Vec<Vec<Batch>> {
    let (a, b) = (long_key('a'), long_key('b'));
    let choices = [(a, 10), (a, 300), (b, 10)];
    let mut level: Vec<Vec<Batch>> = vec![vec![]];
    let mut out = Vec::new();
    for step in 0..2 {
        let mut next = Vec::new();
        for seq in &level {
            for (i, (key, len)) in choices.iter().enumerate() {
                let mut s = seq.clone();
                s.push(vec![(*key, value(step * 10 + i, *len))]);
                next.push(s);
            }
        }
        out.extend(next.iter().cloned());
        level = next;
    }
    out
}

/// [`every_crash`] of each scenario (its batches and how many operations to skip before
/// crashing), summed: the crash images and the violations (up to the first scenario with one
/// if `stop_early`).
fn every_crash_of(
    scenarios: impl IntoIterator<Item = (Vec<Batch>, usize)>,
    mutation: Mutation,
    stop_early: bool,
) -> (usize, Vec<String>) {
    let mut images = 0;
    let mut violations = Vec::new();
    for (batches, skip_ops) in scenarios {
        let (n, v) = every_crash(&batches, skip_ops, mutation, stop_early);
        images += n;
        violations.extend(v);
        if stop_early && !violations.is_empty() {
            break;
        }
    }
    (images, violations)
}

fn long_keys(mutation: Mutation, stop_early: bool) -> (usize, Vec<String>) {
    let scenarios = long_key_scenarios().into_iter().map(|batches| (batches, 0));
    every_crash_of(scenarios, mutation, stop_early)
}

/// A slot's key is durable with the first version written into the slot: every crash image
/// of long keys recovers old or new.
#[test]
fn every_crash_state_of_long_keys_recovers_old_or_new() {
    family_recovers_old_or_new("crash images of long keys", long_keys, |_| 3_739);
}

#[test]
fn removing_the_key_persist_of_a_new_slot_is_caught() {
    family_catches(long_keys, Mutation::SkipKeyPersist);
}

/// The updates a scenario step chooses from: an in-place update, a move to a slot of a larger
/// class spanning sectors, a second key in a small slot, and keys in larger slots.
const CHOICES: [(&str, usize); 5] = [("a", 10), ("a", 300), ("b", 10), ("c", 600), ("d", 300)];

/// A starting state (acknowledged before any crash) and every sequence of one to three
/// updates after it, each update its own batch; plus two-put batches.
fn scenarios() -> Vec<(Vec<Batch>, usize)> {
    let prefixes: Vec<Batch> = vec![
        vec![],
        // `a` updated in place three times (so version 0 of sequence 3 is current), then moved
        // to a larger class: the old slot's free word is pending, and a later new key reuses
        // the slot once that word is durable.
        vec![
            ("a", value(90, 10)),
            ("a", value(91, 10)),
            ("a", value(92, 10)),
            ("a", value(93, 300)),
        ],
        // Slots placed so that `a`'s class-3 slot starts 64 bytes before a sector boundary
        // (its version 0 spans two sectors) and outside sector 0; `a` then moves to class 4
        // and `d` can reuse the freed slot.
        vec![
            ("x", value(80, 10)),
            ("y", value(81, 10)),
            ("z", value(82, 10)),
            ("w", value(83, 300)),
            ("a", value(84, 300)),
            ("a", value(85, 300)),
            ("a", value(86, 300)),
            ("a", value(87, 600)),
        ],
    ];
    let mut out = Vec::new();
    for (p, prefix) in prefixes.iter().enumerate() {
        let prefix: Vec<Batch> = prefix.iter().map(|u| vec![u.clone()]).collect();
        let mut level: Vec<Vec<Batch>> = vec![prefix.clone()];
        for step in 0..3 {
            let mut next = Vec::new();
            for seq in &level {
                for (i, (key, len)) in CHOICES.iter().enumerate() {
                    let mut s = seq.clone();
                    s.push(vec![(*key, value(p * 100 + step * 10 + i, *len))]);
                    next.push(s);
                }
            }
            out.extend(next.iter().map(|s| (s.clone(), prefix.len())));
            level = next;
        }
        // Group commit: two keys, and one key twice, in one batch.
        let mut s = prefix.clone();
        s.push(vec![
            ("a", value(p * 100 + 50, 10)),
            ("b", value(p * 100 + 51, 600)),
        ]);
        s.push(vec![
            ("b", value(p * 100 + 52, 10)),
            ("b", value(p * 100 + 53, 300)),
        ]);
        out.push((s, prefix.len()));
    }
    out
}

/// The media operations of the first `batches` batches (where crash enumeration starts).
fn ops_of(batches: &[Batch]) -> usize {
    run(batches, None, Mutation::None, true).0.ops
}

fn exhaustive(mutation: Mutation, stop_early: bool) -> (usize, usize, Vec<String>) {
    let scenarios = scenarios();
    let mut images = 0;
    let mut violations = Vec::new();
    for (batches, prefix) in &scenarios {
        // Crashes inside the prefix are covered by the scenarios without one (and the empty
        // prefix's crash points include formatting the file).
        let skip = if *prefix == 0 {
            0
        } else {
            ops_of(&batches[..*prefix])
        };
        let (n, v) = every_crash(batches, skip, mutation, stop_early);
        images += n;
        violations.extend(v);
        if stop_early && !violations.is_empty() {
            break;
        }
    }
    (scenarios.len(), images, violations)
}

#[test]
fn every_crash_state_of_up_to_three_updates_recovers_old_or_new() {
    in_both_modes(|located| {
        let (scenarios, images, violations) = exhaustive(Mutation::None, false);
        println!("{scenarios} scenarios, {images} crash images enumerated (located: {located})");
        support::assert_no_violations(&violations);
        assert_eq!(scenarios, 3 * (5 + 25 + 125 + 1));
        assert_eq!(images, 195_554);
    });
}

fn assert_caught(mutation: Mutation) {
    in_both_modes(|_| {
        let (_, _, violations) = exhaustive(mutation, true);
        support::assert_caught(&mutation, &violations);
    });
}

/// `mmap` mode, where every put is persisted at once while the caller's batch (the acceptor
/// table's, which hands every write of a key in it the key's location from before it) goes
/// on until its flush: from an empty store and from one holding `a` and `b`, every sequence of
/// one or two batches of two writes each over a new key (`c`), an update in place, a move and
/// a removal (so that a key is written twice in a batch, new or moved, and a slot left in a
/// batch may be wanted by a new key). A kill -9 keeps every write made: at every
/// crash point, each key recovers to its last acknowledged value or to one it was given in
/// the batch in flight, and each key has one slot (the store counts as many keys as it holds).
fn mmap_batches(mutation: Mutation, stop_early: bool) -> (usize, Vec<String>) {
    const REMOVED: usize = usize::MAX;
    let choices = [("a", 10), ("a", 300), ("b", REMOVED), ("c", 10), ("c", 300)];
    let prefixes: [Vec<Batch>; 2] = [
        vec![],
        vec![vec![("a", value(90, 10)), ("b", value(91, 300))]],
    ];
    let mut images = 0;
    let mut violations = Vec::new();
    for (p, prefix) in prefixes.iter().enumerate() {
        let mut level: Vec<Vec<Batch>> = vec![prefix.clone()];
        for step in 0..2 {
            let mut next = Vec::new();
            for seq in &level {
                for (i, (k1, l1)) in choices.iter().enumerate() {
                    for (j, (k2, l2)) in choices.iter().enumerate() {
                        let update = |n: usize, len: usize| match len {
                            REMOVED => Vec::new(),
                            len => value(p * 1000 + step * 100 + n, len),
                        };
                        let mut s = seq.clone();
                        s.push(vec![(*k1, update(i, *l1)), (*k2, update(10 + j, *l2))]);
                        next.push(s);
                    }
                }
            }
            for batches in &next {
                let (n, v) = every_kill(batches, ops_of(&batches[..prefix.len()]), mutation);
                images += n;
                violations.extend(v);
                if stop_early && !violations.is_empty() {
                    return (images, violations);
                }
            }
            level = next;
        }
    }
    (images, violations)
}

/// [`mmap_batches`] of one sequence: the image a kill -9 leaves (every write made) at every
/// crash point after `skip_ops` operations, and at the end.
fn every_kill(batches: &[Batch], skip_ops: usize, mutation: Mutation) -> (usize, Vec<String>) {
    let (done, _) = run(batches, None, mutation, true);
    let mut images = 0;
    let mut violations = Vec::new();
    for n in skip_ops..=done.ops {
        let (media, acknowledged) = run(batches, Some(n), mutation, true);
        let snapshot = media.at_crash();
        let image = snapshot.crash_image(&snapshot.dirty_sectors(), None);
        // Any value the batch in flight gave a key, not only its last.
        let mut allowed = allowed(batches, acknowledged);
        for (key, value) in batches.get(acknowledged).into_iter().flatten() {
            let state = (!value.is_empty()).then(|| value.clone());
            allowed.get_mut(key).unwrap().push(state);
        }
        images += 1;
        if let Err(e) = check_image(image, &allowed, true) {
            violations.push(format!("{batches:?}: killed after op {n}: {e}"));
        }
    }
    // After the last flush no key is left in two slots.
    let image = done.now().crash_image(&done.now().dirty_sectors(), None);
    let (_, report) = SlotStore::open_on(SimMedia::from_image(image), options(true)).unwrap();
    if report.duplicates_resolved != 0 {
        violations.push(format!("{batches:?}: {report:?}"));
    }
    (images, violations)
}

#[test]
fn every_kill_of_mmap_batches_writing_a_key_twice_recovers_old_or_new() {
    MMAP.set(true);
    family_recovers_old_or_new("kill -9 images of mmap batches", mmap_batches, |located| {
        if located {
            36_799
        } else {
            36_597
        }
    });
    MMAP.set(false);
}

/// Removals: from an empty store and from one holding `a` and `b`, every sequence of one to
/// three steps (each its own batch) over an update in place, a move, a removal of `a`, a
/// removal of `b` (absent or not) and a new key that may reuse a freed slot.
fn removal_scenarios() -> Vec<(Vec<Batch>, usize)> {
    const REMOVED: usize = usize::MAX;
    let choices = [
        ("a", 10),
        ("a", 300),
        ("a", REMOVED),
        ("b", REMOVED),
        ("c", 10),
    ];
    let prefixes: [Vec<Batch>; 2] = [
        vec![],
        vec![vec![("a", value(90, 10))], vec![("b", value(91, 300))]],
    ];
    let mut out = Vec::new();
    for (p, prefix) in prefixes.iter().enumerate() {
        let mut level: Vec<Vec<Batch>> = vec![prefix.clone()];
        for step in 0..3 {
            let mut next = Vec::new();
            for seq in &level {
                for (i, (key, len)) in choices.iter().enumerate() {
                    let update = match *len {
                        REMOVED => Vec::new(),
                        len => value(p * 100 + step * 10 + i, len),
                    };
                    let mut s = seq.clone();
                    s.push(vec![(*key, update)]);
                    next.push(s);
                }
            }
            out.extend(next.iter().map(|s| (s.clone(), prefix.len())));
            level = next;
        }
    }
    out
}

fn removals(mutation: Mutation, stop_early: bool) -> (usize, Vec<String>) {
    let scenarios = removal_scenarios().into_iter().map(|(batches, prefix)| {
        let skip_ops = ops_of(&batches[..prefix]);
        (batches, skip_ops)
    });
    every_crash_of(scenarios, mutation, stop_early)
}

#[test]
fn every_crash_state_of_removals_recovers_old_or_new() {
    family_recovers_old_or_new("crash images of removals", removals, |_| 44_205);
}

#[test]
fn removals_catch_a_missing_free_persist() {
    family_catches(removals, Mutation::SkipFreePersist);
}

#[test]
fn removing_the_version_persist_is_caught() {
    assert_caught(Mutation::SkipVersionPersist);
}

#[test]
fn removing_the_flip_persist_is_caught() {
    assert_caught(Mutation::SkipFlipPersist);
}

#[test]
fn removing_the_free_persist_is_caught() {
    assert_caught(Mutation::SkipFreePersist);
}

#[test]
fn removing_the_append_persist_is_caught() {
    assert_caught(Mutation::SkipAppendPersist);
}

#[test]
fn removing_the_end_word_persist_is_caught() {
    assert_caught(Mutation::SkipEndPersist);
}

/// Random batches of 1 to 4 puts over 6 keys, with values that move between size classes.
fn random_batches(rng: &mut SmallRng, count: usize) -> Vec<Batch> {
    const KEYS: [&str; 6] = ["a", "b", "c", "d", "e", "f"];
    const LENS: [usize; 6] = [1, 8, 100, 400, 900, 1800];
    (0..count)
        .map(|i| {
            (0..rng.random_range(1..=4))
                .map(|j| {
                    let key = KEYS[rng.random_range(0..KEYS.len())];
                    (
                        key,
                        value(i * 10 + j, LENS[rng.random_range(0..LENS.len())]),
                    )
                })
                .collect()
        })
        .collect()
}

/// Samples crash images of long random sequences; returns (images, moves seen, reuses seen).
fn sampled(seed: u64, images_min: usize, mutation: Mutation) -> Result<usize, String> {
    let mut rng = SmallRng::seed_from_u64(seed);
    let mut checked = 0;
    while checked < images_min {
        let batches = random_batches(&mut rng, 30);
        let (done, _) = run(&batches, None, mutation, false);
        for _ in 0..50 {
            let n = rng.random_range(0..=done.ops);
            let (media, acknowledged) = run(&batches, Some(n), mutation, false);
            let snapshot = media.at_crash();
            let dirty = snapshot.dirty_sectors();
            let (kept, unkept): (Vec<usize>, Vec<usize>) =
                dirty.iter().partition(|_| rng.random_bool(0.5));
            let torn = (!unkept.is_empty() && rng.random_bool(0.3)).then(|| {
                let sector = unkept[rng.random_range(0..unkept.len())];
                (sector, rng.random_range(1..SECTOR_BYTES / 8) * 8)
            });
            let image = snapshot.crash_image(&kept, torn);
            check_image(image, &allowed(&batches, acknowledged), false)
                .map_err(|e| format!("seed {seed}, crash after op {n}: {e}"))?;
            checked += 1;
        }
    }
    Ok(checked)
}

#[test]
fn ten_thousand_sampled_crashes_of_long_random_sequences() {
    in_both_modes(|_| {
        let checked = sampled(7, 10_000, Mutation::None).unwrap();
        assert_eq!(checked, 10_000);
    });
}

#[test]
fn sampled_crashes_catch_a_missing_version_persist() {
    in_both_modes(|_| assert!(sampled(7, 10_000, Mutation::SkipVersionPersist).is_err()));
}

/// The sampled sequences really exercise moves to larger classes and slot reuse.
#[test]
fn sampled_sequences_move_records_and_reuse_slots() {
    in_both_modes(sampled_moves_and_reuses);
}

fn sampled_moves_and_reuses(located: bool) {
    let mut rng = SmallRng::seed_from_u64(7);
    let batches = random_batches(&mut rng, 30);
    let (mut store, _) = SlotStore::open_on(SimMedia::new(), options(false)).unwrap();
    let mut slot_of = BTreeMap::new();
    let mut used = std::collections::BTreeSet::new();
    let (mut moves, mut reuses) = (0, 0);
    let mut location_of = BTreeMap::new();
    for batch in &batches {
        let mut placed = Vec::new();
        for (key, value) in batch {
            let at = location_of.get(key).copied();
            placed.push((*key, store.put_at(at, key.as_bytes(), value).unwrap()));
        }
        store.flush().unwrap();
        location_of.extend(placed);
        for (key, _) in batch {
            // Without the index a location is the slot's offset in 64-byte units.
            let slot = if located {
                location_of[key].to_u64() * 64
            } else {
                store.slot_offset(key.as_bytes()).unwrap()
            };
            if slot_of.insert(*key, slot).is_some_and(|old| old != slot) {
                moves += 1;
                reuses += usize::from(used.contains(&slot));
            }
            used.insert(slot);
        }
    }
    assert_eq!((moves, reuses), (8, 2));
}

/// The log: after any crash the recovered entries are the acknowledged batches, possibly
/// followed by the batch in flight, whole; removing the entry persist is caught.
fn log_crashes(skip_entry_persist: bool) -> (usize, usize) {
    use logless_storage::{LogOptions, LogStore};
    let batches: Vec<Vec<Vec<u8>>> = vec![
        vec![value(1, 10)],
        vec![value(2, 700), value(3, 5)],
        vec![value(4, 300)],
    ];
    let options = LogOptions {
        durability: Durability::Sync,
        file_bytes_max: 1 << 20,
    };
    let run_log = |crash_after: Option<usize>| {
        let mut media = SimMedia::new();
        media.crash_after_ops = crash_after;
        let (mut log, _) = LogStore::open_on(media, options.clone()).unwrap();
        let mut acknowledged = 0;
        for batch in &batches {
            for entry in batch {
                log.append(entry).unwrap();
            }
            if skip_entry_persist {
                log.commit_without_entry_persist().unwrap();
            } else {
                log.commit().unwrap();
            }
            if crash_after.is_none_or(|n| log.media().ops <= n) {
                acknowledged += 1;
            }
        }
        (log.media().clone(), acknowledged)
    };
    let (done, _) = run_log(None);
    let (mut images, mut violations) = (0, 0);
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
            let image = snapshot.crash_image(&kept, None);
            match LogStore::open_on(SimMedia::from_image(image), options.clone()) {
                Ok((_, entries)) if entries == old || entries == new => {}
                _ => violations += 1,
            }
        }
    }
    (images, violations)
}

#[test]
fn every_crash_state_of_the_log_recovers_a_whole_prefix() {
    assert_eq!(log_crashes(false), (44, 0));
}

#[test]
fn removing_the_log_entry_persist_is_caught() {
    let (_, violations) = log_crashes(true);
    assert!(violations > 0);
}
