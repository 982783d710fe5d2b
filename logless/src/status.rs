//! `logless status`: the health of a cluster, from the `/status` endpoint of its replicas
//! (over TLS with `--tls-ca-cert-file`, for replicas with `tls_http`).
use std::collections::BTreeSet;
use std::net::{SocketAddr, ToSocketAddrs};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use logless_harness::probe::{http_get, http_get_on};
use logless_node::status::{NodeStatus, RingStatus};
use logless_placement::{Configuration, Epoch, NodeId, Replication};

use crate::tls_client;

/// How long each replica may take to answer: one that takes longer is reported unreachable.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(3);

#[derive(clap::Args, Clone, Debug)]
pub struct StatusArgs {
    /// The HTTP addresses of the replicas to ask (default: those of `logless up`'s defaults).
    #[arg(long, value_delimiter = ',')]
    pub http: Vec<SocketAddr>,
    /// Ask over TLS (replicas with tls_http), trusting the CA certificates in this PEM file.
    #[arg(long)]
    pub tls_ca_cert_file: Option<PathBuf>,
    /// The client certificate to present over TLS (with --tls-key-file).
    #[arg(long, requires_all = ["tls_key_file", "tls_ca_cert_file"])]
    pub tls_cert_file: Option<PathBuf>,
    /// The key of --tls-cert-file.
    #[arg(long, requires = "tls_cert_file")]
    pub tls_key_file: Option<PathBuf>,
}

