//! Seed 001's IOzone record sweep on p = 1, 2, 4, 8 simulated chips (`fsoc bench scaling`
//! and `fsoc report` run it through `run`).
//!
//! For every profile, chip count and record size, a fresh RAM-simulated array is formatted
//! and one file is written, rewritten, read, read in random order and written in random
//! order, one record per call. Every write is durable before the next one starts (pwrite,
//! then fsync, which commits: IOzone's O_SYNC), and the volume is unmounted and remounted
//! between phases so no cache helps the reads. Throughput is measured in simulated device
//! time (the file system's virtual clock), never wall time, so every figure is deterministic.
//! Beside each figure stands the array's physical limit for that operation: p × page size ÷
//! (array time + bus transfer of data and spare) of one page program or read.

use fsoc_media::FlashStats;
use std::fmt::Write as _;
use std::time::Instant;

use fsoc_core::{FileSystem, FsConfig, OpenFlags};
use fsoc_media::rng::SeededRng;
use fsoc_media::{Profile, SimConfig, SimFlash};

use crate::svg_chart::{self, LogScale};

const KIB: u64 = 1 << 10;
const MIB: u64 = 1 << 20;
const NANOS_PER_SECOND: f64 = 1e9;

/// The operations of one sweep cell, in the order they run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Operation {
    Write,
    Rewrite,
    Read,
    RandomRead,
    RandomWrite,
}

impl Operation {
    pub const ALL: [Operation; 5] =
        [Operation::Write, Operation::Rewrite, Operation::Read, Operation::RandomRead, Operation::RandomWrite];

    pub fn name(self) -> &'static str {
        match self {
            Operation::Write => "write",
            Operation::Rewrite => "rewrite",
            Operation::Read => "read",
            Operation::RandomRead => "random_read",
            Operation::RandomWrite => "random_write",
        }
    }

    fn is_write(self) -> bool {
        matches!(self, Operation::Write | Operation::Rewrite | Operation::RandomWrite)
    }

    fn is_random(self) -> bool {
        matches!(self, Operation::RandomRead | Operation::RandomWrite)
    }

    /// Which pass of writes the file holds after this operation (reads verify against it).
    fn pass(self) -> u64 {
        match self {
            Operation::Write => 1,
            Operation::Rewrite | Operation::Read | Operation::RandomRead => 2,
            Operation::RandomWrite => 3,
        }
    }
}

/// What to sweep.
#[derive(Clone, Debug)]
pub struct SweepConfig {
    pub profiles: Vec<Profile>,
    pub chip_counts: Vec<u32>,
    pub record_sizes_bytes: Vec<u64>,
    /// Files are at least this long, so small records are timed over many calls.
    pub file_bytes_min: u64,
    /// The simulated array holds at least this much (and at least 4 files).
    pub device_bytes_min: u64,
    pub seed: u64,
    /// The file system configuration every cell uses (default: `FsConfig::default()`).
    pub fs: FsConfig,
}

impl SweepConfig {
    /// The full sweep: records 4 KiB … 16 MiB, p = 1, 2, 4, 8, SLC/MLC/TLC.
    pub fn full(seed: u64) -> Self {
        SweepConfig {
            profiles: vec![Profile::Slc, Profile::Mlc, Profile::Tlc],
            chip_counts: vec![1, 2, 4, 8],
            record_sizes_bytes: (12..=24).map(|shift| 1u64 << shift).collect(),
            file_bytes_min: 16 * MIB,
            device_bytes_min: 512 * MIB,
            seed,
            fs: FsConfig::default(),
        }
    }

    /// A reduced sweep (a few record sizes, smaller files) that runs in seconds.
    pub fn quick(seed: u64) -> Self {
        SweepConfig {
            record_sizes_bytes: vec![4 * KIB, 64 * KIB, MIB, 16 * MIB],
            file_bytes_min: 4 * MIB,
            ..SweepConfig::full(seed)
        }
    }

    pub fn file_bytes(&self, record_bytes: u64) -> u64 {
        record_bytes.max(self.file_bytes_min)
    }

    pub fn cell_count(&self) -> u64 {
        (self.profiles.len() * self.chip_counts.len() * self.record_sizes_bytes.len()) as u64
            + REDUNDANCY_CELLS.len() as u64 * 2
    }
}

