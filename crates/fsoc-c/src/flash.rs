//! The caller's flash driver (a struct of C callbacks) behind fsoc-flash's `Flash` seam.
//!
//! The driver answers with the `FSOC_FLASH_*` codes. The adapter adds what the core needs and a
//! driver should not have to know: an erased page is recognised here (all data and spare bytes
//! 0xFF, the state an erase leaves), and a virtual clock per chip advances by the latencies the
//! driver declares, so the core's commit pacing works without a timer.

use core::cell::Cell;
use core::ffi::{c_int, c_void};

use alloc::vec;
use alloc::vec::Vec;

use fsoc_flash::{
    BlockAddress, ChipIndex, Completed, Flash, Geometry, NandError, Nanos, OperationKind, PageAddress, ReadStatus,
    Timing,
};

/// The call succeeded (a read: the page's bytes are in the buffers, with no bit corrected).
pub const FSOC_FLASH_OK: c_int = 0;
/// A read: the page's bytes are in the buffers after the ECC corrected bit errors.
pub const FSOC_FLASH_CORRECTED: c_int = 1;
/// A read: the ECC could not correct the page; its bytes are not trusted.
pub const FSOC_FLASH_UNCORRECTABLE: c_int = 2;
/// A read: the page is erased (a driver that cannot tell returns `FSOC_FLASH_OK` with the 0xFF
/// bytes it read, and the library recognises them).
pub const FSOC_FLASH_ERASED: c_int = 3;
/// A program or erase reported status fail: the library retires the block (and marks it bad).
pub const FSOC_FLASH_FAILED: c_int = -1;
/// The block is bad (marked so before this call).
pub const FSOC_FLASH_BAD_BLOCK: c_int = -2;
/// Power is going or gone: the library stops writing and the volume must be mounted again.
pub const FSOC_FLASH_POWER_LOST: c_int = -3;
/// Any other failure of the chip or its bus (any other negative value means the same).
pub const FSOC_FLASH_DEVICE_ERROR: c_int = -4;

/// The flash: its geometry, typical latencies and the driver's callbacks. A volume of several
/// chips stripes every segment across them (chip numbers 0..chip_count). The struct is copied
/// at mount; `context` is handed back to every callback unchanged.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct FsocFlashDriver {
    pub context: *mut c_void,
    /// 1 to 64 chips.
    pub chip_count: u32,
    pub blocks_per_chip: u32,
    /// 1 to 4096 pages a block (and at most 2^32 - 1 pages in all).
    pub pages_per_block: u32,
    /// Data bytes of a page (a power of two from 512 to 64 KiB).
    pub page_data_bytes: u32,
    /// Spare (OOB) bytes of a page the library may use: at least 16, at most a quarter of the
    /// page (fsoc keeps a 16-byte page tag there; give only bytes the controller's ECC leaves
    /// free).
    pub spare_bytes: u32,
    /// Typical latencies (from the datasheet) for the library's virtual clock; 0 is allowed.
    pub read_latency_ns: u32,
    pub program_latency_ns: u32,
    pub erase_latency_ns: u32,
    /// Reads one page: `data` (page_data_bytes) and `spare` (spare_bytes) receive its bytes.
    /// Answers `FSOC_FLASH_OK`, `_CORRECTED`, `_UNCORRECTABLE`, `_ERASED` or a negative code.
    pub read_page: Option<
        unsafe extern "C" fn(
            context: *mut c_void,
            chip: u32,
            block: u32,
            page: u32,
            data: *mut u8,
            spare: *mut u8,
        ) -> c_int,
    >,
    /// Programs one erased page with `data` and `spare`. Pages of a block are programmed in
    /// ascending order. Answers `FSOC_FLASH_OK` or a negative code (`_FAILED`: status fail).
    pub program_page: Option<
        unsafe extern "C" fn(
            context: *mut c_void,
            chip: u32,
            block: u32,
            page: u32,
            data: *const u8,
            spare: *const u8,
        ) -> c_int,
    >,
    /// Erases one block (every byte of its pages and spares to 0xFF): `FSOC_FLASH_OK` or
    /// negative.
    pub erase_block: Option<unsafe extern "C" fn(context: *mut c_void, chip: u32, block: u32) -> c_int>,
    /// Whether a block is bad: 1 bad, 0 good, negative on failure.
    pub is_bad_block: Option<unsafe extern "C" fn(context: *mut c_void, chip: u32, block: u32) -> c_int>,
    /// Marks a block bad (the chip's marker or the driver's table): 0 or negative. May be
    /// NULL: a block that fails is retired in the volume's own segment table either way.
    pub mark_bad_block: Option<unsafe extern "C" fn(context: *mut c_void, chip: u32, block: u32) -> c_int>,
    /// Waits until every program and erase issued before it is on the flash (a controller
    /// with write-back queues needs it); NULL: each call is complete when it returns.
    pub sync: Option<unsafe extern "C" fn(context: *mut c_void) -> c_int>,
}

