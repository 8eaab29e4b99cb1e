//! The report's benchmarks: how each runs (in this process, or this program started again),
//! what it writes, and the rows it gives (fsoc, the peer in the same harness, the seed).

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use fsoc_bench::on_chip::{self, SettingOptions};
use fsoc_media::Profile;
use fsoc_sim::{crash_test, CrashConfig, Workload};
use serde_json::{json, Value};

use super::seeds::published;
use super::{html, Better, Chart, Context, Outcome, Row, Target};

/// Runs a benchmark (or reads its committed results) into its outcome.
type Runner = fn(&Context) -> Result<Outcome, String>;

/// One benchmark of the report.
pub(crate) struct Benchmark {
    /// The name `--skip` takes.
    pub name: &'static str,
    pub title: &'static str,
    pub seeds: &'static [&'static str],
    /// What is measured, in a sentence or two.
    pub what: &'static str,
    /// The peers in the same harness.
    pub peers: &'static str,
    /// The commands that reproduce the run (quick or full, with the seed), one a line.
    pub command: fn(bool, u64) -> String,
    /// Why it cannot run on this host (None: it can).
    pub unavailable: fn(bool) -> Option<String>,
    pub run: Runner,
    /// Figures from the repository's committed results, for when it is not run.
    pub committed: Option<Runner>,
}

fn quick_flag(full: bool) -> &'static str {
    if full {
        ""
    } else {
        " --quick"
    }
}

fn available(_full: bool) -> Option<String> {
    None
}

/// Every benchmark, by seed.
pub(crate) fn all() -> Vec<Benchmark> {
    vec![
        Benchmark {
            name: "fsoc",
            title: "File system on the chip against the conventional device (fsoc bench fsoc)",
            seeds: &["000", "002"],
            what: "Seed 000's section 5 on simulated chips, every figure computed from counted quantities (frames and bytes on the bus, chip time, a CPU-cycle proxy): bytes on the bus per operation (Fig. 15), Table 2's elapsed times under the seed's CompactFlash bus and a modern one, the performance model Eqs. (3)-(4) against the read-then-compute workload, and 4 KiB random reads over 9P at queue depth 1, 4 and 32 on 4 chips (seed 002's command queueing). Deterministic.",
            peers: "the conventional device: fsoc run on the host over raw pages (fsoc serve --raw), the same chips and counters",
            command: |full, seed| format!("fsoc bench fsoc{} --seed {seed} --json fsoc.json", quick_flag(full)),
            unavailable: available,
            run: run_fsoc,
            committed: None,
        },
        Benchmark {
            name: "scaling",
            title: "IOzone-style record sweep on 1, 2, 4 and 8 chips (fsoc bench scaling)",
            seeds: &["001", "002"],
            what: "Seed 001's IOzone sweep: one file written, rewritten, read, read and written at random, one record per call, every write pwrite + fsync (O_SYNC), remounted between phases, on fresh RAM-simulated arrays of 1, 2, 4 and 8 chips, SLC/MLC/TLC; throughput in simulated device time beside the array's physical limit (seed 002's efficiency).",
            peers: "none in this harness: the array's physical limit (p × page ÷ program or read time) is the reference",
            command: |full, seed| format!("fsoc bench scaling{} --seed {seed} --json scaling.json", quick_flag(full)),
            unavailable: available,
            run: run_scaling,
            committed: None,
        },
        Benchmark {
            name: "mount",
            title: "Mount cost against the number of files (fsoc bench mount)",
            seeds: &["001", "003"],
            what: "Page reads and simulated time of one mount after N empty files (1,000 per directory, a commit per directory), on one 512 MiB MLC chip; littlefs up to 10,000 files (populating it takes too long above).",
            peers: "littlefs (littlefs2 crate, its fastest configuration) on the same simulated chip",
            command: |_, seed| format!("fsoc bench mount --files 10,1000,10000,100000 --seed {seed} --json mount.json"),
            unavailable: available,
            run: run_mount,
            committed: None,
        },
        Benchmark {
            name: "readers",
            title: "Parallel readers on a 4-chip array of chip files (fsoc bench readers)",
            seeds: &["001"],
            what: "Wall-clock time on this machine: four threads reading four files against one, and 4 KiB read latency idle and while a writer streams fsync'd 64 KiB writes, on a 4-chip array of chip files in /dev/shm (seed 001: readers share the index tree under a readers-writer lock).",
            peers: "the same engine with the writer holding the volume through its flush (the way before the engine released it)",
            command: |full, seed| format!("fsoc bench readers{} --seed {seed} --json readers.json", quick_flag(full)),
            unavailable: available,
            run: run_readers,
            committed: None,
        },
        Benchmark {
            name: "fsio",
            title: "Seed 003's file benchmark: create, open, delete 15 × 133 files (fsoc bench fsio)",
            seeds: &["003"],
            what: "Datalight FSIO as in the Reliance Nitro paper: 15 samples of 133 files of 1 KiB created (each committed), opened and deleted (each committed), in one directory that grows to 1,995 files; simulated time on one 512 MiB MLC chip. Runs in full in both modes (seconds).",
            peers: "littlefs (littlefs2 crate, metadata_max 4 KiB, its fastest setting) on the same simulated chip",
            command: |_, seed| format!("fsoc bench fsio --seed {seed} --json fsio.json"),
            unavailable: available,
            run: run_fsio,
            committed: None,
        },
        Benchmark {
            name: "crashtest",
            title: "Power cut at every flash operation and NVRAM write (fsoc crashtest)",
            seeds: &["003", "004"],
            what: "Eight workloads (small files, overwrite, rename storm, deep tree, fill and delete, cleaner, churn, small syncs) replayed with power cut after every flash operation (a torn page or half-erased block) and every NVRAM write (torn at 8-byte words); after each cut the volume is mounted, checked by fsck and compared with the commit in force or in flight. Quick mode samples 40 cut points per workload; full mode cuts every point of the MLC and NVRAM runs and 400 per workload of the hazard runs.",
            peers: "none: the reference is the last committed state",
            command: |full, seed| {
                crash_runs(full, seed).into_iter().map(|run| run.command).collect::<Vec<_>>().join("\n")
            },
            unavailable: available,
            run: run_crashtest,
            committed: None,
        },
        Benchmark {
            name: "postmark",
            title: "Seed 004's PostMark with the NVRAM commit tier (fsoc bench postmark)",
            seeds: &["004"],
            what: "PostMark 1.5 in seed 004's configuration (10 directories, 1,000 files of 512 B-16 KiB, 10,000 transactions, 512-byte unbuffered reads and writes) on the engine in simulated time, sync (a transaction point after every create, append and delete) and async, without NVRAM and with 1 KiB to 1 MiB of FeRAM; one MLC chip. Quick mode: 100 files, 1,000 transactions, NVRAM none, 1, 16 and 128 KiB.",
            peers: "littlefs (sync: it commits at every close and remove) on the same simulated chip",
            command: |full, seed| format!("fsoc bench postmark{} --seed {seed} --json postmark.json", quick_flag(full)),
            unavailable: available,
            run: run_postmark,
            committed: None,
        },
        Benchmark {
            name: "fuse",
            title: "fsoc through FUSE against ext4 on this machine (fsoc bench fuse)",
            seeds: &["004"],
            what: "Real programs on a fresh fsoc FUSE mount and a fresh ext4 volume on a loop device, alternately, images in /dev/shm, wall-clock time: PostMark (seed 004's configuration), dbench, fio (sequential 1 MiB, random 4 KiB + fsync, random 4 KiB reads), a metadata storm (10,000 files created, listed, deleted) and small writes (4-byte appends, 512-byte write + fsync). Quick mode: scaled-down workloads, one repetition; full: three.",
            peers: "ext4 on a loop device, the same size, through the kernel",
            command: |full, _| format!("sudo fsoc bench fuse{} --json fuse.json", quick_flag(full)),
            unavailable: |_| {
                let problems = fsoc_bench::fuse::problems_here(1 << 30);
                (!problems.is_empty()).then(|| format!("needs {}", problems.join("; ")))
            },
            run: run_fuse,
            committed: Some(committed_fuse),
        },
        Benchmark {
            name: "mtd",
            title: "fsoc against UBI + UBIFS on the kernel's nandsim (fsoc bench mtd)",
            seeds: &["001", "003", "004"],
            what: "fsoc (its FUSE mount on /dev/mtd0) and UBI + UBIFS on the same simulated raw NAND chip of a real Linux kernel (nandsim with a Samsung K9F2G08's datasheet delays), every page read, program and erase counted with kprobes: mount of a chip holding the same tree from 256 MiB to 8 GiB, 1,000 durable small files, 64 MiB sequential, PostMark.",
            peers: "UBI + UBIFS (ubiattach, mount -t ubifs) on the same nandsim chip",
            command: |full, _| {
                format!(
                    "scripts/bench-mtd.sh --json mtd.json{}   # boots Debian's kernel under QEMU and runs fsoc bench mtd inside",
                    quick_flag(full)
                )
            },
            unavailable: |_| {
                let problems = fsoc_bench::mtd::problems_here();
                (!problems.is_empty()).then(|| {
                    format!(
                        "needs a Linux kernel with nandsim, UBI, UBIFS and kprobe events, as root; here it lacks {}; on a build machine scripts/bench-mtd.sh runs it under QEMU",
                        problems.join("; ")
                    )
                })
            },
            run: run_mtd,
            committed: Some(committed_mtd),
        },
    ]
}

