//! A P-SMR replica's configuration, passed explicitly.
use logless_multipaxos::config::Config as PaxosConfig;
use logless_multipaxos::ids::NodeId;
use logless_service::Group;
use thiserror::Error;

use crate::cut::CutBugs;
use crate::ids::GroupIndex;
use crate::merge::MergeBugs;
use crate::plan::PlanBugs;

/// Deliberate bugs, each off by default, so that every harness can prove it catches them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct InjectedBugs {
    /// Bugs of the merge of a worker's streams.
    pub merge: MergeBugs,
    /// Bugs of Algorithm 1's execution plan.
    pub plan: PlanBugs,
    /// Bugs of the snapshots' cut.
    pub cut: CutBugs,
    /// No leader proposes skips: an idle stream stalls every merge it is part of.
    pub no_skips: bool,
}

/// How a replica orders and executes commands: P-SMR and the designs seed 004 compares it
/// with (§VI-B, Table I).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Mode {
    /// P-SMR: `k + 1` streams, each worker merges its own and `g_all`, and executes by
    /// Algorithm 1 (parallel delivery and execution).
    #[default]
    Psmr,
    /// sP-SMR: one stream, and a scheduler that hands each delivered command by C-G to a
    /// worker, or to all of them through the barrier (sequential delivery, parallel execution).
    SpSmr,
    /// SMR: one stream, executed by one worker (sequential delivery and execution).
    Smr,
    /// No replication: one process, the scheduler of sP-SMR fed in arrival order.
    NoRep,
}

/// A mode name that is none of `psmr`, `sp-smr`, `smr`, `no-rep`.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
#[error("unknown P-SMR mode {0:?}: expected psmr, sp-smr, smr or no-rep")]
pub struct UnknownMode(pub String);

impl Mode {
    /// Every mode, in the order of the seed's comparisons.
    pub const ALL: [Mode; 4] = [Mode::Psmr, Mode::SpSmr, Mode::Smr, Mode::NoRep];

    /// The mode's name on the command line (`--psmr-mode`).
    pub fn name(self) -> &'static str {
        match self {
            Mode::Psmr => "psmr",
            Mode::SpSmr => "sp-smr",
            Mode::Smr => "smr",
            Mode::NoRep => "no-rep",
        }
    }

    /// The groups a replica runs in this mode, with `workers` workers.
    pub fn groups(self, workers: u16) -> Vec<Group> {
        match self {
            Mode::Psmr => Group::all(workers).collect(),
            Mode::SpSmr | Mode::Smr => vec![Group::All],
            Mode::NoRep => Vec::new(),
        }
    }

    /// The worker threads that execute in this mode: one under SMR, `workers` otherwise.
    pub fn executing_workers(self, workers: u16) -> u16 {
        match self {
            Mode::Smr => 1,
            Mode::Psmr | Mode::SpSmr | Mode::NoRep => workers,
        }
    }
}

impl std::fmt::Display for Mode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for Mode {
    type Err = UnknownMode;

    fn from_str(name: &str) -> Result<Mode, UnknownMode> {
        Mode::ALL
            .into_iter()
            .find(|mode| mode.name() == name)
            .ok_or_else(|| UnknownMode(name.to_string()))
    }
}

/// How a P-SMR replica behaves. Times are in milliseconds of the clock the runtime passes in.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Config {
    /// How commands are ordered and executed.
    pub mode: Mode,
    /// Worker threads per replica, `k` (the multiprogramming level of seed 004 §IV-C); the
    /// replica runs `k + 1` groups.
    pub workers: u16,
    /// The Multi-Paxos configuration every group starts from: its `nodes` and `me` name the
    /// cluster and this replica; each group rotates `nodes` by its index (see
    /// [`Config::group_config`]).
    pub paxos: PaxosConfig,
    /// How long a group's leader waits for its last skip to be decided before it proposes one
    /// again while a merge waits on its group (see [`crate::groups`]); once the last is
    /// decided, the next goes at once.
    pub skip_interval_ms: u64,
    /// The periodic cut: `g_all`'s leader proposes a snapshot request once the groups have
    /// delivered this many bytes of commands since the last one (see [`crate::cut`]).
    pub cut_every_bytes: u64,
    /// … or once `g_all` has delivered this many instances since the last one.
    pub cut_every_instances: u64,
    /// Each group's own snapshot threshold (the log engine's
    /// [`PaxosConfig::snapshot_log_bytes_min`]): a group's log is truncated below its
    /// previous snapshot, and its stream's snapshot keeps what the durable cut lacks (see
    /// [`crate::stream`]).
    pub group_snapshot_log_bytes_min: u64,
    /// Deliberate bugs for harness tests.
    pub bugs: InjectedBugs,
}

