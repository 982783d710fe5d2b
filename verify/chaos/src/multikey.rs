//! The multi-key workload, for an engine whose commands on several keys are atomic (multipaxos):
//! clients move amounts between the counters of a group in MULTI, DECRBY, INCRBY, EXEC
//! transactions, set all of them at once with MSET (values whose total is [`TOTAL`]) and read
//! them with MGET. A group has [`KEYS`] counters (`m<group>.<index>`), takes at most
//! `ops_per_group` operations and [`UNKNOWNS_PER_GROUP`] of unknown outcome, then the next group
//! takes its place.
//!
//! Each group's history goes through the whole-state checker of `logless_sim::atomicity`: the
//! group's counters are one model, so a transfer or an MSET seen half applied, or a transaction
//! applied twice, has no place in any order. MGET is also checked directly: the counters' total
//! (absent ones count 0) is 0 before the first MSET and [`TOTAL`] after it, whatever transfers ran.
//!
//! One operation in [`WIDE_ONE_IN`] is on a wide group instead ([`crate::wide`]): an MSET of 2 to
//! 10 keys, or an MGET of them, which must never see an MSET half applied.
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use logless_sim::atomicity::{self, CounterOp, CounterResult, Counters, Event, Refusal, KEYS};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use tokio::sync::watch;

use crate::client::{Connection, Reply, RequestError};
use crate::history::Clock;
use crate::wide::{torn_read, WideGroups, WideOp, WIDTH_MAX};

/// The total an MSET gives a group's counters (transfers keep it).
pub const TOTAL: i64 = 100;

/// Operations of unknown outcome a group takes before it is retired: each one leaves the
/// checker the choice of placing it anywhere after its call, or nowhere.
pub const UNKNOWNS_PER_GROUP: usize = 3;

/// One operation in this many is on a wide group.
pub const WIDE_ONE_IN: u32 = 4;

/// The most states the checker visits per group before it gives no verdict.
const CHECK_STATES_MAX: usize = 2_000_000;

/// The workload's shape.
#[derive(Clone, Debug)]
pub struct MultiKeyConfig {
    /// Concurrent clients (0: no multi-key workload).
    pub clients: usize,
    /// Operations per group before it is retired.
    pub ops_per_group: usize,
    /// The client-side timeout of one operation.
    pub op_timeout: Duration,
    /// A pause between a client's operations.
    pub think: Duration,
    /// The seed.
    pub seed: u64,
}

#[derive(Default)]
struct Group {
    events: Vec<Event>,
    ops: usize,
    unknowns: usize,
}

/// What the checks found, for the summary.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MultiKeyReport {
    /// Groups used.
    pub groups: usize,
    /// Operations answered, by form: transfers, MSETs, MGETs.
    pub transfers: usize,
    /// MSETs answered.
    pub msets: usize,
    /// MGETs answered.
    pub mgets: usize,
    /// Wide groups used.
    pub wide_groups: usize,
    /// MSETs of a wide group answered.
    pub wide_msets: usize,
    /// MGETs of a wide group answered.
    pub wide_mgets: usize,
    /// Operations of unknown outcome.
    pub unknown: usize,
    /// Operations the store refused (TRYAGAIN: not applied).
    pub failed: usize,
    /// Groups whose history no order explains, with why.
    pub violations: Vec<String>,
    /// Groups the checker gave no verdict on (out of states).
    pub inconclusive: usize,
    /// Replies of an unexpected shape (recorded as unknown).
    pub odd_replies: Vec<String>,
}

impl MultiKeyReport {
    /// Whether any group was found broken.
    pub fn violated(&self) -> bool {
        !self.violations.is_empty()
    }
}

/// The workload's shared state: the groups' histories.
pub struct MultiKey {
    config: MultiKeyConfig,
    clock: Clock,
    addrs: Vec<SocketAddr>,
    groups: Mutex<Vec<Group>>,
    wide: WideGroups,
    next_client: AtomicU64,
    next_replica: AtomicUsize,
    counts: Mutex<MultiKeyReport>,
}

/// The key of counter `index` of group `group`.
pub fn key(group: usize, index: usize) -> String {
    format!("m{group}.{index}")
}

