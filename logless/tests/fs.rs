//! `logless fs mount DIR --foreground`: the mount serves files, and SIGTERM unmounts it
//! cleanly and ends the process; without `--foreground` a background process serves it, which
//! an unmount from outside ends, and a mount point that does not exist is refused; with
//! `--connect` it serves the NetFS of a psmr cluster, and answers EIO once that is gone. (The file system's behaviour against a local directory is
//! tested in `services/netfs-fuse/tests/mount.rs`.) Skipped, with a message saying why, where
//! FUSE cannot be used.
mod common;

use std::fs::{self, OpenOptions};
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// Linux's `EIO`.
const EIO: i32 = 5;

/// How long the mount may take to come up, and the process to end after SIGTERM.
const PATIENCE: Duration = Duration::from_secs(20);

/// Whether `dir` is a mount point now.
fn mounted(dir: &Path) -> bool {
    let mountinfo = fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let dir = dir.to_string_lossy();
    mountinfo
        .lines()
        .any(|line| line.split(' ').nth(4) == Some(dir.as_ref()))
}

/// The mount process; stopped and its mount removed if the test fails midway.
struct Mount {
    child: Child,
    dir: std::path::PathBuf,
    /// Its standard error.
    log: std::path::PathBuf,
}

impl Drop for Mount {
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            logless_harness::server::signal(self.child.id(), "-TERM");
            let deadline = Instant::now() + PATIENCE;
            while self.child.try_wait().ok().flatten().is_none() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(50));
            }
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
        if mounted(&self.dir) {
            let _ = Command::new("umount").arg("-l").arg(&self.dir).status();
        }
    }
}

/// Why FUSE cannot be used here, if it cannot.
fn fuse_unusable() -> Option<String> {
    let error = OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/fuse")
        .err()?;
    Some(format!("/dev/fuse is not usable: {error}"))
}

/// Whether the process `pid` has ended (gone, or a zombie nobody reaped yet).
fn ended(pid: u32) -> bool {
    match fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat
            .rsplit_once(") ")
            .is_some_and(|(_, rest)| rest.starts_with('Z')),
        Err(_) => true,
    }
}

