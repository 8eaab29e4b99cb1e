//! Inode records: attributes, link counts, open counts, the orphan list and deletion, statfs.

use fsoc_flash::convert::u32_from_usize;
use fsoc_flash::{Flash, FlushWait};

use super::{records, FileSystem, StatFs, TreeId};
use crate::fs::error::FsError;
use crate::fs::records::{allocation_key, RecordKind, NAME_BYTES_MAX, ORPHAN_LIST_INODE};
use crate::fs::records::{FileKind, InodeRecord};
use crate::fs::space::SpaceUse;

impl<F: Flash> FileSystem<F> {
    pub fn getattr(&self, inode: u64) -> Result<InodeRecord, FsError> {
        let key = allocation_key(inode, RecordKind::Inode, 0);
        let bytes = self.tree_get(TreeId::Allocation, &key)?.ok_or(FsError::NotFound)?;
        let wide = self.has_wide_inodes();
        let mut record = InodeRecord::decode_for(&bytes, wide)
            .map_err(|_| FsError::CorruptFile { inode, reason: "undecodable inode record" })?;
        self.check_inode_record(inode, &record)?;
        if !wide && record.kind == FileKind::File && !record.is_inline() {
            // Older volumes count no pages: st_blocks then says the size in whole pages.
            record.pages = record.size.div_ceil(self.page_size());
        }
        Ok(record)
    }

    /// Checks an inode record read from flash against what this volume can hold, so no later
    /// step sizes an allocation or a loop by a corrupt value (`RecordLimits::check_inode`).
    pub(super) fn check_inode_record(&self, inode: u64, record: &InodeRecord) -> Result<(), FsError> {
        self.record_limits().check_inode(inode, record).map_err(|reason| FsError::CorruptFile { inode, reason })
    }

    pub(super) fn put_inode(&mut self, inode: u64, record: &InodeRecord) -> Result<(), FsError> {
        let key = allocation_key(inode, RecordKind::Inode, 0);
        let bytes = if self.has_wide_inodes() { record.encode() } else { record.encode_narrow() };
        self.tree_insert(TreeId::Allocation, &key, &bytes)?;
        Ok(())
    }

    pub(super) fn touch_directory(&mut self, directory: u64, nlink_delta: i32) -> Result<(), FsError> {
        let mut record = self.getattr(directory)?;
        record.mtime_ns = self.now_ns;
        record.ctime_ns = self.now_ns;
        record.nlink =
            record.nlink.checked_add_signed(nlink_delta).ok_or(FsError::Corrupt("directory link count underflow"))?;
        self.put_inode(directory, &record)
    }

    /// Whether `directory`'s link count can change by `nlink_delta` (as `touch_directory`
    /// would change it), checked before a change starts.
    pub(super) fn check_link_change(&self, directory: u64, nlink_delta: i32) -> Result<(), FsError> {
        let record = self.getattr(directory)?;
        match record.nlink.checked_add_signed(nlink_delta) {
            Some(_) => Ok(()),
            None => Err(FsError::Corrupt("directory link count underflow")),
        }
    }

    pub(super) fn allocate_inode(&mut self) -> u64 {
        let inode = self.volume.next_inode;
        self.volume.next_inode += 1;
        inode
    }

