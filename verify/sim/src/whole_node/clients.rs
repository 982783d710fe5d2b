//! The clients' bookkeeping of the whole-node runs of the log and psmr engines: each client's
//! connection (a Redis session to one node, another while that one is down) and its command in
//! flight, the keys' generations (a register or entry moves to a fresh key after a few writes
//! of unknown outcome), and the per-key history's records. What the commands are and how an
//! answer is read stays with each engine's workload.
use std::collections::BTreeMap;

use bytes::Bytes;
use logless_commands::command::Command;
use logless_multipaxos::ids::NodeId;
use logless_redis::session::Session;
use logless_rmw::ids::Key;
use rand::rngs::SmallRng;
use rand::seq::IndexedRandom;
use rand::Rng;

use crate::history::{History, Operation, Outcome};
use crate::queue::EventQueue;

/// Client ids of the liveness phase start here.
pub(crate) const LIVENESS_CLIENT: u32 = 1 << 20;

/// Writes with unknown outcome after which a key's register moves to a fresh key (each
/// multiplies the orders the checker must try).
pub(crate) const UNKNOWN_WRITES_PER_KEY: u32 = 6;

/// The words of a Redis request.
pub(crate) fn args(words: &[&str]) -> Vec<Bytes> {
    words.iter().map(|w| Bytes::from(w.to_string())).collect()
}

/// A new connection's session of `client`, as a node of a log engine opens it.
pub(crate) fn session(client: u32) -> Session {
    Session::new(u64::from(client)).with_total_order(true)
}

/// A command in flight: its number, its node, and what the engine's workload keeps of it.
pub(crate) struct Pending<R> {
    pub seq: u64,
    pub node: NodeId,
    pub record: R,
}

/// A client's connection and its command in flight.
pub(crate) struct Client<R> {
    node: NodeId,
    /// The Redis session of the connection to `node`.
    pub session: Session,
    issued: u32,
    seq: u64,
    in_flight: Option<Pending<R>>,
    /// Whether the last command was acknowledged.
    pub acknowledged: bool,
}

impl<R> Client<R> {
    pub(crate) fn new(id: u32, node: NodeId) -> Client<R> {
        Client {
            node,
            session: session(id),
            issued: 0,
            seq: 0,
            in_flight: None,
            acknowledged: false,
        }
    }

    /// The node the client is connected to.
    pub(crate) fn node(&self) -> NodeId {
        self.node
    }

    /// The number its next command gets.
    pub(crate) fn next_seq(&self) -> u64 {
        self.seq + 1
    }

    /// Whether a command is in flight.
    pub(crate) fn busy(&self) -> bool {
        self.in_flight.is_some()
    }

    /// Whether the client is idle with commands left of its `commands`.
    pub(crate) fn wants_next(&self, commands: u32) -> bool {
        self.issued < commands && self.in_flight.is_none()
    }

    /// Connects client `id` to `node`: a new session if that is another node.
    pub(crate) fn connect(&mut self, id: u32, node: NodeId) {
        if self.node != node {
            self.session = session(id);
            self.node = node;
        }
    }

    /// Sends a command to `node`; its number.
    pub(crate) fn begin(&mut self, node: NodeId, record: R) -> u64 {
        self.issued += 1;
        self.seq += 1;
        let seq = self.seq;
        self.in_flight = Some(Pending { seq, node, record });
        seq
    }

    /// Command `seq` ends, if it is the one in flight.
    pub(crate) fn finish(&mut self, seq: u64) -> Option<Pending<R>> {
        if self.in_flight.as_ref().is_none_or(|p| p.seq != seq) {
            return None;
        }
        self.in_flight.take()
    }
}

/// The clients of a run, by id.
pub(crate) struct Clients<R>(BTreeMap<u32, Client<R>>);

impl<R> Default for Clients<R> {
    fn default() -> Self {
        Clients(BTreeMap::new())
    }
}

impl<R> Clients<R> {
    /// Adds `count` clients, spread over `nodes` nodes, and schedules each one's first command
    /// within `think_us`.
    pub(crate) fn start<E>(
        &mut self,
        count: u32,
        nodes: u16,
        think_us: u64,
        rng: &mut SmallRng,
        events: &mut EventQueue<E>,
        next: impl Fn(u32) -> E,
    ) {
        for c in 0..count {
            let node = NodeId((c % u32::from(nodes)) as u16 + 1);
            self.0.insert(c, Client::new(c, node));
            let at = rng.random_range(0..=think_us);
            events.schedule(at, next(c));
        }
    }

