//! Launching `logless server` processes: the one place that knows its flags.
//!
//! `logless up`, the cluster tests, the chaos runner and `bench compare` all start replicas. A
//! [`ServerSpec`] holds what a replica needs (node id, peers, addresses, data directory,
//! durability, shards and any further flags) and turns it into the command line, so a flag
//! renamed in `logless server` is renamed here once.
//!
//! [`loopback_cluster`] gives `logless up`'s layout: replica `i` (from 0) serves Redis on
//! `base + i`, peers on `base + PEER_PORT_OFFSET + i` and HTTP on `base + HTTP_PORT_OFFSET + i`,
//! with its data in `DIR/node-{i+1}` and its log in `DIR/node-{i+1}.log`.
use std::ffi::OsString;
use std::fs::OpenOptions;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Peer ports are this far above the Redis ports in [`loopback_cluster`].
pub const PEER_PORT_OFFSET: u16 = 1000;
/// HTTP ports are this far above the Redis ports in [`loopback_cluster`].
pub const HTTP_PORT_OFFSET: u16 = 2000;
/// The port offsets of [`loopback_cluster`], for [`ports::free_block`](crate::ports::free_block).
pub const PORT_OFFSETS: [u16; 3] = [0, PEER_PORT_OFFSET, HTTP_PORT_OFFSET];

/// One replica as `logless server` is told about it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServerSpec {
    /// Its node id (1..=n).
    pub node_id: u16,
    /// `--peers`: every replica's id and the peer address this one dials for it (its own
    /// included). The chaos runner puts a proxy's addresses here.
    pub peers: Vec<(u16, SocketAddr)>,
    /// Where Redis clients connect.
    pub client: SocketAddr,
    /// Where peers connect.
    pub peer: SocketAddr,
    /// Where /metrics, /health and /status are served.
    pub http: SocketAddr,
    /// Its data directory.
    pub dir: PathBuf,
    /// Its log: stdout and stderr of every start, appended.
    pub log: PathBuf,
    /// `memory`, `mmap`, `sync`, `emulp` or `pmem`.
    pub durability: String,
    /// Shards per replica; `None` leaves the server's default.
    pub shards: Option<u16>,
    /// Further flags, in order, after the ones above.
    pub extra: Vec<OsString>,
}

impl ServerSpec {
    /// Adds the flag `name value` (`name` with its dashes).
    pub fn flag(mut self, name: &str, value: impl ToString) -> ServerSpec {
        self.extra.push(name.into());
        self.extra.push(value.to_string().into());
        self
    }

    /// Adds the flags in `args` as they are.
    pub fn args<S: Into<OsString>>(mut self, args: impl IntoIterator<Item = S>) -> ServerSpec {
        self.extra.extend(args.into_iter().map(Into::into));
        self
    }

    /// The `--peers` value: `ID=HOST:PORT`, comma-separated.
    pub fn peers_flag(&self) -> String {
        let peers: Vec<String> = self
            .peers
            .iter()
            .map(|(id, addr)| format!("{id}={addr}"))
            .collect();
        peers.join(",")
    }

    /// The whole argument list of the `logless` binary, `server` first.
    pub fn command_line(&self) -> Vec<OsString> {
        let mut line: Vec<OsString> = Vec::with_capacity(16 + self.extra.len());
        let mut flag = |name: &str, value: OsString| {
            line.push(name.into());
            line.push(value);
        };
        flag("--node-id", self.node_id.to_string().into());
        flag("--peers", self.peers_flag().into());
        flag("--client-addr", self.client.to_string().into());
        flag("--peer-addr", self.peer.to_string().into());
        flag("--http-addr", self.http.to_string().into());
        flag("--dir", self.dir.clone().into());
        flag("--durability", self.durability.clone().into());
        if let Some(shards) = self.shards {
            flag("--shards", shards.to_string().into());
        }
        line.insert(0, "server".into());
        line.extend(self.extra.iter().cloned());
        line
    }

    /// The command that runs this replica with `bin`, the `logless` binary, with no stdin.
    /// The `LOGLESS_…` variables `logless server` reads its settings from are removed from
    /// its environment, so that the replica runs with what the spec says and nothing else.
    pub fn command(&self, bin: &Path) -> Command {
        let mut command = Command::new(bin);
        for (name, _) in std::env::vars_os() {
            if name.to_string_lossy().starts_with("LOGLESS_") {
                command.env_remove(name);
            }
        }
        command
            .args(self.command_line())
            // Plain text logs: colours make the files hard to grep.
            .env("NO_COLOR", "1")
            .stdin(Stdio::null());
        command
    }

    /// Starts this replica with `bin`, its stdout and stderr appended to [`ServerSpec::log`]
    /// (created if missing), so a restarted replica's log follows its earlier runs.
    pub fn spawn(&self, bin: &Path) -> std::io::Result<Child> {
        let log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)?;
        let err = log.try_clone()?;
        self.command(bin).stdout(log).stderr(err).spawn()
    }
}

