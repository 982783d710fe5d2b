//! Every node serves every key (docs/ring.md §3, §5 item 2): on a ring, a command on keys this
//! node does not hold is forwarded to the first live replica of their slot, and its reply is
//! handed back to the client as the replica wrote it.
//!
//! # The link
//!
//! A node forwards over Redis connections to the other nodes' client addresses (the ones
//! `CLUSTER SLOTS` names), one per node and protocol, opened at the first command for that
//! node and shared by every connection of this node: commands are pipelined on it and its
//! replies come back in order. It logs in as the default user with `requirepass` (the
//! forwarding node has already checked the client's own permissions) and, for RESP3 clients,
//! speaks RESP3, so every reply reaches the client byte for byte as the replica wrote it
//! ([`logless_redis::reply`]). The peer transport was the other choice; its links carry one
//! engine's messages per shard and would need a second message kind and a codec for
//! commands and replies, while a client connection already carries both.
//!
//! # Exactly once
//!
//! The forwarding node sends each command once and never again: the replica's proposer mints
//! the command's request id and keeps it through every retry of its own, exactly as for a
//! client connected to it, so a forwarded command is applied at most once, and once if the
//! replica answers. What the forwarding node cannot know is the fate of a command written on a
//! link that broke (or went silent past the request timeout) before its reply: that is
//! answered `UNCERTAIN`, as a timed-out command is. A command that never reached the link (no
//! connection to the replica) is answered `TRYAGAIN`: it was not applied.
//!
//! # Which replica, and which commands
//!
//! The first replica of the slot (the one `CLUSTER SLOTS` names first and clients are sent to
//! by `MOVED`) whose peer link is up, else the first. A command over several keys is
//! forwarded when every key's slot has the same replicas; keys held by different replicas are
//! refused with `CROSSSLOT`, as Redis Cluster refuses keys of different slots (a hash tag
//! `{…}` puts keys in one slot). A transaction (MULTI … EXEC) is queued by this node's
//! session, so only one on keys this node holds runs; others are refused at EXEC.
//!
//! # A joint stage
//!
//! While the ring moves from configuration `e` to `e + 1`, commands are forwarded by `e`'s
//! replicas, whose copies the mover is still filling the new ones from, but a node runs here
//! the commands of every slot it replicates in **either** configuration, as cluster mode serves
//! them ([`crate::cluster`]): every replica of both is an acceptor of the slot's joint quorums.
//! Forwarding a slot this node gains to one of its old replicas instead could come back: an old
//! replica that already installed `Stable(e+1)`, and holds the slot no more, redirects it with
//! `MOVED` to the slot's new first replica, possibly this node, which would forward it again.
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use bytes::{Buf, BufMut, Bytes, BytesMut};
use logless_placement::{key_slot, Configuration, NodeId, ReplicaSet};
use logless_redis::reply::parse_reply;
use logless_redis::resp::{Protocol, Value};
use logless_redis::session::Step;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, oneshot};
use tracing::{debug, warn};

use crate::config::{ConfigError, NodeConfig};
use crate::ring_register::RingStage;

/// How long opening a link to a node, and its log-in, may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

/// How long a link may go without a reply beyond the request timeout (in which the replica
/// answers every command, `UNCERTAIN` at worst) before it counts as broken.
const REPLY_MARGIN: Duration = Duration::from_secs(2);

/// The most request bytes written to a link at once.
const WRITE_BATCH_BYTES: usize = 1 << 20;

/// The text a transaction on keys this node does not hold is refused with.
pub const EXEC_ELSEWHERE: &str = "CROSSSLOT a transaction runs on the node that holds its \
                                  keys, and this node holds none of them: send MULTI ... EXEC \
                                  to one of their replicas (CLUSTER SLOTS)";

/// The text a command is refused with when no replica of its keys could be reached.
pub const UNREACHABLE: &str = "TRYAGAIN no replica of this key is reachable from this node; \
                               not applied";

