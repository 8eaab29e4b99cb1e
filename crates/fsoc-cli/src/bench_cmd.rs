//! `fsoc bench scaling`, `fsio`, `mount`, `readers` and `fuse`: fsoc-bench's runs with a
//! progress bar, their results as JSON (and charts) plus a printed summary.

use std::fmt::Write as _;
use std::io::IsTerminal;
use std::path::{Path, PathBuf};

use fsoc_bench::fuse::{self, FuseOptions, Progress};
use fsoc_bench::scaling::{self, Operation, ScalingOptions};
use fsoc_media::Profile;
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
    std::fs::write(&chart, fsoc_bench::fsio::chart(&report))
        .map_err(|error| format!("{}: {error}", chart.display()))?;
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

pub fn mount(files: &[u64], json: Option<&Path>, seed: u64) -> Result<(), String> {
    if files.is_empty() {
        return Err("--files needs at least one count".into());
    }
    let bar = spinner();
    let report = fsoc_bench::run_mount_with_progress(files, seed, &mut |line| bar.set_message(line.to_string()))
        .map_err(|error| format!("mount benchmark: {error}"))?;
    bar.finish_and_clear();
    let rows = fsoc_bench::mount::rows(&report);
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
        std::fs::write(&chart, fsoc_bench::mount::chart(&rows))
            .map_err(|error| format!("{}: {error}", chart.display()))?;
        println!("wrote {} and {}", json.display(), chart.display());
    }
    Ok(())
}

pub fn readers(json: Option<&Path>, quick: bool, seed: u64) -> Result<(), String> {
    let bar = spinner();
    let report = fsoc_bench::readers::run_in_scratch(quick, seed, &mut |line| bar.set_message(line.to_string()));
    bar.finish_and_clear();
    let report = report.map_err(|error| format!("readers benchmark: {error}"))?;
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

/// `fsoc bench fuse`: the run with a spinner and each sample's line, its JSON and chart
/// (beside it, .svg), and the summary; an error when a sample failed.
pub fn fuse(
    json: &Path,
    reps: Option<u32>,
    quick: bool,
    size: String,
    profile: Profile,
    workloads: Vec<String>,
    io_uring: bool,
) -> Result<(), String> {
    let size_bytes = crate::volume_cmd::parse_size(&size)?;
    if json.extension().is_some_and(|extension| extension == "svg") {
        return Err(format!("{}: give the JSON file's name; the chart goes beside it as .svg", json.display()));
    }
    if let Some(parent) = json.parent().filter(|parent| !parent.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent).map_err(|error| format!("{}: {error}", parent.display()))?;
    }
    let fsoc: PathBuf = std::env::current_exe().map_err(|error| format!("cannot find the fsoc executable: {error}"))?;
    crate::interrupts::catch_interrupts();
    fuse::mounts::stop_when(crate::interrupts::flag());
    let options =
        FuseOptions { fsoc, reps, quick, size, size_bytes, profile: profile.name().to_string(), workloads, io_uring };
    let mut bar: Option<ProgressBar> = None;
    let report = fuse::run(&options, &mut |progress| match progress {
        Progress::Skipped { workload, reason } => println!("skipping {workload}: {reason}"),
        Progress::Started(message) => {
            bar.get_or_insert_with(spinner).set_message(message.to_string());
        }
        Progress::Finished(line) => match &bar {
            Some(bar) => bar.suspend(|| println!("{line}")),
            None => println!("{line}"),
        },
    });
    if let Some(bar) = bar {
        bar.finish_and_clear();
    }
    let report = report?;
    std::fs::write(json, report.to_json()).map_err(|error| format!("{}: {error}", json.display()))?;
    let chart = json.with_extension("svg");
    std::fs::write(&chart, report.svg()).map_err(|error| format!("{}: {error}", chart.display()))?;
    print!("{}", report.summary());
    println!("wrote {} and {}", json.display(), chart.display());
    let (failed_samples, samples) = report.failed_samples();
    if failed_samples > 0 {
        return Err(format!("{failed_samples} of {samples} runs failed (see FAILED above, and \"error\" in the JSON)"));
    }
    Ok(())
}
