//! The log engine's tuning: its timeouts, batches, window and snapshot policy, as the `[multipaxos]`
//! table of the configuration file and `--multipaxos NAME=VALUE` flags set them.
//!
//! ```toml
//! [multipaxos]
//! window_instances = 10          # instances a leader has proposed and not yet seen decided
//! batch_bytes_max = 65536        # a batch closes once its requests take this many bytes
//! batch_requests_max = 256       # ... or hold this many requests
//! batch_delay_ms = 1             # ... or its oldest request waited this long
//! heartbeat_interval_ms = 50     # how often the leader says it is alive
//! suspect_timeout_ms = 300       # silence after which a follower suspects the leader
//! retransmit_interval_ms = 100   # unanswered Prepares and Proposes are sent again
//! restart_quiet_ms = 2000        # after a restart, no view change this long unless a leader is heard
//! catch_up_timeout_ms = 200      # a catch-up query unanswered this long asks another replica
//! snapshot_log_bytes_min = 1048576  # the log grows at least this much between snapshots
//! snapshot_ratio_percent = 100   # ... and by this share of the last snapshot's size
//! segment_bytes = 67108864       # the log's segment files (raised to twice the largest record)
//! snapshot_background = 1        # snapshots encoded and written off the loop (0: in the loop)
//! ```
//!
//! The defaults are the engine's own ([`Config::new`]); every replica of a cluster should use
//! the same values (a follower whose `suspect_timeout_ms` is shorter than the others' starts
//! view changes sooner, which is safe but churns).
use logless_multipaxos::config::Config;
use logless_multipaxos::ids::NodeId;
use logless_storage::segment_log::SEGMENT_BYTES_DEFAULT;
use serde::Deserialize;

use crate::config::ConfigError;

/// The log engine's settings (see the module documentation).
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, default)]
pub struct LogTuning {
    /// The most instances a leader has proposed and not yet seen decided.
    pub window_instances: u64,
    /// A batch is closed once its requests take this many bytes.
    pub batch_bytes_max: u64,
    /// A batch is closed once it holds this many requests.
    pub batch_requests_max: u64,
    /// A batch is closed once its oldest request has waited this long.
    pub batch_delay_ms: u64,
    /// How often the leader sends Alive.
    pub heartbeat_interval_ms: u64,
    /// How long a follower waits without hearing from its leader before it suspects it.
    pub suspect_timeout_ms: u64,
    /// How often unanswered Prepares and Proposes are sent again.
    pub retransmit_interval_ms: u64,
    /// After a restart, how long the replica starts no view change unless it hears from a
    /// leader first.
    pub restart_quiet_ms: u64,
    /// How long a catch-up query waits for its response before another replica is asked.
    pub catch_up_timeout_ms: u64,
    /// A snapshot is never taken before the log has grown by this many bytes since the last.
    pub snapshot_log_bytes_min: u64,
    /// A snapshot is taken once the log has grown since the last by this percentage of the
    /// last snapshot's size.
    pub snapshot_ratio_percent: u64,
    /// The size of a log segment file, allocated whole when the log starts it (raised to
    /// twice the largest record, see `node::log_options`): the step in which the log takes
    /// disk space.
    pub segment_bytes: u64,
    /// 1: under FullSS and mPaxos the periodic snapshots are encoded and written off the log's
    /// loop (`crate::log_turn`, "Snapshots off the loop"); 0: in the turn that takes them, as
    /// before (to compare).
    pub snapshot_background: u64,
}

/// The shortest interval a timer may have: the log's loop turns every 5 ms
/// (`crate::log_loop::TICK_MS`), so a shorter one would fire no sooner.
const TIMER_MS_MIN: u64 = 5;

/// The longest `restart_quiet_ms`: a cluster restarted whole whose last leader stays down
/// fails over only after it.
const RESTART_QUIET_MS_MAX: u64 = 60_000;

/// The smallest `segment_bytes`.
const SEGMENT_BYTES_MIN: u64 = 1 << 20;

/// The largest `segment_bytes` (a segment's offsets are 32 bits).
const SEGMENT_BYTES_LIMIT: u64 = u32::MAX as u64;

/// The largest `batch_bytes_max`.
pub const BATCH_BYTES_MAX_LIMIT: u64 = 64 << 20;

impl Default for LogTuning {
    fn default() -> LogTuning {
        let c = Config::new(Vec::new(), NodeId(0));
        LogTuning {
            window_instances: c.window_instances,
            batch_bytes_max: c.batch_bytes_max as u64,
            batch_requests_max: c.batch_requests_max as u64,
            batch_delay_ms: c.batch_delay_ms,
            heartbeat_interval_ms: c.heartbeat_interval_ms,
            suspect_timeout_ms: c.suspect_timeout_ms,
            retransmit_interval_ms: c.retransmit_interval_ms,
            restart_quiet_ms: c.restart_quiet_ms,
            catch_up_timeout_ms: c.catch_up_timeout_ms,
            snapshot_log_bytes_min: c.snapshot_log_bytes_min,
            snapshot_ratio_percent: c.snapshot_ratio_percent,
            segment_bytes: SEGMENT_BYTES_DEFAULT as u64,
            snapshot_background: 1,
        }
    }
}

