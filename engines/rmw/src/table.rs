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

use hashbrown::HashTable;
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
/// value start on, with the first line, which holds the key: what [`KeyTable::prefetch_slot`] asks
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

/// The entries in one chunk of a [`KeyTable`]: just under 512 KiB of 128-byte ones. Not 4,096:
/// an allocator asked for a block aligned to a cache line may take room for the alignment on
/// top of the size (mimalloc, which the node uses, does for blocks this large), and 512 KiB plus
/// that is rounded up to its next size class, 640 KiB (measured with `examples/memory.rs`: a
/// million acceptor states took 33 bytes each beyond what the table holds with 4,096 entries
/// a chunk, 1.6 with 4,095).
const CHUNK_ENTRIES: usize = 4_095;

/// A map from register keys to `V`, each entry on its own cache lines.
///
/// The entries are kept densely, in chunks of [`CHUNK_ENTRIES`] that never move once full,
/// and found through an index of 4-byte positions by key hash. A table of entries kept in the
/// hash table's own buckets would waste its empty buckets at entry size: between half and
/// seven eighths of its buckets are in use, so just after a doubling a 128-byte entry cost 256
/// bytes (measured: 270 MB for a million acceptor states, against 138 MB here). Here an empty
/// bucket costs 5 bytes, and the entries at most one partly filled chunk. The price is one
/// more memory access per lookup (the position), which [`KeyTable::prefetch_position`] asks for ahead.
///
/// Removing an entry moves the last one into its place, so positions are dense.
#[derive(Clone)]
pub struct KeyTable<V> {
    /// Positions in `chunks` (see [`locate`]), filed under their key's hash.
    index: HashTable<u32>,
    /// The entries, position `p` at `chunks[p / CHUNK_ENTRIES][p % CHUNK_ENTRIES]`; every
    /// chunk but the last is full.
    chunks: Vec<Vec<Entry<V>>>,
}

fn hash_of(key: &Key) -> u64 {
    FxBuildHasher.hash_one(key)
}

/// The chunk and the place in it of position `position`.
#[inline(always)]
fn locate(position: u32) -> (usize, usize) {
    let position = position as usize;
    (position / CHUNK_ENTRIES, position % CHUNK_ENTRIES)
}

/// The entry at `position`.
#[inline(always)]
fn entry_at<V>(chunks: &[Vec<Entry<V>>], position: u32) -> &Entry<V> {
    let (chunk, at) = locate(position);
    &chunks[chunk][at]
}

/// The entry at `position`, to change.
#[inline(always)]
fn entry_at_mut<V>(chunks: &mut [Vec<Entry<V>>], position: u32) -> &mut Entry<V> {
    let (chunk, at) = locate(position);
    &mut chunks[chunk][at]
}

