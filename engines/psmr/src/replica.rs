//! One P-SMR replica's core: the groups' logs, each worker's merge, and the execution plan.
//!
//! The runtime feeds it client requests with the group C-G chose
//! ([`Replica::handle_request`]), the groups' messages ([`Replica::handle_message`]) and time
//! ([`Replica::tick`]); after each call it commits [`Replica::take_ready`] through its
//! [`GroupStore`](crate::groups::GroupStore) and only then sends what was released. Decided
//! batches flow through each worker's [`Merge`] into the [`Plan`], which the worker threads
//! poll ([`Replica::poll`], [`Replica::executed`]) to execute commands against the service and
//! answer clients. The service itself, and which replica answers which client, are the
//! runtime's: the core only says which worker executes what, when.
use logless_multipaxos::ids::NodeId;
use logless_multipaxos::message::{Message, Request};

use crate::config::Config;
use crate::groups::{Groups, Ready, RequestError};
use crate::ids::{Group, WorkerId};
use crate::merge::Merge;
use crate::plan::{Delivered, Plan, Step};
use crate::service::Destination;

/// A P-SMR replica's sans-IO core.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Replica {
    groups: Groups,
    /// Worker `i`'s merge of `g_i` and `g_all`, at index `i`.
    merges: Vec<Merge>,
    plan: Plan,
}

impl Replica {
    /// A replica that has never run.
    pub fn new(config: Config, now_ms: u64) -> Replica {
        let merges = (0..config.workers)
            .map(|i| {
                let groups = [Group::Worker(WorkerId(i)), Group::All];
                Merge::new(&groups, config.bugs.merge)
            })
            .collect();
        let plan = Plan::new(config.workers, config.bugs.plan);
        Replica {
            groups: Groups::new(config, now_ms),
            merges,
            plan,
        }
    }

    /// The groups' logs, to inspect.
    pub fn groups(&self) -> &Groups {
        &self.groups
    }

    /// The execution plan, to inspect.
    pub fn plan(&self) -> &Plan {
        &self.plan
    }

    /// A client request, to be ordered in the group of `destination` (C-G's answer for it).
    pub fn handle_request(
        &mut self,
        now_ms: u64,
        destination: Destination,
        request: Request,
    ) -> Result<(), RequestError> {
        self.groups
            .handle_request(now_ms, destination.group(), request)?;
        self.route();
        Ok(())
    }

    /// A message of `group`'s log from replica `from`.
    pub fn handle_message(&mut self, now_ms: u64, from: NodeId, group: Group, message: Message) {
        self.groups.handle_message(now_ms, from, group, message);
        self.route();
    }

    /// The passing of time (heartbeats, timeouts, skips of idle groups).
    pub fn tick(&mut self, now_ms: u64) {
        self.groups.tick(now_ms);
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

    /// Hands the batches the groups delivered to the merges, and what the merges can order to
    /// the plan.
    fn route(&mut self) {
        for (group, batch) in self.groups.take_delivered() {
            match group {
                Group::Worker(worker) => self.merges[usize::from(worker.0)].push(group, batch),
                Group::All => {
                    for merge in &mut self.merges {
                        merge.push(group, batch.clone());
                    }
                }
            }
        }
        for (index, merge) in self.merges.iter_mut().enumerate() {
            let worker = WorkerId(u16::try_from(index).expect("workers counted in u16"));
            while let Some((group, batch)) = merge.pop() {
                for request in batch.requests {
                    self.plan.deliver(worker, Delivered { group, request });
                }
            }
        }
    }
}
