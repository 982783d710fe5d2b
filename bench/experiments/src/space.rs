//! `logless bench space`: what keys cost and whether dead keys give their space back.
//!
//! Three `logless server` replicas on loopback (separate processes, so that one can be killed
//! and started again), all writes through the first, as a client of one replica would:
//!
//! 1. **Memory per key.** `--keys` keys of `--value-bytes` bytes (`key:%012d`, as
//!    redis-benchmark names them); then each replica's resident memory, its store's bytes on
//!    disk and DBSIZE, against redis-server's resident memory for the same keys (when
//!    redis-server is installed).
//! 2. **Restart.** The last replica is killed with SIGKILL and started again; the time from its
//!    start until it answers a GET of a stored key.
//! 3. **Churn.** `--rounds` rounds of `--churn-keys` new keys each with `PX --px-ms`; after
//!    each round has expired, each replica's resident memory, store bytes, DBSIZE and how many
//!    registers it holds, tombstones included (`logless_registers` of `/metrics`). The
//!    goal: after the last round, memory and store within 10% of the figures before the first.
//!    Then the restart again, on the churned store.
//!
//! Results: `space.csv` (one row per replica and phase), `summary.md` with the ratios against
//! the goals, and `churn.png`.
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressStyle};
use logless_harness::probe;
use logless_harness::server::{self, ServerSpec};
use logless_redis::resp::write_request;

use crate::compare::cpu::descendants;
use crate::compare::peers::{self, Proc};
use crate::plot::{self, Axes, Line, Panel};

/// The options of `logless bench space`.
#[derive(clap::Args, Clone, Debug)]
pub struct SpaceArgs {
    /// The `logless` binary (default: beside this program, else `target/release/logless`).
    #[arg(long)]
    pub logless: Option<PathBuf>,
    /// Keys written for the memory measurement.
    #[arg(long, default_value_t = 1_000_000)]
    pub keys: u64,
    /// Bytes of each value.
    #[arg(long, default_value_t = 16)]
    pub value_bytes: usize,
    /// Churn rounds.
    #[arg(long, default_value_t = 10)]
    pub rounds: u32,
    /// Keys written per churn round.
    #[arg(long, default_value_t = 300_000)]
    pub churn_keys: u64,
    /// The time to live of the churn keys, in milliseconds.
    #[arg(long, default_value_t = 100)]
    pub px_ms: u64,
    /// How long to wait after a round before measuring (expiry and removal at work).
    #[arg(long, default_value_t = 2_000)]
    pub settle_ms: u64,
    /// mmap or sync.
    #[arg(long, default_value = "mmap")]
    pub durability: String,
    /// Small numbers for a smoke run: 20,000 keys, 3 rounds of 10,000.
    #[arg(long)]
    pub quick: bool,
    /// Where the results go.
    #[arg(long, default_value = "space-results")]
    pub out: PathBuf,
}

/// What one replica (or redis-server) holds at one point.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Sample {
    /// Resident memory, bytes.
    pub rss_bytes: u64,
    /// The anonymous part of it (`RssAnon`: the heap, without the store's mapped pages),
    /// bytes.
    pub anon_bytes: u64,
    /// Bytes its data directory takes on disk (allocated blocks).
    pub store_bytes: u64,
    /// DBSIZE.
    pub dbsize: u64,
    /// Registers it holds, tombstones included, if `/metrics` answered.
    pub registers: Option<u64>,
}

/// How many connections write at once, and how many commands each has in flight.
const CONNECTIONS: u64 = 4;
const PIPELINE: u64 = 64;
/// How long one reply may take: long, since a loaded machine (or a replica catching up) is
/// slow, not broken.
const TIMEOUT: Duration = Duration::from_secs(60);

