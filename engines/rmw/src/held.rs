//! A register's state as the acceptor's table keeps it: an [`AcceptorState`] packed into the
//! 104 bytes its table entry has beside the key (entries are two cache lines, see
//! [`KeyTable`](crate::table::KeyTable)), with a small value inside instead of behind a pointer.
//!
//! An [`AcceptorState`] holds its value as an `Arc<Register>`: a 96-byte allocation (the
//! reference counts and an 80-byte register) and, for a string, a second one for its bytes —
//! 136 bytes per register measured for a 16-byte string (`examples/memory.rs`), more than the
//! table entry itself. Most registers hold a short string, an integer or nothing, with no
//! fencing token: [`Held`] keeps those inside the entry (a string of up to
//! [`STR_INLINE_BYTES`] bytes, or [`EXPIRING_STR_INLINE_BYTES`] with an expiry), and any other
//! value as the `Arc` it came in. The rounds and request ids are kept without the two bytes of
//! padding each of their proposer ids has, which makes the room.
//!
//! The packing is canonical (a value that fits inside is always kept inside), so two `Held`s
//! are equal exactly when the states they hold are. What the acceptor decides on is always an
//! [`AcceptorState`] ([`Held::state`]): a value kept inside is copied into a new `Arc` when a
//! decision needs it, which is what a PREPARE for a write costs more (see
//! [`acceptor::reads_value`](crate::acceptor::reads_value) for the decisions that do not).
use std::fmt;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

use bytes::Bytes;
use logless_commands::value::{Data, Register};

use crate::acceptor::AcceptorState;
use crate::ids::{AttemptId, NodeId, ProposerId, ReqId, Round};
use crate::persist::Location;
use crate::table::prefetch_line;

/// The longest string kept inside a [`Held`] with no expiry.
pub const STR_INLINE_BYTES: usize = 22;

/// The longest string kept inside a [`Held`] with an expiry.
pub const EXPIRING_STR_INLINE_BYTES: usize = 13;

/// An [`AttemptId`] in 14 bytes: node, incarnation, sequence number, no padding. As a request
/// id, sequence number 0 is none ([`ReqId`]'s is never 0).
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
#[repr(C, packed(2))]
struct PackedAttempt {
    node: u16,
    incarnation: u32,
    seq: u64,
}

impl PackedAttempt {
    fn new(id: AttemptId) -> PackedAttempt {
        PackedAttempt {
            node: id.proposer.node.0,
            incarnation: id.proposer.incarnation,
            seq: id.seq,
        }
    }

    fn get(self) -> AttemptId {
        AttemptId {
            proposer: ProposerId {
                node: NodeId(self.node),
                incarnation: self.incarnation,
            },
            seq: self.seq,
        }
    }

    fn req(req: Option<ReqId>) -> PackedAttempt {
        PackedAttempt::new(req.map_or(AttemptId::BOTTOM, |r| r.attempt()))
    }

    fn get_req(self) -> Option<ReqId> {
        ReqId::new(self.get())
    }
}

/// A [`Round`] in 22 bytes.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
#[repr(C, packed(2))]
pub(crate) struct PackedRound {
    n: u64,
    id: PackedAttempt,
}

impl PackedRound {
    pub(crate) fn new(round: Round) -> PackedRound {
        PackedRound {
            n: round.n,
            id: PackedAttempt::new(round.id),
        }
    }

    pub(crate) fn get(self) -> Round {
        Round {
            n: self.n,
            id: self.id.get(),
        }
    }
}

/// A register's value: inside when it is short and plain, else shared. The proposer keeps the
/// value it knows chosen so too.
#[derive(Clone, PartialEq, Eq, Hash)]
pub(crate) enum HeldValue {
    /// Nothing (⊥ or a tombstone), no expiry, fencing token 0.
    Absent,
    /// An integer, no expiry, fencing token 0.
    Int(i64),
    /// A string of `len` bytes, no expiry, fencing token 0; the bytes past it are zero.
    Str {
        len: u8,
        bytes: [u8; STR_INLINE_BYTES],
    },
    /// A string of `len` bytes expiring at `expires_at_ms` (little-endian), fencing token 0;
    /// the bytes past it are zero.
    ExpiringStr {
        len: u8,
        expires_at_ms: [u8; 8],
        bytes: [u8; EXPIRING_STR_INLINE_BYTES],
    },
    /// Any other value.
    Shared(Arc<Register>),
}

