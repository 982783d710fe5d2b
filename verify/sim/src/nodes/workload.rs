//! The clients of a whole-node run: the workload's commands by key kind, their histories, and
//! the liveness phase that writes and reads every key through every node after the faults.
//! Expiring registers get times to live and leases of tens to hundreds of ms, so that keys
//! expire and leases run out while the clocks jump; each operation's stamp window is recorded
//! for the checkers (see [`super`]). Hashes, lists and sorted sets, when the configuration has
//! them, get their commands and single-key transactions of two.
use bytes::Bytes;
use logless_commands::command::{
    Command, Condition, ExpireArgs, ExpireFlags, ExpireKind, Expiry, HashCmd, ListCmd, ListEnd,
    Reply, SetArgs, ZAddFlags, ZRange, ZRangeBy, ZSetCmd,
};
use logless_commands::float::Float;
use logless_node::context::shard_of;
use logless_node::forward::Route;
use logless_node::turn::CommandResult;
use logless_redis::session::Session;
use logless_redis::table::ReplyShape;
use logless_rmw::ids::{Key, NodeId};
use logless_rmw::proposer::ProposeError;
use rand::seq::IndexedRandom;
use rand::Rng;

use super::requests;
use super::ring_change::MOVER_CLIENT;
use super::{
    AnswerTo, Client, Event, Input, NodeCluster, CLIENT_DELAY_US, LIVENESS_CLIENT, WALL_START_MS,
};
use crate::history::{Operation, Outcome};

/// Writes with unknown outcome after which a register moves to a fresh key.
const UNKNOWN_WRITES_PER_KEY: u32 = 6;

/// The shortest and the longest time to live or lease the workload asks for (ms): short enough
/// that keys expire while the workload runs, long enough to be read back before they do.
const TTL_MS: (u64, u64) = (20, 300);

/// One command in this many on a hash, list or sorted set is a transaction of two.
const TRANSACTION_ONE_IN: u32 = 6;

fn set_command(value: Bytes, condition: Condition, expiry: Expiry) -> Command {
    Command::Set(SetArgs {
        value,
        condition,
        get: false,
        expiry,
    })
}

fn expire_command(kind: ExpireKind, time: i64) -> Command {
    Command::Expire(ExpireArgs {
        kind,
        time,
        flags: ExpireFlags::default(),
    })
}

impl NodeCluster {
    /// A command for key `k{key_index}`, by the key's kind. Every command is one the history
    /// checkers model.
    pub(super) fn command_for(&mut self, key_index: u32, client: u32, seq: u64) -> Command {
        let registers = self.config.keys + self.config.expiring_keys;
        if key_index >= registers {
            return self.collection_command_for(key_index - registers, client, seq);
        }
        if key_index >= self.config.keys {
            return self.expiring_command_for(key_index - self.config.keys, client, seq);
        }
        let roll = self.rng.random_range(0..100);
        let member = Bytes::from(format!("m{}", seq % 5));
        let set = |value: Bytes, condition| {
            Command::Set(SetArgs {
                value,
                condition,
                get: false,
                expiry: Expiry::Clear,
            })
        };
        match key_index % 4 {
            0 => match roll {
                0..55 => Command::IncrBy(1),
                55..90 => Command::Get,
                _ => Command::Del,
            },
            1 => {
                let value = Bytes::from(format!("c{client}-{seq}"));
                // The conditions compare with the value last sent for the key, so they hold
                // often enough to matter.
                let last = self.last_value.get(&key_index).cloned().unwrap_or_default();
                let command = match roll {
                    0..30 => set(value.clone(), Condition::Always),
                    30..38 => set(value.clone(), Condition::Nx),
                    38..46 => set(value.clone(), Condition::Xx),
                    46..56 => set(value.clone(), Condition::IfEq(last.clone())),
                    56..80 => Command::Get,
                    80..90 => Command::Del,
                    _ => Command::DelEx(Condition::IfEq(last)),
                };
                if matches!(command, Command::Set(_)) {
                    self.last_value.insert(key_index, value);
                }
                command
            }
            2 => match roll {
                0..35 => Command::SAdd(vec![member]),
                35..55 => Command::SRem(vec![member]),
                55..80 => Command::SMembers,
                80..90 => Command::SIsMember(member),
                _ => Command::SCard,
            },
            _ => {
                let owner = Bytes::from(format!("o{}", client % 3));
                match roll {
                    0..50 => Command::LockAcquire {
                        owner,
                        lease_ms: 3_600_000,
                    },
                    50..85 => Command::LockRelease { owner },
                    _ => Command::Exists,
                }
            }
        }
    }

