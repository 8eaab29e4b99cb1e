//! The volume's view of the flash array: log-address I/O, the virtual clock, spare-area tags.
//!
//! Programs and erases are issued at the current virtual time and not waited for, so pages
//! appended to consecutive chips overlap; reads wait for their data. `barrier` waits for
//! everything issued, which the commit protocol uses before and after writing a metaroot.

use alloc::collections::BTreeSet;
use alloc::vec;
use alloc::vec::Vec;

use fsoc_flash::sync::Mutex;
use fsoc_flash::{BlockAddress, ChipIndex, Flash, NandError, Nanos, PageAddress, ReadStatus};
use portable_atomic::{AtomicU32, AtomicU64, Ordering};

use crate::address::LogAddress;
use crate::segment::layout::{Layout, Redundancy};
use crate::segment::parity::{self, OpenRow, TAG_PARITY};

/// What a log page holds, recorded in its spare area so the cleaner can find the owner
/// (docs/FORMAT.md, "Spare tag").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PageTag {
    /// A B+tree node of tree `tree_id` at `level` (0 = leaf).
    Node { tree_id: u8, level: u8 },
    /// File data: page `page_index` of inode `inode` (below 2^40: bits 0–31 in bytes 12–15,
    /// bits 32–39 in byte 3, which is 0 on volumes older than format version 10).
    Data { inode: u64, page_index: u64 },
    /// Page `page_index` of the segment table.
    SegmentTable { page_index: u32 },
    /// A metaroot record (only in metaroot areas).
    Metaroot,
    /// A superblock copy.
    Superblock,
    /// The parity page of a row (volumes with parity; written by the device itself).
    Parity,
    /// The second copy of a tree node (volumes with mirror-meta): one log address after the
    /// first, on the next chip (format version 8).
    NodeCopy { tree_id: u8, level: u8 },
    /// The second copy of a segment-table or index page (mirror-meta), as `NodeCopy`.
    SegmentTableCopy { page_index: u32 },
}

pub const SPARE_TAG_BYTES: usize = 16;

const TAG_NODE: u8 = 1;
const TAG_DATA: u8 = 2;
const TAG_SEGMENT_TABLE: u8 = 3;
const TAG_METAROOT: u8 = 4;
const TAG_SUPERBLOCK: u8 = 5;
/// Set in a second copy's kind byte (mirror-meta): `0x81` a node's copy, `0x83` a table page's.
const TAG_COPY: u8 = 0x80;

impl PageTag {
    pub fn encode(self, spare: &mut [u8]) {
        assert!(spare.len() >= SPARE_TAG_BYTES, "spare area smaller than a tag");
        spare.fill(0xFF);
        let mut tag = [0u8; SPARE_TAG_BYTES];
        match self {
            PageTag::Node { tree_id, level } => {
                tag[0] = TAG_NODE;
                tag[1] = tree_id;
                tag[2] = level;
            }
            PageTag::Data { inode, page_index } => {
                tag[0] = TAG_DATA;
                assert!(page_index < 1 << 40, "data page index {page_index} past a tag's 40 bits");
                let [low @ .., high, _, _, _] = page_index.to_le_bytes();
                tag[3] = high;
                tag[4..12].copy_from_slice(&inode.to_le_bytes());
                tag[12..16].copy_from_slice(&low[..4]);
            }
            PageTag::SegmentTable { page_index } => {
                tag[0] = TAG_SEGMENT_TABLE;
                tag[12..16].copy_from_slice(&page_index.to_le_bytes());
            }
            PageTag::NodeCopy { tree_id, level } => {
                PageTag::Node { tree_id, level }.encode(spare);
                Self::mark_copy(spare);
                return;
            }
            PageTag::SegmentTableCopy { page_index } => {
                PageTag::SegmentTable { page_index }.encode(spare);
                Self::mark_copy(spare);
                return;
            }
            PageTag::Metaroot => tag[0] = TAG_METAROOT,
            PageTag::Superblock => tag[0] = TAG_SUPERBLOCK,
            PageTag::Parity => tag[0] = TAG_PARITY,
        }
        // Long enough: asserted above.
        if let Some(head) = spare.first_chunk_mut::<SPARE_TAG_BYTES>() {
            *head = tag;
        }
    }