/// How a refused log-in on a new link is reported.
const LOGIN_FAILED: &str = "logging in: ";

/// How long a node no link could be opened to is passed over.
const DOWN_FOR: Duration = Duration::from_secs(1);

/// The text keys held by different replicas are refused with.
pub const CROSS_REPLICAS: &str = "CROSSSLOT Keys in request are held by different replicas \
                                  (use a hash tag {...} to keep keys together)";

/// What to do with a command on a ring.
#[derive(Debug, PartialEq)]
pub enum Route {
    /// This node holds every key it names.
    Local,
    /// Forward it to a replica of these.
    Forward(ReplicaSet),
    /// Refuse it with this error.
    Refuse(Value),
}

/// Forwarded commands, as `/metrics` shows them.
#[derive(Debug, Default)]
pub struct ForwardCounters {
    /// Commands forwarded to another node.
    pub forwarded: AtomicU64,
    /// Of those, answered `UNCERTAIN` because their link broke or went silent.
    pub uncertain: AtomicU64,
    /// Of those, answered `TRYAGAIN` because no link to the replica could be opened.
    pub unreachable: AtomicU64,
    /// Commands refused with `CROSSSLOT` for keys held by different replicas.
    pub cross: AtomicU64,
}

/// A node's forwarding on a ring: the ring, the other nodes' client addresses and the links.
pub struct Forwarder {
    /// The configuration it routes by: the one the node installed last
    /// ([`crate::ring_watch`]; the old one while the ring is in a joint stage).
    ring: RwLock<Arc<Configuration>>,
    /// In a joint stage, the configuration the ring moves to: keys whose replicas there
    /// include this node run here too (module doc, "A joint stage").
    joining: RwLock<Option<Arc<Configuration>>>,
    me: NodeId,
    slots_held: AtomicU64,
    client_addrs: BTreeMap<u16, String>,
    password: Option<Vec<u8>>,
    patience: Duration,
    bulk_bytes_max: usize,
    links: Mutex<HashMap<(u16, bool), mpsc::UnboundedSender<Job>>>,
    /// Nodes no link could be opened to lately, and until when they are passed over.
    down: Mutex<HashMap<u16, Instant>>,
    /// What it forwarded.
    pub counters: Arc<ForwardCounters>,
}

/// One forwarded command: its request bytes, where its reply goes, the replicas it may go to
/// and how many of them it was sent to without being written.
struct Job {
    request: BytesMut,
    reply: oneshot::Sender<Value>,
    replicas: ReplicaSet,
    resp3: bool,
    attempts: usize,
}

impl Forwarder {
    /// The forwarding of a node of `config`; `None` unless its nodes form a ring.
    pub fn of(config: &NodeConfig) -> Result<Option<Forwarder>, ConfigError> {
        if !config.is_ring() {
            return Ok(None);
        }
        let why = "a ring forwards commands to them";
        let client_addrs = config
            .peers
            .iter()
            .map(|peer| Ok((peer.id, crate::cluster::client_addr_of(config, peer, why)?)))
            .collect::<Result<_, ConfigError>>()?;
        let password = crate::ring::requirepass(config)?;
        let ring = crate::ring::configuration(config)?;
        let me = NodeId(config.node_id);
        Ok(Some(Forwarder {
            slots_held: AtomicU64::new(crate::ring::slots_held(&ring, me)),
            ring: RwLock::new(Arc::new(ring)),
            joining: RwLock::default(),
            me,
            client_addrs,
            password,
            patience: Duration::from_millis(config.request_timeout_ms) + REPLY_MARGIN,
            bulk_bytes_max: config.bulk_bytes_max(),
            links: Mutex::default(),
            down: Mutex::default(),
            counters: Arc::default(),
        }))
    }

    /// The ring it forwards on.
    pub fn ring(&self) -> Arc<Configuration> {
        self.ring.read().expect("not poisoned").clone()
    }

