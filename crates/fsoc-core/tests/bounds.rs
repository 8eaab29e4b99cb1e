//! Bounded costs: mount reads the same number of pages whatever the number of files, and an
//! fsync of a small change programs a number of pages set by the tree height, not by the
//! volume's size or file count.
mod common;
use common::*;
use fsoc_core::{FileSystem, FsConfig, OpenFlags};
use fsoc_media::FlashStats;
use fsoc_media::{Profile, SimFlash};

fn volume_with_files(file_count: u64, blocks: u32) -> FileSystem<SimFlash> {
    volume_with_files_config(file_count, blocks, FsConfig::default())
}

fn volume_with_files_config(file_count: u64, blocks: u32, config: FsConfig) -> FileSystem<SimFlash> {
    let mut fs = FileSystem::format(sim(Profile::Mlc, 1, blocks, 3), config, 3).expect("format");
    let create = OpenFlags { write: true, create: true, exclusive: true, ..Default::default() };
    for index in 0..file_count {
        if index % 1000 == 0 {
            fs.mkdir(format!("/d{}", index / 1000).as_bytes(), 0o755).expect("mkdir");
        }
        let fd = fs.open(format!("/d{}/f{index}", index / 1000).as_bytes(), create, 0o644).expect("create");
        fs.close(fd).expect("close");
        if index % 5000 == 4999 {
            fs.transact().expect("commit");
        }
    }
    fs
}

fn mount_reads(file_count: u64) -> u64 {
    let fs = volume_with_files(file_count, 1024);
    let mut flash = fs.unmount().expect("unmount");
    flash.reset_counters();
    let fs = FileSystem::mount(flash, FsConfig::default()).expect("mount");
    let report = fs.mount_report();
    assert!(report.clean);
    // Everything FileSystem::mount read, not just the volume's metaroot search.
    let page_reads = fs.flash().counters().totals().reads;
    assert_eq!(page_reads, report.page_reads, "mount read pages beyond the metaroot search");
    page_reads
}

/// Mount with 10, 1,000 and 100,000 files: identical page reads, and few of them
/// (1 superblock + pages 0 and 1 of the 3 metaroot areas + a binary search of the current one).
#[test]
fn mount_page_reads_do_not_depend_on_file_count() {
    let reads: Vec<u64> = [10, 1_000, 100_000].iter().map(|&count| mount_reads(count)).collect();
    println!("mount page reads at 10 / 1,000 / 100,000 files: {reads:?}");
    assert!(reads.iter().all(|&r| r == reads[0]), "mount reads vary with file count: {reads:?}");
    // 1 superblock + 6 area pages + log2(64) binary search + the newest record (DESIGN.md).
    assert_eq!(reads[0], 14, "mount reads {} pages", reads[0]);
}

fn small_fsync_programs(fs: &mut FileSystem<SimFlash>, path: &str) -> (u64, u64) {
    let fd =
        fs.open(path.as_bytes(), OpenFlags { write: true, create: true, ..Default::default() }, 0o644).expect("open");
    fs.transact().expect("settle");
    let before = fs.flash().counters().totals();
    fs.pwrite(fd, 10, b"a small change").expect("write");
    fs.fsync_fd(fd).expect("fsync");
    let after = fs.flash().counters().totals();
    fs.close(fd).expect("close");
    (after.programs - before.programs, after.erases - before.erases)
}

/// An fsync'd small change costs one page program with delta commits (the metaroot carrying
/// the change), and with full commits a few: the dirty path of each tree (height), a
/// segment-table page and the metaroot — the same on a small, empty volume and on a large one
/// holding 20,000 files.
#[test]
fn a_small_fsync_programs_pages_bounded_by_tree_height() {
    let full = FsConfig { delta_commits: false, ..FsConfig::default() };
    for (label, config, bound_small, bound_large) in [("delta", FsConfig::default(), 1, 1), ("full", full, 6, 10)] {
        let mut small = volume_with_files_config(10, 128, config);
        let mut large = volume_with_files_config(20_000, 2048, config);
        let (small_programs, small_erases) = small_fsync_programs(&mut small, "/d0/f3");
        let (large_programs, large_erases) = small_fsync_programs(&mut large, "/d7/f7003");
        println!("programs per small fsync ({label} commits): {small_programs} (10 files, 128 blocks), {large_programs} (20,000 files, 2048 blocks)");
        assert!(small_programs <= bound_small, "{label}, small volume: {small_programs} programs");
        assert!(large_programs <= bound_large, "{label}, large volume: {large_programs} programs");
        assert_eq!(small_erases + large_erases, 0, "an fsync erased a block");
    }
}
