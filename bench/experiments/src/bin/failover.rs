//! `failover`: how long the log engine stops committing when its leader is killed (the same as
//! `logless bench failover`); see `logless_bench::failover`.
use std::process::ExitCode;

use clap::Parser;
use logless_bench::failover::{run, FailoverArgs};

#[derive(Parser)]
#[command(about = "the time a multipaxos cluster takes to commit again after its leader is killed")]
struct Cli {
    #[command(flatten)]
    args: FailoverArgs,
}

fn main() -> ExitCode {
    logless_bench::exit_code(run(&Cli::parse().args))
}
