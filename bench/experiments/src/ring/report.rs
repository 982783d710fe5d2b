//! The results of `logless bench ring`: CSV, JSON, PNG and summary.md.
use std::fmt::Write as _;
use std::path::Path;

use crate::plot::{draw_with, Axes, Line, Panel};

use super::cluster::Series;
use super::load::Point;
use super::{NodeRow, Results};

/// Writes every file of `results` into `out` and returns the summary.
pub fn write(out: &Path, results: &Results) -> Result<String, String> {
    let put = |name: &str, text: &str| {
        std::fs::write(out.join(name), text).map_err(|e| format!("{name}: {e}"))
    };
    put("points.csv", &points_csv(&results.points))?;
    put("nodes.csv", &nodes_csv(&results.nodes))?;
    let json = serde_json::to_string_pretty(results).map_err(|e| e.to_string())?;
    put("results.json", &json)?;
    plot_ops(&out.join("ops_per_cpu.png"), &results.points)?;
    plot_shares(&out.join("keys_share.png"), &results.nodes)?;
    let text = summary(results);
    put("summary.md", &text)?;
    Ok(text)
}

/// `points.csv`.
pub fn points_csv(points: &[Point]) -> String {
    let mut s = String::from(
        "series,nodes,replication,clients,seconds,ops,errors,ops_per_s,cpu_s,ops_per_cpu_s,cores,\
         idle_cores,forwarded_share,ops_per_batch,fast_write_share,p99_ms\n",
    );
    for p in points {
        let _ = writeln!(
            s,
            "{},{},{},{},{},{},{},{:.0},{:.2},{:.0},{:.3},{:.3},{:.3},{:.2},{:.3},{:.2}",
            p.series.name(),
            p.nodes,
            p.replication,
            p.clients,
            p.seconds,
            p.ops,
            p.errors,
            p.ops_per_s,
            p.cpu_s,
            p.ops_per_cpu_s,
            p.cores,
            p.idle_cores,
            p.forwarded_share,
            p.ops_per_batch,
            p.fast_write_share,
            p.p99_ms
        );
    }
    s
}

/// `nodes.csv`.
pub fn nodes_csv(rows: &[NodeRow]) -> String {
    let mut s = String::from(
        "series,nodes,node,dbsize,keys_owned,share,expected_share,rss_bytes,rss_empty_bytes\n",
    );
    for r in rows {
        let _ = writeln!(
            s,
            "{},{},{},{},{},{:.4},{:.4},{},{}",
            r.series.name(),
            r.nodes,
            r.node,
            r.held.dbsize,
            r.held.keys_owned.map_or(String::new(), |k| k.to_string()),
            r.share,
            r.expected_share,
            r.held.rss_bytes,
            r.rss_empty_bytes
        );
    }
    s
}

fn plot_ops(path: &Path, points: &[Point]) -> Result<(), String> {
    let lines = Series::ALL
        .iter()
        .map(|&series| Line {
            label: series.name().into(),
            points: points
                .iter()
                .filter(|p| p.series == series)
                .map(|p| (f64::from(p.nodes), p.ops_per_cpu_s))
                .collect(),
        })
        .filter(|l| !l.points.is_empty())
        .collect();
    draw_with(
        path,
        "Operations per CPU-second of the whole ring",
        "nodes N",
        "ops per CPU-s",
        &[Panel {
            title: format!("R = {}", points.first().map_or(3, |p| p.replication)),
            lines,
        }],
        &Axes::linear(),
    )
    .map_err(|e| format!("{}: {e}", path.display()))
}

/// Per N of `rows` (one series' ring): the smallest, mean and largest share, and R/N.
fn shares(rows: &[NodeRow]) -> Vec<(u16, f64, f64, f64, f64)> {
    let mut sizes: Vec<u16> = rows.iter().map(|r| r.nodes).collect();
    sizes.dedup();
    sizes
        .into_iter()
        .map(|n| {
            let of_n: Vec<&NodeRow> = rows.iter().filter(|r| r.nodes == n).collect();
            let min = of_n.iter().map(|r| r.share).fold(f64::MAX, f64::min);
            let max = of_n.iter().map(|r| r.share).fold(0.0, f64::max);
            let mean = of_n.iter().map(|r| r.share).sum::<f64>() / of_n.len() as f64;
            (n, min, mean, max, of_n[0].expected_share)
        })
        .collect()
}

/// The rows of the first series measured (both rings of an N share the placement).
fn first_series(rows: &[NodeRow]) -> Vec<NodeRow> {
    let Some(first) = rows.first() else {
        return Vec::new();
    };
    rows.iter()
        .filter(|r| r.series == first.series)
        .cloned()
        .collect()
}

fn plot_shares(path: &Path, rows: &[NodeRow]) -> Result<(), String> {
    let shares = shares(&first_series(rows));
    let line = |label: &str, y: fn(&(u16, f64, f64, f64, f64)) -> f64| Line {
        label: label.into(),
        points: shares
            .iter()
            .map(|s| (f64::from(s.0), 100.0 * y(s)))
            .collect(),
    };
    draw_with(
        path,
        "Share of the keys each node holds, against R/N",
        "nodes N",
        "% of the keys",
        &[Panel {
            title: "DBSIZE ÷ keys loaded".into(),
            lines: vec![
                line("R/N", |s| s.4),
                line("smallest node", |s| s.1),
                line("mean", |s| s.2),
                line("largest node", |s| s.3),
            ],
        }],
        &Axes::linear(),
    )
    .map_err(|e| format!("{}: {e}", path.display()))
}

