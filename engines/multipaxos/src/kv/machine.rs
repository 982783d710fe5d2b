//! [`RegisterMachine`]: the map of keys to registers, executing [`Operation`]s.
use std::collections::{BTreeMap, BTreeSet};

use bytes::Bytes;
use logless_commands::command::{Command, CommandError, Condition, Expiry, Limits, Reply, SetArgs};
use logless_commands::value::{Data, Register};

use super::codec::{put_bytes, put_count, DecodeError, Reader};
use super::op::Operation;
use super::response::Response;
use super::versions::Versions;
use crate::ids::Instance;
use crate::message::Request;
use crate::state_machine::StateMachine;

/// The most expired keys swept at the start of one batch: sweeping is bounded work per batch,
/// and keys an operation touches are removed then anyway.
pub const EXPIRED_SWEEP_MAX: usize = 64;

/// The version of the snapshot encoding: `version u8 | count u32 | (key, register)*` in
/// strictly increasing key order, each register as a u32 length and `Register::encode`, then
/// the keys' versions (`Versions::encode`).
const SNAPSHOT_VERSION: u8 = 2;
/// The encoding from before WATCH, without the versions: read as no key's version kept.
/// (Replicas that restore such snapshots taken at different instances keep different
/// versions, so they could judge a WATCH differently until every key WATCH names has changed
/// since; data directories of the log engine from before WATCH are development ones.)
const SNAPSHOT_VERSION_UNVERSIONED: u8 = 1;

/// COPY of a key onto itself (Redis's text; the commands crate has no such error).
const ERR_SAME_OBJECT: &str = "ERR source and destination objects are the same";
/// A transaction inside a transaction (Redis's text).
const ERR_NESTED: &str = "ERR MULTI calls can not be nested";

static ABSENT: Register = Register {
    data: Data::Absent,
    expires_at_ms: None,
    fence: 0,
};

/// The replicated map: keys to registers, in key order.
///
/// Holds only live keys (and absent ones that keep a fencing token, see the module docs),
/// evaluated at the execution stamp of the batch being executed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RegisterMachine {
    map: BTreeMap<Bytes, Register>,
    /// Every key in `map` with an expiry, by expiry: the sweep's order.
    expiring: BTreeSet<(u64, Bytes)>,
    /// The absent registers in `map` (deleted keys kept for their fencing tokens).
    absent: usize,
    /// When keys last changed, for WATCH.
    versions: Versions,
    limits: Limits,
    /// The execution stamp of the current batch.
    now_ms: u64,
    /// The current batch's instance, and the position of the next request in it: the seeds.
    instance: Instance,
    position: u64,
}

impl Default for RegisterMachine {
    fn default() -> RegisterMachine {
        RegisterMachine::new(Limits::UNLIMITED)
    }
}

