//! The data mover of a ring change (docs/ring.md §4 step 3, "Data moves in the background"):
//! in a joint stage `Joint(e+1)`, each node writes the registers of the moving slots it syncs
//! through to their new replicas, so that the coordinator ([`crate::ring_change`]) may swap
//! `Joint(e+1)` for `Stable(e+1)` once every node reports its slots synced.
//!
//! # Who syncs a slot
//!
//! A moving slot (its replicas `O` at epoch `e` and `N` at `e + 1` differ) is synced by one
//! node: the first of `N` that is not in `O` (every moving slot has one). So the work is spread
//! over the nodes that receive data, as the design asks, and no key is written through by
//! several nodes at once; a node that syncs no slot reports itself synced at once.
//!
//! # Enumeration
//!
//! The keys of a slot are listed at a **majority of `O`** (the node syncing it is not one of
//! them): the members whose peer links are up first, in `O`'s order. The mover starts listing only
//! once the fence holds (docs/ring.md §4 step 2): for every slot it syncs, a majority of `O`
//! reported `Joint(e+1)` installed ([`crate::ring_watch`]), so no quorum of `O` alone decides
//! any more. A source lists **every register it holds a vote of, dead ones included**
//! (tombstones and expired values; `SCAN … VOTED`, `AcceptorState::holds_vote`), not only its
//! live keys: the last state each register was given before the joint stage — live or dead —
//! is held by a majority of `O`, and each majority of `O` has a member holding it (or a later
//! vote of the joint stage), so the union of their voted keys holds every register with a
//! state to move, and its write-through proposes that state (the highest vote its phase 1
//! meets, which meets a majority of `O`) to the new replicas. Listing only live keys was not
//! enough (chaos seed 51, docs/ring.md §4 "Dead registers"): a register dead at the listed
//! majority but holding an older *live* vote at a staying member outside it was not written
//! through, and a quorum of that member and a new replica (which held only the round floor)
//! then chose the older value again. A register holding only a promise, no vote, has no state
//! to move: the gaining node's round floor covers its rounds. A key written in the joint stage
//! is chosen by a majority of `N` already. Removal of dead registers is off on a ring, so a
//! register listed is still there when it is written through. The cost: dead registers move
//! too, one write-through each.
//!
//! *Transport*: a `SCAN` over a Redis connection to each source's client address (the one the
//! forwarder uses, [`crate::forward`]), logged in with the default user's `requirepass` like
//! the forwarder. SCAN walks a node's own copy page by page (a node answers it from its
//! shards, never forwarding it), which is exactly the listing needed, in bounded batches and
//! with no new request kind. Its cost is a pass over each source's copy, paced below; the
//! alternatives were a new peer message (the peer links carry one engine's messages per
//! shard) or an HTTP route on a port the nodes do not know of each other.
//!
//! # Write-through
//!
//! Each key found is written through by this node's own shard
//! (`Replica::handle_write_through`, through [`ShardInput::WriteThroughs`]), whose proposer
//! uses the joint stage's quorums (docs/ring.md §5, "joint quorums in the engine"): phase 1
//! under joint quorums (a majority of `O` and a majority of `N`) finds the register's highest
//! vote — the value chosen last, with the request ids that made it — and, unless it finds
//! nothing (⊥ stays ⊥), proposes it again with those request ids in the round of that phase 1,
//! to every acceptor of both sets; then it reads, and answers as GET does. A plain read would
//! not do: it answers from any consistent joint quorum, and the replicas `O` and `N` share
//! usually form one, so the joining replica would get nothing. After the write-through a
//! majority of `N` holds the value (all of `N` when they answer), and a retry of the request
//! that made it is recognised there (exactly once). No client command reaches the entry point.
//! The reply of a string is its value, whose size paces the mover; a key of another type
//! answers WRONGTYPE, still after its write-through.
//!
//! # Pacing and progress
//!
//! A token bucket of `ring_move_bytes_per_sec` ([`crate::config::NodeConfig`]) bytes: each
//! batch spends the bytes of its keys and of the string values read, and the mover waits for
//! the bucket to refill before the next. Progress (slots, keys found, synced, in transit) is
//! in memory ([`Mover::progress`]), shown in `/status`, `/metrics` and in the node's report,
//! which `logless cluster status` shows. A mover that restarts (the node restarted, or it lost
//! a source) starts over: a write-through of a register already synced chooses the same
//! value, with the same request ids, again in a higher round, which changes nothing a client
//! can see; and the keys the restarted mover lists are still a superset of those to move (the
//! fence has held since the first listing).
use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::{Buf, Bytes, BytesMut};
use logless_commands::command::Reply;
use logless_placement::{key_slot, Configuration, NodeId as PlacedId, Slot, Stage, SLOTS};
use logless_redis::reply::parse_reply;
use logless_redis::resp::Value;
use logless_rmw::ids::Key;
use logless_rmw::placement::StageId;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::mpsc;
use tracing::{info, warn};

