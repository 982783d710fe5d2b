//! A slot file of format 2 (`tests/fixtures/v2.slots`, written by commit 945d0ad: keys with
//! records of several classes, one record moved to a larger slot, one rewritten in place, one
//! key removed) opens migrated to format 3, with every record it served.
use std::path::{Path, PathBuf};

use logless_storage::slot_store::{FORMAT_VERSION, FORMAT_VERSION_MIGRATED};
use logless_storage::{Durability, SimMedia, SlotStore, StoreError, StoreOptions};

const FIXTURE: &[u8] = include_bytes!("fixtures/v2.slots");

fn options() -> StoreOptions {
    let mut options = StoreOptions::new(Durability::Sync);
    options.key_bytes_max = 64;
    options.record_bytes_max = 1024;
    options.append_chunk_bytes = 0;
    options
}

/// What the fixture's writer left in it.
fn expected() -> Vec<(Vec<u8>, Vec<u8>)> {
    let mut records: Vec<(Vec<u8>, Vec<u8>)> = (0..20u8)
        .map(|i| {
            let record = match i {
                3 => b"rewritten in place".to_vec(),
                _ => vec![i; usize::from(i) * 7],
            };
            (format!("key {i}").into_bytes(), record)
        })
        .collect();
    records.push((b"".to_vec(), b"the empty key".to_vec()));
    records.push((b"moved".to_vec(), vec![9; 500]));
    records.sort();
    records
}

fn contents(store: &SlotStore) -> Vec<(Vec<u8>, Vec<u8>)> {
    let mut records: Vec<_> = store
        .iter()
        .map(|(key, record)| (key.to_vec(), record.to_vec()))
        .collect();
    records.sort();
    records
}

fn fixture_in(dir: &Path) -> PathBuf {
    let path = dir.join("shard.slots");
    std::fs::write(&path, FIXTURE).unwrap();
    path
}

fn format_of(path: &Path) -> u32 {
    let bytes = std::fs::read(path).unwrap();
    u32::from_le_bytes(bytes[8..12].try_into().unwrap())
}

#[test]
fn a_format_2_file_is_migrated_with_every_record() {
    let dir = tempfile::tempdir().unwrap();
    let path = fixture_in(dir.path());
    assert_eq!(format_of(&path), FORMAT_VERSION_MIGRATED);
    // A migration a crash interrupted left its file behind: it is made again.
    std::fs::write(dir.path().join("shard.slots.migrating"), b"half a file").unwrap();
    {
        let (mut store, report) = SlotStore::open(&path, options()).unwrap();
        assert_eq!(report.migrated_from, Some(FORMAT_VERSION_MIGRATED));
        assert_eq!((report.records, report.damaged.len()), (22, 0));
        assert_eq!(contents(&store), expected());
        assert_eq!(store.get(b"removed"), None);
        store.put(b"moved", b"small again").unwrap();
        store.put(b"new", b"record").unwrap();
        store.flush().unwrap();
    }
    assert_eq!(format_of(&path), FORMAT_VERSION);
    assert!(!dir.path().join("shard.slots.migrating").exists());
    let (store, report) = SlotStore::open(&path, options()).unwrap();
    assert_eq!(report.migrated_from, None);
    assert_eq!(store.len(), 23);
    assert_eq!(store.get(b"moved"), Some(&b"small again"[..]));
    assert_eq!(store.get(b"key 3"), Some(&b"rewritten in place"[..]));
}

#[test]
fn a_migration_rewrites_each_record_through_the_callers_conversion() {
    let dir = tempfile::tempdir().unwrap();
    let path = fixture_in(dir.path());
    let (store, report) = SlotStore::open_migrating(&path, options(), |key, record, out| {
        out.extend_from_slice(&(key.len() as u32).to_le_bytes());
        out.extend_from_slice(record);
    })
    .unwrap();
    assert_eq!(report.migrated_from, Some(FORMAT_VERSION_MIGRATED));
    for (key, record) in expected() {
        let mut converted = (key.len() as u32).to_le_bytes().to_vec();
        converted.extend_from_slice(&record);
        assert_eq!(store.get(&key), Some(&converted[..]), "{key:?}");
    }
}

/// A damaged record is never dropped by a migration: the file is refused, as it was.
#[test]
fn a_format_2_file_with_a_damaged_record_is_refused_and_left_as_it_was() {
    let dir = tempfile::tempdir().unwrap();
    let path = fixture_in(dir.path());
    let mut damaged = FIXTURE.to_vec();
    let at = damaged
        .windows(18)
        .position(|w| w == b"rewritten in place")
        .expect("the record is in the fixture");
    damaged[at + 3] ^= 0x10;
    std::fs::write(&path, &damaged).unwrap();
    let Err(error) = SlotStore::open(&path, options()) else {
        panic!("a damaged format 2 file is refused");
    };
    assert!(
        matches!(error, StoreError::Corrupt { what, .. } if what.contains("not migrated")),
        "{error}"
    );
    assert_eq!(std::fs::read(&path).unwrap(), damaged);
}

/// Only a file opened by its path can be migrated (the new file replaces it by a rename).
#[test]
fn a_format_2_image_on_other_media_is_refused_with_the_reason() {
    let Err(error) = SlotStore::open_on(SimMedia::from_image(FIXTURE.to_vec()), options()) else {
        panic!("a format 2 image is refused");
    };
    assert!(error.to_string().contains("format 2"), "{error}");
}
