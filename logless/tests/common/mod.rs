//! Real replica processes on free loopback ports, for the integration tests.
#![allow(dead_code)]
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The `logless` binary under test.
pub fn binary() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_logless"))
}

/// One replica's addresses and process.
pub struct Replica {
    pub client: SocketAddr,
    pub peer: SocketAddr,
    pub http: SocketAddr,
    pub dir: PathBuf,
    pub log: PathBuf,
    pub child: Option<Child>,
}

/// A cluster of replica processes.
pub struct Cluster {
    pub replicas: Vec<Replica>,
    pub durability: String,
    pub extra_args: Vec<String>,
    _root: tempfile::TempDir,
}

impl Cluster {
    /// Starts `n` replicas in `durability` mode and waits until a write through each succeeds.
    pub fn start(n: usize, durability: &str) -> Cluster {
        Cluster::start_with(n, durability, &[])
    }

    pub fn start_with(n: usize, durability: &str, extra_args: &[&str]) -> Cluster {
        let root = tempfile::tempdir().expect("temp dir");
        let ports = logless_harness::ports::free_ports(3 * n as u16).expect("free ports");
        let replicas = (0..n)
            .map(|i| {
                let addr = |p| SocketAddr::from(([127, 0, 0, 1], ports[3 * i + p]));
                Replica {
                    client: addr(0),
                    peer: addr(1),
                    http: addr(2),
                    dir: root.path().join(format!("node-{}", i + 1)),
                    log: root.path().join(format!("node-{}.log", i + 1)),
                    child: None,
                }
            })
            .collect();
        let mut cluster = Cluster {
            replicas,
            durability: durability.to_string(),
            extra_args: extra_args.iter().map(|s| s.to_string()).collect(),
            _root: root,
        };
        for i in 0..n {
            cluster.spawn(i);
        }
        cluster.wait_serving(Duration::from_secs(30));
        cluster
    }

    fn peers(&self) -> String {
        self.replicas
            .iter()
            .enumerate()
            .map(|(i, r)| format!("{}={}", i + 1, r.peer))
            .collect::<Vec<_>>()
            .join(",")
    }

    /// Starts replica `i` (again).
    pub fn spawn(&mut self, i: usize) {
        let peers = self.peers();
        let r = &mut self.replicas[i];
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&r.log)
            .expect("log file");
        let child = Command::new(binary())
            .arg("server")
            .args(["--node-id", &(i + 1).to_string()])
            .args(["--peers", &peers])
            .args(["--client-addr", &r.client.to_string()])
            .args(["--peer-addr", &r.peer.to_string()])
            .args(["--http-addr", &r.http.to_string()])
            .arg("--dir")
            .arg(&r.dir)
            .args(["--durability", &self.durability])
            .args(["--log-level", "info"])
            .args(&self.extra_args)
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log"))
            .stderr(log)
            .spawn()
            .expect("start logless server");
        r.child = Some(child);
    }

    /// kill -9.
    pub fn kill(&mut self, i: usize) {
        if let Some(mut child) = self.replicas[i].child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// SIGTERM and wait for a clean exit; returns whether it exited with success.
    pub fn stop(&mut self, i: usize) -> bool {
        let Some(mut child) = self.replicas[i].child.take() else {
            return true;
        };
        let _ = Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status();
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(Some(status)) = child.try_wait() {
                return status.success();
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = child.kill();
        let _ = child.wait();
        false
    }

    /// A connection to replica `i` with bounded waits.
    pub fn connect(&self, i: usize) -> redis::Connection {
        let client =
            redis::Client::open(format!("redis://{}/", self.replicas[i].client)).expect("client");
        let con = client
            .get_connection_with_timeout(Duration::from_secs(5))
            .expect("connect");
        con.set_read_timeout(Some(Duration::from_secs(10)))
            .expect("timeout");
        con.set_write_timeout(Some(Duration::from_secs(10)))
            .expect("timeout");
        con
    }

    /// Waits until every running replica answers PING and a write through each is applied.
    pub fn wait_serving(&self, within: Duration) {
        let deadline = Instant::now() + within;
        for (i, r) in self.replicas.iter().enumerate() {
            if r.child.is_none() {
                continue;
            }
            loop {
                let ok = TcpStream::connect_timeout(&r.client, Duration::from_millis(200)).is_ok()
                    && redis::Client::open(format!("redis://{}/", r.client))
                        .and_then(|c| c.get_connection_with_timeout(Duration::from_secs(1)))
                        .and_then(|mut con| {
                            con.set_read_timeout(Some(Duration::from_secs(2)))?;
                            redis::cmd("SET")
                                .arg(format!("ready:{i}"))
                                .arg(1)
                                .query::<String>(&mut con)
                        })
                        .is_ok();
                if ok {
                    break;
                }
                assert!(
                    Instant::now() < deadline,
                    "replica {} did not serve in time; log:\n{}",
                    i + 1,
                    self.log_tail(i)
                );
                std::thread::sleep(Duration::from_millis(100));
            }
        }
    }

    pub fn log_tail(&self, i: usize) -> String {
        log_tail(&self.replicas[i].log)
    }
}

pub fn log_tail(path: &Path) -> String {
    logless_harness::log_tail(path, 30)
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for i in 0..self.replicas.len() {
            self.kill(i);
        }
    }
}
