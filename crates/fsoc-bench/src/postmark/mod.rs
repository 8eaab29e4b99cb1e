//! PostMark as seed 004 ran it (issue 10, point 4): 10 subdirectories, 1,000 files of 512 B to
//! 16 KiB, 10,000 transactions, reads and writes in 512-byte units, unbuffered (no application
//! cache), on fsoc's engine directly (`FileSystem` over `SimFlash`, simulated time) with and
//! without an NVRAM commit tier, and littlefs on the same simulated chip as the peer.
//!
//! **Workload.** PostMark 1.5's algorithm, re-implemented over `SeededRng` (the one generator of
//! the workspace): a table of 2 × `files` slots; the create phase makes `files` files; each
//! transaction reads or appends to a random live file (`bias_read` in 10 chooses the read) and
//! then creates a file or deletes a random live one (`bias_create` in 10 chooses the create);
//! the delete phase removes every file left. A new file goes into a random subdirectory
//! `/sN` and its size is drawn from `size_min_bytes..size_max_bytes`; an append adds
//! 1..=(size_max − size) bytes to a file below `size_max`. Data is written in
//! `write_block_bytes` units and a remainder, read in `read_block_bytes` units and a remainder.
//! The operations depend only on the seed, never on a target's answers: they are generated once
//! (`Workload::generate`) and replayed on every target, so all runs do the same operations.
//!
//! **Variants.** `Async`: no transaction point but those the engine makes on its own, and one
//! at the end. `Sync`: every metadata-changing operation (create, append, delete) ends in a
//! transaction point — fsync of the written file before close, `transact` after an unlink — as
//! seed 004's Sync-PostMark makes every write synchronous. littlefs commits at every close and
//! remove on its own, so it runs the sync variant only (that is its only mode).
//!
//! **Measurement.** Counters (flash, NVRAM and the file system's commit counts) start after
//! setup (format, subdirectories, one commit, device idle); elapsed time is the device clock at the end (after the final transaction point, with
//! every issued operation complete: flash and NVRAM) minus the clock at the start. Unmount is
//! measured apart (`unmount_*`), as PostMark's time ends before it. Erase-count mean and
//! standard deviation are over every block of the device, of the erases made during the run.
//! Energy: the simulator's flash energy model plus the NVRAM part's (`DeviceTotals`).
//!
//! **Device.** One MLC chip of 4,096 blocks (512 MiB, 2 KiB pages, 64 pages per block), the
//! chip the littlefs harness needs (`littlefs::BLOCK_COUNT`: littlefs gives each file above its
//! inline limit its own 128 KiB block, so the ~1,000 live files need ~1,000 blocks). Seed 004
//! used a 32 MB partition; with 16 times the room fsoc's cleaner barely runs, so its erase
//! counts are mostly the log's own segment openings.

pub mod chart;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::time::Instant;

use fsoc_core::fs::FsStats;
use fsoc_core::{FileHandle, FileSystem, FsConfig, FsError, OpenFlags};
use fsoc_media::rng::SeededRng;
use fsoc_media::{
    BlockAddress, DeviceTotals, Flash, FlashStats, Nanos, Nvram, NvramConfig, NvramCounters, NvramTechnology,
    SharedNvram, SimFlash,
};
use serde_json::{json, Value};

use crate::littlefs::{LittlefsConfig, LittlefsTarget};
use crate::target::{BenchDevice, BenchError, BenchTarget};

const KIB: u64 = 1024;
/// Mode of the files and directories the benchmark creates.
const FILE_MODE: u32 = 0o644;
const DIRECTORY_MODE: u32 = 0o755;

/// Seed 004's NVRAM sizes (1 KiB to 128 KiB, doubling) plus 1 MiB; 0 is the run without NVRAM.
pub const FULL_NVRAM_SIZES_BYTES: [u64; 10] =
    [0, KIB, 2 * KIB, 4 * KIB, 8 * KIB, 16 * KIB, 32 * KIB, 64 * KIB, 128 * KIB, 1024 * KIB];
/// The quick run's sizes.
pub const QUICK_NVRAM_SIZES_BYTES: [u64; 4] = [0, KIB, 16 * KIB, 128 * KIB];

/// Seed 004's figures (VFAT/NVFAT on a 32 MB NAND partition behind a log-block FTL, PXA255).
pub const SEED_SYNC_NO_NVRAM_S: f64 = 14_883.0;
pub const SEED_SYNC_128K_S: f64 = 1_096.0;
pub const SEED_ENERGY_NO_NVRAM_J: f64 = 114.2;
pub const SEED_ENERGY_128K_J: f64 = 7.9;

/// Issue 10's targets for Sync-PostMark with 128 KiB of NVRAM.
pub const TARGET_SPEEDUP_MIN: f64 = 15.0;
pub const TARGET_OF_ASYNC_MAX: f64 = 1.5;
pub const TARGET_ERASE_REDUCTION_MIN: f64 = 10.0;
pub const TARGET_ENERGY_REDUCTION_MIN: f64 = 10.0;

/// Whether metadata changes end in a transaction point.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Variant {
    /// Transaction points only where the engine makes them and once at the end.
    Async,
    /// A transaction point after every create, append and delete.
    Sync,
}

impl Variant {
    pub fn name(self) -> &'static str {
        match self {
            Variant::Async => "async",
            Variant::Sync => "sync",
        }
    }
}

