//! Limits, bit flips, I/O errors (fail-stop), group commit, and the modes on real files.
use logless_storage::{
    Durability, Media, MmapMedia, PersistBy, SimMedia, SlotStore, StoreError, StoreOptions,
};

fn sim_options() -> StoreOptions {
    let mut options = StoreOptions::new(Durability::Sync);
    options.key_bytes_max = 16;
    options.record_bytes_max = 1024;
    options.file_bytes_max = 1 << 20;
    options.append_chunk_bytes = 0;
    options
}

/// Simulated media whose persists or grows fail after a number of calls.
struct FailingMedia {
    inner: SimMedia,
    persists_left: usize,
    grow_error: Option<i32>,
    grows_left: usize,
}

impl Media for FailingMedia {
    fn len(&self) -> usize {
        self.inner.len()
    }
    fn grow(&mut self, len_bytes: usize) -> Result<(), StoreError> {
        if self.grows_left == 0 {
            if let Some(errno) = self.grow_error {
                return Err(StoreError::Io {
                    what: "grow file",
                    source: std::io::Error::from_raw_os_error(errno),
                });
            }
        }
        self.grows_left = self.grows_left.saturating_sub(1);
        self.inner.grow(len_bytes)
    }
    fn read(&self, offset: usize, len: usize) -> &[u8] {
        self.inner.read(offset, len)
    }
    fn write(&mut self, offset: usize, bytes: &[u8]) {
        self.inner.write(offset, bytes)
    }
    fn store_u64(&mut self, offset: usize, value: u64) {
        self.inner.store_u64(offset, value)
    }
    fn persist(&mut self, offset: usize, len: usize) -> Result<(), StoreError> {
        if self.persists_left == 0 {
            return Err(StoreError::Io {
                what: "msync",
                source: std::io::Error::from_raw_os_error(libc_eio()),
            });
        }
        self.persists_left -= 1;
        self.inner.persist(offset, len)
    }
}

/// EIO.
fn libc_eio() -> i32 {
    5
}

#[test]
fn a_failed_flush_poisons_the_store_and_is_never_retried() {
    let media = FailingMedia {
        inner: SimMedia::new(),
        persists_left: 6,
        grow_error: None,
        grows_left: 0,
    };
    let (mut store, _) = SlotStore::open_on(media, sim_options()).unwrap();
    let mut flushed = 0;
    let error = loop {
        store.put(format!("k{flushed}").as_bytes(), b"v").unwrap();
        match store.flush() {
            Ok(()) => flushed += 1,
            Err(e) => break e,
        }
    };
    // Format takes 2 persists; each first put costs an append persist and two rounds.
    assert_eq!(flushed, 1);
    assert!(
        matches!(error, StoreError::Io { what: "msync", .. }),
        "{error}"
    );
    assert!(store.is_poisoned());
    assert!(matches!(store.put(b"x", b"y"), Err(StoreError::Poisoned)));
    assert!(matches!(store.flush(), Err(StoreError::Poisoned)));
    assert!(matches!(store.discard_damaged(), Err(StoreError::Poisoned)));
}

#[test]
fn a_full_disk_is_a_refusal_that_damages_nothing() {
    let media = FailingMedia {
        inner: SimMedia::new(),
        persists_left: usize::MAX,
        grow_error: Some(28), // ENOSPC
        grows_left: 4,
    };
    let (mut store, _) = SlotStore::open_on(media, sim_options()).unwrap();
    let mut stored = 0;
    let error = loop {
        match store.put(format!("key{stored}").as_bytes(), b"value") {
            Ok(()) => {
                store.flush().unwrap();
                stored += 1;
            }
            Err(e) => break e,
        }
    };
    assert!(matches!(&error, StoreError::Io { source, .. } if source.raw_os_error() == Some(28)));
    assert!(!store.is_poisoned(), "a refused grow changed nothing");
    assert_eq!(store.len(), stored);
    // Updates that need no new space still work, and everything stored is intact.
    store.put(b"key0", b"VALUE").unwrap();
    store.flush().unwrap();
    assert_eq!(store.get(b"key0"), Some(&b"VALUE"[..]));
    assert_eq!(store.get(b"key1"), Some(&b"value"[..]));
}

