//! Metaroot records and the bounded search for the newest one.
//!
//! A metaroot names the committed state: both tree roots, the segment table's pages, the
//! commit counter. Records are appended page by page into one of three metaroot areas
//! (segments 1–3); the valid metaroot is the one with a good CRC and the highest counter.
//! Mount finds it with a handful of reads (the search itself is `Volume::mount`'s): pages 0
//! and 1 of each area (the area whose first records carry the highest counter is the current
//! one; two pages, because on MLC/TLC a torn program can corrupt its paired lower page), a
//! binary search for the current area's last programmed page, and a short step back past at
//! most one torn page. docs/FORMAT.md states the count and its worst case; tests/bounds.rs and
//! tests/invariants.rs assert it.
#![deny(clippy::indexing_slicing, clippy::unwrap_used)]

use alloc::vec::Vec;

use crate::address::PagePointer;
use crate::address::{ReadPointer, WritePointer};
use crate::btree::TreeRoot;
use fsoc_flash::codec::{crc32c_excluding, DecodeError, Reader, Writer};
use fsoc_flash::convert::u32_from_usize;

pub const METAROOT_MAGIC: u64 = u64::from_le_bytes(*b"FSOCMETA");
/// The version field of a metaroot equals its volume's format version (the superblock's).
pub const METAROOT_VERSION: u32 = crate::txn::superblock::FORMAT_VERSION;
use crate::txn::superblock::{FORMAT_VERSION_CHAINED_DELTA, FORMAT_VERSION_NVRAM};
pub const METAROOT_HEADER_BYTES: usize = 80;
const CHECKSUM_OFFSET: usize = 12;
/// Flag: written by a clean unmount (nothing was in flight after it).
pub const FLAG_CLEAN: u32 = 1;
/// Flag: the orphan list may be non-empty, so mount must look at it.
pub const FLAG_ORPHANS: u32 = 2;
/// The second copy of a clean-unmount record (docs/FORMAT.md, "Metaroot"): the first copy is
/// the page before it. Lets mount tell a lost copy (damage) from a later session's torn commit.
pub const FLAG_CLEAN_TWIN: u32 = 4;
/// Format version 12 on: the record's delta payload extends an earlier record's (its
/// `ChainLink`, stored before the payload) instead of holding every change since the full
/// commit. Kept out of `Metaroot::flags` in memory: `Metaroot::chain` says it.
pub const FLAG_CHAINED: u32 = 8;

/// Where a chained delta commit's base is: an earlier delta commit of the same full commit,
/// whose payload mount replays before the chained record's (docs/FORMAT.md, "Chained delta
/// commits").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChainLink {
    /// The metaroot area's segment and the page in it.
    pub segment: u32,
    pub page: u32,
    /// The base record's commit counter.
    pub commit_counter: u64,
}

impl ChainLink {
    pub const ENCODED_BYTES: usize = 16;
}

/// What a reader must know, from the superblock, to decode a volume's metaroots: the format
/// version and the shape of the segment table's directory (docs/FORMAT.md, "Metaroot").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MetarootShape {
    pub format_version: u32,
    /// Segment-table pages: `ceil(block_count / (page_data_bytes / 8))`.
    pub table_page_count: u32,
    /// 0: the metaroot names the table pages; 1: it names index pages, each naming
    /// `page_data_bytes / 8` table pages (format version 2 and later, for large tables).
    pub table_index_levels: u8,
    /// Index pages: `ceil(table_page_count / (page_data_bytes / 8))` when indexed, else 0.
    pub index_page_count: u32,
}

impl MetarootShape {
    /// The shape every metaroot of a volume has: version 1 always names the table pages;
    /// later versions name them directly only while they take at most a quarter of the page
    /// (`Metaroot::direct_table_pages_max`), so the rest stays free for delta payloads.
    pub fn for_volume(format_version: u32, segment_count: u32, page_size_bytes: usize) -> MetarootShape {
        let table_page_count = crate::segment::SegmentTable::page_count_for(segment_count, page_size_bytes);
        let indexed =
            format_version >= 2 && table_page_count as usize > Metaroot::direct_table_pages_max(page_size_bytes);
        // A page is at most 64 KiB (`Geometry::validate`).
        let pointers_per_page = u32_from_usize(page_size_bytes / PagePointer::ENCODED_BYTES);
        MetarootShape {
            format_version,
            table_page_count,
            table_index_levels: u8::from(indexed),
            index_page_count: if indexed { table_page_count.div_ceil(pointers_per_page) } else { 0 },
        }
    }

