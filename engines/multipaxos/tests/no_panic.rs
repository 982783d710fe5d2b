//! Arbitrary inputs never panic a replica, under FullSS or EpochSS: any message from any node
//! (known or not, in any epoch), interleaved with client requests, the passing of time and
//! restarts from the store. Every
//! output is committed through the store double, whose replay checks the writer's invariants
//! (views never go down, one batch per decided instance, no vote below the log start).
mod arbitrary;

use arbitrary::{message, request};
use logless_multipaxos::config::{Config, Recovery};
use logless_multipaxos::ids::{Epoch, NodeId};
use logless_multipaxos::message::{Message, Request};
use logless_multipaxos::replica::{Replica, Status};
use logless_multipaxos::testing::{History, MemStore};
use proptest::prelude::*;

#[derive(Clone, Debug)]
enum Input {
    Message(u16, u64, Message),
    Request(Request),
    Tick(u64),
    Restart,
}

fn input() -> impl Strategy<Value = Input> {
    prop_oneof![
        6 => (0u16..5, 0u64..4, message()).prop_map(|(from, epoch, m)| Input::Message(from, epoch, m)),
        2 => request().prop_map(Input::Request),
        2 => (0u64..400).prop_map(Input::Tick),
        1 => Just(Input::Restart),
    ]
}

fn config(me: NodeId, snapshots: bool, recovery: Recovery) -> Config {
    let mut config = Config::new(vec![NodeId(1), NodeId(2), NodeId(3)], me);
    config.recovery = recovery;
    config.window_instances = 3;
    config.log_ahead_instances_max = 64;
    if snapshots {
        config.snapshot_log_bytes_min = 40;
        config.snapshot_ratio_percent = 0;
    }
    config
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]
    #[test]
    fn no_input_sequence_panics_a_replica(
        inputs in proptest::collection::vec(input(), 1..100),
        me in 1u16..4,
        snapshots in any::<bool>(),
        mode in 0usize..3,
    ) {
        let me = NodeId(me);
        let recovery = [Recovery::FullSs, Recovery::Epoch, Recovery::Pmem][mode];
        let config = || config(me, snapshots, recovery);
        let mut store = MemStore::default();
        let mut now_ms = 0;
        let mut replica = Replica::new(config(), History::default(), now_ms);
        for input in inputs {
            match input {
                Input::Message(from, epoch, m) => {
                    replica.handle_epoch_message(now_ms, NodeId(from), Epoch(epoch), m);
                }
                Input::Request(r) => replica.handle_request(now_ms, r),
                Input::Tick(ms) => {
                    now_ms += ms;
                    // A resumed mPaxos replica gets its rebuilt machine at its first tick: the
                    // inputs before it reach it while it rebuilds.
                    if replica.status() == Status::Rebuilding {
                        replica.rebuild_now(History::default(), now_ms);
                    }
                    replica.tick(now_ms);
                }
                Input::Restart => {
                    store.crash();
                    replica = match recovery {
                        Recovery::FullSs => {
                            let durable = store.durable().clone();
                            Replica::recover(config(), History::default(), &durable, now_ms)
                        }
                        Recovery::Epoch => {
                            Replica::start_epoch(config(), History::default(), store.epoch(), now_ms)
                        }
                        Recovery::Pmem => {
                            let durable = store.durable().clone();
                            Replica::resume(config(), History::default(), &durable, now_ms)
                        }
                    };
                }
            }
            let Ok(_) = replica.take_ready().commit(&mut store);
        }
    }
}
