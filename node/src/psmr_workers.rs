//! The psmr engine's worker threads: `k` real threads driving the engine's execution plan
//! ([`logless_psmr::plan`], Algorithm 1 of seed 004) against the service.
//!
//! The replica's sans-IO core ([`Replica`]) sits behind one mutex that the event loop
//! ([`crate::psmr_loop`]) and the workers share; the service sits behind a read-write lock. A
//! worker locks the core only to ask the plan for its next step and to report a command done;
//! it executes with the core unlocked:
//!
//! * **parallel mode** (a command of its own group): under the service's read lock, through
//!   [`ParallelService::execute_shared`], at the same time as the other workers' own groups'
//!   commands (C-G makes them independent);
//! * **synchronous mode** (a `g_all` command, run by worker 0 once every worker has reached the
//!   barrier): under the write lock, while the others wait at the barrier; a parallel command
//!   the service cannot run shared takes the write lock too.
//!
//! A worker with nothing to do, or waiting at a barrier, sleeps on a condition variable of its
//! own (paired with the core's mutex), and is woken only once the plan has something for it
//! ([`logless_psmr::plan::Plan::is_runnable`]): by the loop after a turn that delivered
//! commands, by the last worker to arrive at a barrier (which wakes worker 0), or by worker 0
//! after a synchronous command (which wakes the workers it released into commands of their
//! own). Whether a worker sleeps is read and written under the core's mutex, and a worker
//! marks itself asleep in the same critical section in which it found nothing to do, so no
//! wake-up is lost; one that would change nothing is not sent. Worker 0 runs a sequence of
//! `g_all` commands delivered to every worker alone: the plan moves the waiting workers from
//! one barrier to the next without waking them. Every replica executes every command; the
//! worker reports the reply of a command to the loop only if this replica's client pool lent
//! its client id (the client's connection is here).
//!
//! Every command's reply also goes into the engine's client table of its group
//! ([`Replica::answered`]), before the worker reports the command done, so that a worker at a
//! barrier has recorded all it executed. A snapshot request ([`logless_psmr::cut`]) executes
//! nothing: worker 0 takes its cut from the engine and, if the replica keeps snapshots
//! ([`Shared::with_snapshots`]), serialises the service at it (every other worker waits at its
//! barrier) and leaves both for the loop to persist ([`Shared::take_cuts`], then
//! [`crate::psmr_snapshot`]).
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard, RwLock};
use std::thread::JoinHandle;
use std::time::Duration;

use bytes::Bytes;
use logless_multipaxos::ids::{ClientId, RequestSeq};
use logless_psmr::cut::{is_snapshot, Cut};
use logless_psmr::plan::{Delivered, Mode, Step};
use logless_psmr::replica::Replica;
use logless_service::{ParallelService, Wire, WorkerId};

use crate::client_pool::ClientPool;

/// How long a sleeping worker waits before it polls again on its own (a guard; every change
/// that concerns it wakes it sooner).
const IDLE_POLL_MS: u64 = 50;

/// What the event loop and the workers share.
pub struct Shared<S> {
    replica: Mutex<Replica<S>>,
    /// Each worker's condition variable, on `replica`'s mutex.
    wakers: Vec<Condvar>,
    /// Whether each worker sleeps on its condition variable; read and written only with
    /// `replica` locked.
    sleeping: Vec<AtomicBool>,
    service: RwLock<S>,
    stopping: AtomicBool,
    /// Commands executed, in either mode.
    pub executed: AtomicU64,
    /// Commands executed in synchronous mode.
    pub executed_synchronous: AtomicU64,
    /// Serialises the service for a snapshot, if the replica keeps snapshots.
    state_of: Option<fn(&S) -> Vec<u8>>,
    /// Restores the service from a snapshot's state, if the replica keeps snapshots.
    restore_of: Option<RestoreOf<S>>,
    /// Cuts taken with the service's state, not yet handed to the loop.
    taken: Mutex<Vec<TakenCut>>,
}

/// Restores a fresh service from a snapshot's state, or says why the state does not decode.
pub type RestoreOf<S> = fn(&mut S, &[u8]) -> Result<(), String>;

/// A snapshot worker 0 took: the snapshot request's number, its cut and the service's state.
#[derive(Debug)]
pub struct TakenCut {
    /// The snapshot request's number.
    pub seq: u64,
    /// Each group's position and client table.
    pub cut: Cut,
    /// The service's state at the cut.
    pub state: Vec<u8>,
}

/// A command executed for a client of this replica: its id, number and encoded reply.
#[derive(Debug)]
pub struct Executed {
    /// The client id the pool lent.
    pub client: ClientId,
    /// Its request number.
    pub seq: RequestSeq,
    /// The service's reply, encoded.
    pub reply: Bytes,
}

