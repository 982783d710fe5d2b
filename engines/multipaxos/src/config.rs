//! A replica's configuration, passed explicitly.
use crate::ids::NodeId;

/// Deliberate protocol bugs, each off by default. They exist so that every harness can prove it
/// catches a broken protocol.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct InjectedBugs {
    /// A new leader re-proposes the values it found but leaves gaps empty instead of filling
    /// them with no-ops: execution stops at the first gap for good.
    pub skip_noop_fill: bool,
    /// A request decided in two instances is executed twice (the client table is ignored at
    /// execution).
    pub no_dedup: bool,
    /// A follower's Accept leaves before its vote is written: a crash can forget a vote that
    /// helped decide an instance, and a later view can decide something else there.
    pub accept_before_persist: bool,
    /// The state machine executes at the replica's own clock instead of the batches' stamps:
    /// replicas that execute a batch at different times disagree on expiry.
    pub execute_at_local_clock: bool,
    /// A follower votes for a Propose of a view lower than the one it promised (the promise is
    /// not kept): the old leader can still decide a value there, after the new leader's phase 1
    /// counted on the promise and chose something else.
    pub accept_stale_proposals: bool,
    /// Under [`Recovery::Epoch`], messages are taken whatever the sender's epoch: a stray
    /// message a replica sent before it crashed (an Accept of a vote it forgot) still counts
    /// after it recovered, and two values can be decided in one instance (seed 002 Fig. 2).
    pub ignore_epochs: bool,
    /// [`Replica::start_rejoin`] does nothing: a replica whose disk was lost votes and promises
    /// at once from its empty state, as one started on an empty directory without `--rejoin`.
    /// A view change that counts its Promise instead of its lost vote can choose another value
    /// where that vote helped choose one.
    ///
    /// [`Replica::start_rejoin`]: crate::replica::Replica::start_rejoin
    pub rejoin_without_recovery: bool,
    /// A turn whose records the disk refused for want of space still sends its messages and
    /// answers its clients as if the records were durable, and the node's log core goes on
    /// instead of pausing: its records wait in the backlog, so a crash before space returns
    /// forgets votes and decisions that left, and an acknowledged write can be lost.
    pub release_while_space_short: bool,
    /// A piece of a snapshot in assembly is appended wherever it says it starts: a piece
    /// received twice, or out of order, corrupts the state installed.
    pub snapshot_chunk_any_offset: bool,
    /// [`Replica::finish_rebuild`] takes the machine it is handed even once the rebuild has
    /// ended (an mPaxos rejoin ended it, or a catch-up installed a newer snapshot): the
    /// replica's state goes back to its persistent snapshot's (empty after a lost disk) while
    /// its log says it executed past it.
    ///
    /// [`Replica::finish_rebuild`]: crate::replica::Replica::finish_rebuild
    pub late_rebuild_taken: bool,
}

/// The default most bytes of a snapshot's state in one catch-up response
/// ([`Config::snapshot_chunk_bytes`]): far below any transport's frame limit, and large enough
/// that a round trip per piece costs little against sending it.
pub const SNAPSHOT_CHUNK_BYTES: usize = 4 << 20;

/// How a replica comes back after a crash (seed 002 §V).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Recovery {
    /// FullSS: every vote, view, decision and snapshot is written to stable storage before it
    /// is acted on, and a restarted replica replays them ([`Replica::recover`]).
    ///
    /// [`Replica::recover`]: crate::replica::Replica::recover
    #[default]
    FullSs,
    /// EpochSS: the state lives in memory only, and the one stable write is an epoch counter
    /// raised at every start ([`Replica::start_epoch`]). A restarted replica recovers its
    /// state from its peers, which needs a majority of replicas that never lost theirs.
    ///
    /// [`Replica::start_epoch`]: crate::replica::Replica::start_epoch
    Epoch,
    /// mPaxos: the records are the ones FullSS writes, kept in persistent memory (the runtime
    /// puts the log on cache-line-persisted media). A restarted replica takes part in the
    /// protocol at once — its views, votes and decisions are loaded, not executed — and its
    /// state machine is rebuilt from the persistent snapshot and the decided instances after
    /// it meanwhile ([`Replica::resume`], [`Replica::finish_rebuild`]).
    ///
    /// [`Replica::resume`]: crate::replica::Replica::resume
    /// [`Replica::finish_rebuild`]: crate::replica::Replica::finish_rebuild
    Pmem,
}

/// When a replica takes snapshots of its state machine.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Snapshots {
    /// After executing, once the log has grown enough since the last snapshot
    /// ([`Config::snapshot_log_bytes_min`], [`Config::snapshot_ratio_percent`]); the snapshot is
    /// written to stable storage and the log truncated below the previous one.
    #[default]
    Periodic,
    /// Only when a lagging replica needs one to catch up, for a state machine that keeps its
    /// own state durable (mPaxosSM, seed 002 §V-B: the state machine in persistent memory).
    /// Once the log has grown by [`Config::snapshot_log_bytes_min`] the replica writes a
    /// *checkpoint* instead: a [`Snapshot`] record with an empty state, carrying the next
    /// instance, the execution stamp and the client table, and truncates the log below the
    /// previous checkpoint. The runtime must have made the state machine durable up to the
    /// checkpoint before it commits the record, and hands the machine over as it is after a
    /// restart ([`Replica::resume`] and [`Replica::finish_rebuild`]): only [`Recovery::Pmem`]
    /// takes it. A lagging replica gets a consistent copy of the state taken when it asks
    /// ([`StateMachine::snapshot`]), kept for the pieces that follow. Because such a machine
    /// may make what it executes durable before the step's records, the replica counts its own
    /// vote towards a decision only once the records holding it were taken
    /// ([`Replica::take_ready`]): a batch decided by a vote a crash loses may never be chosen.
    ///
    /// [`Snapshot`]: crate::message::Snapshot
    /// [`Replica::take_ready`]: crate::replica::Replica::take_ready
    /// [`Replica::resume`]: crate::replica::Replica::resume
    /// [`Replica::finish_rebuild`]: crate::replica::Replica::finish_rebuild
    /// [`StateMachine::snapshot`]: crate::state_machine::StateMachine::snapshot
    OnDemand,
}

