//! File data: inline small files, extents for the rest, reads that fan out over the chips,
//! copy-on-write writes, truncation and hole punching.

use alloc::borrow::Cow;
use alloc::vec;
use alloc::vec::Vec;

use fsoc_flash::convert::usize_from_u64;
use fsoc_flash::{Flash, ReadStatus};

use crate::address::LogAddress;
use crate::btree::Tree;
use crate::fs::attributes;
use crate::fs::records::INODE_FLAG_APPEND;
use crate::fs::records::{
    allocation_key, extent_pages_max, page_checksum, parse_allocation_key, Extent, FileKind, InodeRecord, RecordKind,
    RecordLimits, ALLOCATION_KEY_BYTES, FORMAT_VERSION_DATA_CHECKSUMS, INODE_FLAG_INLINE,
};
use crate::fs::space::SpaceUse;
use crate::fs::{FileSystem, FsError, TreeId};
use crate::segment::PageTag;

/// The most bytes one `read` returns; larger requests get a short read.
pub const READ_BYTES_MAX: usize = 64 << 20;

/// Bytes `start..end` of `bytes`, or `None` when the range is not inside it. File offsets
/// are u64; the buffers they index are pages, inline contents and the caller's data, so a
/// range outside one is a broken calculation or a record that disagrees with its data.
fn byte_range(bytes: &[u8], start: u64, end: u64) -> Option<&[u8]> {
    bytes.get(usize::try_from(start).ok()?..usize::try_from(end).ok()?)
}

fn byte_range_mut(bytes: &mut [u8], start: u64, end: u64) -> Option<&mut [u8]> {
    bytes.get_mut(usize::try_from(start).ok()?..usize::try_from(end).ok()?)
}

/// A page the request cuts: read into a scratch page (`targets[index]`), then its bytes from
/// `skip` on copied to `target`.
struct Cut<'a> {
    target: &'a mut [u8],
    skip: usize,
    index: usize,
}

/// `rest` split after `length` bytes, `None` when it is shorter.
fn split_rest(rest: &mut [u8], length: u64) -> Option<(&mut [u8], &mut [u8])> {
    let length = usize::try_from(length).ok()?;
    (length <= rest.len()).then(|| rest.split_at_mut(length))
}

/// Error for a byte range outside its buffer (see `byte_range`).
fn range_error(inode: u64) -> FsError {
    FsError::CorruptFile { inode, reason: "file offsets outside the bytes read or written" }
}

/// A visitor of one file record: its offset (a page index for data records) and its value.
type RecordVisit<'a> = dyn FnMut(u64, &[u8]) -> Result<(), FsError> + 'a;

/// ext4's largest file with 4 KiB blocks (2^32 − 1 blocks): fsoc's at least, from format
/// version 10 on.
pub const EXT4_FILE_BYTES_MAX: u64 = (1 << 44) - 4096;

impl<F: Flash> FileSystem<F> {
    pub(crate) fn page_size(&self) -> u64 {
        self.volume.layout().page_size_bytes() as u64
    }

    /// Largest file kept inline in the allocation tree.
    pub fn inline_bytes_max(&self) -> usize {
        Tree::max_entry_bytes(self.volume.layout().page_size_bytes()) - ALLOCATION_KEY_BYTES
    }

    /// The largest file: 2^32 − 1 pages, and from format version 10 on at least ext4's (with
    /// 4 KiB blocks), 16 TiB − 4 KiB, whatever the page size.
    pub fn file_bytes_max(&self) -> u64 {
        let pages_max = u64::from(u32::MAX) * self.page_size();
        if self.volume.superblock.format_version >= crate::txn::superblock::FORMAT_VERSION_LARGE_FILES {
            pages_max.max(EXT4_FILE_BYTES_MAX)
        } else {
            pages_max
        }
    }

    /// What records may say on this volume (from the geometry).
    pub(crate) fn record_limits(&self) -> RecordLimits {
        let layout = self.volume.layout();
        let pages_per_segment = u64::from(layout.pages_per_segment());
        RecordLimits {
            inline_bytes_max: self.inline_bytes_max() as u64,
            file_bytes_max: self.file_bytes_max(),
            symlink_bytes_max: crate::fs::api::PATH_BYTES_MAX as u64,
            log_first: u64::from(crate::segment::layout::FIRST_LOG_SEGMENT) * pages_per_segment,
            log_end: u64::from(layout.segment_count()) * pages_per_segment,
            page_size_bytes: self.page_size(),
            version3: self.is_version3(),
            extent_pages_max: if self.is_version3() {
                extent_pages_max(Tree::max_entry_bytes(layout.page_size_bytes()))
            } else {
                u32::MAX
            },
            xattrs: self.has_xattrs(),
            wide_inodes: self.has_wide_inodes(),
            short_pages: self.has_short_pages(),
        }
    }

    /// Whether this volume may keep short pages (format version 13 on).
    pub(crate) fn has_short_pages(&self) -> bool {
        self.volume.superblock.format_version >= crate::txn::superblock::FORMAT_VERSION_SHORT_PAGES
    }

    /// Whether inode records are 80 bytes wide (format version 5 on): signed times, birth
    /// time, counted data pages.
    pub(crate) fn has_wide_inodes(&self) -> bool {
        self.volume.superblock.format_version >= crate::fs::records::FORMAT_VERSION_WIDE_INODES
    }

    /// Whether this volume may hold extended attributes (format version 4 on).
    pub(crate) fn has_xattrs(&self) -> bool {
        self.volume.superblock.format_version >= crate::fs::records::FORMAT_VERSION_XATTRS
    }

    /// Whether this volume has format version 3's records (`RecordLimits::version3`): data
    /// checksums, attribute flags, special files, a label.
    pub(crate) fn is_version3(&self) -> bool {
        self.volume.superblock.format_version >= FORMAT_VERSION_DATA_CHECKSUMS
    }

    /// The checksum an extent records for `content` (`None` on a volume without them).
    fn checksum_for(&self, content: &[u8]) -> Option<u32> {
        self.is_version3().then(|| page_checksum(content))
    }

