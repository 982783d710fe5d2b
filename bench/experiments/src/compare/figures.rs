//! PNG plots shaped like the paper's Figures 3–6, with the peers on the same axes.
use std::path::Path;

use crate::plot::{draw, draw_with, Axes, Line, Panel};

use super::report::{Record, COUNTER, FAILURES, REGISTERS, REPLICAS, SINGLE_WRITER, VALUES};

/// The lines of `records` grouped by their series, in order of appearance, with x and y taken
/// by `xy` (points for which it gives None are left out).
fn lines(records: &[&Record], xy: impl Fn(&Record) -> Option<(f64, f64)>) -> Vec<Line> {
    let mut out: Vec<Line> = Vec::new();
    for r in records {
        let Some(p) = xy(r) else { continue };
        match out.iter_mut().find(|l| l.label == r.series) {
            Some(l) => l.points.push(p),
            None => out.push(Line {
                label: r.series.clone(),
                points: vec![p],
            }),
        }
    }
    for l in &mut out {
        l.points.sort_by(|a, b| a.0.total_cmp(&b.0));
    }
    out.retain(|l| !l.points.is_empty());
    out
}

fn of<'a>(records: &'a [Record], experiment: &str) -> Vec<&'a Record> {
    records
        .iter()
        .filter(|r| r.experiment == experiment)
        .collect()
}

type Drawn = Result<Vec<String>, String>;

fn err(name: &str) -> impl Fn(Box<dyn std::error::Error>) -> String + '_ {
    move |e| format!("plotting {name}: {e}")
}

