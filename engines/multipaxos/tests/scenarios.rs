//! Scenario tests named after the situations of seed 002 (JPaxos, §II–§III): three replicas, a
//! network the test drives message by message, exact message sequences, and for the safety
//! properties the same run with a deliberate bug that must break them.
use std::collections::{BTreeMap, BTreeSet, VecDeque};

use bytes::Bytes;
use logless_multipaxos::config::{Config, Recovery, Snapshots};
use logless_multipaxos::ids::{ClientId, Epoch, Instance, NodeId, RequestSeq, View};
use logless_multipaxos::message::{
    Batch, ChunkCursor, ClientReply, Envelope, Message, Request, Snapshot, SnapshotChunk,
};
use logless_multipaxos::persist::{Durable, LogStore, Record, SnapshotJob};
use logless_multipaxos::replica::{Replica, Status};
use logless_multipaxos::state_machine::StateMachine;
use logless_multipaxos::testing::{durable_before_send, History, MemStore};

const A: NodeId = NodeId(1);
const B: NodeId = NodeId(2);
const C: NodeId = NodeId(3);

/// How often the test network ticks every replica.
const TICK_MS: u64 = 10;

/// Three replicas and a network the test drives.
struct Net {
    configure: fn(&mut Config),
    replicas: BTreeMap<NodeId, Replica<History>>,
    stores: BTreeMap<NodeId, MemStore>,
    /// Crashed replicas: messages to them are lost.
    down: BTreeSet<NodeId>,
    /// Messages in flight, each with its sender and the sender's epoch when it sent it.
    queue: VecDeque<(NodeId, Epoch, Envelope)>,
    /// Every message released, in order, with its sender.
    sent: Vec<(NodeId, Envelope)>,
    replies: Vec<(NodeId, ClientReply)>,
    now_ms: u64,
    /// How far a replica's clock runs ahead of the network's (none unless a test sets one).
    ahead_ms: BTreeMap<NodeId, u64>,
    /// Snapshots handed to the runtime to write off its loop and not written yet
    /// (`Config::background_snapshots`), by replica.
    jobs: BTreeMap<NodeId, SnapshotJob>,
}

fn request(client: u64, seq: u64) -> Request {
    Request {
        client: ClientId(client),
        seq: RequestSeq(seq),
        payload: Bytes::from(format!("c{client}#{seq}")),
    }
}

fn every(_: NodeId, _: &Envelope) -> bool {
    true
}

fn kind(m: &Message) -> &'static str {
    match m {
        Message::Prepare { .. } => "Prepare",
        Message::Promise { .. } => "Promise",
        Message::Propose { .. } => "Propose",
        Message::Accept { .. } => "Accept",
        Message::Alive { .. } => "Alive",
        Message::CatchUpQuery { .. } => "CatchUpQuery",
        Message::CatchUpResponse { .. } => "CatchUpResponse",
        Message::Forward { .. } => "Forward",
        Message::Recovery { .. } => "Recovery",
        Message::RecoveryAnswer { .. } => "RecoveryAnswer",
    }
}

impl Net {
    /// Three fresh replicas; A leads view 0 once it has run phase 1 at its first tick.
    fn new(configure: fn(&mut Config)) -> Net {
        let mut net = Net {
            configure,
            replicas: BTreeMap::new(),
            stores: BTreeMap::new(),
            down: BTreeSet::new(),
            queue: VecDeque::new(),
            sent: Vec::new(),
            replies: Vec::new(),
            now_ms: 0,
            ahead_ms: BTreeMap::new(),
            jobs: BTreeMap::new(),
        };
        for node in [A, B, C] {
            let replica = Replica::new(net.config(node), History::default(), 0);
            net.replicas.insert(node, replica);
            net.stores.insert(node, MemStore::default());
        }
        net
    }

    fn config(&self, node: NodeId) -> Config {
        let mut config = Config::new(vec![A, B, C], node);
        config.batch_requests_max = 1;
        config.batch_delay_ms = 0;
        (self.configure)(&mut config);
        config
    }

    /// A leads view 0 and every replica knows it.
    fn started(configure: fn(&mut Config)) -> Net {
        let mut net = Net::new(configure);
        net.tick(A);
        net.run(every);
        assert!(net.replica(A).is_leader());
        net
    }

    /// The clock of `node`.
    fn now(&self, node: NodeId) -> u64 {
        self.now_ms + self.ahead_ms.get(&node).copied().unwrap_or(0)
    }

    fn replica(&self, node: NodeId) -> &Replica<History> {
        &self.replicas[&node]
    }

    fn history(&self, node: NodeId) -> Vec<String> {
        self.replica(node)
            .state_machine()
            .executed()
            .iter()
            .map(|(_, _, payload)| String::from_utf8(payload.to_vec()).unwrap())
            .collect()
    }

    /// Commits what `node` produced and queues its messages.
    fn collect(&mut self, node: NodeId) {
        let replica = self.replicas.get_mut(&node).unwrap();
        let (epoch, full_ss) = (replica.epoch(), replica.config().recovery.writes_records());
        let mut ready = replica.take_ready();
        if let Some(job) = ready.take_snapshot_job() {
            assert!(
                self.jobs.insert(node, job).is_none(),
                "one snapshot in flight"
            );
        }
        let Ok(released) = ready.commit(self.stores.get_mut(&node).unwrap());
        for envelope in released.messages {
            let durable = self.stores[&node].durable();
            assert!(
                !full_ss || durable_before_send(durable, &envelope.message),
                "{node:?} sent {envelope:?} before persisting it"
            );
            self.sent.push((node, envelope.clone()));
            self.queue.push_back((node, epoch, envelope));
        }
        self.replies
            .extend(released.replies.into_iter().map(|r| (node, r)));
    }

    fn submit(&mut self, node: NodeId, request: Request) {
        let now = self.now(node);
        self.replicas
            .get_mut(&node)
            .unwrap()
            .handle_request(now, request);
        self.collect(node);
    }

    fn tick(&mut self, node: NodeId) {
        let now = self.now(node);
        self.replicas.get_mut(&node).unwrap().tick(now);
        self.collect(node);
    }

    /// Delivers queued messages while `keep` says so (it drops the others), until none is left.
    fn run(&mut self, keep: impl Fn(NodeId, &Envelope) -> bool) {
        let mut budget = 10_000;
        while let Some((from, epoch, envelope)) = self.queue.pop_front() {
            budget -= 1;
            assert!(budget > 0, "the scenario does not quiesce");
            if self.down.contains(&envelope.to) || !keep(from, &envelope) {
                continue;
            }
            self.deliver(from, epoch, envelope);
        }
    }

    /// Delivers one message that `from` sent in `epoch`, and queues what it causes.
    fn deliver(&mut self, from: NodeId, epoch: Epoch, envelope: Envelope) {
        let to = envelope.to;
        let now = self.now(to);
        self.replicas.get_mut(&to).unwrap().handle_epoch_message(
            now,
            from,
            epoch,
            envelope.message,
        );
        self.collect(to);
    }

    /// Lets time pass to `until_ms`, ticking every live replica every [`TICK_MS`] and
    /// delivering what `keep` allows after each tick.
    fn advance(&mut self, until_ms: u64, keep: impl Fn(NodeId, &Envelope) -> bool) {
        while self.now_ms < until_ms {
            self.now_ms = (self.now_ms + TICK_MS).min(until_ms);
            let live: Vec<NodeId> = self
                .replicas
                .keys()
                .copied()
                .filter(|n| !self.down.contains(n))
                .collect();
            for node in live {
                self.tick(node);
            }
            self.run(&keep);
        }
    }

    /// Crashes `node` after its last commit: volatile state is lost, its store keeps what it
    /// flushed.
    fn crash(&mut self, node: NodeId) {
        self.stores.get_mut(&node).unwrap().crash();
        self.jobs.remove(&node);
        self.down.insert(node);
    }

    /// Writes the snapshot `node` handed off (encoded now, from the copy taken then), makes
    /// it durable and tells the replica, as a runtime does once its writer is done.
    fn finish_snapshot(&mut self, node: NodeId) -> Snapshot {
        let snapshot = self
            .jobs
            .remove(&node)
            .expect("a snapshot in flight")
            .encode();
        let store = self.stores.get_mut(&node).unwrap();
        let Ok(()) = store.write(&Record::Snapshot(snapshot.clone()));
        let Ok(()) = store.flush();
        self.replicas
            .get_mut(&node)
            .unwrap()
            .snapshot_durable(snapshot.clone());
        self.collect(node);
        snapshot
    }

    /// Crashes `node` in the middle of a step: what it produced for `message` is not committed,
    /// and only what the protocol leaked ahead of its writes gets out.
    fn crash_handling(&mut self, node: NodeId, from: NodeId, message: Message) {
        let now = self.now(node);
        let replica = self.replicas.get_mut(&node).unwrap();
        replica.handle_message(now, from, message);
        let epoch = replica.epoch();
        for envelope in replica.take_ready().abandon() {
            self.sent.push((node, envelope.clone()));
            self.queue.push_back((node, epoch, envelope));
        }
        self.crash(node);
    }

    /// Restarts `node` from its store: from its log under FullSS, in the epoch after the one
    /// stored under EpochSS, resuming without executing under mPaxos.
    fn restart(&mut self, node: NodeId) {
        let store = &self.stores[&node];
        let now = self.now(node);
        let config = self.config(node);
        let replica = match config.recovery {
            Recovery::FullSs => Replica::recover(config, History::default(), store.durable(), now),
            Recovery::Epoch => Replica::start_epoch(config, History::default(), store.epoch(), now),
            Recovery::Pmem => Replica::resume(config, History::default(), store.durable(), now),
        };
        self.replicas.insert(node, replica);
        self.down.remove(&node);
        self.collect(node);
    }

    /// The kinds of the messages sent since position `since` (heartbeats left out), each with
    /// its sender and destination.
    fn sent_since(&self, since: usize) -> Vec<(NodeId, NodeId, &'static str)> {
        self.sent[since..]
            .iter()
            .filter(|(_, e)| !matches!(e.message, Message::Alive { .. }))
            .map(|(from, e)| (*from, e.to, kind(&e.message)))
            .collect()
    }

