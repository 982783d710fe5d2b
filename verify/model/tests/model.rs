//! Model checking the real replica code with stateright (the reductions and why they are sound
//! are in the crate docs).
//!
//! * exhaustive: three replicas; an increment and a read from two clients, under every fault
//!   at once (a broken connection that loses messages, a crash that keeps the store, a request
//!   time-out) and one retry, with reads that ask every acceptor; the same with thrifty reads
//!   (a quorum first, the default), a break and a crash but no retry or time-out; two
//!   increments and a read without faults; the state counts are pinned. (Thrifty reads under
//!   all three faults with one retry are 19,976,950 states: too many for every CI run;
//!   `examples/explore.rs` checks them by hand);
//! * the network of connections shows the replicas everything a lossy, duplicating, reordering
//!   network under the link layer does; removing dead messages loses nothing; messages to self
//!   queued as the node queues them are checked exhaustively in a smaller configuration;
//! * fast writes: two increments of one client and a read of another, with fast writes voted
//!   with a quorum first (thrifty) and a break, exhaustively. (With a crash instead of the break
//!   it is 6,923,777 states, about three minutes on one 2.6 GHz core, 5,694,601 with fast
//!   writes voted with everyone, and 55,775,908 with the crash and the break (27 minutes): more
//!   than the CI budget leaves, so `examples/explore.rs` with `clients=incr+incr,get
//!   [thrifty_writes] [breaks=1] crashes=1 retries=0` checks them by hand);
//! * dropping an idle register (the proposer's bound of registers) at any point, with fast
//!   writes and a break, exhaustively;
//! * each deliberate bug is found, also after a thrifty fast write, and so is a replica that
//!   forgets its store in a crash;
//! * removal of dead registers: an increment, a delete and an increment of one client with a
//!   removal at any point, under a break and a crash, exhaustively (about 120 s on 2 shared
//!   cores); removing before every acceptor holds the tombstone is found; removing without the
//!   round floor needs two clients and two retries, an ignored (long) test. Longer runs by hand: `cargo run --release -p logless-model --example
//!   explore -- clients=incr+del,get removals=1 breaks=1 crashes=1 retries=0 threads=2` (a
//!   second client reading; more than 5 minutes) and `clients=incr+del+incr removals=2
//!   breaks=1 crashes=1 retries=1`.
//! * a ring: four replicas, the register on three of them, an increment through the fourth
//!   (a proposer that is no acceptor) and a read through an acceptor, under a break,
//!   exhaustively.
//! * a ring changing (docs/ring.md §4): four replicas, the change removing the register's first
//!   acceptor; an increment through the leaving acceptor and a read through the joining one,
//!   exhaustively, starting with proposers of adjacent stages side by side (`Stable(e)` with
//!   `Joint(e+1)`, `Joint(e+1)` with `Stable(e+1)`) and with replicas moving on to the next
//!   stage at any point of the run under the stage fence; the whole change during a run,
//!   every replica starting in `Stable(e)`, with a read through a shared acceptor as the sync
//!   (an ignored test: about 160 s);
//!   both mutations of issue 28 are found: a change that skips the joint stage (the old and the
//!   new set both decide) and a change applied without its fence (acceptors decide on messages
//!   of another stage, so a straggler of `Stable(e)` decides beside `Stable(e+1)`). A joining
//!   replica answers nothing about the register until it raised its round floor above the old
//!   acceptors' reports (`Action::RaiseFloor`, docs/ring.md §4 "Dead registers").
//! * dead registers across two changes: five replicas, the register deleted before the run at
//!   its three acceptors, two of them replaced one after the other, then an increment through
//!   the second new acceptor and a read through the one that stays, exhaustively; without the
//!   floor (`ignore_gained_floor`), with an increment through the staying one and a retry, the
//!   two increments both return 1.
use logless_model::{
    CounterOp, Faults, LocalDelivery, ModelConfig, Network, RingChange, RingStage,
};
use logless_rmw::config::InjectedBugs;
use stateright::{Checker, HasDiscoveries, Model};