    /// Checks a data page read from flash against the checksum its extent records: a page
    /// the ECC passed but that differs from what was written (a miscorrection, a misdirected
    /// or lost program, a bus error) is an error, never returned as the file's bytes.
    ///
    /// With parity the page is first rebuilt from the rest of its row; the rebuilt bytes are
    /// returned only if they pass the checksum.
    fn verify_page(
        &self,
        inode: u64,
        address: LogAddress,
        content: &mut [u8],
        expected: Option<u32>,
    ) -> Result<(), FsError> {
        match expected {
            Some(checksum) if page_checksum(content) != checksum => {
                let mut rebuilt = content.to_vec();
                if self.volume.log.read_rebuilt(address, &mut rebuilt).map_err(crate::txn::TxnError::from)?
                    && page_checksum(&rebuilt) == checksum
                {
                    content.copy_from_slice(&rebuilt);
                    return Ok(());
                }
                Err(FsError::CorruptFile { inode, reason: "file data page fails its checksum" })
            }
            _ => Ok(()),
        }
    }

    /// Decodes an extent record of `inode` and checks it against the volume: a corrupt record
    /// whose address or length points outside the log is refused here, so reads, punches and
    /// the cleaner only ever see addresses inside the volume.
    pub(crate) fn checked_extent(&self, inode: u64, first_page: u64, value: &[u8]) -> Result<Extent, FsError> {
        let corrupt = |reason| FsError::CorruptFile { inode, reason };
        let extent = Extent::decode(first_page, value).map_err(|_| corrupt("undecodable extent record"))?;
        self.record_limits().check_extent(&extent).map_err(corrupt)?;
        Ok(extent)
    }

    /// The extent holding file page `page`, if any.
    pub(crate) fn extent_at(&self, inode: u64, page: u64) -> Result<Option<Extent>, FsError> {
        let key = allocation_key(inode, RecordKind::Extent, page);
        let Some((found, value)) = self.tree_last_at_or_before(TreeId::Allocation, &key)? else {
            return Ok(None);
        };
        match parse_allocation_key(&found) {
            Some((found_inode, kind, first_page)) if found_inode == inode && kind == RecordKind::Extent as u8 => {
                let extent = self.checked_extent(inode, first_page, &value)?;
                Ok((extent.end_page() > page).then_some(extent))
            }
            _ => Ok(None),
        }
    }

    /// Extents overlapping file pages [first, end), in order.
    fn extents_in(&self, inode: u64, first: u64, end: u64) -> Result<Vec<Extent>, FsError> {
        self.extents_in_at_most(inode, first, end, usize::MAX)
    }

    /// The first `count_max` (at least one) extents overlapping file pages [first, end), in
    /// order.
    pub(crate) fn extents_in_at_most(
        &self,
        inode: u64,
        first: u64,
        end: u64,
        count_max: usize,
    ) -> Result<Vec<Extent>, FsError> {
        let mut extents = Vec::new();
        if let Some(extent) = self.extent_at(inode, first)? {
            extents.push(extent);
        }
        let room = count_max.max(1).saturating_sub(extents.len());
        self.scan_file_records(inode, RecordKind::Extent, (first, false), end, room, &mut |first_page, value| {
            extents.push(self.checked_extent(inode, first_page, value)?);
            Ok(())
        })?;
        Ok(extents)
    }

    /// Visits `inode`'s records of `kind` whose offsets lie in [start, end) (after `start` when
    /// `inclusive` is false), in order, at most `count_max` of them; stops at the first error
    /// `visit` answers and returns it.
    fn scan_file_records(
        &self,
        inode: u64,
        kind: RecordKind,
        (start, inclusive): (u64, bool),
        end: u64,
        count_max: usize,
        visit: &mut RecordVisit<'_>,
    ) -> Result<(), FsError> {
        let mut outcome: Result<(), FsError> = Ok(());
        let mut visited = 0;
        let key = allocation_key(inode, kind, start);
        self.tree_scan(TreeId::Allocation, &key, inclusive, &mut |key, value| match parse_allocation_key(key) {
            Some((found_inode, found_kind, offset))
                if found_inode == inode && found_kind == kind as u8 && offset < end && visited < count_max =>
            {
                visited += 1;
                outcome = visit(offset, value);
                outcome.is_ok()
            }
            _ => false,
        })?;
        outcome
    }

    fn read_inline(&self, inode: u64, size: u64) -> Result<Vec<u8>, FsError> {
        // getattr checked size <= inline_bytes_max, which bounds this allocation.
        assert!(size <= self.inline_bytes_max() as u64, "inline size {size} not checked by getattr");
        let key = allocation_key(inode, RecordKind::Inline, 0);
        let mut bytes = self.tree_get(TreeId::Allocation, &key)?.unwrap_or_default();
        bytes.resize(usize_from_u64(size), 0);
        Ok(bytes)
    }

    /// The short page at file page `page` of `inode`, a file that is not inline (format
    /// version 13 on; docs/FORMAT.md, "Tree records"): the page's first bytes, the rest of the
    /// page reading as zeros.
    fn short_page(&self, inode: u64, page: u64) -> Result<Option<Vec<u8>>, FsError> {
        if !self.has_short_pages() {
            return Ok(None);
        }
        let bytes = self.tree_get(TreeId::Allocation, &allocation_key(inode, RecordKind::Inline, page))?;
        match bytes {
            Some(bytes) if bytes.is_empty() || bytes.len() > self.inline_bytes_max() => {
                Err(FsError::CorruptFile { inode, reason: "short page of a wrong length" })
            }
            bytes => Ok(bytes),
        }
    }

