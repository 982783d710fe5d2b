//! The clients of a whole-node run of the psmr engine and the history they make.
//!
//! Every command is a Redis request a client would send (SET NX, SET XX, GET, DEL on the
//! B⁺-tree's entries) through the node's session and the psmr engine's front end
//! ([`psmr_ops::handle`]), which makes it the service's command; the answer comes back as the
//! node shows it ([`psmr_ops::reply`]), and TRYAGAIN and UNCERTAIN are read as a client reads
//! them. The history records each command as the session parses it, for the per-key checker.
use bytes::Bytes;
use logless_commands::command::Reply;
use logless_multipaxos::ids::NodeId;
use logless_node::psmr_ops::{self, PsmrStep};
use logless_node::psmr_turn::PsmrAnswer;
use logless_redis::acl::Acl;
use logless_redis::resp::Value;
use logless_redis::session::{Session, Step};
use logless_rmw::ids::Key;
use rand::seq::IndexedRandom;
use rand::Rng;

use super::{AnswerTo, Event, Input, PsmrNodeCluster, CLIENT_DELAY_US};
use crate::history::{Operation, Outcome};

/// Client ids of the liveness phase start here.
const LIVENESS_CLIENT: u32 = 1 << 20;

/// Writes with unknown outcome after which an entry moves to a fresh key (each multiplies the
/// orders the checker must try).
const UNKNOWN_WRITES_PER_KEY: u32 = 6;

/// A client's connection and its command in flight.
pub(super) struct Client {
    node: NodeId,
    /// The Redis session of the connection to `node`.
    session: Session,
    issued: u32,
    seq: u64,
    in_flight: Option<Pending>,
    /// Whether the last command was acknowledged.
    acknowledged: bool,
}

impl Client {
    fn new(id: u32, node: NodeId) -> Client {
        Client {
            node,
            session: session(id),
            issued: 0,
            seq: 0,
            in_flight: None,
            acknowledged: false,
        }
    }
}

fn session(client: u32) -> Session {
    Session::new(u64::from(client)).with_total_order(true)
}

struct Pending {
    seq: u64,
    node: NodeId,
    /// The operation's index in the history.
    index: usize,
    entry: u32,
    generation: u32,
}

fn args(words: &[&str]) -> Vec<Bytes> {
    words.iter().map(|w| Bytes::from(w.to_string())).collect()
}

/// The history's reply for what the node showed; `None` for a value the service's commands
/// never answer.
fn reply_of(value: &Value) -> Option<Reply> {
    Some(match value {
        Value::Simple(text) if text == "OK" => Reply::Ok,
        Value::Nil => Reply::Nil,
        Value::Int(n) => Reply::Int(*n),
        Value::Bulk(b) => Reply::Bulk(b.clone()),
        _ => return None,
    })
}

/// What the client learns from the node's answer (`None`: no answer, as after a timeout or a
/// lost connection), read from the reply as a client reads it: TRYAGAIN says not applied,
/// UNCERTAIN that it may have been.
fn outcome(answer: Option<PsmrAnswer>) -> Result<Value, Outcome> {
    let Some(answer) = answer else {
        return Err(Outcome::Unknown);
    };
    match psmr_ops::reply(answer) {
        Value::Error(text) if text.starts_with("TRYAGAIN ") => Err(Outcome::NotApplied),
        Value::Error(text) if text.starts_with("UNCERTAIN ") => Err(Outcome::Unknown),
        value => Ok(value),
    }
}

impl PsmrNodeCluster {
    pub(super) fn start_clients(&mut self) {
        for c in 0..self.config.clients {
            let node = NodeId((c % u32::from(self.config.nodes)) as u16 + 1);
            self.clients.insert(c, Client::new(c, node));
            let at = self.rng.random_range(0..=self.config.think_us);
            self.events.schedule(at, Event::ClientNext { client: c });
        }
    }

    pub(super) fn workload_done(&self) -> bool {
        (self.clients.iter())
            .filter(|(&id, _)| id < LIVENESS_CLIENT)
            .all(|(_, c)| c.in_flight.is_none() && c.issued >= self.config.commands_per_client)
    }

    /// The key now used for entry `entry`: `e{entry}.{generation}`.
    fn current_key(&self, entry: u32) -> String {
        let generation = self.generation.get(&entry).copied().unwrap_or(0);
        format!("e{entry}.{generation}")
    }

    pub(super) fn client_next(&mut self, client: u32) {
        let c = &self.clients[&client];
        if c.issued >= self.config.commands_per_client || c.in_flight.is_some() {
            return;
        }
        let entry = self.rng.random_range(0..self.config.entries);
        let key = self.current_key(entry);
        let value = format!("c{client}-{}", c.seq + 1);
        // Inserts and deletes run in synchronous mode (g_all), reads and updates in their
        // key's worker group: a key's commands cross both modes.
        let request = match self.rng.random_range(0..100) {
            0..25 => args(&["SET", &key, &value, "NX"]),
            25..45 => args(&["SET", &key, &value, "XX"]),
            45..80 => args(&["GET", &key]),
            _ => args(&["DEL", &key]),
        };
        self.issue(client, entry, request);
    }

