//! `SimFlash`: the simulated NAND array. It enforces the NAND rules with typed errors, keeps a
//! virtual clock per chip, accounts every operation, and applies ECC outcomes and faults.
//!
//! Invariants: a rejected operation (bad address, rule violation, power lost, failed chip) has
//! no effect at all: no state change, no time, no counters. Everything random comes from the
//! seeded RNG or `hash64`, so equal seeds and equal operation sequences give equal results.

use alloc::vec;
use alloc::vec::Vec;

use fsoc_flash::convert::{self, u32_from_u64};

use crate::aging::{AgingModel, BlockAging, BlockAgingState};
use crate::ecc::{self, BitErrorModel};
use crate::energy::EnergyModel;
use crate::faults::{FactoryBadBlocks, FaultConfig, FaultState, OperationFate};
use crate::geometry::{Geometry, Profile, Timing};
use crate::rng::{hash64, SeededRng};
use crate::stats::{FlashCounters, OperationRecord};
use crate::store::{BadMark, BlockMeta, PageMeta, PageState, PageStore, RamStore};
use crate::sync::Mutex;
use crate::{BlockAddress, ChipIndex, Completed, Flash, NandError, Nanos, OperationKind, PageAddress, ReadStatus};

/// Salts that keep the hash-derived patterns of different phenomena independent.
const SALT_TEAR_LEVEL: u64 = 0x7465_6172; // "tear"
const SALT_TEAR_MASK: u64 = 0x6d61_736b; // "mask"
const SALT_ERASE_LEVEL: u64 = 0x6572_6173; // "eras"
const SALT_ERASE_MASK: u64 = 0x656d_736b; // "emsk"
/// Stream offset so the RNG stream differs from the hash patterns of the same seed.
const RNG_STREAM_SALT: u64 = 0x5349_4d46_4c41_5348; // "SIMFLASH"

/// Everything that defines a simulated array.
#[derive(Clone, Debug, PartialEq)]
pub struct SimConfig {
    /// The profile the geometry and timing came from (recorded in image headers).
    pub profile: Profile,
    pub geometry: Geometry,
    pub timing: Timing,
    pub chip_count: u32,
    pub seed: u64,
    pub faults: FaultConfig,
    /// BCH strength: bits corrected per 512-byte sector (seed 001's platform: 4).
    pub ecc_correctable_bits_per_512: u32,
    /// Rated program/erase cycles per block.
    pub endurance_cycles: u32,
    /// Pages between an MLC/TLC upper page and its paired lower page (0 = no pairing).
    pub paired_page_distance: u32,
    pub bit_errors: BitErrorModel,
    /// Retention loss and read disturb (`aging`); off by default, so seeded outcomes stay as
    /// they were before it existed.
    pub aging: AgingModel,
    pub energy: EnergyModel,
}

impl SimConfig {
    /// The profile's geometry (with `block_count` blocks per chip), timing, endurance and page
    /// pairing, 4-bit ECC, default energy model and default faults (wear-out only); wear bit
    /// errors on, retention and read disturb off (`AgingModel::published()` turns them on).
    pub fn new(profile: Profile, chip_count: u32, block_count: u32, seed: u64) -> Self {
        SimConfig {
            profile,
            geometry: profile.geometry(block_count),
            timing: profile.timing(),
            chip_count,
            seed,
            faults: FaultConfig::default(),
            ecc_correctable_bits_per_512: 4,
            endurance_cycles: profile.endurance_cycles(),
            paired_page_distance: profile.paired_page_distance(),
            bit_errors: BitErrorModel::default(),
            aging: AgingModel::disabled(),
            energy: EnergyModel::default(),
        }
    }

    /// Checks the configuration; returns the first problem found.
    pub fn validate(&self) -> Result<(), NandError> {
        self.geometry.validate().map_err(|reason| NandError::InvalidConfig { reason })?;
        if self.chip_count == 0 || self.chip_count > 1024 {
            return Err(NandError::InvalidConfig { reason: "chip_count must be within 1..=1024" });
        }
        if self.endurance_cycles == 0 {
            return Err(NandError::InvalidConfig { reason: "endurance_cycles must be at least 1" });
        }
        if self.paired_page_distance >= self.geometry.pages_per_block {
            return Err(NandError::InvalidConfig { reason: "paired_page_distance must be below pages_per_block" });
        }
        Ok(())
    }

    /// Bytes moved over the bus by one page read or program (data plus spare).
    pub fn page_transfer_bytes(&self) -> u64 {
        u64::from(self.geometry.page_data_bytes) + u64::from(self.geometry.spare_bytes)
    }

    /// Busy time of one page read: array read plus transfer out.
    pub fn read_busy_ns(&self) -> Nanos {
        self.timing.read_latency_ns + self.page_transfer_bytes() * self.timing.bus_ns_per_byte
    }

    /// Busy time of one page program: transfer in plus array program.
    pub fn program_busy_ns(&self) -> Nanos {
        self.timing.program_latency_ns + self.page_transfer_bytes() * self.timing.bus_ns_per_byte
    }

    /// Busy time of one block erase (a few command bytes; their transfer is neglected).
    pub fn erase_busy_ns(&self) -> Nanos {
        self.timing.erase_latency_ns
    }
}

/// The simulator's mutable state (everything `SimFlash` guards with its lock).
#[derive(Clone, Debug)]
struct SimState<S: PageStore> {
    config: SimConfig,
    store: S,
    busy_until_ns: Vec<Nanos>,
    counters: FlashCounters,
    rng: SeededRng,
    fault_state: FaultState,
    /// Per block (chip-major): when its contents were programmed and how often it was read
    /// since its erase. RAM only: a reopened store starts afresh (`aging`).
    block_aging: Vec<BlockAgingState>,
    /// Shelf time added by `advance_retention_time`: the retention clock is the virtual time
    /// plus this.
    retention_offset_ns: Nanos,
    /// Where the scheduled failure struck (`schedule_operation_failure`), once it has.
    scheduled_failure_hit: Option<FailureHit>,
}

/// The operation a scheduled failure (`SimFlash::schedule_operation_failure`) struck.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FailureHit {
    pub kind: OperationKind,
    pub block: BlockAddress,
    /// The page, for a program.
    pub page: Option<PageAddress>,
}

