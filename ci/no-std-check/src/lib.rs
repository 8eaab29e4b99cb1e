//! A no_std staticlib that runs fsoc-core: the core must compile and link without std, and
//! `fsoc_no_std_selftest` (called by main.c, which scripts/test.sh builds with gcc and runs)
//! formats a RAM volume, writes a file, unmounts, mounts again and reads it back, all without
//! std, on a bump allocator over a static arena. The flash is `RamFlash` below, written against
//! fsoc-flash's `Flash` alone: the core needs the seam, not the simulator.
#![no_std]

extern crate alloc;

use core::alloc::{GlobalAlloc, Layout};
use core::cell::UnsafeCell;
use core::sync::atomic::{AtomicUsize, Ordering};

use alloc::vec;
use alloc::vec::Vec;

use fsoc_core::{FileSystem, FsConfig, OpenFlags};
use fsoc_flash::{
    BlockAddress, ChipIndex, Completed, Flash, Geometry, NandError, Nanos, PageAddress, ReadStatus, Timing,
};

const ARENA_BYTES: usize = 64 << 20;

/// Hands out memory from one static arena and never frees it: enough for one short run.
struct BumpAllocator {
    arena: UnsafeCell<[u8; ARENA_BYTES]>,
    used: AtomicUsize,
}

// SAFETY: `used` is advanced atomically, so two allocations never share bytes.
unsafe impl Sync for BumpAllocator {}

unsafe impl GlobalAlloc for BumpAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let base = self.arena.get() as usize;
        let mut used = self.used.load(Ordering::Relaxed);
        loop {
            let start = (base + used).next_multiple_of(layout.align()) - base;
            let Some(end) = start.checked_add(layout.size()).filter(|&end| end <= ARENA_BYTES) else {
                return core::ptr::null_mut();
            };
            match self.used.compare_exchange(used, end, Ordering::Relaxed, Ordering::Relaxed) {
                Ok(_) => return (base + start) as *mut u8,
                Err(current) => used = current,
            }
        }
    }
    unsafe fn dealloc(&self, _pointer: *mut u8, _layout: Layout) {}
}

#[global_allocator]
static ALLOCATOR: BumpAllocator = BumpAllocator { arena: UnsafeCell::new([0; ARENA_BYTES]), used: AtomicUsize::new(0) };

extern "C" {
    fn abort() -> !;
}

#[panic_handler]
fn panic(_info: &core::panic::PanicInfo) -> ! {
    // SAFETY: the C library's abort ends the process (main.c then fails).
    unsafe { abort() }
}

/// The smallest honest raw-NAND backend: pages in RAM, erase to 0xFF, program only erased
/// pages in ascending order, no bit errors and no bad blocks; one clock per chip.
struct RamFlash {
    geometry: Geometry,
    chip_count: u32,
    timing: Timing,
    /// Data then spare of every page, chip-major.
    cells: Vec<u8>,
    /// Per block: pages programmed since the last erase (the next page that may be programmed).
    next_page: Vec<u32>,
    erase_counts: Vec<u32>,
    busy_until: Vec<Nanos>,
}

impl RamFlash {
    fn new(chip_count: u32, block_count: u32) -> RamFlash {
        let geometry = Geometry { page_data_bytes: 2048, spare_bytes: 64, pages_per_block: 64, block_count };
        let timing = Timing {
            read_latency_ns: 25_000,
            program_latency_ns: 200_000,
            erase_latency_ns: 1_500_000,
            bus_ns_per_byte: 25,
        };
        let pages = geometry.page_count() as usize * chip_count as usize;
        let blocks = block_count as usize * chip_count as usize;
        RamFlash {
            geometry,
            chip_count,
            timing,
            cells: vec![0xFF; pages * (2048 + 64)],
            next_page: vec![0; blocks],
            erase_counts: vec![0; blocks],
            busy_until: vec![0; chip_count as usize],
        }
    }
    fn block_index(&self, block: BlockAddress) -> Result<usize, NandError> {
        if block.chip.0 >= self.chip_count {
            return Err(NandError::OutOfRange {
                what: "chip",
                value: block.chip.0.into(),
                limit: self.chip_count.into(),
            });
        }
        if block.block.0 >= self.geometry.block_count {
            let limit = self.geometry.block_count.into();
            return Err(NandError::OutOfRange { what: "block", value: block.block.0.into(), limit });
        }
        Ok(block.chip.0 as usize * self.geometry.block_count as usize + block.block.0 as usize)
    }
    fn page_range(&self, page: PageAddress) -> Result<(usize, core::ops::Range<usize>), NandError> {
        let block = self.block_index(page.block_address())?;
        if page.page_index >= self.geometry.pages_per_block {
            let limit = self.geometry.pages_per_block.into();
            return Err(NandError::OutOfRange { what: "page", value: page.page_index.into(), limit });
        }
        let page_bytes = (self.geometry.page_data_bytes + self.geometry.spare_bytes) as usize;
        let start = (block * self.geometry.pages_per_block as usize + page.page_index as usize) * page_bytes;
        Ok((block, start..start + page_bytes))
    }
    fn finish(&mut self, issue_ns: Nanos, chip: ChipIndex, latency_ns: Nanos) -> Nanos {
        let clock = &mut self.busy_until[chip.0 as usize];
        *clock = (*clock).max(issue_ns) + latency_ns;
        *clock
    }
}

