//! The log engine's state machine as the node runs it: the [`RegisterMachine`] in memory and,
//! under `--recovery pmem-sm` (mPaxosSM), every register it writes kept in place in persistent
//! memory ([`RegistersInPlace`]) as it executes.
//!
//! # Executing in place
//! Each operation's number is its batch's instance and its position in the batch, counted from
//! 1 (0 numbers the expired keys the batch's start sweeps). After the machine executes an
//! operation, every register it writes is written to its record with that number; at the end
//! of each turn that executed anything, before the turn's log records are committed
//! ([`LogMachine::finish_turn`]), the registers are flushed, then the "applied up to" record
//! names the last executed instance and is flushed ([`RegistersInPlace::finish_batch`]). So the registers are never behind a snapshot or a
//! decision the engine persisted after them.
//!
//! # Restarting
//! [`LogMachine::open_in_place`] builds the memory machine from the registers as stored (no
//! snapshot is read), and the engine executes its decided instances after its own snapshot
//! point. The node opens them off its loop: the engine resumes with the stand-in
//! [`LogMachine::awaiting_registers`] and votes meanwhile, and executes once the opened
//! machine is handed over (`LogCore::finish_rebuild`; docs/recovery.md says why that is
//! safe). A batch at or below "applied up to" is not executed again (its replies were given
//! before the crash; the client table gets [`EXECUTED_BEFORE_RESTART`] in their place). A
//! crash in the middle of a turn's flush can leave any subset of its register records durable,
//! so an operation after "applied up to" whose registers already record its number (or a later
//! one) is not executed again either: the stored value is its effect. That is execution
//! idempotent per operation number, and an INCR is never applied twice.
//!
//! This is exact for operations that write one register, which are all the operations taken
//! under mPaxosSM: an operation that writes several (MSET, RENAME, MULTI/EXEC, ...) and WATCH,
//! whose versions are not kept in place, are refused at submission ([`in_place_refusal`]); the
//! redo image that would make them exact is docs/recovery.md's.
//!
//! # Snapshots
//! The engine takes none periodically under mPaxosSM ([`Snapshots::OnDemand`]): the registers
//! are the durable state, and its checkpoints (snapshot records without state) only truncate
//! its log. [`StateMachine::snapshot`] is the memory machine's, a consistent copy taken when a
//! lagging peer asks. [`StateMachine::restore`] (a snapshot installed from a peer) restores the
//! memory machine at once but writes the registers only once the turn's log records, the
//! installed snapshot among them, are durable ([`LogMachine::finish_install`]): behind the
//! store's "installing" mark, cleared with "applied up to". An open that finds the mark, or
//! registers behind the log's snapshot (a crash between the two), installs that snapshot again
//! ([`LogMachine::open_in_place`]); the engine writes no checkpoint in the turn of an install,
//! so that snapshot is the installed one.
//!
//! [`Snapshots::OnDemand`]: logless_multipaxos::config::Snapshots::OnDemand
use std::collections::BTreeSet;
use std::ops::Deref;

use bytes::Bytes;
use logless_commands::value::{Data, Register};
use logless_multipaxos::ids::Instance;
use logless_multipaxos::kv::{Operation, RegisterMachine, Response};
use logless_multipaxos::message::{Request, Snapshot};
use logless_multipaxos::state_machine::{DeferredState, StateMachine};
use std::path::Path;

use logless_storage::media::{DramMedia, FileMedia, Media, MmapMedia};
use logless_storage::slot_store::RecoveryReport;
use logless_storage::{Durability, StoreError, StoreOptions};

use crate::registers_in_place::{InPlaceError, Loaded, OpNumber, RegistersInPlace};

/// The registers' file in the data directory.
pub const REGISTERS_FILE: &str = "registers.slots";

/// The slot store's options for the registers of a node whose values take up to
/// `value_bytes_max` bytes (a key is a client's, one byte of prefix more).
pub fn store_options(durability: Durability, value_bytes_max: usize) -> StoreOptions {
    let mut options = crate::store::store_options(durability, value_bytes_max);
    options.key_bytes_max = logless_commands::KEY_BYTES_MAX + 1;
    options
}

/// The reply the client table keeps for an operation executed before a restart and not again
/// (its reply was given then; a retry of it is answered this).
pub const EXECUTED_BEFORE_RESTART: &str = "ERR this operation was executed before the replica \
     restarted under --recovery pmem-sm, and its reply was not kept; check its effect";

/// What [`RegistersInPlace`] does for the machine, whatever its medium.
trait RegisterStore: Send {
    fn must_apply(&self, key: &[u8], op: OpNumber) -> Result<bool, InPlaceError>;
    fn write(
        &mut self,
        key: &[u8],
        op: OpNumber,
        register: &Register,
    ) -> Result<bool, InPlaceError>;
    fn remove(&mut self, key: &[u8]) -> Result<(), InPlaceError>;
    fn begin_install(&mut self) -> Result<(), InPlaceError>;
    fn installing(&self) -> bool;
    fn applied(&self) -> Option<u64>;
    fn finish_batch(&mut self, instance: Option<u64>) -> Result<(), InPlaceError>;
    /// The store itself (for tests and simulations, which reach its simulated medium).
    fn any_mut(&mut self) -> &mut dyn std::any::Any;
}

impl<M: Media + Send + 'static> RegisterStore for RegistersInPlace<M> {
    fn any_mut(&mut self) -> &mut dyn std::any::Any {
        self
    }
    fn must_apply(&self, key: &[u8], op: OpNumber) -> Result<bool, InPlaceError> {
        RegistersInPlace::must_apply(self, key, op)
    }
    fn write(
        &mut self,
        key: &[u8],
        op: OpNumber,
        register: &Register,
    ) -> Result<bool, InPlaceError> {
        RegistersInPlace::write(self, key, op, register)
    }
    fn remove(&mut self, key: &[u8]) -> Result<(), InPlaceError> {
        RegistersInPlace::remove(self, key)
    }
    fn begin_install(&mut self) -> Result<(), InPlaceError> {
        RegistersInPlace::begin_install(self)
    }
    fn installing(&self) -> bool {
        RegistersInPlace::installing(self)
    }
    fn applied(&self) -> Option<u64> {
        RegistersInPlace::applied(self)
    }
    fn finish_batch(&mut self, instance: Option<u64>) -> Result<(), InPlaceError> {
        RegistersInPlace::finish_batch(self, instance)
    }
}