/// One measured figure (one JSON row).
#[derive(Clone, Debug, serde::Serialize)]
pub struct Row {
    pub chips: u32,
    pub profile: &'static str,
    pub op: &'static str,
    pub record_bytes: u64,
    pub mib_per_s: f64,
    pub raw_mib_per_s: f64,
    pub efficiency: f64,
    /// For writes, the sustained limit once erases are paid too: p × page ÷ (program time +
    /// erase time ÷ pages per block); for reads, the raw limit.
    pub limit_with_erases_mib_per_s: f64,
    pub file_bytes: u64,
    /// Simulated device time of the timed loop.
    pub device_ns: u64,
    pub programs: u64,
    pub reads: u64,
    pub erases: u64,
    pub commits: u64,
}

/// Page reads of each remount of a (profile, chips) pair.
#[derive(Clone, Debug, serde::Serialize)]
pub struct MountRow {
    pub chips: u32,
    pub profile: &'static str,
    pub mount_page_reads_min: u64,
    pub mount_page_reads_max: u64,
    pub mounts: u64,
}

#[derive(Clone, Debug, serde::Serialize)]
pub struct TargetCheck {
    pub target: String,
    pub measured: String,
    pub met: bool,
}

#[derive(Clone, Debug, serde::Serialize)]
pub struct Report {
    pub benchmark: &'static str,
    pub seed: u64,
    pub quick: bool,
    /// Whether the file system skipped the chips' paired-page distance after each commit.
    pub paired_page_guard: bool,
    pub time_base: &'static str,
    pub file_bytes_min: u64,
    pub device_bytes_min: u64,
    pub rows: Vec<Row>,
    pub mount: Vec<MountRow>,
    /// What redundancy across chips costs: each mode beside none, same array and records.
    pub redundancy: Vec<RedundancyRow>,
    pub targets: Vec<TargetCheck>,
    pub wall_seconds: f64,
    /// The sweep that was run (not written: the fields above describe it).
    #[serde(skip)]
    pub sweep: SweepConfig,
}

type Fs = FileSystem<SimFlash>;

fn fs_error(context: &str) -> impl Fn(fsoc_core::FsError) -> String + '_ {
    move |error| format!("{context}: {error}")
}

/// Physical limit of the array for one operation, in MiB/s.
pub fn raw_mib_per_s(config: &SimConfig, operation: Operation) -> f64 {
    let busy_ns = if operation.is_write() { config.program_busy_ns() } else { config.read_busy_ns() };
    let bytes_per_second =
        f64::from(config.chip_count) * f64::from(config.geometry.page_data_bytes) * NANOS_PER_SECOND / busy_ns as f64;
    bytes_per_second / MIB as f64
}

/// The sustained limit of an operation when every block written is erased once.
pub fn limit_with_erases_mib_per_s(config: &SimConfig, operation: Operation) -> f64 {
    if !operation.is_write() {
        return raw_mib_per_s(config, operation);
    }
    let busy_ns =
        config.program_busy_ns() as f64 + config.erase_busy_ns() as f64 / f64::from(config.geometry.pages_per_block);
    f64::from(config.chip_count) * f64::from(config.geometry.page_data_bytes) * NANOS_PER_SECOND / busy_ns / MIB as f64
}

/// The device for one cell: big enough for four files and the log's reserve.
fn device_config(sweep: &SweepConfig, profile: Profile, chips: u32, record_bytes: u64) -> SimConfig {
    let block_bytes = profile.geometry(1).block_data_bytes();
    let device_bytes = sweep.device_bytes_min.max(4 * sweep.file_bytes(record_bytes));
    let blocks = device_bytes.div_ceil(u64::from(chips) * block_bytes).max(32);
    SimConfig::new(profile, chips, blocks as u32, sweep.seed)
}

/// Content of record `index` after write pass `pass`: a fixed random pattern stamped with
/// both, so a read that returns another record's or another pass's bytes is caught.
fn fill_record(pattern: &[u8], pass: u64, index: u64, record: &mut [u8]) {
    record.copy_from_slice(&pattern[..record.len()]);
    let stamp = (pass << 48 | index).to_le_bytes();
    for chunk in record.chunks_mut(4096) {
        chunk[..8].copy_from_slice(&stamp);
    }
}

/// Remounts the volume (clean unmount first) and brings the file system's clock up to the
/// array's, so the next phase does not pay for work issued before it.
fn remount(fs: Fs, mount_reads: &mut Vec<u64>) -> Result<Fs, String> {
    let config = fs.config;
    let flash = fs.unmount().map_err(fs_error("unmount"))?;
    let mut fs = FileSystem::mount(flash, config).map_err(fs_error("mount"))?;
    mount_reads.push(fs.mount_report().page_reads);
    fs.wait_for_device();
    Ok(fs)
}

