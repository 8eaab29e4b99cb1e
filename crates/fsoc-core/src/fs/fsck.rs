//! The checker: walks both trees and the segment table and reports every violated invariant
//! (checksums and key order via `Tree::check`, each referenced page live and counted once,
//! valid counts exact, link counts, the directory graph a tree, sizes against extents, no
//! orphans after a clean unmount).

use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;

use fsoc_flash::Flash;

use core::cell::RefCell;

use crate::address::LogAddress;
use crate::fs::records::{
    parse_allocation_key, parse_directory_key, DirectoryValue, Extent, FileKind, InodeRecord, RecordKind, RecordLimits,
    LABEL_BYTES_MAX, ORPHAN_LIST_INODE, ROOT_INODE,
};
use crate::fs::xattrs::{xattr_allowed_on, Keep, XattrAssembly, XattrEntry};
use crate::fs::{validate_name, FileSystem, FsError, TreeId};

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FsckReport {
    /// The first `VIOLATIONS_LISTED_MAX` violations found.
    pub violations: Vec<String>,
    /// Every violation found, listed or not.
    pub violation_count: u64,
    pub files: u64,
    pub directories: u64,
    pub symlinks: u64,
    /// Device nodes, FIFOs and sockets.
    pub special_files: u64,
    pub directory_nodes: u64,
    pub allocation_nodes: u64,
    pub data_pages: u64,
    pub orphans: u64,
    /// Extended attributes (format version 4 on).
    pub xattrs: u64,
    /// Blocks marked bad (factory or grown) on each chip, in chip order (a missing chip's
    /// count is 0: it cannot be asked).
    pub bad_blocks_per_chip: Vec<u32>,
}

impl FsckReport {
    pub fn is_clean(&self) -> bool {
        self.violation_count == 0
    }
}

/// Violations listed at most; beyond that they are only counted, so a badly damaged volume
/// cannot make the report's memory grow without bound.
pub const VIOLATIONS_LISTED_MAX: usize = 200;

/// Collects violations: counts all, keeps the first `VIOLATIONS_LISTED_MAX`.
#[derive(Default)]
struct Violations {
    listed: Vec<String>,
    count: u64,
}

impl Violations {
    fn push(&mut self, violation: String) {
        self.count += 1;
        if self.listed.len() < VIOLATIONS_LISTED_MAX {
            self.listed.push(violation);
        }
    }
}

impl<F: Flash> FileSystem<F> {
    /// Both superblock copies of every chip present must read back and agree with the one mount used
    /// (mount reads one copy per chip, so a lost copy would otherwise go unnoticed).
    fn check_superblock_copies(&mut self, violations: &mut Violations) {
        let layout = self.volume.layout();
        let mounted = self.volume.superblock;
        let mut buffer = Vec::new();
        // A volume running without a chip (degraded) has no superblock there to check: the
        // mount report and `fsoc info` say so, and a rebuild writes it again.
        let missing = self.volume.missing_chip();
        // Version 9 rewrites the superblock in two homes, block 0 included: the copies checked are
        // the current generation's, wherever it lives (a writable mount after a power cut writes it
        // again when a cut left one torn).
        let (home, first_page) = if mounted.format_version >= crate::txn::superblock::FORMAT_VERSION_SUPERBLOCK_HOMES {
            mounted.generation_place(mounted.generation).unwrap_or((crate::segment::layout::SUPERBLOCK_SEGMENT, 0))
        } else {
            (crate::segment::layout::SUPERBLOCK_SEGMENT, 0)
        };
        let generation = (mounted.format_version >= crate::txn::superblock::FORMAT_VERSION_SUPERBLOCK_HOMES)
            .then_some(mounted.generation);
        for chip_index in (0..layout.chip_count).filter(|&chip| Some(chip) != missing) {
            for copy in 0..2 {
                let address = fsoc_flash::PageAddress::new(chip_index, home, first_page + copy);
                let problem = match self.volume.log.read_physical_with_status(address, &mut buffer) {
                    Err(error) => Some(format!("unreadable ({error})")),
                    Ok(fsoc_flash::ReadStatus::Uncorrectable) => Some(String::from("unreadable (uncorrectable)")),
                    Ok(fsoc_flash::ReadStatus::Erased) => Some(String::from("erased")),
                    Ok(_) => match crate::txn::Superblock::decode(&buffer) {
                        Err(error) => Some(format!("undecodable ({error})")),
                        Ok(found) if found.volume_id != mounted.volume_id || found.chip_index != chip_index => {
                            Some(String::from("belongs to another volume or chip"))
                        }
                        Ok(found) if generation.is_some_and(|generation| found.generation != generation) => {
                            Some(format!("generation {} where {} was expected", found.generation, mounted.generation))
                        }
                        Ok(_) => None,
                    },
                };
                if let Some(problem) = problem {
                    violations.push(format!("superblock copy {copy} of chip {chip_index}: {problem}"));
                }
            }
        }
    }

