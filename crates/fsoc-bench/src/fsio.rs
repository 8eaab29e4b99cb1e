//! The file-operation benchmark of seed 003 (Datalight FSIO, as in the Reliance Nitro paper):
//! create, open and delete 15 samples of 133 files, timing each sample.
//!
//! The paper's results depend "on the number of files in the directory" and distinguish
//! "fewer than 133 files in the directory" from a "higher range", so the samples accumulate in
//! one directory: all samples are created (the directory grows to 15 × 133 = 1995 files),
//! then opened sample by sample, then deleted sample by sample (it shrinks back to empty).
//! The paper states no file size; we use 1 KiB (`FILE_SIZE_BYTES`).
//!
//! Durability: every create and every delete is committed before the next operation starts
//! (fsoc: fsync / transact; littlefs: its own close and remove commits). Opens read nothing.

use std::time::Instant;

use fsoc_media::rng::SeededRng;
use serde_json::{json, Map, Value};
use std::fmt::Write as _;

use fsoc_core::FsConfig;

use crate::fsoc::FsocTarget;
use crate::littlefs::{LittlefsConfig, LittlefsTarget};
use crate::svg_chart::{self, LogScale};
use crate::target::{BenchDevice, BenchError, BenchTarget, Durability, Measurement, Snapshot};

pub const SAMPLE_COUNT: u32 = 15;
pub const FILES_PER_SAMPLE: u32 = 133;
pub const FILE_SIZE_BYTES: usize = 1024;
/// The benchmark directory (created before measuring).
const DIRECTORY: &str = "/fsio";

/// The three measured operations, in the order the benchmark runs them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FsioOperation {
    Create,
    Open,
    Delete,
}

impl FsioOperation {
    pub const ALL: [FsioOperation; 3] = [FsioOperation::Create, FsioOperation::Open, FsioOperation::Delete];