fn number(value: &Value) -> Option<f64> {
    value.as_f64().filter(|value| value.is_finite())
}

fn error_text(error: impl std::fmt::Display) -> String {
    error.to_string()
}

/// The `targets` list a benchmark's JSON carries (`target`, `measured`, `met`).
fn targets_of(list: &Value) -> Vec<Target> {
    list.as_array()
        .into_iter()
        .flatten()
        .map(|target| Target {
            target: target["target"].as_str().unwrap_or("").to_string(),
            measured: target["measured"].as_str().unwrap_or("").to_string(),
            met: target["met"].as_bool(),
        })
        .collect()
}

// ---------------------------------------------------------------- fsoc bench fsoc (seed 000)

const CONVENTIONAL: &str = "conventional device (raw pages)";

fn run_fsoc(context: &Context) -> Result<Outcome, String> {
    let progress = context.progress;
    let (_, report) =
        on_chip::measure(!context.full, context.seed, &SettingOptions::default(), &mut |line| progress.message(line))
            .map_err(|error| format!("fsoc bench fsoc: {error}"))?;
    let mut outcome = Outcome::default();
    context.write_json(&mut outcome, "fsoc.json", &report)?;
    for (path, svg) in on_chip::charts::charts(Path::new("fsoc.json"), &report) {
        context.chart(&mut outcome, &path.to_string_lossy(), svg)?;
    }
    outcome.rows = fsoc_rows(&report);
    outcome.headline = fsoc_headline(&report);
    let fig15 = &report["fig15"]["targets"];
    outcome.notes.push(format!(
        "CPU proxy: 5,000 cycles per file-system call, 3,000 per flash page, 1,000 per frame. Seed setting: {} KB/s bus, host {} MHz, device {} MHz; modern: 40 MB/s, host 2 GHz, device 400 MHz. Fig. 15 targets: metadata at most {}% of the conventional bytes.",
        number(&report["settings"]["seed_cf_pcmcia"]["bus_bandwidth_bytes_per_s"]).map_or(750.0, |bytes| bytes / 1e3),
        number(&report["settings"]["seed_cf_pcmcia"]["host_clock_mhz"]).unwrap_or(56.0),
        number(&report["settings"]["seed_cf_pcmcia"]["device_clock_mhz"]).unwrap_or(24.0),
        number(&fig15["metadata_bytes_ratio_max"]).map_or(5.0, |ratio| ratio * 100.0)
    ));
    Ok(outcome)
}

fn fsoc_headline(report: &Value) -> String {
    let durable = &report["fig15"]["regimes"]["durable_each"];
    let shares: Vec<f64> = ["mkdir", "rmdir", "create", "delete"]
        .iter()
        .filter_map(|operation| number(&durable[operation]["bytes_ratio"]))
        .collect();
    let low = shares.iter().copied().fold(f64::INFINITY, f64::min) * 100.0;
    let high = shares.iter().copied().fold(0.0, f64::max) * 100.0;
    let table2 = &report["table2"];
    let creates = number(&table2["workloads"]["create_500"]["elapsed"]["seed_cf_pcmcia"]["conventional_over_fsoc"]);
    let queue =
        report["queue_depth"]["depths"].as_array().and_then(|depths| depths.last()).cloned().unwrap_or(Value::Null);
    format!(
        "Fig. 15: mkdir, rmdir, create and delete move {low:.1}–{high:.1}% of the conventional device's bytes (seed 000: 5–30%); Table 2, {} durable creates: the conventional device takes {} FSOC's time (seed: 3.2×); model error {:.1}% (seed: 2–3%); 4 KiB reads at depth {}: {} depth 1, {:.1}% of the raw chips (seed 002: 85% of peak)",
        table2["config"]["creates"],
        creates.map_or("–".into(), html::times),
        number(&report["model"]["error_abs_max"]).unwrap_or(f64::NAN) * 100.0,
        queue["depth"],
        number(&queue["speedup_over_depth_1"]).map_or("–".into(), html::times),
        number(&queue["fraction_of_raw"]).unwrap_or(f64::NAN) * 100.0
    )
}