/// The benchmark's parameters (PostMark's `set` commands plus the device and the NVRAM sizes).
#[derive(Clone, Debug, PartialEq)]
pub struct PostmarkConfig {
    pub subdirectories: u32,
    pub files: u32,
    pub size_min_bytes: u32,
    pub size_max_bytes: u32,
    pub transactions: u32,
    pub read_block_bytes: u32,
    pub write_block_bytes: u32,
    /// Chance in 10 that a transaction reads rather than appends (PostMark's default 5).
    pub bias_read: u32,
    /// Chance in 10 that a transaction creates rather than deletes (PostMark's default 5).
    pub bias_create: u32,
    /// NVRAM sizes of the fsoc runs, each run sync and async; 0 = no NVRAM.
    pub nvram_sizes_bytes: Vec<u64>,
    pub nvram_technology: NvramTechnology,
    pub device: BenchDevice,
    pub fsoc: FsConfig,
    /// The littlefs peer (sync variant); `None` skips it.
    pub littlefs: Option<LittlefsConfig>,
    /// Runs at once (each run is independent and deterministic; 0 = the machine's cores).
    pub threads: usize,
}

impl PostmarkConfig {
    /// Seed 004's configuration: 10 subdirectories, 1,000 files of 512 B–16 KiB, 10,000
    /// transactions, 512-byte units; NVRAM 0, 1 KiB … 128 KiB and 1 MiB of FeRAM.
    pub fn full(seed: u64) -> PostmarkConfig {
        PostmarkConfig {
            subdirectories: 10,
            files: 1000,
            size_min_bytes: 512,
            size_max_bytes: 16 * 1024,
            transactions: 10_000,
            read_block_bytes: 512,
            write_block_bytes: 512,
            bias_read: 5,
            bias_create: 5,
            nvram_sizes_bytes: FULL_NVRAM_SIZES_BYTES.to_vec(),
            nvram_technology: NvramTechnology::FeRam,
            device: BenchDevice::littlefs_mlc_chip(seed),
            fsoc: FsConfig::default(),
            littlefs: Some(LittlefsConfig::BENCHMARK),
            threads: 0,
        }
    }

    /// A run of seconds: 100 files, 1,000 transactions, NVRAM 0, 1, 16 and 128 KiB.
    pub fn quick(seed: u64) -> PostmarkConfig {
        PostmarkConfig {
            files: 100,
            transactions: 1000,
            nvram_sizes_bytes: QUICK_NVRAM_SIZES_BYTES.to_vec(),
            ..PostmarkConfig::full(seed)
        }
    }

    pub fn seed(&self) -> u64 {
        self.device.seed
    }

    fn validate(&self) -> Result<(), BenchError> {
        let invalid = |reason: String| Err(BenchError::InvalidConfig { reason });
        if self.files == 0 || self.subdirectories == 0 {
            return invalid(format!("{} files in {} subdirectories", self.files, self.subdirectories));
        }
        if self.size_min_bytes == 0 || self.size_max_bytes < self.size_min_bytes {
            return invalid(format!("file sizes {}..{}", self.size_min_bytes, self.size_max_bytes));
        }
        if self.read_block_bytes == 0 || self.write_block_bytes == 0 {
            return invalid("read and write units must not be 0".into());
        }
        if self.bias_read > 10 || self.bias_create > 10 {
            return invalid(format!("biases {} and {} (of 10)", self.bias_read, self.bias_create));
        }
        Ok(())
    }

    pub fn workload_json(&self) -> Value {
        json!({
            "benchmark": "PostMark 1.5 (seed 004), re-implemented on SeededRng",
            "subdirectories": self.subdirectories,
            "files": self.files,
            "size_min_bytes": self.size_min_bytes,
            "size_max_bytes": self.size_max_bytes,
            "transactions": self.transactions,
            "read_block_bytes": self.read_block_bytes,
            "write_block_bytes": self.write_block_bytes,
            "bias_read": self.bias_read,
            "bias_create": self.bias_create,
            "buffering": "none: every read and write unit is one call into the file system",
            "variants": {
                "async": "no transaction point but the engine's own and one at the end",
                "sync": "fsync before close after every create and append, transact after every unlink",
            },
            "elapsed": "device clock after the final transaction point (flash and NVRAM idle) minus \
                        the clock after setup; unmount measured apart",
        })
    }
}

/// One file-system call of the workload.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Operation {
    /// Creates `path` and writes `size_bytes` of the source in units.
    Create {
        path: String,
        size_bytes: u32,
    },
    /// Reads `path` (of `size_bytes`) in units to its end.
    Read {
        path: String,
        size_bytes: u32,
    },
    /// Appends `size_bytes` of the source to `path`.
    Append {
        path: String,
        size_bytes: u32,
    },
    Delete {
        path: String,
    },
}

impl Operation {
    fn changes_metadata(&self) -> bool {
        !matches!(self, Operation::Read { .. })
    }
}

/// The three phases PostMark times.
pub const PHASES: [&str; 3] = ["create", "transactions", "delete"];

/// The whole run's operations, generated once from the seed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Workload {
    /// PostMark's buffer of random bytes every write takes its data from (2 × size_max).
    pub source: Vec<u8>,
    /// Operations of each phase of `PHASES`.
    pub phases: [Vec<Operation>; 3],
    pub counts: WorkloadCounts,
}

/// What the workload does, as PostMark's report counts it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WorkloadCounts {
    pub created: u64,
    pub read: u64,
    pub appended: u64,
    pub deleted: u64,
    pub bytes_written: u64,
    pub bytes_read: u64,
    /// Transactions run (fewer than asked only if the files ran out, as PostMark stops then).
    pub transactions: u64,
}

