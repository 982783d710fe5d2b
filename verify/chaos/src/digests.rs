//! The replicas' service digests at the end of a psmr run: every replica must hold the same
//! B⁺-tree.
//!
//! A replica's digest is a hash of its service's whole state, read with `LOGLESS.DIGEST`. Once
//! the cluster is healed and the final reads are done, no client writes any more, but a
//! replica back from a fault may still be executing what the others executed: the digests
//! are read again (every [`POLL`]) until they are all equal, or until the time given runs
//! out. Digests that still differ then are a divergence (a violation); a replica that cannot
//! be asked leaves the comparison without a verdict.
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use crate::client::{Connection, Reply};

/// How often the digests are read while they differ.
const POLL: Duration = Duration::from_millis(250);

/// How long one replica may take to answer `LOGLESS.DIGEST`.
const ASK_TIMEOUT: Duration = Duration::from_secs(2);

/// What the comparison found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Digests {
    /// Every replica holds the state of this digest, found equal after `after`.
    Equal {
        /// The digest (hex).
        digest: String,
        /// How long after the comparison started they were equal.
        after: Duration,
    },
    /// The replicas still differed when the time ran out: each replica's digest (hex), in
    /// replica order.
    Differ(Vec<String>),
    /// A replica did not tell its digest in time: why, by replica (`node N: ...`).
    Unreadable(String),
}

impl Digests {
    /// Whether the replicas diverged.
    pub fn differ(&self) -> bool {
        matches!(self, Digests::Differ(_))
    }
}

/// One replica's digest, or why there is none.
async fn ask(addr: SocketAddr) -> Result<String, String> {
    let attempt = async {
        let mut connection = Connection::connect(addr, ASK_TIMEOUT)
            .await
            .map_err(|e| format!("cannot connect: {e}"))?;
        match connection.request(&["LOGLESS.DIGEST".to_string()]).await {
            Ok(Reply::Bulk(digest)) => Ok(digest),
            Ok(other) => Err(format!("LOGLESS.DIGEST answered {other:?}")),
            Err(e) => Err(format!("LOGLESS.DIGEST: {e}")),
        }
    };
    tokio::time::timeout(ASK_TIMEOUT, attempt)
        .await
        .unwrap_or_else(|_| Err(format!("no answer within {ASK_TIMEOUT:?}")))
}

/// Reads the digests of the replicas at `addrs` (node `i + 1` at `addrs[i]`) until they are
/// equal, for up to `timeout`.
pub async fn compare(addrs: &[SocketAddr], timeout: Duration) -> Digests {
    let started = Instant::now();
    loop {
        let mut digests = Vec::new();
        let mut unreadable = Vec::new();
        for (i, addr) in addrs.iter().enumerate() {
            match ask(*addr).await {
                Ok(digest) => digests.push(digest),
                Err(why) => unreadable.push(format!("node {}: {why}", i + 1)),
            }
        }
        if unreadable.is_empty() && digests.windows(2).all(|w| w[0] == w[1]) {
            return Digests::Equal {
                digest: digests.first().cloned().unwrap_or_default(),
                after: started.elapsed(),
            };
        }
        if started.elapsed() >= timeout {
            return if unreadable.is_empty() {
                Digests::Differ(digests)
            } else {
                Digests::Unreadable(unreadable.join("; "))
            };
        }
        tokio::time::sleep(POLL).await;
    }
}
