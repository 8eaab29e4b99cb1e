//! Layer 1: the flash seam over real raw NAND through Linux MTD: `MtdFlash` implements
//! `fsoc_flash::Flash` over one `/dev/mtdN` character device per chip (several with identical
//! geometry form a chip array, as in seed 001), so the layers above cannot tell it from the
//! simulator.
//!
//! - Pages are programmed and read with MEMWRITE/MEMREAD in `MTD_OPS_AUTO_OOB` mode: the
//!   kernel keeps its own ECC and bad-block marker in the OOB area, and fsoc's spare bytes go
//!   to the first free OOB bytes of the ECC layout. The free count is read from the device
//!   (sysfs `oobavail`, else a probing read), never assumed, and must be at least 20: the
//!   16 spare bytes the layers above get (the page tag) plus a CRC-32C of them (`spare`),
//!   because the kernel's ECC usually does not cover free OOB bytes.
//! - ECC outcomes map as the simulator reports them (`outcome::read_status`): -EUCLEAN or
//!   counted corrections are `Corrected`, -EBADMSG `Uncorrectable`, all-0xFF `Erased`; a flip
//!   in the tag is corrected (one bit, counted) or the page is `Uncorrectable`. A failed
//!   program or erase (EIO) is `NandError::OperationFailed`.
//! - Time: real flash has no virtual clock. Each chip keeps one anyway so the `Flash`
//!   contract holds: an operation issued at t completes at max(t, chip busy) + the measured
//!   wall duration of its ioctl. `timing()` reports datasheet figures of a small SLC chip, for
//!   display only (nothing above decides by them).
//! - MTD writes and erases are synchronous: when the ioctl returns the page is on the chip,
//!   so `write_barrier` and `flush` return at once.
//! - Erase counts are not known to MTD: `erase_count` returns 0 (fsoc keeps its own wear
//!   counts in the segment table; the erases of this process are in `counters`).
//! - Grown bad blocks: the kernel's MEMSETBADBLOCK erases the block before it writes the
//!   marker (nand_block_markbad_lowlevel), which would destroy pages fsoc still references
//!   (after a failed program, the pages programmed before it in that block stay live until
//!   their files change). So a block is marked in the kernel's table only when it holds
//!   nothing (`outcome::mark_now`: its erase failed, or its first page failed or reads erased);
//!   otherwise the mark is kept for this process (`is_bad_block` says bad, nothing erases or
//!   programs it) and fsoc's segment table keeps the segment retired across mounts.
//! - Locking against a second process is the caller's (the CLI flocks each device, as for
//!   images): an `flock` here would conflict with the caller's own on another descriptor.
//!
//! Invariant: nothing is written to a path before it is known to be an MTD character device
//! (major 90, checked by `stat` and again on the open descriptor).
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

pub mod abi;
mod device;
pub mod outcome;
pub mod spare;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use fsoc_flash::{
    BlockAddress, ChipIndex, Completed, Flash, Geometry, NandError, Nanos, OperationKind, PageAddress, ReadStatus,
    Timing,
};

pub use device::{is_mtd_char_device, MtdDevice};
pub use outcome::{DeviceDescription, Failure, OOB_BYTES_MIN};

/// Why MTD devices cannot be used as fsoc chips.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum MtdError {
    #[error("{path}: {error}")]
    Open { path: String, error: String },
    #[error("{path}: not an MTD character device (major 90, /dev/mtdN); refusing to touch it")]
    NotMtdDevice { path: String },
    #[error("{path}: ioctl {request} failed: {}", std::io::Error::from_raw_os_error(*errno))]
    Ioctl { path: String, request: &'static str, errno: i32 },
    #[error("{path}: the MTD device is read-only")]
    ReadOnly { path: String },
    #[error("{path}: unusable geometry: {reason}")]
    Geometry { path: String, reason: String },
    #[error(
        "{path}: {oob_available_bytes} free OOB bytes per page (of {oob_size_bytes}) left by the ECC layout; fsoc \
         needs {needed_bytes} for its page tag"
    )]
    SpareTooSmall { path: String, oob_size_bytes: u32, oob_available_bytes: u32, needed_bytes: u32 },
    #[error(
        "{other_path} has geometry {other:?} but {first_path} has {first:?}: the chips of an array must be identical"
    )]
    Mismatch { first_path: String, first: Geometry, other_path: String, other: Geometry },
    #[error("no MTD devices given")]
    NoDevices,
}

