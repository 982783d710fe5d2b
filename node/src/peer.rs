//! The peer transport: one TCP connection per (shard, peer) in each direction.
//!
//! Shard `s` of a node dials shard `s` of every other node and writes its messages there; it
//! receives theirs on the connections they dialled. A connection opens with a hello naming the
//! sender, its shard and its shard count, then carries frames of [`logless_rmw::wire`]: every
//! write coalesces whatever the shard produced for that peer since the last one.
//!
//! ```text
//! hello:  magic "LLPR" | wire version u8 | from u16 LE | shard u16 LE | shards u16 LE
//! ```
//!
//! Whenever a connection breaks or a new one replaces it, the shard is told
//! ([`ShardInput::LinkBroken`]): messages on the old connection may be lost, and Algorithm 3
//! then counts the peer as crashed for the requests in flight. A new inbound connection
//! reports the break before any of its frames are delivered, so the proposer never sees
//! replies from after a gap without knowing about the gap. Messages sent while a peer is
//! unreachable are dropped, which the protocol treats as loss.
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::{Buf, BytesMut};
use logless_rmw::ids::NodeId;
use logless_rmw::message::Message;
use logless_rmw::wire::{decode_frame, encode_frame, WIRE_VERSION};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};
use tracing::{debug, info, warn};

use crate::shard::ShardInput;

const MAGIC: &[u8; 4] = b"LLPR";
const HELLO_BYTES: usize = 4 + 1 + 2 + 2 + 2;
/// The largest frame a node accepts from a peer.
pub const FRAME_BYTES_MAX: usize = 128 << 20;
/// The most message bytes coalesced into one frame before it is written.
const FRAME_TARGET_BYTES: usize = 1 << 20;
const BACKOFF_MIN: Duration = Duration::from_millis(20);
const BACKOFF_MAX: Duration = Duration::from_secs(1);
const HELLO_TIMEOUT: Duration = Duration::from_secs(5);
/// A connection that lasted this long counts as healthy again when it breaks.
const STABLE_CONNECTION: Duration = Duration::from_secs(1);

/// Counters of the peer transport, shared by its tasks.
#[derive(Debug, Default)]
pub struct PeerCounters {
    /// Bytes written to peers.
    pub bytes_out: AtomicU64,
    /// Bytes read from peers.
    pub bytes_in: AtomicU64,
    /// Connections that could not be accepted (unknown node, version, layout) or broke the
    /// frame format.
    pub rejected: AtomicU64,
    /// Outbound connections established (first ones and reconnects).
    pub connects: AtomicU64,
    /// Which outbound links (peer node, shard) are connected now.
    pub links_up: Mutex<BTreeMap<(u16, u16), bool>>,
}

impl PeerCounters {
    fn set_link(&self, peer: NodeId, shard: u16, up: bool) {
        self.links_up
            .lock()
            .expect("not poisoned")
            .insert((peer.0, shard), up);
    }
}

/// Who this node is, as the transport needs to know.
#[derive(Clone, Debug)]
pub struct Identity {
    /// This node.
    pub node: NodeId,
    /// Every other node of the cluster.
    pub peers: Vec<NodeId>,
    /// Shards per node.
    pub shards: u16,
}

fn hello(me: NodeId, shard: u16, shards: u16) -> [u8; HELLO_BYTES] {
    let mut h = [0; HELLO_BYTES];
    h[..4].copy_from_slice(MAGIC);
    h[4] = WIRE_VERSION;
    h[5..7].copy_from_slice(&me.0.to_le_bytes());
    h[7..9].copy_from_slice(&shard.to_le_bytes());
    h[9..11].copy_from_slice(&shards.to_le_bytes());
    h
}

