//! Chip geometry and latency profiles (seed 001 Table 1, its 8 KiB-page MLC platform, and a
//! 16 KiB-page MLC of the kind current raw NAND offers).

use crate::Nanos;
pub use fsoc_flash::{Geometry, Timing};

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
    /// A 16 KiB-page MLC with 4 MiB erase blocks (256 pages) and 1,280 spare bytes per page,
    /// as Kioxia's (Toshiba's) TC58TEG5DCLTA00: read 56 us, program 1575 us, erase 3 ms
    /// (sources at `timing`).
    Mlc16k,
}

pub const BUS_NS_PER_BYTE_DEFAULT: Nanos = 25;

impl Profile {
    pub const ALL: [Profile; 5] = [Profile::Slc, Profile::Mlc, Profile::Tlc, Profile::Mlc8k, Profile::Mlc16k];

    pub fn name(self) -> &'static str {
        match self {
            Profile::Slc => "slc",
            Profile::Mlc => "mlc",
            Profile::Tlc => "tlc",
            Profile::Mlc8k => "mlc8k",
            Profile::Mlc16k => "mlc16k",
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
            Profile::Mlc16k => 5,
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
            // Mlc16k: the mean of the lower- and upper-page times measured on Micron's L95B, a
            // 16 KiB-page MLC (FEMU, MoatLab/FEMU hw/femu/nand/nand.h, "Profiled from Micron
            // L95B MLC NAND Flash chips used in CNEX OCSSD": read 48 / 64 us, program
            // 850 / 2300 us, erase 3 ms). FIXME: these are measurements, not a datasheet's
            // typical values; replace them with the AC-characteristics table (tR, tPROG,
            // tBERS) of the TC58TEG5DCLTA00 datasheet, which was not available when this
            // profile was added.
            Profile::Mlc16k => (56, 1_575, 3_000),
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
    /// 1/32 of the page (64, 128, 256 bytes) except the 8 KiB MLC's 448 bytes. The 16 KiB MLC
    /// is Kioxia's TC58TEG5DCLTA00 (the NextThing C.H.I.P.'s chip): 16,384 + 1,280 bytes per
    /// page, 256 pages (4 MiB) per block, as Linux's raw-NAND ID table and board
    /// configurations for it give (1,024 blocks per die; here any number).
    pub fn geometry(self, block_count: u32) -> Geometry {
        let (page_data_bytes, spare_bytes, pages_per_block) = match self {
            Profile::Slc | Profile::Mlc => (2048, 64, 64),
            Profile::Tlc => (4096, 128, 128),
            Profile::Mlc8k => (8192, 448, 256),
            Profile::Mlc16k => (16_384, 1_280, 256),
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
            // 1x-nm MLC; FIXME: the datasheet's rating (see `timing`).
            Profile::Mlc16k => 3_000,
        }
    }

    /// Distance, in pages, between an upper page and the lower page it shares cells with
    /// (0 = no pairing, as on SLC). Used by the paired-page power-cut hazard.
    pub fn paired_page_distance(self) -> u32 {
        match self {
            Profile::Slc => 0,
            Profile::Mlc | Profile::Mlc8k => 2,
            // TC58TEG5DCLTA00 "uses a stride of 3 between its lower and upper page" (Linux
            // nand_toshiba.c, dist3 pairing scheme, 2020).
            Profile::Tlc | Profile::Mlc16k => 3,
        }
    }
}
