//! Authenticated peers on real processes: a stranger on a raw socket who forges a hello and
//! protocol frames changes no value and does not make a real peer count as crashed, while the
//! same frames behind a hello that proves the secret do change a value (so the test can fail);
//! clusters of the log and psmr engines refuse the same strangers; and two clusters that reuse
//! node ids refuse each other.
mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::{metric, Cluster, ServerSpec};
use logless_commands::value::{Data, Register};
use logless_node::hello::{self, Hello, Side, CHALLENGE_BYTES, NONCE_BYTES};
use logless_node::status::NodeStatus;
use logless_rmw::ids::{AttemptId, Key, NodeId, ProposerId, ReqId, Round};
use logless_rmw::message::Message;
use logless_rmw::placement::StageId;
use logless_rmw::wire::encode_frame;
use redis::Commands;

const SECRET: &str = "correct horse battery staple, 2026";

fn write_secret(dir: &Path, name: &str, secret: &str) -> String {
    let path = dir.join(name);
    std::fs::write(&path, format!("{secret}\n")).unwrap();
    path.to_str().unwrap().to_string()
}

/// Three replicas of cluster `cluster_id` with the secret in `secret_file`, holding
/// `kept = safe`.
fn secured_cluster(cluster_id: &str, secret_file: &str) -> Cluster {
    let args = [
        "--cluster-id",
        cluster_id,
        "--cluster-secret-file",
        secret_file,
    ];
    let cluster = Cluster::start_with(3, "mmap", &args);
    let _: () = cluster.connect(0).set("kept", "safe").unwrap();
    cluster
}

fn status(addr: SocketAddr) -> NodeStatus {
    let (_, body) =
        logless_harness::probe::http_get(addr, "/status", Duration::from_secs(5)).unwrap();
    serde_json::from_str(&body).unwrap()
}

/// A VOTE in a round no proposer will reach for a while, as node `from` would send it.
fn forged_vote(key: &str, value: &str, from: u16) -> Message {
    let attempt = AttemptId {
        proposer: ProposerId {
            node: NodeId(from),
            incarnation: 999,
        },
        seq: 1,
    };
    Message::Vote {
        key: Key::new(Bytes::from(key.to_string())),
        round: Round {
            n: 1_000_000,
            id: attempt,
        },
        value: Arc::new(Register {
            data: Data::Str(Bytes::from(value.to_string())),
            ..Register::default()
        }),
        req_cur: ReqId::new(attempt),
        req_prev: None,
        stage: StageId::NONE,
    }
}

/// A PAXOS_PREP in that round: an acceptor that took it would refuse every real proposer's
/// rounds below it.
fn forged_prepare(key: &str, from: u16) -> Message {
    Message::PaxosPrep {
        key: Key::new(Bytes::from(key.to_string())),
        round: Round {
            n: 2_000_000,
            id: AttemptId {
                proposer: ProposerId {
                    node: NodeId(from),
                    incarnation: 999,
                },
                seq: 2,
            },
        },
        known_voted: Round::default(),
        stage: StageId::NONE,
    }
}

/// Dials `target` as node `from` of cluster `cluster_id` with `secret`, in the life of `from`
/// that the target knows, answers whatever challenge comes (with a proof under `secret`,
/// which the acceptor checks), then sends `messages` in a frame. Returns whether a challenge
/// came back.
fn forge(
    target: &ServerSpec,
    to: u16,
    from: u16,
    cluster_id: &str,
    secret: &str,
    messages: &[Message],
) -> bool {
    let mut s = TcpStream::connect(target.peer).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
    let (incarnation, life) = if from == to || from > 3 {
        (1, 0)
    } else {
        common::known_life(&target.dir, from)
    };
    let sent = Hello {
        from: NodeId(from),
        shard: 0,
        shards: 1,
        cluster_id: cluster_id.as_bytes().to_vec(),
        incarnation,
        life,
        nonce: [42; NONCE_BYTES],
    };
    s.write_all(&sent.encode()).unwrap();
    let mut challenge = [0u8; CHALLENGE_BYTES];
    let challenged = s.read_exact(&mut challenge).is_ok();
    let auth = hello::ClusterAuth {
        cluster_id: cluster_id.to_string(),
        secret: secret.as_bytes().to_vec(),
    };
    let answer = match hello::decode_challenge(&challenge) {
        Ok((nonce, _)) if challenged => {
            hello::prove(&auth, Side::Dialler, &sent, NodeId(to), &nonce)
        }
        _ => [0; 32],
    };
    let mut frame = Vec::new();
    encode_frame(NodeId(from), messages, &mut frame);
    // Whether the acceptor is still listening or not, the stranger sends everything.
    let _ = s.write_all(&answer);
    let _ = s.write_all(&frame);
    // Give the acceptor time to act on it, or to close.
    let mut rest = [0u8; 64];
    let _ = s.read(&mut rest);
    challenged
}