impl Workload {
    pub fn generate(config: &PostmarkConfig) -> Workload {
        let mut rng = SeededRng::new(config.seed() ^ 0x706f_7374_6d61_726b); // "postmark"
        let source = rng.bytes(2 * config.size_max_bytes as usize);
        let slot_count = 2 * config.files as usize;
        // Each slot: the file's name and size, or None when free.
        let mut slots: Vec<Option<(String, u32)>> = vec![None; slot_count];
        let mut cursor = 0usize;
        let mut counts = WorkloadCounts::default();
        let mut phases: [Vec<Operation>; 3] = Default::default();
        let size_span = u64::from(config.size_max_bytes - config.size_min_bytes);

        let create = |rng: &mut SeededRng,
                      slots: &mut Vec<Option<(String, u32)>>,
                      cursor: &mut usize,
                      counts: &mut WorkloadCounts,
                      out: &mut Vec<Operation>| {
            // The next slot if free, else the first free one (PostMark's find_free_file).
            let slot = if *cursor < slot_count && slots[*cursor].is_none() {
                Some(*cursor)
            } else {
                slots.iter().position(Option::is_none)
            };
            let Some(slot) = slot else { return };
            *cursor = slot + 1;
            counts.created += 1;
            let directory = rng.below(u64::from(config.subdirectories));
            let path = format!("/s{directory}/{}", counts.created);
            let size_bytes = config.size_min_bytes + rng.below(size_span) as u32;
            counts.bytes_written += u64::from(size_bytes);
            slots[slot] = Some((path.clone(), size_bytes));
            out.push(Operation::Create { path, size_bytes });
        };
        // A random live slot (PostMark's find_used_file); only called while one exists.
        let used = |rng: &mut SeededRng, slots: &[Option<(String, u32)>]| loop {
            let slot = rng.below(slot_count as u64) as usize;
            if slots[slot].is_some() {
                break slot;
            }
        };

        for _ in 0..config.files {
            create(&mut rng, &mut slots, &mut cursor, &mut counts, &mut phases[0]);
        }
        let mut transactions = Vec::new();
        for _ in 0..config.transactions {
            if counts.created == counts.deleted {
                break; // out of files, as PostMark stops
            }
            counts.transactions += 1;
            let slot = used(&mut rng, &slots);
            if rng.below(10) < u64::from(config.bias_read) {
                if let Some((path, size_bytes)) = &slots[slot] {
                    counts.read += 1;
                    counts.bytes_read += u64::from(*size_bytes);
                    transactions.push(Operation::Read { path: path.clone(), size_bytes: *size_bytes });
                }
            } else if let Some((path, size_bytes)) = &mut slots[slot] {
                if *size_bytes < config.size_max_bytes {
                    let block = rng.below(u64::from(config.size_max_bytes - *size_bytes)) as u32 + 1;
                    *size_bytes += block;
                    counts.appended += 1;
                    counts.bytes_written += u64::from(block);
                    transactions.push(Operation::Append { path: path.clone(), size_bytes: block });
                }
            }
            if rng.below(10) < u64::from(config.bias_create) {
                create(&mut rng, &mut slots, &mut cursor, &mut counts, &mut transactions);
            } else {
                let slot = used(&mut rng, &slots);
                if let Some((path, _)) = slots[slot].take() {
                    counts.deleted += 1;
                    transactions.push(Operation::Delete { path });
                }
            }
        }
        phases[1] = transactions;
        for slot in &mut slots {
            if let Some((path, _)) = slot.take() {
                counts.deleted += 1;
                phases[2].push(Operation::Delete { path });
            }
        }
        Workload { source, phases, counts }
    }

    pub fn operation_count(&self) -> usize {
        self.phases.iter().map(Vec::len).sum()
    }

    /// Operations that change metadata (each a transaction point in the sync variant).
    pub fn metadata_changes(&self) -> u64 {
        self.phases.iter().flatten().filter(|operation| operation.changes_metadata()).count() as u64
    }

    fn counts_json(&self) -> Value {
        let counts = &self.counts;
        json!({
            "created": counts.created,
            "read": counts.read,
            "appended": counts.appended,
            "deleted": counts.deleted,
            "transactions": counts.transactions,
            "bytes_written": counts.bytes_written,
            "bytes_read": counts.bytes_read,
            "operations": self.operation_count(),
            "metadata_changes": self.metadata_changes(),
        })
    }
}

/// The calls the benchmark makes on a file system under test.
trait PostmarkTarget {
    fn create_directory(&mut self, path: &str) -> Result<(), BenchError>;
    /// Creates `path` and writes `data` in `unit`-byte calls; `sync`: durable when this returns.
    fn create(&mut self, path: &str, data: &[u8], unit: usize, sync: bool) -> Result<(), BenchError>;
    fn append(&mut self, path: &str, data: &[u8], unit: usize, sync: bool) -> Result<(), BenchError>;
    /// Reads `path` to its end in `unit`-byte calls; returns the bytes read.
    fn read(&mut self, path: &str, unit: usize) -> Result<u64, BenchError>;
    fn delete(&mut self, path: &str, sync: bool) -> Result<(), BenchError>;
    /// A transaction point.
    fn commit(&mut self) -> Result<(), BenchError>;
    /// Waits for everything issued and returns the device clock.
    fn idle_now_ns(&mut self) -> Nanos;
    fn flash(&mut self) -> &mut SimFlash;
    /// Zeroes the flash's (and NVRAM's) counters.
    fn reset_counters(&mut self);
    fn nvram_counters(&self) -> NvramCounters;
    /// The target's own statistics for the report.
    fn stats_json(&self) -> Value;
}