    /// One fewer name refers to `inode`: delete it when no name and no descriptor remain.
    pub(super) fn drop_link(&mut self, inode: u64) -> Result<(), FsError> {
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

    pub(super) fn delete_inode(&mut self, inode: u64, record: &InodeRecord) -> Result<(), FsError> {
        if record.kind == FileKind::File {
            self.drop_pending(inode);
            if record.is_inline() {
                // Its one inline record; extents it should not have are released all the same.
                self.tree_remove(TreeId::Allocation, &allocation_key(inode, RecordKind::Inline, 0))?;
                self.unmap_extents(inode, 0, u64::MAX)?;
            } else {
                self.punch(inode, 0, u64::MAX)?;
            }
        }
        if record.kind == FileKind::Symlink {
            for index in 0..self.symlink_chunk_count(record.size) {
                self.tree_remove(TreeId::Allocation, &allocation_key(inode, RecordKind::Symlink, index))?;
            }
        }
        self.remove_all_xattrs(inode)?;
        self.tree_remove(TreeId::Allocation, &allocation_key(inode, RecordKind::Inode, 0))?;
        Ok(())
    }

    pub(super) fn drop_if_orphan(&mut self, inode: u64) -> Result<(), FsError> {
        let key = allocation_key(ORPHAN_LIST_INODE, RecordKind::Orphan, inode);
        if self.tree_remove(TreeId::Allocation, &key)?.is_some() {
            let record = self.getattr(inode)?;
            self.delete_inode(inode, &record)?;
        }
        Ok(())
    }

    pub(super) fn remove_orphans(&mut self) -> Result<(), FsError> {
        if !self.volume.may_have_orphans {
            return Ok(()); // the metaroot says the list is empty: no tree read at mount
        }
        let first = allocation_key(ORPHAN_LIST_INODE, RecordKind::Orphan, 0);
        let Some((key, _)) = self.tree_first_at_or_after(TreeId::Allocation, &first)? else {
            self.volume.may_have_orphans = false;
            return Ok(());
        };
        if records::parse_allocation_key(&key).map(|(inode, kind, _)| (inode, kind))
            != Some((ORPHAN_LIST_INODE, RecordKind::Orphan as u8))
        {
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

    /// Changes attributes; `None` leaves a field as it is. Immutable: nothing changes;
    /// append-only: no mode, owner or time change (ext4: EPERM).
    pub fn setattr(
        &mut self,
        inode: u64,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        atime_ns: Option<i64>,
        mtime_ns: Option<i64>,
    ) -> Result<InodeRecord, FsError> {
        self.setattr_checked(inode, mode, uid, gid, atime_ns, mtime_ns, true)
    }

    /// `setattr` for times a front end keeps on the kernel's behalf (a FUSE write-back cache
    /// sends the times of written files back in the same form as a user's utimes): an
    /// append-only file takes them; an immutable one still takes nothing.
    pub fn setattr_kept_times(
        &mut self,
        inode: u64,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        atime_ns: Option<i64>,
        mtime_ns: Option<i64>,
    ) -> Result<InodeRecord, FsError> {
        self.setattr_checked(inode, mode, uid, gid, atime_ns, mtime_ns, false)
    }

    #[allow(clippy::too_many_arguments)]
    fn setattr_checked(
        &mut self,
        inode: u64,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        atime_ns: Option<i64>,
        mtime_ns: Option<i64>,
        times_are_the_callers: bool,
    ) -> Result<InodeRecord, FsError> {
        self.ensure_space(0, SpaceUse::Metadata)?;
        self.mutate(|fs| {
            let mut record = fs.getattr(inode)?;
            crate::fs::attributes::refuse_if_immutable(&record)?;
            let times = atime_ns.is_some() || mtime_ns.is_some();
            if mode.is_some() || uid.is_some() || gid.is_some() || (times && times_are_the_callers) {
                crate::fs::attributes::refuse_if_pinned(&record)?;
            }
            if let Some(mode) = mode {
                record.mode = mode & 0o7777;
                // An access ACL follows the new permission bits (Linux's posix_acl_chmod).
                fs.chmod_acl(inode, record.mode)?;
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
    pub fn fsync(&mut self, inode: u64) -> Result<(), FsError> {
        let flush = self.begin_fsync(inode)?;
        self.finish(flush)
    }

    /// `fsync` with the backing store's flush left running (see `begin_commit`): the file's
    /// changes are durable once the returned wait returns `Ok`.
    pub fn begin_fsync(&mut self, _inode: u64) -> Result<FlushWait, FsError> {
        if self.config.commit_triggers.fsync && self.delta.changed {
            return self.begin_commit_for_sync();
        }
        if self.config.volume.read_only || !self.config.commit_triggers.fsync {
            return Ok(FlushWait::done());
        }
        // Nothing changed since the last commit, but that commit's flush may still be running
        // (another caller's `begin_*`, waited for outside the lock): this fsync must not return
        // before it. A flush queued now finishes after it (none when the commit's was not left
        // running).
        Ok(self.volume.begin_flush()?)
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
