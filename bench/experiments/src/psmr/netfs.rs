//! Fig. 8's load: NetFS reads and writes of [`IO_BYTES`] through the direct client over Redis
//! (`LOGLESS.FS`, [`RedisTransport`]), each client on a file of its own (`/c<client>`), one
//! call in flight per client (`--netfs-clients` sets how many clients). Reads and writes of different files are independent (C-G sends
//! each to its path's group), so they show how NetFS's calls scale with worker threads.
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use logless_netfs::remote::RedisTransport;
use logless_netfs::{Client, FsPath, Mode, Time};

/// The bytes each read and write moves.
pub const IO_BYTES: u64 = 1024;

/// How long a call may wait for its connection and reply.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(10);

fn connect(addr: SocketAddr) -> Client<RedisTransport> {
    Client::new(RedisTransport::new(&addr.to_string(), None, ANSWER_TIMEOUT))
}

fn file(client: u32) -> FsPath {
    FsPath::new(format!("/c{client}")).expect("a canonical path")
}

fn now() -> Time {
    let since = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    Time {
        secs: since.as_secs(),
        nanos: since.subsec_nanos(),
    }
}

/// Creates each client's file, [`IO_BYTES`] long, through `endpoints` in turn.
pub fn prepare(endpoints: &[SocketAddr], clients: u32) -> Result<(), String> {
    let mut client = connect(endpoints[0]);
    let data = vec![b'x'; IO_BYTES as usize];
    for c in 0..clients {
        let path = file(c);
        let fail = |e: logless_netfs::CallError| format!("creating {path:?}: {e}");
        let fh = client.create(&path, Mode(0o644), now()).map_err(fail)?;
        client.write(&path, fh, 0, &data, now()).map_err(fail)?;
        client.release(fh).map_err(fail)?;
    }
    Ok(())
}

/// Client `client`'s run through `addr`: reads (or writes, if `write`) of its whole file until
/// `stop`; gives the calls answered within `window`.
pub fn client(
    client: u32,
    addr: SocketAddr,
    write: bool,
    stop: &AtomicBool,
    window: (Instant, Instant),
) -> Result<u64, String> {
    let mut fs = connect(addr);
    let path = file(client);
    let fail = |e: logless_netfs::CallError| format!("client {client} on {path:?}: {e}");
    let fh = fs.open(&path, false, now()).map_err(fail)?;
    let data = vec![b'y'; IO_BYTES as usize];
    let mut ops = 0;
    while !stop.load(Ordering::Relaxed) {
        if write {
            let written = fs.write(&path, fh, 0, &data, now()).map_err(fail)?;
            if written != IO_BYTES {
                return Err(format!("client {client}: wrote {written} bytes"));
            }
        } else {
            let read = fs.read(&path, fh, 0, IO_BYTES).map_err(fail)?;
            if read.len() as u64 != IO_BYTES {
                return Err(format!("client {client}: read {} bytes", read.len()));
            }
        }
        let at = Instant::now();
        if at >= window.0 && at < window.1 {
            ops += 1;
        }
    }
    fs.release(fh).map_err(fail)?;
    Ok(ops)
}
