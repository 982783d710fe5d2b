//! `storage-experiment`: the Log / Single In-Place / Multi In-Place experiment of the log-less
//! RSM paper (seed 001, §6.2, Figure 6), on DRAM, mmap, mmap with msync per write, and sync with
//! group commit, for value sizes 8 B to 4 KiB. Writes CSV, JSON and PNG plots to `--out`.
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use indicatif::{ProgressBar, ProgressStyle};
use logless_bench::plot::{draw, Line, Panel};
use logless_bench::storage::{measure, Point, Settings, MEDIA, PATTERNS, VALUE_BYTES};

#[derive(Parser)]
#[command(about = "The storage access-pattern experiment (seed 001, Figure 6)")]
struct Args {
    /// Where to write results.csv, results.json and the PNG plots.
    #[arg(long, default_value = "bench-results/storage")]
    out: PathBuf,
    /// A short run (about a minute): fewer writes per point and 10,000 instead of 100,000
    /// values for Multi In-Place.
    #[arg(long)]
    quick: bool,
    /// Where the experiment's files go (default: a temporary directory).
    #[arg(long)]
    scratch: Option<PathBuf>,
}

fn main() -> ExitCode {
    let args = Args::parse();
    let settings = Settings {
        writes: if args.quick { 1_000 } else { 20_000 },
        writes_synced_each: if args.quick { 100 } else { 2_000 },
        values: if args.quick { 10_000 } else { 100_000 },
        zipf_skew: 0.9,
        group: 64,
    };
    if let Err(e) = std::fs::create_dir_all(&args.out) {
        eprintln!("error: cannot create {}: {e}", args.out.display());
        return ExitCode::FAILURE;
    }
    let scratch = match &args.scratch {
        Some(dir) => tempfile::tempdir_in(dir),
        None => tempfile::tempdir(),
    };
    let scratch = match scratch {
        Ok(dir) => dir,
        Err(e) => {
            eprintln!("error: no scratch directory: {e}");
            return ExitCode::FAILURE;
        }
    };
    let total = (PATTERNS.len() * MEDIA.len() * VALUE_BYTES.len()) as u64;
    let bar = ProgressBar::new(total).with_style(
        ProgressStyle::with_template("{bar:40} {pos}/{len} {msg}").expect("a valid template"),
    );
    let mut points: Vec<Point> = Vec::new();
    for medium in MEDIA {
        for pattern in PATTERNS {
            for value_bytes in VALUE_BYTES {
                bar.set_message(format!("{pattern:?} on {medium:?}, {value_bytes} B"));
                match measure(&settings, pattern, medium, value_bytes, scratch.path()) {
                    Ok(p) => points.push(p),
                    Err(e) => {
                        bar.abandon();
                        eprintln!("error: {pattern:?} on {medium:?} at {value_bytes} B: {e}");
                        return ExitCode::FAILURE;
                    }
                }
                bar.inc(1);
            }
        }
    }
    bar.finish_with_message("done");
    if let Err(e) = write_results(&args.out, &settings, &points) {
        eprintln!("error: writing results: {e}");
        return ExitCode::FAILURE;
    }
    print_summary(&points);
    println!("results in {}", args.out.display());
    ExitCode::SUCCESS
}

fn write_results(
    out: &std::path::Path,
    settings: &Settings,
    points: &[Point],
) -> Result<(), Box<dyn std::error::Error>> {
    let mut csv = String::from("pattern,medium,value_bytes,writes_per_s,p50_ns,p99_ns\n");
    for p in points {
        csv.push_str(&format!(
            "{:?},{:?},{},{:.0},{},{}\n",
            p.pattern, p.medium, p.value_bytes, p.writes_per_s, p.p50_ns, p.p99_ns
        ));
    }
    std::fs::write(out.join("results.csv"), csv)?;
    let json = serde_json::json!({ "settings": settings, "points": points });
    std::fs::write(
        out.join("results.json"),
        serde_json::to_string_pretty(&json)?,
    )?;
    let panels = |metric: fn(&Point) -> f64| -> Vec<Panel> {
        MEDIA
            .iter()
            .map(|medium| Panel {
                title: format!("{medium:?}"),
                lines: PATTERNS
                    .iter()
                    .map(|pattern| Line {
                        label: format!("{pattern:?}"),
                        points: points
                            .iter()
                            .filter(|p| p.medium == *medium && p.pattern == *pattern)
                            .map(|p| (p.value_bytes as f64, metric(p)))
                            .collect(),
                    })
                    .collect(),
            })
            .collect()
    };
    draw(
        &out.join("throughput.png"),
        "Durable writes per second by access pattern and value size",
        "value size (bytes)",
        "writes/s",
        &panels(|p| p.writes_per_s),
    )?;
    draw(
        &out.join("latency_p99.png"),
        "p99 write latency by access pattern and value size",
        "value size (bytes)",
        "p99 latency (ns)",
        &panels(|p| p.p99_ns as f64),
    )?;
    Ok(())
}

fn print_summary(points: &[Point]) {
    println!(
        "{:<16}{:<22}{:>8}{:>14}{:>12}",
        "pattern", "medium", "bytes", "writes/s", "p99 µs"
    );
    for p in points
        .iter()
        .filter(|p| [8, 64, 4096].contains(&p.value_bytes))
    {
        println!(
            "{:<16}{:<22}{:>8}{:>14.0}{:>12.1}",
            format!("{:?}", p.pattern),
            format!("{:?}", p.medium),
            p.value_bytes,
            p.writes_per_s,
            p.p99_ns as f64 / 1000.0
        );
    }
}
