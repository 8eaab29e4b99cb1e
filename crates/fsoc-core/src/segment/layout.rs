//! Volume layout: how log addresses map onto (chip, block, page) and which segments are
//! reserved. A segment is a stripe: erase block `segment_index` on every chip; stripe page k
//! lives on chip `k mod p` at page `k / p` (docs/FORMAT.md, "Layout").
//!
//! Redundancy (format version 7) changes two mappings, nothing above the device sees it:
//! - a metaroot area's page `i` is the pair of stripe pages `2i` and `2i + 1` (two chips);
//! - with parity, page `k` of a log segment is data slot `k mod (p - 1)` of row
//!   `r = k div (p - 1)`, the row being page `r` of the segment's block on every chip; chip
//!   `(segment + r) mod p` holds the row's parity page and the data slots fill the other chips
//!   in ascending order. A log segment then has `(p - 1) × pages_per_block` addresses.
//!
//! Mirror-meta (format version 8) changes no mapping: the log writes every tree node and
//! segment-table page twice, at an even address `a` of a log segment and at `a + 1`, which is
//! the next stripe page and so on the next chip (`mirror_copy`; `SegmentLog` keeps the pairs).

use fsoc_flash::{BlockAddress, Geometry, PageAddress};

use crate::address::LogAddress;

/// Segment 0 holds the superblock copies (page 0 and 1 of block 0 on every chip).
pub const SUPERBLOCK_SEGMENT: u32 = 0;
/// Three metaroot areas, used in rotation (docs/DESIGN.md explains why three).
pub const METAROOT_AREA_COUNT: u32 = 3;
pub const METAROOT_SEGMENTS: [u32; METAROOT_AREA_COUNT as usize] = [1, 2, 3];
/// The first segment of the copy-on-write log.
pub const FIRST_LOG_SEGMENT: u32 = 4;
/// Format version 9 on: the superblock's two homes, block 0 and block 4 of every chip, which
/// take its generations in turn (docs/FORMAT.md, "Superblock generations"). Segment 4 is then
/// retired in the segment table from format on: the log never takes it.
pub const SUPERBLOCK_HOMES: [u32; 2] = [SUPERBLOCK_SEGMENT, FIRST_LOG_SEGMENT];

/// What a volume stores twice or protects with parity, so that it survives the loss of one
/// chip (superblock byte 64 from format version 7; docs/DESIGN.md, "Redundancy across chips").
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Redundancy {
    /// Nothing beyond the superblock's copy on every chip.
    #[default]
    None,
    /// Metaroots, tree nodes and segment-table pages written on two chips (the superblock is
    /// on every chip already); file data once. Format version 8.
    MirrorMeta,
    /// Metaroots on two chips and one parity page in every row of every log segment.
    Parity,
}

impl Redundancy {
    /// The superblock's code.
    pub fn code(self) -> u32 {
        match self {
            Redundancy::None => 0,
            Redundancy::MirrorMeta => 1,
            Redundancy::Parity => 2,
        }
    }

    pub fn from_code(code: u32) -> Option<Redundancy> {
        match code {
            0 => Some(Redundancy::None),
            1 => Some(Redundancy::MirrorMeta),
            2 => Some(Redundancy::Parity),
            _ => None,
        }
    }

    /// The name `fsoc mkfs --redundancy` takes and `fsoc info` prints.
    pub fn name(self) -> &'static str {
        match self {
            Redundancy::None => "none",
            Redundancy::MirrorMeta => "mirror-meta",
            Redundancy::Parity => "parity",
        }
    }

    pub fn from_name(name: &str) -> Option<Redundancy> {
        [Redundancy::None, Redundancy::MirrorMeta, Redundancy::Parity].into_iter().find(|mode| mode.name() == name)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    pub geometry: Geometry,
    pub chip_count: u32,
    pub redundancy: Redundancy,
    /// The segments of the three metaroot areas (the superblock's; 1, 2, 3 until one moves).
    pub metaroot_areas: [u32; 3],
}

impl Layout {
    pub fn new(geometry: Geometry, chip_count: u32) -> Self {
        assert!(chip_count >= 1, "an array has at least one chip");
        Layout { geometry, chip_count, redundancy: Redundancy::None, metaroot_areas: METAROOT_SEGMENTS }
    }

    /// The same array with `redundancy` (which needs at least two chips: asserted).
    pub fn with_redundancy(self, redundancy: Redundancy) -> Self {
        assert!(
            redundancy == Redundancy::None || self.chip_count >= 2,
            "redundancy across chips needs at least two chips"
        );
        Layout { redundancy, ..self }
    }

    /// The same array with its metaroot areas in `areas`.
    pub fn with_metaroot_areas(self, areas: [u32; 3]) -> Self {
        Layout { metaroot_areas: areas, ..self }
    }

    /// Whether `segment_index` is one of the metaroot areas.
    pub fn is_metaroot_area(&self, segment_index: u32) -> bool {
        self.metaroot_areas.contains(&segment_index)
    }

