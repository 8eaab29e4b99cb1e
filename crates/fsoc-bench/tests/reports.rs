//! The benchmark reports: shape of the fsio and mount JSON, nonzero counts for both file
//! systems, and determinism (same seed, same numbers). Runs a reduced fsio (2 × 10 files).

use fsoc_bench::fsio::{self, FsioConfig};
use fsoc_bench::mount::{self, MountConfig};
use serde_json::Value;

fn small_fsio(seed: u64) -> FsioConfig {
    FsioConfig { sample_count: 2, files_per_sample: 10, verify_contents: true, ..FsioConfig::full(seed) }
}

fn run_fsio(config: &FsioConfig) -> Value {
    fsio::run(config, &mut |_| {}).expect("fsio run")
}

/// Drops what is measured in wall time, which is the only part allowed to differ.
fn without_wall_time(mut report: Value) -> Value {
    report["summary"].as_object_mut().expect("summary").remove("wall_ms");
    report.as_object_mut().expect("report").remove("wall_ms");
    report
}

fn field(sample: &Value, name: &str) -> u64 {
    sample[name].as_u64().unwrap_or_else(|| panic!("{name} missing in {sample}"))
}

#[test]
fn fsio_report_shape_and_counts() {
    let report = run_fsio(&small_fsio(1));
    for fs in ["fsoc", "littlefs"] {
        for operation in ["create", "open", "delete"] {
            let samples = report["fs"][fs][operation].as_array().expect("samples");
            assert_eq!(samples.len(), 2, "{fs} {operation}");
            for sample in samples {
                assert_eq!(sample.as_object().expect("object").len(), 4, "{sample}");
                // Durable creates and deletes program flash; opens must not. An fsoc open of
                // a file whose tree nodes are cached costs no flash operation and, since the
                // simulation charges only flash time, no simulated time either.
                if operation == "open" {
                    assert_eq!(field(sample, "programs"), 0, "{fs} open wrote: {sample}");
                    if fs == "littlefs" {
                        assert!(field(sample, "reads") > 0, "littlefs open read nothing: {sample}");
                    }
                } else {
                    assert!(field(sample, "programs") > 0, "{fs} {operation}: {sample}");
                    assert!(field(sample, "sim_us") > 0, "{fs} {operation}: {sample}");
                }
            }
        }
        // Every create is at least one page program (the commit).
        let programs: u64 =
            report["fs"][fs]["create"].as_array().expect("create").iter().map(|s| field(s, "programs")).sum();
        assert!(programs >= 20, "{fs}: {programs} programs for 20 durable creates");
    }
    assert_eq!(report["config"]["device"]["profile"], "mlc");
    assert_eq!(report["config"]["littlefs"]["prog_size_bytes"], 2048);
    assert!(report["summary"]["ratio_fsoc_over_littlefs"]["create"]["sim_us"].as_f64().expect("ratio") > 0.0);
}

#[test]
fn fsio_is_deterministic() {
    let first = without_wall_time(run_fsio(&small_fsio(42)));
    let second = without_wall_time(run_fsio(&small_fsio(42)));
    assert_eq!(first, second);
}

#[test]
fn mount_report_shape() {
    let config = MountConfig { littlefs_files_max: 10, ..MountConfig::new(&[10, 30], 5) };
    let report = mount::run(&config, &mut |_| {}).expect("mount run");
    let fsoc = report["mounts"].as_array().expect("mounts");
    let littlefs = report["littlefs"].as_array().expect("littlefs");
    assert_eq!(fsoc.len(), 2);
    assert_eq!(littlefs.len(), 1, "littlefs above 10 files is skipped");
    assert_eq!(report["littlefs_skipped_above"], 10);
    for entry in fsoc.iter().chain(littlefs) {
        assert!(field(entry, "page_reads") > 0 && field(entry, "sim_us") > 0, "{entry}");
        assert_eq!(field(entry, "programs"), 0, "a clean mount wrote: {entry}");
    }
    assert_eq!(field(&fsoc[1], "files"), 30);
}

#[test]
fn invalid_configurations_are_refused() {
    let empty = FsioConfig { sample_count: 0, ..FsioConfig::full(1) };
    assert!(fsio::run(&empty, &mut |_| {}).is_err());
    assert!(mount::run(&MountConfig::new(&[mount::FILES_MAX + 1], 1), &mut |_| {}).is_err());
}

// The README table has a header, a separator and one row per operation.
#[test]
fn fsio_markdown_table() {
    let table = fsio::markdown_table(&run_fsio(&small_fsio(3)));
    let lines: Vec<&str> = table.lines().collect();
    assert_eq!(lines.len(), 5, "{table}");
    assert!(lines[0].starts_with("| fsio 2 × 10 files of 1024 B (MLC, 2 KiB pages, 1 chip, seed 3) |"), "{table}");
    assert!(lines[2].starts_with("| create |") && lines[4].starts_with("| delete |"), "{table}");
}

// littlefs's counts for the reduced run, pinned: littlefs and the simulator are fixed code, so
// any change here is a change in the adapter or the harness (fsoc's counts move with the core
// and are not pinned).
#[test]
fn littlefs_counts_are_pinned() {
    let report = run_fsio(&small_fsio(1));
    let totals = |operation: &str| {
        let total = &report["summary"]["totals"]["littlefs"][operation];
        ["reads", "programs", "erases", "sim_us"].map(|name| field(total, name))
    };
    assert_eq!(
        [totals("create"), totals("open"), totals("delete")],
        // [reads, programs, erases, sim_us] of create, open and delete. Each create is three
        // page programs (file data, the create commit, the close commit) and, with a 4 KiB
        // metadata_max, two erases (the file's block and a compaction).
        [[1908, 60, 40, 267_610], [220, 0, 0, 17_116], [1164, 20, 10, 123_615]]
    );
}
