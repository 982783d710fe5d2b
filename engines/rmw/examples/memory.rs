//! Bytes per register of a replica's in-memory structures, without a node: what the acceptor
//! holds for a register (its table entry and its value) and what the proposer caches, for
//! `N` registers of `VALUE_BYTES`-byte values written through one replica of three.
//! `cargo run -p logless-rmw --example memory -- PART [N] [VALUE_BYTES]`, PART one of
//! `values` (the values alone), `acceptor` (a replica that did not propose, its states
//! recovered) and `cluster` (the tables of three replicas written through the first), each
//! in a process of its own; default 1,000,000 registers of 16 bytes, as
//! `redis-benchmark -d 16` writes them.
//!
//! The bytes are the growth of the process's anonymous resident memory (`RssAnon`) under the
//! allocator the node uses, so its rounding to size classes is counted as in a node.
use std::convert::Infallible;
use std::sync::Arc;

use bytes::Bytes;
use logless_commands::command::{Command, Condition, Expiry, SetArgs};
use logless_commands::value::{Data, Register};
use logless_rmw::acceptor::AcceptorState;
use logless_rmw::config::ProposerConfig;
use logless_rmw::ids::{AttemptId, ClientTag, Key, NodeId, ProposerId, ReqId, Round};
use logless_rmw::message::Envelope;
use logless_rmw::persist::AcceptorStore;
use logless_rmw::replica::Replica;

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// The process's anonymous resident memory, bytes.
fn live() -> usize {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    let kib: usize = status
        .lines()
        .find_map(|line| line.strip_prefix("RssAnon:"))
        .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("RssAnon in /proc/self/status");
    kib << 10
}

/// A store that keeps nothing: the node's store is measured on its own.
struct Discard;

impl AcceptorStore for Discard {
    type Error = Infallible;
    fn write(&mut self, _: &Key, _: &AcceptorState) -> Result<(), Infallible> {
        Ok(())
    }
    fn flush(&mut self) -> Result<(), Infallible> {
        Ok(())
    }
    fn write_round_floor(&mut self, _: Round) -> Result<(), Infallible> {
        Ok(())
    }
    fn remove(&mut self, _: &Key) -> Result<(), Infallible> {
        Ok(())
    }
}

fn key(i: usize) -> Key {
    Key::new(format!("key:{i:012}"))
}

fn attempt(seq: u64) -> AttemptId {
    AttemptId {
        proposer: ProposerId {
            node: NodeId(1),
            incarnation: 1,
        },
        seq,
    }
}

/// An acceptor state as a vote for a write leaves it, with its own copy of the value as a
/// replica decoding it from the wire has.
fn voted(i: usize, value: &[u8]) -> AcceptorState {
    let seq = 2 * i as u64 + 2;
    AcceptorState {
        r_ack: Round {
            n: 2,
            id: attempt(seq),
        },
        r_voted: Round {
            n: 1,
            id: attempt(seq),
        },
        value: Arc::new(Register {
            data: Data::Str(Bytes::copy_from_slice(value)),
            ..Register::default()
        }),
        req: ReqId::new(attempt(seq)),
        req_prev: None,
    }
}

fn config() -> ProposerConfig {
    ProposerConfig::new(vec![NodeId(1), NodeId(2), NodeId(3)])
}

fn per(bytes: usize, n: usize) -> f64 {
    bytes as f64 / n as f64
}

/// A replica that did not propose: its acceptor's states, as recovered from a store.
fn acceptor(n: usize, value: &[u8]) {
    let before = live();
    let replica = Replica::new(
        NodeId(2),
        1,
        config(),
        7,
        (0..n).map(|i| (key(i), voted(i, value))),
    );
    let total = live() - before;
    let (table, _) = replica.table_bytes();
    println!(
        "acceptor: {n} registers, {:.1} B/register: table {:.1} (entries of 128 B and the \
         index), the rest {:.1} (values too long or not plain to be kept in the entry, each an \
         Arc of a {} B register and its bytes)",
        per(total, n),
        per(table, n),
        per(total.saturating_sub(table), n),
        std::mem::size_of::<Register>(),
    );
}

/// The values alone, as an `AcceptorState` holds them (in a message, in the proposer's cache,
/// and in the acceptor's table when too long to be kept inside its entry).
fn values(n: usize, value: &[u8]) {
    let mut held = Vec::with_capacity(n);
    let before = live();
    held.extend((0..n).map(|i| voted(i, value).value));
    println!("values alone: {:.1} B/register", per(live() - before, n));
}

/// Three replicas, every write through the first, messages delivered at once: the tables of
/// the proposing replica and of another. (The values are shared between the replicas here,
/// through the messages, so only the tables are told apart.)
fn cluster(n: usize, value: &[u8]) {
    let mut replicas: Vec<Replica> = (1..=3)
        .map(|node| Replica::new(NodeId(node), 1, config(), u64::from(node), Vec::new()))
        .collect();
    let batch = 256;
    let mut commands = Vec::with_capacity(batch);
    let mut queue: Vec<(NodeId, Envelope)> = Vec::new();
    for start in (0..n).step_by(batch) {
        commands.extend((start..(start + batch).min(n)).map(|i| {
            let set = Command::Set(SetArgs {
                value: Bytes::copy_from_slice(value),
                condition: Condition::Always,
                get: false,
                expiry: Expiry::Clear,
            });
            (ClientTag(i as u64), key(i), set)
        }));
        replicas[0].handle_commands(0, &mut commands);
        queue.extend(take(&mut replicas[0], NodeId(1)));
        while !queue.is_empty() {
            for (from, envelope) in std::mem::take(&mut queue) {
                let to = &mut replicas[usize::from(envelope.to.0) - 1];
                to.handle_message(0, from, &envelope.message);
                let node = to.node();
                queue.extend(take(to, node));
            }
        }
    }
    for (i, replica) in replicas.iter().enumerate().take(2) {
        let (acceptor, proposer) = replica.table_bytes();
        println!(
            "replica {} ({}): acceptor table {} registers, {:.1} B/register; proposer table {} \
             registers, {:.1} MB",
            i + 1,
            if i == 0 { "proposing" } else { "not proposing" },
            replica.acceptor_registers(),
            per(acceptor, replica.acceptor_registers()),
            replica.proposer_registers(),
            proposer as f64 / 1e6,
        );
    }
}

/// A replica's output: its sends and the replies its persist batch released.
fn take(replica: &mut Replica, node: NodeId) -> Vec<(NodeId, Envelope)> {
    let output = replica.take_output();
    let Ok(released) = output.persist.commit(&mut Discard);
    output
        .sends
        .into_iter()
        .chain(released)
        .map(|envelope| (node, envelope))
        .collect()
}

fn main() {
    let mut args = std::env::args().skip(1);
    let part = args.next().unwrap_or_default();
    let n: usize = args
        .next()
        .map(|a| a.parse().expect("a count of registers"))
        .unwrap_or(1_000_000);
    let value_bytes: usize = args
        .next()
        .map(|a| a.parse().expect("a value size in bytes"))
        .unwrap_or(16);
    let value = vec![b'x'; value_bytes];
    match part.as_str() {
        "values" => values(n, &value),
        "acceptor" => acceptor(n, &value),
        "cluster" => cluster(n, &value),
        _ => {
            eprintln!("usage: memory values|acceptor|cluster [N] [VALUE_BYTES]");
            std::process::exit(2);
        }
    }
}
