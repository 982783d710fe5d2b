//! The log engine's registers kept in place in persistent memory: the store under mPaxosSM
//! (issue 25, seed 002's "state machine in persistent memory").
//!
//! Each register is one failure-atomic slot-store record under its key (prefixed by
//! [`REGISTER_PREFIX`]), carrying the [`OpNumber`] of the operation that last wrote it and the
//! register's encoding; one more record, [`APPLIED_KEY`], says up to which instance every batch
//! was applied. A batch's records are written in place as its operations execute and flushed,
//! then the "applied up to" record is written and flushed ([`RegistersInPlace::finish_batch`]):
//! two flushes, since persistent memory may write cache lines back in any order and a mark
//! flushed with the records could be durable before them.
//!
//! A crash can leave any subset of a batch's register records durable. Execution after a
//! restart starts again at the first batch not recorded as applied, and is idempotent per
//! operation number: [`RegistersInPlace::write`] does not apply an operation at or below the
//! number its register records, so an INCR is never applied twice.
//!
//! A snapshot installed over the registers (a replica catching up past its peers' log) is
//! written behind the [`INSTALLING_KEY`] mark: [`RegistersInPlace::begin_install`] persists it
//! first, [`RegistersInPlace::finish_batch`] clears it with the install's "applied up to". An
//! open that finds it ([`RegistersInPlace::installing`]) must install again before serving.
//!
//! ```text
//! record of a register:     instance u64 LE | index u32 LE | Register::encode
//! record of APPLIED_KEY:    instance u64 LE (every batch up to and including it applied)
//! record of INSTALLING_KEY: empty
//! ```
//!
//! The replica executing through it is `crate::log_machine` (`--recovery pmem-sm`).
use std::collections::{BTreeMap, BTreeSet};

use bytes::Bytes;
use logless_commands::value::{Data, Register};
use logless_storage::media::Media;
use logless_storage::slot_store::RecoveryReport;
use logless_storage::{SlotStore, StoreError, StoreOptions};

/// The first byte of every register's store key (the others are the register's key).
pub const REGISTER_PREFIX: u8 = b'r';
/// The store key of the "applied up to" record: no register's key, which all start with
/// [`REGISTER_PREFIX`].
pub const APPLIED_KEY: &[u8] = b"applied";
/// The store key of the "installing" mark: present while a snapshot is being written over the
/// registers ([`RegistersInPlace::begin_install`]), so that a crash in the middle is seen at
/// the next open and the install redone, never the half-written state served.
pub const INSTALLING_KEY: &[u8] = b"installing";

/// An operation's number: its batch's instance and its index in the batch. Ordered as the log
/// executes them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct OpNumber {
    /// The log instance of the batch.
    pub instance: u64,
    /// The operation's position in the batch.
    pub index: u32,
}

/// The bytes of a register's record before its encoding.
const OP_NUMBER_BYTES: usize = 12;

/// Why the registers could not be opened or written.
#[derive(Debug, thiserror::Error)]
pub enum InPlaceError {
    /// The slot store failed.
    #[error("{0}")]
    Store(#[from] StoreError),
    /// A record does not decode: the store is not mPaxosSM's, or it is damaged.
    #[error("record {key:?} does not decode: {message}")]
    Undecodable {
        /// The record's store key.
        key: String,
        /// Why.
        message: String,
    },
}

/// A register as stored: the operation that last wrote it, and its value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stored {
    /// The operation that last wrote it.
    pub written_by: OpNumber,
    /// The register.
    pub register: Register,
}

/// The registers as an open found them, already in the form the machine in memory takes them
/// ([`logless_multipaxos::kv::RegisterMachine::restore_map`]): built in the one pass over the
/// store's records that decodes them, with no copy in between.
#[derive(Debug, Default)]
pub struct Loaded {
    /// Every register by key, but for deleted ones without a fencing token.
    pub map: BTreeMap<Bytes, Register>,
    /// The keys whose record says deleted without a fencing token (not in `map`): their
    /// records go once no re-execution can reach them.
    pub deleted: Vec<Bytes>,
    /// The keys in `map` with an expiry, by expiry.
    pub expiring: BTreeSet<(u64, Bytes)>,
    /// The highest operation number a record carries (`None`: no register).
    pub written_max: Option<OpNumber>,
}

