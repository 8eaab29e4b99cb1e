//! Peer benchmarks: fsoc and littlefs run the same workloads behind one `BenchTarget` trait,
//! on identical simulated NAND (same profile, geometry and seed), and report flash operations,
//! simulated time and fsoc ÷ littlefs ratios as JSON (STYLE §10).
//!
//! - `run_fsio(seed)`: seed 003's create/open/delete benchmark (`fsio`), shape
//!   `{"fs": {"fsoc": {"create": [{"reads", "programs", "erases", "sim_us"}; 15], "open": [..],
//!   "delete": [..]}, "littlefs": {..}}, "config": {..}, "summary": {..}}`.
//! - `postmark::run(&PostmarkConfig::full(seed), ..)`: seed 004's PostMark on fsoc with and
//!   without an NVRAM commit tier (sync and async) and on littlefs (sync), shape
//!   `{"runs": [{"target", "variant", "nvram_bytes", "elapsed_us", "flash_programs", ..}],
//!   "targets": {..}, "seed_004": {..}, "config": {..}, "workload": {..}}`.
//! - `scaling::run(&ScalingOptions { quick, seed, paired_page_guard }, ..)`: seed 001's
//!   IOzone record sweep on 1, 2, 4 and 8 chips, SLC/MLC/TLC (fsoc alone, beside the
//!   array's physical limit); `Report::to_json` and `Report::svg` give the file and its chart.
//! - `fuse::run(&FuseOptions, ..)`: fsoc through FUSE (the `fsoc` executable's `mount`) against
//!   ext4 on a loop device, wall time on this machine (root, /dev/fuse, a loop device).
//! - `mtd::run(&MtdOptions, ..)`: fsoc against UBI + UBIFS on the kernel's nandsim, counted by
//!   kprobes (root, a kernel with nandsim: scripts/bench-mtd.sh boots one under QEMU).
//! - `run_mount(files, seed)`: mount cost against file count, shape
//!   `{"mounts": [{"files", "page_reads", "sim_us", ..}], "littlefs": [..],
//!   "littlefs_skipped_above": N, "config": {..}}`.
//!
//! Simulated time is deterministic: the same seed gives the same numbers. Wall times (in
//! `summary.wall_ms` and the mount report's `wall_ms`) are not.
//!
//! Both file systems run on one MLC chip of 4096 blocks (512 MiB, 2 KiB pages, 64 pages per
//! block), the size at which littlefs fits the fsio workload (see `fsio::FsioConfig::full`).
//! littlefs uses `LittlefsConfig::BENCHMARK`, the fastest configuration found for it.
//! `examples/bench.rs` runs both benchmarks from the command line.

pub mod fsio;
pub mod fsoc;
pub mod fuse;
pub mod littlefs;
pub mod mount;
pub mod mtd;
pub mod on_chip;
pub mod postmark;
pub mod readers;
pub mod scaling;
pub mod svg_chart;
pub mod target;

pub use crate::fsoc::FsocTarget;
pub use crate::littlefs::{LittlefsConfig, LittlefsCrateTarget, LittlefsTarget};
pub use crate::target::{BenchDevice, BenchError, BenchTarget, Durability, Measurement, Snapshot};

/// The full fsio benchmark (15 × 133 files of 1 KiB, MLC, one 512 MiB chip).
pub fn run_fsio(seed: u64) -> Result<serde_json::Value, BenchError> {
    fsio::run(&fsio::FsioConfig::full(seed), &mut |_| {})
}

/// `run_fsio` with a progress callback that receives one line per phase.
pub fn run_fsio_with_progress(seed: u64, progress: &mut dyn FnMut(&str)) -> Result<serde_json::Value, BenchError> {
    fsio::run(&fsio::FsioConfig::full(seed), progress)
}

/// Mount cost for each file count in `files` (fsoc for all, littlefs up to
/// `mount::LITTLEFS_FILES_MAX` = 10,000; the report says so in `littlefs_skipped_above`).
pub fn run_mount(files: &[u64], seed: u64) -> Result<serde_json::Value, BenchError> {
    mount::run(&mount::MountConfig::new(files, seed), &mut |_| {})
}

/// `run_mount` with a progress callback that receives one line per target and file count.
pub fn run_mount_with_progress(
    files: &[u64],
    seed: u64,
    progress: &mut dyn FnMut(&str),
) -> Result<serde_json::Value, BenchError> {
    mount::run(&mount::MountConfig::new(files, seed), progress)
}
