//! The results of `logless bench recovery`: CSV, JSON, PNG and summary.md.
use std::fmt::Write as _;
use std::path::Path;

use serde::Serialize;

use crate::plot::{draw_with, Axes, Line, Panel};

use super::restart::{MemoryBandwidth, RestartPoint};
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
    /// The memory bandwidth measured before job 1.
    pub memory: Option<MemoryBandwidth>,
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
        put(
            "restart.csv",
            &restart_csv(&results.restart, results.memory.as_ref()),
        )?;
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

/// MB (10^6 bytes) over `ms`, MB/s.
fn mb_per_s(bytes: u64, ms: f64) -> Option<f64> {
    (ms > 0.0 && bytes > 0).then(|| bytes as f64 / 1e6 / (ms / 1e3))
}

/// The figures of one restart set against its snapshot's bytes and the memory bandwidth:
/// the snapshot file's read, MB/s; the whole restart (until it serves), MB/s of snapshot; and
/// the time to read the snapshot once at the memory's read bandwidth, ms.
pub fn rates(
    p: &RestartPoint,
    memory: Option<&MemoryBandwidth>,
) -> (Option<f64>, Option<f64>, Option<f64>) {
    let bytes = p.parts.snapshot_bytes.unwrap_or(p.snapshot_file_bytes);
    let file = p
        .snapshot_file_read_ms
        .and_then(|ms| mb_per_s(p.snapshot_file_bytes, ms));
    let whole = mb_per_s(bytes, p.serves_ms);
    let once = memory
        .filter(|m| m.read_mb_s > 0.0 && bytes > 0)
        .map(|m| bytes as f64 / 1e6 / m.read_mb_s * 1e3);
    (file, whole, once)
}

fn opt(v: Option<f64>) -> String {
    v.map_or(String::new(), |v| format!("{v:.1}"))
}

fn opt_n(v: Option<u64>) -> String {
    v.map_or(String::new(), |v| v.to_string())
}

/// `restart.csv`: one line per restart, the memory bandwidth of the run on every line.
pub fn restart_csv(points: &[RestartPoint], memory: Option<&MemoryBandwidth>) -> String {
    let mut s = String::from(
        "mode,medium,state_mb,log_bytes,votes_ms,serves_ms,storage_ms,snapshot_bytes,\
         snapshot_decode_ms,records_ms,log_ms,restore_ms,restored_at_ms,replay_ms,\
         replayed_instances,rebuilt_at_ms,own_snapshot,peer_snapshots,first_vote_ms,\
         first_answer_ms,snapshot_file_bytes,snapshot_file_read_ms,snapshot_file_mb_s,\
         serves_snapshot_mb_s,one_read_at_memory_ms,memory_copy_mb_s,memory_read_mb_s,\
         catch_up_queries,snapshots_installed\n",
    );
    for p in points {
        let q = &p.parts;
        let (file, whole, once) = rates(p, memory);
        let _ = writeln!(
            s,
            "{},{},{},{},{:.1},{:.1},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{}",
            p.mode,
            p.medium,
            p.state_mb,
            p.log_bytes,
            p.votes_ms,
            p.serves_ms,
            opt(q.storage_ms),
            opt_n(q.snapshot_bytes),
            opt(q.snapshot_decode_ms),
            opt(q.records_ms),
            opt(q.log_ms),
            opt(q.restore_ms),
            opt(q.restored_at_ms),
            opt(q.replay_ms),
            opt_n(q.replayed_instances),
            opt(q.rebuilt_at_ms),
            q.own_snapshot.map_or(String::new(), |b| b.to_string()),
            q.peer_snapshots,
            opt(q.first_vote_ms),
            opt(q.first_answer_ms),
            p.snapshot_file_bytes,
            opt(p.snapshot_file_read_ms),
            opt(file),
            opt(whole),
            opt(once),
            opt(memory.map(|m| m.copy_mb_s)),
            opt(memory.map(|m| m.read_mb_s)),
            opt_n(p.catch_up_queries),
            opt_n(p.snapshots_installed),
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
        s.push_str(&restart_parts_summary(&r.restart, r.memory.as_ref()));
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

/// The summary's table of each restart's parts (from the replica's start lines) against one
/// read of its snapshot and the memory bandwidth.
fn restart_parts_summary(points: &[RestartPoint], memory: Option<&MemoryBandwidth>) -> String {
    let mut s = String::new();
    if let Some(m) = memory {
        let _ = writeln!(
            s,
            "\nMemory bandwidth in this run: copy {:.0} MB/s, read {:.0} MB/s ({} MiB buffers, \
             best of 5).",
            m.copy_mb_s,
            m.read_mb_s,
            m.bytes >> 20
        );
    }
    s.push_str(
        "\nThe parts, from the restarted replica's start lines (ms since it began opening its \
         log; *storage*, *snapshot decode*, *records*, *restore* and *replay* are durations): \
         the storage layer's open (segments and snapshot files checked), the snapshot decoded \
         out of the medium, the log's records replayed, the log open (end), the snapshot \
         restored into a new state machine (mPaxos, off the loop), the decided instances after \
         it executed once handed over, the first vote and the first answer. *own*: the replica \
         kept the machine rebuilt from its own snapshot (`peer N`: it installed N snapshots \
         from a peer, by its start lines or INFO). *catch-up queries*: those it sent until it \
         served (INFO). *file read*: one read of its newest snapshot file after it served. \
         *serves MB/s*: snapshot MB over the time until it served; *1 read*: the snapshot read \
         once at the memory's read bandwidth; *serves ÷ 1 read*: the goal's ratio (≤ 1).\n\n\
         | mode | state MB | snapshot MB | storage | snapshot decode | records | log open | restore | replay (instances) | first vote | first answer | own | catch-up queries | file read ms (MB/s) | serves MB/s | 1 read ms | serves ÷ 1 read |\n\
         | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: |\n",
    );
    for p in points {
        let q = &p.parts;
        let (file, whole, once) = rates(p, memory);
        let bytes = q.snapshot_bytes.unwrap_or(p.snapshot_file_bytes);
        let f = |v: Option<f64>| v.map_or("–".to_string(), |v| format!("{v:.0}"));
        let _ = writeln!(
            s,
            "| {} | {} | {:.1} | {} | {} | {} | {} | {} | {} ({}) | {} | {} | {} | {} | {} ({}) | {} | {} | {} |",
            p.mode,
            p.state_mb,
            bytes as f64 / 1e6,
            f(q.storage_ms),
            f(q.snapshot_decode_ms),
            f(q.records_ms),
            f(q.log_ms),
            f(q.restore_ms),
            f(q.replay_ms),
            q.replayed_instances.map_or("–".into(), |n| n.to_string()),
            f(q.first_vote_ms),
            f(q.first_answer_ms),
            match (q.own_snapshot, q.peer_snapshots.max(p.snapshots_installed.unwrap_or(0))) {
                (_, n) if n > 0 => format!("peer {n}"),
                (Some(true), _) => "own".into(),
                (Some(false), _) => "dropped".into(),
                (None, _) => "–".into(),
            },
            p.catch_up_queries.map_or("–".into(), |n| n.to_string()),
            f(p.snapshot_file_read_ms),
            f(file),
            f(whole),
            f(once),
            once.filter(|o| *o > 0.0)
                .map_or("–".into(), |o| format!("{:.0}", p.serves_ms / o)),
        );
    }
    s
}