use CounterOp::{Del, Get, Incr};

fn explore(config: ModelConfig) -> impl Checker<logless_model::LoglessModel> {
    config.into_model().checker().threads(2).spawn_dfs().join()
}

/// The largest of these checks (about 40% of this file's time): by hand with
/// `cargo test --release -p logless-model --test model -- --ignored`; CI checks the same faults
/// with thrifty reads (below) and time-outs with retries in the smaller configurations.
#[test]
#[ignore = "long: run by hand with --ignored (CI's time)"]
fn exhaustive_under_a_break_a_crash_and_time_outs_reading_from_everyone() {
    let mut config = ModelConfig::new(vec![vec![Incr], vec![Get]], 1);
    config.faults = Faults {
        breaks_max: 1,
        crashes_max: 1,
        timeouts: true,
        drops_max: 0,
        removals_max: 0,
    };
    config.thrifty_reads = false;
    let checker = explore(config);
    checker.assert_properties();
    assert_eq!(checker.unique_state_count(), 7_624_566);
}

#[test]
fn exhaustive_with_thrifty_reads_under_a_break_and_a_crash() {
    let mut config = ModelConfig::new(vec![vec![Incr], vec![Get]], 0);
    config.faults.breaks_max = 1;
    config.faults.crashes_max = 1;
    let checker = explore(config);
    checker.assert_properties();
    assert_eq!(checker.unique_state_count(), 1_355_091);
}

#[test]
fn exhaustive_with_two_increments_and_a_read() {
    let config = ModelConfig::new(vec![vec![Incr], vec![Incr, Get]], 1);
    let checker = explore(config);
    checker.assert_properties();
    assert_eq!(checker.unique_state_count(), 1_303_591);
}

/// Two increments by one client: the second is a fast write (one round trip in the round its
/// acceptors pre-acknowledged), voted with a quorum only (the one the proposer's reads ask); a
/// read of another replica, which asks another quorum, may find the acceptor left out.
fn fast_writes() -> ModelConfig {
    let mut config = ModelConfig::new(vec![vec![Incr, Incr], vec![Get]], 0);
    config.thrifty_writes = true;
    config
}

/// By hand (`cargo test --profile tests -p logless-model --test model -- --ignored`): every
/// state of it is a state of the next test (which may drop an idle register, or not) and holds
/// the same properties there, so CI checks them there.
#[test]
#[ignore = "by hand: its states are a subset of the next test's, which CI runs"]
fn exhaustive_with_thrifty_fast_writes_under_a_break() {
    let mut config = fast_writes();
    config.faults.breaks_max = 1;
    let checker = explore(config);
    checker.assert_properties();
    assert_eq!(checker.unique_state_count(), 850_559);
}

/// The same with a proposer dropping its idle register once, at any point (as it does beyond
/// its bound of registers): between the two increments it loses the fast path, and late
/// replies to the dropped register's attempts find nothing waiting.
#[test]
fn exhaustive_with_fast_writes_an_idle_register_dropped_and_a_break() {
    let mut config = fast_writes();
    config.faults.breaks_max = 1;
    config.faults.drops_max = 1;
    let checker = explore(config);
    checker.assert_properties();
    assert_eq!(checker.unique_state_count(), 1_604_564);
}

#[test]
fn exhaustive_with_messages_to_self_queued() {
    let mut config = ModelConfig::new(vec![vec![Incr], vec![Get]], 1);
    config.local = LocalDelivery::Queued;
    config.faults.breaks_max = 1;
    config.retries_max = 0;
    let checker = explore(config);
    checker.assert_properties();
    assert_eq!(checker.unique_state_count(), 993_307);
}

/// A small configuration for the cross-checks, which keep every state in memory.
fn small(network: Network) -> ModelConfig {
    let mut config = ModelConfig::new(vec![vec![Incr], vec![Get]], 0);
    config.network = network;
    config.faults.breaks_max = 1;
    config
}