/// fsoc's engine with or without an NVRAM commit tier.
struct FsocPostmark {
    fs: FileSystem<SimFlash>,
    nvram: Option<SharedNvram>,
    /// The file system's counters when the measurement started (setup's commits excluded).
    stats_at_start: FsStats,
}

fn fsoc_error<'a>(operation: &'static str, path: &'a str) -> impl FnOnce(FsError) -> BenchError + 'a {
    move |source| BenchError::Fsoc { operation, path: path.to_owned(), source }
}

impl FsocPostmark {
    fn format(config: &PostmarkConfig, nvram_bytes: u64) -> Result<FsocPostmark, BenchError> {
        let flash = config.device.create()?;
        let nvram = if nvram_bytes == 0 {
            None
        } else {
            let device = Nvram::in_ram(NvramConfig::new(nvram_bytes, config.nvram_technology, config.seed()))
                .map_err(|error| BenchError::InvalidConfig { reason: format!("NVRAM of {nvram_bytes} B: {error}") })?;
            Some(SharedNvram::new(device))
        };
        let boxed = nvram.clone().map(|shared| Box::new(shared) as Box<dyn fsoc_flash::NvramDevice>);
        let fs = FileSystem::format_with_nvram(flash, boxed, config.fsoc, config.seed(), 0)
            .map_err(fsoc_error("format", ""))?;
        Ok(FsocPostmark { fs, nvram, stats_at_start: FsStats::default() })
    }

    fn write_units(&mut self, fd: FileHandle, path: &str, data: &[u8], unit: usize) -> Result<(), BenchError> {
        for chunk in data.chunks(unit) {
            let written = self.fs.write_fd(fd, chunk).map_err(fsoc_error("write", path))?;
            if written != chunk.len() {
                return Err(BenchError::Setup(format!("fsoc wrote {written} of {} bytes to {path}", chunk.len())));
            }
        }
        Ok(())
    }

    fn write_file(
        &mut self,
        path: &str,
        flags: OpenFlags,
        data: &[u8],
        unit: usize,
        sync: bool,
    ) -> Result<(), BenchError> {
        let fd = self.fs.open(path.as_bytes(), flags, FILE_MODE).map_err(fsoc_error("open", path))?;
        self.write_units(fd, path, data, unit)?;
        if sync {
            self.fs.fsync_fd(fd).map_err(fsoc_error("fsync", path))?;
        }
        self.fs.close(fd).map_err(fsoc_error("close", path))
    }
}

impl PostmarkTarget for FsocPostmark {
    fn create_directory(&mut self, path: &str) -> Result<(), BenchError> {
        self.fs.mkdir(path.as_bytes(), DIRECTORY_MODE).map(|_| ()).map_err(fsoc_error("mkdir", path))
    }

    fn create(&mut self, path: &str, data: &[u8], unit: usize, sync: bool) -> Result<(), BenchError> {
        let flags = OpenFlags { write: true, create: true, exclusive: true, ..OpenFlags::default() };
        self.write_file(path, flags, data, unit, sync)
    }

    fn append(&mut self, path: &str, data: &[u8], unit: usize, sync: bool) -> Result<(), BenchError> {
        let flags = OpenFlags { write: true, append: true, ..OpenFlags::default() };
        self.write_file(path, flags, data, unit, sync)
    }

    fn read(&mut self, path: &str, unit: usize) -> Result<u64, BenchError> {
        let flags = OpenFlags { read: true, ..OpenFlags::default() };
        let fd = self.fs.open(path.as_bytes(), flags, 0).map_err(fsoc_error("open", path))?;
        let mut buffer = vec![0u8; unit];
        let mut offset = 0u64;
        loop {
            let count = self.fs.pread_into(fd, offset, &mut buffer).map_err(fsoc_error("read", path))?;
            if count == 0 {
                break;
            }
            offset += count as u64;
        }
        self.fs.close(fd).map_err(fsoc_error("close", path))?;
        Ok(offset)
    }

    fn delete(&mut self, path: &str, sync: bool) -> Result<(), BenchError> {
        self.fs.unlink(path.as_bytes()).map_err(fsoc_error("unlink", path))?;
        if sync {
            self.fs.transact().map_err(fsoc_error("transact", path))?;
        }
        Ok(())
    }

    fn commit(&mut self) -> Result<(), BenchError> {
        self.fs.transact().map_err(fsoc_error("transact", ""))
    }

    fn idle_now_ns(&mut self) -> Nanos {
        self.fs.wait_for_device();
        let nvram_ns = self.nvram.as_ref().map_or(0, |nvram| nvram.with(|device| device.busy_until_ns()));
        self.fs.device_now_ns().max(self.fs.flash().all_done_ns()).max(nvram_ns)
    }

    fn flash(&mut self) -> &mut SimFlash {
        self.fs.flash_mut()
    }

    fn reset_counters(&mut self) {
        self.stats_at_start = self.fs.stats;
        self.fs.flash_mut().reset_counters();
        if let Some(nvram) = &self.nvram {
            nvram.with(|device| device.reset_counters());
        }
    }

    fn nvram_counters(&self) -> NvramCounters {
        self.nvram.as_ref().map_or_else(NvramCounters::default, |nvram| nvram.with(|device| device.counters()))
    }

    fn stats_json(&self) -> Value {
        let (now, start) = (&self.fs.stats, &self.stats_at_start);
        json!({
            "commits": now.commits - start.commits,
            "delta_commits": now.delta_commits - start.delta_commits,
            "nvram_commits": now.nvram_commits - start.nvram_commits,
            "nvram_destages": now.nvram_destages - start.nvram_destages,
            "cleaner_runs": now.cleaner_runs - start.cleaner_runs,
            "pages_relocated": now.pages_relocated - start.pages_relocated,
        })
    }
}

