//! `maxmemory`: the replica's used memory, sampled, and the rule of which commands a replica
//! over its limit refuses.
//!
//! **Used memory** is the process's resident set size (`VmRSS` of `/proc/self/status`): what
//! the kernel charges the process for and kills it over, and what `ps` and the issue's
//! measurements show. It counts everything the replica holds: the acceptor and proposer tables,
//! values, connection buffers, the allocator's free lists it has not returned yet, and with
//! `mmap` durability the store's pages that are resident. The store's own accounted bytes would
//! leave most of that out (a live key costs the process several times its store record), so a
//! limit on them would not keep the process within what it was told it may use. A sample is
//! taken every [`SAMPLE_MS`] and at every `CONFIG SET maxmemory`; a check costs one atomic
//! load.
//!
//! **Above the limit**, a command is refused with redis's
//! `OOM command not allowed when used memory > 'maxmemory'.` when it may need new space
//! ([`needs_space`]): it could create a key this replica does not hold, or grow a value. Reads,
//! deletes and removals of members, expiry changes, counters on existing keys and overwrites of
//! a string value by one no longer are served. The judgement reads this replica's copy of the
//! key, which may lag (the command's outcome is still decided by consensus). logless never
//! evicts (`maxmemory-policy` is `noeviction`).
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use logless_commands::command::{Command, SetArgs};
use logless_commands::value::{Data, Register};
use tokio::sync::watch;

/// How often the used memory is sampled (ms).
pub const SAMPLE_MS: u64 = 100;

/// The used memory, the limit, and whether the one is over the other; shared by the sampler,
/// the shards (which refuse) and CONFIG and INFO.
#[derive(Debug, Default)]
pub struct Memory {
    /// The resident set size at the last sample (bytes).
    used: AtomicU64,
    /// `maxmemory` (bytes; 0: no limit).
    limit: AtomicU64,
    /// Whether `used > limit > 0` at the last sample.
    full: AtomicBool,
}

impl Memory {
    /// A limit of `limit` bytes (0: none), sampled once.
    pub fn new(limit: u64) -> Memory {
        let memory = Memory::default();
        memory.set_limit(limit);
        memory
    }

    /// Sets the limit (0: none) and samples at once, so that the change applies from the next
    /// command.
    pub fn set_limit(&self, limit: u64) {
        self.limit.store(limit, Ordering::Relaxed);
        self.sample();
    }

    /// Reads the resident set size and judges the limit.
    pub fn sample(&self) {
        let used = resident_bytes().unwrap_or(0);
        self.used.store(used, Ordering::Relaxed);
        let limit = self.limit.load(Ordering::Relaxed);
        self.full
            .store(limit > 0 && used > limit, Ordering::Relaxed);
    }

    /// The resident set size at the last sample (0 where `/proc` cannot tell).
    pub fn used(&self) -> u64 {
        self.used.load(Ordering::Relaxed)
    }

    /// `maxmemory` (0: none).
    pub fn limit(&self) -> u64 {
        self.limit.load(Ordering::Relaxed)
    }

    /// Whether commands that need new space are refused.
    pub fn full(&self) -> bool {
        self.full.load(Ordering::Relaxed)
    }
}

/// The process's resident set size, from `/proc/self/status` (`None` where there is none).
pub fn resident_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kib: u64 = line
        .trim_start_matches("VmRSS:")
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    kib.checked_mul(1024)
}

/// Samples `memory` every [`SAMPLE_MS`] until `stop` says so.
pub async fn sample_until(memory: std::sync::Arc<Memory>, mut stop: watch::Receiver<bool>) {
    let mut tick = tokio::time::interval(Duration::from_millis(SAMPLE_MS));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => memory.sample(),
            _ = stop.changed() => {
                if *stop.borrow() {
                    return;
                }
            }
        }
    }
}

/// Whether `command` may need new space on a key whose value in this replica's copy is `held`
/// at `now_ms` (see the module's rule).
pub fn needs_space(command: &Command, held: Option<&Register>, now_ms: u64) -> bool {
    let live = held.filter(|r| r.is_live(now_ms)).map(|r| &r.data);
    match command {
        c if c.is_read_only() => false,
        Command::Transaction(commands) => commands.iter().any(|c| needs_space(c, held, now_ms)),
        Command::Del
        | Command::DelEx(_)
        | Command::GetDel
        | Command::SRem(_)
        | Command::SPop { .. }
        | Command::LockRelease { .. }
        | Command::Persist
        | Command::Expire(_)
        | Command::GetEx(_) => false,
        Command::IncrBy(_) | Command::IncrByFloat(_) => live.is_none(),
        Command::Set(SetArgs { value, .. }) => match live {
            Some(Data::Str(old)) => value.len() > old.len(),
            Some(Data::Int(old)) => value.len() > old.to_string().len(),
            _ => true,
        },
        Command::Hash(c) => !matches!(c.name(), "hdel"),
        Command::List(c) => !matches!(c.name(), "lpop" | "rpop" | "lrem" | "ltrim"),
        Command::ZSet(c) => !matches!(c.name(), "zrem" | "zpopmin" | "zpopmax"),
        _ => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use logless_commands::command::{Condition, Expiry};

    fn set(value: &str) -> Command {
        Command::Set(SetArgs {
            value: value.to_string().into(),
            condition: Condition::Always,
            get: false,
            expiry: Expiry::Keep,
        })
    }

    fn string(value: &str, expires_at_ms: Option<u64>) -> Register {
        Register {
            data: Data::Str(value.to_string().into()),
            expires_at_ms,
            ..Register::default()
        }
    }

    #[test]
    fn new_keys_and_growth_need_space_and_the_rest_does_not() {
        let held = string("abc", None);
        let expired = string("abc", Some(10));
        // A new key, or one that reads as absent, needs space.
        assert!(needs_space(&set("x"), None, 100));
        assert!(needs_space(&set("x"), Some(&expired), 100));
        assert!(needs_space(&Command::IncrBy(1), None, 100));
        // An overwrite in place does not; a longer value does.
        assert!(!needs_space(&set("xyz"), Some(&held), 100));
        assert!(needs_space(&set("wxyz"), Some(&held), 100));
        assert!(!needs_space(&Command::IncrBy(1), Some(&held), 100));
        assert!(needs_space(
            &Command::Append("d".to_string().into()),
            Some(&held),
            100
        ));
        // Reads, deletes and expiry changes never do.
        for command in [
            Command::Get,
            Command::Del,
            Command::GetDel,
            Command::Persist,
        ] {
            assert!(!needs_space(&command, None, 100));
            assert!(!needs_space(&command, Some(&held), 100));
        }
        // A transaction needs space if one of its commands does.
        let multi = Command::Transaction(vec![Command::Get, set("much longer")]);
        assert!(needs_space(&multi, Some(&held), 100));
    }

    #[test]
    fn the_resident_set_is_read_and_a_limit_below_it_is_full() {
        let used = resident_bytes().expect("Linux has /proc/self/status");
        assert!(used > 0);
        let memory = Memory::new(0);
        assert!(!memory.full());
        memory.set_limit(1);
        assert!(memory.full());
        assert!(memory.used() > 1);
        memory.set_limit(u64::MAX);
        assert!(!memory.full());
    }
}
