//! Scenario tests named after the RMWPaxos paper: whole replicas, a hand-driven network, exact
//! message sequences.
use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;

use logless_commands::command::{Command, Condition, Expiry, Reply, SetArgs};
use logless_commands::value::{Data, Register};
use logless_placement::{self as placement, key_slot, Configuration, Replication, Stage};
use logless_rmw::acceptor::AcceptorState;
use logless_rmw::config::ProposerConfig;
use logless_rmw::ids::{AttemptId, ClientTag, Key, NodeId, ProposerId, ReqId, Round};
use logless_rmw::message::{Envelope, Message, PrepareKind};
use logless_rmw::persist::{AcceptorStore, Location};
use logless_rmw::placement::{Placement, StageId};
use logless_rmw::proposer::{ClientReply, ProposeError, TimerRequest};
use logless_rmw::replica::Replica;

#[derive(Default)]
struct MemStore {
    states: BTreeMap<Key, AcceptorState>,
    round_floor: Round,
    writes: usize,
    flushes: usize,
    /// Whether the disk is full: a register the store does not hold finds no room.
    full: bool,
    /// Where the store holds each register ([`AcceptorStore::write_at`]): a number per key,
    /// new for each new register.
    locations: BTreeMap<Key, u64>,
    located: u64,
    /// Writes of registers the store held that came without their location, or with another.
    unlocated_writes: usize,
}

/// A write refused for want of space, the only error of [`MemStore`].
#[derive(Debug)]
struct NoSpace;

impl std::fmt::Display for NoSpace {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("no space")
    }
}

impl std::error::Error for NoSpace {}

impl AcceptorStore for MemStore {
    type Error = NoSpace;
    fn write(&mut self, key: &Key, state: &AcceptorState) -> Result<(), Self::Error> {
        if self.full && !self.states.contains_key(key) {
            return Err(NoSpace);
        }
        self.states.insert(key.clone(), state.clone());
        self.writes += 1;
        Ok(())
    }
    fn flush(&mut self) -> Result<(), Self::Error> {
        self.flushes += 1;
        Ok(())
    }
    fn write_at(
        &mut self,
        key: &Key,
        location: Location,
        state: &AcceptorState,
    ) -> Result<Location, Self::Error> {
        self.write(key, state)?;
        let held = match self.locations.get(key) {
            Some(&held) => {
                self.unlocated_writes += usize::from(location != Location(held));
                held
            }
            None => {
                self.located += 1;
                self.locations.insert(key.clone(), self.located);
                self.located
            }
        };
        Ok(Location(held))
    }
    /// A full store has no room for a floor it holds none of yet (as a slot file must grow
    /// for its first floor record, and updates it in place later).
    fn write_round_floor(&mut self, floor: Round) -> Result<(), Self::Error> {
        if self.full && self.round_floor == Round::BOTTOM {
            return Err(NoSpace);
        }
        self.round_floor = floor;
        Ok(())
    }
    fn remove(&mut self, key: &Key) -> Result<(), Self::Error> {
        self.states.remove(key);
        self.locations.remove(key);
        Ok(())
    }
    fn is_full(_: &NoSpace) -> bool {
        true
    }
}

/// Which message turns a link slow.
type Trigger = fn(&Message) -> bool;

/// Three replicas and a network the test drives message by message.
struct Net {
    replicas: BTreeMap<NodeId, Replica>,
    stores: BTreeMap<NodeId, MemStore>,
    queue: VecDeque<(NodeId, Envelope)>,
    timers: BTreeMap<NodeId, Vec<TimerRequest>>,
    replies: Vec<(NodeId, ClientReply)>,
    /// Every message sent, in order, with its sender.
    log: Vec<(NodeId, Envelope)>,
    /// Links (from, to) whose messages wait, in order, until the link is released: a slow link,
    /// not a lossy one.
    slow_links: Vec<(NodeId, NodeId)>,
    /// Links that turn slow at the first message of a kind (the trigger is held too).
    slow_from: Vec<(NodeId, NodeId, Trigger)>,
    held: VecDeque<(NodeId, Envelope)>,
    now_ms: u64,
    /// Every later stage of the ring a replica's output named, with the replica.
    newer_stages: Vec<(NodeId, Stage)>,
}

const A: NodeId = NodeId(1);
const B: NodeId = NodeId(2);
const C: NodeId = NodeId(3);

fn key() -> Key {
    Key::new("k")
}

fn int(v: i64) -> Arc<Register> {
    Arc::new(Register {
        data: Data::Int(v),
        expires_at_ms: None,
        fence: 0,
    })
}

fn foreign_round(n: u64, node: u16, seq: u64) -> Round {
    Round {
        n,
        id: AttemptId {
            proposer: ProposerId {
                node: NodeId(node),
                incarnation: 7,
            },
            seq,
        },
    }
}

impl Net {
    fn new(configure: impl Fn(&mut ProposerConfig)) -> Net {
        Net::with_states(configure, BTreeMap::new())
    }

    fn with_states(
        configure: impl Fn(&mut ProposerConfig),
        initial: BTreeMap<NodeId, AcceptorState>,
    ) -> Net {
        Net::with_nodes(&[A, B, C], configure, initial)
    }

    /// Replicas `nodes`, every one an acceptor, with the configuration `configure` makes and
    /// the states of [`key`] in `initial`.
    fn with_nodes(
        nodes: &[NodeId],
        configure: impl Fn(&mut ProposerConfig),
        initial: BTreeMap<NodeId, AcceptorState>,
    ) -> Net {
        let mut replicas = BTreeMap::new();
        let mut stores = BTreeMap::new();
        for &node in nodes {
            let mut config = ProposerConfig::new(nodes.to_vec());
            config.straggler_wait_ms = 0;
            configure(&mut config);
            let recovered: Vec<(Key, AcceptorState)> = initial
                .get(&node)
                .map(|s| vec![(key(), s.clone())])
                .unwrap_or_default();
            replicas.insert(
                node,
                Replica::new(node, 1, config, u64::from(node.0), recovered),
            );
            stores.insert(node, MemStore::default());
        }
        Net {
            replicas,
            stores,
            queue: VecDeque::new(),
            timers: BTreeMap::new(),
            replies: Vec::new(),
            log: Vec::new(),
            slow_links: Vec::new(),
            slow_from: Vec::new(),
            held: VecDeque::new(),
            now_ms: 0,
            newer_stages: Vec::new(),
        }
    }

    fn collect(&mut self, node: NodeId) {
        let output = self.replicas.get_mut(&node).unwrap().take_output();
        let store = self.stores.get_mut(&node).unwrap();
        let committed = output.persist.commit_or_refuse(store).expect("space only");
        // A refused register goes back to its durable state, as the node's shard does.
        let replica = self.replicas.get_mut(&node).unwrap();
        for key in &committed.refused {
            replica.restore(key, store.states.get(key).cloned());
        }
        if committed.floor_refused {
            replica.round_floor_refused();
        }
        // Every write of a register the store holds finds it by the location the replica
        // kept from the write before (or from its recovery), in every scenario.
        replica.placed(&committed.placed);
        assert_eq!(
            store.unlocated_writes, 0,
            "node {node:?}: a write without its location"
        );
        for e in output.sends.into_iter().chain(committed.released) {
            self.log.push((node, e.clone()));
            self.queue.push_back((node, e));
        }
        self.timers.entry(node).or_default().extend(output.timers);
        self.replies
            .extend(output.replies.into_iter().map(|r| (node, r)));
        self.newer_stages
            .extend(output.newer_stage.map(|stage| (node, stage)));
    }

    fn command(&mut self, node: NodeId, tag: u64, command: Command) {
        self.command_on(node, tag, key(), command);
    }

    fn command_on(&mut self, node: NodeId, tag: u64, key: Key, command: Command) {
        let now = self.now_ms;
        self.replicas
            .get_mut(&node)
            .unwrap()
            .handle_command(now, ClientTag(tag), key, command);
        self.collect(node);
    }

    /// Delivers queued messages while `keep` says so; messages it rejects are dropped.
    fn run(&mut self, keep: impl Fn(NodeId, &Envelope) -> bool) {
        let mut budget = 10_000;
        while let Some((from, envelope)) = self.queue.pop_front() {
            budget -= 1;
            assert!(budget > 0, "the scenario does not quiesce");
            let link = (from, envelope.to);
            if let Some(i) = self
                .slow_from
                .iter()
                .position(|&(f, t, trigger)| (f, t) == link && trigger(&envelope.message))
            {
                self.slow_from.remove(i);
                self.slow_links.push(link);
            }
            if self.slow_links.contains(&link) {
                self.held.push_back((from, envelope));
                continue;
            }
            if !keep(from, &envelope) {
                continue;
            }
            let to = envelope.to;
            let now = self.now_ms;
            self.replicas
                .get_mut(&to)
                .unwrap()
                .handle_message(now, from, &envelope.message);
            self.collect(to);
        }
    }

    /// Makes the link `from` → `to` hold its messages (in order) until [`Net::release`], from
    /// the first message for which `trigger` holds.
    fn slow_down_from(&mut self, from: NodeId, to: NodeId, trigger: Trigger) {
        self.slow_from.push((from, to, trigger));
    }

    /// Lets the messages held on `from` → `to` go, in the order they were sent.
    fn release(&mut self, from: NodeId, to: NodeId) {
        self.slow_links.retain(|l| *l != (from, to));
        let (go, stay) = std::mem::take(&mut self.held)
            .into_iter()
            .partition(|(f, e)| (*f, e.to) == (from, to));
        self.held = stay;
        self.queue.extend::<VecDeque<_>>(go);
    }

    /// Fires `node`'s timers and delivers what follows until `done` (at most 50 timers).
    fn drive(
        &mut self,
        node: NodeId,
        keep: impl Fn(NodeId, &Envelope) -> bool,
        done: impl Fn(&Net) -> bool,
    ) {
        for _ in 0..50 {
            if done(self) {
                return;
            }
            self.fire_timer(node);
            self.run(&keep);
        }
        panic!("{node:?} made no progress in 50 timers");
    }

    /// Fires the earliest pending timer of `node` (advancing the clock to it).
    fn fire_timer(&mut self, node: NodeId) {
        let timers = self.timers.entry(node).or_default();
        let Some(i) = (0..timers.len()).min_by_key(|&i| timers[i].at_ms) else {
            return;
        };
        let t = timers.remove(i);
        self.now_ms = self.now_ms.max(t.at_ms);
        let now = self.now_ms;
        self.replicas
            .get_mut(&node)
            .unwrap()
            .handle_timer(now, &t.key, t.token);
        self.collect(node);
    }

    /// Reads the counter through `node` with a fault-free network.
    fn read_counter(&mut self, node: NodeId, tag: u64) -> i64 {
        self.command(node, tag, Command::Get);
        self.run(every);
        let Reply::Bulk(value) = ok(self.reply(tag)) else {
            panic!("a counter")
        };
        std::str::from_utf8(&value).unwrap().parse().unwrap()
    }

    fn reply(&self, tag: u64) -> Option<&ClientReply> {
        self.replies
            .iter()
            .map(|(_, r)| r)
            .find(|r| r.client == ClientTag(tag))
    }

    fn state(&self, node: NodeId) -> AcceptorState {
        self.replicas[&node]
            .acceptor_state(&key())
            .unwrap_or_default()
    }

    fn sent_kinds(&self, from: NodeId) -> Vec<&'static str> {
        self.log
            .iter()
            .filter(|(f, _)| *f == from)
            .map(|(_, e)| kind(&e.message))
            .collect()
    }
}

fn kind(m: &Message) -> &'static str {
    match m {
        Message::Prepare {
            kind: PrepareKind::Read,
            ..
        } => "PREPARE(read)",
        Message::Prepare { .. } => "PREPARE(write)",
        Message::PaxosPrep { .. } => "PAXOS_PREP",
        Message::Ack { .. } => "ACK",
        Message::Vote { .. } => "VOTE",
        Message::Voted { .. } => "VOTED",
        Message::Nack { .. } => "NACK",
        Message::Learned { .. } => "LEARNED",
        Message::Remove { .. } => "REMOVE",
        Message::Fence { .. } => "FENCE",
        Message::Fenced { .. } => "FENCED",
        Message::Full { .. } => "FULL",
        Message::Stale { .. } => "STALE",
    }
}

/// The kinds of the messages sent since log position `since`, in order.
fn kinds_since(net: &Net, since: usize) -> Vec<&'static str> {
    net.log[since..]
        .iter()
        .map(|(_, e)| kind(&e.message))
        .collect()
}

/// Two increments through A (tags 1 and 2): the first with phase 1, the second on the fast
/// path, its messages delivered while `keep` says so; returns the log position between them.
fn two_increments(net: &mut Net, keep: impl Fn(NodeId, &Envelope) -> bool) -> usize {
    net.command(A, 1, Command::IncrBy(1));
    net.run(every);
    let since = net.log.len();
    net.command(A, 2, Command::IncrBy(1));
    net.run(keep);
    since
}

/// Writes 1 everywhere, then has A's next (fast) write of 2 reach only A's own acceptor.
fn a_second_write_reaches_only_a(net: &mut Net) {
    net.command(A, 1, Command::IncrBy(1));
    net.run(every);
    net.command(A, 2, Command::IncrBy(1));
    net.run(|from, e| !(from == A && matches!(e.message, Message::Vote { .. }) && e.to != A));
}

fn ok(reply: Option<&ClientReply>) -> Reply {
    reply.expect("a reply").result.clone().expect("success")
}

fn every(_: NodeId, _: &Envelope) -> bool {
    true
}

#[test]
fn a_write_on_empty_registers_takes_two_round_trips_then_one() {
    let mut net = Net::new(|_| {});
    net.command(A, 1, Command::IncrBy(5));
    net.run(every);
    assert_eq!(ok(net.reply(1)), Reply::Int(5));
    assert_eq!(
        net.sent_kinds(A)
            .iter()
            .filter(|k| !k.starts_with("ACK") && **k != "VOTED")
            .collect::<Vec<_>>(),
        vec![
            &"PREPARE(write)",
            &"PREPARE(write)",
            &"PREPARE(write)",
            &"VOTE",
            &"VOTE",
            &"VOTE"
        ]
    );
    for node in [A, B, C] {
        assert_eq!(net.state(node).value, int(5));
    }
}

#[test]
fn a_fast_write_takes_exactly_one_round_trip() {
    let mut net = Net::new(|_| {});
    let before = two_increments(&mut net, every);
    assert_eq!(ok(net.reply(2)), Reply::Int(2));
    assert_eq!(
        kinds_since(&net, before),
        ["VOTE", "VOTE", "VOTE", "VOTED", "VOTED", "VOTED"]
    );
    assert_eq!(net.replicas[&A].stats().fast_writes, 1);
}

