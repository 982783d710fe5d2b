//! The workload: concurrent clients running a mix of register commands on a rolling window of
//! fresh keys, every operation recorded in the history; and the final reads of every key.
//!
//! Keys come in five kinds, by the first letter of their name: counters (`c…`: INCR, INCRBY,
//! GET), registers (`r…`: SET, SET NX, GET, DEL, DELEX IFEQ), sets (`s…`: SADD, SREM,
//! SMEMBERS, SCARD), expiring registers (`e…`: SET with PX, PXAT, KEEPTTL or none, PEXPIRE,
//! PERSIST, GET, EXISTS, PTTL), fencing locks (`l…`: LOCK.ACQUIRE, LOCK.RELEASE), hashes
//! (`h…`: HSET, HINCRBY, HGET, HGETALL, HDEL), lists (`q…`: LPUSH, RPUSH, LPOP, RPOP, LRANGE,
//! LLEN), sorted sets (`z…`: ZADD, ZINCRBY, ZSCORE, ZRANGE, ZREM) and entries of the psmr
//! engine's B⁺-tree service (`b…`: SET NX, SET XX, GET, DEL); on hashes, lists and sorted sets one
//! operation in [`TRANSACTION_ONE_IN`] is a MULTI ... EXEC of two of the key's commands. Expiring
//! registers and locks carry times to live and leases of [`TTL_MS`], short enough that keys
//! expire and leases run out while the run goes on. A key takes at most `ops_per_key` operations,
//! `unknowns_per_key` operations of unknown outcome and [`KEY_CLIENTS_MAX`] client ids, then it
//! is retired and a fresh key takes its place, which keeps every key's history small enough for
//! the checker.
use std::collections::{BTreeSet, HashMap};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rand::rngs::SmallRng;
use rand::seq::IndexedRandom;
use rand::{Rng, SeedableRng};
use tokio::sync::watch;

use crate::client::{Connection, RequestError};
use crate::history::{classify, classify_exec, unix_ms, Clock, History, Op, Outcome, Output};
use crate::stamps::Pauses;

/// The most client ids that operate on one key.
pub const KEY_CLIENTS_MAX: usize = 16;

/// The shortest and the longest time to live or lease the workload asks for (ms): short enough
/// that keys expire while clients still use them (a key takes some 50 operations a second),
/// long enough that most are read back live first.
pub const TTL_MS: (u64, u64) = (20, 300);

/// One operation in this many on a hash, list or sorted set is a transaction.
pub const TRANSACTION_ONE_IN: u32 = 8;

/// The fields of a hash the workload writes strings to, and those it counts in: few, so that
/// commands on one field meet.
const HASH_TEXT_FIELDS: [&str; 2] = ["t0", "t1"];
const HASH_COUNTER_FIELDS: [&str; 2] = ["n0", "n1"];

/// The members of a sorted set.
const ZSET_MEMBERS: [&str; 4] = ["m0", "m1", "m2", "m3"];

/// The owners that compete for one lock: enough that a holder seldom renews its own lease
/// before it runs out, few enough that it sometimes does.
const LOCK_OWNERS: [&str; 8] = ["o1", "o2", "o3", "o4", "o5", "o6", "o7", "o8"];

/// The owner of the final acquisition of every lock, and its lease (ms): far longer than the
/// final reads take, so that retrying it after an unknown outcome renews the same fence rather
/// than taking a new one.
const FINAL_OWNER: &str = "final";
const FINAL_LEASE_MS: u64 = 600_000;

/// What a key holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum KeyKind {
    /// INCR, INCRBY, GET.
    Counter,
    /// SET, SET NX, GET, DEL, DELEX IFEQ.
    Register,
    /// SADD, SREM, SMEMBERS, SCARD.
    Set,
    /// SET with PX, PXAT, KEEPTTL or no time to live, PEXPIRE, PERSIST, GET, EXISTS, PTTL (no
    /// DEL: such a key reads absent only before its first SET or once it expired).
    Expiring,
    /// LOCK.ACQUIRE with short leases, LOCK.RELEASE.
    Lock,
    /// HSET, HINCRBY, HGET, HGETALL, HDEL, and transactions of two of them.
    Hash,
    /// LPUSH, RPUSH, LPOP, RPOP, LRANGE, LLEN, and transactions of two of them.
    List,
    /// ZADD, ZINCRBY, ZSCORE, ZRANGE WITHSCORES, ZREM, and transactions of two of them.
    ZSet,
    /// SET NX (insert), SET XX (update), GET (read), DEL (delete): the commands the psmr
    /// engine's B⁺-tree service serves. Under P-SMR an insert or a delete is ordered in `g_all`
    /// and runs in synchronous mode, a read or an update in its key's worker group.
    Entry,
}

/// Every kind, in the order the summary lists them.
const KINDS: [KeyKind; 9] = [
    KeyKind::Counter,
    KeyKind::Register,
    KeyKind::Set,
    KeyKind::Expiring,
    KeyKind::Lock,
    KeyKind::Hash,
    KeyKind::List,
    KeyKind::ZSet,
    KeyKind::Entry,
];

