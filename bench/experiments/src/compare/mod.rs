//! `logless bench compare`: logless against etcd and redis-server on this machine, in the
//! experiments of the RMWPaxos paper's evaluation (§7, Figures 3–6), all driven by one
//! closed-loop load generator (`bench/loadgen`, Go).
//!
//! * (a) one counter and 1..512 clients (Fig. 3a), (b) one value of 8 B..16 KiB (Fig. 3b),
//! * (c) one writer and 1..1024 readers on one register, logless with X = 0..3 read retries (Fig. 4),
//! * (d) 1..10⁶ registers with Pareto-distributed keys, 5% and 50% writes (Fig. 5),
//! * (e) p99 latency with 3, 5 and 7 replicas, clients pinned to one replica or spread (Fig. 6a),
//! * (f) latency over time while one replica after another is killed (Fig. 6b),
//! * (g) commands over several keys: MSETs of 2–10 keys and MULTI/EXEC transfers between
//!   counters whose total must stay 0 (a run that finds it changed fails),
//! * (h) throughput at pipeline 16 with 50 clients, on one key and on 100,000 keys.
//!
//! Each system is started on free loopback ports with its data in a temporary directory
//! ([`peers`]), loadgen is run once per point ([`workloads`]), and the results are written as
//! JSON, CSV, Markdown ([`report`]) and PNG plots ([`figures`]). Every child process is bounded in
//! time and stopped when its experiment ends, fails, or this process dies.
//!
//! [`run`] must be called from a thread that lives until it returns (the main thread): the
//! children are tied to the life of the thread that started them (`PR_SET_PDEATHSIG`).
pub mod cpu;
pub mod figures;
pub mod peers;
pub mod report;
pub mod workloads;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use peers::{Family, LoglessOpts, Running, Variant, VARIANTS};
use report::{Event, Record, Results, Skip};
use workloads::{Load, Plan};

/// The arguments of `logless bench compare`.
#[derive(clap::Args, Clone, Debug, PartialEq)]
pub struct CompareArgs {
    /// A short run (under 5 minutes on 2 cores): fewer points, 1.2 s each after 0.4 s of warm-up.
    #[arg(long)]
    pub quick: bool,
    /// Where to write results.json, results.csv, summary.md and the PNG plots.
    #[arg(long, default_value = "bench-results/compare")]
    pub out: PathBuf,
    /// The systems, comma-separated: logless-mmap, logless-sync, logless-multipaxos-mmap,
    /// logless-multipaxos-sync, redis, redis-aof-always, etcd, etcd-nofsync, or the groups
    /// logless (both engines), logless-multipaxos, redis-all, etcd-all and all.
    #[arg(long, value_delimiter = ',', default_value = "all")]
    pub systems: Vec<String>,
    /// The experiments, comma-separated letters a..h (counter, values, single writer,
    /// registers, replicas, failures, multi-key, pipelined) or all.
    #[arg(long, value_delimiter = ',', default_value = "all")]
    pub experiments: Vec<String>,
    /// The loadgen binary (default: build bench/loadgen with `go build` into the out directory).
    #[arg(long)]
    pub loadgen: Option<PathBuf>,
    /// The logless binary (default: the current executable, or `logless` beside it).
    #[arg(long)]
    pub logless: Option<PathBuf>,
    /// Measured seconds per point (default: 1.2 with --quick, else 10).
    #[arg(long)]
    pub duration_s: Option<f64>,
    /// Do not `apt-get install` a missing redis-server or etcd-server: skip that system.
    #[arg(long)]
    pub no_install: bool,
    /// Run nothing: redraw the plots and print the headline from `--out`/results.json.
    #[arg(long)]
    pub replot: bool,
}

