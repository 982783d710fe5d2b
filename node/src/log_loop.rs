//! The log engine's event loop on tokio: the node's one [`LogCore`], fed from its input
//! channel, with its links to every peer.
//!
//! Like a per-key shard ([`crate::shard`]) it owns its state alone and is spoken to only
//! through its channel. Each turn takes everything waiting (client operations, peer messages,
//! questions), and [`LogCore::finish_turn`] ticks the replica and commits before anything
//! leaves. The replica needs the passing of time for heartbeats, suspicion, retransmission and
//! batches closed by age, so the loop turns at least every [`TICK_MS`].
use std::path::PathBuf;
use std::time::{Duration, Instant};

use bytes::Bytes;
use logless_multipaxos::ids::{Epoch, NodeId};
use logless_multipaxos::kv::Operation;
use logless_multipaxos::message::Message;
use logless_storage::StoreError;
use rustc_hash::FxHashMap;
use tokio::sync::{mpsc, oneshot};
use tokio::time::MissedTickBehavior;
use tracing::info;

use crate::log_machine::LogMachine;
pub use crate::log_turn::{LogAnswer, LogStatus};
use crate::log_turn::{LogCore, LogOutlet};
use crate::shard::wall_ms;
use crate::turn::ShardStatus;

/// How often the replica is ticked when nothing else wakes the loop.
pub const TICK_MS: u64 = 5;

/// The most inputs taken in one turn before the turn is committed.
const INPUTS_PER_TURN_MAX: usize = 4096;

