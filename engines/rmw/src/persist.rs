//! "Persist before reply", enforced by types.
//!
//! An acceptor's ACK and VOTED are promises about its state; a reply that leaves before that
//! state is durable can be contradicted by a crash. Acceptor replies therefore go into a
//! [`PersistBatch`] together with the states they depend on, and the only way to get them out is
//! [`PersistBatch::commit`], which writes every state through an [`AcceptorStore`], flushes once
//! (group commit), and only then hands the replies back. Replies whose acceptor state did not
//! change still wait for the batch: they may reveal state changed by an earlier message of the
//! same batch, which is not durable before the flush either.
//!
//! A store may refuse a write for lack of space ([`AcceptorStore::is_full`]): then
//! [`PersistBatch::commit_or_refuse`] drops every reply about that register (as if the message
//! had been lost: the acceptor counts as crashed for it) and says which registers were
//! refused, so that the replica goes back to their durable states ([`Replica::restore`]).
//! Every other write of the batch is flushed and its replies leave.
//!
//! [`Replica::restore`]: crate::replica::Replica::restore
//!
//! A store may say where it holds a register's state ([`Location`]): the acceptor keeps that in
//! the register's entry and hands it back with the register's next write, so that the store
//! finds the state without a lookup by key of its own. The engine only carries it.
//!
//! A batch may also forget registers (see the `removal` module). Forgetting is only safe behind
//! the shard's round floor, so a batch that forgets writes the floor and flushes it before it
//! removes anything: a crash in between leaves a register that is still held, never one that is
//! gone without its fence.
use crate::acceptor::{self, AcceptorState, Decision};
use crate::buffers::room_for_next;
use crate::ids::{Key, NodeId, Round};
use crate::message::{Envelope, Message};

/// Where a store holds a register's state, as it said when the state was last written
/// ([`AcceptorStore::write_at`]): opaque to the engine, which keeps it beside the register's
/// state and hands it back with the next write. [`Location::UNKNOWN`] until the store names one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Location(pub u64);

impl Location {
    /// No location known: the store finds the register by its key.
    pub const UNKNOWN: Location = Location(u64::MAX);
}

impl Default for Location {
    fn default() -> Location {
        Location::UNKNOWN
    }
}

/// A batch taking one acceptor decision for `key`, held at `location`, in; gives whether the
/// state changed.
struct Sealing<'a> {
    batch: &'a mut PersistBatch,
    key: &'a Key,
    location: Location,
}

impl Decision for Sealing<'_> {
    type Output = bool;
    #[inline(always)]
    fn decided(
        self,
        next: Option<AcceptorState>,
        learned: Option<Envelope>,
        reply: Envelope,
    ) -> bool {
        let changed = next.is_some();
        if let Some(next) = next {
            (self.batch.writes).push((self.key.clone(), self.location, next));
        }
        if let Some(learned) = learned {
            self.batch.sealed.push(learned);
        }
        self.batch.sealed.push(reply);
        changed
    }
}

/// The round of an acceptor's reply that a refused write withholds, which FULL names instead
/// (`None` for a LEARNED, which is dropped).
fn withheld_round(reply: &Message) -> Option<Round> {
    match reply {
        Message::Ack { r_ack, .. } => Some(*r_ack),
        Message::Voted { round, .. } | Message::Nack { round, .. } => Some(*round),
        _ => None,
    }
}

/// The durable home of acceptor states, implemented by the storage layer (or a test double).
pub trait AcceptorStore {
    /// The store's error; after one, the store refuses further work.
    type Error: std::error::Error;
    /// Stages the new state of one register.
    fn write(&mut self, key: &Key, state: &AcceptorState) -> Result<(), Self::Error>;
    /// [`AcceptorStore::write`] of a register whose state the store said it holds at
    /// `location` (or [`Location::UNKNOWN`]); returns where it holds the state now. A store
    /// must not trust `location` blindly: it may be stale (the register was forgotten and
    /// written again meanwhile). By default the location is not used.
    fn write_at(
        &mut self,
        key: &Key,
        location: Location,
        state: &AcceptorState,
    ) -> Result<Location, Self::Error> {
        self.write(key, state).map(|()| location)
    }
    /// Makes every staged write durable (per the store's durability mode).
    fn flush(&mut self) -> Result<(), Self::Error>;
    /// Stages the shard's round floor: the lowest `r_ack` of every register the acceptor does
    /// not hold, read back at start-up with the states (see
    /// [`Replica::with_round_floor`](crate::replica::Replica::with_round_floor)).
    fn write_round_floor(&mut self, floor: Round) -> Result<(), Self::Error>;
    /// Stages forgetting the state of one register, whose space the store may reuse.
    fn remove(&mut self, key: &Key) -> Result<(), Self::Error>;
    /// [`AcceptorStore::remove`] of a register the store said it holds at `location` (as
    /// [`AcceptorStore::write_at`] takes it). By default the location is not used.
    fn remove_at(&mut self, key: &Key, location: Location) -> Result<(), Self::Error> {
        let _ = location;
        self.remove(key)
    }
    /// Whether `error` refused one write for lack of space and changed nothing (the store
    /// goes on; writes that need no new space still succeed). None by default.
    fn is_full(_error: &Self::Error) -> bool {
        false
    }
}