/// Draws every figure that has data into `out`; returns the files written.
pub fn draw_all(out: &Path, records: &[Record]) -> Drawn {
    let mut files = Vec::new();
    // Figure 3a: a counter and increasing clients.
    let rs = of(records, COUNTER);
    if !rs.is_empty() {
        let incr: Vec<&Record> = rs
            .iter()
            .copied()
            .filter(|r| r.load.write_frac > 0.0)
            .collect();
        let reads: Vec<&Record> = rs
            .iter()
            .copied()
            .filter(|r| r.load.write_frac == 0.0)
            .collect();
        let name = "fig3a_counter.png";
        draw(
            &out.join(name),
            "(a) One counter, increasing clients (3 replicas, clients to the leader)",
            "clients",
            "ops/s  |  p99 µs",
            &[
                Panel {
                    title: "increments/s".into(),
                    lines: lines(&incr, |r| Some((r.load.clients.into(), r.write.throughput))),
                },
                Panel {
                    title: "reads/s".into(),
                    lines: lines(&reads, |r| Some((r.load.clients.into(), r.read.throughput))),
                },
                Panel {
                    title: "p99 increment latency (µs)".into(),
                    lines: lines(&incr, |r| {
                        Some((r.load.clients.into(), r.write.p99_us as f64))
                    }),
                },
            ],
        )
        .map_err(err(name))?;
        files.push(name.to_string());
    }
    // Figure 3b: one value of increasing size.
    let rs = of(records, VALUES);
    if !rs.is_empty() {
        let writes: Vec<&Record> = rs
            .iter()
            .copied()
            .filter(|r| r.load.write_frac > 0.0)
            .collect();
        let reads: Vec<&Record> = rs
            .iter()
            .copied()
            .filter(|r| r.load.write_frac == 0.0)
            .collect();
        let clients = rs[0].load.clients;
        let name = "fig3b_values.png";
        draw(
            &out.join(name),
            &format!("(b) One value of increasing size ({clients} clients)"),
            "value size (bytes)",
            "ops/s",
            &[
                Panel {
                    title: "writes/s".into(),
                    lines: lines(&writes, |r| {
                        Some((r.load.value_bytes.into(), r.write.throughput))
                    }),
                },
                Panel {
                    title: "reads/s".into(),
                    lines: lines(&reads, |r| {
                        Some((r.load.value_bytes.into(), r.read.throughput))
                    }),
                },
            ],
        )
        .map_err(err(name))?;
        files.push(name.to_string());
    }
    // Figure 4: one writer, many readers.
    let rs = of(records, SINGLE_WRITER);
    if !rs.is_empty() {
        let name = "fig4_single_writer.png";
        draw(
            &out.join(name),
            "Single writer and concurrent readers on one register (X = read retries)",
            "readers",
            "ops/s  |  p99 µs",
            &[
                Panel {
                    title: "(a) reads/s".into(),
                    lines: lines(&rs, |r| Some((r.load.clients.into(), r.read.throughput))),
                },
                Panel {
                    title: "(b) writes/s (the one writer)".into(),
                    lines: lines(&rs, |r| Some((r.load.clients.into(), r.write.throughput))),
                },
                Panel {
                    title: "(c) p99 read latency (µs)".into(),
                    lines: lines(&rs, |r| Some((r.load.clients.into(), r.read.p99_us as f64))),
                },
            ],
        )
        .map_err(err(name))?;
        files.push(name.to_string());
    }
    // Figure 5: many registers, Pareto-distributed.
    let rs = of(records, REGISTERS);
    if !rs.is_empty() {
        let mut fracs: Vec<f64> = rs.iter().map(|r| r.load.write_frac).collect();
        fracs.sort_by(f64::total_cmp);
        fracs.dedup();
        let clients = rs[0].load.clients;
        let panels: Vec<Panel> = fracs
            .iter()
            .map(|f| {
                let sel: Vec<&Record> = rs
                    .iter()
                    .copied()
                    .filter(|r| r.load.write_frac == *f)
                    .collect();
                Panel {
                    title: format!("{:.0}% writes: ops/s", f * 100.0),
                    lines: lines(&sel, |r| Some((r.load.keys as f64, r.total_ops()))),
                }
            })
            .collect();
        let name = "fig5_registers.png";
        draw(
            &out.join(name),
            &format!("Many registers, Pareto (α = 1.16) keys, {clients} clients"),
            "registers (keys)",
            "ops/s",
            &panels,
        )
        .map_err(err(name))?;
        files.push(name.to_string());
    }
    // Figure 6a: p99 latency by replicas.
    let rs = of(records, REPLICAS);
    if !rs.is_empty() {
        let max_replicas = rs.iter().map(|r| r.replicas).max().unwrap_or(3).max(3);
        let min_replicas = rs
            .iter()
            .filter(|r| r.replicas > 1)
            .map(|r| r.replicas)
            .min()
            .unwrap_or(3);
        // A single node (redis) is drawn flat over the replica counts, as a reference.
        let flat = |r: &Record, y: f64| -> Vec<(f64, f64)> {
            if r.replicas == 1 {
                vec![(min_replicas.into(), y), (max_replicas.into(), y)]
            } else {
                vec![(r.replicas.into(), y)]
            }
        };
        let mk = |y: fn(&Record) -> f64| -> Vec<Line> {
            let mut ls = lines(&rs, |r| Some((r.replicas.into(), y(r))));
            for l in &mut ls {
                if let Some(r) = rs.iter().find(|r| r.series == l.label && r.replicas == 1) {
                    l.points = flat(r, y(r));
                }
            }
            ls
        };
        let name = "fig6a_replicas.png";
        draw_with(
            &out.join(name),
            &format!(
                "p99 latency by replicas ({} clients, 10,000 Pareto keys, 5% writes)",
                rs[0].load.clients
            ),
            "replicas",
            "p99 latency (µs)",
            &[
                Panel {
                    title: "reads".into(),
                    lines: mk(|r| r.read.p99_us as f64),
                },
                Panel {
                    title: "writes".into(),
                    lines: mk(|r| r.write.p99_us as f64),
                },
            ],
            &Axes {
                x_log: false,
                y_log: true,
                markers: Vec::new(),
                marker_label: String::new(),
            },
        )
        .map_err(err(name))?;
        files.push(name.to_string());
    }
    // Figure 6b: latency over time while replicas are killed; one chart per system.
    for r in of(records, FAILURES) {
        if r.timeline.is_empty() {
            continue;
        }
        let series = |f: fn(&super::workloads::Second) -> f64| -> Vec<(f64, f64)> {
            r.timeline.iter().map(|s| (s.t, f(s))).collect()
        };
        let panels = [
            Panel {
                title: "p99 latency per second (µs)".into(),
                lines: vec![
                    Line {
                        label: "reads".into(),
                        points: series(|s| s.read.p99_us as f64),
                    },
                    Line {
                        label: "writes".into(),
                        points: series(|s| s.write.p99_us as f64),
                    },
                ],
            },
            Panel {
                title: "ops per second".into(),
                lines: vec![
                    Line {
                        label: "reads".into(),
                        points: series(|s| s.read.throughput),
                    },
                    Line {
                        label: "writes".into(),
                        points: series(|s| s.write.throughput),
                    },
                    Line {
                        label: "errors".into(),
                        points: series(|s| s.errors as f64),
                    },
                ],
            },
        ];
        let name = format!("fig6b_failures_{}.png", r.system);
        draw_with(
            &out.join(&name),
            &format!(
                "{}: {} replicas, one killed every {:.0} s ({} clients, 10,000 Pareto keys, 5% writes)",
                r.system,
                r.replicas,
                r.events.first().map(|e| e.t).unwrap_or(0.0),
                r.load.clients
            ),
            "seconds",
            "µs  |  ops/s",
            &panels,
            &Axes {
                x_log: false,
                y_log: true,
                markers: r.events.iter().map(|e| e.t).collect(),
                marker_label: "replica killed".into(),
            },
        )
        .map_err(err(&name))?;
        files.push(name);
    }
    Ok(files)
}
