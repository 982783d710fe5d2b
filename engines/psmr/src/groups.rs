//! The `k + 1` groups of a replica: one Multi-Paxos log per group, run side by side.
//!
//! Each group (`g_0 … g_{k-1}`, `g_all`) is an independent
//! [`Replica`] of the log engine over a [`Stream`]: its
//! own views, leader, instances, votes and messages. What the groups share is the replica's
//! durable store and its network, so:
//!
//! * **Messages** travel in a [`GroupEnvelope`], which names the group; a message for a group
//!   this replica does not run is dropped (network input never panics).
//! * **Persist before send** holds across the groups: a step's [`Ready`] holds every group's
//!   ready, and [`Ready::commit`] writes the records of all of them, flushes once (one group
//!   commit for all the groups a step touched), and only then releases any message.
//! * **Leaders are spread**: group `g` orders the replicas rotated by its index (see
//!   [`Config::group_config`]), so with `n` replicas the first leaders of the groups cycle
//!   over the replicas, and so do the leaders after a failure.
//! * **Skips**: the replica asks a group it leads for a skip ([`Groups::skip_if_due`]) when one
//!   of its merges waits on that group; the skip is a request of [`SKIP_CLIENT`] with no
//!   command, whose batch raises the stream's stamp to at least the stamp the merge needs
//!   (whatever this replica's clock says) and carries nothing to execute (see
//!   [`crate::merge`] for why the merge needs it). The skip's sequence number follows the last
//!   skip the group's client table holds, so a skip proposed twice (by two leaders) is executed
//!   once. A group has at most one skip of this replica's undecided at a time: the next goes
//!   as soon as the last is decided if a merge still waits (not a timer's tick later), and an
//!   undecided one is proposed again after [`Config::skip_interval_ms`] (lost with a view).
//!   None goes while no merge waits on the group, so an idle cluster sends nothing for skips.
//!
//! Client replies of the groups' logs are dropped: in P-SMR a command is answered when a worker
//! executes it, after the merge, not when its log decides it.
use logless_multipaxos::ids::{Epoch, Instance, NodeId, RequestSeq};
use logless_multipaxos::message::{Message, Request};
use std::collections::BTreeMap;

use logless_multipaxos::persist::{Durable, LogStore, Record};
use logless_multipaxos::replica::{Replica, Status};
use logless_service::Group;
use thiserror::Error;

use crate::config::Config;
use crate::cut::{DurableCut, SNAPSHOT_CLIENT};
use crate::stream::{DeliveredBatch, Stream, SKIP_CLIENT};

/// A message of one group's log, with its destination.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct GroupEnvelope {
    /// The destination replica.
    pub to: NodeId,
    /// The group whose log the message belongs to.
    pub group: Group,
    /// The message.
    pub message: Message,
}

/// A request the groups refuse.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum RequestError {
    /// The request names a group this replica does not run.
    #[error("no group {0:?} here")]
    NoSuchGroup(Group),
    /// The replica rejoins after a lost disk and some group has not recovered yet (see
    /// [`crate::replica::Replica::start_rejoin`]): the request is not taken, and a retry is
    /// safe.
    #[error("this replica is rejoining after a lost disk and has not caught up with its peers")]
    Rejoining,
    /// The request claims a client reserved for skips or snapshots.
    #[error(
        "client ids {} and {} are reserved for skips and snapshots",
        SKIP_CLIENT.0,
        SNAPSHOT_CLIENT.0
    )]
    ReservedClient,
}

/// The durable home of every group's log: one store, written per group, flushed once.
pub trait GroupStore {
    /// The store's error; after one, the store refuses further work.
    type Error: std::error::Error;
    /// Stages one record of `group`'s log.
    fn write(&mut self, group: Group, record: &Record) -> Result<(), Self::Error>;
    /// Makes every staged record of every group durable.
    fn flush(&mut self) -> Result<(), Self::Error>;
}

/// What a commit released: the messages to send, in the order produced.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Released {
    /// Messages, group by group in group order, each group's in the order produced.
    pub messages: Vec<GroupEnvelope>,
}

/// Every group's durable records, and the messages sealed behind them.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
#[must_use = "messages are released only by committing"]
pub struct Ready {
    groups: Vec<(Group, logless_multipaxos::persist::Ready)>,
}