    fn reply(&self, client: u64, seq: u64) -> Option<&Bytes> {
        self.replies
            .iter()
            .map(|(_, r)| r)
            .find(|r| r.client == ClientId(client) && r.seq == RequestSeq(seq))
            .map(|r| &r.reply)
    }
}

fn is_propose(e: &Envelope) -> bool {
    matches!(e.message, Message::Propose { .. })
}

fn is_accept(e: &Envelope) -> bool {
    matches!(e.message, Message::Accept { .. })
}

#[test]
fn the_first_leader_runs_phase_1_for_view_0_then_proposes_one_batch_per_round_trip() {
    let mut net = Net::new(|_| {});
    net.tick(A);
    net.run(every);
    assert_eq!(
        net.sent_since(0),
        [
            (A, B, "Prepare"),
            (A, C, "Prepare"),
            (B, A, "Promise"),
            (C, A, "Promise"),
        ]
    );
    assert_eq!(net.replica(A).view(), View(0));
    let since = net.sent.len();
    net.submit(A, request(1, 1));
    net.run(every);
    assert_eq!(
        net.sent_since(since),
        [
            (A, B, "Propose"),
            (A, C, "Propose"),
            (B, A, "Accept"),
            (B, C, "Accept"),
            (C, A, "Accept"),
            (C, B, "Accept"),
        ]
    );
    assert_eq!(net.reply(1, 1), Some(&Bytes::from("1")));
    for node in [A, B, C] {
        assert_eq!(net.history(node), ["c1#1"], "{node:?}");
    }
}

#[test]
fn section_2_batching_closes_a_batch_by_count_bytes_or_age_and_keeps_a_window() {
    let mut net = Net::started(|c| {
        c.batch_requests_max = 3;
        c.batch_bytes_max = 1_000;
        c.batch_delay_ms = 50;
        c.window_instances = 2;
    });
    let since = net.sent.len();
    // Two requests stay in the open batch; the third closes it by count.
    net.submit(A, request(1, 1));
    net.submit(A, request(2, 1));
    assert_eq!(net.sent_since(since), []);
    net.submit(A, request(3, 1));
    // Its Proposes are held back (not delivered), so the instance stays undecided. Two more
    // batches closed by age fill the window of 2; the one after waits.
    net.run(|_, e| !is_propose(e));
    net.submit(A, request(4, 1));
    net.advance(50, |_, e| !is_propose(e));
    net.submit(A, request(5, 1));
    net.advance(110, |_, e| !is_propose(e));
    let proposes: Vec<(Instance, usize)> = net.sent[since..]
        .iter()
        .filter(|(_, e)| e.to == B)
        .filter_map(|(_, e)| match &e.message {
            Message::Propose {
                instance, batch, ..
            } => Some((*instance, batch.requests().len())),
            _ => None,
        })
        .collect();
    // Instance 1 is sent again at the retransmission (100 ms), instance 2 never: the window.
    assert_eq!(
        proposes,
        [
            (Instance(0), 3),
            (Instance(1), 1),
            (Instance(0), 3),
            (Instance(1), 1)
        ]
    );
    // Delivering opens the window: the last request is proposed and everything executes.
    net.advance(300, every);
    for node in [A, B, C] {
        assert_eq!(
            net.history(node),
            ["c1#1", "c2#1", "c3#1", "c4#1", "c5#1"],
            "{node:?}"
        );
    }
}

/// Cuts A off until B, next in line, suspects it and becomes the candidate of view 1 (at
/// 300 ms). Returns the position in the message log just before B's Prepares, which are queued
/// and not delivered yet.
fn cut_a_off_until_b_is_candidate(net: &mut Net) -> usize {
    let cut_a = |from: NodeId, e: &Envelope| from != A && e.to != A;
    net.advance(290, cut_a);
    net.now_ms = 300;
    net.tick(A);
    net.run(cut_a);
    let since = net.sent.len();
    net.tick(B);
    assert!(net.replica(B).is_candidate());
    since
}

/// §II–§III: the leader has proposed one batch (its Proposes are lost) and holds another one
/// open when it is cut off. B suspects it first (it is next in line). A, back, promises view 1
/// with its vote and hands its open batch's request to B; B proposes A's batch again in the
/// same instance and orders the request of the open batch after it.
#[test]
fn section_3_a_leader_change_in_the_middle_of_a_batch() {
    let mut net = Net::started(|c| {
        c.batch_requests_max = 2;
        c.batch_delay_ms = 1_000;
    });
    net.submit(A, request(1, 1));
    net.submit(A, request(2, 1));
    net.submit(A, request(3, 1));
    net.run(|_, e| !is_propose(e));
    let since = cut_a_off_until_b_is_candidate(&mut net);
    net.run(every);
    assert_eq!(
        net.sent_since(since),
        [
            (B, A, "Prepare"),
            (B, C, "Prepare"),
            (A, B, "Forward"),
            (A, B, "Promise"),
            (C, B, "Promise"),
            (B, A, "Propose"),
            (B, C, "Propose"),
            (A, B, "Accept"),
            (A, C, "Accept"),
            (C, A, "Accept"),
            (C, B, "Accept"),
        ]
    );
    assert!(net.replica(B).is_leader());
    assert_eq!(net.replica(B).view(), View(1));
    assert_eq!(
        net.replica(C).decided(Instance(0)).map(Batch::requests),
        Some(&[request(1, 1), request(2, 1)][..]),
        "A's batch, proposed again"
    );
    // The handed-over request waits in B's open batch, which closes by age.
    net.advance(1_400, every);
    for node in [A, B, C] {
        assert_eq!(net.history(node), ["c1#1", "c2#1", "c3#1"], "{node:?}");
    }
    // A received the three requests and answers them.
    let answered: Vec<(NodeId, u64)> = net.replies.iter().map(|(n, r)| (*n, r.client.0)).collect();
    assert_eq!(answered, [(A, 1), (A, 2), (A, 3)]);
}

/// §II: instance 0's Propose is lost, instance 1's reaches B. The new leader finds a vote in
/// instance 1 and none in instance 0, which it fills with a no-op so that execution can pass it.
fn gap_scenario(configure: fn(&mut Config)) -> (Net, usize) {
    let mut net = Net::started(configure);
    net.submit(A, request(1, 1));
    net.run(|_, e| !is_propose(e));
    net.submit(A, request(2, 1));
    net.run(|_, e| e.to == B && is_propose(e));
    net.crash(A);
    let since = net.sent.len();
    net.advance(600, every);
    (net, since)
}

#[test]
fn section_2_a_gap_is_filled_with_a_noop() {
    let (net, since) = gap_scenario(|_| {});
    // With three replicas, B's vote and A's Propose made instance 1 decided at B already; the
    // view change only has the gap left to fill.
    assert_eq!(
        net.sent_since(since)[..7],
        [
            (B, A, "Prepare"),
            (B, C, "Prepare"),
            (C, B, "Promise"),
            (B, A, "Propose"),
            (B, C, "Propose"),
            (C, A, "Accept"),
            (C, B, "Accept"),
        ]
    );
    let proposed: Vec<(Instance, Batch)> = net.sent[since..]
        .iter()
        .filter(|(_, e)| e.to == C)
        .filter_map(|(_, e)| match &e.message {
            Message::Propose {
                instance, batch, ..
            } => Some((*instance, batch.clone())),
            _ => None,
        })
        .collect();
    assert_eq!(proposed, [(Instance(0), Batch::noop())]);
    assert_eq!(net.replica(B).stats().noops_proposed, 1);
    for node in [B, C] {
        assert_eq!(net.replica(node).decided(Instance(0)), Some(&Batch::noop()));
        assert_eq!(net.history(node), ["c2#1"], "{node:?}");
    }
}

#[test]
fn section_2_without_the_noop_fill_execution_stops_at_the_gap() {
    let (net, _) = gap_scenario(|c| c.bugs.skip_noop_fill = true);
    for node in [B, C] {
        assert!(
            net.history(node).is_empty(),
            "the deliberate bug must leave the decided instance 1 unexecuted"
        );
        assert_eq!(net.replica(node).executed_below(), Instance(0));
    }
}

/// §II, last paragraph: the leader's Proposes of request c1#1 are lost and the leader is cut
/// off; the client, believing it crashed, submits c1#1 again to B while B is changing views.
/// A's promise brings its vote, which B proposes again in instance 0, and B proposes the retry
/// in instance 1: the request is agreed twice and must be applied once, and the client gets the
/// reply of that one execution.
fn agreed_twice(configure: fn(&mut Config)) -> Net {
    let mut net = Net::started(configure);
    net.submit(A, request(1, 1));
    net.run(|_, e| !is_propose(e));
    cut_a_off_until_b_is_candidate(&mut net);
    net.submit(B, request(1, 1));
    net.run(every);
    assert!(net.replica(B).is_leader());
    let decided: Vec<Option<&[Request]>> = (0..2)
        .map(|i| net.replica(C).decided(Instance(i)).map(Batch::requests))
        .collect();
    let once = &[request(1, 1)][..];
    assert_eq!(decided, [Some(once), Some(once)], "agreed twice");
    net
}

#[test]
fn section_2_a_request_agreed_twice_is_applied_once() {
    let net = agreed_twice(|_| {});
    for node in [A, B, C] {
        assert_eq!(net.history(node), ["c1#1"], "{node:?}");
        assert_eq!(net.replica(node).stats().duplicates_skipped, 1);
    }
    // Both A and B were asked; both answer with the reply of the one execution.
    assert_eq!(net.replies.len(), 2);
    assert!(net.replies.iter().all(|(_, r)| r.reply == "1"));
}

#[test]
fn section_2_without_dedup_a_request_agreed_twice_is_applied_twice() {
    let net = agreed_twice(|c| c.bugs.no_dedup = true);
    assert_eq!(
        net.history(C),
        ["c1#1", "c1#1"],
        "the deliberate bug must apply the request twice"
    );
}

