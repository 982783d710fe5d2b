//! The client ids a replica lends to the operations it has in flight on a Multi-Paxos log (the
//! log engine's, and each P-SMR group's), their retries and their deadlines.
//!
//! A log's client table keeps, per client, its last request number, and a client has one
//! request outstanding at a time. A Redis connection pipelines, so a replica does not give each
//! connection one client id: it keeps a pool of ids and lends one to each operation in flight,
//! numbering that id's requests upwards, and takes it back once the operation is answered. Ids
//! are node id (16 bits), incarnation (24 bits) and the pool's counter (24 bits). An id can
//! come back in a later run: the incarnation stays the same over restarts until a peer has
//! welcomed the directory (`store::Identity::admitted`), and it wraps at 2^24. So a new id's
//! numbers start from the turn clock at its first use, times [`SEQS_PER_MS`]: a later run (its
//! clock at least a millisecond on) numbers above every request of an earlier one, and the log's
//! client table never takes a new request for the retry of an old one.
//!
//! An operation not answered within [`RETRY_MS`] is due for a retry: the same id and number,
//! handed to the replica again. One not answered within its timeout is due as timed out; its id
//! goes back to the pool and its next number supersedes the unanswered one.
use std::collections::{BTreeMap, VecDeque};

use bytes::Bytes;
use logless_multipaxos::ids::{ClientId, RequestSeq};
use logless_multipaxos::message::Request;

/// Request numbers an id may use per millisecond of its run before it could reach the numbers
/// a later run starts from: far above one request at a time.
pub const SEQS_PER_MS: u64 = 1 << 20;

/// How long an operation waits for its answer before it is handed to the replica again.
pub const RETRY_MS: u64 = 500;

struct InFlight<R> {
    reply: R,
    request: Request,
    deadline_ms: u64,
    /// When it is next due for a retry (or its deadline): the one entry of the pool's `due`
    /// queue that counts for it (a re-send leaves an earlier one behind).
    due_ms: u64,
}

/// What came due in [`ClientPool::take_due`].
pub(crate) enum Due<R> {
    /// Hand this request to the replica again.
    Retry(Request),
    /// Past its deadline: answer it "outcome unknown" (its id is back in the pool).
    TimedOut(R),
}

/// The pool of client ids lent to operations in flight; `R` is how an answer finds its client.
pub(crate) struct ClientPool<R> {
    /// Node id and incarnation, in the top 40 bits.
    base: u64,
    /// Ids created so far.
    created: u64,
    /// Ids free to lend, with the last request number each used.
    idle: Vec<(ClientId, RequestSeq)>,
    in_flight: BTreeMap<ClientId, InFlight<R>>,
    /// When each request is next due for a retry or its deadline, in the order pushed (which is
    /// the order due but for a retry whose deadline comes first: it may be seen up to
    /// [`RETRY_MS`] late).
    due: VecDeque<(u64, ClientId, RequestSeq)>,
}

impl<R> ClientPool<R> {
    /// The pool of `node` in its run `incarnation`.
    pub(crate) fn new(node: u16, incarnation: u32) -> ClientPool<R> {
        ClientPool {
            base: (u64::from(node) << 48) | (u64::from(incarnation & 0xFF_FFFF) << 24),
            created: 0,
            idle: Vec::new(),
            in_flight: BTreeMap::new(),
            due: VecDeque::new(),
        }
    }

    /// The node whose pool lent `client`.
    pub(crate) fn node_of(client: ClientId) -> u16 {
        (client.0 >> 48) as u16
    }

    /// Whether this pool (this node, this incarnation) lent `client`.
    pub(crate) fn lent(&self, client: ClientId) -> bool {
        client.0 & !0xFF_FFFF == self.base && client.0 & 0xFF_FFFF <= self.created
    }

    /// Operations in flight.
    pub(crate) fn in_flight(&self) -> usize {
        self.in_flight.len()
    }

    /// Lends an id to a new operation carrying `payload`, answered through `reply` within
    /// `timeout_ms` of `now_ms`; gives the request to hand to the replica.
    pub(crate) fn lend(
        &mut self,
        payload: Bytes,
        reply: R,
        now_ms: u64,
        timeout_ms: u64,
    ) -> Request {
        let (client, seq) = self.next_id(now_ms);
        let request = Request {
            client,
            seq,
            payload,
        };
        let deadline_ms = now_ms.saturating_add(timeout_ms);
        let due_ms = (now_ms + RETRY_MS).min(deadline_ms);
        let flight = InFlight {
            reply,
            request: request.clone(),
            deadline_ms,
            due_ms,
        };
        self.in_flight.insert(client, flight);
        self.due.push_back((due_ms, client, seq));
        request
    }

    /// The requests in flight and not past their deadline at `now_ms`, to hand to the replica
    /// again at once (it moved to a new view: one forwarded to the old leader may be lost with
    /// it); their retry timers start again from `now_ms`.
    pub(crate) fn resend_all(&mut self, now_ms: u64) -> Vec<Request> {
        let mut resent = Vec::new();
        for (&client, flight) in &mut self.in_flight {
            if now_ms >= flight.deadline_ms {
                continue; // answered "outcome unknown" by take_due
            }
            flight.due_ms = (now_ms + RETRY_MS).min(flight.deadline_ms);
            self.due
                .push_back((flight.due_ms, client, flight.request.seq));
            resent.push(flight.request.clone());
        }
        resent
    }

