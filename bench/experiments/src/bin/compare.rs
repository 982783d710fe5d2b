//! `compare`: the comparison of logless with etcd and redis-server (the same as
//! `logless bench compare`); see `logless_bench::compare` and COMPARE.md.
use std::process::ExitCode;

use clap::Parser;
use logless_bench::compare::{run, CompareArgs};

#[derive(Parser)]
#[command(about = "logless against etcd and redis-server (RMWPaxos paper §7, Figures 3-6)")]
struct Cli {
    #[command(flatten)]
    args: CompareArgs,
}

fn main() -> ExitCode {
    logless_bench::exit_code(run(&Cli::parse().args))
}
