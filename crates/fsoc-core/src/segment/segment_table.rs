//! Segment table: per-segment valid-page counts, erase counts and retirement, and which table
//! pages changed since the last commit. Nothing here knows what a page holds.
//!
//! Invariant: `valid_pages[s]` equals the number of pages of segment s referenced by the
//! working state; `freed_this_transaction[s]` counts pages of s the working state dropped since
//! the last commit (the committed state may still reference them), so a segment is reusable
//! only when both are zero.
//!
//! Invariant: no query scans the entries. Totals and the orderings the allocator and the cleaner
//! need (free segments by wear, used segments by valid count and by wear, a histogram of used
//! segments by valid count) are kept in step with every change, in O(log segments) each;
//! `index_mismatch` recounts them from the entries (debug builds after every transaction, tests,
//! fsck), and `entries_visited` counts the entries an operation looked at.

use alloc::collections::{BTreeMap, BTreeSet};
use alloc::format;
use alloc::string::String;
use alloc::vec;
use alloc::vec::Vec;
use core::sync::atomic::{AtomicU64, Ordering};

use crate::address::PagePointer;
use crate::address::{ReadPointer, WritePointer};
use crate::segment::layout::FIRST_LOG_SEGMENT;
use crate::segment::pair_set::PairSet;
use fsoc_flash::codec::{DecodeError, Reader, Writer};
use fsoc_flash::convert::u32_from_usize;

/// Encoded size of one segment entry (docs/FORMAT.md, "Segment table").
pub const SEGMENT_ENTRY_BYTES: usize = 8;
const RETIRED_FLAG: u32 = 1 << 31;
const ERASE_COUNT_MASK: u32 = (1 << 28) - 1;
/// Bits 28..31 of an entry's second word: blocks of the segment masked out (format version 8).
const MASKED_SHIFT: u32 = 28;
const MASKED_BITS: u32 = 0b111 << MASKED_SHIFT;
/// The most blocks of one segment that can be masked out; a segment losing more is retired.
pub const MASKED_BLOCKS_MAX: u32 = 7;

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SegmentEntry {
    pub valid_pages: u32,
    pub erase_count: u32,
    /// Never allocated from again (its blocks went bad, or one did where a segment cannot go on
    /// without it: parity, one chip).
    pub retired: bool,
    /// Blocks of the segment marked bad and left out while the others are used (the chip
    /// mask; format version 8): which ones, the flash's bad-block marks say when the segment
    /// is opened. At most `MASKED_BLOCKS_MAX`.
    pub masked_blocks: u32,
}

/// A segment's entry as the table keeps it in RAM: 8 bytes, the retired flag beside the erase
/// count as on flash (the count never exceeds `ERASE_COUNT_MASK`), not 12.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct PackedEntry {
    valid_pages: u32,
    word: u32,
}

impl PackedEntry {
    fn pack(entry: SegmentEntry) -> PackedEntry {
        PackedEntry { valid_pages: entry.valid_pages, word: entry_word(entry) }
    }

    fn unpack(self) -> SegmentEntry {
        SegmentEntry {
            valid_pages: self.valid_pages,
            erase_count: self.word & ERASE_COUNT_MASK,
            retired: self.word & RETIRED_FLAG != 0,
            masked_blocks: (self.word & MASKED_BITS) >> MASKED_SHIFT,
        }
    }
}

/// An entry's second word as on flash: erase count, masked blocks, retired flag.
fn entry_word(entry: SegmentEntry) -> u32 {
    debug_assert!(entry.erase_count <= ERASE_COUNT_MASK, "erase count {} past the mask", entry.erase_count);
    debug_assert!(entry.masked_blocks <= MASKED_BLOCKS_MAX, "{} masked blocks", entry.masked_blocks);
    let flags = if entry.retired { RETIRED_FLAG } else { 0 };
    entry.erase_count & ERASE_COUNT_MASK | (entry.masked_blocks.min(MASKED_BLOCKS_MAX) << MASKED_SHIFT) | flags
}

/// Counts segment entries looked at (every accessor call, every element a search passes, every
/// entry of a full pass), so tests can check that an operation's cost does not follow the
/// segment count. Atomic so that `&self` queries can count without giving up `Sync`.
#[derive(Debug, Default)]
struct VisitCounter(AtomicU64);

impl VisitCounter {
    fn add(&self, entries: u64) {
        self.0.fetch_add(entries, Ordering::Relaxed);
    }

    fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

impl Clone for VisitCounter {
    fn clone(&self) -> Self {
        VisitCounter(AtomicU64::new(self.get()))
    }
}

/// Prefix sums over valid-page counts 1..=pages_per_segment (a Fenwick tree): O(log pages per
/// segment) to change one count or to sum a prefix, whatever the number of segments.
#[derive(Clone, Debug)]
struct PrefixSums {
    sums: Vec<u64>,
}

impl PrefixSums {
    fn new(max_index: u32) -> Self {
        PrefixSums { sums: vec![0; max_index as usize + 1] }
    }

    /// Adds `delta` (two's complement for a decrease) at `index` (1-based).
    fn add(&mut self, index: u32, delta: u64) {
        assert!(index >= 1, "prefix sums are 1-based");
        let mut position = index as usize;
        while let Some(sum) = self.sums.get_mut(position) {
            *sum = sum.wrapping_add(delta);
            position += position & position.wrapping_neg();
        }
    }

    /// Sum of the values at 1..=index (index clamped to the last).
    fn prefix(&self, index: u32) -> u64 {
        let mut position = (index as usize).min(self.sums.len() - 1);
        let mut sum = 0u64;
        while position > 0 {
            if let Some(value) = self.sums.get(position) {
                sum = sum.wrapping_add(*value);
            }
            position &= position - 1;
        }
        sum
    }
}

/// Totals and indexes rebuilt from the entries (by `recount`, and by `index_mismatch` to compare
/// with the maintained ones).
struct Indexes {
    free_segment_count: u32,
    retired_segment_count: u32,
    retired_after_use_count: u32,
    total_valid_pages: u64,
    reclaimable_segment_count: u32,
    free_by_wear: PairSet,
    used_by_valid: PairSet,
    used_by_wear: PairSet,
    erase_counts: BTreeMap<u32, u32>,
    /// Used segments per occupied count.
    histogram: Vec<u64>,
    masked_blocks: u64,
    free_masked_blocks: u64,
}

impl Indexes {
    fn add(&mut self, segment_index: u32, membership: Membership) {
        if membership.free {
            self.free_segment_count += 1;
            self.free_by_wear.insert((membership.erase_count, segment_index));
        }
        if membership.reclaimable {
            self.reclaimable_segment_count += 1;
        }
        if membership.used {
            self.used_by_valid.insert((membership.valid_pages, segment_index));
            self.used_by_wear.insert((membership.erase_count, segment_index));
            // Sized `pages_per_segment + 1`, and no entry holds more valid pages (decode refuses).
            if let Some(count) = self.histogram.get_mut(membership.valid_pages as usize) {
                *count += 1;
            }
        }
        if membership.tracked {
            *self.erase_counts.entry(membership.erase_count).or_insert(0) += 1;
            self.masked_blocks += u64::from(membership.masked_blocks);
        }
        if membership.free {
            self.free_masked_blocks += u64::from(membership.masked_blocks);
        }
    }
}

/// Which maintained structures a segment belongs to, and under which keys.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Membership {
    /// `is_free`: in `free_by_wear`.
    free: bool,
    /// A log segment, not retired, with valid pages: in `used_by_valid`, `used_by_wear` and the
    /// histogram (cleaner victims).
    used: bool,
    /// A log segment, not retired: in `erase_counts` (the wear spread).
    tracked: bool,
    /// A log segment, not retired, with no valid page but pages dropped this transaction: a
    /// commit makes it free.
    reclaimable: bool,
    /// The key of `used_by_valid` and the histogram: valid pages plus the pages of masked
    /// blocks (`occupied_pages`), so a masked segment full of live pages is no victim.
    valid_pages: u32,
    erase_count: u32,
    masked_blocks: u32,
}