impl PostmarkTarget for LittlefsTarget {
    fn create_directory(&mut self, path: &str) -> Result<(), BenchError> {
        BenchTarget::create_directory(self, path)
    }

    fn create(&mut self, path: &str, data: &[u8], unit: usize, _sync: bool) -> Result<(), BenchError> {
        // littlefs commits at close whatever the variant.
        self.write_in_units(path, data, unit, false)
    }

    fn append(&mut self, path: &str, data: &[u8], unit: usize, _sync: bool) -> Result<(), BenchError> {
        self.write_in_units(path, data, unit, true)
    }

    fn read(&mut self, path: &str, unit: usize) -> Result<u64, BenchError> {
        self.read_in_units(path, unit)
    }

    fn delete(&mut self, path: &str, _sync: bool) -> Result<(), BenchError> {
        self.delete_file(path, crate::Durability::Commit)
    }

    fn commit(&mut self) -> Result<(), BenchError> {
        BenchTarget::commit(self)
    }

    fn idle_now_ns(&mut self) -> Nanos {
        // The storage waits for every operation it issues.
        self.now_ns()
    }

    fn flash(&mut self) -> &mut SimFlash {
        BenchTarget::flash(self)
    }

    fn reset_counters(&mut self) {
        BenchTarget::flash(self).reset_counters();
    }

    fn nvram_counters(&self) -> NvramCounters {
        NvramCounters::default()
    }

    fn stats_json(&self) -> Value {
        json!({})
    }
}

/// Which run: target, variant, NVRAM size.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RunKey {
    pub target: &'static str,
    pub variant: Variant,
    pub nvram_bytes: u64,
}

/// Erase-count mean and population standard deviation over blocks.
fn erase_spread(flash: &SimFlash) -> (f64, f64) {
    let counters = flash.counters();
    let geometry = flash.geometry();
    let erases: Vec<f64> = (0..flash.chip_count())
        .flat_map(|chip| (0..geometry.block_count).map(move |block| BlockAddress::new(chip, block)))
        .map(|block| counters.block(block).map_or(0.0, |block| block.erases as f64))
        .collect();
    if erases.is_empty() {
        return (0.0, 0.0);
    }
    let mean = erases.iter().sum::<f64>() / erases.len() as f64;
    let variance = erases.iter().map(|erases| (erases - mean).powi(2)).sum::<f64>() / erases.len() as f64;
    (mean, variance.sqrt())
}

/// One run's results.
#[derive(Clone, Debug, PartialEq)]
pub struct RunResult {
    pub key: RunKey,
    pub elapsed_ns: Nanos,
    pub phase_ns: [Nanos; 3],
    pub totals: DeviceTotals,
    pub erase_mean: f64,
    pub erase_std: f64,
    pub stats: Value,
    pub unmount_ns: Nanos,
    pub unmount_programs: u64,
    pub wall_ms: f64,
}

impl RunResult {
    pub fn elapsed_s(&self) -> f64 {
        self.elapsed_ns as f64 / 1e9
    }

    pub fn energy_j(&self) -> f64 {
        self.totals.energy_nj() as f64 / 1e9
    }

    pub fn stat(&self, name: &str) -> u64 {
        self.stats[name].as_u64().unwrap_or(0)
    }

    pub fn to_json(&self) -> Value {
        let flash = &self.totals.flash;
        let nvram = &self.totals.nvram;
        json!({
            "target": self.key.target,
            "variant": self.key.variant.name(),
            "nvram_bytes": self.key.nvram_bytes,
            "elapsed_us": self.elapsed_ns / 1_000,
            "elapsed_s": self.elapsed_s(),
            "phase_us": {
                PHASES[0]: self.phase_ns[0] / 1_000,
                PHASES[1]: self.phase_ns[1] / 1_000,
                PHASES[2]: self.phase_ns[2] / 1_000,
            },
            "flash_reads": flash.reads,
            "flash_programs": flash.programs,
            "flash_erases": flash.erases,
            "flash_busy_us": flash.busy_ns / 1_000,
            "erase_count_mean": self.erase_mean,
            "erase_count_std": self.erase_std,
            "flash_energy_nj": flash.energy_nj,
            "nvram_energy_nj": nvram.energy_nj(),
            "total_energy_nj": self.totals.energy_nj(),
            "total_energy_j": self.energy_j(),
            "nvram_reads": nvram.reads,
            "nvram_writes": nvram.writes,
            "nvram_bytes_read": nvram.bytes_read,
            "nvram_bytes_written": nvram.bytes_written,
            "nvram_busy_us": nvram.busy_ns / 1_000,
            "stats": self.stats,
            "unmount_us": self.unmount_ns / 1_000,
            "unmount_programs": self.unmount_programs,
            "wall_ms": self.wall_ms,
        })
    }
}