/// Figure 2: a write that starts on inconsistent acceptor states. The incremental PREPARE
/// gets an inconsistent quorum, so the proposer retries with PAXOS_PREP above the highest round
/// it saw; the first quorum of replies agrees on that round but not on votes, so it writes the
/// value of the highest vote through, starts again, and applies its command on top of it.
#[test]
fn figure_2_a_write_starting_on_inconsistent_acceptors() {
    let chosen = AcceptorState {
        r_ack: foreign_round(1, 9, 1),
        r_voted: foreign_round(1, 9, 1),
        value: int(10),
        req: None,
        req_prev: None,
    };
    let interrupted = AcceptorState {
        r_ack: foreign_round(3, 8, 1),
        r_voted: foreign_round(2, 8, 1),
        value: int(99),
        req: None,
        req_prev: None,
    };
    let mut a_state = chosen.clone();
    a_state.r_ack = foreign_round(4, 9, 2);
    let initial = BTreeMap::from([(A, a_state), (B, interrupted), (C, chosen)]);
    let mut net = Net::with_states(|_| {}, initial);
    net.command(C, 1, Command::IncrBy(1));
    net.run(every);
    while net.reply(1).is_none() {
        net.fire_timer(C); // the randomised backoff before PAXOS_PREP
        net.run(every);
    }
    assert_eq!(ok(net.reply(1)), Reply::Int(100));
    let kinds: Vec<&str> = net
        .sent_kinds(C)
        .into_iter()
        .filter(|k| *k != "ACK" && *k != "VOTED")
        .collect();
    let three = |k| [k, k, k];
    let expected: Vec<&str> = [
        three("PREPARE(write)"), // acknowledged rounds 5, 4, 2: inconsistent
        three("PAXOS_PREP"),     // round 6 for all
        three("VOTE"),           // A and B answered first: write 99 (round 2) through
        three("PREPARE(write)"), // again: consistent on the vote of round 6, acknowledging 8
        three("VOTE"),           // the successor 99 + 1
    ]
    .concat();
    assert_eq!(kinds, expected);
    assert_eq!(net.replicas[&C].stats().write_throughs, 1);
    for node in [A, B, C] {
        assert_eq!(net.state(node).value, int(100));
        assert_eq!(net.state(node).r_voted.n, 8);
    }
}

/// §5.5: p1's proposal reaches only one acceptor; p2 writes it through and applies its own
/// command on top. p1, retrying, must learn that its command was applied and must not apply it
/// again.
fn double_apply_scenario(ignore_learned: bool) -> (Reply, i64) {
    let mut net = Net::new(|c| c.bugs.ignore_learned = ignore_learned);
    // Establish a value so that both proposers start from the same chosen state.
    net.command(C, 1, Command::IncrBy(10));
    net.run(every);
    // p1 = A proposes +1 but its VOTE reaches only A itself.
    net.command(A, 2, Command::IncrBy(1));
    net.run(|from, e| !(from == A && matches!(e.message, Message::Vote { .. }) && e.to != A));
    assert!(net.reply(2).is_none());
    // p2 = B writes without hearing from C: it sees A's vote as the highest, writes it
    // through, then applies +100 on top.
    let c_to_b_cut = |from: NodeId, e: &Envelope| !(from == C && e.to == B);
    net.command(B, 3, Command::IncrBy(100));
    net.run(c_to_b_cut);
    while net.reply(3).is_none() {
        net.fire_timer(B);
        net.run(c_to_b_cut);
    }
    assert!(net.replicas[&B].stats().write_throughs >= 1);
    assert_eq!(ok(net.reply(3)), Reply::Int(111));
    // p1 times out and retries with the same request.
    while net.reply(2).is_none() {
        net.fire_timer(A);
        net.run(every);
    }
    let reply = ok(net.reply(2));
    (reply, net.read_counter(C, 4))
}

#[test]
fn section_5_5_a_written_through_proposal_is_applied_exactly_once() {
    let (reply, value) = double_apply_scenario(false);
    assert_eq!(reply, Reply::Int(11));
    assert_eq!(value, 111);
}

#[test]
fn section_5_5_without_learned_the_command_is_applied_twice() {
    let (_, value) = double_apply_scenario(true);
    assert_eq!(value, 112, "the deliberate bug must show as a double apply");
}

#[test]
fn a_read_during_a_concurrent_write_changes_no_acceptor_state() {
    let mut net = Net::new(|_| {});
    a_second_write_reaches_only_a(&mut net);
    let before: Vec<AcceptorState> = [A, B, C].iter().map(|n| net.state(*n)).collect();
    let writes_before: usize = net.stores.values().map(|s| s.writes).sum();
    // C reads: B and C agree on the old value; A, which C asks first with its own acceptor,
    // does not answer, so after the thrifty wait C asks B too.
    let log_before = net.log.len();
    net.command(C, 3, Command::Get);
    net.run(|from, _| from != A);
    assert!(net.reply(3).is_none(), "C waits for A");
    net.drive(C, |from, _| from != A, |net| net.reply(3).is_some());
    assert_eq!(ok(net.reply(3)), Reply::Bulk("1".into()));
    let after: Vec<AcceptorState> = [A, B, C].iter().map(|n| net.state(*n)).collect();
    assert_eq!(before, after);
    let writes_after: usize = net.stores.values().map(|s| s.writes).sum();
    assert_eq!(writes_before, writes_after, "a read persists nothing");
    let kinds: Vec<&str> = net.log[log_before..]
        .iter()
        .filter(|(f, _)| *f == C)
        .map(|(_, e)| kind(&e.message))
        .filter(|k| *k != "ACK")
        .collect();
    assert_eq!(kinds, ["PREPARE(read)", "PREPARE(read)", "PREPARE(read)"]);
}

/// The PREPARE(read) messages `from` sent after log position `since`, by destination.
fn read_prepares(net: &Net, from: NodeId, since: usize) -> Vec<NodeId> {
    net.log[since..]
        .iter()
        .filter(|(f, e)| {
            *f == from
                && matches!(
                    e.message,
                    Message::Prepare {
                        kind: PrepareKind::Read,
                        ..
                    }
                )
        })
        .map(|(_, e)| e.to)
        .collect()
}

/// Reads through `node` on a fault-free network: the answer, and where its PREPARE(read)s went.
fn read_and_asked(net: &mut Net, node: NodeId, tag: u64) -> (Reply, Vec<NodeId>) {
    let since = net.log.len();
    net.command(node, tag, Command::Get);
    net.run(every);
    (ok(net.reply(tag)), read_prepares(net, node, since))
}

#[test]
fn a_read_asks_its_own_acceptor_and_the_next_one_and_takes_one_round_trip() {
    let mut net = Net::new(|_| {});
    net.command(A, 1, Command::IncrBy(1));
    net.run(every);
    let since = net.log.len();
    assert_eq!(
        read_and_asked(&mut net, B, 2),
        (Reply::Bulk("1".into()), vec![B, C])
    );
    // Two PREPAREs and two ACKs; nothing else.
    assert_eq!(net.log.len() - since, 4);
    let (_, asked) = read_and_asked(&mut net, C, 3);
    assert_eq!(asked, [A, C], "the order wraps around");
}

#[test]
fn a_read_whose_quorum_disagrees_asks_the_remaining_acceptor_at_once() {
    let mut net = Net::new(|_| {});
    a_second_write_reaches_only_a(&mut net);
    // C reads from C and A, which disagree; B's reply makes B and C a consistent quorum, with
    // no timer fired.
    let since = net.log.len();
    net.command(C, 3, Command::Get);
    net.run(every);
    assert_eq!(ok(net.reply(3)), Reply::Bulk("1".into()));
    assert_eq!(read_prepares(&net, C, since), [A, C, B]);
    assert_eq!(net.replicas[&C].stats().reads_widened, 1);
}

#[test]
fn an_acceptor_that_left_a_read_unanswered_is_not_asked_until_it_is_heard_from() {
    let mut net = Net::new(|_| {});
    net.command(A, 1, Command::IncrBy(1));
    net.run(every);
    // C asks C and A; A is silent, so after the wait C asks B.
    let since = net.log.len();
    net.command(C, 2, Command::Get);
    net.run(|from, _| from != A);
    net.drive(C, |from, _| from != A, |net| net.reply(2).is_some());
    assert_eq!(ok(net.reply(2)), Reply::Bulk("1".into()));
    assert_eq!(read_prepares(&net, C, since), [A, C, B]);
    // The next read skips A.
    assert_eq!(
        read_and_asked(&mut net, C, 3),
        (Reply::Bulk("1".into()), vec![B, C])
    );
    // A write from C hears from A again, and reads ask it again.
    net.command(C, 4, Command::IncrBy(1));
    net.run(every);
    assert_eq!(
        read_and_asked(&mut net, C, 5),
        (Reply::Bulk("2".into()), vec![A, C])
    );
    assert_eq!(net.replicas[&C].stats().reads_widened, 1);
}

#[test]
fn a_read_waiting_on_a_broken_link_asks_the_rest_at_once() {
    let mut net = Net::new(|c| c.thrifty_wait_ms = 1_000);
    net.command(A, 1, Command::IncrBy(1));
    net.run(every);
    let since = net.log.len();
    net.slow_down_from(C, A, |_| true);
    net.command(C, 2, Command::Get);
    net.run(every);
    assert!(net.reply(2).is_none(), "C waits for A");
    net.replicas.get_mut(&C).unwrap().handle_link_broken(A);
    net.collect(C);
    // The wake-up is due at once, long before the thrifty wait would end.
    net.fire_timer(C);
    assert!(net.now_ms < 1_000);
    net.run(every);
    assert_eq!(ok(net.reply(2)), Reply::Bulk("1".into()));
    assert_eq!(read_prepares(&net, C, since), [A, C, B]);
}

#[test]
fn reads_that_are_not_thrifty_ask_everyone() {
    let mut net = Net::new(|c| c.thrifty_reads = false);
    net.command(A, 1, Command::IncrBy(1));
    net.run(every);
    assert_eq!(
        read_and_asked(&mut net, B, 2),
        (Reply::Bulk("1".into()), vec![A, B, C])
    );
}

#[test]
fn thrifty_reads_switch_while_the_replicas_run() {
    let mut net = Net::new(|_| {});
    net.command(A, 1, Command::IncrBy(1));
    net.run(every);
    assert_eq!(read_and_asked(&mut net, B, 2).1, [B, C]);
    net.replicas.get_mut(&B).unwrap().set_thrifty(false, false);
    assert!(!net.replicas[&B].proposer_config().thrifty_reads);
    assert_eq!(
        read_and_asked(&mut net, B, 3),
        (Reply::Bulk("1".into()), vec![A, B, C])
    );
    net.replicas.get_mut(&B).unwrap().set_thrifty(true, false);
    assert_eq!(
        read_and_asked(&mut net, B, 4),
        (Reply::Bulk("1".into()), vec![B, C])
    );
}

/// Where the VOTEs of A's messages since `since` went.
fn votes_to(net: &Net, since: usize) -> Vec<NodeId> {
    net.log[since..]
        .iter()
        .filter(|(from, e)| *from == A && matches!(e.message, Message::Vote { .. }))
        .map(|(_, e)| e.to)
        .collect()
}

#[test]
fn a_thrifty_fast_write_votes_with_the_quorum_its_reads_ask_in_one_round_trip() {
    let mut net = Net::new(|c| c.thrifty_writes = true);
    let before = two_increments(&mut net, every);
    assert_eq!(ok(net.reply(2)), Reply::Int(2));
    assert_eq!(
        kinds_since(&net, before),
        ["VOTE", "VOTE", "VOTED", "VOTED"]
    );
    // The first write is no fast write: everyone votes; the second asks A and B.
    assert_eq!(votes_to(&net, 0), [A, B, C, A, B]);
    assert_eq!(net.replicas[&A].stats().fast_writes, 1);
    // C kept the first vote; A's reads ask A and B, which agree, in one round trip.
    assert_eq!(net.state(C).value, int(1));
    assert_eq!(
        read_and_asked(&mut net, A, 3),
        (Reply::Bulk("2".into()), vec![A, B])
    );
    // C's reads ask C and A, which disagree, and B settles it.
    assert_eq!(
        read_and_asked(&mut net, C, 4),
        (Reply::Bulk("2".into()), vec![A, C, B])
    );
    let stats = net.replicas[&A].stats();
    assert_eq!((stats.writes_widened, stats.reads_widened), (0, 0));
}

#[test]
fn a_thrifty_fast_write_whose_quorum_is_silent_asks_the_rest_and_then_skips_it() {
    let mut net = Net::new(|c| c.thrifty_writes = true);
    // B drops everything from the second write on.
    let since = two_increments(&mut net, |from, e| {
        !(e.to == B || from == B)
            || !matches!(e.message, Message::Vote { .. } | Message::Voted { .. })
    });
    assert_eq!(votes_to(&net, since), [A, B]);
    assert!(net.reply(2).is_none(), "A waits for B");
    // After the thrifty wait A votes with C too, and the write is chosen.
    let since = net.log.len();
    net.drive(A, |from, _| from != B, |net| net.reply(2).is_some());
    assert_eq!(ok(net.reply(2)), Reply::Int(2));
    assert!(net.now_ms >= 20 && net.now_ms < 200, "{}", net.now_ms);
    assert_eq!(votes_to(&net, since), [C]);
    assert_eq!(net.replicas[&A].stats().writes_widened, 1);
    // The next fast write skips the silent B.
    let since = net.log.len();
    net.command(A, 3, Command::IncrBy(1));
    net.run(every);
    assert_eq!(ok(net.reply(3)), Reply::Int(3));
    assert_eq!(votes_to(&net, since), [A, C]);
    assert_eq!(net.replicas[&A].stats().fast_writes, 2);
}

#[test]
fn a_thrifty_fast_write_waiting_on_a_broken_link_asks_the_rest_at_once() {
    let mut net = Net::new(|c| {
        c.thrifty_writes = true;
        c.thrifty_wait_ms = 1_000;
    });
    net.command(A, 1, Command::IncrBy(1));
    net.run(every);
    net.slow_down_from(B, A, |m| matches!(m, Message::Voted { .. }));
    net.command(A, 2, Command::IncrBy(1));
    net.run(every);
    assert!(net.reply(2).is_none(), "A waits for B");
    net.replicas.get_mut(&A).unwrap().handle_link_broken(B);
    net.collect(A);
    let since = net.log.len();
    net.fire_timer(A);
    assert!(net.now_ms < 1_000);
    net.run(every);
    assert_eq!(ok(net.reply(2)), Reply::Int(2));
    assert_eq!(votes_to(&net, since), [C]);
}

#[test]
fn a_rejected_thrifty_fast_write_backs_off_without_asking_the_rest() {
    let mut net = Net::new(|c| c.thrifty_writes = true);
    net.command(A, 1, Command::IncrBy(1));
    net.run(every);
    // C writes with B and C only, and A hears nothing of it: A still holds its
    // pre-acknowledged round, which is stale at B and C.
    net.command(C, 2, Command::IncrBy(1));
    net.run(|from, e| e.to != A && from != A);
    assert_eq!(ok(net.reply(2)), Reply::Int(2));
    let since = net.log.len();
    net.command(A, 3, Command::IncrBy(1));
    net.run(every);
    // A's own acceptor voted, B rejected: the two asked can no longer make a quorum, so A
    // backs off at once rather than asking C, which would reject too.
    let stats = net.replicas[&A].stats();
    assert_eq!((stats.nacks, stats.writes_widened), (1, 0), "{stats:?}");
    assert_eq!(votes_to(&net, since), [A, B]);
    net.drive(A, every, |net| net.reply(3).is_some());
    assert_eq!(ok(net.reply(3)), Reply::Int(3));
    assert_eq!(net.replicas[&A].stats().writes_widened, 0);
    assert_eq!(net.read_counter(B, 4), 3);
}