/// Pages of a segment that hold live data or cannot hold any (its masked blocks): what its
/// dead pages are counted from. At most `pages_per_segment` (a block masked while it held
/// live pages counts them once).
fn occupied_pages(entry: SegmentEntry, block_pages: u32, pages_per_segment: u32) -> u32 {
    entry.valid_pages.saturating_add(entry.masked_blocks.saturating_mul(block_pages)).min(pages_per_segment)
}

/// Which maintained structures a segment with this entry and freed count belongs to.
fn membership_of(
    segment_index: u32,
    entry: SegmentEntry,
    freed: u32,
    block_pages: u32,
    pages_per_segment: u32,
    lent: bool,
) -> Membership {
    // A segment lent to a metaroot area is out of the log while it serves (format version 9).
    let log = segment_index >= FIRST_LOG_SEGMENT && !lent;
    let tracked = log && !entry.retired;
    let used = tracked && entry.valid_pages > 0;
    Membership {
        free: tracked && entry.valid_pages == 0 && freed == 0,
        used,
        tracked,
        reclaimable: tracked && entry.valid_pages == 0 && freed > 0,
        valid_pages: if used { occupied_pages(entry, block_pages, pages_per_segment) } else { entry.valid_pages },
        erase_count: entry.erase_count,
        masked_blocks: entry.masked_blocks,
    }
}

/// A log segment retired after at least one erase (`SegmentTable::retired_after_use_count`).
fn retired_after_use(segment_index: u32, entry: SegmentEntry) -> bool {
    segment_index >= FIRST_LOG_SEGMENT && entry.retired && entry.erase_count > 0
}

/// Dead pages of used segments (log segments, not retired, holding valid pages), split at a
/// threshold: `SegmentTable::dead_pages_split`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DeadPages {
    /// Segments with at least the threshold of dead pages, and their dead pages.
    pub segments_at_least: u64,
    pub dead_at_least: u64,
    /// Segments below the threshold, and their dead pages.
    pub segments_below: u64,
    pub dead_below: u64,
}

#[derive(Clone, Debug)]
pub struct SegmentTable {
    entries: Vec<PackedEntry>,
    /// Per segment that dropped pages this transaction, how many (absent: none): kept sparse,
    /// as a transaction touches few segments and a per-segment array cost 4 bytes a segment.
    freed_this_transaction: BTreeMap<u32, u32>,
    /// Segments whose `freed_this_transaction` is non-zero, so the end of a transaction resets
    /// only those.
    freed_segments: Vec<u32>,
    /// Table pages whose entries changed since they were last written.
    dirty_pages: BTreeSet<u32>,
    /// Where each table page is on flash (recorded in the metaroot, or in the index pages).
    pub directory: Vec<PagePointer>,
    /// Where each index page is on flash, when the table is indexed (docs/FORMAT.md, "Segment
    /// table index page"): the metaroot names these, and index page j names table pages
    /// `j × entries_per_page …`. Empty when the metaroot names the table pages directly.
    pub index_directory: Vec<PagePointer>,
    /// Index pages whose pointers changed since they were last written.
    dirty_index_pages: BTreeSet<u32>,
    entries_per_page: u32,
    pages_per_segment: u32,
    /// Pages one masked block takes out of its segment (0 where blocks are never masked).
    block_pages: u32,
    /// Masked blocks of the log segments not retired, and of the free ones.
    masked_blocks: u64,
    free_masked_blocks: u64,
    /// Maintained with every change, so space checks cost O(1) instead of a scan of the
    /// table (`check_totals` recounts them).
    free_segment_count: u32,
    retired_segment_count: u32,
    /// Log segments retired after at least one erase (worn or failed in service, not bad from
    /// the factory): what end of life counts (`retired_after_use_count`).
    retired_after_use_count: u32,
    total_valid_pages: u64,
    reclaimable_segment_count: u32,
    /// Free segments by (erase count, index): the allocator takes the first.
    free_by_wear: PairSet,
    /// Used segments by (valid pages, index): the cleaner's victims, emptiest first.
    used_by_valid: PairSet,
    /// Used segments by (erase count, index): static wear levelling takes the coldest.
    used_by_wear: PairSet,
    /// Log segments not retired, per erase count: the wear spread.
    erase_counts: BTreeMap<u32, u32>,
    /// Used segments per valid count (`histogram_segments`) and their valid pages
    /// (`histogram_valid_pages`), as prefix sums over valid counts.
    histogram_segments: PrefixSums,
    histogram_valid_pages: PrefixSums,
    /// Entry changes made, so a caller can tell whether an operation changed the accounting.
    change_count: u64,
    entries_visited: VisitCounter,
    /// Log segments lent to the metaroot areas (format version 9; at most three): out of every
    /// index while they serve, as if retired, but stored as they are (free, with their erase
    /// counts), so that an area moving back out needs no table write. Not stored: the volume
    /// lends the superblock's areas again when it loads the table.
    lent: Vec<u32>,
    /// Format version 9: segment 4 is the superblock's second home, retired from format on and
    /// counted with the reserved segments, not the log's (`reserve_second_home`).
    second_home: bool,
}

impl SegmentTable {
    pub fn entries_per_page(page_size_bytes: usize) -> u32 {
        // A page is at most 64 KiB (`Geometry::validate`).
        u32_from_usize(page_size_bytes / SEGMENT_ENTRY_BYTES)
    }

    pub fn page_count_for(segment_count: u32, page_size_bytes: usize) -> u32 {
        segment_count.div_ceil(Self::entries_per_page(page_size_bytes))
    }

