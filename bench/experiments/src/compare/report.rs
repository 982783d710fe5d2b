//! The comparison's results: one [`Record`] per measured point, written as results.json,
//! results.csv, timeline.csv and summary.md (with the headline ratios and the machine).
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

use serde::{Deserialize, Serialize};

use super::workloads::{Load, OpStats, Second, TotalCheck};

/// Experiment names, in order.
pub const COUNTER: &str = "a_counter";
/// (b)
pub const VALUES: &str = "b_values";
/// (c)
pub const SINGLE_WRITER: &str = "c_single_writer";
/// (d)
pub const REGISTERS: &str = "d_registers";
/// (e)
pub const REPLICAS: &str = "e_replicas";
/// (f)
pub const FAILURES: &str = "f_failures";
/// (g)
pub const MULTI_KEY: &str = "g_multi_key";
/// (h)
pub const PIPELINED: &str = "h_pipelined";

/// Every experiment with its letter and what it is.
pub const EXPERIMENTS: [(&str, &str, &str); 8] = [
    (
        "a",
        COUNTER,
        "one counter, increasing clients (paper Fig. 3a)",
    ),
    ("b", VALUES, "one value of increasing size (paper Fig. 3b)"),
    (
        "c",
        SINGLE_WRITER,
        "one writer and many readers on one register, X read retries (Fig. 4)",
    ),
    (
        "d",
        REGISTERS,
        "many registers, Pareto keys, 5% and 50% writes (Fig. 5)",
    ),
    (
        "e",
        REPLICAS,
        "p99 latency by replicas, clients pinned or spread (Fig. 6a)",
    ),
    (
        "f",
        FAILURES,
        "latency over time while replicas are killed (Fig. 6b)",
    ),
    (
        "g",
        MULTI_KEY,
        "commands over several keys: MSET of 2–10 keys, MULTI/EXEC transfers between counters",
    ),
    (
        "h",
        PIPELINED,
        "throughput at pipeline 16, one key and many keys",
    ),
];

/// A system that an experiment could not run, and why.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Skip {
    /// The experiment (one of the constants above).
    pub experiment: String,
    /// The system variant.
    pub system: String,
    /// Why.
    pub why: String,
}

/// Something that happened during a run, at `t` seconds into its measured window.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Event {
    /// Seconds since the measured window started.
    pub t: f64,
    /// What happened.
    pub what: String,
}

/// One measured point.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Record {
    /// The experiment (one of the constants above).
    pub experiment: String,
    /// The system variant (see `peers::VARIANTS`).
    pub system: String,
    /// The line of the plot it belongs to.
    pub series: String,
    /// Replicas or members.
    pub replicas: u16,
    /// logless's X, where it was set.
    pub read_retries: Option<u32>,
    /// The workload.
    pub load: Load,
    /// Measured seconds.
    pub duration_s: f64,
    /// Reads.
    pub read: OpStats,
    /// Writes and increments.
    pub write: OpStats,
    /// Failed requests.
    pub errors: u64,
    /// Failed requests by kind.
    #[serde(default)]
    pub error_kinds: BTreeMap<String, u64>,
    /// etcd's retried increment transactions.
    #[serde(default)]
    pub conflicts: u64,
    /// Clients that moved to another endpoint after an error.
    #[serde(default)]
    pub failovers: u64,
    /// Per-second figures (failure runs only).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub timeline: Vec<Second>,
    /// Kills and other events (failure runs only).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub events: Vec<Event>,
    /// CPU seconds the system's processes used over the whole point, warm-up included (see
    /// [`cpu`](super::cpu)); absent in results from before it was measured.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_s: Option<f64>,
    /// Wall-clock seconds of the whole point, warm-up included: the span of `cpu_s`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wall_s: Option<f64>,
    /// The transfers' total read back after the run (experiment g's transfers only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total_check: Option<TotalCheck>,
}

impl Record {
    /// Reads and writes per second together.
    pub fn total_ops(&self) -> f64 {
        self.read.throughput + self.write.throughput
    }

    /// The cores the system kept busy, on average over the point. The load is the same during
    /// warm-up and measurement (closed-loop clients), so the whole point's average stands for
    /// the measured part's.
    pub fn cores(&self) -> Option<f64> {
        match (self.cpu_s, self.wall_s) {
            (Some(cpu), Some(wall)) if wall > 0.0 => Some(cpu / wall),
            _ => None,
        }
    }

    /// Operations per CPU-second of the system: its throughput for each core it kept busy.
    pub fn ops_per_cpu_s(&self) -> Option<f64> {
        self.per_cpu_s(self.total_ops())
    }

    /// Writes per second if `writes`, else reads per second.
    pub fn ops(&self, writes: bool) -> f64 {
        if writes {
            self.write.throughput
        } else {
            self.read.throughput
        }
    }

    /// `ops` per second of this point per core the system kept busy.
    pub fn per_cpu_s(&self, ops: f64) -> Option<f64> {
        self.cores()
            .filter(|&cores| cores > 0.0)
            .map(|cores| ops / cores)
    }
}

