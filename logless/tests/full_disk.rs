//! A full disk on a real file system: every replica's data directory is a size-limited tmpfs
//! mounted in its own user and mount namespace (`unshare -rm`; no privileges needed where
//! unprivileged user namespaces are allowed, and the test is skipped, saying so, where they are
//! not). A filler file takes part of the space; deleting it (when the test creates a trigger
//! file) gives space back.
//!
//! Checked, per-key engine: new keys are refused with `MISCONF disk full` once the slot files
//! cannot grow; no replica exits; every acknowledged write reads back; writes to existing keys
//! go on; and once space returns, new keys are written again without a restart.
//!
//! Checked, log engine (`--engine multipaxos`): a replica whose log cannot grow pauses and
//! answers every command `MISCONF disk full … for its log` at once, while the others go on
//! serving reads and writes; a whole cluster out of space refuses everything and loses nothing
//! acknowledged; no replica exits; once space returns every replica goes on by itself and has
//! every acknowledged write.
//!
//! Checked, psmr engine (`--engine psmr`, three groups): a cluster out of space has a majority
//! of its replicas paused, each answering reads and writes `MISCONF disk full … for its log` at
//! once; a replica whose log did not need to grow is not paused and, without a quorum, answers
//! `UNCERTAIN` past its request timeout; no replica exits; once space returns writes go on,
//! every acknowledged insert reads back through every replica and the digests agree.
mod common;

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use common::{Cluster, ServerSpec, Wrap};

/// The tmpfs of each replica.
const TMPFS_BYTES: usize = 1536 * 1024;
/// The filler file that takes part of it until the trigger appears.
const FILLER_BYTES: usize = 640 * 1024;
/// The tmpfs of each log-engine replica: room for one 8 MiB log segment (the smallest the log
/// takes with the default value limit) and some snapshots beside the filler, not for a second
/// segment.
const LOG_TMPFS_BYTES: usize = 24 << 20;
/// The filler file of a log-engine replica's tmpfs.
const LOG_FILLER_BYTES: usize = 12 << 20;
/// The tmpfs of each psmr-engine replica: room for its three groups' first 8 MiB log segments
/// and its cut file's, and some snapshots, beside the filler.
const PSMR_TMPFS_BYTES: usize = 48 << 20;
/// The filler file of a psmr-engine replica's tmpfs.
const PSMR_FILLER_BYTES: usize = 12 << 20;
/// Each value written.
const VALUE_BYTES: usize = 2048;

/// Whether this machine lets an unprivileged process mount a tmpfs in a namespace of its own.
fn namespaces_allowed() -> bool {
    let dir = tempfile::tempdir().unwrap();
    Command::new("unshare")
        .args(["-rm", "sh", "-c", "mount -t tmpfs -o size=64k tmpfs \"$0\""])
        .arg(dir.path())
        .output()
        .is_ok_and(|o| o.status.success())
}

/// Runs a replica inside its own namespaces, its data directory a tmpfs of `tmpfs_bytes` with a
/// filler file of `filler_bytes` that is removed once `trigger` exists. With `only`, only that
/// node runs so; the others run as usual.
fn in_a_small_tmpfs(
    trigger: &Path,
    tmpfs_bytes: usize,
    filler_bytes: usize,
    only: Option<u16>,
) -> Wrap {
    let trigger = trigger.to_path_buf();
    Box::new(move |spec: &ServerSpec, binary: &Path| {
        if only.is_some_and(|node| node != spec.node_id) {
            let mut command = Command::new(binary);
            command
                .args(spec.command_line())
                .env("NO_COLOR", "1")
                .stdin(std::process::Stdio::null());
            return command;
        }
        let script = format!(
            "mkdir -p \"$DIR\" && mount -t tmpfs -o size={tmpfs_bytes} tmpfs \"$DIR\" || exit 1\n\
             fallocate -l {filler_bytes} \"$DIR/filler\" || exit 1\n\
             (while [ ! -e \"$TRIGGER\" ] && kill -0 $$ 2>/dev/null; do sleep 0.1; done\n\
              rm -f \"$DIR/filler\") &\n\
             exec \"$@\""
        );
        let mut command = Command::new("unshare");
        command
            .args(["-rm", "sh", "-c", &script, "replica"])
            .arg(binary)
            .args(spec.command_line())
            .env("DIR", &spec.dir)
            .env("TRIGGER", &trigger)
            .env("NO_COLOR", "1")
            .stdin(std::process::Stdio::null());
        command
    })
}

