//! The summary of a run and its exit status.
use std::path::Path;

use crate::checker::Verdict;
use crate::digests::Digests;
use crate::multikey::MultiKeyReport;
use crate::run::{Report, RunConfig};
use crate::workload::KeyKind;

/// Exit status: the history is linearizable, no write was lost, and the run was a real test
/// (enough acknowledged operations, enough kinds of faults, the cluster recovered).
pub const EXIT_PASS: u8 = 0;
/// Exit status: the store violated its guarantees (not linearizable, a lost write, or, under
/// psmr, replicas whose states differ at the end).
pub const EXIT_VIOLATION: u8 = 1;
/// Exit status: bad command line.
pub const EXIT_USAGE: u8 = 2;
/// Exit status: no violation found, but the run proves nothing (too little load or too few
/// faults, the checker timed out, the cluster did not recover, a replica exited on its own,
/// or the harness failed).
pub const EXIT_INCONCLUSIVE: u8 = 3;

/// What makes a run count.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// Acknowledged workload operations needed.
    pub min_ok: usize,
    /// Distinct injected fault kinds needed.
    pub min_fault_kinds: usize,
}

/// Prints what is about to run.
pub fn print_header(config: &RunConfig) {
    let kinds: Vec<&str> = config.schedule.kinds.iter().map(|k| k.name()).collect();
    let engine = match &config.cluster.psmr {
        Some(psmr) => format!(
            "{} {} with {} threads",
            config.cluster.engine, psmr.mode, psmr.threads
        ),
        None => match &config.cluster.recovery {
            Some(recovery) => format!("{}, recovery {recovery}", config.cluster.engine),
            None => config.cluster.engine.clone(),
        },
    };
    println!(
        "logless-chaos: {} replicas{} ({}, {}), {} s, {} clients on {} keys at a time, seed {}, \
         faults [{}]{}",
        config.replicas,
        if config.spares > 0 {
            format!(" and {} spares", config.spares)
        } else {
            String::new()
        },
        engine,
        config.cluster.durability,
        config.duration.as_secs(),
        config.workload.clients,
        config.workload.keys,
        config.workload.seed,
        kinds.join(", "),
        if config.cluster.bugs.is_empty() {
            String::new()
        } else {
            format!(", injected bugs {:?}", config.cluster.bugs)
        }
    );
    let key_kinds: Vec<&str> = config.workload.kinds.iter().map(|k| k.name()).collect();
    println!(
        "logless-chaos: keys [{}], stamp windows from {} ms before the call",
        key_kinds.join(", "),
        config.workload.stamp_slack_ms
    );
    println!("logless-chaos: output in {}", config.out.display());
}

