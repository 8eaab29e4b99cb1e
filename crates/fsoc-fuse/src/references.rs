//! The kernel's references to inodes (FUSE's lookup counts), and the inodes kept alive for them.
//!
//! Every reply that hands the kernel an inode (LOOKUP, CREATE, MKNOD, MKDIR, SYMLINK, LINK, and
//! each READDIRPLUS entry but `.` and `..`) adds one reference; FORGET takes references away.
//! An inode the kernel still references may lose its last name (unlink, rmdir, a rename over
//! it) while a process holds it without an open file handle: as its working directory, or
//! through an O_PATH descriptor. As on ext4 it must then live on with a link count of 0 until
//! the kernel lets it go, so the mount pins it in fsoc-core (`open_inode`, which keeps an
//! unlinked inode on the orphan list) and releases it at the FORGET that takes its last
//! reference.
//!
//! Invariant: an inode is in `pinned` exactly while the mount holds one `open_inode` for it on
//! the kernel's behalf; both the decision to pin (under the volume's exclusive lock) and the
//! decision to release (at the last FORGET) are taken under this structure's one mutex, so no
//! release is lost and none is made twice.

use std::collections::{HashMap, HashSet};
use std::sync::{Mutex, MutexGuard, PoisonError};

#[derive(Default)]
struct Counts {
    /// References per inode; an inode without an entry has none.
    lookups: HashMap<u64, u64>,
    /// Inodes pinned in fsoc-core for the kernel.
    pinned: HashSet<u64>,
}

#[derive(Default)]
pub struct KernelReferences {
    counts: Mutex<Counts>,
}

impl KernelReferences {
    fn counts(&self) -> MutexGuard<'_, Counts> {
        self.counts.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The kernel took one more reference to `inode` (call before the reply that hands it over,
    /// so a FORGET racing the reply never finds fewer references than it returns).
    pub fn taken(&self, inode: u64) {
        *self.counts().lookups.entry(inode).or_insert(0) += 1;
    }

    /// Whether `inode` must be pinned before it loses a name: the kernel references it and it
    /// is not pinned yet. Answering true records it as pinned; the caller then pins it.
    /// The kernel took its first reference to `inode`, which the caller pinned already (an
    /// O_TMPFILE file is made with its open count).
    pub fn taken_pinned(&self, inode: u64) {
        let mut counts = self.counts();
        *counts.lookups.entry(inode).or_insert(0) += 1;
        counts.pinned.insert(inode);
    }

    pub fn should_pin(&self, inode: u64) -> bool {
        let mut counts = self.counts();
        counts.lookups.get(&inode).is_some_and(|&count| count > 0) && counts.pinned.insert(inode)
    }

    /// Pinning `inode` failed after `should_pin` said to: it is not pinned.
    pub fn pin_failed(&self, inode: u64) {
        self.counts().pinned.remove(&inode);
    }

    /// The kernel returned `count` references to `inode`. True when that was the last one and
    /// the inode was pinned: the caller then releases the pin.
    pub fn forgotten(&self, inode: u64, count: u64) -> bool {
        let mut counts = self.counts();
        let Some(held) = counts.lookups.get_mut(&inode) else { return false };
        *held = held.saturating_sub(count);
        if *held > 0 {
            return false;
        }
        counts.lookups.remove(&inode);
        counts.pinned.remove(&inode)
    }

    /// Inodes the kernel references now.
    #[cfg(test)]
    fn referenced_count(&self) -> usize {
        self.counts().lookups.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pin_is_released_at_the_last_forget_only() {
        let references = KernelReferences::default();
        assert!(!references.should_pin(5), "not referenced: nothing to keep alive");
        references.taken(5);
        references.taken(5);
        assert!(references.should_pin(5));
        assert!(!references.should_pin(5), "pinned once");
        assert!(!references.forgotten(5, 1), "one reference left");
        assert!(references.forgotten(5, 1), "the last one: release the pin");
        assert!(!references.forgotten(5, 1), "nothing more to release");
        references.taken(6);
        assert!(!references.forgotten(6, 3), "an unpinned inode is only forgotten");
        assert_eq!(references.referenced_count(), 0);
    }
}
