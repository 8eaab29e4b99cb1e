//! The `fsoc` command: simulator demo, image tools, checker, crash test and benchmarks.

mod arguments;
mod array_cmd;
#[cfg(feature = "lab")]
mod bench_cmd;
#[cfg(feature = "lab")]
mod bench_fsoc_cmd;
#[cfg(feature = "lab")]
mod bench_postmark_cmd;
mod flash_cmd;
mod fuse_cmd;
mod image_build;
mod image_target;
mod image_walk;
mod interrupts;
mod mount_options;
#[cfg(feature = "lab")]
mod mtd_bench_cmd;
mod names;
mod rebuild_cmd;
mod remote_mount;
#[cfg(feature = "lab")]
mod report_cmd;
mod serve_cmd;
mod tools_cmd;
mod tools_get;
mod tools_ls;
mod tools_put;
mod volume_cmd;
mod volume_files;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use fsoc_media::Profile;

#[derive(Parser)]
#[command(name = "fsoc", version, about = "fsoc: a power-fail-safe transactional file system for raw NAND flash")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Runs the simulator and file-system demo and prints a short report.
    Demo {
        /// NAND profile: slc, mlc, tlc (seed 001 Table 1), mlc8k (8 KiB pages) or mlc16k (16 KiB
        /// pages, 4 MiB blocks).
        #[arg(long, default_value = "mlc", value_parser = arguments::profile)]
        profile: Profile,
        /// Chips in the array, 1 to 64.
        #[arg(long, default_value_t = 4, value_parser = arguments::chip_count)]
        chips: u32,
        /// Simulator seed (bit errors, timing): the same seed gives the same run.
        #[arg(long, default_value_t = 1)]
        seed: u64,
    },
    /// Simulated NAND device images.
    Flash {
        #[command(subcommand)]
        command: FlashCommand,
    },
    /// Creates an image file holding a freshly formatted fsoc volume, empty or (--from DIR)
    /// holding a directory tree. Nothing is left behind if it fails, and an existing image is
    /// replaced (with --force) only once the new one is complete.
    ///
    /// With --from DIR the volume holds DIR exactly: owners, modes, access and modification
    /// times, hard links, symbolic links, device nodes, FIFOs, sockets, extended attributes,
    /// POSIX ACLs and file capabilities (trusted.* ones need root to be read). The owners are
    /// DIR's whoever builds it (--squash-uids, --uid-map and --gid-map change them). With
    /// SOURCE_DATE_EPOCH set the image is reproducible: the same DIR, options and
    /// SOURCE_DATE_EPOCH give the same bytes, every change time is SOURCE_DATE_EPOCH and later
    /// access and modification times are clamped to it.
    Mkfs {
        /// The image file to create.
        image: PathBuf,
        /// NAND profile: slc, mlc, tlc (seed 001 Table 1), mlc8k (8 KiB pages) or mlc16k (16 KiB
        /// pages, 4 MiB blocks).
        #[arg(long, default_value = "mlc", value_parser = arguments::profile)]
        profile: Profile,
        /// Chips in the volume (striped), 1 to 64.
        #[arg(long, default_value_t = 1, value_parser = arguments::chip_count)]
        chips: u32,
        /// Erase blocks per chip (default: enough for --size, else 512 = 64 MiB per mlc chip).
        /// The allowed range depends on the profile and chips and is stated if exceeded.
        #[arg(long, value_parser = arguments::block_count)]
        blocks: Option<u32>,
        /// Volume size with a K, M, G or T suffix, e.g. 64M or 1G (sets --blocks; default 64M
        /// per chip for mlc). The limits depend on the profile and are stated if exceeded.
        /// With --from, `auto`: the smallest volume (in whole erase blocks) that holds DIR with
        /// --free-margin left free, measured by building it.
        #[arg(long)]
        size: Option<String>,
        /// Simulator seed (bit errors, factory bad blocks): the same seed gives the same device.
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// Volume id (hex or decimal) recorded on every chip. Default: random, or derived from
        /// SOURCE_DATE_EPOCH and --seed when that variable is set (reproducible images).
        #[arg(long, value_parser = arguments::volume_id)]
        volume_id: Option<u64>,
        /// Replace an existing image (refused while it is mounted or in use).
        #[arg(long)]
        force: bool,
        /// Volume label (up to 255 bytes), as `fsoc label` and FS_IOC_GETFSLABEL report it.
        #[arg(long)]
        label: Option<String>,
        /// Build the volume holding this directory's tree (its root directory takes DIR's
        /// owner, mode, times and attributes).
        #[arg(long, value_name = "DIR")]
        from: Option<PathBuf>,
        /// With --from: every owner in the volume becomes root:root (for building as an
        /// ordinary user; the users and groups that ACL entries name stay as they are).
        #[arg(long, requires = "from", conflicts_with_all = ["uid_map", "gid_map"])]
        squash_uids: bool,
        /// With --from: user ids to change, FROM:TO[:COUNT][,...] (COUNT ids from FROM on
        /// become COUNT ids from TO on, e.g. 1000:0); ids no range names stay. ACL entries
        /// naming users are mapped too.
        #[arg(long, requires = "from", value_parser = arguments::id_map, value_name = "FROM:TO[:COUNT],...")]
        uid_map: Option<arguments::IdMap>,
        /// With --from: group ids to change, as --uid-map does user ids.
        #[arg(long, requires = "from", value_parser = arguments::id_map, value_name = "FROM:TO[:COUNT],...")]
        gid_map: Option<arguments::IdMap>,
        /// With --size auto: the share of the volume to leave free, in percent (0 to 90).
        /// The default, 20, is room for what the system writes at run time and keeps the
        /// cleaner cheap: a log-structured volume's cleaning cost grows steeply as it fills.
        #[arg(long, default_value = "20", value_parser = arguments::free_margin, value_name = "PERCENT")]
        free_margin: u32,
        /// Keep transaction points (fsync, transact) in an NVRAM of this size (1K to 16M, a
        /// K or M suffix), e.g. 128K: an fsync then programs no flash page. The NVRAM is the
        /// file IMAGE.nvram beside the image; the volume needs it at every mount.
        #[arg(long, value_name = "SIZE", conflicts_with = "from")]
        nvram: Option<String>,
        /// The NVRAM's technology (its timing and energy in simulated figures): feram, mram
        /// or pcm.
        #[arg(long, default_value = "feram", value_parser = arguments::nvram_technology)]
        nvram_technology: fsoc_media::NvramTechnology,
        /// Redundancy across chips: none; parity (each row of pages across the chips carries
        /// one parity page, and metaroots are kept on two chips: capacity (N-1)/N of N chips;
        /// any one chip may be lost, then rebuilt with `fsoc rebuild`); or mirror-meta (tree
        /// nodes, the segment table and metaroots on two chips, file data once: without one
        /// chip every name is still listed and the files on the others read; no rebuild).
        /// Needs --chips 2 or more.
        #[arg(long, default_value = "none", value_parser = arguments::redundancy)]
        redundancy: fsoc_core::segment::Redundancy,
    },
    /// Prints a volume's label, or sets it (an empty NEW removes it); refused while mounted
    /// (the mount answers FS_IOC_GETFSLABEL/SETFSLABEL instead).
    Label {
        /// The image file, an array volume as BASE or a chip file, or MTD raw NAND.
        image: PathBuf,
        /// The new label (up to 255 bytes).
        new: Option<String>,
    },
    /// Describes a volume: geometry, usage, wear, transaction counter, damage found at mount.
    Info {
        /// The image file, or an array volume as BASE or any of its chip files BASE.chipN
        /// (refused while it is mounted: unmount it first).
        image: PathBuf,
    },
    /// Checks every invariant of a volume; exit status 1 if any is violated, 2 if it cannot
    /// be checked.
    Fsck {
        /// The image file, or an array volume as BASE or any of its chip files BASE.chipN
        /// (refused while it is mounted: unmount it first).
        image: PathBuf,
        /// Check the trees and the segment table only; skip reading every file data page.
        #[arg(long)]
        metadata_only: bool,
        /// Read every file data page and verify it against the checksum its extent records
        /// (the default; the flag says so explicitly).
        #[arg(long, conflicts_with = "metadata_only")]
        data: bool,
    },
    /// Reads every live page of a volume (tree nodes and file data, each against its
    /// checksum) and moves the data of blocks whose reads came near the ECC's limit (retention
    /// loss, read disturb) before it is lost; then commits. Exit status 1 if damage was found
    /// (a page unreadable or failing its checksum), 2 if the volume cannot be scrubbed.
    Scrub {
        /// The image file, an array volume (BASE or any chip file BASE.chipN) or MTD raw NAND
        /// (refused while it is mounted: a mount scrubs in the background, `-o scrub=N`).
        image: PathBuf,
        /// Read and report only; move nothing (opens the volume read-only).
        #[arg(long)]
        check_only: bool,
    },
    /// Writes a lost chip of a volume with redundancy (`mkfs --redundancy parity`) again from
    /// the other chips, offline, then mounts the volume and checks it (fsck).
    ///
    /// An image file's chip K is rewritten in place; an array's new chip is BASE.chipK (a blank
    /// one is made if the file is missing) or the --replacement file; on MTD raw NAND, the
    /// device in position K of the list. Exit status 1 if pages could not be rebuilt or the
    /// check fails, 2 if the rebuild cannot run.
    Rebuild {
        /// The image file, an array volume as BASE or any chip file BASE.chipN (chip K's file
        /// may be missing), or MTD raw NAND (refused while the volume is mounted or in use).
        volume: PathBuf,
        /// The position of the chip to rebuild, from 0.
        #[arg(long, value_name = "K")]
        chip: u32,
        /// Arrays of chip files only: the new chip's file (created blank if it does not exist),
        /// rebuilt in position K; then BASE.chipK, if there, is kept as BASE.chipK.failed and
        /// NEW is renamed to BASE.chipK.
        #[arg(long, value_name = "NEW")]
        replacement: Option<PathBuf>,
    },
    /// Power-cut test: cut power at every flash operation of a workload and check recovery.
    Crashtest {
        /// small-files, overwrite, rename-storm, deep-tree, fill-delete, cleaner, churn,
        /// sync-small, or all (all eight; churn alone cuts about 5,000 points and takes minutes).
        #[arg(long, default_value = "all", value_parser = arguments::workloads)]
        workload: arguments::Workloads,
        /// Seed of the workload, the device and the sampled cut points.
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// Write the result as JSON here.
        #[arg(long)]
        json: Option<PathBuf>,
        /// Cut at most this many points per workload (seeded sample); default: every one.
        #[arg(long)]
        max_cuts: Option<u64>,
        /// Replay a single cut point (from a failure's replay line).
        #[arg(long, conflicts_with = "nvram_cut_after")]
        cut_after: Option<u64>,
        /// Keep transaction points in an NVRAM of this size (e.g. 4K): power is then also cut
        /// at every NVRAM write, with torn 8-byte words.
        #[arg(long, value_name = "SIZE")]
        nvram: Option<String>,
        /// Replay a single NVRAM cut point (from a failure's replay line).
        #[arg(long, requires = "nvram")]
        nvram_cut_after: Option<u64>,
        /// NAND profile: slc, mlc, tlc, mlc8k or mlc16k.
        #[arg(long, default_value = "mlc", value_parser = arguments::profile)]
        profile: Profile,
        /// Chips in the array, 1 to 64.
        #[arg(long, default_value_t = 1, value_parser = arguments::chip_count)]
        chips: u32,
        /// Erase blocks per chip (small, so workloads fill the volume and run the cleaner); the
        /// smallest volume the format allows depends on the profile and chips (15 for one mlc
        /// chip) and is stated if --blocks is below it.
        #[arg(long, default_value_t = 40, value_parser = arguments::block_count)]
        blocks: u32,
        /// Also let torn pages read back correctly once (unstable-bits hazard).
        #[arg(long)]
        unstable_bits: bool,
        /// Also let a cut program corrupt its paired lower page (MLC/TLC), with fsoc's guard on.
        #[arg(long)]
        paired_pages: bool,
        /// Multiply each workload's amount of work (1: the default size).
        #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=100))]
        scale: u32,
        /// Instead of cutting power: fail every Nth flash operation in turn (one per run), as a
        /// block going bad under that program or erase, and check that the workload answers as
        /// without the failure and the volume remounts clean.
        #[arg(long, value_name = "N", conflicts_with_all = ["cut_after", "nvram", "max_cuts"],
              value_parser = clap::value_parser!(u64).range(1..))]
        bad_blocks_every: Option<u64>,
        /// Format the test volumes with this redundancy across chips: none, parity (then every
        /// cut is also checked with one chip gone: every committed page must still read back)
        /// or mirror-meta (every committed name and attribute must still be listed, each file
        /// exact or lost). Needs --chips 2 or more.
        #[arg(long, value_parser = arguments::redundancy)]
        redundancy: Option<fsoc_core::segment::Redundancy>,
        /// Instead of cutting power: N runs per workload in which a chip dies after a sampled
        /// flash operation; the volume must mount without it, keep every commit, pass fsck and
        /// be rebuilt whole (some rebuilds cut by a power failure and run again); with
        /// --redundancy mirror-meta, list every committed name (no rebuild). Implies
        /// --redundancy parity when none is given; needs --chips 2 or more.
        #[arg(long, value_name = "N",
              conflicts_with_all = ["cut_after", "nvram", "nvram_cut_after", "max_cuts", "bad_blocks_every"],
              value_parser = clap::value_parser!(u64).range(1..))]
        chip_loss: Option<u64>,
    },
    #[cfg(feature = "lab")]
    /// Benchmarks (simulated device time, except `bench fuse`: wall time on this machine;
    /// results as JSON plus an SVG chart beside it).
    Bench {
        #[command(subcommand)]
        command: BenchCommand,
    },
    /// Volumes kept as one image file per chip (BASE.chip0, BASE.chip1, …), one thread each.
    Array {
        #[command(subcommand)]
        command: ArrayCommand,
    },
    #[cfg(feature = "lab")]
    /// Runs every benchmark (quick by default, --full for the committed sizes) and writes one
    /// self-contained report: DIR/index.html (charts inline) and DIR/report.json, each
    /// experiment beside its seed's published figure and its peer in the same harness.
    Report(report_cmd::ReportArgs),
    #[command(flatten)]
    Mount(fuse_cmd::MountCommand),
    /// Serves a volume image over 9P2000.L (TCP or a Unix socket) to any number of clients,
    /// e.g. Linux's `mount -t 9p -o trans=tcp,version=9p2000.L`, until Ctrl-C or SIGTERM, then
    /// commits cleanly.
    Serve(serve_cmd::ServeArgs),
    #[command(flatten)]
    Tool(tools_cmd::ToolCommand),
}

