//! `fsoc array`: volumes kept as one image file per chip (`BASE.chip0` … `BASE.chip{p-1}`),
//! driven by fsoc-array's worker threads. `mkfs` creates and formats such an array; `info`
//! mounts one (read-only) and shows what mount found, or why the chips do not belong together.

use std::path::{Path, PathBuf};

use fsoc_array::{chip_file_path, chip_file_paths, ArrayConfig, ThreadedFlash};
use fsoc_core::segment::Redundancy;
use fsoc_core::FileSystem;
use fsoc_media::{Flash, Profile, SimConfig};

use crate::volume_files::{self, OpenVolume, VolumeFiles};

/// What `fsoc array mkfs` was asked for.
pub struct ArrayMkfsOptions {
    pub profile: Profile,
    pub chips: u32,
    pub blocks: u32,
    pub seed: u64,
    pub volume_id: Option<u64>,
    pub force: bool,
    /// `--redundancy`: with parity, any one chip file may be lost and rebuilt (`fsoc rebuild`).
    pub redundancy: Redundancy,
}

/// Creates `BASE.chip0` … `BASE.chip{chips-1}`. The chips are formatted in temporary files
/// beside them and renamed into place only once the volume is complete and closed, so a
/// failure leaves no chip files behind and never damages an existing array; `--force` refuses
/// an array that is mounted or in use.
pub fn mkfs(base: &Path, options: &ArrayMkfsOptions) -> Result<(), String> {
    let &ArrayMkfsOptions { profile, chips, blocks, seed, volume_id, force, redundancy } = options;
    if let Some(refusal) = crate::volume_cmd::redundancy_refusal(profile, chips, redundancy) {
        return Err(format!("{}: {refusal}", base.display()));
    }
    if let Some(refusal) = crate::volume_cmd::volume_size_refusal(profile, chips, blocks) {
        return Err(format!("{}: {refusal}", base.display()));
    }
    // Device nodes, FIFOs and directories are never replaced by a chip file.
    for chip in 0..chips {
        volume_files::check_volume_path(&chip_file_path(base, chip))?;
    }
    let existing = chip_file_paths(base);
    if !existing.is_empty() && !force {
        return Err(format!("{} exists; pass --force to replace the array", existing[0].display()));
    }
    let _locks = existing.iter().map(|path| volume_files::lock_image(path, true)).collect::<Result<Vec<_>, _>>()?;
    let volume_id = crate::volume_cmd::new_volume_id(volume_id, seed)?;
    let final_paths: Vec<PathBuf> = (0..chips).map(|chip| chip_file_path(base, chip)).collect();
    let temporary_paths: Vec<PathBuf> =
        final_paths.iter().map(|path| temporary_path(path)).collect::<Result<_, _>>()?;
    let formatted = (|| {
        let config = SimConfig::new(profile, chips, blocks, seed);
        let flash = ThreadedFlash::create_files(&temporary_paths, config, ArrayConfig::default())
            .map_err(|error| format!("{}: {error}", base.display()))?;
        let config = crate::volume_cmd::format_config(redundancy);
        let fs = FileSystem::format(flash, config, volume_id).map_err(|error| format!("format: {error}"))?;
        let flash = fs.unmount().map_err(|error| format!("unmount: {error}"))?;
        flash.close().map_err(|error| format!("close: {error}"))
    })();
    if let Err(message) = formatted {
        for path in &temporary_paths {
            let _ = std::fs::remove_file(path);
        }
        return Err(message);
    }
    for (temporary, path) in temporary_paths.iter().zip(&final_paths) {
        std::fs::rename(temporary, path).map_err(|error| format!("{}: {error}", path.display()))?;
    }
    // Old chip files beyond the new count would look like extra chips later: remove them.
    for path in existing.iter().skip(final_paths.len()) {
        std::fs::remove_file(path).map_err(|error| format!("{}: {error}", path.display()))?;
    }
    let block_bytes = profile.geometry(1).block_data_bytes();
    println!(
        "formatted {} … {}: {} ({chips} chips × {blocks} blocks × {} KiB, one file and one worker thread per chip), \
         volume id {volume_id:#018x}",
        chip_file_path(base, 0).display(),
        chip_file_path(base, chips - 1).display(),
        profile.name(),
        block_bytes / 1024
    );
    if redundancy != Redundancy::None {
        println!("redundancy: {}", crate::volume_cmd::redundancy_text(redundancy, chips));
    }
    Ok(())
}

/// A name beside `path` for building it: hidden, and unique to this process.
fn temporary_path(path: &Path) -> Result<PathBuf, String> {
    let name = path.file_name().ok_or_else(|| format!("{}: not a file name", path.display()))?;
    Ok(path.with_file_name(format!(".{}.mkfs-{}", name.to_string_lossy(), std::process::id())))
}

/// Mounts the array read-only: `chip_files` in that order, or `BASE.chip0, …` when empty.
pub fn info(base: Option<&Path>, chip_files: &[PathBuf]) -> Result<(), String> {
    let paths = match (base, chip_files.is_empty()) {
        (Some(base), true) => chip_file_paths(base),
        (None, false) => chip_files.to_vec(),
        _ => return Err("give BASE or --chip-file (repeated, in chip order), not both".into()),
    };
    if paths.is_empty() {
        return Err(format!(
            "no chip files {}.chip0, … found",
            base.map(|b| b.display().to_string()).unwrap_or_default()
        ));
    }
    // The one path that opens volumes: locked first (so a mounted array is refused), read-only.
    let base = base.map_or_else(|| paths[0].clone(), Path::to_path_buf);
    let OpenVolume { mut fs, locks: _locks, files } =
        volume_files::open_files(VolumeFiles::Array { base, chips: paths.clone() }, true, false)?;
    let report = fs.mount_report();
    let statfs = fs.statfs().map_err(|error| format!("statfs: {error}"))?;
    let layout = fs.layout();
    println!("volume id         {:#018x}", fs.superblock().volume_id);
    for (chip, path) in paths.iter().enumerate() {
        println!("chip {chip:<3}          {}", path.display());
    }
    println!(
        "geometry          {} chips × {} blocks × {} pages × {} B; stripe = {} pages",
        layout.chip_count,
        layout.geometry.block_count,
        layout.geometry.pages_per_block,
        layout.geometry.page_data_bytes,
        layout.pages_per_segment()
    );
    println!("redundancy        {}", crate::volume_cmd::redundancy_text(fs.superblock().redundancy, layout.chip_count));
    if let Some(degraded) = crate::volume_cmd::degraded_text(&fs, files.name()) {
        println!("degraded          {degraded}");
    }
    println!("commit counter    {}", report.commit_counter);
    println!("mount page reads  {} ({} superblocks, one per chip)", report.page_reads, layout.chip_count);
    println!("space             {} of {} pages free", statfs.free_blocks, statfs.total_blocks);
    let flash = fs.into_flash_without_commit();
    let busy_ns = flash.all_done_ns();
    flash.close().map_err(|error| format!("close: {error}"))?;
    println!("mount time        {:.3} ms simulated", busy_ns as f64 / 1e6);
    Ok(())
}
