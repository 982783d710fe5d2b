//! A log-engine cluster (3 replicas unless asked otherwise) in one recovery mode: started,
//! filled with a state of a given size, and a replica killed and started again, its restart
//! timed or left to run.
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use logless_harness::probe;
use logless_harness::server::{self, ServerSpec};

use crate::compare::peers::{self, Proc};
use crate::failover::{find_leader, info_replication};
use crate::space::{disk_bytes, progress, spawn, wait_until, write_keys};

use super::Mode;

/// The bytes of each value of the state: Table II's puts.
pub const VALUE_BYTES: usize = 8 * 1024;
/// How long a restarted replica may take to vote and to serve.
const RESTART_LIMIT: Duration = Duration::from_secs(300);
/// How long every replica's process may live.
const PROCESS_LIMIT_S: u64 = 3_600;

/// The name of the `i`th key of the state (what `space` writes, so the GET probe is shared).
pub fn key(i: u64) -> String {
    format!("key:{i:012}")
}

/// The keys of a state of `mb` MB of [`VALUE_BYTES`] values (at least one).
pub fn keys_for(mb: u64) -> u64 {
    (mb * 1024 * 1024 / VALUE_BYTES as u64).max(1)
}

/// A running cluster.
pub struct Cluster {
    bin: PathBuf,
    specs: Vec<ServerSpec>,
    procs: Vec<Proc>,
    // Removed (with the replicas' data) when the cluster is dropped.
    _data: tempfile::TempDir,
}

/// How long a restarted replica took, from its start.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Restart {
    /// Until its INFO said it votes (`rebuilding` or `serving`).
    pub votes: Duration,
    /// Until a GET of a stored key was answered with the value.
    pub serves: Duration,
}

impl Cluster {
    /// Starts 3 replicas of `bin` in `mode` on `medium` and waits until they serve.
    pub fn start(bin: &Path, mode: &Mode, medium: &str) -> Result<Cluster, String> {
        Cluster::start_with(bin, mode, medium, 3)
    }

    /// Starts `replicas` replicas of `bin` in `mode` on `medium` and waits until they serve.
    pub fn start_with(
        bin: &Path,
        mode: &Mode,
        medium: &str,
        replicas: u16,
    ) -> Result<Cluster, String> {
        let data = tempfile::Builder::new()
            .prefix("logless-recovery-")
            .tempdir()
            .map_err(|e| e.to_string())?;
        let port = peers::free_ports(&server::PORT_OFFSETS, replicas)?;
        let specs: Vec<ServerSpec> = server::loopback_cluster(replicas, port, data.path(), medium)
            .into_iter()
            .map(|s| {
                s.flag("--engine", "multipaxos")
                    .flag("--recovery", mode.recovery)
                    .flag("--value-bytes-max", 1 << 20)
            })
            .collect();
        let procs = specs
            .iter()
            .map(|s| spawn(bin, s, PROCESS_LIMIT_S))
            .collect::<Result<Vec<_>, _>>()?;
        let cluster = Cluster {
            bin: bin.to_path_buf(),
            specs,
            procs,
            _data: data,
        };
        let clients = cluster.clients();
        wait_until(Duration::from_secs(60), "the replicas to serve", || {
            probe::cluster_serves(&clients, "recovery:ready", Duration::from_secs(5))
        })
        .map_err(|e| cluster.with_logs(e))?;
        Ok(cluster)
    }

    /// Every replica's client address.
    pub fn clients(&self) -> Vec<SocketAddr> {
        self.specs.iter().map(|s| s.client).collect()
    }

    /// Writes a state of `mb` MB: [`keys_for`] keys of [`VALUE_BYTES`] bytes through the
    /// leader.
    pub fn fill(&self, mb: u64, label: &str) -> Result<(), String> {
        let keys = keys_for(mb);
        let leader = self.clients()[find_leader(&self.clients())?];
        let bar = progress(keys, "filling the state");
        bar.set_message(format!("{label}: writing {mb} MB"));
        let value = vec![b'v'; VALUE_BYTES];
        let written = write_keys(leader, keys, key, &value, None, &bar);
        bar.finish_and_clear();
        written.map_err(|e| self.with_logs(e))
    }

