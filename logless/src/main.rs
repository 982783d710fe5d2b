//! The `logless` command: `up` (a local cluster), `server` (one replica), `status`, `cluster`
//! (a ring's membership),
//! `certs` (throwaway TLS certificates) and `bench compare`. The in-process simulated cluster
//! is the simulation crate's `demo` example, so that this binary links no simulation code.
use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// The allocator of the whole process. A replica allocates and frees small buffers on every
/// turn, from several threads; with glibc's allocator that was a sixth of a replica's CPU
/// time under redis-benchmark at pipeline 16 (malloc, free and their consolidation).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

mod bench;
mod certs;
mod cluster;
mod fs;
mod server;
mod status;
mod tls_client;
mod up;
mod up_tls;

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
    /// A ring's membership: `logless cluster status|add ID|remove ID|replace OLD NEW`, asked
    /// of one node's HTTP port (--http).
    Cluster(cluster::ClusterArgs),
    /// Write a throwaway CA and TLS certificates for replicas and clients (for trying TLS).
    Certs(certs::CertsArgs),
    /// Benchmarks: `logless bench compare [--quick]` measures logless against etcd and
    /// redis-server on this machine.
    Bench(bench::BenchArgs),
    /// NetFS, the file system of the P-SMR services: `logless fs mount DIR [--foreground]`
    /// mounts an in-process (not yet replicated) NetFS there through FUSE.
    Fs(fs::FsArgs),
}

fn main() -> ExitCode {
    match Cli::parse().command {
        None => up::up(&up::UpArgs::defaults()),
        Some(Command::Up(args)) => up::up(&args),
        Some(Command::Server(args)) => server::server(&args),
        Some(Command::Status(args)) => status::status(&args),
        Some(Command::Cluster(args)) => cluster::cluster(&args),
        Some(Command::Certs(args)) => certs::certs(&args),
        Some(Command::Bench(args)) => bench::bench(&args),
        Some(Command::Fs(args)) => fs::fs(&args),
    }
}
