//! The replica processes: starting `logless server`, SIGKILL, SIGSTOP /
//! SIGCONT, restarts, noticing replicas that exit on their own, readiness, and shutdown.
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::client::{Connection, Reply};

/// How the replicas are started.
#[derive(Clone, Debug)]
pub struct ClusterConfig {
    /// The `logless` binary.
    pub bin: PathBuf,
    /// `mmap` or `sync` (any mode `logless server --durability` takes).
    pub durability: String,
    /// Deliberate protocol bugs (`--inject-bug`), for the harness's own tests.
    pub bugs: Vec<String>,
    /// The replicas' `--request-timeout-ms`.
    pub request_timeout_ms: u64,
    /// The replicas' `--log-level`.
    pub log_level: String,
}

/// One replica's fixed addresses and files.
#[derive(Clone, Debug)]
pub struct NodeSpec {
    /// Its node id (1..=n).
    pub id: u16,
    /// Where Redis clients connect.
    pub client: SocketAddr,
    /// Where peers (through the proxy) connect.
    pub peer: SocketAddr,
    /// Its HTTP endpoint.
    pub http: SocketAddr,
    /// Its data directory.
    pub dir: PathBuf,
    /// Its log (stdout and stderr of every incarnation, appended).
    pub log: PathBuf,
}

/// A replica that exited without being told to.
#[derive(Clone, Debug)]
pub struct UnexpectedExit {
    /// The node.
    pub id: u16,
    /// Its exit status.
    pub status: String,
    /// The end of its log.
    pub log_tail: String,
}

struct NodeProcess {
    spec: NodeSpec,
    peers: String,
    child: Option<Child>,
    paused: bool,
}

/// The running cluster.
pub struct Cluster {
    config: ClusterConfig,
    nodes: Vec<NodeProcess>,
    started: Instant,
}