/// Expands the `--systems` list into variants, in plotting order. A variant's own name
/// (`logless-mmap`, `logless-multipaxos-sync`, `redis`, `etcd-nofsync`, ...) chooses it alone;
/// `logless` (both engines), `logless-multipaxos`, `redis-all`, `etcd-all` and `all` choose
/// groups.
pub fn parse_systems(names: &[String]) -> Result<Vec<Variant>, String> {
    let mut chosen = Vec::new();
    for name in names.iter().map(|s| s.trim()).filter(|s| !s.is_empty()) {
        let family = |f: Family| {
            VARIANTS
                .iter()
                .copied()
                .filter(|v| v.family == f)
                .collect::<Vec<_>>()
        };
        let matched: Vec<Variant> = match name {
            "all" => VARIANTS.to_vec(),
            "logless" => [family(Family::Logless), family(Family::LoglessLog)].concat(),
            "logless-multipaxos" => family(Family::LoglessLog),
            "redis-all" => family(Family::Redis),
            "etcd-all" => family(Family::Etcd),
            other => vec![peers::variant(other).ok_or_else(|| {
                let names: Vec<&str> = VARIANTS.iter().map(|v| v.name).collect();
                format!(
                    "unknown system {other:?}: use {} or the groups logless, logless-multipaxos, \
                     redis-all, etcd-all, all",
                    names.join(", ")
                )
            })?],
        };
        chosen.extend(matched);
    }
    if chosen.is_empty() {
        return Err("no systems chosen".into());
    }
    Ok(VARIANTS
        .iter()
        .copied()
        .filter(|v| chosen.contains(v))
        .collect())
}

/// Expands the `--experiments` list into letters a..h.
pub fn parse_experiments(names: &[String]) -> Result<Vec<char>, String> {
    let mut out = Vec::new();
    for name in names
        .iter()
        .map(|s| s.trim().to_ascii_lowercase())
        .filter(|s| !s.is_empty())
    {
        if name == "all" {
            out.extend(
                report::EXPERIMENTS
                    .iter()
                    .filter_map(|(l, _, _)| l.chars().next()),
            );
            continue;
        }
        let letter = report::EXPERIMENTS
            .iter()
            .find(|(l, n, _)| {
                *l == name || *n == name || n.split_once('_').is_some_and(|(_, rest)| rest == name)
            })
            .map(|(l, _, _)| l.chars().next().unwrap_or('a'))
            .ok_or_else(|| format!("unknown experiment {name:?}: use letters a..h or all"))?;
        out.push(letter);
    }
    out.sort_unstable();
    out.dedup();
    if out.is_empty() {
        return Err("no experiments chosen".into());
    }
    Ok(out)
}

fn first_line(program: &Path, args: &[&str]) -> Option<String> {
    let out = Command::new("timeout")
        .arg("10")
        .arg(program)
        .args(args)
        .output()
        .ok()?;
    let text =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    text.lines().next().map(|l| l.trim().to_string())
}

fn default_logless() -> Result<PathBuf, String> {
    let exe =
        std::env::current_exe().map_err(|e| format!("cannot find the current executable: {e}"))?;
    if exe.file_stem().is_some_and(|s| s == "logless") {
        return Ok(exe);
    }
    let beside = exe.with_file_name("logless");
    if beside.is_file() {
        return Ok(beside);
    }
    // Test binaries live in target/*/deps/.
    if let Some(up) = exe
        .parent()
        .and_then(Path::parent)
        .map(|d| d.join("logless"))
    {
        if up.is_file() {
            return Ok(up);
        }
    }
    peers::which("logless").ok_or_else(|| "no logless binary found: give --logless PATH".into())
}

fn loadgen_sources() -> PathBuf {
    if let Some(dir) = std::env::var_os("LOGLESS_LOADGEN_SRC") {
        return dir.into();
    }
    let compiled_in = Path::new(env!("CARGO_MANIFEST_DIR")).join("../loadgen");
    if compiled_in.join("go.mod").is_file() {
        return compiled_in;
    }
    PathBuf::from("bench/loadgen")
}

struct Ctx {
    plan: Plan,
    out: PathBuf,
    loadgen: PathBuf,
    logless: Option<PathBuf>,
    redis: Option<PathBuf>,
    etcd: Option<PathBuf>,
    variants: Vec<Variant>,
    records: Vec<Record>,
    notes: Vec<String>,
    skips: Vec<Skip>,
    /// Broken invariants (experiment g's transfers): the run fails at its end.
    violations: Vec<String>,
    point: usize,
    started: Instant,
}

impl Ctx {
    fn note(&mut self, text: String) {
        println!("note: {}", text.lines().next().unwrap_or(""));
        for l in text.lines().skip(1) {
            println!("      {l}");
        }
        self.notes.push(text);
    }

    /// The first chosen variant of each family: the one that runs where durability does not
    /// matter (reads) or time is short.
    fn representatives(&self) -> Vec<Variant> {
        let mut out: Vec<Variant> = Vec::new();
        for v in &self.variants {
            if !out.iter().any(|o| o.family == v.family) {
                out.push(*v);
            }
        }
        out
    }

    fn family(&self, family: Family) -> Option<Variant> {
        self.variants.iter().copied().find(|v| v.family == family)
    }

