//! `fsoc bench scaling`, `fsoc bench fsio` and `fsoc bench mount`: fsoc-bench's runs (fsoc and
//! littlefs on the same simulated chips), results as JSON plus a printed summary.

use std::fmt::Write as _;
use std::io::IsTerminal;
use std::path::Path;

use fsoc_bench::scaling::{self, Operation, ScalingOptions};
use fsoc_bench::svg_chart::{self, LogScale};
use indicatif::{ProgressBar, ProgressStyle};
use serde_json::Value;

pub(crate) fn write_json(path: &Path, value: &Value) -> Result<(), String> {
    let text = serde_json::to_string_pretty(value).map_err(|error| error.to_string())?;
    std::fs::write(path, text).map_err(|error| format!("{}: {error}", path.display()))
}

pub(crate) fn spinner() -> ProgressBar {
    let bar = ProgressBar::new_spinner();
    bar.enable_steady_tick(std::time::Duration::from_millis(120));
    bar
}

/// `fsoc bench scaling`: the sweep with a progress bar, its JSON and chart (beside it, .svg),
/// and a summary.
pub fn scaling(json: &Path, options: &ScalingOptions) -> Result<(), String> {
    let bar = if std::io::stderr().is_terminal() {
        let bar = ProgressBar::new(options.sweep().cell_count());
        bar.set_style(
            ProgressStyle::with_template("{spinner} scaling sweep [{bar:30}] {pos}/{len} {msg} ({elapsed})")
                .map_err(|error| format!("progress bar: {error}"))?
                .progress_chars("=> "),
        );
        bar
    } else {
        ProgressBar::hidden()
    };
    let report = scaling::run(options, &mut |label| {
        bar.set_message(label.to_string());
        bar.inc(1);
    });
    bar.finish_and_clear();
    let report = report?;
    if let Some(parent) = json.parent().filter(|parent| !parent.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent).map_err(|error| format!("{}: {error}", parent.display()))?;
    }
    std::fs::write(json, report.to_json()).map_err(|error| format!("{}: {error}", json.display()))?;
    let svg_path = json.with_extension("svg");
    std::fs::write(&svg_path, report.svg()).map_err(|error| format!("{}: {error}", svg_path.display()))?;
    print_scaling_summary(&report);
    println!("wrote {} and {}", json.display(), svg_path.display());
    Ok(())
}

fn print_scaling_summary(report: &scaling::Report) {
    let sweep = &report.sweep;
    for &profile in &sweep.profiles {
        println!("{} (MiB/s in simulated time; efficiency = measured / physical limit)", profile.name());
        for operation in Operation::ALL {
            let mut line = format!("  {:<13}", operation.name());
            for &chips in &sweep.chip_counts {
                let largest = sweep.record_sizes_bytes.iter().copied().max().unwrap_or(0);
                let smallest = sweep.record_sizes_bytes.iter().copied().min().unwrap_or(0);
                let small = report.row(profile.name(), chips, operation.name(), smallest);
                let large = report.row(profile.name(), chips, operation.name(), largest);
                if let (Some(small), Some(large)) = (small, large) {
                    let _ = write!(
                        line,
                        " ×{chips}: {:>7.2} | {:>7.2} ({:.2})",
                        small.mib_per_s, large.mib_per_s, large.efficiency
                    );
                }
            }
            println!("{line}");
        }
    }
    for check in &report.targets {
        println!("[{}] {} — {}", if check.met { "met" } else { "SHORT" }, check.target, check.measured);
    }
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
    let chart = json.with_extension("svg");
    std::fs::write(&chart, fsio_chart(&report)).map_err(|error| format!("{}: {error}", chart.display()))?;
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
    println!("wrote {} and {}", json.display(), chart.display());
    Ok(())
}

/// Seed 003's three graphs: simulated time of each sample of 133 files (create, open, delete)
/// for fsoc and littlefs, on a log scale (the directory grows over the create samples and
/// shrinks over the delete samples).
pub(crate) fn fsio_chart(report: &Value) -> String {
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

/// The chart `bench mount` writes beside its JSON, from that JSON.
pub(crate) fn mount_svg(report: &Value) -> String {
    mount_chart(&mount_rows(report))
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

/// Runs the parallel-readers benchmark on chip files in /dev/shm (else the temporary
/// directory), removed afterwards, and returns its JSON report.
pub(crate) fn readers_report(quick: bool, seed: u64, progress: &mut dyn FnMut(&str)) -> Result<Value, String> {
    let config = if quick {
        fsoc_bench::readers::ReadersConfig::quick(seed)
    } else {
        fsoc_bench::readers::ReadersConfig::full(seed)
    };
    let shm = Path::new("/dev/shm");
    let directory = if shm.is_dir() { shm.to_path_buf() } else { std::env::temp_dir() }
        .join(format!("fsoc-readers-{}", std::process::id()));
    std::fs::create_dir(&directory).map_err(|error| format!("{}: {error}", directory.display()))?;
    let report = fsoc_bench::readers::run(&config, &directory, progress);
    let _ = std::fs::remove_dir_all(&directory);
    report.map_err(|error| format!("readers benchmark: {error}"))
}

pub fn readers(json: Option<&Path>, quick: bool, seed: u64) -> Result<(), String> {
    let bar = spinner();
    let report = readers_report(quick, seed, &mut |line| bar.set_message(line.to_string()));
    bar.finish_and_clear();
    let report = report?;
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
        let svg = fsio_chart(&report);
        assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"), "{svg}");
        assert_eq!(svg.matches("<polyline").count(), 6, "{svg}");
        assert_eq!(svg.matches("<circle").count(), 18, "{svg}");
        assert!(!svg.contains("NaN") && !svg.contains("inf"), "{svg}");
        assert!(svg.contains("open (ms per sample)") && svg.contains(">littlefs<"), "{svg}");
    }

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
