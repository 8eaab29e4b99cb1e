//! fsoc against UBI + UBIFS on the same simulated raw NAND chip (the kernel's
//! nandsim, with a datasheet's delays on), in one run on one kernel: mount at several chip
//! sizes, durable small-file creates, a sequential write and read, and PostMark; every step
//! counted in page reads, page programs and block erases by kprobes on the raw-NAND layer, and
//! timed (`fsoc bench mtd`). Results as JSON, an SVG chart beside it and Markdown tables
//! (`report`; `Report::from_json` reads a finished run back, e.g. on the host after a run in a
//! guest).
//!
//! It needs a Linux kernel with nandsim, UBI, UBIFS and kprobe events, as root; the build
//! machines have none, so scripts/bench-mtd.sh boots Debian's kernel under QEMU and runs this
//! command there.
//!
//! Invariants: each file system gets a freshly loaded chip for each measurement, the same
//! workload bytes (fixed seeds) and the same counting; a figure that could not be measured is
//! recorded with its error, never filled in.

use std::fs;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

pub mod kernel;
pub mod report;

use crate::fuse::mounts::{self as mounts, run_program_ok};
use crate::fuse::workloads::{drop_caches, Scale};
use kernel::{FsocVolume, Kernel, Kprobes, UbiVolume, Volume};
use report::{
    Counted, DelaysReport, MountFigures, MountRow, NandDelays, Postmark, Report, Sequential, SequentialFigures,
    SmallFiles, SmallFilesFigures,
};

/// nandsim's ID bytes: Samsung K9F2G08, 2 KiB pages + 64 spare bytes, 128 KiB blocks, 256 MiB.
const ID_BYTES: &str = "0xec,0xda,0x10,0x95,0x44";
const NATIVE_SIZE_BYTES: u64 = 256 << 20;
const ERASE_BLOCK_SIZE_BYTES: u64 = 128 << 10;
/// nandsim's overridesize takes an exponent of 2 erase blocks; 64 MiB to 16 GiB here.
const SIZE_MIN_BYTES: u64 = 64 << 20;
const SIZE_MAX_BYTES: u64 = 16 << 30;
const MIB: u64 = 1 << 20;
/// Seed of the file sizes and contents of every workload.
const SEED: u64 = 17;
/// The error recorded for a workload `mount_only` leaves out: not measured, but no failure.
const SKIPPED: &str = "not run (--mount-only)";

/// What a run measures (`fsoc bench mtd`'s options).
pub struct MtdOptions {
    /// The fsoc executable that formats and mounts the fsoc volumes.
    pub fsoc: PathBuf,
    /// The smoke run's sizes and scales (`Plan::new` says which).
    pub quick: bool,
    /// Chip sizes of the mount comparison, each as given (for messages) and in bytes: powers
    /// of two from 64 MiB to 16 GiB; empty: 256M, 1G, 2G, 4G, 8G (256M, 1G when quick).
    pub sizes: Vec<(String, u64)>,
    /// Mounts per file system and size (default 3; 1 when quick).
    pub mount_reps: Option<u32>,
    /// The mount comparison only, no workloads.
    pub mount_only: bool,
    /// Program that loads a kernel module with parameters (modprobe, or the guest's load-module).
    pub module_loader: String,
    /// Directory for mount points and program output (default: the temporary directory).
    pub scratch: Option<PathBuf>,
    /// Recorded in the report: the code measured, and the machine outside the guest.
    pub code: Option<String>,
    pub host: Option<String>,
}

/// What one run measures.
struct Plan {
    sizes_bytes: Vec<u64>,
    mount_repetitions: u32,
    tree_files: u32,
    small_files: u32,
    small_size_min_bytes: u32,
    small_size_max_bytes: u32,
    sequential_bytes: u64,
    postmark: Scale,
    workloads: bool,
}

