//! Conversions between fsoc's records and 9P's: qids, Rgetattr attributes, directory-entry
//! types, Rstatfs, and errno values.
//!
//! Invariants: a qid's path is the inode number, unchanged (the root is 1), and its version is
//! 0 ("do not cache by version"); the errno of a file-system error is `FsError::errno`'s.

use fsoc_9p::constants::{dirent_type, getattr};
use fsoc_9p::{Attributes, Errno, FsStats, Qid, QidType, Timestamp};
use fsoc_core::fs::{FileKind, FsError, InodeRecord, StatFs};
use fsoc_engine::EngineError;

/// st_mode's file-type bits.
const MODE_DIRECTORY: u32 = 0o040000;
const MODE_REGULAR: u32 = 0o100000;
const MODE_SYMLINK: u32 = 0o120000;
/// Bytes per unit of st_blocks, fixed by POSIX.
const STAT_BLOCK_BYTES: u64 = 512;
/// Rstatfs's f_type: "fsoc" in ASCII, so `stat -f` on a 9P mount can tell fsoc apart.
pub(crate) const FS_TYPE_FSOC: u32 = 0x6673_6f63;

pub(crate) fn qid_type(kind: FileKind) -> QidType {
    match kind {
        FileKind::Directory => QidType::DIRECTORY,
        FileKind::Symlink => QidType::SYMLINK,
        // 9P2000.L has no qid type for device nodes, FIFOs and sockets: st_mode tells them.
        _ => QidType::FILE,
    }
}

pub(crate) fn qid(inode: u64, kind: FileKind) -> Qid {
    Qid { qid_type: qid_type(kind), version: 0, path: inode }
}

pub(crate) fn dirent_type(kind: FileKind) -> u8 {
    match kind {
        FileKind::Directory => dirent_type::DIRECTORY,
        FileKind::Symlink => dirent_type::SYMLINK,
        FileKind::File => dirent_type::REGULAR,
        special => special.dirent_type(),
    }
}

/// A 9P time from signed nanoseconds: seconds as the two's complement of a signed count
/// (Linux's v9fs reads them into a time64_t), nanoseconds always 0 to 999,999,999.
fn timestamp(time_ns: i64) -> Timestamp {
    Timestamp {
        seconds: time_ns.div_euclid(1_000_000_000) as u64,
        nanoseconds: time_ns.rem_euclid(1_000_000_000) as u64,
    }
}

/// Signed nanoseconds since the epoch of a 9P time (seconds read as signed), saturating at
/// what an i64 of nanoseconds holds (the years 1678 to 2262).
pub(crate) fn time_ns(time: &fsoc_9p::Timestamp) -> i64 {
    (time.seconds as i64).saturating_mul(1_000_000_000).saturating_add(time.nanoseconds.min(999_999_999) as i64)
}

/// Rgetattr's body for `inode`: the BASIC fields (what stat(2) needs), and the birth time when
/// the volume keeps one (format version 5 on). `st_blocks` counts the file's mapped pages
/// (on older volumes, which count none, its size rounded up to pages).
pub(crate) fn attributes(inode: u64, record: &InodeRecord, page_size_bytes: u32) -> Attributes {
    let page_bytes = u64::from(page_size_bytes.max(1));
    let allocated_bytes = record.allocated_bytes(page_bytes);
    let file_type = match record.kind {
        FileKind::Directory => MODE_DIRECTORY,
        FileKind::File => MODE_REGULAR,
        FileKind::Symlink => MODE_SYMLINK,
        special => special.mode_bits(),
    };
    Attributes {
        valid_mask: if record.btime_ns != 0 { getattr::BASIC | getattr::BTIME } else { getattr::BASIC },
        qid: qid(inode, record.kind),
        mode: file_type | (record.mode & 0o7777),
        uid: record.uid,
        gid: record.gid,
        link_count: u64::from(record.nlink),
        rdev: record.rdev(),
        size_bytes: record.size,
        block_size_bytes: page_bytes,
        block_count: allocated_bytes.div_ceil(STAT_BLOCK_BYTES),
        access_time: timestamp(record.atime_ns),
        modify_time: timestamp(record.mtime_ns),
        change_time: timestamp(record.ctime_ns),
        birth_time: if record.btime_ns != 0 { timestamp(record.btime_ns) } else { Timestamp::default() },
        generation: 0,
        data_version: 0,
    }
}