/// What [`PersistBatch::commit_or_refuse`] did.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Committed {
    /// The replies released: every reply but those about a refused register, whose ACKs,
    /// VOTEDs and NACKs become FULLs naming their rounds (and whose LEARNEDs are dropped).
    pub released: Vec<Envelope>,
    /// The registers whose writes the store refused for lack of space, each once.
    pub refused: Vec<Key>,
    /// The registers the store now holds at another location than the one the batch knew
    /// (new registers, mostly), for [`Replica::placed`](crate::replica::Replica::placed).
    pub placed: Vec<(Key, Location)>,
    /// Whether the store refused the batch's round floor for lack of space: it is not durable
    /// (the batch's removals were left out), and a raise of it for gained slots did not happen
    /// ([`Replica::round_floor_refused`](crate::replica::Replica::round_floor_refused)).
    pub floor_refused: bool,
}

/// Acceptor state changes and the replies that must wait for them.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
#[must_use = "acceptor replies are released only by committing the batch"]
pub struct PersistBatch {
    writes: Vec<(Key, Location, AcceptorState)>,
    sealed: Vec<Envelope>,
    /// Registers to forget, each where the store holds it, before `writes` (a write after a
    /// removal in the batch is a later state of a new register).
    removals: Vec<(Key, Location)>,
    /// The round floor to make durable before any removal.
    round_floor: Option<Round>,
}

impl PersistBatch {
    /// An empty batch.
    pub fn new() -> PersistBatch {
        PersistBatch::default()
    }

    /// Decides on `message` for the acceptor of `key` in `state` (as
    /// [`acceptor::on_acceptor_message`] does) and adds the decision: the new state, if it
    /// changed, to be written, and the LEARNED (if any) and the reply sealed behind it. Returns
    /// the new state if it changed.
    ///
    /// # Panics
    /// If the message is not for acceptors.
    pub fn decide(
        &mut self,
        key: &Key,
        state: &AcceptorState,
        from: NodeId,
        message: &Message,
    ) -> Option<&AcceptorState> {
        self.decide_at(key, Location::UNKNOWN, state, from, message)
    }

    /// [`PersistBatch::decide`] for a register the store holds at `location`, which the write
    /// (if any) hands to the store.
    #[inline]
    pub fn decide_at(
        &mut self,
        key: &Key,
        location: Location,
        state: &AcceptorState,
        from: NodeId,
        message: &Message,
    ) -> Option<&AcceptorState> {
        let sealing = Sealing {
            batch: self,
            key,
            location,
        };
        let changed = acceptor::decide(state, from, message, sealing);
        changed.then(|| &self.writes.last().expect("just added").2)
    }

    /// Adds writing `state` as the state of `key` (held at `location`), with no reply behind
    /// it.
    pub(crate) fn write(&mut self, key: &Key, location: Location, state: AcceptorState) {
        self.writes.push((key.clone(), location, state));
    }

    /// Adds forgetting `key`, held at `location`, behind the round `floor` (the shard's,
    /// raised by the register's `r_ack`). Writes of `key` earlier in the batch are dropped:
    /// they are superseded.
    pub(crate) fn remove(&mut self, key: &Key, location: Location, floor: Round) {
        self.writes.retain(|(written, _, _)| written != key);
        self.removals.push((key.clone(), location));
        self.round_floor = Some(floor);
    }

    /// Adds making the shard's round `floor` durable (raised, not forgetting anything): the
    /// floor a joint stage's new acceptor starts its slots at (docs/ring.md §4, "Dead
    /// registers"). Written and flushed before the batch's writes and replies.
    pub(crate) fn raise_floor(&mut self, floor: Round) {
        self.round_floor = Some(self.round_floor.map_or(floor, |f| f.max(floor)));
    }

    /// Takes the batch, leaving an empty one with room for half as much again as this one held.
    pub fn take(&mut self) -> PersistBatch {
        self.take_into(Vec::new())
    }

