//! A replica guarding itself on real sockets: clients must log in when a password is set (under
//! every engine); idle and slowloris clients, a request past the query buffer limit and a
//! client that never reads its replies are disconnected (and counted) while the replica goes on
//! serving others;
//! slow peer hellos beyond the cap are closed and do not keep a real peer out.
mod common;

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use common::{metric, Cluster};
use logless_harness::probe::resp_request;
use redis::Commands;

const PASSWORD: &str = "guard-pass-123";

fn connect(addr: SocketAddr) -> TcpStream {
    let stream = TcpStream::connect_timeout(&addr, Duration::from_secs(2)).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    stream
}

/// Sends `args` and reads the reply's first line (without CRLF).
fn ask(stream: &mut TcpStream, args: &[&str]) -> String {
    stream.write_all(&resp_request(args)).unwrap();
    read_line(stream)
}

/// An inline SET and a pipelined RESP SET of `kept` before AUTH: both refused.
fn pipelined_and_inline_sets_are_refused(stream: &mut TcpStream) {
    stream
        .write_all(b"SET kept stolen\r\n*3\r\n$3\r\nSET\r\n$4\r\nkept\r\n$6\r\nstolen\r\n")
        .unwrap();
    assert_eq!(read_line(stream), "-NOAUTH Authentication required.");
    assert_eq!(read_line(stream), "-NOAUTH Authentication required.");
}

fn read_line(stream: &mut TcpStream) -> String {
    let mut line = Vec::new();
    let mut byte = [0u8; 1];
    while !line.ends_with(b"\r\n") {
        assert_eq!(stream.read(&mut byte).unwrap(), 1, "connection closed");
        line.push(byte[0]);
    }
    String::from_utf8_lossy(&line).trim_end().to_string()
}

/// Waits up to `within` for the server to close `stream`, reading and dropping whatever it
/// still sends; returns how long that took.
fn closed_within(stream: &mut TcpStream, within: Duration) -> Option<Duration> {
    let start = Instant::now();
    stream
        .set_read_timeout(Some(within.min(Duration::from_millis(100))))
        .unwrap();
    let mut buf = vec![0u8; 64 * 1024];
    while start.elapsed() < within {
        match stream.read(&mut buf) {
            Ok(0) => return Some(start.elapsed()),
            Ok(_) => {}
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(_) => return Some(start.elapsed()),
        }
    }
    None
}