/// Runs the workload on a formatted target (setup, measured phases).
fn run_on<T: PostmarkTarget>(
    target: &mut T,
    config: &PostmarkConfig,
    workload: &Workload,
    variant: Variant,
) -> Result<(Nanos, [Nanos; 3]), BenchError> {
    for directory in 0..config.subdirectories {
        target.create_directory(&format!("/s{directory}"))?;
    }
    target.commit()?;
    let start_ns = target.idle_now_ns();
    target.reset_counters();
    let sync = variant == Variant::Sync;
    let (read_unit, write_unit) = (config.read_block_bytes as usize, config.write_block_bytes as usize);
    let mut phase_ns = [0; 3];
    let mut phase_start_ns = start_ns;
    for (index, operations) in workload.phases.iter().enumerate() {
        for operation in operations {
            match operation {
                Operation::Create { path, size_bytes } => {
                    let data = &workload.source[..*size_bytes as usize];
                    target.create(path, data, write_unit, sync)?
                }
                Operation::Append { path, size_bytes } => {
                    let data = &workload.source[..*size_bytes as usize];
                    target.append(path, data, write_unit, sync)?
                }
                Operation::Read { path, size_bytes } => {
                    let read = target.read(path, read_unit)?;
                    if read != u64::from(*size_bytes) {
                        return Err(BenchError::ContentMismatch {
                            target: "postmark",
                            path: path.clone(),
                            expected_bytes: *size_bytes as usize,
                            actual_bytes: read as usize,
                        });
                    }
                }
                Operation::Delete { path } => target.delete(path, sync)?,
            }
        }
        if index == PHASES.len() - 1 {
            // PostMark's time ends when its last file is gone; make that durable.
            target.commit()?;
        }
        let now_ns = target.idle_now_ns();
        phase_ns[index] = now_ns - phase_start_ns;
        phase_start_ns = now_ns;
    }
    Ok((phase_start_ns - start_ns, phase_ns))
}

fn finish<T: PostmarkTarget>(
    target: &mut T,
    key: RunKey,
    elapsed_ns: Nanos,
    phase_ns: [Nanos; 3],
    wall_start: Instant,
) -> RunResult {
    let totals = DeviceTotals::new(target.flash().counters().totals(), target.nvram_counters());
    let (erase_mean, erase_std) = erase_spread(target.flash());
    RunResult {
        key,
        elapsed_ns,
        phase_ns,
        totals,
        erase_mean,
        erase_std,
        stats: target.stats_json(),
        unmount_ns: 0,
        unmount_programs: 0,
        wall_ms: wall_start.elapsed().as_secs_f64() * 1e3,
    }
}

/// One fsoc run.
pub fn run_fsoc(
    config: &PostmarkConfig,
    workload: &Workload,
    variant: Variant,
    nvram_bytes: u64,
) -> Result<RunResult, BenchError> {
    let wall_start = Instant::now();
    let mut target = FsocPostmark::format(config, nvram_bytes)?;
    let (elapsed_ns, phase_ns) = run_on(&mut target, config, workload, variant)?;
    let key = RunKey { target: "fsoc", variant, nvram_bytes };
    let mut result = finish(&mut target, key, elapsed_ns, phase_ns, wall_start);
    let before_ns = target.idle_now_ns();
    let programs_before = target.flash().counters().totals().programs;
    let flash = target.fs.unmount().map_err(fsoc_error("unmount", ""))?;
    let nvram_ns = target.nvram.as_ref().map_or(0, |nvram| nvram.with(|device| device.busy_until_ns()));
    result.unmount_ns = flash.all_done_ns().max(nvram_ns).saturating_sub(before_ns);
    result.unmount_programs = flash.counters().totals().programs - programs_before;
    result.wall_ms = wall_start.elapsed().as_secs_f64() * 1e3;
    Ok(result)
}

/// The littlefs run (sync: littlefs commits at every close and remove).
pub fn run_littlefs(
    config: &PostmarkConfig,
    workload: &Workload,
    settings: &LittlefsConfig,
) -> Result<RunResult, BenchError> {
    let wall_start = Instant::now();
    let mut target = LittlefsTarget::format(config.device.create()?, config.seed(), settings)?;
    let (elapsed_ns, phase_ns) = run_on(&mut target, config, workload, Variant::Sync)?;
    let key = RunKey { target: LittlefsTarget::NAME, variant: Variant::Sync, nvram_bytes: 0 };
    let mut result = finish(&mut target, key, elapsed_ns, phase_ns, wall_start);
    let before_ns = target.now_ns();
    let programs_before = BenchTarget::flash(&mut target).counters().totals().programs;
    let flash = target.unmount()?;
    result.unmount_ns = flash.all_done_ns().saturating_sub(before_ns);
    result.unmount_programs = flash.counters().totals().programs - programs_before;
    result.wall_ms = wall_start.elapsed().as_secs_f64() * 1e3;
    Ok(result)
}

/// Every run of a configuration, in report order: fsoc sync and async for each NVRAM size,
/// then littlefs.
pub fn run_keys(config: &PostmarkConfig) -> Vec<RunKey> {
    let mut keys = Vec::new();
    for &nvram_bytes in &config.nvram_sizes_bytes {
        for variant in [Variant::Sync, Variant::Async] {
            keys.push(RunKey { target: "fsoc", variant, nvram_bytes });
        }
    }
    if config.littlefs.is_some() {
        keys.push(RunKey { target: LittlefsTarget::NAME, variant: Variant::Sync, nvram_bytes: 0 });
    }
    keys
}

fn run_key(config: &PostmarkConfig, workload: &Workload, key: RunKey) -> Result<RunResult, BenchError> {
    match (key.target, &config.littlefs) {
        (LittlefsTarget::NAME, Some(settings)) => run_littlefs(config, workload, settings),
        _ => run_fsoc(config, workload, key.variant, key.nvram_bytes),
    }
}

