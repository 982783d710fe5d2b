//! State kept beside the protocol's that the protocol does not depend on, such as a cache's
//! bookkeeping: equality and hashing, which the model checker tells states apart by, ignore it.
use std::hash::{Hash, Hasher};

/// A value equal to every other and hashed to nothing.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Incidental<T>(pub(crate) T);

impl<T> PartialEq for Incidental<T> {
    fn eq(&self, _: &Incidental<T>) -> bool {
        true
    }
}

impl<T> Eq for Incidental<T> {}

impl<T> Hash for Incidental<T> {
    fn hash<H: Hasher>(&self, _: &mut H) {}
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn incidental_values_are_equal_and_hash_alike() {
        let digest = |value: &(u8, Incidental<u32>)| {
            let mut hasher = std::hash::DefaultHasher::new();
            value.hash(&mut hasher);
            hasher.finish()
        };
        let (a, b) = ((1, Incidental(5)), (1, Incidental(6)));
        assert_eq!(a, b);
        assert_eq!(digest(&a), digest(&b));
        assert_ne!(a, (2, Incidental(5)));
    }
}
