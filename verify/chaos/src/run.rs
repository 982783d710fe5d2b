//! One chaos run from start to verdict: cluster behind the proxy, workload and nemesis for the
//! duration, heal, recovery, final reads, the replicas' digests (psmr), lost-write check,
//! Porcupine.
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use logless_harness::server::{self, ServerSpec};
use tokio::sync::watch;

use crate::checker::{self, Verdict};
use crate::cluster::{self, Cluster, ClusterConfig};
use crate::digests::{self, Digests};
use crate::history::{Clock, Counts, History};
use crate::lost::{self, LostWrite};
use crate::membership::Membership;
use crate::multikey::{MultiKey, MultiKeyConfig, MultiKeyReport};
use crate::nemesis::{self, FaultKind, FaultLog, Overlaps, Schedule};
use crate::proxy::Proxy;
use crate::removals::Removals;
use crate::stamps::Pauses;
use crate::workload::{ExpiryStats, KeyKind, Workload, WorkloadConfig};

/// Everything a run needs.
#[derive(Clone, Debug)]
pub struct RunConfig {
    /// Replicas (3 or 5): on a ring, the members of its first configuration.
    pub replicas: u16,
    /// Further nodes in every peer list of a ring but not in its first configuration, for
    /// the `member` faults to add (0: none).
    pub spares: u16,
    /// How long the workload and the nemesis run.
    pub duration: Duration,
    /// The workload.
    pub workload: WorkloadConfig,
    /// The multi-key workload (no clients: none).
    pub multi_key: MultiKeyConfig,
    /// The replicas.
    pub cluster: ClusterConfig,
    /// The nemesis (no kinds: no faults).
    pub schedule: Schedule,
    /// Where history, faults, logs, data and the checker's visualisations go.
    pub out: PathBuf,
    /// Keep the replicas' data directories after a passing run.
    pub keep_data: bool,
    /// How long the cluster may take to serve again after everything is healed.
    pub recover_timeout: Duration,
    /// The checker's time limit.
    pub checker_timeout: Duration,
    /// The checker's directory (`verify/checker/` of the repository).
    pub checker_dir: PathBuf,
    /// Print progress this often (zero: never).
    pub progress: Duration,
}

/// What a run found.
#[derive(Debug)]
pub struct Report {
    /// The workload's operations (final reads excluded).
    pub workload: Counts,
    /// The same by the kind of their key.
    pub by_kind: BTreeMap<KeyKind, Counts>,
    /// What the clients saw of expiry and leases.
    pub expiry: ExpiryStats,
    /// The final reads.
    pub final_reads: Counts,
    /// Seconds the workload ran.
    pub workload_secs: f64,
    /// Faults by kind (`crash`: replicas that exited on their own).
    pub faults: BTreeMap<FaultKind, usize>,
    /// Keys by kind.
    pub keys: BTreeMap<KeyKind, usize>,
    /// Keys whose final read never got an answer.
    pub unread: Vec<String>,
    /// How long the cluster took to serve after the final heal (None: it did not in time).
    pub recovered: Option<Duration>,
    /// The multi-key workload's operations and its atomicity check.
    pub multi_key: MultiKeyReport,
    /// The checker's verdict and output.
    pub verdict: Verdict,
    /// What the checker printed.
    pub checker_output: String,
    /// How long the checker took (seconds).
    pub checker_secs: f64,
    /// Lost (or phantom) writes.
    pub lost: Vec<LostWrite>,
    /// Error replies the model does not know, and malformed replies.
    pub odd_replies: Vec<String>,
    /// Registers each replica removed (at least), by node id; empty if none reported any.
    pub removed: BTreeMap<u16, u64>,
    /// The replicas' service digests after the final reads (psmr only).
    pub digests: Option<Digests>,
    /// The ring's changes (`member` faults only).
    pub membership: Option<Membership>,
    /// How the ring's changes overlapped the other faults (`member` faults only).
    pub overlaps: Option<Overlaps>,
}

/// How long the replicas' digests may take to become equal after the final reads (a replica
/// back from a fault may still be executing what the others did). Clean runs find them equal
/// at the first reading (0.0 s, also on 2 cores loaded by builds); a run whose replicas
/// diverged waits it out in full.
const DIGESTS_SETTLE: Duration = Duration::from_secs(5);

