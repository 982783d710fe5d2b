//! Job 1, the restart curves: per mode and state size, a follower of a filled cluster killed
//! and started again, timed until it votes and until it serves; with the parts of the restart
//! the replica's own start lines give (`logless::restart` at info), the time one read of its
//! snapshot file takes, and a memory bandwidth measured in the same run to set them against.
use std::path::Path;
use std::time::Instant;

use serde::Serialize;

use super::cluster::Cluster;
use super::Mode;

/// One restart.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
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
    /// The parts, from the replica's own start lines (`None` where it logged none).
    pub parts: Parts,
    /// The newest snapshot file in its log after it served, bytes (0: none).
    pub snapshot_file_bytes: u64,
    /// One read of that file from the medium (the page cache for `emulp` and `mmap`), ms.
    pub snapshot_file_read_ms: Option<f64>,
    /// Catch-up queries it sent from its start until it served (INFO
    /// `log_catch_up_queries_total` just after).
    pub catch_up_queries: Option<u64>,
    /// Snapshots it installed from a peer from its start until it served (INFO
    /// `log_snapshots_installed_total` just after).
    pub snapshots_installed: Option<u64>,
}

/// The parts of a restart, from the restarted replica's start lines: milliseconds since the
/// node began opening its log (a little after the process started) unless said otherwise.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Parts {
    /// The storage layer's open: every segment scanned and its records' checksums verified,
    /// and every snapshot file's checksum (a duration).
    pub storage_ms: Option<f64>,
    /// The newest snapshot's bytes as the log holds it.
    pub snapshot_bytes: Option<u64>,
    /// That snapshot decoded out of the medium (its state copied; a duration).
    pub snapshot_decode_ms: Option<f64>,
    /// The log's records decoded and replayed (a duration).
    pub records_ms: Option<f64>,
    /// The log opened and the replica resumed (or recovered): the end of the open.
    pub log_ms: Option<f64>,
    /// The snapshot restored into a new state machine, off the loop (mPaxos; a duration).
    pub restore_ms: Option<f64>,
    /// When that restore ended.
    pub restored_at_ms: Option<f64>,
    /// The decided instances after the snapshot executed once the machine was handed over
    /// (a duration), and how many.
    pub replay_ms: Option<f64>,
    /// How many instances that replay executed.
    pub replayed_instances: Option<u64>,
    /// When the machine was handed over (the replica executes and serves from there).
    pub rebuilt_at_ms: Option<f64>,
    /// Whether the replica kept the machine rebuilt from its own snapshot (`false`: a peer's
    /// snapshot installed meanwhile had ended the rebuild, and the machine was dropped).
    pub own_snapshot: Option<bool>,
    /// Snapshots installed from a peer before the replica served.
    pub peer_snapshots: u64,
    /// Its first vote (an Accepted written).
    pub first_vote_ms: Option<f64>,
    /// Its first answer to a client.
    pub first_answer_ms: Option<f64>,
}

/// A simple memory bandwidth of this machine, measured in the run: the restart parts are set
/// against it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct MemoryBandwidth {
    /// The buffer's bytes.
    pub bytes: u64,
    /// The best of the tries, copying one buffer into another (memcpy), MB/s (10^6 bytes).
    pub copy_mb_s: f64,
    /// The best of the tries, reading a buffer (summing its words), MB/s.
    pub read_mb_s: f64,
}

/// Measures [`MemoryBandwidth`] on buffers of `bytes`, the best of `tries`.
pub fn memory_bandwidth(bytes: usize, tries: u32) -> MemoryBandwidth {
    let words = bytes / 8;
    let src: Vec<u64> = (0..words as u64).collect();
    let mut dst = vec![0u64; words];
    let mut copy_s = f64::INFINITY;
    let mut read_s = f64::INFINITY;
    for _ in 0..tries.max(1) {
        let t = Instant::now();
        dst.copy_from_slice(&src);
        std::hint::black_box(&mut dst);
        copy_s = copy_s.min(t.elapsed().as_secs_f64());
        let t = Instant::now();
        let sum = std::hint::black_box(&src)
            .iter()
            .fold(0u64, |a, w| a.wrapping_add(*w));
        std::hint::black_box(sum);
        read_s = read_s.min(t.elapsed().as_secs_f64());
    }
    let mb = (words * 8) as f64 / 1e6;
    MemoryBandwidth {
        bytes: (words * 8) as u64,
        copy_mb_s: mb / copy_s,
        read_mb_s: mb / read_s,
    }
}

