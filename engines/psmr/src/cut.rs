//! Group snapshots' cut: the point of every group's log that a snapshot of the service covers.
//!
//! The argument is in `docs/psmr-snapshots.md`; in short: a *snapshot request* (a request of
//! [`SNAPSHOT_CLIENT`], ordered in `g_all`) runs in synchronous mode, with every worker at its
//! barrier, so when worker 0 executes it the service holds exactly the merged order up to it.
//! What that covers of each log is a function of the decided logs alone:
//!
//! * in `g_all`, every batch below the request's batch `a` and the requests of batch `a` up to
//!   and including it: [`Position`] `(a, j + 1)`;
//! * in worker `i`'s group, every batch worker `i`'s merge handed on before the request's
//!   batch: the batches stamped at most the request's stamp, a prefix of the log ending at a
//!   batch boundary, `(b_i, 0)`.
//!
//! [`Cut`] holds the positions, the stamp and each group's client table at its position. The replica assembles it while its merges hand
//! the request's batch on ([`crate::replica::Replica::take_cut`]); a replica restarting from a
//! service restored at a cut drops what the cut covers ([`Cut::remaining`]) and starts its
//! merges at the cut ([`crate::merge::Merge::resume`]). [`Cut::truncate_below`] says below
//! which instance each group's log holds nothing the cut lacks: once the cut is durable, the
//! groups' streams drop their batches below it ([`crate::stream`]).
use std::collections::BTreeMap;

use bytes::Bytes;
use logless_multipaxos::ids::{ClientId, Instance, RequestSeq};
use logless_multipaxos::message::{ClientTable, Request};
use logless_service::{Group, WorkerId};

use crate::stream::DeliveredBatch;

/// The client snapshot requests are proposed as. Client proxies must not use it.
pub const SNAPSHOT_CLIENT: ClientId = ClientId(u64::MAX - 1);

/// Whether `request` asks for a snapshot (it executes nothing in the service).
pub fn is_snapshot(request: &Request) -> bool {
    request.client == SNAPSHOT_CLIENT
}

/// Deliberate bugs of the cut, each off by default, for tests that must catch them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct CutBugs {
    /// Every worker's group's position one batch past where the merge stood: a replica
    /// restarting from the cut loses that batch, as it would if its group's log were
    /// truncated past its position in the cut.
    pub past_position: bool,
    /// A durable cut releases every batch the streams handed on, not only those it covers (a
    /// truncation above the cut): a replica restarting from it finds a gap in some group (it
    /// stops, see [`crate::replica::Replica::behind`]) or, without the check, loses batches.
    pub release_past_cut: bool,
    /// The cut's client tables come out empty: a retry of a command executed before the cut
    /// gets no answer after a restart from it.
    pub drop_client_tables: bool,
    /// A replica behind a peer's truncation installs the cut a peer's group snapshot carries
    /// without the service's state: its merges, client tables and groups move to the cut, and
    /// the runtime is handed nothing to restore ([`crate::replica::Replica::install`] gives
    /// `None`), so its service stays as it was.
    pub install_without_state: bool,
}

/// Where a cut stands in one group's log: every batch below `instance`, and the first
/// `requests` requests of batch `instance` (skips and requests executed before left out, as
/// [`DeliveredBatch::requests`] has them).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Position {
    /// The first batch not wholly covered.
    pub instance: Instance,
    /// How many of its requests are covered.
    pub requests: u32,
}

/// The point of every group's log that a snapshot of the service covers.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Cut {
    /// The execution stamp of the snapshot request's batch: every batch covered is stamped at
    /// most this, every later one of a worker's group above it.
    pub stamp_ms: u64,
    /// Each group's position.
    pub positions: BTreeMap<Group, Position>,
    /// Each group's client table at its position: the last command of each client the group
    /// ordered, with the service's reply to it (see
    /// [`crate::replica::Replica::answered`]). Skips and snapshot requests are not in it.
    pub clients: BTreeMap<Group, ClientTable>,
}

impl Cut {
    /// Whether this cut comes after `other` in the total order: every cut is a snapshot
    /// request of `g_all`, so their positions there order them (and a later cut stands at or
    /// past an earlier one in every group).
    pub fn is_after(&self, other: &Cut) -> bool {
        self.positions.get(&Group::All) > other.positions.get(&Group::All)
    }

    /// The part of `group`'s batch that the cut does not cover: `None` if it covers it all.
    pub fn remaining(&self, group: Group, mut batch: DeliveredBatch) -> Option<DeliveredBatch> {
        let Some(position) = self.positions.get(&group) else {
            return Some(batch);
        };
        if batch.instance < position.instance {
            return None;
        }
        if batch.instance == position.instance {
            let covered = usize::try_from(position.requests).expect("u32 fits usize");
            batch.requests.drain(..covered.min(batch.requests.len()));
        }
        Some(batch)
    }

