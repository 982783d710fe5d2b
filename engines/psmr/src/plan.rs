//! Algorithm 1's execution, as a state machine of worker steps (seed 004 §IV-C).
//!
//! The plan holds, per worker, the commands its merge delivered, and tells each worker what to
//! do next; the node drives it from real threads (one per worker, the plan behind a lock or
//! split per worker with a shared barrier), tests drive it from random interleavings. A worker
//! calls [`Plan::poll`] and gets a [`Step`]:
//!
//! * a command of its own group: [`Step::Execute`] in [`Mode::Parallel`]: it executes it,
//!   replies, calls [`Plan::executed`] and polls again;
//! * a command of `g_all`: the worker *arrives* at that command's barrier (signal (a) of the
//!   seed's Figure 2) and waits ([`Step::Wait`]) until released. Worker 0, the lowest of
//!   `g_all`'s members and so Algorithm 1's designated thread, gets [`Step::Execute`] in
//!   [`Mode::Synchronous`] once every worker has arrived; its [`Plan::executed`] releases the
//!   others (signal (b)): it moves each of them past the command and, if that worker's next
//!   command is `g_all`'s too, up to that command's barrier, exactly as the worker's own next
//!   poll would. A run of `g_all` commands so needs no other worker to wake between them.
//!
//! [`Plan::is_runnable`] tells a runtime which workers a poll would move, so that it wakes only
//! those.
//!
//! # Why this equals sequential execution, and never deadlocks
//! Let the merged order be the total order of [`crate::merge`], restricted per worker to its
//! own group and `g_all`. A `g_all` command `C` runs only once every worker has arrived, that
//! is, has finished every command before `C` in its own sequence; and no worker starts a command
//! after `C` before `C` has run. So everything before `C` in the total order ran before it and
//! everything after ran after. Between two consecutive `g_all` commands the workers run their own
//! groups' commands in their sequences' order, concurrently; C-G makes commands of different
//! workers' groups independent, so any interleaving of them gives the state and replies of the
//! total order. By induction over the `g_all` commands, the plan gives exactly the replies and
//! the final state of executing the merged order on one thread.
//!
//! No deadlock: a worker waits only at a barrier, and only for the workers that have not
//! arrived there (or, once all did, for worker 0 to run the command). Every worker delivers the
//! same `g_all` commands in the same order, so the barrier every waiting worker waits at is the
//! same one, the lowest `g_all` command not yet run; a worker that has not arrived there has
//! only its own group's commands before it, which it runs without waiting for anyone. So some
//! worker can always step until every worker has arrived, and then worker 0 can run the command.
//! (The seed's general argument, for commands multicast to any set of groups, is in §IV-E.)
//!
//! The deliberate bug [`PlanBugs::no_barrier`] runs a `g_all` command on worker 0 as soon as
//! worker 0 reaches it, and lets the other workers go past it without waiting.
use std::collections::{BTreeSet, VecDeque};

use logless_multipaxos::message::Request;
use logless_service::{Group, WorkerId};

/// Deliberate bugs of the plan, each off by default, for tests that must catch them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct PlanBugs {
    /// Synchronous mode without the barrier: worker 0 runs a `g_all` command as soon as it
    /// reaches it, while the other workers carry on past it.
    pub no_barrier: bool,
}

/// A command delivered to a worker, with the group that ordered it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Delivered {
    /// The group whose stream ordered the command.
    pub group: Group,
    /// The command and the client that sent it.
    pub request: Request,
}

/// How a worker executes a command (seed 004 §IV-C).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Mode {
    /// Delivered in the worker's own group: executed at once, concurrently with other workers.
    Parallel,
    /// Delivered in `g_all`: executed while every other worker waits at the barrier.
    Synchronous,
}

/// What a worker does next.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Step {
    /// Execute the command, reply to its client, then call [`Plan::executed`].
    Execute {
        /// The execution mode.
        mode: Mode,
        /// The command.
        command: Delivered,
    },
    /// Wait at a `g_all` command's barrier; poll again once another worker has moved.
    Wait,
    /// Nothing delivered: poll again once the merge has delivered more.
    Idle,
}

