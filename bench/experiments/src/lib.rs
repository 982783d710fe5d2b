//! logless's experiments: each measures one claim of the design on this machine, in release
//! builds, and writes its results as CSV, JSON and PNG plots.
//!
//! * `storage-experiment` (module [`storage`]): the Log / Single In-Place / Multi In-Place access
//!   patterns of the log-less RSM paper (seed 001, §6.2, Figure 6) on DRAM, `mmap`, `mmap` with
//!   msync per write, and `sync` with group commit.
//! * `logless bench compare` (module [`compare`], also the `compare` binary here): logless
//!   against etcd and redis-server in the experiments of the RMWPaxos paper (§7, Figures 3–6),
//!   driven by the Go load generator in `bench/loadgen`.
//! * `logless bench space` (module [`space`], the `logless-space` binary): memory and store
//!   bytes per key against redis-server, restart time, and whether expiring keys give their
//!   space back round after round.
//! * `logless bench failover` (module [`failover`], the `logless-failover` binary): the time a
//!   3-replica log-engine cluster takes to commit again after its leader is killed under load.
//! * `logless bench psmr` (module [`psmr`], the `logless-psmr` binary): P-SMR against sP-SMR,
//!   SMR and no replication on the B⁺-tree service (seed 004, §VI, Figures 3–7).
//! * `logless bench recovery` (module [`recovery`], the `logless-recovery` binary): the log
//!   engine's recovery modes in seed 002's evaluation (restart times, Table II, Fig. 3, every
//!   replica's throughput over a crash as in Figs. 4–5).
//! * `logless bench ring` (module [`ring`], the `logless-ring` binary): ops per CPU-second of a
//!   ring of N nodes (R replicas per key) as N grows, routed and proxied, and each node's share
//!   of the keys against R/N; with `--join`, the throughput timeline while a node joins a
//!   loaded ring (issue 28).
pub mod compare;
pub mod failover;
pub mod plot;
pub mod psmr;
pub mod recovery;
pub mod ring;
pub mod space;
pub mod storage;

/// A harness binary's exit: success, or the error printed on stderr and a failure status.
pub fn exit_code(result: Result<(), String>) -> std::process::ExitCode {
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}
