//! Removing dead registers through three replicas' shard runtimes and slot stores, asserted by
//! counts (registers held in memory and in the store, slots free), never by timing: the
//! replicas exchange messages in a loop until nothing is in flight.
use std::collections::VecDeque;

use logless_commands::command::{Command, Condition, Expiry, Reply, SetArgs};
use logless_node::config::NodeConfig;
use logless_node::store::{store_options, ShardStore};
use logless_node::turn::{CommandResult, Outlet, ShardCore, Sweep};
use logless_rmw::ids::{Key, NodeId, Round};
use logless_rmw::message::Message;
use logless_rmw::replica::Replica;
use logless_storage::Durability;

const NODES: [NodeId; 3] = [NodeId(1), NodeId(2), NodeId(3)];

/// What one turn produced: messages by destination and answers by tag.
#[derive(Default)]
struct Collect {
    sent: Vec<(NodeId, Vec<Message>)>,
    answers: Vec<(u64, CommandResult)>,
}

impl Outlet<u64> for Collect {
    fn send(&mut self, to: NodeId, messages: Vec<Message>) {
        self.sent.push((to, messages));
    }
    fn answer(&mut self, reply: u64, result: CommandResult) {
        self.answers.push((reply, result));
    }
    fn mono_us(&self) -> u64 {
        0
    }
}

struct Cluster {
    dirs: Vec<tempfile::TempDir>,
    shards: Vec<ShardCore<u64>>,
    in_flight: VecDeque<(NodeId, NodeId, Vec<Message>)>,
    answers: Vec<(u64, CommandResult)>,
    now_ms: u64,
    sweep: Option<Sweep>,
    removal_grace_ms: u64,
}

fn index(node: NodeId) -> usize {
    usize::from(node.0 - 1)
}

impl Cluster {
    /// Three replicas with removal on, whose shards sweep with `sweep` (`None`: removal only
    /// when a test asks), removing expired values at once.
    fn new(sweep: Option<Sweep>) -> Cluster {
        Cluster::with_grace(sweep, 0)
    }

    /// [`Cluster::new`] removing expired values once expired for `removal_grace_ms`.
    fn with_grace(sweep: Option<Sweep>, removal_grace_ms: u64) -> Cluster {
        let dirs: Vec<_> = NODES.iter().map(|_| tempfile::tempdir().unwrap()).collect();
        let mut cluster = Cluster {
            shards: Vec::new(),
            dirs,
            in_flight: VecDeque::new(),
            answers: Vec::new(),
            now_ms: 1,
            sweep,
            removal_grace_ms,
        };
        for node in NODES {
            cluster.start(node, 1);
        }
        cluster
    }

    /// Opens `node`'s store and starts its shard in `incarnation`.
    fn start(&mut self, node: NodeId, incarnation: u32) {
        if self.shards.len() > index(node) {
            // The crashed process's store closes (unlocks) with it.
            self.shards.remove(index(node));
        }
        let config = NodeConfig {
            remove_dead_registers: Some(true),
            removal_grace_ms: self.removal_grace_ms,
            ..NodeConfig::default()
        };
        let options = store_options(Durability::Mmap, 1024);
        let (store, states) = ShardStore::open(self.dirs[index(node)].path(), 0, options).unwrap();
        let replica = Replica::new(
            node,
            incarnation,
            config.proposer_config(NODES.to_vec()),
            u64::from(node.0),
            states,
        )
        .with_round_floor(store.round_floor());
        let mut shard = ShardCore::new(replica, store);
        shard.set_sweep(self.sweep);
        self.shards.insert(index(node), shard);
    }

    /// Ends a turn of `node` and queues what it sent.
    fn finish(&mut self, node: NodeId) {
        let mut out = Collect::default();
        self.shards[index(node)].finish_turn(&mut out).unwrap();
        for (to, messages) in out.sent {
            self.in_flight.push_back((node, to, messages));
        }
        self.answers.extend(out.answers);
    }

    /// Runs turns until nothing is in flight (messages to itself included).
    fn settle(&mut self) {
        for _ in 0..10_000 {
            for node in NODES {
                self.shards[index(node)].start_turn(self.now_ms, self.now_ms * 1000);
                self.finish(node);
            }
            let Some((from, to, messages)) = self.in_flight.pop_front() else {
                if NODES
                    .iter()
                    .all(|n| !self.shards[index(*n)].has_local_work())
                {
                    return;
                }
                continue;
            };
            let shard = &mut self.shards[index(to)];
            shard.start_turn(self.now_ms, self.now_ms * 1000);
            shard.receive(from, messages);
            self.finish(to);
        }
        panic!("the cluster does not settle");
    }

