//! One replica's core in any [`Mode`]: the groups' logs, each worker's merge (P-SMR) or the
//! scheduler (sP-SMR, no replication), and the execution plan.
//!
//! The runtime feeds it client requests ([`Replica::handle_request`]), the groups' messages
//! ([`Replica::handle_message`]) and time ([`Replica::tick`]); after each call it commits
//! [`Replica::take_ready`] through its [`GroupStore`](crate::groups::GroupStore) and only then
//! sends what was released. Decided commands flow into the [`Plan`], which the worker threads
//! poll ([`Replica::poll`], [`Replica::executed`]) to execute commands against the service and
//! answer clients. The service the workers execute, and which replica answers which client, are
//! the runtime's: the core says which worker executes what, and when. Of the service the core
//! needs only C-G: it keeps a copy configured like the executing one and calls
//! [`Service::group_of_encoded`] on each encoded command (C-G reads the configuration, never the
//! state).
//!
//! How commands reach the plan, per mode:
//!
//! * **P-SMR**: C-G picks the group a request is ordered in; each worker's [`Merge`] of its
//!   own group and `g_all` feeds that worker (parallel delivery).
//! * **sP-SMR**: every request is ordered in the one stream `g_all`; the scheduler hands each
//!   delivered command to the worker C-G names, or to every worker (synchronous mode through
//!   the barrier) for a command C-G sends to all.
//! * **SMR**: one stream, every command to worker 0 (the only one).
//! * **No replication**: the scheduler of sP-SMR, fed in arrival order, with no log at all.
use std::collections::BTreeMap;

use bytes::Bytes;
use logless_multipaxos::ids::{Epoch, Instance, NodeId, RequestSeq};
use logless_multipaxos::message::{ClientTable, Message, Request};
use logless_multipaxos::persist::Durable;
use logless_service::{Group, Service, WorkerId};

use crate::config::{Config, Mode};
use crate::cut::{is_snapshot, Cut, CutBugs, DurableCut, PendingCut, Position};
use crate::groups::{Groups, Ready, RequestError};
use crate::merge::Merge;
use crate::plan::{Delivered, Plan, Step};

/// A replica's sans-IO core for the service `S`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Replica<S> {
    mode: Mode,
    workers: u16,
    /// A service configured like the one the workers execute, asked only for C-G: it is never
    /// executed, so it stays as it was built.
    command_groups: S,
    groups: Groups,
    /// Under P-SMR, worker `i`'s merge of `g_i` and `g_all`, at index `i`; empty otherwise.
    merges: Vec<Merge>,
    plan: Plan,
    /// The cut the service was restored at, if it was: what it covers is not delivered again.
    restored_at: Option<Cut>,
    /// The cuts of snapshot requests delivered and not taken yet, by request number.
    cuts: BTreeMap<RequestSeq, PendingCut>,
    cut_bugs: CutBugs,
    /// Each group's client table as executed: the last command of each client and the
    /// service's reply (see [`Replica::answered`]); a cut takes a copy.
    answers: BTreeMap<Group, ClientTable>,
    /// Each group's next batch to hand on: one below was handed on already (a group's
    /// snapshot installed hands its batches on again), one above is a gap.
    next_batch: BTreeMap<Group, Instance>,
    /// The first group found with a gap that no cut covers, if any: see [`Replica::behind`].
    behind: Option<Group>,
    /// A cut some group's stream carries past the next batch this replica needs of that group,
    /// waiting to be installed ([`Replica::install`]); nothing is handed on meanwhile.
    installing: Option<DurableCut>,
    /// Cuts installed since the start.
    cuts_installed: u64,
    /// What the groups delivered since the last snapshot request, for the periodic cut.
    since_cut: SinceCut,
    /// When this replica last proposed a periodic snapshot request.
    cut_proposed_ms: Option<u64>,
    /// Whether this replica rejoins after a lost disk and some group has not recovered yet
    /// (see [`Replica::start_rejoin`]).
    rejoining: bool,
}

/// What the groups delivered since the last snapshot request in `g_all`: the same on every
/// replica, since the logs are.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
struct SinceCut {
    bytes: u64,
    all_instances: u64,
}

/// How long a periodic snapshot request proposed may go undelivered before this replica, if it
/// still leads `g_all`, proposes one again (the first may have been lost with a view).
const CUT_REPROPOSE_MS: u64 = 1_000;