impl<S: PageStore> SimState<S> {
    /// Wraps an existing store (fresh or reopened). Factory bad blocks are not added: a
    /// reopened device already has its marks. The store's shape must match the config.
    pub fn with_store(config: SimConfig, store: S) -> Result<Self, NandError> {
        config.validate()?;
        if store.geometry() != config.geometry || store.chip_count() != config.chip_count {
            return Err(NandError::InvalidConfig { reason: "store geometry or chip count differs from config" });
        }
        let chip_count = config.chip_count;
        let block_total = u64::from(chip_count) * u64::from(config.geometry.block_count);
        let block_total = usize::try_from(block_total)
            .map_err(|_| NandError::InvalidConfig { reason: "chip_count x block_count exceeds the address space" })?;
        Ok(SimState {
            busy_until_ns: vec![0; chip_count as usize],
            block_aging: vec![BlockAgingState::AT_START; block_total],
            retention_offset_ns: 0,
            scheduled_failure_hit: None,
            counters: FlashCounters::new(chip_count, config.geometry.block_count),
            rng: SeededRng::new(config.seed ^ RNG_STREAM_SALT),
            fault_state: FaultState::new(chip_count, &config.faults),
            config,
            store,
        })
    }

    /// Marks factory bad blocks as `config.faults.factory_bad_blocks` says (block 0 of each
    /// chip stays good). Called once when a device is created (public so that other stores,
    /// such as fsoc-array's chip files, create devices identical to `create`'s).
    pub fn mark_factory_bad_blocks(&mut self) -> Result<(), NandError> {
        let block_count = self.config.geometry.block_count;
        for chip in 0..self.config.chip_count {
            match self.config.faults.factory_bad_blocks {
                FactoryBadBlocks::None => {}
                FactoryBadBlocks::CountPerChip(count) => {
                    let target = count.min(block_count - 1);
                    let mut marked = 0;
                    // Bounded: each round marks a new block with probability >= 1/block_count,
                    // and the cap below stops a pathological stream.
                    let mut attempts = 0u64;
                    while marked < target && attempts < 64 * u64::from(block_count) {
                        attempts += 1;
                        let block =
                            BlockAddress::new(chip, 1 + u32_from_u64(self.rng.below(u64::from(block_count - 1))));
                        let mut meta = self.store.block_meta(block)?;
                        if !meta.bad_mark.is_bad() {
                            meta.bad_mark = BadMark::Factory;
                            self.store.set_block_meta(block, &meta)?;
                            marked += 1;
                        }
                    }
                }
                FactoryBadBlocks::PartsPerMillion(ppm) => {
                    for block_index in 1..block_count {
                        if self.rng.chance_ppm(ppm) {
                            let block = BlockAddress::new(chip, block_index);
                            let mut meta = self.store.block_meta(block)?;
                            meta.bad_mark = BadMark::Factory;
                            self.store.set_block_meta(block, &meta)?;
                        }
                    }
                }
            }
        }
        Ok(())
    }

    /// Consumes the simulator, returning its store (e.g. to close an image file).
    pub fn into_store(self) -> S {
        self.store
    }

    /// Replaces the fault configuration. A scheduled power cut in the new config counts from
    /// now; factory bad blocks are only applied at creation.
    pub fn set_fault_config(&mut self, faults: FaultConfig) {
        match faults.power_cut_after_operations {
            Some(after_operations) => self.fault_state.schedule_power_cut(after_operations),
            None => self.fault_state.cancel_power_cut(),
        }
        self.config.faults = faults;
    }

    /// State-changing operations (programs and erases, including rejected-by-fault ones)
    /// started so far.
    pub fn operations_count(&self) -> u64 {
        self.fault_state.operations_count()
    }

    pub fn power_is_lost(&self) -> bool {
        self.fault_state.power_is_lost()
    }

    /// Cuts power after `after_operations` more state-changing operations: those complete, the
    /// next one is interrupted.
    pub fn schedule_power_cut(&mut self, after_operations: u64) {
        self.fault_state.schedule_power_cut(after_operations);
    }

    /// Where the scheduled failure struck, once it has.
    pub fn scheduled_failure_hit(&self) -> Option<FailureHit> {
        self.scheduled_failure_hit
    }

    /// Makes state-changing operation `after_operations + 1` from now (a program or an erase)
    /// report status fail, once: a block going bad under it (`NandError::OperationFailed`; a
    /// program leaves the page torn, an erase leaves the block unerased).
    pub fn schedule_operation_failure(&mut self, after_operations: u64) {
        self.fault_state.schedule_failure(after_operations);
    }

    /// Makes `chip` die once `after_operations` more programs and erases have started (any
    /// chip's): the next one on it, and every read, program and erase after, fail with
    /// `ChipFailed`.
    pub fn schedule_chip_failure(&mut self, after_operations: u64, chip: ChipIndex) -> Result<(), NandError> {
        self.check_chip(chip)?;
        self.fault_state.schedule_chip_failure(after_operations, chip.0);
        Ok(())
    }

    /// Cuts power now, between operations: nothing is torn.
    pub fn cut_power_now(&mut self) {
        self.fault_state.cut_power_now();
    }

    /// Powers the array back on. Virtual clocks and counters carry on; page and block state is
    /// whatever the cut left.
    pub fn restore_power(&mut self) {
        self.fault_state.restore_power();
    }

    /// Makes every later operation on `chip` fail with `ChipFailed`.
    pub fn fail_chip(&mut self, chip: ChipIndex) -> Result<(), NandError> {
        self.check_chip(chip)?;
        self.fault_state.fail_chip(chip.0);
        Ok(())
    }

    /// Puts a new chip in `chip`'s place: it works again (if it had failed), and every block is
    /// erased, unworn and good, as a chip from the factory without bad blocks.
    pub fn replace_chip(&mut self, chip: ChipIndex) -> Result<(), NandError> {
        self.check_chip(chip)?;
        self.fault_state.replace_chip(chip.0);
        for block in 0..self.config.geometry.block_count {
            let block = BlockAddress::new(chip.0, block);
            self.store.reset_block_pages(block)?;
            self.store.set_block_meta(block, &BlockMeta::default())?;
            self.aging_state_mut(block)?.note_erase();
        }
        Ok(())
    }

    /// Adds `count` persistent bit flips at random distinct positions of the page (data and
    /// spare). They stay until the block is erased.
    pub fn inject_bit_flips(&mut self, page: PageAddress, count: u32) -> Result<(), NandError> {
        self.check_page(page)?;
        let bit_count = u64::from(ecc::page_bit_count(&self.config.geometry));
        let mut meta = self.store.page_meta(page)?;
        for _ in 0..count {
            // Draw until the position is new, bounded since a page has far more bits than
            // flips can be recorded.
            for _attempt in 0..64 {
                let position = u32_from_u64(self.rng.below(bit_count));
                if !meta.flips().contains(&position) {
                    meta.add_flip(position);
                    break;
                }
            }
        }
        self.store.set_page_meta(page, &meta)
    }

    /// Adds persistent bit flips at the given bit positions (data bits first, then spare; see
    /// `ecc`). Positions past the page are rejected.
    pub fn inject_bit_flips_at(&mut self, page: PageAddress, bit_positions: &[u32]) -> Result<(), NandError> {
        self.check_page(page)?;
        let bit_count = ecc::page_bit_count(&self.config.geometry);
        let mut meta = self.store.page_meta(page)?;
        for &position in bit_positions {
            if position >= bit_count {
                return Err(NandError::OutOfRange {
                    what: "bit position",
                    value: u64::from(position),
                    limit: u64::from(bit_count),
                });
            }
            meta.add_flip(position);
        }
        self.store.set_page_meta(page, &meta)
    }