/// Where a worker is in its sequence.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Phase {
    /// Between commands.
    Free,
    /// Executing a command the plan gave it.
    Executing(Mode),
    /// Arrived at the barrier of the `g_all` command at the front of its queue.
    AtBarrier,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Worker {
    delivered: VecDeque<Delivered>,
    phase: Phase,
    /// How many `g_all` commands this worker has gone past.
    passed_all: u64,
}

/// Algorithm 1's execution plan for the workers of one replica.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Plan {
    workers: Vec<Worker>,
    /// How many `g_all` commands have been executed: the barrier of the next one is open.
    executed_all: u64,
    /// The workers arrived at the open barrier.
    arrived: BTreeSet<WorkerId>,
    bugs: PlanBugs,
}

/// The worker that executes `g_all` commands: the lowest-numbered member of `g_all`.
pub const SYNCHRONOUS_EXECUTOR: WorkerId = WorkerId(0);

impl Plan {
    /// A plan for `workers` workers, with nothing delivered.
    ///
    /// # Panics
    /// If `workers` is 0.
    pub fn new(workers: u16, bugs: PlanBugs) -> Plan {
        assert!(workers >= 1, "a replica has a worker");
        let worker = Worker {
            delivered: VecDeque::new(),
            phase: Phase::Free,
            passed_all: 0,
        };
        Plan {
            workers: vec![worker; usize::from(workers)],
            executed_all: 0,
            arrived: BTreeSet::new(),
            bugs,
        }
    }

    /// How many workers the plan has.
    pub fn workers(&self) -> u16 {
        u16::try_from(self.workers.len()).expect("workers counted in u16")
    }

    /// Hands `worker` the next command of its merged sequence.
    ///
    /// # Panics
    /// If the command's group is another worker's (the merge of `worker` does not deliver it).
    pub fn deliver(&mut self, worker: WorkerId, command: Delivered) {
        assert!(
            matches!(command.group, Group::All) || command.group == Group::Worker(worker),
            "{worker:?} delivers {:?}",
            command.group
        );
        self.worker(worker).delivered.push_back(command);
    }

    /// How many commands `worker` has been delivered and not finished.
    pub fn backlog(&self, worker: WorkerId) -> usize {
        self.workers[usize::from(worker.0)].delivered.len()
    }

    /// Whether every worker has finished every command delivered.
    pub fn is_drained(&self) -> bool {
        self.workers
            .iter()
            .all(|w| w.delivered.is_empty() && w.phase == Phase::Free)
    }

    /// Whether some worker is executing a command the plan gave it.
    pub fn is_executing(&self) -> bool {
        (self.workers.iter()).any(|w| matches!(w.phase, Phase::Executing(_)))
    }

    /// What `worker` does next.
    ///
    /// # Panics
    /// If `worker` is executing a command (it must call [`Plan::executed`] first).
    pub fn poll(&mut self, worker: WorkerId) -> Step {
        loop {
            let executed_all = self.executed_all;
            let all_arrived = self.arrived.len() == self.workers.len();
            let bugs = self.bugs;
            let state = self.worker(worker);
            match state.phase {
                Phase::Executing(_) => panic!("{worker:?} polled while executing"),
                Phase::AtBarrier if executed_all > state.passed_all => {
                    // Released (signal (b)): go past the command worker 0 executed.
                    state.delivered.pop_front().expect("the barrier's command");
                    state.passed_all += 1;
                    state.phase = Phase::Free;
                }
                Phase::AtBarrier if worker == SYNCHRONOUS_EXECUTOR && all_arrived => {
                    state.phase = Phase::Executing(Mode::Synchronous);
                    let command = state.delivered.front().expect("the barrier's command");
                    return Step::Execute {
                        mode: Mode::Synchronous,
                        command: command.clone(),
                    };
                }
                Phase::AtBarrier => return Step::Wait,
                Phase::Free => {
                    let Some(front) = state.delivered.front() else {
                        return Step::Idle;
                    };
                    if front.group != Group::All {
                        let command = state.delivered.pop_front().expect("a front");
                        state.phase = Phase::Executing(Mode::Parallel);
                        return Step::Execute {
                            mode: Mode::Parallel,
                            command,
                        };
                    }
                    if bugs.no_barrier {
                        // The bug: worker 0 executes the g_all command at once, the others
                        // drop it and go on.
                        let command = state.delivered.pop_front().expect("a g_all command");
                        state.passed_all += 1;
                        if worker == SYNCHRONOUS_EXECUTOR {
                            state.phase = Phase::Executing(Mode::Synchronous);
                            let mode = Mode::Synchronous;
                            return Step::Execute { mode, command };
                        }
                        continue;
                    }
                    self.arrive(worker);
                }
            }
        }
    }

