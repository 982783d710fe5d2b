//! A replica's figures: gathered from its shards on demand and rendered as Prometheus text
//! (`/metrics`), JSON (`/status`, read by `logless status`) and Redis INFO sections.
use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::atomic::Ordering;

use logless_placement::NodeId;
use serde::{Deserialize, Serialize};
use tokio::sync::oneshot;

use crate::context::NodeContext;
use crate::log_loop::LogInput;
use crate::log_turn::LogStatus;
use crate::psmr_loop::PsmrInput;
use crate::psmr_turn::PsmrStatus;
use crate::shard::{ShardInput, ShardStatus};

/// Every shard's figures summed.
pub type Totals = ShardStatus;

/// Asks every shard (or the log) for its figures and sums them.
pub async fn gather(context: &NodeContext) -> Totals {
    let mut totals = Totals::default();
    if let Some(log) = &context.log {
        let (tx, rx) = oneshot::channel();
        if log.send(LogInput::Status(tx)).await.is_ok() {
            if let Ok(figures) = rx.await {
                totals += figures;
            }
        }
    }
    totals.psmr = psmr_status(context).await;
    for shard in &context.shards {
        let (tx, rx) = oneshot::channel();
        if shard.send(ShardInput::Status(tx)).await.is_err() {
            continue;
        }
        if let Ok(status) = rx.await {
            totals += status;
        }
    }
    totals
}

/// The psmr engine's figures, if it runs and has not stopped.
pub async fn psmr_status(context: &NodeContext) -> Option<PsmrStatus> {
    let psmr = context.psmr.as_ref()?;
    let (tx, rx) = oneshot::channel();
    psmr.send(PsmrInput::Status(tx)).await.ok()?;
    rx.await.ok()
}

/// The psmr engine's figures as INFO lines (`psmr_<name>:<value>`), each group's as
/// `psmr_group_<group>:view=…,leader=…,is_leader=…,executed_below=…,batches_proposed=…`.
pub fn psmr_info(status: &PsmrStatus) -> String {
    let mut out = String::new();
    let s = status;
    let space_short = u8::from(s.space_short);
    let rejoining = u8::from(s.rejoining);
    let figures: [(&str, &dyn std::fmt::Display); 23] = [
        ("mode", &s.mode),
        ("service", &s.service),
        ("threads", &s.threads),
        ("executing_threads", &s.executing_threads),
        ("digest", &s.digest),
        ("executed", &s.executed),
        ("executed_synchronous", &s.executed_synchronous),
        ("backlog", &s.backlog),
        ("skips_proposed", &s.skips_proposed),
        ("answered", &s.answered),
        ("answered_from_cache", &s.answered_from_cache),
        ("retried", &s.retried),
        ("timed_out", &s.timed_out),
        ("overloaded", &s.overloaded),
        ("space_short", &space_short),
        ("refused_for_space", &s.refused_for_space),
        ("space_shortages", &s.space_shortages),
        ("in_flight", &s.in_flight),
        ("flushes", &s.flushes),
        ("cuts_written", &s.cuts_written),
        ("cuts_installed", &s.cuts_installed),
        ("last_cut", &s.last_cut),
        ("rejoining", &rejoining),
    ];
    for (name, value) in figures {
        let _ = write!(out, "psmr_{name}:{value}\r\n");
    }
    for g in &s.groups {
        let _ = write!(
            out,
            "psmr_group_{}:view={},leader={},is_leader={},executed_below={},batches_proposed={},\
             log_start={},retained_batches={},retained_bytes={}\r\n",
            g.group,
            g.view,
            g.leader,
            u8::from(g.is_leader),
            g.executed_below,
            g.batches_proposed,
            g.log_start,
            g.retained_batches,
            g.retained_bytes
        );
    }
    out
}