fn fsoc_rows(report: &Value) -> Vec<Row> {
    let mut rows = Vec::new();
    let durable = &report["fig15"]["regimes"]["durable_each"];
    for operation in fsoc_bench::on_chip::OPERATIONS {
        let row = &durable[operation];
        let figure = match operation {
            "mkdir" | "rmdir" | "create" | "delete" => Some(published::S000_FIG15_METADATA),
            "read" | "write" => Some(published::S000_FIG15_DATA),
            _ => None,
        };
        rows.push(
            Row::new(
                format!("Fig. 15: bytes on the bus per {operation}, a transaction point after each"),
                "B/op",
                number(&row["fsoc_bytes_per_op"]),
            )
            .peer(CONVENTIONAL, number(&row["conventional_bytes_per_op"]), Better::Lower)
            .ratio_in_percent()
            .seed("000", figure),
        );
    }
    let table2 = &report["table2"];
    let config = &table2["config"];
    for (workload, label, figure) in [
        (
            "read_1mib",
            format!("read {} in 4 KiB reads", size_text(number(&config["read_bytes"]).unwrap_or(0.0))),
            published::S000_TABLE2_READ,
        ),
        ("create_500", format!("{} creates, each durable", config["creates"]), published::S000_TABLE2_CREATE),
        (
            "andrew_copy",
            "Andrew-like copy (phase 2: files copied, each durable)".to_string(),
            published::S000_TABLE2_ANDREW,
        ),
    ] {
        for (setting, setting_label) in
            [("seed_cf_pcmcia", "seed's CompactFlash bus"), ("modern_40mb_s", "modern 40 MB/s bus")]
        {
            let elapsed = &table2["workloads"][workload]["elapsed"][setting];
            rows.push(
                Row::new(format!("Table 2: {label}, {setting_label}"), "ms", number(&elapsed["fsoc"]["total_ms"]))
                    .peer(CONVENTIONAL, number(&elapsed["conventional"]["total_ms"]), Better::Lower)
                    .seed("000", (setting == "seed_cf_pcmcia").then_some(figure)),
            );
        }
    }
    rows.push(
        Row::new(
            "Performance model Eqs. (3)-(4) against the measured run: largest error over the compute and host-clock sweeps",
            "%",
            number(&report["model"]["error_abs_max"]).map(|error| error * 100.0),
        )
        .seed("000", Some(published::S000_MODEL_ERROR)),
    );
    let queue = &report["queue_depth"];
    let depths: Vec<&Value> = queue["depths"].as_array().into_iter().flatten().collect();
    if let (Some(first), Some(last)) = (depths.first(), depths.last()) {
        rows.push(
            Row::new(
                format!(
                    "4 KiB random reads over 9P, {} chips: reads/s at depth {} ÷ depth {}",
                    queue["config"]["chips"], last["depth"], first["depth"]
                ),
                "×",
                number(&last["speedup_over_depth_1"]),
            )
            .seed("002", Some(published::S002_QUEUEING)),
        );
        rows.push(
            Row::new(
                format!("4 KiB random reads over 9P at depth {}", last["depth"]),
                "reads/s",
                number(&last["reads_per_s"]),
            )
            .limit("the raw chips at the same depth (no file system)", number(&queue["raw"]["reads_per_s"]))
            .seed("002", Some(published::S002_EFFICIENCY_READ)),
        );
    }
    rows
}

fn size_text(bytes: f64) -> String {
    if bytes >= 1_048_576.0 {
        format!("{} MiB", bytes / 1_048_576.0)
    } else {
        format!("{} KiB", bytes / 1024.0)
    }
}

// ------------------------------------------------------------- fsoc bench scaling (seed 001)

fn run_scaling(context: &Context) -> Result<Outcome, String> {
    let options =
        fsoc_bench::scaling::ScalingOptions { quick: !context.full, seed: context.seed, paired_page_guard: true };
    let total = options.sweep().cell_count();
    let mut done = 0;
    let progress = context.progress;
    let report = fsoc_bench::scaling::run(&options, &mut |label| {
        done += 1;
        progress.counts(done, total, label);
    })?;
    let value = report.to_value();
    let mut outcome = Outcome::default();
    context.write_json(&mut outcome, "scaling.json", &value)?;
    context.chart(&mut outcome, "scaling.svg", report.svg())?;
    outcome.rows = scaling_rows(&value);
    outcome.targets = targets_of(&value["targets"]);
    let speedups: Vec<String> = outcome
        .rows
        .iter()
        .filter(|row| row.experiment.starts_with("TLC synced"))
        .map(|row| row.fsoc.map_or("–".into(), html::times))
        .collect();
    let share = |op: &str| {
        outcome
            .rows
            .iter()
            .find(|row| {
                row.experiment.starts_with(&format!("TLC sequential {op}")) && row.experiment.contains("8 chip")
            })
            .and_then(|row| row.ratio)
            .map_or("–".into(), html::percent)
    };
    outcome.headline = format!(
        "TLC, 16 MiB synced writes on 2, 4, 8 chips: {} one chip's rate (seed 001's MA-UBIFS: 1.79× and 2.89× on 2 and 4); on 8 chips sequential writes reach {} and reads {} of the chips' limit (seed 002: 80% and 85% of peak); {} of {} targets met",
        speedups.join(", "),
        share("write"),
        share("read"),
        outcome.targets.iter().filter(|target| target.met == Some(true)).count(),
        outcome.targets.len()
    );
    Ok(outcome)
}

fn scaling_rows(report: &Value) -> Vec<Row> {
    let rows: Vec<&Value> = report["rows"].as_array().into_iter().flatten().collect();
    let largest = rows.iter().filter_map(|row| row["record_bytes"].as_u64()).max().unwrap_or(0);
    let find = |profile: &str, chips: u64, op: &str| {
        rows.iter().copied().find(|row| {
            row["profile"] == profile
                && row["chips"].as_u64() == Some(chips)
                && row["op"] == op
                && row["record_bytes"].as_u64() == Some(largest)
        })
    };
    let record = size_text(largest as f64);
    let mut out = Vec::new();
    for profile in ["tlc", "mlc", "slc"] {
        let base = find(profile, 1, "write").and_then(|row| number(&row["mib_per_s"]));
        for chips in [2, 4, 8] {
            let speedup = find(profile, chips, "write")
                .and_then(|row| number(&row["mib_per_s"]))
                .zip(base)
                .map(|(rate, base)| rate / base);
            let figure = match (profile, chips) {
                ("tlc", 2) => Some(published::S001_SCALING_2),
                ("tlc", 4) => Some(published::S001_SCALING_4),
                ("tlc", 8) => Some(published::S001_SCALING_8),
                _ => None,
            };
            out.push(
                Row::new(
                    format!(
                        "{} synced sequential writes ({record} records): {chips} chips ÷ 1 chip",
                        profile.to_uppercase()
                    ),
                    "×",
                    speedup,
                )
                .seed("001", figure),
            );
        }
    }
    for (op, figure) in [("write", published::S002_EFFICIENCY_WRITE), ("read", published::S002_EFFICIENCY_READ)] {
        for chips in [1, 4, 8] {
            if let Some(row) = find("tlc", chips, op) {
                out.push(
                    Row::new(
                        format!("TLC sequential {op}, {record} records, {chips} chip(s): throughput against the chips' limit"),
                        "MiB/s",
                        number(&row["mib_per_s"]),
                    )
                    .limit("the chips' physical limit (no file system)", number(&row["raw_mib_per_s"]))
                    .seed("002", Some(figure)),
                );
            }
        }
    }
    out
}

// --------------------------------------------------------------- fsoc bench mount (seed 001)

const MOUNT_FILES: [u64; 4] = [10, 1000, 10_000, 100_000];

