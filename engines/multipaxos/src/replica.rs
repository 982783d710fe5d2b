//! One replica: proposer, acceptor and learner of every instance, the client table and the
//! state machine, as one sans-IO state machine.
//!
//! The runtime feeds it client requests ([`Replica::handle_request`]), messages
//! ([`Replica::handle_message`]) and the passing of time ([`Replica::tick`], every few
//! milliseconds), and after each call takes a [`Ready`] with [`Replica::take_ready`]. It must
//! commit the ready through its [`LogStore`](crate::persist::LogStore) (which writes and flushes
//! the records) and only then send the released messages and deliver the released replies.
//!
//! # Roles
//! A replica is the follower of its view's leader, a candidate collecting promises for a view it
//! leads, or the leader of its view:
//!
//! * **Follower.** Votes for the leader's Proposes (writing each vote before its Accept) and
//!   broadcasts its Accepts. When it has not heard from its leader for the suspect timeout
//!   (times the number of views until the next one it leads), it starts a view change.
//! * **Candidate.** Has written the new view and sent Prepare. Collects Promises; once a
//!   majority covers every instance from its first undecided one, it learns every decision they
//!   report, proposes again the value of the highest view found in each other instance, fills
//!   instances nobody voted in with no-ops, and leads.
//! * **Leader.** Batches client requests (closing a batch by bytes, by count or by the age of
//!   its oldest request) and keeps up to a window of instances proposed and undecided. Sends
//!   Alive as a heartbeat, and sends Proposes again to replicas whose Accept it has not seen.
//!
//! **Restarts.** A replica restarted from its durable state ([`Replica::recover`],
//! [`Replica::resume`]) knows the view it promised before it went down, which may be far behind
//! the others'. Were it to suspect its leader at once, its Prepare for a higher view would
//! depose the working leader, and as a candidate it could complete the view change only after
//! catching up on everything decided while it was down: the whole cluster would wait for it.
//! So for [`Config::restart_quiet_ms`] from its first tick, unless it hears from a leader (a
//! Prepare, Propose or Alive of its view or a higher one) first, it starts no view change: as a
//! follower it does not suspect, and a replica that restarted in a view it leads runs phase 1
//! in that view (harmless: the others ignore it if they moved on) without moving on to a
//! higher one. Once it has heard from a leader, or the quiet time is over, the usual rules
//! apply, the follower's wait counted from there; a cluster restarted whole, whose last leader
//! stays down, thus fails over after the quiet time and a suspect timeout. A restarted replica
//! is usually behind: while it knows it is (it is catching up), it waits for its leader as if
//! it were last in line, so that a replica up to date suspects first when the leader falls
//! silent, and the lagging one follows it rather than holding everyone in a view it cannot
//! lead yet.
//!
//! Every replica decides an instance once it holds the batch proposed in a view and Accepts of
//! that view from a majority (the leader's Propose and its own vote count), and executes decided
//! batches strictly in instance order. A request already in the client table is not executed
//! again, however many instances decided it.
//!
//! # Snapshots, truncation and catch-up
//! After executing, a replica takes a snapshot when the log has grown enough since the last one
//! (see [`Config::snapshot_log_bytes_min`] and [`Config::snapshot_ratio_percent`]), and then
//! truncates the log below its *previous* snapshot, so that a replica only a little behind can
//! still catch up from the log alone. A replica learns that it is behind from the leader's Alive,
//! from a Propose far ahead, or from a Promise whose sender truncated instances it lacks; it then
//! asks a replica other than the leader first for the decided instances, and gets the
//! responder's snapshot with them when some were truncated.
//!
//! Under [`Config::background_snapshots`] the periodic snapshot is not encoded in the step: the
//! replica hands the runtime a consistent copy of the state ([`StateMachine::snapshot_deferred`])
//! and its metadata in the [`Ready`] ([`SnapshotJob`]), which the runtime encodes and writes off
//! its loop once the ready's records are durable, and reports with
//! [`Replica::snapshot_durable`]. Until then the replica takes no other (one in flight; its
//! log grows on), serves lagging replicas its previous snapshot, and truncates nothing; the
//! report truncates below the snapshot before, as above. The rule is the same as in the step:
//! the log is truncated only behind a durable snapshot, and a crash before the report leaves
//! the previous snapshot and the whole log after it.
//!
//! Under [`Snapshots::OnDemand`] (mPaxosSM: the state machine keeps its state durable itself)
//! no snapshot is taken after executing: the replica writes a *checkpoint* (a snapshot record
//! without state: next instance, stamp, client table) each time the log has grown by
//! [`Config::snapshot_log_bytes_min`], and truncates below the previous checkpoint. A replica
//! behind the truncation gets a snapshot taken when it asks (a consistent copy: the replica
//! executes nothing in between), kept for its next pieces; the truncation does not pass it
//! while it is asked for, and it is dropped once a checkpoint interval went by without a query
//! naming it. A checkpoint never shares a [`Ready`] with an installed snapshot: the installed
//! state is durable before a checkpoint supersedes it as the newest snapshot record, so a
//! runtime can redo an install a crash interrupted from it.
//!
//! A snapshot travels in pieces of at most [`Config::snapshot_chunk_bytes`] of its state
//! ([`SnapshotChunk`]), so that a state of any size fits the transport's frames. The lagging
//! replica pulls them: each query names the snapshot it is receiving and how many bytes it holds
//! ([`ChunkCursor`]), and the responder cuts the next piece from the snapshot it keeps (no copy
//! per piece). The receiver keeps at most one snapshot in assembly, from one sender (in one
//! epoch of it): a piece at another offset is dropped, a lost one is asked for again when the
//! query times out, a first piece of a newer snapshot starts over, and the sender is given up
//! for another after [`SNAPSHOT_SENDER_RETRIES`] timeouts in a row. The snapshot is installed
//! only once its state is complete, with the client table the last piece carries; the
//! transport's checksums cover the bytes of every piece.
//!
//! # EpochSS: recovery from peers (seed 002 §V-C)
//! Under [`Recovery::Epoch`] a replica writes nothing but its epoch, raised at every start
//! ([`Replica::start_epoch`]); its log, votes, views and snapshots live in memory. The runtime
//! sends every message with the sender's epoch, and a replica drops a message from a peer
//! whose epoch is older than the newest it has heard from that peer: a message a replica sent
//! before it crashed (a *stray* one) cannot count once it has restarted. On a newer epoch it
//! also stops counting that peer's Accepts in undecided instances, its Propose as its vote and
//! its Promise, all of which the peer forgot.
//!
//! A restarted replica sends Recovery(epoch) until a majority of the *other* replicas answered,
//! among them the leader of the highest view they name, leading it. It adopts that view and
//! catches up until it has executed every instance below the highest decision any of them
//! knew; only then does it vote, promise, lead or take client requests. Until then its
//! [`Status`] is `Recovering`. Seed 002's Fig. 2 shows why the epochs are needed: without them
//! a restarted follower's stray Accept lets the old leader decide a value the follower no
//! longer reports, and a new leader decides another one in the same instance.
//!
//! A majority must keep its state: once more replicas are known to be recovering than the
//! cluster can lose, nobody can recover (each needs answers from a majority that kept its
//! state), and [`Replica::status`] says `StateLost` rather than let anyone serve a forgotten
//! state. A replica learns that a peer is recovering from its Recovery messages, which a peer
//! waiting for answers sends again every retransmission interval: it counts the peer as
//! recovering for [`RECOVERY_HEARD_INTERVALS`] of those intervals after the last one, and
//! no longer once anything else of that epoch came from it (the peer's recovery is then
//! over: a copy of one of its Recoveries arriving late does not count again). A peer that
//! recovered and has since sent nothing here (a follower of an idle leader sends nothing;
//! one that caught up from another follower sent the leader only Recoveries; a partition)
//! must not count on: with another replica restarting, the ones that kept their state would
//! say `StateLost` and refuse service while the cluster can serve. A peer still waiting for
//! answers whose Recoveries are lost for a while may go uncounted meanwhile: the refusal then
//! says LOADING (or a serving replica takes operations that cannot be decided) rather than
//! CLUSTERDOWN, which changes no decision.
//!
//! Not covered: a Promise a replica sent before crashing to a candidate that is not among the
//! replicas answering its Recovery still counts there; the replica, once recovered, follows
//! the highest view it was told about and may vote in a lower view than it promised. Closing
//! that window would take more than a majority's answers; it is left open here.
//!
//! # mPaxos: resumption from persistent memory (seed 002 §V-B)
//! Under [`Recovery::Pmem`] a replica writes the records FullSS writes, to persistent memory.
//! After a restart [`Replica::resume`] takes its views, votes and decisions as they are and it
//! takes part at once; it executes nothing (its [`Status`] is `Rebuilding`) until the runtime
//! hands over the state machine restored from the persistent snapshot
//! ([`Replica::finish_rebuild`]), which it then brings up to date by executing the decided
//! instances after the snapshot.
//!
//! # Rejoining after a lost disk (FullSS and mPaxos)
//! A FullSS or mPaxos replica whose stable storage was lost has forgotten its promises and votes, as an
//! EpochSS replica after a restart, but its peers track no epochs. [`Replica::start_rejoin`]
//! makes it recover the same way, with two differences that close the window above and need
//! no epochs: it waits for the answers of *every* other replica, and a FullSS replica that
//! receives a Recovery first stops counting what the sender said before (its Accepts in
//! undecided instances, its Propose as its vote, its Promise to this candidate) and only then
//! answers. A leading replica answers, as the instance to catch up to, the one after the
//! highest it has proposed, not only after the highest it knows decided: every instance where
//! the lost votes may have helped choose a value lies below it. `docs/lost-disk.md` gives the
//! argument. Under mPaxos the rejoin ends a rebuild still outstanding itself, before its first
//! message, so that one state machine runs the whole catch-up (see [`Replica::start_rejoin`]).
//!
//! # Stamps: one clock for expiry, monotonic across view changes
//! A leader stamps each batch it closes with `max(now, highest stamp seen)`, where a replica
//! has *seen* the stamp of every batch it proposed, voted for, learned decided, found in a
//! Promise or executed, and of every snapshot it took or installed (its durable log and
//! snapshot give them back after a restart). The state machine executes a batch at its
//! *execution stamp*, the batch's stamp raised to the highest execution stamp before it
//! ([`StateMachine::begin_batch`]); a snapshot records it. Two properties follow:
//!
//! * **Replicas agree on time.** The execution stamp is a function of the decided log prefix
//!   (and snapshots carry it), so every replica evaluates every expiry at the same instant.
//! * **Time does not go back after a failover.** Let a batch with stamp `s` be decided in
//!   instance `i`, and let `L` complete phase 1 of a later view with a majority `Q`. A majority
//!   voted for the batch, so some member of `Q` voted for it. If `i` is below `L`'s first
//!   undecided instance, `L` executed it (or holds a snapshot past it, whose stamp is at least
//!   `s`); otherwise that member's Promise reports its vote in `i`, and by Paxos the vote of the
//!   highest view there carries the decided batch, with its stamp. Either way `L` has seen `s`
//!   before it closes a batch, so every batch it stamps has a stamp of at least `s`: a new
//!   leader never stamps below what was executed (or accepted by a majority) before it. Batches
//!   proposed again keep their old stamps and may be out of order among themselves (two views
//!   each left a vote in a different instance); the raise at execution absorbs that.
use std::collections::{BTreeMap, BTreeSet, VecDeque};