/// Rstatfs's body. fsoc has no inode table, so the file counts say: files made so far plus
/// as many more as there are free blocks (each file needs at least its record's share).
pub(crate) fn fs_stats(statfs: &StatFs, volume_id: u64) -> FsStats {
    FsStats {
        fs_type: FS_TYPE_FSOC,
        block_size_bytes: statfs.block_size_bytes,
        block_count: statfs.total_blocks,
        free_block_count: statfs.free_blocks,
        available_block_count: statfs.free_blocks,
        file_count: statfs.next_inode.saturating_add(statfs.free_blocks),
        free_file_count: statfs.free_blocks,
        fs_id: volume_id,
        name_length_max: statfs.name_bytes_max,
    }
}

/// The errno of a file-system error (`FsError::errno`, fsoc's one mapping). The cause of an
/// EIO goes to the log, since the client sees the number only.
pub(crate) fn errno(error: &FsError) -> Errno {
    let number = u32::try_from(error.errno()).unwrap_or(Errno::EIO.0);
    if number == Errno::EIO.0 {
        match fsoc_engine::current_request() {
            Some((operation, Some(inode))) => log::error!("{operation} on inode {inode}: answering EIO: {error}"),
            Some((operation, None)) => log::error!("{operation}: answering EIO: {error}"),
            None => log::error!("answering EIO: {error}"),
        }
    }
    Errno(number)
}

pub(crate) fn engine_errno(error: &EngineError) -> Errno {
    Errno(u32::try_from(error.errno()).unwrap_or(Errno::EIO.0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attributes_carry_type_permissions_and_times() {
        let record = InodeRecord {
            kind: FileKind::File,
            mode: 0o4755,
            uid: 1000,
            gid: 100,
            nlink: 1,
            flags: 0,
            size: 4097,
            atime_ns: 1_700_000_000_500_000_000,
            mtime_ns: 5,
            ctime_ns: 0,
            btime_ns: -1_500_000_000,
            pages: 2,
            generation: 0,
            parent: 0,
        };
        let attributes = attributes(42, &record, 4096);
        assert_eq!(attributes.mode, 0o104755);
        assert_eq!(attributes.qid, Qid { qid_type: QidType::FILE, version: 0, path: 42 });
        assert_eq!(attributes.block_count, 16, "two pages in 512-byte units");
        assert_eq!(attributes.access_time, Timestamp { seconds: 1_700_000_000, nanoseconds: 500_000_000 });
        assert_eq!(time_ns(&attributes.access_time), record.atime_ns, "times round-trip");
        assert_eq!(time_ns(&Timestamp { seconds: i64::MAX as u64, nanoseconds: 0 }), i64::MAX, "saturates");
        // Before the epoch: seconds are a signed count, nanoseconds stay in range.
        assert_eq!(attributes.birth_time, Timestamp { seconds: -2i64 as u64, nanoseconds: 500_000_000 });
        assert_eq!(time_ns(&attributes.birth_time), -1_500_000_000);
        assert_eq!(attributes.valid_mask, getattr::BASIC | getattr::BTIME);
        assert_eq!(qid_type(FileKind::Symlink), QidType::SYMLINK);
        assert_eq!(dirent_type(FileKind::Directory), 4);
    }

    #[test]
    fn errors_map_through_fsoc_core() {
        assert_eq!(errno(&FsError::NotFound), Errno::ENOENT);
        assert_eq!(errno(&FsError::NotEmpty), Errno::ENOTEMPTY);
        assert_eq!(errno(&FsError::Corrupt("test")), Errno::EIO);
    }
}