    /// The short pages of `inode` (not inline) among file pages [first, end), in order, at
    /// most `count_max` (at least one) of them; each at most an entry's bytes, so the result
    /// is bounded by the count.
    pub(crate) fn short_pages_in(
        &self,
        inode: u64,
        first: u64,
        end: u64,
        count_max: usize,
    ) -> Result<Vec<(u64, Vec<u8>)>, FsError> {
        let mut pages: Vec<(u64, Vec<u8>)> = Vec::new();
        if !self.has_short_pages() || first >= end {
            return Ok(pages);
        }
        let inline_bytes_max = self.inline_bytes_max();
        self.scan_file_records(inode, RecordKind::Inline, (first, true), end, count_max.max(1), &mut |page, value| {
            if value.is_empty() || value.len() > inline_bytes_max {
                return Err(FsError::CorruptFile { inode, reason: "short page of a wrong length" });
            }
            pages.push((page, value.to_vec()));
            Ok(())
        })?;
        Ok(pages)
    }

    /// Copies the short pages of `inode` that bytes [offset, offset + out.len()) cut into
    /// `out` (read as a hole before: they have no extent), `io_batch_pages` at a time.
    fn overlay_short_pages(&self, inode: u64, offset: u64, out: &mut [u8]) -> Result<(), FsError> {
        let page_size = self.page_size();
        let end = offset + out.len() as u64;
        let batch = self.config.io_batch_pages.max(1);
        let mut cursor = offset / page_size;
        let end_page = end.div_ceil(page_size);
        while cursor < end_page {
            let pages = self.short_pages_in(inode, cursor, end_page, batch)?;
            let Some(&(last, _)) = pages.last() else { break };
            for (page, bytes) in pages {
                let page_start = page * page_size;
                let (from, to) = (offset.max(page_start), end.min(page_start + bytes.len() as u64));
                if from < to {
                    let source =
                        byte_range(&bytes, from - page_start, to - page_start).ok_or_else(|| range_error(inode))?;
                    byte_range_mut(out, from - offset, to - offset)
                        .ok_or_else(|| range_error(inode))?
                        .copy_from_slice(source);
                }
            }
            cursor = last + 1;
        }
        Ok(())
    }

    /// Removes the short pages of `inode` among file pages [first, end); returns how many.
    fn remove_short_pages(&mut self, inode: u64, first: u64, end: u64) -> Result<u64, FsError> {
        let batch = self.config.io_batch_pages.max(1);
        let mut removed = 0;
        let mut cursor = first;
        while cursor < end {
            let pages = self.short_pages_in(inode, cursor, end, batch)?;
            let Some(&(last, _)) = pages.last() else { break };
            for (page, _) in pages {
                self.tree_remove(TreeId::Allocation, &allocation_key(inode, RecordKind::Inline, page))?;
                removed += 1;
            }
            cursor = last + 1;
        }
        Ok(removed)
    }

    /// Reads up to `length` bytes at `offset` into a new vector; short at end of file; holes
    /// read as zeros. `read_into` fills a buffer of the caller's instead.
    pub fn read(&self, inode: u64, offset: u64, length: usize) -> Result<Vec<u8>, FsError> {
        let record = self.getattr(inode)?;
        // Sized by what the file holds past `offset`, at most READ_BYTES_MAX.
        let available = record.size.saturating_sub(offset);
        let mut out = vec![0u8; length.min(READ_BYTES_MAX).min(usize::try_from(available).unwrap_or(usize::MAX))];
        let read = self.read_record_into(inode, &record, offset, &mut out)?;
        out.truncate(read);
        Ok(out)
    }

    /// Reads into `buffer` at `offset` and returns the bytes read: fewer than the buffer holds
    /// at end of file and beyond `READ_BYTES_MAX` (a short read, as POSIX allows); holes read
    /// as zeros. The result needs no allocation of the caller's size.
    pub fn read_into(&self, inode: u64, offset: u64, buffer: &mut [u8]) -> Result<usize, FsError> {
        let record = self.getattr(inode)?;
        self.read_record_into(inode, &record, offset, buffer)
    }

    /// `read_into` of a file whose (checked) inode record the caller has just read: what the
    /// extents hold, with the file's pending pages (small writes in the NVRAM log) over it.
    fn read_record_into(
        &self,
        inode: u64,
        record: &InodeRecord,
        offset: u64,
        buffer: &mut [u8],
    ) -> Result<usize, FsError> {
        let read = self.read_stored_into(inode, record, offset, buffer)?;
        if !record.is_inline() {
            self.overlay_pending(inode, offset, buffer.get_mut(..read).unwrap_or_default());
        }
        Ok(read)
    }