/// The machine the comparison ran on.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Machine {
    /// Logical CPUs.
    pub nproc: usize,
    /// Memory (GiB).
    pub memory_gib: f64,
    /// Kernel release.
    pub kernel: String,
    /// CPU model (from /proc/cpuinfo).
    pub cpu_model: String,
    /// Versions of the systems and tools.
    pub versions: BTreeMap<String, String>,
}

/// Parses the CPU model and memory out of /proc/cpuinfo and /proc/meminfo texts.
pub fn parse_proc(cpuinfo: &str, meminfo: &str) -> (String, f64) {
    let model = cpuinfo
        .lines()
        .find(|l| l.starts_with("model name"))
        .and_then(|l| l.split_once(':'))
        .map(|(_, v)| v.trim().to_string())
        .unwrap_or_else(|| "unknown".into());
    let kib: f64 = meminfo
        .lines()
        .find(|l| l.starts_with("MemTotal:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0);
    (model, (kib / 1024.0 / 1024.0 * 10.0).round() / 10.0)
}

/// Describes this machine.
pub fn machine(versions: BTreeMap<String, String>) -> Machine {
    let (cpu_model, memory_gib) = parse_proc(
        &std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default(),
        &std::fs::read_to_string("/proc/meminfo").unwrap_or_default(),
    );
    Machine {
        nproc: std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(0),
        memory_gib,
        kernel: std::fs::read_to_string("/proc/sys/kernel/osrelease")
            .map(|s| s.trim().to_string())
            .unwrap_or_else(|_| "unknown".into()),
        cpu_model,
        versions,
    }
}

fn csv_field(s: &str) -> String {
    if s.contains([',', '"', '\n']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

/// The CSV header of results.csv.
pub const CSV_HEADER: &str =
    "experiment,system,series,replicas,read_retries,workload,clients,keys,dist,\
write_frac,value_bytes,pipeline,pin,duration_s,read_ops_s,read_p50_us,read_p99_us,read_p999_us,\
write_ops_s,write_p50_us,write_p99_us,write_p999_us,errors,conflicts,failovers,cpu_s,wall_s";

/// results.csv: one line per point.
pub fn csv(records: &[Record]) -> String {
    let mut out = String::from(CSV_HEADER);
    out.push('\n');
    for r in records {
        let l = &r.load;
        let fields = [
            csv_field(&r.experiment),
            csv_field(&r.system),
            csv_field(&r.series),
            r.replicas.to_string(),
            r.read_retries.map(|x| x.to_string()).unwrap_or_default(),
            csv_field(&l.workload),
            l.clients.to_string(),
            l.keys.to_string(),
            csv_field(&l.dist),
            l.write_frac.to_string(),
            l.value_bytes.to_string(),
            l.pipeline.to_string(),
            csv_field(&l.pin),
            format!("{:.3}", r.duration_s),
            format!("{:.1}", r.read.throughput),
            r.read.p50_us.to_string(),
            r.read.p99_us.to_string(),
            r.read.p999_us.to_string(),
            format!("{:.1}", r.write.throughput),
            r.write.p50_us.to_string(),
            r.write.p99_us.to_string(),
            r.write.p999_us.to_string(),
            r.errors.to_string(),
            r.conflicts.to_string(),
            r.failovers.to_string(),
            r.cpu_s.map(|x| format!("{x:.3}")).unwrap_or_default(),
            r.wall_s.map(|x| format!("{x:.3}")).unwrap_or_default(),
        ];
        out.push_str(&fields.join(","));
        out.push('\n');
    }
    out
}

/// timeline.csv: the per-second figures of the failure runs.
pub fn timeline_csv(records: &[Record]) -> String {
    let mut out = String::from(
        "experiment,system,series,t,read_ops_s,read_p99_us,write_ops_s,write_p99_us,errors\n",
    );
    for r in records.iter().filter(|r| !r.timeline.is_empty()) {
        for s in &r.timeline {
            let _ = writeln!(
                out,
                "{},{},{},{:.3},{:.1},{},{:.1},{},{}",
                csv_field(&r.experiment),
                csv_field(&r.system),
                csv_field(&r.series),
                s.t,
                s.read.throughput,
                s.read.p99_us,
                s.write.throughput,
                s.write.p99_us,
                s.errors
            );
        }
    }
    out
}

/// Everything results.json holds.
#[derive(Clone, Debug, Serialize)]
pub struct Results<'a> {
    /// Quick or full, the sizes.
    pub plan: &'a super::workloads::Plan,
    /// The machine.
    pub machine: &'a Machine,
    /// The systems and how they were configured.
    pub systems: BTreeMap<&'static str, &'static str>,
    /// Skipped systems, failed points.
    pub notes: &'a [String],
    /// Systems an experiment could not run.
    pub skips: &'a [Skip],
    /// Seconds the comparison took so far.
    pub wall_s: f64,
    /// Every point.
    pub records: &'a [Record],
}

/// One headline ratio of logless to a peer.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Ratio {
    /// What is compared.
    pub what: String,
    /// logless's variant.
    pub logless: String,
    /// The peer's variant.
    pub peer: String,
    /// logless's operations per second.
    pub logless_ops: Option<f64>,
    /// The peer's operations per second.
    pub peer_ops: Option<f64>,
    /// logless / peer.
    pub ratio: Option<f64>,
    /// logless / peer in operations per CPU-second of the system (see
    /// [`Record::ops_per_cpu_s`]), where both were measured.
    pub cpu_ratio: Option<f64>,
}

/// The point of `experiment` for `system` at pipeline 1 with only writes (`writes`) or only
/// reads that also `matches`.
fn point<'a>(
    records: &'a [Record],
    experiment: &str,
    system: &str,
    writes: bool,
    matches: impl Fn(&Record) -> bool,
) -> Option<&'a Record> {
    let write_frac = if writes { 1.0 } else { 0.0 };
    records.iter().find(|r| {
        r.experiment == experiment
            && r.system == system
            && r.load.pipeline == 1
            && r.load.write_frac == write_frac
            && matches(r)
    })
}