impl<S: Service> Replica<S> {
    /// A replica that has never run. `command_groups` must be configured like the service the
    /// workers execute (it gives C-G, see the module docs); a fresh one will do.
    pub fn new(config: Config, command_groups: S, now_ms: u64) -> Replica<S> {
        Replica::recover(config, command_groups, &BTreeMap::new(), now_ms)
    }

    /// A replica restarting from its groups' durable logs: every decided command is delivered
    /// to the plan again, in the same order, for a service that starts empty (see
    /// [`Groups::recover`]). Without replication nothing is durable: the replica starts empty.
    pub fn recover(
        config: Config,
        command_groups: S,
        durable: &BTreeMap<Group, Durable>,
        now_ms: u64,
    ) -> Replica<S> {
        Replica::recover_from(config, command_groups, None, durable, now_ms)
    }

    /// A replica restarting from its groups' durable logs for a service restored at
    /// `restored_at` (a cut [`Replica::take_cut`] gave, on this replica or another), or empty
    /// when `None`: what the cut covers is not delivered again, and the merges start at it
    /// (see [`crate::cut`]). The logs must still hold every batch from the cut on.
    pub fn recover_from(
        config: Config,
        command_groups: S,
        restored_at: Option<&Cut>,
        durable: &BTreeMap<Group, Durable>,
        now_ms: u64,
    ) -> Replica<S> {
        let mode = config.mode;
        let workers = mode.executing_workers(config.workers);
        let plan = Plan::new(workers, config.bugs.plan);
        let cut_bugs = config.bugs.cut;
        let mut replica = Replica {
            mode,
            workers,
            command_groups,
            groups: Groups::recover(config, durable, now_ms),
            merges: Vec::new(),
            plan,
            restored_at: None,
            cuts: BTreeMap::new(),
            cut_bugs,
            answers: BTreeMap::new(),
            next_batch: BTreeMap::new(),
            behind: None,
            installing: None,
            cuts_installed: 0,
            since_cut: SinceCut::default(),
            cut_proposed_ms: None,
            rejoining: false,
        };
        replica.start_at(restored_at);
        replica
    }

    /// Starts the merges, the plan and the client tables at `cut` (the service was restored
    /// there), or at the start of every log when `None`: what the cut covers is not handed on
    /// again.
    fn start_at(&mut self, cut: Option<&Cut>) {
        let config = self.groups.config();
        let bugs = config.bugs;
        self.merges = match self.mode {
            Mode::Psmr => (0..self.workers)
                .map(|i| {
                    let groups = [Group::Worker(WorkerId(i)), Group::All];
                    match cut {
                        Some(cut) => Merge::resume(&groups, cut, bugs.merge),
                        None => Merge::new(&groups, bugs.merge),
                    }
                })
                .collect(),
            Mode::SpSmr | Mode::Smr | Mode::NoRep => Vec::new(),
        };
        self.next_batch = (self.mode.groups(config.workers).into_iter())
            .map(|g| (g, cut.map_or(Instance(0), |cut| cut.truncate_below(g))))
            .collect();
        self.plan = Plan::new(self.workers, bugs.plan);
        self.answers = cut.map(|cut| cut.clients.clone()).unwrap_or_default();
        self.restored_at = cut.cloned();
        self.cuts.clear();
        self.behind = None;
        self.since_cut = SinceCut::default();
        self.cut_proposed_ms = None;
        self.route();
    }