/// `logless fs mount --foreground DIR` with `extra` flags on a new temporary directory,
/// once it serves; `None` (the test skipped, with a message saying why) where FUSE cannot be
/// used.
fn mount_foreground(extra: &[&str]) -> Option<(Mount, tempfile::TempDir)> {
    if let Some(why) = fuse_unusable() {
        println!("SKIPPED: logless fs mount test: {why}");
        return None;
    }
    let temp = tempfile::tempdir().unwrap();
    let dir = temp.path().canonicalize().unwrap().join("mnt");
    fs::create_dir(&dir).unwrap();
    // The log goes to a file: the process may log after this test stopped reading.
    let log = temp.path().join("mount.log");
    let mut child = Command::new(common::binary())
        .args(["fs", "mount", "--foreground"])
        .arg(&dir)
        .args(extra)
        .stdout(Stdio::piped())
        .stderr(fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let mut mount = Mount { child, dir, log };

    let (sender, receiver) = mpsc::channel();
    std::thread::spawn(move || {
        let mut line = String::new();
        let _ = BufReader::new(stdout).read_line(&mut line);
        let _ = sender.send(line);
    });
    let line = receiver
        .recv_timeout(PATIENCE)
        .expect("the mount reports in time");
    if !line.starts_with("mounted") {
        let _ = mount.child.wait();
        let errors = fs::read_to_string(&mount.log).unwrap_or_default();
        if errors.contains("Operation not permitted") || errors.contains("Permission denied") {
            println!("SKIPPED: logless fs mount test: mounting is not permitted here: {errors}");
            return None;
        }
        panic!("the mount failed: {errors}");
    }
    assert!(mounted(&mount.dir), "{line}");
    Some((mount, temp))
}

#[test]
fn fs_mount_serves_files_and_unmounts_on_sigterm() {
    let Some((mut mount, _temp)) = mount_foreground(&[]) else {
        return;
    };

    let file = mount.dir.join("greeting");
    fs::write(&file, b"hello").unwrap();
    assert_eq!(fs::read(&file).unwrap(), b"hello");
    fs::rename(&file, mount.dir.join("renamed")).unwrap();
    let names: Vec<_> = fs::read_dir(&mount.dir)
        .unwrap()
        .map(|entry| entry.unwrap().file_name())
        .collect();
    assert_eq!(names, ["renamed"]);

    assert!(logless_harness::server::signal(mount.child.id(), "-TERM"));
    let deadline = Instant::now() + PATIENCE;
    let status = loop {
        if let Some(status) = mount.child.try_wait().unwrap() {
            break status;
        }
        assert!(
            Instant::now() < deadline,
            "the mount process ends after SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(status.success(), "{status}");
    assert!(!mounted(&mount.dir), "SIGTERM unmounted it");
    assert!(fs::read_dir(&mount.dir).unwrap().next().is_none());
}

/// Stops a background mount process and removes its mount if the test fails midway.
struct Background {
    pid: Option<u32>,
    dir: std::path::PathBuf,
}

impl Drop for Background {
    fn drop(&mut self) {
        if let Some(pid) = self.pid.filter(|&pid| !ended(pid)) {
            logless_harness::server::signal(pid, "-KILL");
        }
        if mounted(&self.dir) {
            let _ = Command::new("umount").arg("-l").arg(&self.dir).status();
        }
    }
}

#[test]
fn fs_mount_in_the_background_serves_until_unmounted_from_outside() {
    let missing = Command::new(common::binary())
        .args(["fs", "mount", "/nonexistent/logless-mount-point"])
        .output()
        .unwrap();
    assert!(!missing.status.success());
    let errors = String::from_utf8_lossy(&missing.stderr);
    assert!(errors.contains("mount point"), "{errors}");
    if let Some(why) = fuse_unusable() {
        println!("SKIPPED: logless fs mount test: {why}");
        return;
    }
    let temp = tempfile::tempdir().unwrap();
    let mut background = Background {
        pid: None,
        dir: temp.path().canonicalize().unwrap(),
    };
    // The starting process returns once the mount serves (or failed); bounded by the
    // background process's own mount, which fails rather than waits.
    let started = Command::new(common::binary())
        .args(["fs", "mount"])
        .arg(&background.dir)
        .output()
        .unwrap();
    let printed = String::from_utf8_lossy(&started.stdout);
    let errors = String::from_utf8_lossy(&started.stderr);
    if errors.contains("Operation not permitted") || errors.contains("Permission denied") {
        println!("SKIPPED: logless fs mount test: mounting is not permitted here: {errors}");
        return;
    }
    assert!(started.status.success(), "{errors}");
    let pid: u32 = printed
        .split_once("(process ")
        .and_then(|(_, rest)| rest.split(';').next())
        .and_then(|pid| pid.parse().ok())
        .unwrap_or_else(|| panic!("the process id in {printed:?}"));
    background.pid = Some(pid);
    assert!(mounted(&background.dir));
    fs::write(background.dir.join("f"), b"data").unwrap();
    assert_eq!(fs::read(background.dir.join("f")).unwrap(), b"data");

    let umount = Command::new("umount")
        .arg(&background.dir)
        .status()
        .unwrap();
    assert!(umount.success());
    let deadline = Instant::now() + PATIENCE;
    while !ended(pid) {
        assert!(
            Instant::now() < deadline,
            "the mount process ends after an unmount"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// `--connect`: the mount's calls go to a psmr cluster serving NetFS. What is written through
/// the mount is there through another replica, the replicas agree, and once the replica it
/// talks to is gone a call fails with EIO at once instead of hanging.
#[test]
fn fs_mount_connects_to_a_replicated_netfs() {
    use logless_netfs::remote::RedisTransport;
    use logless_netfs::{Client, FsPath};
    let mut cluster = common::Cluster::start_with(
        3,
        "mmap",
        &["--engine", "psmr", "--threads", "2", "--service", "netfs"],
    );
    let addr = cluster.replicas[0].spec.client.to_string();
    let Some((mount, _temp)) = mount_foreground(&["--connect", &addr]) else {
        return;
    };
    fs::create_dir(mount.dir.join("d")).unwrap();
    let file = mount.dir.join("d/greeting");
    fs::write(&file, b"hello").unwrap();
    assert_eq!(fs::read(&file).unwrap(), b"hello");
    fs::rename(&file, mount.dir.join("d/renamed")).unwrap();
    let names: Vec<_> = fs::read_dir(mount.dir.join("d"))
        .unwrap()
        .map(|entry| entry.unwrap().file_name())
        .collect();
    assert_eq!(names, ["renamed"]);

    let other = cluster.replicas[1].spec.client.to_string();
    let mut client = Client::new(RedisTransport::new(&other, None, PATIENCE));
    let entries = client.readdir(&FsPath::new("/d").unwrap()).unwrap();
    let names: Vec<_> = entries.into_iter().map(|entry| entry.name).collect();
    assert_eq!(names, [b"renamed".to_vec()]);
    let attr = client.lstat(&FsPath::new("/d/renamed").unwrap()).unwrap();
    assert_eq!(attr.size, 5);

    cluster.kill(0);
    let started = Instant::now();
    let error = fs::write(mount.dir.join("d/late"), b"x").unwrap_err();
    let log = fs::read_to_string(&mount.log).unwrap_or_default();
    assert_eq!(error.raw_os_error(), Some(EIO), "{error}; log: {log}");
    assert!(log.contains("NetFS call failed: transport"), "{log}");
    assert!(started.elapsed() < PATIENCE, "EIO, not a hang");
}
