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
