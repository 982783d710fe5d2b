//! The psmr engine's event loop on tokio: the node's one [`PsmrCore`], fed from its input
//! channel and from its worker threads' reports, with its links to every peer.
//!
//! Like the log engine's loop ([`crate::log_loop`]) it owns its core alone and is spoken to
//! only through its channel; it turns at least every [`TICK_MS`] (heartbeats, timeouts,
//! skips). The worker threads ([`crate::psmr_workers`]) execute what the plan holds and report
//! the replies of this replica's clients on a channel of their own, which the loop answers
//! from.
use std::path::PathBuf;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use bytes::Bytes;
use logless_multipaxos::ids::NodeId;
use logless_multipaxos::message::Message;
use logless_service::Group;
use logless_storage::{FsDir, StoreError};
use rustc_hash::FxHashMap;
use tokio::sync::{mpsc, oneshot};
use tokio::time::MissedTickBehavior;

use crate::log_loop::RejoinMarker;
pub use crate::log_loop::TICK_MS;
use crate::psmr_service::PsmrService;
use crate::psmr_turn::{PsmrAnswer, PsmrCore, PsmrOutlet, PsmrStatus};
use crate::psmr_workers::Executed;
use crate::shard::wall_ms;

/// The most inputs taken in one turn before the turn is committed.
const INPUTS_PER_TURN_MAX: usize = 4096;

/// What the psmr loop is asked to do.
#[derive(Debug)]
pub enum PsmrInput {
    /// Client commands (the service's encoding), in the order the clients sent them.
    Submit(Vec<PsmrSubmitted>),
    /// Group messages from a peer.
    Messages {
        /// The sender.
        from: NodeId,
        /// In the order sent.
        messages: Vec<(Group, Message)>,
    },
    /// A snapshot of the engine's figures.
    Status(oneshot::Sender<PsmrStatus>),
    /// Commit what is pending, flush and stop.
    Stop,
}

/// Where the answer to one command goes: the connection's channel and the command's number on
/// it.
#[derive(Debug)]
pub struct PsmrReplyTo {
    /// The connection's channel.
    pub tx: mpsc::UnboundedSender<(u64, PsmrAnswer)>,
    /// The command's number on that connection.
    pub seq: u64,
}

/// One client command handed to the loop.
#[derive(Debug)]
pub struct PsmrSubmitted {
    /// The command, encoded for the service.
    pub command: Bytes,
    /// Where the answer goes.
    pub reply: PsmrReplyTo,
}

/// The psmr loop and everything it owns.
pub struct PsmrLoop {
    core: PsmrCore<PsmrReplyTo, FsDir, PsmrService>,
    inputs: mpsc::Receiver<PsmrInput>,
    executed: mpsc::UnboundedReceiver<Executed>,
    workers: Vec<JoinHandle<()>>,
    stop_workers: Box<dyn Fn() + Send>,
    outlet: ChannelOutlet,
    /// While a rejoin after a lost disk is under way: the file to create once it completed.
    rejoined_marker: RejoinMarker,
}

struct ChannelOutlet {
    peers: FxHashMap<NodeId, mpsc::UnboundedSender<Vec<(Group, Message)>>>,
    started: Instant,
}

impl PsmrOutlet<PsmrReplyTo> for ChannelOutlet {
    fn send(&mut self, to: NodeId, messages: Vec<(Group, Message)>) {
        if let Some(link) = self.peers.get(&to) {
            // A closed link drops the batch, like a lost message.
            let _ = link.send(messages);
        }
    }

    fn answer(&mut self, reply: PsmrReplyTo, answer: PsmrAnswer) {
        // The client may have gone; its answer is then dropped.
        let _ = reply.tx.send((reply.seq, answer));
    }
}

