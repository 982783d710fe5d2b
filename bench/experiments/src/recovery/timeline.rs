//! Job 4, seed 002's Figs. 4–5: every replica's throughput over time while a follower, then
//! the leader, is killed with SIGKILL and started again, with 3 and 5 replicas.
//!
//! A filled cluster takes Table II's mix (half SETs of 8 kB, half GETs of the state's keys)
//! from closed-loop clients spread evenly over the replicas. As in seed 002, a client stays
//! with one replica and moves to another picked at random every [`SWITCH_EVERY`] commands (and at once when its connection
//! fails), so that a restarted replica gets clients again. Two series per replica, in
//! [`BUCKET_MS`] buckets from the start of the load:
//!
//! * **answered**: the commands answered with a value or `OK` by that replica, counted by the
//!   clients connected to it (what the replica sends back to its clients: seed 002's Fig. 4
//!   measured the same as outgoing link usage); their sum over the replicas is the system's
//!   throughput (Fig. 5);
//! * **executed**: the growth of its INFO counter `log_requests_executed_total`, sampled every
//!   [`BUCKET_MS`] by one thread per replica (a killed or silent replica leaves gaps).
//!
//! The schedule ([`Schedule`]): `settle` seconds of load, a follower killed, started again
//! `down` seconds later, `settle` seconds, the leader of that moment killed, started again
//! `down` seconds later, `settle` seconds more (each phase timed from the event before it). [`recoveries`] reads, for each of the two
//! crashes, the throughput before any crash, while the replica is down and its lowest point,
//! and how long after its start the restarted replica voted, answered a client, caught up with
//! the others' execution and the system's throughput was back to 90% of what it was before.
use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use serde::Serialize;

use crate::failover::info_replication;
use crate::psmr::load::Conn;
use crate::space::progress;

use super::cluster::{key, keys_for, votes_in, Cluster, VALUE_BYTES};
use super::Mode;

/// The width of a bucket of the series, and the sampling period of INFO.
pub const BUCKET_MS: u64 = 100;
/// Commands a client sends to one replica before it moves to another one picked at random
/// (seed 002's clients moved every 1k requests, at a much higher rate).
pub const SWITCH_EVERY: u64 = 200;
/// Table II's mix: half puts.
const PUT_SHARE: f64 = 0.5;
/// Seconds the phases may run late in all before the run is given up.
const LATE_S: f64 = 60.0;
/// The lowest throughput after a kill is the lowest mean over this many buckets (500 ms).
const LOWEST_BUCKETS: usize = 5;
/// Throughput counts as restored when its mean over this many buckets (1 s) reaches
/// [`RESTORED_SHARE`] of what it was before the crashes.
const RESTORED_BUCKETS: usize = 10;
/// See `RESTORED_BUCKETS`.
pub const RESTORED_SHARE: f64 = 0.9;
/// A replica whose INFO does not answer within this long leaves a gap in its series.
const SAMPLE_PAUSE_AFTER_ERROR: Duration = Duration::from_millis(20);

/// When the replicas are killed and started again.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Schedule {
    /// Seconds of load before the first kill and after each restart.
    pub settle_s: f64,
    /// Seconds a killed replica stays down.
    pub down_s: f64,
}

impl Schedule {
    /// The planned moments, seconds from the start of the load: follower killed, follower
    /// started, leader killed, leader started, end of the load.
    pub fn moments(&self) -> [f64; 5] {
        let (s, d) = (self.settle_s, self.down_s);
        [s, s + d, 2.0 * s + d, 2.0 * s + 2.0 * d, 3.0 * s + 2.0 * d]
    }

    /// An error unless every phase is long enough to be measured.
    pub fn check(&self) -> Result<(), String> {
        if self.settle_s.is_nan() || self.settle_s < 1.0 || self.down_s.is_nan() {
            return Err("--settle-s must be at least 1 (half of the first is warm-up)".into());
        }
        if self.down_s < 0.2 {
            return Err("--down-s must be at least 0.2".into());
        }
        Ok(())
    }
}

/// A kill or a start, as it happened.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Event {
    /// `follower killed`, `follower started`, `leader killed` or `leader started`.
    pub what: &'static str,
    /// The replica, from 1.
    pub replica: usize,
    /// Seconds from the start of the load.
    pub t_s: f64,
}

