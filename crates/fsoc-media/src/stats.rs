//! Operation accounting of a flash array (per-chip and per-block counters, erase-count
//! histograms) and of an NVRAM device (`NvramCounters`), with `DeviceTotals` to report both as
//! one device's busy time and energy.
//!
//! Counters are resettable measurement state. Erase counts are not kept here: they are physical
//! wear, live in the page store and survive `reset`.

use alloc::vec;
use alloc::vec::Vec;

use crate::{BlockAddress, ChipIndex, NandError, Nanos, OperationKind};

/// What one chip did since creation or the last reset.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ChipCounters {
    pub reads: u64,
    pub programs: u64,
    pub erases: u64,
    /// Data plus spare bytes moved off the chip by reads.
    pub bytes_read: u64,
    /// Data plus spare bytes moved onto the chip by programs.
    pub bytes_programmed: u64,
    /// Virtual time the chip spent working (array operation plus bus transfer).
    pub busy_ns: Nanos,
    /// Energy the chip used for those operations (see `energy`).
    pub energy_nj: u64,
}

impl ChipCounters {
    /// Adds another chip's (or run's) counts.
    pub fn add(&mut self, other: &ChipCounters) {
        self.reads += other.reads;
        self.programs += other.programs;
        self.erases += other.erases;
        self.bytes_read += other.bytes_read;
        self.bytes_programmed += other.bytes_programmed;
        self.busy_ns += other.busy_ns;
        self.energy_nj += other.energy_nj;
    }
}

/// What an NVRAM device (`nvram::Nvram`) did since creation or the last reset. Kept apart from
/// `ChipCounters` on purpose: an NVRAM access is never counted as a page read or program (mount
/// bounds count page reads), and `DeviceTotals` adds the two where one figure is wanted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NvramCounters {
    pub reads: u64,
    pub writes: u64,
    pub bytes_read: u64,
    pub bytes_written: u64,
    /// Virtual time the device spent on those accesses.
    pub busy_ns: Nanos,
    /// Energy of those accesses in picojoules (an NVRAM word costs a few nJ, so nJ would round
    /// small accesses away); `energy_nj` converts.
    pub energy_pj: u64,
}

impl NvramCounters {
    pub fn add(&mut self, other: &NvramCounters) {
        self.reads += other.reads;
        self.writes += other.writes;
        self.bytes_read += other.bytes_read;
        self.bytes_written += other.bytes_written;
        self.busy_ns += other.busy_ns;
        self.energy_pj += other.energy_pj;
    }

    /// Energy in nJ, the flash counters' unit (rounded to nearest).
    pub fn energy_nj(&self) -> u64 {
        self.energy_pj.saturating_add(500) / 1_000
    }
}

/// One device's flash and NVRAM accounting side by side ("counted in the same stats"): each
/// part keeps its own counts, and the totals give the figures a report compares across
/// configurations (energy, busy time).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DeviceTotals {
    /// Sum over all chips (`FlashCounters::totals`).
    pub flash: ChipCounters,
    /// Zero when the device has no NVRAM.
    pub nvram: NvramCounters,
}

impl DeviceTotals {
    pub fn new(flash: ChipCounters, nvram: NvramCounters) -> Self {
        DeviceTotals { flash, nvram }
    }

    /// Flash plus NVRAM energy in nJ.
    pub fn energy_nj(&self) -> u64 {
        self.flash.energy_nj + self.nvram.energy_nj()
    }

    /// Flash plus NVRAM busy time: the device time spent working, summed over chips and the
    /// NVRAM (overlapping work counts once per part, as `ChipCounters::busy_ns` does per chip).
    pub fn busy_ns(&self) -> Nanos {
        self.flash.busy_ns + self.nvram.busy_ns
    }

    /// Adds another run's totals (e.g. the phases of a benchmark).
    pub fn add(&mut self, other: &DeviceTotals) {
        self.flash.add(&other.flash);
        self.nvram.add(&other.nvram);
    }
}