    /// Whether the log carries a parity page in every row.
    pub fn has_parity(&self) -> bool {
        self.redundancy == Redundancy::Parity
    }

    /// Whether metaroots are written on two chips.
    pub fn has_metaroot_twins(&self) -> bool {
        self.redundancy != Redundancy::None
    }

    /// Whether the log writes tree nodes and segment-table pages twice (mirror-meta).
    pub fn mirrors_metadata(&self) -> bool {
        self.redundancy == Redundancy::MirrorMeta
    }

    /// Whether a log segment with `masked` blocks bad can go on with the others (the chip mask,
    /// format version 8): not with parity (a row needs every chip), not on one chip, not with
    /// mirror-meta on two (no two good chips left for a pair), and not past
    /// `MASKED_BLOCKS_MAX`. Otherwise the segment is retired whole.
    pub fn can_mask_blocks(&self, masked: u32) -> bool {
        let good_chips = self.chip_count.saturating_sub(masked);
        let good_needed = if self.mirrors_metadata() { 2 } else { 1 };
        !self.has_parity() && masked <= crate::segment::segment_table::MASKED_BLOCKS_MAX && good_chips >= good_needed
    }

    /// Flash pages one tree node or segment-table page takes in the log: 2 with mirror-meta.
    pub fn metadata_copies(&self) -> u64 {
        if self.mirrors_metadata() {
            2
        } else {
            1
        }
    }

    /// Where the second copy of a mirrored page at `address` would be (mirror-meta): the next
    /// address, for an even address of a log segment (first copies are at even addresses, so
    /// a pair never straddles a segment or shares a chip). Whether `address` holds a mirrored
    /// page at all, only the copy's spare tag says (`PageTag::NodeCopy`, `SegmentTableCopy`).
    pub fn mirror_copy(&self, address: LogAddress) -> Option<LogAddress> {
        let segment_index = self.segment_of(address);
        let candidate = self.mirrors_metadata()
            && self.contains(address)
            && segment_index >= FIRST_LOG_SEGMENT
            && !self.is_metaroot_area(segment_index)
            && self.page_in_segment(address).is_multiple_of(2);
        candidate.then(|| LogAddress(address.0 + 1))
    }

    pub fn page_size_bytes(&self) -> usize {
        self.geometry.page_data_bytes as usize
    }

    pub fn spare_size_bytes(&self) -> usize {
        self.geometry.spare_bytes as usize
    }

    /// Addresses in one segment: one block on each chip, less the parity pages with parity.
    pub fn pages_per_segment(&self) -> u32 {
        if self.has_parity() {
            self.geometry.pages_per_block * (self.chip_count - 1)
        } else {
            self.physical_pages_per_segment()
        }
    }

    /// Flash pages in one segment: one block on each chip.
    pub fn physical_pages_per_segment(&self) -> u32 {
        self.geometry.pages_per_block * self.chip_count
    }

    /// Records a metaroot area holds: one per page, or one per pair of pages with twins.
    pub fn metaroot_area_pages(&self) -> u32 {
        if self.has_metaroot_twins() {
            self.physical_pages_per_segment() / 2
        } else {
            self.pages_per_segment()
        }
    }

    pub fn segment_count(&self) -> u32 {
        self.geometry.block_count
    }

    pub fn log_segment_count(&self) -> u32 {
        self.segment_count().saturating_sub(FIRST_LOG_SEGMENT)
    }

    pub fn address(&self, segment_index: u32, page_in_segment: u32) -> LogAddress {
        assert!(segment_index < self.segment_count(), "segment {segment_index} out of range");
        assert!(page_in_segment < self.pages_per_segment(), "page {page_in_segment} out of range");
        LogAddress(segment_index * self.pages_per_segment() + page_in_segment)
    }

    /// Whether `address` names a page of this volume (untrusted addresses come from flash).
    pub fn contains(&self, address: LogAddress) -> bool {
        u64::from(address.0) < u64::from(self.segment_count()) * u64::from(self.pages_per_segment())
    }

    pub fn segment_of(&self, address: LogAddress) -> u32 {
        address.0 / self.pages_per_segment()
    }

    pub fn page_in_segment(&self, address: LogAddress) -> u32 {
        address.0 % self.pages_per_segment()
    }

    /// Stripe page `k` of a segment in the plain mapping: chip k mod p, page k / p.
    pub fn stripe_page(&self, segment_index: u32, k: u32) -> PageAddress {
        PageAddress::new(k % self.chip_count, segment_index, k / self.chip_count)
    }

