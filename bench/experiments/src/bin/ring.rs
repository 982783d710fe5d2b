//! `ring`: ops per CPU-second of a ring of N nodes as N grows, and each node's share of the
//! keys, or (`--join`) the throughput while a node joins a loaded ring (the same as `logless
//! bench ring`); see `logless_bench::ring`.
use std::process::ExitCode;

use clap::Parser;
use logless_bench::ring::{run, RingArgs};

#[derive(Parser)]
#[command(
    about = "Ops per CPU-second of a ring of N nodes as N grows, and keys per node; or (--join) the throughput while a node joins"
)]
struct Cli {
    #[command(flatten)]
    args: RingArgs,
}

fn main() -> ExitCode {
    logless_bench::exit_code(run(&Cli::parse().args))
}