struct Cell<'a> {
    sweep: &'a SweepConfig,
    profile: Profile,
    chips: u32,
    record_bytes: u64,
}

impl Cell<'_> {
    /// Runs the five phases on a fresh array; returns one row per phase.
    fn run(&self, mount_reads: &mut Vec<u64>) -> Result<Vec<Row>, String> {
        let config = device_config(self.sweep, self.profile, self.chips, self.record_bytes);
        let flash = SimFlash::create(config.clone()).map_err(|error| format!("simulator: {error}"))?;
        let fs = FileSystem::format(flash, self.sweep.fs, self.sweep.seed).map_err(fs_error("format"))?;
        let mut fs = remount(fs, mount_reads)?;
        let file_bytes = self.sweep.file_bytes(self.record_bytes);
        let record_count = file_bytes / self.record_bytes;
        let mut rng = SeededRng::new(self.sweep.seed ^ self.record_bytes ^ u64::from(self.chips) << 32);
        let pattern: Vec<u8> = (0..self.record_bytes).map(|_| rng.below(256) as u8).collect();
        let mut rows = Vec::new();
        for operation in Operation::ALL {
            let order = record_order(record_count, operation, &mut rng);
            let row = self.run_phase(&mut fs, &config, operation, &order, &pattern, file_bytes)?;
            rows.push(row);
            fs = remount(fs, mount_reads)?;
        }
        Ok(rows)
    }

    fn run_phase(
        &self,
        fs: &mut Fs,
        config: &SimConfig,
        operation: Operation,
        order: &[u64],
        pattern: &[u8],
        file_bytes: u64,
    ) -> Result<Row, String> {
        let flags = if operation.is_write() {
            OpenFlags { read: true, write: true, create: operation == Operation::Write, ..OpenFlags::default() }
        } else {
            OpenFlags { read: true, ..OpenFlags::default() }
        };
        let fd = fs.open(b"/iozone.tmp", flags, 0o644).map_err(fs_error("open"))?;
        let counters_before = fs.flash().counters().totals();
        let commits_before = fs.stats.commits;
        let start_ns = fs.device_now_ns();
        let mut record = vec![0u8; self.record_bytes as usize];
        let mut expected = vec![0u8; self.record_bytes as usize];
        for &index in order {
            let offset = index * self.record_bytes;
            if operation.is_write() {
                fill_record(pattern, operation.pass(), index, &mut record);
                let written = fs.pwrite(fd, offset, &record).map_err(fs_error("pwrite"))?;
                if written != record.len() {
                    return Err(format!("short write: {written} of {} bytes", record.len()));
                }
                fs.fsync_fd(fd).map_err(fs_error("fsync"))?;
            } else {
                let bytes = fs.pread(fd, offset, self.record_bytes as usize).map_err(fs_error("pread"))?;
                fill_record(pattern, operation.pass(), index, &mut expected);
                if bytes != expected {
                    return Err(format!(
                        "{} of record {index} ({} chips, {}) returned wrong data",
                        operation.name(),
                        self.chips,
                        self.profile.name()
                    ));
                }
            }
        }
        let device_ns = fs.device_now_ns() - start_ns;
        let counters = fs.flash().counters().totals();
        let commits = fs.stats.commits - commits_before;
        fs.close(fd).map_err(fs_error("close"))?;
        let mib_per_s = file_bytes as f64 / MIB as f64 / (device_ns.max(1) as f64 / NANOS_PER_SECOND);
        let raw = raw_mib_per_s(config, operation);
        Ok(Row {
            chips: self.chips,
            profile: self.profile.name(),
            op: operation.name(),
            record_bytes: self.record_bytes,
            mib_per_s,
            raw_mib_per_s: raw,
            efficiency: mib_per_s / raw,
            limit_with_erases_mib_per_s: limit_with_erases_mib_per_s(config, operation),
            file_bytes,
            device_ns,
            programs: counters.programs - counters_before.programs,
            reads: counters.reads - counters_before.reads,
            erases: counters.erases - counters_before.erases,
            commits,
        })
    }
}