fn run_mount(context: &Context) -> Result<Outcome, String> {
    let progress = context.progress;
    let report = fsoc_bench::run_mount_with_progress(&MOUNT_FILES, context.seed, &mut |line| progress.message(line))
        .map_err(|error| format!("mount benchmark: {error}"))?;
    let mut outcome = Outcome::default();
    context.write_json(&mut outcome, "mount.json", &report)?;
    context.chart(&mut outcome, "mount.svg", fsoc_bench::mount::svg(&report))?;
    let littlefs: Vec<&Value> = report["littlefs"].as_array().into_iter().flatten().collect();
    for row in report["mounts"].as_array().into_iter().flatten() {
        let files = row["files"].as_u64().unwrap_or(0);
        let peer = littlefs.iter().find(|peer| peer["files"].as_u64() == Some(files));
        outcome.rows.push(
            Row::new(
                format!(
                    "mount after {} empty files: page reads{}",
                    group(files),
                    if peer.is_none() {
                        " (littlefs is not run at this count: populating it takes too long)"
                    } else {
                        ""
                    }
                ),
                "page reads",
                number(&row["page_reads"]),
            )
            .peer("littlefs", peer.and_then(|peer| number(&peer["page_reads"])), Better::Lower)
            .seed("003", Some(published::S003_MOUNT)),
        );
        outcome.rows.push(
            Row::new(
                format!("mount after {} empty files: simulated time", group(files)),
                "ms",
                number(&row["sim_us"]).map(|us| us / 1e3),
            )
            .peer("littlefs", peer.and_then(|peer| number(&peer["sim_us"])).map(|us| us / 1e3), Better::Lower)
            .seed("001", Some(published::S001_MOUNT)),
        );
    }
    let reads = |rows: &[Row], peer: bool| {
        rows.iter()
            .filter(|row| row.unit == "page reads")
            .map(|row| if peer { row.peer } else { row.fsoc }.map_or("not run".into(), html::number))
            .collect::<Vec<_>>()
            .join(" / ")
    };
    let counts: Vec<String> = MOUNT_FILES.iter().map(|&files| group(files)).collect();
    outcome.headline = format!(
        "page reads per mount after {} files: fsoc {}, littlefs {} (seed 003: 3–5 block reads)",
        counts.join(" / "),
        reads(&outcome.rows, false),
        reads(&outcome.rows, true)
    );
    if let Some(limit) = report["littlefs_skipped_above"].as_u64() {
        outcome.notes.push(format!("littlefs is not run above {} files: populating it takes too long.", group(limit)));
    }
    Ok(outcome)
}

/// 100000 as 100,000.
pub(crate) fn group(value: u64) -> String {
    let digits = value.to_string();
    let mut out = String::new();
    for (index, digit) in digits.chars().enumerate() {
        if index > 0 && (digits.len() - index).is_multiple_of(3) {
            out.push(',');
        }
        out.push(digit);
    }
    out
}

// ------------------------------------------------------------- fsoc bench readers (seed 001)

fn run_readers(context: &Context) -> Result<Outcome, String> {
    let progress = context.progress;
    let report = fsoc_bench::readers::run_in_scratch(!context.full, context.seed, &mut |line| progress.message(line))
        .map_err(|error| format!("readers benchmark: {error}"))?;
    let mut outcome = Outcome::default();
    context.write_json(&mut outcome, "readers.json", &report)?;
    context.chart(&mut outcome, "readers.svg", fsoc_bench::readers::chart(&report))?;
    let throughput = &report["throughput"];
    let latency = &report["latency"];
    // The paced writer (one fsync'd write per period in both locking modes) compares them at
    // the same write load; older reports have only the unpaced one.
    let (outside, inside, load) = if latency["paced"].is_object() {
        (
            &latency["paced"]["flush_outside_lock"],
            &latency["paced"]["flush_inside_lock"],
            format!(
                "a writer making one fsync'd 64 KiB write every {} ms",
                html::number(number(&latency["paced"]["writer_period_us"]).unwrap_or(f64::NAN) / 1e3)
            ),
        )
    } else {
        (latency, &latency["flush_inside_lock"], "a writer streaming fsync'd 64 KiB writes".to_string())
    };
    outcome.rows.push(
        Row::new("throughput, 4 readers of 4 files ÷ 1 reader", "×", number(&throughput["ratio"]))
            .better(Better::Higher)
            .seed("001", None),
    );
    for (quantile, key) in [("median", "with_writer_median_us"), ("p99", "with_writer_p99_us")] {
        outcome.rows.push(
            Row::new(format!("4 KiB read latency ({quantile}) beside {load}"), "µs", number(&outside[key]))
                .peer("the writer holding the volume through its flush", number(&inside[key]), Better::Lower)
                .seed("001", None),
        );
    }
    for (quantile, key) in [("median", "median_ratio"), ("p99", "p99_ratio")] {
        outcome.rows.push(
            Row::new(
                format!(
                    "4 KiB read latency ({quantile}) with a writer streaming fsync'd 64 KiB writes ÷ idle (target ≤ 3)"
                ),
                "×",
                number(&latency[key]),
            )
            .better(Better::Lower),
        );
    }
    outcome.headline = format!(
        "4 readers: {} one reader's rate; 4 KiB read latency with a writer streaming fsync'd writes: median {}, p99 {} idle (wall clock on this machine)",
        number(&throughput["ratio"]).map_or("–".into(), html::times),
        number(&latency["median_ratio"]).map_or("–".into(), html::times),
        number(&latency["p99_ratio"]).map_or("–".into(), html::times)
    );
    outcome.notes.push(format!(
        "Wall-clock figures on this machine ({} CPUs): they vary from run to run and with the machine's load. The streaming writer made {} fsyncs with the flush outside the volume lock and {} holding it; the paced rows compare the two at the same write load.",
        report["config"]["cpus"], latency["writer_fsyncs"], latency["flush_inside_lock"]["writer_fsyncs"]
    ));
    Ok(outcome)
}

// ---------------------------------------------------------------- fsoc bench fsio (seed 003)

fn run_fsio(context: &Context) -> Result<Outcome, String> {
    let progress = context.progress;
    let config = fsoc_bench::fsio::FsioConfig::full(context.seed);
    let report = fsoc_bench::fsio::run(&config, &mut |line| progress.message(line))
        .map_err(|error| format!("fsio benchmark: {error}"))?;
    let mut outcome = Outcome::default();
    context.write_json(&mut outcome, "fsio.json", &report)?;
    context.chart(&mut outcome, "fsio.svg", fsoc_bench::fsio::chart(&report))?;
    let totals = &report["summary"]["totals"];
    let files = f64::from(config.sample_count * config.files_per_sample);
    for (operation, figure) in
        [("create", published::S003_CREATE), ("open", published::S003_OPEN), ("delete", published::S003_DELETE)]
    {
        outcome.rows.push(
            Row::new(
                format!(
                    "{operation}: {} samples × {} files, simulated time",
                    config.sample_count, config.files_per_sample
                ),
                "s",
                number(&totals["fsoc"][operation]["sim_us"]).map(|us| us / 1e6),
            )
            .peer("littlefs", number(&totals["littlefs"][operation]["sim_us"]).map(|us| us / 1e6), Better::Lower)
            .seed("003", Some(figure)),
        );
    }
    for operation in ["create", "delete"] {
        outcome.rows.push(
            Row::new(
                format!("page programs per durable {operation}"),
                "programs",
                number(&totals["fsoc"][operation]["programs"]).map(|programs| programs / files),
            )
            .peer(
                "littlefs",
                number(&totals["littlefs"][operation]["programs"]).map(|programs| programs / files),
                Better::Lower,
            )
            .seed("003", None),
        );
    }
    let parts: Vec<String> = outcome
        .rows
        .iter()
        .take(3)
        .map(|row| {
            format!(
                "{} {} s against {} s",
                row.experiment.split(':').next().unwrap_or("?"),
                row.fsoc.map_or("–".into(), html::number),
                row.peer.map_or("–".into(), html::number)
            )
        })
        .collect();
    outcome.headline = format!(
        "simulated time of 1,995 files, fsoc against littlefs: {} (seed 003: Reliance Nitro 6–18× faster than T-exFAT at create, up to 186× at open, 2–8× at delete)",
        parts.join(", ")
    );
    outcome.notes.push(format!(
        "The limit for create is one page program per file: {:.2} s. Simulated time is flash time only (CPU is not modelled). The seed compares Reliance Nitro with T-exFAT on an SD card; the peer here is littlefs.",
        number(&report["summary"]["limit_create_sim_us"]).unwrap_or(0.0) / 1e6
    ));
    Ok(outcome)
}

// ------------------------------------------------------------ fsoc crashtest (seeds 003, 004)