/// §III-A: a follower writes its vote before its Accept. B crashes while handling A's Propose
/// of c1#1 (C never got it). If B's Accept left before its vote was written, A decides c1#1
/// with B's Accept and answers the client, although no durable majority holds the vote: B
/// restarts without it, and B and C decide something else in instance 0 after A is gone.
/// Returns the histories of A and of B (the new leader) and whether the client got an answer.
fn follower_crash_before_its_vote_is_written(configure: fn(&mut Config)) -> Net {
    let mut net = Net::started(configure);
    net.submit(A, request(1, 1));
    let propose = net
        .queue
        .iter()
        .find(|(_, _, e)| e.to == B && is_propose(e))
        .map(|(_, _, e)| e.message.clone())
        .unwrap();
    net.queue.clear();
    net.crash_handling(B, A, propose);
    net.run(every);
    net.crash(A);
    net.restart(B);
    net.advance(400, every);
    net.submit(B, request(2, 1));
    net.advance(1_000, every);
    assert!(net.replica(B).is_leader());
    net
}

#[test]
fn section_3a_a_vote_is_written_before_its_accept_so_an_answer_survives_crashes() {
    // B takes over as soon as it suspects A (no quiet time after its restart): what matters
    // here is the vote it lost.
    let net = follower_crash_before_its_vote_is_written(|c| c.restart_quiet_ms = 0);
    assert_eq!(net.reply(1, 1), None, "nothing decided yet when B crashed");
    assert!(net.history(A).is_empty());
    assert_eq!(net.history(B), ["c2#1"]);
    assert_eq!(net.history(C), ["c2#1"]);
}

#[test]
fn section_3a_an_accept_before_its_vote_is_written_lets_two_values_be_decided() {
    let net = follower_crash_before_its_vote_is_written(|c| {
        c.restart_quiet_ms = 0;
        c.bugs.accept_before_persist = true;
    });
    // The client was told c1#1 executed at position 1, yet the surviving majority executed
    // c2#1 there: A and B disagree on instance 0.
    assert_eq!(net.reply(1, 1), Some(&Bytes::from("1")));
    assert_eq!(net.history(A), ["c1#1"]);
    assert_eq!(
        net.history(B),
        ["c2#1"],
        "the deliberate bug must let two values be decided"
    );
}

/// §III-B and §III-C: C is cut off while A and B decide enough to take two snapshots each and
/// truncate their logs below the first. Back, C learns from A's heartbeat that it lags, asks B
/// (not the leader) and gets B's snapshot, with its client table, and the instances after it.
#[test]
fn section_3c_a_follower_behind_a_truncation_gets_a_snapshot() {
    let mut net = Net::started(|c| {
        c.snapshot_log_bytes_min = 100;
        c.snapshot_ratio_percent = 0;
    });
    let cut_c = |from: NodeId, e: &Envelope| from != C && e.to != C;
    for seq in 1..=12 {
        net.submit(A, request(1, seq));
        net.run(cut_c);
    }
    assert!(net.replica(B).stats().snapshots_taken >= 2);
    assert!(net.replica(B).log_start() > Instance(0));
    assert!(net.history(C).is_empty());
    let since = net.sent.len();
    net.advance(60, every);
    assert_eq!(
        net.sent_since(since),
        [(C, B, "CatchUpQuery"), (B, C, "CatchUpResponse")]
    );
    let response = net.sent.iter().rev().find_map(|(_, e)| match &e.message {
        Message::CatchUpResponse { snapshot, .. } => Some(snapshot.clone()),
        _ => None,
    });
    assert!(matches!(response, Some(Some(_))), "a snapshot");
    assert_eq!(net.replica(C).stats().snapshots_installed, 1);
    assert_eq!(net.history(C), net.history(A));
    assert_eq!(net.history(C).len(), 12);
    assert_eq!(net.replica(C).client_table(), net.replica(A).client_table());
    // The client table came with the snapshot: a retry of an executed request is answered
    // from it, at C too.
    net.submit(C, request(1, 12));
    assert_eq!(
        net.replies.last().map(|(n, r)| (*n, r.reply.clone())),
        Some((C, Bytes::from("12")))
    );
}

/// The most state bytes per catch-up response in the chunk scenarios: a snapshot of a dozen
/// requests takes about ten pieces.
const CHUNK_BYTES: usize = 32;

fn tiny_chunks(config: &mut Config) {
    config.snapshot_log_bytes_min = 100;
    config.snapshot_ratio_percent = 0;
    config.snapshot_chunk_bytes = CHUNK_BYTES;
}

fn tiny_chunks_any_offset(config: &mut Config) {
    tiny_chunks(config);
    config.bugs.snapshot_chunk_any_offset = true;
}

fn cut_c(from: NodeId, e: &Envelope) -> bool {
    from != C && e.to != C
}

/// The piece of a snapshot `e` carries, if any.
fn chunk_of(e: &Envelope) -> Option<&SnapshotChunk> {
    match &e.message {
        Message::CatchUpResponse { snapshot, .. } => snapshot.as_ref(),
        _ => None,
    }
}

/// C is cut off while A and B decide `requests` requests and truncate their logs; then time
/// passes to the next heartbeat, so that C learns it lags and asks B, and B's first answer is
/// in flight (nothing delivered after the tick).
fn behind_a_truncation(configure: fn(&mut Config), requests: u64) -> Net {
    let mut net = Net::started(configure);
    for seq in 1..=requests {
        net.submit(A, request(1, seq));
        net.run(cut_c);
    }
    assert!(net.replica(B).log_start() > Instance(0));
    net.now_ms = 60;
    for node in [A, B, C] {
        net.tick(node);
    }
    net
}

/// Delivers queued messages one by one until none is left, handing each delivery to `also`,
/// which may deliver more (a duplicate, a stale message).
fn run_with(net: &mut Net, also: impl Fn(&mut Net, NodeId, &Envelope)) {
    let mut budget = 10_000;
    while let Some((from, epoch, envelope)) = net.queue.pop_front() {
        budget -= 1;
        assert!(budget > 0, "the scenario does not quiesce");
        if net.down.contains(&envelope.to) {
            continue;
        }
        net.deliver(from, epoch, envelope.clone());
        also(net, from, &envelope);
    }
}

/// The cursors of C's catch-up queries, in order.
fn cursors_asked(net: &Net) -> Vec<Option<ChunkCursor>> {
    net.sent
        .iter()
        .filter_map(|(from, e)| match &e.message {
            Message::CatchUpQuery { snapshot, .. } if *from == C => Some(*snapshot),
            _ => None,
        })
        .collect()
}

/// C's state and client table are A's, and C installed exactly one snapshot: B's.
fn assert_caught_up(net: &Net) {
    assert_eq!(net.replica(C).stats().snapshots_installed, 1);
    assert_eq!(net.replica(C).snapshot(), net.replica(B).snapshot());
    assert_eq!(net.history(C), net.history(A));
    assert_eq!(net.replica(C).client_table(), net.replica(A).client_table());
}

/// A snapshot larger than a piece travels in pieces C pulls one by one, each query naming how
/// far C got, each piece within the limit; it is installed once, after the last.
#[test]
fn section_3c_a_snapshot_larger_than_a_piece_is_pulled_piece_by_piece() {
    let mut net = behind_a_truncation(tiny_chunks, 12);
    net.run(every);
    assert_caught_up(&net);
    assert_eq!(net.history(C).len(), 12);
    let state_bytes = net.replica(B).snapshot().unwrap().state.len();
    let pieces = state_bytes.div_ceil(CHUNK_BYTES);
    assert!(
        pieces >= 5,
        "{state_bytes} bytes of state take several pieces"
    );
    assert_eq!(
        net.replica(C).stats().snapshot_chunks_received,
        pieces as u64
    );
    let chunks: Vec<&SnapshotChunk> = net.sent.iter().filter_map(|(_, e)| chunk_of(e)).collect();
    assert_eq!(chunks.len(), pieces);
    for (i, chunk) in chunks.iter().enumerate() {
        assert_eq!(chunk.offset, (i * CHUNK_BYTES) as u64);
        assert!(chunk.bytes.len() <= CHUNK_BYTES);
        assert_eq!(
            chunk.clients.is_some(),
            i + 1 == pieces,
            "the table comes last"
        );
    }
    let offsets: Vec<Option<u64>> = cursors_asked(&net)
        .iter()
        .map(|c| c.map(|c| c.offset))
        .collect();
    let mut expected = vec![None];
    expected.extend((1..pieces).map(|i| Some((i * CHUNK_BYTES) as u64)));
    assert_eq!(offsets[..pieces], expected);
}

/// A piece lost on the way is asked for again when the query times out, from the same
/// sender and the same offset, and the transfer goes on from there.
#[test]
fn section_3c_a_lost_piece_is_asked_for_again_after_the_timeout() {
    let mut net = behind_a_truncation(tiny_chunks, 12);
    let lost = std::cell::Cell::new(false);
    net.run(|_, e| {
        let third = chunk_of(e).is_some_and(|c| c.offset == 2 * CHUNK_BYTES as u64);
        let drop = third && !lost.get();
        lost.set(lost.get() || drop);
        !drop
    });
    assert!(lost.get());
    assert_eq!(net.replica(C).stats().snapshot_chunks_received, 2);
    assert_eq!(net.replica(C).stats().snapshots_installed, 0);
    assert!(net.history(C).is_empty(), "nothing installed from a part");
    net.advance(60 + 250, every);
    assert_caught_up(&net);
    let asked_third = cursors_asked(&net)
        .iter()
        .filter(|c| c.is_some_and(|c| c.offset == 2 * CHUNK_BYTES as u64))
        .count();
    assert_eq!(asked_third, 2, "the lost piece is asked for twice");
    assert!(
        net.sent
            .iter()
            .filter(|(f, e)| *f == C && matches!(e.message, Message::CatchUpQuery { .. }))
            .all(|(_, e)| e.to == B),
        "the same sender"
    );
}

/// Pieces of an older snapshot of B's (a duplicate network, or a slow one) arrive between
/// the pieces of the current one: they are dropped, and the current one is installed.
#[test]
fn section_3c_pieces_of_an_older_snapshot_mixed_in_are_dropped() {
    let mut net = Net::started(tiny_chunks);
    let mut older = None;
    for seq in 1..=12 {
        net.submit(A, request(1, seq));
        net.run(cut_c);
        if seq == 6 {
            older = net.replica(B).snapshot().cloned();
        }
    }
    let mut older = older.expect("a snapshot after six requests");
    let current = net.replica(B).snapshot().unwrap();
    assert!(older.next_instance < current.next_instance);
    // A history's state only grows at its end, so the older state is a prefix of the current
    // one; a register map's is not. Bytes that differ everywhere make a piece taken for
    // another show.
    older.state = Bytes::from(vec![0xee; current.state.len()]);
    net.now_ms = 60;
    for node in [A, B, C] {
        net.tick(node);
    }
    run_with(&mut net, |net, _, e| {
        let Some(chunk) = chunk_of(e) else {
            return;
        };
        // After each piece, one of the older snapshot's where C's next piece starts (it must
        // not be taken for it), and one at 0 (it must not start the older one over).
        for offset in [chunk.offset + chunk.bytes.len() as u64, 0] {
            let stale = SnapshotChunk::cut(&older, offset, CHUNK_BYTES);
            let message = Message::CatchUpResponse {
                view: View(0),
                snapshot: Some(stale),
                decided: Vec::new(),
            };
            net.deliver(B, Epoch(0), Envelope { to: C, message });
        }
    });
    assert_caught_up(&net);
}

