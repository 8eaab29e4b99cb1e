//! Layer 6: the POSIX-like file system over a volume. `FileSystem` offers inode-level calls
//! (what FUSE and the protocol server use) and, in `api`, path and descriptor calls.
//!
//! One file per job: `mount` (format, mount, unmount, commits, delta replay), `namespace`
//! (names in directories, symlinks), `inodes` (records, link and open counts, orphans,
//! deletion, statfs), `data` (file contents and extents), `space` (the space account and the
//! cleaner), `fsck`, `delta` (the delta-commit payload), `records` (on-media record formats),
//! `api` (paths and descriptors), `inspect` (what tools and tests may look at), `error`. This
//! file holds the types and `mutate`, the one way a change reaches the working state.
//!
//! Invariants: every directory's `nlink` is 2 + its subdirectories; a file's pages past its
//! size read as zeros (the tail of the last page is zeroed on shrink); the working state is
//! only changed inside `mutate`, which poisons the volume if a change fails half-way.

pub mod acl;
pub mod api;
pub mod attributes;
mod data;
pub mod delta;
pub mod delta_compact;
pub mod error;
pub mod fsck;
pub mod fsck_data;
mod inodes;
mod inspect;
mod mount;
mod namespace;
pub mod pending;
mod rename;
pub use crate::fs::data::EXT4_FILE_BYTES_MAX;
pub use crate::fs::namespace::NewInode;
pub mod records;
pub mod scrub;
mod space;
mod sparse;
pub mod xattrs;

use alloc::collections::BTreeMap;
use alloc::vec::Vec;

use fsoc_flash::Flash;

use crate::btree::{KeyValue, Tree, TreeError};
pub use crate::fs::data::READ_BYTES_MAX;
pub use crate::fs::error::{errno, FsError};
use crate::fs::records::NAME_BYTES_MAX;
pub use crate::fs::records::{FileKind, InodeRecord};
pub use crate::fs::scrub::{RefreshReport, ScrubCursor, ScrubReport, ScrubStep};
pub use crate::fs::space::SpaceAccount;
use crate::segment::SegmentError;
use crate::txn::store::{LogNodeReader, LogNodeStore};
use crate::txn::TxnError;
use crate::txn::{Volume, VolumeConfig};

/// When the file system commits on its own (it always commits when the volume is full).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CommitTriggers {
    pub fsync: bool,
    pub close: bool,
    pub unlink_rename: bool,
}