    fn start(
        &mut self,
        v: Variant,
        replicas: u16,
        read_retries: u32,
        separate: bool,
    ) -> Option<Running> {
        let limit = self.plan.server_limit_s;
        let name = v.name;
        let started = match v.family {
            Family::Logless | Family::LoglessLog => {
                let opts = LoglessOpts {
                    bin: self.logless.clone()?,
                    replicas,
                    durability: if v.fsync { "sync" } else { "mmap" }.into(),
                    engine: v.engine().into(),
                    read_retries,
                    limit_s: limit,
                };
                if separate {
                    peers::start_logless_servers(name, &opts)
                } else {
                    peers::start_logless_up(name, &opts)
                }
            }
            Family::Redis => peers::start_redis(name, self.redis.as_ref()?, v.fsync, limit),
            Family::Etcd => peers::start_etcd(name, self.etcd.as_ref()?, replicas, v.fsync, limit),
        };
        match started {
            Ok(r) => Some(r),
            Err(e) => {
                self.note(format!(
                    "{name} ({replicas} replicas) did not start, its points are missing: {e}"
                ));
                None
            }
        }
    }

    fn paths(&mut self, experiment: &str, system: &str) -> (PathBuf, PathBuf) {
        self.point += 1;
        let stem = format!("{experiment}-{:03}-{system}", self.point);
        (
            self.out.join("raw").join(format!("{stem}.json")),
            self.out.join("logs").join(format!("{stem}.log")),
        )
    }

    fn record(
        &self,
        experiment: &str,
        sys: &Running,
        series: &str,
        load: &Load,
        read_retries: Option<u32>,
        r: workloads::LoadgenResult,
    ) -> Record {
        Record {
            experiment: experiment.into(),
            system: sys.name.clone(),
            series: series.into(),
            replicas: sys.replicas,
            read_retries,
            load: load.clone(),
            duration_s: r.duration_s,
            read: r.read,
            write: r.write,
            errors: r.errors,
            error_kinds: r.error_kinds,
            conflicts: r.conflicts,
            failovers: r.failovers,
            timeline: Vec::new(),
            events: Vec::new(),
            cpu_s: None,
            wall_s: None,
            total_check: r.total_check,
        }
    }

    fn print(&self, r: &Record) {
        let part = |what: &str, s: &workloads::OpStats| {
            if s.count == 0 {
                String::new()
            } else {
                format!(
                    "  {what} {:>8.0}/s p99 {:>7.2} ms",
                    s.throughput,
                    s.p99_us as f64 / 1000.0
                )
            }
        };
        let errors = if r.errors == 0 {
            String::new()
        } else {
            let kinds: Vec<String> = r
                .error_kinds
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect();
            format!("  errors {} ({})", r.errors, kinds.join(" "))
        };
        let cores = r
            .cores()
            .map(|c| format!("  cores {c:.2}"))
            .unwrap_or_default();
        println!(
            "[{:>5.0} s] {} {:<26} n={} clients={:<4} keys={:<7} {}B{}{}{}{}",
            self.started.elapsed().as_secs_f64(),
            &r.experiment[..1],
            r.series,
            r.replicas,
            r.load.clients,
            r.load.keys,
            r.load.value_bytes,
            part("read", &r.read),
            part("write", &r.write),
            cores,
            errors
        );
    }

    /// Restarts `sys` if one of its processes has died (this machine is shared: another
    /// developer's test may kill it); false if it could not be restarted.
    fn revive(&mut self, experiment: &str, sys: &mut Running, read_retries: Option<u32>) -> bool {
        let Some(dead) = sys.dead() else { return true };
        let Some(v) = peers::variant(&sys.name) else {
            return false;
        };
        self.note(format!(
            "{experiment}: {} died during the experiment and was restarted: {}",
            v.name,
            dead.lines().next().unwrap_or("")
        ));
        match self.start(v, sys.replicas, read_retries.unwrap_or(1), false) {
            Some(new) => {
                *sys = new;
                true
            }
            None => false,
        }
    }