/// The registers in place and the execution's position in them.
struct InPlace {
    store: Box<dyn RegisterStore>,
    /// The batch executing.
    instance: u64,
    /// The next operation's position in it (from 1).
    position: u32,
    /// Whether the batch executing was applied before the restart (it is not executed again).
    applied_before: bool,
    /// "Applied up to" as the store was opened: batches at or below it are not executed again.
    applied_at_open: Option<u64>,
    /// The highest operation number a register carried at open: operations up to it are
    /// checked against their registers' numbers before they execute.
    written_at_open: Option<OpNumber>,
    /// Keys with an expiry, by expiry, as written: where the batch start's sweep is looked for.
    expiring: BTreeSet<(u64, Bytes)>,
    /// Keys deleted since the last turn's end (their records say so, with the number).
    deleted: Vec<Bytes>,
    /// Whether anything was written since the last turn's end.
    dirty: bool,
    /// A snapshot was installed into the memory machine and is not yet written over the
    /// registers ([`LogMachine::finish_install`]); nothing is written in place until then.
    install_pending: bool,
    /// The first failure of the store (the node stops on it at the end of the turn).
    failed: Option<InPlaceError>,
}

impl InPlace {
    /// Writes `register` as `key`'s after `op`, noting a deletion or an expiry.
    fn write(&mut self, key: &Bytes, op: OpNumber, register: &Register) {
        if self.install_pending {
            // The install writes the whole machine, this write's effect with it.
            return;
        }
        self.dirty = true;
        if let Err(e) = self.store.write(key, op, register) {
            self.failed.get_or_insert(e);
            return;
        }
        if register.data == Data::Absent && register.fence == 0 {
            self.deleted.push(key.clone());
        }
        if let Some(at) = register.expires_at_ms {
            self.expiring.insert((at, key.clone()));
        }
    }

    /// Whether `op` was applied to every register in `keys` before the restart (only
    /// operations up to the highest number stored at open can have been).
    fn applied_before_restart(&mut self, keys: &[Bytes], op: OpNumber) -> bool {
        if keys.is_empty() || self.written_at_open.is_none_or(|w| op > w) {
            return false;
        }
        let mut applied = true;
        for key in keys {
            match self.store.must_apply(key, op) {
                Ok(must) => applied &= !must,
                Err(e) => {
                    self.failed.get_or_insert(e);
                }
            }
        }
        applied
    }
}

/// The node's state machine of the log: the register map in memory, and under mPaxosSM the
/// registers in place (see the module documentation). Reads go to the map ([`Deref`]).
pub struct LogMachine {
    memory: RegisterMachine,
    in_place: Option<InPlace>,
    /// A stand-in under mPaxosSM while the registers are being opened off the loop
    /// ([`LogMachine::awaiting_registers`]): empty, never executed, and counted as in place
    /// (operations that cannot be executed in place are refused meanwhile).
    awaiting_registers: bool,
    /// How long the last [`StateMachine::snapshot_deferred`] took to copy the state (µs).
    last_copy_us: std::cell::Cell<u64>,
}

impl std::fmt::Debug for LogMachine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LogMachine")
            .field("keys", &self.memory.map().len())
            .field("in_place", &self.in_place.is_some())
            .field("awaiting_registers", &self.awaiting_registers)
            .finish_non_exhaustive()
    }
}

impl Deref for LogMachine {
    type Target = RegisterMachine;

    fn deref(&self) -> &RegisterMachine {
        &self.memory
    }
}

impl From<RegisterMachine> for LogMachine {
    /// The machine in memory only (every mode but mPaxosSM).
    fn from(memory: RegisterMachine) -> LogMachine {
        LogMachine {
            memory,
            in_place: None,
            awaiting_registers: false,
            last_copy_us: std::cell::Cell::new(0),
        }
    }
}

