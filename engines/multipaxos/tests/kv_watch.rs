//! WATCH under the log engine: the map's stamps ([`Operation::Watch`]) and the transactions
//! checked against them ([`Operation::WatchedTransaction`]), against Redis's documented
//! behaviour (redis.io/docs/latest/develop/interact/transactions: EXEC answers a null array if a
//! watched key was modified, by any client or by expiry, between WATCH and EXEC), and the same
//! decision on every replica, whatever snapshot it restored.
mod kv_ops;

use bytes::Bytes;
use logless_commands::command::{Command, ExpireArgs, ExpireFlags, ExpireKind, Expiry};
use logless_multipaxos::ids::{ClientId, Instance, RequestSeq};
use logless_multipaxos::kv::versions::VERSIONS_MAX;
use logless_multipaxos::kv::{Operation, RegisterMachine, Response};
use logless_multipaxos::message::Request;
use logless_multipaxos::state_machine::StateMachine;

use kv_ops::{b, cmd, machine, set, set_with, T0};

/// WATCH of `keys`: their stamps.
fn watch(m: &mut RegisterMachine, keys: &[&str]) -> Vec<(Bytes, u64)> {
    let Response::Items(items) = m.apply(Operation::Watch(keys.iter().map(|k| b(k)).collect()))
    else {
        panic!("WATCH answers one stamp per key");
    };
    keys.iter()
        .zip(items)
        .map(|(key, item)| match item {
            Response::Int(stamp) => (b(key), stamp as u64),
            other => panic!("a stamp, not {other:?}"),
        })
        .collect()
}

/// EXEC after WATCH of a transaction that increments `counter`.
fn exec_incr(watched: &[(Bytes, u64)], counter: &str) -> Operation {
    Operation::WatchedTransaction {
        watched: watched.to_vec(),
        operations: vec![cmd(counter, Command::IncrBy(1))],
    }
}

fn committed() -> Response {
    Response::Items(vec![Response::Int(1)])
}

#[test]
fn exec_runs_if_no_watched_key_changed() {
    let mut m = machine();
    m.apply(set("a", "1"));
    let watched = watch(&mut m, &["a", "missing"]);
    // Reads and writes of other keys change nothing watched.
    m.apply(cmd("a", Command::Get));
    m.apply(set("other", "x"));
    assert_eq!(m.apply(exec_incr(&watched, "n")), committed());
    assert_eq!(m.apply(cmd("n", Command::Get)), Response::Bulk(b("1")));
    // An empty transaction after WATCH answers an empty array.
    let watched = watch(&mut m, &["a"]);
    let empty = Operation::WatchedTransaction {
        watched,
        operations: Vec::new(),
    };
    assert_eq!(m.apply(empty), Response::Items(Vec::new()));
}

#[test]
fn exec_after_any_change_of_a_watched_key_runs_nothing() {
    let changes: Vec<(&str, Vec<Operation>)> = vec![
        ("SET", vec![set("a", "2")]),
        ("SET of the same value", vec![set("a", "1")]),
        ("DEL", vec![cmd("a", Command::Del)]),
        (
            "DEL and SET back",
            vec![cmd("a", Command::Del), set("a", "1")],
        ),
        (
            "EXPIRE",
            vec![cmd(
                "a",
                Command::Expire(ExpireArgs {
                    kind: ExpireKind::Expire,
                    time: 100,
                    flags: ExpireFlags::default(),
                }),
            )],
        ),
        (
            "MSET",
            vec![Operation::MSet(vec![(b("z"), b("1")), (b("a"), b("3"))])],
        ),
        (
            "RENAME onto it",
            vec![
                set("s", "x"),
                Operation::Rename {
                    from: b("s"),
                    to: b("a"),
                },
            ],
        ),
        (
            "RENAME away",
            vec![Operation::Rename {
                from: b("a"),
                to: b("t"),
            }],
        ),
        (
            "COPY onto it",
            vec![
                set("s", "1"),
                Operation::Copy {
                    from: b("s"),
                    to: b("a"),
                    replace: true,
                },
            ],
        ),
        (
            "a transaction",
            vec![Operation::Transaction(vec![
                set("z", "1"),
                cmd("a", Command::IncrBy(1)),
            ])],
        ),
        ("a creation of the absent key", vec![set("absent", "1")]),
    ];
    for (what, change) in changes {
        let mut m = machine();
        m.apply(set("a", "1"));
        let watched = watch(&mut m, &["b", "a", "absent"]);
        for op in change {
            m.apply(op);
        }
        assert_eq!(
            m.apply(exec_incr(&watched, "n")),
            Response::NilArray,
            "after {what}"
        );
        assert_eq!(
            m.apply(cmd("n", Command::Get)),
            Response::Nil,
            "after {what}"
        );
    }
}

