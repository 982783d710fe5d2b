//! The membership nemesis (`--nemesis member`, a ring only, issue 28): the ring's
//! configuration changed by `logless cluster add|remove|replace` while the clients run.
//!
//! The ring starts with `--replicas` members and `--spares` more processes that every node
//! has in its peer list but the ring's configuration does not hold yet (docs/ring.md §4
//! "Operating": a node to add must be in every peer list first). Each `member` fault makes one
//! change, asked of a live member's HTTP port and waited for (the command returns once every
//! live node of the new configuration installed it, or fails), in the order add a spare,
//! remove a member, replace a member with a spare, and again while spares last:
//!
//! * **add**: the first spare joins;
//! * **remove**: a random member leaves (and keeps running, serving by forwarding);
//! * **replace**: a random member is killed, and once the coordinator sees it down, the first
//!   spare takes its place; the old node is restarted after the change (as a non-member, it
//!   forwards).
//!
//! On an addition or a removal, one of three things happens while it runs, drawn:
//!
//! * nothing;
//! * one other node of the change (not the coordinator nor the node removed; the joining node,
//!   whose data mover then starts over, among them) is killed and restarted after the fault's
//!   duration;
//! * the coordinator itself is killed (SIGKILL) once the stage register is seen to hold the
//!   change's joint stage (read with `GET /cluster` of another member, every 50 ms) and 0 to
//!   0.1 s more, or 0 to 0.5 s after the change was asked when no stage can be watched for;
//!   the same change is then asked of another member (it resumes the joint stage, or starts
//!   the change if the coordinator died before writing it), the coordinator is restarted after
//!   the fault's duration, and if that ask failed it is asked once more once the member sees
//!   the coordinator back.
//!
//! So at most one node of the change is down at a time (the coordinator is a member of the old
//! and the new configuration), and each key keeps a majority of its replicas in the old and the
//! new configuration. A change that fails (refused, or stopped by the coordinator in its joint
//! stage) is asked again, unchanged, at the next `member` fault: the same change resumes its
//! joint stage, and any other would be refused as concurrent.
//!
//! In the member lane (the default; [`crate::nemesis`], "Two lanes") the changes overlap the
//! main lane's partitions and pauses, a failed change is asked again once the main lane's
//! fault is healed, and every node removed or replaced goes back to the end of the spares
//! ([`Membership::recycling`]): it is added again later, once its turn comes, so the changes
//! go on for the whole run. With `--member-serial` the spares are used once, as before.
use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use rand::rngs::SmallRng;
use rand::seq::IndexedRandom;
use rand::Rng;

/// One change of the ring's configuration.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Change {
    /// A spare joins.
    Add(u16),
    /// A member leaves.
    Remove(u16),
    /// A member (killed first) gives its slots to a spare.
    Replace(u16, u16),
}

impl Change {
    /// The arguments of `logless cluster`.
    fn args(&self) -> Vec<String> {
        match *self {
            Change::Add(n) => vec!["add".into(), n.to_string()],
            Change::Remove(n) => vec!["remove".into(), n.to_string()],
            Change::Replace(old, new) => vec!["replace".into(), old.to_string(), new.to_string()],
        }
    }

    /// `add 6`, `remove 3`, `replace 2 7`.
    pub fn describe(&self) -> String {
        self.args().join(" ")
    }

    /// Whether a configuration of `nodes` is the change made (the node added in it, the node
    /// removed not, the new node in place of the old).
    pub fn made_in(&self, nodes: &[u16]) -> bool {
        match *self {
            Change::Add(n) => nodes.contains(&n),
            Change::Remove(n) => !nodes.contains(&n),
            Change::Replace(old, new) => nodes.contains(&new) && !nodes.contains(&old),
        }
    }
}

/// The ring's members as the runner changed them, and what it tried.
#[derive(Clone, Debug, Default)]
pub struct Membership {
    /// The configuration's nodes.
    pub members: Vec<u16>,
    /// Nodes in every peer list that were never members.
    pub spares: Vec<u16>,
    /// The replicas per key (R).
    replication: usize,
    /// The next kind of change: 0 add, 1 remove, 2 replace.
    next: usize,
    /// A change asked and not completed: asked again as it is.
    pending: Option<Change>,
    /// Changes completed, with how long each took.
    pub completed: Vec<(Change, Duration)>,
    /// Attempts that failed, with the reason (not counting the asks whose coordinator the
    /// runner killed).
    pub failed: Vec<(Change, String)>,
    /// Coordinators killed mid-change.
    pub coordinators_killed: CoordinatorKills,
    /// Changes whose command failed although the stage register showed them complete (not a
    /// coordinator the runner killed): counted completed.
    pub failed_but_complete: usize,
    /// Whether a node removed or replaced goes back to the spares (added again later), so
    /// that changes go on for the whole run.
    recycle: bool,
}