impl LogMachine {
    /// The machine over the registers in place `store` opened with `registers` (what
    /// [`RegistersInPlace::open_on`] gave), `memory` an empty machine with the node's limits,
    /// which takes the registers' map as it is ([`RegisterMachine::restore_map`]: no snapshot
    /// encoded and decoded in between).
    /// `snapshot` is the engine's persisted snapshot: if the store says an install was under
    /// way, it is installed again (none: the registers are emptied). Fails if the registers are
    /// behind the snapshot (they are written before the engine persists anything after them,
    /// so that is a store that is not this log's).
    pub fn open_in_place<M: Media + Send + 'static>(
        mut memory: RegisterMachine,
        store: RegistersInPlace<M>,
        registers: Loaded,
        snapshot: Option<&Snapshot>,
    ) -> Result<LogMachine, InPlaceError> {
        let snapshot_last = snapshot.and_then(|s| s.next_instance.0.checked_sub(1));
        let applied = store.applied();
        if store.installing() || snapshot_last > applied {
            // An install a crash interrupted, before or after its mark: done again from the
            // log's snapshot, which is the installed one (see "Snapshots" above).
            let empty;
            let state = match snapshot {
                Some(s) if s.state.is_empty() => {
                    return Err(InPlaceError::Undecodable {
                        key: "applied".into(),
                        message: format!(
                            "the registers (applied up to {applied:?}, installing: {}) are \
                            behind the log's checkpoint (up to {snapshot_last:?}), which holds \
                            no state to install: they are not this log's",
                            store.installing()
                        ),
                    })
                }
                Some(s) => &s.state,
                None => {
                    empty = RegisterMachine::default().snapshot();
                    &empty
                }
            };
            let mut machine = LogMachine::from(memory);
            machine.in_place = Some(InPlace::new(Box::new(store), Loaded::default()));
            machine.restore(state);
            machine.write_install(snapshot_last)?;
            return Ok(machine);
        }
        let mut registers = registers;
        memory.restore_map(std::mem::take(&mut registers.map));
        let mut in_place = InPlace::new(Box::new(store), registers);
        in_place.applied_at_open = applied;
        Ok(LogMachine {
            memory,
            in_place: Some(in_place),
            awaiting_registers: false,
            last_copy_us: std::cell::Cell::new(0),
        })
    }

    /// [`LogMachine::open_in_place`] on the registers' file at `path` (created if needed),
    /// mapped and persisted as `options` say.
    pub fn open_file(
        path: &Path,
        options: StoreOptions,
        memory: RegisterMachine,
        snapshot: Option<&Snapshot>,
    ) -> Result<(LogMachine, RecoveryReport), InPlaceError> {
        let media = match options.durability.persist_by() {
            Some(persist_by) => FileMedia::Mapped(MmapMedia::open(path, persist_by)?),
            None => FileMedia::Dram(DramMedia::new()),
        };
        let (store, registers, report) = RegistersInPlace::open_on(media, options)?;
        let machine = LogMachine::open_in_place(memory, store, registers, snapshot)?;
        Ok((machine, report))
    }

    /// How long the last copy of the state for a snapshot written off the loop took (µs): what
    /// the loop pays for it.
    pub fn last_copy_us(&self) -> u64 {
        self.last_copy_us.get()
    }

    /// The stand-in of a replica restarted under mPaxosSM whose registers are still being
    /// opened (off the loop, [`LogMachine::open_file`]): the engine resumes with it and votes
    /// at once, executes nothing until the opened machine is handed over
    /// ([`crate::log_turn::LogCore::finish_rebuild`]), and never reads it. It counts as in
    /// place ([`LogMachine::in_place`]).
    pub fn awaiting_registers() -> LogMachine {
        LogMachine {
            awaiting_registers: true,
            ..LogMachine::from(RegisterMachine::default())
        }
    }

    /// Whether this is the stand-in of [`LogMachine::awaiting_registers`].
    pub fn is_awaiting_registers(&self) -> bool {
        self.awaiting_registers
    }

    /// Whether the registers are kept in place (mPaxosSM), or are being opened.
    pub fn in_place(&self) -> bool {
        self.in_place.is_some() || self.awaiting_registers
    }

    /// The registers in place, if they are on a medium of type `M` (for simulations, which
    /// crash their medium).
    pub fn in_place_store_mut<M: Media + Send + 'static>(
        &mut self,
    ) -> Option<&mut RegistersInPlace<M>> {
        self.in_place.as_mut()?.store.any_mut().downcast_mut()
    }

    /// Ends a turn of the log, before its records are committed: if anything was executed
    /// since the last, makes the registers durable and then records every batch below
    /// `executed_below` as applied (so that no checkpoint the turn commits is ahead of it),
    /// then drops the records of the keys deleted meanwhile (no re-execution can reach them
    /// now). Fails with the store's first failure.
    pub fn finish_turn(&mut self, executed_below: Instance) -> Result<(), StoreError> {
        let Some(in_place) = &mut self.in_place else {
            return Ok(());
        };
        let result = (|| {
            if let Some(e) = in_place.failed.take() {
                return Err(e);
            }
            if in_place.install_pending {
                return Ok(());
            }
            // Never lowered: after a restart the engine may learn again decisions whose batches
            // the registers already hold (they are skipped).
            let applied = executed_below
                .0
                .checked_sub(1)
                .max(in_place.store.applied());
            // Batches that wrote nothing (reads, no-ops) move the mark too: the engine's
            // checkpoints never pass it.
            let moved = applied != in_place.store.applied();
            if !moved && !in_place.dirty && !in_place.store.installing() {
                return Ok(());
            }
            in_place.store.finish_batch(applied)?;
            in_place.dirty = false;
            for key in std::mem::take(&mut in_place.deleted) {
                if !self.memory.map().contains_key(&key) {
                    in_place.store.remove(&key)?;
                }
            }
            Ok(())
        })();
        result.map_err(InPlaceError::into_store_error)
    }

    /// Writes a snapshot installed during the turn over the registers, once the turn's log
    /// records (the snapshot among them) are durable: the "installing" mark first, then every
    /// register of the memory machine, then "applied up to" (every batch below
    /// `executed_below`) and the mark's removal. Nothing if no install is pending.
    pub fn finish_install(&mut self, executed_below: Instance) -> Result<(), StoreError> {
        self.write_install(executed_below.0.checked_sub(1))
            .map_err(InPlaceError::into_store_error)
    }

    fn write_install(&mut self, applied: Option<u64>) -> Result<(), InPlaceError> {
        let Some(in_place) = &mut self.in_place else {
            return Ok(());
        };
        if !in_place.install_pending {
            return Ok(());
        }
        in_place.install_pending = false;
        in_place.store.begin_install()?;
        let installed = OpNumber {
            instance: 0,
            index: 0,
        };
        for (key, register) in self.memory.map() {
            in_place.write(key, installed, register);
        }
        if let Some(e) = in_place.failed.take() {
            return Err(e);
        }
        in_place.store.finish_batch(applied)?;
        in_place.dirty = false;
        in_place.deleted.clear();
        Ok(())
    }

    /// Notes a snapshot restored into the memory machine: the registers are written over at
    /// [`LogMachine::finish_install`], and nothing executed before the install counts any
    /// more for the execution after a restart.
    fn restore_in_place(&mut self) {
        let Some(in_place) = &mut self.in_place else {
            return;
        };
        in_place.install_pending = true;
        in_place.deleted.clear();
        in_place.expiring.clear();
        in_place.written_at_open = None;
        in_place.applied_at_open = None;
    }

    /// Sweeps as the memory machine's batch start did: the keys it removed are written
    /// deleted, numbered as the batch's operation 0.
    fn note_sweep(&mut self, stamp_ms: u64) {
        let Some(in_place) = &mut self.in_place else {
            return;
        };
        let due: Vec<(u64, Bytes)> = in_place
            .expiring
            .range(..(stamp_ms.saturating_add(1), Bytes::new()))
            .cloned()
            .collect();
        let sweep = OpNumber {
            instance: in_place.instance,
            index: 0,
        };
        for (at, key) in due {
            match self.memory.map().get(&key) {
                // Not swept yet (the sweep is bounded per batch), or written since.
                Some(register) if register.expires_at_ms == Some(at) => continue,
                Some(_) => {}
                None => in_place.write(&key, sweep, &Register::default()),
            }
            in_place.expiring.remove(&(at, key));
        }
    }
}

impl InPlace {
    /// The execution's position over `store`, whose open found `registers` (their map gone
    /// to the machine in memory).
    fn new(store: Box<dyn RegisterStore>, registers: Loaded) -> InPlace {
        let Loaded {
            deleted,
            expiring,
            written_max: written_at_open,
            ..
        } = registers;
        InPlace {
            store,
            instance: 0,
            position: 1,
            applied_before: false,
            applied_at_open: None,
            written_at_open,
            expiring,
            deleted,
            dirty: false,
            install_pending: false,
            failed: None,
        }
    }
}

impl InPlaceError {
    /// The failure as the log's turn reports it (the node stops on it).
    pub fn into_store_error(self) -> StoreError {
        match self {
            InPlaceError::Store(e) => e,
            InPlaceError::Undecodable { .. } => StoreError::Corrupt {
                what: "a register in place does not decode",
                offset_bytes: 0,
            },
        }
    }
}

