//! Model-based testing: seeded random operation sequences (every API call, error cases,
//! remounts and power cuts) run on fsoc and on the in-memory oracle `fsoc_model::ModelFs`;
//! every outcome and the whole visible tree must agree. A failure prints its seed, the
//! geometry it ran on and its replay line.

mod common;

use fsoc_core::fs::api::{FileHandle, OpenFlags, Whence};
use fsoc_core::fs::{FileKind, FsError, InodeRecord};
use fsoc_core::{FileSystem, FsConfig};
use fsoc_media::{Nvram, NvramConfig, NvramTechnology, Profile, SharedNvram, SimFlash};
use fsoc_model::{
    listing_through_calls, replay, run_and_compare, Attributes, GeneratorConfig, Listing, ModelConfig, ModelFs,
    Operation, OperationGenerator, Outcome, Output, RunOptions,
};

/// The simulated array a run formats: profile (page and block size), chips, blocks per chip.
#[derive(Clone, Copy, Debug)]
struct ArrayShape {
    profile: Profile,
    chip_count: u32,
    block_count: u32,
}

impl ArrayShape {
    /// The geometry the older tests ran on alone: one 2 KiB-page MLC chip of 1,024 blocks.
    const MLC_ONE_CHIP: ArrayShape = ArrayShape { profile: Profile::Mlc, chip_count: 1, block_count: 1024 };

    /// `profile` on `chip_count` chips with about `VOLUME_BYTES` in all, and never fewer than
    /// `SEGMENT_COUNT_MIN` segments (a segment is one block on every chip), so even 4 MiB
    /// blocks on 4 chips leave the cleaner room. The RAM store holds only programmed pages,
    /// so a large volume costs no memory until written.
    fn sized(profile: Profile, chip_count: u32) -> ArrayShape {
        const VOLUME_BYTES: u64 = 128 << 20;
        const SEGMENT_COUNT_MIN: u64 = 64;
        let block_bytes = profile.geometry(1).block_data_bytes();
        let block_count = (VOLUME_BYTES / (block_bytes * u64::from(chip_count))).max(SEGMENT_COUNT_MIN);
        ArrayShape { profile, chip_count, block_count: block_count as u32 }
    }

    fn page_size_bytes(self) -> u64 {
        u64::from(self.profile.geometry(1).page_data_bytes)
    }
}

impl std::fmt::Display for ArrayShape {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let geometry = self.profile.geometry(self.block_count);
        write!(
            formatter,
            "{} ({} B pages, {} pages/block) x {} chip(s) x {} blocks",
            self.profile.name(),
            geometry.page_data_bytes,
            geometry.pages_per_block,
            self.chip_count,
            self.block_count
        )
    }
}

/// fsoc driven through the model's operation vocabulary.
struct FsocUnderTest {
    fs: Option<FileSystem<SimFlash>>,
    config: FsConfig,
    /// Whether the last operation made the mount's generation commit (`FileSystem::generation`
    /// went from 0: a mount commits what it has before it makes its first inode).
    generation_committed: bool,
    /// The NVRAM commit tier's device, when the run has one.
    nvram: Option<SharedNvram>,
    /// Small writes that rode in the NVRAM log, over every mount of the run.
    small_writes_in_log: u64,
}

/// A handle for the file system on `nvram`; after a power cut, a fresh device holding the
/// bytes the cut left.
fn nvram_box(nvram: &Option<SharedNvram>) -> Option<Box<dyn fsoc_media::NvramDevice>> {
    nvram.as_ref().map(|nvram| Box::new(nvram.clone()) as Box<dyn fsoc_media::NvramDevice>)
}

fn kind(kind: FileKind) -> fsoc_model::FileKind {
    match kind {
        FileKind::File => fsoc_model::FileKind::File,
        FileKind::Directory => fsoc_model::FileKind::Directory,
        FileKind::Symlink => fsoc_model::FileKind::Symlink,
        special => panic!("the model's operations make no {special:?}"),
    }
}

fn attributes(inode: u64, record: InodeRecord) -> Output {
    Output::Attributes(Attributes {
        ino: inode,
        kind: kind(record.kind),
        mode: record.mode,
        uid: record.uid,
        gid: record.gid,
        nlink: record.nlink,
        size: record.size,
        atime_ns: record.atime_ns,
        mtime_ns: record.mtime_ns,
        ctime_ns: record.ctime_ns,
    })
}