/// Record indices in the order a phase touches them: ascending, or a seeded permutation.
fn record_order(record_count: u64, operation: Operation, rng: &mut SeededRng) -> Vec<u64> {
    let mut order: Vec<u64> = (0..record_count).collect();
    if operation.is_random() {
        // Fisher-Yates with the sweep's seeded RNG.
        for last in (1..order.len()).rev() {
            let other = rng.below(last as u64 + 1) as usize;
            order.swap(last, other);
        }
    }
    order
}

/// The (chips, record size) cells the redundancy comparison runs, on MLC, in each mode.
const REDUNDANCY_CELLS: [(u32, u64); 4] = [(2, 64 * KIB), (4, 64 * KIB), (4, MIB), (8, MIB)];

/// One mode of redundancy on one cell, beside the same cell without redundancy.
#[derive(Clone, Debug, serde::Serialize)]
pub struct RedundancyRow {
    pub mode: &'static str,
    pub chips: u32,
    pub profile: &'static str,
    pub record_bytes: u64,
    /// Bytes statfs reports for a fresh volume, and the share of the same array without
    /// redundancy.
    pub capacity_bytes: u64,
    pub capacity_ratio: f64,
    /// Sequential synced writes and cold sequential reads (simulated device time), and their
    /// share of the figures without redundancy.
    pub write_mib_per_s: f64,
    pub write_ratio: f64,
    pub read_mib_per_s: f64,
    pub read_ratio: f64,
    /// Page programs of the write phase, and their share of those without redundancy.
    pub write_programs: u64,
    pub write_programs_ratio: f64,
}

/// Runs `REDUNDANCY_CELLS` without redundancy, with mirror-meta and with parity (`progress`
/// after each).
pub fn run_redundancy(sweep: &SweepConfig, progress: &mut dyn FnMut(&str)) -> Result<Vec<RedundancyRow>, String> {
    use fsoc_core::segment::Redundancy;
    let profile = Profile::Mlc;
    let mut rows = Vec::new();
    for &(chips, record_bytes) in &REDUNDANCY_CELLS {
        let mut measured = Vec::new();
        for mode in [Redundancy::None, Redundancy::MirrorMeta, Redundancy::Parity] {
            let mut modal = sweep.clone();
            modal.fs.volume.redundancy = mode;
            let config = device_config(&modal, profile, chips, record_bytes);
            let flash = SimFlash::create(config).map_err(|error| format!("simulator: {error}"))?;
            let mut fs = FileSystem::format(flash, modal.fs, modal.seed).map_err(fs_error("format"))?;
            let statfs = fs.statfs().map_err(fs_error("statfs"))?;
            let capacity = statfs.total_blocks * u64::from(statfs.block_size_bytes);
            let cell = Cell { sweep: &modal, profile, chips, record_bytes };
            let cell_rows = cell.run(&mut Vec::new())?;
            let figure = |op: Operation| cell_rows.iter().find(|row| row.op == op.name()).cloned();
            let (Some(write), Some(read)) = (figure(Operation::Write), figure(Operation::Read)) else {
                return Err(String::from("a redundancy cell lacks its write or read row"));
            };
            measured.push((mode, capacity, write, read));
            progress(&format!("{} ×{chips} {} {}", profile.name(), size_label(record_bytes), mode.name()));
        }
        let Some((_, base_capacity, base_write, base_read)) = measured.first().cloned() else {
            continue;
        };
        for (mode, capacity, write, read) in measured {
            rows.push(RedundancyRow {
                mode: mode.name(),
                chips,
                profile: profile.name(),
                record_bytes,
                capacity_bytes: capacity,
                capacity_ratio: capacity as f64 / base_capacity.max(1) as f64,
                write_mib_per_s: write.mib_per_s,
                write_ratio: write.mib_per_s / base_write.mib_per_s,
                read_mib_per_s: read.mib_per_s,
                read_ratio: read.mib_per_s / base_read.mib_per_s,
                write_programs: write.programs,
                write_programs_ratio: write.programs as f64 / base_write.programs.max(1) as f64,
            });
        }
    }
    Ok(rows)
}

