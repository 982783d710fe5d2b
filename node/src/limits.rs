//! What one connection may hold of a replica, and for how long.
//!
//! A client connection is closed, and the closing counted, when
//!
//! * it goes `timeout` seconds without sending a complete request and without taking a reply
//!   (Redis's `timeout`; 0 turns it off). The clock restarts at each complete request and at
//!   each reply written, not at each byte: a client that dribbles one request a byte at a time
//!   (slowloris) is closed when the timeout runs out, however busy it keeps the socket;
//! * the request it is sending grows past `client_query_buffer_limit` bytes before it is
//!   complete (Redis's name);
//! * the replies it has not taken grow past `client_output_buffer_limit` bytes and it takes
//!   none of them for [`OUTPUT_STALL`]: replies are handed to the socket as they are made, and
//!   what the kernel does not take waits in the connection's buffer; past the limit the
//!   connection makes no more replies until the client takes some, so a client that sends
//!   requests and never reads its replies holds at most the limit (and one reply) of the
//!   replica's memory, and then loses the connection. A client that reads, however much it
//!   pipelines, is only slowed down.
//!
//! Inbound peer connections are capped ([`PeerLimits::connections_max`], counted in their
//! hello and after it; more are closed at once) and each must prove its hello within
//! [`PeerLimits::handshake_timeout`], so that strangers that connect and say nothing, or say it
//! slowly, hold neither memory nor tasks for long. The connections of real peers are few (one
//! per remote peer and shard, and one more while a reconnect replaces it).
use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::{Buf, BytesMut};
use logless_redis::resp::{write_value, Protocol, Value};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::time::Instant;

use crate::config::NodeConfig;
use crate::context::ClientCounters;

/// Replies are handed to the socket whenever this many bytes of them wait.
const OUTPUT_FLUSH_BYTES: usize = 64 * 1024;

/// How long a connection with more than its limit of replies waiting may take none of them.
/// Generous, since the kernel wakes a writer only once a good part of the socket's buffer
/// has drained, which takes a while on a slow link.
pub const OUTPUT_STALL: Duration = Duration::from_secs(5);

/// The bounds on each client connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ClientLimits {
    /// How long a connection may be idle (none: forever).
    pub idle: Option<Duration>,
    /// The most bytes of one pending request.
    pub query_bytes_max: usize,
    /// The most reply bytes waiting for the client.
    pub output_bytes_max: usize,
}

impl ClientLimits {
    /// The limits `config` sets.
    pub fn of(config: &NodeConfig) -> ClientLimits {
        ClientLimits {
            idle: (config.timeout > 0).then(|| Duration::from_secs(config.timeout)),
            query_bytes_max: config.client_query_buffer_limit(),
            output_bytes_max: config.client_output_buffer_limit,
        }
    }
}

/// The bounds on inbound peer connections.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PeerLimits {
    /// The most open at once.
    pub connections_max: usize,
    /// How long one may take to prove its hello.
    pub handshake_timeout: Duration,
}

impl PeerLimits {
    /// The limits `config` sets.
    pub fn of(config: &NodeConfig) -> PeerLimits {
        PeerLimits {
            connections_max: config.peer_connections_max(),
            handshake_timeout: Duration::from_millis(config.peer_handshake_timeout_ms),
        }
    }
}

/// Why the node closed a client connection on its own.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cut {
    /// Idle past `timeout`.
    Idle,
    /// A pending request past `client_query_buffer_limit`.
    QueryBuffer,
    /// Replies waiting past `client_output_buffer_limit`.
    OutputBuffer,
}

impl Cut {
    /// Counts the closing in `counters`.
    pub fn count(self, counters: &ClientCounters) {
        let counter = match self {
            Cut::Idle => &counters.idle_disconnects,
            Cut::QueryBuffer => &counters.query_buffer_disconnects,
            Cut::OutputBuffer => &counters.output_buffer_disconnects,
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }
}

/// How a connection's exchange with its client ended early.
#[derive(Debug)]
pub enum Ended {
    /// The node closed it over a limit.
    Cut(Cut),
    /// The socket failed.
    Io(io::Error),
}

impl From<io::Error> for Ended {
    fn from(e: io::Error) -> Ended {
        Ended::Io(e)
    }
}

/// A client connection's idle clock.
#[derive(Debug)]
pub struct IdleClock {
    limit: Option<Duration>,
    since: Instant,
}

impl IdleClock {
    /// A clock that starts now.
    pub fn new(limit: Option<Duration>) -> IdleClock {
        IdleClock {
            limit,
            since: Instant::now(),
        }
    }

    /// The connection did something that counts: a complete request, a reply taken. Without
    /// a limit nothing reads the clock, and this is called for every request: it reads no
    /// clock either.
    pub fn restart(&mut self) {
        if self.limit.is_some() {
            self.since = Instant::now();
        }
    }