impl Loaded {
    /// Takes one register as stored under `key`.
    fn take(&mut self, key: Bytes, stored: Stored) {
        self.written_max = self.written_max.max(Some(stored.written_by));
        let register = stored.register;
        if register.data == Data::Absent && register.fence == 0 {
            self.deleted.push(key);
            return;
        }
        if let Some(at) = register.expires_at_ms {
            self.expiring.insert((at, key.clone()));
        }
        self.map.insert(key, register);
    }
}

/// The registers in place, over the slot store on `M`.
pub struct RegistersInPlace<M: Media> {
    store: SlotStore<M>,
    /// Every batch up to and including this instance applied (`None`: none yet).
    applied: Option<u64>,
    /// Whether an install was begun and not finished.
    installing: bool,
    /// Injected bug for the tests and simulations: apply operations whatever number their
    /// register records.
    #[cfg(any(test, feature = "fault-injection"))]
    ignore_op_numbers: bool,
}

fn store_key(key: &[u8]) -> Vec<u8> {
    let mut k = Vec::with_capacity(key.len() + 1);
    k.push(REGISTER_PREFIX);
    k.extend_from_slice(key);
    k
}

fn undecodable(key: &[u8], message: impl ToString) -> InPlaceError {
    InPlaceError::Undecodable {
        key: String::from_utf8_lossy(key).into_owned(),
        message: message.to_string(),
    }
}

fn decode_stored(key: &[u8], record: &[u8]) -> Result<Stored, InPlaceError> {
    if record.len() < OP_NUMBER_BYTES {
        return Err(undecodable(key, "shorter than an operation number"));
    }
    let instance = u64::from_le_bytes(record[..8].try_into().expect("8 bytes"));
    let index = u32::from_le_bytes(record[8..12].try_into().expect("4 bytes"));
    let register = Register::decode(&record[OP_NUMBER_BYTES..]).map_err(|e| undecodable(key, e))?;
    Ok(Stored {
        written_by: OpNumber { instance, index },
        register,
    })
}

impl<M: Media> RegistersInPlace<M> {
    /// Opens the registers on `media`, giving every stored register as the machine in memory
    /// takes them ([`Loaded`]). Scans every record (the slot store's recovery does), so
    /// opening takes time in the state's size.
    pub fn open_on(
        media: M,
        options: StoreOptions,
    ) -> Result<(RegistersInPlace<M>, Loaded, RecoveryReport), InPlaceError> {
        let (store, report) = SlotStore::open_on(media, options)?;
        let applied = match store.get(APPLIED_KEY) {
            None => None,
            Some(record) => Some(u64::from_le_bytes(
                record
                    .try_into()
                    .map_err(|_| undecodable(APPLIED_KEY, "not 8 bytes"))?,
            )),
        };
        let installing = store.get(INSTALLING_KEY).is_some();
        let mut registers = Loaded::default();
        for (key, record) in store.iter() {
            if key == APPLIED_KEY || key == INSTALLING_KEY {
                continue;
            }
            match key.split_first() {
                Some((&REGISTER_PREFIX, name)) => {
                    registers.take(Bytes::copy_from_slice(name), decode_stored(key, record)?);
                }
                _ => return Err(undecodable(key, "neither a register nor the applied mark")),
            }
        }
        let opened = RegistersInPlace {
            store,
            applied,
            installing,
            #[cfg(any(test, feature = "fault-injection"))]
            ignore_op_numbers: false,
        };
        Ok((opened, registers, report))
    }

    /// The last instance every batch up to which was applied (`None`: none yet). Execution
    /// after a restart starts at the one after it.
    pub fn applied(&self) -> Option<u64> {
        self.applied
    }

    /// Whether an install was begun and not finished before the store was opened (or since):
    /// the registers may hold part of a snapshot, and must be installed again.
    pub fn installing(&self) -> bool {
        self.installing
    }

    /// The operation that last wrote `key`, as stored (its record's first bytes only).
    pub fn written_by(&self, key: &[u8]) -> Result<Option<OpNumber>, InPlaceError> {
        let key = store_key(key);
        match self.store.get(&key) {
            None => Ok(None),
            Some(record) if record.len() < OP_NUMBER_BYTES => {
                Err(undecodable(&key, "shorter than an operation number"))
            }
            Some(record) => Ok(Some(OpNumber {
                instance: u64::from_le_bytes(record[..8].try_into().expect("8 bytes")),
                index: u32::from_le_bytes(record[8..12].try_into().expect("4 bytes")),
            })),
        }
    }

