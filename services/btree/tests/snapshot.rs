//! The key-value service's snapshots: restored, a service holds the same entries (equal
//! digests, equal snapshots) and answers alike; bytes that are not a snapshot are refused
//! without a panic and leave the service as it was.
use logless_btree::{KvCommand, KvService};
use logless_service::wire::{put_bytes, put_varint};
use logless_service::{DecodeError, Service};
use proptest::prelude::*;

fn command(op: u8, key: u8, value: u8) -> KvCommand {
    let key = vec![key % 32];
    let value = vec![value];
    match op % 4 {
        0 => KvCommand::Insert { key, value },
        1 => KvCommand::Update { key, value },
        2 => KvCommand::Delete { key },
        _ => KvCommand::Read { key },
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn a_restored_service_has_the_same_entries_and_answers_alike(
        before in proptest::collection::vec((any::<u8>(), any::<u8>(), any::<u8>()), 0..200),
        after in proptest::collection::vec((any::<u8>(), any::<u8>(), any::<u8>()), 0..50),
    ) {
        let mut original = KvService::with_fanout(4);
        for &(op, key, value) in &before {
            original.execute(&command(op, key, value));
        }
        let mut restored = KvService::with_fanout(5);
        restored.execute(&command(0, 99, 1));
        restored.restore(&original.snapshot()).unwrap();
        prop_assert_eq!(restored.digest(), original.digest());
        prop_assert_eq!(restored.snapshot(), original.snapshot());
        restored.tree().check();
        for &(op, key, value) in &after {
            let command = command(op, key, value);
            prop_assert_eq!(restored.execute(&command), original.execute(&command));
        }
        prop_assert_eq!(restored.digest(), original.digest());
    }

    #[test]
    fn random_bytes_are_refused_or_restored_without_a_panic(bytes: Vec<u8>) {
        let mut kv = KvService::new();
        kv.execute(&command(0, 1, 1));
        let before = kv.digest();
        if kv.restore(&bytes).is_err() {
            prop_assert_eq!(kv.digest(), before);
        }
    }
}

#[test]
fn keys_out_of_order_repeated_or_bytes_after_are_refused() {
    let snapshot = |keys: &[&[u8]], extra: &[u8]| {
        let mut out = Vec::new();
        put_varint(&mut out, keys.len() as u64);
        for key in keys {
            put_bytes(&mut out, key);
            put_bytes(&mut out, b"v");
        }
        out.extend_from_slice(extra);
        out
    };
    let mut kv = KvService::new();
    assert_eq!(kv.restore(&snapshot(&[b"a", b"b"], b"")), Ok(()));
    let out_of_order = Err(DecodeError::Invalid("snapshot keys out of order"));
    assert_eq!(kv.restore(&snapshot(&[b"b", b"a"], b"")), out_of_order);
    assert_eq!(kv.restore(&snapshot(&[b"a", b"a"], b"")), out_of_order);
    assert!(kv.restore(&snapshot(&[b"a"], b"x")).is_err());
    assert!(kv.restore(&snapshot(&[b"a"], b"")[..3]).is_err());
    assert_eq!(kv.tree().len(), 2, "a refused snapshot changes nothing");
}
