//! fsoc through FUSE against ext4 on a loop device, on this machine, in one run (`fsoc bench
//! fuse`; `fsoc report` runs that command). For each repetition and workload, a fresh fsoc image is made and mounted (`fsoc mkfs`,
//! `fsoc mount --daemon`), the workload runs, it is unmounted; then the same on a fresh ext4
//! image of the same size; so the two file systems alternate and share whatever the machine is
//! doing. Both images live in /dev/shm, so neither pays for a disk. Results: every sample, the
//! medians, the fsoc/ext4 ratio of each metric (with the direction that is better), the fsoc
//! mount server's CPU time and peak memory, and the issue's targets, as JSON, a printed table
//! and an SVG chart beside the JSON.
//!
//! Wall-clock figures, unlike the simulator benchmarks: they vary from run to run and machine
//! to machine, which is why both file systems run in the same session, interleaved.

pub mod mounts;
pub mod workloads;

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::Instant;

use crate::svg_chart::{self, LogScale};
use mounts::{Ext4Mount, FsocMount, ScratchDirectory, ServerUsage};
use workloads::{Better, Scale, Tools, Workload};

/// Where the images go: memory, so the figures are the file systems', not a disk's.
const IMAGE_DIRECTORY: &str = "/dev/shm";

/// What a run measures (`fsoc bench fuse`'s options).
pub struct FuseOptions {
    /// The fsoc executable that makes and mounts the fsoc volumes.
    pub fsoc: PathBuf,
    /// Repetitions of every workload on each file system (default 3; 1 with `quick`).
    pub reps: Option<u32>,
    /// Scaled-down workloads (`Scale::quick`).
    pub quick: bool,
    /// Size of each volume as `fsoc mkfs --size` takes it, and in bytes.
    pub size: String,
    pub size_bytes: u64,
    /// NAND profile of the fsoc image.
    pub profile: String,
    /// Names of the workloads to run; empty runs all.
    pub workloads: Vec<String>,
    /// Mount fsoc with FUSE over io_uring (`-o io_uring`), turning the kernel's switch on for
    /// the run; without it, or when the kernel has no such switch, requests go through
    /// /dev/fuse.
    pub io_uring: bool,
}

/// What `run` reports as it goes, for the caller to show.
pub enum Progress<'a> {
    /// A workload cannot run here (a program is missing) and is left out, before anything runs.
    Skipped { workload: &'static str, reason: &'a str },
    /// A sample starts: "repetition R/N: WORKLOAD on FS".
    Started(&'a str),
    /// A sample ended: its figures (or FAILED and why) on one line.
    Finished(&'a str),
}

/// A finished run: the report written as JSON, and the workloads that ran.
pub struct FuseReport {
    report: Report,
    runnable: Vec<Workload>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum FsKind {
    Fsoc,
    Ext4,
}

impl FsKind {
    const ALL: [FsKind; 2] = [FsKind::Fsoc, FsKind::Ext4];

    fn name(self) -> &'static str {
        match self {
            FsKind::Fsoc => "fsoc",
            FsKind::Ext4 => "ext4",
        }
    }
}

/// One workload run on one fresh volume.
#[derive(Clone, Debug, serde::Serialize)]
struct Sample {
    repetition: u32,
    fs: &'static str,
    workload: &'static str,
    /// Each metric of the workload (absent when the run failed).
    metrics: BTreeMap<&'static str, f64>,
    /// The fsoc mount server's usage, read just before unmount (fsoc runs only).
    fsoc_server: Option<ServerUsage>,
    /// Wall time of the whole sample: mkfs, mount, workload, unmount.
    sample_wall_s: f64,
    error: Option<String>,
}

#[derive(Clone, Debug, serde::Serialize)]
struct MetricSummary {
    label: &'static str,
    unit: &'static str,
    /// Which value is better: "lower" (times) or "higher" (rates).
    better: &'static str,
    fsoc_median: Option<f64>,
    ext4_median: Option<f64>,
    /// fsoc's median divided by ext4's, for times and rates alike.
    ratio_fsoc_over_ext4: Option<f64>,
    /// How to read the ratio for this metric.
    ratio_reading: &'static str,
    /// The ratio in words, e.g. "fsoc 3.10× slower".
    verdict: Option<String>,
    fsoc_samples: Vec<f64>,
    ext4_samples: Vec<f64>,
}

#[derive(Clone, Debug, serde::Serialize)]
struct ServerSummary {
    cpu_seconds_median: f64,
    peak_rss_kib_median: f64,
    peak_rss_kib_max: u64,
    cpu_seconds_samples: Vec<f64>,
    peak_rss_kib_samples: Vec<u64>,
}

#[derive(Clone, Debug, serde::Serialize)]
struct WorkloadSummary {
    metrics: BTreeMap<&'static str, MetricSummary>,
    /// The fsoc mount server during this workload (fsoc runs only).
    fsoc_server: Option<ServerSummary>,
}

#[derive(Clone, Debug, serde::Serialize)]
struct TargetCheck {
    target: String,
    measured: String,
    /// Absent when the workload did not run.
    met: Option<bool>,
}

#[derive(Clone, Debug, serde::Serialize)]
struct Skipped {
    workload: &'static str,
    reason: String,
}

#[derive(Clone, Debug, serde::Serialize)]
struct Machine {
    kernel: String,
    cpu_model: String,
    cpu_count: usize,
    memory_mib: u64,
    /// /proc/loadavg's 1-minute figure when the run started and when it ended: other work on
    /// the machine slows both file systems (they alternate, so the ratios suffer less).
    load_average_start: f64,
    load_average_end: f64,
}

#[derive(Clone, Debug, serde::Serialize)]
struct Config {
    volume_size_bytes: u64,
    fsoc_profile: String,
    image_directory: &'static str,
    fsoc_setup: String,
    /// How the fsoc mount talked with the kernel: "io_uring" or "/dev/fuse", and why.
    fsoc_transport: String,
    /// Whether that was FUSE over io_uring.
    fsoc_io_uring: bool,
    ext4_setup: String,
    order: &'static str,
    scale: Scale,
}

#[derive(Clone, Debug, serde::Serialize)]
struct Report {
    benchmark: &'static str,
    time_base: &'static str,
    quick: bool,
    repetitions: u32,
    config: Config,
    machine: Machine,
    skipped: Vec<Skipped>,
    workloads: BTreeMap<&'static str, WorkloadSummary>,
    targets: Vec<TargetCheck>,
    failed_samples: usize,
    samples: Vec<Sample>,
    wall_seconds: f64,
}

/// What the host offers; gathered once, judged by `host_problems`.
struct Host {
    root: bool,
    dev_fuse: bool,
    loop_control: bool,
    free_loop_device: bool,
    programs_missing: Vec<&'static str>,
    image_directory_free_bytes: Option<u64>,
}

/// Programs that set up and tear down the volumes (the workloads' own are checked per workload).
const SETUP_PROGRAMS: [&str; 5] = ["fusermount3", "mkfs.ext4", "losetup", "mount", "umount"];

impl Host {
    fn probe() -> Host {
        // SAFETY: geteuid has no preconditions.
        let root = unsafe { libc::geteuid() } == 0;
        let programs_missing: Vec<&'static str> =
            SETUP_PROGRAMS.into_iter().filter(|program| workloads::find_program(program).is_none()).collect();
        let loop_control = Path::new("/dev/loop-control").exists();
        // `losetup --find` names the next free device without attaching anything.
        let free_loop_device = root
            && loop_control
            && workloads::find_program("losetup").is_some()
            && std::process::Command::new("losetup")
                .arg("--find")
                .stdin(std::process::Stdio::null())
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .status()
                .is_ok_and(|status| status.success());
        Host {
            root,
            dev_fuse: Path::new("/dev/fuse").exists(),
            loop_control,
            free_loop_device,
            programs_missing,
            image_directory_free_bytes: free_bytes(Path::new(IMAGE_DIRECTORY)),
        }
    }
}

fn free_bytes(path: &Path) -> Option<u64> {
    use std::os::unix::ffi::OsStrExt;
    let name = std::ffi::CString::new(path.as_os_str().as_bytes()).ok()?;
    // SAFETY: statvfs writes into the zeroed struct we own; `name` is a valid C string.
    let mut stats: libc::statvfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::statvfs(name.as_ptr(), &mut stats) } != 0 {
        return None;
    }
    // fsblkcnt_t and the block size are narrower than u64 on some targets.
    #[allow(clippy::useless_conversion)]
    Some(u64::from(stats.f_bavail).saturating_mul(u64::from(stats.f_frsize)))
}

