//! The flash seam: what the file system needs from a flash device, and nothing else.
//!
//! - `Flash`: an array of identical raw NAND chips with per-chip virtual clocks. The simulator
//!   (fsoc-media), the threaded chip-file array (fsoc-array) and, later, a Linux MTD backend
//!   implement it; the core (fsoc-core) is generic over it and depends on this crate only.
//! - Address, geometry and timing types, and `NandError`.
//! - `codec`: the one little-endian byte codec and CRC-32C every on-media structure uses.
//! - `sync`: the one lock type of the storage crates (std `Mutex`, or a spin lock without std).
//! - `convert`: the checked narrowing conversions for values in range by construction.
//!
//! `no_std` + `alloc`. Simulator statistics are not here: they reach benchmarks through
//! fsoc-media's `FlashStats`, never through this seam.
#![cfg_attr(not(feature = "std"), no_std)]
// The storage crates' lint set: no unwrap, expect, panic!, unchecked indexing or truncating
// `as` in product code (unit tests are exempt); each remaining allowance says why at its item.
#![cfg_attr(
    not(test),
    deny(
        clippy::unwrap_used,
        clippy::expect_used,
        clippy::panic,
        clippy::indexing_slicing,
        clippy::cast_possible_truncation
    )
)]

extern crate alloc;

use alloc::vec::Vec;

pub mod codec;
pub mod convert;
mod geometry;
pub mod sync;

pub use geometry::{Geometry, Timing};

/// Virtual time in nanoseconds since the device was created.
pub type Nanos = u64;

/// Index of a chip in the array (0-based).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ChipIndex(pub u32);

/// Index of an erase block within one chip (0-based).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct EraseBlockIndex(pub u32);

/// A physical page: chip, erase block within the chip, page within the block.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PageAddress {
    pub chip: ChipIndex,
    pub block: EraseBlockIndex,
    pub page_index: u32,
}

/// A physical erase block: chip and block within the chip.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct BlockAddress {
    pub chip: ChipIndex,
    pub block: EraseBlockIndex,
}

impl PageAddress {
    pub fn new(chip: u32, block: u32, page_index: u32) -> Self {
        PageAddress { chip: ChipIndex(chip), block: EraseBlockIndex(block), page_index }
    }
    pub fn block_address(&self) -> BlockAddress {
        BlockAddress { chip: self.chip, block: self.block }
    }
}

impl BlockAddress {
    pub fn new(chip: u32, block: u32) -> Self {
        BlockAddress { chip: ChipIndex(chip), block: EraseBlockIndex(block) }
    }
}

// Addresses as a person reads them in messages ("chip 0 block 5 page 3"); `{:?}` keeps the
// type names for debugging.
impl core::fmt::Display for ChipIndex {
    fn fmt(&self, formatter: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(formatter, "chip {}", self.0)
    }
}

impl core::fmt::Display for BlockAddress {
    fn fmt(&self, formatter: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(formatter, "{} block {}", self.chip, self.block.0)
    }
}

impl core::fmt::Display for PageAddress {
    fn fmt(&self, formatter: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(formatter, "{} page {}", self.block_address(), self.page_index)
    }
}

impl core::fmt::Display for OperationKind {
    fn fmt(&self, formatter: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        formatter.write_str(match self {
            OperationKind::Read => "read",
            OperationKind::Program => "program",
            OperationKind::Erase => "erase",
        })
    }
}

/// What the ECC engine reports for a page read, as a controller with BCH ECC would.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReadStatus {
    /// No bit errors.
    Clean,
    /// Bit errors were present but corrected; the returned data is what was programmed.
    /// `bits` is the total over all ECC sectors, `max_per_sector` the worst sector.
    Corrected { bits: u32, max_per_sector: u32 },
    /// At least one ECC sector had more errors than the code corrects; the returned data is
    /// the raw (wrong) content.
    Uncorrectable,
    /// The page is erased (all 0xFF); ECC is not applied to erased pages.
    Erased,
}

/// The result of an operation together with its virtual completion time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Completed<T> {
    pub value: T,
    /// Virtual time at which the chip finished this operation.
    pub done_ns: Nanos,
}

/// Kinds of operation, for errors and accounting.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum OperationKind {
    Read,
    Program,
    Erase,
}

