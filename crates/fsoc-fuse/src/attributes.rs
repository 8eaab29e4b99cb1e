//! Conversions between fsoc inode records and what the kernel expects: `FileAttr`, file
//! types, timestamps and errno values.
//!
//! Invariants: an fsoc inode number is passed to the kernel unchanged (root = 1 = FUSE's root
//! id), and a timestamp round-trips exactly for every instant an i64 of nanoseconds holds
//! (1678 to 2262), before the epoch too.

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

/// Signed nanoseconds since the epoch and `SystemTime`, both ways, and the wall clock: the
/// engine's conversions (negative before 1970, exact for every instant an i64 holds).
pub use fsoc_engine::{system_time, time_ns, wall_clock_ns as now_ns};

/// The attributes the kernel caches for `inode`. `st_blocks` counts the file's mapped pages
/// (`InodeRecord::allocated_bytes`; on volumes older than format version 5, which count
/// none, the size rounded up to whole pages). The birth time (`crtime`) reaches Linux through
/// FUSE_STATX (`FsocFuse::statx`), which a statx(2) asking for `STATX_BTIME` sends.
pub fn file_attr(inode: u64, record: &InodeRecord, page_size_bytes: u32) -> FileAttr {
    let page_bytes = u64::from(page_size_bytes.max(1));
    FileAttr {
        ino: INodeNo(inode),
        size: record.size,
        blocks: record.allocated_bytes(page_bytes).div_ceil(STAT_BLOCK_BYTES),
        atime: system_time(record.atime_ns),
        mtime: system_time(record.mtime_ns),
        ctime: system_time(record.ctime_ns),
        crtime: system_time(record.btime_ns),
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
            btime_ns: -3,
            pages: size.div_ceil(4096),
            generation: 0,
            parent: 0,
        }
    }

    #[test]
    fn attributes_carry_every_field() {
        let attr = file_attr(42, &record(FileKind::File, 4097), 4096);
        assert_eq!(attr.ino, INodeNo(42));
        assert_eq!(attr.size, 4097);
        assert_eq!(attr.blocks, 2 * 4096 / 512, "mapped pages");
        let sparse = InodeRecord { pages: 0, ..record(FileKind::File, 1 << 30) };
        assert_eq!(file_attr(42, &sparse, 4096).blocks, 0, "a sparse file counts what it maps");
        let inline =
            InodeRecord { flags: fsoc_core::fs::records::INODE_FLAG_INLINE, pages: 0, ..record(FileKind::File, 513) };
        assert_eq!(file_attr(42, &inline, 4096).blocks, 2, "inline bytes, in 512-byte units");
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
    fn times_before_the_epoch_round_trip() {
        use std::time::{Duration, UNIX_EPOCH};
        assert_eq!(time_ns(UNIX_EPOCH - Duration::from_secs(10)), -10_000_000_000);
        assert_eq!(time_ns(UNIX_EPOCH + Duration::from_nanos(7)), 7);
        let attr = file_attr(42, &InodeRecord { mtime_ns: -1_500_000_000, ..record(FileKind::File, 1) }, 4096);
        assert_eq!(time_ns(attr.mtime), -1_500_000_000);
        assert_eq!(time_ns(attr.crtime), -3);
    }

    #[test]
    fn errors_map_through_fsoc_core() {
        assert_eq!(errno(&FsError::NotFound), Errno::ENOENT);
        assert_eq!(errno(&FsError::NoSpace), Errno::ENOSPC);
        assert_eq!(errno(&FsError::Corrupt("test")), Errno::EIO);
    }
}