/// §5.8 read retries: a read that keeps seeing an inconsistent quorum asks again up to X times
/// without raising rounds, then writes through. The acceptor states are made inconsistent by a
/// write that reached only A; each retry sees the rounds move (a concurrent PREPARE bumps B),
/// so only X stops the retries.
fn read_attempts_before_write_through(x: u32) -> usize {
    let mut net = Net::new(|c| c.read_retries_max = x);
    a_second_write_reaches_only_a(&mut net);
    net.command(C, 3, Command::Get);
    let mut bump = 100;
    loop {
        // Only A and B answer C's reads (C's own acceptor is cut off): always inconsistent.
        net.run(|from, e| {
            !(from == C
                && e.to == C
                && matches!(
                    e.message,
                    Message::Prepare {
                        kind: PrepareKind::Read,
                        ..
                    }
                ))
        });
        let prepared = net
            .log
            .iter()
            .any(|(f, e)| *f == C && matches!(e.message, Message::PaxosPrep { .. }));
        if prepared || net.reply(3).is_some() {
            break;
        }
        // Someone else's PREPARE moves B's round between C's attempts.
        bump += 1;
        let step_seq = bump;
        let b = net.replicas.get_mut(&B).unwrap();
        b.handle_message(
            0,
            NodeId(1),
            &Message::Prepare {
                key: key(),
                kind: PrepareKind::Write,
                attempt: AttemptId {
                    proposer: ProposerId {
                        node: NodeId(1),
                        incarnation: 9,
                    },
                    seq: step_seq,
                },
                known_voted: Round::BOTTOM,
                stage: StageId::NONE,
            },
        );
        let _ = b.take_output();
        net.fire_timer(C);
    }
    net.log
        .iter()
        .filter(|(f, e)| *f == C && e.to == A)
        .take_while(|(_, e)| !matches!(e.message, Message::PaxosPrep { .. }))
        .filter(|(_, e)| {
            matches!(
                e.message,
                Message::Prepare {
                    kind: PrepareKind::Read,
                    ..
                }
            )
        })
        .count()
}

#[test]
fn section_5_8_read_retries_x_0_1_3() {
    assert_eq!(read_attempts_before_write_through(0), 1);
    assert_eq!(read_attempts_before_write_through(1), 2);
    assert_eq!(read_attempts_before_write_through(3), 4);
}

/// PERSIST of a key with a time to live applies before the key expires and does nothing after.
/// A's first PERSIST, at 50 ms, reaches only C; its retry, without C and after the expiry,
/// finds nothing to do; then B writes with C's help, so it sees C's vote of the first attempt.
/// Returns the retry's answer and what a GET reads at the end.
fn persist_retried_past_the_expiry(deny_over_earlier_attempt: bool) -> (Reply, Reply) {
    let mut net = Net::new(|c| c.bugs.deny_over_earlier_attempt = deny_over_earlier_attempt);
    let set = Command::Set(SetArgs {
        value: "v".into(),
        condition: Condition::Always,
        get: false,
        expiry: Expiry::AfterMs(100),
    });
    net.command(A, 1, set);
    net.run(every);
    assert_eq!(ok(net.reply(1)), Reply::Ok);
    net.now_ms = 50;
    net.command(A, 2, Command::Persist);
    net.run(|from, e| !(from == A && matches!(e.message, Message::Vote { .. }) && e.to != C));
    assert!(net.reply(2).is_none());
    let without_c = |from: NodeId, e: &Envelope| from != C && e.to != C;
    net.drive(A, without_c, |net| net.reply(2).is_some());
    assert!(net.now_ms >= 100);
    let without_a = |from: NodeId, e: &Envelope| from != A && e.to != A;
    net.command(B, 3, Command::Persist);
    net.run(without_a);
    net.drive(B, without_a, |net| net.reply(3).is_some());
    assert_eq!(ok(net.reply(3)), Reply::Int(0));
    net.command(B, 4, Command::Get);
    net.run(every);
    (ok(net.reply(2)), ok(net.reply(4)))
}

/// A retry that finds nothing to do must not be answered over an earlier attempt that a
/// minority voted for: it votes, in a round above that attempt's vote, which a later
/// write-through then cannot choose. The client is told PERSIST did nothing, and the key has
/// expired.
#[test]
fn a_retry_that_finds_nothing_to_do_still_votes_over_an_earlier_attempt() {
    assert_eq!(
        persist_retried_past_the_expiry(false),
        (Reply::Int(0), Reply::Nil)
    );
}

/// Denied without phase 2, the retry's answer is contradicted: B writes the first attempt
/// through and the key, which the client was told had expired, persists.
#[test]
fn a_retry_denied_over_an_earlier_attempt_is_contradicted_by_its_write_through() {
    assert_eq!(
        persist_retried_past_the_expiry(true),
        (Reply::Int(0), Reply::Bulk("v".into()))
    );
}

#[test]
fn a_command_that_does_not_apply_is_denied_without_phase_2() {
    let mut net = Net::new(|_| {});
    net.command(A, 1, Command::IncrBy(i64::MAX));
    net.run(every);
    let before = net.log.len();
    net.command(B, 2, Command::IncrBy(1));
    net.run(every);
    let reply = net.reply(2).unwrap().result.clone().unwrap();
    assert!(
        matches!(reply, Reply::Error(_)),
        "overflow is an error: {reply:?}"
    );
    let kinds: Vec<&str> = net.log[before..]
        .iter()
        .map(|(_, e)| kind(&e.message))
        .collect();
    assert!(!kinds.contains(&"VOTE"), "{kinds:?}");
}

#[test]
fn duplicated_replies_do_not_make_a_quorum() {
    let mut net = Net::new(|_| {});
    net.command(A, 1, Command::IncrBy(1));
    // Deliver only B's replies, twice each; A's own and C's are lost.
    let mut seen = Vec::new();
    while let Some((from, e)) = net.queue.pop_front() {
        if from == A && e.to == B {
            net.replicas
                .get_mut(&B)
                .unwrap()
                .handle_message(0, A, &e.message);
            net.collect(B);
        } else if from == B && e.to == A {
            seen.push(e.clone());
        }
    }
    for e in seen.iter().chain(seen.iter()) {
        net.replicas
            .get_mut(&A)
            .unwrap()
            .handle_message(0, B, &e.message);
        net.collect(A);
    }
    net.queue.clear();
    assert!(net.reply(1).is_none());
    let votes = net
        .log
        .iter()
        .filter(|(f, e)| *f == A && matches!(e.message, Message::Vote { .. }))
        .count();
    assert_eq!(votes, 0);
}

#[test]
fn learned_is_not_sent_to_the_proposer_that_builds_on_its_own_request() {
    let mut net = Net::new(|_| {});
    net.command(A, 1, Command::IncrBy(1));
    net.run(every);
    net.command(A, 2, Command::IncrBy(1));
    net.run(every);
    assert!(!net
        .log
        .iter()
        .any(|(_, e)| matches!(e.message, Message::Learned { .. })));
    // A different proposer building on A's request does tell A.
    net.command(B, 3, Command::IncrBy(1));
    net.run(every);
    let learned: Vec<ReqId> = net
        .log
        .iter()
        .filter_map(|(_, e)| match &e.message {
            Message::Learned { req, .. } if e.to == A => Some(*req),
            _ => None,
        })
        .collect();
    assert_eq!(learned.len(), 3);
}

/// The flaw the whole-node simulation found (seed 6573), on three replicas and slow links, with
/// no message of an acceptor lost. p = A's proposal (+1) is voted by A alone. q = B writes it
/// through and builds +100 on it (naming A's request as `req_prev`), but only B's own acceptor
/// votes for that, and its LEARNED to A is slow. s = C writes B's value through and builds
/// +1,000 on it. A retries and sees a consistent quorum on C's value before B's LEARNED arrives.
/// Algorithm 3's write-through names no `req_prev`, so the voters of C's write-through told A
/// nothing and A applies +1 again; with `req_prev` kept, A's own acceptor tells A.
fn successor_chosen_only_by_write_throughs(forget_req_prev: bool) -> (Reply, i64) {
    let mut net = Net::new(|c| c.bugs.write_through_forgets_req_prev = forget_req_prev);
    net.command(C, 1, Command::IncrBy(10));
    net.run(every);
    // A proposes 11; its VOTE reaches only A's acceptor.
    net.command(A, 2, Command::IncrBy(1));
    net.run(|from, e| !(from == A && matches!(e.message, Message::Vote { .. }) && e.to != A));
    assert!(net.reply(2).is_none());
    // B does not hear C: it writes 11 through, then proposes 111 on it, which only B's own
    // acceptor receives. B's LEARNED to A, and everything after it on that link, is slow.
    net.slow_down_from(B, A, |m| matches!(m, Message::Learned { .. }));
    let is_vote_of = |e: &Envelope, v: i64| matches!(&e.message, Message::Vote { value, .. } if *value == int(v));
    let b_phase = |from: NodeId, e: &Envelope| {
        let c_to_b = from == C && e.to == B;
        let b_votes_111_elsewhere = from == B && e.to != B && is_vote_of(e, 111);
        !c_to_b && !b_votes_111_elsewhere
    };
    net.command(B, 3, Command::IncrBy(100));
    net.run(b_phase);
    net.drive(B, b_phase, |net| {
        net.log.iter().any(|(f, e)| *f == B && is_vote_of(e, 111))
    });
    assert_eq!(net.state(B).value, int(111));
    assert_eq!(net.state(A).value, int(11));
    assert_eq!(net.state(C).value, int(11));
    // C does not hear A: it sees 111 as the highest vote, writes it through (A's acceptor votes
    // for it too), then applies +1,000 on top.
    let c_phase = |from: NodeId, e: &Envelope| !(from == A && e.to == C);
    net.command(C, 4, Command::IncrBy(1000));
    net.run(c_phase);
    net.drive(C, c_phase, |net| net.reply(4).is_some());
    assert_eq!(ok(net.reply(4)), Reply::Int(1111));
    assert_eq!(net.replicas[&C].stats().write_throughs, 1);
    // A retries while B's messages to it are still on their way.
    net.run(every);
    net.drive(A, every, |net| net.reply(2).is_some());
    let reply = ok(net.reply(2));
    net.release(B, A);
    net.run(every);
    (reply, net.read_counter(C, 5))
}

#[test]
fn a_successor_chosen_only_by_write_throughs_still_tells_the_proposer_it_built_on() {
    let (reply, value) = successor_chosen_only_by_write_throughs(false);
    assert_eq!(reply, Reply::Int(11));
    assert_eq!(value, 1111);
}

#[test]
fn write_throughs_without_req_prev_apply_a_command_twice() {
    let (reply, value) = successor_chosen_only_by_write_throughs(true);
    assert_eq!(
        (reply, value),
        (Reply::Int(1112), 1112),
        "the deliberate bug must show"
    );
}

fn a(net: &Net) -> &Replica {
    &net.replicas[&A]
}

fn named(i: usize) -> Key {
    Key::new(format!("k{i}"))
}

/// Increments register `named(i)` through A with a fault-free network; returns the new value
/// and the kinds of messages A's proposer sent for it.
fn increment_through_a(net: &mut Net, tag: u64, i: usize) -> (Reply, Vec<&'static str>) {
    let since = net.log.len();
    net.command_on(A, tag, named(i), Command::IncrBy(1));
    net.run(every);
    let sent = net.log[since..]
        .iter()
        .filter(|(from, _)| *from == A)
        .map(|(_, e)| kind(&e.message))
        .filter(|kind| kind.starts_with("PREPARE") || *kind == "VOTE")
        .collect();
    (ok(net.reply(tag)), sent)
}

const FAST_WRITE: [&str; 3] = ["VOTE", "VOTE", "VOTE"];

/// Beyond `registers_max`, a proposer drops idle registers, sparing those used since its last
/// drop. A dropped register was only a cache: its next write runs phase 1 again and applies on
/// the value chosen before; a register it kept still writes on the fast path.
#[test]
fn a_proposer_beyond_its_bound_drops_idle_registers_used_least_lately() {
    let mut net = Net::new(|config| config.registers_max = 4);
    for i in 0..4 {
        increment_through_a(&mut net, i as u64, i);
    }
    assert_eq!(a(&net).proposer_registers(), 4);
    // A fifth register: all four are idle and used since the start, so one of them goes to
    // make room (an eighth of a bound of 4 is no more to spare).
    increment_through_a(&mut net, 10, 4);
    assert_eq!(a(&net).stats().registers_dropped, 1);
    let (kept, dropped): (Vec<usize>, Vec<usize>) =
        (0..4).partition(|&i| a(&net).proposer_holds(&named(i)));
    assert_eq!((kept.len(), dropped.len()), (3, 1));
    assert!(a(&net).proposer_holds(&named(4)));
    // Of the three kept, one is used again (a fast write), then a sixth register comes: one
    // of the two not used since the last drop goes; the one used and the newest stay.
    let (value, sent) = increment_through_a(&mut net, 11, kept[0]);
    assert_eq!((value, &sent[..]), (Reply::Int(2), &FAST_WRITE[..]));
    increment_through_a(&mut net, 12, 5);
    assert_eq!(a(&net).stats().registers_dropped, 2);
    for i in [kept[0], 4, 5] {
        assert!(a(&net).proposer_holds(&named(i)), "k{i}");
    }
    let unused: Vec<usize> = kept[1..]
        .iter()
        .copied()
        .filter(|&i| !a(&net).proposer_holds(&named(i)))
        .collect();
    assert_eq!(unused.len(), 1);
    // A kept one is still on the fast path.
    let (value, sent) = increment_through_a(&mut net, 14, 5);
    assert_eq!((value, &sent[..]), (Reply::Int(2), &FAST_WRITE[..]));
    // A dropped register starts anew: phase 1, then its command on the chosen value.
    for i in [dropped[0], unused[0]] {
        let (value, sent) = increment_through_a(&mut net, 20 + i as u64, i);
        assert_eq!(value, Reply::Int(2), "k{i}");
        assert_eq!(&sent[..3], ["PREPARE(write)"; 3], "k{i}");
    }
}

/// A register with an operation in progress is never dropped, even past the bound.
#[test]
fn a_proposer_keeps_registers_with_operations_in_progress_past_its_bound() {
    let mut net = Net::new(|config| config.registers_max = 1);
    net.command_on(A, 1, named(0), Command::IncrBy(1));
    net.command_on(A, 2, named(1), Command::IncrBy(1));
    assert_eq!(a(&net).proposer_registers(), 2);
    assert_eq!(a(&net).stats().registers_dropped, 0);
    net.run(every);
    assert_eq!(ok(net.reply(1)), Reply::Int(1));
    assert_eq!(ok(net.reply(2)), Reply::Int(1));
    // Both idle now: the next register drops them both.
    increment_through_a(&mut net, 3, 2);
    assert_eq!(a(&net).proposer_registers(), 1);
    assert_eq!(a(&net).stats().registers_dropped, 2);
    let (value, _) = increment_through_a(&mut net, 4, 0);
    assert_eq!(value, Reply::Int(2));
}

// ----- removing dead registers (docs/removal.md) -----

/// A network whose replicas remove dead registers, with `bugs` on.
fn removal_net(bugs: impl Fn(&mut logless_rmw::config::InjectedBugs)) -> Net {
    Net::new(|c| {
        c.remove_dead_registers = true;
        bugs(&mut c.bugs);
    })
}

impl Net {
    /// Asks `node` to remove the register and delivers what follows while `keep` says so.
    fn remove(&mut self, node: NodeId, keep: impl Fn(NodeId, &Envelope) -> bool) -> bool {
        let now = self.now_ms;
        let started = self
            .replicas
            .get_mut(&node)
            .unwrap()
            .remove_if_dead(now, &key());
        self.collect(node);
        self.run(keep);
        started
    }