    /// [`PersistBatch::take`], with the replies of the new batch going into `spare` (emptied),
    /// a vector of released replies the runtime is done with.
    pub fn take_into(&mut self, mut spare: Vec<Envelope>) -> PersistBatch {
        spare.clear();
        spare.reserve(room_for_next(self.sealed.len()));
        let next = PersistBatch {
            writes: Vec::with_capacity(room_for_next(self.writes.len())),
            sealed: spare,
            removals: Vec::new(),
            round_floor: None,
        };
        std::mem::replace(self, next)
    }

    /// Whether there is nothing to write, forget or release.
    pub fn is_empty(&self) -> bool {
        self.writes.is_empty()
            && self.sealed.is_empty()
            && self.removals.is_empty()
            && self.round_floor.is_none()
    }

    /// The number of registers the batch forgets.
    pub fn removals_len(&self) -> usize {
        self.removals.len()
    }

    /// The number of state writes in the batch.
    pub fn writes_len(&self) -> usize {
        self.writes.len()
    }

    /// Writes every state, flushes once if anything was written, then releases the replies.
    /// A batch that forgets registers first writes the round floor and flushes it, then forgets
    /// them before the writes. On an error nothing is released: the node must stop voting
    /// (fail-stop).
    ///
    /// # Panics
    /// If the store refuses a write for lack of space: a store that can be full is committed
    /// to with [`PersistBatch::commit_or_refuse`].
    pub fn commit<S: AcceptorStore>(self, store: &mut S) -> Result<Vec<Envelope>, S::Error> {
        let committed = self.commit_or_refuse(store)?;
        assert!(
            committed.refused.is_empty() && !committed.floor_refused,
            "a full store, committed to with commit()"
        );
        Ok(committed.released)
    }

    /// [`PersistBatch::commit`], except that a write the store refuses for lack of space
    /// ([`AcceptorStore::is_full`]) does not fail the batch: the register's replies are
    /// withheld, each replaced by a [`Message::Full`] to its proposer (a LEARNED is dropped),
    /// and the register is named in [`Committed::refused`]. A refused round floor
    /// leaves the removals out of the store (their registers keep their dead votes there,
    /// which is safe: the removal did not happen) and is reported
    /// ([`Committed::floor_refused`]). Any other error fails the batch, and nothing is
    /// released.
    pub fn commit_or_refuse<S: AcceptorStore>(self, store: &mut S) -> Result<Committed, S::Error> {
        let full = |result: Result<(), S::Error>| match result {
            Ok(()) => Ok(false),
            Err(e) if S::is_full(&e) => Ok(true),
            Err(e) => Err(e),
        };
        let mut floor_refused = false;
        if let Some(floor) = self.round_floor {
            floor_refused = full(store.write_round_floor(floor))?;
            if !floor_refused {
                store.flush()?;
                for (key, location) in &self.removals {
                    store.remove_at(key, *location)?;
                }
            }
        }
        let mut refused: Vec<Key> = Vec::new();
        let mut placed = Vec::new();
        if !self.writes.is_empty() || !self.removals.is_empty() {
            for (key, location, state) in &self.writes {
                match store.write_at(key, *location, state) {
                    Ok(now) if now != *location => placed.push((key.clone(), now)),
                    Ok(_) => {}
                    Err(e) if S::is_full(&e) => {
                        if !refused.contains(key) {
                            refused.push(key.clone());
                        }
                    }
                    Err(e) => return Err(e),
                }
            }
            store.flush()?;
        }
        let mut released = self.sealed;
        if !refused.is_empty() {
            released.retain_mut(|e| {
                if !refused.contains(e.message.key()) {
                    return true;
                }
                match withheld_round(&e.message) {
                    Some(round) => {
                        let key = e.message.key().clone();
                        e.message = Message::Full { key, round };
                        true
                    }
                    None => false,
                }
            });
        }
        Ok(Committed {
            released,
            refused,
            placed,
            floor_refused,
        })
    }

    /// Releases the replies without persisting anything. Only for the harness tests that must
    /// show that a reply sent before its state is durable is caught (a deliberate bug).
    #[doc(hidden)]
    pub fn release_unpersisted_for_fault_injection(
        self,
    ) -> (Vec<(Key, AcceptorState)>, Vec<Envelope>) {
        let writes = (self.writes.into_iter())
            .map(|(key, _, state)| (key, state))
            .collect();
        (writes, self.sealed)
    }

