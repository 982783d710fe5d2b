//! The results of `logless bench recovery`: CSV, JSON, PNG and summary.md.
use std::fmt::Write as _;
use std::path::Path;

use serde::Serialize;

use crate::plot::{draw_with, Axes, Line, Panel};

use super::restart::RestartPoint;
use super::throughput::Point;
use super::timeline::Run;
use super::{timeline_report, MODES};

/// Seed 002's restart anchors at 200 MB, ms: JPaxos+epochs votes after 1.7 s, JPaxos+SS has
/// restored its snapshot after 1.14 s, mPaxos votes at once and is running after 0.42 s.
pub const ANCHORS: [(&str, &str); 3] = [
    (
        "epoch",
        "votes and serves after 1.7 s (1.6 s of it catch-up)",
    ),
    ("fullss", "restored after 1.14 s"),
    ("pmem", "votes at once, running after 0.42 s"),
];

/// Everything measured in one run.
#[derive(Debug, Default, Serialize)]
pub struct Results {
    /// The command line.
    pub command: String,
    /// Job 1.
    pub restart: Vec<RestartPoint>,
    /// Job 2.
    pub table2: Vec<Point>,
    /// Job 3.
    pub fig3: Vec<Point>,
    /// Job 4.
    pub figs45: Vec<Run>,
}

/// Writes every file of `results` into `out` (those of the jobs that ran) and returns the
/// summary.
pub fn write(out: &Path, results: &Results) -> Result<String, String> {
    let put = |name: &str, text: &str| {
        std::fs::write(out.join(name), text).map_err(|e| format!("{name}: {e}"))
    };
    if !results.restart.is_empty() {
        put("restart.csv", &restart_csv(&results.restart))?;
        plot_restart(&out.join("restart.png"), &results.restart)?;
    }
    if !results.table2.is_empty() {
        put("table2.csv", &points_csv(&results.table2))?;
    }
    if !results.fig3.is_empty() {
        put("fig3.csv", &points_csv(&results.fig3))?;
        plot_fig3(&out.join("fig3.png"), &results.fig3)?;
    }
    if !results.figs45.is_empty() {
        timeline_report::write(out, &results.figs45)?;
    }
    let json = serde_json::to_string_pretty(results).map_err(|e| e.to_string())?;
    put("results.json", &json)?;
    let text = summary(results);
    put("summary.md", &text)?;
    Ok(text)
}

/// `restart.csv`.
pub fn restart_csv(points: &[RestartPoint]) -> String {
    let mut s = String::from("mode,medium,state_mb,log_bytes,votes_ms,serves_ms\n");
    for p in points {
        let _ = writeln!(
            s,
            "{},{},{},{},{:.1},{:.1}",
            p.mode, p.medium, p.state_mb, p.log_bytes, p.votes_ms, p.serves_ms
        );
    }
    s
}

/// `table2.csv` and `fig3.csv`.
pub fn points_csv(points: &[Point]) -> String {
    let mut s = String::from(
        "mode,medium,state_mb,put_bytes,put_share,ops_per_s,put_mb_per_s,p99_ms,errors\n",
    );
    for p in points {
        let _ = writeln!(
            s,
            "{},{},{},{},{},{:.0},{:.2},{:.2},{}",
            p.mode,
            p.medium,
            p.state_mb,
            p.put_bytes,
            p.put_share,
            p.ops_per_s,
            p.put_mb_per_s,
            p.p99_ms,
            p.errors
        );
    }
    s
}

fn plot_restart(path: &Path, points: &[RestartPoint]) -> Result<(), String> {
    let panel = |title: &str, y: fn(&RestartPoint) -> f64| Panel {
        title: title.into(),
        lines: MODES
            .iter()
            .map(|m| Line {
                label: m.recovery.into(),
                points: points
                    .iter()
                    .filter(|p| p.mode == m.recovery)
                    .map(|p| (p.state_mb as f64, y(p)))
                    .collect(),
            })
            .filter(|l| !l.points.is_empty())
            .collect(),
    };
    draw_with(
        path,
        "Restart of a follower (3 replicas)",
        "state (MB)",
        "ms from the start",
        &[
            panel("until it votes", |p| p.votes_ms),
            panel("until it serves", |p| p.serves_ms),
        ],
        &Axes::linear(),
    )
    .map_err(|e| format!("{}: {e}", path.display()))
}

