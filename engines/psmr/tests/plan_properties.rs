//! Algorithm 1's plan under random interleavings of worker steps (seed 004 §IV-C, §IV-E):
//! commands delivered as the merge would deliver them, workers that poll, execute and finish in
//! any order, each execution taking effect when the worker finishes it. Checked: the replies
//! and the final state equal executing the merged order on one thread, and the workers never
//! deadlock. The same runs with the barrier taken out (the deliberate bug `no_barrier`) must
//! be caught.
use std::collections::BTreeMap;

use bytes::Bytes;
use logless_multipaxos::ids::{ClientId, RequestSeq};
use logless_multipaxos::message::Request;
use logless_psmr::ids::WorkerId;
use logless_psmr::plan::{Delivered, Mode, Plan, PlanBugs, Step};
use logless_psmr::service::{CommandGroups, Destination, Service};
use logless_psmr::testing::{CounterCommand, CounterGroups, Counters};
use proptest::prelude::*;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

/// The most steps a run may take: far more than any run needs (a few per command).
const STEPS_MAX: usize = 100_000;

fn command() -> impl Strategy<Value = CounterCommand> {
    prop_oneof![
        6 => (0u64..8, -3i64..4).prop_map(|(key, amount)| CounterCommand::Add { key, amount }),
        1 => Just(CounterCommand::Double),
        1 => Just(CounterCommand::Sum),
    ]
}

fn random_command(rng: &mut SmallRng) -> CounterCommand {
    match rng.random_range(0..8) {
        0 => CounterCommand::Double,
        1 => CounterCommand::Sum,
        _ => CounterCommand::Add {
            key: rng.random_range(0..8),
            amount: rng.random_range(-3..4),
        },
    }
}

/// Replies by command index, and the final state.
type Outcome = (BTreeMap<u64, Bytes>, Counters);

/// Executes `commands` in order on one thread.
fn sequential(commands: &[CounterCommand]) -> Outcome {
    let mut counters = Counters::default();
    let replies = commands
        .iter()
        .enumerate()
        .map(|(i, c)| (i as u64, counters.execute(&c.encode())))
        .collect();
    (replies, counters)
}

/// Each worker's merged sequence: its own group's commands and every g_all command, in order.
fn sequences(workers: u16, commands: &[CounterCommand]) -> Vec<Vec<Delivered>> {
    let service = CounterGroups::default();
    let mut sequences = vec![Vec::new(); usize::from(workers)];
    for (i, command) in commands.iter().enumerate() {
        let payload = command.encode();
        let destination = service.destination(&payload, workers);
        let delivered = Delivered {
            group: destination.group(),
            request: Request {
                client: ClientId(i as u64),
                seq: RequestSeq(1),
                payload,
            },
        };
        match destination {
            Destination::Worker(worker) => sequences[usize::from(worker.0)].push(delivered),
            Destination::All => sequences.iter_mut().for_each(|s| s.push(delivered.clone())),
        }
    }
    sequences
}

