//! A replica process of the model: the engine's [`Replica`] over the engine's test state
//! machine ([`History`]), its durable store, and what a runtime does with a step's output.
use std::hash::{Hash, Hasher};
use std::sync::Arc;

use logless_multipaxos::config::Config;
use logless_multipaxos::message::{ClientReply, Envelope};
use logless_multipaxos::replica::Replica;
use logless_multipaxos::testing::{durable_before_send, History, MemStore};

/// A replica process: the replica, its store (what a crash keeps) and its past lives' counts.
#[derive(Clone, Debug)]
pub struct Process {
    /// The replica.
    pub replica: Replica<History>,
    /// Its store. Only the durable state takes part in comparisons: the store's flush count
    /// would tell apart states that are the same.
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
            && self.incarnation == other.incarnation
            && self.catch_ups_before == other.catch_ups_before
    }
}

impl Eq for Process {}

impl Hash for Process {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.replica.hash(state);
        self.store.durable().hash(state);
        self.incarnation.hash(state);
        self.catch_ups_before.hash(state);
    }
}

/// What a step of a replica let out, in the order a runtime lets it out.
#[derive(Debug, Default)]
pub struct Output {
    /// The messages sent, with whether each left only once what it promises was durable.
    pub messages: Vec<(Envelope, bool)>,
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
            let durable = durable_before_send(self.store.durable(), &envelope.message);
            output.messages.push((envelope, durable));
        }
        let Ok(released) = ready.commit(&mut self.store);
        for envelope in released.messages.into_iter().skip(early) {
            let durable = durable_before_send(self.store.durable(), &envelope.message);
            output.messages.push((envelope, durable));
        }
        output.replies = released.replies;
        output
    }

    /// Crashes in the middle of a step: only what the replica let out ahead of its records
    /// leaves (nothing, unless a deliberate bug leaks), the records are lost, and the process
    /// restarts from its store.
    pub fn crash_mid_step(&mut self) -> Output {
        let leaked = self.replica.take_ready().abandon();
        let messages = leaked
            .into_iter()
            .map(|envelope| {
                let durable = durable_before_send(self.store.durable(), &envelope.message);
                (envelope, durable)
            })
            .collect();
        self.restart();
        Output {
            messages,
            replies: Vec::new(),
        }
    }

    /// Crashes between steps and restarts at once from what the store made durable.
    pub fn restart(&mut self) {
        self.store.crash();
        self.catch_ups_before = self.catch_ups();
        self.incarnation += 1;
        let config = self.replica.config().clone();
        self.replica = Replica::recover(config, History::default(), self.store.durable(), 0);
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
