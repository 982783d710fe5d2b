//! Starting and stopping a replica: opens the stores, builds the shards, binds the listeners
//! and wires the tasks together.
use std::net::SocketAddr;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use logless_multipaxos::config::InjectedBugs as LogBugs;
use logless_rmw::config::InjectedBugs;
use logless_rmw::ids::NodeId;
use logless_rmw::replica::Replica;
use rustc_hash::FxHashMap;
use thiserror::Error;
use tokio::net::TcpListener;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tracing::{error, info, warn};

use crate::config::{ConfigError, Engine, NodeConfig, Recovery};
use crate::context::{Bound, ClientCounters, NodeContext, Settings};
use crate::durable_log::{DurableLog, DurableLogError};
use crate::epoch_file::EpochFile;
use crate::limits::PeerLimits;
use crate::lives::{Admission, Life, Lives};
use crate::log_loop::{LogInput, LogLoop};
use crate::log_turn::LogCore;
use crate::memory::{self, Memory};
use crate::peer::{self, PeerCounters};
use crate::peer_codec::{LogCodec, PsmrCodec, RmwCodec};
use crate::psmr_loop::{PsmrInput, PsmrLoop};
use crate::shard::{Shard, ShardBugs, ShardInput};
use crate::store::{self, OpenError, ShardStore};
use crate::tls::NodeTls;
use crate::{front, http};

/// Why a replica could not start.
#[derive(Debug, Error)]
pub enum StartError {
    /// The configuration is unusable.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The data directory or a store could not be opened.
    #[error(transparent)]
    Open(#[from] OpenError),
    /// The log engine's durable log could not be opened.
    #[error("cannot open the log in {path}: {source}")]
    Log {
        /// Its directory.
        path: std::path::PathBuf,
        /// Why.
        source: DurableLogError,
    },
    /// A listen address could not be bound.
    #[error("cannot listen on {addr} ({what}): {source}")]
    Bind {
        /// Which listener.
        what: &'static str,
        /// The address.
        addr: SocketAddr,
        /// Why.
        source: std::io::Error,
    },
}

/// How many inputs may wait for one shard before senders wait (back-pressure).
const SHARD_QUEUE: usize = 64 * 1024;

/// A started replica.
pub struct RunningNode {
    /// Its shared context.
    pub context: Arc<NodeContext>,
    shutdown: watch::Sender<bool>,
    shards: Vec<JoinHandle<bool>>,
    stopping: watch::Receiver<bool>,
    admission: Arc<Admission>,
}

/// The first second of 2026 (UTC), in Unix seconds.
const REJOIN_EPOCH_SECS: u64 = 1_767_225_600;

/// The lowest incarnation of a rejoin: the seconds since [`REJOIN_EPOCH_SECS`]. Ordinary
/// incarnations grow by one a start, so this is above every incarnation an earlier directory
/// of the node reached unless it restarted more than once a second on average; if it did, a
/// peer refuses the rejoin (see [`crate::lives`]) and it may be tried again later.
fn rejoin_incarnation_min() -> u32 {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    u32::try_from(now.saturating_sub(REJOIN_EPOCH_SECS))
        .unwrap_or(u32::MAX)
        .max(2)
}

/// A random number for this run's life (see [`crate::lives`]).
fn new_life() -> u64 {
    let mut bytes = [0; 8];
    getrandom::fill(&mut bytes).expect("the operating system's random generator");
    u64::from_le_bytes(bytes)
}

async fn bind(what: &'static str, addr: SocketAddr) -> Result<TcpListener, StartError> {
    TcpListener::bind(addr)
        .await
        .map_err(|source| StartError::Bind { what, addr, source })
}

fn seed(node: NodeId, shard: u16, incarnation: u32) -> u64 {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    now ^ (u64::from(node.0) << 48) ^ (u64::from(shard) << 32) ^ u64::from(incarnation)
}

/// Opens the replica's state and starts serving. Must run inside a tokio runtime.
pub async fn start(config: NodeConfig) -> Result<RunningNode, StartError> {
    start_with_bugs(config, Bugs::default()).await
}

/// Whether this build can inject deliberate bugs (the `fault-injection` feature, which the
/// cluster and chaos tests build with and a release build of `logless` leaves out).
pub const FAULT_INJECTION: bool = cfg!(feature = "fault-injection");

/// Deliberate bugs a node can be started with, named as `--inject-bug` names them. A node
/// started by [`start_with_bugs`] applies them only in a build with the `fault-injection`
/// feature, and [`Bugs::parse`] refuses every name without it, so a release build has no way
/// to switch one on. (The whole-node simulation hands them to its shards itself.)
#[derive(Clone, Copy, Debug, Default)]
pub struct Bugs {
    /// The protocol's.
    pub core: InjectedBugs,
    /// The shard runtime's.
    pub shard: ShardBugs,
    /// The log engine's protocol's.
    pub log: LogBugs,
    /// The psmr engine's (its merge's and its execution plan's).
    pub psmr: logless_psmr::config::InjectedBugs,
}

impl Bugs {
    /// The bugs named (`accept-inconsistent-quorum`, `ignore-learned`, `reply-before-persist`,
    /// `persist-without-ttl`, `remove-before-all-hold-tombstone`, `skip-removal-fence`; for the
    /// log engine `log-skip-noop-fill`, `log-no-dedup`,
    /// `log-accept-before-persist`, `log-execute-at-local-clock`,
    /// `log-accept-stale-proposals`, `log-ignore-epochs`, `log-rejoin-without-recovery`,
    /// `log-release-while-space-short`; for the psmr engine `psmr-merge-by-arrival`,
    /// `psmr-no-barrier`). Any name is refused by a build without fault injection.
    pub fn parse(names: &[String]) -> Result<Bugs, String> {
        let mut bugs = Bugs::default();
        for name in names {
            if !FAULT_INJECTION {
                return Err(format!(
                    "cannot inject {name:?}: this build has no fault injection (the \
                     `fault-injection` feature of logless, for test builds only)"
                ));
            }
            match name.as_str() {
                "accept-inconsistent-quorum" => bugs.core.accept_inconsistent_quorum = true,
                "ignore-learned" => bugs.core.ignore_learned = true,
                "remove-before-all-hold-tombstone" => {
                    bugs.core.remove_before_all_hold_tombstone = true;
                }
                "skip-removal-fence" => bugs.core.skip_removal_fence = true,
                "reply-before-persist" => bugs.shard.reply_before_persist = true,
                "persist-without-ttl" => bugs.shard.persist_without_ttl = true,
                "log-skip-noop-fill" => bugs.log.skip_noop_fill = true,
                "log-no-dedup" => bugs.log.no_dedup = true,
                "log-accept-before-persist" => bugs.log.accept_before_persist = true,
                "log-execute-at-local-clock" => bugs.log.execute_at_local_clock = true,
                "log-accept-stale-proposals" => bugs.log.accept_stale_proposals = true,
                "log-ignore-epochs" => bugs.log.ignore_epochs = true,
                "log-rejoin-without-recovery" => bugs.log.rejoin_without_recovery = true,
                "log-release-while-space-short" => bugs.log.release_while_space_short = true,
                "psmr-merge-by-arrival" => bugs.psmr.merge.by_arrival = true,
                "psmr-no-barrier" => bugs.psmr.plan.no_barrier = true,
                other => return Err(format!("unknown bug {other:?}")),
            }
        }
        Ok(bugs)
    }