impl Default for CommitTriggers {
    /// "fsync and explicit `transact`", as the issue asks.
    fn default() -> Self {
        CommitTriggers { fsync: true, close: false, unlink_rename: false }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FsConfig {
    pub volume: VolumeConfig,
    pub commit_triggers: CommitTriggers,
    /// Open descriptors allowed at once.
    pub open_files_max: usize,
    /// Pages read or written per batch by the data path (bounds its buffers).
    pub io_batch_pages: usize,
    /// fsync/transact write a delta commit (one metaroot page holding the logical changes since
    /// the last full commit) while the changes fit; otherwise, and for space reclaim and
    /// unmount, a full commit.
    pub delta_commits: bool,
    /// On a volume with NVRAM: once the log's records fill this percentage of it, the next
    /// transaction point is a full flash commit (the destage), which empties the log.
    pub nvram_high_water_percent: u8,
    /// On a volume with NVRAM: a write of at most this many bytes inside one page (and less
    /// than a page) rides in the NVRAM log instead of programming the page (`fs::pending`);
    /// 0 turns this off.
    pub nvram_small_write_bytes: usize,
    /// Pending pages (small writes not yet programmed) kept in RAM before they are all
    /// programmed: bounds the memory they take (this many pages, twice: the page and its copy
    /// in the delta).
    pub nvram_pending_pages_max: usize,
}

impl Default for FsConfig {
    fn default() -> Self {
        FsConfig {
            volume: VolumeConfig::default(),
            commit_triggers: CommitTriggers::default(),
            open_files_max: 1024,
            io_batch_pages: 64,
            delta_commits: true,
            nvram_high_water_percent: 75,
            nvram_small_write_bytes: 2048,
            nvram_pending_pages_max: 64,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StatFs {
    pub block_size_bytes: u32,
    pub total_blocks: u64,
    pub free_blocks: u64,
    pub name_bytes_max: u32,
    pub next_inode: u64,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DirectoryEntry {
    pub name: Vec<u8>,
    pub inode: u64,
    pub kind: FileKind,
}

/// A directory entry name: 1..=255 bytes, no `/` or NUL, not `.` or `..`.
pub fn validate_name(name: &[u8]) -> Result<(), FsError> {
    if name.is_empty() || name == b"." || name == b".." || name.iter().any(|&b| b == b'/' || b == 0) {
        return Err(FsError::InvalidArgument("invalid file name"));
    }
    if name.len() > NAME_BYTES_MAX {
        return Err(FsError::NameTooLong);
    }
    Ok(())
}

/// Which tree a helper works on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum TreeId {
    Directory,
    Allocation,
}

impl TreeId {
    fn id(self) -> u8 {
        match self {
            TreeId::Directory => crate::txn::volume::DIRECTORY_TREE_ID,
            TreeId::Allocation => crate::txn::volume::ALLOCATION_TREE_ID,
        }
    }
}

/// Deepest directory nesting followed when walking parent links (a bound from trust, not from
/// flash: deeper trees are refused when a walk needs to go up them).
pub const DIRECTORY_DEPTH_MAX: usize = 65_536;

/// Counters that tests and benchmarks read.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FsStats {
    pub commits: u64,
    pub delta_commits: u64,
    /// Transaction points kept in NVRAM (no flash page programmed).
    pub nvram_commits: u64,
    /// Full commits made because the NVRAM log passed its high-water mark or could not take
    /// the changes (destages).
    pub nvram_destages: u64,
    /// Small writes that rode in the NVRAM log (`fs::pending`) instead of programming a page.
    pub small_writes_in_log: u64,
    /// File pages kept as short pages in the allocation tree instead of programmed (format
    /// version 13 on: a file's last page whose bytes fit a tree entry).
    pub short_pages_kept: u64,
    pub cleaner_runs: u64,
    pub pages_relocated: u64,
    /// Segments refreshed (their data moved because reads came near the ECC's limit).
    pub segments_refreshed: u64,
    /// Segments retired because a live page in them could not be read back when the cleaner
    /// or a refresh emptied them (the lost pages answer EIO).
    pub segments_with_lost_pages: u64,
    /// Measured pages a cleaned victim costs beyond its own live pages (rewritten tree nodes,
    /// its share of the closing commit and paired-page guard), in 1/16 pages, as a moving
    /// average; 0 until the cleaner has run (then an estimate from the tree heights is used).
    pub cleaning_overhead_pages_x16: u64,
}

pub struct FileSystem<F: Flash> {
    pub(crate) volume: Volume<F>,
    pub config: FsConfig,
    /// Logical time for timestamps, set by the caller (no clock is read here).
    pub now_ns: i64,
    /// The generation this mount gives the inodes it makes (`InodeRecord::generation`): the
    /// commit counter it made durable before making any (format version 5 on; else 0).
    pub(crate) generation: u32,
    open_counts: BTreeMap<u64, u32>,
    pub(crate) descriptors: BTreeMap<u32, api::OpenFile>,
    pub stats: FsStats,
    /// Tree edits made, for `change_count`.
    tree_changes: u64,
    /// Logical changes since the last full commit (for delta commits).
    pub(crate) delta: delta::DeltaLog,
    /// Small writes waiting in RAM and in the NVRAM log: (inode, page) to a page of content
    /// (`fs::pending`).
    pub(crate) pending: BTreeMap<(u64, u64), Vec<u8>>,
}

impl<F: Flash> FileSystem<F> {
    /// Runs a change to the working state. A failure other than a clean refusal poisons the
    /// volume: the change may be half-applied, so nothing more may be built on it.
    pub(crate) fn mutate<T>(&mut self, change: impl FnOnce(&mut Self) -> Result<T, FsError>) -> Result<T, FsError> {
        self.volume.prepare_write()?;
        let changes_before = self.change_count();
        let result = change(self);
        // NoSpace here is unexpected (space is checked before any change), so the change may be
        // half-done: stop writing rather than build on it. A failure found before the first
        // change (a corrupt record of the file being changed, typically) is contained: the
        // working state is as it was, so only this call fails.
        if let Err(FsError::Io(_) | FsError::Corrupt(_) | FsError::CorruptFile { .. } | FsError::NoSpace) = &result {
            if self.change_count() != changes_before {
                self.volume.poison();
            }
        }
        if result.is_ok() && self.volume.dirty_node_count() > self.config.volume.dirty_nodes_max {
            if let Err(error) = self.volume.flush_trees() {
                self.volume.poison();
                return Err(error.into());
            }
        }
        result
    }

    // ----- tree helpers -------------------------------------------------------------------

    fn with_tree<T>(
        &mut self,
        which: TreeId,
        operation: impl FnOnce(&mut Tree, &mut LogNodeStore<'_, F>) -> Result<T, TreeError<SegmentError>>,
    ) -> Result<T, FsError> {
        let volume = &mut self.volume;
        let mut store = LogNodeStore::new(&mut volume.log);
        let tree = match which {
            TreeId::Directory => &mut volume.directory,
            TreeId::Allocation => &mut volume.allocation,
        };
        operation(tree, &mut store).map_err(|error| FsError::from(TxnError::from(error)))
    }

    /// A read of one tree through a shared borrow: several may run at once.
    fn with_tree_read<T>(
        &self,
        which: TreeId,
        operation: impl FnOnce(&Tree, &LogNodeReader<'_, F>) -> Result<T, TreeError<SegmentError>>,
    ) -> Result<T, FsError> {
        let volume = &self.volume;
        let reader = LogNodeReader::new(&volume.log);
        let tree = match which {
            TreeId::Directory => &volume.directory,
            TreeId::Allocation => &volume.allocation,
        };
        operation(tree, &reader).map_err(|error| FsError::from(TxnError::from(error)))
    }

    fn tree_get(&self, which: TreeId, key: &[u8]) -> Result<Option<Vec<u8>>, FsError> {
        self.with_tree_read(which, |tree, reader| tree.get(reader, key))
    }

    /// Counts changes to the working state (tree edits, segment accounting), so `mutate` can
    /// tell a failure that changed nothing from one that left a change half-done.
    fn change_count(&self) -> (u64, u64) {
        let segment_changes =
            if self.volume.log.is_table_loaded() { self.volume.log.table().change_count() } else { 0 };
        (self.tree_changes, segment_changes)
    }

    fn tree_insert(&mut self, which: TreeId, key: &[u8], value: &[u8]) -> Result<Option<Vec<u8>>, FsError> {
        // Counted before the edit: a failure inside it may have changed the tree.
        self.tree_changes += 1;
        let old = self.with_tree(which, |tree, store| tree.insert(store, key, value))?;
        self.delta.record_put(which.id(), key, value);
        Ok(old)
    }

    fn tree_remove(&mut self, which: TreeId, key: &[u8]) -> Result<Option<Vec<u8>>, FsError> {
        self.tree_changes += 1;
        let old = self.with_tree(which, |tree, store| tree.remove(store, key))?;
        // Removing an absent key changes nothing: the tree already equals the full commit's
        // state plus the delta for it (absent in both, or removed in the delta already).
        if old.is_some() {
            self.delta.record_remove(which.id(), key);
        }
        Ok(old)
    }

    /// Visits entries from `key` in order while `visit` returns true (`Tree::scan_from`).
    fn tree_scan(
        &self,
        which: TreeId,
        key: &[u8],
        inclusive: bool,
        visit: &mut dyn FnMut(&[u8], &[u8]) -> bool,
    ) -> Result<(), FsError> {
        self.with_tree_read(which, |tree, reader| tree.scan_from(reader, key, inclusive, visit))
    }

    fn tree_first_after(&self, which: TreeId, key: &[u8]) -> Result<Option<KeyValue>, FsError> {
        self.with_tree_read(which, |tree, reader| tree.first_after(reader, key))
    }

    fn tree_first_at_or_after(&self, which: TreeId, key: &[u8]) -> Result<Option<KeyValue>, FsError> {
        self.with_tree_read(which, |tree, reader| tree.first_at_or_after(reader, key))
    }

    fn tree_last_at_or_before(&self, which: TreeId, key: &[u8]) -> Result<Option<KeyValue>, FsError> {
        self.with_tree_read(which, |tree, reader| tree.last_at_or_before(reader, key))
    }
}