impl Plan {
    fn new(options: &MtdOptions) -> Result<Plan, String> {
        let default_sizes: &[u64] =
            if options.quick { &[256 * MIB, 1 << 30] } else { &[256 * MIB, 1 << 30, 2 << 30, 4 << 30, 8 << 30] };
        let sizes: Vec<(String, u64)> = if options.sizes.is_empty() {
            default_sizes.iter().map(|&bytes| (report::size_label(bytes), bytes)).collect()
        } else {
            options.sizes.clone()
        };
        let mut sizes_bytes = Vec::new();
        for (name, bytes) in &sizes {
            let bytes = *bytes;
            if !(SIZE_MIN_BYTES..=SIZE_MAX_BYTES).contains(&bytes) || !bytes.is_power_of_two() {
                return Err(format!("--sizes: {name} is not a power of two from 64M to 16G"));
            }
            if sizes_bytes.contains(&bytes) {
                return Err(format!("--sizes: {name} given twice"));
            }
            sizes_bytes.push(bytes);
        }
        sizes_bytes.sort_unstable();
        Ok(Plan {
            sizes_bytes,
            mount_repetitions: options.mount_reps.unwrap_or(if options.quick { 1 } else { 3 }),
            tree_files: if options.quick { 100 } else { 400 },
            small_files: if options.quick { 200 } else { 1000 },
            small_size_min_bytes: 100,
            small_size_max_bytes: 4096,
            sequential_bytes: if options.quick { 8 * MIB } else { 64 * MIB },
            postmark: if options.quick { Scale::quick() } else { Scale::full() },
            workloads: !options.mount_only,
        })
    }
}

/// nandsim's overridesize for a chip of `size_bytes`: none for the ID bytes' own 256 MiB.
fn overridesize(size_bytes: u64) -> Option<u32> {
    (size_bytes != NATIVE_SIZE_BYTES).then(|| (size_bytes / ERASE_BLOCK_SIZE_BYTES).trailing_zeros())
}

/// A small deterministic generator (xorshift64*), so both file systems get the same bytes.
struct Random(u64);

impl Random {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn bytes(&mut self, count: usize) -> Vec<u8> {
        let mut bytes = Vec::with_capacity(count + 8);
        while bytes.len() < count {
            bytes.extend_from_slice(&self.next().to_le_bytes());
        }
        bytes.truncate(count);
        bytes
    }

    /// A value in `low..=high`.
    fn between(&mut self, low: u32, high: u32) -> u32 {
        assert!(low <= high, "empty range {low}..={high}");
        low + (self.next() % u64::from(high - low + 1)) as u32
    }
}

/// The directory of one run: mount points and program output. Dropped, it removes what is
/// directly in it (empty mount points, files), never recursively, so a mount that refused to
/// go keeps its contents.
struct Scratch {
    path: PathBuf,
}

impl Scratch {
    fn create(parent: &Path) -> Result<Scratch, String> {
        let path = parent.join(format!("fsoc-bench-mtd-{}", std::process::id()));
        fs::create_dir_all(&path).map_err(|error| format!("{}: {error}", path.display()))?;
        Ok(Scratch { path })
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        if let Ok(entries) = fs::read_dir(&self.path) {
            for entry in entries.flatten() {
                let _ = fs::remove_file(entry.path()).or_else(|_| fs::remove_dir(entry.path()));
            }
        }
        let _ = fs::remove_dir(&self.path);
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum FsKind {
    Fsoc,
    UbiUbifs,
}

impl FsKind {
    const ALL: [FsKind; 2] = [FsKind::Fsoc, FsKind::UbiUbifs];

    fn label(self) -> &'static str {
        match self {
            FsKind::Fsoc => "fsoc",
            FsKind::UbiUbifs => "UBI + UBIFS",
        }
    }
}

struct Context<'a> {
    /// Receives one line per step (what `fsoc bench mtd` prints after "bench mtd: ").
    progress: &'a dyn Fn(&str),
    kernel: &'a Kernel,
    kprobes: &'a Kprobes,
    fsoc: PathBuf,
    delays: NandDelays,
    page_size_bytes: u64,
    plan: &'a Plan,
}

