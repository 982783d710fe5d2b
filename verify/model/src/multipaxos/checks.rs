//! The properties, as functions of the replicas a state holds.
use logless_multipaxos::ids::{ClientId, Instance, RequestSeq};
use logless_multipaxos::message::Batch;
use logless_multipaxos::replica::Replica;
use logless_multipaxos::testing::History;

/// The instances `replica` holds, from its log start to its last instance.
fn instances(replica: &Replica<History>) -> impl Iterator<Item = Instance> {
    let end = replica.last_instance().map_or(0, |last| last.0 + 1);
    (replica.log_start().0..end).map(Instance)
}

/// Agreement: no two replicas know different batches decided in one instance, and no replica
/// heard of a decision contradicting one it knew.
pub fn agreement<'a>(replicas: impl Iterator<Item = &'a Replica<History>> + Clone) -> bool {
    let mut decided: Vec<(Instance, &Batch)> = Vec::new();
    for replica in replicas {
        if replica.stats().conflicting_decisions > 0 {
            return false;
        }
        for instance in instances(replica) {
            let Some(batch) = replica.decided(instance) else {
                continue;
            };
            match decided.iter().find(|(i, _)| *i == instance) {
                Some((_, other)) if *other != batch => return false,
                Some(_) => {}
                None => decided.push((instance, batch)),
            }
        }
    }
    true
}

/// Consistent executions: of any two replicas' executed requests, one is a prefix of the other.
pub fn executed_prefixes_consistent<'a>(
    replicas: impl Iterator<Item = &'a Replica<History>>,
) -> bool {
    let histories: Vec<_> = replicas.map(|r| r.state_machine().executed()).collect();
    histories.iter().all(|a| {
        histories.iter().all(|b| {
            let common = a.len().min(b.len());
            a[..common] == b[..common]
        })
    })
}

/// Exactly-once: no replica executed a request twice.
pub fn applied_once(replica: &Replica<History>) -> bool {
    let executed = replica.state_machine().executed();
    executed.iter().enumerate().all(|(n, (client, seq, _))| {
        executed[..n]
            .iter()
            .all(|(c, s, _)| (c, s) != (client, seq))
    })
}

/// No gap: execution passed only instances that decided a batch or a no-op, and a leader
/// proposed in its view (or knows decided) every instance from its first unexecuted one up to
/// the next it will propose in, so that no instance below its proposals stays empty for ever.
pub fn no_gap(replica: &Replica<History>) -> bool {
    let executed = (replica.log_start().0..replica.executed_below().0)
        .all(|i| replica.decided(Instance(i)).is_some());
    let proposed = replica.proposing_from().is_none_or(|next| {
        (replica.executed_below().0..next.0).all(|i| {
            let instance = Instance(i);
            replica.decided(instance).is_some()
                || replica
                    .vote(instance)
                    .is_some_and(|(view, _)| view == replica.view())
        })
    });
    executed && proposed
}

/// Whether `replica` knows one request decided in two instances.
pub fn decided_twice(replica: &Replica<History>) -> bool {
    let mut seen: Vec<(ClientId, RequestSeq)> = Vec::new();
    for instance in instances(replica) {
        for request in replica.decided(instance).map_or(&[][..], Batch::requests) {
            let id = (request.client, request.seq);
            if seen.contains(&id) {
                return true;
            }
            seen.push(id);
        }
    }
    false
}

/// Whether `replica` knows a no-op decided.
pub fn noop_decided(replica: &Replica<History>) -> bool {
    instances(replica).any(|i| replica.decided(i).is_some_and(Batch::is_noop))
}