    /// Routes by `stage` from now on (the node installed it): by its serving configuration,
    /// and in a joint stage running here also the keys this node replicates in the new one.
    pub fn set_stage(&self, stage: &RingStage) {
        let ring = stage.serving().clone();
        let joining = match stage {
            RingStage::Stable(_) => None,
            RingStage::Joint { new, .. } => Some(Arc::new(new.clone())),
        };
        self.slots_held
            .store(crate::ring::slots_held(&ring, self.me), Ordering::Relaxed);
        *self.joining.write().expect("not poisoned") = joining;
        *self.ring.write().expect("not poisoned") = Arc::new(ring);
    }

    /// Every node's client address, by node id.
    pub fn client_addrs(&self) -> &BTreeMap<u16, String> {
        &self.client_addrs
    }

    /// The slots this node replicates.
    pub fn slots_held(&self) -> u64 {
        self.slots_held.load(Ordering::Relaxed)
    }

    /// Where the request whose first argument is `name`, for which the session decided
    /// `step`, runs.
    pub fn route(&self, name: &[u8], step: &Step) -> Route {
        let mut keys: Vec<&[u8]> = match step {
            Step::One { key, .. } => vec![key],
            Step::Many { parts, .. } => parts.iter().map(|(key, _)| key.as_ref()).collect(),
            _ => return Route::Local,
        };
        keys.dedup();
        let ring = self.ring();
        let Some((first, together)) = replicas_of(&ring, &keys) else {
            return Route::Local;
        };
        if together && first.contains(self.me) {
            return Route::Local;
        }
        let joining = self.joining.read().expect("not poisoned").clone();
        if let Some((new, true)) = joining.and_then(|new| replicas_of(&new, &keys)) {
            if new.contains(self.me) {
                return Route::Local;
            }
        }
        if !together {
            self.counters.cross.fetch_add(1, Ordering::Relaxed);
            return Route::Refuse(Value::Error(CROSS_REPLICAS.into()));
        }
        if name.eq_ignore_ascii_case(b"exec") {
            return Route::Refuse(Value::Error(EXEC_ELSEWHERE.into()));
        }
        Route::Forward(first)
    }

    /// Forwards the request `args` to the first of `replicas` whose peer link is up (`up`
    /// says) and that was not found unreachable lately, or the first of those, in `protocol`;
    /// the receiver gets its reply.
    pub fn forward(
        self: &Arc<Self>,
        replicas: ReplicaSet,
        up: impl Fn(u16) -> bool,
        args: &[Bytes],
        protocol: Protocol,
    ) -> Forwarded {
        let (tx, rx) = oneshot::channel();
        self.counters.forwarded.fetch_add(1, Ordering::Relaxed);
        let job = Job {
            request: encode_request(args),
            reply: tx,
            replicas,
            resp3: protocol == Protocol::Resp3,
            attempts: 0,
        };
        self.send(job, up);
        Forwarded { rx }
    }

    /// Hands `job` to the link to the replica it should go to next, or answers it `TRYAGAIN`
    /// when every replica was tried or found unreachable.
    fn send(self: &Arc<Self>, mut job: Job, up: impl Fn(u16) -> bool) {
        let now = Instant::now();
        let target = {
            let mut down = self.down.lock().expect("not poisoned");
            down.retain(|_, until| *until > now);
            let candidates: Vec<u16> = job
                .replicas
                .nodes()
                .iter()
                .map(|n| n.0)
                .filter(|n| !down.contains_key(n))
                .collect();
            candidates
                .iter()
                .copied()
                .find(|&n| up(n))
                .or(candidates.first().copied())
        };
        let Some(target) = target.filter(|_| job.attempts < job.replicas.nodes().len()) else {
            self.counters.unreachable.fetch_add(1, Ordering::Relaxed);
            let _ = job.reply.send(Value::Error(UNREACHABLE.into()));
            return;
        };
        job.attempts += 1;
        let resp3 = job.resp3;
        let mut links = self.links.lock().expect("not poisoned");
        // A link whose task ended (its replica went away) is closed: the job goes to a new one.
        let job = match links.get(&(target, resp3)).filter(|link| !link.is_closed()) {
            Some(link) => link.send(job).err().map(|refused| refused.0),
            None => Some(job),
        };
        if let Some(job) = job {
            let (link, jobs) = mpsc::unbounded_channel();
            let _ = link.send(job);
            links.insert((target, resp3), link);
            tokio::spawn(run_link(self.clone(), target, resp3, jobs));
        }
    }

