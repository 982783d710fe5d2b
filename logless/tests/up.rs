//! `logless up` supervises its replicas: one killed with SIGKILL under load is reported and
//! started again while the others keep answering; Ctrl-C then stops them all.
mod common;

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use redis::Commands;

/// A connection to `port` on loopback with bounded waits.
fn connect(port: u16) -> redis::RedisResult<redis::Connection> {
    let con = redis::Client::open(format!("redis://127.0.0.1:{port}/"))?
        .get_connection_with_timeout(Duration::from_secs(2))?;
    con.set_read_timeout(Some(Duration::from_secs(10)))?;
    con.set_write_timeout(Some(Duration::from_secs(10)))?;
    Ok(con)
}

/// The process id of the replica serving Redis on `port`, from INFO server.
fn replica_pid(port: u16) -> Option<u32> {
    let mut con = connect(port).ok()?;
    let info: String = redis::cmd("INFO").arg("server").query(&mut con).ok()?;
    info.lines()
        .find_map(|l| l.strip_prefix("process_id:"))
        .and_then(|pid| pid.trim().parse().ok())
}

/// Kills `up` (and so its replicas, which it stops on SIGTERM) if the test fails midway.
struct Up(Child);

impl Up {
    /// `logless up` of three replicas from the free ports at `base`, in `dir`, its output to
    /// `output` (piped or discarded).
    fn start(base: u16, dir: &std::path::Path, output: fn() -> Stdio) -> Up {
        Up(Command::new(common::binary())
            .args(["up", "--port", &base.to_string(), "--log-level", "warn"])
            .arg("--dir")
            .arg(dir)
            .stdout(output())
            .stderr(output())
            .spawn()
            .unwrap())
    }
}

impl Drop for Up {
    fn drop(&mut self) {
        if self.0.try_wait().ok().flatten().is_none() {
            logless_harness::server::signal(self.0.id(), "-TERM");
            let deadline = Instant::now() + Duration::from_secs(15);
            while self.0.try_wait().ok().flatten().is_none() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(50));
            }
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

#[test]
fn up_restarts_a_replica_killed_under_load_while_the_others_serve() {
    let base = logless_harness::ports::free_block(&logless_harness::server::PORT_OFFSETS, 3)
        .expect("free ports");
    let dir = tempfile::tempdir().unwrap();
    let mut up = Up::start(base, dir.path(), Stdio::piped);
    // Everything `up` prints, line by line, from both streams.
    let (lines_tx, lines) = mpsc::channel::<String>();
    for stream in [
        Box::new(up.0.stdout.take().unwrap()) as Box<dyn std::io::Read + Send>,
        Box::new(up.0.stderr.take().unwrap()),
    ] {
        let tx = lines_tx.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stream).lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
    }
    let wait_for = |what: &str, within: Duration| -> String {
        let deadline = Instant::now() + within;
        let mut seen = String::new();
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match lines.recv_timeout(left) {
                Ok(line) if line.contains(what) => return line,
                Ok(line) => seen.push_str(&format!("{line}\n")),
                Err(_) => panic!("logless up did not print {what:?}; it printed:\n{seen}"),
            }
        }
    };
    wait_for("stop with Ctrl-C", Duration::from_secs(40));
    // The replicas of one `up` share a cluster secret it made, readable by its owner only.
    let secret = dir.path().join("cluster-secret");
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&secret).unwrap().permissions().mode();
    assert_eq!(mode & 0o077, 0, "{mode:o}");

    // Load: increments through the first two replicas, counted when acknowledged.
    let stop = Arc::new(AtomicBool::new(false));
    let acknowledged = Arc::new(AtomicU64::new(0));
    let load: Vec<_> = [base, base + 1]
        .into_iter()
        .map(|port| {
            let (stop, acknowledged) = (stop.clone(), acknowledged.clone());
            std::thread::spawn(move || {
                let mut con = connect(port).unwrap();
                while !stop.load(Ordering::Relaxed) {
                    if con.incr::<_, _, i64>("load", 1).is_ok() {
                        acknowledged.fetch_add(1, Ordering::Relaxed);
                    } else {
                        con = connect(port).unwrap();
                    }
                }
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(500));
    let third = base + 2;
    let pid = replica_pid(third).expect("replica 3 answers INFO");
    assert!(logless_harness::server::signal(pid, "-KILL"));
    let line = wait_for("replica 3 exited", Duration::from_secs(5));
    assert!(line.contains("the others keep serving"), "{line}");
    // While it is down, the other two go on answering, and the load goes on.
    let before = acknowledged.load(Ordering::Relaxed);
    let mut con = connect(base + 1).unwrap();
    let _: () = con.set("written-while-down", "yes").unwrap();
    wait_for("replica 3 restarted", Duration::from_secs(10));
    assert!(
        acknowledged.load(Ordering::Relaxed) > before,
        "increments were acknowledged while replica 3 was down"
    );
    // It comes back as a new process and serves what was written without it.
    let deadline = Instant::now() + Duration::from_secs(20);
    let back = loop {
        if let Some(new) = replica_pid(third).filter(|&p| p != pid) {
            break new;
        }
        assert!(Instant::now() < deadline, "replica 3 serves again");
        std::thread::sleep(Duration::from_millis(100));
    };
    let mut con = connect(third).unwrap();
    assert_eq!(con.get::<_, String>("written-while-down").unwrap(), "yes");
    stop.store(true, Ordering::Relaxed);
    for thread in load {
        thread.join().unwrap();
    }
    let total: i64 = con.get("load").unwrap();
    assert!(
        total >= i64::try_from(acknowledged.load(Ordering::Relaxed)).unwrap(),
        "every acknowledged increment counted"
    );

    // Ctrl-C stops `up` and every replica, the restarted one too.
    logless_harness::server::signal(up.0.id(), "-INT");
    let deadline = Instant::now() + Duration::from_secs(20);
    let status = loop {
        if let Some(status) = up.0.try_wait().unwrap() {
            break status;
        }
        assert!(Instant::now() < deadline, "logless up stops on Ctrl-C");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(status.success(), "{status}");
    assert!(
        !std::path::Path::new(&format!("/proc/{back}")).exists(),
        "the restarted replica stopped too"
    );
}

/// The processes whose parent is `pid`, from /proc.
fn children_of(pid: u32) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|child| {
            // The parent is the second field after the command name, which is in parentheses.
            std::fs::read_to_string(format!("/proc/{child}/stat"))
                .ok()
                .and_then(|stat| {
                    let rest = &stat[stat.rfind(')')? + 1..];
                    rest.split_whitespace().nth(1)?.parse::<u32>().ok()
                })
                == Some(pid)
        })
        .collect()
}

/// Whether process `pid` is alive (a zombie counts as gone).
fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|stat| {
            let rest = &stat[stat.rfind(')')? + 1..];
            rest.split_whitespace().next().map(|state| state != "Z")
        })
        .unwrap_or(false)
}