    /// Runs one point against `sys` and keeps its record; if the system died, restarts it and
    /// runs the point again, once.
    fn measure(
        &mut self,
        experiment: &str,
        sys: &mut Running,
        series: &str,
        load: &Load,
        read_retries: Option<u32>,
    ) {
        for attempt in 0..2 {
            if !self.revive(experiment, sys, read_retries) {
                return;
            }
            let (raw, log) = self.paths(experiment, &sys.name);
            let prefix = format!("{experiment}:");
            let (cpu_before, started) = (sys.cpu_seconds(), Instant::now());
            match workloads::run(
                &self.loadgen,
                sys.protocol,
                &sys.endpoints,
                load,
                &prefix,
                &raw,
                &log,
            ) {
                Ok(r) => {
                    let mut rec = self.record(experiment, sys, series, load, read_retries, r);
                    rec.cpu_s = Some(sys.cpu_seconds() - cpu_before);
                    rec.wall_s = Some(started.elapsed().as_secs_f64());
                    self.print(&rec);
                    self.records.push(rec);
                    return;
                }
                Err(e) => {
                    let died = sys.dead().is_some();
                    self.note(format!(
                        "{experiment}: {series} with {} clients failed{}: {e}",
                        load.clients,
                        if died { " (the system died)" } else { "" }
                    ));
                    if !died || attempt == 1 {
                        return;
                    }
                    // revive() restarts it at the top of the loop.
                    sys.mark_dead();
                }
            }
        }
    }

    fn save(&self, machine: &report::Machine, started_unix: u64) -> Result<(), String> {
        let systems: BTreeMap<&'static str, &'static str> =
            self.variants.iter().map(|v| (v.name, v.about)).collect();
        let results = Results {
            plan: &self.plan,
            machine,
            systems,
            notes: &self.notes,
            skips: &self.skips,
            wall_s: self.started.elapsed().as_secs_f64(),
            records: &self.records,
        };
        report::write_all(&self.out, &results, started_unix)
    }

    // (a) Figure 3a: one counter, increasing clients, sent to the leader as in the paper.
    fn counter(&mut self) {
        let reps = self.representatives();
        for v in self.variants.clone() {
            let Some(mut sys) = self.start(v, 3, 1, false) else {
                continue;
            };
            for c in self.plan.counter_clients.clone() {
                let load = Load::new("counter", c, 1.0, "leader", &self.plan);
                self.measure(
                    report::COUNTER,
                    &mut sys,
                    &format!("{} increments", v.name),
                    &load,
                    None,
                );
                if reps.contains(&v) {
                    let load = Load::new("counter", c, 0.0, "leader", &self.plan);
                    self.measure(
                        report::COUNTER,
                        &mut sys,
                        &format!("{} reads", v.name),
                        &load,
                        None,
                    );
                }
            }
            sys.stop();
        }
    }

    // (b) Figure 3b: one value of increasing size; writes on every variant, reads on one of
    // each family (durability does not change them).
    fn values(&mut self) {
        let reps = self.representatives();
        for v in self.variants.clone() {
            let Some(mut sys) = self.start(v, 3, 1, false) else {
                continue;
            };
            for size in self.plan.value_bytes.clone() {
                let mut load =
                    Load::new("values", self.plan.value_clients, 1.0, "leader", &self.plan);
                load.value_bytes = size;
                self.measure(
                    report::VALUES,
                    &mut sys,
                    &format!("{} writes", v.name),
                    &load,
                    None,
                );
                if reps.contains(&v) {
                    load.write_frac = 0.0;
                    self.measure(
                        report::VALUES,
                        &mut sys,
                        &format!("{} reads", v.name),
                        &load,
                        None,
                    );
                }
            }
            sys.stop();
        }
    }

    // (c) Figure 4: one writer and many readers on one register; logless's per-key engine with
    // X read retries (the log engine reads through the log: X does not apply).
    fn single_writer(&mut self) {
        for v in self.representatives() {
            let xs: Vec<Option<u32>> = if v.family == Family::Logless {
                self.plan.read_retries.iter().map(|x| Some(*x)).collect()
            } else {
                vec![None]
            };
            for x in xs {
                let Some(mut sys) = self.start(v, 3, x.unwrap_or(1), false) else {
                    continue;
                };
                let series = match x {
                    Some(x) => format!("{} X={x}", v.name),
                    None => v.name.to_string(),
                };
                for readers in self.plan.readers.clone() {
                    let load = Load::new("readers", readers, 0.0, "spread", &self.plan);
                    self.measure(report::SINGLE_WRITER, &mut sys, &series, &load, x);
                }
                sys.stop();
            }
        }
    }

    fn registers_load(&self, clients: u32, keys: u64, write_frac: f64, pin: &str) -> Load {
        let mut load = Load::new("registers", clients, write_frac, pin, &self.plan);
        load.keys = keys;
        load.dist = "pareto".into();
        load
    }

