//! The per-register tables of a replica (the proposer's registers, the acceptor's states), laid
//! out for the cache.
//!
//! A replica with many registers finds nearly every entry it looks up outside the cache, so
//! what a lookup costs is the number of cache lines it touches. A standard map stores its
//! `(key, value)` pairs 8- or 16-byte aligned, and a large table's memory starts 16 bytes into a
//! page, so a 120- or 128-byte entry usually straddles three lines (measured: with 10,000 or
//! 100,000 entries of 128 bytes, every one started 16 bytes into a line). Here every entry is aligned
//! to a cache line: an entry of up to 128 bytes touches two.
use std::fmt;
use std::hash::{BuildHasher, Hash, Hasher};

use hashbrown::{hash_table, HashTable};
use rustc_hash::FxBuildHasher;

use crate::ids::Key;

/// The size of a cache line on the machines logless runs on.
const CACHE_LINE_BYTES: usize = 64;

/// One register's key and value, starting on a cache line.
#[derive(Clone, Debug)]
#[repr(C, align(64))]
struct Entry<V> {
    key: Key,
    value: V,
}

const _: () = assert!(std::mem::align_of::<Entry<()>>() == CACHE_LINE_BYTES);

/// The bytes an entry of a table of `V` takes: a multiple of the cache line.
#[cfg(test)]
pub(crate) const fn entry_bytes<V>() -> usize {
    std::mem::size_of::<Entry<V>>()
}

/// Asks the processor to load the cache line holding the start of `value`, without waiting.
#[inline(always)]
pub(crate) fn prefetch_line<T>(value: &T) {
    #[cfg(target_feature = "sse")]
    safe_arch::prefetch_t0(value);
    #[cfg(not(target_feature = "sse"))]
    let _ = value;
}

/// The cache lines (0 for the entry's first) that the fields at `offsets` in an entry's
/// value start on, with the first line, which holds the key: what [`KeyTable::prefetch`] asks
/// for when its caller names those fields.
#[cfg(test)]
pub(crate) fn prefetched_lines<V>(offsets: &[usize]) -> std::collections::BTreeSet<usize> {
    let value = std::mem::offset_of!(Entry<V>, value);
    std::iter::once(0)
        .chain(
            offsets
                .iter()
                .map(|offset| (value + offset) / CACHE_LINE_BYTES),
        )
        .collect()
}

/// A map from register keys to `V`, each entry on its own cache lines.
#[derive(Clone)]
pub struct KeyTable<V> {
    entries: HashTable<Entry<V>>,
}

fn hash_of(key: &Key) -> u64 {
    FxBuildHasher.hash_one(key)
}

impl<V> Default for KeyTable<V> {
    fn default() -> KeyTable<V> {
        KeyTable {
            entries: HashTable::new(),
        }
    }
}

impl<V> KeyTable<V> {
    /// An empty table.
    pub fn new() -> KeyTable<V> {
        KeyTable::default()
    }

    /// The number of registers.
    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }

    /// The value of `key`.
    #[inline]
    pub fn get(&self, key: &Key) -> Option<&V> {
        self.entries
            .find(hash_of(key), |entry| entry.key == *key)
            .map(|entry| &entry.value)
    }

    /// The value of `key`, to change.
    #[inline]
    pub fn get_mut(&mut self, key: &Key) -> Option<&mut V> {
        self.entries
            .find_mut(hash_of(key), |entry| entry.key == *key)
            .map(|entry| &mut entry.value)
    }

    /// Asks the cache for the entry of `key` without waiting for it, so that a lookup of `key`
    /// a little later finds it there: the entry's first line (its key), and through `fields`,
    /// which gets the entry's value, the fields its user reads, with [`prefetch_line`]. Those
    /// are named rather than the entry's second line because the compiler lays the fields out;
    /// a field on a line already asked for costs one instruction.
    ///
    /// Reads only the table's control bytes (small, so likely cached) and takes the first entry
    /// whose hash tag matches: if that is another key's, which happens about once in 128
    /// lookups, the hint is wasted and nothing else.
    ///
    /// Returns the slot asked for, if any, for [`KeyTable::in_slot`].
    #[inline]
    pub(crate) fn prefetch(&self, key: &Key, fields: impl FnOnce(&V)) -> Option<usize> {
        let index = self.entries.iter_hash_buckets(hash_of(key)).next()?;
        let entry = self.entries.get_bucket(index)?;
        prefetch_line(entry);
        fields(&entry.value);
        Some(index)
    }

    /// The value in the slot [`KeyTable::prefetch`] returned, without a lookup: a later
    /// stage of prefetching can follow the pointers of an entry that has arrived meanwhile.
    /// It may be another key's value (the hash tag matched, or the table changed since), so it
    /// is good for hints only.
    #[inline]
    pub(crate) fn in_slot(&self, slot: usize) -> Option<&V> {
        self.entries.get_bucket(slot).map(|entry| &entry.value)
    }

    /// The slot of `key`, occupied or not.
    #[inline]
    fn slot(&mut self, key: &Key) -> hash_table::Entry<'_, Entry<V>> {
        self.entries.entry(
            hash_of(key),
            |entry| entry.key == *key,
            |entry| hash_of(&entry.key),
        )
    }

    /// The value of `key`, inserting `make()` first if there is none.
    #[inline]
    pub fn get_or_insert_with(&mut self, key: &Key, make: impl FnOnce() -> V) -> &mut V {
        let entry = self.slot(key).or_insert_with(|| Entry {
            key: key.clone(),
            value: make(),
        });
        &mut entry.into_mut().value
    }

    /// Sets the value of `key`.
    pub fn insert(&mut self, key: Key, value: V) {
        match self.slot(&key) {
            hash_table::Entry::Occupied(mut occupied) => occupied.get_mut().value = value,
            hash_table::Entry::Vacant(vacant) => {
                vacant.insert(Entry { key, value });
            }
        }
    }

    /// Removes `key`, returning its value.
    pub(crate) fn remove(&mut self, key: &Key) -> Option<V> {
        match self
            .entries
            .find_entry(hash_of(key), |entry| entry.key == *key)
        {
            Ok(occupied) => Some(occupied.remove().0.value),
            Err(_) => None,
        }
    }

    /// Keeps only the registers for which `keep` says so; it may change the values it keeps.
    pub(crate) fn retain(&mut self, mut keep: impl FnMut(&Key, &mut V) -> bool) {
        self.entries
            .retain(|entry| keep(&entry.key, &mut entry.value));
    }

    /// Every register and its value, in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = (&Key, &V)> {
        self.entries.iter().map(|entry| (&entry.key, &entry.value))
    }

    /// Every register and its value to change, in no particular order.
    pub fn iter_mut(&mut self) -> impl Iterator<Item = (&Key, &mut V)> {
        self.entries
            .iter_mut()
            .map(|entry| (&entry.key, &mut entry.value))
    }

    /// Every entry sorted by key: an order that does not depend on the table's history.
    fn sorted(&self) -> Vec<(&Key, &V)> {
        let mut entries: Vec<_> = self.iter().collect();
        entries.sort_unstable_by(|a, b| a.0.cmp(b.0));
        entries
    }
}