impl KeyKind {
    /// The kind of key `name`.
    pub fn of(name: &str) -> Option<KeyKind> {
        match name.as_bytes().first()? {
            b'c' => Some(KeyKind::Counter),
            b'r' => Some(KeyKind::Register),
            b's' => Some(KeyKind::Set),
            b'e' => Some(KeyKind::Expiring),
            b'l' => Some(KeyKind::Lock),
            b'h' => Some(KeyKind::Hash),
            b'q' => Some(KeyKind::List),
            b'z' => Some(KeyKind::ZSet),
            b'b' => Some(KeyKind::Entry),
            _ => None,
        }
    }

    fn prefix(self) -> char {
        match self {
            KeyKind::Counter => 'c',
            KeyKind::Register => 'r',
            KeyKind::Set => 's',
            KeyKind::Expiring => 'e',
            KeyKind::Lock => 'l',
            KeyKind::Hash => 'h',
            KeyKind::List => 'q',
            KeyKind::ZSet => 'z',
            KeyKind::Entry => 'b',
        }
    }

    /// The name on the command line and in the summary.
    pub fn name(self) -> &'static str {
        match self {
            KeyKind::Counter => "counter",
            KeyKind::Register => "register",
            KeyKind::Set => "set",
            KeyKind::Expiring => "expiring",
            KeyKind::Lock => "lock",
            KeyKind::Hash => "hash",
            KeyKind::List => "list",
            KeyKind::ZSet => "zset",
            KeyKind::Entry => "entry",
        }
    }

    /// Parses a kind's [`KeyKind::name`].
    pub fn parse(s: &str) -> Result<KeyKind, String> {
        KINDS.into_iter().find(|k| k.name() == s).ok_or_else(|| {
            let names: Vec<&str> = KINDS.iter().map(|k| k.name()).collect();
            format!("unknown key kind {s:?} ({})", names.join(", "))
        })
    }

    /// Whether the key's commands look at the clock (times to live, leases): their operations
    /// carry stamp windows.
    pub fn is_timed(self) -> bool {
        matches!(self, KeyKind::Expiring | KeyKind::Lock)
    }

    /// Whether the key holds a hash, list or sorted set (whose operations may be transactions).
    pub fn is_collection(self) -> bool {
        matches!(self, KeyKind::Hash | KeyKind::List | KeyKind::ZSet)
    }
}

/// The workload's shape.
#[derive(Clone, Debug)]
pub struct WorkloadConfig {
    /// Concurrent clients.
    pub clients: usize,
    /// Keys in use at once.
    pub keys: usize,
    /// The kinds of keys to create.
    pub kinds: Vec<KeyKind>,
    /// Operations per key before it is retired.
    pub ops_per_key: usize,
    /// Operations of unknown outcome per key before it is retired.
    pub unknowns_per_key: usize,
    /// The client-side timeout of one operation.
    pub op_timeout: Duration,
    /// A pause between a client's operations.
    pub think: Duration,
    /// How long before its call a command's stamp may have been read (see [`crate::stamps`]).
    pub stamp_slack_ms: u64,
    /// The seed.
    pub seed: u64,
}

struct KeyState {
    name: String,
    ops: usize,
    unknowns: usize,
    clients: BTreeSet<u64>,
    /// Values recently written or read (for DELEX IFEQ), members recently added (for SREM).
    hints: Vec<String>,
}

struct KeyTable {
    active: Vec<KeyState>,
    all: Vec<String>,
    next: u64,
    /// Client ids given up after an operation of unknown outcome: they never operate again.
    abandoned: BTreeSet<u64>,
}

/// The rolling window of keys, shared by the clients.
pub struct KeySpace {
    table: Mutex<KeyTable>,
    config: WorkloadConfig,
}

impl KeySpace {
    /// An empty key space.
    pub fn new(config: WorkloadConfig) -> KeySpace {
        KeySpace {
            table: Mutex::new(KeyTable {
                active: Vec::new(),
                all: Vec::new(),
                next: 0,
                abandoned: BTreeSet::new(),
            }),
            config,
        }
    }

    fn fresh(&self, table: &mut KeyTable, rng: &mut SmallRng) -> KeyState {
        let kind = *self.config.kinds.choose(rng).expect("key kinds");
        let name = format!("{}{}", kind.prefix(), table.next);
        table.next += 1;
        table.all.push(name.clone());
        KeyState {
            name,
            ops: 0,
            unknowns: 0,
            clients: BTreeSet::new(),
            hints: Vec::new(),
        }
    }

    /// Whether no client will operate on `key` any more: it took its operations or its
    /// operations of unknown outcome, or it has all the client ids it may have and every one of
    /// them was given up.
    fn is_spent(&self, key: &KeyState, abandoned: &BTreeSet<u64>) -> bool {
        key.ops >= self.config.ops_per_key
            || key.unknowns >= self.config.unknowns_per_key
            || (key.clients.len() >= KEY_CLIENTS_MAX
                && key.clients.iter().all(|c| abandoned.contains(c)))
    }