/// logless's pairings with etcd: how they compare, logless's variant, etcd's.
const ETCD_PAIRS: [(&str, &str, &str); 3] = [
    ("both fsync", "logless-sync", "etcd"),
    ("neither fsyncs", "logless-mmap", "etcd-nofsync"),
    ("defaults", "logless-mmap", "etcd"),
];

/// The client count the CPU table aims at: that of the headline.
pub const CPU_CLIENTS_TARGET: u32 = 256;

/// One row of the CPU table: operations per CPU-second of each system's own processes.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct CpuRow {
    /// What is compared.
    pub what: String,
    /// logless's variant.
    pub logless: String,
    /// logless's operations per CPU-second.
    pub logless_per_cpu_s: f64,
    /// etcd's variant.
    pub peer: String,
    /// etcd's operations per CPU-second.
    pub peer_per_cpu_s: f64,
    /// logless / etcd.
    pub ratio: f64,
}

/// The client count of `experiment`'s points nearest `target` (the smaller of two as near).
pub fn nearest_clients(records: &[Record], experiment: &str, target: u32) -> Option<u32> {
    records
        .iter()
        .filter(|r| r.experiment == experiment)
        .map(|r| r.load.clients)
        .min_by_key(|&c| (c.abs_diff(target), c))
}

/// Operations per server CPU-second, logless against etcd, where both were measured: blind
/// writes of the smallest value to one key (experiment b) for each pairing of durability, and
/// linearizable reads of one key (experiment a), each at the client count nearest
/// [`CPU_CLIENTS_TARGET`]. On a machine whose cores the load generator shares, throughput says
/// little; the CPU each system spends per operation says what it would do with the cores alone.
pub fn cpu_headline(records: &[Record]) -> Vec<CpuRow> {
    let per_cpu_s = |r: &Record, writes: bool| r.per_cpu_s(r.ops(writes));
    let row = |what: String, l: (&str, Option<f64>), p: (&str, Option<f64>)| {
        let (Some(l_cpu), Some(p_cpu)) = (l.1, p.1) else {
            return None;
        };
        (p_cpu > 0.0).then(|| CpuRow {
            what,
            logless: l.0.to_string(),
            logless_per_cpu_s: l_cpu,
            peer: p.0.to_string(),
            peer_per_cpu_s: p_cpu,
            ratio: l_cpu / p_cpu,
        })
    };
    let mut out = Vec::new();
    if let Some(clients) = nearest_clients(records, VALUES, CPU_CLIENTS_TARGET) {
        let smallest = records
            .iter()
            .filter(|r| r.experiment == VALUES && r.load.clients == clients)
            .map(|r| r.load.value_bytes)
            .min();
        let writes = |system: &str| {
            point(records, VALUES, system, true, |r| {
                r.load.clients == clients && Some(r.load.value_bytes) == smallest
            })
            .and_then(|r| per_cpu_s(r, true))
        };
        for (how, l, p) in ETCD_PAIRS {
            let what = format!(
                "blind writes of {} B ({clients} clients), {how}",
                smallest.unwrap_or(0)
            );
            out.extend(row(what, (l, writes(l)), (p, writes(p))));
        }
    }
    if let Some(clients) = nearest_clients(records, COUNTER, CPU_CLIENTS_TARGET) {
        // Reads do not depend on the durability setting: whichever variant measured them.
        let reads = |family: [&'static str; 2]| {
            family
                .into_iter()
                .find_map(|system| {
                    point(records, COUNTER, system, false, |r| {
                        r.load.clients == clients
                    })
                    .and_then(|r| per_cpu_s(r, false))
                    .map(|x| (system, Some(x)))
                })
                .unwrap_or((family[0], None))
        };
        out.extend(row(
            format!("linearizable reads ({clients} clients)"),
            reads(["logless-mmap", "logless-sync"]),
            reads(["etcd", "etcd-nofsync"]),
        ));
    }
    out
}

