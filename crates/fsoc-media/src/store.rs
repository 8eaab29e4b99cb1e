//! Persistent state of a flash array (page states and contents, block wear and bad marks) behind
//! the `PageStore` trait, and `RamStore`, its in-memory implementation.
//!
//! The store holds facts, not policy: the simulator decides what a read returns from them.
//! Zeroed metadata means "erased, erase count 0, not bad", so a fresh store (or a sparse image
//! file) needs no initialisation. `RamStore` allocates nothing for a block until one of its
//! pages is written, so a large idle device costs little memory.

use alloc::boxed::Box;
use alloc::vec;
use alloc::vec::Vec;

use crate::geometry::Geometry;
use crate::{BlockAddress, NandError, PageAddress};

/// How many injected bit-flip positions a page records; more set `excess_damage` instead.
pub const PAGE_FLIPS_MAX: usize = 16;

/// Physical state of a page.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum PageState {
    /// All bits 1; programmable.
    #[default]
    Erased,
    /// Programmed completely with the stored contents.
    Programmed,
    /// A program was cut by power loss: only some of the bits that should have gone to 0 did.
    /// The stored contents are the intended ones; the tear mask is recomputed from the seed.
    Torn,
    /// Torn, but the first read after power returns reads back as intended (unstable bits
    /// hazard); that read turns the page into `Torn`.
    TornUnstable,
    /// An erase was cut by power loss while this page was programmed: some bits went back to 1.
    /// The stored contents are the old ones; the erase mask is recomputed from the seed.
    Garbage,
}

impl PageState {
    /// Stable code used in image files (docs/FORMAT.md, "Image file").
    pub fn code(self) -> u8 {
        match self {
            PageState::Erased => 0,
            PageState::Programmed => 1,
            PageState::Torn => 2,
            PageState::TornUnstable => 3,
            PageState::Garbage => 4,
        }
    }

    pub fn from_code(code: u8) -> Option<PageState> {
        match code {
            0 => Some(PageState::Erased),
            1 => Some(PageState::Programmed),
            2 => Some(PageState::Torn),
            3 => Some(PageState::TornUnstable),
            4 => Some(PageState::Garbage),
            _ => None,
        }
    }

    /// Whether the page holds stored contents that reads depend on.
    pub fn has_contents(self) -> bool {
        self != PageState::Erased
    }
}

/// Persistent facts about one page.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct PageMeta {
    pub state: PageState,
    /// Bit positions (data then spare, see `ecc`) of injected persistent flips; the first
    /// `flip_count` entries are valid.
    pub flip_positions: [u32; PAGE_FLIPS_MAX],
    pub flip_count: u8,
    /// More damage than the recorded flips: every read of the page is uncorrectable.
    pub excess_damage: bool,
}

impl PageMeta {
    pub fn flips(&self) -> &[u32] {
        let count = usize::from(self.flip_count).min(PAGE_FLIPS_MAX);
        self.flip_positions.get(..count).unwrap_or(&[])
    }

    /// Records one more flip; a position already recorded is ignored (the cell is already
    /// wrong), and beyond `PAGE_FLIPS_MAX` the page is marked as excessively damaged.
    pub fn add_flip(&mut self, bit_position: u32) {
        if self.flips().contains(&bit_position) {
            return;
        }
        match self.flip_positions.get_mut(usize::from(self.flip_count)) {
            Some(slot) => {
                *slot = bit_position;
                self.flip_count += 1;
            }
            None => self.excess_damage = true,
        }
    }

    /// Whether this metadata is the all-zero "erased, untouched" value.
    pub fn is_pristine(&self) -> bool {
        *self == PageMeta::default()
    }
}

/// Why a block is marked bad.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum BadMark {
    #[default]
    Good,
    /// Marked bad by the manufacturer before first use.
    Factory,
    /// Marked bad during use (program/erase failure, wear-out).
    Grown,
}

impl BadMark {
    /// Stable code used in image files.
    pub fn code(self) -> u8 {
        match self {
            BadMark::Good => 0,
            BadMark::Factory => 1,
            BadMark::Grown => 2,
        }
    }

    pub fn from_code(code: u8) -> Option<BadMark> {
        match code {
            0 => Some(BadMark::Good),
            1 => Some(BadMark::Factory),
            2 => Some(BadMark::Grown),
            _ => None,
        }
    }

