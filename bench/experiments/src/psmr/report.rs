//! The results of `logless bench psmr`: `results.csv`, the figures in seed 004's shapes
//! (`fig3-independent.png` … `fig8-netfs.png`) and `summary.md` with the goals.
use std::fmt::Write as _;
use std::path::Path;

use super::{Mode, Record, Settings};
use crate::plot::{draw_with, Axes, Line, Panel};

/// The goal for independent commands: P-SMR with t threads ≥ this × t × SMR.
pub const INDEPENDENT_GOAL: f64 = 0.9;
/// The goal for dependent-only commands: P-SMR ≥ this × SMR.
pub const DEPENDENT_GOAL: f64 = 0.9;
/// The goal for NetFS (Fig. 8): P-SMR at the most threads ≥ this × SMR.
pub const NETFS_GOAL: f64 = 2.0;

/// The `keys` of Fig. 8's records.
const NETFS: &str = "netfs";

/// A value drawn for a record with `threads` threads, given the first record of its line.
type Value = dyn Fn(u32, &Record, Option<&Record>) -> f64;

/// Which records a line shows.
#[derive(Clone, Copy)]
struct Select {
    mode: Mode,
    dependent_pct: f64,
    keys: &'static str,
}

impl Select {
    fn matches(&self, r: &Record) -> bool {
        r.mode == self.mode.name() && r.dependent_pct == self.dependent_pct && r.keys == self.keys
    }
}

/// The records of `sel` by thread count. SMR, measured once, is repeated at every count of
/// `threads` (one executing thread whatever the count).
fn by_threads<'a>(records: &'a [Record], threads: &[u32], sel: Select) -> Vec<(u32, &'a Record)> {
    let mine = records.iter().filter(|r| sel.matches(r));
    if sel.mode == Mode::Smr {
        return match mine.clone().next() {
            Some(r) => threads.iter().map(|&t| (t, r)).collect(),
            None => Vec::new(),
        };
    }
    let mut out: Vec<(u32, &Record)> = mine.map(|r| (r.threads, r)).collect();
    out.sort_by_key(|(t, _)| *t);
    out
}

/// The record of `mode` with `threads` (any, for SMR) for `dependent_pct` and `keys`.
fn find<'a>(
    records: &'a [Record],
    mode: Mode,
    threads: u32,
    dependent_pct: f64,
    keys: &str,
) -> Option<&'a Record> {
    records.iter().find(|r| {
        r.mode == mode.name()
            && (mode == Mode::Smr || r.threads == threads)
            && r.dependent_pct == dependent_pct
            && r.keys == keys
    })
}

fn label(mode: Mode) -> String {
    match mode {
        Mode::Smr => "smr (1 thread)".into(),
        m => m.name().into(),
    }
}

/// Panels of `value` against threads, one line per mode.
fn against_threads(
    records: &[Record],
    threads: &[u32],
    dependent_pct: f64,
    keys: &'static str,
    panels: &[(&str, &Value)],
) -> Vec<Panel> {
    panels
        .iter()
        .map(|(title, value)| Panel {
            title: title.to_string(),
            lines: super::MODES
                .iter()
                .map(|&mode| {
                    let sel = Select {
                        mode,
                        dependent_pct,
                        keys,
                    };
                    let points = by_threads(records, threads, sel);
                    let first = points.first().map(|(_, r)| *r);
                    Line {
                        label: label(mode),
                        points: points
                            .iter()
                            .map(|(t, r)| (f64::from(*t), value(*t, r, first)))
                            .collect(),
                    }
                })
                .filter(|l| !l.points.is_empty())
                .collect(),
        })
        .collect()
}

fn kcps(_: u32, r: &Record, _: Option<&Record>) -> f64 {
    r.ops_per_s / 1000.0
}

fn cpu(_: u32, r: &Record, _: Option<&Record>) -> f64 {
    r.cpu_us_per_op
}

fn latency(_: u32, r: &Record, _: Option<&Record>) -> f64 {
    r.latency_ms
}

