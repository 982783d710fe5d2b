//! A replica process of the model: the engine's [`Replica`] over the engine's test state
//! machine ([`History`]), its durable store, and what a runtime does with a step's output.
use std::hash::{Hash, Hasher};
use std::sync::Arc;

use logless_multipaxos::config::{Config, Recovery};
use logless_multipaxos::ids::Epoch;
use logless_multipaxos::message::{ClientReply, Envelope};
use logless_multipaxos::replica::Replica;
use logless_multipaxos::testing::{durable_before_send, History, MemStore};

/// A replica process: the replica, its store (what a crash keeps) and its past lives' counts.
#[derive(Clone, Debug)]
pub struct Process {
    /// The replica.
    pub replica: Replica<History>,
    /// Its store. Only the durable state and the epoch take part in comparisons: the store's
    /// flush count would tell apart states that are the same.
    pub store: MemStore,
    /// How many times the process started (1 before any crash).
    pub incarnation: u32,
    /// The catch-up queries earlier incarnations sent (the model bounds them).
    pub catch_ups_before: u64,
}

impl PartialEq for Process {
    fn eq(&self, other: &Process) -> bool {
        self.replica == other.replica
            && self.store.durable() == other.store.durable()
            && self.store.epoch() == other.store.epoch()
            && self.incarnation == other.incarnation
            && self.catch_ups_before == other.catch_ups_before
    }
}

impl Eq for Process {}

impl Hash for Process {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.replica.hash(state);
        self.store.durable().hash(state);
        self.store.epoch().hash(state);
        self.incarnation.hash(state);
        self.catch_ups_before.hash(state);
    }
}

/// What a step of a replica let out, in the order a runtime lets it out.
#[derive(Debug, Default)]
pub struct Output {
    /// The messages sent, each with its sender's epoch and whether it left only once what it
    /// promises was durable (under EpochSS, where nothing but the epoch is, always).
    pub messages: Vec<(Envelope, Epoch, bool)>,
    /// The client replies released.
    pub replies: Vec<ClientReply>,
}

impl Process {
    /// A process that has never run.
    pub fn new(config: Config) -> Process {
        Process {
            replica: Replica::new(config, History::default(), 0),
            store: MemStore::default(),
            incarnation: 1,
            catch_ups_before: 0,
        }
    }

    /// The catch-up queries every incarnation sent.
    pub fn catch_ups(&self) -> u64 {
        self.catch_ups_before + self.replica.stats().catch_up_queries
    }

    /// Takes the replica's output as the runtime does: commit the records (write, flush), then
    /// release the messages and replies. A message the replica let out ahead of its records (a
    /// deliberate bug) leaves before the commit, and is checked against the store as it was.
    pub fn commit(&mut self) -> Output {
        let ready = self.replica.take_ready();
        let mut output = Output::default();
        let leaked = ready.clone().abandon();
        let early = leaked.len();
        for envelope in leaked {
            output.messages.push(self.sent(envelope));
        }
        let Ok(released) = ready.commit(&mut self.store);
        for envelope in released.messages.into_iter().skip(early) {
            output.messages.push(self.sent(envelope));
        }
        output.replies = released.replies;
        output
    }

    /// `envelope` as it leaves now: with the epoch, and whether what it promises is durable.
    fn sent(&self, envelope: Envelope) -> (Envelope, Epoch, bool) {
        let durable = self.replica.config().recovery == Recovery::Epoch
            || durable_before_send(self.store.durable(), &envelope.message);
        (envelope, self.replica.epoch(), durable)
    }

    /// Crashes in the middle of a step: only what the replica let out ahead of its records
    /// leaves (nothing, unless a deliberate bug leaks), the records are lost, and the process
    /// restarts from its store.
    pub fn crash_mid_step(&mut self) -> Output {
        let leaked = self.replica.take_ready().abandon();
        let messages = leaked.into_iter().map(|e| self.sent(e)).collect();
        self.restart();
        Output {
            messages,
            replies: Vec::new(),
        }
    }

    /// Crashes between steps and restarts at once: from what the store made durable under
    /// FullSS (and under mPaxos, rebuilt at once), in the next epoch (and recovering from the
    /// peers) under EpochSS.
    pub fn restart(&mut self) {
        self.store.crash();
        self.catch_ups_before = self.catch_ups();
        self.incarnation += 1;
        let config = self.replica.config().clone();
        self.replica = match config.recovery {
            Recovery::FullSs => {
                Replica::recover(config, History::default(), self.store.durable(), 0)
            }
            Recovery::Epoch => {
                Replica::start_epoch(config, History::default(), self.store.epoch(), 0)
            }
            Recovery::Pmem => {
                let mut replica =
                    Replica::resume(config, History::default(), self.store.durable(), 0);
                replica.rebuild_now(History::default(), 0);
                replica
            }
        };
    }
}

/// A process with its fingerprint, computed once when it changes: a step changes one replica,
/// and the other two need not be hashed again for the new state's fingerprint.
#[derive(Clone, Debug)]
pub struct Node {
    /// The process.
    pub process: Process,
    fingerprint: u64,
}

impl Node {
    /// Seals `process` with its fingerprint.
    pub fn sealed(process: Process) -> Arc<Node> {
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        process.hash(&mut hasher);
        Arc::new(Node {
            process,
            fingerprint: hasher.finish(),
        })
    }
}

impl PartialEq for Node {
    fn eq(&self, other: &Node) -> bool {
        self.fingerprint == other.fingerprint && self.process == other.process
    }
}

impl Eq for Node {}

impl Hash for Node {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.fingerprint.hash(state);
    }
}
