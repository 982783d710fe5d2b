//! An append-only log on the same media as the slot store: the "Log" access pattern of seed
//! 001 §6.2, for the log-based engine and for the storage experiment.
//!
//! Layout: a 16-byte header (8 bytes of magic, then the size word: the bytes of entries that
//! are part of the log, with a check), then the entries, each `len u32 | crc32c u32 | bytes`.
//! A commit persists the entries appended since the last commit, then stores the new size with
//! one aligned 8-byte store and persists that; so a crash leaves the log at the old or the new
//! size, and every entry below the size is whole.
use std::path::Path;

use crate::media::{DramMedia, FileMedia, Media, MmapMedia};
use crate::slot_store::{decode_end, encode_end, is_fresh};
use crate::{Durability, StoreError};

/// Log file magic.
pub const LOG_MAGIC: [u8; 8] = *b"LLLOG01\n";
/// Bytes before the first entry: the magic and the size word.
pub const LOG_HEADER_BYTES: usize = 16;
const SIZE_WORD_OFFSET: usize = 8;
const ENTRY_HEADER_BYTES: usize = 8;

/// The parameters of a log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogOptions {
    /// How writes are kept.
    pub durability: Durability,
    /// The largest the log file may grow.
    pub file_bytes_max: u64,
}

/// An append-only log.
pub struct LogStore<M: Media = FileMedia> {
    media: M,
    options: LogOptions,
    /// Bytes of entries written (committed or not).
    end: usize,
    /// Bytes of entries covered by the size word.
    committed: usize,
    poisoned: bool,
}

impl LogStore<FileMedia> {
    /// Opens the log at `path` (creating it; no file in `memory` mode) and returns it with
    /// its entries, checksums verified.
    pub fn open(
        path: &Path,
        options: LogOptions,
    ) -> Result<(LogStore<FileMedia>, Vec<Vec<u8>>), StoreError> {
        let media = match options.durability.persist_by() {
            None => FileMedia::Dram(DramMedia::new()),
            Some(p) => FileMedia::Mapped(MmapMedia::open(path, p)?),
        };
        LogStore::open_on(media, options)
    }
}

impl<M: Media> LogStore<M> {
    /// Opens the log on `media` (formatting it if fresh) and returns it with its entries.
    pub fn open_on(
        mut media: M,
        options: LogOptions,
    ) -> Result<(LogStore<M>, Vec<Vec<u8>>), StoreError> {
        if is_fresh(&media) {
            if media.len() < LOG_HEADER_BYTES {
                media.grow(4096)?;
            }
            // The size word first, durably, then the magic with one store: a crash while
            // formatting leaves a fresh file.
            media.store_u64(SIZE_WORD_OFFSET, encode_end(0));
            media.persist(0, LOG_HEADER_BYTES)?;
            media.store_u64(0, u64::from_le_bytes(LOG_MAGIC));
            media.persist(0, 8)?;
        }
        let corrupt = |what, offset: usize| StoreError::Corrupt {
            what,
            offset_bytes: offset as u64,
        };
        if media.len() < LOG_HEADER_BYTES || media.read(0, 8) != LOG_MAGIC {
            return Err(corrupt("not a logless log file (magic)", 0));
        }
        let word = u64::from_le_bytes(media.read(SIZE_WORD_OFFSET, 8).try_into().expect("8"));
        let size = decode_end(word).ok_or(corrupt("log size word fails its check", 8))?;
        if LOG_HEADER_BYTES + size > media.len() {
            return Err(corrupt("log size beyond the file", 8));
        }
        let entries = read_entries(&media, size)?;
        let log = LogStore {
            media,
            options,
            end: size,
            committed: size,
            poisoned: false,
        };
        Ok((log, entries))
    }

