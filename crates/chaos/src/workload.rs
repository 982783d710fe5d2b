//! The workload: concurrent clients running a mix of register commands on a rolling window of
//! fresh keys, every operation recorded in the history; and the final reads of every key.
//!
//! Keys come in three kinds, by the first letter of their name: counters (`c…`: INCR, INCRBY,
//! GET), registers (`r…`: SET, SET NX, GET, DEL, DELEX IFEQ) and sets (`s…`: SADD, SREM,
//! SMEMBERS, SCARD). A key takes at most `ops_per_key` operations, `unknowns_per_key` operations
//! of unknown outcome and [`KEY_CLIENTS_MAX`] client ids, then it is retired and a fresh key
//! takes its place, which keeps every key's history small enough for the checker.
use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rand::rngs::SmallRng;
use rand::seq::IndexedRandom;
use rand::{Rng, SeedableRng};
use tokio::sync::watch;

use crate::client::{Connection, RequestError};
use crate::history::{classify, Clock, History, Op, Outcome, Output};

/// The most client ids that operate on one key.
pub const KEY_CLIENTS_MAX: usize = 16;

/// What a key holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum KeyKind {
    /// INCR, INCRBY, GET.
    Counter,
    /// SET, SET NX, GET, DEL, DELEX IFEQ.
    Register,
    /// SADD, SREM, SMEMBERS, SCARD.
    Set,
}

impl KeyKind {
    /// The kind of key `name`.
    pub fn of(name: &str) -> Option<KeyKind> {
        match name.as_bytes().first()? {
            b'c' => Some(KeyKind::Counter),
            b'r' => Some(KeyKind::Register),
            b's' => Some(KeyKind::Set),
            _ => None,
        }
    }

    fn prefix(self) -> char {
        match self {
            KeyKind::Counter => 'c',
            KeyKind::Register => 'r',
            KeyKind::Set => 's',
        }
    }