/// Throughput per thread as a percentage of the line's first point's (100 = perfect scaling);
/// not drawn (NaN) for SMR's one record repeated at other thread counts.
fn per_thread(t: u32, r: &Record, first: Option<&Record>) -> f64 {
    match first {
        Some(f) if f.ops_per_s > 0.0 && r.threads == t => {
            100.0 * r.ops_per_s / f64::from(t) / (f.ops_per_s / f64::from(f.threads.max(1)))
        }
        _ => f64::NAN,
    }
}

fn draw(
    out: &Path,
    file: &str,
    caption: &str,
    x: &str,
    y: &str,
    panels: &[Panel],
) -> Result<(), String> {
    let axes = Axes {
        x_log: false,
        y_log: false,
        markers: Vec::new(),
        marker_label: String::new(),
    };
    draw_with(&out.join(file), caption, x, y, panels, &axes)
        .map_err(|e| format!("cannot draw {file}: {e}"))
}

fn figures(out: &Path, s: &Settings, records: &[Record]) -> Result<(), String> {
    if records.iter().any(|r| r.keys != NETFS) {
        kv_figures(out, s, records)?;
    }
    if records.iter().any(|r| r.keys == NETFS) {
        let two: [(&str, &Value); 2] = [
            ("throughput (Kcps)", &kcps),
            ("server CPU per command (µs)", &cpu),
        ];
        let mut fig8 = against_threads(records, &s.threads, 0.0, NETFS, &two);
        fig8.extend(against_threads(records, &s.threads, 100.0, NETFS, &two));
        for (panel, what) in fig8.iter_mut().zip(["reads", "reads", "writes", "writes"]) {
            panel.title = format!("{what}: {}", panel.title);
        }
        draw(
            out,
            "fig8-netfs.png",
            "Fig. 8: NetFS reads (left) and writes (right) of 1 kB",
            "worker threads",
            "",
            &fig8,
        )?;
    }
    Ok(())
}

/// Figs. 3–7, the key-value service's.
fn kv_figures(out: &Path, s: &Settings, records: &[Record]) -> Result<(), String> {
    let t = &s.threads;
    let three: [(&str, &Value); 3] = [
        ("throughput (Kcps)", &kcps),
        ("server CPU per command (µs)", &cpu),
        ("mean latency (ms)", &latency),
    ];
    draw(
        out,
        "fig3-independent.png",
        "Fig. 3: independent commands (reads, uniform keys)",
        "worker threads",
        "",
        &against_threads(records, t, 0.0, "uniform", &three),
    )?;
    draw(
        out,
        "fig4-dependent.png",
        "Fig. 4: dependent commands (inserts and deletes)",
        "worker threads",
        "",
        &against_threads(records, t, 100.0, "uniform", &three),
    )?;
    let scaling: [(&str, &Value); 2] = [
        ("throughput (Kcps)", &kcps),
        ("per-thread throughput, % of the first", &per_thread),
    ];
    let mut fig5 = against_threads(records, t, 0.0, "uniform", &scaling);
    fig5.extend(against_threads(records, t, 100.0, "uniform", &scaling));
    for (panel, what) in
        fig5.iter_mut()
            .zip(["independent", "independent", "dependent", "dependent"])
    {
        panel.title = format!("{what}: {}", panel.title);
    }
    draw(
        out,
        "fig5-threads.png",
        "Fig. 5: threads against independent (left) and dependent (right) commands",
        "worker threads",
        "",
        &fig5,
    )?;
    let most = t.iter().copied().max().unwrap_or(1);
    let mix_line = |mode: Mode, value: fn(&Record) -> f64| Line {
        label: if mode == Mode::Psmr {
            format!("psmr ({most} threads)")
        } else {
            label(mode)
        },
        points: s
            .mixes
            .iter()
            .filter_map(|&m| find(records, mode, most, m * 100.0, "uniform"))
            .map(|r| (r.dependent_pct, value(r)))
            .collect(),
    };
    let fig6: Vec<Panel> = [
        (
            "throughput (Kcps)",
            (|r: &Record| r.ops_per_s / 1000.0) as fn(&Record) -> f64,
        ),
        ("mean latency (ms)", |r: &Record| r.latency_ms),
        ("server CPU per command (µs)", |r: &Record| r.cpu_us_per_op),
    ]
    .into_iter()
    .map(|(title, value)| Panel {
        title: title.into(),
        lines: vec![mix_line(Mode::Psmr, value), mix_line(Mode::Smr, value)],
    })
    .collect();
    draw(
        out,
        "fig6-mixes.png",
        "Fig. 6: reads mixed with inserts and deletes",
        "% dependent commands",
        "",
        &fig6,
    )?;
    let mut fig7 = Vec::new();
    for (title, value) in scaling {
        let mut lines = Vec::new();
        for mode in [Mode::Psmr, Mode::SpSmr, Mode::NoRep] {
            for keys in ["uniform", "zipf"] {
                let sel = Select {
                    mode,
                    dependent_pct: 0.0,
                    keys,
                };
                let points = by_threads(records, t, sel);
                let first = points.first().map(|(_, r)| *r);
                lines.push(Line {
                    label: format!("{} {keys}", mode.name()),
                    points: points
                        .iter()
                        .map(|(t, r)| (f64::from(*t), value(*t, r, first)))
                        .collect(),
                });
            }
        }
        fig7.push(Panel {
            title: title.into(),
            lines,
        });
    }
    draw(
        out,
        "fig7-skew.png",
        "Fig. 7: reads of Zipf(1)-skewed keys against uniform ones",
        "worker threads",
        "",
        &fig7,
    )
}

