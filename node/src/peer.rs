//! The peer transport: one TCP connection per (shard, peer) in each direction. The log engine
//! has one loop, which the transport sees as shard 0 of one.
//!
//! Shard `s` of a node dials shard `s` of every other node and writes its messages there; it
//! receives theirs on the connections they dialled. A connection opens with the hello of
//! [`crate::hello`] (sender, shard, shard count, cluster id, the sender's incarnation and life,
//! a challenge–response proving the cluster secret both ways, and the acceptor's verdict on the
//! sender's identity: a node whose data directory was lost is refused, and stops, see
//! [`crate::lives`]), then carries frames of the engine's [`PeerCodec`]:
//! every write coalesces whatever the shard produced for that peer since the last one. A peer's address
//! may be a DNS name: it is resolved at every connection attempt, so a peer that moved is
//! found again on the next reconnect. With `tls_cluster`, each connection is mutual TLS
//! ([`crate::tls::PeerTls`]) and the hello runs inside it.
//!
//! Whenever a connection breaks or a new one replaces it, a per-key shard is told
//! ([`crate::shard::ShardInput::LinkBroken`]): messages on the old connection may be lost, and
//! Algorithm 3 then counts the peer as crashed for the requests in flight (the log engine
//! retransmits instead, and is not told). A new inbound connection
//! reports the break before any of its frames are delivered, so the proposer never sees
//! replies from after a gap without knowing about the gap, but only once its hello has proven
//! the cluster secret: a stranger that connects and claims a peer's node id can neither
//! deliver a message nor make the real peer count as crashed. Messages sent while a peer is
//! unreachable are dropped, which the protocol treats as loss.
//!
//! A dialler backs off between failed attempts, up to a second; a peer's proven hello on a
//! connection of its own wakes the dialler to it at once (the peer listens again, typically
//! restarted), counted in [`PeerCounters::dialler_wakes`].
//!
//! Inbound connections are bounded ([`crate::limits::PeerLimits`]): at most
//! `peer_connections_max` are open at once (more are closed at once, counted in
//! [`PeerCounters::over_cap`]), and each must prove its hello within
//! `peer_handshake_timeout_ms`.
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::{Buf, BytesMut};
use logless_rmw::ids::NodeId;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch, Notify};
use tracing::{debug, info, warn};

use crate::hello::{
    self, ClusterAuth, Hello, Side, Verdict, CHALLENGE_BYTES, HELLO_HEAD_BYTES, PROOF_BYTES,
    VERDICT_BYTES,
};
use crate::limits::{PeerLimits, PeerSlot};
use crate::lives::{Admission, Life, Lives, Refusal};
use crate::peer_codec::PeerCodec;
use crate::tls::{PeerStream, PeerTls};

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
    /// Connections that could not be accepted (another cluster, unknown node, wrong secret,
    /// version, layout) or broke the frame format.
    pub rejected: AtomicU64,
    /// Outbound connections established (first ones and reconnects).
    pub connects: AtomicU64,
    /// Times a shard was told a peer's link broke (each makes that peer count as crashed
    /// for the proposals in flight).
    pub link_breaks: AtomicU64,
    /// Which outbound links (peer node, shard) are connected now.
    pub links_up: Mutex<BTreeMap<(u16, u16), bool>>,
    /// Inbound connections open now, in their hello or after it.
    pub inbound: Arc<AtomicU64>,
    /// Inbound connections closed at once because `peer_connections_max` were open.
    pub over_cap: AtomicU64,
    /// Times a peer's proven hello woke this node's dialler to it (same shard) out of its
    /// back-off: the peer listens again, typically restarted.
    pub dialler_wakes: AtomicU64,
    /// What wakes the dialler of each (peer node, shard) out of its back-off.
    wakers: Mutex<BTreeMap<(u16, u16), Arc<Notify>>>,
}

impl PeerCounters {
    /// Tells the shard behind `inputs` that the link to `peer` broke, and counts it, if its
    /// engine wants to know; false if the shard is gone.
    async fn report_break<C: PeerCodec>(
        &self,
        inputs: &mpsc::Sender<C::Input>,
        peer: NodeId,
    ) -> bool {
        let Some(input) = C::link_broken(peer) else {
            return !inputs.is_closed();
        };
        self.link_breaks.fetch_add(1, Ordering::Relaxed);
        inputs.send(input).await.is_ok()
    }

    /// What wakes the dialler to `peer` for `shard` out of its back-off.
    fn waker(&self, peer: NodeId, shard: u16) -> Arc<Notify> {
        let mut wakers = self.wakers.lock().expect("not poisoned");
        wakers.entry((peer.0, shard)).or_default().clone()
    }