    /// Writes an entry after the end; it becomes part of the log at the next `commit`. A
    /// refused append (file limit, full disk) changes nothing.
    pub fn append(&mut self, bytes: &[u8]) -> Result<(), StoreError> {
        if self.poisoned {
            return Err(StoreError::Poisoned);
        }
        let len = u32::try_from(bytes.len()).map_err(|_| StoreError::RecordTooLarge {
            bytes: bytes.len(),
            bytes_max: u32::MAX as usize,
        })?;
        let need = LOG_HEADER_BYTES + self.end + ENTRY_HEADER_BYTES + bytes.len();
        if need as u64 > self.options.file_bytes_max {
            return Err(StoreError::FileFull {
                file_bytes_max: self.options.file_bytes_max,
            });
        }
        if need > self.media.len() {
            let cap = usize::try_from(self.options.file_bytes_max).unwrap_or(usize::MAX);
            let grown = (self.media.len() * 2).max(need).min(cap);
            self.media.grow(grown).inspect_err(|e| {
                // Only a full disk leaves the log usable; anything else is fail-stop.
                let full = matches!(e, StoreError::Io { source, .. }
                    if matches!(source.raw_os_error(), Some(libc::ENOSPC | libc::EDQUOT | libc::EFBIG)));
                self.poisoned |= !full;
            })?;
        }
        let at = LOG_HEADER_BYTES + self.end;
        let mut head = [0u8; ENTRY_HEADER_BYTES];
        head[0..4].copy_from_slice(&len.to_le_bytes());
        head[4..8].copy_from_slice(&crc32c::crc32c(bytes).to_le_bytes());
        self.media.write(at, &head);
        self.media.write(at + ENTRY_HEADER_BYTES, bytes);
        self.end += ENTRY_HEADER_BYTES + bytes.len();
        Ok(())
    }

    /// Persists the appended entries, then the size word that makes them part of the log.
    pub fn commit(&mut self) -> Result<(), StoreError> {
        self.commit_inner(true)
    }

    /// A deliberate bug for the crash tests: commits without persisting the entries first.
    pub fn commit_without_entry_persist(&mut self) -> Result<(), StoreError> {
        self.commit_inner(false)
    }

    fn commit_inner(&mut self, persist_entries: bool) -> Result<(), StoreError> {
        if self.poisoned {
            return Err(StoreError::Poisoned);
        }
        if self.end == self.committed {
            return Ok(());
        }
        if persist_entries {
            let start = LOG_HEADER_BYTES + self.committed;
            self.persist(start, self.end - self.committed)?;
        }
        self.media.store_u64(SIZE_WORD_OFFSET, encode_end(self.end));
        self.persist(SIZE_WORD_OFFSET, 8)?;
        self.committed = self.end;
        Ok(())
    }

    fn persist(&mut self, offset: usize, len: usize) -> Result<(), StoreError> {
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

    /// Drops every entry (the experiment wraps around, as the paper's log does): the size
    /// word goes back to 0, durably.
    pub fn truncate(&mut self) -> Result<(), StoreError> {
        if self.poisoned {
            return Err(StoreError::Poisoned);
        }
        self.media.store_u64(SIZE_WORD_OFFSET, encode_end(0));
        self.persist(SIZE_WORD_OFFSET, 8)?;
        self.end = 0;
        self.committed = 0;
        Ok(())
    }

    /// The media (for crash tests).
    pub fn media(&self) -> &M {
        &self.media
    }
}

/// Reads and verifies the `size` bytes of entries.
fn read_entries<M: Media>(media: &M, size: usize) -> Result<Vec<Vec<u8>>, StoreError> {
    let mut entries = Vec::new();
    let end = LOG_HEADER_BYTES + size;
    let mut at = LOG_HEADER_BYTES;
    while at < end {
        if at + ENTRY_HEADER_BYTES > end {
            return Err(StoreError::Corrupt {
                what: "log entry header beyond the log size",
                offset_bytes: at as u64,
            });
        }
        let head = media.read(at, ENTRY_HEADER_BYTES);
        let len = u32::from_le_bytes(head[0..4].try_into().expect("4 bytes")) as usize;
        let crc = u32::from_le_bytes(head[4..8].try_into().expect("4 bytes"));
        if len > end - at - ENTRY_HEADER_BYTES {
            return Err(StoreError::Corrupt {
                what: "log entry beyond the log size",
                offset_bytes: at as u64,
            });
        }
        let bytes = media.read(at + ENTRY_HEADER_BYTES, len);
        if crc32c::crc32c(bytes) != crc {
            return Err(StoreError::Damaged {
                slot_offset: at as u64,
            });
        }
        entries.push(bytes.to_vec());
        at += ENTRY_HEADER_BYTES + len;
    }
    Ok(entries)
}