/// The CPU table in Markdown, or nothing when no row has both sides.
pub fn cpu_table(records: &[Record]) -> String {
    let rows = cpu_headline(records);
    if rows.is_empty() {
        return String::new();
    }
    let mut s = String::from(
        "Operations per server CPU-second, logless against etcd (goal: 20× or more). Each \
         system's throughput divided by the cores its own processes kept busy, so the load \
         generator's share of the machine does not count:\n\n\
         | operation | logless | ops per CPU-s | etcd | ops per CPU-s | logless/etcd |\n\
         | --- | --- | ---: | --- | ---: | ---: |\n",
    );
    for r in rows {
        let _ = writeln!(
            s,
            "| {} | {} | {:.0} | {} | {:.0} | {:.2}× |",
            r.what, r.logless, r.logless_per_cpu_s, r.peer, r.peer_per_cpu_s, r.ratio
        );
    }
    s
}

/// The client count the headline uses: 256 if measured, else the largest measured.
pub fn headline_clients(records: &[Record]) -> Option<u32> {
    let clients: Vec<u32> = records
        .iter()
        .filter(|r| r.experiment == COUNTER)
        .map(|r| r.load.clients)
        .collect();
    if clients.contains(&256) {
        Some(256)
    } else {
        clients.into_iter().max()
    }
}

/// The headline ratios at [`headline_clients`], pipeline 1, logless against etcd and
/// redis-server: counter increments and reads (experiment a), and blind writes of the smallest
/// value to one key (experiment b, at its client count). Only rows with both sides measured.
pub fn headline(records: &[Record]) -> Vec<Ratio> {
    let Some(clients) = headline_clients(records) else {
        return Vec::new();
    };
    let smallest = records
        .iter()
        .filter(|r| r.experiment == VALUES)
        .map(|r| r.load.value_bytes)
        .min();
    let value_clients = records
        .iter()
        .find(|r| r.experiment == VALUES)
        .map(|r| r.load.clients);
    // A point's throughput of the measured kind, and its operations per CPU-second.
    let find = |experiment: &str, system: &str, writes: bool| -> Option<(f64, Option<f64>)> {
        point(records, experiment, system, writes, |r| {
            if experiment == COUNTER {
                r.load.clients == clients
            } else {
                Some(r.load.value_bytes) == smallest
            }
        })
        .map(|r| {
            let ops = r.ops(writes);
            (ops, r.per_cpu_s(ops))
        })
    };
    // Reads do not depend on the durability setting: use whichever variant measured them.
    let reads_of = |family: &[&str]| -> (String, Option<(f64, Option<f64>)>) {
        for v in family {
            if let Some(x) = find(COUNTER, v, false) {
                return (v.to_string(), Some(x));
            }
        }
        (family[0].to_string(), None)
    };
    let mut out = Vec::new();
    let divide = |a: Option<f64>, b: Option<f64>| match (a, b) {
        (Some(a), Some(b)) if b > 0.0 => Some(a / b),
        _ => None,
    };
    type Side = (String, Option<(f64, Option<f64>)>);
    let mut push = |what: String, l: Side, p: Side| {
        let (Some((l_ops, l_cpu)), Some((p_ops, p_cpu))) = (l.1, p.1) else {
            return;
        };
        out.push(Ratio {
            what,
            logless: l.0,
            peer: p.0,
            logless_ops: Some(l_ops),
            peer_ops: Some(p_ops),
            ratio: divide(Some(l_ops), Some(p_ops)),
            cpu_ratio: divide(l_cpu, p_cpu),
        });
    };
    let mut pairs = ETCD_PAIRS.to_vec();
    pairs.extend([
        ("vs redis, no persistence", "logless-mmap", "redis"),
        ("vs redis, both fsync", "logless-sync", "redis-aof-always"),
    ]);
    for &(how, l, p) in &pairs {
        let w = |v: &str| (v.to_string(), find(COUNTER, v, true));
        push(format!("increments ({clients} clients), {how}"), w(l), w(p));
    }
    if let (Some(bytes), Some(vc)) = (smallest, value_clients) {
        for &(how, l, p) in &pairs {
            let w = |v: &str| (v.to_string(), find(VALUES, v, true));
            push(
                format!("blind writes of {bytes} B ({vc} clients), {how}"),
                w(l),
                w(p),
            );
        }
    }
    let logless_reads = reads_of(&["logless-mmap", "logless-sync"]);
    push(
        format!("linearizable reads ({clients} clients)"),
        logless_reads.clone(),
        reads_of(&["etcd", "etcd-nofsync"]),
    );
    push(
        format!("reads vs redis, one node ({clients} clients)"),
        logless_reads,
        reads_of(&["redis", "redis-aof-always"]),
    );
    out
}

fn opt(x: Option<f64>) -> String {
    x.map(|v| format!("{v:.0}")).unwrap_or_else(|| "–".into())
}