struct CrashRun {
    label: String,
    command: String,
    config: CrashConfig,
    seed: &'static str,
}

fn crash_runs(full: bool, seed: u64) -> Vec<CrashRun> {
    let quick_cuts = 40;
    let every = |cuts: u64| if full { None } else { Some(cuts.min(quick_cuts)) };
    let sampled = if full { 400 } else { quick_cuts };
    let max_cuts_option = |max_cuts: Option<u64>| max_cuts.map_or(String::new(), |cuts| format!(" --max-cuts {cuts}"));
    let mlc = CrashConfig { max_cuts: every(u64::MAX), ..CrashConfig::small(seed) };
    let tlc = CrashConfig {
        profile: Profile::Tlc,
        unstable_bits: true,
        paired_pages: true,
        max_cuts: Some(sampled),
        ..CrashConfig::small(seed + 3)
    };
    let slc = CrashConfig {
        profile: Profile::Slc,
        chip_count: 4,
        block_count: 24,
        max_cuts: Some(sampled),
        ..CrashConfig::small(seed + 2)
    };
    let nvram = CrashConfig { nvram_bytes: Some(4096), max_cuts: every(u64::MAX), ..CrashConfig::small(seed) };
    vec![
        CrashRun {
            label: format!("MLC, 1 chip, {}", if full { "every flash operation" } else { "sampled flash operations" }),
            command: format!("fsoc crashtest --workload all --seed {seed}{}", max_cuts_option(mlc.max_cuts)),
            config: mlc,
            seed: "003",
        },
        CrashRun {
            label: "TLC, 1 chip, unstable bits and paired pages (sampled)".into(),
            command: format!(
                "fsoc crashtest --workload all --seed {} --profile tlc --unstable-bits --paired-pages{}",
                seed + 3,
                max_cuts_option(tlc.max_cuts)
            ),
            config: tlc,
            seed: "003",
        },
        CrashRun {
            label: "SLC, 4 chips (sampled)".into(),
            command: format!(
                "fsoc crashtest --workload all --seed {} --profile slc --chips 4 --blocks 24{}",
                seed + 2,
                max_cuts_option(slc.max_cuts)
            ),
            config: slc,
            seed: "003",
        },
        CrashRun {
            label: format!(
                "MLC, 1 chip, 4 KiB of NVRAM, {}",
                if full {
                    "every flash operation and NVRAM write"
                } else {
                    "sampled flash operations and NVRAM writes"
                }
            ),
            command: format!(
                "fsoc crashtest --workload all --nvram 4K --seed {seed}{}",
                max_cuts_option(nvram.max_cuts)
            ),
            config: nvram,
            seed: "004",
        },
    ]
}

fn run_crashtest(context: &Context) -> Result<Outcome, String> {
    let mut outcome = Outcome::default();
    let mut runs = Vec::new();
    let mut chart_runs = Vec::new();
    for run in crash_runs(context.full, context.seed) {
        let mut reports = Vec::new();
        for workload in Workload::ALL {
            let what = format!("{}: {}", run.label, workload.name());
            let report =
                crash_test(workload, &run.config, &mut |done, total| context.progress.counts(done, total, &what))?;
            reports.push(report);
        }
        let cut_points: u64 = reports.iter().map(|report| report.cut_points).sum();
        let failures: u64 = reports.iter().map(|report| report.failures).sum();
        let nvram_writes: u64 = reports.iter().map(|report| report.nvram_writes).sum();
        for report in reports.iter().filter(|report| report.failures > 0) {
            outcome.alarms.push(format!(
                "{} ({}): {} of {} cut points failed: {}",
                report.workload,
                run.command,
                report.failures,
                report.cut_points,
                report.failure_examples.join("; ")
            ));
        }
        let nvram_text = if run.config.nvram_bytes.is_some() {
            format!(" (reference run: {} NVRAM writes)", group(nvram_writes))
        } else {
            String::new()
        };
        let figure = if run.seed == "004" { published::S004_CRASH } else { published::S003_CRASH };
        outcome.rows.push(
            Row::new(
                format!("{}: {} cut points over 8 workloads{nvram_text}", run.label, group(cut_points)),
                "failures",
                Some(failures as f64),
            )
            .seed(run.seed, Some(figure)),
        );
        chart_runs.push(CrashChartRun {
            label: run.label.clone(),
            workloads: reports
                .iter()
                .map(|report| (report.workload.clone(), report.cut_points, report.failures))
                .collect(),
        });
        runs.push(json!({
            "label": run.label,
            "command": run.command,
            "profile": run.config.profile.name(),
            "chips": run.config.chip_count,
            "blocks": run.config.block_count,
            "seed": run.config.seed,
            "max_cuts": run.config.max_cuts,
            "nvram_bytes": run.config.nvram_bytes,
            "cut_points": cut_points,
            "failures": failures,
            "workloads": reports,
        }));
    }
    let total_cuts: u64 = runs.iter().filter_map(|run| run["cut_points"].as_u64()).sum();
    let total_failures: u64 = runs.iter().filter_map(|run| run["failures"].as_u64()).sum();
    // The committed NVRAM sweep, beside what ran now.
    let sweep: Value = serde_json::from_str(COMMITTED_CRASH_NVRAM).map_err(error_text)?;
    let mut sweep_row = Row::new(
        format!(
            "committed NVRAM sweep ({} runs: 4 KiB, 1 KiB, 128 KiB on SLC × 4, and sync-small × 100 with both hazards): {} cut points, {} of them NVRAM writes",
            sweep["runs"].as_array().map_or(0, Vec::len),
            group(sweep["cut_points"].as_u64().unwrap_or(0)),
            group(sweep["nvram_write_cut_points"].as_u64().unwrap_or(0))
        ),
        "failures",
        number(&sweep["failures"]),
    )
    .seed("004", Some(published::S004_CRASH));
    sweep_row.committed_file = Some(CRASH_NVRAM_FILE.into());
    outcome.rows.push(sweep_row);
    outcome.headline = format!(
        "{} power cuts in {} runs ({}), {} failures; the committed NVRAM sweep: {} cuts, {} failures",
        group(total_cuts),
        runs.len(),
        if context.full {
            "every cut of the MLC and NVRAM runs, 400 per workload of the hazard runs"
        } else {
            "40 sampled per workload and run"
        },
        group(total_failures),
        group(sweep["cut_points"].as_u64().unwrap_or(0)),
        group(sweep["failures"].as_u64().unwrap_or(0))
    );
    context.write_json(
        &mut outcome,
        "crashtest.json",
        &json!({"benchmark": "crashtest", "mode": context.mode(), "runs": runs}),
    )?;
    context.chart(&mut outcome, "crashtest.svg", crash_chart(&chart_runs))?;
    Ok(outcome)
}

/// One run's bars: its label and, per workload, (name, cut points, failures).
struct CrashChartRun {
    label: String,
    workloads: Vec<(String, u64, u64)>,
}