impl<V> Default for KeyTable<V> {
    fn default() -> KeyTable<V> {
        KeyTable {
            index: HashTable::new(),
            chunks: Vec::new(),
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
        self.index.len()
    }

    /// The bytes the table has allocated: its index, its chunks and the list of them (not what
    /// the values point to).
    pub fn allocated_bytes(&self) -> usize {
        self.index.allocation_size()
            + self.chunks.capacity() * std::mem::size_of::<Vec<Entry<V>>>()
            + self
                .chunks
                .iter()
                .map(|chunk| chunk.capacity() * std::mem::size_of::<Entry<V>>())
                .sum::<usize>()
    }

    /// The position of `key`, if present.
    #[inline]
    fn position(&self, key: &Key) -> Option<u32> {
        let chunks = &self.chunks;
        self.index
            .find(hash_of(key), |&p| entry_at(chunks, p).key == *key)
            .copied()
    }

    /// The value of `key`.
    #[inline]
    pub fn get(&self, key: &Key) -> Option<&V> {
        self.position(key).map(|p| &entry_at(&self.chunks, p).value)
    }

    /// The value of `key`, to change.
    #[inline]
    pub fn get_mut(&mut self, key: &Key) -> Option<&mut V> {
        self.position(key)
            .map(|p| &mut entry_at_mut(&mut self.chunks, p).value)
    }

    /// Asks the cache for the entry of `key` without waiting for it, so that a lookup of `key`
    /// a little later finds it there, in two steps a caller takes some inputs apart. This
    /// first one reads the index's control bytes, finds the first bucket whose hash tag
    /// matches and asks for the position it holds; [`KeyTable::prefetch_slot`] of the bucket
    /// returned, once the position has likely arrived, asks for the entry. In one step the
    /// entry's address would need the position, so the caller would wait out the position's
    /// miss before the entry's could start. If the bucket is another key's, which happens
    /// about once in 128 lookups, the hint is wasted and nothing else.
    ///
    /// Returns the bucket asked for, if any, for [`KeyTable::prefetch_slot`] and
    /// [`KeyTable::in_slot`].
    #[inline]
    pub(crate) fn prefetch_position(&self, key: &Key) -> Option<usize> {
        let bucket = self.index.iter_hash_buckets(hash_of(key)).next()?;
        prefetch_line(self.index.get_bucket(bucket)?);
        Some(bucket)
    }

    /// The second step of a prefetch: asks the cache for the entry whose position is in index
    /// bucket `bucket` (from [`KeyTable::prefetch_position`]), its first line (its key), and
    /// through `fields`, which gets the entry's value, the fields its user reads, with
    /// [`prefetch_line`]. Those are named rather than the entry's second line because the
    /// compiler lays the fields out; a field on a line already asked for costs one
    /// instruction. The bucket may hold another key's position by then (the table changed):
    /// the hint is wasted, and nothing else.
    #[inline]
    pub(crate) fn prefetch_slot(&self, bucket: usize, fields: impl FnOnce(&V)) {
        if let Some(entry) = self.in_bucket(bucket) {
            prefetch_line(entry);
            fields(&entry.value);
        }
    }

    /// The entry whose position is in index bucket `bucket`, if any.
    #[inline]
    fn in_bucket(&self, bucket: usize) -> Option<&Entry<V>> {
        let (chunk, at) = locate(*self.index.get_bucket(bucket)?);
        self.chunks.get(chunk)?.get(at)
    }

    /// The value in the slot [`KeyTable::prefetch_position`] returned, without a lookup: a later
    /// stage of prefetching can follow the pointers of an entry that has arrived meanwhile.
    /// It may be another key's value (the hash tag matched, or the table changed since), so it
    /// is good for hints only.
    #[inline]
    pub(crate) fn in_slot(&self, slot: usize) -> Option<&V> {
        self.in_bucket(slot).map(|entry| &entry.value)
    }

    /// Appends `entry` at the end of the chunks and indexes it under `hash`; returns its
    /// position. A chunk grows by doubling up to [`CHUNK_ENTRIES`], so that small tables stay
    /// small and a large one wastes at most part of its last chunk.
    fn push(&mut self, hash: u64, entry: Entry<V>) -> u32 {
        let position = u32::try_from(self.len()).expect("a table holds fewer than 2^32 registers");
        if self
            .chunks
            .last()
            .is_none_or(|chunk| chunk.len() == CHUNK_ENTRIES)
        {
            self.chunks.push(Vec::new());
        }
        let chunk = self.chunks.last_mut().expect("a chunk with room");
        if chunk.len() == chunk.capacity() {
            let more = chunk.capacity().max(4).min(CHUNK_ENTRIES - chunk.len());
            chunk.reserve_exact(more);
        }
        chunk.push(entry);
        let chunks = &self.chunks;
        self.index
            .insert_unique(hash, position, |&p| hash_of(&entry_at(chunks, p).key));
        position
    }

    /// The value of `key`, inserting `make()` first if there is none.
    #[inline]
    pub fn get_or_insert_with(&mut self, key: &Key, make: impl FnOnce() -> V) -> &mut V {
        let hash = hash_of(key);
        let chunks = &self.chunks;
        let position = match self.index.find(hash, |&p| entry_at(chunks, p).key == *key) {
            Some(&position) => position,
            None => self.push(
                hash,
                Entry {
                    key: key.clone(),
                    value: make(),
                },
            ),
        };
        &mut entry_at_mut(&mut self.chunks, position).value
    }

    /// Sets the value of `key`.
    pub fn insert(&mut self, key: Key, value: V) {
        match self.position(&key) {
            Some(position) => entry_at_mut(&mut self.chunks, position).value = value,
            None => {
                self.push(hash_of(&key), Entry { key, value });
            }
        }
    }

    /// Takes the entry at `position` out of the chunks (which must no longer index it),
    /// moving the last entry into its place.
    fn take(&mut self, position: u32) -> Entry<V> {
        let last_chunk = self.chunks.last_mut().expect("a table with an entry");
        let mut entry = last_chunk.pop().expect("every chunk holds an entry");
        if last_chunk.is_empty() {
            self.chunks.pop();
        }
        let last = u32::try_from(self.index.len()).expect("positions fit u32");
        if position != last {
            std::mem::swap(&mut entry, entry_at_mut(&mut self.chunks, position));
            let moved = entry_at(&self.chunks, position);
            *self
                .index
                .find_mut(hash_of(&moved.key), |&p| p == last)
                .expect("the last entry is indexed") = position;
        }
        entry
    }

    /// Removes `key`, returning its value.
    pub(crate) fn remove(&mut self, key: &Key) -> Option<V> {
        let chunks = &self.chunks;
        let (position, _) = self
            .index
            .find_entry(hash_of(key), |&p| entry_at(chunks, p).key == *key)
            .ok()?
            .remove();
        Some(self.take(position).value)
    }

    /// Keeps only the registers for which `keep` says so; it may change the values it keeps.
    pub(crate) fn retain(&mut self, mut keep: impl FnMut(&Key, &mut V) -> bool) {
        let mut position = 0;
        while (position as usize) < self.len() {
            let entry = entry_at_mut(&mut self.chunks, position);
            if keep(&entry.key, &mut entry.value) {
                position += 1;
                continue;
            }
            let hash = hash_of(&entry.key);
            self.index
                .find_entry(hash, |&p| p == position)
                .expect("every entry is indexed")
                .remove();
            // The last entry, moved here, is looked at next.
            self.take(position);
        }
    }

    /// Every register and its value, in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = (&Key, &V)> {
        self.chunks
            .iter()
            .flatten()
            .map(|entry| (&entry.key, &entry.value))
    }