impl Ready {
    /// Whether there is nothing to write or send.
    pub fn is_empty(&self) -> bool {
        self.groups.iter().all(|(_, ready)| ready.is_empty())
    }

    /// The records to write, per group.
    pub fn records(&self) -> impl Iterator<Item = (Group, &Record)> {
        self.groups
            .iter()
            .flat_map(|(group, ready)| ready.records().iter().map(move |r| (*group, r)))
    }

    /// Writes every group's records, flushes once if anything was written, then releases the
    /// messages. On an error nothing is released: the replica must stop (fail-stop).
    pub fn commit<S: GroupStore>(self, store: &mut S) -> Result<Released, S::Error> {
        let written = self.records().next().is_some();
        let mut messages = Vec::new();
        for (group, ready) in self.groups {
            let mut writer = GroupWriter { store, group };
            let released = ready.commit(&mut writer)?;
            messages.extend(released.messages.into_iter().map(|envelope| GroupEnvelope {
                to: envelope.to,
                group,
                message: envelope.message,
            }));
        }
        if written {
            store.flush()?;
        }
        Ok(Released { messages })
    }

    /// What a crash before the commit still let out (the log engine's deliberate bugs only).
    pub fn abandon(self) -> Vec<GroupEnvelope> {
        self.groups
            .into_iter()
            .flat_map(|(group, ready)| {
                ready.abandon().into_iter().map(move |e| GroupEnvelope {
                    to: e.to,
                    group,
                    message: e.message,
                })
            })
            .collect()
    }
}

/// One group's view of the shared store. Its flush does nothing: [`Ready::commit`] flushes
/// the shared store once every group's records are written, before it releases any message.
struct GroupWriter<'a, S> {
    store: &'a mut S,
    group: Group,
}

impl<S: GroupStore> LogStore for GroupWriter<'_, S> {
    type Error = S::Error;

    fn write(&mut self, record: &Record) -> Result<(), Self::Error> {
        self.store.write(self.group, record)
    }

    fn flush(&mut self) -> Result<(), Self::Error> {
        Ok(())
    }
}

/// A group's log, and when this replica last proposed a skip in it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct GroupLog {
    group: Group,
    replica: Replica<Stream>,
    /// When this replica last proposed a skip in the group, and its number.
    skipped_ms: Option<u64>,
    skip_proposed: RequestSeq,
}

/// Counters of the groups.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Stats {
    /// Skips this replica proposed as a group's leader.
    pub skips_proposed: u64,
    /// Messages dropped because they named a group this replica does not run.
    pub unknown_group_messages: u64,
}

/// How much one group holds: its log's extent and the batches its stream retains.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct GroupSize {
    /// The group.
    pub group: Group,
    /// The first instance its log holds (every one below is truncated).
    pub log_start: Instance,
    /// The first instance its log has not executed.
    pub executed_below: Instance,
    /// The batches its stream retains for the durable cut (see [`crate::stream`]).
    pub retained_batches: usize,
    /// Their size in bytes.
    pub retained_bytes: u64,
    /// The group's own snapshots taken (each truncates its log below the previous one).
    pub snapshots_taken: u64,
}

/// The groups of one replica: `k + 1` under P-SMR, one under sP-SMR and SMR, none without
/// replication.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Groups {
    config: Config,
    logs: Vec<GroupLog>,
    delivered: Vec<(Group, DeliveredBatch)>,
    stats: Stats,
}

impl Groups {
    /// A replica's groups that have never run: `g_0 … g_{k-1}` and `g_all` under P-SMR, the
    /// one stream `g_all` under sP-SMR and SMR, none without replication.
    pub fn new(config: Config, now_ms: u64) -> Groups {
        Groups::recover(config, &BTreeMap::new(), now_ms)
    }

