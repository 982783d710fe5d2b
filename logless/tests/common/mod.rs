//! Real replica processes on free loopback ports, for the integration tests.
#![allow(dead_code)]
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

pub use logless_harness::server::{self, ServerSpec};

pub mod increments;

/// The `logless` binary under test.
pub fn binary() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_logless"))
}

/// One replica: how it is started, and its process while it runs.
pub struct Replica {
    pub spec: ServerSpec,
    pub child: Option<Child>,
}

/// A cluster of replica processes.
pub struct Cluster {
    pub replicas: Vec<Replica>,
    /// The password clients log in with, if the replicas require one.
    pub password: Option<String>,
    /// How a replica's command is made from its spec (`None`: the spec's own command).
    wrap: Option<Wrap>,
    _root: tempfile::TempDir,
}

/// Makes the command that starts a replica from its spec and the binary.
pub type Wrap = Box<dyn Fn(&ServerSpec, &Path) -> Command>;

impl Cluster {
    /// Replica `i`'s `LOGLESS.DIGEST` (the psmr engine's state digest).
    pub fn digest(&self, i: usize) -> String {
        redis::cmd("LOGLESS.DIGEST")
            .query(&mut self.connect(i))
            .expect("a digest")
    }

    /// Waits until every running replica shows the same digest, and gives it.
    pub fn digests_agree(&self, within: Duration) -> String {
        let deadline = Instant::now() + within;
        loop {
            let digests: Vec<String> = (0..self.replicas.len())
                .filter(|&i| self.replicas[i].child.is_some())
                .map(|i| self.digest(i))
                .collect();
            if digests.iter().all(|d| *d == digests[0]) {
                return digests[0].clone();
            }
            assert!(
                Instant::now() < deadline,
                "the replicas' digests differ: {digests:?}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Starts `n` replicas in `durability` mode and waits until a write through each succeeds.
    pub fn start(n: usize, durability: &str) -> Cluster {
        Cluster::start_with(n, durability, &[])
    }

    /// The same with `extra_args` after the usual flags of every replica.
    pub fn start_with(n: usize, durability: &str, extra_args: &[&str]) -> Cluster {
        Cluster::start_as(n, durability, extra_args, None)
    }

    /// The same for replicas whose clients log in with `password` (which `extra_args` set).
    pub fn start_as(
        n: usize,
        durability: &str,
        extra_args: &[&str],
        password: Option<&str>,
    ) -> Cluster {
        Cluster::start_each_as(n, durability, password, |_, spec| {
            spec.args(extra_args.iter().copied())
        })
    }

    /// The same with each replica's spec (after the usual flags) given by `each`, which is told
    /// the replica's index.
    pub fn start_each(
        n: usize,
        durability: &str,
        each: impl Fn(usize, ServerSpec) -> ServerSpec,
    ) -> Cluster {
        Cluster::start_each_as(n, durability, None, each)
    }

    /// [`Cluster::start_each`] for replicas whose clients log in with `password`.
    pub fn start_each_as(
        n: usize,
        durability: &str,
        password: Option<&str>,
        each: impl Fn(usize, ServerSpec) -> ServerSpec,
    ) -> Cluster {
        Cluster::start_wrapped(n, durability, password, each, None)
    }

    /// [`Cluster::start_each_as`], each replica started by the command `wrap` makes (for
    /// example inside a namespace with its own file system).
    pub fn start_wrapped(
        n: usize,
        durability: &str,
        password: Option<&str>,
        each: impl Fn(usize, ServerSpec) -> ServerSpec,
        wrap: Option<Wrap>,
    ) -> Cluster {
        let mut cluster = Cluster::prepare_wrapped(n, durability, password, each, wrap);
        for i in 0..n {
            cluster.spawn(i);
        }
        cluster.wait_serving(Duration::from_secs(30));
        cluster
    }

    /// [`Cluster::start_each_as`] without starting any replica: the caller starts those it
    /// wants with [`Cluster::spawn`].
    pub fn prepare_each_as(
        n: usize,
        durability: &str,
        password: Option<&str>,
        each: impl Fn(usize, ServerSpec) -> ServerSpec,
    ) -> Cluster {
        Cluster::prepare_wrapped(n, durability, password, each, None)
    }

    fn prepare_wrapped(
        n: usize,
        durability: &str,
        password: Option<&str>,
        each: impl Fn(usize, ServerSpec) -> ServerSpec,
        wrap: Option<Wrap>,
    ) -> Cluster {
        let root = tempfile::tempdir().expect("temp dir");
        let n = u16::try_from(n).expect("replicas");
        let base =
            logless_harness::ports::free_block(&server::PORT_OFFSETS, n).expect("free ports");
        let replicas = server::loopback_cluster(n, base, root.path(), durability)
            .into_iter()
            .enumerate()
            .map(|(i, spec)| Replica {
                spec: each(i, spec.flag("--log-level", "info")),
                child: None,
            })
            .collect();
        Cluster {
            replicas,
            password: password.map(str::to_owned),
            wrap,
            _root: root,
        }
    }

    /// Starts replica `i` (again).
    pub fn spawn(&mut self, i: usize) {
        let r = &mut self.replicas[i];
        let child = match &self.wrap {
            None => r.spec.spawn(&binary()),
            Some(wrap) => {
                let log = std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(&r.spec.log)
                    .expect("log file");
                let err = log.try_clone().expect("log file");
                wrap(&r.spec, &binary()).stdout(log).stderr(err).spawn()
            }
        };
        r.child = Some(child.expect("start logless server"));
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
        server::stop_all(&mut [&mut child], Duration::from_secs(10)) == [true]
    }

    /// A connection to replica `i` with bounded waits.
    pub fn connect(&self, i: usize) -> redis::Connection {
        let client = redis::Client::open(self.url(self.replicas[i].spec.client)).expect("client");
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
            let client = r.spec.client;
            loop {
                let ok = TcpStream::connect_timeout(&client, Duration::from_millis(200)).is_ok()
                    && redis::Client::open(self.url(client))
                        .and_then(|c| c.get_connection_with_timeout(Duration::from_secs(1)))
                        .and_then(|mut con| {
                            con.set_read_timeout(Some(Duration::from_secs(2)))?;
                            ready_probe(&mut con, i)
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

    /// The client URL of the replica serving at `client`, with the password if any.
    pub fn url(&self, client: SocketAddr) -> String {
        match &self.password {
            Some(password) => format!("redis://:{password}@{client}/"),
            None => format!("redis://{client}/"),
        }
    }

    pub fn log_tail(&self, i: usize) -> String {
        log_tail(&self.replicas[i].spec.log)
    }
}

/// A write through the replica's engine: `SET ready:<i> 1` (or its redirection, from a node
/// of a ring in cluster mode that does not hold the key), or under the psmr engine (whose
/// service has no plain SET) an update of that key, which changes nothing, or under NetFS a
/// `lstat` of the root.
fn ready_probe(con: &mut redis::Connection, i: usize) -> redis::RedisResult<()> {
    use logless_netfs::{FsCommand, FsPath};
    use logless_service::Wire;
    let key = format!("ready:{i}");
    match redis::cmd("SET").arg(&key).arg(1).query::<String>(con) {
        Err(e) if e.to_string().contains("NetFS") => redis::cmd("LOGLESS.FS")
            .arg(
                FsCommand::Lstat {
                    path: FsPath::root(),
                }
                .encode_to_vec(),
            )
            .query::<Vec<u8>>(con)
            .map(|_| ()),
        Err(e) if e.to_string().contains("B+-tree service") => redis::cmd("SET")
            .arg(&key)
            .arg(1)
            .arg("XX")
            .query::<Option<String>>(con)
            .map(|_| ()),
        // A node of a ring in cluster mode sends keys it does not hold elsewhere: it serves.
        Err(e) if e.code() == Some("MOVED") => Ok(()),
        other => other.map(|_| ()),
    }
}

/// The `--peer-client-addrs` value of `spec`'s cluster: every replica's client address, in
/// [`server::loopback_cluster`]'s layout (its peer port less [`server::PEER_PORT_OFFSET`]).
pub fn peer_client_addrs(spec: &ServerSpec) -> String {
    let clients: Vec<String> = spec
        .peers
        .iter()
        .map(|(id, peer)| {
            let port = peer.port() - server::PEER_PORT_OFFSET;
            format!("{id}={}:{port}", peer.ip())
        })
        .collect();
    clients.join(",")
}

/// An integer reply.
pub fn int(value: &redis::Value) -> i64 {
    match value {
        redis::Value::Int(i) => *i,
        other => panic!("not an integer: {other:?}"),
    }
}

/// An array reply's items.
pub fn array(value: &redis::Value) -> &[redis::Value] {
    match value {
        redis::Value::Array(items) => items,
        other => panic!("not an array: {other:?}"),
    }
}

/// The value of one CONFIG parameter, asked on `con`.
pub fn config_get(con: &mut redis::Connection, name: &str) -> String {
    let got: Vec<String> = redis::cmd("CONFIG")
        .arg("GET")
        .arg(name)
        .query(con)
        .unwrap();
    assert_eq!(got.len(), 2, "{got:?}");
    got[1].clone()
}

/// `spec` on the per-key engine (without `--engine multipaxos`), with its own data directory
/// and log beside the original's.
pub fn per_key_engine(spec: &ServerSpec) -> ServerSpec {
    let mut rmw = spec.clone();
    rmw.extra
        .retain(|arg| arg != "--engine" && arg != "multipaxos");
    rmw.dir = rmw.dir.with_file_name("rmw");
    rmw.log = rmw.log.with_file_name("rmw.log");
    rmw
}

/// A figure of a replica's `/metrics`.
pub fn metric(addr: SocketAddr, name: &str) -> u64 {
    let (_, body) =
        logless_harness::probe::http_get(addr, "/metrics", Duration::from_secs(5)).unwrap();
    body.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or_else(|| panic!("no {name} in\n{body}"))
}

/// The incarnation and life of `node` that the replica with data directory `dir` welcomed
/// last (its `peers.json`): what a test must claim to speak for that node's current life.
pub fn known_life(dir: &Path, node: u16) -> (u32, u64) {
    let text = std::fs::read_to_string(dir.join("peers.json")).expect("peers.json");
    let lives: serde_json::Value = serde_json::from_str(&text).expect("json");
    let life = &lives[node.to_string()];
    (
        life["incarnation"].as_u64().expect("incarnation") as u32,
        life["life"].as_u64().expect("life"),
    )
}

pub fn log_tail(path: &Path) -> String {
    logless_harness::log_tail(path, 30)
}

/// Starts `spec`'s server, which must refuse to start: waits for it to exit unsuccessfully
/// (20 s at most) and returns the tail of its log.
pub fn refused_start(spec: &ServerSpec) -> String {
    let mut child = spec.spawn(&binary()).expect("start logless server");
    let deadline = Instant::now() + Duration::from_secs(20);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        assert!(
            Instant::now() < deadline,
            "the server did not refuse to start"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(!status.success());
    log_tail(&spec.log)
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for i in 0..self.replicas.len() {
            self.kill(i);
        }
    }
}