/// Cut points per workload and run (log scale), failures written above their bar in red.
fn crash_chart(runs: &[CrashChartRun]) -> String {
    use fsoc_bench::svg_chart::{self, LogScale};
    const LEFT: f64 = 70.0;
    const TOP: f64 = 50.0;
    const WIDTH: f64 = 720.0;
    const HEIGHT: f64 = 240.0;
    const COLORS: [&str; 4] = ["#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd"];
    let workloads: Vec<String> =
        runs.first().map(|run| run.workloads.iter().map(|(name, _, _)| name.clone()).collect()).unwrap_or_default();
    let high = runs.iter().flat_map(|run| run.workloads.iter().map(|(_, cuts, _)| *cuts)).max().unwrap_or(10).max(10);
    let axis = LogScale::new(1.0, high as f64 * 1.5, TOP, HEIGHT);
    let mut svg = String::new();
    svg_chart::begin(&mut svg, LEFT + WIDTH + 30.0, TOP + HEIGHT + 50.0 + 16.0 * runs.len() as f64);
    svg_chart::label(
        &mut svg,
        LEFT,
        22.0,
        "start",
        "Power cuts per workload (log scale); failures in red above a bar, none if absent",
    );
    svg_chart::frame(&mut svg, LEFT, TOP, WIDTH, HEIGHT);
    axis.grid(&mut svg, LEFT, WIDTH);
    let slot = WIDTH / workloads.len().max(1) as f64;
    let bar_width = slot * 0.8 / runs.len().max(1) as f64;
    for (workload_index, workload) in workloads.iter().enumerate() {
        let left = LEFT + slot * workload_index as f64 + slot * 0.1;
        for (run_index, run) in runs.iter().enumerate() {
            let Some((_, cuts, failures)) = run.workloads.iter().find(|(name, _, _)| name == workload) else {
                continue;
            };
            let x = left + bar_width * run_index as f64;
            let top = axis.y((*cuts).max(1) as f64);
            svg_chart::bar(&mut svg, x, top, bar_width * 0.9, axis.y(1.0) - top, COLORS[run_index % COLORS.len()]);
            if *failures > 0 {
                let _ = std::fmt::Write::write_fmt(
                    &mut svg,
                    format_args!(
                        "<text x=\"{:.1}\" y=\"{:.1}\" fill=\"#d62728\" text-anchor=\"middle\">{failures}</text>\n",
                        x + bar_width * 0.45,
                        top - 3.0
                    ),
                );
            }
        }
        svg_chart::label(&mut svg, left + slot * 0.4, TOP + HEIGHT + 16.0, "middle", workload);
    }
    for (run_index, run) in runs.iter().enumerate() {
        let y = TOP + HEIGHT + 34.0 + 16.0 * run_index as f64;
        svg_chart::bar(&mut svg, LEFT, y - 9.0, 10.0, 10.0, COLORS[run_index % COLORS.len()]);
        svg_chart::label(&mut svg, LEFT + 14.0, y, "start", &run.label);
    }
    svg_chart::end(&mut svg);
    svg
}

// ------------------------------------------------------------ fsoc bench postmark (seed 004)

fn run_postmark(context: &Context) -> Result<Outcome, String> {
    use fsoc_bench::postmark::{self, PostmarkConfig};
    let config = if context.full { PostmarkConfig::full(context.seed) } else { PostmarkConfig::quick(context.seed) };
    let progress = context.progress;
    let report = postmark::run(&config, &mut |line| progress.message(line))
        .map_err(|error| format!("postmark benchmark: {error}"))?;
    let mut outcome = Outcome::default();
    context.write_json(&mut outcome, "postmark.json", &report)?;
    context.chart(&mut outcome, "postmark.svg", fsoc_bench::postmark::chart::chart_svg(&report))?;
    let runs: Vec<&Value> = report["runs"].as_array().into_iter().flatten().collect();
    let find = |target: &str, variant: &str, nvram: u64| {
        runs.iter().copied().find(|run| {
            run["target"] == target && run["variant"] == variant && run["nvram_bytes"].as_u64() == Some(nvram)
        })
    };
    let field = |run: Option<&Value>, key: &str| run.and_then(|run| number(&run[key]));
    let littlefs = find("littlefs", "sync", 0);
    let targets = &report["targets"];
    outcome.rows.push(
        Row::new(
            "Sync-PostMark: elapsed without NVRAM ÷ with 128 KiB of NVRAM",
            "×",
            number(&targets["sync_speedup_128k"]["value"]),
        )
        .better(Better::Higher)
        .seed("004", Some(published::S004_SPEEDUP)),
    );
    outcome.rows.push(
        Row::new(
            "Sync-PostMark: energy without NVRAM ÷ with 128 KiB",
            "×",
            number(&targets["sync_energy_reduction_128k"]["value"]),
        )
        .better(Better::Higher)
        .seed("004", Some(published::S004_ENERGY)),
    );
    outcome.rows.push(
        Row::new(
            "Sync-PostMark: flash erases without NVRAM ÷ with 128 KiB",
            "×",
            number(&targets["sync_erase_reduction_128k"]["value"]),
        )
        .better(Better::Higher)
        .seed("004", Some(published::S004_WEAR)),
    );
    for (nvram, label, figure) in
        [(0, "without NVRAM", published::S004_SYNC_NONE), (131_072, "with 128 KiB of NVRAM", published::S004_SYNC_128K)]
    {
        outcome.rows.push(
            Row::new(format!("Sync-PostMark elapsed, {label}"), "s", field(find("fsoc", "sync", nvram), "elapsed_s"))
                .peer("littlefs (sync, no NVRAM)", field(littlefs, "elapsed_s"), Better::Lower)
                .seed("004", Some(figure)),
        );
        outcome.rows.push(
            Row::new(
                format!("Sync-PostMark energy (flash + NVRAM), {label}"),
                "J",
                field(find("fsoc", "sync", nvram), "total_energy_j"),
            )
            .peer("littlefs (sync, no NVRAM)", field(littlefs, "total_energy_j"), Better::Lower)
            .seed("004", Some(if nvram == 0 { published::S004_ENERGY_NONE } else { published::S004_ENERGY_128K })),
        );
    }
    outcome.rows.push(
        Row::new(
            "Async PostMark elapsed, without NVRAM (one transaction point at the end)",
            "s",
            field(find("fsoc", "async", 0), "elapsed_s"),
        )
        .seed("004", None),
    );
    outcome.headline = format!(
        "Sync-PostMark with 128 KiB of NVRAM against none: {} faster, energy {} lower (seed 004: 13.6× and 14.5×); sync with 128 KiB {} s, littlefs {} s",
        number(&targets["sync_speedup_128k"]["value"]).map_or("–".into(), html::times),
        number(&targets["sync_energy_reduction_128k"]["value"]).map_or("–".into(), html::times),
        field(find("fsoc", "sync", 131_072), "elapsed_s").map_or("–".into(), html::number),
        field(littlefs, "elapsed_s").map_or("–".into(), html::number)
    );
    if let Some(map) = targets.as_object() {
        for (name, target) in map {
            if let Some(met) = target["met"].as_bool() {
                outcome.targets.push(Target {
                    target: format!("{name} {}", target["target"].as_str().unwrap_or("")),
                    measured: number(&target["value"]).map_or("–".into(), |value| format!("{value:.3}")),
                    met: Some(met),
                });
            }
        }
    }
    let workload = &report["workload"];
    outcome.notes.push(format!(
        "{} files, {} transactions on one MLC chip; the seed ran VFAT/NVFAT on a 32 MB partition behind a log-block FTL, so its absolute times are not fsoc's: compare the ratios.",
        report["config"]["workload"]["files"], workload["transactions"]
    ));
    Ok(outcome)
}

// ------------------------------------------------------------------ fsoc bench fuse (ext4)