fn flags(flags: fsoc_model::OpenFlags) -> OpenFlags {
    OpenFlags {
        read: flags.read,
        write: flags.write,
        create: flags.create,
        exclusive: flags.exclusive,
        truncate: flags.truncate,
        append: flags.append,
        directory: flags.directory,
    }
}

fn outcome<T>(result: Result<T, FsError>, map: impl FnOnce(T) -> Output) -> Outcome {
    result.map(map).map_err(|error| error.errno())
}

impl FsocUnderTest {
    fn new(shape: ArrayShape, config: FsConfig, nvram_bytes: Option<u64>) -> Self {
        let flash = common::sim(shape.profile, shape.chip_count, shape.block_count, 11);
        let nvram = nvram_bytes.map(|bytes| {
            SharedNvram::new(Nvram::in_ram(NvramConfig::new(bytes, NvramTechnology::Mram, 11)).expect("nvram"))
        });
        let fs = FileSystem::format_with_nvram(flash, nvram_box(&nvram), config, 11, 0).expect("format");
        FsocUnderTest { fs: Some(fs), config, generation_committed: false, nvram, small_writes_in_log: 0 }
    }

    fn fs(&mut self) -> &mut FileSystem<SimFlash> {
        self.fs.as_mut().expect("mounted")
    }
}

impl fsoc_model::FsUnderTest for FsocUnderTest {
    fn apply(&mut self, operation: &Operation, now_ns: i64) -> Outcome {
        if let Operation::Remount | Operation::PowerCut = operation {
            let fs = self.fs.take().expect("mounted");
            self.small_writes_in_log += fs.stats.small_writes_in_log;
            let flash = if let Operation::Remount = operation {
                fs.unmount().expect("unmount")
            } else {
                let mut flash = fs.into_flash_without_commit();
                flash.cut_power_now();
                flash.restore_power();
                // The NVRAM keeps its bytes; a new device stands for the powered-up part.
                self.nvram = self.nvram.as_ref().map(|nvram| {
                    nvram.with(|device| {
                        SharedNvram::new(Nvram::new(*device.config(), device.backing().clone()).expect("nvram"))
                    })
                });
                flash
            };
            let mut fs = FileSystem::mount_with_nvram(flash, nvram_box(&self.nvram), self.config).expect("remount");
            let report = fs.fsck(true).expect("fsck runs");
            assert!(report.is_clean(), "fsck after {operation:?}: {:?}", report.violations);
            self.fs = Some(fs);
            return Ok(Output::Unit);
        }
        let generation_before = self.fs().generation();
        let outcome = self.apply_mounted(operation, now_ns);
        self.generation_committed = generation_before == 0 && self.fs().generation() != 0;
        outcome
    }

    fn extra_commits(&mut self) -> fsoc_model::ExtraCommits {
        // The generation commit comes before the creation that asks for it.
        fsoc_model::ExtraCommits {
            before_operation: std::mem::take(&mut self.generation_committed),
            after_operation: false,
        }
    }

    fn listing(&mut self) -> Listing {
        listing_through_calls(|operation| fsoc_model::FsUnderTest::apply(self, operation, 0))
    }
}