/// Typed errors of the flash layer.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum NandError {
    #[error("address out of range: {what} {value} >= {limit}")]
    OutOfRange { what: &'static str, value: u64, limit: u64 },
    #[error("buffer size: {what} needs {expected_bytes} bytes, got {actual_bytes}")]
    BufferSize { what: &'static str, expected_bytes: usize, actual_bytes: usize },
    #[error("program of {page}, which is not erased")]
    NotErased { page: PageAddress },
    #[error("out-of-order program of {page}: page {last_programmed_index} of that block is already programmed")]
    OutOfOrder { page: PageAddress, last_programmed_index: u32 },
    #[error("{block} is marked bad")]
    BadBlock { block: BlockAddress },
    #[error("{block} is worn out after {erase_count} erases")]
    WornOut { block: BlockAddress, erase_count: u32 },
    #[error("{kind} failed on {block} (status fail; the block should be retired)")]
    OperationFailed { kind: OperationKind, block: BlockAddress },
    #[error("power lost")]
    PowerLost,
    #[error("{chip} failed")]
    ChipFailed { chip: ChipIndex },
    #[error("image file: {0}")]
    Image(alloc::string::String),
    #[error("invalid configuration: {reason}")]
    InvalidConfig { reason: &'static str },
}

/// A small byte-addressable persistent memory beside the flash (FeRAM, MRAM, PCM): the NVRAM
/// commit tier keeps its log here (issue 10; docs/FORMAT.md, "NVRAM log").
///
/// Contract the log relies on: a `write` that returned `Ok` is whole and survives a power cut
/// once `persist` has returned `Ok`; a write a cut interrupts leaves each aligned 8-byte word of
/// its range either all new or all old. Accesses are issued at a virtual time and return their
/// completion time, as flash operations do.
pub trait NvramDevice: Send + Sync {
    /// Bytes in the device.
    fn size_bytes(&self) -> u64;
    /// What the device is, for the superblock and `fsoc info` (an opaque code: 1 FeRAM,
    /// 2 MRAM, 3 PCM, 0 unknown).
    fn technology_code(&self) -> u8;
    fn read(&mut self, issue_ns: Nanos, offset: u64, buffer: &mut [u8]) -> Result<Completed<()>, NandError>;
    fn write(&mut self, issue_ns: Nanos, offset: u64, bytes: &[u8]) -> Result<Completed<()>, NandError>;
    /// Makes completed writes durable on the backing store (a file's `fdatasync`; nothing for
    /// memory that is persistent by itself).
    fn persist(&mut self) -> Result<(), NandError>;
}

/// An array of identical raw NAND chips with per-chip virtual clocks.
///
/// All methods take the virtual time at which the caller issues the operation and return the
/// time it completes. Data returned by `read_page` is valid once the caller's clock reaches
/// `done_ns`; a sequential caller simply sets its clock to `done_ns`.
pub trait Flash {
    /// Geometry of one chip (every chip is the same).
    fn geometry(&self) -> Geometry;
    /// Number of chips in the array (>= 1).
    fn chip_count(&self) -> u32;
    /// Latency profile.
    fn timing(&self) -> Timing;

    /// Reads a page's data and spare area. `data` must be `page_data_bytes` long and `spare`
    /// `spare_bytes` long. Takes `&self`: reads may be issued by several threads at once (an
    /// implementation serializes what it must inside); a read racing a program or erase of the
    /// same page is the caller's error (the file system never does it: its writers exclude its
    /// readers).
    fn read_page(
        &self,
        issue_ns: Nanos,
        page: PageAddress,
        data: &mut [u8],
        spare: &mut [u8],
    ) -> Result<Completed<ReadStatus>, NandError>;

    /// Programs a page (data and spare). The page must be erased and its index higher than any
    /// page already programmed in the block since its last erase.
    fn program_page(
        &mut self,
        issue_ns: Nanos,
        page: PageAddress,
        data: &[u8],
        spare: &[u8],
    ) -> Result<Completed<()>, NandError>;

    /// Erases a whole block (all bits to 1).
    fn erase_block(&mut self, issue_ns: Nanos, block: BlockAddress) -> Result<Completed<()>, NandError>;

    /// Whether the block carries a bad-block mark (factory or grown). Reading the mark is
    /// treated as free: controllers keep a bad-block table in RAM after the first scan.
    fn is_bad_block(&self, block: BlockAddress) -> Result<bool, NandError>;

    /// Marks a block bad (a grown bad block). The mark survives erases and reopening.
    fn mark_bad_block(&mut self, block: BlockAddress) -> Result<(), NandError>;

    /// Virtual time at which the chip finishes all operations issued so far.
    fn busy_until_ns(&self, chip: ChipIndex) -> Nanos;

    /// Latest `busy_until_ns` over all chips: the time at which everything issued is done.
    fn all_done_ns(&self) -> Nanos {
        (0..self.chip_count()).map(|c| self.busy_until_ns(ChipIndex(c))).max().unwrap_or(0)
    }

    /// Erase count of a block (physical wear; never reset).
    fn erase_count(&self, block: BlockAddress) -> Result<u32, NandError>;

    /// Bits the ECC corrects in each 512 bytes of page data (its strength), when the backend
    /// knows it. The file system refreshes a block whose reads come close to this (a read that
    /// needed most of the ECC's strength warns of retention loss or read disturb), so `None`
    /// only turns that early refresh off.
    fn ecc_correctable_bits_per_512(&self) -> Option<u32> {
        None
    }

    /// Pages between an MLC/TLC upper page and the lower page that shares its cells (0: none,
    /// as on SLC). A program cut by power loss may corrupt that lower page.
    fn paired_page_distance(&self) -> u32 {
        0
    }

    /// Makes everything programmed so far durable on the backing store (a no-op for RAM).
    fn flush(&mut self) -> Result<(), NandError> {
        Ok(())
    }

    /// Starts a `flush` and returns at once with a `FlushWait` that finishes it: everything
    /// programmed before this call is durable once `FlushWait::wait` returns `Ok`. A backend
    /// whose flush takes time outside the caller's thread (chip workers) returns before it is
    /// done, so a caller can release its locks before waiting; what is issued after this call
    /// is ordered after it as by `write_barrier`. The default flushes at once.
    fn begin_flush(&mut self) -> Result<FlushWait, NandError> {
        self.flush()?;
        Ok(FlushWait::done())
    }

    /// Orders writes: everything issued before the call reaches the backing store before
    /// anything issued after it, so a process that dies later (kill -9) never leaves a later
    /// write without an earlier one. Not durability against a host crash (that is `flush`).
    /// A backend that writes synchronously in issue order returns at once; one with a queue per
    /// chip either waits until every queue has drained or queues a fence that every chip's
    /// later requests wait behind (fsoc-array does the latter, so the caller does not wait),
    /// because pages issued to different chips otherwise reach their files in any order. The
    /// commit protocol calls it before and after each metaroot program. Required, with no
    /// default, so a wrapper (an enum over backends) cannot silently drop it.
    fn write_barrier(&mut self) -> Result<(), NandError>;

    /// A hint that `read_page` of each of `pages` follows, before any program or erase: a
    /// backend with real per-chip queues may start fetching them in parallel. It changes no
    /// state, no counters and no virtual time; the default does nothing.
    fn prefetch(&self, pages: &[PageAddress]) {
        let _ = pages;
    }

    /// Reads several pages issued together at `issue_ns`: page `i` into `data[i]` and the
    /// `i`-th `spare_bytes` of `spares`, one completion per page pushed to `completions` (in
    /// order). The rules of `read_page` apply to each; a failure stops the batch. The default
    /// reads them one by one; a backend may fetch neighbouring pages together.
    fn read_pages(
        &self,
        issue_ns: Nanos,
        pages: &[PageAddress],
        data: &mut [&mut [u8]],
        spares: &mut [u8],
        completions: &mut Vec<Completed<ReadStatus>>,
    ) -> Result<(), NandError> {
        let spare_bytes = self.geometry().spare_bytes as usize;
        check_batch(pages.len(), data.len(), spares.len(), spare_bytes)?;
        for ((page, data), spare) in pages.iter().zip(data.iter_mut()).zip(spares.chunks_exact_mut(spare_bytes.max(1)))
        {
            completions.push(self.read_page(issue_ns, *page, data, spare)?);
        }
        Ok(())
    }
}

/// The rest of a flush started by `Flash::begin_flush`: `wait` returns once it is durable (or
/// why it failed). Dropping it without waiting leaves the flush running, its outcome unknown.
#[must_use = "a started flush is durable only once `wait` returns Ok"]
pub struct FlushWait {
    rest: Option<alloc::boxed::Box<dyn FnOnce() -> Result<(), NandError> + Send>>,
}

impl FlushWait {
    /// A flush that has already finished.
    pub fn done() -> FlushWait {
        FlushWait { rest: None }
    }

    /// A flush that `rest` finishes (it blocks until the backend reports durability).
    pub fn pending(rest: impl FnOnce() -> Result<(), NandError> + Send + 'static) -> FlushWait {
        FlushWait { rest: Some(alloc::boxed::Box::new(rest)) }
    }

    /// Whether the flush may still be running (`wait` may block).
    pub fn is_pending(&self) -> bool {
        self.rest.is_some()
    }

    /// Blocks until the flush is durable.
    pub fn wait(self) -> Result<(), NandError> {
        match self.rest {
            Some(rest) => rest(),
            None => Ok(()),
        }
    }
}

impl core::fmt::Debug for FlushWait {
    fn fmt(&self, formatter: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        formatter.debug_struct("FlushWait").field("pending", &self.is_pending()).finish()
    }
}

/// Checks the buffers of a `Flash::read_pages` batch: one data buffer per page and
/// `spare_bytes` of spares per page.
pub fn check_batch(
    pages: usize,
    data_buffers: usize,
    spares_bytes: usize,
    spare_bytes: usize,
) -> Result<(), NandError> {
    if data_buffers != pages {
        return Err(NandError::BufferSize {
            what: "data buffers of a batch",
            expected_bytes: pages,
            actual_bytes: data_buffers,
        });
    }
    let expected = pages.saturating_mul(spare_bytes);
    if spares_bytes != expected || spare_bytes == 0 {
        return Err(NandError::BufferSize {
            what: "spares of a batch",
            expected_bytes: expected,
            actual_bytes: spares_bytes,
        });
    }
    Ok(())
}
