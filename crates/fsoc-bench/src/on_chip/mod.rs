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
//! `run_all` runs them all into one report (`fsoc bench fsoc`).

use std::path::Path;

use serde_json::{json, Value};

use crate::target::BenchError;

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
