//! [`Versions`]: when each key last changed, for WATCH.
//!
//! WATCH asks the map, through the log, for each key's *stamp*; EXEC carries the stamps back
//! ([`Operation::WatchedTransaction`](super::Operation::WatchedTransaction)) and the map runs
//! the transaction only if every key's stamp is still the same. A stamp is the key's version
//! (twice) plus one if the key is live: the version changes with every change of the key's
//! register and every SET without a condition (as in Redis, even of the value the key holds;
//! another write that changes nothing, such as SADD of a member already there, is no change,
//! as in Redis), and
//! the live bit changes when a key's time to live runs out, at the batch stamps every replica
//! shares. So a stamp differs from the one WATCH saw exactly when the key was changed or
//! expired since, by anyone.
//!
//! The versions are replicated state: every replica derives them from the same log prefix (and
//! a snapshot carries them), so every replica aborts the same transactions. They are bounded:
//! the table keeps the [`VERSIONS_MAX`] keys watched or changed most recently, and a key it
//! forgets reports the highest version forgotten so far (the *floor*). A key's reported
//! version therefore never goes down and goes up with every change, which is all the check
//! needs; a key forgotten between its WATCH and EXEC may report a higher version without a
//! change, aborting a transaction that could have run (as if the key had been touched). Only
//! watched keys are kept (a change of a key no WATCH asked for is not recorded: it happened
//! before any WATCH could see it), so that takes [`VERSIONS_MAX`] other keys watched in
//! between.
use std::collections::{BTreeMap, BTreeSet};

use bytes::Bytes;

use super::codec::{put_bytes, put_count, put_u64, DecodeError, Reader};

/// The most keys whose versions are kept: at most this many other keys watched between a WATCH
/// and its EXEC abort no transaction that could have run.
pub const VERSIONS_MAX: usize = 1 << 16;

/// The last change of recently watched keys.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Versions {
    /// Ticks on every change and every WATCH: the versions, and the order of use.
    clock: u64,
    /// Each kept key's version and last use.
    kept: BTreeMap<Bytes, Kept>,
    /// The kept keys by last use: the least recent is forgotten first.
    by_use: BTreeSet<(u64, Bytes)>,
    /// The highest version forgotten: what every key not kept reports.
    floor: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Kept {
    version: u64,
    used: u64,
}

impl Versions {
    /// The version of `key`.
    pub fn of(&self, key: &[u8]) -> u64 {
        self.kept.get(key).map_or(self.floor, |kept| kept.version)
    }

    /// Notes that `key`'s register changed. Only a kept key's change is recorded: a key not
    /// kept reports the floor, and a WATCH of it keeps it from then on, so a change before that
    /// WATCH concerns no transaction. Every write passes here, and with no key watched it costs
    /// one lookup.
    pub(crate) fn changed(&mut self, key: &Bytes) {
        if self.kept.is_empty() || !self.kept.contains_key(key) {
            return;
        }
        self.clock += 1;
        let clock = self.clock;
        self.keep(key, clock);
    }

    /// Notes that `key` is watched (kept for longer), and gives its version.
    pub(crate) fn watched(&mut self, key: &Bytes) -> u64 {
        let version = self.of(key);
        self.clock += 1;
        self.keep(key, version);
        version
    }

    /// Keeps `key` at `version`, used now, forgetting the least recently used key if too many
    /// are kept.
    fn keep(&mut self, key: &Bytes, version: u64) {
        let used = self.clock;
        if let Some(old) = self.kept.insert(key.clone(), Kept { version, used }) {
            self.by_use.remove(&(old.used, key.clone()));
        }
        self.by_use.insert((used, key.clone()));
        if self.kept.len() > VERSIONS_MAX {
            let (_, oldest) = self.by_use.pop_first().expect("more kept than the bound");
            let forgotten = self.kept.remove(&oldest).expect("kept by use and by key");
            self.floor = self.floor.max(forgotten.version);
        }
    }