use crate::context::NodeContext;
use crate::ring_register::{high_key, stage_name, HighReport, RingStage};
use crate::ring_watch::RingState;
use crate::shard::{FloorRaise, ReplyTo, ShardInput};

/// Registers a SCAN page visits at a source (and so the most keys a batch writes through).
const SCAN_COUNT: usize = 256;

/// How long a source may take to answer a request.
const SOURCE_TIMEOUT: Duration = Duration::from_secs(10);

/// How long the mover waits before trying a source again, or reading the reports again.
const RETRY_PAUSE: Duration = Duration::from_millis(200);

/// How many times a key's write-through is tried in one pass before the pass fails.
const WRITE_ATTEMPTS: usize = 5;

/// What a batch spends per key besides its bytes: the register's messages.
const KEY_OVERHEAD_BYTES: u64 = 64;

/// A node's data mover: its progress in the joint stage it moves for.
#[derive(Debug, Default)]
pub struct Mover {
    progress: Mutex<Progress>,
    /// Keys written through by this node's movers since it started.
    moved: AtomicU64,
}

/// How far a mover got.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Progress {
    /// The joint stage it moves for; `None` before the first.
    pub stage: Option<Stage>,
    /// The moving slots this node syncs.
    pub slots: u64,
    /// Of those, the ones whose every key is written through.
    pub slots_synced: u64,
    /// Keys of its slots found at the old replicas (every one holding a vote, dead ones too).
    pub found: u64,
    /// Of those, written through.
    pub synced: u64,
    /// Of those, whose write-through is under way.
    pub in_transit: u64,
    /// Whether every slot it syncs is synced.
    pub done: bool,
    /// What it waits for, if anything (a source it cannot reach, the fence).
    pub waiting: String,
}

impl Mover {
    /// How far the mover got.
    pub fn progress(&self) -> Progress {
        self.progress.lock().expect("not poisoned").clone()
    }

    /// Keys written through since the node started.
    pub fn moved(&self) -> u64 {
        self.moved.load(Ordering::Relaxed)
    }

    /// Whether it has synced every slot of `stage` it syncs.
    pub fn synced(&self, stage: Stage) -> bool {
        let p = self.progress.lock().expect("not poisoned");
        p.stage == Some(stage) && p.done
    }

    fn update(&self, change: impl FnOnce(&mut Progress)) {
        change(&mut self.progress.lock().expect("not poisoned"));
    }
}

/// The slots a node syncs in a change from `old` to `new`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Plan {
    /// The moving slots it syncs.
    pub slots: Vec<Slot>,
}

/// Per slot, the old replicas its keys were listed at so far.
pub type Listed = BTreeMap<Slot, Vec<u16>>;

impl Plan {
    /// The moving slots `me` syncs: those whose first new replica not among the old ones is
    /// `me`.
    pub fn new(old: &Configuration, new: &Configuration, me: u16) -> Plan {
        let slots = Slot::all()
            .filter(|&slot| {
                let (before, after) = (old.replicas(slot), new.replicas(slot));
                let mover = after.without(&before).next();
                mover == Some(PlacedId(me))
            })
            .collect();
        Plan { slots }
    }

    /// Whether every slot was listed at a majority of its old replicas in `old`.
    pub fn listed(&self, old: &Configuration, listed: &Listed) -> bool {
        self.slots
            .iter()
            .all(|slot| still_needed(old, *slot, listed) == 0)
    }