/// The loop's parts besides its core: its channels, its workers and its links.
pub struct PsmrWiring {
    /// The loop's inputs.
    pub inputs: mpsc::Receiver<PsmrInput>,
    /// The workers' reports.
    pub executed: mpsc::UnboundedReceiver<Executed>,
    /// The worker threads, joined when the loop ends.
    pub workers: Vec<JoinHandle<()>>,
    /// Tells the workers to stop.
    pub stop_workers: Box<dyn Fn() + Send>,
    /// The writer of each remote node's link.
    pub peers: FxHashMap<NodeId, mpsc::UnboundedSender<Vec<(Group, Message)>>>,
    /// The origin of the core's monotonic clock.
    pub started: Instant,
}

impl PsmrLoop {
    /// The loop around `core`, wired by `wiring`.
    pub fn new(core: PsmrCore<PsmrReplyTo, FsDir, PsmrService>, wiring: PsmrWiring) -> PsmrLoop {
        PsmrLoop {
            core,
            inputs: wiring.inputs,
            executed: wiring.executed,
            workers: wiring.workers,
            stop_workers: wiring.stop_workers,
            outlet: ChannelOutlet {
                peers: wiring.peers,
                started: wiring.started,
            },
            rejoined_marker: RejoinMarker::default(),
        }
    }

    /// Creates `marker` (durably) once the replica's rejoin completed in every group: the
    /// turn that completed it has made every group's records durable by then (see
    /// [`PsmrCore::rejoining`]), so later starts replay the groups' logs as usual.
    pub fn mark_rejoined_at(&mut self, marker: PathBuf) {
        self.rejoined_marker.at(marker);
    }

    /// Creates the rejoin's marker if the rejoin just completed.
    fn note_rejoined(&mut self) -> Result<(), StoreError> {
        if !self.rejoined_marker.note(self.core.rejoining())? {
            return Ok(());
        }
        tracing::info!(
            "rejoined after a lost disk: every psmr group recovered its log, and this replica \
             takes part again"
        );
        Ok(())
    }

    /// Runs until [`PsmrInput::Stop`] or until every sender is gone, then stops the workers.
    /// An error means a log failed: the replica must stop (fail-stop).
    pub async fn run(mut self) -> Result<(), StoreError> {
        let result = self.turns().await;
        (self.stop_workers)();
        for worker in self.workers.drain(..) {
            let _ = worker.join();
        }
        result
    }

    async fn turns(&mut self) -> Result<(), StoreError> {
        let mut ticks = tokio::time::interval(Duration::from_millis(TICK_MS));
        ticks.set_missed_tick_behavior(MissedTickBehavior::Delay);
        let mut running = true;
        while running {
            tokio::select! {
                biased;
                executed = self.executed.recv() => {
                    self.start_turn();
                    if let Some(executed) = executed {
                        self.core.executed(executed, &mut self.outlet);
                    }
                }
                input = self.inputs.recv() => {
                    self.start_turn();
                    match input {
                        Some(input) => running = self.handle(input),
                        None => running = false,
                    }
                }
                _ = ticks.tick() => self.start_turn(),
            }
            while let Ok(executed) = self.executed.try_recv() {
                self.core.executed(executed, &mut self.outlet);
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
            self.core.finish_turn(&mut self.outlet)?;
            self.note_rejoined()?;
        }
        Ok(())
    }

    fn start_turn(&mut self) {
        let mono_us = self.outlet.started.elapsed().as_micros() as u64;
        self.core.start_turn(wall_ms(), mono_us);
    }

    /// Takes one input; false once asked to stop.
    fn handle(&mut self, input: PsmrInput) -> bool {
        match input {
            PsmrInput::Submit(commands) => {
                for PsmrSubmitted { command, reply } in commands {
                    self.core.submit(command, reply);
                }
            }
            PsmrInput::Messages { from, messages } => self.core.receive(from, messages),
            PsmrInput::Status(reply) => {
                let _ = reply.send(self.core.status());
            }
            PsmrInput::Stop => return false,
        }
        true
    }
}