/// What stops `bench fuse` with volumes of `size_bytes` from running on this host, in words
/// (nothing when it can run): `fsoc report` asks before starting it.
pub fn problems_here(size_bytes: u64) -> Vec<String> {
    host_problems(&Host::probe(), size_bytes)
}

/// Everything that stops the benchmark from running here, in words, or nothing.
fn host_problems(host: &Host, size_bytes: u64) -> Vec<String> {
    let mut problems = Vec::new();
    if !host.root {
        problems.push("root (it mounts ext4 on a loop device and drops the page cache): run it as root".to_string());
    }
    if !host.dev_fuse {
        problems.push(
            "/dev/fuse (FUSE is not available: load the fuse module, or give a container the device)".to_string(),
        );
    }
    if !host.programs_missing.is_empty() {
        problems.push(format!(
            "{} (install fuse3, e2fsprogs, mount: bash scripts/setup.sh)",
            host.programs_missing.join(", ")
        ));
    }
    if !host.loop_control {
        problems.push(
            "a loop device: /dev/loop-control is missing (load the loop module, or give a container the device)"
                .to_string(),
        );
    } else if host.root && !host.free_loop_device {
        problems.push("a free loop device (`losetup --find` found none)".to_string());
    }
    // The fsoc image holds the volume plus its spare area; only one image exists at a time.
    let needed_bytes = size_bytes.saturating_add(size_bytes / 4);
    match host.image_directory_free_bytes {
        None => problems.push(format!("{IMAGE_DIRECTORY} (cannot be examined; the images are made there)")),
        Some(free) if free < needed_bytes => problems.push(format!(
            "{} MiB free in {IMAGE_DIRECTORY} for the images (it has {} MiB; use a smaller --size)",
            needed_bytes >> 20,
            free >> 20
        )),
        Some(_) => {}
    }
    problems
}

fn median(values: &[f64]) -> Option<f64> {
    let mut sorted: Vec<f64> = values.iter().copied().filter(|value| value.is_finite()).collect();
    sorted.sort_by(f64::total_cmp);
    let middle = sorted.len() / 2;
    match sorted.len() {
        0 => None,
        length if length % 2 == 1 => Some(sorted[middle]),
        _ => Some((sorted[middle - 1] + sorted[middle]) / 2.0),
    }
}

fn ratio_reading(better: Better) -> &'static str {
    match better {
        Better::Lower => "fsoc/ext4 of a time: above 1, fsoc is slower",
        Better::Higher => "fsoc/ext4 of a rate: below 1, fsoc is slower",
    }
}