/// Prints the summary and returns the exit status.
pub fn print(report: &Report, limits: &Limits, out: &Path) -> u8 {
    let w = &report.workload;
    println!(
        "operations:  {} (ok {}, fail {}, unknown {}) in {:.1} s, {:.0} ops/s; final reads {} \
         (ok {}, fail {}, unknown {})",
        w.total(),
        w.ok,
        w.fail,
        w.unknown,
        report.workload_secs,
        w.total() as f64 / report.workload_secs.max(0.001),
        report.final_reads.total(),
        report.final_reads.ok,
        report.final_reads.fail,
        report.final_reads.unknown,
    );
    let by_kind: Vec<String> = report
        .by_kind
        .iter()
        .map(|(k, c)| {
            format!(
                "{} {} (ok {}, fail {}, unknown {})",
                k.name(),
                c.total(),
                c.ok,
                c.fail,
                c.unknown
            )
        })
        .collect();
    println!("by kind:     {}", by_kind.join("; "));
    let timed: usize = (report.by_kind.iter())
        .filter(|(k, _)| k.is_timed())
        .map(|(_, c)| c.total())
        .sum();
    let e = &report.expiry;
    println!(
        "expiry:      {timed} operations on expiring keys and locks; {} reads found a key \
         expired (and {} final reads); {} leases taken over, {} acquisitions refused",
        e.expired_reads, e.expired_final_reads, e.takeovers, e.refused
    );
    if !report.removed.is_empty() {
        let by_node: Vec<String> = (report.removed.iter())
            .map(|(id, n)| format!("node {id} {n}"))
            .collect();
        println!(
            "removals:    {} registers removed by the replicas, at least ({})",
            report.removed.values().sum::<u64>(),
            by_node.join(", ")
        );
    }
    let faults: Vec<String> = report
        .faults
        .iter()
        .map(|(k, n)| format!("{} {n}", k.name()))
        .collect();
    println!(
        "faults:      {}",
        if faults.is_empty() {
            "none".to_string()
        } else {
            faults.join(", ")
        }
    );
    if let Some(m) = &report.membership {
        let done: Vec<String> = (m.completed.iter())
            .map(|(c, took)| format!("{} in {:.1} s", c.describe(), took.as_secs_f64()))
            .collect();
        let k = &m.coordinators_killed;
        println!(
            "membership:  {} changes completed ({}), {} attempts failed, coordinator killed {} \
             ({} in the joint stage; {} changes finished by another member, {} found complete, \
             {} answered first); members now {:?}",
            m.completed.len(),
            done.join(", "),
            m.failed.len(),
            k.killed,
            k.in_joint,
            k.finished_by_another,
            k.found_complete,
            k.spared,
            m.members
        );
        if m.failed_but_complete > 0 {
            println!(
                "             {} changes whose command failed were complete in the stage \
                 register",
                m.failed_but_complete
            );
        }
        for (c, why) in m.failed.iter().take(5) {
            println!("             {} failed: {why}", c.describe());
        }
    }
    if let Some(o) = &report.overlaps {
        println!(
            "overlaps:    {} of {} change attempts overlapped a partition or a pause ({} a \
             partition, {} a pause, {} under one from before the ask to after the end), {} a \
             kill of the main lane",
            o.either, o.changes, o.partition, o.pause, o.spanned, o.kill
        );
    }
    let keys: Vec<String> = report
        .keys
        .iter()
        .map(|(k, n)| format!("{} {n}", k.name()))
        .collect();
    println!(
        "keys:        {} ({})",
        report.keys.values().sum::<usize>(),
        keys.join(", ")
    );
    match report.recovered {
        Some(d) => println!(
            "recovery:    serving {:.1} s after the final heal",
            d.as_secs_f64()
        ),
        None => println!("recovery:    the cluster did NOT serve again in time"),
    }
    println!(
        "checker:     {} in {:.1} s",
        report.verdict.describe(),
        report.checker_secs
    );
    for line in report.checker_output.lines() {
        println!("             {}", shortened(line));
    }
    print_multi_key(&report.multi_key);
    if report.lost.is_empty() {
        println!("lost writes: none");
    } else {
        println!("lost writes: {}", report.lost.len());
        for l in report.lost.iter().take(20) {
            println!("             {}: {}", l.key, l.why);
        }
    }
    if !report.odd_replies.is_empty() {
        println!(
            "odd replies: {} (recorded as unknown), e.g.",
            report.odd_replies.len()
        );
        for r in report.odd_replies.iter().take(5) {
            println!("             {r}");
        }
    }
    print_digests(report.digests.as_ref());
    println!(
        "files:       {}/history.jsonl, faults.jsonl, node-*.log, html/",
        out.display()
    );

    let violation = report.verdict == Verdict::NotLinearizable
        || !report.lost.is_empty()
        || report.multi_key.violated()
        || report.digests.as_ref().is_some_and(Digests::differ);
    if violation {
        println!(
            "verdict:     VIOLATION (see the checker's html/, the lost writes, the multi-key \
             groups and the digests above)"
        );
        return EXIT_VIOLATION;
    }
    let mut reasons = Vec::new();
    if report.verdict != Verdict::Linearizable {
        reasons.push(format!(
            "the checker did not pass: {}",
            report.verdict.describe()
        ));
    }
    let m = &report.multi_key;
    let acknowledged = w.ok + m.transfers + m.msets + m.mgets + m.wide_msets + m.wide_mgets;
    if acknowledged < limits.min_ok {
        reasons.push(format!(
            "only {acknowledged} operations were acknowledged (at least {} needed)",
            limits.min_ok
        ));
    }
    if m.inconclusive > 0 {
        reasons.push(format!(
            "the atomicity checker gave no verdict on {} multi-key group(s)",
            m.inconclusive
        ));
    }
    let injected = report
        .faults
        .keys()
        .filter(|k| **k != crate::nemesis::FaultKind::Crash)
        .count();
    if injected < limits.min_fault_kinds {
        reasons.push(format!(
            "only {injected} kind(s) of fault were injected (at least {} needed)",
            limits.min_fault_kinds
        ));
    }
    if let Some(n) = report.faults.get(&crate::nemesis::FaultKind::Crash) {
        reasons.push(format!(
            "{n} time(s) a replica exited on its own (see faults.jsonl and node-*.log)"
        ));
    }
    // Keys that may expire are there to test expiry: a run in which none was seen to expire,
    // or no lease to run out, has not tested it.
    let uses = |kind| report.keys.contains_key(&kind);
    if uses(KeyKind::Expiring) && report.expiry.expired_reads == 0 {
        reasons.push("no read found an expiring key expired".into());
    }
    if uses(KeyKind::Lock) && report.expiry.takeovers == 0 {
        reasons.push("no lock's lease ran out and was taken over".into());
    }
    if report
        .membership
        .as_ref()
        .is_some_and(|m| m.completed.is_empty())
    {
        reasons.push("no change of the ring's membership completed".into());
    }
    if report.recovered.is_none() {
        reasons.push("the cluster did not serve again after the final heal".into());
    }
    if let Some(Digests::Unreadable(why)) = &report.digests {
        reasons.push(format!(
            "the replicas' digests could not be compared: {why}"
        ));
    }
    if !report.unread.is_empty() {
        reasons.push(format!(
            "{} key(s) could not be read at the end",
            report.unread.len()
        ));
    }
    if reasons.is_empty() {
        println!("verdict:     PASS");
        EXIT_PASS
    } else {
        println!("verdict:     INCONCLUSIVE (no violation found, but the run proves nothing):");
        for r in reasons {
            println!("             {r}");
        }
        EXIT_INCONCLUSIVE
    }
}

