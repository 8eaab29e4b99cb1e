//! Inode attribute flags (chattr's i, a, A, d, S) and the volume label, both new in format
//! version 3 (docs/FORMAT.md, "Inode record" and "Tree records"), and the checks that enforce
//! immutable and append-only the way ext4 does (EPERM):
//!
//! - immutable: no write, truncate, hole punch, attribute change, rename, unlink or link of the
//!   inode; for a directory, no entry added or removed;
//! - append-only: data only at the end (an open for writing must ask for O_APPEND; O_TRUNC is
//!   refused); no truncate, hole punch, mode or owner change, rename, unlink or link; for a
//!   directory, entries may be added but not removed;
//! - only a privileged caller (CAP_LINUX_IMMUTABLE; the front end decides) sets or clears i
//!   and a; the others need only the right to change the inode's attributes;
//! - sync: every change to the file's data is committed before the call returns.
//!
//! The API speaks Linux's FS_IOC_GETFLAGS bits (`FS_*_FL`), so a front end passes them through.

use alloc::vec::Vec;

use fsoc_flash::Flash;

use crate::fs::records::{
    allocation_key, InodeRecord, RecordKind, INODE_ATTRIBUTE_FLAGS, INODE_FLAG_APPEND, INODE_FLAG_IMMUTABLE,
    INODE_FLAG_NOATIME, INODE_FLAG_NODUMP, INODE_FLAG_SYNC, LABEL_BYTES_MAX, ORPHAN_LIST_INODE,
};
use crate::fs::space::SpaceUse;
use crate::fs::{FileSystem, FsError, TreeId};

/// Linux's inode flag bits (include/uapi/linux/fs.h), as FS_IOC_GETFLAGS/SETFLAGS carry them.
pub const FS_SYNC_FL: u32 = 0x0000_0008;
pub const FS_IMMUTABLE_FL: u32 = 0x0000_0010;
pub const FS_APPEND_FL: u32 = 0x0000_0020;
pub const FS_NODUMP_FL: u32 = 0x0000_0040;
pub const FS_NOATIME_FL: u32 = 0x0000_0080;

/// (Linux bit, on-media bit) of each flag fsoc keeps.
const FLAG_MAP: [(u32, u32); 5] = [
    (FS_SYNC_FL, INODE_FLAG_SYNC),
    (FS_IMMUTABLE_FL, INODE_FLAG_IMMUTABLE),
    (FS_APPEND_FL, INODE_FLAG_APPEND),
    (FS_NODUMP_FL, INODE_FLAG_NODUMP),
    (FS_NOATIME_FL, INODE_FLAG_NOATIME),
];

/// The Linux flag bits fsoc keeps; `set_inode_flags` refuses others (EOPNOTSUPP, as ext4
/// refuses a flag it does not support).
pub const FS_FLAGS_SUPPORTED: u32 = FS_SYNC_FL | FS_IMMUTABLE_FL | FS_APPEND_FL | FS_NODUMP_FL | FS_NOATIME_FL;

fn to_linux(flags: u32) -> u32 {
    FLAG_MAP.iter().filter(|(_, media)| flags & media != 0).fold(0, |bits, (linux, _)| bits | linux)
}

fn from_linux(bits: u32) -> u32 {
    FLAG_MAP.iter().filter(|(linux, _)| bits & linux != 0).fold(0, |flags, (_, media)| flags | media)
}

/// EPERM when `record` may not be changed at all (immutable).
pub(crate) fn refuse_if_immutable(record: &InodeRecord) -> Result<(), FsError> {
    if record.flags & INODE_FLAG_IMMUTABLE != 0 {
        return Err(FsError::NotPermitted);
    }
    Ok(())
}

/// EPERM when `record` may not be removed, renamed, linked, truncated or rewritten in place
/// (immutable or append-only).
pub(crate) fn refuse_if_pinned(record: &InodeRecord) -> Result<(), FsError> {
    if record.flags & (INODE_FLAG_IMMUTABLE | INODE_FLAG_APPEND) != 0 {
        return Err(FsError::NotPermitted);
    }
    Ok(())
}

/// Whether changes to the file's data are to be committed before the call returns.
pub(crate) fn is_synchronous(record: &InodeRecord) -> bool {
    record.flags & INODE_FLAG_SYNC != 0
}

/// When reads update a file's access time (mount(8)'s atime options).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AccessTimes {
    /// `relatime` (Linux's default): when the access time is not after the modification or
    /// change time, or is a day old or more.
    Relative,
    /// `strictatime`: on every read.
    Strict,
    /// `noatime`: never.
    Never,
}

/// A day, in nanoseconds: `relatime` updates an access time at least this old.
const RELATIME_INTERVAL_NS: i64 = 24 * 3600 * 1_000_000_000;

/// Whether a read at `now_ns` updates `record`'s access time under `mode` (Linux's
/// relatime_need_update; an inode with the noatime flag never changes).
pub fn access_time_due(record: &InodeRecord, now_ns: i64, mode: AccessTimes) -> bool {
    if record.flags & INODE_FLAG_NOATIME != 0 || record.atime_ns == now_ns {
        return false;
    }
    match mode {
        AccessTimes::Never => false,
        AccessTimes::Strict => true,
        AccessTimes::Relative => {
            record.mtime_ns >= record.atime_ns
                || record.ctime_ns >= record.atime_ns
                || now_ns.saturating_sub(record.atime_ns) >= RELATIME_INTERVAL_NS
        }
    }
}

