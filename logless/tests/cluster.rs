//! The real `logless` binary as a 3-replica cluster on loopback, driven by a Redis client:
//! service across replicas, kill -9 of one replica under load, kill -9 of all of them, clean
//! shutdown, and the commands `logless up` and `logless status`. The kill tests run against
//! both engines (the log engine's with its leader as the one killed).
mod common;

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::increments::info_field;
use common::{metric, Cluster};
use redis::{Commands, RedisError};

/// GETs `path` from a replica's HTTP endpoint: the status code and the body.
fn http_get(addr: std::net::SocketAddr, path: &str) -> (u16, String) {
    logless_harness::probe::http_get(addr, path, Duration::from_secs(5)).expect("http get")
}

#[test]
fn every_replica_serves_every_key() {
    let cluster = Cluster::start(3, "mmap");
    let mut a = cluster.connect(0);
    let mut b = cluster.connect(1);
    let mut c = cluster.connect(2);
    let _: () = a.set("greeting", "hello").unwrap();
    assert_eq!(b.get::<_, String>("greeting").unwrap(), "hello");
    assert_eq!(c.incr::<_, _, i64>("n", 5).unwrap(), 5);
    assert_eq!(a.incr::<_, _, i64>("n", 1).unwrap(), 6);
    assert_eq!(b.get::<_, i64>("n").unwrap(), 6);
    let _: i64 = c.sadd("s", &["x", "y"]).unwrap();
    let mut members: Vec<String> = a.smembers("s").unwrap();
    members.sort();
    assert_eq!(members, ["x", "y"]);
    let err: RedisError = b.incr::<_, _, i64>("s", 1).unwrap_err();
    assert!(err.to_string().contains("WRONGTYPE"), "{err}");
    let err: RedisError = redis::cmd("MSET")
        .arg("a")
        .arg(1)
        .arg("b")
        .arg(2)
        .query::<()>(&mut a)
        .unwrap_err();
    assert!(err.to_string().contains("atomic"), "{err}");

    let (code, body) = http_get(cluster.replicas[0].spec.http, "/metrics");
    assert_eq!(code, 200);
    assert!(
        body.contains("logless_commands_total{command=\"incrby\",outcome=\"ok\"}"),
        "{body}"
    );
    assert!(body.contains("logless_command_latency_seconds_bucket"));
    let (code, body) = http_get(cluster.replicas[1].spec.http, "/health");
    assert_eq!((code, body.as_str()), (200, "ok\n"));

    let status = Command::new(common::binary())
        .arg("status")
        .arg("--http")
        .arg(
            cluster
                .replicas
                .iter()
                .map(|r| r.spec.http.to_string())
                .collect::<Vec<_>>()
                .join(","),
        )
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&status.stdout);
    assert!(status.status.success(), "{text}");
    assert!(text.contains("3 of 3 replicas healthy"), "{text}");
}

/// What clients saw of one counter.
#[derive(Default, Debug)]
struct Tally {
    acknowledged: i64,
    unknown: i64,
}

/// CPU time (user + system) a process has used, in clock ticks (`/proc/PID/stat`).
fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("process stat");
    // The fields after the parenthesised command name; utime and stime are the 12th and 13th.
    let after = &stat[stat.rfind(')').expect("command name") + 2..];
    let fields: Vec<&str> = after.split(' ').collect();
    fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap()
}

#[test]
fn idle_replicas_do_not_spin() {
    // Every shard had timers that have all fired since: a shard loop whose sleep was left
    // elapsed once no timer remained woke itself without end, a core per replica.
    idle_replicas_use_next_to_no_cpu("rmw");
}

#[test]
fn idle_log_replicas_do_not_spin() {
    // The log's loop ticks its replica every few milliseconds (heartbeats, suspicion).
    idle_replicas_use_next_to_no_cpu("multipaxos");
}

fn idle_replicas_use_next_to_no_cpu(engine: &str) {
    let cluster = Cluster::start_with(3, "mmap", &["--engine", engine]);
    let mut a = cluster.connect(0);
    for i in 0..20 {
        let _: () = a.set(format!("k{i}"), i).unwrap();
    }
    std::thread::sleep(Duration::from_millis(1500));
    let pids: Vec<u32> = cluster
        .replicas
        .iter()
        .map(|r| r.child.as_ref().expect("running").id())
        .collect();
    let before: Vec<u64> = pids.iter().map(|&p| cpu_ticks(p)).collect();
    std::thread::sleep(Duration::from_secs(2));
    for (i, &pid) in pids.iter().enumerate() {
        let used = cpu_ticks(pid) - before[i];
        // Clock ticks are 1/100 s: an idle replica uses next to nothing in 2 s; a spinning
        // one uses most of them.
        assert!(
            used < 40,
            "replica {i} used {used} ticks of CPU in 2 s while idle"
        );
    }
}