    /// Whether operation `op` must still be applied to `key`: its register records an older
    /// operation (or none). An operation at or below the recorded number was applied before a
    /// crash, and is not applied again.
    pub fn must_apply(&self, key: &[u8], op: OpNumber) -> Result<bool, InPlaceError> {
        #[cfg(any(test, feature = "fault-injection"))]
        if self.ignore_op_numbers {
            return Ok(true);
        }
        Ok(self.written_by(key)?.is_none_or(|recorded| recorded < op))
    }

    /// Writes `register` in place as `key`'s value after operation `op`, if `op` must still be
    /// applied to it ([`RegistersInPlace::must_apply`]); returns whether it wrote. Durable at
    /// the next [`RegistersInPlace::finish_batch`].
    pub fn write(
        &mut self,
        key: &[u8],
        op: OpNumber,
        register: &Register,
    ) -> Result<bool, InPlaceError> {
        if !self.must_apply(key, op)? {
            return Ok(false);
        }
        let mut record = Vec::with_capacity(OP_NUMBER_BYTES + register.encoded_len());
        record.extend_from_slice(&op.instance.to_le_bytes());
        record.extend_from_slice(&op.index.to_le_bytes());
        register.encode(&mut record);
        self.store.put(&store_key(key), &record)?;
        Ok(true)
    }

    /// Removes `key`'s record (a deleted register whose deletion every later execution is
    /// past: nothing re-executed can reach it).
    pub fn remove(&mut self, key: &[u8]) -> Result<(), InPlaceError> {
        self.store.remove(&store_key(key))?;
        Ok(())
    }

    /// Begins writing a snapshot over the registers: persists the "installing" mark, then
    /// removes every register record. The snapshot's registers are written next
    /// ([`RegistersInPlace::write`]) and the install ends with
    /// [`RegistersInPlace::finish_batch`] at the snapshot's last instance.
    pub fn begin_install(&mut self) -> Result<(), InPlaceError> {
        self.store.put(INSTALLING_KEY, &[])?;
        self.store.flush()?;
        self.installing = true;
        let keys: Vec<Vec<u8>> = self
            .store
            .iter()
            .map(|(key, _)| key.to_vec())
            .filter(|key| key.first() == Some(&REGISTER_PREFIX))
            .collect();
        for key in keys {
            self.store.remove(&key)?;
        }
        Ok(())
    }

    /// Records every batch up to and including `instance` as applied (`None`: none, after an
    /// install of an empty log), ends an install begun, and makes it and the batch's register
    /// records durable.
    pub fn finish_batch(&mut self, instance: Option<u64>) -> Result<(), InPlaceError> {
        // The register records first: persistent memory may write lines back in any order, so
        // a mark flushed with them could be durable before them.
        self.store.flush()?;
        match instance {
            Some(instance) => self.store.put(APPLIED_KEY, &instance.to_le_bytes())?,
            None => {
                self.store.remove(APPLIED_KEY)?;
            }
        }
        self.store.flush()?;
        if self.installing {
            // The mark goes only once the install's registers and "applied up to" are durable.
            self.store.remove(INSTALLING_KEY)?;
            self.store.flush()?;
            self.installing = false;
        }
        self.applied = instance;
        Ok(())
    }

    /// Injects the deliberate bug "ignore operation numbers": every operation is applied again,
    /// whatever number its register records (for the tests and simulations that must catch
    /// it).
    #[cfg(any(test, feature = "fault-injection"))]
    pub fn ignore_op_numbers(&mut self) {
        self.ignore_op_numbers = true;
    }

    /// The medium underneath.
    pub fn media(&self) -> &M {
        self.store.media()
    }

    /// The medium underneath, to arm its crash points (for crash tests).
    pub fn media_mut(&mut self) -> &mut M {
        self.store.media_mut()
    }
}

#[cfg(test)]
mod tests {
    use logless_storage::media::SECTOR_BYTES;
    use logless_storage::{Durability, SimMedia};

    use super::*;

    /// Batches of INCRs: each batch a list of counter names, one INCR each.
    const BATCHES: [&[&str]; 4] = [&["a", "b", "a"], &["b"], &["a", "c", "c", "b"], &["c", "a"]];

    fn options() -> StoreOptions {
        let mut options = StoreOptions::new(Durability::Sync);
        options.key_bytes_max = 16;
        options.record_bytes_max = 256;
        options.file_bytes_max = 1 << 20;
        options.append_chunk_bytes = 0;
        options
    }

    fn counter(registers: &RegistersInPlace<SimMedia>, key: &str) -> i64 {
        let record = registers.store.get(&store_key(key.as_bytes()));
        match record.map(|r| decode_stored(key.as_bytes(), r).unwrap().register.data) {
            None => 0,
            Some(Data::Int(n)) => n,
            Some(other) => panic!("{key} holds {other:?}"),
        }
    }

