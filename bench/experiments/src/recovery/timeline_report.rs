//! The files of job 4 (seed 002's Figs. 4–5): `figs45.csv` (every replica's series),
//! `figs45-recovery.csv` (the figures of each crash), `figs45-<mode>-<n>.png` per mode and
//! cluster size, and the summary's section.
use std::fmt::Write as _;
use std::path::Path;

use crate::plot::{draw_with, Axes, Line, Panel};

use super::timeline::{Recovery, Run, BUCKET_MS, RESTORED_SHARE, SWITCH_EVERY};

/// Buckets a plotted point is the mean of (1 s).
const PLOT_BIN_BUCKETS: usize = 10;

/// Seed 002's Figs. 4–5 in its words' figures (mPaxosSM on Optane, 512 MB of state machine,
/// 1k clients, 6 kB puts).
pub const SEED: &str = "a restarted replica connects to its peers 0.23 s after its start and \
    has started and applied a snapshot from a peer after 2.3 s; with 3 replicas the system's \
    throughput drops hard during that catch-up (one replica left serving) and is back to its \
    level about 35 s after the start, with 5 replicas the drop is moderate and the return \
    takes about 90 s";

/// Writes the job's files into `out`.
pub fn write(out: &Path, runs: &[Run]) -> Result<(), String> {
    let put = |name: &str, text: &str| {
        std::fs::write(out.join(name), text).map_err(|e| format!("{name}: {e}"))
    };
    put("figs45.csv", &series_csv(runs))?;
    put("figs45-recovery.csv", &recovery_csv(runs))?;
    for run in runs {
        let path = out.join(format!("figs45-{}-{}.png", run.mode, run.replicas));
        plot(&path, run).map_err(|e| format!("{}: {e}", path.display()))?;
    }
    Ok(())
}

/// `figs45.csv`: one row per run, bucket and replica.
pub fn series_csv(runs: &[Run]) -> String {
    let mut s = String::from(
        "mode,medium,replicas,t_s,replica,answered_per_s,executed_per_s,log_state,is_leader,errors_per_s\n",
    );
    let per_s = 1000.0 / BUCKET_MS as f64;
    for run in runs {
        for b in 0..run.errors.len() {
            for r in 0..run.replicas {
                let sample = run.samples.get(r).and_then(|s| s[b].as_ref());
                let _ = writeln!(
                    s,
                    "{},{},{},{:.1},{},{:.0},{},{},{},{:.0}",
                    run.mode,
                    run.medium,
                    run.replicas,
                    b as f64 * BUCKET_MS as f64 / 1000.0,
                    r + 1,
                    run.answered[r][b] as f64 * per_s,
                    run.executed_per_s
                        .get(r)
                        .and_then(|e| e[b])
                        .map_or(String::new(), |x| format!("{x:.0}")),
                    sample.map_or("", |s| s.state.as_str()),
                    sample.map_or(String::new(), |s| u8::from(s.leads).to_string()),
                    run.errors[b] as f64 * per_s,
                );
            }
        }
    }
    s
}

fn opt(x: Option<f64>) -> String {
    x.map_or(String::new(), |v| format!("{v:.0}"))
}

/// `figs45-recovery.csv`: one row per crash.
pub fn recovery_csv(runs: &[Run]) -> String {
    let mut s = String::from(
        "mode,medium,replicas,crashed,replica,before_ops,down_ops,after_ops,lowest_pct,gap_ms,leader_changes,votes_ms,serves_ms,caught_up_ms,restored_ms\n",
    );
    for run in runs {
        for r in &run.recoveries {
            let _ = writeln!(
                s,
                "{},{},{},{},{},{:.0},{:.0},{:.0},{:.0},{:.0},{},{},{},{},{}",
                run.mode,
                run.medium,
                run.replicas,
                r.crashed,
                r.replica,
                r.before_ops,
                r.down_ops,
                r.after_ops,
                r.lowest_pct,
                r.gap_ms,
                r.leader_changes,
                opt(r.votes_ms),
                opt(r.serves_ms),
                opt(r.caught_up_ms),
                opt(r.restored_ms)
            );
        }
    }
    s
}

/// Means over bins of [`PLOT_BIN_BUCKETS`] of the values present, as (seconds at the bin's
/// end, mean); a bin without any value is left out.
fn binned(values: &[Option<f64>]) -> Vec<(f64, f64)> {
    values
        .chunks(PLOT_BIN_BUCKETS)
        .enumerate()
        .filter_map(|(i, bin)| {
            let present: Vec<f64> = bin.iter().flatten().copied().collect();
            if present.is_empty() {
                return None;
            }
            let end = (i * PLOT_BIN_BUCKETS + bin.len()) as f64 * BUCKET_MS as f64 / 1000.0;
            Some((end, present.iter().sum::<f64>() / present.len() as f64))
        })
        .collect()
}

/// The legend name of replica `r` (from 0): which crash it had, if any.
fn name(run: &Run, r: usize) -> String {
    let crashed: Vec<&str> = run
        .recoveries
        .iter()
        .filter(|c| c.replica == r + 1)
        .map(|c| c.crashed)
        .collect();
    if crashed.is_empty() {
        format!("R{}", r + 1)
    } else {
        format!("R{} ({} killed)", r + 1, crashed.join(", "))
    }
}