    /// Sends nothing more to `target` for [`DOWN_FOR`].
    fn pass_over(&self, target: u16) {
        let until = Instant::now() + DOWN_FOR;
        self.down
            .lock()
            .expect("not poisoned")
            .insert(target, until);
    }

    /// Passes over `target` for a while, and sends the jobs that could not reach it to
    /// another replica: none of them was written.
    fn unreachable(self: &Arc<Self>, target: u16, jobs: Vec<Job>) {
        self.pass_over(target);
        for job in jobs {
            self.send(job, |_| true);
        }
    }

    /// The requests a new link opens with: log in, and speak `protocol`.
    fn greeting(&self, resp3: bool) -> Vec<BytesMut> {
        let password = self.password.clone().map(Bytes::from);
        let mut greeting = Vec::new();
        match (resp3, password) {
            (true, Some(password)) => greeting.push(encode_request(&[
                Bytes::from_static(b"HELLO"),
                Bytes::from_static(b"3"),
                Bytes::from_static(b"AUTH"),
                Bytes::from_static(b"default"),
                password,
            ])),
            (true, None) => greeting.push(encode_request(&[
                Bytes::from_static(b"HELLO"),
                Bytes::from_static(b"3"),
            ])),
            (false, Some(password)) => {
                greeting.push(encode_request(&[Bytes::from_static(b"AUTH"), password]));
            }
            (false, None) => {}
        }
        greeting
    }
}

/// A forwarded command's reply, on its way.
pub struct Forwarded {
    rx: oneshot::Receiver<Value>,
}

impl Forwarded {
    /// The reply; `TRYAGAIN` if the command was never written to a link.
    pub async fn reply(self) -> Value {
        self.rx
            .await
            .unwrap_or_else(|_| Value::Error(UNREACHABLE.into()))
    }
}

fn uncertain_reply(target: u16, why: &str) -> Value {
    Value::Error(format!(
        "UNCERTAIN the command was forwarded to node {target}, a replica of this key, and \
         {why} before its reply: it may or may not have been applied"
    ))
}

/// The replicas of the first of `keys` in `ring`, and whether every key has the same; `None`
/// without keys.
fn replicas_of(ring: &Configuration, keys: &[&[u8]]) -> Option<(ReplicaSet, bool)> {
    let mut sets = keys.iter().map(|key| ring.replicas(key_slot(key)));
    let first = sets.next()?;
    let together = sets.all(|set| same_nodes(&set, &first));
    Some((first, together))
}

/// Whether two replica sets have the same nodes (in any order).
fn same_nodes(a: &ReplicaSet, b: &ReplicaSet) -> bool {
    let sorted = |set: &ReplicaSet| {
        let mut nodes = set.nodes().to_vec();
        nodes.sort_unstable();
        nodes
    };
    sorted(a) == sorted(b)
}

/// `args` as a RESP request.
fn encode_request(args: &[Bytes]) -> BytesMut {
    let mut out = BytesMut::with_capacity(16 + args.iter().map(|a| a.len() + 16).sum::<usize>());
    logless_redis::resp::write_request(&mut out, args);
    out
}

