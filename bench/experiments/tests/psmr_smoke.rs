//! The `logless bench psmr` harness end to end on a tiny plan: one no-rep process and one
//! single-replica P-SMR cluster of the debug `logless` binary, each through reads, inserts and
//! deletes, skewed reads and a mix, and one no-rep process serving NetFS through Fig. 8's reads
//! and writes, with the digests checked and the results written. It needs
//! the debug `logless` binary of the same target directory (`cargo build -p logless`).

mod common;

use common::logless;
use indicatif::ProgressBar;
use logless_bench::psmr::load::{Keys, Workload};
use logless_bench::psmr::{measure_all, report, Mode, Settings, Stage, BASIC, NETFS};

#[test]
fn a_tiny_plan_measures_every_workload_and_writes_the_results() {
    let settings = Settings {
        threads: vec![2],
        duration_s: 0.3,
        warmup_s: 0.1,
        keys: 40,
        clients: 2,
        pipeline: 2,
        netfs_clients: 3,
        replicas: 1,
        mixes: vec![0.0, 0.5, 1.0],
        cores: 2,
    };
    let mut workloads = BASIC.to_vec();
    workloads.push(Workload {
        dependent: 0.5,
        keys: Keys::Uniform,
    });
    let mut stages: Vec<Stage> = [Mode::NoRep, Mode::Psmr]
        .into_iter()
        .map(|mode| Stage {
            mode,
            threads: 2,
            workloads: workloads.clone(),
            netfs: false,
        })
        .collect();
    stages.push(Stage {
        mode: Mode::NoRep,
        threads: 2,
        workloads: NETFS.to_vec(),
        netfs: true,
    });
    let records = measure_all(&logless(), &settings, &stages, &ProgressBar::hidden())
        .expect("the tiny plan runs with equal digests");
    assert_eq!(records.len(), 10);
    let netfs: Vec<f64> = (records.iter().filter(|r| r.keys == "netfs"))
        .map(|r| r.dependent_pct)
        .collect();
    assert_eq!(netfs, [0.0, 100.0], "NetFS reads, then writes");
    for r in &records {
        assert!(r.ops_per_s > 0.0, "{r:?}");
        assert!(r.cpu_us_per_op >= 0.0 && r.latency_ms > 0.0, "{r:?}");
    }
    assert_eq!(
        records.iter().map(|r| r.dependent_pct).collect::<Vec<_>>(),
        vec![0.0, 100.0, 0.0, 50.0, 0.0, 100.0, 0.0, 50.0, 0.0, 100.0]
    );
    let out = tempfile::tempdir().expect("a temporary directory");
    let summary = report::write(out.path(), &settings, &records, "(test)").expect("results");
    assert!(summary.contains("NetFS"), "{summary}");
    assert!(summary.contains("each of the 3 clients"), "{summary}");
    for file in [
        "results.csv",
        "summary.md",
        "fig3-independent.png",
        "fig4-dependent.png",
        "fig5-threads.png",
        "fig6-mixes.png",
        "fig7-skew.png",
        "fig8-netfs.png",
    ] {
        assert!(out.path().join(file).is_file(), "{file} is missing");
    }
}
