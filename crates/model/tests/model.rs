//! Model checking the real replica code with stateright.
//!
//! * exhaustive: two clients (INCR; INCR then GET) on two replicas, links in order per
//!   connection (what Algorithm 3 assumes; a reordered or lost message shows up as a broken
//!   link, which the model also explores in the bounded run below), up to 2 attempts per
//!   proposer; the explored state count is pinned;
//! * each deliberate bug is found;
//! * bounded: an unordered, duplicating, lossy network with one crash, explored up to a state
//!   budget (not exhaustive: the full space does not fit the CI budget).
use logless_core::config::InjectedBugs;
use logless_model::{CounterOp, ModelConfig, NetworkKind};
use stateright::{Checker, HasDiscoveries, Model};

fn two_writers(bugs: InjectedBugs, attempts_max: u64) -> ModelConfig {
    ModelConfig {
        clients: vec![vec![CounterOp::Incr], vec![CounterOp::Incr]],
        network: NetworkKind::Ordered,
        lossy: false,
        crashes_max: 0,
        attempts_max,
        bugs,
    }
}

#[test]
fn exhaustively_linearizable_and_a_value_is_chosen() {
    let config = ModelConfig {
        clients: vec![vec![CounterOp::Incr], vec![CounterOp::Incr, CounterOp::Get]],
        ..two_writers(InjectedBugs::default(), 2)
    };
    let checker = config.into_model().checker().threads(2).spawn_bfs().join();
    checker.assert_properties();
    assert_eq!(checker.unique_state_count(), 360_279);
}

fn finds_violation(config: ModelConfig) -> usize {
    let checker = config
        .into_model()
        .checker()
        .threads(2)
        .finish_when(HasDiscoveries::AnyFailures)
        .spawn_bfs()
        .join();
    let path = checker
        .discovery("linearizable")
        .expect("the model checker must find the deliberate bug");
    path.into_actions().len()
}

#[test]
fn the_model_catches_an_inconsistent_quorum_taken_as_consistent() {
    let bugs = InjectedBugs {
        accept_inconsistent_quorum: true,
        ..InjectedBugs::default()
    };
    assert_eq!(finds_violation(two_writers(bugs, 3)), 12);
}

#[test]
fn the_model_catches_lost_learned_notifications() {
    let bugs = InjectedBugs {
        ignore_learned: true,
        ..InjectedBugs::default()
    };
    assert_eq!(finds_violation(two_writers(bugs, 4)), 17);
}

#[test]
fn bounded_run_on_a_lossy_duplicating_unordered_network_with_a_crash() {
    let config = ModelConfig {
        clients: vec![vec![CounterOp::Incr], vec![CounterOp::Incr, CounterOp::Get]],
        network: NetworkKind::UnorderedDuplicating,
        lossy: true,
        crashes_max: 1,
        attempts_max: 3,
        bugs: InjectedBugs::default(),
    };
    let checker = config
        .into_model()
        .checker()
        .threads(2)
        .target_state_count(300_000)
        .spawn_bfs()
        .join();
    assert!(checker.discovery("linearizable").is_none());
    assert!(
        checker.state_count() >= 300_000,
        "explored {}",
        checker.state_count()
    );
}
