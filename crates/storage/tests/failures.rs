//! I/O errors stop the store (fail-stop), and the sync mode works on a real file.
use logless_storage::{open_file, Durability, Media, SimMedia, SlotStore, StoreError};

/// Simulated media whose persists (or grows) start failing after a number of calls.
struct FailingMedia {
    inner: SimMedia,
    persists_left: usize,
    grows_left: usize,
}

impl Media for FailingMedia {
    fn len(&self) -> usize {
        self.inner.len()
    }
    fn grow(&mut self, len: usize) -> Result<(), StoreError> {
        if self.grows_left == 0 {
            return Err(StoreError::Io {
                what: "grow",
                source: std::io::Error::from_raw_os_error(28), // ENOSPC
            });
        }
        self.grows_left -= 1;
        self.inner.grow(len)
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
                source: std::io::Error::from_raw_os_error(5), // EIO
            });
        }
        self.persists_left -= 1;
        self.inner.persist(offset, len)
    }
}

#[test]
fn a_failed_flush_poisons_the_store() {
    let media = FailingMedia {
        inner: SimMedia::new(),
        persists_left: 6,
        grows_left: 100,
    };
    let (mut store, _) = SlotStore::open(media, true, 1024, 1 << 20).unwrap();
    let mut failed = None;
    for i in 0..10 {
        store.put(format!("k{i}").as_bytes(), b"v").unwrap();
        if let Err(e) = store.flush() {
            failed = Some(e);
            break;
        }
    }
    assert!(
        matches!(failed, Some(StoreError::Io { what: "msync", .. })),
        "{failed:?}"
    );
    assert!(matches!(store.put(b"x", b"y"), Err(StoreError::Poisoned)));
    assert!(matches!(store.flush(), Err(StoreError::Poisoned)));
}

#[test]
fn a_full_disk_is_an_error_not_damage() {
    let media = FailingMedia {
        inner: SimMedia::new(),
        persists_left: usize::MAX,
        grows_left: 4,
    };
    let (mut store, _) = SlotStore::open(media, true, 1024, 1 << 30).unwrap();
    store.append_chunk_bytes = 0;
    let mut error = None;
    for i in 0..10_000 {
        if let Err(e) = store.put(format!("key{i}").as_bytes(), b"value") {
            error = Some(e);
            break;
        }
        store.flush().unwrap();
    }
    assert!(
        matches!(error, Some(StoreError::Io { what: "grow", .. })),
        "{error:?}"
    );
    assert!(matches!(
        store.put(b"more", b"v"),
        Err(StoreError::Poisoned)
    ));
    assert_eq!(
        store.get(b"key0").unwrap(),
        Some(&b"value"[..]),
        "stored data is intact"
    );
}

#[test]
fn sync_mode_on_a_real_file_survives_reopening() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("slots");
    {
        let (mut store, report) = open_file(&path, Durability::Sync, 4096, 1 << 24).unwrap();
        assert_eq!(report.records, 0);
        for i in 0..100 {
            let value = vec![i as u8; (i % 5) * 200 + 1];
            store
                .put(format!("k{}", i % 30).as_bytes(), &value)
                .unwrap();
        }
        store.flush().unwrap();
    }
    let (store, report) = open_file(&path, Durability::Sync, 4096, 1 << 24).unwrap();
    assert_eq!(report.records, 30);
    assert!(report.damaged_slots.is_empty());
    for k in 0..30usize {
        let last = (0..100).filter(|i| i % 30 == k).max().unwrap();
        let expected = vec![last as u8; (last % 5) * 200 + 1];
        assert_eq!(
            store.get(format!("k{k}").as_bytes()).unwrap(),
            Some(&expected[..])
        );
    }
}