impl FsocUnderTest {
    fn apply_mounted(&mut self, operation: &Operation, now_ns: i64) -> Outcome {
        let fs = self.fs();
        fs.now_ns = now_ns;
        match operation {
            Operation::Open { path, flags: open_flags, mode } => {
                outcome(fs.open(path, flags(*open_flags), *mode), |fd| Output::Fd(fd.number()))
            }
            Operation::Read { fd, size_bytes } => {
                outcome(fs.read_fd(FileHandle::from_number(*fd), *size_bytes as usize), Output::Bytes)
            }
            Operation::Write { fd, data } => {
                outcome(fs.write_fd(FileHandle::from_number(*fd), data), |count| Output::Count(count as u64))
            }
            Operation::Pread { fd, offset, size_bytes } => {
                outcome(fs.pread(FileHandle::from_number(*fd), *offset, *size_bytes as usize), Output::Bytes)
            }
            Operation::Pwrite { fd, offset, data } => {
                outcome(fs.pwrite(FileHandle::from_number(*fd), *offset, data), |count| Output::Count(count as u64))
            }
            Operation::Seek { fd, offset, whence } => {
                let whence = match whence {
                    fsoc_model::Whence::Set => Whence::Set,
                    fsoc_model::Whence::Current => Whence::Current,
                    fsoc_model::Whence::End => Whence::End,
                };
                outcome(fs.seek(FileHandle::from_number(*fd), *offset, whence), Output::Count)
            }
            Operation::Ftruncate { fd, size_bytes } => {
                outcome(fs.ftruncate(FileHandle::from_number(*fd), *size_bytes), |()| Output::Unit)
            }
            Operation::Fsync { fd } => outcome(fs.fsync_fd(FileHandle::from_number(*fd)), |()| Output::Unit),
            Operation::Close { fd } => outcome(fs.close(FileHandle::from_number(*fd)), |()| Output::Unit),
            Operation::Fstat { fd } => {
                outcome(fs.fstat(FileHandle::from_number(*fd)), |(inode, record)| attributes(inode, record))
            }
            Operation::Stat { path } => outcome(fs.stat(path), |(inode, record)| attributes(inode, record)),
            Operation::Truncate { path, size_bytes } => outcome(fs.truncate_path(path, *size_bytes), |()| Output::Unit),
            Operation::Mkdir { path, mode } => outcome(fs.mkdir(path, *mode), |_| Output::Unit),
            Operation::Rmdir { path } => outcome(fs.rmdir(path), |()| Output::Unit),
            Operation::Unlink { path } => outcome(fs.unlink(path), |()| Output::Unit),
            Operation::Rename { source_path, target_path } => {
                outcome(fs.rename_path(source_path, target_path), |()| Output::Unit)
            }
            Operation::Readdir { path } => outcome(fs.readdir_path(path), |entries| {
                Output::Entries(entries.into_iter().map(|entry| (entry.name, kind(entry.kind))).collect())
            }),
            Operation::Link { existing_path, new_path } => {
                outcome(fs.link_path(existing_path, new_path), |()| Output::Unit)
            }
            Operation::Symlink { target, link_path } => outcome(fs.symlink_path(target, link_path), |_| Output::Unit),
            Operation::Readlink { path } => outcome(fs.readlink_path(path), Output::Bytes),
            Operation::Chmod { path, mode } => outcome(fs.chmod(path, *mode), |()| Output::Unit),
            Operation::Chown { path, uid, gid } => outcome(fs.chown(path, *uid, *gid), |()| Output::Unit),
            Operation::Utimens { path, atime_ns, mtime_ns } => {
                outcome(fs.utimens(path, *atime_ns, *mtime_ns), |()| Output::Unit)
            }
            Operation::Statfs => outcome(fs.statfs(), |_| Output::Statfs),
            Operation::Transact => outcome(fs.transact(), |()| Output::Unit),
            Operation::Remount | Operation::PowerCut => unreachable!("handled above"),
        }
    }
}

fn model_config(fs: &FsocUnderTest) -> ModelConfig {
    ModelConfig {
        file_size_max_bytes: fs.fs.as_ref().expect("mounted").file_bytes_max(),
        link_count_max: u32::MAX,
        open_fd_count_max: fs.config.open_files_max as u32,
        ..ModelConfig::default()
    }
}

/// Runs `operation_count` operations generated from `seed ^ salt` on fsoc (formatted on
/// `shape`) and on the model. `seed` comes from `replay::test_seeds`, so the replay line
/// printed on failure (with `FSOC_SEED=seed`) reruns exactly this sequence; `salt` gives each
/// test its own sequences from the same seed list. Any panic (a mismatch, a failed remount,
/// fsck) is reported with the seed and the geometry.
fn check_seed(seed: u64, salt: u64, operation_count: usize, shape: ArrayShape, config: FsConfig) {
    check_seed_nvram(seed, salt, operation_count, shape, config, None);
}

