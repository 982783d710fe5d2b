//! A lost disk on real processes: a replica whose data directory was emptied is refused by its
//! peers and stops with an error that names `--rejoin`; with `--rejoin` it serves again,
//! nothing acknowledged is lost, and once it recovered a key it stands in for a dead peer
//! (under the log engine: once it recovered the log, under each of its recovery modes; under
//! the psmr engine: once every group recovered its log).
mod common;

use std::time::{Duration, Instant};

use common::Cluster;

const KEYS: usize = 20;

fn set_all(con: &mut redis::Connection, prefix: &str) {
    for i in 0..KEYS {
        let _: () = redis::cmd("SET")
            .arg(format!("key:{i}"))
            .arg(format!("{prefix}{i}"))
            .query(con)
            .unwrap();
    }
}

/// Reads every key through `con`, retrying each for up to ten seconds (a rejoined replica
/// answers for a key only once it recovered it); panics on a wrong value.
fn check_all(con: &mut redis::Connection, prefix: &str) {
    for i in 0..KEYS {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            match redis::cmd("GET")
                .arg(format!("key:{i}"))
                .query::<Option<String>>(con)
            {
                Ok(value) => {
                    assert_eq!(value, Some(format!("{prefix}{i}")), "key:{i}");
                    break;
                }
                Err(e) => {
                    assert!(Instant::now() < deadline, "key:{i} not served: {e}");
                    std::thread::sleep(Duration::from_millis(100));
                }
            }
        }
    }
}

/// Writes keys `v…` through replica 0, kills replica 2 and empties its directory; without
/// `--rejoin` the peers refuse it and it stops with code 3, saying what to do. Gives the
/// directory and what the refused start printed.
fn lose_the_disk_of_the_third(cluster: &mut Cluster) -> (std::path::PathBuf, String) {
    set_all(&mut cluster.connect(0), "v");
    kill_and_empty_the_third(cluster)
}

/// Kills replica 2 and empties its directory; see [`lose_the_disk_of_the_third`].
fn kill_and_empty_the_third(cluster: &mut Cluster) -> (std::path::PathBuf, String) {
    cluster.kill(2);
    let dir = cluster.replicas[2].spec.dir.clone();
    std::fs::remove_dir_all(&dir).unwrap();
    let finished = run_refused(&cluster.replicas[2].spec);
    assert_eq!(finished.status.code(), Some(3), "exits with code 3");
    let stderr = String::from_utf8_lossy(&finished.stderr).into_owned();
    assert!(stderr.contains("--rejoin"), "{stderr}");
    (dir, stderr)
}

#[test]
fn a_replica_on_an_emptied_directory_is_refused_until_it_rejoins() {
    let mut cluster = Cluster::start(3, "mmap");
    let (dir, stderr) = lose_the_disk_of_the_third(&mut cluster);
    assert!(
        stderr.contains("knows this node from incarnation"),
        "{stderr}"
    );
    // A restart of the refused directory is refused the same way: it did not climb.
    assert_eq!(
        run_refused(&cluster.replicas[2].spec).status.code(),
        Some(3)
    );

    // With --rejoin it serves; what was acknowledged is all there, through every replica.
    cluster.replicas[2].spec = cluster.replicas[2].spec.clone().args(["--rejoin"]);
    cluster.spawn(2);
    cluster.wait_serving(Duration::from_secs(30));
    check_all(&mut cluster.connect(2), "v");
    set_all(&mut cluster.connect(2), "w");
    // Every key was touched through the rejoined replica: it recovered them, and serves them
    // with replica 2 when replica 1 dies.
    check_all(&mut cluster.connect(2), "w");
    let http = cluster.replicas[2].spec.http;
    assert_eq!(common::metric(http, "logless_rejoining"), 1);
    assert_eq!(common::metric(http, "logless_rejoin_peers_unfenced"), 0);
    assert!(common::metric(http, "logless_registers_recovered_total") >= KEYS as u64);
    assert_eq!(
        common::metric(cluster.replicas[0].spec.http, "logless_rejoining"),
        0
    );
    // Replica 3 holds every key before replica 1 dies (it recovered them: its live registers).
    poll_until(Duration::from_secs(10), "replica 3 holds every key", || {
        common::metric(http, "logless_live_registers") >= KEYS as u64
    });
    cluster.kill(0);
    check_all(&mut cluster.connect(1), "w");
    check_all(&mut cluster.connect(2), "w");
    // It stays a rejoining replica across restarts (a key it never recovered is still one it
    // may have forgotten), and it is welcomed again.
    assert!(cluster.stop(2));
    cluster.spawn(2);
    cluster.spawn(0);
    cluster.wait_serving(Duration::from_secs(30));
    check_all(&mut cluster.connect(2), "w");
    let identity = std::fs::read_to_string(dir.join("identity.json")).unwrap();
    assert!(identity.contains("\"rejoining\": true"), "{identity}");
}