/// `bytes` at the start of an array of `N`, zeros after them; `None` if longer.
fn inline<const N: usize>(bytes: &[u8]) -> Option<(u8, [u8; N])> {
    let mut array = [0; N];
    array.get_mut(..bytes.len())?.copy_from_slice(bytes);
    Some((bytes.len() as u8, array))
}

impl HeldValue {
    pub(crate) fn new(value: &Arc<Register>) -> HeldValue {
        let shared = || HeldValue::Shared(value.clone());
        if value.fence != 0 {
            return shared();
        }
        match (&value.data, value.expires_at_ms) {
            (Data::Absent, None) => HeldValue::Absent,
            (Data::Int(i), None) => HeldValue::Int(*i),
            (Data::Str(s), None) => {
                inline(s).map_or_else(shared, |(len, bytes)| HeldValue::Str { len, bytes })
            }
            (Data::Str(s), Some(at)) => {
                inline(s).map_or_else(shared, |(len, bytes)| HeldValue::ExpiringStr {
                    len,
                    expires_at_ms: at.to_le_bytes(),
                    bytes,
                })
            }
            _ => shared(),
        }
    }

    /// The value, in a new `Arc` if it was kept inside.
    pub(crate) fn get(&self) -> Arc<Register> {
        let plain = |data| {
            Arc::new(Register {
                data,
                ..Register::default()
            })
        };
        match self {
            HeldValue::Absent => plain(Data::Absent),
            HeldValue::Int(i) => plain(Data::Int(*i)),
            HeldValue::Str { len, bytes } => plain(Data::Str(Bytes::copy_from_slice(
                &bytes[..usize::from(*len)],
            ))),
            HeldValue::ExpiringStr {
                len,
                expires_at_ms,
                bytes,
            } => Arc::new(Register {
                data: Data::Str(Bytes::copy_from_slice(&bytes[..usize::from(*len)])),
                expires_at_ms: Some(u64::from_le_bytes(*expires_at_ms)),
                fence: 0,
            }),
            HeldValue::Shared(value) => value.clone(),
        }
    }

    /// `None` if the value is not live at `now_ms` (absent or expired), else when it expires
    /// (`Some(None)`: never): what a count of live registers needs, without copying a value
    /// kept inside into a new `Arc` as [`HeldValue::get`] does.
    pub(crate) fn live_until(&self, now_ms: u64) -> Option<Option<u64>> {
        match self {
            HeldValue::Absent => None,
            HeldValue::Int(_) | HeldValue::Str { .. } => Some(None),
            HeldValue::ExpiringStr { expires_at_ms, .. } => {
                let at = u64::from_le_bytes(*expires_at_ms);
                (at > now_ms).then_some(Some(at))
            }
            HeldValue::Shared(value) => value.is_live(now_ms).then_some(value.expires_at_ms),
        }
    }

    /// Whether this is `value`, without copying either: for checks.
    pub(crate) fn is(&self, value: &Arc<Register>) -> bool {
        match self {
            HeldValue::Shared(shared) => Arc::ptr_eq(shared, value),
            _ => *self == HeldValue::new(value),
        }
    }

    /// Asks the cache for a value kept outside (one inside is on the line that holds it).
    #[inline(always)]
    pub(crate) fn prefetch(&self) {
        if let HeldValue::Shared(value) = self {
            prefetch_line(&**value);
        }
    }
}

impl fmt::Debug for HeldValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.get().fmt(f)
    }
}

impl fmt::Debug for PackedRound {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.get().fmt(f)
    }
}