    /// The names of the bugs switched on, for `/status` and INFO.
    pub fn names(&self) -> Vec<String> {
        [
            (
                "accept-inconsistent-quorum",
                self.core.accept_inconsistent_quorum,
            ),
            ("ignore-learned", self.core.ignore_learned),
            (
                "remove-before-all-hold-tombstone",
                self.core.remove_before_all_hold_tombstone,
            ),
            ("skip-removal-fence", self.core.skip_removal_fence),
            ("reply-before-persist", self.shard.reply_before_persist),
            ("persist-without-ttl", self.shard.persist_without_ttl),
            ("log-skip-noop-fill", self.log.skip_noop_fill),
            ("log-no-dedup", self.log.no_dedup),
            ("log-accept-before-persist", self.log.accept_before_persist),
            (
                "log-execute-at-local-clock",
                self.log.execute_at_local_clock,
            ),
            (
                "log-accept-stale-proposals",
                self.log.accept_stale_proposals,
            ),
            ("log-ignore-epochs", self.log.ignore_epochs),
            (
                "log-rejoin-without-recovery",
                self.log.rejoin_without_recovery,
            ),
            (
                "log-release-while-space-short",
                self.log.release_while_space_short,
            ),
            ("psmr-merge-by-arrival", self.psmr.merge.by_arrival),
            ("psmr-no-barrier", self.psmr.plan.no_barrier),
        ]
        .into_iter()
        .filter(|&(_, on)| on)
        .map(|(name, _)| name.to_string())
        .collect()
    }
}

/// [`start`] with the deliberate bugs `bugs` switched on (test builds only; see [`Bugs`]).
pub async fn start_with_bugs(config: NodeConfig, bugs: Bugs) -> Result<RunningNode, StartError> {
    config.validate()?;
    let auth = Arc::new(config.cluster_auth()?);
    let acl = config.acl()?;
    if !acl.requires_auth() && !config.client_addr.ip().is_loopback() {
        warn!(
            client_addr = %config.client_addr,
            "no requirepass: any client that can reach the client port may read and write \
             every key; see docs/security.md"
        );
    }
    let tls = NodeTls::from_config(&config)?;
    if auth.secret.is_empty() {
        warn!(
            cluster_id = %auth.cluster_id,
            "no cluster secret (cluster_secret_file): any process that can reach the peer port \
             can join as a listed node; see docs/security.md"
        );
    }
    let injected_bugs = if FAULT_INJECTION {
        bugs.names()
    } else {
        Vec::new()
    };
    if !injected_bugs.is_empty() {
        warn!(bugs = ?injected_bugs, "deliberate bugs injected: for tests only");
    }
    let durability = config.durability()?;
    let node = config.node();
    if config.rejoin && config.peers.len() < 2 {
        return Err(OpenError::Identity(
            "--rejoin recovers a replica's state from the other replicas, and a cluster of one \
             has none"
                .into(),
        )
        .into());
    }
    let claim = if config.rejoin {
        store::Claim::Rejoin {
            incarnation_min: rejoin_incarnation_min(),
        }
    } else {
        store::Claim::Start
    };
    let identity = store::next_incarnation(
        &config.data_dir,
        config.node_id,
        config.shards,
        (config.engine, config.recovery),
        claim,
    )?;
    let lives = Arc::new(Lives::open(&config.data_dir)?);
    if identity.rejoining {
        let what = match config.engine {
            Engine::Rmw => {
                "this replica answers for a register only once it recovered it from the others"
            }
            Engine::Multipaxos => {
                "this replica votes and executes only once it caught up with the others' log"
            }
            Engine::Psmr => {
                "this replica votes and serves only once every group caught up with the others"
            }
        };
        warn!(
            incarnation = identity.incarnation,
            "rejoining after a lost disk: {what} (docs/lost-disk.md)"
        );
    }
    let mut acceptors: Vec<NodeId> = config.peers.iter().map(|p| NodeId(p.id)).collect();
    acceptors.sort_unstable();
    let remote: Vec<_> = config.peers.iter().filter(|p| p.id != node.0).collect();
    // On a ring (N > R) each register's acceptors are its slot's replicas.
    let placement = crate::ring::placement(&config)?;
    if placement.is_some() {
        let ring = crate::ring::configuration(&config)?;
        info!(
            replication = config.replication(),
            nodes = config.peers.len(),
            slots = crate::ring::slots_held(&ring, logless_placement::NodeId(node.0)),
            "a ring: this node holds the keys of the slots it replicates"
        );
    }

    // Port 0 leaves the plain client port out (clients over TLS only), as in redis.
    let client_listener = match config.client_addr.port() {
        0 => None,
        _ => Some(bind("clients", config.client_addr).await?),
    };
    let tls_listener = match config.tls_port {
        0 => None,
        port => Some(
            bind(
                "tls clients",
                SocketAddr::new(config.client_addr.ip(), port),
            )
            .await?,
        ),
    };
    let peer_listener = bind("peers", config.peer_addr).await?;
    let http_listener = match config.http_addr {
        Some(addr) => Some(bind("http", addr).await?),
        None => None,
    };
    let bound = Bound {
        client: client_listener
            .as_ref()
            .map_or(config.client_addr, |l| l.local_addr().expect("bound")),
        peer: peer_listener.local_addr().expect("bound"),
        http: http_listener
            .as_ref()
            .map(|l| l.local_addr().expect("bound")),
        tls: tls_listener
            .as_ref()
            .map(|l| l.local_addr().expect("bound")),
    };

    let (shutdown, shutdown_rx) = watch::channel(false);
    let admission = Arc::new(Admission::new(
        &config.data_dir,
        &identity,
        shutdown.clone(),
    ));
    if remote.is_empty() {
        // A cluster of one: nobody else to welcome it.
        admission.welcomed().map_err(OpenError::Identity)?;
    }
    let peer_counters = Arc::new(PeerCounters::default());
    let transport = peer::Identity {
        node,
        peers: remote.iter().map(|p| NodeId(p.id)).collect(),
        // A ring's nodes run one more shard, the ring's registers (`crate::ring_register`).
        shards: config.shards + u16::from(placement.is_some()),
        auth,
        tls: tls.peers,
        life: Life {
            incarnation: identity.incarnation,
            life: new_life(),
        },
        lives,
        admission: admission.clone(),
    };
    let mut options = store::store_options(durability, config.value_bytes_max);
    // The rmw shards' stores keep no DRAM index, in every durability: each acceptor table
    // keeps where its store holds every register (`docs/storage-format.md`, "Without the
    // index"), and the store's batch lasts until the engine's flush, also where each put is
    // persisted at once (`memory`, `mmap`). Not with the deliberate bugs that write states
    // behind the batches, without their locations.
    options.located =
        !(FAULT_INJECTION && (bugs.shard.reply_before_persist || bugs.shard.persist_without_ttl));
    let memory = Arc::new(Memory::new(config.maxmemory));
    let mut shard_inputs = Vec::new();
    // The data shards' inputs and, on a ring, the ring shard's: where peer messages go.
    let mut peer_inputs = Vec::new();
    let mut shard_handles = Vec::new();
    let mut recovered_total = 0;
    let shard_count = match config.engine {
        Engine::Rmw => config.shards,
        Engine::Multipaxos | Engine::Psmr => 0,
    };
    // On a ring, shard number `shards` holds the ring's registers (`crate::ring_register`):
    // every node an acceptor (no placement), and no client command ever reaching it.
    let mut ring_state = None;
    let stage_read = Arc::new(tokio::sync::Notify::new());
    for shard in 0..shard_count + u16::from(placement.is_some()) {
        let of_ring = shard == shard_count;
        let mut store = ShardStore::open_store(&config.data_dir, shard, options.clone())?;
        let mut proposer = config.proposer_config(acceptors.clone());
        if !of_ring {
            recovered_total += store.registers();
            proposer.placement = placement.clone();
            if FAULT_INJECTION {
                proposer.bugs = bugs.core;
            }
        }
        // Decoded straight into the replica's table, without a vector of them all between.
        let mut states = store.states();
        let replica = Replica::new_located(
            node,
            identity.incarnation,
            proposer,
            seed(node, shard, identity.incarnation),
            states.located(),
        )
        .with_round_floor(store.round_floor());
        // A data shard of a ring answers no peer before the node read the ring's stage.
        let replica = crate::ring::starting_replica(replica);
        states.finish()?;
        store.started(replica.acceptor_registers())?;
        let replica = if identity.rejoining {
            replica.rejoining()
        } else {
            replica
        };
        let (tx, rx) = mpsc::channel(SHARD_QUEUE);
        let mut links = FxHashMap::default();
        for p in &remote {
            let (link_tx, link_rx) = mpsc::unbounded_channel();
            links.insert(NodeId(p.id), link_tx);
            tokio::spawn(peer::dial::<RmwCodec>(
                transport.clone(),
                shard,
                NodeId(p.id),
                p.addr.clone(),
                link_rx,
                tx.clone(),
                peer_counters.clone(),
                shutdown_rx.clone(),
            ));
        }
        peer_inputs.push(tx.clone());
        let mut handle = Shard::new(replica, store, rx, links);
        if of_ring {
            ring_state = Some(Arc::new(crate::ring_watch::RingState::new(
                crate::ring_register::RingRegister::new(tx),
                acceptors.clone(),
                crate::ring::configuration(&config)?,
                stage_read.clone(),
            )));
        } else {
            shard_inputs.push(tx);
            handle.watch_memory(memory.clone());
            if placement.is_some() {
                handle.on_newer_stage(stage_read.clone());
            }
            if FAULT_INJECTION {
                handle.inject_bugs(bugs.shard);
            }
        }
        shard_handles.push((handle, shard));
    }
    let log = match config.engine {
        Engine::Rmw | Engine::Psmr => {
            info!(
                node = node.0,
                incarnation = identity.incarnation,
                shards = config.shards,
                registers = recovered_total,
                "recovered"
            );
            None
        }
        Engine::Multipaxos => Some(start_log(
            &config,
            bugs.log,
            &identity,
            durability,
            &transport,
            &peer_counters,
            &shutdown_rx,
        )?),
    };
    let log_input = log.as_ref().map(|(tx, _)| tx.clone());
    let psmr = match config.engine {
        Engine::Psmr => Some(start_psmr(
            &config,
            &identity,
            durability,
            &transport,
            &peer_counters,
            &shutdown_rx,
            bugs.psmr,
        )?),
        Engine::Rmw | Engine::Multipaxos => None,
    };
    let psmr_input = psmr.as_ref().map(|(tx, _)| tx.clone());

    let cluster = crate::cluster::cluster_map(&config)?.map(crate::cluster::ClusterState::new);
    let forwarder = crate::forward::Forwarder::of(&config)?.map(Arc::new);
    let context = Arc::new(NodeContext {
        settings: Settings::new(&config),
        cluster,
        forwarder,
        ring: ring_state,
        memory: memory.clone(),
        acl: Arc::new(acl),
        config,
        node,
        incarnation: identity.incarnation,
        shards: shard_inputs.clone(),
        log: log_input.clone(),
        psmr: psmr_input.clone(),
        started: Instant::now(),
        clients: ClientCounters::default(),
        connections: Arc::default(),
        peers: peer_counters.clone(),
        bound,
        failed: AtomicU64::new(0),
        injected_bugs,
    });

    let mut shards = Vec::new();
    for (shard, index) in shard_handles {
        let what = format!("shard {index}");
        shards.push(spawn_loop(shard.run(), what, &context, &shutdown));
    }
    tokio::spawn(memory::sample_until(memory, shutdown_rx.clone()));
    if let Some((_, log_loop)) = log {
        shards.push(spawn_loop(
            log_loop.run(),
            "log".into(),
            &context,
            &shutdown,
        ));
    }
    if let Some((_, psmr_loop)) = psmr {
        shards.push(spawn_loop(
            psmr_loop.run(),
            "psmr".into(),
            &context,
            &shutdown,
        ));
    }
    let peer_limits = PeerLimits::of(&context.config);
    match (log_input, psmr_input) {
        (_, Some(psmr_input)) => tokio::spawn(peer::accept::<PsmrCodec>(
            peer_listener,
            transport,
            vec![psmr_input],
            peer_counters,
            peer_limits,
            shutdown_rx.clone(),
        )),
        (None, None) => tokio::spawn(peer::accept::<RmwCodec>(
            peer_listener,
            transport,
            peer_inputs,
            peer_counters,
            peer_limits,
            shutdown_rx.clone(),
        )),
        (Some(log_input), None) => tokio::spawn(peer::accept::<LogCodec>(
            peer_listener,
            transport,
            vec![log_input],
            peer_counters,
            peer_limits,
            shutdown_rx.clone(),
        )),
    };
    if context.ring.is_some() {
        tokio::spawn(crate::ring_watch::run(context.clone(), shutdown_rx.clone()));
    }
    // A ring's node serves clients once it has read the ring's stage (`crate::ring_watch`).
    if let Some(listener) = client_listener {
        tokio::spawn(when_ring_ready(
            context.clone(),
            front::accept(listener, context.clone(), shutdown_rx.clone(), None),
        ));
    }
    if let Some(listener) = tls_listener {
        tokio::spawn(when_ring_ready(
            context.clone(),
            front::accept(listener, context.clone(), shutdown_rx.clone(), tls.clients),
        ));
    }
    if let Some(listener) = http_listener {
        tokio::spawn(http::serve(
            listener,
            context.clone(),
            shutdown_rx.clone(),
            tls.http,
        ));
    }
    info!(node = node.0, clients = %bound.client, tls_clients = ?bound.tls, peers = %bound.peer, "serving");
    Ok(RunningNode {
        context,
        shutdown,
        shards,
        stopping: shutdown_rx,
        admission,
    })
}

/// Runs `serve` once the node knows the ring's stage (at once when it is not on a ring).
async fn when_ring_ready(context: Arc<NodeContext>, serve: impl std::future::Future<Output = ()>) {
    if let Some(ring) = &context.ring {
        ring.ready().await;
    }
    serve.await;
}

/// Spawns an event loop (a shard's or the log's, named by `what`); if its store fails, the
/// node is marked failed and starts stopping (fail-stop). The task ends true on a clean stop.
fn spawn_loop(
    run: impl std::future::Future<Output = Result<(), logless_storage::StoreError>> + Send + 'static,
    what: String,
    context: &Arc<NodeContext>,
    shutdown: &watch::Sender<bool>,
) -> JoinHandle<bool> {
    let fail = shutdown.clone();
    let context = context.clone();
    tokio::spawn(async move {
        match run.await {
            Ok(()) => true,
            Err(e) => {
                error!(loop_ = %what, error = %e, "store failed: this replica stops voting");
                context
                    .failed
                    .store(1, std::sync::atomic::Ordering::Relaxed);
                let _ = fail.send(true);
                false
            }
        }
    })
}

/// The file in the log's directory (the log engine's, psmr's) that says a rejoin after a lost
/// disk completed: the log holds a state recovered from the others, and later starts replay it
/// as usual.
const REJOINED_MARKER: &str = "rejoined";

/// The marker a rejoin of this start creates once it completed (in `dir`, the engine's
/// directory), if this start rejoins: a rejoining directory rejoins at every start until one
/// rejoin completed.
fn pending_rejoin(dir: &std::path::Path, identity: &store::Identity) -> Option<std::path::PathBuf> {
    let marker = dir.join(REJOINED_MARKER);
    (identity.rejoining && !marker.exists()).then_some(marker)
}

/// Opens the log engine's durable log in the data directory's `log` (under EpochSS: its epoch
/// file, the log in memory) and builds its loop, with a link to every peer (the transport's
/// shard 0 of 1).
#[allow(clippy::too_many_arguments)]
fn start_log(
    config: &NodeConfig,
    bugs: LogBugs,
    identity: &store::Identity,
    durability: logless_storage::Durability,
    transport: &peer::Identity,
    counters: &Arc<PeerCounters>,
    shutdown: &watch::Receiver<bool>,
) -> Result<(mpsc::Sender<LogInput>, LogLoop), StartError> {
    use logless_multipaxos::ids::NodeId as LogNodeId;
    let path = config.data_dir.join("log");
    let mut nodes: Vec<LogNodeId> = config.peers.iter().map(|p| LogNodeId(p.id)).collect();
    nodes.sort_unstable();
    let me = LogNodeId(config.node_id);
    let mut engine = logless_multipaxos::config::Config::new(nodes, me);
    config.multipaxos.apply(&mut engine);
    engine.recovery = config.recovery.engine();
    if FAULT_INJECTION {
        engine.bugs = bugs;
    }
    let machine = logless_multipaxos::kv::RegisterMachine::new(config.command_limits());
    let started = Instant::now();
    let incarnation = identity.incarnation;
    let log_error = |path: &std::path::Path| {
        let path = path.to_path_buf();
        move |source| StartError::Log { path, source }
    };
    // FullSS and mPaxos write periodic snapshots to files: off the loop (mPaxosSM writes
    // checkpoints without state, EpochSS keeps its snapshots in memory).
    engine.background_snapshots = config.multipaxos.snapshot_background == 1
        && matches!(config.recovery, Recovery::Fullss | Recovery::Pmem);
    // Under EpochSS every restart recovers from the peers; a rejoin there is in its epoch.
    let rejoined = (config.recovery != Recovery::Epoch)
        .then(|| pending_rejoin(&path, identity))
        .flatten();
    let rejoin = rejoined.is_some();
    // Under mPaxosSM the registers in place are opened off the loop, which votes meanwhile:
    // where, how, and the log's snapshot they are checked against.
    let mut open_registers_later = None;
    let mut core = match config.recovery {
        Recovery::Fullss | Recovery::Pmem | Recovery::PmemSm => {
            let options = log_options(config, durability);
            let opened = DurableLog::open(&path, options).map_err(log_error(&path))?;
            let log_ms = started.elapsed().as_millis() as u64;
            let mut registers = None;
            let machine = if config.recovery == Recovery::PmemSm {
                // The registers are the durable state: snapshots only for lagging peers.
                engine.snapshots = logless_multipaxos::config::Snapshots::OnDemand;
                let file = config.data_dir.join(crate::log_machine::REGISTERS_FILE);
                let options = crate::log_machine::store_options(durability, config.value_bytes_max);
                if rejoin {
                    // A rejoin catches up on the machine it starts with: opened first.
                    let (machine, report) = crate::log_machine::LogMachine::open_file(
                        &file,
                        options,
                        machine,
                        opened.durable.snapshot.as_ref(),
                    )
                    .map_err(|e| log_error(&file)(e.into()))?;
                    registers = Some((report.records, started.elapsed().as_millis() as u64));
                    machine
                } else {
                    open_registers_later =
                        Some((file, options, machine, opened.durable.snapshot.clone()));
                    crate::log_machine::LogMachine::awaiting_registers()
                }
            } else {
                machine.into()
            };
            let core = LogCore::recover(
                engine,
                machine,
                &opened.durable,
                opened.log,
                incarnation,
                config.request_timeout_ms,
                crate::shard::wall_ms(),
                0,
            );
            let status = core.status();
            let what = match config.recovery {
                Recovery::Pmem => {
                    "resumed the log from persistent memory (mPaxos): voting at once, rebuilding \
                     the state machine from the persistent snapshot meanwhile"
                }
                Recovery::PmemSm if open_registers_later.is_some() => {
                    "resumed the log from persistent memory (mPaxosSM): voting at once, opening \
                     the state machine in place meanwhile"
                }
                Recovery::PmemSm => {
                    "resumed the log and opened the state machine in place in persistent memory \
                     (mPaxosSM): voting and serving"
                }
                _ => "recovered the log",
            };
            let t = opened.timings;
            info!(
                target: crate::log_turn::RESTART_TARGET,
                node = config.node_id,
                incarnation,
                view = status.view,
                first_instance = status.first_instance,
                executed_below = status.executed_below,
                keys = status.keys,
                storage_ms = ms_of(t.storage_us),
                snapshot_bytes = t.snapshot_bytes,
                snapshot_ms = ms_of(t.snapshot_us),
                records = t.records,
                records_ms = ms_of(t.records_us),
                log_ms,
                registers = registers.map(|(records, _)| records),
                registers_ms = registers.map(|(_, ms)| ms),
                ms = started.elapsed().as_millis() as u64,
                "{what}"
            );
            core
        }
        Recovery::Epoch => {
            let (epoch_file, last) = EpochFile::open(&config.data_dir)
                .map_err(|e| log_error(&config.data_dir)(e.into()))?;
            if last.is_none() && incarnation > 1 && !config.rejoin {
                // A welcomed replica wrote its epoch before it sent anything: starting over in
                // epoch 1 would let its peers take it for a replica that kept its state.
                return Err(OpenError::Identity(format!(
                    "{} has run before (incarnation {incarnation}) but has no epoch file: it \
                     was removed or lost. Started in epoch 1 again, it could not tell its peers \
                     that it lost its state: start it with --rejoin, which takes an epoch above \
                     every one it used (docs/lost-disk.md)",
                    config.data_dir.display()
                ))
                .into());
            }
            // A rejoin (this start's incarnation is from the clock) starts in an epoch above
            // every one the lost directory used, and recovers from its peers as after any
            // restart: the epoch fences what it said before.
            let last = if config.rejoin {
                Some(crate::epoch_file::last_before_rejoin(last, incarnation))
            } else {
                last
            };
            // The engine writes no record under EpochSS: the log lives in memory only.
            let options = log_options(config, logless_storage::Durability::Memory);
            let opened = DurableLog::open(&path, options).map_err(log_error(&path))?;
            let core = LogCore::start_epoch(
                engine,
                machine,
                last,
                opened.log.with_epoch_file(epoch_file),
                incarnation,
                config.request_timeout_ms,
                crate::shard::wall_ms(),
                0,
            );
            match last {
                None => info!(
                    node = config.node_id,
                    epoch = core.epoch().0,
                    "first start under EpochSS: serving from an empty state"
                ),
                Some(_) => warn!(
                    node = config.node_id,
                    epoch = core.epoch().0,
                    "restarted under EpochSS: recovering the state from the peers before \
                     voting or serving (docs/recovery.md)"
                ),
            }
            core
        }
    };
    if rejoin {
        core.start_rejoin(incarnation);
        warn!(
            incarnation,
            "rejoining after a lost disk: the log votes and serves nothing until every other \
             replica answered and it caught up (docs/lost-disk.md)"
        );
    }
    let (tx, rx) = mpsc::channel(SHARD_QUEUE);
    // A rejoin under mPaxos ended the rebuild itself (`Replica::start_rejoin`).
    if let Some((file, options, machine, snapshot)) = open_registers_later {
        open_registers_off_the_loop(file, options, machine, snapshot, started, tx.clone());
    } else if core.replica().status() == logless_multipaxos::replica::Status::Rebuilding {
        rebuild_off_the_loop(
            core.rebuild_from(),
            config.command_limits(),
            started,
            tx.clone(),
        );
    }
    let links = dial_peers::<LogCodec>(config, transport, &tx, counters, shutdown);
    let mut log_loop = LogLoop::new(core, rx, links, started);
    if let Some(marker) = rejoined {
        log_loop.mark_rejoined_at(marker);
    }
    Ok((tx.clone(), log_loop))
}

/// Microseconds as milliseconds, for the start lines.
fn ms_of(micros: u64) -> f64 {
    micros as f64 / 1_000.0
}

/// Restores the state machine of a replica resumed under mPaxos from `snapshot` (an empty
/// machine without one) on a blocking thread, while the loop already takes part in the
/// protocol, and hands it to the loop (seed 002 §V-B: the Paxos thread goes on while the state
/// is rebuilt).
fn rebuild_off_the_loop(
    snapshot: Option<bytes::Bytes>,
    limits: logless_commands::command::Limits,
    started: Instant,
    inputs: mpsc::Sender<LogInput>,
) {
    use logless_multipaxos::state_machine::StateMachine;
    tokio::task::spawn_blocking(move || {
        let restoring = Instant::now();
        let mut machine = logless_multipaxos::kv::RegisterMachine::new(limits);
        if let Some(state) = &snapshot {
            machine.restore(state);
        }
        info!(
            target: crate::log_turn::RESTART_TARGET,
            state_bytes = snapshot.as_ref().map_or(0, |s| s.len()),
            keys = machine.map().len(),
            restore_ms = ms_of(restoring.elapsed().as_micros() as u64),
            since_start_ms = started.elapsed().as_millis() as u64,
            "restored the persistent snapshot into a new state machine (mPaxos)"
        );
        // A loop that stopped meanwhile needs no machine.
        let _ = inputs.blocking_send(LogInput::Rebuilt(Ok(Box::new(machine.into()))));
    });
}

/// Opens the registers in place of a replica restarted under mPaxosSM from `file`
/// ([`crate::log_machine::LogMachine::open_file`], checked against the log's `snapshot`) on
/// a blocking thread, while the loop already votes with a stand-in, and hands the machine to
/// the loop, which executes from there and serves (docs/recovery.md, "mPaxosSM on the
/// node"). A failure to open stops the loop, and the node, with it.
fn open_registers_off_the_loop(
    file: std::path::PathBuf,
    options: logless_storage::StoreOptions,
    memory: logless_multipaxos::kv::RegisterMachine,
    snapshot: Option<logless_multipaxos::message::Snapshot>,
    started: Instant,
    inputs: mpsc::Sender<LogInput>,
) {
    tokio::task::spawn_blocking(move || {
        let opened =
            crate::log_machine::LogMachine::open_file(&file, options, memory, snapshot.as_ref());
        let opened = match opened {
            Ok((machine, report)) => {
                info!(
                    target: crate::log_turn::RESTART_TARGET,
                    registers = report.records,
                    registers_ms = started.elapsed().as_millis() as u64,
                    "opened the state machine in place in persistent memory (mPaxosSM)"
                );
                Ok(Box::new(machine))
            }
            Err(e) => {
                error!(file = %file.display(), error = %e, "the registers in place do not open");
                Err(e.into_store_error())
            }
        };
        // A loop that stopped meanwhile needs no machine.
        let _ = inputs.blocking_send(LogInput::Rebuilt(opened));
    });
}

/// The links of an engine with one event loop (the log's, psmr's) to every peer: the
/// transport's shard 0 of 1, delivering to `inputs`; gives each link's writer.
fn dial_peers<C: crate::peer_codec::PeerCodec>(
    config: &NodeConfig,
    transport: &peer::Identity,
    inputs: &mpsc::Sender<C::Input>,
    counters: &Arc<PeerCounters>,
    shutdown: &watch::Receiver<bool>,
) -> FxHashMap<logless_multipaxos::ids::NodeId, mpsc::UnboundedSender<Vec<C::Message>>> {
    let mut links = FxHashMap::default();
    for p in config.peers.iter().filter(|p| p.id != config.node_id) {
        let (link_tx, link_rx) = mpsc::unbounded_channel();
        links.insert(logless_multipaxos::ids::NodeId(p.id), link_tx);
        tokio::spawn(peer::dial::<C>(
            transport.clone(),
            0,
            NodeId(p.id),
            p.addr.clone(),
            link_rx,
            inputs.clone(),
            counters.clone(),
            shutdown.clone(),
        ));
    }
    links
}

/// The options of a Multi-Paxos log (the log engine's, each psmr group's).
fn log_options(
    config: &NodeConfig,
    durability: logless_storage::Durability,
) -> logless_storage::SegmentLogOptions {
    let mut options = logless_storage::SegmentLogOptions::new(durability);
    // A batch closes past its byte bound with one request more, which may be a whole value.
    let batch_bytes_max = usize::try_from(config.multipaxos.batch_bytes_max).unwrap_or(usize::MAX);
    options.record_bytes_max = options
        .record_bytes_max
        .max(batch_bytes_max + 2 * config.value_bytes_max + (1 << 20));
    let segment_bytes = usize::try_from(config.multipaxos.segment_bytes).unwrap_or(usize::MAX);
    options.segment_bytes = segment_bytes.max(2 * options.record_bytes_max);
    options
}

/// Opens the psmr engine's group logs in the data directory's `psmr/<group>` (`g0`, `g1`, …,
/// `g_all`; the directory is claimed for the mode and threads first, see
/// [`crate::psmr_turn::claim_layout`]), recovers the replica from them, starts its worker threads and builds its loop,
/// with a link to every peer (the transport's shard 0 of 1), with the deliberate bugs `bugs`.
/// A rejoining directory without the `rejoined` marker in `psmr` rejoins every group first
/// ([`logless_psmr::replica::Replica::start_rejoin`], in the incarnation of `identity`).
fn start_psmr(
    config: &NodeConfig,
    identity: &store::Identity,
    durability: logless_storage::Durability,
    transport: &peer::Identity,
    counters: &Arc<PeerCounters>,
    shutdown: &watch::Receiver<bool>,
    bugs: logless_psmr::config::InjectedBugs,
) -> Result<(mpsc::Sender<PsmrInput>, PsmrLoop), StartError> {
    use logless_multipaxos::ids::NodeId as LogNodeId;
    use std::collections::BTreeMap;
    let incarnation = identity.incarnation;
    let mode = config.psmr_mode()?;
    let threads = config.psmr_threads();
    let service = config.psmr_service()?;
    let mut nodes: Vec<LogNodeId> = config.peers.iter().map(|p| LogNodeId(p.id)).collect();
    nodes.sort_unstable();
    let me = LogNodeId(config.node_id);
    let mut engine = logless_psmr::config::Config::new(nodes, me, threads);
    engine.mode = mode;
    engine.bugs = bugs;
    // Each group is a log of the log engine: the `[multipaxos]` tuning applies to every group,
    // whose own snapshots follow its policy; a cut every 16 group snapshots' worth of commands
    // (docs/psmr-snapshots.md).
    config.multipaxos.apply(&mut engine.paxos);
    let group_snapshot_bytes = config.multipaxos.snapshot_log_bytes_min;
    engine.group_snapshot_log_bytes_min = group_snapshot_bytes;
    engine.cut_every_bytes = group_snapshot_bytes.saturating_mul(16);
    let dir = config.data_dir.join("psmr");
    if mode != logless_psmr::config::Mode::NoRep {
        crate::psmr_turn::claim_layout(&dir, mode, threads, service)
            .map_err(|e| StartError::Config(ConfigError::Invalid(e)))?;
    }
    let mut logs = BTreeMap::new();
    let mut durable = BTreeMap::new();
    for group in mode.groups(threads) {
        let path = dir.join(format!("{group:?}"));
        let opened = DurableLog::open(&path, log_options(config, durability))
            .map_err(|source| StartError::Log { path, source })?;
        durable.insert(group, opened.durable);
        logs.insert(group, opened.log);
    }
    let started = Instant::now();
    let now_ms = crate::shard::wall_ms();
    let cuts = (mode != logless_psmr::config::Mode::NoRep)
        .then(|| {
            let path = dir.join(crate::psmr_snapshot::CUT_DIR);
            crate::psmr_snapshot::CutFile::open(&path, log_options(config, durability))
        })
        .transpose()
        .map_err(|e| StartError::Config(ConfigError::Invalid(e)))?;
    let restored = cuts.as_ref().and_then(|(_, stored)| stored.as_ref());
    let mut executing_service = service.start();
    if let Some(stored) = restored {
        crate::psmr_snapshot::restore_service(&mut executing_service, &stored.state)
            .map_err(|e| StartError::Config(ConfigError::Invalid(e)))?;
    }
    let cut = restored.map(|stored| &stored.cut);
    let mut replica = logless_psmr::replica::Replica::recover_from(
        engine,
        service.start(),
        cut,
        &durable,
        now_ms,
    );
    // Without replication there is nothing to rejoin from (and no peers: refused above).
    let rejoined = (mode != logless_psmr::config::Mode::NoRep)
        .then(|| pending_rejoin(&dir, identity))
        .flatten();
    if rejoined.is_some() {
        let attempt = logless_multipaxos::ids::Epoch(u64::from(incarnation));
        replica.start_rejoin(now_ms, attempt);
        warn!(
            incarnation,
            "rejoining after a lost disk: every psmr group votes for nothing, and the replica \
             executes and serves nothing, until every other replica answered in every group and \
             each group caught up (docs/lost-disk.md)"
        );
    }
    let mut shared = crate::psmr_workers::Shared::new(replica, executing_service);
    if cuts.is_some() {
        shared = shared.with_snapshots(
            crate::psmr_snapshot::service_state,
            crate::psmr_snapshot::restore_service,
        );
    }
    let shared = Arc::new(shared);
    let (executed_tx, executed_rx) = mpsc::unbounded_channel();
    let report = move |executed| {
        // A stopped loop: nobody waits for the reply.
        let _ = executed_tx.send(executed);
    };
    let executing = mode.executing_workers(threads);
    let workers =
        crate::psmr_workers::spawn(&shared, executing, config.node_id, report).map_err(|e| {
            StartError::Config(ConfigError::Invalid(format!(
                "cannot start the psmr worker threads: {e}"
            )))
        })?;
    let core = crate::psmr_turn::PsmrCore::new(
        me,
        shared.clone(),
        crate::psmr_turn::GroupLogs::new(logs),
        incarnation,
        config.request_timeout_ms,
        mode,
        threads,
        now_ms,
        0,
    );
    let core = match cuts {
        Some((file, stored)) => core.with_cut_file(file, stored),
        None => core,
    };
    info!(
        node = config.node_id,
        incarnation,
        mode = %mode,
        threads,
        "recovered the psmr groups"
    );
    let (tx, rx) = mpsc::channel(SHARD_QUEUE);
    let links = dial_peers::<PsmrCodec>(config, transport, &tx, counters, shutdown);
    let wiring = crate::psmr_loop::PsmrWiring {
        inputs: rx,
        executed: executed_rx,
        workers,
        stop_workers: Box::new(move || shared.stop()),
        peers: links,
        started,
    };
    let mut psmr_loop = PsmrLoop::new(core, wiring);
    if let Some(marker) = rejoined {
        psmr_loop.mark_rejoined_at(marker);
    }
    Ok((tx, psmr_loop))
}

impl RunningNode {
    /// Why a peer refused this node as one whose data directory was lost, if one did (the node
    /// then stops on its own).
    pub fn refusal(&self) -> Option<String> {
        self.admission.refusal()
    }

