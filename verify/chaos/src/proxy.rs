//! The fault-injecting peer proxy: one listener per directed link.
//!
//! A logless node dials every other node's peer address and sends its messages for that node
//! on the connection it dialled; replies come back on the connection the other node dialled.
//! So a connection carries the traffic of exactly one direction, and the link `from → to` is
//! the connection node `from` dials to node `to`. Node `from`'s peer list names, for node
//! `to`, the proxy listener of `from → to`, which forwards to `to`'s real peer address.
//!
//! Cutting a link closes its open connections (both sides, so both nodes notice the break)
//! and resets every new one at once; stalling it stops forwarding (bytes wait in the proxy and
//! in TCP buffers, nothing is lost, no node notices a break); healing lets traffic through
//! again. The two directions between two nodes are cut or stalled independently.
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// A directed link: (from node, to node).
pub type Link = (u16, u16);

/// What a link does with its traffic.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LinkMode {
    /// Forwards.
    Open,
    /// Resets its connections (messages in flight are lost and both ends see the break).
    Cut,
    /// Holds its traffic until healed (messages are delayed, not lost).
    Stalled,
}

struct LinkState {
    listen: SocketAddr,
    mode: watch::Sender<LinkMode>,
}

/// The proxies of every directed link of a cluster.
pub struct Proxy {
    links: BTreeMap<Link, LinkState>,
}

impl Proxy {
    /// Binds a listener for every ordered pair of distinct `nodes` on loopback and forwards
    /// `from → to` to `target(to)`. Must run inside a tokio runtime.
    pub async fn start(
        nodes: &[u16],
        target: impl Fn(u16) -> SocketAddr,
    ) -> std::io::Result<Arc<Proxy>> {
        let mut links = BTreeMap::new();
        for &from in nodes {
            for &to in nodes {
                if from == to {
                    continue;
                }
                let listener = TcpListener::bind("127.0.0.1:0").await?;
                let listen = listener.local_addr()?;
                let (mode, mode_rx) = watch::channel(LinkMode::Open);
                tokio::spawn(serve(listener, target(to), mode_rx));
                links.insert((from, to), LinkState { listen, mode });
            }
        }
        Ok(Arc::new(Proxy { links }))
    }

    /// Where node `from` reaches node `to`.
    pub fn addr(&self, from: u16, to: u16) -> SocketAddr {
        self.links[&(from, to)].listen
    }

    /// Sets what one directed link does.
    pub fn set(&self, link: Link, mode: LinkMode) {
        if let Some(state) = self.links.get(&link) {
            state.mode.send_replace(mode);
        }
    }

    /// Heals every link.
    pub fn heal_all(&self) {
        for state in self.links.values() {
            state.mode.send_replace(LinkMode::Open);
        }
    }

    /// The links not open now.
    #[cfg(test)]
    pub fn faulty_links(&self) -> Vec<Link> {
        self.links
            .iter()
            .filter(|(_, s)| *s.mode.borrow() != LinkMode::Open)
            .map(|(l, _)| *l)
            .collect()
    }
}

/// Resets a connection instead of closing it politely, so the node's next write fails.
fn reset(stream: TcpStream) {
    let _ = stream.set_zero_linger();
    drop(stream);
}

async fn serve(listener: TcpListener, target: SocketAddr, mode: watch::Receiver<LinkMode>) {
    loop {
        let Ok((inbound, _)) = listener.accept().await else {
            tokio::time::sleep(Duration::from_millis(10)).await;
            continue;
        };
        if *mode.borrow() == LinkMode::Cut {
            reset(inbound);
            continue;
        }
        tokio::spawn(forward(inbound, target, mode.clone()));
    }
}