/// B replaces its snapshot while C is halfway through it: B answers C's next query with the
/// first piece of the new one, and C starts over cleanly and installs the new one.
#[test]
fn section_3c_a_snapshot_replaced_halfway_is_received_again_from_its_start() {
    let mut net = behind_a_truncation(tiny_chunks, 12);
    let first = net.replica(B).snapshot().cloned().unwrap();
    // Two pieces reach C, then the network holds C's query while A and B go on.
    let mut held = Vec::new();
    while net.replica(C).stats().snapshot_chunks_received < 2 {
        let (from, epoch, envelope) = net.queue.pop_front().expect("the transfer goes on");
        net.deliver(from, epoch, envelope);
    }
    held.extend(net.queue.drain(..));
    for seq in 13..=18 {
        net.submit(A, request(1, seq));
        net.run(cut_c);
    }
    let second = net.replica(B).snapshot().cloned().unwrap();
    assert!(second.next_instance > first.next_instance);
    net.queue.extend(held);
    net.run(every);
    assert_caught_up(&net);
    assert_eq!(net.replica(C).snapshot(), Some(&second));
    assert_eq!(net.history(C).len(), 18);
    let restarts = net
        .sent
        .iter()
        .filter_map(|(_, e)| chunk_of(e))
        .filter(|c| c.offset == 0)
        .map(|c| c.next_instance)
        .collect::<Vec<_>>();
    assert_eq!(restarts, [first.next_instance, second.next_instance]);
}

/// Every piece is delivered twice (a network that duplicates): C keeps one copy of each.
fn every_piece_twice(configure: fn(&mut Config)) -> Net {
    let mut net = behind_a_truncation(configure, 12);
    run_with(&mut net, |net, from, e| {
        if chunk_of(e).is_some() {
            net.deliver(from, Epoch(0), e.clone());
        }
    });
    net
}

#[test]
fn section_3c_a_piece_received_twice_is_kept_once() {
    let net = every_piece_twice(tiny_chunks);
    assert_caught_up(&net);
}

/// With the deliberate bug each duplicate is appended too: the state assembled overruns the
/// snapshot's length (or, had the lengths met, would be another state), and C never holds B's.
#[test]
fn section_3c_a_piece_appended_at_the_wrong_offset_never_gives_the_senders_state() {
    let net = every_piece_twice(tiny_chunks_any_offset);
    assert_ne!(
        net.history(C),
        net.history(A),
        "the deliberate bug must keep C from A's state"
    );
    assert_eq!(net.replica(C).stats().snapshots_installed, 0);
}

#[test]
fn section_3c_a_follower_a_little_behind_catches_up_from_the_log_alone() {
    let mut net = Net::started(|_| {});
    let cut_c = |from: NodeId, e: &Envelope| from != C && e.to != C;
    for seq in 1..=3 {
        net.submit(A, request(1, seq));
        net.run(cut_c);
    }
    let since = net.sent.len();
    net.advance(60, every);
    assert_eq!(
        net.sent_since(since),
        [(C, B, "CatchUpQuery"), (B, C, "CatchUpResponse")]
    );
    assert_eq!(net.replica(C).stats().snapshots_installed, 0);
    assert_eq!(net.history(C), ["c1#1", "c1#2", "c1#3"]);
}

#[test]
fn a_follower_forwards_requests_to_the_leader_and_answers_its_client() {
    let mut net = Net::started(|_| {});
    let since = net.sent.len();
    net.submit(C, request(7, 1));
    net.run(every);
    assert_eq!(
        net.sent_since(since)[..3],
        [(C, A, "Forward"), (A, B, "Propose"), (A, C, "Propose")]
    );
    let (node, reply) = net.replies.last().unwrap();
    assert_eq!((*node, reply.reply.clone()), (C, Bytes::from("1")));
    assert!(is_accept(&net.sent.last().unwrap().1));
}

/// A new leader may find a vote, not a decision, for an instance that every other replica has
/// decided in an earlier view: it proposes the batch again, and the others, which will not vote
/// again in a decided instance, answer with the decision instead. (Found by the random test:
/// without that answer the leader waits at the instance for good.)
#[test]
fn section_3c_a_leader_proposing_a_decided_instance_again_learns_the_decision() {
    let mut net = Net::started(|_| {});
    net.submit(A, request(1, 1));
    // Only B gets the Propose; B decides (A's Propose and its own vote), its Accepts are lost.
    net.run(|_, e| e.to == B && is_propose(e));
    assert!(net.replica(B).decided(Instance(0)).is_some());
    // A and C cannot talk, and B's Accepts (also those sent again) do not reach A: C, which
    // hears from no leader, starts view 2 at 600 ms.
    let b_accept_to_a = |from: NodeId, e: &Envelope| from == B && e.to == A && is_accept(e);
    let a_c_cut = |from: NodeId, e: &Envelope| (from == A && e.to == C) || (from == C && e.to == A);
    net.advance(590, |f, e| !a_c_cut(f, e) && !b_accept_to_a(f, e));
    net.now_ms = 600;
    net.tick(C);
    assert!(net.replica(C).is_candidate());
    // C hears only A's promise, which reports A's vote; C's Proposes are held.
    let b_c_cut = |from: NodeId, e: &Envelope| (from == B && e.to == C) || (from == C && e.to == B);
    let held =
        |f: NodeId, e: &Envelope| b_c_cut(f, e) || b_accept_to_a(f, e) || (f == C && is_propose(e));
    net.run(|f, e| !held(f, e));
    assert!(net.replica(C).is_leader());
    // Now A gets B's Accept of view 0 and decides too.
    let accept = net
        .sent
        .iter()
        .find(|(f, e)| b_accept_to_a(*f, e))
        .cloned()
        .unwrap();
    net.queue.push_back((accept.0, Epoch(0), accept.1));
    net.run(every);
    assert!(net.replica(A).decided(Instance(0)).is_some());
    // C's Proposes of view 2 arrive: A and B answer with the decision.
    let since = net.sent.len();
    let proposes: Vec<(NodeId, Epoch, Envelope)> = net
        .sent
        .iter()
        .filter(|(f, e)| *f == C && is_propose(e))
        .map(|(f, e)| (*f, Epoch(0), e.clone()))
        .collect();
    net.queue.extend(proposes);
    net.run(every);
    assert_eq!(
        net.sent_since(since),
        [(A, C, "CatchUpResponse"), (B, C, "CatchUpResponse")]
    );
    for node in [A, B, C] {
        assert_eq!(net.history(node), ["c1#1"], "{node:?}");
    }
}

/// §V-A (FullSS): every replica crashes and restarts from its store: the snapshot is
/// restored, the decided instances after it executed again, and the client table rebuilt; the
/// leader of the view runs phase 1 again in the same view (safe: it wrote every value it
/// proposed in it before proposing), and the cluster goes on.
#[test]
fn section_5a_a_cluster_restarted_from_its_stores_replays_snapshot_and_log() {
    let mut net = Net::started(|c| {
        c.snapshot_log_bytes_min = 100;
        c.snapshot_ratio_percent = 0;
    });
    for seq in 1..=10 {
        net.submit(A, request(1, seq));
        net.run(every);
    }
    let before: Vec<Vec<String>> = [A, B, C].map(|n| net.history(n)).to_vec();
    let table = net.replica(A).client_table().clone();
    assert!(net.replica(A).snapshot().is_some());
    for node in [A, B, C] {
        net.crash(node);
    }
    for node in [A, B, C] {
        net.restart(node);
        assert_eq!(net.replica(node).client_table(), &table, "{node:?}");
    }
    assert_eq!([A, B, C].map(|n| net.history(n)).to_vec(), before);
    // A retry of the last request is answered from the rebuilt table, without the log.
    let since = net.sent.len();
    net.submit(B, request(1, 10));
    assert_eq!(net.sent.len(), since);
    assert_eq!(net.replies.last().unwrap().1.reply, "10");
    net.advance(20, every);
    assert!(net.replica(A).is_leader());
    assert_eq!(net.replica(A).view(), View(0));
    net.submit(A, request(1, 11));
    net.run(every);
    assert_eq!(net.reply(1, 11), Some(&Bytes::from("11")));
}

#[test]
fn section_2_a_batch_closes_when_its_requests_reach_the_byte_limit() {
    let mut net = Net::started(|c| {
        c.batch_requests_max = 100;
        c.batch_bytes_max = 100;
        c.batch_delay_ms = 1_000;
    });
    let since = net.sent.len();
    let large = |client: u64| Request {
        client: ClientId(client),
        seq: RequestSeq(1),
        payload: Bytes::from(vec![b'x'; 40]),
    };
    // 60 bytes each with the request's overhead: the second one reaches the limit; the batch
    // takes what fits (one), and the other waits for more or for the delay.
    net.submit(A, large(1));
    assert_eq!(net.sent_since(since), []);
    net.submit(A, large(2));
    let sizes: Vec<usize> = net.sent[since..]
        .iter()
        .filter_map(|(_, e)| match &e.message {
            Message::Propose { batch, .. } if e.to == B => Some(batch.requests().len()),
            _ => None,
        })
        .collect();
    assert_eq!(sizes, [1]);
}