    /// Where to list next: for each slot not yet listed at a majority of its old replicas, as
    /// many more of them as it lacks, among those `usable`, those `up` first, in the old
    /// replicas' order; by source.
    pub fn next_sources(
        &self,
        old: &Configuration,
        listed: &Listed,
        usable: impl Fn(u16) -> bool,
        up: impl Fn(u16) -> bool,
    ) -> BTreeMap<u16, Vec<Slot>> {
        let mut by: BTreeMap<u16, Vec<Slot>> = BTreeMap::new();
        for &slot in &self.slots {
            let done = listed.get(&slot).map_or(&[][..], Vec::as_slice);
            let mut candidates: Vec<u16> = (old.replicas(slot).nodes().iter())
                .map(|n| n.0)
                .filter(|n| !done.contains(n) && usable(*n))
                .collect();
            candidates.sort_by_key(|&n| !up(n));
            for node in candidates.into_iter().take(still_needed(old, slot, listed)) {
                by.entry(node).or_default().push(slot);
            }
        }
        by
    }

    /// Whether the fence holds for every slot: a majority of its old replicas in `old` has
    /// installed `joint` or a later stage (`installed` says what each node reported).
    pub fn fenced(
        &self,
        old: &Configuration,
        joint: Stage,
        installed: impl Fn(u16) -> Option<Stage>,
    ) -> bool {
        self.slots.iter().all(|slot| {
            let replicas = old.replicas(*slot);
            let at = replicas
                .nodes()
                .iter()
                .filter(|n| installed(n.0).is_some_and(|s| s == joint || s.is_after(joint)))
                .count();
            at * 2 > replicas.nodes().len()
        })
    }
}

/// How many more of `slot`'s old replicas its keys must be listed at.
fn still_needed(old: &Configuration, slot: Slot, listed: &Listed) -> usize {
    let majority = old.replicas(slot).nodes().len() / 2 + 1;
    majority.saturating_sub(listed.get(&slot).map_or(0, Vec::len))
}

/// A token bucket of bytes: spending may run it into debt, which the spender then waits off.
#[derive(Debug)]
pub struct TokenBucket {
    /// Bytes per second; 0 is no limit.
    rate: u64,
    /// The most bytes it holds (a tenth of a second's).
    burst: f64,
    tokens: f64,
    at: Instant,
}

impl TokenBucket {
    /// A full bucket of `rate` bytes per second (0: no limit) at `now`.
    pub fn new(rate: u64, now: Instant) -> TokenBucket {
        let burst = (rate as f64 / 10.0).max(64.0 * 1024.0);
        TokenBucket {
            rate,
            burst,
            tokens: burst,
            at: now,
        }
    }

    /// Spends `bytes` at `now`; how long to wait before spending more.
    pub fn spend(&mut self, bytes: u64, now: Instant) -> Duration {
        if self.rate == 0 {
            return Duration::ZERO;
        }
        let rate = self.rate as f64;
        let elapsed = now.saturating_duration_since(self.at).as_secs_f64();
        self.at = now;
        self.tokens = (self.tokens + elapsed * rate).min(self.burst) - bytes as f64;
        if self.tokens >= 0.0 {
            Duration::ZERO
        } else {
            Duration::from_secs_f64(-self.tokens / rate)
        }
    }
}

