//! Starting and stopping the systems under test on loopback: logless (through `logless up`, or
//! as separate `logless server` processes when replicas are to be killed one by one),
//! redis-server and an etcd cluster, each on free ports with its data in a temporary directory.
//!
//! Every child process runs under coreutils `timeout`, so that it ends by itself even if this
//! process is killed with SIGKILL, and with `PR_SET_PDEATHSIG` set to SIGTERM, so that it ends at
//! once when the thread that started it ends. `timeout` puts itself and the child into a new
//! process group, which is what [`Proc::stop`] and [`Proc::crash`] signal. Dropping a
//! [`Proc`] or a [`Running`] stops its processes.
use std::ffi::OsStr;
use std::fs::File;
use std::net::SocketAddr;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use logless_harness::probe::{self, http_get};
use logless_harness::server;

/// One child process (under `timeout`) and its log file.
pub struct Proc {
    /// What it is, for messages.
    pub label: String,
    /// Its stdout and stderr.
    pub log: PathBuf,
    child: Child,
    done: bool,
}

impl Proc {
    /// Starts `program args` with stdout and stderr to `log`, killed after `limit_s` seconds.
    pub fn spawn(
        label: &str,
        program: &Path,
        args: &[impl AsRef<OsStr>],
        log: &Path,
        limit_s: u64,
    ) -> Result<Proc, String> {
        let out = File::create(log).map_err(|e| format!("cannot create {}: {e}", log.display()))?;
        let err = out.try_clone().map_err(|e| e.to_string())?;
        let mut cmd = Command::new("timeout");
        cmd.arg("--kill-after=5")
            .arg(format!("{}s", limit_s.max(1)))
            .arg(program)
            .args(args)
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err);
        // SAFETY: prctl is async-signal-safe and touches no memory of the parent.
        unsafe {
            cmd.pre_exec(|| {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM);
                Ok(())
            });
        }
        let child = cmd
            .spawn()
            .map_err(|e| format!("cannot start {label} ({}): {e}", program.display()))?;
        Ok(Proc {
            label: label.to_string(),
            log: log.to_path_buf(),
            child,
            done: false,
        })
    }

    /// The exit status, if it has exited.
    pub fn exited(&mut self) -> Option<ExitStatus> {
        if self.done {
            return None;
        }
        match self.child.try_wait() {
            Ok(Some(status)) => {
                self.done = true;
                Some(status)
            }
            _ => None,
        }
    }

    fn running(&mut self) -> bool {
        if !self.done {
            self.exited();
        }
        !self.done
    }

    fn wait_until(&mut self, deadline: Instant) -> bool {
        while Instant::now() < deadline {
            if !self.running() {
                return true;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        !self.running()
    }

    fn kill_group(&mut self) {
        let pid = self.child.id() as i32;
        // SAFETY: plain kill(2) calls on our own child's process group and pid.
        unsafe {
            libc::kill(-pid, libc::SIGKILL);
            libc::kill(pid, libc::SIGKILL);
        }
        let _ = self.child.wait();
        self.done = true;
    }

    /// SIGTERM (which `timeout` passes on to its group), then SIGKILL to the group after `grace`.
    pub fn stop(&mut self, grace: Duration) {
        if !self.running() {
            return;
        }
        // SAFETY: kill(2) on our own, not yet reaped, child.
        unsafe {
            libc::kill(self.child.id() as i32, libc::SIGTERM);
        }
        if !self.wait_until(Instant::now() + grace) {
            self.kill_group();
        }
    }

    /// SIGKILL to the whole group at once: a crash.
    pub fn crash(&mut self) {
        if self.running() {
            self.kill_group();
        }
    }

    /// Waits up to `limit` for it to exit by itself; kills it after that.
    pub fn wait_timeout(&mut self, limit: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + limit;
        while Instant::now() < deadline {
            if let Ok(Some(status)) = self.child.try_wait() {
                self.done = true;
                return Some(status);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        self.stop(Duration::from_secs(3));
        None
    }

    /// Its process id (that of `timeout`, whose descendant the program is).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The last lines of its log.
    pub fn log_tail(&self) -> String {
        logless_harness::log_tail(&self.log, 12)
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.stop(Duration::from_secs(15));
    }
}

/// `error` followed by the end of each process's log, under its label.
pub fn with_logs(procs: &[Proc], error: String) -> String {
    let tails: Vec<String> = procs
        .iter()
        .map(|p| format!("{}:\n{}", p.label, p.log_tail()))
        .collect();
    format!("{error}\n{}", tails.join("\n"))
}

/// The families of systems.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Family {
    /// logless with the per-key engine (RMWPaxos), through `logless up`.
    Logless,
    /// logless with the log engine (`--engine multipaxos`), through `logless up`.
    LoglessLog,
    /// Debian's redis-server, one node.
    Redis,
    /// Debian's etcd-server, a cluster.
    Etcd,
}

/// One configuration of a system under test.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Variant {
    /// Its name in results and on plots.
    pub name: &'static str,
    /// Its family.
    pub family: Family,
    /// Whether an acknowledged write survives a power loss.
    pub fsync: bool,
    /// How it is configured, for the report.
    pub about: &'static str,
}

/// Every variant, in plotting order.
pub const VARIANTS: [Variant; 8] = [
    Variant {
        name: "logless-mmap",
        family: Family::Logless,
        fsync: false,
        about: "logless up --durability mmap (survives kill -9, not power loss)",
    },
    Variant {
        name: "logless-sync",
        family: Family::Logless,
        fsync: true,
        about: "logless up --durability sync (group-committed msync/fsync before replying)",
    },
    Variant {
        name: "logless-multipaxos-mmap",
        family: Family::LoglessLog,
        fsync: false,
        about: "logless up --engine multipaxos --durability mmap (one Multi-Paxos log)",
    },
    Variant {
        name: "logless-multipaxos-sync",
        family: Family::LoglessLog,
        fsync: true,
        about: "logless up --engine multipaxos --durability sync (the log flushed before replying)",
    },
    Variant {
        name: "redis",
        family: Family::Redis,
        fsync: false,
        about: "redis-server, one node, no persistence (--save '' --appendonly no)",
    },
    Variant {
        name: "redis-aof-always",
        family: Family::Redis,
        fsync: true,
        about: "redis-server, one node, --appendonly yes --appendfsync always",
    },
    Variant {
        name: "etcd",
        family: Family::Etcd,
        fsync: true,
        about: "etcd cluster, default fsync of the WAL",
    },
    Variant {
        name: "etcd-nofsync",
        family: Family::Etcd,
        fsync: false,
        about: "etcd cluster, --unsafe-no-fsync",
    },
];

impl Variant {
    /// The `--engine` a logless variant runs (rmw for the other families, which ignore it).
    pub fn engine(&self) -> &'static str {
        match self.family {
            Family::LoglessLog => "multipaxos",
            _ => "rmw",
        }
    }
}

