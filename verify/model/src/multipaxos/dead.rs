//! Messages in flight that can no longer change their receiver, now or after any step: the
//! model takes them out of the network ([`MultiPaxosConfig::collect_dead`]).
//!
//! A message is dead when delivering it now changes nothing (the receiver, cloned, handles it
//! and ends equal, with nothing to write or send) and one of these keeps it so, because it
//! rests on the receiver's durable state, which a crash keeps and nothing takes back:
//! * a Prepare, Promise, Propose or Alive of a view below the view the receiver promised
//!   (views only go up; the engine ignores these, and a replica with a deliberate bug that does
//!   not fails the first condition);
//! * an Accept of an instance the receiver knows decided (decisions are never undone, and the
//!   model takes no snapshot, so the log keeps them);
//! * a catch-up response, without a snapshot, of a view at most the receiver's and with only
//!   instances it knows decided.
//!
//! Taking such a message out is the same as never delivering it, which the network may do
//! anyway, so no behaviour is lost.
//!
//! Under EpochSS the durable state holds nothing but the epoch, so only empty catch-up
//! responses of view 0 can be dead. A message from an earlier epoch of its sender is not: the
//! receiver drops it, but forgets the sender's epoch when it crashes itself.
//!
//! [`MultiPaxosConfig::collect_dead`]: super::MultiPaxosConfig::collect_dead
use logless_multipaxos::ids::{Epoch, Instance, NodeId};
use logless_multipaxos::message::Message;

use super::process::Process;

/// Whether `message` from `from`, sent in `epoch`, can no longer change `process` (see the
/// module docs).
pub fn is_dead(process: &Process, from: NodeId, epoch: Epoch, message: &Message) -> bool {
    let durable = process.store.durable();
    let decided = |instance: &Instance| {
        *instance < durable.log_start
            || durable
                .log
                .get(instance)
                .is_some_and(|entry| entry.decided.is_some())
    };
    let stays_dead = match message {
        Message::Prepare { view, .. }
        | Message::Promise { view, .. }
        | Message::Propose { view, .. }
        | Message::Alive { view, .. } => *view < durable.view,
        Message::Accept { instance, .. } => decided(instance),
        Message::CatchUpResponse {
            view,
            snapshot: None,
            decided: instances,
        } => *view <= durable.view && instances.iter().all(|(i, _)| decided(i)),
        Message::CatchUpResponse { .. }
        | Message::CatchUpQuery { .. }
        | Message::Forward { .. }
        | Message::Recovery { .. }
        | Message::RecoveryAnswer { .. } => false,
    };
    stays_dead && {
        let mut replica = process.replica.clone();
        replica.handle_epoch_message(0, from, epoch, message.clone());
        replica.take_ready().is_empty() && replica == process.replica
    }
}
