//! Holes: lseek's SEEK_DATA and SEEK_HOLE, and fallocate's hole punching, with Linux's
//! semantics. A file page without an extent or a short page is a hole (docs/FORMAT.md); an
//! inline file is all data. Offsets are found from the records alone (a tree search or two
//! per extent met), never by reading file contents.

use alloc::vec;

use crate::fs::records::FileKind;
use crate::fs::{FileSystem, FsError};
use fsoc_flash::Flash;

impl<F: Flash> FileSystem<F> {
    fn regular_size(&self, inode: u64) -> Result<(u64, bool), FsError> {
        let record = self.getattr(inode)?;
        match record.kind {
            FileKind::File => Ok((record.size, record.is_inline())),
            FileKind::Directory => Err(FsError::IsDirectory),
            FileKind::Symlink => Err(FsError::InvalidArgument("seek in a symbolic link")),
            FileKind::CharDevice | FileKind::BlockDevice | FileKind::Fifo | FileKind::Socket => {
                Err(FsError::InvalidArgument("seek in a device node, FIFO or socket"))
            }
        }
    }

    /// SEEK_DATA: the first offset at or after `offset` that holds data. `NoSuchOffset` (ENXIO)
    /// when `offset` is at or past the end of the file or only holes follow it.
    pub fn seek_data(&self, inode: u64, offset: u64) -> Result<u64, FsError> {
        let (size, inline) = self.regular_size(inode)?;
        if offset >= size {
            return Err(FsError::NoSuchOffset);
        }
        if inline {
            return Ok(offset);
        }
        let page_size = self.page_size();
        let mapped = self.extents_in_at_most(inode, offset / page_size, u64::MAX, 1)?.into_iter().next();
        // A pending page (a small write in the NVRAM log) is data too.
        let pending = self.pending_pages_in(inode, offset / page_size, u64::MAX).next().map(|(page, _)| page);
        // So is a short page (kept in the tree).
        let short = self.short_pages_in(inode, offset / page_size, u64::MAX, 1)?.first().map(|(page, _)| *page);
        let Some(first_page) = [mapped.map(|extent| extent.first_page), pending, short].into_iter().flatten().min()
        else {
            return Err(FsError::NoSuchOffset);
        };
        let data = offset.max(first_page.saturating_mul(page_size));
        if data >= size {
            return Err(FsError::NoSuchOffset);
        }
        Ok(data)
    }

    /// SEEK_HOLE: the first offset at or after `offset` in a hole, the end of the file counting
    /// as one. `NoSuchOffset` (ENXIO) when `offset` is at or past the end.
    pub fn seek_hole(&self, inode: u64, offset: u64) -> Result<u64, FsError> {
        let (size, inline) = self.regular_size(inode)?;
        if offset >= size {
            return Err(FsError::NoSuchOffset);
        }
        if inline {
            return Ok(size);
        }
        let page_size = self.page_size();
        let mut page = offset / page_size;
        // Extents are disjoint and each covers at least one page: every step moves past one.
        while page.saturating_mul(page_size) < size {
            match self.extent_at(inode, page)? {
                Some(extent) => page = extent.end_page(),
                None if self.pending.contains_key(&(inode, page)) => page += 1,
                None if !self.short_pages_in(inode, page, page + 1, 1)?.is_empty() => page += 1,
                None => break,
            }
        }
        Ok(offset.max(page.saturating_mul(page_size)).min(size))
    }

    /// fallocate(FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE): bytes [offset, offset + length)
    /// read as zeros afterwards and whole pages among them are unmapped (their flash pages
    /// freed); the size does not change (nothing past it is touched). Pages the range only
    /// partly covers keep their other bytes and are rewritten with zeros in the range.
    pub fn punch_hole(&mut self, inode: u64, offset: u64, length: u64) -> Result<(), FsError> {
        let (size, inline) = self.regular_size(inode)?;
        crate::fs::attributes::refuse_if_pinned(&self.getattr(inode)?)?;
        let end = offset.saturating_add(length).min(size);
        if offset >= end {
            return Ok(());
        }
        let page_size = self.page_size();
        let (first_whole, end_whole) = if inline { (0, 0) } else { (offset.div_ceil(page_size), end / page_size) };
        if first_whole < end_whole {
            let zero_head = offset..first_whole * page_size;
            let zero_tail = end_whole * page_size..end;
            for range in [zero_head, zero_tail] {
                self.write_zeros(inode, range.start, range.end)?;
            }
            self.ensure_space(2, crate::fs::space::SpaceUse::Metadata)?;
            let synchronous = self.mutate(|fs| {
                fs.materialize_inode(inode)?;
                let unmapped = fs.punch(inode, first_whole, end_whole)?;
                let mut record = fs.getattr(inode)?;
                record.pages = record.pages.saturating_sub(unmapped);
                record.mtime_ns = fs.now_ns;
                record.ctime_ns = fs.now_ns;
                fs.put_inode(inode, &record)?;
                Ok(crate::fs::attributes::is_synchronous(&record))
            })?;
            if synchronous {
                self.commit_for_sync()?;
            }
            Ok(())
        } else {
            self.write_zeros(inode, offset, end)
        }
    }

