//! `logless bench failover`: how long the log engine stops committing when its leader dies.
//!
//! A 3-replica `--engine multipaxos` cluster (separate `logless server` processes, so that one
//! can be killed) takes INCRs from several closed-loop clients spread over all replicas. After
//! `--before-s` seconds the leader (the replica whose INFO says `log_is_leader:1`) is killed with
//! SIGKILL, and the load goes on for `--after-s` seconds. Every answered INCR is counted in the
//! 10 ms bucket of its answer.
//!
//! The failover time is the time from the kill until the first INCR *sent after the kill* is
//! answered: only a leader proposes and the old one is dead, so such an answer means a new
//! leader has been elected and has committed. (Answers to INCRs sent before the kill may still
//! arrive just after it, from instances decided before it.) A client whose connection fails
//! moves on to the next replica after 10 ms.
//!
//! Results: `timeline.csv` (commits and errors per bucket), `failover.png`, `result.json` and
//! `summary.md` in `--out`.
use std::fmt::Write as _;
use std::io::Write as _;
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use logless_harness::probe;
use serde::Serialize;

use crate::compare::peers::{self, LoglessOpts, Running};
use crate::plot::{draw_with, Axes, Line, Panel};

/// The width of a timeline bucket.
pub const BUCKET_MS: u64 = 10;
/// The goal of issue 24: the cluster commits again within this long after the leader dies.
pub const GOAL_MS: f64 = 1000.0;
/// How long a client waits for one answer (above the node's 5 s request timeout).
const ANSWER_TIMEOUT: Duration = Duration::from_secs(7);

/// The arguments of `logless bench failover`.
#[derive(clap::Args, Clone, Debug, PartialEq)]
pub struct FailoverArgs {
    /// Where to write timeline.csv, failover.png, result.json and summary.md.
    #[arg(long, default_value = "bench-results/failover")]
    pub out: PathBuf,
    /// The logless binary (default: `logless` beside this executable, or on the PATH).
    #[arg(long)]
    pub logless: Option<PathBuf>,
    /// Closed-loop clients sending INCR, spread over the replicas.
    #[arg(long, default_value_t = 12)]
    pub clients: u32,
    /// Seconds of load before the leader is killed.
    #[arg(long, default_value_t = 3.0)]
    pub before_s: f64,
    /// Seconds of load after the kill.
    #[arg(long, default_value_t = 5.0)]
    pub after_s: f64,
    /// mmap or sync.
    #[arg(long, default_value = "mmap")]
    pub durability: String,
}

/// One client's view of one INCR.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Outcome {
    /// When it was sent (ms since the load started).
    pub sent_ms: f64,
    /// When its answer (or error) came (ms since the load started).
    pub done_ms: f64,
    /// Whether it was answered with the counter's new value.
    pub ok: bool,
}

/// One bucket of the timeline.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Bucket {
    /// Start of the bucket, ms relative to the kill (negative before it).
    pub t_ms: i64,
    /// INCRs answered in it.
    pub commits: u64,
    /// INCRs that failed in it (an error reply or a lost connection).
    pub errors: u64,
}

/// What the run measured.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Figures {
    /// From the kill until the first INCR sent after it was answered (None: never, in the run).
    pub failover_ms: Option<f64>,
    /// From the last answer before the kill until answers flow again after the failover, in ms.
    pub longest_gap_ms: Option<f64>,
    /// Commits per second before the kill.
    pub before_ops: f64,
    /// Commits per second from the failover to the end.
    pub after_ops: f64,
    /// Failed INCRs in the run.
    pub errors: u64,
}

/// Buckets the outcomes around `kill_ms`, from the first to the last outcome.
pub fn timeline(outcomes: &[Outcome], kill_ms: f64) -> Vec<Bucket> {
    let bucket = |ms: f64| ((ms - kill_ms) / BUCKET_MS as f64).floor() as i64;
    let (Some(first), Some(last)) = (
        outcomes.iter().map(|o| bucket(o.done_ms)).min(),
        outcomes.iter().map(|o| bucket(o.done_ms)).max(),
    ) else {
        return Vec::new();
    };
    let mut out: Vec<Bucket> = (first..=last)
        .map(|b| Bucket {
            t_ms: b * BUCKET_MS as i64,
            commits: 0,
            errors: 0,
        })
        .collect();
    for o in outcomes {
        let b = &mut out[(bucket(o.done_ms) - first) as usize];
        if o.ok {
            b.commits += 1;
        } else {
            b.errors += 1;
        }
    }
    out
}