    // (d) Figure 5: many registers, Pareto keys, read- and write-heavy.
    fn registers(&mut self) {
        for v in self.representatives() {
            let Some(mut sys) = self.start(v, 3, 1, false) else {
                continue;
            };
            for f in self.plan.register_write_fracs.clone() {
                for keys in self.plan.register_keys.clone() {
                    let load = self.registers_load(self.plan.register_clients, keys, f, "spread");
                    self.measure(report::REGISTERS, &mut sys, v.name, &load, None);
                }
            }
            sys.stop();
        }
    }

    // (e) Figure 6a: p99 latency by replicas, clients pinned to one replica (the leader) or spread.
    fn replicas(&mut self) {
        let clients = self.plan.latency_clients;
        for v in self.representatives() {
            let counts = if v.family == Family::Redis {
                vec![1]
            } else {
                self.plan.replica_counts.clone()
            };
            for n in counts {
                let Some(mut sys) = self.start(v, n, 1, false) else {
                    continue;
                };
                if v.family == Family::Redis {
                    let load = self.registers_load(clients, 10_000, 0.05, "0");
                    self.measure(
                        report::REPLICAS,
                        &mut sys,
                        &format!("{} (1 node)", v.name),
                        &load,
                        None,
                    );
                } else {
                    let pinned = if v.family == Family::Etcd {
                        "to the leader"
                    } else {
                        "pinned"
                    };
                    let load = self.registers_load(clients, 10_000, 0.05, "leader");
                    self.measure(
                        report::REPLICAS,
                        &mut sys,
                        &format!("{} {pinned}", v.name),
                        &load,
                        None,
                    );
                    let load = self.registers_load(clients, 10_000, 0.05, "spread");
                    self.measure(
                        report::REPLICAS,
                        &mut sys,
                        &format!("{} spread", v.name),
                        &load,
                        None,
                    );
                }
                sys.stop();
            }
        }
    }

    // (g) Commands over several keys, on every system that runs them atomically: MSETs of 2–10
    // keys, then MULTI/EXEC transfers between counters, whose total loadgen reads back.
    fn multi_key(&mut self) {
        for v in self.variants.clone() {
            if let Some(why) = multi_key_refusal(v) {
                println!("note: g: {} skipped: {why}", v.name);
                self.skips.push(Skip {
                    experiment: report::MULTI_KEY.into(),
                    system: v.name.into(),
                    why: why.into(),
                });
                continue;
            }
            let Some(mut sys) = self.start(v, 3, 1, false) else {
                continue;
            };
            let mut load = Load::new(
                "mset",
                self.plan.multi_key_clients,
                1.0,
                "spread",
                &self.plan,
            );
            load.keys = self.plan.mset_keys;
            let mset = format!("{} MSET", v.name);
            self.measure(report::MULTI_KEY, &mut sys, &mset, &load, None);
            load.workload = "transfers".into();
            load.keys = self.plan.transfer_counters;
            let transfers = format!("{} transfers", v.name);
            self.measure(report::MULTI_KEY, &mut sys, &transfers, &load, None);
            sys.stop();
            let Some(r) = self
                .records
                .iter()
                .rev()
                .find(|r| r.experiment == report::MULTI_KEY && r.series == transfers)
            else {
                continue;
            };
            match &r.total_check {
                Some(c) if c.ok => println!("g: {transfers}: {}", c.describe()),
                Some(c) => self
                    .violations
                    .push(format!("{transfers}: {}", c.describe())),
                None => self.violations.push(format!(
                    "{transfers}: loadgen did not check the counters' total"
                )),
            }
        }
        for v in &self.violations {
            println!("error: {v}");
        }
    }

    // (h) Throughput at pipeline 16 with 50 clients writing one key or many uniform keys. etcd's
    // client does not pipeline: it gets as many clients as there are requests in flight.
    fn pipelined(&mut self) {
        let (clients, depth) = (self.plan.pipelined_clients, self.plan.pipeline_depth);
        for v in self.variants.clone() {
            let Some(mut sys) = self.start(v, 3, 1, false) else {
                continue;
            };
            for keys in self.plan.pipelined_keys.clone() {
                let mut load = Load::new("registers", clients, 1.0, "spread", &self.plan);
                load.keys = keys;
                let series = if v.family == Family::Etcd {
                    load.clients = clients * depth;
                    format!("{} ({} clients, no pipelining)", v.name, load.clients)
                } else {
                    load.pipeline = depth;
                    format!("{} P{depth}", v.name)
                };
                self.measure(report::PIPELINED, &mut sys, &series, &load, None);
            }
            sys.stop();
        }
    }

