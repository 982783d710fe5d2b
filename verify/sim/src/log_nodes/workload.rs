//! The clients of a whole-node run of the log engine and the two histories they make.
//!
//! Every command is sent as the Redis requests a client would send (MULTI, the queued
//! commands, EXEC included) to the node's session, which speaks for the log engine
//! ([`Session::with_total_order`]); the session's step becomes the node's log operation
//! ([`log_ops`]), and the answer comes back as the node shows it. Half the commands work on
//! [`KEYS`] counters — INCRBY, GET, transfers between two counters as one MULTI/EXEC, MSET and
//! MGET of every counter — and go to the atomicity checker, which sees the counters as one
//! state. The others work on single-key registers (strings, some written with short times to
//! live; sets; locks; single-key transactions too) and go to the per-key linearizability checker.
use bytes::Bytes;
use logless_commands::command::Reply;
use logless_multipaxos::ids::NodeId;
use logless_multipaxos::kv::Response;
use logless_node::log_machine::EXECUTED_BEFORE_RESTART;
use logless_node::log_ops::{self, Shown};
use logless_node::log_turn::{LogAnswer, RECOVERING_ERROR, STATE_LOST_ERROR};
use logless_redis::resp::Value;
use logless_redis::session::{Failure, Step};
use logless_rmw::ids::Key;
use rand::Rng;

use super::{AnswerTo, Event, Input, LogNodeCluster};
use crate::atomicity::{self, CounterOp, KEYS};
use crate::history::Outcome;
use crate::log_cluster;
use crate::whole_node::clients::{self, args};
use crate::whole_node::CLIENT_DELAY_US;

/// The shortest and the longest time to live of the strings' SET PX (ms): keys expire while
/// the workload runs, under the clock jumps.
const TTL_MS: (u64, u64) = (20, 300);

/// What a client keeps of its command in flight.
pub(super) struct Record {
    shown: Shown,
    history: HistoryOf,
    call_us: u64,
}

/// Which history a command goes to.
#[derive(Clone, Copy, Debug)]
enum HistoryOf {
    Counter(CounterOp),
    /// A single-key register's operation, at `index` in the history.
    Register {
        index: usize,
        register: u32,
        generation: u32,
    },
}

/// What a command is: its Redis requests and what it is, for the histories.
struct Request {
    requests: Vec<Vec<Bytes>>,
    counter: Option<CounterOp>,
    register: u32,
}

fn counter_key(k: usize) -> String {
    format!("counter:{k}")
}

/// The Redis requests of a counter operation.
fn counter_requests(op: &CounterOp) -> Vec<Vec<Bytes>> {
    match *op {
        CounterOp::Incr { key, by } => {
            vec![args(&["INCRBY", &counter_key(key), &by.to_string()])]
        }
        CounterOp::Get { key } => vec![args(&["GET", &counter_key(key)])],
        CounterOp::Transfer { from, to, amount } => vec![
            args(&["MULTI"]),
            args(&["DECRBY", &counter_key(from), &amount.to_string()]),
            args(&["INCRBY", &counter_key(to), &amount.to_string()]),
            args(&["EXEC"]),
        ],
        CounterOp::MSet { values } => {
            let mut words = vec!["MSET".to_string()];
            for (k, v) in values.iter().enumerate() {
                words.extend([counter_key(k), v.to_string()]);
            }
            vec![words.into_iter().map(Bytes::from).collect()]
        }
        CounterOp::MGet => {
            let keys = (0..KEYS).map(counter_key);
            vec![std::iter::once("MGET".to_string())
                .chain(keys)
                .map(Bytes::from)
                .collect()]
        }
    }
}

/// The workload's reply as the per-key checker's; `None` for a kind the workload never
/// gets (an error, a status, a map).
fn reply_of(response: &Response) -> Option<Reply> {
    Some(match response {
        Response::Ok => Reply::Ok,
        Response::Nil => Reply::Nil,
        Response::NilArray => Reply::NilArray,
        Response::Int(n) => Reply::Int(*n),
        Response::Bulk(b) => Reply::Bulk(b.clone()),
        Response::Array(items) => Reply::Array(items.clone()),
        Response::Double(d) => Reply::Double(*d),
        Response::Items(items) => Reply::Items(items.iter().map(reply_of).collect::<Option<_>>()?),
        Response::Status(_) | Response::Error(_) | Response::Map(_) | Response::Pairs(_) => {
            return None
        }
    })
}

/// An operation the node refused without the log, with an error that says it was not applied.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Refusal {
    /// It writes several keys, which mPaxosSM does not take.
    InPlace,
    /// Its node recovers its state from its peers (EpochSS): LOADING.
    Recovering,
    /// More nodes restarted under EpochSS than the cluster can lose: CLUSTERDOWN.
    StateLost,
}

