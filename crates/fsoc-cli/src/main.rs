//! The `fsoc` command: simulator demo, image tools, checker, crash test and benchmarks.

mod array_cmd;
mod bench_cmd;
mod flash_cmd;
mod fuse_cmd;
mod names;
mod scaling_cmd;
mod tools_cmd;
mod volume_cmd;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

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
        #[arg(long, default_value = "mlc")]
        profile: String,
        #[arg(long, default_value_t = 4)]
        chips: u32,
        #[arg(long, default_value_t = 1)]
        seed: u64,
    },
    /// Simulated NAND device images.
    Flash {
        #[command(subcommand)]
        command: FlashCommand,
    },
    /// Creates an image file holding a freshly formatted fsoc volume.
    Mkfs {
        image: PathBuf,
        #[arg(long, default_value = "mlc")]
        profile: String,
        #[arg(long, default_value_t = 1)]
        chips: u32,
        /// Erase blocks per chip (default: enough for --size, else 512).
        #[arg(long)]
        blocks: Option<u32>,
        /// Volume size, e.g. 64M or 1G (sets --blocks).
        #[arg(long)]
        size: Option<String>,
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// Replace an existing file.
        #[arg(long)]
        force: bool,
    },
    /// Describes a volume: geometry, usage, wear, transaction counter.
    Info { image: PathBuf },
    /// Checks every invariant of a volume; exit status 1 if any is violated.
    Fsck { image: PathBuf },
    /// Power-cut test: cut power at every flash operation of a workload and check recovery.
    Crashtest {
        /// small-files, overwrite, rename-storm, deep-tree, fill-delete, cleaner, or all.
        #[arg(long, default_value = "all")]
        workload: String,
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// Write the result as JSON here.
        #[arg(long)]
        json: Option<PathBuf>,
        /// Cut at most this many points per workload (seeded sample); default: every one.
        #[arg(long)]
        max_cuts: Option<u64>,
        /// Replay a single cut point (from a failure's replay line).
        #[arg(long)]
        cut_after: Option<u64>,
        #[arg(long, default_value = "mlc")]
        profile: String,
        #[arg(long, default_value_t = 1)]
        chips: u32,
        #[arg(long, default_value_t = 40)]
        blocks: u32,
        /// Also let torn pages read back correctly once (unstable-bits hazard).
        #[arg(long)]
        unstable_bits: bool,
        /// Also let a cut program corrupt its paired lower page (MLC/TLC), with fsoc's guard on.
        #[arg(long)]
        paired_pages: bool,
    },
    /// Benchmarks (simulated device time; results as JSON plus an SVG chart beside it).
    Bench {
        #[command(subcommand)]
        command: BenchCommand,
    },
    /// Volumes kept as one image file per chip (BASE.chip0, BASE.chip1, …), one thread each.
    Array {
        #[command(subcommand)]
        command: ArrayCommand,
    },
    #[command(flatten)]
    Mount(fuse_cmd::MountCommand),
    #[command(flatten)]
    Tool(tools_cmd::ToolCommand),
}

#[derive(Subcommand)]
enum ArrayCommand {
    /// Creates BASE.chip0 … BASE.chip{P-1} holding a freshly formatted volume.
    Mkfs {
        base: PathBuf,
        #[arg(long, default_value = "mlc")]
        profile: String,
        #[arg(long, default_value_t = 4)]
        chips: u32,
        /// Erase blocks per chip.
        #[arg(long, default_value_t = 512)]
        blocks: u32,
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// Replace existing chip files.
        #[arg(long)]
        force: bool,
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
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// Turn off the paired-page guard (pages skipped after each commit), to measure its cost.
        #[arg(long)]
        no_paired_page_guard: bool,
    },
    /// Seed 003's file benchmark (15 samples × 133 files: create, open, delete) for fsoc and
    /// littlefs on the same simulated MLC chip.
    Fsio {
        #[arg(long)]
        json: PathBuf,
        #[arg(long, default_value_t = 1)]
        seed: u64,
    },
    /// Mount cost (page reads, simulated time) against the number of files.
    Mount {
        /// Comma-separated file counts.
        #[arg(long, value_delimiter = ',', default_value = "10,1000,100000")]
        files: Vec<u64>,
        #[arg(long)]
        json: PathBuf,
        #[arg(long, default_value_t = 1)]
        seed: u64,
    },
}

#[derive(Subcommand)]
enum FlashCommand {
    /// Creates a new (sparse) device image.
    Create {
        image: PathBuf,
        #[arg(long, default_value = "mlc")]
        profile: String,
        #[arg(long, default_value_t = 1)]
        chips: u32,
        #[arg(long, default_value_t = 1024)]
        blocks: u32,
        #[arg(long, default_value_t = 1)]
        seed: u64,
    },
    /// Describes a device image: geometry, profile, chips, wear summary.
    Info { image: PathBuf },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Demo { profile, chips, seed } => volume_cmd::demo(&profile, chips, seed),
        Command::Flash { command: FlashCommand::Create { image, profile, chips, blocks, seed } } => {
            flash_cmd::create(&image, &profile, chips, blocks, seed).map(|text| println!("{text}"))
        }
        Command::Flash { command: FlashCommand::Info { image } } => flash_cmd::info(&image).map(|text| println!("{text}")),
        Command::Mkfs { image, profile, chips, blocks, size, seed, force } => {
            volume_cmd::mkfs(&image, &profile, chips, blocks, size.as_deref(), seed, force)
        }
        Command::Info { image } => volume_cmd::info(&image),
        Command::Fsck { image } => match volume_cmd::fsck(&image) {
            Ok(true) => Ok(()),
            Ok(false) => return ExitCode::from(1),
            Err(error) => Err(error),
        },
        Command::Crashtest { workload, seed, json, max_cuts, cut_after, profile, chips, blocks, unstable_bits, paired_pages } => {
            match volume_cmd::crashtest(&workload, seed, json.as_deref(), max_cuts, cut_after, &profile, chips, blocks, unstable_bits, paired_pages) {
                Ok(0) => Ok(()),
                Ok(_) => return ExitCode::from(1),
                Err(error) => Err(error),
            }
        }
        Command::Bench { command: BenchCommand::Scaling { json, quick, seed, no_paired_page_guard } } => {
            scaling_cmd::run(&json, quick, seed, !no_paired_page_guard)
        }
        Command::Bench { command: BenchCommand::Fsio { json, seed } } => bench_cmd::fsio(&json, seed),
        Command::Bench { command: BenchCommand::Mount { files, json, seed } } => bench_cmd::mount(&files, &json, seed),
        Command::Array { command: ArrayCommand::Mkfs { base, profile, chips, blocks, seed, force } } => {
            array_cmd::mkfs(&base, &profile, chips, blocks, seed, force)
        }
        Command::Array { command: ArrayCommand::Info { base, chip_files } } => array_cmd::info(base.as_deref(), &chip_files),
        Command::Mount(command) => fuse_cmd::run(command),
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