/// Runs every configuration (`config.threads` at once) and returns the results in
/// `run_keys` order. `progress` gets one line per finished run.
pub fn run_all(
    config: &PostmarkConfig,
    workload: &Workload,
    progress: &mut dyn FnMut(&str),
) -> Result<Vec<RunResult>, BenchError> {
    config.validate()?;
    let keys = run_keys(config);
    let threads = match config.threads {
        0 => std::thread::available_parallelism().map_or(1, |count| count.get()),
        count => count,
    }
    .clamp(1, keys.len().max(1));
    let next = AtomicUsize::new(0);
    let (sender, receiver) = mpsc::channel::<(usize, Result<RunResult, BenchError>)>();
    let mut results: Vec<Option<RunResult>> = vec![None; keys.len()];
    let mut first_error = None;
    std::thread::scope(|scope| {
        for _ in 0..threads {
            let sender = sender.clone();
            let (keys, next) = (&keys, &next);
            scope.spawn(move || loop {
                let index = next.fetch_add(1, Ordering::Relaxed);
                let Some(&key) = keys.get(index) else { break };
                if sender.send((index, run_key(config, workload, key))).is_err() {
                    break;
                }
            });
        }
        drop(sender);
        for (index, result) in receiver {
            match result {
                Ok(result) => {
                    progress(&format!(
                        "{} {} NVRAM {}: {:.1} s simulated, {} programs ({:.1} s wall)",
                        result.key.target,
                        result.key.variant.name(),
                        size_label(result.key.nvram_bytes),
                        result.elapsed_s(),
                        result.totals.flash.programs,
                        result.wall_ms / 1e3,
                    ));
                    results[index] = Some(result);
                }
                Err(error) => {
                    // Stop handing out runs; the running ones finish.
                    next.store(usize::MAX / 2, Ordering::Relaxed);
                    first_error.get_or_insert(error);
                }
            }
        }
    });
    if let Some(error) = first_error {
        return Err(error);
    }
    Ok(results.into_iter().flatten().collect())
}

/// "0", "1 KiB", "1 MiB".
pub fn size_label(bytes: u64) -> String {
    match bytes {
        0 => "none".to_owned(),
        bytes if bytes >= 1024 * KIB && bytes.is_multiple_of(1024 * KIB) => format!("{} MiB", bytes / (1024 * KIB)),
        bytes if bytes.is_multiple_of(KIB) => format!("{} KiB", bytes / KIB),
        bytes => format!("{bytes} B"),
    }
}

fn find<'a>(results: &'a [RunResult], target: &str, variant: Variant, nvram_bytes: u64) -> Option<&'a RunResult> {
    results.iter().find(|result| {
        result.key.target == target && result.key.variant == variant && result.key.nvram_bytes == nvram_bytes
    })
}

fn ratio(numerator: f64, denominator: f64) -> Option<f64> {
    (denominator > 0.0).then(|| numerator / denominator)
}

/// The targets against this run (sync with 128 KiB against sync and async without
/// NVRAM); `null` where a run is missing.
fn targets_json(results: &[RunResult]) -> Value {
    let sync_none = find(results, "fsoc", Variant::Sync, 0);
    let async_none = find(results, "fsoc", Variant::Async, 0);
    let sync_128 = find(results, "fsoc", Variant::Sync, 128 * KIB);
    let (Some(sync_none), Some(async_none), Some(sync_128)) = (sync_none, async_none, sync_128) else {
        return Value::Null;
    };
    let speedup = ratio(sync_none.elapsed_ns as f64, sync_128.elapsed_ns as f64);
    let of_async = ratio(sync_128.elapsed_ns as f64, async_none.elapsed_ns as f64);
    let erases = ratio(sync_none.totals.flash.erases as f64, sync_128.totals.flash.erases as f64);
    let energy = ratio(sync_none.totals.energy_nj() as f64, sync_128.totals.energy_nj() as f64);
    let check = |value: Option<f64>, pass: &dyn Fn(f64) -> bool| value.map(pass);
    json!({
        "sync_speedup_128k": { "value": speedup, "target": format!(">= {TARGET_SPEEDUP_MIN}"),
            "met": check(speedup, &|v| v >= TARGET_SPEEDUP_MIN), "seed_004": SEED_SYNC_NO_NVRAM_S / SEED_SYNC_128K_S },
        "sync_128k_over_async_none": { "value": of_async, "target": format!("<= {TARGET_OF_ASYNC_MAX}"),
            "met": check(of_async, &|v| v <= TARGET_OF_ASYNC_MAX) },
        "sync_erase_reduction_128k": { "value": erases, "target": format!(">= {TARGET_ERASE_REDUCTION_MIN}"),
            "met": check(erases, &|v| v >= TARGET_ERASE_REDUCTION_MIN) },
        "sync_energy_reduction_128k": { "value": energy, "target": format!(">= {TARGET_ENERGY_REDUCTION_MIN}"),
            "met": check(energy, &|v| v >= TARGET_ENERGY_REDUCTION_MIN),
            "seed_004": SEED_ENERGY_NO_NVRAM_J / SEED_ENERGY_128K_J },
        "sync_128k_over_littlefs": find(results, LittlefsTarget::NAME, Variant::Sync, 0)
            .and_then(|littlefs| ratio(sync_128.elapsed_ns as f64, littlefs.elapsed_ns as f64)),
    })
}

/// Runs the benchmark and builds the report:
/// `{"runs": [RunResult::to_json, …], "targets": {…}, "seed_004": {…}, "config": {…},
/// "workload": {counts}, "wall_ms"}`.
pub fn run(config: &PostmarkConfig, progress: &mut dyn FnMut(&str)) -> Result<Value, BenchError> {
    let wall_start = Instant::now();
    let workload = Workload::generate(config);
    let results = run_all(config, &workload, progress)?;
    Ok(report(config, &workload, &results, wall_start.elapsed().as_secs_f64() * 1e3))
}