fn set(con: &mut redis::Connection, key: &str, value: &str) -> redis::RedisResult<()> {
    redis::cmd("SET").arg(key).arg(value).query(con)
}

fn value(i: usize, generation: char) -> String {
    format!("{i}:{}", generation.to_string().repeat(VALUE_BYTES))
}

/// Once space returned: writes the 50 keys numbered after `next` with `write`, a refusal
/// retried every 200 ms until `within` has passed, and returns their numbers.
fn write_fifty_once_space_returns(
    next: usize,
    within: Duration,
    mut write: impl FnMut(usize) -> redis::RedisResult<()>,
) -> Vec<usize> {
    let deadline = Instant::now() + within;
    let mut written = Vec::new();
    while written.len() < 50 {
        let k = next + 1 + written.len();
        match write(k) {
            Ok(()) => written.push(k),
            Err(e) => {
                assert!(
                    Instant::now() < deadline,
                    "no space after the filler went: {e}"
                );
                std::thread::sleep(Duration::from_millis(200));
            }
        }
    }
    written
}

/// Whether the test can run here; says why not when it cannot.
fn runnable() -> bool {
    if namespaces_allowed() {
        return true;
    }
    eprintln!(
        "SKIPPED: this machine does not let an unprivileged process mount a tmpfs in a user \
         and mount namespace (unshare -rm); the full-disk behaviour is covered by the \
         simulation (verify/sim, full_disks_*) and the storage tests"
    );
    false
}

#[test]
fn a_full_disk_refuses_new_keys_keeps_serving_and_resumes_when_space_returns() {
    if !runnable() {
        return;
    }
    let trigger_dir = tempfile::tempdir().unwrap();
    let trigger = trigger_dir.path().join("space-returns");
    let mut cluster = Cluster::start_wrapped(
        3,
        "mmap",
        None,
        |_, spec| spec,
        Some(in_a_small_tmpfs(&trigger, TMPFS_BYTES, FILLER_BYTES, None)),
    );
    let mut con = cluster.connect(0);
    // Fill: new keys until one is refused for space. The replicas grow their slot files ahead
    // of need, so they find the disk full before a write needs the room: the first refusal is
    // the clear one, at once, not a timeout.
    let mut stored = Vec::new();
    let mut next = 0;
    let refusal = loop {
        next += 1;
        match set(&mut con, &format!("key:{next}"), &value(next, 'a')) {
            Ok(()) => stored.push(next),
            Err(e) => break e,
        }
        assert!(next < 10_000, "the disk never filled");
    };
    assert!(stored.len() > 10, "only {} keys fitted", stored.len());
    let text = refusal.to_string();
    assert!(text.contains("disk full"), "{text}");
    assert_eq!(refusal.code(), Some("MISCONF"), "{text}");
    // A new key is refused again, at once, through every replica.
    for i in 0..3 {
        let started = Instant::now();
        let again = set(&mut cluster.connect(i), "another", "v").unwrap_err();
        assert!(again.to_string().contains("disk full"), "{again}");
        assert!(started.elapsed() < Duration::from_secs(2));
    }
    for r in &cluster.replicas {
        assert!(common::metric(r.spec.http, "logless_writes_refused_for_space_total") > 0);
    }
    // No replica stopped; reads and overwrites of existing keys go on.
    for r in &mut cluster.replicas {
        assert!(r.child.as_mut().unwrap().try_wait().unwrap().is_none());
    }
    for &i in &stored {
        let got: String = redis::cmd("GET")
            .arg(format!("key:{i}"))
            .query(&mut cluster.connect(i % 3))
            .unwrap();
        assert_eq!(got, value(i, 'a'), "key:{i}");
    }
    let first = stored[0];
    set(&mut con, &format!("key:{first}"), &value(first, 'b')).unwrap();
    let got: String = redis::cmd("GET")
        .arg(format!("key:{first}"))
        .query(&mut con)
        .unwrap();
    assert_eq!(got, value(first, 'b'));
    // Space returns: new keys are written again, without a restart.
    std::fs::write(&trigger, b"").unwrap();
    write_fifty_once_space_returns(next, Duration::from_secs(20), |i| {
        set(&mut con, &format!("key:{i}"), &value(i, 'c'))
    });
    for &i in &stored {
        let want = if i == first {
            value(i, 'b')
        } else {
            value(i, 'a')
        };
        let got: String = redis::cmd("GET")
            .arg(format!("key:{i}"))
            .query(&mut con)
            .unwrap();
        assert_eq!(got, want, "key:{i}");
    }
}