/// The next operation: a transfer half of the time, an MGET a third, an MSET of values that add
/// up to [`TOTAL`] otherwise.
fn next_op(rng: &mut SmallRng) -> CounterOp {
    let roll: f64 = rng.random();
    if roll < 0.5 {
        let from = rng.random_range(0..KEYS);
        let to = (from + rng.random_range(1..KEYS)) % KEYS;
        CounterOp::Transfer {
            from,
            to,
            amount: rng.random_range(1..=10),
        }
    } else if roll < 0.85 {
        CounterOp::MGet
    } else {
        let mut values = [0; KEYS];
        let mut left = TOTAL;
        for v in values.iter_mut().take(KEYS - 1) {
            *v = rng.random_range(0..=left);
            left -= *v;
        }
        values[KEYS - 1] = left;
        CounterOp::MSet { values }
    }
}

/// How an operation is sent: one command, or a transaction's commands.
enum Request {
    One(Vec<String>),
    Transaction(Vec<Vec<String>>),
}

fn request(group: usize, op: &CounterOp) -> Request {
    let k = |i| key(group, i);
    match *op {
        CounterOp::Transfer { from, to, amount } => Request::Transaction(vec![
            vec!["DECRBY".into(), k(from), amount.to_string()],
            vec!["INCRBY".into(), k(to), amount.to_string()],
        ]),
        CounterOp::MSet { values } => Request::One(
            std::iter::once("MSET".to_string())
                .chain((0..KEYS).flat_map(|i| [k(i), values[i].to_string()]))
                .collect(),
        ),
        CounterOp::MGet => Request::One(
            std::iter::once("MGET".to_string())
                .chain((0..KEYS).map(k))
                .collect(),
        ),
        CounterOp::Incr { key, by } => Request::One(vec!["INCRBY".into(), k(key), by.to_string()]),
        CounterOp::Get { key } => Request::One(vec!["GET".into(), k(key)]),
    }
}

/// What became of one operation.
#[derive(Debug, PartialEq, Eq)]
enum Answer {
    /// Its result.
    Done(CounterResult),
    /// Not applied (TRYAGAIN).
    Refused,
    /// It may or may not have taken effect.
    Unknown,
}

fn int(reply: &Reply) -> Result<i64, String> {
    match reply {
        Reply::Int(n) => Ok(*n),
        Reply::Bulk(s) => s.parse().map_err(|_| format!("{s:?} is not an integer")),
        other => Err(format!("{other:?} where an integer was due")),
    }
}

/// Reads `reply` as the answer to `op`; an error says the reply has an unexpected shape.
fn answer(op: &CounterOp, reply: &Reply) -> Result<Answer, String> {
    match reply {
        Reply::Error(e) if e.starts_with("TRYAGAIN") => return Ok(Answer::Refused),
        Reply::Error(e) if e.starts_with("UNCERTAIN") => return Ok(Answer::Unknown),
        _ => {}
    }
    let result = match (op, reply) {
        (CounterOp::Transfer { .. }, Reply::Array(items)) if items.len() == 2 => {
            CounterResult::Pair(int(&items[0])?, int(&items[1])?)
        }
        (CounterOp::MSet { .. }, Reply::Simple(s)) if s == "OK" => CounterResult::Ok,
        (CounterOp::MGet, Reply::Array(items)) if items.len() == KEYS => {
            let mut values: Counters = [None; KEYS];
            for (value, item) in values.iter_mut().zip(items) {
                *value = match item {
                    Reply::Nil => None,
                    other => Some(int(other)?),
                };
            }
            CounterResult::Values(values)
        }
        (CounterOp::Incr { .. }, reply) => CounterResult::Int(int(reply)?),
        (CounterOp::Get { .. }, Reply::Nil) => CounterResult::Value(None),
        (CounterOp::Get { .. }, reply) => CounterResult::Value(Some(int(reply)?)),
        (_, other) => return Err(format!("unexpected reply {other:?}")),
    };
    Ok(Answer::Done(result))
}

/// An MGET's total that no run of transfers and MSETs gives, if it is one.
fn wrong_total(result: &CounterResult) -> Option<i64> {
    let CounterResult::Values(values) = result else {
        return None;
    };
    let total: i64 = values.iter().map(|v| v.unwrap_or(0)).sum();
    (total != 0 && total != TOTAL).then_some(total)
}