    /// A command for expiring register `j` (key `k{keys + j}`): on a string, writes with short
    /// times to live, renewals, reads of the value and of the time left; on a lock, acquisitions
    /// with short leases, so that another owner takes the lock once a lease runs out.
    fn expiring_command_for(&mut self, j: u32, client: u32, seq: u64) -> Command {
        let roll = self.rng.random_range(0..100);
        let ttl_ms = self.rng.random_range(TTL_MS.0..=TTL_MS.1);
        if j % 2 == 1 {
            let owner = Bytes::from(format!("o{}", client % 3));
            return match roll {
                0..50 => Command::LockAcquire {
                    owner,
                    lease_ms: ttl_ms,
                },
                50..75 => Command::LockRelease { owner },
                75..90 => Command::Exists,
                _ => Command::PTtl,
            };
        }
        // Integers, so that INCR applies; unique per client and command.
        let value = Bytes::from((u64::from(client + 1) * 1000 + seq).to_string());
        match roll {
            0..20 => set_command(value, Condition::Always, Expiry::AfterMs(ttl_ms)),
            20..25 => set_command(value, Condition::Nx, Expiry::AfterMs(ttl_ms)),
            25..29 => set_command(value, Condition::Always, Expiry::Keep),
            29..32 => {
                // The client's clock is simulated time, on the replicas' epoch.
                let now_ms = WALL_START_MS + self.events.now_us() / 1000;
                set_command(value, Condition::Always, Expiry::AtMs(now_ms + ttl_ms))
            }
            32..42 => Command::IncrBy(1),
            42..52 => expire_command(ExpireKind::PExpire, ttl_ms as i64),
            52..54 => expire_command(ExpireKind::Expire, 1),
            54..56 => Command::Persist,
            56..68 => Command::PTtl,
            68..72 => Command::Ttl,
            72..86 => Command::Get,
            86..95 => Command::Exists,
            _ => Command::Del,
        }
    }

    /// A command for collection `j` (key `k{keys + expiring_keys + j}`): a hash, a list or a
    /// sorted set by `j % 3`; one time in [`TRANSACTION_ONE_IN`] a transaction of a write and
    /// another of the key's commands, so that a transaction seen half applied shows.
    fn collection_command_for(&mut self, j: u32, client: u32, seq: u64) -> Command {
        if self.rng.random_ratio(1, TRANSACTION_ONE_IN) {
            let write = self.collection_single(j, client, seq, true);
            let other = self.collection_single(j, client, seq + 500_000, false);
            return Command::Transaction(vec![write, other]);
        }
        self.collection_single(j, client, seq, false)
    }

