//! Doubles for tests and simulations: a toy service with a correct C-G, and a store that keeps
//! what a crash keeps, per group.
use std::collections::BTreeMap;

use bytes::Bytes;
use logless_multipaxos::persist::{Durable, LogStore, Record};
use logless_multipaxos::testing::MemStore;

use crate::groups::GroupStore;
use crate::ids::{Group, WorkerId};
use crate::service::{CommandGroups, Destination, Service};

/// Counters per key. `add K N` adds `N` to counter `K` and replies with its new value; it
/// depends only on commands on `K`, so C-G sends it to worker `K mod k`. `double` doubles every
/// counter and `sum` replies with their sum; both depend on everything and go to `g_all`. Any
/// other command goes to `g_all` too and is answered `ERR`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Counters {
    counters: BTreeMap<u64, i64>,
}

/// A command of [`Counters`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CounterCommand {
    /// Adds to one counter.
    Add {
        /// The counter.
        key: u64,
        /// What to add.
        amount: i64,
    },
    /// Doubles every counter.
    Double,
    /// Sums every counter.
    Sum,
}

impl CounterCommand {
    /// The command's encoding.
    pub fn encode(self) -> Bytes {
        match self {
            CounterCommand::Add { key, amount } => Bytes::from(format!("add {key} {amount}")),
            CounterCommand::Double => Bytes::from_static(b"double"),
            CounterCommand::Sum => Bytes::from_static(b"sum"),
        }
    }

    /// The command `bytes` encode, if they encode one.
    pub fn decode(bytes: &[u8]) -> Option<CounterCommand> {
        let text = std::str::from_utf8(bytes).ok()?;
        let mut words = text.split(' ');
        let command = match words.next()? {
            "add" => CounterCommand::Add {
                key: words.next()?.parse().ok()?,
                amount: words.next()?.parse().ok()?,
            },
            "double" => CounterCommand::Double,
            "sum" => CounterCommand::Sum,
            _ => return None,
        };
        words.next().is_none().then_some(command)
    }
}

impl Counters {
    /// The counters.
    pub fn counters(&self) -> &BTreeMap<u64, i64> {
        &self.counters
    }
}

/// C-G of [`Counters`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct CounterGroups {
    /// A deliberate bug: an add goes to the worker of its key plus its amount, so two adds on
    /// one key (dependent commands) can land in different groups and run concurrently.
    pub split_dependent: bool,
}

impl CommandGroups for CounterGroups {
    fn destination(&self, command: &Bytes, workers: u16) -> Destination {
        match CounterCommand::decode(command) {
            Some(CounterCommand::Add { key, amount }) => {
                let spread = if self.split_dependent {
                    key.wrapping_add(amount.unsigned_abs())
                } else {
                    key
                };
                let worker = u16::try_from(spread % u64::from(workers)).expect("below workers");
                Destination::Worker(WorkerId(worker))
            }
            Some(CounterCommand::Double | CounterCommand::Sum) | None => Destination::All,
        }
    }
}

impl Service for Counters {
    fn execute(&mut self, command: &Bytes) -> Bytes {
        let reply = match CounterCommand::decode(command) {
            Some(CounterCommand::Add { key, amount }) => {
                let counter = self.counters.entry(key).or_default();
                *counter = counter.wrapping_add(amount);
                counter.to_string()
            }
            Some(CounterCommand::Double) => {
                for counter in self.counters.values_mut() {
                    *counter = counter.wrapping_mul(2);
                }
                self.counters.len().to_string()
            }
            Some(CounterCommand::Sum) => self
                .counters
                .values()
                .fold(0i64, |sum, c| sum.wrapping_add(*c))
                .to_string(),
            None => "ERR".to_string(),
        };
        Bytes::from(reply)
    }
}

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counter_commands_round_trip_and_go_where_c_g_says() {
        let commands = [
            CounterCommand::Add { key: 5, amount: -3 },
            CounterCommand::Double,
            CounterCommand::Sum,
        ];
        let counters = CounterGroups::default();
        for command in commands {
            assert_eq!(CounterCommand::decode(&command.encode()), Some(command));
        }
        let add = commands[0].encode();
        assert_eq!(
            counters.destination(&add, 2),
            Destination::Worker(WorkerId(1))
        );
        assert_eq!(
            counters.destination(&commands[1].encode(), 2),
            Destination::All
        );
        assert_eq!(
            counters.destination(&Bytes::from("add 1"), 2),
            Destination::All
        );
    }

    #[test]
    fn counters_execute_their_commands() {
        let mut counters = Counters::default();
        let mut run = |c: CounterCommand| counters.execute(&c.encode());
        assert_eq!(run(CounterCommand::Add { key: 1, amount: 2 }), "2");
        assert_eq!(run(CounterCommand::Add { key: 2, amount: 5 }), "5");
        assert_eq!(run(CounterCommand::Double), "2");
        assert_eq!(run(CounterCommand::Sum), "14");
        assert_eq!(counters.execute(&Bytes::from("nonsense")), "ERR");
    }
}