    fn command(&mut self, node: NodeId, tag: u64, key: &str, command: Command) -> Reply {
        let shard = &mut self.shards[index(node)];
        shard.start_turn(self.now_ms, self.now_ms * 1000);
        shard.submit(Key::new(key.to_string()), command, tag);
        self.finish(node);
        self.settle();
        let (_, result) = self
            .answers
            .iter()
            .find(|(t, _)| *t == tag)
            .expect("an answer")
            .clone();
        result.expect("applied")
    }

    fn remove_dead(&mut self, node: NodeId) -> usize {
        let shard = &mut self.shards[index(node)];
        shard.start_turn(self.now_ms, self.now_ms * 1000);
        let started = shard.remove_dead_registers(usize::MAX);
        self.finish(node);
        self.settle();
        started
    }

    /// Registers held by every replica: in memory and in its store.
    fn held(&self) -> Vec<(usize, usize)> {
        self.shards
            .iter()
            .map(|s| (s.registers_held(), s.store().registers()))
            .collect()
    }

    fn free_slots(&self) -> Vec<usize> {
        self.shards.iter().map(|s| s.store().free_slots()).collect()
    }
}

fn set(value: &str, expiry: Expiry) -> Command {
    Command::Set(SetArgs {
        value: value.to_string().into(),
        condition: Condition::Always,
        get: false,
        expiry,
    })
}

#[test]
fn deleted_and_expired_registers_leave_every_replica_and_free_their_slots() {
    let mut cluster = Cluster::new(None);
    for i in 0..10 {
        cluster.command(NodeId(1), i, &format!("del:{i}"), set("v", Expiry::Clear));
        cluster.command(
            NodeId(1),
            100 + i,
            &format!("ttl:{i}"),
            set("v", Expiry::AfterMs(50)),
        );
        cluster.command(
            NodeId(1),
            200 + i,
            &format!("live:{i}"),
            set("v", Expiry::Clear),
        );
    }
    for i in 0..10 {
        assert_eq!(
            cluster.command(NodeId(1), 300 + i, &format!("del:{i}"), Command::Del),
            Reply::Int(1)
        );
    }
    assert_eq!(cluster.held(), vec![(30, 30); 3]);
    // A replica removes only what it wrote last: node 2 finds nothing.
    assert_eq!(cluster.remove_dead(NodeId(2)), 0);
    // The deleted ones go; the expiring ones are still alive. (The first removal also stores
    // the round floor, whose longer key takes a slot of a larger class.)
    assert_eq!(cluster.remove_dead(NodeId(1)), 10);
    assert_eq!(cluster.held(), vec![(20, 20); 3]);
    let free_before = cluster.free_slots();
    cluster.now_ms += 50;
    assert_eq!(cluster.remove_dead(NodeId(1)), 10);
    assert_eq!(cluster.held(), vec![(10, 10); 3]);
    for (before, after) in free_before.iter().zip(cluster.free_slots()) {
        assert_eq!(
            after,
            before + 10,
            "every removed register gave its slot back"
        );
    }
    // Nothing left to remove; the live keys stay, the removed ones read as absent.
    assert_eq!(cluster.remove_dead(NodeId(1)), 0);
    assert_eq!(
        cluster.command(NodeId(3), 400, "del:0", Command::Get),
        Reply::Nil
    );
    assert_eq!(
        cluster.command(NodeId(2), 401, "live:3", Command::Get),
        Reply::Bulk("v".into())
    );
    // A restarted replica keeps its floor and holds only the live registers; a removed key
    // written again takes a freed slot.
    let floor = cluster.shards[2].store().round_floor();
    assert!(floor > Round::BOTTOM);
    cluster.start(NodeId(3), 2);
    assert_eq!(cluster.shards[2].store().round_floor(), floor);
    assert_eq!(cluster.held()[2], (10, 10));
    let free = cluster.free_slots();
    cluster.command(NodeId(2), 402, "ttl:0", set("w", Expiry::Clear));
    assert_eq!(cluster.held(), vec![(11, 11); 3]);
    for (before, after) in free.iter().zip(cluster.free_slots()) {
        assert_eq!(after + 1, *before);
    }
}

