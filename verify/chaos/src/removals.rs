//! How many registers the replicas removed (deleted and expired keys forgotten by every
//! replica, `docs/removal.md`), sampled from `INFO server stats` while the run goes on.
//!
//! A replica counts the registers it forgot since it started (`logless_registers_removed`), so
//! a restart starts its count again: the sampler keeps each replica's count of its current
//! incarnation and adds it to the earlier ones' when the incarnation changes. What a replica
//! removed after its last sample and before it was killed is not seen, so the totals are lower
//! bounds. A replica that does not answer within the sample's timeout (paused, down) is
//! skipped until the next sample.
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Mutex;
use std::time::Duration;

use tokio::sync::watch;

use crate::client::{Connection, Reply};

/// How long one replica's INFO may take before the sample skips it.
const INFO_TIMEOUT: Duration = Duration::from_millis(500);

/// One replica's counts.
#[derive(Clone, Copy, Debug, Default)]
struct NodeCount {
    /// The incarnation last sampled.
    incarnation: u64,
    /// Its count when last sampled.
    current: u64,
    /// The last counts of its earlier incarnations, added up.
    earlier: u64,
}

/// The registers each replica removed, as far as the samples saw.
#[derive(Debug, Default)]
pub struct Removals {
    /// By node id.
    by_node: Mutex<BTreeMap<u16, NodeCount>>,
}

impl Removals {
    /// Samples every replica once; `addrs[i]` is node `i + 1`'s Redis address.
    pub async fn sample(&self, addrs: &[SocketAddr]) {
        for (id, addr) in (1u16..).zip(addrs) {
            if let Some((incarnation, removed)) = removed_by(*addr).await {
                self.record(id, incarnation, removed);
            }
        }
    }

    /// Notes that node `id`'s incarnation `incarnation` has removed `removed` registers.
    fn record(&self, id: u16, incarnation: u64, removed: u64) {
        let mut by_node = self.by_node.lock().expect("not poisoned");
        let count = by_node.entry(id).or_default();
        if count.incarnation != incarnation {
            count.earlier += count.current;
            count.incarnation = incarnation;
        }
        count.current = removed;
    }

    /// Samples every `every` until `stop` turns true.
    pub async fn sample_until(
        &self,
        addrs: &[SocketAddr],
        every: Duration,
        mut stop: watch::Receiver<bool>,
    ) {
        while !*stop.borrow() {
            self.sample(addrs).await;
            tokio::select! {
                () = tokio::time::sleep(every) => {}
                _ = stop.changed() => {}
            }
        }
    }

    /// The registers each replica that answered a sample removed, by node id.
    pub fn by_node(&self) -> BTreeMap<u16, u64> {
        let by_node = self.by_node.lock().expect("not poisoned");
        by_node
            .iter()
            .map(|(&id, c)| (id, c.earlier + c.current))
            .collect()
    }
}

/// Replica `addr`'s incarnation and its count of removed registers, if it answers in time and
/// reports both (the rmw engine does).
async fn removed_by(addr: SocketAddr) -> Option<(u64, u64)> {
    let info = async {
        let mut c = Connection::connect(addr, INFO_TIMEOUT).await.ok()?;
        let args = ["INFO", "server", "stats"].map(String::from);
        match c.request(&args).await.ok()? {
            Reply::Bulk(text) => Some(text),
            _ => None,
        }
    };
    let text = tokio::time::timeout(INFO_TIMEOUT, info).await.ok()??;
    Some((
        field(&text, "incarnation")?,
        field(&text, "logless_registers_removed")?,
    ))
}

/// The number of INFO's `name:value` line.
fn field(info: &str, name: &str) -> Option<u64> {
    info.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
        .and_then(|v| v.trim().parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn info_fields_are_read_by_their_whole_name() {
        let info = "# Server\r\nincarnation:3\r\n# Stats\r\nlogless_registers_removed_x:9\r\n\
                    logless_registers_removed:12\r\n";
        assert_eq!(field(info, "incarnation"), Some(3));
        assert_eq!(field(info, "logless_registers_removed"), Some(12));
        assert_eq!(field(info, "logless_registers_dropped"), None);
    }

    #[test]
    fn each_incarnations_last_count_is_added_up() {
        let removals = Removals::default();
        removals.record(1, 1, 5);
        removals.record(1, 1, 8);
        removals.record(2, 1, 4);
        // Node 1 restarted: its new incarnation counts from 0 again.
        removals.record(1, 2, 3);
        removals.record(1, 2, 10);
        assert_eq!(removals.by_node(), BTreeMap::from([(1, 18), (2, 4)]));
    }
}