#[test]
fn limits_give_typed_errors_and_change_nothing() {
    let mut options = sim_options();
    options.file_bytes_max = 4096;
    let (mut store, _) = SlotStore::open_on(SimMedia::new(), options).unwrap();
    store.put(b"k", b"v").unwrap();
    store.flush().unwrap();
    let before = store.media().now().live_image();
    assert!(matches!(
        store.put(b"k", &[0; 1025]),
        Err(StoreError::RecordTooLarge {
            bytes: 1025,
            bytes_max: 1024
        })
    ));
    assert!(matches!(
        store.put(&[b'x'; 17], b"v"),
        Err(StoreError::KeyTooLarge {
            bytes: 17,
            bytes_max: 16
        })
    ));
    assert_eq!(
        store.media().now().live_image(),
        before,
        "a refused put writes nothing"
    );
    let mut filled = 0;
    let error = loop {
        match store.put(format!("key{filled}").as_bytes(), b"x") {
            Ok(()) => filled += 1,
            Err(e) => break e,
        }
    };
    // (4096 - 64) / 128 slots of class 0, one taken by "k".
    assert_eq!(filled, 30);
    assert!(
        matches!(
            error,
            StoreError::FileFull {
                file_bytes_max: 4096
            }
        ),
        "{error}"
    );
    // A record that would move to a larger class in a full file is refused; the old stays.
    assert!(matches!(
        store.put(b"k", &[7; 500]),
        Err(StoreError::FileFull { .. })
    ));
    store.flush().unwrap();
    assert_eq!(store.get(b"k"), Some(&b"v"[..]));
    assert_eq!(store.len(), 31);
}

#[test]
fn group_commit_persists_a_batch_in_two_rounds() {
    let (mut store, _) = SlotStore::open_on(SimMedia::new(), sim_options()).unwrap();
    for i in 0..40 {
        store.put(format!("k{i}").as_bytes(), b"first").unwrap();
    }
    store.flush().unwrap();
    let before = store.media().persist_calls;
    for i in 0..40 {
        store.put(format!("k{i}").as_bytes(), b"second").unwrap();
        store.put(format!("k{i}").as_bytes(), b"third").unwrap();
    }
    store.flush().unwrap();
    assert_eq!(store.media().persist_calls - before, 2);
    assert_eq!(store.get(b"k39"), Some(&b"third"[..]));
    // Nothing left to persist: flushing again costs nothing.
    store.flush().unwrap();
    assert_eq!(store.media().persist_calls - before, 2);
}

#[test]
fn staged_puts_are_visible_before_flush_and_not_durable() {
    let (mut store, _) = SlotStore::open_on(SimMedia::new(), sim_options()).unwrap();
    store.put(b"k", b"old").unwrap();
    store.flush().unwrap();
    store.put(b"k", b"new").unwrap();
    assert_eq!(store.get(b"k"), Some(&b"new"[..]));
    let image = store.media().now().durable_image();
    let (recovered, _) = SlotStore::open_on(SimMedia::from_image(image), sim_options()).unwrap();
    assert_eq!(recovered.get(b"k"), Some(&b"old"[..]));
}

