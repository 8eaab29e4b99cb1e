//! `ThreadedFlash`: the simulator's NAND model over chip files driven by worker threads.
//!
//! Invariant: every `Flash` call is answered by the same `SimFlash` logic as a RAM device, in
//! the caller's operation order; the threads only move bytes. Results therefore never depend
//! on thread timing, and equal the RAM simulator's for the same configuration and operations.

use std::path::{Path, PathBuf};

use fsoc_media::{
    AgingModel, BlockAddress, ChipIndex, Completed, Flash, FlashCounters, FlushWait, Geometry, NandError, Nanos,
    PageAddress, ReadStatus, SimConfig, SimFlash, Timing,
};

use crate::chip_files::{
    chip_file_path, chip_file_paths, create_chip_files, open_chip_files, ArrayError, CHIP_COUNT_MAX,
};
use crate::store::ChipArrayStore;
use crate::worker::WorkerControl;
use std::sync::Arc;

/// Settings of the array layer (not of the chips).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ArrayConfig {
    /// Requests queued per chip before the submitter blocks.
    pub queue_depth_max: usize,
}

impl Default for ArrayConfig {
    fn default() -> Self {
        ArrayConfig { queue_depth_max: 64 }
    }
}

/// A `Flash` of p chips, one image file and one worker thread per chip.
#[derive(Debug)]
pub struct ThreadedFlash {
    sim: SimFlash<ChipArrayStore>,
    /// The chip files in chip order (a copy of the store's, readable without its lock).
    paths: Vec<PathBuf>,
    controls: Vec<Arc<WorkerControl>>,
}

/// Fault injection on a threaded array's workers, usable from another thread while the array
/// is in use: hold a chip's worker, and emulate a `kill -9` of the process.
#[derive(Clone, Debug)]
pub struct ChipControl {
    controls: Vec<Arc<WorkerControl>>,
}

impl ChipControl {
    /// Chip `chip`'s worker executes nothing more until `release` (its queue fills, and a
    /// submitter then blocks, as behind a slow chip).
    pub fn hold(&self, chip: u32) {
        if let Some(control) = self.controls.get(chip as usize) {
            control.set_held(true);
        }
    }

    pub fn release(&self, chip: u32) {
        if let Some(control) = self.controls.get(chip as usize) {
            control.set_held(false);
        }
    }

    /// Emulates the death of the process: every request still queued on any chip is lost
    /// (never reaches its file), as with `kill -9`; the workers stop, so every later call on
    /// the array fails. What the files hold is what a real kill would have left.
    pub fn kill(&self) {
        for control in &self.controls {
            control.kill();
        }
    }
}

impl ThreadedFlash {
    /// Creates a fresh array `base.chip0` … `base.chip{p-1}` (p = `config.chip_count`; the
    /// files must not exist), fresh from the factory exactly as `SimFlash::create(config)`.
    pub fn create(base: &Path, config: SimConfig) -> Result<ThreadedFlash, ArrayError> {
        let paths: Vec<PathBuf> = (0..config.chip_count).map(|chip| chip_file_path(base, chip)).collect();
        ThreadedFlash::create_files(&paths, config, ArrayConfig::default())
    }

    /// Creates a fresh array in the given files, one per chip.
    pub fn create_files(paths: &[PathBuf], config: SimConfig, array: ArrayConfig) -> Result<ThreadedFlash, ArrayError> {
        if paths.is_empty() || paths.len() > CHIP_COUNT_MAX as usize || paths.len() != config.chip_count as usize {
            return Err(ArrayError::ChipCount { chip_count: paths.len() });
        }
        config.validate()?;
        let stores = create_chip_files(paths, &config)?;
        let store = ChipArrayStore::start(stores, paths.to_vec(), array.queue_depth_max, false)?;
        let controls = store.controls();
        let mut sim = SimFlash::with_store(config, store)?;
        sim.mark_factory_bad_blocks()?;
        Ok(ThreadedFlash { sim, paths: paths.to_vec(), controls })
    }

    /// Opens the chip files `base.chip0`, `base.chip1`, … (up to the first missing one).
    pub fn open(base: &Path) -> Result<ThreadedFlash, ArrayError> {
        let paths = chip_file_paths(base);
        if paths.is_empty() {
            return Err(ArrayError::NoChipFiles { base: base.display().to_string() });
        }
        ThreadedFlash::open_files(&paths, ArrayConfig::default())
    }

    /// Opens the given chip files as chips 0, 1, … in this order. Whether they form one volume
    /// in the right order is checked by the file system's mount, not here.
    pub fn open_files(paths: &[PathBuf], array: ArrayConfig) -> Result<ThreadedFlash, ArrayError> {
        let (stores, config) = open_chip_files(paths)?;
        let store = ChipArrayStore::start(stores, paths.to_vec(), array.queue_depth_max, true)?;
        let controls = store.controls();
        Ok(ThreadedFlash { sim: SimFlash::with_store(config, store)?, paths: paths.to_vec(), controls })
    }

