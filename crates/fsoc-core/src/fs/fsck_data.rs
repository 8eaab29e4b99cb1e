//! fsck's data pass: reads every file data page the allocation tree names and checks that the
//! flash returns it (ECC not uncorrectable, not erased) and that its spare tag names the file
//! and page the extent says it holds. It catches pages lost to wear or retention beyond the
//! ECC, writes that landed elsewhere (a misdirected or lost program), and, on volumes of format
//! version 3 on, content the ECC passed that differs from what was written: each page is
//! checked against the CRC-32C its extent records (docs/FORMAT.md, "Tree records").
//!
//! Bounded memory whatever the volume's size: extents are taken from the tree
//! `EXTENTS_PER_STEP` at a time, and their pages read `PAGES_PER_READ` at a time.

use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;

use fsoc_flash::{Flash, ReadStatus};

use crate::fs::records::{allocation_key, page_checksum, parse_allocation_key, RecordKind};
use crate::fs::{FileSystem, FsError, TreeId};
use crate::segment::PageTag;

const EXTENTS_PER_STEP: usize = 256;
const PAGES_PER_READ: usize = 64;
/// Violations listed in full; more are only counted.
const VIOLATIONS_LISTED_MAX: usize = 100;

/// What the data pass found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DataCheckReport {
    /// Data pages read.
    pub pages: u64,
    /// Pages the ECC corrected (readable, but worth rewriting: a scrub's job).
    pub corrected_pages: u64,
    /// Pages rebuilt from the other chips (a volume with redundancy: a missing chip's pages,
    /// or pages the ECC could not correct); readable, so not violations.
    pub rebuilt_pages: u64,
    /// Pages the flash could not return (uncorrectable ECC) or returned erased.
    pub unreadable_pages: u64,
    /// Pages whose spare tag names another file or page (or none).
    pub misplaced_pages: u64,
    /// Pages read without an ECC error whose content fails the checksum its extent records
    /// (format version 3 on).
    pub checksum_failed_pages: u64,
    /// The first `VIOLATIONS_LISTED_MAX` problems, each naming the file, page and address.
    pub violations: Vec<String>,
}

impl DataCheckReport {
    pub fn is_clean(&self) -> bool {
        self.unreadable_pages == 0 && self.misplaced_pages == 0 && self.checksum_failed_pages == 0
    }

    fn violation(&mut self, text: String) {
        if self.violations.len() < VIOLATIONS_LISTED_MAX {
            self.violations.push(text);
        }
    }
}

/// One data page to read: (inode, file page, log address, recorded checksum).
type Wanted = (u64, u64, crate::address::LogAddress, Option<u32>);

impl<F: Flash> FileSystem<F> {
    /// The data pass (module comment). `progress(pages_read)` is called after each batch. An
    /// extent record that does not decode is left to `fsck`, which reports it.
    pub fn fsck_data(&self, progress: &mut dyn FnMut(u64)) -> Result<DataCheckReport, FsError> {
        let mut report = DataCheckReport::default();
        let mut resume = allocation_key(0, RecordKind::Inode, 0);
        let mut inclusive = true;
        loop {
            let mut extents: Vec<(u64, crate::fs::records::Extent)> = Vec::with_capacity(EXTENTS_PER_STEP);
            let mut last_key: Option<Vec<u8>> = None;
            self.tree_scan(TreeId::Allocation, &resume, inclusive, &mut |key, value| {
                if extents.len() >= EXTENTS_PER_STEP {
                    return false;
                }
                last_key = Some(key.to_vec());
                if let Some((inode, kind, first_page)) = parse_allocation_key(key) {
                    if kind == RecordKind::Extent as u8 {
                        if let Ok(extent) = self.checked_extent(inode, first_page, value) {
                            extents.push((inode, extent));
                        }
                    }
                }
                true
            })?;
            let Some(key) = last_key else { break };
            self.check_extent_pages(&extents, &mut report, progress)?;
            resume = key;
            inclusive = false;
        }
        Ok(report)
    }

