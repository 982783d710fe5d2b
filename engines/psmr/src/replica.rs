//! One replica's core in any [`Mode`]: the groups' logs, each worker's merge (P-SMR) or the
//! scheduler (sP-SMR, no replication), and the execution plan.
//!
//! The runtime feeds it client requests ([`Replica::handle_request`]), the groups' messages
//! ([`Replica::handle_message`]) and time ([`Replica::tick`]); after each call it commits
//! [`Replica::take_ready`] through its [`GroupStore`](crate::groups::GroupStore) and only then
//! sends what was released. Decided commands flow into the [`Plan`], which the worker threads
//! poll ([`Replica::poll`], [`Replica::executed`]) to execute commands against the service and
//! answer clients. The service the workers execute, and which replica answers which client, are
//! the runtime's: the core says which worker executes what, and when. Of the service the core
//! needs only C-G: it keeps a copy configured like the executing one and calls
//! [`Service::group_of_encoded`] on each encoded command (C-G reads the configuration, never the
//! state).
//!
//! How commands reach the plan, per mode:
//!
//! * **P-SMR**: C-G picks the group a request is ordered in; each worker's [`Merge`] of its
//!   own group and `g_all` feeds that worker (parallel delivery).
//! * **sP-SMR**: every request is ordered in the one stream `g_all`; the scheduler hands each
//!   delivered command to the worker C-G names, or to every worker (synchronous mode through
//!   the barrier) for a command C-G sends to all.
//! * **SMR**: one stream, every command to worker 0 (the only one).
//! * **No replication**: the scheduler of sP-SMR, fed in arrival order, with no log at all.
use std::collections::BTreeMap;

use logless_multipaxos::ids::NodeId;
use logless_multipaxos::message::{Message, Request};
use logless_multipaxos::persist::Durable;
use logless_service::{Group, Service, WorkerId};

use crate::config::{Config, Mode};
use crate::groups::{Groups, Ready, RequestError};
use crate::merge::Merge;
use crate::plan::{Delivered, Plan, Step};

/// A replica's sans-IO core for the service `S`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Replica<S> {
    mode: Mode,
    workers: u16,
    /// A service configured like the one the workers execute, asked only for C-G: it is never
    /// executed, so it stays as it was built.
    command_groups: S,
    groups: Groups,
    /// Under P-SMR, worker `i`'s merge of `g_i` and `g_all`, at index `i`; empty otherwise.
    merges: Vec<Merge>,
    plan: Plan,
}

impl<S: Service> Replica<S> {
    /// A replica that has never run. `command_groups` must be configured like the service the
    /// workers execute (it gives C-G, see the module docs); a fresh one will do.
    pub fn new(config: Config, command_groups: S, now_ms: u64) -> Replica<S> {
        Replica::recover(config, command_groups, &BTreeMap::new(), now_ms)
    }

    /// A replica restarting from its groups' durable logs: every decided command is delivered
    /// to the plan again, in the same order, for a service that starts empty (see
    /// [`Groups::recover`]). Without replication nothing is durable: the replica starts empty.
    pub fn recover(
        config: Config,
        command_groups: S,
        durable: &BTreeMap<Group, Durable>,
        now_ms: u64,
    ) -> Replica<S> {
        let mode = config.mode;
        let workers = mode.executing_workers(config.workers);
        let merges = match mode {
            Mode::Psmr => (0..workers)
                .map(|i| {
                    let groups = [Group::Worker(WorkerId(i)), Group::All];
                    Merge::new(&groups, config.bugs.merge)
                })
                .collect(),
            Mode::SpSmr | Mode::Smr | Mode::NoRep => Vec::new(),
        };
        let plan = Plan::new(workers, config.bugs.plan);
        let mut replica = Replica {
            mode,
            workers,
            command_groups,
            groups: Groups::recover(config, durable, now_ms),
            merges,
            plan,
        };
        replica.route();
        replica
    }

    /// The groups' logs, to inspect.
    pub fn groups(&self) -> &Groups {
        &self.groups
    }

    /// The execution plan, to inspect.
    pub fn plan(&self) -> &Plan {
        &self.plan
    }

