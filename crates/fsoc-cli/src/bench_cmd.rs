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
        println!("{op:>8} {fsoc:>14.3} {littlefs:>14.3} {:>14.4}", if littlefs > 0.0 { fsoc / littlefs } else { f64::NAN });
    }
    println!("{}", fsoc_bench::fsio::markdown_table(&report));
    println!("wrote {}", json.display());
    Ok(())
}

pub fn mount(files: &[u64], json: &Path, seed: u64) -> Result<(), String> {
    if files.is_empty() {
        return Err("--files needs at least one count".into());
    }
    let bar = spinner();
    let report = fsoc_bench::run_mount_with_progress(files, seed, &mut |line| bar.set_message(line.to_string()))
        .map_err(|error| format!("mount benchmark: {error}"))?;
    bar.finish_and_clear();
    write_json(json, &report)?;
    println!("{}", serde_json::to_string_pretty(&report["mounts"]).unwrap_or_default());
    println!("wrote {}", json.display());
    Ok(())
}