/// Runs the sweep; `progress` is called after each cell with a label.
pub fn run_sweep(sweep: &SweepConfig, progress: &mut dyn FnMut(&str)) -> Result<(Vec<Row>, Vec<MountRow>), String> {
    let mut rows = Vec::new();
    let mut mounts = Vec::new();
    for &profile in &sweep.profiles {
        for &chips in &sweep.chip_counts {
            let mut mount_reads = Vec::new();
            for &record_bytes in &sweep.record_sizes_bytes {
                let cell = Cell { sweep, profile, chips, record_bytes };
                rows.extend(cell.run(&mut mount_reads)?);
                progress(&format!("{} ×{chips} {}", profile.name(), size_label(record_bytes)));
            }
            mounts.push(MountRow {
                chips,
                profile: profile.name(),
                mount_page_reads_min: mount_reads.iter().copied().min().unwrap_or(0),
                mount_page_reads_max: mount_reads.iter().copied().max().unwrap_or(0),
                mounts: mount_reads.len() as u64,
            });
        }
    }
    Ok((rows, mounts))
}

fn find<'r>(rows: &'r [Row], profile: &str, chips: u32, op: &str, record_bytes: u64) -> Option<&'r Row> {
    rows.iter()
        .find(|row| row.profile == profile && row.chips == chips && row.op == op && row.record_bytes == record_bytes)
}

/// Evaluates the issue's targets against the measured rows.
pub fn check_targets(sweep: &SweepConfig, rows: &[Row], mounts: &[MountRow]) -> Vec<TargetCheck> {
    let mut checks = Vec::new();
    // Sequential write and read at records >= 1 MiB: efficiency >= 0.90.
    for op in ["write", "read"] {
        let candidates: Vec<&Row> = rows.iter().filter(|row| row.op == op && row.record_bytes >= MIB).collect();
        if let Some(worst) = candidates.iter().min_by(|a, b| a.efficiency.total_cmp(&b.efficiency)) {
            let failing: Vec<String> = candidates
                .iter()
                .filter(|row| row.efficiency < 0.90)
                .map(|row| {
                    format!("{} ×{} {}: {:.4}", row.profile, row.chips, size_label(row.record_bytes), row.efficiency)
                })
                .collect();
            let erase_bounds: Vec<String> = sweep
                .profiles
                .iter()
                .map(|&profile| {
                    let config = SimConfig::new(profile, 1, 64, 0);
                    let operation = if op == "write" { Operation::Write } else { Operation::Read };
                    let bound = limit_with_erases_mib_per_s(&config, operation) / raw_mib_per_s(&config, operation);
                    format!("{} {bound:.3}", profile.name())
                })
                .collect();
            checks.push(TargetCheck {
                target: format!(
                    "sequential {op}, records >= 1 MiB: efficiency >= 0.90 for every p and profile \
                     (ceiling with erases paid: {})",
                    erase_bounds.join(", ")
                ),
                measured: format!(
                    "worst {:.4} ({} ×{} {}); below 0.90: {}",
                    worst.efficiency,
                    worst.profile,
                    worst.chips,
                    size_label(worst.record_bytes),
                    if failing.is_empty() { "none".to_string() } else { failing.join(", ") }
                ),
                met: failing.is_empty(),
            });
        }
    }
    // Scaling at 16 MiB records: 4 chips >= 3.6x and 8 chips >= 7x one chip.
    let largest = sweep.record_sizes_bytes.iter().copied().max().unwrap_or(0);
    for &profile in &sweep.profiles {
        for op in ["write", "read"] {
            let base = find(rows, profile.name(), 1, op, largest);
            for (chips, factor) in [(4u32, 3.6f64), (8, 7.0)] {
                if let (Some(base), Some(row)) = (base, find(rows, profile.name(), chips, op, largest)) {
                    let ratio = row.mib_per_s / base.mib_per_s;
                    checks.push(TargetCheck {
                        target: format!(
                            "{} {op} {}: {chips} chips >= {factor}x one chip",
                            profile.name(),
                            size_label(largest)
                        ),
                        measured: format!("{ratio:.2}x ({:.1} vs {:.1} MiB/s)", row.mib_per_s, base.mib_per_s),
                        met: ratio >= factor,
                    });
                }
            }
        }
    }
    // 4 KiB synced writes do not get slower as p grows.
    for &profile in &sweep.profiles {
        for op in ["write", "rewrite", "random_write"] {
            let series: Vec<&Row> =
                sweep.chip_counts.iter().filter_map(|&chips| find(rows, profile.name(), chips, op, 4 * KIB)).collect();
            if series.len() < 2 {
                continue;
            }
            let monotone = series.windows(2).all(|pair| pair[1].mib_per_s >= pair[0].mib_per_s * 0.999);
            let figures: Vec<String> =
                series.iter().map(|row| format!("×{} {:.2}", row.chips, row.mib_per_s)).collect();
            checks.push(TargetCheck {
                target: format!("{} 4 KiB synced {op}: not slower as p grows", profile.name()),
                measured: format!("{} MiB/s", figures.join(", ")),
                met: monotone,
            });
        }
    }
    // Mount page reads grow by at most a small constant per added chip.
    for &profile in &sweep.profiles {
        let series: Vec<&MountRow> = mounts.iter().filter(|row| row.profile == profile.name()).collect();
        if let (Some(first), Some(last)) = (series.first(), series.last()) {
            let added_chips = last.chips.saturating_sub(first.chips).max(1);
            let growth = last.mount_page_reads_max as f64 - first.mount_page_reads_max as f64;
            let per_chip = growth / f64::from(added_chips);
            let figures: Vec<String> =
                series.iter().map(|row| format!("×{} {}", row.chips, row.mount_page_reads_max)).collect();
            checks.push(TargetCheck {
                target: format!(
                    "{} mount page reads: at most a small constant (<= 2) more per added chip",
                    profile.name()
                ),
                measured: format!("max reads {} ({per_chip:.2} per added chip)", figures.join(", ")),
                met: per_chip <= 2.0,
            });
        }
    }
    checks
}