    /// Crashes `node` and restarts it from its store in its next incarnation, with removal on:
    /// what was committed survives, nothing else.
    fn restart(&mut self, node: NodeId) {
        let store = &self.stores[&node];
        let recovered: Vec<(Key, AcceptorState, Location)> = store
            .states
            .iter()
            .map(|(k, s)| (k.clone(), s.clone(), Location(store.locations[k])))
            .collect();
        let mut config = ProposerConfig::new(vec![A, B, C]);
        config.straggler_wait_ms = 0;
        config.remove_dead_registers = true;
        let replica = Replica::new_located(node, 2, config, 99, recovered)
            .with_round_floor(store.round_floor);
        self.replicas.insert(node, replica);
        self.timers.remove(&node);
    }

    /// Crashes `node` of a ring of [`SIX`] and restarts it from its store in its next
    /// incarnation with `placement` installed: what was committed survives, nothing else.
    fn crash_and_restart_placed(&mut self, node: NodeId, placement: Placement) {
        let store = &self.stores[&node];
        let recovered: Vec<(Key, AcceptorState, Location)> = store
            .states
            .iter()
            .map(|(k, s)| (k.clone(), s.clone(), Location(store.locations[k])))
            .collect();
        let mut config = ProposerConfig::new(SIX.to_vec());
        config.straggler_wait_ms = 0;
        config.placement = Some(placement);
        let replica = Replica::new_located(node, 2, config, 99, recovered)
            .with_round_floor(store.round_floor);
        self.replicas.insert(node, replica);
        self.timers.remove(&node);
    }

    /// Whether no acceptor holds the register, in memory or in its store.
    fn forgotten_everywhere(&self) -> bool {
        [A, B, C].iter().all(|n| {
            self.replicas[n].acceptor_state(&key()).is_none()
                && !self.stores[n].states.contains_key(&key())
        })
    }
}

fn set(value: &str) -> Command {
    Command::Set(SetArgs {
        value: value.to_string().into(),
        condition: Condition::Always,
        get: false,
        expiry: Expiry::Clear,
    })
}

/// Runs `command` through `node` with messages delivered while `keep` says so, firing its
/// timers until it is answered.
fn applied(
    net: &mut Net,
    node: NodeId,
    tag: u64,
    command: Command,
    keep: impl Fn(NodeId, &Envelope) -> bool,
) -> Reply {
    net.command(node, tag, command);
    net.run(&keep);
    while net.reply(tag).is_none() {
        net.fire_timer(node);
        net.run(&keep);
    }
    ok(net.reply(tag))
}

fn get(net: &mut Net, node: NodeId, tag: u64, keep: impl Fn(NodeId, &Envelope) -> bool) -> Reply {
    applied(net, node, tag, Command::Get, keep)
}

fn bulk(value: &str) -> Reply {
    Reply::Bulk(value.to_string().into())
}

/// SET then DEL through A on a fault-free network: every acceptor holds A's tombstone.
fn deleted_through_a(net: &mut Net) {
    net.command(A, 1, set("v"));
    net.run(every);
    net.command(A, 2, Command::Del);
    net.run(every);
    assert_eq!(ok(net.reply(2)), Reply::Int(1));
}

#[test]
fn a_deleted_register_leaves_every_acceptor_and_its_key_starts_above_every_earlier_round() {
    let mut net = removal_net(|_| {});
    deleted_through_a(&mut net);
    let before = net.state(A);
    assert!(net.remove(A, every));
    assert!(net.forgotten_everywhere());
    for node in [A, B, C] {
        let replica = &net.replicas[&node];
        assert_eq!(replica.registers_removed(), 1);
        assert_eq!(replica.acceptor_registers(), 0);
        assert!(
            !replica.proposer_holds(&key()),
            "{node:?} dropped its cache"
        );
        // The floor is durable and above every round the register used.
        assert!(replica.round_floor() >= before.r_ack);
        assert_eq!(net.stores[&node].round_floor, replica.round_floor());
    }
    // The key reads as absent, and is written again from there.
    assert_eq!(get(&mut net, B, 3, every), Reply::Nil);
    net.command(C, 4, Command::IncrBy(5));
    net.run(every);
    assert_eq!(ok(net.reply(4)), Reply::Int(5));
    assert!(net.state(C).r_voted > before.r_voted);
    assert_eq!(get(&mut net, A, 5, every), bulk("5"));
}

#[test]
fn an_expiring_register_is_removed_only_once_expired_and_only_by_its_writer() {
    let mut net = removal_net(|_| {});
    net.command(
        A,
        1,
        Command::Set(SetArgs {
            value: "v".into(),
            condition: Condition::Always,
            get: false,
            expiry: Expiry::AfterMs(100),
        }),
    );
    net.run(every);
    net.now_ms = 99;
    assert!(!net.remove(A, every), "alive");
    net.now_ms = 100;
    assert!(!net.remove(B, every), "A's request: only A may remove it");
    assert!(net.remove(A, every));
    assert!(net.forgotten_everywhere());
    assert_eq!(get(&mut net, C, 2, every), Reply::Nil);
}

#[test]
fn a_removal_is_off_by_default_and_spares_live_and_fenced_registers() {
    let mut net = Net::new(|_| {});
    deleted_through_a(&mut net);
    assert!(!net.remove(A, every), "off by default");
    let mut net = removal_net(|_| {});
    net.command(A, 1, set("v"));
    net.run(every);
    assert!(!net.remove(A, every), "live");
    // A lock hands out fencing tokens, which must only grow: its key keeps its tombstone.
    let mut fenced = net.state(A);
    Arc::make_mut(&mut fenced.value).fence = 1;
    Arc::make_mut(&mut fenced.value).data = Data::Absent;
    let initial: BTreeMap<NodeId, AcceptorState> =
        [A, B, C].iter().map(|n| (*n, fenced.clone())).collect();
    let mut net = Net::with_states(|c| c.remove_dead_registers = true, initial);
    assert!(!net.remove(A, every));
}

/// A's SET reaches every acceptor but its DEL only A and B: C lags with the value. A removal
/// must wait for C; with the deliberate bug it goes ahead on A's and B's answers (C's is held
/// back), and a later write through C and A, with B unreachable, writes C's old value through.
fn lagging_acceptor_scenario(remove_before_all_hold_tombstone: bool) -> Reply {
    let mut net =
        removal_net(|b| b.remove_before_all_hold_tombstone = remove_before_all_hold_tombstone);
    net.command(A, 1, Command::IncrBy(7));
    net.run(every);
    net.command(A, 2, Command::Del);
    net.run(|from, e| !(from == A && e.to == C && matches!(e.message, Message::Vote { .. })));
    assert_eq!(ok(net.reply(2)), Reply::Int(1));
    net.slow_down_from(C, A, |m| matches!(m, Message::Ack { .. }));
    let started = net.remove(A, every);
    assert!(started);
    net.release(C, A);
    net.run(every);
    assert_eq!(
        net.replicas[&A].registers_removed(),
        u64::from(remove_before_all_hold_tombstone)
    );
    let b_unreachable = |from: NodeId, e: &Envelope| from != B && e.to != B;
    applied(&mut net, C, 3, Command::IncrBy(1), b_unreachable)
}

#[test]
fn a_removal_waits_until_every_acceptor_holds_the_tombstone() {
    assert_eq!(lagging_acceptor_scenario(false), Reply::Int(1));
}

#[test]
fn a_removal_before_every_acceptor_holds_the_tombstone_resurrects_a_value() {
    assert_eq!(
        lagging_acceptor_scenario(true),
        Reply::Int(8),
        "the deliberate bug must show as the deleted 7 coming back"
    );
}

/// B's increment is chosen by A and B while its VOTE to C is delayed; A deletes the key
/// everywhere and removes it. Then the delayed VOTE reaches C (after C crashed and restarted
/// from its store, with `crash`): behind the round floor C refuses it; without the fence C
/// votes the old value in, and a read through B and C, with A unreachable, returns it.
fn delayed_vote_scenario(skip_removal_fence: bool, crash: bool) -> Reply {
    let mut net = removal_net(|b| b.skip_removal_fence = skip_removal_fence);
    net.slow_down_from(B, C, |m| matches!(m, Message::Vote { .. }));
    net.command(B, 1, Command::IncrBy(7));
    net.run(every);
    assert_eq!(ok(net.reply(1)), Reply::Int(7));
    net.command(A, 2, Command::Del);
    net.run(every);
    assert_eq!(ok(net.reply(2)), Reply::Int(1));
    assert!(net.remove(A, every));
    assert!(net.forgotten_everywhere());
    if crash {
        net.restart(C);
    }
    net.release(B, C);
    net.run(every);
    assert_eq!(
        net.replicas[&C].acceptor_state(&key()).is_some(),
        skip_removal_fence,
        "the delayed VOTE is refused only behind the fence"
    );
    let a_unreachable = |from: NodeId, e: &Envelope| from != A && e.to != A;
    get(&mut net, B, 3, a_unreachable)
}

#[test]
fn a_delayed_vote_is_refused_behind_the_round_floor_across_a_crash() {
    assert_eq!(delayed_vote_scenario(false, false), Reply::Nil);
    assert_eq!(delayed_vote_scenario(false, true), Reply::Nil);
}

#[test]
fn a_removal_without_the_fence_lets_a_delayed_vote_resurrect_a_value() {
    assert_eq!(
        delayed_vote_scenario(true, false),
        bulk("7"),
        "the deliberate bug must show as the deleted 7 coming back"
    );
}

/// A broken link loses a removal's answers: the read is abandoned, nothing is removed, and a
/// later attempt removes the register.
#[test]
fn a_removal_whose_answers_a_broken_link_lost_is_abandoned_and_retried() {
    let mut net = removal_net(|_| {});
    deleted_through_a(&mut net);
    assert!(net.remove(A, |from, e| !(from == C && e.to == A)));
    net.replicas.get_mut(&A).unwrap().handle_link_broken(C);
    assert_eq!(net.replicas[&A].registers_removed(), 0);
    assert!(!net.forgotten_everywhere());
    assert!(net.remove(A, every));
    assert!(net.forgotten_everywhere());
}

/// A REMOVE lost on the way to one acceptor leaves its tombstone in place (space, not safety):
/// reads through it see the tombstone or nothing, both absent, and the key is written anew.
#[test]
fn a_lost_remove_leaves_one_tombstone_and_the_key_stays_absent() {
    let mut net = removal_net(|_| {});
    deleted_through_a(&mut net);
    assert!(net.remove(A, |_, e| !(e.to == C
        && matches!(e.message, Message::Remove { .. }))));
    assert!(net.state(C).r_voted != Round::BOTTOM);
    assert_eq!(net.replicas[&A].acceptor_state(&key()), None);
    let b_unreachable = |from: NodeId, e: &Envelope| from != B && e.to != B;
    assert_eq!(get(&mut net, C, 3, b_unreachable), Reply::Nil);
    assert_eq!(
        applied(&mut net, C, 4, Command::IncrBy(2), b_unreachable),
        Reply::Int(2)
    );
}

/// A crash of the removing node right after its own acceptor forgot the register: the others
/// still forget it, and the restarted node starts the key above its recovered floor.
#[test]
fn a_removing_node_that_crashes_midway_recovers_its_floor() {
    let mut net = removal_net(|_| {});
    deleted_through_a(&mut net);
    let r_ack = net.state(A).r_ack;
    assert!(net.remove(A, |from, e| !(from == A
        && matches!(e.message, Message::Remove { .. })
        && e.to != A)));
    assert_eq!(net.replicas[&A].acceptor_state(&key()), None);
    net.restart(A);
    assert!(net.replicas[&A].round_floor() >= r_ack);
    assert_eq!(net.replicas[&A].acceptor_registers(), 0);
    // B and C still hold the tombstone; reads and writes go on.
    assert_eq!(get(&mut net, B, 3, every), Reply::Nil);
    assert_eq!(applied(&mut net, A, 4, set("w"), every), Reply::Ok);
    assert_eq!(get(&mut net, C, 5, every), bulk("w"));
}

// ----- a lost disk (docs/lost-disk.md) -----

impl Net {
    /// `node` loses its disk and comes back empty in incarnation 2, told to rejoin (unless the
    /// deliberate bug makes it a fresh acceptor at once).
    fn lose_disk(&mut self, node: NodeId, rejoin_without_fence: bool) {
        let mut config = ProposerConfig::new(vec![A, B, C]);
        config.straggler_wait_ms = 0;
        config.request_timeout_ms = 1_000;
        config.bugs.rejoin_without_fence = rejoin_without_fence;
        let replica = Replica::new(node, 2, config, 77, Vec::new()).rejoining();
        self.replicas.insert(node, replica);
        self.stores.insert(node, MemStore::default());
        self.timers.remove(&node);
        self.queue.retain(|(from, e)| *from != node && e.to != node);
        self.collect(node);
    }

    /// The result of `command` through `node` while `keep` says which messages arrive: the
    /// reply, or `None` if the command was not applied.
    fn outcome(
        &mut self,
        node: NodeId,
        tag: u64,
        command: Command,
        keep: impl Fn(NodeId, &Envelope) -> bool,
    ) -> Option<Reply> {
        self.command(node, tag, command);
        self.run(&keep);
        while self.reply(tag).is_none() {
            self.fire_timer(node);
            self.run(&keep);
        }
        self.reply(tag).unwrap().result.clone().ok()
    }
}

/// INCR chosen by A and B (C never hears of it); A loses its disk; with B unreachable, C
/// increments through A and itself. Returns the two INCRs' answers (`None`: not applied) and
/// the counter read at the end through B and C.
fn lost_vote_scenario(rejoin_without_fence: bool) -> (Option<Reply>, Option<Reply>, i64) {
    let mut net = Net::new(|c| c.request_timeout_ms = 1_000);
    let c_unreachable = |from: NodeId, e: &Envelope| from != C && e.to != C;
    let first = net.outcome(B, 1, Command::IncrBy(1), c_unreachable);
    assert_eq!(
        net.state(C),
        AcceptorState::default(),
        "C never heard of it"
    );
    net.lose_disk(A, rejoin_without_fence);
    let b_unreachable = |from: NodeId, e: &Envelope| from != B && e.to != B;
    let second = net.outcome(C, 2, Command::IncrBy(1), b_unreachable);
    // The network heals; the links that dropped messages broke and were made again.
    for (node, peer) in [(A, B), (B, A), (C, B), (B, C), (A, C), (C, A)] {
        net.replicas
            .get_mut(&node)
            .unwrap()
            .handle_link_broken(peer);
        net.collect(node);
    }
    net.run(every);
    let counter = |reply: Option<Reply>| match reply {
        Some(Reply::Bulk(value)) => std::str::from_utf8(&value).unwrap().parse().unwrap(),
        other => panic!("a counter, not {other:?}"),
    };
    let read = counter(net.outcome(B, 3, Command::Get, every));
    assert_eq!(counter(net.outcome(C, 4, Command::Get, every)), read);
    (first, second, read)
}

/// A lost disk with the rejoin rule: the rejoining acceptor answers nothing until its peers
/// are fenced and it recovered the register, so C cannot write without B, and nothing chosen
/// is lost.
#[test]
fn lost_disk_a_rejoining_acceptor_answers_for_no_register_it_has_not_recovered() {
    let (first, second, read) = lost_vote_scenario(false);
    assert_eq!(first, Some(Reply::Int(1)));
    assert_eq!(second, None, "no quorum without B: A counts as crashed");
    assert_eq!(read, 1);
}