/// A log-engine cluster whose replicas (all, or only node `only`) run in small tmpfs; commands
/// time out after 2 s.
fn log_cluster(trigger: &Path, only: Option<u16>) -> Cluster {
    Cluster::start_wrapped(
        3,
        "mmap",
        None,
        |_, spec| {
            spec.flag("--engine", "multipaxos")
                .flag("--request-timeout-ms", 2_000)
                .flag("--multipaxos", "segment_bytes=1048576")
        },
        Some(in_a_small_tmpfs(
            trigger,
            LOG_TMPFS_BYTES,
            LOG_FILLER_BYTES,
            only,
        )),
    )
}

/// Asserts that `result` is the log engine's refusal for space.
fn assert_log_full<T: std::fmt::Debug>(result: redis::RedisResult<T>) {
    let error = result.expect_err("refused for space");
    let text = error.to_string();
    assert_eq!(error.code(), Some("MISCONF"), "{text}");
    assert!(
        text.contains("disk full") && text.contains("for its log"),
        "{text}"
    );
}

/// Reads every key of `stored` (index, generation) through replica `i`.
fn assert_all_read_back(cluster: &Cluster, i: usize, stored: &[(usize, char)]) {
    let mut con = cluster.connect(i);
    for &(k, generation) in stored {
        let got: String = redis::cmd("GET")
            .arg(format!("key:{k}"))
            .query(&mut con)
            .unwrap();
        assert_eq!(got, value(k, generation), "key:{k} through replica {i}");
    }
}

/// Writes new keys through `con` until `full()` holds, every acknowledged one into `stored`.
fn write_until(
    con: &mut redis::Connection,
    next: &mut usize,
    stored: &mut Vec<(usize, char)>,
    mut full: impl FnMut(redis::RedisResult<()>) -> bool,
) {
    loop {
        *next += 1;
        let result = set(con, &format!("key:{next}"), &value(*next, 'a'));
        if result.is_ok() {
            stored.push((*next, 'a'));
        }
        if full(result) {
            return;
        }
        assert!(*next < 20_000, "the disk never filled");
    }
}

