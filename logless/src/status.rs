//! `logless status`: the health of a cluster, from the `/status` endpoint of its replicas.
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::ExitCode;
use std::time::Duration;

use logless_node::status::NodeStatus;

#[derive(clap::Args, Clone, Debug)]
pub struct StatusArgs {
    /// The HTTP addresses of the replicas to ask (default: those of `logless up`'s defaults).
    #[arg(long, value_delimiter = ',')]
    pub http: Vec<SocketAddr>,
}

/// GETs `path` from `addr` and returns the status code and body.
pub fn http_get(addr: SocketAddr, path: &str) -> std::io::Result<(u16, String)> {
    let timeout = Duration::from_secs(3);
    let mut stream = TcpStream::connect_timeout(&addr, timeout)?;
    stream.set_read_timeout(Some(timeout))?;
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )?;
    let mut response = String::new();
    stream.read_to_string(&mut response)?;
    let code = response
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = response
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    Ok((code, body))
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
        match http_get(*addr, "/status").map(|(_, body)| serde_json::from_str::<NodeStatus>(&body))
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