use crate::config::{Config, Recovery, Snapshots};
use crate::ids::{ClientId, Epoch, Instance, NodeId, RequestSeq, View};
use crate::message::{
    Batch, ChunkCursor, ClientReply, ClientTable, Envelope, Message, PromisedEntry, Request,
    Snapshot, SnapshotChunk,
};
use crate::persist::{Durable, Ready, Record, SnapshotJob};
use crate::state_machine::StateMachine;

/// How many catch-up timeouts in a row a replica waits for the next piece of a snapshot from
/// the replica sending it before it gives the snapshot up and asks another replica.
pub const SNAPSHOT_SENDER_RETRIES: u32 = 3;

/// Counters of what a replica did.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Stats {
    /// View changes started by this replica.
    pub view_changes_started: u64,
    /// Views this replica came to lead.
    pub views_led: u64,
    /// Batches proposed (including re-proposals and no-ops).
    pub batches_proposed: u64,
    /// No-ops proposed to fill gaps.
    pub noops_proposed: u64,
    /// Requests executed by the state machine.
    pub requests_executed: u64,
    /// Decided requests not executed because the client table showed them executed.
    pub duplicates_skipped: u64,
    /// Snapshots taken (under [`Snapshots::OnDemand`]: for lagging replicas).
    pub snapshots_taken: u64,
    /// Checkpoints written ([`Snapshots::OnDemand`]).
    pub checkpoints_taken: u64,
    /// Snapshots installed from another replica.
    pub snapshots_installed: u64,
    /// Pieces of snapshots received and kept (in order, of the snapshot being received).
    pub snapshot_chunks_received: u64,
    /// Catch-up queries sent.
    pub catch_up_queries: u64,
    /// Decisions from the network that contradicted one already known (and were ignored).
    pub conflicting_decisions: u64,
    /// Recoveries from peers completed (EpochSS).
    pub recoveries: u64,
}

/// Whether a replica takes part in the protocol (see "EpochSS" above).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Status {
    /// It takes part: votes, leads, executes and answers clients.
    Serving,
    /// It restarted under EpochSS without its state and recovers it from its peers: it votes
    /// for nothing and drops client requests until it has caught up.
    Recovering,
    /// More replicas restarted under EpochSS without their state than the cluster can lose
    /// (a majority must keep it): nobody can recover, and the cluster must not serve, since it
    /// would serve a forgotten state. An operator has to restore it from elsewhere.
    StateLost,
    /// It resumed under mPaxos ([`Replica::resume`]): it votes, leads and takes client
    /// requests, but executes nothing until its state machine has been rebuilt from the
    /// persistent snapshot ([`Replica::finish_rebuild`]); replies wait until then.
    Rebuilding,
}

/// What the replica knows of one instance.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
struct Entry {
    /// Its last vote: the view and the batch proposed in it.
    vote: Option<(View, Batch)>,
    /// The replicas known to have voted in the highest view heard of (besides this replica and
    /// that view's leader, which count through `vote`).
    accepts: Option<(View, BTreeSet<NodeId>)>,
    /// The decided batch.
    decided: Option<Batch>,
    /// The leader of the vote's view restarted since (EpochSS) and forgot its own vote, so its
    /// Propose no longer counts as one.
    proposer_forgot: bool,
}

/// A Promise a candidate collected.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Promised {
    log_start: Instance,
    entries: Vec<(Instance, PromisedEntry)>,
}

/// A replica collecting promises for the view it leads.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Candidate {
    promises: BTreeMap<NodeId, Promised>,
    /// When the view change started; it is given up for the next view after a suspect timeout.
    started_ms: u64,
    /// When Prepare was last sent.
    sent_ms: u64,
}

/// A replica leading its view.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Leader {
    /// The next instance to propose in.
    next_instance: Instance,
    /// When the next Alive is due.
    alive_due_ms: u64,
    /// When unanswered Proposes are next sent again.
    retransmit_due_ms: u64,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum Role {
    Follower,
    Candidate(Candidate),
    Leader(Leader),
}

/// A client request waiting to be proposed.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Pending {
    arrived_ms: u64,
    request: Request,
}

/// The catch-up protocol's state.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
struct CatchUp {
    /// Every instance below this one is known to be decided somewhere.
    target: Instance,
    /// The replica asked, and when; `None` when no query is outstanding.
    asked: Option<(NodeId, u64)>,
    /// Queries sent, which picks the next replica to ask.
    attempts: u64,
}

/// A snapshot in assembly from the pieces another replica sends (see "Snapshots, truncation
/// and catch-up" above). Every piece must name the same snapshot and start where the state
/// received so far ends.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Receiving {
    /// The sender, and its epoch when it sent the first piece.
    from: NodeId,
    epoch: Epoch,
    next_instance: Instance,
    stamp_ms: u64,
    state_bytes: u64,
    /// The state's bytes received so far, in order.
    state: Vec<u8>,
    /// Catch-up timeouts since the last piece arrived.
    stalls: u32,
}

impl Receiving {
    fn is_of(&self, from: NodeId, epoch: Epoch, chunk: &SnapshotChunk) -> bool {
        (
            self.from,
            self.epoch,
            self.next_instance,
            self.stamp_ms,
            self.state_bytes,
        ) == (
            from,
            epoch,
            chunk.next_instance,
            chunk.stamp_ms,
            chunk.state_bytes,
        )
    }

    fn cursor(&self) -> ChunkCursor {
        ChunkCursor {
            next_instance: self.next_instance,
            offset: self.state.len() as u64,
        }
    }
}

/// What a replica under EpochSS knows of a peer.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
struct Peer {
    /// The newest epoch heard from it: its messages from earlier epochs are dropped.
    epoch: Epoch,
    /// When its last Recovery in `epoch` arrived, while nothing else of that epoch has: it
    /// restarted and has no state. Forgotten [`RECOVERY_HEARD_INTERVALS`] retransmission
    /// intervals later (see "EpochSS" above).
    recovery_heard_ms: Option<u64>,
    /// It sent something other than a Recovery in `epoch`: its recovery there is over.
    recovered: bool,
}

/// How many retransmission intervals a peer counts as recovering after its last Recovery
/// arrived, as a fraction (3/2): a peer waiting for answers sends one every interval (at the
/// tick after it is due), so one that stayed away for half an interval more has stopped.
pub const RECOVERY_HEARD_INTERVALS: (u64, u64) = (3, 2);

/// An answer to this replica's Recovery.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct RecoveryAnswer {
    view: View,
    leading: bool,
    decided_below: Instance,
}

/// A replica restarted under EpochSS, named after what it waits for.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum Recovering {
    /// Answers to its Recovery from a majority of the other replicas, among them the leader
    /// of the highest view they name, leading it.
    Answers {
        answers: BTreeMap<NodeId, RecoveryAnswer>,
        /// When Recovery was last sent.
        sent_ms: u64,
    },
    /// Every instance below `target` decided and executed here.
    CatchingUp { target: Instance },
}

/// A Multi-Paxos replica over the state machine `S`.
///
/// It can be cloned, compared and hashed (when `S` can) so that a model checker can keep it
/// in its states; nothing else needs that.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Replica<S> {
    config: Config,
    state_machine: S,
    /// The highest view promised (durable).
    view: View,
    role: Role,
    log: BTreeMap<Instance, Entry>,
    /// The first instance in the log; every one below is covered by the snapshot.
    log_start: Instance,
    /// The next instance to execute: every instance below it is decided and executed.
    next_execute: Instance,
    clients: ClientTable,
    /// The requests this replica received from clients and must answer.
    waiting: BTreeMap<ClientId, RequestSeq>,
    pending: VecDeque<Pending>,
    /// The requests in `pending`, to refuse a second copy of one without a scan.
    pending_ids: BTreeSet<(ClientId, RequestSeq)>,
    pending_bytes: usize,
    snapshot: Option<Snapshot>,
    log_bytes_since_snapshot: u64,
    /// Under [`Snapshots::OnDemand`]: the snapshot taken for lagging replicas, and whether one
    /// asked for it since the last checkpoint.
    served: Option<(Snapshot, bool)>,
    /// Under [`Snapshots::OnDemand`]: a snapshot was installed since the last
    /// [`Replica::take_ready`], so no checkpoint is written before the next.
    installed_in_ready: bool,
    /// Under [`Config::background_snapshots`]: the snapshot handed to the runtime and not yet
    /// reported durable (its first instance not covered), at most one.
    snapshot_in_flight: Option<Instance>,
    /// When the leader of the view was last heard from.
    leader_heard_ms: u64,
    /// After a restart, until it hears from a leader: the quiet time in which it starts no
    /// view change (see "Restarts" above), `Some(None)` until its first tick starts it.
    restart_quiet: Option<Option<u64>>,
    /// The highest batch or snapshot stamp this replica has seen (see "Stamps" above): the
    /// floor of the stamps it gives batches as leader.
    stamp_seen_ms: u64,
    /// The execution stamp of the last executed batch.
    stamp_executed_ms: u64,
    /// The clock of the latest input, for the deliberate bug `execute_at_local_clock` only.
    clock_ms: u64,
    catch_up: CatchUp,
    /// The snapshot being received, at most one.
    receiving: Option<Receiving>,
    /// This replica's epoch (EpochSS; 0 under FullSS).
    epoch: Epoch,
    /// What this replica knows of its peers' epochs (EpochSS).
    peers: BTreeMap<NodeId, Peer>,
    /// Set while this replica recovers its state from its peers (EpochSS).
    recovering: Option<Recovering>,
    /// Resumed under mPaxos and waiting for its rebuilt state machine: nothing is executed.
    rebuilding: bool,
    /// Under [`Snapshots::OnDemand`]: the instances whose vote of this replica is in records
    /// not yet taken by [`Replica::take_ready`], so not durable. Its vote does not count
    /// towards their decision yet: the state machine in place makes what it executes durable
    /// before the step's records, and a batch decided by a vote a crash then loses may never
    /// be chosen, yet stay executed in place.
    votes_unflushed: BTreeSet<Instance>,
    /// Under [`Snapshots::OnDemand`]: the instances of `votes_unflushed` the last
    /// [`Replica::take_ready`] took, their votes durable now: checked for a decision again.
    votes_taken: Vec<Instance>,
    ready: Ready,
    stats: Stats,
}

impl<S: StateMachine> Replica<S> {
    /// A replica that has never run, with an empty log (under EpochSS, in its first epoch:
    /// [`Replica::start_epoch`] with no epoch before).
    pub fn new(config: Config, state_machine: S, now_ms: u64) -> Replica<S> {
        match config.recovery {
            Recovery::FullSs | Recovery::Pmem => {
                Replica::from_durable(config, state_machine, &Durable::default(), now_ms)
            }
            Recovery::Epoch => Replica::start_epoch(config, state_machine, None, now_ms),
        }
    }

