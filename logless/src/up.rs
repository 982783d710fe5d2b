//! `logless up`: a local cluster of replica processes on loopback, run until Ctrl-C.
//!
//! Replica `i` (from 0) serves Redis on `port + i`, its peers on `port + 1000 + i` and HTTP on
//! `port + 2000 + i`; its data is under `DIR/node-{i+1}` and its log in `DIR/node-{i+1}.log`.
use std::fs::File;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

/// The first replica's Redis port by default.
pub const PORT_DEFAULT: u16 = 7379;
/// Peer ports are this far above the Redis ports.
pub const PEER_PORT_OFFSET: u16 = 1000;
/// HTTP ports are this far above the Redis ports.
pub const HTTP_PORT_OFFSET: u16 = 2000;
/// The first replica's HTTP port by default.
pub const HTTP_PORT_DEFAULT: u16 = PORT_DEFAULT + HTTP_PORT_OFFSET;

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

/// One round trip of a RESP request on a fresh connection; returns the first reply line.
fn ask(addr: SocketAddr, request: &[u8]) -> std::io::Result<String> {
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_millis(500))?;
    stream.set_read_timeout(Some(Duration::from_secs(6)))?;
    stream.write_all(request)?;
    let mut reply = Vec::new();
    let mut byte = [0u8; 1];
    while !reply.ends_with(b"\r\n") {
        if stream.read(&mut byte)? == 0 {
            break;
        }
        reply.push(byte[0]);
    }
    Ok(String::from_utf8_lossy(&reply).trim_end().to_string())
}

fn log_tail(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<_> = text.lines().collect();
    lines[lines.len().saturating_sub(15)..].join("\n")
}

fn stop(children: &mut [(Child, PathBuf)]) {
    for (child, _) in children.iter() {
        // SIGTERM lets the replica flush and close; `kill` spares us libc for one call.
        let _ = Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .stderr(Stdio::null())
            .status();
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    for (child, _) in children.iter_mut() {
        while Instant::now() < deadline {
            if let Ok(Some(_)) = child.try_wait() {
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        if let Ok(None) = child.try_wait() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
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
    let client = |i: u16| SocketAddr::from(([127, 0, 0, 1], args.port + i));
    let peer = |i: u16| SocketAddr::from(([127, 0, 0, 1], args.port + PEER_PORT_OFFSET + i));
    let http = |i: u16| SocketAddr::from(([127, 0, 0, 1], args.port + HTTP_PORT_OFFSET + i));
    let peers: Vec<String> = (0..n).map(|i| format!("{}={}", i + 1, peer(i))).collect();
    let peers = peers.join(",");
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
    let mut children: Vec<(Child, PathBuf)> = Vec::new();
    for i in 0..n {
        let log = args.dir.join(format!("node-{}.log", i + 1));
        let spawned = File::create(&log).and_then(|out| {
            let err = out.try_clone()?;
            Command::new(&exe)
                .arg("server")
                .args(["--node-id", &(i + 1).to_string()])
                .args(["--peers", &peers])
                .args(["--client-addr", &client(i).to_string()])
                .args(["--peer-addr", &peer(i).to_string()])
                .args(["--http-addr", &http(i).to_string()])
                .arg("--dir")
                .arg(args.dir.join(format!("node-{}", i + 1)))
                .args(["--durability", &args.durability])
                .args(["--shards", &args.shards.to_string()])
                .args(["--read-retries", &args.read_retries.to_string()])
                .args(["--thrifty-reads", &args.thrifty_reads.to_string()])
                .args(["--thrifty-writes", &args.thrifty_writes.to_string()])
                .args([
                    "--proposer-registers-max",
                    &args.proposer_registers_max.to_string(),
                ])
                .args(["--log-level", &args.log_level])
                .stdin(Stdio::null())
                .stdout(out)
                .stderr(err)
                .spawn()
        });
        match spawned {
            Ok(child) => children.push((child, log)),
            Err(e) => {
                eprintln!("error: cannot start replica {}: {e}", i + 1);
                stop(&mut children);
                return ExitCode::FAILURE;
            }
        }
    }
    // Ready when every replica answers PING and a read through the first one is answered,
    // which needs a quorum.
    let deadline = Instant::now() + Duration::from_secs(args.ready_timeout_s);
    let mut ready = false;
    while Instant::now() < deadline {
        for (i, (child, log)) in children.iter_mut().enumerate() {
            if let Ok(Some(status)) = child.try_wait() {
                eprintln!(
                    "error: replica {} exited ({status}) before serving; its log:\n{}",
                    i + 1,
                    log_tail(log)
                );
                stop(&mut children);
                return ExitCode::FAILURE;
            }
        }
        let pings = (0..n).all(|i| ask(client(i), b"PING\r\n").is_ok_and(|r| r == "+PONG"));
        if pings
            && ask(client(0), b"*2\r\n$3\r\nGET\r\n$11\r\nlogless:up:\r\n")
                .is_ok_and(|r| r.starts_with('$'))
        {
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
    for i in 0..n {
        println!(
            "  replica {}: redis {}   metrics http://{}/metrics   log {}",
            i + 1,
            client(i),
            http(i),
            children[usize::from(i)].1.display()
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
                    for (i, (child, _)) in children.iter_mut().enumerate() {
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
