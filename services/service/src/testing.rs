//! A check of a service's C-G, for tests: executing commands in any order that P-SMR could
//! produce must give what executing them in the merged order gives.
//!
//! P-SMR keeps the order within each worker group and puts every `g_all` command between the
//! same commands on every worker (the barrier), but commands of different worker groups
//! between two `g_all` commands may run in any interleaving. [`interleaving`] builds one such
//! order from a list of choices (a proptest draws them); [`check_interleaving`] runs both
//! orders on fresh services and compares every reply and the final digests. A C-G that sends
//! two dependent commands to different groups fails it for some choices.
use std::fmt::Debug;

use crate::{Group, Service};

/// An order of `groups.len()` commands that P-SMR could execute: `g_all` commands keep their
/// places, and between two of them the worker groups' commands interleave as `choices` say
/// (each choice picks among the groups that still have commands, cycling through `choices`).
pub fn interleaving(groups: &[Group], choices: &[u16]) -> Vec<usize> {
    let mut order = Vec::with_capacity(groups.len());
    let mut choices = choices.iter().copied().cycle();
    let mut start = 0;
    while start < groups.len() {
        let end = groups[start..]
            .iter()
            .position(|&group| group == Group::All)
            .map_or(groups.len(), |offset| start + offset);
        // The worker groups' queues of this segment, each in merged order.
        let mut queues: Vec<(Group, Vec<usize>)> = Vec::new();
        for (index, &group) in groups.iter().enumerate().take(end).skip(start) {
            match queues.iter_mut().find(|(queued, _)| *queued == group) {
                Some((_, queue)) => queue.push(index),
                None => queues.push((group, vec![index])),
            }
        }
        for queue in &mut queues {
            queue.1.reverse();
        }
        while !queues.is_empty() {
            let pick = usize::from(choices.next().unwrap_or(0)) % queues.len();
            order.push(queues[pick].1.pop().expect("queues left are not empty"));
            if queues[pick].1.is_empty() {
                queues.remove(pick);
            }
        }
        if end < groups.len() {
            order.push(end);
        }
        start = end + 1;
    }
    order
}

/// Where an interleaving gave something the merged order did not.
#[derive(Debug, PartialEq, Eq)]
pub enum Divergence<R> {
    /// Command `index` answered `interleaved` instead of `merged`.
    Reply {
        /// The command's place in the merged order.
        index: usize,
        /// Its reply in the merged order.
        merged: R,
        /// Its reply in the interleaving.
        interleaved: R,
    },
    /// Every reply matched but the final states differ.
    Digest,
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
    let mut merged = make();
    let groups: Vec<Group> = commands
        .iter()
        .map(|command| merged.group(command, workers))
        .collect();
    let merged_replies: Vec<S::Reply> = commands
        .iter()
        .map(|command| merged.execute(command))
        .collect();
    let mut interleaved = make();
    let mut interleaved_replies: Vec<Option<S::Reply>> = commands.iter().map(|_| None).collect();
    for index in interleaving(&groups, choices) {
        interleaved_replies[index] = Some(interleaved.execute(&commands[index]));
    }
    for (index, (merged, interleaved)) in merged_replies
        .into_iter()
        .zip(interleaved_replies)
        .enumerate()
    {
        let interleaved = interleaved.expect("an interleaving runs every command");
        if merged != interleaved {
            return Err(Divergence::Reply {
                index,
                merged,
                interleaved,
            });
        }
    }
    if merged.digest() != interleaved.digest() {
        return Err(Divergence::Digest);
    }
    Ok(())
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
