//! Permission checks for FUSE `access` (the kernel does every other check itself because the
//! volume is mounted with `default_permissions`), and setgid-directory inheritance.
//!
//! Invariant: the rules are the classic POSIX ones: root may read and write anything and
//! execute anything with at least one execute bit (or any directory); everyone else is judged
//! by exactly one of the owner, group or other classes.

use fsoc_core::fs::{FileKind, InodeRecord};

pub const READ: u32 = 4;
pub const WRITE: u32 = 2;
pub const EXECUTE: u32 = 1;
const SET_GROUP_ID: u32 = 0o2000;

/// Who is asking: the credentials of the calling process.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Caller {
    pub uid: u32,
    pub gid: u32,
    /// Supplementary groups.
    pub groups: Vec<u32>,
}

impl Caller {
    /// The caller's credentials, with supplementary groups read from `/proc/PID/status`
    /// (empty if the process is gone or /proc is unavailable: the check then uses the primary
    /// group only, which can only refuse more, never allow more).
    pub fn from_process(uid: u32, gid: u32, pid: u32) -> Caller {
        let groups = std::fs::read_to_string(format!("/proc/{pid}/status"))
            .ok()
            .and_then(|status| {
                let line = status.lines().find(|line| line.starts_with("Groups:"))?;
                Some(line["Groups:".len()..].split_whitespace().filter_map(|group| group.parse().ok()).collect())
            })
            .unwrap_or_default();
        Caller { uid, gid, groups }
    }

    pub fn in_group(&self, gid: u32) -> bool {
        self.gid == gid || self.groups.contains(&gid)
    }
}

/// Whether `caller` may access the inode with every bit of `mask` (READ | WRITE | EXECUTE;
/// 0 asks only whether it exists).
pub fn may_access(record: &InodeRecord, caller: &Caller, mask: u32) -> bool {
    assert_eq!(mask & !(READ | WRITE | EXECUTE), 0, "access mask {mask:#o} has unknown bits");
    let mode = record.mode & 0o777;
    if caller.uid == 0 {
        let executable = record.kind == FileKind::Directory || mode & 0o111 != 0;
        return mask & EXECUTE == 0 || executable;
    }
    let granted = if caller.uid == record.uid {
        mode >> 6
    } else if caller.in_group(record.gid) {
        mode >> 3
    } else {
        mode
    } & 0o7;
    granted & mask == mask
}

/// The set-id bits chown(2) takes away from a non-directory (Linux's
/// setattr_should_drop_suidgid, as notify_change applies it for chown_common): set-user-id
/// always; set-group-id when the group may execute, or when the caller is neither in the file's
/// group nor root. 0 for a directory.
pub fn set_id_bits_chown_drops(record: &InodeRecord, caller: &Caller) -> u32 {
    if record.kind == FileKind::Directory {
        return 0;
    }
    let mut bits = record.mode & 0o4000;
    if record.mode & SET_GROUP_ID != 0
        && (record.mode & 0o010 != 0 || (caller.uid != 0 && !caller.in_group(record.gid)))
    {
        bits |= SET_GROUP_ID;
    }
    bits
}