    /// The instance below which `group`'s log holds only batches the cut covers wholly: a log
    /// truncated there loses nothing a replica restarting from the cut needs.
    pub fn truncate_below(&self, group: Group) -> Instance {
        self.positions
            .get(&group)
            .map_or(Instance(0), |position| position.instance)
    }

    /// Appends the cut's encoding: stamp, count, then per group its index (`u16::MAX` for
    /// `g_all`), instance and requests; then the count of client tables, and per table the
    /// group's index, the count of clients and per client its id, request number, reply length
    /// and reply; little-endian (counts and lengths u32).
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.stamp_ms.to_le_bytes());
        put_u32(out, self.positions.len());
        for (group, position) in &self.positions {
            out.extend_from_slice(&group_index(*group).to_le_bytes());
            out.extend_from_slice(&position.instance.0.to_le_bytes());
            out.extend_from_slice(&position.requests.to_le_bytes());
        }
        put_u32(out, self.clients.len());
        for (group, table) in &self.clients {
            out.extend_from_slice(&group_index(*group).to_le_bytes());
            put_u32(out, table.len());
            for (client, (seq, reply)) in table {
                out.extend_from_slice(&client.0.to_le_bytes());
                out.extend_from_slice(&seq.0.to_le_bytes());
                put_u32(out, reply.len());
                out.extend_from_slice(reply);
            }
        }
    }

    /// Decodes [`Cut::encode`]'s bytes, all of them.
    pub fn decode(bytes: &[u8]) -> Result<Cut, CutDecodeError> {
        let mut reader = Reader(bytes);
        let stamp_ms = u64::from_le_bytes(reader.take()?);
        let count = u32::from_le_bytes(reader.take()?);
        let mut positions = BTreeMap::new();
        for _ in 0..count {
            let group = group_of_index(u16::from_le_bytes(reader.take()?));
            let position = Position {
                instance: Instance(u64::from_le_bytes(reader.take()?)),
                requests: u32::from_le_bytes(reader.take()?),
            };
            if positions.insert(group, position).is_some() {
                return Err(CutDecodeError::GroupTwice(group));
            }
        }
        let tables = u32::from_le_bytes(reader.take()?);
        let mut clients = BTreeMap::new();
        for _ in 0..tables {
            let group = group_of_index(u16::from_le_bytes(reader.take()?));
            let count = u32::from_le_bytes(reader.take()?);
            let mut table = ClientTable::new();
            for _ in 0..count {
                let client = ClientId(u64::from_le_bytes(reader.take()?));
                let seq = RequestSeq(u64::from_le_bytes(reader.take()?));
                let len = u32::from_le_bytes(reader.take()?);
                let reply = Bytes::copy_from_slice(reader.take_slice(len)?);
                table.insert(client, (seq, reply));
            }
            if clients.insert(group, table).is_some() {
                return Err(CutDecodeError::GroupTwice(group));
            }
        }
        reader.finish()?;
        Ok(Cut {
            stamp_ms,
            positions,
            clients,
        })
    }
}

fn group_index(group: Group) -> u16 {
    match group {
        Group::Worker(worker) => worker.0,
        Group::All => u16::MAX,
    }
}

fn group_of_index(index: u16) -> Group {
    match index {
        u16::MAX => Group::All,
        index => Group::Worker(WorkerId(index)),
    }
}

fn put_u32(out: &mut Vec<u8>, n: usize) {
    let n = u32::try_from(n).expect("a cut's counts fit u32");
    out.extend_from_slice(&n.to_le_bytes());
}

/// A cut written durably, with the service's state at it (the node's snapshot, in the
/// service's own encoding): what a group's stream carries once it retains from this cut's
/// position on (see [`crate::stream`]), so that a replica behind the stream's first batch can
/// restart its service there ([`crate::replica::Replica::install`]).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct DurableCut {
    /// Each group's position and client table.
    pub cut: Cut,
    /// The service's state at the cut, in the service's encoding.
    pub state: Bytes,
}

/// Why bytes are not a cut.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CutDecodeError {
    /// The bytes end inside a field.
    #[error("a cut cut short")]
    Short,
    /// A group's position appears twice.
    #[error("group {0:?} twice in a cut")]
    GroupTwice(Group),
    /// Bytes follow the cut.
    #[error("{0} bytes after a cut")]
    Trailing(usize),
}

/// Reads little-endian fields off the front of a buffer (the cut's and the stream's
/// encodings).
pub(crate) struct Reader<'a>(pub(crate) &'a [u8]);