/// The keys `operation` may write (none for reads).
fn keys_written(operation: &Operation) -> Vec<Bytes> {
    match operation {
        Operation::Command { command, .. } if command.is_read_only() => Vec::new(),
        Operation::Command { key, .. } => vec![key.clone()],
        Operation::MSet(pairs) | Operation::MSetNx(pairs) => {
            pairs.iter().map(|(k, _)| k.clone()).collect()
        }
        Operation::Rename { from, to }
        | Operation::RenameNx { from, to }
        | Operation::SMove { from, to, .. }
        | Operation::Copy { from, to, .. } => vec![from.clone(), to.clone()],
        Operation::Del(keys) => keys.clone(),
        Operation::Exists(_) | Operation::MGet(_) | Operation::Watch(_) => Vec::new(),
        Operation::Transaction(operations) | Operation::WatchedTransaction { operations, .. } => {
            operations.iter().flat_map(keys_written).collect()
        }
    }
}

/// Why `operation` is not taken under mPaxosSM, if it is not: it writes more than one key, or
/// is WATCH (see the module documentation).
pub fn in_place_refusal(operation: &Operation) -> Option<String> {
    let name = operation.name().to_uppercase();
    let refused = match operation {
        Operation::Watch(_) | Operation::WatchedTransaction { .. } => true,
        _ => {
            let mut keys = keys_written(operation);
            keys.sort();
            keys.dedup();
            keys.len() > 1
        }
    };
    refused.then(|| {
        format!(
            "ERR {name} is not available under --recovery pmem-sm yet: its registers in \
             persistent memory are executed again exactly only for operations that write one key \
             (docs/recovery.md); not applied"
        )
    })
}

impl StateMachine for LogMachine {
    fn begin_batch(&mut self, instance: Instance, stamp_ms: u64) {
        let Some(in_place) = &mut self.in_place else {
            return self.memory.begin_batch(instance, stamp_ms);
        };
        in_place.instance = instance.0;
        in_place.position = 1;
        in_place.applied_before = in_place.applied_at_open.is_some_and(|a| instance.0 <= a);
        if in_place.applied_before {
            // The memory machine already holds this batch's effects (and later ones).
            return;
        }
        self.memory.begin_batch(instance, stamp_ms);
        self.note_sweep(stamp_ms);
    }

    fn execute(&mut self, request: &Request) -> Bytes {
        let Some(in_place) = &mut self.in_place else {
            return self.memory.execute(request);
        };
        let op = OpNumber {
            instance: in_place.instance,
            index: in_place.position,
        };
        in_place.position += 1;
        if in_place.applied_before {
            return Response::error(EXECUTED_BEFORE_RESTART.to_owned()).encode();
        }
        let keys = Operation::decode(&request.payload)
            .map(|operation| keys_written(&operation))
            .unwrap_or_default();
        if in_place.applied_before_restart(&keys, op) {
            // Its effect is stored and loaded: the memory machine only moves to the next
            // position (the seeds of later operations), with an operation that changes nothing.
            self.memory.apply(Operation::Watch(Vec::new()));
            return Response::error(EXECUTED_BEFORE_RESTART.to_owned()).encode();
        }
        let reply = self.memory.execute(request);
        for key in &keys {
            let register = self.memory.get(key).clone();
            in_place.write(key, op, &register);
        }
        reply
    }

    fn snapshot(&self) -> Bytes {
        self.memory.snapshot()
    }

    /// A clone of the memory machine (its keys and string values are shared buffers: a clone
    /// copies the map's nodes, not the values), encoded when asked, off the loop. The time the
    /// clone took is kept for the log ([`LogMachine::last_copy_us`]).
    fn snapshot_deferred(&self) -> DeferredState {
        let started = std::time::Instant::now();
        let memory = self.memory.clone();
        self.last_copy_us.set(started.elapsed().as_micros() as u64);
        DeferredState::new(move || memory.snapshot())
    }

    /// "Applied up to" as the registers were opened, or the batch of the highest operation
    /// number a register carried then if later (a crash among a turn's register writes keeps
    /// part of a batch past the mark), until a snapshot is installed: the effects of the
    /// batches up to it are held from the open on, executed or not by the engine since (a crash
    /// can lose decisions whose batches the registers hold).
    fn holds_through(&self) -> Option<Instance> {
        let in_place = self.in_place.as_ref()?;
        let written = in_place.written_at_open.map(|op| op.instance);
        in_place.applied_at_open.max(written).map(Instance)
    }

    fn restore(&mut self, snapshot: &Bytes) {
        // The node drops snapshots sent to a replica whose registers are being opened
        // (`LogCore`): restored here, they would never reach the registers.
        debug_assert!(
            !self.awaiting_registers,
            "a snapshot restored while the registers are being opened"
        );
        self.memory.restore(snapshot);
        self.restore_in_place();
    }
}

#[cfg(test)]
mod tests {
    use logless_commands::command::{Command, Condition, Expiry, SetArgs};
    use logless_multipaxos::config::{Config, Recovery, Snapshots};
    use logless_multipaxos::ids::NodeId;
    use logless_multipaxos::message::{Batch, Message, SnapshotChunk};
    use logless_storage::{SegmentLogOptions, SimDir, SimMedia};
    use std::collections::BTreeMap;

    use super::*;
    use crate::durable_log::DurableLog;
    use crate::log_turn::{LogAnswer, LogCore, LogOutlet};

    #[derive(Default)]
    struct Answers(Vec<(u32, LogAnswer)>);

    /// What a core sent and answered.
    #[derive(Default)]
    struct Collected {
        sent: Vec<(NodeId, Vec<Message>)>,
    }

    impl LogOutlet<u32> for Collected {
        fn send(&mut self, to: NodeId, messages: Vec<Message>) {
            self.sent.push((to, messages));
        }
        fn answer(&mut self, _: u32, _: LogAnswer) {}
        fn mono_us(&self) -> u64 {
            0
        }
    }

    impl LogOutlet<u32> for Answers {
        fn send(&mut self, _: NodeId, _: Vec<logless_multipaxos::message::Message>) {}
        fn answer(&mut self, reply: u32, answer: LogAnswer) {
            self.0.push((reply, answer));
        }
        fn mono_us(&self) -> u64 {
            0
        }
    }

    fn options() -> StoreOptions {
        let mut options = StoreOptions::new(Durability::Emulp);
        options.key_bytes_max = 16;
        options.record_bytes_max = 256;
        options.file_bytes_max = 1 << 20;
        options.append_chunk_bytes = 0;
        options
    }

    /// Small segments: the simulated directory holds them in memory.
    fn log_options() -> SegmentLogOptions {
        let mut options = SegmentLogOptions::new(Durability::Emulp);
        options.segment_bytes = 1 << 20;
        options.record_bytes_max = 64 << 10;
        options
    }

    fn config() -> Config {
        let mut config = Config::new(vec![NodeId(1)], NodeId(1));
        config.recovery = Recovery::Pmem;
        config.snapshots = Snapshots::OnDemand;
        config
    }