    /// The requests in flight (for tests).
    #[cfg(test)]
    pub(crate) fn requests(&self) -> impl Iterator<Item = &Request> {
        self.in_flight.values().map(|flight| &flight.request)
    }

    /// An idle id (or a new one, numbered from the clock `now_ms`) and its next number.
    fn next_id(&mut self, now_ms: u64) -> (ClientId, RequestSeq) {
        let (client, last) = self.idle.pop().unwrap_or_else(|| {
            self.created += 1;
            let first = now_ms.saturating_mul(SEQS_PER_MS);
            (ClientId(self.base | self.created), RequestSeq(first))
        });
        (client, RequestSeq(last.0 + 1))
    }

    /// Takes the operation in flight under `client` if it is `seq`, puts the id back, and
    /// gives where its answer goes.
    pub(crate) fn settle(&mut self, client: ClientId, seq: RequestSeq) -> Option<R> {
        match self.in_flight.get(&client) {
            Some(flight) if flight.request.seq == seq => {}
            _ => return None,
        }
        let flight = self.in_flight.remove(&client)?;
        self.idle.push((client, seq));
        Some(flight.reply)
    }

    /// The operations due at `now_ms`: retries (scheduled again) and those past their deadline
    /// (settled).
    pub(crate) fn take_due(&mut self, now_ms: u64) -> Vec<Due<R>> {
        let mut due = Vec::new();
        while let Some(&(due_ms, client, seq)) = self.due.front() {
            if due_ms > now_ms {
                break;
            }
            self.due.pop_front();
            let Some(flight) = self.in_flight.get_mut(&client) else {
                continue;
            };
            if flight.request.seq != seq || flight.due_ms != due_ms {
                continue; // settled, or due later since a re-send
            }
            if now_ms >= flight.deadline_ms {
                let reply = self.settle(client, seq).expect("in flight");
                due.push(Due::TimedOut(reply));
                continue;
            }
            flight.due_ms = (now_ms + RETRY_MS).min(flight.deadline_ms);
            due.push(Due::Retry(flight.request.clone()));
            self.due.push_back((flight.due_ms, client, seq));
        }
        due
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn client_ids_are_reused_with_growing_numbers_and_carry_node_and_incarnation() {
        let mut pool: ClientPool<u8> = ClientPool::new(2, 5);
        let a = pool.lend(Bytes::new(), 1, 0, 1_000);
        assert_eq!(ClientPool::<u8>::node_of(a.client), 2);
        assert_eq!((a.client.0 >> 24) & 0xFF_FFFF, 5);
        assert_eq!(a.seq, RequestSeq(1));
        let b = pool.lend(Bytes::new(), 2, 0, 1_000);
        assert_ne!(a.client, b.client, "an id in flight is not lent twice");
        assert!(
            pool.settle(a.client, RequestSeq(7)).is_none(),
            "another number"
        );
        assert_eq!(pool.settle(a.client, a.seq), Some(1));
        let c = pool.lend(Bytes::new(), 3, 0, 1_000);
        assert_eq!((c.client, c.seq), (a.client, RequestSeq(2)));
        assert!(pool.lent(c.client));
        let other_run: ClientPool<u8> = ClientPool::new(2, 6);
        assert!(!other_run.lent(c.client));
    }

    #[test]
    fn a_later_run_in_the_same_incarnation_numbers_above_an_earlier_one() {
        // The incarnation stays until a peer welcomes the directory: the ids repeat.
        let mut earlier: ClientPool<u8> = ClientPool::new(2, 1);
        let mut later: ClientPool<u8> = ClientPool::new(2, 1);
        let start_ms = 1_764_000_000_000;
        let mut last = earlier.lend(Bytes::new(), 0, start_ms, 1_000);
        for _ in 0..10_000 {
            earlier.settle(last.client, last.seq);
            last = earlier.lend(Bytes::new(), 0, start_ms, 1_000);
        }
        let first = later.lend(Bytes::new(), 0, start_ms + 1, 1_000);
        assert_eq!(first.client, last.client);
        assert!(first.seq > last.seq, "{:?} after {:?}", first.seq, last.seq);
    }

    #[test]
    fn late_operations_are_retried_then_time_out() {
        let mut pool: ClientPool<u8> = ClientPool::new(1, 1);
        let request = pool.lend(Bytes::new(), 9, 0, 800);
        assert!(pool.take_due(RETRY_MS - 1).is_empty());
        let due = pool.take_due(RETRY_MS);
        assert!(matches!(&due[..], [Due::Retry(r)] if *r == request));
        let due = pool.take_due(800);
        assert!(matches!(&due[..], [Due::TimedOut(9)]));
        assert_eq!(pool.in_flight(), 0);
    }
}