    /// A fresh table for a new volume: every table page dirty, nothing on flash yet.
    pub fn new(segment_count: u32, pages_per_segment: u32, page_size_bytes: usize) -> Self {
        let entries_per_page = Self::entries_per_page(page_size_bytes);
        let page_count = Self::page_count_for(segment_count, page_size_bytes);
        let mut table = SegmentTable {
            entries: vec![PackedEntry::default(); segment_count as usize],
            freed_this_transaction: BTreeMap::new(),
            freed_segments: Vec::new(),
            dirty_pages: (0..page_count).collect(),
            directory: vec![PagePointer::NULL; page_count as usize],
            index_directory: Vec::new(),
            dirty_index_pages: BTreeSet::new(),
            entries_per_page,
            pages_per_segment,
            block_pages: 0,
            masked_blocks: 0,
            free_masked_blocks: 0,
            free_segment_count: 0,
            retired_segment_count: 0,
            retired_after_use_count: 0,
            total_valid_pages: 0,
            reclaimable_segment_count: 0,
            free_by_wear: PairSet::new(),
            used_by_valid: PairSet::new(),
            used_by_wear: PairSet::new(),
            erase_counts: BTreeMap::new(),
            histogram_segments: PrefixSums::new(pages_per_segment),
            histogram_valid_pages: PrefixSums::new(pages_per_segment),
            change_count: 0,
            entries_visited: VisitCounter::default(),
            lent: Vec::new(),
            second_home: false,
        };
        table.recount();
        table
    }

    /// Sets the pages one masked block takes out of its segment (the log's pages per block;
    /// the table is recounted).
    pub fn with_block_pages(mut self, block_pages: u32) -> Self {
        self.block_pages = block_pages;
        self.recount();
        self
    }

    /// Makes the table indexed with `index_page_count` index pages, all dirty (a new volume's
    /// table; a loaded one gets its pointers from `decode_index_page`).
    pub fn with_index_pages(mut self, index_page_count: u32) -> Self {
        assert!(index_page_count > 0, "an indexed table has index pages");
        assert_eq!(
            self.page_count().div_ceil(self.entries_per_page),
            index_page_count,
            "index pages must cover the table pages exactly"
        );
        self.index_directory = vec![PagePointer::NULL; index_page_count as usize];
        self.dirty_index_pages = (0..index_page_count).collect();
        self
    }

    pub fn is_indexed(&self) -> bool {
        !self.index_directory.is_empty()
    }

    pub fn index_page_count(&self) -> u32 {
        // Sized from a u32 count (`with_index_pages`, or the metaroot's directory of as many).
        u32_from_usize(self.index_directory.len())
    }

    /// What the metaroot names: the index pages of an indexed table, else the table pages.
    pub fn metaroot_directory(&self) -> Vec<PagePointer> {
        if self.is_indexed() {
            self.index_directory.clone()
        } else {
            self.directory.clone()
        }
    }

    /// Table page `page_index` moved: the index page naming it must be rewritten. Returns
    /// where it was, or `None` (nothing changed) for a page the table does not have.
    pub fn table_page_moved(&mut self, page_index: u32, pointer: PagePointer) -> Option<PagePointer> {
        let old = core::mem::replace(self.directory.get_mut(page_index as usize)?, pointer);
        if self.is_indexed() {
            self.dirty_index_pages.insert(page_index / self.entries_per_page);
        }
        Some(old)
    }

    pub fn mark_index_page_dirty(&mut self, index_page: u32) {
        assert!(index_page < self.index_page_count(), "index page {index_page} out of range");
        self.dirty_index_pages.insert(index_page);
    }

    pub fn first_dirty_index_page_not_in(&self, done: &BTreeSet<u32>) -> Option<u32> {
        self.dirty_index_pages.iter().copied().find(|page| !done.contains(page))
    }

    /// Encodes index page `index_page` (docs/FORMAT.md, "Segment table index page"): the
    /// pointers of the table pages it covers, then 0xFF to the end of the page.
    pub fn encode_index_page(&self, index_page: u32, page_size_bytes: usize) -> Vec<u8> {
        let first = (index_page * self.entries_per_page) as usize;
        let last = (first + self.entries_per_page as usize).min(self.directory.len());
        let mut writer = Writer::with_capacity(page_size_bytes);
        // An index page past the table names no table page: all of it reads as erased.
        for pointer in self.directory.get(first..last).unwrap_or_default() {
            writer.pointer(*pointer);
        }
        let mut bytes = writer.bytes;
        bytes.resize(page_size_bytes, 0xFF);
        bytes
    }

    /// Loads the table-page pointers of index page `index_page` from untrusted bytes
    /// (checksum already verified). Slots past the last table page must read as erased.
    pub fn decode_index_page(&mut self, index_page: u32, bytes: &[u8]) -> Result<(), DecodeError> {
        let first = (index_page * self.entries_per_page) as usize;
        let last = (first + self.entries_per_page as usize).min(self.directory.len());
        let mut reader = Reader::new("segment table index page", bytes);
        for slot in self.directory.get_mut(first..last).unwrap_or_default() {
            *slot = reader.pointer()?;
        }
        for _slot in last..first + self.entries_per_page as usize {
            let unused = reader.u64_le()?;
            if unused != u64::MAX {
                return Err(reader.invalid("unused pointer slot", unused));
            }
        }
        Ok(())
    }

    /// The entry and freed count of `segment_index`.
    // Invariant: segment indices reach the table from its own ordered sets and ranges, or as
    // `Layout::segment_of` of an address inside the volume (addresses read from flash are
    // checked before: `SegmentLog::release`; delta records go through `apply_delta`), so an
    // index outside the table is a bug here, never bad input.
    #[track_caller]
    #[allow(clippy::panic)]
    fn slot(&self, segment_index: u32) -> (SegmentEntry, u32) {
        match self.entries.get(segment_index as usize) {
            Some(&entry) => (entry.unpack(), self.freed_this_transaction.get(&segment_index).copied().unwrap_or(0)),
            None => panic!("segment {segment_index} outside a table of {} segments", self.entries.len()),
        }
    }