    /// Physical page of a log address: stripe page k goes to chip k mod p, except for the two
    /// mappings redundancy changes (module documentation). For a metaroot with a twin, the
    /// first copy.
    pub fn physical(&self, address: LogAddress) -> PageAddress {
        assert!(self.contains(address), "log address {address:?} outside the volume");
        let segment_index = self.segment_of(address);
        let page_in_segment = self.page_in_segment(address);
        if self.is_parity_segment(segment_index) {
            let data_slots = self.chip_count - 1;
            let row = page_in_segment / data_slots;
            let slot = page_in_segment % data_slots;
            let chip = if slot < self.parity_chip(segment_index, row) { slot } else { slot + 1 };
            return PageAddress::new(chip, segment_index, row);
        }
        if self.has_metaroot_twins() && self.is_metaroot_area(segment_index) {
            return self.stripe_page(segment_index, 2 * page_in_segment);
        }
        self.stripe_page(segment_index, page_in_segment)
    }

    /// The second copy of a metaroot page (volumes with twins), on the next chip.
    pub fn twin(&self, address: LogAddress) -> Option<PageAddress> {
        let segment_index = self.segment_of(address);
        (self.has_metaroot_twins() && self.contains(address) && self.is_metaroot_area(segment_index))
            .then(|| self.stripe_page(segment_index, 2 * self.page_in_segment(address) + 1))
    }

    /// Whether the segment's rows carry parity.
    pub fn is_parity_segment(&self, segment_index: u32) -> bool {
        self.has_parity()
            && segment_index >= FIRST_LOG_SEGMENT
            && segment_index < self.segment_count()
            && !self.is_metaroot_area(segment_index)
    }

    /// The chip that holds the parity page of `row` of a log segment (rotating).
    pub fn parity_chip(&self, segment_index: u32, row: u32) -> u32 {
        (segment_index % self.chip_count + row % self.chip_count) % self.chip_count
    }

    /// The first address of the row after the one `page_in_segment` is in (with parity);
    /// `page_in_segment` itself without.
    pub fn next_row_start(&self, page_in_segment: u32) -> u32 {
        if !self.has_parity() {
            return page_in_segment;
        }
        page_in_segment.div_ceil(self.chip_count - 1) * (self.chip_count - 1)
    }

    pub fn blocks_of_segment(&self, segment_index: u32) -> impl Iterator<Item = BlockAddress> {
        (0..self.chip_count).map(move |chip| BlockAddress::new(chip, segment_index))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parity_rows_rotate_and_skip_the_parity_chip() {
        let geometry = Geometry { page_data_bytes: 2048, spare_bytes: 64, pages_per_block: 8, block_count: 16 };
        let layout = Layout::new(geometry, 4).with_redundancy(Redundancy::Parity);
        assert_eq!(layout.pages_per_segment(), 24);
        assert_eq!(layout.metaroot_area_pages(), 16);
        // Segment 5, row 0: parity on chip 1; data slots on chips 0, 2, 3.
        let chips: alloc::vec::Vec<_> = (0..3).map(|k| layout.physical(layout.address(5, k))).collect();
        assert_eq!(chips, [PageAddress::new(0, 5, 0), PageAddress::new(2, 5, 0), PageAddress::new(3, 5, 0)]);
        // Row 1: parity on chip 2.
        let chips: alloc::vec::Vec<_> = (3..6).map(|k| layout.physical(layout.address(5, k))).collect();
        assert_eq!(chips, [PageAddress::new(0, 5, 1), PageAddress::new(1, 5, 1), PageAddress::new(3, 5, 1)]);
        // Every physical page of a log segment is a data slot or its row's parity, once.
        let mut seen = alloc::collections::BTreeSet::new();
        for k in 0..layout.pages_per_segment() {
            assert!(seen.insert(layout.physical(layout.address(6, k))));
        }
        for row in 0..8 {
            assert!(seen.insert(PageAddress::new(layout.parity_chip(6, row), 6, row)));
        }
        assert_eq!(seen.len(), 32);
        // Metaroot twins sit on neighbouring chips; the superblock keeps its plain mapping.
        let metaroot = layout.address(1, 3);
        assert_eq!(layout.physical(metaroot), PageAddress::new(2, 1, 1));
        assert_eq!(layout.twin(metaroot), Some(PageAddress::new(3, 1, 1)));
        assert_eq!(layout.physical(layout.address(0, 5)), PageAddress::new(1, 0, 1));
        assert_eq!(layout.twin(layout.address(0, 5)), None);
        assert_eq!(layout.next_row_start(4), 6);
        assert_eq!(layout.next_row_start(6), 6);
    }

    #[test]
    fn stripe_pages_round_robin_over_chips() {
        let geometry = Geometry { page_data_bytes: 2048, spare_bytes: 64, pages_per_block: 64, block_count: 16 };
        let layout = Layout::new(geometry, 4);
        assert_eq!(layout.pages_per_segment(), 256);
        let address = layout.address(5, 6);
        assert_eq!(layout.physical(address), PageAddress::new(2, 5, 1));
        assert_eq!(layout.segment_of(address), 5);
        assert_eq!(layout.page_in_segment(address), 6);
    }
}