    /// Decodes a tag; `None` for an erased or unrecognised spare area (untrusted bytes).
    pub fn decode(spare: &[u8]) -> Option<PageTag> {
        let tag: &[u8; SPARE_TAG_BYTES] = spare.first_chunk()?;
        let u32_at =
            |offset: usize| -> Option<u32> { Some(u32::from_le_bytes(*tag.get(offset..offset + 4)?.first_chunk()?)) };
        match tag[0] {
            TAG_NODE => Some(PageTag::Node { tree_id: tag[1], level: tag[2] }),
            TAG_DATA => {
                let inode = u64::from_le_bytes(*tag.get(4..12)?.first_chunk()?);
                let page_index = u64::from(u32_at(12)?) | u64::from(tag[3]) << 32;
                Some(PageTag::Data { inode, page_index })
            }
            TAG_SEGMENT_TABLE => Some(PageTag::SegmentTable { page_index: u32_at(12)? }),
            TAG_METAROOT => Some(PageTag::Metaroot),
            TAG_SUPERBLOCK => Some(PageTag::Superblock),
            TAG_PARITY => Some(PageTag::Parity),
            kind if kind == TAG_NODE | TAG_COPY => Some(PageTag::NodeCopy { tree_id: tag[1], level: tag[2] }),
            kind if kind == TAG_SEGMENT_TABLE | TAG_COPY => Some(PageTag::SegmentTableCopy { page_index: u32_at(12)? }),
            _ => None,
        }
    }

    fn mark_copy(spare: &mut [u8]) {
        if let Some(kind) = spare.first_mut() {
            *kind |= TAG_COPY;
        }
    }

    /// The tag of the second copy a volume with mirror-meta writes of a page with this tag
    /// (tree nodes and segment-table pages); `None` for pages written once.
    pub fn mirror_copy(self) -> Option<PageTag> {
        match self {
            PageTag::Node { tree_id, level } => Some(PageTag::NodeCopy { tree_id, level }),
            PageTag::SegmentTable { page_index } => Some(PageTag::SegmentTableCopy { page_index }),
            _ => None,
        }
    }

    /// For a second copy, the tag of the first; `None` for any other tag.
    pub fn first_copy(self) -> Option<PageTag> {
        match self {
            PageTag::NodeCopy { tree_id, level } => Some(PageTag::Node { tree_id, level }),
            PageTag::SegmentTableCopy { page_index } => Some(PageTag::SegmentTable { page_index }),
            _ => None,
        }
    }
}

/// Segments a refresh will rewrite, at most this many at once; past it, further weak segments
/// are only counted (`WeakSegments::overflowed`) and a scrub's next pass finds them again.
pub const WEAK_SEGMENTS_MAX: usize = 256;

/// Segments whose reads came close to the ECC's limit: their blocks are losing charge
/// (retention) or have been read too often (read disturb), and the data in them should be
/// rewritten elsewhere before a read fails (`fs/scrub.rs` refreshes them).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WeakSegments {
    /// Segments to refresh (bounded by `WEAK_SEGMENTS_MAX`).
    pub segments: BTreeSet<u32>,
    /// A weak segment was met while the set was full.
    pub overflowed: bool,
    /// Reads whose worst ECC sector reached the refresh threshold, since the device opened.
    pub weak_reads: u64,
}

/// The refresh threshold for an ECC of `correctable_bits` per 512 bytes: half its strength,
/// rounded up (a 4-bit code: 2 bits in one sector; a 1-bit code: any correction).
///
/// Half, not three quarters: bit errors are drawn afresh at each read (the simulator's model,
/// and the transient part of real flash's), so a sector can pass the code's strength at a read
/// before any read of its segment reached a threshold close to it. At three quarters, the
/// monthly-scrub experiment (`tests/scrub.rs`) lost a page in 22 of 24 seeds; at half, none.
pub fn refresh_threshold_bits(correctable_bits: u32) -> u32 {
    correctable_bits.div_ceil(2).max(1)
}

/// Log-address I/O on the array with a virtual clock.
///
/// Reads take `&self` and may run on several threads at once: each is issued at the clock's
/// current value and moves the clock forward to its completion (a maximum, so concurrent
/// reads never move it back). Programs, erases and `barrier` take `&mut self`.
pub struct Device<F: Flash> {
    flash: F,
    layout: Layout,
    now_ns: AtomicU64,
    /// Page reads issued through this device, so a caller (mount, a benchmark) counts its own
    /// reads without asking the flash for simulator statistics.
    pages_read: AtomicU64,
    /// Programs and erases issued through this device (including ones that failed), so a
    /// simulation can tell at which flash operation a commit became durable.
    operations_issued: u64,
    spare_buffer: Vec<u8>,
    /// A read whose worst ECC sector needed at least this many corrected bits marks its
    /// segment weak; 0 turns it off (a flash that does not know its ECC's strength).
    refresh_bits: u32,
    /// Reads that needed any correction, since the device opened.
    corrected_reads: AtomicU64,
    weak: Mutex<WeakSegments>,
    /// Parity rows being programmed (volumes with parity): a few, one per open segment, until
    /// the next seal.
    open_rows: Vec<OpenRow>,
    /// A chip known to be gone (`NO_MISSING_CHIP` if none): its pages are rebuilt from the
    /// others instead of read, and nothing is programmed on it.
    missing_chip: AtomicU32,
    /// Reads answered by rebuilding the page from its row or its twin.
    rebuilt_reads: AtomicU64,
}

const NO_MISSING_CHIP: u32 = u32::MAX;