/// The same run with the deliberate bug (the empty acceptor votes at once): the value A and B
/// chose is overwritten by one C built on nothing, and the counter says 1 after two INCRs.
#[test]
fn lost_disk_without_the_rejoin_rule_loses_a_chosen_value() {
    let (first, second, read) = lost_vote_scenario(true);
    assert_eq!(first, Some(Reply::Int(1)));
    assert_eq!(second, Some(Reply::Int(1)), "built on the forgotten state");
    assert_eq!(read, 1, "two INCRs acknowledged, one visible");
}

/// After FENCED from every peer, the rejoining acceptor recovers a register at the first
/// message about it and serves it again: A and C write without B.
#[test]
fn lost_disk_a_fenced_acceptor_recovers_a_register_and_votes_again() {
    let mut net = Net::new(|c| c.request_timeout_ms = 1_000);
    assert_eq!(
        net.outcome(B, 1, Command::IncrBy(5), every),
        Some(Reply::Int(5))
    );
    net.lose_disk(A, false);
    net.run(every);
    assert_eq!(net.replicas[&A].rejoin_progress(), Some((0, 0)));
    let fenced = net
        .log
        .iter()
        .filter(|(_, e)| kind(&e.message) == "FENCED")
        .count();
    assert_eq!(fenced, 2, "both peers answered FENCE");
    // The first message about the register starts its recovery; B and C still serve it.
    assert_eq!(
        net.outcome(C, 2, Command::IncrBy(1), every),
        Some(Reply::Int(6))
    );
    net.run(every);
    assert_eq!(net.replicas[&A].rejoin_progress(), Some((0, 1)));
    assert!(
        net.state(A).r_voted != Round::BOTTOM,
        "A took the quorum's state"
    );
    assert_eq!(
        net.stores[&A].states.get(&key()),
        Some(&net.state(A)),
        "durably"
    );
    let b_unreachable = |from: NodeId, e: &Envelope| from != B && e.to != B;
    assert_eq!(
        net.outcome(A, 3, Command::IncrBy(1), b_unreachable),
        Some(Reply::Int(7))
    );
    assert_eq!(
        net.outcome(C, 4, Command::Get, b_unreachable),
        Some(bulk("7"))
    );
}

/// A lost *promise*: C's PREPARE reaches A, which acknowledges round R, and C's own acceptor
/// only late; then A loses its disk. B increments with C cut off, then C completes phase 1
/// with A's earlier acknowledgement and its own, and proposes. Returns the answers of B's and
/// C's increments (after a first INCR of 1 through B) and the counter read at the end.
fn lost_promise_scenario(rejoin_without_fence: bool) -> (Option<Reply>, Option<Reply>, i64) {
    let mut net = Net::new(|c| c.request_timeout_ms = 1_000);
    assert_eq!(
        net.outcome(B, 1, Command::IncrBy(1), every),
        Some(Reply::Int(1))
    );
    net.slow_down_from(C, C, |m| matches!(m, Message::Prepare { .. }));
    net.command(C, 2, Command::IncrBy(1));
    net.run(|from, e| !(from == C && e.to == B));
    assert!(
        net.state(A).r_ack.id.proposer.node == C,
        "A promised C's round"
    );
    net.lose_disk(A, rejoin_without_fence);
    let c_cut_off = |from: NodeId, e: &Envelope| from != C && e.to != C;
    let b_incr = net.outcome(B, 3, Command::IncrBy(1), c_cut_off);
    net.release(C, C);
    net.run(every);
    while net.reply(2).is_none() {
        net.fire_timer(C);
        net.run(every);
    }
    let c_incr = net.reply(2).unwrap().result.clone().ok();
    let Some(Reply::Bulk(read)) = net.outcome(A, 4, Command::Get, every) else {
        panic!("a counter")
    };
    let read = std::str::from_utf8(&read).unwrap().parse().unwrap();
    (b_incr, c_incr, read)
}

/// Whether increments of 1 from 0 whose answers were `answers` (`None`: not applied or
/// unknown) and a final read `read` are consistent: every acknowledged increment saw its own
/// value, and the counter holds at least the highest.
fn increments_consistent(answers: &[Option<Reply>], read: i64) -> bool {
    let mut seen: Vec<i64> = answers
        .iter()
        .flatten()
        .map(|r| match r {
            Reply::Int(v) => *v,
            other => panic!("an INCR answer, not {other:?}"),
        })
        .collect();
    seen.sort_unstable();
    let distinct = seen.windows(2).all(|w| w[0] < w[1]);
    distinct && seen.last().is_none_or(|&highest| read >= highest)
}

/// With the rejoin rule the forgotten promise cannot be contradicted: A answers nothing for
/// the register until it is fenced and recovered, so B cannot increment without C, and every
/// acknowledged increment counts.
#[test]
fn lost_disk_a_forgotten_promise_is_never_contradicted() {
    let (b_incr, c_incr, read) = lost_promise_scenario(false);
    assert_eq!(b_incr, None, "no quorum without C");
    assert!(
        increments_consistent(&[Some(Reply::Int(1)), b_incr, c_incr.clone()], read),
        "{c_incr:?}, read {read}"
    );
}

/// The same run with the deliberate bug: the empty A votes for B's increment, which is chosen;
/// C's phase 1 counted A's forgotten promise, so its increment is built on the value before and
/// chosen too. Two increments answer 2: one is lost.
#[test]
fn lost_disk_without_the_rejoin_rule_contradicts_a_forgotten_promise() {
    let (b_incr, c_incr, read) = lost_promise_scenario(true);
    assert_eq!(b_incr, Some(Reply::Int(2)));
    assert_eq!(c_incr, Some(Reply::Int(2)), "built on the value before B's");
    assert!(!increments_consistent(
        &[Some(Reply::Int(1)), b_incr, c_incr],
        read
    ));
}

/// The first write of a new key when two of the three acceptors have no disk space for it
/// (`docs/security.md`, full disks): each answers the PREPARE with FULL, and the proposer, whose
/// own disk has room, answers "too many replicas have no space" (not applied) at once rather
/// than "outcome unknown" at its timeout. With one full acceptor a quorum has room and the write
/// goes through, and once space returns the last acceptor serves the key too.
#[test]
fn a_new_key_no_quorum_has_space_for_is_refused_at_once() {
    let mut net = Net::new(|_| {});
    net.stores.get_mut(&B).unwrap().full = true;
    net.stores.get_mut(&C).unwrap().full = true;
    let since = net.log.len();
    net.command(A, 1, set("v"));
    net.run(every);
    let result = &net.reply(1).expect("answered before any timer").result;
    assert_eq!(*result, Err(ProposeError::QuorumFull));
    let kinds = kinds_since(&net, since);
    assert_eq!(
        kinds.iter().filter(|k| **k == "FULL").count(),
        2,
        "{kinds:?}"
    );
    assert!(!kinds.contains(&"VOTE"), "nothing proposed: {kinds:?}");
    assert!(net.stores[&B].states.is_empty() && net.stores[&C].states.is_empty());
    assert!(
        net.replicas[&B].acceptor_state(&key()).is_none(),
        "back to what is durable"
    );

    // One acceptor with room besides the proposer's own: a quorum, and the write goes through
    // (A acknowledged the refused attempt, B did not: their rounds differ, and a PAXOS_PREP
    // after the phase timeout agrees them).
    net.stores.get_mut(&B).unwrap().full = false;
    net.command(A, 2, set("w"));
    net.run(every);
    net.drive(A, every, |net| net.reply(2).is_some());
    assert_eq!(ok(net.reply(2)), Reply::Ok);
    assert!(net.stores[&C].states.is_empty(), "C stored nothing");

    // Space returns to C: it serves the key again.
    net.stores.get_mut(&C).unwrap().full = false;
    net.command(C, 3, Command::Get);
    net.run(every);
    assert_eq!(ok(net.reply(3)), Reply::Bulk("w".into()));
}

// ----- a ring: each key's acceptors are its R replicas among N nodes -----

/// The five nodes of a ring with three replicas per key.
const RING: [NodeId; 5] = [NodeId(1), NodeId(2), NodeId(3), NodeId(4), NodeId(5)];

fn ring_configuration() -> Configuration {
    let nodes: Vec<placement::NodeId> = RING.iter().map(|n| placement::NodeId(n.0)).collect();
    Configuration::balanced(&nodes, Replication::THREE).unwrap()
}

/// Five replicas whose registers are placed on three of them by [`ring_configuration`].
fn ring() -> Net {
    let placement = Placement::new(&ring_configuration(), &RING).unwrap();
    Net::with_nodes(
        &RING,
        |config| config.placement = Some(placement.clone()),
        BTreeMap::new(),
    )
}

/// The replicas of `key` in [`ring_configuration`], first replica first.
fn replicas_of(key: &Key) -> Vec<NodeId> {
    let config = ring_configuration();
    let replicas = config.replicas(key_slot(key.as_bytes()));
    replicas.nodes().iter().map(|n| NodeId(n.0)).collect()
}

/// Two keys of the ring whose replica sets differ.
fn two_placed_keys() -> (Key, Key) {
    let first = Key::new("ring-0");
    let mut sorted = replicas_of(&first);
    sorted.sort();
    let second = (1..)
        .map(|i| Key::new(format!("ring-{i}")))
        .find(|k| {
            let mut other = replicas_of(k);
            other.sort();
            other != sorted
        })
        .unwrap();
    (first, second)
}

/// Increments `key` through its first replica and reads it back through its last, delivering
/// messages while `keep` says so and firing the proposers' timers until each answers.
fn ring_increment_and_read(
    net: &mut Net,
    key: &Key,
    tag: u64,
    keep: impl Fn(NodeId, &Envelope) -> bool + Copy,
) -> Reply {
    let replicas = replicas_of(key);
    let (writer, reader) = (replicas[0], replicas[2]);
    net.command_on(writer, tag, key.clone(), Command::IncrBy(7));
    net.run(keep);
    net.drive(writer, keep, |net| net.reply(tag).is_some());
    assert_eq!(ok(net.reply(tag)), Reply::Int(7));
    net.command_on(reader, tag + 1, key.clone(), Command::Get);
    net.run(keep);
    net.drive(reader, keep, |net| net.reply(tag + 1).is_some());
    ok(net.reply(tag + 1))
}

#[test]
fn ring_keys_with_different_replicas_go_only_to_their_own_acceptors() {
    let mut net = ring();
    let (k1, k2) = two_placed_keys();
    for (key, tag) in [(&k1, 10), (&k2, 20)] {
        let since = net.log.len();
        let read = ring_increment_and_read(&mut net, key, tag, every);
        assert_eq!(read, Reply::Bulk("7".into()));
        let replicas = replicas_of(key);
        // Every message of the key went between its replicas, and only they hold its state.
        for (from, envelope) in &net.log[since..] {
            assert!(
                replicas.contains(from) && replicas.contains(&envelope.to),
                "{from:?} → {:?} for a key of {replicas:?}",
                envelope.to
            );
        }
        for node in RING {
            let held = net.replicas[&node].acceptor_state(key).is_some();
            assert_eq!(held, replicas.contains(&node), "{node:?}");
        }
    }
}

#[test]
fn ring_a_crash_of_both_non_replicas_changes_nothing() {
    let (key, _) = two_placed_keys();
    let replicas = replicas_of(&key);
    let mut whole = ring();
    let read = ring_increment_and_read(&mut whole, &key, 1, every);
    // The two nodes that are not replicas of the key are down: a majority of all five nodes
    // would be out of reach, a majority of the key's three is not, and not one message
    // changes.
    let up = |from: NodeId, e: &Envelope| replicas.contains(&from) && replicas.contains(&e.to);
    let mut crashed = ring();
    assert_eq!(ring_increment_and_read(&mut crashed, &key, 1, up), read);
    let sent = |net: &Net| -> Vec<(NodeId, NodeId, &'static str)> {
        (net.log.iter())
            .map(|(from, e)| (*from, e.to, kind(&e.message)))
            .collect()
    };
    assert_eq!(sent(&crashed), sent(&whole));
}

#[test]
fn ring_a_crash_of_one_replica_keeps_a_quorum() {
    let (key, _) = two_placed_keys();
    let replicas = replicas_of(&key);
    // The middle replica is down (neither the writer nor the reader).
    let down = replicas[1];
    let keep = |from: NodeId, e: &Envelope| from != down && e.to != down;
    let mut net = ring();
    assert_eq!(
        ring_increment_and_read(&mut net, &key, 1, keep),
        Reply::Bulk("7".into())
    );
    assert!(net.replicas[&down].acceptor_state(&key).is_none());
}

#[test]
fn ring_a_crash_of_two_replicas_leaves_no_quorum() {
    let (key, _) = two_placed_keys();
    let replicas = replicas_of(&key);
    // Only the writer and the two non-replicas are up: three of five nodes, but one of the
    // key's three acceptors.
    let writer = replicas[0];
    let keep = |from: NodeId, e: &Envelope| {
        !replicas[1..].contains(&from) && !replicas[1..].contains(&e.to)
    };
    let mut net = ring();
    net.command_on(writer, 1, key.clone(), Command::IncrBy(7));
    net.run(keep);
    for _ in 0..200 {
        if net.reply(1).is_some() {
            break;
        }
        net.fire_timer(writer);
        net.run(keep);
    }
    let reply = net.reply(1).expect("the request times out");
    assert!(reply.result.is_err(), "{reply:?}");
}

#[test]
fn ring_an_acceptor_drops_a_message_for_a_key_it_does_not_replicate() {
    let (key, _) = two_placed_keys();
    let replicas = replicas_of(&key);
    let outsider = RING.into_iter().find(|n| !replicas.contains(n)).unwrap();
    let mut net = ring();
    let since = net.log.len();
    let prepare = Message::Prepare {
        key: key.clone(),
        kind: PrepareKind::Write,
        attempt: AttemptId {
            proposer: ProposerId {
                node: replicas[0],
                incarnation: 1,
            },
            seq: 1,
        },
        known_voted: Round::BOTTOM,
        // Sent in the ring's stage, so that the fence lets it through.
        stage: net.replicas[&outsider].stage(),
    };
    net.replicas
        .get_mut(&outsider)
        .unwrap()
        .handle_message(0, replicas[0], &prepare);
    net.collect(outsider);
    assert_eq!(net.log.len(), since, "no answer");
    assert!(net.replicas[&outsider].acceptor_state(&key).is_none());
    assert_eq!(net.stores[&outsider].writes, 0);
}

#[test]
fn a_placement_naming_a_node_that_is_no_acceptor_is_refused() {
    let err = Placement::new(&ring_configuration(), &RING[..4]).unwrap_err();
    assert_eq!(err.node, 5);
}

// ----- a ring changing a register's acceptors: Stable(e) → Joint(e+1) → Stable(e+1) -----

/// The five nodes of [`RING`] and a sixth that replaces one of them.
const SIX: [NodeId; 6] = [
    NodeId(1),
    NodeId(2),
    NodeId(3),
    NodeId(4),
    NodeId(5),
    NodeId(6),
];

/// A register moving as node 6 replaces its first replica: the configurations before and
/// after, and the register's leaving, shared and joining acceptors.
struct Move {
    old: Configuration,
    new: Configuration,
    key: Key,
    leaving: NodeId,
    shared: [NodeId; 2],
    joining: NodeId,
}