/// A register the acceptor holds: its state, packed (see the module documentation), and
/// where the store holds that (see [`Location`]), kept in the same table entry so that writing
/// the state back costs the store no lookup by key. The location is the store's business:
/// equality and hashes ignore it.
#[derive(Clone)]
#[repr(C)]
pub(crate) struct Held {
    r_ack: PackedRound,
    r_voted: PackedRound,
    req: PackedAttempt,
    req_prev: PackedAttempt,
    /// Where the store holds the state.
    pub(crate) location: Location,
    value: HeldValue,
}

const _: () = assert!(std::mem::size_of::<HeldValue>() == 24);
const _: () = assert!(std::mem::size_of::<Held>() == 104);

impl Held {
    /// `state`, held at `location`.
    pub(crate) fn new(state: &AcceptorState, location: Location) -> Held {
        Held {
            r_ack: PackedRound::new(state.r_ack),
            r_voted: PackedRound::new(state.r_voted),
            req: PackedAttempt::req(state.req),
            req_prev: PackedAttempt::req(state.req_prev),
            location,
            value: HeldValue::new(&state.value),
        }
    }

    /// Replaces the state, keeping the location.
    pub(crate) fn set(&mut self, state: &AcceptorState) {
        *self = Held::new(state, self.location);
    }

    /// When the value stops being live, if it is at `now_ms` ([`HeldValue::live_until`]).
    pub(crate) fn live_until(&self, now_ms: u64) -> Option<Option<u64>> {
        self.value.live_until(now_ms)
    }

    /// The state, its value in an `Arc` (a new one if it was kept inside).
    pub(crate) fn state(&self) -> AcceptorState {
        self.state_with(self.value.get())
    }

    /// The state with `value` in place of its own: for a decision that does not read the
    /// value ([`acceptor::reads_value`](crate::acceptor::reads_value)), without copying it.
    pub(crate) fn state_with(&self, value: Arc<Register>) -> AcceptorState {
        AcceptorState {
            r_ack: self.r_ack.get(),
            r_voted: self.r_voted.get(),
            value,
            req: self.req.get_req(),
            req_prev: self.req_prev.get_req(),
        }
    }

    /// The highest round acknowledged.
    pub(crate) fn r_ack(&self) -> Round {
        self.r_ack.get()
    }

    /// The round of the last vote.
    pub(crate) fn r_voted(&self) -> Round {
        self.r_voted.get()
    }

    /// Asks the cache for what a decision reads: the rounds (on the entry's first line) and
    /// the value (on its second).
    #[inline(always)]
    pub(crate) fn prefetch(&self) {
        prefetch_line(&self.r_ack);
        prefetch_line(&self.value);
    }

    /// The cache lines (0 for the entry's first) of a table entry that [`Held::prefetch`]
    /// asks for.
    #[cfg(test)]
    pub(crate) fn prefetched_lines() -> std::collections::BTreeSet<usize> {
        let named = [
            std::mem::offset_of!(Held, r_ack),
            std::mem::offset_of!(Held, value),
        ];
        crate::table::prefetched_lines::<Held>(&named)
    }

    /// Whether the value is kept inside (for tests).
    #[cfg(test)]
    fn is_inline(&self) -> bool {
        !matches!(self.value, HeldValue::Shared(_))
    }
}

impl PartialEq for Held {
    fn eq(&self, other: &Held) -> bool {
        self.r_ack == other.r_ack
            && self.r_voted == other.r_voted
            && self.req == other.req
            && self.req_prev == other.req_prev
            && self.value == other.value
    }
}

impl Eq for Held {}

impl Hash for Held {
    fn hash<H: Hasher>(&self, hasher: &mut H) {
        self.r_ack.hash(hasher);
        self.r_voted.hash(hasher);
        self.req.hash(hasher);
        self.req_prev.hash(hasher);
        self.value.hash(hasher);
    }
}

impl fmt::Debug for Held {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Held")
            .field("state", &self.state())
            .field("location", &self.location)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use logless_commands::value::LockState;

    fn attempt(node: u16, incarnation: u32, seq: u64) -> AttemptId {
        AttemptId {
            proposer: ProposerId {
                node: NodeId(node),
                incarnation,
            },
            seq,
        }
    }

