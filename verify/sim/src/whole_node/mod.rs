//! What the whole-node runs of every engine share ([`crate::nodes`], [`crate::log_nodes`],
//! [`crate::psmr_nodes`]): the simulated wall clock, the draws of the faults' times and of a
//! clock jump, the nodes whose disks fill up, the majority a crash must leave, the outcomes' counts and the per-key check of
//! a history; the clients' bookkeeping is in [`clients`], the network in [`crate::network`].
//!
//! Every function draws from the run's one generator in the order the runs always drew, so
//! that a seed runs as it did.
use logless_multipaxos::ids::NodeId;
use rand::rngs::SmallRng;
use rand::seq::IndexedRandom;
use rand::Rng;

use crate::history::{History, Outcome};
use crate::linearizability;
use crate::queue::EventQueue;

pub(crate) mod clients;

/// The wall clock of simulated time 0 (ms since the epoch).
pub(crate) const WALL_START_MS: u64 = 1_800_000_000_000;
/// A client's network delay to its node, either way (µs).
pub(crate) const CLIENT_DELAY_US: u64 = 20;
/// The most inputs one turn takes (the node's limit).
pub(crate) const INPUTS_PER_TURN_MAX: usize = 4096;
/// How long the healed cluster may take after the liveness phase until every replica has
/// executed as far as the others (a lagging one catches up from a heartbeat's news).
pub(crate) const SETTLE_US_MAX: u64 = 3_000_000;
/// The states a checker may visit for one key (per-key) or one history (atomicity).
pub(crate) const CHECK_STATES_MAX: usize = 2_000_000;

/// The log segment size of runs with full disks (bytes): a few KiB of log, as a run writes,
/// fill several, so that a full disk soon refuses a new segment.
pub(crate) const FULL_DISK_SEGMENT_BYTES: usize = 4 * 1024;

/// Where a node's answer goes: a client and its command number.
#[derive(Clone, Copy, Debug)]
pub(crate) struct AnswerTo {
    pub client: u32,
    pub seq: u64,
}

/// A time drawn from the exponential distribution of mean `mean_us` (µs), at least 1.
pub(crate) fn exp(rng: &mut SmallRng, mean_us: u64) -> u64 {
    let u: f64 = rng.random_range(0.0001..1.0);
    (-(u.ln()) * mean_us as f64) as u64 + 1
}

/// A node's wall clock (ms since the epoch) at simulated time `now_us`, `offset_ms` off.
pub(crate) fn wall_ms(now_us: u64, offset_ms: i64) -> u64 {
    (WALL_START_MS + now_us / 1000).saturating_add_signed(offset_ms)
}

/// Schedules the first of each recurring fault whose mean period (µs) is not 0, in order.
pub(crate) fn schedule_first<E>(
    events: &mut EventQueue<E>,
    rng: &mut SmallRng,
    faults: impl IntoIterator<Item = (u64, E)>,
) {
    for (every_us, event) in faults {
        if every_us > 0 {
            let at = exp(rng, every_us);
            events.schedule(at, event);
        }
    }
}

/// Schedules the next of a recurring fault of mean period `every_us` (µs).
pub(crate) fn schedule_next<E>(
    events: &mut EventQueue<E>,
    rng: &mut SmallRng,
    every_us: u64,
    event: E,
) {
    let next = exp(rng, every_us);
    events.schedule(next, event);
}

/// A clock jump: the node of `nodes` whose wall clock moves, and by how much (ms, at most
/// `max_ms` either way).
pub(crate) fn clock_jump(rng: &mut SmallRng, nodes: u16, max_ms: u64) -> (NodeId, i64) {
    let max = max_ms as i64;
    let node = NodeId(rng.random_range(1..=nodes));
    let jump = rng.random_range(-max..=max);
    (node, jump)
}

/// The nodes whose disks fill up now: every node of `up` with chance `all`, else `leader`
/// (the leader of the moment, if any) half the time, else one of `up` at random.
pub(crate) fn disk_full_nodes(
    rng: &mut SmallRng,
    up: Vec<NodeId>,
    leader: Option<NodeId>,
    all: f64,
) -> Vec<NodeId> {
    if rng.random_bool(all) {
        return up;
    }
    match leader {
        Some(leader) if rng.random_bool(0.5) => vec![leader],
        _ => up.choose(rng).copied().into_iter().collect(),
    }
}

/// Whether one more of `nodes` nodes may go down, `down` being down, and leave a majority up.
pub(crate) fn one_more_may_crash(down: usize, nodes: u16) -> bool {
    down < (usize::from(nodes) - 1) / 2
}

/// The outcomes of a history's operations.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Outcomes {
    pub operations: u64,
    pub acknowledged: u64,
    pub not_applied: u64,
    pub unknown: u64,
}

impl Outcomes {
    /// Counts the outcomes of `history`'s operations.
    pub(crate) fn of(history: &History) -> Outcomes {
        let mut counts = Outcomes::default();
        for op in &history.operations {
            counts.operations += 1;
            match op.outcome {
                Outcome::Ok(_) => counts.acknowledged += 1,
                Outcome::NotApplied => counts.not_applied += 1,
                Outcome::Unknown => counts.unknown += 1,
            }
        }
        counts
    }
}

/// Checks `history` with the per-key linearizability checker; an undecided search is an error
/// too.
pub(crate) fn check_per_key(history: &History) -> Result<(), String> {
    let verdict = linearizability::check(history, CHECK_STATES_MAX);
    if !verdict.violations.is_empty() {
        let described: Vec<String> = (verdict.violations.iter())
            .map(|v| format!("{v:?}:\n{}", history.describe_key(&v.key)))
            .collect();
        return Err(format!("not linearizable: {}", described.join("\n")));
    }
    if !verdict.inconclusive.is_empty() {
        return Err(format!(
            "per-key search budget exhausted on {:?}",
            verdict.inconclusive
        ));
    }
    Ok(())
}