impl<F: Flash> FileSystem<F> {
    /// Records a read of `inode` now (`access_time_due` says when one is due): the access time
    /// alone changes, not the change time, as for Linux's touch_atime. Nothing happens on an
    /// immutable inode, and on a read-only volume the call is a no-op.
    pub fn record_access(&mut self, inode: u64) -> Result<(), FsError> {
        if self.volume.config.read_only {
            return Ok(());
        }
        let record = self.getattr(inode)?;
        if refuse_if_immutable(&record).is_err() {
            return Ok(());
        }
        self.ensure_space(0, SpaceUse::Metadata)?;
        self.mutate(|fs| {
            let mut record = fs.getattr(inode)?;
            record.atime_ns = fs.now_ns;
            fs.put_inode(inode, &record)
        })
    }

    /// The inode's flags as FS_IOC_GETFLAGS reports them (`FS_*_FL`); 0 on older volumes.
    pub fn inode_flags(&self, inode: u64) -> Result<u32, FsError> {
        Ok(to_linux(self.getattr(inode)?.flags))
    }

    /// FS_IOC_SETFLAGS: sets the inode's flags to `linux_flags` (`FS_*_FL`). `privileged` says
    /// whether the caller may change immutable and append-only (CAP_LINUX_IMMUTABLE); the
    /// caller checks the right to change the inode's attributes at all (owner or privileged).
    /// Flags fsoc does not keep are EOPNOTSUPP; on a volume older than format version 3
    /// every change is EOPNOTSUPP (its format has no room for them).
    pub fn set_inode_flags(&mut self, inode: u64, linux_flags: u32, privileged: bool) -> Result<(), FsError> {
        if linux_flags & !FS_FLAGS_SUPPORTED != 0 {
            return Err(FsError::NotSupported);
        }
        let wanted = from_linux(linux_flags);
        let current = self.getattr(inode)?;
        if current.flags & INODE_ATTRIBUTE_FLAGS == wanted {
            return Ok(());
        }
        if !self.is_version3() {
            return Err(FsError::NotSupported);
        }
        let pinned = INODE_FLAG_IMMUTABLE | INODE_FLAG_APPEND;
        if !privileged && (current.flags ^ wanted) & pinned != 0 {
            return Err(FsError::NotPermitted);
        }
        self.ensure_space(0, SpaceUse::Metadata)?;
        self.mutate(|fs| {
            let mut record = fs.getattr(inode)?;
            record.flags = (record.flags & !INODE_ATTRIBUTE_FLAGS) | wanted;
            record.ctime_ns = fs.now_ns;
            fs.put_inode(inode, &record)
        })
    }

    /// EPERM when an open with these intentions may not proceed on `inode` (ext4's may_open):
    /// writing an immutable file; writing an append-only file without O_APPEND, or
    /// truncating either. Returns the inode's record (read for the check) to the opener.
    pub fn check_open(&self, inode: u64, write: bool, append: bool, truncate: bool) -> Result<InodeRecord, FsError> {
        let record = self.getattr(inode)?;
        if (write || truncate) && record.flags & INODE_FLAG_IMMUTABLE != 0 {
            return Err(FsError::NotPermitted);
        }
        if record.flags & INODE_FLAG_APPEND != 0 && ((write && !append) || truncate) {
            return Err(FsError::NotPermitted);
        }
        Ok(record)
    }

    /// The volume label (empty when none is set, and on volumes older than format version 3).
    pub fn label(&self) -> Result<Vec<u8>, FsError> {
        if !self.is_version3() {
            return Ok(Vec::new());
        }
        let label = self.tree_get(TreeId::Allocation, &allocation_key(ORPHAN_LIST_INODE, RecordKind::Label, 0))?;
        let label = label.unwrap_or_default();
        if label.len() > LABEL_BYTES_MAX || label.contains(&0) {
            return Err(FsError::Corrupt("volume label longer than 255 bytes or holding a NUL"));
        }
        Ok(label)
    }

    /// Sets the volume label (up to 255 bytes, no NUL; empty removes it). EOPNOTSUPP on a
    /// volume older than format version 3.
    pub fn set_label(&mut self, label: &[u8]) -> Result<(), FsError> {
        if label.len() > LABEL_BYTES_MAX {
            return Err(FsError::InvalidArgument("a label holds at most 255 bytes"));
        }
        if label.contains(&0) {
            return Err(FsError::InvalidArgument("a label may not hold a NUL byte"));
        }
        if !self.is_version3() {
            return Err(FsError::NotSupported);
        }
        self.ensure_space(0, SpaceUse::Metadata)?;
        self.mutate(|fs| {
            let key = allocation_key(ORPHAN_LIST_INODE, RecordKind::Label, 0);
            if label.is_empty() {
                fs.tree_remove(TreeId::Allocation, &key)?;
            } else {
                fs.tree_insert(TreeId::Allocation, &key, label)?;
            }
            Ok(())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn linux_bits_map_both_ways() {
        for bits in 0..=FS_FLAGS_SUPPORTED {
            let bits = bits & FS_FLAGS_SUPPORTED;
            assert_eq!(to_linux(from_linux(bits)), bits);
        }
        assert_eq!(from_linux(FS_IMMUTABLE_FL | FS_APPEND_FL), INODE_FLAG_IMMUTABLE | INODE_FLAG_APPEND);
        assert_eq!(from_linux(FS_FLAGS_SUPPORTED), INODE_ATTRIBUTE_FLAGS);
    }
}
