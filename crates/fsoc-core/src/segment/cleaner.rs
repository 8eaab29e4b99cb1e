//! The cleaner: which segment to clean next, what a commit would make free, which dead pages
//! are worth recovering, and the evacuation of a victim (`evacuate`): its pages read in
//! batches with the owner tags in their spare areas, each handed to the layer above through
//! one narrow trait, `PageOwner`, which says whether the page is live and moves it. Nothing
//! here knows what a page holds (the file system's owner is in `fs/space.rs`: tree nodes,
//! file data, segment-table pages); once the owner has moved every live page, the victim holds
//! no valid page and the next commit frees it.
//!
//! Policy: the victim is the used segment with the fewest valid pages, if cleaning it gains at
//! least `gain_min` pages (the caller's measure of what cleaning costs). Apart from that, when
//! erase counts spread more than `wear_spread_max` (a sixteenth of the highest count, at least
//! `WEAR_SPREAD_MAX`), the least-worn used segment is moved whatever it gains, so cold data
//! stops pinning young blocks (static wear levelling, `wear_levelling_victim`). Every choice
//! comes from the segment table's ordered sets and histogram: a few entries looked at, never a
//! scan of the segments.

use alloc::vec::Vec;

use fsoc_flash::{Flash, ReadStatus};

use crate::address::LogAddress;
use crate::segment::layout::FIRST_LOG_SEGMENT;
use crate::segment::{LogHead, PageTag, SegmentError, SegmentLog};

/// Erase-count spread the cleaner allows while erase counts are low: the floor of
/// `wear_spread_max`.
pub const WEAR_SPREAD_MAX: u32 = 12;

/// Above `WEAR_SPREAD_MAX × WEAR_SPREAD_SHARE` erases, the spread allowed is this share of the
/// highest erase count (1/16), so the log's erase counts stay within about 6% of each other
/// however long the chips last. An absolute spread (32, before) let max/mean reach 1.10 at the
/// end of life of chips rated for 100 cycles, and on chips rated for thousands it moved cold
/// data every 32 erases, where this moves it a few dozen times over their whole life.
pub const WEAR_SPREAD_SHARE: u32 = 16;

/// The erase-count spread allowed when the most-worn segment has `erase_max` erases.
///
/// The floor trades levelling work early in life for the spread at the end: measured with
/// tests/endurance.rs's workload (half the volume cold files, hot files rewritten), 12 keeps
/// max/mean at or below 1.07 at end of life for chips rated for 100 to 300 cycles (1.10 with
/// 16 where the metaroot areas wear out first, at 40% of the log's life). Its price, over
/// 20,000 steps of that workload on chips far from worn: 4.8% more page programs on a 2-chip
/// volume than the old rule, which never levelled there (erase counts 1 to 77, against 34 to
/// 47), and 12% fewer on a 1-chip one (its moves went to the data head; 8 would cost 6.9%).
pub fn wear_spread_max(erase_max: u32) -> u32 {
    WEAR_SPREAD_MAX.max(erase_max / WEAR_SPREAD_SHARE)
}

/// A page of a victim that may still be live: readable and tagged with its owner.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VictimPage {
    pub address: LogAddress,
    pub tag: PageTag,
    pub data: Vec<u8>,
}

/// The layer that owns the log's pages, as the cleaner sees it.
pub trait PageOwner<F: Flash> {
    type Error: From<SegmentError>;
    /// The log the victim is in (the owner holds it).
    fn log(&self) -> &SegmentLog<F>;
    /// Moves `page` out of its segment if it is still live, and answers whether it was. An
    /// owner may gather live pages and move them together at `end_batch`.
    fn relocate_if_live(&mut self, page: VictimPage) -> Result<bool, Self::Error>;
    /// The pages read together so far are all handed over: whatever was gathered moves now.
    fn end_batch(&mut self) -> Result<(), Self::Error>;
}

/// What `evacuate` did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Evacuated {
    /// Pages moved out (live).
    pub live: u64,
    /// Pages the flash could not return (uncorrectable): whether any was live shows as valid
    /// pages left in the victim.
    pub unreadable: u32,
}

