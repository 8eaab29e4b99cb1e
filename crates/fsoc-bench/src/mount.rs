//! Mount cost against file count (seed 001 Fig. 6; seed 003's "mount in 3–5 block reads").
//!
//! For each file count N: format a fresh device, create N empty files in directories of
//! `FILES_PER_DIRECTORY` (`/d000/f00000`, ...), committing after each directory, unmount,
//! reset the counters, mount, and record the page reads and simulated time of the mount.

use fsoc_media::FlashStats;
use std::fmt::Write as _;
use std::time::Instant;

use fsoc_media::{Flash, SimFlash};
use serde_json::{json, Value};

use fsoc_core::FsConfig;

use crate::fsoc::FsocTarget;
use crate::littlefs::{LittlefsConfig, LittlefsTarget};
use crate::svg_chart::{self, LogScale};
use crate::target::{BenchDevice, BenchError, BenchTarget, Durability, Snapshot};

pub const FILES_PER_DIRECTORY: u64 = 1000;
/// Largest file count run on littlefs. Creating the files is what is slow (each create walks
/// its directory's metadata pairs): 10,000 files take about 18 s of wall time in a debug
/// build, 100,000 about ten times that, so the default stops at 10,000.
pub const LITTLEFS_FILES_MAX: u64 = 10_000;
/// Upper bound on one run's file count (the device holds far more empty files, but the
/// benchmark's run time grows with it).
pub const FILES_MAX: u64 = 1_000_000;

#[derive(Clone, Debug, PartialEq)]
pub struct MountConfig {
    pub files: Vec<u64>,
    pub device: BenchDevice,
    pub fsoc: FsConfig,
    pub littlefs: LittlefsConfig,
    pub littlefs_files_max: u64,
}

impl MountConfig {
    /// One 512 MiB MLC chip, the fsio device: 100,000 empty files are only tree entries for
    /// fsoc and inline entries in metadata pairs for littlefs.
    pub fn new(files: &[u64], seed: u64) -> MountConfig {
        MountConfig {
            files: files.to_vec(),
            device: BenchDevice::littlefs_mlc_chip(seed),
            fsoc: FsConfig::default(),
            littlefs: LittlefsConfig::BENCHMARK,
            littlefs_files_max: LITTLEFS_FILES_MAX,
        }
    }
}

/// What one mount cost.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MountMeasurement {
    pub files: u64,
    pub page_reads: u64,
    pub programs: u64,
    pub sim_ns: u64,
    /// Simulated time to create the files (not part of the mount), for context.
    pub populate_sim_ns: u64,
}

impl MountMeasurement {
    fn to_json(self) -> Value {
        json!({
            "files": self.files,
            "page_reads": self.page_reads,
            "programs": self.programs,
            "sim_us": self.sim_ns / 1_000,
            "populate_sim_us": self.populate_sim_ns / 1_000,
        })
    }
}

/// Creates `file_count` empty files, remounts, and measures the mount on one target.
pub fn measure<T: BenchTarget>(
    device: &BenchDevice,
    settings: &T::Settings,
    file_count: u64,
) -> Result<MountMeasurement, BenchError> {
    let mut target = T::format(device.create()?, device.seed, settings)?;
    let populate_start = Snapshot::take(&mut target);
    let directory_count = file_count.div_ceil(FILES_PER_DIRECTORY);
    for directory_index in 0..directory_count {
        let directory = format!("/d{directory_index:03}");
        target.create_directory(&directory)?;
        let first = directory_index * FILES_PER_DIRECTORY;
        for file_index in first..file_count.min(first + FILES_PER_DIRECTORY) {
            target.create_file(&format!("{directory}/f{file_index:05}"), &[], Durability::Deferred)?;
        }
        target.commit()?;
    }
    let populate_end = Snapshot::take(&mut target);
    let mut flash: SimFlash = target.unmount()?;
    flash.reset_counters();
    let before_ns = flash.all_done_ns();
    let mut target = T::mount(flash, settings)?;
    let after = Snapshot::take(&mut target);
    assert_eq!(after.erases, 0, "{} erased during mount", T::NAME);
    target.unmount()?;
    Ok(MountMeasurement {
        files: file_count,
        page_reads: after.reads,
        programs: after.programs,
        sim_ns: after.now_ns - before_ns,
        populate_sim_ns: populate_end.now_ns - populate_start.now_ns,
    })
}

