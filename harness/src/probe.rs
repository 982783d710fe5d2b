//! Asking a running server one question on a fresh connection: an HTTP GET, or a Redis command
//! and the first line of its reply. Enough to wait for readiness and read `/status`; a
//! workload wants a real client.
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

/// How long a connection may take to open: on loopback it is at once or never.
const CONNECT_TIMEOUT: Duration = Duration::from_millis(500);

/// GETs `path` from `addr`, waiting up to `timeout` to connect and for each read; returns the
/// status code (0 if the status line has none) and the body.
///
/// The request is HTTP/1.0 with `Connection: close`, so that any server (the replicas, etcd)
/// answers with a plain body that ends where the connection does, never chunked.
pub fn http_get(addr: SocketAddr, path: &str, timeout: Duration) -> std::io::Result<(u16, String)> {
    http_get_on(connect(addr, timeout)?, addr, path)
}

/// [`http_get`] on an open connection to `addr` (a TLS one, say), which bounds its own waits.
pub fn http_get_on(
    stream: impl Read + Write,
    addr: SocketAddr,
    path: &str,
) -> std::io::Result<(u16, String)> {
    http_request_on(stream, addr, "GET", path, "")
}

/// Sends a bodiless `method` request for `path`, with the header lines `headers` (each ending
/// in CRLF), on an open connection to `addr`; returns the status code and the body.
pub fn http_request_on(
    mut stream: impl Read + Write,
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &str,
) -> std::io::Result<(u16, String)> {
    write!(
        stream,
        "{method} {path} HTTP/1.0\r\nHost: {addr}\r\nConnection: close\r\n{headers}\r\n"
    )?;
    let mut response = String::new();
    stream.read_to_string(&mut response)?;
    Ok(parse_http(&response))
}

/// The status code and body of an HTTP response.
fn parse_http(response: &str) -> (u16, String) {
    let code = response
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = response
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    (code, body)
}

/// `args` as a RESP multibulk request.
pub fn resp_request(args: &[&str]) -> Vec<u8> {
    let mut out = Vec::new();
    logless_redis::resp::write_request(&mut out, args);
    out
}

/// Sends the Redis command `args` to `addr` and returns the first line of the reply without
/// its CRLF (`+PONG`, `$5`, `-ERR …`), waiting up to `timeout` for it.
pub fn resp_ask(addr: SocketAddr, args: &[&str], timeout: Duration) -> std::io::Result<String> {
    resp_ask_as(addr, None, args, timeout)
}

/// A connection to `addr` whose reads and writes wait up to `timeout`.
pub fn connect(addr: SocketAddr, timeout: Duration) -> std::io::Result<TcpStream> {
    let stream = TcpStream::connect_timeout(&addr, timeout.min(CONNECT_TIMEOUT))?;
    stream.set_read_timeout(Some(timeout))?;
    stream.set_write_timeout(Some(timeout))?;
    Ok(stream)
}

/// [`resp_ask`] on a connection that first logs in with `AUTH password` if one is given (the
/// reply to the AUTH is skipped if it is `+OK`, else returned).
pub fn resp_ask_as(
    addr: SocketAddr,
    password: Option<&str>,
    args: &[&str],
    timeout: Duration,
) -> std::io::Result<String> {
    resp_ask_on_as(connect(addr, timeout)?, password, args)
}

/// [`resp_ask`] on an open connection (a TLS one, say), which bounds its own waits.
pub fn resp_ask_on(stream: impl Read + Write, args: &[&str]) -> std::io::Result<String> {
    resp_ask_on_as(stream, None, args)
}

/// [`resp_ask_as`] on an open connection.
pub fn resp_ask_on_as(
    mut stream: impl Read + Write,
    password: Option<&str>,
    args: &[&str],
) -> std::io::Result<String> {
    if let Some(password) = password {
        stream.write_all(&resp_request(&["AUTH", password]))?;
        let reply = read_line(&mut stream)?;
        if reply != "+OK" {
            return Ok(reply);
        }
    }
    stream.write_all(&resp_request(args))?;
    read_line(&mut stream)
}