/// The results as CSV, one line per point.
pub fn csv(records: &[Record]) -> String {
    let mut s = String::from(
        "mode,threads,dependent_pct,keys,ops_per_s,latency_ms,cpu_us_per_op,cpu_cores\n",
    );
    for r in records {
        let _ = writeln!(
            s,
            "{},{},{},{},{:.1},{:.3},{:.2},{:.3}",
            r.mode,
            r.threads,
            r.dependent_pct,
            r.keys,
            r.ops_per_s,
            r.latency_ms,
            r.cpu_us_per_op,
            r.cpu_cores
        );
    }
    s
}

/// One goal's line: what was measured against what was asked.
#[derive(Clone, Debug, PartialEq)]
pub struct Goal {
    /// What is compared.
    pub what: String,
    /// The measured ratio.
    pub ratio: f64,
    /// The ratio asked for.
    pub goal: f64,
}

/// The goals as this run measured them: P-SMR with t threads against t × SMR on
/// independent commands at every thread count, and P-SMR against SMR on dependent-only
/// commands at the most threads.
pub fn goals(s: &Settings, records: &[Record]) -> Vec<Goal> {
    let mut out = Vec::new();
    let smr = |dep: f64| find(records, Mode::Smr, 1, dep, "uniform").map(|r| r.ops_per_s);
    if let Some(smr_reads) = smr(0.0) {
        for &t in &s.threads {
            if let Some(p) = find(records, Mode::Psmr, t, 0.0, "uniform") {
                out.push(Goal {
                    what: format!("independent (reads): P-SMR {t} threads / SMR"),
                    ratio: p.ops_per_s / smr_reads,
                    goal: INDEPENDENT_GOAL * f64::from(t),
                });
            }
        }
    }
    let most = s.threads.iter().copied().max().unwrap_or(1);
    if let (Some(smr_dep), Some(p)) = (
        smr(100.0),
        find(records, Mode::Psmr, most, 100.0, "uniform"),
    ) {
        out.push(Goal {
            what: format!("dependent only (inserts/deletes): P-SMR {most} threads / SMR"),
            ratio: p.ops_per_s / smr_dep,
            goal: DEPENDENT_GOAL,
        });
    }
    for (pct, what) in [(0.0, "reads"), (100.0, "writes")] {
        if let (Some(smr), Some(p)) = (
            find(records, Mode::Smr, 1, pct, NETFS),
            find(records, Mode::Psmr, most, pct, NETFS),
        ) {
            out.push(Goal {
                what: format!("NetFS (Fig. 8) {what} of 1 kB: P-SMR {most} threads / SMR"),
                ratio: p.ops_per_s / smr.ops_per_s,
                goal: NETFS_GOAL,
            });
        }
    }
    out
}

