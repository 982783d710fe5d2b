//! Whole nodes of the log engine in simulation (`logless_sim::log_nodes`): the node's log turn
//! core over its durable log on simulated directories, with network faults, leader kills,
//! crashes inside flushes, power failures with torn sectors, crashes of every node, partitions
//! and clock jumps; single-key histories checked per key, the counters' (transfers, MSET, MGET)
//! as one state, every key available again after the faults heal, every run replayable.
use logless_sim::log_nodes::{LogNodeCluster, LogNodeSimConfig, LogNodeSimReport};
use logless_storage::Durability;

/// Runs one configuration and checks its histories; `Err` says what went wrong.
fn run(config: LogNodeSimConfig) -> Result<LogNodeSimReport, String> {
    let seed = config.seed;
    let mut cluster = LogNodeCluster::new(config);
    let report = cluster.run().clone();
    if !report.failures.is_empty() {
        return Err(format!("seed {seed}: {:?}\n{report}", report.failures));
    }
    cluster
        .check()
        .map_err(|e| format!("seed {seed}: {e}\n{report}"))?;
    Ok(report)
}

#[test]
fn a_perfect_network_acknowledges_everything() {
    for durability in [Durability::Sync, Durability::Mmap] {
        let config = LogNodeSimConfig::new(3, 7, durability);
        let commands = u64::from(config.clients * config.commands_per_client);
        let liveness = 3 * (2 + 2 * u64::from(config.registers));
        let report = run(config).unwrap();
        println!("{report}");
        assert_eq!(report.acknowledged, commands + liveness, "{report}");
        assert_eq!(report.unknown + report.not_applied, 0, "{report}");
        assert!(report.multi_key_operations > 0, "{report}");
    }
}

#[test]
fn smoke_faulty() {
    let mut total = LogNodeSimReport::default();
    let start = std::time::Instant::now();
    for seed in 0..20 {
        let report = run(LogNodeSimConfig::for_seed(seed)).unwrap();
        total.add(&report);
    }
    println!("{:?} {total}", start.elapsed());
}
