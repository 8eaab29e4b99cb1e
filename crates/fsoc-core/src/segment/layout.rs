//! Volume layout: how log addresses map onto (chip, block, page) and which segments are
//! reserved. A segment is a stripe: erase block `segment_index` on every chip; stripe page k
//! lives on chip `k mod p` at page `k / p` (docs/FORMAT.md, "Layout").

use fsoc_flash::{BlockAddress, Geometry, PageAddress};

use crate::address::LogAddress;

/// Segment 0 holds the superblock copies (page 0 and 1 of block 0 on every chip).
pub const SUPERBLOCK_SEGMENT: u32 = 0;
/// Three metaroot areas, used in rotation (docs/DESIGN.md explains why three).
pub const METAROOT_AREA_COUNT: u32 = 3;
pub const METAROOT_SEGMENTS: [u32; METAROOT_AREA_COUNT as usize] = [1, 2, 3];
/// The first segment of the copy-on-write log.
pub const FIRST_LOG_SEGMENT: u32 = 4;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    pub geometry: Geometry,
    pub chip_count: u32,
}

impl Layout {
    pub fn new(geometry: Geometry, chip_count: u32) -> Self {
        assert!(chip_count >= 1, "an array has at least one chip");
        Layout { geometry, chip_count }
    }

    pub fn page_size_bytes(&self) -> usize {
        self.geometry.page_data_bytes as usize
    }

    pub fn spare_size_bytes(&self) -> usize {
        self.geometry.spare_bytes as usize
    }

    /// Pages in one segment (one block on each chip).
    pub fn pages_per_segment(&self) -> u32 {
        self.geometry.pages_per_block * self.chip_count
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

    /// Physical page of a log address: stripe page k goes to chip k mod p.
    pub fn physical(&self, address: LogAddress) -> PageAddress {
        assert!(self.contains(address), "log address {address:?} outside the volume");
        let segment_index = self.segment_of(address);
        let page_in_segment = self.page_in_segment(address);
        PageAddress::new(page_in_segment % self.chip_count, segment_index, page_in_segment / self.chip_count)
    }

    pub fn blocks_of_segment(&self, segment_index: u32) -> impl Iterator<Item = BlockAddress> {
        (0..self.chip_count).map(move |chip| BlockAddress::new(chip, segment_index))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