/// The status of a page rebuilt from its row: corrected, with no bit corrected (a real ECC
/// correction corrects at least one), so checks can tell the two apart.
pub const REBUILT: ReadStatus = ReadStatus::Corrected { bits: 0, max_per_sector: 0 };

/// A page rebuilt from its row: data, 16-byte spare tag, and when the reads completed.
pub type RebuiltPage = (Vec<u8>, [u8; SPARE_TAG_BYTES], Nanos);

/// Rows whose parity page could not be programmed (a grown bad block): their segment must
/// take no more pages, and its data pages stay without parity until they are moved.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SealOutcome {
    pub failed: Vec<(u32, BlockAddress)>,
}

impl<F: Flash> Device<F> {
    pub fn new(flash: F) -> Self {
        let layout = Layout::new(flash.geometry(), flash.chip_count());
        let spare_buffer = vec![0u8; layout.spare_size_bytes()];
        let refresh_bits = flash.ecc_correctable_bits_per_512().map_or(0, refresh_threshold_bits);
        Device {
            flash,
            layout,
            now_ns: AtomicU64::new(0),
            pages_read: AtomicU64::new(0),
            operations_issued: 0,
            spare_buffer,
            refresh_bits,
            corrected_reads: AtomicU64::new(0),
            weak: Mutex::new(WeakSegments::default()),
            open_rows: Vec::new(),
            missing_chip: AtomicU32::new(NO_MISSING_CHIP),
            rebuilt_reads: AtomicU64::new(0),
        }
    }

    /// Sets the volume's redundancy (read from its superblock; the device starts without).
    pub fn set_redundancy(&mut self, redundancy: Redundancy) {
        self.layout = self.layout.with_redundancy(redundancy);
    }

    /// Sets the segments of the metaroot areas (the superblock's).
    pub fn set_metaroot_areas(&mut self, areas: [u32; 3]) {
        self.layout = self.layout.with_metaroot_areas(areas);
    }

    /// Reads a physical page (data and spare) at the clock's time and waits for it: for the
    /// superblock's generations, which lie outside the log's addresses.
    pub fn read_physical(&self, page: PageAddress, data: &mut [u8], spare: &mut [u8]) -> Result<ReadStatus, NandError> {
        if self.missing_chip() == Some(page.chip.0) {
            return Err(NandError::ChipFailed { chip: page.chip });
        }
        self.pages_read.fetch_add(1, Ordering::Relaxed);
        let done = self.flash.read_page(self.now_ns(), page, data, spare)?;
        self.advance_to(done.done_ns);
        Ok(done.value)
    }

    /// Programs a physical page with `tag` (see `read_physical`); does not wait.
    pub fn program_physical_page(&mut self, page: PageAddress, data: &[u8], tag: PageTag) -> Result<(), NandError> {
        tag.encode(&mut self.spare_buffer);
        self.program_physical(page, data)
    }

    /// The chip known to be gone, if any.
    pub fn missing_chip(&self) -> Option<u32> {
        let chip = self.missing_chip.load(Ordering::Relaxed);
        (chip != NO_MISSING_CHIP).then_some(chip)
    }

    /// Treats `chip` as gone: its pages are rebuilt from the others (a volume with redundancy
    /// mounted without it, or whose chip failed in use).
    pub fn set_missing_chip(&self, chip: Option<u32>) {
        self.missing_chip.store(chip.unwrap_or(NO_MISSING_CHIP), Ordering::Relaxed);
    }

    /// Reads answered by rebuilding a page from the rest of its row or from its twin.
    pub fn rebuilt_reads(&self) -> u64 {
        self.rebuilt_reads.load(Ordering::Relaxed)
    }

    /// The corrected bits in one ECC sector at which a read marks its segment weak (0: off).
    pub fn refresh_bits(&self) -> u32 {
        self.refresh_bits
    }

    /// Sets the refresh threshold (0 turns early refresh off).
    pub fn set_refresh_bits(&mut self, bits: u32) {
        self.refresh_bits = bits;
    }

    /// Reads that needed any ECC correction since the device opened.
    pub fn corrected_reads(&self) -> u64 {
        self.corrected_reads.load(Ordering::Relaxed)
    }

    /// The weak segments noted so far (a copy: readers may add to it meanwhile).
    pub fn weak_segments(&self) -> WeakSegments {
        self.weak.lock().clone()
    }

    /// Whether any segment waits to be refreshed (cheap: one lock, no copy).
    pub fn has_weak_segments(&self) -> bool {
        !self.weak.lock().segments.is_empty()
    }

    /// Forgets `segment` (refreshed, or found not worth refreshing).
    pub fn forget_weak_segment(&mut self, segment: u32) {
        self.weak.get_mut().segments.remove(&segment);
    }

