//! Scrubbing and refresh: finding data the flash is about to lose, and rewriting it first.
//!
//! NAND cells leak charge with time (retention), gain it when neighbouring pages are read
//! (read disturb), and do both faster as they wear. The ECC hides the first few bit errors of
//! each sector; a read that needed most of its strength (`Device`'s refresh threshold, three
//! quarters of the code's bits per 512 bytes) warns that the block will soon be unreadable.
//! Every read through the volume notes such a block's segment as *weak*, whoever reads it
//! (file reads, listings, fsck, the cleaner), and the data in a weak segment is *refreshed*:
//! moved elsewhere by the cleaner's evacuation, after which the next full commit frees the
//! segment and its erase resets the charge. Refresh runs
//! - at the start of the next change (`ensure_space`), one segment at a time, so a busy volume
//!   refreshes what its readers found without a scrub;
//! - in `scrub`, which reads everything live (both trees' nodes with their checksums, every
//!   file data page with its checksum) and then refreshes every weak segment it met;
//! - in a front end's background scrubber (fsoc-engine's `BackgroundScrubber`), which reads
//!   the log a few pages at a time through `scrub_step`, shared with readers, and refreshes
//!   under the exclusive lock.
//!
//! What is not refreshed, and why: the superblock and metaroot areas (segments below the log;
//! the metaroot areas are erased and rewritten as commits rotate through them, the superblock
//! never: it is reported), and a segment whose live pages include one the flash can no longer
//! return (its readable pages move; the lost one stays, reported, reads of it answer EIO, and
//! the segment is retired so no cleaner tries to empty it again). A segment a log head is
//! still appending to is closed first (its unwritten pages wait for the cleaner).
//!
//! Invariant: a refresh never changes what any read returns: it is the cleaner's evacuation,
//! which moves each page with the checksum its extent recorded (tests/scrub.rs).

use alloc::vec::Vec;

use fsoc_flash::{Flash, ReadStatus};

use crate::address::LogAddress;
use crate::fs::fsck::FsckReport;
use crate::fs::fsck_data::DataCheckReport;
use crate::fs::records::page_checksum;
use crate::fs::{FileSystem, FsError};
use crate::segment::layout::FIRST_LOG_SEGMENT;
use crate::segment::PageTag;

/// Passes `scrub` makes at most: a second only when more segments were weak than the device
/// keeps track of at once (`WEAK_SEGMENTS_MAX`), a third if that happened again.
const SCRUB_PASSES_MAX: u32 = 3;

/// What refreshing weak segments did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RefreshReport {
    /// Weak segments whose live pages all moved.
    pub segments_refreshed: u32,
    /// Live pages moved by those refreshes.
    pub pages_moved: u64,
    /// Weak segments that kept live pages the flash could not return (the rest moved).
    pub segments_with_lost_pages: u32,
    /// Weak pages in the superblock or metaroot areas, which are not refreshed here.
    pub reserved_area_segments: u32,
    /// Weak segments left for later: there was no room, or the call's limit was reached.
    pub segments_deferred: u32,
}

impl RefreshReport {
    fn add(&mut self, other: RefreshReport) {
        self.segments_refreshed += other.segments_refreshed;
        self.pages_moved += other.pages_moved;
        self.segments_with_lost_pages += other.segments_with_lost_pages;
        self.reserved_area_segments += other.reserved_area_segments;
        self.segments_deferred = other.segments_deferred;
    }
}

/// What `scrub` found and did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ScrubReport {
    /// Read passes made (see `SCRUB_PASSES_MAX`).
    pub passes: u32,
    /// The structure check of the last pass (every tree node read and checked).
    pub structure: FsckReport,
    /// The data pass of the last pass (every file data page read and checked).
    pub data: DataCheckReport,
    /// Pages read from flash by the scrub.
    pub pages_read: u64,
    /// Of those reads, how many the ECC corrected, and how many came near its limit.
    pub corrected_reads: u64,
    pub weak_reads: u64,
    pub refresh: RefreshReport,
}

impl ScrubReport {
    /// No damage found: every page read back and matched its checksum (corrected reads and
    /// refreshed segments are not damage: that is the scrub doing its work).
    pub fn is_clean(&self) -> bool {
        self.structure.is_clean() && self.data.is_clean() && self.refresh.segments_with_lost_pages == 0
    }
}

/// Where a background scrub has got to: the next page to read, and the passes completed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ScrubCursor {
    pub segment: u32,
    pub page: u32,
    /// Times the cursor went round the whole log.
    pub passes: u64,
}

