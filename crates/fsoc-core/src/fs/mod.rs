//! Layer 6: the POSIX-like file system over a volume. `FileSystem` offers inode-level calls
//! (what FUSE and the protocol server use) and, in `api`, path and descriptor calls.
//!
//! Invariants: every directory's `nlink` is 2 + its subdirectories; a file's pages past its
//! size read as zeros (the tail of the last page is zeroed on shrink); the working state is
//! only changed inside `mutate`, which poisons the volume if a change fails half-way.

pub mod api;
mod cleaner;
mod data;
pub mod delta;
pub mod error;
pub mod fsck;
mod inspect;
pub mod records;

use alloc::collections::BTreeMap;
use alloc::vec::Vec;

use fsoc_flash::convert::{u32_from_usize, usize_from_u64};
use fsoc_flash::Flash;

use crate::btree::{KeyValue, Tree, TreeError};
pub use crate::fs::cleaner::SpaceAccount;
use crate::fs::cleaner::SpaceUse;
pub use crate::fs::data::READ_BYTES_MAX;
pub use crate::fs::error::{errno, FsError};
use crate::fs::records::{
    allocation_key, directory_key, parse_directory_key, DirectoryValue, RecordKind, INODE_FLAG_INLINE, NAME_BYTES_MAX,
    ORPHAN_LIST_INODE, ROOT_INODE,
};
pub use crate::fs::records::{FileKind, InodeRecord};
use crate::txn::store::{LogNodeReader, LogNodeStore};
use crate::txn::volume::{unwrap_tree_error, MountReport};
use crate::txn::{TxnError, Volume, VolumeConfig};

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
}