/// Every single-bit flip anywhere in a small file is detected or harmless: recovery either
/// refuses the file, or serves every key with its written value, or reports the key damaged
/// and does not serve it. Never a wrong value.
#[test]
fn every_bit_flip_in_a_file_is_detected_or_harmless() {
    let (mut store, _) = SlotStore::open_on(SimMedia::new(), sim_options()).unwrap();
    let written: Vec<(Vec<u8>, Vec<u8>)> = (0..6)
        .map(|i| {
            (
                format!("key{i}").into_bytes(),
                vec![b'a' + i as u8; 10 + i * 70],
            )
        })
        .collect();
    for round in 0..3 {
        for (k, v) in &written[..if round == 2 { 6 } else { 4 }] {
            store.put(k, v).unwrap();
        }
        store.flush().unwrap();
    }
    let image = store.media().now().live_image();
    let (mut refused, mut reported, mut harmless) = (0, 0, 0);
    for offset in 0..image.len() {
        for bit in [0u8, 3, 7] {
            let mut media = SimMedia::from_image(image.clone());
            media.flip_bit(offset, bit);
            let Ok((store, report)) = SlotStore::open_on(media, sim_options()) else {
                refused += 1;
                continue;
            };
            for (k, v) in &written {
                match store.get(k) {
                    Some(got) => assert_eq!(got, &v[..], "flip at {offset} bit {bit}"),
                    None => assert!(
                        report
                            .damaged
                            .iter()
                            .any(|d| d.key.as_deref() == Some(&k[..]))
                            || !report.damaged.is_empty(),
                        "flip at {offset} bit {bit}: key lost without a report"
                    ),
                }
            }
            if report.damaged.is_empty() {
                harmless += 1;
            } else {
                reported += 1;
            }
        }
    }
    println!(
        "{} flips: {refused} refused, {reported} reported, {harmless} harmless",
        image.len() * 3
    );
    assert_eq!((refused, reported, harmless), (228, 3558, 7734));
}

#[test]
fn a_bit_flipped_after_recovery_is_reported_at_read() {
    let (mut store, _) = SlotStore::open_on(SimMedia::new(), sim_options()).unwrap();
    store.put(b"k", b"precious value").unwrap();
    store.flush().unwrap();
    let image = store.media().now().live_image();
    let at = image.windows(8).position(|w| w == b"precious").unwrap();
    let mut media = SimMedia::from_image(image);
    media.flip_bit(at, 4);
    // Reopened over damaged media: the damage is reported at recovery and not served.
    let (store, report) = SlotStore::open_on(media, sim_options()).unwrap();
    assert_eq!(report.damaged.len(), 1);
    assert_eq!(report.damaged[0].key.as_deref(), Some(&b"k"[..]));
    assert_eq!(store.get(b"k"), None);
    assert!(matches!(
        store.get_checked(b"k"),
        Err(StoreError::Quarantined)
    ));
    assert_eq!(store.quarantined().collect::<Vec<_>>(), vec![&b"k"[..]]);
}

#[test]
fn a_quarantined_key_is_refused_until_discarded() {
    let (mut store, _) = SlotStore::open_on(SimMedia::new(), sim_options()).unwrap();
    store.put(b"k", b"precious value").unwrap();
    store.put(b"other", b"fine").unwrap();
    store.flush().unwrap();
    let image = store.media().now().live_image();
    let at = image.windows(8).position(|w| w == b"precious").unwrap();
    let mut media = SimMedia::from_image(image);
    media.flip_bit(at, 0);
    let (mut store, _) = SlotStore::open_on(media, sim_options()).unwrap();
    assert!(matches!(
        store.put(b"k", b"new"),
        Err(StoreError::Quarantined)
    ));
    assert_eq!(store.discard_damaged().unwrap(), 1);
    store.put(b"k", b"new").unwrap();
    store.flush().unwrap();
    let image = store.media().now().durable_image();
    let (store, report) = SlotStore::open_on(SimMedia::from_image(image), sim_options()).unwrap();
    assert!(report.damaged.is_empty());
    assert_eq!(store.get(b"k"), Some(&b"new"[..]));
    assert_eq!(store.get(b"other"), Some(&b"fine"[..]));
    let all: Vec<_> = store.iter().collect();
    // File order: "k" reused the freed slot at the front of the file.
    assert_eq!(
        all,
        vec![(&b"k"[..], &b"new"[..]), (&b"other"[..], &b"fine"[..])]
    );
}

fn file_options(durability: Durability) -> StoreOptions {
    let mut options = StoreOptions::new(durability);
    options.record_bytes_max = 4096;
    options.file_bytes_max = 1 << 24;
    options
}