/// What one `scrub_step` read.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ScrubStep {
    pub pages_read: u64,
    /// Pages the ECC could not correct (live or not: a background step cannot tell).
    pub unreadable_pages: u64,
    /// Live file data pages whose content fails the checksum their extent records.
    pub checksum_failed_pages: u64,
}

impl<F: Flash> FileSystem<F> {
    /// Whether the segment table is in RAM (mount reads it on demand), which `scrub_step`
    /// needs.
    pub fn segment_table_loaded(&self) -> bool {
        self.volume.log.is_table_loaded()
    }

    /// Reads the segment table if mount has not yet (a background scrub's first step).
    pub fn load_segment_table(&mut self) -> Result<(), FsError> {
        Ok(self.volume.ensure_table_loaded()?)
    }

    /// Segments whose reads came near the ECC's limit and wait to be refreshed.
    pub fn weak_segment_count(&self) -> usize {
        self.volume.log.device().weak_segments().segments.len()
    }

    /// Sets the corrected bits in one ECC sector at which a read marks its segment weak (0
    /// turns early refresh off). The default is three quarters of the flash's ECC strength,
    /// or off when the flash does not say what that is.
    pub fn set_refresh_threshold_bits(&mut self, bits: u32) {
        self.volume.log.device_mut().set_refresh_bits(bits);
    }

    /// Refreshes up to `segments_max` weak segments (module comment): each one's live pages
    /// move elsewhere, as the cleaner moves them, and the next full commit frees it. Uses the
    /// room a metadata change may (the reserve included, as the cleaner does: a refresh frees
    /// as much as it takes); stops when even that is missing.
    pub fn refresh_weak_segments(&mut self, segments_max: u32) -> Result<RefreshReport, FsError> {
        self.volume.prepare_write()?;
        let mut report = RefreshReport::default();
        let weak: Vec<u32> = self.volume.log.device().weak_segments().segments.into_iter().collect();
        let mut attempted = 0;
        for segment in weak {
            if attempted >= segments_max {
                report.segments_deferred += 1;
                continue;
            }
            if segment < FIRST_LOG_SEGMENT {
                report.reserved_area_segments += 1;
                self.volume.log.device_mut().forget_weak_segment(segment);
                continue;
            }
            if self.volume.log.table().entry(segment).valid_pages == 0 {
                // Nothing live: the segment's next use erases it first.
                self.volume.log.device_mut().forget_weak_segment(segment);
                continue;
            }
            if !self.refresh_fits(segment) {
                report.segments_deferred += 1;
                continue;
            }
            attempted += 1;
            // A segment a head still appends to is closed first, so the pages moved out of it
            // go elsewhere.
            self.volume.log.close_if_open(segment);
            let moved_before = self.stats.pages_relocated;
            let left = self.evacuate_segment(segment)?;
            self.volume.log.device_mut().forget_weak_segment(segment);
            report.pages_moved += self.stats.pages_relocated - moved_before;
            if left.valid_pages == 0 {
                report.segments_refreshed += 1;
            } else {
                report.segments_with_lost_pages += 1;
            }
            self.settle(segment, left)?;
        }
        self.stats.segments_refreshed += u64::from(report.segments_refreshed);
        Ok(report)
    }

    /// Whether evacuating `segment` and the commit after it fit, keeping the room a metadata
    /// change keeps (one victim's worth, `ensure_space`).
    fn refresh_fits(&self, segment: u32) -> bool {
        let floor = 1 + u64::from(self.volume.directory.height().max(self.volume.allocation.height()));
        self.fits(self.cleaning_cost_pages(segment) + self.commit_cost_pages(), 0, floor)
    }