/// One INFO sample of one replica.
#[derive(Clone, Debug, PartialEq)]
pub struct Sample {
    /// `log_requests_executed_total` (counted from the process's start).
    pub executed: u64,
    /// `log_executed_instance` (-1: none).
    pub executed_instance: i64,
    /// `log_state`.
    pub state: String,
    /// Whether its state is one in which it votes ([`votes_in`]).
    pub votes: bool,
    /// `log_is_leader:1`.
    pub leads: bool,
}

/// The figures of one crash and restart.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Recovery {
    /// `follower` or `leader`.
    pub crashed: &'static str,
    /// The replica killed, from 1.
    pub replica: usize,
    /// System throughput before any crash (the second half of the load before the first
    /// kill), ops/s.
    pub before_ops: f64,
    /// System throughput while the replica was down (its first second left out when it lasted
    /// longer than that), ops/s.
    pub down_ops: f64,
    /// System throughput from its start to the next kill (or the end), ops/s.
    pub after_ops: f64,
    /// The lowest 500 ms mean of the system throughput from the kill to the next kill (or the
    /// end), percent of `before_ops`.
    pub lowest_pct: f64,
    /// The longest stretch without any answer in that window, ms.
    pub gap_ms: f64,
    /// How often the leader changed in that window, as sampled (a replica saying
    /// `log_is_leader:1` other than the one before).
    pub leader_changes: usize,
    /// From its start until its INFO said it votes, ms (to the sample, ±[`BUCKET_MS`]).
    pub votes_ms: Option<f64>,
    /// From its start until it answered a client.
    pub serves_ms: Option<f64>,
    /// From its start until its executed instance reached the others' (as sampled in the
    /// bucket before).
    pub caught_up_ms: Option<f64>,
    /// From its start until the system's throughput over 1 s was back to
    /// [`RESTORED_SHARE`] of `before_ops`.
    pub restored_ms: Option<f64>,
}

/// One run: a mode at one cluster size.
#[derive(Clone, Debug, Serialize)]
pub struct Run {
    /// The `--recovery` mode.
    pub mode: &'static str,
    /// The `--durability` medium.
    pub medium: &'static str,
    /// Replicas in the cluster.
    pub replicas: usize,
    /// The state written before the load, MB.
    pub state_mb: u64,
    /// The planned schedule.
    pub schedule: Schedule,
    /// The kills and starts as they happened.
    pub events: Vec<Event>,
    /// Commands answered by each replica in each bucket: `answered[replica][bucket]`.
    pub answered: Vec<Vec<u64>>,
    /// Commands that failed in each bucket (error replies and lost connections), all replicas.
    pub errors: Vec<u64>,
    /// Requests executed per second by each replica in each bucket (None: no sample).
    pub executed_per_s: Vec<Vec<Option<f64>>>,
    /// The INFO samples: `samples[replica][bucket]`.
    #[serde(skip)]
    pub samples: Vec<Vec<Option<Sample>>>,
    /// The figures of the follower's and the leader's crash.
    pub recoveries: Vec<Recovery>,
}

impl Run {
    /// The system's throughput per bucket, ops/s.
    pub fn total_per_s(&self) -> Vec<f64> {
        let per_s = 1000.0 / BUCKET_MS as f64;
        (0..self.errors.len())
            .map(|b| self.answered.iter().map(|r| r[b]).sum::<u64>() as f64 * per_s)
            .collect()
    }
}

/// How hard the clients press.
#[derive(Clone, Copy, Debug)]
pub struct Clients {
    /// Closed-loop clients.
    pub count: u32,
    /// Commands each has in flight.
    pub pipeline: u32,
}

/// Runs every mode in `modes` (on its restart medium) at every cluster size of `sizes`.
pub fn figs45(
    bin: &Path,
    modes: &[Mode],
    sizes: &[u16],
    state_mb: u64,
    schedule: &Schedule,
    clients: &Clients,
) -> Result<Vec<Run>, String> {
    schedule.check()?;
    if let Some(n) = sizes.iter().find(|&&n| n < 3) {
        return Err(format!(
            "{n} replicas: a crash needs at least 3 to leave a majority"
        ));
    }
    let mut runs = Vec::new();
    for mode in modes {
        for &n in sizes {
            let run = one(bin, mode, n, state_mb, schedule, clients)?;
            for r in &run.recoveries {
                println!("figs 4-5 {} {n} replicas: {}", mode.recovery, line(r));
            }
            runs.push(run);
        }
    }
    Ok(runs)
}