    /// A replica restarting from its durable state (FullSS): the snapshot is restored, the
    /// decided instances after it are executed again, and the replica follows the view it
    /// promised.
    ///
    /// # Panics
    /// If the configuration does not name this replica, allows no instance in flight, or asks
    /// for EpochSS (which restarts with [`Replica::start_epoch`]) or mPaxos (which resumes with
    /// [`Replica::resume`]).
    pub fn recover(config: Config, state_machine: S, durable: &Durable, now_ms: u64) -> Replica<S> {
        assert_eq!(
            config.recovery,
            Recovery::FullSs,
            "an EpochSS replica starts with start_epoch"
        );
        let quiet = Replica::<S>::quiet_after(&config);
        let mut replica = Replica::from_durable(config, state_machine, durable, now_ms);
        replica.restart_quiet = quiet;
        replica
    }

    /// A replica resuming from persistent memory (mPaxos, seed 002 §V-B): its view, votes,
    /// decisions, log start and snapshot metadata (next instance, stamp, client table) are
    /// taken as they are, and it takes part in the protocol at once. Its state machine is not
    /// restored and nothing is executed: `state_machine` stands in (it is never read) until the
    /// runtime hands over the machine restored from [`Replica::rebuild_from`]'s snapshot with
    /// [`Replica::finish_rebuild`]; [`Replica::status`] says `Rebuilding` until then. The stand-in
    /// must be empty: a rejoin ([`Replica::start_rejoin`]) rebuilds into it.
    ///
    /// # Panics
    /// If the configuration does not name this replica, allows no instance in flight, or does
    /// not ask for mPaxos.
    pub fn resume(config: Config, state_machine: S, durable: &Durable, now_ms: u64) -> Replica<S> {
        assert_eq!(config.recovery, Recovery::Pmem, "resume is mPaxos");
        let mut replica = Replica::from_parts(config, state_machine, durable, now_ms, false);
        replica.rebuilding = true;
        replica.restart_quiet = Replica::<S>::quiet_after(&replica.config);
        replica
    }

    /// The snapshot the state machine must be restored from before [`Replica::finish_rebuild`]
    /// (`None`: none was taken, the machine starts empty). `None` too once rebuilt, and under
    /// [`Snapshots::OnDemand`], whose machine is handed over holding its durable state.
    pub fn rebuild_from(&self) -> Option<&Snapshot> {
        let periodic = self.config.snapshots == Snapshots::Periodic;
        self.snapshot
            .as_ref()
            .filter(|_| self.rebuilding && periodic)
    }

    /// Rebuilds on the caller's thread: restores `empty` from [`Replica::rebuild_from`]'s
    /// snapshot and ends the rebuild with it ([`Replica::finish_rebuild`]). For harnesses and
    /// runtimes with no other thread to rebuild on; the replica then votes only after this.
    pub fn rebuild_now(&mut self, mut empty: S, now_ms: u64) {
        if let Some(snapshot) = self.rebuild_from() {
            empty.restore(&snapshot.state);
        }
        self.finish_rebuild(empty, now_ms);
    }

    /// Ends the rebuild after [`Replica::resume`]: `state_machine` holds the state of
    /// [`Replica::rebuild_from`]'s snapshot (or is empty if there was none), and the decided
    /// instances after it are executed now, answering the clients that waited. A machine
    /// handed over after the rebuild ended otherwise (a newer snapshot installed by catch-up,
    /// or a rejoin, which rebuilds itself) is dropped.
    pub fn finish_rebuild(&mut self, state_machine: S, now_ms: u64) {
        if !self.rebuilding && !self.config.bugs.late_rebuild_taken {
            return;
        }
        self.rebuilding = false;
        self.state_machine = state_machine;
        self.clock_ms = now_ms;
        self.settle(now_ms);
    }

    /// A replica under EpochSS starting in the epoch after `last`, the last one its stable
    /// storage holds (`None` at the very first start). The new epoch is the first thing its
    /// first [`Ready`] writes, before any message leaves.
    ///
    /// At the first start there is nothing to recover: the replica serves at once. After a
    /// restart its memory is empty, and it recovers from its peers (see "EpochSS" above)
    /// before it takes part.
    ///
    /// # Panics
    /// If the configuration does not name this replica, allows no instance in flight, or does
    /// not ask for EpochSS.
    pub fn start_epoch(
        config: Config,
        state_machine: S,
        last: Option<Epoch>,
        now_ms: u64,
    ) -> Replica<S> {
        assert_eq!(config.recovery, Recovery::Epoch, "start_epoch is EpochSS");
        let mut replica = Replica::from_durable(config, state_machine, &Durable::default(), now_ms);
        replica.epoch = last.map_or(Epoch(1), Epoch::next);
        replica.ready.raise_epoch(replica.epoch);
        if last.is_some() {
            replica.recovering = Some(Recovering::Answers {
                answers: BTreeMap::new(),
                sent_ms: now_ms,
            });
            replica.broadcast(&Message::Recovery {
                epoch: replica.epoch,
            });
        }
        replica
    }

    /// Makes this FullSS or mPaxos replica rejoin after its stable storage (or persistent
    /// memory) was lost (see "Rejoining after a lost disk" above): it votes, promises and
    /// serves nothing until every other replica answered its Recovery and it has caught up;
    /// [`Replica::status`] says `Recovering` until then. `attempt` must differ from every
    /// earlier rejoin of this replica's (answers to an earlier one are not taken); the
    /// runtime's incarnation serves. It may start from what an earlier, interrupted rejoin
    /// left in stable storage.
    ///
    /// A replica resumed under mPaxos and still rebuilding ([`Replica::resume`]) ends its
    /// rebuild here, on the caller's thread: the rejoin wins over the rebuild. It restores its
    /// persistent snapshot (none after a lost disk; what an interrupted rejoin installed
    /// otherwise) into the stand-in machine and executes the decided instances after it, as
    /// [`Replica::recover`] does, before its first Recovery leaves; the catch-up then runs on
    /// that one machine, and a machine the runtime hands over later
    /// ([`Replica::finish_rebuild`]) is dropped, whether or not a snapshot was installed
    /// meanwhile. A replica whose rebuild ended before the rejoin rejoins from the machine it
    /// was handed. (Voting at once, mPaxos's point, is moot here: a rejoining replica votes
    /// only once it caught up.)
    ///
    /// # Panics
    /// Under EpochSS, which recovers from its peers at every start anyway.
    pub fn start_rejoin(&mut self, now_ms: u64, attempt: Epoch) {
        assert!(
            self.config.recovery.writes_records(),
            "an EpochSS replica recovers at every start"
        );
        if self.config.bugs.rejoin_without_recovery {
            return;
        }
        self.clock_ms = now_ms;
        if self.rebuilding {
            if let Some(snapshot) = &self.snapshot {
                self.state_machine.restore(&snapshot.state);
            }
            self.rebuilding = false;
            self.execute_decided();
        }
        self.epoch = attempt;
        self.role = Role::Follower;
        self.recovering = Some(Recovering::Answers {
            answers: BTreeMap::new(),
            sent_ms: now_ms,
        });
        self.broadcast(&Message::Recovery { epoch: attempt });
    }

    fn from_durable(
        config: Config,
        state_machine: S,
        durable: &Durable,
        now_ms: u64,
    ) -> Replica<S> {
        Replica::from_parts(config, state_machine, durable, now_ms, true)
    }

    /// A replica from `durable`; with `execute`, the snapshot is restored into
    /// `state_machine` and the decided instances after it are executed.
    fn from_parts(
        config: Config,
        mut state_machine: S,
        durable: &Durable,
        now_ms: u64,
        execute: bool,
    ) -> Replica<S> {
        assert!(
            config.nodes.contains(&config.me),
            "a replica is in its cluster"
        );
        assert!(config.window_instances >= 1, "a window holds an instance");
        assert!(config.batch_requests_max >= 1, "a batch holds a request");
        assert!(
            config.snapshot_chunk_bytes >= 1,
            "a snapshot chunk holds a byte"
        );
        assert!(
            config.snapshots == Snapshots::Periodic || config.recovery == Recovery::Pmem,
            "on-demand snapshots need a state machine that keeps its state durable (mPaxosSM)"
        );
        let mut clients = ClientTable::new();
        let mut next_execute = Instance(0);
        let mut stamp_executed_ms = 0;
        if let Some(snapshot) = &durable.snapshot {
            if execute {
                state_machine.restore(&snapshot.state);
            }
            clients = snapshot.clients.clone();
            next_execute = snapshot.next_instance;
            stamp_executed_ms = snapshot.stamp_ms;
        }
        let stamp_seen_ms = durable
            .log
            .values()
            .flat_map(|e| e.vote.iter().map(|(_, b)| b).chain(&e.decided))
            .map(Batch::stamp_ms)
            .fold(stamp_executed_ms, u64::max);
        let log = durable
            .log
            .iter()
            .map(|(&i, e)| {
                let entry = Entry {
                    vote: e.vote.clone(),
                    accepts: None,
                    decided: e.decided.clone(),
                    proposer_forgot: false,
                };
                (i, entry)
            })
            .collect();
        let mut replica = Replica {
            config,
            state_machine,
            view: durable.view,
            role: Role::Follower,
            log,
            log_start: durable.log_start,
            next_execute,
            clients,
            waiting: BTreeMap::new(),
            pending: VecDeque::new(),
            pending_ids: BTreeSet::new(),
            pending_bytes: 0,
            snapshot: durable.snapshot.clone(),
            log_bytes_since_snapshot: 0,
            served: None,
            installed_in_ready: false,
            snapshot_in_flight: None,
            leader_heard_ms: now_ms,
            restart_quiet: None,
            stamp_seen_ms,
            stamp_executed_ms,
            clock_ms: now_ms,
            catch_up: CatchUp::default(),
            receiving: None,
            epoch: Epoch(0),
            peers: BTreeMap::new(),
            recovering: None,
            rebuilding: false,
            votes_unflushed: BTreeSet::new(),
            votes_taken: Vec::new(),
            ready: Ready::default(),
            stats: Stats::default(),
        };
        if execute {
            replica.execute_decided();
        }
        replica
    }

    /// This replica's id.
    pub fn me(&self) -> NodeId {
        self.config.me
    }

    /// This replica's epoch (EpochSS; 0 under FullSS): the runtime sends every message of this
    /// replica with it ([`wire::encode_in_epoch`](crate::wire::encode_in_epoch)).
    pub fn epoch(&self) -> Epoch {
        self.epoch
    }

    /// Whether this replica takes part in the protocol, and if not, why.
    pub fn status(&self) -> Status {
        if self.config.recovery == Recovery::Epoch {
            let peers_lost = (self.peers.values())
                .filter(|p| p.recovery_heard_ms.is_some())
                .count();
            let lost = peers_lost + usize::from(self.recovering.is_some());
            if lost > self.config.nodes.len() - self.config.quorum() {
                return Status::StateLost;
            }
        }
        match self.recovering {
            Some(_) => Status::Recovering,
            None if self.rebuilding => Status::Rebuilding,
            None => Status::Serving,
        }
    }

