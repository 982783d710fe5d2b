//! Whole nodes of the log engine in simulation (`logless_sim::log_nodes`): the node's log turn
//! core over its durable log on simulated directories, with network faults, leader kills,
//! crashes inside flushes, power failures with torn sectors, crashes of every node, partitions
//! and clock jumps, on a third of the seeds snapshots taken often (logs truncated, replicas
//! caught up from a snapshot, restarts from one, crashes while one is written) and on every
//! eleventh leaders cut off after a lost Propose (gaps for the next leader); single-key
//! histories checked per key by the Rust checker and by Porcupine (`verify/checker`, skipped
//! without Go), the counters' (transfers, MSET, MGET) as one state, every key
//! available again after the faults heal, every run replayable, and the engine's deliberate
//! bugs caught; mPaxos (`--recovery pmem`) on seeds of its own, under power failures, its
//! restarted nodes voting before their state machine is rebuilt; mPaxosSM (`pmem-sm`), its
//! registers in place crashed among their media operations; EpochSS (`epoch`), recovering from
//! peers, with stale messages and, on some seeds, every node crashed and service refused.
mod porcupine;

use std::collections::BTreeSet;

use logless_multipaxos::config::InjectedBugs;
use logless_sim::linearizability::check;
use logless_sim::log_nodes::{LogNodeCluster, LogNodeSimConfig, LogNodeSimReport};
use logless_storage::Durability;

/// Runs one configuration and checks its histories; `Err` says what went wrong.
fn run(config: LogNodeSimConfig) -> Result<LogNodeSimReport, String> {
    run_keeping(config).map(|(report, _)| report)
}

/// [`run`], also returning the cluster (its histories).
fn run_keeping(config: LogNodeSimConfig) -> Result<(LogNodeSimReport, LogNodeCluster), String> {
    let (nodes, seed) = (config.nodes, config.seed);
    let mut cluster = LogNodeCluster::new(config);
    let report = cluster.run().clone();
    let failed = if report.failures.is_empty() {
        cluster.check()
    } else {
        Err(format!("{:?}", report.failures))
    };
    failed.map_err(|e| format!("seed {seed} with {nodes} nodes: {e}\n{report}"))?;
    Ok((report, cluster))
}

/// The registers' history of a run as the Porcupine checker's lines, its keys prefixed with
/// the run's node count and seed.
fn checker_lines(cluster: &LogNodeCluster, nodes: u16, seed: u64) -> String {
    cluster
        .history()
        .to_checker_lines(&format!("n{nodes}s{seed}/"))
        .unwrap_or_else(|e| panic!("seed {seed}: {e}"))
}

/// Runs the Porcupine checker on `lines`: its exit code and output, or `None` (said on
/// stderr) if there is no `go` to run it with.
fn porcupine_if_go(lines: &str, what: &str) -> Option<(Option<i32>, String)> {
    let verdict = porcupine::porcupine(lines);
    if verdict.is_none() {
        eprintln!("skipped: no `go` to run the Porcupine checker (verify/checker) on {what}");
    }
    verdict
}