fn line(r: &Recovery) -> String {
    let ms = |x: Option<f64>| x.map_or("never".to_string(), |v| format!("{v:.0} ms"));
    format!(
        "{} (replica {}) down: {:.0} → {:.0} ops/s, lowest {:.0}% of before, votes {}, serves {}, caught up {}, restored {}",
        r.crashed,
        r.replica,
        r.before_ops,
        r.down_ops,
        r.lowest_pct,
        ms(r.votes_ms),
        ms(r.serves_ms),
        ms(r.caught_up_ms),
        ms(r.restored_ms)
    )
}

/// One run: a fresh cluster of `replicas`, filled, loaded and crashed on `schedule`.
fn one(
    bin: &Path,
    mode: &Mode,
    replicas: u16,
    state_mb: u64,
    schedule: &Schedule,
    clients: &Clients,
) -> Result<Run, String> {
    let medium = mode.restart_medium;
    let label = format!("figs 4-5 {} {replicas} replicas", mode.recovery);
    let mut cluster = Cluster::start_with(bin, mode, medium, replicas)?;
    cluster.fill(state_mb, &label)?;
    let endpoints = cluster.clients();
    let keys = keys_for(state_mb);
    // Room for the phases to run late (finding the leader, a port that stays busy).
    let limit = schedule.moments()[4] + LATE_S;
    let buckets = (limit * 1000.0 / BUCKET_MS as f64).ceil() as usize + 1;
    let stop = AtomicBool::new(false);
    let start = Instant::now();
    let (driven, counted, samples) = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..clients.count)
            .map(|c| {
                let (endpoints, stop) = (&endpoints, &stop);
                scope.spawn(move || {
                    client(c, endpoints, keys, clients.pipeline, stop, start, buckets)
                })
            })
            .collect();
        let samplers: Vec<_> = endpoints
            .iter()
            .map(|&addr| {
                let stop = &stop;
                scope.spawn(move || sampler(addr, stop, start, buckets))
            })
            .collect();
        let driven = drive(&mut cluster, schedule, start, limit, &label);
        let end = start.elapsed();
        stop.store(true, Ordering::Relaxed);
        let counted: Vec<Counts> = workers
            .into_iter()
            .map(|w| w.join().expect("a client thread does not panic"))
            .collect();
        let samples: Vec<Vec<Option<Sample>>> = samplers
            .into_iter()
            .map(|s| s.join().expect("a sampler thread does not panic"))
            .collect();
        (driven.map(|events| (events, end)), counted, samples)
    });
    let (events, end) = driven.map_err(|e| cluster.with_logs(e))?;
    // The buckets until the end of the schedule; answers after it are not counted.
    let buckets = (end.as_millis() / u128::from(BUCKET_MS)) as usize;
    let mut answered = vec![vec![0u64; buckets]; endpoints.len()];
    let mut errors = vec![0u64; buckets];
    let samples: Vec<Vec<Option<Sample>>> = samples
        .into_iter()
        .map(|s| s[..buckets.min(s.len())].to_vec())
        .collect();
    for c in &counted {
        for (mine, all) in c.answered.iter().zip(answered.iter_mut()) {
            for (a, b) in all.iter_mut().zip(mine) {
                *a += b;
            }
        }
        for (a, b) in errors.iter_mut().zip(&c.errors) {
            *a += b;
        }
    }
    let mut run = Run {
        mode: mode.recovery,
        medium,
        replicas: endpoints.len(),
        state_mb,
        schedule: *schedule,
        events,
        answered,
        errors,
        executed_per_s: samples.iter().map(|s| executed_per_s(s)).collect(),
        samples,
        recoveries: Vec::new(),
    };
    run.recoveries = recoveries(&run);
    Ok(run)
}

