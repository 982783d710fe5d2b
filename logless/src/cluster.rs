//! `logless cluster status|add|remove|replace`: a ring's membership, asked of any of its nodes
//! over its HTTP port (`/cluster`, docs/ring.md §4 "Operating"). The node asked coordinates the
//! change and answers when it is done or refused.
use std::net::SocketAddr;
use std::process::ExitCode;
use std::time::Duration;

use clap::Subcommand;
use logless_harness::probe::{connect, http_request_on};
use logless_node::ring_change::RingChangeStatus;

/// How long a status may take.
const STATUS_TIMEOUT: Duration = Duration::from_secs(5);

/// How long a change may take: the node waits for every node to install two stages (it gives up
/// on its own well before).
const CHANGE_TIMEOUT: Duration = Duration::from_secs(130);

#[derive(clap::Args, Clone, Debug)]
pub struct ClusterArgs {
    /// The HTTP address of the node to ask (any node of the ring; default: `logless up`'s
    /// first).
    #[arg(long)]
    pub http: Option<SocketAddr>,
    /// The nodes' requirepass, which a change must present (default: $LOGLESS_PASSWORD).
    #[arg(long, env = "LOGLESS_PASSWORD", hide_env_values = true)]
    pub password: Option<String>,
    #[command(subcommand)]
    pub command: ClusterCommand,
}

#[derive(Subcommand, Clone, Debug)]
pub enum ClusterCommand {
    /// The ring's stage (Stable(e), or Joint(e) during a change) and what every node installed.
    Status,
    /// Add node ID (started with the ring's peer list) to the ring.
    Add {
        /// The node's id.
        node: u16,
    },
    /// Remove node ID from the ring (its slots go to the others).
    Remove {
        /// The node's id.
        node: u16,
    },
    /// Give node OLD's slots to node NEW (started with the ring's peer list).
    Replace {
        /// The node leaving.
        old: u16,
        /// The node taking its place.
        new: u16,
    },
}

pub fn cluster(args: &ClusterArgs) -> ExitCode {
    let addr = args.http.unwrap_or(SocketAddr::from((
        [127, 0, 0, 1],
        crate::up::HTTP_PORT_DEFAULT,
    )));
    let (method, path, timeout) = match &args.command {
        ClusterCommand::Status => ("GET", "/cluster".to_string(), STATUS_TIMEOUT),
        ClusterCommand::Add { node } => {
            ("POST", format!("/cluster/add?node={node}"), CHANGE_TIMEOUT)
        }
        ClusterCommand::Remove { node } => (
            "POST",
            format!("/cluster/remove?node={node}"),
            CHANGE_TIMEOUT,
        ),
        ClusterCommand::Replace { old, new } => (
            "POST",
            format!("/cluster/replace?old={old}&new={new}"),
            CHANGE_TIMEOUT,
        ),
    };
    let headers = args
        .password
        .as_ref()
        .map_or_else(String::new, |p| format!("Authorization: Bearer {p}\r\n"));
    let answer = connect(addr, timeout).and_then(|stream| {
        stream.set_read_timeout(Some(timeout))?;
        http_request_on(stream, addr, method, &path, &headers)
    });
    let (code, body) = match answer {
        Ok(answer) => answer,
        Err(e) => {
            eprintln!("error: {addr}: {e}");
            return ExitCode::from(2);
        }
    };
    if code != 200 {
        eprint!("error: {addr} answered {code}: {body}");
        return ExitCode::FAILURE;
    }
    if !matches!(args.command, ClusterCommand::Status) {
        print!("{body}");
        return ExitCode::SUCCESS;
    }
    match serde_json::from_str::<RingChangeStatus>(&body) {
        Ok(status) => {
            print_status(&status);
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {addr}: not a ring status ({e})");
            ExitCode::from(2)
        }
    }
}

fn print_status(s: &RingChangeStatus) {
    println!(
        "stage {} (epoch {}), R = {}, nodes {:?}",
        s.stage, s.epoch, s.replication, s.nodes
    );
    if !s.joining.is_empty() {
        println!(
            "moving to nodes {:?}: {} slots change replicas",
            s.joining, s.moving_slots
        );
    }
    println!("{:>6}  installed", "node");
    for (node, report) in &s.reports {
        println!("{node:>6}  {report}");
    }
}
