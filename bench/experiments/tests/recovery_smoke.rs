//! The `logless bench recovery` harness end to end at a tiny size: a follower of each recovery
//! mode's 3-replica cluster restarted (timed until it votes and serves), Table II's mix and
//! Fig. 3's SETs on mPaxos, and the Figs. 4–5 timeline (a follower, then the leader, killed
//! and started under load) on mPaxosSM, with the results written. It needs the debug `logless` binary
//! of the same target directory (`cargo build -p logless`).

mod common;

use std::path::PathBuf;

use common::logless;
use logless_bench::recovery::{run, RecoveryArgs, MODES};

fn tiny(out: PathBuf, modes: &[&str], jobs: &[&str]) -> RecoveryArgs {
    RecoveryArgs {
        logless: Some(logless()),
        restart_mb: vec![1],
        table_mb: vec![1],
        fig3_bytes: vec![128, 4096],
        fig3_mb: 1,
        seconds: 0.3,
        clients: 3,
        pipeline: 2,
        timeline_replicas: vec![3],
        timeline_mb: 1,
        settle_s: 1.2,
        down_s: 0.6,
        modes: modes.iter().map(|m| m.to_string()).collect(),
        jobs: jobs.iter().map(|j| j.to_string()).collect(),
        quick: false,
        out,
    }
}

#[test]
fn every_mode_restarts_and_the_results_are_written() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let out = dir.path().join("restart");
    run(&tiny(out.clone(), &[], &["restart"])).expect("the restart job runs");
    let csv = std::fs::read_to_string(out.join("restart.csv")).expect("restart.csv");
    let rows: Vec<Vec<&str>> = csv
        .lines()
        .skip(1)
        .map(|l| l.split(',').collect())
        .collect();
    assert_eq!(rows.len(), MODES.len(), "{csv}");
    for (row, mode) in rows.iter().zip(MODES) {
        assert_eq!(row[0], mode.recovery, "{csv}");
        let votes: f64 = row[4].parse().expect("votes_ms");
        let serves: f64 = row[5].parse().expect("serves_ms");
        assert!(votes > 0.0 && votes <= serves, "{csv}");
        // The replica's start lines were read: the log's open (EpochSS has none), its first
        // answer, and under mPaxos the machine rebuilt from its own persistent state.
        let column = |name: &str| {
            let at = csv
                .lines()
                .next()
                .unwrap()
                .split(',')
                .position(|c| c == name);
            row[at.unwrap_or_else(|| panic!("no column {name}: {csv}"))]
        };
        assert!(
            mode.recovery == "epoch" || !column("log_ms").is_empty(),
            "{csv}"
        );
        assert!(!column("first_answer_ms").is_empty(), "{csv}");
        assert!(!column("memory_read_mb_s").is_empty(), "{csv}");
        if mode.recovery == "pmem" {
            assert_eq!(column("own_snapshot"), "true", "{csv}");
        }
    }
    for file in ["restart.png", "results.json", "summary.md"] {
        assert!(out.join(file).is_file(), "{file} is missing");
    }

    let out = dir.path().join("load");
    run(&tiny(out.clone(), &["pmem"], &["table2", "fig3"])).expect("the load jobs run");
    let table = std::fs::read_to_string(out.join("table2.csv")).expect("table2.csv");
    let fig3 = std::fs::read_to_string(out.join("fig3.csv")).expect("fig3.csv");
    assert_eq!(table.lines().count(), 2, "{table}");
    assert_eq!(fig3.lines().count(), 3, "{fig3}");
    for line in table
        .lines()
        .chain(fig3.lines())
        .filter(|l| l.starts_with("pmem"))
    {
        let ops: f64 = line.split(',').nth(5).unwrap().parse().expect("ops_per_s");
        assert!(ops > 0.0, "no command answered: {line}");
    }
    assert!(out.join("fig3.png").is_file());
    let summary = std::fs::read_to_string(out.join("summary.md")).expect("summary.md");
    assert!(
        summary.contains("Table II") && summary.contains("Fig. 3"),
        "{summary}"
    );
}

#[test]
fn every_replica_is_followed_over_a_follower_and_a_leader_crash() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let out = dir.path().join("figs45");
    run(&tiny(out.clone(), &["pmem-sm"], &["figs45"])).expect("the figs45 job runs");
    let csv = std::fs::read_to_string(out.join("figs45-recovery.csv")).expect("the figures");
    let rows: Vec<Vec<&str>> = csv
        .lines()
        .skip(1)
        .map(|l| l.split(',').collect())
        .collect();
    assert_eq!(rows.len(), 2, "{csv}");
    assert_eq!((rows[0][3], rows[1][3]), ("follower", "leader"), "{csv}");
    for row in &rows {
        assert_eq!(&row[..3], ["pmem-sm", "emulp", "3"], "{csv}");
        let before: f64 = row[5].parse().expect("before_ops");
        assert!(
            before > 0.0,
            "no command answered before the crashes: {csv}"
        );
        assert!(
            !row[9].is_empty(),
            "the restarted replica never voted: {csv}"
        );
    }
    let series = std::fs::read_to_string(out.join("figs45.csv")).expect("the series");
    for replica in 1..=3 {
        let answered: f64 = series
            .lines()
            .skip(1)
            .map(|l| l.split(',').collect::<Vec<_>>())
            .filter(|f| f[4] == replica.to_string())
            .map(|f| f[5].parse::<f64>().expect("answered_per_s"))
            .sum();
        assert!(answered > 0.0, "replica {replica} answered nothing");
    }
    assert!(out.join("figs45-pmem-sm-3.png").is_file());
    let summary = std::fs::read_to_string(out.join("summary.md")).expect("summary.md");
    assert!(summary.contains("Figs. 4–5"), "{summary}");
}

#[test]
fn unknown_modes_and_jobs_are_refused_by_name() {
    let out = PathBuf::from("unused");
    let err = run(&tiny(out.clone(), &["pmem-xx"], &[])).unwrap_err();
    assert!(err.contains("no recovery mode \"pmem-xx\""), "{err}");
    let err = tiny(out, &[], &["fig9"]).runs("restart").unwrap_err();
    assert!(err.contains("no job \"fig9\""), "{err}");
}
