//! Writers contending on one register over a perfect network: every command must complete.
//!
//! Regression: a proposer on the fast path raises the acceptors' `r_ack` by one round per write.
//! A proposer that had been rejected waited a backoff and then sent PAXOS_PREP with a round
//! computed from the rounds it had seen *before* the backoff, which the fast writer had long
//! passed: rejected again, a longer backoff, and so on until the request timed out with
//! "outcome unknown" (11 of 6,000 increments in `demo --clients 3 --keys 1 --writes 1.0
//! --commands 2000`), while the fast writer kept the register to itself.
use logless_rmw::ids::Key;
use logless_sim::cluster::{Cluster, Faults, SimConfig};

#[test]
fn writers_contending_on_one_key_without_faults_all_complete() {
    const CLIENTS: u32 = 3;
    const COMMANDS: u32 = 2_000;
    for seed in 1..=3 {
        let mut config = SimConfig::new(3, seed);
        config.faults = Faults::none();
        config.workload.clients = CLIENTS;
        config.workload.commands_per_client = COMMANDS;
        config.workload.keys = 1;
        config.workload.write_fraction = 1.0;
        let request_timeout_us = config.proposer.request_timeout_ms * 1000;
        let mut cluster = Cluster::new(config);
        let stats = cluster.run(0, 60_000_000).clone();
        println!("seed {seed}:\n{stats}");
        assert_eq!(
            stats.not_applied + stats.unknown,
            0,
            "seed {seed}: commands without a result on a perfect network\n{stats}"
        );
        assert_eq!(
            stats.acknowledged,
            u64::from(CLIENTS * COMMANDS),
            "seed {seed}"
        );
        let max_us = stats.latency_us.max();
        assert!(
            max_us < request_timeout_us,
            "seed {seed}: a command took {max_us} µs, the request timeout is {request_timeout_us} µs"
        );
        let key = Key::new("k0");
        let values = cluster
            .read_all(std::slice::from_ref(&key))
            .expect("final read");
        assert_eq!(
            values.get(&key).copied(),
            Some(i64::from(CLIENTS * COMMANDS)),
            "seed {seed}: every increment applied exactly once"
        );
    }
}
