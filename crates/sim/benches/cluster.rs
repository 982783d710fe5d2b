//! Register operations per second of the in-process cluster on one core, no network delays:
//! 3 replicas, 10,000 registers, 5% and 50% writes. What remains is the protocol's CPU cost
//! (proposer, acceptor, message handling, batching) plus the simulator's event queue.
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use logless_sim::cluster::{Cluster, Faults, SimConfig};

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

criterion_group!(benches, cluster_throughput);
criterion_main!(benches);