pub fn run(config: &MountConfig, progress: &mut dyn FnMut(&str)) -> Result<Value, BenchError> {
    if let Some(&too_many) = config.files.iter().find(|&&count| count > FILES_MAX) {
        return Err(BenchError::InvalidConfig { reason: format!("{too_many} files (at most {FILES_MAX})") });
    }
    let mut fsoc = Vec::new();
    let mut littlefs = Vec::new();
    let mut wall_ms = Vec::new();
    for &file_count in &config.files {
        progress(&format!("{}: {file_count} files", FsocTarget::NAME));
        let wall_start = Instant::now();
        fsoc.push(measure::<FsocTarget>(&config.device, &config.fsoc, file_count)?.to_json());
        let fsoc_wall_ms = wall_start.elapsed().as_secs_f64() * 1e3;
        let mut littlefs_wall_ms = Value::Null;
        if file_count <= config.littlefs_files_max {
            progress(&format!("{}: {file_count} files", LittlefsTarget::NAME));
            let wall_start = Instant::now();
            littlefs.push(measure::<LittlefsTarget>(&config.device, &config.littlefs, file_count)?.to_json());
            littlefs_wall_ms = json!(wall_start.elapsed().as_secs_f64() * 1e3);
        }
        wall_ms.push(json!({"files": file_count, "fsoc": fsoc_wall_ms, "littlefs": littlefs_wall_ms}));
    }
    Ok(json!({
        "mounts": fsoc,
        "littlefs": littlefs,
        "littlefs_skipped_above": config.littlefs_files_max,
        "config": {
            "benchmark": "mount: page reads and simulated time of one mount after N empty files",
            "device": config.device.to_json(),
            "files_per_directory": FILES_PER_DIRECTORY,
            "populate": "empty files, /dNNN/fNNNNN, one commit per directory (littlefs commits each create)",
            FsocTarget::NAME: FsocTarget::settings_json(&config.fsoc),
            LittlefsTarget::NAME: LittlefsTarget::settings_json(&config.littlefs),
        },
        "wall_ms": wall_ms,
    }))
}

/// The chart `bench mount` writes beside its JSON, from that JSON.
pub fn svg(report: &Value) -> String {
    chart(&rows(report))
}

/// One file count: fsoc's (page reads, simulated ms) and littlefs's, if it was run.
pub struct MountRow {
    pub files: u64,
    pub fsoc: (u64, f64),
    pub littlefs: Option<(u64, f64)>,
}

/// The rows of a report: one per file count, littlefs beside fsoc where it ran.
pub fn rows(report: &Value) -> Vec<MountRow> {
    let measurement =
        |value: &Value| (value["page_reads"].as_u64().unwrap_or(0), value["sim_us"].as_f64().unwrap_or(0.0) / 1e3);
    let littlefs: Vec<&Value> = report["littlefs"].as_array().map(|rows| rows.iter().collect()).unwrap_or_default();
    report["mounts"]
        .as_array()
        .map(|rows| {
            rows.iter()
                .map(|row| {
                    let files = row["files"].as_u64().unwrap_or(0);
                    let peer = littlefs
                        .iter()
                        .find(|peer| peer["files"].as_u64() == Some(files))
                        .map(|peer| measurement(peer));
                    MountRow { files, fsoc: measurement(row), littlefs: peer }
                })
                .collect()
        })
        .unwrap_or_default()
}

