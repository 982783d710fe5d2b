//! What a run measured.
use std::collections::BTreeMap;
use std::fmt;

use hdrhistogram::Histogram;
use logless_rmw::proposer::ProposerStats;

/// Counters and latencies of one run.
#[derive(Clone, Debug)]
pub struct RunStats {
    /// Simulated time the run took (µs).
    pub sim_time_us: u64,
    /// Commands acknowledged to clients.
    pub acknowledged: u64,
    /// Commands refused as not applied.
    pub not_applied: u64,
    /// Commands with unknown outcome.
    pub unknown: u64,
    /// Messages sent (all nodes, including to self).
    pub messages: u64,
    /// Persist batches that wrote something.
    pub flushes: u64,
    /// Broken links detected by receivers.
    pub link_breaks: u64,
    /// Replica crashes injected.
    pub crashes: u64,
    /// Partition changes injected.
    pub partitions: u64,
    /// The proposers' counters, summed over nodes alive at the end.
    pub proposer: ProposerStats,
    /// Client-observed latency of acknowledged commands (µs).
    pub latency_us: Histogram<u64>,
    started_us: BTreeMap<u32, u64>,
}

impl Default for RunStats {
    fn default() -> RunStats {
        RunStats {
            sim_time_us: 0,
            acknowledged: 0,
            not_applied: 0,
            unknown: 0,
            messages: 0,
            flushes: 0,
            link_breaks: 0,
            crashes: 0,
            partitions: 0,
            proposer: ProposerStats::default(),
            latency_us: Histogram::new_with_bounds(1, 3_600_000_000, 3).expect("valid histogram"),
            started_us: BTreeMap::new(),
        }
    }
}

impl RunStats {
    pub(crate) fn latency_start(&mut self, client: u32, now_us: u64) {
        self.started_us.insert(client, now_us);
    }

    pub(crate) fn latency_end(&mut self, client: u32, now_us: u64) {
        if let Some(start) = self.started_us.remove(&client) {
            self.latency_us.saturating_record(now_us - start);
        }
    }

    /// Messages per acknowledged command.
    pub fn messages_per_command(&self) -> f64 {
        self.messages as f64 / self.acknowledged.max(1) as f64
    }

    /// Acknowledged commands per simulated second.
    pub fn throughput_per_sim_s(&self) -> f64 {
        self.acknowledged as f64 / (self.sim_time_us.max(1) as f64 / 1e6)
    }
}

impl fmt::Display for RunStats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let p = &self.proposer;
        let q = |x: f64| self.latency_us.value_at_quantile(x) as f64 / 1000.0;
        writeln!(
            f,
            "{:<28}{:>14}",
            "operations acknowledged", self.acknowledged
        )?;
        writeln!(
            f,
            "{:<28}{:>14}",
            "not applied / unknown",
            format!("{} / {}", self.not_applied, self.unknown)
        )?;
        writeln!(
            f,
            "{:<28}{:>14.0}",
            "throughput (ops/sim s)",
            self.throughput_per_sim_s()
        )?;
        writeln!(
            f,
            "{:<28}{:>14}",
            "latency p50/p99/max (ms)",
            format!("{:.2}/{:.2}/{:.2}", q(0.5), q(0.99), q(1.0))
        )?;
        writeln!(
            f,
            "{:<28}{:>14}",
            "reads / writes (batches)",
            format!("{} / {}", p.reads, p.writes)
        )?;
        writeln!(f, "{:<28}{:>14}", "fast writes", p.fast_writes)?;
        writeln!(f, "{:<28}{:>14}", "reads widened", p.reads_widened)?;
        writeln!(f, "{:<28}{:>14}", "fast writes widened", p.writes_widened)?;
        writeln!(f, "{:<28}{:>14}", "retries", p.retries)?;
        writeln!(f, "{:<28}{:>14}", "write-throughs", p.write_throughs)?;
        writeln!(f, "{:<28}{:>14}", "rejections (NACK)", p.nacks)?;
        writeln!(
            f,
            "{:<28}{:>14.2}",
            "messages per operation",
            self.messages_per_command()
        )?;
        write!(
            f,
            "{:<28}{:>14}",
            "faults: crashes/partitions/link breaks",
            format!("{}/{}/{}", self.crashes, self.partitions, self.link_breaks)
        )
    }
}
