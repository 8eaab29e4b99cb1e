//! Space: the account behind statfs and the fail-fast checks, and the cleaner's file-system
//! half. `ensure_space` keeps enough free segments for the next operation and a commit, by
//! committing (which makes pages dropped in this transaction reusable) and by cleaning victims
//! that the segment layer chooses (`segment/cleaner.rs`: policy and victim reads); here each
//! live page of a victim goes to its owner, found from the tag in its spare area, to be moved.

use alloc::vec::Vec;

use fsoc_flash::Flash;

use crate::fs::{FileSystem, FsError, TreeId};
use crate::segment::cleaner::{self, PageOwner};
use crate::segment::{LogHead, PageTag, SegmentError, SegmentLog, VictimPage};
use crate::txn::TxnError;

/// Free segments every change leaves beyond what it and the commit after it need, so that a
/// block going bad under one of their programs or erases (its segment is retired, and the
/// write moves to another) never leaves the commit without room (docs/DESIGN.md, "Grown bad
/// blocks").
pub(crate) const FAILURE_SLACK_SEGMENTS: u64 = 1;

/// What an operation will add to the volume, for `ensure_space`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SpaceUse {
    /// New file data: counts against capacity.
    Data,
    /// Only tree changes (and at most a page or two), which deleting needs even when full.
    Metadata,
}

/// What the volume can offer, in pages (`FileSystem::space`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SpaceAccount {
    /// Pages offered to files: log segments minus retired and reserve segments.
    pub capacity_pages: u64,
    /// Pages the working state references (file data, tree nodes, segment-table pages).
    pub valid_pages: u64,
    /// Pages of file data that can still be written: `capacity - valid`, less the dead pages
    /// the cleaner cannot recover at a profit (segments with fewer than `gain_min` dead pages)
    /// and less what a commit of the current working state needs.
    pub writable_pages: u64,
}

impl<F: Flash> FileSystem<F> {
    /// (capacity, used) in pages as offered to files: log segments minus the reserve, the
    /// retired ones and those set aside (version 9: the superblock's second home and the
    /// metaroot areas lent log segments); used = pages the working state references.
    pub(crate) fn capacity_pages(&self) -> (u64, u64) {
        let layout = self.volume.layout();
        let table = self.volume.log.table();
        let pages_per_segment = u64::from(layout.pages_per_segment());
        let usable_segments = u64::from(layout.log_segment_count())
            .saturating_sub(u64::from(table.retired_log_segment_count()))
            .saturating_sub(u64::from(table.log_segments_set_aside()))
            .saturating_sub(u64::from(self.volume.config.reserve_segments) + FAILURE_SLACK_SEGMENTS);
        // Blocks masked out of their segments (bad) hold nothing either.
        let (masked_pages, _) = table.masked_pages();
        ((usable_segments * pages_per_segment).saturating_sub(masked_pages), table.total_valid_pages())
    }

    /// Pages cleaning a victim costs beyond its live pages: the tree nodes that point at them
    /// are rewritten, and the closing commit and its paired-page guard are shared by the
    /// batch. Measured as the cleaner runs; before that, one path of each tree plus a guard.
    fn cleaning_overhead_pages(&self) -> u64 {
        // Moving a victim's live data pages rewrites at least one path of the allocation tree,
        // so no measurement (a round whose commit cost less than foreseen reads as free) takes
        // the estimate below one path: a victim that gains less than that is not worth it.
        let copies = self.volume.layout().metadata_copies();
        let path = u64::from(self.volume.allocation.height()) * copies + self.guard_pages();
        match self.stats.cleaning_overhead_pages_x16 {
            0 => path + u64::from(self.volume.directory.height()) * copies,
            measured => measured.div_ceil(16).max(path),
        }
    }