impl Move {
    fn new() -> Move {
        let old = ring_configuration();
        let key = Key::new("ring-0");
        let replicas = replicas_of(&key);
        let leaving = replicas[0];
        let new = old
            .with_node_replaced(placement::NodeId(leaving.0), placement::NodeId(6))
            .unwrap();
        let after: Vec<NodeId> = (new.replicas(key_slot(key.as_bytes())).nodes().iter())
            .map(|n| NodeId(n.0))
            .collect();
        assert!(after.contains(&NodeId(6)) && !after.contains(&leaving));
        Move {
            old,
            new,
            key,
            leaving,
            shared: [replicas[1], replicas[2]],
            joining: NodeId(6),
        }
    }

    /// Six replicas in the stable stage of the old configuration.
    fn net(&self) -> Net {
        self.net_with(|_| {})
    }

    /// [`Move::net`] with each proposer's configuration changed by `configure` too.
    fn net_with(&self, configure: impl Fn(&mut ProposerConfig)) -> Net {
        let placement = Placement::new(&self.old, &SIX).unwrap();
        Net::with_nodes(
            &SIX,
            |config| {
                config.placement = Some(placement.clone());
                configure(config);
            },
            BTreeMap::new(),
        )
    }

    fn joint(&self) -> Placement {
        Placement::joint(&self.old, &self.new, &SIX).unwrap()
    }

    fn stable_new(&self) -> Placement {
        Placement::new(&self.new, &SIX).unwrap()
    }
}

/// Every replica installs `placement` (the caller's part: the engine is told of stages), and
/// in a joint stage every new acceptor of a slot has its round floor raised above every
/// replica's rounds, as its node does (above a majority of the slot's old replicas'; see
/// [`TwoMoves::change`]).
fn install(net: &mut Net, placement: &Placement) {
    install_except(net, placement, &[]);
}

/// [`install`] on every replica but those `lagging` behind, which stay in the stage they had.
fn install_except(net: &mut Net, placement: &Placement, lagging: &[NodeId]) {
    for (node, replica) in &mut net.replicas {
        if !lagging.contains(node) {
            replica.install_placement(placement.clone());
        }
    }
    let above = (net.replicas.values().map(Replica::high_round).max()).unwrap_or(0);
    let gaining: Vec<NodeId> = (net.replicas.iter())
        .filter(|(_, replica)| replica.awaits_gained_floor())
        .map(|(node, _)| *node)
        .collect();
    for node in gaining {
        let replica = net.replicas.get_mut(&node).unwrap();
        assert!(replica.raise_floor_for_gained_slots(placement.stage_id(), above));
        net.collect(node);
    }
}

/// Every replica installs `placement`, and nothing else.
fn install_only(net: &mut Net, placement: &Placement) {
    for replica in net.replicas.values_mut() {
        replica.install_placement(placement.clone());
    }
}

/// Runs `command` on `key` through `node` with messages delivered while `keep` says so,
/// firing its timers until it answers; the answer.
fn run_on(
    net: &mut Net,
    node: NodeId,
    tag: u64,
    key: &Key,
    command: Command,
    keep: impl Fn(NodeId, &Envelope) -> bool + Copy,
) -> Result<Reply, ProposeError> {
    net.command_on(node, tag, key.clone(), command);
    answer_of(net, node, tag, keep)
}

/// Delivers messages while `keep` says so, firing `node`'s timers until the command `tag` it
/// runs is answered; the answer.
fn answer_of(
    net: &mut Net,
    node: NodeId,
    tag: u64,
    keep: impl Fn(NodeId, &Envelope) -> bool + Copy,
) -> Result<Reply, ProposeError> {
    net.run(keep);
    for _ in 0..200 {
        if net.reply(tag).is_some() {
            break;
        }
        net.fire_timer(node);
        net.run(keep);
    }
    net.reply(tag).expect("an answer").result.clone()
}

/// Messages to and from the nodes `down` are lost.
fn without(down: &[NodeId]) -> impl Fn(NodeId, &Envelope) -> bool + Copy + '_ {
    move |from, e| !down.contains(&from) && !down.contains(&e.to)
}

/// Writes 7 in the old stage with one shared replica down (so the leaving replica and the
/// other shared one vote), then, if `joint`, passes through the joint stage with a read that
/// writes the value through, and reads in the new stage with the other shared replica down:
/// what that read returns.
fn moved_then_read(joint: bool) -> Reply {
    let m = Move::new();
    let [s1, s2] = m.shared;
    let mut net = m.net();
    let write = run_on(&mut net, s1, 1, &m.key, Command::IncrBy(7), without(&[s2]));
    assert_eq!(write, Ok(Reply::Int(7)));
    if joint {
        install(&mut net, &m.joint());
        // The sync's write-through: a majority of the old set shows 7, no majority of the new
        // set agrees, so the read writes 7 through under the joint quorum.
        let read = run_on(&mut net, s1, 2, &m.key, Command::Get, every);
        assert_eq!(read, Ok(Reply::Bulk("7".into())));
        assert!(
            [s2, m.joining]
                .iter()
                .any(|n| net.replicas[n].acceptor_state(&m.key).is_some()),
            "a member of the new set outside the writers holds the value"
        );
    }
    install(&mut net, &m.stable_new());
    // The new set without s1: the other shared replica and the joining one.
    run_on(&mut net, m.joining, 3, &m.key, Command::Get, without(&[s1])).unwrap()
}

#[test]
fn ring_a_replaced_replica_gets_the_last_value_through_the_joint_stage() {
    assert_eq!(moved_then_read(true), Reply::Bulk("7".into()));
}

#[test]
fn ring_skipping_the_joint_stage_loses_an_acknowledged_write() {
    // The old majority that chose 7 and the new majority that reads are disjoint.
    assert_eq!(moved_then_read(false), Reply::Nil);
}

/// Runs a write-through of `key` through `node` (a node's data mover), as [`run_on`] runs a
/// command; the answer.
fn write_through_on(
    net: &mut Net,
    node: NodeId,
    tag: u64,
    key: &Key,
    keep: impl Fn(NodeId, &Envelope) -> bool + Copy,
) -> Result<Reply, ProposeError> {
    let now = net.now_ms;
    net.replicas
        .get_mut(&node)
        .unwrap()
        .handle_write_through(now, ClientTag(tag), key.clone());
    net.collect(node);
    answer_of(net, node, tag, keep)
}

#[test]
fn ring_a_write_through_puts_the_value_and_its_request_on_the_new_acceptors() {
    let m = Move::new();
    let [s1, s2] = m.shared;
    let mut net = m.net();
    let write = run_on(&mut net, s1, 1, &m.key, Command::IncrBy(7), every);
    assert_eq!(write, Ok(Reply::Int(7)));
    let chosen = net.replicas[&s1].acceptor_state(&m.key).unwrap().clone();
    install(&mut net, &m.joint());
    // A read finds the two shared replicas consistent, a majority of each set: it answers
    // without writing anything to the joining acceptor.
    let read = run_on(&mut net, s2, 2, &m.key, Command::Get, every);
    assert_eq!(read, Ok(Reply::Bulk("7".into())));
    assert!(net.replicas[&m.joining].acceptor_state(&m.key).is_none());
    // The mover's write-through proposes the chosen value again, in a new round, with the
    // request that made it: every acceptor of the new set holds it.
    let synced = write_through_on(&mut net, m.joining, 3, &m.key, every);
    assert_eq!(synced, Ok(Reply::Bulk("7".into())));
    for node in [s1, s2, m.joining] {
        let state = net.replicas[&node].acceptor_state(&m.key).unwrap();
        assert!(
            state.r_voted > chosen.r_voted,
            "node {node:?} voted in a new round"
        );
        assert_eq!(state.value, chosen.value);
        assert_eq!(state.req, chosen.req, "the request that made the value");
    }
    // Once stable in the new set, the joining acceptor and one shared one serve it.
    install(&mut net, &m.stable_new());
    let read = run_on(&mut net, m.joining, 4, &m.key, Command::Get, without(&[s1]));
    assert_eq!(read, Ok(Reply::Bulk("7".into())));
    assert_eq!(
        run_on(&mut net, s2, 5, &m.key, Command::IncrBy(1), without(&[s1])),
        Ok(Reply::Int(8))
    );
}

/// The acceptor of a replica that left a slot forgets its states of the slot's registers
/// once the stable stage of the new configuration is installed (docs/ring.md §4 "Slots a node
/// left"), in memory and in its store, and a crash before the store forgot them leaves them to
/// be forgotten again; no replica of the slot forgets anything, and the new set serves on.
#[test]
fn ring_a_replica_that_left_a_slot_drops_its_registers_in_the_stable_stage() {
    let m = Move::new();
    let [s1, s2] = m.shared;
    let mut net = m.net();
    let write = run_on(&mut net, s1, 1, &m.key, Command::IncrBy(7), every);
    assert_eq!(write, Ok(Reply::Int(7)));
    assert!(net.stores[&m.leaving].states.contains_key(&m.key));
    install(&mut net, &m.joint());
    let synced = write_through_on(&mut net, m.joining, 2, &m.key, every);
    assert_eq!(synced, Ok(Reply::Bulk("7".into())));
    // In the joint stage the leaving replica is an acceptor still: nothing to drop.
    let leaving = net.replicas.get_mut(&m.leaving).unwrap();
    assert_eq!(leaving.registers_unplaced(), 0);
    assert_eq!(leaving.drop_unplaced(0, 16), (0, 1, 0));
    install(&mut net, &m.stable_new());
    for node in [s1, s2, m.joining] {
        let replica = net.replicas.get_mut(&node).unwrap();
        assert_eq!(replica.registers_unplaced(), 0, "{node:?}");
        assert_eq!(replica.drop_unplaced(0, 16).2, 0, "{node:?}");
    }
    let leaving = net.replicas.get_mut(&m.leaving).unwrap();
    assert_eq!(leaving.registers_unplaced(), 1);
    // A crash before the store forgot it: the state comes back from the store, and the next
    // walk forgets it again.
    let (next, visited, dropped) = leaving.drop_unplaced(0, 16);
    assert_eq!((next, visited, dropped), (0, 1, 1));
    assert!(leaving.acceptor_state(&m.key).is_none());
    let lost = leaving.take_output();
    assert_eq!(lost.persist.removals_len(), 1);
    drop(lost);
    assert!(net.stores[&m.leaving].states.contains_key(&m.key));
    let (next, _, dropped) = net
        .replicas
        .get_mut(&m.leaving)
        .unwrap()
        .drop_unplaced(0, 16);
    assert_eq!(
        (next, dropped),
        (0, 0),
        "the crash is the caller's: memory is forgotten"
    );
    net.crash_and_restart_placed(m.leaving, m.stable_new());
    let leaving = net.replicas.get_mut(&m.leaving).unwrap();
    assert_eq!(leaving.registers_unplaced(), 1);
    assert_eq!(leaving.drop_unplaced(0, 16).2, 1);
    assert_eq!(leaving.registers_dropped(), 1);
    net.collect(m.leaving);
    assert!(!net.stores[&m.leaving].states.contains_key(&m.key));
    // The new set serves the register, and a write reaches no state at the leaving replica.
    assert_eq!(
        run_on(
            &mut net,
            m.joining,
            3,
            &m.key,
            Command::IncrBy(1),
            without(&[s1])
        ),
        Ok(Reply::Int(8))
    );
    assert!(net.replicas[&m.leaving].acceptor_state(&m.key).is_none());
}

#[test]
fn ring_a_write_through_of_a_register_nobody_holds_writes_nothing() {
    let m = Move::new();
    let mut net = m.net();
    install(&mut net, &m.joint());
    let since = net.log.len();
    let synced = write_through_on(&mut net, m.joining, 1, &m.key, every);
    assert_eq!(synced, Ok(Reply::Nil));
    // A read and nothing else: no acceptor voted.
    for node in SIX {
        let voted = net.replicas[&node]
            .acceptor_state(&m.key)
            .is_some_and(|s| s.r_voted != Round::BOTTOM);
        assert!(!voted, "node {node:?} voted");
    }
    assert!(net.log.len() > since);
}

#[test]
fn ring_writes_continue_through_the_joint_stage_and_the_new_set_serves_them() {
    let m = Move::new();
    let [s1, s2] = m.shared;
    let mut net = m.net();
    let incr = |net: &mut Net, node, tag, down: &[NodeId]| {
        run_on(net, node, tag, &m.key, Command::IncrBy(1), without(down))
    };
    assert_eq!(incr(&mut net, m.leaving, 1, &[]), Ok(Reply::Int(1)));
    install(&mut net, &m.joint());
    // In the joint stage any proposer writes, the joining one included; the leaving replica
    // still proposes (for a client whose request it holds) and counts in the old set.
    assert_eq!(incr(&mut net, m.joining, 2, &[]), Ok(Reply::Int(2)));
    assert_eq!(incr(&mut net, m.leaving, 3, &[]), Ok(Reply::Int(3)));
    assert_eq!(incr(&mut net, s2, 4, &[]), Ok(Reply::Int(4)));
    install(&mut net, &m.stable_new());
    let since = net.log.len();
    assert_eq!(incr(&mut net, s1, 5, &[]), Ok(Reply::Int(5)));
    assert_eq!(
        run_on(&mut net, m.joining, 6, &m.key, Command::Get, without(&[s2])),
        Ok(Reply::Bulk("5".into()))
    );
    // In the new stage nothing of the register goes to or comes from the leaving replica.
    assert!(net.log[since..]
        .iter()
        .all(|(from, e)| *from != m.leaving && e.to != m.leaving));
}

#[test]
fn ring_a_new_stage_drops_the_fast_write_round() {
    let m = Move::new();
    let [s1, _] = m.shared;
    let mut net = m.net();
    let incr = |net: &mut Net, tag| run_on(net, s1, tag, &m.key, Command::IncrBy(1), every);
    incr(&mut net, 1).unwrap();
    let since = net.log.len();
    incr(&mut net, 2).unwrap();
    assert!(
        !kinds_since(&net, since).contains(&"PREPARE(write)"),
        "fast"
    );
    install(&mut net, &m.joint());
    let since = net.log.len();
    assert_eq!(incr(&mut net, 3), Ok(Reply::Int(3)));
    // A round pre-acknowledged by the old set is no phase 1 for the joint quorum.
    assert_eq!(kinds_since(&net, since)[0], "PREPARE(write)");
    let since = net.log.len();
    incr(&mut net, 4).unwrap();
    assert!(
        !kinds_since(&net, since).contains(&"PREPARE(write)"),
        "fast again"
    );
}

#[test]
fn ring_a_crash_in_the_joint_stage_needs_a_majority_of_each_set() {
    let m = Move::new();
    let [s1, s2] = m.shared;
    let cases: [(&[NodeId], bool); 6] = [
        (&[m.leaving], true),
        (&[m.joining], true),
        // The shared replicas are a majority of both sets.
        (&[m.leaving, m.joining], true),
        (&[s2], true),
        // A majority of the old set (leaving, s1) without one of the new set.
        (&[s2, m.joining], false),
        // A majority of the new set (s1, joining) without one of the old set.
        (&[s2, m.leaving], false),
    ];
    for (tag, (down, decides)) in (1..).zip(cases) {
        let mut net = m.net();
        install(&mut net, &m.joint());
        let write = run_on(&mut net, s1, tag, &m.key, Command::IncrBy(1), without(down));
        assert_eq!(write.is_ok(), decides, "down: {down:?}: {write:?}");
    }
}

