//! Randomised schedules of the in-process cluster: every history linearizable per key, every
//! counter equal to its acknowledged increments (plus some of the unknown ones).
use std::collections::BTreeSet;

use logless_placement::{self as placement, key_slot, Configuration, Replication};
use logless_rmw::ids::Key;
use logless_rmw::proposer::ProposerStats;
use logless_sim::cluster::{Cluster, Faults, SimConfig};
use logless_sim::linearizability::check;

/// Why a seed did not pass.
#[derive(Debug)]
enum Failure {
    /// A history that is not linearizable, a lost or doubled increment, or no progress.
    Violation(String),
    /// The linearizability search ran out of budget on some key (not a verdict).
    Inconclusive(String),
}

/// Runs one seed; returns the proposers' counters.
fn run_seed(config: SimConfig) -> Result<ProposerStats, Failure> {
    let seed = config.seed;
    let keys: Vec<Key> = (0..config.workload.keys)
        .map(|k| Key::new(format!("k{k}")))
        .collect();
    let mut cluster = Cluster::new(config);
    let stats = cluster.run(3_000_000, 60_000_000).clone();
    let report = check(cluster.history(), 2_000_000);
    if !report.violations.is_empty() {
        return Err(Failure::Violation(format!(
            "seed {seed}: not linearizable: {:?}\n{stats}",
            report.violations
        )));
    }
    let values = cluster.read_all(&keys).map_err(|k| {
        Failure::Violation(format!("seed {seed}: final read of {k:?} did not complete"))
    })?;
    for (key, (acked, unknown)) in cluster.increments() {
        let value = values.get(key).copied().unwrap_or(0) as u64;
        if value < *acked || value > acked + unknown {
            return Err(Failure::Violation(format!(
                "seed {seed}: counter {key:?} = {value}, acknowledged {acked}, unknown {unknown}"
            )));
        }
    }
    if stats.acknowledged == 0 {
        return Err(Failure::Violation(format!(
            "seed {seed}: nothing was acknowledged"
        )));
    }
    if !report.inconclusive.is_empty() {
        return Err(Failure::Inconclusive(format!(
            "seed {seed}: search budget exhausted on {:?}",
            report.inconclusive
        )));
    }
    Ok(stats.proposer)
}

#[test]
fn a_perfect_network_acknowledges_everything() {
    let mut config = SimConfig::new(3, 1);
    config.faults = Faults::none();
    let mut cluster = Cluster::new(config);
    let stats = cluster.run(0, 60_000_000).clone();
    println!("{stats}");
    assert_eq!(stats.acknowledged, 6 * 40);
    assert_eq!(stats.unknown + stats.not_applied, 0);
    assert!(check(cluster.history(), 100_000).is_linearizable());
}

/// Rings of 5, 6 and 7 replicas with three per key, on a perfect network: everything is
/// acknowledged, and each key's acceptor states are on its three replicas only.
#[test]
fn a_perfect_ring_acknowledges_everything_and_keeps_each_key_on_its_replicas() {
    for replicas in 5..=7 {
        let config = SimConfig::ring_of(replicas, 1);
        let keys = config.workload.keys;
        let mut cluster = Cluster::new(config);
        let stats = cluster.run(0, 60_000_000).clone();
        assert_eq!(stats.acknowledged, 6 * 40, "{replicas} replicas");
        assert_eq!(stats.unknown + stats.not_applied, 0);
        assert!(check(cluster.history(), 100_000).is_linearizable());
        let nodes: Vec<_> = (1..=replicas).map(placement::NodeId).collect();
        let ring = Configuration::balanced(&nodes, Replication::THREE).unwrap();
        let mut replica_sets = BTreeSet::new();
        for k in 0..keys {
            let key = Key::new(format!("k{k}"));
            let replicas = ring.replicas(key_slot(key.as_bytes()));
            let mut expected: Vec<u16> = replicas.nodes().iter().map(|n| n.0).collect();
            expected.sort_unstable();
            let held: Vec<u16> = cluster.holders(&key).iter().map(|n| n.0).collect();
            assert_eq!(held, expected, "{key:?}");
            replica_sets.insert(expected);
        }
        assert!(
            replica_sets.len() > 1,
            "the keys fall on several replica sets"
        );
    }
}