    // (f) Figure 6b: latency over time while one replica after another is killed.
    fn failures(&mut self) {
        let mut variants: Vec<Variant> = [Family::Logless, Family::LoglessLog]
            .into_iter()
            .filter_map(|f| self.family(f))
            .collect();
        if self.plan.failure_peers {
            variants.extend(self.family(Family::Etcd));
        }
        if variants.is_empty() {
            self.note("f: no logless (or etcd) variant chosen: no failure run".into());
        }
        let n = self.plan.failure_replicas;
        let every = self.plan.failure_every_s;
        for v in variants {
            let Some(mut sys) = self.start(v, n, 1, true) else {
                continue;
            };
            let mut load = self.registers_load(self.plan.latency_clients, 10_000, 0.05, "spread");
            load.duration_s = self.plan.failure_duration_s;
            load.warmup_s = 1.0;
            let (raw, log) = self.paths(report::FAILURES, v.name);
            let run = workloads::start(
                &self.loadgen,
                sys.protocol,
                &sys.endpoints,
                &load,
                "f:",
                &raw,
                &log,
            );
            let run = match run {
                Ok(r) => r,
                Err(e) => {
                    self.note(format!("f: {}: loadgen did not start: {e}", v.name));
                    continue;
                }
            };
            // Kill the last replica, then the one before it, ... while a majority is left.
            let t0 = Instant::now();
            let mut kills: Vec<(f64, String)> = Vec::new();
            let max_kills = usize::from((n - 1) / 2);
            let mut k = 1;
            while kills.len() < max_kills && (k as f64) * every < load.duration_s - 1.0 {
                let at = Duration::from_secs_f64(load.warmup_s + 0.3 + k as f64 * every);
                if let Some(wait) = at.checked_sub(t0.elapsed()) {
                    std::thread::sleep(wait);
                }
                let victim = usize::from(n) - 1 - kills.len();
                let when = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map(|d| d.as_secs_f64())
                    .unwrap_or(0.0);
                match sys.crash(victim) {
                    Ok(()) => {
                        println!(
                            "[{:>5.0} s] f killed {} replica {}",
                            self.started.elapsed().as_secs_f64(),
                            v.name,
                            victim + 1
                        );
                        kills.push((when, format!("replica {} killed", victim + 1)));
                    }
                    Err(e) => self.note(format!("f: cannot kill replica {}: {e}", victim + 1)),
                }
                k += 1;
            }
            match run.finish() {
                Ok(r) => {
                    let start = r.measure_start_unix;
                    let timeline = r.timeline.clone();
                    let mut rec = self.record(report::FAILURES, &sys, v.name, &load, None, r);
                    rec.timeline = timeline;
                    rec.events = kills
                        .into_iter()
                        .map(|(when, what)| Event {
                            t: ((when - start) * 10.0).round() / 10.0,
                            what,
                        })
                        .collect();
                    self.print(&rec);
                    self.records.push(rec);
                }
                Err(e) => self.note(format!("f: {} failed: {e}", v.name)),
            }
            sys.stop();
        }
    }
}

/// Reads the records of `out`/results.json.
pub fn load_records(out: &Path) -> Result<Vec<Record>, String> {
    let path = out.join("results.json");
    let text = std::fs::read_to_string(&path)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let value: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| format!("{} is not JSON: {e}", path.display()))?;
    serde_json::from_value(value["records"].clone())
        .map_err(|e| format!("{} holds no records: {e}", path.display()))
}

fn replot(out: &Path) -> Result<(), String> {
    let records = load_records(out)?;
    let files = figures::draw_all(out, &records)?;
    println!("plots: {}", files.join(", "));
    println!("\n{}", report::headline_table(&records));
    Ok(())
}

fn skip(variants: &mut Vec<Variant>, family: Family, why: String, notes: &mut Vec<String>) {
    if variants.iter().any(|v| v.family == family) {
        println!("note: {why}");
        notes.push(why);
        variants.retain(|v| v.family != family);
    }
}

