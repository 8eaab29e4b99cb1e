//! Fault injection settings and the run-time fault state of a simulated array.
//!
//! Every fault is drawn from the simulator's seeded RNG or from `rng::hash64`, so a seed plus an
//! operation sequence replays the same faults. Power cuts count only state-changing operations
//! (programs and erases): a cut during a read changes nothing on the chip, so it is
//! indistinguishable from a cut just before the next program or erase.

use alloc::vec;
use alloc::vec::Vec;

/// How many factory bad blocks a new device gets. Block 0 of every chip is always good, as
/// datasheets guarantee (boot code and bad-block tables live there).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum FactoryBadBlocks {
    #[default]
    None,
    /// Exactly this many bad blocks per chip (capped at `block_count - 1`).
    CountPerChip(u32),
    /// Each block except block 0 is bad with this probability, in parts per million.
    PartsPerMillion(u32),
}

/// Fault injection configuration. The default injects nothing except wear-out: a device
/// behaves like a healthy chip until pushed past its rated endurance.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FaultConfig {
    /// Cut power after this many state-changing operations: operations `1..=k` succeed,
    /// operation `k + 1` is in flight (a program tears, an erase is interrupted) and returns
    /// `PowerLost`, as does everything after it until `restore_power`.
    pub power_cut_after_operations: Option<u64>,
    /// Factory bad blocks marked when the device is created.
    pub factory_bad_blocks: FactoryBadBlocks,
    /// Probability that a program reports status fail (`OperationFailed`), in ppm.
    pub program_failure_ppm: u32,
    /// Probability that an erase reports status fail (`OperationFailed`), in ppm.
    pub erase_failure_ppm: u32,
    /// Past rated endurance, erases fail with `WornOut` with a probability that rises linearly
    /// from 0 at `wear_out_start_percent` of endurance to 1 at `wear_out_certain_percent`.
    pub wear_out_failures: bool,
    pub wear_out_start_percent: u32,
    pub wear_out_certain_percent: u32,
    /// Hazard (a): a torn page may read back as intended on the first read after power
    /// returns, and torn on later reads.
    pub unstable_bits_hazard: bool,
    /// Hazard (b), MLC/TLC only: a cut while programming page `i` also corrupts the already
    /// programmed page `i - paired_page_distance` of the same block beyond ECC.
    pub paired_page_hazard: bool,
}

impl Default for FaultConfig {
    fn default() -> Self {
        FaultConfig {
            power_cut_after_operations: None,
            factory_bad_blocks: FactoryBadBlocks::None,
            program_failure_ppm: 0,
            erase_failure_ppm: 0,
            wear_out_failures: true,
            wear_out_start_percent: 100,
            wear_out_certain_percent: 400,
            unstable_bits_hazard: false,
            paired_page_hazard: false,
        }
    }
}

impl FaultConfig {
    /// No faults at all, not even wear-out (for tests of upper layers that age blocks freely).
    pub fn none() -> Self {
        FaultConfig { wear_out_failures: false, ..FaultConfig::default() }
    }

    /// Probability, in ppm, that an erase of a block with `erase_count` prior erases fails as
    /// worn out.
    pub fn wear_out_ppm(&self, erase_count: u32, endurance_cycles: u32) -> u32 {
        if !self.wear_out_failures {
            return 0;
        }
        let start = u64::from(endurance_cycles) * u64::from(self.wear_out_start_percent) / 100;
        let certain = u64::from(endurance_cycles) * u64::from(self.wear_out_certain_percent) / 100;
        let erase_count = u64::from(erase_count);
        if erase_count < start {
            return 0;
        }
        if erase_count >= certain || certain <= start {
            return crate::rng::PARTS_PER_MILLION;
        }
        let ppm = (erase_count - start) * u64::from(crate::rng::PARTS_PER_MILLION) / (certain - start);
        u32::try_from(ppm).unwrap_or(crate::rng::PARTS_PER_MILLION)
    }
}

/// Run-time fault state: the operation counter, the power switch and failed chips.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FaultState {
    /// State-changing operations started so far (including the one a cut interrupted).
    operations_count: u64,
    /// Absolute operation count after which power is cut (operation `cut + 1` is in flight).
    cut_after_operations: Option<u64>,
    /// Absolute operation count after which the next operation reports status fail (a grown
    /// bad block), once.
    fail_after_operations: Option<u64>,
    /// Absolute operation count after which a chip dies: (count, chip).
    chip_failure_after: Option<(u64, u32)>,
    power_lost: bool,
    failed_chips: Vec<bool>,
}

/// What `FaultState::begin_operation` decides for one state-changing operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OperationFate {
    /// Power stays on for the whole operation.
    Completes,
    /// Power is cut while the operation is in flight.
    Interrupted,
}