/// Every third seed has fast writes vote with a quorum first, and those runs do reach them:
/// fast writes, and fast writes that had to ask the rest because a member of their quorum was
/// slow, cut off or down. The other seeds never ask a quorum first for a write.
#[test]
fn thrifty_seeds_take_fast_writes_and_widen_some() {
    let mut thrifty = ProposerStats::default();
    let mut others = ProposerStats::default();
    for seed in 0..150 {
        let config = SimConfig::for_seed(seed);
        let totals = if config.proposer.thrifty_writes {
            &mut thrifty
        } else {
            &mut others
        };
        *totals += &Cluster::new(config).run(3_000_000, 60_000_000).proposer;
    }
    println!("thrifty seeds: {thrifty:?}\nother seeds: {others:?}");
    assert!(thrifty.fast_writes > 100, "{thrifty:?}");
    assert!(thrifty.writes_widened > 0, "{thrifty:?}");
    assert!(others.fast_writes > 100, "{others:?}");
    assert_eq!(others.writes_widened, 0, "{others:?}");
}

#[test]
fn faulty_schedules_stay_linearizable() {
    let seeds: u64 = std::env::var("LOGLESS_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(2_000);
    let mut violations = Vec::new();
    let mut inconclusive = Vec::new();
    for seed in 0..seeds {
        match run_seed(SimConfig::for_seed(seed)) {
            Ok(_) => {}
            Err(Failure::Violation(e)) => violations.push(e),
            Err(Failure::Inconclusive(e)) => inconclusive.push(e),
        }
    }
    println!(
        "{seeds} seeds, {} inconclusive: {inconclusive:?}",
        inconclusive.len()
    );
    assert!(
        violations.is_empty(),
        "{} failing seeds (replay: cargo run --release -p logless-sim --example replay -- SEED KEY):\n{}",
        violations.len(),
        violations.join("\n")
    );
    assert!(
        inconclusive.len() * 100 <= seeds as usize,
        "too many inconclusive seeds"
    );
}

/// The catches after which [`caught`] stops: enough to show the bug is found, not by one
/// lucky seed, without running every seed (CI's time).
const CATCHES_ENOUGH: usize = 5;

/// Runs up to `seeds` seeds with a deliberate bug, stopping after [`CATCHES_ENOUGH`] catches,
/// and returns how many were caught. The same seeds and settings without the bug must all
/// pass, so that a catch is the bug's doing.
fn caught(seeds: u64, configure: impl Fn(&mut SimConfig)) -> usize {
    let buggy = |seed| {
        let mut config = SimConfig::for_seed(seed);
        configure(&mut config);
        config
    };
    let mut control_failures = Vec::new();
    let mut caught = 0;
    for seed in 0..seeds {
        let mut control = buggy(seed);
        control.proposer.bugs = Default::default();
        control.bugs = Default::default();
        if let Err(Failure::Violation(e)) = run_seed(control) {
            control_failures.push(e);
        }
        caught += usize::from(matches!(run_seed(buggy(seed)), Err(Failure::Violation(_))));
        if caught >= CATCHES_ENOUGH {
            break;
        }
    }
    assert!(
        control_failures.is_empty(),
        "{}",
        control_failures.join("\n")
    );
    caught
}

#[test]
fn the_harness_catches_an_inconsistent_quorum_taken_as_consistent() {
    let n = caught(200, |c| c.proposer.bugs.accept_inconsistent_quorum = true);
    assert!(n > 0, "no seed caught the bug");
    println!("caught in {n} seeds");
}

#[test]
fn the_harness_catches_lost_learned_notifications() {
    let n = caught(200, |c| c.proposer.bugs.ignore_learned = true);
    assert!(n > 0, "no seed caught the bug");
    println!("caught in {n} seeds");
}

#[test]
fn the_harness_catches_replies_sent_before_persisting() {
    // A slow disk and frequent crashes widen the window in which the bug can show.
    let n = caught(200, |c| {
        c.bugs.reply_before_persist = true;
        c.flush_us = 5_000;
        c.faults.crash_every_us = 15_000;
    });
    assert!(n > 0, "no seed caught the bug");
    println!("caught in {n} seeds");
}

/// Proposers that keep a single register drop their idle ones at nearly every command, under
/// every fault, and start them anew (phase 1, values sent in full): the histories stay
/// linearizable and the counters exact.
#[test]
fn proposers_that_drop_idle_registers_stay_linearizable() {
    let mut totals = ProposerStats::default();
    let mut violations = Vec::new();
    for seed in 0..500 {
        let mut config = SimConfig::for_seed(seed);
        config.proposer.registers_max = 1;
        match run_seed(config) {
            Ok(stats) => totals += &stats,
            Err(Failure::Violation(e)) => violations.push(e),
            Err(Failure::Inconclusive(_)) => {}
        }
    }
    println!("{totals:?}");
    assert!(violations.is_empty(), "{}", violations.join("\n"));
    assert!(totals.registers_dropped > 10_000, "{totals:?}");
}
