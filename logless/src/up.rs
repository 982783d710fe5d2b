//! `logless up`: a local cluster of replica processes on loopback, run until Ctrl-C.
//!
//! Replica `i` (from 0) serves Redis on `port + i`, its peers on `port + 1000 + i` and HTTP on
//! `port + 2000 + i`; its data is under `DIR/node-{i+1}` and its log in `DIR/node-{i+1}.log`
//! (the layout of [`logless_harness::server::loopback_cluster`], which starts them).
use std::path::PathBuf;
use std::process::{Child, ExitCode};
use std::time::{Duration, Instant};

use logless_harness::server::{self, ServerSpec, HTTP_PORT_OFFSET};

/// The first replica's Redis port by default.
pub const PORT_DEFAULT: u16 = 7379;
/// The first replica's HTTP port by default.
pub const HTTP_PORT_DEFAULT: u16 = PORT_DEFAULT + HTTP_PORT_OFFSET;
/// How long the readiness probe waits for each answer: a read needs a quorum of replicas that
/// may still be opening their stores.
const PROBE_TIMEOUT: Duration = Duration::from_secs(6);

#[derive(clap::Args, Clone, Debug)]
pub struct UpArgs {
    /// Replicas: 1, 3, 5 or 7.
    #[arg(long, default_value_t = 3)]
    pub replicas: u16,
    /// The first replica's Redis port; the others follow it.
    #[arg(long, default_value_t = PORT_DEFAULT)]
    pub port: u16,
    /// Where the replicas keep their data and logs.
    #[arg(long, default_value = "logless-data")]
    pub dir: PathBuf,
    /// memory, mmap, sync or pmem.
    #[arg(long, default_value = "mmap")]
    pub durability: String,
    /// Shards per replica.
    #[arg(long, default_value_t = 1)]
    pub shards: u16,
    /// Read retries before a read writes through (X).
    #[arg(long, default_value_t = 1)]
    pub read_retries: u32,
    /// Whether reads ask a quorum first (true) or every replica at once (false).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub thrifty_reads: bool,
    /// Whether fast writes vote with a quorum first (true) or every replica at once (false):
    /// for clients that send each key to one replica.
    #[arg(long, default_value_t = false, action = clap::ArgAction::Set)]
    pub thrifty_writes: bool,
    /// The most registers each shard's proposer keeps; beyond it, idle ones are dropped.
    #[arg(long, default_value_t = logless_rmw::config::REGISTERS_MAX_DEFAULT)]
    pub proposer_registers_max: usize,
    /// The replicas' log level.
    #[arg(long, default_value = "info")]
    pub log_level: String,
    /// Seconds to wait for the cluster to serve.
    #[arg(long, default_value_t = 30)]
    pub ready_timeout_s: u64,
}

impl UpArgs {
    /// Every option at its default, as `logless up` alone gives them.
    pub fn defaults() -> UpArgs {
        #[derive(clap::Parser)]
        struct Only {
            #[command(flatten)]
            up: UpArgs,
        }
        <Only as clap::Parser>::parse_from(["logless"]).up
    }
}

/// The replicas' specs: `logless up`'s layout with its options as flags.
fn specs(args: &UpArgs) -> Vec<ServerSpec> {
    server::loopback_cluster(args.replicas, args.port, &args.dir, &args.durability)
        .into_iter()
        .map(|spec| {
            ServerSpec {
                shards: Some(args.shards),
                ..spec
            }
            .flag("--read-retries", args.read_retries)
            .flag("--thrifty-reads", args.thrifty_reads)
            .flag("--thrifty-writes", args.thrifty_writes)
            .flag("--proposer-registers-max", args.proposer_registers_max)
            .flag("--log-level", &args.log_level)
        })
        .collect()
}

/// Stops every replica: SIGTERM, so that each flushes and closes its store, then SIGKILL to
/// those still running after 10 s.
fn stop(children: &mut [Child]) {
    let mut children: Vec<&mut Child> = children.iter_mut().collect();
    server::stop_all(&mut children, Duration::from_secs(10));
}