    /// Clears the overflow mark (a scrub pass that will find what the full set dropped).
    pub fn clear_weak_overflow(&mut self) -> bool {
        core::mem::take(&mut self.weak.get_mut().overflowed)
    }

    /// Notes a read's ECC outcome: a correction near the code's limit marks the segment weak.
    fn note_status(&self, address: LogAddress, status: ReadStatus) {
        let ReadStatus::Corrected { max_per_sector, .. } = status else {
            return;
        };
        self.corrected_reads.fetch_add(1, Ordering::Relaxed);
        if self.refresh_bits == 0 || max_per_sector < self.refresh_bits || !self.layout.contains(address) {
            return;
        }
        self.mark_weak(self.layout.segment_of(address));
    }

    /// The flash under the device: for the layers above, only what `Flash` offers that the
    /// device does not wrap (bad-block marks, paired-page distance, flush).
    pub fn flash(&self) -> &F {
        &self.flash
    }
    pub fn flash_mut(&mut self) -> &mut F {
        &mut self.flash
    }
    pub fn into_flash(self) -> F {
        self.flash
    }
    pub fn layout(&self) -> Layout {
        self.layout
    }
    /// Programs and erases issued through this device (including ones that failed).
    pub fn operations_issued(&self) -> u64 {
        self.operations_issued
    }

    /// The volume's virtual clock: when everything waited for so far has completed.
    pub fn now_ns(&self) -> Nanos {
        self.now_ns.load(Ordering::Acquire)
    }

    /// Page reads issued through this device since it was opened.
    pub fn pages_read(&self) -> u64 {
        self.pages_read.load(Ordering::Relaxed)
    }

    /// Moves the clock to `done_ns` if later: an access outside the flash (the NVRAM) that the
    /// volume waited for.
    pub fn wait_until(&self, done_ns: Nanos) {
        self.advance_to(done_ns);
    }

    fn advance_to(&self, done_ns: Nanos) {
        self.now_ns.fetch_max(done_ns, Ordering::AcqRel);
    }

    fn read_page(
        &self,
        issue_ns: Nanos,
        address: LogAddress,
        data: &mut [u8],
        spare: &mut [u8],
    ) -> Result<(ReadStatus, Nanos), NandError> {
        assert_eq!(data.len(), self.layout.page_size_bytes(), "read into a buffer that is not one page");
        let page = self.layout.physical(address);
        let first = if self.missing_chip() == Some(page.chip.0) {
            Err(NandError::ChipFailed { chip: page.chip })
        } else {
            self.pages_read.fetch_add(1, Ordering::Relaxed);
            self.flash.read_page(issue_ns, page, data, spare)
        };
        let needs_repair = match &first {
            Ok(done) => done.value == ReadStatus::Uncorrectable,
            Err(NandError::ChipFailed { chip }) if self.layout.redundancy != Redundancy::None => {
                self.set_missing_chip(Some(chip.0));
                true
            }
            Err(_) => false,
        };
        if needs_repair {
            if let Some((status, done_ns)) = self.repair(issue_ns, address, page, data, spare)? {
                if first.is_ok() {
                    // The page's own copy failed ECC: its segment should be rewritten.
                    self.mark_weak(self.layout.segment_of(address));
                }
                return Ok((status, done_ns));
            }
        }
        let done = first?;
        self.note_status(address, done.value);
        Ok((done.value, done.done_ns))
    }

    /// Rebuilds the page at `address` from the rest of its row (volumes with parity), or reads
    /// its second copy (mirror-meta), into `data`: for a page the ECC passed whose bytes fail
    /// the checksum that names them. Marks its segment weak (to be rewritten). `false` if the
    /// volume has no redundancy for it or it cannot be had; the caller checks the result
    /// against its checksum again.
    pub fn read_rebuilt(&self, address: LogAddress, data: &mut [u8]) -> Result<bool, NandError> {
        if !self.layout.contains(address) {
            return Ok(false);
        }
        if let Some(copy) = self.layout.mirror_copy(address) {
            let mut spare = vec![0u8; self.layout.spare_size_bytes()];
            let Some((_, done_ns)) = self.read_mirror_copy(self.now_ns(), copy, data, &mut spare)? else {
                return Ok(false);
            };
            self.advance_to(done_ns);
            self.mark_weak(self.layout.segment_of(address));
            return Ok(true);
        }
        let page = self.layout.physical(address);
        if !self.layout.is_parity_segment(page.block.0) {
            return Ok(false);
        }
        let Some((rebuilt, tag, done_ns)) = self.rebuild_from_row(self.now_ns(), page)? else {
            return Ok(false);
        };
        self.advance_to(done_ns);
        if parity::is_empty_slot(&rebuilt, &tag) || data.len() != rebuilt.len() {
            return Ok(false);
        }
        data.copy_from_slice(&rebuilt);
        self.rebuilt_reads.fetch_add(1, Ordering::Relaxed);
        self.mark_weak(self.layout.segment_of(address));
        Ok(true)
    }