    pub fn is_indexed(&self) -> bool {
        self.table_index_levels > 0
    }

    /// Page pointers the metaroot's directory holds: index pages, or else table pages.
    pub fn directory_len(&self) -> usize {
        if self.is_indexed() {
            self.index_page_count as usize
        } else {
            self.table_page_count as usize
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Metaroot {
    pub commit_counter: u64,
    pub volume_id: u64,
    pub flags: u32,
    pub next_inode: u64,
    pub directory_root: TreeRoot,
    pub allocation_root: TreeRoot,
    /// The segment table's directory as stored: pointers to the table pages, or to the index
    /// pages when `shape` says the table is indexed.
    pub segment_table: Vec<PagePointer>,
    /// Format version and directory shape, fixed for the volume (from its superblock).
    pub shape: MetarootShape,
    /// Delta commit payload: the logical changes since the full commit whose roots this record
    /// names (opaque here; encoded and replayed by `fs::delta`). Empty for a full commit. In a
    /// chained record, the changes since its base.
    pub delta: Vec<u8>,
    /// Format version 12 on: the earlier delta commit this one's payload extends.
    pub chain: Option<ChainLink>,
    /// Format version 6 on: `commit_counter` minus the counter the NVRAM log's records must
    /// extend (`nvram_base`). 0 for a full commit; a delta commit, an NVRAM record and a mount's
    /// re-anchoring copy each raise the counter and this lag together, so a re-anchored record
    /// still names the log it was replayed with. 0 on older versions and without NVRAM.
    pub nvram_lag: u32,
}

impl Metaroot {
    /// The most page pointers a metaroot of this page size can hold in its directory.
    pub fn table_pages_max(page_size_bytes: usize) -> usize {
        (page_size_bytes - METAROOT_HEADER_BYTES) / PagePointer::ENCODED_BYTES
    }

    /// The most table pages a version-2 metaroot names directly: a quarter of what fits, so at
    /// least three quarters of the page stay for a delta payload (a larger table is indexed).
    pub fn direct_table_pages_max(page_size_bytes: usize) -> usize {
        Self::table_pages_max(page_size_bytes) / 4
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
        assert_eq!(
            self.segment_table.len(),
            self.shape.directory_len(),
            "metaroot directory length differs from its shape {:?}",
            self.shape
        );
        assert!(
            self.segment_table.len() <= Self::table_pages_max(page_size_bytes),
            "segment table of {} pages does not fit a metaroot",
            self.segment_table.len()
        );
        let link_bytes = if self.chain.is_some() { ChainLink::ENCODED_BYTES } else { 0 };
        assert!(
            link_bytes + self.delta.len() <= Self::delta_bytes_max(page_size_bytes, self.segment_table.len()),
            "delta of {} bytes does not fit a metaroot",
            self.delta.len()
        );
        assert!(
            self.chain.is_none()
                || (self.shape.format_version >= FORMAT_VERSION_CHAINED_DELTA && !self.delta.is_empty()),
            "a chained record needs format version 12 and a payload"
        );
        // Before version 12 bit 3 is an unknown bit, kept as read.
        assert!(
            self.flags & FLAG_CHAINED == 0 || self.shape.format_version < FORMAT_VERSION_CHAINED_DELTA,
            "the chained flag is `chain`'s to set"
        );
        assert!(self.shape.format_version >= 2 || !self.shape.is_indexed(), "version 1 has no table index");
        let delta_bytes = link_bytes + self.delta.len();
        let record_bytes = METAROOT_HEADER_BYTES + self.segment_table.len() * PagePointer::ENCODED_BYTES + delta_bytes;
        let mut writer = Writer::with_capacity(page_size_bytes);
        writer.u64_le(METAROOT_MAGIC);
        writer.u32_le(self.shape.format_version);
        writer.u32_le(0); // checksum placeholder at CHECKSUM_OFFSET
                          // Both lengths fit the page (asserted above).
        writer.u32_le(u32_from_usize(record_bytes));
        writer.u32_le(self.flags | if self.chain.is_some() { FLAG_CHAINED } else { 0 });
        writer.u64_le(self.commit_counter);
        writer.u64_le(self.volume_id);
        writer.u64_le(self.next_inode);
        writer.pointer(self.directory_root.pointer);
        writer.pointer(self.allocation_root.pointer);
        writer.u8(self.directory_root.height);
        writer.u8(self.allocation_root.height);
        writer.u8(self.shape.table_index_levels); // version 1: reserved, 0
        writer.u8(0); // reserved
        writer.u32_le(self.shape.table_page_count);
        writer.u32_le(u32_from_usize(delta_bytes));
        // Versions 1-5: reserved, 0.
        writer.u32_le(if self.shape.format_version >= FORMAT_VERSION_NVRAM { self.nvram_lag } else { 0 });
        assert_eq!(writer.bytes.len(), METAROOT_HEADER_BYTES, "metaroot header drifted from FORMAT.md");
        for pointer in &self.segment_table {
            writer.pointer(*pointer);
        }
        if let Some(link) = self.chain {
            writer.u32_le(link.segment);
            writer.u32_le(link.page);
            writer.u64_le(link.commit_counter);
        }
        writer.raw(&self.delta);
        let checksum = crc32c_excluding(&writer.bytes, CHECKSUM_OFFSET);
        let mut bytes = writer.bytes;
        bytes.splice(CHECKSUM_OFFSET..CHECKSUM_OFFSET + 4, checksum.to_le_bytes());
        bytes.resize(page_size_bytes, 0xFF);
        bytes
    }

    /// Decodes a metaroot of a volume whose metaroots have `shape` (from its superblock).
    pub fn decode(bytes: &[u8], shape: MetarootShape) -> Result<Metaroot, DecodeError> {
        let mut reader = Reader::new("metaroot", bytes);
        let magic = reader.u64_le()?;
        if magic != METAROOT_MAGIC {
            return Err(DecodeError::BadMagic { structure: "metaroot", found: magic });
        }
        let version = reader.u32_le()?;
        if version != shape.format_version {
            return Err(reader.invalid("version", u64::from(version)));
        }
        let directory_len = shape.directory_len();
        let stored = reader.u32_le()?;
        let record_bytes = reader.u32_le()? as usize;
        let table_bytes = METAROOT_HEADER_BYTES + directory_len * PagePointer::ENCODED_BYTES;
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
        // Version 1: a reserved byte, ignored; version 2: the table's index levels.
        let index_levels = reader.u8()?;
        let _reserved = reader.u8()?;
        let page_count = reader.u32_le()?;
        let delta_bytes = reader.u32_le()? as usize;
        let nvram_lag = reader.u32_le()?;
        let nvram_lag = if shape.format_version >= FORMAT_VERSION_NVRAM { nvram_lag } else { 0 };
        if u64::from(nvram_lag) > commit_counter {
            return Err(reader.invalid("nvram_lag", u64::from(nvram_lag)));
        }
        if shape.format_version >= 2 && index_levels != shape.table_index_levels {
            return Err(reader.invalid("table_index_levels", u64::from(index_levels)));
        }
        if page_count != shape.table_page_count {
            return Err(reader.invalid("table_page_count", u64::from(page_count)));
        }
        if table_bytes + delta_bytes != record_bytes {
            return Err(reader.invalid("delta_bytes", delta_bytes as u64));
        }
        if directory_height == 0 || allocation_height == 0 || directory_height > 32 || allocation_height > 32 {
            return Err(reader.invalid("tree height", u64::from(directory_height.max(allocation_height))));
        }
        let mut segment_table = Vec::with_capacity(directory_len);
        for _ in 0..directory_len {
            segment_table.push(reader.pointer()?);
        }
        let chained = shape.format_version >= FORMAT_VERSION_CHAINED_DELTA && flags & FLAG_CHAINED != 0;
        let chain = if chained {
            if delta_bytes <= ChainLink::ENCODED_BYTES {
                return Err(reader.invalid("chained delta_bytes", delta_bytes as u64));
            }
            let link =
                ChainLink { segment: reader.u32_le()?, page: reader.u32_le()?, commit_counter: reader.u64_le()? };
            if link.commit_counter >= commit_counter {
                return Err(reader.invalid("chain commit_counter", link.commit_counter));
            }
            Some(link)
        } else {
            None
        };
        let payload_bytes = delta_bytes - if chained { ChainLink::ENCODED_BYTES } else { 0 };
        let delta = reader.bytes(payload_bytes)?.to_vec();
        Ok(Metaroot {
            commit_counter,
            volume_id,
            flags: if chained { flags & !FLAG_CHAINED } else { flags },
            next_inode,
            directory_root: TreeRoot { pointer: directory_pointer, height: directory_height },
            allocation_root: TreeRoot { pointer: allocation_pointer, height: allocation_height },
            segment_table,
            shape,
            delta,
            chain,
            nvram_lag,
        })
    }

    /// The commit counter an NVRAM log's records must extend to belong to this state.
    pub fn nvram_base(&self) -> u64 {
        self.commit_counter - u64::from(self.nvram_lag)
    }
}