    /// Makes this replica rejoin after its groups' stable storage was lost
    /// (`docs/lost-disk.md`, "The psmr engine"): every group runs the log engine's rejoin
    /// ([`logless_multipaxos::replica::Replica::start_rejoin`]): it sends Recovery in `attempt`
    /// (which must differ from every earlier rejoin of this replica's: the runtime's
    /// incarnation serves), adopts the view every other replica answered, and catches up
    /// (from the log, or from a peer's group snapshot and the cut it carries) to the highest
    /// instance answered; meanwhile that group votes, promises and leads nothing. Until
    /// **every** group has recovered ([`Replica::rejoining`]) the replica takes no client
    /// request ([`RequestError::Rejoining`]), hands nothing the groups deliver on to a merge
    /// or the plan (it stays with the groups), installs no cut and proposes no snapshot
    /// request: a merge that waited on a group still rejoining would stall the workers of the
    /// groups already back, and a cut is installed once, from the newest any group brought.
    /// Then it is an ordinary replica: what the groups delivered is handed on in log order
    /// (after the cut to install, if one came), as after a restart.
    ///
    /// It may start from what an earlier, interrupted rejoin left in the groups' stores
    /// ([`Replica::recover`]; call it before any worker polls): the runtime rejoins again at
    /// every start until one completed durably. Without replication there are no groups, and this does nothing.
    pub fn start_rejoin(&mut self, now_ms: u64, attempt: Epoch) {
        if self.mode == Mode::NoRep {
            return;
        }
        self.rejoining = true;
        self.groups.start_rejoin(now_ms, attempt);
        // What the recovery handed on from the groups' stores (an interrupted rejoin's
        // catch-up, a cut it brought) is taken back, to be handed on once every group is back.
        self.installing = None;
        self.groups.rewind();
        let restored_at = self.restored_at.clone();
        self.start_at(restored_at.as_ref());
    }

    /// Whether this replica rejoins after a lost disk and some group has not recovered yet
    /// (see [`Replica::start_rejoin`]).
    pub fn rejoining(&self) -> bool {
        self.rejoining
    }

    /// The cut this replica waits to install, if it does: see [`Replica::install`].
    pub fn installing(&self) -> Option<&Cut> {
        self.installing.as_ref().map(|durable| &durable.cut)
    }

    /// Installs the cut the replica waits for, once no worker executes a command, and gives it:
    /// the runtime must restore its service from the cut's state before any worker polls again
    /// (under the lock it holds the replica with).
    ///
    /// A replica waits for a cut when some group's stream carries one whose position in that
    /// group is past the next batch the replica needs of it: the group's log was truncated past
    /// what this replica's service executed (it caught up from a peer's group snapshot, or
    /// restarted from an older cut than one such snapshot it had installed), and the cut the
    /// stream carries (see [`crate::stream`]) covers the gap. The newest cut any stream carries
    /// is installed, all groups together: the merges, client tables and next batches start at
    /// it, every stream carries it and drops what it covers, and every stream hands its
    /// retained batches on again (those the cut covers are dropped). Meanwhile nothing is
    /// handed on and no worker starts a command ([`Replica::poll`]); the commands the workers
    /// executed before are a prefix of the total order, so the state they left is simply
    /// replaced. `docs/psmr-snapshots.md`, "Catch-up past a peer's truncation", argues that
    /// every stream holds every batch from the installed cut's position on.
    pub fn install(&mut self) -> Option<DurableCut> {
        if self.installing.is_none() || self.plan.is_executing() {
            return None;
        }
        let durable = self.installing.take()?;
        self.groups.release(&durable, 0);
        self.groups.rewind();
        self.cuts_installed += 1;
        self.start_at(Some(&durable.cut));
        if self.cut_bugs.install_without_state {
            return None;
        }
        Some(durable)
    }

    /// How many cuts this replica installed (see [`Replica::install`]).
    pub fn cuts_installed(&self) -> u64 {
        self.cuts_installed
    }

    /// The groups' logs, to inspect.
    pub fn groups(&self) -> &Groups {
        &self.groups
    }

    /// The execution plan, to inspect.
    pub fn plan(&self) -> &Plan {
        &self.plan
    }

    /// A client request: ordered in the group C-G picks (P-SMR), in the one stream (sP-SMR,
    /// SMR), or scheduled at once (no replication). A request whose command was executed
    /// already (its number is at most the last one of its client in its group's client table)
    /// is not ordered again: [`Replica::answer_of`] gives the reply to a retry of the last.
    pub fn handle_request(&mut self, now_ms: u64, request: Request) -> Result<(), RequestError> {
        if self.rejoining {
            return Err(RequestError::Rejoining);
        }
        let group = match self.mode {
            Mode::Psmr => self.group_of(&request),
            Mode::SpSmr | Mode::Smr => Group::All,
            Mode::NoRep => {
                self.schedule(request);
                return Ok(());
            }
        };
        let executed = (self.answers.get(&group))
            .and_then(|table| table.get(&request.client))
            .is_some_and(|(seq, _)| *seq >= request.seq);
        if executed {
            return Ok(());
        }
        self.groups.handle_request(now_ms, group, request)?;
        self.route();
        Ok(())
    }

