//! Retention loss and read disturb: bit errors that grow with the time since a block was
//! programmed and with the number of reads of the block since its last erase, both faster on
//! worn blocks. They add to the wear RBER of `ecc::BitErrorModel`, and the sum is sampled per
//! ECC sector exactly as before, so an aged page reads Clean, then Corrected with more and more
//! bits, then Uncorrectable.
//!
//! # Model
//!
//! With `w = erase_count / endurance`, `years` the retention age (below) and `reads` the reads
//! of the block since its last erase:
//!
//! ```text
//! retention RBER = retention_rber_per_year × years × (retention_fresh_factor + w^retention_wear_exponent)
//! disturb RBER   = disturb_rber_per_read   × reads × (disturb_fresh_factor   + w^disturb_wear_exponent)
//! ```
//!
//! and a read of a programmed page samples `wear RBER + retention RBER + disturb RBER`, except
//! that the two new terms are dropped while their sum is below `negligible_rber` (see
//! Determinism).
//!
//! *Retention age* is `(read issue time + retention offset) − (program time + retention offset
//! then)`: the program time is the completion of the first program into the block after its
//! erase, and the retention offset is the time the device has been aged by
//! `SimFlash::advance_retention_time` (a shelf or idle period: it moves no chip clock). A page
//! programmed later into an already partly programmed block counts from the block's first
//! program (a simplification: the block's oldest data is the one that limits it, and a
//! controller scrubs whole blocks). Blocks whose contents predate the `SimFlash` (an image file
//! reopened) count from the start of the session: the retention clock is RAM state, not part of
//! the image format, so a reopened image starts it afresh (as does the read count).
//!
//! *Read disturb* is counted per block: every read of any page of the block adds one, and the
//! disturb RBER applies to all of the block's pages. Physically the page being read is not the
//! one disturbed: the pass-through voltage on the other word lines of the block shifts *their*
//! cells ("bit errors occur on other pages in the block, not the page being read", Toshiba
//! TH58NVG5S0FTA20 datasheet §17). Counting per block and applying it to every page models
//! neighbouring pages of much-read blocks; it over-counts for a page that is itself the only one
//! read, by at most that page's own share. A read's own disturb does not affect its own sample.
//!
//! An erase (complete, or interrupted by a power cut) resets both. A failed erase (status fail
//! or wear-out) leaves the contents, and so their age and read count, in place.
//!
//! # Sources, and what is assumed
//!
//! Shapes, from published characterisation of MLC NAND:
//! - Retention errors are the dominant error source of MLC NAND and grow with the time since
//!   programming, faster as the cells wear: Cai, Haratsch, Mutlu, Mai, "Error Patterns in MLC
//!   NAND Flash Memory: Measurement, Characterization, and Analysis", DATE 2012 (30-40 nm MLC);
//!   Cai, Yalcin, Mutlu, Haratsch, Cristal, Unsal, Mai, "Flash Correct-and-Refresh:
//!   Retention-Aware Error Management for Increased Flash Memory Lifetime", ICCD 2012 (talk
//!   summary: "retention errors are the dominant errors in MLC NAND flash ... retention errors
//!   increase as cell gets worn out"; the cells "die after 3k P/E cycles"); Cai, Luo, Haratsch,
//!   Mai, Mutlu, "Data Retention in MLC NAND Flash Memory: Characterization, Optimization, and
//!   Recovery", HPCA 2015 (2Y-nm MLC; RBER as a function of retention age, the "length of time
//!   since a flash cell was programmed").
//! - Read disturb: "a read to one row of cells impacts the threshold voltages of unread flash
//!   cells in different rows of the same block", and the probability of read disturb errors
//!   "increases with ... higher wear-out": Cai, Luo, Ghose, Haratsch, Mai, Mutlu, "Read Disturb
//!   Errors in MLC NAND Flash Memory: Characterization, Mitigation, and Recovery", DSN 2015
//!   (2Y-nm MLC). Reads are counted since the last erase because an erase restores the block
//!   (Toshiba TH58NVG5S0FTA20 datasheet, 2010, §17 "Reliability Guidance": "After a large
//!   number of read cycles (between block erases), a tiny charge may build up ... After block
//!   erasure and reprogramming, the block may become usable again"; the same section assumes
//!   "4 bit ECC for each 512 bytes", this simulator's default).
//! - Write, retention and read-disturb errors all contribute, and the uncorrectable rate is "a
//!   strong function of program/erase cycling and subsequent retention time": Mielke, Marquart,
//!   Wu, Kessenich, Belgal, Schares, Trivedi, Goodness, Nevill, "Bit Error Rate in NAND Flash
//!   Memories", IRPS 2008 (abstract).
//!
//! Magnitudes, from specifications:
//! - Retention spec: NAND "is typically required to retain data for 1 to 10 years according to
//!   industrial standards" (Liu, Yang, Wu, "Optimizing NAND Flash-Based SSDs via Retention
//!   Relaxation", FAST 2012, abstract; its introduction cites a 1-year requirement at rated
//!   endurance); JEDEC JESD218 requires a client SSD at its rated endurance to retain data
//!   powered off for 1 year at 30 °C (an enterprise SSD for 3 months). Datasheets give 10 years
//!   for a new device; the 1 year applies at the endurance limit.
//! - Read disturb: "Most devices support about 100,000 reads before there's danger of losing a
//!   bit" (QNX Neutrino ETFS documentation, "Read degradation monitoring with automatic
//!   refresh").
//!
//! Assumptions (no figure of the papers above was available to fit them; each constant was
//! chosen to reproduce the specifications above with the default wear model, rber ≈ 5e-6 at
//! rated endurance, and t = 4 per 512-byte sector, about 4,100 bits with its spare share):
//! - `retention_rber_per_year` = 2.5e-4 at rated endurance: one year adds about 1 error per
//!   sector (9 % of sectors with 3 or more, 0.5 % uncorrectable: data still readable, heavily
//!   corrected, at the 1-year spec), three years about 3 per sector (a fifth of the sectors,
//!   most 2 KiB pages, uncorrectable).
//! - RBER linear in retention time. Published models fit a power of time instead (the public
//!   simulators MQSim-JW and SimpleSSD use `time^n` with n fitted per device); a linear law
//!   is the simplest monotone one, needs no transcendental function in `no_std`, and matches
//!   the specifications at 1 and 10 years; it understates errors in the first days relative to
//!   a sub-linear fit.
//! - Retention wear acceleration `0.02 + w²`: a fresh block ages 50 times slower than one at
//!   rated endurance, so it keeps fewer than 0.25 errors per sector after 10 years (the 10-year
//!   spec at low wear), while a block at twice its endurance is mostly uncorrectable within a
//!   year. The square is an assumption standing for "retention errors increase as the cell gets
//!   worn out".
//! - `disturb_rber_per_read` = 2.3e-10 with wear factor `0.1 + w`: at rated endurance 10^5
//!   reads of a block add about 0.1 errors per sector (corrections become common), 10^6 about
//!   1 per sector (heavily corrected, 0.5 % of sectors uncorrectable) and 3×10^6 make it mostly
//!   uncorrectable; a fresh block needs about ten times as many reads. Linear in reads and in
//!   wear are assumptions standing for DSN 2015's "increases with read count and with wear".
//! - No temperature (the retention clock is at the specification's temperature), no
//!   interaction between retention and disturb (DSN 2015 reports one), no recovery of charge
//!   between reads.
//!
//! # Determinism
//!
//! The state is deterministic (virtual times and operation counts), so equal seeds and
//! operations give equal outcomes. A larger RBER changes the Poisson draws' outcomes (one
//! uniform draw per sector, compared with `e^-mean`), so any nonzero extra term can change a
//! seeded run's results: the model is therefore off unless configured (`SimConfig::aging`,
//! default `AgingModel::disabled()`), and with it off the sampled RBER is the wear RBER bit for
//! bit. With it on, `negligible_rber` (1e-9, the fresh wear RBER) drops the extra terms while
//! they are smaller, so a lightly used device still samples exactly as without them (a fresh
//! block: up to about 43 reads at no retention age, or about 1.7 hours of retention age
//! without reads, less of each together; a block at rated endurance: 3 reads, or 2 minutes).

