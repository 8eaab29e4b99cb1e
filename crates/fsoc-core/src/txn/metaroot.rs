//! Metaroot records and the bounded search for the newest one.
//!
//! A metaroot names the committed state: both tree roots, the segment table's pages, the
//! commit counter. Records are appended page by page into one of three metaroot areas
//! (segments 1–3); the valid metaroot is the one with a good CRC and the highest counter.
//! Mount finds it with a handful of reads: page 0 of each area (the area whose page 0 has the
//! highest counter is the current one), a binary search for the current area's last
//! programmed page, and a short step back past at most one torn page (docs/DESIGN.md).
#![deny(clippy::indexing_slicing, clippy::unwrap_used)]

use alloc::vec::Vec;

use crate::address::PagePointer;
use crate::btree::TreeRoot;
use crate::codec::{crc32c_excluding, DecodeError, Reader, Writer};

pub const METAROOT_MAGIC: u64 = u64::from_le_bytes(*b"FSOCMETA");
pub const METAROOT_VERSION: u32 = 1;
pub const METAROOT_HEADER_BYTES: usize = 80;
const CHECKSUM_OFFSET: usize = 12;
/// Flag: written by a clean unmount (nothing was in flight after it).
pub const FLAG_CLEAN: u32 = 1;
/// Flag: the orphan list may be non-empty, so mount must look at it.
pub const FLAG_ORPHANS: u32 = 2;
/// The second copy of a clean-unmount record (docs/FORMAT.md, "Metaroot"): the first copy is
/// the page before it. Lets mount tell a lost copy (damage) from a later session's torn commit.
pub const FLAG_CLEAN_TWIN: u32 = 4;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Metaroot {
    pub commit_counter: u64,
    pub volume_id: u64,
    pub flags: u32,
    pub next_inode: u64,
    pub directory_root: TreeRoot,
    pub allocation_root: TreeRoot,
    pub segment_table: Vec<PagePointer>,
    /// Delta commit payload: the logical changes since the full commit whose roots this record
    /// names (opaque here; encoded and replayed by `fs::delta`). Empty for a full commit.
    pub delta: Vec<u8>,
}

impl Metaroot {
    /// The most table pages a metaroot of this page size can name.
    pub fn table_pages_max(page_size_bytes: usize) -> usize {
        (page_size_bytes - METAROOT_HEADER_BYTES) / PagePointer::ENCODED_BYTES
    }

    /// Bytes left for a delta payload in a page of this size with `table_pages` table pages.
    pub fn delta_bytes_max(page_size_bytes: usize, table_pages: usize) -> usize {
        page_size_bytes.saturating_sub(METAROOT_HEADER_BYTES + table_pages * PagePointer::ENCODED_BYTES)
    }

    pub fn is_clean(&self) -> bool {
        self.flags & FLAG_CLEAN != 0
    }

    pub fn may_have_orphans(&self) -> bool {
        self.flags & FLAG_ORPHANS != 0
    }