/// The psmr engine's figures in the Prometheus text format (`logless_psmr_*`), each group's
/// labelled with its group.
fn psmr_prometheus(out: &mut String, s: &PsmrStatus) {
    let figures = [
        (
            "executed_total",
            "counter",
            "Commands executed.",
            s.executed,
        ),
        (
            "executed_synchronous_total",
            "counter",
            "Commands executed in synchronous mode (g_all).",
            s.executed_synchronous,
        ),
        (
            "backlog",
            "gauge",
            "Commands delivered to a worker and not executed.",
            s.backlog,
        ),
        (
            "answered_total",
            "counter",
            "Commands answered with the service's reply.",
            s.answered,
        ),
        (
            "retried_total",
            "counter",
            "Commands handed to the replica again.",
            s.retried,
        ),
        (
            "timed_out_total",
            "counter",
            "Commands answered outcome unknown.",
            s.timed_out,
        ),
        (
            "overloaded_total",
            "counter",
            "Commands refused as overloaded.",
            s.overloaded,
        ),
        (
            "refused_for_space_total",
            "counter",
            "Commands refused because the disk had no space for the groups' logs.",
            s.refused_for_space,
        ),
        (
            "space_shortages_total",
            "counter",
            "Times the disk ran out of space for the groups' logs.",
            s.space_shortages,
        ),
        (
            "space_short",
            "gauge",
            "Whether the replica is paused for want of space for its logs.",
            u64::from(s.space_short),
        ),
        ("in_flight", "gauge", "Commands in flight.", s.in_flight),
        (
            "rejoining",
            "gauge",
            "1 while this replica rejoins after a lost disk and some group has not recovered.",
            u64::from(s.rejoining),
        ),
        (
            "threads",
            "gauge",
            "Worker threads configured.",
            u64::from(s.threads),
        ),
    ];
    for (name, kind, help, value) in figures {
        let _ = writeln!(
            out,
            "# HELP logless_psmr_{name} {help}\n# TYPE logless_psmr_{name} {kind}\nlogless_psmr_{name} {value}"
        );
    }
    for (name, help) in [
        ("group_leader", "The leader of each group's view."),
        ("group_is_leader", "Whether this replica leads the group."),
        (
            "group_executed_below",
            "The group's next instance to deliver.",
        ),
    ] {
        let _ = writeln!(
            out,
            "# HELP logless_psmr_{name} {help}\n# TYPE logless_psmr_{name} gauge"
        );
        for g in &s.groups {
            let value = match name {
                "group_leader" => u64::from(g.leader),
                "group_is_leader" => u64::from(g.is_leader),
                _ => g.executed_below,
            };
            let _ = writeln!(out, "logless_psmr_{name}{{group=\"{}\"}} {value}", g.group);
        }
    }
}

/// Upper bounds of the latency histogram buckets, in seconds.
const BUCKETS_S: [f64; 14] = [
    0.000_1, 0.000_25, 0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0,
];