use crate::Nanos;

/// Nanoseconds in a Julian year (365.25 days), the unit of `retention_rber_per_year`.
pub const NANOS_PER_YEAR: Nanos = 31_557_600 * 1_000_000_000;

/// Nanoseconds in a day, for callers aging a device by days or months.
pub const NANOS_PER_DAY: Nanos = 86_400 * 1_000_000_000;

/// Retention and read-disturb error rates (see the module documentation for the model, its
/// sources and its assumptions).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AgingModel {
    /// False: no retention or disturb errors (the state is still tracked, so enabling the model
    /// later sees the ages and read counts so far).
    pub enabled: bool,
    /// Retention RBER added per year of retention age at rated endurance, less the fresh part.
    pub retention_rber_per_year: f64,
    /// Retention rate of a fresh block, as a fraction of the rate at rated endurance.
    pub retention_fresh_factor: f64,
    /// Power of the wear fraction in the retention rate.
    pub retention_wear_exponent: u32,
    /// Disturb RBER added per read of the block at rated endurance, less the fresh part.
    pub disturb_rber_per_read: f64,
    /// Disturb rate of a fresh block, as a fraction of the rate at rated endurance.
    pub disturb_fresh_factor: f64,
    /// Power of the wear fraction in the disturb rate.
    pub disturb_wear_exponent: u32,
    /// Retention plus disturb RBER below this is dropped (see Determinism).
    pub negligible_rber: f64,
}