    /// Sets a block's erase count, to age a device in tests without erasing it thousands of
    /// times.
    pub fn set_erase_count(&mut self, block: BlockAddress, erase_count: u32) -> Result<(), NandError> {
        self.check_block(block)?;
        let mut meta = self.store.block_meta(block)?;
        meta.erase_count = erase_count;
        self.store.set_block_meta(block, &meta)
    }

    /// Physical state of a page (for tests and diagnostics; a real controller cannot see it).
    pub fn page_state(&self, page: PageAddress) -> Result<PageState, NandError> {
        self.check_page(page)?;
        Ok(self.store.page_meta(page)?.state)
    }

    /// Persistent metadata of a block (for tests, diagnostics and wear reports).
    pub fn block_meta(&self, block: BlockAddress) -> Result<BlockMeta, NandError> {
        self.check_block(block)?;
        self.store.block_meta(block)
    }

    // ---- retention and read disturb ---------------------------------------------------------

    /// Ages the device by `ns` of shelf or idle time: adds to the retention clock only.
    pub fn advance_retention_time(&mut self, ns: Nanos) {
        self.retention_offset_ns = self.retention_offset_ns.saturating_add(ns);
    }

    pub fn retention_offset_ns(&self) -> Nanos {
        self.retention_offset_ns
    }

    /// Replaces the retention and read-disturb model (the ages and read counts carry on).
    pub fn set_aging_model(&mut self, aging: AgingModel) {
        self.config.aging = aging;
    }

    /// The retention clock for an operation issued at `issue_ns`.
    fn retention_now(&self, issue_ns: Nanos) -> Nanos {
        issue_ns.saturating_add(self.retention_offset_ns)
    }

    fn aging_slot(&self, block: BlockAddress) -> usize {
        // Below chip_count x block_count (the address was checked), which fits a usize (checked
        // at construction).
        convert::usize_from_u64(
            u64::from(block.chip.0) * u64::from(self.config.geometry.block_count) + u64::from(block.block.0),
        )
    }

    fn aging_state(&self, block: BlockAddress) -> Result<BlockAgingState, NandError> {
        let limit = self.block_aging.len() as u64;
        let slot = self.aging_slot(block);
        self.block_aging.get(slot).copied().ok_or(NandError::OutOfRange { what: "block", value: slot as u64, limit })
    }

    fn aging_state_mut(&mut self, block: BlockAddress) -> Result<&mut BlockAgingState, NandError> {
        let limit = self.block_aging.len() as u64;
        let slot = self.aging_slot(block);
        self.block_aging.get_mut(slot).ok_or(NandError::OutOfRange { what: "block", value: slot as u64, limit })
    }

    /// The RBER a read issued at `issue_ns` samples for a programmed page of `block` with
    /// `erase_count` erases: wear plus, when the aging model is on, retention and disturb.
    fn read_rber(
        &self,
        block: BlockAddress,
        erase_count: u32,
        issue_ns: Nanos,
    ) -> Result<(f64, BlockAging), NandError> {
        let endurance = self.config.endurance_cycles;
        let state = self.aging_state(block)?;
        let retention_age_ns = state.retention_age_ns(self.retention_now(issue_ns));
        let wear = self.config.bit_errors.rber(erase_count, endurance);
        let added = self.config.aging.added_rber(erase_count, endurance, retention_age_ns, state.reads_since_erase);
        // Adding nothing leaves the wear RBER exactly as it was (no rounding of a sum).
        let rber = if added > 0.0 { wear + added } else { wear };
        Ok((rber, BlockAging { retention_age_ns, reads_since_erase: state.reads_since_erase, rber }))
    }

    /// What a read of `block` issued at `issue_ns` would see (for tests and diagnostics). A
    /// block without programmed pages has retention age 0.
    pub fn block_aging(&self, block: BlockAddress, issue_ns: Nanos) -> Result<BlockAging, NandError> {
        self.check_block(block)?;
        let meta = self.store.block_meta(block)?;
        let (_, mut aging) = self.read_rber(block, meta.erase_count, issue_ns)?;
        if meta.last_programmed_page_index.is_none() {
            aging.retention_age_ns = 0;
        }
        Ok(aging)
    }

    // ---- validation -------------------------------------------------------------------------

    fn check_chip(&self, chip: ChipIndex) -> Result<(), NandError> {
        if chip.0 >= self.config.chip_count {
            return Err(NandError::OutOfRange {
                what: "chip",
                value: u64::from(chip.0),
                limit: u64::from(self.config.chip_count),
            });
        }
        Ok(())
    }

    fn check_block(&self, block: BlockAddress) -> Result<(), NandError> {
        self.check_chip(block.chip)?;
        let block_count = self.config.geometry.block_count;
        if block.block.0 >= block_count {
            return Err(NandError::OutOfRange {
                what: "block",
                value: u64::from(block.block.0),
                limit: u64::from(block_count),
            });
        }
        Ok(())
    }

    fn check_page(&self, page: PageAddress) -> Result<(), NandError> {
        self.check_block(page.block_address())?;
        let pages_per_block = self.config.geometry.pages_per_block;
        if page.page_index >= pages_per_block {
            return Err(NandError::OutOfRange {
                what: "page",
                value: u64::from(page.page_index),
                limit: u64::from(pages_per_block),
            });
        }
        Ok(())
    }

    fn check_buffers(&self, data_bytes: usize, spare_bytes: usize) -> Result<(), NandError> {
        let geometry = self.config.geometry;
        if data_bytes != geometry.page_data_bytes as usize {
            return Err(NandError::BufferSize {
                what: "page data",
                expected_bytes: geometry.page_data_bytes as usize,
                actual_bytes: data_bytes,
            });
        }
        if spare_bytes != geometry.spare_bytes as usize {
            return Err(NandError::BufferSize {
                what: "spare",
                expected_bytes: geometry.spare_bytes as usize,
                actual_bytes: spare_bytes,
            });
        }
        Ok(())
    }

    fn check_power_and_chip(&self, chip: ChipIndex) -> Result<(), NandError> {
        if self.fault_state.chip_failed(chip.0) {
            return Err(NandError::ChipFailed { chip });
        }
        Ok(())
    }

    // ---- time and accounting ----------------------------------------------------------------