/// What the log's loop is asked to do.
#[derive(Debug)]
pub enum LogInput {
    /// Client operations, in the order the clients sent them.
    Submit(Vec<LogSubmitted>),
    /// Protocol messages from a peer.
    Messages {
        /// The sender.
        from: NodeId,
        /// In the order sent, each with the sender's epoch (EpochSS; 0 under FullSS).
        messages: Vec<(Epoch, Message)>,
    },
    /// A snapshot of the node's figures ([`LogCore::figures`]).
    Status(oneshot::Sender<ShardStatus>),
    /// A page of the live keys of this replica's copy (see [`LogCore::scan_live`]).
    Scan {
        /// Where to resume (0 starts).
        cursor: u64,
        /// How many keys to visit.
        count: usize,
        /// The next cursor (0 at the end) and the live keys with their types.
        reply: oneshot::Sender<(u64, Vec<(Bytes, &'static str)>)>,
    },
    /// The state machine of a replica resumed under mPaxos, restored from its persistent
    /// snapshot off the loop, or under mPaxosSM opened over its registers in place
    /// ([`LogCore::finish_rebuild`]); under mPaxosSM the opening may have failed (the loop
    /// then stops with the error, as when its store fails).
    Rebuilt(Result<Box<LogMachine>, StoreError>),
    /// Commit what is pending, flush and stop.
    Stop,
}

/// Where the answer to one operation goes: the connection's channel and the operation's
/// number on it.
#[derive(Debug)]
pub struct LogReplyTo {
    /// The connection's channel.
    pub tx: mpsc::UnboundedSender<(u64, LogAnswer)>,
    /// The operation's number on that connection.
    pub seq: u64,
}

/// One client operation handed to the log.
#[derive(Debug)]
pub struct LogSubmitted {
    /// The operation.
    pub operation: Operation,
    /// Where the answer goes.
    pub reply: LogReplyTo,
}

/// The file that says a rejoin after a lost disk completed (the log engine's, psmr's): while a
/// rejoin is under way, where it goes.
#[derive(Default)]
pub(crate) struct RejoinMarker(Option<PathBuf>);

impl RejoinMarker {
    /// A rejoin is under way: `path` is created once it completed.
    pub(crate) fn at(&mut self, path: PathBuf) {
        self.0 = Some(path);
    }

    /// Creates the file, durably (the file and its directory synced), if a rejoin was under
    /// way and is no longer (`rejoining` false); true if it did now. Call it after a turn's
    /// commit: the turn that completed the rejoin has made the state it recovered durable by
    /// then, so later starts restart from it as usual.
    pub(crate) fn note(&mut self, rejoining: bool) -> Result<bool, StoreError> {
        if rejoining {
            return Ok(false);
        }
        let Some(marker) = self.0.take() else {
            return Ok(false);
        };
        let io = StoreError::io("write the rejoin's marker");
        let file = std::fs::File::create(&marker).map_err(io)?;
        file.sync_all()
            .map_err(StoreError::io("sync the rejoin's marker"))?;
        if let Some(dir) = marker.parent() {
            std::fs::File::open(dir)
                .and_then(|d| d.sync_all())
                .map_err(StoreError::io("sync the marker's directory"))?;
        }
        Ok(true)
    }
}

/// The log's loop and everything it owns.
pub struct LogLoop {
    core: LogCore<LogReplyTo>,
    inputs: mpsc::Receiver<LogInput>,
    outlet: ChannelOutlet,
    /// While a rejoin after a lost disk is under way: the file to create once it completed.
    rejoined_marker: RejoinMarker,
    /// A failure met off the loop (the registers in place could not be opened): the loop
    /// stops with it.
    failed: Option<StoreError>,
}

struct ChannelOutlet {
    peers: FxHashMap<NodeId, mpsc::UnboundedSender<Vec<(Epoch, Message)>>>,
    started: Instant,
    /// The replica's epoch, sent with every message (it does not change while it runs).
    epoch: Epoch,
}

impl LogOutlet<LogReplyTo> for ChannelOutlet {
    fn send(&mut self, to: NodeId, messages: Vec<Message>) {
        if let Some(link) = self.peers.get(&to) {
            let epoch = self.epoch;
            // A closed link drops the batch, like a lost message.
            let _ = link.send(messages.into_iter().map(|m| (epoch, m)).collect());
        }
    }

    fn answer(&mut self, reply: LogReplyTo, answer: LogAnswer) {
        // The client may have gone; its answer is then dropped.
        let _ = reply.tx.send((reply.seq, answer));
    }

    fn mono_us(&self) -> u64 {
        self.started.elapsed().as_micros() as u64
    }
}

impl LogLoop {
    /// The loop around `core`, reading `inputs` and sending to `peers` (the writer of each
    /// remote node's link); `started` is the origin of the core's monotonic clock.
    pub fn new(
        core: LogCore<LogReplyTo>,
        inputs: mpsc::Receiver<LogInput>,
        peers: FxHashMap<NodeId, mpsc::UnboundedSender<Vec<(Epoch, Message)>>>,
        started: Instant,
    ) -> LogLoop {
        let epoch = core.epoch();
        LogLoop {
            core,
            inputs,
            outlet: ChannelOutlet {
                peers,
                started,
                epoch,
            },
            rejoined_marker: RejoinMarker::default(),
            failed: None,
        }
    }

    /// Creates `marker` (durably) once the core's rejoin completed: the turn that completed it
    /// has made its records durable by then, so later starts replay the log as usual.
    pub fn mark_rejoined_at(&mut self, marker: PathBuf) {
        self.rejoined_marker.at(marker);
    }

    /// Creates the rejoin's marker if the rejoin just completed.
    fn note_rejoined(&mut self) -> Result<(), StoreError> {
        if self.rejoined_marker.note(self.core.rejoining())? {
            info!(
                "rejoined after a lost disk: this replica recovered the log and takes part again"
            );
        }
        Ok(())
    }

    /// Runs until [`LogInput::Stop`] or until every sender is gone. An error means the log
    /// failed: the replica must stop (fail-stop), and the caller stops the node.
    pub async fn run(mut self) -> Result<(), StoreError> {
        let mut ticks = tokio::time::interval(Duration::from_millis(TICK_MS));
        ticks.set_missed_tick_behavior(MissedTickBehavior::Delay);
        let mut running = true;
        while running {
            tokio::select! {
                biased;
                input = self.inputs.recv() => {
                    self.start_turn();
                    match input {
                        Some(input) => running = self.handle(input),
                        None => running = false,
                    }
                }
                _ = ticks.tick() => self.start_turn(),
            }
            for _ in 0..INPUTS_PER_TURN_MAX {
                if !running {
                    break;
                }
                match self.inputs.try_recv() {
                    Ok(input) => running = self.handle(input),
                    Err(_) => break,
                }
            }
            if let Some(e) = self.failed.take() {
                return Err(e);
            }
            self.core.finish_turn(&mut self.outlet)?;
            self.note_rejoined()?;
        }
        // A snapshot being written off the loop is finished, not left half done.
        self.core.finish_snapshot()
    }

    fn start_turn(&mut self) {
        let mono_us = self.outlet.started.elapsed().as_micros() as u64;
        self.core.start_turn(wall_ms(), mono_us);
    }

    /// Takes one input; false once asked to stop.
    fn handle(&mut self, input: LogInput) -> bool {
        match input {
            LogInput::Submit(operations) => {
                for LogSubmitted { operation, reply } in operations {
                    self.core.submit(&operation, reply);
                }
            }
            LogInput::Messages { from, messages } => self.core.receive_in_epochs(from, messages),
            LogInput::Status(reply) => {
                let _ = reply.send(self.core.figures());
            }
            LogInput::Scan {
                cursor,
                count,
                reply,
            } => {
                let _ = reply.send(self.core.scan_live(cursor, count));
            }
            LogInput::Rebuilt(Ok(machine)) => {
                // A peer's snapshot installed meanwhile (or a rejoin) ended the rebuild: the
                // machine is dropped.
                let taken =
                    self.core.replica().status() == logless_multipaxos::replica::Status::Rebuilding;
                let executed = self.core.replica().executed_below().0;
                let replaying = Instant::now();
                self.core.finish_rebuild(*machine);
                info!(
                    target: crate::log_turn::RESTART_TARGET,
                    since_start_ms = self.outlet.started.elapsed().as_millis() as u64,
                    taken,
                    replayed_instances = self.core.replica().executed_below().0.saturating_sub(executed),
                    replay_ms = replaying.elapsed().as_micros() as f64 / 1_000.0,
                    "rebuilt the state machine from persistent memory: executing and serving"
                );
            }
            LogInput::Rebuilt(Err(e)) => {
                self.failed = Some(e);
                return false;
            }
            LogInput::Stop => return false,
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use logless_multipaxos::ids::{Instance, View};

    use super::*;

    #[test]
    fn every_message_leaves_with_the_replicas_epoch() {
        let (tx, mut rx) = mpsc::unbounded_channel();
        let mut outlet = ChannelOutlet {
            peers: [(NodeId(2), tx)].into_iter().collect(),
            started: Instant::now(),
            epoch: Epoch(3),
        };
        let alive = Message::Alive {
            view: View(1),
            first_undecided: Instance(4),
        };
        let recovery = Message::Recovery { epoch: Epoch(3) };
        outlet.send(NodeId(2), vec![alive.clone(), recovery.clone()]);
        // A peer without a link: the messages are lost, like on a broken link.
        outlet.send(NodeId(9), vec![alive.clone()]);
        assert_eq!(
            rx.try_recv().unwrap(),
            [(Epoch(3), alive), (Epoch(3), recovery)]
        );
        assert!(rx.try_recv().is_err());
    }
}
