//! The `logless bench ring` harness end to end at a tiny size: rings of 3 and 4 nodes with
//! R = 3, both series, the results written. It needs the debug `logless` binary of the same
//! target directory (`cargo build -p logless`).

mod common;

use std::path::PathBuf;

use common::logless;
use logless_bench::ring::{run, RingArgs};

fn tiny(out: PathBuf, nodes: &[u16], series: &[&str]) -> RingArgs {
    RingArgs {
        logless: Some(logless()),
        nodes: nodes.to_vec(),
        replication: 3,
        keys: 1_000,
        mix: vec!["set=1".into(), "get=2".into(), "incr=1".into()],
        clients: 4,
        clients_per_node: None,
        pipeline: 2,
        seconds: 0.5,
        series: series.iter().map(|s| s.to_string()).collect(),
        durability: "memory".into(),
        out,
        join: false,
        join_nodes: 5,
        join_keys: 300_000,
        baseline_seconds: 10.0,
        tail_seconds: 5.0,
    }
}

/// The rows of a CSV file, split at commas, with its header.
fn rows(text: &str) -> (Vec<&str>, Vec<Vec<&str>>) {
    let mut lines = text.lines();
    let header = lines.next().expect("a header").split(',').collect();
    (header, lines.map(|l| l.split(',').collect()).collect())
}

fn field(header: &[&str], row: &[&str], name: &str) -> f64 {
    let at = header.iter().position(|h| *h == name).expect(name);
    row[at]
        .parse()
        .unwrap_or_else(|_| panic!("{name}: {:?}", row[at]))
}

#[test]
fn rings_of_three_and_four_are_measured_routed_and_through_any_node() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let out = dir.path().join("ring");
    run(&tiny(out.clone(), &[4, 3], &[])).expect("the ring bench runs");

    let points = std::fs::read_to_string(out.join("points.csv")).expect("points.csv");
    let (header, points_rows) = rows(&points);
    let order: Vec<(&str, &str)> = points_rows.iter().map(|r| (r[0], r[1])).collect();
    assert_eq!(
        order,
        [
            ("routed", "3"),
            ("any-node", "3"),
            ("routed", "4"),
            ("any-node", "4")
        ],
        "{points}"
    );
    for row in &points_rows {
        assert!(
            field(&header, row, "ops") > 0.0,
            "no command answered: {points}"
        );
        // Routed clients ask a holder of every key (no MOVED), forwarded commands reach one
        // over a link that does not break: no error at all in either series.
        assert_eq!(field(&header, row, "errors"), 0.0, "{points}");
        assert!(field(&header, row, "ops_per_cpu_s") > 0.0, "{points}");
        let forwarded = field(&header, row, "forwarded_share");
        match (row[0], row[1]) {
            // Every node holds every key of a ring of three, and routed clients ask a holder.
            ("routed", _) | (_, "3") => assert_eq!(forwarded, 0.0, "{points}"),
            // A quarter of the commands reach the node that does not hold their key.
            _ => assert!(forwarded > 0.05 && forwarded < 0.5, "{points}"),
        }
    }

    let nodes = std::fs::read_to_string(out.join("nodes.csv")).expect("nodes.csv");
    let (header, node_rows) = rows(&nodes);
    assert_eq!(node_rows.len(), 2 * (3 + 4), "{nodes}");
    for row in &node_rows {
        let share = field(&header, row, "share");
        match row[1] {
            "3" => assert_eq!(share, 1.0, "{nodes}"),
            _ => assert!(
                share > 0.55 && share < 0.95,
                "3/4 of the keys each: {nodes}"
            ),
        }
        assert!(field(&header, row, "rss_bytes") > 0.0, "{nodes}");
    }
    for file in [
        "ops_per_cpu.png",
        "keys_share.png",
        "results.json",
        "summary.md",
    ] {
        assert!(out.join(file).is_file(), "{file} is missing");
    }
    let summary = std::fs::read_to_string(out.join("summary.md")).expect("summary.md");
    assert!(
        summary.contains("ops per CPU-s at N = 4 ÷ at N = 3") && summary.contains("Keys per node"),
        "{summary}"
    );
}

