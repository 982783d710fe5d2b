//! An in-process cluster without a network, for measuring what the protocol costs in CPU.
//!
//! Core replicas ([`Replica`]) hand their messages straight to each other in turns, the way a
//! node's shard loop batches its inputs: in one turn every replica takes the commands of clients
//! whose previous command was answered, the timers that fell due and every message sent to it
//! since its last turn, read by reference from the other replicas' latest output (sends, then
//! the acceptor replies released by an in-memory store); then its own output replaces its
//! outbox and its client answers are counted. Nothing is lost, delayed or reordered, and no
//! history is recorded; what remains is the protocol's own work — proposer, acceptor, batching,
//! message construction — plus indexing each outbox by receiver once per turn.
//!
//! Time is logical: each turn is one millisecond, so phase timeouts, straggler waits and
//! backoffs keep their meaning in turns. The run is deterministic for a seed.
use logless_commands::command::Command;
use logless_rmw::acceptor::AcceptorState;
use logless_rmw::config::ProposerConfig;
use logless_rmw::ids::{ClientTag, Key, NodeId};
use logless_rmw::message::{Envelope, Message};
use logless_rmw::persist::AcceptorStore;
use logless_rmw::proposer::ProposerStats;
use logless_rmw::replica::{Replica, SpentOutput};
use logless_rmw::timers::Timers;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

/// Which replica's proposer a command goes to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Routing {
    /// The replica the client is connected to, whatever the key: every register has several
    /// proposers, so consecutive writes of one register rarely come from the same one.
    #[default]
    AnyReplica,
    /// The register's home replica (registers are dealt out to replicas in turn), as if the
    /// client, or the replica it is connected to, forwarded each command there: every register
    /// has one proposer while nothing fails, so its consecutive writes take the fast path
    /// (§5.8), the way the paper's comparison forwards requests to one node (§7.1). Each
    /// client's commands go to keys of its replica, which gives every replica the same load.
    HomeReplica,
}

/// What to run.
#[derive(Clone, Debug)]
pub struct DirectConfig {
    /// Replicas (each a proposer and an acceptor).
    pub replicas: u16,
    /// Registers: every command chooses one uniformly (among its replica's, with
    /// [`Routing::HomeReplica`]).
    pub keys: u32,
    /// Which proposer takes a command.
    pub routing: Routing,
    /// Whether fast writes vote with a quorum first ([`ProposerConfig::thrifty_writes`]): for
    /// [`Routing::HomeReplica`], where each register's reads and writes share one proposer.
    pub thrifty_writes: bool,
    /// Closed-loop clients, spread evenly over the replicas: each sends its next command as soon
    /// as the previous one is answered.
    pub clients: u32,
    /// The fraction of commands that are INCRBY 1; the rest are GET.
    pub write_fraction: f64,
    /// The seed of the workload's choices and the proposers' backoff.
    pub seed: u64,
}

/// What a run did.
#[derive(Clone, Debug, Default)]
pub struct DirectReport {
    /// Commands answered.
    pub operations: u64,
    /// Commands answered with an error (none are expected without faults).
    pub errors: u64,
    /// Messages delivered between replicas (a replica's messages to itself included).
    pub messages: u64,
    /// Turns (logical milliseconds).
    pub turns: u64,
    /// The proposers' counters since the cluster started, summed.
    pub proposers: ProposerStats,
}

/// The key of register `index`: `key:` and the index in eight digits or more.
///
/// Built from the number, as a client would build it, rather than read from a table of every
/// key: such a table is as large as the registers' own and would add a cache miss per command
/// that a replica never sees.
pub fn key_name(index: u32) -> Key {
    let mut name = [b'0'; 14];
    name[..4].copy_from_slice(b"key:");
    let digits = (index.checked_ilog10().unwrap_or(0) as usize + 1).max(8);
    let mut rest = index;
    for byte in name[4..4 + digits].iter_mut().rev() {
        *byte = b'0' + (rest % 10) as u8;
        rest /= 10;
    }
    Key::from_slice(&name[..4 + digits])
}