type ReadPage = unsafe extern "C" fn(
    context: *mut c_void,
    chip: u32,
    block: u32,
    page: u32,
    data: *mut u8,
    spare: *mut u8,
) -> c_int;
type ProgramPage = unsafe extern "C" fn(
    context: *mut c_void,
    chip: u32,
    block: u32,
    page: u32,
    data: *const u8,
    spare: *const u8,
) -> c_int;
type BlockCall = unsafe extern "C" fn(context: *mut c_void, chip: u32, block: u32) -> c_int;

/// The most chips a volume stripes over (the superblock's limit).
const CHIP_COUNT_MAX: u32 = fsoc_core::txn::superblock::CHIP_COUNT_MAX;
/// The largest page and block this adapter accepts (NAND today: pages of 16 KiB, blocks of
/// at most a few thousand pages), so buffers sized from them stay bounded.
const PAGE_DATA_BYTES_MAX: u32 = 64 * 1024;
const PAGES_PER_BLOCK_MAX: u32 = 4096;

/// The smallest spare area: the core's page tag.
const SPARE_BYTES_MIN: usize = fsoc_core::segment::device::SPARE_TAG_BYTES;

/// `FsocFlashDriver` as a `Flash`.
pub struct CallbackFlash {
    driver: FsocFlashDriver,
    read_page: ReadPage,
    program_page: ProgramPage,
    erase_block: BlockCall,
    is_bad_block: BlockCall,
    geometry: Geometry,
    timing: Timing,
    /// Per chip: when its last operation completes on the virtual clock.
    busy_until: Vec<Cell<Nanos>>,
}

