//! The NVRAM commit log (issue 10, seed 004): transaction points kept in a small
//! byte-addressable NVRAM instead of a flash metaroot page, so an fsync programs no flash page
//! for metadata. docs/FORMAT.md ("NVRAM log") has the byte layout, docs/DESIGN.md ("The NVRAM
//! tier") the crash argument.
//!
//! The log extends one flash commit, its *base*: every record holds the logical changes since
//! the record before it (the first: since the base), with the commit counter, next inode and
//! flags the commit gives. A full flash commit makes every record redundant; the next append
//! then truncates the log by rewriting the header's base word (one aligned 8-byte word, which
//! a power cut leaves old or new) and starts again at the first record offset.
//!
//! A record becomes durable in two writes: its body (header and payload), then an 8-byte
//! commit word holding a CRC-32C over the volume id, the base and the body. Only whole aligned
//! words survive a cut, and the commit word is written after the body completed, so a record
//! whose commit word checks out was written whole; a torn body never has its commit word, and
//! a stale commit word left by an older log fails the CRC (the base differs).
//!
//! Invariants: records follow each other without gaps from `HEADER_BYTES`; their counters rise;
//! a reader stops at the first record that does not check out and reads no byte twice, so a
//! mount reads at most the NVRAM's size.
#![deny(clippy::indexing_slicing, clippy::unwrap_used)]

use alloc::boxed::Box;
use alloc::vec;
use alloc::vec::Vec;

use fsoc_flash::codec::{crc32c, crc32c_append, Reader, Writer};
use fsoc_flash::convert::u32_from_usize;
use fsoc_flash::{Nanos, NvramDevice};

use crate::txn::TxnError;

pub const NVRAM_LOG_MAGIC: u64 = u64::from_le_bytes(*b"FSOCNVLG");
/// Header: magic, volume id, base, reserved.
pub const HEADER_BYTES: u64 = 32;
const BASE_OFFSET: u64 = 16;
/// Before the payload: commit counter, next inode, flags, payload length.
pub const RECORD_HEADER_BYTES: u64 = RECORD_HEADER_LEN as u64;
const RECORD_HEADER_LEN: usize = 24;
/// The commit word after the (8-byte padded) payload.
pub const COMMIT_WORD_BYTES: u64 = 8;
/// High half of every commit word ("NVRC"), so zeroed or erased bytes never pass.
const COMMIT_MAGIC: u32 = u32::from_le_bytes(*b"NVRC");
/// The base word of a log that extends no commit (just formatted).
const NO_BASE: u64 = u64::MAX;

/// A record the log holds: what its transaction point committed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NvramRecord {
    pub commit_counter: u64,
    pub next_inode: u64,
    pub flags: u32,
    /// The logical changes since the previous record (opaque here: `fs::delta`'s encoding).
    pub payload: Vec<u8>,
}

/// What mount read from the NVRAM.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NvramMountReport {
    /// Read accesses and bytes (counted apart from flash page reads).
    pub reads: u64,
    pub bytes_read: u64,
    /// Records replayed (0 when the log extended another commit than the flash's).
    pub records: u64,
}

fn padded(length: u64) -> u64 {
    length.div_ceil(8) * 8
}

/// Bytes a record with `payload_bytes` of payload takes in the log.
pub fn record_bytes(payload_bytes: u64) -> u64 {
    RECORD_HEADER_BYTES + padded(payload_bytes) + COMMIT_WORD_BYTES
}

pub struct NvramLog {
    device: Box<dyn NvramDevice>,
    volume_id: u64,
    size_bytes: u64,
    /// The base the records in the device extend (what the header's base word says).
    base: u64,
    /// Where the next record goes.
    end: u64,
    /// Counter of the newest record (or the base): the next must be higher.
    last_counter: u64,
}

impl core::fmt::Debug for NvramLog {
    fn fmt(&self, formatter: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        formatter
            .debug_struct("NvramLog")
            .field("size_bytes", &self.size_bytes)
            .field("base", &self.base)
            .field("end", &self.end)
            .finish_non_exhaustive()
    }
}

fn refusal(reason: &'static str) -> TxnError {
    TxnError::Nvram { reason }
}

impl NvramLog {
    /// Smallest NVRAM the log accepts: its header and one record of 256 payload bytes.
    pub const SIZE_BYTES_MIN: u64 = 1024;