    /// Reads the second copy of a metaroot page (volumes with twins): for a first copy that
    /// reads but does not decode. `None` without a twin or when its chip is gone.
    pub fn read_twin(&self, address: LogAddress, data: &mut Vec<u8>) -> Result<Option<ReadStatus>, NandError> {
        let Some(twin) = self.layout.twin(address) else {
            return Ok(None);
        };
        if self.missing_chip() == Some(twin.chip.0) {
            return Ok(None);
        }
        let mut spare = vec![0u8; self.layout.spare_size_bytes()];
        data.resize(self.layout.page_size_bytes(), 0);
        self.pages_read.fetch_add(1, Ordering::Relaxed);
        match self.flash.read_page(self.now_ns(), twin, data, &mut spare) {
            Ok(done) => {
                self.advance_to(done.done_ns);
                Ok(Some(done.value))
            }
            Err(NandError::ChipFailed { .. }) => Ok(None),
            Err(error) => Err(error),
        }
    }

    /// Marks a segment weak whatever the ECC threshold (a page of it had to be rebuilt, or a
    /// block of it went bad under a program: its pages should move).
    pub(crate) fn mark_weak(&self, segment: u32) {
        let mut weak = self.weak.lock();
        weak.weak_reads += 1;
        if weak.segments.len() < WEAK_SEGMENTS_MAX || weak.segments.contains(&segment) {
            weak.segments.insert(segment);
        } else {
            weak.overflowed = true;
        }
    }

    /// Answers a read whose page is lost (unreadable, or on a missing chip) from its twin or
    /// from the rest of its row; `None` if the volume has no such redundancy for it, or the
    /// redundancy is lost too.
    fn repair(
        &self,
        issue_ns: Nanos,
        address: LogAddress,
        page: PageAddress,
        data: &mut [u8],
        spare: &mut [u8],
    ) -> Result<Option<(ReadStatus, Nanos)>, NandError> {
        if let Some(twin) = self.layout.twin(address) {
            if self.missing_chip() == Some(twin.chip.0) {
                return Ok(None);
            }
            self.pages_read.fetch_add(1, Ordering::Relaxed);
            let done = match self.flash.read_page(issue_ns, twin, data, spare) {
                Ok(done) => done,
                Err(NandError::ChipFailed { .. }) => return Ok(None),
                Err(error) => return Err(error),
            };
            if matches!(done.value, ReadStatus::Clean | ReadStatus::Corrected { .. }) {
                self.rebuilt_reads.fetch_add(1, Ordering::Relaxed);
                return Ok(Some((done.value, done.done_ns)));
            }
            // A first copy that is there but unreadable (a torn program whose twin never
            // started) answers for itself; one on a gone chip answers with its twin.
            let primary_gone = self.missing_chip() == Some(page.chip.0);
            return Ok(primary_gone.then_some((done.value, done.done_ns)));
        }
        if let Some(copy) = self.layout.mirror_copy(address) {
            return self.read_mirror_copy(issue_ns, copy, data, spare);
        }
        if !self.layout.is_parity_segment(page.block.0) {
            return Ok(None);
        }
        let Some((rebuilt, tag, done_ns)) = self.rebuild_from_row(issue_ns, page)? else {
            return Ok(None);
        };
        self.rebuilt_reads.fetch_add(1, Ordering::Relaxed);
        spare.fill(0xFF);
        if parity::is_empty_slot(&rebuilt, &tag) {
            data.fill(0xFF);
            return Ok(Some((ReadStatus::Erased, done_ns)));
        }
        for (to, from) in data.iter_mut().zip(&rebuilt) {
            *to = *from;
        }
        for (to, from) in spare.iter_mut().zip(tag) {
            *to = from;
        }
        Ok(Some((REBUILT, done_ns)))
    }

    /// Reads the second copy of a mirrored page (mirror-meta) at `copy` for a first copy that is
    /// lost: answered only if the page there is readable and tagged as a second copy, with the
    /// first copy's tag put back in `spare` (the cleaner finds the owner by it). Anything else
    /// there (file data, an erased page: the first copy was not a mirrored page) is `None`.
    fn read_mirror_copy(
        &self,
        issue_ns: Nanos,
        copy: LogAddress,
        data: &mut [u8],
        spare: &mut [u8],
    ) -> Result<Option<(ReadStatus, Nanos)>, NandError> {
        let page = self.layout.physical(copy);
        if self.missing_chip() == Some(page.chip.0) {
            return Ok(None);
        }
        let mut copy_data = vec![0u8; data.len()];
        self.pages_read.fetch_add(1, Ordering::Relaxed);
        let done = match self.flash.read_page(issue_ns, page, &mut copy_data, spare) {
            Ok(done) => done,
            Err(NandError::ChipFailed { .. }) => return Ok(None),
            Err(error) => return Err(error),
        };
        let first = PageTag::decode(spare).and_then(PageTag::first_copy);
        let (ReadStatus::Clean | ReadStatus::Corrected { .. }, Some(first)) = (done.value, first) else {
            return Ok(None);
        };
        data.copy_from_slice(&copy_data);
        first.encode(spare);
        self.rebuilt_reads.fetch_add(1, Ordering::Relaxed);
        Ok(Some((done.value, done.done_ns)))
    }

