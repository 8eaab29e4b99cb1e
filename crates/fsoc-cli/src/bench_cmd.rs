//! `fsoc bench fsio` and `fsoc bench mount`: fsoc and littlefs on the same simulated chips
//! (fsoc-bench), results as JSON plus a printed summary.

use std::path::Path;

use indicatif::ProgressBar;
use serde_json::Value;

fn write_json(path: &Path, value: &Value) -> Result<(), String> {
    let text = serde_json::to_string_pretty(value).map_err(|error| error.to_string())?;
    std::fs::write(path, text).map_err(|error| format!("{}: {error}", path.display()))
}

fn spinner() -> ProgressBar {
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

/// Page reads per mount against file count (both log scale), fsoc and littlefs.
fn mount_chart(rows: &[MountRow]) -> String {
    let (width, height, margin) = (640.0, 400.0, 60.0);
    let files_max = rows.iter().map(|row| row.files).max().unwrap_or(10).max(10) as f64;
    let reads_max = rows
        .iter()
        .flat_map(|row| [Some(row.fsoc.0), row.littlefs.map(|(reads, _)| reads)])
        .flatten()
        .max()
        .unwrap_or(10)
        .max(10) as f64;
    let x = |files: u64| margin + (files.max(1) as f64).log10() / files_max.log10() * (width - 2.0 * margin);
    let y = |reads: u64| height - margin - (reads.max(1) as f64).log10() / reads_max.log10() * (height - 2.0 * margin);
    let line = |points: Vec<(u64, u64)>, colour: &str, label: &str, label_y: f64| {
        let path: Vec<String> =
            points.iter().map(|&(files, reads)| format!("{:.1},{:.1}", x(files), y(reads))).collect();
        let dots: String = points
            .iter()
            .map(|&(files, reads)| format!("<circle cx=\"{:.1}\" cy=\"{:.1}\" r=\"3\" fill=\"{colour}\"/><text x=\"{:.1}\" y=\"{:.1}\" font-size=\"11\">{reads}</text>", x(files), y(reads), x(files) + 5.0, y(reads) - 5.0))
            .collect();
        format!(
            "<polyline fill=\"none\" stroke=\"{colour}\" stroke-width=\"2\" points=\"{}\"/>{dots}<text x=\"{:.1}\" y=\"{label_y}\" fill=\"{colour}\" font-size=\"13\">{label}</text>",
            path.join(" "),
            width - margin - 80.0
        )
    };
    let fsoc = line(rows.iter().map(|row| (row.files, row.fsoc.0)).collect(), "#1f77b4", "fsoc", margin);
    let littlefs = line(
        rows.iter().filter_map(|row| row.littlefs.map(|(reads, _)| (row.files, reads))).collect(),
        "#d62728",
        "littlefs",
        margin + 18.0,
    );
    let ticks: String = rows
        .iter()
        .map(|row| {
            format!(
                "<text x=\"{:.1}\" y=\"{:.1}\" font-size=\"11\" text-anchor=\"middle\">{}</text>",
                x(row.files),
                height - margin + 18.0,
                row.files
            )
        })
        .collect();
    format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{width}\" height=\"{height}\" font-family=\"sans-serif\">\
         <rect width=\"100%\" height=\"100%\" fill=\"white\"/>\
         <text x=\"{margin}\" y=\"25\" font-size=\"15\">Mount cost: page reads against file count (log-log)</text>\
         <line x1=\"{margin}\" y1=\"{:.1}\" x2=\"{:.1}\" y2=\"{:.1}\" stroke=\"black\"/>\
         <line x1=\"{margin}\" y1=\"{margin}\" x2=\"{margin}\" y2=\"{:.1}\" stroke=\"black\"/>\
         <text x=\"{:.1}\" y=\"{:.1}\" font-size=\"12\" text-anchor=\"middle\">files</text>\
         <text x=\"15\" y=\"{:.1}\" font-size=\"12\" transform=\"rotate(-90 15 {:.1})\">page reads per mount</text>\
         {ticks}{fsoc}{littlefs}</svg>\n",
        height - margin,
        width - margin,
        height - margin,
        height - margin,
        width / 2.0,
        height - 15.0,
        height / 2.0,
        height / 2.0
    )
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
    if let Some(json) = json {
        write_json(json, &report)?;
        println!("wrote {}", json.display());
    }
    Ok(())
}