/// Runs `f` with SIGINT (Ctrl-C) or SIGTERM turning into an error (the replicas are then
/// killed as the cluster is dropped).
async fn interruptible<T>(f: impl std::future::Future<Output = T>) -> Result<T, String> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut terminate =
        signal(SignalKind::terminate()).map_err(|e| format!("signal handler: {e}"))?;
    tokio::select! {
        v = f => Ok(v),
        _ = tokio::signal::ctrl_c() => Err("interrupted".into()),
        _ = terminate.recv() => Err("terminated".into()),
    }
}

fn progress_line(
    clock: &Clock,
    workload: &Workload,
    faults: &FaultLog,
    removals: &Removals,
) -> String {
    let (counts, _) = workload.history.counts();
    let kinds: Vec<String> = faults
        .counts()
        .iter()
        .map(|(k, n)| format!("{} {n}", k.name()))
        .collect();
    let expiry = workload.expiry_stats();
    format!(
        "logless-chaos: {:>6.0} s  ops ok {} fail {} unknown {}  keys {}  expired reads {}  \
         takeovers {}  removed {}  faults [{}]",
        clock.now() as f64 / 1e9,
        counts.ok,
        counts.fail,
        counts.unknown,
        workload.keys.all_keys().len(),
        expiry.expired_reads,
        expiry.takeovers,
        removals.by_node().values().sum::<u64>(),
        kinds.join(", ")
    )
}

