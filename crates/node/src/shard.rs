//! One shard's event loop: the core [`Replica`] of the keys that hash to this shard, its slot
//! store, its timers, and its links to the same shard on every peer.
//!
//! A shard owns all of this alone; other tasks talk to it only through its input channel, so
//! nothing on the hot path takes a lock. Each turn of the loop takes everything that is waiting
//! (client commands, peer messages, link failures, due timers), then follows the order the core
//! prescribes: proposer messages go out, the acceptor states are written and flushed once
//! (group commit) and only then are the acceptor replies released, then clients get their
//! answers.
use std::collections::{BTreeMap, VecDeque};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use hdrhistogram::Histogram;
use logless_commands::command::{Command, Reply};
use logless_core::ids::{ClientTag, Key, NodeId};
use logless_core::message::{Envelope, Message};
use logless_core::persist::AcceptorStore;
use logless_core::proposer::{ProposeError, ProposerStats};
use logless_core::replica::Replica;
use logless_storage::StoreError;
use rustc_hash::FxHashMap;
use tokio::sync::{mpsc, oneshot};

use crate::store::ShardStore;

/// The answer a client waits for.
pub type CommandResult = Result<Reply, ProposeError>;

/// What a shard is asked to do.
#[derive(Debug)]
pub enum ShardInput {
    /// Client commands on keys of this shard, in the order the clients sent them.
    Commands(Vec<Submitted>),
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
    /// Commit what is pending, flush and stop.
    Stop,
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

/// A shard's figures, for INFO, `/metrics` and `/status`; the node's are its shards' summed.
#[derive(Clone, Debug, Default)]
pub struct ShardStatus {
    /// Registers with an acceptor state here (tombstones and expired keys included).
    pub registers: u64,
    /// Registers whose value is live now.
    pub live_registers: u64,
    /// The proposer's counters.
    pub proposer: ProposerStats,
    /// Commands answered, by command name and outcome (`ok`, `not_applied`, `unknown`,
    /// `overloaded`).
    pub commands: FxHashMap<(&'static str, &'static str), u64>,
    /// Command latency in microseconds, by command name.
    pub latency_us: FxHashMap<&'static str, Histogram<u64>>,
    /// Group-commit flushes and their total time.
    pub flushes: u64,
    /// Total flush time in microseconds.
    pub flush_micros: u64,
    /// Acceptor state writes.
    pub state_writes: u64,
    /// Peer links broken or replaced.
    pub links_broken: u64,
}

impl std::ops::AddAssign for ShardStatus {
    fn add_assign(&mut self, s: ShardStatus) {
        self.registers += s.registers;
        self.live_registers += s.live_registers;
        self.proposer += &s.proposer;
        for (k, v) in s.commands {
            *self.commands.entry(k).or_default() += v;
        }
        for (k, h) in s.latency_us {
            match self.latency_us.get_mut(k) {
                Some(total) => {
                    let _ = total.add(&h);
                }
                None => {
                    self.latency_us.insert(k, h);
                }
            }
        }
        self.flushes += s.flushes;
        self.flush_micros += s.flush_micros;
        self.state_writes += s.state_writes;
        self.links_broken += s.links_broken;
    }
}

struct Waiting {
    reply: ReplyTo,
    name: &'static str,
    started: Instant,
}

/// The wall clock in milliseconds, never going backwards within the process. Commands are
/// stamped with it, and expiry is decided from the stamps (see the README's clock assumption).
#[derive(Default)]
struct Clock {
    last_ms: u64,
}

impl Clock {
    fn now_ms(&mut self) -> u64 {
        let wall = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        self.last_ms = self.last_ms.max(wall);
        self.last_ms
    }
}

/// The most inputs taken in one turn before the batch is committed.
const INPUTS_PER_TURN_MAX: usize = 4096;

/// A shard and everything it owns.
pub struct Shard {
    node: NodeId,
    replica: Replica,
    store: ShardStore,
    inputs: mpsc::Receiver<ShardInput>,
    peers: FxHashMap<NodeId, mpsc::UnboundedSender<Vec<Message>>>,
    outgoing: FxHashMap<NodeId, Vec<Message>>,
    local: VecDeque<Message>,
    waiting: FxHashMap<u64, Waiting>,
    next_tag: u64,
    /// Wake-ups by due millisecond (most are stale by then; the proposer ignores those).
    timers: BTreeMap<u64, Vec<(Key, u64)>>,
    clock: Clock,
    /// The clock read once per turn: commands of one turn share a stamp.
    now_ms: u64,
    turn_started: Instant,
    commands: FxHashMap<(&'static str, &'static str), u64>,
    latency_us: FxHashMap<&'static str, Histogram<u64>>,
    state_writes: u64,
    links_broken: u64,
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
            node: replica.node(),
            replica,
            store,
            inputs,
            peers,
            outgoing: FxHashMap::default(),
            local: VecDeque::new(),
            waiting: FxHashMap::default(),
            next_tag: 0,
            timers: BTreeMap::new(),
            clock: Clock::default(),
            now_ms: 0,
            turn_started: Instant::now(),
            commands: FxHashMap::default(),
            latency_us: FxHashMap::default(),
            state_writes: 0,
            links_broken: 0,
        }
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
            if self.local.is_empty() {
                let next_ms = self.timers.keys().next().copied().unwrap_or(u64::MAX);
                if armed_ms != Some(next_ms) {
                    armed_ms = Some(next_ms);
                    let delay = if next_ms == u64::MAX {
                        far
                    } else {
                        Duration::from_millis(next_ms.saturating_sub(self.clock.now_ms()))
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
            } else {
                self.start_turn();
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
            let now_ms = self.now_ms;
            while let Some(message) = self.local.pop_front() {
                self.replica.handle_message(now_ms, self.node, message);
            }
            while let Some(entry) = self.timers.first_entry() {
                if *entry.key() > now_ms {
                    break;
                }
                for (key, token) in entry.remove() {
                    self.replica.handle_timer(now_ms, &key, token);
                }
            }
            self.commit_turn()?;
        }
        self.store.flush()
    }

    fn start_turn(&mut self) {
        self.now_ms = self.clock.now_ms();
        self.turn_started = Instant::now();
    }

    /// Takes one input; false once asked to stop.
    fn handle(&mut self, input: ShardInput) -> bool {
        let now_ms = self.now_ms;
        match input {
            ShardInput::Commands(commands) => {
                for Submitted {
                    key,
                    command,
                    reply,
                } in commands
                {
                    self.next_tag += 1;
                    let tag = self.next_tag;
                    self.waiting.insert(
                        tag,
                        Waiting {
                            reply,
                            name: command.name(),
                            started: self.turn_started,
                        },
                    );
                    self.replica
                        .handle_command(now_ms, ClientTag(tag), key, command);
                }
            }
            ShardInput::Messages { from, messages } => {
                for message in messages {
                    self.replica.handle_message(now_ms, from, message);
                }
            }
            ShardInput::LinkBroken(peer) => {
                self.links_broken += 1;
                self.replica.handle_link_broken(peer);
            }
            ShardInput::Status(reply) => {
                let _ = reply.send(self.status(now_ms));
            }
            ShardInput::Stop => return false,
        }
        true
    }

    /// Sends, persists, releases and answers what the replica produced, in the core's order.
    fn commit_turn(&mut self) -> Result<(), StoreError> {
        let output = self.replica.take_output();
        for envelope in output.sends {
            self.route(envelope);
        }
        if !output.persist.is_empty() {
            self.state_writes += output.persist.writes_len() as u64;
            for envelope in output.persist.commit(&mut self.store)? {
                self.route(envelope);
            }
        }
        for (to, messages) in &mut self.outgoing {
            if messages.is_empty() {
                continue;
            }
            let batch = std::mem::take(messages);
            if let Some(link) = self.peers.get(to) {
                // A closed link drops the batch, like a lost message.
                let _ = link.send(batch);
            }
        }
        for reply in output.replies {
            let Some(waiting) = self.waiting.remove(&reply.client.0) else {
                continue;
            };
            let outcome = match &reply.result {
                Ok(_) => "ok",
                Err(ProposeError::NotApplied) => "not_applied",
                Err(ProposeError::OutcomeUnknown) => "unknown",
                Err(ProposeError::Overloaded) => "overloaded",
            };
            *self.commands.entry((waiting.name, outcome)).or_default() += 1;
            let micros = waiting.started.elapsed().as_micros() as u64;
            self.latency_us
                .entry(waiting.name)
                .or_insert_with(|| Histogram::new(3).expect("valid histogram"))
                .saturating_record(micros.max(1));
            // The client may have gone; its answer is then dropped.
            let _ = waiting.reply.tx.send((waiting.reply.seq, reply.result));
        }
        for timer in output.timers {
            self.timers
                .entry(timer.at_ms)
                .or_default()
                .push((timer.key, timer.token));
        }
        Ok(())
    }

    fn route(&mut self, envelope: Envelope) {
        if envelope.to == self.node {
            self.local.push_back(envelope.message);
        } else {
            self.outgoing
                .entry(envelope.to)
                .or_default()
                .push(envelope.message);
        }
    }

    fn status(&self, now_ms: u64) -> ShardStatus {
        let mut registers = 0;
        let mut live_registers = 0;
        for (_, state) in self.replica.acceptor_states() {
            registers += 1;
            live_registers += u64::from(state.value.is_live(now_ms));
        }
        ShardStatus {
            registers,
            live_registers,
            proposer: self.replica.stats().clone(),
            commands: self.commands.clone(),
            latency_us: self.latency_us.clone(),
            flushes: self.store.flushes,
            flush_micros: self.store.flush_micros,
            state_writes: self.state_writes,
            links_broken: self.links_broken,
        }
    }
}
