//! The log engine's durable home: its [`Record`]s on a segmented log, its snapshots in the
//! log's snapshot files (seed 002's FullSS: log and snapshot on stable storage, replayed at
//! start).
//!
//! The engine numbers its log by *instance*; the storage layer numbers records by a dense
//! `u64` *index* in the order written. Records of one instance are written at several times (a
//! vote, later a decision), so an instance's records are spread over the log, and the engine's
//! [`Record::Truncate`] cannot be handed down as it is. [`DurableLog`] keeps, for each instance
//! still in the engine's log, the index of its first record, and turns `Truncate { below }`
//! into a prefix deletion at the lowest index anything still needed lives at:
//!
//! * every record of an instance at or above `below` lies at or above that instance's first
//!   index, so none is deleted;
//! * the promised view is written again at the truncation, so its newest record is never below
//!   the cut;
//! * the `Truncate` record itself is written to the log, so a replay learns the log start; the
//!   records of lower instances that lie above the cut are replayed before it and dropped by it.
//!
//! Replaying the kept suffix therefore rebuilds exactly the [`Durable`] state that replaying
//! every record would. A [`Record::Snapshot`] goes to a snapshot file, indexed by the first
//! instance it does not cover; the log is flushed first, so a crash leaves the records in the
//! order written: some prefix of them, and every record of every acknowledged flush.
//!
//! The prefix deletion happens in [`LogStore::flush`], after the records that replace what it
//! deletes (the view, the `Truncate`) are durable.
//!
//! Under EpochSS the log is opened in memory and never written (the engine writes no record
//! then); the epoch goes to an [`EpochFile`] ([`DurableLog::with_epoch_file`]).
//!
//! # A full disk
//! A record the storage refuses for want of space ([`StoreError::is_no_space`]: a new segment
//! or snapshot file cannot be created) is kept, with every record written after it, in a
//! *backlog*, in order; [`LogStore::write`] does not fail for it. [`LogStore::flush`] writes the
//! backlog first and fails with the refusal while any of it remains, so nothing written since
//! is acknowledged as durable, and [`DurableLog::space_short`] says so. A later flush, once
//! space returned, writes the backlog in the order the records came and flushes them with
//! everything before: the log on disk is always a prefix of the records written, as after a
//! crash. Any other error is fail-stop, as before.
use std::collections::{BTreeMap, VecDeque};
use std::path::Path;

use logless_multipaxos::ids::{Epoch, Instance, View};
use logless_multipaxos::persist::{Durable, LogStore, Record};
use logless_multipaxos::wire::{self, DecodeError};
use logless_storage::{Dir, FsDir, LogRecovery, SegmentLog, SegmentLogOptions, StoreError};
use thiserror::Error;

use crate::epoch_file::EpochFile;

