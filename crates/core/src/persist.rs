//! "Persist before reply", enforced by types.
//!
//! An acceptor's ACK and VOTED are promises about its state; a reply that leaves before that
//! state is durable can be contradicted by a crash. Acceptor replies therefore go into a
//! [`PersistBatch`] together with the states they depend on, and the only way to get them out is
//! [`PersistBatch::commit`], which writes every state through an [`AcceptorStore`], flushes once
//! (group commit), and only then hands the replies back. Replies whose acceptor state did not
//! change still wait for the batch: they may reveal state changed by an earlier message of the
//! same batch, which is not durable before the flush either.
use crate::acceptor::{AcceptorState, AcceptorStep};
use crate::ids::Key;
use crate::message::Envelope;
use crate::proposer::room_for_next;

/// The durable home of acceptor states, implemented by the storage layer (or a test double).
pub trait AcceptorStore {
    /// The store's error; after one, the store refuses further work.
    type Error: std::error::Error;
    /// Stages the new state of one register.
    fn write(&mut self, key: &Key, state: &AcceptorState) -> Result<(), Self::Error>;
    /// Makes every staged write durable (per the store's durability mode).
    fn flush(&mut self) -> Result<(), Self::Error>;
}

/// Acceptor state changes and the replies that must wait for them.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
#[must_use = "acceptor replies are released only by committing the batch"]
pub struct PersistBatch {
    writes: Vec<(Key, AcceptorState)>,
    sealed: Vec<Envelope>,
}

impl PersistBatch {
    /// An empty batch.
    pub fn new() -> PersistBatch {
        PersistBatch::default()
    }

    /// Adds an acceptor's state change (if any) and the replies that depend on it.
    #[inline(always)]
    pub fn add(&mut self, key: &Key, step: AcceptorStep) {
        if let Some(state) = step.next {
            self.writes.push((key.clone(), state));
        }
        if let Some(learned) = step.learned {
            self.sealed.push(learned);
        }
        self.sealed.push(step.reply);
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
        };
        std::mem::replace(self, next)
    }

    /// Whether there is nothing to write and nothing to release.
    pub fn is_empty(&self) -> bool {
        self.writes.is_empty() && self.sealed.is_empty()
    }

    /// The number of state writes in the batch.
    pub fn writes_len(&self) -> usize {
        self.writes.len()
    }

    /// Writes every state, flushes once if anything was written, then releases the replies.
    /// On an error nothing is released: the node must stop voting (fail-stop).
    pub fn commit<S: AcceptorStore>(self, store: &mut S) -> Result<Vec<Envelope>, S::Error> {
        if !self.writes.is_empty() {
            for (key, state) in &self.writes {
                store.write(key, state)?;
            }
            store.flush()?;
        }
        Ok(self.sealed)
    }

    /// Releases the replies without persisting anything. Only for the harness tests that must
    /// show that a reply sent before its state is durable is caught (a deliberate bug).
    #[doc(hidden)]
    pub fn release_unpersisted_for_fault_injection(
        self,
    ) -> (Vec<(Key, AcceptorState)>, Vec<Envelope>) {
        (self.writes, self.sealed)
    }

    /// A batch of the states [`PersistBatch::release_unpersisted_for_fault_injection`] took
    /// out, with no replies, to be persisted late. Only for the same harness tests.
    #[doc(hidden)]
    pub fn writes_only_for_fault_injection(writes: Vec<(Key, AcceptorState)>) -> PersistBatch {
        PersistBatch {
            writes,
            sealed: Vec::new(),
        }
    }
}