pub fn size_label(bytes: u64) -> String {
    // Whole MiB or KiB: the low 20 or 10 bits are zero.
    if bytes >= MIB && bytes.trailing_zeros() >= 20 {
        format!("{} MiB", bytes / MIB)
    } else if bytes >= KIB && bytes.trailing_zeros() >= 10 {
        format!("{} KiB", bytes / KIB)
    } else {
        format!("{bytes} B")
    }
}

/// What a caller of the sweep chooses (`fsoc bench scaling`'s flags, `fsoc report`'s run).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ScalingOptions {
    /// The reduced sweep (`SweepConfig::quick`) instead of the full one.
    pub quick: bool,
    pub seed: u64,
    /// False turns the core's paired-page guard off (to measure what it costs small synced
    /// writes on wide arrays).
    pub paired_page_guard: bool,
}

impl ScalingOptions {
    /// The sweep these options run: quick or full, with the paired-page guard on or off.
    pub fn sweep(&self) -> SweepConfig {
        let mut sweep = if self.quick { SweepConfig::quick(self.seed) } else { SweepConfig::full(self.seed) };
        if !self.paired_page_guard {
            sweep.fs.volume.paired_page_distance = Some(0);
        }
        sweep
    }
}

/// Runs the sweep `options` choose and checks the targets (`progress` is called after each
/// cell with its label, `SweepConfig::cell_count` times).
pub fn run(options: &ScalingOptions, progress: &mut dyn FnMut(&str)) -> Result<Report, String> {
    let started = Instant::now();
    let sweep = options.sweep();
    let (rows, mount) = run_sweep(&sweep, progress)?;
    let targets = check_targets(&sweep, &rows, &mount);
    let redundancy = run_redundancy(&sweep, progress)?;
    Ok(Report {
        benchmark: "scaling",
        seed: sweep.seed,
        quick: options.quick,
        paired_page_guard: sweep.fs.volume.paired_page_distance != Some(0),
        time_base: "simulated device time (file-system virtual clock)",
        file_bytes_min: sweep.file_bytes_min,
        device_bytes_min: sweep.device_bytes_min,
        rows,
        mount,
        redundancy,
        targets,
        wall_seconds: started.elapsed().as_secs_f64(),
        sweep,
    })
}

impl Report {
    /// The report as `fsoc bench scaling` writes it: pretty JSON, fields in declaration order,
    /// ending in a newline.
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("a scaling report has only numbers, strings and lists") + "\n"
    }

    /// The report as a JSON value (for a caller that embeds or reads it).
    pub fn to_value(&self) -> serde_json::Value {
        serde_json::to_value(self).expect("a scaling report has only numbers, strings and lists")
    }

    /// The chart of the rows (`render_svg`).
    pub fn svg(&self) -> String {
        render_svg(&self.sweep, &self.rows)
    }

    /// The row of one figure, if the sweep measured it.
    pub fn row(&self, profile: &str, chips: u32, op: &str, record_bytes: u64) -> Option<&Row> {
        find(&self.rows, profile, chips, op, record_bytes)
    }
}

// ---- chart -------------------------------------------------------------------------------