/// The ratio in words: how many times slower or faster fsoc is, and for rates its share of ext4.
fn verdict(ratio: f64, better: Better) -> String {
    let fsoc_faster = match better {
        Better::Lower => ratio < 1.0,
        Better::Higher => ratio > 1.0,
    };
    let factor = if ratio >= 1.0 { ratio } else { 1.0 / ratio };
    let share = if better == Better::Higher { format!(" ({:.0}% of ext4)", ratio * 100.0) } else { String::new() };
    format!("fsoc {factor:.2}× {}{share}", if fsoc_faster { "faster" } else { "slower" })
}

fn summarize(workload: Workload, samples: &[Sample]) -> WorkloadSummary {
    let of =
        |fs: FsKind| samples.iter().filter(move |sample| sample.workload == workload.name() && sample.fs == fs.name());
    let mut metrics = BTreeMap::new();
    for metric in workload.metrics() {
        let values =
            |fs: FsKind| -> Vec<f64> { of(fs).filter_map(|sample| sample.metrics.get(metric.name).copied()).collect() };
        let (fsoc_samples, ext4_samples) = (values(FsKind::Fsoc), values(FsKind::Ext4));
        let (fsoc_median, ext4_median) = (median(&fsoc_samples), median(&ext4_samples));
        let ratio = match (fsoc_median, ext4_median) {
            (Some(fsoc), Some(ext4)) if ext4 > 0.0 => Some(fsoc / ext4),
            _ => None,
        };
        metrics.insert(
            metric.name,
            MetricSummary {
                label: metric.label,
                unit: metric.unit,
                better: metric.better.name(),
                fsoc_median,
                ext4_median,
                ratio_fsoc_over_ext4: ratio,
                ratio_reading: ratio_reading(metric.better),
                verdict: ratio.map(|ratio| verdict(ratio, metric.better)),
                fsoc_samples,
                ext4_samples,
            },
        );
    }
    let usages: Vec<ServerUsage> = of(FsKind::Fsoc).filter_map(|sample| sample.fsoc_server).collect();
    let cpu_seconds_samples: Vec<f64> = usages.iter().map(|usage| usage.cpu_seconds).collect();
    let peak_rss_kib_samples: Vec<u64> = usages.iter().map(|usage| usage.peak_rss_kib).collect();
    let rss_as_float: Vec<f64> = peak_rss_kib_samples.iter().map(|&kib| kib as f64).collect();
    let fsoc_server = match (median(&cpu_seconds_samples), median(&rss_as_float), peak_rss_kib_samples.iter().max()) {
        (Some(cpu_seconds_median), Some(peak_rss_kib_median), Some(&peak_rss_kib_max)) => Some(ServerSummary {
            cpu_seconds_median,
            peak_rss_kib_median,
            peak_rss_kib_max,
            cpu_seconds_samples,
            peak_rss_kib_samples,
        }),
        _ => None,
    };
    WorkloadSummary { metrics, fsoc_server }
}

/// The issue's targets: (workload, metric, bound on fsoc/ext4, description).
const TARGETS: [(Workload, &str, Bound, &str); 7] = [
    (Workload::Postmark, "wall_s", Bound::AtMost(5.0), "PostMark wall time ≤ 5× ext4"),
    (Workload::Dbench, "throughput_mb_s", Bound::AtLeast(0.25), "dbench throughput ≥ 25% of ext4"),
    (Workload::Fio, "seq_write_mib_s", Bound::AtLeast(0.5), "sequential write ≥ 50% of ext4's MiB/s"),
    (Workload::Fio, "seq_read_mib_s", Bound::AtLeast(0.5), "sequential read ≥ 50% of ext4's MiB/s"),
    (Workload::MetadataStorm, "total_s", Bound::AtMost(5.0), "metadata storm ≤ 5× ext4 wall time"),
    (Workload::SmallWrites, "append_4b_writes_s", Bound::AtLeast(0.2), "4 B O_APPEND writes within 5× of ext4's rate"),
    (Workload::SmallWrites, "write_512b_fsync_s", Bound::AtLeast(0.25), "512 B write + fsync ≥ 25% of ext4's rate"),
];

#[derive(Clone, Copy, Debug)]
enum Bound {
    AtMost(f64),
    AtLeast(f64),
}

fn check_targets(summaries: &BTreeMap<&'static str, WorkloadSummary>) -> Vec<TargetCheck> {
    TARGETS
        .iter()
        .map(|&(workload, metric, bound, target)| {
            let summary = summaries.get(workload.name()).and_then(|summary| summary.metrics.get(metric));
            let measured = summary.and_then(|summary| Some((summary.ratio_fsoc_over_ext4?, summary)));
            match measured {
                Some((ratio, summary)) => TargetCheck {
                    target: target.to_string(),
                    measured: format!(
                        "fsoc/ext4 {ratio:.3} ({}; fsoc {} {unit}, ext4 {} {unit})",
                        summary.verdict.as_deref().unwrap_or(""),
                        format_figure(summary.fsoc_median),
                        format_figure(summary.ext4_median),
                        unit = summary.unit
                    ),
                    met: Some(match bound {
                        Bound::AtMost(limit) => ratio <= limit,
                        Bound::AtLeast(limit) => ratio >= limit,
                    }),
                },
                None => TargetCheck { target: target.to_string(), measured: "not measured".into(), met: None },
            }
        })
        .collect()
}

/// Three significant figures at least, no exponent.
fn format_figure(value: Option<f64>) -> String {
    match value {
        None => "–".into(),
        Some(value) if value.abs() >= 100.0 => format!("{value:.0}"),
        Some(value) if value.abs() >= 10.0 => format!("{value:.1}"),
        Some(value) if value.abs() >= 1.0 => format!("{value:.2}"),
        Some(value) => format!("{value:.3}"),
    }
}