    /// Checks the working state (after a mount, the committed one). `expect_no_orphans`: set
    /// after a clean unmount/mount, when no file may be unlinked-but-open.
    ///
    /// Every violation is counted (at most `VIOLATIONS_LISTED_MAX` are listed), and the check
    /// goes on past each: an unreadable segment table or tree node is reported and the rest
    /// is still checked. Memory and time are bounded by the volume, never by a value read from
    /// it: page references are counted in arrays sized by the volume's page count, each tree
    /// page is read once, an extent is checked against the log before its pages are counted
    /// (in O(1), as a difference array), and per inode fsck keeps one fixed-size entry. The
    /// walks are iterative (the tree walk's stack is bounded by the height; the walk up the
    /// directory graph keeps an explicit path, and a directory met twice on it is a cycle).
    pub fn fsck(&mut self, expect_no_orphans: bool) -> Result<FsckReport, FsError> {
        let mut report = FsckReport::default();
        let violations = RefCell::new(Violations::default());
        if let Some(damage) = self.volume.mount_report.damage {
            violations.borrow_mut().push(format!("metaroot: {damage}"));
        }
        self.check_superblock_copies(&mut violations.borrow_mut());
        // An unreadable segment table is a violation; the trees are still checked.
        let table_loaded = match self.volume.ensure_table_loaded() {
            Ok(()) => true,
            Err(error) => {
                violations.borrow_mut().push(format!("segment table: {error}"));
                false
            }
        };
        let layout = self.volume.layout();
        let limits = self.record_limits();
        let log_page_count = usize::try_from(limits.log_end).unwrap_or(usize::MAX);
        let references = RefCell::new(PageReferences::new(log_page_count, layout.mirrors_metadata()));

        // Allocation tree first: inodes, then (in the same key order) their data records.
        let mut walk = AllocationWalk::new(limits);
        let mut trees_whole = true;
        let stats = self.with_tree(TreeId::Allocation, |tree, store| {
            Ok(tree.check_all(
                store,
                &mut |address| references.borrow_mut().node(address),
                &mut |key, value| {
                    walk.record(key, value, &mut references.borrow_mut(), &mut violations.borrow_mut());
                    Ok(())
                },
                &mut |violation| {
                    trees_whole = false;
                    violations.borrow_mut().push(format!("allocation tree: {violation}"));
                    true
                },
            ))
        })?;
        report.allocation_nodes = stats.node_count;
        walk.finish_inode(&mut violations.borrow_mut());
        let AllocationWalk { mut inodes, orphans, data_pages, xattrs, .. } = walk;
        report.data_pages = data_pages;
        report.xattrs = xattrs;
        report.bad_blocks_per_chip = self.bad_blocks_per_chip();
        for &orphan in &orphans {
            match facts_of_mut(&mut inodes, orphan) {
                Some(facts) => facts.orphan = true,
                None => violations.borrow_mut().push(format!("orphan list names missing inode {orphan}")),
            }
        }

        // Directory tree: each entry checked as it is met, against the inodes.
        let stats = self.with_tree(TreeId::Directory, |tree, store| {
            Ok(tree.check_all(
                store,
                &mut |address| references.borrow_mut().node(address),
                &mut |key, value| {
                    check_directory_entry(key, value, &mut inodes, &mut violations.borrow_mut());
                    Ok(())
                },
                &mut |violation| {
                    trees_whole = false;
                    violations.borrow_mut().push(format!("directory tree: {violation}"));
                    true
                },
            ))
        })?;
        report.directory_nodes = stats.node_count;
        let mut violations = violations.into_inner();
        let mut references = references.into_inner();

        if table_loaded {
            let table = self.volume.log.table();
            // The totals and orderings the allocator, the cleaner and statfs use instead of
            // scanning must equal a recount of the entries.
            if let Some(mismatch) = table.index_mismatch() {
                violations.push(format!("segment table: {mismatch}"));
            }
            for pointer in table.directory.iter().chain(&table.index_directory) {
                references.table_page(pointer.address);
            }
            // Every referenced page once, and the table's valid counts exact. When a tree could
            // not be walked whole, its unseen pages would make every count look wrong: one
            // violation says so instead of a flood of derived ones.
            let counts = references.counts();
            let pages_per_segment = layout.pages_per_segment() as usize;
            let mut compared = 0u32;
            for segment in 0..table.segment_count() {
                let first = segment as usize * pages_per_segment;
                let segment_pages = counts.get(first..first + pages_per_segment).unwrap_or(&[]);
                let mut expected = 0u32;
                for (offset, &count) in segment_pages.iter().enumerate() {
                    if count > 1 {
                        violations.push(format!("page {} referenced {count} times", first + offset));
                    }
                    expected += u32::from(count > 0);
                }
                let entry = table.entry(segment);
                if entry.retired && expected > 0 && entry.valid_pages == 0 {
                    violations.push(format!("segment {segment}: retired but referenced"));
                }
                if trees_whole && entry.valid_pages != expected {
                    violations.push(format!(
                        "segment {segment}: table says {} valid pages, trees reference {expected}",
                        entry.valid_pages
                    ));
                }
                compared += 1;
            }
            if !trees_whole && compared > 0 {
                violations.push(String::from("segment valid counts not compared: a tree could not be walked whole"));
            }
        }

        // Link counts, kinds, orphans.
        for facts in &inodes {
            let inode = facts.inode;
            let names = facts.names;
            match facts.kind {
                FileKind::Directory if facts.orphan => {
                    // Removed while open (nlink 0, no name): gone at the last close or mount.
                    report.directories += 1;
                    if facts.nlink != 0 || names != 0 {
                        violations.push(format!("orphan directory {inode}: nlink {} with {names} names", facts.nlink));
                    }
                }
                FileKind::Directory => {
                    report.directories += 1;
                    let expected = 2u64 + u64::from(facts.subdirectories);
                    if u64::from(facts.nlink) != expected {
                        violations.push(format!("directory {inode}: nlink {} but {expected} expected", facts.nlink));
                    }
                    if inode == ROOT_INODE {
                        if names != 0 {
                            violations.push(String::from("the root directory has a name"));
                        }
                    } else if facts.entry_parent != Some(facts.parent) {
                        violations
                            .push(format!("directory {inode}: parent field {} disagrees with its entry", facts.parent));
                    }
                }
                kind => {
                    match kind {
                        FileKind::File => report.files += 1,
                        FileKind::Symlink => report.symlinks += 1,
                        _ => report.special_files += 1,
                    }
                    if facts.nlink != names {
                        violations.push(format!("inode {inode}: nlink {} but {names} names", facts.nlink));
                    }
                    if names == 0 && !facts.orphan {
                        violations.push(format!("inode {inode}: no name and not an orphan (leaked)"));
                    }
                }
            }
        }
        match facts_of(&inodes, ROOT_INODE) {
            Some(root) if root.kind == FileKind::Directory => {}
            Some(_) => violations.push(String::from("the root inode is not a directory")),
            None => violations.push(String::from("root directory missing")),
        }
        check_directory_graph(&mut inodes, &mut violations);
        report.orphans = orphans.len() as u64;
        if expect_no_orphans && !orphans.is_empty() {
            violations.push(format!("{} orphans remain after a clean mount", orphans.len()));
        }
        report.violation_count = violations.count;
        report.violations = violations.listed;
        Ok(report)
    }
}