/// Runs the plan with steps interleaved by `seed`; an error names a deadlock.
fn parallel(
    workers: u16,
    commands: &[CounterCommand],
    seed: u64,
    bugs: PlanBugs,
) -> Result<Outcome, String> {
    let mut rng = SmallRng::seed_from_u64(seed);
    let sequences = sequences(workers, commands);
    let mut delivered = vec![0; usize::from(workers)];
    let mut executing: Vec<Option<Delivered>> = vec![None; usize::from(workers)];
    let mut plan = Plan::new(workers, bugs);
    let mut counters = Counters::default();
    let mut replies = BTreeMap::new();
    let mut idle_rounds = 0;
    for _ in 0..STEPS_MAX {
        let all_delivered = (0..sequences.len()).all(|w| delivered[w] == sequences[w].len());
        if all_delivered && executing.iter().all(Option::is_none) {
            if plan.is_drained() {
                return Ok((replies, counters));
            }
            // Nothing more will come: every worker polls; two rounds without an execution
            // mean that no worker can ever move again.
            let mut moved = false;
            for w in 0..workers {
                if let Step::Execute { command, .. } = plan.poll(WorkerId(w)) {
                    executing[usize::from(w)] = Some(command);
                    moved = true;
                }
            }
            idle_rounds = if moved { 0 } else { idle_rounds + 1 };
            if idle_rounds == 2 {
                return Err(format!("deadlock: {plan:?}"));
            }
            continue;
        }
        let w = rng.random_range(0..workers);
        let index = usize::from(w);
        match rng.random_range(0..3) {
            0 if delivered[index] < sequences[index].len() => {
                plan.deliver(WorkerId(w), sequences[index][delivered[index]].clone());
                delivered[index] += 1;
            }
            1 if executing[index].is_none() => match plan.poll(WorkerId(w)) {
                Step::Execute { mode, command } => {
                    assert_eq!(
                        mode == Mode::Synchronous,
                        command.group == logless_psmr::ids::Group::All
                    );
                    executing[index] = Some(command);
                }
                Step::Wait | Step::Idle => {}
            },
            2 => {
                if let Some(command) = executing[index].take() {
                    let reply = counters.execute(&command.request.payload);
                    replies.insert(command.request.client.0, reply);
                    plan.executed(WorkerId(w));
                }
            }
            _ => {}
        }
    }
    Err(format!("no end after {STEPS_MAX} steps"))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1_000))]

    #[test]
    fn any_interleaving_equals_sequential_execution_and_never_deadlocks(
        workers in 1u16..=4,
        commands in proptest::collection::vec(command(), 0..40),
        seed in any::<u64>(),
    ) {
        let outcome = parallel(workers, &commands, seed, PlanBugs::default());
        prop_assert_eq!(outcome, Ok(sequential(&commands)));
    }
}

#[test]
fn synchronous_mode_without_the_barrier_is_caught() {
    let bugs = PlanBugs { no_barrier: true };
    let mut rng = SmallRng::seed_from_u64(4);
    let caught = (0..200).any(|seed| {
        let commands: Vec<CounterCommand> = (0..30).map(|_| random_command(&mut rng)).collect();
        parallel(3, &commands, seed, bugs) != Ok(sequential(&commands))
    });
    assert!(caught, "no interleaving showed the missing barrier");
}

#[test]
fn figure_2_synchronous_mode_waits_for_every_worker_then_worker_0_executes() {
    // Three workers, one command each in their own group, then a g_all command (seed 004's
    // Figure 2, middle): worker 0 arrives first and waits, the barrier opens once the last
    // worker has arrived, and the others go on only after worker 0 has executed.
    let commands = [
        CounterCommand::Add { key: 0, amount: 1 },
        CounterCommand::Add { key: 1, amount: 1 },
        CounterCommand::Add { key: 2, amount: 1 },
        CounterCommand::Double,
    ];
    let mut plan = Plan::new(3, PlanBugs::default());
    for (w, sequence) in sequences(3, &commands).into_iter().enumerate() {
        for command in sequence {
            plan.deliver(WorkerId(w as u16), command);
        }
    }
    let execute = |plan: &mut Plan, w: u16| match plan.poll(WorkerId(w)) {
        Step::Execute { mode, command } => (mode, command.request.client.0),
        step => panic!("t{w}: {step:?}"),
    };
    assert_eq!(execute(&mut plan, 0), (Mode::Parallel, 0));
    plan.executed(WorkerId(0));
    assert_eq!(
        plan.poll(WorkerId(0)),
        Step::Wait,
        "t1 and t2 have not arrived"
    );
    assert_eq!(execute(&mut plan, 1), (Mode::Parallel, 1));
    plan.executed(WorkerId(1));
    assert_eq!(plan.poll(WorkerId(1)), Step::Wait);
    assert_eq!(plan.poll(WorkerId(0)), Step::Wait, "t2 has not arrived");
    assert_eq!(execute(&mut plan, 2), (Mode::Parallel, 2));
    plan.executed(WorkerId(2));
    assert_eq!(
        plan.poll(WorkerId(2)),
        Step::Wait,
        "t2 waits for t0 to execute"
    );
    assert_eq!(execute(&mut plan, 0), (Mode::Synchronous, 3));
    assert_eq!(
        plan.poll(WorkerId(1)),
        Step::Wait,
        "not released before t0 is done"
    );
    plan.executed(WorkerId(0));
    for w in 0..3 {
        assert_eq!(plan.poll(WorkerId(w)), Step::Idle, "t{w} released");
    }
    assert!(plan.is_drained());
}
