//! A no_std staticlib that uses fsoc-core's API, so the core must compile and link without std.
#![no_std]

extern crate alloc;

use core::alloc::{GlobalAlloc, Layout};

struct NoAllocator;

unsafe impl GlobalAlloc for NoAllocator {
    unsafe fn alloc(&self, _layout: Layout) -> *mut u8 {
        core::ptr::null_mut()
    }
    unsafe fn dealloc(&self, _pointer: *mut u8, _layout: Layout) {}
}

#[global_allocator]
static ALLOCATOR: NoAllocator = NoAllocator;

#[panic_handler]
fn panic(_info: &core::panic::PanicInfo) -> ! {
    loop {}
}

/// Referenced so the file-system code is actually compiled into the library.
#[no_mangle]
pub extern "C" fn fsoc_no_std_probe(name: *const u8, length: usize) -> i32 {
    let name = unsafe { core::slice::from_raw_parts(name, length) };
    match fsoc_core::fs::validate_name(name) {
        Ok(()) => 0,
        Err(error) => error.errno(),
    }
}
