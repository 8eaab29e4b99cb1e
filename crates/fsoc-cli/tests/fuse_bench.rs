//! `fsoc bench fuse`: a `--quick` run measures every workload on both file systems and writes
//! the JSON (medians and a ratio for each metric, the mount server's usage) and the chart; and
//! a user without root is refused with exit status 2 and told what is missing.
//!
//! Needs root, /dev/fuse, a loop device and the programs scripts/setup.sh installs, as
//! fuse_mount.rs; a missing program fails the test with a message naming it.

mod support;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use support::{require, run, FSOC};

/// Every workload and the metrics the JSON must hold for it.
const WORKLOADS: [(&str, &[&str]); 5] = [
    ("postmark", &["wall_s"]),
    ("dbench", &["throughput_mb_s"]),
    ("fio", &["seq_write_mib_s", "seq_read_mib_s", "rand_write_iops", "rand_read_iops"]),
    ("metadata_storm", &["create_s", "ls_s", "delete_s", "total_s"]),
    ("small_writes", &["append_4b_writes_s", "write_512b_fsync_s"]),
];

/// A quick run takes well under a minute; this leaves room for a loaded machine.
const QUICK_RUN_TIMEOUT: Duration = Duration::from_secs(120);

/// Runs `fsoc bench fuse --quick` and checks that the JSON has, for every workload and metric,
/// an fsoc median, an ext4 median and their ratio, the fsoc server's CPU time and peak memory,
/// the issues' seven targets, no skipped workload and no failed sample; and that the SVG chart
/// exists beside it.
#[test]
fn quick_run_measures_every_workload_on_both_file_systems() {
    assert!(
        Path::new("/dev/fuse").exists(),
        "/dev/fuse is missing: bench fuse needs it (CI runs as root with /dev/fuse)"
    );
    assert!(Path::new("/dev/loop-control").exists(), "/dev/loop-control is missing: bench fuse needs a loop device");
    for program in ["fusermount3", "mkfs.ext4", "losetup", "mount", "umount", "postmark", "dbench", "fio", "ls"] {
        require(program);
    }
    assert!(
        Path::new("/usr/share/dbench/client.txt").is_file(),
        "dbench's load file /usr/share/dbench/client.txt is missing: run `bash scripts/setup.sh` (as root)"
    );
    let directory = tempfile::tempdir().expect("tempdir");
    let json = directory.path().join("fuse.json");
    let output = run(Command::new(FSOC).args(["bench", "fuse", "--quick", "--json"]).arg(&json), QUICK_RUN_TIMEOUT);
    assert!(output.status.success(), "bench fuse --quick failed:\n{}", output.text());
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).expect("the JSON was written")).expect("the JSON parses");
    assert_eq!(report["benchmark"], "fuse");
    assert_eq!(report["quick"], true);
    assert_eq!(report["repetitions"], 1, "--quick runs one repetition");
    assert_eq!(report["failed_samples"], 0, "{}", output.text());
    assert_eq!(report["skipped"].as_array().map(Vec::len), Some(0), "nothing skipped: {}", report["skipped"]);
    assert_eq!(
        report["samples"].as_array().map(Vec::len),
        Some(2 * WORKLOADS.len()),
        "one sample per workload and file system"
    );
    for (workload, metrics) in WORKLOADS {
        let summary = &report["workloads"][workload];
        for metric in metrics {
            let row = &summary["metrics"][metric];
            let fsoc = row["fsoc_median"].as_f64();
            let ext4 = row["ext4_median"].as_f64();
            let ratio = row["ratio_fsoc_over_ext4"].as_f64();
            assert!(fsoc.is_some_and(|value| value > 0.0), "{workload} {metric}: fsoc median {row}");
            assert!(ext4.is_some_and(|value| value > 0.0), "{workload} {metric}: ext4 median {row}");
            let (fsoc, ext4, ratio) = (fsoc.unwrap_or(0.0), ext4.unwrap_or(1.0), ratio.unwrap_or(-1.0));
            assert!(
                (ratio - fsoc / ext4).abs() <= 1e-9 * ratio.abs(),
                "{workload} {metric}: ratio is fsoc/ext4: {row}"
            );
            assert!(
                ["lower", "higher"].contains(&row["better"].as_str().unwrap_or("")),
                "{workload} {metric}: direction {row}"
            );
        }
        let server = &summary["fsoc_server"];
        assert!(
            server["cpu_seconds_median"].as_f64().is_some_and(|seconds| seconds > 0.0),
            "{workload}: server CPU {server}"
        );
        assert!(server["peak_rss_kib_max"].as_u64().is_some_and(|kib| kib > 0), "{workload}: server RSS {server}");
    }
    let targets = report["targets"].as_array().expect("targets");
    assert_eq!(targets.len(), 7, "the issues' seven targets: {targets:?}");
    assert!(targets.iter().all(|target| target["met"].is_boolean()), "every target judged: {targets:?}");
    let chart = std::fs::read_to_string(json.with_extension("svg")).expect("the SVG chart beside the JSON");
    assert!(chart.starts_with("<svg") && chart.trim_end().ends_with("</svg>"), "{chart}");
    for (workload, _) in WORKLOADS {
        assert!(chart.contains(workload), "the chart names {workload}");
    }
    assert!(output.stdout.contains("fsoc/ext4"), "the table is printed:\n{}", output.text());
}

/// Without root the command does nothing but say what is missing, with exit status 2.
#[test]
fn without_root_it_says_what_is_missing() {
    require("setpriv");
    let directory = tempfile::tempdir().expect("tempdir");
    let json = directory.path().join("never.json");
    let output = run(
        Command::new("setpriv")
            .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
            .arg(FSOC)
            .args(["bench", "fuse", "--quick", "--json"])
            .arg(&json),
        Duration::from_secs(30),
    );
    assert_eq!(output.status.code(), Some(2), "{}", output.text());
    assert!(output.stderr.contains("root"), "names root: {}", output.text());
    assert!(!output.stderr.contains("panicked"), "{}", output.text());
    assert!(!json.exists() && !json.with_extension("svg").exists(), "nothing written");
}