/// SplitMix64's finaliser: spreads `x` over all 64 bits.
fn mix(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

impl RegisterMachine {
    /// An empty map whose commands hold to `limits`.
    pub fn new(limits: Limits) -> RegisterMachine {
        RegisterMachine {
            map: BTreeMap::new(),
            expiring: BTreeSet::new(),
            absent: 0,
            versions: Versions::default(),
            limits,
            now_ms: 0,
            instance: Instance(0),
            position: 0,
        }
    }

    /// The keys and their registers, in key order.
    pub fn map(&self) -> &BTreeMap<Bytes, Register> {
        &self.map
    }

    /// The keys that hold a value at `now_ms`: the map's, less the deleted ones kept for their
    /// fencing tokens and those whose expiry has passed (not yet swept). Takes time in the
    /// number of expired keys, not in the map's size.
    pub fn live_keys(&self, now_ms: u64) -> usize {
        let expired = self
            .expiring
            .range(..(now_ms.saturating_add(1), Bytes::new()))
            .count();
        self.map.len() - self.absent - expired
    }

    /// The register of `key` as stored (absent if not in the map; it may have expired since
    /// the last batch).
    pub fn get(&self, key: &[u8]) -> &Register {
        self.map.get(key).unwrap_or(&ABSENT)
    }

    /// The execution stamp operations see now.
    pub fn now_ms(&self) -> u64 {
        self.now_ms
    }

    /// Executes `operation` at the current stamp, with the seed of the current position.
    pub fn apply(&mut self, operation: Operation) -> Response {
        let seed = mix(mix(self.instance.0) ^ self.position);
        self.position += 1;
        match operation {
            Operation::Transaction(operations) => self.transaction(operations, seed),
            Operation::Watch(keys) => Response::Items(
                keys.iter()
                    .map(|key| {
                        let version = self.versions.watched(key);
                        Response::Int(self.stamp_of(key, version) as i64)
                    })
                    .collect(),
            ),
            Operation::WatchedTransaction {
                watched,
                operations,
            } => {
                let unchanged = watched
                    .iter()
                    .all(|(key, stamp)| self.stamp_of(key, self.versions.of(key)) == *stamp);
                if unchanged {
                    self.transaction(operations, seed)
                } else {
                    Response::NilArray
                }
            }
            op => self.apply_one(op, seed),
        }
    }

    /// The stamp WATCH gives `key` at `version` now: the version, and whether the key is live
    /// (see [`super::versions`]). Below 2^63: the versions count changes.
    fn stamp_of(&self, key: &[u8], version: u64) -> u64 {
        version << 1 | u64::from(self.is_live(key))
    }

    /// The version of `key` WATCH compares (see [`super::versions`]).
    pub fn version(&self, key: &[u8]) -> u64 {
        self.versions.of(key)
    }

    /// A transaction's operations in order, one reply each.
    fn transaction(&mut self, operations: Vec<Operation>, seed: u64) -> Response {
        let replies = operations
            .into_iter()
            .enumerate()
            .map(|(i, op)| self.apply_one(op, mix(seed ^ i as u64)))
            .collect();
        Response::Items(replies)
    }

    /// Executes an operation other than a transaction.
    fn apply_one(&mut self, operation: Operation, seed: u64) -> Response {
        match operation {
            Operation::Command { key, mut command } => {
                command.seed(seed);
                self.command(key, &command).into()
            }
            Operation::MSet(pairs) => self.mset(pairs),
            Operation::MSetNx(pairs) => {
                if pairs.iter().any(|(k, _)| self.is_live(k)) {
                    return Response::Int(0);
                }
                match self.mset(pairs) {
                    Response::Ok => Response::Int(1),
                    error => error,
                }
            }
            Operation::Rename { from, to } => self.rename(from, to, false),
            Operation::RenameNx { from, to } => self.rename(from, to, true),
            Operation::SMove { from, to, member } => self.smove(from, to, member),
            Operation::Copy { from, to, replace } => self.copy(from, to, replace),
            Operation::Del(keys) => {
                let deleted = keys
                    .into_iter()
                    .filter(|k| self.command(k.clone(), &Command::Del) == Reply::Int(1))
                    .count();
                Response::Int(deleted as i64)
            }
            Operation::Exists(keys) => {
                let live = keys.iter().filter(|k| self.is_live(k)).count();
                Response::Int(live as i64)
            }
            Operation::MGet(keys) => Response::Items(
                keys.iter()
                    .map(|k| match Command::Get.read(self.get(k), self.now_ms) {
                        Reply::Bulk(b) => Response::Bulk(b),
                        _ => Response::Nil,
                    })
                    .collect(),
            ),
            Operation::Transaction(_)
            | Operation::Watch(_)
            | Operation::WatchedTransaction { .. } => Response::error(ERR_NESTED),
        }
    }

    fn is_live(&self, key: &[u8]) -> bool {
        self.get(key).is_live(self.now_ms)
    }

    /// Takes `key`'s register out of the map (absent if missing).
    fn take(&mut self, key: &Bytes) -> Register {
        let Some(reg) = self.map.remove(key) else {
            return Register::default();
        };
        if let Some(at) = reg.expires_at_ms {
            self.expiring.remove(&(at, key.clone()));
        }
        if reg.data == Data::Absent {
            self.absent -= 1;
        }
        reg
    }

    /// Puts `key`'s register back: a live one as it is, a dead one (absent or expired) not at
    /// all, or as an absent register if it carries a fencing token.
    fn put(&mut self, key: Bytes, reg: Register) {
        let reg = if reg.is_live(self.now_ms) {
            reg
        } else if reg.fence != 0 {
            reg.cleared()
        } else {
            return;
        };
        if let Some(at) = reg.expires_at_ms {
            self.expiring.insert((at, key.clone()));
        }
        if reg.data == Data::Absent {
            self.absent += 1;
        }
        let replaced = self.map.insert(key, reg);
        debug_assert!(replaced.is_none(), "a key is put back only once taken out");
    }

    /// One command on one key, as the per-key engine applies it.
    fn command(&mut self, key: Bytes, command: &Command) -> Reply {
        let mut reg = self.take(&key);
        let outcome = command.apply(&mut reg, self.now_ms, &self.limits);
        // Redis counts a SET that applied as a change even if the value was already that one;
        // other writes that leave the register as it was (SADD of a member already there)
        // change nothing, in Redis as here.
        let set = matches!(
            command,
            Command::Set(SetArgs {
                condition: Condition::Always,
                ..
            })
        ) && !matches!(outcome.reply, Reply::Error(_));
        if outcome.changed || set {
            self.versions.changed(&key);
        }
        self.put(key, reg);
        outcome.reply
    }

    /// MSET: every value is checked against the limits first, so that it sets all or nothing.
    fn mset(&mut self, pairs: Vec<(Bytes, Bytes)>) -> Response {
        if pairs
            .iter()
            .any(|(_, v)| v.len() > self.limits.value_bytes_max)
        {
            return Reply::Error(CommandError::ValueTooLarge).into();
        }
        for (key, value) in pairs {
            let set = Command::Set(SetArgs {
                value,
                condition: Condition::Always,
                get: false,
                expiry: Expiry::Clear,
            });
            let reply = self.command(key, &set);
            assert_eq!(reply, Reply::Ok, "a SET within the limits succeeds");
        }
        Response::Ok
    }

    /// RENAME and RENAMENX, in Redis's order of checks: a missing source is an error, a key
    /// renamed onto itself is OK (0 for RENAMENX), an existing destination stops RENAMENX.
    /// The value moves with its time to live. Fencing tokens stay with their keys, and the
    /// destination takes the higher of the two, so neither key's tokens ever go down.
    fn rename(&mut self, from: Bytes, to: Bytes, nx: bool) -> Response {
        if !self.is_live(&from) {
            return Reply::Error(CommandError::NoSuchKey).into();
        }
        if from == to {
            return if nx { Response::Int(0) } else { Response::Ok };
        }
        if nx && self.is_live(&to) {
            return Response::Int(0);
        }
        let source = self.take(&from);
        let destination = self.take(&to);
        self.versions.changed(&from);
        self.versions.changed(&to);
        self.put(from, source.cleared());
        let moved = Register {
            fence: source.fence.max(destination.fence),
            ..source
        };
        self.put(to, moved);
        if nx {
            Response::Int(1)
        } else {
            Response::Ok
        }
    }

    /// SMOVE, in Redis's order of checks: a missing source answers 0 (whatever the
    /// destination holds), then either key holding a non-set is WRONGTYPE, then a move onto
    /// the same key answers whether the member is there. The destination's add is checked
    /// against the limits before the source loses the member.
    fn smove(&mut self, from: Bytes, to: Bytes, member: Bytes) -> Response {
        let wrong_type = |data: &Data| !matches!(data, Data::Set(_) | Data::Absent);
        let source = self.get(&from).live_data(self.now_ms);
        let Data::Set(members) = source else {
            return match source {
                Data::Absent => Response::Int(0),
                _ => Reply::Error(CommandError::WrongType).into(),
            };
        };
        let has = members.contains(&member);
        if wrong_type(self.get(&to).live_data(self.now_ms)) {
            return Reply::Error(CommandError::WrongType).into();
        }
        if from == to || !has {
            return Response::Int(i64::from(has));
        }
        let mut destination = self.take(&to);
        let added =
            Command::SAdd(vec![member.clone()]).apply(&mut destination, self.now_ms, &self.limits);
        if added.changed {
            self.versions.changed(&to);
        }
        self.put(to, destination);
        if let Reply::Error(e) = added.reply {
            return Reply::Error(e).into();
        }
        let removed = self.command(from, &Command::SRem(vec![member]));
        assert_eq!(removed, Reply::Int(1), "the member was in the source");
        Response::Int(1)
    }

    /// COPY: the value and its time to live; the destination keeps its own fencing token.
    fn copy(&mut self, from: Bytes, to: Bytes, replace: bool) -> Response {
        if from == to {
            return Response::error(ERR_SAME_OBJECT);
        }
        if !self.is_live(&from) || (!replace && self.is_live(&to)) {
            return Response::Int(0);
        }
        let source = self.get(&from).clone();
        let destination = self.take(&to);
        self.versions.changed(&to);
        let copied = Register {
            fence: destination.fence,
            ..source
        };
        self.put(to, copied);
        Response::Int(1)
    }

    /// Removes up to [`EXPIRED_SWEEP_MAX`] keys expired at the current stamp.
    fn sweep_expired(&mut self) {
        for _ in 0..EXPIRED_SWEEP_MAX {
            let Some((at, key)) = self.expiring.first().cloned() else {
                return;
            };
            if at > self.now_ms {
                return;
            }
            let reg = self.take(&key);
            self.put(key, reg);
        }
    }

    /// Decodes a snapshot: the map and the keys' versions. Each value is copied once, from
    /// the snapshot's bytes into its register, and the map is built in one pass from the
    /// keys in order (the restart of an mPaxos replica waits for this).
    fn decode_snapshot(bytes: &[u8]) -> Result<(BTreeMap<Bytes, Register>, Versions), DecodeError> {
        let mut r = Reader::new(bytes);
        let version = r.u8()?;
        if version != SNAPSHOT_VERSION && version != SNAPSHOT_VERSION_UNVERSIONED {
            return Err(DecodeError::UnknownVersion(version));
        }
        let count = r.count(8)?;
        let mut entries: Vec<(Bytes, Register)> = Vec::with_capacity(count);
        for _ in 0..count {
            let key = r.slice()?;
            if entries.last().is_some_and(|(last, _)| last.as_ref() >= key) {
                return Err(DecodeError::Invalid);
            }
            let reg = Register::decode(r.slice()?).map_err(|_| DecodeError::Register)?;
            entries.push((Bytes::copy_from_slice(key), reg));
        }
        // In strictly increasing order (checked above): built without a search per key.
        let map = BTreeMap::from_iter(entries);
        let versions = match version {
            SNAPSHOT_VERSION => Versions::decode(&mut r)?,
            _ => Versions::default(),
        };
        r.finish()?;
        Ok((map, versions))
    }
}

impl StateMachine for RegisterMachine {
    fn begin_batch(&mut self, instance: Instance, stamp_ms: u64) {
        assert!(stamp_ms >= self.now_ms, "execution stamps never go down");
        self.now_ms = stamp_ms;
        self.instance = instance;
        self.position = 0;
        self.sweep_expired();
    }

    /// Decodes the payload and applies it; a payload that does not decode is answered with an
    /// error and changes nothing (every replica decodes the same bytes the same way).
    fn execute(&mut self, request: &Request) -> Bytes {
        let response = match Operation::decode(&request.payload) {
            Ok(operation) => self.apply(operation),
            Err(e) => {
                self.position += 1;
                Response::error(format!("ERR undecodable operation: {e}"))
            }
        };
        response.encode()
    }

    fn snapshot(&self) -> Bytes {
        let mut out = vec![SNAPSHOT_VERSION];
        put_count(&mut out, self.map.len());
        let mut reg_bytes = Vec::new();
        for (key, reg) in &self.map {
            put_bytes(&mut out, key);
            reg_bytes.clear();
            reg.encode(&mut reg_bytes);
            put_bytes(&mut out, &reg_bytes);
        }
        self.versions.encode(&mut out);
        Bytes::from(out)
    }

    /// # Panics
    /// If the snapshot does not decode: snapshots come from this machine on some replica,
    /// through the store's or the transport's checksums, so a bad one is a broken invariant
    /// (and going on with a partial map would let replicas diverge silently).
    fn restore(&mut self, snapshot: &Bytes) {
        let (map, versions) = match RegisterMachine::decode_snapshot(snapshot) {
            Ok(decoded) => decoded,
            Err(e) => panic!("a register map snapshot that does not decode: {e}"),
        };
        self.restore_parts(map, versions);
    }
}

impl RegisterMachine {
    /// Restores the machine to the registers of `map`, taken as they are, with no WATCH
    /// versions (as a snapshot of the unversioned encoding restores): for a runtime that keeps
    /// the registers elsewhere and builds the map straight from them, with no snapshot encoded
    /// and decoded in between (the node's registers in persistent memory under mPaxosSM).
    /// `map` must be what executing the log gives: deleted keys kept only with a fencing
    /// token.
    pub fn restore_map(&mut self, map: BTreeMap<Bytes, Register>) {
        self.restore_parts(map, Versions::default());
    }

    fn restore_parts(&mut self, map: BTreeMap<Bytes, Register>, versions: Versions) {
        self.expiring = map
            .iter()
            .filter_map(|(k, r)| r.expires_at_ms.map(|at| (at, k.clone())))
            .collect();
        self.absent = map.values().filter(|r| r.data == Data::Absent).count();
        self.map = map;
        self.versions = versions;
        // The next batch names its stamp; the snapshot's own is the engine's (a restore may
        // go back to an older state, whose stamp is lower).
        self.now_ms = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(key: &str, value: &str, expiry: Expiry) -> Operation {
        Operation::Command {
            key: Bytes::from(key.to_owned()),
            command: Command::Set(SetArgs {
                value: Bytes::from(value.to_owned()),
                condition: Condition::Always,
                get: false,
                expiry,
            }),
        }
    }

    /// The map taken as it is restores the machine a snapshot of it restores (but for the
    /// WATCH versions, which the map does not carry), its expiry index among it.
    #[test]
    fn a_map_restored_as_it_is_is_the_machine_its_snapshot_restores() {
        let mut m = RegisterMachine::default();
        m.begin_batch(Instance(1), 1_000);
        m.apply(set("a", "1", Expiry::AfterMs(5_000)));
        m.apply(set("b", "2", Expiry::Clear));
        m.apply(Operation::Command {
            key: Bytes::from_static(b"c"),
            command: Command::IncrBy(3),
        });
        m.apply(Operation::Del(vec![Bytes::from_static(b"b")]));
        let mut direct = RegisterMachine::default();
        direct.restore_map(m.map().clone());
        let mut via_snapshot = RegisterMachine::default();
        via_snapshot.restore(&m.snapshot());
        via_snapshot.versions = Versions::default();
        assert_eq!(direct, via_snapshot);
        assert_eq!(direct.expiring.len(), 1);
        assert_eq!(direct.map().len(), 2);
    }
}