    /// Dead pages a victim must hold for cleaning it to gain: more than it costs, by a margin
    /// of 1/32 of a segment so the cleaner does not churn for nothing.
    fn gain_min_pages(&self) -> u32 {
        let pages_per_segment = self.volume.layout().pages_per_segment();
        let overhead = u32::try_from(self.cleaning_overhead_pages()).unwrap_or(u32::MAX);
        overhead.saturating_add((pages_per_segment / 32).max(1)).min(pages_per_segment)
    }

    /// Pages the paired-page guard skips after a commit in the metadata and data heads, and in
    /// the cold head while it is open (static wear levelling).
    fn guard_pages(&self) -> u64 {
        let guard_rows = self.volume.paired_page_distance();
        let heads = 2 + u64::from(self.volume.log.open_segment_index(LogHead::Cold).is_some());
        heads * u64::from(guard_rows) * u64::from(self.volume.layout().chip_count)
    }

    /// The space account behind statfs and the fail-fast check of `ensure_space` (reads the
    /// segment table if it is not loaded yet).
    pub fn space(&mut self) -> Result<SpaceAccount, FsError> {
        self.volume.ensure_table_loaded()?;
        Ok(self.space_account())
    }

    pub(crate) fn space_account(&self) -> SpaceAccount {
        let (capacity_pages, valid_pages) = self.capacity_pages();
        let log = &self.volume.log;
        let pages_per_segment = log.layout().pages_per_segment();
        let gain_min = self.gain_min_pages();
        let overhead = self.cleaning_overhead_pages();
        // Dead pages the cleaner can recover at a profit, and those it cannot.
        let dead = log.dead_pages(gain_min, overhead);
        // What `ensure_space` lets a data write take: free segments above the reserve and above
        // what a commit needs on the metadata head, the data head's room, and cleanable pages.
        let metadata_segments = (self.commit_cost_pages() + self.operation_node_pages())
            .saturating_sub(u64::from(log.open_segment_room(LogHead::Metadata)))
            .div_ceil(u64::from(pages_per_segment));
        let free_segments = u64::from(log.free_segment_count()) + u64::from(log.reclaimable_segment_count());
        let spare_segments = free_segments.saturating_sub(
            u64::from(self.volume.config.reserve_segments) + metadata_segments + FAILURE_SLACK_SEGMENTS,
        );
        // Less one victim's overhead: the cleaning that reaches the last cleanable pages costs
        // that much beyond them (the fail-fast check in `make_room` keeps the same margin).
        let physical = spare_segments * u64::from(pages_per_segment)
            + u64::from(log.open_segment_room(LogHead::Data))
            + dead.cleanable.saturating_sub(overhead);
        let logical = capacity_pages.saturating_sub(valid_pages).saturating_sub(dead.stranded);
        // Pending pages (small writes in the NVRAM log) will take a page each when programmed.
        let pending = self.pending.len() as u64;
        // A worn-out volume takes nothing more (`refuse_if_worn_out`).
        let writable_pages =
            if self.volume.wear_out().is_some() { 0 } else { logical.min(physical).saturating_sub(pending) };
        SpaceAccount { capacity_pages, valid_pages, writable_pages }
    }

    /// Pages a full commit made now would append to the metadata head: every dirty node, every
    /// segment-table page and index page (the fixpoint writes each at most once), each twice
    /// with mirror-meta, and what the paired-page guard then skips in both heads.
    pub(crate) fn commit_cost_pages(&self) -> u64 {
        let table = self.volume.log.table();
        let table_pages = u64::from(table.page_count()) + u64::from(table.index_page_count());
        let copies = self.volume.layout().metadata_copies();
        (self.volume.dirty_node_count() as u64 + table_pages) * copies + self.guard_pages()
    }

    /// Pages of the nodes one namespace or attribute change may dirty: up to four records, each
    /// on a path of its tree with a split or merge at every level, plus a new root.
    fn operation_node_pages(&self) -> u64 {
        let heights = u64::from(self.volume.directory.height()) + u64::from(self.volume.allocation.height());
        4 * 2 * (heights + 1) * self.volume.layout().metadata_copies()
    }

