//! The cleaner: keeps enough free segments for the next operation and a commit, by committing
//! (which makes pages dropped in this transaction reusable) and by relocating the live pages of
//! a victim segment. Victims are the segments with the fewest valid pages, except that when
//! erase counts spread too far the least-worn segment holding data is taken (static wear
//! levelling). Each page's owner is found from the tag in its spare area.

use alloc::vec::Vec;

use fsoc_media::{Flash, ReadStatus};

use crate::fs::{FileSystem, FsError, TreeId};
use crate::segment::layout::FIRST_LOG_SEGMENT;
use crate::segment::PageTag;

/// Erase-count spread above which the cleaner moves cold data off its least-worn segment.
pub const WEAR_SPREAD_MAX: u32 = 32;

impl<F: Flash> FileSystem<F> {
    /// (capacity, used) in pages as offered to files: log segments minus the reserve and
    /// retired ones; used = pages the working state references.
    pub(crate) fn capacity_pages(&self) -> (u64, u64) {
        let layout = self.volume.layout();
        let table = self.volume.log.table();
        let pages_per_segment = u64::from(layout.pages_per_segment());
        let usable_segments = u64::from(layout.log_segment_count())
            .saturating_sub(u64::from(table.retired_segment_count()))
            .saturating_sub(u64::from(self.config.volume.reserve_segments.max(self.volume.config.reserve_segments)));
        (usable_segments * pages_per_segment, table.total_valid_pages())
    }

    fn available_pages(&self) -> u64 {
        let pages_per_segment = u64::from(self.volume.layout().pages_per_segment());
        u64::from(self.volume.log.free_segment_count()) * pages_per_segment + u64::from(self.volume.log.open_segment_room())
    }

    /// Makes sure `pages_needed` data pages plus the reserve can be appended, committing and
    /// cleaning as necessary; `NoSpace` when the live data leaves no room.
    pub(crate) fn ensure_space(&mut self, pages_needed: u32) -> Result<(), FsError> {
        self.volume.prepare_write()?;
        let (capacity, used) = self.capacity_pages();
        if used + u64::from(pages_needed) > capacity {
            return Err(FsError::NoSpace);
        }
        let pages_per_segment = u64::from(self.volume.layout().pages_per_segment());
        let reserve_pages = u64::from(self.volume.config.reserve_segments) * pages_per_segment;
        let required = reserve_pages + u64::from(pages_needed);
        let segment_count = self.volume.layout().segment_count();
        // Each round either commits (turning dropped pages into free segments) or cleans one
        // victim; bounded so a cleaner that cannot gain ends in NoSpace, never a hang.
        for _round in 0..segment_count * 2 {
            if self.available_pages() >= required {
                return Ok(());
            }
            let table = self.volume.log.table();
            let reclaimable = (FIRST_LOG_SEGMENT..table.segment_count())
                .any(|segment| table.freed_this_transaction(segment) > 0 && table.entry(segment).valid_pages == 0);
            if reclaimable || self.volume.has_uncommitted_changes() {
                self.commit()?;
                if self.available_pages() >= required {
                    return Ok(());
                }
            }
            let Some(victim) = self.choose_victim() else {
                return Err(FsError::NoSpace);
            };
            self.clean_segment(victim)?;
            self.commit()?;
        }
        Err(FsError::NoSpace)
    }

    fn choose_victim(&self) -> Option<u32> {
        let table = self.volume.log.table();
        let pages_per_segment = self.volume.layout().pages_per_segment();
        let open = self.volume.log.open_segment_index();
        let candidates: Vec<u32> = (FIRST_LOG_SEGMENT..table.segment_count())
            .filter(|&segment| Some(segment) != open && !table.entry(segment).retired && table.entry(segment).valid_pages > 0)
            .collect();
        let (erase_min, erase_max) = table.erase_count_range();
        if erase_max - erase_min > WEAR_SPREAD_MAX {
            if let Some(coldest) = candidates.iter().copied().min_by_key(|&segment| table.entry(segment).erase_count) {
                if table.entry(coldest).erase_count + WEAR_SPREAD_MAX < erase_max {
                    return Some(coldest);
                }
            }
        }
        candidates
            .into_iter()
            .filter(|&segment| table.entry(segment).valid_pages < pages_per_segment)
            .min_by_key(|&segment| (table.entry(segment).valid_pages, segment))
    }

    /// Relocates every live page of `victim`; after the next commit it holds none.
    pub(crate) fn clean_segment(&mut self, victim: u32) -> Result<(), FsError> {
        self.stats.cleaner_runs += 1;
        self.mutate(|fs| {
            let layout = fs.volume.layout();
            let mut buffer = Vec::new();
            for page_in_segment in 0..layout.pages_per_segment() {
                if fs.volume.log.table().entry(victim).valid_pages == 0 {
                    break;
                }
                let address = layout.address(victim, page_in_segment);
                let (status, tag) = fs.volume.log.device.read_with_tag(address, &mut buffer).map_err(crate::txn::TxnError::from)?;
                if matches!(status, ReadStatus::Erased | ReadStatus::Uncorrectable) {
                    continue; // never programmed, or torn: not referenced by any state
                }
                let moved = match tag {
                    Some(PageTag::Node { tree_id, .. }) => {
                        let which = if tree_id == crate::txn::volume::DIRECTORY_TREE_ID { TreeId::Directory } else { TreeId::Allocation };
                        fs.with_tree(which, |tree, store| tree.relocate_if_live(store, address))?
                    }
                    Some(PageTag::Data { inode, page_index }) => {
                        if fs.data_page_is_live(inode, u64::from(page_index), address)? {
                            fs.relocate_data_page(inode, u64::from(page_index), &buffer)?;
                            true
                        } else {
                            false
                        }
                    }
                    Some(PageTag::SegmentTable { page_index }) => fs.volume.log.mark_table_page_dirty_if_at(page_index, address),
                    _ => false,
                };
                if moved {
                    fs.stats.pages_relocated += 1;
                }
            }
            Ok(())
        })?;
        // Tree nodes marked for relocation move at the flush; the commit that follows drops
        // the victim's last references.
        self.volume.flush_trees()?;
        self.volume.log.write_table()?;
        let remaining = self.volume.log.table().entry(victim).valid_pages;
        assert_eq!(remaining, 0, "segment {victim} still has {remaining} valid pages after cleaning");
        Ok(())
    }
}