    /// Occupies the chip for `busy_ns` starting no earlier than `issue_ns`; returns the
    /// completion time and charges the counters. The caller has checked the address; one out of
    /// range is refused before anything changes.
    fn run_on_chip(&mut self, issue_ns: Nanos, kind: OperationKind, block: BlockAddress) -> Result<Nanos, NandError> {
        let chip_slot = block.chip.0 as usize;
        let (latency_ns, transfer_bytes) = match kind {
            OperationKind::Read => (self.config.timing.read_latency_ns, self.config.page_transfer_bytes()),
            OperationKind::Program => (self.config.timing.program_latency_ns, self.config.page_transfer_bytes()),
            OperationKind::Erase => (self.config.timing.erase_latency_ns, 0),
        };
        let transfer_ns = transfer_bytes * self.config.timing.bus_ns_per_byte;
        let busy_ns = latency_ns + transfer_ns;
        let chip_count = self.busy_until_ns.len() as u64;
        let busy_until = self.busy_until_ns.get_mut(chip_slot).ok_or(NandError::OutOfRange {
            what: "chip",
            value: u64::from(block.chip.0),
            limit: chip_count,
        })?;
        let energy_nj =
            self.config.energy.array_energy_nj(kind, latency_ns) + self.config.energy.transfer_energy_nj(transfer_ns);
        self.counters.record(OperationRecord { kind, block, transfer_bytes, busy_ns, energy_nj })?;
        let start_ns = issue_ns.max(*busy_until);
        let done_ns = start_ns + busy_ns;
        *busy_until = done_ns;
        debug_assert!(done_ns >= issue_ns, "operation completes before it is issued");
        Ok(done_ns)
    }

    // ---- reads ------------------------------------------------------------------------------

    /// Decides what a read of `page` finds (state, error positions, the one-shot drift of an
    /// unstable tear), without its contents: the part of a read that needs the lock.
    fn plan_read(&mut self, issue_ns: Nanos, page: PageAddress) -> Result<ReadPlan, NandError> {
        let geometry = self.config.geometry;
        let correctable = self.config.ecc_correctable_bits_per_512;
        let meta = self.store.page_meta(page)?;
        let erase_count = self.store.block_meta(page.block_address())?.erase_count;
        let mut positions = Vec::new();
        positions.extend_from_slice(meta.flips());
        match meta.state {
            PageState::Programmed => {
                let (rber, _) = self.read_rber(page.block_address(), erase_count, issue_ns)?;
                self.config.bit_errors.sample_errors(&mut self.rng, &geometry, rber, correctable, &mut positions);
                positions.sort_unstable();
                positions.dedup();
            }
            PageState::TornUnstable => {
                // The weakly programmed cells still sense on the right side of the threshold
                // this once; they drift, so later reads see the tear.
                let torn = PageMeta { state: PageState::Torn, ..meta };
                self.store.set_page_meta(page, &torn)?;
            }
            PageState::Erased | PageState::Torn | PageState::Garbage => {}
        }
        Ok(ReadPlan { state: meta.state, positions, erase_count, excess_damage: meta.excess_damage })
    }

    /// The checks, the plan and the chip time of a read, all under the lock; the contents are
    /// fetched after it (`SimFlash::read_page`).
    fn begin_read(
        &mut self,
        issue_ns: Nanos,
        page: PageAddress,
        data_bytes: usize,
        spare_bytes: usize,
    ) -> Result<(ReadPlan, Nanos), NandError> {
        if self.fault_state.power_is_lost() {
            return Err(NandError::PowerLost);
        }
        self.check_page(page)?;
        self.check_buffers(data_bytes, spare_bytes)?;
        self.check_power_and_chip(page.chip)?;
        let plan = self.plan_read(issue_ns, page)?;
        let done_ns = self.run_on_chip(issue_ns, OperationKind::Read, page.block_address())?;
        // After the plan: a read disturbs the block's other pages, not its own sample.
        self.aging_state_mut(page.block_address())?.note_read();
        Ok((plan, done_ns))
    }

    // ---- programs ---------------------------------------------------------------------------

    fn program_page_inner(
        &mut self,
        issue_ns: Nanos,
        page: PageAddress,
        data: &[u8],
        spare: &[u8],
    ) -> Result<Completed<()>, NandError> {
        let block = page.block_address();
        let mut block_meta = self.store.block_meta(block)?;
        if block_meta.bad_mark.is_bad() {
            return Err(NandError::BadBlock { block });
        }
        if block_meta.erase_incomplete {
            return Err(NandError::NotErased { page });
        }
        let meta = self.store.page_meta(page)?;
        if meta.state != PageState::Erased {
            return Err(NandError::NotErased { page });
        }
        if let Some(last_programmed_index) = block_meta.last_programmed_page_index {
            if page.page_index <= last_programmed_index {
                return Err(NandError::OutOfOrder { page, last_programmed_index });
            }
        }

        // From here on the chip starts working: the operation counts toward a power cut.
        if self.fault_state.begin_operation() == OperationFate::Interrupted {
            self.tear_program(page, data, spare, &mut block_meta)?;
            return Err(NandError::PowerLost);
        }
        let done_ns = self.run_on_chip(issue_ns, OperationKind::Program, block)?;
        let first_in_block = block_meta.last_programmed_page_index.is_none();
        block_meta.last_programmed_page_index = Some(page.page_index);
        self.store.write_contents(page, data, spare)?;
        let scheduled = self.fault_state.take_scheduled_failure();
        if scheduled {
            self.scheduled_failure_hit = Some(FailureHit { kind: OperationKind::Program, block, page: Some(page) });
        }
        if scheduled || self.rng.chance_ppm(self.config.faults.program_failure_ppm) {
            // Status fail: the cells are in an unknown state, modelled as a torn program. The
            // caller should retire the block.
            let failed = PageMeta { state: PageState::Torn, ..PageMeta::default() };
            self.store.set_page_meta(page, &failed)?;
            self.store.set_block_meta(block, &block_meta)?;
            return Err(NandError::OperationFailed { kind: OperationKind::Program, block });
        }
        // Injected flips on an erased page were stuck-at-0 cells; they persist after programming.
        let programmed = PageMeta { state: PageState::Programmed, ..meta };
        self.store.set_page_meta(page, &programmed)?;
        self.store.set_block_meta(block, &block_meta)?;
        let programmed_at = self.retention_now(done_ns);
        self.aging_state_mut(block)?.note_program(programmed_at, first_in_block);
        Ok(Completed { value: (), done_ns })
    }