    /// The peers this replica counts as recovering their state (EpochSS; see
    /// [`Replica::status`]).
    pub fn peers_recovering(&self) -> Vec<NodeId> {
        (self.peers.iter())
            .filter(|(_, p)| p.recovery_heard_ms.is_some())
            .map(|(&n, _)| n)
            .collect()
    }

    /// The highest view this replica promised.
    pub fn view(&self) -> View {
        self.view
    }

    /// The leader of that view.
    pub fn leader(&self) -> NodeId {
        self.view.leader(&self.config.nodes)
    }

    /// Whether this replica leads its view (phase 1 done).
    pub fn is_leader(&self) -> bool {
        matches!(self.role, Role::Leader(_))
    }

    /// Whether this replica is collecting promises for a view it leads.
    pub fn is_candidate(&self) -> bool {
        matches!(self.role, Role::Candidate(_))
    }

    /// The next instance to execute: every instance below is decided and executed.
    pub fn executed_below(&self) -> Instance {
        self.next_execute
    }

    /// The execution stamp of the last executed batch (see "Stamps" above).
    pub fn stamp_executed_ms(&self) -> u64 {
        self.stamp_executed_ms
    }

    /// The first instance still in the log.
    pub fn log_start(&self) -> Instance {
        self.log_start
    }

    /// The batch `instance` decided, if this replica knows it and still holds it in its log.
    pub fn decided(&self, instance: Instance) -> Option<&Batch> {
        self.log.get(&instance)?.decided.as_ref()
    }

    /// This replica's last vote in `instance`, if it still holds the instance in its log: the
    /// view and the batch (for harnesses that check invariants of the log).
    pub fn vote(&self, instance: Instance) -> Option<(View, &Batch)> {
        let (view, batch) = self.log.get(&instance)?.vote.as_ref()?;
        Some((*view, batch))
    }

    /// The highest instance this replica holds anything about (a vote, Accepts or a decision).
    pub fn last_instance(&self) -> Option<Instance> {
        self.log.last_key_value().map(|(&instance, _)| instance)
    }

    /// While this replica leads its view, the next instance it will propose in: it proposed in
    /// every undecided instance from [`Replica::executed_below`] up to this one.
    pub fn proposing_from(&self) -> Option<Instance> {
        match &self.role {
            Role::Leader(leader) => Some(leader.next_instance),
            Role::Follower | Role::Candidate(_) => None,
        }
    }

    /// The state machine.
    pub fn state_machine(&self) -> &S {
        &self.state_machine
    }

    /// The state machine, to change: for a service that hands the requests it executes on
    /// (P-SMR's streams drain what each group's log delivered). Its state must stay what
    /// executing the log gives, or snapshots disagree.
    pub fn state_machine_mut(&mut self) -> &mut S {
        &mut self.state_machine
    }

    /// The client table.
    pub fn client_table(&self) -> &ClientTable {
        &self.clients
    }

    /// The last snapshot taken or installed.
    pub fn snapshot(&self) -> Option<&Snapshot> {
        self.snapshot.as_ref()
    }

    /// Under [`Config::background_snapshots`]: the first instance not covered by the snapshot
    /// handed to the runtime and not yet reported durable, if one is.
    pub fn snapshot_in_flight(&self) -> Option<Instance> {
        self.snapshot_in_flight
    }

    /// The runtime made durable the snapshot of the [`SnapshotJob`] the replica handed it
    /// ([`Config::background_snapshots`]; `snapshot` is its encoding). It becomes the replica's
    /// snapshot (served to lagging replicas, the base of the snapshot policy) and the log is
    /// truncated below the snapshot before it, as when the snapshot is taken in the step: the
    /// truncation thus never passes a snapshot that is not durable. A report of a snapshot not
    /// in flight, or older than the replica's snapshot (one installed meanwhile), truncates
    /// nothing.
    ///
    /// [`SnapshotJob`]: crate::persist::SnapshotJob
    pub fn snapshot_durable(&mut self, snapshot: Snapshot) {
        if self.snapshot_in_flight != Some(snapshot.next_instance) {
            return;
        }
        self.snapshot_in_flight = None;
        let newer = self
            .snapshot
            .as_ref()
            .is_none_or(|s| s.next_instance < snapshot.next_instance);
        if !newer {
            return;
        }
        // Keep the log back to the previous snapshot, for replicas a little behind.
        let below = self
            .snapshot
            .as_ref()
            .map_or(self.log_start, |s| s.next_instance);
        self.see_stamp(snapshot.stamp_ms);
        self.truncate(below);
        self.snapshot = Some(snapshot);
        self.stats.snapshots_taken += 1;
    }

    /// The counters.
    pub fn stats(&self) -> &Stats {
        &self.stats
    }

    /// The configuration.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// Takes everything produced since the last call: commit it before sending anything.
    pub fn take_ready(&mut self) -> Ready {
        self.installed_in_ready = false;
        (self.votes_taken).extend(std::mem::take(&mut self.votes_unflushed));
        std::mem::take(&mut self.ready)
    }

    /// A request from a client. A request the client table shows executed is answered from it
    /// at once; an older one is ignored (its client has moved on). Others are batched by the
    /// leader, forwarded to it by a follower, and answered by this replica once executed.
    ///
    /// A replica recovering its state (EpochSS) drops requests: the runtime should refuse them
    /// itself, saying why from [`Replica::status`].
    pub fn handle_request(&mut self, now_ms: u64, request: Request) {
        self.clock_ms = now_ms;
        if self.recovering.is_some() {
            return;
        }
        if let Some((seq, reply)) = self.clients.get(&request.client) {
            if request.seq <= *seq {
                if request.seq == *seq {
                    self.ready.reply(ClientReply {
                        client: request.client,
                        seq: request.seq,
                        reply: reply.clone(),
                    });
                }
                return;
            }
        }
        self.waiting.insert(request.client, request.seq);
        let leader = self.leader();
        if matches!(self.role, Role::Follower) && leader != self.config.me {
            self.send(
                leader,
                Message::Forward {
                    requests: vec![request],
                },
            );
        } else {
            self.enqueue(now_ms, request);
        }
        self.settle(now_ms);
    }

    /// A message from replica `from`, sent in epoch 0: under FullSS, where epochs play no
    /// part. Under EpochSS use [`Replica::handle_epoch_message`] (a message in epoch 0 is
    /// older than any other there, and dropped once the sender's epoch is known).
    pub fn handle_message(&mut self, now_ms: u64, from: NodeId, message: Message) {
        self.handle_epoch_message(now_ms, from, Epoch(0), message);
    }

    /// A message from replica `from`, which sent it in its epoch `epoch`. Messages from unknown
    /// replicas, from this replica itself, from lower views, that contradict the cluster's shape
    /// (a Propose from a replica that does not lead its view) or, under EpochSS, that their
    /// sender sent before it restarted, are ignored.
    pub fn handle_epoch_message(
        &mut self,
        now_ms: u64,
        from: NodeId,
        epoch: Epoch,
        message: Message,
    ) {
        self.clock_ms = now_ms;
        if from == self.config.me || !self.config.nodes.contains(&from) {
            return;
        }
        if self.config.recovery == Recovery::Epoch {
            // Not counted: a counter of drops would grow with every duplicate, and a model
            // checker, which keeps the replica in its states, would never run out of states.
            if !self.note_epoch(now_ms, from, epoch, &message) {
                return;
            }
        } else if matches!(message, Message::Recovery { .. }) {
            // Under FullSS only a replica that lost its stable storage sends Recovery: what it
            // said before stops counting before the answer leaves.
            self.forget_votes_of(from);
        }
        if self.recovering.is_some() {
            self.handle_while_recovering(now_ms, from, epoch, message);
            return;
        }
        match message {
            Message::Prepare {
                view,
                first_undecided,
            } => self.on_prepare(now_ms, from, view, first_undecided),
            Message::Promise {
                view,
                log_start,
                entries,
            } => self.on_promise(now_ms, from, view, Promised { log_start, entries }),
            Message::Propose {
                view,
                instance,
                batch,
            } => self.on_propose(now_ms, from, view, instance, batch),
            Message::Accept { view, instance } => self.on_accept(from, view, instance),
            Message::Alive {
                view,
                first_undecided,
            } => self.on_alive(now_ms, from, view, first_undecided),
            Message::CatchUpQuery {
                from: first,
                to,
                snapshot,
            } => self.on_catch_up_query(from, first, to, snapshot),
            Message::CatchUpResponse {
                view,
                snapshot,
                decided,
            } => self.on_catch_up_response(now_ms, from, epoch, view, snapshot, decided),
            Message::Forward { requests } => self.on_forward(now_ms, requests),
            Message::Recovery { epoch } => self.on_recovery(from, epoch),
            Message::RecoveryAnswer { .. } => {}
        }
        self.settle(now_ms);
    }

    /// The passing of time: heartbeats, suspicion, retransmission, batches closed by age and
    /// catch-up retries. Call it every few milliseconds (a fraction of the shortest interval in
    /// the configuration).
    pub fn tick(&mut self, now_ms: u64) {
        self.clock_ms = now_ms;
        self.forget_quiet_recoveries(now_ms);
        if self.recovering.is_some() {
            self.tick_recovering(now_ms);
            return;
        }
        let quiet = self.restart_quiet(now_ms);
        match &self.role {
            Role::Leader(_) => self.tick_leader(now_ms),
            Role::Candidate(candidate) => {
                if now_ms >= candidate.started_ms + self.config.suspect_timeout_ms && !quiet {
                    self.start_view_change(now_ms);
                } else if now_ms >= candidate.sent_ms + self.config.retransmit_interval_ms {
                    self.send_prepares(now_ms);
                }
            }
            Role::Follower => {
                if self.leader() == self.config.me {
                    // At the first start, or after a restart in a view it led: phase 1 again in
                    // the same view is safe, because this replica wrote every value it proposed
                    // in it before proposing, so phase 1 finds those values as the highest votes
                    // and proposes them again, never anything else.
                    self.start_phase_1(now_ms, self.view);
                } else if now_ms >= self.leader_heard_ms + self.suspect_timeout_ms() && !quiet {
                    self.start_view_change(now_ms);
                }
            }
        }
        self.check_catch_up_timeout(now_ms);
        self.settle(now_ms);
    }

    /// The quiet time of a replica of `config` after a restart: none if the configuration asks
    /// for none, else one that its first tick starts.
    fn quiet_after(config: &Config) -> Option<Option<u64>> {
        (config.restart_quiet_ms > 0).then_some(None)
    }

    /// Whether the replica is in its quiet time after a restart (see "Restarts" above); the
    /// first tick after the restart starts it, and its end ends it for good.
    fn restart_quiet(&mut self, now_ms: u64) -> bool {
        let until = match self.restart_quiet {
            None => return false,
            Some(Some(until)) => until,
            Some(None) => {
                // Replaying the log took time the leader could not be heard in: the follower's
                // wait starts now too.
                self.leader_heard_ms = self.leader_heard_ms.max(now_ms);
                let until = now_ms.saturating_add(self.config.restart_quiet_ms);
                self.restart_quiet = Some(Some(until));
                until
            }
        };
        if now_ms < until {
            return true;
        }
        // The usual wait starts at the end of the quiet time, so that the replica next in line
        // still suspects first when several restarted together.
        self.leader_heard_ms = self.leader_heard_ms.max(now_ms);
        self.restart_quiet = None;
        false
    }

