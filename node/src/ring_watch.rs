//! How a node of a ring learns the ring's stage and installs it (docs/ring.md §4, §5 item 1).
//!
//! Every node reads the stage register ([`crate::ring_register`]) when it starts and then every
//! [`READ_INTERVAL`]. A stage later than the one installed (or, at start, another configuration
//! than the one derived from the peer list) is installed: its placement is handed to every
//! data shard (`Replica::install_placement`, through the shard's input channel, so commands
//! the shard takes after it are counted by the new quorums), the forwarder routes by its
//! configuration, and in cluster mode the sessions redirect by it ([`crate::cluster`]). Then
//! the node writes what it installed to its report register, which the coordinator of a change
//! waits on ([`crate::ring_change`]). In a joint stage the node runs its data mover
//! ([`crate::ring_mover`]) and reports again when it is done.
//!
//! # Why a periodic read
//!
//! A node could instead be told of a new stage by the coordinator, or by a peer. A message from
//! the coordinator reaches only the nodes it can reach at that moment, so a node that was down
//! or cut off would still need a way to catch up: a read of the register, which is the source
//! of truth anyway. A read costs one consistent quorum read of one register per node per
//! interval, independent of the load; the coordinator waits for every node's report, so a
//! change takes about one interval per stage longer than a push would. When the engine's stage
//! fence holds a message of a later stage back, the shard wakes the reader at once
//! ([`crate::shard::Shard::on_newer_stage`]); the periodic read remains the way a node that
//! met nobody catches up.
//!
//! # Before the first read
//!
//! A node does not know the ring's stage before it has read the register: after a change,
//! the configuration derived from the peer list is stale. So the node accepts no Redis client
//! until the first read succeeded and what it found is installed ([`RingState::ready`]), which
//! needs a majority of the peer list up. Until then its data shards' acceptors answer no peer
//! either ([`crate::ring::starting_replica`]), so the first read installs whatever it found.
use std::sync::{Arc, Mutex};
use std::time::Duration;

use logless_placement::{Configuration, Stage};
use logless_rmw::ids::NodeId;
use tokio::sync::{oneshot, watch, Notify};
use tokio::task::JoinHandle;
use tracing::{info, warn};

use crate::context::NodeContext;
use crate::ring_mover::Mover;
use crate::ring_register::{
    report_key, stage_name, InstallReport, RingRegister, RingStage, STAGE_KEY,
};
use crate::shard::ShardInput;

/// How often a node reads the ring's stage register.
pub const READ_INTERVAL: Duration = Duration::from_millis(500);

/// A ring node's view of the ring's stage.
pub struct RingState {
    /// The registers of the ring shard.
    pub register: RingRegister,
    /// Every node of the peer list, sorted: the acceptors placements index into.
    acceptors: Vec<NodeId>,
    /// The configuration derived from the peer list, written to an empty register.
    derived: Configuration,
    /// The stage installed last.
    installed: Mutex<RingStage>,
    /// Whether the stage was read and installed at least once.
    ready: watch::Sender<bool>,
    /// Woken by a data shard whose engine met a later stage (the fence): read at once.
    read_now: Arc<Notify>,
    /// The data mover's progress in a joint stage.
    pub mover: Mover,
}

impl RingState {
    /// A node that starts with the `derived` configuration installed, reaching the ring's
    /// registers through `register`.
    /// `read_now` wakes the reader before its next periodic read (the data shards hold it,
    /// [`crate::shard::Shard::on_newer_stage`]).
    pub fn new(
        register: RingRegister,
        acceptors: Vec<NodeId>,
        derived: Configuration,
        read_now: Arc<Notify>,
    ) -> Self {
        RingState {
            register,
            acceptors,
            installed: Mutex::new(RingStage::Stable(derived.clone())),
            derived,
            ready: watch::channel(false).0,
            read_now,
            mover: Mover::default(),
        }
    }

    /// The stage installed last.
    pub fn installed(&self) -> RingStage {
        self.installed.lock().expect("not poisoned").clone()
    }

    /// Waits until the node has read the ring's stage once and installed it.
    pub async fn ready(&self) {
        let mut ready = self.ready.subscribe();
        let _ = ready.wait_for(|&ready| ready).await;
    }

    /// Has the reader read (and report) at once rather than at its next interval.
    pub fn wake(&self) {
        self.read_now.notify_one();
    }
}

/// Reads and installs the ring's stage every [`READ_INTERVAL`] until `shutdown`.
pub async fn run(context: Arc<NodeContext>, mut shutdown: watch::Receiver<bool>) {
    let Some(ring) = context.ring.clone() else {
        return;
    };
    let mut reported = Reported::default();
    let mut last_error = String::new();
    let mut mover: Option<(Stage, JoinHandle<()>)> = None;
    loop {
        match step(&context, &ring, &mut reported).await {
            Ok(()) => {
                ring.ready.send_replace(true);
                last_error.clear();
                mover = keep_moving(&context, &ring, mover);
            }
            Err(e) => {
                if e != last_error {
                    warn!(error = %e, "reading the ring's stage");
                    last_error = e;
                }
            }
        }
        tokio::select! {
            _ = shutdown.changed() => {
                if let Some((_, task)) = mover {
                    task.abort();
                }
                return;
            }
            () = tokio::time::sleep(READ_INTERVAL) => {}
            () = ring.read_now.notified() => {}
        }
    }
}