#[test]
fn a_write_that_changes_nothing_is_no_change() {
    let mut m = machine();
    m.apply(cmd("s", Command::SAdd(vec![b("x")])));
    let watched = watch(&mut m, &["s"]);
    // SADD of a member already there, DEL of a missing key: nothing changed.
    m.apply(cmd("s", Command::SAdd(vec![b("x")])));
    m.apply(cmd("missing", Command::Del));
    assert_eq!(m.apply(exec_incr(&watched, "n")), committed());
    m.apply(cmd("s", Command::SAdd(vec![b("y")])));
    assert_eq!(m.apply(exec_incr(&watched, "n")), Response::NilArray);
}

#[test]
fn a_watched_key_that_expires_before_exec_aborts_it() {
    let mut m = machine();
    m.apply(set_with("a", "1", Expiry::AfterMs(50)));
    m.apply(set_with("gone", "1", Expiry::AfterMs(10)));
    m.begin_batch(Instance(2), T0 + 20);
    // "gone" has expired already: absent at WATCH and at EXEC, whether swept or not.
    let watched = watch(&mut m, &["a", "gone"]);
    m.begin_batch(Instance(3), T0 + 40);
    assert_eq!(m.apply(exec_incr(&watched, "n")), committed());
    m.begin_batch(Instance(4), T0 + 60);
    // "a" expired in between: as if deleted.
    assert_eq!(m.apply(exec_incr(&watched, "n")), Response::NilArray);
}

#[test]
fn watch_and_watched_transactions_do_not_nest() {
    let mut m = machine();
    let nested = Operation::Transaction(vec![
        Operation::Watch(vec![b("a")]),
        Operation::WatchedTransaction {
            watched: Vec::new(),
            operations: Vec::new(),
        },
        set("a", "1"),
    ]);
    let Response::Items(items) = m.apply(nested) else {
        panic!("a transaction answers items");
    };
    assert!(matches!(&items[0], Response::Error(t) if t.contains("nested")));
    assert!(matches!(&items[1], Response::Error(t) if t.contains("nested")));
    assert_eq!(items[2], Response::Ok);
    // Nor do they decode nested.
    let payload = Operation::Transaction(vec![Operation::Watch(vec![b("a")])]).encode();
    assert!(Operation::decode(&payload).is_err());
}

#[test]
fn watch_operations_round_trip_their_encoding() {
    for op in [
        Operation::Watch(vec![b("a"), b("b")]),
        Operation::WatchedTransaction {
            watched: vec![(b("a"), 7), (b("b"), u64::MAX)],
            operations: vec![set("a", "1"), Operation::MGet(vec![b("a"), b("b")])],
        },
    ] {
        assert_eq!(Operation::decode(&op.encode()), Ok(op.clone()));
        let bytes = op.encode();
        for cut in 1..bytes.len() {
            assert!(
                Operation::decode(&bytes[..cut]).is_err(),
                "{op:?} cut at {cut}"
            );
        }
    }
}

/// One replica: a map fed requests in batches.
struct Replica {
    map: RegisterMachine,
    responses: Vec<Response>,
}

impl Replica {
    fn run(&mut self, batch: &Batch) {
        self.map.begin_batch(batch.instance, batch.stamp_ms);
        for (i, op) in batch.operations.iter().enumerate() {
            let request = Request {
                client: ClientId(1),
                seq: RequestSeq(batch.instance.0 * 1000 + i as u64),
                payload: op.encode(),
            };
            let response = Response::decode(&self.map.execute(&request)).expect("a response");
            self.responses.push(response);
        }
    }
}

struct Batch {
    instance: Instance,
    stamp_ms: u64,
    operations: Vec<Operation>,
}

