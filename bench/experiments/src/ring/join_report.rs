//! The results of `logless bench ring --join`: `timeline.csv`, `results.json`, one PNG per
//! series (`join-routed.png`, `join-any-node.png`) and `summary.md`.
use std::fmt::Write as _;
use std::path::Path;

use crate::plot::{draw_with, Axes, Line, Panel};

use super::join::{JoinResults, JoinRun, GOAL, SAMPLE};

/// Writes every file of `results` into `out` and returns the summary.
pub fn write(out: &Path, results: &JoinResults) -> Result<String, String> {
    let put = |name: &str, text: &str| {
        std::fs::write(out.join(name), text).map_err(|e| format!("{name}: {e}"))
    };
    put("timeline.csv", &timeline_csv(&results.runs))?;
    let json = serde_json::to_string_pretty(results).map_err(|e| e.to_string())?;
    put("results.json", &json)?;
    for run in &results.runs {
        let path = out.join(format!("join-{}.png", run.series.name()));
        plot(&path, run, results.settings.replication)?;
    }
    let text = summary(results);
    put("summary.md", &text)?;
    Ok(text)
}

/// `timeline.csv`: one row per sample of every series, nodes' columns up to the largest ring.
pub fn timeline_csv(runs: &[JoinRun]) -> String {
    let nodes = runs
        .iter()
        .flat_map(|r| r.samples.iter().map(|s| s.node_ops_per_s.len()))
        .max()
        .unwrap_or(0);
    let mut s = String::from("series,t_s,phase,ops_per_s");
    for n in 1..=nodes {
        let _ = write!(s, ",node{n}_ops_per_s");
    }
    s.push_str(",errors,redirects,keys_moved,keys_in_transit,stage\n");
    for run in runs {
        for sample in &run.samples {
            let _ = write!(
                s,
                "{},{:.3},{},{:.0}",
                run.series.name(),
                sample.t_s,
                phase(run, sample.t_s),
                sample.ops_per_s
            );
            for n in 0..nodes {
                match sample.node_ops_per_s.get(n) {
                    Some(v) => {
                        let _ = write!(s, ",{v:.0}");
                    }
                    None => s.push(','),
                }
            }
            let _ = writeln!(
                s,
                ",{},{},{},{},{}",
                sample.errors,
                sample.redirects,
                sample.keys_moved,
                sample.keys_in_transit,
                sample.stage
            );
        }
    }
    s
}

/// Which part of the run the sample ending at `t_s` belongs to.
fn phase(run: &JoinRun, t_s: f64) -> &'static str {
    let step = SAMPLE.as_secs_f64();
    if t_s <= run.move_start_s + 1e-9 {
        "baseline"
    } else if t_s - step >= run.move_end_s - 1e-9 {
        "tail"
    } else {
        "move"
    }
}

fn plot(path: &Path, run: &JoinRun, replication: u8) -> Result<(), String> {
    let total = Line {
        label: "all nodes".into(),
        points: run.samples.iter().map(|s| (s.t_s, s.ops_per_s)).collect(),
    };
    let baseline = Line {
        label: format!("{:.0}% of the baseline", 100.0 * GOAL),
        points: run
            .samples
            .iter()
            .map(|s| (s.t_s, GOAL * run.baseline_ops_per_s))
            .collect(),
    };
    let added = run.samples.iter().map(|s| s.node_ops_per_s.len()).max();
    let mut lines = vec![total, baseline];
    if let Some(nodes) = added.filter(|&n| n > 0) {
        lines.push(Line {
            label: format!("node {nodes} (added)"),
            points: run
                .samples
                .iter()
                .map(|s| {
                    (
                        s.t_s,
                        s.node_ops_per_s.get(nodes - 1).copied().unwrap_or(0.0),
                    )
                })
                .collect(),
        });
    }
    let axes = Axes {
        markers: vec![run.move_start_s, run.move_end_s],
        marker_label: "cluster add sent / returned".into(),
        ..Axes::linear()
    };
    draw_with(
        path,
        &format!(
            "Throughput while node {} joins a ring of {} ({})",
            run.added,
            run.nodes,
            run.series.name()
        ),
        "seconds",
        "commands answered per second",
        &[Panel {
            title: format!("R = {replication}, every {} ms", SAMPLE.as_millis()),
            lines,
        }],
        &axes,
    )
    .map_err(|e| format!("{}: {e}", path.display()))
}