    /// A client request: ordered in the group C-G picks (P-SMR), in the one stream (sP-SMR,
    /// SMR), or scheduled at once (no replication).
    pub fn handle_request(&mut self, now_ms: u64, request: Request) -> Result<(), RequestError> {
        let group = match self.mode {
            Mode::Psmr => self.group_of(&request),
            Mode::SpSmr | Mode::Smr => Group::All,
            Mode::NoRep => {
                self.schedule(request);
                return Ok(());
            }
        };
        self.groups.handle_request(now_ms, group, request)?;
        self.route();
        Ok(())
    }

    /// A message of `group`'s log from replica `from`.
    pub fn handle_message(&mut self, now_ms: u64, from: NodeId, group: Group, message: Message) {
        self.groups.handle_message(now_ms, from, group, message);
        self.route();
    }

    /// The passing of time (heartbeats, timeouts), and skips in the groups this replica leads
    /// that a merge waits on.
    pub fn tick(&mut self, now_ms: u64) {
        self.groups.tick(now_ms);
        self.route();
        // Each group waited on, with the highest stamp a merge needs of it.
        let mut waited_on: BTreeMap<Group, u64> = BTreeMap::new();
        for wait in self.merges.iter().filter_map(Merge::blocked_on) {
            let stamp_ms = waited_on.entry(wait.group).or_default();
            *stamp_ms = (*stamp_ms).max(wait.stamp_ms);
        }
        for (group, stamp_ms) in waited_on {
            self.groups.skip_if_due(now_ms, group, stamp_ms);
        }
        self.route();
    }

    /// Takes everything the groups produced: commit it before sending anything.
    pub fn take_ready(&mut self) -> Ready {
        self.groups.take_ready()
    }

    /// What `worker` does next (see [`Plan::poll`]).
    pub fn poll(&mut self, worker: WorkerId) -> Step {
        self.plan.poll(worker)
    }

    /// `worker` finished its command (see [`Plan::executed`]).
    pub fn executed(&mut self, worker: WorkerId) {
        self.plan.executed(worker);
    }

    /// C-G of `request`'s command: a command that does not decode goes to `g_all`, where the
    /// service answers it with its error.
    fn group_of(&self, request: &Request) -> Group {
        self.command_groups
            .group_of_encoded(&request.payload, self.workers)
    }

    /// Hands what the groups delivered on towards the plan.
    fn route(&mut self) {
        for (group, batch) in self.groups.take_delivered() {
            match self.mode {
                Mode::Psmr => self.push_to_merges(group, batch),
                Mode::SpSmr | Mode::NoRep => batch.requests.into_iter().for_each(|r| {
                    self.schedule(r);
                }),
                Mode::Smr => {
                    for request in batch.requests {
                        let group = Group::Worker(WorkerId(0));
                        self.plan.deliver(WorkerId(0), Delivered { group, request });
                    }
                }
            }
        }
        self.drain_merges();
    }

    fn push_to_merges(&mut self, group: Group, batch: crate::stream::DeliveredBatch) {
        match group {
            Group::Worker(worker) => self.merges[usize::from(worker.0)].push(group, batch),
            Group::All => {
                for merge in &mut self.merges {
                    merge.push(group, batch.clone());
                }
            }
        }
    }

    /// Hands every batch the merges can order to the plan (P-SMR).
    fn drain_merges(&mut self) {
        for (index, merge) in self.merges.iter_mut().enumerate() {
            let worker = WorkerId(u16::try_from(index).expect("workers counted in u16"));
            while let Some((group, batch)) = merge.pop() {
                for request in batch.requests {
                    self.plan.deliver(worker, Delivered { group, request });
                }
            }
        }
    }

    /// The scheduler of sP-SMR and no replication: a command goes to the worker C-G names, or
    /// to every worker (to run in synchronous mode) when C-G sends it to all.
    fn schedule(&mut self, request: Request) {
        match self.group_of(&request) {
            group @ Group::Worker(worker) => {
                self.plan.deliver(worker, Delivered { group, request });
            }
            Group::All => {
                for w in 0..self.workers {
                    let command = Delivered {
                        group: Group::All,
                        request: request.clone(),
                    };
                    self.plan.deliver(WorkerId(w), command);
                }
            }
        }
    }
}
