//! Seed 000's performance model, Eqs. (1)–(4), against the synthetic read-then-compute
//! workload of its Fig. 10: read a 1 MiB file in 4 KiB units; while the host computes on unit
//! i, the read of unit i + 1 is in flight (non-blocking reads).
//!
//! "Measured" is that workload's schedule played out with each unit's own counted costs: every
//! 4 KiB read is run over the wire in both modes and its frames, bytes, chip pages and chip time
//! are counted (`Work`), turned into host time H_i (file system and driver, or stub) and time
//! outside the host M_i (device CPU, chips, bus) by a `Setting`; the host issues read i + 1 as
//! soon as read i is done and compute on unit i − 1 has finished, spends H_{i+1} on it, then
//! computes on unit i while read i + 1 takes M_{i+1}. "Predicted" is Eq. (3) (conventional) or
//! Eq. (4) (FSOC) with the mean H and M over the units, as the seed fed its model with measured
//! parameters. The two differ where the units differ: the first read of the conventional host
//! walks the trees over the bus, and unit costs vary with the chips the pages land on.
//!
//! Both sweeps of the seed: compute per read (Figs. 7 and 11), and the host's clock (Fig. 12:
//! 45, 56 and 67 MHz, the device at 24 MHz). Compute per read is given in host cycles, so a
//! faster host computes the same unit sooner, as the seed's dummy loop did.

use std::io;
use std::path::Path;

use serde_json::{json, Value};

use super::cost::{Elapsed, Mode, Setting, Work};
use super::harness::{io_setup, setup, Conventional, OnChip};
use super::table2::{contents, Table2Config, READ_UNIT_BYTES};
use crate::target::BenchError;

/// Compute per read, as a fraction of the conventional device's mean I/O time per unit
/// (Tmedia + Ttrans) under the seed's setting at 56 MHz: the x axis of Figs. 7 and 11, dense
/// around the knee where the phases of the seed's section 4.2 change.
pub const COMPUTE_FRACTIONS: [f64; 13] = [0.0, 0.25, 0.5, 0.75, 0.9, 0.95, 1.0, 1.05, 1.1, 1.2, 1.4, 1.7, 2.0];

/// Host clocks of Fig. 12.
pub const HOST_CLOCKS_MHZ: [f64; 3] = [45.0, 56.0, 67.0];

/// Per-unit times of one mode under one setting.
#[derive(Clone, Debug)]
pub struct Units {
    /// Host CPU per unit: TFS_host + Tdriver (conventional) or Tstub (FSOC).
    pub host_ns: Vec<f64>,
    /// Outside the host per unit: Tmedia + Ttrans (+ TFS_FSOC on the chip).
    pub outside_ns: Vec<f64>,
}

impl Units {
    pub fn of(works: &[Work], mode: Mode, setting: &Setting) -> Units {
        let elapsed: Vec<Elapsed> = works.iter().map(|work| Elapsed::of(work, mode, setting)).collect();
        Units {
            host_ns: elapsed.iter().map(Elapsed::host_ns).collect(),
            outside_ns: elapsed.iter().map(Elapsed::outside_host_ns).collect(),
        }
    }

    fn mean(values: &[f64]) -> f64 {
        values.iter().sum::<f64>() / values.len().max(1) as f64
    }

    pub fn host_mean_ns(&self) -> f64 {
        Self::mean(&self.host_ns)
    }

    pub fn outside_mean_ns(&self) -> f64 {
        Self::mean(&self.outside_ns)
    }

    /// The workload's run time with overlapped I/O and compute (`compute_ns` per unit).
    pub fn measured_parallel_ns(&self, compute_ns: f64) -> f64 {
        let count = self.host_ns.len();
        assert_eq!(count, self.outside_ns.len(), "one host and one outside time per unit");
        assert!(count >= 1, "at least one unit");
        // Read 0 is issued at 0; the host is busy issuing it for H_0.
        let mut io_done_ns = self.host_ns[0] + self.outside_ns[0];
        let mut compute_end_ns = self.host_ns[0];
        for unit in 0..count {
            let wait_end_ns = io_done_ns.max(compute_end_ns);
            let compute_start_ns = match unit + 1 < count {
                true => {
                    let issued_ns = wait_end_ns + self.host_ns[unit + 1];
                    io_done_ns = issued_ns + self.outside_ns[unit + 1];
                    issued_ns
                }
                false => wait_end_ns,
            };
            compute_end_ns = compute_start_ns + compute_ns;
        }
        compute_end_ns
    }

    /// Eq. (3) (conventional: H = TFS_host + Tdriver, M = Tmedia + Ttrans) or Eq. (4) (FSOC:
    /// H = Tstub, M = TFS_FSOC + Tmedia + Ttrans) with the mean parameters, Tcomp_serial = 0.
    pub fn predicted_parallel_ns(&self, compute_ns: f64) -> f64 {
        let count = self.host_ns.len() as f64;
        let (host, outside) = (self.host_mean_ns(), self.outside_mean_ns());
        count * host + outside + compute_ns + (count - 1.0) * compute_ns.max(outside)
    }

