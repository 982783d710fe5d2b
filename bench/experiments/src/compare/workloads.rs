//! The workloads of the paper's §7 as loadgen invocations, the experiment plan (quick and full),
//! and running loadgen and reading its JSON.
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::peers::Proc;

/// One loadgen run's workload.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Load {
    /// counter, values, readers, registers, mset or transfers.
    pub workload: String,
    /// Closed-loop clients (readers: the readers; one writer is added).
    pub clients: u32,
    /// Keys of the registers and mset workloads, counters of transfers.
    pub keys: u64,
    /// uniform or pareto.
    pub dist: String,
    /// Fraction of writes.
    pub write_frac: f64,
    /// Bytes per written value.
    pub value_bytes: u32,
    /// Requests per round trip.
    pub pipeline: u32,
    /// spread, 0 or leader.
    pub pin: String,
    /// Measured seconds.
    pub duration_s: f64,
    /// Unmeasured seconds before.
    pub warmup_s: f64,
}

impl Load {
    /// A workload with the defaults: 16-byte values, pipeline 1, uniform keys.
    pub fn new(workload: &str, clients: u32, write_frac: f64, pin: &str, plan: &Plan) -> Load {
        Load {
            workload: workload.into(),
            clients,
            keys: 1,
            dist: "uniform".into(),
            write_frac,
            value_bytes: 16,
            pipeline: 1,
            pin: pin.into(),
            duration_s: plan.duration_s,
            warmup_s: plan.warmup_s,
        }
    }

    /// loadgen's arguments for `system` (redis or etcd) at `endpoints`, writing to `out`.
    pub fn args(
        &self,
        system: &str,
        endpoints: &[String],
        prefix: &str,
        out: &Path,
    ) -> Vec<String> {
        let mut a: Vec<String> = vec![
            "-system".into(),
            system.into(),
            "-endpoints".into(),
            endpoints.join(","),
            "-workload".into(),
            self.workload.clone(),
            "-clients".into(),
            self.clients.to_string(),
            "-duration".into(),
            format!("{}ms", (self.duration_s * 1000.0).round() as u64),
            "-warmup".into(),
            format!("{}ms", (self.warmup_s * 1000.0).round() as u64),
            "-keys".into(),
            self.keys.to_string(),
            "-dist".into(),
            self.dist.clone(),
            "-write-frac".into(),
            self.write_frac.to_string(),
            "-value-bytes".into(),
            self.value_bytes.to_string(),
            "-pipeline".into(),
            self.pipeline.to_string(),
            "-pin".into(),
            self.pin.clone(),
            "-key-prefix".into(),
            prefix.into(),
            "-out".into(),
        ];
        a.push(out.to_string_lossy().into_owned());
        a
    }

    /// Seconds loadgen may take in all before it is killed.
    pub fn limit_s(&self) -> u64 {
        (self.duration_s + self.warmup_s).ceil() as u64 + 30
    }
}

/// The statistics of one operation type, as loadgen writes them.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct OpStats {
    /// Operations in the measured window.
    pub count: u64,
    /// Operations per second.
    pub throughput: f64,
    /// Mean latency (µs).
    pub mean_us: f64,
    /// Median latency (µs).
    pub p50_us: u64,
    /// 99th percentile (µs).
    #[serde(default)]
    pub p90_us: u64,
    /// 99th percentile (µs).
    pub p99_us: u64,
    /// 99.9th percentile (µs).
    pub p999_us: u64,
    /// Maximum (µs).
    pub max_us: u64,
}

/// One second of a run.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Second {
    /// Seconds since the measured window started, at the end of this second.
    pub t: f64,
    /// Reads in this second.
    pub read: OpStats,
    /// Writes in this second.
    pub write: OpStats,
    /// Failed requests in this second.
    pub errors: u64,
}