/// Moves every live page out of segment `victim` through `owner`: the victim's pages are read
/// `batch` at a time (consecutive stripe pages overlap on different chips), and reading stops
/// once the segment table counts no valid page left.
pub fn evacuate<F: Flash, O: PageOwner<F>>(owner: &mut O, victim: u32, batch: u32) -> Result<Evacuated, O::Error> {
    let pages_per_segment = owner.log().layout().pages_per_segment();
    let batch = batch.clamp(1, pages_per_segment);
    let mut pages = Vec::new();
    let mut live = 0;
    let mut unreadable = 0;
    let mut first_page = 0;
    while first_page < pages_per_segment && owner.log().table().entry(victim).valid_pages > 0 {
        pages.clear();
        unreadable += owner.log().read_victim_pages(victim, first_page, batch, &mut pages)?;
        first_page += batch;
        for page in pages.drain(..) {
            if owner.log().table().entry(victim).valid_pages == 0 {
                break;
            }
            if owner.relocate_if_live(page)? {
                live += 1;
            }
        }
        owner.end_batch()?;
    }
    Ok(Evacuated { live, unreadable })
}

/// Dead pages of the used segments, by whether cleaning recovers them at a profit.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DeadPages {
    /// In segments with at least `gain_min` dead pages, less `overhead` per such segment.
    pub cleanable: u64,
    /// In segments with fewer: they stay dead until more of their segment's pages die.
    pub stranded: u64,
}

impl<F: Flash> SegmentLog<F> {
    /// Pages appendable now: free segments and the open segments' room.
    pub fn room_pages(&self) -> u64 {
        u64::from(self.free_segment_count()) * u64::from(self.layout().pages_per_segment())
            + u64::from(self.open_segments_room())
    }

    /// Segments that hold no valid page but were dropped from since the last full commit: a
    /// commit makes them free (the open segments excepted: a commit does not close them).
    pub fn reclaimable_segment_count(&self) -> u32 {
        let table = self.table();
        let open_and_reclaimable: u32 = LogHead::ALL
            .iter()
            .filter_map(|&head| self.open_segment_index(head))
            .map(|segment| {
                let entry = table.entry(segment);
                u32::from(
                    segment >= FIRST_LOG_SEGMENT
                        && !entry.retired
                        && entry.valid_pages == 0
                        && table.freed_this_transaction(segment) > 0,
                )
            })
            .sum();
        table.reclaimable_segment_count() - open_and_reclaimable
    }

    /// The dead pages of the used segments that are not open, split at `gain_min` dead pages
    /// per segment, each cleanable segment's share counted less `overhead` (what cleaning it
    /// costs beyond its live pages). From the table's histogram, then the open segments
    /// (at most one per head) taken out: no scan.
    pub fn dead_pages(&self, gain_min: u32, overhead: u64) -> DeadPages {
        let table = self.table();
        let pages_per_segment = self.layout().pages_per_segment();
        let split = table.dead_pages_split(gain_min);
        let mut dead = DeadPages {
            cleanable: split.dead_at_least - split.segments_at_least * overhead,
            stranded: split.dead_below,
        };
        for segment in LogHead::ALL.iter().filter_map(|&head| self.open_segment_index(head)) {
            let entry = table.entry(segment);
            if segment < FIRST_LOG_SEGMENT || entry.retired || entry.valid_pages == 0 {
                continue;
            }
            let open_dead = u64::from(pages_per_segment - table.occupied_pages(segment));
            if open_dead >= u64::from(gain_min) {
                dead.cleanable -= open_dead - overhead;
            } else {
                dead.stranded -= open_dead;
            }
        }
        dead
    }

    /// The next victim to clean for room: the emptiest used segment, or `None` when no segment
    /// is worth cleaning. (Wear is levelled apart from this: `wear_levelling_victim`.)
    pub fn choose_victim(&self, gain_min: u32) -> Option<u32> {
        let table = self.table();
        let pages_per_segment = self.layout().pages_per_segment();
        // Cleaning must gain more than it costs: relocating a nearly full segment and committing
        // can consume more pages than it frees. The emptiest candidate is the best one.
        table
            .emptiest_used(|segment| !self.is_open(segment))
            .filter(|&segment| table.occupied_pages(segment) + gain_min <= pages_per_segment)
    }

