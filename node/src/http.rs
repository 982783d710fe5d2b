//! The observability endpoint: `GET /metrics` (Prometheus text), `GET /health` (200 when the
//! node can serve, 503 otherwise) and `GET /status` (JSON, read by `logless status`); on a
//! ring, the ring's changes (`logless cluster`, [`crate::ring_change`]): `GET /cluster` (JSON,
//! the stage and every node's report) and `POST /cluster/add?node=ID`,
//! `/cluster/remove?node=ID`, `/cluster/replace?old=ID&new=ID`, which run the change with this
//! node as its coordinator and answer when it is done (200) or refused (409). A node with
//! `requirepass` takes a change only with `Authorization: Bearer <requirepass>`.
//!
//! A few routes over HTTP/1.1 with `Connection: close` need no web framework; a request head
//! larger than 8 KiB or slower than 5 s is dropped. With `tls_http` the listener speaks TLS
//! ([`crate::tls`]).
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio_rustls::TlsAcceptor;

use crate::context::NodeContext;
use crate::{ring_change, status, tls};

const HEAD_BYTES_MAX: usize = 8 * 1024;

/// How long a request head may take to arrive.
const HEAD_TIMEOUT: Duration = Duration::from_secs(5);

/// How long a connection may last: a ring change waits for every node to install two stages.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(120);

/// Serves until `shutdown`; with `tls`, each connection's TLS handshake first.
pub async fn serve(
    listener: TcpListener,
    context: Arc<NodeContext>,
    mut shutdown: watch::Receiver<bool>,
    tls: Option<TlsAcceptor>,
) {
    loop {
        let accepted = tokio::select! {
            _ = shutdown.changed() => return,
            a = listener.accept() => a,
        };
        let Ok((stream, _)) = accepted else { continue };
        let context = context.clone();
        let tls = tls.clone();
        tokio::spawn(async move {
            let answered = async {
                match tls {
                    None => answer(stream, &context).await,
                    Some(acceptor) => {
                        let stream =
                            tls::accept_client(&acceptor, stream, &context.clients).await?;
                        answer(stream, &context).await
                    }
                }
            };
            let _ = tokio::time::timeout(ANSWER_TIMEOUT, answered).await;
        });
    }
}

async fn answer<S: AsyncRead + AsyncWrite + Unpin>(
    mut stream: S,
    context: &NodeContext,
) -> std::io::Result<()> {
    let mut head = Vec::with_capacity(512);
    let mut chunk = [0u8; 1024];
    let read_head = async {
        while !head.windows(4).any(|w| w == b"\r\n\r\n") {
            let n = stream.read(&mut chunk).await?;
            if n == 0 || head.len() + n > HEAD_BYTES_MAX {
                return Ok(false);
            }
            head.extend_from_slice(&chunk[..n]);
        }
        Ok::<_, std::io::Error>(true)
    };
    if !tokio::time::timeout(HEAD_TIMEOUT, read_head)
        .await
        .unwrap_or(Ok(false))?
    {
        return Ok(());
    }
    let line = head.split(|&b| b == b'\r').next().unwrap_or_default();
    let mut parts = line.split(|&b| b == b' ');
    let method = parts.next().unwrap_or_default();
    let path = parts.next().unwrap_or_default();
    let (code, content_type, body) = if path.starts_with(b"/cluster") {
        ring_change::answer(method, path, &head, context).await
    } else if method != b"GET" {
        (405, "text/plain", "only GET is served\n".to_string())
    } else {
        match path {
            b"/metrics" => {
                let totals = status::gather(context).await;
                (
                    200,
                    "text/plain; version=0.0.4",
                    status::prometheus(context, &totals),
                )
            }
            b"/health" | b"/status" => {
                let totals = status::gather(context).await;
                let s = status::node_status(context, &totals);
                let code = if s.healthy { 200 } else { 503 };
                if path == b"/health" {
                    let text = if s.healthy { "ok\n" } else { "unhealthy\n" };
                    (code, "text/plain", text.to_string())
                } else {
                    let json = serde_json::to_string_pretty(&s).expect("serialisable") + "\n";
                    (code, "application/json", json)
                }
            }
            _ => (
                404,
                "text/plain",
                "not found; try /metrics, /health or /status\n".to_string(),
            ),
        }
    };
    let reason = match code {
        200 => "OK",
        400 => "Bad Request",
        401 => "Unauthorized",
        404 => "Not Found",
        405 => "Method Not Allowed",
        409 => "Conflict",
        _ => "Service Unavailable",
    };
    let response = format!(
        "HTTP/1.1 {code} {reason}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(response.as_bytes()).await?;
    stream.shutdown().await
}