    pub fn is_bad(self) -> bool {
        self != BadMark::Good
    }
}

/// Persistent facts about one erase block.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct BlockMeta {
    /// Erases started on this block (including interrupted and failed ones): physical wear.
    pub erase_count: u32,
    pub bad_mark: BadMark,
    /// Highest page index programmed (or attempted) since the last complete erase.
    pub last_programmed_page_index: Option<u32>,
    /// The last erase did not complete; programs are refused until a complete erase.
    pub erase_incomplete: bool,
}

/// Persistent state of all chips of an array.
///
/// Addresses passed in must be in range: the simulator validates them first, and stores may
/// panic on out-of-range addresses as a broken invariant. I/O failures of a backing file are
/// reported as `NandError::Image`.
pub trait PageStore {
    fn geometry(&self) -> Geometry;
    fn chip_count(&self) -> u32;

    fn block_meta(&self, block: BlockAddress) -> Result<BlockMeta, NandError>;
    fn set_block_meta(&mut self, block: BlockAddress, meta: &BlockMeta) -> Result<(), NandError>;

    fn page_meta(&self, page: PageAddress) -> Result<PageMeta, NandError>;
    fn set_page_meta(&mut self, page: PageAddress, meta: &PageMeta) -> Result<(), NandError>;

    /// Stores the page's contents (data and spare) as programmed.
    fn write_contents(&mut self, page: PageAddress, data: &[u8], spare: &[u8]) -> Result<(), NandError>;

    /// Reads the stored contents into `data` and `spare`. Pages never written read as 0xFF.
    fn read_contents(&self, page: PageAddress, data: &mut [u8], spare: &mut [u8]) -> Result<(), NandError>;

    /// Starts reading the stored contents so that they can be collected without the
    /// simulator's lock (a backend with its own I/O threads); `None`, the default, means
    /// `read_contents` is called instead, under the lock.
    fn start_read_contents(&self, page: PageAddress) -> Option<ContentsFetch> {
        let _ = page;
        None
    }

    /// `start_read_contents` for several pages: `pages` pairs each page with its position in
    /// a `Flash::read_pages` batch, and the fetch fills those positions of the batch's data
    /// buffers and spares. `None`, the default, means the pages are read one by one.
    fn start_read_contents_many(&self, pages: &[(usize, PageAddress)]) -> Option<ContentsBatchFetch> {
        let _ = pages;
        None
    }

    /// Returns every page of the block to pristine (erased, no flips) and may drop the stored
    /// contents. Block metadata is not touched.
    fn reset_block_pages(&mut self, block: BlockAddress) -> Result<(), NandError> {
        let geometry = self.geometry();
        for page_index in 0..geometry.pages_per_block {
            let page = PageAddress { chip: block.chip, block: block.block, page_index };
            self.set_page_meta(page, &PageMeta::default())?;
        }
        Ok(())
    }

    /// Makes all changes durable (a no-op for RAM).
    fn flush(&mut self) -> Result<(), NandError> {
        Ok(())
    }

    /// `Flash::begin_flush`: starts `flush`, finished by the returned wait. The default
    /// flushes at once.
    fn begin_flush(&mut self) -> Result<fsoc_flash::FlushWait, NandError> {
        self.flush()?;
        Ok(fsoc_flash::FlushWait::done())
    }

    /// `Flash::write_barrier`: every write issued so far is executed before any later one
    /// (stores that write synchronously need nothing).
    fn write_barrier(&mut self) -> Result<(), NandError> {
        Ok(())
    }
}

/// Collects the contents of a read started by `PageStore::start_read_contents` into
/// `(data, spare)`.
pub type ContentsFetch = alloc::boxed::Box<dyn FnOnce(&mut [u8], &mut [u8]) -> Result<(), NandError> + Send>;

/// Collects the contents of reads started by `PageStore::start_read_contents_many` into a
/// batch's data buffers and spares (positions as given when started).
pub type ContentsBatchFetch =
    alloc::boxed::Box<dyn FnOnce(&mut [&mut [u8]], &mut [u8]) -> Result<(), NandError> + Send>;

