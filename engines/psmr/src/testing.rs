//! Doubles for tests and simulations: a store that keeps what a crash keeps, per group. (The
//! services to replicate are the real ones: `logless-btree` and `logless-netfs`.)
use std::collections::BTreeMap;

use logless_multipaxos::persist::{Durable, LogStore, Record};
use logless_multipaxos::testing::MemStore;
use logless_service::Group;

use crate::groups::GroupStore;

/// A store in memory for every group's log: each group's records are staged, and only a flush
/// makes them durable, so a crash leaves what a real store would keep.
#[derive(Clone, Debug, Default)]
pub struct MemGroupStore {
    groups: BTreeMap<Group, MemStore>,
    flushes: u64,
}

impl MemGroupStore {
    /// The durable state of `group`'s log, if anything was ever written to it.
    pub fn group(&self, group: Group) -> Option<&MemStore> {
        self.groups.get(&group)
    }

    /// How many flushes made records durable.
    pub fn flushes(&self) -> u64 {
        self.flushes
    }

    /// Every group's durable log, to restart a replica from.
    pub fn durable(&self) -> BTreeMap<Group, Durable> {
        (self.groups.iter())
            .map(|(group, store)| (*group, store.durable().clone()))
            .collect()
    }

    /// Forgets what was written and not flushed, as a crash does.
    pub fn crash(&mut self) {
        self.groups.values_mut().for_each(MemStore::crash);
    }
}

impl GroupStore for MemGroupStore {
    type Error = std::convert::Infallible;

    fn write(&mut self, group: Group, record: &Record) -> Result<(), Self::Error> {
        self.groups.entry(group).or_default().write(record)
    }

    fn flush(&mut self) -> Result<(), Self::Error> {
        for store in self.groups.values_mut() {
            store.flush()?;
        }
        self.flushes += 1;
        Ok(())
    }
}