/// How many times each log page is referenced, in memory sized by the volume: one bit per page
/// for tree nodes (so a node page met twice is caught before it is read again) and a
/// difference array for extents and table pages (an extent costs O(1) whatever its length).
struct PageReferences {
    node_bits: Vec<u64>,
    /// `runs[p] - runs[p - 1]` summed up to `p` = extent and table references of page `p`.
    runs: Vec<i64>,
    page_count: usize,
    /// Mirror-meta: every node and table page at `a` has its second copy at `a + 1`.
    mirrored: bool,
}

impl PageReferences {
    fn new(page_count: usize, mirrored: bool) -> Self {
        PageReferences {
            node_bits: alloc::vec![0; page_count.div_ceil(64)],
            runs: alloc::vec![0; page_count + 1],
            page_count,
            mirrored,
        }
    }

    /// A tree node page; false when it was met before (the tree walk then skips it). Pages
    /// outside the volume are not counted (reading them fails and is reported).
    fn node(&mut self, address: LogAddress) -> bool {
        let page = address.0 as usize;
        let Some(word) = self.node_bits.get_mut(page / 64) else {
            return true;
        };
        let bit = 1u64 << (page % 64);
        let first = *word & bit == 0;
        *word |= bit;
        if first && self.mirrored && page + 2 <= self.page_count {
            // The second copy is referenced too (a first copy at an odd address overlaps the
            // pair before it, and shows as a page referenced twice).
            self.run(u64::from(address.0) + 1, 1);
        }
        first
    }

