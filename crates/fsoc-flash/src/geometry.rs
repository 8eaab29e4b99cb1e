//! Chip geometry and latencies: the shape and timing every `Flash` reports.

use crate::Nanos;

/// Shape of one NAND chip.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Geometry {
    pub page_data_bytes: u32,
    pub spare_bytes: u32,
    pub pages_per_block: u32,
    pub block_count: u32,
}

impl Geometry {
    pub fn block_data_bytes(&self) -> u64 {
        u64::from(self.page_data_bytes) * u64::from(self.pages_per_block)
    }
    pub fn chip_data_bytes(&self) -> u64 {
        self.block_data_bytes() * u64::from(self.block_count)
    }
    pub fn page_count(&self) -> u64 {
        u64::from(self.pages_per_block) * u64::from(self.block_count)
    }
    /// Checks the relations every geometry must satisfy; returns a description of the first
    /// violated one.
    pub fn validate(&self) -> Result<(), &'static str> {
        if self.page_data_bytes < 512 || !self.page_data_bytes.is_multiple_of(512) {
            return Err("page_data_bytes must be a non-zero multiple of 512");
        }
        if self.page_data_bytes > 64 * 1024 {
            return Err("page_data_bytes must be at most 64 KiB");
        }
        if self.spare_bytes < 16 || self.spare_bytes > 4096 {
            return Err("spare_bytes must be within 16..=4096");
        }
        if self.pages_per_block < 2 || self.pages_per_block > 4096 {
            return Err("pages_per_block must be within 2..=4096");
        }
        if self.block_count < 4 || self.block_count > (1 << 24) {
            return Err("block_count must be within 4..=16777216");
        }
        Ok(())
    }
}

/// Per-operation latencies of a chip and its bus.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timing {
    pub read_latency_ns: Nanos,
    pub program_latency_ns: Nanos,
    pub erase_latency_ns: Nanos,
    /// Time to move one byte over the chip's bus (data and spare, both directions).
    /// Default 25 ns/byte: a 40 MB/s asynchronous ONFI 1.0 bus, as on small controllers.
    pub bus_ns_per_byte: Nanos,
}
