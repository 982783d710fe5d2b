//! The log engine's core under `--recovery epoch` without a runtime: the epoch written before
//! anything leaves, client operations refused while the replica recovers and for good once
//! the state is lost, and the settings that ask for EpochSS checked.
use bytes::Bytes;
use logless_multipaxos::config::{Config, Recovery};
use logless_multipaxos::ids::{Epoch, NodeId};
use logless_multipaxos::kv::{Command, Operation, RegisterMachine, Response};
use logless_multipaxos::message::Message;
use logless_node::config::{Engine, NodeConfig, PeerConfig, Recovery as RecoveryMode};
use logless_node::durable_log::DurableLog;
use logless_node::epoch_file::EpochFile;
use logless_node::log_turn::{LogAnswer, LogCore, LogOutlet, RECOVERING_ERROR, STATE_LOST_ERROR};
use logless_storage::{Durability, SegmentLogOptions, SimDir};

#[derive(Default)]
struct Collected {
    sent: Vec<(NodeId, Vec<Message>)>,
    answers: Vec<(u32, LogAnswer)>,
}

impl LogOutlet<u32> for Collected {
    fn send(&mut self, to: NodeId, messages: Vec<Message>) {
        self.sent.push((to, messages));
    }

    fn answer(&mut self, reply: u32, answer: LogAnswer) {
        self.answers.push((reply, answer));
    }

    fn mono_us(&self) -> u64 {
        0
    }
}

fn incr() -> Operation {
    Operation::Command {
        key: Bytes::from_static(b"n"),
        command: Command::IncrBy(1),
    }
}

/// Replica 1 of three under EpochSS, started after `last` from the epoch file in `dir`.
fn core_in(dir: &std::path::Path) -> LogCore<u32, SimDir> {
    let (file, last) = EpochFile::open(dir).unwrap();
    let opened =
        DurableLog::open_on(SimDir::new(), SegmentLogOptions::new(Durability::Sync)).unwrap();
    let mut config = Config::new(vec![NodeId(1), NodeId(2), NodeId(3)], NodeId(1));
    config.recovery = Recovery::Epoch;
    LogCore::start_epoch(
        config,
        RegisterMachine::default(),
        last,
        opened.log.with_epoch_file(file),
        1,
        5_000,
        1_000_000,
        0,
    )
}

#[test]
fn a_restart_raises_the_epoch_before_sending_and_refuses_clients_until_it_recovered() {
    let dir = tempfile::tempdir().unwrap();
    let mut first = core_in(dir.path());
    let mut out = Collected::default();
    first.finish_turn(&mut out).unwrap();
    assert_eq!(first.epoch(), Epoch(1));
    assert_eq!(EpochFile::open(dir.path()).unwrap().1, Some(Epoch(1)));
    assert_eq!(
        first.status().state,
        "serving",
        "a first start has nothing to recover"
    );
    drop(first);

    // The restart: epoch 2 is on disk by the time its Recovery messages leave.
    let mut core = core_in(dir.path());
    let mut out = Collected::default();
    core.submit(&incr(), 7);
    core.finish_turn(&mut out).unwrap();
    assert_eq!(core.epoch(), Epoch(2));
    assert_eq!(EpochFile::open(dir.path()).unwrap().1, Some(Epoch(2)));
    let recoveries: Vec<NodeId> = out
        .sent
        .iter()
        .filter(|(_, m)| m.contains(&Message::Recovery { epoch: Epoch(2) }))
        .map(|(to, _)| *to)
        .collect();
    assert_eq!(recoveries, [NodeId(2), NodeId(3)]);
    assert_eq!(
        out.answers,
        [(7, Ok(Response::error(RECOVERING_ERROR.to_owned())))]
    );
    let status = core.status();
    assert_eq!((status.state.as_str(), status.epoch), ("recovering", 2));
    assert!(!status.serves());

    // The two others restarted too: nobody kept the state, and the cluster refuses service.
    let mut out = Collected::default();
    for peer in [NodeId(2), NodeId(3)] {
        let recovery = Message::Recovery { epoch: Epoch(5) };
        core.receive_in_epochs(peer, vec![(Epoch(5), recovery)]);
    }
    core.submit(&incr(), 8);
    core.finish_turn(&mut out).unwrap();
    assert_eq!(
        out.answers,
        [(8, Ok(Response::error(STATE_LOST_ERROR.to_owned())))]
    );
    assert_eq!(core.status().state, "state_lost");
    assert!(STATE_LOST_ERROR.starts_with("CLUSTERDOWN state lost"));
    assert!(RECOVERING_ERROR.starts_with("LOADING "));
}

#[test]
fn epoch_recovery_is_the_log_engines_on_a_cluster_with_peers() {
    let peers = |n: u16| {
        (1..=n)
            .map(|id| PeerConfig {
                id,
                addr: format!("127.0.0.1:{}", 8000 + id),
                client_addr: None,
            })
            .collect()
    };
    let config = |engine, n| NodeConfig {
        node_id: 1,
        peers: peers(n),
        engine,
        recovery: RecoveryMode::Epoch,
        ..NodeConfig::default()
    };
    config(Engine::Multipaxos, 3).validate().unwrap();
    let error = |engine, n| config(engine, n).validate().unwrap_err().to_string();
    assert!(error(Engine::Rmw, 3).contains("is the multipaxos engine's"));
    assert!(error(Engine::Psmr, 3).contains("give --engine multipaxos"));
    assert!(error(Engine::Multipaxos, 1).contains("a cluster of 1 has none"));
    assert_eq!("epoch".parse(), Ok(RecoveryMode::Epoch));
    assert_eq!("fullss".parse(), Ok(RecoveryMode::Fullss));
    assert_eq!("pmem".parse(), Ok(RecoveryMode::Pmem));
    assert_eq!("pmem-sm".parse(), Ok(RecoveryMode::PmemSm));
    let unknown = "pmem-sx".parse::<RecoveryMode>().unwrap_err();
    assert!(
        unknown.contains("fullss, epoch, pmem or pmem-sm"),
        "{unknown}"
    );
    let from_file: NodeConfig = toml::from_str("recovery = \"epoch\"").unwrap();
    assert_eq!(from_file.recovery, RecoveryMode::Epoch);
    assert_eq!(NodeConfig::default().recovery, RecoveryMode::Fullss);
}