/// Datasheet figures of a small SLC chip (2 KiB pages, ONFI 1.0 bus), reported by `timing()`.
pub const DATASHEET_SLC_TIMING: Timing =
    Timing { read_latency_ns: 25_000, program_latency_ns: 250_000, erase_latency_ns: 2_000_000, bus_ns_per_byte: 25 };

/// What one chip did since the devices were opened.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MtdCounters {
    pub reads: u64,
    pub programs: u64,
    pub erases: u64,
    /// Reads the ECC corrected, and the bits it corrected in them.
    pub corrected_reads: u64,
    pub corrected_bits: u64,
    pub uncorrectable_reads: u64,
    /// Wall time spent in the kernel's read, program and erase calls.
    pub busy_ns: u64,
}

#[derive(Default)]
struct ChipState {
    busy_until_ns: AtomicU64,
    reads: AtomicU64,
    programs: AtomicU64,
    erases: AtomicU64,
    corrected_reads: AtomicU64,
    corrected_bits: AtomicU64,
    uncorrectable_reads: AtomicU64,
    busy_ns: AtomicU64,
}

/// An array of MTD raw NAND devices, one per chip.
pub struct MtdFlash {
    devices: Vec<MtdDevice>,
    chips: Vec<ChipState>,
    geometry: Geometry,
    /// The last failed program or erase of each block since open (bounded by the blocks that
    /// failed, which are retired), so `mark_bad_block` knows whether the block may hold data.
    failures: BTreeMap<BlockAddress, Failure>,
    /// Blocks marked bad in this process only, because the kernel's mark would erase pages
    /// that may still be referenced (see the module comment).
    deferred_bad_blocks: BTreeSet<BlockAddress>,
}

impl MtdFlash {
    /// Opens `paths` as chips 0, 1, … of one array (read-write if `writable`), checking that
    /// each is an MTD raw NAND device and that all have the same geometry.
    pub fn open<P: AsRef<Path>>(paths: &[P], writable: bool) -> Result<MtdFlash, MtdError> {
        let devices =
            paths.iter().map(|path| MtdDevice::open(path.as_ref(), writable)).collect::<Result<Vec<_>, _>>()?;
        let descriptions: Vec<DeviceDescription> = devices.iter().map(|device| device.description().clone()).collect();
        let geometry = outcome::array_geometry(&descriptions, writable)?;
        let chips = devices.iter().map(|_| ChipState::default()).collect();
        Ok(MtdFlash { devices, chips, geometry, failures: BTreeMap::new(), deferred_bad_blocks: BTreeSet::new() })
    }

    /// The devices, in chip order.
    pub fn devices(&self) -> &[MtdDevice] {
        &self.devices
    }

    /// Counters of each chip, in chip order.
    pub fn counters(&self) -> Vec<MtdCounters> {
        self.chips
            .iter()
            .map(|chip| MtdCounters {
                reads: chip.reads.load(Ordering::Relaxed),
                programs: chip.programs.load(Ordering::Relaxed),
                erases: chip.erases.load(Ordering::Relaxed),
                corrected_reads: chip.corrected_reads.load(Ordering::Relaxed),
                corrected_bits: chip.corrected_bits.load(Ordering::Relaxed),
                uncorrectable_reads: chip.uncorrectable_reads.load(Ordering::Relaxed),
                busy_ns: chip.busy_ns.load(Ordering::Relaxed),
            })
            .collect()
    }

    /// Blocks marked bad in this process but not in the kernel's table (they may hold pages
    /// still in use; see the module comment).
    pub fn deferred_bad_blocks(&self) -> impl Iterator<Item = BlockAddress> + '_ {
        self.deferred_bad_blocks.iter().copied()
    }

    /// Bad blocks of each chip (the kernel's table: factory marks plus any marked since).
    pub fn bad_blocks(&self) -> Result<Vec<Vec<u32>>, NandError> {
        (0..self.chip_count())
            .map(|chip| {
                (0..self.geometry.block_count)
                    .filter_map(|block| match self.is_bad_block(BlockAddress::new(chip, block)) {
                        Ok(true) => Some(Ok(block)),
                        Ok(false) => None,
                        Err(error) => Some(Err(error)),
                    })
                    .collect()
            })
            .collect()
    }

    fn chip(&self, chip: ChipIndex) -> Result<(&MtdDevice, &ChipState), NandError> {
        let index = chip.0 as usize;
        match (self.devices.get(index), self.chips.get(index)) {
            (Some(device), Some(state)) => Ok((device, state)),
            _ => {
                Err(NandError::OutOfRange { what: "chip", value: u64::from(chip.0), limit: self.devices.len() as u64 })
            }
        }
    }

    fn check_block(&self, block: BlockAddress) -> Result<u64, NandError> {
        if block.block.0 >= self.geometry.block_count {
            return Err(NandError::OutOfRange {
                what: "block",
                value: u64::from(block.block.0),
                limit: u64::from(self.geometry.block_count),
            });
        }
        Ok(u64::from(block.block.0) * self.geometry.block_data_bytes())
    }

    /// Byte offset of `page` on its chip, after checking the address and buffer sizes.
    fn page_offset(&self, page: PageAddress, data_bytes: usize, spare_bytes: usize) -> Result<u64, NandError> {
        let block_offset = self.check_block(page.block_address())?;
        if page.page_index >= self.geometry.pages_per_block {
            return Err(NandError::OutOfRange {
                what: "page",
                value: u64::from(page.page_index),
                limit: u64::from(self.geometry.pages_per_block),
            });
        }
        check_size("page data", self.geometry.page_data_bytes, data_bytes)?;
        check_size("spare", self.geometry.spare_bytes, spare_bytes)?;
        Ok(block_offset + u64::from(page.page_index) * u64::from(self.geometry.page_data_bytes))
    }
}

