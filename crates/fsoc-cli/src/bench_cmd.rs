//! `fsoc bench fsio` and `fsoc bench mount`: fsoc and littlefs on the same simulated chips
//! (fsoc-bench), results as JSON plus a printed summary.

use std::fmt::Write as _;
use std::path::Path;

use indicatif::ProgressBar;
use serde_json::Value;

use crate::svg_chart::{self, LogScale};

pub(crate) fn write_json(path: &Path, value: &Value) -> Result<(), String> {
    let text = serde_json::to_string_pretty(value).map_err(|error| error.to_string())?;
    std::fs::write(path, text).map_err(|error| format!("{}: {error}", path.display()))
}

pub(crate) fn spinner() -> ProgressBar {
    let bar = ProgressBar::new_spinner();
    bar.enable_steady_tick(std::time::Duration::from_millis(120));
    bar
}

fn sum(report: &Value, fs: &str, op: &str, field: &str) -> f64 {
    report["fs"][fs][op].as_array().map_or(0.0, |samples| samples.iter().filter_map(|s| s[field].as_f64()).sum())
}

pub fn fsio(json: &Path, seed: u64) -> Result<(), String> {
    let bar = spinner();
    let report = fsoc_bench::run_fsio_with_progress(seed, &mut |line| bar.set_message(line.to_string()))
        .map_err(|error| format!("fsio benchmark: {error}"))?;
    bar.finish_and_clear();
    write_json(json, &report)?;
    println!("fsio (seed 003: 15 samples × 133 files), seed {seed}; simulated time, sums over samples");
    println!("{:>8} {:>14} {:>14} {:>14}", "op", "fsoc s", "littlefs s", "fsoc/littlefs");
    for op in ["create", "open", "delete"] {
        let fsoc = sum(&report, "fsoc", op, "sim_us") / 1e6;
        let littlefs = sum(&report, "littlefs", op, "sim_us") / 1e6;
        println!(
            "{op:>8} {fsoc:>14.3} {littlefs:>14.3} {:>14.4}",
            if littlefs > 0.0 { fsoc / littlefs } else { f64::NAN }
        );
    }
    println!("{}", fsoc_bench::fsio::markdown_table(&report));
    println!("wrote {}", json.display());
    Ok(())
}

pub fn mount(files: &[u64], json: Option<&Path>, seed: u64) -> Result<(), String> {
    if files.is_empty() {
        return Err("--files needs at least one count".into());
    }
    let bar = spinner();
    let report = fsoc_bench::run_mount_with_progress(files, seed, &mut |line| bar.set_message(line.to_string()))
        .map_err(|error| format!("mount benchmark: {error}"))?;
    bar.finish_and_clear();
    let rows = mount_rows(&report);
    println!("mount after N empty files (seed {seed}; simulated MLC chip): page reads and simulated time");
    println!(
        "{:>9} {:>12} {:>12} {:>14} {:>12} {:>12}",
        "files", "fsoc reads", "fsoc ms", "littlefs reads", "littlefs ms", "reads ratio"
    );
    for row in &rows {
        let littlefs_reads = row.littlefs.map_or("-".to_string(), |(reads, _)| reads.to_string());
        let littlefs_ms = row.littlefs.map_or("-".to_string(), |(_, ms)| format!("{ms:.3}"));
        let ratio = row
            .littlefs
            .map_or("-".to_string(), |(reads, _)| format!("{:.3}", row.fsoc.0 as f64 / reads.max(1) as f64));
        println!(
            "{:>9} {:>12} {:>12.3} {:>14} {:>12} {:>12}",
            row.files, row.fsoc.0, row.fsoc.1, littlefs_reads, littlefs_ms, ratio
        );
    }
    if let Some(skipped) = report["littlefs_skipped_above"].as_u64() {
        if rows.iter().any(|row| row.files > skipped) {
            println!("(littlefs is not run above {skipped} files: populating it takes too long)");
        }
    }
    if let Some(json) = json {
        write_json(json, &report)?;
        let chart = json.with_extension("svg");
        std::fs::write(&chart, mount_chart(&rows)).map_err(|error| format!("{}: {error}", chart.display()))?;
        println!("wrote {} and {}", json.display(), chart.display());
    }
    Ok(())
}

/// One file count: fsoc's (page reads, simulated ms) and littlefs's, if it was run.
struct MountRow {
    files: u64,
    fsoc: (u64, f64),
    littlefs: Option<(u64, f64)>,
}

fn mount_rows(report: &Value) -> Vec<MountRow> {
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
fn mount_chart(rows: &[MountRow]) -> String {
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

pub fn readers(json: Option<&Path>, quick: bool, seed: u64) -> Result<(), String> {
    let config = if quick {
        fsoc_bench::readers::ReadersConfig::quick(seed)
    } else {
        fsoc_bench::readers::ReadersConfig::full(seed)
    };
    let shm = Path::new("/dev/shm");
    let directory = if shm.is_dir() { shm.to_path_buf() } else { std::env::temp_dir() }
        .join(format!("fsoc-readers-{}", std::process::id()));
    std::fs::create_dir(&directory).map_err(|error| format!("{}: {error}", directory.display()))?;
    let bar = spinner();
    let report = fsoc_bench::readers::run(&config, &directory, &mut |line| bar.set_message(line.to_string()));
    let _ = std::fs::remove_dir_all(&directory);
    let report = report.map_err(|error| format!("readers benchmark: {error}"))?;
    bar.finish_and_clear();
    let throughput = &report["throughput"];
    let latency = &report["latency"];
    let number = |value: &Value| value.as_f64().unwrap_or(f64::NAN);
    println!(
        "parallel readers on a {}-chip array of chip files ({} CPUs; wall-clock time)",
        report["config"]["chips"], report["config"]["cpus"]
    );
    println!(
        "throughput: 1 reader {:.0} MB/s, 4 readers {:.0} MB/s: {:.2}x (target >= 3x)",
        number(&throughput["one_reader_mb_s"]),
        number(&throughput["four_readers_mb_s"]),
        number(&throughput["ratio"])
    );
    println!(
        "4 KiB read latency: idle median {:.1} us, p99 {:.1} us; with a writer streaming fsync'd 64 KiB writes ({} fsyncs) median {:.1} us, p99 {:.1} us: {:.2}x / {:.2}x (target <= 3x)",
        number(&latency["idle_median_us"]),
        number(&latency["idle_p99_us"]),
        latency["writer_fsyncs"],
        number(&latency["with_writer_median_us"]),
        number(&latency["with_writer_p99_us"]),
        number(&latency["median_ratio"]),
        number(&latency["p99_ratio"])
    );
    let held = &latency["flush_inside_lock"];
    println!(
        "  for comparison, the writer holding the volume through its flush ({} fsyncs): median {:.1} us, p99 {:.1} us: {:.2}x / {:.2}x",
        held["writer_fsyncs"],
        number(&held["with_writer_median_us"]),
        number(&held["with_writer_p99_us"]),
        number(&held["median_ratio"]),
        number(&held["p99_ratio"])
    );
    if let Some(json) = json {
        write_json(json, &report)?;
        println!("wrote {}", json.display());
    }
    Ok(())
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
        let svg = mount_chart(&rows);
        assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"), "{svg}");
        assert_eq!(svg.matches("<polyline").count(), 2, "{svg}");
        assert_eq!(svg.matches("<circle").count(), 5, "{svg}");
        assert!(svg.contains(">61<") && svg.contains(">fsoc<") && svg.contains(">littlefs<"), "{svg}");
        assert!(svg.contains(">100000<") && svg.contains(">100<"), "decade labels of both axes: {svg}");
    }
}