/// Kills and starts the replicas on `schedule` (with a progress bar) and returns what it did.
/// Each phase is timed from the event before it as it happened (finding the leader may take a
/// while when the cluster is busy), and the whole stops by `limit` (seconds from `start`).
fn drive(
    cluster: &mut Cluster,
    schedule: &Schedule,
    start: Instant,
    limit: f64,
    label: &str,
) -> Result<Vec<Event>, String> {
    let bar = progress((schedule.moments()[4] * 10.0).ceil() as u64, "figs 4-5");
    let at = || start.elapsed().as_secs_f64();
    let wait = |from: f64, seconds: f64, phase: &str| -> Result<(), String> {
        bar.set_message(format!("{label}: {phase}"));
        let until_s = from + seconds;
        if until_s > limit {
            return Err(format!(
                "{label}: the schedule ran {:.0} s late",
                until_s - schedule.moments()[4]
            ));
        }
        let until = start + Duration::from_secs_f64(until_s);
        while Instant::now() < until {
            bar.set_position((at() * 10.0) as u64);
            std::thread::sleep(Duration::from_millis(50).min(until - Instant::now()));
        }
        Ok(())
    };
    let mut events: Vec<Event> = Vec::new();
    let mut event = |what: &'static str, replica: usize| {
        events.push(Event {
            what,
            replica: replica + 1,
            t_s: at(),
        });
        at()
    };
    // Whom, the events of the kill and the start, and the phases before and while down.
    let crashes = [
        (
            "follower",
            "follower killed",
            "follower started",
            "steady",
            "follower down",
        ),
        (
            "leader",
            "leader killed",
            "leader started",
            "follower back",
            "leader down",
        ),
    ];
    let mut t = 0.0;
    for (whom, killed, started, before, down) in crashes {
        wait(t, schedule.settle_s, before)?;
        let r = if whom == "follower" {
            cluster.follower()?
        } else {
            cluster.leader()?
        };
        cluster.kill(r)?;
        let at_kill = event(killed, r);
        wait(at_kill, schedule.down_s, down)?;
        cluster.start_again(r)?;
        t = event(started, r);
    }
    wait(t, schedule.settle_s, "leader back")?;
    bar.finish_and_clear();
    Ok(events)
}

/// What one client counted, per bucket.
struct Counts {
    /// `answered[replica][bucket]`.
    answered: Vec<Vec<u64>>,
    errors: Vec<u64>,
}

/// One closed-loop client: batches of `pipeline` commands of Table II's mix to one replica
/// (replica `id` modulo their number first), moving to a random one every [`SWITCH_EVERY`]
/// commands and when its connection fails.
fn client(
    id: u32,
    endpoints: &[SocketAddr],
    keys: u64,
    pipeline: u32,
    stop: &AtomicBool,
    start: Instant,
    buckets: usize,
) -> Counts {
    let mut rng = SmallRng::seed_from_u64(u64::from(id));
    let value = "p".repeat(VALUE_BYTES);
    let mut counts = Counts {
        answered: vec![vec![0; buckets]; endpoints.len()],
        errors: vec![0; buckets],
    };
    let bucket = |t: Instant| {
        let b = (t.duration_since(start).as_millis() / u128::from(BUCKET_MS)) as usize;
        b.min(buckets - 1)
    };
    let pause = Duration::from_millis(10);
    let mut conn: Option<(usize, Conn)> = None;
    let mut sent = 0u64;
    let mut first = true;
    while !stop.load(Ordering::Relaxed) {
        let (at, c) = match conn.as_mut() {
            Some((at, c)) => (*at, c),
            None => {
                // The clients start spread evenly over the replicas, then move at random.
                let at = if first {
                    id as usize % endpoints.len()
                } else {
                    rng.random_range(0..endpoints.len())
                };
                first = false;
                match Conn::open(endpoints[at]) {
                    Ok(c) => {
                        sent = 0;
                        let (_, c) = conn.insert((at, c));
                        (at, c)
                    }
                    Err(_) => {
                        std::thread::sleep(pause);
                        continue;
                    }
                }
            }
        };
        let batch: Vec<Vec<String>> = (0..pipeline.max(1))
            .map(|_| {
                let k = key(rng.random_range(0..keys));
                if rng.random_bool(PUT_SHARE) {
                    vec!["SET".into(), k, value.clone()]
                } else {
                    vec!["GET".into(), k]
                }
            })
            .collect();
        let replies = c.ask(&batch);
        let b = bucket(Instant::now());
        match replies {
            Ok(replies) => {
                let good = replies
                    .iter()
                    .filter(|r| *r == "+OK" || (r.starts_with('$') && *r != "$-1"))
                    .count() as u64;
                counts.answered[at][b] += good;
                counts.errors[b] += replies.len() as u64 - good;
                sent += replies.len() as u64;
                if sent >= SWITCH_EVERY {
                    conn = None;
                }
                if good < replies.len() as u64 {
                    std::thread::sleep(pause);
                }
            }
            Err(_) => {
                counts.errors[b] += batch.len() as u64;
                conn = None;
                std::thread::sleep(pause);
            }
        }
    }
    counts
}

