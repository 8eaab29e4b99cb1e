//! Holes: SEEK_DATA / SEEK_HOLE as Linux defines them, and punching a hole (fallocate's
//! PUNCH_HOLE | KEEP_SIZE): zeros where punched, whole pages unmapped, size kept.

use fsoc_core::fs::FileKind;
use fsoc_core::{FileSystem, FsConfig, FsError};
use fsoc_media::{Profile, RamStore, SimConfig, SimFlash};

fn volume() -> (FileSystem<SimFlash<RamStore>>, u64) {
    let flash = SimFlash::create(SimConfig::new(Profile::Mlc, 1, 128, 3)).expect("flash");
    let fs = FileSystem::format(flash, FsConfig::default(), 3).expect("format");
    let page = u64::from(fs.layout().geometry.page_data_bytes);
    (fs, page)
}

#[test]
fn seek_data_and_seek_hole_follow_the_extents() {
    let (mut fs, page) = volume();
    let inode = fs.create(1, b"sparse", FileKind::File, 0o644, 0, 0, None).expect("create");
    let page_bytes = page as usize;
    fs.write(inode, 0, &vec![1u8; page_bytes]).expect("page 0");
    fs.write(inode, 4 * page, &vec![4u8; page_bytes]).expect("page 4");
    fs.truncate(inode, 6 * page).expect("grow: pages 5 is a hole");

    assert_eq!(fs.seek_data(inode, 0), Ok(0));
    assert_eq!(fs.seek_data(inode, 10), Ok(10), "inside data: the offset itself");
    assert_eq!(fs.seek_hole(inode, 0), Ok(page));
    assert_eq!(fs.seek_hole(inode, page + 7), Ok(page + 7), "inside a hole: the offset itself");
    assert_eq!(fs.seek_data(inode, page), Ok(4 * page));
    assert_eq!(fs.seek_hole(inode, 4 * page), Ok(5 * page));
    assert_eq!(fs.seek_data(inode, 5 * page), Err(FsError::NoSuchOffset), "only a hole follows");
    assert_eq!(fs.seek_hole(inode, 5 * page), Ok(5 * page));
    assert_eq!(fs.seek_data(inode, 6 * page), Err(FsError::NoSuchOffset), "at the end");
    assert_eq!(fs.seek_hole(inode, 6 * page), Err(FsError::NoSuchOffset), "at the end");
    assert_eq!(FsError::NoSuchOffset.errno(), 6, "ENXIO");

    // The end of the file is a hole even when data runs up to it.
    let full = fs.create(1, b"full", FileKind::File, 0o644, 0, 0, None).expect("create");
    fs.write(full, 0, &vec![9u8; 3 * page_bytes + 5]).expect("write");
    assert_eq!(fs.seek_hole(full, 0), Ok(3 * page + 5));
    // An inline (small) file is all data.
    let small = fs.create(1, b"small", FileKind::File, 0o644, 0, 0, None).expect("create");
    fs.write(small, 0, b"tiny").expect("write");
    assert_eq!((fs.seek_data(small, 1), fs.seek_hole(small, 1)), (Ok(1), Ok(4)));
    let directory = fs.create(1, b"dir", FileKind::Directory, 0o755, 0, 0, None).expect("mkdir");
    assert_eq!(fs.seek_data(directory, 0), Err(FsError::IsDirectory));
}