/// Looks a variant up by name.
pub fn variant(name: &str) -> Option<Variant> {
    VARIANTS.iter().copied().find(|v| v.name == name)
}

/// Finds `program` on the PATH.
pub fn which(program: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(program))
        .find(|p| p.is_file())
}

/// Makes sure `binary` is installed, else tries `apt-get install -y package` (printing what it
/// does), and once more after `apt-get update` if that failed (a fresh machine may have no
/// package lists yet). Returns the binary's path or why it is missing.
pub fn ensure_installed(binary: &str, package: &str, install: bool) -> Result<PathBuf, String> {
    if let Some(p) = which(binary) {
        return Ok(p);
    }
    if !install {
        return Err(format!(
            "{binary} is not installed (Debian package {package}); --no-install was given"
        ));
    }
    println!("{binary} is missing: running `apt-get install -y {package}`");
    if !apt_get(&["install", "-y", package]) {
        println!("updating the package lists and trying again");
        let _ = apt_get(&["update", "-qq"]) && apt_get(&["install", "-y", package]);
    }
    which(binary).ok_or_else(|| {
        format!("{binary} is not installed and `apt-get install -y {package}` did not install it")
    })
}

/// Runs `apt-get` with `args` (at most 10 minutes); whether it succeeded.
fn apt_get(args: &[&str]) -> bool {
    let status = Command::new("timeout")
        .arg("600")
        .arg("apt-get")
        .args(args)
        .env("DEBIAN_FRONTEND", "noninteractive")
        .stdin(Stdio::null())
        .status();
    match status {
        Ok(s) if s.success() => true,
        Ok(s) => {
            println!("apt-get {} failed ({s})", args.join(" "));
            false
        }
        Err(e) => {
            println!("cannot run apt-get: {e}");
            false
        }
    }
}