impl Flash for RamFlash {
    fn geometry(&self) -> Geometry {
        self.geometry
    }
    fn chip_count(&self) -> u32 {
        self.chip_count
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
        let (block, range) = self.page_range(page)?;
        let split = self.geometry.page_data_bytes as usize;
        if data.len() != split || spare.len() != self.geometry.spare_bytes as usize {
            return Err(NandError::BufferSize { what: "read", expected_bytes: split, actual_bytes: data.len() });
        }
        let cells = &self.cells[range];
        data.copy_from_slice(&cells[..split]);
        spare.copy_from_slice(&cells[split..]);
        let status = if page.page_index < self.next_page[block] { ReadStatus::Clean } else { ReadStatus::Erased };
        // Reads take `&self`, so they do not advance the chip's clock (a RAM flash has no queue).
        let done_ns = issue_ns.max(self.busy_until[page.chip.0 as usize]) + self.timing.read_latency_ns;
        Ok(Completed { value: status, done_ns })
    }
    fn program_page(
        &mut self,
        issue_ns: Nanos,
        page: PageAddress,
        data: &[u8],
        spare: &[u8],
    ) -> Result<Completed<()>, NandError> {
        let (block, range) = self.page_range(page)?;
        let split = self.geometry.page_data_bytes as usize;
        if data.len() != split || spare.len() != self.geometry.spare_bytes as usize {
            return Err(NandError::BufferSize { what: "program", expected_bytes: split, actual_bytes: data.len() });
        }
        let next = self.next_page[block];
        if page.page_index < next {
            return Err(NandError::OutOfOrder { page, last_programmed_index: next - 1 });
        }
        self.cells[range.start..range.start + split].copy_from_slice(data);
        self.cells[range.start + split..range.end].copy_from_slice(spare);
        self.next_page[block] = page.page_index + 1;
        let done_ns = self.finish(issue_ns, page.chip, self.timing.program_latency_ns);
        Ok(Completed { value: (), done_ns })
    }
    fn erase_block(&mut self, issue_ns: Nanos, block: BlockAddress) -> Result<Completed<()>, NandError> {
        let index = self.block_index(block)?;
        let block_bytes = (self.geometry.page_data_bytes + self.geometry.spare_bytes) as usize
            * self.geometry.pages_per_block as usize;
        self.cells[index * block_bytes..(index + 1) * block_bytes].fill(0xFF);
        self.next_page[index] = 0;
        self.erase_counts[index] += 1;
        let done_ns = self.finish(issue_ns, block.chip, self.timing.erase_latency_ns);
        Ok(Completed { value: (), done_ns })
    }
    fn is_bad_block(&self, block: BlockAddress) -> Result<bool, NandError> {
        self.block_index(block).map(|_| false)
    }
    fn mark_bad_block(&mut self, _block: BlockAddress) -> Result<(), NandError> {
        Err(NandError::InvalidConfig { reason: "this RAM flash has no bad-block table" })
    }
    fn busy_until_ns(&self, chip: ChipIndex) -> Nanos {
        self.busy_until.get(chip.0 as usize).copied().unwrap_or(0)
    }
    fn write_barrier(&mut self) -> Result<(), NandError> {
        Ok(()) // every write lands in RAM at once, in issue order
    }
    fn erase_count(&self, block: BlockAddress) -> Result<u32, NandError> {
        Ok(self.erase_counts[self.block_index(block)?])
    }
}

/// Formats, writes, remounts and reads back; returns 0, or the step that failed (2–8).
#[no_mangle]
pub extern "C" fn fsoc_no_std_selftest() -> i32 {
    let flash = RamFlash::new(2, 64);
    let Ok(mut fs) = FileSystem::format(flash, FsConfig::default(), 1) else { return 2 };
    let flags = OpenFlags { read: true, write: true, create: true, ..OpenFlags::default() };
    let Ok(fd) = fs.open(b"/hello", flags, 0o644) else { return 3 };
    let data: alloc::vec::Vec<u8> = (0..10_000u32).map(|index| (index % 251) as u8).collect();
    if fs.pwrite(fd, 0, &data) != Ok(data.len()) || fs.fsync_fd(fd).is_err() || fs.close(fd).is_err() {
        return 4;
    }
    let Ok(flash) = fs.unmount() else { return 5 };
    let Ok(fs) = FileSystem::mount(flash, FsConfig::default()) else { return 6 };
    let Ok((inode, _)) = fs.stat(b"/hello") else { return 7 };
    let mut back = alloc::vec![0u8; 12_000];
    match fs.read_into(inode, 0, &mut back) {
        Ok(read) if read == data.len() && back[..read] == data[..] => 0,
        _ => 8,
    }
}

/// Referenced so the name check is compiled in too.
#[no_mangle]
pub extern "C" fn fsoc_no_std_probe(name: *const u8, length: usize) -> i32 {
    // SAFETY: the caller passes a valid buffer of `length` bytes.
    let name = unsafe { core::slice::from_raw_parts(name, length) };
    match fsoc_core::fs::validate_name(name) {
        Ok(()) => 0,
        Err(error) => error.errno(),
    }
}

/// The precompiled `alloc` refers to the unwinding personality even with `panic = "abort"`;
/// nothing unwinds here, so it is never called (a linker symbol only).
#[no_mangle]
pub extern "C" fn rust_eh_personality() {}