/// Samples INFO `replication` of `addr` at the start of every bucket until `stop`.
fn sampler(
    addr: SocketAddr,
    stop: &AtomicBool,
    start: Instant,
    buckets: usize,
) -> Vec<Option<Sample>> {
    let mut out = vec![None; buckets];
    let mut next = 0usize;
    while !stop.load(Ordering::Relaxed) && next < buckets {
        let due = start + Duration::from_millis(BUCKET_MS * next as u64);
        std::thread::sleep(due.saturating_duration_since(Instant::now()));
        let info = info_replication(addr);
        let b = (start.elapsed().as_millis() / u128::from(BUCKET_MS)) as usize;
        match info.ok().and_then(|text| sample(&text)) {
            Some(s) if b < buckets => out[b] = Some(s),
            Some(_) => {}
            None => std::thread::sleep(SAMPLE_PAUSE_AFTER_ERROR),
        }
        next = b + 1;
    }
    out
}

/// The figures a sample keeps from INFO `replication` text (None: not a log-engine replica's).
pub fn sample(info: &str) -> Option<Sample> {
    let field = |name: &str| {
        info.lines()
            .find_map(|l| l.trim_end().strip_prefix(name)?.strip_prefix(':'))
    };
    Some(Sample {
        executed: field("log_requests_executed_total")?.parse().ok()?,
        executed_instance: field("log_executed_instance")?.parse().ok()?,
        state: field("log_state")?.to_string(),
        votes: votes_in(info),
        leads: field("log_is_leader") == Some("1"),
    })
}

/// Requests executed per second in each bucket: the growth of the counter since the sample
/// before (None where either is missing or the counter went back, as after a restart).
pub fn executed_per_s(samples: &[Option<Sample>]) -> Vec<Option<f64>> {
    let mut out = vec![None; samples.len()];
    let mut last: Option<(usize, u64)> = None;
    for (b, s) in samples.iter().enumerate() {
        let Some(s) = s else {
            last = None;
            continue;
        };
        if let Some((p, executed)) = last {
            if s.executed >= executed {
                let seconds = (b - p) as f64 * BUCKET_MS as f64 / 1000.0;
                out[b] = Some((s.executed - executed) as f64 / seconds);
            }
        }
        last = Some((b, s.executed));
    }
    out
}