/// The failover time and throughput figures of a run whose leader was killed at `kill_ms` and
/// whose load ended at `end_ms`.
pub fn figures(outcomes: &[Outcome], kill_ms: f64, end_ms: f64) -> Figures {
    let failover_at = outcomes
        .iter()
        .filter(|o| o.ok && o.sent_ms >= kill_ms)
        .map(|o| o.done_ms)
        .min_by(f64::total_cmp);
    let last_before = outcomes
        .iter()
        .filter(|o| o.ok && o.done_ms <= kill_ms)
        .map(|o| o.done_ms)
        .max_by(f64::total_cmp);
    let first_after = outcomes
        .iter()
        .filter(|o| o.ok && o.done_ms > kill_ms)
        .map(|o| o.done_ms);
    // The gap around the kill: from the last answer before it to the first answer at or after
    // the failover that is followed by another within a bucket (answers to INCRs decided before
    // the kill that trickle in just after it do not end the gap).
    let mut after: Vec<f64> = first_after.collect();
    after.sort_by(f64::total_cmp);
    let resumed = after
        .windows(2)
        .find(|w| w[1] - w[0] <= BUCKET_MS as f64 && failover_at.is_some_and(|f| w[0] >= f))
        .map(|w| w[0]);
    let longest_gap_ms = match (last_before, resumed) {
        (Some(a), Some(b)) => Some(b - a),
        _ => None,
    };
    let count = |from: f64, to: f64| {
        outcomes
            .iter()
            .filter(|o| o.ok && o.done_ms >= from && o.done_ms < to)
            .count() as f64
    };
    let start = outcomes
        .iter()
        .map(|o| o.sent_ms)
        .min_by(f64::total_cmp)
        .unwrap_or(0.0);
    let per_s = |n: f64, ms: f64| if ms > 0.0 { n * 1000.0 / ms } else { 0.0 };
    Figures {
        failover_ms: failover_at.map(|f| f - kill_ms),
        longest_gap_ms,
        before_ops: per_s(count(start, kill_ms), kill_ms - start),
        after_ops: failover_at.map_or(0.0, |f| per_s(count(f, end_ms), end_ms - f)),
        errors: outcomes.iter().filter(|o| !o.ok).count() as u64,
    }
}