/// Batch stamps (see the replica's docs, "Stamps"): A's clock runs 10 s ahead, so the batch
/// it leads is stamped 10 s ahead of B's clock. After A crashes, B leads with its slower clock
/// but stamps its first batch no lower than the decided one it has seen, and every replica
/// executes both at the same, non-decreasing stamps.
#[test]
fn stamps_a_new_leader_with_a_slower_clock_never_stamps_below_a_decided_batch() {
    let mut net = Net::new(|_| {});
    net.ahead_ms.insert(A, 10_000);
    net.tick(A);
    net.run(every);
    net.submit(A, request(1, 1));
    net.run(every);
    let first = net.replica(B).decided(Instance(0)).unwrap().stamp_ms();
    assert_eq!(first, 10_000, "A's clock");
    net.crash(A);
    net.advance(1_000, every);
    assert!(net.replica(B).is_leader());
    net.submit(B, request(2, 1));
    net.advance(1_100, every);
    let second = net.replica(C).decided(Instance(1)).unwrap().stamp_ms();
    assert!(net.now(B) < first, "B's clock is behind A's batch");
    assert_eq!(second, first, "B stamps at the highest stamp it has seen");
    for node in [B, C] {
        assert_eq!(net.history(node), ["c1#1", "c2#1"], "{node:?}");
        assert_eq!(net.replica(node).stamp_executed_ms(), first, "{node:?}");
    }
    // Once B's clock passes the floor, its stamps follow its clock again.
    net.advance(10_500, every);
    net.submit(B, request(3, 1));
    net.advance(10_600, every);
    let third = net.replica(C).decided(Instance(2)).unwrap().stamp_ms();
    assert!(third > first && third <= net.now(B), "{third}");
}

fn epoch_ss(config: &mut Config) {
    config.recovery = Recovery::Epoch;
}

fn epoch_ss_without_epochs(config: &mut Config) {
    config.recovery = Recovery::Epoch;
    config.bugs.ignore_epochs = true;
}

fn is_recovery(e: &Envelope) -> bool {
    matches!(
        e.message,
        Message::Recovery { .. } | Message::RecoveryAnswer { .. }
    )
}

/// §V-C (EpochSS): a follower restarts without its state. It sends Recovery in its new epoch,
/// takes part in nothing until a majority of the others, the leader among them, answered and
/// it caught up to the highest decision they know, and then votes again.
#[test]
fn section_5c_a_restarted_follower_recovers_from_a_majority_with_the_leader_then_votes() {
    let mut net = Net::started(epoch_ss);
    for node in [A, B, C] {
        assert_eq!(net.replica(node).epoch(), Epoch(1), "{node:?}");
        assert_eq!(net.stores[&node].epoch(), Some(Epoch(1)), "{node:?}");
        assert_eq!(net.stores[&node].flushes(), 0, "nothing else is written");
    }
    for seq in 1..=3 {
        net.submit(A, request(1, seq));
        net.run(every);
    }
    net.crash(B);
    // Decided while B is down: B must catch up past it.
    net.submit(A, request(1, 4));
    net.run(every);
    // B restarts with C unreachable: A's answer alone is not a majority of the others.
    let since = net.sent.len();
    net.restart(B);
    assert_eq!(net.stores[&B].epoch(), Some(Epoch(2)));
    assert_eq!(net.replica(B).status(), Status::Recovering);
    let c_cut = |from: NodeId, e: &Envelope| from != C && e.to != C;
    net.run(c_cut);
    assert_eq!(
        net.sent_since(since),
        [
            (B, A, "Recovery"),
            (B, C, "Recovery"),
            (A, B, "RecoveryAnswer")
        ]
    );
    assert_eq!(net.replica(B).status(), Status::Recovering);
    // Recovering, B drops client requests and votes for nothing.
    net.submit(B, request(2, 1));
    net.submit(A, request(1, 5));
    net.run(c_cut);
    assert!(net.history(B).is_empty());
    assert_eq!(net.replica(B).last_instance(), None);
    // C is back: Recovery goes again, and B catches up from C (not the leader).
    let since = net.sent.len();
    net.advance(100, every);
    let recovery: Vec<(NodeId, NodeId, &str)> = net
        .sent_since(since)
        .into_iter()
        .filter(|(_, _, kind)| kind.starts_with("Recovery") || kind.starts_with("CatchUp"))
        .collect();
    assert_eq!(
        recovery,
        [
            (B, A, "Recovery"),
            (B, C, "Recovery"),
            (A, B, "RecoveryAnswer"),
            (C, B, "RecoveryAnswer"),
            (B, C, "CatchUpQuery"),
            (C, B, "CatchUpResponse"),
        ]
    );
    assert_eq!(net.replica(B).status(), Status::Serving);
    assert_eq!(net.replica(B).stats().recoveries, 1);
    assert_eq!(net.history(B), net.history(A));
    assert_eq!(net.history(B).len(), 5);
    // B votes again: with C cut off, A decides with B's vote.
    let since = net.sent.len();
    net.submit(A, request(3, 1));
    net.run(c_cut);
    assert_eq!(
        net.sent_since(since),
        [
            (A, B, "Propose"),
            (A, C, "Propose"),
            (B, A, "Accept"),
            (B, C, "Accept")
        ]
    );
    assert_eq!(net.reply(3, 1), Some(&Bytes::from("6")));
    assert_eq!(net.history(B), net.history(A));
}

fn epoch_ss_tiny_chunks(config: &mut Config) {
    epoch_ss(config);
    tiny_chunks(config);
}

/// §V-C with a snapshot in pieces: a follower restarted under EpochSS behind a truncation
/// pulls the snapshot piece by piece and stays `Recovering` (no vote, no request taken) until
/// the last piece is in and installed.
#[test]
fn section_5c_a_restarted_follower_votes_only_once_every_piece_is_installed() {
    let mut net = Net::started(epoch_ss_tiny_chunks);
    for seq in 1..=12 {
        net.submit(A, request(1, seq));
        net.run(every);
    }
    net.crash(C);
    net.restart(C);
    while net.replica(C).stats().snapshot_chunks_received < 3 {
        let (from, epoch, envelope) = net.queue.pop_front().expect("the recovery goes on");
        net.deliver(from, epoch, envelope);
    }
    assert_eq!(net.replica(C).status(), Status::Recovering);
    assert_eq!(net.replica(C).stats().snapshots_installed, 0);
    // Halfway, C neither votes nor takes a request.
    let since = net.sent.len();
    net.submit(C, request(2, 1));
    net.submit(A, request(1, 13));
    let propose = net
        .queue
        .iter()
        .position(|(_, _, e)| e.to == C && is_propose(e))
        .expect("a Propose to C");
    let (from, epoch, envelope) = net.queue.remove(propose).unwrap();
    net.deliver(from, epoch, envelope);
    assert!(net.sent_since(since).iter().all(|(f, _, _)| *f != C));
    net.run(every);
    assert_eq!(net.replica(C).status(), Status::Serving);
    assert_eq!(net.replica(C).stats().snapshots_installed, 1);
    assert!(net.replica(C).stats().snapshot_chunks_received >= 5);
    assert_eq!(net.history(C)[..12], net.history(A)[..12]);
}

/// §V-C: every replica restarts under EpochSS. Nobody holds the state, nobody can answer a
/// Recovery, and each replica says why it does not serve instead of serving an empty map.
#[test]
fn section_5c_when_every_replica_restarts_the_cluster_refuses_service() {
    let mut net = Net::started(epoch_ss);
    net.submit(A, request(1, 1));
    net.run(every);
    for node in [A, B, C] {
        net.crash(node);
    }
    for node in [A, B, C] {
        net.restart(node);
    }
    net.advance(1_000, every);
    for node in [A, B, C] {
        assert_eq!(net.replica(node).status(), Status::StateLost, "{node:?}");
        assert!(net.history(node).is_empty(), "{node:?}");
    }
    let since = net.sent.len();
    net.submit(B, request(1, 2));
    net.advance(1_200, every);
    assert!(net.replies.iter().all(|(_, r)| r.seq != RequestSeq(2)));
    assert!(net.sent[since..].iter().all(|(_, e)| is_recovery(e)));
}

/// §V-C: with two replicas restarted, the one that kept its state knows that the cluster
/// cannot recover and says so too; with one, everything is served again.
#[test]
fn section_5c_a_replica_that_kept_its_state_knows_when_a_majority_lost_theirs() {
    let mut net = Net::started(epoch_ss);
    net.crash(B);
    net.crash(C);
    net.restart(B);
    net.restart(C);
    net.advance(200, every);
    for node in [A, B, C] {
        assert_eq!(net.replica(node).status(), Status::StateLost, "{node:?}");
    }
    // For as long as B and C keep asking: each asks again every retransmission interval.
    net.advance(1_000, every);
    for node in [A, B, C] {
        assert_eq!(net.replica(node).status(), Status::StateLost, "{node:?}");
    }
}

/// §V-C: a follower that recovered and has since sent the leader nothing (it caught up from the
/// other follower, and an idle leader's followers send nothing) does not count as recovering
/// there for good: when the other follower restarts later, the leader and the recovered
/// follower serve, and the restarted one recovers from them. (The whole-node simulation's
/// seed 170 of the lost disk under EpochSS: its leader said `StateLost` with one node down.)
#[test]
fn section_5c_a_recovered_follower_that_went_quiet_no_longer_counts_as_recovering() {
    let mut net = Net::started(epoch_ss);
    net.submit(A, request(1, 1));
    net.run(every);
    net.crash(B);
    let since = net.sent.len();
    net.restart(B);
    net.run(every);
    assert_eq!(net.replica(B).status(), Status::Serving);
    let from_b_to_a: Vec<&str> = (net.sent_since(since).into_iter())
        .filter(|(from, to, _)| (*from, *to) == (B, A))
        .map(|(_, _, kind)| kind)
        .collect();
    assert_eq!(from_b_to_a, ["Recovery"], "B caught up from C");
    // A copy of B's Recovery arriving late counts no more once B said anything else: B's
    // catch-up query told C that B's recovery is over.
    let recovery = (net.sent[since..].iter())
        .find(|(from, e)| *from == B && e.to == C && is_recovery(e))
        .map(|(_, e)| e.clone())
        .expect("B asked C");
    net.deliver(B, net.replica(B).epoch(), recovery);
    assert_eq!(net.replica(C).peers_recovering(), []);
    assert_eq!(
        net.replica(A).peers_recovering(),
        [B],
        "heard its Recovery just now"
    );
    // Idle for a while: A hears from B no more.
    net.advance(300, every);
    net.crash(C);
    net.restart(C);
    net.run(every);
    for node in [A, B] {
        assert_eq!(net.replica(node).status(), Status::Serving, "{node:?}");
    }
    net.advance(400, every);
    assert_eq!(net.replica(C).status(), Status::Serving);
    net.submit(A, request(1, 2));
    net.run(every);
    assert_eq!(net.reply(1, 2), Some(&Bytes::from("2")));
    assert_eq!(net.history(C), net.history(A));
}

