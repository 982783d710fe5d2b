//! The deterministic merge under random arrival orders: for random decided streams of `g_0 …
//! g_{k-1}` and `g_all`, replicas that receive the decisions interleaved in different orders,
//! and take merged batches at different moments, deliver to every worker the same sequence,
//! which is the streams' batches sorted by (stamp, group, instance); a final skip in every
//! stream lets every batch out. Merging by arrival (the deliberate bug `by_arrival`) must be
//! caught.
use logless_multipaxos::ids::Instance;
use logless_psmr::ids::GroupIndex;
use logless_psmr::merge::{Merge, MergeBugs};
use logless_psmr::stream::DeliveredBatch;
use logless_service::{Group, WorkerId};
use proptest::prelude::*;
use rand::rngs::SmallRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};

/// Replicas compared per case.
const REPLICAS: u64 = 3;

/// Per group (in group order), the stamp steps of its batches: small steps, so stamps tie often.
fn streams() -> impl Strategy<Value = (u16, Vec<Vec<u64>>)> {
    (1u16..=4).prop_flat_map(|workers| {
        let stream = proptest::collection::vec(0u64..3, 0..12);
        (
            Just(workers),
            proptest::collection::vec(stream, usize::from(workers) + 1),
        )
    })
}

fn random_streams(rng: &mut SmallRng, workers: u16) -> Vec<Vec<u64>> {
    (0..=workers)
        .map(|_| {
            let len = rng.random_range(0..12);
            (0..len).map(|_| rng.random_range(0..3)).collect()
        })
        .collect()
}

/// Each group's decided batches, stamps accumulated from the steps, then a skip stamped above
/// every other batch.
fn decided(workers: u16, steps: &[Vec<u64>]) -> Vec<(Group, Vec<DeliveredBatch>)> {
    let skip_ms = 1 + steps
        .iter()
        .map(|s| s.iter().sum::<u64>())
        .max()
        .unwrap_or(0);
    steps
        .iter()
        .enumerate()
        .map(|(index, steps)| {
            let group = Group::from_index(index, workers).expect("a group per stream");
            let mut stamp_ms = 0;
            let mut batches: Vec<DeliveredBatch> = steps
                .iter()
                .map(|step| {
                    stamp_ms += step;
                    stamp_ms
                })
                .chain(std::iter::once(skip_ms))
                .enumerate()
                .map(|(instance, stamp_ms)| DeliveredBatch {
                    instance: Instance(instance as u64),
                    stamp_ms,
                    requests: Vec::new(),
                })
                .collect();
            batches.shrink_to_fit();
            (group, batches)
        })
        .collect()
}

/// What one worker should deliver: its streams' batches sorted by (stamp, group, instance),
/// each stream's final skip left out (nothing is ever above it).
fn expected(worker: WorkerId, streams: &[(Group, Vec<DeliveredBatch>)]) -> Vec<(Group, u64)> {
    let mut batches: Vec<(u64, Group, u64)> = streams
        .iter()
        .filter(|(g, _)| *g == Group::All || *g == Group::Worker(worker))
        .flat_map(|(g, batches)| {
            let real = &batches[..batches.len() - 1];
            real.iter().map(|b| (b.stamp_ms, *g, b.instance.0))
        })
        .collect();
    batches.sort();
    batches.into_iter().map(|(_, g, i)| (g, i)).collect()
}

/// One replica: the decisions arrive interleaved by `seed`, each worker's merge is drained at
/// random moments; returns what every worker delivered, skips aside.
fn replica(
    workers: u16,
    streams: &[(Group, Vec<DeliveredBatch>)],
    seed: u64,
    bugs: MergeBugs,
) -> Vec<Vec<(Group, u64)>> {
    let mut rng = SmallRng::seed_from_u64(seed);
    let mut arrivals: Vec<usize> = streams
        .iter()
        .enumerate()
        .flat_map(|(index, (_, batches))| std::iter::repeat_n(index, batches.len()))
        .collect();
    arrivals.shuffle(&mut rng);
    let mut next = vec![0; streams.len()];
    let mut merges: Vec<Merge> = (0..workers)
        .map(|w| Merge::new(&[Group::Worker(WorkerId(w)), Group::All], bugs))
        .collect();
    let mut out = vec![Vec::new(); usize::from(workers)];
    let drain = |merges: &mut Vec<Merge>, out: &mut Vec<Vec<(Group, u64)>>| {
        for (w, merge) in merges.iter_mut().enumerate() {
            while let Some((group, batch)) = merge.pop() {
                out[w].push((group, batch.instance.0));
            }
        }
    };
    for index in arrivals {
        let (group, batches) = &streams[index];
        let batch = batches[next[index]].clone();
        next[index] += 1;
        match group {
            Group::Worker(w) => merges[usize::from(w.0)].push(*group, batch),
            Group::All => merges
                .iter_mut()
                .for_each(|m| m.push(*group, batch.clone())),
        }
        if rng.random_bool(0.5) {
            drain(&mut merges, &mut out);
        }
    }
    drain(&mut merges, &mut out);
    // The final skips are delivered last or not at all (nothing is above them): leave them out.
    for delivered in &mut out {
        delivered.retain(|(group, instance)| {
            let index = group.index(workers);
            *instance + 1 < streams[index].1.len() as u64
        });
    }
    out
}

/// Every replica's delivery per worker, if they all equal the expected order.
fn check(workers: u16, steps: &[Vec<u64>], seed: u64, bugs: MergeBugs) -> Result<(), String> {
    let streams = decided(workers, steps);
    let expected: Vec<Vec<(Group, u64)>> = (0..workers)
        .map(|w| expected(WorkerId(w), &streams))
        .collect();
    for r in 0..REPLICAS {
        let delivered = replica(workers, &streams, seed.wrapping_add(r), bugs);
        if delivered != expected {
            return Err(format!(
                "replica {r} delivered {delivered:?}, not {expected:?}"
            ));
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1_000))]

    #[test]
    fn every_replica_merges_every_workers_streams_in_the_same_order(
        (workers, steps) in streams(),
        seed in any::<u64>(),
    ) {
        prop_assert_eq!(check(workers, &steps, seed, MergeBugs::default()), Ok(()));
    }
}

#[test]
fn merging_by_arrival_is_caught() {
    let bugs = MergeBugs { by_arrival: true };
    let mut rng = SmallRng::seed_from_u64(7);
    let caught = (0..100).any(|seed| {
        let steps = random_streams(&mut rng, 2);
        check(2, &steps, seed, bugs).is_err()
    });
    assert!(caught, "no arrival order showed the nondeterministic merge");
}
