//! The replica processes: starting `logless server`, SIGKILL, SIGSTOP /
//! SIGCONT, restarts, noticing replicas that exit on their own, readiness, and shutdown.
use std::fs::OpenOptions;
use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::Child;
use std::time::{Duration, Instant};

use logless_harness::server::{self, ServerSpec};

use crate::client::{Connection, Reply};

/// How the replicas are started.
#[derive(Clone, Debug)]
pub struct ClusterConfig {
    /// The `logless` binary.
    pub bin: PathBuf,
    /// `mmap` or `sync` (any mode `logless server --durability` takes).
    pub durability: String,
    /// `rmw`, `multipaxos` or `psmr` (`logless server --engine`).
    pub engine: String,
    /// The log engine's recovery mode (`logless server --recovery`: `fullss`, `epoch` or
    /// `pmem`), under `--engine multipaxos`; `None`: the server's default.
    pub recovery: Option<String>,
    /// The psmr engine's mode and threads (under `--engine psmr`).
    pub psmr: Option<PsmrLayout>,
    /// Deliberate protocol bugs (`--inject-bug`), for the harness's own tests.
    pub bugs: Vec<String>,
    /// The replicas' `--request-timeout-ms`.
    pub request_timeout_ms: u64,
    /// The replicas' `--removal-grace-ms`.
    pub removal_grace_ms: u64,
    /// The replicas' `--log-level`.
    pub log_level: String,
    /// The replicas' `--replication` (a ring, each key on this many of them); `None`: every
    /// replica holds every key.
    pub replication: Option<u8>,
}

/// How the psmr engine runs: `logless server --psmr-mode` and `--threads`.
#[derive(Clone, Debug)]
pub struct PsmrLayout {
    /// `psmr`, `sp-smr` or `smr`.
    pub mode: String,
    /// Worker threads, `k`.
    pub threads: u16,
}

impl ClusterConfig {
    /// `spec` with this configuration's flags (its durability is the spec's own).
    fn flags(&self, spec: ServerSpec) -> ServerSpec {
        let mut spec = spec
            .flag("--engine", &self.engine)
            .flag("--request-timeout-ms", self.request_timeout_ms)
            .flag("--removal-grace-ms", self.removal_grace_ms)
            .flag("--log-level", &self.log_level);
        if let Some(recovery) = &self.recovery {
            spec = spec.flag("--recovery", recovery);
        }
        if let Some(replication) = self.replication {
            spec = spec.flag("--replication", replication);
        }
        if let Some(psmr) = &self.psmr {
            spec = spec
                .flag("--psmr-mode", &psmr.mode)
                .flag("--threads", psmr.threads);
        }
        self.bugs
            .iter()
            .fold(spec, |spec, bug| spec.flag("--inject-bug", bug))
    }
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
    spec: ServerSpec,
    child: Option<Child>,
    paused: bool,
}

/// The running cluster.
pub struct Cluster {
    bin: PathBuf,
    nodes: Vec<NodeProcess>,
    started: Instant,
}

impl Cluster {
    /// Plans a cluster of `specs` (their `--peers` lists included), each started with the
    /// flags of `config` as well. Nothing starts yet.
    pub fn new(config: ClusterConfig, specs: Vec<ServerSpec>) -> Self {
        let nodes = specs
            .into_iter()
            .map(|spec| NodeProcess {
                spec: config.flags(spec),
                child: None,
                paused: false,
            })
            .collect();
        Cluster {
            bin: config.bin,
            nodes,
            started: Instant::now(),
        }
    }

    /// Every node id.
    pub fn ids(&self) -> Vec<u16> {
        self.nodes.iter().map(|n| n.spec.node_id).collect()
    }

    fn node(&self, id: u16) -> &NodeProcess {
        &self.nodes[usize::from(id - 1)]
    }

    fn node_mut(&mut self, id: u16) -> &mut NodeProcess {
        &mut self.nodes[usize::from(id - 1)]
    }

    /// The `logless` binary.
    pub fn bin(&self) -> &std::path::Path {
        &self.bin
    }

    /// The HTTP address of node `id`.
    pub fn http_addr(&self, id: u16) -> SocketAddr {
        self.node(id).spec.http
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
        let bin = self.bin.clone();
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
        node.child = Some(node.spec.spawn(&bin)?);
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
        node.paused = server::signal(child.id(), "-STOP");
        node.paused
    }

    /// SIGCONTs node `id` if it is paused.
    pub fn resume(&mut self, id: u16) {
        let node = self.node_mut(id);
        if let (Some(child), true) = (&node.child, node.paused) {
            server::signal(child.id(), "-CONT");
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
                    id: node.spec.node_id,
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
        }
        let mut children: Vec<Child> = self
            .nodes
            .iter_mut()
            .filter_map(|n| n.child.take())
            .collect();
        let mut children: Vec<&mut Child> = children.iter_mut().collect();
        server::stop_all(&mut children, grace);
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