    fn register(data: Data, expires_at_ms: Option<u64>, fence: u64) -> Arc<Register> {
        Arc::new(Register {
            data,
            expires_at_ms,
            fence,
        })
    }

    fn string(len: usize) -> Data {
        Data::Str(Bytes::from(vec![b'v'; len]))
    }

    /// Values around every boundary of what is kept inside.
    fn values() -> Vec<(Arc<Register>, bool)> {
        vec![
            (register(Data::Absent, None, 0), true),
            (register(Data::Absent, Some(5), 0), false),
            (register(Data::Absent, None, 3), false),
            (register(Data::Int(-7), None, 0), true),
            (register(Data::Int(i64::MAX), Some(9), 0), false),
            (register(string(0), None, 0), true),
            (register(string(STR_INLINE_BYTES), None, 0), true),
            (register(string(STR_INLINE_BYTES + 1), None, 0), false),
            (register(string(3), None, 1), false),
            (register(string(0), Some(0), 0), true),
            (
                register(string(EXPIRING_STR_INLINE_BYTES), Some(u64::MAX), 0),
                true,
            ),
            (
                register(string(EXPIRING_STR_INLINE_BYTES + 1), Some(1), 0),
                false,
            ),
            (
                register(
                    Data::Lock(LockState {
                        owner: None,
                        lease_until_ms: 4,
                    }),
                    None,
                    0,
                ),
                false,
            ),
        ]
    }

    fn state(value: Arc<Register>) -> AcceptorState {
        AcceptorState {
            r_ack: Round {
                n: u64::MAX,
                id: attempt(u16::MAX, u32::MAX, u64::MAX),
            },
            r_voted: Round {
                n: 7,
                id: attempt(2, 3, 1 << 40),
            },
            value,
            req: ReqId::new(attempt(1, 9, 4)),
            req_prev: None,
        }
    }

    #[test]
    fn whether_a_held_value_is_live_and_until_when_is_read_without_copying_it() {
        let mut values: Vec<_> = values().into_iter().map(|(value, _)| value).collect();
        values.push(register(string(4), Some(10), 0));
        values.push(register(string(STR_INLINE_BYTES + 9), Some(10), 0));
        for value in values {
            let held = Held::new(&state(value.clone()), Location(1));
            for now_ms in [0, 1, 5, 9, 10, 11, u64::MAX] {
                let expected = value.is_live(now_ms).then_some(value.expires_at_ms);
                assert_eq!(held.live_until(now_ms), expected, "{value:?} at {now_ms}");
            }
        }
    }

    #[test]
    fn a_held_state_is_the_state_it_was_made_of() {
        for (value, inside) in values() {
            let state = state(value);
            let held = Held::new(&state, Location(5));
            assert_eq!(held.state(), state);
            assert_eq!(held.is_inline(), inside, "{:?}", state.value);
            assert_eq!(held.location, Location(5));
        }
        let bottom = AcceptorState::default();
        assert_eq!(Held::new(&bottom, Location::UNKNOWN).state(), bottom);
    }

    #[test]
    fn held_states_are_equal_exactly_when_their_states_are() {
        let states: Vec<AcceptorState> = values()
            .into_iter()
            .map(|(value, _)| state(value))
            .chain([AcceptorState::default()])
            .collect();
        let hash = |held: &Held| {
            let mut hasher = std::collections::hash_map::DefaultHasher::new();
            held.hash(&mut hasher);
            hasher.finish()
        };
        for a in &states {
            for b in &states {
                // Another location, and the value in an Arc of its own.
                let copy = AcceptorState {
                    value: Arc::new((*b.value).clone()),
                    ..b.clone()
                };
                let (held_a, held_b) = (Held::new(a, Location(1)), Held::new(&copy, Location(2)));
                assert_eq!(held_a == held_b, a == b, "{a:?} against {b:?}");
                if a == b {
                    assert_eq!(hash(&held_a), hash(&held_b));
                }
            }
        }
    }
}