    /// Wakes the dialler to `peer` for `shard`, if there is one and its link is down: `peer`
    /// proved a hello on a connection of its own, so it listens again. A replica restarted
    /// with kill -9 gets its replies on its peers' connections to it, so its first quorum
    /// command would otherwise wait out their back-off, up to [`BACKOFF_MAX`]. Wakes a
    /// dialler that is between two attempts, not yet sleeping, at its next sleep.
    fn wake_dialler(&self, peer: NodeId, shard: u16) {
        let up = self
            .links_up
            .lock()
            .expect("not poisoned")
            .get(&(peer.0, shard))
            == Some(&true);
        let waker = self
            .wakers
            .lock()
            .expect("not poisoned")
            .get(&(peer.0, shard))
            .cloned();
        if let (false, Some(waker)) = (up, waker) {
            self.dialler_wakes.fetch_add(1, Ordering::Relaxed);
            waker.notify_one();
        }
    }

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
    /// The cluster id and secret proven in every hello.
    pub auth: Arc<ClusterAuth>,
    /// Mutual TLS for every peer connection (none: plain TCP).
    pub tls: Option<Arc<PeerTls>>,
    /// This run's incarnation and life, told in every hello.
    pub life: Life,
    /// The peers' lives this node welcomed.
    pub lives: Arc<Lives>,
    /// This node's admission by its peers.
    pub admission: Arc<Admission>,
}

/// Why a hello did not open a connection.
enum HelloFailure {
    /// Try again later.
    Retry(String),
    /// The peer refused this node as lost: it must not go on.
    Lost {
        /// The incarnation the peer knows this node from.
        known: u32,
    },
}

impl From<String> for HelloFailure {
    fn from(reason: String) -> HelloFailure {
        HelloFailure::Retry(reason)
    }
}

/// The dialler's side of the hello on `stream`, a connection to `peer` for `shard`: sends the
/// hello, checks the acceptor's proof, answers with its own and reads the verdict.
async fn hello_as_dialler<S: AsyncRead + AsyncWrite + Unpin>(
    stream: &mut S,
    identity: &Identity,
    shard: u16,
    peer: NodeId,
) -> Result<(), HelloFailure> {
    let sent = Hello {
        from: identity.node,
        shard,
        shards: identity.shards,
        cluster_id: identity.auth.cluster_id.as_bytes().to_vec(),
        incarnation: identity.life.incarnation,
        life: identity.life.life,
        nonce: hello::nonce(),
    };
    stream
        .write_all(&sent.encode())
        .await
        .map_err(|e| format!("sending hello: {e}"))?;
    let mut challenge = [0u8; CHALLENGE_BYTES];
    stream.read_exact(&mut challenge).await.map_err(|e| {
        format!("no challenge ({e}): the peer refused the hello (another cluster, or this node unknown to it?)")
    })?;
    let (nonce, proof) = hello::decode_challenge(&challenge)?;
    if !hello::verify(&identity.auth, Side::Acceptor, &sent, peer, &nonce, &proof) {
        return Err(HelloFailure::Retry(
            "the peer does not know the cluster secret".into(),
        ));
    }
    let answer = hello::prove(&identity.auth, Side::Dialler, &sent, peer, &nonce);
    stream
        .write_all(&answer)
        .await
        .map_err(|e| format!("sending the answer: {e}"))?;
    let mut verdict = [0u8; VERDICT_BYTES];
    stream
        .read_exact(&mut verdict)
        .await
        .map_err(|e| format!("no verdict ({e})"))?;
    match Verdict::decode(&verdict)? {
        Verdict::Welcome => Ok(identity.admission.welcomed()?),
        Verdict::Lost { known } => Err(HelloFailure::Lost { known }),
    }
}