    fn check_extent_pages(
        &self,
        extents: &[(u64, crate::fs::records::Extent)],
        report: &mut DataCheckReport,
        progress: &mut dyn FnMut(u64),
    ) -> Result<(), FsError> {
        let page_bytes = usize::try_from(self.record_limits().page_size_bytes).unwrap_or(usize::MAX);
        let mut buffers: Vec<Vec<u8>> = Vec::new();
        let mut wanted: Vec<Wanted> = Vec::with_capacity(PAGES_PER_READ);
        let pages = extents.iter().flat_map(|(inode, extent)| {
            (extent.first_page..extent.end_page())
                .map(move |page| (*inode, page, extent.address_of(page), extent.checksum_of(page)))
        });
        for page in pages {
            wanted.push(page);
            if wanted.len() == PAGES_PER_READ {
                self.check_pages(&wanted, &mut buffers, page_bytes, report)?;
                wanted.clear();
                progress(report.pages);
            }
        }
        if !wanted.is_empty() {
            self.check_pages(&wanted, &mut buffers, page_bytes, report)?;
            progress(report.pages);
        }
        Ok(())
    }

    fn check_pages(
        &self,
        wanted: &[Wanted],
        buffers: &mut Vec<Vec<u8>>,
        page_bytes: usize,
        report: &mut DataCheckReport,
    ) -> Result<(), FsError> {
        let addresses: Vec<_> = wanted.iter().map(|&(_, _, address, _)| address).collect();
        buffers.resize_with(addresses.len(), || alloc::vec![0; page_bytes]);
        let (mut statuses, mut tags) = (Vec::new(), Vec::new());
        let buffers = buffers.get_mut(..addresses.len()).unwrap_or_default();
        self.volume
            .log
            .read_many_with_tags(&addresses, buffers, &mut statuses, &mut tags)
            .map_err(|error| FsError::from(crate::txn::TxnError::from(error)))?;
        for (index, &(inode, page, address, checksum)) in wanted.iter().enumerate() {
            report.pages += 1;
            let place = format!("inode {inode} page {page} at {address}");
            match statuses.get(index) {
                Some(ReadStatus::Uncorrectable) => {
                    report.unreadable_pages += 1;
                    report.violation(format!("{place}: uncorrectable ECC"));
                    continue;
                }
                Some(ReadStatus::Erased) => {
                    report.unreadable_pages += 1;
                    report.violation(format!("{place}: the page is erased (its program never landed)"));
                    continue;
                }
                // The device answers a rebuilt page as corrected with no bit corrected.
                Some(ReadStatus::Corrected { bits: 0, .. }) => report.rebuilt_pages += 1,
                Some(ReadStatus::Corrected { .. }) => report.corrected_pages += 1,
                Some(ReadStatus::Clean) | None => {}
            }
            let expected = Some(PageTag::Data { inode, page_index: page });
            let tag = tags.get(index).copied().flatten();
            if tag.is_none() || tag != expected {
                report.misplaced_pages += 1;
                report.violation(format!("{place}: its spare tag names {}", describe(tag)));
                continue;
            }
            if let (Some(checksum), Some(content)) = (checksum, buffers.get(index)) {
                let found = page_checksum(content);
                if found != checksum {
                    report.checksum_failed_pages += 1;
                    report.violation(format!(
                        "{place}: content fails its checksum (recorded {checksum:08x}, read {found:08x})"
                    ));
                }
            }
        }
        Ok(())
    }
}

/// A spare tag as a person reads it.
fn describe(tag: Option<PageTag>) -> String {
    match tag {
        None => "nothing (no tag)".into(),
        Some(PageTag::Data { inode, page_index }) => format!("inode {inode} page {page_index}"),
        Some(PageTag::Node { tree_id, level }) => format!("a node of tree {tree_id} at level {level}"),
        Some(PageTag::SegmentTable { page_index }) => format!("segment table page {page_index}"),
        Some(PageTag::Metaroot) => "a metaroot".into(),
        Some(PageTag::Superblock) => "a superblock".into(),
        Some(PageTag::Parity) => "a parity page".into(),
        Some(PageTag::NodeCopy { tree_id, level }) => {
            format!("the second copy of a node of tree {tree_id} at level {level}")
        }
        Some(PageTag::SegmentTableCopy { page_index }) => format!("the second copy of segment table page {page_index}"),
    }
}