/// Renders the Prometheus text exposition format.
pub fn prometheus(context: &NodeContext, t: &Totals) -> String {
    let mut out = String::with_capacity(8 * 1024);
    let mut counter = |name: &str, help: &str, value: u64| {
        let _ = writeln!(
            out,
            "# HELP {name} {help}\n# TYPE {name} counter\n{name} {value}"
        );
    };
    let p = &t.proposer;
    counter(
        "logless_reads_total",
        "Read operations (batches) completed.",
        p.reads,
    );
    counter(
        "logless_writes_total",
        "Write operations (batches) completed.",
        p.writes,
    );
    counter(
        "logless_fast_writes_total",
        "Writes completed in one round trip.",
        p.fast_writes,
    );
    counter(
        "logless_denied_total",
        "Writes answered without phase 2.",
        p.denied,
    );
    counter(
        "logless_reads_widened_total",
        "Reads that asked a quorum first and then the remaining replicas.",
        p.reads_widened,
    );
    counter(
        "logless_writes_widened_total",
        "Fast writes that voted with a quorum first and then with the remaining replicas.",
        p.writes_widened,
    );
    counter(
        "logless_registers_dropped_total",
        "Idle registers the proposers dropped to keep within their bound.",
        p.registers_dropped,
    );
    counter(
        "logless_registers_removed_total",
        "Dead registers this replica forgot (docs/removal.md).",
        t.registers_removed,
    );
    counter(
        "logless_sweep_removals_started_total",
        "Removals the background sweep started (each reads every replica).",
        t.sweep.removals_started,
    );
    counter(
        "logless_retries_total",
        "Phase retries (PAXOS_PREP or read retries).",
        p.retries,
    );
    counter(
        "logless_write_throughs_total",
        "Write-throughs of another proposal.",
        p.write_throughs,
    );
    counter(
        "logless_conflicts_total",
        "Rejections (NACKs) received.",
        p.nacks,
    );
    counter(
        "logless_learned_total",
        "Proposals completed through LEARNED or own request id.",
        p.learned,
    );
    counter(
        "logless_timeouts_total",
        "Operations that timed out.",
        p.timeouts,
    );
    counter("logless_flushes_total", "Group-commit flushes.", t.flushes);
    counter(
        "logless_state_writes_total",
        "Acceptor state writes.",
        t.state_writes,
    );
    counter(
        "logless_peer_links_broken_total",
        "Peer links broken or replaced.",
        t.links_broken,
    );
    counter(
        "logless_registers_recovered_total",
        "Registers this rejoining replica recovered from the others since start.",
        t.registers_recovered,
    );
    counter(
        "logless_writes_refused_for_space_total",
        "Writes refused because the disk was full: by the store, or at once once it was found full.",
        t.writes_refused_for_space,
    );
    let c = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed);
    counter(
        "logless_client_bytes_in_total",
        "Bytes read from clients.",
        c(&context.clients.bytes_in),
    );
    counter(
        "logless_client_bytes_out_total",
        "Bytes written to clients.",
        c(&context.clients.bytes_out),
    );
    counter(
        "logless_peer_bytes_in_total",
        "Bytes read from peers.",
        c(&context.peers.bytes_in),
    );
    counter(
        "logless_peer_bytes_out_total",
        "Bytes written to peers.",
        c(&context.peers.bytes_out),
    );
    counter(
        "logless_client_connections_total",
        "Client connections accepted.",
        c(&context.clients.accepted),
    );
    counter(
        "logless_client_protocol_errors_total",
        "Client connections closed for protocol errors.",
        c(&context.clients.protocol_errors),
    );
    counter(
        "logless_client_auth_rejected_total",
        "Failed logins (AUTH or HELLO AUTH).",
        c(&context.clients.rejected_auth),
    );
    counter(
        "logless_client_idle_disconnects_total",
        "Client connections closed for being idle past timeout.",
        c(&context.clients.idle_disconnects),
    );
    counter(
        "logless_client_query_buffer_disconnects_total",
        "Client connections closed for a pending request past client_query_buffer_limit.",
        c(&context.clients.query_buffer_disconnects),
    );
    counter(
        "logless_client_output_buffer_disconnects_total",
        "Client connections closed for unread replies past client_output_buffer_limit.",
        c(&context.clients.output_buffer_disconnects),
    );
    counter(
        "logless_peer_connections_over_cap_total",
        "Inbound peer connections closed at once because peer_connections_max were open.",
        c(&context.peers.over_cap),
    );
    counter(
        "logless_client_tls_handshake_failures_total",
        "TLS connections of clients (Redis and HTTP) closed in their handshake (not TLS, a refused certificate, too slow).",
        c(&context.clients.tls_handshake_failures),
    );
    counter(
        "logless_peer_connections_rejected_total",
        "Peer connections rejected or broken by bad frames.",
        c(&context.peers.rejected),
    );
    counter(
        "logless_peer_dialler_wakes_total",
        "Times a peer's hello woke the dialler to it out of its back-off (the peer listens again).",
        c(&context.peers.dialler_wakes),
    );
    counter(
        "logless_peer_link_breaks_total",
        "Times a shard was told a peer link broke (the peer then counts as crashed for the proposals in flight).",
        c(&context.peers.link_breaks),
    );
    let _ = writeln!(
        out,
        "# HELP logless_flush_seconds_total Time spent in group-commit flushes.\n# TYPE logless_flush_seconds_total counter\nlogless_flush_seconds_total {}",
        t.flush_micros as f64 / 1e6
    );
    let mut gauge = |name: &str, help: &str, value: u64| {
        let _ = writeln!(
            out,
            "# HELP {name} {help}\n# TYPE {name} gauge\n{name} {value}"
        );
    };
    gauge(
        "logless_registers",
        "Registers held by this replica (tombstones included).",
        t.registers,
    );
    gauge(
        "logless_live_registers",
        "Registers with a live value.",
        t.live_registers,
    );
    gauge(
        "logless_expiring_registers",
        "Registers with a live value and a time to live.",
        t.expiring_registers,
    );
    gauge(
        "logless_client_connections",
        "Client connections open.",
        c(&context.clients.connected),
    );
    gauge(
        "logless_incarnation",
        "This run's incarnation.",
        u64::from(context.incarnation),
    );
    gauge(
        "logless_uptime_seconds",
        "Seconds since start.",
        context.started.elapsed().as_secs(),
    );
    gauge(
        "logless_rejoining",
        "1 if this replica rejoined after a lost disk (docs/lost-disk.md).",
        u64::from(t.rejoining),
    );
    gauge(
        "logless_rejoin_peers_unfenced",
        "Peer shards that have not answered this rejoining replica's FENCE yet.",
        t.rejoin_peers_unfenced,
    );

    let mut commands: Vec<_> = t.commands.iter().collect();
    commands.sort();
    out.push_str("# HELP logless_commands_total Commands answered, by command and outcome.\n# TYPE logless_commands_total counter\n");
    for ((name, outcome), n) in commands {
        let _ = writeln!(
            out,
            "logless_commands_total{{command=\"{name}\",outcome=\"{outcome}\"}} {n}"
        );
    }
    let mut names: Vec<_> = t.latency_us.keys().collect();
    names.sort();
    out.push_str("# HELP logless_command_latency_seconds Command latency at the replica that took it.\n# TYPE logless_command_latency_seconds histogram\n");
    for name in names {
        let h = &t.latency_us[name];
        for bound in BUCKETS_S {
            let count = h.count_between(0, (bound * 1e6) as u64);
            let _ = writeln!(out, "logless_command_latency_seconds_bucket{{command=\"{name}\",le=\"{bound}\"}} {count}");
        }
        let _ = writeln!(
            out,
            "logless_command_latency_seconds_bucket{{command=\"{name}\",le=\"+Inf\"}} {}",
            h.len()
        );
        let sum: f64 = h
            .iter_recorded()
            .map(|v| v.value_iterated_to() as f64 * v.count_at_value() as f64)
            .sum::<f64>()
            / 1e6;
        let _ = writeln!(
            out,
            "logless_command_latency_seconds_sum{{command=\"{name}\"}} {sum}"
        );
        let _ = writeln!(
            out,
            "logless_command_latency_seconds_count{{command=\"{name}\"}} {}",
            h.len()
        );
    }
    if let Some(psmr) = &t.psmr {
        psmr_prometheus(&mut out, psmr);
    }
    if let Some(ring) = ring_status(context, t) {
        ring_prometheus(&mut out, &ring);
    }
    if let Some(log) = &t.log {
        for figure in log_figures(log) {
            let kind = if figure.counter { "counter" } else { "gauge" };
            let name = figure.name;
            let _ = writeln!(
                out,
                "# HELP logless_log_{name} {}\n# TYPE logless_log_{name} {kind}\nlogless_log_{name} {}",
                figure.help, figure.value
            );
        }
    }
    out
}