/// The acceptor's side of the hello: reads and checks the hello, challenges the dialler and
/// checks its answer. Returns the dialler and its shard once it has proven the secret.
async fn hello_as_acceptor<S: AsyncRead + AsyncWrite + Unpin>(
    stream: &mut S,
    identity: &Identity,
) -> Result<(NodeId, u16), String> {
    // The magic first, so that a stranger or a peer of an older version is told at once.
    let mut head = [0u8; HELLO_HEAD_BYTES];
    stream
        .read_exact(&mut head[..4])
        .await
        .map_err(|e| format!("reading hello: {e}"))?;
    if &head[..4] == b"LLPR" {
        return Err("a logless peer of an older version (a hello without a cluster secret)".into());
    }
    if &head[..4] != hello::HELLO_MAGIC {
        return Err("not a logless peer hello (bad magic)".into());
    }
    stream
        .read_exact(&mut head[4..])
        .await
        .map_err(|e| format!("reading hello: {e}"))?;
    let mut rest = vec![0u8; Hello::rest_bytes(&head)?];
    stream
        .read_exact(&mut rest)
        .await
        .map_err(|e| format!("reading hello: {e}"))?;
    let received = Hello::decode(&head, &rest);
    received.check(
        &identity.auth,
        identity.node,
        &identity.peers,
        identity.shards,
    )?;
    let nonce = hello::nonce();
    let proof = hello::prove(
        &identity.auth,
        Side::Acceptor,
        &received,
        identity.node,
        &nonce,
    );
    stream
        .write_all(&hello::encode_challenge(&nonce, &proof))
        .await
        .map_err(|e| format!("sending challenge: {e}"))?;
    let mut answer = [0u8; PROOF_BYTES];
    stream
        .read_exact(&mut answer)
        .await
        .map_err(|e| format!("reading the answer: {e}"))?;
    if !hello::verify(
        &identity.auth,
        Side::Dialler,
        &received,
        identity.node,
        &nonce,
        &answer,
    ) {
        return Err(format!(
            "node {} does not know the cluster secret",
            received.from.0
        ));
    }
    let life = Life {
        incarnation: received.incarnation,
        life: received.life,
    };
    let (verdict, refused) = match identity.lives.welcome(received.from, life) {
        Ok(()) => (Verdict::Welcome, None),
        Err(Refusal::Lost { known }) => (
            Verdict::Lost { known },
            Some(format!(
                "node {} in incarnation {} lost its identity: this node knows it from \
                 incarnation {known}; refused until it rejoins",
                received.from.0, received.incarnation
            )),
        ),
        Err(Refusal::Io(reason)) => return Err(reason),
    };
    stream
        .write_all(&verdict.encode())
        .await
        .map_err(|e| format!("sending the verdict: {e}"))?;
    match refused {
        Some(reason) => Err(reason),
        None => Ok((received.from, received.shard)),
    }
}