    /// Moves `segment_index` from the structures and keys of `before` to those of `after`,
    /// touching only what differs.
    fn reindex(&mut self, segment_index: u32, before: Membership, after: Membership) {
        let s = segment_index;
        if (before.free, before.erase_count) != (after.free, after.erase_count) {
            if before.free {
                assert!(self.free_by_wear.remove(&(before.erase_count, s)), "segment {s} missing from the free set");
            }
            if after.free {
                self.free_by_wear.insert((after.erase_count, s));
            }
        }
        self.free_segment_count = self.free_segment_count + u32::from(after.free) - u32::from(before.free);
        let masked =
            |membership: Membership, member: bool| if member { u64::from(membership.masked_blocks) } else { 0 };
        self.masked_blocks = self.masked_blocks + masked(after, after.tracked) - masked(before, before.tracked);
        self.free_masked_blocks = self.free_masked_blocks + masked(after, after.free) - masked(before, before.free);
        self.reclaimable_segment_count =
            self.reclaimable_segment_count + u32::from(after.reclaimable) - u32::from(before.reclaimable);
        if (before.used, before.valid_pages) != (after.used, after.valid_pages) {
            if before.used {
                assert!(self.used_by_valid.remove(&(before.valid_pages, s)), "segment {s} missing from the victim set");
                self.histogram_segments.add(before.valid_pages, u64::MAX);
                self.histogram_valid_pages.add(before.valid_pages, u64::from(before.valid_pages).wrapping_neg());
            }
            if after.used {
                self.used_by_valid.insert((after.valid_pages, s));
                self.histogram_segments.add(after.valid_pages, 1);
                self.histogram_valid_pages.add(after.valid_pages, u64::from(after.valid_pages));
            }
        }
        if (before.used, before.erase_count) != (after.used, after.erase_count) {
            if before.used {
                assert!(self.used_by_wear.remove(&(before.erase_count, s)), "segment {s} missing from the wear set");
            }
            if after.used {
                self.used_by_wear.insert((after.erase_count, s));
            }
        }
        if (before.tracked, before.erase_count) != (after.tracked, after.erase_count) {
            if before.tracked {
                let count = self.erase_counts.get(&before.erase_count).copied().unwrap_or(0);
                assert!(count > 0, "segment {s}: erase count {} missing from the census", before.erase_count);
                if count == 1 {
                    self.erase_counts.remove(&before.erase_count);
                } else {
                    self.erase_counts.insert(before.erase_count, count - 1);
                }
            }
            if after.tracked {
                *self.erase_counts.entry(after.erase_count).or_insert(0) += 1;
            }
        }
    }

    /// Rebuilds every maintained total and index from the entries (after loading pages with
    /// `decode_page`): one pass over the table.
    pub(crate) fn recount(&mut self) {
        // The old indexes go first: they are rebuilt whole from the entries, and holding both
        // at once doubled the table's peak memory (about 20 B per segment) on every load.
        self.install(Self::empty_indexes(0));
        let mut fresh = Self::empty_indexes(self.pages_per_segment);
        self.entries_visited.add(u64::from(self.segment_count()));
        self.add_every_entry(&mut fresh);
        fresh.retired_segment_count = self.entries.iter().map(|packed| u32::from(packed.unpack().retired)).sum();
        fresh.retired_after_use_count = self.count_retired_after_use();
        fresh.total_valid_pages = self.entries.iter().map(|packed| u64::from(packed.valid_pages)).sum();
        self.install(fresh);
        self.freed_segments = self.segments_with_dropped_pages();
    }

    /// Adds every entry to `indexes` as the maintained indexes hold it (`recount`, and the
    /// comparison `index_mismatch` makes).
    fn add_every_entry(&self, indexes: &mut Indexes) {
        for (segment_index, entry) in (0u32..).zip(self.entries.iter().map(|packed| packed.unpack())) {
            let freed = self.freed_this_transaction.get(&segment_index).copied().unwrap_or(0);
            let lent = self.is_lent(segment_index);
            indexes.add(
                segment_index,
                membership_of(segment_index, entry, freed, self.block_pages, self.pages_per_segment, lent),
            );
        }
    }

    /// Segments whose `freed_this_transaction` is non-zero, ascending (a pass over those only).
    fn segments_with_dropped_pages(&self) -> Vec<u32> {
        self.freed_this_transaction.iter().filter(|&(_, &freed)| freed > 0).map(|(&s, _)| s).collect()
    }

    fn empty_indexes(pages_per_segment: u32) -> Indexes {
        Indexes {
            free_segment_count: 0,
            retired_segment_count: 0,
            retired_after_use_count: 0,
            total_valid_pages: 0,
            reclaimable_segment_count: 0,
            free_by_wear: PairSet::new(),
            used_by_valid: PairSet::new(),
            used_by_wear: PairSet::new(),
            erase_counts: BTreeMap::new(),
            histogram: vec![0; pages_per_segment as usize + 1],
            masked_blocks: 0,
            free_masked_blocks: 0,
        }
    }

    fn install(&mut self, fresh: Indexes) {
        self.free_segment_count = fresh.free_segment_count;
        self.retired_segment_count = fresh.retired_segment_count;
        self.retired_after_use_count = fresh.retired_after_use_count;
        self.total_valid_pages = fresh.total_valid_pages;
        self.reclaimable_segment_count = fresh.reclaimable_segment_count;
        self.free_by_wear = fresh.free_by_wear;
        self.used_by_valid = fresh.used_by_valid;
        self.used_by_wear = fresh.used_by_wear;
        self.erase_counts = fresh.erase_counts;
        self.masked_blocks = fresh.masked_blocks;
        self.free_masked_blocks = fresh.free_masked_blocks;
        self.histogram_segments = PrefixSums::new(self.pages_per_segment);
        self.histogram_valid_pages = PrefixSums::new(self.pages_per_segment);
        for (valid_pages, &count) in (0u32..).zip(&fresh.histogram).skip(1) {
            if count > 0 {
                self.histogram_segments.add(valid_pages, count);
                self.histogram_valid_pages.add(valid_pages, count * u64::from(valid_pages));
            }
        }
    }