const PANEL_WIDTH: f64 = 300.0;
const PANEL_HEIGHT: f64 = 200.0;
const MARGIN_LEFT: f64 = 60.0;
const MARGIN_TOP: f64 = 60.0;
const GAP_X: f64 = 70.0;
const GAP_Y: f64 = 60.0;
const CHIP_COLORS: [&str; 4] = ["#1b9e77", "#d95f02", "#7570b3", "#e7298a"];

/// One panel per (operation, profile): MiB/s (log scale) against record size (log scale),
/// one line per chip count, with each chip count's physical limit dashed.
pub fn render_svg(sweep: &SweepConfig, rows: &[Row]) -> String {
    let columns = sweep.profiles.len().max(1);
    let panel_rows = Operation::ALL.len();
    let width = MARGIN_LEFT + columns as f64 * (PANEL_WIDTH + GAP_X) + 40.0;
    let height = MARGIN_TOP + panel_rows as f64 * (PANEL_HEIGHT + GAP_Y) + 40.0;
    let mut svg = String::new();
    svg_chart::begin(&mut svg, width, height);
    let _ = writeln!(
        svg,
        r#"<text x="{MARGIN_LEFT}" y="22" font-size="15">fsoc scaling sweep: synced record I/O on p chips (simulated time); dashed = physical limit</text>"#
    );
    for (index, &chips) in sweep.chip_counts.iter().enumerate() {
        let x = MARGIN_LEFT + index as f64 * 90.0;
        let color = CHIP_COLORS[index % CHIP_COLORS.len()];
        let _ = writeln!(
            svg,
            r#"<line x1="{x}" y1="38" x2="{}" y2="38" stroke="{color}" stroke-width="2"/><text x="{}" y="42">{chips} chip{}</text>"#,
            x + 20.0,
            x + 25.0,
            if chips == 1 { "" } else { "s" }
        );
    }
    let (record_min, record_max) = (
        sweep.record_sizes_bytes.iter().copied().min().unwrap_or(KIB) as f64,
        sweep.record_sizes_bytes.iter().copied().max().unwrap_or(MIB) as f64,
    );
    for (row_index, operation) in Operation::ALL.iter().enumerate() {
        for (column, &profile) in sweep.profiles.iter().enumerate() {
            let left = MARGIN_LEFT + column as f64 * (PANEL_WIDTH + GAP_X);
            let top = MARGIN_TOP + row_index as f64 * (PANEL_HEIGHT + GAP_Y);
            let panel: Vec<&Row> =
                rows.iter().filter(|row| row.op == operation.name() && row.profile == profile.name()).collect();
            let value_max = panel.iter().map(|row| row.raw_mib_per_s.max(row.mib_per_s)).fold(1.0f64, f64::max);
            let value_min = panel.iter().map(|row| row.mib_per_s).fold(value_max, f64::min).max(0.01);
            let scale = LogScale::new(value_min, value_max * 1.2, top, PANEL_HEIGHT);
            let x_of = |record: f64| {
                if record_max > record_min {
                    left + (record / record_min).log2() / (record_max / record_min).log2() * PANEL_WIDTH
                } else {
                    left + PANEL_WIDTH / 2.0
                }
            };
            svg_chart::frame(&mut svg, left, top, PANEL_WIDTH, PANEL_HEIGHT);
            let _ = writeln!(
                svg,
                r#"<text x="{left}" y="{}" font-size="12">{} — {}</text>"#,
                top - 6.0,
                profile.name(),
                operation.name()
            );
            // Decade grid lines on the value axis.
            scale.grid(&mut svg, left, PANEL_WIDTH);
            // Every record size gets a tick; labels skip every other one when they would crowd.
            let label_step = if sweep.record_sizes_bytes.len() > 7 { 2 } else { 1 };
            for (index, &record) in sweep.record_sizes_bytes.iter().enumerate() {
                let x = x_of(record as f64);
                let _ = writeln!(
                    svg,
                    r##"<line x1="{x:.1}" y1="{}" x2="{x:.1}" y2="{}" stroke="#888"/>"##,
                    top + PANEL_HEIGHT,
                    top + PANEL_HEIGHT + 4.0
                );
                if index % label_step == 0 {
                    let label = size_label(record).replace(' ', "");
                    let _ = writeln!(
                        svg,
                        r#"<text x="{x:.1}" y="{}" text-anchor="middle" font-size="9">{label}</text>"#,
                        top + PANEL_HEIGHT + 14.0
                    );
                }
            }
            let _ = writeln!(
                svg,
                r##"<text x="{}" y="{}" text-anchor="middle" font-size="9" fill="#555">record size</text><text x="{}" y="{}" text-anchor="end" font-size="9" fill="#555">MiB/s</text>"##,
                left + PANEL_WIDTH / 2.0,
                top + PANEL_HEIGHT + 27.0,
                left + PANEL_WIDTH,
                top - 6.0
            );
            for (chip_index, &chips) in sweep.chip_counts.iter().enumerate() {
                let color = CHIP_COLORS[chip_index % CHIP_COLORS.len()];
                let series: Vec<&&Row> = panel.iter().filter(|row| row.chips == chips).collect();
                if let Some(first) = series.first() {
                    let y = scale.y(first.raw_mib_per_s);
                    let _ = writeln!(
                        svg,
                        r#"<line x1="{left}" y1="{y:.1}" x2="{}" y2="{y:.1}" stroke="{color}" stroke-dasharray="4 3"/>"#,
                        left + PANEL_WIDTH
                    );
                }
                let points: Vec<(f64, f64)> =
                    series.iter().map(|row| (x_of(row.record_bytes as f64), scale.y(row.mib_per_s))).collect();
                svg_chart::series(&mut svg, &points, color, 2.5);
            }
        }
    }
    svg_chart::end(&mut svg);
    svg
}