#[test]
fn forged_hellos_and_frames_change_nothing_and_break_no_real_link() {
    let secrets = tempfile::tempdir().unwrap();
    let secret_file = write_secret(secrets.path(), "secret", SECRET);
    let cluster = secured_cluster("alpha", &secret_file);
    // Strangers go for nodes 1 and 2: votes from a quorum would choose their value.
    let targets = [&cluster.replicas[0].spec, &cluster.replicas[1].spec];
    let figures =
        |name: &str| -> Vec<u64> { targets.iter().map(|t| metric(t.http, name)).collect() };
    let breaks = figures("logless_peer_link_breaks_total");
    let rejected = figures("logless_peer_connections_rejected_total");
    let frames = [
        forged_vote("kept", "forged", 3),
        forged_vote("victim", "forged", 3),
        forged_prepare("kept", 3),
    ];
    // Another cluster's id, a node id the cluster does not have, the node's own id: refused at
    // the hello, no challenge. The right cluster id with a wrong secret, or none: challenged,
    // then refused at the answer.
    for (to, target) in (1..).zip(targets) {
        for (from, cluster_id, secret, challenged) in [
            (3, "beta", SECRET, false),
            (9, "alpha", SECRET, false),
            (to, "alpha", SECRET, false),
            (3, "alpha", "a guess that is long enough", true),
            (3, "alpha", "", true),
        ] {
            for _ in 0..5 {
                assert_eq!(
                    forge(target, to, from, cluster_id, secret, &frames),
                    challenged,
                    "node {from} of {cluster_id} to node {to}"
                );
            }
        }
    }
    assert_eq!(
        figures("logless_peer_link_breaks_total"),
        breaks,
        "no stranger made a real peer count as crashed"
    );
    let refused: Vec<u64> = rejected.iter().map(|r| r + 25).collect();
    assert_eq!(figures("logless_peer_connections_rejected_total"), refused);
    for i in 0..3 {
        let mut con = cluster.connect(i);
        assert_eq!(con.get::<_, String>("kept").unwrap(), "safe");
        assert_eq!(con.get::<_, Option<String>>("victim").unwrap(), None);
        let _: () = con.set(format!("after-{i}"), i).unwrap();
    }
    assert!(status(targets[0].http).links.iter().all(|l| l.up));

    // The control: the same votes behind hellos that prove the secret are taken by nodes 1
    // and 2, a quorum, so their value is chosen; and each new connection reports node 3's
    // earlier link broken. Without the secret check the strangers above would have done this.
    for (to, target) in (1..).zip(targets) {
        assert!(forge(
            target,
            to,
            3,
            "alpha",
            SECRET,
            &[forged_vote("victim", "forged", 3)]
        ));
    }
    let after = figures("logless_peer_link_breaks_total");
    assert!(after[0] > breaks[0] && after[1] > breaks[1], "{after:?}");
    let mut con = cluster.connect(0);
    assert_eq!(
        con.get::<_, Option<String>>("victim").unwrap().as_deref(),
        Some("forged"),
        "votes behind a proven hello count"
    );
}

/// The hello is the peer transport's, shared by every engine (`node/src/peer.rs`, generic over
/// the engine's codec): a cluster of the log engine or of the psmr engine refuses the same
/// strangers before any of their frames reaches the engine, and counts each refusal.
#[test]
fn strangers_are_refused_by_the_log_and_psmr_engines_too() {
    let secrets = tempfile::tempdir().unwrap();
    let secret_file = write_secret(secrets.path(), "secret", SECRET);
    for engine in [
        &["--engine", "multipaxos"][..],
        &["--engine", "psmr", "--threads", "2"],
    ] {
        let mut args = vec![
            "--cluster-id",
            "alpha",
            "--cluster-secret-file",
            &secret_file,
        ];
        args.extend_from_slice(engine);
        let cluster = Cluster::start_with(3, "mmap", &args);
        // NX: the psmr engine's B+-tree service takes no plain SET.
        let _: () = redis::cmd("SET")
            .arg(&["kept", "safe", "NX"])
            .query(&mut cluster.connect(0))
            .unwrap();
        let target = &cluster.replicas[0].spec;
        let rejected = metric(target.http, "logless_peer_connections_rejected_total");
        for (from, cluster_id, secret, challenged) in [
            (3, "beta", SECRET, false),
            (9, "alpha", SECRET, false),
            (1, "alpha", SECRET, false),
            (3, "alpha", "a guess that is long enough", true),
            (3, "alpha", "", true),
        ] {
            assert_eq!(
                forge(
                    target,
                    1,
                    from,
                    cluster_id,
                    secret,
                    &[forged_vote("kept", "forged", 3)]
                ),
                challenged,
                "{engine:?}: node {from} of {cluster_id}"
            );
        }
        assert_eq!(
            metric(target.http, "logless_peer_connections_rejected_total"),
            rejected + 5,
            "{engine:?}"
        );
        assert!(status(target.http).links.iter().all(|l| l.up), "{engine:?}");
        for i in 0..3 {
            let got: String = cluster.connect(i).get("kept").unwrap();
            assert_eq!(got, "safe", "{engine:?}");
        }
    }
}