    /// How long this follower waits for its leader: the suspect timeout times the number of
    /// views until the next one it leads, so the next replica in line suspects first.
    ///
    /// A follower that knows it is behind (it is catching up) waits as if it were last in line,
    /// one view more than the cluster has replicas: as a candidate it could complete the view
    /// change only after catching up, and its Prepares would hold every replica that promised
    /// meanwhile; a replica up to date suspects first and takes over (see "Restarts" above).
    fn suspect_timeout_ms(&self) -> u64 {
        let views = match self.view.next_led_by(self.config.me, &self.config.nodes) {
            Some(next) => next.0 - self.view.0,
            None => 1,
        };
        let views = if self.catching_up() {
            views.max(self.config.nodes.len() as u64 + 1)
        } else {
            views
        };
        self.config.suspect_timeout_ms.saturating_mul(views)
    }

    /// Whether this replica knows of decided instances it has not executed (it is catching
    /// up), or is receiving a snapshot.
    fn catching_up(&self) -> bool {
        self.catch_up.target > self.next_execute || self.receiving.is_some()
    }

    fn tick_leader(&mut self, now_ms: u64) {
        let Role::Leader(leader) = &mut self.role else {
            unreachable!("called for leaders")
        };
        let alive = now_ms >= leader.alive_due_ms;
        if alive {
            leader.alive_due_ms = now_ms + self.config.heartbeat_interval_ms;
        }
        let retransmit = now_ms >= leader.retransmit_due_ms;
        if retransmit {
            leader.retransmit_due_ms = now_ms + self.config.retransmit_interval_ms;
        }
        let next_instance = leader.next_instance;
        if alive {
            let message = Message::Alive {
                view: self.view,
                first_undecided: self.next_execute,
            };
            self.broadcast(&message);
        }
        if retransmit {
            self.send_proposes_again(next_instance);
        }
    }

    /// Sends the Propose of every undecided instance of this view again to the replicas whose
    /// Accept the leader has not seen.
    fn send_proposes_again(&mut self, next_instance: Instance) {
        let mut again = Vec::new();
        for (&instance, entry) in self.log.range(self.next_execute..next_instance) {
            let (Some((view, batch)), None) = (&entry.vote, &entry.decided) else {
                continue;
            };
            if *view != self.view {
                continue;
            }
            for &node in &self.config.nodes {
                let accepted = match &entry.accepts {
                    Some((v, nodes)) => *v == *view && nodes.contains(&node),
                    None => false,
                };
                if node != self.config.me && !accepted {
                    let message = Message::Propose {
                        view: *view,
                        instance,
                        batch: batch.clone(),
                    };
                    again.push(Envelope { to: node, message });
                }
            }
        }
        for envelope in again {
            self.ready.send(envelope);
        }
    }

    /// What every handler ends with: execute what was decided, complete a view change the
    /// promises allow, propose what the window allows, and keep catch-up going.
    fn settle(&mut self, now_ms: u64) {
        for instance in std::mem::take(&mut self.votes_taken) {
            self.check_decided(instance);
        }
        loop {
            let before = (self.next_execute, self.is_leader());
            self.execute_decided();
            self.try_complete_view_change(now_ms);
            self.execute_decided();
            self.try_propose(now_ms);
            if before == (self.next_execute, self.is_leader()) {
                break;
            }
        }
        if self
            .receiving
            .as_ref()
            .is_some_and(|r| r.next_instance <= self.next_execute)
        {
            // Executed past it meanwhile (from the log): nothing left to learn from it.
            self.receiving = None;
        }
        if self.catch_up.target <= self.next_execute {
            self.catch_up.asked = None;
        } else if self.catch_up.asked.is_none() {
            self.send_catch_up_query(now_ms, None);
        }
    }

    /// Whether this replica keeps state for `instance`: not executed yet, and not further ahead
    /// than [`Config::log_ahead_instances_max`] (which bounds the log that messages can grow and
    /// keeps instance numbers far from overflowing).
    fn in_window(&self, instance: Instance) -> bool {
        let ahead = self.next_execute.plus(self.config.log_ahead_instances_max);
        instance >= self.next_execute.max(self.log_start) && instance < ahead
    }

    fn send(&mut self, to: NodeId, message: Message) {
        self.ready.send(Envelope { to, message });
    }

    fn broadcast(&mut self, message: &Message) {
        for i in 0..self.config.nodes.len() {
            let node = self.config.nodes[i];
            if node != self.config.me {
                self.send(node, message.clone());
            }
        }
    }

    // ---- Client requests ----

    /// Queues a request to be proposed by this replica (leader or candidate, or the leader to
    /// be), unless it is queued already or the queue is full.
    fn enqueue(&mut self, now_ms: u64, request: Request) {
        if self.pending.len() >= self.config.pending_requests_max {
            return;
        }
        if !self.pending_ids.insert((request.client, request.seq)) {
            return;
        }
        self.pending_bytes += request.size_bytes();
        self.pending.push_back(Pending {
            arrived_ms: now_ms,
            request,
        });
    }

    fn on_forward(&mut self, now_ms: u64, requests: Vec<Request>) {
        let proposes_here = !matches!(self.role, Role::Follower) || self.leader() == self.config.me;
        if !proposes_here {
            // The sender's view is not this replica's; its client retries.
            return;
        }
        for request in requests {
            if !self.is_executed(&request) {
                self.enqueue(now_ms, request);
            }
        }
    }

    fn is_executed(&self, request: &Request) -> bool {
        self.clients
            .get(&request.client)
            .is_some_and(|(seq, _)| *seq >= request.seq)
    }

    /// Whether the leader should close a batch now.
    fn batch_due(&self, now_ms: u64) -> bool {
        let Some(oldest) = self.pending.front() else {
            return false;
        };
        self.pending.len() >= self.config.batch_requests_max
            || self.pending_bytes >= self.config.batch_bytes_max
            || now_ms >= oldest.arrived_ms + self.config.batch_delay_ms
    }

    /// Proposes batches while the window has room and a batch is due.
    fn try_propose(&mut self, now_ms: u64) {
        let Role::Leader(leader) = &mut self.role else {
            return;
        };
        leader.next_instance = leader.next_instance.max(self.next_execute);
        let mut next_instance = leader.next_instance;
        let window_end = self.next_execute.plus(self.config.window_instances);
        while next_instance < window_end {
            while let Some(front) = self.pending.front() {
                if !self.is_executed(&front.request) {
                    break;
                }
                self.pop_pending();
            }
            if !self.batch_due(now_ms) {
                break;
            }
            let batch = self.close_batch(now_ms);
            self.propose(next_instance, batch);
            next_instance = next_instance.next();
        }
        if let Role::Leader(leader) = &mut self.role {
            leader.next_instance = next_instance;
        }
    }

    fn pop_pending(&mut self) -> Option<Request> {
        let pending = self.pending.pop_front()?;
        self.pending_bytes -= pending.request.size_bytes();
        let id = (pending.request.client, pending.request.seq);
        assert!(
            self.pending_ids.remove(&id),
            "every pending request is indexed"
        );
        Some(pending.request)
    }

    /// Takes the oldest pending requests into a batch, up to the limits (at least one),
    /// stamped with the clock but never below a stamp seen (see "Stamps" above).
    fn close_batch(&mut self, now_ms: u64) -> Batch {
        let mut requests = Vec::new();
        let mut bytes = 0;
        while let Some(front) = self.pending.front() {
            let size = front.request.size_bytes();
            let full = requests.len() >= self.config.batch_requests_max
                || (!requests.is_empty() && bytes + size > self.config.batch_bytes_max);
            if full {
                break;
            }
            bytes += size;
            requests.push(self.pop_pending().expect("a front"));
        }
        Batch::stamped(now_ms.max(self.stamp_seen_ms), requests)
    }

    /// The leader votes for `batch` in `instance` (written before the Propose leaves) and
    /// proposes it.
    fn propose(&mut self, instance: Instance, batch: Batch) {
        self.see_stamp(batch.stamp_ms());
        let view = self.view;
        let entry = self.log.entry(instance).or_default();
        entry.vote = Some((view, batch.clone()));
        entry.accepts = Some((view, BTreeSet::new()));
        entry.proposer_forgot = false;
        self.write(Record::Accepted {
            instance,
            view,
            batch: batch.clone(),
        });
        self.broadcast(&Message::Propose {
            view,
            instance,
            batch,
        });
        self.stats.batches_proposed += 1;
        self.check_decided(instance);
    }

    // ---- Views ----

    /// Moves to a higher view led by another replica, as its follower: the view is written
    /// before anything this replica sends in it, and requests waiting here go to the new leader.
    fn adopt_view(&mut self, now_ms: u64, view: View) {
        assert!(view > self.view, "views only go up");
        self.view = view;
        self.write(Record::View(view));
        self.role = Role::Follower;
        self.leader_heard_ms = now_ms;
        let leader = self.leader();
        if leader != self.config.me && !self.pending.is_empty() {
            let requests = std::iter::from_fn(|| self.pop_pending()).collect();
            self.send(leader, Message::Forward { requests });
        }
    }

    /// Takes a message of the leader's kind (Prepare, Propose, Alive) from `from` in `view`:
    /// ignored (false) if the view is lower than this replica's or not led by the sender;
    /// otherwise the view is adopted if higher, and the leader counts as heard from.
    fn follow(&mut self, now_ms: u64, from: NodeId, view: View) -> bool {
        if view < self.view || view.leader(&self.config.nodes) != from {
            return false;
        }
        if view > self.view {
            self.adopt_view(now_ms, view);
        }
        self.leader_heard_ms = now_ms;
        // A restarted replica that hears from a leader knows the view the others are in.
        self.restart_quiet = None;
        true
    }

    /// Starts a view change to the next view this replica leads.
    fn start_view_change(&mut self, now_ms: u64) {
        let Some(view) = self.view.next_led_by(self.config.me, &self.config.nodes) else {
            return;
        };
        self.start_phase_1(now_ms, view);
    }

    /// Becomes the candidate of `view` (which this replica leads), written before any Prepare
    /// names it.
    fn start_phase_1(&mut self, now_ms: u64, view: View) {
        assert!(view >= self.view, "views only go up");
        assert_eq!(
            view.leader(&self.config.nodes),
            self.config.me,
            "a view of its own"
        );
        if view > self.view {
            self.view = view;
            self.write(Record::View(view));
        }
        self.role = Role::Candidate(Candidate {
            promises: BTreeMap::new(),
            started_ms: now_ms,
            sent_ms: now_ms,
        });
        self.stats.view_changes_started += 1;
        self.send_prepares(now_ms);
    }