impl Context<'_> {
    fn progress(&self, line: &str) {
        (self.progress)(line);
    }

    /// Loads a fresh chip of `size_bytes`, formats `fs` on it and runs `work` on the volume;
    /// the volume is torn down, then the chip unloaded, whatever `work` returns.
    fn with_volume<T>(
        &self,
        fs: FsKind,
        size_bytes: u64,
        work: impl FnOnce(&mut dyn Volume) -> Result<T, String>,
    ) -> Result<T, String> {
        mounts::check_interrupted()?;
        let chip = self.kernel.load_nandsim(ID_BYTES, overridesize(size_bytes), &self.delays)?;
        if chip.geometry.size_bytes != size_bytes {
            return Err(format!(
                "nandsim made a chip of {} bytes, not {size_bytes} (overridesize {:?})",
                chip.geometry.size_bytes,
                overridesize(size_bytes)
            ));
        }
        match fs {
            FsKind::Fsoc => work(&mut FsocVolume::format(self.kernel, &self.fsoc, &chip.device)?),
            FsKind::UbiUbifs => work(&mut UbiVolume::format(self.kernel, &chip)?),
        }
    }

    fn count<T>(&self, work: impl FnOnce() -> Result<T, String>) -> Result<(Counted, T), String> {
        self.kprobes.count(&self.delays, self.page_size_bytes, work)
    }
}

fn io_error(path: &Path) -> impl Fn(std::io::Error) -> String + '_ {
    move |error| format!("{}: {error}", path.display())
}

/// The tree the mount comparison mounts over, as scripts/vm/mtd-workload.sh makes it: `files`
/// files in 21 directories, 0 to about 12 KB (every 29th about 40 KB, every 31st empty).
/// Returns the bytes written.
fn write_tree(root: &Path, files: u32) -> Result<u64, String> {
    let mut random = Random(SEED);
    let mut total_bytes = 0u64;
    for index in 0..files {
        let directory = root.join(format!("tree/d{}/e{}", index % 7, index % 3));
        fs::create_dir_all(&directory).map_err(io_error(&directory))?;
        let mut size = (u64::from(index) * 7919) % 12000;
        if index % 29 == 0 {
            size = 40_000 + u64::from(index);
        }
        if index % 31 == 0 {
            size = 0;
        }
        let path = directory.join(format!("f{index}"));
        fs::write(&path, random.bytes(size as usize)).map_err(io_error(&path))?;
        total_bytes += size;
    }
    Ok(total_bytes)
}

/// Files in the tree, found by walking it (a mount that lost files shows here).
fn count_files(directory: &Path) -> Result<u32, String> {
    let mut files = 0;
    for entry in fs::read_dir(directory).map_err(io_error(directory))? {
        let entry = entry.map_err(io_error(directory))?;
        let kind = entry.file_type().map_err(io_error(&entry.path()))?;
        files += if kind.is_dir() { count_files(&entry.path())? } else { 1 };
    }
    Ok(files)
}

/// Mounts repeated on one chip holding the tree: each mount counted and timed alone.
fn mount_figures(context: &Context<'_>, fs: FsKind, size_bytes: u64) -> Result<(MountFigures, u64), String> {
    let plan = context.plan;
    context.with_volume(fs, size_bytes, |volume| {
        volume.mount()?;
        let tree_bytes = write_tree(volume.root(), plan.tree_files)?;
        volume.unmount()?;
        let mut samples = Vec::new();
        for repetition in 0..plan.mount_repetitions {
            mounts::check_interrupted()?;
            let (counted, ()) = context.count(|| volume.mount())?;
            if repetition == 0 {
                let found = count_files(&volume.root().join("tree"))?;
                if found != plan.tree_files {
                    return Err(format!("after the mount the tree has {found} files, not {}", plan.tree_files));
                }
            }
            volume.unmount()?;
            samples.push(counted);
        }
        Ok((MountFigures::from_samples(&samples), tree_bytes))
    })
}