impl MultiKey {
    /// A workload on the replicas at `addrs`.
    pub fn new(config: MultiKeyConfig, addrs: Vec<SocketAddr>, clock: Clock) -> Arc<MultiKey> {
        let ops_per_group = config.ops_per_group;
        Arc::new(MultiKey {
            config,
            clock,
            addrs,
            groups: Mutex::new(vec![Group::default()]),
            wide: WideGroups::new(ops_per_group, WIDTH_MAX),
            next_client: AtomicU64::new(1),
            next_replica: AtomicUsize::new(0),
            counts: Mutex::new(MultiKeyReport::default()),
        })
    }

    /// The group for the next operation, a fresh one once the current one is spent.
    fn choose_group(&self) -> usize {
        let mut groups = self.groups.lock().expect("not poisoned");
        let current = groups.last().expect("a group");
        if current.ops >= self.config.ops_per_group || current.unknowns >= UNKNOWNS_PER_GROUP {
            groups.push(Group::default());
        }
        let index = groups.len() - 1;
        groups[index].ops += 1;
        index
    }

    fn record(&self, group: usize, event: Event) {
        let mut groups = self.groups.lock().expect("not poisoned");
        let g = &mut groups[group];
        g.unknowns += usize::from(event.returned.is_none());
        g.events.push(event);
    }

    fn count(&self, f: impl FnOnce(&mut MultiKeyReport)) {
        f(&mut self.counts.lock().expect("not poisoned"));
    }

    /// Runs one operation on `group`; returns whether its outcome is unknown.
    async fn run_op(
        &self,
        connection: &mut Connection,
        client: u64,
        group: usize,
        op: CounterOp,
    ) -> bool {
        let timeout = self.config.op_timeout;
        let call = self.clock.now();
        let reply = match request(group, &op) {
            Request::One(cmd) => tokio::time::timeout(timeout, connection.request(&cmd)).await,
            Request::Transaction(queued) => {
                tokio::time::timeout(timeout, connection.transaction(&queued)).await
            }
        };
        let ret = self.clock.now();
        let answer = match reply {
            Err(_) | Ok(Err(RequestError::Io(_) | RequestError::Closed)) => Answer::Unknown,
            Ok(Err(e @ RequestError::Bad(_))) => {
                self.count(|c| c.odd_replies.push(format!("{op:?}: {e}")));
                Answer::Unknown
            }
            Ok(Ok(reply)) => answer(&op, &reply).unwrap_or_else(|why| {
                self.count(|c| c.odd_replies.push(format!("{op:?}: {why}")));
                Answer::Unknown
            }),
        };
        let returned = match answer {
            Answer::Refused => {
                self.count(|c| c.failed += 1);
                return false;
            }
            Answer::Unknown => {
                self.count(|c| c.unknown += 1);
                None
            }
            Answer::Done(result) => {
                self.count(|c| match op {
                    CounterOp::Transfer { .. } => c.transfers += 1,
                    CounterOp::MSet { .. } => c.msets += 1,
                    _ => c.mgets += 1,
                });
                Some((ret, result))
            }
        };
        let unknown = returned.is_none();
        self.record(
            group,
            Event {
                client,
                op,
                call_ms: call,
                returned,
            },
        );
        unknown
    }