/// Reads the start lines of a replica's log (`text`, tracing's text format) into [`Parts`].
pub fn parts_from_log(text: &str) -> Parts {
    let mut p = Parts::default();
    for line in text.lines().filter(|l| l.contains("logless::restart")) {
        let f = |key: &str| field(line, key).and_then(|v| v.parse::<f64>().ok());
        let n = |key: &str| field(line, key).and_then(|v| v.parse::<u64>().ok());
        if line.contains("resumed the log") || line.contains("recovered the log") {
            p.storage_ms = f("storage_ms");
            p.snapshot_bytes = n("snapshot_bytes");
            p.snapshot_decode_ms = f("snapshot_ms");
            p.records_ms = f("records_ms");
            p.log_ms = f("ms");
        } else if line.contains("restored the persistent snapshot") {
            p.restore_ms = f("restore_ms");
            p.restored_at_ms = f("since_start_ms");
        } else if line.contains("rebuilt the state machine") {
            p.replay_ms = f("replay_ms");
            p.replayed_instances = n("replayed_instances");
            p.rebuilt_at_ms = f("since_start_ms");
            p.own_snapshot = field(line, "taken").map(|v| v == "true");
        } else if line.contains("installed a snapshot from a peer") {
            p.peer_snapshots += 1;
        } else if line.contains("voted for the first time") && p.first_vote_ms.is_none() {
            p.first_vote_ms = f("since_start_ms");
        } else if line.contains("answered the first client operation") {
            p.first_answer_ms = f("since_start_ms");
        }
    }
    p
}

/// The value of `key=value` among a text line's fields.
fn field<'a>(line: &'a str, key: &str) -> Option<&'a str> {
    line.split_whitespace()
        .filter_map(|t| t.split_once('='))
        .find(|(k, _)| *k == key)
        .map(|(_, v)| v)
}

/// The newest snapshot file (`snap-<index>`, the highest index) in `log_dir`: its bytes and
/// how long one read of it took, ms.
fn read_newest_snapshot(log_dir: &Path) -> (u64, Option<f64>) {
    let newest = std::fs::read_dir(log_dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            let index: u64 = name.strip_prefix("snap-")?.parse().ok()?;
            Some((index, e.path()))
        })
        .max_by_key(|(index, _)| *index);
    let Some((_, path)) = newest else {
        return (0, None);
    };
    let t = Instant::now();
    match std::fs::read(&path) {
        Ok(bytes) => {
            let ms = t.elapsed().as_secs_f64() * 1e3;
            (std::hint::black_box(bytes).len() as u64, Some(ms))
        }
        Err(_) => (0, None),
    }
}

/// The value of INFO field `name` (`name:value` lines) as a number.
fn info_number(info: &str, name: &str) -> Option<u64> {
    info.lines()
        .filter_map(|l| l.trim_end().split_once(':'))
        .find(|(k, _)| *k == name)
        .and_then(|(_, v)| v.parse().ok())
}