fn mount_row(context: &Context<'_>, size_bytes: u64, tree_bytes: &mut u64) -> MountRow {
    let mut row = MountRow {
        size_label: report::size_label(size_bytes),
        size_bytes,
        erase_blocks: size_bytes / ERASE_BLOCK_SIZE_BYTES,
        overridesize: overridesize(size_bytes),
        fsoc: None,
        ubi_ubifs: None,
        fsoc_speedup: None,
        errors: Vec::new(),
    };
    for fs in FsKind::ALL {
        let started = Instant::now();
        match mount_figures(context, fs, size_bytes) {
            Ok((figures, bytes)) => {
                context.progress(&format!(
                    "{} {}: mount {} page reads, {} programs, {} erases, {:.3} s (median of {}); \
                     step {:.0} s",
                    row.size_label,
                    fs.label(),
                    figures.ops.page_reads,
                    figures.ops.page_programs,
                    figures.ops.block_erases,
                    figures.wall_seconds_median,
                    figures.wall_seconds.len(),
                    started.elapsed().as_secs_f64()
                ));
                *tree_bytes = bytes;
                match fs {
                    FsKind::Fsoc => row.fsoc = Some(figures),
                    FsKind::UbiUbifs => row.ubi_ubifs = Some(figures),
                }
            }
            Err(error) => {
                context.progress(&format!("{} {}: FAILED: {error}", row.size_label, fs.label()));
                row.errors.push(format!("{}: {error}", fs.label()));
            }
        }
    }
    row.fsoc_speedup = row
        .fsoc
        .as_ref()
        .zip(row.ubi_ubifs.as_ref())
        .filter(|(fsoc, _)| fsoc.wall_seconds_median > 0.0)
        .map(|(fsoc, ubi)| ubi.wall_seconds_median / fsoc.wall_seconds_median);
    row
}

/// Creates the small files, each written whole and fsync'd before the next; afterwards (not
/// counted) remounts and compares every file.
fn small_files(context: &Context<'_>, volume: &mut dyn Volume) -> Result<SmallFilesFigures, String> {
    let plan = context.plan;
    let mut random = Random(SEED ^ 0x5a11);
    let payloads: Vec<Vec<u8>> = (0..plan.small_files)
        .map(|_| {
            let size = random.between(plan.small_size_min_bytes, plan.small_size_max_bytes);
            random.bytes(size as usize)
        })
        .collect();
    volume.mount()?;
    let directory = volume.root().join("small");
    fs::create_dir(&directory).map_err(io_error(&directory))?;
    // The directory is made durable first, so the count holds the file creates alone.
    fs::File::open(&directory).and_then(|handle| handle.sync_all()).map_err(io_error(&directory))?;
    let (counted, ()) = context.count(|| {
        for (index, payload) in payloads.iter().enumerate() {
            let path = directory.join(format!("f{index:04}"));
            let mut file = fs::OpenOptions::new().write(true).create_new(true).open(&path).map_err(io_error(&path))?;
            file.write_all(payload).map_err(io_error(&path))?;
            file.sync_all().map_err(io_error(&path))?;
        }
        Ok(())
    })?;
    // The unmount settles what each file system deferred past the last fsync (UBIFS commits
    // its journal's index; fsoc makes its pending delta a full commit): counted apart.
    let (unmount, ()) = context.count(|| volume.unmount())?;
    volume.mount()?;
    for (index, payload) in payloads.iter().enumerate() {
        let path = volume.root().join(format!("small/f{index:04}"));
        if fs::read(&path).map_err(io_error(&path))? != *payload {
            return Err(format!("{} reads back different after the remount", path.display()));
        }
    }
    volume.unmount()?;
    let fsyncs = f64::from(plan.small_files);
    Ok(SmallFilesFigures {
        counted,
        page_programs_per_fsync: counted.ops.page_programs as f64 / fsyncs,
        block_erases_per_fsync: counted.ops.block_erases as f64 / fsyncs,
        page_reads_per_fsync: counted.ops.page_reads as f64 / fsyncs,
        milliseconds_per_create: counted.wall_seconds * 1000.0 / fsyncs,
        unmount: Some(unmount),
        page_programs_per_create_settled: Some((counted.ops.page_programs + unmount.ops.page_programs) as f64 / fsyncs),
    })
}

