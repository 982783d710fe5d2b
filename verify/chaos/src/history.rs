//! The recorded history: one entry per client operation, written as the checker's JSON lines
//! (`verify/checker/README.md`), and the run's clocks.
//!
//! Operations on keys with times to live (expiring registers and locks) carry the window their
//! replica's stamp lies in (`stamp_lo`, `stamp_hi`), read from the wall clock the replicas
//! stamp with (see [`crate::stamps`]). The window of such an operation of unknown outcome ends
//! at its key's last return, which is known only at the end: those lines are held back and
//! written by [`History::finish`].
use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use serde_json::{json, Value};

use crate::client::Reply;
use crate::stamps::StampWindow;
use crate::workload::KeyKind;

/// The wall clock in whole milliseconds since the Unix epoch, as a replica reads it to stamp a
/// command (`node/src/shard.rs`: `as_millis`, rounded down).
pub fn unix_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// The run's two clocks: nanoseconds since the run started on one monotonic clock, shared by
/// history and faults (the checker's `call` and `return`); and the wall clock the replicas
/// stamp commands with, in ms relative to `epoch_ms` (the stamp windows).
#[derive(Clone, Copy, Debug)]
pub struct Clock {
    start: Instant,
    epoch_ms: i64,
}

impl Clock {
    /// A clock that reads 0 now, on both scales.
    pub fn start() -> Clock {
        Clock {
            start: Instant::now(),
            epoch_ms: unix_ms(),
        }
    }

    /// Nanoseconds since the start.
    pub fn now(&self) -> u64 {
        u64::try_from(self.start.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }

    /// The wall clock (Unix ms) when the run started: the time base of the stamp windows is
    /// the wall clock less this.
    pub fn epoch_ms(&self) -> i64 {
        self.epoch_ms
    }

    /// The wall clock now, in whole ms since [`Clock::epoch_ms`] (negative if the wall clock
    /// stepped back past it).
    pub fn wall_ms(&self) -> i64 {
        unix_ms() - self.epoch_ms
    }
}

/// A reply as the checker models it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Output {
    /// `+OK`.
    Ok,
    /// A nil bulk string or array.
    Nil,
    /// An integer.
    Int(i64),
    /// A bulk string.
    Bulk(String),
    /// An array of strings, in the order the server sent them (SMEMBERS's sorted, as the
    /// model's sets are).
    Array(Vec<String>),
    /// A transaction's replies, one per queued command (EXEC).
    Items(Vec<Output>),
    /// An error reply the model knows (WRONGTYPE, ERR not an integer, ...).
    Error(String),
}

/// What became of an operation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// A reply arrived.
    Ok(Output),
    /// The store said it was definitely not applied (`TRYAGAIN`).
    Fail,
    /// No reply, a lost connection, or `UNCERTAIN`: it may or may not have taken effect.
    Unknown,
}

/// How the runner classifies a reply.
pub fn classify(reply: &Reply) -> Result<Outcome, String> {
    match reply {
        Reply::Error(e) if e.starts_with("TRYAGAIN") => Ok(Outcome::Fail),
        Reply::Error(e) if e.starts_with("UNCERTAIN") => Ok(Outcome::Unknown),
        _ => output(reply).map(Outcome::Ok),
    }
}

/// How the runner classifies EXEC's reply: each queued command's reply in its place.
pub fn classify_exec(reply: &Reply) -> Result<Outcome, String> {
    match reply {
        Reply::Array(items) => {
            let items = items.iter().map(output).collect::<Result<_, _>>()?;
            Ok(Outcome::Ok(Output::Items(items)))
        }
        other => match classify(other)? {
            Outcome::Ok(o) => Err(format!("EXEC answered {o:?}")),
            outcome => Ok(outcome),
        },
    }
}

