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

    /// Up to `count` (at least one) entries from where `cursor` points, in slot order, and
    /// the cursor of the next call (0 once the table is done); cursor 0 starts. See
    /// [`ScanCursor`] for what a scan promises.
    pub fn scan(&self, cursor: u64, count: usize) -> (u64, Vec<(&Key, &V)>) {
        let buckets = self.entries.num_buckets();
        let start = ScanCursor::decode(cursor, buckets);
        let mut found = Vec::new();
        let mut slot = start;
        while slot < buckets && found.len() < count.max(1) {
            if let Some(entry) = self.entries.get_bucket(slot) {
                found.push((&entry.key, &entry.value));
            }
            slot += 1;
        }
        (ScanCursor::encode(slot, buckets), found)
    }

    /// The first entry at or after slot `from` (modulo the number of slots, wrapping around)
    /// that `wanted` accepts: with `from` random, a random entry (slots after runs of empty
    /// ones are likelier).
    pub fn find_from(&self, from: u64, mut wanted: impl FnMut(&V) -> bool) -> Option<(&Key, &V)> {
        let buckets = self.entries.num_buckets();
        if buckets == 0 {
            return None;
        }
        let start = (from % buckets as u64) as usize;
        (start..buckets)
            .chain(0..start)
            .filter_map(|slot| self.entries.get_bucket(slot))
            .find(|entry| wanted(&entry.value))
            .map(|entry| (&entry.key, &entry.value))
    }

    /// Every entry sorted by key: an order that does not depend on the table's history.
    fn sorted(&self) -> Vec<(&Key, &V)> {
        let mut entries: Vec<_> = self.iter().collect();
        entries.sort_unstable_by(|a, b| a.0.cmp(b.0));
        entries
    }
}

/// The cursor of a scan of a replica's table (`Replica::scan_states`): a slot of the table and
/// the table's size when the cursor was made.
///
/// A scan walks the table's slots in order. Growing the table (doubling its slots; it never
/// shrinks) moves entries to other slots, so a cursor made before the table grew starts the
/// scan again from the first slot. For a table whose entries are never removed, every entry
/// present from a scan's first call to its last is thus returned at least once (by the last
/// pass, which saw no growth), some may be returned more than once, and a scan ends after at
/// most one restart per doubling of the table. A table that removes entries, like the
/// acceptor's with removal of dead registers on, may also rehash them in place, without
/// growing, when an insertion finds no free slot left among the removed ones: a scan across
/// that may miss entries. (Restarting there too would keep the guarantee but could keep a scan
/// under steady churn from ever ending; redis's reverse-binary cursor relies on chained
/// buckets indexed by the hash's low bits, which an open-addressing table does not have.) Bits: the slot above the low [`ScanCursor::SIZE_BITS`], which hold log2 of the slots;
/// 0 is the start (and, returned, the end). A cursor that names no slot of the table ends the
/// scan.
pub struct ScanCursor;

impl ScanCursor {
    /// The low bits holding log2 of the table's slots.
    pub const SIZE_BITS: u32 = 6;

    /// The largest cursor a table of fewer than 2^40 slots makes: callers may use the bits
    /// above it for their own (the node puts a shard number there).
    pub const MAX: u64 = (1 << (40 + Self::SIZE_BITS)) - 1;

    fn encode(slot: usize, buckets: usize) -> u64 {
        if slot >= buckets {
            return 0;
        }
        ((slot as u64) << Self::SIZE_BITS) | u64::from(buckets.trailing_zeros())
    }

