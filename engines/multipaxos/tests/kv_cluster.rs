//! The register map on a simulated cluster (three replicas, the faults of `cluster_sim`):
//! clients move amounts between counters in transactions, read all counters with MGET, and set
//! keys that expire. Checked: the counters' total is zero after every request any replica
//! executes (atomicity at every executed prefix) and in every MGET a client gets back, and
//! after the network heals, every replica holds the same map at the same execution stamp.
//! The same run with each transfer split into two requests (two log entries) must fail.
mod cluster_sim;

use bytes::Bytes;
use cluster_sim::{seeds, Sim, FAULTY_MS, HEALED_MS};
use logless_commands::command::{Condition, Expiry, SetArgs};
use logless_commands::value::Data;
use logless_multipaxos::config::Config;
use logless_multipaxos::ids::{ClientId, Instance, RequestSeq};
use logless_multipaxos::kv::{Command, Operation, RegisterMachine, Response};
use logless_multipaxos::message::Request;
use logless_multipaxos::replica::Stats;
use logless_multipaxos::state_machine::StateMachine;

const COUNTERS: [&str; 4] = ["k0", "k1", "k2", "k3"];
/// Seeds run by default; `LOGLESS_MULTIPAXOS_SEEDS` asks for more.
const SEEDS_DEFAULT: u64 = 30;

/// The register map, audited after every request it executes.
#[derive(Default)]
struct Audited {
    map: RegisterMachine,
    /// The first prefix whose counters did not add up to zero.
    broken: Option<String>,
    executed: u64,
}

impl Audited {
    fn total(&self) -> Result<i64, String> {
        COUNTERS.iter().try_fold(0i64, |sum, key| {
            match self.map.get(key.as_bytes()).live_data(self.map.now_ms()) {
                Data::Absent => Ok(sum),
                Data::Int(v) => Ok(sum + v),
                other => Err(format!("{key} holds {other:?}")),
            }
        })
    }
}

impl StateMachine for Audited {
    fn begin_batch(&mut self, instance: Instance, stamp_ms: u64) {
        self.map.begin_batch(instance, stamp_ms);
    }

    fn execute(&mut self, request: &Request) -> Bytes {
        let reply = self.map.execute(request);
        self.executed += 1;
        if self.broken.is_none() {
            match self.total() {
                Ok(0) => {}
                Ok(total) => {
                    self.broken = Some(format!(
                        "total {total} after {:?} {:?}",
                        request.client, request.seq
                    ))
                }
                Err(e) => self.broken = Some(e),
            }
        }
        reply
    }

    fn snapshot(&self) -> Bytes {
        self.map.snapshot()
    }

    fn restore(&mut self, snapshot: &Bytes) {
        self.map.restore(snapshot);
    }
}