/// A store that keeps nothing: the replicas' states live in their own maps.
struct NullStore;

impl AcceptorStore for NullStore {
    type Error = std::convert::Infallible;
    fn write(&mut self, _: &Key, _: &AcceptorState) -> Result<(), Self::Error> {
        Ok(())
    }
    fn flush(&mut self) -> Result<(), Self::Error> {
        Ok(())
    }
    fn write_round_floor(&mut self, _: logless_rmw::ids::Round) -> Result<(), Self::Error> {
        Ok(())
    }
    fn remove(&mut self, _: &Key) -> Result<(), Self::Error> {
        Ok(())
    }
}

/// One replica with its timers.
struct Member {
    replica: Replica,
    /// Its wake-ups, kept as the node's shard keeps them.
    timers: Timers,
    /// Clients of this replica whose next command is due this turn.
    ready: Vec<ClientTag>,
}

/// What one replica sent in its latest turn: its proposer messages, then the acceptor replies
/// its store released. Every other replica reads it, by reference, in its next turn, and so
/// does the sender itself for its messages to itself; by the sender's next turn everybody has.
#[derive(Default)]
struct Outbox {
    sends: Vec<Envelope>,
    released: Vec<Envelope>,
    /// For each replica (by index), where its messages are: positions in `sends`, then in
    /// `released` offset by `sends.len()`. Built once by the sender, so that no receiver
    /// reads the others' envelopes.
    by_receiver: Vec<Vec<u32>>,
}

impl Outbox {
    /// Replaces the contents with a new turn's output and indexes it by destination;
    /// returns the previous vectors, which every member has read by now.
    fn refill(
        &mut self,
        sends: Vec<Envelope>,
        released: Vec<Envelope>,
    ) -> (Vec<Envelope>, Vec<Envelope>) {
        let old_sends = std::mem::replace(&mut self.sends, sends);
        let old_released = std::mem::replace(&mut self.released, released);
        for positions in &mut self.by_receiver {
            positions.clear();
        }
        for (position, envelope) in self.sends.iter().chain(&self.released).enumerate() {
            self.by_receiver[usize::from(envelope.to.0 - 1)].push(position as u32);
        }
        (old_sends, old_released)
    }

    /// The messages to replica `index`, in the order they were sent.
    fn messages_to(&self, index: usize) -> impl Iterator<Item = &Message> + Clone {
        self.by_receiver[index].iter().map(move |&position| {
            let position = position as usize;
            let envelope = match position.checked_sub(self.sends.len()) {
                None => &self.sends[position],
                Some(released) => &self.released[released],
            };
            debug_assert_eq!(usize::from(envelope.to.0 - 1), index);
            &envelope.message
        })
    }
}

/// The cluster.
pub struct DirectCluster {
    config: DirectConfig,
    members: Vec<Member>,
    outboxes: Vec<Outbox>,
    rng: SmallRng,
    /// The logical clock: one millisecond per turn.
    now_ms: u64,
}

impl DirectCluster {
    /// A cluster with every register at ⊥ and every client ready.
    pub fn new(config: DirectConfig) -> DirectCluster {
        assert!(config.replicas > 0 && config.keys > 0 && config.clients > 0);
        assert!(
            config.routing == Routing::AnyReplica || config.keys >= u32::from(config.replicas),
            "home routing needs a key for every replica"
        );
        let nodes: Vec<NodeId> = (1..=config.replicas).map(NodeId).collect();
        let members: Vec<Member> = nodes
            .iter()
            .map(|&node| Member {
                replica: Replica::new(
                    node,
                    1,
                    ProposerConfig {
                        thrifty_writes: config.thrifty_writes,
                        ..ProposerConfig::new(nodes.clone())
                    },
                    config.seed ^ u64::from(node.0),
                    [],
                ),
                timers: Timers::default(),
                ready: (0..config.clients)
                    .filter(|c| c % u32::from(config.replicas) == u32::from(node.0 - 1))
                    .map(|c| ClientTag(u64::from(c)))
                    .collect(),
            })
            .collect();
        DirectCluster {
            rng: SmallRng::seed_from_u64(config.seed),
            outboxes: members
                .iter()
                .map(|_| Outbox {
                    by_receiver: vec![Vec::new(); members.len()],
                    ..Outbox::default()
                })
                .collect(),
            config,
            members,
            now_ms: 0,
        }
    }