#[cfg(test)]
mod tests {
    use super::*;

    // Checks the physical limit formula on MLC: 2 KiB per (600 us + 2112 B x 25 ns) per chip.
    #[test]
    fn raw_limit_counts_bus_transfer_of_data_and_spare() {
        let config = SimConfig::new(Profile::Mlc, 4, 64, 1);
        let expected = 4.0 * 2048.0 / 652.8e-6 / MIB as f64;
        assert!((raw_mib_per_s(&config, Operation::Write) - expected).abs() < 1e-9);
        let expected_read = 4.0 * 2048.0 / 77.8e-6 / MIB as f64;
        assert!((raw_mib_per_s(&config, Operation::Read) - expected_read).abs() < 1e-9);
    }

    // The redundancy comparison on small files: parity keeps (p-1)/p of the capacity, and
    // every figure is measured with its data verified. Prints the rows (`--nocapture`).
    #[test]
    fn parity_costs_are_measured_beside_no_redundancy() {
        let sweep = SweepConfig { file_bytes_min: 2 * MIB, device_bytes_min: 32 * MIB, ..SweepConfig::quick(5) };
        let rows = run_redundancy(&sweep, &mut |_| {}).expect("redundancy cells");
        assert_eq!(rows.len(), REDUNDANCY_CELLS.len() * 3);
        for row in &rows {
            println!("{row:?}");
            // Mirror-meta takes its second copies from the same pages files use: statfs offers
            // the same capacity, and the copies show as pages in use.
            let expected = if row.mode == "parity" { f64::from(row.chips - 1) / f64::from(row.chips) } else { 1.0 };
            assert!((row.capacity_ratio - expected).abs() < 0.03, "{row:?}");
            assert!(row.write_mib_per_s > 0.0 && row.read_mib_per_s > 0.0, "{row:?}");
            if row.mode == "mirror-meta" {
                // Large sequential files: a few more programs (their extent-tree nodes), no more.
                assert!(row.write_programs_ratio >= 1.0 && row.write_programs_ratio < 1.1, "{row:?}");
            }
        }
    }

    // Runs one tiny cell end to end: five rows, data verified, efficiency within (0, 1].
    #[test]
    fn one_cell_measures_every_phase() {
        let sweep = SweepConfig {
            profiles: vec![Profile::Slc],
            chip_counts: vec![2],
            record_sizes_bytes: vec![64 * KIB],
            file_bytes_min: 512 * KIB,
            device_bytes_min: 8 * MIB,
            seed: 3,
            fs: FsConfig::default(),
        };
        let (rows, mounts) = run_sweep(&sweep, &mut |_| {}).expect("sweep");
        assert_eq!(rows.len(), 5);
        for row in &rows {
            assert!(row.efficiency > 0.0 && row.efficiency <= 1.0, "{row:?}");
        }
        assert_eq!(mounts.len(), 1);
        assert_eq!(mounts[0].mounts, 6);
        let svg = render_svg(&sweep, &rows);
        assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
    }
}