/// Everything the replicas and clients can observe on a lossy, duplicating, reordering network
/// under the link layer, they can observe on connections. Connections show more: a break the
/// receiver hears of before (or without) a later message, as the node's TCP links report it.
#[test]
fn connections_show_the_replicas_whatever_datagrams_do() {
    let connections =
        logless_model::reachable_observations(&small(Network::Connections).into_model());
    let datagrams = logless_model::reachable_observations(&small(Network::Datagrams).into_model());
    assert!(datagrams.is_subset(&connections));
    assert_eq!((datagrams.len(), connections.len()), (1_542, 5_087));
}

#[test]
fn removing_dead_messages_loses_no_observation() {
    let mut without = small(Network::Connections);
    without.collect_dead = false;
    let with = logless_model::reachable_observations(&small(Network::Connections).into_model());
    let without = logless_model::reachable_observations(&without.into_model());
    assert_eq!(with.len(), without.len());
    assert!(with == without);
}

/// The length of the shortest counterexample the checker finds.
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

fn with_bugs(clients: Vec<Vec<CounterOp>>, retries: u64, bugs: InjectedBugs) -> ModelConfig {
    let mut config = ModelConfig::new(clients, retries);
    config.bugs = bugs;
    config
}

#[test]
fn the_model_catches_an_inconsistent_quorum_taken_as_consistent() {
    let bugs = InjectedBugs {
        accept_inconsistent_quorum: true,
        ..InjectedBugs::default()
    };
    let config = with_bugs(vec![vec![Incr], vec![Incr]], 1, bugs);
    assert_eq!(finds_violation(config), 10);
}

#[test]
fn the_model_catches_an_inconsistent_quorum_taken_as_consistent_after_a_thrifty_fast_write() {
    let mut config = fast_writes();
    config.bugs.accept_inconsistent_quorum = true;
    assert_eq!(finds_violation(config), 8);
}

#[test]
fn the_model_catches_lost_learned_notifications() {
    let bugs = InjectedBugs {
        ignore_learned: true,
        ..InjectedBugs::default()
    };
    let config = with_bugs(vec![vec![Incr], vec![Incr]], 2, bugs);
    assert_eq!(finds_violation(config), 10);
}

/// Without retries: the shortest counterexample needs none (the same 11 steps as with one
/// retry, in a third of the time: 8 s against 25 s on 2 loaded cores).
#[test]
fn the_model_catches_a_replica_that_forgets_its_store_in_a_crash() {
    let mut config = ModelConfig::new(vec![vec![Incr], vec![Get]], 0);
    config.faults.crashes_max = 1;
    config.crash_forgets_store = true;
    assert_eq!(finds_violation(config), 11);
}

// ----- removing dead registers (docs/removal.md) -----

/// One client increments, deletes and increments again through replica 0, which may remove
/// the dead register at any point: the last increment must find the key absent (1), whatever
/// the removal left where.
fn removal(retries: u64) -> ModelConfig {
    let mut config = ModelConfig::new(vec![vec![Incr, Del, Incr]], retries);
    config.faults.removals_max = 1;
    config
}

/// A removal at any point under a break, and under a crash, each exhaustively in every CI run;
/// both at once (5.5 M states, about half of this file's time) by hand:
/// `cargo test --release -p logless-model --test model -- --ignored`.
#[test]
fn exhaustive_with_a_removal_at_any_point_under_a_break() {
    let mut config = removal(0);
    config.faults.breaks_max = 1;
    let checker = explore(config);
    checker.assert_properties();
    assert_eq!(checker.unique_state_count(), 42_013);
}

#[test]
fn exhaustive_with_a_removal_at_any_point_under_a_crash() {
    let mut config = removal(0);
    config.faults.crashes_max = 1;
    let checker = explore(config);
    checker.assert_properties();
    assert_eq!(checker.unique_state_count(), 556_000);
}