    /// The first maintained total or index that differs from a recount of the entries, if any
    /// (fsck reports it as a violation; `check_totals` panics). One pass over the table; not
    /// counted in `entries_visited`.
    pub fn index_mismatch(&self) -> Option<String> {
        let mut fresh = Self::empty_indexes(self.pages_per_segment);
        self.add_every_entry(&mut fresh);
        let retired: u32 = self.entries.iter().map(|packed| u32::from(packed.unpack().retired)).sum();
        let retired_after_use = self.count_retired_after_use();
        let valid: u64 = self.entries.iter().map(|packed| u64::from(packed.valid_pages)).sum();
        let freed = self.segments_with_dropped_pages();
        let mut listed = self.freed_segments.clone();
        listed.sort_unstable();
        // `fresh.histogram` has a count for each valid count 0..=pages_per_segment.
        let histogram_differs = (1..=self.pages_per_segment)
            .zip(fresh.histogram.iter().skip(1))
            .find(|&(valid_pages, &fresh_count)| {
                let count = |sums: &PrefixSums| sums.prefix(valid_pages).wrapping_sub(sums.prefix(valid_pages - 1));
                count(&self.histogram_segments) != fresh_count
                    || count(&self.histogram_valid_pages) != fresh_count * u64::from(valid_pages)
            })
            .map(|(valid_pages, _)| valid_pages);
        let differences = [
            (
                self.free_segment_count != fresh.free_segment_count,
                "free segment count",
                format!("{} vs {}", self.free_segment_count, fresh.free_segment_count),
            ),
            (
                self.retired_segment_count != retired,
                "retired segment count",
                format!("{} vs {retired}", self.retired_segment_count),
            ),
            (
                self.retired_after_use_count != retired_after_use,
                "count of segments retired after use",
                format!("{} vs {retired_after_use}", self.retired_after_use_count),
            ),
            (self.total_valid_pages != valid, "valid page total", format!("{} vs {valid}", self.total_valid_pages)),
            (
                self.reclaimable_segment_count != fresh.reclaimable_segment_count,
                "reclaimable segment count",
                format!("{} vs {}", self.reclaimable_segment_count, fresh.reclaimable_segment_count),
            ),
            (
                self.free_by_wear != fresh.free_by_wear,
                "free segments by wear",
                format!("{} vs {} entries", self.free_by_wear.len(), fresh.free_by_wear.len()),
            ),
            (
                self.used_by_valid != fresh.used_by_valid,
                "used segments by valid count",
                format!("{} vs {} entries", self.used_by_valid.len(), fresh.used_by_valid.len()),
            ),
            (
                self.used_by_wear != fresh.used_by_wear,
                "used segments by wear",
                format!("{} vs {} entries", self.used_by_wear.len(), fresh.used_by_wear.len()),
            ),
            (
                self.erase_counts != fresh.erase_counts,
                "erase-count census",
                format!("{:?} vs {:?}", self.erase_counts.first_key_value(), fresh.erase_counts.first_key_value()),
            ),
            (
                histogram_differs.is_some(),
                "valid-count histogram",
                format!("first difference at {histogram_differs:?} valid pages"),
            ),
            (
                (self.masked_blocks, self.free_masked_blocks) != (fresh.masked_blocks, fresh.free_masked_blocks),
                "masked block totals",
                format!(
                    "{}/{} vs {}/{}",
                    self.masked_blocks, self.free_masked_blocks, fresh.masked_blocks, fresh.free_masked_blocks
                ),
            ),
            (
                listed != freed,
                "segments with dropped pages",
                format!("{} listed vs {} found", listed.len(), freed.len()),
            ),
        ];
        differences
            .into_iter()
            .find(|(differs, _, _)| *differs)
            .map(|(_, what, detail)| format!("maintained {what} differs from a recount: {detail}"))
    }

    /// Panics if a maintained total or index differs from a recount (tests, debug builds).
    // Invariant: the maintained indexes are kept in step by this module alone; a difference is
    // a bug here, which debug builds and tests must stop at (fsck reports `index_mismatch`).
    #[allow(clippy::panic)]
    pub fn check_totals(&self) {
        if let Some(mismatch) = self.index_mismatch() {
            panic!("segment table: {mismatch}");
        }
    }

    /// Applies `change` to one segment's entry and freed count, keeping the totals in step.
    fn update(&mut self, segment_index: u32, change: impl FnOnce(&mut SegmentEntry, &mut u32)) {
        self.change_count += 1;
        self.apply(segment_index, change);
        self.touch(segment_index);
    }

    /// `update` without marking the table page dirty (for state that is not stored).
    fn apply(&mut self, segment_index: u32, change: impl FnOnce(&mut SegmentEntry, &mut u32)) {
        self.entries_visited.add(1);
        let (before_entry, before_freed) = self.slot(segment_index);
        let (block_pages, pages_per_segment) = (self.block_pages, self.pages_per_segment);
        let lent = self.is_lent(segment_index);
        let before = membership_of(segment_index, before_entry, before_freed, block_pages, pages_per_segment, lent);
        let (mut after_entry, mut after_freed) = (before_entry, before_freed);
        change(&mut after_entry, &mut after_freed);
        if let Some(slot) = self.entries.get_mut(segment_index as usize) {
            *slot = PackedEntry::pack(after_entry);
        }
        if after_freed == 0 {
            self.freed_this_transaction.remove(&segment_index);
        } else {
            self.freed_this_transaction.insert(segment_index, after_freed);
        }
        let after = membership_of(segment_index, after_entry, after_freed, block_pages, pages_per_segment, lent);
        if before != after {
            self.reindex(segment_index, before, after);
        }
        if before_freed == 0 && after_freed > 0 {
            self.freed_segments.push(segment_index);
        }
        self.retired_segment_count =
            self.retired_segment_count + u32::from(after_entry.retired) - u32::from(before_entry.retired);
        self.retired_after_use_count = self.retired_after_use_count
            + u32::from(retired_after_use(segment_index, after_entry))
            - u32::from(retired_after_use(segment_index, before_entry));
        self.total_valid_pages =
            self.total_valid_pages + u64::from(after_entry.valid_pages) - u64::from(before_entry.valid_pages);
    }

    pub fn segment_count(&self) -> u32 {
        // Sized from a u32 segment count (`new`).
        u32_from_usize(self.entries.len())
    }

    pub fn page_count(&self) -> u32 {
        // Sized from a u32 page count (`new`, or the metaroot's directory of as many).
        u32_from_usize(self.directory.len())
    }

    pub fn entry(&self, segment_index: u32) -> SegmentEntry {
        self.entries_visited.add(1);
        self.slot(segment_index).0
    }

    pub fn freed_this_transaction(&self, segment_index: u32) -> u32 {
        self.entries_visited.add(1);
        self.slot(segment_index).1
    }

    fn touch(&mut self, segment_index: u32) {
        self.dirty_pages.insert(segment_index / self.entries_per_page);
    }

    pub fn mark_page_dirty(&mut self, page_index: u32) {
        assert!(page_index < self.page_count(), "table page {page_index} out of range");
        self.dirty_pages.insert(page_index);
    }

    pub fn add_valid(&mut self, segment_index: u32) {
        let pages_per_segment = self.pages_per_segment;
        self.update(segment_index, |entry, _| {
            entry.valid_pages += 1;
            assert!(
                entry.valid_pages <= pages_per_segment,
                "segment {segment_index}: {} valid pages > {pages_per_segment} pages per segment",
                entry.valid_pages
            );
        });
    }

    pub fn remove_valid(&mut self, segment_index: u32) {
        self.update(segment_index, |entry, freed| {
            assert!(entry.valid_pages > 0, "segment {segment_index}: release of a page not counted valid");
            entry.valid_pages -= 1;
            *freed += 1;
        });
    }