#[test]
fn every_replica_decides_a_watched_exec_alike_whatever_snapshot_it_restored() {
    // A log: keys set with and without expiry, WATCHes, then enough other keys watched and
    // changed to make the versions forget some, then the EXECs, each checked against stamps a replica
    // gave at WATCH. The stamps come from replica 0, as a client gets them from the replica
    // it is connected to; the other replicas restored a snapshot somewhere in the log.
    let mut log: Vec<Batch> = Vec::new();
    let mut instance = 0;
    let mut batch = |operations: Vec<Operation>, stamp_ms: u64| {
        instance += 1;
        Batch {
            instance: Instance(instance),
            stamp_ms,
            operations,
        }
    };
    log.push(batch(
        vec![
            set("a", "1"),
            set_with("e", "1", Expiry::AfterMs(500)),
            set("c", "1"),
        ],
        T0,
    ));
    log.push(batch(
        vec![Operation::Watch(vec![b("a"), b("e"), b("c"), b("x")])],
        T0 + 1,
    ));
    log.push(batch(vec![set("c", "2")], T0 + 2));
    // Many other keys change and are watched: more than the versions keep.
    let others: Vec<Operation> = (0..VERSIONS_MAX + 100)
        .flat_map(|i| {
            let key = format!("other{i}");
            [set(&key, "v"), Operation::Watch(vec![b(&key)])]
        })
        .collect();
    for (i, chunk) in others.chunks(4096).enumerate() {
        log.push(batch(chunk.to_vec(), T0 + 3 + i as u64));
    }
    log.push(batch(
        vec![Operation::Watch(vec![b("a"), b("x")])],
        T0 + 100,
    ));
    let last_watch = log.len() - 1;
    log.push(batch(vec![set("other0", "w")], T0 + 101));
    log.push(batch(vec![Operation::Watch(vec![b("e")])], T0 + 102));
    log.push(batch(vec![set("other1", "w")], T0 + 1000));

    // Replica 0 runs the log from the start and gives the stamps.
    let mut first = Replica {
        map: RegisterMachine::default(),
        responses: Vec::new(),
    };
    let mut snapshots = Vec::new();
    for (i, batch) in log.iter().enumerate() {
        first.run(batch);
        snapshots.push((i, first.map.snapshot(), first.responses.len()));
    }
    let stamps: Vec<Vec<(Bytes, u64)>> = log
        .iter()
        .scan(0, |at, batch| {
            let start = *at;
            *at += batch.operations.len();
            Some((start, batch))
        })
        .filter_map(|(start, batch)| match &batch.operations[0] {
            Operation::Watch(keys) => {
                let Response::Items(items) = &first.responses[start] else {
                    panic!("WATCH answers items");
                };
                Some(
                    keys.iter()
                        .cloned()
                        .zip(items.iter().map(|item| match item {
                            Response::Int(s) => *s as u64,
                            other => panic!("a stamp, not {other:?}"),
                        }))
                        .collect(),
                )
            }
            _ => None,
        })
        .collect();
    assert_eq!(stamps.len(), 3);
    // The EXECs: after the first WATCH, "c" changed; after the second, nothing it watched
    // changed; after the third, "e" expired.
    let execs = batch(
        stamps
            .iter()
            .map(|watched| exec_incr(watched, "n"))
            .collect(),
        T0 + 1001,
    );
    first.run(&execs);
    let decisions = &first.responses[first.responses.len() - 3..];
    assert_eq!(
        decisions,
        [Response::NilArray, committed(), Response::NilArray],
        "replica 0's decisions"
    );
    let state = first.map.snapshot();

    // Every other replica restored replica 0's snapshot after some batch, then ran the rest:
    // before the WATCHes, between them, after the last one.
    for restored_after in [0, 2, last_watch, log.len() - 1] {
        let (_, snapshot, _) = &snapshots[restored_after];
        let mut replica = Replica {
            map: RegisterMachine::default(),
            responses: Vec::new(),
        };
        replica.map.restore(snapshot);
        for batch in &log[restored_after + 1..] {
            replica.run(batch);
        }
        replica.run(&execs);
        let theirs = &replica.responses[replica.responses.len() - 3..];
        assert_eq!(theirs, decisions, "restored after batch {restored_after}");
        assert_eq!(
            replica.map.snapshot(),
            state,
            "restored after batch {restored_after}"
        );
    }
}