impl Default for FsConfig {
    fn default() -> Self {
        FsConfig {
            volume: VolumeConfig::default(),
            commit_triggers: CommitTriggers::default(),
            open_files_max: 1024,
            io_batch_pages: 64,
            delta_commits: true,
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
    pub cleaner_runs: u64,
    pub pages_relocated: u64,
    /// Measured pages a cleaned victim costs beyond its own live pages (rewritten tree nodes,
    /// its share of the closing commit and paired-page guard), in 1/16 pages, as a moving
    /// average; 0 until the cleaner has run (then an estimate from the tree heights is used).
    pub cleaning_overhead_pages_x16: u64,
}

pub struct FileSystem<F: Flash> {
    pub(crate) volume: Volume<F>,
    pub config: FsConfig,
    /// Logical time for timestamps, set by the caller (no clock is read here).
    pub now_ns: u64,
    open_counts: BTreeMap<u64, u32>,
    pub(crate) descriptors: BTreeMap<u32, api::OpenFile>,
    pub stats: FsStats,
    /// Tree edits made, for `change_count`.
    tree_changes: u64,
    /// Logical changes since the last full commit (for delta commits).
    pub(crate) delta: delta::DeltaLog,
}

impl<F: Flash> FileSystem<F> {
    /// Formats `flash` as an empty volume with a root directory (mode 0o755, owned by root).
    pub fn format(flash: F, config: FsConfig, volume_id: u64) -> Result<FileSystem<F>, FsError> {
        Self::format_at(flash, config, volume_id, 0)
    }

    /// `format`, stamping the root directory with `now_ns` (nanoseconds since the epoch).
    pub fn format_at(flash: F, config: FsConfig, volume_id: u64, now_ns: u64) -> Result<FileSystem<F>, FsError> {
        let volume = Volume::format(flash, config.volume, volume_id)?;
        let mut fs = FileSystem::from_volume(volume, config);
        fs.now_ns = now_ns;
        fs.mutate(|fs| {
            let root = InodeRecord {
                kind: FileKind::Directory,
                mode: 0o755,
                uid: 0,
                gid: 0,
                nlink: 2,
                flags: 0,
                size: 0,
                atime_ns: fs.now_ns,
                mtime_ns: fs.now_ns,
                ctime_ns: fs.now_ns,
                parent: ROOT_INODE,
            };
            fs.put_inode(ROOT_INODE, &root)
        })?;
        fs.commit()?;
        Ok(fs)
    }

    /// Mounts a formatted volume. Reads a bounded number of pages; removes orphans left by a
    /// crash (files unlinked while open) when writable.
    pub fn mount(flash: F, config: FsConfig) -> Result<FileSystem<F>, FsError> {
        let volume = Volume::mount(flash, config.volume)?;
        let mut fs = FileSystem::from_volume(volume, config);
        fs.replay_delta()?;
        if !config.volume.read_only {
            fs.remove_orphans()?;
        }
        Ok(fs)
    }

    fn from_volume(volume: Volume<F>, config: FsConfig) -> Self {
        let delta = delta::DeltaLog::new(volume.delta_bytes_max());
        FileSystem {
            delta,
            volume,
            config,
            now_ns: 0,
            open_counts: BTreeMap::new(),
            descriptors: BTreeMap::new(),
            stats: FsStats::default(),
            tree_changes: 0,
        }
    }

    pub fn mount_report(&self) -> MountReport {
        self.volume.mount_report
    }

    /// Commits and returns the flash (a clean unmount).
    pub fn unmount(mut self) -> Result<F, FsError> {
        let open: Vec<u64> = self.open_counts.keys().copied().collect();
        self.descriptors.clear();
        self.open_counts.clear();
        if !self.config.volume.read_only && !self.volume.is_poisoned() {
            self.mutate(|fs| {
                for inode in open {
                    fs.drop_if_orphan(inode)?;
                }
                // Orphans are files open in this session (a crash's were removed at mount),
                // and every descriptor is closed now.
                fs.volume.may_have_orphans = false;
                Ok(())
            })?;
            self.volume.commit(true)?;
            self.delta.clear();
            self.stats.commits += 1;
        }
        Ok(self.volume.into_flash())
    }

    /// Drops everything uncommitted and returns the flash, as a power cut would.
    pub fn into_flash_without_commit(self) -> F {
        self.volume.into_flash()
    }

    /// A full transaction point: trees, segment table and metaroot; afterwards everything the
    /// previous committed state alone referenced may be reused.
    pub fn commit(&mut self) -> Result<(), FsError> {
        if self.volume.is_poisoned() {
            return Err(FsError::Io(TxnError::Poisoned));
        }
        if self.config.volume.read_only {
            return Ok(());
        }
        self.volume.commit(false)?;
        self.delta.clear();
        self.stats.commits += 1;
        Ok(())
    }

    /// A transaction point for fsync/transact: a delta commit when enabled and the changes
    /// since the last full commit fit one metaroot page, else a full commit.
    pub fn commit_for_sync(&mut self) -> Result<(), FsError> {
        if !self.config.delta_commits || !self.delta.fits() || self.config.volume.read_only {
            return self.commit();
        }
        if self.volume.is_poisoned() {
            return Err(FsError::Io(TxnError::Poisoned));
        }
        self.volume.commit_delta(self.delta.encode())?;
        self.delta.changed = false;
        self.stats.delta_commits += 1;
        Ok(())
    }

    /// Mount: applies the newest delta commit's changes onto the full commit's trees and
    /// segment table (and keeps them in the delta log, which stays cumulative).
    fn replay_delta(&mut self) -> Result<(), FsError> {
        let payload = self.volume.committed().delta.clone();
        if payload.is_empty() {
            return Ok(());
        }
        let decoded = delta::DeltaLog::decode(&payload).map_err(|_| FsError::Corrupt("undecodable delta commit"))?;
        self.volume.ensure_table_loaded()?;
        for (segment_index, allocated, released) in decoded.segments {
            self.volume
                .log
                .table_for_replay()
                .apply_delta(segment_index, allocated, released)
                .map_err(FsError::Corrupt)?;
            self.delta.record_segment(segment_index, allocated, released);
        }
        for (tree_id, key, value) in decoded.entries {
            let which = match tree_id {
                crate::txn::volume::DIRECTORY_TREE_ID => TreeId::Directory,
                crate::txn::volume::ALLOCATION_TREE_ID => TreeId::Allocation,
                _ => return Err(FsError::Corrupt("delta names an unknown tree")),
            };
            match value {
                Some(value) => self.tree_insert(which, &key, &value).map(|_| ())?,
                None => self.tree_remove(which, &key).map(|_| ())?,
            }
        }
        self.delta.changed = false;
        Ok(())
    }

    /// Whether anything changed since the last transaction point (what a periodic commit, an
    /// fsync or a clean unmount would make durable).
    pub fn has_uncommitted_changes(&self) -> bool {
        self.delta.changed
    }

    pub fn commit_counter(&self) -> u64 {
        self.volume.commit_counter()
    }

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
        operation: impl FnOnce(&mut Tree, &mut LogNodeStore<'_, F>) -> Result<T, TreeError>,
    ) -> Result<T, FsError> {
        let volume = &mut self.volume;
        let mut store = LogNodeStore::new(&mut volume.log);
        let tree = match which {
            TreeId::Directory => &mut volume.directory,
            TreeId::Allocation => &mut volume.allocation,
        };
        operation(tree, &mut store).map_err(|error| FsError::from(unwrap_tree_error(error, store.take_error())))
    }

    /// A read of one tree through a shared borrow: several may run at once.
    fn with_tree_read<T>(
        &self,
        which: TreeId,
        operation: impl FnOnce(&Tree, &LogNodeReader<'_, F>) -> Result<T, TreeError>,
    ) -> Result<T, FsError> {
        let volume = &self.volume;
        let reader = LogNodeReader::new(&volume.log);
        let tree = match which {
            TreeId::Directory => &volume.directory,
            TreeId::Allocation => &volume.allocation,
        };
        operation(tree, &reader).map_err(|error| FsError::from(unwrap_tree_error(error, reader.take_error())))
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
        self.delta.record_remove(which.id(), key);
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

    // ----- inode records ------------------------------------------------------------------

    pub fn getattr(&self, inode: u64) -> Result<InodeRecord, FsError> {
        let key = allocation_key(inode, RecordKind::Inode, 0);
        let bytes = self.tree_get(TreeId::Allocation, &key)?.ok_or(FsError::NotFound)?;
        let record = InodeRecord::decode(&bytes)
            .map_err(|_| FsError::CorruptFile { inode, reason: "undecodable inode record" })?;
        self.check_inode_record(inode, &record)?;
        Ok(record)
    }

    /// Checks an inode record read from flash against what this volume can hold, so no later
    /// step sizes an allocation or a loop by a corrupt value (`RecordLimits::check_inode`).
    fn check_inode_record(&self, inode: u64, record: &InodeRecord) -> Result<(), FsError> {
        self.record_limits().check_inode(inode, record).map_err(|reason| FsError::CorruptFile { inode, reason })
    }

    fn put_inode(&mut self, inode: u64, record: &InodeRecord) -> Result<(), FsError> {
        let key = allocation_key(inode, RecordKind::Inode, 0);
        self.tree_insert(TreeId::Allocation, &key, &record.encode())?;
        Ok(())
    }

    fn touch_directory(&mut self, directory: u64, nlink_delta: i32) -> Result<(), FsError> {
        let mut record = self.getattr(directory)?;
        record.mtime_ns = self.now_ns;
        record.ctime_ns = self.now_ns;
        record.nlink =
            record.nlink.checked_add_signed(nlink_delta).ok_or(FsError::Corrupt("directory link count underflow"))?;
        self.put_inode(directory, &record)
    }

    // ----- names --------------------------------------------------------------------------

    pub fn validate_name(name: &[u8]) -> Result<(), FsError> {
        validate_name(name)
    }

    /// Looks a name up in a directory.
    pub fn lookup(&self, parent: u64, name: &[u8]) -> Result<(u64, FileKind), FsError> {
        if name.len() > NAME_BYTES_MAX {
            return Err(FsError::NameTooLong);
        }
        let parent_record = self.getattr(parent)?;
        if parent_record.kind != FileKind::Directory {
            return Err(FsError::NotDirectory);
        }
        // No valid entry holds such a name, so none is found: an entry an image crafted under
        // it ("..", "a/b") is never followed (fsck reports it).
        if validate_name(name).is_err() {
            return Err(FsError::NotFound);
        }
        let bytes = self.tree_get(TreeId::Directory, &directory_key(parent, name))?.ok_or(FsError::NotFound)?;
        let value = DirectoryValue::decode(&bytes)
            .map_err(|_| FsError::CorruptFile { inode: parent, reason: "undecodable directory entry" })?;
        Ok((value.inode, value.kind))
    }

    /// Up to `count_max` entries of a directory with names greater than `after`, in name order.
    /// Names are returned as stored: a caller that hands them on (to an OS, a host path) checks
    /// them with `validate_name` first, as an image may hold any bytes (fsck reports bad ones).
    /// An entry that does not decode is an error for this directory.
    pub fn readdir(
        &self,
        directory: u64,
        after: Option<&[u8]>,
        count_max: usize,
    ) -> Result<Vec<DirectoryEntry>, FsError> {
        if self.getattr(directory)?.kind != FileKind::Directory {
            return Err(FsError::NotDirectory);
        }
        let mut entries = Vec::new();
        let mut undecodable = false;
        // One cursor over the directory's key range: each leaf read once.
        let start = directory_key(directory, after.unwrap_or(&[]));
        self.tree_scan(TreeId::Directory, &start, after.is_none(), &mut |key, value| {
            let Some((parent, name)) = parse_directory_key(key) else { return false };
            if parent != directory || entries.len() >= count_max {
                return false;
            }
            match DirectoryValue::decode(value) {
                Ok(value) => {
                    entries.push(DirectoryEntry { name: name.to_vec(), inode: value.inode, kind: value.kind });
                    true
                }
                Err(_) => {
                    undecodable = true;
                    false
                }
            }
        })?;
        if undecodable {
            return Err(FsError::CorruptFile { inode: directory, reason: "undecodable directory entry" });
        }
        Ok(entries)
    }

    fn directory_is_empty(&self, directory: u64) -> Result<bool, FsError> {
        Ok(self.readdir(directory, None, 1)?.is_empty())
    }

    fn allocate_inode(&mut self) -> u64 {
        let inode = self.volume.next_inode;
        self.volume.next_inode += 1;
        inode
    }

    /// Creates a file, directory or symlink named `name` in `parent`.
    #[allow(clippy::too_many_arguments)]
    pub fn create(
        &mut self,
        parent: u64,
        name: &[u8],
        kind: FileKind,
        mode: u32,
        uid: u32,
        gid: u32,
        symlink_target: Option<&[u8]>,
    ) -> Result<u64, FsError> {
        Self::validate_name(name)?;
        if let Some(target) = symlink_target {
            if target.is_empty() {
                return Err(FsError::NotFound);
            }
            if target.len() > api::PATH_BYTES_MAX {
                return Err(FsError::NameTooLong);
            }
        }
        self.ensure_space(2, SpaceUse::Data)?;
        self.mutate(|fs| {
            match fs.lookup(parent, name) {
                Ok(_) => return Err(FsError::Exists),
                Err(FsError::NotFound) => {}
                Err(error) => return Err(error),
            }
            let inode = fs.allocate_inode();
            let is_directory = kind == FileKind::Directory;
            let record = InodeRecord {
                kind,
                mode: mode & 0o7777,
                uid,
                gid,
                nlink: if is_directory { 2 } else { 1 },
                flags: if kind == FileKind::File { INODE_FLAG_INLINE } else { 0 },
                size: symlink_target.map_or(0, |target| target.len() as u64),
                atime_ns: fs.now_ns,
                mtime_ns: fs.now_ns,
                ctime_ns: fs.now_ns,
                parent: if is_directory { parent } else { 0 },
            };
            fs.put_inode(inode, &record)?;
            if let Some(target) = symlink_target {
                // Targets longer than one tree entry are stored as consecutive chunks.
                for (index, chunk) in target.chunks(fs.symlink_chunk_bytes()).enumerate() {
                    fs.tree_insert(
                        TreeId::Allocation,
                        &allocation_key(inode, RecordKind::Symlink, index as u64),
                        chunk,
                    )?;
                }
            }
            let entry = DirectoryValue { inode, kind };
            fs.tree_insert(TreeId::Directory, &directory_key(parent, name), &entry.encode())?;
            fs.touch_directory(parent, if is_directory { 1 } else { 0 })?;
            Ok(inode)
        })
    }

    /// Bytes of a symlink target kept in one Symlink record.
    pub(crate) fn symlink_chunk_bytes(&self) -> usize {
        Tree::max_entry_bytes(self.volume.layout().page_size_bytes()) - records::ALLOCATION_KEY_BYTES
    }

    fn symlink_chunk_count(&self, target_bytes: u64) -> u64 {
        target_bytes.div_ceil(self.symlink_chunk_bytes() as u64)
    }

    pub fn readlink(&self, inode: u64) -> Result<Vec<u8>, FsError> {
        let record = self.getattr(inode)?;
        if record.kind != FileKind::Symlink {
            return Err(FsError::InvalidArgument("not a symbolic link"));
        }
        // getattr checked 1 <= size <= PATH_BYTES_MAX, which bounds the allocation and loop.
        let mut target = Vec::with_capacity(usize_from_u64(record.size));
        for index in 0..self.symlink_chunk_count(record.size) {
            let chunk = self.tree_get(TreeId::Allocation, &allocation_key(inode, RecordKind::Symlink, index))?;
            target.extend_from_slice(
                &chunk.ok_or(FsError::CorruptFile { inode, reason: "symlink target chunk missing" })?,
            );
            if target.len() as u64 > record.size {
                return Err(FsError::CorruptFile { inode, reason: "symlink target longer than its size" });
            }
        }
        if target.len() as u64 != record.size {
            return Err(FsError::CorruptFile { inode, reason: "symlink target length differs from its size" });
        }
        Ok(target)
    }

    /// Adds a hard link `parent/name` to `inode`.
    pub fn link(&mut self, inode: u64, parent: u64, name: &[u8]) -> Result<(), FsError> {
        Self::validate_name(name)?;
        self.ensure_space(2, SpaceUse::Data)?;
        self.mutate(|fs| {
            let mut record = fs.getattr(inode)?;
            match fs.lookup(parent, name) {
                Ok(_) => return Err(FsError::Exists),
                Err(FsError::NotFound) => {}
                Err(error) => return Err(error),
            }
            if record.kind == FileKind::Directory {
                return Err(FsError::NotPermitted);
            }
            if record.nlink == 0 {
                return Err(FsError::NotFound);
            }
            record.nlink = record.nlink.checked_add(1).ok_or(FsError::TooManyLinks)?;
            record.ctime_ns = fs.now_ns;
            fs.put_inode(inode, &record)?;
            let entry = DirectoryValue { inode, kind: record.kind };
            fs.tree_insert(TreeId::Directory, &directory_key(parent, name), &entry.encode())?;
            fs.touch_directory(parent, 0)
        })?;
        self.after_namespace_change()
    }

    /// Removes `parent/name`: a file or symlink (`directory == false`) or an empty directory.
    pub fn remove(&mut self, parent: u64, name: &[u8], directory: bool) -> Result<(), FsError> {
        self.ensure_space(0, SpaceUse::Metadata)?;
        self.mutate(|fs| {
            let (inode, kind) = fs.lookup(parent, name)?;
            // Read what the removal will need before changing anything, so a corrupt record
            // fails this call alone instead of leaving a half-done removal (which poisons).
            let record = fs.entry_target(inode, kind)?;
            match (directory, kind == FileKind::Directory) {
                (false, true) => return Err(FsError::IsDirectory),
                (true, false) => return Err(FsError::NotDirectory),
                _ => {}
            }
            if directory && !fs.directory_is_empty(inode)? {
                return Err(FsError::NotEmpty);
            }
            if record.kind == FileKind::File && record.nlink <= 1 && !record.is_inline() {
                fs.check_extents(inode)?;
            }
            fs.tree_remove(TreeId::Directory, &directory_key(parent, name))?;
            fs.touch_directory(parent, if directory { -1 } else { 0 })?;
            fs.drop_link(inode)
        })?;
        self.after_namespace_change()
    }

    /// The record of the inode a directory entry names, refused when its kind is not the one
    /// the entry records: removals and renames act on the entry's kind, so a corrupt entry
    /// naming a directory as a file would otherwise delete that directory with its contents,
    /// or move it into its own subtree.
    fn entry_target(&self, inode: u64, kind: FileKind) -> Result<InodeRecord, FsError> {
        let record = self.getattr(inode)?;
        if record.kind != kind {
            return Err(FsError::CorruptFile { inode, reason: "directory entry's kind differs from the inode's" });
        }
        Ok(record)
    }

    /// One fewer name refers to `inode`: delete it when no name and no descriptor remain.
    fn drop_link(&mut self, inode: u64) -> Result<(), FsError> {
        let mut record = self.getattr(inode)?;
        record.nlink = if record.kind == FileKind::Directory { 0 } else { record.nlink.saturating_sub(1) };
        record.ctime_ns = self.now_ns;
        if record.nlink > 0 {
            return self.put_inode(inode, &record);
        }
        if self.open_counts.contains_key(&inode) {
            self.put_inode(inode, &record)?;
            self.volume.may_have_orphans = true;
            self.tree_insert(TreeId::Allocation, &allocation_key(ORPHAN_LIST_INODE, RecordKind::Orphan, inode), &[])?;
            return Ok(());
        }
        self.delete_inode(inode, &record)
    }

    fn delete_inode(&mut self, inode: u64, record: &InodeRecord) -> Result<(), FsError> {
        if record.kind == FileKind::File {
            self.punch(inode, 0, u64::MAX)?;
            if record.is_inline() {
                self.tree_remove(TreeId::Allocation, &allocation_key(inode, RecordKind::Inline, 0))?;
            }
        }
        if record.kind == FileKind::Symlink {
            for index in 0..self.symlink_chunk_count(record.size) {
                self.tree_remove(TreeId::Allocation, &allocation_key(inode, RecordKind::Symlink, index))?;
            }
        }
        self.tree_remove(TreeId::Allocation, &allocation_key(inode, RecordKind::Inode, 0))?;
        Ok(())
    }

    fn drop_if_orphan(&mut self, inode: u64) -> Result<(), FsError> {
        let key = allocation_key(ORPHAN_LIST_INODE, RecordKind::Orphan, inode);
        if self.tree_remove(TreeId::Allocation, &key)?.is_some() {
            let record = self.getattr(inode)?;
            self.delete_inode(inode, &record)?;
        }
        Ok(())
    }

    fn remove_orphans(&mut self) -> Result<(), FsError> {
        if !self.volume.may_have_orphans {
            return Ok(()); // the metaroot says the list is empty: no tree read at mount
        }
        let first = allocation_key(ORPHAN_LIST_INODE, RecordKind::Orphan, 0);
        let Some((key, _)) = self.tree_first_at_or_after(TreeId::Allocation, &first)? else {
            self.volume.may_have_orphans = false;
            return Ok(());
        };
        if records::parse_allocation_key(&key).map(|(inode, _, _)| inode) != Some(ORPHAN_LIST_INODE) {
            self.volume.may_have_orphans = false;
            return Ok(());
        }
        self.mutate(|fs| {
            // Each pass removes one orphan, so the loop ends after at most (count) passes.
            while let Some((key, _)) = fs.tree_first_at_or_after(TreeId::Allocation, &first)? {
                match records::parse_allocation_key(&key) {
                    Some((ORPHAN_LIST_INODE, kind, inode)) if kind == RecordKind::Orphan as u8 => {
                        fs.drop_if_orphan(inode)?
                    }
                    _ => break,
                }
            }
            fs.volume.may_have_orphans = false;
            Ok(())
        })?;
        self.commit()
    }

    /// Atomic rename with POSIX replacement rules.
    pub fn rename(
        &mut self,
        source_parent: u64,
        source_name: &[u8],
        target_parent: u64,
        target_name: &[u8],
    ) -> Result<(), FsError> {
        Self::validate_name(target_name)?;
        self.ensure_space(0, SpaceUse::Metadata)?;
        self.mutate(|fs| {
            let (inode, kind) = fs.lookup(source_parent, source_name)?;
            fs.entry_target(inode, kind)?;
            let target_record = fs.getattr(target_parent)?;
            if target_record.kind != FileKind::Directory {
                return Err(FsError::NotDirectory);
            }
            if kind == FileKind::Directory {
                // A directory may not move into its own subtree: walk up from the target.
                if fs.is_ancestor(inode, target_parent)? {
                    return Err(FsError::InvalidArgument("cannot move a directory into itself"));
                }
            }
            let existing = match fs.lookup(target_parent, target_name) {
                Ok((existing_inode, existing_kind)) => {
                    fs.entry_target(existing_inode, existing_kind)?;
                    Some((existing_inode, existing_kind))
                }
                Err(FsError::NotFound) => None,
                Err(error) => return Err(error),
            };
            if let Some((existing_inode, FileKind::Directory)) = existing {
                // The target is a directory on the source's path: it contains the source.
                if fs.is_ancestor(existing_inode, source_parent)? {
                    return Err(FsError::NotEmpty);
                }
            }
            if let Some((existing_inode, existing_kind)) = existing {
                if existing_inode == inode {
                    return Ok(());
                }
                match (kind == FileKind::Directory, existing_kind == FileKind::Directory) {
                    (true, false) => return Err(FsError::NotDirectory),
                    (false, true) => return Err(FsError::IsDirectory),
                    (true, true) if !fs.directory_is_empty(existing_inode)? => return Err(FsError::NotEmpty),
                    _ => {}
                }
            }
            if let Some((existing_inode, existing_kind)) = existing {
                let is_directory = existing_kind == FileKind::Directory;
                fs.tree_remove(TreeId::Directory, &directory_key(target_parent, target_name))?;
                if is_directory {
                    fs.touch_directory(target_parent, -1)?;
                }
                fs.drop_link(existing_inode)?;
            }
            fs.tree_remove(TreeId::Directory, &directory_key(source_parent, source_name))?;
            let entry = DirectoryValue { inode, kind };
            fs.tree_insert(TreeId::Directory, &directory_key(target_parent, target_name), &entry.encode())?;
            let moved_directory = kind == FileKind::Directory && source_parent != target_parent;
            fs.touch_directory(source_parent, if moved_directory { -1 } else { 0 })?;
            fs.touch_directory(target_parent, if moved_directory { 1 } else { 0 })?;
            let mut record = fs.getattr(inode)?;
            record.ctime_ns = fs.now_ns;
            if kind == FileKind::Directory {
                record.parent = target_parent;
            }
            fs.put_inode(inode, &record)
        })?;
        self.after_namespace_change()
    }

    /// Whether `ancestor` is `directory` or one of its ancestors, following parent links up to
    /// the root. The walk is bounded by `DIRECTORY_DEPTH_MAX`, so a cycle of corrupt parent
    /// links ends in an error, not a hang.
    fn is_ancestor(&mut self, ancestor: u64, directory: u64) -> Result<bool, FsError> {
        let mut current = directory;
        for _depth in 0..DIRECTORY_DEPTH_MAX {
            if current == ancestor {
                return Ok(true);
            }
            if current == records::ROOT_INODE {
                return Ok(false);
            }
            current = self.getattr(current)?.parent;
        }
        Err(FsError::CorruptFile { inode: directory, reason: "parent links do not reach the root (a cycle?)" })
    }

    fn after_namespace_change(&mut self) -> Result<(), FsError> {
        if self.config.commit_triggers.unlink_rename {
            self.commit_for_sync()?;
        }
        Ok(())
    }

    /// Changes attributes; `None` leaves a field as it is.
    pub fn setattr(
        &mut self,
        inode: u64,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        atime_ns: Option<u64>,
        mtime_ns: Option<u64>,
    ) -> Result<InodeRecord, FsError> {
        self.ensure_space(0, SpaceUse::Metadata)?;
        self.mutate(|fs| {
            let mut record = fs.getattr(inode)?;
            if let Some(mode) = mode {
                record.mode = mode & 0o7777;
            }
            if let Some(uid) = uid {
                record.uid = uid;
            }
            if let Some(gid) = gid {
                record.gid = gid;
            }
            if let Some(atime) = atime_ns {
                record.atime_ns = atime;
            }
            if let Some(mtime) = mtime_ns {
                record.mtime_ns = mtime;
            }
            record.ctime_ns = fs.now_ns;
            fs.put_inode(inode, &record)?;
            Ok(record)
        })
    }

    /// Counts an open handle on `inode` (an unlinked file lives until the last one closes).
    pub fn open_inode(&mut self, inode: u64) -> Result<(), FsError> {
        self.getattr(inode)?;
        *self.open_counts.entry(inode).or_insert(0) += 1;
        Ok(())
    }

    pub fn release_inode(&mut self, inode: u64) -> Result<(), FsError> {
        let count = self.open_counts.get_mut(&inode).ok_or(FsError::BadDescriptor)?;
        *count -= 1;
        if *count == 0 {
            self.open_counts.remove(&inode);
            if !self.config.volume.read_only {
                let orphan = allocation_key(ORPHAN_LIST_INODE, RecordKind::Orphan, inode);
                if self.tree_get(TreeId::Allocation, &orphan)?.is_some() {
                    self.mutate(|fs| fs.drop_if_orphan(inode))?;
                }
            }
        }
        if self.config.commit_triggers.close && !self.config.volume.read_only {
            self.commit_for_sync()?;
        }
        Ok(())
    }

    /// Commits if the file's changes should be durable now (fsync).
    pub fn fsync(&mut self, _inode: u64) -> Result<(), FsError> {
        if self.config.commit_triggers.fsync && self.delta.changed {
            self.commit_for_sync()?;
        }
        Ok(())
    }

    pub fn statfs(&mut self) -> Result<StatFs, FsError> {
        self.volume.ensure_table_loaded()?;
        self.statfs_loaded().ok_or(FsError::Corrupt("segment table not loaded after loading it"))
    }

    /// `statfs` through a shared borrow, once the segment table is in memory (after the first
    /// change or `statfs` since mount); `None` before, when only `statfs` (which loads the
    /// table, a bounded number of page reads) can answer.
    pub fn statfs_loaded(&self) -> Option<StatFs> {
        if !self.volume.log.is_table_loaded() {
            return None;
        }
        let space = self.space_account();
        Some(StatFs {
            block_size_bytes: self.volume.layout().geometry.page_data_bytes,
            total_blocks: space.capacity_pages,
            free_blocks: space.writable_pages,
            name_bytes_max: u32_from_usize(NAME_BYTES_MAX),
            next_inode: self.volume.next_inode,
        })
    }
}