impl<'a> Reader<'a> {
    pub(crate) fn take<const N: usize>(&mut self) -> Result<[u8; N], CutDecodeError> {
        let (head, rest) = self.0.split_first_chunk().ok_or(CutDecodeError::Short)?;
        self.0 = rest;
        Ok(*head)
    }

    pub(crate) fn take_slice(&mut self, len: u32) -> Result<&'a [u8], CutDecodeError> {
        let len = usize::try_from(len).expect("u32 fits usize");
        if self.0.len() < len {
            return Err(CutDecodeError::Short);
        }
        let (head, rest) = self.0.split_at(len);
        self.0 = rest;
        Ok(head)
    }

    /// Refuses bytes left over.
    pub(crate) fn finish(self) -> Result<(), CutDecodeError> {
        match self.0.len() {
            0 => Ok(()),
            left => Err(CutDecodeError::Trailing(left)),
        }
    }
}

/// A cut being assembled: `g_all`'s position is known when the request is delivered, each
/// worker's group's when that worker's merge hands the request's batch on.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct PendingCut {
    pub(crate) cut: Cut,
    /// How many groups' positions the complete cut holds.
    pub(crate) groups: usize,
}

impl PendingCut {
    pub(crate) fn is_complete(&self) -> bool {
        self.cut.positions.len() == self.groups
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const G0: Group = Group::Worker(WorkerId(0));
    const G1: Group = Group::Worker(WorkerId(1));

    fn cut() -> Cut {
        let at = |instance, requests| Position {
            instance: Instance(instance),
            requests,
        };
        let table: ClientTable =
            [(ClientId(3), (RequestSeq(2), Bytes::from_static(b"+OK")))].into();
        Cut {
            stamp_ms: 77,
            positions: [(G0, at(4, 0)), (G1, at(0, 0)), (Group::All, at(9, 2))].into(),
            clients: [(G0, table), (Group::All, ClientTable::new())].into(),
        }
    }

    fn batch(instance: u64, requests: u64) -> DeliveredBatch {
        DeliveredBatch {
            instance: Instance(instance),
            stamp_ms: 1,
            requests: (0..requests)
                .map(|seq| Request {
                    client: ClientId(1),
                    seq: RequestSeq(seq),
                    payload: Bytes::new(),
                })
                .collect(),
        }
    }

    #[test]
    fn what_a_cut_covers_is_dropped_and_a_cut_batch_keeps_its_tail() {
        let cut = cut();
        assert_eq!(cut.remaining(G0, batch(3, 2)), None);
        assert_eq!(cut.remaining(G0, batch(4, 2)), Some(batch(4, 2)));
        assert_eq!(cut.remaining(Group::All, batch(8, 5)), None);
        let tail = cut.remaining(Group::All, batch(9, 5)).unwrap();
        let seqs: Vec<u64> = tail.requests.iter().map(|r| r.seq.0).collect();
        assert_eq!(seqs, [2, 3, 4]);
        let none_left = cut.remaining(Group::All, batch(9, 1)).unwrap();
        assert!(
            none_left.requests.is_empty(),
            "a batch shorter than its cut"
        );
        assert_eq!(
            cut.truncate_below(Group::All),
            Instance(9),
            "9 is still needed"
        );
        assert_eq!(cut.truncate_below(G0), Instance(4));
        let g5 = Group::Worker(WorkerId(5));
        assert_eq!(
            cut.truncate_below(g5),
            Instance(0),
            "a group not in the cut"
        );
    }

    #[test]
    fn a_cut_survives_its_encoding_and_bad_bytes_are_refused() {
        let mut bytes = Vec::new();
        cut().encode(&mut bytes);
        assert_eq!(Cut::decode(&bytes), Ok(cut()));
        assert_eq!(
            Cut::decode(&bytes[..bytes.len() - 1]),
            Err(CutDecodeError::Short)
        );
        bytes.push(0);
        assert_eq!(Cut::decode(&bytes), Err(CutDecodeError::Trailing(1)));
        let mut twice = Vec::new();
        twice.extend_from_slice(&0u64.to_le_bytes());
        twice.extend_from_slice(&2u32.to_le_bytes());
        for _ in 0..2 {
            twice.extend_from_slice(&0u16.to_le_bytes());
            twice.extend_from_slice(&0u64.to_le_bytes());
            twice.extend_from_slice(&0u32.to_le_bytes());
        }
        twice.extend_from_slice(&0u32.to_le_bytes());
        assert_eq!(Cut::decode(&twice), Err(CutDecodeError::GroupTwice(G0)));
    }
}
