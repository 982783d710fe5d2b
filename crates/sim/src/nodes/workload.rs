//! The clients of a whole-node run: the workload's commands by key kind, their histories, and
//! the liveness phase that writes and reads every key through every node after the faults.
use bytes::Bytes;
use logless_commands::command::{Command, Condition, Expiry, SetArgs};
use logless_core::ids::{Key, NodeId};
use logless_core::proposer::ProposeError;
use logless_node::front::shard_of;
use logless_node::turn::CommandResult;
use rand::seq::IndexedRandom;
use rand::Rng;

use super::{AnswerTo, Client, Event, Input, NodeCluster, CLIENT_DELAY_US, LIVENESS_CLIENT};

/// Writes with unknown outcome after which a register moves to a fresh key.
const UNKNOWN_WRITES_PER_KEY: u32 = 6;
use crate::history::{Operation, Outcome};

impl NodeCluster {
    /// A command for key `i`, by the key's kind.
    /// A command for key `k{key_index}`, by the key's kind. Every command is one the history
    /// checkers model.
    pub(super) fn command_for(&mut self, key_index: u32, client: u32, seq: u64) -> Command {
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

    pub(super) fn client_next(&mut self, client: u32) {
        let c = &self.clients[&client];
        if c.issued >= self.config.commands_per_client || c.in_flight.is_some() {
            return;
        }
        let key_index = self.rng.random_range(0..self.config.keys);
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
        if !self.nodes[&node].up {
            let up: Vec<NodeId> = self
                .nodes
                .iter()
                .filter(|(_, n)| n.up)
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
        c.node = node;
        c.issued += 1;
        c.seq += 1;
        let seq = c.seq;
        c.in_flight = Some((seq, index, node));
        let timeout = self.config.client_timeout_us;
        self.events
            .schedule(timeout, Event::ClientTimeout { client, seq });
        let shard = shard_of(&key.0, usize::from(self.config.shards)) as u16;
        let incarnation = self.nodes[&node].incarnation;
        self.events.schedule(
            CLIENT_DELAY_US,
            Event::Arrive {
                node,
                incarnation,
                shard,
                input: Input::Command {
                    key,
                    command,
                    to: AnswerTo { client, seq },
                },
            },
        );
    }

    /// `result`: `Some(Ok)` answered, `Some(Err)` refused or unknown per the error, `None`
    /// no answer (unknown).
    pub(super) fn client_done(&mut self, client: u32, seq: u64, result: Option<CommandResult>) {
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
        let op = &mut self.history.operations[index];
        match result {
            Some(Ok(reply)) => {
                op.return_us = now_us;
                op.outcome = Outcome::Ok(reply);
            }
            Some(Err(ProposeError::NotApplied | ProposeError::Overloaded)) => {
                op.return_us = now_us;
                op.outcome = Outcome::NotApplied;
            }
            Some(Err(ProposeError::OutcomeUnknown)) | None => {
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

    /// Every key written, then read, through every node in turn, each within the liveness
    /// budget, with no faults.
    pub(super) fn liveness(&mut self) {
        for key_index in 0..self.config.keys {
            for node in (1..=self.config.nodes).map(NodeId) {
                let client = LIVENESS_CLIENT + key_index * 16 + u32::from(node.0);
                let seq = 1_000_000 + u64::from(key_index);
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
                for command in [write, read] {
                    self.clients.insert(
                        client,
                        Client {
                            node,
                            issued: 0,
                            seq,
                            in_flight: None,
                        },
                    );
                    let key = self.current_key(key_index);
                    let deadline = self.events.now_us() + self.config.liveness_us;
                    let answered = self.acknowledged_by(client, &key, &command, deadline);
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

/// The register index in a key's name (`k{index}.{generation}`).
fn key_index_of(key: &Key) -> Option<u32> {
    let name = std::str::from_utf8(&key.0).ok()?;
    name.strip_prefix('k')?.split('.').next()?.parse().ok()
}
