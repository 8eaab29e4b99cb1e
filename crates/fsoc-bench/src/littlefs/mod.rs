//! The littlefs peer (C littlefs 2.9, from the `littlefs2` crate) on the same `SimFlash` as
//! fsoc, and the storage adapter both littlefs targets share.
//!
//! Mapping: one littlefs block is one NAND erase block of chip 0 (these benchmarks use one
//! chip); read size = prog size = one page, so every littlefs read is whole pages and every
//! prog is exactly one page program, with no read-modify-write. littlefs programs a block's
//! pages in ascending order after erasing it, which is what NAND needs; the simulator enforces
//! that rule on its own, and any violation surfaces as a `BenchError::Littlefs` carrying the
//! `NandError`, never silently.
//!
//! Two targets: `LittlefsTarget` (`raw`) drives littlefs through the crate's C bindings
//! (`littlefs2::ll`) so every `lfs_config` field can be set, including `metadata_max`, which
//! the crate's safe API leaves at its default; `LittlefsCrateTarget` (`crate_api`) uses the
//! crate's safe `Filesystem` API with its fixed defaults and serves as a cross-check.
//!
//! Invariants: the storage's clock only moves forward, to each operation's completion time
//! (one chip, operations strictly sequential as littlefs issues them); the first NAND error
//! is kept until the harness collects it.

pub mod crate_api;
pub mod raw;

pub use crate_api::LittlefsCrateTarget;
pub use raw::LittlefsTarget;

use fsoc_media::{BlockAddress, Flash, NandError, Nanos, PageAddress, ReadStatus, SimFlash};
use littlefs2::consts::{U2048, U64};
use littlefs2::driver::Storage;
use littlefs2::io::{Error as LfsError, Result as LfsResult};

use crate::target::BenchError;

/// Page size of the profiles this adapter supports (SLC and MLC of seed 001 Table 1).
pub const PAGE_SIZE_BYTES: usize = 2048;
pub const PAGES_PER_BLOCK: usize = 64;
pub const BLOCK_SIZE_BYTES: usize = PAGE_SIZE_BYTES * PAGES_PER_BLOCK;
/// littlefs2's `Storage` takes the block count as a compile-time constant; the benchmark
/// device (one 512 MiB MLC chip) has it.
pub const BLOCK_COUNT: usize = 4096;
/// littlefs's limit on custom attributes, which also caps inline files (`LFS_ATTR_MAX`).
pub const ATTR_BYTES_MAX: u32 = 1022;

/// The `lfs_config` tunables the benchmark sets (the geometry fields follow the device).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LittlefsConfig {
    /// Read cache, prog cache and per-file cache, each; a multiple of the page size dividing
    /// the block size.
    pub cache_size_bytes: u32,
    /// Lookahead bitmap bytes (8 blocks per byte).
    pub lookahead_size_bytes: u32,
    /// Erases of a metadata pair before littlefs relocates it; -1 disables that wear levelling.
    pub block_cycles: i32,
    /// Bytes of each metadata block littlefs uses before compacting; 0 means the block size.
    pub metadata_max_bytes: u32,
    /// Largest file kept inline in its directory's metadata; 0 means littlefs's default
    /// (min(cache size, 1022, metadata_max / 8)).
    pub inline_max_bytes: u32,
    /// On-disk version littlefs writes; 0 means the newest it knows (2.1).
    pub disk_version: u32,
}

impl LittlefsConfig {
    /// What the `littlefs2` crate's safe API uses for `NandStorage` (`LittlefsCrateTarget`).
    pub const CRATE_DEFAULTS: LittlefsConfig = LittlefsConfig {
        cache_size_bytes: PAGE_SIZE_BYTES as u32,
        lookahead_size_bytes: (BLOCK_COUNT / 8) as u32,
        block_cycles: CRATE_BLOCK_CYCLES as i32,
        metadata_max_bytes: 0,
        inline_max_bytes: 0,
        disk_version: littlefs2::DISK_VERSION.major() as u32 * 0x1_0000 + littlefs2::DISK_VERSION.minor() as u32,
    };

    /// The configuration the benchmarks use: the fastest littlefs found for this geometry by
    /// `examples/littlefs_sweep.rs` on the full fsio workload (seed 1, simulated seconds for
    /// all 5985 operations, cache 2 KiB): metadata_max 128 KiB (default) 428 s, 32 KiB 350 s,
    /// 16 KiB 366 s, 8 KiB 238 s, 6 KiB 255 s, 4 KiB 134 s, 2 KiB runs out of space; an
    /// 8 KiB cache was slower at every metadata_max; block_cycles -1 and 1000 did the same.
    ///
    /// - cache = one page: littlefs reads and programs whole pages anyway, and a larger cache
    ///   only prefetches pages it may not need (each costs a page read here).
    /// - lookahead covers all 4096 blocks, so the allocator scans the tree once per pass over
    ///   the device, the fewest scans possible.
    /// - block_cycles = 1000: the top of littlefs's suggested 100..=1000, relocating metadata
    ///   least while keeping the wear levelling a NAND device needs.
    /// - metadata_max = 4 KiB (two pages): with 128 KiB blocks each commit is padded to a
    ///   2 KiB page, and fetching or compacting a metadata block reads its whole log, so
    ///   small metadata logs are cheaper; littlefs's documentation suggests 2–8 KiB for
    ///   128 KiB blocks. It also caps inline files at 512 bytes (metadata_max / 8).
    pub const BENCHMARK: LittlefsConfig = LittlefsConfig {
        cache_size_bytes: PAGE_SIZE_BYTES as u32,
        lookahead_size_bytes: (BLOCK_COUNT / 8) as u32,
        block_cycles: 1000,
        metadata_max_bytes: 4 * 1024,
        inline_max_bytes: 0,
        disk_version: 0,
    };