/// The figures of each crash of `run` (the follower's, then the leader's).
pub fn recoveries(run: &Run) -> Vec<Recovery> {
    let total = run.total_per_s();
    let bucket_of = |t_s: f64| ((t_s * 1000.0 / BUCKET_MS as f64) as usize).min(total.len());
    let mean = |from: usize, to: usize| {
        let to = to.min(total.len());
        if from >= to {
            return 0.0;
        }
        total[from..to].iter().sum::<f64>() / (to - from) as f64
    };
    // The second half of the load before the first kill: the first is warm-up.
    let first_kill = run.events.first().map_or(total.len(), |e| bucket_of(e.t_s));
    let before = mean(first_kill / 2, first_kill);
    let ms_after = |from: usize, b: usize| (b - from) as f64 * BUCKET_MS as f64;
    let mut out = Vec::new();
    for (i, pair) in run.events.chunks(2).enumerate() {
        let [killed, started] = pair else { continue };
        let r = killed.replica - 1;
        let (kill, restart) = (bucket_of(killed.t_s), bucket_of(started.t_s));
        let end = run
            .events
            .get(2 * i + 2)
            .map_or(total.len(), |e| bucket_of(e.t_s));
        let down_from = if restart > kill + 10 { kill + 10 } else { kill };
        let lowest = (kill..end.saturating_sub(LOWEST_BUCKETS - 1).max(kill + 1))
            .map(|b| mean(b, b + LOWEST_BUCKETS))
            .fold(f64::INFINITY, f64::min);
        let gap = total[kill.min(total.len())..end]
            .split(|&x| x > 0.0)
            .map(<[f64]>::len)
            .max()
            .unwrap_or(0);
        let samples = &run.samples[r];
        let from_restart = || restart..end;
        let votes = from_restart().find(|&b| samples[b].as_ref().is_some_and(|s| s.votes));
        let serves = from_restart().find(|&b| run.answered[r][b] > 0);
        let caught_up = from_restart().find(|&b| {
            let Some(mine) = samples[b].as_ref() else {
                return false;
            };
            let head = (0..run.samples.len())
                .filter(|&o| o != r)
                .filter_map(|o| {
                    run.samples[o][..b]
                        .iter()
                        .rev()
                        .find_map(|s| s.as_ref().map(|s| s.executed_instance))
                })
                .max();
            head.is_some_and(|h| mine.executed_instance >= h)
        });
        let restored = (restart..end.saturating_sub(RESTORED_BUCKETS - 1))
            .find(|&b| mean(b, b + RESTORED_BUCKETS) >= RESTORED_SHARE * before);
        out.push(Recovery {
            crashed: if i == 0 { "follower" } else { "leader" },
            replica: killed.replica,
            before_ops: before,
            down_ops: mean(down_from, restart),
            after_ops: mean(restart, end),
            lowest_pct: if before > 0.0 && lowest.is_finite() {
                lowest / before * 100.0
            } else {
                0.0
            },
            gap_ms: gap as f64 * BUCKET_MS as f64,
            leader_changes: leader_changes(&run.samples, kill..end),
            votes_ms: votes.map(|b| ms_after(restart, b)),
            serves_ms: serves.map(|b| ms_after(restart, b)),
            caught_up_ms: caught_up.map(|b| ms_after(restart, b)),
            restored_ms: restored.map(|b| ms_after(restart, b)),
        });
    }
    out
}

