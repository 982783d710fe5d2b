//! Explores the model of the log engine (`logless_model::multipaxos`) with the settings given
//! on the command line and prints the state count and what it found:
//! `cargo run --release -p logless-model --example explore_multipaxos -- [clients=N]
//! [retries=N] [instances=N] [views=N] [crashes=N] [catch_ups=N] [mid_step] [nogc] [epoch] [threads=N] [bfs] [depth=N]
//! [bug=accept_before_persist|skip_noop_fill|no_dedup|stale_proposals|ignore_epochs]`
//! (`epoch`: crashed replicas recover with EpochSS).
use std::time::Instant;

use logless_model::explore::report;
use logless_model::multipaxos::MultiPaxosConfig;
use logless_multipaxos::config::Recovery;
use stateright::{Checker, Model};

fn main() {
    let mut config = MultiPaxosConfig::new(2);
    let (mut threads, mut bfs, mut depth) = (1, false, None);
    for arg in std::env::args().skip(1) {
        let (name, value) = arg.split_once('=').unwrap_or((&arg, ""));
        let number = || value.parse::<u64>().expect("a number");
        match name {
            "clients" => config.clients = number() as usize,
            "retries" => config.retries_max = number() as u8,
            "instances" => config.instances_max = number(),
            "views" => config.views_max = number(),
            "crashes" => config.crashes_max = number() as u8,
            "catch_ups" => config.catch_ups_max = number(),
            "mid_step" => config.crash_mid_step = true,
            "nogc" => config.collect_dead = false,
            "epoch" => config.recovery = Recovery::Epoch,
            "threads" => threads = number() as usize,
            "bfs" => bfs = true,
            "depth" => depth = Some(number() as usize),
            "bug" => match value {
                "accept_before_persist" => config.bugs.accept_before_persist = true,
                "skip_noop_fill" => config.bugs.skip_noop_fill = true,
                "no_dedup" => config.bugs.no_dedup = true,
                "stale_proposals" => config.bugs.accept_stale_proposals = true,
                "ignore_epochs" => config.bugs.ignore_epochs = true,
                _ => panic!("unknown bug {value}"),
            },
            _ => panic!("unknown argument {arg}"),
        }
    }
    println!("{config:?}");
    let started = Instant::now();
    let mut builder = config.into_model().checker().threads(threads);
    if let Some(depth) = depth {
        builder = builder.target_max_depth(depth);
    }
    if bfs {
        report(builder.spawn_bfs().join(), started);
    } else {
        report(builder.spawn_dfs().join(), started);
    }
}