/// What happened to one erase block since creation or the last reset.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BlockCounters {
    pub reads: u64,
    pub programs: u64,
    pub erases: u64,
}

/// Accounting for a whole array: one `ChipCounters` per chip and one `BlockCounters` per block.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FlashCounters {
    chips: Vec<ChipCounters>,
    /// Chip-major: block `b` of chip `c` is at `c * block_count + b`.
    blocks: Vec<BlockCounters>,
    block_count: u32,
}

/// One completed operation, as the simulator reports it to the counters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OperationRecord {
    pub kind: OperationKind,
    pub block: BlockAddress,
    /// Bytes moved over the bus (data plus spare; 0 for an erase).
    pub transfer_bytes: u64,
    pub busy_ns: Nanos,
    pub energy_nj: u64,
}

impl FlashCounters {
    pub fn new(chip_count: u32, block_count: u32) -> Self {
        let block_slots = chip_count as usize * block_count as usize;
        FlashCounters {
            chips: vec![ChipCounters::default(); chip_count as usize],
            blocks: vec![BlockCounters::default(); block_slots],
            block_count,
        }
    }

    /// Counters of one chip, or `None` if the chip is out of range.
    pub fn chip(&self, chip: ChipIndex) -> Option<&ChipCounters> {
        self.chips.get(chip.0 as usize)
    }

    /// All chips' counters, indexed by chip.
    pub fn chips(&self) -> &[ChipCounters] {
        &self.chips
    }

    /// Counters of one block, or `None` if the address is out of range.
    pub fn block(&self, block: BlockAddress) -> Option<&BlockCounters> {
        if block.block.0 >= self.block_count {
            return None;
        }
        self.blocks.get(self.block_slot(block))
    }

    /// Sum over all chips.
    pub fn totals(&self) -> ChipCounters {
        let mut total = ChipCounters::default();
        for chip in &self.chips {
            total.add(chip);
        }
        total
    }

    /// Zeroes every counter. Erase counts (wear) are not here and are unaffected.
    pub fn reset(&mut self) {
        self.chips.iter_mut().for_each(|chip| *chip = ChipCounters::default());
        self.blocks.iter_mut().for_each(|block| *block = BlockCounters::default());
    }

    /// Adds one completed operation. An address out of range (the simulator validates them
    /// first) is refused and nothing is counted.
    pub fn record(&mut self, record: OperationRecord) -> Result<(), NandError> {
        let out_of_range =
            |what, value: u32, limit: u64| NandError::OutOfRange { what, value: u64::from(value), limit };
        if record.block.block.0 >= self.block_count {
            return Err(out_of_range("block", record.block.block.0, u64::from(self.block_count)));
        }
        let slot = self.block_slot(record.block);
        let chip_count = self.chips.len() as u64;
        let chip = self.chips.get_mut(record.block.chip.0 as usize).ok_or(out_of_range(
            "chip",
            record.block.chip.0,
            chip_count,
        ))?;
        let block = self.blocks.get_mut(slot).ok_or(out_of_range("chip", record.block.chip.0, chip_count))?;
        chip.busy_ns += record.busy_ns;
        chip.energy_nj += record.energy_nj;
        match record.kind {
            OperationKind::Read => {
                chip.reads += 1;
                chip.bytes_read += record.transfer_bytes;
                block.reads += 1;
            }
            OperationKind::Program => {
                chip.programs += 1;
                chip.bytes_programmed += record.transfer_bytes;
                block.programs += 1;
            }
            OperationKind::Erase => {
                chip.erases += 1;
                block.erases += 1;
            }
        }
        Ok(())
    }

    fn block_slot(&self, block: BlockAddress) -> usize {
        block.chip.0 as usize * self.block_count as usize + block.block.0 as usize
    }
}

/// Erase counts grouped into equal-width buckets, for wear reports.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EraseCountHistogram {
    /// Bucket `i` counts blocks with erase count in `i * bucket_width ..= (i + 1) * bucket_width - 1`.
    pub bucket_width: u32,
    pub block_counts: Vec<u64>,
    pub erase_count_min: u32,
    pub erase_count_max: u32,
    pub erase_count_sum: u64,
    pub block_count: u64,
}

