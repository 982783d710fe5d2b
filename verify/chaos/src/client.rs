//! A tiny Redis client: one TCP connection, one request at a time, RESP2 replies.
//!
//! The runner needs exactly what a history records: the reply of one command, or the fact that
//! none arrived in time. Requests are written as multibulk arrays; replies are parsed as simple
//! strings, errors, integers, bulk strings (nil included) and arrays of those.
use std::net::SocketAddr;
use std::time::Duration;

use logless_redis::resp::write_request;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// One RESP2 reply.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reply {
    /// `+text`.
    Simple(String),
    /// `-text`.
    Error(String),
    /// `:n`.
    Int(i64),
    /// `$n` with its bytes, lossily decoded as UTF-8.
    Bulk(String),
    /// `$-1` or `*-1`.
    Nil,
    /// `*n` and its elements.
    Array(Vec<Reply>),
}

/// A reply that cannot be RESP2.
#[derive(Debug)]
pub struct BadReply(pub String);

fn line(buf: &[u8]) -> Option<(&[u8], usize)> {
    let end = buf.windows(2).position(|w| w == b"\r\n")?;
    Some((&buf[..end], end + 2))
}

fn number(text: &[u8]) -> Result<i64, BadReply> {
    std::str::from_utf8(text)
        .ok()
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| BadReply(format!("not a number: {:?}", String::from_utf8_lossy(text))))
}

/// Parses one reply off the front of `buf`: `Ok(None)` if it is incomplete, else the reply and
/// the number of bytes it took.
pub fn parse_reply(buf: &[u8]) -> Result<Option<(Reply, usize)>, BadReply> {
    let Some((head, used)) = line(buf) else {
        return Ok(None);
    };
    let Some((&kind, rest)) = head.split_first() else {
        return Err(BadReply("empty reply line".into()));
    };
    let text = || String::from_utf8_lossy(rest).into_owned();
    match kind {
        b'+' => Ok(Some((Reply::Simple(text()), used))),
        b'-' => Ok(Some((Reply::Error(text()), used))),
        b':' => Ok(Some((Reply::Int(number(rest)?), used))),
        b'$' => {
            let len = number(rest)?;
            if len < 0 {
                return Ok(Some((Reply::Nil, used)));
            }
            let len = usize::try_from(len).map_err(|_| BadReply("bulk length".into()))?;
            if buf.len() < used + len + 2 {
                return Ok(None);
            }
            if &buf[used + len..used + len + 2] != b"\r\n" {
                return Err(BadReply("bulk string without CRLF".into()));
            }
            let body = String::from_utf8_lossy(&buf[used..used + len]).into_owned();
            Ok(Some((Reply::Bulk(body), used + len + 2)))
        }
        b'*' => {
            let count = number(rest)?;
            if count < 0 {
                return Ok(Some((Reply::Nil, used)));
            }
            let mut at = used;
            let mut items = Vec::new();
            for _ in 0..count {
                match parse_reply(&buf[at..])? {
                    Some((item, n)) => {
                        items.push(item);
                        at += n;
                    }
                    None => return Ok(None),
                }
            }
            Ok(Some((Reply::Array(items), at)))
        }
        other => Err(BadReply(format!("unexpected reply type byte {other:#04x}"))),
    }
}

/// Why a request got no reply.
#[derive(Debug)]
pub enum RequestError {
    /// The connection broke (or could not be written) after the request may have been sent.
    Io(std::io::Error),
    /// The peer closed the connection before replying.
    Closed,
    /// The reply was not RESP2.
    Bad(BadReply),
}

impl std::fmt::Display for RequestError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RequestError::Io(e) => write!(f, "i/o error: {e}"),
            RequestError::Closed => write!(f, "connection closed"),
            RequestError::Bad(BadReply(why)) => write!(f, "bad reply: {why}"),
        }
    }
}

/// One connection to a replica's Redis port.
pub struct Connection {
    addr: SocketAddr,
    stream: TcpStream,
    input: Vec<u8>,
    output: Vec<u8>,
}