/// One figure of the log engine, as INFO (`log_<name>`) and `/metrics` (`logless_log_<name>`)
/// show it.
pub struct LogFigure {
    /// The name, after its prefix.
    pub name: &'static str,
    /// What it counts.
    pub help: &'static str,
    /// Its value (-1 for an instance there is none of yet).
    pub value: i64,
    /// Whether it only grows (a counter) rather than goes up and down (a gauge).
    pub counter: bool,
}

/// The log engine's figures, in the order shown.
pub fn log_figures(log: &LogStatus) -> Vec<LogFigure> {
    let int = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
    let instance = |i: Option<u64>| i.map_or(-1, int);
    let figure = |name, help, value, counter| LogFigure {
        name,
        help,
        value,
        counter,
    };
    vec![
        figure(
            "view",
            "The highest view this replica promised.",
            int(log.view),
            false,
        ),
        figure(
            "leader",
            "The node id of that view's leader.",
            i64::from(log.leader),
            false,
        ),
        figure(
            "is_leader",
            "1 if this replica leads the view.",
            i64::from(log.is_leader),
            false,
        ),
        figure(
            "first_instance",
            "The first instance still in the log.",
            int(log.first_instance),
            false,
        ),
        figure(
            "last_instance",
            "The highest instance this replica knows of (-1: none).",
            instance(log.last_instance),
            false,
        ),
        figure(
            "decided_instance",
            "The highest instance known decided (-1: none).",
            instance(log.decided_instance),
            false,
        ),
        figure(
            "executed_instance",
            "The last instance executed (-1: none).",
            instance(log.executed_below.checked_sub(1)),
            false,
        ),
        figure(
            "in_flight",
            "Client operations waiting for their answers.",
            int(log.in_flight),
            false,
        ),
        figure(
            "view_changes_total",
            "View changes this replica started.",
            int(log.view_changes),
            true,
        ),
        figure(
            "views_led_total",
            "Views this replica came to lead.",
            int(log.views_led),
            true,
        ),
        figure(
            "slow_turns_total",
            "Turns of the log's loop that took 100 ms or more (nothing heard or sent meanwhile).",
            int(log.slow_turns),
            true,
        ),
        figure(
            "batches_proposed_total",
            "Batches proposed (re-proposals and no-ops included).",
            int(log.batches_proposed),
            true,
        ),
        figure(
            "requests_executed_total",
            "Requests executed by the state machine.",
            int(log.requests_executed),
            true,
        ),
        figure(
            "duplicates_skipped_total",
            "Decided requests not executed again.",
            int(log.duplicates_skipped),
            true,
        ),
        figure(
            "snapshots_taken_total",
            "Snapshots taken.",
            int(log.snapshots_taken),
            true,
        ),
        figure(
            "snapshots_installed_total",
            "Snapshots installed from another replica.",
            int(log.snapshots_installed),
            true,
        ),
        figure(
            "catch_up_queries_total",
            "Catch-up queries sent.",
            int(log.catch_up_queries),
            true,
        ),
        figure(
            "operations_answered_total",
            "Client operations answered after execution.",
            int(log.answered),
            true,
        ),
        figure(
            "operations_retried_total",
            "Client operations handed to the replica again after the retry timer.",
            int(log.retried),
            true,
        ),
        figure(
            "operations_resent_on_view_change_total",
            "Client operations handed to the replica again as it moved to a new view.",
            int(log.resent_on_view_change),
            true,
        ),
        figure(
            "operations_timed_out_total",
            "Client operations answered outcome unknown.",
            int(log.timed_out),
            true,
        ),
        figure(
            "operations_overloaded_total",
            "Client operations refused as overloaded.",
            int(log.overloaded),
            true,
        ),
        figure(
            "flushes_total",
            "Turns whose records were written and flushed.",
            int(log.flushes),
            true,
        ),
        figure(
            "epoch",
            "This replica's epoch (--recovery epoch; 0 under fullss).",
            int(log.epoch),
            false,
        ),
        figure(
            "recovering",
            "1 while this replica recovers its state from its peers (--recovery epoch).",
            i64::from(log.state == "recovering"),
            false,
        ),
        figure(
            "rebuilding",
            "1 while this replica, resumed from persistent memory, rebuilds its state machine \
             from its snapshot (--recovery pmem).",
            i64::from(log.state == "rebuilding"),
            false,
        ),
        figure(
            "state_lost",
            "1 once more replicas lost their state than the cluster can lose (--recovery \
             epoch): the cluster refuses service.",
            i64::from(log.state == "state_lost"),
            false,
        ),
        figure(
            "recoveries_total",
            "Recoveries of this replica's state from its peers completed (--recovery epoch).",
            int(log.recoveries),
            true,
        ),
        figure(
            "space_short",
            "1 while the disk has no space for the log (the replica is paused).",
            i64::from(log.space_short),
            false,
        ),
        figure(
            "space_shortages_total",
            "Times the disk ran out of space for the log.",
            int(log.space_shortages),
            true,
        ),
        figure(
            "rejoining",
            "1 while this replica rejoins after a lost disk and has not recovered yet.",
            i64::from(log.rejoining),
            false,
        ),
        figure(
            "operations_refused_for_space_total",
            "Client operations refused because the disk had no space for the log.",
            int(log.refused_for_space),
            true,
        ),
    ]
}