impl<S: ParallelService> Shared<S> {
    /// The core and the service the workers execute, shared.
    pub fn new(replica: Replica<S>, service: S) -> Shared<S> {
        let workers = usize::from(replica.plan().workers());
        Shared {
            replica: Mutex::new(replica),
            wakers: (0..workers).map(|_| Condvar::new()).collect(),
            sleeping: (0..workers).map(|_| AtomicBool::new(false)).collect(),
            service: RwLock::new(service),
            stopping: AtomicBool::new(false),
            executed: AtomicU64::new(0),
            executed_synchronous: AtomicU64::new(0),
            state_of: None,
            restore_of: None,
            taken: Mutex::new(Vec::new()),
        }
    }

    /// This replica keeps snapshots: at each snapshot request worker 0 serialises the service
    /// with `state_of` (without, a snapshot request is a no-op and its cut is dropped), and a
    /// cut installed from a peer's group snapshot restores it with `restore_of` (see
    /// [`Shared::install`]).
    pub fn with_snapshots(
        mut self,
        state_of: fn(&S) -> Vec<u8>,
        restore_of: RestoreOf<S>,
    ) -> Shared<S> {
        self.state_of = Some(state_of);
        self.restore_of = Some(restore_of);
        self
    }

    /// Installs the cut `replica` (the core, locked) waits for, if no worker executes a command
    /// now: the engine moves its merges, groups and client tables to the cut
    /// ([`Replica::install`]) and the service is restored from the cut's state, both before
    /// the core is unlocked, so no worker executes anything in between. Returns the cut.
    ///
    /// # Panics
    /// If the state does not decode (a peer outside the fault model: the transport checksums
    /// every piece), or this replica keeps no snapshots (it has no way to restore).
    pub fn install(&self, replica: &mut Replica<S>) -> Option<Cut> {
        let durable = replica.install()?;
        let restore_of = self
            .restore_of
            .expect("a cut to install on a replica that keeps no snapshots");
        let mut service = self.service.write().expect("a psmr worker panicked");
        // The services' restore replaces their whole state.
        restore_of(&mut service, &durable.state)
            .unwrap_or_else(|e| panic!("the state of a cut a peer sent: {e}"));
        Some(durable.cut)
    }

    /// The snapshots taken since the last call, oldest first.
    pub fn take_cuts(&self) -> Vec<TakenCut> {
        std::mem::take(&mut *self.taken.lock().expect("a psmr worker panicked"))
    }

    /// The core, locked. A worker that panicked holding it leaves the plan half-stepped: the
    /// replica cannot go on, so neither does the caller.
    pub fn replica(&self) -> MutexGuard<'_, Replica<S>> {
        self.replica.lock().expect("a psmr worker panicked")
    }

    /// Wakes the sleeping workers the plan has something for; `replica` is the core, locked.
    pub fn wake(&self, replica: &Replica<S>) {
        for (w, sleeping) in self.sleeping.iter().enumerate() {
            let worker = WorkerId(u16::try_from(w).expect("workers counted in u16"));
            if sleeping.load(Ordering::Relaxed) && replica.is_runnable(worker) {
                sleeping.store(false, Ordering::Relaxed);
                self.wakers[w].notify_one();
            }
        }
    }

    /// Sleeps `worker` until woken (or [`IDLE_POLL_MS`] passed), the core unlocked meanwhile.
    fn sleep<'a>(
        &self,
        replica: MutexGuard<'a, Replica<S>>,
        worker: WorkerId,
    ) -> MutexGuard<'a, Replica<S>> {
        let w = usize::from(worker.0);
        self.sleeping[w].store(true, Ordering::Relaxed);
        let timeout = Duration::from_millis(IDLE_POLL_MS);
        let replica = (self.wakers[w].wait_timeout(replica, timeout))
            .expect("a psmr worker panicked")
            .0;
        self.sleeping[w].store(false, Ordering::Relaxed);
        replica
    }

    /// The service's digest now (commands running meanwhile may or may not show in it).
    pub fn digest(&self) -> logless_service::Digest {
        self.service
            .read()
            .expect("a psmr worker panicked")
            .digest()
    }

    /// Runs `f` on the service, under its read lock.
    pub fn with_service<R>(&self, f: impl FnOnce(&S) -> R) -> R {
        f(&self.service.read().expect("a psmr worker panicked"))
    }

    /// Tells the workers to stop once they finish their current command.
    pub fn stop(&self) {
        self.stopping.store(true, Ordering::SeqCst);
        let _guard = self.replica();
        self.wakers.iter().for_each(Condvar::notify_one);
    }

    /// Executes an encoded command in `mode` (see the module docs).
    fn execute(&self, mode: Mode, payload: &[u8]) -> Vec<u8> {
        if mode == Mode::Parallel {
            if let Ok(command) = S::Command::decode(payload) {
                let service = self.service.read().expect("a psmr worker panicked");
                if let Some(reply) = service.execute_shared(&command) {
                    return reply.encode_to_vec();
                }
            }
        }
        let mut service = self.service.write().expect("a psmr worker panicked");
        service.execute_encoded(payload)
    }
}