/// `replicas` replicas on loopback in `logless up`'s layout from port `base`, with their data
/// and logs under `dir` (see the module docs).
pub fn loopback_cluster(replicas: u16, base: u16, dir: &Path, durability: &str) -> Vec<ServerSpec> {
    let at = |port: u16| SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let peers: Vec<(u16, SocketAddr)> = (0..replicas)
        .map(|i| (i + 1, at(base + PEER_PORT_OFFSET + i)))
        .collect();
    (0..replicas)
        .map(|i| ServerSpec {
            node_id: i + 1,
            peers: peers.clone(),
            client: at(base + i),
            peer: at(base + PEER_PORT_OFFSET + i),
            http: at(base + HTTP_PORT_OFFSET + i),
            dir: dir.join(format!("node-{}", i + 1)),
            log: dir.join(format!("node-{}.log", i + 1)),
            durability: durability.to_string(),
            shards: None,
            extra: Vec::new(),
        })
        .collect()
}

/// The `--peer-client-addrs` value of a cluster of `specs`: `ID=HOST:PORT` of each replica's
/// client address, comma-separated (what cluster mode names to clients).
pub fn client_addrs_flag(specs: &[ServerSpec]) -> String {
    let addrs: Vec<String> = specs
        .iter()
        .map(|spec| format!("{}={}", spec.node_id, spec.client))
        .collect();
    addrs.join(",")
}

/// Sends `signal` (`-TERM`, `-STOP`, …) to process `pid` with kill(1), which spares the
/// callers libc for one call; whether it was delivered.
pub fn signal(pid: u32, signal: &str) -> bool {
    Command::new("kill")
        .args([signal, &pid.to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Stops `children` cleanly: SIGTERM to each (a replica then flushes and closes its store),
/// up to `grace` for all of them together to exit, then SIGKILL to those left. Returns for each
/// whether it exited by itself with success within the grace period.
pub fn stop_all(children: &mut [&mut Child], grace: Duration) -> Vec<bool> {
    for child in children.iter() {
        signal(child.id(), "-TERM");
    }
    let deadline = Instant::now() + grace;
    children
        .iter_mut()
        .map(|child| {
            loop {
                if let Ok(Some(status)) = child.try_wait() {
                    return status.success();
                }
                if Instant::now() >= deadline {
                    break;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = child.kill();
            let _ = child.wait();
            false
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_command_line_of_a_loopback_replica() {
        let specs = loopback_cluster(3, 7379, Path::new("data"), "sync");
        let second = specs[1]
            .clone()
            .flag("--read-retries", 2)
            .args(["--log-level", "warn"]);
        let line: Vec<String> = second
            .command_line()
            .iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        assert_eq!(
            line,
            [
                "server",
                "--node-id",
                "2",
                "--peers",
                "1=127.0.0.1:8379,2=127.0.0.1:8380,3=127.0.0.1:8381",
                "--client-addr",
                "127.0.0.1:7380",
                "--peer-addr",
                "127.0.0.1:8380",
                "--http-addr",
                "127.0.0.1:9380",
                "--dir",
                "data/node-2",
                "--durability",
                "sync",
                "--read-retries",
                "2",
                "--log-level",
                "warn",
            ]
        );
        assert_eq!(second.log, Path::new("data/node-2.log"));
        let sharded = ServerSpec {
            shards: Some(4),
            ..specs[0].clone()
        };
        let line = sharded.command_line();
        let at = line.iter().position(|a| a == "--shards").expect("--shards");
        assert_eq!(line[at + 1], "4");
    }

    #[test]
    fn a_spawned_replica_appends_to_its_log_and_stops_on_sigterm() {
        use std::os::unix::fs::PermissionsExt;
        let dir = std::env::temp_dir().join(format!("logless-harness-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        // A stand-in for the binary that prints the start of its command line and waits.
        let bin = dir.join("fake-logless");
        std::fs::write(&bin, "#!/bin/sh\necho $NO_COLOR $1 $2 $3\nexec sleep 30\n").unwrap();
        std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).unwrap();
        let spec = loopback_cluster(1, 7379, &dir, "mmap").remove(0);
        std::fs::write(&spec.log, "earlier run\n").unwrap();
        let mut child = spec.spawn(&bin).unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        while crate::log_tail(&spec.log, 1) == "earlier run" {
            assert!(Instant::now() < deadline, "the child wrote its line");
            std::thread::sleep(Duration::from_millis(10));
        }
        assert_eq!(
            crate::log_tail(&spec.log, 2),
            "earlier run\n1 server --node-id 1"
        );
        // sleep dies of SIGTERM: it exits, but not with success.
        assert_eq!(stop_all(&mut [&mut child], Duration::from_secs(5)), [false]);
        assert!(child.try_wait().unwrap().is_some());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