/// Replica `r`'s executed series with 0 where it was killed (not a gap in the line).
fn executed_or_down(run: &Run, r: usize) -> Vec<Option<f64>> {
    let bucket = |t_s: f64| (t_s * 1000.0 / BUCKET_MS as f64) as usize;
    let mut series = run.executed_per_s[r].clone();
    for pair in run.events.chunks(2) {
        if let [killed, started] = pair {
            if killed.replica == r + 1 {
                let down = bucket(killed.t_s)..bucket(started.t_s).min(series.len());
                for x in &mut series[down] {
                    x.get_or_insert(0.0);
                }
            }
        }
    }
    series
}

fn plot(path: &Path, run: &Run) -> Result<(), Box<dyn std::error::Error>> {
    let per_s = 1000.0 / BUCKET_MS as f64;
    let mut answered: Vec<Line> = (0..run.replicas)
        .map(|r| Line {
            label: name(run, r),
            points: binned(
                &run.answered[r]
                    .iter()
                    .map(|&n| Some(n as f64 * per_s))
                    .collect::<Vec<_>>(),
            ),
        })
        .collect();
    answered.push(Line {
        label: "all replicas".into(),
        points: binned(&run.total_per_s().into_iter().map(Some).collect::<Vec<_>>()),
    });
    let executed = (0..run.replicas)
        .map(|r| Line {
            label: name(run, r),
            points: binned(&executed_or_down(run, r)),
        })
        .collect();
    let axes = Axes {
        markers: run.events.iter().map(|e| e.t_s).collect(),
        marker_label: "follower, then leader: killed, started".into(),
        ..Axes::linear()
    };
    draw_with(
        path,
        &format!(
            "{} ({}), {} replicas: a follower, then the leader, killed and started (Figs. 4–5)",
            run.mode, run.medium, run.replicas
        ),
        "seconds from the start of the load",
        "ops/s (1 s means)",
        &[
            Panel {
                title: "answered to its clients".into(),
                lines: answered,
            },
            Panel {
                title: "executed (INFO)".into(),
                lines: executed,
            },
        ],
        &axes,
    )
}

/// The summary's section.
pub fn summary(runs: &[Run]) -> String {
    let mut s = String::from("## Figs. 4–5: every replica's throughput over a crash\n\n");
    if let Some(run) = runs.first() {
        let _ = writeln!(
            s,
            "Per mode and cluster size, a cluster filled with {} MB takes Table II's mix from \
             closed-loop clients that move to a random replica every {SWITCH_EVERY} commands; \
             after {} s a follower is killed with SIGKILL and started {} s later, after {} s \
             more the leader. *before*: the system's ops/s before the first kill; *down*: while \
             the replica was down; *after*: from its start to the next kill or the end. From the \
             kill to the next kill or the end: *lowest*, the lowest 500 ms mean of the system in \
             % of *before* (0: no answer at all for 500 ms); *gap*, the longest time without any \
             answer; *leader moves*, how often the sampled leader changed. Then from the \
             replica's start (to {BUCKET_MS} ms) until its INFO said it votes, it answered a \
             client, its executed instance reached the others', and the system's ops/s over 1 s \
             were back to {:.0}% of *before*. Series in figs45.csv, plots in \
             figs45-<mode>-<replicas>.png.\n",
            run.state_mb,
            run.schedule.settle_s,
            run.schedule.down_s,
            run.schedule.settle_s,
            RESTORED_SHARE * 100.0
        );
    }
    s.push_str(
        "| mode | medium | replicas | crashed | before ops/s | down ops/s | after ops/s | lowest % | gap ms | leader moves | votes ms | serves ms | caught up ms | restored ms |\n\
         | --- | --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n",
    );
    let ms = |x: Option<f64>| x.map_or("never".to_string(), |v| format!("{v:.0}"));
    for run in runs {
        for r in &run.recoveries {
            let Recovery {
                crashed,
                replica,
                before_ops,
                down_ops,
                after_ops,
                lowest_pct,
                gap_ms,
                leader_changes,
                ..
            } = r;
            let _ = writeln!(
                s,
                "| {} | {} | {} | {crashed} (R{replica}) | {before_ops:.0} | {down_ops:.0} | {after_ops:.0} | {lowest_pct:.0} | {gap_ms:.0} | {leader_changes} | {} | {} | {} | {} |",
                run.mode,
                run.medium,
                run.replicas,
                ms(r.votes_ms),
                ms(r.serves_ms),
                ms(r.caught_up_ms),
                ms(r.restored_ms)
            );
        }
    }
    let _ = writeln!(s, "\nSeed 002 (Figs. 4–5): {SEED}.\n");
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plotted_points_are_means_of_the_values_present_per_second() {
        let mut values = vec![Some(10.0); 10];
        values[3] = None;
        values.extend([None; 10]);
        values.extend([Some(20.0), Some(40.0)]);
        assert_eq!(binned(&values), [(1.0, 10.0), (2.2, 30.0)]);
    }
}