impl<V> FromIterator<(Key, V)> for KeyTable<V> {
    fn from_iter<I: IntoIterator<Item = (Key, V)>>(items: I) -> KeyTable<V> {
        let mut table = KeyTable::new();
        for (key, value) in items {
            table.insert(key, value);
        }
        table
    }
}

impl<V: PartialEq> PartialEq for KeyTable<V> {
    fn eq(&self, other: &KeyTable<V>) -> bool {
        self.len() == other.len()
            && self
                .iter()
                .all(|(key, value)| other.get(key) == Some(value))
    }
}

impl<V: Eq> Eq for KeyTable<V> {}

/// Hashes the entries in key order, so that equal tables hash equally.
impl<V: Hash> Hash for KeyTable<V> {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.sorted().hash(state);
    }
}

impl<V: fmt::Debug> fmt::Debug for KeyTable<V> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map().entries(self.sorted()).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(name: &str) -> Key {
        Key::new(name.to_string())
    }

    #[test]
    fn entries_start_on_cache_lines_and_take_two_of_them() {
        // The acceptor's entries: key and state within two lines (the proposer's are checked
        // beside its private register type).
        assert_eq!(
            entry_bytes::<crate::acceptor::AcceptorState>(),
            2 * CACHE_LINE_BYTES
        );
        let mut table = KeyTable::new();
        for i in 0..1_000u32 {
            table.insert(key(&format!("key:{i}")), i);
        }
        for (key, _) in table.iter() {
            assert_eq!(
                (key as *const Key as usize) % CACHE_LINE_BYTES,
                0,
                "the key is an entry's first field"
            );
        }
    }

    #[test]
    fn behaves_as_a_map() {
        let mut table = KeyTable::new();
        assert_eq!(table.len(), 0);
        assert_eq!(table.get(&key("a")), None);
        table.insert(key("a"), 1);
        *table.get_or_insert_with(&key("b"), || 10) += 1;
        *table.get_or_insert_with(&key("a"), || unreachable!()) += 1;
        table.insert(key("c"), 3);
        table.insert(key("c"), 4);
        table.insert(key("d"), 9);
        assert_eq!(table.remove(&key("d")), Some(9));
        assert_eq!(table.remove(&key("d")), None);
        *table.get_mut(&key("c")).unwrap() += 1;
        assert_eq!(table.len(), 3);
        assert_eq!(table.get(&key("a")), Some(&2));
        assert_eq!(table.get(&key("b")), Some(&11));
        assert_eq!(table.get(&key("c")), Some(&5));
        for (_, value) in table.iter_mut() {
            *value *= 2;
        }
        let sorted: Vec<_> = table.sorted().into_iter().map(|(_, v)| *v).collect();
        assert_eq!(sorted, [4, 22, 10]);
    }

    #[test]
    fn equality_and_hash_ignore_insertion_order() {
        let forward: KeyTable<u32> = (0..100).map(|i| (key(&format!("k{i}")), i)).collect();
        let backward: KeyTable<u32> = (0..100).rev().map(|i| (key(&format!("k{i}")), i)).collect();
        assert_eq!(forward, backward);
        let digest = |table: &KeyTable<u32>| {
            let mut hasher = std::hash::DefaultHasher::new();
            table.hash(&mut hasher);
            hasher.finish()
        };
        assert_eq!(digest(&forward), digest(&backward));
        let mut changed = backward.clone();
        *changed.get_mut(&key("k7")).unwrap() = 70;
        assert_ne!(forward, changed);
        assert_ne!(digest(&forward), digest(&changed));
        let mut shorter = forward.clone();
        shorter.entries.clear();
        assert_ne!(forward, shorter);
    }
}