#[derive(Subcommand)]
enum ArrayCommand {
    /// Creates BASE.chip0 … BASE.chip{P-1} holding a freshly formatted volume.
    Mkfs {
        /// Chip files are BASE.chip0, BASE.chip1, …
        base: PathBuf,
        /// NAND profile: slc, mlc, tlc, mlc8k or mlc16k.
        #[arg(long, default_value = "mlc", value_parser = arguments::profile)]
        profile: Profile,
        /// Chips (one file and one worker thread each), 1 to 64.
        #[arg(long, default_value_t = 4, value_parser = arguments::chip_count)]
        chips: u32,
        /// Erase blocks per chip (512 = 64 MiB per mlc chip). The allowed range depends on the
        /// profile and chips and is stated if exceeded.
        #[arg(long, default_value_t = 512, value_parser = arguments::block_count)]
        blocks: u32,
        /// Simulator seed (bit errors, factory bad blocks).
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// Volume id; default random, or derived from SOURCE_DATE_EPOCH and --seed when set.
        #[arg(long, value_parser = arguments::volume_id)]
        volume_id: Option<u64>,
        /// Replace existing chip files.
        #[arg(long)]
        force: bool,
        /// Redundancy across chips: none or parity (any one chip file may be lost and then
        /// rebuilt with `fsoc rebuild`; capacity (N-1)/N); see `fsoc mkfs --help`.
        #[arg(long, default_value = "none", value_parser = arguments::redundancy)]
        redundancy: fsoc_core::segment::Redundancy,
    },
    /// Mounts an array read-only and describes it, or says why its chips do not belong together.
    Info {
        /// BASE of BASE.chip0, BASE.chip1, … (or give --chip-file instead).
        base: Option<PathBuf>,
        /// Chip files in chip order (repeat the option), e.g. to check a reassembled set.
        #[arg(long = "chip-file")]
        chip_files: Vec<PathBuf>,
    },
}