impl Connection {
    /// A connection to `addr`, or None after waiting a little (50 ms, less if `stop` changes)
    /// when it cannot be made: for clients that try again until told to stop.
    pub async fn connect_or_pause(
        addr: SocketAddr,
        stop: &mut tokio::sync::watch::Receiver<bool>,
    ) -> Option<Connection> {
        match Connection::connect(addr, Duration::from_millis(500)).await {
            Ok(c) => Some(c),
            Err(_) => {
                tokio::select! {
                    () = tokio::time::sleep(Duration::from_millis(50)) => {}
                    _ = stop.changed() => {}
                }
                None
            }
        }
    }

    /// Connects within `timeout`.
    pub async fn connect(addr: SocketAddr, timeout: Duration) -> std::io::Result<Connection> {
        let stream = tokio::time::timeout(timeout, TcpStream::connect(addr))
            .await
            .map_err(|_| {
                std::io::Error::new(std::io::ErrorKind::TimedOut, "connect timed out")
            })??;
        stream.set_nodelay(true)?;
        Ok(Connection {
            addr,
            stream,
            input: Vec::with_capacity(4096),
            output: Vec::with_capacity(256),
        })
    }

    /// The replica's address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Sends one request and waits for its reply (no timeout: wrap it in one).
    pub async fn request(&mut self, args: &[String]) -> Result<Reply, RequestError> {
        self.output.clear();
        write_request(&mut self.output, args);
        self.send().await?;
        self.reply().await
    }

    /// Sends MULTI, the queued commands and EXEC in one write and returns EXEC's reply (no
    /// timeout: wrap it in one). MULTI must answer OK and each command QUEUED.
    pub async fn transaction(&mut self, queued: &[Vec<String>]) -> Result<Reply, RequestError> {
        self.output.clear();
        write_request(&mut self.output, &["MULTI".to_string()]);
        for args in queued {
            write_request(&mut self.output, args);
        }
        write_request(&mut self.output, &["EXEC".to_string()]);
        self.send().await?;
        let mut unexpected = None;
        for expected in std::iter::once("OK").chain(queued.iter().map(|_| "QUEUED")) {
            match self.reply().await? {
                Reply::Simple(s) if s == expected => {}
                other => {
                    unexpected.get_or_insert(format!("{other:?} where {expected} was due"));
                }
            }
        }
        let exec = self.reply().await?;
        match unexpected {
            None => Ok(exec),
            Some(why) => Err(RequestError::Bad(BadReply(why))),
        }
    }

    async fn send(&mut self) -> Result<(), RequestError> {
        self.stream
            .write_all(&self.output)
            .await
            .map_err(RequestError::Io)
    }

    /// Waits for the next reply.
    async fn reply(&mut self) -> Result<Reply, RequestError> {
        loop {
            if let Some((reply, used)) = parse_reply(&self.input).map_err(RequestError::Bad)? {
                self.input.drain(..used);
                return Ok(reply);
            }
            let mut chunk = [0u8; 4096];
            let n = self
                .stream
                .read(&mut chunk)
                .await
                .map_err(RequestError::Io)?;
            if n == 0 {
                return Err(RequestError::Closed);
            }
            self.input.extend_from_slice(&chunk[..n]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_every_reply_kind_and_waits_for_more() {
        let cases: &[(&[u8], Reply)] = &[
            (b"+OK\r\n", Reply::Simple("OK".into())),
            (
                b"-TRYAGAIN not applied\r\n",
                Reply::Error("TRYAGAIN not applied".into()),
            ),
            (b":-12\r\n", Reply::Int(-12)),
            (b"$3\r\nabc\r\n", Reply::Bulk("abc".into())),
            (b"$0\r\n\r\n", Reply::Bulk(String::new())),
            (b"$-1\r\n", Reply::Nil),
            (b"*-1\r\n", Reply::Nil),
            (
                b"*2\r\n$1\r\na\r\n$2\r\nbc\r\n",
                Reply::Array(vec![Reply::Bulk("a".into()), Reply::Bulk("bc".into())]),
            ),
        ];
        for (bytes, want) in cases {
            let (got, used) = parse_reply(bytes).unwrap().unwrap();
            assert_eq!(&got, want);
            assert_eq!(used, bytes.len());
            for cut in 0..bytes.len() {
                assert!(parse_reply(&bytes[..cut]).unwrap().is_none(), "{cut}");
            }
        }
        assert!(parse_reply(b"?x\r\n").is_err());
        assert!(parse_reply(b"$1\r\nab\r\n").is_err());
    }
}