/// One page of a `RamStore` that differs from pristine.
#[derive(Clone, Debug, PartialEq, Eq)]
struct RamPage {
    meta: PageMeta,
    /// Data then spare; empty when no contents were written (e.g. flips on an erased page).
    contents: Vec<u8>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct RamBlock {
    meta: BlockMeta,
    /// Empty until a page of the block is touched, then one slot per page.
    pages: Vec<Option<Box<RamPage>>>,
}

/// In-memory `PageStore`. Memory is proportional to the pages holding contents, not to the
/// device size; cloning it snapshots the whole device.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RamStore {
    geometry: Geometry,
    chip_count: u32,
    /// Chip-major: block `b` of chip `c` is at `c * block_count + b`.
    blocks: Vec<RamBlock>,
}

impl RamStore {
    /// A store with every page erased and every block good with erase count 0.
    pub fn new(geometry: Geometry, chip_count: u32) -> Self {
        let block_slots = chip_count as usize * geometry.block_count as usize;
        RamStore { geometry, chip_count, blocks: vec![RamBlock::default(); block_slots] }
    }

    /// The slot of `block` in `blocks`, or `OutOfRange` (the simulator checks addresses first).
    fn block_slot(&self, block: BlockAddress) -> Result<usize, NandError> {
        let out_of_range = |what, value: u32, limit: u32| NandError::OutOfRange {
            what,
            value: u64::from(value),
            limit: u64::from(limit),
        };
        if block.chip.0 >= self.chip_count {
            return Err(out_of_range("chip", block.chip.0, self.chip_count));
        }
        if block.block.0 >= self.geometry.block_count {
            return Err(out_of_range("block", block.block.0, self.geometry.block_count));
        }
        Ok(block.chip.0 as usize * self.geometry.block_count as usize + block.block.0 as usize)
    }

    fn check_page_index(&self, page: PageAddress) -> Result<usize, NandError> {
        if page.page_index >= self.geometry.pages_per_block {
            return Err(NandError::OutOfRange {
                what: "page",
                value: u64::from(page.page_index),
                limit: u64::from(self.geometry.pages_per_block),
            });
        }
        Ok(page.page_index as usize)
    }

    /// The error for a slot `new` allocated but cannot be found (a broken store).
    fn no_slot(&self, slot: usize) -> NandError {
        NandError::OutOfRange { what: "ram store slot", value: slot as u64, limit: self.blocks.len() as u64 }
    }

    fn block(&self, block: BlockAddress) -> Result<&RamBlock, NandError> {
        let slot = self.block_slot(block)?;
        self.blocks.get(slot).ok_or_else(|| self.no_slot(slot))
    }

    fn block_mut(&mut self, block: BlockAddress) -> Result<&mut RamBlock, NandError> {
        let slot = self.block_slot(block)?;
        let missing = self.no_slot(slot);
        self.blocks.get_mut(slot).ok_or(missing)
    }

    fn page(&self, page: PageAddress) -> Result<Option<&RamPage>, NandError> {
        let page_index = self.check_page_index(page)?;
        Ok(self.block(page.block_address())?.pages.get(page_index).and_then(|slot| slot.as_deref()))
    }

    fn page_mut(&mut self, page: PageAddress) -> Result<&mut RamPage, NandError> {
        let page_index = self.check_page_index(page)?;
        let pages_per_block = self.geometry.pages_per_block;
        let block = self.block_mut(page.block_address())?;
        if block.pages.is_empty() {
            block.pages = vec![None; pages_per_block as usize];
        }
        // A touched block has one slot per page, and `page_index` was checked against that.
        let slot = block.pages.get_mut(page_index).ok_or(NandError::OutOfRange {
            what: "page",
            value: u64::from(page.page_index),
            limit: u64::from(pages_per_block),
        })?;
        Ok(slot.get_or_insert_with(|| Box::new(RamPage { meta: PageMeta::default(), contents: Vec::new() })))
    }

    /// Number of pages currently holding allocated contents (for memory-use tests).
    pub fn stored_page_count(&self) -> usize {
        self.blocks
            .iter()
            .flat_map(|block| block.pages.iter())
            .filter(|slot| slot.as_ref().is_some_and(|page| !page.contents.is_empty()))
            .count()
    }
}

impl PageStore for RamStore {
    fn geometry(&self) -> Geometry {
        self.geometry
    }

    fn chip_count(&self) -> u32 {
        self.chip_count
    }

    fn block_meta(&self, block: BlockAddress) -> Result<BlockMeta, NandError> {
        Ok(self.block(block)?.meta)
    }

