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
use logless_node::psmr_service::ServiceKind;
use logless_node::psmr_turn::PsmrAnswer;
use logless_redis::acl::Acl;
use logless_redis::resp::Value;
use logless_redis::session::Step;
use rand::Rng;

use super::{AnswerTo, Event, Input, PsmrNodeCluster};
use crate::history::Outcome;
use crate::whole_node::clients::{self, args, session};
use crate::whole_node::CLIENT_DELAY_US;

/// What a client keeps of its command in flight.
pub(super) struct Record {
    /// The operation's index in the history.
    index: usize,
    entry: u32,
    generation: u32,
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
/// lost connection), read from the reply as a client reads it: TRYAGAIN and MISCONF (a full
/// disk) say not applied, UNCERTAIN that it may have been.
fn outcome(answer: Option<PsmrAnswer>) -> Result<Value, Outcome> {
    let Some(answer) = answer else {
        return Err(Outcome::Unknown);
    };
    match psmr_ops::reply_for(ServiceKind::Btree, answer) {
        Value::Error(text) if text.starts_with("TRYAGAIN ") => Err(Outcome::NotApplied),
        Value::Error(text) if text.starts_with("MISCONF ") => Err(Outcome::NotApplied),
        Value::Error(text) if text.starts_with("UNCERTAIN ") => Err(Outcome::Unknown),
        value => Ok(value),
    }
}

impl PsmrNodeCluster {
    pub(super) fn start_clients(&mut self) {
        let (count, nodes, think_us) =
            (self.config.clients, self.config.nodes, self.config.think_us);
        let next = |client| Event::ClientNext { client };
        (self.clients).start(
            count,
            nodes,
            think_us,
            &mut self.rng,
            &mut self.events,
            next,
        );
    }

    pub(super) fn workload_done(&self) -> bool {
        self.clients.workload_done(self.config.commands_per_client)
    }

    /// The key now used for entry `entry`: `e{entry}.{generation}`.
    fn current_key(&self, entry: u32) -> String {
        let generation = self.generations.current(entry);
        format!("e{entry}.{generation}")
    }

    pub(super) fn client_next(&mut self, client: u32) {
        let c = self.clients.get(client);
        if !c.wants_next(self.config.commands_per_client) {
            return;
        }
        let entry = self.rng.random_range(0..self.config.entries);
        let key = self.current_key(entry);
        let value = format!("c{client}-{}", c.next_seq());
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
        let up = self.up_nodes();
        let node = clients::node_for(&mut self.rng, self.clients.get(client).node(), &up);
        let c = self.clients.get_mut(client);
        c.connect(client, node);
        // The history's command, as a session of the log engines parses it.
        let Step::One { key, command, .. } = session(client).handle(&request) else {
            panic!("{request:?} is one command on one key");
        };
        let step = psmr_ops::handle_for(&mut c.session, &Acl::open(), ServiceKind::Btree, &request);
        let command_bytes = match step {
            PsmrStep::Submit(command) => psmr_ops::encode(&command),
            other => panic!("{request:?} should go to the service, the front end gave {other:?}"),
        };
        let index = clients::record_call(&mut self.history, client, &key, command, now_us);
        let generation = self.generations.current(entry);
        let record = Record {
            index,
            entry,
            generation,
        };
        let seq = self.clients.get_mut(client).begin(node, record);
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
        let Some(c) = self.clients.find_mut(client) else {
            return;
        };
        let Some(pending) = c.finish(seq) else {
            return;
        };
        let outcome = outcome(answer);
        c.acknowledged = outcome.is_ok();
        let record = pending.record;
        let op = &mut self.history.operations[record.index];
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
                if clients::record_failure(op, outcome, now_us) {
                    (self.generations).unknown_write(record.entry, record.generation);
                }
            }
        }
        if clients::continues(client) {
            let think = self.config.think_us;
            self.events.schedule(think, Event::ClientNext { client });
        }
    }

    /// The clients waiting on `node` lose their connection: their outcome is unknown.
    pub(super) fn connections_lost(&mut self, node: NodeId) {
        for (client, seq) in self.clients.waiting_on(node) {
            self.client_done(client, seq, None);
        }
    }

    /// Through every node in turn: a read of every entry, each acknowledged within the
    /// liveness budget (an update through each node first, so that every group has work).
    pub(super) fn liveness(&mut self) {
        for node in self.ids() {
            let client = self.clients.add_liveness(node);
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
            while self.clients.get(client).busy() {
                if self.events.next_due_us().is_none_or(|at| at > deadline) {
                    return false;
                }
                self.step_next();
            }
            if self.clients.get(client).acknowledged {
                return true;
            }
        }
    }
}