impl Config {
    /// Defaults for replica `me` of the cluster `nodes`, with `workers` workers.
    ///
    /// # Panics
    /// If `workers` is 0 or `u16::MAX` (the groups number `workers + 1`).
    pub fn new(nodes: Vec<NodeId>, me: NodeId, workers: u16) -> Config {
        assert!(
            (1..u16::MAX).contains(&workers),
            "between 1 and {} workers",
            u16::MAX - 1
        );
        Config {
            mode: Mode::default(),
            workers,
            paxos: PaxosConfig::new(nodes, me),
            skip_interval_ms: 5,
            cut_every_bytes: 64 * 1024 * 1024,
            cut_every_instances: 100_000,
            group_snapshot_log_bytes_min: 4 * 1024 * 1024,
            bugs: InjectedBugs::default(),
        }
    }

    /// The Multi-Paxos configuration of `group`: the cluster's replicas rotated left by the
    /// group's index, so that view `v` of group `g` is led by `nodes[(v + g) mod n]` and the
    /// groups' first leaders are spread over the replicas. Every replica computes the same
    /// order for a group, which is all Multi-Paxos needs. Its snapshots follow
    /// [`Config::group_snapshot_log_bytes_min`] (see [`crate::stream::Stream`]).
    pub fn group_config(&self, group: Group) -> PaxosConfig {
        let mut config = self.paxos.clone();
        let n = config.nodes.len();
        config
            .nodes
            .rotate_left(group.index(self.workers) % n.max(1));
        config.snapshot_log_bytes_min = self.group_snapshot_log_bytes_min;
        config
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use logless_multipaxos::ids::View;
    use logless_service::WorkerId;

    #[test]
    fn the_groups_first_leaders_are_spread_over_the_replicas() {
        let nodes = vec![NodeId(1), NodeId(2), NodeId(3)];
        let config = Config::new(nodes, NodeId(1), 4);
        let leaders: Vec<u16> = Group::all(4)
            .map(|g| View(0).leader(&config.group_config(g).nodes).0)
            .collect();
        assert_eq!(leaders, [1, 2, 3, 1, 2]);
        let g1 = config.group_config(Group::Worker(WorkerId(1)));
        assert_eq!(
            View(1).leader(&g1.nodes),
            NodeId(3),
            "then the next in line"
        );
        assert_eq!(g1.me, NodeId(1));
    }

    #[test]
    fn modes_parse_from_their_names_and_refuse_others() {
        for mode in Mode::ALL {
            assert_eq!(mode.name().parse::<Mode>(), Ok(mode));
            assert_eq!(mode.to_string(), mode.name());
        }
        let error = "spsmr".parse::<Mode>().unwrap_err();
        assert_eq!(
            error.to_string(),
            "unknown P-SMR mode \"spsmr\": expected psmr, sp-smr, smr or no-rep"
        );
    }

    #[test]
    fn each_mode_runs_its_streams_and_workers() {
        assert_eq!(Mode::Psmr.groups(2).len(), 3);
        assert_eq!(Mode::SpSmr.groups(2), [Group::All]);
        assert_eq!(Mode::Smr.groups(2), [Group::All]);
        assert!(Mode::NoRep.groups(2).is_empty());
        assert_eq!(Mode::Smr.executing_workers(4), 1);
        assert_eq!(Mode::SpSmr.executing_workers(4), 4);
    }
}
