//! The replicated service, as the protocol sees it.
use bytes::Bytes;

use crate::ids::Instance;
use crate::message::Request;

/// A deterministic service that executes decided requests in log order.
///
/// Every replica runs one, feeds it the same requests in the same order, and so holds the same
/// state. The protocol never looks inside a request or a state.
pub trait StateMachine {
    /// Announces the decided batch of `instance`, before its requests are executed: the service
    /// evaluates time (expiry) at `stamp_ms` and may derive deterministic choices (seeds) from
    /// the instance and the position of each request in it.
    ///
    /// `stamp_ms` is the batch's leader stamp raised to the highest stamp executed before it,
    /// so it never goes down along the log, whatever views the batches come from. Every replica
    /// computes the same value from the same log prefix (a snapshot carries it). The default
    /// ignores it.
    fn begin_batch(&mut self, instance: Instance, stamp_ms: u64) {
        let _ = (instance, stamp_ms);
    }
    /// Executes one request and gives its reply.
    fn execute(&mut self, request: &Request) -> Bytes;
    /// The state, encoded, after every request executed so far.
    fn snapshot(&self) -> Bytes;
    /// Replaces the state with one [`StateMachine::snapshot`] produced (on any replica).
    fn restore(&mut self, snapshot: &Bytes);
}