    /// One command on collection `j`; with `write`, one that may change it. Values are unique
    /// per client and command; fields and members few, so that commands meet; scores whole,
    /// as the Porcupine checker models them.
    fn collection_single(&mut self, j: u32, client: u32, seq: u64, write: bool) -> Command {
        let roll = self.rng.random_range(0..if write { 50 } else { 100 });
        let value = Bytes::from(format!("c{client}-{seq}"));
        let field = Bytes::from(format!("f{}", self.rng.random_range(0..3)));
        let member = Bytes::from(format!("m{}", self.rng.random_range(0..4)));
        let score = |n: i32| Float::new(f64::from(n)).expect("a whole number");
        match j % 3 {
            0 => Command::Hash(match roll {
                0..20 => HashCmd::HSet(vec![(field, value)]),
                20..40 => HashCmd::HIncrBy {
                    field: Bytes::from_static(b"n"),
                    delta: 1,
                },
                40..50 => HashCmd::HDel(vec![field]),
                50..75 => HashCmd::HGet(field),
                _ => HashCmd::HGetAll,
            }),
            1 => {
                let end = if self.rng.random_bool(0.5) {
                    ListEnd::Left
                } else {
                    ListEnd::Right
                };
                Command::List(match roll {
                    0..28 => ListCmd::Push {
                        end,
                        values: vec![value],
                        only_if_exists: false,
                    },
                    28..50 => ListCmd::Pop { end, count: None },
                    50..90 => ListCmd::Range { start: 0, stop: -1 },
                    _ => ListCmd::Len,
                })
            }
            _ => Command::ZSet(match roll {
                0..20 => ZSetCmd::Add {
                    members: vec![(score(self.rng.random_range(0..10)), member)],
                    flags: ZAddFlags::default(),
                },
                20..40 => ZSetCmd::IncrBy {
                    delta: score(self.rng.random_range(-2..=2)),
                    member,
                },
                40..50 => ZSetCmd::Rem(vec![member]),
                50..70 => ZSetCmd::Score(member),
                _ => ZSetCmd::Range(ZRange {
                    by: ZRangeBy::Index { start: 0, stop: -1 },
                    rev: false,
                    limit: None,
                    with_scores: true,
                }),
            }),
        }
    }

    pub(super) fn client_next(&mut self, client: u32) {
        let c = &self.clients[&client];
        if c.issued >= self.config.commands_per_client || c.in_flight.is_some() {
            return;
        }
        let registers = self.config.keys + self.config.expiring_keys + self.config.collection_keys;
        let key_index = self.rng.random_range(0..registers);
        let seq = c.seq + 1;
        let command = self.command_for(key_index, client, seq);
        let key = self.current_key(key_index);
        self.issue(client, key, command);
    }

    /// The key now used for register `key_index`: `k{index}.{generation}`. A register moves
    /// to a fresh key once [`UNKNOWN_WRITES_PER_KEY`] writes on it ended unknown, since every
    /// unknown write multiplies the orders a checker must try (the chaos runner does the same).
    pub(super) fn current_key(&self, key_index: u32) -> Key {
        let generation = self.generation.get(&key_index).copied().unwrap_or(0);
        Key::new(format!("k{key_index}.{generation}"))
    }

    /// Sends a client's command to its node (another one if that is down).
    pub(super) fn issue(&mut self, client: u32, key: Key, command: Command) {
        let mut node = self.clients[&client].node;
        if !self.nodes[&node].up || !self.nodes[&node].ready {
            let up: Vec<NodeId> = self
                .nodes
                .iter()
                .filter(|(_, n)| n.up && n.ready)
                .map(|(id, _)| *id)
                .collect();
            if let Some(&other) = up.choose(&mut self.rng) {
                node = other;
            }
        }
        let now_us = self.events.now_us();
        let index = self.history.operations.len();
        self.history.operations.push(Operation {
            client,
            key: key.clone(),
            command: command.clone(),
            call_us: now_us,
            return_us: u64::MAX,
            outcome: Outcome::Unknown,
        });
        let c = self.clients.get_mut(&client).expect("client");
        if c.node != node {
            // A new connection, to another node.
            c.session = Session::new(u64::from(client));
        }
        c.node = node;
        let (command, shape, name) = requests::submit(&mut c.session, &key, &command);
        c.shape = shape;
        c.issued += 1;
        c.seq += 1;
        let seq = c.seq;
        c.in_flight = Some((seq, index, node));
        let timeout = self.config.client_timeout_us;
        self.events
            .schedule(timeout, Event::ClientTimeout { client, seq });
        assert_eq!(
            self.stamp_readings_ms.len(),
            index,
            "one entry per operation"
        );
        self.stamp_readings_ms.push(None);
        let route = (self.ring.as_ref()).map_or(Route::Local, |ring| {
            ring.route(node, &name, &key, &command, shape)
        });
        match route {
            Route::Local => self.arrive(node, index, key, command, AnswerTo { client, seq }),
            Route::Forward(replicas) => {
                self.forwarding(client, seq, (node, index), key, command, &replicas);
                self.events
                    .schedule(CLIENT_DELAY_US, Event::Forward { client, seq });
            }
            Route::Refuse(_) => {
                // CROSSSLOT: not run anywhere.
                self.report.refused_elsewhere += 1;
                let to = AnswerTo { client, seq };
                let result = Err(ProposeError::NotApplied);
                self.events
                    .schedule(CLIENT_DELAY_US, Event::Answer { to, result });
            }
        }
    }