    /// Whether `metadata_pages` more on the metadata head and `data_pages` more on the data
    /// head fit in the open segments' room plus the free segments above `floor_segments`.
    pub(crate) fn fits(&self, metadata_pages: u64, data_pages: u64, floor_segments: u64) -> bool {
        let log = &self.volume.log;
        let pages_per_segment = u64::from(self.volume.layout().pages_per_segment());
        let segments_for = |pages: u64, room: u32| pages.saturating_sub(u64::from(room)).div_ceil(pages_per_segment);
        let needed = segments_for(metadata_pages, log.open_segment_room(LogHead::Metadata))
            + segments_for(data_pages, log.open_segment_room(LogHead::Data))
            + floor_segments;
        needed <= u64::from(log.free_segment_count())
    }

    /// Makes sure an operation can append `pages_needed` data pages and its tree changes, and
    /// that a commit after it still fits. `Data` (new file data) must also fit the logical
    /// capacity and leave the reserve untouched; `Metadata` (deletes, renames, attribute
    /// changes, cleaning) may use the reserve, so a full volume can always be emptied
    /// (docs/DESIGN.md, "Space"). Commits and cleans as necessary; `NoSpace`, decided from the
    /// accounting before any cleaning starts, when that cannot help.
    pub(crate) fn ensure_space(&mut self, pages_needed: u32, space_use: SpaceUse) -> Result<(), FsError> {
        self.volume.prepare_write()?;
        self.refuse_if_worn_out()?;
        // Data that reads have found near the ECC's limit moves first, a segment per change
        // (fs/scrub.rs).
        if self.volume.log.device().has_weak_segments() {
            self.refresh_weak_segments(1)?;
        }
        // Pending pages are programmed before the next commit: count them as this operation's
        // own (they were counted when their writes were checked, and must stay room since).
        let pages_needed = u64::from(pages_needed) + self.pending.len() as u64;
        let floor_segments = match space_use {
            SpaceUse::Data => {
                let (capacity, used) = self.capacity_pages();
                if used + pages_needed > capacity {
                    return Err(FsError::NoSpace);
                }
                u64::from(self.volume.config.reserve_segments) + FAILURE_SLACK_SEGMENTS
            }
            // Changes that may use the reserve still clean before it is gone: they keep the
            // room cleaning one whole victim may take (its pages, each with a rewritten path),
            // and use that last room only when cleaning cannot gain (below).
            SpaceUse::Metadata => {
                1 + u64::from(self.volume.directory.height().max(self.volume.allocation.height()))
                    + FAILURE_SLACK_SEGMENTS
            }
        };
        self.level_wear(pages_needed, floor_segments.max(u64::from(self.volume.config.reserve_segments)))?;
        if self.fits(self.commit_cost_pages() + self.operation_node_pages(), pages_needed, floor_segments) {
            return Ok(()); // the common case: no scan of the segment table
        }
        let result = self.make_room(pages_needed, space_use, floor_segments);
        if space_use == SpaceUse::Metadata
            && result == Err(FsError::NoSpace)
            && self.fits(self.commit_cost_pages() + self.operation_node_pages(), pages_needed, FAILURE_SLACK_SEGMENTS)
        {
            return Ok(());
        }
        result
    }