#[cfg(feature = "lab")]
#[derive(Subcommand)]
enum BenchCommand {
    /// IOzone-style record sweep (seed 001) on 1, 2, 4 and 8 chips, SLC/MLC/TLC.
    Scaling {
        /// Where to write the JSON rows (the chart goes beside it, as .svg).
        #[arg(long)]
        json: PathBuf,
        /// A reduced sweep that runs in seconds.
        #[arg(long)]
        quick: bool,
        /// Seed of the simulated chips: the same seed gives the same figures.
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// Turn off the paired-page guard (pages skipped after each commit), to measure its cost.
        #[arg(long)]
        no_paired_page_guard: bool,
    },
    /// Parallel readers (wall-clock time): on a 4-chip array of chip files, four threads reading
    /// four files against one, and 4 KiB read latency idle and while a writer streams fsync'd
    /// writes. Chip files go to /dev/shm when it exists, else the temporary directory.
    Readers {
        /// Also write the results here as JSON.
        #[arg(long)]
        json: Option<PathBuf>,
        /// 4 MiB files and 500 latency samples instead of 32 MiB and 4,000 (a smoke run).
        #[arg(long)]
        quick: bool,
        /// Seed of the simulated chips and of the read offsets.
        #[arg(long, default_value_t = 1)]
        seed: u64,
    },
    /// Seed 000's section 5, file system on the chip (fsoc serve over 9P2000.L) against on the
    /// host (raw pages: fsoc serve --raw), on the same simulated chips, every figure computed
    /// from counted frames, chip time and CPU work: Fig. 15 (bytes on the bus per operation),
    /// Table 2 (1 MiB read, 500 creates, Andrew-like copy), the performance model Eqs. (1)-(4)
    /// against the read-then-compute workload (Figs. 7, 11, 12), and 4 KiB random reads at
    /// queue depth 1, 4 and 32 on 4 chips. Deterministic.
    Fsoc {
        /// Also write the results here as JSON, and two SVG charts beside it
        /// (NAME-model.svg, NAME-table2-queue.svg).
        #[arg(long)]
        json: Option<PathBuf>,
        /// Smaller runs (50 objects per operation, 256 KiB read, 50 creates, 256 queued reads).
        #[arg(long)]
        quick: bool,
        /// Seed of the simulated chips.
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// Add a "custom" setting with this bus bandwidth in MB/s (others from the modern one).
        #[arg(long)]
        bus_mb_s: Option<f64>,
        /// Add a "custom" setting with this bus latency per message in microseconds.
        #[arg(long)]
        bus_latency_us: Option<f64>,
        /// Add a "custom" setting with this host clock in MHz.
        #[arg(long)]
        host_mhz: Option<f64>,
        /// Add a "custom" setting with this device clock in MHz.
        #[arg(long)]
        device_mhz: Option<f64>,
        /// CPU cycles per file-system call, in every setting (default 5000).
        #[arg(long)]
        cycles_per_call: Option<f64>,
        /// CPU cycles per flash page the file system handles, in every setting (default 3000).
        #[arg(long)]
        cycles_per_page: Option<f64>,
        /// CPU cycles per protocol frame sent or received, in every setting (default 1000).
        #[arg(long)]
        cycles_per_message: Option<f64>,
    },
    /// Seed 003's file benchmark (15 samples × 133 files: create, open, delete) for fsoc and
    /// littlefs on the same simulated MLC chip.
    Fsio {
        /// Where to write the results as JSON.
        #[arg(long)]
        json: PathBuf,
        /// Seed of the simulated chip.
        #[arg(long, default_value_t = 1)]
        seed: u64,
    },
    /// fsoc through FUSE against ext4 on a loop device, on this machine (wall time): PostMark
    /// (seed 004), dbench, fio, a metadata storm and small writes (4-byte appends, 512-byte
    /// writes with fsync), each on a fresh fsoc mount and a fresh ext4 mount in turn. Needs root, /dev/fuse and a loop device; prints a table and writes JSON
    /// plus an SVG chart beside it.
    Fuse {
        /// Where to write every sample, the medians and the fsoc/ext4 ratios as JSON (the chart
        /// goes beside it, as .svg).
        #[arg(long)]
        json: PathBuf,
        /// Repetitions of every workload on each file system, 1 to 100 (default 3; 1 with
        /// --quick).
        #[arg(long, value_parser = clap::value_parser!(u32).range(1..=100))]
        reps: Option<u32>,
        /// Scaled-down workloads and one repetition: a smoke run of well under a minute.
        #[arg(long)]
        quick: bool,
        /// Size of each volume (the fsoc image and the ext4 image alike), with a K, M, G or T
        /// suffix.
        #[arg(long, default_value = "1G")]
        size: String,
        /// NAND profile of the fsoc image: slc, mlc, tlc, mlc8k or mlc16k.
        #[arg(long, default_value = "mlc", value_parser = arguments::profile)]
        profile: Profile,
        /// Comma-separated workloads to run: postmark, dbench, fio, metadata_storm,
        /// small_writes (default: all five).
        #[arg(long, value_delimiter = ',')]
        workloads: Vec<String>,
        /// How the fsoc mount talks with the kernel: io-uring (FUSE over io_uring, `-o
        /// io_uring`; the fuse module's enable_uring switch is turned on for the run and back
        /// off after; where the kernel has no such switch, /dev/fuse is used and the report
        /// says so) or dev-fuse (fsoc mount's default).
        #[arg(long, default_value = "io-uring", value_parser = ["io-uring", "dev-fuse"])]
        fuse_transport: String,
    },
    /// fsoc against UBI + UBIFS on the kernel's nandsim (real kernel, datasheet delays): mount
    /// page reads and time from 256 MiB to 8 GiB, durable small files, sequential I/O, PostMark;
    /// counted by kprobes. Needs root and nandsim: elsewhere run scripts/bench-mtd.sh.
    Mtd(mtd_bench_cmd::MtdBenchArgs),
    /// Seed 004's PostMark (10 directories, 1,000 files of 512 B-16 KiB, 10,000 transactions,
    /// 512-byte units) on the engine in simulated time: sync and async, NVRAM none, 1 KiB to
    /// 128 KiB and 1 MiB (FeRAM), and littlefs (sync) on the same MLC chip. Deterministic.
    Postmark {
        /// Also write the results here as JSON, and a chart beside it (.svg).
        #[arg(long)]
        json: Option<PathBuf>,
        /// 100 files, 1,000 transactions, NVRAM none, 1, 16 and 128 KiB (seconds).
        #[arg(long)]
        quick: bool,
        /// Seed of the workload, the simulated chip and the NVRAM.
        #[arg(long, default_value_t = 1)]
        seed: u64,
    },
    /// Mount cost (page reads, simulated time) against the number of files, fsoc beside
    /// littlefs; prints both and their ratio.
    Mount {
        /// Comma-separated file counts.
        #[arg(long, value_delimiter = ',', default_value = "10,1000,100000")]
        files: Vec<u64>,
        /// Also write the results as JSON here, and an SVG chart beside it (.svg).
        #[arg(long)]
        json: Option<PathBuf>,
        /// Seed of the simulated chip.
        #[arg(long, default_value_t = 1)]
        seed: u64,
    },
}