/// Moves the data of `joint`'s moving slots this node syncs, until they are synced (or the
/// task is aborted when the node installs another stage).
pub async fn run(context: Arc<NodeContext>, ring: Arc<RingState>, joint: RingStage) {
    let RingStage::Joint { old, new } = &joint else {
        return;
    };
    let stage = joint.stage();
    let me = context.node.0;
    let plan = Plan::new(old, new, me);
    ring.mover.update(|p| {
        *p = Progress {
            stage: Some(stage),
            slots: plan.slots.len() as u64,
            ..Progress::default()
        }
    });
    // The round floor (docs/ring.md §4 "Dead registers"): this node's highest round, taken
    // now that it installed the joint stage, for the nodes the stage makes new replicas of a
    // slot; and, if this node is one, its floor raised above the highest of a majority of the
    // old replicas of each slot it gains before it reports anything done.
    if !report_high(&context, &ring, stage).await
        || !raise_gained_floor(&context, &ring, old, new, stage).await
    {
        return;
    }
    if plan.slots.is_empty() {
        ring.mover.update(|p| p.done = true);
        ring.wake();
        return;
    }
    info!(stage = %stage_name(stage), slots = plan.slots.len(), "moving the data of the ring's change");
    // The fence: a majority of every slot's old replicas no longer decides alone.
    ring.mover
        .update(|p| p.waiting = "the old replicas installing the joint stage".into());
    loop {
        let mut installed = BTreeMap::new();
        for node in old.nodes() {
            if let Ok(Some(report)) = ring.register.report(node.0).await {
                installed.insert(node.0, report.stage);
            }
        }
        if plan.fenced(old, stage, |n| installed.get(&n).copied()) {
            break;
        }
        tokio::time::sleep(RETRY_PAUSE).await;
    }
    // Each slot listed at a majority of its old replicas; a source that fails is passed over
    // while others remain, and tried again once none does.
    let mut pass = Pass::new(&context, &ring);
    let mut listed = Listed::new();
    let mut failed = BTreeSet::new();
    while !plan.listed(old, &listed) {
        let up = crate::cluster::peers_up(&context);
        let next = plan.next_sources(
            old,
            &listed,
            |n| !failed.contains(&n),
            |n| n == me || up.contains(&n),
        );
        if next.is_empty() {
            failed.clear();
            tokio::time::sleep(RETRY_PAUSE * 5).await;
            continue;
        }
        for (source, slots) in next {
            match pass.list_and_write(source, &slots).await {
                Ok(()) => {
                    let mut synced = 0;
                    for slot in slots {
                        let at = listed.entry(slot).or_default();
                        at.push(source);
                        synced += u64::from(still_needed(old, slot, &listed) == 0);
                    }
                    ring.mover.update(|p| p.slots_synced += synced);
                }
                Err(e) => {
                    let waiting = format!("node {source}: {e}");
                    if ring.mover.progress().waiting != waiting {
                        warn!(source, error = %e, "moving the ring's data: trying another source");
                    }
                    ring.mover.update(|p| p.waiting = waiting);
                    failed.insert(source);
                }
            }
        }
    }
    ring.mover.update(|p| {
        p.done = true;
        p.waiting.clear();
    });
    info!(stage = %stage_name(stage), keys = pass.synced.len(), "the ring's moving slots are synced");
    ring.wake();
}

/// Writes this node's [`HighReport`] of `stage`: the highest round number its data shards
/// acknowledged, asked of each shard after the stage's install (which went through the same
/// input channel first). Retries until written; false if the node is stopping.
async fn report_high(context: &NodeContext, ring: &RingState, stage: Stage) -> bool {
    loop {
        let Some(high) = ask_shards(context, ShardInput::HighRound).await else {
            return false;
        };
        let high = high.into_iter().max().unwrap_or(0);
        let report = HighReport { stage, high };
        match ring
            .register
            .put(&high_key(context.node.0), report.encode())
            .await
        {
            Ok(()) => return true,
            Err(e) => {
                ring.mover
                    .update(|p| p.waiting = format!("writing its highest round: {e}"));
                tokio::time::sleep(RETRY_PAUSE).await;
            }
        }
    }
}

/// Sends each data shard the input `input` makes with a reply channel; the answers, or `None`
/// if the node is stopping.
async fn ask_shards<T>(
    context: &NodeContext,
    input: impl Fn(tokio::sync::oneshot::Sender<T>) -> ShardInput,
) -> Option<Vec<T>> {
    let mut answers = Vec::with_capacity(context.shards.len());
    for shard in &context.shards {
        let (tx, rx) = tokio::sync::oneshot::channel();
        shard.send(input(tx)).await.ok()?;
        answers.push(rx.await.ok()?);
    }
    Some(answers)
}

/// The slots the change from `old` to `new` makes `me` a replica of that it is not in `old`.
pub fn gained_slots(old: &Configuration, new: &Configuration, me: u16) -> Vec<Slot> {
    Slot::all()
        .filter(|&slot| {
            new.replicas(slot).contains(PlacedId(me)) && !old.replicas(slot).contains(PlacedId(me))
        })
        .collect()
}

/// The floor a new replica of the slots `gained` starts at: the highest round number `high`
/// gives of their old replicas in `old`, once a majority of each slot's old replicas has one
/// (`None` until then). Every round a majority of a slot's old replicas promised is at most
/// the highest of one member of any majority of them.
pub fn gained_floor(
    old: &Configuration,
    gained: &[Slot],
    high: impl Fn(u16) -> Option<u64>,
) -> Option<u64> {
    let mut floor = 0;
    for slot in gained {
        let replicas = old.replicas(*slot);
        let highs: Vec<u64> = replicas.nodes().iter().filter_map(|n| high(n.0)).collect();
        if highs.len() * 2 <= replicas.nodes().len() {
            return None;
        }
        floor = highs.into_iter().fold(floor, u64::max);
    }
    Some(floor)
}