impl CallbackFlash {
    /// Checks the driver's description; `None` names what is wrong.
    pub fn new(driver: &FsocFlashDriver) -> Result<CallbackFlash, &'static str> {
        let (Some(read_page), Some(program_page), Some(erase_block), Some(is_bad_block)) =
            (driver.read_page, driver.program_page, driver.erase_block, driver.is_bad_block)
        else {
            return Err("read_page, program_page, erase_block and is_bad_block are required");
        };
        // Caller input, checked before anything is sized from it (a wrong field must be an
        // error, not an allocation that aborts).
        if driver.chip_count == 0 || driver.chip_count > CHIP_COUNT_MAX {
            return Err("chip_count must be 1 to 64");
        }
        if driver.blocks_per_chip == 0 || driver.pages_per_block == 0 || driver.pages_per_block > PAGES_PER_BLOCK_MAX {
            return Err("blocks_per_chip must be positive and pages_per_block 1 to 4096");
        }
        let pages =
            u64::from(driver.chip_count) * u64::from(driver.blocks_per_chip) * u64::from(driver.pages_per_block);
        if pages > u64::from(u32::MAX) {
            return Err("more than 2^32 - 1 pages in all");
        }
        if !(512..=PAGE_DATA_BYTES_MAX).contains(&driver.page_data_bytes) || !driver.page_data_bytes.is_power_of_two() {
            return Err("page_data_bytes must be a power of two from 512 to 64 KiB");
        }
        if (driver.spare_bytes as usize) < SPARE_BYTES_MIN || driver.spare_bytes > driver.page_data_bytes / 4 {
            return Err("spare_bytes must be at least 16 and at most a quarter of the page");
        }
        let geometry = Geometry {
            page_data_bytes: driver.page_data_bytes,
            spare_bytes: driver.spare_bytes,
            pages_per_block: driver.pages_per_block,
            block_count: driver.blocks_per_chip,
        };
        let timing = Timing {
            read_latency_ns: driver.read_latency_ns.into(),
            program_latency_ns: driver.program_latency_ns.into(),
            erase_latency_ns: driver.erase_latency_ns.into(),
            bus_ns_per_byte: 0,
        };
        Ok(CallbackFlash {
            driver: *driver,
            read_page,
            program_page,
            erase_block,
            is_bad_block,
            geometry,
            timing,
            busy_until: vec![Cell::new(0); driver.chip_count as usize],
        })
    }

    fn check(&self, block: BlockAddress) -> Result<(), NandError> {
        if block.chip.0 >= self.driver.chip_count {
            return Err(NandError::OutOfRange {
                what: "chip",
                value: block.chip.0.into(),
                limit: self.driver.chip_count.into(),
            });
        }
        if block.block.0 >= self.driver.blocks_per_chip {
            let limit = self.driver.blocks_per_chip.into();
            return Err(NandError::OutOfRange { what: "block", value: block.block.0.into(), limit });
        }
        Ok(())
    }

    fn check_page(&self, page: PageAddress, data: usize, spare: usize, what: &'static str) -> Result<(), NandError> {
        self.check(page.block_address())?;
        if page.page_index >= self.driver.pages_per_block {
            let limit = self.driver.pages_per_block.into();
            return Err(NandError::OutOfRange { what: "page", value: page.page_index.into(), limit });
        }
        let expected_bytes = self.geometry.page_data_bytes as usize;
        if data != expected_bytes {
            return Err(NandError::BufferSize { what, expected_bytes, actual_bytes: data });
        }
        let expected_bytes = self.geometry.spare_bytes as usize;
        if spare != expected_bytes {
            return Err(NandError::BufferSize { what, expected_bytes, actual_bytes: spare });
        }
        Ok(())
    }

    /// Advances `chip`'s clock by an operation issued at `issue_ns`.
    fn finish(&self, issue_ns: Nanos, chip: ChipIndex, latency_ns: Nanos) -> Nanos {
        let Some(clock) = self.busy_until.get(chip.0 as usize) else { return issue_ns };
        let done_ns = clock.get().max(issue_ns) + latency_ns;
        clock.set(done_ns);
        done_ns
    }
}

/// A driver's negative answer as the seam's error.
fn driver_error(code: c_int, kind: OperationKind, block: BlockAddress) -> NandError {
    match code {
        FSOC_FLASH_FAILED => NandError::OperationFailed { kind, block },
        FSOC_FLASH_BAD_BLOCK => NandError::BadBlock { block },
        FSOC_FLASH_POWER_LOST => NandError::PowerLost,
        _ => NandError::ChipFailed { chip: block.chip },
    }
}