    /// Eq. (1) or (2): nothing overlaps.
    pub fn predicted_serial_ns(&self, compute_ns: f64) -> f64 {
        self.host_ns.len() as f64 * (self.host_mean_ns() + self.outside_mean_ns() + compute_ns)
    }
}

/// Counts each 4 KiB read of the file in both modes: (FSOC, conventional), one `Work` per unit.
/// The opening lookup is part of unit 0.
pub fn count_units(config: &Table2Config, directory: &Path) -> Result<(Vec<Work>, Vec<Work>), BenchError> {
    let serve = super::harness::quiet_serve_config();
    let chip = OnChip::start(&config.sim_config(), serve, &directory.join("model-9p.sock"))?;
    let mut host = Conventional::start(&config.sim_config(), &directory.join("model-raw.sock"))?;
    let data = contents(1, config.read_bytes);
    let units = config.read_bytes / READ_UNIT_BYTES;
    chip.write_in_order("/big", &data).map_err(io_setup("setup"))?;
    {
        let fs = host.fs();
        let write = |fs: &mut fsoc_core::FileSystem<fsoc_serve::RemoteFlash>| -> Result<(), fsoc_core::FsError> {
            let flags = fsoc_core::OpenFlags { read: true, write: true, create: true, ..Default::default() };
            let fd = fs.open(b"/big", flags, 0o644)?;
            fs.pwrite(fd, 0, &data)?;
            fs.close(fd)?;
            fs.commit()
        };
        write(fs).map_err(|error| setup("setup")(error.to_string()))?;
    }
    host.remount()?;

    let mut fsoc = Vec::with_capacity(units);
    let (mut traffic, mut chips) = chip.reading();
    let file = chip.client().open("/big").map_err(io_setup("open"))?;
    let mut buffer = vec![0u8; READ_UNIT_BYTES];
    for unit in 0..units {
        let offset = unit * READ_UNIT_BYTES;
        let read = file.read_at(&mut buffer, offset as u64).map_err(io_setup("read"))?;
        if read != READ_UNIT_BYTES || buffer[..] != data[offset..offset + READ_UNIT_BYTES] {
            return Err(io_setup("read")(io::Error::other(format!("unit {unit} read back wrong"))));
        }
        let (traffic_after, chips_after) = chip.reading();
        let calls = if unit == 0 { 2 } else { 1 };
        fsoc.push(Work { traffic: traffic_after.since(&traffic), chips: chips_after.since(&chips), fs_calls: calls });
        (traffic, chips) = (traffic_after, chips_after);
    }
    drop(file);

    let mut conventional = Vec::with_capacity(units);
    let (mut traffic, mut chips) = host.reading();
    let (inode, _) = host.fs().stat(b"/big").map_err(|error| setup("stat")(error.to_string()))?;
    for unit in 0..units {
        let offset = unit * READ_UNIT_BYTES;
        let bytes =
            host.fs().read(inode, offset as u64, READ_UNIT_BYTES).map_err(|error| setup("read")(error.to_string()))?;
        assert_eq!(bytes, data[offset..offset + READ_UNIT_BYTES], "unit {unit}");
        let (traffic_after, chips_after) = host.reading();
        let calls = if unit == 0 { 2 } else { 1 };
        conventional.push(Work {
            traffic: traffic_after.since(&traffic),
            chips: chips_after.since(&chips),
            fs_calls: calls,
        });
        (traffic, chips) = (traffic_after, chips_after);
    }
    Ok((fsoc, conventional))
}

fn relative_error(predicted: f64, measured: f64) -> f64 {
    (predicted - measured) / measured
}

/// One sweep of compute per read under `setting`; `compute_cycles` in host cycles.
fn sweep(fsoc: &[Work], conventional: &[Work], setting: &Setting, compute_cycles: &[f64]) -> Value {
    let on_chip = Units::of(fsoc, Mode::OnChip, setting);
    let host = Units::of(conventional, Mode::Conventional, setting);
    let mut error_max: f64 = 0.0;
    let points: Vec<Value> = compute_cycles
        .iter()
        .map(|&cycles| {
            let compute_ns = setting.host_ns(cycles);
            let mut point = json!({ "compute_cycles": cycles, "compute_ms": compute_ns / 1e6 });
            for (name, units) in [("fsoc", &on_chip), ("conventional", &host)] {
                let (measured, predicted) =
                    (units.measured_parallel_ns(compute_ns), units.predicted_parallel_ns(compute_ns));
                let error = relative_error(predicted, measured);
                error_max = error_max.max(error.abs());
                point[name] = json!({
                    "measured_ms": measured / 1e6,
                    "predicted_ms": predicted / 1e6,
                    "error": error,
                    "serial_predicted_ms": units.predicted_serial_ns(compute_ns) / 1e6,
                });
            }
            point
        })
        .collect();
    let parameters = |units: &Units| {
        json!({
            "host_ms_per_unit": units.host_mean_ns() / 1e6,
            "outside_host_ms_per_unit": units.outside_mean_ns() / 1e6,
        })
    };
    // The model's crossover: the compute per unit above which FSOC runs the workload sooner.
    let crossover_ms = crossover_ns(&on_chip, &host).map(|ns| ns / 1e6);
    json!({
        "setting": setting.name,
        "host_clock_mhz": setting.host_clock_hz / 1e6,
        "device_clock_mhz": setting.device_clock_hz / 1e6,
        "units": on_chip.host_ns.len(),
        "parameters": { "fsoc": parameters(&on_chip), "conventional": parameters(&host) },
        "crossover_compute_ms": crossover_ms,
        "error_abs_max": error_max,
        "points": points,
    })
}