    /// Runs turns until at least `operations` more commands were answered; the clients keep
    /// their commands in flight between runs.
    pub fn run(&mut self, operations: u64) -> DirectReport {
        let mut report = DirectReport::default();
        let mut ready = Vec::new();
        let mut commands = Vec::new();
        let n = self.members.len();
        while report.operations < operations {
            let now_ms = self.now_ms;
            self.now_ms += 1;
            report.turns += 1;
            for i in 0..n {
                std::mem::swap(&mut ready, &mut self.members[i].ready);
                for client in ready.drain(..) {
                    let (key, command) = self.next_command(i);
                    commands.push((client, key, command));
                }
                let member = &mut self.members[i];
                member.replica.handle_commands(now_ms, &mut commands);
                member.timers.fire_due(now_ms, &mut member.replica);
                // Senders in the order their turns came since this member's last one.
                for from in (i..n).chain(0..i) {
                    let sender = NodeId(from as u16 + 1);
                    let outbox = &self.outboxes[from];
                    report.messages += outbox.by_receiver[i].len() as u64;
                    member
                        .replica
                        .handle_messages(now_ms, sender, outbox.messages_to(i));
                }
                self.finish_turn(i, &mut report);
            }
        }
        // The counters since the cluster started.
        for member in &self.members {
            report.proposers += member.replica.stats();
        }
        report
    }

    /// A command for a client of member `member`.
    fn next_command(&mut self, member: usize) -> (Key, Command) {
        let index = match self.config.routing {
            Routing::AnyReplica => self.rng.random_range(0..self.config.keys),
            Routing::HomeReplica => {
                // Key `k` lives at member `k % n`: choose among member's keys uniformly.
                let n = self.members.len() as u32;
                let homed = (self.config.keys - member as u32).div_ceil(n);
                self.rng.random_range(0..homed) * n + member as u32
            }
        };
        let key = key_name(index);
        let command = if self.rng.random_bool(self.config.write_fraction) {
            Command::IncrBy(1)
        } else {
            Command::Get
        };
        (key, command)
    }