/// One link to `target`: opens and greets, then writes the jobs as they come and hands the
/// replies back in order, until it breaks or every sender is gone. If it cannot be opened,
/// its jobs go to another replica.
async fn run_link(
    forwarder: Arc<Forwarder>,
    target: u16,
    resp3: bool,
    mut jobs: mpsc::UnboundedReceiver<Job>,
) {
    let addr = forwarder.client_addrs[&target].clone();
    let greeting = forwarder.greeting(resp3);
    let bulk_bytes_max = forwarder.bulk_bytes_max;
    let opened = tokio::time::timeout(CONNECT_TIMEOUT, open(&addr, &greeting, bulk_bytes_max))
        .await
        .unwrap_or_else(|_| Err("no answer".into()));
    let (read, write) = match opened {
        Ok(stream) => stream.into_split(),
        Err(why) => {
            if why.starts_with(LOGIN_FAILED) {
                // Not a node that is down: a configuration to fix (requirepass differs).
                warn!(target, %addr, %why, "cannot forward to node");
            } else {
                debug!(target, %addr, %why, "cannot forward to node");
            }
            jobs.close();
            let mut queued = Vec::new();
            while let Ok(job) = jobs.try_recv() {
                queued.push(job);
            }
            forwarder.unreachable(target, queued);
            return;
        }
    };
    let (in_flight, waiting) = mpsc::unbounded_channel();
    let reader = tokio::spawn(read_replies(
        read,
        waiting,
        target,
        forwarder.patience,
        bulk_bytes_max,
        forwarder.counters.clone(),
    ));
    // Links must not keep the forwarder (which keeps their senders) alive.
    let forwarder = Arc::downgrade(&forwarder);
    // The link ends when either side does: a reader that saw it break leaves a writer waiting
    // for jobs, which must not take any more.
    let mut reader = std::pin::pin!(reader);
    let silent = tokio::select! {
        () = write_requests(write, jobs, in_flight) => reader.await,
        ended = &mut reader => ended,
    };
    // A replica that took commands and answered none in time (stopped, or its disk hung) is
    // passed over like one that cannot be reached.
    if silent.unwrap_or(false) {
        if let Some(forwarder) = forwarder.upgrade() {
            forwarder.pass_over(target);
        }
    }
}

/// Connects to `addr` and sends the `greeting`, each answered without an error.
async fn open(
    addr: &str,
    greeting: &[BytesMut],
    bulk_bytes_max: usize,
) -> Result<TcpStream, String> {
    let mut stream = TcpStream::connect(addr).await.map_err(|e| e.to_string())?;
    let _ = stream.set_nodelay(true);
    let mut buf = BytesMut::new();
    for request in greeting {
        stream.write_all(request).await.map_err(|e| e.to_string())?;
        loop {
            if let Some((value, used)) = parse_reply(&buf, bulk_bytes_max)? {
                buf.advance(used);
                if let Value::Error(e) = value {
                    return Err(format!("{LOGIN_FAILED}{e}"));
                }
                break;
            }
            if stream.read_buf(&mut buf).await.map_err(|e| e.to_string())? == 0 {
                return Err("closed while logging in".into());
            }
        }
    }
    Ok(stream)
}

/// Writes the jobs' requests, each reply's sender handed to the reader first, in order.
async fn write_requests(
    mut write: OwnedWriteHalf,
    mut jobs: mpsc::UnboundedReceiver<Job>,
    in_flight: mpsc::UnboundedSender<oneshot::Sender<Value>>,
) {
    let mut batch = BytesMut::new();
    while let Some(job) = jobs.recv().await {
        let mut next = Some(job);
        while let Some(job) = next.take() {
            if in_flight.send(job.reply).is_err() {
                // The reader ended: the link broke. This job was not written (its sender is
                // dropped: `TRYAGAIN`), nor are the ones still queued.
                return;
            }
            batch.put_slice(&job.request);
            if batch.len() < WRITE_BATCH_BYTES {
                next = jobs.try_recv().ok();
            }
        }
        if write.write_all(&batch).await.is_err() {
            // The reader answers what was handed to it.
            return;
        }
        batch.clear();
    }
}

