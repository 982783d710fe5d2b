//! Digests of a service's state, for comparing replicas.
use std::fmt;

use xxhash_rust::xxh3::Xxh3;

/// A 128-bit digest of a service's state (xxh3; for comparing replicas, not for security).
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Digest(pub u128);

impl fmt::Debug for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Digest({:032x})", self.0)
    }
}

impl fmt::Display for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:032x}", self.0)
    }
}

/// Builds a [`Digest`] from a canonical walk of the state. Every field goes in with its length,
/// so `("ab", "c")` and `("a", "bc")` digest differently.
#[derive(Default)]
pub struct Digester {
    hasher: Xxh3,
}

impl Digester {
    /// An empty digester.
    pub fn new() -> Digester {
        Digester::default()
    }

    /// Adds an integer.
    pub fn u64(&mut self, value: u64) -> &mut Digester {
        self.hasher.update(&value.to_le_bytes());
        self
    }

    /// Adds a byte string, with its length.
    pub fn bytes(&mut self, bytes: &[u8]) -> &mut Digester {
        self.u64(bytes.len() as u64);
        self.hasher.update(bytes);
        self
    }

    /// The digest of everything added.
    pub fn finish(&self) -> Digest {
        Digest(self.hasher.digest128())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn field_boundaries_count() {
        let ab_c = Digester::new().bytes(b"ab").bytes(b"c").finish();
        let a_bc = Digester::new().bytes(b"a").bytes(b"bc").finish();
        assert_ne!(ab_c, a_bc);
        assert_eq!(ab_c, Digester::new().bytes(b"ab").bytes(b"c").finish());
    }
}
