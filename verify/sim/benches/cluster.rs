//! Register operations per second of the in-process cluster on one core: 3 replicas, 10,000
//! registers, 5% and 50% writes.
//!
//! * `direct_cluster`: replicas hand messages straight to each other ([`DirectCluster`]), so
//!   what is measured is the protocol's CPU cost (proposer, acceptor, message construction,
//!   batching); with 100 and 1,000 clients (a command each in flight, nearly always on
//!   different registers) and with 100,000 (about ten per register, which the proposer
//!   batches); and with 100 and 1,000 clients whose commands go to their register's home
//!   replica, so that every register has one proposer and its writes take the fast path
//!   (`10k_registers_home`). One core does most per operation at about a hundred operations
//!   in flight: with a thousand, each turn's messages and operations outgrow its cache;
//! * `in_process_cluster`: the simulated cluster without faults or delays, which adds the
//!   simulator's event queue and per-message bookkeeping.
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use logless_sim::cluster::{Cluster, Faults, SimConfig};
use logless_sim::direct::{DirectCluster, DirectConfig, Routing};

const CLIENTS: u32 = 1_000;
const COMMANDS_PER_CLIENT: u32 = 50;

fn config(write_fraction: f64) -> SimConfig {
    let mut config = SimConfig::new(3, 42);
    config.faults = Faults::none();
    config.faults.delay_us = (0, 0);
    config.flush_us = 0;
    config.record_history = false;
    config.workload.clients = CLIENTS;
    config.workload.commands_per_client = COMMANDS_PER_CLIENT;
    config.workload.keys = 10_000;
    config.workload.write_fraction = write_fraction;
    config.workload.think_us = 0;
    config
}

fn cluster_throughput(c: &mut Criterion) {
    let mut group = c.benchmark_group("in_process_cluster");
    group.sample_size(10);
    group.throughput(Throughput::Elements(u64::from(
        CLIENTS * COMMANDS_PER_CLIENT,
    )));
    for writes in [0.05, 0.5] {
        group.bench_with_input(
            BenchmarkId::new(
                "10k_registers_writes",
                format!("{}pct", (writes * 100.0) as u32),
            ),
            &writes,
            |b, &writes| {
                b.iter(|| {
                    let mut cluster = Cluster::new(config(writes));
                    let stats = cluster.run(0, u64::MAX);
                    assert_eq!(stats.acknowledged, u64::from(CLIENTS * COMMANDS_PER_CLIENT));
                })
            },
        );
    }
    group.finish();
}

/// Commands answered per measured run of the direct cluster.
const DIRECT_OPERATIONS: u64 = 200_000;

fn direct_cluster_throughput(c: &mut Criterion) {
    let mut group = c.benchmark_group("direct_cluster");
    group.sample_size(10);
    // (routing, thrifty writes, group name)
    let any = (Routing::AnyReplica, false, "10k_registers");
    let home = (Routing::HomeReplica, false, "10k_registers_home");
    let home_thrifty = (Routing::HomeReplica, true, "10k_registers_home_thrifty");
    let cases = [
        (100, any),
        (100, home),
        (100, home_thrifty),
        (1_000, any),
        (1_000, home),
        (1_000, home_thrifty),
        (100_000, any),
    ];
    for (clients, (routing, thrifty_writes, group_name)) in cases {
        for writes in [0.05, 0.5] {
            let config = DirectConfig {
                replicas: 3,
                keys: 10_000,
                routing,
                thrifty_writes,
                clients,
                write_fraction: writes,
                seed: 42,
            };
            // Warm up the registers (the first command on each runs phase 1) outside the timing:
            // ten commands per register or per client, whichever is more.
            let warm_up = u64::from(clients.max(config.keys)) * 10;
            let mut cluster = DirectCluster::new(config);
            cluster.run(warm_up);
            group.throughput(Throughput::Elements(DIRECT_OPERATIONS));
            let name = format!("{clients}_clients_{}pct_writes", (writes * 100.0) as u32);
            group.bench_function(BenchmarkId::new(group_name, name), |b| {
                // A run ends with the turn in which the count is reached, so it may answer a
                // few more: the time is scaled to exactly DIRECT_OPERATIONS.
                b.iter_custom(|iterations| {
                    let mut total = std::time::Duration::ZERO;
                    for _ in 0..iterations {
                        let start = std::time::Instant::now();
                        let report = cluster.run(DIRECT_OPERATIONS);
                        let elapsed = start.elapsed();
                        assert_eq!(report.errors, 0);
                        total +=
                            elapsed.mul_f64(DIRECT_OPERATIONS as f64 / report.operations as f64);
                    }
                    total
                })
            });
        }
    }
    group.finish();
}

criterion_group!(benches, direct_cluster_throughput, cluster_throughput);
criterion_main!(benches);
