//! Segment table: per-segment valid-page counts, erase counts and retirement, and which table
//! pages changed since the last commit. Nothing here knows what a page holds.
//!
//! Invariant: `valid_pages[s]` equals the number of pages of segment s referenced by the
//! working state; `freed_this_transaction[s]` counts pages of s the working state dropped since
//! the last commit (the committed state may still reference them), so a segment is reusable
//! only when both are zero.

use alloc::collections::BTreeSet;
use alloc::vec;
use alloc::vec::Vec;

use crate::address::PagePointer;
use crate::codec::{DecodeError, Reader, Writer};
use crate::segment::layout::FIRST_LOG_SEGMENT;

/// Encoded size of one segment entry (docs/FORMAT.md, "Segment table").
pub const SEGMENT_ENTRY_BYTES: usize = 8;
const RETIRED_FLAG: u32 = 1 << 31;
const ERASE_COUNT_MASK: u32 = (1 << 28) - 1;

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SegmentEntry {
    pub valid_pages: u32,
    pub erase_count: u32,
    /// Never allocated from again (a block of the stripe went bad).
    pub retired: bool,
}

#[derive(Clone, Debug)]
pub struct SegmentTable {
    entries: Vec<SegmentEntry>,
    freed_this_transaction: Vec<u32>,
    /// Table pages whose entries changed since they were last written.
    dirty_pages: BTreeSet<u32>,
    /// Where each table page is on flash (recorded in the metaroot).
    pub directory: Vec<PagePointer>,
    entries_per_page: u32,
    pages_per_segment: u32,
    /// Maintained with every change, so space checks cost O(1) instead of a scan of the
    /// table (`check_totals` recounts them).
    free_segment_count: u32,
    retired_segment_count: u32,
    total_valid_pages: u64,
    /// Entry changes made, so a caller can tell whether an operation changed the accounting.
    change_count: u64,
}

impl SegmentTable {
    pub fn entries_per_page(page_size_bytes: usize) -> u32 {
        (page_size_bytes / SEGMENT_ENTRY_BYTES) as u32
    }

    pub fn page_count_for(segment_count: u32, page_size_bytes: usize) -> u32 {
        segment_count.div_ceil(Self::entries_per_page(page_size_bytes))
    }

    /// A fresh table for a new volume: every table page dirty, nothing on flash yet.
    pub fn new(segment_count: u32, pages_per_segment: u32, page_size_bytes: usize) -> Self {
        let entries_per_page = Self::entries_per_page(page_size_bytes);
        let page_count = Self::page_count_for(segment_count, page_size_bytes);
        let mut table = SegmentTable {
            entries: vec![SegmentEntry::default(); segment_count as usize],
            freed_this_transaction: vec![0; segment_count as usize],
            dirty_pages: (0..page_count).collect(),
            directory: vec![PagePointer::NULL; page_count as usize],
            entries_per_page,
            pages_per_segment,
            free_segment_count: 0,
            retired_segment_count: 0,
            total_valid_pages: 0,
            change_count: 0,
        };
        table.recount();
        table
    }

    /// Recomputes the maintained totals from the entries (after loading pages with
    /// `decode_page`, and at the end of a transaction).
    pub(crate) fn recount(&mut self) {
        self.free_segment_count = (0..self.segment_count()).filter(|&segment| self.is_free(segment)).count() as u32;
        self.retired_segment_count = self.entries.iter().filter(|entry| entry.retired).count() as u32;
        self.total_valid_pages = self.entries.iter().map(|entry| u64::from(entry.valid_pages)).sum();
    }

    /// Panics if a maintained total differs from a recount (tests, fsck, debug builds).
    pub fn check_totals(&self) {
        let free = (0..self.segment_count()).filter(|&segment| self.is_free(segment)).count() as u32;
        let retired = self.entries.iter().filter(|entry| entry.retired).count() as u32;
        let valid: u64 = self.entries.iter().map(|entry| u64::from(entry.valid_pages)).sum();
        assert_eq!(self.free_segment_count, free, "maintained free segment count");
        assert_eq!(self.retired_segment_count, retired, "maintained retired segment count");
        assert_eq!(self.total_valid_pages, valid, "maintained valid page total");
    }

    /// Applies `change` to one segment's entry and freed count, keeping the totals in step.
    fn update(&mut self, segment_index: u32, change: impl FnOnce(&mut SegmentEntry, &mut u32)) {
        self.change_count += 1;
        let was_free = self.is_free(segment_index);
        let before = self.entries[segment_index as usize];
        let index = segment_index as usize;
        change(&mut self.entries[index], &mut self.freed_this_transaction[index]);
        let after = self.entries[index];
        let is_free = self.is_free(segment_index);
        self.free_segment_count = self.free_segment_count + u32::from(is_free) - u32::from(was_free);
        self.retired_segment_count = self.retired_segment_count + u32::from(after.retired) - u32::from(before.retired);
        self.total_valid_pages = self.total_valid_pages + u64::from(after.valid_pages) - u64::from(before.valid_pages);
        self.touch(segment_index);
    }