/// Runs the data mover while the installed stage is joint: starts one for a joint stage that
/// has none, and ends one whose stage is no longer installed.
fn keep_moving(
    context: &Arc<NodeContext>,
    ring: &Arc<RingState>,
    running: Option<(Stage, JoinHandle<()>)>,
) -> Option<(Stage, JoinHandle<()>)> {
    let installed = ring.installed();
    let stage = installed.stage();
    match running {
        Some((moving, task)) if moving == stage => Some((moving, task)),
        other => {
            if let Some((_, task)) = other {
                task.abort();
            }
            matches!(installed, RingStage::Joint { .. }).then(|| {
                let task = tokio::spawn(crate::ring_mover::run(
                    context.clone(),
                    ring.clone(),
                    installed,
                ));
                (stage, task)
            })
        }
    }
}

/// One read: installs a newer stage and reports what is installed, if not reported yet (or,
/// in a joint stage, if the mover's progress changed).
async fn step(
    context: &NodeContext,
    ring: &RingState,
    reported: &mut Reported,
) -> Result<(), String> {
    let stage = match ring.register.stage().await? {
        Some(stage) => stage,
        None => {
            // The ring's first start: every node derives the same configuration.
            let first = RingStage::Stable(ring.derived.clone());
            ring.register.swap(STAGE_KEY, None, first.encode()).await?;
            ring.register
                .stage()
                .await?
                .ok_or("the ring's stage register is empty after it was written")?
        }
    };
    let installed = ring.installed();
    // The first read installs even the stage the node started with: its data shards' acceptors
    // answer nothing until a placement is installed (`crate::ring::starting_replica`).
    if stage != installed || !*ring.ready.borrow() {
        if installed.stage().is_after(stage.stage()) {
            return Err(format!(
                "the ring's stage register holds {}, older than the {} this node installed",
                stage_name(stage.stage()),
                stage_name(installed.stage())
            ));
        }
        install(context, ring, &stage).await?;
    }
    // Asked again while the shards drop states of slots the node left (a count each shard
    // keeps, not a walk); once none is left, none comes back until the next stage: an
    // acceptor takes no state of a key it does not replicate.
    let registers_elsewhere = match reported.last {
        Some(last) if last.stage == stage.stage() && last.registers_elsewhere == 0 => 0,
        _ => registers_unplaced(context).await,
    };
    let report = match stage {
        RingStage::Stable(_) => InstallReport {
            stage: stage.stage(),
            moving_keys: 0,
            synced: true,
            registers_elsewhere,
        },
        RingStage::Joint { .. } => {
            let progress = ring.mover.progress();
            let current = progress.stage == Some(stage.stage());
            InstallReport {
                stage: stage.stage(),
                moving_keys: if current { progress.found } else { 0 },
                synced: current && progress.done,
                registers_elsewhere,
            }
        }
    };
    if reported.last != Some(report) {
        ring.register
            .put(&report_key(context.node.0), report.encode())
            .await?;
        reported.last = Some(report);
    }
    Ok(())
}

/// What a node reported last.
#[derive(Default)]
struct Reported {
    last: Option<InstallReport>,
}

/// The states the data shards hold of registers the installed stage does not place on this
/// node, summed: what the drop has left ([`crate::turn::ShardCore::registers_unplaced`]).
async fn registers_unplaced(context: &NodeContext) -> u64 {
    let mut unplaced = 0;
    for shard in &context.shards {
        let (reply, answer) = oneshot::channel();
        if shard
            .send(ShardInput::RegistersUnplaced(reply))
            .await
            .is_ok()
        {
            unplaced += answer.await.unwrap_or(0);
        }
    }
    unplaced
}

/// Hands `stage`'s placement to every data shard and routes by it.
async fn install(context: &NodeContext, ring: &RingState, stage: &RingStage) -> Result<(), String> {
    let placement = stage.placement(&ring.acceptors)?;
    for shard in &context.shards {
        shard
            .send(ShardInput::InstallPlacement(placement.clone()))
            .await
            .map_err(|_| "the node is stopping".to_string())?;
    }
    if let Some(forwarder) = &context.forwarder {
        forwarder.set_stage(stage);
    }
    if let Some(cluster) = &context.cluster {
        cluster.install(stage)?;
    }
    *ring.installed.lock().expect("not poisoned") = stage.clone();
    info!(stage = %stage_name(stage.stage()), nodes = ?stage.nodes(), "installed a stage of the ring");
    Ok(())
}
