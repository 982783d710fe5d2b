//! The replicated service, as the protocol sees it.
use bytes::Bytes;

use crate::message::Request;

/// A deterministic service that executes decided requests in log order.
///
/// Every replica runs one, feeds it the same requests in the same order, and so holds the same
/// state. The protocol never looks inside a request or a state.
pub trait StateMachine {
    /// Executes one request and gives its reply.
    fn execute(&mut self, request: &Request) -> Bytes;
    /// The state, encoded, after every request executed so far.
    fn snapshot(&self) -> Bytes;
    /// Replaces the state with one [`StateMachine::snapshot`] produced (on any replica).
    fn restore(&mut self, snapshot: &Bytes);
}