    fn incr(key: &str) -> Operation {
        Operation::Command {
            key: Bytes::from(key.to_owned()),
            command: Command::IncrBy(1),
        }
    }

    fn set(key: &str, value: &str) -> Operation {
        Operation::Command {
            key: Bytes::from(key.to_owned()),
            command: Command::Set(SetArgs {
                value: Bytes::from(value.to_owned()),
                condition: Condition::Always,
                get: false,
                expiry: Expiry::Clear,
            }),
        }
    }

    fn del(key: &str) -> Operation {
        Operation::Command {
            key: Bytes::from(key.to_owned()),
            command: Command::Del,
        }
    }

    /// The turns' operations: counters incremented in several batches, a value set, a counter
    /// deleted and counted again.
    fn turns() -> Vec<Vec<Operation>> {
        vec![
            vec![incr("a"), incr("b"), incr("a")],
            vec![set("s", "x"), incr("c")],
            vec![incr("a"), del("b"), incr("c"), incr("c")],
            vec![incr("b"), incr("a"), set("s", "y")],
        ]
    }

    type Core = LogCore<u32, SimDir>;

    /// A core over `machine` and `log`, started as start number `incarnation` (a restart's
    /// is new, as the node's: its client ids are not those of the life before).
    fn core_on(
        machine: LogMachine,
        log: crate::durable_log::OpenedLog<SimDir>,
        incarnation: u32,
    ) -> Core {
        LogCore::recover(
            config(),
            machine,
            &log.durable,
            log.log,
            incarnation,
            10_000,
            1_000_000,
            0,
        )
    }

    /// Runs `turns` on `core`, each until answered.
    fn run(core: &mut Core, turns: &[Vec<Operation>]) {
        let mut clock = 0u64;
        let mut answers = Answers::default();
        let mut reply = 0;
        for ops in turns {
            let before = answers.0.len();
            for op in ops {
                core.submit(op, reply);
                reply += 1;
            }
            while answers.0.len() < before + ops.len() {
                clock += 5;
                assert!(clock < 5_000, "not answered");
                core.start_turn(1_000_000 + clock, clock * 1_000);
                core.finish_turn(&mut answers).unwrap();
            }
        }
        assert!(answers.0.iter().all(|(_, a)| a.is_ok()), "{:?}", answers.0);
    }

    /// One more turn, in which a restarted core executes what it had not.
    fn settle(core: &mut Core) {
        core.start_turn(1_000_000, 0);
        core.finish_turn(&mut Answers::default()).unwrap();
    }

    fn fresh() -> (LogMachine, crate::durable_log::OpenedLog<SimDir>) {
        let log = DurableLog::open_on(SimDir::new(), log_options()).unwrap();
        let (store, registers, _) = RegistersInPlace::open_on(SimMedia::new(), options()).unwrap();
        let machine =
            LogMachine::open_in_place(RegisterMachine::default(), store, registers, None).unwrap();
        (machine, log)
    }

    /// A fresh core that ran [`turns`].
    fn ran() -> Core {
        let (machine, log) = fresh();
        let mut core = core_on(machine, log, 1);
        run(&mut core, &turns());
        core
    }

    /// The registers `machine`'s store holds now, reopened.
    fn stored_map(media: &SimMedia) -> BTreeMap<Bytes, Register> {
        let (_, registers, _) =
            RegistersInPlace::open_on(SimMedia::from_image(media.now().live_image()), options())
                .unwrap();
        registers
            .map
            .into_iter()
            .filter(|(_, r)| r.data != Data::Absent)
            .collect()
    }

    /// The registers in place as a crash right now leaves `media`, opened against the log's
    /// `snapshot`.
    fn reopened_in_place(media: &SimMedia, snapshot: Option<&Snapshot>) -> LogMachine {
        let (store, registers, _) =
            RegistersInPlace::open_on(SimMedia::from_image(media.now().live_image()), options())
                .unwrap();
        LogMachine::open_in_place(RegisterMachine::default(), store, registers, snapshot).unwrap()
    }

    /// What a new leader in `view` sends a replica that decided nothing: its Prepare and its
    /// proposal of `batch` for the first instance.
    fn takes_over_and_proposes(view: logless_multipaxos::ids::View, batch: Batch) -> Vec<Message> {
        vec![
            Message::Prepare {
                view,
                first_undecided: Instance(0),
            },
            Message::Propose {
                view,
                instance: Instance(0),
                batch,
            },
        ]
    }

    /// The first view after `after` that `leader` leads among `nodes`.
    fn led_by(nodes: &[NodeId], after: u64, leader: NodeId) -> logless_multipaxos::ids::View {
        (after + 1..)
            .map(logless_multipaxos::ids::View)
            .find(|v| v.leader(nodes) == leader)
            .unwrap()
    }

    /// The log's directory as a power failure right now leaves it (nothing unsynced kept).
    fn log_image_of(core: &Core) -> SimDir {
        core.log().segment_log().dir().durable_image()
    }

    /// The store's medium under a core (the tests' machines are on [`SimMedia`]).
    fn media_of(core: &mut Core) -> SimMedia {
        core.state_machine_mut().sim_media()
    }

    impl LogMachine {
        /// The registers' store, on the simulated medium.
        fn sim_store(&mut self) -> &mut RegistersInPlace<SimMedia> {
            self.in_place_store_mut()
                .expect("in place, on a simulated medium")
        }

        /// A copy of the registers' simulated medium.
        fn sim_media(&mut self) -> SimMedia {
            self.sim_store().media().clone()
        }

        /// Makes the registers' medium crash after `n` more operations.
        fn arm_crash(&mut self, n: usize) {
            self.sim_store().media_mut().crash_after_ops = Some(n);
        }
    }