    /// Rebuilds physical page `page` of a parity segment from the other pages of its row: its
    /// data and 16-byte tag, and when the reads completed. `None` if another page of the row
    /// cannot be read, or the row has no parity (it was never sealed, so nothing in it was
    /// committed).
    pub fn rebuild_from_row(&self, issue_ns: Nanos, page: PageAddress) -> Result<Option<RebuiltPage>, NandError> {
        let page_bytes = self.layout.page_size_bytes();
        let spare_bytes = self.layout.spare_size_bytes();
        let parity_chip = self.layout.parity_chip(page.block.0, page.page_index);
        let mut reads: Vec<(bool, Vec<u8>, Vec<u8>)> = Vec::new();
        let mut done_ns = issue_ns;
        for chip in (0..self.layout.chip_count).filter(|&chip| chip != page.chip.0) {
            if self.missing_chip() == Some(chip) {
                return Ok(None);
            }
            let (mut data, mut spare) = (vec![0u8; page_bytes], vec![0u8; spare_bytes]);
            self.pages_read.fetch_add(1, Ordering::Relaxed);
            let other = PageAddress { chip: ChipIndex(chip), ..page };
            let done = match self.flash.read_page(issue_ns, other, &mut data, &mut spare) {
                Ok(done) => done,
                Err(NandError::ChipFailed { .. }) => return Ok(None),
                Err(error) => return Err(error),
            };
            done_ns = done_ns.max(done.done_ns);
            match done.value {
                ReadStatus::Erased => continue,
                ReadStatus::Uncorrectable => return Ok(None),
                ReadStatus::Clean | ReadStatus::Corrected { .. } => reads.push((chip == parity_chip, data, spare)),
            }
        }
        let others: Vec<(bool, &[u8], &[u8])> =
            reads.iter().map(|(is_parity, data, spare)| (*is_parity, data.as_slice(), spare.as_slice())).collect();
        Ok(parity::rebuild(page_bytes, &others).map(|(data, tag)| (data, tag, done_ns)))
    }

    /// Reads a page's data (resizing `data`) and returns the ECC status; waits for the read.
    pub fn read(&self, address: LogAddress, data: &mut Vec<u8>) -> Result<ReadStatus, NandError> {
        Ok(self.read_with_tag(address, data)?.0)
    }

    /// Reads a page's data and its spare tag.
    pub fn read_with_tag(
        &self,
        address: LogAddress,
        data: &mut Vec<u8>,
    ) -> Result<(ReadStatus, Option<PageTag>), NandError> {
        let mut spare = vec![0u8; self.layout.spare_size_bytes()];
        data.resize(self.layout.page_size_bytes(), 0);
        let (status, done_ns) = self.read_page(self.now_ns(), address, data, &mut spare)?;
        self.advance_to(done_ns);
        Ok((status, PageTag::decode(&spare)))
    }

    /// Issues reads of several pages at the same virtual time (they overlap across chips) and
    /// waits for all of them.
    pub fn read_many(
        &self,
        addresses: &[LogAddress],
        buffers: &mut [Vec<u8>],
        statuses: &mut Vec<ReadStatus>,
    ) -> Result<(), NandError> {
        self.resize_buffers(buffers);
        self.read_many_inner(addresses, buffers, statuses, None)
    }

    /// `read_many` into page-sized slices the caller lends (e.g. the pages of its own read
    /// buffer), so the data is not copied again.
    pub fn read_many_into(
        &self,
        addresses: &[LogAddress],
        targets: &mut [&mut [u8]],
        statuses: &mut Vec<ReadStatus>,
    ) -> Result<(), NandError> {
        self.read_many_inner(addresses, targets, statuses, None)
    }

    fn resize_buffers(&self, buffers: &mut [Vec<u8>]) {
        for buffer in buffers.iter_mut() {
            buffer.resize(self.layout.page_size_bytes(), 0);
        }
    }

    /// `read_many` that also decodes each page's spare tag (the cleaner reads a victim so).
    pub fn read_many_with_tags(
        &self,
        addresses: &[LogAddress],
        buffers: &mut [Vec<u8>],
        statuses: &mut Vec<ReadStatus>,
        tags: &mut Vec<Option<PageTag>>,
    ) -> Result<(), NandError> {
        tags.clear();
        self.resize_buffers(buffers);
        self.read_many_inner(addresses, buffers, statuses, Some(tags))
    }

