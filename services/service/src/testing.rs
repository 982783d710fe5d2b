//! Checks of a service's C-G, for tests: executing commands in any order that P-SMR could
//! produce must give what executing them in the merged order gives.
//!
//! P-SMR keeps the order within each worker group and puts every `g_all` command between the
//! same commands on every worker (the barrier), but commands of different worker groups
//! between two `g_all` commands may run in any interleaving, or at once. [`interleaving`]
//! builds one such order from a list of choices (a proptest draws them) and
//! [`check_interleaving`] runs it; [`check_parallel`] runs each worker group's commands on a
//! thread of its own through [`ParallelService::execute_shared`]. Both compare every reply and
//! the final digest with the merged order's. A C-G that sends two dependent commands to
//! different groups fails them. [`check_c_dep`] checks C-G against the service's declared
//! C-Dep directly.
use std::fmt::Debug;

use crate::{Group, ParallelService, Service};

/// The commands between two `g_all` commands, by worker group (each queue in merged order),
/// and the `g_all` command that ends them, if one does.
struct Segment {
    queues: Vec<Vec<usize>>,
    barrier: Option<usize>,
}

fn segments(groups: &[Group]) -> Vec<Segment> {
    let mut segments = Vec::new();
    let mut start = 0;
    while start <= groups.len() {
        let end = groups[start..]
            .iter()
            .position(|&group| group == Group::All)
            .map_or(groups.len(), |offset| start + offset);
        let mut queues: Vec<(Group, Vec<usize>)> = Vec::new();
        for (index, &group) in groups.iter().enumerate().take(end).skip(start) {
            match queues.iter_mut().find(|(queued, _)| *queued == group) {
                Some((_, queue)) => queue.push(index),
                None => queues.push((group, vec![index])),
            }
        }
        segments.push(Segment {
            queues: queues.into_iter().map(|(_, queue)| queue).collect(),
            barrier: (end < groups.len()).then_some(end),
        });
        start = end + 1;
    }
    segments
}

/// An order of `groups.len()` commands that P-SMR could execute: `g_all` commands keep their
/// places, and between two of them the worker groups' commands interleave as `choices` say
/// (each choice picks among the groups that still have commands, cycling through `choices`).
pub fn interleaving(groups: &[Group], choices: &[u16]) -> Vec<usize> {
    let mut order = Vec::with_capacity(groups.len());
    let mut choices = choices.iter().copied().cycle();
    for segment in segments(groups) {
        let mut queues = segment.queues;
        for queue in &mut queues {
            queue.reverse();
        }
        while !queues.is_empty() {
            let pick = usize::from(choices.next().unwrap_or(0)) % queues.len();
            order.push(queues[pick].pop().expect("queues left are not empty"));
            if queues[pick].is_empty() {
                queues.remove(pick);
            }
        }
        order.extend(segment.barrier);
    }
    order
}

/// Where another order gave something the merged order did not.
#[derive(Debug, PartialEq, Eq)]
pub enum Divergence<R> {
    /// Command `index` answered `other` instead of `merged`.
    Reply {
        /// The command's place in the merged order.
        index: usize,
        /// Its reply in the merged order.
        merged: R,
        /// Its reply in the other order.
        other: R,
    },
    /// Every reply matched but the final states differ.
    Digest,
}

/// Runs `commands` in merged order on a fresh service and gives its C-G groups (for `workers`
/// workers), the replies and the service.
fn run_merged<S: Service>(
    make: impl Fn() -> S,
    commands: &[S::Command],
    workers: u16,
) -> (Vec<Group>, Vec<S::Reply>, S) {
    let mut service = make();
    let groups = commands
        .iter()
        .map(|command| service.group(command, workers))
        .collect();
    let replies = commands
        .iter()
        .map(|command| service.execute(command))
        .collect();
    (groups, replies, service)
}

fn compare<S: Service>(
    merged: (Vec<S::Reply>, &S),
    other: (Vec<Option<S::Reply>>, &S),
) -> Result<(), Divergence<S::Reply>>
where
    S::Reply: PartialEq,
{
    for (index, (merged, other)) in merged.0.into_iter().zip(other.0).enumerate() {
        let other = other.expect("every command ran");
        if merged != other {
            return Err(Divergence::Reply {
                index,
                merged,
                other,
            });
        }
    }
    if merged.1.digest() != other.1.digest() {
        return Err(Divergence::Digest);
    }
    Ok(())
}

