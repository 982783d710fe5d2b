//! `psmr`: P-SMR against sP-SMR, SMR and no replication on the B⁺-tree service (the same as
//! `logless bench psmr`); see `logless_bench::psmr`.
use std::process::ExitCode;

use clap::Parser;
use logless_bench::psmr::{run, PsmrArgs};

#[derive(Parser)]
#[command(about = "P-SMR against sP-SMR, SMR and no replication (seed 004's evaluation)")]
struct Cli {
    #[command(flatten)]
    args: PsmrArgs,
}

fn main() -> ExitCode {
    logless_bench::exit_code(run(&Cli::parse().args))
}
