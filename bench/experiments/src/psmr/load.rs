//! The load of `logless bench psmr`: closed-loop clients sending the B⁺-tree service's Redis
//! commands (GET, `SET k v NX`, DEL), and the replicas' `LOGLESS.DIGEST`.
//!
//! `bench/loadgen` speaks only the other engines' commands (INCR, SET, GET, MSET, MULTI), so the
//! service's insert/delete pairs and reads are sent from here: each client owns one connection
//! and keeps `pipeline` commands in flight, sending the next batch when the last one is
//! answered. Reads name one of the `keys` preloaded keys, chosen uniformly or with a Zipf(1)
//! skew; a dependent command inserts a key of the client's own (`SET c<i>:<n> v NX`) or deletes
//! the one it inserted last, so the tree keeps its size and every reply is known in advance.
use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use logless_harness::probe;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use rand_distr::{Distribution, Zipf};

/// How long a client waits for one batch's answers.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(10);

/// How the keys of reads are chosen.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Keys {
    /// Every preloaded key alike.
    Uniform,
    /// Zipf with exponent 1 over the preloaded keys (seed 004, Fig. 7).
    Zipf,
}

/// What one run sends.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Workload {
    /// The share of dependent commands (inserts and deletes), from 0 to 1; the rest are reads.
    pub dependent: f64,
    /// How reads choose their keys.
    pub keys: Keys,
}

/// The name of preloaded key `i`.
pub fn key(i: u64) -> String {
    format!("k{i:09}")
}

/// One command and the reply it must get.
struct Command {
    args: Vec<String>,
    expect: Expect,
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Expect {
    /// A value (a read of a preloaded key).
    Bulk,
    /// `+OK` (an insert of a fresh key).
    Ok,
    /// `:1` (a delete of a key the client inserted).
    One,
}

/// One client's source of commands.
struct Source {
    client: u32,
    workload: Workload,
    keys: u64,
    rng: SmallRng,
    zipf: Zipf<f64>,
    /// The number of the client's next own key, and whether the last one is in the tree.
    next_own: u64,
    inserted: bool,
}

impl Source {
    fn new(client: u32, workload: Workload, keys: u64) -> Source {
        Source {
            client,
            workload,
            keys,
            rng: SmallRng::seed_from_u64(u64::from(client) * 7919 + 1),
            zipf: Zipf::new(keys.max(1) as f64, 1.0).expect("valid Zipf parameters"),
            next_own: 0,
            inserted: false,
        }
    }

    fn next(&mut self) -> Command {
        if self.rng.random::<f64>() < self.workload.dependent {
            let own = format!("c{}:{}", self.client, self.next_own);
            if self.inserted {
                self.inserted = false;
                self.next_own += 1;
                return Command {
                    args: vec!["DEL".into(), own],
                    expect: Expect::One,
                };
            }
            self.inserted = true;
            return Command {
                args: vec!["SET".into(), own, "v".into(), "NX".into()],
                expect: Expect::Ok,
            };
        }
        let i = match self.workload.keys {
            Keys::Uniform => self.rng.random_range(0..self.keys.max(1)),
            // Zipf's samples are 1..=keys, the most frequent first.
            Keys::Zipf => (self.zipf.sample(&mut self.rng) as u64).saturating_sub(1),
        };
        Command {
            args: vec!["GET".into(), key(i)],
            expect: Expect::Bulk,
        }
    }
}

/// A connection that sends batches of commands and reads their replies.
pub struct Conn {
    writer: TcpStream,
    reader: BufReader<TcpStream>,
    addr: SocketAddr,
}

impl Conn {
    /// Connects to `addr`.
    pub fn open(addr: SocketAddr) -> Result<Conn, String> {
        let stream =
            probe::connect(addr, ANSWER_TIMEOUT).map_err(|e| format!("connect {addr}: {e}"))?;
        let _ = stream.set_nodelay(true);
        let reader = BufReader::new(stream.try_clone().map_err(|e| e.to_string())?);
        Ok(Conn {
            writer: stream,
            reader,
            addr,
        })
    }

    /// Sends every command of `batch` and returns their replies in order, each as its first
    /// line (`+OK`, `:1`, `-ERR …`) or, for a bulk string, `$` and its text.
    pub fn ask(&mut self, batch: &[Vec<String>]) -> Result<Vec<String>, String> {
        let mut out = Vec::new();
        for args in batch {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            out.extend_from_slice(&probe::resp_request(&args));
        }
        self.writer
            .write_all(&out)
            .map_err(|e| format!("send to {}: {e}", self.addr))?;
        (0..batch.len()).map(|_| self.reply()).collect()
    }