/// loadgen's JSON result (the fields used here).
#[derive(Clone, Debug, Default, Deserialize)]
pub struct LoadgenResult {
    /// Measured seconds.
    pub duration_s: f64,
    /// Reads.
    pub read: OpStats,
    /// Writes (and increments).
    pub write: OpStats,
    /// Failed requests.
    pub errors: u64,
    /// Failed requests by kind.
    #[serde(default)]
    pub error_kinds: std::collections::BTreeMap<String, u64>,
    /// etcd's retried increment transactions.
    #[serde(default)]
    pub conflicts: u64,
    /// Clients that moved to another endpoint after an error.
    #[serde(default)]
    pub failovers: u64,
    /// Per second.
    #[serde(default)]
    pub timeline: Vec<Second>,
    /// Unix time when the measured window started.
    #[serde(default)]
    pub measure_start_unix: f64,
    /// The transfers workload's counters read back after the run.
    #[serde(default)]
    pub total_check: Option<TotalCheck>,
}

/// The transfers workload's invariant as loadgen found it after the run: the counters' total.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct TotalCheck {
    /// Counters.
    pub keys: u64,
    /// Their total after the run.
    pub total: i64,
    /// The total every transfer keeps.
    pub expected: i64,
    /// Whether they are equal.
    pub ok: bool,
    /// Why the counters could not be read back.
    #[serde(default)]
    pub error: Option<String>,
}

impl TotalCheck {
    /// One sentence for the summary.
    pub fn describe(&self) -> String {
        match (&self.error, self.ok) {
            (Some(e), _) => format!("the counters could not be checked: {e}"),
            (None, true) => format!(
                "the {} counters' total after the run is {}, as it must be",
                self.keys, self.total
            ),
            (None, false) => format!(
                "ATOMICITY VIOLATED: the {} counters' total after the run is {}, not {}",
                self.keys, self.total, self.expected
            ),
        }
    }
}

/// loadgen's exit status when the transfers' total changed (it writes its result first).
pub const EXIT_TOTAL_CHANGED: i32 = 3;

/// Parses loadgen's JSON.
pub fn parse_result(text: &str) -> Result<LoadgenResult, String> {
    serde_json::from_str(text)
        .map_err(|e| format!("loadgen's result is not what was expected: {e}"))
}

/// A running loadgen.
pub struct LoadgenRun {
    proc: Proc,
    out: PathBuf,
    limit: Duration,
}

/// Starts loadgen with `load` against `system` at `endpoints`; its result goes to `out` and its
/// progress lines to `log`.
pub fn start(
    loadgen: &Path,
    system: &str,
    endpoints: &[String],
    load: &Load,
    prefix: &str,
    out: &Path,
    log: &Path,
) -> Result<LoadgenRun, String> {
    let _ = std::fs::remove_file(out);
    let args = load.args(system, endpoints, prefix, out);
    let proc = Proc::spawn("loadgen", loadgen, &args, log, load.limit_s())?;
    Ok(LoadgenRun {
        proc,
        out: out.to_path_buf(),
        limit: Duration::from_secs(load.limit_s() + 5),
    })
}

impl LoadgenRun {
    /// Waits for loadgen to finish and reads its result.
    pub fn finish(mut self) -> Result<LoadgenResult, String> {
        let status = self.proc.wait_timeout(self.limit);
        let text = std::fs::read_to_string(&self.out);
        match (status, text) {
            (Some(s), Ok(text)) if s.success() => parse_result(&text),
            // A broken invariant: the result says how; the caller fails the run.
            (Some(s), Ok(text)) if s.code() == Some(EXIT_TOTAL_CHANGED) => parse_result(&text),
            (Some(s), _) => Err(format!(
                "loadgen failed ({s}); its output ends:\n{}",
                self.proc.log_tail()
            )),
            (None, _) => Err(format!(
                "loadgen did not finish in time; its output ends:\n{}",
                self.proc.log_tail()
            )),
        }
    }
}

/// Runs loadgen to the end.
pub fn run(
    loadgen: &Path,
    system: &str,
    endpoints: &[String],
    load: &Load,
    prefix: &str,
    out: &Path,
    log: &Path,
) -> Result<LoadgenResult, String> {
    start(loadgen, system, endpoints, load, prefix, out, log)?.finish()
}

