//! The cleaner: keeps enough free segments for the next operation and a commit, by committing
//! (which makes pages dropped in this transaction reusable) and by relocating the live pages of
//! a victim segment. Victims are the segments with the fewest valid pages, except that when
//! erase counts spread too far the least-worn segment holding data is taken (static wear
//! levelling). Each page's owner is found from the tag in its spare area.

use alloc::vec::Vec;

use fsoc_media::{Flash, ReadStatus};

use crate::address::LogAddress;
use crate::fs::{FileSystem, FsError, TreeId};
use crate::segment::layout::FIRST_LOG_SEGMENT;
use crate::segment::{PageTag, SegmentError};
use crate::txn::TxnError;

/// What an operation will add to the volume, for `ensure_space`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SpaceUse {
    /// New file data: counts against capacity.
    Data,
    /// Only tree changes (and at most a page or two), which deleting needs even when full.
    Metadata,
}

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
            .saturating_sub(u64::from(self.volume.config.reserve_segments));
        (usable_segments * pages_per_segment, table.total_valid_pages())
    }

    fn available_pages(&self) -> u64 {
        let pages_per_segment = u64::from(self.volume.layout().pages_per_segment());
        u64::from(self.volume.log.free_segment_count()) * pages_per_segment + u64::from(self.volume.log.open_segment_room())
    }

    /// Pages a commit may need: every dirty node (the budget plus one operation's worth),
    /// every segment-table page, and slack for tree growth.
    fn commit_margin_pages(&self) -> u64 {
        let table_pages = u64::from(self.volume.log.table().page_count());
        self.config.volume.dirty_nodes_max as u64 + 32 + 2 * table_pages
    }

    /// Makes sure `pages_needed` pages can be appended: for `Data`, within the logical
    /// capacity and above the cleaner's reserve; for `Metadata` (deletes, renames, attribute
    /// changes), only above the commit margin, so a full volume can always be emptied.
    /// Commits and cleans as necessary; `NoSpace` when that cannot help.
    pub(crate) fn ensure_space(&mut self, pages_needed: u32, space_use: SpaceUse) -> Result<(), FsError> {
        self.volume.prepare_write()?;
        let pages_per_segment = u64::from(self.volume.layout().pages_per_segment());
        let margin = self.commit_margin_pages();
        let required = match space_use {
            SpaceUse::Data => {
                let (capacity, used) = self.capacity_pages();
                if used + u64::from(pages_needed) > capacity {
                    return Err(FsError::NoSpace);
                }
                u64::from(self.volume.config.reserve_segments) * pages_per_segment + u64::from(pages_needed)
            }
            SpaceUse::Metadata => margin + u64::from(pages_needed),
        };
        let segment_count = self.volume.layout().segment_count();
        // Each round either commits (turning dropped pages into free segments) or cleans one
        // victim that gains space; bounded, so a cleaner that cannot gain ends in NoSpace.
        for _round in 0..segment_count * 2 {
            let available = self.available_pages();
            if available >= required {
                return Ok(());
            }
            if available < margin {
                return Err(FsError::NoSpace);
            }
            let table = self.volume.log.table();
            let reclaimable = (FIRST_LOG_SEGMENT..table.segment_count())
                .any(|segment| table.freed_this_transaction(segment) > 0 && table.entry(segment).valid_pages == 0);
            if reclaimable {
                self.commit()?;
                continue;
            }
            let Some(victim) = self.choose_victim() else {
                return Err(FsError::NoSpace);
            };
            let victim_valid = u64::from(self.volume.log.table().entry(victim).valid_pages);
            if available < victim_valid + margin {
                return Err(FsError::NoSpace);
            }
            self.clean_segment(victim)?;
            self.commit()?;
            let _ = pages_per_segment;
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
        // Cleaning must gain more than it costs: relocating a nearly full segment and committing
        // can consume more pages than it frees.
        let gain_min = (pages_per_segment / 8).max(4);
        candidates
            .into_iter()
            .filter(|&segment| table.entry(segment).valid_pages + gain_min <= pages_per_segment)
            .min_by_key(|&segment| (table.entry(segment).valid_pages, segment))
    }

    /// Relocates every live page of `victim`; after the next commit it holds none.
    pub(crate) fn clean_segment(&mut self, victim: u32) -> Result<(), FsError> {
        self.stats.cleaner_runs += 1;
        let mut skipped_unreadable = 0u32;
        self.mutate(|fs| {
            let layout = fs.volume.layout();
            let pages_per_segment = layout.pages_per_segment();
            let batch = fs.config.io_batch_pages.clamp(1, pages_per_segment as usize) as u32;
            let (mut buffers, mut statuses, mut tags) = (Vec::new(), Vec::new(), Vec::new());
            let mut pending: Vec<(LogAddress, ReadStatus, Option<PageTag>, Vec<u8>)> = Vec::new();
            for page_in_segment in 0..pages_per_segment {
                if fs.volume.log.table().entry(victim).valid_pages == 0 {
                    break;
                }
                if pending.is_empty() {
                    // Read the victim a batch at a time: consecutive stripe pages sit on
                    // different chips, so the batch's reads overlap (issue 4).
                    let end = (page_in_segment + batch).min(pages_per_segment);
                    let addresses: Vec<LogAddress> = (page_in_segment..end).map(|page| layout.address(victim, page)).collect();
                    buffers.resize(addresses.len(), Vec::new());
                    fs.volume
                        .log
                        .device
                        .read_many_with_tags(&addresses, &mut buffers, &mut statuses, &mut tags)
                        .map_err(crate::txn::TxnError::from)?;
                    pending = addresses
                        .into_iter()
                        .zip(statuses.iter().copied())
                        .zip(tags.iter().copied())
                        .zip(buffers.iter_mut().map(core::mem::take))
                        .map(|(((address, status), tag), buffer)| (address, status, tag, buffer))
                        .rev()
                        .collect();
                }
                let (address, status, tag, buffer) = pending.pop().expect("a batch holds this page");
                assert_eq!(address, layout.address(victim, page_in_segment), "cleaner batch out of step");
                if matches!(status, ReadStatus::Erased | ReadStatus::Uncorrectable) {
                    continue; // never programmed, or torn: not referenced by any state
                }
                let moved = match tag {
                    Some(PageTag::Node { tree_id, .. }) => {
                        let which = if tree_id == crate::txn::volume::DIRECTORY_TREE_ID { TreeId::Directory } else { TreeId::Allocation };
                        match fs.with_tree(which, |tree, store| tree.relocate_if_live(store, address)) {
                            // A page torn by a power cut may read back once and not again
                            // (unstable bits); it was never committed, so it is not live. A live
                            // page that is unreadable shows up below as a count that stays > 0.
                            Err(FsError::Io(TxnError::Segment(SegmentError::Unreadable { .. }))) => {
                                skipped_unreadable += 1;
                                false
                            }
                            other => other?,
                        }
                    }
                    Some(PageTag::Data { inode, page_index }) if fs.data_page_is_live(inode, u64::from(page_index), address)? => {
                        fs.relocate_data_page(inode, u64::from(page_index), &buffer)?;
                        true
                    }
                    Some(PageTag::SegmentTable { page_index }) => fs.volume.log.mark_table_page_dirty_if_at(page_index, address),
                    _ => false,
                };
                if moved {
                    fs.stats.pages_relocated += 1;
                }
            }
            Ok(())
        })
        .map_err(|error| match error {
            // Space was checked before cleaning began; running out now leaves relocation
            // half-done, which `mutate` has already turned into a poisoned volume.
            FsError::NoSpace => FsError::Io(TxnError::Segment(SegmentError::NoFreeSegment)),
            other => other,
        })?;
        // Tree nodes marked for relocation move at the flush; the commit that follows drops
        // the victim's last references.
        self.volume.flush_trees()?;
        self.volume.log.write_table()?;
        let remaining = self.volume.log.table().entry(victim).valid_pages;
        if remaining > 0 && skipped_unreadable > 0 {
            // Live data on an unreadable page: a media failure, reported rather than hidden.
            self.volume.poison();
            return Err(FsError::Io(TxnError::Segment(SegmentError::Unreadable { address: self.volume.layout().address(victim, 0) })));
        }
        assert_eq!(remaining, 0, "segment {victim} still has {remaining} valid pages after cleaning");
        Ok(())
    }
}