    /// Runs one operation on the wide group in use; returns whether its outcome is unknown.
    async fn run_wide(
        &self,
        connection: &mut Connection,
        unique: &str,
        rng: &mut SmallRng,
    ) -> bool {
        let (op, cmd) = self.wide.next(unique, rng);
        let reply = tokio::time::timeout(self.config.op_timeout, connection.request(&cmd)).await;
        let reply = match reply {
            Err(_) | Ok(Err(RequestError::Io(_) | RequestError::Closed)) => None,
            Ok(Err(e @ RequestError::Bad(_))) => {
                self.count(|c| c.odd_replies.push(format!("{cmd:?}: {e}")));
                None
            }
            Ok(Ok(reply)) => Some(reply),
        };
        let Some(reply) = reply else {
            self.count(|c| c.unknown += 1);
            return true;
        };
        self.count(|c| match (&op, &reply) {
            (_, Reply::Error(e)) if e.starts_with("TRYAGAIN") => c.failed += 1,
            (_, Reply::Error(e)) if e.starts_with("UNCERTAIN") => c.unknown += 1,
            (WideOp::MSet(_), Reply::Simple(ok)) if ok == "OK" => c.wide_msets += 1,
            (WideOp::MGet, reply) => match torn_read(reply) {
                Ok(None) => c.wide_mgets += 1,
                Ok(Some(values)) => {
                    c.wide_mgets += 1;
                    c.violations
                        .push(format!("{cmd:?} read {values}: an MSET half applied"));
                }
                Err(why) => c.odd_replies.push(format!("{cmd:?}: {why}")),
            },
            (_, reply) => c
                .odd_replies
                .push(format!("{cmd:?}: unexpected reply {reply:?}")),
        });
        matches!(&reply, Reply::Error(e) if e.starts_with("UNCERTAIN"))
    }

    /// One client: operations until `stop`; after an operation of unknown outcome it takes a
    /// new connection and client id.
    pub async fn client(self: Arc<Self>, index: usize, mut stop: watch::Receiver<bool>) {
        let mut rng = SmallRng::seed_from_u64(self.config.seed ^ 0x6d6b_0000 ^ index as u64);
        let mut connection: Option<Connection> = None;
        let mut client = self.next_client.fetch_add(1, Ordering::Relaxed);
        let mut seq = 0u64;
        while !*stop.borrow() {
            let Some(conn) = connection.as_mut() else {
                let i = self.next_replica.fetch_add(1, Ordering::Relaxed);
                let addr = self.addrs[i % self.addrs.len()];
                connection = Connection::connect_or_pause(addr, &mut stop).await;
                continue;
            };
            seq += 1;
            let unknown = if rng.random_ratio(1, WIDE_ONE_IN) {
                self.run_wide(conn, &format!("{index}.{seq}"), &mut rng)
                    .await
            } else {
                let group = self.choose_group();
                self.run_op(conn, client, group, next_op(&mut rng)).await
            };
            if unknown {
                connection = None;
                client = self.next_client.fetch_add(1, Ordering::Relaxed);
            }
            if !self.config.think.is_zero() {
                tokio::time::sleep(self.config.think).await;
            }
        }
    }