    /// A replica's groups restarting from their durable logs (a group missing from `durable`
    /// starts empty): each group's stream is restored from the group's own snapshot (the
    /// batches since the durable cut, see [`crate::stream`]) and its log after it is executed
    /// again, so every batch from the durable cut on is delivered again, in log order.
    pub fn recover(config: Config, durable: &BTreeMap<Group, Durable>, now_ms: u64) -> Groups {
        let empty = Durable::default();
        let logs: Vec<GroupLog> = config
            .mode
            .groups(config.workers)
            .into_iter()
            .map(|group| {
                let durable = durable.get(&group).unwrap_or(&empty);
                let paxos = config.group_config(group);
                GroupLog {
                    group,
                    replica: Replica::recover(paxos, Stream::default(), durable, now_ms),
                    skipped_ms: None,
                    skip_proposed: RequestSeq(0),
                }
            })
            .collect();
        let mut groups = Groups {
            config,
            logs,
            delivered: Vec::new(),
            stats: Stats::default(),
        };
        for index in 0..groups.logs.len() {
            groups.collect(index);
        }
        groups
    }

    /// The configuration.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// The log of `group`, to inspect, if this replica runs it.
    pub fn replica(&self, group: Group) -> Option<&Replica<Stream>> {
        Some(&self.logs[self.index(group)?].replica)
    }

    /// The counters.
    pub fn stats(&self) -> &Stats {
        &self.stats
    }

    /// A client request C-G sent to `group`.
    pub fn handle_request(
        &mut self,
        now_ms: u64,
        group: Group,
        request: Request,
    ) -> Result<(), RequestError> {
        if request.client == SKIP_CLIENT || request.client == SNAPSHOT_CLIENT {
            return Err(RequestError::ReservedClient);
        }
        let index = self.index(group).ok_or(RequestError::NoSuchGroup(group))?;
        self.logs[index].replica.handle_request(now_ms, request);
        self.collect(index);
        Ok(())
    }

    /// A message of `group`'s log from replica `from`; one for a group this replica does not
    /// run is dropped.
    pub fn handle_message(&mut self, now_ms: u64, from: NodeId, group: Group, message: Message) {
        let Some(index) = self.index(group) else {
            self.stats.unknown_group_messages += 1;
            return;
        };
        self.logs[index]
            .replica
            .handle_message(now_ms, from, message);
        self.collect(index);
    }

    /// The passing of time for every group.
    pub fn tick(&mut self, now_ms: u64) {
        for index in 0..self.logs.len() {
            self.logs[index].replica.tick(now_ms);
            self.collect(index);
        }
    }

    /// Makes every group rejoin after a lost disk, in attempt `attempt`: each group's log runs
    /// the log engine's rejoin ([`Replica::start_rejoin`]: fence, view, catch-up).
    pub fn start_rejoin(&mut self, now_ms: u64, attempt: Epoch) {
        for index in 0..self.logs.len() {
            self.logs[index].replica.start_rejoin(now_ms, attempt);
            self.collect(index);
        }
    }