    pub fn encode(&self, page_size_bytes: usize) -> Vec<u8> {
        assert!(
            self.segment_table.len() <= Self::table_pages_max(page_size_bytes),
            "segment table of {} pages does not fit a metaroot",
            self.segment_table.len()
        );
        assert!(
            self.delta.len() <= Self::delta_bytes_max(page_size_bytes, self.segment_table.len()),
            "delta of {} bytes does not fit a metaroot",
            self.delta.len()
        );
        let record_bytes = METAROOT_HEADER_BYTES + self.segment_table.len() * PagePointer::ENCODED_BYTES + self.delta.len();
        let mut writer = Writer::with_capacity(page_size_bytes);
        writer.u64_le(METAROOT_MAGIC);
        writer.u32_le(METAROOT_VERSION);
        writer.u32_le(0); // checksum placeholder at CHECKSUM_OFFSET
        writer.u32_le(record_bytes as u32);
        writer.u32_le(self.flags);
        writer.u64_le(self.commit_counter);
        writer.u64_le(self.volume_id);
        writer.u64_le(self.next_inode);
        writer.pointer(self.directory_root.pointer);
        writer.pointer(self.allocation_root.pointer);
        writer.u8(self.directory_root.height);
        writer.u8(self.allocation_root.height);
        writer.u16_le(0);
        writer.u32_le(self.segment_table.len() as u32);
        writer.u32_le(self.delta.len() as u32);
        writer.u32_le(0); // reserved
        assert_eq!(writer.bytes.len(), METAROOT_HEADER_BYTES, "metaroot header drifted from FORMAT.md");
        for pointer in &self.segment_table {
            writer.pointer(*pointer);
        }
        writer.raw(&self.delta);
        let checksum = crc32c_excluding(&writer.bytes, CHECKSUM_OFFSET);
        let mut bytes = writer.bytes;
        bytes.splice(CHECKSUM_OFFSET..CHECKSUM_OFFSET + 4, checksum.to_le_bytes());
        bytes.resize(page_size_bytes, 0xFF);
        bytes
    }

    pub fn decode(bytes: &[u8], table_page_count: usize) -> Result<Metaroot, DecodeError> {
        let mut reader = Reader::new("metaroot", bytes);
        let magic = reader.u64_le()?;
        if magic != METAROOT_MAGIC {
            return Err(DecodeError::BadMagic { structure: "metaroot", found: magic });
        }
        let version = reader.u32_le()?;
        if version != METAROOT_VERSION {
            return Err(reader.invalid("version", u64::from(version)));
        }
        let stored = reader.u32_le()?;
        let record_bytes = reader.u32_le()? as usize;
        let table_bytes = METAROOT_HEADER_BYTES + table_page_count * PagePointer::ENCODED_BYTES;
        if record_bytes < table_bytes || record_bytes > bytes.len() {
            return Err(reader.invalid("record_bytes", record_bytes as u64));
        }
        let record = bytes.get(..record_bytes).ok_or(DecodeError::Truncated {
            structure: "metaroot",
            needed_bytes: record_bytes,
            actual_bytes: bytes.len(),
        })?;
        let computed = crc32c_excluding(record, CHECKSUM_OFFSET);
        if stored != computed {
            return Err(DecodeError::ChecksumMismatch { structure: "metaroot", stored, computed });
        }
        let flags = reader.u32_le()?;
        let commit_counter = reader.u64_le()?;
        let volume_id = reader.u64_le()?;
        let next_inode = reader.u64_le()?;
        let directory_pointer = reader.pointer()?;
        let allocation_pointer = reader.pointer()?;
        let directory_height = reader.u8()?;
        let allocation_height = reader.u8()?;
        let _reserved = reader.u16_le()?;
        let page_count = reader.u32_le()? as usize;
        let delta_bytes = reader.u32_le()? as usize;
        let _reserved = reader.u32_le()?;
        if page_count != table_page_count {
            return Err(reader.invalid("table_page_count", page_count as u64));
        }
        if table_bytes + delta_bytes != record_bytes {
            return Err(reader.invalid("delta_bytes", delta_bytes as u64));
        }
        if directory_height == 0 || allocation_height == 0 || directory_height > 32 || allocation_height > 32 {
            return Err(reader.invalid("tree height", u64::from(directory_height.max(allocation_height))));
        }
        let mut segment_table = Vec::with_capacity(page_count);
        for _ in 0..page_count {
            segment_table.push(reader.pointer()?);
        }
        let delta = reader.bytes(delta_bytes)?.to_vec();
        Ok(Metaroot {
            commit_counter,
            volume_id,
            flags,
            next_inode,
            directory_root: TreeRoot { pointer: directory_pointer, height: directory_height },
            allocation_root: TreeRoot { pointer: allocation_pointer, height: allocation_height },
            segment_table,
            delta,
        })
    }
}