impl Default for AgingModel {
    /// Off: a device samples exactly as it did before retention and disturb were modelled.
    fn default() -> Self {
        AgingModel::disabled()
    }
}

impl AgingModel {
    /// The calibrated model of the module documentation.
    pub fn published() -> Self {
        AgingModel {
            enabled: true,
            retention_rber_per_year: 2.5e-4,
            retention_fresh_factor: 0.02,
            retention_wear_exponent: 2,
            disturb_rber_per_read: 2.3e-10,
            disturb_fresh_factor: 0.1,
            disturb_wear_exponent: 1,
            negligible_rber: 1e-9,
        }
    }

    /// No retention or disturb errors (the published constants, switched off).
    pub fn disabled() -> Self {
        AgingModel { enabled: false, ..AgingModel::published() }
    }

    /// Retention RBER of a block with `erase_count` erases, `retention_age_ns` after its program
    /// (regardless of `enabled` and of `negligible_rber`).
    pub fn retention_rber(&self, erase_count: u32, endurance_cycles: u32, retention_age_ns: Nanos) -> f64 {
        let years = retention_age_ns as f64 / NANOS_PER_YEAR as f64;
        let wear =
            wear_factor(self.retention_fresh_factor, self.retention_wear_exponent, erase_count, endurance_cycles);
        self.retention_rber_per_year * years * wear
    }

    /// Disturb RBER of a block with `erase_count` erases read `reads_since_erase` times since its
    /// erase (regardless of `enabled` and of `negligible_rber`).
    pub fn disturb_rber(&self, erase_count: u32, endurance_cycles: u32, reads_since_erase: u64) -> f64 {
        let wear = wear_factor(self.disturb_fresh_factor, self.disturb_wear_exponent, erase_count, endurance_cycles);
        self.disturb_rber_per_read * reads_since_erase as f64 * wear
    }

    /// The RBER a read adds to the wear RBER: retention plus disturb, or 0 when the model is off
    /// or their sum is below `negligible_rber`.
    pub fn added_rber(
        &self,
        erase_count: u32,
        endurance_cycles: u32,
        retention_age_ns: Nanos,
        reads_since_erase: u64,
    ) -> f64 {
        if !self.enabled {
            return 0.0;
        }
        let added = self.retention_rber(erase_count, endurance_cycles, retention_age_ns)
            + self.disturb_rber(erase_count, endurance_cycles, reads_since_erase);
        if added < self.negligible_rber {
            0.0
        } else {
            added
        }
    }
}

/// `fresh + (erase_count / endurance)^exponent`.
fn wear_factor(fresh: f64, exponent: u32, erase_count: u32, endurance_cycles: u32) -> f64 {
    let wear_fraction = f64::from(erase_count) / f64::from(endurance_cycles.max(1));
    let mut power = 1.0;
    for _ in 0..exponent {
        power *= wear_fraction;
    }
    fresh + power
}

/// When a block's contents started aging, on the retention clock (virtual time plus the
/// retention offset).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ProgramClock {
    /// The contents predate this simulator (a reopened image): they count from the start of
    /// the session, retention clock 0.
    Inherited,
    /// Erased in this session and not programmed since.
    Erased,
    /// First programmed after its erase at this retention-clock time.
    ProgrammedAt(Nanos),
}

/// The aging state of one block (RAM only: see the module documentation).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct BlockAgingState {
    pub(crate) clock: ProgramClock,
    pub(crate) reads_since_erase: u64,
}

impl BlockAgingState {
    /// The state of every block when a simulator starts: contents of unknown age, no reads.
    pub(crate) const AT_START: BlockAgingState =
        BlockAgingState { clock: ProgramClock::Inherited, reads_since_erase: 0 };