/// The refusal `answer` is, if it is one.
fn refusal(answer: &Option<LogAnswer>) -> Option<Refusal> {
    let Some(Ok(Response::Error(text))) = answer else {
        return None;
    };
    if text == RECOVERING_ERROR {
        Some(Refusal::Recovering)
    } else if text == STATE_LOST_ERROR {
        Some(Refusal::StateLost)
    } else if text.starts_with("ERR ") && text.contains("is not available under --recovery pmem-sm")
    {
        Some(Refusal::InPlace)
    } else {
        None
    }
}

/// What the client learns from the node's answer (`None`: no answer, as after a timeout or a
/// lost connection), read from the reply as a client reads it: TRYAGAIN and MISCONF (a full
/// disk) say not applied, UNCERTAIN that it may have been; the refusals of a node that does not
/// serve (LOADING, CLUSTERDOWN) or does not take the operation (mPaxosSM) say not applied, and
/// mPaxosSM's "executed before the replica restarted" that it was applied, its result unknown.
fn outcome(answer: Option<LogAnswer>, shown: Shown) -> Result<Option<Response>, Outcome> {
    if refusal(&answer).is_some() {
        return Err(Outcome::NotApplied);
    }
    // A retry of an operation executed before its node restarted under mPaxosSM, whose reply
    // was not kept: applied, its result unknown.
    if matches!(&answer, Some(Ok(Response::Error(text))) if text == EXECUTED_BEFORE_RESTART) {
        return Err(Outcome::Unknown);
    }
    let Some(answer) = answer else {
        return Err(Outcome::Unknown);
    };
    let value = log_ops::reply(answer.clone(), shown);
    match (value, answer) {
        (_, Ok(response)) => Ok(Some(response)),
        (Value::Error(text), Err(_)) if text.starts_with("TRYAGAIN ") => Err(Outcome::NotApplied),
        (Value::Error(text), Err(_)) if text.starts_with("MISCONF ") => Err(Outcome::NotApplied),
        (Value::Error(text), Err(_)) if text.starts_with("UNCERTAIN ") => Err(Outcome::Unknown),
        (value, Err(failure)) => {
            panic!("the node showed {failure:?} as {value:?}, which says neither")
        }
    }
}

impl LogNodeCluster {
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

    /// A counter operation: increments, reads, transfers, MSET and MGET of every counter
    /// (under mPaxosSM, which refuses transfers and MSET, one draw in ten of those).
    fn counter_op(&mut self) -> CounterOp {
        let key = self.rng.random_range(0..KEYS);
        let draw = self.rng.random_range(0..20);
        let draw = match draw {
            8..16 if self.config.in_place && self.rng.random_bool(0.9) => 0,
            _ => draw,
        };
        match draw {
            0..6 => CounterOp::Incr {
                key,
                by: self.rng.random_range(1..5),
            },
            6..8 => CounterOp::Get { key },
            8..14 => CounterOp::Transfer {
                from: key,
                to: (key + self.rng.random_range(1..KEYS)) % KEYS,
                amount: self.rng.random_range(1..10),
            },
            14..16 => CounterOp::MSet {
                values: [(); KEYS].map(|_| self.rng.random_range(0..100)),
            },
            _ => CounterOp::MGet,
        }
    }

    /// A command on register `register`, by its kind (string, set, lock); some are single-key
    /// transactions of two commands.
    fn register_requests(&mut self, register: u32, client: u32, seq: u64) -> Vec<Vec<Bytes>> {
        let key = String::from_utf8_lossy(self.current_key(register).as_bytes()).into_owned();
        let value = format!("c{client}-{seq}");
        let member = format!("m{}", self.rng.random_range(0..4));
        let owner = format!("o{}", client % 3);
        let roll = self.rng.random_range(0..100);
        let ttl_ms = self.rng.random_range(TTL_MS.0..=TTL_MS.1);
        let transaction = |first: Vec<Bytes>, second: Vec<Bytes>| {
            vec![args(&["MULTI"]), first, second, args(&["EXEC"])]
        };
        let one = |words: &[&str]| vec![args(words)];
        match register % 3 {
            0 => match roll {
                0..20 => one(&["SET", &key, &value]),
                20..30 => one(&["SET", &key, &value, "PX", &ttl_ms.to_string()]),
                30..38 => one(&["SET", &key, &value, "NX"]),
                38..46 => one(&["SET", &key, &value, "XX"]),
                46..74 => one(&["GET", &key]),
                74..86 => one(&["DEL", &key]),
                _ => transaction(args(&["SET", &key, &value]), args(&["GET", &key])),
            },
            1 => match roll {
                0..30 => one(&["SADD", &key, &member]),
                30..50 => one(&["SREM", &key, &member]),
                50..72 => one(&["SMEMBERS", &key]),
                72..80 => one(&["SISMEMBER", &key, &member]),
                80..88 => one(&["SCARD", &key]),
                _ => transaction(args(&["SADD", &key, &member]), args(&["SCARD", &key])),
            },
            _ => match roll {
                0..50 => one(&["LOCK.ACQUIRE", &key, &owner, "3600000"]),
                50..85 => one(&["LOCK.RELEASE", &key, &owner]),
                _ => one(&["EXISTS", &key]),
            },
        }
    }

