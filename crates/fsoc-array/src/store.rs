//! `ChipArrayStore`: a `PageStore` over p chip workers. The caller keeps a mirror of every
//! chip's metadata (page states, block wear and marks), so the NAND model's rule checks never
//! wait for a thread; page contents live only in the chip files and move through the workers.
//!
//! Invariants: every metadata change is applied to the mirror and queued to the chip's worker
//! in the same call, so the file always catches up to the mirror. `read_contents` of a page
//! returns what the latest `write_contents` of that page stored: a page written since its
//! chip's last confirmed write-back is served from the in-flight table (the bytes the worker
//! was handed), any other page straight from the chip file by the reading thread (its latest
//! contents are there, and no new write of it can be queued while a reader holds the file
//! system shared), and a prefetched read of a page is dropped when the page is written. Reads
//! thus never wait in a chip's queue behind writes, fences or flushes.

use std::cell::RefCell;
use std::collections::HashMap;
use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;

use fsoc_media::image::{ImageStore, SlotReader};
use fsoc_media::store::{BlockMeta, ContentsFetch, PageMeta, PageStore, RamStore};
use fsoc_media::{BlockAddress, Geometry, NandError, PageAddress};

use crate::chip_files::ArrayError;
use crate::worker::{wait_reply, ChipWorker, FenceBoard, ReadReply, Request, Write};

/// Prefetched reads kept at once; beyond it, older ones are dropped (they are only hints).
const PREFETCH_PAGES_MAX: usize = 4096;

/// Bytes of pages written since the last write barrier after which the store adds one of its
/// own, so the workers write back and the in-flight table can be pruned: the table holds about
/// this much (4 MiB; 1,024 pages of 4 KiB, 256 of 16 KiB) plus what the chips' queues hold.
const IN_FLIGHT_FENCE_BYTES: u64 = 4 << 20;

/// A page's contents on their way to the chip file.
struct InFlight {
    /// The chip's write request number that carries them.
    number: u64,
    /// Data then spare, shared with the queued request.
    bytes: Arc<Vec<u8>>,
}

pub struct ChipArrayStore {
    geometry: Geometry,
    /// Metadata of every chip (contents are never stored here).
    mirror: RamStore,
    /// One per chip, in chip order (`chip_count` of them).
    workers: Vec<ChipWorker>,
    chip_count: u32,
    paths: Vec<PathBuf>,
    /// Reads started ahead by `prefetch`, by (global) page address.
    prefetched: RefCell<HashMap<PageAddress, ReadReply>>,
    /// The newest write barrier's number (fences on the workers' board).
    fence_epoch: u64,
    /// The workers' fences and their write-back confirmations.
    board: Arc<FenceBoard>,
    /// One reader of each chip file's page slots, for reads that need no worker.
    readers: Vec<SlotReader>,
    /// Pages whose latest contents may not be in their chip file yet, by (global) address.
    in_flight: HashMap<PageAddress, InFlight>,
    /// Per chip: write requests queued so far (the last one's number).
    writes_queued: Vec<u64>,
    /// Pages written since the last write barrier.
    writes_since_fence: u64,
}

impl fmt::Debug for ChipArrayStore {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter
            .debug_struct("ChipArrayStore")
            .field("geometry", &self.geometry)
            .field("paths", &self.paths)
            .finish_non_exhaustive()
    }
}

/// The chip file's own address of a page: chip 0 of a one-chip image.
fn local_page(page: PageAddress) -> PageAddress {
    PageAddress { chip: fsoc_media::ChipIndex(0), ..page }
}

fn local_block(block: BlockAddress) -> BlockAddress {
    BlockAddress { chip: fsoc_media::ChipIndex(0), ..block }
}