    /// End of life (docs/DESIGN.md, "End of life"): once the flash can no longer guarantee
    /// writes (`Volume::wear_out`: a metaroot area that cannot be erased, or more than a tenth of
    /// the log segments in service retired), every change is refused with `FsError::WornOut`
    /// (EROFS) before it begins. The first time, what was written before is made durable while the
    /// reserve still guarantees a commit: a full commit with a clean record, so that the next
    /// mount has no power cut to recover from (a re-anchoring mount erases a metaroot area).
    /// Then the volume is read-only for the rest of the session (commits write nothing, unmount
    /// returns the flash as is), and a remount finds the same state again in the segment table.
    fn refuse_if_worn_out(&mut self) -> Result<(), FsError> {
        if let Some(worn) = self.volume.worn_out() {
            self.config.volume.read_only = true;
            return Err(FsError::WornOut(worn));
        }
        let Some(worn) = self.volume.wear_out() else {
            return Ok(());
        };
        let clean = self.volume.committed().is_clean();
        if self.has_uncommitted_changes() || self.volume.dirty_node_count() > 0 || !clean {
            self.materialize_all()?;
            self.volume.commit(true)?;
            self.delta.clear();
            self.stats.commits += 1;
        }
        self.volume.set_worn_out(worn);
        self.config.volume.read_only = true;
        Err(FsError::WornOut(worn))
    }

    /// Static wear levelling (`SegmentLog::wear_levelling_victim`): when the erase counts spread
    /// too far, moves the cold data off the least-worn used segment, so that segment is erased
    /// and used again. Done only while the move, a commit and the operation that asked for room
    /// all fit above `floor_segments` (the caller passes at least the reserve: levelling never
    /// takes it), at most one segment per operation; checks nothing but the erase-count range
    /// while the log is within the spread.
    fn level_wear(&mut self, pages_needed: u64, floor_segments: u64) -> Result<(), FsError> {
        let Some(victim) = self.volume.log.wear_levelling_victim() else {
            return Ok(());
        };
        let metadata_pages = self.cleaning_cost_pages(victim) + self.commit_cost_pages() + self.operation_node_pages();
        if !self.fits(metadata_pages, pages_needed, floor_segments) {
            return Ok(());
        }
        // Its data goes to the cold head, apart from new data. No commit of its own: the victim
        // is free after the next full commit, as any segment this transaction emptied.
        self.volume.log.set_cold_relocation(true);
        let cleaned = self.clean_segment(victim);
        self.volume.log.set_cold_relocation(false);
        cleaned
    }