/// The state of one outbound peer link.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct LinkStatus {
    /// The peer.
    pub peer: u16,
    /// The shard.
    pub shard: u16,
    /// Whether it is connected.
    pub up: bool,
}

/// What `/status` returns and `logless status` prints.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct NodeStatus {
    /// This node.
    pub node_id: u16,
    /// This run's incarnation.
    pub incarnation: u32,
    /// Seconds since start.
    pub uptime_s: u64,
    /// The Redis address.
    pub client_addr: String,
    /// Replicas in the cluster.
    pub replicas: usize,
    /// Shards.
    pub shards: u16,
    /// The replication engine (`rmw`, `multipaxos` or `psmr`).
    #[serde(default)]
    pub engine: String,
    /// The log engine's figures: view, leader, instances, snapshots, catch-up.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub log: Option<LogStatus>,
    /// The psmr engine's figures: mode, threads, digest, each group's leader and instances.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub psmr: Option<PsmrStatus>,
    /// The durability mode.
    pub durability: String,
    /// Registers held.
    pub registers: u64,
    /// Client connections open.
    pub clients: u64,
    /// Commands answered.
    pub commands: u64,
    /// Operations that timed out.
    pub timeouts: u64,
    /// Outbound peer links.
    pub links: Vec<LinkStatus>,
    /// Whether the node can serve: no store failure, a quorum of replicas reachable (on a ring,
    /// a majority of every slot's replicas: [`RingStatus::slots_without_majority`]), and
    /// (the log engine under EpochSS) its state recovered and not lost.
    pub healthy: bool,
    /// The cluster id its peers must present.
    #[serde(default)]
    pub cluster_id: String,
    /// Whether its peers must prove a cluster secret.
    #[serde(default)]
    pub cluster_secret: bool,
    /// On a ring (N > R): the slots and keys this node holds and what it forwarded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ring: Option<RingStatus>,
    /// Present only in a build with fault injection (a test build): the deliberate bugs it
    /// runs with, often none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub injected_bugs: Option<Vec<String>>,
}