    /// Picks a key for the next operation of `client` and returns it with a hint (a recent
    /// value or member, if any).
    ///
    /// Spent keys are replaced by fresh ones first, so that `keys` keys stay in use: a spent
    /// key left in the window would leave the clients fewer keys to share, and more of them on
    /// each. The slots of the window are not equally busy ([`zipf_slot`]): the first ones are
    /// contended by most clients at once and spend their keys in a fraction of a second, the
    /// last ones see an operation every few tens of ms, slowly enough for their times to live
    /// and leases to run out between writes.
    pub fn choose(&self, client: u64, rng: &mut SmallRng) -> (String, Option<String>) {
        let mut guard = self.table.lock().expect("not poisoned");
        let table = &mut *guard;
        for i in 0..table.active.len() {
            if self.is_spent(&table.active[i], &table.abandoned) {
                table.active[i] = self.fresh(table, rng);
            }
        }
        while table.active.len() < self.config.keys.max(1) {
            let key = self.fresh(table, rng);
            table.active.push(key);
        }
        let n = table.active.len();
        let start = zipf_slot(n, rng);
        let can_join =
            |k: &KeyState| k.clients.contains(&client) || k.clients.len() < KEY_CLIENTS_MAX;
        let slot = (0..n)
            .map(|i| (start + i) % n)
            .find(|&i| can_join(&table.active[i]))
            .unwrap_or_else(|| {
                // Every key has its client ids and this client is not among them: a fresh key
                // takes the place of one of them.
                table.active[start] = self.fresh(table, rng);
                start
            });
        let key = &mut table.active[slot];
        key.ops += 1;
        key.clients.insert(client);
        (key.name.clone(), key.hints.choose(rng).cloned())
    }

    /// Notes that `client` gives up its id (after an operation of unknown outcome).
    pub fn abandon(&self, client: u64) {
        let mut table = self.table.lock().expect("not poisoned");
        table.abandoned.insert(client);
    }

    /// Notes what an operation on `key` ended with.
    pub fn note(&self, key: &str, unknown: bool, hint: Option<String>) {
        let mut table = self.table.lock().expect("not poisoned");
        if let Some(k) = table.active.iter_mut().find(|k| k.name == key) {
            k.unknowns += usize::from(unknown);
            if let Some(h) = hint {
                if k.hints.len() >= 16 {
                    k.hints.remove(0);
                }
                k.hints.push(h);
            }
        }
    }

    /// Every key ever used, in creation order.
    pub fn all_keys(&self) -> Vec<String> {
        self.table.lock().expect("not poisoned").all.clone()
    }
}

/// A slot of a window of `n` keys, slot `i` with a weight of `1 / (i + 1)` (Zipf's law): with
/// 16 keys the first takes 30 % of the operations and the last 2 %.
fn zipf_slot(n: usize, rng: &mut SmallRng) -> usize {
    let total: f64 = (1..=n).map(|i| 1.0 / i as f64).sum();
    let mut left = rng.random::<f64>() * total;
    for i in 0..n {
        left -= 1.0 / (i + 1) as f64;
        if left < 0.0 {
            return i;
        }
    }
    n - 1
}

fn args(parts: &[&str]) -> Vec<String> {
    parts.iter().map(|s| (*s).to_string()).collect()
}