/// `check_seed` with the NVRAM commit tier (`nvram_bytes` of MRAM) when given; returns how many
/// small writes rode in the NVRAM log.
fn check_seed_nvram(
    seed: u64,
    salt: u64,
    operation_count: usize,
    shape: ArrayShape,
    config: FsConfig,
    nvram_bytes: Option<u64>,
) -> u64 {
    let run = || {
        let mut fs = FsocUnderTest::new(shape, config, nvram_bytes);
        let model_config = model_config(&fs);
        let generator = GeneratorConfig { page_size_bytes: shape.page_size_bytes(), ..GeneratorConfig::default() };
        let operations = OperationGenerator::generate(seed ^ salt, generator, model_config.clone(), operation_count);
        let mut model = ModelFs::new(model_config);
        let options = RunOptions { compare_timestamps: true, ..RunOptions::default() };
        if let Err(mismatch) = run_and_compare(&mut fs, &mut model, &operations, &options) {
            panic!("{mismatch}");
        }
        let report = fs.fs().fsck(false).expect("fsck runs");
        assert!(report.is_clean(), "fsck: {:?}", report.violations);
        fs.small_writes_in_log + fs.fs().stats.small_writes_in_log
    };
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(run)) {
        Ok(small_writes_in_log) => small_writes_in_log,
        Err(panic) => {
            let test_name = std::thread::current().name().unwrap_or_default().to_owned();
            eprintln!(
                "model run failed: seed {seed:#018x} (salt {salt:#x}), geometry {shape}, config {config:?}, NVRAM \
             {nvram_bytes:?}\n{}",
                // The test harness names each test's thread after the test.
                replay::replay_line(seed, "fsoc-core", &format!("--release --test model {test_name}"))
            );
            std::panic::resume_unwind(panic);
        }
    }
}

/// Default configuration: commits on fsync and transact only.
#[test]
fn fsoc_agrees_with_the_model() {
    let config = FsConfig { open_files_max: 256, ..FsConfig::default() };
    for seed in replay::test_seeds(40) {
        check_seed(seed, 0, 1500, ArrayShape::MLC_ONE_CHIP, config);
    }
}

/// The configurations the geometry matrix cycles through: the default, a tiny node cache and
/// dirty budget (node evictions and mid-transaction flushes, with nodes one page of the
/// geometry's size), and full commits only.
fn matrix_configs(page_size_bytes: usize) -> [FsConfig; 3] {
    let default = FsConfig { open_files_max: 256, ..FsConfig::default() };
    let mut tight = default;
    // About three nodes: each costs its page and 2 bytes per entry.
    tight.volume.cache_bytes_max = 4 * page_size_bytes;
    tight.volume.dirty_nodes_max = 4;
    [default, tight, FsConfig { delta_commits: false, ..default }]
}

/// Seeds per (profile, chip count) cell: 12 × 15 cells × 1,500 operations take about 17 s of
/// one CPU in release; each profile is its own test, so they share the machine's CPUs.
const SEEDS_PER_CELL: usize = 12;

/// `profile` on 1, 2 and 4 chips: segments striped over several chips (docs/FORMAT.md,
/// "Layout"), with the profile's page size, pages per block and paired-page distance. Each
/// cell runs its own seeds, cycling through `matrix_configs`. With `FSOC_SEED` every cell runs
/// that one seed under every configuration; a failure names its cell and configuration.
fn check_profile(profile: Profile) {
    let chip_counts = [1, 2, 4];
    let configs = matrix_configs(profile.geometry(1).page_data_bytes as usize);
    let seeds = replay::test_seeds(chip_counts.len() * SEEDS_PER_CELL);
    let salt = 0x6E0 + u64::from(profile.code());
    for (cell_index, chip_count) in chip_counts.into_iter().enumerate() {
        let shape = ArrayShape::sized(profile, chip_count);
        if let [seed] = seeds[..] {
            for config in configs {
                check_seed(seed, salt, 1500, shape, config);
            }
            continue;
        }
        let cell_seeds = &seeds[cell_index * SEEDS_PER_CELL..(cell_index + 1) * SEEDS_PER_CELL];
        for (index, &seed) in cell_seeds.iter().enumerate() {
            check_seed(seed, salt, 1500, shape, configs[index % configs.len()]);
        }
    }
}

/// 2 KiB pages, 64 pages per block, no page pairing.
#[test]
fn fsoc_agrees_with_the_model_on_slc_chips() {
    check_profile(Profile::Slc);
}