/// `summary.md`: the settings, the points, the shares and the ratios the goals name.
pub fn summary(r: &Results) -> String {
    let s = &r.settings;
    let mut out = String::from("# logless bench ring\n\n");
    let _ = writeln!(out, "Command: `{}`\n", r.command);
    let _ = writeln!(
        out,
        "R = {}, {} keys of 16 B, mix {}, {} × {} commands in flight, {} s per point, \
         {} durability. Load average (1, 5, 15 min) before: {}; after: {}.\n",
        s.replication,
        s.keys,
        s.mix.describe(),
        s.describe_clients(),
        s.pipeline,
        s.seconds,
        s.durability,
        r.load_average.0,
        r.load_average.1
    );
    out.push_str(
        "**Goal**: ops per CPU-second of the whole ring (all nodes' user + system time) does not \
         fall as N grows: a command costs its R replicas the same whatever N (no traffic to \
         every node per key). *routed*: each key sent to its first replica (CLUSTER SLOTS); \
         *any-node*: to any node, which forwards what it does not hold.\n\n\
         *cores idle*: what the ring keeps busy with no load (timers, heartbeats, links), \
         read just before. *ops per batch*: commands per read or write batch the proposers \
         completed (what one protocol round carried); *fast*: the share of write batches done \
         in one round trip.\n\n\
         | series | N | ops/s | cores busy | cores idle | ops per CPU-s | forwarded per op | ops per batch | fast | p99 ms | errors |\n\
         | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n",
    );
    for p in &r.points {
        let _ = writeln!(
            out,
            "| {} | {} | {:.0} | {:.2} | {:.2} | {:.0} | {:.2} | {:.1} | {:.2} | {:.1} | {} |",
            p.series.name(),
            p.nodes,
            p.ops_per_s,
            p.cores,
            p.idle_cores,
            p.ops_per_cpu_s,
            p.forwarded_share,
            p.ops_per_batch,
            p.fast_write_share,
            p.p99_ms,
            p.errors
        );
    }
    let errors: Vec<String> = r
        .points
        .iter()
        .filter_map(|p| {
            let e = p.first_error.as_ref()?;
            Some(format!("{} N={}: `{e}`", p.series.name(), p.nodes))
        })
        .collect();
    if !errors.is_empty() {
        let _ = writeln!(out, "\nFirst error replies: {}.", errors.join("; "));
    }
    out.push('\n');
    for series in Series::ALL {
        let of: Vec<&Point> = r.points.iter().filter(|p| p.series == series).collect();
        if let (Some(first), Some(last)) = (of.first(), of.last()) {
            if of.len() > 1 && first.ops_per_cpu_s > 0.0 {
                let _ = writeln!(
                    out,
                    "* {}: ops per CPU-s at N = {} ÷ at N = {}: **{:.2}** (goal ≥ 1, within noise)",
                    series.name(),
                    last.nodes,
                    first.nodes,
                    last.ops_per_cpu_s / first.ops_per_cpu_s
                );
            }
        }
    }
    for n in &s.nodes {
        let find = |series| {
            r.points
                .iter()
                .find(|p| p.series == series && p.nodes == *n)
        };
        if let (Some(routed), Some(any)) = (find(Series::Routed), find(Series::AnyNode)) {
            if routed.ops_per_cpu_s > 0.0 {
                let _ = writeln!(
                    out,
                    "* N = {n}: any-node ÷ routed ops per CPU-s: {:.2} (the cost of proxying; \
                     1 − R/N = {:.2} of the commands land on a node that does not hold the key)",
                    any.ops_per_cpu_s / routed.ops_per_cpu_s,
                    1.0 - f64::from(s.replication) / f64::from(*n)
                );
            }
        }
    }
    out.push_str(
        "\n## Keys per node\n\n**Goal**: each node holds about R/N of the keys (DBSIZE after the \
         load; RSS growth is the memory the keys took).\n\n\
         | N | R/N | smallest share | mean | largest | worst ÷ R/N | RSS growth MB per node (mean) |\n\
         | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n",
    );
    let rows = first_series(&r.nodes);
    for (n, min, mean, max, expected) in shares(&rows) {
        let growth: Vec<f64> = rows
            .iter()
            .filter(|row| row.nodes == n)
            .map(|row| row.held.rss_bytes.saturating_sub(row.rss_empty_bytes) as f64 / 1e6)
            .collect();
        let worst = if (max - expected).abs() > (expected - min).abs() {
            max
        } else {
            min
        };
        let _ = writeln!(
            out,
            "| {n} | {expected:.3} | {min:.3} | {mean:.3} | {max:.3} | {:.2} | {:.1} |",
            worst / expected,
            growth.iter().sum::<f64>() / growth.len().max(1) as f64
        );
    }
    out
}