/// What a node of a ring (N > R, [`crate::ring`]) holds and forwards.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct RingStatus {
    /// The stage of the ring this node installed (`Stable(e)`, or `Joint(e)` while a change
    /// moves it to epoch `e`; [`crate::ring_watch`]).
    #[serde(default)]
    pub stage: String,
    /// The epoch of that stage (of the configuration it moves to while joint).
    #[serde(default)]
    pub epoch: u64,
    /// Whether that stage is a joint one (a change under way).
    #[serde(default)]
    pub joint: bool,
    /// Nodes of the ring (of the configuration it routes by), N.
    pub nodes: usize,
    /// Each key's replicas, R.
    pub replication: usize,
    /// The slots this node replicates (of 16,384).
    pub slots: u64,
    /// Keys this node owns: registers with a live value, of the slots it replicates at the
    /// installed stage (in a joint stage, of the old or the new configuration).
    pub keys_owned: u64,
    /// Commands on keys this node does not hold, forwarded to one of their replicas.
    pub forwarded: u64,
    /// Of those, answered `UNCERTAIN`: the link broke after the command was written.
    pub forwarded_uncertain: u64,
    /// Of those, answered `TRYAGAIN`: no link to the replica could be opened.
    pub forwarded_unreachable: u64,
    /// Commands refused with `CROSSSLOT`: their keys are held by different replicas.
    pub crossslot: u64,
    /// Every node's client address, by node id: where `logless status` finds the nodes it
    /// was not given.
    #[serde(default)]
    pub client_addrs: BTreeMap<u16, String>,
    /// The slot ranges (`first-last`) of which this node reaches fewer than a majority of the
    /// replicas (itself included): it cannot serve their keys, and is unhealthy while any are.
    #[serde(default)]
    pub slots_without_majority: Vec<String>,
    /// Keys this node's data mover wrote through to new replicas since it started
    /// ([`crate::ring_mover`]).
    #[serde(default)]
    pub keys_moved: u64,
    /// Keys whose write-through is under way.
    #[serde(default)]
    pub keys_in_transit: u64,
    /// The data mover's progress in the last joint stage, if there was one since the start.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mover: Option<MoverStatus>,
    /// Registers (acceptor states, dead ones included) this node dropped since it started
    /// because a change of the ring took their slots from it (docs/ring.md §4 "Slots a node
    /// left").
    #[serde(default)]
    pub registers_dropped: u64,
    /// Registers it holds of slots it does not replicate at its stage: what is left to drop.
    #[serde(default)]
    pub registers_to_drop: u64,
    /// Data shards whose acceptors answer no peer yet: the node has not installed the ring's
    /// stage since it started (docs/ring.md §4 "A restarted node").
    #[serde(default)]
    pub shards_awaiting_stage: u64,
    /// The owner of each of the ring's 1,024 segments in the configuration it routes by (the
    /// old one while joint): the placement, from which `logless status` finds each slot's
    /// replicas after changes have moved it away from the one the peer list derives. Empty
    /// from nodes of earlier builds.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub segment_owners: Vec<u16>,
}