/// 2 KiB pages, 64 pages per block, paired pages 2 apart.
#[test]
fn fsoc_agrees_with_the_model_on_mlc_chips() {
    check_profile(Profile::Mlc);
}

/// 4 KiB pages, 128 pages per block, paired pages 3 apart.
#[test]
fn fsoc_agrees_with_the_model_on_tlc_chips() {
    check_profile(Profile::Tlc);
}

/// 8 KiB pages, 256 pages (2 MiB) per block, paired pages 2 apart.
#[test]
fn fsoc_agrees_with_the_model_on_mlc8k_chips() {
    check_profile(Profile::Mlc8k);
}

/// 16 KiB pages, 256 pages (4 MiB) per block, paired pages 3 apart.
#[test]
fn fsoc_agrees_with_the_model_on_mlc16k_chips() {
    check_profile(Profile::Mlc16k);
}

/// A tiny node cache and dirty budget force evictions and mid-transaction flushes.
#[test]
fn fsoc_agrees_with_the_model_under_tight_memory() {
    let mut config = FsConfig { open_files_max: 256, ..FsConfig::default() };
    config.volume.cache_bytes_max = 8 * 1024; // three 2 KiB nodes
    config.volume.dirty_nodes_max = 4;
    for seed in replay::test_seeds(20) {
        check_seed(seed, 0x5EED, 1500, ArrayShape::MLC_ONE_CHIP, config);
    }
}

/// Seeds that once failed in a wider sweep (FSOC_SEED loop, 2026-11-22): fsck flagged
/// directories removed while open, and symlink targets longer than one tree entry were refused.
#[test]
fn regressions_from_seed_sweeps() {
    let mut tight = FsConfig { open_files_max: 256, ..FsConfig::default() };
    tight.volume.cache_bytes_max = 8 * 1024;
    tight.volume.dirty_nodes_max = 4;
    let default = FsConfig { open_files_max: 256, ..FsConfig::default() };
    for seed in [0x167d3u64, 0x554fc, 0x62d85, 0x61299, 0x357d2, 0x26d154 ^ 0x5EED] {
        check_seed(seed, 0, 1500, ArrayShape::MLC_ONE_CHIP, default);
        check_seed(seed, 0x5EED, 1500, ArrayShape::MLC_ONE_CHIP, tight);
    }
}

/// Full commits only (delta commits off): the other commit path under the same sequences.
#[test]
fn fsoc_agrees_with_the_model_with_full_commits_only() {
    let config = FsConfig { open_files_max: 256, delta_commits: false, ..FsConfig::default() };
    for seed in replay::test_seeds(15) {
        check_seed(seed, 0xF011, 1500, ArrayShape::MLC_ONE_CHIP, config);
    }
}

/// The NVRAM commit tier: fsync and transact append records to the log (a 2 KiB log destages
/// every few records; a 64 KiB one holds many), power cuts replay them. Also a tight node
/// budget, so mid-transaction flushes sit between records.
#[test]
fn fsoc_agrees_with_the_model_with_nvram() {
    let default = FsConfig { open_files_max: 256, ..FsConfig::default() };
    let mut tight = default;
    tight.volume.cache_bytes_max = 8 * 1024;
    tight.volume.dirty_nodes_max = 4;
    let mut small_writes_in_log = 0;
    for (index, seed) in replay::test_seeds(18).into_iter().enumerate() {
        let (config, nvram_bytes) = match index % 3 {
            0 => (default, 2048),
            1 => (default, 64 * 1024),
            _ => (tight, 8192),
        };
        small_writes_in_log +=
            check_seed_nvram(seed, 0x4E56, 1500, ArrayShape::MLC_ONE_CHIP, config, Some(nvram_bytes));
    }
    let shape = ArrayShape::sized(Profile::Tlc, 2);
    for seed in replay::test_seeds(4) {
        small_writes_in_log += check_seed_nvram(seed, 0x4E57, 1500, shape, default, Some(16 * 1024));
    }
    println!("small writes that rode in the NVRAM log: {small_writes_in_log}");
    assert!(small_writes_in_log > 0, "no small write rode in the NVRAM log: the test misses the pending pages");
}
