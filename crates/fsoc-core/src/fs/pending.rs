//! Small writes that ride in the NVRAM log (issue 10): on a volume with an NVRAM, a write of at
//! most `FsConfig::nvram_small_write_bytes` inside one page of a file kept in extents does not
//! program that page. The page's new content is kept in RAM (a *pending page*) and recorded in
//! the delta under the pseudo-tree `PENDING_TREE_ID`, so the next transaction point's NVRAM
//! record carries it; replaying the record at mount brings the page back. Repeated small writes
//! to one page (appends in 512-byte units, seed 004's PostMark) then cost NVRAM bytes, and the
//! page is programmed once, when it is *materialized*: before every flash commit (a full
//! commit, a delta commit, unmount), before any other change to the file's data (a larger
//! write, truncate, fallocate modes, delete drops them), and when more than
//! `FsConfig::nvram_pending_pages_max` are pending.
//!
//! Invariants: a pending page shadows whatever its extent names (reads overlay it; SEEK_DATA
//! counts it as data); it exists only on a volume with an NVRAM; no flash commit is made while
//! one exists (so a commit that makes the NVRAM log redundant cannot lose it); the space
//! account counts every pending page as a page to be written.

use alloc::vec::Vec;

use fsoc_flash::Flash;

use crate::fs::{FileSystem, FsError};

/// The delta's pseudo-tree of pending pages: key = inode u64 BE ‖ page u64 BE; value = the
/// page's bytes up to the end of the file (at most one page), or a removal when the page was
/// materialized or dropped (docs/FORMAT.md, "Delta payload").
pub const PENDING_TREE_ID: u8 = 3;

pub(crate) fn pending_key(inode: u64, page: u64) -> Vec<u8> {
    let mut key = Vec::with_capacity(16);
    key.extend_from_slice(&inode.to_be_bytes());
    key.extend_from_slice(&page.to_be_bytes());
    key
}

/// (inode, page) of a pending-page key; `None` for a key of another shape (untrusted bytes).
pub(crate) fn parse_pending_key(key: &[u8]) -> Option<(u64, u64)> {
    let inode = u64::from_be_bytes(key.get(..8)?.try_into().ok()?);
    let page = u64::from_be_bytes(key.get(8..16)?.try_into().ok()?);
    (key.len() == 16).then_some((inode, page))
}

impl<F: Flash> FileSystem<F> {
    /// Pages whose content waits in RAM (and in the NVRAM log) to be programmed.
    pub fn pending_page_count(&self) -> usize {
        self.pending.len()
    }

    /// Sets a pending page (a full page buffer) and records it for the next transaction point;
    /// `valid_bytes` of it (up to the end of the file) are recorded.
    pub(crate) fn pending_put(&mut self, inode: u64, page: u64, content: Vec<u8>, valid_bytes: usize) {
        self.tree_changes += 1;
        let recorded = content.get(..valid_bytes.min(content.len())).unwrap_or(&content);
        self.delta.record_put(PENDING_TREE_ID, &pending_key(inode, page), recorded);
        self.pending.insert((inode, page), content);
    }

    fn pending_remove(&mut self, inode: u64, page: u64) {
        self.tree_changes += 1;
        self.delta.record_remove(PENDING_TREE_ID, &pending_key(inode, page));
        self.pending.remove(&(inode, page));
    }

    /// Replays a pending-page entry of a delta payload or NVRAM record (mount).
    pub(super) fn replay_pending(&mut self, key: &[u8], value: Option<&[u8]>) -> Result<(), FsError> {
        let (inode, page) = parse_pending_key(key).ok_or(FsError::Corrupt("malformed pending-page key"))?;
        let page_bytes = self.volume.layout().page_size_bytes();
        match value {
            Some(bytes) if bytes.len() <= page_bytes => {
                let mut content = bytes.to_vec();
                content.resize(page_bytes, 0);
                self.pending_put(inode, page, content, bytes.len());
            }
            Some(_) => return Err(FsError::Corrupt("pending page longer than a page")),
            None => self.pending_remove(inode, page),
        }
        Ok(())
    }

