//! `space`: memory per key, restart time and churn (the same as `logless bench space`); see
//! `logless_bench::space`.
use std::process::ExitCode;

use clap::Parser;
use logless_bench::space::{run, SpaceArgs};

#[derive(Parser)]
#[command(
    about = "what keys cost, how fast a replica restarts, and whether dead keys give their space back"
)]
struct Cli {
    #[command(flatten)]
    args: SpaceArgs,
}

fn main() -> ExitCode {
    logless_bench::exit_code(run(&Cli::parse().args))
}