#[test]
fn ctrl_c_during_start_up_stops_every_replica_spawned_so_far() {
    let base = logless_harness::ports::free_block(&logless_harness::server::PORT_OFFSETS, 3)
        .expect("free ports");
    let dir = tempfile::tempdir().unwrap();
    let mut up = Up::start(base, dir.path(), Stdio::null);
    let pid = up.0.id();
    // Ctrl-C as soon as the first replica is a process of its own, long before the cluster
    // serves.
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut replicas = loop {
        let replicas = children_of(pid);
        if !replicas.is_empty() {
            break replicas;
        }
        assert!(Instant::now() < deadline, "logless up spawned no replica");
        std::thread::sleep(Duration::from_millis(1));
    };
    assert!(logless_harness::server::signal(pid, "-INT"));
    // The replicas it spawns after the signal count too.
    let deadline = Instant::now() + Duration::from_secs(10);
    let status = loop {
        for child in children_of(pid) {
            if !replicas.contains(&child) {
                replicas.push(child);
            }
        }
        if let Some(status) = up.0.try_wait().unwrap() {
            break status;
        }
        assert!(Instant::now() < deadline, "logless up stops on Ctrl-C");
        std::thread::sleep(Duration::from_millis(5));
    };
    let left: Vec<u32> = replicas.iter().copied().filter(|&r| alive(r)).collect();
    for &replica in &left {
        logless_harness::server::signal(replica, "-KILL");
    }
    assert!(
        left.is_empty(),
        "replicas {left:?} of {replicas:?} still run after logless up exited ({status})"
    );
    // 130 when it stopped before the cluster served; 0 when the replicas served at the
    // probe that came before it saw the signal.
    assert!(matches!(status.code(), Some(130 | 0)), "{status}");
}
