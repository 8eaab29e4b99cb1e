//! A no_std staticlib that runs fsoc-core: the core must compile and link without std, and
//! `fsoc_no_std_selftest` (called by main.c, which scripts/test.sh builds with gcc and runs)
//! formats a simulated RAM volume, writes a file, unmounts, mounts again and reads it back,
//! all without std, on a bump allocator over a static arena.
#![no_std]

extern crate alloc;

use core::alloc::{GlobalAlloc, Layout};
use core::cell::UnsafeCell;
use core::sync::atomic::{AtomicUsize, Ordering};

use fsoc_core::{FileSystem, FsConfig, OpenFlags};
use fsoc_media::{Profile, SimConfig, SimFlash};

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

/// Formats, writes, remounts and reads back; returns 0, or the step that failed (1–8).
#[no_mangle]
pub extern "C" fn fsoc_no_std_selftest() -> i32 {
    let Ok(flash) = SimFlash::create(SimConfig::new(Profile::Slc, 2, 64, 1)) else { return 1 };
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