    /// Reads everything live and refreshes what came near the ECC's limit (module comment);
    /// commits when it moved anything. `progress(pages_read)` is called as the data pass goes.
    pub fn scrub(&mut self, progress: &mut dyn FnMut(u64)) -> Result<ScrubReport, FsError> {
        self.volume.ensure_table_loaded()?;
        let device = self.volume.log.device();
        let (reads_before, corrected_before, weak_before) =
            (device.pages_read(), device.corrected_reads(), device.weak_segments().weak_reads);
        let mut report = ScrubReport::default();
        let writable = !self.config.volume.read_only;
        while report.passes < SCRUB_PASSES_MAX {
            report.passes += 1;
            self.volume.log.device_mut().clear_weak_overflow();
            // Read the nodes from flash, not from the cache: that is what is being checked.
            self.volume.drop_node_caches();
            report.structure = self.fsck(false)?;
            report.data = self.fsck_data(progress)?;
            if writable {
                if self.volume.log.device().has_weak_segments() {
                    // Every head opens a fresh segment for what the refresh moves. Pages appended
                    // to a segment opened long ago age from that segment's first program (a
                    // block's charge loss starts there, and so does the simulator's retention
                    // clock), so a refresh into it would renew little: with the heads kept open,
                    // the monthly-scrub experiment (tests/scrub.rs) lost a page in 1 of 24 seeds
                    // more. Once per scrub pass: at most one partly used segment per head.
                    self.volume.log.close_open_segments();
                }
                let refreshed = self.refresh_weak_segments(u32::MAX)?;
                report.refresh.add(refreshed);
            }
            if !self.volume.log.device_mut().clear_weak_overflow() || !writable {
                break;
            }
        }
        if report.refresh.segments_refreshed + report.refresh.segments_with_lost_pages > 0 {
            self.commit()?;
        }
        let device = self.volume.log.device();
        report.pages_read = device.pages_read() - reads_before;
        report.corrected_reads = device.corrected_reads() - corrected_before;
        report.weak_reads = device.weak_segments().weak_reads - weak_before;
        Ok(report)
    }

    /// Reads up to `pages_max` pages of the log from `cursor` on (a background scrub's step,
    /// through `&self`, so readers run beside it): weak reads are noted as any read's are, and
    /// each live file data page is checked against its recorded checksum. Segments holding no
    /// valid page are skipped, at most `pages_max` of them per step too, so a step's work is
    /// bounded whatever the volume's size.
    ///
    /// Mount reads the segment table on demand; until something has loaded it
    /// (`load_segment_table`) a step reads nothing.
    pub fn scrub_step(&self, cursor: &mut ScrubCursor, pages_max: u32) -> Result<ScrubStep, FsError> {
        if !self.volume.log.is_table_loaded() {
            return Ok(ScrubStep::default());
        }
        let layout = self.volume.layout();
        let pages_per_segment = layout.pages_per_segment();
        let segment_count = layout.segment_count();
        let table = self.volume.log.table();
        let mut step = ScrubStep::default();
        let mut visited = 0u32;
        let mut buffers: Vec<Vec<u8>> = Vec::new();
        let (mut statuses, mut tags) = (Vec::new(), Vec::new());
        while step.pages_read < u64::from(pages_max) && visited < pages_max {
            if cursor.segment < FIRST_LOG_SEGMENT || cursor.segment >= segment_count {
                if cursor.segment >= segment_count {
                    cursor.passes += 1;
                }
                (cursor.segment, cursor.page) = (FIRST_LOG_SEGMENT, 0);
                if segment_count <= FIRST_LOG_SEGMENT {
                    break;
                }
            }
            visited += 1;
            if cursor.page >= pages_per_segment || table.entry(cursor.segment).valid_pages == 0 {
                (cursor.segment, cursor.page) = (cursor.segment + 1, 0);
                continue;
            }
            let wanted = (pages_max - u32::try_from(step.pages_read).unwrap_or(pages_max))
                .min(pages_per_segment - cursor.page)
                .max(1);
            let addresses: Vec<LogAddress> =
                (cursor.page..cursor.page + wanted).map(|page| layout.address(cursor.segment, page)).collect();
            buffers.resize(addresses.len(), Vec::new());
            self.volume.log.read_many_with_tags(&addresses, &mut buffers, &mut statuses, &mut tags)?;
            for (((address, status), tag), data) in addresses.iter().zip(&statuses).zip(&tags).zip(&buffers) {
                match (status, tag) {
                    (ReadStatus::Uncorrectable, _) => step.unreadable_pages += 1,
                    (ReadStatus::Clean | ReadStatus::Corrected { .. }, Some(PageTag::Data { inode, page_index })) => {
                        let page = *page_index;
                        // A tag is a hint: only a page its file's extent names is live.
                        if let Some(extent) = self.extent_at(*inode, page)? {
                            if extent.address_of(page) == *address
                                && extent.checksum_of(page).is_some_and(|recorded| recorded != page_checksum(data))
                            {
                                step.checksum_failed_pages += 1;
                            }
                        }
                    }
                    _ => {}
                }
            }
            step.pages_read += u64::from(wanted);
            cursor.page += wanted;
        }
        Ok(step)
    }
}
