//! The one stable write of a log replica under EpochSS (`--recovery epoch`): its epoch, in the
//! data directory's `epoch` file, raised at every start before any message leaves (seed 002
//! §V-C). Everything else of that replica lives in memory.
//!
//! ```text
//! magic    8 bytes  "LLEPOCH1"
//! epoch    u64 LE   the epoch of the last start
//! crc32c   u32 LE   of the 16 bytes before it
//! ```
//!
//! A write goes to `epoch.tmp`, is fsynced, renamed over `epoch`, and the directory is fsynced:
//! a crash leaves the old epoch or the new one, never a torn file. A file that is there but
//! does not read back (wrong size, magic or checksum) is damage: the replica refuses to start
//! rather than reuse an epoch it may already have sent messages in.
use std::io::Write;
use std::path::{Path, PathBuf};

use logless_multipaxos::ids::Epoch;
use logless_storage::StoreError;

/// The file's name in the data directory.
pub const EPOCH_FILE: &str = "epoch";

const TMP_FILE: &str = "epoch.tmp";
const MAGIC: [u8; 8] = *b"LLEPOCH1";
const FILE_BYTES: usize = 8 + 8 + 4;

/// Where a replica's epoch is kept.
#[derive(Debug)]
pub struct EpochFile {
    dir: PathBuf,
}

impl EpochFile {
    /// The epoch file of data directory `dir` (created if missing) and the epoch it holds
    /// (`None`: the replica never started here).
    pub fn open(dir: &Path) -> Result<(EpochFile, Option<Epoch>), StoreError> {
        std::fs::create_dir_all(dir).map_err(StoreError::io("create directory"))?;
        let file = EpochFile {
            dir: dir.to_path_buf(),
        };
        let last = match std::fs::read(dir.join(EPOCH_FILE)) {
            Ok(bytes) => Some(decode(&bytes)?),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(source) => {
                return Err(StoreError::Io {
                    what: "read the epoch file",
                    source,
                })
            }
        };
        Ok((file, last))
    }

    /// Makes `epoch` the durable one, atomically (see the module documentation).
    pub fn write(&mut self, epoch: Epoch) -> Result<(), StoreError> {
        let tmp = self.dir.join(TMP_FILE);
        let mut file = std::fs::File::create(&tmp).map_err(StoreError::io("create epoch.tmp"))?;
        file.write_all(&encode(epoch))
            .and_then(|()| file.sync_all())
            .map_err(StoreError::io("write epoch.tmp"))?;
        std::fs::rename(&tmp, self.dir.join(EPOCH_FILE))
            .map_err(StoreError::io("rename epoch.tmp"))?;
        std::fs::File::open(&self.dir)
            .and_then(|d| d.sync_all())
            .map_err(StoreError::io("fsync directory"))
    }
}

/// The epoch to count as the last one of a replica started with `--rejoin` in `incarnation`
/// (from the clock, see `docs/lost-disk.md`), whose epoch file says `last` (`None`: lost): at
/// least the one below the incarnation, so that the epoch it starts in is above every epoch its
/// lost directory reached by restarting (one per start, as incarnations count starts) and above
/// what a file restored from a backup says. Reusing an epoch would let its peers count what it
/// said in its lost life as said by the replica that forgot it.
pub fn last_before_rejoin(last: Option<Epoch>, incarnation: u32) -> Epoch {
    let floor = Epoch(u64::from(incarnation).saturating_sub(1));
    last.map_or(floor, |last| last.max(floor))
}

fn encode(epoch: Epoch) -> [u8; FILE_BYTES] {
    let mut out = [0; FILE_BYTES];
    out[..8].copy_from_slice(&MAGIC);
    out[8..16].copy_from_slice(&epoch.0.to_le_bytes());
    let crc = crc32c::crc32c(&out[..16]);
    out[16..].copy_from_slice(&crc.to_le_bytes());
    out
}

fn decode(bytes: &[u8]) -> Result<Epoch, StoreError> {
    let corrupt = |what| StoreError::Corrupt {
        what,
        offset_bytes: 0,
    };
    let Ok(bytes) = <&[u8; FILE_BYTES]>::try_from(bytes) else {
        return Err(corrupt("the epoch file has the wrong size"));
    };
    if bytes[..8] != MAGIC {
        return Err(corrupt("the epoch file's magic is not LLEPOCH1"));
    }
    let crc = u32::from_le_bytes([bytes[16], bytes[17], bytes[18], bytes[19]]);
    if crc32c::crc32c(&bytes[..16]) != crc {
        return Err(corrupt("the epoch file fails its checksum"));
    }
    let mut epoch = [0; 8];
    epoch.copy_from_slice(&bytes[8..16]);
    Ok(Epoch(u64::from_le_bytes(epoch)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_epoch_survives_reopening_and_damage_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let (mut file, last) = EpochFile::open(dir.path()).unwrap();
        assert_eq!(last, None, "a new directory has no epoch");
        file.write(Epoch(1)).unwrap();
        file.write(Epoch(2)).unwrap();
        assert_eq!(EpochFile::open(dir.path()).unwrap().1, Some(Epoch(2)));
        assert!(!dir.path().join(TMP_FILE).exists());

        let path = dir.path().join(EPOCH_FILE);
        let mut bytes = std::fs::read(&path).unwrap();
        bytes[9] ^= 1;
        std::fs::write(&path, &bytes).unwrap();
        let damaged = EpochFile::open(dir.path()).unwrap_err().to_string();
        assert!(damaged.contains("checksum"), "{damaged}");
        std::fs::write(&path, b"7").unwrap();
        let short = EpochFile::open(dir.path()).unwrap_err().to_string();
        assert!(short.contains("wrong size"), "{short}");
    }

    #[test]
    fn a_rejoin_starts_above_its_incarnation_and_above_a_restored_file() {
        assert_eq!(last_before_rejoin(None, 29_000_000), Epoch(28_999_999));
        assert_eq!(last_before_rejoin(Some(Epoch(3)), 500), Epoch(499));
        assert_eq!(last_before_rejoin(Some(Epoch(900)), 500), Epoch(900));
    }
}