    pub fn name(self) -> &'static str {
        match self {
            FsioOperation::Create => "create",
            FsioOperation::Open => "open",
            FsioOperation::Delete => "delete",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct FsioConfig {
    pub sample_count: u32,
    pub files_per_sample: u32,
    pub file_size_bytes: usize,
    pub device: BenchDevice,
    pub fsoc: FsConfig,
    pub littlefs: LittlefsConfig,
    /// Reads every file back (unmeasured, between the open and delete phases) and compares it.
    pub verify_contents: bool,
}

impl FsioConfig {
    /// The full benchmark: 15 × 133 files of 1 KiB on one 512 MiB MLC chip.
    ///
    /// Why 512 MiB (4096 blocks of 128 KiB): a 1 KiB file is above littlefs's inline limit
    /// (at most 1022 bytes, 512 with the benchmark's metadata_max), so littlefs gives each
    /// file its own erase block; 1995 files need 1995 blocks, more than a 64 MiB device
    /// (512 blocks) has.
    pub fn full(seed: u64) -> FsioConfig {
        FsioConfig {
            sample_count: SAMPLE_COUNT,
            files_per_sample: FILES_PER_SAMPLE,
            file_size_bytes: FILE_SIZE_BYTES,
            device: BenchDevice::littlefs_mlc_chip(seed),
            fsoc: FsConfig::default(),
            littlefs: LittlefsConfig::BENCHMARK,
            verify_contents: false,
        }
    }

    fn path(&self, sample_index: u32, file_index: u32) -> String {
        format!("{DIRECTORY}/s{sample_index:02}f{file_index:03}.dat")
    }

    /// Deterministic contents of one file, different for every file and seed.
    fn contents(&self, sample_index: u32, file_index: u32) -> Vec<u8> {
        // Random bytes defeat any compression or dedup a target might do.
        let file_seed = self.device.seed ^ (u64::from(sample_index) << 32 | u64::from(file_index));
        SeededRng::new(file_seed).bytes(self.file_size_bytes)
    }

    pub fn to_json(&self) -> Value {
        json!({
            "sample_count": self.sample_count,
            "files_per_sample": self.files_per_sample,
            "file_size_bytes": self.file_size_bytes,
            "directory": DIRECTORY,
            "order": "create all samples (directory grows to sample_count × files_per_sample), \
                      then open each sample, then delete each sample",
            "durability": "each create and each delete committed before the next operation",
            "open": "open for reading and close, no data read",
        })
    }
}

/// One target's results: per operation, one measurement per sample, and wall time per phase.
#[derive(Clone, Debug, Default)]
pub struct FsioResult {
    pub samples: [Vec<Measurement>; 3],
    pub wall_ms: [f64; 3],
}

impl FsioResult {
    pub fn total(&self, operation: FsioOperation) -> Measurement {
        let mut total = Measurement::default();
        self.samples[operation as usize].iter().for_each(|sample| total.add(sample));
        total
    }

    fn to_json(&self) -> Value {
        let mut operations = Map::new();
        for operation in FsioOperation::ALL {
            let samples = self.samples[operation as usize].iter().map(Measurement::to_json).collect();
            operations.insert(operation.name().to_owned(), Value::Array(samples));
        }
        Value::Object(operations)
    }
}

/// Runs the benchmark on one target.
pub fn run_target<T: BenchTarget>(
    config: &FsioConfig,
    settings: &T::Settings,
    progress: &mut dyn FnMut(&str),
) -> Result<FsioResult, BenchError> {
    let mut target = T::format(config.device.create()?, config.device.seed, settings)?;
    target.create_directory(DIRECTORY)?;
    target.commit()?;
    let mut result = FsioResult::default();
    for operation in FsioOperation::ALL {
        progress(&format!("{}: {}", T::NAME, operation.name()));
        let wall_start = Instant::now();
        for sample_index in 0..config.sample_count {
            let before = Snapshot::take(&mut target);
            for file_index in 0..config.files_per_sample {
                let path = config.path(sample_index, file_index);
                match operation {
                    FsioOperation::Create => {
                        let contents = config.contents(sample_index, file_index);
                        target.create_file(&path, &contents, Durability::Commit)?
                    }
                    FsioOperation::Open => target.open_file(&path)?,
                    FsioOperation::Delete => target.delete_file(&path, Durability::Commit)?,
                }
            }
            let after = Snapshot::take(&mut target);
            result.samples[operation as usize].push(before.delta(&after));
        }
        result.wall_ms[operation as usize] = wall_start.elapsed().as_secs_f64() * 1e3;
        if operation == FsioOperation::Open && config.verify_contents {
            verify::<T>(config, &mut target)?;
        }
    }
    target.unmount()?;
    Ok(result)
}

fn verify<T: BenchTarget>(config: &FsioConfig, target: &mut T) -> Result<(), BenchError> {
    for sample_index in 0..config.sample_count {
        for file_index in 0..config.files_per_sample {
            let path = config.path(sample_index, file_index);
            let expected = config.contents(sample_index, file_index);
            let actual = target.read_file(&path, config.file_size_bytes + 1)?;
            if actual != expected {
                return Err(BenchError::ContentMismatch {
                    target: T::NAME,
                    path,
                    expected_bytes: expected.len(),
                    actual_bytes: actual.len(),
                });
            }
        }
    }
    Ok(())
}

fn ratio(numerator: u64, denominator: u64) -> Value {
    if denominator == 0 {
        return Value::Null;
    }
    json!(numerator as f64 / denominator as f64)
}

/// Runs fsoc and littlefs and builds the report (see the crate documentation for its shape).
pub fn run(config: &FsioConfig, progress: &mut dyn FnMut(&str)) -> Result<Value, BenchError> {
    if config.sample_count == 0 || config.files_per_sample == 0 || config.files_per_sample > 1000 {
        return Err(BenchError::InvalidConfig {
            reason: format!("{} samples of {} files", config.sample_count, config.files_per_sample),
        });
    }
    let fsoc = run_target::<FsocTarget>(config, &config.fsoc, progress)?;
    let littlefs = run_target::<LittlefsTarget>(config, &config.littlefs, progress)?;

    let mut totals = Map::new();
    let mut wall_ms = Map::new();
    for (name, result) in [(FsocTarget::NAME, &fsoc), (LittlefsTarget::NAME, &littlefs)] {
        let mut per_operation = Map::new();
        let mut wall_per_operation = Map::new();
        for operation in FsioOperation::ALL {
            per_operation.insert(operation.name().to_owned(), result.total(operation).to_json());
            wall_per_operation.insert(operation.name().to_owned(), json!(result.wall_ms[operation as usize]));
        }
        totals.insert(name.to_owned(), Value::Object(per_operation));
        wall_ms.insert(name.to_owned(), Value::Object(wall_per_operation));
    }
    let mut ratios = Map::new();
    for operation in FsioOperation::ALL {
        let (ours, theirs) = (fsoc.total(operation), littlefs.total(operation));
        ratios.insert(
            operation.name().to_owned(),
            json!({
                "sim_us": ratio(ours.sim_ns, theirs.sim_ns),
                "reads": ratio(ours.reads, theirs.reads),
                "programs": ratio(ours.programs, theirs.programs),
                "erases": ratio(ours.erases, theirs.erases),
            }),
        );
    }
    let file_count = u64::from(config.sample_count) * u64::from(config.files_per_sample);
    let program_busy_ns = config.device.sim_config().program_busy_ns();
    Ok(json!({
        "fs": {
            FsocTarget::NAME: fsoc.to_json(),
            LittlefsTarget::NAME: littlefs.to_json(),
        },
        "config": {
            "benchmark": "fsio (seed 003: create/open/delete, 15 samples of 133 files)",
            "device": config.device.to_json(),
            "workload": config.to_json(),
            FsocTarget::NAME: FsocTarget::settings_json(&config.fsoc),
            LittlefsTarget::NAME: LittlefsTarget::settings_json(&config.littlefs),
        },
        "summary": {
            "totals": totals,
            "ratio_fsoc_over_littlefs": ratios,
            "ratio_note": "fsoc ÷ littlefs; below 1 means fsoc is better",
            "time_note": "simulated time is flash time only (CPU is not modelled): an operation \
                          served from RAM caches costs 0",
            // The physical floor of a durable 1 KiB create on one chip: one page program.
            "limit_create_sim_us": file_count * program_busy_ns / 1_000,
            "limit_note": "create: one page program per file on one chip (chips × page ÷ program time)",
            "wall_ms": wall_ms,
        },
    }))
}

/// The README rows (STYLE §10) for an fsio report: one row per operation with simulated
/// seconds for all samples, the fsoc ÷ littlefs ratio and, for creates, the physical limit.
pub fn markdown_table(report: &Value) -> String {
    let device = &report["config"]["device"];
    let workload = &report["config"]["workload"];
    let title = format!(
        "fsio {} × {} files of {} B ({}, {} KiB pages, {} chip, seed {})",
        workload["sample_count"],
        workload["files_per_sample"],
        workload["file_size_bytes"],
        device["profile"].as_str().unwrap_or("?").to_uppercase(),
        device["page_size_bytes"].as_u64().unwrap_or(0) / 1024,
        device["chip_count"],
        device["seed"],
    );
    let seconds = |fs: &str, operation: &str| {
        report["summary"]["totals"][fs][operation]["sim_us"].as_u64().map_or(f64::NAN, |us| us as f64 / 1e6)
    };
    let mut table =
        format!("| {title} | fsoc (s) | littlefs (s) | fsoc/littlefs | limit (s) |\n|---|---|---|---|---|\n");
    for operation in FsioOperation::ALL {
        let ratio = report["summary"]["ratio_fsoc_over_littlefs"][operation.name()]["sim_us"].as_f64();
        let limit = match operation {
            FsioOperation::Create => report["summary"]["limit_create_sim_us"]
                .as_u64()
                .map_or("–".to_owned(), |us| format!("{:.2}", us as f64 / 1e6)),
            _ => "–".to_owned(),
        };
        table += &format!(
            "| {} | {:.2} | {:.2} | {} | {} |\n",
            operation.name(),
            seconds(FsocTarget::NAME, operation.name()),
            seconds(LittlefsTarget::NAME, operation.name()),
            ratio.map_or("–".to_owned(), |ratio| format!("{ratio:.3}")),
            limit,
        );
    }
    table
}

/// Seed 003's three graphs: simulated time of each sample of 133 files (create, open, delete)
/// for fsoc and littlefs, on a log scale (the directory grows over the create samples and
/// shrinks over the delete samples).
pub fn chart(report: &Value) -> String {
    const PANEL_WIDTH: f64 = 260.0;
    const PANEL_HEIGHT: f64 = 220.0;
    const LEFT: f64 = 60.0;
    const GAP: f64 = 70.0;
    const TOP: f64 = 50.0;
    let samples = |fs: &str, op: &str| -> Vec<f64> {
        report["fs"][fs][op]
            .as_array()
            .map(|samples| samples.iter().map(|sample| sample["sim_us"].as_f64().unwrap_or(0.0) / 1e3).collect())
            .unwrap_or_default()
    };
    let width = LEFT + 3.0 * (PANEL_WIDTH + GAP);
    let mut svg = String::new();
    svg_chart::begin(&mut svg, width, TOP + PANEL_HEIGHT + 70.0);
    let _ = writeln!(
        svg,
        r#"<text x="{LEFT}" y="22" font-size="15">fsio (seed 003): simulated time per sample of {} files, fsoc and littlefs (log scale)</text>"#,
        report["config"]["workload"]["files_per_sample"].as_u64().unwrap_or(133)
    );
    for (index, op) in ["create", "open", "delete"].into_iter().enumerate() {
        let left = LEFT + index as f64 * (PANEL_WIDTH + GAP);
        let series = [("fsoc", "#1f77b4", samples("fsoc", op)), ("littlefs", "#d62728", samples("littlefs", op))];
        let positive = series.iter().flat_map(|(_, _, values)| values.iter().copied()).filter(|value| *value > 0.0);
        let (low, high) =
            positive.fold((f64::INFINITY, 0.0f64), |(low, high), value| (low.min(value), high.max(value)));
        let (low, high) = if high > 0.0 { (low, high * 1.3) } else { (0.01, 10.0) };
        let axis = LogScale::new(low, high, TOP, PANEL_HEIGHT);
        let count = series.iter().map(|(_, _, values)| values.len()).max().unwrap_or(1).max(2);
        let x_of = |sample: usize| left + PANEL_WIDTH * sample as f64 / (count - 1) as f64;
        svg_chart::frame(&mut svg, left, TOP, PANEL_WIDTH, PANEL_HEIGHT);
        axis.grid(&mut svg, left, PANEL_WIDTH);
        svg_chart::label(&mut svg, left + PANEL_WIDTH / 2.0, TOP - 8.0, "middle", &format!("{op} (ms per sample)"));
        svg_chart::label(&mut svg, left + PANEL_WIDTH / 2.0, TOP + PANEL_HEIGHT + 16.0, "middle", "sample");
        for (name, color, values) in &series {
            // A sample that cost no simulated time (served from RAM) sits on the axis floor.
            let points: Vec<(f64, f64)> =
                values.iter().enumerate().map(|(sample, ms)| (x_of(sample), axis.y(ms.max(low)))).collect();
            svg_chart::series(&mut svg, &points, color, 2.0);
            if let Some(&(x, y)) = points.last() {
                let _ = writeln!(
                    svg,
                    r#"<text x="{:.1}" y="{:.1}" fill="{color}" text-anchor="end">{name}</text>"#,
                    x - 2.0,
                    y - 6.0
                );
            }
        }
    }
    svg_chart::label(
        &mut svg,
        LEFT,
        TOP + PANEL_HEIGHT + 50.0,
        "start",
        "each create and delete committed before the next (fsoc: fsync / transact; littlefs: its close and remove)",
    );
    svg_chart::end(&mut svg);
    svg
}

#[cfg(test)]
mod tests {
    use super::*;

    // Three panels (create, open, delete), each with fsoc's and littlefs's samples; a sample
    // that cost no simulated time sits on the floor instead of breaking the log scale.
    #[test]
    fn fsio_chart_draws_three_panels_of_both_file_systems() {
        let samples = |values: &[f64]| -> Value { values.iter().map(|us| serde_json::json!({"sim_us": us})).collect() };
        let target = |create: &[f64], open: &[f64], delete: &[f64]| serde_json::json!({"create": samples(create), "open": samples(open), "delete": samples(delete)});
        let report = serde_json::json!({
            "config": {"workload": {"files_per_sample": 133}},
            "fs": {
                "fsoc": target(&[250e3, 260e3, 270e3], &[1e3, 0.0, 1.2e3], &[120e3, 110e3, 115e3]),
                "littlefs": target(&[5e6, 6e6, 7e6], &[150e3, 400e3, 900e3], &[1.2e6, 1.3e6, 1.2e6]),
            },
        });
        let svg = chart(&report);
        assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"), "{svg}");
        assert_eq!(svg.matches("<polyline").count(), 6, "{svg}");
        assert_eq!(svg.matches("<circle").count(), 18, "{svg}");
        assert!(!svg.contains("NaN") && !svg.contains("inf"), "{svg}");
        assert!(svg.contains("open (ms per sample)") && svg.contains(">littlefs<"), "{svg}");
    }
}