/// One file written in 1 MiB requests with an fsync at the end; then, after a remount with the
/// page cache dropped, read back in 1 MiB requests and compared.
fn sequential(context: &Context<'_>, volume: &mut dyn Volume) -> Result<SequentialFigures, String> {
    let bytes = context.plan.sequential_bytes;
    let chunk = Random(SEED ^ 0x5e9).bytes(MIB as usize);
    let chunks = bytes / MIB;
    volume.mount()?;
    let path = volume.root().join("sequential.dat");
    let (write, ()) = context.count(|| {
        let mut file = fs::File::create(&path).map_err(io_error(&path))?;
        for _ in 0..chunks {
            file.write_all(&chunk).map_err(io_error(&path))?;
        }
        file.sync_all().map_err(io_error(&path))
    })?;
    volume.unmount()?;
    volume.mount()?;
    drop_caches()?;
    let path = volume.root().join("sequential.dat");
    let (read, ()) = context.count(|| {
        let mut file = fs::File::open(&path).map_err(io_error(&path))?;
        let mut buffer = vec![0u8; MIB as usize];
        for index in 0..chunks {
            file.read_exact(&mut buffer).map_err(io_error(&path))?;
            if buffer != chunk {
                return Err(format!("{}: MiB {index} reads back different", path.display()));
            }
        }
        match file.read(&mut buffer).map_err(io_error(&path))? {
            0 => Ok(()),
            extra => Err(format!("{}: {extra} bytes past the {bytes} written", path.display())),
        }
    })?;
    volume.unmount()?;
    let mib = bytes as f64 / MIB as f64;
    Ok(SequentialFigures {
        write_mib_per_second: mib / write.wall_seconds.max(1e-9),
        write,
        read_mib_per_second: mib / read.wall_seconds.max(1e-9),
        read,
    })
}

/// PostMark with its configuration file in the scratch directory and its location on the
/// volume; PostMark's own report has whole seconds only, so the process's wall time is used.
fn postmark(context: &Context<'_>, volume: &mut dyn Volume) -> Result<Counted, String> {
    volume.mount()?;
    let directory = volume.root().join("postmark");
    fs::create_dir(&directory).map_err(io_error(&directory))?;
    let script = context.kernel.scratch.join("postmark.cfg");
    fs::write(&script, context.plan.postmark.postmark_script(&directory)).map_err(io_error(&script))?;
    let timeout = Duration::from_secs(3 * 3600);
    let (counted, output) =
        context.count(|| run_program_ok(Command::new("postmark").arg(&script), &context.kernel.scratch, timeout))?;
    let _ = fs::remove_file(&script);
    if !output.stdout.contains("Deleting subdirectories...Done") {
        return Err(format!("postmark did not finish its run: {}", output.describe()));
    }
    volume.unmount()?;
    Ok(counted)
}

/// Runs `workload` on a fresh chip for each file system in turn.
fn compare<T>(
    context: &Context<'_>,
    name: &str,
    workload: impl Fn(&Context<'_>, &mut dyn Volume) -> Result<T, String>,
    describe: impl Fn(&T) -> String,
) -> (Option<T>, Option<T>, Vec<String>) {
    let mut results = (None, None, Vec::new());
    for fs in FsKind::ALL {
        let started = Instant::now();
        match context.with_volume(fs, NATIVE_SIZE_BYTES, |volume| workload(context, volume)) {
            Ok(figures) => {
                context.progress(&format!(
                    "{name} {}: {}; step {:.0} s",
                    fs.label(),
                    describe(&figures),
                    started.elapsed().as_secs_f64()
                ));
                match fs {
                    FsKind::Fsoc => results.0 = Some(figures),
                    FsKind::UbiUbifs => results.1 = Some(figures),
                }
            }
            Err(error) => {
                context.progress(&format!("{name} {}: FAILED: {error}", fs.label()));
                results.2.push(format!("{}: {error}", fs.label()));
            }
        }
    }
    results
}

fn describe_counted(counted: &Counted) -> String {
    format!(
        "{} reads, {} programs, {} erases, {:.2} s",
        counted.ops.page_reads, counted.ops.page_programs, counted.ops.block_erases, counted.wall_seconds
    )
}

fn first_line(path: &str) -> String {
    fs::read_to_string(path).map(|text| text.lines().next().unwrap_or("").trim().to_string()).unwrap_or_default()
}

/// "QEMU Standard PC (i440FX + PIIX, 1996), 2 CPUs, 2994 MiB".
fn machine() -> String {
    let vendor = first_line("/sys/class/dmi/id/sys_vendor");
    let product = first_line("/sys/class/dmi/id/product_name");
    let cpus = std::thread::available_parallelism().map_or(0, |count| count.get());
    let memory_kib: u64 = fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|text| {
            let line = text.lines().find(|line| line.starts_with("MemTotal:"))?.to_string();
            line.split_whitespace().nth(1)?.parse().ok()
        })
        .unwrap_or(0);
    format!("{vendor} {product}, {cpus} CPUs, {} MiB", memory_kib >> 10)
}