/// Runs the whole measurement.
pub fn run(args: &SpaceArgs) -> Result<(), String> {
    let mut args = args.clone();
    if args.quick {
        args.keys = 20_000;
        args.rounds = 3;
        args.churn_keys = 10_000;
    }
    let bin = logless_binary(args.logless.as_deref())?;
    std::fs::create_dir_all(&args.out).map_err(|e| format!("{}: {e}", args.out.display()))?;
    let data = tempfile::Builder::new()
        .prefix("logless-space-")
        .tempdir()
        .map_err(|e| e.to_string())?;
    let port = peers::free_ports(&server::PORT_OFFSETS, 3)?;
    let specs = server::loopback_cluster(3, port, data.path(), &args.durability);
    let limit_s = 3_600;
    let mut procs: Vec<Proc> = specs
        .iter()
        .map(|s| spawn(&bin, s, limit_s))
        .collect::<Result<_, _>>()?;
    let clients: Vec<SocketAddr> = specs.iter().map(|s| s.client).collect();
    wait_until(Duration::from_secs(60), "the replicas to serve", || {
        probe::cluster_serves(&clients, "space:ready", TIMEOUT)
    })?;
    let mut rows = Vec::new();
    let mut report = String::new();

    let value = vec![b'x'; args.value_bytes];
    let bar = progress(args.keys, "memory: writing keys");
    write_keys(
        clients[0],
        args.keys,
        |i| format!("key:{i:012}"),
        &value,
        None,
        &bar,
    )?;
    bar.finish_and_clear();
    let filled: Vec<Sample> = (0..3).map(|i| sample(&procs[i], &specs[i])).collect();
    for (i, s) in filled.iter().enumerate() {
        rows.push(row("filled", i, s));
    }
    let redis = measure_redis(&args, &value)?;
    report.push_str(&memory_report(&args, &filled, redis.as_ref()));

    let last = specs.len() - 1;
    let restart_fresh = restart(&bin, &mut procs, &specs, last, limit_s)?;
    report.push_str(&format!(
        "\n## Restart\n\n* replica {} (kill -9, then start) with {} keys: first GET answered after \
         **{:.0} ms** (goal ≤ 500 ms with 10⁶ registers)\n",
        last + 1,
        args.keys,
        restart_fresh.as_secs_f64() * 1e3
    ));

    let before: Vec<Sample> = (0..3).map(|i| sample(&procs[i], &specs[i])).collect();
    for (i, s) in before.iter().enumerate() {
        rows.push(row("churn 0", i, s));
    }
    let mut rounds = vec![before.clone()];
    let bar = progress(u64::from(args.rounds) * args.churn_keys, "churn");
    for round in 1..=args.rounds {
        let name = |i: u64| format!("churn:{round}:{i:010}");
        write_keys(
            clients[0],
            args.churn_keys,
            name,
            b"v",
            Some(args.px_ms),
            &bar,
        )?;
        std::thread::sleep(Duration::from_millis(args.px_ms + args.settle_ms));
        let samples: Vec<Sample> = (0..3).map(|i| sample(&procs[i], &specs[i])).collect();
        for (i, s) in samples.iter().enumerate() {
            rows.push(row(&format!("churn {round}"), i, s));
        }
        bar.println(format!(
            "round {round}: {}",
            samples
                .iter()
                .enumerate()
                .map(|(i, s)| format!(
                    "replica {} rss {:.0} MB store {:.0} MB dbsize {} registers {}",
                    i + 1,
                    mb(s.rss_bytes),
                    mb(s.store_bytes),
                    s.dbsize,
                    s.registers.map_or("?".to_string(), |r| r.to_string())
                ))
                .collect::<Vec<_>>()
                .join("; ")
        ));
        rounds.push(samples);
    }
    bar.finish_and_clear();
    report.push_str(&churn_report(&args, &rounds));
    let restart_churned = restart(&bin, &mut procs, &specs, last, limit_s)?;
    report.push_str(&format!(
        "* after the churn: first GET answered after **{:.0} ms**\n",
        restart_churned.as_secs_f64() * 1e3
    ));
    for p in procs.iter_mut() {
        p.stop(Duration::from_secs(15));
    }

    write_csv(&args.out.join("space.csv"), &rows)?;
    plot_churn(&args.out.join("churn.png"), &rounds)?;
    let summary = format!(
        "# logless bench space\n\n{} keys of {} B, churn {} × {} keys with PX {} ms, {} \
         durability.\n{report}",
        args.keys, args.value_bytes, args.rounds, args.churn_keys, args.px_ms, args.durability
    );
    std::fs::write(args.out.join("summary.md"), &summary).map_err(|e| e.to_string())?;
    println!("{summary}");
    println!("results in {}", args.out.display());
    Ok(())
}

pub(crate) fn logless_binary(given: Option<&Path>) -> Result<PathBuf, String> {
    if let Some(path) = given {
        return Ok(path.to_path_buf());
    }
    let sibling = std::env::current_exe()
        .ok()
        .and_then(|exe| exe.parent().map(|dir| dir.join("logless")));
    let built = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/release/logless");
    [sibling, Some(built)]
        .into_iter()
        .flatten()
        .find(|p| p.exists())
        .ok_or_else(|| "no logless binary: build it or pass --logless".to_string())
}

