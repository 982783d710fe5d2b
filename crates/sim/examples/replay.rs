//! Replays one seed of the faulty schedule and prints the history of one key:
//! `cargo run --release -p logless-sim --example replay -- SEED KEY`.
use logless_core::ids::Key;
use logless_sim::cluster::{Cluster, Faults, SimConfig};
use logless_sim::history::{check, Outcome};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let seed: u64 = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(0);
    let key = Key::new(args.get(2).cloned().unwrap_or_else(|| "k0".into()));
    let mut config = SimConfig::new(3, seed);
    config.faults = Faults::all();
    let mut cluster = Cluster::new(config);
    let stats = cluster.run(3_000_000, 60_000_000).clone();
    println!("{stats}");
    let mut ops: Vec<_> = cluster
        .history()
        .operations
        .iter()
        .filter(|o| o.key == key)
        .collect();
    ops.sort_by_key(|o| o.call_us);
    for o in ops {
        let ret = if o.return_us == u64::MAX {
            "∞".to_string()
        } else {
            o.return_us.to_string()
        };
        let out = match &o.outcome {
            Outcome::Ok(r) => format!("{r:?}"),
            Outcome::Unknown => "unknown".into(),
            Outcome::NotApplied => "not applied".into(),
        };
        println!(
            "c{:<3} {:>9} {:>9}  {:?} -> {}",
            o.client, o.call_us, ret, o.command, out
        );
    }
    println!("{:?}", check(cluster.history(), 2_000_000).violations);
}