/// Builds loadgen from `src` (the Go module bench/loadgen) into `out_dir/loadgen`.
pub fn build_loadgen(src: &Path, out_dir: &Path) -> Result<PathBuf, String> {
    if !src.join("go.mod").is_file() {
        return Err(format!(
            "the loadgen sources are not at {} (give --loadgen PATH, or set LOGLESS_LOADGEN_SRC)",
            src.display()
        ));
    }
    let bin = std::path::absolute(out_dir.join("loadgen")).map_err(|e| e.to_string())?;
    println!(
        "building loadgen: go build -o {} (in {})",
        bin.display(),
        src.display()
    );
    let status = Command::new("timeout")
        .args(["900", "go", "build", "-buildvcs=false", "-o"])
        .arg(&bin)
        .arg(".")
        .current_dir(src)
        .status()
        .map_err(|e| format!("cannot run go build: {e}"))?;
    if !status.success() {
        return Err(format!("go build of loadgen failed ({status})"));
    }
    Ok(bin)
}

/// The sizes of the experiments, quick or full.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Plan {
    /// Quick mode.
    pub quick: bool,
    /// Measured seconds per point.
    pub duration_s: f64,
    /// Warm-up seconds per point.
    pub warmup_s: f64,
    /// (a) counter: client counts.
    pub counter_clients: Vec<u32>,
    /// (b) values: sizes.
    pub value_bytes: Vec<u32>,
    /// (b) values: clients.
    pub value_clients: u32,
    /// (c) single writer: reader counts.
    pub readers: Vec<u32>,
    /// (c) single writer: X values of logless.
    pub read_retries: Vec<u32>,
    /// (d) registers: key counts.
    pub register_keys: Vec<u64>,
    /// (d) registers: write fractions.
    pub register_write_fracs: Vec<f64>,
    /// (d) registers: clients.
    pub register_clients: u32,
    /// (e) replication degree: replica counts.
    pub replica_counts: Vec<u16>,
    /// (e) and (f): clients.
    pub latency_clients: u32,
    /// (f) failures: replicas.
    pub failure_replicas: u16,
    /// (f) failures: seconds of the run.
    pub failure_duration_s: f64,
    /// (f) failures: a replica is killed every this many seconds (at most a minority).
    pub failure_every_s: f64,
    /// (f) failures: also run etcd.
    pub failure_peers: bool,
    /// (g) multi-key: clients.
    pub multi_key_clients: u32,
    /// (g) multi-key: registers the MSETs write.
    pub mset_keys: u64,
    /// (g) multi-key: counters of the transfers.
    pub transfer_counters: u64,
    /// (h) pipelined: clients.
    pub pipelined_clients: u32,
    /// (h) pipelined: requests per round trip.
    pub pipeline_depth: u32,
    /// (h) pipelined: key counts.
    pub pipelined_keys: Vec<u64>,
    /// Seconds after which any server is killed in any case.
    pub server_limit_s: u64,
}

impl Plan {
    /// The plan of `--quick` (under 5 minutes on 2 cores) or of a full run (about an hour).
    pub fn new(quick: bool) -> Plan {
        if quick {
            Plan {
                quick,
                duration_s: 1.2,
                warmup_s: 0.4,
                counter_clients: vec![1, 16, 64, 256],
                value_bytes: vec![16, 1024, 16384],
                value_clients: 256,
                readers: vec![1, 64],
                read_retries: vec![0, 1],
                register_keys: vec![100, 10_000],
                register_write_fracs: vec![0.05, 0.5],
                register_clients: 64,
                replica_counts: vec![3, 5],
                latency_clients: 64,
                failure_replicas: 5,
                failure_duration_s: 20.0,
                failure_every_s: 7.0,
                failure_peers: false,
                multi_key_clients: 64,
                mset_keys: 10_000,
                transfer_counters: 100,
                pipelined_clients: 50,
                pipeline_depth: 16,
                pipelined_keys: vec![1, 100_000],
                server_limit_s: 900,
            }
        } else {
            Plan {
                quick,
                duration_s: 10.0,
                warmup_s: 2.0,
                counter_clients: vec![1, 2, 4, 8, 16, 32, 64, 128, 256, 512],
                value_bytes: vec![8, 64, 512, 1024, 4096, 16384],
                value_clients: 256,
                readers: vec![1, 4, 16, 64, 256, 1024],
                read_retries: vec![0, 1, 2, 3],
                register_keys: vec![1, 100, 10_000, 1_000_000],
                register_write_fracs: vec![0.05, 0.5],
                register_clients: 512,
                replica_counts: vec![3, 5, 7],
                latency_clients: 64,
                failure_replicas: 5,
                failure_duration_s: 90.0,
                failure_every_s: 30.0,
                failure_peers: true,
                multi_key_clients: 256,
                mset_keys: 100_000,
                transfer_counters: 1000,
                pipelined_clients: 50,
                pipeline_depth: 16,
                pipelined_keys: vec![1, 100_000],
                server_limit_s: 4 * 3600,
            }
        }
    }