pub fn status(args: &StatusArgs) -> ExitCode {
    let addrs: Vec<SocketAddr> = if args.http.is_empty() {
        (0..3)
            .map(|i| SocketAddr::from(([127, 0, 0, 1], crate::up::HTTP_PORT_DEFAULT + i)))
            .collect()
    } else {
        args.http.clone()
    };
    let tls = match &args.tls_ca_cert_file {
        None => None,
        Some(ca) => {
            let identity = args
                .tls_cert_file
                .as_deref()
                .zip(args.tls_key_file.as_deref());
            match logless_node::tls::client_config(ca, identity) {
                Ok(config) => Some(config),
                Err(e) => {
                    eprintln!("error: {e}");
                    return ExitCode::from(2);
                }
            }
        }
    };
    let get_status = |addr: SocketAddr| match &tls {
        None => http_get(addr, "/status", ANSWER_TIMEOUT),
        Some(config) => tls_client::connect(config, addr, ANSWER_TIMEOUT)
            .and_then(|stream| http_get_on(stream, addr, "/status")),
    };
    println!(
        "{:<22} {:>5} {:>5} {:>8} {:>10} {:>8} {:>12} {:>9}  durability",
        "replica (http)", "node", "inc", "healthy", "registers", "clients", "commands", "links up"
    );
    let mut addrs = addrs;
    let mut healthy = 0;
    let mut healthy_nodes = BTreeSet::new();
    let mut ring_seen: Option<RingStatus> = None;
    let mut derived_from = None;
    let mut next = 0;
    while let Some(&addr) = addrs.get(next) {
        next += 1;
        let derived = derived_from.is_some_and(|given| next > given);
        match get_status(addr).map(|(_, body)| serde_json::from_str::<NodeStatus>(&body)) {
            Ok(Ok(s)) => {
                healthy += usize::from(s.healthy);
                if s.healthy {
                    healthy_nodes.insert(s.node_id);
                }
                if let (None, Some(ring)) = (&ring_seen, &s.ring) {
                    // The ring's other nodes: at their client addresses' hosts, their HTTP
                    // ports as far from their client ports as on this node.
                    let more = other_nodes(ring, addr, &s.client_addr, &addrs);
                    if !more.is_empty() {
                        derived_from = Some(addrs.len());
                        addrs.extend(more);
                    }
                }
                // The verdict goes by the latest stage a node installed (a node restarted
                // but not yet past its first read of the stage shows an older one).
                if let Some(ring) = &s.ring {
                    if ring_seen
                        .as_ref()
                        .is_none_or(|seen| ring.epoch > seen.epoch)
                    {
                        ring_seen = Some(ring.clone());
                    }
                }
                println!(
                    "{:<22} {:>5} {:>5} {:>8} {:>10} {:>8} {:>12} {:>9}  {}",
                    addr.to_string(),
                    s.node_id,
                    s.incarnation,
                    if s.healthy { "yes" } else { "NO" },
                    s.registers,
                    s.clients,
                    s.commands,
                    format!(
                        "{}/{}",
                        s.links.iter().filter(|l| l.up).count(),
                        s.links.len()
                    ),
                    s.durability
                );
                if let Some(log) = &s.log {
                    let instance = |i: Option<u64>| i.map_or("-".to_string(), |i| i.to_string());
                    println!(
                        "{:<22} {} view {} (leader {}{}), instances {}..{} decided {} executed {}, \
                         snapshots {} taken {} installed, {} catch-up queries",
                        "",
                        s.engine,
                        log.view,
                        log.leader,
                        if log.is_leader { ", this one" } else { "" },
                        log.first_instance,
                        instance(log.last_instance),
                        instance(log.decided_instance),
                        instance(log.executed_below.checked_sub(1)),
                        log.snapshots_taken,
                        log.snapshots_installed,
                        log.catch_up_queries,
                    );
                    if !log.serves() {
                        println!(
                            "{:<22} {} (epoch {}): {}",
                            "",
                            log.state.replace('_', " ").to_uppercase(),
                            log.epoch,
                            match log.state.as_str() {
                                "recovering" => "recovering its state from its peers",
                                "rebuilding" =>
                                    "rebuilding its state machine from its persistent snapshot",
                                _ =>
                                    "more replicas lost their state than the cluster can \
                                      lose; it refuses service (docs/recovery.md)",
                            }
                        );
                    }
                }
                if let Some(psmr) = &s.psmr {
                    let groups: Vec<String> = psmr
                        .groups
                        .iter()
                        .map(|g| {
                            let mark = if g.is_leader { "*" } else { "" };
                            format!(
                                "{} leader {}{mark} at {}",
                                g.group, g.leader, g.executed_below
                            )
                        })
                        .collect();
                    println!(
                        "{:<22} psmr mode {}, {} threads, digest {}, backlog {}; {}",
                        "",
                        psmr.mode,
                        psmr.threads,
                        psmr.digest,
                        psmr.backlog,
                        if groups.is_empty() {
                            "no groups".to_string()
                        } else {
                            groups.join(", ")
                        }
                    );
                }
                if let Some(ring) = &s.ring {
                    for line in ring_lines(ring) {
                        println!("{:<22} {line}", "");
                    }
                }
                if let Some(bugs) = &s.injected_bugs {
                    // Only a test build reports this: it should never be seen in production.
                    println!(
                        "{:<22} a test build with fault injection; injected bugs: {}",
                        "",
                        if bugs.is_empty() {
                            "none".to_string()
                        } else {
                            bugs.join(", ")
                        }
                    );
                }
            }
            Ok(Err(e)) => println!("{:<22} bad answer: {e}", addr.to_string()),
            Err(e) if derived => println!(
                "{:<22} unreachable: {e} (an address derived from the ring's client addresses; \
                 give every node's HTTP address with --http if they differ)",
                addr.to_string()
            ),
            Err(e) => println!("{:<22} unreachable: {e}", addr.to_string()),
        }
    }
    if let Some(ring) = &ring_seen {
        return ring_verdict(ring, &healthy_nodes);
    }
    let quorum = addrs.len() / 2 + 1;
    println!(
        "{healthy} of {} replicas healthy; the cluster serves while {quorum} are",
        addrs.len()
    );
    if healthy >= quorum {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// What `logless status` shows of a node of a ring, one line each: its stage and share of the
/// slots, what it forwards; and, when there is something to show, the slots it cannot reach a
/// majority of, its data shards that answer no peer until it reads the ring's stage, its data
/// mover's progress in the last joint stage, and the registers of slots it left still to drop.
fn ring_lines(ring: &RingStatus) -> Vec<String> {
    let mut lines = vec![format!(
        "ring of {} nodes ({}{}), R = {}: {} slots ({:.1}%; R/N = {:.1}%), {} keys owned; {} \
         commands forwarded ({} uncertain, {} unreachable), {} crossslot",
        ring.nodes,
        ring.stage,
        if ring.joint {
            ", a change under way"
        } else {
            ""
        },
        ring.replication,
        ring.slots,
        100.0 * ring.slots_share(),
        100.0 * ring.replication as f64 / ring.nodes as f64,
        ring.keys_owned,
        ring.forwarded,
        ring.forwarded_uncertain,
        ring.forwarded_unreachable,
        ring.crossslot,
    )];
    if !ring.slots_without_majority.is_empty() {
        lines.push(format!(
            "reaches fewer than a majority of the replicas of slots {}",
            ring.slots_without_majority.join(", ")
        ));
    }
    if ring.shards_awaiting_stage > 0 {
        lines.push(format!(
            "{} data shards await the ring's stage: they answer no peer until the node has \
             read the stage register (a majority of its peer list up)",
            ring.shards_awaiting_stage
        ));
    }
    if let Some(m) = &ring.mover {
        lines.push(format!(
            "data mover ({}): {} of {} slots synced, {} of {} keys found written through, {} \
             in transit, {} moved since start; {}",
            m.stage,
            m.slots_synced,
            m.slots,
            m.keys_synced,
            m.keys_found,
            ring.keys_in_transit,
            ring.keys_moved,
            match (m.done, m.waiting.as_str()) {
                (true, _) => "done".to_string(),
                (false, "") => "moving".to_string(),
                (false, waiting) => format!("waiting for {waiting}"),
            }
        ));
    }
    if ring.registers_to_drop > 0 || ring.registers_dropped > 0 {
        lines.push(format!(
            "registers of slots it left: {} dropped, {} to drop{}",
            ring.registers_dropped,
            ring.registers_to_drop,
            if ring.registers_to_drop > 0 {
                " (it cannot be added back, nor gain slots, until none is left)"
            } else {
                ""
            }
        ));
    }
    lines
}

/// The HTTP addresses of the ring's nodes not among `asked`, derived from their client
/// addresses: the same host, and the port as far from the client port as `http` is from the
/// client port `client` of the node that answered there (so both `logless up`'s layout and
/// one node a host with the same ports everywhere are found).
fn other_nodes(
    ring: &RingStatus,
    http: SocketAddr,
    client: &str,
    asked: &[SocketAddr],
) -> Vec<SocketAddr> {
    let Ok(client) = client.parse::<SocketAddr>() else {
        return Vec::new();
    };
    let offset = i32::from(http.port()) - i32::from(client.port());
    ring.client_addrs
        .values()
        .filter_map(|addr| addr.to_socket_addrs().ok()?.next())
        .filter_map(|addr| {
            let port = u16::try_from(i32::from(addr.port()) + offset).ok()?;
            Some(SocketAddr::new(addr.ip(), port))
        })
        .filter(|addr| !asked.contains(addr))
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect()
}

/// The configuration the node reporting `ring` routes by: from its segments' owners, or, from
/// a node of an earlier build that does not report them, the one the peer list derives (the
/// ring's until its first change).
fn ring_configuration(ring: &RingStatus) -> Result<Configuration, String> {
    if ring.segment_owners.is_empty() {
        let ids: Vec<u16> = ring.client_addrs.keys().copied().collect();
        return logless_node::ring::balanced(&ids, ring.replication).map_err(|e| {
            format!(
                "the ring's nodes {ids:?} and replication {}: {e}",
                ring.replication
            )
        });
    }
    let replication = u8::try_from(ring.replication)
        .ok()
        .and_then(|r| Replication::new(r).ok())
        .ok_or_else(|| format!("replication {} reported", ring.replication))?;
    let owners = ring.segment_owners.iter().map(|&n| NodeId(n)).collect();
    Configuration::from_owners(Epoch(ring.epoch.max(1)), replication, owners)
        .map_err(|e| format!("the ring's configuration reported: {e}"))
}

/// Whether a ring serves every key: a majority of every slot's replicas healthy, not a
/// majority of all its nodes.
fn ring_verdict(ring: &RingStatus, healthy: &BTreeSet<u16>) -> ExitCode {
    let configuration = match ring_configuration(ring) {
        Ok(configuration) => configuration,
        Err(e) => {
            println!("{e}");
            return ExitCode::FAILURE;
        }
    };
    let lost =
        logless_node::ring::ranges_without_majority(&configuration, |n| healthy.contains(&n.0));
    let members = configuration.nodes().len();
    let healthy_members = configuration
        .nodes()
        .filter(|n| healthy.contains(&n.0))
        .count();
    println!(
        "{healthy_members} of {members} nodes of the ring healthy (R = {}, {}); it serves a key \
         while a majority of its slot's replicas are",
        ring.replication,
        if ring.joint {
            format!("judged by the configuration of before {}", ring.stage)
        } else {
            format!("the configuration of {}", ring.stage)
        },
    );
    if lost.is_empty() {
        println!("every slot has a majority of its replicas healthy");
        ExitCode::SUCCESS
    } else {
        println!(
            "slots without a majority of their replicas healthy (their keys are not served): {}",
            lost.join(", ")
        );
        ExitCode::FAILURE
    }
}

#[cfg(test)]
mod tests {
    use logless_node::status::MoverStatus;

    use super::*;

    fn ring() -> RingStatus {
        RingStatus {
            stage: "Stable(2)".into(),
            epoch: 2,
            nodes: 3,
            replication: 3,
            slots: 16_384,
            keys_owned: 120,
            ..RingStatus::default()
        }
    }

    #[test]
    fn the_verdict_goes_by_the_configuration_the_node_reports_not_the_peer_list() {
        // Four peers, R = 3, node 4 removed: every slot is on nodes 1, 2 and 3, so with 3 and
        // 4 down every slot still has two of its three replicas.
        let ids: Vec<NodeId> = (1..=4).map(NodeId).collect();
        let removed = Configuration::balanced(&ids, Replication::THREE)
            .unwrap()
            .with_node_removed(NodeId(4))
            .unwrap();
        let mut status = RingStatus {
            client_addrs: (1..=4).map(|n| (n, format!("127.0.0.1:{n}"))).collect(),
            segment_owners: removed.owners().iter().map(|n| n.0).collect(),
            ..ring()
        };
        let healthy = |n: NodeId| n.0 <= 2;
        let configuration = ring_configuration(&status).unwrap();
        assert_eq!(configuration.owners(), removed.owners());
        assert!(logless_node::ring::ranges_without_majority(&configuration, healthy).is_empty());
        // A node of an earlier build reports no owners: the peer list's configuration, in
        // which node 4 still replicates slots, some of them with node 3.
        status.segment_owners.clear();
        let derived = ring_configuration(&status).unwrap();
        assert!(!logless_node::ring::ranges_without_majority(&derived, healthy).is_empty());
    }

    #[test]
    fn a_settled_ring_node_shows_one_line() {
        let lines = ring_lines(&ring());
        assert_eq!(lines.len(), 1, "{lines:?}");
        assert!(
            lines[0].starts_with("ring of 3 nodes (Stable(2)), R = 3: 16384 slots (100.0%"),
            "{lines:?}"
        );
    }

    #[test]
    fn a_change_shows_the_mover_and_what_waits() {
        let status = RingStatus {
            stage: "Joint(3)".into(),
            epoch: 3,
            joint: true,
            keys_in_transit: 4,
            keys_moved: 150,
            mover: Some(MoverStatus {
                stage: "Joint(3)".into(),
                slots: 40,
                slots_synced: 25,
                keys_found: 90,
                keys_synced: 60,
                done: false,
                waiting: "node 2: connection refused".into(),
            }),
            registers_dropped: 7,
            registers_to_drop: 5,
            shards_awaiting_stage: 2,
            slots_without_majority: vec!["0-99".into()],
            ..ring()
        };
        let text = ring_lines(&status).join("\n");
        for shown in [
            "(Joint(3), a change under way)",
            "reaches fewer than a majority of the replicas of slots 0-99",
            "2 data shards await the ring's stage",
            "data mover (Joint(3)): 25 of 40 slots synced, 60 of 90 keys found written \
             through, 4 in transit, 150 moved since start; waiting for node 2: connection \
             refused",
            "registers of slots it left: 7 dropped, 5 to drop (it cannot be added back",
        ] {
            assert!(text.contains(shown), "{shown:?} not in\n{text}");
        }
        let done = RingStatus {
            mover: status.mover.clone().map(|m| MoverStatus {
                done: true,
                waiting: String::new(),
                ..m
            }),
            registers_to_drop: 0,
            ..status
        };
        let text = ring_lines(&done).join("\n");
        assert!(text.contains("moved since start; done"), "{text}");
        assert!(text.contains("7 dropped, 0 to drop"), "{text}");
        assert!(!text.contains("cannot be added back"), "{text}");
    }
}