/// Which of `endpoints` says `log_is_leader:1` in INFO replication.
pub(crate) fn find_leader(endpoints: &[SocketAddr]) -> Result<usize, String> {
    let deadline = Instant::now() + Duration::from_secs(20);
    while Instant::now() < deadline {
        for (i, &addr) in endpoints.iter().enumerate() {
            if info_replication(addr).is_ok_and(|info| info.contains("log_is_leader:1")) {
                return Ok(i);
            }
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    Err("no replica says log_is_leader:1 within 20 s".into())
}

/// INFO replication of `addr`: the text of its bulk-string reply.
pub(crate) fn info_replication(addr: SocketAddr) -> std::io::Result<String> {
    use std::io::{BufRead as _, BufReader, Read as _};
    let mut stream = probe::connect(addr, Duration::from_secs(3))?;
    stream.write_all(&probe::resp_request(&["INFO", "replication"]))?;
    let mut reader = BufReader::new(stream);
    let mut header = String::new();
    reader.read_line(&mut header)?;
    let len: usize = header
        .trim_end()
        .strip_prefix('$')
        .and_then(|n| n.parse().ok())
        .ok_or_else(|| std::io::Error::other(format!("INFO answered {header:?}")))?;
    let mut text = vec![0u8; len];
    reader.read_exact(&mut text)?;
    Ok(String::from_utf8_lossy(&text).into_owned())
}

/// One closed-loop client: INCRs through replica `first`, moving to the next replica when its
/// connection fails, until `stop`.
fn client(
    i: u32,
    endpoints: Vec<SocketAddr>,
    first: usize,
    start: Instant,
    stop: Arc<AtomicBool>,
) -> Vec<Outcome> {
    let key = format!("failover:c{i}");
    let ms = |t: Instant| t.duration_since(start).as_secs_f64() * 1000.0;
    let mut out = Vec::new();
    let mut at = first;
    let mut conn: Option<TcpStream> = None;
    while !stop.load(Ordering::Relaxed) {
        let sent = Instant::now();
        let stream = match conn.take() {
            Some(s) => Ok(s),
            None => probe::connect(endpoints[at], ANSWER_TIMEOUT),
        };
        let answer = stream.and_then(|mut s| {
            let reply = probe::resp_ask_on(&mut s, &["INCR", &key])?;
            Ok((s, reply))
        });
        let done = Instant::now();
        let ok = match answer {
            Ok((s, reply)) => {
                conn = Some(s);
                reply.starts_with(':')
            }
            Err(_) => {
                at = (at + 1) % endpoints.len();
                false
            }
        };
        out.push(Outcome {
            sent_ms: ms(sent),
            done_ms: ms(done),
            ok,
        });
        if !ok {
            std::thread::sleep(Duration::from_millis(10));
        }
    }
    out
}

fn default_logless() -> Result<PathBuf, String> {
    let exe = std::env::current_exe().map_err(|e| format!("no current executable: {e}"))?;
    let beside = exe.with_file_name("logless");
    if beside.is_file() {
        return Ok(beside);
    }
    peers::which("logless").ok_or_else(|| "no logless binary found: give --logless PATH".into())
}

/// The run's results as written to result.json.
#[derive(Serialize)]
struct Report<'a> {
    args: String,
    replicas: u16,
    clients: u32,
    durability: &'a str,
    leader_killed: usize,
    new_leader: Option<usize>,
    goal_ms: f64,
    figures: &'a Figures,
}

/// Runs the experiment and writes its results into `--out`.
pub fn run(args: &FailoverArgs) -> Result<(), String> {
    if !(args.before_s >= 0.5 && args.after_s >= 1.5) {
        return Err("--before-s must be at least 0.5 and --after-s at least 1.5".into());
    }
    if args.clients == 0 {
        return Err("--clients must be at least 1".into());
    }
    if args.durability != "mmap" && args.durability != "sync" {
        return Err(format!(
            "--durability must be mmap or sync, not {:?}",
            args.durability
        ));
    }
    std::fs::create_dir_all(&args.out)
        .map_err(|e| format!("cannot create {}: {e}", args.out.display()))?;
    let bin = match &args.logless {
        Some(p) => p.clone(),
        None => default_logless()?,
    };
    let opts = LoglessOpts {
        bin,
        replicas: 3,
        durability: args.durability.clone(),
        engine: "multipaxos".into(),
        read_retries: 1,
        limit_s: (args.before_s + args.after_s) as u64 + 120,
    };
    let mut sys: Running = peers::start_logless_servers("failover", &opts)?;
    let endpoints: Vec<SocketAddr> = sys
        .endpoints
        .iter()
        .map(|e| e.parse().map_err(|e| format!("bad endpoint: {e}")))
        .collect::<Result<_, String>>()?;
    let leader = find_leader(&endpoints)?;
    println!(
        "failover: 3 replicas ({}), leader replica {}, {} clients sending INCR through every replica",
        args.durability,
        leader + 1,
        args.clients
    );
    let stop = Arc::new(AtomicBool::new(false));
    let start = Instant::now();
    let threads: Vec<_> = (0..args.clients)
        .map(|i| {
            let (endpoints, stop) = (endpoints.clone(), stop.clone());
            let first = i as usize % endpoints.len();
            std::thread::spawn(move || client(i, endpoints, first, start, stop))
        })
        .collect();
    std::thread::sleep(Duration::from_secs_f64(args.before_s));
    let kill_ms = start.elapsed().as_secs_f64() * 1000.0;
    sys.crash(leader)?;
    println!("failover: killed replica {} with SIGKILL", leader + 1);
    std::thread::sleep(Duration::from_secs_f64(args.after_s));
    let end_ms = start.elapsed().as_secs_f64() * 1000.0;
    stop.store(true, Ordering::Relaxed);
    let mut outcomes: Vec<Outcome> = Vec::new();
    for t in threads {
        let mine = t.join().map_err(|_| "a client thread panicked")?;
        outcomes.extend(mine.into_iter().filter(|o| o.done_ms <= end_ms));
    }
    let survivors: Vec<SocketAddr> = endpoints
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != leader)
        .map(|(_, a)| *a)
        .collect();
    let new_leader = find_leader(&survivors)
        .ok()
        .map(|i| if i >= leader { i + 1 } else { i });
    sys.stop();
    let buckets = timeline(&outcomes, kill_ms);
    let figs = figures(&outcomes, kill_ms, end_ms);
    let report = Report {
        args: std::env::args().skip(1).collect::<Vec<_>>().join(" "),
        replicas: 3,
        clients: args.clients,
        durability: &args.durability,
        leader_killed: leader + 1,
        new_leader: new_leader.map(|i| i + 1),
        goal_ms: GOAL_MS,
        figures: &figs,
    };
    write_results(&args.out, &report, &buckets)?;
    println!("\n{}", summary(&report, &buckets));
    match figs.failover_ms {
        Some(ms) if ms <= GOAL_MS => Ok(()),
        Some(ms) => {
            println!(
                "failover: the goal of {GOAL_MS:.0} ms is missed by {:.0} ms",
                ms - GOAL_MS
            );
            Ok(())
        }
        None => Err(format!(
            "the cluster did not commit again within {} s of the kill",
            args.after_s
        )),
    }
}