/// Reads the replies and hands each to the sender in `waiting`'s order; when the link breaks,
/// goes silent past `patience` or sends what is not a reply, answers every command written
/// and not answered `UNCERTAIN`. Ends true if it went silent.
async fn read_replies(
    mut read: OwnedReadHalf,
    mut waiting: mpsc::UnboundedReceiver<oneshot::Sender<Value>>,
    target: u16,
    patience: Duration,
    bulk_bytes_max: usize,
    counters: Arc<ForwardCounters>,
) -> bool {
    let mut buf = BytesMut::with_capacity(16 * 1024);
    let mut pending: VecDeque<oneshot::Sender<Value>> = VecDeque::new();
    let broken: &str = 'link: loop {
        while !pending.is_empty() {
            match parse_reply(&buf, bulk_bytes_max) {
                Ok(Some((value, used))) => {
                    buf.advance(used);
                    let reply = pending.pop_front().expect("not empty");
                    let _ = reply.send(value);
                }
                Ok(None) => break,
                Err(_) => break 'link "it sent what is not a reply",
            }
        }
        if pending.is_empty() {
            // A reply's sender is handed over before its request is written, but the reply may
            // be read before the sender is taken from `waiting` (both ready at once): bytes
            // are a stray only when no sender waits.
            while let Ok(reply) = waiting.try_recv() {
                pending.push_back(reply);
            }
            if !pending.is_empty() {
                continue;
            }
            if !buf.is_empty() {
                break "it sent what is not a reply";
            }
            tokio::select! {
                next = waiting.recv() => match next {
                    Some(reply) => pending.push_back(reply),
                    None => break "",
                },
                read = read.read_buf(&mut buf) => match read {
                    Ok(0) | Err(_) => break "",
                    Ok(_) => {}
                },
            }
            continue;
        }
        while let Ok(reply) = waiting.try_recv() {
            pending.push_back(reply);
        }
        match tokio::time::timeout(patience, read.read_buf(&mut buf)).await {
            Err(_) => break SILENT,
            Ok(Ok(0) | Err(_)) => break "the link broke",
            Ok(Ok(_)) => {}
        }
    };
    waiting.close();
    while let Ok(reply) = waiting.try_recv() {
        pending.push_back(reply);
    }
    if !pending.is_empty() {
        debug!(
            target,
            why = broken,
            "forwarding link ended with commands in flight"
        );
    }
    for reply in pending {
        counters.uncertain.fetch_add(1, Ordering::Relaxed);
        let _ = reply.send(uncertain_reply(target, broken));
    }
    broken == SILENT
}

/// Why a link that went silent ended.
const SILENT: &str = "it did not answer within the request timeout";

#[cfg(test)]
mod tests {
    use bytes::Bytes;
    use logless_commands::command::Command;
    use logless_redis::table::{Combine, ReplyShape};

    use super::*;
    use crate::config::PeerConfig;

    fn forwarder(node: u16) -> Forwarder {
        forwarder_to(node, |id| format!("127.0.0.1:{}", 7000 + id))
    }

    /// Node `node` of a ring of five with R = 3, each node's clients at `client`.
    fn forwarder_to(node: u16, client: impl Fn(u16) -> String) -> Forwarder {
        let config = NodeConfig {
            node_id: node,
            peers: (1..=5)
                .map(|id| PeerConfig {
                    id,
                    addr: format!("127.0.0.1:{}", 8000 + id),
                    client_addr: Some(client(id)),
                })
                .collect(),
            replication: 3,
            remove_dead_registers: Some(false),
            ..NodeConfig::default()
        };
        Forwarder::of(&config).unwrap().unwrap()
    }

    fn one(key: &[u8]) -> Step {
        Step::One {
            key: Bytes::copy_from_slice(key),
            command: Command::Get,
            shape: ReplyShape::Plain,
        }
    }

