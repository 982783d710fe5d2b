//! The psmr engine's turn logic without a runtime: what [`crate::psmr_loop`] runs on tokio, as
//! [`crate::log_turn`] is for the log engine.
//!
//! One [`PsmrCore`] holds the replica's groups' durable logs ([`GroupLogs`], one
//! [`DurableLog`] per group), its client pool and the operations waiting for answers; the
//! replica's sans-IO core ([`logless_psmr::replica::Replica`]) and the service are in [`Shared`], with the worker
//! threads ([`crate::psmr_workers`]).
//!
//! # A turn, and persist before send (and before execute)
//! A turn queues everything that is waiting (client requests, peer messages); its end locks the
//! core once, hands it the queued inputs, ticks it, takes its ready and commits it (every
//! group's records written, each written log flushed), and only then unlocks the core and sends
//! the released messages. The commands the groups decided in the turn enter the plan under that
//! lock, so no worker can execute one before the turn's records are durable.
//!
//! # Clients, retries and the reply cache
//! Requests carry ids lent by a `ClientPool` and are retried with the same id and number
//! after [`crate::client_pool::RETRY_MS`] (forwarded to the group's leader as known then). A
//! group's client table makes a retry that was decided already not run twice, but it holds no
//! replies: in P-SMR a command is answered when a worker executes it, after the merge. So the
//! core keeps its own reply cache: the last reply executed for each client id it lent. A retry
//! due for a command whose reply is in the cache is answered from there, once, and not handed
//! to the replica again; so is one whose reply is in the engine's client tables
//! ([`logless_psmr::replica::Replica::answer_of`]: a command a cut installed from a peer
//! covers, which this replica never executed). The cache holds one entry per id, so it is as large as the pool.
//! Within one process the workers' report of an execution settles the operation at once (the
//! loop takes reports before it retries), so today the cache is a backstop: it answers a retry
//! only if a report arrived while the operation was still due, never twice.
//! Without replication (`no-rep`) nothing is retried: there is no log to lose a request on the
//! way, and no client table to keep a command handed in twice from running twice.
//!
//! # A full disk
//! As under the log engine ([`crate::log_turn`], "A full disk"): when a group's log has no
//! space for the turn's records ([`DurableLog`] keeps them in its backlog), the commit fails,
//! nothing of the turn leaves, and the replica is *paused* until the records are durable. It
//! takes no message (each is dropped, as lost) and is not ticked, so it proposes, votes and
//! skips nothing in any group: for its peers it is a crashed replica, and the groups it led
//! elect other leaders. A new client command is answered at once `MISCONF disk full: … for its
//! log; not applied` ([`Failure::LogFull`]); commands in flight are not retried meanwhile and
//! are answered "outcome unknown" past their deadline. Every
//! [`crate::log_turn::SPACE_PROBE_MS`] the groups' backlogs are flushed again;
//! once they are durable the replica goes on and hands every command in flight to itself again.
//!
//! The workers go on executing what the plan holds, including commands delivered in the turn
//! whose commit failed. With peers that is safe: a command is delivered once its instance is
//! decided by a majority, and the votes of that majority were durable before they counted (a
//! peer's Accept leaves after its vote is flushed, and this replica's own vote counts only
//! with a peer's, which answered a Propose sent after that vote was flushed), so the command's
//! place in the order is fixed whatever this replica's disk keeps. A replica without peers
//! decides on its own vote in the turn that writes it: there a full disk stops the node
//! (fail-stop, as any other error of a log), since its workers would otherwise execute and
//! answer commands whose only vote is not durable.
//!
//! # A rejoin after a lost disk
//! A replica started as rejoining ([`logless_psmr::replica::Replica::start_rejoin`], before
//! its core is built) runs the log engine's rejoin in every group, and merges and executes
//! nothing until every group is back. Meanwhile a client command is answered at once
//! `TRYAGAIN not applied` ([`Failure::NotApplied`], as under the log engine), and
//! [`PsmrCore::rejoining`] stays true; it turns false at the end of the turn whose commit made
//! the last group's recovery durable, and the loop then writes the directory's `rejoined`
//! marker ([`crate::psmr_loop::PsmrLoop::mark_rejoined_at`]). A turn whose commit failed
//! (a full disk) leaves it as it was.
//!
//! # Backlog
//! The workers' plan takes what the groups deliver, however fast; while any worker has more
//! than [`BACKLOG_MAX`] commands delivered and not executed, new client requests are refused
//! ("overloaded", not applied) instead of ordered, so that the backlog drains.
use std::collections::BTreeMap;
use std::sync::Arc;

use bytes::Bytes;
use logless_multipaxos::ids::{ClientId, NodeId, RequestSeq};
use logless_multipaxos::message::{Message, Request};
use logless_multipaxos::persist::{LogStore, Record};
use logless_psmr::config::Mode;
use logless_psmr::groups::GroupStore;
use logless_redis::session::Failure;
use logless_service::{Group, WorkerId};
use logless_storage::{Dir, FsDir, StoreError};
use rustc_hash::FxHashMap;
use serde::{Deserialize, Serialize};

use crate::client_pool::{ClientPool, Due};
use crate::durable_log::DurableLog;
use crate::log_turn::SPACE_PROBE_MS;
use crate::psmr_service::{NodeService, ServiceKind};
use crate::psmr_snapshot::{CutFile, StoredCut};
use crate::psmr_workers::{Executed, Shared};
use crate::turn::ShardClock;
use logless_psmr::cut::{Cut, DurableCut};

/// What a client command came to: the service's encoded reply, or why there is none.
pub type PsmrAnswer = Result<Bytes, Failure>;

/// The most commands a worker may have delivered and not executed before client requests are
/// refused.
pub const BACKLOG_MAX: usize = 64 * 1024;