/// Starts a replica of `spec`, logging at `warn` and a start's timed steps
/// (`logless::restart` at `info`, which `logless bench recovery` reads) unless
/// `LOGLESS_BENCH_SERVER_LOG_LEVEL` says otherwise (a tracing filter, for looking into a run:
/// `info` shows, among others, each snapshot the log engine writes off its loop and each ring
/// stage a node installs).
pub(crate) fn spawn(bin: &Path, spec: &ServerSpec, limit_s: u64) -> Result<Proc, String> {
    let level = std::env::var("LOGLESS_BENCH_SERVER_LOG_LEVEL")
        .unwrap_or_else(|_| "warn,logless::restart=info".into());
    let spec = spec.clone().flag("--log-level", &level);
    Proc::spawn(
        &format!("replica {}", spec.node_id),
        bin,
        &spec.command_line(),
        &spec.log,
        limit_s,
    )
}

pub(crate) fn wait_until(
    limit: Duration,
    what: &str,
    mut ready: impl FnMut() -> bool,
) -> Result<(), String> {
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        if ready() {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    Err(format!("timed out waiting for {what}"))
}

pub(crate) fn progress(total: u64, message: &'static str) -> ProgressBar {
    let bar = ProgressBar::new(total);
    bar.set_style(
        ProgressStyle::with_template("{msg} [{bar:40}] {pos}/{len} ({eta})")
            .expect("a valid template")
            .progress_chars("=> "),
    );
    bar.set_message(message);
    bar
}

/// Writes `count` keys named by `name` with `value` (and `PX px_ms`), through `CONNECTIONS`
/// connections with `PIPELINE` commands in flight on each; fails on any error reply.
pub(crate) fn write_keys(
    addr: SocketAddr,
    count: u64,
    name: impl Fn(u64) -> String + Sync,
    value: &[u8],
    px_ms: Option<u64>,
    bar: &ProgressBar,
) -> Result<(), String> {
    std::thread::scope(|scope| {
        let workers: Vec<_> = (0..CONNECTIONS)
            .map(|c| {
                let name = &name;
                scope.spawn(move || -> Result<(), String> {
                    let mut stream = TcpStream::connect_timeout(&addr, TIMEOUT)
                        .map_err(|e| format!("connect {addr}: {e}"))?;
                    stream
                        .set_read_timeout(Some(TIMEOUT))
                        .map_err(|e| e.to_string())?;
                    let mine: Vec<u64> = (c..count).step_by(CONNECTIONS as usize).collect();
                    for chunk in mine.chunks(PIPELINE as usize) {
                        // A command answered TRYAGAIN or UNCERTAIN: send it again.
                        let mut todo = chunk.to_vec();
                        for attempt in 0.. {
                            let mut out = Vec::new();
                            for &i in &todo {
                                let key = name(i);
                                let px = px_ms.map(|ms| ms.to_string());
                                let mut args: Vec<&[u8]> = vec![b"SET", key.as_bytes(), value];
                                if let Some(px) = &px {
                                    args.extend([b"PX".as_slice(), px.as_bytes()]);
                                }
                                write_request(&mut out, &args);
                            }
                            stream.write_all(&out).map_err(|e| e.to_string())?;
                            let again = read_simple_replies(&mut stream, todo.len())?;
                            todo = again.into_iter().map(|k| todo[k]).collect();
                            if todo.is_empty() {
                                break;
                            }
                            if attempt == 100 {
                                return Err("TRYAGAIN or UNCERTAIN 100 times in a row".into());
                            }
                            std::thread::sleep(Duration::from_millis(10));
                        }
                        bar.inc(chunk.len() as u64);
                    }
                    Ok(())
                })
            })
            .collect();
        workers
            .into_iter()
            .try_for_each(|w| w.join().unwrap_or_else(|_| Err("a writer panicked".into())))
    })
}

/// Reads `n` one-line replies; returns the positions of those answered TRYAGAIN (not
/// applied) or UNCERTAIN (maybe applied: a SET of a fixed value may be sent again, it is
/// idempotent), to send again; any other error reply fails.
fn read_simple_replies(stream: &mut TcpStream, n: usize) -> Result<Vec<usize>, String> {
    let mut buffer = Vec::new();
    let mut chunk = [0u8; 16 * 1024];
    let mut lines = 0;
    let mut scanned = 0;
    let mut again = Vec::new();
    while lines < n {
        let got = stream.read(&mut chunk).map_err(|e| e.to_string())?;
        if got == 0 {
            return Err("the server closed the connection".into());
        }
        buffer.extend_from_slice(&chunk[..got]);
        while let Some(at) = buffer[scanned..].windows(2).position(|w| w == b"\r\n") {
            let line = &buffer[scanned..scanned + at];
            if line.starts_with(b"-TRYAGAIN") || line.starts_with(b"-UNCERTAIN") {
                again.push(lines);
            } else if line.first() == Some(&b'-') {
                return Err(format!("error reply: {}", String::from_utf8_lossy(line)));
            }
            scanned += at + 2;
            lines += 1;
        }
    }
    Ok(again)
}

/// The resident memory of the processes under `root` (the program `timeout` started).
pub(crate) fn rss_under(root: u32) -> u64 {
    status_bytes_under(root, vm_rss_bytes)
}

/// The anonymous resident memory of process `root` and its descendants.
fn anon_under(root: u32) -> u64 {
    status_bytes_under(root, |status| status_bytes(status, "RssAnon:"))
}

/// The sum of `field` of the `/proc/<pid>/status` of process `root` and its descendants.
fn status_bytes_under(root: u32, field: impl Fn(&str) -> Option<u64>) -> u64 {
    descendants(root)
        .into_iter()
        .filter_map(|pid| std::fs::read_to_string(format!("/proc/{pid}/status")).ok())
        .filter_map(|status| field(&status))
        .sum()
}

/// `VmRSS` of a `/proc/<pid>/status` text, in bytes.
pub fn vm_rss_bytes(status: &str) -> Option<u64> {
    status_bytes(status, "VmRSS:")
}

/// The field named `name` (with its colon) of a `/proc/<pid>/status` text, in bytes.
fn status_bytes(status: &str, name: &str) -> Option<u64> {
    let line = status.lines().find(|l| l.starts_with(name))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

/// The bytes the files under `dir` take on disk (allocated blocks, so a sparse or
/// preallocated file counts what it uses).
pub(crate) fn disk_bytes(dir: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .flatten()
        .map(|e| match e.metadata() {
            Ok(m) if m.is_dir() => disk_bytes(&e.path()),
            Ok(m) => m.blocks() * 512,
            Err(_) => 0,
        })
        .sum()
}

/// The value of the unlabelled metric `name` in a Prometheus text page.
pub fn metric(page: &str, name: &str) -> Option<u64> {
    page.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
        .and_then(|v| v.trim().parse().ok())
}

/// Sends one command and reads its whole reply (a bulk string or a line).
fn ask(addr: SocketAddr, args: &[&str]) -> Result<String, String> {
    let mut stream = TcpStream::connect_timeout(&addr, TIMEOUT).map_err(|e| e.to_string())?;
    stream
        .set_read_timeout(Some(TIMEOUT))
        .map_err(|e| e.to_string())?;
    stream
        .write_all(&probe::resp_request(args))
        .map_err(|e| e.to_string())?;
    let mut reply = Vec::new();
    let mut chunk = [0u8; 64 * 1024];
    loop {
        let got = stream.read(&mut chunk).map_err(|e| e.to_string())?;
        if got == 0 {
            break;
        }
        reply.extend_from_slice(&chunk[..got]);
        if complete(&reply) {
            break;
        }
    }
    Ok(String::from_utf8_lossy(&reply).into_owned())
}

/// Whether `reply` holds one whole RESP reply of the simple kinds (line or bulk string).
fn complete(reply: &[u8]) -> bool {
    let Some(end) = reply.windows(2).position(|w| w == b"\r\n") else {
        return false;
    };
    if reply[0] != b'$' {
        return true;
    }
    let len: i64 = std::str::from_utf8(&reply[1..end])
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(-1);
    len < 0 || reply.len() >= end + 2 + len as usize + 2
}

/// DBSIZE of the server at `addr` (0 if it does not answer).
pub(crate) fn dbsize(addr: SocketAddr) -> u64 {
    ask(addr, &["DBSIZE"])
        .ok()
        .and_then(|r| r.trim().strip_prefix(':')?.parse().ok())
        .unwrap_or(0)
}

fn sample(proc: &Proc, spec: &ServerSpec) -> Sample {
    let dbsize = dbsize(spec.client);
    let registers = probe::http_get(spec.http, "/metrics", TIMEOUT)
        .ok()
        .and_then(|(_, page)| metric(&page, "logless_registers"));
    Sample {
        rss_bytes: rss_under(proc.pid()),
        anon_bytes: anon_under(proc.pid()),
        store_bytes: disk_bytes(&spec.dir),
        dbsize,
        registers,
    }
}

/// Kills replica `i` with SIGKILL, starts it again and times its first answered GET.
fn restart(
    bin: &Path,
    procs: &mut [Proc],
    specs: &[ServerSpec],
    i: usize,
    limit_s: u64,
) -> Result<Duration, String> {
    procs[i].crash();
    // The killed process may hold its ports for a moment after its parent has been reaped.
    let addr = specs[i].client;
    wait_until(Duration::from_secs(30), "the killed replica's port", || {
        TcpStream::connect_timeout(&addr, Duration::from_millis(100))
            .is_err_and(|e| e.kind() == std::io::ErrorKind::ConnectionRefused)
    })?;
    let started = Instant::now();
    procs[i] = spawn(bin, &specs[i], limit_s)?;
    wait_until(Duration::from_secs(120), "the restarted replica", || {
        probe::resp_ask(
            addr,
            &["GET", "key:000000000000"],
            Duration::from_millis(200),
        )
        .is_ok_and(|r| r.starts_with('$'))
    })
    .map_err(|e| format!("{e}; its log ends:\n{}", procs[i].log_tail()))?;
    Ok(started.elapsed())
}

/// redis-server with the same keys, if it is installed: its sample.
fn measure_redis(args: &SpaceArgs, value: &[u8]) -> Result<Option<Sample>, String> {
    let Some(bin) = peers::which("redis-server") else {
        eprintln!("redis-server is not installed: no comparison");
        return Ok(None);
    };
    let redis = peers::start_redis("space-redis", &bin, false, 3_600)?;
    let addr: SocketAddr = redis.endpoints[0]
        .parse()
        .map_err(|e| format!("redis endpoint: {e}"))?;
    let bar = progress(args.keys, "redis-server: writing keys");
    write_keys(
        addr,
        args.keys,
        |i| format!("key:{i:012}"),
        value,
        None,
        &bar,
    )?;
    bar.finish_and_clear();
    let rss = redis.pids().into_iter().map(rss_under).sum();
    let anon = redis.pids().into_iter().map(anon_under).sum();
    let dbsize = dbsize(addr);
    redis.stop();
    Ok(Some(Sample {
        rss_bytes: rss,
        anon_bytes: anon,
        store_bytes: 0,
        dbsize,
        registers: None,
    }))
}

fn mb(bytes: u64) -> f64 {
    bytes as f64 / 1e6
}

fn memory_report(args: &SpaceArgs, filled: &[Sample], redis: Option<&Sample>) -> String {
    let mut out = String::from(
        "\n## Memory per key\n\n| replica | RSS MB | anonymous MB | store MB | store B/key | DBSIZE \
         | RSS / redis |\n| --- | --- | --- | --- | --- | --- | --- |\n",
    );
    for (i, s) in filled.iter().enumerate() {
        let ratio = redis.map_or("–".to_string(), |r| {
            format!("{:.2}", s.rss_bytes as f64 / r.rss_bytes.max(1) as f64)
        });
        out.push_str(&format!(
            "| {}{} | {:.0} | {:.0} | {:.0} | {:.0} | {} | {ratio} |\n",
            i + 1,
            if i == 0 { " (proposing)" } else { "" },
            mb(s.rss_bytes),
            mb(s.anon_bytes),
            mb(s.store_bytes),
            s.store_bytes as f64 / args.keys.max(1) as f64,
            s.dbsize
        ));
    }
    if let Some(r) = redis {
        out.push_str(&format!(
            "| redis-server | {:.0} | {:.0} | – | – | {} | 1 |\n\nGoal: each replica's RSS ≤ 1.5 × \
             redis-server's.\n",
            mb(r.rss_bytes),
            mb(r.anon_bytes),
            r.dbsize
        ));
    }
    out
}

fn churn_report(args: &SpaceArgs, rounds: &[Vec<Sample>]) -> String {
    let mut out = format!(
        "\n## Churn\n\n{} rounds of {} keys with PX {} ms, measured {} ms after each round \
         expired.\n\n| round | replica | RSS MB | store MB | DBSIZE | registers |\n\
         | --- | --- | --- | --- | --- | --- |\n",
        args.rounds, args.churn_keys, args.px_ms, args.settle_ms
    );
    for (r, samples) in rounds.iter().enumerate() {
        for (i, s) in samples.iter().enumerate() {
            out.push_str(&format!(
                "| {r} | {} | {:.0} | {:.0} | {} | {} |\n",
                i + 1,
                mb(s.rss_bytes),
                mb(s.store_bytes),
                s.dbsize,
                s.registers.map_or("–".to_string(), |v| v.to_string())
            ));
        }
    }
    let (first, last) = (&rounds[0], &rounds[rounds.len() - 1]);
    out.push_str("\nAfter the last round, against before the first (goal ≤ 1.10):\n\n");
    for i in 0..first.len() {
        out.push_str(&format!(
            "* replica {}: RSS × {:.2}, store × {:.2}\n",
            i + 1,
            last[i].rss_bytes as f64 / first[i].rss_bytes.max(1) as f64,
            last[i].store_bytes as f64 / first[i].store_bytes.max(1) as f64
        ));
    }
    out
}

fn row(phase: &str, replica: usize, s: &Sample) -> String {
    format!(
        "{phase},{},{},{},{},{},{}",
        replica + 1,
        s.rss_bytes,
        s.anon_bytes,
        s.store_bytes,
        s.dbsize,
        s.registers.map_or(String::new(), |v| v.to_string())
    )
}

fn write_csv(path: &Path, rows: &[String]) -> Result<(), String> {
    let mut text =
        String::from("phase,replica,rss_bytes,anon_bytes,store_bytes,dbsize,registers\n");
    for r in rows {
        text.push_str(r);
        text.push('\n');
    }
    std::fs::write(path, text).map_err(|e| format!("{}: {e}", path.display()))
}

fn plot_churn(path: &Path, rounds: &[Vec<Sample>]) -> Result<(), String> {
    let series = |pick: fn(&Sample) -> u64| -> Vec<Line> {
        (0..rounds[0].len())
            .map(|i| Line {
                label: format!("replica {}", i + 1),
                points: rounds
                    .iter()
                    .enumerate()
                    .map(|(r, samples)| (r as f64, mb(pick(&samples[i]))))
                    .collect(),
            })
            .collect()
    };
    let panels = [
        Panel {
            title: "resident memory (MB)".into(),
            lines: series(|s| s.rss_bytes),
        },
        Panel {
            title: "store on disk (MB)".into(),
            lines: series(|s| s.store_bytes),
        },
    ];
    let axes = Axes {
        x_log: false,
        y_log: false,
        markers: Vec::new(),
        marker_label: String::new(),
    };
    plot::draw_with(
        path,
        "churn: expiring keys, round after round",
        "round",
        "MB",
        &panels,
        &axes,
    )
    .map_err(|e| format!("plot: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn figures_are_read_from_proc_and_info() {
        let status = "Name:\tlogless\nVmPeak:\t  200 kB\nVmRSS:\t  1234 kB\nRssAnon:\t  99 kB\n";
        assert_eq!(vm_rss_bytes(status), Some(1234 * 1024));
        assert_eq!(status_bytes(status, "RssAnon:"), Some(99 * 1024));
        assert_eq!(vm_rss_bytes("Name: x\n"), None);
        let page = "# HELP logless_registers Registers.\nlogless_registers 42\n\
                    logless_registers_removed 7\n";
        assert_eq!(metric(page, "logless_registers"), Some(42));
        assert_eq!(metric(page, "logless_registers_removed"), Some(7));
        assert_eq!(metric(page, "logless_absent"), None);
    }

    #[test]
    fn a_reply_is_complete_only_with_its_whole_bulk_string() {
        assert!(complete(b":5\r\n"));
        assert!(!complete(b"$5\r\nhel"));
        assert!(complete(b"$5\r\nhello\r\n"));
        assert!(complete(b"$-1\r\n"));
        assert!(!complete(b"+OK"));
    }

    #[test]
    fn this_process_has_resident_memory() {
        let status = std::fs::read_to_string("/proc/self/status").unwrap();
        assert!(vm_rss_bytes(&status).unwrap() > 0);
    }
}