/// Why a durable log could not be opened or written.
#[derive(Debug, Error)]
pub enum DurableLogError {
    /// The storage layer failed (I/O, damage, a limit).
    #[error(transparent)]
    Store(#[from] StoreError),
    /// A record or snapshot that passed its checksum does not decode: written by another
    /// version, or not by this engine.
    #[error("log record {index} does not decode: {source}")]
    Decode {
        /// The record's index, or the snapshot's.
        index: u64,
        /// Why.
        source: DecodeError,
    },
    /// The registers in place of mPaxosSM (`crate::log_machine`) could not be opened.
    #[error("the registers in persistent memory: {0}")]
    Registers(#[from] crate::registers_in_place::InPlaceError),
    /// Records that decode but contradict each other (a view going down, two decisions of one
    /// instance): the log is not one this engine wrote.
    #[error("log record {index} contradicts the records before it: {what}")]
    Inconsistent {
        /// The record's index.
        index: u64,
        /// What it contradicts.
        what: &'static str,
    },
}

/// A replica's records on a [`SegmentLog`]: the [`LogStore`] the engine commits through.
pub struct DurableLog<D: Dir = FsDir> {
    log: SegmentLog<D>,
    /// The highest view written.
    view: View,
    /// The log start the engine last truncated to.
    log_start: Instance,
    /// For each instance at or above `log_start` with a record in the log: the index of its
    /// first record.
    first_index: BTreeMap<Instance, u64>,
    /// The prefix deletion the next flush makes, after the records written with it.
    pending_cut: Option<u64>,
    /// Records not written yet because the disk had no space, oldest first (see "A full
    /// disk").
    backlog: VecDeque<Record>,
    scratch: Vec<u8>,
    /// Where the epoch goes, under EpochSS.
    epoch_file: Option<EpochFile>,
}

/// An opened durable log and what it held.
pub struct OpenedLog<D: Dir = FsDir> {
    /// The log, ready for the engine's next records.
    pub log: DurableLog<D>,
    /// The state to restart the replica from.
    pub durable: Durable,
    /// What the storage layer repaired at open.
    pub recovery: LogRecovery,
    /// How long each part of the open took (a restart's start lines).
    pub timings: OpenTimings,
}

/// The parts of [`DurableLog::open`], in the order they run, for a restart's start lines
/// (docs/recovery.md, "Where an mPaxos restart spends its time").
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OpenTimings {
    /// The storage layer's open: every segment scanned and its records' checksums verified,
    /// the snapshot files' checksums verified, µs.
    pub storage_us: u64,
    /// The newest snapshot decoded into a [`Snapshot`](logless_multipaxos::message::Snapshot)
    /// (its state copied out of the medium), µs.
    pub snapshot_us: u64,
    /// The newest snapshot's bytes on the medium (0 without one).
    pub snapshot_bytes: u64,
    /// Every record kept decoded and replayed into the [`Durable`] state, µs.
    pub records_us: u64,
    /// The records replayed.
    pub records: u64,
}

impl DurableLog<FsDir> {
    /// Opens (or creates) the durable log in directory `path`.
    pub fn open(path: &Path, options: SegmentLogOptions) -> Result<OpenedLog, DurableLogError> {
        let started = std::time::Instant::now();
        let (log, recovery) = SegmentLog::open(path, options)?;
        DurableLog::replay(log, recovery, micros_since(started))
    }
}

impl<D: Dir> DurableLog<D> {
    /// Opens the durable log on `dir` (the simulation's or a crash test's directory).
    pub fn open_on(dir: D, options: SegmentLogOptions) -> Result<OpenedLog<D>, DurableLogError> {
        let started = std::time::Instant::now();
        let (log, recovery) = SegmentLog::open_on(dir, options)?;
        DurableLog::replay(log, recovery, micros_since(started))
    }

    /// Rebuilds the durable state from the newest snapshot and every record kept, in order
    /// (the storage layer's open took `storage_us`).
    fn replay(
        log: SegmentLog<D>,
        recovery: LogRecovery,
        storage_us: u64,
    ) -> Result<OpenedLog<D>, DurableLogError> {
        let mut timings = OpenTimings {
            storage_us,
            ..OpenTimings::default()
        };
        let mut durable = Durable::default();
        let started = std::time::Instant::now();
        if let Some((index, bytes)) = log.snapshot() {
            timings.snapshot_bytes = bytes.len() as u64;
            match wire::decode_record(bytes) {
                Ok(Record::Snapshot(snapshot)) => durable.snapshot = Some(snapshot),
                Ok(_) => {
                    return Err(DurableLogError::Inconsistent {
                        index,
                        what: "a snapshot file holds another record",
                    })
                }
                Err(source) => return Err(DurableLogError::Decode { index, source }),
            }
        }
        timings.snapshot_us = micros_since(started);
        let started = std::time::Instant::now();
        let mut first_index = BTreeMap::new();
        for item in log.iter(log.first_index()) {
            let (index, bytes) = item?;
            let record = wire::decode_record(bytes)
                .map_err(|source| DurableLogError::Decode { index, source })?;
            if let Some(what) = durable.contradiction(&record) {
                return Err(DurableLogError::Inconsistent { index, what });
            }
            note_first_index(&mut first_index, &record, index);
            durable.apply(&record);
            timings.records += 1;
        }
        timings.records_us = micros_since(started);
        let opened = DurableLog {
            log,
            view: durable.view,
            log_start: durable.log_start,
            first_index,
            pending_cut: None,
            backlog: VecDeque::new(),
            scratch: Vec::new(),
            epoch_file: None,
        };
        Ok(OpenedLog {
            log: opened,
            durable,
            recovery,
            timings,
        })
    }

    /// This log, writing the epoch of a replica under EpochSS to `file`
    /// ([`LogStore::write_epoch`]).
    pub fn with_epoch_file(self, file: EpochFile) -> DurableLog<D> {
        DurableLog {
            epoch_file: Some(file),
            ..self
        }
    }

    /// The storage underneath (for tests and figures).
    pub fn segment_log(&self) -> &SegmentLog<D> {
        &self.log
    }

    /// The log's directory on the file system and whether its writes are persisted: where a
    /// snapshot can be written off the loop ([`write_snapshot_file`]); `None` for a log in
    /// memory or simulated.
    ///
    /// [`write_snapshot_file`]: logless_storage::segment_log::write_snapshot_file
    pub fn fs_path(&self) -> Option<(std::path::PathBuf, bool)> {
        let (path, persists) = self.log.dir().fs_path()?;
        Some((path.to_path_buf(), persists))
    }

    /// Takes in the snapshot covering every instance below `next_instance` that was written
    /// durably beside the log, off the loop ([`SegmentLog::adopt_snapshot`]): `false` if a
    /// newer one is there already (an installed snapshot written meanwhile).
    pub fn adopt_snapshot(&mut self, next_instance: Instance) -> Result<bool, StoreError> {
        self.log.adopt_snapshot(next_instance.0)
    }

    /// The directory underneath, to arm its crash points (for crash tests and simulations).
    pub fn dir_mut(&mut self) -> &mut D {
        self.log.dir_mut()
    }

    /// Whether records wait in the backlog for space: the last flush failed for want of it,
    /// and nothing written since is durable.
    pub fn space_short(&self) -> bool {
        !self.backlog.is_empty()
    }

    /// Writes the backlog's records, oldest first, as far as space allows.
    fn write_backlog(&mut self) -> Result<(), StoreError> {
        while let Some(record) = self.backlog.pop_front() {
            if let Err(e) = self.write_now(&record) {
                self.backlog.push_front(record);
                return Err(e);
            }
        }
        Ok(())
    }

    fn append(&mut self, record: &Record) -> Result<u64, StoreError> {
        self.scratch.clear();
        wire::encode_record(record, &mut self.scratch);
        let index = self.log.next_index();
        self.log.append(index, &self.scratch)?;
        Ok(index)
    }
}

/// The microseconds since `started`.
fn micros_since(started: std::time::Instant) -> u64 {
    u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX)
}

/// Keeps `first_index` in step with `record`, written at `index`.
fn note_first_index(first_index: &mut BTreeMap<Instance, u64>, record: &Record, index: u64) {
    match record {
        Record::Accepted { instance, .. } | Record::Decided { instance, .. } => {
            first_index.entry(*instance).or_insert(index);
        }
        Record::Truncate { below } => *first_index = first_index.split_off(below),
        Record::View(_) | Record::Snapshot(_) => {}
    }
}

impl<D: Dir> DurableLog<D> {
    /// Writes `record` to the log or the snapshot files.
    fn write_now(&mut self, record: &Record) -> Result<(), StoreError> {
        match record {
            Record::Snapshot(snapshot) => {
                // Everything written before the snapshot becomes durable first, so that a crash
                // keeps the records in the order written.
                self.log.flush()?;
                self.scratch.clear();
                wire::encode_record(record, &mut self.scratch);
                self.log
                    .write_snapshot(snapshot.next_instance.0, &self.scratch)
            }
            Record::Truncate { below } if *below > self.log_start => {
                let view_at = self.append(&Record::View(self.view))?;
                let index = self.append(record)?;
                note_first_index(&mut self.first_index, record, index);
                self.log_start = *below;
                let needed = self.first_index.values().copied().min();
                let cut = needed.map_or(view_at, |i| i.min(view_at));
                self.pending_cut = Some(cut);
                Ok(())
            }
            Record::Truncate { .. } => Ok(()),
            _ => {
                let index = self.append(record)?;
                note_first_index(&mut self.first_index, record, index);
                if let Record::View(view) = record {
                    self.view = self.view.max(*view);
                }
                Ok(())
            }
        }
    }
}

impl<D: Dir> LogStore for DurableLog<D> {
    type Error = StoreError;

    /// Writes `record`, or keeps it in the backlog if records already wait there or the disk
    /// has no space for it (the flush reports that).
    fn write(&mut self, record: &Record) -> Result<(), StoreError> {
        if self.backlog.is_empty() {
            match self.write_now(record) {
                Err(e) if e.is_no_space() => {}
                done => return done,
            }
        }
        self.backlog.push_back(record.clone());
        Ok(())
    }

    fn flush(&mut self) -> Result<(), StoreError> {
        self.write_backlog()?;
        self.log.flush()?;
        if let Some(cut) = self.pending_cut.take() {
            self.log.truncate_prefix(cut)?;
        }
        Ok(())
    }

    /// Writes the epoch to the epoch file. Without one (the node opens one under EpochSS
    /// only), this panics as the trait's default does: a configuration error of the node.
    fn write_epoch(&mut self, epoch: Epoch) -> Result<(), StoreError> {
        match &mut self.epoch_file {
            Some(file) => file.write(epoch),
            None => panic!("a log without an epoch file cannot serve EpochSS ({epoch:?})"),
        }
    }
}