/// Dials `peer` at `addr` (`HOST:PORT`, resolved at every attempt) for `shard` and writes the
/// batches the shard sends, reconnecting with backoff, until `shutdown` or until the shard is
/// gone.
#[allow(clippy::too_many_arguments)]
pub async fn dial<C: PeerCodec>(
    identity: Identity,
    shard: u16,
    peer: NodeId,
    addr: String,
    mut batches: mpsc::UnboundedReceiver<Vec<C::Message>>,
    shard_inputs: mpsc::Sender<C::Input>,
    counters: Arc<PeerCounters>,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut backoff = BACKOFF_MIN;
    let mut buf = Vec::with_capacity(64 * 1024);
    let wake = counters.waker(peer, shard);
    counters.set_link(peer, shard, false);
    loop {
        let connected = tokio::select! {
            _ = shutdown.changed() => return,
            c = TcpStream::connect(addr.as_str()) => c,
        };
        let stream = match connected {
            Ok(stream) => stream,
            Err(e) => {
                debug!(peer = peer.0, shard, %addr, error = %e, "peer unreachable");
                // Messages for an unreachable peer are lost.
                while batches.try_recv().is_ok() {}
                if !back_off(&mut backoff, &wake, &mut shutdown).await {
                    return;
                }
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let greeting = async {
            let mut stream = PeerTls::dial(identity.tls.as_deref(), stream, &addr).await?;
            hello_as_dialler(&mut stream, &identity, shard, peer).await?;
            Ok::<PeerStream, HelloFailure>(stream)
        };
        let greeted = tokio::select! {
            _ = shutdown.changed() => return,
            g = tokio::time::timeout(HELLO_TIMEOUT, greeting) => {
                g.unwrap_or_else(|_| Err(HelloFailure::Retry("no challenge in time".into())))
            }
        };
        let mut stream = match greeted {
            Ok(stream) => stream,
            Err(HelloFailure::Lost { known }) => {
                identity
                    .admission
                    .refused(peer, identity.life.incarnation, known);
                return;
            }
            Err(HelloFailure::Retry(reason)) => {
                warn!(peer = peer.0, shard, %addr, %reason, "peer hello failed");
                while batches.try_recv().is_ok() {}
                if !back_off(&mut backoff, &wake, &mut shutdown).await {
                    return;
                }
                continue;
            }
        };
        let connected_at = tokio::time::Instant::now();
        counters.connects.fetch_add(1, Ordering::Relaxed);
        counters.set_link(peer, shard, true);
        info!(peer = peer.0, shard, %addr, "connected to peer");
        if !counters.report_break::<C>(&shard_inputs, peer).await {
            return;
        }
        loop {
            // The shard's sender closes when the shard stops, which ends this task; no
            // shutdown signal needs polling per batch.
            let Some(first) = batches.recv().await else {
                return;
            };
            // The first batch's vector gathers the others: its messages are not copied.
            let mut pending = first;
            buf.clear();
            loop {
                while let Ok(more) = batches.try_recv() {
                    pending.extend(more);
                    if pending.len() >= 4096 {
                        break;
                    }
                }
                C::encode_frame(identity.node, &pending, &mut buf);
                pending.clear();
                if buf.len() >= FRAME_TARGET_BYTES || batches.is_empty() {
                    break;
                }
            }
            if let Err(e) = stream.write_all(&buf).await {
                warn!(peer = peer.0, shard, error = %e, "peer link broke");
                counters.set_link(peer, shard, false);
                counters.report_break::<C>(&shard_inputs, peer).await;
                // A peer that accepts and then drops connections must not be redialled for
                // every batch: only a connection that lasted resets the backoff.
                if connected_at.elapsed() >= STABLE_CONNECTION {
                    backoff = BACKOFF_MIN;
                }
                while batches.try_recv().is_ok() {}
                if !back_off(&mut backoff, &wake, &mut shutdown).await {
                    return;
                }
                break;
            }
            counters
                .bytes_out
                .fetch_add(buf.len() as u64, Ordering::Relaxed);
        }
    }
}

/// Waits `backoff` before the next attempt, or less if the peer's hello wakes the dialler
/// ([`PeerCounters::wake_dialler`]), and doubles it up to [`BACKOFF_MAX`]. False on shutdown.
async fn back_off(
    backoff: &mut Duration,
    wake: &Notify,
    shutdown: &mut watch::Receiver<bool>,
) -> bool {
    tokio::select! {
        _ = shutdown.changed() => return false,
        () = tokio::time::sleep(*backoff) => {}
        () = wake.notified() => {}
    }
    *backoff = (*backoff * 2).min(BACKOFF_MAX);
    true
}

/// Accepts peer connections, at most `limits.connections_max` at once, and feeds each one's
/// frames to its shard once its hello has proven the secret within
/// `limits.handshake_timeout`.
pub async fn accept<C: PeerCodec>(
    listener: TcpListener,
    identity: Identity,
    shards: Vec<mpsc::Sender<C::Input>>,
    counters: Arc<PeerCounters>,
    limits: PeerLimits,
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
        let Some(slot) = PeerSlot::take(&counters.inbound, limits.connections_max) else {
            counters.over_cap.fetch_add(1, Ordering::Relaxed);
            debug!(%remote, "peer connection refused: peer_connections_max are open");
            continue;
        };
        let identity = identity.clone();
        let shards = shards.clone();
        let counters = counters.clone();
        let mut shutdown = shutdown.clone();
        tokio::spawn(async move {
            let _slot = slot;
            tokio::select! {
                _ = shutdown.changed() => {}
                result = serve_inbound::<C>(stream, &identity, &shards, &counters, limits.handshake_timeout) => {
                    if let Err(reason) = result {
                        counters.rejected.fetch_add(1, Ordering::Relaxed);
                        warn!(%remote, %reason, "peer connection dropped");
                    }
                }
            }
        });
    }
}

async fn serve_inbound<C: PeerCodec>(
    stream: TcpStream,
    identity: &Identity,
    shards: &[mpsc::Sender<C::Input>],
    counters: &PeerCounters,
    handshake_timeout: Duration,
) -> Result<(), String> {
    let _ = stream.set_nodelay(true);
    let greeting = async {
        let mut stream = PeerTls::accept(identity.tls.as_deref(), stream).await?;
        let (from, shard) = hello_as_acceptor(&mut stream, identity).await?;
        Ok::<_, String>((stream, from, shard))
    };
    let (mut stream, from, shard) = tokio::time::timeout(handshake_timeout, greeting)
        .await
        .map_err(|_| "no hello in time".to_string())??;
    let inputs = &shards[usize::from(shard)];
    // A new connection from a peer that proved the secret means any earlier one from it is
    // gone, with what it carried. Nothing before this point may say so: a stranger's
    // connection must not make the real peer count as crashed.
    counters.report_break::<C>(inputs, from).await;
    counters.wake_dialler(from, shard);
    let result = read_frames::<C>(&mut stream, from, inputs, counters).await;
    counters.report_break::<C>(inputs, from).await;
    result
}

async fn read_frames<C: PeerCodec>(
    stream: &mut PeerStream,
    from: NodeId,
    inputs: &mpsc::Sender<C::Input>,
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
        while let Some((sender, messages, used)) =
            C::decode_frame(&buf, FRAME_BYTES_MAX).map_err(|e| format!("node {}: {e}", from.0))?
        {
            buf.advance(used);
            if sender != from {
                return Err(format!(
                    "frame claims node {} on node {}'s connection",
                    sender.0, from.0
                ));
            }
            if inputs.send(C::messages(from, messages)).await.is_err() {
                return Ok(());
            }
        }
    }
}