    /// Retention age of the contents for a read at `now` on the retention clock.
    pub(crate) fn retention_age_ns(&self, now: Nanos) -> Nanos {
        match self.clock {
            ProgramClock::Inherited => now,
            ProgramClock::Erased => 0,
            ProgramClock::ProgrammedAt(programmed) => now.saturating_sub(programmed),
        }
    }

    /// Records a successful program completing at `at` on the retention clock. `first_in_block`:
    /// no page of the block was programmed (or torn) before, so the block was erased even if
    /// this session never saw the erase.
    pub(crate) fn note_program(&mut self, at: Nanos, first_in_block: bool) {
        let starts_clock = match self.clock {
            ProgramClock::Erased => true,
            ProgramClock::Inherited => first_in_block,
            ProgramClock::ProgrammedAt(_) => false,
        };
        if starts_clock {
            self.clock = ProgramClock::ProgrammedAt(at);
        }
    }

    pub(crate) fn note_erase(&mut self) {
        *self = BlockAgingState { clock: ProgramClock::Erased, reads_since_erase: 0 };
    }

    pub(crate) fn note_read(&mut self) {
        self.reads_since_erase = self.reads_since_erase.saturating_add(1);
    }
}

/// What a read of a block would see now (`SimFlash::block_aging`), for tests, diagnostics and
/// scrub experiments; a real controller cannot see it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BlockAging {
    /// Time since the block's first program after its erase, shelf time included (0 for an
    /// erased block).
    pub retention_age_ns: Nanos,
    /// Reads of any page of the block since its erase (or since the simulator started).
    pub reads_since_erase: u64,
    /// The RBER a read of one of its programmed pages would sample with: wear, plus retention
    /// and disturb when the aging model is on.
    pub rber: f64,
}

#[cfg(test)]
mod tests {
    use super::*;

    // Checks the documented regimes of the published constants at rated endurance (10,000).
    #[test]
    fn published_constants_give_the_documented_regimes() {
        let model = AgingModel::published();
        let sector_bits = 4096.0;
        let per_sector = |erase_count, years: u64, reads| {
            model.added_rber(erase_count, 10_000, years * NANOS_PER_YEAR, reads) * sector_bits
        };
        assert!((0.9..1.2).contains(&per_sector(10_000, 1, 0)), "1 year rated: {}", per_sector(10_000, 1, 0));
        assert!(per_sector(10_000, 3, 0) > 3.0, "3 years rated: {}", per_sector(10_000, 3, 0));
        assert!(per_sector(0, 10, 0) < 0.25, "10 years fresh: {}", per_sector(0, 10, 0));
        assert!(
            (0.08..0.15).contains(&per_sector(10_000, 0, 100_000)),
            "1e5 reads: {}",
            per_sector(10_000, 0, 100_000)
        );
        assert!(
            (0.9..1.2).contains(&per_sector(10_000, 0, 1_000_000)),
            "1e6 reads: {}",
            per_sector(10_000, 0, 1_000_000)
        );
    }

    // Checks the switch and the negligible floor.
    #[test]
    fn disabled_and_negligible_terms_add_nothing() {
        let model = AgingModel::published();
        assert_eq!(AgingModel::disabled().added_rber(30_000, 10_000, 10 * NANOS_PER_YEAR, 1 << 30), 0.0);
        assert_eq!(AgingModel::default(), AgingModel::disabled());
        // A fresh block read 30 times within 10 minutes: below 1e-9.
        assert_eq!(model.added_rber(0, 10_000, 600 * 1_000_000_000, 30), 0.0);
        assert!(model.added_rber(0, 10_000, 0, 100) > 0.0);
    }

    // Checks the program clock: inherited contents count from 0, a fresh program starts the
    // clock once, an erase stops it.
    #[test]
    fn program_clock_follows_programs_and_erases() {
        let mut state = BlockAgingState::AT_START;
        assert_eq!(state.retention_age_ns(500), 500);
        state.note_program(100, false);
        assert_eq!(state.retention_age_ns(500), 500, "a partly programmed inherited block keeps its origin");
        state.note_erase();
        assert_eq!(state.retention_age_ns(500), 0);
        state.note_program(200, false);
        state.note_program(300, false);
        assert_eq!(state.retention_age_ns(500), 300);
        state.note_read();
        assert_eq!(state.reads_since_erase, 1);
        let mut fresh = BlockAgingState::AT_START;
        fresh.note_program(50, true);
        assert_eq!(fresh.retention_age_ns(500), 450);
    }
}