    /// Crashes the registers' medium after every media operation of the run in turn, restarts
    /// from every image a power failure could leave (none, all or every other unpersisted
    /// sector; the log complete, as its peers would give it), and compares the map with the
    /// run without crash. Returns the differences.
    fn every_crash(ignore_op_numbers: bool) -> Vec<String> {
        let mut core = ran();
        let expected = core.replica().state_machine().map().clone();
        assert_eq!(stored_map(&media_of(&mut core)), expected);
        assert_eq!(expected[&Bytes::from_static(b"a")].data, Data::Int(4));
        assert_eq!(expected[&Bytes::from_static(b"c")].data, Data::Int(3));
        assert_eq!(expected[&Bytes::from_static(b"b")].data, Data::Int(1));
        let total_ops = media_of(&mut core).ops;
        let log_image = log_image_of(&core);

        let mut violations = Vec::new();
        for n in 0..=total_ops {
            let (mut machine, log) = fresh();
            machine.arm_crash(n);
            let mut core = core_on(machine, log, 1);
            run(&mut core, &turns());
            let at_crash = media_of(&mut core).at_crash().clone();
            let dirty = at_crash.dirty_sectors();
            let every_other: Vec<usize> = dirty.iter().copied().step_by(2).collect();
            for kept in [Vec::new(), dirty.clone(), every_other] {
                let media = SimMedia::from_image(at_crash.crash_image(&kept, None));
                let (mut store, registers, _) =
                    RegistersInPlace::open_on(media, options()).unwrap();
                if ignore_op_numbers {
                    store.ignore_op_numbers();
                }
                let log = DurableLog::open_on(log_image.clone(), log_options()).unwrap();
                let machine = LogMachine::open_in_place(
                    RegisterMachine::default(),
                    store,
                    registers,
                    log.durable.snapshot.as_ref(),
                )
                .unwrap();
                let mut core = core_on(machine, log, 2);
                settle(&mut core);
                let got = core.replica().state_machine().map();
                if *got != expected {
                    violations.push(format!(
                        "crash after op {n}, kept {kept:?}: {got:?}, expected {expected:?}"
                    ));
                } else if stored_map(&media_of(&mut core)) != expected {
                    violations.push(format!("crash after op {n}: the store differs"));
                }
                if ignore_op_numbers && !violations.is_empty() {
                    return violations;
                }
            }
        }
        violations
    }

    #[test]
    fn a_crash_at_every_media_operation_applies_every_operation_once() {
        let violations = every_crash(false);
        assert!(violations.is_empty(), "{violations:#?}");
    }

    #[test]
    fn ignoring_the_operation_numbers_is_caught() {
        assert!(
            !every_crash(true).is_empty(),
            "re-executing without the operation numbers went unnoticed"
        );
    }

    #[test]
    fn a_restart_executes_only_after_applied_and_an_interrupted_install_is_redone() {
        let mut core = ran();
        let expected = core.replica().state_machine().map().clone();
        let snapshot = Snapshot {
            next_instance: core.replica().executed_below(),
            stamp_ms: 0,
            state: core.replica().state_machine().snapshot(),
            clients: Default::default(),
        };
        // Restarted on the registers as they are: nothing to execute, the state at once.
        let image = media_of(&mut core).now().live_image();
        let (store, registers, _) =
            RegistersInPlace::open_on(SimMedia::from_image(image.clone()), options()).unwrap();
        let applied = store.applied();
        assert_eq!(applied, Some(core.replica().executed_below().0 - 1));
        let machine =
            LogMachine::open_in_place(RegisterMachine::default(), store, registers, None).unwrap();
        assert_eq!(*machine.map(), expected);

        // An install interrupted after its mark: the next open installs the snapshot again.
        let (mut store, _, _) =
            RegistersInPlace::open_on(SimMedia::from_image(image), options()).unwrap();
        store.begin_install().unwrap();
        store
            .write(
                b"junk",
                OpNumber {
                    instance: 0,
                    index: 0,
                },
                &Register::default(),
            )
            .unwrap();
        let image = store.media().now().live_image();
        let (store, registers, _) =
            RegistersInPlace::open_on(SimMedia::from_image(image), options()).unwrap();
        assert!(store.installing());
        let machine = LogMachine::open_in_place(
            RegisterMachine::default(),
            store,
            registers,
            Some(&snapshot),
        )
        .unwrap();
        assert_eq!(*machine.map(), expected);
        let mut machine = machine;
        assert_eq!(stored_map(&machine.sim_media()), expected);

        // Operations writing several keys, and WATCH, are refused with the reason.
        let mset = Operation::MSet(vec![
            (Bytes::from_static(b"a"), Bytes::from_static(b"1")),
            (Bytes::from_static(b"b"), Bytes::from_static(b"2")),
        ]);
        let refusal = in_place_refusal(&mset).unwrap();
        assert!(refusal.contains("MSET is not available under --recovery pmem-sm"));
        assert!(in_place_refusal(&Operation::Watch(vec![Bytes::from_static(b"a")])).is_some());
        assert!(in_place_refusal(&incr("a")).is_none());
        assert!(in_place_refusal(&Operation::MGet(vec![Bytes::from_static(b"a")])).is_none());
    }

    /// A snapshot installed from a peer reaches the registers only after the turn's log
    /// records are committed ([`LogMachine::finish_install`]); a crash between the commit and
    /// the install is redone from the log's snapshot at the next open, and registers behind a
    /// checkpoint (which holds no state) are refused.
    #[test]
    fn an_install_waits_for_the_log_and_a_crash_before_it_is_redone_from_the_log() {
        let mut core = ran();
        let before = core.replica().state_machine().map().clone();
        let applied = core.replica().executed_below().0 - 1;
        let mut peer = RegisterMachine::default();
        peer.apply(set("z", "peer"));
        let snapshot = Snapshot {
            next_instance: Instance(applied + 10),
            stamp_ms: 0,
            state: peer.snapshot(),
            clients: Default::default(),
        };

        // Restored during a turn: the registers keep the state before until the log is durable.
        let mut machine = std::mem::replace(
            core.state_machine_mut(),
            LogMachine::from(RegisterMachine::default()),
        );
        machine.restore(&snapshot.state);
        machine.finish_turn(snapshot.next_instance).unwrap();
        assert_eq!(*machine.map(), *peer.map());
        let image = machine.sim_media().now().live_image();
        assert_eq!(
            stored_map(&machine.sim_media()),
            before,
            "written before the commit"
        );

        // A crash there, the snapshot durable in the log: the next open installs it.
        let (store, registers, _) =
            RegistersInPlace::open_on(SimMedia::from_image(image.clone()), options()).unwrap();
        assert_eq!(store.applied(), Some(applied));
        let mut reopened = LogMachine::open_in_place(
            RegisterMachine::default(),
            store,
            registers,
            Some(&snapshot),
        )
        .unwrap();
        assert_eq!(*reopened.map(), *peer.map());
        assert_eq!(stored_map(&reopened.sim_media()), *peer.map());
        assert_eq!(reopened.sim_store().applied(), Some(applied + 9));

        // Registers behind a checkpoint: nothing to install from, refused.
        let checkpoint = Snapshot {
            state: Bytes::new(),
            ..snapshot.clone()
        };
        let (store, registers, _) =
            RegistersInPlace::open_on(SimMedia::from_image(image), options()).unwrap();
        let refused = LogMachine::open_in_place(
            RegisterMachine::default(),
            store,
            registers,
            Some(&checkpoint),
        );
        assert!(refused.is_err(), "registers behind a checkpoint were taken");

        // Once committed, the install writes the registers over.
        machine.finish_install(snapshot.next_instance).unwrap();
        assert_eq!(stored_map(&machine.sim_media()), *peer.map());
        assert_eq!(machine.sim_store().applied(), Some(applied + 9));
        assert!(!machine.sim_store().installing());
    }

