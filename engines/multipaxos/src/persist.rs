//! "Persist before send", enforced by types.
//!
//! Seed 002 §III-A: a follower writes its vote to stable storage before it sends its Accept, the
//! leader writes its own vote before it sends the Propose, and a replica writes every view higher
//! than any it knew before it uses it (in a Prepare or a Promise). Everything a step of a
//! [`Replica`](crate::replica::Replica) produces therefore goes into one [`Ready`]: the durable
//! [`Record`]s, and behind them, sealed, the messages and client replies. The only way to get
//! them out is [`Ready::commit`], which writes every record through a [`LogStore`], flushes once
//! (group commit) and only then releases the rest.
//!
//! Messages that promise nothing (a heartbeat) wait too. Sorting them out would save nothing
//! worth a second rule: a step with no records commits without a flush, and a message produced
//! with records may reveal state (a view, a decision) that is not durable before the flush. Client
//! replies wait for the same reason: a reply reports an execution, and the decision behind it
//! may rest on this replica's own vote, written in the same step.
use std::collections::BTreeMap;

use crate::ids::{Epoch, Instance, View};
use crate::message::{Batch, ClientReply, ClientTable, Envelope, Snapshot};
use crate::state_machine::DeferredState;

/// One durable write.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Record {
    /// The replica promised `View` (or adopted it): it takes part in no lower view.
    View(View),
    /// The replica voted for `batch` in `instance`, in `view`.
    Accepted {
        /// The instance.
        instance: Instance,
        /// The view of the vote.
        view: View,
        /// The batch voted for.
        batch: Batch,
    },
    /// `instance` decided `batch`. The batch is written even when the vote holds it, because a
    /// replica also learns decisions it never voted on (in a Promise or by catching up).
    Decided {
        /// The instance.
        instance: Instance,
        /// The decided batch.
        batch: Batch,
    },
    /// A snapshot, replacing the previous one.
    Snapshot(Snapshot),
    /// Every instance below `below` leaves the log (it is covered by a snapshot).
    Truncate {
        /// The new first instance of the log.
        below: Instance,
    },
}

/// The durable home of a replica's log, view and snapshot: the storage layer, or a test double.
pub trait LogStore {
    /// The store's error; after one, the store refuses further work.
    type Error: std::error::Error;
    /// Stages one record.
    fn write(&mut self, record: &Record) -> Result<(), Self::Error>;
    /// Makes every staged record durable.
    fn flush(&mut self) -> Result<(), Self::Error>;
    /// Makes `epoch` durable at once (written and flushed), in place of the last one: the one
    /// stable write of a replica under [`Recovery::Epoch`], at its start.
    ///
    /// # Panics
    /// The default panics: a store that keeps no epoch cannot serve a replica under EpochSS
    /// (a configuration error of the runtime).
    ///
    /// [`Recovery::Epoch`]: crate::config::Recovery::Epoch
    fn write_epoch(&mut self, epoch: Epoch) -> Result<(), Self::Error> {
        panic!(
            "this log store keeps no epoch, so it cannot serve EpochSS (asked to write {epoch:?})"
        )
    }
}

/// A periodic snapshot for the runtime to encode and write off its loop, under
/// [`Config::background_snapshots`](crate::config::Config::background_snapshots): the state
/// machine's consistent copy after executing every instance below `next_instance`, with the
/// metadata a [`Snapshot`] carries.
///
/// The runtime takes it out of the [`Ready`] ([`Ready::take_snapshot_job`]), starts it only
/// once the ready's records are durable (so the snapshot never covers a record that is not),
/// and reports the snapshot to the replica once it is durable
/// ([`Replica::snapshot_durable`](crate::replica::Replica::snapshot_durable)); only then does
/// the replica truncate its log. A crash before that leaves the previous snapshot and the log
/// behind it, as if the job had never been.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct SnapshotJob {
    /// The first instance the snapshot does not cover.
    pub next_instance: Instance,
    /// The execution stamp reached.
    pub stamp_ms: u64,
    /// The client table at that point.
    pub clients: ClientTable,
    /// The state machine's copy at that point.
    pub state: DeferredState,
}

impl SnapshotJob {
    /// The snapshot, its state encoded (the slow part: off the loop).
    pub fn encode(&self) -> Snapshot {
        Snapshot {
            next_instance: self.next_instance,
            stamp_ms: self.stamp_ms,
            state: self.state.encode(),
            clients: self.clients.clone(),
        }
    }
}

