//! The command-line contracts scripts rely on (issue 3): JSON keys and the summary line of
//! `fsoc crashtest`, `fsoc bench fsio`, `fsoc bench mount` and `fsoc bench postmark`, plus clear
//! refusals of bad input.
use std::process::Command;

fn fsoc(arguments: &[&str]) -> (bool, String, String) {
    let output = Command::new(env!("CARGO_BIN_EXE_fsoc")).args(arguments).output().expect("run fsoc");
    (
        output.status.success(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

fn json(path: &std::path::Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(path).expect("json written")).expect("valid json")
}

#[test]
fn crashtest_writes_the_agreed_keys_and_summary_line() {
    let directory = tempfile::tempdir().expect("temporary directory");
    let out = directory.path().join("crash.json");
    let (ok, stdout, stderr) =
        fsoc(&["crashtest", "--workload", "deep-tree", "--seed", "3", "--json", out.to_str().expect("utf-8")]);
    assert!(ok, "crashtest failed: {stdout}{stderr}");
    let value = json(&out);
    let cut_points = value["cut_points"].as_u64().expect("cut_points");
    assert!(cut_points > 10);
    assert_eq!(value["failures"].as_u64(), Some(0));
    assert_eq!(value["workloads"].as_array().map(Vec::len), Some(1));
    assert!(stdout.contains(&format!("cut points: {cut_points}, failures: 0")), "{stdout}");
}

#[test]
fn crashtest_max_cuts_bounds_the_run() {
    let directory = tempfile::tempdir().expect("temporary directory");
    let out = directory.path().join("crash.json");
    let (ok, stdout, stderr) =
        fsoc(&["crashtest", "--workload", "overwrite", "--max-cuts", "7", "--json", out.to_str().expect("utf-8")]);
    assert!(ok, "{stdout}{stderr}");
    assert!(json(&out)["cut_points"].as_u64().expect("cut_points") <= 7);
}

#[test]
fn bench_mount_writes_the_agreed_keys() {
    let directory = tempfile::tempdir().expect("temporary directory");
    let out = directory.path().join("mount.json");
    let (ok, stdout, stderr) = fsoc(&["bench", "mount", "--files", "10,200", "--json", out.to_str().expect("utf-8")]);
    assert!(ok, "{stdout}{stderr}");
    let mounts = json(&out)["mounts"].as_array().expect("mounts").clone();
    assert_eq!(mounts.len(), 2);
    for (mount, files) in mounts.iter().zip([10, 200]) {
        assert_eq!(mount["files"].as_u64(), Some(files));
        assert!(mount["page_reads"].as_u64().expect("page_reads") > 0);
        assert!(mount["sim_us"].as_u64().is_some() || mount["sim_us"].as_f64().is_some());
    }
    assert_eq!(mounts[0]["page_reads"], mounts[1]["page_reads"], "mount reads depend on file count");
}

#[test]
fn bench_fsio_writes_the_agreed_keys() {
    let directory = tempfile::tempdir().expect("temporary directory");
    let out = directory.path().join("fsio.json");
    let (ok, stdout, stderr) = fsoc(&["bench", "fsio", "--json", out.to_str().expect("utf-8")]);
    assert!(ok, "{stdout}{stderr}");
    let value = json(&out);
    for fs in ["fsoc", "littlefs"] {
        for op in ["create", "open", "delete"] {
            let samples = value["fs"][fs][op].as_array().unwrap_or_else(|| panic!("{fs} {op}"));
            assert_eq!(samples.len(), 15, "{fs} {op}");
            for key in ["reads", "programs", "erases", "sim_us"] {
                assert!(samples[0].get(key).is_some(), "{fs} {op} lacks {key}");
            }
        }
    }
}

#[test]
fn bench_postmark_quick_writes_the_agreed_keys_and_a_chart() {
    let directory = tempfile::tempdir().expect("temporary directory");
    let out = directory.path().join("postmark.json");
    let (ok, stdout, stderr) = fsoc(&["bench", "postmark", "--quick", "--json", out.to_str().expect("utf-8")]);
    assert!(ok, "{stdout}{stderr}");
    let value = json(&out);
    let runs = value["runs"].as_array().expect("runs");
    // NVRAM none, 1, 16 and 128 KiB, sync and async each, then littlefs.
    assert_eq!(runs.len(), 9);
    for run in runs {
        for key in [
            "target",
            "variant",
            "nvram_bytes",
            "elapsed_us",
            "flash_programs",
            "flash_erases",
            "erase_count_mean",
            "erase_count_std",
            "flash_energy_nj",
            "nvram_energy_nj",
            "total_energy_nj",
            "nvram_writes",
            "nvram_bytes_written",
        ] {
            assert!(run.get(key).is_some(), "{run} lacks {key}");
        }
    }
    assert!(value["targets"]["sync_speedup_128k"]["value"].as_f64().is_some());
    assert!(stdout.contains("| fsoc sync | 128 KiB |") && stdout.contains("| littlefs sync |"), "{stdout}");
    let chart = std::fs::read_to_string(out.with_extension("svg")).expect("chart beside the JSON");
    assert!(chart.starts_with("<svg") && chart.contains("littlefs (sync)"), "{chart}");
}

#[test]
fn bad_input_is_refused_clearly() {
    let directory = tempfile::tempdir().expect("temporary directory");
    let garbage = directory.path().join("garbage.img");
    std::fs::write(&garbage, vec![0x5Au8; 8192]).expect("write");
    let (ok, _, stderr) = fsoc(&["fsck", garbage.to_str().expect("utf-8")]);
    assert!(!ok);
    assert!(stderr.contains("garbage.img"), "{stderr}");
    let (ok, _, stderr) = fsoc(&["crashtest", "--workload", "no-such-workload"]);
    assert!(!ok);
    assert!(stderr.contains("unknown workload"), "{stderr}");
    let (ok, _, stderr) = fsoc(&["mkfs", directory.path().join("x.img").to_str().expect("utf-8"), "--profile", "qlc"]);
    assert!(!ok);
    assert!(stderr.contains("unknown profile"), "{stderr}");
}

#[test]
fn mkfs_info_fsck_round_trip() {
    let directory = tempfile::tempdir().expect("temporary directory");
    let image = directory.path().join("volume.img");
    let image = image.to_str().expect("utf-8");
    let (ok, stdout, stderr) = fsoc(&["mkfs", image, "--size", "16M", "--chips", "2"]);
    assert!(ok, "{stdout}{stderr}");
    let (ok, stdout, stderr) = fsoc(&["info", image]);
    assert!(ok, "{stdout}{stderr}");
    assert!(stdout.contains("2 chips"), "{stdout}");
    let (ok, stdout, stderr) = fsoc(&["fsck", image]);
    assert!(ok, "{stdout}{stderr}");
    assert!(stdout.contains("clean"), "{stdout}");
}