/// The most operations in flight at once; more are answered "overloaded" at once.
pub const IN_FLIGHT_MAX: usize = crate::log_turn::IN_FLIGHT_MAX;

/// Where a turn's outputs go.
pub trait PsmrOutlet<R> {
    /// Group messages for `to`, in order (after the turn's flush).
    fn send(&mut self, to: NodeId, messages: Vec<(Group, Message)>);
    /// The answer to the operation submitted with `reply`.
    fn answer(&mut self, reply: R, answer: PsmrAnswer);
}

/// Every group's durable log: the [`GroupStore`] the replica commits through.
pub struct GroupLogs<D: Dir = FsDir> {
    logs: BTreeMap<Group, DurableLog<D>>,
    /// The groups written since the last flush.
    written: Vec<Group>,
}

impl<D: Dir> GroupLogs<D> {
    /// The groups' logs.
    pub fn new(logs: BTreeMap<Group, DurableLog<D>>) -> GroupLogs<D> {
        GroupLogs {
            logs,
            written: Vec::new(),
        }
    }

    /// Each group's log, to inspect (a simulation takes its directories' crash images).
    pub fn logs(&self) -> &BTreeMap<Group, DurableLog<D>> {
        &self.logs
    }

    /// Each group's log, to change (a simulation fills and frees their directories).
    pub fn logs_mut(&mut self) -> impl Iterator<Item = &mut DurableLog<D>> {
        self.logs.values_mut()
    }
}

impl<D: Dir> GroupStore for GroupLogs<D> {
    type Error = StoreError;

    fn write(&mut self, group: Group, record: &Record) -> Result<(), StoreError> {
        let log = self
            .logs
            .get_mut(&group)
            .unwrap_or_else(|| panic!("a record of {group:?}, which has no log here"));
        if !self.written.contains(&group) {
            self.written.push(group);
        }
        LogStore::write(log, record)
    }

    /// Flushes every group written since the last flush. A group whose flush fails stays to
    /// be flushed again, with those after it: a full disk leaves its records in its log's
    /// backlog until a later flush writes them.
    fn flush(&mut self) -> Result<(), StoreError> {
        while let Some(&group) = self.written.first() {
            if let Some(log) = self.logs.get_mut(&group) {
                LogStore::flush(log)?;
            }
            self.written.remove(0);
        }
        Ok(())
    }
}

/// The file in the psmr directory that records the mode and the threads its groups' logs were
/// written with.
pub const LAYOUT_FILE: &str = "layout";

/// Claims the psmr directory `dir` for `mode` with `threads` workers: C-G, the groups and so
/// every log depend on both, so a directory written with others is refused (the error says
/// how to start on it) rather than replayed into another state.
pub fn claim_layout(
    dir: &std::path::Path,
    mode: Mode,
    threads: u16,
    service: ServiceKind,
) -> Result<(), String> {
    // A directory of the B+-tree service written before the service was a choice has no
    // `service=`; the B+-tree's layout is still written so.
    let layout = match service {
        ServiceKind::Btree => format!("mode={mode} threads={threads}\n"),
        service => format!("mode={mode} threads={threads} service={service}\n"),
    };
    let path = dir.join(LAYOUT_FILE);
    match std::fs::read_to_string(&path) {
        Ok(found) if found == layout => return Ok(()),
        Ok(found) => {
            let found = found.trim();
            let field = |name: &str| {
                found
                    .split(' ')
                    .find_map(|word| word.strip_prefix(name))
                    .unwrap_or("?")
                    .to_owned()
            };
            let service = match field("service=").as_str() {
                "?" => "btree".to_owned(),
                service => service.to_owned(),
            };
            return Err(format!(
                "{} holds psmr groups written with {found}: start it with --psmr-mode {} \
                 --threads {} --service {service}, or give this layout another data directory",
                dir.display(),
                field("mode="),
                field("threads="),
            ));
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(format!("cannot read {}: {e}", path.display())),
    }
    let write = || -> std::io::Result<()> {
        std::fs::create_dir_all(dir)?;
        let temporary = dir.join(format!("{LAYOUT_FILE}.tmp"));
        std::fs::write(&temporary, &layout)?;
        std::fs::File::open(&temporary)?.sync_all()?;
        std::fs::rename(&temporary, &path)?;
        std::fs::File::open(dir)?.sync_all()
    };
    write().map_err(|e| format!("cannot write {}: {e}", path.display()))
}

/// One group's figures.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct GroupStatus {
    /// `g0`, `g1`, ... or `g_all`.
    pub group: String,
    /// The highest view this replica promised in the group.
    pub view: u64,
    /// That view's leader.
    pub leader: u16,
    /// Whether this replica leads the group.
    pub is_leader: bool,
    /// The next instance to execute (every one below is delivered).
    pub executed_below: u64,
    /// Batches this replica proposed in the group.
    pub batches_proposed: u64,
    /// The first instance the group's log holds (those below are truncated).
    #[serde(default)]
    pub log_start: u64,
    /// Batches the group's stream retains for the durable cut, and their bytes.
    #[serde(default)]
    pub retained_batches: u64,
    /// See `retained_batches`.
    #[serde(default)]
    pub retained_bytes: u64,
}