    /// Overrides the measured seconds per point.
    pub fn with_duration(mut self, duration_s: f64) -> Plan {
        self.duration_s = duration_s;
        self.warmup_s = (duration_s / 4.0).clamp(0.2, 2.0);
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loadgen_arguments() {
        let plan = Plan::new(true);
        let mut load = Load::new("registers", 64, 0.05, "spread", &plan);
        load.keys = 10_000;
        load.dist = "pareto".into();
        let a = load.args(
            "etcd",
            &["127.0.0.1:1".into(), "127.0.0.1:2".into()],
            "p7:",
            Path::new("/x/r.json"),
        );
        let s = a.join(" ");
        assert_eq!(
            s,
            "-system etcd -endpoints 127.0.0.1:1,127.0.0.1:2 -workload registers -clients 64 \
             -duration 1200ms -warmup 400ms -keys 10000 -dist pareto -write-frac 0.05 -value-bytes 16 \
             -pipeline 1 -pin spread -key-prefix p7: -out /x/r.json"
        );
        assert_eq!(load.limit_s(), 32);
        assert_eq!(
            Load {
                duration_s: 10.0,
                warmup_s: 2.0,
                ..load
            }
            .limit_s(),
            42
        );
    }

    #[test]
    fn parses_loadgen_json() {
        let text = r#"{"system":"redis","workload":"counter","duration_s":1.5,
            "read":{"count":0,"throughput":0,"mean_us":0,"p50_us":0,"p90_us":0,"p99_us":0,"p999_us":0,"max_us":0},
            "write":{"count":300,"throughput":200,"mean_us":80.5,"p50_us":70,"p90_us":90,"p99_us":150,"p999_us":400,"max_us":900},
            "total":{"count":300},"errors":2,"error_kinds":{"TRYAGAIN":2},"conflicts":0,"failovers":0,
            "timeline":[{"t":1,"read":{"count":0,"throughput":0,"mean_us":0,"p50_us":0,"p99_us":0,"p999_us":0,"max_us":0},
              "write":{"count":200,"throughput":200,"mean_us":80,"p50_us":70,"p99_us":150,"p999_us":400,"max_us":900},"errors":1}],
            "measure_start_unix":1700000000.5}"#;
        let r = parse_result(text).unwrap();
        assert_eq!(r.write.p99_us, 150);
        assert_eq!(r.errors, 2);
        assert_eq!(r.error_kinds["TRYAGAIN"], 2);
        assert_eq!(r.timeline.len(), 1);
        assert_eq!(r.timeline[0].write.count, 200);
        assert!(parse_result("{").is_err());
        assert_eq!(r.total_check, None);
        let broken = text.replace(
            r#""measure_start_unix""#,
            r#""total_check":{"keys":100,"total":-7,"expected":0,"ok":false},"measure_start_unix""#,
        );
        let c = parse_result(&broken).unwrap().total_check.unwrap();
        assert!(!c.ok);
        assert!(
            c.describe().contains("ATOMICITY VIOLATED"),
            "{}",
            c.describe()
        );
        assert!(c.describe().contains("is -7, not 0"), "{}", c.describe());
    }

    #[test]
    fn quick_plan_is_the_briefs() {
        let p = Plan::new(true);
        assert_eq!(p.counter_clients, vec![1, 16, 64, 256]);
        assert_eq!(p.value_bytes, vec![16, 1024, 16384]);
        assert_eq!(p.read_retries, vec![0, 1]);
        assert_eq!(p.readers, vec![1, 64]);
        assert_eq!(p.register_keys, vec![100, 10_000]);
        assert_eq!(p.replica_counts, vec![3, 5]);
        assert_eq!(p.failure_duration_s, 20.0);
        let f = Plan::new(false);
        assert_eq!(f.register_keys, vec![1, 100, 10_000, 1_000_000]);
        assert_eq!(f.read_retries, vec![0, 1, 2, 3]);
        assert_eq!(f.replica_counts, vec![3, 5, 7]);
    }
}