    /// Sends a client's command to its node (another one if that is down; if every node is
    /// down, the connection is refused: not applied).
    fn issue(&mut self, client: u32, entry: u32, request: Vec<Bytes>) {
        let now_us = self.events.now_us();
        let mut node = self.clients[&client].node;
        if !self.nodes[&node].up() {
            let up: Vec<NodeId> = (self.nodes.iter())
                .filter(|(_, n)| n.up())
                .map(|(&id, _)| id)
                .collect();
            if let Some(&other) = up.choose(&mut self.rng) {
                node = other;
            }
        }
        let c = self.clients.get_mut(&client).expect("client");
        if c.node != node {
            // A new connection, to another node.
            c.session = session(client);
            c.node = node;
        }
        // The history's command, as a session of the log engines parses it.
        let Step::One { key, command, .. } = session(client).handle(&request) else {
            panic!("{request:?} is one command on one key");
        };
        let command_bytes = match psmr_ops::handle(&mut c.session, &Acl::open(), &request) {
            PsmrStep::Submit(command) => psmr_ops::encode(&command),
            other => panic!("{request:?} should go to the service, the front end gave {other:?}"),
        };
        let index = self.history.operations.len();
        self.history.operations.push(Operation {
            client,
            key: Key::new(String::from_utf8_lossy(&key).into_owned()),
            command,
            call_us: now_us,
            return_us: u64::MAX,
            outcome: Outcome::Unknown,
        });
        let generation = self.generation.get(&entry).copied().unwrap_or(0);
        let c = self.clients.get_mut(&client).expect("client");
        c.issued += 1;
        c.seq += 1;
        let seq = c.seq;
        c.in_flight = Some(Pending {
            seq,
            node,
            index,
            entry,
            generation,
        });
        let timeout = self.config.client_timeout_us;
        self.events
            .schedule(timeout, Event::ClientTimeout { client, seq });
        let to = AnswerTo { client, seq };
        let n = &self.nodes[&node];
        let event = if n.up() {
            Event::Arrive {
                node,
                incarnation: n.incarnation,
                input: Box::new(Input::Submit {
                    command: command_bytes,
                    to,
                }),
            }
        } else {
            let answer = Err(logless_redis::session::Failure::NotApplied);
            Event::Answer { to, answer }
        };
        self.events.schedule(CLIENT_DELAY_US, event);
    }

    /// The answer to command `seq` of `client` (`None`: no answer, unknown) goes to the
    /// history.
    pub(super) fn client_done(&mut self, client: u32, seq: u64, answer: Option<PsmrAnswer>) {
        let now_us = self.events.now_us();
        let Some(c) = self.clients.get_mut(&client) else {
            return;
        };
        if c.in_flight.as_ref().is_none_or(|p| p.seq != seq) {
            return;
        }
        let pending = c.in_flight.take().expect("in flight");
        let outcome = outcome(answer);
        c.acknowledged = outcome.is_ok();
        let op = &mut self.history.operations[pending.index];
        match outcome {
            Ok(value) => match reply_of(&value) {
                Some(reply) => {
                    op.outcome = Outcome::Ok(reply);
                    op.return_us = now_us;
                }
                None => {
                    let failure = format!("client {client}: {op:?} answered {value:?}");
                    self.report.failures.push(failure);
                }
            },
            Err(outcome) => {
                if outcome == Outcome::NotApplied {
                    op.return_us = now_us;
                }
                let write = !op.command.is_read_only();
                op.outcome = outcome;
                if op.outcome == Outcome::Unknown && write {
                    let (entry, generation) = (pending.entry, pending.generation);
                    let count = self.unknown_writes.entry((entry, generation)).or_default();
                    *count += 1;
                    if *count >= UNKNOWN_WRITES_PER_KEY
                        && self.generation.get(&entry).copied().unwrap_or(0) == generation
                    {
                        *self.generation.entry(entry).or_default() += 1;
                    }
                }
            }
        }
        if client < LIVENESS_CLIENT {
            let think = self.config.think_us;
            self.events.schedule(think, Event::ClientNext { client });
        }
    }

    /// The clients waiting on `node` lose their connection: their outcome is unknown.
    pub(super) fn connections_lost(&mut self, node: NodeId) {
        let lost: Vec<(u32, u64)> = (self.clients.iter())
            .filter_map(|(&id, c)| match &c.in_flight {
                Some(p) if p.node == node => Some((id, p.seq)),
                _ => None,
            })
            .collect();
        for (client, seq) in lost {
            self.client_done(client, seq, None);
        }
    }

    /// Through every node in turn: a read of every entry, each acknowledged within the
    /// liveness budget (an update through each node first, so that every group has work).
    pub(super) fn liveness(&mut self) {
        for node in self.ids() {
            let client = LIVENESS_CLIENT + u32::from(node.0);
            self.clients.insert(client, Client::new(client, node));
            for entry in 0..self.config.entries {
                let key = self.current_key(entry);
                let value = format!("final-{}", node.0);
                for request in [args(&["SET", &key, &value, "XX"]), args(&["GET", &key])] {
                    let what = format!("{request:?}");
                    let deadline = self.events.now_us() + self.config.liveness_us;
                    if !self.acknowledged_by(client, entry, request, deadline) {
                        self.report.failures.push(format!(
                            "liveness: {what} through node {} was not acknowledged within {} \
                             ms of healing; {}",
                            node.0,
                            self.config.liveness_us / 1000,
                            self.describe_nodes()
                        ));
                        return;
                    }
                }
            }
        }
    }

    /// Issues `request` from `client` until it is acknowledged, or `deadline` (µs) passes:
    /// while the cluster settles an attempt may end unknown or refused.
    fn acknowledged_by(
        &mut self,
        client: u32,
        entry: u32,
        request: Vec<Bytes>,
        deadline: u64,
    ) -> bool {
        loop {
            self.issue(client, entry, request.clone());
            while self.clients[&client].in_flight.is_some() {
                if self.events.next_due_us().is_none_or(|at| at > deadline) {
                    return false;
                }
                self.step_next();
            }
            if self.clients[&client].acknowledged {
                return true;
            }
        }
    }
}