impl LogTuning {
    /// The setting called `name` (as in the file).
    fn field(&mut self, name: &str) -> Option<&mut u64> {
        Some(match name {
            "window_instances" => &mut self.window_instances,
            "batch_bytes_max" => &mut self.batch_bytes_max,
            "batch_requests_max" => &mut self.batch_requests_max,
            "batch_delay_ms" => &mut self.batch_delay_ms,
            "heartbeat_interval_ms" => &mut self.heartbeat_interval_ms,
            "suspect_timeout_ms" => &mut self.suspect_timeout_ms,
            "retransmit_interval_ms" => &mut self.retransmit_interval_ms,
            "restart_quiet_ms" => &mut self.restart_quiet_ms,
            "catch_up_timeout_ms" => &mut self.catch_up_timeout_ms,
            "snapshot_log_bytes_min" => &mut self.snapshot_log_bytes_min,
            "snapshot_ratio_percent" => &mut self.snapshot_ratio_percent,
            "segment_bytes" => &mut self.segment_bytes,
            "snapshot_background" => &mut self.snapshot_background,
            _ => return None,
        })
    }

    /// Sets one setting from a flag written `NAME=VALUE` (a name of the `[multipaxos]` table,
    /// a whole number).
    pub fn set(&mut self, assignment: &str) -> Result<(), ConfigError> {
        let invalid = |m: String| Err(ConfigError::Invalid(m));
        let Some((name, value)) = assignment.split_once('=') else {
            return invalid(format!(
                "--multipaxos {assignment:?} is not written NAME=VALUE"
            ));
        };
        let (name, value) = (name.trim(), value.trim());
        let Some(field) = self.field(name) else {
            return invalid(format!(
                "--multipaxos: no setting {name:?}; the settings are window_instances, \
                 batch_bytes_max, batch_requests_max, batch_delay_ms, heartbeat_interval_ms, \
                 suspect_timeout_ms, retransmit_interval_ms, restart_quiet_ms, catch_up_timeout_ms, \
                 snapshot_log_bytes_min, snapshot_ratio_percent, segment_bytes and \
                 snapshot_background"
            ));
        };
        match value.parse() {
            Ok(v) => {
                *field = v;
                Ok(())
            }
            Err(_) => invalid(format!(
                "--multipaxos {name}: {value:?} is not a whole number"
            )),
        }
    }

    /// Checks the settings; with `request_timeout_ms`, the node's when it runs the log engine,
    /// also that a failover fits in it.
    pub fn validate(&self, request_timeout_ms: Option<u64>) -> Result<(), ConfigError> {
        let check = |ok: bool, message: String| {
            if ok {
                Ok(())
            } else {
                Err(ConfigError::Invalid(format!("multipaxos.{message}")))
            }
        };
        check(
            (1..=10_000).contains(&self.window_instances),
            format!(
                "window_instances must be between 1 and 10000, not {}",
                self.window_instances
            ),
        )?;
        check(
            (1024..=BATCH_BYTES_MAX_LIMIT).contains(&self.batch_bytes_max),
            format!(
                "batch_bytes_max must be between 1024 and {BATCH_BYTES_MAX_LIMIT}, not {}",
                self.batch_bytes_max
            ),
        )?;
        check(
            (1..=65_536).contains(&self.batch_requests_max),
            format!(
                "batch_requests_max must be between 1 and 65536, not {}",
                self.batch_requests_max
            ),
        )?;
        check(
            self.batch_delay_ms <= 1_000,
            format!(
                "batch_delay_ms must be at most 1000, not {}",
                self.batch_delay_ms
            ),
        )?;
        for (name, value) in [
            ("heartbeat_interval_ms", self.heartbeat_interval_ms),
            ("retransmit_interval_ms", self.retransmit_interval_ms),
            ("catch_up_timeout_ms", self.catch_up_timeout_ms),
        ] {
            check(
                value >= TIMER_MS_MIN,
                format!("{name} must be at least {TIMER_MS_MIN}, not {value}"),
            )?;
        }
        check(
            self.suspect_timeout_ms >= 2 * self.heartbeat_interval_ms,
            format!(
                "suspect_timeout_ms ({}) must be at least twice heartbeat_interval_ms ({}): \
                 else a live leader is suspected between two heartbeats",
                self.suspect_timeout_ms, self.heartbeat_interval_ms
            ),
        )?;
        if let Some(request_timeout_ms) = request_timeout_ms {
            check(
                self.suspect_timeout_ms < request_timeout_ms,
                format!(
                    "suspect_timeout_ms ({}) must be below request_timeout_ms \
                     ({request_timeout_ms}): else every command in flight at a leader's \
                     failure times out",
                    self.suspect_timeout_ms
                ),
            )?;
        }
        check(
            self.restart_quiet_ms <= RESTART_QUIET_MS_MAX,
            format!(
                "restart_quiet_ms must be at most {RESTART_QUIET_MS_MAX}, not {}",
                self.restart_quiet_ms
            ),
        )?;
        check(
            (SEGMENT_BYTES_MIN..=SEGMENT_BYTES_LIMIT).contains(&self.segment_bytes),
            format!(
                "segment_bytes must be between {SEGMENT_BYTES_MIN} and {SEGMENT_BYTES_LIMIT}, \
                 not {}",
                self.segment_bytes
            ),
        )?;
        check(
            self.snapshot_ratio_percent >= 1,
            "snapshot_ratio_percent must be at least 1".into(),
        )?;
        check(
            self.snapshot_background <= 1,
            format!(
                "snapshot_background must be 0 or 1, not {}",
                self.snapshot_background
            ),
        )
    }

