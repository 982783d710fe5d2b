//! Explores the model with the settings given on the command line and prints the state count:
//! `cargo run --release -p logless-model --example explore -- CLIENTS LOSSY CRASHES ATTEMPTS`.
use logless_core::config::InjectedBugs;
use logless_model::{CounterOp, ModelConfig};
use stateright::report::WriteReporter;
use stateright::{Checker, Model};

fn main() {
    let args: Vec<u64> = std::env::args()
        .skip(1)
        .map(|a| a.parse().expect("a number"))
        .collect();
    let config = ModelConfig {
        clients: match args.first().copied().unwrap_or(2) {
            1 => vec![vec![CounterOp::Incr], vec![CounterOp::Incr]],
            2 => vec![vec![CounterOp::Incr], vec![CounterOp::Incr, CounterOp::Get]],
            _ => vec![
                vec![CounterOp::Incr, CounterOp::Get],
                vec![CounterOp::Incr, CounterOp::Get],
            ],
        },
        lossy: args.get(1).copied().unwrap_or(1) == 1,
        network: match args.get(4).copied().unwrap_or(0) {
            0 => logless_model::NetworkKind::Ordered,
            1 => logless_model::NetworkKind::Unordered,
            _ => logless_model::NetworkKind::UnorderedDuplicating,
        },
        crashes_max: args.get(2).copied().unwrap_or(1) as usize,
        attempts_max: args.get(3).copied().unwrap_or(4),
        bugs: InjectedBugs::default(),
    };
    println!("{config:?}");
    config
        .into_model()
        .checker()
        .threads(2)
        .spawn_bfs()
        .report(&mut WriteReporter::new(&mut std::io::stdout()));
}