#[test]
fn bad_options_are_refused_by_name() {
    let out = PathBuf::from("unused");
    let err = run(&tiny(out.clone(), &[2], &[])).unwrap_err();
    assert!(err.contains("a ring of 2 cannot have 3 replicas"), "{err}");
    let err = run(&tiny(out.clone(), &[3], &["direct"])).unwrap_err();
    assert!(err.contains("no series \"direct\""), "{err}");
    let mut args = tiny(out.clone(), &[3], &[]);
    args.clients_per_node = Some(0);
    let err = run(&args).unwrap_err();
    assert!(err.contains("--clients-per-node"), "{err}");
    let mut args = tiny(out, &[3], &[]);
    args.mix = vec!["del=1".into()];
    let err = run(&args).unwrap_err();
    assert!(err.contains("no command \"del\""), "{err}");
}

/// A field of `row` by its header's name, as text.
fn text_field<'a>(header: &[&str], row: &[&'a str], name: &str) -> &'a str {
    row[header.iter().position(|h| *h == name).expect(name)]
}

#[test]
fn a_node_joins_a_loaded_ring_and_its_timeline_is_written() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let out = dir.path().join("join");
    let mut args = tiny(out.clone(), &[3], &["routed"]);
    args.join = true;
    args.join_nodes = 4;
    args.join_keys = 2_000;
    args.durability = "mmap".into();
    args.baseline_seconds = 1.0;
    args.tail_seconds = 1.0;
    run(&args).expect("the join bench runs");

    let timeline = std::fs::read_to_string(out.join("timeline.csv")).expect("timeline.csv");
    let (header, samples) = rows(&timeline);
    assert!(header.contains(&"node5_ops_per_s"), "{timeline}");
    let phase = |p: &str| -> Vec<&Vec<&str>> {
        samples
            .iter()
            .filter(|r| text_field(&header, r, "phase") == p)
            .collect()
    };
    let (baseline, tail) = (phase("baseline"), phase("tail"));
    assert!(baseline.len() >= 4, "{timeline}");
    assert!(!tail.is_empty(), "{timeline}");
    // Before the add the spare holds no slot and is sent nothing; at the end the ring is at
    // its next stable stage and the routed clients, redirected by MOVED, send to node 5.
    for row in &baseline {
        assert_eq!(field(&header, row, "node5_ops_per_s"), 0.0, "{timeline}");
        assert_eq!(text_field(&header, row, "stage"), "Stable(1)", "{timeline}");
    }
    assert!(
        baseline
            .iter()
            .any(|r| field(&header, r, "ops_per_s") > 0.0),
        "{timeline}"
    );
    let last = samples.last().expect("a sample");
    assert_eq!(
        text_field(&header, last, "stage"),
        "Stable(2)",
        "{timeline}"
    );
    assert!(field(&header, last, "keys_moved") > 0.0, "{timeline}");
    assert!(
        tail.iter()
            .any(|r| field(&header, r, "node5_ops_per_s") > 0.0),
        "{timeline}"
    );
    let redirects: f64 = samples.iter().map(|r| field(&header, r, "redirects")).sum();
    assert!(redirects > 0.0, "{timeline}");

    let json: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(out.join("results.json")).expect("results.json"),
    )
    .expect("JSON");
    let joined = &json["runs"][0];
    assert_eq!(joined["added_ok"], true, "{joined}");
    // Node 5 holds about R/(N+1) = 3/5 of the keys after the join.
    let share = joined["after"][4]["share"].as_f64().expect("a share");
    assert!(share > 0.45 && share < 0.75, "{joined}");
    assert!(out.join("join-routed.png").is_file());
    let summary = std::fs::read_to_string(out.join("summary.md")).expect("summary.md");
    assert!(
        summary.contains("A node joins a loaded ring") && summary.contains("| routed |"),
        "{summary}"
    );
}

#[test]
fn a_join_needs_stores_that_outlive_a_restart() {
    let mut args = tiny(PathBuf::from("unused"), &[3], &[]);
    args.join = true;
    let err = run(&args).unwrap_err();
    assert!(
        err.contains("--join needs nodes that keep their stores"),
        "{err}"
    );
    args.durability = "mmap".into();
    args.join_nodes = 3;
    let err = run(&args).unwrap_err();
    assert!(err.contains("--join-nodes"), "{err}");
}