    /// Leaves the page torn by a power cut, and applies the paired-page hazard if enabled.
    fn tear_program(
        &mut self,
        page: PageAddress,
        data: &[u8],
        spare: &[u8],
        block_meta: &mut BlockMeta,
    ) -> Result<(), NandError> {
        let block = page.block_address();
        self.store.write_contents(page, data, spare)?;
        let state = if self.config.faults.unstable_bits_hazard { PageState::TornUnstable } else { PageState::Torn };
        let old_meta = self.store.page_meta(page)?;
        self.store.set_page_meta(page, &PageMeta { state, ..old_meta })?;
        block_meta.last_programmed_page_index = Some(page.page_index);
        self.store.set_block_meta(block, block_meta)?;

        let distance = self.config.paired_page_distance;
        if self.config.faults.paired_page_hazard && distance > 0 && page.page_index >= distance {
            let paired = PageAddress { page_index: page.page_index - distance, ..page };
            let mut paired_meta = self.store.page_meta(paired)?;
            if paired_meta.state == PageState::Programmed {
                // The shared cells lose their lower-page level: far more errors than ECC can
                // fix. Record t + 1 flips in the first sector so the raw data is visibly wrong.
                let sector_bits = ecc::SECTOR_DATA_BYTES * ecc::BITS_PER_BYTE;
                for _ in 0..=self.config.ecc_correctable_bits_per_512 {
                    paired_meta.add_flip(u32_from_u64(self.rng.below(u64::from(sector_bits))));
                }
                paired_meta.excess_damage = true;
                self.store.set_page_meta(paired, &paired_meta)?;
            }
        }
        Ok(())
    }

    // ---- erases -----------------------------------------------------------------------------

    fn erase_block_inner(&mut self, issue_ns: Nanos, block: BlockAddress) -> Result<Completed<()>, NandError> {
        let mut block_meta = self.store.block_meta(block)?;
        if block_meta.bad_mark.is_bad() {
            return Err(NandError::BadBlock { block });
        }
        if self.fault_state.begin_operation() == OperationFate::Interrupted {
            self.interrupt_erase(block, &mut block_meta)?;
            return Err(NandError::PowerLost);
        }
        let done_ns = self.run_on_chip(issue_ns, OperationKind::Erase, block)?;
        let prior_erase_count = block_meta.erase_count;
        block_meta.erase_count = prior_erase_count.saturating_add(1);
        let wear_out_ppm = self.config.faults.wear_out_ppm(prior_erase_count, self.config.endurance_cycles);
        let failure = if self.fault_state.take_scheduled_failure() {
            self.scheduled_failure_hit = Some(FailureHit { kind: OperationKind::Erase, block, page: None });
            Some(NandError::OperationFailed { kind: OperationKind::Erase, block })
        } else if self.rng.chance_ppm(wear_out_ppm) {
            Some(NandError::WornOut { block, erase_count: block_meta.erase_count })
        } else if self.rng.chance_ppm(self.config.faults.erase_failure_ppm) {
            Some(NandError::OperationFailed { kind: OperationKind::Erase, block })
        } else {
            None
        };
        if let Some(error) = failure {
            // A failed erase leaves the block neither erased nor usable until a good erase.
            block_meta.erase_incomplete = true;
            self.store.set_block_meta(block, &block_meta)?;
            return Err(error);
        }
        self.store.reset_block_pages(block)?;
        block_meta.last_programmed_page_index = None;
        block_meta.erase_incomplete = false;
        self.store.set_block_meta(block, &block_meta)?;
        self.aging_state_mut(block)?.note_erase();
        Ok(Completed { value: (), done_ns })
    }

    /// Leaves the block partially erased by a power cut: each page that held data is either
    /// erased or garbage (some bits back at 1), and the block refuses programs until a full
    /// erase.
    fn interrupt_erase(&mut self, block: BlockAddress, block_meta: &mut BlockMeta) -> Result<(), NandError> {
        block_meta.erase_count = block_meta.erase_count.saturating_add(1);
        block_meta.erase_incomplete = true;
        block_meta.last_programmed_page_index = None;
        let erased_ppm = 1 + u32_from_u64(self.rng.below(999_999));
        for page_index in 0..self.config.geometry.pages_per_block {
            let page = PageAddress { chip: block.chip, block: block.block, page_index };
            let meta = self.store.page_meta(page)?;
            if meta.state == PageState::Erased && meta.flip_count == 0 && !meta.excess_damage {
                continue;
            }
            let next = if meta.state != PageState::Erased && !self.rng.chance_ppm(erased_ppm) {
                // Old contents stay stored; reads overlay the erase-progress mask.
                PageMeta { state: PageState::Garbage, ..PageMeta::default() }
            } else {
                PageMeta::default()
            };
            self.store.set_page_meta(page, &next)?;
        }
        // No page keeps programmed contents: the block's age and disturb start over.
        self.aging_state_mut(block)?.note_erase();
        self.store.set_block_meta(block, block_meta)
    }
}

/// ORs the bits of `mask` (data bytes then spare bytes) into data and spare. With
/// `invert_mask`, ORs the complement instead (bits a torn program never reached stay 1).
/// Returns whether any byte changed.
/// What a read found in the model, decided under the lock; `finish_read` applies it to the
/// page's contents once they are fetched.
struct ReadPlan {
    state: PageState,
    /// Bit errors: persistent flips plus, for a programmed page, this read's sampled ones.
    positions: Vec<u32>,
    erase_count: u32,
    excess_damage: bool,
}

/// Applies a read plan to the fetched contents (or, for a page without contents, to the
/// caller's buffers) and returns what the ECC engine reports.
/// Page `position`'s data buffer and spare in a `read_pages` batch (lengths checked before).
fn batch_buffers<'a>(
    data: &'a mut [&mut [u8]],
    spares: &'a mut [u8],
    position: usize,
    spare_bytes: usize,
) -> Result<(&'a mut [u8], &'a mut [u8]), NandError> {
    let out_of_batch =
        NandError::OutOfRange { what: "batch position", value: position as u64, limit: data.len() as u64 };
    let start = position.checked_mul(spare_bytes).ok_or(out_of_batch.clone())?;
    let spare = spares.get_mut(start..start + spare_bytes).ok_or(out_of_batch.clone())?;
    let data = data.get_mut(position).ok_or(out_of_batch)?;
    Ok((data, spare))
}