    /// Sends Prepare to every replica that has not promised yet.
    fn send_prepares(&mut self, now_ms: u64) {
        let Role::Candidate(candidate) = &mut self.role else {
            return;
        };
        candidate.sent_ms = now_ms;
        let silent: Vec<NodeId> = self
            .config
            .nodes
            .iter()
            .copied()
            .filter(|n| *n != self.config.me && !candidate.promises.contains_key(n))
            .collect();
        let message = Message::Prepare {
            view: self.view,
            first_undecided: self.next_execute,
        };
        for node in silent {
            self.send(node, message.clone());
        }
    }

    fn on_prepare(&mut self, now_ms: u64, from: NodeId, view: View, first_undecided: Instance) {
        if !self.follow(now_ms, from, view) {
            return;
        }
        let entries = self
            .log
            .range(first_undecided.max(self.log_start)..)
            .filter_map(|(&i, entry)| {
                let known = match (&entry.decided, &entry.vote) {
                    (Some(batch), _) => PromisedEntry::Decided(batch.clone()),
                    (None, Some((view, batch))) => PromisedEntry::Voted {
                        view: *view,
                        batch: batch.clone(),
                    },
                    (None, None) => return None,
                };
                Some((i, known))
            })
            .collect();
        let message = Message::Promise {
            view,
            log_start: self.log_start,
            entries,
        };
        self.send(from, message);
    }

    fn on_promise(&mut self, now_ms: u64, from: NodeId, view: View, promised: Promised) {
        let Role::Candidate(candidate) = &mut self.role else {
            return;
        };
        if view != self.view {
            return;
        }
        let log_start = promised.log_start;
        let stamp_ms = promised
            .entries
            .iter()
            .map(|(_, e)| match e {
                PromisedEntry::Voted { batch, .. } | PromisedEntry::Decided(batch) => {
                    batch.stamp_ms()
                }
            })
            .fold(0, u64::max);
        candidate.promises.insert(from, promised);
        self.see_stamp(stamp_ms);
        if log_start > self.next_execute {
            // The instances between were decided and truncated there: learn them first.
            self.want_decided_below(now_ms, log_start, Some(from));
        }
    }

    /// Completes the view change once a majority's promises cover the log from the first
    /// undecided instance: decisions they report are learned, the highest-view vote of every
    /// other instance is proposed again and gaps are filled with no-ops.
    fn try_complete_view_change(&mut self, now_ms: u64) {
        let Role::Candidate(candidate) = &self.role else {
            return;
        };
        let reported: Vec<(Instance, Batch)> = candidate
            .promises
            .values()
            .flat_map(|p| &p.entries)
            .filter_map(|(i, e)| match e {
                PromisedEntry::Decided(batch) => Some((*i, batch.clone())),
                PromisedEntry::Voted { .. } => None,
            })
            .collect();
        for (instance, batch) in reported {
            self.decide(instance, batch);
        }
        self.execute_decided();
        let Role::Candidate(candidate) = &self.role else {
            unreachable!("still a candidate")
        };
        let covering: Vec<&Promised> = candidate
            .promises
            .values()
            .filter(|p| p.log_start <= self.next_execute)
            .collect();
        if covering.len() + 1 < self.config.quorum() {
            return;
        }
        let mut found: BTreeMap<Instance, (View, Batch)> = BTreeMap::new();
        let own = self
            .log
            .range(self.next_execute..)
            .filter_map(|(&i, e)| e.vote.clone().map(|vote| (i, vote)));
        let theirs = covering
            .iter()
            .flat_map(|p| &p.entries)
            .filter_map(|(i, e)| match e {
                PromisedEntry::Voted { view, batch } => Some((*i, (*view, batch.clone()))),
                PromisedEntry::Decided(_) => None,
            });
        for (instance, (view, batch)) in own.chain(theirs) {
            if !self.in_window(instance) {
                continue;
            }
            let higher = found.get(&instance).is_none_or(|(v, _)| view > *v);
            if higher {
                found.insert(instance, (view, batch));
            }
        }
        let last_known = self.log.last_key_value().map(|(&i, _)| i.next());
        let end = [found.last_key_value().map(|(&i, _)| i.next()), last_known]
            .into_iter()
            .flatten()
            .fold(self.next_execute, Instance::max);
        self.role = Role::Leader(Leader {
            next_instance: end,
            alive_due_ms: now_ms,
            retransmit_due_ms: now_ms + self.config.retransmit_interval_ms,
        });
        self.stats.views_led += 1;
        let mut instance = self.next_execute;
        while instance < end {
            if self.decided(instance).is_none() {
                match found.remove(&instance) {
                    Some((_, batch)) => self.propose(instance, batch),
                    None if self.config.bugs.skip_noop_fill => {}
                    None => {
                        self.stats.noops_proposed += 1;
                        self.propose(instance, Batch::noop());
                    }
                }
            }
            instance = instance.next();
        }
    }

    fn on_alive(&mut self, now_ms: u64, from: NodeId, view: View, first_undecided: Instance) {
        if !self.follow(now_ms, from, view) {
            return;
        }
        self.want_decided_below(now_ms, first_undecided, None);
    }

    // ---- Phase 2 ----

    fn on_propose(
        &mut self,
        now_ms: u64,
        from: NodeId,
        view: View,
        instance: Instance,
        batch: Batch,
    ) {
        let stale_taken = self.config.bugs.accept_stale_proposals
            && view < self.view
            && view.leader(&self.config.nodes) == from;
        if !stale_taken && !self.follow(now_ms, from, view) {
            return;
        }
        let accept = Message::Accept { view, instance };
        if let Some(entry) = self.log.get(&instance) {
            if let Some(decided) = &entry.decided {
                if entry.vote.as_ref().is_some_and(|(v, _)| *v == view) {
                    // A Propose sent again: the leader still waits for this replica's Accept.
                    self.broadcast(&accept);
                } else {
                    // Decided in an earlier view, which this leader has not learned (it
                    // proposes the same batch again, but this replica will not vote again):
                    // tell it, as a catch-up response would.
                    let decided = vec![(instance, decided.clone())];
                    self.send(
                        from,
                        Message::CatchUpResponse {
                            view: self.view,
                            snapshot: None,
                            decided,
                        },
                    );
                }
                return;
            }
        }
        if instance < self.next_execute.max(self.log_start) {
            // Decided and truncated here: the leader lags behind this replica's snapshot.
            self.on_catch_up_query(from, instance, instance.next(), None);
            return;
        }
        // A leader proposes only within its window above its first undecided instance, so
        // everything below `instance - window` is decided: far enough ahead of this replica's
        // first undecided instance, that means it lags.
        let decided_below = Instance(
            instance
                .0
                .saturating_add(1)
                .saturating_sub(self.config.window_instances),
        );
        if decided_below > self.next_execute.plus(self.config.window_instances) {
            self.want_decided_below(now_ms, decided_below, None);
        }
        if !self.in_window(instance) {
            return;
        }
        let entry = self.log.entry(instance).or_default();
        let voted = entry.vote.as_ref().is_some_and(|(v, _)| *v == view);
        if !voted {
            self.stamp_seen_ms = self.stamp_seen_ms.max(batch.stamp_ms());
            entry.vote = Some((view, batch.clone()));
            entry.proposer_forgot = false;
        }
        Self::add_accept(entry, view, from);
        if !voted {
            self.write(Record::Accepted {
                instance,
                view,
                batch,
            });
        }
        if !voted && self.config.bugs.accept_before_persist {
            for i in 0..self.config.nodes.len() {
                let node = self.config.nodes[i];
                if node != self.config.me {
                    self.ready.leak(Envelope {
                        to: node,
                        message: accept.clone(),
                    });
                }
            }
        } else {
            self.broadcast(&accept);
        }
        self.check_decided(instance);
    }

    fn add_accept(entry: &mut Entry, view: View, from: NodeId) {
        match &mut entry.accepts {
            Some((v, nodes)) if *v == view => {
                nodes.insert(from);
            }
            Some((v, _)) if *v > view => {}
            _ => entry.accepts = Some((view, BTreeSet::from([from]))),
        }
    }

    fn on_accept(&mut self, from: NodeId, view: View, instance: Instance) {
        if !self.in_window(instance) {
            return;
        }
        let entry = self.log.entry(instance).or_default();
        if entry.decided.is_some() {
            return;
        }
        Self::add_accept(entry, view, from);
        self.check_decided(instance);
    }

    /// Decides `instance` if this replica holds the batch of a view and a majority voted in it:
    /// this replica (its vote), the view's leader (its Propose) and the Accepts heard.
    fn check_decided(&mut self, instance: Instance) {
        let Some(entry) = self.log.get(&instance) else {
            return;
        };
        let (Some((view, batch)), Some((accepts_view, accepts)), None) =
            (&entry.vote, &entry.accepts, &entry.decided)
        else {
            return;
        };
        if view != accepts_view {
            return;
        }
        let mut voters = accepts.clone();
        voters.insert(self.config.me);
        if !entry.proposer_forgot {
            voters.insert(view.leader(&self.config.nodes));
        }
        if self.votes_unflushed.contains(&instance) {
            // Not durable yet (see `votes_unflushed`): counted once the records are taken.
            voters.remove(&self.config.me);
        }
        if voters.len() >= self.config.quorum() {
            let batch = batch.clone();
            self.decide(instance, batch);
        }
    }

    /// Records that `instance` decided `batch` (executed later, in order).
    fn decide(&mut self, instance: Instance, batch: Batch) {
        if !self.in_window(instance) {
            return;
        }
        let entry = self.log.entry(instance).or_default();
        if let Some(decided) = &entry.decided {
            if *decided != batch {
                self.stats.conflicting_decisions += 1;
            }
            return;
        }
        entry.decided = Some(batch.clone());
        self.see_stamp(batch.stamp_ms());
        self.write(Record::Decided { instance, batch });
    }

    /// Writes `record` to stable storage, under FullSS and mPaxos; under EpochSS nothing but the epoch is
    /// written.
    fn write(&mut self, record: Record) {
        if let Record::Accepted { instance, .. } = &record {
            if self.config.snapshots == Snapshots::OnDemand {
                self.votes_unflushed.insert(*instance);
            }
        }
        if self.config.recovery.writes_records() {
            self.ready.record(record);
        }
    }

    /// Raises the floor of the stamps this replica gives batches as leader to `stamp_ms`, as
    /// if it had seen a batch stamped there: every batch it closes from now on is stamped at
    /// least `stamp_ms`. Stamps stay monotonic along the log (the floor only goes up), so
    /// "Stamps" above still holds; the stamps then run ahead of this leader's clock until the
    /// clock catches up. P-SMR's merge uses it to stamp a skip past a stamp another group's
    /// leader gave from a clock ahead of this one (`logless_psmr::merge`).
    pub fn raise_stamp_floor(&mut self, stamp_ms: u64) {
        self.see_stamp(stamp_ms);
    }

    fn see_stamp(&mut self, stamp_ms: u64) {
        self.stamp_seen_ms = self.stamp_seen_ms.max(stamp_ms);
    }

    // ---- Execution and the client table ----