/// The psmr engine's figures, for INFO, `/metrics` and `/status`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PsmrStatus {
    /// `psmr`, `sp-smr`, `smr` or `no-rep`.
    pub mode: String,
    /// The service replicated: `btree` or `netfs`.
    #[serde(default)]
    pub service: String,
    /// Worker threads configured (`k`).
    pub threads: u16,
    /// Worker threads executing (one under SMR).
    pub executing_threads: u16,
    /// Each group's figures (none without replication).
    pub groups: Vec<GroupStatus>,
    /// The service's state digest (hex).
    pub digest: String,
    /// Commands executed.
    pub executed: u64,
    /// Commands executed in synchronous mode.
    pub executed_synchronous: u64,
    /// Commands delivered to a worker and not executed, summed over the workers.
    pub backlog: u64,
    /// Skips proposed as an idle group's leader.
    pub skips_proposed: u64,
    /// Operations answered with the service's reply.
    pub answered: u64,
    /// Retries answered from the reply cache.
    pub answered_from_cache: u64,
    /// Operations handed to the replica again after the retry interval.
    pub retried: u64,
    /// Operations answered "outcome unknown" after the request timeout.
    pub timed_out: u64,
    /// Operations refused (in flight or backlog over its limit).
    pub overloaded: u64,
    /// Whether the replica is paused because a group's log has no space on the disk.
    pub space_short: bool,
    /// Operations refused because the disk had no space for the logs.
    pub refused_for_space: u64,
    /// Times the disk ran out of space for the logs.
    pub space_shortages: u64,
    /// Operations in flight now.
    pub in_flight: u64,
    /// Turns whose records were flushed.
    pub flushes: u64,
    /// Snapshots (cut and service state) written since the start.
    #[serde(default)]
    pub cuts_written: u64,
    /// Cuts installed from a peer's group snapshot since the start (catch-up past a peer's
    /// truncation).
    #[serde(default)]
    pub cuts_installed: u64,
    /// The newest durable cut, each group's position (`g0@12 g_all@30.2`: instance, and
    /// requests of a batch cut in the middle), or empty if there is none.
    #[serde(default)]
    pub last_cut: String,
    /// Whether the replica rejoins after a lost disk and some group has not recovered yet
    /// (commands are answered "not applied" meanwhile).
    #[serde(default)]
    pub rejoining: bool,
}

/// An input queued for the end of the turn.
enum Queued {
    Request(Request),
    Messages(NodeId, Vec<(Group, Message)>),
}

/// The node's psmr replica: its durable logs, its clients and what they wait for.
pub struct PsmrCore<R, D: Dir = FsDir, S = logless_btree::KvService> {
    me: NodeId,
    shared: Arc<Shared<S>>,
    logs: GroupLogs<D>,
    clients: ClientPool<R>,
    /// The last reply executed for each client id the pool lent.
    replies: FxHashMap<ClientId, (RequestSeq, Bytes)>,
    clock: ShardClock,
    now_ms: u64,
    request_timeout_ms: u64,
    queued: Vec<Queued>,
    /// Whether a worker's backlog was over [`BACKLOG_MAX`] at the end of the last turn.
    backlogged: bool,
    /// Whether the replica has no peers: its own vote decides (see "A full disk").
    alone: bool,
    /// While a group's log has no space on the disk: when to flush the backlogs again.
    next_space_probe_ms: Option<u64>,
    /// Operations refused without the replica, and why.
    refused: Vec<(R, Failure)>,
    mode: Mode,
    threads: u16,
    answered: u64,
    answered_from_cache: u64,
    retried: u64,
    timed_out: u64,
    overloaded: u64,
    refused_for_space: u64,
    space_shortages: u64,
    flushes: u64,
    /// Where the replica's snapshots go, if it keeps them (see [`crate::psmr_snapshot`]).
    cut_file: Option<CutFile<D>>,
    /// Snapshots written, and the newest cut durable (written, restarted from or installed).
    cuts_written: u64,
    last_cut: Option<Cut>,
    /// Whether the replica rejoins after a lost disk and, as of the last turn committed, some
    /// group has not recovered (see "A rejoin after a lost disk").
    rejoining: bool,
}