/// The owner group and mode of a new entry in a directory: BSD semantics when the directory
/// has the setgid bit (the entry takes the directory's group, and a new subdirectory keeps the
/// setgid bit), the caller's group otherwise.
pub fn new_entry_group_and_mode(directory: &InodeRecord, kind: FileKind, caller_gid: u32, mode: u32) -> (u32, u32) {
    assert_eq!(directory.kind, FileKind::Directory, "new entries are made in directories");
    if directory.mode & SET_GROUP_ID == 0 {
        return (caller_gid, mode & 0o7777);
    }
    let mode = if kind == FileKind::Directory { mode | SET_GROUP_ID } else { mode };
    (directory.gid, mode & 0o7777)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(kind: FileKind, mode: u32, uid: u32, gid: u32) -> InodeRecord {
        InodeRecord {
            kind,
            mode,
            uid,
            gid,
            nlink: 1,
            flags: 0,
            size: 0,
            atime_ns: 0,
            mtime_ns: 0,
            ctime_ns: 0,
            btime_ns: 0,
            pages: 0,
            generation: 0,
            parent: 0,
        }
    }

    fn caller(uid: u32, gid: u32, groups: &[u32]) -> Caller {
        Caller { uid, gid, groups: groups.to_vec() }
    }

    #[test]
    fn chown_drops_set_id_bits_as_linux_does() {
        let member = Caller { uid: 1001, gid: 5, groups: vec![100] };
        let other = Caller { uid: 1002, gid: 5, groups: vec![] };
        let root = Caller { uid: 0, gid: 0, groups: vec![] };
        let file = |mode| record(FileKind::File, mode, 1000, 100);
        assert_eq!(set_id_bits_chown_drops(&file(0o6755), &member), 0o6000, "group may execute: both go");
        assert_eq!(set_id_bits_chown_drops(&file(0o2745), &member), 0, "set-group-id kept for a member");
        assert_eq!(set_id_bits_chown_drops(&file(0o2745), &other), 0o2000, "dropped for an outsider");
        assert_eq!(set_id_bits_chown_drops(&file(0o2745), &root), 0, "root keeps it");
        assert_eq!(set_id_bits_chown_drops(&file(0o4700), &root), 0o4000);
        assert_eq!(set_id_bits_chown_drops(&record(FileKind::Directory, 0o6755, 1000, 100), &other), 0);
    }

    #[test]
    fn owner_group_and_other_classes() {
        let file = record(FileKind::File, 0o640, 1000, 100);
        assert!(may_access(&file, &caller(1000, 1000, &[]), READ | WRITE));
        assert!(!may_access(&file, &caller(1000, 1000, &[]), EXECUTE));
        assert!(may_access(&file, &caller(2000, 100, &[]), READ));
        assert!(!may_access(&file, &caller(2000, 100, &[]), WRITE));
        assert!(may_access(&file, &caller(2000, 5, &[7, 100]), READ), "supplementary group");
        assert!(!may_access(&file, &caller(2000, 5, &[]), READ));
        assert!(may_access(&file, &caller(2000, 5, &[]), 0), "existence only");
        // The owner class applies even when it grants less than the group class.
        let odd = record(FileKind::File, 0o070, 1000, 100);
        assert!(!may_access(&odd, &caller(1000, 100, &[]), READ));
    }

    #[test]
    fn root_reads_and_writes_everything_but_executes_only_executables() {
        let file = record(FileKind::File, 0o000, 1000, 100);
        assert!(may_access(&file, &caller(0, 0, &[]), READ | WRITE));
        assert!(!may_access(&file, &caller(0, 0, &[]), EXECUTE));
        assert!(may_access(&record(FileKind::File, 0o001, 1, 1), &caller(0, 0, &[]), EXECUTE));
        assert!(may_access(&record(FileKind::Directory, 0o000, 1, 1), &caller(0, 0, &[]), EXECUTE));
    }

    #[test]
    fn setgid_directories_pass_on_their_group() {
        let plain = record(FileKind::Directory, 0o755, 0, 50);
        assert_eq!(new_entry_group_and_mode(&plain, FileKind::Directory, 7, 0o755), (7, 0o755));
        let shared = record(FileKind::Directory, 0o2775, 0, 50);
        assert_eq!(new_entry_group_and_mode(&shared, FileKind::File, 7, 0o644), (50, 0o644));
        assert_eq!(new_entry_group_and_mode(&shared, FileKind::Directory, 7, 0o755), (50, 0o2755));
        assert_eq!(new_entry_group_and_mode(&shared, FileKind::Symlink, 7, 0o777), (50, 0o777));
    }
}
