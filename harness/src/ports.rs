//! Free loopback ports for the processes a test or harness starts.
//!
//! A port found by binding port 0 and released again is a bad choice for a server that binds
//! it later: the kernel takes such ports from its ephemeral range, the same range it hands to
//! the source port of every outgoing connection. Between the probe and the server's bind (or
//! while a killed replica is down) some connection of the system under test may take it, and
//! the server fails with "Address already in use". So ports come from below the ephemeral range,
//! where only explicit binds take them, and each is checked by binding it.
//!
//! One process hands out the range in order from a cursor, so tests that run in parallel threads
//! of one test binary never get the same port (until the cursor has gone round the whole range,
//! about 20,000 ports). Separate processes start at different places in the range.
use std::io;
use std::net::{Ipv4Addr, TcpListener};
use std::sync::Mutex;

/// The lowest port handed out.
const PORT_MIN: u32 = 10_000;
/// Where the ephemeral range starts when the kernel does not say (Linux's default).
const EPHEMERAL_MIN_DEFAULT: u32 = 32_768;
/// How many candidates to probe before giving up.
const TRIES_MAX: u32 = 2_000;

/// The next candidate of this process, or `None` before the first call.
static CURSOR: Mutex<Option<u32>> = Mutex::new(None);

/// The first port of the kernel's ephemeral range.
fn ephemeral_min() -> u32 {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(EPHEMERAL_MIN_DEFAULT)
}

/// Where this process starts in the range: different for processes started one after another.
fn start_offset(span: u32) -> u32 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    std::process::id().wrapping_mul(7_919).wrapping_add(nanos) % span
}

/// Whether `port` can be bound on loopback now.
fn is_free(port: u32) -> bool {
    u16::try_from(port).is_ok_and(|p| TcpListener::bind((Ipv4Addr::LOCALHOST, p)).is_ok())
}

/// A base port `b` such that `b + offset + i` is free for every offset in `offsets` and every
/// `i < count`, below the ephemeral range. `logless up --port b` uses `offsets` 0, 1000 and 2000 for its replicas' client, peer
/// and HTTP ports.
pub fn free_block(offsets: &[u16], count: u16) -> io::Result<u16> {
    let mut cursor = CURSOR.lock().unwrap_or_else(|e| e.into_inner());
    take_block(&mut cursor, offsets, count)
}

/// [`free_block`] from the candidate `cursor` holds (a start of its own when `None`), which it
/// moves past the block handed out.
fn take_block(cursor: &mut Option<u32>, offsets: &[u16], count: u16) -> io::Result<u16> {
    let width = offsets.iter().max().map_or(0, |o| u32::from(*o)) + u32::from(count);
    let top = ephemeral_min().max(PORT_MIN + 2 * width);
    let span = top - PORT_MIN - width;
    let mut next = cursor.unwrap_or_else(|| start_offset(span));
    for _ in 0..TRIES_MAX {
        let base = PORT_MIN + next % span;
        next = (next % span) + width;
        let ports = offsets
            .iter()
            .flat_map(|o| (0..u32::from(count)).map(move |i| base + u32::from(*o) + i));
        if ports.clone().all(is_free) {
            *cursor = Some(next);
            return Ok(base as u16);
        }
    }
    *cursor = Some(next);
    Err(io::Error::new(
        io::ErrorKind::AddrInUse,
        format!("no free block of loopback ports below {top}"),
    ))
}

/// `count` distinct free loopback ports below the ephemeral range.
pub fn free_ports(count: u16) -> io::Result<Vec<u16>> {
    let base = free_block(&[0], count)?;
    Ok((0..count).map(|i| base + i).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_are_below_the_ephemeral_range_and_never_repeat() {
        // Whether a port handed out is still free a moment later depends on every other process
        // of the machine (a CI machine runs more than this test), so this test checks what the
        // picker promises for itself; the next one checks that it skips a taken port.
        let mut seen = std::collections::BTreeSet::new();
        for _ in 0..50 {
            let base = free_block(&[0, 1000, 2000], 3).unwrap();
            for o in [0u32, 1000, 2000] {
                for i in 0..3 {
                    let port = u32::from(base) + o + i;
                    assert!(port >= PORT_MIN && port < ephemeral_min(), "port {port}");
                    assert!(seen.insert(port), "port {port} handed out twice");
                }
            }
        }
    }

    #[test]
    fn a_block_with_a_taken_port_is_skipped() {
        // Hold a port, point a cursor at it and ask for a block: the one handed out must not
        // contain the held port.
        let held = (0..TRIES_MAX)
            .find_map(|_| {
                let base = free_block(&[0], 1).ok()?;
                TcpListener::bind((Ipv4Addr::LOCALHOST, base)).ok()
            })
            .expect("a port to hold");
        let port = u32::from(held.local_addr().unwrap().port());
        // A cursor whose first candidate is the held port, for blocks of one and of three.
        for count in [1, 3] {
            let mut cursor = Some(port - PORT_MIN);
            let got = u32::from(take_block(&mut cursor, &[0], count).unwrap());
            assert!(
                !(got..got + u32::from(count)).contains(&port),
                "port {port} is held and was handed out in {got}+{count}"
            );
        }
        drop(held);
    }
}
