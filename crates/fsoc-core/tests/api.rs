//! The calls an embedded caller writes against: reads into the caller's buffer and typed file
//! handles.
mod common;

use common::*;
use fsoc_core::{FileHandle, FsError};

#[test]
fn read_into_fills_the_callers_buffer_with_holes_as_zeros_and_stops_at_end_of_file() {
    let mut fs = fresh(256);
    let fd = fs.open(b"/sparse", CREATE, 0o644).expect("create");
    // Page 0 written, a hole, then 100 bytes at 3 pages in: a 2 KiB-page MLC volume.
    fs.pwrite(fd, 0, &pattern(2048, 1)).expect("write");
    fs.pwrite(fd, 3 * 2048, &pattern(100, 2)).expect("write");
    let size = 3 * 2048 + 100;
    let mut buffer = vec![0xEEu8; 10_000];
    let read = fs.pread_into(fd, 0, &mut buffer).expect("read");
    assert_eq!(read, size, "short read at end of file");
    assert_eq!(&buffer[..2048], &pattern(2048, 1)[..]);
    assert!(buffer[2048..3 * 2048].iter().all(|&byte| byte == 0), "the hole reads as zeros");
    assert_eq!(&buffer[3 * 2048..size], &pattern(100, 2)[..]);
    assert!(buffer[size..].iter().all(|&byte| byte == 0xEE), "nothing past the read is touched");
    // A read in the middle, smaller than the buffer's tail.
    let mut small = [0u8; 10];
    assert_eq!(fs.pread_into(fd, 2040, &mut small).expect("read"), 10);
    assert_eq!(&small[..8], &pattern(2048, 1)[2040..]);
    assert_eq!(&small[8..], &[0, 0]);
    assert_eq!(fs.pread_into(fd, size as u64, &mut small).expect("read at end"), 0);
    // Inline files too, and the same answer as the allocating read.
    write_file(&mut fs, "/small", b"tiny").expect("write");
    let (inode, _) = fs.stat(b"/small").expect("stat");
    let mut four = [0u8; 64];
    assert_eq!(fs.read_into(inode, 1, &mut four).expect("read"), 3);
    assert_eq!(&four[..3], b"iny");
    assert_eq!(fs.read(inode, 1, 64).expect("read"), b"iny");
    assert_eq!(fs.read_into(1, 0, &mut four), Err(FsError::IsDirectory));
    fs.close(fd).expect("close");
}

#[test]
fn a_file_handle_is_only_what_open_returned() {
    let mut fs = fresh(256);
    let fd = fs.open(b"/file", CREATE, 0o644).expect("create");
    assert_eq!(FileHandle::from_number(fd.number()), fd);
    let stranger = FileHandle::from_number(fd.number() + 1);
    assert_eq!(fs.pwrite(stranger, 0, b"x"), Err(FsError::BadDescriptor));
    assert_eq!(fs.close(stranger), Err(FsError::BadDescriptor));
    fs.close(fd).expect("close");
    assert_eq!(fs.close(fd), Err(FsError::BadDescriptor), "a closed handle is refused");
}

/// A listing reads each directory-tree node at most once (a cursor, not a descent per entry):
/// 100,000 entries on a cold volume cost at most the directory tree's node count in page
/// reads, and far fewer than one per entry.
#[test]
fn readdir_of_100000_entries_reads_each_node_at_most_once() {
    let mut fs = fresh(2048);
    fs.mkdir(b"/big", 0o755).expect("mkdir");
    let (directory, _) = fs.stat(b"/big").expect("stat");
    let count = 100_000usize;
    for index in 0..count {
        fs.create(directory, format!("f{index:06}").as_bytes(), fsoc_core::fs::FileKind::File, 0o644, 0, 0, None)
            .expect("create");
    }
    let flash = fs.unmount().expect("unmount");
    let mut fs = fsoc_core::FileSystem::mount(flash, fsoc_core::FsConfig::default()).expect("mount");
    let directory_nodes = fs.fsck(true).expect("fsck").directory_nodes;
    let flash = fs.unmount().expect("unmount");
    let fs = fsoc_core::FileSystem::mount(flash, fsoc_core::FsConfig::default()).expect("cold mount");
    let reads_before = fs.directory_tree_counters().pages_read;
    let entries = fs.readdir(directory, None, usize::MAX).expect("readdir");
    let reads = fs.directory_tree_counters().pages_read - reads_before;
    assert_eq!(entries.len(), count);
    assert!(entries.windows(2).all(|pair| pair[0].name < pair[1].name), "name order");
    println!("readdir of {count} entries: {reads} directory-tree page reads; the tree has {directory_nodes} nodes");
    assert!(reads <= directory_nodes, "{reads} reads for a tree of {directory_nodes} nodes");
    assert!(reads < count as u64 / 20, "{reads} reads for {count} entries");
}