impl<R, D: Dir, S: NodeService> PsmrCore<R, D, S> {
    /// The core of replica `me` around `shared` (the replica recovered from `logs`), in run
    /// `incarnation`; operations unanswered after `request_timeout_ms` are answered "outcome
    /// unknown".
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        me: NodeId,
        shared: Arc<Shared<S>>,
        logs: GroupLogs<D>,
        incarnation: u32,
        request_timeout_ms: u64,
        mode: Mode,
        threads: u16,
        wall_ms: u64,
        mono_us: u64,
    ) -> PsmrCore<R, D, S> {
        let mut clock = ShardClock::default();
        let now_ms = clock.read(wall_ms, mono_us);
        let (alone, rejoining) = {
            let replica = shared.replica();
            let alone = replica.groups().config().paxos.nodes.len() < 2;
            (alone, replica.rejoining())
        };
        PsmrCore {
            me,
            shared,
            logs,
            clients: ClientPool::new(me.0, incarnation),
            replies: FxHashMap::default(),
            clock,
            now_ms,
            request_timeout_ms,
            queued: Vec::new(),
            backlogged: false,
            alone,
            next_space_probe_ms: None,
            refused: Vec::new(),
            mode,
            threads,
            answered: 0,
            answered_from_cache: 0,
            retried: 0,
            timed_out: 0,
            overloaded: 0,
            refused_for_space: 0,
            space_shortages: 0,
            flushes: 0,
            cut_file: None,
            cuts_written: 0,
            last_cut: None,
            rejoining,
        }
    }

    /// Whether the replica rejoins after a lost disk and has not recovered every group yet,
    /// as of the last turn whose records were committed: once false, every group's rejoin is
    /// durable (the turn that completed the last one flushed its records).
    pub fn rejoining(&self) -> bool {
        self.rejoining
    }

    /// This core writes the snapshots its workers take to `file` (their [`Shared`] must keep
    /// snapshots, [`Shared::with_snapshots`]); `restored` is the snapshot the replica restarted
    /// from, if any: the groups' streams carry it from now on (a peer behind their truncation
    /// may need it, see [`logless_psmr::stream`]).
    pub fn with_cut_file(mut self, file: CutFile<D>, restored: Option<StoredCut>) -> Self {
        self.cut_file = Some(file);
        if let Some(stored) = restored {
            let durable = DurableCut {
                cut: stored.cut,
                state: Bytes::from(stored.state),
            };
            self.shared.replica().cut_durable(&durable);
            self.last_cut = Some(durable.cut);
        }
        self
    }

    /// Where the replica's snapshots go, if it keeps them.
    pub fn cut_file(&self) -> Option<&CutFile<D>> {
        self.cut_file.as_ref()
    }

    /// Writes the snapshots the workers took, each durably, and only then lets the replica's
    /// groups drop what its cut covers (see [`crate::psmr_snapshot`]). A snapshot the disk has
    /// no space for is skipped: the groups keep their batches until a later one is written.
    fn write_cuts(&mut self) -> Result<(), StoreError> {
        let Some(file) = self.cut_file.as_mut() else {
            return Ok(());
        };
        for taken in self.shared.take_cuts() {
            match file.write(taken.seq, &taken.cut, &taken.state) {
                Ok(()) => {}
                Err(e) if e.is_no_space() => {
                    tracing::warn!(error = %e, "no space for a psmr snapshot: the logs keep it");
                    continue;
                }
                Err(e) => return Err(e),
            }
            let durable = DurableCut {
                cut: taken.cut,
                state: Bytes::from(taken.state),
            };
            self.shared.replica().cut_durable(&durable);
            self.cuts_written += 1;
            self.last_cut = Some(durable.cut);
        }
        Ok(())
    }

    /// The groups' durable logs.
    pub fn logs(&self) -> &GroupLogs<D> {
        &self.logs
    }

    /// The groups' durable logs, to change (a simulation fills and frees their directories).
    pub fn logs_mut(&mut self) -> &mut GroupLogs<D> {
        &mut self.logs
    }

    /// Starts a turn at wall-clock `wall_ms` and monotonic `mono_us`.
    pub fn start_turn(&mut self, wall_ms: u64, mono_us: u64) {
        self.now_ms = self.clock.read(wall_ms, mono_us);
    }

    /// Takes a client command (the service's encoding); its answer goes to `reply`.
    pub fn submit(&mut self, command: Bytes, reply: R) {
        if self.rejoining {
            self.refused.push((reply, Failure::NotApplied));
            return;
        }
        if self.next_space_probe_ms.is_some() {
            self.refused_for_space += 1;
            self.refused.push((reply, Failure::LogFull));
            return;
        }
        if self.backlogged || self.clients.in_flight() >= IN_FLIGHT_MAX {
            self.overloaded += 1;
            self.refused.push((reply, Failure::Overloaded));
            return;
        }
        let request = self
            .clients
            .lend(command, reply, self.now_ms, self.request_timeout_ms);
        self.queued.push(Queued::Request(request));
    }

    /// Takes group messages from `from`, in the order sent.
    pub fn receive(&mut self, from: NodeId, messages: Vec<(Group, Message)>) {
        self.queued.push(Queued::Messages(from, messages));
    }

    /// A worker executed a command of a client of this replica: remember its reply and answer
    /// the client if it still waits.
    pub fn executed(&mut self, executed: Executed, outlet: &mut impl PsmrOutlet<R>) {
        let Executed { client, seq, reply } = executed;
        if !self.clients.lent(client) {
            // A command of an earlier run, executed again at recovery: nobody waits for it.
            return;
        }
        self.replies.insert(client, (seq, reply.clone()));
        if let Some(to) = self.clients.settle(client, seq) {
            self.answered += 1;
            outlet.answer(to, Ok(reply));
        }
    }

    /// Ends the turn: retries or gives up on late operations, hands the replica the turn's
    /// inputs and ticks it, commits its records, and only then lets the workers see what was
    /// delivered and sends the released messages. A full disk pauses the replica (see "A full
    /// disk"); any other error means a log failed: the replica must stop (fail-stop).
    pub fn finish_turn(&mut self, outlet: &mut impl PsmrOutlet<R>) -> Result<(), StoreError> {
        self.write_cuts()?;
        self.retry_late(outlet);
        if self.next_space_probe_ms.is_some() {
            return self.finish_paused_turn(outlet);
        }
        let now_ms = self.now_ms;
        let committed = {
            let mut replica = self.shared.replica();
            for input in self.queued.drain(..) {
                match input {
                    Queued::Request(request) => {
                        // Ids from the pool are never the skip client, and C-G names a group
                        // the replica runs: the replica takes every request.
                        if let Err(e) = replica.handle_request(now_ms, request) {
                            tracing::error!(error = %e, "a request the groups refuse");
                        }
                    }
                    Queued::Messages(from, messages) => {
                        for (group, message) in messages {
                            replica.handle_message(now_ms, from, group, message);
                        }
                    }
                }
            }
            replica.tick(now_ms);
            // A cut a peer's group snapshot brought (or one this replica restarted with) is
            // installed before anything is committed or executed after it.
            if let Some(cut) = self.shared.install(&mut replica) {
                tracing::info!(
                    cut = %cut_positions(&cut),
                    "caught up past a peer's truncation: installed its cut"
                );
                self.last_cut = Some(cut);
            }
            let ready = replica.take_ready();
            if ready.records().next().is_some() {
                self.flushes += 1;
            }
            let committed = ready.commit(&mut self.logs);
            let plan = replica.plan();
            self.backlogged = (0..plan.workers()).any(|w| plan.backlog(WorkerId(w)) > BACKLOG_MAX);
            self.shared.wake(&replica);
            // A rejoin completes only with the records of the turn that completed it durable.
            if committed.is_ok() {
                self.rejoining = replica.rejoining();
            }
            committed
        };
        let released = match committed {
            Ok(released) => released,
            Err(e) if e.is_no_space() && !self.alone => {
                self.space_shortages += 1;
                self.next_space_probe_ms = Some(now_ms + SPACE_PROBE_MS);
                tracing::warn!(
                    error = %e,
                    "the disk has no space for a group's log: this replica pauses (votes for \
                     nothing, refuses new commands) until space returns"
                );
                self.answer_refused(outlet);
                return Ok(());
            }
            Err(e) => return Err(e),
        };
        let mut outgoing: BTreeMap<NodeId, Vec<(Group, Message)>> = BTreeMap::new();
        for envelope in released.messages {
            if envelope.to != self.me {
                let messages = outgoing.entry(envelope.to).or_default();
                messages.push((envelope.group, envelope.message));
            }
        }
        for (to, messages) in outgoing {
            outlet.send(to, messages);
        }
        self.answer_refused(outlet);
        Ok(())
    }

    /// A turn while paused by a full disk: drops the turn's inputs (messages as lost; requests
    /// are handed in again when the replica goes on), answers the operations refused, and once
    /// a probe is due flushes the groups' backlogs again; when they are durable, the replica
    /// goes on and hands every operation in flight to itself again.
    fn finish_paused_turn(&mut self, outlet: &mut impl PsmrOutlet<R>) -> Result<(), StoreError> {
        self.queued.clear();
        self.answer_refused(outlet);
        let now_ms = self.now_ms;
        if self.next_space_probe_ms.is_some_and(|probe| now_ms < probe) {
            return Ok(());
        }
        match GroupStore::flush(&mut self.logs) {
            Ok(()) => {
                self.next_space_probe_ms = None;
                tracing::info!(
                    "the disk has space for the groups' logs again: this replica goes on"
                );
                let requests = self.clients.resend_all(now_ms);
                self.queued
                    .extend(requests.into_iter().map(Queued::Request));
                Ok(())
            }
            Err(e) if e.is_no_space() => {
                self.next_space_probe_ms = Some(now_ms + SPACE_PROBE_MS);
                Ok(())
            }
            Err(e) => Err(e),
        }
    }

    /// Answers the operations refused without the replica.
    fn answer_refused(&mut self, outlet: &mut impl PsmrOutlet<R>) {
        for (reply, failure) in self.refused.drain(..) {
            outlet.answer(reply, Err(failure));
        }
    }

    /// Answers the retries due whose command executed from the reply cache, queues the others
    /// for the replica, and answers those past their deadline "outcome unknown".
    fn retry_late(&mut self, outlet: &mut impl PsmrOutlet<R>) {
        for due in self.clients.take_due(self.now_ms) {
            match due {
                // Without replication nothing is lost on the way: the command waits in the
                // plan, and handing it in again would execute it twice.
                Due::Retry(_) if self.mode == Mode::NoRep => {}
                Due::Retry(request) => {
                    let cached = match self.replies.get(&request.client) {
                        Some((seq, reply)) if *seq == request.seq => Some(reply.clone()),
                        // A command a cut installed from a peer covers (this replica never
                        // executed it): the cut's client table has its reply.
                        _ => self.shared.replica().answer_of(&request).cloned(),
                    };
                    match cached {
                        Some(reply) => {
                            if let Some(to) = self.clients.settle(request.client, request.seq) {
                                self.answered_from_cache += 1;
                                outlet.answer(to, Ok(reply));
                            }
                        }
                        None => {
                            self.retried += 1;
                            self.queued.push(Queued::Request(request));
                        }
                    }
                }
                Due::TimedOut(reply) => {
                    self.timed_out += 1;
                    outlet.answer(reply, Err(Failure::OutcomeUnknown));
                }
            }
        }
    }

    /// The engine's figures now.
    pub fn status(&self) -> PsmrStatus {
        let (groups, backlog, skips_proposed, cuts_installed) = {
            let replica = self.shared.replica();
            let groups = replica.groups();
            let sizes = groups.sizes();
            let figures = self
                .mode
                .groups(self.threads)
                .into_iter()
                .filter_map(|group| {
                    let log = groups.replica(group)?;
                    let size = sizes.iter().find(|s| s.group == group)?;
                    Some(GroupStatus {
                        group: format!("{group:?}"),
                        view: log.view().0,
                        leader: log.leader().0,
                        is_leader: log.is_leader(),
                        executed_below: log.executed_below().0,
                        batches_proposed: log.stats().batches_proposed,
                        log_start: size.log_start.0,
                        retained_batches: size.retained_batches as u64,
                        retained_bytes: size.retained_bytes,
                    })
                })
                .collect();
            let plan = replica.plan();
            let backlog = (0..plan.workers())
                .map(|w| plan.backlog(WorkerId(w)) as u64)
                .sum();
            let skips = groups.stats().skips_proposed;
            (figures, backlog, skips, replica.cuts_installed())
        };
        let relaxed = std::sync::atomic::Ordering::Relaxed;
        PsmrStatus {
            mode: self.mode.name().to_string(),
            service: self.shared.service_kind().to_string(),
            threads: self.threads,
            executing_threads: self.mode.executing_workers(self.threads),
            groups,
            digest: self.shared.digest().to_string(),
            executed: self.shared.executed.load(relaxed),
            executed_synchronous: self.shared.executed_synchronous.load(relaxed),
            backlog,
            skips_proposed,
            answered: self.answered,
            answered_from_cache: self.answered_from_cache,
            retried: self.retried,
            timed_out: self.timed_out,
            overloaded: self.overloaded,
            space_short: self.next_space_probe_ms.is_some(),
            refused_for_space: self.refused_for_space,
            space_shortages: self.space_shortages,
            in_flight: self.clients.in_flight() as u64,
            flushes: self.flushes,
            cuts_written: self.cuts_written,
            cuts_installed,
            rejoining: self.rejoining,
            last_cut: self
                .last_cut
                .as_ref()
                .map_or_else(String::new, cut_positions),
        }
    }
}