    /// `ensure_space`'s slow path: fail fast, or commit and clean until the operation fits
    /// above `floor_segments`.
    fn make_room(&mut self, pages_needed: u64, space_use: SpaceUse, floor_segments: u64) -> Result<(), FsError> {
        // Fail fast: when the account says cleaning cannot make the room, do not start. The
        // account is an estimate: reaching its very last pages costs the closing commit at least
        // one more victim's worth of rewritten paths than it foresees, so the room must show
        // that much beyond the request (statfs's promise allows for less than a segment).
        let margin = self.cleaning_overhead_pages();
        if space_use == SpaceUse::Data && self.space_account().writable_pages < pages_needed + margin {
            return Err(FsError::NoSpace);
        }
        let segment_count = u64::from(self.volume.layout().segment_count());
        let mut fruitless_rounds = 0;
        // Each round commits (turning segments emptied since the last full commit into free
        // ones) or cleans a batch of victims and commits; a round that gains no room counts
        // against a small bound, so the loop ends in NoSpace rather than spinning.
        for _round in 0..2 * segment_count + 4 {
            if self.fits(self.commit_cost_pages() + self.operation_node_pages(), pages_needed, floor_segments) {
                return Ok(());
            }
            let room_before = self.volume.log.room_pages();
            if self.volume.log.reclaimable_segment_count() > 0
                && self.fits(self.commit_cost_pages(), 0, FAILURE_SLACK_SEGMENTS)
            {
                self.commit()?;
            } else {
                // Clean victims while the worst case of the next one and the closing commit
                // still fit (the reserve may be used), then commit once: the commit's cost and
                // its paired-page guard are shared by the batch.
                let mut cleaned = 0u64;
                let mut relocated = 0u64;
                // What the closing commit would cost without the cleaning: not the victims' cost.
                let commit_cost_before = self.commit_cost_pages();
                let mut room_wanted = (self.commit_cost_pages() + self.operation_node_pages() + pages_needed)
                    .saturating_add(floor_segments * u64::from(self.volume.layout().pages_per_segment()));
                while let Some(victim) = self.volume.log.choose_victim(self.gain_min_pages()) {
                    if !self.fits(
                        self.cleaning_cost_pages(victim) + self.commit_cost_pages(),
                        0,
                        FAILURE_SLACK_SEGMENTS,
                    ) {
                        break;
                    }
                    let table = self.volume.log.table();
                    let dead = u64::from(self.volume.layout().pages_per_segment() - table.occupied_pages(victim));
                    let live = u64::from(table.entry(victim).valid_pages);
                    self.clean_segment(victim)?;
                    cleaned += 1;
                    relocated += live;
                    room_wanted = room_wanted.saturating_sub(dead);
                    if room_wanted == 0 {
                        break;
                    }
                }
                if cleaned == 0 {
                    // No victim fits beside the closing commit of what is dirty now (deletes on
                    // a full volume dirty many leaves): commit alone first, when that fits, so
                    // the next round's victims only need room for themselves.
                    if self.volume.dirty_node_count() > 0
                        && self.fits(self.commit_cost_pages(), 0, FAILURE_SLACK_SEGMENTS)
                    {
                        self.commit()?;
                        continue;
                    }
                    return Err(FsError::NoSpace);
                }
                self.commit()?;
                // Learn what a victim really costs: room spent beyond the relocated pages.
                let pages_per_segment = u64::from(self.volume.layout().pages_per_segment());
                let spent = (room_before + cleaned * pages_per_segment).saturating_sub(self.volume.log.room_pages());
                let overhead_x16 =
                    (16 * spent.saturating_sub(relocated + commit_cost_before) / cleaned).min(16 * pages_per_segment);
                let previous = self.stats.cleaning_overhead_pages_x16;
                self.stats.cleaning_overhead_pages_x16 =
                    if previous == 0 { overhead_x16.max(1) } else { ((3 * previous + overhead_x16) / 4).max(1) };
            }
            if self.volume.log.room_pages() <= room_before {
                fruitless_rounds += 1;
                if fruitless_rounds > 4 {
                    return Err(FsError::NoSpace);
                }
            }
        }
        Err(FsError::NoSpace)
    }

    /// Pages relocating `victim` may append: its live pages, and for each a rewritten path of
    /// the tree that points at it (bounded by the trees' node count in practice; this is the
    /// worst case the check must allow for).
    pub(crate) fn cleaning_cost_pages(&self, victim: u32) -> u64 {
        let valid = u64::from(self.volume.log.table().entry(victim).valid_pages);
        let height = u64::from(self.volume.directory.height().max(self.volume.allocation.height()));
        valid * (1 + height * self.volume.layout().metadata_copies())
    }

    /// Relocates every live page of `victim` (the segment layer's `evacuate`, with this file
    /// system as the pages' owner); after the next commit it holds none. A live page the flash
    /// can no longer return stays behind: the victim is retired so no cleaner picks it again
    /// (`Leftover::settle`), and reads of that page answer EIO as before.
    pub(crate) fn clean_segment(&mut self, victim: u32) -> Result<(), FsError> {
        self.stats.cleaner_runs += 1;
        let left = self.evacuate_segment(victim)?;
        self.settle(victim, left)
    }

    /// What to do about pages evacuation left in `segment`: nothing if none; retire the
    /// segment if the flash could not return some (a media failure: the data on them is lost
    /// and stays reported, not hidden); a corrupt volume (live pages nobody owns) poisons.
    pub(crate) fn settle(&mut self, segment: u32, left: Leftover) -> Result<(), FsError> {
        if left.valid_pages == 0 {
            return Ok(());
        }
        if left.unreadable > 0 {
            self.volume.log.retire_with_lost_pages(segment);
            self.stats.segments_with_lost_pages += 1;
            return Ok(());
        }
        self.volume.poison();
        Err(FsError::Corrupt("a segment holds valid pages that no file or tree owns"))
    }