// ----- the stage fence: an acceptor decides only on messages of the stage it installed -----

/// A write PREPARE about `key` from `from`'s proposer, sent in `stage`.
fn prepare_in(key: &Key, from: NodeId, seq: u64, stage: StageId) -> Message {
    Message::Prepare {
        key: key.clone(),
        kind: PrepareKind::Write,
        attempt: AttemptId {
            proposer: ProposerId {
                node: from,
                incarnation: 1,
            },
            seq,
        },
        known_voted: Round::BOTTOM,
        stage,
    }
}

#[test]
fn ring_an_acceptor_that_installed_joint_refuses_the_older_stage_and_waits_for_a_newer_one() {
    let m = Move::new();
    let [s1, s2] = m.shared;
    let mut net = m.net();
    let (joint, stable_old) = (m.joint(), net.replicas[&s1].stage());
    net.replicas
        .get_mut(&s1)
        .unwrap()
        .install_placement(joint.clone());
    let since = net.log.len();
    // An older stage: refused with STALE naming the acceptor's stage, nothing stored.
    let old = prepare_in(&m.key, m.leaving, 1, stable_old);
    let s1_replica = net.replicas.get_mut(&s1).unwrap();
    s1_replica.handle_message(0, m.leaving, &old);
    net.collect(s1);
    assert_eq!(
        net.log[since..],
        [(
            s1,
            Envelope {
                to: m.leaving,
                message: Message::Stale {
                    key: m.key.clone(),
                    stage: joint.stage_id(),
                },
            }
        )]
    );
    assert!(net.replicas[&s1].acceptor_state(&m.key).is_none());
    assert_eq!(net.stores[&s1].writes, 0);
    // A newer stage at an acceptor still in the old one: no answer, and its caller is told.
    let since = net.log.len();
    let newer = prepare_in(&m.key, s1, 2, joint.stage_id());
    net.replicas
        .get_mut(&s2)
        .unwrap()
        .handle_message(0, s1, &newer);
    net.collect(s2);
    assert_eq!(net.log.len(), since, "held back");
    assert_eq!(net.newer_stages, [(s2, joint.stage())]);
    assert_eq!(net.stores[&s2].writes, 0);
    // Once its caller installed that stage, the same message is answered.
    net.replicas
        .get_mut(&s2)
        .unwrap()
        .install_placement(joint.clone());
    net.replicas
        .get_mut(&s2)
        .unwrap()
        .handle_message(0, s1, &newer);
    net.collect(s2);
    assert_eq!(kinds_since(&net, since), ["ACK"]);
    // The same acceptor now refuses the stage it left.
    let since = net.log.len();
    net.replicas.get_mut(&s2).unwrap().handle_message(
        0,
        m.leaving,
        &prepare_in(&m.key, m.leaving, 3, stable_old),
    );
    net.collect(s2);
    assert_eq!(kinds_since(&net, since), ["STALE"]);
}

#[test]
fn ring_a_stale_stage_proposer_is_fenced_and_retries_its_request_to_success() {
    let m = Move::new();
    let [s1, s2] = m.shared;
    let mut net = m.net();
    let incr = |net: &mut Net, node, tag| {
        net.command_on(node, tag, m.key.clone(), Command::IncrBy(1));
        net.run(every);
    };
    // The leaving replica writes twice: the second write is fast, and it holds the next round.
    incr(&mut net, m.leaving, 1);
    incr(&mut net, m.leaving, 2);
    assert_eq!(ok(net.reply(2)), Reply::Int(2));
    // Every node but the leaving one installs the joint stage.
    let joint = m.joint();
    for node in SIX.into_iter().filter(|n| *n != m.leaving) {
        net.replicas
            .get_mut(&node)
            .unwrap()
            .install_placement(joint.clone());
    }
    // Its fast write goes out in the old stage: the shared replicas refuse it, only its own
    // acceptor votes, nothing is decided, and its caller learns of the joint stage.
    let since = net.log.len();
    incr(&mut net, m.leaving, 3);
    assert!(net.reply(3).is_none());
    assert_eq!(
        kinds_since(&net, since)
            .iter()
            .filter(|k| **k == "STALE")
            .count(),
        2
    );
    assert!(net.replicas[&m.leaving].stats().stale_stage > 0);
    assert!(net.newer_stages.contains(&(m.leaving, joint.stage())));
    for shared in [s1, s2] {
        assert_eq!(net.state(shared).value, net.state(s1).value);
        assert_eq!(
            net.replicas[&shared].acceptor_state(&m.key).unwrap().value,
            int(2)
        );
    }
    // Retrying in the old stage is refused again: the fence holds until the node acts.
    net.fire_timer(m.leaving);
    net.run(every);
    assert!(net.reply(3).is_none());
    // The node installs the stage its output named; the same request, retried, succeeds once.
    net.replicas
        .get_mut(&m.leaving)
        .unwrap()
        .install_placement(joint.clone());
    net.drive(m.leaving, every, |net| net.reply(3).is_some());
    assert_eq!(ok(net.reply(3)), Reply::Int(3));
    assert_eq!(
        net.replies
            .iter()
            .filter(|(_, r)| r.client == ClientTag(3))
            .count(),
        1,
        "answered once"
    );
    // Applied once: the new set, without the leaving replica, reads 3 in the next stage.
    install(&mut net, &m.stable_new());
    assert_eq!(
        run_on(
            &mut net,
            m.joining,
            4,
            &m.key,
            Command::Get,
            without(&[m.leaving])
        ),
        Ok(Reply::Bulk("3".into()))
    );
}

/// A node two stages behind (docs/ring.md §4, "Why it is safe": `Stable(e)` and `Stable(e+1)`
/// never decide side by side). [`Move`]'s key holds 5, written by a shared replica in
/// `Stable(e)`; every node but the leaving one installs `Joint(e+1)`, the mover writes the key
/// through to the new set (the leaving replica's acceptor misses it), and every node but the
/// leaving one installs `Stable(e+1)`. The leaving node, still in `Stable(e)` and cut off from
/// `s2`, then increments the key: it asks the old replicas, itself, `s1` and `s2`, of which
/// `s1` answers. With the fence `s1` refuses the old stage (STALE), nothing is decided until
/// the leaving node installs `Stable(e+1)`, and its retry then decides with the new set.
/// Without it (`accept_any_stage`) `s1`, a replica in both configurations, votes: `{leaving,
/// s1}` is a majority of the old set, so the increment is chosen and acknowledged, though no
/// majority of the new set holds it, and a read through `s2` and the joining replica (`s1`
/// down), a consistent quorum of `Stable(e+1)`, misses it. Returns the increment's answer
/// while the node lagged (`None` if it had none) and after, and what the read returns.
fn a_node_two_stages_behind_increments(
    accept_any_stage: bool,
) -> (Option<Result<Reply, ProposeError>>, Reply, Reply) {
    let m = Move::new();
    let [s1, s2] = m.shared;
    let lagging = m.leaving;
    let mut net = m.net_with(|config| config.bugs.accept_any_stage = accept_any_stage);
    assert_eq!(
        run_on(&mut net, s1, 1, &m.key, Command::IncrBy(5), every),
        Ok(Reply::Int(5))
    );
    install_except(&mut net, &m.joint(), &[lagging]);
    let synced = write_through_on(&mut net, m.joining, 2, &m.key, without(&[lagging]));
    assert_eq!(synced, Ok(Reply::Bulk("5".into())));
    install_except(&mut net, &m.stable_new(), &[lagging]);
    let stable_old = Placement::new(&m.old, &SIX).unwrap().stage_id();
    assert_eq!(
        net.replicas[&lagging].stage(),
        stable_old,
        "two stages behind"
    );
    let cut = move |from: NodeId, e: &Envelope| {
        !((from, e.to) == (lagging, s2) || (from, e.to) == (s2, lagging))
    };
    net.command_on(lagging, 3, m.key.clone(), Command::IncrBy(1));
    net.run(cut);
    for _ in 0..5 {
        if net.reply(3).is_some() {
            break;
        }
        net.fire_timer(lagging);
        net.run(cut);
    }
    let lagged = net.reply(3).map(|r| r.result.clone());
    if lagged.is_none() {
        // Its node installs the stage the refusals named.
        (net.replicas.get_mut(&lagging).unwrap()).install_placement(m.stable_new());
    }
    let write = answer_of(&mut net, lagging, 3, cut).unwrap();
    let read = run_on(&mut net, m.joining, 4, &m.key, Command::Get, without(&[s1])).unwrap();
    (lagged, write, read)
}

/// With the fence the node two stages behind decides nothing until it catches up, and then
/// its increment is read by the new set.
#[test]
fn ring_a_node_two_stages_behind_is_fenced_until_it_installs_the_stable_stage() {
    let (lagged, write, read) = a_node_two_stages_behind_increments(false);
    assert_eq!(lagged, None);
    assert_eq!(write, Reply::Int(6));
    assert_eq!(read, Reply::Bulk("6".into()));
}

/// Without it (the mutation `InjectedBugs::accept_any_stage`, "a configuration change applied
/// without its fence") the node decides with a majority of the old set, which a majority of
/// the new one does not meet: its acknowledged increment is lost.
#[test]
fn ring_without_the_fence_a_node_two_stages_behind_loses_an_acknowledged_write() {
    let (lagged, write, read) = a_node_two_stages_behind_increments(true);
    assert_eq!(lagged, Some(Ok(Reply::Int(6))));
    assert_eq!(write, Reply::Int(6));
    assert_eq!(read, Reply::Bulk("5".into()));
}

#[test]
fn ring_a_replica_restarted_in_the_joint_stage_with_the_old_placement_is_fenced_until_it_installs_the_joint_one(
) {
    let m = Move::new();
    let [s1, s2] = m.shared;
    let mut net = m.net();
    assert_eq!(
        run_on(&mut net, s1, 1, &m.key, Command::IncrBy(5), every),
        Ok(Reply::Int(5))
    );
    install(&mut net, &m.joint());
    // s2 crashes and restarts from its store with the placement it was started with, the old
    // stage's, as a node restarted from its configuration file would be.
    let stable_old = Placement::new(&m.old, &SIX).unwrap();
    let store = &net.stores[&s2];
    let recovered: Vec<(Key, AcceptorState, Location)> = (store.states.iter())
        .map(|(k, v)| (k.clone(), v.clone(), Location(store.locations[k])))
        .collect();
    let mut config = ProposerConfig::new(SIX.to_vec());
    config.straggler_wait_ms = 0;
    config.placement = Some(stable_old);
    net.replicas
        .insert(s2, Replica::new_located(s2, 2, config, 2, recovered));
    // With the leaving replica down, a joint quorum needs s2 (the old set's majority is s1
    // and s2): s2 holds the joint stage's messages back, so nothing is decided...
    net.command_on(s1, 2, m.key.clone(), Command::IncrBy(1));
    net.run(without(&[m.leaving]));
    assert!(net.reply(2).is_none());
    assert!(net.newer_stages.contains(&(s2, m.joint().stage())));
    // ... and a write through s2 in its old stage is refused by every other replica.
    net.command_on(s2, 3, m.key.clone(), Command::IncrBy(10));
    net.run(without(&[m.leaving]));
    assert!(net.reply(3).is_none());
    // Once s2 installed the joint stage, both writes are decided, each once.
    net.replicas
        .get_mut(&s2)
        .unwrap()
        .install_placement(m.joint());
    net.drive(s1, without(&[m.leaving]), |net| net.reply(2).is_some());
    net.drive(s2, without(&[m.leaving]), |net| net.reply(3).is_some());
    assert!(net.reply(2).unwrap().result.is_ok() && net.reply(3).unwrap().result.is_ok());
    assert_eq!(
        run_on(
            &mut net,
            m.joining,
            4,
            &m.key,
            Command::Get,
            without(&[m.leaving])
        ),
        Ok(Reply::Bulk("16".into()))
    );
}

#[test]
fn ring_a_replica_restarted_awaiting_the_stage_answers_nothing_until_it_installs_one() {
    let m = Move::new();
    let [s1, s2] = m.shared;
    let mut net = m.net();
    install(&mut net, &m.joint());
    // s2 restarts with the placement its peer list derives, the old stage's; a late node still
    // in that stage (the leaving replica) asks it. Started as a node starts its data shards,
    // awaiting the ring's stage, it answers nothing and stores nothing...
    let stable_old = Placement::new(&m.old, &SIX).unwrap();
    let restarted = |awaiting: bool| {
        let mut config = ProposerConfig::new(SIX.to_vec());
        config.placement = Some(stable_old.clone());
        let replica = Replica::new(s2, 2, config, 2, Vec::<(Key, AcceptorState)>::new());
        if awaiting {
            replica.awaiting_stage()
        } else {
            replica
        }
    };
    let late = prepare_in(&m.key, m.leaving, 1, stable_old.stage_id());
    net.replicas.insert(s2, restarted(true));
    assert!(net.replicas[&s2].is_awaiting_stage());
    let since = net.log.len();
    net.replicas
        .get_mut(&s2)
        .unwrap()
        .handle_message(0, m.leaving, &late);
    net.collect(s2);
    assert_eq!(kinds_since(&net, since), Vec::<&str>::new(), "no answer");
    assert!(net.replicas[&s2].acceptor_state(&m.key).is_none());
    // ... while one started without waiting would promise in the stage the ring left, and with
    // the late node it would make a majority of the old set.
    let mut other = m.net();
    install(&mut other, &m.joint());
    other.replicas.insert(s2, restarted(false));
    let other_since = other.log.len();
    other
        .replicas
        .get_mut(&s2)
        .unwrap()
        .handle_message(0, m.leaving, &late);
    other.collect(s2);
    assert_eq!(kinds_since(&other, other_since), ["ACK"]);
    // Awaiting, a message of a later stage is held back too, and its caller told of it.
    let since = net.log.len();
    let newer = prepare_in(&m.key, s1, 2, m.joint().stage_id());
    net.replicas
        .get_mut(&s2)
        .unwrap()
        .handle_message(0, s1, &newer);
    net.collect(s2);
    assert_eq!(kinds_since(&net, since), Vec::<&str>::new());
    assert!(net.newer_stages.contains(&(s2, m.joint().stage())));
    // Once its node read the ring's stage and installed it, the fence decides as usual: the
    // late node is refused, the joint stage answered.
    net.replicas
        .get_mut(&s2)
        .unwrap()
        .install_placement(m.joint());
    assert!(!net.replicas[&s2].is_awaiting_stage());
    let replica = net.replicas.get_mut(&s2).unwrap();
    replica.handle_message(0, m.leaving, &late);
    replica.handle_message(0, s1, &newer);
    net.collect(s2);
    assert_eq!(kinds_since(&net, since), ["STALE", "ACK"]);
}

// ----- dead registers across changes: a tombstone is never moved, new acceptors start above it -----

/// The five nodes of [`RING`] and two that replace two of them in turn.
const SEVEN: [NodeId; 7] = [
    NodeId(1),
    NodeId(2),
    NodeId(3),
    NodeId(4),
    NodeId(5),
    NodeId(6),
    NodeId(7),
];

/// A register whose three replicas are replaced one after the other: node 6 takes the first
/// (`Stable(1)` → `Stable(2)`), node 7 the second (→ `Stable(3)`), the third stays.
struct TwoMoves {
    configs: [Configuration; 3],
    key: Key,
    old: [NodeId; 3],
}