/// A cut's positions, as the status shows them: `g0@12 g_all@30.2`.
fn cut_positions(cut: &Cut) -> String {
    let positions = cut.positions.iter().map(|(group, at)| match at.requests {
        0 => format!("{group:?}@{}", at.instance.0),
        requests => format!("{group:?}@{}.{requests}", at.instance.0),
    });
    positions.collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    use logless_btree::{KvCommand, KvReply, KvService};
    use logless_service::Wire;
    use logless_storage::SimDir;

    use super::*;
    use crate::psmr_service::PsmrService;

    #[derive(Default)]
    struct Collected {
        answers: Vec<(u32, PsmrAnswer)>,
    }

    impl PsmrOutlet<u32> for Collected {
        fn send(&mut self, _: NodeId, _: Vec<(Group, Message)>) {}

        fn answer(&mut self, reply: u32, answer: PsmrAnswer) {
            self.answers.push((reply, answer));
        }
    }

    /// A core without replication, one worker, and nothing started: the tests drive it.
    fn no_rep_core() -> (PsmrCore<u32, SimDir, PsmrService>, Arc<Shared<PsmrService>>) {
        no_rep_core_of(1)
    }

    /// [`no_rep_core`] with `workers` workers.
    fn no_rep_core_of(
        workers: u16,
    ) -> (PsmrCore<u32, SimDir, PsmrService>, Arc<Shared<PsmrService>>) {
        let mut config = logless_psmr::config::Config::new(vec![NodeId(1)], NodeId(1), workers);
        config.mode = Mode::NoRep;
        let replica = logless_psmr::replica::Replica::new(config, ServiceKind::Btree.start(), 0);
        let shared = Arc::new(Shared::new(replica, ServiceKind::Btree.start()));
        let logs = GroupLogs::new(BTreeMap::new());
        let core = PsmrCore::new(
            NodeId(1),
            shared.clone(),
            logs,
            1,
            1_000,
            Mode::NoRep,
            workers,
            1_000_000,
            0,
        );
        (core, shared)
    }

    fn insert(key: &str) -> Bytes {
        let command = KvCommand::Insert {
            key: key.as_bytes().to_vec(),
            value: b"v".to_vec(),
        };
        Bytes::from(command.encode_to_vec())
    }

    #[test]
    fn commands_are_answered_once_a_worker_executed_them() {
        let (mut core, shared) = no_rep_core();
        let mut out = Collected::default();
        let (tx, rx) = std::sync::mpsc::channel();
        let workers = crate::psmr_workers::spawn(&shared, 1, 1, move |e| {
            let _ = tx.send(e);
        })
        .unwrap();
        core.submit(insert("a"), 7);
        core.submit(insert("a"), 8);
        core.finish_turn(&mut out).unwrap();
        for _ in 0..2 {
            let executed = rx.recv_timeout(std::time::Duration::from_secs(5)).unwrap();
            core.executed(executed, &mut out);
        }
        shared.stop();
        workers.into_iter().for_each(|w| w.join().unwrap());
        let replies: Vec<(u32, KvReply)> = (out.answers.into_iter())
            .map(|(to, answer)| (to, KvReply::decode(&answer.unwrap()).unwrap()))
            .collect();
        assert_eq!(
            replies,
            [(7, KvReply::Stored(true)), (8, KvReply::Stored(false))]
        );
        let status = core.status();
        assert_eq!(
            (status.answered, status.executed, status.in_flight),
            (2, 2, 0)
        );
        assert_eq!(status.digest, shared.digest().to_string());
    }

    #[test]
    fn dependent_commands_need_no_idle_poll() {
        // 300 commands handed over in one turn and then left to the workers alone: runs of
        // inserts (g_all: both workers reach each one's barrier, worker 0 executes) between
        // reads that worker 1 executes, so that worker 1 is released into work of its own and
        // worker 0 must be woken by its arrival. A wake-up lost anywhere would cost the idle
        // poll (50 ms), and the run seconds.
        use logless_service::Service;
        let service = logless_btree::KvService::new();
        let in_worker_1 = (0..)
            .map(|i| KvCommand::Read {
                key: format!("r{i}").into_bytes(),
            })
            .find(|read| service.group(read, 2) == Group::Worker(WorkerId(1)))
            .expect("a key in worker 1's group");
        let (mut core, shared) = no_rep_core_of(2);
        let mut out = Collected::default();
        let (tx, rx) = std::sync::mpsc::channel();
        let workers = crate::psmr_workers::spawn(&shared, 2, 1, move |e| {
            let _ = tx.send(e);
        })
        .unwrap();
        let started = std::time::Instant::now();
        for i in 0..300 {
            let command = if i % 3 == 2 {
                Bytes::from(in_worker_1.encode_to_vec())
            } else {
                insert(&format!("k{i}"))
            };
            core.submit(command, i);
        }
        core.finish_turn(&mut out).unwrap();
        for _ in 0..300 {
            let executed = rx.recv_timeout(std::time::Duration::from_secs(10)).unwrap();
            core.executed(executed, &mut out);
        }
        let elapsed = started.elapsed();
        shared.stop();
        workers.into_iter().for_each(|w| w.join().unwrap());
        assert_eq!(out.answers.len(), 300);
        assert!(
            elapsed < std::time::Duration::from_secs(3),
            "300 commands took {elapsed:?}"
        );
        let status = core.status();
        assert_eq!((status.executed, status.executed_synchronous), (300, 200));
    }

    #[test]
    fn a_backlog_over_its_limit_refuses_new_commands() {
        let (mut core, _shared) = no_rep_core();
        let mut out = Collected::default();
        for i in 0..=BACKLOG_MAX {
            core.submit(insert(&i.to_string()), 0);
        }
        core.finish_turn(&mut out).unwrap();
        assert!(out.answers.is_empty(), "all taken: nothing executes them");
        core.submit(insert("late"), 1);
        core.finish_turn(&mut out).unwrap();
        assert_eq!(out.answers, [(1, Err(Failure::Overloaded))]);
        assert_eq!(core.status().overloaded, 1);
        assert_eq!(core.status().backlog, BACKLOG_MAX as u64 + 1);
    }

    /// An SMR core of replica 1 of `nodes`, its log on a simulated directory with small
    /// segments.
    fn smr_core_on_a_small_disk(nodes: u16) -> (PsmrCore<u32, SimDir>, Arc<Shared<KvService>>) {
        let nodes = (1..=nodes).map(NodeId).collect();
        let mut config = logless_psmr::config::Config::new(nodes, NodeId(1), 1);
        config.mode = Mode::Smr;
        let options = logless_storage::SegmentLogOptions {
            segment_bytes: 4096,
            record_bytes_max: 1024,
            ..logless_storage::SegmentLogOptions::new(logless_storage::Durability::Sync)
        };
        let logs = (Mode::Smr.groups(1).into_iter())
            .map(|group| {
                let opened = DurableLog::open_on(SimDir::new(), options.clone()).unwrap();
                (group, opened.log)
            })
            .collect();
        let replica = logless_psmr::replica::Replica::new(config, KvService::new(), 1_000_000);
        let shared = Arc::new(Shared::new(replica, KvService::new()));
        let core = PsmrCore::new(
            NodeId(1),
            shared.clone(),
            GroupLogs::new(logs),
            1,
            60_000,
            Mode::Smr,
            1,
            1_000_000,
            0,
        );
        (core, shared)
    }

    fn fill(core: &mut PsmrCore<u32, SimDir>, full: bool) {
        for log in core.logs_mut().logs_mut() {
            log.dir_mut().full = full;
        }
    }

    fn turn<S: NodeService>(core: &mut PsmrCore<u32, SimDir, S>, out: &mut Collected, now_ms: u64) {
        core.start_turn(now_ms, now_ms * 1000);
        core.finish_turn(out).unwrap();
    }

    #[test]
    fn a_full_disk_pauses_a_replica_with_peers_which_refuses_commands_until_space_returns() {
        // Replica 1 of three, alone on the network: it stands for election again and again,
        // writing its promises, until a new segment is refused.
        let (mut core, _shared) = smr_core_on_a_small_disk(3);
        let mut out = Collected::default();
        let mut now_ms = 1_000_000;
        fill(&mut core, true);
        while !core.status().space_short {
            assert!(
                now_ms < 1_000_000 + 3_600_000,
                "the disk never refused a segment"
            );
            now_ms += 100;
            turn(&mut core, &mut out, now_ms);
        }
        // Paused: a new command is refused at once.
        core.submit(insert("refused"), 1);
        turn(&mut core, &mut out, now_ms);
        assert_eq!(out.answers, [(1, Err(Failure::LogFull))]);
        let status = core.status();
        assert_eq!((status.refused_for_space, status.space_shortages), (1, 1));
        // Still no space at the probe: still paused.
        now_ms += crate::log_turn::SPACE_PROBE_MS;
        turn(&mut core, &mut out, now_ms);
        assert!(core.status().space_short);
        // Space returns: the next probe writes the backlog and the replica goes on.
        fill(&mut core, false);
        now_ms += crate::log_turn::SPACE_PROBE_MS;
        turn(&mut core, &mut out, now_ms);
        assert!(!core.status().space_short);
        core.submit(insert("taken"), 2);
        turn(&mut core, &mut out, now_ms + 1);
        assert_eq!(out.answers.len(), 1, "taken, not refused");
        assert_eq!(core.status().in_flight, 1);
    }

    #[test]
    fn a_rejoining_replica_refuses_commands_as_not_applied() {
        // Replica 1 of three, alone on the network: its rejoin waits for the others' answers.
        let (mut core, shared) = smr_core_on_a_small_disk(3);
        let attempt = logless_multipaxos::ids::Epoch(7);
        shared.replica().start_rejoin(1_000_000, attempt);
        let mut out = Collected::default();
        turn(&mut core, &mut out, 1_000_001);
        assert!(core.rejoining() && core.status().rejoining);
        core.submit(insert("refused"), 1);
        turn(&mut core, &mut out, 1_000_002);
        assert_eq!(out.answers, [(1, Err(Failure::NotApplied))]);
        assert_eq!(core.status().in_flight, 0);
        assert!(crate::status::psmr_info(&core.status()).contains("psmr_rejoining:1\r\n"));
    }

    #[test]
    fn a_full_disk_stops_a_replica_without_peers() {
        // Alone, the replica decides on its own vote: it must not go on past a vote that is
        // not durable.
        let (mut core, _shared) = smr_core_on_a_small_disk(1);
        let mut out = Collected::default();
        let mut now_ms = 1_000_000;
        fill(&mut core, true);
        for i in 0..1_000 {
            core.submit(insert(&format!("k{i}")), i);
            now_ms += 1;
            core.start_turn(now_ms, now_ms * 1000);
            if let Err(e) = core.finish_turn(&mut out) {
                assert!(e.is_no_space(), "{e}");
                assert!(!core.status().space_short);
                return;
            }
        }
        panic!("the disk never refused a segment");
    }

    /// A P-SMR replica alone, two workers, its logs and snapshots on simulated directories
    /// (`dirs`: each group's, then the snapshots', or fresh ones), restarted from them, with
    /// periodic cuts every few kilobytes.
    fn psmr_core_with_cuts(
        dirs: Option<(BTreeMap<Group, SimDir>, SimDir)>,
    ) -> (PsmrCore<u32, SimDir, PsmrService>, Arc<Shared<PsmrService>>) {
        let mut config = logless_psmr::config::Config::new(vec![NodeId(1)], NodeId(1), 2);
        config.cut_every_bytes = 4_000;
        config.group_snapshot_log_bytes_min = 2_000;
        config.paxos.snapshot_ratio_percent = 10;
        let options = logless_storage::SegmentLogOptions::new(logless_storage::Durability::Sync);
        let (mut group_dirs, cut_dir) = dirs.unwrap_or_default();
        let (mut logs, mut durable) = (BTreeMap::new(), BTreeMap::new());
        for group in Mode::Psmr.groups(2) {
            let dir = group_dirs.remove(&group).unwrap_or_default();
            let opened = DurableLog::open_on(dir, options.clone()).unwrap();
            durable.insert(group, opened.durable);
            logs.insert(group, opened.log);
        }
        let file = CutFile::open_on(cut_dir, options).unwrap();
        let stored = file.newest().unwrap();
        let mut service = ServiceKind::Btree.start();
        if let Some(stored) = &stored {
            crate::psmr_snapshot::restore_service(&mut service, &stored.state).unwrap();
        }
        let cut = stored.as_ref().map(|s| &s.cut);
        let replica = logless_psmr::replica::Replica::recover_from(
            config,
            ServiceKind::Btree.start(),
            cut,
            &durable,
            1_000_000,
        );
        let shared = Shared::new(replica, service);
        let shared = Arc::new(shared.with_snapshots(
            crate::psmr_snapshot::service_state,
            crate::psmr_snapshot::restore_service,
        ));
        let core = PsmrCore::new(
            NodeId(1),
            shared.clone(),
            GroupLogs::new(logs),
            1,
            60_000,
            Mode::Psmr,
            2,
            1_000_000,
            0,
        );
        (core.with_cut_file(file, stored), shared)
    }

    #[test]
    fn periodic_snapshots_bound_the_groups_logs_and_a_restart_resumes_from_the_newest() {
        let (mut core, shared) = psmr_core_with_cuts(None);
        let mut out = Collected::default();
        let (tx, rx) = std::sync::mpsc::channel();
        let workers = crate::psmr_workers::spawn(&shared, 2, 1, move |e| {
            let _ = tx.send(e);
        })
        .unwrap();
        let mut now_ms = 1_000_000;
        let (mut held_max, mut answered) = (0, 0);
        for round in 0..100 {
            for i in 0..10 {
                core.submit(insert(&format!("k{round}-{i}")), round * 10 + i);
            }
            while answered < (round + 1) * 10 {
                now_ms += 1;
                turn(&mut core, &mut out, now_ms);
                while let Ok(executed) = rx.recv_timeout(std::time::Duration::from_millis(1)) {
                    core.executed(executed, &mut out);
                }
                answered = out.answers.len() as u32;
            }
            let status = core.status();
            let g_all = status.groups.iter().find(|g| g.group == "g_all").unwrap();
            let held = g_all.executed_below - g_all.log_start + g_all.retained_batches;
            held_max = held_max.max(held);
        }
        // A last turn writes the snapshot taken last, if one is pending.
        now_ms += 1;
        turn(&mut core, &mut out, now_ms);
        shared.stop();
        workers.into_iter().for_each(|w| w.join().unwrap());
        let status = core.status();
        assert!(
            status.cuts_written >= 5,
            "{} snapshots",
            status.cuts_written
        );
        assert!(!status.last_cut.is_empty());
        // Inserts are ordered in g_all; the workers' groups carry only skips, too few bytes
        // for a snapshot of their own.
        let g_all = status.groups.iter().find(|g| g.group == "g_all").unwrap();
        assert!(g_all.log_start > 0, "g_all's log truncated: {g_all:?}");
        assert!(
            held_max * 3 < g_all.executed_below,
            "g_all held up to {held_max} batches, of {}",
            g_all.executed_below
        );
        let info = crate::status::psmr_info(&status);
        assert!(info.contains("psmr_cuts_written:") && info.contains(",log_start="));
        // A crash that keeps only what was synced; the restart executes only the logs' suffix
        // past the newest cut, and ends in the same state.
        let image = |dir: &SimDir| dir.durable_image();
        let group_dirs = (core.logs().logs().iter())
            .map(|(group, log)| (*group, image(log.segment_log().dir())))
            .collect();
        let cut_dir = image(core.cut_file().unwrap().dir());
        let (restarted, again) = psmr_core_with_cuts(Some((group_dirs, cut_dir)));
        let workers = crate::psmr_workers::spawn(&again, 2, 1, |_| {}).unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while again.digest() != shared.digest() {
            assert!(
                std::time::Instant::now() < deadline,
                "the restart never caught up"
            );
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        again.stop();
        workers.into_iter().for_each(|w| w.join().unwrap());
        assert_eq!(restarted.status().last_cut, status.last_cut);
    }

    #[test]
    fn a_directory_keeps_the_mode_and_threads_it_was_written_with() {
        let dir = tempfile::tempdir().unwrap();
        let psmr = dir.path().join("psmr");
        claim_layout(&psmr, Mode::Psmr, 2, ServiceKind::Btree).unwrap();
        claim_layout(&psmr, Mode::Psmr, 2, ServiceKind::Btree).unwrap();
        let refused = claim_layout(&psmr, Mode::Psmr, 3, ServiceKind::Btree).unwrap_err();
        assert!(
            refused.contains("written with mode=psmr threads=2")
                && refused.contains("--psmr-mode psmr --threads 2"),
            "{refused}"
        );
        assert!(claim_layout(&psmr, Mode::Smr, 2, ServiceKind::Btree).is_err());
        let other = claim_layout(&psmr, Mode::Psmr, 2, ServiceKind::NetFs).unwrap_err();
        assert!(other.contains("--service btree"), "{other}");
    }
}