    /// Checks every group's history (slow: call it off the runtime's threads).
    pub fn check(&self) -> MultiKeyReport {
        let groups = std::mem::take(&mut *self.groups.lock().expect("not poisoned"));
        let mut report = self.counts.lock().expect("not poisoned").clone();
        report.groups = groups.iter().filter(|g| !g.events.is_empty()).count();
        report.wide_groups = self.wide.groups();
        for (index, group) in groups.iter().enumerate() {
            let totals = group
                .events
                .iter()
                .filter_map(|e| e.returned.as_ref().and_then(|(_, r)| wrong_total(r)));
            if let Some(total) = totals.into_iter().next() {
                report.violations.push(format!(
                    "group m{index}: an MGET's total is {total}, not 0 or {TOTAL}"
                ));
            }
            match atomicity::check(&group.events, CHECK_STATES_MAX) {
                Ok(()) => {}
                Err(Refusal::Inconclusive { .. }) => report.inconclusive += 1,
                Err(Refusal::NotLinearizable {
                    placed_max,
                    stuck_at,
                }) => report.violations.push(format!(
                    "group m{index}: not linearizable ({} operations; no order places more than \
                     {placed_max}, stuck at {stuck_at:?})",
                    group.events.len()
                )),
            }
        }
        report
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn operations_keep_the_total_and_name_every_counter_of_their_group() {
        let mut rng = SmallRng::seed_from_u64(9);
        let mut forms = [0; 3];
        for _ in 0..1000 {
            let op = next_op(&mut rng);
            match (op, request(4, &op)) {
                (CounterOp::Transfer { from, to, amount }, Request::Transaction(queued)) => {
                    assert_ne!(from, to);
                    assert!((1..=10).contains(&amount));
                    assert_eq!(queued[0][1], key(4, from));
                    assert_eq!(queued[1][1], key(4, to));
                    forms[0] += 1;
                }
                (CounterOp::MSet { values }, Request::One(cmd)) => {
                    assert_eq!(values.iter().sum::<i64>(), TOTAL);
                    assert!(values.iter().all(|v| *v >= 0));
                    assert_eq!(cmd.len(), 1 + 2 * KEYS);
                    forms[1] += 1;
                }
                (CounterOp::MGet, Request::One(cmd)) => {
                    assert_eq!(cmd[1..], (0..KEYS).map(|i| key(4, i)).collect::<Vec<_>>());
                    forms[2] += 1;
                }
                other => panic!("{:?}", other.0),
            }
        }
        assert!(forms.iter().all(|n| *n > 100), "{forms:?}");
    }

    #[test]
    fn replies_are_read_as_the_model_answers() {
        let transfer = CounterOp::Transfer {
            from: 0,
            to: 1,
            amount: 3,
        };
        let exec = Reply::Array(vec![Reply::Int(-3), Reply::Int(3)]);
        assert_eq!(
            answer(&transfer, &exec),
            Ok(Answer::Done(CounterResult::Pair(-3, 3)))
        );
        let mget = Reply::Array(vec![Reply::Bulk("7".into()), Reply::Nil, Reply::Int(2)]);
        assert_eq!(
            answer(&CounterOp::MGet, &mget),
            Ok(Answer::Done(CounterResult::Values([
                Some(7),
                None,
                Some(2)
            ])))
        );
        let retry = Reply::Error("TRYAGAIN no leader".into());
        assert_eq!(answer(&CounterOp::MGet, &retry), Ok(Answer::Refused));
        let uncertain = Reply::Error("UNCERTAIN timed out".into());
        assert_eq!(answer(&transfer, &uncertain), Ok(Answer::Unknown));
        assert!(answer(&transfer, &Reply::Nil).is_err());
        assert!(answer(&CounterOp::MGet, &Reply::Array(vec![Reply::Nil])).is_err());
    }

    #[test]
    fn a_total_off_the_books_is_noticed() {
        let values = |v| CounterResult::Values(v);
        assert_eq!(wrong_total(&values([None; KEYS])), None);
        assert_eq!(wrong_total(&values([Some(-4), Some(4), None])), None);
        assert_eq!(wrong_total(&values([Some(90), Some(4), Some(6)])), None);
        assert_eq!(wrong_total(&values([Some(90), Some(4), None])), Some(94));
    }

    fn done(op: CounterOp, call: u64, ret: u64, result: CounterResult) -> Event {
        Event {
            client: call,
            op,
            call_ms: call,
            returned: Some((ret, result)),
        }
    }

    fn workload_with(events: Vec<Event>) -> Arc<MultiKey> {
        let config = MultiKeyConfig {
            clients: 1,
            ops_per_group: 10,
            op_timeout: Duration::from_secs(1),
            think: Duration::ZERO,
            seed: 1,
        };
        let addr = SocketAddr::from(([127, 0, 0, 1], 1));
        let workload = MultiKey::new(config, vec![addr], Clock::start());
        workload.groups.lock().unwrap()[0].events = events;
        workload
    }

    #[test]
    fn a_transfer_seen_half_applied_is_a_violation() {
        let mset = CounterOp::MSet {
            values: [40, 60, 0],
        };
        let transfer = CounterOp::Transfer {
            from: 0,
            to: 1,
            amount: 5,
        };
        let whole = [Some(35), Some(65), Some(0)];
        let half = [Some(35), Some(60), Some(0)];
        let history = |seen| {
            vec![
                done(mset, 0, 1, CounterResult::Ok),
                done(transfer, 2, 3, CounterResult::Pair(35, 65)),
                done(CounterOp::MGet, 4, 5, CounterResult::Values(seen)),
            ]
        };
        let report = workload_with(history(whole)).check();
        assert_eq!(report.groups, 1);
        assert!(!report.violated(), "{:?}", report.violations);
        let report = workload_with(history(half)).check();
        assert_eq!(report.violations.len(), 2, "{:?}", report.violations);
        assert!(report.violations[0].contains("total is 95"));
        assert!(report.violations[1].contains("not linearizable"));
    }
}
