//! One group's ordered stream: what its Multi-Paxos log delivers, batch by batch.
//!
//! Each group runs a `logless_multipaxos` [`Replica`](logless_multipaxos::replica::Replica)
//! whose state machine is a [`Stream`]: it executes nothing, it records every batch the log
//! executes (with the batch's execution stamp) for the merge to take. The log's client table
//! has already left out requests decided twice, so every request reaches the stream once.
//! Skip requests (see [`crate::groups`]) advance the stream's position and carry no command;
//! they are dropped here, so a batch that held only a skip arrives with no requests.
use std::collections::VecDeque;

use bytes::Bytes;
use logless_multipaxos::ids::{ClientId, Instance};
use logless_multipaxos::message::Request;
use logless_multipaxos::state_machine::StateMachine;

/// The client a group's leader proposes skips as. Client proxies must not use it.
pub const SKIP_CLIENT: ClientId = ClientId(u64::MAX);

/// One batch a group's log decided and executed, as the merge sees it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct DeliveredBatch {
    /// The batch's instance in its group's log.
    pub instance: Instance,
    /// The batch's execution stamp: its leader's stamp raised to the highest before it in the
    /// log, so it never goes down along a stream, and every replica computes the same one.
    pub stamp_ms: u64,
    /// The batch's commands, in order (no skips, no requests executed before).
    pub requests: Vec<Request>,
}

/// The state machine of a group's log: it hands the batches on instead of executing them.
///
/// Not snapshotted: a group's snapshot is the service's at a cut of every group
/// ([`crate::cut`]), which the groups' logs do not take part in yet, so they run with their
/// own snapshots off.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Stream {
    delivered: VecDeque<DeliveredBatch>,
}

impl Stream {
    /// Takes every batch delivered since the last call, in log order.
    pub fn take(&mut self) -> VecDeque<DeliveredBatch> {
        std::mem::take(&mut self.delivered)
    }
}

impl StateMachine for Stream {
    fn begin_batch(&mut self, instance: Instance, stamp_ms: u64) {
        self.delivered.push_back(DeliveredBatch {
            instance,
            stamp_ms,
            requests: Vec::new(),
        });
    }

    fn execute(&mut self, request: &Request) -> Bytes {
        if request.client != SKIP_CLIENT {
            let batch = self
                .delivered
                .back_mut()
                .expect("the log begins a batch before executing its requests");
            batch.requests.push(request.clone());
        }
        Bytes::new()
    }

    fn snapshot(&self) -> Bytes {
        Bytes::new()
    }

    fn restore(&mut self, _snapshot: &Bytes) {
        panic!("a group's stream is never snapshotted (snapshots are off in every group)");
    }
}
