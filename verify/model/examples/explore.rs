//! Explores the model with the settings given on the command line and prints the state count:
//! `cargo run --release -p logless-model --example explore -- [clients=incr,incr+get+del]
//! [breaks=N] [crashes=N] [timeouts] [queued] [retries=N] [datagrams] [amnesia] [broadcast]
//! [thrifty_writes] [drops=N] [removals=N] [threads=N] [bfs] [nogc]
//! [bug=quorum|learned|req_prev|remove_early|no_fence]`.
use std::time::Instant;

use logless_model::explore::report;
use logless_model::{CounterOp, LocalDelivery, ModelConfig};
use stateright::{Checker, Model};

fn main() {
    let mut config = ModelConfig::new(
        vec![vec![CounterOp::Incr], vec![CounterOp::Incr, CounterOp::Get]],
        1,
    );
    let (mut threads, mut bfs) = (1, false);
    for arg in std::env::args().skip(1) {
        let (name, value) = arg.split_once('=').unwrap_or((&arg, ""));
        match name {
            "clients" => {
                config.clients = value
                    .split(',')
                    .map(|ops| {
                        ops.split('+')
                            .map(|op| match op {
                                "incr" => CounterOp::Incr,
                                "get" => CounterOp::Get,
                                "del" => CounterOp::Del,
                                _ => panic!("unknown op {op}"),
                            })
                            .collect()
                    })
                    .collect()
            }
            "breaks" => config.faults.breaks_max = value.parse().expect("a number"),
            "crashes" => config.faults.crashes_max = value.parse().expect("a number"),
            "timeouts" => config.faults.timeouts = true,
            "drops" => config.faults.drops_max = value.parse().expect("a number"),
            "removals" => config.faults.removals_max = value.parse().expect("a number"),
            "nogc" => config.collect_dead = false,
            "broadcast" => config.thrifty_reads = false,
            "thrifty_writes" => config.thrifty_writes = true,
            "queued" => config.local = LocalDelivery::Queued,
            "retries" => config.retries_max = value.parse().expect("a number"),
            "datagrams" => config.network = logless_model::Network::Datagrams,
            "amnesia" => config.crash_forgets_store = true,
            "threads" => threads = value.parse().expect("a number"),
            "bfs" => bfs = true,
            "bug" => match value {
                "quorum" => config.bugs.accept_inconsistent_quorum = true,
                "learned" => config.bugs.ignore_learned = true,
                "req_prev" => config.bugs.write_through_forgets_req_prev = true,
                "remove_early" => config.bugs.remove_before_all_hold_tombstone = true,
                "no_fence" => config.bugs.skip_removal_fence = true,
                _ => panic!("unknown bug {value}"),
            },
            _ => panic!("unknown argument {arg}"),
        }
    }
    println!("{config:?}");
    let started = Instant::now();
    let builder = config.into_model().checker().threads(threads);
    if bfs {
        report(builder.spawn_bfs().join(), started);
    } else {
        report(builder.spawn_dfs().join(), started);
    }
}
