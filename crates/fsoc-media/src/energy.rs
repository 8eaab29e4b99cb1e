//! Energy model of a NAND chip: energy = supply voltage × active current × busy time, per phase.
//!
//! Defaults are assumptions taken from typical ONFI 1.x/2.x asynchronous SLC/MLC datasheets
//! (e.g. the Micron MT29F and Samsung K9F families), not measurements:
//! - VCC = 3.3 V;
//! - ICC1 (array read), ICC2 (program), ICC3 (erase) = 25 mA typical active current each;
//! - I/O burst current during bus transfers = 15 mA (datasheets list ~10-25 mA depending on
//!   bus load; 15 mA is a middle value).
//!
//! Standby current (tens of µA) is ignored: it does not depend on what the file system does.
//! Seed 004 computes energy as `reads × E_read + programs × E_program + erases × E_erase`;
//! `EnergyModel::operation_energy_nj` gives those per-operation constants for a profile, and
//! the simulator charges the same per-phase formula for each operation it runs.

use crate::geometry::{Geometry, Timing};
use crate::{Nanos, OperationKind};

/// Supply and active currents used to turn busy time into energy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EnergyModel {
    pub supply_millivolts: u32,
    pub read_current_microamps: u32,
    pub program_current_microamps: u32,
    pub erase_current_microamps: u32,
    /// Current while moving bytes over the bus (both directions).
    pub transfer_current_microamps: u32,
}

impl Default for EnergyModel {
    fn default() -> Self {
        EnergyModel {
            supply_millivolts: 3_300,
            read_current_microamps: 25_000,
            program_current_microamps: 25_000,
            erase_current_microamps: 25_000,
            transfer_current_microamps: 15_000,
        }
    }
}

/// Energy in nJ of drawing `current_microamps` at `supply_millivolts` for `duration_ns`:
/// mV × µA = nW, and nW × ns = 1e-18 J = 1e-9 nJ.
fn phase_energy_nj(supply_millivolts: u32, current_microamps: u32, duration_ns: Nanos) -> u64 {
    let attojoules = u128::from(supply_millivolts) * u128::from(current_microamps) * u128::from(duration_ns);
    // Rounded to nearest so small operations are not systematically undercounted.
    let nanojoules = (attojoules + 500_000_000) / 1_000_000_000;
    u64::try_from(nanojoules).unwrap_or(u64::MAX)
}

impl EnergyModel {
    /// Energy of the array phase of an operation (the chip busy with its cells).
    pub fn array_energy_nj(&self, kind: OperationKind, latency_ns: Nanos) -> u64 {
        let current_microamps = match kind {
            OperationKind::Read => self.read_current_microamps,
            OperationKind::Program => self.program_current_microamps,
            OperationKind::Erase => self.erase_current_microamps,
        };
        phase_energy_nj(self.supply_millivolts, current_microamps, latency_ns)
    }

    /// Energy of moving bytes over the bus for `transfer_ns`.
    pub fn transfer_energy_nj(&self, transfer_ns: Nanos) -> u64 {
        phase_energy_nj(self.supply_millivolts, self.transfer_current_microamps, transfer_ns)
    }

    /// Energy of one whole-page operation (array phase plus transfer of data and spare), the
    /// per-operation constant of seed 004's formula for this timing and geometry.
    pub fn operation_energy_nj(&self, kind: OperationKind, timing: &Timing, geometry: &Geometry) -> u64 {
        let page_bytes = u64::from(geometry.page_data_bytes) + u64::from(geometry.spare_bytes);
        let (latency_ns, transfer_ns) = match kind {
            OperationKind::Read => (timing.read_latency_ns, page_bytes * timing.bus_ns_per_byte),
            OperationKind::Program => (timing.program_latency_ns, page_bytes * timing.bus_ns_per_byte),
            OperationKind::Erase => (timing.erase_latency_ns, 0),
        };
        self.array_energy_nj(kind, latency_ns) + self.transfer_energy_nj(transfer_ns)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Profile;

    // Checks the unit arithmetic: 3.3 V × 25 mA × 200 µs = 16.5 µJ.
    #[test]
    fn slc_program_array_energy() {
        let model = EnergyModel::default();
        assert_eq!(model.array_energy_nj(OperationKind::Program, 200_000), 16_500);
    }

    // Checks seed 004's per-op constants: program costs more than read, erase more than program.
    #[test]
    fn per_operation_constants_are_ordered() {
        let model = EnergyModel::default();
        let profile = Profile::Slc;
        let (timing, geometry) = (profile.timing(), profile.geometry(64));
        let read = model.operation_energy_nj(OperationKind::Read, &timing, &geometry);
        let program = model.operation_energy_nj(OperationKind::Program, &timing, &geometry);
        let erase = model.operation_energy_nj(OperationKind::Erase, &timing, &geometry);
        // Read: 25 µs at 25 mA plus 2112 × 25 ns at 15 mA = 2062.5 + 2613.6 nJ.
        assert_eq!(read, 2_063 + 2_614);
        assert!(read < program && program < erase, "{read} {program} {erase}");
    }
}