    /// Adds a client of the liveness phase, connected to `node`; its id.
    pub(crate) fn add_liveness(&mut self, node: NodeId) -> u32 {
        let client = LIVENESS_CLIENT + u32::from(node.0);
        self.0.insert(client, Client::new(client, node));
        client
    }

    /// Whether every workload client issued its `commands` and has none in flight.
    pub(crate) fn workload_done(&self, commands: u32) -> bool {
        (self.0.iter())
            .filter(|(&id, _)| id < LIVENESS_CLIENT)
            .all(|(_, c)| c.in_flight.is_none() && c.issued >= commands)
    }

    /// The clients (and their command's number) waiting on `node`.
    pub(crate) fn waiting_on(&self, node: NodeId) -> Vec<(u32, u64)> {
        (self.0.iter())
            .filter_map(|(&id, c)| match &c.in_flight {
                Some(p) if p.node == node => Some((id, p.seq)),
                _ => None,
            })
            .collect()
    }

    pub(crate) fn get(&self, client: u32) -> &Client<R> {
        &self.0[&client]
    }

    pub(crate) fn get_mut(&mut self, client: u32) -> &mut Client<R> {
        self.0.get_mut(&client).expect("client")
    }

    /// The client, if it exists.
    pub(crate) fn find_mut(&mut self, client: u32) -> Option<&mut Client<R>> {
        self.0.get_mut(&client)
    }
}

/// The node a client's command goes to: its own, or a random one of `up` if its own is down
/// (its own if every node is down: the connection is refused).
pub(crate) fn node_for(rng: &mut SmallRng, own: NodeId, up: &[NodeId]) -> NodeId {
    if up.contains(&own) {
        return own;
    }
    up.choose(rng).copied().unwrap_or(own)
}

/// Whether a command of workload client `client` is followed by another (the liveness phase's
/// clients issue theirs one by one).
pub(crate) fn continues(client: u32) -> bool {
    client < LIVENESS_CLIENT
}

/// The generation of each register's key, and the writes of unknown outcome of each.
#[derive(Default)]
pub(crate) struct Generations {
    generation: BTreeMap<u32, u32>,
    /// Writes with unknown outcome, by register and generation.
    unknown_writes: BTreeMap<(u32, u32), u32>,
}

impl Generations {
    /// The generation of `register`'s key now.
    pub(crate) fn current(&self, register: u32) -> u32 {
        self.generation.get(&register).copied().unwrap_or(0)
    }

    /// A write of unknown outcome on `register` under `generation`: after
    /// [`UNKNOWN_WRITES_PER_KEY`], the register moves to a fresh key.
    pub(crate) fn unknown_write(&mut self, register: u32, generation: u32) {
        let count = (self.unknown_writes)
            .entry((register, generation))
            .or_default();
        *count += 1;
        if *count >= UNKNOWN_WRITES_PER_KEY && self.current(register) == generation {
            *self.generation.entry(register).or_default() += 1;
        }
    }
}

/// Records the call of `command` on `key` by `client` at `now_us` in `history`; its index.
pub(crate) fn record_call(
    history: &mut History,
    client: u32,
    key: &[u8],
    command: Command,
    now_us: u64,
) -> usize {
    let index = history.operations.len();
    history.operations.push(Operation {
        client,
        key: Key::new(String::from_utf8_lossy(key).into_owned()),
        command,
        call_us: now_us,
        return_us: u64::MAX,
        outcome: Outcome::Unknown,
    });
    index
}

/// Records a command that was not acknowledged (`outcome`: not applied or unknown) at
/// `now_us`; whether it is a write of unknown outcome.
pub(crate) fn record_failure(op: &mut Operation, outcome: Outcome, now_us: u64) -> bool {
    if outcome == Outcome::NotApplied {
        op.return_us = now_us;
    }
    let write = !op.command.is_read_only();
    op.outcome = outcome;
    op.outcome == Outcome::Unknown && write
}
