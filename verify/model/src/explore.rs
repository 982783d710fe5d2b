//! What the command-line explorers (`examples/`) print once a checker is done.
use std::time::Instant;

use stateright::{Checker, Model};

/// Prints the state counts, the depth, the time since `started` and every discovery with its
/// length (and, with `TRACE` set in the environment, its steps).
pub fn report<M: Model>(checker: impl Checker<M>, started: Instant)
where
    M::State: Clone + PartialEq,
    M::Action: Clone + PartialEq + std::fmt::Debug,
{
    println!(
        "unique states {}, generated {}, max depth {}, {:.1} s",
        checker.unique_state_count(),
        checker.state_count(),
        checker.max_depth(),
        started.elapsed().as_secs_f64()
    );
    for (name, path) in checker.discoveries() {
        let actions = path.into_actions();
        println!("discovery {name}: {} steps", actions.len());
        if std::env::var_os("TRACE").is_some() {
            for action in actions {
                println!("  {action:?}");
            }
        }
    }
}
