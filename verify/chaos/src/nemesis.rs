//! The nemesis: faults on a schedule drawn from the seed, one at a time, each healed before
//! the next, every one recorded with its start and end in `faults.jsonl` — except that
//! membership changes, by default, run in a lane of their own, concurrent with the partitions
//! and pauses of the main lane (see "Two lanes" below).
//!
//! * `kill`: SIGKILL one replica or a minority, restart them after the fault's duration;
//! * `kill-all`: SIGKILL every replica, restart them all shortly after;
//! * `kill-leader` (multipaxos only): SIGKILL the replica that leads the highest view (asked
//!   with INFO), restart it after the fault's duration;
//! * `pause`: SIGSTOP one replica, SIGCONT it after the fault's duration;
//! * `partition`: isolate a minority (both directions), cut one way only (a node cannot send, a
//!   node cannot hear, or a single directed link), or stall a node's links or a single link
//!   (traffic held, not lost), healed after the fault's duration;
//! * `member` (a ring with spares only): one change of the ring's configuration, add, remove
//!   or replace, asked of a live member and waited for, on some draws with that member (the
//!   change's coordinator) killed mid-change and the change asked of another
//!   ([`crate::membership`]).
//!
//! **Two lanes** (the default with `member`; `--member-serial` puts the changes back in the
//! cycle, one fault at a time). The main lane cycles through the other kinds as above; a second
//! lane makes the ring's changes, spread over the whole run (a change every
//! [`Schedule::member_every`] on average, with nodes removed or replaced returned to the spares
//! so that changes never run out), and they overlap the main lane's partitions and pauses:
//!
//! * the member lane picks its next change (and its coordinator) and publishes it, then on two
//!   draws of three waits (up to twice a fault's cycle) for a partition or a pause to be in
//!   force, and asks the change under it;
//! * while a change is in flight or about to be asked, half the main lane's partitions and
//!   pauses are aimed at one of its nodes (the coordinator, the node gaining slots or the node
//!   leaving): that node paused, or cut from a random part of the ring (both ways, one way, or
//!   its links stalled);
//! * a partition or pause due to heal while a change is in flight is, on half the draws, held
//!   until the change ends (up to twice its own duration, at most [`ACROSS_LIMIT`]): a fault
//!   started before the change and healed after it;
//! * a change that failed (a coordinator cut off gives up on a stage after 30 s, a refusal)
//!   is asked again, unchanged, once the main lane's fault is healed (resuming its joint
//!   stage), and once more at the end of the run if it is still pending;
//! * kills do not overlap changes (other than the change's own kills): a `kill` waits for the
//!   change in flight to end, and a change waits for a kill to be healed, so at most one node
//!   is killed at a time, as before.
//!
//! Each change's entry in `faults.jsonl` names the main lane's fault in force when it was
//! asked (`under …`), each main-lane fault that started during a change says so (`during
//! …`), and the summary's `overlaps:` line counts, from the faults' start and end, the changes
//! that overlapped a partition or a pause ([`FaultLog::overlaps`]).
use std::collections::BTreeMap;
use std::fs::File;
use std::io::Write;
use std::net::SocketAddr;
use std::path::Path;
use std::str::FromStr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rand::rngs::SmallRng;
use rand::seq::{IndexedRandom, SliceRandom};
use rand::{Rng, SeedableRng};
use serde_json::json;
use tokio::sync::watch;

use crate::client::{Connection, Reply};
use crate::cluster::Cluster;
use crate::history::Clock;
use crate::membership::{self, Change, Membership};
use crate::proxy::{Link, LinkMode, Proxy};
use crate::stamps::Pauses;

/// A kind of fault.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum FaultKind {
    /// SIGKILL one replica or a minority, then restart.
    Kill,
    /// SIGKILL every replica, then restart.
    KillAll,
    /// SIGKILL the log engine's leader, then restart.
    KillLeader,
    /// SIGSTOP one replica, then SIGCONT.
    Pause,
    /// Cut links through the proxy, then heal.
    Partition,
    /// Change the ring's configuration: add a spare, remove or replace a member.
    Member,
    /// A replica exited on its own (not injected: recorded when noticed).
    Crash,
}

impl FaultKind {
    /// The name used on the command line and in `faults.jsonl`.
    pub fn name(self) -> &'static str {
        match self {
            FaultKind::Kill => "kill",
            FaultKind::KillAll => "kill-all",
            FaultKind::KillLeader => "kill-leader",
            FaultKind::Pause => "pause",
            FaultKind::Partition => "partition",
            FaultKind::Member => "member",
            FaultKind::Crash => "crash",
        }
    }
}

impl FromStr for FaultKind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "kill" => Ok(FaultKind::Kill),
            "kill-all" => Ok(FaultKind::KillAll),
            "kill-leader" => Ok(FaultKind::KillLeader),
            "pause" => Ok(FaultKind::Pause),
            "partition" => Ok(FaultKind::Partition),
            "member" => Ok(FaultKind::Member),
            other => Err(format!(
                "unknown fault {other:?} (kill, kill-all, kill-leader, pause, partition, member)"
            )),
        }
    }
}

/// One fault as it happened.
#[derive(Clone, Debug)]
pub struct Fault {
    /// Its kind.
    pub kind: FaultKind,
    /// What exactly was done.
    pub detail: String,
    /// The replicas it touched.
    pub nodes: Vec<u16>,
    /// The links it cut.
    pub links: Vec<Link>,
    /// When it began (run clock, ns).
    pub start: u64,
    /// When it was healed (run clock, ns).
    pub end: u64,
}

impl Fault {
    fn to_json(&self) -> serde_json::Value {
        json!({
            "kind": self.kind.name(),
            "detail": self.detail,
            "nodes": self.nodes,
            "links": self.links.iter().map(|(a, b)| [a, b]).collect::<Vec<_>>(),
            "start": self.start,
            "end": self.end,
        })
    }
}

/// When and for how long faults happen.
#[derive(Clone, Debug)]
pub struct Schedule {
    /// The kinds to inject, cycled through in an order shuffled per cycle.
    pub kinds: Vec<FaultKind>,
    /// The mean quiet time between faults (drawn uniformly from half to one and a half of it).
    pub gap: Duration,
    /// The mean duration of a fault (drawn the same way; `kill-all` is kept shorter).
    pub hold: Duration,
    /// The seed.
    pub seed: u64,
    /// Whether `member` faults take their turn in the cycle, one fault at a time (the runner's
    /// behaviour before the member lane), instead of running in a lane of their own.
    pub member_serial: bool,
    /// The member lane's mean quiet time between changes (drawn as `gap` is).
    pub member_every: Duration,
}