impl ChipArrayStore {
    /// Starts one worker per store; `load_metadata` says whether to read the chips' metadata
    /// into the mirror (existing files) or start pristine (files just created).
    pub(crate) fn start(
        stores: Vec<ImageStore>,
        paths: Vec<PathBuf>,
        queue_depth_max: usize,
        load_metadata: bool,
    ) -> Result<ChipArrayStore, ArrayError> {
        assert_eq!(stores.len(), paths.len(), "one path per chip file");
        let geometry = stores.first().map(|store| store.geometry()).ok_or(ArrayError::ChipCount { chip_count: 0 })?;
        let chip_count = u32::try_from(stores.len()).map_err(|_| ArrayError::ChipCount { chip_count: stores.len() })?;
        let mut workers = Vec::with_capacity(stores.len());
        let mut readers = Vec::with_capacity(stores.len());
        let board = FenceBoard::new(stores.len());
        for (chip, store) in (0u32..).zip(stores) {
            assert_eq!(store.geometry(), geometry, "chip files checked identical before start");
            readers.push(store.slot_reader());
            workers.push(ChipWorker::spawn(chip, store, queue_depth_max, Arc::clone(&board))?);
        }
        let mut mirror = RamStore::new(geometry, chip_count);
        if load_metadata {
            for (chip, worker) in (0u32..).zip(&workers) {
                let metadata = worker.load_metadata()?;
                for (block_index, meta) in (0u32..).zip(&metadata.blocks) {
                    mirror.set_block_meta(BlockAddress::new(chip, block_index), meta)?;
                }
                for (block_index, page_index, meta) in &metadata.pages {
                    mirror.set_page_meta(PageAddress::new(chip, *block_index, *page_index), meta)?;
                }
            }
        }
        Ok(ChipArrayStore {
            geometry,
            mirror,
            workers,
            chip_count,
            paths,
            prefetched: RefCell::new(HashMap::new()),
            fence_epoch: 0,
            board,
            readers,
            in_flight: HashMap::new(),
            writes_queued: vec![0; chip_count as usize],
            writes_since_fence: 0,
        })
    }

    /// The chip files, in chip order.
    pub fn paths(&self) -> &[PathBuf] {
        &self.paths
    }

    pub(crate) fn controls(&self) -> Vec<Arc<crate::worker::WorkerControl>> {
        self.workers.iter().map(ChipWorker::control).collect()
    }

    /// The chip's worker, or `OutOfRange` (the simulator checks addresses first).
    fn worker(&self, chip: fsoc_media::ChipIndex) -> Result<&ChipWorker, NandError> {
        self.workers.get(chip.0 as usize).ok_or(NandError::OutOfRange {
            what: "chip",
            value: u64::from(chip.0),
            limit: u64::from(self.chip_count),
        })
    }

    /// Starts reading `pages` on their chips' workers, so the following `read_contents` calls
    /// find them fetched (in parallel across chips) or on the way.
    pub fn prefetch(&self, pages: &[PageAddress]) {
        let (data_bytes, spare_bytes) = (self.geometry.page_data_bytes as usize, self.geometry.spare_bytes as usize);
        let mut prefetched = self.prefetched.borrow_mut();
        if prefetched.len() + pages.len() > PREFETCH_PAGES_MAX {
            prefetched.clear();
        }
        for &page in pages.iter().take(PREFETCH_PAGES_MAX) {
            // A page in flight is read from memory at once: no worker needed.
            if prefetched.contains_key(&page) || self.in_flight.contains_key(&page) {
                continue;
            }
            // A chip out of range or a failed submit is left to the real read, which reports it.
            let Ok(worker) = self.worker(page.chip) else { continue };
            if let Ok(reply) = worker.read(local_page(page), data_bytes, spare_bytes) {
                prefetched.insert(page, reply);
            }
        }
    }

    /// Queues a change on chip `chip` and returns its number.
    fn submit_write(&mut self, chip: fsoc_media::ChipIndex, write: Write) -> Result<u64, NandError> {
        self.worker(chip)?.gather(Request::Write(write))?;
        let queued = self.writes_queued.get_mut(chip.0 as usize).ok_or(NandError::OutOfRange {
            what: "chip",
            value: u64::from(chip.0),
            limit: u64::from(self.chip_count),
        })?;
        *queued += 1;
        Ok(*queued)
    }