/// Seed 002 Fig. 2 in this cluster: A leads view 0 and proposes X = c1#1 in instance 0;
/// only B gets the Propose, votes and broadcasts its Accept, and crashes; the Accepts are
/// still in transit. B restarts and asks for the state, but nothing is decided yet, so it
/// learns nothing and serves at once. A is then cut off; B leads view 1 with C's promise,
/// finds no vote in instance 0 and decides Y = c2#1 there. Finally B's stray Accept reaches A.
/// Returns the network and the stray Accept's fate: whether A decided with it.
fn figure_2_stray_accept(configure: fn(&mut Config)) -> Net {
    figure_2_stray_accept_restarting(configure, |net| net.restart(B))
}

/// [`figure_2_stray_accept`] with B restarted by `restart_b`.
fn figure_2_stray_accept_restarting(configure: fn(&mut Config), restart_b: fn(&mut Net)) -> Net {
    let mut net = Net::started(configure);
    net.submit(A, request(1, 1));
    let queued: Vec<(NodeId, Epoch, Envelope)> = net.queue.drain(..).collect();
    let (from, epoch, propose) = queued
        .into_iter()
        .find(|(_, _, e)| e.to == B && is_propose(e))
        .unwrap();
    net.deliver(from, epoch, propose);
    let stray: Vec<(NodeId, Epoch, Envelope)> = net.queue.drain(..).collect();
    assert_eq!(
        stray
            .iter()
            .map(|(f, ep, e)| (*f, *ep, e.to, kind(&e.message)))
            .collect::<Vec<_>>(),
        [(B, Epoch(1), A, "Accept"), (B, Epoch(1), C, "Accept")]
    );
    net.crash(B);
    restart_b(&mut net);
    net.run(every);
    assert_eq!(net.replica(B).status(), Status::Serving);
    assert_eq!(net.replica(B).last_instance(), None, "B forgot its vote");
    // A is cut off; B, next in line, suspects it and leads view 1 with C.
    let cut_a = |from: NodeId, e: &Envelope| from != A && e.to != A;
    net.advance(700, cut_a);
    assert!(net.replica(B).is_leader());
    net.submit(B, request(2, 1));
    net.run(cut_a);
    for node in [B, C] {
        assert_eq!(net.history(node), ["c2#1"], "{node:?}");
    }
    // The stray Accept (epoch 1) reaches A, which heard B's Recovery in a later epoch.
    let to_a = stray.into_iter().find(|(_, _, e)| e.to == A).unwrap();
    net.queue.push_back(to_a);
    net.run(every);
    net
}

#[test]
fn section_5c_figure_2_a_stray_accept_from_an_earlier_epoch_is_dropped() {
    let mut net = figure_2_stray_accept(epoch_ss);
    assert_eq!(net.replica(A).decided(Instance(0)), None);
    assert!(net.history(A).is_empty());
    // Healed, A learns the one decision.
    net.advance(1_500, every);
    for node in [A, B, C] {
        assert_eq!(net.history(node), ["c2#1"], "{node:?}");
        assert_eq!(net.replica(node).stats().conflicting_decisions, 0);
    }
}

#[test]
fn section_5c_figure_2_without_epochs_two_values_are_decided_in_one_instance() {
    let mut net = figure_2_stray_accept(epoch_ss_without_epochs);
    let x = net.replica(A).decided(Instance(0)).cloned();
    let y = net.replica(C).decided(Instance(0)).cloned();
    assert_eq!(x.map(|b| b.requests().to_vec()), Some(vec![request(1, 1)]));
    assert_eq!(y.map(|b| b.requests().to_vec()), Some(vec![request(2, 1)]));
    assert_eq!(net.reply(1, 1), Some(&Bytes::from("1")), "X was answered");
    assert_eq!(net.history(A), ["c1#1"]);
    assert_eq!(net.history(C), ["c2#1"]);
    // For good: healing does not bring A back in line.
    net.advance(1_500, every);
    assert_eq!(net.history(A), ["c1#1"]);
    assert_eq!(net.history(B), ["c2#1"]);
}

/// A lost disk under FullSS: B voted in instance 1 and learnt it decided (A's Propose and its
/// own vote), but its Accept never reached A or C, so A alone holds a vote there. B's disk is
/// lost and it rejoins: A, leading, names the instance after its highest proposal as the one to
/// catch up to, so B takes part only once instance 1 is decided again and B has it. Then A
/// fails, and B and C, who form a majority without A, keep what B once helped choose.
#[test]
fn a_rejoin_after_a_lost_disk_waits_for_what_its_lost_vote_may_have_chosen() {
    let mut net = Net::started(|_| {});
    net.submit(A, request(1, 1));
    net.run(every);
    let b_alone = |from: NodeId, e: &Envelope| from == A && e.to == B;
    net.submit(A, request(1, 2));
    net.run(b_alone);
    assert_eq!(net.history(B), ["c1#1", "c1#2"], "chosen by A and B");
    assert_eq!(net.history(A), ["c1#1"]);

    // B loses its disk and rejoins, while A's Proposes do not reach C.
    net.crash(B);
    net.stores.insert(B, MemStore::default());
    let now = net.now(B);
    let mut replica = Replica::recover(net.config(B), History::default(), &Durable::default(), now);
    replica.start_rejoin(now, Epoch(7));
    net.replicas.insert(B, replica);
    net.down.remove(&B);
    net.collect(B);
    assert_eq!(net.replica(B).status(), Status::Recovering);
    let no_propose_to_c = |from: NodeId, e: &Envelope| !(from == A && e.to == C && is_propose(e));
    net.advance(net.now_ms + 500, no_propose_to_c);
    assert_eq!(
        net.replica(B).status(),
        Status::Recovering,
        "instance 1 is not decided again yet"
    );
    assert_eq!(
        net.history(B),
        ["c1#1"],
        "caught up to the decided instance only"
    );
    // They reach C again: C's vote decides instance 1 again; B catches up and takes part.
    net.advance(net.now_ms + 500, every);
    assert_eq!(net.replica(B).status(), Status::Serving);
    assert_eq!(net.history(B), ["c1#1", "c1#2"]);
    assert_eq!(net.stores[&B].durable().view, net.replica(A).view());

    // A fails: B and C change the view and keep instance 1.
    net.crash(A);
    net.advance(net.now_ms + 2_000, every);
    net.submit(C, request(2, 1));
    net.advance(net.now_ms + 1_000, every);
    assert_eq!(net.history(C), ["c1#1", "c1#2", "c2#1"]);
    assert_eq!(net.history(B), net.history(C));
}

/// Rebuilds `node`'s state machine after [`Replica::resume`]: restored from the persistent
/// snapshot, or empty.
fn finish_rebuild(net: &mut Net, node: NodeId) {
    let now = net.now(node);
    net.replicas
        .get_mut(&node)
        .unwrap()
        .rebuild_now(History::default(), now);
    net.collect(node);
}

#[test]
fn section_5b_an_mpaxos_replica_votes_at_once_and_executes_once_rebuilt() {
    let mut net = Net::started(|c| {
        c.recovery = Recovery::Pmem;
        c.snapshot_log_bytes_min = 10;
        c.snapshot_ratio_percent = 0;
    });
    for seq in 1..=4 {
        net.submit(A, request(1, seq));
        net.run(every);
    }
    assert_eq!(net.history(B).len(), 4);
    assert!(
        net.stores[&B].durable().snapshot.is_some(),
        "B took a snapshot"
    );

    // B crashes and resumes from persistent memory: it votes for the next instance before its
    // state machine is back, and executes nothing until then.
    net.crash(B);
    net.restart(B);
    assert_eq!(net.replica(B).status(), Status::Rebuilding);
    assert!(net.replica(B).rebuild_from().is_some());
    let since = net.sent.len();
    net.submit(A, request(1, 5));
    net.run(every);
    assert!(
        net.sent_since(since).contains(&(B, A, "Accept")),
        "a resumed replica answers Paxos messages at once: {:?}",
        net.sent_since(since)
    );
    assert!(
        net.history(B).is_empty(),
        "nothing executed while rebuilding"
    );
    assert!(net.reply(1, 5).is_some(), "A and B decided it");

    finish_rebuild(&mut net, B);
    assert_eq!(net.replica(B).status(), Status::Serving);
    assert_eq!(net.history(B), net.history(A));
    assert_eq!(net.history(B).len(), 5);
    assert!(net.replica(B).rebuild_from().is_none());

    // A rebuilt machine handed over twice is not taken twice.
    finish_rebuild(&mut net, B);
    assert_eq!(net.history(B), net.history(A));
}

/// mPaxos with a snapshot every few requests, so that a rejoin catches up from one.
fn mpaxos_snapshots(config: &mut Config) {
    config.recovery = Recovery::Pmem;
    config.snapshot_log_bytes_min = 10;
    config.snapshot_ratio_percent = 0;
}

/// [`mpaxos_snapshots`] with the deliberate bug `late_rebuild_taken`.
fn mpaxos_snapshots_late_rebuild_taken(config: &mut Config) {
    mpaxos_snapshots(config);
    config.bugs.late_rebuild_taken = true;
}

/// Replaces `node`'s replica by one resumed under mPaxos from what its store holds (all of it
/// lost with the disk if `lost`), rejoining in `attempt`; a rebuild of the state machine is
/// outstanding until the rejoin ends it.
fn resume_rejoining(net: &mut Net, node: NodeId, lost: bool, attempt: Epoch) {
    net.crash(node);
    if lost {
        net.stores.insert(node, MemStore::default());
    }
    let now = net.now(node);
    let durable = net.stores[&node].durable().clone();
    let mut replica = Replica::resume(net.config(node), History::default(), &durable, now);
    assert_eq!(replica.status(), Status::Rebuilding);
    replica.start_rejoin(now, attempt);
    assert_eq!(replica.status(), Status::Recovering);
    assert!(
        replica.rebuild_from().is_none(),
        "the rejoin ended the rebuild"
    );
    net.replicas.insert(node, replica);
    net.down.remove(&node);
    net.collect(node);
}