    /// Writes an empty log for volume `volume_id` (at format, before the first commit).
    pub fn format(
        mut device: Box<dyn NvramDevice>,
        volume_id: u64,
        now_ns: Nanos,
    ) -> Result<(NvramLog, Nanos), TxnError> {
        let size_bytes = device.size_bytes();
        if size_bytes < Self::SIZE_BYTES_MIN || !size_bytes.is_multiple_of(8) || size_bytes > u64::from(u32::MAX) {
            return Err(refusal("the NVRAM must hold 1 KiB to 4 GiB, in whole 8-byte words"));
        }
        let mut writer = Writer::with_capacity(32);
        writer.u64_le(NVRAM_LOG_MAGIC);
        writer.u64_le(volume_id);
        writer.u64_le(NO_BASE);
        writer.u64_le(0);
        let done = device.write(now_ns, 0, &writer.bytes)?;
        device.persist()?;
        let log = NvramLog { device, volume_id, size_bytes, base: NO_BASE, end: HEADER_BYTES, last_counter: 0 };
        Ok((log, done.done_ns))
    }

    /// Opens the log of volume `volume_id` and reads the records that extend commit
    /// `required_base` (none if the log extends another commit: a full commit made them
    /// redundant). Refuses an NVRAM that belongs to no volume or to another one.
    pub fn open(
        mut device: Box<dyn NvramDevice>,
        volume_id: u64,
        required_base: u64,
        now_ns: Nanos,
    ) -> Result<(NvramLog, Vec<NvramRecord>, NvramMountReport, Nanos), TxnError> {
        let size_bytes = device.size_bytes();
        if size_bytes < Self::SIZE_BYTES_MIN || !size_bytes.is_multiple_of(8) || size_bytes > u64::from(u32::MAX) {
            return Err(refusal("the NVRAM must hold 1 KiB to 4 GiB, in whole 8-byte words"));
        }
        let mut report = NvramMountReport::default();
        let mut clock = now_ns;
        let mut header = [0u8; 32];
        clock = device.read(clock, 0, &mut header)?.done_ns;
        report.reads += 1;
        report.bytes_read += HEADER_BYTES;
        let mut reader = Reader::new("NVRAM log header", &header);
        let magic = reader.u64_le().map_err(|_| refusal("unreadable header"))?;
        let stored_volume_id = reader.u64_le().map_err(|_| refusal("unreadable header"))?;
        let base = reader.u64_le().map_err(|_| refusal("unreadable header"))?;
        if magic != NVRAM_LOG_MAGIC {
            return Err(refusal("the NVRAM holds no fsoc commit log (was the volume formatted with it?)"));
        }
        if stored_volume_id != volume_id {
            return Err(refusal("the NVRAM holds the commit log of another volume"));
        }
        let mut log = NvramLog { device, volume_id, size_bytes, base, end: HEADER_BYTES, last_counter: base };
        let mut records = Vec::new();
        if base == required_base {
            while let Some(record) = log.read_record(&mut clock, &mut report)? {
                log.end += record_bytes(record.payload.len() as u64);
                log.last_counter = record.commit_counter;
                records.push(record);
            }
        }
        report.records = records.len() as u64;
        Ok((log, records, report, clock))
    }

    /// The record at `self.end` if it checks out (`None` ends the log).
    fn read_record(
        &mut self,
        clock: &mut Nanos,
        report: &mut NvramMountReport,
    ) -> Result<Option<NvramRecord>, TxnError> {
        let start = self.end;
        if start + record_bytes(0) > self.size_bytes {
            return Ok(None);
        }
        let mut head = [0u8; RECORD_HEADER_LEN];
        *clock = self.device.read(*clock, start, &mut head)?.done_ns;
        report.reads += 1;
        report.bytes_read += RECORD_HEADER_BYTES;
        let mut reader = Reader::new("NVRAM record", &head);
        let (Ok(commit_counter), Ok(next_inode), Ok(flags), Ok(payload_bytes)) =
            (reader.u64_le(), reader.u64_le(), reader.u32_le(), reader.u32_le())
        else {
            return Ok(None);
        };
        let payload_bytes = u64::from(payload_bytes);
        // A length running past the device is a torn or stale header: the log ends here.
        if start + record_bytes(payload_bytes) > self.size_bytes || commit_counter <= self.last_counter {
            return Ok(None);
        }
        let tail_bytes = padded(payload_bytes) + COMMIT_WORD_BYTES;
        // Bounded by the device's size (checked above), which is at most 4 GiB.
        let mut tail = vec![0u8; usize::try_from(tail_bytes).map_err(|_| refusal("record too large"))?];
        *clock = self.device.read(*clock, start + RECORD_HEADER_BYTES, &mut tail)?.done_ns;
        report.reads += 1;
        report.bytes_read += tail_bytes;
        let padded_bytes = usize::try_from(padded(payload_bytes)).map_err(|_| refusal("record too large"))?;
        let (padded_payload, commit_word) = tail.split_at(padded_bytes);
        let commit_word = u64::from_le_bytes(commit_word.try_into().map_err(|_| refusal("record too large"))?);
        if commit_word != self.commit_word(&head, padded_payload) {
            return Ok(None);
        }
        let payload =
            padded_payload.get(..usize::try_from(payload_bytes).unwrap_or(usize::MAX)).unwrap_or(&[]).to_vec();
        Ok(Some(NvramRecord { commit_counter, next_inode, flags, payload }))
    }

