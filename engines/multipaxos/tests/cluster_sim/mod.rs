//! The simulated cluster the seeded random runs share: replicas over a state machine `S` on a
//! network that loses, delays, reorders and duplicates messages, replicas that crash
//! (sometimes in the middle of a step) and restart from their store, a replica cut off now and
//! then, and clients that retry at any replica. What to check is the test's.
#![allow(dead_code)]
use std::collections::BTreeMap;

use bytes::Bytes;
use logless_multipaxos::config::Config;
use logless_multipaxos::ids::{ClientId, NodeId, RequestSeq};
use logless_multipaxos::message::{Envelope, Request};
use logless_multipaxos::replica::{Replica, Stats};
use logless_multipaxos::state_machine::StateMachine;
use logless_multipaxos::testing::{durable_before_send, MemStore};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

/// The seeds to run: `LOGLESS_MULTIPAXOS_SEEDS` if set, else `default`.
pub fn seeds(default: u64) -> u64 {
    std::env::var("LOGLESS_MULTIPAXOS_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

pub const CLIENTS: u64 = 3;
/// How long faults are injected.
pub const FAULTY_MS: u64 = 4_000;
/// How long the healed cluster then has to finish.
pub const HEALED_MS: u64 = 4_000;
pub const TICK_MS: u64 = 5;
pub const CLIENT_RETRY_MS: u64 = 400;

pub struct Client {
    pub id: ClientId,
    pub seq: RequestSeq,
    /// When the outstanding request was last sent, if one is.
    pub sent_ms: Option<u64>,
    /// Replies received: sequence number → reply.
    pub acked: BTreeMap<RequestSeq, Bytes>,
    /// When the client sends its next request.
    pub next_ms: u64,
}

pub struct Sim<S> {
    pub rng: SmallRng,
    pub nodes: Vec<NodeId>,
    pub configure: fn(&mut Config),
    pub replicas: BTreeMap<NodeId, Option<Replica<S>>>,
    pub stores: BTreeMap<NodeId, MemStore>,
    /// Replicas that crash while handling their next message.
    pub crash_next: Option<NodeId>,
    pub restart_at: BTreeMap<NodeId, u64>,
    /// Messages in flight: (delivery time, sender, message).
    pub in_flight: Vec<(u64, NodeId, Envelope)>,
    pub clients: Vec<Client>,
    /// A replica cut off from the others, and until when.
    pub isolated: Option<(NodeId, u64)>,
    /// Counters of replicas' past lives (a crash loses them).
    pub past: Vec<Stats>,
    pub now_ms: u64,
    pub faulty: bool,
    /// The first message that left before what it promises was durable.
    pub unpersisted: Option<String>,
    /// A fresh state machine, for a replica's start and every restart.
    pub make: fn() -> S,
    /// The payload of a client's request number `seq` (a retry sends the same).
    pub payload: fn(ClientId, RequestSeq) -> Bytes,
}

impl<S: StateMachine> Sim<S> {
    pub fn new(
        seed: u64,
        replicas: u16,
        configure: fn(&mut Config),
        make: fn() -> S,
        payload: fn(ClientId, RequestSeq) -> Bytes,
    ) -> Sim<S> {
        let mut sim = Sim {
            rng: SmallRng::seed_from_u64(seed),
            nodes: (1..=replicas).map(NodeId).collect(),
            configure,
            replicas: BTreeMap::new(),
            stores: BTreeMap::new(),
            crash_next: None,
            restart_at: BTreeMap::new(),
            in_flight: Vec::new(),
            clients: (0..CLIENTS)
                .map(|i| Client {
                    id: ClientId(i + 1),
                    seq: RequestSeq(0),
                    sent_ms: None,
                    acked: BTreeMap::new(),
                    next_ms: 0,
                })
                .collect(),
            isolated: None,
            past: Vec::new(),
            now_ms: 0,
            faulty: true,
            unpersisted: None,
            make,
            payload,
        };
        for node in sim.nodes.clone() {
            let replica = Replica::new(sim.config(node), (sim.make)(), 0);
            sim.replicas.insert(node, Some(replica));
            sim.stores.insert(node, MemStore::default());
        }
        sim
    }

    pub fn config(&self, node: NodeId) -> Config {
        let mut config = Config::new(self.nodes.clone(), node);
        config.batch_requests_max = 4;
        config.batch_delay_ms = 2;
        config.window_instances = 3;
        config.snapshot_log_bytes_min = 300;
        config.snapshot_ratio_percent = 50;
        config.catch_up_instances_max = 5;
        // Snapshots of a few hundred bytes travel in several pieces, under the faults.
        config.snapshot_chunk_bytes = 32;
        (self.configure)(&mut config);
        config
    }

    pub fn live(&self) -> Vec<NodeId> {
        self.nodes
            .iter()
            .copied()
            .filter(|n| self.replicas[n].is_some())
            .collect()
    }

    /// Commits what `node` produced (or, if it crashes now, lets out only what leaked) and puts
    /// its messages on the network and its replies to the clients.
    pub fn collect(&mut self, node: NodeId, crash: bool) {
        let replica = self.replicas.get_mut(&node).unwrap().as_mut().unwrap();
        let ready = replica.take_ready();
        let (messages, replies) = if crash {
            (ready.abandon(), Vec::new())
        } else {
            let Ok(released) = ready.commit(self.stores.get_mut(&node).unwrap());
            (released.messages, released.replies)
        };
        for envelope in messages {
            let durable = self.stores[&node].durable();
            if !durable_before_send(durable, &envelope.message) && self.unpersisted.is_none() {
                self.unpersisted = Some(format!("{node:?} sent {envelope:?} before persisting it"));
            }
            self.send(node, envelope);
        }
        for reply in replies {
            let client = &mut self.clients[(reply.client.0 - 1) as usize];
            if reply.seq == client.seq && client.sent_ms.is_some() {
                client.acked.insert(reply.seq, reply.reply);
                client.sent_ms = None;
                client.next_ms = self.now_ms + self.rng.random_range(0..20);
            }
        }
        if crash {
            self.crash(node);
        }
    }

    /// Crashes `node`: its store forgets what was not flushed; it restarts later.
    pub fn crash(&mut self, node: NodeId) {
        self.stores.get_mut(&node).unwrap().crash();
        let replica = self.replicas.insert(node, None).flatten().unwrap();
        self.past.push(replica.stats().clone());
        let down_ms = self.rng.random_range(50..400);
        self.restart_at.insert(node, self.now_ms + down_ms);
    }

    /// Every replica life's counters summed up.
    pub fn totals(&self) -> Stats {
        let lives = self.replicas.values().flatten().map(|r| r.stats());
        let mut total = Stats::default();
        for s in self.past.iter().chain(lives) {
            total.views_led += s.views_led;
            total.noops_proposed += s.noops_proposed;
            total.duplicates_skipped += s.duplicates_skipped;
            total.snapshots_taken += s.snapshots_taken;
            total.snapshots_installed += s.snapshots_installed;
            total.catch_up_queries += s.catch_up_queries;
        }
        total
    }

    pub fn send(&mut self, from: NodeId, envelope: Envelope) {
        let (loss, duplicate) = if self.faulty {
            (0.05, 0.03)
        } else {
            (0.0, 0.0)
        };
        if self.rng.random_bool(loss) {
            return;
        }
        let copies = if self.rng.random_bool(duplicate) {
            2
        } else {
            1
        };
        for _ in 0..copies {
            let delay = self.rng.random_range(1..15);
            self.in_flight
                .push((self.now_ms + delay, from, envelope.clone()));
        }
    }

    pub fn step(&mut self) {
        self.now_ms += 1;
        // Deliver what is due, in random order (reordering).
        let mut due = Vec::new();
        let mut i = 0;
        while i < self.in_flight.len() {
            if self.in_flight[i].0 <= self.now_ms {
                due.push(self.in_flight.swap_remove(i));
            } else {
                i += 1;
            }
        }
        while !due.is_empty() {
            let (_, from, envelope) = due.swap_remove(self.rng.random_range(0..due.len()));
            let to = envelope.to;
            if self.isolated.is_some_and(|(n, _)| n == to || n == from) {
                continue;
            }
            let Some(replica) = self.replicas.get_mut(&to).unwrap().as_mut() else {
                continue;
            };
            replica.handle_message(self.now_ms, from, envelope.message);
            let crash = self.crash_next == Some(to);
            if crash {
                self.crash_next = None;
            }
            self.collect(to, crash);
        }
        if self.now_ms.is_multiple_of(TICK_MS) {
            for node in self.live() {
                let replica = self.replicas.get_mut(&node).unwrap().as_mut().unwrap();
                replica.tick(self.now_ms);
                self.collect(node, false);
            }
        }
        self.faults();
        self.clients_act();
    }

    pub fn faults(&mut self) {
        let restarts: Vec<NodeId> = self
            .restart_at
            .iter()
            .filter(|(_, at)| **at <= self.now_ms || !self.faulty)
            .map(|(n, _)| *n)
            .collect();
        for node in restarts {
            self.restart_at.remove(&node);
            let durable = self.stores[&node].durable().clone();
            let replica = Replica::recover(self.config(node), (self.make)(), &durable, self.now_ms);
            self.replicas.insert(node, Some(replica));
            self.collect(node, false);
        }
        // At most a minority down at once (the rest may still be cut off by isolation).
        let down = self.nodes.len() - self.live().len();
        let may_crash = down < (self.nodes.len() - 1) / 2;
        if self.faulty && may_crash && self.crash_next.is_none() && self.rng.random_bool(0.001) {
            let live = self.live();
            let node = live[self.rng.random_range(0..live.len())];
            if self.rng.random_bool(0.5) {
                // In the middle of its next step.
                self.crash_next = Some(node);
            } else {
                self.crash(node);
            }
        }
        if self
            .isolated
            .is_some_and(|(_, until)| until <= self.now_ms || !self.faulty)
        {
            self.isolated = None;
        }
        if self.faulty && self.isolated.is_none() && self.rng.random_bool(0.0005) {
            let node = self.nodes[self.rng.random_range(0..self.nodes.len())];
            let until = self.now_ms + self.rng.random_range(300..1_500);
            self.isolated = Some((node, until));
        }
    }

    pub fn clients_act(&mut self) {
        for i in 0..self.clients.len() {
            let client = &self.clients[i];
            let send = match client.sent_ms {
                Some(sent) => self.now_ms >= sent + CLIENT_RETRY_MS,
                None => self.faulty && self.now_ms >= client.next_ms,
            };
            if !send {
                continue;
            }
            let live = self.live();
            if live.is_empty() {
                continue;
            }
            let node = live[self.rng.random_range(0..live.len())];
            let client = &mut self.clients[i];
            if client.sent_ms.is_none() {
                client.seq = RequestSeq(client.seq.0 + 1);
            }
            client.sent_ms = Some(self.now_ms);
            let request = Request {
                client: client.id,
                seq: client.seq,
                payload: (self.payload)(client.id, client.seq),
            };
            let replica = self.replicas.get_mut(&node).unwrap().as_mut().unwrap();
            replica.handle_request(self.now_ms, request);
            self.collect(node, false);
        }
    }
}