/// Why this machine cannot measure, as one message naming the way that works.
fn cannot_run(problems: &[String]) -> String {
    format!(
        "bench mtd measures on a Linux kernel with nandsim, UBI, UBIFS and kprobe events; here it lacks:\n  - {}\n\
         On a build machine run scripts/bench-mtd.sh --json OUT [--quick] instead: it boots Debian's kernel \
         under QEMU (scripts/setup.sh --vm installs it) and runs this command inside.",
        problems.join("\n  - ")
    )
}

/// What stops `bench mtd` from measuring on this host, in words (nothing when it can):
/// `fsoc report` asks before starting it.
pub fn problems_here() -> Vec<String> {
    let kernel = Kernel { module_loader: "modprobe".into(), scratch: std::env::temp_dir() };
    let mut problems = kernel.problems();
    if !Command::new("modprobe").args(["-n", "nandsim"]).output().is_ok_and(|output| output.status.success()) {
        problems.push("the nandsim module (modprobe -n nandsim fails)".into());
    }
    problems
}

/// Measures everything `options` ask for on this kernel (see the module's comment); `progress`
/// receives one line per step. Fails before anything runs when the kernel lacks what it needs
/// (`problems_here`); a step that fails is recorded in the report (`Report::not_measured`,
/// `failures`), not an error.
pub fn run(options: &MtdOptions, progress: &mut dyn FnMut(&str)) -> Result<Report, String> {
    let plan = Plan::new(options)?;
    let scratch = Scratch::create(&options.scratch.clone().unwrap_or_else(std::env::temp_dir))?;
    let kernel = Kernel { module_loader: options.module_loader.clone(), scratch: scratch.path.clone() };
    let mut problems = kernel.problems();
    if options.module_loader == "modprobe"
        && !Command::new("modprobe").args(["-n", "nandsim"]).output().is_ok_and(|output| output.status.success())
    {
        problems.push("the nandsim module (modprobe -n nandsim fails)".into());
    }
    if !problems.is_empty() {
        return Err(cannot_run(&problems));
    }
    let started = Instant::now();
    let delays = NandDelays::K9F2G08U0B;

    // A first chip brings in the nand module (where the probed functions live) and gives the
    // geometry; it is unloaded at once.
    let geometry = kernel.load_nandsim(ID_BYTES, None, &delays)?.geometry.clone();
    let kprobes = Kprobes::install()?;
    kernel.load_ubifs()?;
    // The steps take the context by shared reference; the caller's callback is called from one
    // of them at a time.
    let progress = std::cell::RefCell::new(progress);
    let progress_line = |line: &str| (progress.borrow_mut())(line);
    let context = Context {
        progress: &progress_line,
        kernel: &kernel,
        kprobes: &kprobes,
        fsoc: options.fsoc.clone(),
        delays,
        page_size_bytes: geometry.page_size_bytes,
        plan: &plan,
    };
    context.progress(&format!(
        "nandsim {ID_BYTES}: {} B pages, {} B OOB ({} free), {} KiB blocks; delays {:?}",
        geometry.page_size_bytes,
        geometry.oob_size_bytes,
        geometry.oob_free_bytes,
        geometry.erase_block_size_bytes >> 10,
        delays.module_parameters()
    ));

    let mut tree_bytes = 0;
    let mount: Vec<MountRow> =
        plan.sizes_bytes.iter().map(|&size_bytes| mount_row(&context, size_bytes, &mut tree_bytes)).collect();

    let skipped = || vec![SKIPPED.to_string()];
    let (small_fsoc, small_ubi, small_errors) = if plan.workloads {
        compare(&context, "small files", small_files, |figures: &SmallFilesFigures| {
            format!(
                "{:.2} programs, {:.3} erases per fsync, {:.2} ms per create",
                figures.page_programs_per_fsync, figures.block_erases_per_fsync, figures.milliseconds_per_create
            )
        })
    } else {
        (None, None, skipped())
    };
    let (sequential_fsoc, sequential_ubi, sequential_errors) = if plan.workloads {
        compare(&context, "sequential", sequential, |figures: &SequentialFigures| {
            format!(
                "write {:.2} MiB/s ({}), read {:.2} MiB/s ({})",
                figures.write_mib_per_second,
                describe_counted(&figures.write),
                figures.read_mib_per_second,
                describe_counted(&figures.read)
            )
        })
    } else {
        (None, None, skipped())
    };
    let (postmark_fsoc, postmark_ubi, postmark_errors) = if plan.workloads {
        compare(&context, "postmark", postmark, describe_counted)
    } else {
        (None, None, skipped())
    };

    let postmark_configuration: Vec<String> = plan
        .postmark
        .postmark_script(Path::new("DIR"))
        .lines()
        .filter(|line| !line.starts_with("set location"))
        .map(str::to_string)
        .collect();
    let mut report = Report {
        benchmark: "fsoc bench mtd: fsoc against UBI + UBIFS on the kernel's nandsim, one run".into(),
        quick: options.quick,
        code: options.code.clone(),
        host: options.host.clone(),
        kernel: first_line("/proc/sys/kernel/osrelease"),
        machine: machine(),
        geometry,
        delays: DelaysReport {
            do_delays: true,
            parameters: delays,
            page_read_us: delays.page_read_us(context.page_size_bytes),
            page_program_us: delays.page_program_us(context.page_size_bytes),
            block_erase_us: delays.block_erase_us(),
            source: NandDelays::SOURCE.into(),
        },
        counting: "kprobe events on nand_read_page_op (page reads), nand_prog_page_begin_op (page programs) and \
                   nand_erase_op (block erases), hits read from /sys/kernel/tracing/kprobe_profile before and after \
                   each measured step"
            .into(),
        fsoc_mount: "fsoc mkfs DEV on the fresh chip; mount = `fsoc mount DEV DIR --daemon` (FUSE, default options: \
                     commit interval 5 s), timed from its start until it returns with the mount in place; unmount \
                     = `fsoc umount DIR`"
            .into(),
        ubi_ubifs_setup: "ubiformat -y on the fresh chip, ubiattach, one volume filling it (ubimkvol -m), \
                          ubidetach; mount = `ubiattach -m N` then `mount -t ubifs ubiN:bench DIR` (no fastmap: \
                          the kernel has CONFIG_MTD_UBI_FASTMAP off; UBIFS's default LZO compression); unmount = \
                          umount then ubidetach"
            .into(),
        mount_tree_files: plan.tree_files,
        mount_tree_bytes: tree_bytes,
        mount_repetitions: plan.mount_repetitions,
        mount,
        workload_chip_size_bytes: NATIVE_SIZE_BYTES,
        small_files: SmallFiles {
            files: plan.small_files,
            size_min_bytes: plan.small_size_min_bytes,
            size_max_bytes: plan.small_size_max_bytes,
            seed: SEED,
            fsoc: small_fsoc,
            ubi_ubifs: small_ubi,
            errors: small_errors,
        },
        sequential: Sequential {
            file_bytes: plan.sequential_bytes,
            request_bytes: MIB,
            fsoc: sequential_fsoc,
            ubi_ubifs: sequential_ubi,
            errors: sequential_errors,
        },
        postmark: Postmark {
            configuration: postmark_configuration,
            fsoc: postmark_fsoc,
            ubi_ubifs: postmark_ubi,
            errors: postmark_errors,
        },
        targets: Vec::new(),
        not_measured: Vec::new(),
        notes: vec![
            "Wall times come from a guest under QEMU's software emulation (TCG): besides nandsim's busy-waits \
             (flash_delay_seconds) they hold each file system's CPU time under emulation and process start-up, \
             so they exaggerate CPU-bound costs; the counts do not depend on the machine."
                .into(),
            "Each measurement runs on a freshly loaded chip; the mount comparison first fills the volume with the \
             same tree of files through the mounted file system."
                .into(),
            "The small-file and sequential workloads write random bytes, which UBIFS's compression cannot shrink; \
             PostMark writes its own file contents."
                .into(),
            "Small files: each file is created (O_EXCL), written whole and fsync'd before the next; the directory \
             itself is fsync'd before counting starts. Every file is compared after a remount."
                .into(),
        ],
        wall_seconds: 0.0,
    };
    report.not_measured = not_measured(&report);
    report.targets = report::check_targets(&report);
    report.wall_seconds = started.elapsed().as_secs_f64();
    drop(kprobes);

    Ok(report)
}