#[test]
fn every_file_mode_survives_reopening() {
    for durability in [Durability::Mmap, Durability::Sync, Durability::Emulp] {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("slots");
        {
            let (mut store, report) = SlotStore::open(&path, file_options(durability)).unwrap();
            assert_eq!(report.records, 0);
            for i in 0..100usize {
                let value = vec![i as u8; (i % 5) * 200 + 1];
                store
                    .put(format!("k{}", i % 30).as_bytes(), &value)
                    .unwrap();
            }
            store.flush().unwrap();
        }
        let (store, report) = SlotStore::open(&path, file_options(durability)).unwrap();
        assert_eq!(report.records, 30, "{durability:?}");
        assert!(report.damaged.is_empty());
        for k in 0..30usize {
            let last = (0..100).filter(|i| i % 30 == k).max().unwrap();
            let expected = vec![last as u8; (last % 5) * 200 + 1];
            assert_eq!(store.get(format!("k{k}").as_bytes()), Some(&expected[..]));
        }
    }
}

#[test]
fn memory_mode_creates_no_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("slots");
    let (mut store, _) = SlotStore::open(&path, file_options(Durability::Memory)).unwrap();
    store.put(b"k", b"v").unwrap();
    store.flush().unwrap();
    assert_eq!(store.get(b"k"), Some(&b"v"[..]));
    assert!(!path.exists());
}

#[test]
fn a_second_opener_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("slots");
    let _first = SlotStore::open(&path, file_options(Durability::Mmap)).unwrap();
    assert!(matches!(
        SlotStore::open(&path, file_options(Durability::Mmap)),
        Err(StoreError::Locked)
    ));
}

#[test]
fn pmem_is_refused_where_there_is_no_dax_mount() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("slots");
    assert!(matches!(
        SlotStore::open(&path, file_options(Durability::Pmem)),
        Err(StoreError::PmemUnavailable(_))
    ));
}

#[test]
fn emulp_opens_where_pmem_is_refused_and_persists_by_cache_lines() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("slots");
    let media = MmapMedia::open(&path, PersistBy::EmulatedCacheLineFlush).unwrap();
    assert!(media.persist_by().flushes_cache_lines());
    drop(media);
    assert_eq!(
        Durability::Emulp.persist_by(),
        Some(PersistBy::EmulatedCacheLineFlush)
    );
    assert!(Durability::Emulp.group_commit());
}

#[test]
fn a_file_with_other_parameters_or_garbage_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("slots");
    drop(SlotStore::open(&path, file_options(Durability::Mmap)).unwrap());
    let mut other = file_options(Durability::Mmap);
    other.slot_bytes_min = 256;
    assert!(matches!(
        SlotStore::open(&path, other),
        Err(StoreError::InvalidOptions(_))
    ));
    let garbage = dir.path().join("garbage");
    std::fs::write(&garbage, vec![0xa5u8; 10_000]).unwrap();
    assert!(matches!(
        SlotStore::open(&garbage, file_options(Durability::Mmap)),
        Err(StoreError::Corrupt {
            offset_bytes: 0,
            ..
        })
    ));
}

/// A disk with room for what an append needs, but not for doubling the file: the append
/// takes what it needs; once even that does not fit, a refusal; room that comes back is found
/// by `try_grow`.
#[test]
fn a_nearly_full_disk_still_takes_what_an_append_needs() {
    let mut options = sim_options();
    options.append_chunk_bytes = 16 * 1024;
    let (mut store, _) = SlotStore::open_on(SimMedia::new(), options).unwrap();
    store.put(b"small", b"v").unwrap();
    store.flush().unwrap();
    let len = store.media().len();
    // Room for one more chunk of another size class, far less than twice the file.
    store.media_mut().capacity_bytes = Some(len + 16 * 1024 + 1024);
    store.put(b"large", &[7; 900]).unwrap();
    store.flush().unwrap();
    assert_eq!(store.get(b"large"), Some(&[7; 900][..]));
    let error = store.put(b"medium", &[1; 300]).unwrap_err();
    assert!(error.is_no_space(), "{error}");
    assert!(!store.is_poisoned());
    assert!(store.try_grow(16 * 1024).unwrap_err().is_no_space());
    store.media_mut().capacity_bytes = None;
    store.try_grow(16 * 1024).unwrap();
    store.put(b"medium", &[1; 300]).unwrap();
    store.flush().unwrap();
    assert_eq!(store.get(b"small"), Some(&b"v"[..]));
}
