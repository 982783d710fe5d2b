//! The replicated service, as the protocol sees it.
use std::fmt;
use std::sync::Arc;

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
    /// A consistent copy of the state now, to be encoded later (by a runtime, off its loop)
    /// into what [`StateMachine::snapshot`] gives now. The default encodes at once; a machine
    /// that can copy its state more cheaply than it encodes it (a clone of shared pieces)
    /// overrides it.
    fn snapshot_deferred(&self) -> DeferredState {
        let state = self.snapshot();
        DeferredState::new(move || state.clone())
    }
    /// Replaces the state with one [`StateMachine::snapshot`] produced (on any replica).
    fn restore(&mut self, snapshot: &Bytes);

    /// The last instance whose effects the machine holds already although the replica has not
    /// executed up to it (a machine that keeps its state durable itself, reopened after a crash
    /// that lost decisions it had executed): no snapshot is taken from it before the replica
    /// executed past it, since the snapshot's next instance would be behind its state. `None`
    /// (the default): the machine holds exactly what the replica executed.
    fn holds_through(&self) -> Option<Instance> {
        None
    }
}

/// A state machine's state, copied at one point and encoded on demand
/// ([`StateMachine::snapshot_deferred`]). The engine never encodes it: it hands it to the
/// runtime, which may encode it on another thread.
///
/// Two copies are equal only if they are the same copy; hashing ignores it (a model checker
/// never meets one: only [`Config::background_snapshots`](crate::config::Config) makes them).
#[derive(Clone)]
pub struct DeferredState(Arc<dyn Fn() -> Bytes + Send + Sync>);

impl DeferredState {
    /// The state `encode` encodes when asked.
    pub fn new(encode: impl Fn() -> Bytes + Send + Sync + 'static) -> DeferredState {
        DeferredState(Arc::new(encode))
    }

    /// The encoded state: what [`StateMachine::snapshot`] gave when the copy was taken.
    pub fn encode(&self) -> Bytes {
        (self.0)()
    }
}

impl fmt::Debug for DeferredState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("DeferredState")
    }
}

impl PartialEq for DeferredState {
    fn eq(&self, other: &DeferredState) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Eq for DeferredState {}

impl std::hash::Hash for DeferredState {
    fn hash<H: std::hash::Hasher>(&self, _: &mut H) {}
}