    /// The inline limit littlefs derives from these settings.
    pub fn inline_bytes_max(&self) -> u32 {
        if self.inline_max_bytes != 0 {
            return self.inline_max_bytes;
        }
        let metadata_bytes =
            if self.metadata_max_bytes == 0 { BLOCK_SIZE_BYTES as u32 } else { self.metadata_max_bytes };
        self.cache_size_bytes.min(ATTR_BYTES_MAX).min(metadata_bytes / 8)
    }

    /// Checks the relations littlefs asserts (its asserts are compiled out here).
    pub fn validate(&self) -> Result<(), String> {
        let page = PAGE_SIZE_BYTES as u32;
        let block = BLOCK_SIZE_BYTES as u32;
        if self.cache_size_bytes == 0
            || !self.cache_size_bytes.is_multiple_of(page)
            || !block.is_multiple_of(self.cache_size_bytes)
        {
            return Err(format!("cache size {} must be pages dividing the block", self.cache_size_bytes));
        }
        if self.lookahead_size_bytes == 0 || !self.lookahead_size_bytes.is_multiple_of(8) {
            return Err(format!("lookahead size {} must be a multiple of 8", self.lookahead_size_bytes));
        }
        if self.block_cycles == 0 || self.block_cycles < -1 {
            return Err(format!("block_cycles {} must be positive or -1", self.block_cycles));
        }
        if self.metadata_max_bytes > block || !self.metadata_max_bytes.is_multiple_of(page) {
            return Err(format!("metadata_max {} must be whole pages within a block", self.metadata_max_bytes));
        }
        if self.inline_max_bytes > self.cache_size_bytes.min(ATTR_BYTES_MAX) {
            return Err(format!("inline_max {} exceeds the cache size or 1022", self.inline_max_bytes));
        }
        Ok(())
    }

    pub fn to_json(&self, implementation: &str) -> serde_json::Value {
        serde_json::json!({
            "implementation": implementation,
            "read_size_bytes": PAGE_SIZE_BYTES,
            "prog_size_bytes": PAGE_SIZE_BYTES,
            "block_size_bytes": BLOCK_SIZE_BYTES,
            "block_count": BLOCK_COUNT,
            "cache_size_bytes": self.cache_size_bytes,
            "lookahead_size_bytes": self.lookahead_size_bytes,
            "block_cycles": self.block_cycles,
            "metadata_max_bytes": if self.metadata_max_bytes == 0 { BLOCK_SIZE_BYTES as u32 } else { self.metadata_max_bytes },
            "inline_max_bytes": self.inline_bytes_max(),
            "name_max_bytes": 255,
            // Read, prog and one file cache plus the lookahead bitmap.
            "buffer_ram_bytes": 3 * self.cache_size_bytes + self.lookahead_size_bytes,
            "chosen_by": if *self == LittlefsConfig::BENCHMARK {
                "fastest on full fsio in a sweep of metadata_max (128 KiB..2 KiB), cache 2/8 KiB, \
                 block_cycles 1000/-1 (examples/littlefs_sweep.rs)"
            } else {
                "not the benchmark configuration"
            },
            "disk_version": if self.disk_version == 0 { "2.1 (newest)".to_owned() } else {
                format!("{}.{}", self.disk_version >> 16, self.disk_version & 0xFFFF)
            },
        })
    }
}

/// `BLOCK_CYCLES` of the `Storage` impl, used by the crate's safe API.
const CRATE_BLOCK_CYCLES: isize = 1000;
/// Lookahead bitmap in 64-bit words: 64 × 64 = 4096 bits, one per block.
type LookaheadWords = U64;
type CacheBytes = U2048;

const _: () = assert!(64 * 64 >= BLOCK_COUNT);
const _: () = assert!(BLOCK_SIZE_BYTES.is_multiple_of(PAGE_SIZE_BYTES));

/// `littlefs2::driver::Storage` over a `SimFlash`, with its own virtual clock.
pub struct NandStorage {
    flash: SimFlash,
    now_ns: Nanos,
    spare: Vec<u8>,
    /// The first flash error since the last `take_error`.
    error: Option<NandError>,
}