    /// Replays a delta commit's data-page accounting for one segment onto the table of the full
    /// commit it follows. Untrusted input: refuses counts the segment cannot hold.
    ///
    /// Erase counts are written with the table at full commits only, so the erase of a segment
    /// opened since is not on flash. It is derived here instead: a segment that was free at the
    /// full commit (no valid page, not retired; nothing dropped yet in this replay) and that the
    /// delta gives data pages was opened, so erased, since; and exactly once, because pages
    /// dropped since the last full commit are not reused before the next one (its pages stay in
    /// `freed_this_transaction`). A segment the delta names again (a later NVRAM record) is no
    /// longer free then, so the erase is counted once however many payloads name it. What stays
    /// uncounted: segments opened after the last transaction point (their pages were never
    /// committed) and metadata-head segments (tree nodes a mid-transaction flush wrote; the
    /// delta records data pages only). One case is counted once too often: the data head's
    /// segment when it was open at the full commit with every page already dropped (it goes on
    /// taking pages without an erase). Both are at most one erase per segment per power cut.
    pub fn apply_delta(&mut self, segment_index: u32, allocated: u32, released: u32) -> Result<(), &'static str> {
        let pages_per_segment = self.pages_per_segment;
        let Some(entry) = self.entries.get(segment_index as usize).map(|packed| packed.unpack()) else {
            return Err("delta names a segment outside the volume");
        };
        let freed_before = self.freed_this_transaction.get(&segment_index).copied().unwrap_or(0);
        if segment_index < FIRST_LOG_SEGMENT {
            return Err("delta names a reserved segment");
        }