    /// The slot to start from: 0 for the start or a cursor from before the table grew, past
    /// the end for a cursor no table of this size made.
    fn decode(cursor: u64, buckets: usize) -> usize {
        if cursor == 0
            || cursor & ((1 << Self::SIZE_BITS) - 1) != u64::from(buckets.trailing_zeros())
        {
            return 0;
        }
        usize::try_from(cursor >> Self::SIZE_BITS).unwrap_or(usize::MAX)
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

    /// Every key a whole scan returns, calling with `count` and letting `between` change the
    /// table between calls.
    fn scan_all(
        table: &mut KeyTable<u32>,
        count: usize,
        mut between: impl FnMut(&mut KeyTable<u32>, usize),
    ) -> Vec<Key> {
        let mut seen = Vec::new();
        let mut cursor = 0;
        for call in 0.. {
            let (next, found) = table.scan(cursor, count);
            assert!(found.len() <= count.max(1));
            seen.extend(found.into_iter().map(|(k, _)| k.clone()));
            if next == 0 {
                break;
            }
            assert!(next <= ScanCursor::MAX);
            cursor = next;
            between(table, call);
            assert!(call < 100_000, "a scan ends");
        }
        seen
    }

    #[test]
    fn a_scan_returns_every_entry_once_when_the_table_holds_still() {
        let mut table: KeyTable<u32> = (0..1_000).map(|i| (key(&format!("k{i}")), i)).collect();
        for count in [0, 1, 7, 100, 5_000] {
            let mut seen = scan_all(&mut table, count, |_, _| {});
            seen.sort();
            seen.dedup();
            assert_eq!(seen.len(), 1_000, "count {count}");
        }
        let empty = KeyTable::<u32>::new();
        assert_eq!(empty.scan(0, 10).0, 0);
        assert!(empty.scan(0, 10).1.is_empty());
        assert!(
            empty.scan(12345, 10).1.is_empty(),
            "any cursor of an empty table ends"
        );
    }

    #[test]
    fn a_scan_across_growth_restarts_and_misses_nothing_present_throughout() {
        let mut table: KeyTable<u32> = (0..100).map(|i| (key(&format!("old{i}")), i)).collect();
        let mut added = 0;
        // Inserts during the first calls only: a table that grows for ever restarts for ever.
        let seen = scan_all(&mut table, 10, |table, call| {
            for _ in 0..if call < 20 { 50 } else { 0 } {
                table.insert(key(&format!("new{added}")), added);
                added += 1;
            }
        });
        for i in 0..100 {
            assert!(
                seen.contains(&key(&format!("old{i}"))),
                "old{i} was returned"
            );
        }
        assert!(added > 100, "the table grew during the scan");
    }

    proptest::proptest! {
        /// Whatever the counts and however the table grows between calls, a scan ends and
        /// returns every entry that was there from its first call to its last.
        #[test]
        fn a_scan_returns_every_entry_present_throughout(
            initial in 0..300u32,
            calls in proptest::collection::vec((0..40usize, 0..80u32), 0..60),
        ) {
            let mut table: KeyTable<u32> =
                (0..initial).map(|i| (key(&format!("old{i}")), i)).collect();
            let mut added = 0;
            let seen = scan_all(&mut table, 1, |_, _| {});
            proptest::prop_assert_eq!(seen.len(), initial as usize);
            let mut calls = calls.into_iter();
            let mut seen = Vec::new();
            let mut cursor = 0;
            loop {
                let (count, inserts) = calls.next().unwrap_or((10, 0));
                let (next, found) = table.scan(cursor, count);
                seen.extend(found.into_iter().map(|(k, _)| k.clone()));
                if next == 0 {
                    break;
                }
                cursor = next;
                for _ in 0..inserts {
                    table.insert(key(&format!("new{added}")), added);
                    added += 1;
                }
            }
            for i in 0..initial {
                let old = key(&format!("old{}", i));
                proptest::prop_assert!(seen.contains(&old), "old{} was returned", i);
            }
        }
    }

    #[test]
    fn a_cursor_no_table_made_ends_or_restarts_the_scan_without_panicking() {
        let table: KeyTable<u32> = (0..10).map(|i| (key(&format!("k{i}")), i)).collect();
        let size_bits = u64::from(table.entries.num_buckets().trailing_zeros());
        let past_the_end = (1 << 40 << ScanCursor::SIZE_BITS) | size_bits;
        assert_eq!(table.scan(past_the_end, 10), (0, Vec::new()));
        assert_eq!(
            table.scan(u64::MAX, 100).1.len(),
            10,
            "another size restarts"
        );
    }

    #[test]
    fn find_from_wraps_around_and_honours_the_filter() {
        let table: KeyTable<u32> = (0..10).map(|i| (key(&format!("k{i}")), i)).collect();
        for seed in [0, 1, 5, 1_000_000, u64::MAX] {
            assert_eq!(table.find_from(seed, |v| *v == 7).map(|(_, v)| *v), Some(7));
            assert!(table.find_from(seed, |_| true).is_some());
            assert!(table.find_from(seed, |v| *v > 100).is_none());
        }
        assert!(KeyTable::<u32>::new().find_from(3, |_| true).is_none());
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
