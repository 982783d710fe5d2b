//! Doubles for tests and simulations: a log store that keeps what a crash keeps, and a state
//! machine that remembers every request it executed.
use bytes::{Buf, BufMut, Bytes, BytesMut};

use crate::ids::{ClientId, Epoch, RequestSeq};
use crate::message::{Message, Request};
use crate::persist::{Durable, LogStore, Record};
use crate::state_machine::StateMachine;

/// A log store in memory: written records are staged, and only a flush makes them durable, so
/// a crash (dropping the staged records) leaves what a real store would keep.
#[derive(Clone, Debug, Default)]
pub struct MemStore {
    staged: Vec<Record>,
    durable: Durable,
    flushes: u64,
    epoch: Option<Epoch>,
}

impl MemStore {
    /// The durable state, to restart a replica from.
    pub fn durable(&self) -> &Durable {
        &self.durable
    }

    /// Forgets what was written and not flushed, as a crash does.
    pub fn crash(&mut self) {
        self.staged.clear();
    }

    /// How many flushes made records durable.
    pub fn flushes(&self) -> u64 {
        self.flushes
    }

    /// The last epoch written (EpochSS), which a crash keeps.
    pub fn epoch(&self) -> Option<Epoch> {
        self.epoch
    }
}

impl LogStore for MemStore {
    type Error = std::convert::Infallible;

    fn write(&mut self, record: &Record) -> Result<(), Self::Error> {
        self.staged.push(record.clone());
        Ok(())
    }

    fn flush(&mut self) -> Result<(), Self::Error> {
        for record in self.staged.drain(..) {
            self.durable.apply(&record);
        }
        self.flushes += 1;
        Ok(())
    }

    fn write_epoch(&mut self, epoch: Epoch) -> Result<(), Self::Error> {
        self.epoch = Some(epoch);
        Ok(())
    }
}

/// Whether the durable state of its sender holds what `message` promises (seed 002 §III-A):
/// the view of a Prepare or a Promise, the vote of a Propose or an Accept. Harnesses check it
/// for every message as it leaves.
pub fn durable_before_send(durable: &Durable, message: &Message) -> bool {
    match message {
        Message::Prepare { view, .. } | Message::Promise { view, .. } => durable.view >= *view,
        Message::Propose {
            view,
            instance,
            batch,
        } => durable
            .log
            .get(instance)
            .and_then(|e| e.vote.as_ref())
            .is_some_and(|(v, b)| v == view && b == batch),
        Message::Accept { view, instance } => durable
            .log
            .get(instance)
            .and_then(|e| e.vote.as_ref())
            .is_some_and(|(v, _)| v == view),
        Message::Alive { .. }
        | Message::CatchUpQuery { .. }
        | Message::CatchUpResponse { .. }
        | Message::Forward { .. }
        | Message::Recovery { .. }
        | Message::RecoveryAnswer { .. } => true,
    }
}

/// A state machine that appends every request it executes to a history and answers with the
/// history's length: two replicas agree exactly when their histories do, and a request executed
/// twice shows twice.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct History {
    executed: Vec<(ClientId, RequestSeq, Bytes)>,
}

impl History {
    /// The requests executed, in order.
    pub fn executed(&self) -> &[(ClientId, RequestSeq, Bytes)] {
        &self.executed
    }

    /// How many times `(client, seq)` was executed.
    pub fn times_executed(&self, client: ClientId, seq: RequestSeq) -> usize {
        self.executed
            .iter()
            .filter(|(c, s, _)| *c == client && *s == seq)
            .count()
    }
}

impl StateMachine for History {
    fn execute(&mut self, request: &Request) -> Bytes {
        self.executed
            .push((request.client, request.seq, request.payload.clone()));
        Bytes::from(self.executed.len().to_string())
    }

    fn snapshot(&self) -> Bytes {
        let mut out = BytesMut::new();
        for (client, seq, payload) in &self.executed {
            out.put_u64_le(client.0);
            out.put_u64_le(seq.0);
            out.put_u32_le(u32::try_from(payload.len()).expect("small payloads"));
            out.put_slice(payload);
        }
        out.freeze()
    }

    /// Restores a history; a malformed tail (from a corrupted snapshot) is dropped rather than
    /// panicking, so that tests may feed arbitrary snapshots.
    fn restore(&mut self, snapshot: &Bytes) {
        let mut bytes = snapshot.clone();
        self.executed.clear();
        while bytes.remaining() >= 8 + 8 + 4 {
            let client = ClientId(bytes.get_u64_le());
            let seq = RequestSeq(bytes.get_u64_le());
            let len = bytes.get_u32_le() as usize;
            if bytes.remaining() < len {
                return;
            }
            self.executed.push((client, seq, bytes.split_to(len)));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_history_survives_its_snapshot() {
        let mut history = History::default();
        for i in 0..3 {
            let reply = history.execute(&Request {
                client: ClientId(i),
                seq: RequestSeq(1),
                payload: Bytes::from(vec![i as u8; i as usize]),
            });
            assert_eq!(reply, Bytes::from((i + 1).to_string()));
        }
        let mut restored = History::default();
        restored.restore(&history.snapshot());
        assert_eq!(restored, history);
    }
}