/// A reply as the model's output.
fn output(reply: &Reply) -> Result<Output, String> {
    Ok(match reply {
        Reply::Simple(s) if s == "OK" => Output::Ok,
        Reply::Simple(s) => Output::Bulk(s.clone()),
        Reply::Nil => Output::Nil,
        Reply::Int(n) => Output::Int(*n),
        Reply::Bulk(s) => Output::Bulk(s.clone()),
        Reply::Array(items) => {
            let mut members = Vec::with_capacity(items.len());
            for item in items {
                match item {
                    Reply::Bulk(s) | Reply::Simple(s) => members.push(s.clone()),
                    other => return Err(format!("array element {other:?}")),
                }
            }
            Output::Array(members)
        }
        Reply::Error(e) => {
            let word = e.split(' ').next().unwrap_or_default();
            match word {
                "WRONGTYPE" => Output::Error(e.clone()),
                "ERR" if e.contains("not an integer") || e.contains("overflow") => {
                    Output::Error(e.clone())
                }
                _ => return Err(format!("unexpected error reply {e:?}")),
            }
        }
    })
}

impl Output {
    /// The output in the checker's format.
    fn to_json(&self) -> Value {
        match self {
            Output::Ok => json!({"type": "ok"}),
            Output::Nil => json!({"type": "nil"}),
            Output::Int(n) => json!({"type": "int", "value": n}),
            Output::Bulk(s) => json!({"type": "bulk", "value": s}),
            Output::Array(a) => json!({"type": "array", "value": a}),
            Output::Items(items) => {
                json!({"type": "items", "value": items.iter().map(Output::to_json).collect::<Vec<_>>()})
            }
            Output::Error(e) => json!({"type": "error", "value": e}),
        }
    }
}

/// One operation of one client.
#[derive(Clone, Debug)]
pub struct Op {
    /// The client id (one operation in flight per id).
    pub client: u64,
    /// The command, key at index 1; `["MULTI", key]` for a transaction.
    pub cmd: Vec<String>,
    /// A transaction's commands, all on the key (empty for any other command).
    pub queued: Vec<Vec<String>>,
    /// When it was sent.
    pub call: u64,
    /// When its reply arrived, or when the client gave up.
    pub ret: u64,
    /// What became of it.
    pub outcome: Outcome,
    /// True for the final reads after the faults.
    pub final_read: bool,
    /// What is known of the replica's stamp, for keys with times to live (none for the others,
    /// whose commands do not look at the clock).
    pub stamp: Option<StampWindow>,
}

impl Op {
    /// The key.
    pub fn key(&self) -> &str {
        &self.cmd[1]
    }

    /// The command name.
    pub fn name(&self) -> &str {
        &self.cmd[0]
    }

    /// Whether the command only reads.
    pub fn is_read(&self) -> bool {
        matches!(
            self.name(),
            "GET" | "SMEMBERS" | "SCARD" | "SISMEMBER" | "EXISTS" | "TTL" | "PTTL"
        )
    }

    /// The reply, for an `ok` outcome.
    pub fn output(&self) -> Option<&Output> {
        match &self.outcome {
            Outcome::Ok(o) => Some(o),
            _ => None,
        }
    }

    /// The time by which it certainly took effect if it did: its return for `ok`, never for
    /// `unknown` (it may take effect at any time after its call).
    pub fn latest_effect(&self) -> u64 {
        match self.outcome {
            Outcome::Unknown => u64::MAX,
            _ => self.ret,
        }
    }

    /// Whether the command names an absolute instant (SET EXAT/PXAT), which the checker
    /// places on the stamps' time base with `epoch_ms`.
    fn names_an_instant(&self) -> bool {
        self.name() == "SET"
            && self.cmd[2..]
                .iter()
                .any(|a| a.eq_ignore_ascii_case("PXAT") || a.eq_ignore_ascii_case("EXAT"))
    }

    /// The JSON line of the checker's format; `epoch_ms` is the wall clock at time 0 of the
    /// stamp windows ([`Clock::epoch_ms`]), written only where the command names an instant.
    /// A stamp window must have its end by now.
    pub fn to_json(&self, epoch_ms: i64) -> Value {
        let mut line = json!({
            "client": self.client,
            "key": self.key(),
            "cmd": self.cmd,
            "call": self.call,
            "return": self.ret,
            "outcome": match self.outcome {
                Outcome::Ok(_) => "ok",
                Outcome::Fail => "fail",
                Outcome::Unknown => "unknown",
            },
        });
        if let Some(stamp) = &self.stamp {
            let hi_ms = stamp
                .hi_ms
                .expect("a stamp window's end is known when it is written");
            line["stamp_lo"] = json!(stamp.lo_ms * NS_PER_MS);
            line["stamp_hi"] = json!(hi_ms * NS_PER_MS);
        }
        if self.names_an_instant() {
            line["epoch_ms"] = json!(epoch_ms);
        }
        if !self.queued.is_empty() {
            line["queued"] = json!(self.queued);
        }
        if let Outcome::Ok(output) = &self.outcome {
            line["output"] = output.to_json();
        }
        line
    }
}