fn table(records: &[Record]) -> String {
    let mut s = String::from(
        "| mode | threads | % dependent | keys | Kcps | mean latency (ms) | CPU µs/command | cores busy |\n\
         | --- | ---: | ---: | --- | ---: | ---: | ---: | ---: |\n",
    );
    for r in records {
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {:.1} | {:.2} | {:.1} | {:.2} |",
            r.mode,
            r.threads,
            r.dependent_pct,
            r.keys,
            r.ops_per_s / 1000.0,
            r.latency_ms,
            r.cpu_us_per_op,
            r.cpu_cores
        );
    }
    s
}

/// The markdown summary.
pub fn summary(s: &Settings, records: &[Record], command: &str) -> String {
    let mut out = String::from("# P-SMR against sP-SMR, SMR and no replication\n\n");
    let _ = writeln!(
        out,
        "The B⁺-tree key-value service under `logless up --engine psmr --psmr-mode M --threads T` \
         ({} replicas; no-rep: 1; `--durability mmap`), {} keys preloaded, {} closed-loop \
         clients with {} commands in flight each, spread over the replicas and run by the \
         benchmark on the same machine. {} s measured per point after {} s of warm-up; this \
         machine offers {} cores. Latency is the mean by Little's law (commands in flight / \
         throughput); CPU is the server processes' user + system time (all replicas) per \
         command. After every point the replicas' `LOGLESS.DIGEST` values were equal, and equal \
         to the digest after the preload.\n",
        s.replicas, s.keys, s.clients, s.pipeline, s.duration_s, s.warmup_s, s.cores
    );
    out.push_str("## Goals\n\n| goal | measured | asked | |\n| --- | ---: | ---: | --- |\n");
    for g in goals(s, records) {
        let _ = writeln!(
            out,
            "| {} | {:.2}× | ≥ {:.2}× | {} |",
            g.what,
            g.ratio,
            g.goal,
            if g.ratio >= g.goal { "met" } else { "missed" }
        );
    }
    out.push('\n');
    if records.iter().any(|r| r.keys == NETFS) {
        let _ = writeln!(
            out,
            "NetFS (Fig. 8): `--service netfs`, each of the {} clients reading or writing 1 kB \
             of a file of its own through `LOGLESS.FS`, one call in flight each (keys `netfs` \
             below: 0% dependent are reads, 100% writes).\n",
            s.netfs_clients
        );
    }
    let most = s.threads.iter().copied().max().unwrap_or(1);
    if let (Some(smr), Some(p)) = (
        find(records, Mode::Smr, 1, 0.0, "uniform"),
        find(records, Mode::Psmr, most, 0.0, "uniform"),
    ) {
        let _ = writeln!(
            out,
            "Parallel efficiency on reads: SMR spends {:.1} µs of server CPU per command, P-SMR \
             with {most} threads {:.1} µs ({:.2} cores busy). With c cores free for the servers, \
             P-SMR's ceiling is about c / CPU per command, so CPU per command, not throughput, \
             shows whether more threads would pay where cores are few.\n",
            smr.cpu_us_per_op, p.cpu_us_per_op, p.cpu_cores
        );
    }
    out.push_str("## Points\n\n");
    out.push_str(&table(records));
    out.push_str(
        "\nFigures: fig3-independent.png (reads), fig4-dependent.png (inserts/deletes), \
         fig5-threads.png (scaling and per-thread throughput), fig6-mixes.png (0–100% \
         dependent), fig7-skew.png (Zipf keys), fig8-netfs.png (NetFS reads and writes of \
         1 kB); with --netfs-only, Fig. 8 alone.\n\n",
    );
    let _ = writeln!(out, "Command: `logless bench psmr {command}`");
    out
}

