//! Replays one seed of a many-seed test and prints the history of one key.
//!
//! * `cargo run --release -p logless-sim --example replay -- SEED KEY` — the core replicas'
//!   faulty schedule (`tests/seeds.rs`);
//! * `cargo run --release -p logless-sim --example replay -- nodes SEED KEY` — the whole-node
//!   simulation (`tests/nodes.rs`), which also prints the run's report.
use logless_rmw::ids::Key;
use logless_sim::cluster::{Cluster, SimConfig};
use logless_sim::linearizability::check;
use logless_sim::nodes::{NodeCluster, NodeSimConfig};

fn main() {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    let nodes = args.first().is_some_and(|a| a == "nodes");
    if nodes {
        args.remove(0);
    }
    let seed: u64 = args.first().and_then(|s| s.parse().ok()).unwrap_or(0);
    let default_key = if nodes { "k0.0" } else { "k0" };
    let key = Key::new(args.get(1).cloned().unwrap_or_else(|| default_key.into()));
    let history = if nodes {
        let config = NodeSimConfig::for_seed(seed);
        println!("{config:?}");
        let mut cluster = NodeCluster::new(config);
        let report = cluster.run().clone();
        println!("{report}");
        for failure in &report.failures {
            println!("failure: {failure}");
        }
        cluster.history().clone()
    } else {
        let config = SimConfig::for_seed(seed);
        println!("{config:?}");
        let mut cluster = Cluster::new(config);
        let stats = cluster.run(3_000_000, 60_000_000).clone();
        println!("{stats}");
        cluster.history().clone()
    };
    print!("{}", history.describe_key(&key));
    println!("{:?}", check(&history, 2_000_000).violations);
}