/// One reply line without its CRLF, byte by byte: the line is short, and nothing after it may
/// be taken from the socket.
fn read_line(stream: &mut impl Read) -> std::io::Result<String> {
    let mut reply = Vec::new();
    let mut byte = [0u8; 1];
    while !reply.ends_with(b"\r\n") {
        if stream.read(&mut byte)? == 0 {
            break;
        }
        reply.push(byte[0]);
    }
    Ok(String::from_utf8_lossy(&reply).trim_end().to_string())
}

/// Whether a cluster serves: every replica in `clients` answers PING, and a read of
/// `probe_key` through the first one, which needs a quorum, is answered with a value or nil.
/// Each question waits up to `timeout`.
pub fn cluster_serves(clients: &[SocketAddr], probe_key: &str, timeout: Duration) -> bool {
    cluster_serves_as(clients, None, probe_key, timeout)
}

/// [`cluster_serves`] for a cluster whose clients log in with `password`.
pub fn cluster_serves_as(
    clients: &[SocketAddr],
    password: Option<&str>,
    probe_key: &str,
    timeout: Duration,
) -> bool {
    cluster_serves_by(clients, probe_key, |addr, args| {
        resp_ask_as(addr, password, args, timeout)
    })
}

/// [`cluster_serves`] asking each question with `ask` (a replica's address and the command),
/// which answers as [`resp_ask`] does: over TLS, say.
pub fn cluster_serves_by(
    clients: &[SocketAddr],
    probe_key: &str,
    ask: impl Fn(SocketAddr, &[&str]) -> std::io::Result<String>,
) -> bool {
    let Some(first) = clients.first() else {
        return false;
    };
    clients
        .iter()
        .all(|&addr| ask(addr, &["PING"]).is_ok_and(|r| r == "+PONG"))
        && ask(*first, &["GET", probe_key]).is_ok_and(|r| r.starts_with('$'))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::BufRead;
    use std::net::{Ipv4Addr, TcpListener};

    /// A server on a free loopback port that reads one request head (up to a blank line, or
    /// one RESP line of each request in `lines`) and writes `answer`.
    fn answer_once(
        answer: &'static str,
        lines: usize,
    ) -> (SocketAddr, std::thread::JoinHandle<String>) {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        let addr = listener.local_addr().unwrap();
        let server = std::thread::spawn(move || {
            let (stream, _) = listener.accept().unwrap();
            let mut reader = std::io::BufReader::new(stream.try_clone().unwrap());
            let mut request = String::new();
            for _ in 0..lines {
                reader.read_line(&mut request).unwrap();
            }
            (&stream).write_all(answer.as_bytes()).unwrap();
            request
        });
        (addr, server)
    }

    #[test]
    fn http_get_sends_a_closing_request_and_splits_the_answer() {
        let (addr, server) = answer_once(
            "HTTP/1.1 503 Service Unavailable\r\nA: b\r\n\r\nunhealthy\n",
            4,
        );
        let got = http_get(addr, "/health", Duration::from_secs(5)).unwrap();
        assert_eq!(got, (503, "unhealthy\n".to_string()));
        assert_eq!(
            server.join().unwrap(),
            format!("GET /health HTTP/1.0\r\nHost: {addr}\r\nConnection: close\r\n\r\n")
        );
        assert_eq!(parse_http("garbage"), (0, String::new()));
    }

    #[test]
    fn resp_ask_sends_a_multibulk_request_and_reads_one_line() {
        assert_eq!(
            resp_request(&["GET", "k:1"]),
            b"*2\r\n$3\r\nGET\r\n$3\r\nk:1\r\n"
        );
        let (addr, server) = answer_once("$5\r\nhello\r\n", 5);
        let got = resp_ask(addr, &["GET", "k:1"], Duration::from_secs(5)).unwrap();
        assert_eq!(got, "$5");
        assert_eq!(server.join().unwrap(), "*2\r\n$3\r\nGET\r\n$3\r\nk:1\r\n");
        assert!(!cluster_serves(&[], "k", Duration::from_secs(1)));
    }
}