/// A node's data mover in a joint stage ([`crate::ring_mover::Progress`]).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct MoverStatus {
    /// The joint stage it moves for (`Joint(e)`).
    pub stage: String,
    /// The moving slots this node syncs.
    pub slots: u64,
    /// Of those, synced.
    pub slots_synced: u64,
    /// Live keys of its slots found at their old replicas.
    pub keys_found: u64,
    /// Of those, written through.
    pub keys_synced: u64,
    /// Whether every slot it syncs is synced.
    pub done: bool,
    /// What it waits for, if anything.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub waiting: String,
}

impl RingStatus {
    /// The share of the slots this node replicates; R/N on a balanced ring.
    pub fn slots_share(&self) -> f64 {
        self.slots as f64 / f64::from(logless_placement::SLOTS)
    }
}

/// The ring figures of a node of a ring; `None` on a cluster whose nodes hold every key.
pub fn ring_status(context: &NodeContext, t: &Totals) -> Option<RingStatus> {
    let forwarder = context.forwarder.as_ref()?;
    let c = &forwarder.counters;
    let reachable = reachable_peers(context);
    let reaches = |n: NodeId| n.0 == context.node.0 || reachable.binary_search(&n.0).is_ok();
    let ring = forwarder.ring();
    let nodes = ring.nodes().len();
    let stage = context.ring.as_ref().map(|r| r.installed().stage());
    let mover = context.ring.as_ref().map(|r| r.mover.progress());
    Some(RingStatus {
        stage: stage.map_or_else(String::new, crate::ring_register::stage_name),
        epoch: stage.map_or(0, |s| s.epoch().0),
        joint: matches!(stage, Some(logless_placement::Stage::Joint(_))),
        nodes,
        replication: context.config.replication(),
        slots: forwarder.slots_held(),
        keys_owned: t.live_registers.saturating_sub(t.live_unplaced),
        forwarded: c.forwarded.load(Ordering::Relaxed),
        forwarded_uncertain: c.uncertain.load(Ordering::Relaxed),
        forwarded_unreachable: c.unreachable.load(Ordering::Relaxed),
        crossslot: c.cross.load(Ordering::Relaxed),
        client_addrs: forwarder.client_addrs().clone(),
        slots_without_majority: crate::ring::ranges_without_majority(&ring, reaches),
        keys_moved: context.ring.as_ref().map_or(0, |r| r.mover.moved()),
        keys_in_transit: mover.as_ref().map_or(0, |p| p.in_transit),
        mover: mover.and_then(|p| {
            Some(MoverStatus {
                stage: crate::ring_register::stage_name(p.stage?),
                slots: p.slots,
                slots_synced: p.slots_synced,
                keys_found: p.found,
                keys_synced: p.synced,
                done: p.done,
                waiting: p.waiting,
            })
        }),
        registers_dropped: t.registers_dropped,
        registers_to_drop: t.registers_unplaced,
        shards_awaiting_stage: t.awaiting_stage,
        segment_owners: ring.owners().iter().map(|n| n.0).collect(),
    })
}

/// The peers with at least one link of a data shard up, sorted.
fn reachable_peers(context: &NodeContext) -> Vec<u16> {
    let links = context.peers.links_up.lock().expect("not poisoned");
    let mut reachable: Vec<u16> = links
        .iter()
        .filter(|(&(_, shard), &up)| up && !crate::ring_register::is_ring_link(context, shard))
        .map(|(&(peer, _), _)| peer)
        .collect();
    reachable.sort_unstable();
    reachable.dedup();
    reachable
}

