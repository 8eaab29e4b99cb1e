//! Conversions between fsoc inode records and what the kernel expects: `FileAttr`, file
//! types, timestamps and errno values.
//!
//! Invariants: an fsoc inode number is passed to the kernel unchanged (root = 1 = FUSE's root
//! id), and a timestamp round-trips exactly for every instant at or after the epoch.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fsoc_core::fs::{FileKind, FsError, InodeRecord};
use fuser::{Errno, FileAttr, FileType, INodeNo};

/// Bytes per unit of `st_blocks`, fixed by POSIX.
const STAT_BLOCK_BYTES: u64 = 512;

pub fn file_type(kind: FileKind) -> FileType {
    match kind {
        FileKind::File => FileType::RegularFile,
        FileKind::Directory => FileType::Directory,
        FileKind::Symlink => FileType::Symlink,
        FileKind::CharDevice => FileType::CharDevice,
        FileKind::BlockDevice => FileType::BlockDevice,
        FileKind::Fifo => FileType::NamedPipe,
        FileKind::Socket => FileType::Socket,
    }
}

/// The kernel's 32-bit device number in FUSE messages (new_encode_dev) from fsoc's `dev_t`.
pub fn fuse_rdev(rdev: u64) -> u32 {
    let (major, minor) = fsoc_core::fs::records::split_device_number(rdev);
    (minor & 0xff) | (major << 8) | ((minor & !0xff) << 12)
}

/// fsoc's `dev_t` from the kernel's 32-bit device number (new_decode_dev).
pub fn rdev_from_fuse(rdev: u32) -> u64 {
    let major = (rdev & 0xfff00) >> 8;
    let minor = (rdev & 0xff) | ((rdev >> 12) & 0xfff00);
    fsoc_core::fs::records::make_device_number(major, minor)
}

/// Nanoseconds since the epoch as a `SystemTime`.
pub fn system_time(time_ns: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_nanos(time_ns)
}

/// A `SystemTime` as nanoseconds since the epoch. fsoc stores unsigned nanoseconds, so times
/// before 1970 are clamped to the epoch and times after 2554 to the largest value.
pub fn time_ns(time: SystemTime) -> u64 {
    match time.duration_since(UNIX_EPOCH) {
        Ok(since) => u64::try_from(since.as_nanos()).unwrap_or(u64::MAX),
        Err(_) => 0,
    }
}

/// The wall clock in nanoseconds since the epoch (fsoc-core reads no clock itself).
pub fn now_ns() -> u64 {
    time_ns(SystemTime::now())
}

/// The attributes the kernel caches for `inode`. `st_blocks` counts the size rounded up to
/// whole pages: fsoc does not track allocated pages per inode, so sparse files report their
/// apparent size (see the crate documentation).
pub fn file_attr(inode: u64, record: &InodeRecord, page_size_bytes: u32) -> FileAttr {
    let page_bytes = u64::from(page_size_bytes.max(1));
    let allocated_bytes = match record.kind {
        FileKind::File => record.size.div_ceil(page_bytes).saturating_mul(page_bytes),
        _ => 0,
    };
    FileAttr {
        ino: INodeNo(inode),
        size: record.size,
        blocks: allocated_bytes / STAT_BLOCK_BYTES,
        atime: system_time(record.atime_ns),
        mtime: system_time(record.mtime_ns),
        ctime: system_time(record.ctime_ns),
        crtime: system_time(record.ctime_ns),
        kind: file_type(record.kind),
        perm: (record.mode & 0o7777) as u16,
        nlink: record.nlink,
        uid: record.uid,
        gid: record.gid,
        rdev: fuse_rdev(record.rdev()),
        blksize: page_size_bytes,
        flags: 0,
    }
}

/// The errno for a file-system error: `FsError::errno` is the one mapping in fsoc.
pub fn errno(error: &FsError) -> Errno {
    Errno::from_i32(error.errno())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(kind: FileKind, size: u64) -> InodeRecord {
        InodeRecord {
            kind,
            mode: 0o4755,
            uid: 1000,
            gid: 100,
            nlink: 1,
            flags: 0,
            size,
            atime_ns: 1_700_000_000_123_456_789,
            mtime_ns: 5,
            ctime_ns: 0,
            parent: 0,
        }
    }

    #[test]
    fn attributes_carry_every_field() {
        let attr = file_attr(42, &record(FileKind::File, 4097), 4096);
        assert_eq!(attr.ino, INodeNo(42));
        assert_eq!(attr.size, 4097);
        assert_eq!(attr.blocks, 2 * 4096 / 512, "size rounded up to whole pages");
        assert_eq!(attr.perm, 0o4755, "setuid bit kept");
        assert_eq!((attr.uid, attr.gid, attr.nlink), (1000, 100, 1));
        assert_eq!(attr.kind, FileType::RegularFile);
        assert_eq!(attr.blksize, 4096);
        assert_eq!(time_ns(attr.atime), 1_700_000_000_123_456_789, "nanoseconds round-trip");
        assert_eq!(time_ns(attr.mtime), 5);
        assert_eq!(file_attr(1, &record(FileKind::Directory, 0), 4096).kind, FileType::Directory);
        assert_eq!(file_attr(1, &record(FileKind::Symlink, 9), 4096).blocks, 0);
    }

    #[test]
    fn times_before_the_epoch_clamp_to_zero() {
        assert_eq!(time_ns(UNIX_EPOCH - Duration::from_secs(10)), 0);
        assert_eq!(time_ns(UNIX_EPOCH + Duration::from_nanos(7)), 7);
    }

    #[test]
    fn errors_map_through_fsoc_core() {
        assert_eq!(errno(&FsError::NotFound), Errno::ENOENT);
        assert_eq!(errno(&FsError::NoSpace), Errno::ENOSPC);
        assert_eq!(errno(&FsError::Corrupt("test")), Errno::EIO);
    }
}