/// The fault log: every fault, kept in memory and appended to `faults.jsonl` as it ends.
pub struct FaultLog {
    file: Mutex<File>,
    faults: Mutex<Vec<Fault>>,
}

impl FaultLog {
    /// Creates `path`.
    pub fn create(path: &Path) -> std::io::Result<FaultLog> {
        Ok(FaultLog {
            file: Mutex::new(File::create(path)?),
            faults: Mutex::new(Vec::new()),
        })
    }

    /// Records a fault that has ended.
    pub fn record(&self, fault: Fault) {
        let mut file = self.file.lock().expect("not poisoned");
        let _ = writeln!(file, "{}", fault.to_json());
        let _ = file.flush();
        self.faults.lock().expect("not poisoned").push(fault);
    }

    /// How many faults of each kind were recorded.
    pub fn counts(&self) -> BTreeMap<FaultKind, usize> {
        let mut counts = BTreeMap::new();
        for f in self.faults.lock().expect("not poisoned").iter() {
            *counts.entry(f.kind).or_insert(0) += 1;
        }
        counts
    }

    /// Which changes of the ring overlapped other faults, from the recorded starts and ends.
    pub fn overlaps(&self) -> Overlaps {
        overlaps(&self.faults.lock().expect("not poisoned"))
    }
}

/// How the `member` faults (each an attempt at one change) overlapped the other faults in time.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Overlaps {
    /// `member` faults.
    pub changes: usize,
    /// Of those, overlapped by a partition.
    pub partition: usize,
    /// Overlapped by a pause.
    pub pause: usize,
    /// Overlapped by a partition or a pause.
    pub either: usize,
    /// With a partition or a pause in force from before the change was asked until after it
    /// ended.
    pub spanned: usize,
    /// Overlapped by a kill of the main lane (`kill`, `kill-all`, `kill-leader`).
    pub kill: usize,
}

fn overlaps(faults: &[Fault]) -> Overlaps {
    let mut o = Overlaps::default();
    for m in faults.iter().filter(|f| f.kind == FaultKind::Member) {
        let cuts = [FaultKind::Partition, FaultKind::Pause];
        let kills = [FaultKind::Kill, FaultKind::KillAll, FaultKind::KillLeader];
        let overlapping = |f: &&Fault| f.start < m.end && m.start < f.end;
        let met = |kinds: &[FaultKind]| {
            (faults.iter())
                .filter(overlapping)
                .any(|f| kinds.contains(&f.kind))
        };
        let (partition, pause) = (met(&cuts[..1]), met(&cuts[1..]));
        o.changes += 1;
        o.partition += usize::from(partition);
        o.pause += usize::from(pause);
        o.either += usize::from(partition || pause);
        o.spanned += usize::from(
            (faults.iter())
                .filter(overlapping)
                .any(|f| cuts.contains(&f.kind) && f.start <= m.start && m.end <= f.end),
        );
        o.kill += usize::from(met(&kills));
    }
    o
}

/// What each lane has in force, for the other (the member lane only).
#[derive(Clone, Debug, Default)]
pub struct InForce {
    /// The main lane's fault in force: its kind, what was done, the nodes it touched.
    pub fault: Option<(FaultKind, String, Vec<u16>)>,
    /// Whether the member lane is making a change (from before it plans one until it ended).
    pub changing: bool,
    /// The change in flight and its coordinator, once chosen.
    pub change: Option<(Change, u16)>,
    /// Whether that change was asked (else it is about to be).
    pub asked: bool,
}

impl InForce {
    /// Whether the main lane has a kill in force.
    fn killing(&self) -> bool {
        matches!(
            self.fault,
            Some((
                FaultKind::Kill | FaultKind::KillAll | FaultKind::KillLeader,
                ..
            ))
        )
    }

    /// Whether a partition or a pause is in force.
    fn cutting(&self) -> bool {
        matches!(
            self.fault,
            Some((FaultKind::Partition | FaultKind::Pause, ..))
        )
    }

    /// Claims the ring for a change: only while no kill is in force.
    fn claim_change(&mut self) -> bool {
        if self.killing() || self.changing {
            return false;
        }
        self.changing = true;
        true
    }

    /// Claims a kill of the main lane: only while no change is in flight.
    fn claim_kill(&mut self, kind: FaultKind) -> bool {
        if self.changing || self.fault.is_some() {
            return false;
        }
        self.fault = Some((kind, String::new(), Vec::new()));
        true
    }

    /// The nodes of the change in flight a fault may aim at: its coordinator, the node gaining
    /// slots and the node leaving (not the node replaced, which is down).
    fn targets(&self) -> Vec<u16> {
        match &self.change {
            Some((Change::Add(n), c)) => vec![*c, *n],
            Some((Change::Remove(n), c)) => vec![*c, *n],
            Some((Change::Replace(_, n), c)) => vec![*c, *n],
            None => Vec::new(),
        }
    }
}

/// The lanes' shared state.
type Lanes = watch::Sender<InForce>;

/// Waits up to `limit` until `test` holds of the lanes' state; whether it did.
async fn wait_lanes(lanes: &Lanes, test: impl Fn(&InForce) -> bool, limit: Duration) -> bool {
    let mut rx = lanes.subscribe();
    let seen = matches!(
        tokio::time::timeout(limit, rx.wait_for(|s| test(s))).await,
        Ok(Ok(_))
    );
    seen
}

/// How long a partition or pause due to heal while a change is in flight may be held until
/// the change ends, at most (and no more than twice the fault's own duration: a change that
/// needs the node paused, or its links, cannot end before the heal — a first version held
/// such faults for 20 s, and the runs spent that long with a key's majority out of reach).
pub const ACROSS_LIMIT: Duration = Duration::from_secs(20);

/// Notes replicas that exited on their own as `crash` faults and restarts them.
pub fn reap_crashes(cluster: &Mutex<Cluster>, log: &FaultLog, clock: &Clock) {
    let mut cluster = cluster.lock().expect("not poisoned");
    for exit in cluster.reap_unexpected() {
        let now = clock.now();
        eprintln!(
            "logless-chaos: replica {} exited on its own ({}); its log ends:\n{}",
            exit.id, exit.status, exit.log_tail
        );
        log.record(Fault {
            kind: FaultKind::Crash,
            detail: format!("node {} exited on its own: {}", exit.id, exit.status),
            nodes: vec![exit.id],
            links: Vec::new(),
            start: now,
            end: now,
        });
        let _ = cluster.start(exit.id);
    }
}