#[test]
#[ignore = "long: run by hand with --ignored (CI's time); CI checks the break and the crash apart"]
fn exhaustive_with_a_removal_at_any_point_under_a_break_and_a_crash() {
    let mut config = removal(0);
    config.faults.breaks_max = 1;
    config.faults.crashes_max = 1;
    let checker = explore(config);
    checker.assert_properties();
    assert_eq!(checker.unique_state_count(), 5_511_379);
}

/// Removing once a quorum holds the tombstone: the break loses the delete's VOTE to the third
/// acceptor, whose older value the last increment then writes through.
#[test]
fn the_model_catches_a_removal_before_every_acceptor_holds_the_tombstone() {
    let mut config = removal(1);
    config.faults.breaks_max = 1;
    config.bugs.remove_before_all_hold_tombstone = true;
    assert_eq!(finds_violation(config), 26);
}

/// Forgetting without the round floor: another replica's increment, voted by its own acceptor
/// and delayed to the others, is written through by the delete (two retries); once the
/// register is removed, the delayed VOTEs of that older round bring the deleted value back at
/// two acceptors, and the next increment builds on it. Too large for every CI run (a
/// breadth-first search runs out of memory); the scenario test
/// `a_removal_without_the_fence_lets_a_delayed_vote_resurrect_a_value` catches the same bug.
/// Run by hand: `cargo test --release -p logless-model --test model -- --ignored`.
#[test]
#[ignore = "long: a depth-first search of two clients with two retries"]
fn the_model_catches_a_removal_without_the_round_floor() {
    let mut config = ModelConfig::new(vec![vec![Del, Incr], vec![Incr]], 2);
    config.faults.removals_max = 1;
    config.bugs.skip_removal_fence = true;
    let checker = config
        .into_model()
        .checker()
        .threads(2)
        .finish_when(HasDiscoveries::AnyFailures)
        .spawn_dfs()
        .join();
    assert!(
        checker.discovery("linearizable").is_some(),
        "the model checker must find the deliberate bug"
    );
}

/// A ring of four replicas whose register lives on three of them ([`ModelConfig::ring`]): an
/// increment through the fourth, which only proposes (its messages go to the three acceptors
/// alone, and a quorum is two of them, not three of four), and a read through an acceptor,
/// under a break.
fn ring_of_four() -> ModelConfig {
    let mut config = ModelConfig::new(Vec::new(), 0);
    config.replicas = 4;
    config.ring = Some(3);
    let acceptors = logless_model::acceptors_of_the_key(&config);
    assert_eq!(acceptors.len(), 3);
    let outsider = (0..4).find(|i| !acceptors.contains(i)).unwrap();
    let mut clients = vec![Vec::new(); 4];
    clients[outsider] = vec![Incr];
    clients[acceptors[0]] = vec![Get];
    config.clients = clients;
    config.faults.breaks_max = 1;
    config
}

/// A ring of four in the change that removes the register's first acceptor
/// ([`ModelConfig::stages`]): an increment through the leaving acceptor, in `writer`'s stage,
/// and a read through the joining one, in `reader`'s, with the two acceptors they share in
/// `shared`'s.
fn ring_change_of_four(writer: RingStage, reader: RingStage, shared: RingStage) -> ModelConfig {
    let mut config = ModelConfig::new(Vec::new(), 0);
    config.replicas = 4;
    config.ring = Some(3);
    let old = logless_model::acceptors_of_the_key(&config);
    config.stages = vec![RingStage::New; 4];
    let new = logless_model::acceptors_of_the_key(&config);
    let leaving = *old.iter().find(|i| !new.contains(i)).unwrap();
    let joining = *new.iter().find(|i| !old.contains(i)).unwrap();
    config.stages = vec![shared; 4];
    config.stages[leaving] = writer;
    config.stages[joining] = reader;
    let mut clients = vec![Vec::new(); 4];
    clients[leaving] = vec![Incr];
    clients[joining] = vec![Get];
    config.clients = clients;
    config
}

