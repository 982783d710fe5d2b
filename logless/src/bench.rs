//! `logless bench compare` (the comparison with etcd and redis-server, bench/experiments, see its
//! COMPARE.md), `logless bench space` (memory per key, restart time, churn) and `logless bench
//! failover` (the log engine's leader killed under load), `logless bench psmr` (P-SMR against
//! sP-SMR, SMR and no replication), `logless bench recovery` (the log engine's recovery
//! modes: restart times, Table II, Figs. 3–5) and `logless bench ring` (ops per CPU-second of a
//! ring as its nodes grow, keys per node; the throughput while a node joins, `--join`). Each harness lives in its own binary,
//! `logless-compare`, `logless-space`, `logless-failover`, `logless-psmr`, `logless-recovery`
//! and `logless-ring`, so that the `logless` binary
//! does not carry the plotting libraries; this command runs it from beside this executable, or
//! builds and runs it with cargo in a source checkout.
use std::path::Path;
use std::process::{Command, ExitCode};

#[derive(clap::Args, Clone, Debug)]
pub struct BenchArgs {
    /// The benchmark: `compare`, `space`, `failover`, `psmr`, `recovery` or `ring`.
    pub which: String,
    /// Its options (`--quick`, `--out DIR`, …; `compare --help`, `space --help`,
    /// `failover --help`, `psmr --help`, `recovery --help` and `ring --help` list them).
    #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
    pub args: Vec<String>,
}

pub fn bench(args: &BenchArgs) -> ExitCode {
    let binary = match args.which.as_str() {
        "compare" => "logless-compare",
        "space" => "logless-space",
        "failover" => "logless-failover",
        "psmr" => "logless-psmr",
        "recovery" => "logless-recovery",
        "ring" => "logless-ring",
        other => {
            eprintln!(
                "error: no benchmark {other:?}: the benchmarks are `compare`, `space`, `failover`, \
                 `psmr`, `recovery` and `ring`"
            );
            return ExitCode::from(2);
        }
    };
    let sibling = std::env::current_exe()
        .ok()
        .and_then(|exe| exe.parent().map(|dir| dir.join(binary)));
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let status = match sibling.filter(|p| p.exists()) {
        Some(program) => Command::new(program).args(&args.args).status(),
        None if workspace.join("Cargo.toml").exists() => Command::new("cargo")
            .current_dir(&workspace)
            .args(["run", "--release", "--locked", "-p", "logless-bench"])
            .args(["--bin", binary, "--"])
            .args(&args.args)
            .status(),
        None => {
            eprintln!(
                "error: {binary} is not installed beside logless; build it with \
                 `cargo build --release -p logless-bench --bin {binary}`"
            );
            return ExitCode::FAILURE;
        }
    };
    match status {
        Ok(s) if s.success() => ExitCode::SUCCESS,
        Ok(_) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("error: cannot run {binary}: {e}");
            ExitCode::FAILURE
        }
    }
}
