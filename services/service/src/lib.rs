//! The interface between a P-SMR service and the engine that replicates it (seed 004 §III–IV).
//!
//! A service is a deterministic state machine. Besides executing its commands it declares
//! which commands depend on each other (C-Dep), in the form P-SMR uses at run time: a
//! Command-to-Groups function (C-G) that sends every command to one group. With `k` worker
//! threads there are `k + 1` groups: `g_0 … g_{k-1}`, one per worker, and `g_all`, which every
//! worker delivers. A command sent to `g_i` runs on worker `i` alone, in parallel with the other
//! workers (parallel mode); a command sent to `g_all` runs while every other worker waits at a
//! barrier (synchronous mode).
//!
//! The one rule C-G must keep: **two dependent commands share a group**. With these groups that
//! means both go to the same worker's group, or at least one of them goes to `g_all`. Commands
//! in different worker groups then touch disjoint parts of the state, so running them in any
//! interleaving gives what the merged order gives, and every replica ends in the same state.
//! [`Service::digest`] lets replicas compare that state.
//!
//! Commands and replies travel as bytes; [`wire`] holds the small encoding both services use,
//! and [`Service::execute_encoded`] / [`Service::group_of_encoded`] are the byte-level entry
//! points an engine calls. [`ParallelService`] lets several workers of one replica execute their
//! groups' commands at once.
pub mod digest;
pub mod testing;
pub mod wire;

use std::fmt;

pub use digest::{Digest, Digester};
pub use wire::{DecodeError, Reader, Wire};

/// A worker thread of a replica, `0..k` (seed 004 numbers them from 1; here they count from 0).
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct WorkerId(pub u16);

impl fmt::Debug for WorkerId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "t{}", self.0)
    }
}

/// Where C-G sends a command: one worker's group, or the group every worker shares. Worker
/// groups order before `g_all`, by worker.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Group {
    /// `g_i`: delivered by worker `i` alone, executed in parallel mode.
    Worker(WorkerId),
    /// `g_all`: delivered by every worker, executed in synchronous mode.
    All,
}

impl Group {
    /// Whether two commands sent to `self` and `other` are ordered with each other: they share
    /// a worker's group, or one of them goes to `g_all`, which every worker delivers.
    pub fn shares(self, other: Group) -> bool {
        self == other || self == Group::All || other == Group::All
    }

    /// The worker group that owns `hash` among `workers` worker groups: `hash mod workers`.
    /// Every service spreads its independent commands with this one rule, so that the same hash
    /// lands in the same group on every replica and in every client proxy.
    ///
    /// # Panics
    /// If `workers` is 0: a replica has at least one worker.
    pub fn of_hash(hash: u64, workers: u16) -> Group {
        assert!(workers > 0, "a replica has at least one worker");
        let index = hash % u64::from(workers);
        Group::Worker(WorkerId(
            u16::try_from(index).expect("below a u16 worker count"),
        ))
    }
}

impl fmt::Debug for Group {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Group::Worker(WorkerId(i)) => write!(f, "g{i}"),
            Group::All => write!(f, "g_all"),
        }
    }
}

/// A deterministic service that P-SMR can replicate.
///
/// `execute` may run on several worker threads of one replica at once, each on the commands C-G
/// sent to its own group; how the engine shares the state between them is the engine's
/// business. What the service promises is the C-G rule of the crate docs.
pub trait Service {
    /// A command, as decoded from a client's request.
    type Command: Wire;
    /// What a command answers.
    type Reply: Wire;

    /// C-Dep: whether the order of `a` and `b` can change a reply or the state (seed 004 §III).
    /// Symmetric; conservative answers (`true` where unsure) are safe. C-G must send every
    /// dependent pair to a shared group ([`testing::check_c_dep`] checks it).
    fn depends(a: &Self::Command, b: &Self::Command) -> bool;

    /// C-G: the group of `command` on a replica with `workers` worker threads. It depends only
    /// on the command, `workers` and the service's configuration (never on its state), so every
    /// replica and every client proxy computes the same answer.
    fn group(&self, command: &Self::Command, workers: u16) -> Group;

    /// Executes `command` against the state and gives its reply.
    fn execute(&mut self, command: &Self::Command) -> Self::Reply;

    /// A digest of the whole state: equal states give equal digests, whatever order of inserts
    /// and deletes built them (replicas compare digests after a run).
    fn digest(&self) -> Digest;

    /// The reply to a request that does not decode.
    fn malformed(error: DecodeError) -> Self::Reply;

    /// C-G on an encoded command. A command that does not decode goes to `g_all`, where it is
    /// executed alone and answered with [`Service::malformed`].
    fn group_of_encoded(&self, command: &[u8], workers: u16) -> Group {
        match Self::Command::decode(command) {
            Ok(command) => self.group(&command, workers),
            Err(_) => Group::All,
        }
    }

    /// Decodes `command`, executes it and encodes the reply.
    fn execute_encoded(&mut self, command: &[u8]) -> Vec<u8> {
        let reply = match Self::Command::decode(command) {
            Ok(command) => self.execute(&command),
            Err(error) => Self::malformed(error),
        };
        reply.encode_to_vec()
    }
}

/// A service whose worker-group commands can run at once on several worker threads of one
/// replica (parallel mode), through a shared reference.
///
/// A runtime can keep the service in a `RwLock`: a worker runs a command of its own group with
/// [`ParallelService::execute_shared`] under the read lock, and a command that answers `None`
/// (every `g_all` command, and any that would reshape shared state) with [`Service::execute`]
/// under the write lock, which it takes at the barrier.
pub trait ParallelService: Service + Sync {
    /// Executes `command` through a shared reference, or gives `None` if it needs exclusive
    /// access ([`Service::execute`]). Commands that C-G sends to different worker groups may run
    /// at once: the replies and the state are those of running them in some order, and with a
    /// correct C-G every order gives the same. A command answered here gives the same reply and
    /// state change as through [`Service::execute`].
    fn execute_shared(&self, command: &Self::Command) -> Option<Self::Reply>;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_share_with_themselves_and_with_g_all() {
        let (a, b) = (Group::Worker(WorkerId(0)), Group::Worker(WorkerId(1)));
        assert!(a.shares(a) && a.shares(Group::All) && Group::All.shares(b));
        assert!(!a.shares(b));
        assert_eq!(
            format!("{a:?} {:?} {:?}", Group::All, WorkerId(3)),
            "g0 g_all t3"
        );
    }

    #[test]
    fn a_hash_lands_in_its_residue_group() {
        assert_eq!(Group::of_hash(7, 3), Group::Worker(WorkerId(1)));
        assert_eq!(Group::of_hash(u64::MAX, 1), Group::Worker(WorkerId(0)));
    }

    #[test]
    #[should_panic(expected = "at least one worker")]
    fn no_workers_is_a_bug() {
        Group::of_hash(1, 0);
    }
}
