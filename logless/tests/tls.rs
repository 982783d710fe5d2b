//! TLS on real processes and loopback sockets: a TLS client talks RESP to the TLS port and
//! peers over mutual TLS serve a write through one replica and a read through another; a
//! client without a certificate is refused when `tls-auth-clients` is yes (and let in when
//! optional); garbage and plain RESP on the TLS port close only their own connection, and a
//! silent one is closed after the handshake timeout; a peer whose certificate another CA
//! signed is refused, and so is a peer speaking plain TCP; HTTP over TLS answers
//! `logless status` with a client certificate only. A psmr cluster (its own loop and command
//! path over the same transport) serves TLS clients with certificates only, and its groups
//! decide over the peers' mutual TLS.
mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::Cluster;
use logless_harness::server::ServerSpec;
use redis::Commands;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_rustls::client::TlsStream;
use tokio_rustls::rustls::pki_types::ServerName;
use tokio_rustls::rustls::ClientConfig;
use tokio_rustls::TlsConnector;

/// How long any one exchange may take.
const WAIT: Duration = Duration::from_secs(10);
/// The figure of peer connections refused (or broken).
const REJECTED: &str = "logless_peer_connections_rejected_total";
/// The figure of TLS client connections closed in their handshake.
const HANDSHAKE_FAILURES: &str = "logless_client_tls_handshake_failures_total";

/// Throwaway certificates made by `logless certs` in `dir/name`.
fn make_certs(dir: &Path, name: &str) -> PathBuf {
    let out = dir.join(name);
    let status = Command::new(common::binary())
        .arg("certs")
        .arg("--dir")
        .arg(&out)
        .stdout(std::process::Stdio::null())
        .status()
        .unwrap();
    assert!(status.success(), "logless certs failed");
    out
}

/// `spec` with a TLS client port and mutual TLS between peers, with the certificates in
/// `certs`, checking client certificates as `auth_clients` says.
fn with_tls(spec: ServerSpec, tls_port: u16, certs: &Path, auth_clients: &str) -> ServerSpec {
    spec.flag("--tls-port", tls_port)
        .flag("--tls-cert-file", certs.join("server.crt").display())
        .flag("--tls-key-file", certs.join("server.key").display())
        .flag("--tls-ca-cert-file", certs.join("ca.crt").display())
        .flag("--tls-auth-clients", auth_clients)
        .flag("--tls-cluster", true)
}

/// `n` replicas with TLS (see [`with_tls`]); returns them and their TLS client addresses.
/// They have their plain port too, which the cluster's readiness check uses: a write through
/// each replica is applied only once the peers' mutual TLS works.
fn tls_cluster(n: usize, certs: &Path, auth_clients: &str) -> (Cluster, Vec<SocketAddr>) {
    let ports = logless_harness::ports::free_ports(n as u16).expect("free ports");
    let cluster = Cluster::start_each(n, "memory", |i, spec| {
        with_tls(spec, ports[i], certs, auth_clients)
    });
    let addrs = ports
        .iter()
        .map(|&port| SocketAddr::from(([127, 0, 0, 1], port)))
        .collect();
    (cluster, addrs)
}