/// Checks a hello and returns the sender and its shard.
fn check_hello(h: &[u8; HELLO_BYTES], identity: &Identity) -> Result<(NodeId, u16), String> {
    if &h[..4] != MAGIC {
        return Err("not a logless peer (bad magic)".into());
    }
    if h[4] != WIRE_VERSION {
        return Err(format!(
            "peer speaks wire version {}, this node {WIRE_VERSION}",
            h[4]
        ));
    }
    let from = NodeId(u16::from_le_bytes([h[5], h[6]]));
    let shard = u16::from_le_bytes([h[7], h[8]]);
    let shards = u16::from_le_bytes([h[9], h[10]]);
    if !identity.peers.contains(&from) {
        return Err(format!("node {} is not a peer of this cluster", from.0));
    }
    if shards != identity.shards || shard >= shards {
        return Err(format!(
            "node {} runs {shards} shards (shard {shard}), this node {}",
            from.0, identity.shards
        ));
    }
    Ok((from, shard))
}

/// Dials `peer` at `addr` for `shard` and writes the batches the shard sends, reconnecting
/// with backoff, until `shutdown` or until the shard is gone.
#[allow(clippy::too_many_arguments)]
pub async fn dial(
    identity: Identity,
    shard: u16,
    peer: NodeId,
    addr: SocketAddr,
    mut batches: mpsc::UnboundedReceiver<Vec<Message>>,
    shard_inputs: mpsc::Sender<ShardInput>,
    counters: Arc<PeerCounters>,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut backoff = BACKOFF_MIN;
    let mut buf = Vec::with_capacity(64 * 1024);
    let mut pending: Vec<Message> = Vec::new();
    counters.set_link(peer, shard, false);
    loop {
        let connected = tokio::select! {
            _ = shutdown.changed() => return,
            c = TcpStream::connect(addr) => c,
        };
        let mut stream = match connected {
            Ok(stream) => stream,
            Err(e) => {
                debug!(peer = peer.0, shard, %addr, error = %e, "peer unreachable");
                // Messages for an unreachable peer are lost.
                while batches.try_recv().is_ok() {}
                tokio::select! {
                    _ = shutdown.changed() => return,
                    () = tokio::time::sleep(backoff) => {}
                }
                backoff = (backoff * 2).min(BACKOFF_MAX);
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        if stream
            .write_all(&hello(identity.node, shard, identity.shards))
            .await
            .is_err()
        {
            continue;
        }
        let connected_at = tokio::time::Instant::now();
        counters.connects.fetch_add(1, Ordering::Relaxed);
        counters.set_link(peer, shard, true);
        info!(peer = peer.0, shard, %addr, "connected to peer");
        if shard_inputs
            .send(ShardInput::LinkBroken(peer))
            .await
            .is_err()
        {
            return;
        }
        loop {
            // The shard's sender closes when the shard stops, which ends this task; no
            // shutdown signal needs polling per batch.
            let Some(first) = batches.recv().await else {
                return;
            };
            pending.extend(first);
            buf.clear();
            loop {
                while let Ok(more) = batches.try_recv() {
                    pending.extend(more);
                    if pending.len() >= 4096 {
                        break;
                    }
                }
                encode_frame(identity.node, &pending, &mut buf);
                pending.clear();
                if buf.len() >= FRAME_TARGET_BYTES || batches.is_empty() {
                    break;
                }
            }
            if let Err(e) = stream.write_all(&buf).await {
                warn!(peer = peer.0, shard, error = %e, "peer link broke");
                counters.set_link(peer, shard, false);
                let _ = shard_inputs.send(ShardInput::LinkBroken(peer)).await;
                // A peer that accepts and then drops connections must not be redialled for
                // every batch: only a connection that lasted resets the backoff.
                if connected_at.elapsed() >= STABLE_CONNECTION {
                    backoff = BACKOFF_MIN;
                }
                while batches.try_recv().is_ok() {}
                tokio::select! {
                    _ = shutdown.changed() => return,
                    () = tokio::time::sleep(backoff) => {}
                }
                backoff = (backoff * 2).min(BACKOFF_MAX);
                break;
            }
            counters
                .bytes_out
                .fetch_add(buf.len() as u64, Ordering::Relaxed);
        }
    }
}

/// Accepts peer connections and feeds each one's frames to its shard.
pub async fn accept(
    listener: TcpListener,
    identity: Identity,
    shards: Vec<mpsc::Sender<ShardInput>>,
    counters: Arc<PeerCounters>,
    shutdown: watch::Receiver<bool>,
) {
    let mut stop = shutdown.clone();
    loop {
        let accepted = tokio::select! {
            _ = stop.changed() => return,
            a = listener.accept() => a,
        };
        let Ok((stream, remote)) = accepted else {
            tokio::time::sleep(Duration::from_millis(10)).await;
            continue;
        };
        let identity = identity.clone();
        let shards = shards.clone();
        let counters = counters.clone();
        let mut shutdown = shutdown.clone();
        tokio::spawn(async move {
            tokio::select! {
                _ = shutdown.changed() => {}
                result = serve_inbound(stream, &identity, &shards, &counters) => {
                    if let Err(reason) = result {
                        counters.rejected.fetch_add(1, Ordering::Relaxed);
                        warn!(%remote, %reason, "peer connection dropped");
                    }
                }
            }
        });
    }
}

async fn serve_inbound(
    mut stream: TcpStream,
    identity: &Identity,
    shards: &[mpsc::Sender<ShardInput>],
    counters: &PeerCounters,
) -> Result<(), String> {
    let _ = stream.set_nodelay(true);
    let mut h = [0u8; HELLO_BYTES];
    tokio::time::timeout(HELLO_TIMEOUT, stream.read_exact(&mut h))
        .await
        .map_err(|_| "no hello in time".to_string())?
        .map_err(|e| format!("reading hello: {e}"))?;
    let (from, shard) = check_hello(&h, identity)?;
    let inputs = &shards[usize::from(shard)];
    // A new connection means any earlier one from this peer is gone, with what it carried.
    let _ = inputs.send(ShardInput::LinkBroken(from)).await;
    let result = read_frames(&mut stream, from, inputs, counters).await;
    let _ = inputs.send(ShardInput::LinkBroken(from)).await;
    result
}

async fn read_frames(
    stream: &mut TcpStream,
    from: NodeId,
    inputs: &mpsc::Sender<ShardInput>,
    counters: &PeerCounters,
) -> Result<(), String> {
    let mut buf = BytesMut::with_capacity(64 * 1024);
    loop {
        let n = stream
            .read_buf(&mut buf)
            .await
            .map_err(|e| format!("read: {e}"))?;
        if n == 0 {
            return Ok(());
        }
        counters.bytes_in.fetch_add(n as u64, Ordering::Relaxed);
        while let Some((frame, used)) =
            decode_frame(&buf, FRAME_BYTES_MAX).map_err(|e| format!("node {}: {e}", from.0))?
        {
            buf.advance(used);
            if frame.from != from {
                return Err(format!(
                    "frame claims node {} on node {}'s connection",
                    frame.from.0, from.0
                ));
            }
            if inputs
                .send(ShardInput::Messages {
                    from,
                    messages: frame.messages,
                })
                .await
                .is_err()
            {
                return Ok(());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn identity() -> Identity {
        Identity {
            node: NodeId(1),
            peers: vec![NodeId(2), NodeId(3)],
            shards: 2,
        }
    }

    #[test]
    fn hellos_are_checked() {
        let me = identity();
        assert_eq!(
            check_hello(&hello(NodeId(2), 1, 2), &me),
            Ok((NodeId(2), 1))
        );
        assert!(check_hello(&hello(NodeId(9), 0, 2), &me).is_err());
        assert!(check_hello(&hello(NodeId(1), 0, 2), &me).is_err());
        assert!(check_hello(&hello(NodeId(2), 0, 4), &me).is_err());
        assert!(check_hello(&hello(NodeId(2), 2, 2), &me).is_err());
        let mut bad_version = hello(NodeId(2), 0, 2);
        bad_version[4] = WIRE_VERSION + 1;
        assert!(check_hello(&bad_version, &me).is_err());
        let mut bad_magic = hello(NodeId(2), 0, 2);
        bad_magic[0] = b'X';
        assert!(check_hello(&bad_magic, &me).is_err());
    }
}