impl FaultState {
    pub fn new(chip_count: u32, config: &FaultConfig) -> Self {
        FaultState {
            operations_count: 0,
            cut_after_operations: config.power_cut_after_operations,
            fail_after_operations: None,
            chip_failure_after: None,
            power_lost: false,
            failed_chips: vec![false; chip_count as usize],
        }
    }

    pub fn operations_count(&self) -> u64 {
        self.operations_count
    }

    pub fn power_is_lost(&self) -> bool {
        self.power_lost
    }

    /// Schedules a cut `after_operations` state-changing operations from now.
    pub fn schedule_power_cut(&mut self, after_operations: u64) {
        self.cut_after_operations = Some(self.operations_count + after_operations);
    }

    /// Makes the state-changing operation `after_operations + 1` from now report status fail
    /// (once): a block that goes bad under that program or erase.
    pub fn schedule_failure(&mut self, after_operations: u64) {
        self.fail_after_operations = Some(self.operations_count + after_operations);
    }

    /// Whether the operation just begun (`begin_operation`) is the scheduled failure; consumes
    /// it.
    pub fn take_scheduled_failure(&mut self) -> bool {
        match self.fail_after_operations {
            Some(after) if self.operations_count == after + 1 => {
                self.fail_after_operations = None;
                true
            }
            _ => false,
        }
    }

    /// Cancels a scheduled cut.
    pub fn cancel_power_cut(&mut self) {
        self.cut_after_operations = None;
    }

    /// Cuts power now, between operations (nothing is torn).
    pub fn cut_power_now(&mut self) {
        self.power_lost = true;
        self.cut_after_operations = None;
    }

    /// Powers the array back on. A scheduled cut that already fired is consumed.
    pub fn restore_power(&mut self) {
        self.power_lost = false;
    }

    /// Counts one state-changing operation and decides whether power fails during it.
    pub fn begin_operation(&mut self) -> OperationFate {
        assert!(!self.power_lost, "operation started without power");
        self.operations_count += 1;
        match self.cut_after_operations {
            Some(cut) if self.operations_count > cut => {
                self.power_lost = true;
                self.cut_after_operations = None;
                OperationFate::Interrupted
            }
            _ => OperationFate::Completes,
        }
    }

    pub fn fail_chip(&mut self, chip: u32) {
        if let Some(failed) = self.failed_chips.get_mut(chip as usize) {
            *failed = true;
        }
    }

    /// Makes `chip` die once `after_operations` more state-changing operations have started:
    /// operation `after_operations + 1` and everything after it on that chip fail.
    pub fn schedule_chip_failure(&mut self, after_operations: u64, chip: u32) {
        self.chip_failure_after = Some((self.operations_count + after_operations, chip));
    }

    /// Fails the scheduled chip if its time has come (called before each state-changing
    /// operation is checked).
    pub fn fire_chip_failure(&mut self) {
        if let Some((after, chip)) = self.chip_failure_after {
            if self.operations_count >= after {
                self.fail_chip(chip);
                self.chip_failure_after = None;
            }
        }
    }

    /// The chip in `chip`'s place works again (a replacement).
    pub fn replace_chip(&mut self, chip: u32) {
        if let Some(failed) = self.failed_chips.get_mut(chip as usize) {
            *failed = false;
        }
    }

    pub fn chip_failed(&self, chip: u32) -> bool {
        self.failed_chips.get(chip as usize).copied().unwrap_or(false)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Checks the counting rule: with a cut after 2, operations 1 and 2 complete and 3 is cut.
    #[test]
    fn cut_after_k_interrupts_operation_k_plus_one() {
        let config = FaultConfig { power_cut_after_operations: Some(2), ..FaultConfig::default() };
        let mut state = FaultState::new(1, &config);
        assert_eq!(state.begin_operation(), OperationFate::Completes);
        assert_eq!(state.begin_operation(), OperationFate::Completes);
        assert_eq!(state.begin_operation(), OperationFate::Interrupted);
        assert!(state.power_is_lost());
        state.restore_power();
        assert_eq!(state.begin_operation(), OperationFate::Completes);
        assert_eq!(state.operations_count(), 4);
    }

    #[test]
    fn wear_out_probability_is_linear() {
        let config = FaultConfig::default();
        assert_eq!(config.wear_out_ppm(99, 100), 0);
        assert_eq!(config.wear_out_ppm(100, 100), 0);
        assert_eq!(config.wear_out_ppm(250, 100), 500_000);
        assert_eq!(config.wear_out_ppm(400, 100), 1_000_000);
        assert_eq!(FaultConfig::none().wear_out_ppm(1000, 100), 0);
    }
}
