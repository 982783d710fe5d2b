//! Nanoseconds per message on the acceptor's and the proposer's hot paths. The acceptor is
//! measured both as the pure transition the model checks (`on_message`, returning a step) and
//! as the replica runs it (deciding straight into a persist batch).
use std::hint::black_box;
use std::sync::Arc;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use logless_commands::command::Command;
use logless_commands::value::Register;
use logless_rmw::acceptor::{self, AcceptorState};
use logless_rmw::config::ProposerConfig;
use logless_rmw::ids::{AttemptId, ClientTag, Key, NodeId, ProposerId, ReqId, Round};
use logless_rmw::message::{Message, PrepareKind};
use logless_rmw::persist::PersistBatch;
use logless_rmw::placement::StageId;
use logless_rmw::replica::Replica;

fn attempt(seq: u64) -> AttemptId {
    AttemptId {
        proposer: ProposerId {
            node: NodeId(1),
            incarnation: 1,
        },
        seq,
    }
}

fn acceptor_paths(c: &mut Criterion) {
    let mut group = c.benchmark_group("acceptor");
    group.throughput(Throughput::Elements(1));
    let key = Key::new("key:000042");
    let state = AcceptorState {
        r_ack: Round {
            n: 7,
            id: attempt(3),
        },
        r_voted: Round {
            n: 6,
            id: attempt(3),
        },
        value: Arc::new(Register::default()),
        req: Some(ReqId::new(attempt(2)).unwrap()),
        req_prev: Some(ReqId::new(attempt(1)).unwrap()),
    };
    let prepare = Message::Prepare {
        key: key.clone(),
        kind: PrepareKind::Write,
        attempt: attempt(9),
        known_voted: state.r_voted,
        stage: StageId::NONE,
    };
    let read = Message::Prepare {
        key: key.clone(),
        kind: PrepareKind::Read,
        attempt: attempt(9),
        known_voted: state.r_voted,
        stage: StageId::NONE,
    };
    let vote = Message::Vote {
        key: key.clone(),
        round: Round {
            n: 8,
            id: attempt(3),
        },
        value: Arc::new(Register::default()),
        req_cur: Some(ReqId::new(attempt(10)).unwrap()),
        req_prev: Some(ReqId::new(attempt(2)).unwrap()),
        stage: StageId::NONE,
    };
    group.bench_function("prepare_write", |b| {
        b.iter(|| acceptor::on_message(black_box(&state), NodeId(2), black_box(&prepare)))
    });
    group.bench_function("prepare_read", |b| {
        b.iter(|| acceptor::on_message(black_box(&state), NodeId(2), black_box(&read)))
    });
    group.bench_function("vote", |b| {
        b.iter(|| acceptor::on_message(black_box(&state), NodeId(2), black_box(&vote)))
    });
    // The replica's path: the decision goes straight into its persist batch, which is taken
    // (and its contents dropped, as a runtime would after sending them) every 1,024 messages.
    for (name, message) in [
        ("prepare_write_into_batch", &prepare),
        ("prepare_read_into_batch", &read),
        ("vote_into_batch", &vote),
    ] {
        group.bench_function(name, |b| {
            let mut batch = PersistBatch::new();
            let mut added = 0;
            b.iter(|| {
                let changed = batch
                    .decide(&key, black_box(&state), NodeId(2), black_box(message))
                    .is_some();
                added += 1;
                if added == 1_024 {
                    added = 0;
                    drop(batch.take());
                }
                changed
            })
        });
    }
    group.finish();
}

/// One fast write through three replicas with messages handed over directly: command, 3 VOTE,
/// 3 VOTED, reply. Reported per write (9 protocol steps).
fn fast_write_cycle(c: &mut Criterion) {
    let nodes = [NodeId(1), NodeId(2), NodeId(3)];
    let mut replicas: Vec<Replica> = nodes
        .iter()
        .map(|n| Replica::new(*n, 1, ProposerConfig::new(nodes.to_vec()), 1, []))
        .collect();
    let key = Key::new("key:000042");
    let mut tag = 0;
    let mut write = |replicas: &mut Vec<Replica>| {
        tag += 1;
        replicas[0].handle_command(0, ClientTag(tag), key.clone(), Command::IncrBy(1));
        let mut inflight: Vec<(NodeId, logless_rmw::message::Envelope)> = Vec::new();
        let mut replied = false;
        let mut from = NodeId(1);
        loop {
            let out = replicas[usize::from(from.0 - 1)].take_output();
            replied |= !out.replies.is_empty();
            let Ok(released) = out.persist.commit(&mut NullStore);
            inflight.extend(out.sends.into_iter().chain(released).map(|e| (from, e)));
            let Some((sender, e)) = inflight.pop() else {
                break;
            };
            from = e.to;
            replicas[usize::from(from.0 - 1)].handle_message(0, sender, &e.message);
        }
        assert!(replied);
    };
    // Warm up into the fast path.
    write(&mut replicas);
    let mut group = c.benchmark_group("proposer");
    group.throughput(Throughput::Elements(1));
    group.bench_function("fast_write_3_replicas", |b| b.iter(|| write(&mut replicas)));
    group.finish();
}

struct NullStore;

impl logless_rmw::persist::AcceptorStore for NullStore {
    type Error = std::convert::Infallible;
    fn write(&mut self, _: &Key, _: &AcceptorState) -> Result<(), Self::Error> {
        Ok(())
    }
    fn flush(&mut self) -> Result<(), Self::Error> {
        Ok(())
    }
    fn write_round_floor(&mut self, _: logless_rmw::ids::Round) -> Result<(), Self::Error> {
        Ok(())
    }
    fn remove(&mut self, _: &Key) -> Result<(), Self::Error> {
        Ok(())
    }
}

criterion_group!(benches, acceptor_paths, fast_write_cycle);
criterion_main!(benches);