    /// Moves every live page of `victim` that can be read elsewhere, and answers what stayed:
    /// live pages the flash could not return, or (on a corrupt volume) pages no owner claims.
    pub(crate) fn evacuate_segment(&mut self, victim: u32) -> Result<Leftover, FsError> {
        let mut unreadable = 0u32;
        self.mutate(|fs| {
            let batch = u32::try_from(fs.config.io_batch_pages).unwrap_or(u32::MAX);
            let mut owner = Evacuation { fs, run: Vec::new(), skipped_unreadable: 0 };
            let evacuated = cleaner::evacuate(&mut owner, victim, batch)?;
            unreadable = evacuated.unreadable.saturating_add(owner.skipped_unreadable);
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
        Ok(Leftover { valid_pages: self.volume.log.table().entry(victim).valid_pages, unreadable })
    }
}

/// What evacuating a segment could not move.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Leftover {
    /// Pages the segment table still counts valid in the segment.
    pub valid_pages: u32,
    /// Pages of the segment the flash could not return (tree pages whose read failed
    /// included).
    pub unreadable: u32,
}

/// The file system as the owner of a victim's pages: a tree node moves through its tree, a
/// file's data page through its file (consecutive pages of one file at consecutive addresses
/// gathered into a run and moved together: one punch and one extent for the run, not one a
/// page), a segment-table page by marking its table page to be written again.
struct Evacuation<'a, F: Flash> {
    fs: &'a mut FileSystem<F>,
    /// Live data pages that continue one another, not yet moved.
    run: Vec<VictimPage>,
    /// Tree pages that could not be read back (see `relocate_if_live`).
    skipped_unreadable: u32,
}

impl<F: Flash> PageOwner<F> for Evacuation<'_, F> {
    type Error = FsError;

    fn log(&self) -> &SegmentLog<F> {
        &self.fs.volume.log
    }

    fn relocate_if_live(&mut self, page: VictimPage) -> Result<bool, FsError> {
        let continues_run = match (self.run.last(), page.tag) {
            (
                Some(VictimPage { tag: PageTag::Data { inode, page_index }, address, .. }),
                PageTag::Data { inode: next_inode, page_index: next_index },
            ) => {
                *inode == next_inode
                    && page_index.checked_add(1) == Some(next_index)
                    && u64::from(address.0) + 1 == u64::from(page.address.0)
            }
            _ => false,
        };
        if !continues_run {
            self.fs.relocate_data_run(&mut self.run)?;
        }
        let live = match page.tag {
            PageTag::Node { tree_id, .. } => {
                let which = if tree_id == crate::txn::volume::DIRECTORY_TREE_ID {
                    TreeId::Directory
                } else {
                    TreeId::Allocation
                };
                match self.fs.with_tree(which, |tree, store| tree.relocate_if_live(store, page.address)) {
                    // A page torn by a power cut may read back once and not again (unstable
                    // bits); it was never committed, so it is not live. A live page that is
                    // unreadable shows up as a valid count that stays > 0 (`clean_segment`).
                    Err(FsError::Io(TxnError::Segment(SegmentError::Unreadable { .. }))) => {
                        self.skipped_unreadable += 1;
                        false
                    }
                    other => other?,
                }
            }
            PageTag::Data { inode, page_index } if self.fs.data_page_is_live(inode, page_index, page.address)? => {
                self.run.push(page);
                true
            }
            PageTag::SegmentTable { page_index } => {
                self.fs.volume.log.mark_table_page_dirty_if_at(page_index, page.address)
            }
            _ => false,
        };
        if live {
            self.fs.stats.pages_relocated += 1;
        }
        Ok(live)
    }

    fn end_batch(&mut self) -> Result<(), FsError> {
        self.fs.relocate_data_run(&mut self.run)
    }
}