    /// Every register and its value to change, in no particular order.
    pub fn iter_mut(&mut self) -> impl Iterator<Item = (&Key, &mut V)> {
        self.chunks
            .iter_mut()
            .flatten()
            .map(|entry| (&entry.key, &mut entry.value))
    }

    /// Up to `count` (at least one) entries from where `cursor` points, in position order,
    /// and the cursor of the next call (0 once the table is done); cursor 0 starts. See
    /// [`ScanCursor`] for what a scan promises.
    pub fn scan(&self, cursor: u64, count: usize) -> (u64, Vec<(&Key, &V)>) {
        let len = self.len();
        let start = ScanCursor::decode(cursor).min(len);
        let end = start.saturating_add(count.max(1)).min(len);
        let found = self.positions(start..end).collect();
        (ScanCursor::encode(end, len), found)
    }

    /// The entries at `positions` (each below the table's length), in that order.
    fn positions(
        &self,
        positions: impl Iterator<Item = usize>,
    ) -> impl Iterator<Item = (&Key, &V)> {
        positions.map(|p| {
            let entry = &self.chunks[p / CHUNK_ENTRIES][p % CHUNK_ENTRIES];
            (&entry.key, &entry.value)
        })
    }

    /// The first entry at or after position `from` (modulo the number of entries, wrapping
    /// around) that `wanted` accepts: with `from` random, a random entry.
    pub fn find_from(&self, from: u64, mut wanted: impl FnMut(&V) -> bool) -> Option<(&Key, &V)> {
        let len = self.len();
        if len == 0 {
            return None;
        }
        let start = (from % len as u64) as usize;
        self.positions((start..len).chain(0..start))
            .find(|(_, value)| wanted(value))
    }

    /// Every entry sorted by key: an order that does not depend on the table's history.
    fn sorted(&self) -> Vec<(&Key, &V)> {
        let mut entries: Vec<_> = self.iter().collect();
        entries.sort_unstable_by(|a, b| a.0.cmp(b.0));
        entries
    }
}

/// The cursor of a scan of a replica's table (`Replica::scan_states`): the position in the
/// table's entries where the next call starts.
///
/// A scan walks the table's entries in position order. Entries never move when the table
/// grows; removing one moves the last entry into its place. So for a table from which nothing
/// is removed during a scan, every entry present from the scan's first call to its last is
/// returned exactly once, and entries inserted meanwhile may be returned too (a scan ends once
/// it reaches the end, which insertions faster than the scan keep moving). A table that removes
/// entries, like the acceptor's with removal of dead registers on, may move an entry from past
/// the cursor to before it: a scan across that may miss that entry. (redis's reverse-binary
/// cursor relies on chained buckets indexed by the hash's low bits, which this table does not
/// have.) Bits: the position above the low [`ScanCursor::SIZE_BITS`], which are zero; 0 is the
/// start (and, returned, the end). A cursor with any low bit set starts the scan again; one
/// past the table's end ends it.
pub struct ScanCursor;

impl ScanCursor {
    /// The low bits of a cursor, zero in every cursor a table makes (they once held the
    /// table's size).
    pub const SIZE_BITS: u32 = 6;

    /// The largest cursor a table of fewer than 2^40 entries makes: callers may use the bits
    /// above it for their own (the node puts a shard number there).
    pub const MAX: u64 = (1 << (40 + Self::SIZE_BITS)) - 1;

    fn encode(position: usize, len: usize) -> u64 {
        if position >= len {
            return 0;
        }
        (position as u64) << Self::SIZE_BITS
    }

    /// The position to start from: 0 for the start or a cursor no table made, past the end
    /// for a cursor beyond every table's end.
    fn decode(cursor: u64) -> usize {
        if cursor & ((1 << Self::SIZE_BITS) - 1) != 0 {
            return 0;
        }
        usize::try_from(cursor >> Self::SIZE_BITS).unwrap_or(usize::MAX)
    }
}