/// Raises every data shard's round floor for the slots `stage` (from `old` to `new`) gives
/// this node, once a majority of each one's old replicas reported its highest round for
/// `stage`, and waits until each shard made it durable. True at once when the node gains no
/// slot; false if the node is stopping or installed another stage.
async fn raise_gained_floor(
    context: &NodeContext,
    ring: &RingState,
    old: &Configuration,
    new: &Configuration,
    stage: Stage,
) -> bool {
    let gained = gained_slots(old, new, context.node.0);
    if gained.is_empty() {
        return true;
    }
    ring.mover
        .update(|p| p.waiting = "the old replicas' highest rounds".into());
    let mut sources: Vec<u16> = (gained.iter())
        .flat_map(|slot| {
            old.replicas(*slot)
                .nodes()
                .iter()
                .map(|n| n.0)
                .collect::<Vec<_>>()
        })
        .collect();
    sources.sort_unstable();
    sources.dedup();
    let floor = loop {
        let mut highs = BTreeMap::new();
        for &node in &sources {
            if let Ok(Some(report)) = ring.register.high(node).await {
                if report.stage == stage {
                    highs.insert(node, report.high);
                }
            }
        }
        if let Some(floor) = gained_floor(old, &gained, |n| highs.get(&n).copied()) {
            break floor;
        }
        tokio::time::sleep(RETRY_PAUSE).await;
    };
    let id = StageId::of(stage);
    // A shard whose store refuses the floor for lack of space goes on holding the slots back
    // (docs/ring.md §4, "Dead registers", "A full store"): asked again until every shard's
    // floor is durable, and nothing reported done before.
    loop {
        let raised = ask_shards(context, |reply| ShardInput::RaiseGainedFloor {
            stage: id,
            above: floor,
            reply,
        })
        .await;
        let Some(raised) = raised.filter(|r| !r.contains(&FloorRaise::OtherStage)) else {
            return false;
        };
        let refused = (raised.iter())
            .filter(|r| **r == FloorRaise::Refused)
            .count();
        if refused == 0 {
            info!(stage = %stage_name(stage), slots = gained.len(), floor, shards = raised.len(), "raised the round floor of the slots this node gains");
            ring.mover.update(|p| p.waiting.clear());
            return true;
        }
        let waiting = format!(
            "space for the round floor ({refused} of {} shards' stores full)",
            raised.len()
        );
        if ring.mover.progress().waiting != waiting {
            warn!(stage = %stage_name(stage), refused, "a full store refused the round floor of the slots this node gains: asking again");
        }
        ring.mover.update(|p| p.waiting = waiting);
        tokio::time::sleep(Duration::from_millis(crate::turn::DISK_FULL_RECHECK_MS)).await;
    }
}

/// One mover's pass over its sources.
struct Pass<'a> {
    context: &'a NodeContext,
    ring: &'a RingState,
    bucket: TokenBucket,
    /// Keys found, and those written through.
    found: HashSet<Bytes>,
    synced: HashSet<Bytes>,
}