#[test]
fn a_log_replica_out_of_space_pauses_while_the_others_serve_and_catches_up_after() {
    if !runnable() {
        return;
    }
    let trigger_dir = tempfile::tempdir().unwrap();
    let trigger = trigger_dir.path().join("space-returns");
    // Node 3 (a follower of view 0's leader, node 1) runs out of space; nodes 1 and 2 do not.
    let cluster = log_cluster(&trigger, Some(3));
    let mut con = cluster.connect(0);
    let mut stored = Vec::new();
    let mut next = 0;
    let mut written = 0;
    write_until(&mut con, &mut next, &mut stored, |result| {
        result.unwrap();
        written += 1;
        written % 50 == 0
            && common::metric(cluster.replicas[2].spec.http, "logless_log_space_short") == 1
    });
    assert!(stored.len() > 100, "only {} keys fitted", stored.len());
    // The paused replica refuses reads and writes at once; the others go on with both.
    let mut paused = cluster.connect(2);
    let started = Instant::now();
    assert_log_full(set(&mut paused, "another", "v"));
    assert_log_full(redis::cmd("GET").arg("key:1").query::<String>(&mut paused));
    assert!(started.elapsed() < Duration::from_secs(1));
    for _ in 0..50 {
        next += 1;
        set(
            &mut cluster.connect(1),
            &format!("key:{next}"),
            &value(next, 'a'),
        )
        .unwrap();
        stored.push((next, 'a'));
    }
    assert_all_read_back(&cluster, 1, &stored);
    let r = &cluster.replicas[2];
    assert!(
        common::metric(
            r.spec.http,
            "logless_log_operations_refused_for_space_total"
        ) >= 2
    );
    assert!(common::metric(r.spec.http, "logless_log_space_shortages_total") >= 1);
    // Space returns: the replica goes on by itself and catches up with what it missed.
    std::fs::write(&trigger, b"").unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match redis::cmd("GET")
            .arg(format!("key:{next}"))
            .query::<String>(&mut paused)
        {
            Ok(got) => {
                assert_eq!(got, value(next, 'a'));
                break;
            }
            Err(e) => assert!(Instant::now() < deadline, "never went on: {e}"),
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    assert_eq!(common::metric(r.spec.http, "logless_log_space_short"), 0);
    assert_all_read_back(&cluster, 2, &stored);
    let mut cluster = cluster;
    for r in &mut cluster.replicas {
        assert!(r.child.as_mut().unwrap().try_wait().unwrap().is_none());
    }
}

#[test]
fn a_log_cluster_out_of_space_refuses_everything_loses_nothing_and_resumes() {
    if !runnable() {
        return;
    }
    let trigger_dir = tempfile::tempdir().unwrap();
    let trigger = trigger_dir.path().join("space-returns");
    let mut cluster = log_cluster(&trigger, None);
    let mut con = cluster.connect(0);
    // Fill until a command is refused for space. Those that time out (UNCERTAIN: the leader
    // paused with them in flight) are left out of the checks.
    let mut stored = Vec::new();
    let mut next = 0;
    write_until(&mut con, &mut next, &mut stored, |result| match result {
        Ok(()) => false,
        Err(e) if e.code() == Some("UNCERTAIN") => false,
        Err(e) => {
            assert_log_full::<()>(Err(e));
            true
        }
    });
    assert!(stored.len() > 100, "only {} keys fitted", stored.len());
    // Every replica pauses (those not paused by their own writes wait on a paused leader, or
    // pause at their next view): each refuses reads and writes at once before long.
    for i in 0..3 {
        let mut con = cluster.connect(i);
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let started = Instant::now();
            match redis::cmd("GET").arg("key:1").query::<String>(&mut con) {
                Err(e) if e.code() == Some("MISCONF") => {
                    assert!(started.elapsed() < Duration::from_secs(1));
                    break;
                }
                other => assert!(Instant::now() < deadline, "replica {i}: {other:?}"),
            }
        }
        assert_log_full(set(&mut con, "another", "v"));
    }
    for r in &mut cluster.replicas {
        assert!(r.child.as_mut().unwrap().try_wait().unwrap().is_none());
        assert_eq!(common::metric(r.spec.http, "logless_log_space_short"), 1);
    }
    // Space returns: writes go on without a restart, and nothing acknowledged was lost.
    std::fs::write(&trigger, b"").unwrap();
    let written = write_fifty_once_space_returns(next, Duration::from_secs(30), |k| {
        set(&mut con, &format!("key:{k}"), &value(k, 'c'))
    });
    stored.extend(written.into_iter().map(|k| (k, 'c')));
    for i in 0..3 {
        assert_all_read_back(&cluster, i, &stored);
    }
}

/// A psmr-engine cluster (P-SMR, two workers: groups `g0`, `g1` and `g_all`, each a log of the
/// log engine) whose replicas run in small tmpfs; commands time out after 2 s.
fn psmr_cluster(trigger: &Path) -> Cluster {
    Cluster::start_wrapped(
        3,
        "mmap",
        None,
        |_, spec| {
            spec.args(["--engine", "psmr", "--threads", "2"])
                .flag("--request-timeout-ms", 2_000)
                .flag("--multipaxos", "segment_bytes=1048576")
        },
        Some(in_a_small_tmpfs(
            trigger,
            PSMR_TMPFS_BYTES,
            PSMR_FILLER_BYTES,
            None,
        )),
    )
}

/// Each value written to a psmr-engine cluster: larger, so that the disk fills in fewer
/// rounds.
const PSMR_VALUE_BYTES: usize = 32 << 10;