    fn read_many_inner<B: AsMut<[u8]>>(
        &self,
        addresses: &[LogAddress],
        buffers: &mut [B],
        statuses: &mut Vec<ReadStatus>,
        tags: Option<&mut Vec<Option<PageTag>>>,
    ) -> Result<(), NandError> {
        assert_eq!(addresses.len(), buffers.len(), "one buffer per address");
        statuses.clear();
        let page_bytes = self.layout.page_size_bytes();
        let spare_bytes = self.layout.spare_size_bytes();
        let pages: Vec<_> = addresses.iter().map(|address| self.layout.physical(*address)).collect();
        self.flash.prefetch(&pages);
        let mut targets: Vec<&mut [u8]> = buffers.iter_mut().map(AsMut::as_mut).collect();
        for target in &targets {
            assert_eq!(target.len(), page_bytes, "read into a buffer that is not one page");
        }
        let mut spares = vec![0u8; pages.len() * spare_bytes];
        let mut completions = Vec::with_capacity(pages.len());
        let issue_ns = self.now_ns();
        let redundant = self.layout.redundancy != Redundancy::None;
        let batch = if redundant && self.missing_chip().is_some() {
            Err(NandError::ChipFailed { chip: ChipIndex(self.missing_chip().unwrap_or(0)) })
        } else {
            self.pages_read.fetch_add(pages.len() as u64, Ordering::Relaxed);
            self.flash.read_pages(issue_ns, &pages, &mut targets, &mut spares, &mut completions)
        };
        let mut done_ns = issue_ns;
        match batch {
            Ok(()) => {
                done_ns = completions.iter().map(|completed| completed.done_ns).fold(issue_ns, Nanos::max);
                statuses.extend(completions.iter().map(|completed| completed.value));
                for (&address, &status) in addresses.iter().zip(statuses.iter()) {
                    self.note_status(address, status);
                }
            }
            Err(NandError::ChipFailed { .. }) if redundant => {
                // Page by page, each rebuilt if its chip is gone.
                completions.clear();
                statuses.clear();
                for ((&address, target), spare) in
                    addresses.iter().zip(targets.iter_mut()).zip(spares.chunks_exact_mut(spare_bytes.max(1)))
                {
                    let (status, done) = self.read_page(issue_ns, address, target, spare)?;
                    done_ns = done_ns.max(done);
                    statuses.push(status);
                }
            }
            Err(error) => return Err(error),
        }
        if redundant {
            // Pages the ECC could not correct, again one by one so each is rebuilt.
            let spare_chunks = spares.chunks_exact_mut(spare_bytes.max(1));
            for (((&address, target), spare), status) in
                addresses.iter().zip(targets.iter_mut()).zip(spare_chunks).zip(statuses.iter_mut())
            {
                if *status == ReadStatus::Uncorrectable {
                    let (repaired, done) = self.read_page(issue_ns, address, target, spare)?;
                    done_ns = done_ns.max(done);
                    *status = repaired;
                }
            }
        }
        if let Some(tags) = tags {
            tags.extend(spares.chunks_exact(spare_bytes.max(1)).map(PageTag::decode));
        }
        self.advance_to(done_ns);
        Ok(())
    }

    /// Issues a program; does not wait (pages on other chips overlap with it).
    ///
    /// A metaroot page with a twin is programmed on both chips and succeeds if either copy
    /// does. A page of a parity segment joins its row's parity, which is programmed when the
    /// row is full (`seal_rows` programs the rest).
    pub fn program(&mut self, address: LogAddress, data: &[u8], tag: PageTag) -> Result<(), NandError> {
        assert_eq!(data.len(), self.layout.page_size_bytes(), "program of a partial page");
        tag.encode(&mut self.spare_buffer);
        let page = self.layout.physical(address);
        if let Some(twin) = self.layout.twin(address) {
            let first = self.program_physical(page, data);
            let second = self.program_physical(twin, data);
            return first.or(second);
        }
        self.program_physical(page, data)?;
        if self.layout.is_parity_segment(page.block.0) {
            let (segment, row) = (page.block.0, page.page_index);
            let page_bytes = self.layout.page_size_bytes();
            let index = match self.open_rows.iter().position(|open| open.segment == segment && open.row == row) {
                Some(index) => index,
                None => {
                    self.open_rows.push(OpenRow::new(segment, row, page_bytes));
                    self.open_rows.len() - 1
                }
            };
            let full = self.open_rows.get_mut(index).is_some_and(|open| {
                open.add(data, &self.spare_buffer);
                open.programmed >= self.layout.chip_count - 1
            });
            if full {
                let open = self.open_rows.swap_remove(index);
                self.program_parity(&open)?;
            }
        }
        Ok(())
    }

    /// Programs `data` with the spare bytes in `spare_buffer` at a physical page; refused on
    /// a chip known to be gone.
    fn program_physical(&mut self, page: PageAddress, data: &[u8]) -> Result<(), NandError> {
        if self.missing_chip() == Some(page.chip.0) {
            return Err(NandError::ChipFailed { chip: page.chip });
        }
        self.operations_issued += 1;
        self.flash.program_page(self.now_ns(), page, data, &self.spare_buffer)?;
        Ok(())
    }