/// Measures every mode at every size in `sizes_mb`, one fresh cluster each; the restarted
/// replica's start lines (and any warning or error it logged) go to
/// `out/startlines-<mode>-<mb>.txt`.
pub fn curves(
    bin: &Path,
    modes: &[Mode],
    sizes_mb: &[u64],
    out: &Path,
) -> Result<Vec<RestartPoint>, String> {
    let mut points = Vec::new();
    for mode in modes {
        for &mb in sizes_mb {
            let label = format!("restart {} {mb} MB", mode.recovery);
            let mut cluster = Cluster::start(bin, mode, mode.restart_medium)?;
            cluster.fill(mb, &label)?;
            let follower = cluster.follower()?;
            let log_bytes = cluster.log_bytes(follower);
            let r = cluster.restart(follower)?;
            let info =
                crate::failover::info_replication(cluster.clients()[follower]).unwrap_or_default();
            let log = cluster.log_text(follower);
            let parts = parts_from_log(&log);
            let lines: String = log
                .lines()
                .filter(|l| {
                    l.contains("logless::restart") || l.contains("WARN") || l.contains("ERROR")
                })
                .map(|l| format!("{l}\n"))
                .collect();
            let name = format!("startlines-{}-{mb}.txt", mode.recovery);
            std::fs::write(out.join(&name), lines).map_err(|e| format!("{name}: {e}"))?;
            let (snapshot_file_bytes, snapshot_file_read_ms) =
                read_newest_snapshot(&cluster.log_dir(follower));
            let point = RestartPoint {
                mode: mode.recovery,
                medium: mode.restart_medium,
                state_mb: mb,
                log_bytes,
                votes_ms: r.votes.as_secs_f64() * 1e3,
                serves_ms: r.serves.as_secs_f64() * 1e3,
                parts,
                snapshot_file_bytes,
                snapshot_file_read_ms,
                catch_up_queries: info_number(&info, "log_catch_up_queries_total"),
                snapshots_installed: info_number(&info, "log_snapshots_installed_total"),
            };
            println!(
                "{label}: votes after {:.0} ms, serves after {:.0} ms (log {:.1} MB, snapshot \
                 {:.1} MB read in {:.0} ms; {})",
                point.votes_ms,
                point.serves_ms,
                log_bytes as f64 / 1e6,
                snapshot_file_bytes as f64 / 1e6,
                snapshot_file_read_ms.unwrap_or(f64::NAN),
                match (
                    point.parts.own_snapshot,
                    point
                        .parts
                        .peer_snapshots
                        .max(point.snapshots_installed.unwrap_or(0)),
                ) {
                    (_, n) if n > 0 => format!("installed {n} snapshot(s) from a peer"),
                    (Some(true), _) => "rebuilt from its own snapshot".into(),
                    _ => "no rebuild logged".into(),
                }
            );
            points.push(point);
        }
    }
    Ok(points)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_parts_are_read_from_the_start_lines() {
        let log = "\
2026-11-27T18:00:00.000001Z  INFO logless::restart: resumed the log from persistent memory (mPaxos): voting at once node=2 incarnation=3 view=4 storage_ms=120.5 snapshot_bytes=210000000 snapshot_ms=40.25 records=900 records_ms=300 log_ms=461 ms=470
2026-11-27T18:00:00.100000Z  INFO logless::restart: voted for the first time since the start since_start_ms=480
2026-11-27T18:00:00.200000Z  INFO logless::restart: restored the persistent snapshot into a new state machine (mPaxos) state_bytes=210000000 keys=25600 restore_ms=350.5 since_start_ms=821
2026-11-27T18:00:00.300000Z  INFO logless::restart: rebuilt the state machine from persistent memory: executing and serving since_start_ms=830 taken=true replayed_instances=12 replay_ms=9.5
2026-11-27T18:00:00.400000Z  INFO logless::restart: answered the first client operation since the start since_start_ms=835
2026-11-27T18:00:00.500000Z  INFO logless_node::node: something else ms=9999
";
        let p = parts_from_log(log);
        assert_eq!(p.storage_ms, Some(120.5));
        assert_eq!(p.snapshot_bytes, Some(210_000_000));
        assert_eq!(p.snapshot_decode_ms, Some(40.25));
        assert_eq!(p.records_ms, Some(300.0));
        assert_eq!(p.log_ms, Some(470.0));
        assert_eq!(p.restore_ms, Some(350.5));
        assert_eq!(p.restored_at_ms, Some(821.0));
        assert_eq!(p.replay_ms, Some(9.5));
        assert_eq!(p.replayed_instances, Some(12));
        assert_eq!(p.rebuilt_at_ms, Some(830.0));
        assert_eq!(p.own_snapshot, Some(true));
        assert_eq!(p.peer_snapshots, 0);
        assert_eq!(p.first_vote_ms, Some(480.0));
        assert_eq!(p.first_answer_ms, Some(835.0));
        assert_eq!(parts_from_log(""), Parts::default());
    }

    #[test]
    fn info_numbers_are_read_by_name() {
        let info =
            "# Replication\r\nlog_catch_up_queries_total:3\r\nlog_snapshots_installed_total:0\r\n";
        assert_eq!(info_number(info, "log_catch_up_queries_total"), Some(3));
        assert_eq!(info_number(info, "log_snapshots_installed_total"), Some(0));
        assert_eq!(info_number(info, "log_missing"), None);
    }

    #[test]
    fn memory_bandwidth_is_positive() {
        let m = memory_bandwidth(1 << 20, 2);
        assert_eq!(m.bytes, 1 << 20);
        assert!(m.copy_mb_s > 0.0 && m.read_mb_s > 0.0);
    }
}
