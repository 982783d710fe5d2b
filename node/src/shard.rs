//! One shard's event loop on tokio: the [`ShardCore`] of the keys that hash to this shard, fed
//! from its input channel, with its links to the same shard on every peer.
//!
//! A shard owns all of this alone; other tasks talk to it only through its input channel, so
//! nothing on the hot path takes a lock. Each turn takes everything that is waiting (client
//! commands, peer messages, link failures, due timers) and hands it to the core's turn logic
//! ([`crate::turn`]), which persists and flushes once before anything leaves.
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use logless_commands::command::Command;
use logless_rmw::ids::{Key, NodeId};
use logless_rmw::message::Message;
use logless_rmw::replica::Replica;
use logless_storage::StoreError;
use rustc_hash::FxHashMap;
use tokio::sync::{mpsc, oneshot, Notify};

use crate::memory::Memory;
use crate::store::ShardStore;
pub use crate::turn::{CommandResult, ShardBugs, ShardStatus};
use crate::turn::{Outlet, ShardCore};

/// A page of a shard's live keys: the next cursor (0 at the end) and each key with its type.
pub type ScanPage = (u64, Vec<(Bytes, &'static str)>);

/// What a shard is asked to do.
#[derive(Debug)]
pub enum ShardInput {
    /// Client commands on keys of this shard, in the order the clients sent them.
    Commands(Vec<Submitted>),
    /// Write-throughs of registers of this shard for the ring's data mover
    /// ([`crate::ring_mover`]), each answered as GET is.
    WriteThroughs(Vec<(Key, ReplyTo)>),
    /// Protocol messages from the same shard of a peer.
    Messages {
        /// The sender.
        from: NodeId,
        /// In the order sent.
        messages: Vec<Message>,
    },
    /// A connection to or from `peer` broke or was replaced: messages on it may be lost.
    LinkBroken(NodeId),
    /// A snapshot of the shard's figures.
    Status(oneshot::Sender<ShardStatus>),
    /// How many states the shard's acceptor holds of registers it no longer replicates
    /// ([`ShardCore::registers_unplaced`]): a count kept, where a status walks the table.
    RegistersUnplaced(oneshot::Sender<u64>),
    /// A page of the live keys of this replica's copy (see [`ShardCore::scan_live`]), or if
    /// `voted`, of every key it holds a vote of, dead ones included (see
    /// [`ShardCore::scan_voted`]; a ring's data mover's `SCAN … VOTED`).
    Scan {
        /// Where to resume (0 starts).
        cursor: u64,
        /// How many registers to visit.
        count: usize,
        /// Every key holding a vote rather than the live ones.
        voted: bool,
        /// The next cursor (0 at the end) and the live keys with their types.
        reply: oneshot::Sender<ScanPage>,
    },
    /// Switch thrifty reads and writes (CONFIG SET).
    SetThrifty {
        /// Thrifty reads.
        reads: bool,
        /// Thrifty fast writes.
        writes: bool,
    },
    /// A live key of this replica's copy, from a place `seed` chooses (RANDOMKEY).
    RandomKey {
        /// Chooses where to look from.
        seed: u64,
        /// The key, if the shard has a live one.
        reply: oneshot::Sender<Option<Bytes>>,
    },
    /// Count the registers of a new stage of the ring from now on (`Replica::install_placement`;
    /// [`crate::ring_watch`]), and drop in the background the states of registers it no longer
    /// places on this node (`ShardCore::drop_if_due`).
    InstallPlacement(logless_rmw::placement::Placement),
    /// The highest round number the shard's acceptor acknowledged
    /// ([`ShardCore::high_round`]); asked after a joint stage was installed, so it covers
    /// every promise of the stage before (docs/ring.md §4 "Dead registers").
    HighRound(oneshot::Sender<u64>),
    /// Raise the round floor above `above` for the slots the joint stage `stage` gives this
    /// node ([`ShardCore::raise_floor_for_gained_slots`]); answered after the turn's commit.
    RaiseGainedFloor {
        /// The joint stage.
        stage: logless_rmw::placement::StageId,
        /// The highest round number of the old replicas.
        above: u64,
        /// What became of the raise, sent after the commit.
        reply: oneshot::Sender<FloorRaise>,
    },
    /// Commit what is pending, flush and stop.
    Stop,
}

/// What became of a [`ShardInput::RaiseGainedFloor`], once the turn that took it committed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FloorRaise {
    /// The floor is durable and the shard answers for the slots it gains.
    Durable,
    /// The store refused the floor for lack of space: the shard still holds the slots back,
    /// and the raise is to be asked again (docs/ring.md §4, "Dead registers", "A full store").
    Refused,
    /// The stage is not the installed one: nothing changed.
    OtherStage,
}

/// Where the answer to one command goes: the connection's reply channel and the command's
/// sequence number on it. One channel per connection means one wake-up for all the answers
/// a turn produces for it, not one per command.
#[derive(Debug)]
pub struct ReplyTo {
    /// The connection's channel.
    pub tx: mpsc::UnboundedSender<(u64, CommandResult)>,
    /// The command's number on that connection.
    pub seq: u64,
}

/// One client command handed to a shard.
#[derive(Debug)]
pub struct Submitted {
    /// The register.
    pub key: Key,
    /// The command.
    pub command: Command,
    /// Where the answer goes.
    pub reply: ReplyTo,
}

/// The most inputs taken in one turn before the batch is committed.
const INPUTS_PER_TURN_MAX: usize = 4096;

/// A shard and everything it owns: the turn logic, its input channel and its peer links.
pub struct Shard {
    core: ShardCore<ReplyTo>,
    /// Answers to send once this turn's commit made what they confirm durable
    /// ([`ShardInput::RaiseGainedFloor`]).
    after_commit: Vec<(oneshot::Sender<FloorRaise>, bool)>,
    inputs: mpsc::Receiver<ShardInput>,
    outlet: ChannelOutlet,
    /// Whether the replica is over `maxmemory`, read at every turn.
    memory: Arc<Memory>,
    /// Woken when the engine met a later stage of the ring than the one installed: the ring's
    /// stage register is read at once ([`crate::ring_watch`]). `None` off a ring.
    stage_read: Option<Arc<Notify>>,
}

/// Carries a turn's outputs to the peer writers and the client connections.
struct ChannelOutlet {
    peers: FxHashMap<NodeId, mpsc::UnboundedSender<Vec<Message>>>,
    /// The origin of the shard's monotonic clock.
    started: Instant,
}

impl Outlet<ReplyTo> for ChannelOutlet {
    fn send(&mut self, to: NodeId, messages: Vec<Message>) {
        if let Some(link) = self.peers.get(&to) {
            // A closed link drops the batch, like a lost message.
            let _ = link.send(messages);
        }
    }

    fn answer(&mut self, reply: ReplyTo, result: CommandResult) {
        // The client may have gone; its answer is then dropped.
        let _ = reply.tx.send((reply.seq, result));
    }

    fn mono_us(&self) -> u64 {
        self.started.elapsed().as_micros() as u64
    }
}

/// The wall clock in milliseconds since the epoch.
pub fn wall_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

impl Shard {
    /// A shard around `replica` and its `store`, reading `inputs` and sending to `peers` (the
    /// writer of each remote node's link for this shard).
    pub fn new(
        replica: Replica,
        store: ShardStore,
        inputs: mpsc::Receiver<ShardInput>,
        peers: FxHashMap<NodeId, mpsc::UnboundedSender<Vec<Message>>>,
    ) -> Shard {
        Shard {
            core: ShardCore::new(replica, store),
            after_commit: Vec::new(),
            inputs,
            outlet: ChannelOutlet {
                peers,
                started: Instant::now(),
            },
            memory: Arc::default(),
            stage_read: None,
        }
    }

    /// Wakes `stage_read` whenever the engine meets a later stage of the ring than the one
    /// installed (its fence holds such messages back until the stage is installed).
    pub fn on_newer_stage(&mut self, stage_read: Arc<Notify>) {
        self.stage_read = Some(stage_read);
    }

    /// Refuses commands that need new space while `memory` is over its limit.
    pub fn watch_memory(&mut self, memory: Arc<Memory>) {
        self.memory = memory;
    }

    /// Switches deliberate runtime bugs on (harness tests only).
    pub fn inject_bugs(&mut self, bugs: ShardBugs) {
        self.core.inject_bugs(bugs);
    }

    /// Runs until [`ShardInput::Stop`] or until every sender is gone. Returns an error if the
    /// store failed: the replica must then stop voting (fail-stop), and the caller stops the
    /// node.
    pub async fn run(mut self) -> Result<(), StoreError> {
        let far = Duration::from_secs(3600);
        let sleep = tokio::time::sleep(far);
        tokio::pin!(sleep);
        // The deadline the sleep is armed for; `None` once it has fired, so that it is armed
        // again (for the far future when no timer is left) before it is polled again.
        let mut armed_ms = None;
        let mut running = true;
        while running {
            if self.core.has_local_work() {
                self.start_turn();
            } else {
                let next_ms = self.core.next_timer_ms().unwrap_or(u64::MAX);
                if armed_ms != Some(next_ms) {
                    armed_ms = Some(next_ms);
                    let delay = if next_ms == u64::MAX {
                        far
                    } else {
                        Duration::from_millis(
                            next_ms.saturating_sub(self.core.now_ms().max(wall_ms())),
                        )
                    };
                    sleep.as_mut().reset(tokio::time::Instant::now() + delay);
                }
                tokio::select! {
                    biased;
                    input = self.inputs.recv() => {
                        self.start_turn();
                        match input {
                            Some(input) => running = self.handle(input),
                            None => running = false,
                        }
                    }
                    () = &mut sleep => {
                        armed_ms = None;
                        self.start_turn();
                    }
                }
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
            for (reply, installed) in self.after_commit.drain(..) {
                let _ = reply.send(if !installed {
                    FloorRaise::OtherStage
                } else if self.core.awaits_gained_floor() {
                    FloorRaise::Refused
                } else {
                    FloorRaise::Durable
                });
            }
            if let Some(stage) = self.core.take_newer_stage() {
                if let Some(stage_read) = &self.stage_read {
                    tracing::debug!(
                        stage = %crate::ring_register::stage_name(stage),
                        "a peer is at a later stage of the ring: reading it now"
                    );
                    stage_read.notify_one();
                }
            }
        }
        self.core.flush()
    }

    fn start_turn(&mut self) {
        self.core.start_turn(wall_ms(), self.outlet.mono_us());
        self.core.set_memory_full(self.memory.full());
    }

    /// Takes one input; false once asked to stop.
    fn handle(&mut self, input: ShardInput) -> bool {
        match input {
            ShardInput::Commands(commands) => {
                for Submitted {
                    key,
                    command,
                    reply,
                } in commands
                {
                    self.core.submit(key, command, reply);
                }
            }
            ShardInput::WriteThroughs(registers) => {
                for (key, reply) in registers {
                    self.core.submit_write_through(key, reply);
                }
            }
            ShardInput::Messages { from, messages } => self.core.receive(from, messages),
            ShardInput::LinkBroken(peer) => self.core.link_broken(peer),
            ShardInput::Status(reply) => {
                let _ = reply.send(self.core.status());
            }
            ShardInput::RegistersUnplaced(reply) => {
                let _ = reply.send(self.core.registers_unplaced());
            }
            ShardInput::Scan {
                cursor,
                count,
                voted: false,
                reply,
            } => {
                let _ = reply.send(self.core.scan_live(cursor, count));
            }
            ShardInput::Scan {
                cursor,
                count,
                voted: true,
                reply,
            } => {
                let _ = reply.send(self.core.scan_voted(cursor, count));
            }
            ShardInput::SetThrifty { reads, writes } => self.core.set_thrifty(reads, writes),
            ShardInput::RandomKey { seed, reply } => {
                let _ = reply.send(self.core.random_live_key(seed));
            }
            ShardInput::InstallPlacement(placement) => self.core.install_placement(placement),
            ShardInput::HighRound(reply) => {
                let _ = reply.send(self.core.high_round());
            }
            ShardInput::RaiseGainedFloor {
                stage,
                above,
                reply,
            } => {
                let raised = self.core.raise_floor_for_gained_slots(stage, above);
                self.after_commit.push((reply, raised));
            }
            ShardInput::Stop => return false,
        }
        true
    }
}