/// A base port `b` such that `b + offset + i` is free for every offset and `i < count`.
pub fn free_ports(offsets: &[u16], count: u16) -> Result<u16, String> {
    logless_harness::ports::free_block(offsets, count).map_err(|e| e.to_string())
}

/// How long a readiness probe waits for each answer.
const PROBE_TIMEOUT: Duration = Duration::from_secs(3);

/// `host:port` as a socket address.
fn socket_addr(endpoint: &str) -> Result<SocketAddr, String> {
    endpoint
        .parse()
        .map_err(|e| format!("bad endpoint {endpoint}: {e}"))
}

/// A running system: its endpoints (host:port of the Redis or etcd client ports), processes
/// and data directory.
pub struct Running {
    /// The variant's name.
    pub name: String,
    /// `redis` (any Redis-protocol server) or `etcd`: loadgen's -system.
    pub protocol: &'static str,
    /// Client endpoints, one per replica or member.
    pub endpoints: Vec<String>,
    /// Replicas or members.
    pub replicas: u16,
    procs: Vec<Proc>,
    died: bool,
    // Last: removed after the processes have stopped.
    data: tempfile::TempDir,
}

impl Running {
    /// Stops every process (SIGTERM, then SIGKILL after a grace period) and removes the data.
    pub fn stop(mut self) {
        self.stop_procs();
    }

    fn stop_procs(&mut self) {
        for p in self.procs.iter_mut() {
            p.stop(Duration::from_secs(15));
        }
    }

    /// Kills process `i` with SIGKILL (a crash).
    pub fn crash(&mut self, i: usize) -> Result<(), String> {
        let p = self
            .procs
            .get_mut(i)
            .ok_or_else(|| format!("no process {i}"))?;
        p.crash();
        Ok(())
    }

    /// The CPU seconds its processes and all their descendants have used so far.
    pub fn cpu_seconds(&self) -> f64 {
        let roots: Vec<u32> = self.procs.iter().map(Proc::pid).collect();
        super::cpu::tree_seconds(&roots)
    }

    /// The process ids of the programs started (each under `timeout`, see [`Proc::pid`]).
    pub fn pids(&self) -> Vec<u32> {
        self.procs.iter().map(Proc::pid).collect()
    }

    /// The data directory.
    pub fn data_dir(&self) -> &Path {
        self.data.path()
    }

    /// Remembers that a process has died, so that the next [`Running::dead`] says so again.
    pub fn mark_dead(&mut self) {
        self.died = true;
    }

    /// Whether some process has exited; returns its label and log tail.
    pub fn dead(&mut self) -> Option<String> {
        if self.died {
            return Some(format!("{} had died", self.name));
        }
        for p in self.procs.iter_mut() {
            if let Some(status) = p.exited() {
                return Some(format!(
                    "{} exited ({status}); its log ends:\n{}",
                    p.label,
                    p.log_tail()
                ));
            }
        }
        None
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.stop_procs();
    }
}

fn data_dir(name: &str) -> Result<tempfile::TempDir, String> {
    tempfile::Builder::new()
        .prefix(&format!("logless-compare-{name}-"))
        .tempdir()
        .map_err(|e| format!("no temporary directory: {e}"))
}