/// The log engine under `args` on `durability`: an emptied directory is refused the same way;
/// with `--rejoin` the replica serves nothing until it recovered the log from the others, then
/// serves everything acknowledged and what is written through it. Gives the cluster and the
/// directory.
fn a_log_replica_rejoins(durability: &str, args: &[&str]) -> (Cluster, std::path::PathBuf) {
    let mut cluster = Cluster::start_with(3, durability, args);
    let (dir, _) = lose_the_disk_of_the_third(&mut cluster);

    cluster.replicas[2].spec = cluster.replicas[2].spec.clone().args(["--rejoin"]);
    cluster.spawn(2);
    check_all(&mut connect_when_up(&cluster, 2), "v");
    let http = cluster.replicas[2].spec.http;
    assert_eq!(common::metric(http, "logless_log_rejoining"), 0);
    set_all(&mut cluster.connect(2), "w");
    check_all(&mut cluster.connect(1), "w");
    (cluster, dir)
}

/// After [`a_log_replica_rejoins`] under a mode that keeps its log (`fullss`, `pmem`,
/// `pmem-sm`): the rejoin is marked complete, the replica takes part in a majority without the
/// old leader, and later restarts from its own log as usual.
fn votes_and_restarts_after_its_rejoin(mut cluster: Cluster, dir: &std::path::Path) {
    assert!(dir.join("log").join("rejoined").exists());
    // It votes again: without replica 1 (view 0's leader), replicas 2 and 3 are the majority.
    cluster.kill(0);
    set_all(&mut cluster.connect(2), "x");
    check_all(&mut cluster.connect(1), "x");
    // Its rejoin completed: it restarts from its own log, without needing every peer.
    assert!(cluster.stop(2));
    cluster.spawn(2);
    check_all(&mut connect_when_up(&cluster, 2), "x");
    let log = std::fs::read_to_string(&cluster.replicas[2].spec.log).unwrap();
    assert_eq!(
        log.matches("rejoining after a lost disk: the log votes")
            .count(),
        1,
        "{log}"
    );
}

/// The log engine (`--recovery fullss`): refused, rejoined, nothing acknowledged lost, a
/// majority without the old leader, a later restart as usual.
#[test]
fn a_log_replica_on_an_emptied_directory_is_refused_until_it_rejoins_and_recovers_the_log() {
    let (cluster, dir) = a_log_replica_rejoins("mmap", &["--engine", "multipaxos"]);
    votes_and_restarts_after_its_rejoin(cluster, &dir);
}

/// The same under mPaxos (`--recovery pmem` on `--durability emulp`): the persistent memory of
/// the third replica is lost; the rejoin ends the rebuild of its empty log itself and catches
/// up from the others (docs/lost-disk.md, "Under mPaxos").
#[test]
fn a_replica_that_lost_its_persistent_memory_is_refused_until_it_rejoins() {
    let args = ["--engine", "multipaxos", "--recovery", "pmem"];
    let (cluster, dir) = a_log_replica_rejoins("emulp", &args);
    votes_and_restarts_after_its_rejoin(cluster, &dir);
}

/// Under mPaxosSM (`--recovery pmem-sm`): the rejoin installs a peer's snapshot into the empty
/// registers in place, and completes.
#[test]
fn an_mpaxos_sm_replica_that_lost_its_persistent_memory_rejoins() {
    let args = ["--engine", "multipaxos", "--recovery", "pmem-sm"];
    let (_cluster, dir) = a_log_replica_rejoins("emulp", &args);
    assert!(dir.join("log").join("rejoined").exists());
    assert!(dir.join("registers.slots").exists());
}

/// Under EpochSS (`--recovery epoch`): a lost directory is refused like any other; with
/// `--rejoin` the replica starts in an epoch above every one it used (from the clock, as the
/// incarnation) and recovers from its peers as after any restart. A directory that lost only
/// its epoch file is refused with the advice to rejoin, and rejoins with `--rejoin`.
#[test]
fn an_epoch_replica_that_lost_its_directory_or_its_epoch_rejoins_in_a_new_epoch() {
    let args = ["--engine", "multipaxos", "--recovery", "epoch"];
    let (mut cluster, dir) = a_log_replica_rejoins("mmap", &args);
    let http = cluster.replicas[2].spec.http;
    let epoch = common::metric(http, "logless_log_epoch");
    let incarnation = common::metric(http, "logless_incarnation");
    assert!(epoch >= incarnation && incarnation > 1_000_000, "{epoch}");

    assert!(cluster.stop(2));
    std::fs::remove_file(dir.join("epoch")).unwrap();
    let mut without_rejoin = cluster.replicas[2].spec.clone();
    without_rejoin.extra.retain(|arg| arg != "--rejoin");
    let log = common::refused_start(&without_rejoin);
    assert!(
        log.contains("has no epoch file") && log.contains("start it with --rejoin"),
        "{log}"
    );
    cluster.spawn(2);
    check_all(&mut connect_when_up(&cluster, 2), "w");
    assert!(common::metric(http, "logless_log_epoch") > epoch);
}