/// Starts `workers` worker threads on `shared`; each reports the commands it executes for
/// clients of node `me` through `report`.
pub fn spawn<S, F>(
    shared: &std::sync::Arc<Shared<S>>,
    workers: u16,
    me: u16,
    report: F,
) -> std::io::Result<Vec<JoinHandle<()>>>
where
    S: ParallelService + Send + Sync + 'static,
    F: Fn(Executed) + Clone + Send + 'static,
{
    (0..workers)
        .map(|w| {
            let shared = shared.clone();
            let report = report.clone();
            std::thread::Builder::new()
                .name(format!("psmr-worker-{w}"))
                .spawn(move || run(&shared, WorkerId(w), me, &report))
        })
        .collect()
}

/// One worker's loop: poll the plan, execute, report, until stopped.
fn run<S: ParallelService>(
    shared: &Shared<S>,
    worker: WorkerId,
    me: u16,
    report: &impl Fn(Executed),
) {
    let mut replica = shared.replica();
    while !shared.stopping.load(Ordering::SeqCst) {
        match replica.poll(worker) {
            Step::Execute { mode, command } => {
                drop(replica);
                replica = shared.run_command(worker, mode, command, me, report);
            }
            Step::Wait => {
                // Arrived at the barrier (or still there): worker 0 may now have everyone.
                shared.wake(&replica);
                replica = shared.sleep(replica, worker);
            }
            Step::Idle => replica = shared.sleep(replica, worker),
        }
    }
}

impl<S: ParallelService> Shared<S> {
    /// Executes the command of `worker`'s [`Step::Execute`] with the core unlocked, reports
    /// it if its client is node `me`'s, and tells the plan it is done; returns the core locked
    /// again.
    fn run_command(
        &self,
        worker: WorkerId,
        mode: Mode,
        command: Delivered,
        me: u16,
        report: &impl Fn(Executed),
    ) -> MutexGuard<'_, Replica<S>> {
        if is_snapshot(&command.request) {
            self.take_snapshot(&command);
            let mut replica = self.replica();
            replica.executed(worker);
            self.wake(&replica);
            return replica;
        }
        let reply = Bytes::from(self.execute(mode, &command.request.payload));
        self.executed.fetch_add(1, Ordering::Relaxed);
        if mode == Mode::Synchronous {
            self.executed_synchronous.fetch_add(1, Ordering::Relaxed);
        }
        let request = &command.request;
        if ClientPool::<()>::node_of(request.client) == me {
            report(Executed {
                client: request.client,
                seq: request.seq,
                reply: reply.clone(),
            });
        }
        let mut replica = self.replica();
        replica.answered(&command, reply);
        replica.executed(worker);
        if mode == Mode::Synchronous {
            // The barrier is released: those with commands of their own go on.
            self.wake(&replica);
        }
        replica
    }

    /// The cut of snapshot request `command`, with the service's state at it if this replica
    /// keeps snapshots. Worker 0 runs it in synchronous mode (under SMR, alone): no other
    /// command runs meanwhile, so the service holds exactly what the cut covers.
    fn take_snapshot(&self, command: &Delivered) {
        let cut = self.replica().take_cut(&command.request);
        let (Some(cut), Some(state_of)) = (cut, self.state_of) else {
            return;
        };
        let state = state_of(&self.service.read().expect("a psmr worker panicked"));
        let taken = TakenCut {
            seq: command.request.seq.0,
            cut,
            state,
        };
        self.taken
            .lock()
            .expect("a psmr worker panicked")
            .push(taken);
    }

    /// The workers a step would move now (see [`logless_psmr::plan::Plan::is_runnable`]).
    pub fn runnable(&self) -> Vec<WorkerId> {
        let replica = self.replica();
        let plan = replica.plan();
        (0..plan.workers())
            .map(WorkerId)
            .filter(|&w| replica.is_runnable(w))
            .collect()
    }

    /// One poll of `worker` on the caller's thread, its command executed (and reported through
    /// `report` if its client is node `me`'s) if the plan gives it one: what a worker thread
    /// does between two sleeps, for a simulation that steps the workers itself, in an order
    /// of its choosing, with no thread. Returns whether the worker executed a command.
    pub fn step(&self, worker: WorkerId, me: u16, report: &impl Fn(Executed)) -> bool {
        let step = self.replica().poll(worker);
        match step {
            Step::Execute { mode, command } => {
                drop(self.run_command(worker, mode, command, me, report));
                true
            }
            Step::Wait | Step::Idle => false,
        }
    }
}