    /// The NAND model (fault injection, power cuts, page states for tests).
    pub fn sim(&self) -> &SimFlash<ChipArrayStore> {
        &self.sim
    }

    pub fn sim_mut(&mut self) -> &mut SimFlash<ChipArrayStore> {
        &mut self.sim
    }

    pub fn config(&self) -> &SimConfig {
        self.sim.config()
    }

    /// Ages the array by `ns` of shelf or idle time (`SimFlash::advance_retention_time`): the
    /// retention clock only, no chip clock or file moves. The clock is not kept in the chip
    /// files, so an array reopened from them starts it afresh.
    pub fn advance_retention_time(&mut self, ns: Nanos) {
        self.sim.advance_retention_time(ns);
    }

    /// Replaces the retention and read-disturb model (`SimFlash::set_aging_model`), e.g. to
    /// turn it on for an array opened from chip files, whose headers hold no such setting.
    pub fn set_aging_model(&mut self, aging: AgingModel) {
        self.sim.set_aging_model(aging);
    }

    /// The chip files, in chip order.
    pub fn paths(&self) -> &[PathBuf] {
        &self.paths
    }

    /// Fault injection on the workers (hold a chip, emulate `kill -9`), for tests of what a
    /// dead process leaves in the chip files.
    pub fn chip_control(&self) -> ChipControl {
        ChipControl { controls: self.controls.clone() }
    }

    /// Flushes every chip file, waits for every worker and stops them.
    pub fn close(mut self) -> Result<(), NandError> {
        self.sim.flush()?;
        self.sim.into_store().close()
    }
}

impl Flash for ThreadedFlash {
    fn geometry(&self) -> Geometry {
        self.sim.geometry()
    }

    fn chip_count(&self) -> u32 {
        self.sim.chip_count()
    }

    fn timing(&self) -> Timing {
        self.sim.timing()
    }

    fn read_page(
        &self,
        issue_ns: Nanos,
        page: PageAddress,
        data: &mut [u8],
        spare: &mut [u8],
    ) -> Result<Completed<ReadStatus>, NandError> {
        self.sim.read_page(issue_ns, page, data, spare)
    }

    fn read_pages(
        &self,
        issue_ns: Nanos,
        pages: &[PageAddress],
        data: &mut [&mut [u8]],
        spares: &mut [u8],
        completions: &mut Vec<Completed<ReadStatus>>,
    ) -> Result<(), NandError> {
        self.sim.read_pages(issue_ns, pages, data, spares, completions)
    }

    fn program_page(
        &mut self,
        issue_ns: Nanos,
        page: PageAddress,
        data: &[u8],
        spare: &[u8],
    ) -> Result<Completed<()>, NandError> {
        self.sim.program_page(issue_ns, page, data, spare)
    }

    fn erase_block(&mut self, issue_ns: Nanos, block: BlockAddress) -> Result<Completed<()>, NandError> {
        self.sim.erase_block(issue_ns, block)
    }

    fn is_bad_block(&self, block: BlockAddress) -> Result<bool, NandError> {
        self.sim.is_bad_block(block)
    }

    fn mark_bad_block(&mut self, block: BlockAddress) -> Result<(), NandError> {
        self.sim.mark_bad_block(block)
    }

    fn busy_until_ns(&self, chip: ChipIndex) -> Nanos {
        self.sim.busy_until_ns(chip)
    }

    fn erase_count(&self, block: BlockAddress) -> Result<u32, NandError> {
        self.sim.erase_count(block)
    }

    fn paired_page_distance(&self) -> u32 {
        self.sim.paired_page_distance()
    }

    fn ecc_correctable_bits_per_512(&self) -> Option<u32> {
        self.sim.ecc_correctable_bits_per_512()
    }

    fn flush(&mut self) -> Result<(), NandError> {
        self.sim.flush()
    }

    /// Queues a flush on every chip; the wait collects their replies.
    fn begin_flush(&mut self) -> Result<FlushWait, NandError> {
        self.sim.begin_flush()
    }

    /// Queues a fence on every chip (nothing queued later reaches a file before everything
    /// queued earlier on any chip) and returns without waiting.
    fn write_barrier(&mut self) -> Result<(), NandError> {
        self.sim.write_barrier()
    }

    /// Starts the reads on every chip's worker at once; the `read_page` calls that follow
    /// then overlap in real time as they already do in virtual time.
    fn prefetch(&self, pages: &[PageAddress]) {
        self.sim.inspect_store(|store| store.prefetch(pages));
    }
}

impl fsoc_media::FlashStats for ThreadedFlash {
    fn counters(&self) -> FlashCounters {
        self.sim.counters()
    }

    fn reset_counters(&mut self) {
        self.sim.reset_counters();
    }
}