const FUSE_FILE: &str = "crates/fsoc-cli/results/fuse.json";
const SMALL_WRITES_FILE: &str = "crates/fsoc-cli/results/small_writes.json";
const MTD_FILE: &str = "crates/fsoc-cli/results/mtd.json";
const CRASH_NVRAM_FILE: &str = "crates/fsoc-cli/results/crash-nvram.json";
const COMMITTED_FUSE: &str = include_str!("../../results/fuse.json");
const COMMITTED_FUSE_SVG: &str = include_str!("../../results/fuse.svg");
const COMMITTED_SMALL_WRITES: &str = include_str!("../../results/small_writes.json");
const COMMITTED_SMALL_WRITES_SVG: &str = include_str!("../../results/small_writes.svg");
const COMMITTED_MTD: &str = include_str!("../../results/mtd.json");
const COMMITTED_MTD_SVG: &str = include_str!("../../results/mtd.svg");
const COMMITTED_CRASH_NVRAM: &str = include_str!("../../results/crash-nvram.json");

/// Runs this program again as `fsoc ARGUMENTS`, its output in `LOG` in the output directory,
/// keeping the bars moving; an exit status other than 0 is an error with the log's last lines.
fn run_self(context: &Context, arguments: &[&str], log: &str) -> Result<(), String> {
    let program = std::env::current_exe().map_err(|error| format!("cannot find the fsoc executable: {error}"))?;
    let log_path = context.out.join(log);
    let file = std::fs::File::create(&log_path).map_err(|error| format!("{}: {error}", log_path.display()))?;
    let errors = file.try_clone().map_err(error_text)?;
    let mut child = Command::new(&program)
        .args(arguments)
        .stdin(Stdio::null())
        .stdout(file)
        .stderr(errors)
        .spawn()
        .map_err(|error| format!("{}: {error}", program.display()))?;
    context.progress.message(&format!("fsoc {} (output in {log})", arguments.join(" ")));
    let status = loop {
        if let Some(status) = child.try_wait().map_err(error_text)? {
            break status;
        }
        context.progress.tick();
        std::thread::sleep(Duration::from_millis(200));
    };
    if status.success() {
        return Ok(());
    }
    let text = std::fs::read_to_string(&log_path).unwrap_or_default();
    let tail: Vec<&str> = text.lines().rev().take(6).collect::<Vec<_>>().into_iter().rev().collect();
    Err(format!("fsoc {} exited with {status}: {}", arguments.join(" "), tail.join(" / ")))
}

fn run_fuse(context: &Context) -> Result<Outcome, String> {
    let json_path = context.out.join("fuse.json");
    let json_text = json_path.to_string_lossy().to_string();
    let mut arguments = vec!["bench", "fuse", "--json", &json_text];
    if !context.full {
        arguments.push("--quick");
    }
    run_self(context, &arguments, "fuse.log")?;
    let report: Value = serde_json::from_str(
        &std::fs::read_to_string(&json_path).map_err(|error| format!("{}: {error}", json_path.display()))?,
    )
    .map_err(error_text)?;
    let svg = std::fs::read_to_string(context.out.join("fuse.svg")).map_err(|error| format!("fuse.svg: {error}"))?;
    let mut outcome =
        Outcome { files: vec!["fuse.json".into(), "fuse.svg".into(), "fuse.log".into()], ..Outcome::default() };
    outcome.charts.push(Chart { file: "fuse.svg".into(), svg });
    outcome.rows = fuse_rows(&report, None);
    outcome.headline =
        compared_headline(&outcome.rows, &["postmark:", "dbench:", "metadata_storm: total", "fio: seq. write"]);
    outcome.targets = targets_of(&report["targets"]);
    outcome.notes.push(fuse_note(&report));
    Ok(outcome)
}

fn committed_fuse(_context: &Context) -> Result<Outcome, String> {
    let report: Value = serde_json::from_str(COMMITTED_FUSE).map_err(error_text)?;
    let small: Value = serde_json::from_str(COMMITTED_SMALL_WRITES).map_err(error_text)?;
    let mut outcome = Outcome { rows: fuse_rows(&report, Some(FUSE_FILE)), ..Outcome::default() };
    outcome.rows.extend(fuse_rows(&small, Some(SMALL_WRITES_FILE)));
    outcome.headline =
        compared_headline(&outcome.rows, &["postmark:", "dbench:", "metadata_storm: total", "fio: seq. write"]);
    outcome.charts.push(Chart { file: "crates/fsoc-cli/results/fuse.svg".into(), svg: COMMITTED_FUSE_SVG.into() });
    outcome.charts.push(Chart {
        file: "crates/fsoc-cli/results/small_writes.svg".into(),
        svg: COMMITTED_SMALL_WRITES_SVG.into(),
    });
    outcome.targets = targets_of(&report["targets"]);
    outcome.targets.extend(targets_of(&small["targets"]));
    outcome.notes.push(fuse_note(&report));
    outcome.notes.push(format!("{SMALL_WRITES_FILE}: {}", fuse_note(&small)));
    Ok(outcome)
}

/// "postmark: wall time 2.30 s against 0.769 s (fsoc 2.99× worse)", for the first row
/// starting with each prefix.
fn compared_headline(rows: &[Row], prefixes: &[&str]) -> String {
    prefixes
        .iter()
        .filter_map(|prefix| rows.iter().find(|row| row.experiment.starts_with(prefix)))
        .map(|row| {
            format!(
                "{}: fsoc {} {unit}, {} {} {unit} ({})",
                row.experiment,
                row.fsoc.map_or("–".into(), html::number),
                row.peer_name.as_deref().unwrap_or("peer"),
                row.peer.map_or("–".into(), html::number),
                row.reading.as_deref().unwrap_or("–"),
                unit = row.unit
            )
        })
        .collect::<Vec<_>>()
        .join("; ")
}

fn fuse_note(report: &Value) -> String {
    let machine = &report["machine"];
    format!(
        "Wall-clock medians of {} repetition(s){}, on {} ({} CPUs, Linux {}), load average {} at the start and {} at the end; the ratio is fsoc ÷ ext4 of the medians.",
        report["repetitions"],
        if report["quick"].as_bool() == Some(true) { " of the quick workloads" } else { "" },
        machine["cpu_model"].as_str().unwrap_or("?"),
        machine["cpu_count"],
        machine["kernel"].as_str().unwrap_or("?"),
        machine["load_average_start"],
        machine["load_average_end"]
    )
}

fn fuse_rows(report: &Value, committed: Option<&str>) -> Vec<Row> {
    let mut rows = Vec::new();
    for (workload, entry) in report["workloads"].as_object().into_iter().flatten() {
        for metric in entry["metrics"].as_object().into_iter().flatten().map(|(_, metric)| metric) {
            let better = if metric["better"] == "higher" { Better::Higher } else { Better::Lower };
            let mut row = Row::new(
                format!("{workload}: {}", metric["label"].as_str().unwrap_or("?")),
                metric["unit"].as_str().unwrap_or(""),
                number(&metric["fsoc_median"]),
            )
            .peer("ext4 (loop device)", number(&metric["ext4_median"]), better);
            if workload == "postmark" {
                row = row.seed("004", None);
            }
            row.committed_file = committed.map(str::to_string);
            rows.push(row);
        }
    }
    rows
}

// ------------------------------------------------------------ fsoc bench mtd (UBI + UBIFS)

