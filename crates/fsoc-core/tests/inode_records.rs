//! Format version 5's inode records: the count of mapped data pages (st_blocks) follows every
//! change that maps or unmaps pages, fsck finds it equal to the extents after each, and the
//! signed times and the birth time survive a remount; rename exchange and whiteouts keep link
//! counts that fsck accepts.
mod common;
use common::*;
use fsoc_core::fs::{FileKind, InodeRecord};
use fsoc_core::{FileSystem, FsConfig, FsError};
use fsoc_media::{Profile, SimFlash};

const ROOT: u64 = 1;

fn volume() -> (FileSystem<SimFlash>, u64) {
    let fs = FileSystem::format(sim(Profile::Mlc, 1, 128, 5), FsConfig::default(), 5).expect("format");
    let page = u64::from(fs.layout().geometry.page_data_bytes);
    (fs, page)
}

fn pages(fs: &FileSystem<SimFlash>, inode: u64) -> u64 {
    fs.getattr(inode).expect("getattr").pages
}

#[test]
fn the_page_count_follows_writes_holes_truncates_and_allocations() {
    let (mut fs, page) = volume();
    let page_bytes = page as usize;
    fs.now_ns = 1_000;
    let inode = fs.create(ROOT, b"f", FileKind::File, 0o644, 0, 0, None).expect("create");
    let check = |fs: &mut FileSystem<SimFlash>, expected: u64, step: &str| {
        assert_eq!(pages(fs, inode), expected, "{step}");
        assert_clean(fs, step);
    };
    fs.write(inode, 0, b"inline").expect("inline write");
    check(&mut fs, 0, "an inline file maps no page");
    fs.write(inode, 0, &vec![1u8; 3 * page_bytes]).expect("write 3 pages");
    check(&mut fs, 3, "three pages");
    fs.write(inode, page, &vec![2u8; page_bytes]).expect("overwrite");
    check(&mut fs, 3, "an overwrite maps as many as it unmaps");
    // More than a tree entry holds, so page 10 is a data page, not a short page.
    fs.write(inode, 10 * page + 5, &vec![4u8; page_bytes / 2]).expect("write past a hole");
    check(&mut fs, 4, "a hole is not counted");
    fs.punch_hole(inode, 0, 2 * page).expect("punch");
    check(&mut fs, 2, "punched pages are unmapped");
    fs.zero_range(inode, 2 * page, page, true).expect("zero range");
    check(&mut fs, 1, "a zeroed whole page is unmapped");
    fs.allocate(inode, 0, 20 * page, false).expect("allocate");
    check(&mut fs, 1, "fallocate reserves nothing");
    assert_eq!(fs.getattr(inode).expect("getattr").size, 20 * page, "mode 0 extends the size");
    fs.truncate(inode, 10 * page + 1).expect("truncate into the last page");
    check(&mut fs, 1, "the cut page is kept (its byte below the size as a short page), not added");
    fs.truncate(inode, 5 * page).expect("truncate below it");
    check(&mut fs, 0, "truncated away");
    fs.write(inode, 0, &vec![3u8; 3 * page_bytes - 1]).expect("rewrite");
    check(&mut fs, 3, "written again");
    fs.write(inode, 5 * page, &[5u8; 10]).expect("append a little at the end (5 pages)");
    check(&mut fs, 4, "a short page counts as a page");
    assert_eq!(fs.allocate(inode, 0, 1 << 40, true), Err(FsError::NoSpace), "more than the volume holds");
    assert_eq!(fs.allocate(inode, 0, 0, false), Err(FsError::InvalidArgument("fallocate of an empty range")));

    // A copy of a file grown past one extent batch, then deleted: fsck stays clean.
    let big = fs.create(ROOT, b"big", FileKind::File, 0o644, 0, 0, None).expect("create");
    fs.write(big, 0, &vec![7u8; 300 * page_bytes]).expect("big write");
    assert_eq!(pages(&fs, big), 300);
    fs.unlink(b"/big").expect("unlink");
    assert_clean(&mut fs, "after deleting a big file");

    let flash = fs.unmount().expect("unmount");
    let mut fs = FileSystem::mount(flash, FsConfig::default()).expect("mount");
    assert_eq!(pages(&fs, inode), 4, "the count is on flash");
    assert_clean(&mut fs, "remounted");
}

#[test]
fn times_before_1970_and_the_birth_time_survive_a_remount() {
    let (mut fs, _) = volume();
    fs.now_ns = 1_700_000_000_000_000_000;
    let inode = fs.create(ROOT, b"old", FileKind::File, 0o644, 0, 0, None).expect("create");
    fs.now_ns += 5_000_000_000;
    fs.setattr(inode, None, None, None, Some(-1), Some(-86_400_000_000_123)).expect("times before 1970");
    fs.write(inode, 0, b"changed later").expect("write");
    let record: InodeRecord = fs.getattr(inode).expect("getattr");
    assert_eq!((record.atime_ns, record.btime_ns), (-1, 1_700_000_000_000_000_000), "birth time kept");
    let flash = fs.unmount().expect("unmount");
    let mut fs = FileSystem::mount(flash, FsConfig::default()).expect("mount");
    let after = fs.getattr(inode).expect("getattr");
    assert_eq!(after, record);
    fs.setattr(inode, None, None, None, Some(i64::MIN), Some(i64::MAX)).expect("the extremes");
    let extremes = fs.getattr(inode).expect("getattr");
    assert_eq!((extremes.atime_ns, extremes.mtime_ns), (i64::MIN, i64::MAX));
    assert_clean(&mut fs, "times");
}