/// The 1-minute load average.
fn load_average() -> f64 {
    let text = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    text.split_whitespace().next().and_then(|figure| figure.parse().ok()).unwrap_or(f64::NAN)
}

fn machine(load_average_start: f64) -> Machine {
    let read = |path: &str| std::fs::read_to_string(path).unwrap_or_default();
    let cpu_model = read("/proc/cpuinfo")
        .lines()
        .find(|line| line.starts_with("model name"))
        .and_then(|line| line.split_once(':'))
        .map_or_else(|| "unknown".to_string(), |(_, model)| model.trim().to_string());
    let memory_kib: u64 = read("/proc/meminfo")
        .lines()
        .find(|line| line.starts_with("MemTotal:"))
        .and_then(|line| line.split_whitespace().nth(1))
        .and_then(|kib| kib.parse().ok())
        .unwrap_or(0);
    Machine {
        kernel: read("/proc/sys/kernel/osrelease").trim().to_string(),
        cpu_model,
        cpu_count: std::thread::available_parallelism().map_or(0, |count| count.get()),
        memory_mib: memory_kib >> 10,
        load_average_start,
        load_average_end: load_average(),
    }
}

/// What one sample needs besides its file system and workload.
struct Context<'a> {
    fsoc: &'a Path,
    scratch: &'a Path,
    size: &'a str,
    size_bytes: u64,
    profile: &'a str,
    scale: &'a Scale,
    tools: &'a Tools,
    io_uring: bool,
}

/// Makes a fresh volume, runs the workload in its `bench` directory, unmounts; the guards clean
/// up whatever happens.
fn measure(fs: FsKind, workload: Workload, context: &Context<'_>) -> Result<(Vec<f64>, Option<ServerUsage>), String> {
    match fs {
        FsKind::Fsoc => {
            let mount =
                FsocMount::create(context.fsoc, context.scratch, context.size, context.profile, context.io_uring)?;
            if context.io_uring && !mount.uses_io_uring() {
                return Err("the fsoc mount did not get FUSE over io_uring from the kernel (see its log)".into());
            }
            let values =
                workloads::run(workload, &mount.root().join("bench"), context.scratch, context.scale, context.tools)?;
            let usage = mount.server_usage()?;
            mount.unmount()?;
            Ok((values, Some(usage)))
        }
        FsKind::Ext4 => {
            let mount = Ext4Mount::create(context.scratch, context.size_bytes)?;
            let values =
                workloads::run(workload, &mount.root().join("bench"), context.scratch, context.scale, context.tools)?;
            mount.unmount()?;
            Ok((values, None))
        }
    }
}

fn sample_line(sample: &Sample, workload: Workload) -> String {
    let mut line = format!("rep {} {:<14} {:<4}", sample.repetition, sample.workload, sample.fs);
    match &sample.error {
        Some(error) => {
            let _ = write!(line, " FAILED: {error}");
        }
        None => {
            for metric in workload.metrics() {
                let value = sample.metrics.get(metric.name).copied();
                let _ = write!(line, "  {} {} {}", metric.name, format_figure(value), metric.unit);
            }
            if let Some(usage) = sample.fsoc_server {
                let _ = write!(
                    line,
                    "  (server {:.2} CPU s, {:.1} MiB peak)",
                    usage.cpu_seconds,
                    usage.peak_rss_kib as f64 / 1024.0
                );
            }
        }
    }
    line
}

/// Parses `--workloads`: empty means all, in the standard order.
fn selected_workloads(names: &[String]) -> Result<Vec<Workload>, String> {
    if names.is_empty() {
        return Ok(Workload::ALL.to_vec());
    }
    let mut selected = Vec::new();
    for name in names {
        let workload = Workload::from_name(name).ok_or_else(|| {
            let known: Vec<&str> = Workload::ALL.iter().map(|workload| workload.name()).collect();
            format!("unknown workload {name:?}: give one or more of {}", known.join(", "))
        })?;
        if !selected.contains(&workload) {
            selected.push(workload);
        }
    }
    // Keep the standard order whatever order they were named in.
    Ok(Workload::ALL.into_iter().filter(|workload| selected.contains(workload)).collect())
}