    /// Parses `counter`, `register` or `set`.
    pub fn parse(s: &str) -> Result<KeyKind, String> {
        match s {
            "counter" => Ok(KeyKind::Counter),
            "register" => Ok(KeyKind::Register),
            "set" => Ok(KeyKind::Set),
            other => Err(format!(
                "unknown key kind {other:?} (counter, register, set)"
            )),
        }
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

    /// Picks a key for the next operation of `client` and returns it with a hint (a recent
    /// value or member, if any).
    pub fn choose(&self, client: u64, rng: &mut SmallRng) -> (String, Option<String>) {
        let mut guard = self.table.lock().expect("not poisoned");
        let table = &mut *guard;
        while table.active.len() < self.config.keys.max(1) {
            let key = self.fresh(table, rng);
            table.active.push(key);
        }
        let start = rng.random_range(0..table.active.len());
        let n = table.active.len();
        let usable = |k: &KeyState| {
            k.ops < self.config.ops_per_key
                && k.unknowns < self.config.unknowns_per_key
                && (k.clients.contains(&client) || k.clients.len() < KEY_CLIENTS_MAX)
        };
        let slot = (0..n)
            .map(|i| (start + i) % n)
            .find(|&i| usable(&table.active[i]))
            .unwrap_or_else(|| {
                // Retire a key nobody can use any more (or that this client cannot join).
                let i = (0..n)
                    .map(|i| (start + i) % n)
                    .find(|&i| {
                        let k = &table.active[i];
                        k.ops >= self.config.ops_per_key
                            || k.unknowns >= self.config.unknowns_per_key
                    })
                    .unwrap_or(start);
                table.active[i] = self.fresh(table, rng);
                i
            });
        let key = &mut table.active[slot];
        key.ops += 1;
        key.clients.insert(client);
        (key.name.clone(), key.hints.choose(rng).cloned())
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

fn args(parts: &[&str]) -> Vec<String> {
    parts.iter().map(|s| (*s).to_string()).collect()
}

/// The next command on `key`; `unique` is a value never used before.
fn command(key: &str, hint: Option<&str>, unique: &str, rng: &mut SmallRng) -> Vec<String> {
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
    }
}

/// What an answered operation teaches about its key's likely values or members.
fn hint_from(cmd: &[String], output: &Output) -> Option<String> {
    match (cmd[0].as_str(), output) {
        ("SET", Output::Ok) | ("SADD", Output::Int(_)) => Some(cmd[2].clone()),
        ("GET", Output::Bulk(v)) if KeyKind::of(&cmd[1]) == Some(KeyKind::Register) => {
            Some(v.clone())
        }
        // The last member listed: SREM then mostly removes a present member, which keeps sets
        // small (and the checker fast).
        ("SMEMBERS", Output::Array(members)) => members.last().cloned(),
        _ => None,
    }
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
    next_client: AtomicU64,
    next_replica: AtomicUsize,
    config: WorkloadConfig,
    /// Error replies the model does not know (recorded as unknown), for the summary.
    pub odd_replies: Mutex<Vec<String>>,
}

impl Workload {
    /// A workload against the replicas at `addrs`.
    pub fn new(
        config: WorkloadConfig,
        addrs: Vec<SocketAddr>,
        clock: Clock,
        history: History,
    ) -> Arc<Workload> {
        Arc::new(Workload {
            keys: KeySpace::new(config.clone()),
            history,
            clock,
            addrs,
            next_client: AtomicU64::new(1),
            next_replica: AtomicUsize::new(0),
            config,
            odd_replies: Mutex::new(Vec::new()),
        })
    }

    /// A client id never used before.
    pub fn new_client_id(&self) -> u64 {
        self.next_client.fetch_add(1, Ordering::Relaxed)
    }

    fn next_addr(&self) -> SocketAddr {
        let i = self.next_replica.fetch_add(1, Ordering::Relaxed);
        self.addrs[i % self.addrs.len()]
    }

    /// Runs one operation on `connection` and records it. Returns its outcome; `Unknown` means
    /// the connection must not be used again.
    pub async fn run_op(
        &self,
        connection: &mut Connection,
        client: u64,
        cmd: Vec<String>,
        final_read: bool,
    ) -> Outcome {
        let call = self.clock.now();
        let result = tokio::time::timeout(self.config.op_timeout, connection.request(&cmd)).await;
        let ret = self.clock.now();
        let outcome = match result {
            Err(_) => Outcome::Unknown,
            Ok(Err(RequestError::Io(_) | RequestError::Closed)) => Outcome::Unknown,
            Ok(Err(e @ RequestError::Bad(_))) => {
                self.odd(format!("{cmd:?}: {e}"));
                Outcome::Unknown
            }
            Ok(Ok(reply)) => classify(&reply).unwrap_or_else(|why| {
                self.odd(format!("{cmd:?}: {why}"));
                Outcome::Unknown
            }),
        };
        self.history.push(Op {
            client,
            cmd,
            call,
            ret,
            outcome: outcome.clone(),
            final_read,
        });
        outcome
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
                match Connection::connect(self.next_addr(), Duration::from_millis(500)).await {
                    Ok(c) => connection = Some(c),
                    Err(_) => {
                        tokio::select! {
                            () = tokio::time::sleep(Duration::from_millis(50)) => {}
                            _ = stop.changed() => {}
                        }
                    }
                }
                continue;
            };
            let (key, hint) = self.keys.choose(client, &mut rng);
            seq += 1;
            let unique = format!("{index}.{seq}");
            let cmd = command(&key, hint.as_deref(), &unique, &mut rng);
            let outcome = self.run_op(conn, client, cmd.clone(), false).await;
            match &outcome {
                Outcome::Ok(output) => self.keys.note(&key, false, hint_from(&cmd, output)),
                Outcome::Fail => {
                    self.keys.note(&key, false, None);
                    tokio::time::sleep(Duration::from_millis(rng.random_range(5..20))).await;
                }
                Outcome::Unknown => {
                    self.keys.note(&key, true, None);
                    connection = None;
                    client = self.new_client_id();
                }
            }
            if !self.config.think.is_zero() {
                tokio::time::sleep(self.config.think).await;
            }
        }
    }

    /// Reads every key once more (GET or SMEMBERS, recorded in the history), through the
    /// replicas in turn, retrying until an answer arrives or `timeout` passes. Returns the
    /// keys that could not be read.
    pub async fn final_reads(&self, timeout: Duration) -> Vec<String> {
        let deadline = tokio::time::Instant::now() + timeout;
        let mut unread = Vec::new();
        let mut connection: Option<Connection> = None;
        let mut client = self.new_client_id();
        for key in self.keys.all_keys() {
            let name = match KeyKind::of(&key) {
                Some(KeyKind::Set) => "SMEMBERS",
                _ => "GET",
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
                match self.run_op(conn, client, args(&[name, &key]), true).await {
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
    fn commands_match_their_key_kind() {
        let mut rng = SmallRng::seed_from_u64(2);
        for key in ["c1", "r2", "s3"] {
            for _ in 0..100 {
                let cmd = command(key, Some("x"), "u", &mut rng);
                assert_eq!(cmd[1], key);
                let ok = match KeyKind::of(key).unwrap() {
                    KeyKind::Counter => ["INCR", "INCRBY", "GET"].contains(&cmd[0].as_str()),
                    KeyKind::Register => ["SET", "GET", "DEL", "DELEX"].contains(&cmd[0].as_str()),
                    KeyKind::Set => {
                        ["SADD", "SREM", "SMEMBERS", "SCARD"].contains(&cmd[0].as_str())
                    }
                };
                assert!(ok, "{cmd:?}");
            }
        }
    }
}
