//! `postmark` (seed 004's PostMark, issue 10 point 4) in its quick configuration: the NVRAM
//! tier takes the sync variant's transaction points off the flash, and the same seed gives the
//! same counts.

use fsoc_bench::postmark::{self, PostmarkConfig, RunResult, Variant, Workload};

fn find<'a>(results: &'a [RunResult], target: &str, variant: Variant, nvram_bytes: u64) -> &'a RunResult {
    results
        .iter()
        .find(|run| run.key.target == target && run.key.variant == variant && run.key.nvram_bytes == nvram_bytes)
        .unwrap_or_else(|| panic!("no {target} {variant:?} run with {nvram_bytes} B of NVRAM"))
}

/// Everything a run counts except wall time.
fn counts(run: &RunResult) -> (u64, [u64; 3], fsoc_media::DeviceTotals, String, String, u64, u64) {
    (
        run.elapsed_ns,
        run.phase_ns,
        run.totals.clone(),
        format!("{:.9} {:.9}", run.erase_mean, run.erase_std),
        run.stats.to_string(),
        run.unmount_ns,
        run.unmount_programs,
    )
}

#[test]
fn quick_postmark_nvram_takes_sync_commits_off_the_flash_deterministically() {
    let config = PostmarkConfig::quick(7);
    let workload = Workload::generate(&config);
    let results = postmark::run_all(&config, &workload, &mut |_| {}).expect("quick postmark");
    assert_eq!(results.len(), postmark::run_keys(&config).len(), "every run reported");

    let sync_none = find(&results, "fsoc", Variant::Sync, 0);
    let sync_128k = find(&results, "fsoc", Variant::Sync, 128 * 1024);
    let async_none = find(&results, "fsoc", Variant::Async, 0);
    assert!(
        sync_128k.totals.flash.programs < sync_none.totals.flash.programs,
        "sync with 128 KiB NVRAM programs {} pages, without {}",
        sync_128k.totals.flash.programs,
        sync_none.totals.flash.programs
    );
    assert!(sync_128k.elapsed_ns < sync_none.elapsed_ns);
    // Every metadata change of the sync variant is a transaction point; with NVRAM almost all
    // of them are records, the rest destages.
    for nvram_bytes in config.nvram_sizes_bytes.iter().copied().filter(|&bytes| bytes > 0) {
        let run = find(&results, "fsoc", Variant::Sync, nvram_bytes);
        assert!(run.stat("nvram_commits") > 0, "{nvram_bytes} B: {}", run.stats);
        assert!(run.totals.nvram.writes > 0 && run.totals.nvram.energy_pj > 0, "{nvram_bytes} B: {:?}", run.totals);
    }
    // One transaction point per metadata change and the final one, each a record or a destage.
    for nvram_bytes in config.nvram_sizes_bytes.iter().copied().filter(|&bytes| bytes > 0) {
        let run = find(&results, "fsoc", Variant::Sync, nvram_bytes);
        let points = run.stat("nvram_commits") + run.stat("nvram_destages");
        assert_eq!(points, workload.metadata_changes() + 1, "{nvram_bytes} B: {}", run.stats);
    }
    assert_eq!(sync_none.stat("nvram_commits"), 0);
    assert_eq!(sync_none.totals.nvram, Default::default(), "no NVRAM, no NVRAM counts");
    // The async variant makes no transaction point of its own but the final one.
    assert!(async_none.stat("commits") + async_none.stat("delta_commits") <= 3, "{}", async_none.stats);
    // littlefs ran the same operations on the same chip.
    let littlefs = find(&results, "littlefs", Variant::Sync, 0);
    assert!(littlefs.totals.flash.programs > 0 && littlefs.elapsed_ns > 0);

    // The same seed gives the same counts, run again (one thread, so a different interleaving
    // of runs than the first, which used every core).
    let mut again_config = config.clone();
    again_config.threads = 1;
    let again = postmark::run_all(&again_config, &Workload::generate(&again_config), &mut |_| {}).expect("again");
    for (first, second) in results.iter().zip(&again) {
        assert_eq!(first.key, second.key);
        assert_eq!(counts(first), counts(second), "{:?} differs between two runs of seed 7", first.key);
    }
    // The report names every run and the targets.
    let report = postmark::report(&config, &workload, &results, 0.0);
    assert_eq!(report["runs"].as_array().map(Vec::len), Some(results.len()));
    assert!(report["targets"]["sync_speedup_128k"]["value"].as_f64().is_some_and(|ratio| ratio > 1.0));
    assert!(postmark::markdown_table(&report).lines().count() == results.len() + 2);
}