/// Runs the comparison: starts each system, runs loadgen for every point of every chosen
/// experiment, stops each system, and writes results.json, results.csv, timeline.csv,
/// summary.md and the plots into `--out`; prints the summary table at the end.
pub fn run(args: &CompareArgs) -> Result<(), String> {
    if args.replot {
        return replot(&args.out);
    }
    let started = Instant::now();
    let started_unix = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let mut variants = parse_systems(&args.systems)?;
    let experiments = parse_experiments(&args.experiments)?;
    let mut plan = Plan::new(args.quick);
    if let Some(d) = args.duration_s {
        if !(d > 0.0 && d < 86_400.0) {
            return Err("--duration-s must be positive".into());
        }
        plan = plan.with_duration(d);
    }
    for sub in ["raw", "logs"] {
        std::fs::create_dir_all(args.out.join(sub))
            .map_err(|e| format!("cannot create {}: {e}", args.out.join(sub).display()))?;
    }
    let out = std::path::absolute(&args.out).map_err(|e| e.to_string())?;
    let mut notes = Vec::new();
    let mut versions = BTreeMap::new();
    let mut logless = None;
    if variants
        .iter()
        .any(|v| matches!(v.family, Family::Logless | Family::LoglessLog))
    {
        match args.logless.clone().map(Ok).unwrap_or_else(default_logless) {
            Ok(bin) => {
                versions.insert(
                    "logless".to_string(),
                    first_line(&bin, &["--version"]).unwrap_or_default(),
                );
                logless = Some(bin);
            }
            Err(e) => {
                for family in [Family::Logless, Family::LoglessLog] {
                    skip(
                        &mut variants,
                        family,
                        format!("logless skipped: {e}"),
                        &mut notes,
                    );
                }
            }
        }
    }
    let mut redis = None;
    if variants.iter().any(|v| v.family == Family::Redis) {
        match peers::ensure_installed("redis-server", "redis-server", !args.no_install) {
            Ok(bin) => {
                versions.insert(
                    "redis-server".into(),
                    first_line(&bin, &["--version"]).unwrap_or_default(),
                );
                redis = Some(bin);
            }
            Err(e) => skip(
                &mut variants,
                Family::Redis,
                format!("redis-server skipped: {e}"),
                &mut notes,
            ),
        }
    }
    let mut etcd = None;
    if variants.iter().any(|v| v.family == Family::Etcd) {
        match peers::ensure_installed("etcd", "etcd-server", !args.no_install) {
            Ok(bin) => {
                versions.insert(
                    "etcd".into(),
                    first_line(&bin, &["--version"]).unwrap_or_default(),
                );
                etcd = Some(bin);
            }
            Err(e) => skip(
                &mut variants,
                Family::Etcd,
                format!("etcd skipped: {e}"),
                &mut notes,
            ),
        }
    }
    if variants.is_empty() {
        return Err("none of the chosen systems can run here".into());
    }
    let loadgen = match &args.loadgen {
        Some(p) => p.clone(),
        None => workloads::build_loadgen(&loadgen_sources(), &out)?,
    };
    versions.insert(
        "loadgen".into(),
        "go-redis v9.23.0, etcd client v3.6.16, hdrhistogram-go v1.4.0".into(),
    );
    let machine = report::machine(versions);
    println!(
        "compare: {} mode; systems {}; experiments {}; {} CPUs ({}), {:.1} GiB; results in {}",
        if plan.quick { "quick" } else { "full" },
        variants
            .iter()
            .map(|v| v.name)
            .collect::<Vec<_>>()
            .join(", "),
        experiments.iter().collect::<String>(),
        machine.nproc,
        machine.cpu_model,
        machine.memory_gib,
        out.display()
    );
    let mut ctx = Ctx {
        plan,
        out: out.clone(),
        loadgen,
        logless,
        redis,
        etcd,
        variants,
        records: Vec::new(),
        notes,
        skips: Vec::new(),
        violations: Vec::new(),
        point: 0,
        started,
    };
    for e in experiments {
        match e {
            'a' => ctx.counter(),
            'b' => ctx.values(),
            'c' => ctx.single_writer(),
            'd' => ctx.registers(),
            'e' => ctx.replicas(),
            'f' => ctx.failures(),
            'g' => ctx.multi_key(),
            _ => ctx.pipelined(),
        }
        ctx.save(&machine, started_unix)?;
    }
    match figures::draw_all(&out, &ctx.records) {
        Ok(files) => println!("plots: {}", files.join(", ")),
        Err(e) => ctx.note(e),
    }
    ctx.save(&machine, started_unix)?;
    println!();
    println!("{}", report::headline_table(&ctx.records));
    println!(
        "{} points in {:.0} s on {} CPUs ({}), a shared machine: numbers are noisy. Details: {}",
        ctx.records.len(),
        started.elapsed().as_secs_f64(),
        machine.nproc,
        machine.cpu_model,
        out.join("summary.md").display()
    );
    if !ctx.notes.is_empty() {
        println!("{} note(s) in summary.md", ctx.notes.len());
    }
    if !ctx.violations.is_empty() {
        return Err(ctx.violations.join("; "));
    }
    Ok(())
}