        let valid = u64::from(entry.valid_pages) + u64::from(allocated);
        let valid = valid.checked_sub(u64::from(released)).ok_or("delta releases more pages than the segment holds")?;
        let valid = u32::try_from(valid)
            .ok()
            .filter(|&valid| valid <= pages_per_segment)
            .ok_or("delta gives a segment more valid pages than it has")?;
        // A segment the log used and emptied after the full commit may serve as a metaroot area
        // since (format version 9): the delta names it, but may leave nothing live in it.
        if valid > 0 && self.is_lent(segment_index) {
            return Err("delta leaves live pages in a segment that serves as a metaroot area");
        }
        let freed_total = freed_before.checked_add(released).ok_or("delta releases too many pages")?;
        let opened_since = allocated > 0 && entry.valid_pages == 0 && freed_before == 0 && !entry.retired;
        self.update(segment_index, |entry, freed| {
            entry.valid_pages = valid;
            *freed = freed_total;
            if opened_since {
                entry.erase_count = (entry.erase_count + 1).min(ERASE_COUNT_MASK);
            }
        });
        Ok(())
    }

    /// Whether `segment_index` is lent to a metaroot area (`set_lent`).
    pub fn is_lent(&self, segment_index: u32) -> bool {
        self.lent.contains(&segment_index)
    }

    /// Lends a free log segment to a metaroot area, or takes it back (format version 9): a lent
    /// segment is in no index (not free, not used, not in the wear census), as a retired one,
    /// but its entry is unchanged, so it is stored free with its erase count and is free again
    /// for a mount whose superblock no longer names it.
    pub fn set_lent(&mut self, segment_index: u32, lent: bool) {
        let (entry, freed) = self.slot(segment_index);
        let was = self.is_lent(segment_index);
        if was == lent {
            return;
        }
        assert!(!lent || entry.valid_pages == 0, "segment {segment_index} lent while it holds live pages");
        let (block_pages, pages_per_segment) = (self.block_pages, self.pages_per_segment);
        let before = membership_of(segment_index, entry, freed, block_pages, pages_per_segment, was);
        if lent {
            self.lent.push(segment_index);
        } else {
            self.lent.retain(|&other| other != segment_index);
        }
        let after = membership_of(segment_index, entry, freed, block_pages, pages_per_segment, lent);
        if before != after {
            self.reindex(segment_index, before, after);
        }
        self.change_count += 1;
    }

    pub fn record_erase(&mut self, segment_index: u32) {
        self.update(segment_index, |entry, _| {
            assert_eq!(entry.valid_pages, 0, "segment {segment_index} erased while holding valid pages");
            entry.erase_count = (entry.erase_count + 1).min(ERASE_COUNT_MASK);
        });
    }

    pub fn retire(&mut self, segment_index: u32) {
        self.update(segment_index, |entry, _| entry.retired = true);
    }

    /// Records that `masked_blocks` blocks of the segment are masked out (bad), changing the
    /// entry only if it differs.
    pub fn set_masked_blocks(&mut self, segment_index: u32, masked_blocks: u32) {
        let masked_blocks = masked_blocks.min(MASKED_BLOCKS_MAX);
        if self.slot(segment_index).0.masked_blocks != masked_blocks {
            self.update(segment_index, |entry, _| entry.masked_blocks = masked_blocks);
        }
    }

    /// Pages of `segment_index` that are live or masked out (at most a segment's).
    pub fn occupied_pages(&self, segment_index: u32) -> u32 {
        occupied_pages(self.entry(segment_index), self.block_pages, self.pages_per_segment)
    }

    /// Masked blocks of the log segments not retired (O(1)).
    pub fn masked_blocks(&self) -> u64 {
        self.masked_blocks
    }

    /// Pages the masked blocks take out of the log segments not retired, and out of the free
    /// ones (O(1)).
    pub fn masked_pages(&self) -> (u64, u64) {
        let block_pages = u64::from(self.block_pages);
        (self.masked_blocks * block_pages, self.free_masked_blocks * block_pages)
    }

    /// Reusable: a log segment that neither the working nor the committed state references.
    pub fn is_free(&self, segment_index: u32) -> bool {
        self.entries_visited.add(1);
        let (entry, freed) = self.slot(segment_index);
        segment_index >= FIRST_LOG_SEGMENT
            && !entry.retired
            && entry.valid_pages == 0
            && freed == 0
            && !self.is_lent(segment_index)
    }

    /// Called once the transaction's metaroot is durable: what it dropped is now unreferenced.
    /// Resets only the segments that dropped pages (not a pass over the table).
    pub fn end_transaction(&mut self) {
        for segment_index in core::mem::take(&mut self.freed_segments) {
            self.apply(segment_index, |_, freed| *freed = 0);
        }
        assert!(self.freed_segments.is_empty(), "a reset listed a segment again");
        assert_eq!(self.reclaimable_segment_count, 0, "a segment is reclaimable after its transaction ended");
        #[cfg(debug_assertions)]
        self.check_totals();
    }

    pub fn dirty_page_indexes(&self) -> Vec<u32> {
        self.dirty_pages.iter().copied().collect()
    }

    pub fn first_dirty_page_not_in(&self, done: &BTreeSet<u32>) -> Option<u32> {
        self.dirty_pages.iter().copied().find(|page| !done.contains(page))
    }

    pub fn clear_dirty(&mut self) {
        self.dirty_pages.clear();
        self.dirty_index_pages.clear();
    }

    /// Table or index pages wait to be written.
    pub fn has_dirty_pages(&self) -> bool {
        !self.dirty_pages.is_empty() || !self.dirty_index_pages.is_empty()
    }

    /// Encodes table page `page_index` to exactly `page_size_bytes` (unused tail 0xFF).
    pub fn encode_page(&self, page_index: u32, page_size_bytes: usize) -> Vec<u8> {
        let first = (page_index * self.entries_per_page) as usize;
        let last = (first + self.entries_per_page as usize).min(self.entries.len());
        let mut writer = Writer::with_capacity(page_size_bytes);
        // A page past the table holds no entry: all of it reads as erased.
        for entry in self.entries.get(first..last).unwrap_or_default().iter().map(|packed| packed.unpack()) {
            writer.u32_le(entry.valid_pages);
            writer.u32_le(entry_word(entry));
        }
        let mut bytes = writer.bytes;
        bytes.resize(page_size_bytes, 0xFF);
        bytes
    }

    /// Loads table page `page_index` from untrusted bytes (checksum already verified).
    pub fn decode_page(&mut self, page_index: u32, bytes: &[u8]) -> Result<(), DecodeError> {
        let first = (page_index * self.entries_per_page) as usize;
        let last = (first + self.entries_per_page as usize).min(self.entries.len());
        let mut reader = Reader::new("segment table page", bytes);
        for slot in self.entries.get_mut(first..last).unwrap_or_default() {
            let valid_pages = reader.u32_le()?;
            let word = reader.u32_le()?;
            if valid_pages > self.pages_per_segment {
                return Err(reader.invalid("valid_pages", u64::from(valid_pages)));
            }
            // Every bit of the word is defined (erase count, masked blocks, retired), and any
            // masked count 0..=7 is valid: nothing more to refuse.
            *slot = PackedEntry { valid_pages, word };
        }
        Ok(())
    }

    pub fn change_count(&self) -> u64 {
        self.change_count
    }

    pub fn total_valid_pages(&self) -> u64 {
        self.total_valid_pages
    }

    pub fn free_segment_count(&self) -> u32 {
        self.free_segment_count
    }

    pub fn retired_segment_count(&self) -> u32 {
        self.retired_segment_count
    }

    /// Log segments retired after at least one erase: blocks that failed in service (worn out,
    /// or a program or erase failed), not those bad from the factory, which format retires
    /// before any erase. O(1).
    pub fn retired_after_use_count(&self) -> u32 {
        self.retired_after_use_count
    }

    /// A pass over the entries: `retired_after_use_count` recounted.
    fn count_retired_after_use(&self) -> u32 {
        (0u32..)
            .zip(&self.entries)
            .map(|(segment_index, packed)| u32::from(retired_after_use(segment_index, packed.unpack())))
            .sum()
    }

    /// Retired log segments: `retired_segment_count` less the reserved segments before the log
    /// that are retired (a metaroot area whose erase failed). O(1): four entries looked at, not
    /// counted in `entries_visited` (a constant, whatever the volume's size).
    pub fn retired_log_segment_count(&self) -> u32 {
        let reserved: u32 =
            (0..FIRST_LOG_SEGMENT).map(|segment_index| u32::from(self.is_retired_quietly(segment_index))).sum();
        let second_home = u32::from(self.second_home && self.is_retired_quietly(FIRST_LOG_SEGMENT));
        self.retired_segment_count - reserved - second_home
    }

    /// Marks segment 4 as the superblock's second home (format version 9): retired, and counted
    /// with the reserved segments rather than the log's (`retired_log_segment_count`).
    pub fn reserve_second_home(&mut self) {
        self.second_home = true;
        if !self.is_retired_quietly(FIRST_LOG_SEGMENT) {
            self.retire(FIRST_LOG_SEGMENT);
        }
    }

    /// Log segments that hold no file data and are not retired in the log's count: the
    /// superblock's second home and the segments lent to metaroot areas (format version 9).
    pub fn log_segments_set_aside(&self) -> u32 {
        let lent = self.lent.iter().filter(|&&segment| segment >= FIRST_LOG_SEGMENT).count();
        u32::from(self.second_home) + u32::try_from(lent).unwrap_or(u32::MAX)
    }

    /// Whether segment 4 is the superblock's second home (`reserve_second_home`).
    pub fn has_second_home(&self) -> bool {
        self.second_home
    }

    /// Whether `segment_index` is retired, not counted in `entries_visited` (for the constant
    /// handful of reserved segments the end-of-life check looks at). False outside the table.
    pub fn is_retired_quietly(&self, segment_index: u32) -> bool {
        self.entries.get(segment_index as usize).is_some_and(|packed| packed.unpack().retired)
    }

    /// (min, max) erase count over log segments that are not retired. O(log segments).
    pub fn erase_count_range(&self) -> (u32, u32) {
        match (self.erase_counts.first_key_value(), self.erase_counts.last_key_value()) {
            (Some((&min, _)), Some((&max, _))) => (min, max),
            _ => (0, 0),
        }
    }

    /// Log segments, not retired, with no valid page but pages dropped this transaction: the
    /// next commit makes them free. O(1).
    pub fn reclaimable_segment_count(&self) -> u32 {
        self.reclaimable_segment_count
    }

    /// The least-worn free segment (ties: lowest index) that `accept` takes; `accept` is asked
    /// only until it says yes (callers skip the open segments, at most two).
    pub fn least_worn_free(&self, accept: impl Fn(u32) -> bool) -> Option<u32> {
        self.first_accepted(&self.free_by_wear, accept)
    }

    /// The used segment (a log segment, not retired, holding valid pages) with the fewest valid
    /// pages (ties: lowest index) that `accept` takes.
    pub fn emptiest_used(&self, accept: impl Fn(u32) -> bool) -> Option<u32> {
        self.first_accepted(&self.used_by_valid, accept)
    }

    /// The least-worn used segment (ties: lowest index) that `accept` takes.
    pub fn coldest_used(&self, accept: impl Fn(u32) -> bool) -> Option<u32> {
        self.first_accepted(&self.used_by_wear, accept)
    }

    fn first_accepted(&self, ordered: &PairSet, accept: impl Fn(u32) -> bool) -> Option<u32> {
        for (_, segment_index) in ordered.iter() {
            self.entries_visited.add(1);
            if accept(segment_index) {
                return Some(segment_index);
            }
        }
        None
    }

    /// Dead pages (pages_per_segment - valid) of the used segments, split into those with at
    /// least `dead_min` dead pages and those with fewer: O(log pages_per_segment) from the
    /// histogram, whatever the number of segments.
    pub fn dead_pages_split(&self, dead_min: u32) -> DeadPages {
        let pages_per_segment = u64::from(self.pages_per_segment);
        // At least `dead_min` dead pages <=> at most `pages_per_segment - dead_min` valid ones.
        let valid_max = self.pages_per_segment.saturating_sub(dead_min);
        let all = self.pages_per_segment;
        let (segments_low, valid_low) =
            (self.histogram_segments.prefix(valid_max), self.histogram_valid_pages.prefix(valid_max));
        let (segments_all, valid_all) = (self.histogram_segments.prefix(all), self.histogram_valid_pages.prefix(all));
        let segments_high = segments_all - segments_low;
        let valid_high = valid_all - valid_low;
        DeadPages {
            segments_at_least: segments_low,
            dead_at_least: segments_low * pages_per_segment - valid_low,
            segments_below: segments_high,
            dead_below: segments_high * pages_per_segment - valid_high,
        }
    }

    /// Segment entries looked at since the table was made (accessors, searches, full passes;
    /// not `index_mismatch`). Tests compare it across volume sizes.
    pub fn entries_visited(&self) -> u64 {
        self.entries_visited.get()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pages_round_trip_and_garbage_is_rejected() {
        let mut table = SegmentTable::new(600, 64, 2048);
        assert_eq!(table.page_count(), 3);
        table.add_valid(300);
        table.add_valid(300);
        table.retire(301);
        table.record_erase(302);
        let bytes = table.encode_page(1, 2048);
        let mut loaded = SegmentTable::new(600, 64, 2048);
        loaded.decode_page(1, &bytes).expect("valid page");
        assert_eq!(loaded.entry(300).valid_pages, 2);
        assert!(loaded.entry(301).retired);
        assert_eq!(loaded.entry(302).erase_count, 1);
        // Bits 28..31 of the second word: masked blocks (format version 8).
        let mut masked = bytes.clone();
        masked[4 * 8 + 7] = 0x30;
        loaded.decode_page(1, &masked).expect("masked blocks");
        assert_eq!(loaded.entry(256 + 4).masked_blocks, 3);
        let mut too_many = bytes;
        too_many[0..4].copy_from_slice(&65u32.to_le_bytes());
        assert!(loaded.decode_page(1, &too_many).is_err());
    }

    /// The queries, answered by brute force over the entries.
    fn brute_force(table: &SegmentTable, dead_min: u32) -> (Option<u32>, Option<u32>, Option<u32>, DeadPages, u32) {
        let log = FIRST_LOG_SEGMENT..table.segment_count();
        let entry = |s: u32| table.entries[s as usize].unpack();
        let used = |s: &u32| !entry(*s).retired && entry(*s).valid_pages > 0;
        let free = log.clone().filter(|&s| table.is_free(s)).min_by_key(|&s| (entry(s).erase_count, s));
        let emptiest = log.clone().filter(used).min_by_key(|&s| (entry(s).valid_pages, s));
        let coldest = log.clone().filter(used).min_by_key(|&s| (entry(s).erase_count, s));
        let mut dead = DeadPages::default();
        for s in log.clone().filter(used) {
            let pages = u64::from(table.pages_per_segment - entry(s).valid_pages);
            if pages >= u64::from(dead_min) {
                dead.segments_at_least += 1;
                dead.dead_at_least += pages;
            } else {
                dead.segments_below += 1;
                dead.dead_below += pages;
            }
        }
        let reclaimable = log
            .filter(|&s| !entry(s).retired && entry(s).valid_pages == 0 && table.freed_this_transaction(s) > 0)
            .count() as u32;
        (free, emptiest, coldest, dead, reclaimable)
    }

    // Seeded random changes (appends, releases, erases, retirements, delta replays, transaction
    // ends); after each, every maintained index equals a recount and every query equals its
    // brute-force answer.
    #[test]
    fn maintained_indexes_agree_with_brute_force() {
        let mut rng = fsoc_media::rng::SeededRng::new(42);
        let pages_per_segment = 16;
        let mut table = SegmentTable::new(40, pages_per_segment, 2048);
        for step in 0..20_000 {
            let segment = FIRST_LOG_SEGMENT + rng.below(36) as u32;
            let entry = table.entries[segment as usize].unpack();
            match rng.below(100) {
                0..=44 if !entry.retired && entry.valid_pages < pages_per_segment => table.add_valid(segment),
                45..=79 if entry.valid_pages > 0 => table.remove_valid(segment),
                80..=87 if table.is_free(segment) => table.record_erase(segment),
                88 if rng.below(10) == 0 => table.retire(segment),
                89..=92 => {
                    let allocated = rng.below(4) as u32;
                    let released = rng.below(u64::from(entry.valid_pages + allocated).min(3) + 1) as u32;
                    let _ = table.apply_delta(segment, allocated, released);
                }
                93..=99 => table.end_transaction(),
                _ => {}
            }
            table.check_totals();
            let dead_min = rng.below(u64::from(pages_per_segment) + 2) as u32;
            let expected = brute_force(&table, dead_min);
            let found = (
                table.least_worn_free(|_| true),
                table.emptiest_used(|_| true),
                table.coldest_used(|_| true),
                table.dead_pages_split(dead_min),
                table.reclaimable_segment_count(),
            );
            assert_eq!(found, expected, "step {step}");
        }
    }

    // A delta's data pages in a segment free at the full commit count its erase, once however
    // many payloads name it; pages in a segment already in use at the full commit count none.
    #[test]
    fn replay_counts_the_erase_of_segments_opened_since_the_full_commit() {
        let mut table = SegmentTable::new(16, 64, 2048);
        table.record_erase(6);
        table.add_valid(6); // in use at the full commit
        table.end_transaction();
        let (free_before, used_before) = (table.entry(5).erase_count, table.entry(6).erase_count);
        table.apply_delta(5, 3, 0).expect("valid delta");
        table.apply_delta(6, 2, 1).expect("valid delta");
        assert_eq!(table.entry(5).erase_count, free_before + 1, "opened since the full commit");
        assert_eq!(table.entry(6).erase_count, used_before, "open or in use before it");
        // A later NVRAM record naming the segment again, even after its pages were all dropped.
        table.apply_delta(5, 1, 4).expect("valid delta");
        table.apply_delta(5, 2, 0).expect("valid delta");
        assert_eq!(table.entry(5).erase_count, free_before + 1, "counted once");
        // Releases alone open nothing.
        table.apply_delta(7, 0, 0).expect("valid delta");
        assert_eq!(table.entry(7).erase_count, 0);
        table.check_totals();
    }

    // Segments retired before any erase (bad from the factory) are not counted as failed in
    // service; a reserved segment (a metaroot area) is not a log segment.
    #[test]
    fn segments_retired_after_use_are_counted_apart() {
        let mut table = SegmentTable::new(16, 64, 2048);
        table.retire(5);
        table.record_erase(6);
        table.retire(6);
        table.retire(2);
        assert_eq!(table.retired_segment_count(), 3);
        assert_eq!(table.retired_log_segment_count(), 2);
        assert_eq!(table.retired_after_use_count(), 1);
        assert!(table.is_retired_quietly(2) && !table.is_retired_quietly(3));
        table.check_totals();
    }

    #[test]
    fn a_segment_is_free_only_when_neither_state_references_it() {
        let mut table = SegmentTable::new(16, 64, 2048);
        assert!(table.is_free(5));
        assert!(!table.is_free(2), "metaroot segments are never free");
        table.add_valid(5);
        assert!(!table.is_free(5));
        table.remove_valid(5);
        assert!(!table.is_free(5), "the committed state may still reference the page");
        table.end_transaction();
        assert!(table.is_free(5));
    }
}
