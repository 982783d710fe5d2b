//! The cursor of HSCAN, SSCAN and ZSCAN over one register's elements.
//!
//! Elements are visited in the order of a 64-bit hash of their key (member or field), and the
//! cursor is the hash to resume from. An element present from the first call to the last is
//! therefore returned exactly once whatever is added or removed in between (Redis promises at
//! least once), and a cursor means the same on every replica. Elements whose hashes collide are
//! returned in the same call, so a cursor never splits them. Like Redis, COUNT elements are
//! taken first and MATCH filters them afterwards, so a call may return fewer than COUNT, even
//! none, before the iteration ends with cursor 0.
use bytes::Bytes;

use crate::glob::Glob;

/// The arguments the SCAN family shares.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ScanArgs {
    /// Where to resume; 0 starts an iteration.
    pub cursor: u64,
    /// MATCH pattern (a Redis glob), if any.
    pub pattern: Option<Bytes>,
    /// COUNT: how many elements to visit (default 10; 0 counts as 1).
    pub count: u64,
}

impl ScanArgs {
    /// A scan from `cursor` with Redis's defaults (no pattern, COUNT 10).
    pub fn from_cursor(cursor: u64) -> ScanArgs {
        ScanArgs {
            cursor,
            pattern: None,
            count: 10,
        }
    }
}

fn position(key: &[u8]) -> u64 {
    xxhash_rust::xxh3::xxh3_64(key)
}

/// One step of a scan over `elements` (key and what goes with it): the next cursor (0 when
/// done) and the visited elements that match, in cursor order.
pub(crate) fn scan<'a, T>(
    elements: impl Iterator<Item = (&'a Bytes, T)>,
    args: &ScanArgs,
) -> (u64, Vec<(&'a Bytes, T)>) {
    let mut ahead: Vec<(u64, &'a Bytes, T)> = elements
        .map(|(key, rest)| (position(key), key, rest))
        .filter(|(at, _, _)| *at >= args.cursor)
        .collect();
    ahead.sort_by(|a, b| (a.0, a.1).cmp(&(b.0, b.1)));
    let count = usize::try_from(args.count.max(1)).unwrap_or(usize::MAX);
    let mut end = count.min(ahead.len());
    // Keep colliding hashes together: the cursor resumes after the last one taken.
    while end > 0 && end < ahead.len() && ahead[end].0 == ahead[end - 1].0 {
        end += 1;
    }
    let next = match ahead.get(end) {
        None => 0,
        Some(_) => ahead[end - 1].0.checked_add(1).unwrap_or(0),
    };
    ahead.truncate(end);
    let glob = args.pattern.as_deref().map(Glob::new);
    let visited = ahead
        .into_iter()
        .filter(|(_, key, _)| glob.as_ref().is_none_or(|g| g.matches(key)))
        .map(|(_, key, rest)| (key, rest))
        .collect();
    (next, visited)
}