impl NandStorage {
    /// Wraps a device; fails unless its geometry is the one the constants describe.
    pub fn new(flash: SimFlash) -> Result<NandStorage, BenchError> {
        let geometry = flash.geometry();
        let matches = geometry.page_data_bytes as usize == PAGE_SIZE_BYTES
            && geometry.pages_per_block as usize == PAGES_PER_BLOCK
            && geometry.block_count as usize == BLOCK_COUNT
            && flash.chip_count() == 1;
        if !matches {
            return Err(BenchError::InvalidConfig {
                reason: format!(
                    "littlefs adapter needs 1 chip of {BLOCK_COUNT} blocks × {PAGES_PER_BLOCK} pages × \
                     {PAGE_SIZE_BYTES} B, got {} chips of {geometry:?}",
                    flash.chip_count()
                ),
            });
        }
        let now_ns = flash.all_done_ns();
        let spare = vec![0xFF; geometry.spare_bytes as usize];
        Ok(NandStorage { flash, now_ns, spare, error: None })
    }

    pub fn flash(&mut self) -> &mut SimFlash {
        &mut self.flash
    }

    pub fn into_flash(self) -> SimFlash {
        self.flash
    }

    pub fn now_ns(&self) -> Nanos {
        self.now_ns
    }

    pub fn take_error(&mut self) -> Option<NandError> {
        self.error.take()
    }

    fn fail(&mut self, error: NandError) -> LfsError {
        self.error.get_or_insert(error);
        LfsError::IO
    }

    /// Splits a byte offset into the page it starts and checks the span stays in one block.
    fn page_at(offset: usize, length_bytes: usize) -> (u32, u32) {
        assert_eq!(offset % PAGE_SIZE_BYTES, 0, "littlefs access at {offset} not page aligned");
        assert_eq!(length_bytes % PAGE_SIZE_BYTES, 0, "littlefs access of {length_bytes} bytes");
        let block_index = offset / BLOCK_SIZE_BYTES;
        let page_index = offset % BLOCK_SIZE_BYTES / PAGE_SIZE_BYTES;
        assert!(
            page_index + length_bytes / PAGE_SIZE_BYTES <= PAGES_PER_BLOCK,
            "littlefs access at {offset} + {length_bytes} crosses a block"
        );
        assert!(block_index < BLOCK_COUNT, "littlefs block {block_index} beyond {BLOCK_COUNT}");
        (block_index as u32, page_index as u32)
    }
}

impl Storage for NandStorage {
    const READ_SIZE: usize = PAGE_SIZE_BYTES;
    const WRITE_SIZE: usize = PAGE_SIZE_BYTES;
    const BLOCK_SIZE: usize = BLOCK_SIZE_BYTES;
    const BLOCK_COUNT: usize = BLOCK_COUNT;
    const BLOCK_CYCLES: isize = CRATE_BLOCK_CYCLES;
    type CACHE_SIZE = CacheBytes;
    type LOOKAHEAD_SIZE = LookaheadWords;

    fn read(&mut self, offset: usize, buffer: &mut [u8]) -> LfsResult<usize> {
        let (block_index, first_page_index) = Self::page_at(offset, buffer.len());
        for (page_offset, chunk) in buffer.chunks_mut(PAGE_SIZE_BYTES).enumerate() {
            let page = PageAddress::new(0, block_index, first_page_index + page_offset as u32);
            let done = match self.flash.read_page(self.now_ns, page, chunk, &mut self.spare) {
                Ok(done) => done,
                Err(error) => return Err(self.fail(error)),
            };
            self.now_ns = done.done_ns;
            if done.value == ReadStatus::Uncorrectable {
                // No NandError names this outcome; report it as corruption, as a driver would.
                return Err(LfsError::CORRUPTION);
            }
        }
        Ok(buffer.len())
    }

    fn write(&mut self, offset: usize, data: &[u8]) -> LfsResult<usize> {
        let (block_index, first_page_index) = Self::page_at(offset, data.len());
        self.spare.fill(0xFF);
        for (page_offset, chunk) in data.chunks(PAGE_SIZE_BYTES).enumerate() {
            let page = PageAddress::new(0, block_index, first_page_index + page_offset as u32);
            match self.flash.program_page(self.now_ns, page, chunk, &self.spare) {
                Ok(done) => self.now_ns = done.done_ns,
                Err(error) => return Err(self.fail(error)),
            }
        }
        Ok(data.len())
    }

    fn erase(&mut self, offset: usize, length_bytes: usize) -> LfsResult<usize> {
        assert_eq!(offset % BLOCK_SIZE_BYTES, 0, "littlefs erase at {offset} not block aligned");
        assert_eq!(length_bytes % BLOCK_SIZE_BYTES, 0, "littlefs erase of {length_bytes} bytes");
        let first_block_index = offset / BLOCK_SIZE_BYTES;
        for block_index in first_block_index..first_block_index + length_bytes / BLOCK_SIZE_BYTES {
            match self.flash.erase_block(self.now_ns, BlockAddress::new(0, block_index as u32)) {
                Ok(done) => self.now_ns = done.done_ns,
                Err(error) => return Err(self.fail(error)),
            }
        }
        Ok(length_bytes)
    }
}