/// Writes results.csv, the figures and summary.md into `out`; returns the summary.
pub fn write(
    out: &Path,
    s: &Settings,
    records: &[Record],
    command: &str,
) -> Result<String, String> {
    let file = |name: &str, text: &str| {
        std::fs::write(out.join(name), text)
            .map_err(|e| format!("cannot write {}: {e}", out.join(name).display()))
    };
    file("results.csv", &csv(records))?;
    figures(out, s, records)?;
    let text = summary(s, records, command);
    file("summary.md", &text)?;
    Ok(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(mode: Mode, threads: u32, dependent_pct: f64, ops_per_s: f64) -> Record {
        Record {
            mode: mode.name(),
            threads,
            dependent_pct,
            keys: "uniform",
            ops_per_s,
            latency_ms: 1.0,
            cpu_us_per_op: 10.0,
            cpu_cores: 1.0,
        }
    }

    fn settings(threads: Vec<u32>) -> Settings {
        Settings {
            threads,
            duration_s: 1.0,
            warmup_s: 0.1,
            keys: 10,
            clients: 1,
            pipeline: 1,
            netfs_clients: 1,
            replicas: 3,
            mixes: vec![0.0, 1.0],
            cores: 2,
        }
    }

    #[test]
    fn goals_compare_psmr_with_t_times_smr_and_dependent_with_smr() {
        let records = [
            record(Mode::Smr, 1, 0.0, 100.0),
            record(Mode::Smr, 1, 100.0, 50.0),
            record(Mode::Psmr, 1, 0.0, 95.0),
            record(Mode::Psmr, 4, 0.0, 300.0),
            record(Mode::Psmr, 4, 100.0, 40.0),
        ];
        let g = goals(&settings(vec![1, 4]), &records);
        let ratios: Vec<(f64, f64)> = g.iter().map(|g| (g.ratio, g.goal)).collect();
        assert_eq!(ratios, vec![(0.95, 0.9), (3.0, 3.6), (0.8, 0.9)]);
        let text = summary(&settings(vec![1, 4]), &records, "--quick");
        assert!(text.contains("| 0.95× | ≥ 0.90× | met |"), "{text}");
        assert!(text.contains("| 3.00× | ≥ 3.60× | missed |"), "{text}");
    }

    #[test]
    fn netfs_goals_compare_psmr_at_the_most_threads_with_twice_smr() {
        let netfs = |mode, threads, dependent_pct, ops_per_s| Record {
            keys: NETFS,
            ..record(mode, threads, dependent_pct, ops_per_s)
        };
        let records = [
            netfs(Mode::Smr, 1, 0.0, 100.0),
            netfs(Mode::Smr, 1, 100.0, 100.0),
            netfs(Mode::Psmr, 2, 0.0, 250.0),
            netfs(Mode::Psmr, 2, 100.0, 150.0),
        ];
        let g = goals(&settings(vec![1, 2]), &records);
        let ratios: Vec<(f64, f64)> = g.iter().map(|g| (g.ratio, g.goal)).collect();
        assert_eq!(ratios, vec![(2.5, 2.0), (1.5, 2.0)]);
        let text = summary(&settings(vec![1, 2]), &records, "--netfs-only");
        assert!(text.contains("NetFS (Fig. 8) reads of 1 kB"), "{text}");
        assert!(text.contains("| 1.50× | ≥ 2.00× | missed |"), "{text}");
    }

    #[test]
    fn smr_is_drawn_at_every_thread_count_and_scaling_is_per_thread() {
        let records = [
            record(Mode::Smr, 1, 0.0, 100.0),
            record(Mode::Psmr, 2, 0.0, 150.0),
            record(Mode::Psmr, 1, 0.0, 100.0),
        ];
        let sel = |mode| Select {
            mode,
            dependent_pct: 0.0,
            keys: "uniform",
        };
        let smr = by_threads(&records, &[1, 2, 4], sel(Mode::Smr));
        assert_eq!(
            smr.iter().map(|(t, _)| *t).collect::<Vec<_>>(),
            vec![1, 2, 4]
        );
        let psmr = by_threads(&records, &[1, 2], sel(Mode::Psmr));
        assert_eq!(psmr[0].0, 1);
        assert_eq!(per_thread(2, psmr[1].1, Some(psmr[0].1)), 75.0);
        assert!(per_thread(2, smr[1].1, Some(smr[0].1)).is_nan());
        assert!(csv(&records)
            .lines()
            .nth(1)
            .unwrap()
            .starts_with("smr,1,0,uniform,100.0,"));
    }
}