fn around(rng: &mut SmallRng, mean: Duration) -> Duration {
    let ms = u64::try_from(mean.as_millis()).unwrap_or(u64::MAX).max(2);
    Duration::from_millis(rng.random_range(ms / 2..=ms + ms / 2))
}

/// Waits `d`, or less if `stop` turns true; returns whether it was stopped.
async fn pause_for(d: Duration, stop: &mut watch::Receiver<bool>) -> bool {
    if *stop.borrow() {
        return true;
    }
    tokio::select! {
        () = tokio::time::sleep(d) => false,
        _ = stop.wait_for(|s| *s) => true,
    }
}

/// Picks a partition: a minority isolated both ways, a one-way cut, or stalled links (traffic
/// held, not lost, until healed).
fn partition_links(rng: &mut SmallRng, ids: &[u16]) -> (String, Vec<u16>, Vec<Link>, LinkMode) {
    let minority = (ids.len() - 1) / 2;
    let mut shuffled = ids.to_vec();
    shuffled.shuffle(rng);
    let a = shuffled[0];
    let b = shuffled[1];
    let others =
        |side: &[u16]| -> Vec<u16> { ids.iter().copied().filter(|i| !side.contains(i)).collect() };
    let both_ways = |side: &[u16]| -> Vec<Link> {
        let mut links = Vec::new();
        for &x in side {
            for y in others(side) {
                links.push((x, y));
                links.push((y, x));
            }
        }
        links
    };
    match rng.random_range(0..6) {
        0 => {
            let side = shuffled[..rng.random_range(1..=minority.max(1))].to_vec();
            let links = both_ways(&side);
            (
                format!("isolate {side:?} both ways"),
                side,
                links,
                LinkMode::Cut,
            )
        }
        1 => {
            let links = others(&[a]).into_iter().map(|y| (a, y)).collect();
            (
                format!("node {a} cannot send"),
                vec![a],
                links,
                LinkMode::Cut,
            )
        }
        2 => {
            let links = others(&[a]).into_iter().map(|y| (y, a)).collect();
            (
                format!("node {a} cannot hear"),
                vec![a],
                links,
                LinkMode::Cut,
            )
        }
        3 => (
            format!("link {a} -> {b} cut"),
            vec![a, b],
            vec![(a, b)],
            LinkMode::Cut,
        ),
        4 => (
            format!("node {a}'s links stalled both ways"),
            vec![a],
            both_ways(&[a]),
            LinkMode::Stalled,
        ),
        _ => (
            format!("link {a} -> {b} stalled"),
            vec![a, b],
            vec![(a, b)],
            LinkMode::Stalled,
        ),
    }
}

/// A partition aimed at `target`: it is cut from a random part of the other nodes (one to
/// all of them), both ways, one way, or with its links to them stalled.
fn partition_from_part(
    rng: &mut SmallRng,
    target: u16,
    ids: &[u16],
) -> (String, Vec<u16>, Vec<Link>, LinkMode) {
    let mut others: Vec<u16> = ids.iter().copied().filter(|&i| i != target).collect();
    others.shuffle(rng);
    others.truncate(rng.random_range(1..=others.len().max(1)));
    others.sort_unstable();
    let out = || others.iter().map(|&y| (target, y));
    let back = || others.iter().map(|&y| (y, target));
    let (how, links, mode) = match rng.random_range(0..4) {
        0 => ("both ways", out().chain(back()).collect(), LinkMode::Cut),
        1 => ("cannot send to", out().collect(), LinkMode::Cut),
        2 => ("cannot hear", back().collect(), LinkMode::Cut),
        _ => (
            "stalled both ways",
            out().chain(back()).collect(),
            LinkMode::Stalled,
        ),
    };
    let detail = match how {
        "cannot send to" | "cannot hear" => format!("node {target} {how} {others:?}"),
        _ => format!("node {target} cut from {others:?} {how}"),
    };
    let mut nodes = vec![target];
    nodes.extend(&others);
    (detail, nodes, links, mode)
}

/// How many times `kill-leader` asks every replica for the leader (0.1 s apart) before it
/// kills a random replica instead.
const LEADER_ATTEMPTS: usize = 20;

/// The replica that leads the highest view, with that view, from every replica's INFO
/// (`log_is_leader`, `log_view`); None if no replica that answers within half a second claims
/// to lead. A deposed leader that has not heard of the new view yet may still claim its old
/// one: the highest view wins.
async fn find_leader(ids: &[u16], addrs: &[SocketAddr]) -> Option<(u16, u64)> {
    let mut best: Option<(u16, u64)> = None;
    for (&id, &addr) in ids.iter().zip(addrs) {
        let info = async {
            let mut c = Connection::connect(addr, Duration::from_millis(500))
                .await
                .ok()?;
            match c.request(&["INFO".to_string()]).await.ok()? {
                Reply::Bulk(text) => Some(text),
                _ => None,
            }
        };
        let Ok(Some(text)) = tokio::time::timeout(Duration::from_millis(500), info).await else {
            continue;
        };
        let field = |name: &str| {
            text.lines()
                .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
                .and_then(|v| v.trim().parse::<u64>().ok())
        };
        if let (Some(1), Some(view)) = (field("log_is_leader"), field("log_view")) {
            if best.is_none_or(|(_, v)| view > v) {
                best = Some((id, view));
            }
        }
    }
    best
}

/// How long one change of the ring's configuration may take before the runner gives up on
/// it (the coordinator gives up on its own after 30 s for a stage to be installed and about
/// 60 s for the movers).
const CHANGE_LIMIT: Duration = Duration::from_secs(60);

/// How long the coordinator may take to see the nodes of a change up (and the node to
/// replace down) before the change is asked anyway.
const LINKS_LIMIT: Duration = Duration::from_secs(10);

/// How long the runner watches the stage register for a change's joint stage before it kills
/// the change's coordinator anyway (after a random short delay).
const JOINT_LIMIT: Duration = Duration::from_secs(10);