    /// Pages `first..first + count`, already checked to lie in the volume.
    fn run(&mut self, first: u64, count: u64) {
        let (Ok(start), Ok(end)) = (usize::try_from(first), usize::try_from(first + count)) else { return };
        assert!(start <= end && end <= self.page_count, "run {start}..{end} not checked against the volume");
        if let Some(count) = self.runs.get_mut(start) {
            *count += 1;
        }
        if let Some(count) = self.runs.get_mut(end) {
            *count -= 1;
        }
    }

    fn table_page(&mut self, address: LogAddress) {
        let copies = if self.mirrored { 2 } else { 1 };
        if (address.0 as usize).saturating_add(copies) <= self.page_count {
            self.run(u64::from(address.0), copies as u64);
        }
    }

    /// References per page, saturating at 255.
    fn counts(&self) -> Vec<u8> {
        let mut counts = Vec::with_capacity(self.page_count);
        let mut running = 0i64;
        for page in 0..self.page_count {
            running += self.runs.get(page).copied().unwrap_or(0);
            let node = self.node_bits.get(page / 64).is_some_and(|word| word & (1 << (page % 64)) != 0);
            let total = running + i64::from(node);
            counts.push(u8::try_from(total.max(0)).unwrap_or(u8::MAX));
        }
        counts
    }
}

/// Where a directory's walk up to the root stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Reach {
    Unknown,
    OnPath,
    Root,
    Cut,
}

/// What fsck keeps per inode: fixed size, whatever the records say.
#[derive(Clone, Copy, Debug)]
struct InodeFacts {
    inode: u64,
    kind: FileKind,
    nlink: u32,
    /// Directories: the parent field of the record.
    parent: u64,
    /// Entries naming this inode (saturating).
    names: u32,
    /// Entries of kind directory in this directory (saturating).
    subdirectories: u32,
    /// Directories: the directory whose entry names this one (the first met).
    entry_parent: Option<u64>,
    orphan: bool,
    reach: Reach,
}

/// The inode whose records the allocation walk is in.
struct CurrentInode {
    inode: u64,
    record: InodeRecord,
    inline_bytes: Option<u64>,
    symlink_bytes: u64,
    symlink_chunks: u64,
    extent_end: u64,
    /// Pages the inode's extents map (checked against the record's count, version 5 on).
    mapped_pages: u64,
    /// The file pages of its short pages, in order (they precede its extents in key order).
    short_pages: Vec<u64>,
    xattrs: XattrAssembly<'static>,
}

/// The allocation tree's records, met in key order (inode, then record kind, then offset), so
/// each inode's data records follow its inode record and can be checked on the spot.
struct AllocationWalk {
    limits: RecordLimits,
    inodes: Vec<InodeFacts>,
    orphans: Vec<u64>,
    current: Option<CurrentInode>,
    data_pages: u64,
    xattrs: u64,
}

impl AllocationWalk {
    fn new(limits: RecordLimits) -> Self {
        AllocationWalk { limits, inodes: Vec::new(), orphans: Vec::new(), current: None, data_pages: 0, xattrs: 0 }
    }