    /// `read_record_into` without the pending pages: the file as its records say.
    fn read_stored_into(
        &self,
        inode: u64,
        record: &InodeRecord,
        offset: u64,
        buffer: &mut [u8],
    ) -> Result<usize, FsError> {
        match record.kind {
            FileKind::Directory => return Err(FsError::IsDirectory),
            FileKind::Symlink => return Err(FsError::InvalidArgument("read of a symbolic link")),
            FileKind::CharDevice | FileKind::BlockDevice | FileKind::Fifo | FileKind::Socket => {
                return Err(FsError::InvalidArgument("read of a device node, FIFO or socket"))
            }
            FileKind::File => {}
        }
        if offset >= record.size || buffer.is_empty() {
            return Ok(0);
        }
        let length = buffer.len().min(READ_BYTES_MAX);
        let end = record.size.min(offset.saturating_add(length as u64));
        // At most `length` bytes, so inside the buffer.
        let out = byte_range_mut(buffer, 0, end - offset).ok_or_else(|| range_error(inode))?;
        if record.is_inline() {
            let bytes = self.read_inline(inode, record.size)?;
            out.copy_from_slice(byte_range(&bytes, offset, end).ok_or_else(|| range_error(inode))?);
            return Ok(out.len());
        }
        let read_bytes = out.len();
        let page_size = self.page_size();
        let page_bytes = self.volume.layout().page_size_bytes();
        let first_page = offset / page_size;
        let end_page = end.div_ceil(page_size);
        // One batch of file pages at a time: the page list, the extents and the targets follow
        // `io_batch_pages`, not the request (up to READ_BYTES_MAX) or the file's
        // fragmentation. The pages of a batch are read together, so pages on different chips
        // are read in parallel. A page that lies whole inside the request is read straight
        // into `out`; only the first and last pages, when the request cuts them, go through a
        // scratch page (`Cut`). Holes are zeroed where they are met.
        let batch = self.config.io_batch_pages.max(1) as u64;
        // (file page, where it is, the checksum its extent records)
        let mut wanted: Vec<(u64, LogAddress, Option<u32>)> = Vec::new();
        let mut addresses: Vec<LogAddress> = Vec::new();
        let mut statuses = Vec::new();
        let mut scratch = [Vec::new(), Vec::new()];
        // `out` not yet handed out, and the file offset of its first byte.
        let mut rest: &mut [u8] = out;
        let mut rest_offset = offset;
        let mut chunk_first = first_page;
        while chunk_first < end_page {
            let chunk_end = (chunk_first + batch).min(end_page);
            wanted.clear();
            for extent in self.extents_in(inode, chunk_first, chunk_end)? {
                for page in extent.first_page.max(chunk_first)..extent.end_page().min(chunk_end) {
                    wanted.push((page, extent.address_of(page), extent.checksum_of(page)));
                }
            }
            chunk_first = chunk_end;
            addresses.clear();
            addresses.extend(wanted.iter().map(|(_, address, _)| *address));
            let mut targets: Vec<&mut [u8]> = Vec::with_capacity(wanted.len());
            let mut cuts: Vec<Cut<'_>> = Vec::new();
            let [scratch_first, scratch_last] = &mut scratch;
            let mut free_scratch = [Some(scratch_first), Some(scratch_last)].into_iter().flatten();
            for (page, _, _) in &wanted {
                let page_start = page * page_size;
                let copy_start = page_start.max(offset);
                let copy_end = (page_start + page_size).min(end);
                // A hole before this page reads as zeros.
                let (hole, tail) = split_rest(rest, copy_start - rest_offset).ok_or_else(|| range_error(inode))?;
                hole.fill(0);
                let (target, tail) = split_rest(tail, copy_end - copy_start).ok_or_else(|| range_error(inode))?;
                rest = tail;
                rest_offset = copy_end;
                if target.len() == page_bytes {
                    targets.push(target);
                } else {
                    let page_buffer = free_scratch.next().ok_or_else(|| range_error(inode))?;
                    page_buffer.resize(page_bytes, 0);
                    let skip = usize_from_u64(copy_start - page_start); // less than a page
                    cuts.push(Cut { target, skip, index: targets.len() });
                    targets.push(page_buffer);
                }
            }
            if targets.is_empty() {
                continue;
            }
            self.volume
                .log
                .read_many_into(&addresses, &mut targets, &mut statuses)
                .map_err(crate::txn::TxnError::from)?;
            if statuses.iter().any(|status| matches!(status, ReadStatus::Uncorrectable | ReadStatus::Erased)) {
                return Err(FsError::CorruptFile { inode, reason: "file data page unreadable" });
            }
            for (target, (_, address, expected)) in targets.iter_mut().zip(&wanted) {
                self.verify_page(inode, *address, target, *expected)?;
            }
            for cut in cuts {
                let page_buffer = targets.get(cut.index).ok_or_else(|| range_error(inode))?;
                let source =
                    page_buffer.get(cut.skip..cut.skip + cut.target.len()).ok_or_else(|| range_error(inode))?;
                cut.target.copy_from_slice(source);
            }
        }
        // A hole at the end reads as zeros.
        rest.fill(0);
        let out = buffer.get_mut(..read_bytes).ok_or_else(|| range_error(inode))?;
        self.overlay_short_pages(inode, offset, out)?;
        Ok(read_bytes)
    }

    /// Content of file page `page` as stored now (zeros for a hole), checked against its
    /// checksum.
    fn page_content(&self, inode: u64, page: u64) -> Result<Vec<u8>, FsError> {
        let mut buffer = vec![0u8; self.volume.layout().page_size_bytes()];
        if let Some(extent) = self.extent_at(inode, page)? {
            self.volume.log.read(extent.address_of(page), &mut buffer)?;
            self.verify_page(inode, extent.address_of(page), &mut buffer, extent.checksum_of(page))?;
        } else if let Some(bytes) = self.short_page(inode, page)? {
            buffer.get_mut(..bytes.len()).ok_or_else(|| range_error(inode))?.copy_from_slice(&bytes);
        }
        Ok(buffer)
    }

    /// Writes `data` at `offset`, extending the file as needed, and sets the file's modification
    /// and change times to now. Returns bytes written.
    pub fn write(&mut self, inode: u64, offset: u64, data: &[u8]) -> Result<usize, FsError> {
        self.write_timed(inode, offset, data, true)
    }

    /// `write` that leaves the file's times as they are, for a caller that keeps them itself
    /// and sets them with `setattr` (the FUSE mount with the kernel's write-back cache, where
    /// a write reaches the volume later than the application made it).
    pub fn write_keeping_times(&mut self, inode: u64, offset: u64, data: &[u8]) -> Result<usize, FsError> {
        self.write_timed(inode, offset, data, false)
    }

