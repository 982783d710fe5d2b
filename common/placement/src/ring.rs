//! The keyspace as a ring: 64-bit positions, the fixed segments nodes own, and symmetric
//! replication.
//!
//! A slot's keys all sit at one ring position, the start of the slot's arc: slot `s` is at
//! `s * 2^64 / SLOTS`. Symmetric replication places a slot's `R` replicas at `R` positions
//! spaced `1/R` of the ring apart, starting at that position (the k-th at
//! `position + k * 2^64 / R`).
//!
//! The ring is cut into [`SEGMENTS`] equal segments; a configuration names the node that owns
//! each one. Segments are the unit that a configuration change hands from one node to another,
//! which is why their number is fixed: a node joins by taking over whole segments and leaves
//! by handing its segments over, and no other node's segments change.
use crate::slot::{Slot, SLOTS};

/// The number of equal segments the ring is cut into (a power of two; also the most nodes a
/// configuration may hold, since each node owns at least one).
pub const SEGMENTS: u16 = 1024;

/// log2 of [`SEGMENTS`].
const SEGMENT_BITS: u32 = SEGMENTS.trailing_zeros();

/// log2 of [`SLOTS`].
const SLOT_BITS: u32 = SLOTS.trailing_zeros();

/// A point of the ring: the whole `u64` range, wrapping around.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RingPosition(pub u64);

impl RingPosition {
    /// The position of every key of `slot`: the start of the slot's arc.
    pub fn of_slot(slot: Slot) -> RingPosition {
        RingPosition(u64::from(slot.get()) << (u64::BITS - SLOT_BITS))
    }

    /// The segment this position lies in.
    pub fn segment(self) -> Segment {
        Segment((self.0 >> (u64::BITS - SEGMENT_BITS)) as u16)
    }

    /// The position `distance` further round the ring.
    pub fn advanced(self, distance: u64) -> RingPosition {
        RingPosition(self.0.wrapping_add(distance))
    }
}

/// One of the ring's [`SEGMENTS`] equal arcs; always below [`SEGMENTS`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Segment(u16);

impl Segment {
    /// The segment numbered `n`, if there is one.
    pub fn new(n: u16) -> Option<Segment> {
        (n < SEGMENTS).then_some(Segment(n))
    }

    /// The segment's number, below [`SEGMENTS`].
    pub fn get(self) -> u16 {
        self.0
    }

    /// The segment's index, for tables of [`SEGMENTS`] entries.
    pub fn index(self) -> usize {
        usize::from(self.0)
    }

    /// The next segment clockwise.
    pub fn next(self) -> Segment {
        Segment((self.0 + 1) % SEGMENTS)
    }

    /// Every segment, in ring order.
    pub fn all() -> impl DoubleEndedIterator<Item = Segment> + ExactSizeIterator + Clone {
        (0..SEGMENTS).map(Segment)
    }
}

/// The `replicas` positions of symmetric replication for `slot`, spaced `1/replicas` of the
/// ring apart, the first being the slot's own position.
pub fn symmetric_positions(slot: Slot, replicas: u8) -> impl Iterator<Item = RingPosition> {
    debug_assert!(replicas > 0);
    let spacing = ((1u128 << u64::BITS) / u128::from(replicas)) as u64;
    let first = RingPosition::of_slot(slot);
    (0..u64::from(replicas)).map(move |k| first.advanced(k * spacing))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_spread_evenly_over_segments() {
        let per_segment = SLOTS / SEGMENTS;
        for slot in Slot::all() {
            let segment = RingPosition::of_slot(slot).segment();
            assert_eq!(segment.get(), slot.get() / per_segment);
        }
    }

    #[test]
    fn symmetric_positions_are_a_third_of_the_ring_apart() {
        let slot = Slot::new(0).unwrap();
        let positions: Vec<u64> = symmetric_positions(slot, 3).map(|p| p.0).collect();
        assert_eq!(
            positions,
            vec![0, 0x5555_5555_5555_5555, 0xAAAA_AAAA_AAAA_AAAA]
        );
        // The segments of slot 0's replicas: 0, 1024/3 and 2*1024/3, rounded down.
        let segments: Vec<u16> = symmetric_positions(slot, 3)
            .map(|p| p.segment().get())
            .collect();
        assert_eq!(segments, vec![0, 341, 682]);
    }

    #[test]
    fn positions_wrap_around_the_ring() {
        let last = Slot::MAX;
        let positions: Vec<RingPosition> = symmetric_positions(last, 5).collect();
        assert_eq!(positions.len(), 5);
        assert!(
            positions[1] < positions[0],
            "the second replica wraps past zero"
        );
        assert_eq!(Segment::new(SEGMENTS - 1).unwrap().next().get(), 0);
    }
}