fn is_not_applied(e: &RedisError) -> bool {
    e.code() == Some("TRYAGAIN")
}

#[test]
fn one_replica_killed_and_restarted_under_load_loses_nothing() {
    replica_killed_and_restarted_under_load_loses_nothing("rmw", 1);
}

/// The log engine's leader of view 0 is node 1: killing it makes the others change views.
#[test]
fn the_log_leader_killed_and_restarted_under_load_loses_nothing() {
    replica_killed_and_restarted_under_load_loses_nothing("multipaxos", 0);
}

/// A follower of the log engine (node 2; node 1 leads view 0) killed under load: it catches
/// up from the others once restarted.
#[test]
fn a_log_follower_killed_and_restarted_under_load_loses_nothing() {
    replica_killed_and_restarted_under_load_loses_nothing("multipaxos", 1);
}

/// Increments through every replica while replica `victim` is killed with -9 and restarted:
/// every key ends up within its acknowledged increments plus those of unknown outcome.
fn replica_killed_and_restarted_under_load_loses_nothing(engine: &str, victim: usize) {
    let mut cluster = Cluster::start_with(3, "mmap", &["--engine", engine]);
    let addrs: Vec<String> = cluster
        .replicas
        .iter()
        .map(|r| format!("redis://{}/", r.spec.client))
        .collect();
    let keys = ["hot:0", "hot:1", "hot:2", "hot:3"];
    let tallies: Arc<Mutex<HashMap<&str, Tally>>> = Arc::default();
    let stop = Arc::new(AtomicBool::new(false));
    let acked_during_outage = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let outage = Arc::new(AtomicBool::new(false));
    let mut workers = Vec::new();
    for w in 0..9usize {
        let addrs = addrs.clone();
        let tallies = tallies.clone();
        let stop = stop.clone();
        let outage = outage.clone();
        let acked_during_outage = acked_during_outage.clone();
        workers.push(std::thread::spawn(move || {
            let mut target = w % addrs.len();
            let mut con: Option<redis::Connection> = None;
            let mut i = 0;
            while !stop.load(Ordering::Relaxed) {
                let key = keys[(w + i) % keys.len()];
                i += 1;
                if con.is_none() {
                    con = redis::Client::open(addrs[target].as_str())
                        .and_then(|c| c.get_connection_with_timeout(Duration::from_millis(500)))
                        .and_then(|c| {
                            c.set_read_timeout(Some(Duration::from_secs(8)))?;
                            Ok(c)
                        })
                        .ok();
                    if con.is_none() {
                        target = (target + 1) % addrs.len();
                        std::thread::sleep(Duration::from_millis(50));
                        continue;
                    }
                }
                let result: Result<i64, RedisError> = con.as_mut().unwrap().incr(key, 1);
                let mut tallies = tallies.lock().unwrap();
                let tally = tallies.entry(key).or_default();
                match result {
                    Ok(_) => {
                        tally.acknowledged += 1;
                        if outage.load(Ordering::Relaxed) {
                            acked_during_outage.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                    Err(e) if is_not_applied(&e) => {}
                    Err(_) => {
                        // A timeout, a lost connection or UNCERTAIN: it may have applied.
                        tally.unknown += 1;
                        con = None;
                        target = (target + 1) % addrs.len();
                    }
                }
            }
        }));
    }
    std::thread::sleep(Duration::from_secs(2));
    outage.store(true, Ordering::Relaxed);
    cluster.kill(victim);
    std::thread::sleep(Duration::from_secs(3));
    outage.store(false, Ordering::Relaxed);
    cluster.spawn(victim);
    std::thread::sleep(Duration::from_secs(3));
    stop.store(true, Ordering::Relaxed);
    for w in workers {
        w.join().unwrap();
    }
    assert!(
        acked_during_outage.load(Ordering::Relaxed) > 50,
        "the two live replicas kept serving"
    );
    // The restarted replica is brought up to date by the next operation on each key.
    cluster.wait_serving(Duration::from_secs(20));
    let mut restarted = cluster.connect(victim);
    let tallies = tallies.lock().unwrap();
    for key in keys {
        let tally = &tallies[key];
        let value: i64 = restarted.get(key).unwrap();
        assert!(
            value >= tally.acknowledged && value <= tally.acknowledged + tally.unknown,
            "{key}: {value} not within [{}, {}]",
            tally.acknowledged,
            tally.acknowledged + tally.unknown
        );
    }
}

fn writes_survive_killing_every_replica(durability: &str, engine: &str) {
    let mut cluster = Cluster::start_with(3, durability, &["--engine", engine]);
    let mut con = cluster.connect(0);
    for i in 0..300 {
        let _: () = con.set(format!("key:{i}"), format!("value:{i}")).unwrap();
    }
    for _ in 0..200 {
        let _: i64 = con.incr("counter", 1).unwrap();
    }
    let _: i64 = con.sadd("set", &["a", "b", "c"]).unwrap();
    drop(con);
    for i in 0..3 {
        cluster.kill(i);
    }
    for i in 0..3 {
        cluster.spawn(i);
    }
    cluster.wait_serving(Duration::from_secs(30));
    let mut con = cluster.connect(2);
    for i in 0..300 {
        let v: String = con.get(format!("key:{i}")).unwrap();
        assert_eq!(v, format!("value:{i}"));
    }
    assert_eq!(con.get::<_, i64>("counter").unwrap(), 200);
    assert_eq!(con.scard::<_, i64>("set").unwrap(), 3);
}

#[test]
fn acknowledged_writes_survive_killing_every_replica_mmap() {
    writes_survive_killing_every_replica("mmap", "rmw");
}

#[test]
fn acknowledged_writes_survive_killing_every_replica_sync() {
    writes_survive_killing_every_replica("sync", "rmw");
}

#[test]
fn acknowledged_writes_survive_killing_every_replica_multipaxos() {
    writes_survive_killing_every_replica("sync", "multipaxos");
}

#[test]
fn clean_shutdown_and_restart_keep_everything() {
    clean_shutdown_and_restart_keep_everything_under("rmw");
}

#[test]
fn clean_shutdown_and_restart_keep_everything_multipaxos() {
    clean_shutdown_and_restart_keep_everything_under("multipaxos");
}

fn clean_shutdown_and_restart_keep_everything_under(engine: &str) {
    let mut cluster = Cluster::start_with(3, "sync", &["--engine", engine]);
    let mut con = cluster.connect(1);
    let _: () = con.set("k", "v").unwrap();
    drop(con);
    for i in 0..3 {
        assert!(cluster.stop(i), "replica {} stopped cleanly", i + 1);
    }
    for i in 0..3 {
        cluster.spawn(i);
    }
    cluster.wait_serving(Duration::from_secs(30));
    let mut con = cluster.connect(0);
    assert_eq!(con.get::<_, String>("k").unwrap(), "v");
    // The identity file makes each run a new incarnation.
    let (_, body) = http_get(cluster.replicas[0].spec.http, "/status");
    assert!(body.contains("\"incarnation\": 2"), "{body}");
}

/// Sends raw bytes and returns what came back before the server closed (or the timeout).
fn raw_exchange(addr: std::net::SocketAddr, bytes: &[u8]) -> (String, bool) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
    s.write_all(bytes).unwrap();
    let mut reply = Vec::new();
    let mut buf = [0u8; 4096];
    let closed = loop {
        match s.read(&mut buf) {
            Ok(0) => break true,
            Ok(n) => reply.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => break true,
            Err(_) => break false,
        }
    };
    (String::from_utf8_lossy(&reply).into_owned(), closed)
}

#[test]
fn bad_clients_and_bad_peers_lose_only_their_connection() {
    let cluster = Cluster::start(3, "mmap");
    let mut con = cluster.connect(0);
    let _: () = con.set("kept", "safe").unwrap();
    let client = cluster.replicas[0].spec.client;
    for (input, expected) in [
        (
            &b"*abc\r\n"[..],
            "-ERR Protocol error: invalid multibulk length",
        ),
        (b"*1\r\n$-5\r\n", "-ERR Protocol error: invalid bulk length"),
        (
            b"*1\r\n$999999999999\r\n",
            "-ERR Protocol error: invalid bulk length",
        ),
        (b"*1\r\n$3\r\nGETxx", "-ERR Protocol error"),
        (b"*1\r\n:3\r\n", "-ERR Protocol error: expected '$'"),
    ] {
        let (reply, closed) = raw_exchange(client, input);
        assert!(reply.starts_with(expected), "{input:?} gave {reply:?}");
        assert!(closed, "{input:?}: the connection is closed");
    }
    let oversized_inline = vec![b'a'; 70 * 1024];
    let (reply, closed) = raw_exchange(client, &oversized_inline);
    assert!(
        reply.starts_with("-ERR Protocol error: too big inline request"),
        "{reply}"
    );
    assert!(closed);
    // Errors that are not protocol errors keep the connection.
    let mut s = TcpStream::connect(client).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
    s.write_all(b"NOSUCH a\r\nGET\r\nPING\r\n").unwrap();
    let mut reader = BufReader::new(s);
    let mut line = String::new();
    reader.read_line(&mut line).unwrap();
    assert!(line.starts_with("-ERR unknown command 'NOSUCH'"), "{line}");
    line.clear();
    reader.read_line(&mut line).unwrap();
    assert!(
        line.starts_with("-ERR wrong number of arguments for 'get'"),
        "{line}"
    );
    line.clear();
    reader.read_line(&mut line).unwrap();
    assert_eq!(line, "+PONG\r\n");

    // Peers: a wrong magic, an unknown node id and an unknown version are each refused.
    let peer = cluster.replicas[0].spec.peer;
    // Node 2's life as node 1 knows it: a hello claiming another would be refused as lost.
    let (incarnation, life) = common::known_life(&cluster.replicas[0].spec.dir, 2);
    let hello_from = |node: u16| logless_node::hello::Hello {
        from: logless_rmw::ids::NodeId(node),
        shard: 0,
        shards: 1,
        cluster_id: Vec::new(),
        incarnation,
        life,
        nonce: [1; logless_node::hello::NONCE_BYTES],
    };
    let mut old_version = hello_from(2).encode();
    old_version[4] = 99;
    for bad in [
        b"HTTP/1.1 GET".to_vec(),
        b"LLPR\x01\x02\x00\x00\x00\x01\x00".to_vec(),
        hello_from(9).encode(),
        old_version,
    ] {
        let (reply, closed) = raw_exchange(peer, &bad);
        assert!(reply.is_empty() && closed, "peer hello {bad:?} refused");
    }
    // A known peer whose frame fails its checksum is cut off too. This cluster has no secret,
    // so the proof is made with an empty key.
    let sent = hello_from(2);
    let mut s = TcpStream::connect(peer).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
    s.write_all(&sent.encode()).unwrap();
    let mut challenge = [0u8; logless_node::hello::CHALLENGE_BYTES];
    s.read_exact(&mut challenge).unwrap();
    let (nonce, _) = logless_node::hello::decode_challenge(&challenge).unwrap();
    let no_secret = logless_node::hello::ClusterAuth {
        cluster_id: String::new(),
        secret: Vec::new(),
    };
    let answer = logless_node::hello::prove(
        &no_secret,
        logless_node::hello::Side::Dialler,
        &sent,
        logless_rmw::ids::NodeId(1),
        &nonce,
    );
    s.write_all(&answer).unwrap();
    let mut verdict = [0u8; logless_node::hello::VERDICT_BYTES];
    s.read_exact(&mut verdict).unwrap();
    assert_eq!(
        logless_node::hello::Verdict::decode(&verdict),
        Ok(logless_node::hello::Verdict::Welcome)
    );
    let mut frame = Vec::new();
    frame.extend_from_slice(&[20, 0, 0, 0, 3, 2, 0, 1, 0, 0, 0, 0xde, 0xad, 0xbe, 0xef]);
    frame.extend_from_slice(&[1, 2, 3, 4, 5, 6, 7, 8, 9]);
    s.write_all(&frame).unwrap();
    let mut rest = Vec::new();
    let closed = match s.read_to_end(&mut rest) {
        Ok(_) => rest.is_empty(),
        Err(e) => e.kind() == std::io::ErrorKind::ConnectionReset,
    };
    assert!(closed, "a corrupt frame closes the peer connection");

    let mut con = cluster.connect(0);
    assert_eq!(con.get::<_, String>("kept").unwrap(), "safe");
    let _: () = con.set("after", "fine").unwrap();
    assert_eq!(
        cluster.connect(2).get::<_, String>("after").unwrap(),
        "fine"
    );
}

#[test]
fn logless_up_starts_a_cluster_and_stops_it_on_ctrl_c() {
    // A base port whose Redis, peer and HTTP neighbours are all free.
    let base = logless_harness::ports::free_block(&logless_harness::server::PORT_OFFSETS, 3)
        .expect("free ports");
    let dir = tempfile::tempdir().unwrap();
    let mut up = Command::new(common::binary())
        .args(["up", "--port", &base.to_string(), "--log-level", "warn"])
        .args(["--thrifty-reads", "false", "--thrifty-writes", "true"])
        .args(["--proposer-registers-max", "1000"])
        .arg("--dir")
        .arg(dir.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(up.stdout.take().unwrap());
    let started = Instant::now();
    let mut printed = String::new();
    while !printed.contains("stop with Ctrl-C") {
        let mut line = String::new();
        if out.read_line(&mut line).unwrap() == 0 || started.elapsed() > Duration::from_secs(40) {
            let _ = up.kill();
            let mut err = String::new();
            let _ = up.stderr.take().unwrap().read_to_string(&mut err);
            panic!("logless up did not come up:\n{printed}\n{err}");
        }
        printed.push_str(&line);
    }
    assert!(
        printed.contains(&format!("redis-cli -p {base}")),
        "{printed}"
    );
    let mut con = redis::Client::open(format!("redis://127.0.0.1:{}/", base + 2))
        .unwrap()
        .get_connection_with_timeout(Duration::from_secs(5))
        .unwrap();
    let _: () = con.set("via-up", "yes").unwrap();
    // Options reach every replica.
    for port in base..base + 3 {
        let mut replica = redis::Client::open(format!("redis://127.0.0.1:{port}/"))
            .unwrap()
            .get_connection_with_timeout(Duration::from_secs(5))
            .unwrap();
        for (name, value) in [
            ("logless-thrifty-reads", "false"),
            ("logless-thrifty-writes", "true"),
            ("logless-proposer-registers-max", "1000"),
        ] {
            let got: Vec<String> = redis::cmd("CONFIG")
                .arg("GET")
                .arg(name)
                .query(&mut replica)
                .unwrap();
            assert_eq!(got, [name, value], "port {port}");
        }
    }
    let _ = Command::new("kill")
        .args(["-INT", &up.id().to_string()])
        .status();
    let deadline = Instant::now() + Duration::from_secs(20);
    let status = loop {
        if let Some(status) = up.try_wait().unwrap() {
            break status;
        }
        assert!(Instant::now() < deadline, "logless up stops on Ctrl-C");
        std::thread::sleep(Duration::from_millis(50));
    };
    let mut rest = String::new();
    let _ = out.read_to_string(&mut rest);
    assert!(status.success(), "{rest}");
    assert!(rest.contains("stopped"), "{rest}");
    for i in 0..3 {
        assert!(dir
            .path()
            .join(format!("node-{}/shard-0.slots", i + 1))
            .exists());
    }
}

/// A replica restarted with kill -9 wakes its peers' diallers to it with its own hellos
/// instead of waiting out their back-off (up to a second): replies to it travel on their
/// connections. Asserted on the peers' count of wakes, not on time.
#[test]
fn a_restarted_replicas_hellos_wake_its_peers_diallers() {
    let mut cluster = Cluster::start(3, "mmap");
    cluster.wait_serving(Duration::from_secs(20));
    let wakes = |cluster: &Cluster| -> u64 {
        (0..2)
            .map(|i| {
                metric(
                    cluster.replicas[i].spec.http,
                    "logless_peer_dialler_wakes_total",
                )
            })
            .sum()
    };
    let before = wakes(&cluster);
    cluster.kill(2);
    // Writes through replica 1 find its links to replica 3 broken (its kernel resets them):
    // its diallers back off until replica 3 is back.
    let mut first = cluster.connect(0);
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut i = 0;
    while info_field(&mut first, "replication", "logless_links_up")
        == info_field(&mut first, "replication", "logless_links")
    {
        assert!(
            Instant::now() < deadline,
            "replica 1 never saw its link to 3 break"
        );
        let _: () = first.set(format!("k{i}"), i).unwrap();
        i += 1;
        std::thread::sleep(Duration::from_millis(20));
    }
    cluster.spawn(2);
    cluster.wait_serving(Duration::from_secs(20));
    let mut restarted = cluster.connect(2);
    let _: () = restarted.set("after", "restart").unwrap();
    assert_eq!(first.get::<_, String>("after").unwrap(), "restart");
    let woken = wakes(&cluster) - before;
    assert!(woken >= 1, "no dialler of replicas 1 and 2 was woken");
}