/// The headline as a Markdown table.
pub fn headline_table(records: &[Record]) -> String {
    let rows = headline(records);
    let cpu = cpu_table(records);
    if rows.is_empty() {
        let mut s = String::from("(no headline: it needs experiment a with logless and a peer)\n");
        if !cpu.is_empty() {
            s.push('\n');
            s.push_str(&cpu);
        }
        return s;
    }
    let mut s = String::from(
        "One key, closed-loop clients, pipeline 1, every client sent to the leader (logless: replica 1). \
         The last column compares operations per CPU-second used by each system's own processes: \
         the load generator shares the machine, and this says which system needs less CPU for an \
         operation:\n\n\
         | comparison | logless | ops/s | peer | ops/s | logless/peer | per CPU-second |\n| --- | --- | ---: | --- | ---: | ---: | ---: |\n",
    );
    let times = |x: Option<f64>| x.map(|x| format!("{x:.2}×")).unwrap_or_else(|| "–".into());
    for r in rows {
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {} | {} | {} |",
            r.what,
            r.logless,
            opt(r.logless_ops),
            r.peer,
            opt(r.peer_ops),
            times(r.ratio),
            times(r.cpu_ratio)
        );
    }
    if !cpu.is_empty() {
        s.push('\n');
        s.push_str(&cpu);
    }
    s
}

fn ms(us: u64) -> String {
    format!("{:.2}", us as f64 / 1000.0)
}

/// One experiment's points as a Markdown table.
pub fn experiment_table(records: &[Record], experiment: &str) -> String {
    let mut s = String::from(
        "| system | series | repl. | clients | keys | value B | writes | pin | read ops/s | read p99 ms | write ops/s | write p99 ms | errors | cores busy | ops per CPU-s |\n\
         | --- | --- | ---: | ---: | ---: | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n",
    );
    for r in records.iter().filter(|r| r.experiment == experiment) {
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {} | {} | {}% | {} | {:.0} | {} | {:.0} | {} | {} | {} | {} |",
            r.system,
            r.series,
            r.replicas,
            r.load.clients,
            r.load.keys,
            r.load.value_bytes,
            (r.load.write_frac * 100.0).round(),
            r.load.pin,
            r.read.throughput,
            ms(r.read.p99_us),
            r.write.throughput,
            ms(r.write.p99_us),
            r.errors,
            r.cores()
                .map(|c| format!("{c:.2}"))
                .unwrap_or_else(|| "–".into()),
            opt(r.ops_per_cpu_s())
        );
    }
    s
}

/// Civil date and time (UTC) of a Unix time.
pub fn utc(unix_s: u64) -> String {
    let days = (unix_s / 86_400) as i64;
    let secs = unix_s % 86_400;
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = if m <= 2 { y + 1 } else { y };
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02} UTC",
        secs / 3600,
        secs % 3600 / 60,
        secs % 60
    )
}

/// summary.md.
pub fn summary(results: &Results<'_>, started_unix: u64) -> String {
    let m = results.machine;
    let mut s = String::new();
    let _ = writeln!(
        s,
        "# logless compared with etcd and redis-server\n\n{} mode, started {}, took {:.0} s.\n",
        if results.plan.quick { "Quick" } else { "Full" },
        utc(started_unix),
        results.wall_s
    );
    let _ = writeln!(
        s,
        "**Machine:** {} CPUs ({}), {:.1} GiB memory, Linux {}. Every server, every replica and the \
         load generator share these CPUs, on one machine over loopback, and the machine may be shared \
         with other work: absolute numbers are low and noisy, ratios are indicative only. \
         {} s per point after {} s of warm-up.\n",
        m.nproc, m.cpu_model, m.memory_gib, m.kernel, results.plan.duration_s, results.plan.warmup_s
    );
    if !m.versions.is_empty() {
        s.push_str("**Versions:** ");
        let v: Vec<String> = m.versions.iter().map(|(k, v)| format!("{k} {v}")).collect();
        s.push_str(&v.join("; "));
        s.push_str("\n\n");
    }
    s.push_str("## Headline\n\n");
    s.push_str(&headline_table(results.records));
    s.push_str(
        "\nA ratio above 1 means logless did more operations per second. logless and etcd replicate to \
         3 replicas; redis-server is a single unreplicated node, so its ratio is the price of replication. \
         etcd's increment is a Get and a compare-and-swap transaction on the key's ModRevision, retried on \
         conflict; logless and redis run INCR. Reads are GET (etcd: linearizable Get).\n\n",
    );
    s.push_str("## Systems\n\n");
    for (name, about) in &results.systems {
        let _ = writeln!(s, "* `{name}`: {about}");
    }
    s.push('\n');
    for (letter, name, about) in EXPERIMENTS {
        let skips: Vec<&Skip> = results
            .skips
            .iter()
            .filter(|k| k.experiment == name)
            .collect();
        if !results.records.iter().any(|r| r.experiment == name) && skips.is_empty() {
            continue;
        }
        let _ = writeln!(s, "## ({letter}) {about}\n");
        s.push_str(&experiment_table(results.records, name));
        for k in skips {
            let _ = writeln!(s, "\n**{}: skipped.** {}", k.system, k.why);
        }
        for r in results.records.iter().filter(|r| r.experiment == name) {
            if let Some(c) = &r.total_check {
                let _ = writeln!(s, "\n{}: {}.", r.series, c.describe());
            }
        }
        for r in results
            .records
            .iter()
            .filter(|r| r.experiment == name && !r.events.is_empty())
        {
            let ev: Vec<String> = r
                .events
                .iter()
                .map(|e| format!("{} at {:.1} s", e.what, e.t))
                .collect();
            let _ = writeln!(s, "\n{}: {}.", r.system, ev.join(", "));
        }
        s.push('\n');
    }
    if !results.notes.is_empty() {
        s.push_str("## Notes\n\n");
        for n in results.notes {
            let mut n = n.replace('\n', " ");
            if n.chars().count() > 400 {
                n = n.chars().take(400).collect::<String>() + " …";
            }
            let _ = writeln!(s, "* {n}");
        }
        s.push('\n');
    }
    s.push_str(
        "## Files\n\nresults.json (every point, the plan, the machine), results.csv, timeline.csv (failure runs), \
         fig3a_counter.png, fig3b_values.png, fig4_single_writer.png, fig5_registers.png, fig6a_replicas.png, \
         fig6b_failures_<system>.png, raw/ (loadgen's JSON per point) and logs/ (loadgen's progress per point).\n",
    );
    s
}