fn check_size(what: &'static str, expected: u32, actual: usize) -> Result<(), NandError> {
    if actual != expected as usize {
        return Err(NandError::BufferSize { what, expected_bytes: expected as usize, actual_bytes: actual });
    }
    Ok(())
}

/// Completion time of an operation issued at `issue_ns` on a chip that took `elapsed` of wall
/// time: after whatever the chip was still doing, plus that time.
fn complete(state: &ChipState, issue_ns: Nanos, started: Instant) -> Nanos {
    let elapsed_ns = u64::try_from(started.elapsed().as_nanos()).unwrap_or(u64::MAX);
    state.busy_ns.fetch_add(elapsed_ns, Ordering::Relaxed);
    let start_ns = issue_ns.max(state.busy_until_ns.load(Ordering::Acquire));
    let done_ns = start_ns.saturating_add(elapsed_ns);
    state.busy_until_ns.fetch_max(done_ns, Ordering::AcqRel);
    done_ns
}

fn device_error(device: &MtdDevice, what: &str, errno: i32) -> NandError {
    NandError::Image(format!("{}: {what}: {}", device.path().display(), std::io::Error::from_raw_os_error(errno)))
}

impl Flash for MtdFlash {
    fn geometry(&self) -> Geometry {
        self.geometry
    }

    fn chip_count(&self) -> u32 {
        u32::try_from(self.devices.len()).unwrap_or(u32::MAX)
    }

    fn timing(&self) -> Timing {
        DATASHEET_SLC_TIMING
    }

    fn read_page(
        &self,
        issue_ns: Nanos,
        page: PageAddress,
        data: &mut [u8],
        spare: &mut [u8],
    ) -> Result<Completed<ReadStatus>, NandError> {
        let offset = self.page_offset(page, data.len(), spare.len())?;
        let (device, state) = self.chip(page.chip)?;
        let mut oob = [0xFF; spare::OOB_BYTES];
        let started = Instant::now();
        let answer = device.read(offset, data, &mut oob).map_err(|errno| device_error(device, "read", errno))?;
        let done_ns = complete(state, issue_ns, started);
        state.reads.fetch_add(1, Ordering::Relaxed);
        let mut tag = [0xFF; spare::SPARE_BYTES];
        let status = outcome::read_status(answer.errno, answer.stats, data, &oob)
            .map_err(|errno| device_error(device, "read", errno))?;
        let status = match status {
            ReadStatus::Erased => status,
            _ => outcome::with_spare(status, spare::decode(&oob, &mut tag)),
        };
        spare.copy_from_slice(if status == ReadStatus::Erased { &oob[..spare::SPARE_BYTES] } else { &tag });
        match status {
            ReadStatus::Corrected { bits, .. } => {
                state.corrected_reads.fetch_add(1, Ordering::Relaxed);
                state.corrected_bits.fetch_add(u64::from(bits), Ordering::Relaxed);
            }
            ReadStatus::Uncorrectable => {
                state.uncorrectable_reads.fetch_add(1, Ordering::Relaxed);
            }
            ReadStatus::Clean | ReadStatus::Erased => {
                // A complete read transfers the whole page and every free OOB byte; a short
                // one would hand the layers above stale bytes.
                if answer.data_bytes != data.len() as u64 || answer.oob_bytes != oob.len() as u64 {
                    return Err(NandError::Image(format!(
                        "{}: short read of page {page:?}: {} data and {} OOB bytes",
                        device.path().display(),
                        answer.data_bytes,
                        answer.oob_bytes
                    )));
                }
            }
        }
        Ok(Completed { value: status, done_ns })
    }