const NS_PER_MS: i64 = 1_000_000;

/// Operation counts.
#[derive(Clone, Copy, Debug, Default)]
pub struct Counts {
    /// Answered.
    pub ok: usize,
    /// Definitely not applied.
    pub fail: usize,
    /// Outcome unknown.
    pub unknown: usize,
}

impl Counts {
    /// Counts one operation.
    pub fn add(&mut self, outcome: &Outcome) {
        match outcome {
            Outcome::Ok(_) => self.ok += 1,
            Outcome::Fail => self.fail += 1,
            Outcome::Unknown => self.unknown += 1,
        }
    }

    /// All operations.
    pub fn total(&self) -> usize {
        self.ok + self.fail + self.unknown
    }
}

struct Recorder {
    out: BufWriter<File>,
    error: Option<std::io::Error>,
    kept: Vec<Op>,
    workload: Counts,
    final_reads: Counts,
    by_kind: BTreeMap<KeyKind, Counts>,
    epoch_ms: i64,
    /// Operations of unknown outcome with a stamp window, written at the end (their window
    /// ends at their key's last return).
    held_back: Vec<Op>,
    /// The latest end of the stamp window of an answered operation, by key (keys with a time
    /// to live only).
    last_return_ms: HashMap<String, i64>,
}

impl Recorder {
    fn write(&mut self, op: &Op) {
        let line = op.to_json(self.epoch_ms);
        let written = serde_json::to_writer(&mut self.out, &line)
            .map_err(std::io::Error::from)
            .and_then(|()| self.out.write_all(b"\n"));
        if let Err(e) = written {
            self.error.get_or_insert(e);
        }
    }
}

/// The history, shared by every client task: each operation is written to `history.jsonl`
/// as it completes; only the writes and the final reads stay in memory (for the lost-write
/// check), so long runs do not grow the runner with every read.
#[derive(Clone)]
pub struct History {
    recorder: Arc<Mutex<Recorder>>,
}

impl History {
    /// Creates the history file; `epoch_ms` is [`Clock::epoch_ms`].
    pub fn create(path: &Path, epoch_ms: i64) -> std::io::Result<History> {
        Ok(History {
            recorder: Arc::new(Mutex::new(Recorder {
                out: BufWriter::new(File::create(path)?),
                error: None,
                kept: Vec::new(),
                workload: Counts::default(),
                final_reads: Counts::default(),
                by_kind: BTreeMap::new(),
                epoch_ms,
                held_back: Vec::new(),
                last_return_ms: HashMap::new(),
            })),
        })
    }

    /// Records one operation.
    pub fn push(&self, op: Op) {
        let mut r = self.recorder.lock().expect("not poisoned");
        if op.final_read {
            r.final_reads.add(&op.outcome);
        } else {
            r.workload.add(&op.outcome);
            if let Some(kind) = KeyKind::of(op.key()) {
                r.by_kind.entry(kind).or_default().add(&op.outcome);
            }
        }
        match (&op.stamp, &op.outcome) {
            (Some(stamp), Outcome::Ok(_)) => {
                let hi_ms = stamp
                    .hi_ms
                    .expect("an answered operation's window has an end");
                let last = r
                    .last_return_ms
                    .entry(op.key().to_string())
                    .or_insert(hi_ms);
                *last = (*last).max(hi_ms);
            }
            (Some(_), Outcome::Unknown) => {
                if op.final_read || !op.is_read() {
                    r.kept.push(op.clone());
                }
                r.held_back.push(op);
                return;
            }
            _ => {}
        }
        r.write(&op);
        if op.final_read || !op.is_read() {
            r.kept.push(op);
        }
    }