impl<'a> Pass<'a> {
    fn new(context: &'a NodeContext, ring: &'a RingState) -> Pass<'a> {
        Pass {
            context,
            ring,
            bucket: TokenBucket::new(context.config.ring_move_bytes_per_sec, Instant::now()),
            found: HashSet::new(),
            synced: HashSet::new(),
        }
    }

    /// Lists the keys of `slots` at `source` and writes through those not synced yet.
    async fn list_and_write(&mut self, source: u16, slots: &[Slot]) -> Result<(), String> {
        let mut wanted = vec![false; usize::from(SLOTS)];
        for slot in slots {
            wanted[usize::from(slot.get())] = true;
        }
        let addr = self
            .context
            .forwarder
            .as_ref()
            .and_then(|f| f.client_addrs().get(&source).cloned())
            .ok_or_else(|| format!("no client address of node {source}"))?;
        let password = crate::ring::requirepass(&self.context.config).map_err(|e| e.to_string())?;
        let mut link =
            SourceLink::open(&addr, password, self.context.config.bulk_bytes_max()).await?;
        let mut cursor = 0;
        loop {
            let (next, keys) = link.scan(cursor).await?;
            let batch: Vec<Bytes> = keys
                .into_iter()
                .filter(|k| wanted[usize::from(key_slot(k).get())] && !self.synced.contains(k))
                .collect();
            let fresh = batch
                .iter()
                .filter(|k| self.found.insert((*k).clone()))
                .count();
            self.ring.mover.update(|p| {
                p.found += fresh as u64;
                p.in_transit = batch.len() as u64;
                p.waiting.clear();
            });
            let bytes = self.write_through(&batch).await?;
            let wait = self.bucket.spend(bytes, Instant::now());
            if !wait.is_zero() {
                tokio::time::sleep(wait).await;
            }
            if next == 0 {
                break;
            }
            cursor = next;
        }
        Ok(())
    }

    /// Writes every key of `batch` through this node's shards, retrying failures; the bytes
    /// moved (keys, string values, and each register's messages).
    async fn write_through(&mut self, batch: &[Bytes]) -> Result<u64, String> {
        let mut bytes = 0;
        let mut left: Vec<Bytes> = batch.to_vec();
        for attempt in 1..=WRITE_ATTEMPTS {
            if left.is_empty() {
                break;
            }
            let results = write_keys_through(self.context, &left).await?;
            let mut failed = Vec::new();
            let mut last_error = String::new();
            for (key, result) in left.into_iter().zip(results) {
                match result {
                    Ok(value_bytes) => {
                        bytes += key.len() as u64 + value_bytes + KEY_OVERHEAD_BYTES;
                        self.synced.insert(key);
                        self.ring.mover.moved.fetch_add(1, Ordering::Relaxed);
                        self.ring.mover.update(|p| {
                            p.synced += 1;
                            p.in_transit = p.in_transit.saturating_sub(1);
                        });
                    }
                    Err(e) => {
                        last_error = e;
                        failed.push(key);
                    }
                }
            }
            left = failed;
            if !left.is_empty() && attempt == WRITE_ATTEMPTS {
                return Err(format!(
                    "{} keys not written through: {last_error}",
                    left.len()
                ));
            }
            if !left.is_empty() {
                tokio::time::sleep(RETRY_PAUSE).await;
            }
        }
        Ok(bytes)
    }
}

/// Writes each of `keys` through this node's data shards (`Replica::handle_write_through`,
/// answered as GET); for each, the bytes of the value read or why it failed.
async fn write_keys_through(
    context: &NodeContext,
    keys: &[Bytes],
) -> Result<Vec<Result<u64, String>>, String> {
    let (tx, mut rx) = mpsc::unbounded_channel();
    let shards = context.shards.len();
    let mut per_shard: Vec<Vec<(Key, ReplyTo)>> = (0..shards).map(|_| Vec::new()).collect();
    for (seq, key) in keys.iter().enumerate() {
        let reply = ReplyTo {
            tx: tx.clone(),
            seq: seq as u64,
        };
        per_shard[crate::context::shard_of(key, shards)].push((Key::from_slice(key), reply));
    }
    drop(tx);
    for (shard, registers) in per_shard.into_iter().enumerate() {
        if !registers.is_empty() {
            context.shards[shard]
                .send(ShardInput::WriteThroughs(registers))
                .await
                .map_err(|_| "the node is stopping".to_string())?;
        }
    }
    let mut results: Vec<Result<u64, String>> = vec![Err("no answer".into()); keys.len()];
    while let Some((seq, result)) = rx.recv().await {
        results[seq as usize] = match result {
            Ok(Reply::Bulk(value)) => Ok(value.len() as u64),
            Ok(_) => Ok(0),
            Err(e) => Err(e.to_string()),
        };
    }
    Ok(results)
}

/// A Redis connection to a source node's client address, for SCAN.
struct SourceLink {
    stream: TcpStream,
    buf: BytesMut,
    bulk_bytes_max: usize,
}

impl SourceLink {
    /// Connects to `addr` and logs in with `password`, if any.
    async fn open(
        addr: &str,
        password: Option<Vec<u8>>,
        bulk_bytes_max: usize,
    ) -> Result<SourceLink, String> {
        let stream = tokio::time::timeout(SOURCE_TIMEOUT, TcpStream::connect(addr))
            .await
            .map_err(|_| format!("connecting to {addr}: no answer"))?
            .map_err(|e| format!("connecting to {addr}: {e}"))?;
        let _ = stream.set_nodelay(true);
        let mut link = SourceLink {
            stream,
            buf: BytesMut::new(),
            bulk_bytes_max,
        };
        if let Some(password) = password {
            let login = [Bytes::from_static(b"AUTH"), Bytes::from(password)];
            if let Value::Error(e) = link.request(&login).await? {
                return Err(format!("logging in at {addr}: {e}"));
            }
        }
        Ok(link)
    }