pub fn up(args: &UpArgs) -> ExitCode {
    if ![1, 3, 5, 7].contains(&args.replicas) {
        eprintln!("error: --replicas must be 1, 3, 5 or 7");
        return ExitCode::from(2);
    }
    let n = args.replicas;
    if u32::from(args.port) + u32::from(HTTP_PORT_OFFSET) + u32::from(n) > 65_535
        || args.port < 1024
    {
        eprintln!("error: --port must leave room for peer and HTTP ports (1024 to 63000)");
        return ExitCode::from(2);
    }
    if let Err(e) = std::fs::create_dir_all(&args.dir) {
        eprintln!("error: cannot create {}: {e}", args.dir.display());
        return ExitCode::FAILURE;
    }
    let exe = match std::env::current_exe() {
        Ok(exe) => exe,
        Err(e) => {
            eprintln!("error: cannot find the logless binary: {e}");
            return ExitCode::FAILURE;
        }
    };
    let specs = specs(args);
    let mut children: Vec<Child> = Vec::new();
    for spec in &specs {
        // Each `logless up` starts its replicas' logs afresh (the launcher appends).
        let spawned = std::fs::File::create(&spec.log).and_then(|_| spec.spawn(&exe));
        match spawned {
            Ok(child) => children.push(child),
            Err(e) => {
                eprintln!("error: cannot start replica {}: {e}", spec.node_id);
                stop(&mut children);
                return ExitCode::FAILURE;
            }
        }
    }
    // Ready when every replica answers PING and a read through the first one is answered,
    // which needs a quorum.
    let clients: Vec<_> = specs.iter().map(|s| s.client).collect();
    let deadline = Instant::now() + Duration::from_secs(args.ready_timeout_s);
    let mut ready = false;
    while Instant::now() < deadline {
        for (child, spec) in children.iter_mut().zip(&specs) {
            if let Ok(Some(status)) = child.try_wait() {
                eprintln!(
                    "error: replica {} exited ({status}) before serving; its log:\n{}",
                    spec.node_id,
                    logless_harness::log_tail(&spec.log, 15)
                );
                stop(&mut children);
                return ExitCode::FAILURE;
            }
        }
        if logless_harness::probe::cluster_serves(&clients, "logless:up:", PROBE_TIMEOUT) {
            ready = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    if !ready {
        eprintln!(
            "error: the cluster did not serve within {} s; replica logs are in {}",
            args.ready_timeout_s,
            args.dir.display()
        );
        stop(&mut children);
        return ExitCode::FAILURE;
    }
    println!(
        "logless: {n} replicas serving ({} mode, {} shard(s) each, data in {})",
        args.durability,
        args.shards,
        args.dir.display()
    );
    for spec in &specs {
        println!(
            "  replica {}: redis {}   metrics http://{}/metrics   log {}",
            spec.node_id,
            spec.client,
            spec.http,
            spec.log.display()
        );
    }
    println!(
        "connect with:  redis-cli -p {}   (any replica serves every key)",
        args.port
    );
    println!("stop with Ctrl-C");
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let exited = runtime.block_on(async {
        let mut terminate =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
                .expect("signal handler");
        let mut tick = tokio::time::interval(Duration::from_millis(500));
        loop {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => return None,
                _ = terminate.recv() => return None,
                _ = tick.tick() => {
                    for (i, child) in children.iter_mut().enumerate() {
                        if let Ok(Some(status)) = child.try_wait() {
                            return Some((i + 1, status));
                        }
                    }
                }
            }
        }
    });
    if let Some((i, status)) = exited {
        eprintln!("replica {i} exited ({status}); stopping the others");
    } else {
        println!("stopping the replicas");
    }
    stop(&mut children);
    if exited.is_some() {
        ExitCode::FAILURE
    } else {
        println!("stopped");
        ExitCode::SUCCESS
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn logless_alone_starts_the_documented_default_cluster() {
        let d = UpArgs::defaults();
        assert_eq!(
            (d.replicas, d.port, d.shards, d.read_retries),
            (3, PORT_DEFAULT, 1, 1)
        );
        assert_eq!(d.dir, PathBuf::from("logless-data"));
        assert_eq!(
            (d.durability.as_str(), d.log_level.as_str()),
            ("mmap", "info")
        );
        assert!(d.thrifty_reads);
        assert!(!d.thrifty_writes);
        assert_eq!(
            d.proposer_registers_max,
            logless_node::config::NodeConfig::default().proposer_registers_max
        );
        assert_eq!(d.ready_timeout_s, 30);
    }
}