fn finish_read(
    config: &SimConfig,
    page: PageAddress,
    plan: &ReadPlan,
    data: &mut [u8],
    spare: &mut [u8],
) -> ReadStatus {
    let geometry = config.geometry;
    let correctable = config.ecc_correctable_bits_per_512;
    let positions = &plan.positions;
    let corrupt = |data: &mut [u8], spare: &mut [u8]| {
        ecc::apply_bit_flips(positions, data, spare);
        ReadStatus::Uncorrectable
    };
    match plan.state {
        PageState::Erased => {
            // Controllers check erased pages for a few stuck-at-0 bits and report the page
            // as erased (returning all 0xFF) when each sector has at most t of them.
            data.fill(0xFF);
            spare.fill(0xFF);
            match ecc::classify(&geometry, correctable, positions) {
                _ if plan.excess_damage => corrupt(data, spare),
                ReadStatus::Uncorrectable => corrupt(data, spare),
                _ => ReadStatus::Erased,
            }
        }
        PageState::Programmed => match ecc::classify(&geometry, correctable, positions) {
            _ if plan.excess_damage => corrupt(data, spare),
            ReadStatus::Uncorrectable => corrupt(data, spare),
            status => status,
        },
        // Read once as programmed; `plan_read` recorded the drift.
        PageState::TornUnstable => ReadStatus::Clean,
        PageState::Torn => {
            let mut applied = vec![0u8; data.len() + spare.len()];
            progress_mask(config, page, plan.erase_count, SALT_TEAR_LEVEL, SALT_TEAR_MASK, &mut applied);
            // Bits that should have gone to 0 but were not reached stay 1.
            let changed = overlay_ones(data, spare, &applied, true);
            ecc::apply_bit_flips(positions, data, spare);
            if !changed && positions.is_empty() && !plan.excess_damage {
                ReadStatus::Clean
            } else if is_all_ones(data) && is_all_ones(spare) {
                ReadStatus::Erased
            } else {
                ReadStatus::Uncorrectable
            }
        }
        PageState::Garbage => {
            let mut erased = vec![0u8; data.len() + spare.len()];
            progress_mask(config, page, plan.erase_count, SALT_ERASE_LEVEL, SALT_ERASE_MASK, &mut erased);
            overlay_ones(data, spare, &erased, false);
            ecc::apply_bit_flips(positions, data, spare);
            if is_all_ones(data) && is_all_ones(spare) {
                ReadStatus::Erased
            } else {
                ReadStatus::Uncorrectable
            }
        }
    }
}

fn page_linear_index(config: &SimConfig, page: PageAddress) -> u64 {
    let geometry = &config.geometry;
    (u64::from(page.chip.0) * u64::from(geometry.block_count) + u64::from(page.block.0))
        * u64::from(geometry.pages_per_block)
        + u64::from(page.page_index)
}

/// Fills `mask` (data bytes then spare bytes) with a per-page pattern whose bits are set
/// with a page-specific probability in `1/256..=255/256`. Recomputable from the seed, the
/// address and the erase count, so torn and half-erased pages read the same every time
/// without storing the mask.
fn progress_mask(
    config: &SimConfig,
    page: PageAddress,
    erase_count: u32,
    level_salt: u64,
    mask_salt: u64,
    mask: &mut [u8],
) {
    let page_word = page_linear_index(config, page);
    // In 1..=255, so the conversion is exact.
    let level =
        u8::try_from(hash64(config.seed, page_word, u64::from(erase_count), level_salt) % 255 + 1).unwrap_or(u8::MAX);
    let mask_seed = hash64(config.seed, page_word, u64::from(erase_count), mask_salt);
    for (byte_index, byte) in mask.iter_mut().enumerate() {
        let random = hash64(mask_seed, byte_index as u64, 0, 0).to_le_bytes();
        *byte = random
            .iter()
            .enumerate()
            .fold(0u8, |bits, (bit_index, &draw)| if draw < level { bits | (1 << bit_index) } else { bits });
    }
}

fn overlay_ones(data: &mut [u8], spare: &mut [u8], mask: &[u8], invert_mask: bool) -> bool {
    let mut changed = false;
    for (byte, &mask_byte) in data.iter_mut().chain(spare.iter_mut()).zip(mask) {
        let ones = if invert_mask { !mask_byte } else { mask_byte };
        let next = *byte | ones;
        changed |= next != *byte;
        *byte = next;
    }
    changed
}

fn is_all_ones(bytes: &[u8]) -> bool {
    bytes.iter().all(|&byte| byte == 0xFF)
}

/// The `Flash` operations on the state; `SimFlash` locks and calls these.
impl<S: PageStore> SimState<S> {
    fn program_page(
        &mut self,
        issue_ns: Nanos,
        page: PageAddress,
        data: &[u8],
        spare: &[u8],
    ) -> Result<Completed<()>, NandError> {
        if self.fault_state.power_is_lost() {
            return Err(NandError::PowerLost);
        }
        self.check_page(page)?;
        self.check_buffers(data.len(), spare.len())?;
        self.fault_state.fire_chip_failure();
        self.check_power_and_chip(page.chip)?;
        self.program_page_inner(issue_ns, page, data, spare)
    }

    fn erase_block(&mut self, issue_ns: Nanos, block: BlockAddress) -> Result<Completed<()>, NandError> {
        if self.fault_state.power_is_lost() {
            return Err(NandError::PowerLost);
        }
        self.check_block(block)?;
        self.fault_state.fire_chip_failure();
        self.check_power_and_chip(block.chip)?;
        self.erase_block_inner(issue_ns, block)
    }

    fn is_bad_block(&self, block: BlockAddress) -> Result<bool, NandError> {
        self.check_block(block)?;
        Ok(self.store.block_meta(block)?.bad_mark.is_bad())
    }

    /// Free and not counted as a state-changing operation: the mark lives in the controller's
    /// bad-block table, which the store persists.
    fn mark_bad_block(&mut self, block: BlockAddress) -> Result<(), NandError> {
        if self.fault_state.power_is_lost() {
            return Err(NandError::PowerLost);
        }
        self.check_block(block)?;
        let mut meta = self.store.block_meta(block)?;
        if !meta.bad_mark.is_bad() {
            meta.bad_mark = BadMark::Grown;
            self.store.set_block_meta(block, &meta)?;
        }
        Ok(())
    }

    fn busy_until_ns(&self, chip: ChipIndex) -> Nanos {
        self.busy_until_ns.get(chip.0 as usize).copied().unwrap_or(0)
    }

    fn counters(&self) -> &FlashCounters {
        &self.counters
    }

    fn reset_counters(&mut self) {
        self.counters.reset();
    }

    fn erase_count(&self, block: BlockAddress) -> Result<u32, NandError> {
        self.check_block(block)?;
        Ok(self.store.block_meta(block)?.erase_count)
    }

    fn flush(&mut self) -> Result<(), NandError> {
        self.store.flush()
    }

    fn begin_flush(&mut self) -> Result<fsoc_flash::FlushWait, NandError> {
        self.store.begin_flush()
    }

    /// A barrier after a power cut cannot complete: nothing issued since reaches the store, so
    /// nothing that waits on it (an NVRAM record that must follow the flash) may go on.
    fn write_barrier(&mut self) -> Result<(), NandError> {
        if self.fault_state.power_is_lost() {
            return Err(NandError::PowerLost);
        }
        self.store.write_barrier()
    }
}

/// A simulated array of NAND chips over a `PageStore` backend.
///
/// Its state sits behind one lock, so reads (`&self`) may come from several threads: each
/// read runs whole under the lock, in the order the threads take it. With one thread the
/// simulator is deterministic as before; with several, the operation order (and so the
/// clocks and sampled bit errors) follows the threads' timing.
pub struct SimFlash<S: PageStore = RamStore> {
    /// A copy of the state's configuration, so `config()` and the geometry need no lock
    /// (kept equal to the state's by `set_fault_config` and `set_aging_model`, the only
    /// changes).
    config: SimConfig,
    state: Mutex<SimState<S>>,
}