#[test]
fn punching_a_hole_zeroes_the_range_frees_whole_pages_and_keeps_the_size() {
    let (mut fs, page) = volume();
    let page_bytes = page as usize;
    let inode = fs.create(1, b"punched", FileKind::File, 0o644, 0, 0, None).expect("create");
    fs.write(inode, 0, &vec![0xAB; 4 * page_bytes]).expect("write");
    // [page/2, 2.5 pages): page 1 whole, the ends of pages 0 and 2.
    fs.punch_hole(inode, page / 2, 2 * page).expect("punch");
    let content = fs.read(inode, 0, 4 * page_bytes + 10).expect("read");
    assert_eq!(content.len(), 4 * page_bytes, "the size is kept");
    let (start, end) = (page_bytes / 2, page_bytes / 2 + 2 * page_bytes);
    assert!(content[..start].iter().all(|&byte| byte == 0xAB), "before the hole");
    assert!(content[start..end].iter().all(|&byte| byte == 0), "the hole reads as zeros");
    assert!(content[end..].iter().all(|&byte| byte == 0xAB), "after the hole");
    assert_eq!(fs.seek_hole(inode, 0), Ok(page), "page 1 is unmapped");
    assert_eq!(fs.seek_data(inode, page), Ok(2 * page));
    // Past the end: nothing changes, the size neither.
    fs.punch_hole(inode, 10 * page, page).expect("punch past the end");
    assert_eq!(fs.getattr(inode).expect("stat").size, 4 * page);
    assert!(fs.fsck(true).expect("fsck").is_clean());
}

/// Format version 10: pages past 2^32 in a file (2 KiB pages, from 8 TiB on) keep their index
/// whole through the cleaner, which finds a page's owner by its spare tag (bits 32-39 of the
/// index in byte 3): every page moved reads back, and fsck's data pass finds every tag right.
#[test]
fn the_cleaner_moves_pages_past_two_to_the_32_with_their_whole_index() {
    let flash = SimFlash::create(SimConfig::new(Profile::Mlc, 1, 24, 5)).expect("flash");
    let mut fs = FileSystem::format(flash, FsConfig::default(), 5).expect("format");
    let page = u64::from(fs.layout().geometry.page_data_bytes);
    assert!(fs.file_bytes_max() / page > 1 << 32, "this volume's files reach past 2^32 pages");
    let huge = fs.create(1, b"huge", FileKind::File, 0o644, 0, 0, None).expect("create");
    let base = (1u64 << 32) + 7;
    for index in 0..40u64 {
        // Whole pages: a few bytes alone would be a short page, kept in the tree.
        let mut bytes = format!("page {index} past 2^32").into_bytes();
        bytes.resize(page as usize, 0);
        fs.write(huge, (base + index * 3) * page, &bytes).expect("write past 2^32 pages");
    }
    fs.transact().expect("commit");
    // Churn: rewrite a scratch file until the cleaner has moved pages many times over.
    let scratch = fs.create(1, b"scratch", FileKind::File, 0o644, 0, 0, None).expect("create");
    let relocated_before = fs.stats.pages_relocated;
    for round in 0..60u64 {
        fs.write(scratch, 0, &vec![round as u8; 200 * page as usize]).expect("churn");
        fs.transact().expect("commit");
    }
    assert!(fs.stats.pages_relocated > relocated_before + 40, "the cleaner moved too little to tell");
    for index in 0..40u64 {
        let expected = format!("page {index} past 2^32").into_bytes();
        let read = fs.read(huge, (base + index * 3) * page, expected.len()).expect("read");
        assert_eq!(read, expected, "page {}", base + index * 3);
    }
    let report = fs.fsck(false).expect("fsck");
    assert!(report.is_clean(), "{:?}", report.violations);
    let data = fs.fsck_data(&mut |_| {}).expect("fsck data");
    assert_eq!((data.misplaced_pages, data.checksum_failed_pages), (0, 0), "{:?}", data.violations);
}

/// fallocate as the first call after a clean mount (which does not read the segment table)
/// loads the table itself: it used to panic ("segment table used before it was loaded").
#[test]
fn fallocate_right_after_a_clean_mount_answers() {
    let (mut fs, _) = volume();
    let inode = fs.create(1, b"f", FileKind::File, 0o644, 0, 0, None).expect("create");
    let mut fs = FileSystem::mount(fs.unmount().expect("unmount"), FsConfig::default()).expect("mount");
    fs.allocate(inode, 0, 10_000, false).expect("fallocate");
    assert_eq!(fs.getattr(inode).expect("getattr").size, 10_000);
    assert!(fs.fsck(true).expect("fsck").is_clean());
}