/// The digests' line (nothing when the engine has none to compare).
fn print_digests(digests: Option<&Digests>) {
    match digests {
        None => {}
        Some(Digests::Equal { digest, after }) => println!(
            "digests:     equal on every replica ({digest}, {:.1} s after the final reads)",
            after.as_secs_f64()
        ),
        Some(Digests::Differ(digests)) => {
            println!("digests:     DIFFER (the replicas' states diverged):");
            for (i, digest) in digests.iter().enumerate() {
                println!("             node {}: {digest}", i + 1);
            }
        }
        Some(Digests::Unreadable(why)) => println!("digests:     not compared: {why}"),
    }
}

/// The checker's list of keys not linearizable can name thousands of keys; the summary shows the
/// first 20 (the whole output is in the run's `checker.txt`).
/// The multi-key workload's line (nothing when it did not run) and its violations.
fn print_multi_key(m: &MultiKeyReport) {
    if m.groups == 0 {
        return;
    }
    println!(
        "multi-key:   {} groups; transfers {}, MSETs {}, MGETs {} answered; {} wide groups, \
         MSETs {}, MGETs {} answered; {} unknown, {} refused; atomicity {}",
        m.groups,
        m.transfers,
        m.msets,
        m.mgets,
        m.wide_groups,
        m.wide_msets,
        m.wide_mgets,
        m.unknown,
        m.failed,
        if m.violated() {
            format!("VIOLATED in {} group(s)", m.violations.len())
        } else if m.inconclusive > 0 {
            format!("no verdict on {} group(s)", m.inconclusive)
        } else {
            "ok".to_string()
        }
    );
    for v in m.violations.iter().take(10) {
        println!("             {v}");
    }
    if !m.odd_replies.is_empty() {
        println!(
            "             {} odd replies (recorded as unknown), e.g. {}",
            m.odd_replies.len(),
            m.odd_replies[0]
        );
    }
}

fn shortened(line: &str) -> String {
    const KEYS_SHOWN: usize = 20;
    let Some(list) = line.strip_prefix("not linearizable: [") else {
        return line.to_string();
    };
    let keys: Vec<&str> = list.trim_end_matches(']').split_whitespace().collect();
    if keys.len() <= KEYS_SHOWN {
        return line.to_string();
    }
    format!(
        "not linearizable: {} keys, the first {KEYS_SHOWN}: [{} ...]",
        keys.len(),
        keys[..KEYS_SHOWN].join(" ")
    )
}

#[cfg(test)]
mod tests {
    use super::shortened;

    #[test]
    fn long_lists_of_keys_are_shortened() {
        let keys: Vec<String> = (0..30).map(|i| format!("\"k{i}\"")).collect();
        let line = format!("not linearizable: [{}]", keys.join(" "));
        let short = shortened(&line);
        assert!(short.starts_with("not linearizable: 30 keys, the first 20: [\"k0\" "));
        assert!(short.ends_with("\"k19\" ...]"), "{short}");
        assert_eq!(
            shortened("not linearizable: [\"k1\"]"),
            "not linearizable: [\"k1\"]"
        );
        assert_eq!(shortened("exit status 1"), "exit status 1");
    }
}