impl Flash for CallbackFlash {
    fn geometry(&self) -> Geometry {
        self.geometry
    }
    fn chip_count(&self) -> u32 {
        self.driver.chip_count
    }
    fn timing(&self) -> Timing {
        self.timing
    }
    fn read_page(
        &self,
        issue_ns: Nanos,
        page: PageAddress,
        data: &mut [u8],
        spare: &mut [u8],
    ) -> Result<Completed<ReadStatus>, NandError> {
        self.check_page(page, data.len(), spare.len(), "read")?;
        // SAFETY: the buffers are exactly the page's data and spare sizes the driver declared.
        let code = unsafe {
            (self.read_page)(
                self.driver.context,
                page.chip.0,
                page.block.0,
                page.page_index,
                data.as_mut_ptr(),
                spare.as_mut_ptr(),
            )
        };
        let status = match code {
            FSOC_FLASH_OK if data.iter().chain(spare.iter()).all(|&byte| byte == 0xFF) => ReadStatus::Erased,
            FSOC_FLASH_OK => ReadStatus::Clean,
            FSOC_FLASH_CORRECTED => ReadStatus::Corrected { bits: 1, max_per_sector: 1 },
            FSOC_FLASH_UNCORRECTABLE => ReadStatus::Uncorrectable,
            FSOC_FLASH_ERASED => ReadStatus::Erased,
            code => return Err(driver_error(code, OperationKind::Read, page.block_address())),
        };
        let done_ns = self.finish(issue_ns, page.chip, self.timing.read_latency_ns);
        Ok(Completed { value: status, done_ns })
    }
    fn program_page(
        &mut self,
        issue_ns: Nanos,
        page: PageAddress,
        data: &[u8],
        spare: &[u8],
    ) -> Result<Completed<()>, NandError> {
        self.check_page(page, data.len(), spare.len(), "program")?;
        // SAFETY: as in `read_page`; the driver only reads the buffers.
        let code = unsafe {
            (self.program_page)(
                self.driver.context,
                page.chip.0,
                page.block.0,
                page.page_index,
                data.as_ptr(),
                spare.as_ptr(),
            )
        };
        if code != FSOC_FLASH_OK {
            return Err(driver_error(code, OperationKind::Program, page.block_address()));
        }
        let done_ns = self.finish(issue_ns, page.chip, self.timing.program_latency_ns);
        Ok(Completed { value: (), done_ns })
    }
    fn erase_block(&mut self, issue_ns: Nanos, block: BlockAddress) -> Result<Completed<()>, NandError> {
        self.check(block)?;
        // SAFETY: a plain call with the driver's own context.
        let code = unsafe { (self.erase_block)(self.driver.context, block.chip.0, block.block.0) };
        if code != FSOC_FLASH_OK {
            return Err(driver_error(code, OperationKind::Erase, block));
        }
        let done_ns = self.finish(issue_ns, block.chip, self.timing.erase_latency_ns);
        Ok(Completed { value: (), done_ns })
    }
    fn is_bad_block(&self, block: BlockAddress) -> Result<bool, NandError> {
        self.check(block)?;
        // SAFETY: as in `erase_block`.
        match unsafe { (self.is_bad_block)(self.driver.context, block.chip.0, block.block.0) } {
            0 => Ok(false),
            code if code > 0 => Ok(true),
            code => Err(driver_error(code, OperationKind::Read, block)),
        }
    }
    fn mark_bad_block(&mut self, block: BlockAddress) -> Result<(), NandError> {
        self.check(block)?;
        let Some(mark_bad_block) = self.driver.mark_bad_block else {
            return Err(NandError::InvalidConfig { reason: "the flash driver cannot mark a block bad" });
        };
        // SAFETY: as in `erase_block`.
        match unsafe { mark_bad_block(self.driver.context, block.chip.0, block.block.0) } {
            FSOC_FLASH_OK => Ok(()),
            code => Err(driver_error(code, OperationKind::Erase, block)),
        }
    }
    fn busy_until_ns(&self, chip: ChipIndex) -> Nanos {
        self.busy_until.get(chip.0 as usize).map_or(0, Cell::get)
    }
    fn write_barrier(&mut self) -> Result<(), NandError> {
        let Some(sync) = self.driver.sync else { return Ok(()) };
        // SAFETY: a plain call with the driver's own context.
        match unsafe { sync(self.driver.context) } {
            FSOC_FLASH_OK => Ok(()),
            FSOC_FLASH_POWER_LOST => Err(NandError::PowerLost),
            _ => Err(NandError::ChipFailed { chip: ChipIndex(0) }),
        }
    }
    fn erase_count(&self, block: BlockAddress) -> Result<u32, NandError> {
        // The core keeps its own counts in the segment table; the driver is not asked.
        self.check(block).map(|()| 0)
    }
}