impl<S: PageStore + Clone> Clone for SimFlash<S> {
    fn clone(&self) -> Self {
        SimFlash { config: self.config.clone(), state: Mutex::new(self.state.lock().clone()) }
    }
}

impl<S: PageStore> core::fmt::Debug for SimFlash<S> {
    fn fmt(&self, formatter: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        formatter.debug_struct("SimFlash").field("config", &self.config).finish_non_exhaustive()
    }
}

impl SimFlash<RamStore> {
    /// A RAM-backed array, fresh from the factory (factory bad blocks per `config.faults`).
    pub fn create(config: SimConfig) -> Result<Self, NandError> {
        config.validate()?;
        let store = RamStore::new(config.geometry, config.chip_count);
        let mut flash = SimFlash::with_store(config, store)?;
        flash.mark_factory_bad_blocks()?;
        Ok(flash)
    }
}

impl<S: PageStore> SimFlash<S> {
    /// Wraps an existing store (fresh or reopened). Factory bad blocks are not added: a
    /// reopened device already has its marks. The store's shape must match the config.
    pub fn with_store(config: SimConfig, store: S) -> Result<Self, NandError> {
        let state = SimState::with_store(config.clone(), store)?;
        Ok(SimFlash { config, state: Mutex::new(state) })
    }

    /// Marks factory bad blocks as `config.faults.factory_bad_blocks` says (block 0 of each
    /// chip stays good). Called once when a device is created (public so that other stores,
    /// such as fsoc-array's chip files, create devices identical to `create`'s).
    pub fn mark_factory_bad_blocks(&mut self) -> Result<(), NandError> {
        self.state.get_mut().mark_factory_bad_blocks()
    }

    pub fn config(&self) -> &SimConfig {
        &self.config
    }

    /// Runs `inspect` on the backing store (under the lock: keep it short).
    pub fn inspect_store<T>(&self, inspect: impl FnOnce(&S) -> T) -> T {
        inspect(&self.state.lock().store)
    }

    /// The backing store, without locking (`&mut self`: nobody else is using the device).
    pub fn store_mut(&mut self) -> &mut S {
        &mut self.state.get_mut().store
    }

    /// Consumes the simulator, returning its store (e.g. to close an image file).
    pub fn into_store(self) -> S {
        self.state.into_inner().into_store()
    }

    /// Replaces the fault configuration. A scheduled power cut in the new config counts from
    /// now; factory bad blocks are only applied at creation.
    pub fn set_fault_config(&mut self, faults: FaultConfig) {
        self.config.faults = faults.clone();
        self.state.get_mut().set_fault_config(faults);
    }

    /// State-changing operations (programs and erases, including rejected-by-fault ones)
    /// started so far.
    pub fn operations_count(&self) -> u64 {
        self.state.lock().operations_count()
    }

    pub fn power_is_lost(&self) -> bool {
        self.state.lock().power_is_lost()
    }

    /// Cuts power after `after_operations` more state-changing operations: those complete, the
    /// next one is interrupted.
    pub fn schedule_power_cut(&mut self, after_operations: u64) {
        self.state.get_mut().schedule_power_cut(after_operations);
    }

    /// Where the scheduled failure struck, once it has.
    pub fn scheduled_failure_hit(&self) -> Option<FailureHit> {
        self.state.lock().scheduled_failure_hit()
    }

    /// Makes state-changing operation `after_operations + 1` from now fail with status fail,
    /// once (see `SimState::schedule_operation_failure`): grown bad-block injection.
    pub fn schedule_operation_failure(&mut self, after_operations: u64) {
        self.state.get_mut().schedule_operation_failure(after_operations);
    }

    /// Forgets a scheduled power cut that has not struck.
    pub fn cancel_power_cut(&mut self) {
        self.state.get_mut().fault_state.cancel_power_cut();
    }

    /// Whether `chip` has failed (`fail_chip`, or a scheduled failure that fired).
    pub fn chip_failed(&self, chip: ChipIndex) -> bool {
        self.state.lock().fault_state.chip_failed(chip.0)
    }

    /// Makes `chip` die after `after_operations` more programs and erases (see
    /// `SimState::schedule_chip_failure`).
    pub fn schedule_chip_failure(&mut self, after_operations: u64, chip: ChipIndex) -> Result<(), NandError> {
        self.state.get_mut().schedule_chip_failure(after_operations, chip)
    }

    /// Cuts power now, between operations: nothing is torn.
    pub fn cut_power_now(&mut self) {
        self.state.get_mut().cut_power_now();
    }

    /// Powers the array back on. Virtual clocks and counters carry on; page and block state is
    /// whatever the cut left.
    pub fn restore_power(&mut self) {
        self.state.get_mut().restore_power();
    }

    /// Makes every later operation on `chip` fail with `ChipFailed`.
    pub fn fail_chip(&mut self, chip: ChipIndex) -> Result<(), NandError> {
        self.state.get_mut().fail_chip(chip)
    }

    /// Puts a new, blank chip in `chip`'s place (`fail_chip` undone, every block erased).
    pub fn replace_chip(&mut self, chip: ChipIndex) -> Result<(), NandError> {
        self.state.get_mut().replace_chip(chip)
    }

    /// Adds `count` persistent bit flips at random distinct positions of the page (data and
    /// spare). They stay until the block is erased.
    pub fn inject_bit_flips(&mut self, page: PageAddress, count: u32) -> Result<(), NandError> {
        self.state.get_mut().inject_bit_flips(page, count)
    }

    /// Adds persistent bit flips at the given bit positions (data bits first, then spare; see
    /// `ecc`). Positions past the page are rejected.
    pub fn inject_bit_flips_at(&mut self, page: PageAddress, bit_positions: &[u32]) -> Result<(), NandError> {
        self.state.get_mut().inject_bit_flips_at(page, bit_positions)
    }

    /// Sets a block's erase count, to age a device in tests without erasing it thousands of
    /// times.
    pub fn set_erase_count(&mut self, block: BlockAddress, erase_count: u32) -> Result<(), NandError> {
        self.state.get_mut().set_erase_count(block, erase_count)
    }

    /// Physical state of a page (for tests and diagnostics; a real controller cannot see it).
    pub fn page_state(&self, page: PageAddress) -> Result<PageState, NandError> {
        self.state.lock().page_state(page)
    }

    /// Persistent metadata of a block (for tests, diagnostics and wear reports).
    pub fn block_meta(&self, block: BlockAddress) -> Result<BlockMeta, NandError> {
        self.state.lock().block_meta(block)
    }

    /// Ages the device by `ns` as if it had lain unpowered (or idle) that long: every block's
    /// retention age grows by `ns`. Only the retention clock moves: chip clocks, counters and
    /// the seeded stream are untouched, so later operations keep their timing. Errors follow
    /// only with an enabled `SimConfig::aging` model (see `aging`).
    pub fn advance_retention_time(&mut self, ns: Nanos) {
        self.state.get_mut().advance_retention_time(ns);
    }