    /// Executes the batches after the applied mark, idempotently: the INCR at `op` reads the
    /// register and writes it plus one only if `op` must still be applied to it.
    fn execute(registers: &mut RegistersInPlace<SimMedia>) -> Result<(), InPlaceError> {
        let first = registers.applied().map_or(0, |i| i as usize + 1);
        for (instance, batch) in BATCHES.iter().enumerate().skip(first) {
            for (index, key) in batch.iter().enumerate() {
                let op = OpNumber {
                    instance: instance as u64,
                    index: index as u32,
                };
                let register = Register {
                    data: Data::Int(counter(registers, key) + 1),
                    ..Register::default()
                };
                registers.write(key.as_bytes(), op, &register)?;
            }
            registers.finish_batch(Some(instance as u64))?;
        }
        Ok(())
    }

    fn expected(key: &str) -> i64 {
        BATCHES
            .iter()
            .flat_map(|b| b.iter())
            .filter(|k| **k == key)
            .count() as i64
    }

    /// Crashes the execution after every media operation in turn, recovers every image a
    /// power failure could leave (any subset of the unpersisted sectors, or one torn), executes
    /// again from the applied mark, and checks every counter exact. Returns the violations.
    fn every_crash(ignore_op_numbers: bool) -> Vec<String> {
        let (mut full, _, _) = RegistersInPlace::open_on(SimMedia::new(), options()).unwrap();
        execute(&mut full).unwrap();
        let total_ops = full.media().ops;
        let mut violations = Vec::new();
        for n in 0..=total_ops {
            let mut media = SimMedia::new();
            media.crash_after_ops = Some(n);
            let (mut registers, _, _) = RegistersInPlace::open_on(media, options()).unwrap();
            execute(&mut registers).unwrap();
            let snapshot = registers.media().at_crash().clone();
            let dirty = snapshot.dirty_sectors();
            let mut images = vec![(dirty.clone(), None)];
            for (i, _) in dirty.iter().enumerate() {
                let kept: Vec<usize> = dirty[..i].to_vec();
                images.push((kept, Some((dirty[i], SECTOR_BYTES / 2))));
                images.push((dirty[..i].to_vec(), None));
            }
            for (kept, torn) in images {
                let image = snapshot.crash_image(&kept, torn);
                let (mut again, _, report) =
                    RegistersInPlace::open_on(SimMedia::from_image(image), options()).unwrap();
                assert!(report.damaged.is_empty(), "damage: {:?}", report.damaged);
                again.ignore_op_numbers = ignore_op_numbers;
                execute(&mut again).unwrap();
                for key in ["a", "b", "c"] {
                    let got = counter(&again, key);
                    if got != expected(key) {
                        violations.push(format!(
                            "crash after op {n}, kept {kept:?}, torn {torn:?}: {key} = {got}, \
                             expected {}",
                            expected(key)
                        ));
                    }
                }
            }
        }
        violations
    }

    #[test]
    fn every_crash_point_leaves_exact_counters() {
        let violations = every_crash(false);
        assert!(violations.is_empty(), "{violations:#?}");
    }

    #[test]
    fn dropping_the_idempotence_check_is_caught() {
        assert!(
            !every_crash(true).is_empty(),
            "re-executing without the operation numbers went unnoticed"
        );
    }

    #[test]
    fn reopening_gives_the_registers_and_the_applied_mark() {
        let (mut registers, _, _) = RegistersInPlace::open_on(SimMedia::new(), options()).unwrap();
        execute(&mut registers).unwrap();
        let image = registers.media().now().live_image();
        let (again, stored, _) =
            RegistersInPlace::open_on(SimMedia::from_image(image), options()).unwrap();
        assert_eq!(again.applied(), Some(BATCHES.len() as u64 - 1));
        assert_eq!(stored.map.len(), 3);
        assert_eq!(
            stored.map[&Bytes::from_static(b"a")].data,
            Data::Int(expected("a"))
        );
        assert_eq!(
            stored.written_max,
            Some(OpNumber {
                instance: 3,
                index: 1
            })
        );
        assert_eq!(
            again.written_by(b"a").unwrap(),
            Some(OpNumber {
                instance: 3,
                index: 1
            })
        );
        let op = OpNumber {
            instance: 3,
            index: 1,
        };
        assert!(!again.must_apply(b"a", op).unwrap());
        assert!(again.must_apply(b"b", op).unwrap());
    }
}
