//! `fsoc bench postmark`: seed 004's PostMark on the engine in simulated time, with and without
//! an NVRAM commit tier, and littlefs beside it (fsoc-bench's `postmark`); JSON, a printed table
//! and a chart like the seed's figures (`postmark::chart`).

use std::path::Path;

use fsoc_bench::postmark::{self, PostmarkConfig};

use crate::bench_cmd::{spinner, write_json};

pub fn run(json: Option<&Path>, quick: bool, seed: u64) -> Result<(), String> {
    let config = if quick { PostmarkConfig::quick(seed) } else { PostmarkConfig::full(seed) };
    let bar = spinner();
    let report = postmark::run(&config, &mut |line| bar.println(line))
        .map_err(|error| format!("postmark benchmark: {error}"))?;
    bar.finish_and_clear();
    let workload = &report["workload"];
    println!(
        "PostMark (seed 004): {} files of {}..{} B in {} directories, {} transactions, {} B units, seed {seed}; \
         one MLC chip, simulated time",
        config.files,
        config.size_min_bytes,
        config.size_max_bytes,
        config.subdirectories,
        workload["transactions"],
        config.write_block_bytes,
    );
    println!("{}", postmark::markdown_table(&report));
    let targets = &report["targets"];
    let value = |name: &str| targets[name]["value"].as_f64().unwrap_or(f64::NAN);
    let met = |name: &str| match targets[name]["met"].as_bool() {
        Some(true) => "met",
        Some(false) => "MISSED",
        None => "n/a",
    };
    println!(
        "sync: no NVRAM ÷ 128 KiB = {:.2}× (target ≥ {}×: {}; seed 004 13.6×)",
        value("sync_speedup_128k"),
        postmark::TARGET_SPEEDUP_MIN,
        met("sync_speedup_128k")
    );
    println!(
        "sync 128 KiB ÷ async no NVRAM = {:.2} (target ≤ {}: {})",
        value("sync_128k_over_async_none"),
        postmark::TARGET_OF_ASYNC_MAX,
        met("sync_128k_over_async_none")
    );
    println!(
        "sync erases reduced {:.2}× (target ≥ {}×: {}); energy reduced {:.2}× (target ≥ {}×: {}; seed 004 14.5×)",
        value("sync_erase_reduction_128k"),
        postmark::TARGET_ERASE_REDUCTION_MIN,
        met("sync_erase_reduction_128k"),
        value("sync_energy_reduction_128k"),
        postmark::TARGET_ENERGY_REDUCTION_MIN,
        met("sync_energy_reduction_128k"),
    );
    if let Some(json) = json {
        write_json(json, &report)?;
        let chart = json.with_extension("svg");
        std::fs::write(&chart, postmark::chart::chart_svg(&report))
            .map_err(|error| format!("{}: {error}", chart.display()))?;
        println!("wrote {} and {}", json.display(), chart.display());
    }
    Ok(())
}
