//! The demo: the in-process cluster — real replicas on a simulated network, clock and
//! disk, driven by one seed — with a workload, optional faults, a table of what happened and a
//! linearizability verdict.
use std::process::ExitCode;
use std::time::Instant;

use logless_sim::cluster::{Cluster, Faults, SimConfig};
use logless_sim::linearizability::check;

/// Run the in-process simulated cluster with a workload and optional faults.
#[derive(clap::Parser)]
#[command(name = "demo")]
struct DemoArgs {
    /// Replicas (3, 5 or 7).
    #[arg(long, default_value_t = 3)]
    replicas: u16,
    /// Closed-loop clients.
    #[arg(long, default_value_t = 64)]
    clients: u32,
    /// Commands per client.
    #[arg(long, default_value_t = 500)]
    commands: u32,
    /// Registers (counters).
    #[arg(long, default_value_t = 1_000)]
    keys: u32,
    /// Fraction of writes (INCRBY); the rest are GETs.
    #[arg(long, default_value_t = 0.5)]
    writes: f64,
    /// Inject message loss, duplication, reordering, partitions and crashes.
    #[arg(long)]
    faults: bool,
    /// The seed of everything random.
    #[arg(long, default_value_t = 1)]
    seed: u64,
}

fn main() -> ExitCode {
    demo(&<DemoArgs as clap::Parser>::parse())
}

fn demo(args: &DemoArgs) -> ExitCode {
    if ![3, 5, 7].contains(&args.replicas) {
        eprintln!("error: --replicas must be 3, 5 or 7");
        return ExitCode::from(2);
    }
    if !(0.0..=1.0).contains(&args.writes) {
        eprintln!("error: --writes must be between 0 and 1");
        return ExitCode::from(2);
    }
    let mut config = SimConfig::new(args.replicas, args.seed);
    config.workload.clients = args.clients;
    config.workload.commands_per_client = args.commands;
    config.workload.keys = args.keys.max(1);
    config.workload.write_fraction = args.writes;
    config.faults = if args.faults {
        Faults::all()
    } else {
        Faults::none()
    };
    let fault_window_us = if args.faults { 2_000_000 } else { 0 };
    println!(
        "logless in-process cluster: {} replicas, {} clients × {} commands on {} keys, {:.0}% writes, faults {}, seed {}",
        args.replicas,
        args.clients,
        args.commands,
        config.workload.keys,
        args.writes * 100.0,
        if args.faults { "on" } else { "off" },
        args.seed
    );
    let started = Instant::now();
    let mut cluster = Cluster::new(config);
    let stats = cluster.run(fault_window_us, u64::MAX).clone();
    let elapsed = started.elapsed();
    println!("{stats}");
    println!(
        "{:<28}{:>14.0}",
        "wall-clock ops/s (1 core)",
        stats.acknowledged as f64 / elapsed.as_secs_f64()
    );
    let report = check(cluster.history(), 1_000_000);
    let verdict = if !report.violations.is_empty() {
        format!("NO: {:?}", report.violations)
    } else if !report.inconclusive.is_empty() {
        format!(
            "undecided on {} of {} keys (search budget)",
            report.inconclusive.len(),
            report.keys
        )
    } else {
        format!("yes ({} keys)", report.keys)
    };
    println!("{:<28}{:>14}", "linearizable (per key)", verdict);
    if report.violations.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