    pub fn segment_count(&self) -> u32 {
        self.entries.len() as u32
    }

    pub fn page_count(&self) -> u32 {
        self.directory.len() as u32
    }

    pub fn entry(&self, segment_index: u32) -> SegmentEntry {
        self.entries[segment_index as usize]
    }

    pub fn freed_this_transaction(&self, segment_index: u32) -> u32 {
        self.freed_this_transaction[segment_index as usize]
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
    pub fn apply_delta(&mut self, segment_index: u32, allocated: u32, released: u32) -> Result<(), &'static str> {
        let pages_per_segment = self.pages_per_segment;
        let entry = self.entries.get(segment_index as usize).ok_or("delta names a segment outside the volume")?;
        if segment_index < FIRST_LOG_SEGMENT {
            return Err("delta names a reserved segment");
        }
        let valid = u64::from(entry.valid_pages) + u64::from(allocated);
        let valid = valid.checked_sub(u64::from(released)).ok_or("delta releases more pages than the segment holds")?;
        if valid > u64::from(pages_per_segment) {
            return Err("delta gives a segment more valid pages than it has");
        }
        let freed_total = self.freed_this_transaction[segment_index as usize].checked_add(released).ok_or("delta releases too many pages")?;
        self.update(segment_index, |entry, freed| {
            entry.valid_pages = valid as u32;
            *freed = freed_total;
        });
        Ok(())
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

    /// Reusable: a log segment that neither the working nor the committed state references.
    pub fn is_free(&self, segment_index: u32) -> bool {
        let entry = self.entries[segment_index as usize];
        segment_index >= FIRST_LOG_SEGMENT
            && !entry.retired
            && entry.valid_pages == 0
            && self.freed_this_transaction[segment_index as usize] == 0
    }

    /// Called once the transaction's metaroot is durable: what it dropped is now unreferenced.
    pub fn end_transaction(&mut self) {
        self.freed_this_transaction.fill(0);
        self.recount();
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
    }

    pub fn has_dirty_pages(&self) -> bool {
        !self.dirty_pages.is_empty()
    }

    /// Encodes table page `page_index` to exactly `page_size_bytes` (unused tail 0xFF).
    pub fn encode_page(&self, page_index: u32, page_size_bytes: usize) -> Vec<u8> {
        let first = (page_index * self.entries_per_page) as usize;
        let last = (first + self.entries_per_page as usize).min(self.entries.len());
        let mut writer = Writer::with_capacity(page_size_bytes);
        for entry in &self.entries[first..last] {
            writer.u32_le(entry.valid_pages);
            let flags = if entry.retired { RETIRED_FLAG } else { 0 };
            writer.u32_le(entry.erase_count & ERASE_COUNT_MASK | flags);
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
        for segment_index in first..last {
            let valid_pages = reader.u32_le()?;
            let word = reader.u32_le()?;
            if valid_pages > self.pages_per_segment {
                return Err(reader.invalid("valid_pages", u64::from(valid_pages)));
            }
            if word & !(ERASE_COUNT_MASK | RETIRED_FLAG) != 0 {
                return Err(reader.invalid("flags", u64::from(word)));
            }
            self.entries[segment_index] = SegmentEntry {
                valid_pages,
                erase_count: word & ERASE_COUNT_MASK,
                retired: word & RETIRED_FLAG != 0,
            };
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

    /// (min, max) erase count over log segments that are not retired.
    pub fn erase_count_range(&self) -> (u32, u32) {
        let mut range = (u32::MAX, 0);
        for entry in self.entries.iter().skip(FIRST_LOG_SEGMENT as usize).filter(|e| !e.retired) {
            range.0 = range.0.min(entry.erase_count);
            range.1 = range.1.max(entry.erase_count);
        }
        if range.0 == u32::MAX {
            (0, 0)
        } else {
            range
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pages_round_trip_and_flag_garbage_is_rejected() {
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
        let mut bad = bytes.clone();
        bad[4 * 8 + 7] = 0x40; // an undefined flag bit
        assert!(loaded.decode_page(1, &bad).is_err());
        let mut too_many = bytes;
        too_many[0..4].copy_from_slice(&65u32.to_le_bytes());
        assert!(loaded.decode_page(1, &too_many).is_err());
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
