//! fsck's cost on a volume filled with files: peak heap (a counting global allocator; this
//! binary has a single test, so nothing else allocates meanwhile), simulated device time and
//! wall time. The suite runs a 64 MiB volume; `FSOC_FSCK_VOLUME_MIB=1024` gives the 1 GiB
//! figure quoted in the README (same geometry, same seed, by hand: it takes a few minutes).
//!
//! fsck's memory is set by the volume, not by the records: one fixed-size entry per inode, one
//! bit and one 8-byte counter per log page, one node per tree level. The bound asserted is the
//! issue's: 64 MiB plus the node cache.
mod common;

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use common::*;
use fsoc_core::{FileSystem, FsConfig, FsError};
use fsoc_media::rng::SeededRng;
use fsoc_media::Profile;

struct Counting;
static CURRENT: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let now = CURRENT.fetch_add(layout.size(), Ordering::Relaxed) + layout.size();
        PEAK.fetch_max(now, Ordering::Relaxed);
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, pointer: *mut u8, layout: Layout) {
        CURRENT.fetch_sub(layout.size(), Ordering::Relaxed);
        unsafe { System.dealloc(pointer, layout) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// Peak heap growth (bytes above the level at the start) while `work` runs.
fn peak_during<T>(work: impl FnOnce() -> T) -> (T, usize) {
    let base = CURRENT.load(Ordering::Relaxed);
    PEAK.store(base, Ordering::Relaxed);
    let result = work();
    (result, PEAK.load(Ordering::Relaxed).saturating_sub(base))
}

/// Fills an MLC volume of `mebibytes` (2 KiB pages, 128 KiB blocks, one chip) to about 85%
/// with files of seeded sizes (a third inline, the rest 4 KiB to 64 KiB), 100 per directory,
/// then fscks it after a remount and reports the figures.
#[test]
fn fsck_memory_and_time_on_a_filled_volume() {
    let mebibytes: u32 = std::env::var("FSOC_FSCK_VOLUME_MIB").ok().and_then(|text| text.parse().ok()).unwrap_or(64);
    let blocks = mebibytes * 8;
    let mut fs = FileSystem::format(sim(Profile::Mlc, 1, blocks, 11), FsConfig::default(), 11).expect("format");
    let mut rng = SeededRng::new(0xf5c4);
    let target_bytes = u64::from(mebibytes) * (1 << 20) * 85 / 100;
    let (mut written, mut files) = (0u64, 0u64);
    let chunk = pattern(64 << 10, 9);
    'fill: while written < target_bytes {
        if files % 100 == 0 {
            fs.mkdir(format!("/d{}", files / 100).as_bytes(), 0o755).expect("mkdir");
        }
        let size = if rng.below(3) == 0 { 1 + rng.below(400) } else { 4096 + rng.below(60 << 10) } as usize;
        match write_file(&mut fs, &format!("/d{}/f{files}", files / 100), &chunk[..size]) {
            Ok(()) => {}
            Err(FsError::NoSpace) => break 'fill,
            Err(error) => panic!("fill: {error:?}"),
        }
        written += size as u64;
        files += 1;
        if files % 1000 == 0 {
            fs.transact().expect("commit");
        }
    }
    let flash = fs.unmount().expect("unmount");
    let mut fs = FileSystem::mount(flash, FsConfig::default()).expect("mount");
    let clock_before = fs.device_now_ns();
    let wall = Instant::now();
    let (report, heap_bytes) = peak_during(|| fs.fsck(true).expect("fsck"));
    let wall_ms = wall.elapsed().as_millis();
    let simulated_ms = (fs.device_now_ns() - clock_before) / 1_000_000;
    assert!(report.is_clean(), "{:?}", report.violations);
    assert_eq!(report.files, files, "every file checked");
    let cache_bytes = 2 * FsConfig::default().volume.cache_bytes_max;
    println!(
        "fsck of a {mebibytes} MiB volume ({files} files, {} MiB of data, {} data pages, {} tree nodes): \
         peak heap {} KiB, simulated {simulated_ms} ms, wall {wall_ms} ms",
        written >> 20,
        report.data_pages,
        report.directory_nodes + report.allocation_nodes,
        heap_bytes >> 10,
    );
    assert!(heap_bytes < (64 << 20) + cache_bytes, "fsck used {heap_bytes} bytes of heap");
}