/// One `member` fault: the next change of `membership`, asked of a live member not in it and
/// waited for, with the node replaced killed first, or on a third of the additions and
/// removals the coordinator killed mid-change (and the change asked of another member), or on
/// another third another node of the change killed while it runs and restarted after `hold`;
/// None when no change is left.
async fn member_fault(
    rng: &mut SmallRng,
    hold: Duration,
    cluster: &Mutex<Cluster>,
    membership: &Mutex<Membership>,
    clock: &Clock,
) -> Option<Fault> {
    let start = clock.now();
    let picked = pick_change(rng, membership)?;
    let fault = change_fault(
        rng,
        hold,
        cluster,
        membership,
        clock,
        false,
        (start, picked),
        Vec::new(),
    );
    Some(fault.await)
}

/// A change picked: the change, the members before it, its coordinator.
type Picked = (Change, Vec<u16>, u16);

/// The next change of `membership`, the members before it, and its coordinator (a member the
/// change does not remove); None when no change is left.
fn pick_change(rng: &mut SmallRng, membership: &Mutex<Membership>) -> Option<Picked> {
    let (change, members) = {
        let mut m = membership.lock().expect("not poisoned");
        (m.plan(rng)?, m.members.clone())
    };
    let leaving = match change {
        Change::Add(_) => None,
        Change::Remove(n) | Change::Replace(n, _) => Some(n),
    };
    let others: Vec<u16> = (members.iter().copied())
        .filter(|&n| Some(n) != leaving)
        .collect();
    let coordinator = *others.choose(rng)?;
    Some((change, members, coordinator))
}

/// A `member` fault of the member lane: the change `picked`, published in `lanes` as asked
/// while it runs (with the main lane's fault in force when it is asked noted), with no kills of
/// its own when `calm`.
#[allow(clippy::too_many_arguments)]
async fn lane_fault(
    rng: &mut SmallRng,
    hold: Duration,
    cluster: &Mutex<Cluster>,
    membership: &Mutex<Membership>,
    clock: &Clock,
    lanes: &Lanes,
    calm: bool,
    picked: Picked,
) -> Fault {
    let start = clock.now();
    let mut notes = Vec::new();
    lanes.send_modify(|s| {
        s.change = Some((picked.0.clone(), picked.2));
        s.asked = true;
    });
    if let Some((kind, detail, _)) = &lanes.borrow().fault {
        notes.push(format!("under {}: {detail}", kind.name()));
    }
    let fault = change_fault(
        rng,
        hold,
        cluster,
        membership,
        clock,
        calm,
        (start, picked),
        notes,
    )
    .await;
    lanes.send_modify(|s| {
        s.change = None;
        s.asked = false;
    });
    fault
}

/// The rest of [`member_fault`], once the change and its coordinator are chosen.
#[allow(clippy::too_many_arguments)]
async fn change_fault(
    rng: &mut SmallRng,
    hold: Duration,
    cluster: &Mutex<Cluster>,
    membership: &Mutex<Membership>,
    clock: &Clock,
    calm: bool,
    (start, (change, members, coordinator)): (u64, Picked),
    mut notes: Vec<String>,
) -> Fault {
    let (joining, leaving) = match change {
        Change::Add(n) => (Some(n), None),
        Change::Remove(n) => (None, Some(n)),
        Change::Replace(old, new) => (Some(new), Some(old)),
    };
    let others: Vec<u16> = (members.iter().copied())
        .filter(|&n| Some(n) != leaving)
        .collect();
    let (bin, http) = {
        let c = cluster.lock().expect("not poisoned");
        (c.bin().to_path_buf(), c.http_addr(coordinator))
    };
    let mut nodes: Vec<u16> = joining.into_iter().chain(leaving).collect();
    // The node replaced is dead, and seen down by the coordinator before the change starts
    // (a node it sees up is waited for).
    let dead = match change {
        Change::Replace(old, _) => {
            cluster.lock().expect("not poisoned").kill(old);
            notes.push(format!("kill -9 {old} first"));
            Some(old)
        }
        _ => None,
    };
    let up: Vec<u16> = (members.iter().copied())
        .chain(joining)
        .filter(|&n| n != coordinator && Some(n) != dead)
        .collect();
    let down: Vec<u16> = dead.into_iter().collect();
    if !membership::await_links(http, &up, &down, LINKS_LIMIT).await {
        notes.push(format!(
            "node {coordinator} did not see {up:?} up and {down:?} down within {} s",
            LINKS_LIMIT.as_secs()
        ));
    }
    // Killing the coordinator takes down one node of the change (a member of both
    // configurations): no other is killed then.
    let second = (others.iter().copied())
        .filter(|&n| n != coordinator)
        .collect::<Vec<u16>>()
        .choose(rng)
        .copied();
    let kill_coordinator = !calm && membership::kills_coordinator(rng, &change) && second.is_some();
    let victim = if kill_coordinator || calm {
        None
    } else {
        membership::side_victim(rng, &change, &members, coordinator)
    };
    let delay = Duration::from_millis(rng.random_range(0..=500));
    let in_joint = Duration::from_millis(rng.random_range(0..=100));
    if let Some(v) = victim {
        nodes.push(v);
        notes.push(format!(
            "kill -9 {v} during it, for {} ms",
            hold.as_millis()
        ));
    }
    let began = std::time::Instant::now();
    let began_on_clock = clock.now();
    let answer = match second {
        Some(second) if kill_coordinator => {
            nodes.push(coordinator);
            let plan = CoordinatorKill {
                change: &change,
                coordinator,
                second,
                hold,
                in_joint,
                blind: delay,
                began,
                began_on_clock,
            };
            kill_coordinator_mid_change(&bin, &plan, cluster, membership, &mut notes).await
        }
        _ => {
            let side = async {
                if let Some(v) = victim {
                    tokio::time::sleep(delay).await;
                    cluster.lock().expect("not poisoned").kill(v);
                    tokio::time::sleep(hold).await;
                    if let Err(e) = cluster.lock().expect("not poisoned").start(v) {
                        eprintln!("logless-chaos: cannot restart node {v}: {e}");
                    }
                }
            };
            let (answer, ()) =
                tokio::join!(membership::ask(&bin, http, &change, CHANGE_LIMIT), side);
            answer
        }
    };
    let took = began.elapsed();
    // A command that failed although its change completed (seen in a run: `refused: the
    // ring's stage register: … not applied, try again` from a coordinator whose last stage
    // write was applied after all) would leave the change pending for good, every later ask
    // refused as made already: the stage register tells (no other change runs meanwhile).
    let answer = match answer {
        Err(why) => {
            let mut seen = None;
            for &n in std::iter::once(&coordinator).chain(&others) {
                let http = cluster.lock().expect("not poisoned").http_addr(n);
                if let Some(config) = membership::ring_config(http).await {
                    seen = Some(config);
                    break;
                }
            }
            match seen {
                Some((stage, _, nodes))
                    if stage.starts_with("Stable") && change.made_in(&nodes) =>
                {
                    membership.lock().expect("not poisoned").failed_but_complete += 1;
                    notes.push(format!(
                        "its command failed ({why}), but the stage register holds {stage} with \
                         the change made: it completed"
                    ));
                    Ok(format!(
                        "completed though its command failed, stage {stage}"
                    ))
                }
                _ => Err(why),
            }
        }
        answer => answer,
    };
    // The node replaced comes back, outside the ring: it serves by forwarding.
    if let Some(old) = dead {
        if let Err(e) = cluster.lock().expect("not poisoned").start(old) {
            eprintln!("logless-chaos: cannot restart node {old}: {e}");
        }
    }
    let outcome = {
        let mut m = membership.lock().expect("not poisoned");
        match answer {
            Ok(text) => {
                m.completed(&change, took);
                format!("done in {:.1} s: {text}", took.as_secs_f64())
            }
            Err(why) => {
                eprintln!(
                    "logless-chaos: cluster {} (first asked of node {coordinator}) failed after \
                     {:.1} s: {why}",
                    change.describe(),
                    took.as_secs_f64()
                );
                m.failed(&change, why.clone());
                format!("FAILED after {:.1} s: {why}", took.as_secs_f64())
            }
        }
    };
    notes.push(outcome);
    Fault {
        kind: FaultKind::Member,
        detail: format!(
            "cluster {} asked of node {coordinator}; {}",
            change.describe(),
            notes.join("; ")
        ),
        nodes,
        links: Vec::new(),
        start,
        end: clock.now(),
    }
}