    /// Hands a client's command (operation `index`) to the shard of its key on `node`, which
    /// stamps it, after the client's delay.
    pub(super) fn arrive(
        &mut self,
        node: NodeId,
        index: usize,
        key: Key,
        command: Command,
        to: AnswerTo,
    ) {
        let shard = shard_of(key.as_bytes(), usize::from(self.config.shards));
        let n = self.nodes.get_mut(&node).expect("node");
        n.shards[shard].waiting.push(index);
        self.submit_to(node, key, command, to);
    }

    /// Hands a command to the shard of its key on `node` (its current incarnation) after the
    /// client's delay.
    pub(super) fn submit_to(&mut self, node: NodeId, key: Key, command: Command, to: AnswerTo) {
        let shard = shard_of(key.as_bytes(), usize::from(self.config.shards)) as u16;
        self.schedule_input(node, shard, Input::Command { key, command, to });
    }

    /// A write-through of register `key` at `node`, answered to `to` (the ring's sync).
    pub(super) fn write_through_at(&mut self, node: NodeId, key: Key, to: AnswerTo) {
        let shard = shard_of(key.as_bytes(), usize::from(self.config.shards)) as u16;
        self.schedule_input(node, shard, Input::WriteThrough { key, to });
    }

    /// `input` arrives at `node`'s `shard` after a client's delay.
    fn schedule_input(&mut self, node: NodeId, shard: u16, input: Input) {
        let incarnation = self.nodes[&node].incarnation;
        self.events.schedule(
            CLIENT_DELAY_US,
            Event::Arrive {
                node,
                incarnation,
                shard,
                input,
            },
        );
    }

    /// `result`: `Some(Ok)` answered, `Some(Err)` refused or unknown per the error, `None`
    /// no answer (unknown).
    pub(super) fn client_done(&mut self, client: u32, seq: u64, result: Option<CommandResult>) {
        if client == MOVER_CLIENT {
            self.sync_answered(seq, matches!(result, Some(Ok(_))));
            return;
        }
        let now_us = self.events.now_us();
        let Some(c) = self.clients.get_mut(&client) else {
            return;
        };
        let Some((in_flight, index, _)) = c.in_flight else {
            return;
        };
        if in_flight != seq {
            return;
        }
        c.in_flight = None;
        let outcome = requests::outcome(c.shape, result);
        self.stop_stamping(index);
        let op = &mut self.history.operations[index];
        match outcome {
            Outcome::Ok(reply) => {
                op.return_us = now_us;
                op.outcome = Outcome::Ok(reply);
            }
            Outcome::NotApplied => {
                op.return_us = now_us;
                op.outcome = Outcome::NotApplied;
            }
            Outcome::Unknown => {
                if !op.command.is_read_only() {
                    let key = op.key.clone();
                    let count = self.unknown_writes.entry(key.clone()).or_default();
                    *count += 1;
                    if *count >= UNKNOWN_WRITES_PER_KEY {
                        if let Some(index) = key_index_of(&key) {
                            if self.current_key(index) == key {
                                *self.generation.entry(index).or_default() += 1;
                            }
                        }
                    }
                }
            }
        }
        if client < LIVENESS_CLIENT {
            let think = self.config.think_us;
            self.events.schedule(think, Event::ClientNext { client });
        }
    }