/// What became of the changes whose coordinator the runner killed.
#[derive(Clone, Debug, Default)]
pub struct CoordinatorKills {
    /// Coordinators killed while their change ran.
    pub killed: usize,
    /// Of those, killed once the ring's stage register was seen to hold the change's joint
    /// stage (the others after a random short delay).
    pub in_joint: usize,
    /// Changes asked of a coordinator that answered before it could be killed (not killed).
    pub spared: usize,
    /// Changes finished by another member after their coordinator was killed, in the same
    /// fault.
    pub finished_by_another: usize,
    /// Changes the killed coordinator had completed (its stable stage written) though it did
    /// not answer: refused when asked again, and found complete in the stage register.
    pub found_complete: usize,
}

impl Membership {
    /// A ring of `members` with `spares` in every peer list, each key on `replication` nodes.
    pub fn new(members: Vec<u16>, spares: Vec<u16>, replication: usize) -> Membership {
        Membership {
            members,
            spares,
            replication,
            ..Membership::default()
        }
    }

    /// The same, with every node removed or replaced put back at the end of the spares once
    /// its change completed: a removed node can be added again (docs/ring.md §4, "So a
    /// removed node can come back"), so the changes never run out.
    pub fn recycling(members: Vec<u16>, spares: Vec<u16>, replication: usize) -> Membership {
        Membership {
            recycle: true,
            ..Membership::new(members, spares, replication)
        }
    }

    /// The change asked and not completed, if any.
    pub fn pending(&self) -> Option<&Change> {
        self.pending.as_ref()
    }

    /// The next change to ask for: the pending one, else the next of add, remove and replace
    /// that can run (add and replace need a spare; remove leaves more than R + 1 members).
    /// None when no change is left.
    pub fn plan(&mut self, rng: &mut SmallRng) -> Option<Change> {
        if let Some(change) = &self.pending {
            return Some(change.clone());
        }
        for _ in 0..3 {
            let kind = self.next % 3;
            self.next += 1;
            let change = match kind {
                0 => self.spares.first().map(|&n| Change::Add(n)),
                1 if self.members.len() > self.replication + 1 => {
                    self.members.choose(rng).map(|&n| Change::Remove(n))
                }
                2 => match (self.members.choose(rng), self.spares.first()) {
                    (Some(&old), Some(&new)) => Some(Change::Replace(old, new)),
                    _ => None,
                },
                _ => None,
            };
            if change.is_some() {
                self.pending = change.clone();
                return change;
            }
        }
        None
    }

    /// Notes that `change` completed in `took`.
    pub fn completed(&mut self, change: &Change, took: Duration) {
        match *change {
            Change::Add(n) => {
                self.spares.retain(|&s| s != n);
                self.members.push(n);
            }
            Change::Remove(n) => {
                self.members.retain(|&m| m != n);
                if self.recycle {
                    self.spares.push(n);
                }
            }
            Change::Replace(old, new) => {
                self.spares.retain(|&s| s != new);
                for m in &mut self.members {
                    if *m == old {
                        *m = new;
                    }
                }
                if self.recycle {
                    self.spares.push(old);
                }
            }
        }
        self.members.sort_unstable();
        self.pending = None;
        self.completed.push((change.clone(), took));
    }

    /// Notes that `change` failed (it stays pending).
    pub fn failed(&mut self, change: &Change, why: String) {
        self.failed.push((change.clone(), why));
    }
}

/// Whether to kill the coordinator of `change` while it runs: on a third of the draws for add
/// and remove, never for replace (whose old node is down already: a second node down could
/// leave a key with one replica of three up).
pub fn kills_coordinator(rng: &mut SmallRng, change: &Change) -> bool {
    !matches!(change, Change::Replace(..)) && rng.random_ratio(1, 3)
}