/// The JSON report of finished runs.
pub fn report(config: &PostmarkConfig, workload: &Workload, results: &[RunResult], wall_ms: f64) -> Value {
    let nvram = NvramConfig::new(KIB, config.nvram_technology, config.seed());
    json!({
        "benchmark": "postmark (seed 004, issue 10 point 4)",
        "runs": results.iter().map(RunResult::to_json).collect::<Vec<_>>(),
        "targets": targets_json(results),
        "seed_004": {
            "sync_no_nvram_s": SEED_SYNC_NO_NVRAM_S,
            "sync_128k_s": SEED_SYNC_128K_S,
            "energy_no_nvram_j": SEED_ENERGY_NO_NVRAM_J,
            "energy_128k_j": SEED_ENERGY_128K_J,
            "setup": "VFAT / NVFAT on a 32 MB NAND partition behind a log-block FTL (64 log blocks), \
                      PXA255 board, Linux 2.6.21; sync = every write O_SYNC",
        },
        "config": {
            "device": config.device.to_json(),
            "workload": config.workload_json(),
            "nvram_sizes_bytes": config.nvram_sizes_bytes,
            "nvram_technology": config.nvram_technology.name(),
            "nvram_part": nvram.technology.timing().part,
            "fsoc": {
                "config": if config.fsoc == FsConfig::default() { "FsConfig::default()" } else { "custom" },
                "nvram_high_water_percent": config.fsoc.nvram_high_water_percent,
                "delta_commits": config.fsoc.delta_commits,
                "inline_note": "files up to the inline limit (about 2 KiB here) live in the allocation \
                                tree, so their data rides in the NVRAM record; larger files' data \
                                pages are programmed as written",
            },
            "littlefs": config.littlefs.as_ref().map(LittlefsTarget::settings_json),
        },
        "workload": workload.counts_json(),
        "wall_ms": wall_ms,
    })
}

/// The README's table: one row per run, simulated seconds, flash operations, wear and energy.
pub fn markdown_table(report: &Value) -> String {
    let mut table = String::from(
        "| run | NVRAM | time (s) | programs | erases | erase mean ± sd | flash J | NVRAM J | total J | \
         NVRAM writes | NVRAM KiB written | NVRAM commits | destages |\n\
         |---|---|---|---|---|---|---|---|---|---|---|---|---|\n",
    );
    for run in report["runs"].as_array().map(Vec::as_slice).unwrap_or_default() {
        let nanojoules = |field: &str| run[field].as_u64().unwrap_or(0) as f64 / 1e9;
        let name = format!("{} {}", run["target"].as_str().unwrap_or("?"), run["variant"].as_str().unwrap_or("?"));
        table += &format!(
            "| {name} | {} | {:.1} | {} | {} | {:.3} ± {:.3} | {:.2} | {:.4} | {:.2} | {} | {:.1} | {} | {} |\n",
            size_label(run["nvram_bytes"].as_u64().unwrap_or(0)),
            run["elapsed_s"].as_f64().unwrap_or(f64::NAN),
            run["flash_programs"],
            run["flash_erases"],
            run["erase_count_mean"].as_f64().unwrap_or(f64::NAN),
            run["erase_count_std"].as_f64().unwrap_or(f64::NAN),
            nanojoules("flash_energy_nj"),
            nanojoules("nvram_energy_nj"),
            nanojoules("total_energy_nj"),
            run["nvram_writes"],
            run["nvram_bytes_written"].as_u64().unwrap_or(0) as f64 / 1024.0,
            run["stats"]["nvram_commits"].as_u64().map_or("–".to_owned(), |count| count.to_string()),
            run["stats"]["nvram_destages"].as_u64().map_or("–".to_owned(), |count| count.to_string()),
        );
    }
    table
}

#[cfg(test)]
mod tests {
    use super::*;

    // The workload is PostMark's: every file created is deleted, sizes stay within bounds,
    // and the same seed gives the same operations.
    #[test]
    fn workload_is_postmarks_and_deterministic() {
        let config = PostmarkConfig::quick(3);
        let workload = Workload::generate(&config);
        assert_eq!(workload, Workload::generate(&config));
        assert_ne!(workload.phases, Workload::generate(&PostmarkConfig::quick(4)).phases);
        let counts = workload.counts;
        assert_eq!(counts.created, counts.deleted);
        assert_eq!(workload.phases[0].len(), config.files as usize);
        assert_eq!(counts.transactions, u64::from(config.transactions));
        let mut sizes = std::collections::HashMap::new();
        for operation in workload.phases.iter().flatten() {
            match operation {
                Operation::Create { path, size_bytes } => {
                    assert!((config.size_min_bytes..config.size_max_bytes).contains(size_bytes));
                    assert!(sizes.insert(path.clone(), *size_bytes).is_none(), "{path} created twice");
                }
                Operation::Append { path, size_bytes } => {
                    let size = sizes.get_mut(path).expect("append to a live file");
                    *size += size_bytes;
                    assert!(*size <= config.size_max_bytes);
                }
                Operation::Read { path, size_bytes } => assert_eq!(sizes.get(path), Some(size_bytes)),
                Operation::Delete { path } => assert!(sizes.remove(path).is_some(), "{path} deleted twice"),
            }
        }
        assert!(sizes.is_empty());
        // About half the transactions read, half create.
        assert!(counts.read > 400 && counts.read < 600, "{counts:?}");
    }

    #[test]
    fn size_labels() {
        assert_eq!(size_label(0), "none");
        assert_eq!(size_label(1024), "1 KiB");
        assert_eq!(size_label(128 * 1024), "128 KiB");
        assert_eq!(size_label(1024 * 1024), "1 MiB");
    }
}