/// Page reads per mount against file count (both log scale), fsoc and littlefs, drawn with
/// svg_chart.rs like every benchmark chart.
pub fn chart(rows: &[MountRow]) -> String {
    const WIDTH: f64 = 640.0;
    const HEIGHT: f64 = 400.0;
    const LEFT: f64 = 70.0;
    const TOP: f64 = 50.0;
    const PANEL_WIDTH: f64 = 520.0;
    const PANEL_HEIGHT: f64 = 290.0;
    let files_max = rows.iter().map(|row| row.files).max().unwrap_or(10).max(10) as f64;
    let files_min = rows.iter().map(|row| row.files).min().unwrap_or(1).max(1) as f64;
    let reads = rows.iter().flat_map(|row| [Some(row.fsoc.0), row.littlefs.map(|(reads, _)| reads)]).flatten();
    let (reads_min, reads_max) = reads.fold((u64::MAX, 1), |(low, high), reads| (low.min(reads), high.max(reads)));
    let files_axis = LogScale::new(files_min, files_max, LEFT, PANEL_WIDTH);
    let reads_axis = LogScale::new(reads_min.clamp(1, reads_max) as f64, reads_max as f64 * 1.2, TOP, PANEL_HEIGHT);
    let mut svg = String::new();
    svg_chart::begin(&mut svg, WIDTH, HEIGHT);
    let _ = writeln!(
        svg,
        r#"<text x="{LEFT}" y="25" font-size="15">Mount cost: page reads against file count (log-log)</text>"#
    );
    svg_chart::frame(&mut svg, LEFT, TOP, PANEL_WIDTH, PANEL_HEIGHT);
    reads_axis.grid(&mut svg, LEFT, PANEL_WIDTH);
    files_axis.grid_vertical(&mut svg, TOP, PANEL_HEIGHT);
    let fsoc: Vec<(u64, u64)> = rows.iter().map(|row| (row.files, row.fsoc.0)).collect();
    let littlefs: Vec<(u64, u64)> =
        rows.iter().filter_map(|row| row.littlefs.map(|(reads, _)| (row.files, reads))).collect();
    for (index, (name, color, points)) in
        [("fsoc", "#1f77b4", fsoc), ("littlefs", "#d62728", littlefs)].into_iter().enumerate()
    {
        let coordinates: Vec<(f64, f64)> =
            points.iter().map(|&(files, reads)| (files_axis.x(files as f64), reads_axis.y(reads as f64))).collect();
        svg_chart::series(&mut svg, &coordinates, color, 3.0);
        for (&(_, reads), (x, y)) in points.iter().zip(&coordinates) {
            let _ = writeln!(svg, r#"<text x="{:.1}" y="{:.1}">{reads}</text>"#, x + 5.0, y - 5.0);
        }
        let legend_y = TOP + 18.0 + 18.0 * index as f64;
        let _ = writeln!(
            svg,
            r#"<text x="{:.1}" y="{legend_y}" fill="{color}" font-size="13">{name}</text>"#,
            LEFT + PANEL_WIDTH - 80.0
        );
    }
    let _ = writeln!(
        svg,
        r##"<text x="{:.1}" y="{:.1}" font-size="12" text-anchor="middle" fill="#555">files</text><text x="15" y="{:.1}" font-size="12" text-anchor="middle" transform="rotate(-90 15 {:.1})" fill="#555">page reads per mount</text>"##,
        LEFT + PANEL_WIDTH / 2.0,
        TOP + PANEL_HEIGHT + 34.0,
        TOP + PANEL_HEIGHT / 2.0,
        TOP + PANEL_HEIGHT / 2.0
    );
    svg_chart::end(&mut svg);
    svg
}

#[cfg(test)]
mod tests {
    use super::*;

    // The chart has both series, a value label per point and the decades of both axes.
    #[test]
    fn mount_chart_draws_both_file_systems() {
        let rows = vec![
            MountRow { files: 10, fsoc: (14, 1.0), littlefs: Some((12, 1.0)) },
            MountRow { files: 1000, fsoc: (14, 1.0), littlefs: Some((61, 2.0)) },
            MountRow { files: 100_000, fsoc: (14, 1.0), littlefs: None },
        ];
        let svg = chart(&rows);
        assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"), "{svg}");
        assert_eq!(svg.matches("<polyline").count(), 2, "{svg}");
        assert_eq!(svg.matches("<circle").count(), 5, "{svg}");
        assert!(svg.contains(">61<") && svg.contains(">fsoc<") && svg.contains(">littlefs<"), "{svg}");
        assert!(svg.contains(">100000<") && svg.contains(">100<"), "decade labels of both axes: {svg}");
    }
}