    #[test]
    fn keys_route_to_their_replicas() {
        let f = forwarder(1);
        let held = (0..1000)
            .map(|i| format!("k{i}"))
            .find(|k| {
                f.ring()
                    .replicas(key_slot(k.as_bytes()))
                    .contains(NodeId(1))
            })
            .unwrap();
        let elsewhere = (0..1000)
            .map(|i| format!("k{i}"))
            .find(|k| {
                !f.ring()
                    .replicas(key_slot(k.as_bytes()))
                    .contains(NodeId(1))
            })
            .unwrap();
        assert_eq!(f.route(b"get", &one(held.as_bytes())), Route::Local);
        let Route::Forward(set) = f.route(b"get", &one(elsewhere.as_bytes())) else {
            panic!("forwarded");
        };
        assert!(!set.contains(NodeId(1)));
        let many = |keys: &[&str]| Step::Many {
            parts: keys
                .iter()
                .map(|k| (Bytes::copy_from_slice(k.as_bytes()), Command::Get))
                .collect(),
            combine: Combine::Array,
        };
        let tagged = [&*format!("{{{elsewhere}}}a"), &*format!("{{{elsewhere}}}b")];
        assert!(matches!(
            f.route(b"mget", &many(&tagged)),
            Route::Forward(_)
        ));
        assert_eq!(
            f.route(b"exec", &many(&tagged)),
            Route::Refuse(Value::Error(EXEC_ELSEWHERE.into()))
        );
        assert_eq!(
            f.route(b"mget", &many(&[&held, &elsewhere])),
            Route::Refuse(Value::Error(CROSS_REPLICAS.into()))
        );
    }

    #[test]
    fn in_a_joint_stage_keys_the_node_gains_run_here() {
        let f = forwarder(1);
        let new = f.ring().as_ref().clone();
        let old = new.with_node_removed(NodeId(1)).unwrap();
        let key = |holds: bool| {
            (0..1000)
                .map(|i| format!("k{i}"))
                .find(|k| new.replicas(key_slot(k.as_bytes())).contains(NodeId(1)) == holds)
                .unwrap()
        };
        let (gained, other) = (key(true), key(false));
        f.set_stage(&RingStage::Stable(old.clone()));
        assert!(matches!(
            f.route(b"get", &one(gained.as_bytes())),
            Route::Forward(_)
        ));
        f.set_stage(&RingStage::Joint {
            old: old.clone(),
            new: new.clone(),
        });
        assert_eq!(f.route(b"get", &one(gained.as_bytes())), Route::Local);
        let Route::Forward(set) = f.route(b"get", &one(other.as_bytes())) else {
            panic!("a key node 1 holds in neither configuration is forwarded");
        };
        assert!(same_nodes(&set, &old.replicas(key_slot(other.as_bytes()))));
        f.set_stage(&RingStage::Stable(old));
        assert!(matches!(
            f.route(b"get", &one(gained.as_bytes())),
            Route::Forward(_)
        ));
    }

    /// The replicas of a key node 1 does not hold, and that key.
    fn elsewhere(f: &Forwarder) -> (ReplicaSet, Vec<Bytes>) {
        let key = (0..1000)
            .map(|i| format!("k{i}"))
            .find(|k| {
                !f.ring()
                    .replicas(key_slot(k.as_bytes()))
                    .contains(NodeId(1))
            })
            .unwrap();
        let set = f.ring().replicas(key_slot(key.as_bytes()));
        (set, vec![Bytes::from_static(b"INCR"), Bytes::from(key)])
    }