/// Writes results.json, results.csv, timeline.csv and summary.md into `out`.
pub fn write_all(out: &Path, results: &Results<'_>, started_unix: u64) -> Result<(), String> {
    let write = |name: &str, text: String| {
        std::fs::write(out.join(name), text).map_err(|e| format!("cannot write {name}: {e}"))
    };
    write(
        "results.json",
        serde_json::to_string_pretty(results).map_err(|e| e.to_string())?,
    )?;
    write("results.csv", csv(results.records))?;
    write("timeline.csv", timeline_csv(results.records))?;
    write("summary.md", summary(results, started_unix))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compare::workloads::Plan;

    fn record(experiment: &str, system: &str, clients: u32, write_frac: f64, ops: f64) -> Record {
        let plan = Plan::new(true);
        let mut load = Load::new("counter", clients, write_frac, "leader", &plan);
        load.keys = 1;
        let stats = |x: f64| OpStats {
            count: (x * 1.5) as u64,
            throughput: x,
            mean_us: 100.0,
            p50_us: 90,
            p90_us: 120,
            p99_us: 1500,
            p999_us: 3000,
            max_us: 9000,
        };
        Record {
            experiment: experiment.into(),
            system: system.into(),
            series: format!("{system}, \"x\""),
            replicas: 3,
            read_retries: None,
            load,
            duration_s: 1.5,
            read: if write_frac == 0.0 {
                stats(ops)
            } else {
                OpStats::default()
            },
            write: if write_frac == 1.0 {
                stats(ops)
            } else {
                OpStats::default()
            },
            errors: 0,
            error_kinds: BTreeMap::new(),
            conflicts: 0,
            failovers: 0,
            timeline: Vec::new(),
            events: Vec::new(),
            cpu_s: None,
            wall_s: None,
            total_check: None,
        }
    }

    #[test]
    fn csv_has_a_line_per_record_and_quotes() {
        let rs = vec![
            record(COUNTER, "redis", 16, 1.0, 1000.0),
            record(COUNTER, "etcd", 16, 0.0, 500.0),
        ];
        let text = csv(&rs);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 3);
        assert_eq!(lines[0], CSV_HEADER);
        let columns = CSV_HEADER.split(',').count();
        assert!(lines[1].starts_with("a_counter,redis,\"redis, \"\"x\"\"\",3,,counter,16,1,uniform,1,16,1,leader,1.500,0.0,0,0,0,1000.0,90,1500,3000,0,0,0"));
        // The quoted series holds one comma: one more separator than columns.
        assert_eq!(lines[1].matches(',').count(), columns);
        assert_eq!(timeline_csv(&rs).lines().count(), 1);
    }

    #[test]
    fn headline_ratios_at_256_clients() {
        let rs = vec![
            record(COUNTER, "logless-mmap", 256, 1.0, 8000.0),
            record(COUNTER, "logless-mmap", 64, 1.0, 1.0),
            record(COUNTER, "logless-sync", 256, 1.0, 4000.0),
            record(COUNTER, "etcd", 256, 1.0, 2000.0),
            record(COUNTER, "redis", 256, 1.0, 16000.0),
            record(COUNTER, "logless-mmap", 256, 0.0, 30000.0),
            record(COUNTER, "etcd", 256, 0.0, 10000.0),
            record(COUNTER, "redis", 256, 0.0, 60000.0),
        ];
        assert_eq!(headline_clients(&rs), Some(256));
        let h = headline(&rs);
        let get = |what: &str| h.iter().find(|r| r.what == what).unwrap().clone();
        assert_eq!(get("increments (256 clients), both fsync").ratio, Some(2.0));
        assert_eq!(get("increments (256 clients), defaults").ratio, Some(4.0));
        assert_eq!(
            get("increments (256 clients), vs redis, no persistence").ratio,
            Some(0.5)
        );
        assert!(!h.iter().any(|r| r.what.contains("neither fsyncs")));
        assert!(!h.iter().any(|r| r.what.contains("vs redis, both fsync")));
        assert!(!h.iter().any(|r| r.what.contains("blind")));
        assert_eq!(get("linearizable reads (256 clients)").ratio, Some(3.0));
        assert_eq!(
            get("reads vs redis, one node (256 clients)").ratio,
            Some(0.5)
        );
        let table = headline_table(&rs);
        assert!(table.contains(
            "| increments (256 clients), both fsync | logless-sync | 4000 | etcd | 2000 | 2.00× |"
        ));
        assert!(!table.contains("etcd-nofsync"));
        assert!(!table.contains("blind writes"));
        // Blind writes come from experiment b, at its smallest value.
        let mut with_values = rs.clone();
        for (system, bytes, ops) in [
            ("logless-mmap", 16, 9000.0),
            ("etcd", 16, 3000.0),
            ("etcd", 1024, 1.0),
        ] {
            let mut r = record(VALUES, system, 128, 1.0, ops);
            r.load.value_bytes = bytes;
            with_values.push(r);
        }
        let h = headline(&with_values);
        let row = h
            .iter()
            .find(|r| r.what == "blind writes of 16 B (128 clients), defaults")
            .unwrap();
        assert_eq!(row.ratio, Some(3.0));
    }

    #[test]
    fn headline_falls_back_to_the_largest_client_count() {
        let rs = vec![
            record(COUNTER, "etcd", 64, 1.0, 1.0),
            record(COUNTER, "etcd", 16, 1.0, 1.0),
        ];
        assert_eq!(headline_clients(&rs), Some(64));
        assert_eq!(headline_clients(&[]), None);
        assert!(headline_table(&[]).contains("no headline"));
    }

    #[test]
    fn machine_from_proc_text() {
        let (model, gib) = parse_proc(
            "processor\t: 0\nmodel name\t: AMD EPYC 7B13\nflags\t: x\n",
            "MemTotal:       24576000 kB\nMemFree: 1 kB\n",
        );
        assert_eq!(model, "AMD EPYC 7B13");
        assert_eq!(gib, 23.4);
        assert_eq!(parse_proc("", "").0, "unknown");
    }

    #[test]
    fn utc_dates() {
        assert_eq!(utc(0), "1970-01-01 00:00:00 UTC");
        assert_eq!(utc(1_700_000_000), "2023-11-14 22:13:20 UTC");
        assert_eq!(utc(951_782_400), "2000-02-29 00:00:00 UTC");
    }

    #[test]
    fn cpu_time_gives_cores_and_operations_per_cpu_second() {
        let with_cpu = |system: &str, ops: f64, cpu_s: f64| {
            let mut r = record(COUNTER, system, 256, 1.0, ops);
            (r.cpu_s, r.wall_s) = (Some(cpu_s), Some(4.0));
            r
        };
        // logless does 8000/s on 2 cores, etcd 2000/s on half a core: 4× the throughput, but
        // only 4000 against 4000 per CPU-second.
        let rs = vec![
            with_cpu("logless-mmap", 8000.0, 8.0),
            with_cpu("etcd", 2000.0, 2.0),
        ];
        assert_eq!(rs[0].cores(), Some(2.0));
        assert_eq!(rs[0].ops_per_cpu_s(), Some(4000.0));
        assert_eq!(rs[1].ops_per_cpu_s(), Some(4000.0));
        let row = headline(&rs)
            .into_iter()
            .find(|r| r.what == "increments (256 clients), defaults")
            .unwrap();
        assert_eq!((row.ratio, row.cpu_ratio), (Some(4.0), Some(1.0)));
        assert!(headline_table(&rs).contains("| 4.00× | 1.00× |"));
        let table = experiment_table(&rs, COUNTER);
        assert!(table.contains("| 2.00 | 4000 |"), "{table}");
        let csv = csv(&rs);
        assert!(
            csv.lines().nth(1).unwrap().ends_with(",8.000,4.000"),
            "{csv}"
        );
        // Without CPU figures (older results, failure runs): no per-CPU ratio, dashes.
        let mut without = rs.clone();
        without[1].cpu_s = None;
        assert_eq!(without[1].cores(), None);
        assert!(headline_table(&without).contains("| 4.00× | – |"));
        assert!(experiment_table(&without, COUNTER).contains("| – | – |"));
        // A point of zero wall time or zero CPU time gives no figure rather than infinity.
        let mut idle = rs[0].clone();
        idle.cpu_s = Some(0.0);
        assert_eq!(idle.ops_per_cpu_s(), None);
        idle.wall_s = Some(0.0);
        assert_eq!(idle.cores(), None);
    }

    #[test]
    fn operations_per_cpu_second_against_etcd_at_the_clients_nearest_256() {
        let point = |experiment: &str, system: &str, clients: u32, writes: bool, ops, cpu_s| {
            let mut r = record(
                experiment,
                system,
                clients,
                if writes { 1.0 } else { 0.0 },
                ops,
            );
            (r.cpu_s, r.wall_s) = (Some(cpu_s), Some(2.0));
            r
        };
        let small_value = |system: &str, bytes: u32, ops: f64, cpu_s: f64| {
            let mut r = point(VALUES, system, 200, true, ops, cpu_s);
            r.load.value_bytes = bytes;
            r
        };
        let rs = vec![
            // Blind writes: logless-mmap 12000/s on 1.5 cores = 8000 per CPU-second, etcd
            // 3000/s on 1.5 cores = 2000; the 1 KiB points are not the smallest value.
            small_value("logless-mmap", 16, 12_000.0, 3.0),
            small_value("etcd", 16, 3_000.0, 3.0),
            small_value("logless-mmap", 1024, 1.0, 3.0),
            small_value("etcd-nofsync", 16, 4_000.0, 2.0),
            // Reads at 300 clients, nearer 256 than 64; logless-sync stands in for logless.
            point(COUNTER, "logless-sync", 300, false, 40_000.0, 2.0),
            point(COUNTER, "logless-sync", 64, false, 1.0, 2.0),
            point(COUNTER, "etcd", 300, false, 10_000.0, 4.0),
        ];
        assert_eq!(nearest_clients(&rs, COUNTER, 256), Some(300));
        assert_eq!(nearest_clients(&rs, VALUES, 256), Some(200));
        assert_eq!(nearest_clients(&rs, REGISTERS, 256), None);
        // Two as near: the smaller.
        let tie = [
            point(COUNTER, "etcd", 250, false, 1.0, 1.0),
            point(COUNTER, "etcd", 262, false, 1.0, 1.0),
        ];
        assert_eq!(nearest_clients(&tie, COUNTER, 256), Some(250));
        let rows = cpu_headline(&rs);
        let row = |what: &str| rows.iter().find(|r| r.what == what).cloned();
        assert_eq!(
            row("blind writes of 16 B (200 clients), defaults"),
            Some(CpuRow {
                what: "blind writes of 16 B (200 clients), defaults".into(),
                logless: "logless-mmap".into(),
                logless_per_cpu_s: 8_000.0,
                peer: "etcd".into(),
                peer_per_cpu_s: 2_000.0,
                ratio: 4.0,
            })
        );
        // 8000 against etcd-nofsync's 4000 per CPU-second; no logless-sync write was measured.
        assert_eq!(
            row("blind writes of 16 B (200 clients), neither fsyncs").map(|r| r.ratio),
            Some(2.0)
        );
        assert_eq!(row("blind writes of 16 B (200 clients), both fsync"), None);
        // Reads: 40000/s on one core against 10000/s on two.
        let reads = row("linearizable reads (300 clients)").unwrap();
        assert_eq!(
            (
                reads.logless.as_str(),
                reads.logless_per_cpu_s,
                reads.peer_per_cpu_s,
                reads.ratio
            ),
            ("logless-sync", 40_000.0, 5_000.0, 8.0)
        );
        assert_eq!(rows.len(), 3);
        let table = headline_table(&rs);
        assert!(
            table.contains(
                "| linearizable reads (300 clients) | logless-sync | 40000 | etcd | 5000 | 8.00× |"
            ),
            "{table}"
        );
        // Without CPU figures there is no CPU table.
        let mut without = rs.clone();
        for r in &mut without {
            r.cpu_s = None;
        }
        assert!(cpu_headline(&without).is_empty());
        assert!(!headline_table(&without).contains("logless/etcd"));
        // Without experiment a there is no headline, but the CPU table still shows.
        let values_only: Vec<Record> = rs.into_iter().filter(|r| r.experiment == VALUES).collect();
        let table = headline_table(&values_only);
        assert!(table.contains("no headline"), "{table}");
        assert!(table.contains("| 4.00× |"), "{table}");
    }

    #[test]
    fn summary_mentions_everything() {
        let rs = vec![
            record(COUNTER, "logless-mmap", 256, 1.0, 8000.0),
            record(COUNTER, "etcd", 256, 1.0, 2000.0),
        ];
        let plan = Plan::new(true);
        let m = Machine {
            nproc: 2,
            memory_gib: 23.4,
            kernel: "6.1".into(),
            cpu_model: "cpu".into(),
            versions: BTreeMap::new(),
        };
        let notes = vec!["etcd-nofsync skipped".to_string()];
        let skips = vec![Skip {
            experiment: MULTI_KEY.into(),
            system: "logless-mmap".into(),
            why: "no commands over several keys".into(),
        }];
        let res = Results {
            plan: &plan,
            machine: &m,
            systems: BTreeMap::new(),
            notes: &notes,
            skips: &skips,
            wall_s: 12.0,
            records: &rs,
        };
        let s = summary(&res, 0);
        assert!(s.contains("Quick mode"));
        assert!(s.contains("2 CPUs (cpu)"));
        assert!(s.contains("## (a)"));
        assert!(!s.contains("## (b)"));
        assert!(s.contains("etcd-nofsync skipped"));
        assert!(
            s.contains("## (g)"),
            "a skipped system shows its experiment"
        );
        assert!(s.contains("**logless-mmap: skipped.** no commands over several keys"));
        assert!(s.contains("4.00×"));
        let dir = tempfile::tempdir().unwrap();
        write_all(dir.path(), &res, 0).unwrap();
        let json: serde_json::Value = serde_json::from_str(
            &std::fs::read_to_string(dir.path().join("results.json")).unwrap(),
        )
        .unwrap();
        assert_eq!(json["records"].as_array().unwrap().len(), 2);
        assert_eq!(json["machine"]["nproc"], 2);
    }
}