fn opt_ms(x: Option<f64>) -> String {
    x.map(|v| format!("{v:.0} ms"))
        .unwrap_or_else(|| "never".into())
}

fn summary(r: &Report<'_>, buckets: &[Bucket]) -> String {
    let f = r.figures;
    let mut s = String::from("# Failover of the log engine\n\n");
    let _ = writeln!(
        s,
        "A {}-replica `--engine multipaxos` cluster (`--durability {}`, default timeouts), {} \
         closed-loop clients sending INCR through every replica; replica {} (the leader) killed \
         with SIGKILL. New leader: {}.\n",
        r.replicas,
        r.durability,
        r.clients,
        r.leader_killed,
        r.new_leader
            .map(|i| format!("replica {i}"))
            .unwrap_or_else(|| "unknown".into())
    );
    let verdict = match f.failover_ms {
        Some(ms) if ms <= r.goal_ms => "met".to_string(),
        Some(ms) => format!("missed by {:.0} ms", ms - r.goal_ms),
        None => "missed: no commit after the kill".into(),
    };
    let _ = writeln!(
        s,
        "| figure | value |\n| --- | ---: |\n\
         | kill → first INCR sent after the kill answered | {} |\n\
         | last answer before the kill → answers flowing again | {} |\n\
         | commits/s before the kill | {:.0} |\n\
         | commits/s after the failover | {:.0} |\n\
         | failed INCRs (errors, lost connections) | {} |\n\
         | goal ≤ {:.0} ms | {} |\n",
        opt_ms(f.failover_ms),
        opt_ms(f.longest_gap_ms),
        f.before_ops,
        f.after_ops,
        f.errors,
        r.goal_ms,
        verdict
    );
    let quiet = buckets
        .iter()
        .filter(|b| b.t_ms >= 0 && b.commits == 0)
        .count();
    let _ = writeln!(
        s,
        "{quiet} of the {BUCKET_MS} ms buckets after the kill had no commit. Timeline: \
         timeline.csv, failover.png.\n"
    );
    let _ = writeln!(s, "Command: `logless bench failover {}`", r.args);
    s
}