/// Waits up to 15 s for a `/metrics` figure to reach `at_least`.
fn wait_metric(http: SocketAddr, name: &str, at_least: u64) -> u64 {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let value = metric(http, name);
        if value >= at_least || Instant::now() > deadline {
            return value;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The replica still answers a write and a read of a fresh client.
fn still_serves(cluster: &Cluster, key: &str) {
    let mut con = cluster.connect(0);
    let _: () = con.set(key, "fine").unwrap();
    let got: String = con.get(key).unwrap();
    assert_eq!(got, "fine");
}

#[test]
fn a_password_is_required_before_any_command() {
    let cluster = Cluster::start_as(1, "memory", &["--requirepass", PASSWORD], Some(PASSWORD));
    let spec = &cluster.replicas[0].spec;
    let _: () = cluster.connect(0).set("kept", "safe").unwrap();

    let mut stream = connect(spec.client);
    assert_eq!(
        ask(&mut stream, &["GET", "kept"]),
        "-NOAUTH Authentication required."
    );
    assert_eq!(ask(&mut stream, &["PING"]), "+PONG");
    // Pipelined before AUTH, and inline: refused, nothing written.
    pipelined_and_inline_sets_are_refused(&mut stream);
    assert_eq!(
        ask(&mut stream, &["MULTI"]),
        "-NOAUTH Authentication required."
    );
    assert_eq!(
        ask(&mut stream, &["AUTH", "wrong"]),
        "-WRONGPASS invalid username-password pair or user is disabled."
    );
    assert_eq!(
        ask(&mut stream, &["HELLO", "3", "AUTH", "default", "wrong"]),
        "-WRONGPASS invalid username-password pair or user is disabled."
    );
    assert_eq!(
        ask(&mut stream, &["GET", "kept"]),
        "-NOAUTH Authentication required."
    );
    assert_eq!(ask(&mut stream, &["AUTH", PASSWORD]), "+OK");
    assert_eq!(ask(&mut stream, &["GET", "kept"]), "$4");
    assert_eq!(read_line(&mut stream), "safe");
    assert_eq!(ask(&mut stream, &["ACL", "WHOAMI"]), "$7");
    assert_eq!(read_line(&mut stream), "default");
    // CLIENT LIST and INFO show who is logged in; CLIENT KILL USER finds them.
    let info = ask(&mut stream, &["CLIENT", "INFO"]);
    assert!(info.starts_with('$'), "{info}");
    let line = read_line(&mut stream);
    assert!(line.contains(" user=default "), "{line}");
    assert_eq!(
        ask(&mut stream, &["CLIENT", "KILL", "USER", "nobody"]),
        ":0"
    );
    assert_eq!(
        wait_metric(spec.http, "logless_client_auth_rejected_total", 2),
        2
    );

    // A client library with the password works; without it, it is refused.
    still_serves(&cluster, "auth:after");
    let anonymous = redis::Client::open(format!("redis://{}/", spec.client)).unwrap();
    let refused = anonymous
        .get_connection_with_timeout(Duration::from_secs(5))
        .and_then(|mut con| con.get::<_, String>("kept"));
    assert!(
        refused
            .as_ref()
            .is_err_and(|e| e.to_string().contains("NOAUTH")),
        "{refused:?}"
    );
}

/// The log engine and the psmr engine answer through command paths of their own
/// (`node/src/log_ops.rs`, `node/src/psmr_ops.rs`, which checks the login itself for its
/// LOGLESS.* commands): a client that has not logged in is refused there too, and nothing it
/// sent runs.
#[test]
fn a_password_is_required_under_the_log_and_psmr_engines_too() {
    let engines: [(&[&str], &[&[&str]]); 2] = [
        (
            &["--engine", "multipaxos"],
            &[
                &["MULTI"],
                &["INCR", "counter"],
                &["MSET", "kept", "x", "y", "z"],
            ],
        ),
        (
            &[
                "--engine",
                "psmr",
                "--threads",
                "2",
                "--psmr-mode",
                "no-rep",
            ],
            &[
                &["LOGLESS.RANGE", "a", "COUNT", "10"],
                &["LOGLESS.DIGEST"],
                &["DEL", "kept"],
            ],
        ),
    ];
    for (engine, refused) in engines {
        let mut args = engine.to_vec();
        args.extend(["--requirepass", PASSWORD]);
        let cluster = Cluster::start_as(1, "mmap", &args, Some(PASSWORD));
        let spec = &cluster.replicas[0].spec;
        // NX: the psmr engine's B+-tree service takes no plain SET.
        let _: () = redis::cmd("SET")
            .arg(&["kept", "safe", "NX"])
            .query(&mut cluster.connect(0))
            .unwrap();

        let mut stream = connect(spec.client);
        assert_eq!(ask(&mut stream, &["PING"]), "+PONG", "{engine:?}");
        for request in [&["GET", "kept"][..], &["SET", "kept", "stolen"]]
            .into_iter()
            .chain(refused.iter().copied())
        {
            assert_eq!(
                ask(&mut stream, request),
                "-NOAUTH Authentication required.",
                "{engine:?}: {request:?}"
            );
        }
        // Pipelined and inline before AUTH: refused.
        pipelined_and_inline_sets_are_refused(&mut stream);
        assert_eq!(
            ask(&mut stream, &["AUTH", "wrong"]),
            "-WRONGPASS invalid username-password pair or user is disabled.",
            "{engine:?}"
        );
        assert_eq!(ask(&mut stream, &["AUTH", PASSWORD]), "+OK", "{engine:?}");
        assert_eq!(ask(&mut stream, &["GET", "kept"]), "$4", "{engine:?}");
        assert_eq!(read_line(&mut stream), "safe", "{engine:?}: nothing ran");
        assert_eq!(
            wait_metric(spec.http, "logless_client_auth_rejected_total", 1),
            1,
            "{engine:?}"
        );
        let got: String = cluster.connect(0).get("kept").unwrap();
        assert_eq!(got, "safe", "{engine:?}");
    }
}

#[test]
fn idle_and_slowloris_clients_are_disconnected_at_the_timeout() {
    let cluster = Cluster::start_with(1, "memory", &["--timeout", "2"]);
    let spec = &cluster.replicas[0].spec;

    let mut idle = connect(spec.client);
    assert_eq!(ask(&mut idle, &["PING"]), "+PONG");
    // A client that dribbles one request a byte at a time keeps its socket busy but never
    // completes a request: cut at the timeout too.
    let mut slow = connect(spec.client);
    let mut active = connect(spec.client);
    let request = resp_request(&["SET", "slow", "loris-value-that-never-ends"]);
    let start = Instant::now();
    let mut cut_after = None;
    for (i, byte) in request[..request.len() - 1].iter().enumerate() {
        let _ = slow.write_all(&[*byte]);
        if closed_within(&mut slow, Duration::from_millis(100)).is_some() {
            cut_after = Some(start.elapsed());
            break;
        }
        // Meanwhile an active client is served and kept.
        if i % 8 == 0 {
            assert_eq!(ask(&mut active, &["PING"]), "+PONG");
        }
    }
    let cut_after = cut_after.expect("the slowloris client was not disconnected");
    assert!(
        cut_after >= Duration::from_secs(2) && cut_after < Duration::from_secs(4),
        "{cut_after:?}"
    );
    assert!(closed_within(&mut idle, Duration::from_secs(5)).is_some());
    assert_eq!(ask(&mut active, &["PING"]), "+PONG");
    assert!(wait_metric(spec.http, "logless_client_idle_disconnects_total", 2) >= 2);
    still_serves(&cluster, "idle:after");
    let mut con = cluster.connect(0);
    let slow_value: Option<String> = con.get("slow").unwrap();
    assert_eq!(slow_value, None, "the dribbled request never ran");
}

#[test]
fn a_request_over_the_query_buffer_limit_is_disconnected() {
    let cluster = Cluster::start_with(
        1,
        "memory",
        &[
            "--value-bytes-max",
            "65536",
            "--client-query-buffer-limit",
            "262144",
        ],
    );
    let spec = &cluster.replicas[0].spec;
    let mut big = connect(spec.client);
    // A bulk the parser accepts (within the wire bound) but longer than the connection may
    // hold pending.
    big.write_all(b"*3\r\n$3\r\nSET\r\n$3\r\nbig\r\n$1000000\r\n")
        .unwrap();
    let chunk = vec![b'x'; 16 * 1024];
    let mut sent = 0;
    while sent < 1_000_000 {
        if big.write_all(&chunk).is_err() {
            break;
        }
        sent += chunk.len();
    }
    assert!(closed_within(&mut big, Duration::from_secs(10)).is_some());
    assert_eq!(
        wait_metric(
            spec.http,
            "logless_client_query_buffer_disconnects_total",
            1
        ),
        1
    );
    still_serves(&cluster, "query:after");
    let value: Option<String> = cluster.connect(0).get("big").unwrap();
    assert_eq!(value, None);
}

#[test]
fn a_client_that_never_reads_is_disconnected_at_the_output_limit() {
    let cluster = Cluster::start_with(
        1,
        "memory",
        &[
            "--value-bytes-max",
            "65536",
            "--client-output-buffer-limit",
            "1048576",
        ],
    );
    let spec = &cluster.replicas[0].spec;
    let value = "v".repeat(60_000);
    let _: () = cluster.connect(0).set("wide", &value).unwrap();
    let mut greedy = connect(spec.client);
    // 1000 replies of 60 KB: far more than the socket buffers and the limit hold.
    let requests: Vec<u8> = (0..1000)
        .flat_map(|_| resp_request(&["GET", "wide"]))
        .collect();
    greedy.write_all(&requests).unwrap();
    assert_eq!(
        wait_metric(
            spec.http,
            "logless_client_output_buffer_disconnects_total",
            1
        ),
        1
    );
    still_serves(&cluster, "output:after");
    // A client that reads the same replies is not cut.
    let mut reader = connect(spec.client);
    reader.write_all(&requests[..requests.len() / 10]).unwrap();
    let mut got = 0usize;
    let mut buf = vec![0u8; 256 * 1024];
    let expected = 100 * (value.len() + "$60000\r\n\r\n".len());
    while got < expected {
        let n = reader.read(&mut buf).unwrap();
        assert!(n > 0, "the reading client was disconnected");
        got += n;
    }
    assert_eq!(
        metric(spec.http, "logless_client_output_buffer_disconnects_total"),
        1
    );
}

#[test]
fn slow_peer_hellos_are_capped_and_timed_out_and_real_peers_get_in() {
    let mut cluster = Cluster::start_with(
        3,
        "memory",
        &[
            "--peer-connections-max",
            "8",
            "--peer-handshake-timeout-ms",
            "1000",
        ],
    );
    let first = cluster.replicas[0].spec.clone();
    // Twenty strangers start a hello and stall: the first few take the free slots (the two
    // real peers hold two), the rest are closed at once.
    let mut strangers: Vec<TcpStream> = (0..20)
        .map(|_| {
            let mut s = connect(first.peer);
            let _ = s.write_all(b"LL");
            s
        })
        .collect();
    assert!(wait_metric(first.http, "logless_peer_connections_over_cap_total", 12) >= 12);
    // The established links are untouched: the cluster serves through the first replica.
    still_serves(&cluster, "peers:during");
    // Every stranger is gone within the handshake timeout (or at once).
    for stranger in &mut strangers {
        assert!(closed_within(stranger, Duration::from_secs(5)).is_some());
    }
    // A real peer that restarts gets back in: the slots were given back.
    cluster.kill(1);
    cluster.spawn(1);
    cluster.wait_serving(Duration::from_secs(30));
    let mut con = cluster.connect(1);
    let _: () = con.set("peers:after", "back").unwrap();
    let got: String = cluster.connect(0).get("peers:after").unwrap();
    assert_eq!(got, "back");
}
