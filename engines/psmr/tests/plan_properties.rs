//! Algorithm 1's plan under random interleavings of worker steps (seed 004 §IV-C, §IV-E):
//! commands delivered as the merge would deliver them, workers that poll, execute and finish in
//! any order, each execution taking effect when the worker finishes it. Checked: the replies
//! and the final state equal executing the merged order on one thread, and the workers never
//! deadlock. The same runs with the barrier taken out (the deliberate bug `no_barrier`) must
//! be caught.
use std::collections::BTreeMap;

use bytes::Bytes;
use logless_btree::{KvCommand, KvService};
use logless_multipaxos::ids::{ClientId, RequestSeq};
use logless_multipaxos::message::Request;
use logless_psmr::plan::{Delivered, Mode, Plan, PlanBugs, Step};
use logless_service::{Digest, Group, Service, Wire, WorkerId};
use proptest::prelude::*;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

mod kv_commands;
use kv_commands::{key, kv_command};

/// The most steps a run may take: far more than any run needs (a few per command).
const STEPS_MAX: usize = 100_000;

fn command() -> impl Strategy<Value = KvCommand> {
    (any::<u8>(), 0u8..8, any::<u8>()).prop_map(|(kind, k, value)| kv_command(kind, k, value))
}

fn random_command(rng: &mut SmallRng) -> KvCommand {
    kv_command(rng.random(), rng.random_range(0..8), rng.random())
}

/// Replies by command index, and the digest of the final state.
type Outcome = (BTreeMap<u64, Vec<u8>>, Digest);

fn service() -> KvService {
    KvService::with_fanout(4)
}

/// Executes `commands` in order on one thread.
fn sequential(commands: &[KvCommand]) -> Outcome {
    let mut service = service();
    let replies = commands
        .iter()
        .enumerate()
        .map(|(i, c)| (i as u64, service.execute_encoded(&c.encode_to_vec())))
        .collect();
    (replies, service.digest())
}

/// Each worker's merged sequence: its own group's commands and every g_all command, in order.
fn sequences(workers: u16, commands: &[KvCommand]) -> Vec<Vec<Delivered>> {
    let service = service();
    let mut sequences = vec![Vec::new(); usize::from(workers)];
    for (i, command) in commands.iter().enumerate() {
        let payload = Bytes::from(command.encode_to_vec());
        let group = service.group_of_encoded(&payload, workers);
        let delivered = Delivered {
            group,
            request: Request {
                client: ClientId(i as u64),
                seq: RequestSeq(1),
                payload,
            },
        };
        match group {
            Group::Worker(worker) => sequences[usize::from(worker.0)].push(delivered),
            Group::All => sequences.iter_mut().for_each(|s| s.push(delivered.clone())),
        }
    }
    sequences
}

/// Runs the plan with steps interleaved by `seed`; an error names a deadlock.
fn parallel(
    workers: u16,
    commands: &[KvCommand],
    seed: u64,
    bugs: PlanBugs,
) -> Result<Outcome, String> {
    let mut rng = SmallRng::seed_from_u64(seed);
    let sequences = sequences(workers, commands);
    let mut delivered = vec![0; usize::from(workers)];
    let mut executing: Vec<Option<Delivered>> = vec![None; usize::from(workers)];
    let mut plan = Plan::new(workers, bugs);
    let mut service = service();
    let mut replies = BTreeMap::new();
    let mut idle_rounds = 0;
    for _ in 0..STEPS_MAX {
        let all_delivered = (0..sequences.len()).all(|w| delivered[w] == sequences[w].len());
        if all_delivered && executing.iter().all(Option::is_none) {
            if plan.is_drained() {
                return Ok((replies, service.digest()));
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
            1 if executing[index].is_none() => {
                // A worker the plan says is not runnable would change nothing by polling (so a
                // runtime may let it sleep), and one it says is runnable would.
                let runnable = plan.is_runnable(WorkerId(w));
                let before = plan.clone();
                let step = plan.poll(WorkerId(w));
                assert_eq!(runnable, plan != before, "{step:?} of {before:?}");
                match step {
                    Step::Execute { mode, command } => {
                        assert_eq!(mode == Mode::Synchronous, command.group == Group::All);
                        executing[index] = Some(command);
                    }
                    Step::Wait | Step::Idle => {}
                }
            }
            2 => {
                if let Some(command) = executing[index].take() {
                    let reply = service.execute_encoded(&command.request.payload);
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
        let commands: Vec<KvCommand> = (0..30).map(|_| random_command(&mut rng)).collect();
        parallel(3, &commands, seed, bugs) != Ok(sequential(&commands))
    });
    assert!(caught, "no interleaving showed the missing barrier");
}

#[test]
fn figure_2_synchronous_mode_waits_for_every_worker_then_worker_0_executes() {
    // Three workers, one command each in their own group, then a g_all command (seed 004's
    // Figure 2, middle): worker 0 arrives first and waits, the barrier opens once the last
    // worker has arrived, and the others go on only after worker 0 has executed.
    let read_in = |worker: u16| {
        (0..)
            .map(|k| KvCommand::Read { key: key(k) })
            .find(|read| service().group(read, 3) == Group::Worker(WorkerId(worker)))
            .expect("some key in every group")
    };
    let insert = kv_command(0, 0, 1);
    let commands = [read_in(0), read_in(1), read_in(2), insert];
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

#[test]
fn a_run_of_g_all_commands_runs_on_worker_0_alone() {
    // Three inserts (g_all) delivered to two workers: once worker 1 has arrived at the first
    // barrier, worker 0 executes all three, and worker 1 is moved from barrier to barrier
    // without ever having anything to poll for (a runtime leaves it asleep).
    let commands = [
        kv_command(0, 0, 1),
        kv_command(0, 1, 1),
        kv_command(0, 2, 1),
    ];
    let mut plan = Plan::new(2, PlanBugs::default());
    for (w, sequence) in sequences(2, &commands).into_iter().enumerate() {
        assert_eq!(sequence.len(), 3, "every insert goes to g_all");
        for command in sequence {
            plan.deliver(WorkerId(w as u16), command);
        }
    }
    assert_eq!(plan.poll(WorkerId(1)), Step::Wait);
    for i in 0..3 {
        assert!(!plan.is_runnable(WorkerId(1)));
        match plan.poll(WorkerId(0)) {
            Step::Execute { mode, command } => {
                assert_eq!((mode, command.request.client.0), (Mode::Synchronous, i));
            }
            step => panic!("insert {i}: {step:?}"),
        }
        assert!(
            !plan.is_runnable(WorkerId(1)),
            "not released before t0 is done"
        );
        plan.executed(WorkerId(0));
    }
    assert!(!plan.is_runnable(WorkerId(1)));
    assert!(plan.is_drained());
}
