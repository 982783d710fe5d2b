//! The nemesis: faults on a schedule drawn from the seed, one at a time, each healed before
//! the next, every one recorded with its start and end in `faults.jsonl`.
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
}

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
    let (change, members) = {
        let mut m = membership.lock().expect("not poisoned");
        (m.plan(rng)?, m.members.clone())
    };
    let (joining, leaving) = match change {
        Change::Add(n) => (Some(n), None),
        Change::Remove(n) => (None, Some(n)),
        Change::Replace(old, new) => (Some(new), Some(old)),
    };
    let others: Vec<u16> = (members.iter().copied())
        .filter(|&n| Some(n) != leaving)
        .collect();
    let coordinator = *others.choose(rng)?;
    let (bin, http) = {
        let c = cluster.lock().expect("not poisoned");
        (c.bin().to_path_buf(), c.http_addr(coordinator))
    };
    let mut notes = Vec::new();
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
    let kill_coordinator = membership::kills_coordinator(rng, &change) && second.is_some();
    let victim = if kill_coordinator {
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
    Some(Fault {
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
    })
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
/// With `membership` (a ring with spares), `member` faults change the ring, and `kill` kills
/// one node at a time, so that every key keeps a majority of its replicas up.
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
    let mut cycle: Vec<FaultKind> = Vec::new();
    loop {
        reap_crashes(&cluster, &log, &clock);
        if pause_for(around(&mut rng, schedule.gap), &mut stop).await {
            return;
        }
        reap_crashes(&cluster, &log, &clock);
        if cycle.is_empty() {
            cycle = schedule.kinds.clone();
            cycle.shuffle(&mut rng);
        }
        let Some(kind) = cycle.pop() else { return };
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
        let (detail, nodes, links) = match kind {
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
                let id = *ids.choose(&mut rng).expect("nodes");
                // Noted before the SIGSTOP: the recorded start is no later than the real one.
                pauses.begin(id, clock.wall_ms());
                cluster.lock().expect("not poisoned").pause(id);
                (format!("SIGSTOP node {id}"), vec![id], Vec::new())
            }
            FaultKind::Partition => {
                let (detail, nodes, links, mode) = partition_links(&mut rng, &ids);
                for &link in &links {
                    proxy.set(link, mode);
                }
                (detail, nodes, links)
            }
            FaultKind::Member | FaultKind::Crash => unreachable!("not injected here"),
        };
        // The fault is healed even when the run is told to stop meanwhile.
        pause_for(hold, &mut stop).await;
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
        log.record(Fault {
            kind,
            detail,
            nodes,
            links,
            start,
            end: clock.now(),
        });
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