    /// Sends `args` and reads the reply.
    async fn request(&mut self, args: &[Bytes]) -> Result<Value, String> {
        let mut out = BytesMut::new();
        logless_redis::resp::write_request(&mut out, args);
        let exchange = async {
            self.stream
                .write_all(&out)
                .await
                .map_err(|e| e.to_string())?;
            loop {
                if let Some((value, used)) = parse_reply(&self.buf, self.bulk_bytes_max)? {
                    self.buf.advance(used);
                    return Ok(value);
                }
                if self
                    .stream
                    .read_buf(&mut self.buf)
                    .await
                    .map_err(|e| e.to_string())?
                    == 0
                {
                    return Err("the connection closed".to_string());
                }
            }
        };
        tokio::time::timeout(SOURCE_TIMEOUT, exchange)
            .await
            .map_err(|_| "no answer in time".to_string())?
    }

    /// One page of the keys the source holds a vote of, dead ones included (`SCAN … VOTED`),
    /// from `cursor`: the next cursor (0 at the end) and the keys.
    async fn scan(&mut self, cursor: u64) -> Result<(u64, Vec<Bytes>), String> {
        let reply = self
            .request(&[
                Bytes::from_static(b"SCAN"),
                Bytes::from(cursor.to_string()),
                Bytes::from_static(b"COUNT"),
                Bytes::from(SCAN_COUNT.to_string()),
                Bytes::from_static(b"VOTED"),
            ])
            .await?;
        scan_page(reply)
    }
}

/// The cursor and keys of a SCAN reply.
fn scan_page(reply: Value) -> Result<(u64, Vec<Bytes>), String> {
    let shape = |reply: &Value| format!("SCAN answered {reply:?}");
    let Value::Array(parts) = &reply else {
        return Err(shape(&reply));
    };
    let [Value::Bulk(cursor), Value::Array(keys)] = parts.as_slice() else {
        return Err(shape(&reply));
    };
    let cursor = std::str::from_utf8(cursor)
        .ok()
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| shape(&reply))?;
    let keys = keys
        .iter()
        .map(|k| match k {
            Value::Bulk(k) => Ok(k.clone()),
            _ => Err(shape(&reply)),
        })
        .collect::<Result<_, _>>()?;
    Ok((cursor, keys))
}

#[cfg(test)]
mod tests {
    use logless_placement::Replication;

    use super::*;

    fn ring(nodes: u16) -> Configuration {
        let nodes: Vec<PlacedId> = (1..=nodes).map(PlacedId).collect();
        Configuration::balanced(&nodes, Replication::THREE).unwrap()
    }

    #[test]
    fn every_moving_slot_is_synced_by_exactly_one_new_replica() {
        let old = ring(5);
        let changes = [
            old.with_node_added(PlacedId(6)).unwrap(),
            old.with_node_removed(PlacedId(2)).unwrap(),
            old.with_node_replaced(PlacedId(3), PlacedId(6)).unwrap(),
        ];
        for new in changes {
            let joint = RingStage::Joint {
                old: old.clone(),
                new: new.clone(),
            };
            let plans: Vec<(u16, Plan)> =
                (1..=6).map(|me| (me, Plan::new(&old, &new, me))).collect();
            let mut synced: Vec<Slot> = plans.iter().flat_map(|(_, p)| p.slots.clone()).collect();
            synced.sort_unstable();
            assert_eq!(
                synced,
                joint.moving_slots(),
                "each moving slot once, and no other"
            );
            for (me, plan) in &plans {
                for slot in &plan.slots {
                    assert!(new.replicas(*slot).contains(PlacedId(*me)));
                    assert!(
                        !old.replicas(*slot).contains(PlacedId(*me)),
                        "a new replica syncs"
                    );
                }
            }
        }
    }