/// Runs every selected workload `reps` times on a fresh fsoc volume and a fresh ext4 volume in
/// turn, in a scratch directory of /dev/shm removed afterwards. Fails before anything runs when
/// the host cannot run it (`problems_here`), and at the next check once `mounts::interrupted`
/// (the caller's stop flag); a failed sample is recorded in the report, not an error.
pub fn run(options: &FuseOptions, progress: &mut dyn FnMut(Progress<'_>)) -> Result<FuseReport, String> {
    let scale = if options.quick { Scale::quick() } else { Scale::full() };
    let repetitions = options.reps.unwrap_or(if options.quick { 1 } else { 3 });
    let selected = selected_workloads(&options.workloads)?;
    let size_bytes = options.size_bytes;
    // The volume must hold fio's file with room to spare (and PostMark's ~61 MB).
    let size_min_bytes = (2 * scale.fio_sequential_bytes).max(64 << 20);
    if size_bytes < size_min_bytes {
        return Err(format!(
            "--size {} is too small for these workloads: give at least {}M",
            options.size,
            size_min_bytes >> 20
        ));
    }
    let problems = host_problems(&Host::probe(), size_bytes);
    if !problems.is_empty() {
        return Err(format!("bench fuse cannot run here; it needs:\n  - {}", problems.join("\n  - ")));
    }
    let tools =
        Tools { dbench_loadfile: workloads::DBENCH_LOADFILES.iter().map(PathBuf::from).find(|path| path.is_file()) };
    let mut skipped = Vec::new();
    let mut runnable = Vec::new();
    for workload in selected {
        match workloads::missing_tool(workload, &tools) {
            Some(reason) => {
                progress(Progress::Skipped { workload: workload.name(), reason: &reason });
                skipped.push(Skipped { workload: workload.name(), reason });
            }
            None => runnable.push(workload),
        }
    }
    if runnable.is_empty() {
        return Err("no workload can run here (see the reasons above)".into());
    }
    // The kernel's switch for FUSE over io_uring, on for the run (and back as it was after).
    let (ring_switch, fsoc_transport) = if options.io_uring {
        match fsoc_fuse::IoUringSwitch::set(true) {
            Ok(switch) => {
                let before = if switch.was_on() { "already Y" } else { "N, set to Y for the run and back after" };
                let how = format!("io_uring (-o io_uring; the fuse module's enable_uring was {before})");
                (Some(switch), how)
            }
            Err(reason) => {
                progress(Progress::Skipped { workload: "io_uring", reason: &format!("{reason}; fsoc uses /dev/fuse") });
                (None, format!("/dev/fuse ({reason})"))
            }
        }
    } else {
        (None, "/dev/fuse (--fuse-transport dev-fuse)".to_string())
    };
    let io_uring = ring_switch.is_some();
    let scratch = ScratchDirectory::create(Path::new(IMAGE_DIRECTORY))?;
    let context = Context {
        io_uring,
        fsoc: &options.fsoc,
        scratch: scratch.path(),
        size: &options.size,
        size_bytes,
        profile: &options.profile,
        scale: &scale,
        tools: &tools,
    };
    let started = Instant::now();
    let load_average_start = load_average();
    let mut samples = Vec::new();
    for repetition in 1..=repetitions {
        for &workload in &runnable {
            for fs in FsKind::ALL {
                mounts::check_interrupted()?;
                progress(Progress::Started(&format!(
                    "repetition {repetition}/{repetitions}: {} on {}",
                    workload.name(),
                    fs.name()
                )));
                let sample_started = Instant::now();
                let result = measure(fs, workload, &context);
                let mut sample = Sample {
                    repetition,
                    fs: fs.name(),
                    workload: workload.name(),
                    metrics: BTreeMap::new(),
                    fsoc_server: None,
                    sample_wall_s: 0.0,
                    error: None,
                };
                match result {
                    Ok((values, usage)) => {
                        sample.metrics = workload.metrics().iter().map(|metric| metric.name).zip(values).collect();
                        sample.fsoc_server = usage;
                    }
                    Err(error) => sample.error = Some(error),
                }
                sample.sample_wall_s = sample_started.elapsed().as_secs_f64();
                // A Ctrl-C also fails the sample that was running: stop here, cleaned up.
                mounts::check_interrupted()?;
                progress(Progress::Finished(&sample_line(&sample, workload)));
                samples.push(sample);
            }
        }
    }
    drop(scratch);
    drop(ring_switch);

    let summaries: BTreeMap<&'static str, WorkloadSummary> =
        runnable.iter().map(|&workload| (workload.name(), summarize(workload, &samples))).collect();
    let failed_samples = samples.iter().filter(|sample| sample.error.is_some()).count();
    let report = Report {
        benchmark: "fuse",
        time_base: "wall clock on this machine (not simulated time)",
        quick: options.quick,
        repetitions,
        config: Config {
            volume_size_bytes: size_bytes,
            fsoc_profile: options.profile.clone(),
            image_directory: IMAGE_DIRECTORY,
            fsoc_setup: format!(
                "fsoc mkfs IMAGE --size {} --profile {}; fallocate IMAGE (whole file); fsoc mount IMAGE DIR --daemon{}; \
                 fsoc umount DIR",
                options.size,
                options.profile,
                if io_uring { " -o io_uring --verbose" } else { "" }
            ),
            fsoc_transport,
            fsoc_io_uring: io_uring,
            ext4_setup: format!(
                "fallocate IMAGE (whole file); mkfs.ext4 -q -F -E {} IMAGE; losetup --find --show IMAGE; \
                 mount -t ext4 LOOP DIR; umount DIR; losetup -d LOOP",
                mounts::MKFS_EXT4_EXTENDED
            ),
            order: "per repetition, per workload: fsoc then ext4, each on a fresh volume",
            scale,
        },
        machine: machine(load_average_start),
        skipped,
        targets: check_targets(&summaries),
        workloads: summaries,
        failed_samples,
        samples,
        wall_seconds: started.elapsed().as_secs_f64(),
    };
    Ok(FuseReport { report, runnable })
}

impl FuseReport {
    /// The JSON `fsoc bench fuse` writes: pretty, ending in a newline.
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(&self.report).expect("a fuse report has only numbers, strings, lists and maps")
            + "\n"
    }

    /// The chart beside the JSON (`render_chart`).
    pub fn svg(&self) -> String {
        render_chart(&self.report, &self.runnable)
    }

    /// The printed summary: medians and ratios, the mount server's usage, the targets and the
    /// README's table.
    pub fn summary(&self) -> String {
        summary(&self.report, &self.runnable)
    }

    /// Samples that failed, and all samples.
    pub fn failed_samples(&self) -> (usize, usize) {
        (self.report.failed_samples, self.report.samples.len())
    }
}