/// Why `v` cannot run experiment g's commands over several keys atomically, if it cannot.
fn multi_key_refusal(v: Variant) -> Option<&'static str> {
    (v.family == Family::Logless).then_some(
        "the per-key engine (RMWPaxos) makes every key its own register and refuses commands \
         over several keys (MSET of several keys, MULTI/EXEC); `--engine multipaxos` runs them",
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: CompareArgs,
    }

    fn parse(argv: &[&str]) -> Result<CompareArgs, clap::Error> {
        Cli::try_parse_from(std::iter::once("compare").chain(argv.iter().copied())).map(|c| c.args)
    }

    #[test]
    fn defaults() {
        let a = parse(&[]).unwrap();
        assert!(!a.quick);
        assert_eq!(a.out, PathBuf::from("bench-results/compare"));
        assert_eq!(a.systems, vec!["all"]);
        assert_eq!(a.loadgen, None);
        assert_eq!(a.logless, None);
        assert!(!a.replot && !a.no_install);
        assert_eq!(parse_systems(&a.systems).unwrap().len(), 8);
        assert_eq!(
            parse_experiments(&a.experiments).unwrap(),
            vec!['a', 'b', 'c', 'd', 'e', 'f', 'g', 'h']
        );
    }

    #[test]
    fn options() {
        let a = parse(&[
            "--quick",
            "--out",
            "/tmp/x",
            "--systems",
            "logless-mmap,etcd",
            "--loadgen",
            "/bin/lg",
            "--logless",
            "/bin/ll",
            "--experiments",
            "a,c",
            "--duration-s",
            "0.5",
        ])
        .unwrap();
        assert!(a.quick);
        assert_eq!(a.out, PathBuf::from("/tmp/x"));
        assert_eq!(a.loadgen, Some(PathBuf::from("/bin/lg")));
        assert_eq!(a.logless, Some(PathBuf::from("/bin/ll")));
        assert_eq!(a.duration_s, Some(0.5));
        let names: Vec<&str> = parse_systems(&a.systems)
            .unwrap()
            .iter()
            .map(|v| v.name)
            .collect();
        assert_eq!(names, vec!["logless-mmap", "etcd"]);
        assert_eq!(parse_experiments(&a.experiments).unwrap(), vec!['a', 'c']);
        assert!(parse(&["--bogus"]).is_err());
    }

    #[test]
    fn system_and_experiment_names() {
        let s = |x: &[&str]| parse_systems(&x.iter().map(|s| s.to_string()).collect::<Vec<_>>());
        let names = |x: &[&str]| s(x).unwrap().iter().map(|v| v.name).collect::<Vec<_>>();
        assert_eq!(
            names(&["redis-aof-always", "logless-sync"]),
            vec!["logless-sync", "redis-aof-always"]
        );
        assert_eq!(
            names(&["logless", "logless-mmap"]),
            vec![
                "logless-mmap",
                "logless-sync",
                "logless-multipaxos-mmap",
                "logless-multipaxos-sync"
            ]
        );
        assert_eq!(
            names(&["logless-multipaxos", "logless-sync"]),
            vec![
                "logless-sync",
                "logless-multipaxos-mmap",
                "logless-multipaxos-sync"
            ]
        );
        assert_eq!(names(&["etcd-nofsync"]), vec!["etcd-nofsync"]);
        assert_eq!(
            names(&["etcd-all", "redis"]),
            vec!["redis", "etcd", "etcd-nofsync"]
        );
        assert!(s(&["mysql"]).unwrap_err().contains("unknown system"));
        assert!(s(&[]).is_err());
        let e =
            |x: &[&str]| parse_experiments(&x.iter().map(|s| s.to_string()).collect::<Vec<_>>());
        assert_eq!(
            e(&["f", "counter", "b_values"]).unwrap(),
            vec!['a', 'b', 'f']
        );
        assert_eq!(e(&["multi_key", "h"]).unwrap(), vec!['g', 'h']);
        assert!(e(&["z"]).is_err());
    }

    #[test]
    fn duration_override_scales_the_warmup() {
        let p = Plan::new(false).with_duration(4.0);
        assert_eq!((p.duration_s, p.warmup_s), (4.0, 1.0));
        let p = Plan::new(true).with_duration(0.4);
        assert_eq!(p.warmup_s, 0.2);
    }
}