    /// Static wear levelling: the least-worn used segment, when it lags the most-worn segment
    /// by more than `wear_spread_max` erases (cold data pins it, so it is not erased while the
    /// others are) and no young block is free or open for data; `None` otherwise.
    ///
    /// The second condition makes each move count. The data head opens the least-worn free
    /// segment, so while a young block is free it is taken next and catches up by itself; and
    /// the moved data, which goes to the cold head (`LogHead::Cold`), would pin a young block
    /// in turn. Waiting until the free segments and the data head are all at least half the
    /// spread ahead of the victim puts the cold data on a worn block and frees the young one
    /// for the hot data. Measured on tests/endurance.rs's workload to end of life (150 cycles):
    /// 624 MiB written with it against 597 without on 1 chip (write amplification 1.34 against
    /// 1.41), 907 against 862 MiB on 2 chips, for the same spread. Looks at no entry while the
    /// whole log is within the spread, and at three or so otherwise.
    pub fn wear_levelling_victim(&self) -> Option<u32> {
        let table = self.table();
        let (erase_min, erase_max) = table.erase_count_range();
        let spread_max = wear_spread_max(erase_max);
        if erase_max - erase_min <= spread_max {
            return None;
        }
        let coldest = table.coldest_used(|segment| !self.is_open(segment))?;
        let coldest_count = table.entry(coldest).erase_count;
        if coldest_count + spread_max >= erase_max {
            return None;
        }
        let worn_enough = |segment: u32| table.entry(segment).erase_count >= coldest_count + spread_max / 2;
        let free_worn = table.least_worn_free(|segment| !self.is_open(segment)).is_none_or(worn_enough);
        let head_worn = self.open_segment_index(LogHead::Data).is_none_or(worn_enough);
        (free_worn && head_worn).then_some(coldest)
    }

    /// Reads pages `first_page..first_page + count` of segment `victim` together (consecutive
    /// stripe pages sit on different chips, so the reads overlap) and appends to `out` those
    /// that may be live: readable, with an owner tag, and answers how many were unreadable. An
    /// erased or torn page was never part of any state and is skipped; an unreadable one that
    /// was live shows up to the caller as a valid count that does not reach zero.
    pub fn read_victim_pages(
        &self,
        victim: u32,
        first_page: u32,
        count: u32,
        out: &mut Vec<VictimPage>,
    ) -> Result<u32, SegmentError> {
        let layout = self.layout();
        let end = first_page.saturating_add(count).min(layout.pages_per_segment());
        let addresses: Vec<LogAddress> = (first_page..end).map(|page| layout.address(victim, page)).collect();
        let mut buffers = Vec::new();
        buffers.resize(addresses.len(), Vec::new());
        let (mut statuses, mut tags) = (Vec::new(), Vec::new());
        self.read_many_with_tags(&addresses, &mut buffers, &mut statuses, &mut tags)?;
        let mut unreadable = 0;
        for (((address, status), tag), data) in addresses.into_iter().zip(statuses).zip(tags).zip(buffers) {
            match status {
                ReadStatus::Erased => continue,
                ReadStatus::Uncorrectable => {
                    unreadable += 1;
                    continue;
                }
                ReadStatus::Clean | ReadStatus::Corrected { .. } => {}
            }
            if let Some(tag) = tag {
                out.push(VictimPage { address, tag, data });
            }
        }
        Ok(unreadable)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_spread_allowed_is_a_sixteenth_of_the_highest_count_with_a_floor() {
        assert_eq!(wear_spread_max(0), WEAR_SPREAD_MAX);
        assert_eq!(wear_spread_max(150), WEAR_SPREAD_MAX);
        assert_eq!(wear_spread_max(16 * WEAR_SPREAD_MAX), WEAR_SPREAD_MAX);
        assert_eq!(wear_spread_max(3_000), 187);
        assert_eq!(wear_spread_max(100_000), 6_250);
    }
}
