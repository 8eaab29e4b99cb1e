//! Seed 000's experiments (section 5): the file system on the chip (fsoc serve, 9P2000.L)
//! against the conventional device (raw pages: fsoc serve --raw, the host running fsoc), both
//! on the same simulated chips, every figure computed from counted quantities.
//!
//! - `traffic`: Fig. 15, bytes on the bus per file operation (counted frames).
//! - `table2`: Table 2, elapsed time of a 1 MiB read, 500 creates and an Andrew-like copy.
//! - `model`: the performance model, Eqs. (1)–(4), against the read-then-compute workload.
//! - `queue_depth`: 4 KiB random reads over 9P on 4 chips at depths 1, 4 and 32.
//! - `cost`: the bus and CPU model that turns counts into time.
//! - `harness`: the two devices, each with its chips behind a meter.
//!
//! - `charts`: the two SVG charts of a report (the model; Table 2 and the queue depth).
//!
//! `run_all` runs them all into one report; `measure` runs it as `fsoc bench fsoc` and
//! `fsoc report` do, with a caller's `SettingOptions`, in a temporary directory.

use std::path::Path;

use serde_json::{json, Value};

use crate::target::BenchError;

pub mod charts;
pub mod cost;
pub mod harness;
pub mod model;
pub mod queue_depth;
pub mod table2;
pub mod traffic;

pub use traffic::{run, OnChipConfig, Regime, OPERATIONS};

/// Everything `fsoc bench fsoc` runs.
#[derive(Clone, Debug)]
pub struct FsocBenchConfig {
    pub traffic: OnChipConfig,
    pub table2: Table2Config,
    pub queue_depth: QueueDepthConfig,
    /// The settings Table 2 and the model are computed under (the first is the seed's).
    pub settings: Vec<Setting>,
    /// The setting of the queue-depth device (its CPU; its bus only for the bus-limited rate).
    pub queue_setting: Setting,
}

pub use cost::Setting;
pub use queue_depth::QueueDepthConfig;
pub use table2::Table2Config;

impl FsocBenchConfig {
    pub fn full(seed: u64) -> FsocBenchConfig {
        FsocBenchConfig {
            traffic: OnChipConfig::full(seed),
            table2: Table2Config::full(seed),
            queue_depth: QueueDepthConfig::full(seed),
            settings: vec![Setting::seed(), Setting::modern()],
            queue_setting: Setting::modern(),
        }
    }

    pub fn quick(seed: u64) -> FsocBenchConfig {
        FsocBenchConfig {
            traffic: OnChipConfig::quick(seed),
            table2: Table2Config::quick(seed),
            queue_depth: QueueDepthConfig::quick(seed),
            ..FsocBenchConfig::full(seed)
        }
    }
}

/// What a caller (`fsoc bench fsoc`'s options) may change in the settings.
#[derive(Clone, Copy, Debug, Default)]
pub struct SettingOptions {
    pub bus_mb_s: Option<f64>,
    pub bus_latency_us: Option<f64>,
    pub host_mhz: Option<f64>,
    pub device_mhz: Option<f64>,
    pub cycles_per_call: Option<f64>,
    pub cycles_per_page: Option<f64>,
    pub cycles_per_message: Option<f64>,
}

impl SettingOptions {
    /// The CPU costs apply to every setting; a bus or clock option adds a `custom` setting
    /// (the modern one with those values changed).
    fn apply(&self, config: &mut FsocBenchConfig) {
        let cpu_of = |setting: &mut Setting| {
            setting.cpu.cycles_per_call = self.cycles_per_call.unwrap_or(setting.cpu.cycles_per_call);
            setting.cpu.cycles_per_page = self.cycles_per_page.unwrap_or(setting.cpu.cycles_per_page);
            setting.cpu.cycles_per_message = self.cycles_per_message.unwrap_or(setting.cpu.cycles_per_message);
        };
        config.settings.iter_mut().for_each(cpu_of);
        cpu_of(&mut config.queue_setting);
        if self.bus_mb_s.is_some()
            || self.bus_latency_us.is_some()
            || self.host_mhz.is_some()
            || self.device_mhz.is_some()
        {
            let mut custom =
                Setting { name: "custom", ..config.settings.last().copied().unwrap_or_else(Setting::modern) };
            custom.bus.bandwidth_bytes_per_s = self.bus_mb_s.map_or(custom.bus.bandwidth_bytes_per_s, |mb| mb * 1e6);
            custom.bus.latency_per_message_ns =
                self.bus_latency_us.map_or(custom.bus.latency_per_message_ns, |us| us * 1e3);
            custom.host_clock_hz = self.host_mhz.map_or(custom.host_clock_hz, |mhz| mhz * 1e6);
            custom.device_clock_hz = self.device_mhz.map_or(custom.device_clock_hz, |mhz| mhz * 1e6);
            config.settings.push(custom);
            config.queue_setting = custom;
        }
    }
}

/// Runs the benchmark (in a temporary directory it removes) and returns its configuration and
/// JSON report; `progress` receives one line per step.
pub fn measure(
    quick: bool,
    seed: u64,
    options: &SettingOptions,
    progress: &mut dyn FnMut(&str),
) -> Result<(FsocBenchConfig, Value), BenchError> {
    let mut config = if quick { FsocBenchConfig::quick(seed) } else { FsocBenchConfig::full(seed) };
    options.apply(&mut config);
    let directory = std::env::temp_dir().join(format!("fsoc-bench-fsoc-{}", std::process::id()));
    std::fs::create_dir(&directory).map_err(|error| BenchError::Setup(format!("{}: {error}", directory.display())))?;
    let report = run_all(&config, &directory, progress);
    let _ = std::fs::remove_dir_all(&directory);
    Ok((config, report?))
}

/// Fig. 15, Table 2, the performance model and the queue-depth sweep, one report.
pub fn run_all(
    config: &FsocBenchConfig,
    directory: &Path,
    progress: &mut dyn FnMut(&str),
) -> Result<Value, BenchError> {
    let fig15 = traffic::run(&config.traffic, directory, progress)?;
    let table2 = table2::run(&config.table2, &config.settings, directory, progress)?;
    let model = model::run(&config.table2, &config.settings, directory, progress)?;
    let queue_depth = queue_depth::run(&config.queue_depth, &config.queue_setting, directory, progress)?;
    let settings: serde_json::Map<String, Value> = config
        .settings
        .iter()
        .chain([&config.queue_setting])
        .map(|setting| (setting.name.to_string(), setting.to_json()))
        .collect();
    Ok(json!({
        "settings": settings,
        "cost_model": "elapsed = bus (bytes / bandwidth + frames × latency) + simulated chip time + CPU cycles / clock, \
                       cycles = calls × cycles_per_call + pages × cycles_per_page + frames × cycles_per_message; \
                       the file system's cycles run on the side of the bus it lives on",
        "fig15": fig15,
        "table2": table2,
        "model": model,
        "queue_depth": queue_depth,
    }))
}