impl Recovery {
    /// Whether the replica writes its records (views, votes, decisions, snapshots) to stable
    /// storage: under FullSS and mPaxos, not under EpochSS.
    pub fn writes_records(self) -> bool {
        self != Recovery::Epoch
    }
}

/// How a replica behaves. Times are in milliseconds of the clock the runtime passes in.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Config {
    /// Every replica, in a fixed order shared by all: view `v` is led by `nodes[v mod n]`.
    pub nodes: Vec<NodeId>,
    /// This replica.
    pub me: NodeId,
    /// The most instances a leader has proposed and not yet seen decided (the window, α in
    /// JPaxos).
    pub window_instances: u64,
    /// A batch is closed once its requests take this many bytes.
    pub batch_bytes_max: usize,
    /// A batch is closed once it holds this many requests.
    pub batch_requests_max: usize,
    /// A batch is closed once its oldest request has waited this long.
    pub batch_delay_ms: u64,
    /// How often the leader sends Alive.
    pub heartbeat_interval_ms: u64,
    /// How long a follower waits without hearing from its leader before it suspects it. A
    /// replica whose own next view is `k` views away waits `k` times as long, so that the
    /// replica next in line starts the view change alone.
    pub suspect_timeout_ms: u64,
    /// How often unanswered Prepares and Proposes are sent again (the network loses messages).
    pub retransmit_interval_ms: u64,
    /// After a restart ([`Replica::recover`], [`Replica::resume`]), how long a replica starts
    /// no view change unless it hears from a leader first: its view may be far behind the
    /// others', and its Prepares would depose a working leader for a candidate that must catch
    /// up before it can lead (see "Restarts" in [`crate::replica`]).
    ///
    /// [`Replica::recover`]: crate::replica::Replica::recover
    /// [`Replica::resume`]: crate::replica::Replica::resume
    pub restart_quiet_ms: u64,
    /// How long a catch-up query waits for its response before another replica is asked.
    pub catch_up_timeout_ms: u64,
    /// The most decided instances one catch-up response carries.
    pub catch_up_instances_max: usize,
    /// The most bytes of a snapshot's state one catch-up response carries: a larger state
    /// travels in pieces, each asked for in turn (see [`SnapshotChunk`]). At least 1.
    ///
    /// [`SnapshotChunk`]: crate::message::SnapshotChunk
    pub snapshot_chunk_bytes: usize,
    /// The most instances beyond the first undecided one a replica keeps in its log; messages
    /// about instances further ahead are ignored (they only say that the replica is behind).
    pub log_ahead_instances_max: u64,
    /// The most client requests waiting to be proposed (or forwarded); more are refused.
    pub pending_requests_max: usize,
    /// A snapshot is never taken before the log has grown by this many bytes since the last.
    pub snapshot_log_bytes_min: u64,
    /// A snapshot is taken once the log has grown since the last by this percentage of the last
    /// snapshot's size (seed 002's ratio of log size to snapshot size).
    pub snapshot_ratio_percent: u64,
    /// How the replica recovers after a crash.
    pub recovery: Recovery,
    /// When the replica takes snapshots (on demand only under mPaxosSM).
    pub snapshots: Snapshots,
    /// Under [`Snapshots::Periodic`]: the runtime encodes and writes each periodic snapshot
    /// off its loop. The replica hands it a consistent copy of the state
    /// ([`StateMachine::snapshot_deferred`]) in the [`Ready`](crate::persist::Ready) instead
    /// of a [`Record::Snapshot`](crate::persist::Record::Snapshot), keeps at most one in flight,
    /// and truncates its log only once the runtime reports it durable
    /// ([`Replica::snapshot_durable`](crate::replica::Replica::snapshot_durable)). Off (the
    /// default), the snapshot is encoded in the step and written with the step's records.
    ///
    /// [`StateMachine::snapshot_deferred`]: crate::state_machine::StateMachine::snapshot_deferred
    pub background_snapshots: bool,
    /// Deliberate bugs for harness tests.
    pub bugs: InjectedBugs,
}

impl Config {
    /// Defaults for replica `me` of the cluster `nodes` on a local network.
    pub fn new(nodes: Vec<NodeId>, me: NodeId) -> Config {
        Config {
            nodes,
            me,
            window_instances: 10,
            batch_bytes_max: 64 * 1024,
            batch_requests_max: 256,
            batch_delay_ms: 1,
            heartbeat_interval_ms: 50,
            suspect_timeout_ms: 300,
            retransmit_interval_ms: 100,
            restart_quiet_ms: 2_000,
            catch_up_timeout_ms: 200,
            catch_up_instances_max: 1_000,
            snapshot_chunk_bytes: SNAPSHOT_CHUNK_BYTES,
            log_ahead_instances_max: 100_000,
            pending_requests_max: 100_000,
            snapshot_log_bytes_min: 1024 * 1024,
            snapshot_ratio_percent: 100,
            recovery: Recovery::FullSs,
            snapshots: Snapshots::Periodic,
            background_snapshots: false,
            bugs: InjectedBugs::default(),
        }
    }

    /// The size of a majority quorum.
    pub fn quorum(&self) -> usize {
        self.nodes.len() / 2 + 1
    }
}