    /// fallocate mode 0 (`keep_size` false) and FALLOC_FL_KEEP_SIZE: checks that the pages of
    /// [offset, offset + length) not yet mapped fit the volume's free capacity now (ENOSPC
    /// otherwise, before anything changes) and, without `keep_size`, extends the file to the
    /// range's end (a hole reading as zeros). Nothing is reserved: a copy-on-write log writes
    /// every page anew, so no earlier promise of space can hold for a later write; OpenZFS
    /// answers fallocate the same way. The range reads as zeros where it was a hole before.
    pub fn allocate(&mut self, inode: u64, offset: u64, length: u64, keep_size: bool) -> Result<(), FsError> {
        let end = self.allocation_range(inode, offset, length)?;
        let (size, inline) = self.regular_size(inode)?;
        crate::fs::attributes::refuse_if_immutable(&self.getattr(inode)?)?;
        let page_size = self.page_size();
        let (first, end_page) = (offset / page_size, end.div_ceil(page_size));
        let mut unmapped = end_page - first;
        if inline {
            // Inline bytes move into page 0 once the file outgrows the tree entry.
            unmapped = unmapped.saturating_sub(u64::from(size > 0 && first == 0));
        } else {
            let batch = self.config.io_batch_pages.max(1);
            let mut cursor = first;
            while cursor < end_page {
                let extents = self.extents_in_at_most(inode, cursor, end_page, batch)?;
                let Some(last) = extents.last() else { break };
                cursor = last.end_page();
                for extent in &extents {
                    let mapped = extent.end_page().min(end_page).saturating_sub(extent.first_page.max(first));
                    unmapped = unmapped.saturating_sub(mapped);
                }
            }
        }
        // A mount reads the segment table at its first need (never mount itself).
        self.volume.ensure_table_loaded()?;
        let (capacity, used) = self.capacity_pages();
        if used.saturating_add(unmapped) > capacity {
            return Err(FsError::NoSpace);
        }
        if !keep_size && end > size {
            self.resize(inode, end, true)?;
        }
        Ok(())
    }

    /// fallocate(FALLOC_FL_ZERO_RANGE, with or without KEEP_SIZE): [offset, offset + length)
    /// reads as zeros; whole pages in it are unmapped (flash freed, as `punch_hole`), and
    /// without `keep_size` the file grows to the range's end.
    pub fn zero_range(&mut self, inode: u64, offset: u64, length: u64, keep_size: bool) -> Result<(), FsError> {
        let end = self.allocation_range(inode, offset, length)?;
        let (size, _) = self.regular_size(inode)?;
        crate::fs::attributes::refuse_if_pinned(&self.getattr(inode)?)?;
        self.punch_hole(inode, offset, length)?;
        if !keep_size && end > size {
            self.resize(inode, end, false)?;
        }
        Ok(())
    }

    /// The end of a fallocate range, checked as Linux does: a zero length is EINVAL, a range
    /// past the largest file EFBIG.
    fn allocation_range(&self, inode: u64, offset: u64, length: u64) -> Result<u64, FsError> {
        if length == 0 {
            return Err(FsError::InvalidArgument("fallocate of an empty range"));
        }
        self.regular_size(inode)?;
        match offset.checked_add(length) {
            Some(end) if end <= self.file_bytes_max() => Ok(end),
            _ => Err(FsError::FileTooBig),
        }
    }

    fn write_zeros(&mut self, inode: u64, start: u64, end: u64) -> Result<(), FsError> {
        if start >= end {
            return Ok(());
        }
        let length = usize::try_from(end - start).map_err(|_| FsError::FileTooBig)?;
        let zeros = vec![0u8; length];
        let written = self.write(inode, start, &zeros)?;
        if written != length {
            return Err(FsError::NoSpace);
        }
        Ok(())
    }
}