/// The next command on `key`; `unique` is a value never used before, `now_ms` the wall clock
/// (Unix ms, for PXAT).
fn command(
    key: &str,
    hint: Option<&str>,
    unique: &str,
    now_ms: i64,
    rng: &mut SmallRng,
) -> Vec<String> {
    let roll: f64 = rng.random();
    match KeyKind::of(key).expect("a workload key") {
        KeyKind::Counter => {
            if roll < 0.45 {
                args(&["INCR", key])
            } else if roll < 0.55 {
                let by = rng.random_range(2..=5).to_string();
                args(&["INCRBY", key, &by])
            } else {
                args(&["GET", key])
            }
        }
        KeyKind::Register => {
            if roll < 0.30 {
                args(&["SET", key, unique])
            } else if roll < 0.40 {
                args(&["SET", key, unique, "NX"])
            } else if roll < 0.85 {
                args(&["GET", key])
            } else if roll < 0.90 {
                args(&["DEL", key])
            } else {
                args(&["DELEX", key, "IFEQ", hint.unwrap_or(unique)])
            }
        }
        // No DEL on sets: a slow SADD that a later DEL may or may not have erased leaves the
        // checker a choice it can only settle at the final read, which makes its search
        // exponential.
        KeyKind::Set => {
            if roll < 0.30 {
                args(&["SADD", key, unique])
            } else if roll < 0.60 {
                args(&["SREM", key, hint.unwrap_or(unique)])
            } else if roll < 0.90 {
                args(&["SMEMBERS", key])
            } else {
                args(&["SCARD", key])
            }
        }
        // Mostly reads: a key expires only if no write renews its deadline for as long as its
        // time to live, and one write in five renews it, so that about one deadline in six
        // passes while the key is still in use (at some 80 operations a second per key).
        KeyKind::Expiring => {
            let ttl = rng.random_range(TTL_MS.0..=TTL_MS.1);
            if roll < 0.12 {
                args(&["SET", key, unique, "PX", &ttl.to_string()])
            } else if roll < 0.15 {
                let at = now_ms.saturating_add_unsigned(ttl).to_string();
                args(&["SET", key, unique, "PXAT", &at])
            } else if roll < 0.17 {
                args(&["SET", key, unique])
            } else if roll < 0.19 {
                args(&["SET", key, unique, "KEEPTTL"])
            } else if roll < 0.23 {
                args(&["PEXPIRE", key, &ttl.to_string()])
            } else if roll < 0.25 {
                args(&["PERSIST", key])
            } else if roll < 0.55 {
                args(&["GET", key])
            } else if roll < 0.70 {
                args(&["EXISTS", key])
            } else {
                args(&["PTTL", key])
            }
        }
        KeyKind::Hash => {
            let text = *HASH_TEXT_FIELDS.choose(rng).expect("fields");
            let counter = *HASH_COUNTER_FIELDS.choose(rng).expect("fields");
            if roll < 0.25 {
                args(&["HSET", key, text, unique])
            } else if roll < 0.50 {
                let by = rng.random_range(1..=3).to_string();
                args(&["HINCRBY", key, counter, &by])
            } else if roll < 0.70 {
                args(&["HGET", key, if roll < 0.6 { text } else { counter }])
            } else if roll < 0.92 {
                args(&["HGETALL", key])
            } else {
                args(&["HDEL", key, if roll < 0.96 { text } else { counter }])
            }
        }
        // Pops about as often as pushes, so that lists stay short and both ends are used.
        KeyKind::List => {
            if roll < 0.25 {
                args(&["RPUSH", key, unique])
            } else if roll < 0.40 {
                args(&["LPUSH", key, unique])
            } else if roll < 0.55 {
                args(&["LPOP", key])
            } else if roll < 0.70 {
                args(&["RPOP", key])
            } else if roll < 0.95 {
                args(&["LRANGE", key, "0", "-1"])
            } else {
                args(&["LLEN", key])
            }
        }
        // Whole-number scores, which the checker models exactly.
        KeyKind::ZSet => {
            let member = *ZSET_MEMBERS.choose(rng).expect("members");
            if roll < 0.20 {
                let score = rng.random_range(0..=20).to_string();
                args(&["ZADD", key, &score, member])
            } else if roll < 0.45 {
                let by = rng.random_range(-3..=3).to_string();
                args(&["ZINCRBY", key, &by, member])
            } else if roll < 0.65 {
                args(&["ZSCORE", key, member])
            } else if roll < 0.92 {
                args(&["ZRANGE", key, "0", "-1", "WITHSCORES"])
            } else {
                args(&["ZREM", key, member])
            }
        }
        // As many inserts as deletes, so that an entry is present about half the time and
        // both conditions of SET (NX, XX) meet keys that fail them.
        KeyKind::Entry => {
            if roll < 0.25 {
                args(&["SET", key, unique, "NX"])
            } else if roll < 0.45 {
                args(&["SET", key, unique, "XX"])
            } else if roll < 0.80 {
                args(&["GET", key])
            } else {
                args(&["DEL", key])
            }
        }
        // Many owners and few releases: a holder seldom renews or releases its lease before it
        // runs out, so leases are taken over as well as handed on.
        KeyKind::Lock => {
            let any_owner = *LOCK_OWNERS.choose(rng).expect("owners");
            if roll < 0.85 {
                let lease = rng.random_range(TTL_MS.0..=TTL_MS.1).to_string();
                args(&["LOCK.ACQUIRE", key, any_owner, &lease])
            } else {
                // Mostly the owner that acquired it last, so that releases succeed.
                let owner = hint.filter(|_| roll < 0.97).unwrap_or(any_owner);
                args(&["LOCK.RELEASE", key, owner])
            }
        }
    }
}

/// A transaction on `key`, one time in [`TRANSACTION_ONE_IN`] on a hash, list or sorted set:
/// two of the key's commands, the first of them a write, so that a transaction seen half
/// applied, or a read inside it that misses the write before it, shows.
fn transaction(key: &str, unique: &str, rng: &mut SmallRng) -> Option<Vec<Vec<String>>> {
    let kind = KeyKind::of(key).expect("a workload key");
    if !kind.is_collection() || !rng.random_ratio(1, TRANSACTION_ONE_IN) {
        return None;
    }
    let write = loop {
        let cmd = command(key, None, unique, 0, rng);
        if !matches!(
            cmd[0].as_str(),
            "HGET" | "HGETALL" | "LRANGE" | "LLEN" | "ZSCORE" | "ZRANGE"
        ) {
            break cmd;
        }
    };
    let second = command(key, None, &format!("{unique}+"), 0, rng);
    Some(vec![write, second])
}

/// What an answered operation teaches about its key's likely values or members.
fn hint_from(cmd: &[String], output: &Output) -> Option<String> {
    match (cmd[0].as_str(), output) {
        ("SET", Output::Ok) | ("SADD", Output::Int(_)) | ("LOCK.ACQUIRE", Output::Int(_)) => {
            Some(cmd[2].clone())
        }
        ("GET", Output::Bulk(v)) if KeyKind::of(&cmd[1]) == Some(KeyKind::Register) => {
            Some(v.clone())
        }
        // The last member listed: SREM then mostly removes a present member, which keeps sets
        // small (and the checker fast).
        ("SMEMBERS", Output::Array(members)) => members.last().cloned(),
        _ => None,
    }
}