/// Runs the whole experiment; `Err` means the harness could not do its job (the message says
/// why), not that the store misbehaved.
pub async fn run(config: RunConfig) -> Result<Report, String> {
    let n = config.replicas + config.spares;
    let ids: Vec<u16> = (1..=n).collect();
    std::fs::create_dir_all(&config.out)
        .map_err(|e| format!("cannot create {}: {e}", config.out.display()))?;
    let data = config.out.join("data");
    let ports: Vec<SocketAddr> = logless_harness::ports::free_ports(3 * n)
        .map_err(|e| format!("ports: {e}"))?
        .into_iter()
        .map(|port| SocketAddr::from(([127, 0, 0, 1], port)))
        .collect();
    let peer_of: Vec<SocketAddr> = ids
        .iter()
        .map(|&id| ports[3 * usize::from(id - 1) + 1])
        .collect();
    let proxy = Proxy::start(&ids, |to| peer_of[usize::from(to - 1)])
        .await
        .map_err(|e| format!("proxy: {e}"))?;
    // Each replica reaches itself directly and every other one through the proxy.
    let specs: Vec<ServerSpec> = ids
        .iter()
        .map(|&me| {
            let i = 3 * usize::from(me - 1);
            let peers = ids
                .iter()
                .map(|&to| {
                    let addr = if to == me {
                        peer_of[usize::from(me - 1)]
                    } else {
                        proxy.addr(me, to)
                    };
                    (to, addr)
                })
                .collect();
            ServerSpec {
                node_id: me,
                peers,
                client: ports[i],
                peer: ports[i + 1],
                http: ports[i + 2],
                dir: data.join(format!("node-{me}")),
                log: config.out.join(format!("node-{me}.log")),
                durability: config.cluster.durability.clone(),
                shards: None,
                extra: Vec::new(),
            }
        })
        .collect();
    if config.spares > 0 {
        // The ring's first configuration is derived from the peer list of its first start:
        // the members start alone, write it, and stop; then every node, spares included,
        // starts with the whole list (docs/ring.md §4 "Operating"), and the ring is what the
        // register says until a spare is added.
        let members: Vec<ServerSpec> = (specs.iter().take(usize::from(config.replicas)))
            .map(|spec| {
                let mut spec = spec.clone();
                spec.peers.truncate(usize::from(config.replicas));
                spec
            })
            .collect();
        let first = start_ring(&config, members).await?;
        let c = first.clone();
        let _ = tokio::task::spawn_blocking(move || {
            c.lock()
                .expect("not poisoned")
                .shutdown(Duration::from_secs(5))
        })
        .await;
    }
    let cluster = start_ring(&config, specs).await?;
    let addrs = cluster.lock().expect("not poisoned").client_addrs();
    let membership = (config.spares > 0 && config.schedule.kinds.contains(&FaultKind::Member))
        .then(|| {
            let r = usize::from(config.cluster.replication.unwrap_or(3));
            let (members, spares) = (
                (1..=config.replicas).collect(),
                (config.replicas + 1..=n).collect(),
            );
            // The member lane returns the nodes it removes to the spares, so that its changes
            // go on for the whole run.
            Arc::new(Mutex::new(if config.schedule.member_serial {
                Membership::new(members, spares, r)
            } else {
                Membership::recycling(members, spares, r)
            }))
        });

    let clock = Clock::start();
    let faults = Arc::new(
        FaultLog::create(&config.out.join("faults.jsonl"))
            .map_err(|e| format!("faults.jsonl: {e}"))?,
    );
    let history_path = config.out.join("history.jsonl");
    let history = History::create(&history_path, clock.epoch_ms())
        .map_err(|e| format!("history.jsonl: {e}"))?;
    let pauses = Arc::new(Pauses::default());
    let workload = Workload::new(
        config.workload.clone(),
        addrs.clone(),
        pauses.clone(),
        clock,
        history,
    );
    let (stop_clients, stop_rx) = watch::channel(false);
    let clients: Vec<_> = (0..config.workload.clients)
        .map(|i| tokio::spawn(workload.clone().client(i, stop_rx.clone())))
        .collect();
    let multi_key = MultiKey::new(config.multi_key.clone(), addrs.clone(), clock);
    let multi_clients: Vec<_> = (0..config.multi_key.clients)
        .map(|i| tokio::spawn(multi_key.clone().client(i, stop_rx.clone())))
        .collect();
    let (stop_nemesis, nemesis_rx) = watch::channel(false);
    let nemesis = (!config.schedule.kinds.is_empty()).then(|| {
        tokio::spawn(nemesis::run(
            config.schedule.clone(),
            cluster.clone(),
            proxy.clone(),
            faults.clone(),
            pauses.clone(),
            membership.clone(),
            clock,
            nemesis_rx,
        ))
    });

    // Sampled every second (a removal a replica made after its last sample and before a
    // kill is not seen), and once more after the final reads.
    let removals = Arc::new(Removals::default());
    let (stop_sampling, sampling_rx) = watch::channel(false);
    let sampler = {
        let (removals, addrs) = (removals.clone(), addrs.clone());
        tokio::spawn(async move {
            removals
                .sample_until(&addrs, Duration::from_secs(1), sampling_rx)
                .await;
        })
    };

    let started = Instant::now();
    let wait = async {
        let mut next_progress = config.progress;
        while started.elapsed() < config.duration {
            tokio::time::sleep(Duration::from_millis(200)).await;
            if !config.progress.is_zero() && started.elapsed() >= next_progress {
                eprintln!("{}", progress_line(&clock, &workload, &faults, &removals));
                next_progress += config.progress;
            }
        }
    };
    interruptible(wait).await?;

    // Heal: the nemesis ends its current fault, then anything still down comes back.
    stop_nemesis.send_replace(true);
    if let Some(task) = nemesis {
        let _ = task.await;
    }
    proxy.heal_all();
    nemesis::reap_crashes(&cluster, &faults, &clock);
    cluster
        .lock()
        .expect("not poisoned")
        .heal()
        .map_err(|e| format!("cannot restart a replica: {e}"))?;
    stop_clients.send_replace(true);
    for c in clients.into_iter().chain(multi_clients) {
        let _ = c.await;
    }
    let workload_secs = started.elapsed().as_secs_f64();
    let recovered = interruptible(cluster::wait_ready(&addrs, config.recover_timeout)).await?;
    nemesis::reap_crashes(&cluster, &faults, &clock);
    let unread = interruptible(workload.final_reads(Duration::from_secs(60))).await?;
    stop_sampling.send_replace(true);
    let _ = sampler.await;
    removals.sample(&addrs).await;
    let digests = match config.cluster.psmr {
        Some(_) => Some(interruptible(digests::compare(&addrs, DIGESTS_SETTLE)).await?),
        None => None,
    };

    let ops = workload
        .history
        .finish()
        .map_err(|e| format!("history.jsonl: {e}"))?;
    let lost = lost::check(&ops);
    let (dir, html, timeout) = (
        config.checker_dir.clone(),
        config.out.join("html"),
        config.checker_timeout,
    );
    let hp = history_path.clone();
    let checker_started = Instant::now();
    let (verdict, checker_output) =
        tokio::task::spawn_blocking(move || checker::run(&dir, &hp, &html, timeout))
            .await
            .map_err(|e| format!("checker task: {e}"))?;
    let checker_secs = checker_started.elapsed().as_secs_f64();
    let multi = multi_key.clone();
    let multi_key = tokio::task::spawn_blocking(move || multi.check())
        .await
        .map_err(|e| format!("multi-key checker task: {e}"))?;
    std::fs::write(config.out.join("checker.txt"), &checker_output)
        .map_err(|e| format!("writing checker.txt: {e}"))?;

    let c = cluster.clone();
    let _ = tokio::task::spawn_blocking(move || {
        c.lock()
            .expect("not poisoned")
            .shutdown(Duration::from_secs(5))
    })
    .await;
    let passed = verdict == Verdict::Linearizable
        && lost.is_empty()
        && !multi_key.violated()
        && digests
            .as_ref()
            .is_none_or(|d| matches!(d, Digests::Equal { .. }));
    if passed && !config.keep_data {
        let _ = std::fs::remove_dir_all(&data);
    }

    let mut keys = BTreeMap::new();
    for key in workload.keys.all_keys() {
        if let Some(kind) = KeyKind::of(&key) {
            *keys.entry(kind).or_insert(0) += 1;
        }
    }
    let odd_replies = workload.odd_replies.lock().expect("not poisoned").clone();
    let (workload_counts, final_reads) = workload.history.counts();
    Ok(Report {
        workload: workload_counts,
        by_kind: workload.history.counts_by_kind(),
        expiry: workload.expiry_stats(),
        final_reads,
        workload_secs,
        faults: faults.counts(),
        keys,
        unread,
        recovered,
        multi_key,
        verdict,
        checker_output,
        checker_secs,
        lost,
        odd_replies,
        removed: removals.by_node(),
        digests,
        overlaps: membership.as_ref().map(|_| faults.overlaps()),
        membership: membership.map(|m| m.lock().expect("not poisoned").clone()),
    })
}

