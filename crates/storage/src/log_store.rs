//! An append-only log on the same media: the "Log" access pattern of seed 001 §6.2, for the
//! log-based engine and for the storage experiment.
//!
//! Layout: an 8-byte size word at offset 0 (the bytes of entries that are durable), then the
//! entries, each `len u32 | crc32c u32 | bytes`. An append writes the entry after the end,
//! persists it, then stores the new size with one 8-byte store and persists that; so a crash
//! leaves the log at the old or the new size, and the entries below the size are whole.
use crate::media::Media;
use crate::StoreError;

const SIZE_WORD_BYTES: usize = 8;
const ENTRY_HEADER_BYTES: usize = 8;

/// An append-only log.
pub struct LogStore<M: Media> {
    media: M,
    sync: bool,
    /// Bytes of entries staged (written but not yet covered by the size word).
    end: usize,
    /// Bytes of entries covered by the size word.
    durable_end: usize,
    bytes_max: usize,
    poisoned: bool,
}

impl<M: Media> LogStore<M> {
    /// Opens the log on `media` and returns it with its entries (checksums verified).
    pub fn open(
        mut media: M,
        sync: bool,
        bytes_max: usize,
    ) -> Result<(LogStore<M>, Vec<Vec<u8>>), StoreError> {
        if media.len() < SIZE_WORD_BYTES {
            media.grow(SIZE_WORD_BYTES.max(4096))?;
        }
        let size = u64::from_le_bytes(media.read(0, 8).try_into().expect("8 bytes")) as usize;
        if SIZE_WORD_BYTES + size > media.len() {
            return Err(StoreError::Format("log size beyond the file"));
        }
        let mut entries = Vec::new();
        let mut at = SIZE_WORD_BYTES;
        while at < SIZE_WORD_BYTES + size {
            let head = media.read(at, ENTRY_HEADER_BYTES);
            let len = u32::from_le_bytes(head[0..4].try_into().expect("4 bytes")) as usize;
            let crc = u32::from_le_bytes(head[4..8].try_into().expect("4 bytes"));
            if at + ENTRY_HEADER_BYTES + len > SIZE_WORD_BYTES + size {
                return Err(StoreError::Format("log entry beyond the log size"));
            }
            let bytes = media.read(at + ENTRY_HEADER_BYTES, len);
            if crc32c::crc32c(bytes) != crc {
                return Err(StoreError::Damaged { slot: at });
            }
            entries.push(bytes.to_vec());
            at += ENTRY_HEADER_BYTES + len;
        }
        let log = LogStore {
            media,
            sync,
            end: size,
            durable_end: size,
            bytes_max,
            poisoned: false,
        };
        Ok((log, entries))
    }

    /// Writes an entry after the end; it becomes part of the log at the next `commit`.
    pub fn append(&mut self, bytes: &[u8]) -> Result<(), StoreError> {
        if self.poisoned {
            return Err(StoreError::Poisoned);
        }
        let need = self.end + ENTRY_HEADER_BYTES + bytes.len();
        if need > self.bytes_max {
            return Err(StoreError::FileFull {
                max: self.bytes_max,
            });
        }
        if SIZE_WORD_BYTES + need > self.media.len() {
            let grown = (self.media.len() * 2).max(SIZE_WORD_BYTES + need);
            self.media
                .grow(grown)
                .inspect_err(|_| self.poisoned = true)?;
        }
        let at = SIZE_WORD_BYTES + self.end;
        let len = u32::try_from(bytes.len()).map_err(|_| StoreError::TooLarge {
            bytes: bytes.len(),
            max: u32::MAX as usize,
        })?;
        let mut head = [0u8; ENTRY_HEADER_BYTES];
        head[0..4].copy_from_slice(&len.to_le_bytes());
        head[4..8].copy_from_slice(&crc32c::crc32c(bytes).to_le_bytes());
        self.media.write(at, &head);
        self.media.write(at + ENTRY_HEADER_BYTES, bytes);
        self.end = need;
        Ok(())
    }

    /// Persists the appended entries, then the size word that makes them part of the log.
    pub fn commit(&mut self) -> Result<(), StoreError> {
        if self.poisoned {
            return Err(StoreError::Poisoned);
        }
        if self.end == self.durable_end {
            return Ok(());
        }
        let start = SIZE_WORD_BYTES + self.durable_end;
        self.persist(start, self.end - self.durable_end)?;
        self.media.store_u64(0, self.end as u64);
        self.persist(0, SIZE_WORD_BYTES)?;
        self.durable_end = self.end;
        Ok(())
    }

    fn persist(&mut self, offset: usize, len: usize) -> Result<(), StoreError> {
        if !self.sync {
            return Ok(());
        }
        self.media
            .persist(offset, len)
            .inspect_err(|_| self.poisoned = true)
    }

    /// The bytes of entries in the log (committed or not).
    pub fn len_bytes(&self) -> usize {
        self.end
    }

    /// Whether the log has no entries.
    pub fn is_empty(&self) -> bool {
        self.end == 0
    }

    /// Drops every entry (for the experiment's bounded runs): the size word goes back to 0.
    pub fn truncate(&mut self) -> Result<(), StoreError> {
        self.media.store_u64(0, 0);
        self.persist(0, SIZE_WORD_BYTES)?;
        self.end = 0;
        self.durable_end = 0;
        Ok(())
    }

    /// The media (for crash tests).
    pub fn media(&self) -> &M {
        &self.media
    }
}
