//! What the runner knows of the stamp a replica gives each command, for the checker's expiry
//! model (`verify/checker/README.md`, "Expiry: deadlines under clock skew").
//!
//! A replica stamps a command with its shard's clock, which is the wall clock in whole
//! milliseconds (`node/src/turn.rs`, `ShardClock`: it follows the wall clock and only
//! departs from it when the wall clock steps back). Every replica of a chaos run runs on this
//! machine, so they all read the runner's own wall clock: the runner reads it just before it
//! sends a command and just after the reply arrives, and the stamp lies between the two
//! readings, with two refinements.
//!
//! * **The end** is exact: a shard reads its clock at the start of a turn and answers only
//!   after that turn's flush, so every stamp was read before the reply left.
//! * **The start** needs slack. A shard reads its clock once per turn, *before* it takes the
//!   turn's inputs off its queue (`node/src/shard.rs`, `Shard::run`): a command that
//!   arrives while a turn is taking its inputs is stamped with a reading from before it
//!   arrived, so possibly from before the client sent it. Normally the gap is microseconds,
//!   but it grows with the time the shard's thread is kept off the CPU inside that stretch,
//!   so the window starts `slack_ms` before the call. A SIGSTOP inside that stretch holds the
//!   turn for the whole pause: a command sent to a paused replica, or just after it resumed,
//!   may carry a reading from before the pause, so such an operation's window starts
//!   `slack_ms` before the pause began ([`Pauses`]).
//!
//! An operation of unknown outcome has no end of its own; [`crate::history::History::finish`]
//! gives it its key's last return, as the checker would.
use std::sync::Mutex;

/// What is known of one operation's stamp, in whole ms of the wall clock since the run's
/// epoch ([`crate::history::Clock::epoch_ms`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StampWindow {
    /// No stamp is earlier.
    pub lo_ms: i64,
    /// The wall clock just before the command was sent.
    pub call_ms: i64,
    /// No stamp is later: the wall clock just after the reply arrived, or, for an operation
    /// of unknown outcome, its key's last return (known only when the history is finished).
    pub hi_ms: Option<i64>,
}

/// One SIGSTOP of one replica, on the stamps' time base.
#[derive(Clone, Copy, Debug)]
struct Pause {
    node: u16,
    /// Read before the SIGSTOP was sent.
    start_ms: i64,
    /// Read after the SIGCONT was sent or the process killed; `None` while it lasts.
    end_ms: Option<i64>,
}

/// Every pause of the run, as the nemesis makes them.
#[derive(Debug, Default)]
pub struct Pauses {
    spans: Mutex<Vec<Pause>>,
}

impl Pauses {
    /// Notes that `node` is about to be stopped; call it before the SIGSTOP, so that the
    /// recorded start is no later than the real one.
    pub fn begin(&self, node: u16, now_ms: i64) {
        self.spans.lock().expect("not poisoned").push(Pause {
            node,
            start_ms: now_ms,
            end_ms: None,
        });
    }

    /// Notes that `node` runs again (or no longer exists); call it after the SIGCONT or the
    /// kill, so that the recorded end is no earlier than the real one.
    pub fn end(&self, node: u16, now_ms: i64) {
        let mut spans = self.spans.lock().expect("not poisoned");
        for span in spans.iter_mut().filter(|s| s.node == node) {
            span.end_ms.get_or_insert(now_ms);
        }
    }

    /// The window of an operation sent to `node` at `call_ms` whose reply arrived at `ret_ms`
    /// (`None`: its outcome is unknown).
    ///
    /// Why a pause lowers the start only if it began at or before the call and ended no more
    /// than `slack_ms` before it: the stamp is the reading of a turn that took the command in
    /// after it arrived. If that turn read its clock more than `slack_ms` (of running time)
    /// before the call, it must have been stopped in between, by a pause that began after
    /// the reading and ended after the call less `slack_ms` (else the turn would have run
    /// longer than `slack_ms` after it); and a pause that began after the call cannot hold a
    /// reading from before the call less `slack_ms` either. So the stamp is at least the
    /// earliest such pause's start less `slack_ms`.
    pub fn window(
        &self,
        node: u16,
        call_ms: i64,
        ret_ms: Option<i64>,
        slack_ms: i64,
    ) -> StampWindow {
        let spans = self.spans.lock().expect("not poisoned");
        let held_from = spans
            .iter()
            .filter(|s| {
                s.node == node
                    && s.start_ms <= call_ms
                    && s.end_ms.is_none_or(|end| end >= call_ms - slack_ms)
            })
            .map(|s| s.start_ms)
            .min()
            .unwrap_or(call_ms);
        StampWindow {
            lo_ms: held_from.min(call_ms) - slack_ms,
            call_ms,
            hi_ms: ret_ms,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_window_spans_the_call_less_the_slack_to_the_return() {
        let pauses = Pauses::default();
        assert_eq!(
            pauses.window(1, 1000, Some(1010), 5),
            StampWindow {
                lo_ms: 995,
                call_ms: 1000,
                hi_ms: Some(1010)
            }
        );
        assert_eq!(pauses.window(1, 1000, None, 0).hi_ms, None);
    }

    #[test]
    fn a_pause_around_the_call_moves_the_start_to_the_pause() {
        let pauses = Pauses::default();
        pauses.begin(2, 500);
        // Sent while node 2 was stopped.
        assert_eq!(pauses.window(2, 800, Some(3000), 5).lo_ms, 495);
        pauses.end(2, 2500);
        // Sent to node 2 after it resumed, within the slack: its turn may still hold.
        assert_eq!(pauses.window(2, 2503, Some(2600), 5).lo_ms, 495);
        // Later, or to another node, or before the pause: only the slack.
        assert_eq!(pauses.window(2, 2600, Some(2700), 5).lo_ms, 2595);
        assert_eq!(pauses.window(1, 800, Some(900), 5).lo_ms, 795);
        assert_eq!(pauses.window(2, 400, Some(3000), 5).lo_ms, 395);
    }

    #[test]
    fn an_ended_pause_stays_ended() {
        let pauses = Pauses::default();
        pauses.begin(1, 100);
        pauses.end(1, 200);
        pauses.end(1, 900);
        assert_eq!(pauses.window(1, 500, Some(600), 0).lo_ms, 500);
        pauses.begin(1, 1000);
        pauses.end(1, 1100);
        assert_eq!(pauses.window(1, 1050, Some(1200), 0).lo_ms, 1000);
    }
}
