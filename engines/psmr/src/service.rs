//! What P-SMR needs from a service: its C-G function and its execution.
//!
//! Seed 004 §IV-B–C: the service designer declares which commands depend on each other
//! (C-Dep), and from it a Command-to-Groups function (C-G) sends every command to the groups it
//! needs. With one group per worker plus `g_all` (§VI-A), C-G has two answers: one worker's group,
//! for a command that depends only on commands sent to the same group, or `g_all`, for anything
//! wider. C-G must be right for P-SMR to be: two dependent commands must share a group, which
//! with these groups means the same worker's group, or `g_all` for at least one of them.
use bytes::Bytes;

use crate::ids::{Group, WorkerId};

/// Where C-G sends a command.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Destination {
    /// The group of one worker: the command runs there in parallel mode.
    Worker(WorkerId),
    /// `g_all`: the command runs in synchronous mode, alone among the workers.
    All,
}

impl Destination {
    /// The group that orders the command.
    pub fn group(self) -> Group {
        match self {
            Destination::Worker(worker) => Group::Worker(worker),
            Destination::All => Group::All,
        }
    }
}

/// C-G, the Command-to-Groups function of a service (seed 004 §IV-C): computed by the client
/// proxy (here, the replica that receives the command) under P-SMR, and by the scheduler under
/// sP-SMR and no replication.
pub trait CommandGroups {
    /// The destination of `command` on a replica with `workers` worker threads, from the
    /// command alone (every replica must compute the same answer). A command that cannot be
    /// decoded goes to [`Destination::All`], where it is executed alone and answered with the
    /// service's error.
    fn destination(&self, command: &Bytes, workers: u16) -> Destination;
}

/// A deterministic service replicated by P-SMR: what the workers execute.
///
/// `execute` may run on several worker threads at once, each on commands C-G sent to its own
/// group, so what one worker's commands touch must be disjoint from what every other worker's
/// commands touch (or only read by all of them); a `g_all` command runs while every other
/// worker waits at the barrier. How the threads share the service is the runtime's choice.
pub trait Service {
    /// Executes `command` and gives its reply.
    fn execute(&mut self, command: &Bytes) -> Bytes;
}