    /// The pending pages of `inode` in [first, end), in order.
    pub(crate) fn pending_pages_in(&self, inode: u64, first: u64, end: u64) -> impl Iterator<Item = (u64, &Vec<u8>)> {
        self.pending.range((inode, first)..(inode, end)).map(|(&(_, page), content)| (page, content))
    }

    /// Copies the pending pages of `inode` over `buffer`, which holds the file's bytes from
    /// `offset` on (what the extents say).
    pub(crate) fn overlay_pending(&self, inode: u64, offset: u64, buffer: &mut [u8]) {
        if self.pending.is_empty() || buffer.is_empty() {
            return;
        }
        let page_size = self.page_size();
        let end = offset + buffer.len() as u64;
        for (page, content) in self.pending_pages_in(inode, offset / page_size, end.div_ceil(page_size)) {
            let page_start = page * page_size;
            let from = offset.max(page_start);
            let to = end.min(page_start + page_size);
            // Both ranges lie inside their buffers: [from, to) is inside the page and the read.
            let source = content.get(to_usize(from - page_start)..to_usize(to - page_start));
            let target = buffer.get_mut(to_usize(from - offset)..to_usize(to - offset));
            if let (Some(source), Some(target)) = (source, target) {
                target.copy_from_slice(source);
            }
        }
    }

    /// Programs the pending pages of `inode` (through the ordinary write path) and forgets
    /// them. Inside a `mutate`; the caller reads the inode record after this.
    pub(crate) fn materialize_inode(&mut self, inode: u64) -> Result<(), FsError> {
        let pages: Vec<u64> = self.pending_pages_in(inode, 0, u64::MAX).map(|(page, _)| page).collect();
        if pages.is_empty() {
            return Ok(());
        }
        let mut record = self.getattr(inode)?;
        let pages_before = record.pages;
        for page in pages {
            let Some(content) = self.pending.get(&(inode, page)).cloned() else { continue };
            let page_start = page * self.page_size();
            // Only the bytes inside the file: a page past the end (a later truncate dropped it)
            // is forgotten.
            let valid = record.size.saturating_sub(page_start).min(self.page_size());
            if valid > 0 && !record.is_inline() {
                let bytes = content.get(..to_usize(valid)).ok_or(FsError::Corrupt("pending page"))?;
                record.pages = self.write_pages(inode, page_start, bytes, record.size)?.apply(record.pages);
            }
            self.pending_remove(inode, page);
        }
        if record.pages != pages_before {
            self.put_inode(inode, &record)?;
        }
        Ok(())
    }

    /// Forgets the pending pages of a file being deleted.
    pub(crate) fn drop_pending(&mut self, inode: u64) {
        let pages: Vec<u64> = self.pending_pages_in(inode, 0, u64::MAX).map(|(page, _)| page).collect();
        for page in pages {
            self.pending_remove(inode, page);
        }
    }

    /// Programs every pending page: before a flash commit (which makes the NVRAM log's records,
    /// the only durable copy of them, redundant) and when too many are pending.
    pub(crate) fn materialize_all(&mut self) -> Result<(), FsError> {
        if self.pending.is_empty() {
            return Ok(());
        }
        self.mutate(Self::materialize_all_inner)
    }

    /// `materialize_all` inside a `mutate` the caller runs.
    pub(crate) fn materialize_all_inner(&mut self) -> Result<(), FsError> {
        let mut inodes: Vec<u64> = self.pending.keys().map(|&(inode, _)| inode).collect();
        inodes.dedup();
        for inode in inodes {
            self.materialize_inode(inode)?;
        }
        Ok(())
    }
}

fn to_usize(value: u64) -> usize {
    usize::try_from(value).unwrap_or(usize::MAX)
}