/// The steps of `report` that failed (not those `mount_only` left out), with their reasons.
pub fn failures(report: &Report) -> Vec<&str> {
    report.not_measured.iter().map(String::as_str).filter(|missing| !missing.ends_with(SKIPPED)).collect()
}

/// Every step that failed, with its reason.
fn not_measured(report: &Report) -> Vec<String> {
    let mut missing = Vec::new();
    for row in &report.mount {
        missing.extend(row.errors.iter().map(|error| format!("mount at {}: {error}", row.size_label)));
    }
    for (name, errors) in [
        ("small files", &report.small_files.errors),
        ("sequential", &report.sequential.errors),
        ("postmark", &report.postmark.errors),
    ] {
        missing.extend(errors.iter().map(|error| format!("{name}: {error}")));
    }
    missing
}

#[cfg(test)]
mod tests {
    use super::*;

    fn options(quick: bool, sizes: &[&str]) -> MtdOptions {
        let size = |name: &str| -> u64 {
            let (digits, shift) = name.split_at(name.len() - 1);
            digits.parse::<u64>().expect("digits") << if shift == "G" { 30 } else { 20 }
        };
        MtdOptions {
            fsoc: PathBuf::from("fsoc"),
            quick,
            sizes: sizes.iter().map(|name| (name.to_string(), size(name))).collect(),
            mount_reps: None,
            mount_only: false,
            module_loader: "modprobe".into(),
            scratch: None,
            code: None,
            host: None,
        }
    }