    fn set_block_meta(&mut self, block: BlockAddress, meta: &BlockMeta) -> Result<(), NandError> {
        self.block_mut(block)?.meta = *meta;
        Ok(())
    }

    fn page_meta(&self, page: PageAddress) -> Result<PageMeta, NandError> {
        Ok(self.page(page)?.map(|stored| stored.meta).unwrap_or_default())
    }

    fn set_page_meta(&mut self, page: PageAddress, meta: &PageMeta) -> Result<(), NandError> {
        if meta.is_pristine() {
            // Dropping the slot frees the contents: an erased page costs nothing.
            if self.page(page)?.is_some() {
                let block = self.block_mut(page.block_address())?;
                if let Some(slot) = block.pages.get_mut(page.page_index as usize) {
                    *slot = None;
                }
            }
            return Ok(());
        }
        let stored = self.page_mut(page)?;
        stored.meta = *meta;
        if !meta.state.has_contents() {
            stored.contents = Vec::new();
        }
        Ok(())
    }

    fn write_contents(&mut self, page: PageAddress, data: &[u8], spare: &[u8]) -> Result<(), NandError> {
        let geometry = self.geometry;
        assert_eq!(data.len(), geometry.page_data_bytes as usize, "ram store: data size");
        assert_eq!(spare.len(), geometry.spare_bytes as usize, "ram store: spare size");
        let stored = self.page_mut(page)?;
        stored.contents.clear();
        stored.contents.extend_from_slice(data);
        stored.contents.extend_from_slice(spare);
        Ok(())
    }

    fn read_contents(&self, page: PageAddress, data: &mut [u8], spare: &mut [u8]) -> Result<(), NandError> {
        match self.page(page)?.filter(|stored| !stored.contents.is_empty()) {
            Some(stored) => {
                let (stored_data, stored_spare) = stored.contents.split_at(data.len().min(stored.contents.len()));
                data.copy_from_slice(stored_data);
                spare.copy_from_slice(stored_spare);
            }
            None => {
                data.fill(0xFF);
                spare.fill(0xFF);
            }
        }
        Ok(())
    }

    fn reset_block_pages(&mut self, block: BlockAddress) -> Result<(), NandError> {
        self.block_mut(block)?.pages = Vec::new();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Profile;

    // Checks that an untouched RAM store allocates no page buffers and that erasing a block
    // frees them again.
    #[test]
    fn ram_store_is_sparse() {
        let geometry = Profile::Slc.geometry(8192);
        let mut store = RamStore::new(geometry, 1);
        assert_eq!(store.stored_page_count(), 0);
        let page = PageAddress::new(0, 5, 0);
        let data = vec![0x5Au8; 2048];
        let spare = vec![0xA5u8; 64];
        store.write_contents(page, &data, &spare).expect("write");
        let meta = PageMeta { state: PageState::Programmed, ..PageMeta::default() };
        store.set_page_meta(page, &meta).expect("meta");
        assert_eq!(store.stored_page_count(), 1);
        let (mut read_data, mut read_spare) = (vec![0u8; 2048], vec![0u8; 64]);
        store.read_contents(page, &mut read_data, &mut read_spare).expect("read");
        assert_eq!((read_data, read_spare), (data, spare));
        store.reset_block_pages(page.block_address()).expect("reset");
        assert_eq!(store.stored_page_count(), 0);
        assert_eq!(store.page_meta(page).expect("meta"), PageMeta::default());
    }

    #[test]
    fn flips_are_deduplicated_and_overflow_sets_excess() {
        let mut meta = PageMeta::default();
        meta.add_flip(3);
        meta.add_flip(3);
        assert_eq!(meta.flips(), &[3]);
        for position in 10..40 {
            meta.add_flip(position);
        }
        assert_eq!(meta.flips().len(), PAGE_FLIPS_MAX);
        assert!(meta.excess_damage);
    }

    #[test]
    fn state_codes_round_trip() {
        for state in
            [PageState::Erased, PageState::Programmed, PageState::Torn, PageState::TornUnstable, PageState::Garbage]
        {
            assert_eq!(PageState::from_code(state.code()), Some(state));
        }
        for mark in [BadMark::Good, BadMark::Factory, BadMark::Grown] {
            assert_eq!(BadMark::from_code(mark.code()), Some(mark));
        }
        assert_eq!(PageState::from_code(9), None);
    }
}