/// Proposers of adjacent stages at once, as replicas install a stage one by one
/// (docs/ring.md §4, "Why it is safe"): `Stable(e)` with `Joint(e+1)`, and `Joint(e+1)` with
/// `Stable(e+1)`. A joining replica that starts in `Joint(e+1)` raised its round floor before
/// the run, above the old acceptors' reports of round 0: its fresh register starts at round 1,
/// so the rounds it assigns differ from the others' (25,623 and 122,515 states with `Joint`
/// second; 17,494 and 111,419 when it started at round 0, before the model had the floor). Their quorums intersect, so these are safe even with the fence off
/// (`accept_any_stage`, so that each proposer's messages reach the other stage's acceptors);
/// with the fence on, the writer is refused until it catches up, which it may do at any point.
#[test]
fn exhaustive_on_a_ring_changing_with_proposers_of_adjacent_stages() {
    use RingStage::{Joint, New, Old};
    for (stages, unfenced, fenced) in [
        ((Old, Joint), 25_623, 122_515),
        ((Joint, New), 11_253, 27_919),
    ] {
        let mut config = ring_change_of_four(stages.0, stages.1, stages.1);
        config.bugs.accept_any_stage = true;
        let checker = explore(config.clone());
        checker.assert_properties();
        assert_eq!(
            checker.unique_state_count(),
            unfenced,
            "{stages:?} unfenced"
        );
        config.bugs.accept_any_stage = false;
        config.stage_moves = true;
        config.last_stage = stages.1;
        let checker = explore(config);
        checker.assert_properties();
        assert_eq!(checker.unique_state_count(), fenced, "{stages:?} fenced");
    }
}

/// The whole change during a run: every replica starts in `Stable(e)` and installs the next
/// stage at any point it may ([`ModelConfig::stage_moves`]); an increment through the leaving
/// acceptor and `reads` reads through a shared one (the first is the sync if it starts once
/// the fence holds; a second may come after the change).
fn ring_change_during_a_run(reads: usize) -> ModelConfig {
    let mut config = ring_change_of_four(RingStage::Old, RingStage::Old, RingStage::Old);
    config.stage_moves = true;
    let old = logless_model::acceptors_of_the_key(&config);
    let joining = (0..4).find(|i| !old.contains(i)).unwrap();
    let leaving = (0..4).find(|&i| config.clients[i] == [Incr]).unwrap();
    let shared = (0..4).find(|&i| i != leaving && i != joining).unwrap();
    // The first read is the sync once the fence holds; the second one may come after.
    config.clients[shared] = vec![Get; reads];
    config.clients[joining] = Vec::new();
    config
}

/// 11,368,960 states (5.4 minutes of CPU on two threads; 1,271,330 before the joining
/// replica held the register back until it raised its round floor, an action of its own at any
/// point once a majority of the old acceptors reported), beyond CI's budget (the
/// adjacent-stage runs above move replicas during the run in CI): by hand with `cargo test
/// --profile tests -p logless-model --test model -- --ignored ring_changing_during_a_run`.
#[test]
#[ignore = "long: run by hand with --ignored"]
fn exhaustive_on_a_ring_changing_during_a_run_under_the_fence() {
    let checker = explore(ring_change_during_a_run(1));
    checker.assert_properties();
    assert_eq!(checker.unique_state_count(), 11_368_960);
}

/// The first mutation of issue 28: a change that skips the joint stage (and so the sync) lets
/// the old and the new acceptor sets both decide: the increment the old set chose before its
/// members moved on is missed by reads through the new set.
#[test]
fn a_ring_change_without_the_joint_stage_is_caught() {
    let mut config = ring_change_during_a_run(2);
    config.skip_joint_stage = true;
    finds_violation(config);
}

/// The second mutation of issue 28: a configuration change applied without its fence.
/// Acceptors decide on messages of any stage: the leaving replica, a straggler still in
/// `Stable(e)`, decides with a majority of the old set whose members moved on to
/// `Stable(e+1)`, beside the new set, and the read through the new set misses its increment.
/// (The same change during a run, every replica starting in `Stable(e)`, is found too, but
/// deeper: about two minutes.)
#[test]
fn a_ring_change_without_its_fence_is_caught() {
    let mut config = ring_change_of_four(RingStage::Old, RingStage::New, RingStage::New);
    config.bugs.accept_any_stage = true;
    finds_violation(config);
}