/// Starts a cluster of `specs` (on a ring, each with `--peer-client-addrs` of them all) and
/// waits until every node serves.
async fn start_ring(
    config: &RunConfig,
    specs: Vec<ServerSpec>,
) -> Result<Arc<Mutex<Cluster>>, String> {
    // A ring forwards commands on keys a replica does not hold to their replicas' client
    // addresses, directly (not through the proxy, which carries the peer links).
    let specs = if config.cluster.replication.is_some() {
        let addrs = server::client_addrs_flag(&specs);
        (specs.into_iter())
            .map(|spec| spec.flag("--peer-client-addrs", &addrs))
            .collect()
    } else {
        specs
    };
    let mut cluster = Cluster::new(config.cluster.clone(), specs);
    for id in cluster.ids() {
        cluster
            .start(id)
            .map_err(|e| format!("cannot start {}: {e}", config.cluster.bin.display()))?;
    }
    let addrs = cluster.client_addrs();
    let cluster = Arc::new(Mutex::new(cluster));
    let ready = interruptible(cluster::wait_ready(&addrs, Duration::from_secs(30))).await?;
    if ready.is_none() {
        let mut c = cluster.lock().expect("not poisoned");
        let mut tails = String::new();
        for exit in c.reap_unexpected() {
            tails += &format!(
                "\nnode {} exited ({}):\n{}",
                exit.id, exit.status, exit.log_tail
            );
        }
        return Err(format!(
            "the cluster did not serve within 30 s (logs in {}){tails}",
            config.out.display()
        ));
    }
    Ok(cluster)
}