    /// The bytes of replica `i`'s log (`<data_dir>/log`: records and snapshots).
    pub fn log_bytes(&self, i: usize) -> u64 {
        disk_bytes(&self.specs[i].dir.join("log"))
    }

    /// Replica `i`'s log directory (`<data_dir>/log`).
    pub fn log_dir(&self, i: usize) -> PathBuf {
        self.specs[i].dir.join("log")
    }

    /// What replica `i`'s process (its latest start) has written to stdout and stderr.
    pub fn log_text(&self, i: usize) -> String {
        std::fs::read_to_string(&self.procs[i].log).unwrap_or_default()
    }

    /// A follower (a replica whose INFO does not say it leads).
    pub fn follower(&self) -> Result<usize, String> {
        Ok((find_leader(&self.clients())? + 1) % self.specs.len())
    }

    /// The leader (the replica whose INFO says it leads).
    pub fn leader(&self) -> Result<usize, String> {
        find_leader(&self.clients())
    }

    /// Kills replica `i` with SIGKILL and waits until its client port is free.
    pub fn kill(&mut self, i: usize) -> Result<(), String> {
        self.procs[i].crash();
        // The killed process may hold its ports for a moment after its parent is reaped.
        let addr = self.specs[i].client;
        wait_until(Duration::from_secs(30), "the killed replica's port", || {
            TcpStream::connect_timeout(&addr, Duration::from_millis(100))
                .is_err_and(|e| e.kind() == std::io::ErrorKind::ConnectionRefused)
        })
    }

    /// Starts the killed replica `i` again (on its data directory), without waiting for it.
    pub fn start_again(&mut self, i: usize) -> Result<(), String> {
        self.procs[i] = spawn(&self.bin, &self.specs[i], PROCESS_LIMIT_S)?;
        Ok(())
    }

    /// Kills replica `i` with SIGKILL, starts it again and times it until it votes and until
    /// it serves.
    pub fn restart(&mut self, i: usize) -> Result<Restart, String> {
        self.kill(i)?;
        let started = Instant::now();
        self.start_again(i)?;
        let addr = self.specs[i].client;
        let mut votes = None;
        let probe_key = key(0);
        let serves = loop {
            if started.elapsed() > RESTART_LIMIT {
                return Err(self.with_logs(format!(
                    "the restarted replica {} did not serve within {} s",
                    i + 1,
                    RESTART_LIMIT.as_secs()
                )));
            }
            if votes.is_none() && info_replication(addr).is_ok_and(|info| votes_in(&info)) {
                votes = Some(started.elapsed());
            }
            if votes.is_some()
                && probe::resp_ask(addr, &["GET", &probe_key], Duration::from_secs(10))
                    .is_ok_and(|r| r.starts_with('$') && !r.starts_with("$-1"))
            {
                break started.elapsed();
            }
            std::thread::sleep(Duration::from_millis(2));
        };
        Ok(Restart {
            votes: votes.unwrap_or(serves),
            serves,
        })
    }

    /// `error` with the end of every replica's log.
    pub fn with_logs(&self, error: String) -> String {
        peers::with_logs(&self.procs, error)
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for p in self.procs.iter_mut() {
            p.stop(Duration::from_secs(10));
        }
    }
}

/// Whether INFO `replication` text says the replica takes part in Paxos: `rebuilding`
/// (mPaxos, its state machine not back yet) or `serving`; not `recovering` (EpochSS before
/// its peers gave it the state) nor `state_lost`.
pub fn votes_in(info: &str) -> bool {
    info.lines()
        .filter_map(|l| l.trim_end().strip_prefix("log_state:"))
        .any(|s| s == "rebuilding" || s == "serving")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn votes_is_read_from_log_state() {
        let info = |state: &str| format!("# Replication\r\nrole:master\r\nlog_state:{state}\r\n");
        assert!(votes_in(&info("serving")));
        assert!(votes_in(&info("rebuilding")));
        assert!(!votes_in(&info("recovering")));
        assert!(!votes_in(&info("state_lost")));
        assert!(!votes_in("# Replication\r\nrole:master\r\n"));
    }

    #[test]
    fn a_state_is_whole_values() {
        assert_eq!(keys_for(10), 1280);
        assert_eq!(keys_for(0), 1);
        assert_eq!(key(7), "key:000000000007");
    }
}