/// How often the sampled leader changed in `buckets` (buckets where no replica or several say
/// they lead are skipped).
fn leader_changes(samples: &[Vec<Option<Sample>>], buckets: std::ops::Range<usize>) -> usize {
    let leaders = buckets.filter_map(|b| {
        let mut leading = samples
            .iter()
            .enumerate()
            .filter(|(_, s)| s.get(b).and_then(Option::as_ref).is_some_and(|s| s.leads));
        match (leading.next(), leading.next()) {
            (Some((r, _)), None) => Some(r),
            _ => None,
        }
    });
    let mut last = None;
    let mut changes = 0;
    for r in leaders {
        if last.is_some_and(|l| l != r) {
            changes += 1;
        }
        last = Some(r);
    }
    changes
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(executed: u64, instance: i64, state: &str) -> Option<Sample> {
        Some(Sample {
            executed,
            executed_instance: instance,
            state: state.into(),
            votes: state == "serving" || state == "rebuilding",
            leads: false,
        })
    }

    #[test]
    fn the_schedule_is_settle_down_settle_down_settle() {
        let s = Schedule {
            settle_s: 10.0,
            down_s: 5.0,
        };
        assert_eq!(s.moments(), [10.0, 15.0, 25.0, 30.0, 40.0]);
        assert!(s.check().is_ok());
        let short = Schedule {
            settle_s: 0.5,
            down_s: 5.0,
        };
        assert!(short.check().unwrap_err().contains("--settle-s"));
    }

    #[test]
    fn a_sample_is_read_from_info_replication() {
        let info = "# Replication\r\nrole:master\r\nlogless_engine:multipaxos\r\nlog_recovery:pmem\r\nlog_state:rebuilding\r\nlog_is_leader:1\r\nlog_executed_instance:41\r\nlog_requests_executed_total:1234\r\n\r\n";
        let got = sample(info).expect("a sample");
        assert_eq!(got.executed, 1234);
        assert_eq!(got.executed_instance, 41);
        assert_eq!(got.state, "rebuilding");
        assert!(got.votes && got.leads);
        assert_eq!(sample("# Replication\r\nrole:master\r\n"), None);
    }

    #[test]
    fn executed_rates_leave_gaps_where_a_sample_or_the_counter_is_missing() {
        let samples = [
            s(0, 0, "serving"),
            s(10, 1, "serving"),
            None,
            s(3, 0, "recovering"),
            s(8, 1, "serving"),
            s(28, 2, "serving"),
        ];
        let rates = executed_per_s(&samples);
        assert_eq!(
            rates,
            [None, Some(100.0), None, None, Some(50.0), Some(200.0)]
        );
    }

    /// A 2-replica toy run: replica 1 answers 10 per bucket throughout; replica 2 answers 10
    /// per bucket, is killed at bucket 20 and started at bucket 30, votes at 32, answers from
    /// 34 and reaches replica 1's instance at 36.
    fn toy() -> Run {
        let n = 60;
        let mut answered = vec![vec![10u64; n], vec![10u64; n]];
        answered[1][20..34].fill(0);
        answered[0][20..23].fill(0);
        let leader: Vec<Option<Sample>> = (0..n).map(|b| s(0, 100 + b as i64, "serving")).collect();
        let mut back: Vec<Option<Sample>> =
            (0..n).map(|b| s(0, 100 + b as i64, "serving")).collect();
        for (b, x) in back.iter_mut().enumerate().take(36).skip(20) {
            *x = match b {
                20..=29 => None,
                30 | 31 => s(0, 0, "recovering"),
                _ => s(0, 50, "serving"),
            };
        }
        Run {
            mode: "pmem",
            medium: "emulp",
            replicas: 2,
            state_mb: 1,
            schedule: Schedule {
                settle_s: 2.0,
                down_s: 1.0,
            },
            events: vec![
                Event {
                    what: "follower killed",
                    replica: 2,
                    t_s: 2.0,
                },
                Event {
                    what: "follower started",
                    replica: 2,
                    t_s: 3.0,
                },
            ],
            answered,
            errors: vec![0; n],
            executed_per_s: Vec::new(),
            samples: vec![leader, back],
            recoveries: Vec::new(),
        }
    }

    #[test]
    fn leader_changes_count_moves_of_the_one_leader() {
        let leads = |l: bool| {
            Some(Sample {
                leads: l,
                ..s(0, 0, "serving").unwrap()
            })
        };
        let a = vec![leads(true), leads(true), None, leads(false), leads(true)];
        let b = vec![
            leads(false),
            leads(true),
            leads(false),
            leads(true),
            leads(false),
        ];
        // Bucket 1: both lead (skipped); 0: a, 3: b, 4: a.
        assert_eq!(leader_changes(&[a.clone(), b.clone()], 0..5), 2);
        assert_eq!(leader_changes(&[a, b], 0..3), 0);
    }

    #[test]
    fn a_recovery_is_read_from_the_series() {
        let got = recoveries(&toy());
        assert_eq!(got.len(), 1);
        let r = &got[0];
        assert_eq!((r.crashed, r.replica), ("follower", 2));
        assert_eq!(r.before_ops, 200.0);
        // Down for 10 buckets: the mean from the kill, 3 silent buckets and 7 of 100 ops/s.
        assert!((r.down_ops - 70.0).abs() < 1e-9, "{}", r.down_ops);
        // From bucket 30 to 60: 4 buckets of 100 ops/s, 26 of 200.
        assert!((r.after_ops - 186.666_666).abs() < 1e-3, "{}", r.after_ops);
        assert_eq!(r.gap_ms, 300.0);
        assert_eq!(r.leader_changes, 0);
        // The lowest 500 ms: 3 silent buckets and 2 of 100 ops/s, 20% of 200.
        assert_eq!(r.lowest_pct, 20.0);
        assert_eq!(r.votes_ms, Some(200.0));
        assert_eq!(r.serves_ms, Some(400.0));
        assert_eq!(r.caught_up_ms, Some(600.0));
        // Back to 90% of 200 ops/s over 1 s once replica 2 answers for 8 of its 10 buckets.
        assert_eq!(r.restored_ms, Some(200.0));
    }
}