#[test]
fn the_sweep_removes_expired_and_deleted_registers_within_its_bounds_per_tick() {
    let sweep = Sweep {
        interval_ms: 10,
        batch: 4,
        registers_per_tick: 8,
        removals_per_tick: 3,
    };
    let mut cluster = Cluster::new(Some(sweep));
    for i in 0..20 {
        cluster.command(
            NodeId(1),
            i,
            &format!("ttl:{i}"),
            set("v", Expiry::AfterMs(50)),
        );
    }
    for i in 0..5 {
        cluster.command(
            NodeId(1),
            100 + i,
            &format!("del:{i}"),
            set("v", Expiry::Clear),
        );
        cluster.command(NodeId(1), 200 + i, &format!("del:{i}"), Command::Del);
        cluster.command(
            NodeId(2),
            300 + i,
            &format!("live:{i}"),
            set("v", Expiry::Clear),
        );
    }
    assert_eq!(cluster.held(), vec![(30, 30); 3]);
    // Time stands still: the tick at the start found nothing, and the next is not due.
    cluster.settle();
    assert_eq!(cluster.held(), vec![(30, 30); 3]);
    cluster.now_ms += 50;
    let mut before = cluster.shards[0].sweep_stats();
    for _ in 0..100 {
        cluster.settle();
        let after = cluster.shards[0].sweep_stats();
        assert_eq!(after.ticks, before.ticks + 1, "one tick per interval");
        assert!(after.visited - before.visited <= 8);
        assert!(after.removals_started - before.removals_started <= 3);
        before = after;
        if cluster.held() == vec![(5, 5); 3] {
            break;
        }
        cluster.now_ms += sweep.interval_ms;
    }
    // Every dead register left every replica; only node 1 removed (it wrote them last), and at
    // least the 25 removals that took 9 ticks of 3.
    assert_eq!(cluster.held(), vec![(5, 5); 3]);
    assert!(
        before.ticks > 9,
        "the tick at the start and at least nine of three removals"
    );
    assert_eq!(before.removals_started, 25);
    for shard in &cluster.shards[1..] {
        assert_eq!(shard.sweep_stats().removals_started, 0);
    }
    assert_eq!(
        cluster.command(NodeId(3), 400, "live:4", Command::Get),
        Reply::Bulk("v".into())
    );
    assert_eq!(
        cluster.command(NodeId(3), 401, "ttl:4", Command::Get),
        Reply::Nil
    );
}

#[test]
fn an_expired_value_is_removed_only_after_the_grace_and_a_deleted_one_at_once() {
    let mut cluster = Cluster::with_grace(None, 1_000);
    cluster.command(NodeId(1), 1, "ttl", set("v", Expiry::AfterMs(50)));
    cluster.command(NodeId(1), 2, "del", set("v", Expiry::Clear));
    cluster.command(NodeId(1), 3, "del", Command::Del);
    cluster.now_ms += 60;
    // Expired (at 51) 10 ms ago: only the deleted one goes.
    assert_eq!(cluster.remove_dead(NodeId(1)), 1);
    assert_eq!(cluster.held(), vec![(1, 1); 3]);
    cluster.now_ms += 989;
    assert_eq!(cluster.remove_dead(NodeId(1)), 0, "999 ms after its expiry");
    cluster.now_ms += 1;
    assert_eq!(cluster.remove_dead(NodeId(1)), 1);
    assert_eq!(cluster.held(), vec![(0, 0); 3]);
}