    /// Executes decided instances in order, then takes a snapshot if the policy asks for one.
    fn execute_decided(&mut self) {
        if self.rebuilding {
            // The state machine is not there yet: execution resumes in finish_rebuild.
            return;
        }
        while let Some(batch) = self
            .log
            .get(&self.next_execute)
            .and_then(|e| e.decided.clone())
        {
            self.execute(self.next_execute, &batch);
            self.log_bytes_since_snapshot += batch.size_bytes() as u64;
            self.next_execute = self.next_execute.next();
        }
        self.maybe_snapshot();
    }

    /// Executes a decided batch's requests, skipping those the client table shows executed
    /// (a request decided in two instances, seed 002 §II).
    fn execute(&mut self, instance: Instance, batch: &Batch) {
        self.stamp_executed_ms = self.stamp_executed_ms.max(batch.stamp_ms());
        self.see_stamp(self.stamp_executed_ms);
        let stamp_ms = if self.config.bugs.execute_at_local_clock {
            self.clock_ms
        } else {
            self.stamp_executed_ms
        };
        self.state_machine.begin_batch(instance, stamp_ms);
        for request in batch.requests() {
            if self.is_executed(request) && !self.config.bugs.no_dedup {
                self.stats.duplicates_skipped += 1;
                continue;
            }
            let reply = self.state_machine.execute(request);
            self.stats.requests_executed += 1;
            let newer = self
                .clients
                .get(&request.client)
                .is_none_or(|(seq, _)| *seq <= request.seq);
            if newer {
                self.clients.insert(request.client, (request.seq, reply));
            }
            self.answer_waiting(request.client);
        }
    }

    /// Answers `client` if this replica owes it the reply the client table now holds.
    fn answer_waiting(&mut self, client: ClientId) {
        let (Some(&waiting), Some((seq, reply))) =
            (self.waiting.get(&client), self.clients.get(&client))
        else {
            return;
        };
        if *seq < waiting {
            return;
        }
        if *seq == waiting {
            self.ready.reply(ClientReply {
                client,
                seq: waiting,
                reply: reply.clone(),
            });
        }
        self.waiting.remove(&client);
    }

    // ---- Snapshots and truncation ----

    fn maybe_snapshot(&mut self) {
        let since = self.log_bytes_since_snapshot;
        if since < self.config.snapshot_log_bytes_min {
            return;
        }
        if self.config.snapshots == Snapshots::OnDemand {
            return self.maybe_checkpoint();
        }
        let last = self.snapshot.as_ref().map_or(0, Snapshot::size_bytes) as u64;
        if since.saturating_mul(100) < last.saturating_mul(self.config.snapshot_ratio_percent) {
            return;
        }
        if self.config.background_snapshots {
            if self.snapshot_in_flight.is_some() {
                // One at a time: the log grows on until that one is durable.
                return;
            }
            self.ready.snapshot_later(SnapshotJob {
                next_instance: self.next_execute,
                stamp_ms: self.stamp_executed_ms,
                clients: self.clients.clone(),
                state: self.state_machine.snapshot_deferred(),
            });
            self.snapshot_in_flight = Some(self.next_execute);
            self.log_bytes_since_snapshot = 0;
            return;
        }
        let snapshot = Snapshot {
            next_instance: self.next_execute,
            stamp_ms: self.stamp_executed_ms,
            state: self.state_machine.snapshot(),
            clients: self.clients.clone(),
        };
        // Keep the log back to the previous snapshot, for replicas a little behind.
        let below = self
            .snapshot
            .as_ref()
            .map_or(self.log_start, |s| s.next_instance);
        self.write(Record::Snapshot(snapshot.clone()));
        self.truncate(below);
        self.snapshot = Some(snapshot);
        self.log_bytes_since_snapshot = 0;
        self.stats.snapshots_taken += 1;
    }

    /// Writes a checkpoint and truncates the log below the previous one, or below the
    /// snapshot served to lagging replicas if that is older (see "Snapshots, truncation and
    /// catch-up" above).
    fn maybe_checkpoint(&mut self) {
        if self.installed_in_ready {
            return;
        }
        let checkpoint = Snapshot {
            next_instance: self.next_execute,
            stamp_ms: self.stamp_executed_ms,
            state: bytes::Bytes::new(),
            clients: self.clients.clone(),
        };
        let mut below = self
            .snapshot
            .as_ref()
            .map_or(self.log_start, |s| s.next_instance);
        match &mut self.served {
            Some((_, false)) => self.served = None,
            Some((served, asked)) => {
                below = below.min(served.next_instance);
                *asked = false;
            }
            None => {}
        }
        self.write(Record::Snapshot(checkpoint.clone()));
        self.truncate(below);
        self.snapshot = Some(checkpoint);
        self.log_bytes_since_snapshot = 0;
        self.stats.checkpoints_taken += 1;
    }

    /// The snapshot a lagging replica is sent a piece of: under [`Snapshots::Periodic`] the
    /// last one; under [`Snapshots::OnDemand`] the one served already if it still covers the
    /// truncated log, else one taken now. `None` while there is no state to copy (resumed and
    /// not rebuilt) or no snapshot covers the truncation.
    fn snapshot_to_serve(&mut self) -> Option<&Snapshot> {
        if self.config.snapshots == Snapshots::Periodic {
            return self.snapshot.as_ref();
        }
        if self.rebuilding || self.next_execute < self.log_start {
            return None;
        }
        if (self.state_machine.holds_through()).is_some_and(|i| i >= self.next_execute) {
            // Its state is ahead of what it executed: not a snapshot of `next_execute`.
            return None;
        }
        let log_start = self.log_start;
        if self
            .served
            .as_ref()
            .is_none_or(|(s, _)| s.next_instance < log_start)
        {
            let snapshot = Snapshot {
                next_instance: self.next_execute,
                stamp_ms: self.stamp_executed_ms,
                state: self.state_machine.snapshot(),
                clients: self.clients.clone(),
            };
            self.served = Some((snapshot, false));
            self.stats.snapshots_taken += 1;
        }
        let (snapshot, asked) = self.served.as_mut().expect("a snapshot served");
        *asked = true;
        Some(snapshot)
    }

    fn truncate(&mut self, below: Instance) {
        if below > self.log_start {
            self.write(Record::Truncate { below });
            self.log = self.log.split_off(&below);
            self.log_start = below;
        }
    }

    fn install_snapshot(&mut self, snapshot: Snapshot) {
        assert!(
            snapshot.next_instance > self.next_execute,
            "only a newer state"
        );
        self.state_machine.restore(&snapshot.state);
        // A newer state than the one being rebuilt: the rebuild is over.
        self.rebuilding = false;
        self.clients = snapshot.clients.clone();
        self.next_execute = snapshot.next_instance;
        self.stamp_executed_ms = snapshot.stamp_ms;
        self.see_stamp(snapshot.stamp_ms);
        self.write(Record::Snapshot(snapshot.clone()));
        self.truncate(snapshot.next_instance);
        self.snapshot = Some(snapshot);
        self.log_bytes_since_snapshot = 0;
        // The log below the new start is gone: a snapshot served from it is no longer whole.
        self.served = None;
        self.installed_in_ready = true;
        self.stats.snapshots_installed += 1;
        let clients: Vec<ClientId> = self.waiting.keys().copied().collect();
        for client in clients {
            self.answer_waiting(client);
        }
    }

    // ---- Catch-up ----

    /// Notes that every instance below `target` is decided somewhere, and starts catching up
    /// (from `prefer` if given) when this replica lacks some of them.
    fn want_decided_below(&mut self, now_ms: u64, target: Instance, prefer: Option<NodeId>) {
        if target <= self.next_execute {
            return;
        }
        self.catch_up.target = self.catch_up.target.max(target);
        if self.catch_up.asked.is_none() {
            self.send_catch_up_query(now_ms, prefer);
        }
    }

    /// Asks `prefer`, or else the next replica in turn, replicas other than the leader first
    /// (seed 002 §III-C: the leader is the busiest).
    fn send_catch_up_query(&mut self, now_ms: u64, prefer: Option<NodeId>) {
        let leader = self.leader();
        let mut order: Vec<NodeId> = self
            .config
            .nodes
            .iter()
            .copied()
            .filter(|n| *n != self.config.me && *n != leader)
            .collect();
        if leader != self.config.me {
            order.push(leader);
        }
        if order.is_empty() {
            return;
        }
        let index = usize::try_from(self.catch_up.attempts % order.len() as u64)
            .expect("an index below the cluster size");
        // The sender of the snapshot being received, while it is not given up.
        let sending = self.receiving.as_ref().map(|r| r.from);
        let to = prefer.or(sending).unwrap_or(order[index]);
        if sending.is_some_and(|n| n != to) {
            // Another replica's snapshot may be encoded otherwise: start over from it.
            self.receiving = None;
        }
        self.catch_up.attempts += 1;
        self.catch_up.asked = Some((to, now_ms));
        self.stats.catch_up_queries += 1;
        self.send(
            to,
            Message::CatchUpQuery {
                from: self.next_execute,
                to: self.catch_up.target,
                snapshot: self.receiving.as_ref().map(Receiving::cursor),
            },
        );
    }

    /// Forgets an unanswered query once it has waited too long, so the next one leaves (to the
    /// same sender while a snapshot is in assembly, for a few times, then to another replica).
    fn check_catch_up_timeout(&mut self, now_ms: u64) {
        let Some((_, asked_ms)) = self.catch_up.asked else {
            return;
        };
        if now_ms < asked_ms + self.config.catch_up_timeout_ms {
            return;
        }
        self.catch_up.asked = None;
        if let Some(receiving) = &mut self.receiving {
            receiving.stalls += 1;
            if receiving.stalls > SNAPSHOT_SENDER_RETRIES {
                self.receiving = None;
            }
        }
    }

    /// Answers a lagging replica with the decided instances it asks for, after a piece of this
    /// replica's snapshot when some were truncated: the piece after `cursor` if it names that
    /// snapshot, else the first. The instances come only with the last piece.
    fn on_catch_up_query(
        &mut self,
        from: NodeId,
        first: Instance,
        to: Instance,
        cursor: Option<ChunkCursor>,
    ) {
        let mut snapshot = None;
        let mut start = first;
        if first < self.log_start {
            let chunk_bytes = self.config.snapshot_chunk_bytes;
            let Some(last) = self.snapshot_to_serve() else {
                return;
            };
            let offset = cursor
                .filter(|c| c.next_instance == last.next_instance)
                .map_or(0, |c| c.offset);
            let chunk = SnapshotChunk::cut(last, offset, chunk_bytes);
            start = last.next_instance;
            if !chunk.is_last() {
                let message = Message::CatchUpResponse {
                    view: self.view,
                    snapshot: Some(chunk),
                    decided: Vec::new(),
                };
                self.send(from, message);
                return;
            }
            snapshot = Some(chunk);
        }
        let decided = self
            .log
            .range(start..to.max(start))
            .filter_map(|(&i, e)| e.decided.clone().map(|batch| (i, batch)))
            .take(self.config.catch_up_instances_max)
            .collect();
        let message = Message::CatchUpResponse {
            view: self.view,
            snapshot,
            decided,
        };
        self.send(from, message);
    }