    /// Takes member `i`'s output: its messages replace its outbox (which every member has read
    /// by now), timers go to its timer map, answered clients to its ready list.
    fn finish_turn(&mut self, i: usize, report: &mut DirectReport) {
        let member = &mut self.members[i];
        let mut output = member.replica.take_output();
        let Ok(released) = output.persist.commit(&mut NullStore);
        let (sends, released) = self.outboxes[i].refill(output.sends, released);
        member.timers.schedule(output.timers.drain(..));
        for reply in output.replies.drain(..) {
            report.operations += 1;
            report.errors += u64::from(reply.result.is_err());
            member.ready.push(reply.client);
        }
        member.replica.recycle(SpentOutput {
            sends,
            released,
            replies: output.replies,
            timers: output.timers,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    #[test]
    fn every_command_is_answered_without_errors() {
        let mut cluster = DirectCluster::new(DirectConfig {
            replicas: 3,
            keys: 100,
            routing: Routing::AnyReplica,
            thrifty_writes: false,
            clients: 60,
            write_fraction: 0.5,
            seed: 1,
        });
        let report = cluster.run(5_000);
        assert!(report.operations >= 5_000);
        assert_eq!(report.errors, 0);
        // A write takes at least one round trip through a quorum, a read one PREPARE to each
        // acceptor and its ACK; anything less means messages were not delivered.
        assert!(report.messages >= 2 * 2 * report.operations, "{report:?}");
    }

    #[test]
    fn keys_are_named_by_their_index() {
        for (index, name) in [
            (0, "key:00000000"),
            (42, "key:00000042"),
            (99_999_999, "key:99999999"),
            (100_000_000, "key:100000000"),
            (u32::MAX, "key:4294967295"),
        ] {
            assert_eq!(key_name(index), Key::new(Bytes::from(name)), "{index}");
        }
    }

    #[test]
    fn home_routing_makes_consecutive_writes_fast() {
        let config = |routing| DirectConfig {
            replicas: 3,
            keys: 100,
            routing,
            thrifty_writes: false,
            clients: 60,
            write_fraction: 0.5,
            seed: 1,
        };
        let mut home = DirectCluster::new(config(Routing::HomeReplica));
        let report = home.run(5_000);
        assert_eq!(report.errors, 0);
        let stats = &report.proposers;
        // Each register's first write runs phase 1; after it its one proposer skips phase 1,
        // unless a batch of its writes was still in flight.
        assert!(stats.writes > 2_000, "{stats:?}");
        assert!(stats.fast_writes * 10 > stats.writes * 9, "{stats:?}");
        assert_eq!(
            stats.retries + stats.write_throughs + stats.nacks,
            0,
            "{stats:?}"
        );
        // Each member takes commands only for its own registers, and for all of them.
        for member in 0..3 {
            let mut seen = std::collections::BTreeSet::new();
            for _ in 0..2_000 {
                let (key, _) = home.next_command(member);
                let index = (0..100).find(|&k| key_name(k) == key).unwrap();
                assert_eq!(index % 3, member as u32);
                seen.insert(index);
            }
            assert_eq!(seen.len(), (100 - member).div_ceil(3));
        }

        // Any replica: three proposers per register, and fast writes are the exception.
        let mut any = DirectCluster::new(config(Routing::AnyReplica));
        let stats = any.run(5_000).proposers;
        assert!(stats.fast_writes * 2 < stats.writes, "{stats:?}");
    }

    #[test]
    fn thrifty_writes_with_home_routing_vote_with_the_quorum_reads_ask() {
        let config = |thrifty_writes| DirectConfig {
            replicas: 3,
            keys: 100,
            routing: Routing::HomeReplica,
            thrifty_writes,
            clients: 60,
            write_fraction: 1.0,
            seed: 1,
        };
        let mut all = DirectCluster::new(config(false));
        let all = all.run(5_000);
        let mut thrifty = DirectCluster::new(config(true));
        let thrifty = thrifty.run(5_000);
        for report in [&all, &thrifty] {
            assert_eq!(report.errors, 0, "{report:?}");
            let stats = &report.proposers;
            assert!(stats.fast_writes * 10 > stats.writes * 9, "{stats:?}");
        }
        // A fast write is a VOTE and a VOTED per acceptor asked: three each, or two.
        let per_write = |r: &DirectReport| r.messages as f64 / r.operations as f64;
        assert!(per_write(&all) > 5.5, "{all:?}");
        assert!(per_write(&thrifty) < 4.5, "{thrifty:?}");
        // Nothing is lost, so no fast write has to ask the third acceptor, and reads (none
        // here) would agree with the writes: the same quorum.
        assert_eq!(thrifty.proposers.writes_widened, 0, "{thrifty:?}");

        // Reads of the same proposer see its fast writes consistent.
        let mut mixed = DirectCluster::new(DirectConfig {
            write_fraction: 0.5,
            ..config(true)
        });
        let stats = mixed.run(5_000).proposers;
        assert!(
            stats.reads > 1_000 && stats.fast_writes > 1_000,
            "{stats:?}"
        );
        assert_eq!(stats.reads_widened + stats.writes_widened, 0, "{stats:?}");
    }
}
