//! A transport to a replicated NetFS: a Redis connection to a replica of the psmr engine
//! started with `--service netfs`, each call one `LOGLESS.FS <request frame>` answered with
//! the reply frame.
//!
//! A call waits at most the transport's timeout for its connection and its reply. A call that
//! fails (no connection, a timeout, a closed connection, an error reply such as "outcome
//! unknown") fails alone, as [`crate::CallError::Transport`]: the connection is dropped and the
//! next call opens a new one. A failed call is not sent again, since it may have been
//! executed: the caller decides (the FUSE front end answers `EIO`).
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::time::Duration;

use crate::client::Transport;
use crate::frame::PLAIN_BYTES_MAX;

/// The longest reply line before its bulk body (`$4194304`, `-ERR …`).
const LINE_BYTES_MAX: usize = 4096;

/// The longest reply frame: the largest plain reply, compressed at worst.
const REPLY_BYTES_MAX: usize = PLAIN_BYTES_MAX + PLAIN_BYTES_MAX / 255 + 64;

/// NetFS's requests over a Redis connection (see the module docs).
pub struct RedisTransport {
    addr: String,
    password: Option<String>,
    timeout: Duration,
    connection: Option<BufReader<TcpStream>>,
}

impl RedisTransport {
    /// A transport to `addr` (`host:port`), logging in with `AUTH password` if one is given;
    /// each call waits at most `timeout`. Nothing is opened until the first call.
    pub fn new(addr: &str, password: Option<String>, timeout: Duration) -> RedisTransport {
        RedisTransport {
            addr: addr.to_owned(),
            password,
            timeout,
            connection: None,
        }
    }

    /// The address calls go to.
    pub fn addr(&self) -> &str {
        &self.addr
    }

    /// Opens a connection and logs in.
    fn connect(&self) -> Result<BufReader<TcpStream>, String> {
        let addrs: Vec<SocketAddr> = (self.addr.to_socket_addrs())
            .map_err(|e| format!("cannot resolve {}: {e}", self.addr))?
            .collect();
        let mut last = format!("{} resolves to no address", self.addr);
        for addr in addrs {
            match TcpStream::connect_timeout(&addr, self.timeout) {
                Ok(stream) => {
                    let set = |r: std::io::Result<()>| r.map_err(|e| e.to_string());
                    set(stream.set_read_timeout(Some(self.timeout)))?;
                    set(stream.set_write_timeout(Some(self.timeout)))?;
                    let _ = stream.set_nodelay(true);
                    let mut connection = BufReader::new(stream);
                    if let Some(password) = &self.password {
                        send(&mut connection, &[b"AUTH", password.as_bytes()])?;
                        let reply = read_reply(&mut connection)?;
                        if reply != Reply::Simple("OK".into()) {
                            return Err(format!("AUTH answered {reply:?}"));
                        }
                    }
                    return Ok(connection);
                }
                Err(e) => last = format!("cannot connect to {addr}: {e}"),
            }
        }
        Err(last)
    }

    fn exchange(&mut self, request: &[u8]) -> Result<Vec<u8>, String> {
        if self.connection.is_none() {
            self.connection = Some(self.connect()?);
        }
        let connection = self.connection.as_mut().expect("just opened");
        send(connection, &[b"LOGLESS.FS", request])?;
        match read_reply(connection)? {
            Reply::Bulk(frame) => Ok(frame),
            Reply::Error(text) => Err(format!("{} answered: {text}", self.addr)),
            other => Err(format!("{} answered {other:?}, not a frame", self.addr)),
        }
    }
}

impl Transport for RedisTransport {
    fn call(&mut self, request: &[u8]) -> Result<Vec<u8>, String> {
        let result = self.exchange(request);
        if result.is_err() {
            // Whatever is still on its way belongs to this call: start afresh.
            self.connection = None;
        }
        result
    }
}

/// A reply of the server, as far as this transport reads them.
#[derive(Debug, PartialEq, Eq)]
enum Reply {
    Simple(String),
    Error(String),
    Bulk(Vec<u8>),
    Other(String),
}

/// Sends one request of `args`.
fn send(connection: &mut BufReader<TcpStream>, args: &[&[u8]]) -> Result<(), String> {
    let mut out = Vec::new();
    logless_redis::resp::write_request(&mut out, args);
    (connection.get_mut().write_all(&out)).map_err(|e| format!("send: {e}"))
}

/// Reads one reply.
fn read_reply(connection: &mut BufReader<TcpStream>) -> Result<Reply, String> {
    let lost = |e: std::io::Error| format!("reply: {e}");
    let mut line = Vec::new();
    (connection.by_ref().take(LINE_BYTES_MAX as u64))
        .read_until(b'\n', &mut line)
        .map_err(lost)?;
    let Some(line) = line.strip_suffix(b"\r\n") else {
        return Err(if line.is_empty() {
            "the server closed the connection".into()
        } else {
            "a reply line without its end".into()
        });
    };
    let text = String::from_utf8_lossy(&line[1.min(line.len())..]).into_owned();
    match line.first() {
        Some(b'+') => Ok(Reply::Simple(text)),
        Some(b'-') => Ok(Reply::Error(text)),
        Some(b'$') => {
            let len: usize = (text.parse().ok())
                .filter(|&len| len <= REPLY_BYTES_MAX)
                .ok_or_else(|| format!("a bulk reply of length {text}"))?;
            let mut body = vec![0; len + 2];
            connection.read_exact(&mut body).map_err(lost)?;
            if !body.ends_with(b"\r\n") {
                return Err("a bulk reply without its end".into());
            }
            body.truncate(len);
            Ok(Reply::Bulk(body))
        }
        _ => Ok(Reply::Other(String::from_utf8_lossy(line).into_owned())),
    }
}

#[cfg(test)]
mod tests {
    use std::net::TcpListener;

    use super::*;
    use crate::{CallError, Client, FsPath};

    #[test]
    fn no_server_is_a_transport_error_not_a_hang() {
        // A port that was free a moment ago: nothing listens there.
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let transport = RedisTransport::new(
            &format!("127.0.0.1:{port}"),
            None,
            Duration::from_millis(200),
        );
        let mut client = Client::new(transport);
        let error = client.lstat(&FsPath::root()).unwrap_err();
        assert!(
            matches!(&error, CallError::Transport(text) if text.contains("cannot connect")),
            "{error}"
        );
    }

    #[test]
    fn a_silent_server_times_out_and_the_next_call_reconnects() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let server = std::thread::spawn(move || {
            // The first connection never hears back; the second gets an error reply.
            let (silent, _) = listener.accept().unwrap();
            let (mut answered, _) = listener.accept().unwrap();
            let mut request = [0u8; 64];
            let _ = answered.read(&mut request).unwrap();
            answered.write_all(b"-ERR outcome unknown\r\n").unwrap();
            drop(silent);
        });
        let mut client = Client::new(RedisTransport::new(&addr, None, Duration::from_millis(200)));
        let started = std::time::Instant::now();
        let error = client.lstat(&FsPath::root()).unwrap_err();
        assert!(matches!(error, CallError::Transport(_)), "{error}");
        assert!(started.elapsed() < Duration::from_secs(5));
        let error = client.lstat(&FsPath::root()).unwrap_err();
        assert!(
            matches!(&error, CallError::Transport(text) if text.contains("outcome unknown")),
            "{error}"
        );
        server.join().unwrap();
    }
}