    /// The groups whose log does not take part yet (a rejoin not completed).
    pub fn not_serving(&self) -> impl Iterator<Item = Group> + '_ {
        (self.logs.iter())
            .filter(|log| log.replica.status() != Status::Serving)
            .map(|log| log.group)
    }

    /// Proposes a skip in `group`, for a merge that waits on it for a batch stamped at least
    /// `stamp_ms`, if this replica leads the group and its last skip there is decided (or was
    /// proposed a skip interval ago or more: it may have been lost). The skip is stamped at
    /// least `stamp_ms` even if this replica's clock is behind (see [`crate::merge`]). Returns
    /// whether it proposed one.
    pub fn skip_if_due(&mut self, now_ms: u64, group: Group, stamp_ms: u64) -> bool {
        let Some(index) = self.index(group) else {
            return false;
        };
        let log = &self.logs[index];
        let decided = (log.replica.client_table().get(&SKIP_CLIENT))
            .is_some_and(|(seq, _)| *seq >= log.skip_proposed);
        let due = decided
            || log.skipped_ms.is_none_or(|skipped_ms| {
                now_ms >= skipped_ms.saturating_add(self.config.skip_interval_ms)
            });
        if !(due && log.replica.is_leader()) {
            return false;
        }
        self.propose_skip(now_ms, index, stamp_ms);
        true
    }

    /// Proposes a snapshot request in `g_all` (see [`crate::cut`]), numbered one past the last
    /// one `g_all`'s client table holds, so that two replicas proposing one each at the same
    /// point execute it once. Returns whether this replica runs `g_all`.
    pub fn propose_snapshot(&mut self, now_ms: u64) -> bool {
        let Some(index) = self.index(Group::All) else {
            return false;
        };
        let log = &mut self.logs[index];
        let last = log
            .replica
            .client_table()
            .get(&SNAPSHOT_CLIENT)
            .map_or(0, |(seq, _)| seq.0);
        let request = Request {
            client: SNAPSHOT_CLIENT,
            seq: RequestSeq(last + 1),
            payload: bytes::Bytes::new(),
        };
        log.replica.handle_request(now_ms, request);
        self.collect(index);
        true
    }

    /// Whether this replica leads `group`'s log now.
    pub fn leads(&self, group: Group) -> bool {
        self.index(group)
            .is_some_and(|index| self.logs[index].replica.is_leader())
    }

    /// `durable` is written: each group's stream carries it and drops the batches below the
    /// group's position (`extra` instances past it, for the deliberate bug
    /// [`crate::cut::CutBugs::release_past_cut`]); a stream that carries a newer cut keeps it
    /// (see [`Stream::release`]).
    pub fn release(&mut self, durable: &DurableCut, extra: u64) {
        for log in &mut self.logs {
            let position = durable.cut.truncate_below(log.group).0;
            let below = Instance(position.saturating_add(extra));
            log.replica.state_machine_mut().release(durable, below);
        }
    }

    /// Each group's stream's cut, where it carries one (see [`crate::stream`]).
    pub fn cuts(&self) -> impl Iterator<Item = (Group, &DurableCut)> {
        (self.logs.iter()).filter_map(|log| Some((log.group, log.replica.state_machine().cut()?)))
    }

    /// Every group hands all its retained batches on again, in log order; what was delivered
    /// and not taken yet comes again with them.
    pub fn rewind(&mut self) {
        self.delivered.clear();
        for index in 0..self.logs.len() {
            self.logs[index].replica.state_machine_mut().rewind();
            self.collect(index);
        }
    }

    /// Each group's log and stream, as INFO and tests measure them.
    pub fn sizes(&self) -> Vec<GroupSize> {
        (self.logs.iter())
            .map(|log| {
                let (retained_batches, retained_bytes) = log.replica.state_machine().retained();
                GroupSize {
                    group: log.group,
                    log_start: log.replica.log_start(),
                    executed_below: log.replica.executed_below(),
                    retained_batches,
                    retained_bytes,
                    snapshots_taken: log.replica.stats().snapshots_taken,
                }
            })
            .collect()
    }

    /// Takes the batches the groups delivered since the last call: each group's in log order.
    pub fn take_delivered(&mut self) -> Vec<(Group, DeliveredBatch)> {
        std::mem::take(&mut self.delivered)
    }

    /// Takes everything the groups produced since the last call: commit it before sending.
    pub fn take_ready(&mut self) -> Ready {
        Ready {
            groups: self
                .logs
                .iter_mut()
                .map(|log| (log.group, log.replica.take_ready()))
                .filter(|(_, ready)| !ready.is_empty())
                .collect(),
        }
    }

    fn index(&self, group: Group) -> Option<usize> {
        self.logs.iter().position(|log| log.group == group)
    }

    fn propose_skip(&mut self, now_ms: u64, index: usize, stamp_ms: u64) {
        let log = &mut self.logs[index];
        log.replica.raise_stamp_floor(stamp_ms);
        let last = log
            .replica
            .client_table()
            .get(&SKIP_CLIENT)
            .map_or(0, |(seq, _)| seq.0);
        let skip = Request {
            client: SKIP_CLIENT,
            seq: RequestSeq(last + 1),
            payload: bytes::Bytes::new(),
        };
        log.skip_proposed = skip.seq;
        log.replica.handle_request(now_ms, skip);
        log.skipped_ms = Some(now_ms);
        self.stats.skips_proposed += 1;
        self.collect(index);
    }

    /// Moves what group `index`'s log delivered to the outbox.
    fn collect(&mut self, index: usize) {
        let log = &mut self.logs[index];
        let batches = log.replica.state_machine_mut().take();
        self.delivered
            .extend(batches.into_iter().map(|batch| (log.group, batch)));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::MemGroupStore;
    use logless_multipaxos::ids::{ClientId, View};
    use logless_multipaxos::testing::durable_before_send;
    use logless_service::WorkerId;

    const G0: Group = Group::Worker(WorkerId(0));
    const G2: Group = Group::Worker(WorkerId(2));

    /// Replica 1 of two, with three workers: it leads `g_0` and `g_2` (even indexes).
    fn groups() -> Groups {
        Groups::new(Config::new(vec![NodeId(1), NodeId(2)], NodeId(1), 3), 0)
    }

    /// A store whose flush fails.
    struct BrokenDisk;

    #[derive(Debug, Error)]
    #[error("the disk is gone")]
    struct Gone;

    impl GroupStore for BrokenDisk {
        type Error = Gone;
        fn write(&mut self, _: Group, _: &Record) -> Result<(), Gone> {
            Ok(())
        }
        fn flush(&mut self) -> Result<(), Gone> {
            Err(Gone)
        }
    }

    #[test]
    fn one_commit_writes_every_groups_records_and_flushes_once_before_sending() {
        let mut groups = groups();
        let mut store = MemGroupStore::default();
        groups.tick(0);
        let Ok(prepares) = groups.take_ready().commit(&mut store);
        let sent: Vec<(NodeId, Group)> =
            prepares.messages.iter().map(|e| (e.to, e.group)).collect();
        assert_eq!(
            sent,
            [(NodeId(2), G0), (NodeId(2), G2)],
            "phase 1 of view 0"
        );
        assert_eq!(store.flushes(), 0, "view 0 needs no write");
        for (group, client) in [(G0, 1), (G2, 2)] {
            let promise = Message::Promise {
                view: View(0),
                log_start: logless_multipaxos::ids::Instance(0),
                entries: Vec::new(),
            };
            groups.handle_message(0, NodeId(2), group, promise);
            assert!(groups.replica(group).unwrap().is_leader());
            let request = Request {
                client: ClientId(client),
                seq: RequestSeq(1),
                payload: bytes::Bytes::from_static(b"x"),
            };
            groups.handle_request(0, group, request).unwrap();
        }
        groups.tick(1);
        let ready = groups.take_ready();
        let written: Vec<Group> = ready.records().map(|(group, _)| group).collect();
        assert_eq!(written, [G0, G2], "a vote in each group");
        let Ok(released) = ready.clone().commit(&mut store);
        assert_eq!(store.flushes(), 1, "one flush for both groups");
        let proposes: Vec<(NodeId, Group)> = (released.messages.iter())
            .filter(|e| matches!(e.message, Message::Propose { .. }))
            .map(|e| (e.to, e.group))
            .collect();
        assert_eq!(proposes, [(NodeId(2), G0), (NodeId(2), G2)]);
        for envelope in &released.messages {
            let durable = store.group(envelope.group).expect("written").durable();
            assert!(durable_before_send(durable, &envelope.message));
        }
        assert!(
            ready.commit(&mut BrokenDisk).is_err(),
            "nothing leaves a failed flush"
        );
    }

    #[test]
    fn messages_for_groups_not_run_here_are_dropped() {
        let mut groups = groups();
        let alive = Message::Alive {
            view: View(5),
            first_undecided: logless_multipaxos::ids::Instance(0),
        };
        groups.handle_message(0, NodeId(2), Group::Worker(WorkerId(3)), alive);
        assert_eq!(groups.stats().unknown_group_messages, 1);
        assert!(groups.take_ready().is_empty());
    }

    #[test]
    fn requests_for_unknown_groups_or_as_the_skip_client_are_refused() {
        let mut groups = groups();
        let request = |client| Request {
            client,
            seq: RequestSeq(1),
            payload: bytes::Bytes::from_static(b"x"),
        };
        assert_eq!(
            groups.handle_request(0, G0, request(SKIP_CLIENT)),
            Err(RequestError::ReservedClient)
        );
        let nine = Group::Worker(WorkerId(9));
        let refused = groups.handle_request(0, nine, request(ClientId(1)));
        assert_eq!(refused, Err(RequestError::NoSuchGroup(nine)));
        assert_eq!(refused.unwrap_err().to_string(), "no group g9 here");
    }
}