    pub(super) fn client_next(&mut self, client: u32) {
        let c = self.clients.get(client);
        if !c.wants_next(self.config.commands_per_client) {
            return;
        }
        let seq = c.next_seq();
        let request = if self.rng.random_bool(0.5) {
            let op = self.counter_op();
            Request {
                requests: counter_requests(&op),
                counter: Some(op),
                register: 0,
            }
        } else {
            let register = self.rng.random_range(0..self.config.registers);
            Request {
                requests: self.register_requests(register, client, seq),
                counter: None,
                register,
            }
        };
        self.issue(client, request);
    }

    /// The key now used for register `register`: `k{register}.{generation}`.
    fn current_key(&self, register: u32) -> Key {
        let generation = self.generations.current(register);
        Key::new(format!("k{register}.{generation}"))
    }

    /// Sends a client's command to its node (another one if that is down; if every node is
    /// down, the connection is refused: not applied).
    fn issue(&mut self, client: u32, request: Request) {
        let now_us = self.events.now_us();
        let up = self.up_nodes();
        let node = clients::node_for(&mut self.rng, self.clients.get(client).node(), &up);
        let c = self.clients.get_mut(client);
        c.connect(client, node);
        let (last, queued) = request.requests.split_last().expect("a request");
        for args in queued {
            match c.session.handle(args) {
                Step::Reply(Value::Simple(_)) => {}
                other => panic!("{args:?} should be answered at once, the session gave {other:?}"),
            }
        }
        let step = c.session.handle(last);
        let (operation, shown, single) = match step {
            Step::One {
                key,
                command,
                shape,
            } => (
                log_ops::single(key.clone(), command.clone()),
                Shown::Shape(shape),
                Some((key, command)),
            ),
            Step::Many { parts, combine } => {
                (log_ops::many(parts, combine), Shown::Combine(combine), None)
            }
            Step::Cross { op, shape } => (log_ops::cross(op), Shown::Shape(shape), None),
            other => panic!("{last:?} should go to the log, the session gave {other:?}"),
        };
        let history = match request.counter {
            Some(op) => HistoryOf::Counter(op),
            None => {
                let (key, command) = single.expect("a register command is one step");
                let index = clients::record_call(&mut self.history, client, &key, command, now_us);
                let register = request.register;
                HistoryOf::Register {
                    index,
                    register,
                    generation: self.generations.current(register),
                }
            }
        };
        let record = Record {
            shown,
            history,
            call_us: now_us,
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
                input: Box::new(Input::Submit { operation, to }),
            }
        } else {
            Event::Answer {
                to,
                answer: Box::new(Err(Failure::NotApplied)),
            }
        };
        self.events.schedule(CLIENT_DELAY_US, event);
    }

    /// The answer to command `seq` of `client` (`None`: no answer, unknown) goes to its
    /// history.
    pub(super) fn client_done(&mut self, client: u32, seq: u64, answer: Option<LogAnswer>) {
        let now_us = self.events.now_us();
        let Some(c) = self.clients.find_mut(client) else {
            return;
        };
        let Some(pending) = c.finish(seq) else {
            return;
        };
        let pending = pending.record;
        match refusal(&answer) {
            Some(Refusal::InPlace) => self.report.refused_in_place += 1,
            Some(Refusal::Recovering) => self.report.refused_recovering += 1,
            Some(Refusal::StateLost) => self.report.refused_state_lost += 1,
            None => {}
        }
        if refusal(&answer) == Some(Refusal::StateLost) && !self.state_lost {
            let failure =
                format!("client {client}: the state was lost, and not every node crashed");
            self.report.failures.push(failure);
        }
        let outcome = outcome(answer, pending.shown);
        c.acknowledged = outcome.is_ok();
        match (pending.history, outcome) {
            (HistoryOf::Counter(op), Ok(response)) => {
                let answers: Vec<Response> = response.into_iter().collect();
                match log_cluster::result(&op, &answers) {
                    Ok(result) => self.counters.push(atomicity::Event {
                        client: u64::from(client),
                        op,
                        call_ms: pending.call_us,
                        returned: Some((now_us, result)),
                    }),
                    Err(e) => self.report.failures.push(format!("client {client}: {e}")),
                }
            }
            (HistoryOf::Counter(op), Err(Outcome::Unknown)) => {
                self.counters.push(atomicity::Event {
                    client: u64::from(client),
                    op,
                    call_ms: pending.call_us,
                    returned: None,
                })
            }
            (HistoryOf::Counter(_), Err(_)) => {}
            (HistoryOf::Register { index, .. }, Ok(response)) => {
                let op = &mut self.history.operations[index];
                match response.as_ref().and_then(reply_of) {
                    Some(reply) => {
                        op.outcome = Outcome::Ok(reply);
                        op.return_us = now_us;
                    }
                    None => {
                        let failure = format!("client {client}: {:?} answered {response:?}", op);
                        self.report.failures.push(failure);
                    }
                }
            }
            (
                HistoryOf::Register {
                    index,
                    register,
                    generation,
                },
                Err(outcome),
            ) => {
                let op = &mut self.history.operations[index];
                if clients::record_failure(op, outcome, now_us) {
                    self.generations.unknown_write(register, generation);
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

    /// Through every node in turn: an increment and an MGET of the counters, then a write and
    /// a read of every register, each acknowledged within the liveness budget.
    pub(super) fn liveness(&mut self) {
        if self.state_lost {
            return self.liveness_refused();
        }
        for node in self.ids() {
            let client = self.clients.add_liveness(node);
            let mut commands = vec![
                CounterOp::Incr {
                    key: usize::from(node.0) % KEYS,
                    by: 1,
                },
                CounterOp::MGet,
            ]
            .into_iter()
            .map(|op| Request {
                requests: counter_requests(&op),
                counter: Some(op),
                register: 0,
            })
            .collect::<Vec<_>>();
            for register in 0..self.config.registers {
                let key =
                    String::from_utf8_lossy(self.current_key(register).as_bytes()).into_owned();
                let value = format!("final-{}", node.0);
                let (write, read) = match register % 3 {
                    0 => (args(&["SET", &key, &value]), args(&["GET", &key])),
                    1 => (args(&["SADD", &key, &value]), args(&["SMEMBERS", &key])),
                    _ => (
                        args(&["LOCK.RELEASE", &key, "nobody"]),
                        args(&["EXISTS", &key]),
                    ),
                };
                for requests in [write, read] {
                    commands.push(Request {
                        requests: vec![requests],
                        counter: None,
                        register,
                    });
                }
            }
            for request in commands {
                let what = format!("{:?}", request.requests.last());
                let deadline = self.events.now_us() + self.config.liveness_us;
                if !self.acknowledged_by(client, request, deadline) {
                    self.report.failures.push(format!(
                        "liveness: {what} through node {} was not acknowledged within {} ms of \
                         healing",
                        node.0,
                        self.config.liveness_us / 1000
                    ));
                    return;
                }
            }
        }
    }

    /// After every node crashed under EpochSS: through every node, an increment must be refused
    /// with CLUSTERDOWN within the liveness budget (LOADING while the node still recovers),
    /// never acknowledged.
    fn liveness_refused(&mut self) {
        for node in self.ids() {
            let client = self.clients.add_liveness(node);
            let deadline = self.events.now_us() + self.config.liveness_us;
            let refused = loop {
                let op = CounterOp::Incr {
                    key: usize::from(node.0) % KEYS,
                    by: 1,
                };
                let before = self.report.refused_state_lost;
                let request = Request {
                    requests: counter_requests(&op),
                    counter: Some(op),
                    register: 0,
                };
                self.issue(client, request);
                while self.clients.get(client).busy() && self.events.next_due_us().is_some() {
                    self.step_next();
                }
                if self.clients.get(client).acknowledged {
                    let failure = format!(
                        "liveness: node {} acknowledged an increment after every node crashed \
                         under EpochSS (a forgotten state served)",
                        node.0
                    );
                    self.report.failures.push(failure);
                    return;
                }
                if self.report.refused_state_lost > before {
                    break true;
                }
                if self.events.now_us() > deadline {
                    break false;
                }
            };
            if !refused {
                self.report.failures.push(format!(
                    "liveness: node {} did not refuse service (CLUSTERDOWN) within {} ms of \
                     healing after every node crashed under EpochSS",
                    node.0,
                    self.config.liveness_us / 1000
                ));
                return;
            }
        }
    }

    /// Issues `request` from `client` until it is acknowledged, or `deadline` (µs) passes:
    /// while the cluster settles an attempt may end unknown or refused.
    fn acknowledged_by(&mut self, client: u32, request: Request, deadline: u64) -> bool {
        loop {
            let again = Request {
                requests: request.requests.clone(),
                ..request
            };
            self.issue(client, again);
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
