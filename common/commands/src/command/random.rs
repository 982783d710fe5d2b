//! The seeded randomness of SPOP, SRANDMEMBER and HRANDFIELD.
//!
//! Every replica must compute the same result, so these commands carry a seed that the
//! proposer draws once and the register's state never depends on anything else. The generator
//! is SplitMix64: tiny, and statistically good enough for picking members.

use super::CommandError;

/// The most elements a negative count may ask for (repeats allowed): the reply is built in
/// memory, so a count like -2^62 must be refused rather than attempted.
pub const REPEATS_MAX: usize = 1 << 20;

/// The indexes SRANDMEMBER and HRANDFIELD with a count pick among `n` elements: with a
/// positive `count`, that many distinct ones (all, in order, if there are not more); with a
/// negative one, that many with repeats.
pub(crate) fn pick(n: usize, count: i64, seed: u64) -> Result<Vec<usize>, CommandError> {
    let wanted = usize::try_from(count.unsigned_abs()).unwrap_or(usize::MAX);
    if count < 0 && wanted > REPEATS_MAX {
        return Err(CommandError::OutOfRange);
    }
    let mut rng = Rng::new(seed);
    Ok(match n {
        0 => Vec::new(),
        _ if count < 0 => rng.with_repeats(n, wanted),
        _ if wanted >= n => (0..n).collect(),
        _ => rng.distinct(n, wanted),
    })
}

/// A SplitMix64 generator.
pub(crate) struct Rng(u64);

impl Rng {
    /// The generator for a command's seed.
    pub(crate) fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number below `n` (> 0), by the multiply-high method (bias below n / 2^64).
    pub(crate) fn below(&mut self, n: usize) -> usize {
        assert!(n > 0, "a choice needs something to choose from");
        ((u128::from(self.next_u64()) * n as u128) >> 64) as usize
    }

    /// `count` distinct indexes below `n` in random order (`count` at most `n`): the first
    /// `count` steps of a Fisher–Yates shuffle.
    pub(crate) fn distinct(&mut self, n: usize, count: usize) -> Vec<usize> {
        assert!(count <= n, "cannot pick {count} distinct of {n}");
        let mut indexes: Vec<usize> = (0..n).collect();
        for i in 0..count {
            let j = i + self.below(n - i);
            indexes.swap(i, j);
        }
        indexes.truncate(count);
        indexes
    }

    /// `count` indexes below `n` (> 0), repeats allowed.
    pub(crate) fn with_repeats(&mut self, n: usize, count: usize) -> Vec<usize> {
        (0..count).map(|_| self.below(n)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_same_seed_picks_the_same_and_picks_are_distinct() {
        let a = Rng::new(7).distinct(10, 4);
        assert_eq!(a, Rng::new(7).distinct(10, 4));
        let mut sorted = a.clone();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(sorted.len(), 4);
        assert!(a.iter().all(|&i| i < 10));
        assert_ne!(Rng::new(7).distinct(10, 10), Rng::new(8).distinct(10, 10));
    }
}