    /// Resolves when the node begins to stop on its own (a store failure, or a peer's refusal).
    pub async fn stopping(&mut self) {
        let _ = self.stopping.wait_for(|s| *s).await;
    }

    /// Stops accepting, lets every shard commit and flush, and waits for them. Returns false
    /// if a shard had failed.
    pub async fn shutdown(self) -> bool {
        let _ = self.shutdown.send(true);
        for shard in &self.context.shards {
            let _ = shard.send(ShardInput::Stop).await;
        }
        if let Some(ring) = &self.context.ring {
            ring.register.stop().await;
        }
        if let Some(log) = &self.context.log {
            let _ = log.send(LogInput::Stop).await;
        }
        if let Some(psmr) = &self.context.psmr {
            let _ = psmr.send(PsmrInput::Stop).await;
        }
        let mut clean = true;
        for handle in self.shards {
            clean &= handle.await.unwrap_or(false);
        }
        clean
            && self
                .context
                .failed
                .load(std::sync::atomic::Ordering::Relaxed)
                == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bugs_parse_only_in_a_build_with_fault_injection() {
        assert!(Bugs::parse(&[]).unwrap().names().is_empty());
        let named = Bugs::parse(&["ignore-learned".to_string()]);
        if FAULT_INJECTION {
            let bugs = named.unwrap();
            assert!(bugs.core.ignore_learned);
            assert_eq!(bugs.names(), ["ignore-learned"]);
            assert!(Bugs::parse(&["no-such-bug".to_string()]).is_err());
            let log = Bugs::parse(&["log-no-dedup".to_string()]).unwrap();
            assert!(log.log.no_dedup);
            assert_eq!(log.names(), ["log-no-dedup"]);
            let names = [
                "log-ignore-epochs",
                "log-rejoin-without-recovery",
                "log-release-while-space-short",
            ];
            let log = Bugs::parse(&names.map(String::from)).unwrap();
            assert!(log.log.ignore_epochs && log.log.rejoin_without_recovery);
            assert!(log.log.release_while_space_short);
            assert_eq!(log.names(), names);
        } else {
            let refused = named.unwrap_err();
            assert!(refused.contains("no fault injection"), "{refused}");
        }
    }
}