fn wait_ready(
    procs: &mut [Proc],
    limit: Duration,
    what: &str,
    mut ready: impl FnMut() -> bool,
) -> Result<(), String> {
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        for p in procs.iter_mut() {
            if let Some(status) = p.exited() {
                return Err(format!(
                    "{} exited ({status}) before serving; its log ends:\n{}",
                    p.label,
                    p.log_tail()
                ));
            }
        }
        if ready() {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    Err(format!("{what} did not serve within {} s", limit.as_secs()))
}

/// Options of a logless cluster.
#[derive(Clone, Debug)]
pub struct LoglessOpts {
    /// The `logless` binary.
    pub bin: PathBuf,
    /// Replicas: 1, 3, 5 or 7.
    pub replicas: u16,
    /// mmap or sync.
    pub durability: String,
    /// rmw or multipaxos.
    pub engine: String,
    /// X.
    pub read_retries: u32,
    /// Seconds after which the processes are killed in any case.
    pub limit_s: u64,
}

/// Starts `logless up` on free ports and waits for its "stop with Ctrl-C".
pub fn start_logless_up(name: &str, o: &LoglessOpts) -> Result<Running, String> {
    start_logless_up_with(name, o, &[])
}

/// [`start_logless_up`] with `extra` arguments after the usual ones (such as the psmr
/// engine's `--threads` and `--psmr-mode`).
pub fn start_logless_up_with(
    name: &str,
    o: &LoglessOpts,
    extra: &[String],
) -> Result<Running, String> {
    let data = data_dir(name)?;
    let port = free_ports(&server::PORT_OFFSETS, o.replicas)?;
    let log = data.path().join("up.log");
    let mut args: Vec<String> = [
        "up",
        "--replicas",
        &o.replicas.to_string(),
        "--port",
        &port.to_string(),
        "--dir",
        &data.path().join("cluster").to_string_lossy(),
        "--durability",
        &o.durability,
        "--engine",
        &o.engine,
        "--read-retries",
        &o.read_retries.to_string(),
        "--log-level",
        "warn",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    args.extend_from_slice(extra);
    let proc = Proc::spawn(
        &format!("{name} (logless up)"),
        &o.bin,
        &args,
        &log,
        o.limit_s,
    )?;
    let mut procs = vec![proc];
    wait_ready(&mut procs, Duration::from_secs(60), "logless up", || {
        std::fs::read_to_string(&log).is_ok_and(|s| s.contains("stop with Ctrl-C"))
    })?;
    Ok(Running {
        name: name.to_string(),
        protocol: "redis",
        endpoints: (0..o.replicas)
            .map(|i| format!("127.0.0.1:{}", port + i))
            .collect(),
        replicas: o.replicas,
        procs,
        died: false,
        data,
    })
}

/// Starts `o.replicas` separate `logless server` processes with the layout of `logless up`, so
/// that single replicas can be killed ([`Running::crash`] with the replica's index): `logless up`
/// stops the whole cluster when one replica exits.
pub fn start_logless_servers(name: &str, o: &LoglessOpts) -> Result<Running, String> {
    let data = data_dir(name)?;
    let port = free_ports(&server::PORT_OFFSETS, o.replicas)?;
    let specs = server::loopback_cluster(o.replicas, port, data.path(), &o.durability);
    let mut procs = Vec::new();
    for spec in specs.iter().cloned() {
        let spec = spec
            .flag("--engine", &o.engine)
            .flag("--read-retries", o.read_retries)
            .flag("--log-level", "warn");
        procs.push(Proc::spawn(
            &format!("{name} replica {}", spec.node_id),
            &o.bin,
            &spec.command_line(),
            &spec.log,
            o.limit_s,
        )?);
    }
    let endpoints: Vec<String> = specs.iter().map(|s| s.client.to_string()).collect();
    let clients: Vec<SocketAddr> = specs.iter().map(|s| s.client).collect();
    wait_ready(
        &mut procs,
        Duration::from_secs(60),
        "logless servers",
        || probe::cluster_serves(&clients, "logless:ready", PROBE_TIMEOUT),
    )?;
    Ok(Running {
        name: name.to_string(),
        protocol: "redis",
        endpoints,
        replicas: o.replicas,
        procs,
        died: false,
        data,
    })
}

/// Starts one redis-server on a free port: without persistence, or with an fsync'd AOF.
pub fn start_redis(
    name: &str,
    bin: &Path,
    aof_always: bool,
    limit_s: u64,
) -> Result<Running, String> {
    let data = data_dir(name)?;
    let port = free_ports(&[0], 1)?;
    let mut args: Vec<String> = vec![
        "--port".into(),
        port.to_string(),
        "--bind".into(),
        "127.0.0.1".into(),
        "--dir".into(),
        data.path().to_string_lossy().into_owned(),
        "--save".into(),
        "".into(),
        "--daemonize".into(),
        "no".into(),
        "--loglevel".into(),
        "warning".into(),
    ];
    if aof_always {
        args.extend(["--appendonly", "yes", "--appendfsync", "always"].map(String::from));
    } else {
        args.extend(["--appendonly", "no"].map(String::from));
    }
    let log = data.path().join("redis.log");
    let mut procs = vec![Proc::spawn(name, bin, &args, &log, limit_s)?];
    let endpoint = format!("127.0.0.1:{port}");
    let addr = socket_addr(&endpoint)?;
    wait_ready(&mut procs, Duration::from_secs(20), "redis-server", || {
        probe::resp_ask(addr, &["PING"], PROBE_TIMEOUT).is_ok_and(|r| r == "+PONG")
    })?;
    Ok(Running {
        name: name.to_string(),
        protocol: "redis",
        endpoints: vec![endpoint],
        replicas: 1,
        procs,
        died: false,
        data,
    })
}

/// Starts an etcd cluster of `members` on free ports and waits until every member is healthy.
pub fn start_etcd(
    name: &str,
    bin: &Path,
    members: u16,
    fsync: bool,
    limit_s: u64,
) -> Result<Running, String> {
    let data = data_dir(name)?;
    let port = free_ports(&[0, 100], members)?;
    let client = |i: u16| format!("127.0.0.1:{}", port + i);
    let peer = |i: u16| format!("http://127.0.0.1:{}", port + 100 + i);
    let cluster: Vec<String> = (0..members)
        .map(|i| format!("m{}={}", i + 1, peer(i)))
        .collect();
    let cluster = cluster.join(",");
    let mut procs = Vec::new();
    for i in 0..members {
        let mut args: Vec<String> = vec![
            "--name".into(),
            format!("m{}", i + 1),
            "--data-dir".into(),
            data.path()
                .join(format!("m{}", i + 1))
                .to_string_lossy()
                .into_owned(),
            "--listen-client-urls".into(),
            format!("http://{}", client(i)),
            "--advertise-client-urls".into(),
            format!("http://{}", client(i)),
            "--listen-peer-urls".into(),
            peer(i),
            "--initial-advertise-peer-urls".into(),
            peer(i),
            "--initial-cluster".into(),
            cluster.clone(),
            "--initial-cluster-state".into(),
            "new".into(),
            "--initial-cluster-token".into(),
            format!("compare-{port}"),
            "--quota-backend-bytes".into(),
            (8u64 << 30).to_string(),
            "--logger".into(),
            "zap".into(),
            "--log-level".into(),
            "warn".into(),
        ];
        if !fsync {
            args.push("--unsafe-no-fsync".into());
        }
        let log = data.path().join(format!("m{}.log", i + 1));
        procs.push(Proc::spawn(
            &format!("{name} member {}", i + 1),
            bin,
            &args,
            &log,
            limit_s,
        )?);
    }
    let endpoints: Vec<String> = (0..members).map(client).collect();
    let addrs = endpoints
        .iter()
        .map(|e| socket_addr(e))
        .collect::<Result<Vec<_>, _>>()?;
    wait_ready(&mut procs, Duration::from_secs(60), "etcd", || {
        addrs.iter().all(|&a| {
            http_get(a, "/health", PROBE_TIMEOUT)
                .is_ok_and(|(_, body)| body.contains("\"health\":\"true\""))
        })
    })?;
    Ok(Running {
        name: name.to_string(),
        protocol: "etcd",
        endpoints,
        replicas: members,
        procs,
        died: false,
        data,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `program args` under `timeout`, logging to `log` in `dir`.
    fn spawn(dir: &Path, log: &str, program: &str, args: &[&str], limit_s: u64) -> Proc {
        let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
        Proc::spawn(program, Path::new(program), &args, &dir.join(log), limit_s).unwrap()
    }

    #[test]
    fn the_cpu_time_of_a_proc_is_its_programs_under_timeout() {
        let dir = tempfile::tempdir().unwrap();
        let mut busy = spawn(dir.path(), "log", "sh", &["-c", "while :; do :; done"], 60);
        // `timeout` itself only waits: the time is its child's, found through the tree.
        let deadline = Instant::now() + Duration::from_secs(20);
        let mut used = 0.0;
        while used < 0.2 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
            used = crate::compare::cpu::tree_seconds(&[busy.pid()]);
        }
        busy.stop(Duration::from_secs(5));
        assert!(used >= 0.2, "{used} s");
    }

    #[test]
    fn a_proc_under_timeout_is_stopped_and_killed() {
        let dir = tempfile::tempdir().unwrap();
        let mut p = spawn(dir.path(), "log", "sleep", &["30"], 60);
        assert!(p.exited().is_none());
        let t = Instant::now();
        p.stop(Duration::from_secs(5));
        assert!(t.elapsed() < Duration::from_secs(5));
        // The time limit ends a process by itself.
        let mut q = spawn(dir.path(), "log2", "sleep", &["30"], 1);
        assert!(q.wait_timeout(Duration::from_secs(10)).is_some());
    }

    #[test]
    fn variants_are_named_uniquely() {
        for v in VARIANTS {
            assert_eq!(variant(v.name), Some(v));
        }
        assert_eq!(variant("nope"), None);
    }
}