/// Where Eq. (4) first falls below Eq. (3) as compute per unit grows (bisection; the
/// difference only falls once compute passes the conventional I/O time).
fn crossover_ns(on_chip: &Units, host: &Units) -> Option<f64> {
    let difference = |compute: f64| on_chip.predicted_parallel_ns(compute) - host.predicted_parallel_ns(compute);
    let mut high = 4.0 * on_chip.outside_mean_ns().max(host.outside_mean_ns()) + 1.0;
    if difference(high) >= 0.0 {
        return None;
    }
    let mut low = 0.0;
    if difference(low) < 0.0 {
        return Some(0.0);
    }
    for _ in 0..100 {
        let middle = (low + high) / 2.0;
        if difference(middle) < 0.0 {
            high = middle;
        } else {
            low = middle;
        }
    }
    Some(high)
}

/// Both sweeps: compute per read under each of `settings` (Figs. 7 and 11), and the seed's
/// host clocks (Fig. 12).
pub fn run(
    config: &Table2Config,
    settings: &[Setting],
    directory: &Path,
    progress: &mut dyn FnMut(&str),
) -> Result<Value, BenchError> {
    progress("performance model: counting each read");
    let (fsoc, conventional) = count_units(config, directory)?;
    let compute_sweeps: Vec<Value> = settings
        .iter()
        .map(|setting| {
            let io_ns = Units::of(&conventional, Mode::Conventional, setting).outside_mean_ns();
            let cycles: Vec<f64> = COMPUTE_FRACTIONS
                .iter()
                .map(|fraction| (fraction * io_ns * setting.host_clock_hz / 1e9).round())
                .collect();
            sweep(&fsoc, &conventional, setting, &cycles)
        })
        .collect();
    let seed = Setting::seed();
    let io_ns = Units::of(&conventional, Mode::Conventional, &seed).outside_mean_ns();
    let cycles: Vec<f64> =
        COMPUTE_FRACTIONS.iter().map(|fraction| (fraction * io_ns * seed.host_clock_hz / 1e9).round()).collect();
    let clock_sweeps: Vec<Value> = HOST_CLOCKS_MHZ
        .iter()
        .map(|mhz| {
            let setting = Setting { host_clock_hz: mhz * 1e6, ..seed };
            sweep(&fsoc, &conventional, &setting, &cycles)
        })
        .collect();
    let error_max = compute_sweeps
        .iter()
        .chain(&clock_sweeps)
        .filter_map(|sweep| sweep["error_abs_max"].as_f64())
        .fold(0.0, f64::max);
    Ok(json!({
        "read_bytes": config.read_bytes,
        "unit_bytes": READ_UNIT_BYTES,
        "compute_fractions_of_conventional_io": COMPUTE_FRACTIONS,
        "compute_sweeps": compute_sweeps,
        "host_clock_sweeps": clock_sweeps,
        "error_abs_max": error_max,
        "targets": { "error_abs_max": 0.05 },
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    // With every unit alike, the played-out schedule is Eq. (3) exactly, in each phase.
    #[test]
    fn equal_units_give_the_equations() {
        let units = Units { host_ns: vec![1.0; 3], outside_ns: vec![1.0; 3] };
        // The seed's Fig. 5: N = 3, Tcomp = 3, every other parameter 1, Tcomp_serial 0:
        // 3 × 1 + 1 + 3 + 2 × max(3, 1) = 13.
        assert_eq!(units.measured_parallel_ns(3.0), 13.0);
        for compute in [0.0, 0.5, 1.0, 2.0, 7.0] {
            assert_eq!(units.measured_parallel_ns(compute), units.predicted_parallel_ns(compute), "{compute}");
        }
        assert_eq!(units.predicted_serial_ns(3.0), 15.0);
    }

    // One slow unit: the model, which spreads it over all units, is hidden where compute
    // dominates, so it errs by the slow unit's excess there, and not at all when I/O dominates.
    #[test]
    fn a_slow_first_unit_is_where_the_model_errs() {
        let units = Units { host_ns: vec![1.0; 4], outside_ns: vec![9.0, 1.0, 1.0, 1.0] };
        let io_bound = 0.0;
        assert_eq!(units.measured_parallel_ns(io_bound), units.predicted_parallel_ns(io_bound));
        let compute_bound = 10.0;
        assert!(units.predicted_parallel_ns(compute_bound) < units.measured_parallel_ns(compute_bound));
    }
}