#[test]
fn exchanges_and_whiteouts_keep_the_volume_consistent() {
    let (mut fs, _) = volume();
    let directory = fs.create(ROOT, b"d", FileKind::Directory, 0o755, 0, 0, None).expect("mkdir");
    let inner = fs.create(directory, b"inner", FileKind::Directory, 0o755, 0, 0, None).expect("mkdir");
    let file = fs.create(ROOT, b"f", FileKind::File, 0o644, 0, 0, None).expect("create");
    // A directory in d and a file in the root trade places: link counts move with `..`.
    fs.rename_exchange((directory, b"inner"), (ROOT, b"f")).expect("exchange");
    assert_eq!(fs.lookup(ROOT, b"f"), Ok((inner, FileKind::Directory)));
    assert_eq!(fs.lookup(directory, b"inner"), Ok((file, FileKind::File)));
    assert_eq!(fs.getattr(inner).expect("getattr").parent, ROOT);
    assert_eq!(fs.getattr(directory).expect("getattr").nlink, 2);
    assert_eq!(fs.getattr(ROOT).expect("getattr").nlink, 4, "root: ., d's .., f's ..");
    assert_clean(&mut fs, "after an exchange");
    assert!(matches!(fs.rename_exchange((ROOT, b"d"), (directory, b"inner")), Err(FsError::InvalidArgument(_))));
    assert_eq!(fs.rename_exchange((ROOT, b"missing"), (ROOT, b"d")), Err(FsError::NotFound));
    // The whiteout: a character device 0:0 left at the source, in the same change.
    fs.rename_whiteout((directory, b"inner"), (ROOT, b"moved"), (7, 8)).expect("whiteout");
    let (whiteout, kind) = fs.lookup(directory, b"inner").expect("the whiteout");
    let record = fs.getattr(whiteout).expect("getattr");
    assert_eq!((kind, record.mode, record.rdev(), record.uid, record.gid), (FileKind::CharDevice, 0, 0, 7, 8));
    assert_eq!(fs.lookup(ROOT, b"moved"), Ok((file, FileKind::File)));
    assert_clean(&mut fs, "after a whiteout");
    let flash = fs.unmount().expect("unmount");
    let mut fs = FileSystem::mount(flash, FsConfig::default()).expect("mount");
    assert_clean(&mut fs, "remounted");
}

/// Stable file handles: an inode number handed out again after a power cut lost the file that
/// had it comes with a newer generation, so the lost file's handle (number, generation) names
/// nothing; a mount commits its generation before it makes its first inode.
#[test]
fn an_inode_number_reused_after_a_power_cut_has_a_new_generation() {
    let (mut fs, _) = volume();
    let kept = fs.create(ROOT, b"kept", FileKind::File, 0o644, 0, 0, None).expect("create");
    let first_generation = fs.generation();
    assert_ne!(first_generation, 0);
    assert_eq!(fs.getattr(kept).expect("getattr").generation, first_generation);
    fs.transact().expect("delta commit");
    let lost = fs.create(ROOT, b"lost", FileKind::File, 0o644, 0, 0, None).expect("create");
    // Power cut: the creation of `lost` never reaches flash.
    let flash = fs.into_flash_without_commit();
    let mut fs = FileSystem::mount(flash, FsConfig::default()).expect("mount");
    assert_eq!(fs.lookup(ROOT, b"lost"), Err(FsError::NotFound));
    assert_eq!(fs.generation(), 0, "a mount that has made nothing has committed nothing");
    let new = fs.create(ROOT, b"new", FileKind::File, 0o644, 0, 0, None).expect("create");
    let second_generation = fs.generation();
    assert!(second_generation > first_generation, "{second_generation} after {first_generation}");
    assert_eq!(new, lost, "the lost file's number is handed out again");
    assert_eq!(fs.getattr(new).expect("getattr").generation, second_generation, "under a new generation");
    assert_eq!(fs.getattr(kept).expect("getattr").generation, first_generation, "kept files keep theirs");
    // A read-only mount makes nothing and commits nothing.
    let flash = fs.unmount().expect("unmount");
    let read_only = FsConfig {
        volume: fsoc_core::VolumeConfig { read_only: true, ..fsoc_core::VolumeConfig::default() },
        ..FsConfig::default()
    };
    let fs = FileSystem::mount(flash, read_only).expect("read-only mount");
    assert_eq!(fs.generation(), 0);
}
