//! Whole replicas on a simulated network: three replicas with two workers each, clients that
//! send counter commands to random replicas, messages delayed and reordered at random, workers
//! stepped at random. Checked: every message leaves only once what it promises is durable in its
//! group's log, the groups' first leaders are spread over the replicas, every replica executes
//! every command with the same replies and ends in the same state, and an idle stream (only
//! `g_all` busy, or only one worker's group) stalls nothing. With skips turned off the idle
//! case must stall, which shows the check can fail.
use std::collections::BTreeMap;

use bytes::Bytes;
use logless_multipaxos::ids::{ClientId, NodeId, RequestSeq};
use logless_multipaxos::message::Request;
use logless_multipaxos::testing::durable_before_send;
use logless_psmr::config::{Config, Mode};
use logless_psmr::groups::GroupEnvelope;
use logless_psmr::ids::{Group, WorkerId};
use logless_psmr::plan::{Delivered, Step};
use logless_psmr::replica::Replica;
use logless_psmr::service::Service;
use logless_psmr::testing::{CounterCommand, CounterGroups, Counters, MemGroupStore};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

const NODES: [NodeId; 3] = [NodeId(1), NodeId(2), NodeId(3)];
const WORKERS: u16 = 2;
/// How long a run may take, in simulated milliseconds.
const RUN_MS_MAX: u64 = 5_000;
/// When the clients send their commands, spread from the start.
const SEND_MS_MAX: u64 = 500;

struct Node {
    replica: Replica<CounterGroups>,
    store: MemGroupStore,
    service: Counters,
    executing: Vec<Option<Delivered>>,
    /// Replies by client, as this replica's workers executed them.
    replies: BTreeMap<u64, Bytes>,
}

struct Sim {
    rng: SmallRng,
    now_ms: u64,
    nodes: BTreeMap<NodeId, Node>,
    /// (delivery time, sender, message).
    in_flight: Vec<(u64, NodeId, GroupEnvelope)>,
    /// (send time, replica, command), not sent yet.
    commands: Vec<(u64, NodeId, CounterCommand)>,
    sent: usize,
}

impl Sim {
    fn new(seed: u64, commands: &[CounterCommand], configure: fn(&mut Config)) -> Sim {
        let mut rng = SmallRng::seed_from_u64(seed);
        let nodes = NODES
            .iter()
            .map(|&me| {
                let mut config = Config::new(NODES.to_vec(), me, WORKERS);
                configure(&mut config);
                let node = Node {
                    replica: Replica::new(config, CounterGroups, 0),
                    store: MemGroupStore::default(),
                    service: Counters::default(),
                    executing: vec![None; usize::from(WORKERS)],
                    replies: BTreeMap::new(),
                };
                (me, node)
            })
            .collect();
        let commands = commands
            .iter()
            .map(|&c| {
                let at = rng.random_range(0..SEND_MS_MAX);
                (at, NODES[rng.random_range(0..NODES.len())], c)
            })
            .collect();
        Sim {
            rng,
            now_ms: 0,
            nodes,
            in_flight: Vec::new(),
            commands,
            sent: 0,
        }
    }

    /// Commits what `me` produced and puts its messages on the network, checking each against
    /// its group's durable log.
    fn commit(&mut self, me: NodeId) {
        let node = self.nodes.get_mut(&me).unwrap();
        let Ok(released) = node.replica.take_ready().commit(&mut node.store);
        for envelope in released.messages {
            let durable = node.store.group(envelope.group).map(|s| s.durable());
            let default = Default::default();
            assert!(
                durable_before_send(durable.unwrap_or(&default), &envelope.message),
                "{me:?} sent {envelope:?} before persisting it"
            );
            let at = self.now_ms + self.rng.random_range(0..4);
            self.in_flight.push((at, me, envelope));
        }
    }