    /// The client of the operation at `index` stops waiting: an answered operation was stamped
    /// by now, so later readings of its shard's clock do not bound its stamp (one of unknown
    /// outcome keeps no upper bound at all). On a ring a forwarded command is stamped by a
    /// replica, not by the node the client sent it to: every node's shard stops.
    fn stop_stamping(&mut self, index: usize) {
        let op = &self.history.operations[index];
        let shard = shard_of(op.key.as_bytes(), usize::from(self.config.shards));
        for n in self.nodes.values_mut() {
            n.shards[shard].waiting.retain(|&i| i != index);
        }
    }

    /// Every key written, then read, through every node in turn, each within the liveness
    /// budget, with no faults.
    pub(super) fn liveness(&mut self) {
        let registers = self.config.keys + self.config.expiring_keys;
        for key_index in 0..registers + self.config.collection_keys {
            for node in (1..=self.config.nodes).map(NodeId) {
                let client = LIVENESS_CLIENT + key_index * 16 + u32::from(node.0);
                // The read's numbers follow the write's attempts': an answer to an attempt
                // that timed out, arriving late, must not be taken for the read's.
                let mut seq = 1_000_000 + u64::from(key_index);
                let (write, read) = if key_index >= registers {
                    Self::collection_liveness(key_index - registers, node)
                } else if key_index >= self.config.keys {
                    Self::expiring_liveness(key_index - self.config.keys, node)
                } else {
                    Self::plain_liveness(key_index, node)
                };
                for command in [write, read] {
                    self.clients.insert(
                        client,
                        Client {
                            node,
                            session: Session::new(u64::from(client)),
                            issued: 0,
                            seq,
                            in_flight: None,
                            shape: ReplyShape::Plain,
                        },
                    );
                    let key = self.current_key(key_index);
                    let deadline = self.events.now_us() + self.config.liveness_us;
                    let answered = self.acknowledged_by(client, &key, &command, deadline);
                    seq = self.clients[&client].seq;
                    if !answered {
                        let offsets: Vec<i64> =
                            self.nodes.values().map(|n| n.clock_offset_ms).collect();
                        self.report.failures.push(format!(
                            "liveness: {} on k{key_index} through node {} was not acknowledged \
                             within {} ms of healing (clock offsets {offsets:?} ms)",
                            command.name(),
                            node.0,
                            self.config.liveness_us / 1000
                        ));
                        return;
                    }
                }
            }
        }
    }

    /// The liveness phase's write and read of plain register `key_index` through `node`.
    fn plain_liveness(key_index: u32, node: NodeId) -> (Command, Command) {
        let write = match key_index % 4 {
            0 => Command::IncrBy(1),
            1 => Command::Set(SetArgs {
                value: Bytes::from(format!("final-{}", node.0)),
                condition: Condition::Always,
                get: false,
                expiry: Expiry::Clear,
            }),
            2 => Command::SAdd(vec![Bytes::from(format!("final-{}", node.0))]),
            _ => Command::LockRelease {
                owner: Bytes::from_static(b"nobody"),
            },
        };
        let read = match key_index % 4 {
            2 => Command::SMembers,
            3 => Command::Exists,
            _ => Command::Get,
        };
        (write, read)
    }

    /// The liveness phase's write and read of expiring register `j` through `node`: a value
    /// that lives a second, then the time it has left; or a short lease (nil while another
    /// owner's runs), then whether the lock exists.
    fn expiring_liveness(j: u32, node: NodeId) -> (Command, Command) {
        if j % 2 == 1 {
            let acquire = Command::LockAcquire {
                owner: Bytes::from_static(b"nobody"),
                lease_ms: TTL_MS.0,
            };
            return (acquire, Command::Exists);
        }
        let value = Bytes::from(format!("{}", node.0));
        let set = set_command(value, Condition::Always, Expiry::AfterMs(1_000));
        (set, Command::PTtl)
    }