fn psmr_value(i: usize, generation: char) -> String {
    format!("{i}:{}", generation.to_string().repeat(PSMR_VALUE_BYTES))
}

/// An insert of a new key under the psmr engine's B⁺-tree service (it has no plain SET).
fn insert(con: &mut redis::Connection, key: &str, value: &str) -> redis::RedisResult<()> {
    let inserted: Option<String> = redis::cmd("SET").arg(key).arg(value).arg("NX").query(con)?;
    assert_eq!(inserted.as_deref(), Some("OK"), "{key} was present");
    Ok(())
}

#[test]
fn a_psmr_cluster_out_of_space_refuses_everything_loses_nothing_and_resumes() {
    if !runnable() {
        return;
    }
    let trigger_dir = tempfile::tempdir().unwrap();
    let trigger = trigger_dir.path().join("space-returns");
    let mut cluster = psmr_cluster(&trigger);
    let mut con = cluster.connect(0);
    // Fill until a command is refused for space; those that time out (UNCERTAIN: a group's
    // leader paused with them in flight) are left out of the checks.
    let filled = Instant::now();
    let mut stored = Vec::new();
    let mut next = 0;
    loop {
        next += 1;
        match insert(&mut con, &format!("key:{next}"), &psmr_value(next, 'a')) {
            Ok(()) => stored.push((next, 'a')),
            Err(e) if e.code() == Some("UNCERTAIN") => {}
            Err(e) => {
                assert_log_full::<()>(Err(e));
                break;
            }
        }
        assert!(next < 20_000, "the disk never filled");
    }
    eprintln!("{} keys fitted in {:?}", stored.len(), filled.elapsed());
    assert!(stored.len() > 20, "only {} keys fitted", stored.len());
    // A majority of the replicas pause (their logs needed a new segment): each refuses reads
    // (a group orders them too) and writes at once. Unlike the log engine's, a replica whose
    // log did not need to grow (it was behind) stays up; without a quorum it answers nothing,
    // only "outcome unknown" past the request timeout.
    let deadline = Instant::now() + Duration::from_secs(20);
    let short = |r: &common::Replica| common::metric(r.spec.http, "logless_psmr_space_short") == 1;
    while cluster.replicas.iter().filter(|r| short(r)).count() < 2 {
        assert!(Instant::now() < deadline, "no majority paused for space");
        std::thread::sleep(Duration::from_millis(100));
    }
    for (i, r) in cluster.replicas.iter().enumerate() {
        let mut con = cluster.connect(i);
        let started = Instant::now();
        let got = redis::cmd("GET").arg("key:1").query::<String>(&mut con);
        if short(r) {
            assert_log_full(got);
            assert_log_full(insert(&mut con, "another", "v"));
            assert!(started.elapsed() < Duration::from_secs(1));
            assert!(common::metric(r.spec.http, "logless_psmr_refused_for_space_total") >= 2);
        } else {
            let error = got.expect_err("a read without a quorum");
            assert_eq!(error.code(), Some("UNCERTAIN"), "replica {i}: {error}");
        }
    }
    for r in &mut cluster.replicas {
        assert!(r.child.as_mut().unwrap().try_wait().unwrap().is_none());
    }
    // Space returns: writes go on without a restart, and nothing acknowledged was lost.
    std::fs::write(&trigger, b"").unwrap();
    let written = write_fifty_once_space_returns(next, Duration::from_secs(30), |k| {
        insert(&mut con, &format!("key:{k}"), &psmr_value(k, 'c'))
    });
    stored.extend(written.into_iter().map(|k| (k, 'c')));
    for i in 0..3 {
        let mut con = cluster.connect(i);
        for &(k, generation) in &stored {
            let got: String = redis::cmd("GET")
                .arg(format!("key:{k}"))
                .query(&mut con)
                .unwrap();
            assert_eq!(
                got,
                psmr_value(k, generation),
                "key:{k} through replica {i}"
            );
        }
    }
    for r in &mut cluster.replicas {
        assert!(r.child.as_mut().unwrap().try_wait().unwrap().is_none());
        assert_eq!(common::metric(r.spec.http, "logless_psmr_space_short"), 0);
    }
    cluster.digests_agree(Duration::from_secs(10));
}