    #[test]
    fn each_slot_is_listed_at_a_majority_of_its_old_replicas_live_ones_first() {
        let old = ring(5);
        // Node 3 leaves: node 1 syncs some slots; node 2 is down.
        let new = old.with_node_removed(PlacedId(3)).unwrap();
        let plan = Plan::new(&old, &new, 1);
        assert!(!plan.slots.is_empty());
        let up = |n: u16| n != 2;
        let mut listed = Listed::new();
        let first = plan.next_sources(&old, &listed, |_| true, up);
        let listed_for = |by: &BTreeMap<u16, Vec<Slot>>, slot: Slot| {
            by.iter()
                .filter(|(_, slots)| slots.contains(&slot))
                .map(|(&n, _)| n)
                .collect::<Vec<u16>>()
        };
        for &slot in &plan.slots {
            let at = listed_for(&first, slot);
            assert_eq!(at.len(), 2, "a majority of three");
            assert!(at.iter().all(|&n| old.replicas(slot).contains(PlacedId(n))));
            let live = old
                .replicas(slot)
                .nodes()
                .iter()
                .filter(|n| up(n.0))
                .count();
            if live >= 2 {
                assert!(!at.contains(&2), "the node down passed over");
            }
        }
        // Node 4 fails as a source: the slots it was asked for go to the third old replica.
        for (&source, slots) in &first {
            if source != 4 {
                for &slot in slots {
                    listed.entry(slot).or_default().push(source);
                }
            }
        }
        let again = plan.next_sources(&old, &listed, |n| n != 4, up);
        for (&source, slots) in &again {
            assert_ne!(source, 4);
            for &slot in slots {
                assert!(first[&4].contains(&slot));
                listed.entry(slot).or_default().push(source);
            }
        }
        // Every slot then has a majority, unless its only other old replica is node 4 itself.
        let unlisted: Vec<&Slot> = plan
            .slots
            .iter()
            .filter(|&&s| still_needed(&old, s, &listed) > 0)
            .collect();
        for slot in unlisted {
            assert!(old.replicas(*slot).contains(PlacedId(4)));
        }
    }

    #[test]
    fn the_fence_needs_a_majority_of_every_slots_old_replicas() {
        let old = ring(4);
        let new = old.with_node_removed(PlacedId(4)).unwrap();
        let joint = Stage::Joint(new.epoch());
        let plans: Vec<Plan> = (1..=3).map(|me| Plan::new(&old, &new, me)).collect();
        let plan = plans.iter().find(|p| !p.slots.is_empty()).unwrap();
        let stable = Stage::Stable(old.epoch());
        // Nobody installed it; one node; every node but one; every node; a later stage.
        assert!(!plan.fenced(&old, joint, |_| Some(stable)));
        assert!(!plan.fenced(&old, joint, |n| Some(if n == 1 { joint } else { stable })));
        assert!(plan.fenced(&old, joint, |n| (n != 4).then_some(joint)));
        assert!(plan.fenced(&old, joint, |_| Some(joint)));
        assert!(plan.fenced(&old, joint, |_| Some(Stage::Stable(new.epoch()))));
        // Two of four nodes are a majority of some slots' replicas, not of all.
        assert!(!plan.fenced(&old, joint, |n| (n <= 2).then_some(joint)));
    }

    #[test]
    fn the_bucket_paces_to_its_rate() {
        let start = Instant::now();
        let mut bucket = TokenBucket::new(1 << 20, start);
        // The burst (a tenth of a second's bytes) passes at once.
        assert_eq!(bucket.spend(100 << 10, start), Duration::ZERO);
        // A second's worth more waits about a second.
        let wait = bucket.spend(1 << 20, start);
        assert!(
            wait > Duration::from_millis(900) && wait <= Duration::from_secs(1),
            "{wait:?}"
        );
        // Once that time passed, the debt is paid.
        let later = start + wait;
        assert_eq!(bucket.spend(0, later), Duration::ZERO);
        // No limit: never waits.
        let mut free = TokenBucket::new(0, start);
        assert_eq!(free.spend(u64::MAX, start), Duration::ZERO);
    }

    #[test]
    fn scan_pages_are_read_and_other_replies_refused() {
        let page = Value::Array(vec![
            Value::Bulk(Bytes::from_static(b"17")),
            Value::Array(vec![Value::Bulk(Bytes::from_static(b"k"))]),
        ]);
        assert_eq!(scan_page(page), Ok((17, vec![Bytes::from_static(b"k")])));
        assert!(scan_page(Value::Error("NOAUTH".into())).is_err());
        let bad_cursor = Value::Array(vec![
            Value::Bulk(Bytes::from_static(b"x")),
            Value::Array(vec![]),
        ]);
        assert!(scan_page(bad_cursor).is_err());
    }
}