    fn record(&mut self, key: &[u8], value: &[u8], references: &mut PageReferences, violations: &mut Violations) {
        let Some((inode, kind, offset)) = parse_allocation_key(key) else {
            violations.push(format!("allocation key of {} bytes is malformed", key.len()));
            return;
        };
        if self.current.as_ref().is_some_and(|current| current.inode != inode) {
            self.finish_inode(violations);
        }
        if inode == ORPHAN_LIST_INODE {
            if kind == RecordKind::Orphan as u8 {
                self.orphans.push(offset);
            } else if kind == RecordKind::Label as u8 {
                if !self.limits.version3 {
                    violations.push("a volume label on a volume older than format version 3".into());
                } else if offset != 0 || value.is_empty() || value.len() > LABEL_BYTES_MAX || value.contains(&0) {
                    violations.push(format!("volume label record at offset {offset} of {} bytes", value.len()));
                }
            } else {
                violations.push(format!("orphan list: record of kind {kind}"));
            }
            return;
        }
        if kind == RecordKind::Inode as u8 {
            self.inode_record(inode, offset, value, violations);
            return;
        }
        let Some(current) = self.current.as_mut() else {
            violations.push(format!("inode {inode}: record of kind {kind} but no inode record"));
            return;
        };
        match kind {
            k if k == RecordKind::Inline as u8
                && current.record.kind == FileKind::File
                && !current.record.is_inline() =>
            {
                // A short page (format version 13 on): the first bytes of file page `offset`.
                let page_start = offset.saturating_mul(self.limits.page_size_bytes);
                if !self.limits.short_pages {
                    violations.push(format!(
                        "inode {inode}: a short page (page {offset}) on a volume older than format version 13"
                    ));
                } else if value.is_empty() || value.len() as u64 > self.limits.inline_bytes_max {
                    violations.push(format!("inode {inode}: short page {offset} of {} bytes", value.len()));
                } else if page_start.saturating_add(value.len() as u64) > current.record.size {
                    violations.push(format!(
                        "inode {inode}: short page {offset} of {} bytes past size {}",
                        value.len(),
                        current.record.size
                    ));
                }
                // Keys come in order: the short pages before every extent of the inode. Each
                // counts in the record's `pages`.
                current.short_pages.push(offset);
                current.mapped_pages += 1;
            }
            k if k == RecordKind::Inline as u8 => {
                if current.record.kind != FileKind::File || !current.record.is_inline() || offset != 0 {
                    violations.push(format!("inode {inode}: inline data at offset {offset} on a non-inline inode"));
                }
                current.inline_bytes = Some(value.len() as u64);
            }
            k if k == RecordKind::Extent as u8 => {
                let extent = match Extent::decode(offset, value) {
                    Ok(extent) => extent,
                    Err(error) => {
                        violations.push(format!("inode {inode} extent at page {offset}: {error}"));
                        return;
                    }
                };
                if current.record.kind != FileKind::File || current.record.is_inline() {
                    violations.push(format!("inode {inode}: extent on a non-extent inode"));
                }
                if extent.end_page() > current.record.size.div_ceil(self.limits.page_size_bytes) {
                    violations.push(format!(
                        "inode {inode}: {} past size {}",
                        describe_extent(&extent),
                        current.record.size
                    ));
                }
                if current.extent_end > extent.first_page {
                    violations.push(format!("inode {inode}: overlapping extents at page {}", extent.first_page));
                }
                let shadowed = current.short_pages.partition_point(|page| *page < extent.first_page);
                if current.short_pages.get(shadowed).is_some_and(|page| *page < extent.end_page()) {
                    violations.push(format!("inode {inode}: {} maps a short page", describe_extent(&extent)));
                }
                current.extent_end = current.extent_end.max(extent.end_page());
                // The whole run must lie in the log before it is counted: a corrupt page count
                // must not drive work (S5: 2^31 pages took 20 GB and a minute).
                if let Err(reason) = self.limits.check_extent(&extent) {
                    let reason = if reason.contains("log") { "lies outside the log" } else { reason };
                    violations.push(format!("inode {inode}: {} {reason}", describe_extent(&extent)));
                    return;
                }
                references.run(u64::from(extent.address.0), u64::from(extent.page_count));
                self.data_pages += u64::from(extent.page_count);
                current.mapped_pages += u64::from(extent.page_count);
            }
            k if k == RecordKind::Xattr as u8 => {
                if !self.limits.xattrs {
                    violations
                        .push(format!("inode {inode}: an extended attribute on a volume older than format version 4"));
                    return;
                }
                match current.xattrs.push(offset, value) {
                    Ok(done) => Self::count_xattr(inode, &current.record, done, &mut self.xattrs, violations),
                    Err(reason) => violations.push(format!("inode {inode}: {reason}")),
                }
            }
            k if k == RecordKind::Symlink as u8 => {
                if current.record.kind != FileKind::Symlink || offset != current.symlink_chunks {
                    violations.push(format!("inode {inode}: symlink chunk {offset} out of place"));
                }
                current.symlink_chunks = current.symlink_chunks.saturating_add(1);
                current.symlink_bytes = current.symlink_bytes.saturating_add(value.len() as u64);
            }
            other => violations.push(format!("inode {inode}: unknown record kind {other}")),
        }
    }