/// `summary.md`: the settings, and per series the baseline, the move and the goal.
pub fn summary(r: &JoinResults) -> String {
    let s = &r.settings;
    let mut out = String::from("# logless bench ring --join\n\n");
    let _ = writeln!(out, "Command: `{}`\n", r.command);
    let _ = writeln!(
        out,
        "A ring of {} nodes, R = {}, node {} in every peer list but not in the ring; {} keys of \
         16 B, mix {}, {} clients × {} commands in flight; {} s of baseline after 1 s of \
         warm-up, then `logless cluster add {}`, then {} s of tail; sampled every {} ms; {} \
         durability. Load average (1, 5, 15 min) before: {}; after: {}.\n",
        s.nodes,
        s.replication,
        s.nodes + 1,
        s.keys,
        s.mix.describe(),
        s.clients,
        s.pipeline,
        s.baseline_seconds,
        s.nodes + 1,
        s.tail_seconds,
        SAMPLE.as_millis(),
        s.durability,
        r.load_average.0,
        r.load_average.1
    );
    out.push_str(
        "## A node joins a loaded ring\n\n\
         **Goal**: the node takes its share with throughput dipping by no more than 20% while \
         data moves: no second of the move (the mean of four consecutive samples) below 0.8 \
         of the baseline's median. *move*: from `cluster add` sent to its return (the ring at \
         `Stable(e+1)`, every mover done). *baseline min*: the smallest sample of the \
         baseline ÷ its median, the noise with no move. *bytes moved*: what the movers' \
         pacing counted (key, value and 64 per key; `ring_move_bytes_per_sec`).\n\n\
         | series | baseline ops/s | baseline min | move s | keys moved | MB moved | move min (250 ms) | move min (1 s) | move median | tail | dip (1 s) | dip (median) | redirects | errors | goal |\n\
         | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |\n",
    );
    for run in &r.runs {
        let _ = writeln!(
            out,
            "| {} | {:.0} | {:.2} | {:.1} | {} | {:.1} | {:.0} | {:.0} | {:.0} | {:.0} | {:.1}% | {:.1}% | {} | {} | {} |",
            run.series.name(),
            run.baseline_ops_per_s,
            run.baseline_min_ratio,
            run.move_s(),
            run.keys_moved,
            run.bytes_moved as f64 / 1e6,
            run.move_min_ops_per_s,
            run.move_min_1s_ops_per_s,
            run.move_median_ops_per_s,
            run.tail_ops_per_s,
            100.0 * run.dip(),
            100.0 * run.dip_median(),
            run.redirects,
            run.errors,
            if run.goal_met() { "met" } else { "**not met**" }
        );
    }
    for run in &r.runs {
        if !run.added_ok {
            let _ = writeln!(
                out,
                "\n{}: `cluster add` did not succeed ({} attempts): `{}`",
                run.series.name(),
                run.add_attempts,
                run.add_output.replace('\n', " ")
            );
        }
        if let Some(e) = &run.first_error {
            let _ = writeln!(out, "\n{}: first error reply `{e}`", run.series.name());
        }
    }
    out.push_str(
        "\n## Keys per node after the join\n\n\
         The nodes that gave slots up keep their copies of them (dropping the registers of \
         slots a node left is not built), so their DBSIZE stays near R/N.\n\n\
         | series | node | DBSIZE | share | R/(N+1) | keys it moved |\n\
         | --- | ---: | ---: | ---: | ---: | ---: |\n",
    );
    for run in &r.runs {
        let expected = f64::from(s.replication) / f64::from(run.nodes + 1);
        for n in &run.after {
            let _ = writeln!(
                out,
                "| {} | {} | {} | {:.3} | {expected:.3} | {} |",
                run.series.name(),
                n.node,
                n.dbsize,
                n.share,
                n.keys_moved
            );
        }
    }
    out
}
