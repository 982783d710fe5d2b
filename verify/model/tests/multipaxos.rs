//! Model checking the log engine's real replica code (`logless_model::multipaxos`; its network,
//! time, bounds and reductions are in the module docs).
//!
//! * exhaustive: a view change (the first leader suspected), a crash and two catch-up queries,
//!   with one request; one request retried once (at any replica), so that it may be decided in
//!   two instances;
//! * a view change, a request retried once and a crash in two instances: every behaviour of up
//!   to [`VIEW_CHANGE_DEPTH`] steps in CI, a step more by hand (the whole space is too large for every CI run:
//!   `examples/explore_multipaxos.rs` explores it by hand, see `verify/model/README.md`);
//! * EpochSS, exhaustive: one request and a crash of any replica, which recovers from its peers;
//! * a crash in the middle of a step reaches no state a crash between steps does not;
//! * each deliberate bug of the engine is found: an Accept sent before its vote is written (and,
//!   with a crash in the middle of that step, the disagreement it leads to), gaps left empty by
//!   a view change, a request agreed twice and applied twice, a stale view's proposal taken.
//!
//! The state counts are pinned: a change of the engine or the model that changes them must say
//! why, here and in the README. CI runs these in release (about a minute on this machine).

use logless_model::multipaxos::{MultiPaxosConfig, MultiPaxosModel};
use logless_multipaxos::config::Recovery;
use stateright::{Checker, HasDiscoveries, Model};

/// How many steps the view-change exploration goes in CI, and its state count.
const VIEW_CHANGE_DEPTH: (usize, usize) = (13, 318_119);

/// The same a step deeper, by hand: `LOGLESS_MODEL_VIEW_CHANGE_DEPTH=14 cargo test --profile
/// tests -p logless-model --test multipaxos -- view_change` (it was CI's depth until CI's time
/// ran short).
const VIEW_CHANGE_DEPTH_FULL: (usize, usize) = (14, 726_526);

/// The view-change exploration's depth (`LOGLESS_MODEL_VIEW_CHANGE_DEPTH`, else CI's) and its
/// pinned state count, if it has one.
fn view_change_depth() -> (usize, Option<usize>) {
    let depth = std::env::var("LOGLESS_MODEL_VIEW_CHANGE_DEPTH")
        .ok()
        .and_then(|d| d.parse().ok())
        .unwrap_or(VIEW_CHANGE_DEPTH.0);
    let pinned = [VIEW_CHANGE_DEPTH, VIEW_CHANGE_DEPTH_FULL]
        .into_iter()
        .find(|&(d, _)| d == depth)
        .map(|(_, count)| count);
    (depth, pinned)
}

/// Every state of `model`, on two threads (the count of a whole space does not depend on the
/// order).
fn explore(model: MultiPaxosModel) -> impl Checker<MultiPaxosModel> {
    model.checker().threads(2).spawn_bfs().join()
}

#[test]
fn exhaustive_with_a_view_change_and_a_crash() {
    let mut config = MultiPaxosConfig::new(1);
    config.views_max = 1;
    config.crashes_max = 1;
    config.instances_max = 1;
    config.catch_ups_max = 2;
    let checker = explore(config.into_model());
    checker.assert_properties();
    assert_eq!(checker.unique_state_count(), 86_901);
}

#[test]
fn exhaustive_with_a_request_retried() {
    let mut config = MultiPaxosConfig::new(1);
    config.retries_max = 1;
    config.instances_max = 2;
    let checker = explore(config.into_model());
    checker.assert_properties();
    assert_eq!(checker.unique_state_count(), 216_985);
}

/// The view change with a request retried and a crash, in two instances, every behaviour of up
/// to [`view_change_depth`] steps: breadth first on one thread, so that the count is the same on
/// every run.
#[test]
fn a_view_change_with_a_retry_and_a_crash_up_to_a_depth() {
    let mut config = MultiPaxosConfig::new(1);
    config.views_max = 1;
    config.retries_max = 1;
    config.crashes_max = 1;
    config.instances_max = 2;
    let (depth, pinned) = view_change_depth();
    let checker = config
        .into_model()
        .checker()
        .target_max_depth(depth)
        .spawn_bfs()
        .join();
    checker.assert_properties();
    eprintln!("depth {depth}: {} states", checker.unique_state_count());
    if let Some(count) = pinned {
        assert_eq!(checker.unique_state_count(), count);
    }
}

/// Without a deliberate bug a replica lets nothing out before its records are written, so a
/// crash in the middle of a step is a crash before it: the same states.
#[test]
fn a_crash_in_the_middle_of_a_step_reaches_no_other_state() {
    let mut config = MultiPaxosConfig::new(1);
    config.crashes_max = 1;
    let between = explore(config.clone().into_model()).unique_state_count();
    config.crash_mid_step = true;
    let checker = explore(config.into_model());
    checker.assert_properties();
    assert_eq!(checker.unique_state_count(), between);
}

/// The length of the path the checker reports to a state that breaks `property` (breadth
/// first on one thread: the same path on every run).
fn finds_violation(config: MultiPaxosConfig, property: &'static str) -> usize {
    let checker = config
        .into_model()
        .checker()
        .finish_when(HasDiscoveries::AnyOf([property].into()))
        .spawn_bfs()
        .join();
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

/// The same bug with a crash in the middle of the step: the crash loses the vote whose Accept
/// already left, the old leader decides on that Accept, and the new leader, which never saw the
/// vote, decides another request there.
#[test]
fn an_accept_sent_before_its_vote_is_written_breaks_agreement_after_a_crash() {
    let mut config = MultiPaxosConfig::new(2);
    config.views_max = 1;
    config.crashes_max = 1;
    config.crash_mid_step = true;
    config.instances_max = 1;
    config.bugs.accept_before_persist = true;
    assert_eq!(finds_violation(config, "agreement"), 11);
}

/// EpochSS (seed 002 §V-C), exhaustive: one request, one crash of any replica at any point,
/// which keeps only the epoch; the replica recovers from its peers (a majority of the others,
/// the leader among them) and decides and executes again. No view change: the space without
/// dead messages to collect (see `dead`) is too large for a debug run with one (the Fig. 2
/// divergence is checked by the engine's scenario test).
#[test]
fn exhaustive_epoch_ss_with_a_crash() {
    let mut config = MultiPaxosConfig::new(1);
    config.recovery = Recovery::Epoch;
    config.crashes_max = 1;
    config.instances_max = 1;
    let checker = explore(config.into_model());
    checker.assert_properties();
    assert_eq!(checker.unique_state_count(), 146_135);
}
