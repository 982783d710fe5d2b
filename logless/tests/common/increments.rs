//! Concurrent INCRs against replicas killed with kill -9 and restarted: the helpers of the
//! recovery tests (`recovery_epoch.rs`, `recovery_pmem.rs`).
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use redis::Commands;

use super::Cluster;

/// What a client that INCRs one counter saw.
#[derive(Default)]
pub struct Increments {
    /// The values acknowledged INCRs returned.
    pub acked: Vec<i64>,
    /// INCRs whose outcome is unknown (timed out after they were proposed).
    pub uncertain: usize,
}

/// INCRs `n` through `con` until `stop`.
pub fn increment(mut con: redis::Connection, stop: Arc<AtomicBool>) -> JoinHandle<Increments> {
    std::thread::spawn(move || {
        let mut seen = Increments::default();
        while !stop.load(Ordering::Relaxed) {
            match con.incr::<_, _, i64>("n", 1) {
                Ok(value) => seen.acked.push(value),
                Err(e) if e.to_string().contains("UNCERTAIN") => seen.uncertain += 1,
                Err(e) => panic!("an INCR failed: {e}"),
            }
        }
        seen
    })
}

/// Kills replica `i` with kill -9, starts it again and waits until it serves (it answers
/// LOADING while it recovers from its peers).
pub fn kill_and_restart(cluster: &mut Cluster, i: usize) {
    cluster.kill(i);
    std::thread::sleep(Duration::from_millis(300));
    cluster.spawn(i);
    cluster.wait_serving(Duration::from_secs(20));
}

/// One line `name:value` of an INFO section.
pub fn info_field(con: &mut redis::Connection, section: &str, name: &str) -> String {
    let info: String = redis::cmd("INFO").arg(section).query(con).unwrap();
    let prefix = format!("{name}:");
    info.lines()
        .find_map(|l| l.strip_prefix(prefix.as_str()))
        .unwrap_or_else(|| panic!("no {name} in\n{info}"))
        .to_owned()
}

/// Two clients INCR `n` through replica `through` while each replica of `killed` in turn is
/// killed with kill -9 and restarted (700 ms apart); returns the values the acknowledged INCRs
/// returned, sorted and checked distinct, and how many INCRs had an unknown outcome.
pub fn increments_across_kills(
    cluster: &mut Cluster,
    through: usize,
    killed: &[usize],
) -> (Vec<i64>, usize) {
    let stop = Arc::new(AtomicBool::new(false));
    let clients: Vec<_> = (0..2)
        .map(|_| increment(cluster.connect(through), stop.clone()))
        .collect();
    std::thread::sleep(Duration::from_millis(700));
    for &i in killed {
        kill_and_restart(cluster, i);
        std::thread::sleep(Duration::from_millis(700));
    }
    stop.store(true, Ordering::Relaxed);
    let mut acked = Vec::new();
    let mut uncertain = 0;
    for client in clients {
        let seen = client.join().unwrap();
        acked.extend(seen.acked);
        uncertain += seen.uncertain;
    }
    assert!(acked.len() > 20, "only {} INCRs answered", acked.len());
    acked.sort_unstable();
    let before = acked.len();
    acked.dedup();
    assert_eq!(acked.len(), before, "two INCRs returned the same value");
    (acked, uncertain)
}

/// Checks that every replica, restarted ones included, holds every acknowledged increment
/// (`acked`, sorted) and that no increment was applied that no client sent.
pub fn assert_no_increment_lost(cluster: &Cluster, acked: &[i64], uncertain: usize) {
    let highest = *acked.last().expect("some INCR acknowledged");
    for i in 0..cluster.replicas.len() {
        let n: i64 = cluster.connect(i).get("n").unwrap();
        assert!(
            n >= highest,
            "replica {}: an acknowledged INCR was lost: {n} < {highest}",
            i + 1
        );
        assert!(
            n as usize <= acked.len() + uncertain,
            "replica {}: {n} increments applied, {} sent",
            i + 1,
            acked.len() + uncertain
        );
    }
}

/// Two clients INCR through replica 2 while replica 3 (a follower) and then replica 1 (the
/// leader of the first view) are killed with kill -9 and restarted; checks that no
/// acknowledged increment was lost and that the restarted replicas serve (a write through one
/// is seen through another), and returns a connection to each replica.
pub fn follower_then_leader_killed(cluster: &mut Cluster) -> Vec<redis::Connection> {
    let (acked, uncertain) = increments_across_kills(cluster, 1, &[2, 0]);
    assert_no_increment_lost(cluster, &acked, uncertain);
    let mut cons: Vec<redis::Connection> = (0..3).map(|i| cluster.connect(i)).collect();
    assert_eq!(
        cons[2].incr::<_, _, i64>("n", 1).unwrap(),
        cons[0].get::<_, i64>("n").unwrap()
    );
    cons
}