fn ring_prometheus(out: &mut String, r: &RingStatus) {
    let figures = [
        (
            "epoch",
            "gauge",
            "Epoch of the ring's stage this node installed (the one it moves to while joint).",
            r.epoch,
        ),
        (
            "joint",
            "gauge",
            "1 while the installed stage is joint (a membership change under way), else 0.",
            u64::from(r.joint),
        ),
        ("nodes", "gauge", "Nodes of the ring, N.", r.nodes as u64),
        (
            "replication",
            "gauge",
            "Each key's replicas, R.",
            r.replication as u64,
        ),
        (
            "slots",
            "gauge",
            "Slots this node replicates, of 16384 (R/N of them on a balanced ring).",
            r.slots,
        ),
        (
            "keys_owned",
            "gauge",
            "Keys this node owns: live registers of the slots it replicates at its stage.",
            r.keys_owned,
        ),
        (
            "forwarded_total",
            "counter",
            "Commands on keys this node does not hold, forwarded to a replica.",
            r.forwarded,
        ),
        (
            "forwarded_uncertain_total",
            "counter",
            "Forwarded commands answered UNCERTAIN: the link broke after they were written.",
            r.forwarded_uncertain,
        ),
        (
            "forwarded_unreachable_total",
            "counter",
            "Forwarded commands answered TRYAGAIN: no link to the replica could be opened.",
            r.forwarded_unreachable,
        ),
        (
            "crossslot_total",
            "counter",
            "Commands refused with CROSSSLOT: their keys are held by different replicas.",
            r.crossslot,
        ),
        (
            "keys_moved_total",
            "counter",
            "Keys this node's data mover wrote through to their new replicas in ring changes.",
            r.keys_moved,
        ),
        (
            "keys_in_transit",
            "gauge",
            "Keys whose write-through by this node's data mover is under way.",
            r.keys_in_transit,
        ),
        (
            "moving_slots",
            "gauge",
            "Moving slots this node's data mover syncs in the ring's last joint stage.",
            r.mover.as_ref().map_or(0, |m| m.slots),
        ),
        (
            "moving_slots_synced",
            "gauge",
            "Of those, the slots whose every key is written through.",
            r.mover.as_ref().map_or(0, |m| m.slots_synced),
        ),
        (
            "registers_dropped_total",
            "counter",
            "Registers this node dropped because a ring change took their slots from it.",
            r.registers_dropped,
        ),
        (
            "registers_to_drop",
            "gauge",
            "Registers this node holds of slots it does not replicate at its stage, to drop.",
            r.registers_to_drop,
        ),
    ];
    for (name, kind, help, value) in figures {
        let _ = writeln!(
            out,
            "# HELP logless_ring_{name} {help}\n# TYPE logless_ring_{name} {kind}\nlogless_ring_{name} {value}"
        );
    }
}

/// Builds the `/status` document.
pub fn node_status(context: &NodeContext, t: &Totals) -> NodeStatus {
    let links: Vec<LinkStatus> = context
        .peers
        .links_up
        .lock()
        .expect("not poisoned")
        .iter()
        .map(|(&(peer, shard), &up)| LinkStatus { peer, shard, up })
        .collect();
    let replicas = context.config.peers.len();
    let reachable = reachable_peers(context);
    let ring = ring_status(context, t);
    // On a ring a majority of each slot's replicas, not of all nodes, serves its keys.
    let quorum_reached = match &ring {
        Some(ring) => ring.slots_without_majority.is_empty(),
        None => reachable.len() + 1 > replicas / 2,
    };
    let failed = context.failed.load(Ordering::Relaxed) != 0;
    NodeStatus {
        node_id: context.node.0,
        incarnation: context.incarnation,
        uptime_s: context.started.elapsed().as_secs(),
        client_addr: context.bound.client.to_string(),
        replicas,
        shards: context.config.shards,
        engine: context.config.engine.to_string(),
        log: t.log.clone(),
        psmr: t.psmr.clone(),
        durability: context.config.durability.clone(),
        registers: t.registers,
        clients: context.clients.connected.load(Ordering::Relaxed),
        commands: t.commands.values().sum::<u64>() + t.psmr.as_ref().map_or(0, |p| p.answered),
        timeouts: t.proposer.timeouts,
        links,
        healthy: !failed && quorum_reached && t.log.as_ref().is_none_or(LogStatus::serves),
        cluster_id: context.config.cluster_id.clone(),
        cluster_secret: context.config.cluster_secret_file.is_some(),
        ring,
        injected_bugs: crate::node::FAULT_INJECTION.then(|| context.injected_bugs.clone()),
    }
}