    /// Drops in-flight pages their chip has confirmed written back.
    fn prune_in_flight(&mut self) {
        let board = &self.board;
        self.in_flight.retain(|page, entry| entry.number > board.written_back(page.chip.0));
    }

    /// Where a read of `page` is served from without the chip's queue: the in-flight bytes,
    /// else the chip file (`None` for a chip out of range).
    fn direct_source(&self, page: PageAddress) -> Option<DirectSource> {
        if let Some(entry) = self.in_flight.get(&page) {
            return Some(DirectSource::InFlight(Arc::clone(&entry.bytes)));
        }
        self.readers.get(page.chip.0 as usize).map(|reader| DirectSource::File(reader.clone(), local_page(page)))
    }

    /// Waits for every chip's queued work and closes the workers.
    pub fn close(mut self) -> Result<(), NandError> {
        self.prefetched.get_mut().clear();
        let mut result = Ok(());
        for worker in &mut self.workers {
            if let Err(error) = worker.close() {
                result = result.and(Err(error));
            }
        }
        result
    }
}

/// A read served without the chip's worker.
enum DirectSource {
    InFlight(Arc<Vec<u8>>),
    File(SlotReader, PageAddress),
}

impl DirectSource {
    fn read(&self, data: &mut [u8], spare: &mut [u8]) -> Result<(), NandError> {
        match self {
            DirectSource::InFlight(bytes) => copy_contents(bytes, data, spare),
            DirectSource::File(reader, page) => reader.read(*page, data, spare),
        }
    }
}

/// Splits a worker's reply (data then spare) into the caller's buffers.
fn copy_contents(bytes: &[u8], data: &mut [u8], spare: &mut [u8]) -> Result<(), NandError> {
    if bytes.len() != data.len() + spare.len() {
        return Err(NandError::BufferSize {
            what: "chip worker read",
            expected_bytes: data.len() + spare.len(),
            actual_bytes: bytes.len(),
        });
    }
    let (stored_data, stored_spare) = bytes.split_at(data.len());
    data.copy_from_slice(stored_data);
    spare.copy_from_slice(stored_spare);
    Ok(())
}

impl PageStore for ChipArrayStore {
    fn geometry(&self) -> Geometry {
        self.geometry
    }

    fn chip_count(&self) -> u32 {
        self.chip_count
    }

    fn block_meta(&self, block: BlockAddress) -> Result<BlockMeta, NandError> {
        self.mirror.block_meta(block)
    }

    fn set_block_meta(&mut self, block: BlockAddress, meta: &BlockMeta) -> Result<(), NandError> {
        self.submit_write(block.chip, Write::BlockMeta { block: local_block(block), meta: *meta })?;
        self.mirror.set_block_meta(block, meta)
    }

    fn page_meta(&self, page: PageAddress) -> Result<PageMeta, NandError> {
        self.mirror.page_meta(page)
    }

    fn set_page_meta(&mut self, page: PageAddress, meta: &PageMeta) -> Result<(), NandError> {
        self.submit_write(page.chip, Write::PageMeta { page: local_page(page), meta: *meta })?;
        self.mirror.set_page_meta(page, meta)
    }

    fn write_contents(&mut self, page: PageAddress, data: &[u8], spare: &[u8]) -> Result<(), NandError> {
        assert_eq!(data.len(), self.geometry.page_data_bytes as usize, "chip array: data size");
        assert_eq!(spare.len(), self.geometry.spare_bytes as usize, "chip array: spare size");
        // A read of this page fetched earlier would return the old contents.
        self.prefetched.get_mut().remove(&page);
        let mut bytes = Vec::with_capacity(data.len() + spare.len());
        bytes.extend_from_slice(data);
        bytes.extend_from_slice(spare);
        let bytes = Arc::new(bytes);
        let write = Write::Contents { page: local_page(page), bytes: Arc::clone(&bytes), data_bytes: data.len() };
        let number = self.submit_write(page.chip, write)?;
        self.in_flight.insert(page, InFlight { number, bytes });
        self.writes_since_fence += 1;
        let page_bytes = u64::from(self.geometry.page_data_bytes) + u64::from(self.geometry.spare_bytes);
        if self.writes_since_fence.saturating_mul(page_bytes) >= IN_FLIGHT_FENCE_BYTES {
            // Bounds the in-flight table: the workers write back at the fence.
            self.write_barrier()?;
        }
        Ok(())
    }

