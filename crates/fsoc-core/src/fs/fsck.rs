//! The checker: walks both trees and the segment table and reports every violated invariant
//! (checksums and key order via `Tree::check`, each referenced page live and counted once,
//! valid counts exact, link counts, the directory graph a tree, sizes against extents, no
//! orphans after a clean unmount).

use alloc::collections::{BTreeMap, BTreeSet};
use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;

use fsoc_media::Flash;

use crate::address::LogAddress;
use crate::btree::TreeError;
use crate::fs::records::{
    parse_allocation_key, parse_directory_key, DirectoryValue, Extent, FileKind, InodeRecord, RecordKind, ORPHAN_LIST_INODE,
    ROOT_INODE,
};
use crate::fs::{validate_name, FileSystem, FsError, TreeId};
use crate::segment::layout::FIRST_LOG_SEGMENT;

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FsckReport {
    /// The first `VIOLATIONS_LISTED_MAX` violations found.
    pub violations: Vec<String>,
    /// Every violation found, listed or not.
    pub violation_count: u64,
    pub files: u64,
    pub directories: u64,
    pub symlinks: u64,
    pub directory_nodes: u64,
    pub allocation_nodes: u64,
    pub data_pages: u64,
    pub orphans: u64,
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
    /// Both superblock copies of every chip must read back and agree with the one mount used
    /// (mount reads one copy per chip, so a lost copy would otherwise go unnoticed).
    fn check_superblock_copies(&mut self, violations: &mut Violations) {
        let layout = self.volume.layout();
        let mounted = self.volume.superblock;
        let mut buffer = Vec::new();
        for chip_index in 0..layout.chip_count {
            for copy in 0..2 {
                let address = layout.address(crate::segment::layout::SUPERBLOCK_SEGMENT, chip_index + copy * layout.chip_count);
                let problem = match self.volume.log.device.read(address, &mut buffer) {
                    Err(error) => Some(format!("unreadable ({error})")),
                    Ok(fsoc_media::ReadStatus::Uncorrectable) => Some(String::from("unreadable (uncorrectable)")),
                    Ok(fsoc_media::ReadStatus::Erased) => Some(String::from("erased")),
                    Ok(_) => match crate::txn::Superblock::decode(&buffer) {
                        Err(error) => Some(format!("undecodable ({error})")),
                        Ok(found) if found.volume_id != mounted.volume_id || found.chip_index != chip_index => {
                            Some(String::from("belongs to another volume or chip"))
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
    /// Memory and time are bounded by the volume, not by values read from it: page references
    /// are counted in one byte per log page, extents are checked against the volume before
    /// their pages are walked, and at most `VIOLATIONS_LISTED_MAX` violations are kept.
    pub fn fsck(&mut self, expect_no_orphans: bool) -> Result<FsckReport, FsError> {
        let mut report = FsckReport::default();
        let mut violations = Violations::default();
        if let Some(damage) = self.volume.mount_report.damage {
            violations.push(format!("metaroot: {damage}"));
        }
        self.check_superblock_copies(&mut violations);
        // An unreadable segment table is a violation; the trees are still checked.
        let table_loaded = match self.volume.ensure_table_loaded() {
            Ok(()) => true,
            Err(error) => {
                violations.push(format!("segment table: {error}"));
                false
            }
        };
        let layout = self.volume.layout();
        let log_page_count = layout.segment_count() as usize * layout.pages_per_segment() as usize;
        // References per log page, saturating: 0, 1, or "more than one".
        let mut pages: Vec<u8> = alloc::vec![0; log_page_count];
        let reference = |pages: &mut Vec<u8>, address: LogAddress| {
            if let Some(count) = pages.get_mut(address.0 as usize) {
                *count = count.saturating_add(1);
            }
        };
        let mut directory_entries: Vec<(u64, Vec<u8>, DirectoryValue)> = Vec::new();
        let mut inodes: BTreeMap<u64, InodeRecord> = BTreeMap::new();
        let mut extents: Vec<(u64, Extent)> = Vec::new();
        let mut inline_sizes: BTreeMap<u64, u64> = BTreeMap::new();
        let mut symlinks: BTreeSet<u64> = BTreeSet::new();
        let mut orphans: BTreeSet<u64> = BTreeSet::new();

        let mut node_addresses = Vec::new();
        let stats = self.with_tree(TreeId::Directory, |tree, store| {
            tree.check(store, &mut |address| node_addresses.push(address), &mut |key, value| {
                let parsed = parse_directory_key(key).map(|(parent, name)| (parent, name.to_vec()));
                match (parsed, DirectoryValue::decode(value)) {
                    (Some((parent, name)), Ok(entry)) => directory_entries.push((parent, name, entry)),
                    _ => return Err(TreeError::Corrupt { address: LogAddress::NULL, reason: "undecodable directory record" }),
                }
                Ok(())
            })
        });
        match stats {
            Ok(stats) => report.directory_nodes = stats.node_count,
            Err(error) => violations.push(format!("directory tree: {error}")),
        }
        let mut allocation_records: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
        let stats = self.with_tree(TreeId::Allocation, |tree, store| {
            tree.check(store, &mut |address| node_addresses.push(address), &mut |key, value| {
                allocation_records.push((key.to_vec(), value.to_vec()));
                Ok(())
            })
        });
        match stats {
            Ok(stats) => report.allocation_nodes = stats.node_count,
            Err(error) => violations.push(format!("allocation tree: {error}")),
        }
        for address in node_addresses {
            reference(&mut pages, address);
        }
        for (key, value) in &allocation_records {
            let Some((inode, kind, offset)) = parse_allocation_key(key) else {
                violations.push(format!("allocation key of {} bytes is malformed", key.len()));
                continue;
            };
            match kind {
                k if k == RecordKind::Inode as u8 => match InodeRecord::decode(value) {
                    Ok(record) => {
                        if let Err(error) = self.check_inode_record(inode, &record) {
                            violations.push(format!("{error}"));
                        }
                        inodes.insert(inode, record);
                    }
                    Err(error) => violations.push(format!("inode {inode}: {error}")),
                },
                k if k == RecordKind::Inline as u8 => {
                    inline_sizes.insert(inode, value.len() as u64);
                }
                k if k == RecordKind::Extent as u8 => match Extent::decode(offset, value) {
                    Ok(extent) => extents.push((inode, extent)),
                    Err(error) => violations.push(format!("inode {inode} extent at page {offset}: {error}")),
                },
                k if k == RecordKind::Symlink as u8 => {
                    symlinks.insert(inode);
                }
                k if k == RecordKind::Orphan as u8 && inode == ORPHAN_LIST_INODE => {
                    orphans.insert(offset);
                }
                other => violations.push(format!("inode {inode}: unknown record kind {other}")),
            }
        }
        let page_size = layout.page_size_bytes() as u64;
        let log_first = u64::from(FIRST_LOG_SEGMENT) * u64::from(layout.pages_per_segment());
        let mut previous_end: BTreeMap<u64, u64> = BTreeMap::new();
        for (inode, extent) in &extents {
            let Some(record) = inodes.get(inode) else {
                violations.push(format!("extent {extent:?} belongs to missing inode {inode}"));
                continue;
            };
            if record.kind != FileKind::File || record.is_inline() {
                violations.push(format!("inode {inode}: extent on a non-extent inode"));
            }
            if extent.end_page() > record.size.div_ceil(page_size) {
                violations.push(format!("inode {inode}: extent {extent:?} past size {}", record.size));
            }
            if previous_end.get(inode).is_some_and(|&end| end > extent.first_page) {
                violations.push(format!("inode {inode}: overlapping extents at page {}", extent.first_page));
            }
            previous_end.insert(*inode, extent.end_page());
            // The whole run must lie in the log before any of its pages is counted: a corrupt
            // page count must not drive a loop (S5: 2^31 pages took 20 GB and a minute).
            let address_end = u64::from(extent.address.0) + u64::from(extent.page_count);
            if u64::from(extent.address.0) < log_first || address_end > log_page_count as u64 {
                violations.push(format!("inode {inode}: extent {extent:?} lies outside the log"));
                continue;
            }
            for page in extent.first_page..extent.end_page() {
                reference(&mut pages, extent.address_of(page));
                report.data_pages += 1;
            }
        }
        if table_loaded {
            for pointer in self.volume.log.table().directory.clone() {
                reference(&mut pages, pointer.address);
            }
            // Every referenced page once, and the table's valid counts exact.
            let table = self.volume.log.table();
            let pages_per_segment = layout.pages_per_segment() as usize;
            for segment in 0..table.segment_count() {
                let first = segment as usize * pages_per_segment;
                let segment_pages = pages.get(first..first + pages_per_segment).unwrap_or(&[]);
                let mut expected = 0u32;
                for (offset, &references) in segment_pages.iter().enumerate() {
                    if references > 1 {
                        violations.push(format!("page {} referenced more than once", first + offset));
                    }
                    expected += u32::from(references > 0);
                }
                let entry = table.entry(segment);
                if entry.valid_pages != expected {
                    violations.push(format!("segment {segment}: table says {} valid pages, trees reference {expected}", entry.valid_pages));
                }
                if entry.retired && expected > 0 && entry.valid_pages == 0 {
                    violations.push(format!("segment {segment}: retired but referenced"));
                }
            }
        }
        // Names, link counts, tree shape.
        let mut references: BTreeMap<u64, u32> = BTreeMap::new();
        let mut subdirectories: BTreeMap<u64, u32> = BTreeMap::new();
        let mut parent_of: BTreeMap<u64, u64> = BTreeMap::new();
        for (parent, name, entry) in &directory_entries {
            if let Err(error) = validate_name(name) {
                violations.push(format!("directory {parent}: invalid name ({error})"));
            }
            match inodes.get(parent) {
                Some(record) if record.kind == FileKind::Directory => {}
                _ => violations.push(format!("entry {:?} in non-directory or missing inode {parent}", String::from_utf8_lossy(name))),
            }
            match inodes.get(&entry.inode) {
                None => violations.push(format!("entry {:?} names missing inode {}", String::from_utf8_lossy(name), entry.inode)),
                Some(record) if record.kind != entry.kind => {
                    violations.push(format!("entry {:?}: kind {:?} but inode is {:?}", String::from_utf8_lossy(name), entry.kind, record.kind))
                }
                _ => {}
            }
            *references.entry(entry.inode).or_default() += 1;
            if entry.kind == FileKind::Directory {
                *subdirectories.entry(*parent).or_default() += 1;
                if parent_of.insert(entry.inode, *parent).is_some() {
                    violations.push(format!("directory {} has more than one name", entry.inode));
                }
            }
        }
        for (&inode, record) in &inodes {
            let names = references.get(&inode).copied().unwrap_or(0);
            match record.kind {
                FileKind::Directory if orphans.contains(&inode) => {
                    // Removed while open (nlink 0, no name): gone at the last close or mount.
                    report.directories += 1;
                    if record.nlink != 0 || names != 0 {
                        violations.push(format!("orphan directory {inode}: nlink {} with {names} names", record.nlink));
                    }
                }
                FileKind::Directory => {
                    report.directories += 1;
                    let expected = 2 + subdirectories.get(&inode).copied().unwrap_or(0);
                    if record.nlink != expected {
                        violations.push(format!("directory {inode}: nlink {} but {expected} expected", record.nlink));
                    }
                    if inode == ROOT_INODE {
                        if names != 0 {
                            violations.push(String::from("the root directory has a name"));
                        }
                    } else if parent_of.get(&inode) != Some(&record.parent) {
                        violations.push(format!("directory {inode}: parent field {} disagrees with its entry", record.parent));
                    }
                }
                FileKind::File | FileKind::Symlink => {
                    if record.kind == FileKind::File {
                        report.files += 1;
                    } else {
                        report.symlinks += 1;
                        if !symlinks.contains(&inode) {
                            violations.push(format!("symlink {inode} has no target"));
                        }
                    }
                    if record.nlink != names {
                        violations.push(format!("inode {inode}: nlink {} but {names} names", record.nlink));
                    }
                    if names == 0 && !orphans.contains(&inode) {
                        violations.push(format!("inode {inode}: no name and not an orphan (leaked)"));
                    }
                    if record.is_inline() && inline_sizes.get(&inode).copied().unwrap_or(0) != record.size {
                        violations.push(format!("inode {inode}: inline data length differs from size {}", record.size));
                    }
                }
            }
        }
        if !inodes.contains_key(&ROOT_INODE) {
            violations.push(String::from("root directory missing"));
        }
        // Every directory reaches the root by parent links. Each directory is walked once: a walk
        // stops at a directory already settled, so the whole pass is linear, and a directory met
        // twice on one walk is a cycle.
        let mut reaches_root: BTreeMap<u64, bool> = BTreeMap::new();
        reaches_root.insert(ROOT_INODE, true);
        for (&inode, record) in &inodes {
            if record.kind != FileKind::Directory || orphans.contains(&inode) || reaches_root.contains_key(&inode) {
                continue;
            }
            let mut path: Vec<u64> = Vec::new();
            let mut on_path: BTreeSet<u64> = BTreeSet::new();
            let mut current = inode;
            let outcome = loop {
                if let Some(&settled) = reaches_root.get(&current) {
                    break settled;
                }
                if !on_path.insert(current) {
                    violations.push(format!("directory {current} is its own ancestor (a cycle of directory entries)"));
                    break false;
                }
                path.push(current);
                match parent_of.get(&current) {
                    Some(&parent) => current = parent,
                    None => break false,
                }
            };
            if !outcome {
                violations.push(format!("directory {inode} is not reachable from the root"));
            }
            for directory in path {
                reaches_root.insert(directory, outcome);
            }
        }
        for &orphan in &orphans {
            if !inodes.contains_key(&orphan) {
                violations.push(format!("orphan list names missing inode {orphan}"));
            }
        }
        report.orphans = orphans.len() as u64;
        if expect_no_orphans && !orphans.is_empty() {
            violations.push(format!("{} orphans remain after a clean mount", orphans.len()));
        }
        report.violation_count = violations.count;
        report.violations = violations.listed;
        Ok(report)
    }
}
