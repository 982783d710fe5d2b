//! `logless status`: the health of a cluster, from the `/status` endpoint of its replicas.
use std::net::SocketAddr;
use std::process::ExitCode;
use std::time::Duration;

use logless_harness::probe::http_get;
use logless_node::status::NodeStatus;

/// How long each replica may take to answer: one that takes longer is reported unreachable.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(3);

#[derive(clap::Args, Clone, Debug)]
pub struct StatusArgs {
    /// The HTTP addresses of the replicas to ask (default: those of `logless up`'s defaults).
    #[arg(long, value_delimiter = ',')]
    pub http: Vec<SocketAddr>,
}

pub fn status(args: &StatusArgs) -> ExitCode {
    let addrs: Vec<SocketAddr> = if args.http.is_empty() {
        (0..3)
            .map(|i| SocketAddr::from(([127, 0, 0, 1], crate::up::HTTP_PORT_DEFAULT + i)))
            .collect()
    } else {
        args.http.clone()
    };
    println!(
        "{:<22} {:>5} {:>5} {:>8} {:>10} {:>8} {:>12} {:>9}  durability",
        "replica (http)", "node", "inc", "healthy", "registers", "clients", "commands", "links up"
    );
    let mut healthy = 0;
    for addr in &addrs {
        match http_get(*addr, "/status", ANSWER_TIMEOUT)
            .map(|(_, body)| serde_json::from_str::<NodeStatus>(&body))
        {
            Ok(Ok(s)) => {
                healthy += usize::from(s.healthy);
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
            Err(e) => println!("{:<22} unreachable: {e}", addr.to_string()),
        }
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
