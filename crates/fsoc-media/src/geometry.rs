//! Chip geometry and latency profiles (seed 001 Table 1 and its 8 KiB-page MLC platform).

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

/// Named latency/geometry profiles.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Profile {
    /// Seed 001 Table 1: 2 KiB pages, read 25 us, program 200 us, erase 1.5 ms.
    Slc,
    /// Seed 001 Table 1: 2 KiB pages, read 25 us, program 600 us, erase 2 ms.
    Mlc,
    /// Seed 001 Table 1: 4 KiB pages, read 75 us, program 1300 us, erase 4 ms.
    Tlc,
    /// Seed 001's FPGA platform chip: 8 KiB pages, 256 pages/block, read 75 us,
    /// program 1300 us, erase 3.8 ms.
    Mlc8k,
}

pub const BUS_NS_PER_BYTE_DEFAULT: Nanos = 25;

impl Profile {
    pub const ALL: [Profile; 4] = [Profile::Slc, Profile::Mlc, Profile::Tlc, Profile::Mlc8k];

    pub fn name(self) -> &'static str {
        match self {
            Profile::Slc => "slc",
            Profile::Mlc => "mlc",
            Profile::Tlc => "tlc",
            Profile::Mlc8k => "mlc8k",
        }
    }

    pub fn from_name(name: &str) -> Option<Profile> {
        Profile::ALL.into_iter().find(|p| p.name() == name)
    }

    /// Stable numeric code used in image headers (docs/FORMAT.md).
    pub fn code(self) -> u32 {
        match self {
            Profile::Slc => 1,
            Profile::Mlc => 2,
            Profile::Tlc => 3,
            Profile::Mlc8k => 4,
        }
    }

    pub fn from_code(code: u32) -> Option<Profile> {
        Profile::ALL.into_iter().find(|p| p.code() == code)
    }

    pub fn timing(self) -> Timing {
        let (read_us, program_us, erase_us) = match self {
            Profile::Slc => (25, 200, 1_500),
            Profile::Mlc => (25, 600, 2_000),
            Profile::Tlc => (75, 1_300, 4_000),
            Profile::Mlc8k => (75, 1_300, 3_800),
        };
        Timing {
            read_latency_ns: read_us * 1_000,
            program_latency_ns: program_us * 1_000,
            erase_latency_ns: erase_us * 1_000,
            bus_ns_per_byte: BUS_NS_PER_BYTE_DEFAULT,
        }
    }

    /// Geometry with the profile's page size and the given number of blocks. Pages per block
    /// and spare sizes are the usual ones for each cell type: 64 pages (SLC/MLC 2 KiB),
    /// 128 pages (TLC 4 KiB), 256 pages (the 8 KiB MLC of seed 001's platform); spare is
    /// 1/32 of the page (64, 128, 256 bytes) except the 8 KiB MLC's 448 bytes.
    pub fn geometry(self, block_count: u32) -> Geometry {
        let (page_data_bytes, spare_bytes, pages_per_block) = match self {
            Profile::Slc | Profile::Mlc => (2048, 64, 64),
            Profile::Tlc => (4096, 128, 128),
            Profile::Mlc8k => (8192, 448, 256),
        };
        Geometry { page_data_bytes, spare_bytes, pages_per_block, block_count }
    }

    /// Rated program/erase cycles per block (documented defaults: typical datasheet ratings).
    pub fn endurance_cycles(self) -> u32 {
        match self {
            Profile::Slc => 100_000,
            Profile::Mlc => 10_000,
            Profile::Tlc => 3_000,
            Profile::Mlc8k => 5_000,
        }
    }

    /// Distance, in pages, between an upper page and the lower page it shares cells with
    /// (0 = no pairing, as on SLC). Used by the paired-page power-cut hazard.
    pub fn paired_page_distance(self) -> u32 {
        match self {
            Profile::Slc => 0,
            Profile::Mlc | Profile::Mlc8k => 2,
            Profile::Tlc => 3,
        }
    }
}
