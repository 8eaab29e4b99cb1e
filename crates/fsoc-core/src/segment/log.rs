//! The copy-on-write log: appends pages into open segments (log heads), opens fresh
//! segments (erasing them just before use, least-worn first), and keeps the segment table's
//! counts in step.
//!
//! Two heads separate short-lived pages from long-lived ones: tree nodes and segment-table
//! pages (rewritten at every commit) go to the metadata head, file data to the data head. Old
//! node copies then pile up in metadata segments, which empty almost completely and are cheap
//! for the cleaner, instead of leaving a few dead pages in every data segment that no victim
//! choice can recover at a profit (docs/DESIGN.md, "Space"). A third head takes the cold data
//! static wear levelling moves, for the same reason: it lives long, new data does not.
//!
//! Invariants: pages of a segment are appended in ascending order (asserted here and enforced
//! again by fsoc-media); a segment is erased only when `SegmentTable::is_free` says neither the
//! committed nor the working state references it; after mount nothing is appended into a
//! segment that was open before (its last pages may hold a torn program).

use alloc::collections::BTreeSet;
use alloc::vec;
use alloc::vec::Vec;

use fsoc_flash::{Flash, NandError, ReadStatus};

use crate::address::{LogAddress, PagePointer};
use crate::segment::device::{Device, PageTag};
use crate::segment::layout::{Layout, FIRST_LOG_SEGMENT};
use crate::segment::segment_table::SegmentTable;
use fsoc_flash::codec::crc32c;
use fsoc_flash::convert::u32_from_usize;

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SegmentError {
    #[error("flash: {0}")]
    Media(#[from] NandError),
    #[error("no free segment left in the log")]
    NoFreeSegment,
    #[error("segment table page {page_index} at {address}: {reason}")]
    CorruptTable { page_index: u32, address: LogAddress, reason: &'static str },
    #[error("{address} was released but is not counted valid: a record on flash points at a page it does not own")]
    Accounting { address: LogAddress },
    #[error("{address} is unreadable (uncorrectable ECC)")]
    Unreadable { address: LogAddress },
}

/// Which open segment a page is appended to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogHead {
    /// Tree nodes and segment-table pages.
    Metadata = 0,
    /// File data pages.
    Data = 1,
    /// File data that static wear levelling moves off a young segment (cold by definition):
    /// kept apart from new data, so it does not sit among pages that die soon and get copied
    /// again by the cleaner (`SegmentLog::set_cold_relocation`).
    Cold = 2,
}

impl LogHead {
    pub const ALL: [LogHead; 3] = [LogHead::Metadata, LogHead::Data, LogHead::Cold];

    pub fn for_tag(tag: PageTag) -> LogHead {
        match tag {
            PageTag::Data { .. } => LogHead::Data,
            _ => LogHead::Metadata,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
struct OpenSegment {
    segment_index: u32,
    next_page: u32,
    /// Paired-page guard, per chip: the lowest row (page index within the chip's block) that
    /// may still be programmed. Pages of lower rows are skipped, left erased.
    row_floor: Vec<u32>,
    /// Per chip, the highest row taken since the last guard.
    taken_since_guard: Vec<Option<u32>>,
}

/// The row floor of a chip whose block of the segment is masked out: no page of it is taken.
const MASKED_FLOOR: u32 = u32::MAX;

impl OpenSegment {
    fn new(segment_index: u32, chip_count: u32, masked_chips: &[u32]) -> Self {
        let mut open = OpenSegment {
            segment_index,
            next_page: 0,
            row_floor: vec![0; chip_count as usize],
            taken_since_guard: vec![None; chip_count as usize],
        };
        for &chip in masked_chips {
            open.mask(chip);
        }
        open
    }

    /// Leaves `chip`'s block out from now on (its pages already taken stay).
    fn mask(&mut self, chip: u32) {
        if let Some(floor) = self.row_floor.get_mut(chip as usize) {
            *floor = MASKED_FLOOR;
        }
    }

    fn masked_chip_count(&self) -> u32 {
        u32_from_usize(self.row_floor.iter().filter(|&&floor| floor == MASKED_FLOOR).count())
    }
}

/// The open segment of `head` in a log's `open` (a function of the field, so the rest of the
/// log stays borrowable).
fn open_slot_mut(open: &mut [Option<OpenSegment>; 3], head: LogHead) -> &mut Option<OpenSegment> {
    let [metadata, data, cold] = open;
    match head {
        LogHead::Metadata => metadata,
        LogHead::Data => data,
        LogHead::Cold => cold,
    }
}

/// A page `write_table` writes: a table page or an index page (by number).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum TablePage {
    Table(u32),
    Index(u32),
}

/// Tries when a fresh segment's erase or a program fails (each failure retires a segment).
const RETRIES_MAX: u32 = 8;

pub struct SegmentLog<F: Flash> {
    device: Device<F>,
    table: Option<SegmentTable>,
    /// The open segment of each head, in `LogHead::ALL` order (`open_slot`, `open_slot_mut`).
    open: [Option<OpenSegment>; 3],
    /// File data appended now is cold data static wear levelling moves: it goes to
    /// `LogHead::Cold` (`set_cold_relocation`).
    cold_relocation: bool,
    /// The first release of a page the table did not count valid (or outside the log): only
    /// corrupt records on flash lead here. Latched; `Volume` refuses to commit after it.
    accounting_error: Option<LogAddress>,
}

impl<F: Flash> SegmentLog<F> {
    /// A log whose segment table is loaded later from `directory` (see `ensure_table_loaded`).
    pub fn new(device: Device<F>, table: Option<SegmentTable>) -> Self {
        SegmentLog { device, table, open: [None, None, None], cold_relocation: false, accounting_error: None }
    }

    /// The device under the log, for the transaction layer's I/O outside the log (superblocks,
    /// metaroot areas, the chip-set check) and for its clock. The file-system layer reads and
    /// writes through the log's own methods, never through this.
    pub(crate) fn device(&self) -> &Device<F> {
        &self.device
    }
    pub(crate) fn device_mut(&mut self) -> &mut Device<F> {
        &mut self.device
    }
    pub(crate) fn into_device(self) -> Device<F> {
        self.device
    }

    pub fn layout(&self) -> Layout {
        self.device.layout()
    }

    pub fn is_table_loaded(&self) -> bool {
        self.table.is_some()
    }

    /// Reads the segment table named by `directory`: its pages, or, when `index_page_count` is
    /// non-zero, the index pages naming them first (each page checked against its pointer's
    /// checksum). Mount does not call this, so mount cost does not grow with volume size; the
    /// first write or statfs does.
    pub fn load_table(&mut self, directory: &[PagePointer], index_page_count: u32) -> Result<(), SegmentError> {
        let layout = self.layout();
        let mut table = SegmentTable::new(layout.segment_count(), layout.pages_per_segment(), layout.page_size_bytes())
            .with_block_pages(layout.geometry.pages_per_block);
        let mut buffer = Vec::new();
        if index_page_count > 0 {
            table = table.with_index_pages(index_page_count);
            assert_eq!(
                table.index_page_count() as usize,
                directory.len(),
                "directory size checked by the metaroot decoder"
            );
            let table_page_count = table.page_count();
            for (index_page, pointer) in (0u32..).zip(directory) {
                // Index pages are numbered after the table pages (as in their spare tags).
                let corrupt = |reason| SegmentError::CorruptTable {
                    page_index: table_page_count + index_page,
                    address: pointer.address,
                    reason,
                };
                if let Some(reason) = self.read_checked(pointer, &mut buffer)? {
                    return Err(corrupt(reason));
                }
                table.decode_index_page(index_page, &buffer).map_err(|_| corrupt("invalid pointer slot"))?;
            }
            table.index_directory = directory.to_vec();
        } else {
            assert_eq!(table.page_count() as usize, directory.len(), "directory size checked by the metaroot decoder");
            table.directory = directory.to_vec();
        }
        for (page_index, pointer) in (0u32..).zip(table.directory.clone()) {
            let corrupt = |reason| SegmentError::CorruptTable { page_index, address: pointer.address, reason };
            if let Some(reason) = self.read_checked(&pointer, &mut buffer)? {
                return Err(corrupt(reason));
            }
            table.decode_page(page_index, &buffer).map_err(|_| corrupt("invalid entry"))?;
        }
        table.recount();
        table.clear_dirty();
        self.table = Some(table);
        Ok(())
    }

    /// Reads the page `pointer` names into `buffer` and checks it against the pointer's
    /// checksum: `Some(reason)` when the page is not what the pointer promises.
    fn read_checked(
        &mut self,
        pointer: &PagePointer,
        buffer: &mut Vec<u8>,
    ) -> Result<Option<&'static str>, SegmentError> {
        if !self.layout().contains(pointer.address) {
            return Ok(Some("address outside the volume"));
        }
        let status = self.device.read(pointer.address, buffer)?;
        if matches!(status, ReadStatus::Uncorrectable | ReadStatus::Erased) {
            return Ok(Some("page unreadable or erased"));
        }
        // Bytes the ECC passed but the pointer's checksum refutes (a miscorrection): from the
        // second copy (mirror-meta) or the row's parity, as a tree node would be.
        if crc32c(buffer) != pointer.checksum
            && !(self.device.read_rebuilt(pointer.address, buffer)? && crc32c(buffer) == pointer.checksum)
        {
            return Ok(Some("checksum differs from the metaroot's pointer"));
        }
        Ok(None)
    }

    pub fn install_table(&mut self, table: SegmentTable) {
        self.table = Some(table);
    }

    /// Mutable access for replaying a delta commit's accounting (fs::delta).
    pub fn table_for_replay(&mut self) -> &mut SegmentTable {
        self.table_mut()
    }

    // Invariant: format creates the log with its table, and mount's volume loads it
    // (`Volume::ensure_table_loaded`) before any path that allocates, releases or reports
    // space; a table that fails to load is an error there, so no input reaches this with none.
    #[allow(clippy::expect_used)]
    pub fn table(&self) -> &SegmentTable {
        self.table.as_ref().expect("segment table used before it was loaded")
    }

    // Invariant: as for `table`.
    #[allow(clippy::expect_used)]
    fn table_mut(&mut self) -> &mut SegmentTable {
        self.table.as_mut().expect("segment table used before it was loaded")
    }

    /// The open segment of `head`.
    fn open_slot(&self, head: LogHead) -> &Option<OpenSegment> {
        let [metadata, data, cold] = &self.open;
        match head {
            LogHead::Metadata => metadata,
            LogHead::Data => data,
            LogHead::Cold => cold,
        }
    }

    /// Forgets the open segments, so the next appends open fresh ones.
    pub fn close_open_segments(&mut self) {
        self.open = [None, None, None];
    }

    /// While set, file data pages are appended to `LogHead::Cold` instead of `LogHead::Data`:
    /// static wear levelling sets it around the move of a victim's pages.
    pub fn set_cold_relocation(&mut self, cold: bool) {
        self.cold_relocation = cold;
    }

    /// The head a page with `tag` is appended to.
    fn head_for(&self, tag: PageTag) -> LogHead {
        match LogHead::for_tag(tag) {
            LogHead::Data if self.cold_relocation => LogHead::Cold,
            head => head,
        }
    }

    pub fn open_segment_index(&self, head: LogHead) -> Option<u32> {
        self.open_slot(head).as_ref().map(|open| open.segment_index)
    }

    /// Whether `segment_index` is one of the heads' open segments.
    pub fn is_open(&self, segment_index: u32) -> bool {
        LogHead::ALL.iter().any(|&head| self.open_segment_index(head) == Some(segment_index))
    }

    /// Paired-page guard, called once a commit is durable: on every chip that took pages since
    /// the last guard, the next `distance` rows are left unprogrammed, so no later program in
    /// this segment's blocks shares cells with a committed page. Chips that took nothing keep
    /// their floor (their committed rows were guarded before).
    ///
    /// With parity a row is guarded whole (its parity page shares the row): every chip gets
    /// the highest floor any chip needs.
    pub fn guard_paired_pages(&mut self, distance: u32) {
        let parity = self.device.layout().has_parity();
        for open in self.open.iter_mut().flatten() {
            for (floor, taken) in open.row_floor.iter_mut().zip(open.taken_since_guard.iter_mut()) {
                if let Some(row) = taken.take() {
                    *floor = (*floor).max(row + distance + 1);
                }
            }
            if parity {
                let highest = open.row_floor.iter().copied().max().unwrap_or(0);
                open.row_floor.fill(highest);
            }
        }
    }

    /// A transaction point is about to be written (volumes with parity): the parity of every
    /// row that took pages is programmed, and each open segment moves on to its next row, so
    /// no page joins a row after its parity. A parity page that fails to program retires its
    /// segment (the row's pages stay readable, without parity, until they move).
    pub fn seal_parity(&mut self) -> Result<(), SegmentError> {
        let layout = self.device.layout();
        if !layout.has_parity() {
            return Ok(());
        }
        for open in self.open.iter_mut().flatten() {
            open.next_page = layout.next_row_start(open.next_page);
        }
        if !self.device.has_open_rows() {
            return Ok(());
        }
        let outcome = self.device.seal_rows()?;
        for (segment_index, block) in outcome.failed {
            self.retire(segment_index, Some(block));
        }
        Ok(())
    }

    /// Pages still appendable to `head` without opening a segment: on each chip, the rows
    /// above both the next page and the paired-page guard's floor.
    pub fn open_segment_room(&self, head: LogHead) -> u32 {
        let Some(open) = self.open_slot(head).as_ref() else {
            return 0;
        };
        let layout = self.device.layout();
        let chip_count = layout.chip_count;
        if layout.has_parity() {
            // Floors are whole rows (`guard_paired_pages`), all chips alike.
            let floor_row = open.row_floor.iter().copied().max().unwrap_or(0);
            let first_free = open.next_page.max(floor_row.saturating_mul(chip_count - 1));
            return layout.pages_per_segment().saturating_sub(first_free);
        }
        let rows_per_chip = layout.pages_per_segment() / chip_count;
        // `row_floor` has one entry per chip.
        (0..chip_count)
            .zip(&open.row_floor)
            .map(|(chip, &row_floor)| {
                // The next page on this chip is the first stripe page >= next_page on it.
                let next_row = open.next_page / chip_count + u32::from(open.next_page % chip_count > chip);
                rows_per_chip.saturating_sub(next_row.max(row_floor))
            })
            .sum()
    }

    /// Pages still appendable to either head without opening a segment.
    pub fn open_segments_room(&self) -> u32 {
        LogHead::ALL.iter().map(|&head| self.open_segment_room(head)).sum()
    }

    /// Free segments, not counting the open ones (an open segment whose pages were all
    /// dropped before a commit counts as free in the table). O(1).
    ///
    /// Free segments with masked blocks hold fewer pages: their masked pages are counted off in
    /// whole segments (rounded up), so space checks never count on pages that are not there.
    pub fn free_segment_count(&self) -> u32 {
        let table = self.table();
        let open_and_free: u32 =
            self.open.iter().flatten().map(|open| u32::from(table.is_free(open.segment_index))).sum();
        let (_, free_masked_pages) = table.masked_pages();
        let masked_segments =
            u32::try_from(free_masked_pages.div_ceil(u64::from(self.layout().pages_per_segment()))).unwrap_or(u32::MAX);
        (table.free_segment_count() - open_and_free).saturating_sub(masked_segments)
    }

    /// Opens the least-worn free segment for `head`, erasing it first. Its blocks marked bad,
    /// and those whose erase fails (marked bad then), are masked out and the others used
    /// (`masks_blocks`); a segment that cannot be used so is retired.
    fn open_fresh_segment(&mut self, head: LogHead) -> Result<(), SegmentError> {
        for _attempt in 0..RETRIES_MAX {
            // The table keeps free segments ordered by (erase count, index): no scan.
            let chosen = self.table().least_worn_free(|segment| !self.is_open(segment));
            let Some(segment_index) = chosen else {
                return Err(SegmentError::NoFreeSegment);
            };
            *open_slot_mut(&mut self.open, head) = None;
            let layout = self.device.layout();
            let mut masked = Vec::new();
            for block in layout.blocks_of_segment(segment_index) {
                if self.device.flash().is_bad_block(block)? {
                    masked.push(block.chip.0);
                }
            }
            let failed = self.device.erase_segment_blocks(segment_index, &masked)?;
            // Erase counts count erases started: a segment whose erase fails counts it too (not
            // one whose blocks were all marked bad before, never erased).
            let erased = failed.iter().filter(|(_, error)| !matches!(error, NandError::BadBlock { .. })).count()
                + (layout.chip_count as usize - masked.len() - failed.len());
            if erased > 0 {
                self.table_mut().record_erase(segment_index);
            }
            for &(chip, _) in &failed {
                // Best effort: a failed mark leaves the block masked or retired in our table.
                let _ = self.device.flash_mut().mark_bad_block(fsoc_flash::BlockAddress::new(chip, segment_index));
                masked.push(chip);
            }
            if !masked.is_empty() && !self.can_mask(u32_from_usize(masked.len())) {
                self.table_mut().retire(segment_index);
                continue;
            }
            self.table_mut().set_masked_blocks(segment_index, u32_from_usize(masked.len()));
            *open_slot_mut(&mut self.open, head) = Some(OpenSegment::new(segment_index, layout.chip_count, &masked));
            return Ok(());
        }
        Err(SegmentError::NoFreeSegment)
    }

    /// `Layout::can_mask_blocks`.
    fn can_mask(&self, masked: u32) -> bool {
        self.layout().can_mask_blocks(masked)
    }

    /// A program into `segment_index` failed on `block` (a grown bad block): the block is
    /// marked bad and masked out of the open segment, which goes on with its other chips
    /// (pages already on the block stay, and the segment is marked weak so a refresh moves
    /// them); or, where a segment cannot go on so (`can_mask`), it is retired.
    fn fail_block(&mut self, segment_index: u32, block: fsoc_flash::BlockAddress) {
        let chip = block.chip.0;
        let masked = self
            .open
            .iter()
            .flatten()
            .find(|open| open.segment_index == segment_index)
            .map(|open| open.masked_chip_count() + 1);
        let Some(masked) = masked.filter(|&masked| block.block.0 == segment_index && self.can_mask(masked)) else {
            self.retire(segment_index, Some(block));
            return;
        };
        let mut had_pages = false;
        for open in self.open.iter_mut().flatten().filter(|open| open.segment_index == segment_index) {
            had_pages |= open.next_page > chip;
            open.mask(chip);
        }
        // Best effort: the block is masked in the table either way.
        let _ = self.device.flash_mut().mark_bad_block(block);
        self.table_mut().set_masked_blocks(segment_index, masked);
        if had_pages {
            self.device.mark_weak(segment_index);
        }
    }

    fn retire(&mut self, segment_index: u32, bad_block: Option<fsoc_flash::BlockAddress>) {
        self.table_mut().retire(segment_index);
        if let Some(block) = bad_block {
            // Best effort: a failed mark leaves the segment retired in our table anyway.
            let _ = self.device.flash_mut().mark_bad_block(block);
        }
        self.close_if_open(segment_index);
    }

    /// Stops appending to `segment` if a head is (its unwritten pages stay erased and unused
    /// until it is cleaned): a segment being refreshed must not receive the pages moved out
    /// of it. The head opens a fresh segment at its next append.
    pub fn close_if_open(&mut self, segment_index: u32) {
        for open in &mut self.open {
            if open.as_ref().is_some_and(|open| open.segment_index == segment_index) {
                *open = None;
            }
        }
    }

    /// Retires a segment that keeps a live page the flash can no longer return, after its
    /// readable pages moved out: the cleaner must not pick it again (it cannot be emptied),
    /// and the lost page stays where reads of it answer EIO until its file lets it go.
    pub fn retire_with_lost_pages(&mut self, segment_index: u32) {
        self.retire(segment_index, None);
    }

    /// Takes a segment out of the log for good (retired in the table, no longer open), so the
    /// table written at the next commit records it: a metaroot area whose erase failed (before
    /// the log or moved into it), or a log segment becoming an area. Its blocks are not marked
    /// bad: it holds no live page, and a mark may erase a block first (MTD).
    pub fn retire_area_segment(&mut self, segment_index: u32) {
        self.table_mut().retire(segment_index);
        self.close_if_open(segment_index);
    }

    /// Format version 9: segment 4 is the superblock's second home (`SegmentTable::reserve_second_home`).
    pub fn reserve_second_home(&mut self) {
        self.table_mut().reserve_second_home();
    }

    /// Counts an erase of a segment outside the log's own use (a metaroot area's) in its entry.
    pub fn record_area_erase(&mut self, segment_index: u32) {
        self.table_mut().record_erase(segment_index);
    }

    /// Lends a free log segment to a metaroot area, or takes it back into the log (format
    /// version 9, `SegmentTable::set_lent`). The table changes in RAM only: the superblock
    /// generation naming the areas is what a mount lends again.
    pub fn set_area_segment_lent(&mut self, segment_index: u32, lent: bool) {
        self.table_mut().set_lent(segment_index, lent);
        if lent {
            self.close_if_open(segment_index);
        }
    }

    /// Whether pages appended to `head` are written twice (mirror-meta: the metadata head).
    fn mirrors(&self, head: LogHead) -> bool {
        head == LogHead::Metadata && self.layout().mirrors_metadata()
    }

    /// Takes the next log address of `head` and counts it valid, without programming it yet.
    /// With mirror-meta, the metadata head takes a pair: an even address `a`, returned, and
    /// `a + 1` for the second copy (the next chip), both counted valid. A page the pair cannot
    /// use (odd, after the paired-page guard skipped one; or its partner skipped) stays erased
    /// and is not counted.
    pub fn reserve_address(&mut self, head: LogHead) -> Result<LogAddress, SegmentError> {
        if !self.mirrors(head) {
            return self.take_address(head);
        }
        let layout = self.layout();
        // Each pass takes at least one page of the open segment or opens a fresh one, whose
        // pages 0 and 1 always pair (no floors yet): this ends within a segment's pages.
        let mut first = self.take_address(head)?;
        loop {
            if !layout.page_in_segment(first).is_multiple_of(2) {
                self.unreserve(first);
                first = self.take_address(head)?;
                continue;
            }
            let second = self.take_address(head)?;
            if second.0 == first.0 + 1 && layout.segment_of(second) == layout.segment_of(first) {
                return Ok(first);
            }
            self.unreserve(first);
            first = second;
        }
    }

    /// Drops the count of a reserved address that will not be programmed (left erased).
    fn unreserve(&mut self, address: LogAddress) {
        let segment_index = self.layout().segment_of(address);
        self.table_mut().remove_valid(segment_index);
    }

    /// One address of `head` (`reserve_address` without mirroring).
    fn take_address(&mut self, head: LogHead) -> Result<LogAddress, SegmentError> {
        let layout = self.device.layout();
        let pages_per_segment = layout.pages_per_segment();
        // Each pass takes a page or skips one below its chip's guard floor, so this ends within
        // a segment's pages (a fresh segment has no floors).
        loop {
            let open = match open_slot_mut(&mut self.open, head) {
                Some(open) if open.next_page < pages_per_segment => open,
                _ => {
                    self.open_fresh_segment(head)?;
                    continue;
                }
            };
            let page = layout.physical(layout.address(open.segment_index, open.next_page));
            let (chip, row) = (page.chip.0, page.page_index);
            // `OpenSegment::new` gave every chip a floor and a taken row.
            let (Some(&row_floor), Some(taken)) =
                (open.row_floor.get(chip as usize), open.taken_since_guard.get_mut(chip as usize))
            else {
                let limit = open.row_floor.len() as u64;
                return Err(
                    NandError::OutOfRange { what: "chip of an open segment", value: u64::from(chip), limit }.into()
                );
            };
            if row < row_floor {
                open.next_page += 1;
                continue;
            }
            *taken = Some(row);
            let address = self.device.layout().address(open.segment_index, open.next_page);
            open.next_page += 1;
            let segment_index = open.segment_index;
            self.table_mut().add_valid(segment_index);
            return Ok(address);
        }
    }

    /// Appends a page to the log and returns its address. A program failure retires the
    /// segment and retries in a fresh one.
    pub fn append(&mut self, data: &[u8], tag: PageTag) -> Result<LogAddress, SegmentError> {
        for _attempt in 0..RETRIES_MAX {
            let head = self.head_for(tag);
            let address = self.reserve_address(head)?;
            match self.program_page(address, data, tag) {
                Ok(()) => return Ok(address),
                Err(
                    NandError::OperationFailed { block, .. }
                    | NandError::WornOut { block, .. }
                    | NandError::BadBlock { block },
                ) => {
                    // The failed page (pair) never held live data: drop its count, then mask
                    // the block out or retire the segment.
                    self.unreserve(address);
                    if self.mirrors(head) {
                        self.unreserve(LogAddress(address.0 + 1));
                    }
                    self.fail_block(self.layout().segment_of(address), block);
                }
                Err(error) => return Err(error.into()),
            }
        }
        Err(SegmentError::NoFreeSegment)
    }

    /// Programs a reserved page, and with mirror-meta a node's or table page's second copy at
    /// the next address.
    fn program_page(&mut self, address: LogAddress, data: &[u8], tag: PageTag) -> Result<(), NandError> {
        self.device.program(address, data, tag)?;
        match tag.mirror_copy() {
            Some(copy) if self.layout().mirrors_metadata() => {
                self.device.program(LogAddress(address.0 + 1), data, copy)
            }
            _ => Ok(()),
        }
    }

    /// `release` of a tree node or a segment-table page: with mirror-meta, of both its copies.
    pub fn release_metadata(&mut self, address: LogAddress) -> Result<(), SegmentError> {
        self.release(address)?;
        if self.layout().mirrors_metadata() {
            self.release(LogAddress(address.0 + 1))?;
        }
        Ok(())
    }

    /// The working state no longer references `address`. A release the table cannot account
    /// for (outside the log, or in a segment with no valid page) means a record on flash
    /// pointed somewhere it should not: it changes nothing and answers
    /// `SegmentError::Accounting`, which fails the operation. It is also latched for
    /// `accounting_error`, so the volume never commits after it, even if a caller dropped the
    /// error.
    pub fn release(&mut self, address: LogAddress) -> Result<(), SegmentError> {
        let layout = self.layout();
        let accountable = layout.contains(address)
            && layout.segment_of(address) >= FIRST_LOG_SEGMENT
            && self.table().entry(layout.segment_of(address)).valid_pages > 0;
        if !accountable {
            self.accounting_error.get_or_insert(address);
            return Err(SegmentError::Accounting { address });
        }
        self.table_mut().remove_valid(layout.segment_of(address));
        Ok(())
    }

    /// The first unaccountable release since this log was opened, if any.
    pub fn accounting_error(&self) -> Option<LogAddress> {
        self.accounting_error
    }

    /// Reads a log page; an uncorrectable or erased page is an error.
    pub fn read(&self, address: LogAddress, data: &mut Vec<u8>) -> Result<(), SegmentError> {
        if !self.layout().contains(address) {
            return Err(SegmentError::Unreadable { address });
        }
        match self.device.read(address, data)? {
            ReadStatus::Uncorrectable | ReadStatus::Erased => Err(SegmentError::Unreadable { address }),
            ReadStatus::Clean | ReadStatus::Corrected { .. } => Ok(()),
        }
    }

    /// Rebuilds a log page from its row's parity into `data` (see `Device::read_rebuilt`).
    pub fn read_rebuilt(&self, address: LogAddress, data: &mut [u8]) -> Result<bool, SegmentError> {
        Ok(self.device.read_rebuilt(address, data)?)
    }

    /// Reads any page of the volume (the log or the reserved areas before it) and returns its
    /// ECC status instead of judging it: for checks that report what they find (fsck).
    pub fn read_with_status(&self, address: LogAddress, data: &mut Vec<u8>) -> Result<ReadStatus, SegmentError> {
        Ok(self.device.read(address, data)?)
    }

    /// Reads one physical page (a superblock copy, wherever its generation lives).
    pub fn read_physical_with_status(
        &self,
        address: fsoc_flash::PageAddress,
        data: &mut Vec<u8>,
    ) -> Result<ReadStatus, SegmentError> {
        let layout = self.layout();
        data.resize(layout.page_size_bytes(), 0);
        let mut spare = alloc::vec![0u8; layout.spare_size_bytes()];
        Ok(self.device.read_physical(address, data, &mut spare)?)
    }

    /// Reads several log pages at once (they overlap across chips); each page's ECC status is
    /// left to the caller, as `read_with_status`.
    pub fn read_many(
        &self,
        addresses: &[LogAddress],
        buffers: &mut [Vec<u8>],
        statuses: &mut Vec<ReadStatus>,
    ) -> Result<(), SegmentError> {
        Ok(self.device.read_many(addresses, buffers, statuses)?)
    }

    /// `read_many` into page-sized slices the caller lends.
    pub fn read_many_into(
        &self,
        addresses: &[LogAddress],
        targets: &mut [&mut [u8]],
        statuses: &mut Vec<ReadStatus>,
    ) -> Result<(), SegmentError> {
        Ok(self.device.read_many_into(addresses, targets, statuses)?)
    }

    /// `read_many` that also decodes each page's owner tag from its spare area (the cleaner).
    pub fn read_many_with_tags(
        &self,
        addresses: &[LogAddress],
        buffers: &mut [Vec<u8>],
        statuses: &mut Vec<ReadStatus>,
        tags: &mut Vec<Option<PageTag>>,
    ) -> Result<(), SegmentError> {
        Ok(self.device.read_many_with_tags(addresses, buffers, statuses, tags)?)
    }

    /// Pages between an upper page and the lower page sharing its cells, as the flash reports.
    pub fn flash_paired_page_distance(&self) -> u32 {
        self.device.flash().paired_page_distance()
    }

    /// Writes every dirty segment-table page, and the index pages naming any that moved.
    /// Writing a page changes counts (its new page is valid, its old one released), which may
    /// dirty further table pages, and a moved table page dirties its index page; so addresses
    /// are reserved until a fixpoint (each page at most once), and only then are the final
    /// contents computed — table pages first, whose checksums the index pages hold — and
    /// programmed in address order.
    ///
    /// A program that fails (a grown bad block) retires its segment and starts again: every
    /// page of the attempt is written anew at fresh addresses (the attempt's addresses are
    /// released as any old location is), so the pages the metaroot will name were all
    /// programmed in one successful pass. Nothing committed is touched before the metaroot.
    pub fn write_table(&mut self) -> Result<(), SegmentError> {
        for _attempt in 0..RETRIES_MAX {
            if self.write_table_once()? {
                return Ok(());
            }
        }
        Err(SegmentError::NoFreeSegment)
    }

    /// One pass of `write_table`: answers false when a program failed and the pass must be
    /// made again (its pages are marked dirty once more).
    fn write_table_once(&mut self) -> Result<bool, SegmentError> {
        let mut reserved: Vec<(TablePage, LogAddress)> = Vec::new();
        let (mut done, mut done_index) = (BTreeSet::new(), BTreeSet::new());
        loop {
            let page = match self.table().first_dirty_page_not_in(&done) {
                Some(page_index) => TablePage::Table(page_index),
                None => match self.table().first_dirty_index_page_not_in(&done_index) {
                    Some(index_page) => TablePage::Index(index_page),
                    None => break,
                },
            };
            let address = self.reserve_address(LogHead::Metadata)?;
            let old = match page {
                TablePage::Table(page_index) => {
                    done.insert(page_index);
                    // Its pointer changes: the index page naming it is rewritten too.
                    let moved = self.table_mut().table_page_moved(page_index, PagePointer { address, checksum: 0 });
                    moved.ok_or(SegmentError::CorruptTable {
                        page_index,
                        address,
                        reason: "dirty page beyond the table",
                    })?
                }
                TablePage::Index(index_page) => {
                    done_index.insert(index_page);
                    let old = self.table().index_directory.get(index_page as usize).copied();
                    old.ok_or(SegmentError::CorruptTable {
                        page_index: self.table().page_count() + index_page,
                        address,
                        reason: "dirty index page beyond the table",
                    })?
                }
            };
            if !old.address.is_null() {
                self.release_metadata(old.address)?;
            }
            reserved.push((page, address));
        }
        // Contents are final now (nothing below changes a count). Table pages' checksums go
        // into their pointers before the index pages are encoded from them.
        let page_size_bytes = self.layout().page_size_bytes();
        for &(page, address) in &reserved {
            if let TablePage::Table(page_index) = page {
                let checksum = crc32c(&self.table().encode_page(page_index, page_size_bytes));
                // Reserved above, so the page is in the directory.
                if let Some(pointer) = self.table_mut().directory.get_mut(page_index as usize) {
                    *pointer = PagePointer { address, checksum };
                }
            }
        }
        let table_page_count = self.table().page_count();
        let all = reserved.clone();
        for (page, address) in reserved {
            let (bytes, tag_index) = match page {
                TablePage::Table(page_index) => (self.table().encode_page(page_index, page_size_bytes), page_index),
                TablePage::Index(index_page) => {
                    let bytes = self.table().encode_index_page(index_page, page_size_bytes);
                    let checksum = crc32c(&bytes);
                    // Reserved above, so the page is in the index directory.
                    if let Some(pointer) = self.table_mut().index_directory.get_mut(index_page as usize) {
                        *pointer = PagePointer { address, checksum };
                    }
                    (bytes, table_page_count + index_page)
                }
            };
            match self.program_page(address, &bytes, PageTag::SegmentTable { page_index: tag_index }) {
                Ok(()) => {}
                Err(NandError::OperationFailed { block, .. } | NandError::WornOut { block, .. }) => {
                    let segment_index = self.layout().segment_of(address);
                    self.fail_block(segment_index, block);
                    for &(page, _) in &all {
                        match page {
                            TablePage::Table(page_index) => self.table_mut().mark_page_dirty(page_index),
                            TablePage::Index(index_page) => self.table_mut().mark_index_page_dirty(index_page),
                        }
                    }
                    return Ok(false);
                }
                Err(error) => return Err(error.into()),
            }
        }
        self.table_mut().clear_dirty();
        Ok(true)
    }

    /// Cleaner: if table page `page_index` lives at `address`, mark it for rewriting. Index
    /// pages are tagged with numbers after the table pages' (`page_count + index page`).
    pub fn mark_table_page_dirty_if_at(&mut self, page_index: u32, address: LogAddress) -> bool {
        let table = self.table_mut();
        let table_page_count = table.page_count();
        if page_index >= table_page_count {
            let index_page = page_index - table_page_count;
            let live = table.index_directory.get(index_page as usize).is_some_and(|pointer| pointer.address == address);
            if live {
                table.mark_index_page_dirty(index_page);
            }
            return live;
        }
        let live = table.directory.get(page_index as usize).is_some_and(|pointer| pointer.address == address);
        if live {
            table.mark_page_dirty(page_index);
        }
        live
    }

    /// After the metaroot of a transaction is durable.
    pub fn end_transaction(&mut self) {
        self.table_mut().end_transaction();
    }
}
