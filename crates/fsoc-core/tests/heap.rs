//! Peak heap is set by configuration, not by the number of files or the size of a file:
//! measured with a counting global allocator (this test binary has a single test so nothing
//! else allocates concurrently). The flash is an image file, so the simulated chips' contents
//! are on disk rather than counted as the file system's heap.
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

use fsoc_core::{FileSystem, FsConfig, OpenFlags};
use fsoc_media::{Profile, SimConfig, SimFlash};

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
fn peak_during(work: impl FnOnce()) -> usize {
    let base = CURRENT.load(Ordering::Relaxed);
    PEAK.store(base, Ordering::Relaxed);
    work();
    PEAK.load(Ordering::Relaxed) - base
}

fn create_files<F: fsoc_media::Flash>(fs: &mut FileSystem<F>, prefix: &str, count: u32) {
    let create = OpenFlags { write: true, create: true, ..Default::default() };
    for index in 0..count {
        let fd = fs.open(format!("/{prefix}{index}").as_bytes(), create, 0o644).expect("create");
        fs.pwrite(fd, 0, &[index as u8; 100]).expect("write");
        fs.close(fd).expect("close");
        if index % 500 == 499 {
            fs.transact().expect("commit");
        }
    }
    fs.transact().expect("commit");
}

fn write_big_file<F: fsoc_media::Flash>(fs: &mut FileSystem<F>, path: &str, mebibytes: u32, chunk: &[u8]) {
    let fd =
        fs.open(path.as_bytes(), OpenFlags { write: true, create: true, ..Default::default() }, 0o644).expect("open");
    for _ in 0..mebibytes {
        fs.write_fd(fd, chunk).expect("write");
    }
    fs.fsync_fd(fd).expect("fsync");
    fs.close(fd).expect("close");
}

#[test]
fn peak_heap_is_set_by_configuration() {
    let directory = tempfile::tempdir().expect("temporary directory");
    let flash = SimFlash::create_image(&directory.path().join("heap.img"), SimConfig::new(Profile::Mlc, 1, 2048, 9))
        .expect("image");
    let mut fs = FileSystem::format(flash, FsConfig::default(), 9).expect("format");
    // Warm-up so the segment table and caches exist before measuring.
    create_files(&mut fs, "warm", 600);
    let few = peak_during(|| create_files(&mut fs, "a", 1_000));
    let many = peak_during(|| create_files(&mut fs, "b", 10_000));
    let chunk = vec![7u8; 1 << 20];
    let small_file = peak_during(|| write_big_file(&mut fs, "/small", 4, &chunk));
    let large_file = peak_during(|| write_big_file(&mut fs, "/large", 48, &chunk));
    println!("peak heap growth: 1,000 files {few} B, 10,000 files {many} B, 4 MiB file {small_file} B, 48 MiB file {large_file} B");
    // The bound comes from FsConfig: 2 trees × cache_nodes_max nodes plus dirty_nodes_max
    // nodes (decoded, about twice a page each) plus one I/O batch.
    let config = FsConfig::default();
    let page = 2048;
    let bound = (2 * config.volume.cache_nodes_max + config.volume.dirty_nodes_max) * page * 3
        + config.io_batch_pages * page * 2;
    for (label, peak) in
        [("1,000 files", few), ("10,000 files", many), ("4 MiB file", small_file), ("48 MiB file", large_file)]
    {
        assert!(peak <= bound, "{label}: peak heap growth {peak} B exceeds the configured bound {bound} B");
    }
    assert!(many <= few + few / 2 + 64 * 1024, "heap grows with file count: {few} B → {many} B");
    assert!(
        large_file <= small_file + small_file / 2 + 64 * 1024,
        "heap grows with file size: {small_file} B → {large_file} B"
    );
}