    /// The liveness phase's write and read of collection `j` through `node`: a field, an
    /// element or a member added, then the whole collection read.
    fn collection_liveness(j: u32, node: NodeId) -> (Command, Command) {
        let value = Bytes::from(format!("final-{}", node.0));
        match j % 3 {
            0 => (
                Command::Hash(HashCmd::HSet(vec![(value.clone(), value)])),
                Command::Hash(HashCmd::HGetAll),
            ),
            1 => (
                Command::List(ListCmd::Push {
                    end: ListEnd::Right,
                    values: vec![value],
                    only_if_exists: false,
                }),
                Command::List(ListCmd::Range { start: 0, stop: -1 }),
            ),
            _ => (
                Command::ZSet(ZSetCmd::IncrBy {
                    delta: Float::new(1.0).expect("a number"),
                    member: value,
                }),
                Command::ZSet(ZSetCmd::Range(ZRange {
                    by: ZRangeBy::Index { start: 0, stop: -1 },
                    rev: false,
                    limit: None,
                    with_scores: true,
                })),
            ),
        }
    }

    /// Issues `command` from `client` until it is acknowledged, or `deadline` (µs) passes:
    /// while the cluster settles an attempt may end unknown or refused.
    fn acknowledged_by(
        &mut self,
        client: u32,
        key: &Key,
        command: &Command,
        deadline: u64,
    ) -> bool {
        loop {
            self.issue(client, key.clone(), command.clone());
            let (_, index, _) = self.clients[&client].in_flight.expect("issued");
            while self.clients[&client].in_flight.is_some() {
                if self.events.next_due_us().is_none_or(|at| at > deadline) {
                    return false;
                }
                self.step_next();
            }
            if matches!(self.history.operations[index].outcome, Outcome::Ok(_)) {
                return true;
            }
        }
    }
}

impl NodeCluster {
    /// Counts, for the report, what the run did with expiring registers: their operations,
    /// the reads that found a key absent or expired, and the lock acquisitions that can only
    /// be explained by a lease running out (a new token, while no release by the previous
    /// token's owner overlapped the time between the two acquisitions).
    pub(super) fn count_expiry(&mut self) {
        let expiring = self.config.keys..self.config.keys + self.config.expiring_keys;
        let ops: Vec<&Operation> = (self.history.operations.iter())
            .filter(|o| key_index_of(&o.key).is_some_and(|i| expiring.contains(&i)))
            .collect();
        let absent = |o: &&&Operation| {
            matches!(
                (&o.command, &o.outcome),
                (Command::Get, Outcome::Ok(Reply::Nil))
                    | (Command::Exists, Outcome::Ok(Reply::Int(0)))
                    | (Command::PTtl | Command::Ttl, Outcome::Ok(Reply::Int(-2)))
            )
        };
        let acquired = |o: &Operation| match (&o.command, &o.outcome) {
            (Command::LockAcquire { owner, .. }, Outcome::Ok(Reply::Int(token))) => {
                Some((owner.clone(), *token))
            }
            _ => None,
        };
        let mut taken_over = 0;
        for a in &ops {
            let Some((owner, token)) = acquired(a) else {
                continue;
            };
            let before = ops.iter().find(|b| {
                b.key == a.key && acquired(b).is_some_and(|(o, t)| t == token - 1 && o != owner)
            });
            let Some((b, (holder, _))) = before.and_then(|b| Some((b, acquired(b)?))) else {
                continue;
            };
            let released = ops.iter().any(|r| {
                r.key == a.key
                    && matches!(&r.command, Command::LockRelease { owner } if *owner == holder)
                    && r.call_us <= a.return_us
                    && r.return_us >= b.call_us
            });
            taken_over += u64::from(!released);
        }
        self.report.expiring_ops = ops.len() as u64;
        self.report.expiring_absent_reads = ops.iter().filter(absent).count() as u64;
        self.report.leases_taken_over = taken_over;
    }
}

/// The register index in a key's name (`k{index}.{generation}`).
fn key_index_of(key: &Key) -> Option<u32> {
    let name = std::str::from_utf8(key.as_bytes()).ok()?;
    name.strip_prefix('k')?.split('.').next()?.parse().ok()
}
