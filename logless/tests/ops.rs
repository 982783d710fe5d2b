//! Operating `logless server`: settings from flags, `LOGLESS_…` variables and a file in that
//! order of precedence, `RUST_LOG` and JSON logs, peers named by DNS names, and a test build
//! that shows its fault injection in INFO and `/status`.
mod common;

use std::ffi::OsString;
use std::fs::File;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{config_get, Cluster};
use logless_harness::server::{self, ServerSpec};

/// Kills the process when the test ends, however it ends.
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn connect(addr: std::net::SocketAddr, within: Duration) -> redis::Connection {
    let deadline = Instant::now() + within;
    loop {
        let con = redis::Client::open(format!("redis://{addr}/"))
            .unwrap()
            .get_connection_with_timeout(Duration::from_secs(1));
        match con {
            Ok(con) => {
                con.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
                return con;
            }
            Err(e) => assert!(Instant::now() < deadline, "{addr} serves: {e}"),
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn settings_come_from_flags_then_the_environment_then_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let base = logless_harness::ports::free_block(&server::PORT_OFFSETS, 1).unwrap();
    let spec = server::loopback_cluster(1, base, dir.path(), "mmap").remove(0);
    let config = dir.path().join("logless.toml");
    std::fs::write(
        &config,
        format!(
            "node_id = 1\npeer_addr = \"{peer}\"\ndata_dir = \"{data}\"\n\
             proposer_registers_max = 111\nthrifty_writes = true\nthrifty_reads = false\n\
             [[peers]]\nid = 1\naddr = \"{peer}\"\n",
            peer = spec.peer,
            data = spec.dir.display()
        ),
    )
    .unwrap();
    let log = dir.path().join("server.log");
    let mut command = Command::new(common::binary());
    command
        .args(["server", "--proposer-registers-max", "333"])
        .env("LOGLESS_CONFIG", &config)
        .env("LOGLESS_CLIENT_ADDR", spec.client.to_string())
        .env("LOGLESS_PROPOSER_REGISTERS_MAX", "222")
        .env("LOGLESS_THRIFTY_WRITES", "false")
        .env("LOGLESS_LOG_FORMAT", "json")
        .env("RUST_LOG", "warn")
        .env_remove("LOGLESS_LOG_LEVEL")
        .stdin(Stdio::null())
        .stdout(File::create(&log).unwrap())
        .stderr(File::create(&log).unwrap());
    let _server = Running(command.spawn().unwrap());
    let mut con = connect(spec.client, Duration::from_secs(20));
    // The flag beats the variable, which beats the file, which beats the default.
    assert_eq!(
        config_get(&mut con, "logless-proposer-registers-max"),
        "333"
    );
    assert_eq!(config_get(&mut con, "logless-thrifty-writes"), "false");
    assert_eq!(config_get(&mut con, "logless-thrifty-reads"), "false");
    let _: () = redis::cmd("SET").arg("k").arg("v").query(&mut con).unwrap();
    // RUST_LOG=warn leaves out the info lines; the warning about the missing cluster secret
    // is one JSON object on its line.
    let text = std::fs::read_to_string(&log).unwrap();
    let lines: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{l:?}: {e}")))
        .collect();
    assert!(
        lines
            .iter()
            .all(|l| l["level"] == "WARN" || l["level"] == "ERROR"),
        "{text}"
    );
    assert!(
        lines.iter().any(|l| l["fields"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("no cluster secret"))),
        "{text}"
    );
}

#[test]
fn peers_may_be_named_by_dns_names() {
    let dir = tempfile::tempdir().unwrap();
    let base = logless_harness::ports::free_block(&server::PORT_OFFSETS, 3).unwrap();
    let specs = server::loopback_cluster(3, base, dir.path(), "memory");
    let by_name: String = specs
        .iter()
        .map(|s| format!("{}=localhost:{}", s.node_id, s.peer.port()))
        .collect::<Vec<_>>()
        .join(",");
    let _replicas: Vec<Running> = specs
        .iter()
        .map(|spec: &ServerSpec| {
            let mut line = spec.command_line();
            let at = line.iter().position(|a| a == "--peers").unwrap();
            line[at + 1] = OsString::from(&by_name);
            Running(
                Command::new(common::binary())
                    .args(line)
                    .stdin(Stdio::null())
                    .stdout(Stdio::null())
                    .stderr(File::create(&spec.log).unwrap())
                    .spawn()
                    .unwrap(),
            )
        })
        .collect();
    let mut a = connect(specs[0].client, Duration::from_secs(20));
    let _: () = redis::cmd("SET")
        .arg("named")
        .arg("yes")
        .query(&mut a)
        .unwrap();
    let mut c = connect(specs[2].client, Duration::from_secs(20));
    let got: String = redis::cmd("GET").arg("named").query(&mut c).unwrap();
    assert_eq!(got, "yes");
}

#[test]
fn a_test_build_shows_its_fault_injection() {
    let cluster = Cluster::start_with(1, "memory", &["--inject-bug", "persist-without-ttl"]);
    let mut con = cluster.connect(0);
    let info: String = redis::cmd("INFO").arg("server").query(&mut con).unwrap();
    assert!(info.contains("fault_injection:compiled-in"), "{info}");
    assert!(info.contains("injected_bugs:persist-without-ttl"), "{info}");
    let (_, body) = logless_harness::probe::http_get(
        cluster.replicas[0].spec.http,
        "/status",
        Duration::from_secs(5),
    )
    .unwrap();
    let status: logless_node::status::NodeStatus = serde_json::from_str(&body).unwrap();
    assert_eq!(
        status.injected_bugs,
        Some(vec!["persist-without-ttl".to_string()])
    );
    let shown = Command::new(common::binary())
        .args(["status", "--http"])
        .arg(cluster.replicas[0].spec.http.to_string())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&shown.stdout);
    assert!(
        text.contains("fault injection; injected bugs: persist-without-ttl"),
        "{text}"
    );
}