    fn step(&mut self) {
        let due: Vec<(usize, NodeId, CounterCommand)> = (self.commands.iter().enumerate())
            .filter(|(_, (at, _, _))| *at == self.now_ms)
            .map(|(index, &(_, to, command))| (index, to, command))
            .collect();
        for (index, to, command) in due {
            let node = self.nodes.get_mut(&to).unwrap();
            let request = Request {
                client: ClientId(index as u64),
                seq: RequestSeq(1),
                payload: command.encode(),
            };
            node.replica.handle_request(self.now_ms, request).unwrap();
            self.sent += 1;
            self.commit(to);
        }
        let (due, later): (Vec<_>, Vec<_>) = std::mem::take(&mut self.in_flight)
            .into_iter()
            .partition(|(at, _, _)| *at <= self.now_ms);
        self.in_flight = later;
        for (_, from, envelope) in due {
            let node = self.nodes.get_mut(&envelope.to).unwrap();
            node.replica
                .handle_message(self.now_ms, from, envelope.group, envelope.message);
            self.commit(envelope.to);
        }
        for me in NODES {
            self.nodes.get_mut(&me).unwrap().replica.tick(self.now_ms);
            self.commit(me);
            self.step_workers(me);
        }
    }

    /// Some random steps of `me`'s workers: polls, and executions finishing.
    fn step_workers(&mut self, me: NodeId) {
        let node = self.nodes.get_mut(&me).unwrap();
        let workers = node.replica.plan().workers();
        for _ in 0..8 {
            let w = self.rng.random_range(0..workers);
            let worker = WorkerId(w);
            match node.executing[usize::from(w)].take() {
                Some(command) if self.rng.random_bool(0.5) => {
                    let reply = node.service.execute(&command.request.payload);
                    node.replies.insert(command.request.client.0, reply);
                    node.replica.executed(worker);
                }
                Some(command) => node.executing[usize::from(w)] = Some(command),
                None => {
                    if let Step::Execute { command, .. } = node.replica.poll(worker) {
                        node.executing[usize::from(w)] = Some(command);
                    }
                }
            }
        }
    }

    /// Runs until every replica executed every command, or the time limit.
    fn run(&mut self) -> Result<u64, String> {
        while self.now_ms < RUN_MS_MAX {
            self.step();
            let total = self.commands.len();
            if self.sent == total && self.nodes.values().all(|n| n.replies.len() == total) {
                return Ok(self.now_ms);
            }
            self.now_ms += 1;
        }
        let executed: Vec<usize> = self.nodes.values().map(|n| n.replies.len()).collect();
        Err(format!(
            "stalled: {executed:?} of {} executed",
            self.commands.len()
        ))
    }

    fn agreement(&self) -> Result<(), String> {
        let first = &self.nodes[&NODES[0]];
        for (me, node) in &self.nodes {
            if node.service != first.service {
                return Err(format!("{me:?}'s state {:?}", node.service));
            }
            if node.replies != first.replies {
                return Err(format!("{me:?}'s replies {:?}", node.replies));
            }
        }
        Ok(())
    }

    fn check_agreement(&self) {
        if let Err(e) = self.agreement() {
            panic!("replicas disagree: {e}");
        }
    }
}

fn random_commands(rng: &mut SmallRng, count: usize) -> Vec<CounterCommand> {
    (0..count)
        .map(|_| match rng.random_range(0..10) {
            0 => CounterCommand::Double,
            1 => CounterCommand::Sum,
            _ => CounterCommand::Add {
                key: rng.random_range(0..6),
                amount: rng.random_range(-5..6),
            },
        })
        .collect()
}

fn random_runs_agree(configure: fn(&mut Config)) {
    for seed in 0..20 {
        let mut rng = SmallRng::seed_from_u64(seed);
        let commands = random_commands(&mut rng, 60);
        let mut sim = Sim::new(seed, &commands, configure);
        sim.run().unwrap_or_else(|e| panic!("seed {seed}: {e}"));
        sim.check_agreement();
    }
}

#[test]
fn every_replica_executes_random_commands_with_the_same_replies_and_state() {
    random_runs_agree(|_| {});
}

#[test]
fn sp_smr_replicas_agree() {
    random_runs_agree(|c| c.mode = Mode::SpSmr);
}

#[test]
fn smr_replicas_agree_and_run_one_stream() {
    random_runs_agree(|c| c.mode = Mode::Smr);
    let sim = Sim::new(0, &[], |c| c.mode = Mode::Smr);
    let replica = &sim.nodes[&NODES[0]].replica;
    assert_eq!(replica.plan().workers(), 1);
    assert!(replica.groups().replica(Group::All).is_some());
    assert!(replica
        .groups()
        .replica(Group::Worker(WorkerId(0)))
        .is_none());
}

