//! The `logless` command: `up` (a local cluster), `server` (one replica), `status`, and `demo`
//! (the in-process simulated cluster), `bench compare`.
use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod bench;
mod demo;
mod server;
mod status;
mod up;

#[derive(Parser)]
#[command(
    name = "logless",
    version,
    about = "A log-less replicated key-value store (RMWPaxos) that speaks the Redis protocol"
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand)]
enum Command {
    /// Start a local cluster of replica processes on loopback and run it until Ctrl-C.
    Up(up::UpArgs),
    /// Run one replica.
    Server(Box<server::ServerArgs>),
    /// Show the health of a cluster's replicas.
    Status(status::StatusArgs),
    /// Run the in-process simulated cluster with a workload and optional faults.
    Demo(demo::DemoArgs),
    /// Benchmarks: `logless bench compare [--quick]` measures logless against etcd and
    /// redis-server on this machine.
    Bench(bench::BenchArgs),
}

fn main() -> ExitCode {
    match Cli::parse().command {
        None => up::up(&up::UpArgs::defaults()),
        Some(Command::Up(args)) => up::up(&args),
        Some(Command::Server(args)) => server::server(&args),
        Some(Command::Status(args)) => status::status(&args),
        Some(Command::Demo(args)) => demo::demo(&args),
        Some(Command::Bench(args)) => bench::bench(&args),
    }
}