#[derive(Subcommand)]
enum FlashCommand {
    /// Creates a new (sparse) device image.
    Create {
        /// The image file to create.
        image: PathBuf,
        /// NAND profile: slc, mlc, tlc, mlc8k or mlc16k.
        #[arg(long, default_value = "mlc", value_parser = arguments::profile)]
        profile: Profile,
        /// Chips, 1 to 64.
        #[arg(long, default_value_t = 1, value_parser = arguments::chip_count)]
        chips: u32,
        /// Erase blocks per chip, 4 to 16777216 (1024 = 128 MiB per mlc chip; the file is sparse).
        #[arg(long, default_value_t = 1024, value_parser = arguments::block_count)]
        blocks: u32,
        /// Simulator seed (bit errors, factory bad blocks).
        #[arg(long, default_value_t = 1)]
        seed: u64,
    },
    /// Describes a device image: geometry, profile, chips, wear summary.
    Info {
        /// The image file.
        image: PathBuf,
    },
}

/// A command whose output goes to a pipe that closes early (`fsoc info IMAGE | head`) ends
/// quietly with status 0, as `fsoc ls` already did, instead of panicking in `println!` on
/// EPIPE: the panic that `println!` raises for a closed stdout exits instead. Not for the
/// servers (`mount`, `serve`), which print nothing their clients read.
fn exit_quietly_on_closed_stdout() {
    let default_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let message = info
            .payload()
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| info.payload().downcast_ref::<&str>().copied())
            .unwrap_or("");
        if message.starts_with("failed printing to stdout") && message.contains("Broken pipe") {
            std::process::exit(0);
        }
        default_hook(info);
    }));
}