    fn write_timed(&mut self, inode: u64, offset: u64, data: &[u8], set_times: bool) -> Result<usize, FsError> {
        if data.is_empty() {
            return Ok(0);
        }
        let end = offset.checked_add(data.len() as u64).ok_or(FsError::FileTooBig)?;
        if end > self.file_bytes_max() {
            return Err(FsError::FileTooBig);
        }
        let page_size_bytes = self.volume.layout().page_size_bytes();
        // A write's pages fit a u32 (a write is at most a few MiB; refused otherwise).
        let pages_needed = u32::try_from(data.len().div_ceil(page_size_bytes)).map_err(|_| FsError::FileTooBig)?;
        self.ensure_space(pages_needed.saturating_add(2), SpaceUse::Data)?;
        let (written, synchronous) = self.mutate(|fs| {
            if fs.rides_in_nvram(data.len()) {
                if let Some(written) = fs.write_pending(inode, offset, data, set_times)? {
                    return Ok(written);
                }
            }
            // Any other write programs the file's pending pages first, then its own.
            fs.materialize_inode(inode)?;
            let mut record = fs.getattr(inode)?;
            match record.kind {
                FileKind::Directory => return Err(FsError::IsDirectory),
                FileKind::Symlink => return Err(FsError::InvalidArgument("write to a symbolic link")),
                FileKind::CharDevice | FileKind::BlockDevice | FileKind::Fifo | FileKind::Socket => {
                    return Err(FsError::InvalidArgument("write to a device node, FIFO or socket"))
                }
                FileKind::File => {}
            }
            attributes::refuse_if_immutable(&record)?;
            if record.flags & INODE_FLAG_APPEND != 0 {
                fs.check_append_only_write(inode, &record, offset, data)?;
            }
            let synchronous = attributes::is_synchronous(&record);
            let new_size = record.size.max(end);
            if record.is_inline() {
                let mut content = fs.read_inline(inode, record.size)?;
                if let Some(new_size_bytes) = usize::try_from(new_size).ok().filter(|&n| n <= fs.inline_bytes_max()) {
                    content.resize(new_size_bytes, 0);
                    byte_range_mut(&mut content, offset, end).ok_or_else(|| range_error(inode))?.copy_from_slice(data);
                    fs.tree_insert(TreeId::Allocation, &allocation_key(inode, RecordKind::Inline, 0), &content)?;
                    record.size = new_size;
                    if set_times {
                        record.mtime_ns = fs.now_ns;
                        record.ctime_ns = fs.now_ns;
                    }
                    return fs.put_inode(inode, &record).map(|()| (data.len(), synchronous));
                }
                // Too big to stay inline: move the existing bytes into page 0 first.
                fs.tree_remove(TreeId::Allocation, &allocation_key(inode, RecordKind::Inline, 0))?;
                record.flags &= !INODE_FLAG_INLINE;
                fs.put_inode(inode, &record)?;
                if !content.is_empty() {
                    record.pages = fs.write_pages(inode, 0, &content, record.size)?.apply(record.pages);
                }
            }
            record.pages = fs.write_pages(inode, offset, data, record.size)?.apply(record.pages);
            record.size = new_size;
            if set_times {
                record.mtime_ns = fs.now_ns;
                record.ctime_ns = fs.now_ns;
            }
            fs.put_inode(inode, &record)?;
            Ok((data.len(), synchronous))
        })?;
        if synchronous {
            self.commit_for_sync()?;
        }
        Ok(written)
    }

    /// Whether a write of `length` bytes at `offset` is a small write that rides in the NVRAM
    /// log (`fs::pending`): the volume has an NVRAM, and the write is small and shorter than a
    /// page (so it touches one page, or two across a page boundary, covering neither).
    fn rides_in_nvram(&self, length: usize) -> bool {
        self.volume.has_nvram()
            && !self.config.volume.read_only
            && length <= self.config.nvram_small_write_bytes
            && (length as u64) < self.page_size()
    }

    /// A small write into a pending page (`rides_in_nvram`): the page's content is updated in
    /// RAM and recorded for the next transaction point; nothing is programmed. `None` when the
    /// file is not one this applies to (inline, or refused: the caller's ordinary path then
    /// decides and answers).
    fn write_pending(
        &mut self,
        inode: u64,
        offset: u64,
        data: &[u8],
        set_times: bool,
    ) -> Result<Option<(usize, bool)>, FsError> {
        let mut record = self.getattr(inode)?;
        if record.kind != FileKind::File || record.is_inline() || record.flags & INODE_FLAG_APPEND != 0 {
            return Ok(None);
        }
        attributes::refuse_if_immutable(&record)?;
        let end = offset + data.len() as u64;
        let page_size = self.page_size();
        let old_size = record.size;
        record.size = record.size.max(end);
        // One page, or two when the write crosses a page boundary.
        for page in offset / page_size..end.div_ceil(page_size) {
            let page_start = page * page_size;
            let mut content = match self.pending.get(&(inode, page)) {
                Some(content) => content.clone(),
                None if page_start < old_size => self.page_content(inode, page)?,
                None => vec![0u8; self.volume.layout().page_size_bytes()],
            };
            let (from, to) = (offset.max(page_start), end.min(page_start + page_size));
            byte_range_mut(&mut content, from - page_start, to - page_start)
                .ok_or_else(|| range_error(inode))?
                .copy_from_slice(byte_range(data, from - offset, to - offset).ok_or_else(|| range_error(inode))?);
            let valid = usize_from_u64(record.size.saturating_sub(page_start).min(page_size));
            self.pending_put(inode, page, content, valid);
        }
        if set_times {
            record.mtime_ns = self.now_ns;
            record.ctime_ns = self.now_ns;
        }
        self.put_inode(inode, &record)?;
        self.stats.small_writes_in_log += 1;
        if self.pending.len() > self.config.nvram_pending_pages_max {
            self.materialize_all_inner()?;
        }
        Ok(Some((data.len(), attributes::is_synchronous(&record))))
    }

    /// An append-only file takes only writes that leave its bytes as they are: at its end, or
    /// starting before it with the same bytes up to the end (what a write-back cache sends when
    /// it writes back the page an append ended in). Anything else is EPERM, as on ext4.
    fn check_append_only_write(
        &self,
        inode: u64,
        record: &InodeRecord,
        offset: u64,
        data: &[u8],
    ) -> Result<(), FsError> {
        if offset > record.size {
            return Err(FsError::NotPermitted);
        }
        let overlap = usize::try_from(record.size - offset).unwrap_or(usize::MAX).min(data.len());
        if overlap == 0 {
            return Ok(());
        }
        let mut existing = vec![0u8; overlap];
        let read = self.read_record_into(inode, record, offset, &mut existing)?;
        if read != overlap || existing.as_slice() != data.get(..overlap).unwrap_or_default() {
            return Err(FsError::NotPermitted);
        }
        Ok(())
    }