fn plot_fig3(path: &Path, points: &[Point]) -> Result<(), String> {
    let lines = MODES
        .iter()
        .map(|m| Line {
            label: format!("{} ({})", m.recovery, m.restart_medium),
            points: points
                .iter()
                .filter(|p| p.mode == m.recovery)
                .map(|p| (p.put_bytes as f64, p.put_mb_per_s))
                .collect(),
        })
        .filter(|l| !l.points.is_empty())
        .collect();
    draw_with(
        path,
        "Throughput for different request sizes (Fig. 3)",
        "request size (B)",
        "MB/s",
        &[Panel {
            title: "SETs, 3 replicas".into(),
            lines,
        }],
        &Axes::linear(),
    )
    .map_err(|e| format!("{}: {e}", path.display()))
}

/// `summary.md`: the tables, and the ratios the goals name.
pub fn summary(r: &Results) -> String {
    let mut s = String::from("# logless bench recovery\n\n");
    let _ = writeln!(s, "Command: `{}`\n", r.command);
    if !r.restart.is_empty() {
        s.push_str(
            "## Restart of a follower\n\nA 3-replica cluster filled with 8 kB values, one \
             follower killed with SIGKILL and started again. *votes*: its INFO says \
             `log_state:rebuilding` or `serving`; *serves*: a GET of a stored key answered.\n\n\
             | mode | medium | state MB | log MB | votes ms | serves ms |\n| --- | --- | ---: | ---: | ---: | ---: |\n",
        );
        for p in &r.restart {
            let _ = writeln!(
                s,
                "| {} | {} | {} | {:.1} | {:.0} | {:.0} |",
                p.mode,
                p.medium,
                p.state_mb,
                p.log_bytes as f64 / 1e6,
                p.votes_ms,
                p.serves_ms
            );
        }
        s.push_str("\nSeed 002's anchors at 200 MB: ");
        let anchors: Vec<String> = ANCHORS
            .iter()
            .map(|(mode, what)| format!("{mode}: {what}"))
            .collect();
        s.push_str(&anchors.join("; "));
        s.push_str(".\n\n");
    }
    if !r.table2.is_empty() {
        s.push_str(
            "## Table II: 50% SETs of 8 kB, 50% GETs\n\n| mode | medium | state MB | ops/s | p99 ms | errors | ops/s ÷ best at this size |\n| --- | --- | ---: | ---: | ---: | ---: | ---: |\n",
        );
        for p in &r.table2 {
            let best = r
                .table2
                .iter()
                .filter(|q| q.state_mb == p.state_mb)
                .map(|q| q.ops_per_s)
                .fold(0.0, f64::max);
            let _ = writeln!(
                s,
                "| {} | {} | {} | {:.0} | {:.1} | {} | {:.2} |",
                p.mode,
                p.medium,
                p.state_mb,
                p.ops_per_s,
                p.p99_ms,
                p.errors,
                if best > 0.0 { p.ops_per_s / best } else { 0.0 }
            );
        }
        s.push_str("\nSeed 002: within about 10% across modes at 10 MB.\n\n");
    }
    if !r.fig3.is_empty() {
        s.push_str(
            "## Fig. 3: SETs of each size\n\n| mode | medium | bytes | ops/s | MB/s | p99 ms |\n| --- | --- | ---: | ---: | ---: | ---: |\n",
        );
        for p in &r.fig3 {
            let _ = writeln!(
                s,
                "| {} | {} | {} | {:.0} | {:.1} | {:.1} |",
                p.mode, p.medium, p.put_bytes, p.ops_per_s, p.put_mb_per_s, p.p99_ms
            );
        }
        s.push('\n');
    }
    if !r.figs45.is_empty() {
        s.push_str(&timeline_report::summary(&r.figs45));
    }
    s
}
