//! The volume's view of the flash array: log-address I/O, the virtual clock, spare-area tags.
//!
//! Programs and erases are issued at the current virtual time and not waited for, so pages
//! appended to consecutive chips overlap; reads wait for their data. `barrier` waits for
//! everything issued, which the commit protocol uses before and after writing a metaroot.

use alloc::collections::BTreeSet;
use alloc::vec;
use alloc::vec::Vec;

use fsoc_flash::sync::Mutex;
use fsoc_flash::{Flash, NandError, Nanos, ReadStatus};
use portable_atomic::{AtomicU64, Ordering};

use crate::address::LogAddress;
use crate::segment::layout::Layout;

/// What a log page holds, recorded in its spare area so the cleaner can find the owner
/// (docs/FORMAT.md, "Spare tag").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PageTag {
    /// A B+tree node of tree `tree_id` at `level` (0 = leaf).
    Node { tree_id: u8, level: u8 },
    /// File data: page `page_index` of inode `inode`.
    Data { inode: u64, page_index: u32 },
    /// Page `page_index` of the segment table.
    SegmentTable { page_index: u32 },
    /// A metaroot record (only in metaroot areas).
    Metaroot,
    /// A superblock copy.
    Superblock,
}

pub const SPARE_TAG_BYTES: usize = 16;

const TAG_NODE: u8 = 1;
const TAG_DATA: u8 = 2;
const TAG_SEGMENT_TABLE: u8 = 3;
const TAG_METAROOT: u8 = 4;
const TAG_SUPERBLOCK: u8 = 5;

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
                tag[4..12].copy_from_slice(&inode.to_le_bytes());
                tag[12..16].copy_from_slice(&page_index.to_le_bytes());
            }
            PageTag::SegmentTable { page_index } => {
                tag[0] = TAG_SEGMENT_TABLE;
                tag[12..16].copy_from_slice(&page_index.to_le_bytes());
            }
            PageTag::Metaroot => tag[0] = TAG_METAROOT,
            PageTag::Superblock => tag[0] = TAG_SUPERBLOCK,
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
                Some(PageTag::Data { inode, page_index: u32_at(12)? })
            }
            TAG_SEGMENT_TABLE => Some(PageTag::SegmentTable { page_index: u32_at(12)? }),
            TAG_METAROOT => Some(PageTag::Metaroot),
            TAG_SUPERBLOCK => Some(PageTag::Superblock),
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

/// The refresh threshold for an ECC of `correctable_bits` per 512 bytes: three quarters of its
/// strength, rounded up (a 4-bit code: 3 bits in one sector; a 1-bit code: any correction).
pub fn refresh_threshold_bits(correctable_bits: u32) -> u32 {
    (correctable_bits.saturating_mul(3)).div_ceil(4).max(1)
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
        }
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
        let segment = self.layout.segment_of(address);
        let mut weak = self.weak.lock();
        weak.weak_reads += 1;
        if weak.segments.len() < WEAK_SEGMENTS_MAX || weak.segments.contains(&segment) {
            weak.segments.insert(segment);
        } else {
            weak.overflowed = true;
        }
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
        self.pages_read.fetch_add(1, Ordering::Relaxed);
        let done = self.flash.read_page(issue_ns, page, data, spare)?;
        self.note_status(address, done.value);
        Ok((done.value, done.done_ns))
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
        self.pages_read.fetch_add(pages.len() as u64, Ordering::Relaxed);
        self.flash.read_pages(issue_ns, &pages, &mut targets, &mut spares, &mut completions)?;
        let done_ns = completions.iter().map(|completed| completed.done_ns).fold(issue_ns, Nanos::max);
        statuses.extend(completions.iter().map(|completed| completed.value));
        for (&address, &status) in addresses.iter().zip(statuses.iter()) {
            self.note_status(address, status);
        }
        if let Some(tags) = tags {
            tags.extend(spares.chunks_exact(spare_bytes.max(1)).map(PageTag::decode));
        }
        self.advance_to(done_ns);
        Ok(())
    }

    /// Issues a program; does not wait (pages on other chips overlap with it).
    pub fn program(&mut self, address: LogAddress, data: &[u8], tag: PageTag) -> Result<(), NandError> {
        assert_eq!(data.len(), self.layout.page_size_bytes(), "program of a partial page");
        tag.encode(&mut self.spare_buffer);
        let page = self.layout.physical(address);
        self.operations_issued += 1;
        self.flash.program_page(self.now_ns(), page, data, &self.spare_buffer)?;
        Ok(())
    }

    /// Erases every block of a segment, issuing them together.
    pub fn erase_segment(&mut self, segment_index: u32) -> Result<(), NandError> {
        let issue_ns = self.now_ns();
        for block in self.layout.blocks_of_segment(segment_index) {
            self.operations_issued += 1;
            self.flash.erase_block(issue_ns, block)?;
        }
        Ok(())
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
        ] {
            tag.encode(&mut spare);
            assert_eq!(PageTag::decode(&spare), Some(tag));
        }
        assert_eq!(PageTag::decode(&[0xFF; 64]), None);
        assert_eq!(PageTag::decode(&[1, 2]), None);
    }
}