/// SplitMix64, for payloads that are a pure function of the request.
fn mix(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

fn key(name: &str) -> Bytes {
    Bytes::copy_from_slice(name.as_bytes())
}

fn incr(name: &str, delta: i64) -> Operation {
    Operation::Command {
        key: key(name),
        command: Command::IncrBy(delta),
    }
}

/// Transfer `index` of `client`: from one counter to another, a random amount.
fn transfer(client: ClientId, index: u64) -> [Operation; 2] {
    let h = mix(client.0 << 32 ^ index);
    let from = COUNTERS[(h % 4) as usize];
    let to = COUNTERS[((h >> 8) % 4) as usize];
    let amount = ((h >> 16) % 50) as i64 + 1;
    [incr(from, -amount), incr(to, amount)]
}

/// Other traffic: reads of every counter; keys that expire within tens of milliseconds (so
/// replicas must agree on expiry); multi-key commands on other keys; SPOP (so replicas must
/// agree on random choices).
fn other(client: ClientId, seq: RequestSeq) -> Option<Operation> {
    let h = mix(client.0 << 40 ^ seq.0 ^ 0xABCD);
    let x = |i: u64| key(&format!("x{}", (h >> 8).wrapping_add(i) % 3));
    let command = |key: Bytes, command: Command| Operation::Command { key, command };
    let member = Bytes::from(format!("m{}", (h >> 16) % 5));
    Some(match h % 20 {
        0..=2 => Operation::MGet(COUNTERS.iter().map(|k| key(k)).collect()),
        3 => command(
            x(0),
            Command::Set(SetArgs {
                value: Bytes::from(seq.0.to_string()),
                condition: Condition::Always,
                get: false,
                expiry: Expiry::AfterMs(h % 40 + 1),
            }),
        ),
        4 => Operation::Transaction(vec![
            Operation::Exists((0..3).map(&x).collect()),
            command(x(0), Command::PTtl),
            Operation::MGet((0..3).map(&x).collect()),
        ]),
        5 => Operation::Transaction(vec![
            Operation::MSet(vec![(x(0), member.clone()), (x(1), member.clone())]),
            Operation::Rename {
                from: x(0),
                to: x(2),
            },
            Operation::Copy {
                from: x(1),
                to: x(0),
                replace: h & 1 == 0,
            },
        ]),
        6 => command(key("s0"), Command::SAdd(vec![member])),
        7 => Operation::SMove {
            from: key("s0"),
            to: key("s1"),
            member,
        },
        8 => command(
            key("s1"),
            Command::SPop {
                count: Some(2),
                seed: 0,
            },
        ),
        _ => return None,
    })
}

/// A transfer as one transaction: one log entry.
fn atomic(client: ClientId, seq: RequestSeq) -> Bytes {
    other(client, seq)
        .unwrap_or_else(|| Operation::Transaction(transfer(client, seq.0).to_vec()))
        .encode()
}

/// The deliberate mutation: each transfer split into two requests, so two log entries (odd
/// requests take from one counter, the next even one gives to the other).
fn split(client: ClientId, seq: RequestSeq) -> Bytes {
    let [take, give] = transfer(client, seq.0.div_ceil(2));
    if seq.0 % 2 == 1 {
        take.encode()
    } else {
        give.encode()
    }
}

fn check(sim: &Sim<Audited>, healed: bool) -> Result<(), String> {
    if let Some(unpersisted) = &sim.unpersisted {
        return Err(unpersisted.clone());
    }
    for (node, replica) in &sim.replicas {
        if let Some(broken) = replica
            .as_ref()
            .and_then(|r| r.state_machine().broken.clone())
        {
            return Err(format!("{node:?}: {broken}"));
        }
    }
    for client in &sim.clients {
        for (seq, reply) in &client.acked {
            let Ok(Operation::MGet(_)) = Operation::decode(&(sim.payload)(client.id, *seq)) else {
                continue;
            };
            let Ok(Response::Items(values)) = Response::decode(reply) else {
                return Err(format!("MGET answered {reply:?}"));
            };
            let total: i64 = values
                .iter()
                .map(|v| match v {
                    Response::Bulk(b) => std::str::from_utf8(b).unwrap().parse::<i64>().unwrap(),
                    _ => 0,
                })
                .sum();
            if total != 0 {
                return Err(format!("{:?} {seq:?} read a total of {total}", client.id));
            }
        }
    }
    if healed {
        let live: Vec<_> = sim.replicas.values().flatten().collect();
        if live.len() != sim.nodes.len() {
            return Err("a replica is still down after healing".to_string());
        }
        let first = live[0];
        for replica in &live[1..] {
            if replica.executed_below() != first.executed_below()
                || replica.stamp_executed_ms() != first.stamp_executed_ms()
                || replica.state_machine().map != first.state_machine().map
            {
                return Err(format!(
                    "{:?} and {:?} differ after healing",
                    first.me(),
                    replica.me()
                ));
            }
        }
        if let Some(c) = sim.clients.iter().find(|c| c.sent_ms.is_some()) {
            return Err(format!("{:?} still waits after healing", c.id));
        }
    }
    Ok(())
}

/// Runs one seed; returns the requests executed and the replicas' counters, or the first check
/// that failed.
fn run(
    seed: u64,
    payload: fn(ClientId, RequestSeq) -> Bytes,
    configure: fn(&mut Config),
) -> Result<(u64, Stats), String> {
    let mut sim = Sim::new(seed, 3, configure, Audited::default, payload);
    while sim.now_ms < FAULTY_MS {
        sim.step();
        if sim.now_ms.is_multiple_of(100) {
            check(&sim, false)?;
        }
    }
    sim.faulty = false;
    sim.crash_next = None;
    while sim.now_ms < FAULTY_MS + HEALED_MS {
        sim.step();
    }
    check(&sim, true)?;
    let replica = sim.replicas.values().flatten().next().unwrap();
    Ok((replica.state_machine().executed, sim.totals()))
}

fn snapshots_often(config: &mut Config) {
    config.snapshot_log_bytes_min = 2_000;
}

#[test]
fn transfers_in_transactions_keep_the_total_at_every_prefix_under_faults() {
    let mut executed = 0;
    let mut seen = Stats::default();
    let seeds = seeds(SEEDS_DEFAULT);
    for seed in 0..seeds {
        match run(seed, atomic, snapshots_often) {
            Ok((n, stats)) => {
                executed += n;
                seen.views_led += stats.views_led;
                seen.snapshots_installed += stats.snapshots_installed;
            }
            Err(e) => panic!("seed {seed}: {e}"),
        }
    }
    eprintln!("{executed} requests executed; {seen:?}");
    // The runs did real work and went through view changes and snapshot installs.
    assert!(executed > seeds * 100, "{executed} requests executed");
    assert!(seen.views_led > seeds, "{seen:?}");
    assert!(seen.snapshots_installed > 0, "{seen:?}");
}

#[test]
fn transfers_split_into_two_log_entries_are_caught() {
    let failure =
        (0..seeds(SEEDS_DEFAULT)).find_map(|seed| run(seed, split, snapshots_often).err());
    let error = failure.expect("the deliberate mutation must be caught");
    eprintln!("caught: {error}");
    assert!(error.contains("total"), "{error}");
}

#[test]
fn replicas_executing_at_their_own_clocks_are_caught() {
    let failure = (0..seeds(SEEDS_DEFAULT)).find_map(|seed| {
        run(seed, atomic, |c| {
            snapshots_often(c);
            c.bugs.execute_at_local_clock = true;
        })
        .err()
    });
    let error = failure.expect("the deliberate bug must be caught");
    eprintln!("caught: {error}");
    assert!(error.contains("differ"), "{error}");
}