fn main() -> ExitCode {
    // Started as mount.fuse.fsoc or umount.fuse.fsoc (links to this program): mount(8)'s helper.
    if let Some(code) = fuse_cmd::run_as_helper() {
        return code;
    }
    let cli = Cli::parse();
    if !matches!(cli.command, Command::Mount(_) | Command::Serve(_)) {
        exit_quietly_on_closed_stdout();
    }
    let result = match cli.command {
        Command::Demo { profile, chips, seed } => volume_cmd::demo(profile, chips, seed),
        Command::Flash { command: FlashCommand::Create { image, profile, chips, blocks, seed } } => {
            flash_cmd::create(&image, profile, chips, blocks, seed).map(|text| println!("{text}"))
        }
        Command::Flash { command: FlashCommand::Info { image } } => {
            flash_cmd::info(&image).map(|text| println!("{text}"))
        }
        Command::Mkfs {
            image,
            profile,
            chips,
            blocks,
            size,
            seed,
            volume_id,
            force,
            label,
            from,
            squash_uids,
            uid_map,
            gid_map,
            free_margin,
            nvram,
            nvram_technology,
            redundancy,
        } => {
            let from = from.map(|from| image_build::BuildOptions {
                from,
                squash_uids,
                uid_map: uid_map.unwrap_or_default(),
                gid_map: gid_map.unwrap_or_default(),
                free_margin_percent: free_margin,
            });
            volume_cmd::mkfs(
                &image,
                &volume_cmd::MkfsOptions {
                    profile,
                    chips,
                    blocks,
                    size,
                    seed,
                    volume_id,
                    force,
                    label,
                    from,
                    nvram: nvram.map(|size| (size, nvram_technology)),
                    redundancy,
                },
            )
        }
        Command::Label { image, new } => volume_cmd::label(&image, new.as_deref()),
        Command::Info { image } => volume_cmd::info(&image),
        Command::Fsck { image, metadata_only, data: _ } => match volume_cmd::fsck(&image, !metadata_only) {
            Ok(true) => Ok(()),
            Ok(false) => return ExitCode::from(1),
            Err(error) => Err(error),
        },
        Command::Scrub { image, check_only } => match volume_cmd::scrub(&image, !check_only) {
            Ok(true) => Ok(()),
            Ok(false) => return ExitCode::from(1),
            Err(error) => Err(error),
        },
        Command::Rebuild { volume, chip, replacement } => {
            match rebuild_cmd::rebuild(&volume, chip, replacement.as_deref()) {
                Ok(true) => Ok(()),
                Ok(false) => return ExitCode::from(1),
                Err(error) => Err(error),
            }
        }
        Command::Crashtest {
            workload,
            seed,
            json,
            max_cuts,
            cut_after,
            nvram,
            nvram_cut_after,
            profile,
            chips,
            blocks,
            unstable_bits,
            paired_pages,
            scale,
            bad_blocks_every,
            redundancy,
            chip_loss,
        } => {
            let options = volume_cmd::CrashOptions {
                seed,
                profile,
                chips,
                blocks,
                unstable_bits,
                paired_pages,
                scale,
                redundancy: redundancy.unwrap_or_default(),
            };
            let failures = match (bad_blocks_every, chip_loss) {
                (_, Some(samples)) => volume_cmd::chip_loss_crashtest(
                    &workload.0,
                    &volume_cmd::CrashOptions {
                        redundancy: redundancy.unwrap_or(fsoc_core::segment::Redundancy::Parity),
                        ..options
                    },
                    samples,
                    json.as_deref(),
                ),
                (Some(stride), None) => volume_cmd::bad_block_crashtest(&workload.0, &options, stride, json.as_deref()),
                (None, None) => {
                    let cut =
                        cut_after.map(fsoc_sim::CutPoint::Flash).or(nvram_cut_after.map(fsoc_sim::CutPoint::Nvram));
                    volume_cmd::crashtest(&workload.0, &options, json.as_deref(), max_cuts, cut, nvram.as_deref())
                }
            };
            match failures {
                Ok(0) => Ok(()),
                Ok(_) => return ExitCode::from(1),
                Err(error) => Err(error),
            }
        }
        #[cfg(feature = "lab")]
        Command::Bench { command: BenchCommand::Scaling { json, quick, seed, no_paired_page_guard } } => {
            let options = fsoc_bench::scaling::ScalingOptions { quick, seed, paired_page_guard: !no_paired_page_guard };
            bench_cmd::scaling(&json, &options)
        }
        #[cfg(feature = "lab")]
        Command::Bench { command: BenchCommand::Fsio { json, seed } } => bench_cmd::fsio(&json, seed),
        #[cfg(feature = "lab")]
        Command::Bench { command: BenchCommand::Readers { json, quick, seed } } => {
            bench_cmd::readers(json.as_deref(), quick, seed)
        }
        #[cfg(feature = "lab")]
        Command::Bench {
            command:
                BenchCommand::Fsoc {
                    json,
                    quick,
                    seed,
                    bus_mb_s,
                    bus_latency_us,
                    host_mhz,
                    device_mhz,
                    cycles_per_call,
                    cycles_per_page,
                    cycles_per_message,
                },
        } => {
            let options = fsoc_bench::on_chip::SettingOptions {
                bus_mb_s,
                bus_latency_us,
                host_mhz,
                device_mhz,
                cycles_per_call,
                cycles_per_page,
                cycles_per_message,
            };
            bench_fsoc_cmd::run(json.as_deref(), quick, seed, &options)
        }
        #[cfg(feature = "lab")]
        Command::Bench { command: BenchCommand::Postmark { json, quick, seed } } => {
            bench_postmark_cmd::run(json.as_deref(), quick, seed)
        }
        #[cfg(feature = "lab")]
        Command::Bench { command: BenchCommand::Mount { files, json, seed } } => {
            bench_cmd::mount(&files, json.as_deref(), seed)
        }
        #[cfg(feature = "lab")]
        Command::Bench {
            command: BenchCommand::Fuse { json, reps, quick, size, profile, workloads, fuse_transport },
        } => bench_cmd::fuse(&json, reps, quick, size, profile, workloads, fuse_transport == "io-uring"),
        #[cfg(feature = "lab")]
        Command::Bench { command: BenchCommand::Mtd(arguments) } => mtd_bench_cmd::run(arguments),
        Command::Array {
            command: ArrayCommand::Mkfs { base, profile, chips, blocks, seed, volume_id, force, redundancy },
        } => array_cmd::mkfs(
            &base,
            &array_cmd::ArrayMkfsOptions { profile, chips, blocks, seed, volume_id, force, redundancy },
        ),
        Command::Array { command: ArrayCommand::Info { base, chip_files } } => {
            array_cmd::info(base.as_deref(), &chip_files)
        }
        #[cfg(feature = "lab")]
        Command::Report(arguments) => report_cmd::run(arguments),
        Command::Mount(command) => fuse_cmd::run(command),
        Command::Serve(arguments) => serve_cmd::run(arguments),
        Command::Tool(command) => tools_cmd::run(command),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("fsoc: {message}");
            ExitCode::from(2)
        }
    }
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    /// Every option and argument of every subcommand says what it is (`fsoc X --help`).
    #[test]
    fn every_option_is_described() {
        let mut undocumented = Vec::new();
        let mut pending = vec![(String::from("fsoc"), super::Cli::command())];
        while let Some((path, command)) = pending.pop() {
            for argument in command.get_arguments() {
                let id = argument.get_id().as_str();
                if argument.get_help().is_none() && !["help", "version"].contains(&id) {
                    undocumented.push(format!("{path} {id}"));
                }
            }
            for subcommand in command.get_subcommands() {
                pending.push((format!("{path} {}", subcommand.get_name()), subcommand.clone()));
            }
        }
        assert!(undocumented.is_empty(), "options without a description: {undocumented:?}");
    }

    /// `crashtest --help` names every workload `all` runs, and counts them right.
    #[test]
    fn crashtest_help_lists_every_workload() {
        let help = super::Cli::command().find_subcommand_mut("crashtest").expect("crashtest").render_help().to_string();
        for workload in fsoc_sim::workloads::Workload::ALL {
            assert!(help.contains(workload.name()), "crashtest --help omits {}:\n{help}", workload.name());
        }
        assert_eq!(fsoc_sim::workloads::Workload::ALL.len(), 8, "the help says \"all eight\"");
        assert!(help.contains("all eight"), "{help}");
    }
}