    fn program_parity(&mut self, open: &OpenRow) -> Result<(), NandError> {
        let chip = self.layout.parity_chip(open.segment, open.row);
        let page = PageAddress::new(chip, open.segment, open.row);
        let spare = open.parity_spare(self.layout.spare_size_bytes());
        if self.missing_chip() == Some(chip) {
            return Err(NandError::ChipFailed { chip: page.chip });
        }
        self.operations_issued += 1;
        self.flash.program_page(self.now_ns(), page, &open.data, &spare)?;
        Ok(())
    }

    /// Programs the parity of every row that took pages and is not full (a transaction point:
    /// the log moves on to the next row of each segment). A parity program that fails on a
    /// grown bad block is reported, not an error: its segment is retired by the log; a chip
    /// that fails is an error.
    pub fn seal_rows(&mut self) -> Result<SealOutcome, NandError> {
        let mut outcome = SealOutcome::default();
        for open in core::mem::take(&mut self.open_rows) {
            match self.program_parity(&open) {
                Ok(()) => {}
                Err(
                    NandError::OperationFailed { block, .. }
                    | NandError::WornOut { block, .. }
                    | NandError::BadBlock { block },
                ) => {
                    outcome.failed.push((open.segment, block));
                }
                Err(error) => return Err(error),
            }
        }
        Ok(outcome)
    }

    /// Forgets the open parity row of `segment` (its segment was erased or abandoned).
    pub fn drop_open_rows(&mut self, segment: u32) {
        self.open_rows.retain(|open| open.segment != segment);
    }

    /// Whether rows wait for their parity.
    pub fn has_open_rows(&self) -> bool {
        !self.open_rows.is_empty()
    }

    /// Erases the blocks of a segment on the chips not in `skip`, issuing them together, and
    /// answers the blocks whose erase failed as a grown or marked bad block (`OperationFailed`,
    /// `WornOut`, `BadBlock`: the caller masks or retires); any other error is returned.
    pub fn erase_segment_blocks(
        &mut self,
        segment_index: u32,
        skip: &[u32],
    ) -> Result<Vec<(u32, NandError)>, NandError> {
        self.drop_open_rows(segment_index);
        let issue_ns = self.now_ns();
        let mut failed = Vec::new();
        for block in self.layout.blocks_of_segment(segment_index).filter(|block| !skip.contains(&block.chip.0)) {
            self.operations_issued += 1;
            match self.flash.erase_block(issue_ns, block) {
                Ok(_) => {}
                Err(
                    error
                    @ (NandError::OperationFailed { .. } | NandError::WornOut { .. } | NandError::BadBlock { .. }),
                ) => failed.push((block.chip.0, error)),
                Err(error) => return Err(error),
            }
        }
        Ok(failed)
    }

    /// Erases every block of a segment, issuing them together; the first block that failed is
    /// the error (the others were still erased).
    pub fn erase_segment(&mut self, segment_index: u32) -> Result<(), NandError> {
        match self.erase_segment_blocks(segment_index, &[])?.into_iter().next() {
            Some((_, error)) => Err(error),
            None => Ok(()),
        }
    }

    /// Waits until every issued operation has completed.
    pub fn barrier(&mut self) {
        let all_done_ns = self.flash.all_done_ns();
        self.advance_to(all_done_ns);
    }

    /// `barrier`, then the flash's write barrier: everything issued so far reaches the backing
    /// store before anything issued later (the commit protocol's ordering points around each
    /// metaroot program; a threaded array drains its chip queues here).
    pub fn write_barrier(&mut self) -> Result<(), NandError> {
        self.barrier();
        self.flash.write_barrier()
    }

    /// Sets the clock (a volume opened on a device that has already run, e.g. after format).
    pub fn set_now_ns(&mut self, now_ns: Nanos) {
        *self.now_ns.get_mut() = now_ns;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tags_round_trip_and_garbage_decodes_to_none() {
        let mut spare = [0u8; 64];
        for tag in [
            PageTag::Node { tree_id: 2, level: 3 },
            PageTag::Data { inode: 0x0102_0304_0506_0708, page_index: 77 },
            PageTag::SegmentTable { page_index: 9 },
            PageTag::Metaroot,
            PageTag::Superblock,
            PageTag::Parity,
            PageTag::NodeCopy { tree_id: 1, level: 0 },
            PageTag::SegmentTableCopy { page_index: 70_000 },
        ] {
            tag.encode(&mut spare);
            assert_eq!(PageTag::decode(&spare), Some(tag));
        }
        assert_eq!(PageTag::decode(&[0xFF; 64]), None);
        assert_eq!(PageTag::decode(&[1, 2]), None);
    }
}