#[test]
fn without_replication_every_command_runs_as_in_arrival_order() {
    let mut rng = SmallRng::seed_from_u64(11);
    let commands = random_commands(&mut rng, 60);
    let mut config = Config::new(NODES.to_vec(), NODES[0], WORKERS);
    config.mode = Mode::NoRep;
    let mut replica = Replica::new(config, CounterGroups, 0);
    let mut sequential = Counters::default();
    let mut expected = BTreeMap::new();
    for (i, command) in commands.iter().enumerate() {
        let payload = command.encode();
        expected.insert(i as u64, sequential.execute(&payload));
        let request = Request {
            client: ClientId(i as u64),
            seq: RequestSeq(1),
            payload,
        };
        replica.handle_request(0, request).unwrap();
    }
    assert!(replica.take_ready().is_empty(), "nothing to replicate");
    let mut service = Counters::default();
    let mut replies = BTreeMap::new();
    while !replica.plan().is_drained() {
        for w in (0..WORKERS).rev() {
            if let Step::Execute { command, .. } = replica.poll(WorkerId(w)) {
                let reply = service.execute(&command.request.payload);
                replies.insert(command.request.client.0, reply);
                replica.executed(WorkerId(w));
            }
        }
    }
    assert_eq!(replies, expected);
    assert_eq!(service, sequential);
}

#[test]
fn the_groups_first_leaders_are_spread_over_the_replicas_and_an_idle_cluster_skips_nothing() {
    let mut sim = Sim::new(1, &[], |_| {});
    for _ in 0..200 {
        sim.step();
        sim.now_ms += 1;
    }
    for (index, group) in Group::all(WORKERS).enumerate() {
        let leaders: Vec<NodeId> = NODES
            .iter()
            .filter(|me| {
                sim.nodes[me]
                    .replica
                    .groups()
                    .replica(group)
                    .unwrap()
                    .is_leader()
            })
            .copied()
            .collect();
        assert_eq!(leaders, [NODES[index % NODES.len()]], "{group:?}");
    }
    for node in sim.nodes.values() {
        assert_eq!(
            node.replica.groups().stats().skips_proposed,
            0,
            "no merge waited"
        );
    }
}

/// Only `g_all` commands: both workers' streams stay idle.
fn all_only() -> Vec<CounterCommand> {
    [CounterCommand::Double, CounterCommand::Sum].repeat(10)
}

/// Only worker 0's commands (even keys): `g_1` and `g_all` stay idle.
fn worker_0_only() -> Vec<CounterCommand> {
    (0..20i64)
        .map(|i| CounterCommand::Add {
            key: 2 * (i.unsigned_abs() % 3),
            amount: i,
        })
        .collect()
}

#[test]
fn idle_streams_do_not_stall_the_merge() {
    for commands in [all_only(), worker_0_only()] {
        let mut sim = Sim::new(3, &commands, |_| {});
        let done_ms = sim.run().unwrap();
        assert!(
            done_ms < SEND_MS_MAX + 200,
            "done at {done_ms} ms, long after the last command"
        );
        sim.check_agreement();
        let skips: u64 = sim
            .nodes
            .values()
            .map(|n| n.replica.groups().stats().skips_proposed)
            .sum();
        assert!(skips > 0, "idle leaders proposed skips");
    }
}

#[test]
fn without_skips_an_idle_stream_stalls_the_merge() {
    for commands in [all_only(), worker_0_only()] {
        let mut sim = Sim::new(3, &commands, |config| {
            config.skip_interval_ms = u64::MAX / 2
        });
        assert!(sim.run().is_err(), "nothing moved the idle streams on");
    }
}

/// Whether some seed's random run ends with replicas that disagree, under `configure`.
fn some_run_diverges(configure: fn(&mut Config)) -> bool {
    (0..10).any(|seed| {
        let mut rng = SmallRng::seed_from_u64(seed);
        let commands = random_commands(&mut rng, 60);
        let mut sim = Sim::new(seed, &commands, configure);
        sim.run().is_err() || sim.agreement().is_err()
    })
}

#[test]
fn a_merge_by_arrival_makes_replicas_diverge() {
    assert!(some_run_diverges(|c| c.bugs.merge.by_arrival = true));
}

#[test]
fn synchronous_mode_without_the_barrier_makes_replicas_diverge() {
    assert!(some_run_diverges(|c| c.bugs.plan.no_barrier = true));
}