/// What the clients saw of expiry and leases, told from their replies: figures for the
/// summary (they show that expiry was exercised), not checks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ExpiryStats {
    /// Workload reads (GET, EXISTS, PTTL) of an expiring register that found it absent although
    /// an acknowledged SET had returned before the read was sent: the key had expired, since
    /// nothing else removes these keys.
    pub expired_reads: usize,
    /// The same among the final reads.
    pub expired_final_reads: usize,
    /// Acquisitions that took a new fence while the previous fence's owner, another one, was
    /// not known to have released it: its lease had run out and was taken over.
    pub takeovers: usize,
    /// Acquisitions refused (nil) while another owner's lease ran.
    pub refused: usize,
}

/// What is known of one timed key, for [`ExpiryStats`].
#[derive(Default)]
struct TimedKey {
    /// When the first acknowledged SET returned (run clock, ns).
    set_returned: Option<u64>,
    /// The highest fence seen, its owner and whether that owner released it since.
    fence: i64,
    owner: String,
    released: bool,
}

/// Everything the client tasks share.
pub struct Workload {
    /// The keys.
    pub keys: KeySpace,
    /// The history.
    pub history: History,
    /// The clock.
    pub clock: Clock,
    addrs: Vec<SocketAddr>,
    pauses: Arc<Pauses>,
    next_client: AtomicU64,
    next_replica: AtomicUsize,
    config: WorkloadConfig,
    /// Error replies the model does not know (recorded as unknown), for the summary.
    pub odd_replies: Mutex<Vec<String>>,
    timed: Mutex<(ExpiryStats, HashMap<String, TimedKey>)>,
}

impl Workload {
    /// A workload against the replicas at `addrs` (node `i + 1` at `addrs[i]`), whose pauses
    /// the nemesis notes in `pauses`.
    pub fn new(
        config: WorkloadConfig,
        addrs: Vec<SocketAddr>,
        pauses: Arc<Pauses>,
        clock: Clock,
        history: History,
    ) -> Arc<Workload> {
        Arc::new(Workload {
            keys: KeySpace::new(config.clone()),
            history,
            clock,
            addrs,
            pauses,
            next_client: AtomicU64::new(1),
            next_replica: AtomicUsize::new(0),
            config,
            odd_replies: Mutex::new(Vec::new()),
            timed: Mutex::new((ExpiryStats::default(), HashMap::new())),
        })
    }

    /// What the clients saw of expiry and leases so far.
    pub fn expiry_stats(&self) -> ExpiryStats {
        self.timed.lock().expect("not poisoned").0
    }

    /// Counts what an answered operation on a timed key shows about expiry and leases.
    fn observe(&self, op: &Op) {
        let Some(output) = op.output() else { return };
        let mut guard = self.timed.lock().expect("not poisoned");
        let (stats, keys) = &mut *guard;
        let key = keys.entry(op.key().to_string()).or_default();
        match (op.name(), output) {
            ("SET", Output::Ok) => {
                key.set_returned = Some(key.set_returned.map_or(op.ret, |r| r.min(op.ret)));
            }
            ("GET", Output::Nil) | ("EXISTS", Output::Int(0)) | ("PTTL", Output::Int(-2))
                if key.set_returned.is_some_and(|r| r < op.call) =>
            {
                if op.final_read {
                    stats.expired_final_reads += 1;
                } else {
                    stats.expired_reads += 1;
                }
            }
            ("LOCK.ACQUIRE", Output::Nil) if !op.final_read => stats.refused += 1,
            ("LOCK.ACQUIRE", Output::Int(fence)) if !op.final_read && *fence > key.fence => {
                let owner = &op.cmd[2];
                if key.fence > 0 && !key.released && key.owner != *owner {
                    stats.takeovers += 1;
                }
                key.fence = *fence;
                key.owner.clone_from(owner);
                key.released = false;
            }
            ("LOCK.RELEASE", Output::Int(1)) if key.owner == op.cmd[2] => key.released = true,
            _ => {}
        }
    }

    /// A client id never used before.
    pub fn new_client_id(&self) -> u64 {
        self.next_client.fetch_add(1, Ordering::Relaxed)
    }

    fn next_addr(&self) -> SocketAddr {
        let i = self.next_replica.fetch_add(1, Ordering::Relaxed);
        self.addrs[i % self.addrs.len()]
    }