    /// A replica restarted with the stand-in while its registers open off the loop (as the
    /// node does) takes part at once: the operation submitted meanwhile is decided, and not
    /// executed nor answered; one that cannot be executed in place is refused. Once the
    /// opened machine is handed over, the decided operation is executed once, on the state of
    /// the registers, and written in place.
    #[test]
    fn a_restart_decides_while_the_registers_open_and_serves_once_they_are_handed_over() {
        let mut core = ran();
        let mut expected = core.replica().state_machine().map().clone();
        let media = media_of(&mut core);
        let log = DurableLog::open_on(log_image_of(&core), log_options()).unwrap();
        let snapshot = log.durable.snapshot.clone();
        let decided_before = core.status().decided_instance;
        // Started again (its client ids new), the stand-in in place of its registers.
        let mut core = LogCore::recover(
            config(),
            LogMachine::awaiting_registers(),
            &log.durable,
            log.log,
            2,
            10_000,
            1_000_000,
            0,
        );
        assert!(core.awaiting_registers());
        assert_eq!(core.status().state, "rebuilding");
        let executed_below = core.status().executed_below;
        let mset = Operation::MSet(vec![
            (Bytes::from_static(b"a"), Bytes::from_static(b"1")),
            (Bytes::from_static(b"b"), Bytes::from_static(b"2")),
        ]);
        let mut answers = Answers::default();
        core.submit(&incr("a"), 100);
        core.submit(&mset, 101);
        let mut step = 0u64;
        while core.status().decided_instance <= decided_before {
            step += 1;
            assert!(step < 1_000, "nothing decided while the registers open");
            core.start_turn(1_000_000 + step * 5, step * 5_000);
            core.finish_turn(&mut answers).unwrap();
        }
        for _ in 0..10 {
            step += 1;
            core.start_turn(1_000_000 + step * 5, step * 5_000);
            core.finish_turn(&mut answers).unwrap();
        }
        assert_eq!(
            answers.0,
            vec![(101, Ok(Response::error(in_place_refusal(&mset).unwrap())))],
            "only the refusal before the registers are there"
        );
        assert_eq!(
            core.status().executed_below,
            executed_below,
            "executed on the stand-in"
        );
        assert_eq!(
            stored_map(&media),
            expected,
            "the registers written meanwhile"
        );

        let machine = reopened_in_place(&media, snapshot.as_ref());
        step += 1;
        core.start_turn(1_000_000 + step * 5, step * 5_000);
        core.finish_rebuild(machine);
        core.finish_turn(&mut answers).unwrap();
        assert!(!core.awaiting_registers());
        assert_eq!(core.status().state, "serving");
        assert_eq!(answers.0.len(), 2, "{:?}", answers.0);
        assert_eq!(answers.0[1], (100, Ok(Response::Int(5))));
        expected.insert(
            Bytes::from_static(b"a"),
            Register {
                data: Data::Int(5),
                ..expected[&Bytes::from_static(b"a")].clone()
            },
        );
        assert_eq!(*core.replica().state_machine().map(), expected);
        assert_eq!(stored_map(&media_of(&mut core)), expected);
    }

    /// While its registers open, a replica of three promises to a new leader and votes for its
    /// proposals, and drops the snapshots its peers send it (they would reach the stand-in,
    /// never the registers); the same snapshot is installed, and written in place, once the
    /// opened machine was handed over.
    #[test]
    fn a_replica_whose_registers_open_votes_and_installs_no_snapshot_until_handed_over() {
        let nodes = vec![NodeId(1), NodeId(2), NodeId(3)];
        let log = DurableLog::open_on(SimDir::new(), log_options()).unwrap();
        let mut config = Config::new(nodes.clone(), NodeId(1));
        config.recovery = Recovery::Pmem;
        config.snapshots = Snapshots::OnDemand;
        let mut core: Core = LogCore::recover(
            config,
            LogMachine::awaiting_registers(),
            &log.durable,
            log.log,
            1,
            10_000,
            1_000_000,
            0,
        );
        let view = led_by(&nodes, core.view().0, NodeId(2));
        let mut out = Collected::default();
        core.start_turn(1_000_005, 5_000);
        core.receive(NodeId(2), takes_over_and_proposes(view, Batch::noop()));
        core.finish_turn(&mut out).unwrap();
        let to_leader: Vec<&Message> = out
            .sent
            .iter()
            .filter(|(to, _)| *to == NodeId(2))
            .flat_map(|(_, m)| m)
            .collect();
        assert!(
            to_leader
                .iter()
                .any(|m| matches!(m, Message::Promise { view: v, .. } if *v == view)),
            "no promise: {to_leader:?}"
        );
        assert!(
            to_leader.iter().any(|m| matches!(
                m,
                Message::Accept { view: v, instance: Instance(0) } if *v == view
            )),
            "no vote: {to_leader:?}"
        );

        // A peer's snapshot, ahead of everything here: dropped while the registers open.
        let mut peer = RegisterMachine::default();
        peer.apply(set("z", "peer"));
        let snapshot = Snapshot {
            next_instance: Instance(10),
            stamp_ms: 0,
            state: peer.snapshot(),
            clients: Default::default(),
        };
        let response = Message::CatchUpResponse {
            view,
            snapshot: Some(SnapshotChunk::cut(&snapshot, 0, 1 << 20)),
            decided: Vec::new(),
        };
        core.start_turn(1_000_010, 10_000);
        core.receive(NodeId(2), vec![response.clone()]);
        core.finish_turn(&mut out).unwrap();
        assert_eq!(core.status().snapshots_installed, 0);
        assert!(core.awaiting_registers());
        assert_eq!(core.status().state, "rebuilding");

        let (machine, _) = fresh();
        core.start_turn(1_000_015, 15_000);
        core.finish_rebuild(machine);
        core.finish_turn(&mut out).unwrap();
        assert!(!core.awaiting_registers());
        core.start_turn(1_000_020, 20_000);
        core.receive(NodeId(2), vec![response]);
        core.finish_turn(&mut out).unwrap();
        assert_eq!(core.status().snapshots_installed, 1);
        assert_eq!(core.replica().executed_below(), Instance(10));
        assert_eq!(stored_map(&media_of(&mut core)), *peer.map());
    }