/// Waits until `check` holds, for at most `within`.
fn eventually(within: Duration, what: &str, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + within;
    while !check() {
        assert!(Instant::now() < deadline, "{what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn clusters_that_reuse_node_ids_refuse_each_other() {
    let secrets = tempfile::tempdir().unwrap();
    let ours = write_secret(secrets.path(), "ours", SECRET);
    let theirs = write_secret(secrets.path(), "theirs", "another cluster's secret words");
    let mut cluster = secured_cluster("shared-name", &ours);
    // Node 3 of another cluster, with the same id and the same cluster name but its own
    // secret, takes node 3's place: same ports, its own empty data directory.
    cluster.kill(2);
    let real = cluster.replicas[2].spec.clone();
    let stranger_dir = tempfile::tempdir().unwrap();
    let stranger = logless_harness::server::ServerSpec {
        dir: stranger_dir.path().join("node-3"),
        log: stranger_dir.path().join("node-3.log"),
        extra: Vec::new(),
        ..real.clone()
    }
    .args([
        "--cluster-id",
        "shared-name",
        "--cluster-secret-file",
        &theirs,
    ]);
    cluster.replicas[2].spec = stranger;
    cluster.spawn(2);
    let (first, third) = (cluster.replicas[0].spec.http, real.http);
    eventually(Duration::from_secs(10), "the stranger serves HTTP", || {
        logless_harness::probe::http_get(third, "/status", Duration::from_secs(1)).is_ok()
    });
    let rejected = metric(first, "logless_peer_connections_rejected_total");
    // Each side redials with backoff and is refused by the other every time.
    let refused = || {
        metric(first, "logless_peer_connections_rejected_total") >= rejected + 2
            && metric(third, "logless_peer_connections_rejected_total") >= 2
    };
    // Node 1 redials node 3 when a write to it fails: writes through node 1 make it try.
    let mut poke = cluster.connect(0);
    let deadline = Instant::now() + Duration::from_secs(10);
    while !refused() {
        let _: () = poke.set("poke", 1).unwrap();
        assert!(
            Instant::now() < deadline,
            "the stranger is refused again; its log:\n{}\nnode 1's log:\n{}",
            cluster.log_tail(2),
            cluster.log_tail(0)
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let s = status(third);
    assert!(s.links.iter().all(|l| !l.up), "{:?}", s.links);
    let s = status(first);
    assert!(
        s.links.iter().all(|l| l.up == (l.peer == 2)),
        "{:?}",
        s.links
    );
    // The cluster serves with its two real replicas, and the stranger cannot serve at all.
    let mut con = cluster.connect(1);
    assert_eq!(con.get::<_, String>("kept").unwrap(), "safe");
    let _: () = con.set("still", "serving").unwrap();
    let mut lonely = cluster.connect(2);
    let refused: redis::RedisResult<Option<String>> = lonely.get("kept");
    assert!(refused.is_err(), "{refused:?}");

    // The control: the real node 3 back in its place is let in, links up.
    cluster.kill(2);
    cluster.replicas[2].spec = real;
    cluster.spawn(2);
    eventually(Duration::from_secs(20), "the real node 3 links up", || {
        logless_harness::probe::http_get(third, "/status", Duration::from_secs(1)).is_ok_and(
            |(_, body)| {
                serde_json::from_str::<NodeStatus>(&body)
                    .is_ok_and(|s| s.links.iter().all(|l| l.up))
            },
        )
    });
    assert_eq!(
        cluster.connect(2).get::<_, String>("still").unwrap(),
        "serving"
    );
}
