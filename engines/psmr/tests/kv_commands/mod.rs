//! Key-value commands for the engine's tests, drawn from a few numbers so that proptest
//! strategies and seeded generators build the same mixes.
use logless_btree::KvCommand;

/// Key number `k`.
pub fn key(k: u8) -> Vec<u8> {
    format!("key{k}").into_bytes()
}

/// The command `kind` picks (modulo 8) on key `k`: mostly reads and updates, which go to
/// worker groups, and some inserts, deletes and range reads, which go to `g_all`.
pub fn kv_command(kind: u8, k: u8, value: u8) -> KvCommand {
    let (key, value) = (key(k), vec![value]);
    match kind % 8 {
        0 | 1 => KvCommand::Insert { key, value },
        2 => KvCommand::Delete { key },
        3 => KvCommand::Range {
            start: key,
            count: 3,
        },
        4 | 5 => KvCommand::Update { key, value },
        _ => KvCommand::Read { key },
    }
}
