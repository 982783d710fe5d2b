//! The recorded history: one entry per client operation, written as the checker's JSON lines
//! (`checker/README.md`), and the run's monotonic clock.
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use serde_json::{json, Value};

use crate::client::Reply;

/// Nanoseconds since the run started, on one monotonic clock shared by history and faults.
#[derive(Clone, Copy, Debug)]
pub struct Clock {
    start: Instant,
}

impl Clock {
    /// A clock that reads 0 now.
    pub fn start() -> Clock {
        Clock {
            start: Instant::now(),
        }
    }

    /// Nanoseconds since the start.
    pub fn now(&self) -> u64 {
        u64::try_from(self.start.elapsed().as_nanos()).unwrap_or(u64::MAX)
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
    /// An array of strings, sorted (the model's sets are sorted).
    Array(Vec<String>),
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
    let output = match reply {
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
            members.sort();
            Output::Array(members)
        }
        Reply::Error(e) => {
            let word = e.split(' ').next().unwrap_or_default();
            match word {
                "TRYAGAIN" => return Ok(Outcome::Fail),
                "UNCERTAIN" => return Ok(Outcome::Unknown),
                "WRONGTYPE" => Output::Error(e.clone()),
                "ERR" if e.contains("not an integer") || e.contains("overflow") => {
                    Output::Error(e.clone())
                }
                _ => return Err(format!("unexpected error reply {e:?}")),
            }
        }
    };
    Ok(Outcome::Ok(output))
}

/// One operation of one client.
#[derive(Clone, Debug)]
pub struct Op {
    /// The client id (one operation in flight per id).
    pub client: u64,
    /// The command, key at index 1.
    pub cmd: Vec<String>,
    /// When it was sent.
    pub call: u64,
    /// When its reply arrived, or when the client gave up.
    pub ret: u64,
    /// What became of it.
    pub outcome: Outcome,
    /// True for the final reads after the faults.
    pub final_read: bool,
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
            "GET" | "SMEMBERS" | "SCARD" | "SISMEMBER" | "EXISTS"
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

    /// The JSON line of the checker's format.
    pub fn to_json(&self) -> Value {
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
        if let Outcome::Ok(output) = &self.outcome {
            line["output"] = match output {
                Output::Ok => json!({"type": "ok"}),
                Output::Nil => json!({"type": "nil"}),
                Output::Int(n) => json!({"type": "int", "value": n}),
                Output::Bulk(s) => json!({"type": "bulk", "value": s}),
                Output::Array(a) => json!({"type": "array", "value": a}),
                Output::Error(e) => json!({"type": "error", "value": e}),
            };
        }
        line
    }
}

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
    fn add(&mut self, outcome: &Outcome) {
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
}

/// The history, shared by every client task: each operation is written to `history.jsonl`
/// as it completes; only the writes and the final reads stay in memory (for the lost-write
/// check), so long runs do not grow the runner with every read.
#[derive(Clone)]
pub struct History {
    recorder: Arc<Mutex<Recorder>>,
}

impl History {
    /// Creates the history file.
    pub fn create(path: &Path) -> std::io::Result<History> {
        Ok(History {
            recorder: Arc::new(Mutex::new(Recorder {
                out: BufWriter::new(File::create(path)?),
                error: None,
                kept: Vec::new(),
                workload: Counts::default(),
                final_reads: Counts::default(),
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
        }
        let line = op.to_json();
        let written = serde_json::to_writer(&mut r.out, &line)
            .map_err(std::io::Error::from)
            .and_then(|()| r.out.write_all(b"\n"));
        if let Err(e) = written {
            r.error.get_or_insert(e);
        }
        if op.final_read || !op.is_read() {
            r.kept.push(op);
        }
    }

    /// The counts so far: the workload's operations and the final reads.
    pub fn counts(&self) -> (Counts, Counts) {
        let r = self.recorder.lock().expect("not poisoned");
        (r.workload, r.final_reads)
    }

    /// Flushes the file and returns the writes and final reads, ordered by call time.
    pub fn finish(&self) -> std::io::Result<Vec<Op>> {
        let mut r = self.recorder.lock().expect("not poisoned");
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
        };
        assert_eq!(
            op.to_json(),
            json!({"client":3,"key":"k1","cmd":["INCRBY","k1","5"],
                   "output":{"type":"int","value":6},"call":123456,"return":123789,"outcome":"ok"})
        );
        let unknown = Op {
            outcome: Outcome::Unknown,
            ..op
        };
        assert!(unknown.to_json().get("output").is_none());
        assert_eq!(unknown.to_json()["outcome"], "unknown");
    }

    #[test]
    fn the_file_gets_every_operation_and_memory_only_writes_and_final_reads() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("history.jsonl");
        let history = History::create(&path).unwrap();
        let op = |cmd: &[&str], final_read| Op {
            client: 1,
            cmd: cmd.iter().map(|s| (*s).to_string()).collect(),
            call: 1,
            ret: 2,
            outcome: Outcome::Ok(Output::Nil),
            final_read,
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
            Outcome::Ok(Output::Array(vec!["a".into(), "b".into()]))
        );
        assert!(classify(&Reply::Error("ERR max number of clients".into())).is_err());
    }
}