    /// Appends the encoding: `clock u64 | floor u64 | count u32 | (key, version u64,
    /// used u64)*` in strictly increasing key order.
    pub(crate) fn encode(&self, out: &mut Vec<u8>) {
        put_u64(out, self.clock);
        put_u64(out, self.floor);
        put_count(out, self.kept.len());
        for (key, kept) in &self.kept {
            put_bytes(out, key);
            put_u64(out, kept.version);
            put_u64(out, kept.used);
        }
    }

    /// Reads what [`Versions::encode`] wrote; refuses keys out of order, two keys used at
    /// once, and versions or uses past the clock.
    pub(crate) fn decode(r: &mut Reader<'_>) -> Result<Versions, DecodeError> {
        let mut versions = Versions {
            clock: r.u64()?,
            floor: r.u64()?,
            ..Versions::default()
        };
        let count = r.count(20)?;
        if count > VERSIONS_MAX || versions.floor > versions.clock {
            return Err(DecodeError::Invalid);
        }
        for _ in 0..count {
            let key = r.bytes()?;
            let kept = Kept {
                version: r.u64()?,
                used: r.u64()?,
            };
            let in_order = versions
                .kept
                .last_key_value()
                .is_none_or(|(last, _)| *last < key);
            if !in_order
                || kept.version > versions.clock
                || kept.used > versions.clock
                || !versions.by_use.insert((kept.used, key.clone()))
            {
                return Err(DecodeError::Invalid);
            }
            versions.kept.insert(key, kept);
        }
        Ok(versions)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(i: usize) -> Bytes {
        Bytes::from(format!("k{i}"))
    }

    #[test]
    fn a_version_goes_up_with_every_change_and_never_down() {
        let mut v = Versions::default();
        assert_eq!(v.of(b"a"), 0);
        v.changed(&key(0));
        assert!(
            v.kept.is_empty(),
            "a change of a key nobody watched is not recorded"
        );
        let first = v.watched(&key(0));
        assert_eq!(v.of(b"k0"), first, "WATCH changes no version");
        v.changed(&key(1));
        assert_eq!(v.of(b"k0"), first, "another key's change is not this one's");
        v.changed(&key(0));
        let second = v.of(b"k0");
        assert!(second > first);
        assert_eq!(v.watched(&key(0)), second);
        v.changed(&key(0));
        assert!(v.of(b"k0") > second);
    }

    #[test]
    fn forgotten_keys_report_the_floor_which_only_rises() {
        let mut v = Versions::default();
        v.watched(&key(0));
        v.changed(&key(0));
        let watched = v.watched(&key(1));
        let mut last = v.of(b"k0");
        for i in 2..VERSIONS_MAX + 10 {
            v.watched(&key(i));
            v.changed(&key(i));
            let now = v.of(b"k0");
            assert!(now >= last, "k0's version went down");
            last = now;
        }
        assert_eq!(v.kept.len(), VERSIONS_MAX);
        assert!(v.of(b"k0") > 0 && v.of(b"k0") == v.floor);
        // A key forgotten reports the floor, never below what WATCH saw.
        assert!(v.of(b"k1") >= watched);
        let mut bytes = Vec::new();
        v.encode(&mut bytes);
        let mut r = Reader::new(&bytes);
        assert_eq!(Versions::decode(&mut r), Ok(v));
        r.finish().unwrap();
    }

    #[test]
    fn bad_encodings_are_refused() {
        let mut v = Versions::default();
        for k in [key(1), key(0)] {
            v.watched(&k);
            v.changed(&k);
        }
        let mut bytes = Vec::new();
        v.encode(&mut bytes);
        for cut in 0..bytes.len() {
            assert!(Versions::decode(&mut Reader::new(&bytes[..cut])).is_err());
        }
        // Keys out of order: the two entries' keys (of one length) swapped.
        let mut swapped = bytes.clone();
        for at in 0..swapped.len() - 1 {
            match &swapped[at..at + 2] {
                b"k0" => swapped[at + 1] = b'1',
                b"k1" => swapped[at + 1] = b'0',
                _ => {}
            }
        }
        assert_ne!(swapped, bytes);
        assert_eq!(
            Versions::decode(&mut Reader::new(&swapped)),
            Err(DecodeError::Invalid)
        );
    }
}