    #[tokio::test]
    async fn a_replica_silent_past_the_request_timeout_is_uncertain_and_passed_over() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        tokio::spawn(async move {
            let mut held = Vec::new();
            while let Ok((stream, _)) = listener.accept().await {
                held.push(stream);
            }
        });
        let mut f = forwarder_to(1, |_| addr.clone());
        f.patience = Duration::from_millis(100);
        let f = Arc::new(f);
        let (set, args) = elsewhere(&f);
        let reply = f
            .forward(set, |_| true, &args, Protocol::Resp2)
            .reply()
            .await;
        let Value::Error(e) = reply else {
            panic!("{reply:?}")
        };
        assert!(e.starts_with("UNCERTAIN ") && e.contains(SILENT), "{e}");
        let deadline = Instant::now() + Duration::from_secs(5);
        while f.down.lock().unwrap().is_empty() {
            assert!(
                Instant::now() < deadline,
                "the silent replica is passed over"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// A stand-in for the other nodes' client port: answers the first request it reads with
    /// `reply`, or closes the connection without an answer if there is none.
    async fn stand_in(reply: Option<&'static [u8]>) -> String {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                let mut buf = BytesMut::new();
                let _ = stream.read_buf(&mut buf).await;
                match reply {
                    Some(reply) => {
                        let _ = stream.write_all(reply).await;
                        let _ = stream.read_buf(&mut buf).await;
                    }
                    None => drop(stream),
                }
            }
        });
        addr
    }

    async fn forwarded_reply(addr: &str) -> Value {
        let f = Arc::new(forwarder_to(1, |_| addr.to_owned()));
        let (set, args) = elsewhere(&f);
        f.forward(set, |_| true, &args, Protocol::Resp2)
            .reply()
            .await
    }

    #[tokio::test]
    async fn a_reply_comes_back_as_the_replica_wrote_it() {
        let addr = stand_in(Some(b":7\r\n")).await;
        assert_eq!(forwarded_reply(&addr).await, Value::Int(7));
    }

    #[tokio::test]
    async fn a_link_that_breaks_after_the_command_was_written_answers_uncertain() {
        let addr = stand_in(None).await;
        let reply = forwarded_reply(&addr).await;
        let Value::Error(e) = reply else {
            panic!("{reply:?}")
        };
        assert!(e.starts_with("UNCERTAIN "), "{e}");
    }

    #[tokio::test]
    async fn no_replica_reachable_answers_tryagain_after_trying_each() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        drop(listener);
        let f = Arc::new(forwarder_to(1, |_| addr.clone()));
        let (set, args) = elsewhere(&f);
        let reply = f
            .forward(set, |_| true, &args, Protocol::Resp2)
            .reply()
            .await;
        assert_eq!(reply, Value::Error(UNREACHABLE.into()));
        assert_eq!(f.counters.unreachable.load(Ordering::Relaxed), 1);
        assert_eq!(f.down.lock().unwrap().len(), 3, "every replica tried");
    }

    /// A reply already read when its sender is still in the queue is that sender's reply,
    /// whichever of the two the reader sees first (it once took the bytes for a stray and
    /// answered `UNCERTAIN`). Each round has both ready before the reader starts.
    #[tokio::test]
    async fn a_reply_read_before_its_sender_is_taken_is_still_its_reply() {
        for round in 0..32 {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let addr = listener.local_addr().unwrap();
            let client = tokio::net::TcpStream::connect(addr).await.unwrap();
            let (mut server, _) = listener.accept().await.unwrap();
            server.write_all(b":7\r\n").await.unwrap();
            let (read, _write) = client.into_split();
            let (queue, waiting) = mpsc::unbounded_channel();
            let (reply, answer) = oneshot::channel();
            queue.send(reply).unwrap();
            tokio::time::sleep(Duration::from_millis(5)).await;
            let reader = tokio::spawn(read_replies(
                read,
                waiting,
                2,
                Duration::from_secs(5),
                1 << 20,
                Arc::new(ForwardCounters::default()),
            ));
            assert_eq!(answer.await.unwrap(), Value::Int(7), "round {round}");
            drop(queue);
            drop(server);
            reader.await.unwrap();
        }
    }

    #[test]
    fn requests_are_written_as_resp_arrays() {
        let request = encode_request(&[Bytes::from_static(b"SET"), Bytes::from_static(b"k")]);
        assert_eq!(&request[..], b"*2\r\n$3\r\nSET\r\n$1\r\nk\r\n");
    }
}