    /// Copy-on-write of the pages covering [offset, offset + data.len()) of an extent file;
    /// says how the file's mapped page count changed.
    pub(super) fn write_pages(
        &mut self,
        inode: u64,
        offset: u64,
        data: &[u8],
        old_size: u64,
    ) -> Result<PageChange, FsError> {
        let page_size = self.page_size();
        let end = offset + data.len() as u64;
        let first_page = offset / page_size;
        let end_page = end.div_ceil(page_size);
        // The pages the write cuts (at most its first and last) are read, and checked against
        // their checksums, before anything changes: a corrupt page then fails this write alone
        // instead of a change half made.
        let mut kept: Vec<(u64, Vec<u8>)> = Vec::new();
        for page in [first_page, end_page - 1] {
            let page_start = page * page_size;
            let whole = offset <= page_start && page_start + page_size <= end;
            if !whole && page_start < old_size && kept.iter().all(|(done, _)| *done != page) {
                kept.push((page, self.page_content(inode, page)?));
            }
        }
        let pages_max = self.record_limits().extent_pages_max;
        let batch = self.config.io_batch_pages.max(1) as u64;
        let short_page = self.short_page_for(offset, data.len(), old_size);
        let mut change = PageChange::default();
        let mut chunk_first = first_page;
        while chunk_first < end_page {
            let chunk_end = (chunk_first + batch).min(end_page);
            let mut runs: Vec<Extent> = Vec::new();
            let mut short: Option<(u64, Vec<u8>)> = None;
            for page in chunk_first..chunk_end {
                let page_start = page * page_size;
                let copy_start = page_start.max(offset);
                let copy_end = (page_start + page_size).min(end);
                let source =
                    byte_range(data, copy_start - offset, copy_end - offset).ok_or_else(|| range_error(inode))?;
                // A whole page is programmed straight from the caller's slice.
                let content: Cow<'_, [u8]> = if source.len() as u64 == page_size {
                    Cow::Borrowed(source)
                } else {
                    let mut content = match kept.iter().position(|(done, _)| *done == page) {
                        Some(index) => kept.swap_remove(index).1,
                        None => vec![0u8; self.volume.layout().page_size_bytes()],
                    };
                    byte_range_mut(&mut content, copy_start - page_start, copy_end - page_start)
                        .ok_or_else(|| range_error(inode))?
                        .copy_from_slice(source);
                    Cow::Owned(content)
                };
                if let Some((short_index, stored_bytes)) = short_page.filter(|(index, _)| *index == page) {
                    // The file's last page, and its bytes fit a tree entry: kept in the tree.
                    let bytes = content.get(..stored_bytes).ok_or_else(|| range_error(inode))?;
                    short = Some((short_index, bytes.to_vec()));
                    continue;
                }
                let checksum = self.checksum_for(&content);
                let address = self.volume.log.append(&content, PageTag::Data { inode, page_index: page })?;
                self.delta.data_page_allocated(self.volume.layout().segment_of(address));
                change.mapped += 1;
                let extent = Extent::single(page, address, checksum);
                match runs.last_mut() {
                    Some(run) if run.is_continued_by(&extent) && run.page_count < pages_max => run.extend(&extent),
                    _ => runs.push(extent),
                }
            }
            change.unmapped += self.punch(inode, chunk_first, chunk_end)?;
            for run in runs {
                self.insert_extent(inode, run)?;
            }
            if let Some((page, bytes)) = short {
                self.tree_insert(TreeId::Allocation, &allocation_key(inode, RecordKind::Inline, page), &bytes)?;
                self.stats.short_pages_kept += 1;
                change.mapped += 1;
            }
            chunk_first = chunk_end;
        }
        Ok(change)
    }

    /// The page a write of `length` bytes at `offset` to a file of `old_size` bytes keeps as
    /// a short page (format version 13 on), with the bytes it stores: the file's last page
    /// after the write, when the write does not cover it whole and the file's bytes in it fit
    /// a tree entry. Such a page costs no program now; its bytes are written with the tree's
    /// nodes at the next full commit (docs/DESIGN.md, "Short pages"). Not on a volume with an
    /// NVRAM, whose small writes wait in the NVRAM log as pending pages instead.
    fn short_page_for(&self, offset: u64, length: usize, old_size: u64) -> Option<(u64, usize)> {
        if !self.has_short_pages() || self.volume.has_nvram() || length == 0 {
            return None;
        }
        let page_size = self.page_size();
        let end = offset + length as u64;
        let new_size = old_size.max(end);
        let last_page = (new_size - 1) / page_size;
        let page_start = last_page * page_size;
        let stored_bytes = new_size - page_start;
        // Below a page, so the write cannot cover the page whole.
        (end > page_start && stored_bytes <= self.inline_bytes_max() as u64)
            .then(|| (last_page, usize_from_u64(stored_bytes)))
    }

    /// Inserts an extent, merging it with the one just before when they are contiguous on
    /// flash too (sequential appends then stay one extent), up to the volume's longest
    /// checksummed extent.
    fn insert_extent(&mut self, inode: u64, extent: Extent) -> Result<(), FsError> {
        let mut extent = extent;
        if extent.first_page > 0 {
            if let Some(mut previous) = self.extent_at(inode, extent.first_page - 1)? {
                let pages_max = u64::from(self.record_limits().extent_pages_max);
                if previous.is_continued_by(&extent)
                    && u64::from(previous.page_count) + u64::from(extent.page_count) <= pages_max
                {
                    self.tree_remove(
                        TreeId::Allocation,
                        &allocation_key(inode, RecordKind::Extent, previous.first_page),
                    )?;
                    previous.extend(&extent);
                    extent = previous;
                }
            }
        }
        self.tree_insert(
            TreeId::Allocation,
            &allocation_key(inode, RecordKind::Extent, extent.first_page),
            &extent.encode_value(),
        )?;
        Ok(())
    }

    /// Reads every short page and extent record of `inode` and checks them (`short_pages_in`,
    /// `checked_extent`), without keeping them: a batch or one at a time, so memory does not
    /// follow the file's size. A removal calls it first, so a corrupt record fails the call
    /// before anything changes.
    pub(crate) fn check_extents(&mut self, inode: u64) -> Result<(), FsError> {
        // Short pages first (their lengths: `short_pages_in` refuses a wrong one), a batch at a
        // time.
        let batch = self.config.io_batch_pages.max(1);
        let mut cursor = 0;
        while let Some(&(last, _)) = self.short_pages_in(inode, cursor, u64::MAX, batch)?.last() {
            cursor = last.saturating_add(1);
            if last == u64::MAX {
                break;
            }
        }
        let mut key = allocation_key(inode, RecordKind::Extent, 0);
        let mut next = self.tree_first_at_or_after(TreeId::Allocation, &key)?;
        while let Some((found, value)) = next {
            match parse_allocation_key(&found) {
                Some((found_inode, kind, first_page)) if found_inode == inode && kind == RecordKind::Extent as u8 => {
                    self.checked_extent(inode, first_page, &value)?;
                }
                _ => break,
            }
            key = found;
            next = self.tree_first_after(TreeId::Allocation, &key)?;
        }
        Ok(())
    }

    /// Unmaps file pages [first, end), releasing their flash pages, and removes the short pages
    /// among them. Takes `io_batch_pages` extents at a time, so a delete or truncate of a file
    /// in many extents holds one batch of them, not the whole file's. Not for an inline file
    /// (whose whole-file record is an inline record at page 0: `unmap_extents`).
    /// Returns how many pages were unmapped, short pages included (`InodeRecord::pages`).
    pub(crate) fn punch(&mut self, inode: u64, first: u64, end: u64) -> Result<u64, FsError> {
        let short = self.remove_short_pages(inode, first, end)?;
        Ok(short + self.unmap_extents(inode, first, end)?)
    }

    /// `punch` of the extents alone: their pages among [first, end) released.
    pub(crate) fn unmap_extents(&mut self, inode: u64, first: u64, end: u64) -> Result<u64, FsError> {
        let batch = self.config.io_batch_pages.max(1);
        let mut unmapped = 0;
        let mut cursor = first;
        while cursor < end {
            let extents = self.extents_in_at_most(inode, cursor, end, batch)?;
            let Some(last) = extents.last() else { break };
            // Extents are disjoint and in order: the batch holds every extent overlapping
            // [cursor, last's end), so the next batch starts there.
            let next = last.end_page();
            unmapped += self.punch_extents(inode, first, end, extents)?;
            cursor = next;
        }
        Ok(unmapped)
    }

    /// Unmaps the pages of `extents` that lie in [first, end); returns how many.
    fn punch_extents(&mut self, inode: u64, first: u64, end: u64, extents: Vec<Extent>) -> Result<u64, FsError> {
        let mut unmapped = 0;
        for extent in extents {
            self.tree_remove(TreeId::Allocation, &allocation_key(inode, RecordKind::Extent, extent.first_page))?;
            let cut_first = extent.first_page.max(first);
            let cut_end = extent.end_page().min(end);
            unmapped += cut_end.saturating_sub(cut_first);
            for page in cut_first..cut_end {
                let address = extent.address_of(page);
                self.volume.log.release(address)?;
                self.delta.data_page_released(self.volume.layout().segment_of(address));
            }
            if extent.first_page < cut_first {
                let left = extent.slice(extent.first_page, cut_first);
                self.tree_insert(
                    TreeId::Allocation,
                    &allocation_key(inode, RecordKind::Extent, left.first_page),
                    &left.encode_value(),
                )?;
            }
            if extent.end_page() > cut_end {
                let right = extent.slice(cut_end, extent.end_page());
                self.tree_insert(
                    TreeId::Allocation,
                    &allocation_key(inode, RecordKind::Extent, right.first_page),
                    &right.encode_value(),
                )?;
            }
        }
        Ok(unmapped)
    }

    /// Sets the file size; bytes past a shrink point are gone, growth reads as zeros.
    pub fn truncate(&mut self, inode: u64, size: u64) -> Result<(), FsError> {
        self.resize(inode, size, false)
    }

    /// `truncate`; `growing_append_only` lets an append-only file grow (fallocate may extend
    /// one, truncate may not).
    pub(crate) fn resize(&mut self, inode: u64, size: u64, growing_append_only: bool) -> Result<(), FsError> {
        match self.getattr(inode)?.kind {
            FileKind::Directory => return Err(FsError::IsDirectory),
            FileKind::Symlink => return Err(FsError::InvalidArgument("truncate of a symbolic link")),
            FileKind::CharDevice | FileKind::BlockDevice | FileKind::Fifo | FileKind::Socket => {
                return Err(FsError::InvalidArgument("truncate of a device node, FIFO or socket"))
            }
            FileKind::File => {}
        }
        if size > self.file_bytes_max() {
            return Err(FsError::FileTooBig);
        }
        // Growing needs no data pages (holes); shrinking frees them. Either way at most one
        // page (the zeroed tail, or an inline file moving out) is written.
        self.ensure_space(2, SpaceUse::Metadata)?;
        let synchronous = self.mutate(|fs| {
            fs.materialize_inode(inode)?;
            let mut record = fs.getattr(inode)?;
            match record.kind {
                FileKind::Directory => return Err(FsError::IsDirectory),
                FileKind::Symlink => return Err(FsError::InvalidArgument("truncate of a symbolic link")),
                FileKind::CharDevice | FileKind::BlockDevice | FileKind::Fifo | FileKind::Socket => {
                    return Err(FsError::InvalidArgument("truncate of a device node, FIFO or socket"))
                }
                FileKind::File => {}
            }
            if growing_append_only && size >= record.size {
                attributes::refuse_if_immutable(&record)?;
            } else {
                attributes::refuse_if_pinned(&record)?;
            }
            let page_size = fs.page_size();
            if record.is_inline() {
                let mut content = fs.read_inline(inode, record.size)?;
                if let Some(size_bytes) = usize::try_from(size).ok().filter(|&n| n <= fs.inline_bytes_max()) {
                    content.resize(size_bytes, 0);
                    fs.tree_insert(TreeId::Allocation, &allocation_key(inode, RecordKind::Inline, 0), &content)?;
                } else {
                    fs.tree_remove(TreeId::Allocation, &allocation_key(inode, RecordKind::Inline, 0))?;
                    record.flags &= !INODE_FLAG_INLINE;
                    if !content.is_empty() {
                        record.pages = fs.write_pages(inode, 0, &content, record.size)?.apply(record.pages);
                    }
                }
            } else if size < record.size {
                let keep_pages = size.div_ceil(page_size);
                let tail = size % page_size;
                let last_page = size / page_size;
                // The last page kept, when the new size cuts it, is read (and checked) before
                // anything changes, so a corrupt page fails this call alone.
                let cut_page = if tail != 0 && fs.extent_at(inode, last_page)?.is_some() {
                    Some(fs.page_content(inode, last_page)?)
                } else {
                    None
                };
                let cut_short = if tail != 0 { fs.short_page(inode, last_page)? } else { None };
                record.pages = record.pages.saturating_sub(fs.punch(inode, keep_pages, u64::MAX)?);
                if let Some(mut bytes) = cut_short {
                    // A short page the new size cuts keeps only its bytes below the size.
                    bytes.truncate(usize_from_u64(tail));
                    fs.tree_insert(TreeId::Allocation, &allocation_key(inode, RecordKind::Inline, last_page), &bytes)?;
                }
                // (`tail` is below a page here when `cut_page` is some.)
                let short_fits = fs.short_page_for(size - tail, usize_from_u64(tail), size).is_some();
                match cut_page {
                    Some(mut content) if short_fits => {
                        // The cut page's bytes below the size fit a tree entry: a short page
                        // replaces it, and no page is programmed.
                        content.truncate(usize_from_u64(tail));
                        record.pages = record.pages.saturating_sub(fs.punch(inode, last_page, last_page + 1)?);
                        fs.tree_insert(
                            TreeId::Allocation,
                            &allocation_key(inode, RecordKind::Inline, last_page),
                            &content,
                        )?;
                        fs.stats.short_pages_kept += 1;
                        record.pages = record.pages.saturating_add(1);
                    }
                    Some(mut content) => {
                        // Zero the rest of the last page so a later extension reads zeros there.
                        // `tail` is below the page size.
                        content.iter_mut().skip(usize_from_u64(tail)).for_each(|byte| *byte = 0);
                        let checksum = fs.checksum_for(&content);
                        let address = fs.volume.log.append(&content, PageTag::Data { inode, page_index: last_page })?;
                        fs.delta.data_page_allocated(fs.volume.layout().segment_of(address));
                        // The rewritten page replaces the one it cuts: the count stays.
                        fs.punch(inode, last_page, last_page + 1)?;
                        fs.insert_extent(inode, Extent::single(last_page, address, checksum))?;
                    }
                    None => {}
                }
            }
            record.mtime_ns = fs.now_ns;
            record.size = size;
            record.ctime_ns = fs.now_ns;
            fs.put_inode(inode, &record)?;
            Ok(attributes::is_synchronous(&record))
        })?;
        if synchronous {
            self.commit_for_sync()?;
        }
        Ok(())
    }

    /// Whether `address` still holds page `page` of `inode` in the working state.
    pub(crate) fn data_page_is_live(&mut self, inode: u64, page: u64, address: LogAddress) -> Result<bool, FsError> {
        Ok(self.extent_at(inode, page)?.is_some_and(|extent| extent.address_of(page) == address))
    }

    /// Moves live data pages elsewhere in the log (cleaner) and empties `run`: pages of one
    /// file, consecutive in the file (the caller checked each is live). Each page keeps the
    /// checksum its extent recorded, not one of the bytes read: a page that went bad on flash
    /// stays detectably bad where it moves, instead of being laundered by the copy.
    pub(crate) fn relocate_data_run(&mut self, run: &mut Vec<crate::segment::VictimPage>) -> Result<(), FsError> {
        let Some(PageTag::Data { inode, page_index: first_index }) = run.first().map(|page| page.tag) else {
            run.clear();
            return Ok(());
        };
        let first = first_index;
        let end = first + run.len() as u64;
        let mut checksums: Vec<Option<u32>> = Vec::with_capacity(run.len());
        for extent in self.extents_in(inode, first, end)? {
            for page in extent.first_page.max(first)..extent.end_page().min(end) {
                if page != first + checksums.len() as u64 {
                    return Err(FsError::CorruptFile { inode, reason: "relocated data page has no extent" });
                }
                checksums.push(extent.checksum_of(page));
            }
        }
        if checksums.len() != run.len() {
            return Err(FsError::CorruptFile { inode, reason: "relocated data page has no extent" });
        }
        let pages_max = self.record_limits().extent_pages_max;
        let mut extents: Vec<Extent> = Vec::new();
        for ((index, page), checksum) in run.iter().enumerate().zip(checksums) {
            let page_number = first + index as u64;
            let address = self.volume.log.append(&page.data, PageTag::Data { inode, page_index: page_number })?;
            self.delta.data_page_allocated(self.volume.layout().segment_of(address));
            let extent = Extent::single(page_number, address, checksum);
            match extents.last_mut() {
                Some(last) if last.is_continued_by(&extent) && last.page_count < pages_max => last.extend(&extent),
                _ => extents.push(extent),
            }
        }
        run.clear();
        self.punch(inode, first, end)?;
        for extent in extents {
            self.insert_extent(inode, extent)?;
        }
        Ok(())
    }
}

/// How a write changed the count of a file's mapped data pages (`InodeRecord::pages`).
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct PageChange {
    mapped: u64,
    unmapped: u64,
}

impl PageChange {
    /// `pages` after the change. The count cannot go below zero on a consistent volume (fsck
    /// checks it against the extents); a corrupt count saturates rather than wraps.
    pub(super) fn apply(self, pages: u64) -> u64 {
        pages.saturating_add(self.mapped).saturating_sub(self.unmapped)
    }
}