    /// The counts so far: the workload's operations and the final reads.
    pub fn counts(&self) -> (Counts, Counts) {
        let r = self.recorder.lock().expect("not poisoned");
        (r.workload, r.final_reads)
    }

    /// The workload's operations by the kind of their key.
    pub fn counts_by_kind(&self) -> BTreeMap<KeyKind, Counts> {
        self.recorder.lock().expect("not poisoned").by_kind.clone()
    }

    /// Writes the held-back operations, flushes the file and returns the writes and final
    /// reads, ordered by call time. Call it once, after the last operation.
    pub fn finish(&self) -> std::io::Result<Vec<Op>> {
        let mut r = self.recorder.lock().expect("not poisoned");
        // An operation of unknown outcome may take effect at any time after its call, but only
        // an operation that returned later can see it: its stamp counts up to its key's last
        // return (the checker's own rule for records without `stamp_hi`, here on the stamps'
        // time base), and no earlier than its own call.
        for mut op in std::mem::take(&mut r.held_back) {
            let last = r.last_return_ms.get(op.key()).copied();
            let stamp = op.stamp.as_mut().expect("held back for its stamp window");
            stamp.hi_ms = Some(last.unwrap_or(stamp.call_ms).max(stamp.call_ms));
            r.write(&op);
        }
        if let Some(e) = r.error.take() {
            return Err(e);
        }
        r.out.flush()?;
        let mut ops = r.kept.clone();
        ops.sort_by_key(|op| (op.call, op.client));
        Ok(ops)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_follow_the_checker_format() {
        let op = Op {
            client: 3,
            cmd: vec!["INCRBY".into(), "k1".into(), "5".into()],
            call: 123_456,
            ret: 123_789,
            outcome: Outcome::Ok(Output::Int(6)),
            final_read: false,
            stamp: None,
            queued: Vec::new(),
        };
        assert_eq!(
            op.to_json(0),
            json!({"client":3,"key":"k1","cmd":["INCRBY","k1","5"],
                   "output":{"type":"int","value":6},"call":123456,"return":123789,"outcome":"ok"})
        );
        let unknown = Op {
            outcome: Outcome::Unknown,
            ..op.clone()
        };
        assert!(unknown.to_json(0).get("output").is_none());
        assert_eq!(unknown.to_json(0)["outcome"], "unknown");
        let tx = Op {
            cmd: vec!["MULTI".into(), "h1".into()],
            queued: vec![
                vec!["HINCRBY".into(), "h1".into(), "n".into(), "1".into()],
                vec!["HGETALL".into(), "h1".into()],
            ],
            outcome: Outcome::Ok(Output::Items(vec![
                Output::Int(1),
                Output::Array(vec!["n".into(), "1".into()]),
            ])),
            ..op
        };
        assert_eq!(
            tx.to_json(0),
            json!({"client":3,"key":"h1","cmd":["MULTI","h1"],
                   "queued":[["HINCRBY","h1","n","1"],["HGETALL","h1"]],
                   "output":{"type":"items","value":[{"type":"int","value":1},
                                                     {"type":"array","value":["n","1"]}]},
                   "call":123456,"return":123789,"outcome":"ok"})
        );
    }

    #[test]
    fn the_file_gets_every_operation_and_memory_only_writes_and_final_reads() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("history.jsonl");
        let history = History::create(&path, 0).unwrap();
        let op = |cmd: &[&str], final_read| Op {
            client: 1,
            cmd: cmd.iter().map(|s| (*s).to_string()).collect(),
            call: 1,
            ret: 2,
            outcome: Outcome::Ok(Output::Nil),
            final_read,
            stamp: None,
            queued: Vec::new(),
        };
        history.push(op(&["GET", "r1"], false));
        history.push(op(&["SET", "r1", "v"], false));
        history.push(op(&["GET", "r1"], true));
        let kept = history.finish().unwrap();
        assert_eq!(kept.len(), 2);
        assert_eq!(std::fs::read_to_string(&path).unwrap().lines().count(), 3);
        let (workload, finals) = history.counts();
        assert_eq!((workload.ok, finals.ok), (2, 1));
    }

