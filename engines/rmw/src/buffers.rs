//! Output vectors reused between steps: a runtime hands back the vectors of an output it is
//! done with, and the next output fills the same memory, likely still cached, instead of
//! fresh memory.

/// The capacity to give an output vector after one that held `len` items.
pub(crate) fn room_for_next(len: usize) -> usize {
    len + len / 2
}

/// Keeps `spent`, emptied, as the `spare` for the next output if it has more room.
pub(crate) fn keep_spare<T>(spare: &mut Vec<T>, mut spent: Vec<T>) {
    spent.clear();
    if spent.capacity() > spare.capacity() {
        *spare = spent;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_roomier_vector_is_kept_empty() {
        let mut spare: Vec<u8> = Vec::with_capacity(4);
        keep_spare(&mut spare, vec![1; 16]);
        assert!(spare.is_empty() && spare.capacity() >= 16);
        keep_spare(&mut spare, vec![2; 2]);
        assert!(spare.is_empty() && spare.capacity() >= 16);
        assert_eq!(room_for_next(10), 15);
    }
}