    /// Reads what has arrived into `input`, or gives up when the connection has been idle too
    /// long. Returns the bytes read (0: the client closed).
    pub async fn read<S: AsyncRead + Unpin>(
        &self,
        stream: &mut S,
        input: &mut BytesMut,
    ) -> Result<usize, Ended> {
        match self.limit {
            None => Ok(stream.read_buf(input).await?),
            Some(limit) => tokio::time::timeout_at(self.since + limit, stream.read_buf(input))
                .await
                .map_err(|_| Ended::Cut(Cut::Idle))?
                .map_err(Ended::Io),
        }
    }
}

/// Checks the request still pending in `input` (after every complete one was taken).
pub fn check_query(input: &BytesMut, limits: &ClientLimits) -> Result<(), Ended> {
    if input.len() > limits.query_bytes_max {
        return Err(Ended::Cut(Cut::QueryBuffer));
    }
    Ok(())
}

/// A connection's replies on their way to the client, held to the output limit.
#[derive(Debug)]
pub struct Output {
    buffer: BytesMut,
    bytes_max: usize,
    /// Bytes handed to the socket so far.
    written: u64,
    /// Whether bytes were handed to the stream since its last flush.
    unflushed: bool,
}

impl Output {
    /// An empty buffer that may hold `bytes_max` bytes.
    pub fn new(bytes_max: usize) -> Output {
        Output {
            buffer: BytesMut::with_capacity(16 * 1024),
            bytes_max,
            written: 0,
            unflushed: false,
        }
    }

    /// Appends a reply, handing what waits to the socket as far as it takes it without
    /// waiting; past the limit, waits for the client to take some, and cuts the connection
    /// if it takes none for [`OUTPUT_STALL`].
    pub async fn push<S: AsyncWrite + Unpin>(
        &mut self,
        stream: &mut S,
        value: &Value,
        protocol: Protocol,
    ) -> Result<(), Ended> {
        write_value(&mut self.buffer, value, protocol);
        if self.buffer.len() < OUTPUT_FLUSH_BYTES {
            return Ok(());
        }
        while !self.buffer.is_empty() {
            // What the socket takes without waiting: a write polled once (a write that is not
            // ready takes nothing, so giving it up loses nothing).
            match tokio::time::timeout(Duration::ZERO, stream.write(&self.buffer)).await {
                Ok(Ok(0)) => return Err(Ended::Io(io::ErrorKind::WriteZero.into())),
                Ok(Ok(n)) => {
                    self.written += n as u64;
                    self.unflushed = true;
                    self.buffer.advance(n);
                }
                Ok(Err(e)) => return Err(Ended::Io(e)),
                Err(_) => break,
            }
        }
        while self.buffer.len() > self.bytes_max {
            let n = tokio::time::timeout(OUTPUT_STALL, stream.write(&self.buffer))
                .await
                .map_err(|_| Ended::Cut(Cut::OutputBuffer))??;
            if n == 0 {
                return Err(Ended::Io(io::ErrorKind::WriteZero.into()));
            }
            self.written += n as u64;
            self.unflushed = true;
            self.buffer.advance(n);
        }
        Ok(())
    }

    /// Writes everything that waits, giving up when the client takes nothing for as long as
    /// `clock` allows; restarts the clock when a reply was written (a client that is only
    /// sending a request is not active until the request is complete).
    pub async fn flush<S: AsyncWrite + Unpin>(
        &mut self,
        stream: &mut S,
        clock: &mut IdleClock,
    ) -> Result<(), Ended> {
        if self.buffer.is_empty() && !self.unflushed {
            return Ok(());
        }
        while !self.buffer.is_empty() {
            let write = stream.write(&self.buffer);
            let n = match clock.limit {
                None => write.await?,
                Some(limit) => tokio::time::timeout(limit, write)
                    .await
                    .map_err(|_| Ended::Cut(Cut::Idle))??,
            };
            if n == 0 {
                return Err(Ended::Io(io::ErrorKind::WriteZero.into()));
            }
            self.written += n as u64;
            self.buffer.advance(n);
        }
        // A TLS stream holds encrypted records until flushed (a TCP stream's flush is free).
        match clock.limit {
            None => stream.flush().await?,
            Some(limit) => tokio::time::timeout(limit, stream.flush())
                .await
                .map_err(|_| Ended::Cut(Cut::Idle))??,
        }
        self.unflushed = false;
        if self.buffer.capacity() > 1 << 20 {
            self.buffer = BytesMut::with_capacity(16 * 1024);
        }
        clock.restart();
        Ok(())
    }

    /// Adds the bytes handed to the socket since the last call to `bytes_out`.
    pub fn count_written(&mut self, bytes_out: &AtomicU64) {
        bytes_out.fetch_add(std::mem::take(&mut self.written), Ordering::Relaxed);
    }
}

/// A slot among the inbound peer connections, given back when dropped.
#[derive(Debug)]
pub struct PeerSlot {
    open: Arc<AtomicU64>,
}

impl PeerSlot {
    /// A slot if fewer than `max` of `open` are taken.
    pub fn take(open: &Arc<AtomicU64>, max: usize) -> Option<PeerSlot> {
        open.fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
            (n < max as u64).then_some(n + 1)
        })
        .ok()
        .map(|_| PeerSlot { open: open.clone() })
    }
}

impl Drop for PeerSlot {
    fn drop(&mut self) {
        self.open.fetch_sub(1, Ordering::AcqRel);
    }
}