/// A change whose coordinator is to be killed mid-change.
struct CoordinatorKill<'a> {
    /// The change.
    change: &'a Change,
    /// The member it is asked of first, killed while it runs.
    coordinator: u16,
    /// The member it is asked of next.
    second: u16,
    /// How long the coordinator stays down.
    hold: Duration,
    /// How long after the joint stage is seen the coordinator is killed.
    in_joint: Duration,
    /// How long after the change is asked it is killed when no joint stage can be watched for.
    blind: Duration,
    /// When the fault's change was first asked.
    began: std::time::Instant,
    /// The same on the run clock (ns), the time base of `history.jsonl`.
    began_on_clock: u64,
}

/// Asks `plan.change` of `plan.coordinator` and SIGKILLs that node while it runs: once
/// `plan.second` reads the change's joint stage from the stage register (up to
/// [`JOINT_LIMIT`]) and `plan.in_joint` more, or, when the stage cannot be read (or the ring is
/// in a joint stage already), `plan.blind` after asking. Then asks the same change of
/// `plan.second` (which resumes the joint stage, or starts the change if the coordinator died
/// before writing it), restarts the coordinator `plan.hold` after the kill, and if the second
/// ask failed, asks once more when `plan.second` sees the coordinator up again. The change's
/// final answer; the steps, with the stages seen, are added to `notes`.
async fn kill_coordinator_mid_change(
    bin: &Path,
    plan: &CoordinatorKill<'_>,
    cluster: &Mutex<Cluster>,
    membership: &Mutex<Membership>,
    notes: &mut Vec<String>,
) -> Result<String, String> {
    let (change, coordinator, second) = (plan.change, plan.coordinator, plan.second);
    let (http, second_http) = {
        let c = cluster.lock().expect("not poisoned");
        (c.http_addr(coordinator), c.http_addr(second))
    };
    let at = |t: std::time::Instant| t.duration_since(plan.began).as_secs_f64();
    let before = membership::ring_stage(second_http).await;
    // The epoch the change moves the ring to: the stage register holds Stable(target) once it
    // completed.
    let target = match &before {
        Some((stage, epoch)) if stage.starts_with("Stable") => Some(epoch + 1),
        Some((_, epoch)) => Some(*epoch),
        None => None,
    };
    notes.push(match &before {
        Some((stage, _)) => format!("stage {stage} before"),
        None => "stage unread before".to_string(),
    });
    let first = membership::ask(bin, http, change, CHANGE_LIMIT);
    tokio::pin!(first);
    let watch = async {
        let seen = match &before {
            Some((stage, epoch)) if stage.starts_with("Stable") => {
                membership::await_epoch_after(second_http, *epoch, JOINT_LIMIT).await
            }
            _ => None,
        };
        tokio::time::sleep(if seen.is_some() {
            plan.in_joint
        } else {
            plan.blind
        })
        .await;
        seen
    };
    let seen = tokio::select! {
        answer = &mut first => {
            membership.lock().expect("not poisoned").coordinators_killed.spared += 1;
            notes.push(format!(
                "node {coordinator} answered at {:.2} s, before it could be killed",
                at(std::time::Instant::now())
            ));
            return answer;
        }
        seen = watch => seen,
    };
    cluster.lock().expect("not poisoned").kill(coordinator);
    let killed_at = std::time::Instant::now();
    let in_joint = seen.as_ref().is_some_and(|(s, _)| s.starts_with("Joint"));
    // On the history's time base, to line the kill up with the clients' operations.
    let on_clock = plan.began_on_clock as f64 / 1e9 + at(killed_at);
    {
        let mut m = membership.lock().expect("not poisoned");
        m.coordinators_killed.killed += 1;
        m.coordinators_killed.in_joint += usize::from(in_joint);
    }
    notes.push(match &seen {
        Some((stage, when)) => format!(
            "{stage} seen at {:.2} s; coordinator {coordinator} killed (-9) at {:.2} s (run \
             clock {on_clock:.3} s), for {} ms",
            at(*when),
            at(killed_at),
            plan.hold.as_millis()
        ),
        None => format!(
            "no later stage seen; coordinator {coordinator} killed (-9) at {:.2} s (run clock \
             {on_clock:.3} s), for {} ms",
            at(killed_at),
            plan.hold.as_millis()
        ),
    });
    match first.await {
        // It answered just before it died: the change is complete.
        Ok(text) => {
            notes.push(format!("its answer came all the same: {text}"));
            return Ok(text);
        }
        Err(why) => notes.push(format!("its ask: {why}")),
    }
    let restart = async {
        tokio::time::sleep(plan.hold.saturating_sub(killed_at.elapsed())).await;
        if let Err(e) = cluster.lock().expect("not poisoned").start(coordinator) {
            eprintln!("logless-chaos: cannot restart node {coordinator}: {e}");
        }
    };
    // Timed: the restart may come later than the answer.
    let timed_ask = || async {
        let answer = membership::ask(bin, second_http, change, CHANGE_LIMIT).await;
        (answer, std::time::Instant::now())
    };
    let ((mut answer, mut answered), ()) = tokio::join!(timed_ask(), restart);
    // A change the coordinator completed before it died is refused when asked again (the node
    // added is a member already, say): the stage register tells.
    let completed = |stage: &Option<(String, u64)>| match (stage, target) {
        (Some((s, e)), Some(t)) => s.starts_with("Stable") && *e >= t,
        _ => false,
    };
    for retry in [false, true] {
        let stage = membership::ring_stage(second_http).await;
        let shown = stage
            .as_ref()
            .map_or("unread", |(s, _)| s.as_str())
            .to_string();
        match answer {
            Ok(text) => {
                membership
                    .lock()
                    .expect("not poisoned")
                    .coordinators_killed
                    .finished_by_another += 1;
                notes.push(format!(
                    "asked of node {second}{}: done at {:.2} s, stage {shown} after",
                    if retry { " again" } else { "" },
                    at(answered)
                ));
                return Ok(text);
            }
            Err(why) if completed(&stage) => {
                membership
                    .lock()
                    .expect("not poisoned")
                    .coordinators_killed
                    .found_complete += 1;
                notes.push(format!(
                    "asked of node {second}: refused ({why}), but the stage is {shown}: the \
                     coordinator had completed it"
                ));
                return Ok(format!(
                    "completed by node {coordinator} before it was killed"
                ));
            }
            Err(why) if retry => {
                notes.push(format!(
                    "asked of node {second} again: failed at {:.2} s, stage {shown}",
                    at(answered)
                ));
                return Err(why);
            }
            Err(why) => {
                notes.push(format!(
                    "asked of node {second}: failed at {:.2} s ({why}), stage {shown}; \
                     coordinator {coordinator} restarted at {:.2} s",
                    at(answered),
                    at(killed_at + plan.hold)
                ));
                membership.lock().expect("not poisoned").failed(change, why);
                // Asked once more when the node asked sees the coordinator back.
                if !membership::await_links(second_http, &[coordinator], &[], LINKS_LIMIT).await {
                    notes.push(format!(
                        "node {second} did not see {coordinator} up within {} s",
                        LINKS_LIMIT.as_secs()
                    ));
                }
                (answer, answered) = timed_ask().await;
            }
        }
    }
    unreachable!("the second pass returns")
}