/// A table built from the entries `items` (a replica's acceptor states recovered from its
/// store at start-up): sized for as many entries as the iterator says it has at most (at
/// least, if it names no most), so that neither the index nor the chunks grow (and copy
/// themselves) on the way. A store decoding its records one at a time knows how many it
/// holds, but not that each will decode: it names that number as its most.
impl<V> FromIterator<(Key, V)> for KeyTable<V> {
    fn from_iter<I: IntoIterator<Item = (Key, V)>>(items: I) -> KeyTable<V> {
        let items = items.into_iter();
        let (least, most) = items.size_hint();
        let expected = most.unwrap_or(least);
        let mut table = KeyTable {
            index: HashTable::with_capacity(expected),
            chunks: Vec::with_capacity(expected.div_ceil(CHUNK_ENTRIES)),
        };
        for (key, value) in items {
            if table
                .chunks
                .last()
                .is_none_or(|chunk| chunk.len() == CHUNK_ENTRIES)
            {
                let left = expected.saturating_sub(table.len());
                table
                    .chunks
                    .push(Vec::with_capacity(left.min(CHUNK_ENTRIES)));
            }
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
    fn a_collected_table_allocates_its_chunks_once_at_their_final_size() {
        let n = 2 * CHUNK_ENTRIES + 100;
        let table: KeyTable<u32> = (0..n as u32)
            .map(|i| (key(&format!("key:{i}")), i))
            .collect();
        assert_eq!(table.len(), n);
        let capacities: Vec<usize> = table.chunks.iter().map(Vec::capacity).collect();
        assert_eq!(capacities, [CHUNK_ENTRIES, CHUNK_ENTRIES, 100]);
        assert_eq!(table.get(&key("key:8289")), Some(&8289));
        // More entries than the iterator promised, and repeated keys, still make a map.
        let table: KeyTable<u32> = (0..10u32)
            .map(|i| (key(&format!("k{}", i % 7)), i))
            .filter(|_| true)
            .collect();
        assert_eq!(table.len(), 7);
        assert_eq!(table.get(&key("k2")), Some(&9));
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
    fn a_scan_across_growth_misses_nothing_present_throughout() {
        let mut table: KeyTable<u32> = (0..100).map(|i| (key(&format!("old{i}")), i)).collect();
        let mut added = 0;
        // Inserts during the first calls only: a table that grows faster than the scan keeps
        // it going.
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
        let past_the_end = 1 << 40 << ScanCursor::SIZE_BITS;
        assert_eq!(table.scan(past_the_end, 10), (0, Vec::new()));
        assert_eq!(
            table.scan(u64::MAX, 100).1.len(),
            10,
            "low bits set restart"
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
        shorter.remove(&key("k0"));
        assert_ne!(forward, shorter);
    }

    #[test]
    fn removals_and_retain_keep_every_other_entry_findable() {
        // More than two chunks, so that removals move entries across chunks and empty the last.
        let count = 2 * CHUNK_ENTRIES as u32 + 100;
        let mut table: KeyTable<u32> = (0..count).map(|i| (key(&format!("k{i}")), i)).collect();
        for i in (0..count).step_by(3) {
            assert_eq!(table.remove(&key(&format!("k{i}"))), Some(i));
        }
        table.retain(|_, value| *value % 3 != 1);
        let kept: Vec<u32> = (0..count).filter(|i| i % 3 == 2).collect();
        assert_eq!(table.len(), kept.len());
        for i in 0..count {
            let expected = kept.binary_search(&i).is_ok().then_some(i);
            assert_eq!(table.get(&key(&format!("k{i}"))).copied(), expected, "k{i}");
        }
        for i in kept.iter().copied() {
            assert_eq!(table.remove(&key(&format!("k{i}"))), Some(i));
        }
        assert_eq!(table.len(), 0);
        assert!(table.chunks.is_empty(), "an empty table keeps no chunk");
    }

    #[test]
    fn a_large_table_costs_its_entries_and_a_few_bytes_more_per_entry() {
        // Just past a doubling of the index (7/8 of 2^17 buckets in use), the worst case: an
        // entry costs its own bytes, a part of a partly filled chunk and 5 bytes per bucket.
        let count = (1 << 17) * 7 / 8 + 1;
        let table: KeyTable<crate::acceptor::AcceptorState> = (0..count)
            .map(|i| (key(&format!("key:{i:012}")), Default::default()))
            .collect();
        let per_entry = table.allocated_bytes() as f64 / count as f64;
        let entry = entry_bytes::<crate::acceptor::AcceptorState>() as f64;
        assert!(
            per_entry < entry + 16.0,
            "{per_entry:.1} bytes per entry of {entry}"
        );
    }
}