/// What a commit released: messages to send and replies to deliver.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Released {
    /// Messages, in the order produced.
    pub messages: Vec<Envelope>,
    /// Client replies, in the order produced.
    pub replies: Vec<ClientReply>,
}

/// Durable records and the messages and replies sealed behind them.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
#[must_use = "messages and replies are released only by committing"]
pub struct Ready {
    /// The epoch to write before anything else, in the first ready of a replica under EpochSS.
    epoch: Option<Epoch>,
    records: Vec<Record>,
    sealed: Vec<Envelope>,
    replies: Vec<ClientReply>,
    /// Messages that left before their records were written: empty unless the deliberate bug
    /// `accept_before_persist` is on.
    leaked: Vec<Envelope>,
    /// A snapshot to write off the loop ([`SnapshotJob`]).
    snapshot_job: Option<SnapshotJob>,
}

impl Ready {
    pub(crate) fn raise_epoch(&mut self, epoch: Epoch) {
        self.epoch = Some(epoch);
    }

    pub(crate) fn record(&mut self, record: Record) {
        self.records.push(record);
    }

    pub(crate) fn send(&mut self, envelope: Envelope) {
        self.sealed.push(envelope);
    }

    pub(crate) fn leak(&mut self, envelope: Envelope) {
        self.leaked.push(envelope);
    }

    pub(crate) fn reply(&mut self, reply: ClientReply) {
        self.replies.push(reply);
    }

    pub(crate) fn snapshot_later(&mut self, job: SnapshotJob) {
        debug_assert!(self.snapshot_job.is_none(), "one snapshot in flight");
        self.snapshot_job = Some(job);
    }

    /// The snapshot to encode and write off the loop, if the step asked for one. The runtime
    /// takes it before the commit and starts it once the commit succeeded (see
    /// [`SnapshotJob`]); one left in the ready is dropped with it, and the replica then waits
    /// for its durability forever (it takes no other periodic snapshot).
    pub fn take_snapshot_job(&mut self) -> Option<SnapshotJob> {
        self.snapshot_job.take()
    }

    /// Whether there is nothing to write, send or deliver.
    pub fn is_empty(&self) -> bool {
        self.epoch.is_none()
            && self.records.is_empty()
            && self.sealed.is_empty()
            && self.replies.is_empty()
            && self.leaked.is_empty()
            && self.snapshot_job.is_none()
    }

    /// The records to write, in order.
    pub fn records(&self) -> &[Record] {
        &self.records
    }

    /// The epoch to write, if this is the first ready of a replica under EpochSS.
    pub fn epoch(&self) -> Option<Epoch> {
        self.epoch
    }

    /// Writes the epoch if there is one ([`LogStore::write_epoch`]), then every record,
    /// flushes once if a record was written, then releases the messages and replies. On an
    /// error nothing is released: the replica must stop (fail-stop).
    pub fn commit<S: LogStore>(self, store: &mut S) -> Result<Released, S::Error> {
        if let Some(epoch) = self.epoch {
            store.write_epoch(epoch)?;
        }
        if !self.records.is_empty() {
            for record in &self.records {
                store.write(record)?;
            }
            store.flush()?;
        }
        let mut messages = self.leaked;
        messages.extend(self.sealed);
        Ok(Released {
            messages,
            replies: self.replies,
        })
    }

    /// The messages and replies without writing the records: what a runtime with the
    /// deliberate bug [`release_while_space_short`] lets out when the disk refused them. Never
    /// otherwise: nothing may leave before its records are durable.
    ///
    /// [`release_while_space_short`]: crate::config::InjectedBugs::release_while_space_short
    pub fn release_unwritten(self) -> Released {
        let mut messages = self.leaked;
        messages.extend(self.sealed);
        Released {
            messages,
            replies: self.replies,
        }
    }

    /// What a crash before the commit still let out: nothing, unless the deliberate bug
    /// `accept_before_persist` sent Accepts ahead of their votes. For harness tests that crash a
    /// replica between a step and its commit.
    pub fn abandon(self) -> Vec<Envelope> {
        self.leaked
    }
}

/// What a replica knows about one instance, durably.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct DurableEntry {
    /// Its last vote: the view and the batch.
    pub vote: Option<(View, Batch)>,
    /// The decided batch, once known.
    pub decided: Option<Batch>,
}