/// Injects faults until `stop` turns true, healing the current one before returning. Every
/// pause is noted in `pauses` (on the wall clock), for the bounds of the replicas' stamps.
/// With `membership` (a ring with spares), `member` faults change the ring — in the member
/// lane, concurrent with the others, unless `schedule.member_serial` — and `kill` kills one
/// node at a time, so that every key keeps a majority of its replicas up.
#[allow(clippy::too_many_arguments)]
pub async fn run(
    schedule: Schedule,
    cluster: Arc<Mutex<Cluster>>,
    proxy: Arc<Proxy>,
    log: Arc<FaultLog>,
    pauses: Arc<Pauses>,
    membership: Option<Arc<Mutex<Membership>>>,
    clock: Clock,
    mut stop: watch::Receiver<bool>,
) {
    let mut rng = SmallRng::seed_from_u64(schedule.seed ^ 0x6e65_6d65_7369_7300);
    let ids = cluster.lock().expect("not poisoned").ids();
    let minority = if membership.is_some() {
        1
    } else {
        (ids.len() - 1) / 2
    };
    // The member lane, when there is one: the main lane then leaves `member` out of its cycle.
    let lanes: Option<Arc<Lanes>> = match &membership {
        Some(_) if !schedule.member_serial && schedule.kinds.contains(&FaultKind::Member) => {
            Some(Arc::new(watch::Sender::new(InForce::default())))
        }
        _ => None,
    };
    let member_lane = match (&lanes, &membership) {
        (Some(lanes), Some(membership)) => Some(tokio::spawn(run_member_lane(
            schedule.clone(),
            cluster.clone(),
            membership.clone(),
            log.clone(),
            clock,
            lanes.clone(),
            stop.clone(),
        ))),
        _ => None,
    };
    let kinds: Vec<FaultKind> = (schedule.kinds.iter().copied())
        .filter(|&k| lanes.is_none() || k != FaultKind::Member)
        .collect();
    let mut cycle: Vec<FaultKind> = Vec::new();
    loop {
        reap_crashes(&cluster, &log, &clock);
        if kinds.is_empty() || pause_for(around(&mut rng, schedule.gap), &mut stop).await {
            break;
        }
        reap_crashes(&cluster, &log, &clock);
        if cycle.is_empty() {
            cycle = kinds.clone();
            cycle.shuffle(&mut rng);
        }
        let Some(kind) = cycle.pop() else { break };
        let mut hold = around(&mut rng, schedule.hold);
        if kind == FaultKind::Member {
            let Some(membership) = &membership else {
                continue;
            };
            if let Some(fault) = member_fault(&mut rng, hold, &cluster, membership, &clock).await {
                log.record(fault);
            }
            continue;
        }
        // A kill waits for the change in flight to end (and no change starts during it).
        let killing = matches!(
            kind,
            FaultKind::Kill | FaultKind::KillAll | FaultKind::KillLeader
        );
        if let (Some(lanes), true) = (&lanes, killing) {
            let claimed = async {
                while !lanes.send_if_modified(|s| s.claim_kill(kind)) {
                    wait_lanes(lanes, |s| !s.changing && s.fault.is_none(), CHANGE_LIMIT).await;
                }
            };
            tokio::select! {
                () = claimed => {}
                _ = stop.wait_for(|s| *s) => break,
            }
        }
        // The change in flight, if any, and on half the draws a node of it to aim at.
        let during = (lanes.as_ref()).and_then(|l| {
            let s = l.borrow();
            s.change.clone().map(|c| (c, s.asked))
        });
        let target = match &lanes {
            Some(l) if during.is_some() && rng.random_bool(0.5) => {
                l.borrow().targets().choose(&mut rng).copied()
            }
            _ => None,
        };
        let start = clock.now();
        let leader = match kind {
            FaultKind::KillLeader => {
                let addrs = cluster.lock().expect("not poisoned").client_addrs();
                // A view change after the last fault may still be under way: ask again for a
                // while before giving up.
                let mut leader = None;
                for _ in 0..LEADER_ATTEMPTS {
                    leader = find_leader(&ids, &addrs).await;
                    if leader.is_some() {
                        break;
                    }
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                leader
            }
            _ => None,
        };
        let (mut detail, nodes, links) = match kind {
            FaultKind::Kill => {
                let count = rng.random_range(1..=minority.max(1));
                let nodes: Vec<u16> = ids.choose_multiple(&mut rng, count).copied().collect();
                let mut c = cluster.lock().expect("not poisoned");
                for &id in &nodes {
                    c.kill(id);
                }
                (format!("kill -9 {nodes:?}"), nodes, Vec::new())
            }
            FaultKind::KillLeader => {
                // No replica claims to lead (a view change under way, or the leader is
                // paused): a random replica is killed instead, and the fault says so.
                let (id, detail) = match leader {
                    Some((id, view)) => (id, format!("kill -9 leader {id} of view {view}")),
                    None => {
                        let id = *ids.choose(&mut rng).expect("nodes");
                        (id, format!("kill -9 {id} (no leader found)"))
                    }
                };
                cluster.lock().expect("not poisoned").kill(id);
                (detail, vec![id], Vec::new())
            }
            FaultKind::KillAll => {
                hold = hold.min(Duration::from_millis(rng.random_range(200..=1500)));
                let mut c = cluster.lock().expect("not poisoned");
                for &id in &ids {
                    c.kill(id);
                }
                ("kill -9 every replica".to_string(), ids.clone(), Vec::new())
            }
            FaultKind::Pause => {
                let id = target.unwrap_or_else(|| *ids.choose(&mut rng).expect("nodes"));
                // Noted before the SIGSTOP: the recorded start is no later than the real one.
                pauses.begin(id, clock.wall_ms());
                cluster.lock().expect("not poisoned").pause(id);
                (format!("SIGSTOP node {id}"), vec![id], Vec::new())
            }
            FaultKind::Partition => {
                let (detail, nodes, links, mode) = match target {
                    Some(t) => partition_from_part(&mut rng, t, &ids),
                    None => partition_links(&mut rng, &ids),
                };
                for &link in &links {
                    proxy.set(link, mode);
                }
                (detail, nodes, links)
            }
            FaultKind::Member | FaultKind::Crash => unreachable!("not injected here"),
        };
        if let Some(((change, coordinator), asked)) = &during {
            let role = match target {
                Some(t) if t == *coordinator => " (aimed at its coordinator)",
                Some(_) => " (aimed at its node)",
                None => "",
            };
            detail.push_str(&format!(
                "; {} cluster {} {} of node {coordinator}{role}",
                if *asked { "during" } else { "before" },
                change.describe(),
                if *asked { "asked" } else { "to be asked" }
            ));
        }
        if let Some(lanes) = &lanes {
            lanes.send_modify(|s| s.fault = Some((kind, detail.clone(), nodes.clone())));
        }
        // The fault is healed even when the run is told to stop meanwhile.
        let stopped = pause_for(hold, &mut stop).await;
        // On half the draws, a partition or pause due to heal while a change is in flight is
        // held until the change ends: a fault that began before the change and ends after it.
        if let Some(lanes) = &lanes {
            let changing = lanes.borrow().changing;
            if !stopped && !killing && changing && rng.random_bool(0.5) {
                let held = std::time::Instant::now();
                let ended = tokio::select! {
                    ended = wait_lanes(lanes, |s| !s.changing, (hold * 2).min(ACROSS_LIMIT)) => ended,
                    _ = stop.wait_for(|s| *s) => false,
                };
                detail.push_str(&format!(
                    "; held {} ms more, {}",
                    held.elapsed().as_millis(),
                    if ended {
                        "until the change in flight ended"
                    } else {
                        "while a change was in flight (it had not ended)"
                    }
                ));
            }
        }
        match kind {
            FaultKind::Kill | FaultKind::KillAll | FaultKind::KillLeader => {
                let mut c = cluster.lock().expect("not poisoned");
                for &id in &nodes {
                    if let Err(e) = c.start(id) {
                        eprintln!("logless-chaos: cannot restart node {id}: {e}");
                    }
                }
            }
            FaultKind::Pause => {
                cluster.lock().expect("not poisoned").resume(nodes[0]);
                pauses.end(nodes[0], clock.wall_ms());
            }
            FaultKind::Partition => {
                for &link in &links {
                    proxy.set(link, LinkMode::Open);
                }
            }
            FaultKind::Member | FaultKind::Crash => {}
        }
        if let Some(lanes) = &lanes {
            lanes.send_modify(|s| s.fault = None);
        }
        log.record(Fault {
            kind,
            detail,
            nodes,
            links,
            start,
            end: clock.now(),
        });
    }
    if let Some(lane) = member_lane {
        let _ = lane.await;
    }
}

/// How many times in a row the member lane asks a failed change again (after the main lane's
/// fault healed) before it waits its usual time.
const RESUME_ATTEMPTS: usize = 3;

/// The member lane: the ring's changes, spread over the run (one every `member_every` on
/// average), on two draws of three asked while a partition or a pause of the main lane is in
/// force (when the main lane has either kind); a change that failed is asked again once the main lane's fault is healed, and once
/// more, without kills, when the run stops.
async fn run_member_lane(
    schedule: Schedule,
    cluster: Arc<Mutex<Cluster>>,
    membership: Arc<Mutex<Membership>>,
    log: Arc<FaultLog>,
    clock: Clock,
    lanes: Arc<Lanes>,
    mut stop: watch::Receiver<bool>,
) {
    let mut rng = SmallRng::seed_from_u64(schedule.seed ^ 0x6d65_6d62_6572_7300);
    let cycle = schedule.gap + schedule.hold;
    let cuts =
        (schedule.kinds.iter()).any(|k| [FaultKind::Partition, FaultKind::Pause].contains(k));
    let mut resumes = 0;
    loop {
        let quiet = if resumes > 0 {
            around(&mut rng, schedule.gap / 2)
        } else {
            around(&mut rng, schedule.member_every)
        };
        if pause_for(quiet, &mut stop).await {
            break;
        }
        // The ring is claimed for the change (no kill starts), and the change is picked and
        // published first: the partition or pause it waits for may be aimed at its nodes.
        let claimed = async {
            while !lanes.send_if_modified(InForce::claim_change) {
                wait_lanes(&lanes, |s| !s.killing(), CHANGE_LIMIT).await;
            }
        };
        tokio::select! {
            () = claimed => {}
            _ = stop.wait_for(|s| *s) => break,
        }
        let Some(picked) = pick_change(&mut rng, &membership) else {
            lanes.send_modify(|s| s.changing = false);
            break;
        };
        lanes.send_modify(|s| s.change = Some((picked.0.clone(), picked.2)));
        // Under a partition or a pause on two draws of three (not when resuming: that waits
        // for the heal).
        if cuts && resumes == 0 && rng.random_ratio(2, 3) {
            let under = tokio::select! {
                under = wait_lanes(&lanes, InForce::cutting, cycle * 2) => under,
                _ = stop.wait_for(|s| *s) => {
                    // Left pending: asked below, once the main lane healed.
                    lanes.send_modify(|s| {
                        s.changing = false;
                        s.change = None;
                    });
                    break;
                }
            };
            if under {
                let delay = rng.random_range(0..=schedule.hold.as_millis().min(1000) as u64 / 2);
                tokio::time::sleep(Duration::from_millis(delay)).await;
            }
        }
        let hold = around(&mut rng, schedule.hold);
        let fault = lane_fault(
            &mut rng,
            hold,
            &cluster,
            &membership,
            &clock,
            &lanes,
            false,
            picked,
        )
        .await;
        lanes.send_modify(|s| s.changing = false);
        log.record(fault);
        if membership.lock().expect("not poisoned").pending().is_some() {
            resumes += 1;
            if resumes > RESUME_ATTEMPTS {
                resumes = 0;
            } else {
                // Asked again once the main lane's fault is healed.
                tokio::select! {
                    _ = wait_lanes(&lanes, |s| s.fault.is_none(), ACROSS_LIMIT) => {}
                    _ = stop.wait_for(|s| *s) => break,
                }
            }
        } else {
            resumes = 0;
        }
    }
    // A change left pending is asked once more, without kills, once the main lane has healed
    // its fault (it heals as soon as it is told to stop).
    if membership.lock().expect("not poisoned").pending().is_some() {
        wait_lanes(&lanes, |s| s.fault.is_none(), ACROSS_LIMIT).await;
        lanes.send_modify(|s| s.changing = true);
        let hold = around(&mut rng, schedule.hold);
        if let Some(picked) = pick_change(&mut rng, &membership) {
            let mut fault = lane_fault(
                &mut rng,
                hold,
                &cluster,
                &membership,
                &clock,
                &lanes,
                true,
                picked,
            )
            .await;
            fault
                .detail
                .push_str(" (the pending change, asked again as the run stopped)");
            log.record(fault);
        }
        lanes.send_modify(|s| s.changing = false);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partitions_cut_only_links_between_distinct_nodes() {
        let mut rng = SmallRng::seed_from_u64(7);
        for n in [3u16, 5] {
            let ids: Vec<u16> = (1..=n).collect();
            for _ in 0..200 {
                let (_, _, links, _) = partition_links(&mut rng, &ids);
                assert!(!links.is_empty());
                assert!(links
                    .iter()
                    .all(|(a, b)| a != b && ids.contains(a) && ids.contains(b)));
            }
        }
    }

    #[test]
    fn aimed_partitions_cut_the_target_from_part_of_the_ring() {
        let mut rng = SmallRng::seed_from_u64(11);
        let ids: Vec<u16> = (1..=9).collect();
        let mut sizes = std::collections::BTreeSet::new();
        for _ in 0..300 {
            let (detail, nodes, links, _) = partition_from_part(&mut rng, 4, &ids);
            assert_eq!(nodes[0], 4, "{detail}");
            assert!(!links.is_empty());
            // Every link cut joins the target and one node of the part cut from it.
            for &(a, b) in &links {
                assert!(a != b && (a == 4 || b == 4), "{detail}");
                assert!(nodes[1..].contains(&if a == 4 { b } else { a }));
            }
            sizes.insert(nodes.len() - 1);
        }
        assert_eq!(sizes.len(), 8, "parts of every size: {sizes:?}");
    }

    #[test]
    fn a_kill_and_a_change_never_hold_the_ring_at_once_but_a_partition_and_a_change_do() {
        let mut s = InForce::default();
        assert!(s.claim_change());
        assert!(!s.claim_change(), "one change at a time");
        assert!(!s.claim_kill(FaultKind::Kill), "no kill during a change");
        // A partition starts during the change.
        s.fault = Some((FaultKind::Partition, "cut".into(), vec![2]));
        assert!(s.cutting());
        s.change = Some((Change::Replace(3, 6), 1));
        assert_eq!(s.targets(), vec![1, 6], "the node replaced is down already");
        s.change = None;
        s.changing = false;
        assert!(
            !s.claim_kill(FaultKind::Kill),
            "one fault of the main lane at a time"
        );
        s.fault = None;
        assert!(s.claim_kill(FaultKind::KillLeader));
        assert!(s.killing() && !s.cutting());
        assert!(!s.claim_change(), "no change during a kill");
        s.fault = Some((FaultKind::Pause, "stop".into(), vec![5]));
        assert!(s.claim_change(), "a change under a pause");
    }

    fn fault(kind: FaultKind, start: u64, end: u64) -> Fault {
        Fault {
            kind,
            detail: String::new(),
            nodes: Vec::new(),
            links: Vec::new(),
            start,
            end,
        }
    }

    #[test]
    fn overlaps_count_the_changes_each_kind_of_fault_met() {
        use FaultKind::{Kill, Member, Partition, Pause};
        let log = [
            fault(Partition, 0, 10),
            fault(Member, 2, 8), // under the partition from before to after
            fault(Member, 9, 20),
            fault(Pause, 12, 14), // in the second change
            fault(Member, 30, 40),
            fault(Kill, 40, 45), // starts as the third ends: no overlap
            fault(Pause, 50, 60),
            fault(Member, 55, 70),
            fault(Kill, 65, 68),
        ];
        assert_eq!(
            overlaps(&log),
            Overlaps {
                changes: 4,
                partition: 2,
                pause: 2,
                either: 3,
                spanned: 1,
                kill: 1,
            }
        );
    }

    #[test]
    fn fault_kinds_parse() {
        for kind in [
            FaultKind::Kill,
            FaultKind::KillAll,
            FaultKind::KillLeader,
            FaultKind::Pause,
            FaultKind::Partition,
            FaultKind::Member,
        ] {
            assert_eq!(kind.name().parse::<FaultKind>(), Ok(kind));
        }
        assert!("crash".parse::<FaultKind>().is_err());
    }
}