    /// `worker` finished the command of its last [`Step::Execute`]. After a synchronous command
    /// this releases the workers waiting at its barrier.
    ///
    /// # Panics
    /// If `worker` was not executing.
    pub fn executed(&mut self, worker: WorkerId) {
        let barrier = !self.bugs.no_barrier;
        let state = self.worker(worker);
        let Phase::Executing(mode) = state.phase else {
            panic!("{worker:?} executed nothing");
        };
        state.phase = Phase::Free;
        if mode == Mode::Synchronous && barrier {
            state.delivered.pop_front().expect("the barrier's command");
            state.passed_all += 1;
            self.executed_all += 1;
            // Signal (b), and the next barrier at once: each worker waiting here goes past the
            // command and, if its next command is `g_all`'s too, arrives at that one's barrier,
            // as its own next poll would do without executing anything. A run of `g_all`
            // commands delivered to every worker so runs on worker 0 alone, with no other
            // worker woken in between.
            let waiting = std::mem::take(&mut self.arrived);
            for other in waiting.into_iter().filter(|&w| w != worker) {
                let state = self.worker(other);
                state.delivered.pop_front().expect("the barrier's command");
                state.passed_all += 1;
                state.phase = Phase::Free;
                if state
                    .delivered
                    .front()
                    .is_some_and(|c| c.group == Group::All)
                {
                    self.arrive(other);
                }
            }
        }
    }

    /// Whether a poll of `worker` now would do something: execute, or move (past a barrier it
    /// was released from, or up to the barrier of the `g_all` command at its front). A worker
    /// for which this is false would get [`Step::Wait`] or [`Step::Idle`] and change nothing,
    /// so a runtime lets it sleep until this turns true (after a delivery, an arrival, or the
    /// execution of a synchronous command).
    pub fn is_runnable(&self, worker: WorkerId) -> bool {
        let all_arrived = self.arrived.len() == self.workers.len();
        let state = &self.workers[usize::from(worker.0)];
        match state.phase {
            Phase::Executing(_) => false,
            Phase::AtBarrier => {
                self.executed_all > state.passed_all
                    || (worker == SYNCHRONOUS_EXECUTOR && all_arrived)
            }
            Phase::Free => !state.delivered.is_empty(),
        }
    }

    /// `worker`, free with a `g_all` command at its front, arrives at that command's barrier
    /// (signal (a)). Every earlier `g_all` command has been executed, and this one cannot be
    /// without this worker.
    fn arrive(&mut self, worker: WorkerId) {
        let executed_all = self.executed_all;
        let state = self.worker(worker);
        assert_eq!(state.passed_all, executed_all, "one barrier open at a time");
        state.phase = Phase::AtBarrier;
        self.arrived.insert(worker);
    }

    fn worker(&mut self, worker: WorkerId) -> &mut Worker {
        let count = self.workers.len();
        self.workers
            .get_mut(usize::from(worker.0))
            .unwrap_or_else(|| panic!("{worker:?} of {count} workers"))
    }
}