    fn reply(&mut self) -> Result<String, String> {
        let lost = |e: std::io::Error| format!("reply from {}: {e}", self.addr);
        let mut line = String::new();
        self.reader.read_line(&mut line).map_err(lost)?;
        let line = line.trim_end().to_string();
        let Some(len) = line.strip_prefix('$').and_then(|n| n.parse::<i64>().ok()) else {
            if line.is_empty() {
                return Err(format!("{} closed the connection", self.addr));
            }
            return Ok(line);
        };
        if len < 0 {
            return Ok(line);
        }
        let mut body = vec![0u8; len as usize + 2];
        std::io::Read::read_exact(&mut self.reader, &mut body).map_err(lost)?;
        body.truncate(len as usize);
        Ok(format!("${}", String::from_utf8_lossy(&body)))
    }
}

/// Inserts the preloaded keys `0..keys` through `endpoints` (`conns` connections, batches of
/// `pipeline`).
pub fn preload(
    endpoints: &[SocketAddr],
    keys: u64,
    conns: u32,
    pipeline: u32,
) -> Result<(), String> {
    let conns = u64::from(conns.max(1));
    std::thread::scope(|scope| {
        let workers: Vec<_> = (0..conns)
            .map(|c| {
                let addr = endpoints[c as usize % endpoints.len()];
                scope.spawn(move || -> Result<(), String> {
                    let mut conn = Conn::open(addr)?;
                    let mine: Vec<u64> = (c..keys).step_by(conns as usize).collect();
                    for chunk in mine.chunks(pipeline.max(1) as usize) {
                        let batch: Vec<Vec<String>> = chunk
                            .iter()
                            .map(|&i| vec!["SET".into(), key(i), "v".into(), "NX".into()])
                            .collect();
                        for reply in conn.ask(&batch)? {
                            if reply != "+OK" {
                                return Err(format!("preloading: SET NX answered {reply:?}"));
                            }
                        }
                    }
                    Ok(())
                })
            })
            .collect();
        workers.into_iter().try_for_each(|w| {
            w.join()
                .map_err(|_| "a preloading thread panicked".to_string())?
        })
    })
}

/// One closed-loop client: batches of `pipeline` commands of `workload` through `addr` until
/// `stop`; returns how many commands were answered in batches that ended inside `window`. Any
/// reply other than the expected one (an error, `TRYAGAIN`, a missing key) fails the run. It
/// ends by deleting the key it left inserted, so the tree holds the preloaded keys again.
pub fn client(
    client: u32,
    addr: SocketAddr,
    workload: Workload,
    keys: u64,
    pipeline: u32,
    stop: &AtomicBool,
    window: (Instant, Instant),
) -> Result<u64, String> {
    let mut conn = Conn::open(addr)?;
    let mut source = Source::new(client, workload, keys);
    let mut ops = 0;
    while !stop.load(Ordering::Relaxed) {
        let batch: Vec<Command> = (0..pipeline.max(1)).map(|_| source.next()).collect();
        let args: Vec<Vec<String>> = batch.iter().map(|c| c.args.clone()).collect();
        let replies = conn.ask(&args)?;
        let now = Instant::now();
        let counted = now >= window.0 && now < window.1;
        for (command, reply) in batch.iter().zip(&replies) {
            check(command, reply)?;
        }
        if counted {
            ops += batch.len() as u64;
        }
    }
    if source.inserted {
        let own = format!("c{}:{}", client, source.next_own);
        let reply = conn.ask(&[vec!["DEL".into(), own]])?;
        check(
            &Command {
                args: vec![],
                expect: Expect::One,
            },
            &reply[0],
        )?;
    }
    Ok(ops)
}

fn check(command: &Command, reply: &str) -> Result<(), String> {
    let good = match command.expect {
        Expect::Bulk => reply.starts_with('$') && reply != "$-1",
        Expect::Ok => reply == "+OK",
        Expect::One => reply == ":1",
    };
    if good {
        Ok(())
    } else {
        Err(format!(
            "{} answered {reply:?} (expected {:?})",
            command.args.join(" "),
            command.expect
        ))
    }
}

/// Every replica's `LOGLESS.DIGEST`, once they are equal; an error naming them if they stay
/// different for `limit` (a replica still executing the last commands catches up in that time).
pub fn equal_digests(endpoints: &[SocketAddr], limit: Duration) -> Result<String, String> {
    let deadline = Instant::now() + limit;
    loop {
        let digests: Vec<String> = endpoints
            .iter()
            .map(|&addr| {
                Conn::open(addr)
                    .and_then(|mut c| c.ask(&[vec!["LOGLESS.DIGEST".into()]]))
                    .map(|mut r| r.remove(0))
                    .unwrap_or_else(|e| format!("(no answer: {e})"))
            })
            .collect();
        let all_equal = digests.iter().all(|d| d == &digests[0]);
        if all_equal && digests[0].starts_with('$') {
            return Ok(digests[0][1..].to_string());
        }
        if Instant::now() >= deadline {
            let list: Vec<String> = endpoints
                .iter()
                .zip(&digests)
                .map(|(a, d)| format!("{a}: {d}"))
                .collect();
            return Err(format!(
                "the replicas' digests differ after {} s: {}",
                limit.as_secs(),
                list.join(", ")
            ));
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dependent_commands_insert_then_delete_the_clients_own_keys() {
        let mut all = Source::new(
            3,
            Workload {
                dependent: 1.0,
                keys: Keys::Uniform,
            },
            10,
        );
        let args: Vec<String> = (0..4).map(|_| all.next().args.join(" ")).collect();
        assert_eq!(
            args,
            ["SET c3:0 v NX", "DEL c3:0", "SET c3:1 v NX", "DEL c3:1"]
        );
        let mut reads = Source::new(
            0,
            Workload {
                dependent: 0.0,
                keys: Keys::Zipf,
            },
            100,
        );
        let mut hot = 0;
        for _ in 0..1000 {
            let c = reads.next();
            assert_eq!(c.args[0], "GET");
            assert!(c.args[1] < key(100), "{}", c.args[1]);
            hot += usize::from(c.args[1] == key(0));
        }
        // Zipf(1) over 100 keys gives the first about 19% of the reads.
        assert!((100..300).contains(&hot), "{hot}");
    }
}