/// Four requests decided and snapshotted by every replica.
fn four_decided(configure: fn(&mut Config)) -> Net {
    let mut net = Net::started(configure);
    for seq in 1..=4 {
        net.submit(A, request(1, seq));
        net.run(every);
    }
    net
}

/// [`four_decided`], then B loses its persistent memory and rejoins while a rebuild is
/// outstanding, and catches up from A's or C's snapshot.
fn four_decided_then_b_rejoined(configure: fn(&mut Config)) -> Net {
    let mut net = four_decided(configure);
    resume_rejoining(&mut net, B, true, Epoch(7));
    net.advance(net.now_ms + 500, every);
    assert_eq!(net.replica(B).status(), Status::Serving);
    assert!(net.replica(B).stats().snapshots_installed >= 1);
    assert_eq!(net.history(B), net.history(A));
    net
}

/// [`four_decided_then_b_rejoined`], then the runtime hands B the machine it rebuilt from its
/// (empty) persistent snapshot, and A decides a fifth request.
fn mpaxos_rejoin_then_late_rebuild(configure: fn(&mut Config)) -> Net {
    let mut net = four_decided_then_b_rejoined(configure);
    finish_rebuild(&mut net, B);
    net.submit(A, request(1, 5));
    net.advance(net.now_ms + 200, every);
    net
}

/// A lost disk under mPaxos: the rejoin wins over the rebuild of the empty persistent log. B
/// installs a peer's snapshot during its catch-up, takes part again, and the machine rebuilt
/// from its empty persistent memory, handed over afterwards, is dropped: B executes on the
/// installed state.
#[test]
fn an_mpaxos_rejoin_drops_a_rebuilt_machine_handed_over_after_it_installed_a_snapshot() {
    let net = mpaxos_rejoin_then_late_rebuild(mpaxos_snapshots);
    assert_eq!(net.history(B).len(), 5);
    assert_eq!(net.history(B), net.history(A));
}

/// The same with the deliberate bug `late_rebuild_taken`: the late machine replaces the state
/// B installed, and B's state no longer matches its peers'.
#[test]
fn an_mpaxos_rejoin_that_takes_a_late_rebuilt_machine_loses_the_installed_state() {
    let net = mpaxos_rejoin_then_late_rebuild(mpaxos_snapshots_late_rebuild_taken);
    assert_eq!(net.history(A).len(), 5);
    assert_ne!(net.history(B), net.history(A));
}

/// The reverse order: the rebuild ended before the rejoin started (the runtime handed the
/// machine first), and the rejoin catches up on that machine, installing a peer's snapshot over
/// it as any catch-up does.
#[test]
fn an_mpaxos_rejoin_after_the_rebuild_ended_catches_up_on_the_rebuilt_machine() {
    let mut net = four_decided(mpaxos_snapshots);
    net.crash(B);
    net.stores.insert(B, MemStore::default());
    net.restart(B);
    finish_rebuild(&mut net, B);
    assert_eq!(net.replica(B).status(), Status::Serving);
    let now = net.now(B);
    net.replicas
        .get_mut(&B)
        .unwrap()
        .start_rejoin(now, Epoch(7));
    net.collect(B);
    assert_eq!(net.replica(B).status(), Status::Recovering);
    net.advance(net.now_ms + 500, every);
    assert_eq!(net.replica(B).status(), Status::Serving);
    assert!(
        net.replica(B).stats().snapshots_installed >= 1,
        "installed over the machine handed over"
    );
    assert_eq!(net.history(B), net.history(A));
    assert_eq!(net.history(B).len(), 4);
}

/// A rejoin interrupted after it installed a snapshot and executed past it (the node's
/// `rejoined` marker not written yet): at the next start B resumes that persistent state and
/// rejoins again. The rejoin restores the persistent snapshot itself and executes the decided
/// instances after it before its first Recovery, then catches up to what was decided since; a
/// rebuilt machine handed over later is dropped.
#[test]
fn an_mpaxos_rejoin_interrupted_after_an_install_restores_it_and_rejoins_again() {
    let mut net = four_decided_then_b_rejoined(mpaxos_snapshots);
    assert!(net.stores[&B].durable().snapshot.is_some());

    // B restarts before its marker is written; meanwhile A and C decide two more requests.
    net.crash(B);
    for seq in 5..=6 {
        net.submit(A, request(1, seq));
        net.run(every);
    }
    resume_rejoining(&mut net, B, false, Epoch(8));
    assert!(
        !net.history(B).is_empty(),
        "restored from its persistent snapshot before its first Recovery"
    );
    net.advance(net.now_ms + 500, every);
    assert_eq!(net.replica(B).status(), Status::Serving);
    assert_eq!(net.history(B), net.history(A));
    assert_eq!(net.history(B).len(), 6);
    finish_rebuild(&mut net, B);
    assert_eq!(net.history(B), net.history(A));
}

/// B lost its epoch file with its directory and starts again without it: in epoch 1, the epoch
/// of its lost life, as a first start. A takes the stray Accept as one of B's current life's,
/// and two values are decided in instance 0: why a directory that ran before and has no epoch
/// file is refused unless it rejoins (docs/lost-disk.md, "Under EpochSS").
#[test]
fn an_epoch_ss_replica_that_lost_its_epoch_file_and_reuses_its_epoch_decides_twice() {
    let net = figure_2_stray_accept_restarting(epoch_ss, |net| {
        net.stores.insert(B, MemStore::default());
        net.restart(B);
        assert_eq!(net.replica(B).epoch(), Epoch(1), "its lost life's epoch");
    });
    let x = net.replica(A).decided(Instance(0)).cloned();
    let y = net.replica(C).decided(Instance(0)).cloned();
    assert_eq!(x.map(|b| b.requests().to_vec()), Some(vec![request(1, 1)]));
    assert_eq!(y.map(|b| b.requests().to_vec()), Some(vec![request(2, 1)]));
}

/// The same lost epoch file with a rejoin: the node takes an epoch at least its clock
/// incarnation (here 1,000; `last_before_rejoin` in the node), B recovers from A and C as after
/// any restart, and A drops the stray Accept of epoch 1.
#[test]
fn an_epoch_ss_replica_that_rejoins_after_losing_its_epoch_file_starts_a_new_epoch() {
    let mut net = figure_2_stray_accept_restarting(epoch_ss, |net| {
        net.stores.insert(B, MemStore::default());
        let now = net.now(B);
        let replica =
            Replica::start_epoch(net.config(B), History::default(), Some(Epoch(999)), now);
        assert_eq!(replica.status(), Status::Recovering);
        net.replicas.insert(B, replica);
        net.down.remove(&B);
        net.collect(B);
    });
    assert_eq!(net.replica(B).epoch(), Epoch(1000));
    assert_eq!(net.replica(A).decided(Instance(0)), None);
    net.advance(1_500, every);
    for node in [A, B, C] {
        assert_eq!(net.history(node), ["c2#1"], "{node:?}");
    }
}

/// mPaxosSM: the state machine keeps its state durable itself, so snapshots are on demand.
fn in_place(config: &mut Config) {
    config.recovery = Recovery::Pmem;
    config.snapshots = Snapshots::OnDemand;
    config.snapshot_log_bytes_min = 10;
}

fn in_place_tiny_chunks(config: &mut Config) {
    in_place(config);
    config.snapshot_chunk_bytes = CHUNK_BYTES;
}

/// Under on-demand snapshots no state is ever copied while every replica keeps up: the log is
/// truncated at checkpoints (records without state), and a replica restarted with its state as
/// of its last checkpoint (what the state machine in place holds at least) executes the log
/// after it and agrees with the others.
#[test]
fn section_5b_mpaxossm_truncates_at_checkpoints_without_a_snapshot() {
    let mut net = Net::started(in_place);
    for seq in 1..=12 {
        net.submit(A, request(1, seq));
        net.run(every);
    }
    for node in [A, B, C] {
        let stats = net.replica(node).stats();
        assert_eq!(stats.snapshots_taken, 0, "{node:?} copied its state");
        assert!(stats.checkpoints_taken >= 10, "{node:?}: {stats:?}");
        let durable = net.stores[&node].durable();
        let checkpoint = durable.snapshot.as_ref().expect("a checkpoint");
        assert!(checkpoint.state.is_empty(), "a checkpoint carries no state");
        assert_eq!(&checkpoint.clients, net.replica(node).client_table());
        // The log is kept back to the previous checkpoint only.
        assert!(durable.log_start > Instance(9), "{:?}", durable.log_start);
        assert!(durable.log.len() <= 2, "{:?}", durable.log.keys());
    }

    // B crashes and resumes: its state machine comes back with the state of the instances
    // below its checkpoint (one request each here), and it executes the rest from its log.
    net.crash(B);
    let config = net.config(B);
    let durable = net.stores[&B].durable().clone();
    let next = durable.snapshot.as_ref().unwrap().next_instance;
    let mut in_place = History::default();
    let executed = net.replica(B).state_machine().executed();
    for (client, seq, payload) in executed.iter().take(next.0 as usize) {
        in_place.execute(&Request {
            client: *client,
            seq: *seq,
            payload: payload.clone(),
        });
    }
    let now = net.now(B);
    let mut replica = Replica::resume(config, History::default(), &durable, now);
    assert!(replica.rebuild_from().is_none(), "nothing to restore");
    replica.finish_rebuild(in_place, now);
    net.replicas.insert(B, replica);
    net.down.remove(&B);
    net.collect(B);
    assert_eq!(net.replica(B).status(), Status::Serving);
    assert_eq!(net.history(B), net.history(A));
    net.submit(A, request(1, 13));
    net.run(every);
    assert_eq!(net.history(B), net.history(A));
    assert_eq!(net.history(B).len(), 13);
}