fn signal(pid: u32, name: &str) -> bool {
    Command::new("kill")
        .args([name, &pid.to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

impl Cluster {
    /// Plans a cluster of `specs`; `peers(i)` is node `i`'s `--peers` list. Nothing starts yet.
    pub fn new(config: ClusterConfig, specs: Vec<NodeSpec>, peers: impl Fn(u16) -> String) -> Self {
        let nodes = specs
            .into_iter()
            .map(|spec| NodeProcess {
                peers: peers(spec.id),
                spec,
                child: None,
                paused: false,
            })
            .collect();
        Cluster {
            config,
            nodes,
            started: Instant::now(),
        }
    }

    /// Every node id.
    pub fn ids(&self) -> Vec<u16> {
        self.nodes.iter().map(|n| n.spec.id).collect()
    }

    fn node(&self, id: u16) -> &NodeProcess {
        &self.nodes[usize::from(id - 1)]
    }

    fn node_mut(&mut self, id: u16) -> &mut NodeProcess {
        &mut self.nodes[usize::from(id - 1)]
    }

    /// The Redis addresses of every node.
    pub fn client_addrs(&self) -> Vec<SocketAddr> {
        self.nodes.iter().map(|n| n.spec.client).collect()
    }

    /// Whether node `id` has a live process.
    pub fn is_running(&self, id: u16) -> bool {
        self.node(id).child.is_some()
    }

    /// Starts node `id` if it is not running.
    pub fn start(&mut self, id: u16) -> std::io::Result<()> {
        if self.is_running(id) {
            return Ok(());
        }
        let elapsed = self.started.elapsed().as_secs_f64();
        let config = self.config.clone();
        let node = self.node_mut(id);
        std::fs::create_dir_all(&node.spec.dir)?;
        let mut log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&node.spec.log)?;
        writeln!(
            log,
            "=== logless-chaos: starting node {id} at {elapsed:.3} s ==="
        )?;
        let err: File = log.try_clone()?;
        let mut command = Command::new(&config.bin);
        command
            .arg("server")
            .args(["--node-id", &id.to_string()])
            .args(["--peers", &node.peers])
            .args(["--client-addr", &node.spec.client.to_string()])
            .args(["--peer-addr", &node.spec.peer.to_string()])
            .args(["--http-addr", &node.spec.http.to_string()])
            .arg("--dir")
            .arg(&node.spec.dir)
            .args(["--durability", &config.durability])
            .args([
                "--request-timeout-ms",
                &config.request_timeout_ms.to_string(),
            ])
            .args(["--log-level", &config.log_level]);
        for bug in &config.bugs {
            command.args(["--inject-bug", bug]);
        }
        // Plain text logs (tracing's colours make the files hard to grep).
        let child = command
            .env("NO_COLOR", "1")
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(err)
            .spawn()?;
        node.child = Some(child);
        node.paused = false;
        Ok(())
    }

    /// SIGKILLs node `id` (paused or not) and reaps it. Returns false if it was not running.
    pub fn kill(&mut self, id: u16) -> bool {
        let node = self.node_mut(id);
        let Some(mut child) = node.child.take() else {
            return false;
        };
        let _ = child.kill();
        let _ = child.wait();
        node.paused = false;
        true
    }

    /// SIGSTOPs node `id`. Returns false if it was not running.
    pub fn pause(&mut self, id: u16) -> bool {
        let node = self.node_mut(id);
        let Some(child) = &node.child else {
            return false;
        };
        node.paused = signal(child.id(), "-STOP");
        node.paused
    }

    /// SIGCONTs node `id` if it is paused.
    pub fn resume(&mut self, id: u16) {
        let node = self.node_mut(id);
        if let (Some(child), true) = (&node.child, node.paused) {
            signal(child.id(), "-CONT");
        }
        node.paused = false;
    }

    /// Reaps replicas that exited although nobody killed them.
    pub fn reap_unexpected(&mut self) -> Vec<UnexpectedExit> {
        let mut exits = Vec::new();
        for node in &mut self.nodes {
            let Some(child) = &mut node.child else {
                continue;
            };
            if let Ok(Some(status)) = child.try_wait() {
                node.child = None;
                node.paused = false;
                exits.push(UnexpectedExit {
                    id: node.spec.id,
                    status: status.to_string(),
                    log_tail: logless_harness::log_tail(&node.spec.log, 20),
                });
            }
        }
        exits
    }

    /// Resumes every paused replica and starts every stopped one.
    pub fn heal(&mut self) -> std::io::Result<()> {
        for id in self.ids() {
            self.resume(id);
            self.start(id)?;
        }
        Ok(())
    }

    /// Stops every replica: SIGCONT, SIGTERM, up to `grace` for a clean exit, then SIGKILL.
    pub fn shutdown(&mut self, grace: Duration) {
        for id in self.ids() {
            self.resume(id);
            if let Some(child) = &self.node(id).child {
                signal(child.id(), "-TERM");
            }
        }
        let deadline = Instant::now() + grace;
        for node in &mut self.nodes {
            let Some(mut child) = node.child.take() else {
                continue;
            };
            while Instant::now() < deadline {
                if let Ok(Some(_)) = child.try_wait() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for node in &mut self.nodes {
            if let Some(mut child) = node.child.take() {
                let _ = child.kill();
                let _ = child.wait();
            }
        }
    }
}

/// Whether one replica answers PING and a quorum read of `probe_key` within `timeout`.
pub async fn serves(addr: SocketAddr, probe_key: &str, timeout: Duration) -> bool {
    let attempt = async {
        let mut c = Connection::connect(addr, timeout).await.ok()?;
        let pong = c.request(&["PING".to_string()]).await.ok()?;
        if pong != Reply::Simple("PONG".into()) {
            return None;
        }
        let read = c
            .request(&["GET".to_string(), probe_key.to_string()])
            .await
            .ok()?;
        matches!(read, Reply::Nil | Reply::Bulk(_)).then_some(())
    };
    tokio::time::timeout(timeout, attempt)
        .await
        .ok()
        .flatten()
        .is_some()
}

/// Waits until every address [`serves`], up to `timeout`; returns how long it took.
pub async fn wait_ready(addrs: &[SocketAddr], timeout: Duration) -> Option<Duration> {
    let start = Instant::now();
    while start.elapsed() < timeout {
        let mut all = true;
        for addr in addrs {
            if !serves(*addr, "logless-chaos:probe", Duration::from_secs(2)).await {
                all = false;
                break;
            }
        }
        if all {
            return Some(start.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    None
}
