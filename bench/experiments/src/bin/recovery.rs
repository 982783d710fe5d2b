//! `logless-recovery`: the log engine's recovery modes in seed 002's evaluation (the same as
//! `logless bench recovery`); see `logless_bench::recovery`.
use std::process::ExitCode;

use clap::Parser;
use logless_bench::recovery::{run, RecoveryArgs};

#[derive(Parser)]
#[command(
    about = "restart times, Table II, Fig. 3 and Figs. 4–5 of seed 002 for each recovery mode"
)]
struct Cli {
    #[command(flatten)]
    args: RecoveryArgs,
}

fn main() -> ExitCode {
    logless_bench::exit_code(run(&Cli::parse().args))
}