    fn on_catch_up_response(
        &mut self,
        now_ms: u64,
        from: NodeId,
        epoch: Epoch,
        view: View,
        chunk: Option<SnapshotChunk>,
        decided: Vec<(Instance, Batch)>,
    ) {
        if view > self.view && view.leader(&self.config.nodes) != self.config.me {
            self.adopt_view(now_ms, view);
        }
        let before = self.next_execute;
        if let Some(chunk) = chunk {
            if let Some(snapshot) = self.receive_chunk(now_ms, from, epoch, chunk) {
                self.install_snapshot(snapshot);
            }
        }
        for (instance, batch) in decided {
            self.decide(instance, batch);
        }
        self.execute_decided();
        let asked_this = self.catch_up.asked.is_some_and(|(n, _)| n == from);
        if asked_this && self.next_execute > before {
            // Progress: ask again at once if still behind (settle does); a useless answer
            // waits for the timeout, which moves on to the next replica.
            self.catch_up.asked = None;
        }
    }

    /// Takes a piece of `from`'s snapshot: appended if it is the next piece of the snapshot in
    /// assembly, the start of a new assembly if it is the first piece of a newer one (or of the
    /// same sender's after it restarted), dropped otherwise. Gives the snapshot once complete
    /// (its state's length reached, the client table with the last piece); until then asks
    /// `from` for the next piece.
    fn receive_chunk(
        &mut self,
        now_ms: u64,
        from: NodeId,
        epoch: Epoch,
        chunk: SnapshotChunk,
    ) -> Option<Snapshot> {
        /// The most bytes reserved for a state in assembly before its pieces arrive.
        const RESERVE_MAX: usize = 1 << 30;
        if chunk.next_instance <= self.next_execute {
            return None;
        }
        let any_offset = self.config.bugs.snapshot_chunk_any_offset;
        match &mut self.receiving {
            Some(r) if r.is_of(from, epoch, &chunk) => {
                if chunk.offset != r.state.len() as u64 && !any_offset {
                    // A piece again, or out of order: the one wanted is asked for again.
                    return None;
                }
                if r.state.capacity() - r.state.len() < chunk.bytes.len() {
                    // Past the first reservation, the pieces so far back the length: room for
                    // the rest at once, not a doubling.
                    let rest = r.state_bytes.saturating_sub(r.state.len() as u64);
                    let rest = usize::try_from(rest).unwrap_or(usize::MAX);
                    if r.state
                        .try_reserve_exact(rest.max(chunk.bytes.len()))
                        .is_err()
                    {
                        return None;
                    }
                }
                r.state.extend_from_slice(&chunk.bytes);
            }
            other => {
                let newer = match other {
                    None => true,
                    Some(r) => {
                        chunk.next_instance > r.next_instance
                            || (from == r.from
                                && chunk.next_instance == r.next_instance
                                && epoch > r.epoch)
                    }
                };
                if chunk.offset != 0 || !newer {
                    return None;
                }
                // Room for the whole state at once (no copies as it grows), within reason for
                // a length no piece has backed yet.
                let mut state = Vec::new();
                let room = usize::try_from(chunk.state_bytes).map_or(0, |n| n.min(RESERVE_MAX));
                if state.try_reserve_exact(room).is_err() {
                    return None;
                }
                state.extend_from_slice(&chunk.bytes);
                *other = Some(Receiving {
                    from,
                    epoch,
                    next_instance: chunk.next_instance,
                    stamp_ms: chunk.stamp_ms,
                    state_bytes: chunk.state_bytes,
                    state,
                    stalls: 0,
                });
            }
        }
        self.stats.snapshot_chunks_received += 1;
        let r = self.receiving.as_mut().expect("a snapshot in assembly");
        r.stalls = 0;
        let received = r.state.len() as u64;
        if received < r.state_bytes {
            self.catch_up.target = self.catch_up.target.max(r.next_instance);
            self.send_catch_up_query(now_ms, Some(from));
            return None;
        }
        let r = self.receiving.take().expect("a snapshot in assembly");
        let (Some(clients), true) = (chunk.clients, received == r.state_bytes) else {
            // The pieces overran the state, or the last one lacks the client table: a broken
            // sender. Nothing is installed; catch-up starts over.
            return None;
        };
        Some(Snapshot {
            next_instance: r.next_instance,
            stamp_ms: r.stamp_ms,
            state: r.state.into(),
            clients,
        })
    }

    // ---- EpochSS ----

    /// Notes that `from` sent `message` in `epoch`; false if the message is stale: `from` has
    /// restarted since it sent it. A newer epoch means `from` restarted and forgot every vote
    /// and promise it sent before: they stop counting here.
    fn note_epoch(&mut self, now_ms: u64, from: NodeId, epoch: Epoch, message: &Message) -> bool {
        let ignore_epochs = self.config.bugs.ignore_epochs;
        let peer = self.peers.entry(from).or_default();
        if epoch < peer.epoch && !ignore_epochs {
            return false;
        }
        let restarted = epoch > peer.epoch;
        if restarted {
            peer.recovered = false;
        }
        peer.epoch = peer.epoch.max(epoch);
        if !matches!(message, Message::Recovery { .. }) {
            peer.recovered = true;
            peer.recovery_heard_ms = None;
        } else if !peer.recovered {
            peer.recovery_heard_ms = Some(now_ms);
        }
        if restarted && !ignore_epochs {
            self.forget_votes_of(from);
        }
        true
    }

    /// Stops counting as recovering the peers whose last Recovery arrived more than
    /// [`RECOVERY_HEARD_INTERVALS`] retransmission intervals ago (see "EpochSS" above).
    fn forget_quiet_recoveries(&mut self, now_ms: u64) {
        let (times, per) = RECOVERY_HEARD_INTERVALS;
        let heard_for = self.config.retransmit_interval_ms * times / per;
        for peer in self.peers.values_mut() {
            if peer
                .recovery_heard_ms
                .is_some_and(|t| now_ms > t + heard_for)
            {
                peer.recovery_heard_ms = None;
            }
        }
    }

    /// Stops counting what `node` sent before it restarted without its state: its Accepts in
    /// undecided instances, its Propose as its own vote, its Promise to this candidate.
    fn forget_votes_of(&mut self, node: NodeId) {
        let nodes = &self.config.nodes;
        for entry in self.log.values_mut().filter(|e| e.decided.is_none()) {
            if let Some((_, accepts)) = &mut entry.accepts {
                accepts.remove(&node);
            }
            if entry
                .vote
                .as_ref()
                .is_some_and(|(v, _)| v.leader(nodes) == node)
            {
                entry.proposer_forgot = true;
            }
        }
        if let Role::Candidate(candidate) = &mut self.role {
            candidate.promises.remove(&node);
        }
    }

    /// A peer restarted without its state: tell it how far the log has come here.
    /// Under FullSS (a rejoin) a leader answers at least the instance after the highest one it
    /// holds: its phase 1 saw every value a lost vote may have helped choose.
    fn on_recovery(&mut self, from: NodeId, epoch: Epoch) {
        let mut decided_below = self
            .log
            .iter()
            .rev()
            .find(|(_, e)| e.decided.is_some())
            .map_or(self.next_execute, |(&i, _)| i.next().max(self.next_execute));
        if self.config.recovery.writes_records() && self.is_leader() {
            if let Some(last) = self.last_instance() {
                decided_below = decided_below.max(last.next());
            }
        }
        let answer = Message::RecoveryAnswer {
            epoch,
            view: self.view,
            leading: self.is_leader(),
            decided_below,
        };
        self.send(from, answer);
    }

    /// While recovering, only the answers to its Recovery and the catch-up responses matter:
    /// the replica has no state to vote, promise or answer with.
    fn handle_while_recovering(
        &mut self,
        now_ms: u64,
        from: NodeId,
        epoch: Epoch,
        message: Message,
    ) {
        match (&mut self.recovering, message) {
            (
                Some(Recovering::Answers { answers, .. }),
                Message::RecoveryAnswer {
                    epoch,
                    view,
                    leading,
                    decided_below,
                },
            ) if epoch == self.epoch => {
                let answer = RecoveryAnswer {
                    view,
                    leading,
                    decided_below,
                };
                answers.insert(from, answer);
                self.try_end_answers(now_ms);
            }
            (
                Some(Recovering::CatchingUp { .. }),
                Message::CatchUpResponse {
                    view,
                    snapshot,
                    decided,
                },
            ) => self.on_catch_up_response(now_ms, from, epoch, view, snapshot, decided),
            _ => {}
        }
        self.settle(now_ms);
        self.try_end_catching_up(now_ms);
    }

    /// Once a majority of the other replicas answered, the leader of the highest view they name
    /// among them and leading it: that view is adopted, and the replica catches up to the
    /// highest decision they know before it takes part.
    ///
    /// Why a majority of the *others*: any view whose phase 1 completed was promised by a
    /// majority, and a majority of the others meets it outside this replica (whose promise is
    /// forgotten), so the highest view answered is at least that view. Why its leader, leading:
    /// its phase 1 saw every vote a majority holds, and it now knows this replica's new epoch
    /// and drops what this replica sent before it crashed.
    fn try_end_answers(&mut self, now_ms: u64) {
        let Some(Recovering::Answers { answers, .. }) = &self.recovering else {
            return;
        };
        // A rejoin (FullSS) needs every other replica: each forgot what this one said before.
        let needed = match self.config.recovery {
            Recovery::Epoch => self.config.quorum(),
            Recovery::FullSs | Recovery::Pmem => self.config.nodes.len() - 1,
        };
        if answers.len() < needed {
            return;
        }
        let Some(view) = answers.values().map(|a| a.view).max() else {
            return;
        };
        let leader = view.leader(&self.config.nodes);
        let led = answers
            .get(&leader)
            .is_some_and(|a| a.view == view && a.leading);
        if !led {
            return;
        }
        let target = answers
            .values()
            .map(|a| a.decided_below)
            .fold(self.next_execute, Instance::max);
        if view > self.view {
            self.view = view;
            self.write(Record::View(view));
        }
        self.role = Role::Follower;
        self.leader_heard_ms = now_ms;
        self.recovering = Some(Recovering::CatchingUp { target });
        self.want_decided_below(now_ms, target, None);
    }

    /// Ends the recovery once every instance below the target is executed here.
    fn try_end_catching_up(&mut self, now_ms: u64) {
        let Some(Recovering::CatchingUp { target }) = self.recovering else {
            return;
        };
        if self.next_execute >= target {
            self.recovering = None;
            self.leader_heard_ms = now_ms;
            self.stats.recoveries += 1;
        }
    }

    /// Sends Recovery again to every other replica (an answer may be stale: a candidate
    /// that has since come to lead, a view since replaced), or keeps catching up.
    fn tick_recovering(&mut self, now_ms: u64) {
        if let Some(Recovering::Answers { sent_ms, .. }) = &mut self.recovering {
            if now_ms >= *sent_ms + self.config.retransmit_interval_ms {
                *sent_ms = now_ms;
                self.broadcast(&Message::Recovery { epoch: self.epoch });
            }
        }
        self.check_catch_up_timeout(now_ms);
        self.settle(now_ms);
        self.try_end_catching_up(now_ms);
    }
}