/// A client configuration trusting `certs`' CA, presenting its client certificate if `cert`.
fn client_config(certs: &Path, cert: bool) -> Arc<ClientConfig> {
    let identity = (certs.join("client.crt"), certs.join("client.key"));
    logless_node::tls::client_config(
        &certs.join("ca.crt"),
        cert.then_some((identity.0.as_path(), identity.1.as_path())),
    )
    .unwrap()
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// A TLS connection to `addr` with `config`.
async fn connect(
    addr: SocketAddr,
    config: Arc<ClientConfig>,
) -> std::io::Result<TlsStream<tokio::net::TcpStream>> {
    let tcp = tokio::net::TcpStream::connect(addr).await?;
    let name = ServerName::from(addr.ip());
    tokio::time::timeout(WAIT, TlsConnector::from(config).connect(name, tcp))
        .await
        .map_err(|_| std::io::Error::other("no TLS handshake in time"))?
}

/// Sends the command `args` and reads one reply: a line, or a bulk string's header and body.
async fn ask(
    stream: &mut TlsStream<tokio::net::TcpStream>,
    args: &[&str],
) -> std::io::Result<String> {
    stream
        .write_all(&logless_harness::probe::resp_request(args))
        .await?;
    let mut reply = Vec::new();
    let complete = |reply: &[u8]| {
        let Some(end) = reply.windows(2).position(|w| w == b"\r\n") else {
            return false;
        };
        match std::str::from_utf8(&reply[..end]).ok() {
            Some(line) if line.starts_with('$') && line != "$-1" => {
                let len: usize = line[1..].parse().unwrap_or(0);
                reply.len() >= end + 2 + len + 2
            }
            _ => true,
        }
    };
    let read = async {
        while !complete(&reply) {
            let mut chunk = [0u8; 4096];
            let n = stream.read(&mut chunk).await?;
            if n == 0 {
                return Err(std::io::Error::from(std::io::ErrorKind::UnexpectedEof));
            }
            reply.extend_from_slice(&chunk[..n]);
        }
        Ok(())
    };
    tokio::time::timeout(WAIT, read)
        .await
        .map_err(|_| std::io::Error::other("no reply in time"))??;
    Ok(String::from_utf8_lossy(&reply).into_owned())
}

/// Over TLS with `config`: `greeting` written through `tls[0]` with `set_flags` after its
/// value (PING first), then read back through `tls[2]`.
async fn greeting_through_the_first_read_through_the_third(
    tls: &[SocketAddr],
    config: &Arc<ClientConfig>,
    set_flags: &[&str],
) {
    let mut first = connect(tls[0], config.clone()).await.unwrap();
    assert_eq!(ask(&mut first, &["PING"]).await.unwrap(), "+PONG\r\n");
    let mut set = vec!["SET", "greeting", "hello over tls"];
    set.extend_from_slice(set_flags);
    assert_eq!(ask(&mut first, &set).await.unwrap(), "+OK\r\n");
    let mut third = connect(tls[2], config.clone()).await.unwrap();
    assert_eq!(
        ask(&mut third, &["GET", "greeting"]).await.unwrap(),
        "$14\r\nhello over tls\r\n"
    );
}

/// A figure of a replica's `/metrics`.
fn metric(cluster: &Cluster, i: usize, name: &str) -> u64 {
    let addr = cluster.replicas[i].spec.http;
    let (_, body) = logless_harness::probe::http_get(addr, "/metrics", WAIT).unwrap();
    body.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or_else(|| panic!("no {name} in\n{body}"))
}

/// Waits until replica `i`'s figure `name` is at least `at_least` and returns it.
fn metric_reaches(cluster: &Cluster, i: usize, name: &str, at_least: u64) -> u64 {
    let deadline = Instant::now() + WAIT;
    loop {
        let value = metric(cluster, i, name);
        if value >= at_least || Instant::now() >= deadline {
            return value;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Whether the server closes `stream` (end of file or a reset) within [`WAIT`], reading and
/// dropping whatever it sends first (a TLS alert, say).
fn closed_by_server(stream: TcpStream) -> bool {
    closed_by_server_within(stream, WAIT)
}

/// [`closed_by_server`] waiting up to `within`.
fn closed_by_server_within(mut stream: TcpStream, within: Duration) -> bool {
    stream.set_read_timeout(Some(within)).unwrap();
    let mut buf = [0u8; 1024];
    loop {
        match stream.read(&mut buf) {
            Ok(0) => return true,
            Ok(_) => continue,
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return true,
            Err(_) => return false,
        }
    }
}

#[test]
fn tls_clients_and_peers_over_mutual_tls_serve_a_write_through_one_replica_and_a_read_through_another(
) {
    let dir = tempfile::tempdir().unwrap();
    let certs = make_certs(dir.path(), "ca");
    let (cluster, tls) = tls_cluster(3, &certs, "yes");
    let config = client_config(&certs, true);
    runtime().block_on(async {
        greeting_through_the_first_read_through_the_third(&tls, &config, &[]).await;
    });
    // The plain port serves the same keys.
    let value: String = cluster.connect(1).get("greeting").unwrap();
    assert_eq!(value, "hello over tls");
    assert_eq!(metric(&cluster, 0, HANDSHAKE_FAILURES), 0);
}

#[test]
fn a_client_without_a_certificate_is_refused_unless_certificates_are_optional() {
    let dir = tempfile::tempdir().unwrap();
    let certs = make_certs(dir.path(), "ca");
    let stranger = make_certs(dir.path(), "other-ca");
    for auth_clients in ["yes", "optional"] {
        let (cluster, tls) = tls_cluster(1, &certs, auth_clients);
        runtime().block_on(async {
            // With TLS 1.3 the client finishes its handshake before the server has checked
            // its certificate: the refusal comes on the first exchange.
            let refused = async {
                let mut stream = connect(tls[0], client_config(&certs, false)).await?;
                ask(&mut stream, &["PING"]).await
            };
            let without_cert = refused.await;
            if auth_clients == "yes" {
                assert!(without_cert.is_err(), "{without_cert:?}");
            } else {
                assert_eq!(without_cert.unwrap(), "+PONG\r\n");
            }
            // A certificate of another CA is refused either way.
            let foreign = async {
                let identity = (stranger.join("client.crt"), stranger.join("client.key"));
                let config = logless_node::tls::client_config(
                    &certs.join("ca.crt"),
                    Some((identity.0.as_path(), identity.1.as_path())),
                )
                .unwrap();
                let mut stream = connect(tls[0], config).await?;
                ask(&mut stream, &["PING"]).await
            };
            assert!(foreign.await.is_err(), "{auth_clients}");
            // A client that does not trust the server's CA refuses the server.
            assert!(connect(tls[0], client_config(&stranger, true))
                .await
                .is_err());
            let mut good = connect(tls[0], client_config(&certs, true)).await.unwrap();
            assert_eq!(ask(&mut good, &["PING"]).await.unwrap(), "+PONG\r\n");
        });
        // The refused certificates, the client that refused the server, and with `yes` the
        // client without a certificate.
        let expected = if auth_clients == "yes" { 3 } else { 2 };
        let failures = metric_reaches(&cluster, 0, HANDSHAKE_FAILURES, expected);
        assert_eq!(failures, expected, "{auth_clients}");
    }
}

#[test]
fn garbage_and_plain_resp_on_the_tls_port_close_only_their_own_connection() {
    let dir = tempfile::tempdir().unwrap();
    let certs = make_certs(dir.path(), "ca");
    let (cluster, tls) = tls_cluster(1, &certs, "yes");
    let config = client_config(&certs, true);
    let rt = runtime();
    let mut open = rt.block_on(async {
        let mut open = connect(tls[0], config.clone()).await.unwrap();
        assert_eq!(
            ask(&mut open, &["SET", "kept", "safe"]).await.unwrap(),
            "+OK\r\n"
        );
        open
    });
    let mut garbage: Vec<u8> = (0..4096u32).map(|i| (i * 7919 % 251) as u8).collect();
    garbage[0] = 0x16; // a TLS handshake record's type, then nonsense
    let attempts: [&[u8]; 3] = [
        &garbage,
        b"*1\r\n$4\r\nPING\r\n",
        b"GET / HTTP/1.1\r\nHost: x\r\n\r\n",
    ];
    for attempt in attempts {
        let mut stream = TcpStream::connect(tls[0]).unwrap();
        stream.write_all(attempt).unwrap();
        assert!(
            closed_by_server(stream),
            "{:?}",
            String::from_utf8_lossy(&attempt[..16.min(attempt.len())])
        );
    }
    // A connection that opens and says nothing is closed only after the handshake timeout;
    // meanwhile the connection made before, and new ones, are served.
    let silent = TcpStream::connect(tls[0]).unwrap();
    let opened = Instant::now();
    rt.block_on(async {
        assert_eq!(
            ask(&mut open, &["GET", "kept"]).await.unwrap(),
            "$4\r\nsafe\r\n"
        );
        let mut fresh = connect(tls[0], config).await.unwrap();
        assert_eq!(
            ask(&mut fresh, &["GET", "kept"]).await.unwrap(),
            "$4\r\nsafe\r\n"
        );
    });
    let value: String = cluster.connect(0).get("kept").unwrap();
    assert_eq!(value, "safe");
    assert_eq!(metric_reaches(&cluster, 0, HANDSHAKE_FAILURES, 3), 3);
    let handshake_timeout = logless_node::tls::HANDSHAKE_TIMEOUT;
    assert!(closed_by_server_within(silent, handshake_timeout + WAIT));
    assert!(opened.elapsed() >= handshake_timeout - Duration::from_millis(100));
    assert_eq!(metric_reaches(&cluster, 0, HANDSHAKE_FAILURES, 4), 4);
}

#[test]
fn a_peer_with_a_certificate_of_another_ca_or_without_tls_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let certs = make_certs(dir.path(), "ca");
    let stranger = make_certs(dir.path(), "other-ca");
    let (mut cluster, _) = tls_cluster(3, &certs, "yes");
    let _: () = cluster.connect(0).set("kept", "safe").unwrap();

    // Replica 3 comes back with the same flags but another CA's certificates.
    cluster.kill(2);
    let (good, other) = (certs.display().to_string(), stranger.display().to_string());
    let spec = &mut cluster.replicas[2].spec;
    for arg in &mut spec.extra {
        *arg = arg.to_string_lossy().replace(&good, &other).into();
    }
    cluster.spawn(2);
    let deadline = Instant::now() + WAIT;
    while TcpStream::connect(cluster.replicas[2].spec.client).is_err() {
        assert!(Instant::now() < deadline, "{}", cluster.log_tail(2));
        std::thread::sleep(Duration::from_millis(50));
    }

    // Its peers refuse it (it keeps dialling them), and it them: a write through it is not
    // applied, while the other two, a quorum, go on serving.
    let rejected = metric(&cluster, 0, REJECTED);
    assert!(
        metric_reaches(&cluster, 0, REJECTED, rejected + 1) > rejected,
        "{}",
        cluster.log_tail(0)
    );
    let mut outsider = cluster.connect(2);
    let refused: redis::RedisResult<()> = outsider.set("kept", "changed");
    assert!(refused.is_err(), "a write through the outsider was applied");
    let _: () = cluster.connect(1).set("other", "written").unwrap();
    let kept: String = cluster.connect(0).get("kept").unwrap();
    assert_eq!(kept, "safe");

    // Plain TCP to a peer port that speaks TLS is closed, whatever it says.
    cluster.kill(2);
    let rejected = metric(&cluster, 0, REJECTED);
    let mut plain = TcpStream::connect(cluster.replicas[0].spec.peer).unwrap();
    plain.write_all(b"LLP2 not a TLS ClientHello").unwrap();
    assert!(closed_by_server(plain));
    assert_eq!(
        metric_reaches(&cluster, 0, REJECTED, rejected + 1),
        rejected + 1
    );
    let kept: String = cluster.connect(1).get("kept").unwrap();
    assert_eq!(kept, "safe");
}

#[test]
fn http_over_tls_answers_clients_with_a_certificate_only() {
    let dir = tempfile::tempdir().unwrap();
    let certs = make_certs(dir.path(), "ca");
    let port = logless_harness::ports::free_ports(1).expect("free port")[0];
    let cluster = Cluster::start_each(1, "memory", |_, spec| {
        with_tls(spec, port, &certs, "yes").flag("--tls-http", true)
    });
    let http = cluster.replicas[0].spec.http;
    let status = |tls_args: &[&Path]| {
        let mut command = Command::new(common::binary());
        command.args(["status", "--http", &http.to_string()]);
        for (flag, path) in ["--tls-ca-cert-file", "--tls-cert-file", "--tls-key-file"]
            .iter()
            .zip(tls_args)
        {
            command.arg(flag).arg(path);
        }
        let out = command.output().unwrap();
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
        )
    };
    let (ok, out) = status(&[
        &certs.join("ca.crt"),
        &certs.join("client.crt"),
        &certs.join("client.key"),
    ]);
    assert!(ok && out.contains("1 of 1 replicas healthy"), "{out}");
    // Plain HTTP, and TLS without a client certificate, get no status.
    let (ok, out) = status(&[]);
    assert!(!ok && out.contains("0 of 1"), "{out}");
    let (ok, out) = status(&[&certs.join("ca.crt")]);
    assert!(!ok && out.contains("unreachable"), "{out}");
    let plain = logless_harness::probe::http_get(http, "/metrics", WAIT);
    assert!(
        plain.map_or(true, |(code, _)| code == 0),
        "plain HTTP was answered"
    );
    let value: String = {
        let _: () = cluster.connect(0).set("still", "serving").unwrap();
        cluster.connect(0).get("still").unwrap()
    };
    assert_eq!(value, "serving");
}

#[test]
fn a_psmr_cluster_serves_tls_clients_with_certificates_only_and_its_peers_speak_mutual_tls() {
    // The psmr engine has its own event loop and command path over the shared transport: its
    // groups decide nothing unless the peers' mutual TLS works (the cluster's readiness check
    // writes through every replica).
    let dir = tempfile::tempdir().unwrap();
    let certs = make_certs(dir.path(), "ca");
    let ports = logless_harness::ports::free_ports(3).expect("free ports");
    let cluster = Cluster::start_each(3, "mmap", |i, spec| {
        with_tls(spec, ports[i], &certs, "yes").args(["--engine", "psmr", "--threads", "2"])
    });
    let tls: Vec<SocketAddr> = ports
        .iter()
        .map(|&port| SocketAddr::from(([127, 0, 0, 1], port)))
        .collect();
    let config = client_config(&certs, true);
    runtime().block_on(async {
        greeting_through_the_first_read_through_the_third(&tls, &config, &["NX"]).await;
        // A client without a certificate is refused (on its first exchange, TLS 1.3).
        let refused = async {
            let mut stream = connect(tls[1], client_config(&certs, false)).await?;
            ask(&mut stream, &["PING"]).await
        };
        let without_cert = refused.await;
        assert!(without_cert.is_err(), "{without_cert:?}");
    });
    // Plain RESP on the TLS port is closed.
    let mut plain = TcpStream::connect(tls[1]).unwrap();
    plain.write_all(b"*1\r\n$4\r\nPING\r\n").unwrap();
    assert!(closed_by_server(plain));
    assert_eq!(metric_reaches(&cluster, 1, HANDSHAKE_FAILURES, 2), 2);
    // The plain port serves the same keys, and the replicas agree.
    let value: String = cluster.connect(1).get("greeting").unwrap();
    assert_eq!(value, "hello over tls");
    cluster.digests_agree(WAIT);
    // The peer port speaks only TLS: plain TCP to it is closed and counted.
    let rejected = metric(&cluster, 0, REJECTED);
    let mut plain = TcpStream::connect(cluster.replicas[0].spec.peer).unwrap();
    plain.write_all(b"LLP2 not a TLS ClientHello").unwrap();
    assert!(closed_by_server(plain));
    assert_eq!(
        metric_reaches(&cluster, 0, REJECTED, rejected + 1),
        rejected + 1
    );
}