/// A replica behind the truncation gets a snapshot taken when it asks, in pieces; the
/// instances decided meanwhile, and the checkpoints they cause, neither replace it nor
/// truncate the log it needs: it is taken once and installed once.
#[test]
fn section_5b_mpaxossm_a_lagging_replica_gets_one_snapshot_taken_when_it_asks() {
    let mut net = behind_a_truncation(in_place_tiny_chunks, 12);
    assert_eq!(net.replica(B).stats().snapshots_taken, 0);
    let more = std::cell::Cell::new(100);
    run_with(&mut net, |net, _, e| {
        if chunk_of(e).is_some() && more.get() < 110 {
            more.set(more.get() + 1);
            net.submit(A, request(2, more.get()));
        }
    });
    net.advance(200, every);
    assert!(
        net.replica(B).stats().checkpoints_taken >= 20,
        "checkpoints while the pieces travelled"
    );
    let pieces = net.replica(C).stats().snapshot_chunks_received;
    assert!(pieces >= 5, "{pieces} pieces");
    let served: u64 = [A, B]
        .iter()
        .map(|n| net.replica(*n).stats().snapshots_taken)
        .sum();
    assert_eq!(served, 1, "one snapshot taken for every piece");
    assert_eq!(net.replica(C).stats().snapshots_installed, 1);
    assert_eq!(net.history(C), net.history(A));
    assert_eq!(net.history(C).len(), 22);
    assert_eq!(net.replica(C).client_table(), net.replica(A).client_table());
}

#[test]
#[should_panic(expected = "on-demand snapshots need a state machine that keeps its state")]
fn on_demand_snapshots_are_refused_without_a_state_machine_in_place() {
    let mut config = Config::new(vec![A, B, C], A);
    config.snapshots = Snapshots::OnDemand;
    let _ = Replica::new(config, History::default(), 0);
}

/// A leader at work (A, view 0) sees a replica restart whose first messages from the leader
/// are late (a link still reconnecting, a loaded machine): for the first `deaf_ms` after its
/// restart nothing from `leader` reaches it. Returns the net after another 2 s of requests.
fn restarted_while_the_leader_is_not_heard(restarted: NodeId, leader: NodeId, deaf_ms: u64) -> Net {
    let mut net = Net::started(|_| {});
    if leader != A {
        // `leader` takes over while A is down; A is the one restarted then.
        net.crash(A);
        net.advance(1_000, every);
        assert!(net.replica(leader).is_leader());
    } else {
        net.crash(restarted);
    }
    let mut seq = 0;
    for _ in 0..5 {
        seq += 1;
        net.submit(leader, request(1, seq));
        net.run(every);
    }
    net.advance(net.now_ms + 1_000, every);
    net.restart(restarted);
    let deaf = move |from: NodeId, e: &Envelope| !(from == leader && e.to == restarted);
    net.advance(net.now_ms + deaf_ms, deaf);
    for _ in 0..20 {
        seq += 1;
        net.submit(leader, request(1, seq));
        net.advance(net.now_ms + 100, every);
    }
    net
}

/// Issue 25: a restarted replica that has not heard from the leader yet does not start a view
/// change in its quiet time (`Config::restart_quiet_ms`): the leader goes on leading, and the
/// restarted replica follows it once it hears it. Before the quiet time, B (next in line)
/// suspected A 300 ms after its restart, and its Prepare deposed a working leader; A, restarted
/// in the view it led, moved on to a higher view of its own after 300 ms of phase 1 and
/// deposed B.
#[test]
fn a_restarted_replica_that_does_not_hear_the_leader_at_once_does_not_depose_it() {
    for (restarted, leader) in [(B, A), (A, B)] {
        let net = restarted_while_the_leader_is_not_heard(restarted, leader, 800);
        let view = net.replica(leader).view();
        assert!(
            net.replica(leader).is_leader(),
            "{leader:?} still leads after {restarted:?} restarted"
        );
        for node in [A, B, C] {
            assert_eq!(
                net.replica(node).view(),
                view,
                "{node:?} in the leader's view"
            );
            assert_eq!(
                net.history(node).len(),
                25,
                "{node:?} executed every request"
            );
        }
        assert_eq!(
            net.replica(restarted).stats().view_changes_started,
            u64::from(restarted == A),
            "{restarted:?} ran phase 1 only in the view it led, if any"
        );
    }
}

/// The quiet time ends: a cluster restarted whole whose last leader (A) stays down hears from
/// no leader, and B, next in line, takes over once the quiet time is over, not before.
#[test]
fn a_restarted_cluster_that_hears_no_leader_fails_over_after_the_quiet_time() {
    let mut net = Net::started(|_| {});
    net.submit(A, request(1, 1));
    net.run(every);
    for node in [A, B, C] {
        net.crash(node);
    }
    net.restart(B);
    net.restart(C);
    let quiet_ms = net.config(B).restart_quiet_ms;
    let restarted_ms = net.now_ms;
    net.advance(restarted_ms + quiet_ms.saturating_sub(TICK_MS), every);
    for node in [B, C] {
        assert_eq!(
            net.replica(node).stats().view_changes_started,
            0,
            "{node:?}"
        );
        assert_eq!(net.replica(node).view(), View(0), "{node:?}");
    }
    net.advance(restarted_ms + quiet_ms + 1_000, every);
    assert!(net.replica(B).is_leader(), "B took over");
    net.submit(B, request(1, 2));
    net.run(every);
    assert_eq!(net.history(C), ["c1#1", "c1#2"]);
}

/// Issue 25: a follower that knows it is behind waits for its leader as if it were last in line.
/// B, next in line after A, missed five decisions and cannot catch up (every catch-up answer is
/// lost) when A falls silent: C, up to date, suspects first and takes over, and B follows it.
/// Before, B suspected first, and as a candidate could have led only once caught up.
#[test]
fn a_follower_catching_up_lets_one_up_to_date_take_over_when_the_leader_falls_silent() {
    let mut net = Net::started(|_| {});
    for seq in 1..=5 {
        net.submit(A, request(1, seq));
        net.run(|_, e| e.to != B);
    }
    let no_catch_up =
        |_: NodeId, e: &Envelope| !matches!(e.message, Message::CatchUpResponse { .. });
    // A's heartbeat tells B that it is behind.
    net.advance(net.now_ms + 100, no_catch_up);
    assert!(net.replica(B).executed_below() < net.replica(C).executed_below());
    net.crash(A);
    net.advance(net.now_ms + 1_000, no_catch_up);
    assert!(net.replica(C).is_leader(), "C, up to date, took over");
    assert_eq!(net.replica(B).stats().view_changes_started, 0);
    net.submit(C, request(1, 6));
    net.advance(net.now_ms + 500, every);
    assert_eq!(net.history(B).len(), 6);
    assert_eq!(net.history(B), net.history(C));
}

fn background_snapshots(config: &mut Config) {
    config.snapshot_log_bytes_min = 100;
    config.snapshot_ratio_percent = 0;
    config.background_snapshots = true;
}

/// Snapshots off the loop (`Config::background_snapshots`): a replica hands a copy of its
/// state to the runtime instead of writing a snapshot record, takes no second one while that
/// one is in flight (its log grows on), and truncates its log only once the runtime reports
/// the snapshot durable, below the snapshot before it. The snapshot is the state at the copy,
/// although the replica executed more before it was encoded.
#[test]
fn a_snapshot_off_the_loop_truncates_the_log_only_once_durable() {
    let mut net = Net::started(background_snapshots);
    for seq in 1..=12 {
        net.submit(A, request(1, seq));
        net.run(every);
    }
    let first = net.jobs[&B].next_instance;
    assert!(
        net.replica(B).executed_below() > first,
        "executed past the copy"
    );
    assert_eq!(net.replica(B).snapshot_in_flight(), Some(first));
    assert!(net.replica(B).snapshot().is_none());
    assert!(net.stores[&B].durable().snapshot.is_none());
    assert_eq!(net.replica(B).log_start(), Instance(0));

    let snapshot = net.finish_snapshot(B);
    assert_eq!(snapshot.next_instance, first);
    let mut at_copy = History::default();
    at_copy.restore(&snapshot.state);
    let executed = net.replica(B).state_machine().executed();
    assert!(
        at_copy.executed().len() < executed.len(),
        "the state at the copy"
    );
    assert_eq!(at_copy.executed(), &executed[..at_copy.executed().len()]);
    assert_eq!(net.replica(B).snapshot(), Some(&snapshot));
    // No snapshot before it: nothing to truncate yet.
    assert_eq!(net.replica(B).log_start(), Instance(0));

    for seq in 13..=24 {
        net.submit(A, request(1, seq));
        net.run(every);
    }
    let second = net.jobs[&B].next_instance;
    assert!(second > first);
    assert_eq!(
        net.stores[&B].durable().log_start,
        Instance(0),
        "not before durable"
    );
    net.finish_snapshot(B);
    assert_eq!(net.replica(B).log_start(), first);
    assert_eq!(net.stores[&B].durable().log_start, first);
    assert_eq!(
        net.stores[&B]
            .durable()
            .snapshot
            .as_ref()
            .unwrap()
            .next_instance,
        second
    );
    // A stale report (not in flight) changes nothing.
    net.replicas
        .get_mut(&B)
        .unwrap()
        .snapshot_durable(snapshot.clone());
    assert_eq!(net.replica(B).log_start(), first);
}

/// A crash with a snapshot in flight loses it: the replica restarts from its durable snapshot
/// and the whole log behind it (never truncated past a durable snapshot), executes everything
/// again and takes snapshots again.
#[test]
fn a_crash_with_a_snapshot_in_flight_restarts_from_the_one_before() {
    let mut net = Net::started(background_snapshots);
    for seq in 1..=12 {
        net.submit(A, request(1, seq));
        net.run(every);
    }
    let first = net.finish_snapshot(C).next_instance;
    for seq in 13..=24 {
        net.submit(A, request(1, seq));
        net.run(every);
    }
    assert!(net.jobs.contains_key(&C));
    net.crash(C);
    assert_eq!(
        net.stores[&C]
            .durable()
            .snapshot
            .as_ref()
            .unwrap()
            .next_instance,
        first
    );
    assert_eq!(net.stores[&C].durable().log_start, Instance(0));
    net.restart(C);
    net.advance(100, every);
    assert_eq!(net.history(C), net.history(A));
    assert_eq!(net.history(C).len(), 24);
    // It snapshots again once it executed past the threshold, and truncates behind the
    // snapshot it restarted from.
    let again = net.finish_snapshot(C).next_instance;
    assert!(again > first);
    assert_eq!(net.replica(C).log_start(), first);
    assert_eq!(net.stores[&C].durable().log_start, first);
}