    /// Under on-demand snapshots the engine truncates its log at checkpoints, which hold no
    /// state: a restart reads a short log, restores nothing and has the state from the
    /// registers at once.
    #[test]
    fn checkpoints_truncate_the_log_and_a_restart_restores_no_snapshot() {
        let (machine, log) = fresh();
        let mut core = LogCore::recover(
            Config {
                snapshot_log_bytes_min: 64,
                ..config()
            },
            machine,
            &log.durable,
            log.log,
            1,
            10_000,
            1_000_000,
            0,
        );
        let many: Vec<Vec<Operation>> = (0..20).flat_map(|_| turns()).collect();
        run(&mut core, &many);
        let status = core.replica().stats().clone();
        assert!(status.checkpoints_taken >= 10, "{status:?}");
        assert_eq!(status.snapshots_taken, 0);
        let expected = core.replica().state_machine().map().clone();
        let media = media_of(&mut core);
        let log_image = log_image_of(&core);
        let log = DurableLog::open_on(log_image, log_options()).unwrap();
        let checkpoint = log.durable.snapshot.clone().expect("a checkpoint");
        assert!(checkpoint.state.is_empty());
        assert!(log.durable.log_start.0 > 40, "{:?}", log.durable.log_start);
        assert!(
            log.durable.log.len() < 20,
            "{} instances kept",
            log.durable.log.len()
        );
        let machine = reopened_in_place(&media, Some(&checkpoint));
        assert_eq!(*machine.map(), expected);
        let mut core = core_on(machine, log, 2);
        settle(&mut core);
        assert_eq!(*core.replica().state_machine().map(), expected);
    }

    /// A follower of three that votes for a Propose does not execute it in the turn that casts
    /// the vote, although the leader's and its own make a majority: a crash before the turn's
    /// log records are durable would lose the vote and keep the registers written in place.
    /// The batch was never chosen then (only the leader's vote is durable): a new leader with
    /// the third replica decides another batch in that instance, which the restarted follower
    /// must execute (issue 25: seeds 1208, 1227, 2314, 2833 and 2984 of the whole-node
    /// simulation; fails if the engine counts the vote before it is durable).
    #[test]
    fn registers_in_place_hold_no_batch_decided_by_a_vote_the_crash_lost() {
        let nodes = vec![NodeId(1), NodeId(2), NodeId(3)];
        let mut config = Config::new(nodes.clone(), NodeId(1));
        config.recovery = Recovery::Pmem;
        config.snapshots = Snapshots::OnDemand;
        let recover = |machine: LogMachine, log: crate::durable_log::OpenedLog<SimDir>, n| {
            let core: Core = LogCore::recover(
                config.clone(),
                machine,
                &log.durable,
                log.log,
                n,
                10_000,
                1_000_000,
                0,
            );
            core
        };
        let batch_of = |operation: Operation, client: u64| {
            Batch::stamped(
                1_000_000,
                vec![Request {
                    client: logless_multipaxos::ids::ClientId(client),
                    seq: logless_multipaxos::ids::RequestSeq(1),
                    payload: operation.encode(),
                }],
            )
        };
        let (machine, log) = fresh();
        let mut core = recover(machine, log, 1);
        let log_before = log_image_of(&core);
        let view = led_by(&nodes, core.view().0, NodeId(2));
        let mut out = Collected::default();
        core.start_turn(1_000_005, 5_000);
        core.receive(
            NodeId(2),
            takes_over_and_proposes(view, batch_of(incr("a"), 7)),
        );
        // The crash lands in the turn's commit: none of its log records are durable.
        core.log_mut().dir_mut().arm_crash_point(0);
        let _ = core.finish_turn(&mut out);
        let media = media_of(&mut core);

        let log = DurableLog::open_on(log_before, log_options()).unwrap();
        let machine = reopened_in_place(&media, log.durable.snapshot.as_ref());
        let mut core = recover(machine, log, 2);
        let view = led_by(&nodes, view.0, NodeId(3));
        core.start_turn(1_000_010, 10_000);
        core.receive(
            NodeId(3),
            takes_over_and_proposes(view, batch_of(incr("b"), 8)),
        );
        core.finish_turn(&mut out).unwrap();
        // Its vote durable, the next turn executes the decision.
        core.start_turn(1_000_015, 15_000);
        core.finish_turn(&mut out).unwrap();
        assert_eq!(core.status().executed_below, 1);
        let counter = |key: &'static str| {
            let map = core.replica().state_machine().map();
            map.get(&Bytes::from_static(key.as_bytes()))
                .map(|r| r.data.clone())
        };
        assert_eq!(
            (counter("a"), counter("b")),
            (None, Some(Data::Int(1))),
            "the follower holds the batch that was not chosen, not the one decided"
        );
    }

    /// A reopened machine holds what its registers hold, past what the engine executed: up to
    /// "applied up to", or up to the batch of a register written past it by a turn a crash
    /// cut short (no snapshot is served from it before the engine executed past that batch);
    /// nothing once a snapshot is installed over it.
    #[test]
    fn a_reopened_machine_says_which_batches_its_registers_hold() {
        let (store, _, _) = RegistersInPlace::open_on(SimMedia::new(), options()).unwrap();
        let mut store = store;
        let register = |n| Register {
            data: Data::Int(n),
            ..Register::default()
        };
        let a = Bytes::from_static(b"a");
        let b = Bytes::from_static(b"b");
        store
            .write(
                &a,
                OpNumber {
                    instance: 2,
                    index: 1,
                },
                &register(1),
            )
            .unwrap();
        store.finish_batch(Some(3)).unwrap();
        let reopen = |store: &RegistersInPlace<SimMedia>| {
            let media = SimMedia::from_image(store.media().now().live_image());
            let (store, registers, _) = RegistersInPlace::open_on(media, options()).unwrap();
            LogMachine::open_in_place(RegisterMachine::default(), store, registers, None).unwrap()
        };
        assert_eq!(reopen(&store).holds_through(), Some(Instance(3)));
        // Part of batch 5 durable, the mark not moved (as a crash among the turn's writes
        // leaves it).
        store
            .write(
                &b,
                OpNumber {
                    instance: 5,
                    index: 2,
                },
                &register(2),
            )
            .unwrap();
        store.finish_batch(Some(3)).unwrap();
        let mut machine = reopen(&store);
        assert_eq!(machine.holds_through(), Some(Instance(5)));
        machine.restore(&RegisterMachine::default().snapshot());
        assert_eq!(machine.holds_through(), None);
        assert_eq!(
            LogMachine::from(RegisterMachine::default()).holds_through(),
            None
        );
    }
}