    /// Runs one operation on `connection` and records it: `cmd`, or with `queued` commands a
    /// transaction of them (`cmd` is then `["MULTI", key]`). Returns its outcome; `Unknown`
    /// means the connection must not be used again.
    pub async fn run_op(
        &self,
        connection: &mut Connection,
        client: u64,
        cmd: Vec<String>,
        queued: Vec<Vec<String>>,
        final_read: bool,
    ) -> Outcome {
        let call = self.clock.now();
        // The wall clock just before the command leaves and just after its reply arrives: the
        // replicas stamp with this clock (see `crate::stamps`).
        let call_ms = self.clock.wall_ms();
        let result = if queued.is_empty() {
            tokio::time::timeout(self.config.op_timeout, connection.request(&cmd)).await
        } else {
            tokio::time::timeout(self.config.op_timeout, connection.transaction(&queued)).await
        };
        let ret_ms = self.clock.wall_ms();
        let ret = self.clock.now();
        let what = || {
            if queued.is_empty() {
                format!("{cmd:?}")
            } else {
                format!("MULTI {queued:?}")
            }
        };
        let mut outcome = match result {
            Err(_) => Outcome::Unknown,
            Ok(Err(RequestError::Io(_) | RequestError::Closed)) => Outcome::Unknown,
            Ok(Err(e @ RequestError::Bad(_))) => {
                self.odd(format!("{}: {e}", what()));
                Outcome::Unknown
            }
            Ok(Ok(reply)) => if queued.is_empty() {
                classify(&reply)
            } else {
                classify_exec(&reply)
            }
            .unwrap_or_else(|why| {
                self.odd(format!("{}: {why}", what()));
                Outcome::Unknown
            }),
        };
        // The model's sets are sorted; logless sends SMEMBERS in byte order already, Redis in
        // any order.
        if let (Outcome::Ok(Output::Array(members)), "SMEMBERS") = (&mut outcome, cmd[0].as_str()) {
            members.sort();
        }
        let timed = KeyKind::of(&cmd[1]).is_some_and(KeyKind::is_timed);
        let stamp = timed.then(|| {
            let node = self.node_of(connection.addr());
            let ret_ms = (outcome != Outcome::Unknown).then_some(ret_ms);
            let slack_ms = i64::try_from(self.config.stamp_slack_ms).unwrap_or(i64::MAX);
            self.pauses.window(node, call_ms, ret_ms, slack_ms)
        });
        let op = Op {
            client,
            cmd,
            queued,
            call,
            ret,
            outcome: outcome.clone(),
            final_read,
            stamp,
        };
        if timed {
            self.observe(&op);
        }
        self.history.push(op);
        outcome
    }

    /// The node id of the replica at `addr`.
    fn node_of(&self, addr: SocketAddr) -> u16 {
        let index = self
            .addrs
            .iter()
            .position(|a| *a == addr)
            .expect("a replica's address");
        u16::try_from(index + 1).expect("few replicas")
    }

    fn odd(&self, what: String) {
        let mut odd = self.odd_replies.lock().expect("not poisoned");
        if odd.len() < 1000 {
            odd.push(what);
        }
    }

    /// One client: operations until `stop`, reconnecting (to the next replica, under a new
    /// client id) after every operation of unknown outcome.
    pub async fn client(self: Arc<Self>, index: usize, mut stop: watch::Receiver<bool>) {
        let mut rng = SmallRng::seed_from_u64(self.config.seed ^ ((index as u64 + 1) << 32));
        let mut connection: Option<Connection> = None;
        let mut client = self.new_client_id();
        let mut seq = 0u64;
        while !*stop.borrow() {
            let Some(conn) = connection.as_mut() else {
                connection = Connection::connect_or_pause(self.next_addr(), &mut stop).await;
                continue;
            };
            let (key, hint) = self.keys.choose(client, &mut rng);
            seq += 1;
            let unique = format!("{index}.{seq}");
            let (cmd, queued) = match transaction(&key, &unique, &mut rng) {
                Some(queued) => (args(&["MULTI", &key]), queued),
                None => (
                    command(&key, hint.as_deref(), &unique, unix_ms(), &mut rng),
                    Vec::new(),
                ),
            };
            let outcome = self.run_op(conn, client, cmd.clone(), queued, false).await;
            match &outcome {
                Outcome::Ok(output) => self.keys.note(&key, false, hint_from(&cmd, output)),
                Outcome::Fail => {
                    self.keys.note(&key, false, None);
                    tokio::time::sleep(Duration::from_millis(rng.random_range(5..20))).await;
                }
                Outcome::Unknown => {
                    self.keys.note(&key, true, None);
                    self.keys.abandon(client);
                    connection = None;
                    client = self.new_client_id();
                }
            }
            if !self.config.think.is_zero() {
                tokio::time::sleep(self.config.think).await;
            }
        }
    }