    fn program_page(
        &mut self,
        issue_ns: Nanos,
        page: PageAddress,
        data: &[u8],
        spare: &[u8],
    ) -> Result<Completed<()>, NandError> {
        let offset = self.page_offset(page, data.len(), spare.len())?;
        let tag: &[u8; spare::SPARE_BYTES] = spare.try_into().map_err(|_| NandError::BufferSize {
            what: "spare",
            expected_bytes: spare::SPARE_BYTES,
            actual_bytes: spare.len(),
        })?;
        let oob = spare::encode(tag);
        let (device, state) = self.chip(page.chip)?;
        let started = Instant::now();
        if let Err(errno) = device.write(offset, data, &oob) {
            let error = outcome::operation_error(
                OperationKind::Program,
                page.block_address(),
                errno,
                &device.path().display().to_string(),
            );
            self.failures.insert(page.block_address(), Failure::Program { page_index: page.page_index });
            return Err(error);
        }
        state.programs.fetch_add(1, Ordering::Relaxed);
        Ok(Completed { value: (), done_ns: complete(state, issue_ns, started) })
    }

    fn erase_block(&mut self, issue_ns: Nanos, block: BlockAddress) -> Result<Completed<()>, NandError> {
        let offset = self.check_block(block)?;
        // The kernel refuses to erase a marked block with the same EIO as a status fail: ask
        // first, so the error says which it is.
        if self.is_bad_block(block)? {
            return Err(NandError::BadBlock { block });
        }
        let (device, state) = self.chip(block.chip)?;
        let started = Instant::now();
        if let Err(errno) = device.erase(offset, self.geometry.block_data_bytes()) {
            let error =
                outcome::operation_error(OperationKind::Erase, block, errno, &device.path().display().to_string());
            self.failures.insert(block, Failure::Erase);
            return Err(error);
        }
        state.erases.fetch_add(1, Ordering::Relaxed);
        Ok(Completed { value: (), done_ns: complete(state, issue_ns, started) })
    }

    fn is_bad_block(&self, block: BlockAddress) -> Result<bool, NandError> {
        let offset = self.check_block(block)?;
        let (device, _) = self.chip(block.chip)?;
        if self.deferred_bad_blocks.contains(&block) {
            return Ok(true);
        }
        device.is_bad(offset).map_err(|errno| device_error(device, "MEMGETBADBLOCK", errno))
    }

    fn mark_bad_block(&mut self, block: BlockAddress) -> Result<(), NandError> {
        let offset = self.check_block(block)?;
        let failure = self.failures.get(&block).copied();
        let first_page_erased = match failure {
            // Known without a read: see `outcome::mark_now`.
            Some(Failure::Erase) | Some(Failure::Program { page_index: 0 }) => false,
            _ => {
                let mut data = vec![0u8; self.geometry.page_data_bytes as usize];
                let mut spare = vec![0u8; self.geometry.spare_bytes as usize];
                let page = PageAddress { chip: block.chip, block: block.block, page_index: 0 };
                self.read_page(0, page, &mut data, &mut spare)?.value == ReadStatus::Erased
            }
        };
        if !outcome::mark_now(failure, first_page_erased) {
            self.deferred_bad_blocks.insert(block);
            return Ok(());
        }
        let (device, _) = self.chip(block.chip)?;
        device.mark_bad(offset).map_err(|errno| device_error(device, "MEMSETBADBLOCK", errno))
    }

    fn busy_until_ns(&self, chip: ChipIndex) -> Nanos {
        self.chips.get(chip.0 as usize).map_or(0, |state| state.busy_until_ns.load(Ordering::Acquire))
    }

    fn ecc_correctable_bits_per_512(&self) -> Option<u32> {
        // The weakest chip's code decides (chips of one array normally share it).
        self.devices.iter().map(|device| device.description().ecc_correctable_bits_per_512()).min().flatten()
    }

    fn erase_count(&self, block: BlockAddress) -> Result<u32, NandError> {
        self.check_block(block)?;
        // MTD keeps no erase counts; report none rather than invent them.
        self.chip(block.chip).map(|_| 0)
    }

    /// MTD programs and erases are synchronous in issue order: nothing to drain.
    fn write_barrier(&mut self) -> Result<(), NandError> {
        Ok(())
    }
}