    fn commit_word(&self, head: &[u8], padded_payload: &[u8]) -> u64 {
        let mut seed = [0u8; 16];
        let (volume, base) = seed.split_at_mut(8);
        volume.copy_from_slice(&self.volume_id.to_le_bytes());
        base.copy_from_slice(&self.base.to_le_bytes());
        let crc = crc32c_append(crc32c_append(crc32c(&seed), head), padded_payload);
        (u64::from(COMMIT_MAGIC) << 32) | u64::from(crc)
    }

    pub fn size_bytes(&self) -> u64 {
        self.size_bytes
    }

    /// Bytes the records extending `base` take (0 when the log extends another commit: the
    /// next append truncates it).
    pub fn used_bytes(&self, base: u64) -> u64 {
        if self.base == base {
            self.end - HEADER_BYTES
        } else {
            0
        }
    }

    /// Bytes the log can hold in records.
    pub fn capacity_bytes(&self) -> u64 {
        self.size_bytes - HEADER_BYTES
    }

    /// The largest payload the next record extending `base` can carry.
    pub fn payload_room(&self, base: u64) -> u64 {
        let free = self.capacity_bytes() - self.used_bytes(base);
        free.saturating_sub(RECORD_HEADER_BYTES + COMMIT_WORD_BYTES) / 8 * 8
    }

    /// Appends `record`, extending commit `base` (truncating the log first if it extends
    /// another one), and makes it durable. Returns the completion time. The caller must have
    /// made durable everything the record refers to, and checked `payload_room`.
    pub fn append(&mut self, base: u64, record: &NvramRecord, now_ns: Nanos) -> Result<Nanos, TxnError> {
        assert!(
            record.payload.len() as u64 <= self.payload_room(base),
            "NVRAM record of {} bytes appended past the log's room",
            record.payload.len()
        );
        let mut clock = now_ns;
        if self.base != base {
            // One aligned word: a cut leaves the old base (the records extend a commit the
            // flash no longer mounts, so they are ignored) or the new one (no record yet).
            clock = self.device.write(clock, BASE_OFFSET, &base.to_le_bytes())?.done_ns;
            self.base = base;
            self.end = HEADER_BYTES;
            self.last_counter = base;
        }
        assert!(record.commit_counter > self.last_counter, "NVRAM record counters must rise");
        let mut writer = Writer::with_capacity(usize::try_from(record_bytes(record.payload.len() as u64)).unwrap_or(0));
        writer.u64_le(record.commit_counter);
        writer.u64_le(record.next_inode);
        writer.u32_le(record.flags);
        writer.u32_le(u32_from_usize(record.payload.len()));
        writer.raw(&record.payload);
        let padding = padded(record.payload.len() as u64) - record.payload.len() as u64;
        for _ in 0..padding {
            writer.u8(0);
        }
        let body = writer.bytes;
        let (head, padded_payload) = body.split_at(RECORD_HEADER_LEN);
        let commit_word = self.commit_word(head, padded_payload);
        clock = self.device.write(clock, self.end, &body)?.done_ns;
        clock = self.device.write(clock, self.end + body.len() as u64, &commit_word.to_le_bytes())?.done_ns;
        self.device.persist()?;
        self.end += record_bytes(record.payload.len() as u64);
        self.last_counter = record.commit_counter;
        Ok(clock)
    }
}