    /// Sets these values in the engine's configuration.
    pub fn apply(&self, engine: &mut Config) {
        let size = |v: u64| usize::try_from(v).unwrap_or(usize::MAX);
        engine.window_instances = self.window_instances;
        engine.batch_bytes_max = size(self.batch_bytes_max);
        engine.batch_requests_max = size(self.batch_requests_max);
        engine.batch_delay_ms = self.batch_delay_ms;
        engine.heartbeat_interval_ms = self.heartbeat_interval_ms;
        engine.suspect_timeout_ms = self.suspect_timeout_ms;
        engine.retransmit_interval_ms = self.retransmit_interval_ms;
        engine.restart_quiet_ms = self.restart_quiet_ms;
        engine.catch_up_timeout_ms = self.catch_up_timeout_ms;
        engine.snapshot_log_bytes_min = self.snapshot_log_bytes_min;
        engine.snapshot_ratio_percent = self.snapshot_ratio_percent;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_defaults_are_the_engines_and_valid() {
        let tuning = LogTuning::default();
        tuning.validate(Some(5_000)).unwrap();
        let mut engine = Config::new(vec![NodeId(1)], NodeId(1));
        let before = engine.clone();
        tuning.apply(&mut engine);
        assert_eq!(engine, before);
    }

    #[test]
    fn flags_set_by_name_and_bad_values_are_refused_with_the_reason() {
        let mut tuning = LogTuning::default();
        tuning.set("suspect_timeout_ms=150").unwrap();
        tuning.set(" window_instances = 32 ").unwrap();
        assert_eq!(
            (tuning.suspect_timeout_ms, tuning.window_instances),
            (150, 32)
        );
        let mut engine = Config::new(vec![NodeId(1)], NodeId(1));
        tuning.apply(&mut engine);
        assert_eq!(
            (engine.suspect_timeout_ms, engine.window_instances),
            (150, 32)
        );

        let error = |assignment: &str| {
            LogTuning::default()
                .set(assignment)
                .unwrap_err()
                .to_string()
        };
        assert!(error("suspect_timeout_ms").contains("NAME=VALUE"));
        assert!(error("suspect_timeout=1").contains("no setting \"suspect_timeout\""));
        assert!(error("batch_delay_ms=-1").contains("not a whole number"));

        let invalid = |edit: fn(&mut LogTuning)| {
            let mut tuning = LogTuning::default();
            edit(&mut tuning);
            tuning.validate(Some(5_000)).unwrap_err().to_string()
        };
        assert!(invalid(|t| t.window_instances = 0).contains("multipaxos.window_instances"));
        assert!(invalid(|t| t.batch_bytes_max = 10).contains("batch_bytes_max"));
        assert!(invalid(|t| t.batch_requests_max = 0).contains("batch_requests_max"));
        assert!(invalid(|t| t.batch_delay_ms = 5_000).contains("batch_delay_ms"));
        assert!(invalid(|t| t.heartbeat_interval_ms = 1).contains("heartbeat_interval_ms"));
        assert!(invalid(|t| t.suspect_timeout_ms = 60).contains("twice heartbeat_interval_ms"));
        assert!(invalid(|t| t.suspect_timeout_ms = 9_000).contains("below request_timeout_ms"));
        assert!(invalid(|t| t.snapshot_ratio_percent = 0).contains("snapshot_ratio_percent"));
        assert!(invalid(|t| t.restart_quiet_ms = 100_000).contains("restart_quiet_ms"));
        assert!(invalid(|t| t.segment_bytes = 4096).contains("segment_bytes"));
        assert!(invalid(|t| t.snapshot_background = 2).contains("snapshot_background"));
        // Another engine's request timeout is not held against the suspicion timeout.
        let slow = LogTuning {
            suspect_timeout_ms: 9_000,
            ..LogTuning::default()
        };
        slow.validate(None).unwrap();
    }

    #[test]
    fn the_file_table_takes_known_names_only() {
        let tuning: LogTuning = toml::from_str("batch_delay_ms = 2\nwindow_instances = 4").unwrap();
        assert_eq!((tuning.batch_delay_ms, tuning.window_instances), (2, 4));
        assert_eq!(
            tuning.heartbeat_interval_ms,
            LogTuning::default().heartbeat_interval_ms
        );
        assert!(toml::from_str::<LogTuning>("suspect_ms = 2").is_err());
    }
}