fn summary(report: &Report, runnable: &[Workload]) -> String {
    let mut text = String::new();
    let _ = writeln!(
        text,
        "\nfsoc (FUSE over {}, {} profile) vs ext4 (loop device), {} MiB volumes in {IMAGE_DIRECTORY}; medians of {} repetition{}{}; \
         load average {:.1} at the start, {:.1} at the end ({} CPUs)",
        if report.config.fsoc_io_uring { "io_uring" } else { "/dev/fuse" },
        report.config.fsoc_profile,
        report.config.volume_size_bytes >> 20,
        report.repetitions,
        if report.repetitions == 1 { "" } else { "s" },
        if report.quick { " (--quick: scaled-down workloads)" } else { "" },
        report.machine.load_average_start,
        report.machine.load_average_end,
        report.machine.cpu_count
    );
    let _ = writeln!(
        text,
        "{:<15} {:<24} {:>6} {:>10} {:>10} {:>10}  {:<7} reading",
        "workload", "metric", "unit", "fsoc", "ext4", "fsoc/ext4", "better"
    );
    for &workload in runnable {
        let Some(summary) = report.workloads.get(workload.name()) else { continue };
        for metric in workload.metrics() {
            let Some(row) = summary.metrics.get(metric.name) else { continue };
            let _ = writeln!(
                text,
                "{:<15} {:<24} {:>6} {:>10} {:>10} {:>10}  {:<7} {}",
                workload.name(),
                metric.label,
                metric.unit,
                format_figure(row.fsoc_median),
                format_figure(row.ext4_median),
                row.ratio_fsoc_over_ext4.map_or("–".into(), |ratio| format!("{ratio:.3}")),
                row.better,
                row.verdict.as_deref().unwrap_or("")
            );
        }
    }
    let _ = writeln!(text, "\nfsoc mount server, read just before unmount (median CPU seconds, peak RSS)");
    for &workload in runnable {
        if let Some(server) = report.workloads.get(workload.name()).and_then(|summary| summary.fsoc_server.as_ref()) {
            let _ = writeln!(
                text,
                "{:<15} {:>8.2} CPU s  {:>7.1} MiB peak (max of runs {:.1} MiB)",
                workload.name(),
                server.cpu_seconds_median,
                server.peak_rss_kib_median / 1024.0,
                server.peak_rss_kib_max as f64 / 1024.0
            );
        }
    }
    let _ = writeln!(text, "\ntargets (fsoc/ext4)");
    for check in &report.targets {
        let status = match check.met {
            Some(true) => "met",
            Some(false) => "SHORT",
            None => "not run",
        };
        let _ = writeln!(text, "[{status}] {} — {}", check.target, check.measured);
    }
    let _ = writeln!(text, "\n{}", markdown_table(report, runnable));
    text
}

/// The README's table: one row per metric, with the server's CPU time and memory per workload.
fn markdown_table(report: &Report, runnable: &[Workload]) -> String {
    let mut table = format!(
        "| {} metric (median of {}) | fsoc | ext4 | fsoc/ext4 | reading | fsoc server CPU s | fsoc server peak RSS |\n|---|---|---|---|---|---|---|\n",
        if report.quick { "quick" } else { "FUSE" },
        report.repetitions
    );
    for &workload in runnable {
        let Some(summary) = report.workloads.get(workload.name()) else { continue };
        for (index, metric) in workload.metrics().iter().enumerate() {
            let Some(row) = summary.metrics.get(metric.name) else { continue };
            let (cpu, rss) = match (&summary.fsoc_server, index) {
                (Some(server), 0) => (
                    format!("{:.2}", server.cpu_seconds_median),
                    format!("{:.1} MiB", server.peak_rss_kib_max as f64 / 1024.0),
                ),
                (None, 0) => ("–".into(), "–".into()),
                _ => (String::new(), String::new()),
            };
            let _ = writeln!(
                table,
                "| {} {} ({}) | {} | {} | {} | {} | {cpu} | {rss} |",
                workload.name(),
                metric.label,
                metric.unit,
                format_figure(row.fsoc_median),
                format_figure(row.ext4_median),
                row.ratio_fsoc_over_ext4.map_or("–".into(), |ratio| format!("{ratio:.2}")),
                row.verdict.as_deref().unwrap_or("–")
            );
        }
    }
    table
}

// ---- chart -------------------------------------------------------------------------------

const SLOT_WIDTH: f64 = 72.0;
const BAR_WIDTH: f64 = 30.0;
const PANEL_HEIGHT: f64 = 320.0;
const MARGIN_LEFT: f64 = 70.0;
const MARGIN_TOP: f64 = 80.0;
const MARGIN_BOTTOM: f64 = 250.0;
/// Wide enough for the title and legend however few bars there are.
const WIDTH_MIN: f64 = 640.0;
const COLOR_SLOWER: &str = "#d95f02";
const COLOR_FASTER: &str = "#1b9e77";

