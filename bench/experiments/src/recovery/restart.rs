//! Job 1, the restart curves: per mode and state size, a follower of a filled cluster killed
//! and started again, timed until it votes and until it serves.
use std::path::Path;

use serde::Serialize;

use super::cluster::Cluster;
use super::Mode;

/// One restart.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct RestartPoint {
    /// The `--recovery` mode.
    pub mode: &'static str,
    /// The `--durability` medium.
    pub medium: &'static str,
    /// The state written before the kill, MB.
    pub state_mb: u64,
    /// The restarted replica's log (`<data_dir>/log`) when it was killed, bytes: the records
    /// and snapshots a `fullss` or `pmem` restart reads (none under `epoch`).
    pub log_bytes: u64,
    /// From its start until its INFO said it votes, ms.
    pub votes_ms: f64,
    /// From its start until a GET of a stored key was answered, ms.
    pub serves_ms: f64,
}

/// Measures every mode at every size in `sizes_mb`, one fresh cluster each.
pub fn curves(bin: &Path, modes: &[Mode], sizes_mb: &[u64]) -> Result<Vec<RestartPoint>, String> {
    let mut points = Vec::new();
    for mode in modes {
        for &mb in sizes_mb {
            let label = format!("restart {} {mb} MB", mode.recovery);
            let mut cluster = Cluster::start(bin, mode, mode.restart_medium)?;
            cluster.fill(mb, &label)?;
            let follower = cluster.follower()?;
            let log_bytes = cluster.log_bytes(follower);
            let r = cluster.restart(follower)?;
            let point = RestartPoint {
                mode: mode.recovery,
                medium: mode.restart_medium,
                state_mb: mb,
                log_bytes,
                votes_ms: r.votes.as_secs_f64() * 1e3,
                serves_ms: r.serves.as_secs_f64() * 1e3,
            };
            println!(
                "{label}: votes after {:.0} ms, serves after {:.0} ms (log {:.1} MB)",
                point.votes_ms,
                point.serves_ms,
                log_bytes as f64 / 1e6
            );
            points.push(point);
        }
    }
    Ok(points)
}