    // The sizes map onto nandsim's overridesize: 2^N blocks of 128 KiB, none for 256 MiB.
    #[test]
    fn sizes_and_overridesize() {
        let plan = Plan::new(&options(false, &[])).expect("plan");
        assert_eq!(plan.sizes_bytes, [256 << 20, 1 << 30, 2 << 30, 4 << 30, 8 << 30]);
        let exponents: Vec<Option<u32>> = plan.sizes_bytes.iter().map(|&size| overridesize(size)).collect();
        assert_eq!(exponents, [None, Some(13), Some(14), Some(15), Some(16)]);
        let quick = Plan::new(&options(true, &[])).expect("plan");
        assert_eq!((quick.sizes_bytes.len(), quick.mount_repetitions, quick.small_files), (2, 1, 200));
    }

    // Sizes nandsim cannot make, or given twice, are refused with the reason.
    #[test]
    fn bad_sizes_are_refused() {
        for (sizes, reason) in [
            (&["3G"][..], "power of two"),
            (&["32M"], "power of two"),
            (&["32G"], "power of two"),
            (&["1G", "1G"], "twice"),
        ] {
            let error = Plan::new(&options(false, sizes)).err().expect("refused");
            assert!(error.contains(reason), "{sizes:?}: {error}");
        }
    }

    // The generator gives the same bytes every run (both file systems see the same workload),
    // and its ranges are inclusive.
    #[test]
    fn random_is_deterministic() {
        let (mut first, mut second) = (Random(SEED), Random(SEED));
        assert_eq!(first.bytes(13), second.bytes(13));
        let sizes: Vec<u32> = (0..2000).map(|_| first.between(100, 4096)).collect();
        assert!(sizes.iter().all(|size| (100..=4096).contains(size)));
        assert!(sizes.contains(&100) || sizes.iter().min() < Some(&150), "low end reached");
    }
}
