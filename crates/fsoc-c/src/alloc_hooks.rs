//! The heap is the caller's: `fsoc_set_allocator` hands the library two callbacks (allocate,
//! release), and every allocation of the core goes through them. The library counts what it
//! holds, so the RAM a configuration needs is measured, not guessed (`fsoc_memory_usage`).

use core::alloc::{GlobalAlloc, Layout};
use core::ffi::c_void;
use core::sync::atomic::{AtomicPtr, AtomicUsize, Ordering};

type FsocAllocate = unsafe extern "C" fn(context: *mut c_void, size: usize, align: usize) -> *mut c_void;
type FsocRelease = unsafe extern "C" fn(context: *mut c_void, pointer: *mut c_void, size: usize, align: usize);

/// The caller's heap. `context` is handed back to both callbacks unchanged.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct FsocAllocator {
    pub context: *mut c_void,
    /// Allocates `size` bytes aligned to `align` (a power of two); NULL when there is no room.
    pub allocate: Option<unsafe extern "C" fn(context: *mut c_void, size: usize, align: usize) -> *mut c_void>,
    /// Releases what `allocate` returned, with the same size and alignment.
    pub release: Option<unsafe extern "C" fn(context: *mut c_void, pointer: *mut c_void, size: usize, align: usize)>,
}

/// What the library holds of the caller's heap.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct FsocMemoryUsage {
    /// Bytes held now (as requested; the caller's allocator may add its own overhead).
    pub current_bytes: usize,
    /// The most held at once since the allocator was set or the peak was last reset.
    pub peak_bytes: usize,
    /// Allocations made, in all.
    pub allocation_count: usize,
}

/// The callbacks, stored as addresses (null until set).
pub struct CallerHeap {
    context: AtomicPtr<c_void>,
    allocate: AtomicUsize,
    release: AtomicUsize,
    current_bytes: AtomicUsize,
    peak_bytes: AtomicUsize,
    allocation_count: AtomicUsize,
}

impl CallerHeap {
    pub const fn new() -> CallerHeap {
        CallerHeap {
            context: AtomicPtr::new(core::ptr::null_mut()),
            allocate: AtomicUsize::new(0),
            release: AtomicUsize::new(0),
            current_bytes: AtomicUsize::new(0),
            peak_bytes: AtomicUsize::new(0),
            allocation_count: AtomicUsize::new(0),
        }
    }

    /// Installs the callbacks. Refused (false) while the library holds memory from earlier ones.
    pub fn set(&self, allocator: &FsocAllocator) -> bool {
        let (Some(allocate), Some(release)) = (allocator.allocate, allocator.release) else { return false };
        if self.current_bytes.load(Ordering::Acquire) != 0 {
            return false;
        }
        self.context.store(allocator.context, Ordering::Release);
        self.release.store(release as usize, Ordering::Release);
        self.allocate.store(allocate as usize, Ordering::Release);
        self.peak_bytes.store(0, Ordering::Release);
        true
    }

    pub fn is_set(&self) -> bool {
        self.allocate.load(Ordering::Acquire) != 0
    }

    pub fn usage(&self) -> FsocMemoryUsage {
        FsocMemoryUsage {
            current_bytes: self.current_bytes.load(Ordering::Acquire),
            peak_bytes: self.peak_bytes.load(Ordering::Acquire),
            allocation_count: self.allocation_count.load(Ordering::Acquire),
        }
    }

    pub fn reset_peak(&self) {
        self.peak_bytes.store(self.current_bytes.load(Ordering::Acquire), Ordering::Release);
    }
}

impl Default for CallerHeap {
    fn default() -> Self {
        CallerHeap::new()
    }
}

// SAFETY: the callbacks are the caller's heap, which hands out distinct blocks; the counters are
// atomic. Before `fsoc_set_allocator` every allocation fails (NULL), which the library's entry
// points prevent by refusing to run (-ENOMEM).
unsafe impl GlobalAlloc for CallerHeap {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let address = self.allocate.load(Ordering::Acquire);
        if address == 0 {
            return core::ptr::null_mut();
        }
        // SAFETY: `address` was stored from an `FsocAllocate` in `set`.
        let allocate: FsocAllocate = unsafe { core::mem::transmute::<usize, FsocAllocate>(address) };
        // SAFETY: the caller's callback, with the context it gave.
        let pointer = unsafe { allocate(self.context.load(Ordering::Acquire), layout.size(), layout.align()) };
        if !pointer.is_null() {
            let now = self.current_bytes.fetch_add(layout.size(), Ordering::AcqRel) + layout.size();
            self.peak_bytes.fetch_max(now, Ordering::AcqRel);
            self.allocation_count.fetch_add(1, Ordering::AcqRel);
        }
        pointer.cast()
    }

    unsafe fn dealloc(&self, pointer: *mut u8, layout: Layout) {
        let address = self.release.load(Ordering::Acquire);
        if address == 0 {
            return;
        }
        // SAFETY: stored from an `FsocRelease` in `set`.
        let release: FsocRelease = unsafe { core::mem::transmute::<usize, FsocRelease>(address) };
        // SAFETY: `pointer` came from this heap's `alloc` with this layout.
        unsafe { release(self.context.load(Ordering::Acquire), pointer.cast(), layout.size(), layout.align()) };
        self.current_bytes.fetch_sub(layout.size(), Ordering::AcqRel);
    }
}
