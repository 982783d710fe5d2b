//! Model checking the log engine's real replica code (`logless_model::multipaxos`; its network,
//! time and bounds are in the module docs).
use logless_model::multipaxos::{MultiPaxosConfig, MultiPaxosModel};
use stateright::{Checker, HasDiscoveries, Model};

/// The length of the shortest path to a state that breaks `property`.
fn finds_violation(config: MultiPaxosConfig, property: &'static str) -> usize {
    let checker = config
        .into_model()
        .checker()
        .finish_when(HasDiscoveries::AnyOf([property].into()))
        .spawn_bfs()
        .join();
    eprintln!("{:?}", checker.discoveries().keys().collect::<Vec<_>>());
    let path = checker
        .discovery(property)
        .unwrap_or_else(|| panic!("the model checker must break {property:?}"));
    let actions = path.into_actions();
    for action in &actions {
        eprintln!("  {action:?}");
    }
    actions.len()
}

#[test]
fn the_model_catches_an_accept_sent_before_its_vote_is_written() {
    let mut config = MultiPaxosConfig::new(1);
    config.bugs.accept_before_persist = true;
    assert_eq!(finds_violation(config, "persisted before sent"), 13);
}

#[test]
fn the_model_catches_gaps_left_empty_by_a_view_change() {
    let mut config = MultiPaxosConfig::new(2);
    config.views_max = 1;
    config.bugs.skip_noop_fill = true;
    assert_eq!(finds_violation(config, "no gap"), 9);
}

#[test]
fn the_model_catches_a_request_agreed_twice_and_applied_twice() {
    let mut config = MultiPaxosConfig::new(1);
    config.retries_max = 1;
    config.bugs.no_dedup = true;
    assert_eq!(finds_violation(config, "applied once"), 9);
}

#[test]
fn the_model_catches_a_proposal_of_a_stale_view_accepted() {
    let mut config = MultiPaxosConfig::new(1);
    config.views_max = 1;
    config.bugs.accept_stale_proposals = true;
    assert_eq!(finds_violation(config, "agreement"), 10);
}

#[allow(dead_code)]
fn unused(_: MultiPaxosModel) {}