    /// A message of `group`'s log from replica `from`.
    pub fn handle_message(&mut self, now_ms: u64, from: NodeId, group: Group, message: Message) {
        self.groups.handle_message(now_ms, from, group, message);
        self.route();
    }

    /// The passing of time (heartbeats, timeouts), skips in the groups this replica leads that
    /// a merge waits on, and the periodic snapshot request when this replica leads `g_all`
    /// (see [`Config::cut_every_bytes`](crate::config::Config::cut_every_bytes)).
    pub fn tick(&mut self, now_ms: u64) {
        self.propose_cut_if_due(now_ms);
        self.groups.tick(now_ms);
        self.route();
        // Each group waited on, with the highest stamp a merge needs of it.
        let mut waited_on: BTreeMap<Group, u64> = BTreeMap::new();
        let skips = !self.groups.config().bugs.no_skips;
        for wait in (self.merges.iter().filter(|_| skips)).filter_map(Merge::blocked_on) {
            let stamp_ms = waited_on.entry(wait.group).or_default();
            *stamp_ms = (*stamp_ms).max(wait.stamp_ms);
        }
        for (group, stamp_ms) in waited_on {
            self.groups.skip_if_due(now_ms, group, stamp_ms);
        }
        self.route();
    }

    /// Takes everything the groups produced: commit it before sending anything.
    pub fn take_ready(&mut self) -> Ready {
        self.groups.take_ready()
    }

    /// Asks for a snapshot: proposes a snapshot request in `g_all` (see [`crate::cut`]). Any
    /// replica may; one proposed by two at the same point runs once. Without replication there
    /// is no log to cut, and this does nothing; nor while the replica rejoins
    /// ([`Replica::start_rejoin`]).
    pub fn request_snapshot(&mut self, now_ms: u64) {
        if !self.rejoining && self.groups.propose_snapshot(now_ms) {
            self.route();
        }
    }

    /// The cut of the snapshot request `request`, once every worker's merge has handed it on
    /// (always so when worker 0 executes it: every worker is then at its barrier). The service
    /// serialised right after executing it, with this cut, is the snapshot. Given once.
    pub fn take_cut(&mut self, request: &Request) -> Option<Cut> {
        if !is_snapshot(request) || !self.cuts.get(&request.seq)?.is_complete() {
            return None;
        }
        let mut cut = self.cuts.remove(&request.seq)?.cut;
        if !self.cut_bugs.drop_client_tables {
            cut.clients = self.answers.clone();
        }
        Some(cut)
    }

    /// The runtime made `durable` durable (the node's snapshot file, written and flushed: the
    /// cut with the service's state at it): each group's stream carries it and drops the
    /// batches below its position, and its next own snapshot truncates them from its log (see
    /// [`crate::stream`]). A restart then needs this cut, or the one a group's snapshot
    /// carries: the groups' durable state holds nothing below it. A runtime restarting from
    /// its snapshot file passes that snapshot here too.
    pub fn cut_durable(&mut self, durable: &DurableCut) {
        let extra = if self.cut_bugs.release_past_cut {
            u64::MAX
        } else {
            0
        };
        self.groups.release(durable, extra);
    }

    /// A worker executed `command` and the service replied `reply`: the reply goes into the
    /// client table of the group that ordered it, which a cut copies (under P-SMR the group
    /// the command was delivered in, otherwise `g_all`, the one log). Call it for every command
    /// executed, before [`Replica::executed`], so that a worker at a barrier has recorded
    /// every command it executed before.
    pub fn answered(&mut self, command: &Delivered, reply: Bytes) {
        let request = &command.request;
        if is_snapshot(request) {
            return;
        }
        let group = match self.mode {
            Mode::Psmr => command.group,
            Mode::SpSmr | Mode::Smr | Mode::NoRep => Group::All,
        };
        let table = self.answers.entry(group).or_default();
        let newer = (table.get(&request.client)).is_none_or(|(seq, _)| *seq < request.seq);
        if newer {
            table.insert(request.client, (request.seq, reply));
        }
    }