    /// Total time added by `advance_retention_time` since the simulator was created or opened
    /// (the retention clock restarts with every `SimFlash`: it is not kept in a store).
    pub fn retention_offset_ns(&self) -> Nanos {
        self.state.lock().retention_offset_ns()
    }

    /// Replaces the retention and read-disturb model, e.g. to turn it on for a device opened
    /// from an image (whose header holds no such setting). Ages and read counts carry on.
    pub fn set_aging_model(&mut self, aging: AgingModel) {
        self.config.aging = aging;
        self.state.get_mut().set_aging_model(aging);
    }

    /// What a read of `block` issued at `issue_ns` would see: retention age, reads since the
    /// erase and the RBER it would sample with (for tests, diagnostics and scrub experiments;
    /// a real controller cannot see it).
    pub fn block_aging(&self, block: BlockAddress, issue_ns: Nanos) -> Result<BlockAging, NandError> {
        self.state.lock().block_aging(block, issue_ns)
    }
}

impl<S: PageStore> Flash for SimFlash<S> {
    fn geometry(&self) -> Geometry {
        self.config.geometry
    }

    fn chip_count(&self) -> u32 {
        self.config.chip_count
    }

    fn timing(&self) -> Timing {
        self.config.timing
    }

    /// Reads of bad blocks are allowed: a controller may need to copy data out of a block that
    /// just grew bad. Only programs and erases are refused there.
    fn read_page(
        &self,
        issue_ns: Nanos,
        page: PageAddress,
        data: &mut [u8],
        spare: &mut [u8],
    ) -> Result<Completed<ReadStatus>, NandError> {
        let mut state = self.state.lock();
        let (plan, done_ns) = state.begin_read(issue_ns, page, data.len(), spare.len())?;
        if plan.state.has_contents() {
            match state.store.start_read_contents(page) {
                // A backend with its own I/O threads: collect the bytes without the lock, so
                // reads from several threads overlap.
                Some(fetch) => {
                    drop(state);
                    fetch(data, spare)?;
                }
                None => {
                    state.store.read_contents(page, data, spare)?;
                    drop(state);
                }
            }
        } else {
            drop(state);
        }
        let status = finish_read(&self.config, page, &plan, data, spare);
        Ok(Completed { value: status, done_ns })
    }

    /// One lock for the whole batch's checks and plans; the contents are then fetched together
    /// without it where the store can (neighbouring pages of an image in one system call, chip
    /// workers in parallel), else one by one under it.
    fn read_pages(
        &self,
        issue_ns: Nanos,
        pages: &[PageAddress],
        data: &mut [&mut [u8]],
        spares: &mut [u8],
        completions: &mut Vec<Completed<ReadStatus>>,
    ) -> Result<(), NandError> {
        let spare_bytes = self.config.geometry.spare_bytes as usize;
        fsoc_flash::check_batch(pages.len(), data.len(), spares.len(), spare_bytes)?;
        let mut state = self.state.lock();
        let mut plans = Vec::with_capacity(pages.len());
        for (page, buffer) in pages.iter().zip(data.iter()) {
            plans.push(state.begin_read(issue_ns, *page, buffer.len(), spare_bytes)?);
        }
        let with_contents: Vec<(usize, PageAddress)> = pages
            .iter()
            .zip(&plans)
            .enumerate()
            .filter(|(_, (_, (plan, _)))| plan.state.has_contents())
            .map(|(position, (page, _))| (position, *page))
            .collect();
        if let Some(fetch) = state.store.start_read_contents_many(&with_contents) {
            drop(state);
            fetch(data, spares)?;
        } else {
            // One by one: started under the lock, collected without it where the store can.
            let mut started = Vec::with_capacity(with_contents.len());
            for &(position, page) in &with_contents {
                match state.store.start_read_contents(page) {
                    Some(fetch) => started.push((position, fetch)),
                    None => {
                        let (data, spare) = batch_buffers(data, spares, position, spare_bytes)?;
                        state.store.read_contents(page, data, spare)?;
                    }
                }
            }
            drop(state);
            for (position, fetch) in started {
                let (data, spare) = batch_buffers(data, spares, position, spare_bytes)?;
                fetch(data, spare)?;
            }
        }
        for (position, (page, (plan, done_ns))) in pages.iter().zip(&plans).enumerate() {
            let (data, spare) = batch_buffers(data, spares, position, spare_bytes)?;
            let status = finish_read(&self.config, *page, plan, data, spare);
            completions.push(Completed { value: status, done_ns: *done_ns });
        }
        Ok(())
    }

    fn program_page(
        &mut self,
        issue_ns: Nanos,
        page: PageAddress,
        data: &[u8],
        spare: &[u8],
    ) -> Result<Completed<()>, NandError> {
        self.state.get_mut().program_page(issue_ns, page, data, spare)
    }

    fn erase_block(&mut self, issue_ns: Nanos, block: BlockAddress) -> Result<Completed<()>, NandError> {
        self.state.get_mut().erase_block(issue_ns, block)
    }

    fn is_bad_block(&self, block: BlockAddress) -> Result<bool, NandError> {
        self.state.lock().is_bad_block(block)
    }

    fn mark_bad_block(&mut self, block: BlockAddress) -> Result<(), NandError> {
        self.state.get_mut().mark_bad_block(block)
    }

    fn busy_until_ns(&self, chip: ChipIndex) -> Nanos {
        self.state.lock().busy_until_ns(chip)
    }

    fn all_done_ns(&self) -> Nanos {
        let state = self.state.lock();
        (0..self.config.chip_count).map(|chip| state.busy_until_ns(ChipIndex(chip))).max().unwrap_or(0)
    }

    fn paired_page_distance(&self) -> u32 {
        self.config.paired_page_distance
    }

    fn ecc_correctable_bits_per_512(&self) -> Option<u32> {
        Some(self.config.ecc_correctable_bits_per_512)
    }

    fn erase_count(&self, block: BlockAddress) -> Result<u32, NandError> {
        self.state.lock().erase_count(block)
    }

    fn flush(&mut self) -> Result<(), NandError> {
        self.state.get_mut().flush()
    }

    fn begin_flush(&mut self) -> Result<fsoc_flash::FlushWait, NandError> {
        self.state.get_mut().begin_flush()
    }

    fn write_barrier(&mut self) -> Result<(), NandError> {
        self.state.get_mut().write_barrier()
    }
}

impl<S: PageStore> crate::FlashStats for SimFlash<S> {
    fn counters(&self) -> FlashCounters {
        self.state.lock().counters().clone()
    }

    fn reset_counters(&mut self) {
        self.state.get_mut().reset_counters();
    }
}