/// The seeds of the many-seed tests, in total: `LOGLESS_LOG_NODES_SEEDS` if set, else 2,000.
fn seeds() -> u64 {
    std::env::var("LOGLESS_LOG_NODES_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(2_000)
}

/// Runs `count` seeds from `first` with `nodes` nodes; every failure is listed; sums the
/// reports. The registers' histories also go through the Porcupine checker (skipped, and said
/// so, without Go).
fn run_seeds(nodes: u16, first: u64, count: u64) -> LogNodeSimReport {
    let started = std::time::Instant::now();
    let mut total = LogNodeSimReport::default();
    let mut failures = Vec::new();
    let mut lines = String::new();
    for seed in first..first + count {
        match run_keeping(LogNodeSimConfig::for_seed(nodes, seed)) {
            Ok((report, cluster)) => {
                total.add(&report);
                lines += &checker_lines(&cluster, nodes, seed);
            }
            Err(e) => failures.push(e),
        }
    }
    println!(
        "{count} seeds with {nodes} nodes in {:.1?}, {} failed: {total}",
        started.elapsed(),
        failures.len()
    );
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    let checked = std::time::Instant::now();
    let what = format!("the histories of {nodes} nodes");
    if let Some((code, text)) = porcupine_if_go(&lines, &what) {
        assert_eq!(code, Some(0), "porcupine: {text}");
        println!(
            "porcupine: {} operations of {count} seeds linearizable, in {:.1?}",
            lines.lines().count(),
            checked.elapsed()
        );
    }
    total
}

#[test]
fn a_perfect_network_acknowledges_everything() {
    for durability in [Durability::Sync, Durability::Mmap] {
        let config = LogNodeSimConfig::new(3, 7, durability);
        let commands = u64::from(config.clients * config.commands_per_client);
        // Through each node: an increment, an MGET, a write and a read of every register.
        let liveness = 3 * (2 + 2 * u64::from(config.registers));
        let report = run(config).unwrap();
        println!("{report}");
        assert_eq!(report.acknowledged, commands + liveness, "{report}");
        assert_eq!(report.unknown + report.not_applied, 0, "{report}");
        assert!(report.multi_key_operations > 0, "{report}");
        assert_eq!(report.crashes + report.partitions + report.clock_jumps, 0);
    }
}

/// Seeds that once failed: a replica that lagged when the liveness phase ended and had not
/// caught up 300 ms later (the replicas were compared too soon).
#[test]
fn seeds_that_once_failed_pass() {
    run(LogNodeSimConfig::for_seed(3, 1225)).unwrap();
}

#[test]
fn the_same_seed_gives_the_same_trace() {
    for seed in [3, 4] {
        let a = run(LogNodeSimConfig::for_seed(3, seed)).unwrap();
        let b = run(LogNodeSimConfig::for_seed(3, seed)).unwrap();
        assert_eq!(a.trace, b.trace, "seed {seed}");
        assert_eq!(format!("{a}"), format!("{b}"));
    }
    let a = run(LogNodeSimConfig::for_seed(3, 5)).unwrap();
    let b = run(LogNodeSimConfig::for_seed(3, 7)).unwrap();
    assert_ne!(a.trace, b.trace);
}

#[test]
fn three_nodes_pass_both_checkers_under_leader_kills_power_failures_and_partitions() {
    let count = seeds() * 3 / 4;
    let total = run_seeds(3, 0, count);
    // The runs went through what the faults are there for.
    assert!(total.multi_key_operations > count * 5, "{total}");
    assert!(total.leader_kills > count / 4, "{total}");
    assert!(total.power_failures > count / 4, "{total}");
    assert!(
        total.crashes_in_flush > 0 && total.crashes_all > 0,
        "{total}"
    );
    assert!(total.partitions > 0 && total.clock_jumps > 0, "{total}");
    assert!(total.duplicates_skipped > 0 && total.retried > 0, "{total}");
    // Every eleventh seed cuts leaders off after a lost Propose: new leaders fill gaps.
    assert!(total.leader_cuts > 0 && total.gaps_filled > 0, "{total}");
    // A third of the seeds take snapshots every few hundred bytes of log: logs truncated,
    // replicas caught up from a snapshot, restarts from one, power failures while one was
    // being written.
    assert!(
        total.snapshots_taken > count && total.snapshots_installed > 0,
        "{total}"
    );
    assert!(
        total.restarts_from_snapshot > 0 && total.power_failures_in_snapshot_flush > 0,
        "{total}"
    );
}

#[test]
fn five_nodes_pass_both_checkers() {
    let count = seeds() / 4;
    let total = run_seeds(5, 1_000_000, count);
    assert!(
        total.leader_kills > 0 && total.power_failures > 0,
        "{total}"
    );
}

/// Runs seeds with `bugs` (and `tune` applied) until one fails, checks that the same seed
/// passes without them, and returns its failure. A clean run the linearizability checker
/// cannot decide (its search budget spent on many operations of unknown outcome) shows no
/// fault of its own: the seed counts when the bug's failure is one that needs no search
/// (replicas that differ after settling), and is passed over otherwise.
fn first_failure(bugs: InjectedBugs, seeds: u64, tune: impl Fn(&mut LogNodeSimConfig)) -> String {
    for seed in 0..seeds {
        let mut config = LogNodeSimConfig::for_seed(3, seed);
        tune(&mut config);
        let clean = config.clone();
        config.bugs = bugs;
        if let Err(e) = run(config) {
            println!("caught: {}", &e[..e.len().min(400)]);
            match run(clean) {
                Ok(_) => return e,
                Err(clean) if clean.contains("search budget exhausted") => {
                    println!("seed {seed}'s clean run is undecided: {clean}");
                    if e.contains("replicas differ") {
                        return e;
                    }
                }
                Err(clean) => panic!("seed {seed} fails without {bugs:?} too: {clean}"),
            }
        }
    }
    panic!("{seeds} seeds and {bugs:?} was not caught");
}

#[test]
fn executing_a_request_agreed_twice_twice_is_caught() {
    let bugs = InjectedBugs {
        no_dedup: true,
        ..InjectedBugs::default()
    };
    let failure = first_failure(bugs, 200, |_| {});
    assert!(failure.contains("not linearizable"), "{failure}");
}

#[test]
fn a_proposal_of_a_stale_view_taken_is_caught() {
    let bugs = InjectedBugs {
        accept_stale_proposals: true,
        ..InjectedBugs::default()
    };
    // Caught at seed 69 of 200 (replicas that differ), one of the small snapshots' seeds: with
    // their snapshot policy its trace is another, and no seed of the 200 catches it. Since
    // the engine's last-in-line rule for lagging followers, that seed's clean run has so many
    // operations of unknown outcome that the checker's search cannot decide it.
    let failure = first_failure(bugs, 200, |config| {
        busy_and_lossy(config);
        usual_snapshots(config);
    });
    assert_unsafe(&failure);
}

#[test]
fn executing_at_the_local_clock_instead_of_the_batch_stamp_is_caught() {
    let bugs = InjectedBugs {
        execute_at_local_clock: true,
        ..InjectedBugs::default()
    };
    let failure = first_failure(bugs, 200, |_| {});
    assert!(
        failure.contains("not linearizable") || failure.contains("differ"),
        "{failure}"
    );
}

/// The other faults did not catch this bug in 200 seeds, for three reasons: a gap needs both
/// followers to miss a Propose and vote for a later one, and closed-loop clients stall behind
/// the missing instance, so that the leader's retransmission (100 ms) usually comes first; a
/// killed leader restarts (150 ms) before its followers suspect it (300 ms) and runs phase 1
/// again with its own vote for the instance; and a gap left empty is filled by any later view
/// change whose phase 1 hears the old leader's vote. Without leader cuts a gap arose in about
/// one seed in 40. Leader cuts make the sequence (see
/// [`LogNodeSimConfig::leader_cut_every_us`]); their runs keep the other faults rare.
#[test]
fn gaps_left_without_a_noop_are_caught() {
    let bugs = InjectedBugs {
        skip_noop_fill: true,
        ..InjectedBugs::default()
    };
    let failure = first_failure(bugs, 200, LogNodeSimConfig::leader_cuts);
    // The gap stops execution for good: an operation after healing is not acknowledged.
    assert!(failure.contains("not acknowledged"), "{failure}");
}

/// A mutation's registers' histories fail the Porcupine checker on the same keys as the Rust
/// one, and the same seeds' clean histories pass it. The mutation: executing at the local
/// clock instead of the batch's stamp, which in 200 seeds made the registers' histories (with
/// expiry) not linearizable at seeds 100 and 184 (the other mutations the many seeds catch
/// show in the counters' history or in replicas that differ, not in the registers').
#[test]
fn the_porcupine_checker_catches_execution_at_the_local_clock() {
    let mut mutated = String::new();
    let mut clean = String::new();
    let mut rust_caught = BTreeSet::new();
    for seed in 96..104 {
        let mut config = LogNodeSimConfig::for_seed(3, seed);
        let (_, cluster) = run_keeping(config.clone()).unwrap();
        clean += &checker_lines(&cluster, 3, seed);
        config.bugs.execute_at_local_clock = true;
        let mut cluster = LogNodeCluster::new(config);
        cluster.run();
        for violation in check(cluster.history(), 2_000_000).violations {
            let key = String::from_utf8_lossy(violation.key.as_bytes()).into_owned();
            rust_caught.insert(format!("{seed}/{key}"));
        }
        mutated += &checker_lines(&cluster, 3, seed);
    }
    assert!(!rust_caught.is_empty(), "the Rust checker caught nothing");
    let Some((code, text)) = porcupine_if_go(&mutated, "a mutation's histories") else {
        return;
    };
    assert_eq!(code, Some(1), "{text}");
    assert_eq!(porcupine::bad_keys(&text, "n3s"), rust_caught, "{text}");
    println!("both checkers caught {rust_caught:?}");
    let (code, text) = porcupine_if_go(&clean, "clean histories").expect("go ran before");
    assert_eq!(code, Some(0), "{text}");
}

/// Asserts that `failure` says the checkers found a history not linearizable or replicas that
/// disagree.
fn assert_unsafe(failure: &str) {
    assert!(
        failure.contains("not linearizable")
            || failure.contains("differ")
            || failure.contains("contradicted"),
        "{failure}"
    );
}

/// The snapshot policy of the seeds without small snapshots.
fn usual_snapshots(config: &mut LogNodeSimConfig) {
    let usual = LogNodeSimConfig::new(config.nodes, config.seed, config.durability);
    config.snapshot_log_bytes_min = usual.snapshot_log_bytes_min;
    config.snapshot_ratio_percent = usual.snapshot_ratio_percent;
    config.snapshot_flush_crash_share = usual.snapshot_flush_crash_share;
}

/// Many clients without think time on a lossier network, leaders killed more often.
fn busy_and_lossy(config: &mut LogNodeSimConfig) {
    config.clients = 12;
    config.commands_per_client = 15;
    config.think_us = 500;
    config.faults.loss = 0.1;
    config.faults.crash_every_us = 100_000;
}

/// A count of seeds: `var` if set, else `default`.
fn seeds_from(var: &str, default: u64) -> u64 {
    std::env::var(var)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

/// Runs `count` seeds of `for_seed` from `LOGLESS_LOG_NODES_SEED_START` (0 if unset: one seed
/// alone is `…_SEED_START=170` with a count of 1), checks each, and sums the reports.
fn run_configs(count: u64, for_seed: impl Fn(u64) -> LogNodeSimConfig) -> LogNodeSimReport {
    let started = std::time::Instant::now();
    let mut total = LogNodeSimReport::default();
    let mut failures = Vec::new();
    let first = seeds_from("LOGLESS_LOG_NODES_SEED_START", 0);
    for seed in first..first + count {
        match run(for_seed(seed)) {
            Ok(report) => total.add(&report),
            Err(e) => failures.push(e),
        }
    }
    println!("{count} seeds in {:.1?}: {total}", started.elapsed());
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    total
}

/// The many-seed configuration of `seed` with full disks.
fn with_full_disks(seed: u64) -> LogNodeSimConfig {
    let mut config = LogNodeSimConfig::for_seed(3, seed);
    config.full_disks();
    config
}

/// The many-seed configuration of `seed` with a disk lost at its worst moment.
fn with_a_lost_disk(seed: u64) -> LogNodeSimConfig {
    let mut config = LogNodeSimConfig::for_seed(3, seed);
    config.lost_disk();
    config
}

/// Disks full for a while, one node's or every node's, under every other fault: a node that
/// cannot write its log pauses and answers MISCONF (not applied), nothing acknowledged is lost
/// (both checkers), and once space returns every key is written and read through every node
/// again. `LOGLESS_FULL_DISK_SEEDS` seeds (10 by default, for CI's time; 200 passed once).
#[test]
fn full_disks_pause_nodes_lose_nothing_and_resume_when_space_returns() {
    let count = seeds_from("LOGLESS_FULL_DISK_SEEDS", 10);
    let total = run_configs(count, with_full_disks);
    assert!(total.disk_fulls > count, "{total}");
    assert!(
        total.space_shortages > 0 && total.refused_for_space > 0,
        "{total}"
    );
}

/// A disk lost at its worst moment (docs/lost-disk.md): its node restarts rejoining
/// (`LogCore::start_rejoin`) while the leader that decided with its lost votes crashes and the
/// node that saw none of it comes back; histories stay linearizable, the replicas agree, and the
/// rejoined node serves again. `LOGLESS_LOST_DISK_SEEDS` seeds (10 by default, for CI's time;
/// 200 passed once).
#[test]
fn a_lost_disk_rejoins_and_stays_linearizable() {
    run_lost_disks(
        seeds_from("LOGLESS_LOST_DISK_SEEDS", 10),
        75,
        with_a_lost_disk,
    );
}

/// Runs `count` seeds of `for_seed`, a configuration that loses a disk, checks each, and checks
/// that at least `percent` of them lost one and that the node of every disk lost rejoined.
fn run_lost_disks(count: u64, percent: u64, for_seed: impl Fn(u64) -> LogNodeSimConfig) {
    let total = run_configs(count, for_seed);
    // A run whose workload ends before the moment drawn loses no disk (12 of 200 under FullSS;
    // 57 of 200 under EpochSS, where a node recovering counts as down and the loss waits).
    assert!(total.lost_disks >= count * percent / 100, "{total}");
    assert_eq!(total.rejoins, total.lost_disks, "{total}");
}

/// The lost disk's runs with a rejoin that recovers nothing (the node votes at once from its
/// empty state): caught.
#[test]
fn a_rejoin_that_recovers_nothing_is_caught() {
    let bugs = InjectedBugs {
        rejoin_without_recovery: true,
        ..InjectedBugs::default()
    };
    let failure = first_failure(bugs, 40, LogNodeSimConfig::lost_disk);
    assert_unsafe(&failure);
}

/// The full disks' runs with nodes that ignore their disk's refusal (send and answer what it
/// did not take, and go on instead of pausing): caught, as a crash before space returns forgets
/// what they said.
#[test]
fn sending_what_a_full_disk_refused_is_caught() {
    let bugs = InjectedBugs {
        release_while_space_short: true,
        ..InjectedBugs::default()
    };
    let failure = first_failure(bugs, 40, LogNodeSimConfig::full_disks);
    assert_unsafe(&failure);
}

/// The many-seed configuration of `seed` under mPaxos on emulated persistent memory, snapshots
/// every few hundred bytes of log on every other seed (rebuilds restore one).
fn with_mpaxos(seed: u64) -> LogNodeSimConfig {
    let mut config = LogNodeSimConfig::for_seed(3, seed);
    config.mpaxos();
    if seed.is_multiple_of(2) {
        config.small_snapshots();
    }
    config
}

/// mPaxos (`--recovery pmem` on `--durability emulp`) under every fault, power failures among
/// the crashes: a restarted node resumes its persistent log and votes before its state machine
/// is rebuilt from the persistent snapshot, and both checkers pass. `LOGLESS_MPAXOS_SEEDS` seeds
/// (100 by default, for CI's time).
#[test]
fn mpaxos_votes_before_rebuilding_and_stays_linearizable_under_power_failures() {
    let count = seeds_from("LOGLESS_MPAXOS_SEEDS", 100);
    let total = run_configs(count, with_mpaxos);
    assert!(total.power_failures > count / 4, "{total}");
    assert!(total.resumed > count, "{total}");
    // Restarted nodes voted (or promised) while their state machine was still being rebuilt,
    // and rebuilt it from a persistent snapshot.
    assert!(total.votes_while_rebuilding > 0, "{total}");
    assert!(total.rebuilds_from_snapshot > 0, "{total}");
    assert!(total.restarts_from_snapshot > 0, "{total}");
}

/// The many-seed configuration of `seed` under mPaxos with a persistent memory lost at its
/// worst moment.
fn with_mpaxos_and_a_lost_disk(seed: u64) -> LogNodeSimConfig {
    let mut config = with_mpaxos(seed);
    config.lost_disk();
    config
}

/// The lost disk's runs under mPaxos (`--recovery pmem`, `docs/lost-disk.md`): the node whose
/// persistent memory was lost resumes an empty log, rejoins (ending the rebuild itself) and is
/// handed its rebuilt machine later anyway; histories stay linearizable, the replicas agree,
/// and the rejoined node serves again. `LOGLESS_LOST_DISK_SEEDS` seeds (5 by default, for CI's
/// time; 200 passed once).
#[test]
fn an_mpaxos_lost_disk_rejoins_and_stays_linearizable() {
    let count = seeds_from("LOGLESS_LOST_DISK_SEEDS", 5);
    run_lost_disks(count, 75, with_mpaxos_and_a_lost_disk);
}

/// The same runs with the deliberate bug `late_rebuild_taken` (the replica takes a rebuilt
/// machine handed over after its rejoin, or a catch-up, ended the rebuild): caught.
#[test]
fn an_mpaxos_rejoin_that_takes_a_late_rebuilt_machine_is_caught() {
    let bugs = InjectedBugs {
        late_rebuild_taken: true,
        ..InjectedBugs::default()
    };
    let failure = first_failure(bugs, 40, |config| {
        config.mpaxos();
        config.lost_disk();
    });
    assert_unsafe(&failure);
}

/// mPaxos with a node whose rebuild skips the persistent snapshot (it hands its replica an
/// empty state machine): caught.
#[test]
fn an_mpaxos_rebuild_that_skips_the_snapshot_is_caught() {
    for seed in 0..40 {
        let mut config = with_mpaxos(seed);
        let clean = config.clone();
        config.rebuild_skips_snapshot = true;
        if let Err(failure) = run(config) {
            println!("seed {seed} caught: {}", &failure[..failure.len().min(400)]);
            run(clean).unwrap_or_else(|e| panic!("seed {seed} fails without the bug too: {e}"));
            assert_unsafe(&failure);
            return;
        }
    }
    panic!("40 seeds and a rebuild that skips the snapshot was not caught");
}

/// The many-seed configuration of `seed` under mPaxosSM on emulated persistent memory,
/// checkpoints every few hundred bytes of log on every other seed (lagging replicas get a
/// snapshot taken when they ask).
fn with_mpaxos_sm(seed: u64) -> LogNodeSimConfig {
    let mut config = LogNodeSimConfig::for_seed(3, seed);
    config.mpaxos_sm();
    if seed.is_multiple_of(2) {
        config.small_snapshots();
    }
    config
}

/// mPaxosSM (`--recovery pmem-sm` on `--durability emulp`) under every fault: the state
/// machine in place on simulated persistent memory, crashes inside flushes among its media
/// operations, power failures keeping any part of what was not persisted; a restarted node
/// resumes its log with the stand-in and votes at once, opens its registers later (catch-up
/// answers with snapshots, and crashes, landing in between) and serves once they are handed
/// over; no operation is applied twice, both checkers pass and the replicas agree.
/// `LOGLESS_MPAXOS_SM_SEEDS` seeds (30 by default, for CI's time).
#[test]
fn mpaxos_sm_applies_every_operation_once_under_power_failures() {
    let count = seeds_from("LOGLESS_MPAXOS_SM_SEEDS", 30);
    let total = run_configs(count, with_mpaxos_sm);
    assert!(total.power_failures > count / 4, "{total}");
    assert!(total.crashes_in_registers > 0, "{total}");
    assert!(total.resumed > count, "{total}");
    assert!(total.refused_in_place > 0, "{total}");
    assert!(total.hand_overs > count, "{total}");
    assert!(total.votes_while_rebuilding > 0, "{total}");
    assert!(total.crashes_while_opening > 0, "{total}");
    assert!(total.snapshots_while_opening > 0, "{total}");
}

/// mPaxosSM with registers that ignore their operation numbers after a restart (an INCR
/// whose register reached the medium before a crash, and whose "applied up to" did not, is
/// applied twice): caught. From seed 90, the first of 0–600 that catches it since a replica
/// counts its own vote towards a decision only once it is durable (which moved the schedules;
/// `LOGLESS_MPAXOS_SM_BUG_FIRST` starts elsewhere); `LOGLESS_MPAXOS_SM_BUG_SEEDS` seeds at most
/// (40).
#[test]
fn mpaxos_sm_without_operation_numbers_is_caught() {
    let first: u64 =
        std::env::var("LOGLESS_MPAXOS_SM_BUG_FIRST").map_or(90, |v| v.parse().unwrap());
    for seed in first..first + seeds_from("LOGLESS_MPAXOS_SM_BUG_SEEDS", 40) {
        let mut config = with_mpaxos_sm(seed);
        let clean = config.clone();
        config.ignore_op_numbers = true;
        if let Err(failure) = run(config) {
            println!(
                "caught at seed {seed}: {}",
                &failure[..failure.len().min(400)]
            );
            run(clean).unwrap_or_else(|e| panic!("seed {seed} fails without the bug too: {e}"));
            assert_unsafe(&failure);
            return;
        }
    }
    panic!("registers that ignore their operation numbers were not caught");
}

/// mPaxosSM with a core that takes catch-up answers carrying a snapshot while its registers
/// open (`LogCore::inject_snapshots_into_the_stand_in`): the snapshot goes into the stand-in,
/// whose install ends the rebuild, so the opened registers are dropped at the hand-over and the
/// node serves from memory alone while its registers stay behind. Its next restart finds them
/// behind a checkpoint the engine wrote since (which holds no state to install from) and the
/// node cannot start: caught as that failure, the same seed passing without the bug.
/// `LOGLESS_MPAXOS_SM_BUG_SEEDS` seeds at most (40).
#[test]
fn mpaxos_sm_snapshots_installed_into_the_stand_in_are_caught() {
    let seeds = seeds_from("LOGLESS_MPAXOS_SM_BUG_SEEDS", 40);
    for seed in 0..seeds {
        let mut config = with_mpaxos_sm(seed);
        let clean = config.clone();
        config.snapshots_into_the_stand_in = true;
        if let Err(failure) = run(config) {
            println!("seed {seed} caught: {}", &failure[..failure.len().min(400)]);
            run(clean).unwrap_or_else(|e| panic!("seed {seed} fails without the bug too: {e}"));
            assert!(
                failure.contains("cannot reopen its registers")
                    && failure.contains("behind the log's checkpoint"),
                "{failure}"
            );
            return;
        }
    }
    panic!("{seeds} seeds and snapshots installed into the stand-in were not caught");
}

/// The many-seed configuration of `seed` under EpochSS.
fn with_epochs(seed: u64) -> LogNodeSimConfig {
    let mut config = LogNodeSimConfig::for_seed(3, seed);
    config.epoch_ss();
    config
}

/// EpochSS (`--recovery epoch`) under every fault but power failures (nothing is on a disk
/// but the epoch): a restarted node recovers from its peers in a new epoch before it votes or
/// serves (answering LOADING), stale messages of its previous life arrive and are dropped, both
/// checkers pass; on every fourth seed every node may crash at once, and the cluster then
/// refuses service (CLUSTERDOWN) through every node instead of serving a forgotten state.
/// `LOGLESS_EPOCH_SEEDS` seeds (40 by default, for CI's time).
#[test]
fn epoch_ss_recovers_from_peers_and_refuses_service_once_every_node_crashed() {
    let count = seeds_from("LOGLESS_EPOCH_SEEDS", 40);
    let total = run_configs(count, with_epochs);
    assert!(
        total.epoch_restarts > count && total.recoveries > 0,
        "{total}"
    );
    assert!(
        total.refused_recovering > 0 && total.stale_batches > 0,
        "{total}"
    );
    assert!(
        total.states_lost > 0 && total.refused_state_lost > 0,
        "{total}"
    );
}

/// EpochSS with replicas that take messages whatever their sender's epoch (the deliberate bug
/// `ignore_epochs`), in runs that stage a stray vote ([`LogNodeSimConfig::stray_vote`], seed
/// 002's Fig. 2): the leader counts the Accept of a follower's forgotten life and decides a
/// value the others, who decided another in that instance, never saw. The random faults alone
/// did not catch it in 100 seeds of three nodes and 100 of five (see
/// `verify/sim/src/log_nodes/stray.rs` for why); the clean run of the seed that catches it
/// passes (`first_failure`). `LOGLESS_EPOCH_BUG_SEEDS` seeds at most (40).
#[test]
fn epoch_ss_without_the_stale_epoch_drop_is_caught() {
    let bugs = InjectedBugs {
        ignore_epochs: true,
        ..InjectedBugs::default()
    };
    let seeds = seeds_from("LOGLESS_EPOCH_BUG_SEEDS", 40);
    let failure = first_failure(bugs, seeds, |config| {
        config.epoch_ss();
        config.stray_vote();
    });
    assert_unsafe(&failure);
}

/// The lost disk's runs under mPaxosSM: the node whose persistent memory (its log and its
/// registers) was lost rejoins; histories stay linearizable and the replicas agree.
/// `LOGLESS_LOST_DISK_SEEDS` seeds (5 by default, for CI's time).
#[test]
fn an_mpaxos_sm_lost_disk_rejoins_and_stays_linearizable() {
    let count = seeds_from("LOGLESS_LOST_DISK_SEEDS", 5);
    run_lost_disks(count, 75, |seed| {
        let mut config = with_mpaxos_sm(seed);
        config.lost_disk();
        config
    });
}

/// The lost disk's runs under EpochSS: the node whose epoch file was lost starts in an epoch
/// above every one its lost life used (`epoch_file::last_before_rejoin`) and recovers from its
/// peers. `LOGLESS_LOST_DISK_SEEDS` seeds (5 by default, for CI's time).
#[test]
fn an_epoch_ss_lost_disk_rejoins_and_stays_linearizable() {
    let count = seeds_from("LOGLESS_LOST_DISK_SEEDS", 5);
    run_lost_disks(count, 60, |seed| {
        let mut config = with_epochs(seed);
        // A lost disk with every node crashing too would test nothing more; other crashes
        // rarer, so that one node may go down at the moment drawn.
        config.faults.crash_all = 0.0;
        config.faults.crash_every_us = 1_000_000;
        config.lost_disk();
        config
    });
}