/// One bar per metric: fsoc/ext4 of the medians on a log scale, drawn from 1 (parity); orange
/// where fsoc is slower, green where it is faster; the issue's targets dashed across their bars.
fn render_chart(report: &Report, runnable: &[Workload]) -> String {
    struct Bar {
        label: String,
        better: Better,
        ratio: Option<f64>,
        target: Option<f64>,
    }
    let mut bars = Vec::new();
    for &workload in runnable {
        for metric in workload.metrics() {
            let ratio = report
                .workloads
                .get(workload.name())
                .and_then(|summary| summary.metrics.get(metric.name)?.ratio_fsoc_over_ext4);
            let target =
                TARGETS.iter().find(|target| target.0 == workload && target.1 == metric.name).map(
                    |target| match target.2 {
                        Bound::AtMost(limit) | Bound::AtLeast(limit) => limit,
                    },
                );
            bars.push(Bar {
                label: format!("{} {}", workload.name(), metric.label),
                better: metric.better,
                ratio,
                target,
            });
        }
    }
    let values: Vec<f64> = bars
        .iter()
        .flat_map(|bar| [bar.ratio, bar.target])
        .flatten()
        .filter(|value| *value > 0.0)
        .chain([1.0])
        .collect();
    let (value_min, value_max) =
        (values.iter().copied().fold(1.0, f64::min), values.iter().copied().fold(1.0, f64::max));
    let panel_width = SLOT_WIDTH * bars.len().max(1) as f64;
    let width = (MARGIN_LEFT + panel_width + 40.0).max(WIDTH_MIN);
    let height = MARGIN_TOP + PANEL_HEIGHT + MARGIN_BOTTOM;
    let scale = LogScale::new(value_min / 1.2, value_max * 1.2, MARGIN_TOP, PANEL_HEIGHT);
    let mut svg = String::new();
    svg_chart::begin(&mut svg, width, height);
    let _ = writeln!(
        svg,
        r#"<text x="{MARGIN_LEFT}" y="22" font-size="15">fsoc (FUSE) ÷ ext4 (loop device): medians of {} run{}{}</text>"#,
        report.repetitions,
        if report.repetitions == 1 { "" } else { "s" },
        if report.quick { ", --quick" } else { "" }
    );
    let _ = writeln!(
        svg,
        r#"<text x="{MARGIN_LEFT}" y="40">times (lower is better): above 1 = fsoc slower; rates (higher is better): below 1 = fsoc slower</text>"#
    );
    let legend_y = 58.0;
    let _ = writeln!(
        svg,
        r##"<rect x="{MARGIN_LEFT}" y="{}" width="12" height="12" fill="{COLOR_SLOWER}"/><text x="{}" y="{legend_y}">fsoc slower</text><rect x="{}" y="{}" width="12" height="12" fill="{COLOR_FASTER}"/><text x="{}" y="{legend_y}">fsoc faster</text><line x1="{}" y1="{}" x2="{}" y2="{}" stroke="black" stroke-dasharray="4 3"/><text x="{}" y="{legend_y}">target</text>"##,
        legend_y - 10.0,
        MARGIN_LEFT + 16.0,
        MARGIN_LEFT + 100.0,
        legend_y - 10.0,
        MARGIN_LEFT + 116.0,
        MARGIN_LEFT + 200.0,
        legend_y - 4.0,
        MARGIN_LEFT + 224.0,
        legend_y - 4.0,
        MARGIN_LEFT + 228.0
    );
    svg_chart::frame(&mut svg, MARGIN_LEFT, MARGIN_TOP, panel_width, PANEL_HEIGHT);
    scale.grid(&mut svg, MARGIN_LEFT, panel_width);
    let parity_y = scale.y(1.0);
    let _ = writeln!(
        svg,
        r#"<line x1="{MARGIN_LEFT}" y1="{parity_y:.1}" x2="{:.1}" y2="{parity_y:.1}" stroke="black"/>"#,
        MARGIN_LEFT + panel_width
    );
    for (index, bar) in bars.iter().enumerate() {
        let center = MARGIN_LEFT + (index as f64 + 0.5) * SLOT_WIDTH;
        if let Some(ratio) = bar.ratio.filter(|ratio| *ratio > 0.0) {
            let y = scale.y(ratio);
            let fsoc_slower = match bar.better {
                Better::Lower => ratio > 1.0,
                Better::Higher => ratio < 1.0,
            };
            let color = if fsoc_slower { COLOR_SLOWER } else { COLOR_FASTER };
            let _ = writeln!(
                svg,
                r#"<rect x="{:.1}" y="{:.1}" width="{BAR_WIDTH}" height="{:.1}" fill="{color}"/>"#,
                center - BAR_WIDTH / 2.0,
                y.min(parity_y),
                (y - parity_y).abs().max(1.0)
            );
            let label_y = if y < parity_y { y - 4.0 } else { y + 12.0 };
            let _ = writeln!(
                svg,
                r#"<text x="{center:.1}" y="{label_y:.1}" text-anchor="middle">{}</text>"#,
                format_figure(Some(ratio))
            );
        } else {
            let _ =
                writeln!(svg, r#"<text x="{center:.1}" y="{:.1}" text-anchor="middle">not run</text>"#, parity_y - 4.0);
        }
        if let Some(target) = bar.target {
            let y = scale.y(target);
            let _ = writeln!(
                svg,
                r#"<line x1="{:.1}" y1="{y:.1}" x2="{:.1}" y2="{y:.1}" stroke="black" stroke-width="1.5" stroke-dasharray="4 3"/>"#,
                center - SLOT_WIDTH * 0.4,
                center + SLOT_WIDTH * 0.4
            );
        }
        // Read upwards, ending just below the panel under its bar.
        let (label_x, label_top) = (center + 4.0, MARGIN_TOP + PANEL_HEIGHT + 8.0);
        let _ = writeln!(
            svg,
            r#"<text x="{label_x:.1}" y="{label_top:.1}" text-anchor="end" transform="rotate(-90 {label_x:.1} {label_top:.1})">{} ({} better)</text>"#,
            svg_chart::escape(&bar.label),
            bar.better.name()
        );
    }
    let _ = writeln!(
        svg,
        r##"<text x="14" y="{:.1}" transform="rotate(-90 14 {:.1})" text-anchor="middle" fill="#555">fsoc/ext4 (log scale)</text>"##,
        MARGIN_TOP + PANEL_HEIGHT / 2.0,
        MARGIN_TOP + PANEL_HEIGHT / 2.0
    );
    svg_chart::end(&mut svg);
    svg
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host() -> Host {
        Host {
            root: true,
            dev_fuse: true,
            loop_control: true,
            free_loop_device: true,
            programs_missing: Vec::new(),
            image_directory_free_bytes: Some(8 << 30),
        }
    }

    // A host with everything passes; each missing piece is named in words, all at once.
    #[test]
    fn host_problems_name_what_is_missing() {
        assert!(host_problems(&host(), 1 << 30).is_empty());
        let bare = Host {
            root: false,
            dev_fuse: false,
            loop_control: false,
            free_loop_device: false,
            programs_missing: vec!["mkfs.ext4", "losetup"],
            image_directory_free_bytes: Some(100 << 20),
        };
        let problems = host_problems(&bare, 1 << 30).join("\n");
        for expected in ["root", "/dev/fuse", "mkfs.ext4, losetup", "loop device", "MiB free in /dev/shm"] {
            assert!(problems.contains(expected), "lacks {expected:?}:\n{problems}");
        }
        let no_free_loop = Host { free_loop_device: false, ..host() };
        assert!(host_problems(&no_free_loop, 1 << 30).join("").contains("free loop device"));
    }

    #[test]
    fn medians_and_verdicts() {
        assert_eq!(median(&[]), None);
        assert_eq!(median(&[3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), Some(2.5));
        assert_eq!(verdict(3.0, Better::Lower), "fsoc 3.00× slower");
        assert_eq!(verdict(0.5, Better::Lower), "fsoc 2.00× faster");
        assert_eq!(verdict(0.25, Better::Higher), "fsoc 4.00× slower (25% of ext4)");
        assert_eq!(verdict(2.0, Better::Higher), "fsoc 2.00× faster (200% of ext4)");
    }

    fn sample(fs: FsKind, workload: Workload, values: &[f64]) -> Sample {
        Sample {
            repetition: 1,
            fs: fs.name(),
            workload: workload.name(),
            metrics: workload.metrics().iter().map(|metric| metric.name).zip(values.iter().copied()).collect(),
            fsoc_server: (fs == FsKind::Fsoc).then_some(ServerUsage { pid: 1, cpu_seconds: 2.0, peak_rss_kib: 8192 }),
            sample_wall_s: 1.0,
            error: None,
        }
    }

    // Ratios are fsoc/ext4 of the medians; targets judge them; a failed sample adds nothing.
    #[test]
    fn summaries_ratios_and_targets() {
        let mut samples = vec![
            sample(FsKind::Fsoc, Workload::Postmark, &[12.0]),
            sample(FsKind::Ext4, Workload::Postmark, &[2.0]),
            sample(FsKind::Fsoc, Workload::Postmark, &[8.0]),
            sample(FsKind::Ext4, Workload::Postmark, &[2.0]),
            sample(FsKind::Fsoc, Workload::Dbench, &[50.0]),
            sample(FsKind::Ext4, Workload::Dbench, &[100.0]),
        ];
        let mut failed = sample(FsKind::Fsoc, Workload::Dbench, &[]);
        failed.error = Some("boom".into());
        samples.push(failed);
        let summaries: BTreeMap<_, _> = [Workload::Postmark, Workload::Dbench]
            .map(|workload| (workload.name(), summarize(workload, &samples)))
            .into_iter()
            .collect();
        let postmark = &summaries["postmark"].metrics["wall_s"];
        assert_eq!(
            (postmark.fsoc_median, postmark.ext4_median, postmark.ratio_fsoc_over_ext4),
            (Some(10.0), Some(2.0), Some(5.0))
        );
        assert_eq!(summaries["dbench"].metrics["throughput_mb_s"].fsoc_samples, vec![50.0]);
        assert_eq!(summaries["postmark"].fsoc_server.as_ref().map(|server| server.peak_rss_kib_max), Some(8192));
        let targets = check_targets(&summaries);
        assert_eq!(targets.len(), TARGETS.len());
        assert_eq!(targets[0].met, Some(true), "5.0 is within ≤ 5×: {:?}", targets[0]);
        assert_eq!(targets[1].met, Some(true), "50% ≥ 25%: {:?}", targets[1]);
        assert_eq!(targets[2].met, None, "fio did not run");
        let runnable = [Workload::Postmark, Workload::Dbench];
        let table = markdown_table(
            &Report {
                benchmark: "fuse",
                time_base: "",
                quick: true,
                repetitions: 2,
                config: Config {
                    volume_size_bytes: 1 << 30,
                    fsoc_profile: "mlc".into(),
                    image_directory: IMAGE_DIRECTORY,
                    fsoc_setup: String::new(),
                    fsoc_transport: String::new(),
                    fsoc_io_uring: false,
                    ext4_setup: String::new(),
                    order: "",
                    scale: Scale::quick(),
                },
                machine: machine(0.0),
                skipped: Vec::new(),
                workloads: summaries.clone(),
                targets,
                failed_samples: 1,
                samples,
                wall_seconds: 0.0,
            },
            &runnable,
        );
        assert!(
            table.contains("| postmark wall time (s) | 10.0 | 2.00 | 5.00 | fsoc 5.00× slower | 2.00 | 8.0 MiB |"),
            "{table}"
        );
    }

    #[test]
    fn workload_selection_keeps_the_standard_order() {
        assert_eq!(selected_workloads(&[]).expect("all"), Workload::ALL.to_vec());
        let names = ["fio".to_string(), "postmark".to_string(), "fio".to_string()];
        assert_eq!(selected_workloads(&names).expect("two"), vec![Workload::Postmark, Workload::Fio]);
        assert!(selected_workloads(&["tar".to_string()])
            .unwrap_err()
            .contains("postmark, dbench, fio, metadata_storm"));
    }
}
