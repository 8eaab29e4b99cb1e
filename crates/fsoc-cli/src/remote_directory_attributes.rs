//! The attributes of a directory fetched together with a change this mount made in it, kept
//! for the kernel's next GETATTR of the directory.
//!
//! After every create or unlink the kernel drops the directory's cached attributes, and the
//! next permission check in it (`default_permissions`) asks for them again: through a remote
//! mount that was a round trip per change (PostMark: 12,045 of 83,000). The create and the
//! unlink now ask the server for the directory's attributes in the same batch, after the
//! change (one round trip on an ordered connection: `Node::create_file`,
//! `Node::unlinkat_with_attributes`), and the GETATTR that follows takes them from here.
//!
//! Consistency: an entry answers one GETATTR, and only within `FRESH_FOR` (the kernel's own
//! attribute TTL) of being fetched, so a change made by another host is seen as soon as it
//! would be without this. Any other change this mount makes to a directory (mkdir, rename,
//! link, symlink, mknod, setattr, a create given to another user) drops its entry once the
//! server has answered it, and a batch that began before that drop may not store what it
//! fetched (`epoch`), so what is kept was fetched after every such change; of two concurrent
//! fetches the one with the later ctime is kept.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use fuser::FileAttr;

/// How long a fetched entry may answer a GETATTR (the kernel's attribute TTL of the mount).
pub const FRESH_FOR: Duration = super::CACHE_TTL;
/// Entries kept at most (the oldest are dropped beyond it; a GETATTR follows within
/// microseconds, so few are ever kept).
const ENTRIES_MAX: usize = 1024;

struct Entry {
    attr: FileAttr,
    fetched: Instant,
}

#[derive(Default)]
pub struct DirectoryAttributes {
    entries: Mutex<HashMap<u64, Entry>>,
    /// Raised by every `forget`: a fetch that started before may not be stored.
    epoch: AtomicU64,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

impl DirectoryAttributes {
    /// To be read before sending a batch whose directory attributes will be `keep`'s.
    pub fn epoch(&self) -> u64 {
        self.epoch.load(Ordering::Acquire)
    }

    /// Stores `attr`, fetched by a batch that began at `epoch`, unless a `forget` came since
    /// or a later fetch of the same directory is already stored.
    pub fn keep(&self, epoch: u64, attr: FileAttr) {
        let mut entries = lock(&self.entries);
        if self.epoch.load(Ordering::Acquire) != epoch {
            return;
        }
        if entries.get(&attr.ino.0).is_some_and(|entry| entry.attr.ctime > attr.ctime) {
            return;
        }
        if entries.len() >= ENTRIES_MAX {
            let now = Instant::now();
            entries.retain(|_, entry| now.duration_since(entry.fetched) < FRESH_FOR);
            if entries.len() >= ENTRIES_MAX {
                entries.clear();
            }
        }
        entries.insert(attr.ino.0, Entry { attr, fetched: Instant::now() });
    }

    /// The attributes kept for `inode`, if fetched within `FRESH_FOR`; an entry answers once.
    pub fn take(&self, inode: u64) -> Option<FileAttr> {
        let entry = lock(&self.entries).remove(&inode)?;
        (entry.fetched.elapsed() < FRESH_FOR).then_some(entry.attr)
    }

    /// Drops what is kept for `inode` (before and after a change it does not refetch), and
    /// any fetch still on its way.
    pub fn forget(&self, inode: u64) {
        let mut entries = lock(&self.entries);
        self.epoch.fetch_add(1, Ordering::AcqRel);
        entries.remove(&inode);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fuser::{FileType, INodeNo};
    use std::time::SystemTime;

    fn attr(ino: u64, ctime_seconds: u64) -> FileAttr {
        let time = SystemTime::UNIX_EPOCH + Duration::from_secs(ctime_seconds);
        FileAttr {
            ino: INodeNo(ino),
            size: 0,
            blocks: 0,
            atime: time,
            mtime: time,
            ctime: time,
            crtime: time,
            kind: FileType::Directory,
            perm: 0o755,
            nlink: 2,
            uid: 0,
            gid: 0,
            rdev: 0,
            blksize: 4096,
            flags: 0,
        }
    }

    #[test]
    fn an_entry_answers_once_and_a_forget_or_an_older_fetch_does_not_store() {
        let cache = DirectoryAttributes::default();
        let epoch = cache.epoch();
        cache.keep(epoch, attr(5, 10));
        assert_eq!(cache.take(5).map(|attr| attr.ctime), Some(attr(5, 10).ctime));
        assert!(cache.take(5).is_none(), "answered once");

        // A fetch that began before a forget is not stored.
        let before = cache.epoch();
        cache.forget(7);
        cache.keep(before, attr(7, 11));
        assert!(cache.take(7).is_none());

        // Of two fetches the later ctime stays, whatever order they are stored in.
        let epoch = cache.epoch();
        cache.keep(epoch, attr(9, 20));
        cache.keep(epoch, attr(9, 19));
        assert_eq!(cache.take(9).map(|attr| attr.ctime), Some(attr(9, 20).ctime));
    }
}