    #[test]
    fn replies_are_classified() {
        let c = |r: Reply| classify(&r).unwrap();
        assert_eq!(c(Reply::Error("TRYAGAIN x".into())), Outcome::Fail);
        assert_eq!(c(Reply::Error("UNCERTAIN x".into())), Outcome::Unknown);
        assert_eq!(c(Reply::Simple("OK".into())), Outcome::Ok(Output::Ok));
        assert_eq!(
            c(Reply::Array(vec![
                Reply::Bulk("b".into()),
                Reply::Bulk("a".into())
            ])),
            Outcome::Ok(Output::Array(vec!["b".into(), "a".into()]))
        );
        let exec = Reply::Array(vec![
            Reply::Int(1),
            Reply::Error(
                "WRONGTYPE Operation against a key holding the wrong kind of value".into(),
            ),
            Reply::Array(vec![Reply::Bulk("x".into())]),
        ]);
        assert_eq!(
            classify_exec(&exec).unwrap(),
            Outcome::Ok(Output::Items(vec![
                Output::Int(1),
                Output::Error(
                    "WRONGTYPE Operation against a key holding the wrong kind of value".into()
                ),
                Output::Array(vec!["x".into()]),
            ]))
        );
        assert_eq!(
            classify_exec(&Reply::Error("UNCERTAIN x".into())).unwrap(),
            Outcome::Unknown
        );
        assert!(classify_exec(&Reply::Error("EXECABORT x".into())).is_err());
        assert!(classify(&Reply::Error("ERR max number of clients".into())).is_err());
    }

    fn timed(cmd: &[&str], call_ms: i64, ret_ms: Option<i64>, outcome: Outcome) -> Op {
        Op {
            client: 1,
            cmd: cmd.iter().map(|s| (*s).to_string()).collect(),
            call: 1,
            ret: 2,
            outcome,
            final_read: false,
            queued: Vec::new(),
            stamp: Some(StampWindow {
                lo_ms: call_ms - 5,
                call_ms,
                hi_ms: ret_ms,
            }),
        }
    }

    #[test]
    fn stamp_windows_are_written_in_ns_and_instants_get_the_epoch() {
        let op = timed(
            &["SET", "e1", "v", "PXAT", "1700000000100"],
            20,
            Some(30),
            Outcome::Ok(Output::Ok),
        );
        let line = op.to_json(1_700_000_000_000);
        assert_eq!(line["stamp_lo"], 15_000_000);
        assert_eq!(line["stamp_hi"], 30_000_000);
        assert_eq!(line["epoch_ms"], 1_700_000_000_000i64);
        let px = timed(
            &["SET", "e1", "v", "PX", "100"],
            20,
            Some(30),
            Outcome::Fail,
        );
        assert!(px.to_json(1).get("epoch_ms").is_none());
    }

    #[test]
    fn an_unknown_outcome_s_window_ends_at_its_key_s_last_return() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("history.jsonl");
        let history = History::create(&path, 0).unwrap();
        let pttl = |ret_ms| {
            timed(
                &["PTTL", "e1"],
                10,
                Some(ret_ms),
                Outcome::Ok(Output::Int(5)),
            )
        };
        history.push(timed(&["PEXPIRE", "e1", "50"], 100, None, Outcome::Unknown));
        history.push(pttl(40));
        history.push(pttl(90));
        history.push(timed(
            &["SET", "e1", "v", "PX", "9"],
            20,
            None,
            Outcome::Unknown,
        ));
        // A key nobody answered for: its own call.
        history.push(timed(&["PERSIST", "e2"], 70, None, Outcome::Unknown));
        assert_eq!(history.finish().unwrap().len(), 3);
        let lines: Vec<Value> = std::fs::read_to_string(&path)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        let hi = |cmd: &str| {
            let line = lines.iter().find(|l| l["cmd"][0] == cmd).unwrap();
            line["stamp_hi"].as_i64().unwrap() / 1_000_000
        };
        assert_eq!(lines.len(), 5);
        assert_eq!((hi("PEXPIRE"), hi("SET"), hi("PERSIST")), (100, 90, 70));
    }
}