/// The node to kill while `change` runs on half the draws (add and remove), one of the nodes
/// of the change but `coordinator` and the node removed; None on the other half or for replace
/// (whose old node is down already).
pub fn side_victim(
    rng: &mut SmallRng,
    change: &Change,
    members: &[u16],
    coordinator: u16,
) -> Option<u16> {
    let (joining, leaving) = match *change {
        Change::Add(n) => (Some(n), None),
        Change::Remove(n) => (None, Some(n)),
        Change::Replace(..) => return None,
    };
    if !rng.random_bool(0.5) {
        return None;
    }
    let candidates: Vec<u16> = (members.iter().copied())
        .chain(joining)
        .filter(|&n| n != coordinator && Some(n) != leaving)
        .collect();
    candidates.choose(rng).copied()
}

/// Runs `logless cluster --http HTTP ARGS` with `bin`, up to `timeout`; the command's output,
/// or why it failed.
pub async fn ask(
    bin: &Path,
    http: SocketAddr,
    change: &Change,
    timeout: Duration,
) -> Result<String, String> {
    let mut command = tokio::process::Command::new(bin);
    command
        .args(["cluster", "--http", &http.to_string()])
        .args(change.args())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true);
    let output = match tokio::time::timeout(timeout, command.output()).await {
        Err(_) => return Err(format!("no answer within {} s", timeout.as_secs())),
        Ok(Err(e)) => return Err(format!("cannot run {}: {e}", bin.display())),
        Ok(Ok(output)) => output,
    };
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    let text = text.trim().replace('\n', " / ");
    if output.status.success() {
        Ok(text)
    } else {
        Err(text)
    }
}

/// The ring's stage as node `http` reads it from the stage register (`GET /cluster`): its name
/// (`Stable(e)`, or `Joint(e)` while a change moves the ring to epoch `e`) and `e`; None if it
/// does not answer.
pub async fn ring_stage(http: SocketAddr) -> Option<(String, u64)> {
    ring_config(http)
        .await
        .map(|(stage, epoch, _)| (stage, epoch))
}

/// The same, with the nodes of the configuration the ring serves with (the old one while
/// joint).
pub async fn ring_config(http: SocketAddr) -> Option<(String, u64, Vec<u16>)> {
    let (code, body) = tokio::task::spawn_blocking(move || {
        logless_harness::probe::http_get(http, "/cluster", Duration::from_secs(2))
    })
    .await
    .ok()?
    .ok()?;
    if code != 200 {
        return None;
    }
    let status: serde_json::Value = serde_json::from_str(&body).ok()?;
    let nodes = (status.get("nodes")?.as_array()?.iter())
        .filter_map(|n| u16::try_from(n.as_u64()?).ok())
        .collect();
    Some((
        status.get("stage")?.as_str()?.to_string(),
        status.get("epoch")?.as_u64()?,
        nodes,
    ))
}

