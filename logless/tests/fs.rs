//! `logless fs mount DIR --foreground`: the mount serves files, and SIGTERM unmounts it
//! cleanly and ends the process. (The file system's behaviour against a local directory is
//! tested in `services/netfs-fuse/tests/mount.rs`.) Skipped, with a message saying why, where
//! FUSE cannot be used.
mod common;

use std::fs::{self, OpenOptions};
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

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

#[test]
fn fs_mount_serves_files_and_unmounts_on_sigterm() {
    if let Err(error) = OpenOptions::new().read(true).write(true).open("/dev/fuse") {
        println!("SKIPPED: logless fs mount test: /dev/fuse is not usable: {error}");
        return;
    }
    let temp = tempfile::tempdir().unwrap();
    let dir = temp.path().canonicalize().unwrap();
    let mut child = Command::new(common::binary())
        .args(["fs", "mount", "--foreground"])
        .arg(&dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let stderr = child.stderr.take().unwrap();
    let mut mount = Mount { child, dir };

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
        let mut errors = String::new();
        let _ = std::io::Read::read_to_string(&mut BufReader::new(stderr), &mut errors);
        if errors.contains("Operation not permitted") || errors.contains("Permission denied") {
            println!("SKIPPED: logless fs mount test: mounting is not permitted here: {errors}");
            return;
        }
        panic!("the mount failed: {errors}");
    }
    assert!(mounted(&mount.dir), "{line}");

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