/// Checks C-G against C-Dep on every pair of `commands`: two dependent commands must share a
/// group ([`Group::shares`]). Gives the first pair (by index) that does not.
pub fn check_c_dep<S: Service>(
    service: &S,
    commands: &[S::Command],
    workers: u16,
) -> Result<(), (usize, usize)> {
    let groups: Vec<Group> = commands
        .iter()
        .map(|command| service.group(command, workers))
        .collect();
    for (i, a) in commands.iter().enumerate() {
        for (j, b) in commands.iter().enumerate().skip(i + 1) {
            if S::depends(a, b) && !groups[i].shares(groups[j]) {
                return Err((i, j));
            }
        }
    }
    Ok(())
}

/// Runs `commands` in merged order on one service from `make` and in the [`interleaving`]
/// that `choices` give on another, C-G computed by the first for `workers` workers; compares
/// every command's reply and the final digests.
pub fn check_interleaving<S>(
    make: impl Fn() -> S,
    commands: &[S::Command],
    workers: u16,
    choices: &[u16],
) -> Result<(), Divergence<S::Reply>>
where
    S: Service,
    S::Reply: PartialEq + Debug,
{
    let (groups, merged_replies, merged) = run_merged(&make, commands, workers);
    let mut interleaved = make();
    let mut replies: Vec<Option<S::Reply>> = commands.iter().map(|_| None).collect();
    for index in interleaving(&groups, choices) {
        replies[index] = Some(interleaved.execute(&commands[index]));
    }
    compare((merged_replies, &merged), (replies, &interleaved))
}

/// Runs `commands` in merged order on one service from `make`, and on another as a P-SMR
/// replica with `workers` workers would: between two `g_all` commands, each worker group's
/// commands on a thread of its own at once, through [`ParallelService::execute_shared`]; each
/// `g_all` command through [`Service::execute`] once those threads are done. Compares every
/// reply and the final digests.
///
/// # Panics
/// If a command that C-G sends to a worker group needs exclusive access.
pub fn check_parallel<S>(
    make: impl Fn() -> S,
    commands: &[S::Command],
    workers: u16,
) -> Result<(), Divergence<S::Reply>>
where
    S: ParallelService,
    S::Command: Sync,
    S::Reply: PartialEq + Debug + Send,
{
    let (groups, merged_replies, merged) = run_merged(&make, commands, workers);
    let mut parallel = make();
    let mut replies: Vec<Option<S::Reply>> = commands.iter().map(|_| None).collect();
    for segment in segments(&groups) {
        let shared = &parallel;
        let done: Vec<Vec<(usize, S::Reply)>> = std::thread::scope(|scope| {
            let workers: Vec<_> = segment
                .queues
                .iter()
                .map(|queue| {
                    scope.spawn(move || {
                        queue
                            .iter()
                            .map(|&index| {
                                let reply = shared.execute_shared(&commands[index]);
                                (index, reply.expect("a worker-group command runs shared"))
                            })
                            .collect()
                    })
                })
                .collect();
            workers
                .into_iter()
                .map(|worker| worker.join().expect("a worker thread panicked"))
                .collect()
        });
        for (index, reply) in done.into_iter().flatten() {
            replies[index] = Some(reply);
        }
        if let Some(index) = segment.barrier {
            replies[index] = Some(parallel.execute(&commands[index]));
        }
    }
    compare((merged_replies, &merged), (replies, &parallel))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::WorkerId;

    const A: Group = Group::Worker(WorkerId(0));
    const B: Group = Group::Worker(WorkerId(1));

    #[test]
    fn worker_groups_interleave_between_g_all_commands() {
        let groups = [A, A, B, Group::All, B, A];
        assert_eq!(interleaving(&groups, &[0]), [0, 1, 2, 3, 4, 5]);
        assert_eq!(interleaving(&groups, &[1]), [2, 0, 1, 3, 5, 4]);
        assert_eq!(interleaving(&groups, &[]), [0, 1, 2, 3, 4, 5]);
        assert_eq!(interleaving(&[Group::All, Group::All], &[1]), [0, 1]);
        assert_eq!(interleaving(&[], &[1]), Vec::<usize>::new());
    }

    #[test]
    fn every_interleaving_keeps_each_group_s_order() {
        let groups = [A, B, A, B, B, Group::All, A];
        for choice in 0..4 {
            let order = interleaving(&groups, &[choice, 1, 0, 1]);
            let mut sorted = order.clone();
            sorted.sort();
            assert_eq!(sorted, (0..groups.len()).collect::<Vec<_>>());
            let a: Vec<_> = order.iter().filter(|&&i| groups[i] == A).collect();
            assert!(a.windows(2).all(|w| w[0] < w[1]));
            assert_eq!(order[5], 5, "g_all keeps its place");
        }
    }
}
