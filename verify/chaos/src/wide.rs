//! Wide groups of the multi-key workload: MSET of 2 to [`WIDTH_MAX`] keys read by MGET.
//!
//! A wide group is [`WIDTH_MIN`] to [`WIDTH_MAX`] keys `w<group>.<index>`; every MSET of it
//! writes one value, unique to that MSET, to all of its keys. Whatever order the MSETs take
//! effect in, all the group's keys then hold the same value at every instant (or are all
//! absent, before the first), so an MGET of the group that returns two different values, or a
//! value beside an absent key, saw an MSET half applied, or two interleaved.
use std::sync::Mutex;

use rand::rngs::SmallRng;
use rand::Rng;

use crate::client::Reply;

/// The fewest keys of a wide group.
pub const WIDTH_MIN: usize = 2;
/// The most keys of a wide group.
pub const WIDTH_MAX: usize = 10;

/// An operation on a wide group.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WideOp {
    /// MSET of every key to this value.
    MSet(String),
    /// MGET of every key.
    MGet,
}

struct Current {
    index: usize,
    width: usize,
    ops: usize,
}

/// The wide groups, one in use at a time, each retired after a number of operations.
pub struct WideGroups {
    current: Mutex<Current>,
    ops_per_group: usize,
}

/// The key of entry `index` of wide group `group`.
fn key(group: usize, index: usize) -> String {
    format!("w{group}.{index}")
}

impl WideGroups {
    /// Groups of `ops_per_group` operations each, the first `width` keys wide.
    pub fn new(ops_per_group: usize, width: usize) -> WideGroups {
        WideGroups {
            current: Mutex::new(Current {
                index: 0,
                width,
                ops: 0,
            }),
            ops_per_group,
        }
    }

    /// The next operation's command: an MSET of `unique` to every key of the group in use
    /// one time in three, else an MGET of them. A spent group makes way for a new one with a
    /// width drawn from `rng`.
    pub fn next(&self, unique: &str, rng: &mut SmallRng) -> (WideOp, Vec<String>) {
        let (group, width) = {
            let mut current = self.current.lock().expect("not poisoned");
            if current.ops >= self.ops_per_group {
                current.index += 1;
                current.width = rng.random_range(WIDTH_MIN..=WIDTH_MAX);
                current.ops = 0;
            }
            current.ops += 1;
            (current.index, current.width)
        };
        let keys = (0..width).map(|i| key(group, i));
        if rng.random_ratio(1, 3) {
            let cmd = std::iter::once("MSET".to_string())
                .chain(keys.flat_map(|k| [k, unique.to_string()]))
                .collect();
            (WideOp::MSet(unique.to_string()), cmd)
        } else {
            let cmd = std::iter::once("MGET".to_string()).chain(keys).collect();
            (WideOp::MGet, cmd)
        }
    }

    /// How many groups were used.
    pub fn groups(&self) -> usize {
        self.current.lock().expect("not poisoned").index + 1
    }
}

/// What an MGET of a wide group read, if the values are not all the same (a torn read), or an
/// error if the reply is not an MGET's.
pub fn torn_read(reply: &Reply) -> Result<Option<String>, String> {
    let Reply::Array(items) = reply else {
        return Err(format!("{reply:?} where MGET's array was due"));
    };
    let mut values = Vec::with_capacity(items.len());
    for item in items {
        values.push(match item {
            Reply::Nil => None,
            Reply::Bulk(s) => Some(s.as_str()),
            other => return Err(format!("array element {other:?}")),
        });
    }
    Ok(values
        .windows(2)
        .any(|w| w[0] != w[1])
        .then(|| format!("{values:?}")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    #[test]
    fn groups_are_two_to_ten_keys_wide_and_every_mset_writes_one_value() {
        let groups = WideGroups::new(5, WIDTH_MIN);
        let mut rng = SmallRng::seed_from_u64(1);
        let mut widths = std::collections::BTreeSet::new();
        for i in 0..2000 {
            let (op, cmd) = groups.next(&format!("v{i}"), &mut rng);
            match op {
                WideOp::MSet(value) => {
                    assert_eq!(cmd[0], "MSET");
                    assert!(cmd[2..].iter().step_by(2).all(|v| *v == value));
                    widths.insert((cmd.len() - 1) / 2);
                }
                WideOp::MGet => {
                    assert_eq!(cmd[0], "MGET");
                    widths.insert(cmd.len() - 1);
                }
            }
        }
        assert_eq!(groups.groups(), 400);
        assert_eq!(widths, (WIDTH_MIN..=WIDTH_MAX).collect());
    }

    #[test]
    fn a_read_of_two_different_msets_is_torn() {
        let bulk = |s: &str| Reply::Bulk(s.into());
        let read = |items| torn_read(&Reply::Array(items));
        assert_eq!(read(vec![Reply::Nil, Reply::Nil]), Ok(None));
        assert_eq!(read(vec![bulk("a"), bulk("a"), bulk("a")]), Ok(None));
        assert!(read(vec![bulk("a"), bulk("b")]).unwrap().is_some());
        assert!(read(vec![bulk("a"), Reply::Nil]).unwrap().is_some());
        assert!(torn_read(&Reply::Nil).is_err());
    }
}
