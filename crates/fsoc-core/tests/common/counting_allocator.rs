//! A counting global allocator for heap measurements, counted per thread.
//!
//! A test binary runs its tests on several threads at once. With one process-wide counter, a
//! test's peak included whatever the other tests had allocated meanwhile (a 64 MiB read buffer
//! in one test made another's fsck look like 64 MiB), and one test resetting the peak erased
//! another's: the measurement depended on scheduling. Counting on the allocating thread makes
//! `peak_during` see only what the measured work allocated, which is exact as long as that work
//! allocates and frees on its own thread (the core spawns no threads).
//!
//! A test binary includes it with `#[path = "common/counting_allocator.rs"] mod
//! counting_allocator;`; it installs itself as the binary's global allocator.
#![allow(dead_code)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

struct Counting;

thread_local! {
    // Const-initialised and without a destructor, so reaching them never allocates (no
    // recursion into the allocator) and works during thread teardown.
    static CURRENT: Cell<isize> = const { Cell::new(0) };
    static PEAK: Cell<isize> = const { Cell::new(0) };
}

fn count(delta: isize) {
    let _ = CURRENT.try_with(|current| {
        let now = current.get() + delta;
        current.set(now);
        let _ = PEAK.try_with(|peak| peak.set(peak.get().max(now)));
    });
}

// The default `realloc` and `alloc_zeroed` go through `alloc` and `dealloc`, so a reallocation
// counts the old and the new block together, as it holds both while copying.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count(layout.size() as isize);
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, pointer: *mut u8, layout: Layout) {
        count(-(layout.size() as isize));
        unsafe { System.dealloc(pointer, layout) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// Bytes this thread has allocated and not freed (negative if it freed others' blocks).
pub fn current_bytes() -> isize {
    CURRENT.with(Cell::get)
}

/// Peak heap growth on this thread (bytes above the level at the start) while `work` runs.
pub fn peak_during<T>(work: impl FnOnce() -> T) -> (T, usize) {
    let base = CURRENT.with(Cell::get);
    PEAK.with(|peak| peak.set(base));
    let result = work();
    let peak = PEAK.with(Cell::get);
    (result, usize::try_from(peak - base).unwrap_or(0))
}