fn write_results(out: &Path, report: &Report<'_>, buckets: &[Bucket]) -> Result<(), String> {
    let write = |name: &str, text: &str| {
        std::fs::write(out.join(name), text)
            .map_err(|e| format!("cannot write {}: {e}", out.join(name).display()))
    };
    let mut csv = String::from("t_ms,commits,errors\n");
    for b in buckets {
        let _ = writeln!(csv, "{},{},{}", b.t_ms, b.commits, b.errors);
    }
    write("timeline.csv", &csv)?;
    let json = serde_json::to_string_pretty(report).map_err(|e| e.to_string())?;
    write("result.json", &(json + "\n"))?;
    write("summary.md", &summary(report, buckets))?;
    let secs = |b: &Bucket| b.t_ms as f64 / 1000.0;
    let panels = [Panel {
        title: format!("commits and errors per {BUCKET_MS} ms"),
        lines: vec![
            Line {
                label: "commits".into(),
                points: buckets
                    .iter()
                    .map(|b| (secs(b), b.commits as f64))
                    .collect(),
            },
            Line {
                label: "errors".into(),
                points: buckets.iter().map(|b| (secs(b), b.errors as f64)).collect(),
            },
        ],
    }];
    let mut markers = vec![0.0];
    markers.extend(report.figures.failover_ms.map(|ms| ms / 1000.0));
    let axes = Axes {
        x_log: false,
        y_log: false,
        markers,
        marker_label: "leader killed, first commit after".into(),
    };
    draw_with(
        &out.join("failover.png"),
        "log engine: the leader killed under INCR load",
        "seconds from the kill",
        &format!("INCRs per {BUCKET_MS} ms"),
        &panels,
        &axes,
    )
    .map_err(|e| format!("cannot draw failover.png: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn o(sent_ms: f64, done_ms: f64, ok: bool) -> Outcome {
        Outcome {
            sent_ms,
            done_ms,
            ok,
        }
    }

    #[test]
    fn buckets_count_commits_and_errors_around_the_kill() {
        let outs = [
            o(0.0, 1.0, true),
            o(1.0, 2.0, true),
            o(995.0, 1005.0, false),
            o(1010.0, 1031.0, true),
        ];
        let t = timeline(&outs, 1000.0);
        assert_eq!(t.first().map(|b| b.t_ms), Some(-1000));
        assert_eq!(t.last().map(|b| b.t_ms), Some(30));
        let at = |ms: i64| t.iter().find(|b| b.t_ms == ms).cloned();
        assert_eq!(at(-1000).map(|b| b.commits), Some(2));
        assert_eq!(at(0).map(|b| (b.commits, b.errors)), Some((0, 1)));
        assert_eq!(at(30).map(|b| b.commits), Some(1));
        assert!(timeline(&[], 0.0).is_empty());
    }

    #[test]
    fn failover_ends_with_the_first_answer_to_a_request_sent_after_the_kill() {
        let mut outs = vec![o(0.0, 500.0, true), o(900.0, 990.0, true)];
        // Decided before the kill, answered just after it: not a new leader's commit.
        outs.push(o(995.0, 1003.0, true));
        // Sent after the kill, answered once a new leader commits.
        outs.push(o(1001.0, 1400.0, true));
        outs.push(o(1400.0, 1405.0, true));
        outs.push(o(1405.0, 1410.0, true));
        outs.push(o(1002.0, 1100.0, false));
        let f = figures(&outs, 1000.0, 2000.0);
        assert_eq!(f.failover_ms, Some(400.0));
        assert_eq!(f.longest_gap_ms, Some(1400.0 - 990.0));
        assert_eq!(f.errors, 1);
        assert!((f.before_ops - 2.0).abs() < 1e-9, "{}", f.before_ops);
        assert!((f.after_ops - 3.0 * 1000.0 / 600.0).abs() < 1e-9);
        let never = figures(
            &[o(0.0, 10.0, true), o(1001.0, 1500.0, false)],
            1000.0,
            2000.0,
        );
        assert_eq!(never.failover_ms, None);
        assert_eq!(never.after_ops, 0.0);
    }
}
