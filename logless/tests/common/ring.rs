//! Changing a ring of real processes: `logless cluster` and the stage each node installed.
use std::net::SocketAddr;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use logless_harness::probe::http_get;
use logless_node::status::NodeStatus;

use super::Cluster;

/// `logless cluster --http <http> <args>`, its output captured.
pub fn cluster_command(http: SocketAddr, args: &[&str]) -> Command {
    let mut command = Command::new(super::binary());
    command
        .args(["cluster", "--http", &http.to_string()])
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    command
}

/// The status and both outputs of a finished command, to show in a failed assertion.
pub fn text(output: &Output) -> String {
    format!(
        "status {:?}\nstdout:\n{}stderr:\n{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

/// Runs `logless cluster <args>` asked of node `i` and asserts it succeeded; its output.
pub fn change(cluster: &Cluster, i: usize, args: &[&str]) -> String {
    let output = cluster_command(cluster.replicas[i].spec.http, args)
        .output()
        .unwrap();
    let shown = text(&output);
    assert!(output.status.success(), "{args:?}: {shown}");
    shown
}

/// The stage node `i` reports in `/status` (`None` while it does not answer).
pub fn installed(cluster: &Cluster, i: usize) -> Option<String> {
    let (_, body) = http_get(
        cluster.replicas[i].spec.http,
        "/status",
        Duration::from_secs(3),
    )
    .ok()?;
    let status: NodeStatus = serde_json::from_str(&body).ok()?;
    Some(status.ring.expect("a ring").stage)
}

/// Waits until each of `nodes` (indices) reports `stage` in `/status`.
pub fn nodes_install(cluster: &Cluster, nodes: impl IntoIterator<Item = usize>, stage: &str) {
    let deadline = Instant::now() + Duration::from_secs(20);
    for i in nodes {
        while installed(cluster, i).as_deref() != Some(stage) {
            assert!(
                Instant::now() < deadline,
                "node {} stays at {:?}",
                i + 1,
                installed(cluster, i)
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}