/// Copies `from` to `to` until EOF or an error, holding the bytes while the link is stalled.
async fn pump(
    mut from: impl AsyncRead + Unpin,
    mut to: impl AsyncWrite + Unpin,
    mut mode: watch::Receiver<LinkMode>,
) {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        if mode.wait_for(|m| *m != LinkMode::Stalled).await.is_err() {
            return;
        }
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => {
                let _ = to.shutdown().await;
                return;
            }
            Ok(n) => n,
        };
        if mode.wait_for(|m| *m != LinkMode::Stalled).await.is_err()
            || to.write_all(&buf[..n]).await.is_err()
        {
            return;
        }
    }
}

async fn forward(inbound: TcpStream, target: SocketAddr, mut mode: watch::Receiver<LinkMode>) {
    let _ = inbound.set_nodelay(true);
    let connected = tokio::time::timeout(Duration::from_secs(1), TcpStream::connect(target)).await;
    let Ok(Ok(outbound)) = connected else {
        reset(inbound);
        return;
    };
    let _ = outbound.set_nodelay(true);
    // Closing the proxy's ends when the link is cut resets both connections.
    let _ = inbound.set_zero_linger();
    let _ = outbound.set_zero_linger();
    let (in_read, in_write) = inbound.into_split();
    let (out_read, out_write) = outbound.into_split();
    let (forth, back) = (mode.clone(), mode.clone());
    tokio::select! {
        _ = mode.wait_for(|m| *m == LinkMode::Cut) => {}
        () = async {
            tokio::join!(
                pump(in_read, out_write, forth),
                pump(out_read, in_write, back),
            );
        } => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn forwards_cuts_stalls_and_heals_one_direction() {
        let server = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let target = server.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((mut s, _)) = server.accept().await {
                tokio::spawn(async move {
                    let mut buf = [0u8; 64];
                    while let Ok(n) = s.read(&mut buf).await {
                        if n == 0 || s.write_all(&buf[..n]).await.is_err() {
                            break;
                        }
                    }
                });
            }
        });
        let proxy = Proxy::start(&[1, 2], |_| target).await.unwrap();
        let echo = |addr| async move {
            let mut s = TcpStream::connect(addr).await.ok()?;
            s.write_all(b"hi").await.ok()?;
            let mut buf = [0u8; 2];
            tokio::time::timeout(Duration::from_millis(500), s.read_exact(&mut buf))
                .await
                .ok()?
                .ok()?;
            Some(buf)
        };
        assert_eq!(echo(proxy.addr(1, 2)).await, Some(*b"hi"));
        let mut open = TcpStream::connect(proxy.addr(1, 2)).await.unwrap();
        open.write_all(b"x").await.unwrap();
        let mut one = [0u8; 1];
        open.read_exact(&mut one).await.unwrap();
        proxy.set((1, 2), LinkMode::Cut);
        assert_eq!(proxy.faulty_links(), vec![(1, 2)]);
        assert!(echo(proxy.addr(1, 2)).await.is_none());
        // The open connection was closed by the cut.
        let closed = tokio::time::timeout(Duration::from_millis(500), open.read(&mut one)).await;
        assert!(matches!(closed, Ok(Ok(0)) | Ok(Err(_))), "{closed:?}");
        // The other direction is untouched.
        assert_eq!(echo(proxy.addr(2, 1)).await, Some(*b"hi"));
        proxy.heal_all();
        assert_eq!(echo(proxy.addr(1, 2)).await, Some(*b"hi"));
        // A stalled link holds the bytes and delivers them once healed.
        let mut open = TcpStream::connect(proxy.addr(2, 1)).await.unwrap();
        proxy.set((2, 1), LinkMode::Stalled);
        open.write_all(b"late").await.unwrap();
        let mut four = [0u8; 4];
        let early = tokio::time::timeout(Duration::from_millis(300), open.read_exact(&mut four));
        assert!(early.await.is_err(), "a stalled link forwarded");
        proxy.set((2, 1), LinkMode::Open);
        tokio::time::timeout(Duration::from_millis(500), open.read_exact(&mut four))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(&four, b"late");
    }
}