    fn inode_record(&mut self, inode: u64, offset: u64, value: &[u8], violations: &mut Violations) {
        if offset != 0 {
            violations.push(format!("inode {inode}: inode record at offset {offset}"));
            return;
        }
        let record = match InodeRecord::decode_for(value, self.limits.wide_inodes) {
            Ok(record) => record,
            Err(error) => {
                violations.push(format!("inode {inode}: {error}"));
                return;
            }
        };
        if let Err(reason) = self.limits.check_inode(inode, &record) {
            violations.push(format!("inode {inode}: {reason}"));
        }
        // Keys come strictly increasing from the tree walk, so the list stays sorted.
        assert!(
            self.inodes.last().is_none_or(|last| last.inode < inode),
            "allocation walk out of key order at inode {inode}"
        );
        self.inodes.push(InodeFacts {
            inode,
            kind: record.kind,
            nlink: record.nlink,
            parent: record.parent,
            names: 0,
            subdirectories: 0,
            entry_parent: None,
            orphan: false,
            reach: Reach::Unknown,
        });
        self.current = Some(CurrentInode {
            inode,
            record,
            inline_bytes: None,
            symlink_bytes: 0,
            symlink_chunks: 0,
            extent_end: 0,
            mapped_pages: 0,
            short_pages: Vec::new(),
            xattrs: XattrAssembly::new(Keep::Names),
        });
    }

    /// Counts a whole attribute and checks that its inode may carry it.
    fn count_xattr(
        inode: u64,
        record: &InodeRecord,
        entry: Option<XattrEntry>,
        count: &mut u64,
        violations: &mut Violations,
    ) {
        let Some(entry) = entry else { return };
        *count += 1;
        if !xattr_allowed_on(&entry.name, record) {
            violations.push(format!("inode {inode}: attribute {} on a {:?}", printable(&entry.name), record.kind));
        }
    }

    /// Checks what needs all of an inode's records.
    fn finish_inode(&mut self, violations: &mut Violations) {
        let Some(mut current) = self.current.take() else { return };
        let (inode, record) = (current.inode, current.record);
        match current.xattrs.finish() {
            Ok(done) => Self::count_xattr(inode, &record, done, &mut self.xattrs, violations),
            Err(reason) => violations.push(format!("inode {inode}: {reason}")),
        }
        if self.limits.wide_inodes && record.pages != current.mapped_pages {
            violations.push(format!(
                "inode {inode}: counts {} data pages, its extents map {}",
                record.pages, current.mapped_pages
            ));
        }
        match record.kind {
            FileKind::File if record.is_inline() && current.inline_bytes.unwrap_or(0) != record.size => {
                violations.push(format!("inode {inode}: inline data length differs from size {}", record.size));
            }
            FileKind::Symlink if current.symlink_chunks == 0 => {
                violations.push(format!("symlink {inode} has no target"))
            }
            FileKind::Symlink if current.symlink_bytes != record.size => violations
                .push(format!("symlink {inode}: target of {} bytes, size {}", current.symlink_bytes, record.size)),
            _ => {}
        }
    }
}

/// A name as it may be printed: lossy UTF-8, escaped, at most 64 bytes of it.
fn printable(name: &[u8]) -> String {
    let shown = name.get(..64).unwrap_or(name);
    let mut text = format!("{:?}", String::from_utf8_lossy(shown));
    if shown.len() < name.len() {
        text.push_str("...");
    }
    text
}