    /// A batch of the states [`PersistBatch::release_unpersisted_for_fault_injection`] took
    /// out, with no replies, to be persisted late. Only for the same harness tests.
    #[doc(hidden)]
    pub fn writes_only_for_fault_injection(writes: Vec<(Key, AcceptorState)>) -> PersistBatch {
        PersistBatch {
            writes: (writes.into_iter())
                .map(|(key, state)| (key, Location::UNKNOWN, state))
                .collect(),
            ..PersistBatch::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::ids::testing::attempt;
    use crate::placement::StageId;
    use std::sync::Arc;

    use logless_commands::value::{Data, Register};

    use super::*;
    use crate::ids::{ReqId, Round};
    use crate::message::PrepareKind;

    /// Every kind of decision: reads and writes of phase 1, PAXOS_PREP above and below the
    /// acknowledged round, votes above and below it, with and without a LEARNED.
    fn messages(key: &Key) -> Vec<Message> {
        let round = |n, node, seq| Round {
            n,
            id: attempt(node, seq),
        };
        let value = Arc::new(Register {
            data: Data::Int(7),
            expires_at_ms: None,
            fence: 0,
        });
        let vote = |r: Round, req_cur, req_prev| Message::Vote {
            key: key.clone(),
            round: r,
            value: value.clone(),
            req_cur,
            req_prev,
            stage: StageId::NONE,
        };
        vec![
            Message::Prepare {
                key: key.clone(),
                kind: PrepareKind::Read,
                attempt: attempt(1, 1),
                known_voted: Round::BOTTOM,
                stage: StageId::NONE,
            },
            Message::Prepare {
                key: key.clone(),
                kind: PrepareKind::Write,
                attempt: attempt(1, 2),
                known_voted: Round::BOTTOM,
                stage: StageId::NONE,
            },
            Message::PaxosPrep {
                key: key.clone(),
                round: round(0, 2, 1),
                known_voted: Round::BOTTOM,
                stage: StageId::NONE,
            },
            Message::PaxosPrep {
                key: key.clone(),
                round: round(9, 2, 2),
                known_voted: Round::BOTTOM,
                stage: StageId::NONE,
            },
            vote(round(1, 1, 3), None, None),
            vote(
                round(9, 2, 2),
                Some(ReqId::new(attempt(2, 2)).unwrap()),
                Some(ReqId::new(attempt(1, 3)).unwrap()),
            ),
            vote(
                round(10, 2, 2),
                Some(ReqId::new(attempt(2, 4)).unwrap()),
                Some(ReqId::new(attempt(2, 2)).unwrap()),
            ),
        ]
    }

    #[test]
    fn deciding_into_the_batch_adds_what_the_pure_step_holds() {
        let key = Key::new("k".to_string());
        let mut batch = PersistBatch::new();
        let mut state = AcceptorState::default();
        for message in messages(&key) {
            let step = acceptor::on_acceptor_message(&state, NodeId(1), &message);
            let (writes, sealed) = (batch.writes.len(), batch.sealed.len());
            let decided = batch.decide(&key, &state, NodeId(1), &message).cloned();
            assert_eq!(decided, step.next, "{message:?}");
            let written: Vec<(&Key, &AcceptorState)> = batch.writes[writes..]
                .iter()
                .map(|(k, _, s)| (k, s))
                .collect();
            let expected: Vec<(&Key, &AcceptorState)> =
                step.next.iter().map(|next| (&key, next)).collect();
            assert_eq!(written, expected, "{message:?}");
            assert!(
                batch.sealed[sealed..].iter().eq(step.replies()),
                "{message:?}"
            );
            if let Some(next) = step.next {
                state = next;
            }
        }
        // The write PREPARE, the higher PAXOS_PREP and the two higher votes changed the state;
        // every message was answered, and the first of those votes told node 1 with a LEARNED.
        assert_eq!(batch.writes_len(), 4);
        assert_eq!(batch.sealed.len(), 8);
    }

    /// Records what a store is asked to do, in order.
    #[derive(Default)]
    struct Recorder(Vec<String>);

    impl AcceptorStore for Recorder {
        type Error = std::convert::Infallible;
        fn write(&mut self, key: &Key, _: &AcceptorState) -> Result<(), Self::Error> {
            self.0.push(format!("write {key:?}"));
            Ok(())
        }
        fn flush(&mut self) -> Result<(), Self::Error> {
            self.0.push("flush".into());
            Ok(())
        }
        fn write_round_floor(&mut self, floor: Round) -> Result<(), Self::Error> {
            self.0.push(format!("floor {}", floor.n));
            Ok(())
        }
        fn remove(&mut self, key: &Key) -> Result<(), Self::Error> {
            self.0.push(format!("remove {key:?}"));
            Ok(())
        }
    }

    /// A crash after any prefix of a commit leaves no register forgotten without its floor:
    /// the floor is flushed before the first removal. A write of a register before its
    /// removal in the batch is superseded; one after it is a new register's and stays.
    #[test]
    fn a_batch_flushes_the_round_floor_before_it_forgets_anything() {
        let (gone, kept) = (Key::new("gone"), Key::new("kept"));
        let state = AcceptorState::default();
        let mut batch = PersistBatch::new();
        let vote = |key: &Key| Message::Vote {
            key: key.clone(),
            round: Round::BOTTOM,
            value: Arc::new(Register::default()),
            req_cur: None,
            req_prev: None,
            stage: StageId::NONE,
        };
        let _ = batch.decide(&gone, &state, NodeId(1), &vote(&gone));
        let floor = Round {
            n: 9,
            id: attempt(1, 1),
        };
        batch.remove(&gone, Location::UNKNOWN, floor);
        let _ = batch.decide(&kept, &state, NodeId(1), &vote(&kept));
        assert_eq!(batch.removals_len(), 1);
        assert_eq!(batch.writes_len(), 1);
        let mut store = Recorder::default();
        let Ok(released) = batch.commit(&mut store);
        assert_eq!(released.len(), 2, "both VOTEDs, after everything");
        assert_eq!(
            store.0,
            [
                "floor 9",
                "flush",
                "remove \"gone\"",
                "write \"kept\"",
                "flush"
            ]
        );
    }

    /// A store with room for the registers in `room` only.
    struct Cramped {
        room: Vec<Key>,
        written: Vec<Key>,
    }

    #[derive(Debug, PartialEq)]
    enum CrampedError {
        Full,
    }

    impl std::fmt::Display for CrampedError {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("full")
        }
    }

    impl std::error::Error for CrampedError {}

    impl AcceptorStore for Cramped {
        type Error = CrampedError;
        fn write(&mut self, key: &Key, _: &AcceptorState) -> Result<(), CrampedError> {
            if !self.room.contains(key) {
                return Err(CrampedError::Full);
            }
            self.written.push(key.clone());
            Ok(())
        }
        fn flush(&mut self) -> Result<(), CrampedError> {
            Ok(())
        }
        fn write_round_floor(&mut self, _: Round) -> Result<(), CrampedError> {
            Err(CrampedError::Full)
        }
        fn remove(&mut self, _: &Key) -> Result<(), CrampedError> {
            panic!("no removal without its floor")
        }
        fn is_full(error: &CrampedError) -> bool {
            *error == CrampedError::Full
        }
    }

    /// A write refused for space withholds every reply about its register, and only those: each
    /// ACK, VOTED or NACK becomes a FULL naming its round, to the same proposer; the others are
    /// flushed and released. A refused floor leaves the removals out.
    #[test]
    fn a_write_refused_for_space_withholds_its_registers_replies_only() {
        let (old, new) = (Key::new("old"), Key::new("new"));
        let mut batch = PersistBatch::new();
        let mut states = [AcceptorState::default(), AcceptorState::default()];
        for message in messages(&old).iter().chain(&messages(&new)) {
            let slot = usize::from(message.key() == &new);
            if let Some(next) = batch.decide(message.key(), &states[slot], NodeId(1), message) {
                states[slot] = next.clone();
            }
        }
        batch.remove(&Key::new("gone"), Location::UNKNOWN, Round::BOTTOM);
        let mut store = Cramped {
            room: vec![old.clone()],
            written: Vec::new(),
        };
        let roomy = batch.clone().commit_or_refuse(&mut Cramped {
            room: vec![old.clone(), new.clone()],
            written: Vec::new(),
        });
        let committed = batch.commit_or_refuse(&mut store).unwrap();
        assert_eq!(committed.refused, vec![new.clone()]);
        assert!(committed.floor_refused);
        assert_eq!(store.written.len(), 4, "the old register's writes");
        let (of_old, of_new): (Vec<_>, Vec<_>) =
            (committed.released.into_iter()).partition(|e| e.message.key() == &old);
        assert_eq!(of_old.len(), 8, "the old register's replies");
        let withheld: Vec<Envelope> = (roomy.unwrap().released.into_iter())
            .filter(|e| e.message.key() == &new)
            .filter_map(|e| {
                let round = withheld_round(&e.message)?;
                let key = new.clone();
                Some(Envelope {
                    to: e.to,
                    message: Message::Full { key, round },
                })
            })
            .collect();
        assert!(!withheld.is_empty());
        assert_eq!(of_new, withheld, "a FULL for each reply withheld");
    }
}