#[test]
fn exhaustive_on_a_ring_of_four_with_three_acceptors_under_a_break() {
    let checker = explore(ring_of_four());
    checker.assert_properties();
    assert_eq!(checker.unique_state_count(), 214_833);
}

// ----- the round floor of a gaining acceptor (docs/ring.md §4, "Dead registers") -----

/// A ring of five replicas whose register, deleted before the run (a tombstone voted in round
/// 2 at its three acceptors), has two of them replaced one after the other
/// ([`RingChange::ReplaceTwo`]): every replica starts in `Stable(e)` and moves on at any point
/// it may; the clients come after the changes, `writer`'s operations through the second new
/// acceptor and `reader`'s through the one that stays. No change writes the dead register
/// through, so each new acceptor starts it at its round floor.
fn replaced_twice_after_a_delete(
    writer: Vec<CounterOp>,
    reader: Vec<CounterOp>,
    retries: u64,
) -> ModelConfig {
    let mut config = ModelConfig::new(Vec::new(), retries);
    config.replicas = 5;
    config.ring = Some(3);
    config.change = RingChange::ReplaceTwo;
    config.stage_moves = true;
    config.ops_after_change = true;
    config.deleted_in_round = Some(2);
    config.stages = vec![RingStage::New; 5];
    let last = logless_model::acceptors_of_the_key(&config);
    config.stages = vec![RingStage::Old; 5];
    let first = logless_model::acceptors_of_the_key(&config);
    let staying: Vec<usize> = first.iter().copied().filter(|i| last.contains(i)).collect();
    assert_eq!(
        (first, last.clone(), staying.clone()),
        (vec![0, 1, 2], vec![2, 3, 4], vec![2])
    );
    let mut clients = vec![Vec::new(); 5];
    clients[4] = writer;
    clients[staying[0]] = reader;
    config.clients = clients;
    config
}

/// With the floor: an increment through the second new acceptor and a read through the one
/// that stays, without retries, exhaustively (about a second of CPU). The new acceptors start
/// the dead register above the tombstone's round, so the increment is chosen above it and the
/// read finds it. (Without retries the hole is out of reach: the read cannot write through.)
#[test]
fn exhaustive_on_a_register_deleted_then_replaced_twice() {
    let checker = explore(replaced_twice_after_a_delete(vec![Incr], vec![Get], 0));
    checker.assert_properties();
    assert_eq!(checker.unique_state_count(), 23_083);
}

/// The same with an increment through the one that stays instead of the read, and one
/// retry: the configuration in which the hole is reachable without the floor (the next
/// test). It did not finish in 15 minutes on two heavily shared cores, so its count is not
/// pinned yet: by hand with `cargo test --profile tests -p logless-model --test model -- --ignored
/// replaced_twice_with_two_increments`.
#[test]
#[ignore = "long: run by hand with --ignored"]
fn exhaustive_on_a_register_deleted_then_replaced_twice_with_two_increments() {
    let checker = explore(replaced_twice_after_a_delete(vec![Incr], vec![Incr], 1));
    checker.assert_properties();
}

/// The mutation `ignore_gained_floor` (docs/ring.md §4, "Dead registers"): the new acceptors
/// start the dead register at round 0. The increment through the second new one is chosen by
/// the two new acceptors in round 1, below the tombstone the staying one holds in round 2;
/// the increment through the staying one, retried above both, finds the tombstone the highest
/// vote and builds on it: both increments return 1 (36 steps: 23 installing the stages and
/// raising floors, 13 for the two increments).
#[test]
fn new_acceptors_without_the_gained_floor_are_caught() {
    let mut config = replaced_twice_after_a_delete(vec![Incr], vec![Incr], 1);
    config.bugs.ignore_gained_floor = true;
    assert_eq!(finds_violation(config), 36);
}