/// A replica's durable state, rebuilt by applying its records in order: what it restarts from
/// (seed 002's FullSS: the snapshot and the log on stable storage, replayed at start).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Durable {
    /// The highest view promised.
    pub view: View,
    /// The first instance still in the log.
    pub log_start: Instance,
    /// The log, from `log_start` on.
    pub log: BTreeMap<Instance, DurableEntry>,
    /// The last snapshot.
    pub snapshot: Option<Snapshot>,
}

impl Durable {
    /// Why `record` cannot follow this state, if it cannot: a view lower than one promised, a
    /// vote or decision below the log start, a second decision that differs from the first.
    /// A writer never produces one; a reader of a log from elsewhere checks with this.
    pub fn contradiction(&self, record: &Record) -> Option<&'static str> {
        match record {
            Record::View(view) if *view < self.view => Some("a promised view goes down"),
            Record::Accepted { instance, .. } if *instance < self.log_start => {
                Some("a vote below the log start")
            }
            Record::Decided { instance, .. } if *instance < self.log_start => {
                Some("a decision below the log start")
            }
            Record::Decided { instance, batch } => self
                .log
                .get(instance)
                .and_then(|e| e.decided.as_ref())
                .is_some_and(|decided| decided != batch)
                .then_some("an instance decided twice, differently"),
            _ => None,
        }
    }

    /// Applies one record.
    ///
    /// # Panics
    /// If the record breaks an invariant of the writer ([`Durable::contradiction`]).
    pub fn apply(&mut self, record: &Record) {
        if let Some(what) = self.contradiction(record) {
            panic!("{what}");
        }
        match record {
            Record::View(view) => self.view = *view,
            Record::Accepted {
                instance,
                view,
                batch,
            } => {
                let entry = self.log.entry(*instance).or_default();
                entry.vote = Some((*view, batch.clone()));
            }
            Record::Decided { instance, batch } => {
                let entry = self.log.entry(*instance).or_default();
                entry.decided = Some(batch.clone());
            }
            Record::Snapshot(snapshot) => self.snapshot = Some(snapshot.clone()),
            Record::Truncate { below } => {
                if *below > self.log_start {
                    self.log = self.log.split_off(below);
                    self.log_start = *below;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::NodeId;
    use crate::message::Message;
    use crate::testing::MemStore;

    fn accept() -> Envelope {
        Envelope {
            to: NodeId(2),
            message: Message::Accept {
                view: View(1),
                instance: Instance(0),
            },
        }
    }

    #[test]
    fn a_commit_writes_and_flushes_before_it_releases() {
        let mut ready = Ready::default();
        ready.record(Record::View(View(1)));
        ready.record(Record::Accepted {
            instance: Instance(0),
            view: View(1),
            batch: Batch::noop(),
        });
        ready.send(accept());
        let mut store = MemStore::default();
        let Ok(released) = ready.commit(&mut store);
        assert_eq!(released.messages, [accept()]);
        assert_eq!(store.flushes(), 1);
        assert_eq!(store.durable().view, View(1));
        assert_eq!(
            store.durable().log[&Instance(0)].vote,
            Some((View(1), Batch::noop()))
        );
    }

    #[test]
    fn a_commit_with_nothing_to_write_does_not_flush() {
        let mut ready = Ready::default();
        ready.send(accept());
        let mut store = MemStore::default();
        let Ok(released) = ready.commit(&mut store);
        assert_eq!(released.messages.len(), 1);
        assert_eq!(store.flushes(), 0);
    }

    #[test]
    fn an_abandoned_batch_lets_nothing_out_but_leaks() {
        let mut ready = Ready::default();
        ready.send(accept());
        assert!(ready.clone().abandon().is_empty());
        ready.leak(accept());
        assert_eq!(ready.abandon(), [accept()]);
    }

    #[test]
    fn truncation_drops_the_log_below_and_keeps_the_rest() {
        let mut durable = Durable::default();
        for i in 0..4 {
            durable.apply(&Record::Decided {
                instance: Instance(i),
                batch: Batch::noop(),
            });
        }
        durable.apply(&Record::Truncate { below: Instance(2) });
        assert_eq!(durable.log_start, Instance(2));
        assert_eq!(
            durable.log.keys().copied().collect::<Vec<_>>(),
            [Instance(2), Instance(3)]
        );
    }
}