    /// Reads every key once more (GET, SMEMBERS, HGETALL, LRANGE, ZRANGE, or for a lock an
    /// acquisition by a new owner, which tells its fence; recorded in the history), through the replicas in turn,
    /// retrying until an answer arrives or `timeout` passes. Returns the keys that could not be
    /// read.
    pub async fn final_reads(&self, timeout: Duration) -> Vec<String> {
        let deadline = tokio::time::Instant::now() + timeout;
        let mut unread = Vec::new();
        let mut connection: Option<Connection> = None;
        let mut client = self.new_client_id();
        for key in self.keys.all_keys() {
            let lease = FINAL_LEASE_MS.to_string();
            let read = match KeyKind::of(&key) {
                Some(KeyKind::Set) => args(&["SMEMBERS", &key]),
                Some(KeyKind::Lock) => args(&["LOCK.ACQUIRE", &key, FINAL_OWNER, &lease]),
                Some(KeyKind::Hash) => args(&["HGETALL", &key]),
                Some(KeyKind::List) => args(&["LRANGE", &key, "0", "-1"]),
                Some(KeyKind::ZSet) => args(&["ZRANGE", &key, "0", "-1", "WITHSCORES"]),
                _ => args(&["GET", &key]),
            };
            let mut done = false;
            while !done && tokio::time::Instant::now() < deadline {
                let Some(conn) = connection.as_mut() else {
                    match Connection::connect(self.next_addr(), Duration::from_millis(500)).await {
                        Ok(c) => connection = Some(c),
                        Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
                    }
                    continue;
                };
                match self
                    .run_op(conn, client, read.clone(), Vec::new(), true)
                    .await
                {
                    Outcome::Ok(_) => done = true,
                    Outcome::Fail => tokio::time::sleep(Duration::from_millis(50)).await,
                    Outcome::Unknown => {
                        connection = None;
                        client = self.new_client_id();
                    }
                }
            }
            if !done {
                unread.push(key);
            }
        }
        unread
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> WorkloadConfig {
        WorkloadConfig {
            clients: 4,
            keys: 2,
            kinds: vec![KeyKind::Counter, KeyKind::Register, KeyKind::Set],
            ops_per_key: 5,
            unknowns_per_key: 2,
            op_timeout: Duration::from_secs(1),
            think: Duration::ZERO,
            stamp_slack_ms: 0,
            seed: 1,
        }
    }

    #[test]
    fn keys_roll_over_by_operations_unknowns_and_clients() {
        let space = KeySpace::new(config());
        let mut rng = SmallRng::seed_from_u64(1);
        let mut per_key = std::collections::BTreeMap::<String, (usize, BTreeSet<u64>)>::new();
        for i in 0..200u64 {
            let client = i % 40;
            let (key, _) = space.choose(client, &mut rng);
            let entry = per_key.entry(key.clone()).or_default();
            entry.0 += 1;
            entry.1.insert(client);
            if i % 7 == 0 {
                space.note(&key, true, None);
            }
        }
        for (key, (ops, clients)) in &per_key {
            assert!(*ops <= 5, "{key}: {ops} operations");
            assert!(clients.len() <= KEY_CLIENTS_MAX, "{key}");
        }
        assert_eq!(space.all_keys().len(), per_key.len());
    }

    #[test]
    fn keys_whose_clients_all_left_make_way_for_fresh_ones() {
        let space = KeySpace::new(WorkloadConfig {
            keys: 1,
            ops_per_key: 1000,
            unknowns_per_key: 1000,
            ..config()
        });
        let mut rng = SmallRng::seed_from_u64(3);
        let ids = 0..KEY_CLIENTS_MAX as u64;
        let first: BTreeSet<String> = ids.clone().map(|c| space.choose(c, &mut rng).0).collect();
        assert_eq!(first.len(), 1, "one key for its first 16 clients");
        // A client that keeps its id keeps the full key.
        assert!(first.contains(&space.choose(0, &mut rng).0));
        for c in ids {
            space.abandon(c);
        }
        // Every id of the full key was given up: the next client gets a fresh key.
        let next = space.choose(100, &mut rng).0;
        assert!(!first.contains(&next), "{next}");
        assert_eq!(space.all_keys().len(), 2);
    }

    #[test]
    fn the_first_slots_are_the_busiest() {
        let mut rng = SmallRng::seed_from_u64(4);
        let mut hits = [0u32; 16];
        for _ in 0..100_000 {
            hits[zipf_slot(16, &mut rng)] += 1;
        }
        // 1 / (1 + 1/2 + ... + 1/16) = 29.6 % and a sixteenth of that, 1.8 %.
        assert!((28_000..31_000).contains(&hits[0]), "{hits:?}");
        assert!((1_500..2_200).contains(&hits[15]), "{hits:?}");
        assert!(hits.windows(2).all(|w| w[0] > w[1]), "{hits:?}");
        assert_eq!(zipf_slot(1, &mut rng), 0);
    }

    #[test]
    fn key_kinds_parse_by_name() {
        for kind in KINDS {
            assert_eq!(KeyKind::parse(kind.name()), Ok(kind));
            assert_eq!(KeyKind::of(&format!("{}7", kind.prefix())), Some(kind));
        }
        assert!(KeyKind::parse("stream").is_err());
    }

    #[test]
    fn commands_match_their_key_kind() {
        let mut rng = SmallRng::seed_from_u64(2);
        let mut names = BTreeSet::new();
        for key in ["c1", "r2", "s3", "e4", "l5", "h6", "q7", "z8", "b9"] {
            for _ in 0..1000 {
                let cmd = command(key, Some("o2"), "u", 1_000_000, &mut rng);
                assert_eq!(cmd[1], key);
                let allowed: &[&str] = match KeyKind::of(key).unwrap() {
                    KeyKind::Counter => &["INCR", "INCRBY", "GET"],
                    KeyKind::Register => &["SET", "GET", "DEL", "DELEX"],
                    KeyKind::Set => &["SADD", "SREM", "SMEMBERS", "SCARD"],
                    KeyKind::Expiring => &["SET", "PEXPIRE", "PERSIST", "GET", "EXISTS", "PTTL"],
                    KeyKind::Lock => &["LOCK.ACQUIRE", "LOCK.RELEASE"],
                    KeyKind::Hash => &["HSET", "HINCRBY", "HGET", "HGETALL", "HDEL"],
                    KeyKind::List => &["LPUSH", "RPUSH", "LPOP", "RPOP", "LRANGE", "LLEN"],
                    KeyKind::ZSet => &["ZADD", "ZINCRBY", "ZSCORE", "ZRANGE", "ZREM"],
                    KeyKind::Entry => &["SET", "GET", "DEL"],
                };
                assert!(allowed.contains(&cmd[0].as_str()), "{cmd:?}");
                if key == "b9" && cmd[0] == "SET" {
                    // Only what the B+-tree service serves: an insert or an update.
                    assert_eq!(cmd.len(), 4, "{cmd:?}");
                    names.insert(format!("entry {}", cmd[3]));
                }
                names.insert(match cmd[0].as_str() {
                    "SET" => format!("SET {}", cmd.get(3).map_or("", String::as_str)),
                    name => name.to_string(),
                });
                if let Some(i) = cmd.iter().position(|a| a == "PX" || a == "PXAT") {
                    let at: u64 = cmd[i + 1].parse().unwrap();
                    let ttl = if cmd[i] == "PXAT" { at - 1_000_000 } else { at };
                    assert!((TTL_MS.0..=TTL_MS.1).contains(&ttl), "{cmd:?}");
                }
            }
        }
        // Every form of the expiring kinds and of entries comes up.
        for form in [
            "entry NX",
            "entry XX",
            "SET PX",
            "SET PXAT",
            "SET KEEPTTL",
            "SET ",
            "PEXPIRE",
            "PERSIST",
        ] {
            assert!(names.contains(form), "{form}: {names:?}");
        }
    }

    #[test]
    fn transactions_come_only_on_collections_and_start_with_a_write() {
        let mut rng = SmallRng::seed_from_u64(5);
        for key in ["c1", "r2", "s3", "e4", "l5"] {
            assert!((0..200).all(|_| transaction(key, "u", &mut rng).is_none()));
        }
        for key in ["h6", "q7", "z8"] {
            let all: Vec<_> = (0..800)
                .filter_map(|_| transaction(key, "u", &mut rng))
                .collect();
            assert!((50..150).contains(&all.len()), "{key}: {}", all.len());
            for queued in all {
                assert_eq!(queued.len(), 2);
                assert!(queued.iter().all(|cmd| cmd[1] == key));
                assert!(
                    !["HGET", "HGETALL", "LRANGE", "LLEN", "ZSCORE", "ZRANGE"]
                        .contains(&queued[0][0].as_str()),
                    "{queued:?}"
                );
            }
        }
    }

    fn op(cmd: &[&str], call: u64, ret: u64, output: Output, final_read: bool) -> Op {
        Op {
            client: 1,
            queued: Vec::new(),
            cmd: args(cmd),
            call,
            ret,
            outcome: Outcome::Ok(output),
            final_read,
            stamp: None,
        }
    }

    #[test]
    fn expired_reads_and_takeovers_are_counted_from_replies() {
        let dir = tempfile::tempdir().unwrap();
        let clock = Clock::start();
        let history = History::create(&dir.path().join("h"), clock.epoch_ms()).unwrap();
        let w = Workload::new(config(), Vec::new(), Arc::default(), clock, history);
        // Absent before any SET: not expired.
        w.observe(&op(&["GET", "e1"], 1, 2, Output::Nil, false));
        w.observe(&op(
            &["SET", "e1", "v", "PX", "50"],
            3,
            4,
            Output::Ok,
            false,
        ));
        // Sent before the SET returned: it may have come first.
        w.observe(&op(&["EXISTS", "e1"], 3, 9, Output::Int(0), false));
        w.observe(&op(&["PTTL", "e1"], 5, 9, Output::Int(-2), false));
        w.observe(&op(&["GET", "e1"], 10, 11, Output::Nil, true));
        w.observe(&op(
            &["LOCK.ACQUIRE", "l1", "o1", "50"],
            1,
            2,
            Output::Int(1),
            false,
        ));
        w.observe(&op(
            &["LOCK.ACQUIRE", "l1", "o2", "50"],
            3,
            4,
            Output::Nil,
            false,
        ));
        w.observe(&op(
            &["LOCK.ACQUIRE", "l1", "o2", "50"],
            5,
            6,
            Output::Int(2),
            false,
        ));
        w.observe(&op(
            &["LOCK.RELEASE", "l1", "o2"],
            7,
            8,
            Output::Int(1),
            false,
        ));
        // Free after a release: not a takeover.
        w.observe(&op(
            &["LOCK.ACQUIRE", "l1", "o3", "50"],
            9,
            10,
            Output::Int(3),
            false,
        ));
        assert_eq!(
            w.expiry_stats(),
            ExpiryStats {
                expired_reads: 1,
                expired_final_reads: 1,
                takeovers: 1,
                refused: 1,
            }
        );
    }
}