/// The count of states a shard holds of registers its placement no longer puts on it (what
/// `/status` and the ring's reports show while a node drops the slots it left): taken by one
/// walk when the placement is installed and lowered by the drop, not walked again at each
/// status.
#[test]
fn the_count_of_registers_left_to_drop_follows_the_drop_without_walking_again() {
    use logless_placement::{key_slot, Configuration, NodeId as Placed, Replication};
    use logless_rmw::placement::Placement;

    let mut cluster = Cluster::new(None);
    let keys: Vec<String> = (0..200).map(|i| format!("k{i}")).collect();
    for (tag, key) in keys.iter().enumerate() {
        cluster.command(NodeId(1), tag as u64, key, set("v", Expiry::Clear));
    }
    let placed: Vec<Placed> = (1..=4).map(Placed).collect();
    let config = Configuration::balanced(&placed, Replication::THREE).unwrap();
    let elsewhere = keys
        .iter()
        .filter(|k| !config.replicas(key_slot(k.as_bytes())).contains(Placed(1)))
        .count() as u64;
    assert!(elsewhere > 0 && elsewhere < 200, "{elsewhere}");
    let acceptors: Vec<NodeId> = (1..=4).map(NodeId).collect();
    let shard = &mut cluster.shards[0];
    assert_eq!(shard.status().registers_unplaced, 0, "no placement yet");
    shard.install_placement(Placement::new(&config, &acceptors).unwrap());
    assert_eq!(shard.status().registers_unplaced, elsewhere);
    // One tick of the drop forgets them all (fewer than a tick's registers).
    cluster.now_ms += 100;
    cluster.shards[0].start_turn(cluster.now_ms, cluster.now_ms * 1000);
    cluster.finish(NodeId(1));
    let shard = &cluster.shards[0];
    assert_eq!(shard.registers_held() as u64, 200 - elsewhere);
    assert_eq!(shard.status().registers_unplaced, 0);
}

/// The drop of the slots a node left forgets at most about `DROP_FORGETS_PER_TICK` states per
/// tick (each is a removal in that turn's persist batch, and thousands in one turn held the
/// shard's commands back), keeps its count of what is left exact after every tick (the
/// status's walk, which counts the live states left while some are, agrees with it), and in
/// the end forgets every state of the slots left and none of the others.
#[test]
fn the_drop_forgets_in_bounded_pieces_keeps_its_count_exact_and_forgets_everything() {
    use logless_node::turn::{DROP_BATCH, DROP_FORGETS_PER_TICK, DROP_INTERVAL_MS};
    use logless_placement::{key_slot, Configuration, NodeId as Placed, Replication};
    use logless_rmw::placement::Placement;

    let mut cluster = Cluster::new(None);
    let keys: Vec<String> = (0..4_000).map(|i| format!("k{i}")).collect();
    for (tag, key) in keys.iter().enumerate() {
        cluster.command(NodeId(1), tag as u64, key, set("v", Expiry::Clear));
    }
    let placed: Vec<Placed> = (1..=5).map(Placed).collect();
    let config = Configuration::balanced(&placed, Replication::THREE).unwrap();
    let elsewhere = keys
        .iter()
        .filter(|k| !config.replicas(key_slot(k.as_bytes())).contains(Placed(1)))
        .count() as u64;
    assert!(elsewhere > 2 * DROP_FORGETS_PER_TICK as u64, "{elsewhere}");
    let acceptors: Vec<NodeId> = (1..=5).map(NodeId).collect();
    let shard = &mut cluster.shards[0];
    shard.install_placement(Placement::new(&config, &acceptors).unwrap());
    let status = shard.status();
    assert_eq!(
        (status.registers_unplaced, status.live_unplaced),
        (elsewhere, elsewhere)
    );
    let mut left = elsewhere;
    let mut ticks = 0;
    while left > 0 {
        cluster.now_ms += DROP_INTERVAL_MS;
        cluster.shards[0].start_turn(cluster.now_ms, cluster.now_ms * 1000);
        cluster.finish(NodeId(1));
        let shard = &cluster.shards[0];
        let status = shard.status();
        let forgotten = left - status.registers_unplaced;
        assert!(
            forgotten < (DROP_FORGETS_PER_TICK + DROP_BATCH) as u64,
            "tick {ticks} forgot {forgotten}"
        );
        left = status.registers_unplaced;
        assert_eq!(status.live_unplaced, left, "tick {ticks}");
        assert_eq!(shard.registers_held() as u64, 4_000 - (elsewhere - left));
        ticks += 1;
        assert!(ticks < 100, "the drop does not end");
    }
    assert!(ticks >= 2, "{ticks} ticks");
    // The walk goes on until a pass forgets nothing, then stops; nothing else was forgotten.
    for _ in 0..200 {
        cluster.now_ms += DROP_INTERVAL_MS;
        cluster.shards[0].start_turn(cluster.now_ms, cluster.now_ms * 1000);
        cluster.finish(NodeId(1));
    }
    let status = cluster.shards[0].status();
    assert_eq!((status.registers_unplaced, status.live_unplaced), (0, 0));
    assert_eq!(status.registers, 4_000 - elsewhere);
    assert_eq!(status.live_registers, 4_000 - elsewhere);
    assert_eq!(status.registers_dropped, elsewhere);
}