impl TwoMoves {
    fn new() -> TwoMoves {
        let first = ring_configuration();
        let key = Key::new("ring-0");
        let old = replicas_of(&key);
        let node = |n: NodeId| placement::NodeId(n.0);
        let second = first
            .with_node_replaced(node(old[0]), node(NodeId(6)))
            .unwrap();
        let third = second
            .with_node_replaced(node(old[1]), node(NodeId(7)))
            .unwrap();
        let mut last: Vec<NodeId> = (third.replicas(key_slot(key.as_bytes())).nodes().iter())
            .map(|n| NodeId(n.0))
            .collect();
        last.sort();
        let mut expected = vec![old[2], NodeId(6), NodeId(7)];
        expected.sort();
        assert_eq!(
            last, expected,
            "two of the key's replicas replaced, one staying"
        );
        TwoMoves {
            configs: [first, second, third],
            key,
            old: [old[0], old[1], old[2]],
        }
    }

    fn net(&self) -> Net {
        self.net_with(|_| {})
    }

    /// [`TwoMoves::net`] with each proposer's configuration changed by `configure` too.
    fn net_with(&self, configure: impl Fn(&mut ProposerConfig)) -> Net {
        let placement = Placement::new(&self.configs[0], &SEVEN).unwrap();
        Net::with_nodes(
            &SEVEN,
            |config| {
                config.placement = Some(placement.clone());
                configure(config);
            },
            BTreeMap::new(),
        )
    }

    /// Change `to` (1 or 2): every replica installs its joint stage, then its stable one. The
    /// key is dead, so a node's mover (which writes the live keys of the moving slots through)
    /// has nothing of it to move. In the joint stage the new replica of the key's slot answers
    /// nothing about it until, as its node does, the test raises its round floor above the
    /// highest round of the replicas that stay (a majority of the old ones), each taken once
    /// it installed the joint stage; unless `floor` is false, the hole the floor closes.
    fn change(&self, net: &mut Net, to: usize, floor: bool) {
        let (old, new) = (&self.configs[to - 1], &self.configs[to]);
        let joint = Placement::joint(old, new, &SEVEN).unwrap();
        install_only(net, &joint);
        let slot = key_slot(self.key.as_bytes());
        let replicas = |config: &Configuration| -> Vec<NodeId> {
            (config.replicas(slot).nodes().iter())
                .map(|n| NodeId(n.0))
                .collect()
        };
        let (before, after) = (replicas(old), replicas(new));
        let gaining: Vec<NodeId> = (after.iter())
            .filter(|n| !before.contains(n))
            .copied()
            .collect();
        let staying: Vec<NodeId> = (before.iter())
            .filter(|n| after.contains(n))
            .copied()
            .collect();
        assert_eq!((gaining.len(), staying.len()), (1, 2));
        for node in SEVEN {
            assert_eq!(
                net.replicas[&node].awaits_gained_floor(),
                gaining.contains(&node),
                "{node:?}"
            );
        }
        if floor {
            let above = (staying.iter())
                .map(|n| net.replicas[n].high_round())
                .max()
                .unwrap();
            let stage = joint.stage_id();
            for node in &gaining {
                let replica = net.replicas.get_mut(node).unwrap();
                assert!(replica.raise_floor_for_gained_slots(stage, above));
                assert!(replica.round_floor().n > above);
                net.collect(*node);
                assert!(!net.replicas[node].awaits_gained_floor());
                assert_eq!(net.stores[node].round_floor.n, above + 1, "durable");
            }
        } else {
            // Answering from round 1 on, as before the floor was built.
            for node in &gaining {
                let replica = net.replicas.get_mut(node).unwrap();
                assert!(replica.raise_floor_for_gained_slots(joint.stage_id(), 0));
                net.collect(*node);
            }
        }
        install(net, &Placement::new(new, &SEVEN).unwrap());
    }
}

/// Deletes [`TwoMoves`]'s key in a high round at its three replicas, passes it through both
/// changes, then writes it through the two new replicas with the staying one down and reads it
/// through the staying one and a new one: what that read returns.
fn written_after_two_replacements(floor: bool) -> Reply {
    let t = TwoMoves::new();
    let [_, _, staying] = t.old;
    let mut net = t.net();
    // Rounds climb with each write; the deletion's is the highest, held by all three.
    for (tag, value) in (1..=5).zip(["a", "b", "c", "d", "e"]) {
        assert_eq!(
            run_on(&mut net, staying, tag, &t.key, set(value), every),
            Ok(Reply::Ok)
        );
    }
    assert_eq!(
        run_on(&mut net, staying, 6, &t.key, Command::Del, every),
        Ok(Reply::Int(1))
    );
    let tombstone = net.replicas[&staying].acceptor_state(&t.key).unwrap();
    assert!(tombstone.value.data == Data::Absent && tombstone.r_voted.n > 1);
    t.change(&mut net, 1, floor);
    t.change(&mut net, 2, floor);
    // The two new replicas, with the staying one down, choose a write...
    assert_eq!(
        run_on(
            &mut net,
            NodeId(6),
            7,
            &t.key,
            set("new"),
            without(&[staying])
        ),
        Ok(Reply::Ok)
    );
    // ... which a read through the staying replica and one new one must return.
    run_on(
        &mut net,
        staying,
        8,
        &t.key,
        Command::Get,
        without(&[NodeId(7)]),
    )
    .unwrap()
}

/// docs/ring.md §4 "Dead registers": a key deleted in a high round at its three replicas, two
/// of which are then replaced one at a time (no change writes a dead register through).
#[test]
fn ring_a_write_after_two_replacements_is_not_hidden_by_an_older_tombstone() {
    assert_eq!(
        written_after_two_replacements(true),
        Reply::Bulk("new".into())
    );
}

/// The same with the new acceptors starting at round 1, as before the floor was built (the
/// mutation `InjectedBugs::ignore_gained_floor` leaves them there): the write is chosen in a round below the tombstone the staying replica holds, and
/// the read shows the tombstone.
#[test]
fn ring_without_the_gained_floor_a_tombstone_hides_a_later_write() {
    assert_eq!(written_after_two_replacements(false), Reply::Nil);
}

/// docs/ring.md §4 "Dead registers", "A full store": the joining acceptor's store has no room
/// for its round floor. The raise does not happen: the acceptor goes on answering nothing about
/// the slot it gains and says it still awaits the floor (its node's mover reports nothing done
/// then), and its store holds no floor. Once space returns, the raise asked again is durable
/// and the acceptor answers for the slot, from the batch after the floor's on.
#[test]
fn ring_a_gained_floor_the_store_refuses_is_not_raised_until_it_is_durable() {
    let m = Move::new();
    let [s1, s2] = m.shared;
    let mut net = m.net();
    for tag in 1..=3 {
        assert_eq!(
            run_on(&mut net, s1, tag, &m.key, Command::IncrBy(1), every),
            Ok(Reply::Int(tag as i64))
        );
    }
    let joint = m.joint();
    install_only(&mut net, &joint);
    let g = m.joining;
    assert!(net.replicas[&g].awaits_gained_floor());
    let above = ([m.leaving, s1, s2].iter())
        .map(|n| net.replicas[n].high_round())
        .max()
        .unwrap();
    assert!(above > 1);
    let stage = joint.stage_id();
    let prepare = |seq| prepare_in(&m.key, s1, seq, stage);
    // A full store: the floor's write is refused, so the raise is not acknowledged.
    net.stores.get_mut(&g).unwrap().full = true;
    for attempt in 0..3 {
        let replica = net.replicas.get_mut(&g).unwrap();
        assert!(replica.raise_floor_for_gained_slots(stage, above));
        net.collect(g);
        assert!(
            net.replicas[&g].awaits_gained_floor(),
            "attempt {attempt}: raised though the store refused the floor"
        );
        assert_eq!(net.stores[&g].round_floor, Round::BOTTOM);
        let since = net.log.len();
        (net.replicas.get_mut(&g).unwrap()).handle_message(0, s1, &prepare(10 + attempt));
        net.collect(g);
        assert_eq!(kinds_since(&net, since), Vec::<&str>::new(), "held back");
    }
    // Space returns: the raise asked again is durable, and only then answered for.
    net.stores.get_mut(&g).unwrap().full = false;
    let since = net.log.len();
    let replica = net.replicas.get_mut(&g).unwrap();
    assert!(replica.raise_floor_for_gained_slots(stage, above));
    replica.handle_message(0, s1, &prepare(20));
    net.collect(g);
    assert_eq!(
        kinds_since(&net, since),
        Vec::<&str>::new(),
        "no reply shares the floor's batch"
    );
    assert!(!net.replicas[&g].awaits_gained_floor());
    assert_eq!(net.stores[&g].round_floor.n, above + 1, "durable");
    (net.replicas.get_mut(&g).unwrap()).handle_message(0, s1, &prepare(21));
    net.collect(g);
    assert_eq!(kinds_since(&net, since).len(), 1, "answered once raised");
}

/// The keys of `slot` the node's data mover (node/src/ring_mover.rs) lists at `sources`, a
/// majority of the slot's old replicas: those some source holds a vote of
/// (`AcceptorState::holds_vote`, dead registers included), or if `live_only`, those some
/// source shows live at `now_ms` (the mover before chaos seed 51).
fn listed_by_the_mover(
    net: &Net,
    sources: &[NodeId],
    slot: placement::Slot,
    live_only: bool,
    now_ms: u64,
) -> Vec<Key> {
    let mut keys: Vec<Key> = Vec::new();
    for source in sources {
        for (key, state) in net.replicas[source].acceptor_states() {
            let listed = if live_only {
                state.value.is_live(now_ms)
            } else {
                state.holds_vote()
            };
            if key_slot(key.as_bytes()) == slot && listed && !keys.contains(key) {
                keys.push(key.clone());
            }
        }
    }
    keys
}

/// Chaos seed 51 (docs/results/chaos-ring-overlap-2026-11-27): a key's old replicas
/// `{o0, o1, s}` all hold "x" (no time to live); with `s` down, "y" with a time to live is
/// chosen by `o0` and `o1`, then expires (a dead register). One change replaces `o0` by node 6;
/// its mover lists the slot at `{o0, o1}` (a majority of the old replicas, `s` left out as a
/// node whose link comes up last) and writes through what it lists. Then a read through a
/// quorum `{6, s}` of the new replicas: what it answers. `live_only` as in
/// [`listed_by_the_mover`].
fn read_after_a_dead_register_moved(live_only: bool) -> Reply {
    let t = TwoMoves::new();
    let [o0, o1, s] = t.old;
    let mut net = t.net();
    assert_eq!(
        run_on(&mut net, o0, 1, &t.key, set("x"), every),
        Ok(Reply::Ok)
    );
    let expiring = Command::Set(SetArgs {
        value: "y".into(),
        condition: Condition::Always,
        get: false,
        expiry: Expiry::AfterMs(100),
    });
    assert_eq!(
        run_on(&mut net, o0, 2, &t.key, expiring, without(&[s])),
        Ok(Reply::Ok)
    );
    let stale = net.replicas[&s].acceptor_state(&t.key).unwrap();
    assert!(stale.value.is_live(net.now_ms), "s kept x, live");
    net.now_ms += 1_000;
    let (old, new) = (&t.configs[0], &t.configs[1]);
    install(&mut net, &Placement::joint(old, new, &SEVEN).unwrap());
    let slot = key_slot(t.key.as_bytes());
    let listed = listed_by_the_mover(&net, &[o0, o1], slot, live_only, net.now_ms);
    for (tag, key) in (3..).zip(&listed) {
        let synced = write_through_on(&mut net, NodeId(6), tag, key, every);
        assert!(synced.is_ok(), "{synced:?}");
    }
    install(&mut net, &Placement::new(new, &SEVEN).unwrap());
    run_on(&mut net, s, 100, &t.key, Command::Get, without(&[o1])).unwrap()
}

/// The expired value stays expired: the mover writes the dead register through, so node 6
/// holds its state above `s`'s older "x".
#[test]
fn ring_a_dead_register_is_moved_so_an_older_value_under_it_stays_overwritten() {
    assert_eq!(read_after_a_dead_register_moved(false), Reply::Nil);
}

/// The same with the mover listing only live keys, as before: nothing is listed at `{o0, o1}`,
/// node 6 holds only the round floor, and the read through `{6, s}` chooses `s`'s "x" again,
/// a value long overwritten (what chaos seed 51 showed).
#[test]
fn ring_a_mover_listing_only_live_keys_lets_an_overwritten_value_come_back() {
    assert_eq!(
        read_after_a_dead_register_moved(true),
        Reply::Bulk("x".into())
    );
}

// ----- a phase across an install: replies count only toward the quorums of their stage -----

/// A key whose replicas `{o0, o1, s}` all hold "x"; one change replaces `o0` and `o1` by 6 and 7
/// at once. A read through `s` in the joint stage hears `s` ("x") and the two new acceptors
/// (⊥, before the mover wrote the key through), not the leaving two, so it cannot decide.
/// The sync then writes "x" through (6 and 7 hold it), every replica installs the stable
/// stage, and the read's proposer, `s`, goes on: what the read answers. The two ⊥s it heard in
/// the joint stage make a quorum of the new configuration, `{s, 6, 7}`.
fn read_across_the_stable_install(count_across: bool) -> Reply {
    let t = TwoMoves::new();
    let [o0, o1, s] = t.old;
    let (first, last) = (&t.configs[0], &t.configs[2]);
    let mut net = t.net_with(|config| {
        config.thrifty_reads = false;
        config.bugs.count_replies_across_stages = count_across;
    });
    assert_eq!(
        run_on(&mut net, o0, 1, &t.key, set("x"), every),
        Ok(Reply::Ok)
    );
    install(&mut net, &Placement::joint(first, last, &SEVEN).unwrap());
    let leaving = [o0, o1];
    let mut new_replicas: Vec<NodeId> = (last.replicas(key_slot(t.key.as_bytes())).nodes())
        .iter()
        .map(|n| NodeId(n.0))
        .filter(|n| *n != s)
        .collect();
    new_replicas.sort();
    assert_eq!(new_replicas, [NodeId(6), NodeId(7)]);
    net.command_on(s, 2, t.key.clone(), Command::Get);
    net.run(without(&leaving));
    assert!(net.reply(2).is_none(), "no joint quorum answered");
    let synced = write_through_on(&mut net, NodeId(6), 3, &t.key, every);
    assert!(synced.is_ok(), "{synced:?}");
    install(&mut net, &Placement::new(last, &SEVEN).unwrap());
    answer_of(&mut net, s, 2, every).expect("an answer")
}

/// The read retries in the stable stage and sees "x" (6 and 7 hold it since the sync).
#[test]
fn ring_a_read_under_way_at_an_install_counts_no_reply_of_the_stage_before() {
    assert_eq!(
        read_across_the_stable_install(false),
        Reply::Bulk("x".into())
    );
}

/// The same with the replies kept across the install (the mutation
/// `InjectedBugs::count_replies_across_stages`, the engine before this was fixed): the two ⊥s
/// heard in the joint stage are a consistent quorum of the stable one, and an acknowledged
/// value reads as absent (what ring seed 1707 of the whole-node simulation showed).
#[test]
fn ring_replies_counted_across_an_install_show_a_written_key_absent() {
    assert_eq!(read_across_the_stable_install(true), Reply::Nil);
}