/// Waits up to `timeout` until node `http` reads from the stage register a stage of an epoch
/// after `epoch` (the joint stage of the change that leaves `Stable(epoch)`, or the stable one
/// after it); that stage and when it was seen, or None.
pub async fn await_epoch_after(
    http: SocketAddr,
    epoch: u64,
    timeout: Duration,
) -> Option<(String, std::time::Instant)> {
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        if let Some((stage, e)) = ring_stage(http).await {
            if e > epoch {
                return Some((stage, std::time::Instant::now()));
            }
        }
        if tokio::time::Instant::now() >= deadline {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The peers node `http` has a live link of a data shard to (the ring shard, the last, may
/// never send to some), from its `/status`; None if it does not answer.
pub async fn peers_up(http: SocketAddr) -> Option<BTreeSet<u16>> {
    let body = tokio::task::spawn_blocking(move || {
        logless_harness::probe::http_get(http, "/status", Duration::from_secs(2))
    })
    .await
    .ok()?
    .ok()?
    .1;
    let status: serde_json::Value = serde_json::from_str(&body).ok()?;
    let links = status.get("links")?.as_array()?;
    let field = |l: &serde_json::Value, name: &str| l.get(name).and_then(|v| v.as_u64());
    let ring_shard = links.iter().filter_map(|l| field(l, "shard")).max()?;
    Some(
        links
            .iter()
            .filter(|l| {
                field(l, "shard") != Some(ring_shard)
                    && l.get("up").and_then(|v| v.as_bool()) == Some(true)
            })
            .filter_map(|l| field(l, "peer").and_then(|p| u16::try_from(p).ok()))
            .collect(),
    )
}

/// Waits up to `timeout` until node `http` sees each of `up` up and each of `down` down;
/// whether it did.
pub async fn await_links(http: SocketAddr, up: &[u16], down: &[u16], timeout: Duration) -> bool {
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        if let Some(seen) = peers_up(http).await {
            if up.iter().all(|n| seen.contains(n)) && !down.iter().any(|n| seen.contains(n)) {
                return true;
            }
        }
        if tokio::time::Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    #[test]
    fn changes_go_add_remove_replace_while_spares_last_and_a_failed_one_is_asked_again() {
        let mut rng = SmallRng::seed_from_u64(3);
        let mut m = Membership::new(vec![1, 2, 3, 4, 5], vec![6, 7], 3);
        let add = m.plan(&mut rng).unwrap();
        assert_eq!(add, Change::Add(6));
        m.failed(&add, "refused".into());
        assert_eq!(m.plan(&mut rng), Some(add.clone()));
        m.completed(&add, Duration::ZERO);
        assert_eq!(m.members, vec![1, 2, 3, 4, 5, 6]);
        let Some(Change::Remove(gone)) = m.plan(&mut rng) else {
            panic!("a removal")
        };
        m.completed(&Change::Remove(gone), Duration::ZERO);
        assert_eq!(m.members.len(), 5);
        let Some(Change::Replace(old, 7)) = m.plan(&mut rng) else {
            panic!("a replacement by 7")
        };
        assert!(m.members.contains(&old) && old != gone);
        m.completed(&Change::Replace(old, 7), Duration::ZERO);
        assert!(m.members.contains(&7) && !m.members.contains(&old));
        assert!(m.spares.is_empty());
        // No spare left: one removal (to R + 1 = 4 members), then nothing.
        let Some(Change::Remove(n)) = m.plan(&mut rng) else {
            panic!("a removal")
        };
        m.completed(&Change::Remove(n), Duration::ZERO);
        assert_eq!(m.plan(&mut rng), None);
        assert_eq!(m.completed.len(), 4);
        assert_eq!(m.failed.len(), 1);
    }

    #[test]
    fn recycled_nodes_come_back_as_spares_so_changes_never_run_out() {
        let mut rng = SmallRng::seed_from_u64(4);
        let mut m = Membership::recycling(vec![1, 2, 3, 4, 5], vec![6], 3);
        let mut added_again = false;
        for _ in 0..30 {
            let change = m.plan(&mut rng).expect("a change is always left");
            if let Change::Add(n) | Change::Replace(_, n) = change {
                added_again |= n <= 5;
            }
            m.completed(&change, Duration::ZERO);
            assert!((4..=6).contains(&m.members.len()));
            assert_eq!(m.members.len() + m.spares.len(), 6);
        }
        assert!(added_again, "a node removed or replaced joins again");
    }

    #[test]
    fn a_change_is_seen_made_in_the_configuration_it_leads_to() {
        let before = [1, 2, 3, 4, 5];
        for change in [Change::Add(6), Change::Remove(2), Change::Replace(3, 6)] {
            assert!(!change.made_in(&before), "{change:?}");
        }
        assert!(Change::Add(6).made_in(&[1, 2, 3, 4, 5, 6]));
        assert!(Change::Remove(2).made_in(&[1, 3, 4, 5]));
        assert!(Change::Replace(3, 6).made_in(&[1, 2, 4, 5, 6]));
    }

    #[test]
    fn the_side_victim_is_never_the_coordinator_nor_the_node_removed() {
        let mut rng = SmallRng::seed_from_u64(5);
        let members = [1, 2, 3, 4, 5];
        let mut joiner_killed = false;
        for _ in 0..200 {
            if let Some(v) = side_victim(&mut rng, &Change::Add(6), &members, 2) {
                assert_ne!(v, 2);
                joiner_killed |= v == 6;
            }
            if let Some(v) = side_victim(&mut rng, &Change::Remove(4), &members, 1) {
                assert!(v != 1 && v != 4 && members.contains(&v));
            }
            assert_eq!(
                side_victim(&mut rng, &Change::Replace(3, 6), &members, 1),
                None
            );
        }
        assert!(joiner_killed);
    }

    #[test]
    fn coordinators_are_killed_on_some_additions_and_removals_and_no_replacement() {
        let mut rng = SmallRng::seed_from_u64(9);
        let draws = |rng: &mut SmallRng, change: &Change| {
            (0..300).filter(|_| kills_coordinator(rng, change)).count()
        };
        let (adds, removes) = (
            draws(&mut rng, &Change::Add(6)),
            draws(&mut rng, &Change::Remove(2)),
        );
        assert!((50..150).contains(&adds) && (50..150).contains(&removes));
        assert_eq!(draws(&mut rng, &Change::Replace(3, 6)), 0);
    }
}
