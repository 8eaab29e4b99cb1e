//! `fsoc report`: a quick run without the root-only benchmarks writes a self-contained
//! index.html and a report.json that names every benchmark (measured, or not run with the
//! reason and, for fuse and mtd, the committed figures marked with their file), every seed's
//! experiments, and the charts inline; an unknown `--skip` name is refused.

#![cfg(feature = "lab")]

use std::process::Command;

use serde_json::Value;

const FSOC: &str = env!("CARGO_BIN_EXE_fsoc");

/// Every benchmark the report runs, in its order.
const BENCHMARKS: [&str; 9] = ["fsoc", "scaling", "mount", "readers", "fsio", "crashtest", "postmark", "fuse", "mtd"];

/// The benchmarks that run in this process on the simulator (and so run here whatever the host).
const SIMULATED: [&str; 7] = ["fsoc", "scaling", "mount", "readers", "fsio", "crashtest", "postmark"];

#[test]
fn a_quick_report_names_every_benchmark_and_inlines_its_charts() {
    let directory = tempfile::tempdir().expect("temporary directory");
    let out = directory.path().join("report");
    let output = Command::new(FSOC)
        .args(["report", "--out"])
        .arg(&out)
        .args(["--skip", "fuse,mtd"])
        .output()
        .expect("run fsoc report");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "fsoc report failed:\n{stdout}\n{stderr}");
    assert!(stdout.contains("index.html") && stdout.contains("quick mode"), "{stdout}");

    let report: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("report.json")).expect("report.json")).expect("JSON");
    assert_eq!(report["report"]["mode"], "quick", "{}", report["report"]);
    let sections = report["benchmarks"].as_array().expect("benchmarks");
    let names: Vec<&str> = sections.iter().filter_map(|section| section["name"].as_str()).collect();
    assert_eq!(names, BENCHMARKS, "every benchmark, once, in order");
    for section in sections {
        let name = section["name"].as_str().unwrap_or("?");
        let status = section["status"].as_str().unwrap_or("?");
        assert!(section["command"].as_str().is_some_and(|command| !command.is_empty()), "{name}: no command");
        if SIMULATED.contains(&name) {
            assert_eq!(status, "measured", "{name}: {section}");
            assert_eq!(section["mode"], "quick", "{name}");
            assert!(!section["rows"].as_array().expect("rows").is_empty(), "{name}: no rows");
            assert!(!section["charts"].as_array().expect("charts").is_empty(), "{name}: no chart");
            for file in section["files"].as_array().expect("files") {
                let file = file.as_str().expect("file name");
                assert!(out.join(file).is_file(), "{name}: {file} was not written");
            }
        } else {
            // Left out: said why, and the committed figures shown are marked with their file.
            assert_eq!(status, "committed", "{name}: {section}");
            let reason = section["reason"].as_str().unwrap_or("");
            assert!(reason.contains(&format!("--skip {name}")), "{name}: {reason}");
            let rows = section["rows"].as_array().expect("rows");
            assert!(!rows.is_empty(), "{name}: no committed rows");
            for row in rows {
                let file = row["committed_file"].as_str().unwrap_or("");
                assert!(file.starts_with("crates/fsoc-cli/results/"), "{name}: row without its file: {row}");
            }
        }
    }
    // No power cut failed.
    let crash = sections.iter().find(|section| section["name"] == "crashtest").expect("crashtest");
    for row in crash["rows"].as_array().expect("rows") {
        assert_eq!(row["fsoc"], 0.0, "power-cut failures: {row}");
    }
    // Every seed has experiments, and some of them a published figure beside fsoc's.
    for seed in report["seeds"].as_array().expect("seeds") {
        let experiments = seed["experiments"].as_array().expect("experiments");
        assert!(!experiments.is_empty(), "seed {} has no experiment", seed["seed"]);
        assert!(
            experiments.iter().any(|row| row["seed_figure"].is_string() && row["fsoc"].is_number()),
            "seed {}: no published figure beside a measured one",
            seed["seed"]
        );
    }
    // Peers in the same harness: littlefs measured now, ext4 and UBIFS from the committed files.
    let peers: Vec<&str> = sections
        .iter()
        .flat_map(|section| section["rows"].as_array().into_iter().flatten())
        .filter(|row| row["peer"].is_number())
        .filter_map(|row| row["peer_name"].as_str())
        .collect();
    for peer in ["littlefs", "ext4 (loop device)", "UBI + UBIFS", "conventional device (raw pages)"] {
        assert!(peers.contains(&peer), "no figure of {peer}: {peers:?}");
    }

    let html = std::fs::read_to_string(out.join("index.html")).expect("index.html");
    assert!(html.starts_with("<!DOCTYPE html>") && html.trim_end().ends_with("</html>"));
    // Self-contained: the charts inline, nothing loaded from elsewhere.
    let scaling_chart = std::fs::read_to_string(out.join("scaling.svg")).expect("scaling.svg");
    assert!(html.contains(scaling_chart.trim()), "the scaling chart is not inline");
    assert!(html.matches("<svg").count() >= 10, "charts inline: {}", html.matches("<svg").count());
    for outside in ["<script", "src=\"http", "href=\"http", "<link", "@import"] {
        assert!(!html.contains(outside), "index.html refers outside itself: {outside}");
    }
    for seed in ["Seed 000", "Seed 001", "Seed 002", "Seed 003", "Seed 004"] {
        assert!(html.contains(seed), "{seed} has no section");
    }
    assert!(html.contains("left out with --skip fuse") && html.contains("crates/fsoc-cli/results/mtd.json"));
}

#[test]
fn an_unknown_benchmark_is_refused_by_name() {
    let directory = tempfile::tempdir().expect("temporary directory");
    let output = Command::new(FSOC)
        .args(["report", "--out"])
        .arg(directory.path().join("report"))
        .args(["--skip", "fuse,nosuch"])
        .output()
        .expect("run fsoc report");
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("--skip nosuch") && stderr.contains("crashtest, postmark"), "{stderr}");
    assert!(!directory.path().join("report").exists(), "nothing is written for a refused command");
}