    /// The reply to `request` if it is the last command of its client executed in its group
    /// (a retry), from the client tables (restored from a cut after a restart).
    pub fn answer_of(&self, request: &Request) -> Option<&Bytes> {
        let group = match self.mode {
            Mode::Psmr => self.group_of(request),
            Mode::SpSmr | Mode::Smr | Mode::NoRep => Group::All,
        };
        let (seq, reply) = self.answers.get(&group)?.get(&request.client)?;
        (*seq == request.seq).then_some(reply)
    }

    /// The first group in which this replica found a gap that no cut covers, if it did: a
    /// batch delivered past the next one it needs, while no group's stream carries a cut past
    /// it (a gap [`Replica::install`] closes is not one). That takes a group whose durable
    /// state lost batches from its cut's position on, outside the fault model (the deliberate
    /// bug [`CutBugs::release_past_cut`] does it). The replica then hands nothing on, in any
    /// group, rather than execute commands out of order, and cannot go on.
    pub fn behind(&self) -> Option<Group> {
        self.behind
    }

    /// What `worker` does next (see [`Plan::poll`]); nothing while a cut waits to be installed
    /// ([`Replica::install`]).
    pub fn poll(&mut self, worker: WorkerId) -> Step {
        if self.installing.is_some() {
            return Step::Idle;
        }
        self.plan.poll(worker)
    }

    /// Whether a poll of `worker` now would do something (see [`Plan::is_runnable`]).
    pub fn is_runnable(&self, worker: WorkerId) -> bool {
        self.installing.is_none() && self.plan.is_runnable(worker)
    }

    /// `worker` finished its command (see [`Plan::executed`]).
    pub fn executed(&mut self, worker: WorkerId) {
        self.plan.executed(worker);
    }

    /// C-G of `request`'s command: a command that does not decode goes to `g_all`, where the
    /// service answers it with its error.
    fn group_of(&self, request: &Request) -> Group {
        self.command_groups
            .group_of_encoded(&request.payload, self.workers)
    }

    /// Proposes a snapshot request in `g_all` if this replica leads it and the groups have
    /// delivered enough since the last one; once per [`CUT_REPROPOSE_MS`] until one is
    /// delivered.
    fn propose_cut_if_due(&mut self, now_ms: u64) {
        let config = self.groups.config();
        let due = self.since_cut.bytes >= config.cut_every_bytes
            || self.since_cut.all_instances >= config.cut_every_instances;
        let waiting =
            (self.cut_proposed_ms).is_some_and(|at| now_ms < at.saturating_add(CUT_REPROPOSE_MS));
        if due && !waiting && !self.rejoining && self.groups.leads(Group::All) {
            self.cut_proposed_ms = Some(now_ms);
            self.request_snapshot(now_ms);
        }
    }

    /// Whether `group`'s `batch` is the next one to hand on: one handed on before is dropped,
    /// one past a gap stops the replica (see [`Replica::behind`]).
    fn is_next(&mut self, group: Group, instance: Instance) -> bool {
        let next = self.next_batch.entry(group).or_default();
        if instance < *next {
            return false;
        }
        if instance > *next {
            self.behind.get_or_insert(group);
        }
        if self.behind.is_some() {
            return false;
        }
        *next = instance.next();
        true
    }

    /// The cut to install, if some group's stream carries one past the next batch this
    /// replica needs of that group: the newest cut any stream carries (see
    /// [`Replica::install`]).
    fn cut_to_install(&self) -> Option<DurableCut> {
        let gap = self.groups.cuts().any(|(group, durable)| {
            let next = self.next_batch.get(&group).copied().unwrap_or_default();
            durable.cut.truncate_below(group) > next
        });
        if !gap {
            return None;
        }
        let newest = (self.groups.cuts().map(|(_, durable)| durable)).reduce(|newest, d| {
            if d.cut.is_after(&newest.cut) {
                d
            } else {
                newest
            }
        });
        newest.cloned()
    }