impl EraseCountHistogram {
    /// Builds a histogram with `bucket_count` buckets (at least 1) wide enough to cover the
    /// largest erase count.
    pub fn from_erase_counts(erase_counts: impl Iterator<Item = u32> + Clone, bucket_count: u32) -> Self {
        let bucket_count = bucket_count.max(1);
        let erase_count_max = erase_counts.clone().max().unwrap_or(0);
        // Width rounds up, so the maximum always lands in the last bucket or earlier.
        let bucket_width = (erase_count_max / bucket_count + 1).max(1);
        let mut histogram = EraseCountHistogram {
            bucket_width,
            block_counts: vec![0; bucket_count as usize],
            erase_count_min: u32::MAX,
            erase_count_max,
            erase_count_sum: 0,
            block_count: 0,
        };
        let last_bucket_index = histogram.block_counts.len() - 1;
        for erase_count in erase_counts {
            // The width covers the maximum, so `min` changes nothing unless the iterator's clone
            // yielded other values than the iterator; then the last bucket takes the excess.
            let bucket_index = ((erase_count / bucket_width) as usize).min(last_bucket_index);
            if let Some(slot) = histogram.block_counts.get_mut(bucket_index) {
                *slot += 1;
            }
            histogram.erase_count_min = histogram.erase_count_min.min(erase_count);
            histogram.erase_count_sum += u64::from(erase_count);
            histogram.block_count += 1;
        }
        if histogram.block_count == 0 {
            histogram.erase_count_min = 0;
        }
        histogram
    }

    /// Mean erase count (0 for no blocks).
    pub fn erase_count_mean(&self) -> f64 {
        if self.block_count == 0 {
            return 0.0;
        }
        self.erase_count_sum as f64 / self.block_count as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Checks that recording lands in the right chip and block, totals add up, and reset zeroes.
    #[test]
    fn record_totals_and_reset() {
        let mut counters = FlashCounters::new(2, 4);
        let block = BlockAddress::new(1, 3);
        counters
            .record(OperationRecord {
                kind: OperationKind::Program,
                block,
                transfer_bytes: 2112,
                busy_ns: 100,
                energy_nj: 5,
            })
            .expect("in range");
        counters
            .record(OperationRecord {
                kind: OperationKind::Read,
                block: BlockAddress::new(0, 0),
                transfer_bytes: 2112,
                busy_ns: 10,
                energy_nj: 1,
            })
            .expect("in range");
        let beyond = OperationRecord {
            kind: OperationKind::Erase,
            block: BlockAddress::new(2, 0),
            transfer_bytes: 0,
            busy_ns: 1,
            energy_nj: 1,
        };
        assert!(counters.record(beyond).is_err(), "a chip out of range is refused");
        assert!(counters.record(OperationRecord { block: BlockAddress::new(0, 4), ..beyond }).is_err());
        assert_eq!(counters.chip(ChipIndex(1)).map(|c| c.programs), Some(1));
        assert_eq!(counters.block(block).map(|b| b.programs), Some(1));
        assert_eq!(counters.block(BlockAddress::new(1, 4)), None);
        let totals = counters.totals();
        assert_eq!((totals.reads, totals.programs, totals.busy_ns, totals.energy_nj), (1, 1, 110, 6));
        counters.reset();
        assert_eq!(counters.totals(), ChipCounters::default());
    }

    #[test]
    fn histogram_buckets() {
        let counts = [0u32, 1, 5, 9, 10];
        let histogram = EraseCountHistogram::from_erase_counts(counts.iter().copied(), 2);
        assert_eq!(histogram.bucket_width, 6);
        assert_eq!(histogram.block_counts, vec![3, 2]);
        assert_eq!((histogram.erase_count_min, histogram.erase_count_max), (0, 10));
        assert!((histogram.erase_count_mean() - 5.0).abs() < 1e-9);
    }
}