/// Sets every key through `con` under the psmr engine's B⁺-tree service, which takes SET only
/// with NX (`flag`: the key absent) or XX (present); an error (a failover under way) is
/// retried for up to ten seconds, which NX and XX answer the same way once the key is set.
fn psmr_set_all(con: &mut redis::Connection, prefix: &str, flag: &str) {
    for i in 0..KEYS {
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut retried = false;
        loop {
            let reply = redis::cmd("SET")
                .arg(format!("key:{i}"))
                .arg(format!("{prefix}{i}"))
                .arg(flag)
                .query::<Option<String>>(con);
            match reply {
                Ok(reply) if reply.is_some() || retried => break,
                Ok(reply) => panic!("SET key:{i} {flag} answered {reply:?}"),
                Err(e) => {
                    assert!(Instant::now() < deadline, "SET key:{i} {flag}: {e}");
                    retried = true;
                    std::thread::sleep(Duration::from_millis(100));
                }
            }
        }
    }
}

/// The psmr engine (P-SMR, two workers: groups `g0`, `g1` and `g_all`, whose first leaders are
/// the three replicas): an emptied directory is refused the same way; with `--rejoin` the
/// replica rejoins every group and serves nothing until every group is back, then holds the
/// others' state (equal digests), marks its rejoin complete, takes part in a majority without
/// replica 1, and later restarts from its own logs.
#[test]
fn a_psmr_replica_on_an_emptied_directory_is_refused_until_it_rejoins_every_group() {
    let args = ["--engine", "psmr", "--threads", "2", "--psmr-mode", "psmr"];
    let mut cluster = Cluster::start_with(3, "mmap", &args);
    psmr_set_all(&mut cluster.connect(0), "v", "NX");
    let before = cluster.digests_agree(Duration::from_secs(10));
    let (dir, stderr) = kill_and_empty_the_third(&mut cluster);
    assert!(
        stderr.contains("knows this node from incarnation"),
        "{stderr}"
    );

    cluster.replicas[2].spec = cluster.replicas[2].spec.clone().args(["--rejoin"]);
    cluster.spawn(2);
    // Serving (a write through it answered) means every group is back.
    cluster.wait_serving(Duration::from_secs(30));
    assert_eq!(cluster.digests_agree(Duration::from_secs(20)), before);
    check_all(&mut cluster.connect(2), "v");
    assert!(dir.join("psmr").join("rejoined").exists());
    let http = cluster.replicas[2].spec.http;
    assert_eq!(common::metric(http, "logless_psmr_rejoining"), 0);
    // It votes in every group: without replica 1 (g0's first leader), 2 and 3 are a majority.
    cluster.kill(0);
    psmr_set_all(&mut cluster.connect(2), "w", "XX");
    check_all(&mut cluster.connect(1), "w");
    // Its rejoin completed: it restarts from its own logs, without needing every peer.
    assert!(cluster.stop(2));
    cluster.spawn(2);
    check_all(&mut connect_when_up(&cluster, 2), "w");
    cluster.digests_agree(Duration::from_secs(20));
    let log = std::fs::read_to_string(&cluster.replicas[2].spec.log).unwrap();
    assert_eq!(
        log.matches("rejoining after a lost disk: every psmr group")
            .count(),
        1,
        "{log}"
    );
}

/// A connection to replica `i` once it listens (at most 30 s after its start).
fn connect_when_up(cluster: &Cluster, i: usize) -> redis::Connection {
    let deadline = Instant::now() + Duration::from_secs(30);
    while std::net::TcpStream::connect(cluster.replicas[i].spec.client).is_err() {
        assert!(Instant::now() < deadline, "replica {i} does not listen");
        std::thread::sleep(Duration::from_millis(100));
    }
    cluster.connect(i)
}

/// Polls `condition` every 20 ms until it holds; panics naming `what` after `within`.
fn poll_until(within: Duration, what: &str, mut condition: impl FnMut() -> bool) {
    let deadline = Instant::now() + within;
    while !condition() {
        assert!(Instant::now() < deadline, "not within {within:?}: {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Runs the replica of `spec` until it exits (at most 30 s), its stderr captured.
fn run_refused(spec: &common::ServerSpec) -> std::process::Output {
    let child = spec
        .command(&common::binary())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    wait_with_timeout(child, Duration::from_secs(30))
}

/// Waits for `child` at most `within`, killing it if it runs longer.
fn wait_with_timeout(mut child: std::process::Child, within: Duration) -> std::process::Output {
    let deadline = Instant::now() + within;
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("still running after {within:?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    child.wait_with_output().unwrap()
}