    /// Hands what the groups delivered on towards the plan, unless a cut must be installed
    /// first: then it stays with the groups, handed on again once the cut is installed.
    fn route(&mut self) {
        if self.rejoining {
            if self.groups.not_serving().next().is_some() {
                return;
            }
            self.rejoining = false;
        }
        if self.installing.is_none() {
            self.installing = self.cut_to_install();
        }
        if self.installing.is_some() {
            return;
        }
        for (group, batch) in self.groups.take_delivered() {
            if !self.is_next(group, batch.instance) {
                continue;
            }
            self.since_cut.bytes += batch.size_bytes();
            if group == Group::All {
                self.since_cut.all_instances += 1;
                self.note_snapshot_requests(&batch);
            }
            let batch = match &self.restored_at {
                Some(cut) => match cut.remaining(group, batch) {
                    Some(batch) => batch,
                    None => continue,
                },
                None => batch,
            };
            match self.mode {
                Mode::Psmr => self.push_to_merges(group, batch),
                Mode::SpSmr | Mode::NoRep => batch.requests.into_iter().for_each(|r| {
                    self.schedule(r);
                }),
                Mode::Smr => {
                    for request in batch.requests {
                        let group = Group::Worker(WorkerId(0));
                        self.plan.deliver(WorkerId(0), Delivered { group, request });
                    }
                }
            }
        }
        self.drain_merges();
    }

    /// Starts the cut of each snapshot request in a batch of `g_all` that the restored cut (if
    /// any) does not cover: `g_all`'s position is right after the request; each worker's group's
    /// comes when that worker's merge hands the batch on (P-SMR only: in the other modes
    /// `g_all` is the only log).
    fn note_snapshot_requests(&mut self, batch: &crate::stream::DeliveredBatch) {
        let covered = self
            .restored_at
            .as_ref()
            .and_then(|cut| cut.positions.get(&Group::All))
            .map_or(0, |at| match batch.instance.cmp(&at.instance) {
                std::cmp::Ordering::Less => usize::MAX,
                std::cmp::Ordering::Equal => usize::try_from(at.requests).expect("fits"),
                std::cmp::Ordering::Greater => 0,
            });
        let groups = match self.mode {
            Mode::Psmr => usize::from(self.workers) + 1,
            Mode::SpSmr | Mode::Smr | Mode::NoRep => 1,
        };
        for (index, request) in batch.requests.iter().enumerate().skip(covered) {
            if !is_snapshot(request) {
                continue;
            }
            self.since_cut = SinceCut::default();
            self.cut_proposed_ms = None;
            let position = Position {
                instance: batch.instance,
                requests: u32::try_from(index + 1).expect("a batch's requests fit u32"),
            };
            let cut = Cut {
                stamp_ms: batch.stamp_ms,
                positions: [(Group::All, position)].into(),
                clients: BTreeMap::new(),
            };
            self.cuts.insert(request.seq, PendingCut { cut, groups });
        }
    }

    fn push_to_merges(&mut self, group: Group, batch: crate::stream::DeliveredBatch) {
        match group {
            Group::Worker(worker) => self.merges[usize::from(worker.0)].push(group, batch),
            Group::All => {
                for merge in &mut self.merges {
                    merge.push(group, batch.clone());
                }
            }
        }
    }

    /// Hands every batch the merges can order to the plan (P-SMR).
    fn drain_merges(&mut self) {
        for (index, merge) in self.merges.iter_mut().enumerate() {
            let worker = WorkerId(u16::try_from(index).expect("workers counted in u16"));
            while let Some((group, batch)) = merge.pop() {
                if group == Group::All {
                    let own = Group::Worker(worker);
                    let mut at = merge.handed_on_below(own);
                    if self.cut_bugs.past_position {
                        at = at.next();
                    }
                    for request in batch.requests.iter().filter(|r| is_snapshot(r)) {
                        if let Some(pending) = self.cuts.get_mut(&request.seq) {
                            let position = Position {
                                instance: at,
                                requests: 0,
                            };
                            pending.cut.positions.insert(own, position);
                        }
                    }
                }
                for request in batch.requests {
                    self.plan.deliver(worker, Delivered { group, request });
                }
            }
        }
    }

    /// The scheduler of sP-SMR and no replication: a command goes to the worker C-G names, or
    /// to every worker (to run in synchronous mode) when C-G sends it to all.
    fn schedule(&mut self, request: Request) {
        let group = if is_snapshot(&request) {
            Group::All
        } else {
            self.group_of(&request)
        };
        match group {
            group @ Group::Worker(worker) => {
                self.plan.deliver(worker, Delivered { group, request });
            }
            Group::All => {
                for w in 0..self.workers {
                    let command = Delivered {
                        group: Group::All,
                        request: request.clone(),
                    };
                    self.plan.deliver(WorkerId(w), command);
                }
            }
        }
    }
}
