//! P-SMR's snapshots on disk: the cut of every group and the service's state at it, in the
//! psmr directory's `cut` (issue 26; the argument is in `docs/psmr-snapshots.md`).
//!
//! A snapshot request of `g_all` runs in synchronous mode: worker 0 executes it with every
//! other worker at its barrier, takes its cut from the engine
//! ([`logless_psmr::replica::Replica::take_cut`]: each group's position and client table) and
//! serialises the service, and the loop writes both here at the end of its turn
//! ([`CutFile::write`]). Only once the file is durable does the engine let its groups' streams
//! drop what the cut covers ([`logless_psmr::replica::Replica::cut_durable`]), after which the
//! groups' own snapshots truncate their logs below it: a crash in between leaves longer logs,
//! never a cut the logs do not continue.
//!
//! The file is the storage layer's snapshot file of a [`SegmentLog`] that holds no records
//! (written atomically, checksummed, the newest two kept), indexed by the snapshot request's
//! number, so a newer cut always has a higher index:
//!
//! ```text
//! cut length   u32 LE
//! cut          the engine's encoding (logless_psmr::cut::Cut::encode)
//! state        the service's own snapshot encoding, to the end
//! ```
use std::path::Path;

use logless_psmr::cut::Cut;
use logless_storage::{Dir, FsDir, SegmentLog, SegmentLogOptions, StoreError};

use crate::psmr_service::PsmrService;

/// The directory of the psmr engine's snapshots, in the psmr directory.
pub const CUT_DIR: &str = "cut";

/// Where a replica's snapshots go.
pub struct CutFile<D: Dir = FsDir> {
    log: SegmentLog<D>,
}

/// A snapshot read back: the cut and the service's state at it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoredCut {
    /// The snapshot request's number.
    pub seq: u64,
    /// Each group's position and client table.
    pub cut: Cut,
    /// The service's state, in its own encoding.
    pub state: Vec<u8>,
}

impl CutFile<FsDir> {
    /// Opens (or creates) the snapshot directory `path`, with the newest snapshot in it.
    pub fn open(
        path: &Path,
        options: SegmentLogOptions,
    ) -> Result<(CutFile, Option<StoredCut>), String> {
        let (log, _) = SegmentLog::open(path, options)
            .map_err(|e| format!("cannot open {}: {e}", path.display()))?;
        let file = CutFile { log };
        let stored = file
            .newest()
            .map_err(|e| format!("{}: {e}", path.display()))?;
        Ok((file, stored))
    }
}

impl<D: Dir> CutFile<D> {
    /// Opens the snapshot directory on `dir` (a simulation's or a crash test's).
    pub fn open_on(dir: D, options: SegmentLogOptions) -> Result<CutFile<D>, StoreError> {
        Ok(CutFile {
            log: SegmentLog::open_on(dir, options)?.0,
        })
    }

    /// The directory (a simulation takes its crash image).
    pub fn dir(&self) -> &D {
        self.log.dir()
    }

    /// The newest snapshot, if one was written.
    pub fn newest(&self) -> Result<Option<StoredCut>, String> {
        let Some((seq, bytes)) = self.log.snapshot() else {
            return Ok(None);
        };
        let (cut, state) = decode(bytes).map_err(|e| format!("snapshot {seq}: {e}"))?;
        Ok(Some(StoredCut {
            seq,
            cut,
            state: state.to_vec(),
        }))
    }

    /// Writes the snapshot of request `seq` durably (it replaces the older ones).
    pub fn write(&mut self, seq: u64, cut: &Cut, state: &[u8]) -> Result<(), StoreError> {
        let mut bytes = Vec::with_capacity(state.len() + 256);
        bytes.extend_from_slice(&[0; 4]);
        cut.encode(&mut bytes);
        let cut_len = u32::try_from(bytes.len() - 4).expect("a cut fits u32");
        bytes[..4].copy_from_slice(&cut_len.to_le_bytes());
        bytes.extend_from_slice(state);
        self.log.write_snapshot(seq, &bytes)
    }
}

/// The cut and the service's state in a snapshot's bytes.
fn decode(bytes: &[u8]) -> Result<(Cut, &[u8]), String> {
    let (len, rest) = bytes.split_first_chunk::<4>().ok_or("cut short")?;
    let len = usize::try_from(u32::from_le_bytes(*len)).expect("u32 fits usize");
    if rest.len() < len {
        return Err("cut short".to_owned());
    }
    let (cut, state) = rest.split_at(len);
    let cut = Cut::decode(cut).map_err(|e| e.to_string())?;
    Ok((cut, state))
}

/// The service's state, serialised for a snapshot.
pub fn service_state(service: &PsmrService) -> Vec<u8> {
    match service {
        PsmrService::Btree(s) => s.snapshot(),
        PsmrService::NetFs(s) => s.snapshot(),
    }
}

/// Restores `service` (fresh) from a snapshot's state.
pub fn restore_service(service: &mut PsmrService, state: &[u8]) -> Result<(), String> {
    let restored = match service {
        PsmrService::Btree(s) => s.restore(state),
        PsmrService::NetFs(s) => s.restore(state),
    };
    restored.map_err(|e| format!("the snapshot's service state does not decode: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use logless_multipaxos::ids::{ClientId, Instance, RequestSeq};
    use logless_psmr::cut::Position;
    use logless_service::Group;
    use logless_storage::{Durability, SimDir};

    fn cut(instance: u64) -> Cut {
        let table = [(ClientId(4), (RequestSeq(9), Bytes::from_static(b"+OK")))].into();
        Cut {
            stamp_ms: 12,
            positions: [(
                Group::All,
                Position {
                    instance: Instance(instance),
                    requests: 1,
                },
            )]
            .into(),
            clients: [(Group::All, table)].into(),
        }
    }

    #[test]
    fn the_newest_snapshot_comes_back_after_a_restart() {
        let options = SegmentLogOptions::new(Durability::Sync);
        let mut file = CutFile::open_on(SimDir::new(), options.clone()).unwrap();
        assert_eq!(file.newest(), Ok(None));
        file.write(1, &cut(3), b"one").unwrap();
        file.write(2, &cut(8), b"two").unwrap();
        // A power failure that keeps only what was synced.
        let dir = file.log.dir().durable_image();
        let reopened = CutFile::open_on(dir, options).unwrap();
        let stored = reopened.newest().unwrap().unwrap();
        assert_eq!(
            (stored.seq, stored.cut, &stored.state[..]),
            (2, cut(8), &b"two"[..])
        );
        assert_eq!(decode(&[1, 0]), Err("cut short".to_owned()));
    }
}