fn run_mtd(context: &Context) -> Result<Outcome, String> {
    let json_path = context.out.join("mtd.json");
    let json_text = json_path.to_string_lossy().to_string();
    let mut arguments = vec!["bench", "mtd", "--json", &json_text];
    if !context.full {
        arguments.push("--quick");
    }
    run_self(context, &arguments, "mtd.log")?;
    let report: Value = serde_json::from_str(
        &std::fs::read_to_string(&json_path).map_err(|error| format!("{}: {error}", json_path.display()))?,
    )
    .map_err(error_text)?;
    let svg = std::fs::read_to_string(context.out.join("mtd.svg")).map_err(|error| format!("mtd.svg: {error}"))?;
    let mut outcome =
        Outcome { files: vec!["mtd.json".into(), "mtd.svg".into(), "mtd.log".into()], ..Outcome::default() };
    outcome.charts.push(Chart { file: "mtd.svg".into(), svg });
    outcome.rows = mtd_rows(&report, None);
    outcome.headline = mtd_headline(&outcome.rows);
    outcome.targets = targets_of(&report["targets"]);
    Ok(outcome)
}

fn committed_mtd(_context: &Context) -> Result<Outcome, String> {
    let report: Value = serde_json::from_str(COMMITTED_MTD).map_err(error_text)?;
    let mut outcome = Outcome { rows: mtd_rows(&report, Some(MTD_FILE)), ..Outcome::default() };
    outcome.headline = mtd_headline(&outcome.rows);
    outcome.charts.push(Chart { file: "crates/fsoc-cli/results/mtd.svg".into(), svg: COMMITTED_MTD_SVG.into() });
    outcome.targets = targets_of(&report["targets"]);
    outcome.notes.push(format!(
        "Code {}; guest {} under QEMU TCG on a host of {}. Wall times vary with the host's load (they include each file system's CPU under emulation); the counts repeat exactly.",
        report["code"].as_str().unwrap_or("?"),
        report["kernel"].as_str().unwrap_or("?"),
        report["host"].as_str().unwrap_or("?")
    ));
    Ok(outcome)
}

fn mtd_headline(rows: &[Row]) -> String {
    let mounts: Vec<&Row> = rows.iter().filter(|row| row.unit == "page reads").collect();
    let fsoc: Vec<String> = mounts.iter().map(|row| row.fsoc.map_or("–".into(), html::number)).collect();
    let ubi: Vec<String> = mounts.iter().map(|row| row.peer.map_or("–".into(), html::number)).collect();
    let sizes: Vec<&str> =
        mounts.iter().filter_map(|row| row.experiment.strip_prefix("mount of a ")?.split(" chip").next()).collect();
    format!(
        "page reads per mount on {} chips: fsoc {}, UBI + UBIFS {}; {}",
        sizes.join(" / "),
        fsoc.join(" / "),
        ubi.join(" / "),
        compared_headline(rows, &["page programs per durable", "PostMark (seed"])
    )
}

fn mtd_rows(report: &Value, committed: Option<&str>) -> Vec<Row> {
    const UBI: &str = "UBI + UBIFS";
    let mut rows = Vec::new();
    for mount in report["mount"].as_array().into_iter().flatten() {
        let size = mount["size_label"].as_str().unwrap_or("?");
        rows.push(
            Row::new(
                format!("mount of a {size} chip holding the same tree: page reads"),
                "page reads",
                number(&mount["fsoc"]["page_reads"]),
            )
            .peer(UBI, number(&mount["ubi_ubifs"]["page_reads"]), Better::Lower)
            .seed("003", Some(published::S003_MOUNT)),
        );
        rows.push(
            Row::new(
                format!("mount of a {size} chip: wall time (median)"),
                "s",
                number(&mount["fsoc"]["wall_seconds_median"]),
            )
            .peer(UBI, number(&mount["ubi_ubifs"]["wall_seconds_median"]), Better::Lower)
            .seed("001", Some(published::S001_MOUNT)),
        );
    }
    let small = &report["small_files"];
    rows.push(
        Row::new(
            format!(
                "page programs per durable small-file create ({} files)",
                group(small["files"].as_u64().unwrap_or(0))
            ),
            "programs",
            number(&small["fsoc"]["page_programs_per_fsync"]),
        )
        .peer(UBI, number(&small["ubi_ubifs"]["page_programs_per_fsync"]), Better::Lower),
    );
    rows.push(
        Row::new("wall time per durable small-file create", "ms", number(&small["fsoc"]["milliseconds_per_create"]))
            .peer(UBI, number(&small["ubi_ubifs"]["milliseconds_per_create"]), Better::Lower),
    );
    let sequential = &report["sequential"];
    let mib = number(&sequential["file_bytes"]).unwrap_or(0.0) / 1_048_576.0;
    for (direction, key) in [("write + fsync", "write_mib_per_second"), ("read after remount", "read_mib_per_second")] {
        rows.push(
            Row::new(format!("sequential {direction} of {mib:.0} MiB"), "MiB/s", number(&sequential["fsoc"][key]))
                .peer(UBI, number(&sequential["ubi_ubifs"][key]), Better::Higher)
                .seed("001", None),
        );
    }
    let postmark = &report["postmark"];
    rows.push(
        Row::new("PostMark (seed 004's configuration): wall time", "s", number(&postmark["fsoc"]["wall_seconds"]))
            .peer(UBI, number(&postmark["ubi_ubifs"]["wall_seconds"]), Better::Lower)
            .seed("004", None),
    );
    rows.push(Row::new("PostMark: page programs", "programs", number(&postmark["fsoc"]["page_programs"])).peer(
        UBI,
        number(&postmark["ubi_ubifs"]["page_programs"]),
        Better::Lower,
    ));
    for row in &mut rows {
        row.committed_file = committed.map(str::to_string);
    }
    rows
}

#[cfg(test)]
mod tests {
    use super::*;

    // The committed results the report shows when it cannot run fuse or mtd parse and give
    // rows, each marked with its file.
    #[test]
    fn committed_results_give_rows() {
        let fuse: Value = serde_json::from_str(COMMITTED_FUSE).expect("fuse.json");
        let rows = fuse_rows(&fuse, Some(FUSE_FILE));
        assert!(rows.len() >= 10, "{rows:?}");
        assert!(rows.iter().all(|row| row.fsoc.is_some() && row.peer.is_some() && row.committed_file.is_some()));
        let mtd: Value = serde_json::from_str(COMMITTED_MTD).expect("mtd.json");
        let rows = mtd_rows(&mtd, Some(MTD_FILE));
        assert!(rows.iter().any(|row| row.experiment.contains("8 GiB") && row.fsoc == Some(14.0)), "{rows:?}");
        let crash: Value = serde_json::from_str(COMMITTED_CRASH_NVRAM).expect("crash-nvram.json");
        assert_eq!(crash["failures"], 0);
    }

    // The committed fsoc.json gives every Fig. 15 operation, Table 2 in both settings, the
    // model and the queue-depth rows, the seed's figures where it has them.
    #[test]
    fn fsoc_rows_of_the_committed_results() {
        let report: Value = serde_json::from_str(include_str!("../../results/fsoc.json")).expect("fsoc.json");
        let rows = fsoc_rows(&report);
        assert_eq!(rows.len(), fsoc_bench::on_chip::OPERATIONS.len() + 6 + 1 + 2, "{rows:?}");
        let create = rows
            .iter()
            .find(|row| row.experiment.contains("500 creates") && row.seed_figure.is_some())
            .expect("create");
        assert!(create.ratio.is_some_and(|ratio| ratio < 1.0), "{create:?}");
        assert!(rows.iter().all(|row| row.fsoc.is_some()), "{rows:?}");
    }

    #[test]
    fn groups_of_thousands() {
        assert_eq!(group(0), "0");
        assert_eq!(group(999), "999");
        assert_eq!(group(1000), "1,000");
        assert_eq!(group(9_636), "9,636");
        assert_eq!(group(1_234_567), "1,234,567");
    }
}