    /// A prefetched read is collected from its worker; any other is served by the caller's
    /// thread after the simulator's lock is released (from the in-flight bytes or the chip
    /// file), so reads of several threads overlap and none waits behind a chip's queue.
    fn start_read_contents(&self, page: PageAddress) -> Option<ContentsFetch> {
        if let Some(reply) = self.prefetched.borrow_mut().remove(&page) {
            let chip = page.chip.0;
            return Some(Box::new(move |data: &mut [u8], spare: &mut [u8]| {
                let bytes = wait_reply(chip, &reply)?;
                copy_contents(&bytes, data, spare)
            }));
        }
        let source = self.direct_source(page)?;
        Some(Box::new(move |data: &mut [u8], spare: &mut [u8]| source.read(data, spare)))
    }

    fn read_contents(&self, page: PageAddress, data: &mut [u8], spare: &mut [u8]) -> Result<(), NandError> {
        let worker = self.worker(page.chip)?;
        if let Some(reply) = self.prefetched.borrow_mut().remove(&page) {
            let bytes = worker.wait(&reply)?;
            return copy_contents(&bytes, data, spare);
        }
        self.direct_source(page)
            .ok_or(NandError::OutOfRange {
                what: "chip",
                value: u64::from(page.chip.0),
                limit: u64::from(self.chip_count),
            })?
            .read(data, spare)
    }

    fn reset_block_pages(&mut self, block: BlockAddress) -> Result<(), NandError> {
        self.submit_write(block.chip, Write::ResetBlockPages { block: local_block(block) })?;
        // The erased pages' old contents are never read again (the model answers erased pages
        // itself); dropping them keeps the table small.
        self.in_flight.retain(|page, _| page.block_address() != block);
        self.mirror.reset_block_pages(block)
    }

    /// Flushes every chip file at once and waits for all of them.
    fn flush(&mut self) -> Result<(), NandError> {
        self.begin_flush()?.wait()
    }

    /// Queues a flush on every chip (each runs once everything queued before it on that chip
    /// is in the file) and returns; the wait collects every chip's reply (the first error wins).
    fn begin_flush(&mut self) -> Result<fsoc_media::FlushWait, NandError> {
        let mut replies = Vec::with_capacity(self.workers.len());
        for ((chip, worker), &through) in (0u32..).zip(&self.workers).zip(&self.writes_queued) {
            replies.push((chip, worker.flush(through)?));
        }
        Ok(fsoc_media::FlushWait::pending(move || {
            let mut result = Ok(());
            for (chip, reply) in &replies {
                if let Err(error) = wait_reply(*chip, reply) {
                    result = result.and(Err(error));
                }
            }
            result
        }))
    }

    /// A fence on every chip, without waiting: each chip first puts everything queued before
    /// it in its file, then (with more than one chip) holds its later requests until every
    /// chip has done so. The pages a commit's metaroot names thus reach their files before the
    /// metaroot reaches its own, whatever chip each went to.
    fn write_barrier(&mut self) -> Result<(), NandError> {
        self.prune_in_flight();
        self.writes_since_fence = 0;
        self.fence_epoch += 1;
        let epoch = self.fence_epoch;
        // One batch per chip: its gathered changes, the fence and (with more than one chip)
        // the wait for the others.
        for (worker, &through) in self.workers.iter().zip(&self.writes_queued) {
            worker.gather(Request::Fence { epoch, through })?;
            if self.workers.len() > 1 {
                worker.gather(Request::AwaitFence { epoch })?;
            }
        }
        for worker in &self.workers {
            worker.hand_over()?;
        }
        Ok(())
    }
}