/// One directory entry, checked against the inodes: name, parent, target and kind, counted
/// for link counts and the directory graph.
fn check_directory_entry(key: &[u8], value: &[u8], inodes: &mut [InodeFacts], violations: &mut Violations) {
    let Some((parent, name)) = parse_directory_key(key) else {
        violations.push(format!("directory key of {} bytes is malformed", key.len()));
        return;
    };
    if let Err(error) = validate_name(name) {
        violations.push(format!("directory {parent}: invalid name {} ({error})", printable(name)));
    }
    let entry = match DirectoryValue::decode(value) {
        Ok(entry) => entry,
        Err(error) => {
            violations.push(format!("directory {parent}: entry {}: {error}", printable(name)));
            return;
        }
    };
    match facts_of_mut(inodes, parent) {
        Some(parent_facts) if parent_facts.kind == FileKind::Directory => {
            if entry.kind == FileKind::Directory {
                parent_facts.subdirectories = parent_facts.subdirectories.saturating_add(1);
            }
        }
        _ => violations.push(format!("entry {} in non-directory or missing inode {parent}", printable(name))),
    }
    let Some(target) = facts_of_mut(inodes, entry.inode) else {
        violations.push(format!("directory {parent}: entry {} names missing inode {}", printable(name), entry.inode));
        return;
    };
    if target.kind != entry.kind {
        violations.push(format!(
            "directory {parent}: entry {}: kind {:?} but inode {} is {:?}",
            printable(name),
            entry.kind,
            entry.inode,
            target.kind
        ));
    }
    target.names = target.names.saturating_add(1);
    if entry.kind == FileKind::Directory && target.kind == FileKind::Directory {
        if target.entry_parent.is_some() {
            violations.push(format!("directory {} has more than one name", entry.inode));
        } else {
            target.entry_parent = Some(parent);
        }
    }
}

/// Every directory reaches the root by the entries naming it. Each directory is walked once: a
/// walk stops at a directory already settled, so the whole pass is linear, and a directory met
/// twice on one walk is a cycle.
fn check_directory_graph(inodes: &mut [InodeFacts], violations: &mut Violations) {
    let index_of = |inodes: &[InodeFacts], inode: u64| inodes.binary_search_by_key(&inode, |facts| facts.inode).ok();
    if let Some(root) = facts_of_mut(inodes, ROOT_INODE) {
        root.reach = Reach::Root;
    }
    let mut path: Vec<usize> = Vec::new();
    for start in 0..inodes.len() {
        let Some(start_facts) = inodes.get(start) else {
            break;
        };
        if start_facts.kind != FileKind::Directory || start_facts.orphan || start_facts.reach != Reach::Unknown {
            continue;
        }
        let start_inode = start_facts.inode;
        path.clear();
        let mut current = start;
        // Each step marks a new directory OnPath, so the walk ends within inodes.len() steps.
        // Every index here comes from `index_of` or the loop, so `get_mut` always finds it.
        let outcome = loop {
            let Some(facts) = inodes.get_mut(current) else {
                break Reach::Cut;
            };
            match facts.reach {
                Reach::Root => break Reach::Root,
                Reach::Cut => break Reach::Cut,
                Reach::OnPath => {
                    violations
                        .push(format!("directory {} is its own ancestor (a cycle of directory entries)", facts.inode));
                    break Reach::Cut;
                }
                Reach::Unknown => {}
            }
            facts.reach = Reach::OnPath;
            let entry_parent = facts.entry_parent;
            path.push(current);
            match entry_parent.and_then(|parent| index_of(inodes, parent)) {
                Some(parent) => current = parent,
                None => break Reach::Cut,
            }
        };
        if outcome == Reach::Cut {
            violations.push(format!("directory {start_inode} is not reachable from the root"));
        }
        for &directory in &path {
            if let Some(facts) = inodes.get_mut(directory) {
                facts.reach = outcome;
            }
        }
    }
}

/// The facts of `inode`, if the list (sorted by inode) has it.
fn facts_of(inodes: &[InodeFacts], inode: u64) -> Option<&InodeFacts> {
    inodes.binary_search_by_key(&inode, |facts| facts.inode).ok().and_then(|index| inodes.get(index))
}

fn facts_of_mut(inodes: &mut [InodeFacts], inode: u64) -> Option<&mut InodeFacts> {
    inodes.binary_search_by_key(&inode, |facts| facts.inode).ok().and_then(|index| inodes.get_mut(index))
}

/// An extent as fsck names it (without its checksums).
fn describe_extent(extent: &Extent) -> String {
    format!("extent of pages {}..{} at {}", extent.first_page, extent.end_page(), extent.address)
}
