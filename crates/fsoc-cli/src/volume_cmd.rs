//! Volume commands: demo, mkfs, info, fsck, crashtest.

use fsoc_media::FlashStats;
use std::path::Path;
use std::time::Instant;

use fsoc_core::fs::FsError;
use fsoc_core::segment::Redundancy;
use fsoc_core::{FileSystem, FsConfig, OpenFlags};
use fsoc_media::image::ImageStore;
use fsoc_media::{BlockAddress, Flash, NandError, PageAddress, Profile, SimConfig, SimFlash};
use fsoc_sim::workloads::Workload;
use fsoc_sim::{crash_test, CrashConfig};
use indicatif::{ProgressBar, ProgressStyle};

type ImageFlash = SimFlash<ImageStore>;

/// Parses sizes like 4096, 64K, 64M, 1G, 2T (binary units; a trailing B or iB is accepted).
pub fn parse_size(text: &str) -> Result<u64, String> {
    let text = text.trim();
    let bare = text.trim_end_matches(['b', 'B']).trim_end_matches('i');
    let (digits, multiplier) = match bare.chars().last().map(|c| c.to_ascii_uppercase()) {
        Some('K') => (&bare[..bare.len() - 1], 1u64 << 10),
        Some('M') => (&bare[..bare.len() - 1], 1 << 20),
        Some('G') => (&bare[..bare.len() - 1], 1 << 30),
        Some('T') => (&bare[..bare.len() - 1], 1 << 40),
        _ => (bare, 1),
    };
    let value: u64 = digits.trim().parse().map_err(|_| format!("invalid size {text:?} (examples: 8M, 1G, 2T)"))?;
    value.checked_mul(multiplier).ok_or_else(|| format!("size {text:?} is too large"))
}

fn spinner(message: &str) -> ProgressBar {
    let bar = ProgressBar::new_spinner();
    bar.set_message(message.to_string());
    bar.enable_steady_tick(std::time::Duration::from_millis(120));
    bar
}

/// Opens a volume (an image or an array's chip files) read-only for fsck or info: one rule
/// with the image tools, so a mounted volume (locked exclusively by its server) is refused
/// instead of being read while it changes.
fn open_read_only(path: &Path) -> Result<crate::volume_files::OpenVolume, String> {
    crate::volume_files::open(path, true, false)
}

/// What `fsoc mkfs` was asked for.
pub struct MkfsOptions {
    pub profile: Profile,
    pub chips: u32,
    pub blocks: Option<u32>,
    pub size: Option<String>,
    pub seed: u64,
    pub volume_id: Option<u64>,
    pub force: bool,
    pub label: Option<String>,
    /// `--from DIR`: build the volume holding DIR (image_build.rs).
    pub from: Option<crate::image_build::BuildOptions>,
    /// `--nvram SIZE` and its technology: keep transaction points in `IMAGE.nvram`.
    pub nvram: Option<(String, fsoc_media::NvramTechnology)>,
    /// `--redundancy`: what the volume keeps so that it survives the loss of one chip.
    pub redundancy: Redundancy,
}

/// The configuration a new volume is formatted with: the defaults, with `redundancy`.
pub(crate) fn format_config(redundancy: Redundancy) -> FsConfig {
    let mut config = FsConfig::default();
    config.volume.redundancy = redundancy;
    config
}

/// Why a volume of `chips` chips of `profile` cannot have `redundancy`, in user terms, or
/// `None` if it can (or needs none). Checked before anything is created; beyond the chip count,
/// the words are the format's own (a mode not built yet).
pub(crate) fn redundancy_refusal(profile: Profile, chips: u32, redundancy: Redundancy) -> Option<String> {
    if redundancy == Redundancy::None {
        return None;
    }
    if chips < 2 {
        return Some(format!(
            "--redundancy {}: needs --chips 2 or more: what protects a chip's pages is kept on the other chips, so one \
             chip can be rebuilt from the rest",
            redundancy.name()
        ));
    }
    // The smallest volume the format allows without redundancy: any refusal left is the mode's.
    let (blocks, _) = block_count_range(profile, chips);
    let config = format_config(redundancy).volume;
    let layout = fsoc_core::segment::Layout::new(profile.geometry(blocks), chips);
    fsoc_core::txn::Volume::<ImageFlash>::format_refusal(&layout, &config).map(|reason| {
        format!("--redundancy {}: {}", redundancy.name(), fsoc_core::txn::TxnError::CannotFormat { reason })
    })
}

/// What `fsoc info` says of a volume's redundancy.
pub(crate) fn redundancy_text(redundancy: Redundancy, chips: u32) -> String {
    match redundancy {
        Redundancy::None => "none".to_string(),
        Redundancy::Parity => format!(
            "parity (one parity page per row of {chips} chips: capacity {}/{chips}; any one chip may be lost)",
            chips.saturating_sub(1)
        ),
        Redundancy::MirrorMeta => "mirror-meta (tree nodes, segment table and metaroots on two chips, file data \
                                   once; any one chip may be lost with every name still listed)"
            .to_string(),
    }
}

/// The line that says a volume runs without one of its chips, or `None` when it has them all.
pub(crate) fn degraded_text<F: Flash>(fs: &FileSystem<F>, name: &Path) -> Option<String> {
    fs.missing_chip().map(|chip| {
        if fs.layout().mirrors_metadata() {
            return format!(
                "chip {chip} is missing or dead: the volume is degraded and read-only; its tree nodes are read from \
                 their second copies, so every name is listed, but file data that was on chip {chip} is lost (EIO): \
                 copy the files off {} to a new volume (mirror-meta cannot rebuild a chip)",
                name.display()
            );
        }
        format!(
            "chip {chip} is missing or dead: the volume is degraded and read-only; every page of it is rebuilt from \
             the other chips; run `fsoc rebuild {} --chip {chip}`",
            name.display()
        )
    })
}

/// Checks a label before anything is written (the core refuses the same, later).
fn check_label(label: &str) -> Result<(), String> {
    if label.len() > fsoc_core::fs::records::LABEL_BYTES_MAX {
        return Err(format!("label of {} bytes: a label holds at most 255 bytes", label.len()));
    }
    if label.contains('\0') {
        return Err("a label may not hold a NUL byte".into());
    }
    Ok(())
}

/// Sets the label of a volume just formatted (no-op without one).
pub(crate) fn set_new_label<F: fsoc_media::Flash>(fs: &mut FileSystem<F>, label: Option<&str>) -> Result<(), String> {
    match label {
        Some(label) if !label.is_empty() => fs.set_label(label.as_bytes()).map_err(|error| format!("label: {error}")),
        _ => Ok(()),
    }
}

/// `fsoc label IMAGE [NEW]`: prints the label (an empty line when none is set) or sets it.
pub fn label(image: &Path, new: Option<&str>) -> Result<(), String> {
    if let Some(label) = new {
        check_label(label)?;
    }
    let crate::volume_files::OpenVolume { files, mut fs, locks: _locks } =
        crate::volume_files::open(image, new.is_none(), new.is_some())?;
    match new {
        None => {
            let label = fs.label().map_err(|error| format!("{}: {error}", files.name().display()))?;
            println!("{}", String::from_utf8_lossy(&label));
        }
        Some(label) => {
            fs.set_label(label.as_bytes()).map_err(|error| format!("{}: {error}", files.name().display()))?;
        }
    }
    crate::volume_files::close(fs, files.name())
}

/// Erase blocks per chip a volume of this profile and chip count may have: (smallest,
/// largest), by the format's own rule.
pub(crate) fn block_count_range(profile: Profile, chips: u32) -> (u32, u32) {
    fsoc_core::txn::Volume::<ImageFlash>::block_count_range(
        |blocks| profile.geometry(blocks),
        chips,
        &FsConfig::default().volume,
    )
}

/// Why a volume of `blocks` erase blocks per chip cannot be formatted, in user terms (sizes
/// first, erase blocks second), or `None` if it can.
pub fn volume_size_refusal(profile: Profile, chips: u32, blocks: u32) -> Option<String> {
    let (blocks_min, blocks_max) = block_count_range(profile, chips);
    if (blocks_min..=blocks_max).contains(&blocks) {
        return None;
    }
    let block_bytes = profile.geometry(1).block_data_bytes();
    let volume_bytes = |blocks: u32| u64::from(blocks) * u64::from(chips) * block_bytes;
    Some(format!(
        "a {} volume on {chips} chip(s) must be {} to {} ({blocks_min} to {blocks_max} erase blocks of {} KiB per \
         chip); {} ({blocks} blocks per chip) was asked for",
        profile.name(),
        size_text(volume_bytes(blocks_min)),
        size_text(volume_bytes(blocks_max)),
        block_bytes / 1024,
        size_text(volume_bytes(blocks))
    ))
}

pub(crate) fn size_text(bytes: u64) -> String {
    match bytes {
        bytes if bytes >= 1 << 40 => format!("{:.1}T", bytes as f64 / (1u64 << 40) as f64),
        bytes if bytes >= 1 << 30 => format!("{:.1}G", bytes as f64 / (1u64 << 30) as f64),
        bytes if bytes >= 1 << 20 => format!("{:.1}M", bytes as f64 / (1u64 << 20) as f64),
        bytes => format!("{}K", bytes >> 10),
    }
}

pub use fsoc_media::image::{new_volume_id, source_date_epoch};

pub fn mkfs(image: &Path, options: &MkfsOptions) -> Result<(), String> {
    if let Some(devices) = crate::volume_files::mtd_devices(image) {
        if options.from.is_some() {
            return Err(format!(
                "{}: --from builds image files; build one and copy it to the flash, or mount the MTD volume and copy \
                 the tree in",
                image.display()
            ));
        }
        return mkfs_mtd(image, &devices, options);
    }
    // A device node, FIFO or directory is refused here, before anything is created beside it
    // or renamed over it.
    crate::volume_files::check_volume_path(image)?;
    let profile = options.profile;
    let chips = options.chips;
    let block_bytes = profile.geometry(1).block_data_bytes();
    let blocks = match (options.blocks, options.size.as_deref()) {
        (Some(_), Some(_)) => return Err("give --blocks or --size, not both".into()),
        (Some(blocks), None) => Some(blocks),
        (None, Some(size)) if size.eq_ignore_ascii_case("auto") => {
            if options.from.is_none() {
                return Err("--size auto sizes the volume for a tree: give --from DIR too".into());
            }
            None
        }
        (None, Some(size)) => {
            let bytes = parse_size(size)?;
            let per_chip = bytes / u64::from(chips);
            Some(u32::try_from(per_chip.div_ceil(block_bytes)).unwrap_or(u32::MAX))
        }
        (None, None) => Some(512),
    };
    if let Some(refusal) = redundancy_refusal(profile, chips, options.redundancy) {
        return Err(format!("{}: {refusal}", image.display()));
    }
    if let Some(refusal) = blocks.and_then(|blocks| volume_size_refusal(profile, chips, blocks)) {
        return Err(format!("{}: {refusal}", image.display()));
    }
    if let Some(label) = &options.label {
        check_label(label)?;
    }
    if let Some(from) = &options.from {
        from.check_source(image)?;
    }
    // Never touch a mounted or busy image; keep the old one until the new one is complete.
    let _lock = if image.exists() {
        if !options.force {
            return Err(format!("{} exists; pass --force to replace it", image.display()));
        }
        Some(crate::volume_files::lock_image(image, true)?)
    } else {
        None
    };
    let volume_id = new_volume_id(options.volume_id, options.seed)?;
    let epoch = source_date_epoch()?;
    let now_ns = match epoch {
        Some(epoch) => i64::try_from(epoch).unwrap_or(i64::MAX).saturating_mul(1_000_000_000),
        None => crate::volume_files::wall_clock_ns(),
    };
    let file_name = image.file_name().ok_or_else(|| format!("{}: not a file name", image.display()))?;
    let temporary = image.with_file_name(format!(".{}.mkfs-{}", file_name.to_string_lossy(), std::process::id()));
    if let Some(from) = &options.from {
        let plan = crate::image_build::Plan {
            image,
            temporary: &temporary,
            options,
            volume_id,
            now_ns,
            time_max_ns: epoch.map(|_| now_ns),
        };
        let result = crate::image_build::build(&plan, from, blocks);
        if result.is_err() {
            let _ = std::fs::remove_file(&temporary);
        }
        return result;
    }
    let Some(blocks) = blocks else { return Err("--size auto needs --from DIR".into()) };
    let nvram_file = crate::volume_files::nvram_path(image);
    let nvram_temporary =
        temporary.with_file_name(format!(".{}.mkfs-{}.nvram", file_name.to_string_lossy(), std::process::id()));
    let nvram = match &options.nvram {
        Some((size, technology)) => Some((nvram_size(size)?, *technology)),
        None => None,
    };
    if nvram_file.exists() && !options.force {
        return Err(format!("{} exists; pass --force to replace it", nvram_file.display()));
    }
    let bar = spinner("formatting");
    let result = (|| {
        let config = SimConfig::new(profile, chips, blocks, options.seed);
        let flash =
            SimFlash::create_image(&temporary, config).map_err(|error| format!("{}: {error}", image.display()))?;
        let device: Option<Box<dyn fsoc_media::NvramDevice>> = match nvram {
            Some((size_bytes, technology)) => {
                let _ = std::fs::remove_file(&nvram_temporary);
                let section = fsoc_media::FileSection::create(&nvram_temporary, 0, size_bytes)
                    .map_err(|error| format!("{}: {error}", nvram_file.display()))?;
                let config = fsoc_media::NvramConfig::new(size_bytes, technology, options.seed);
                Some(Box::new(
                    fsoc_media::Nvram::new(config, section)
                        .map_err(|error| format!("{}: {error}", nvram_file.display()))?,
                ))
            }
            None => None,
        };
        let mut fs = FileSystem::format_with_nvram(flash, device, format_config(options.redundancy), volume_id, now_ns)
            .map_err(|error| format!("format: {error}"))?;
        set_new_label(&mut fs, options.label.as_deref())?;
        let mut flash = fs.unmount().map_err(|error| format!("unmount: {error}"))?;
        flash.flush().map_err(|error| format!("flush: {error}"))?;
        drop(flash);
        // The NVRAM first: an image without its NVRAM file refuses to mount, while a stale
        // NVRAM file beside the old image would be another volume's (refused too).
        if nvram.is_some() {
            std::fs::rename(&nvram_temporary, &nvram_file)
                .map_err(|error| format!("{}: {error}", nvram_file.display()))?;
        } else if nvram_file.exists() {
            std::fs::remove_file(&nvram_file).map_err(|error| format!("{}: {error}", nvram_file.display()))?;
        }
        std::fs::rename(&temporary, image).map_err(|error| format!("{}: {error}", image.display()))
    })();
    bar.finish_and_clear();
    if let Err(message) = result {
        let _ = std::fs::remove_file(&temporary);
        let _ = std::fs::remove_file(&nvram_temporary);
        return Err(message);
    }
    let capacity = u64::from(chips) * u64::from(blocks) * block_bytes;
    println!(
        "formatted {}: {} ({} chips × {} blocks × {} KiB), {:.1} MiB raw, volume id {:#018x}",
        image.display(),
        profile.name(),
        chips,
        blocks,
        block_bytes / 1024,
        capacity as f64 / (1 << 20) as f64,
        volume_id
    );
    if options.redundancy != Redundancy::None {
        println!("redundancy: {}", redundancy_text(options.redundancy, chips));
    }
    if let Some((size_bytes, technology)) = nvram {
        println!(
            "NVRAM {}: {} KiB {technology}, holds the transaction points (keep it with the image)",
            nvram_file.display(),
            size_bytes / 1024
        );
    }
    Ok(())
}

/// `--nvram SIZE`: 1 KiB to 16 MiB in whole 8-byte words.
fn nvram_size(text: &str) -> Result<u64, String> {
    let bytes = parse_size(text)?;
    if !(fsoc_media::nvram::NVRAM_SIZE_BYTES_MIN..=fsoc_media::nvram::NVRAM_SIZE_BYTES_MAX).contains(&bytes)
        || !bytes.is_multiple_of(8)
    {
        return Err(format!("--nvram {text}: an NVRAM holds 1K to 16M, in whole 8-byte words"));
    }
    Ok(bytes)
}

/// `fsoc mkfs` on raw NAND: formats the MTD devices (one per chip) in place. The geometry is the
/// devices' own (--profile is not used; --blocks and --size are refused). Format erases only
/// the blocks of segments 0-3 (superblocks, metaroot areas); the log erases each segment just
/// before it first uses it, so a large device formats in a few erases. Factory bad blocks are
/// reported (masked out of their segments, or a segment retired where it cannot go on without
/// one). A device that already holds something (its first
/// page is not erased) is replaced only with --force.
fn mkfs_mtd(name: &Path, devices: &[std::path::PathBuf], options: &MkfsOptions) -> Result<(), String> {
    if options.blocks.is_some() || options.size.is_some() {
        return Err(format!(
            "{}: --blocks and --size do not apply to MTD devices: the volume is the whole device",
            name.display()
        ));
    }
    let files = crate::volume_files::VolumeFiles::Mtd { name: name.to_path_buf(), devices: devices.to_vec() };
    let _locks = files.lock(true)?;
    let flash = fsoc_mtd::MtdFlash::open(devices, true).map_err(|error| error.to_string())?;
    let geometry = flash.geometry();
    let chips = flash.chip_count();
    // Whether the mode can be had does not depend on the geometry (the profile only sizes the
    // volume the format's rule is asked about); the format checks the devices' own again.
    if let Some(refusal) = redundancy_refusal(options.profile, chips, options.redundancy) {
        return Err(format!("{}: {refusal}", name.display()));
    }
    if !options.force {
        let mut data = vec![0u8; geometry.page_data_bytes as usize];
        let mut spare = vec![0u8; geometry.spare_bytes as usize];
        for (chip, device) in devices.iter().enumerate() {
            let page = PageAddress::new(chip as u32, 0, 0);
            let status = flash
                .read_page(0, page, &mut data, &mut spare)
                .map_err(|error| format!("{}: {error}", device.display()))?
                .value;
            if status != fsoc_media::ReadStatus::Erased {
                return Err(format!(
                    "{}: holds data (its first page is not erased: an fsoc volume or another file system); pass \
                     --force to erase what formatting needs and replace it",
                    device.display()
                ));
            }
        }
    }
    let bad_blocks = flash.bad_blocks().map_err(|error| format!("{}: {error}", name.display()))?;
    let volume_id = new_volume_id(options.volume_id, options.seed)?;
    let now_ns = match source_date_epoch()? {
        Some(epoch) => i64::try_from(epoch).unwrap_or(i64::MAX).saturating_mul(1_000_000_000),
        None => crate::volume_files::wall_clock_ns(),
    };
    if let Some(label) = &options.label {
        check_label(label)?;
    }
    let bar = spinner("formatting");
    let formatted = FileSystem::format_at(flash, format_config(options.redundancy), volume_id, now_ns)
        .map_err(|error| format!("{}: format: {error}", name.display()))
        .and_then(|mut fs| {
            set_new_label(&mut fs, options.label.as_deref())?;
            fs.unmount().map_err(|error| format!("{}: unmount: {error}", name.display()))
        });
    bar.finish_and_clear();
    let flash = formatted?;
    let erases: u64 = flash.counters().iter().map(|chip| chip.erases).sum();
    let block_bytes = geometry.block_data_bytes();
    println!(
        "formatted {}: raw NAND through MTD ({chips} chip(s) × {} blocks × {} KiB, {} B pages + {} free OOB bytes), \
         {:.1} MiB raw, volume id {volume_id:#018x}; {erases} blocks erased",
        name.display(),
        geometry.block_count,
        block_bytes / 1024,
        geometry.page_data_bytes,
        geometry.spare_bytes,
        (u64::from(chips) * u64::from(geometry.block_count) * block_bytes) as f64 / (1 << 20) as f64,
    );
    for (device, bad) in devices.iter().zip(&bad_blocks) {
        let listed: Vec<String> = bad.iter().take(16).map(u32::to_string).collect();
        let more = if bad.len() > listed.len() { ", …" } else { "" };
        println!(
            "{}: {} factory bad block(s){}",
            device.display(),
            bad.len(),
            if bad.is_empty() { String::new() } else { format!(": {}{more}", listed.join(", ")) }
        );
    }
    Ok(())
}

pub fn info(image: &Path) -> Result<(), String> {
    let crate::volume_files::OpenVolume { files, mut fs, locks: _locks } = open_read_only(image)?;
    let report = fs.mount_report();
    let statfs = fs.statfs().map_err(|error| format!("statfs: {error}"))?;
    let layout = fs.layout();
    let table = fs.segment_table().ok_or("the segment table was not read by statfs")?;
    let (erase_min, erase_max) = table.erase_count_range();
    println!("volume            {}", files.name().display());
    match &files {
        crate::volume_files::VolumeFiles::Array { chips: paths, .. }
        | crate::volume_files::VolumeFiles::Mtd { devices: paths, .. } => {
            for (chip, path) in paths.iter().enumerate() {
                println!("chip {chip:<3}          {}", path.display());
            }
        }
        crate::volume_files::VolumeFiles::Image(_) => {}
    }
    println!("volume id         {:#018x}", fs.superblock().volume_id);
    let label = fs.label().map_err(|error| format!("label: {error}"))?;
    if !label.is_empty() {
        println!("label             {}", String::from_utf8_lossy(&label));
    }
    println!("format version    {}", fs.superblock().format_version);
    println!("redundancy        {}", redundancy_text(fs.superblock().redundancy, layout.chip_count));
    if let Some(degraded) = degraded_text(&fs, files.name()) {
        println!("degraded          {degraded}");
    }
    println!(
        "geometry          {} chips × {} blocks × {} pages × {} B (+{} B spare)",
        layout.chip_count,
        layout.geometry.block_count,
        layout.geometry.pages_per_block,
        layout.geometry.page_data_bytes,
        layout.geometry.spare_bytes
    );
    println!(
        "segments          {} ({} pages each), {} retired, {} blocks masked out (bad; their segments go on with the \
         other chips)",
        layout.segment_count(),
        layout.pages_per_segment(),
        table.retired_segment_count(),
        table.masked_blocks()
    );
    println!("commit counter    {}", report.commit_counter);
    println!("last unmount      {}", if report.clean { "clean" } else { "unclean (recovered at mount)" });
    if let Some(damage) = report.damage {
        println!("damage            {damage}");
    }
    println!("mount page reads  {}", report.page_reads);
    if let Some((size_bytes, technology)) = fs.nvram_info() {
        let technology =
            fsoc_media::NvramTechnology::from_code(technology).map_or("unknown", |technology| technology.name());
        let (used, capacity) = fs.nvram_usage().unwrap_or((0, 0));
        let nvram = fs.nvram_mount_report();
        println!(
            "NVRAM             {} KiB {technology} ({}): log {used} of {capacity} bytes; mount replayed {} records, \
             {} bytes read",
            size_bytes / 1024,
            crate::volume_files::nvram_path(files.name()).display(),
            nvram.records,
            nvram.bytes_read
        );
    }
    println!(
        "space             {} of {} pages used ({:.1}%), {} free",
        statfs.total_blocks - statfs.free_blocks,
        statfs.total_blocks,
        100.0 * (statfs.total_blocks - statfs.free_blocks) as f64 / statfs.total_blocks.max(1) as f64,
        statfs.free_blocks
    );
    println!("inodes allocated  {}", statfs.next_inode - 1);
    println!("erase counts      min {erase_min}, max {erase_max}");
    match fs.wear_out() {
        Some(worn) => println!("end of life       reached: the flash is worn out ({worn}); the volume is read-only"),
        None => {
            let (retired, in_service) = fs.failed_segments().unwrap_or((0, layout.log_segment_count()));
            println!(
                "end of life       not reached: {retired} of {in_service} log segments in service have failed \
                 (more than {} ends writing)",
                fsoc_core::txn::volume::retired_segments_max(in_service)
            );
        }
    }
    println!("bad blocks        {}", bad_block_summary(fs.flash(), fs.missing_chip())?);
    if let Some(ecc) = crate::volume_files::mtd_ecc_summary(fs.flash()) {
        println!("ecc               {ecc}");
    }
    crate::volume_files::close(fs, files.name())
}

/// Bad blocks per chip (factory and grown: the device's own marks), as "3 (chip 0: 2, chip 1:
/// 1)". One query per block: the device's bad-block table, not a page read on the simulator
/// (on MTD, what the kernel's bad-block table answers). The chip a degraded volume runs
/// without (`missing`) is not asked (a dead chip does not answer) and is named as missing.
pub(crate) fn bad_block_summary(flash: &impl fsoc_media::Flash, missing: Option<u32>) -> Result<String, String> {
    let geometry = flash.geometry();
    let mut per_chip = Vec::new();
    for chip in 0..flash.chip_count() {
        if Some(chip) == missing {
            per_chip.push(None);
            continue;
        }
        let mut bad = 0u32;
        for block in 0..geometry.block_count {
            if flash.is_bad_block(fsoc_media::BlockAddress::new(chip, block)).map_err(|error| error.to_string())? {
                bad += 1;
            }
        }
        per_chip.push(Some(bad));
    }
    let total: u32 = per_chip.iter().flatten().sum();
    let chips: Vec<String> = per_chip
        .iter()
        .enumerate()
        .map(|(chip, bad)| match bad {
            Some(bad) => format!("chip {chip}: {bad}"),
            None => format!("chip {chip}: missing"),
        })
        .collect();
    Ok(format!("{total} ({})", chips.join(", ")))
}

pub fn fsck(image: &Path, read_data: bool) -> Result<bool, String> {
    let crate::volume_files::OpenVolume { files, mut fs, locks: _locks } = open_read_only(image)?;
    let bar = spinner("checking");
    let report = fs.fsck(true).map_err(|error| format!("fsck: {error}"))?;
    bar.finish_and_clear();
    // The data pass reads every data page the trees name (a page at a time of the volume's
    // data): unreadable pages and pages whose tag names another file are violations.
    let data = if read_data {
        let bar = ProgressBar::new(report.data_pages);
        bar.set_style(
            ProgressStyle::with_template("reading data pages {bar:30} {pos}/{len}")
                .unwrap_or(ProgressStyle::default_bar()),
        );
        let data = fs.fsck_data(&mut |pages| bar.set_position(pages)).map_err(|error| format!("fsck: {error}"))?;
        bar.finish_and_clear();
        Some(data)
    } else {
        None
    };
    let ecc = crate::volume_files::mtd_ecc_summary(fs.flash());
    let bad_blocks = bad_block_summary(fs.flash(), fs.missing_chip())?;
    // Degraded is no violation: every page was still read (rebuilt from the other chips).
    let degraded = degraded_text(&fs, files.name())
        .map(|text| format!("{text} ({} pages were rebuilt for this check)", fs.rebuilt_reads()));
    crate::volume_files::close(fs, files.name())?;
    if let Some(degraded) = degraded {
        println!("{}: degraded: {degraded}", files.name().display());
    }
    println!("{}: bad blocks: {bad_blocks}", files.name().display());
    if let Some(ecc) = ecc {
        println!("{}: ecc: {ecc}", files.name().display());
    }
    println!(
        "{}: {} files, {} directories, {} symlinks, {} device nodes, FIFOs and sockets, {} extended attributes, {} data pages, {} tree nodes",
        files.name().display(),
        report.files,
        report.directories,
        report.symlinks,
        report.special_files,
        report.xattrs,
        report.data_pages,
        report.directory_nodes + report.allocation_nodes
    );
    if let Some(data) = &data {
        println!(
            "{}: data: {} pages read, {} corrected by the ECC, {} rebuilt from the other chips, {} unreadable, {} not \
             tagged as their file's, {} failing their checksum",
            files.name().display(),
            data.pages,
            data.corrected_pages,
            data.rebuilt_pages,
            data.unreadable_pages,
            data.misplaced_pages,
            data.checksum_failed_pages
        );
    }
    let data_violations =
        data.as_ref().map_or(0, |data| data.unreadable_pages + data.misplaced_pages + data.checksum_failed_pages);
    if report.is_clean() && data_violations == 0 {
        println!("clean: no violations");
        Ok(true)
    } else {
        let listed = report.violations.iter().chain(data.iter().flat_map(|data| data.violations.iter()));
        let mut listed_count = 0u64;
        for violation in listed {
            println!("violation: {violation}");
            listed_count += 1;
        }
        let total = report.violation_count + data_violations;
        let unlisted = total.saturating_sub(listed_count);
        if unlisted > 0 {
            println!("... and {unlisted} more not listed");
        }
        println!("{total} violations");
        Ok(false)
    }
}

/// `fsoc scrub`: reads everything live, refreshes weak blocks (unless `refresh` is off), and
/// reports; answers whether the volume is free of damage.
pub fn scrub(image: &Path, refresh: bool) -> Result<bool, String> {
    let crate::volume_files::OpenVolume { files, mut fs, locks: _locks } =
        crate::volume_files::open(image, !refresh, refresh)?;
    let name = files.name().display().to_string();
    let bar = ProgressBar::new_spinner();
    bar.set_style(
        ProgressStyle::with_template("{spinner} scrubbing: {pos} data pages read")
            .unwrap_or(ProgressStyle::default_spinner()),
    );
    bar.enable_steady_tick(std::time::Duration::from_millis(120));
    let report = fs.scrub(&mut |pages| bar.set_position(pages)).map_err(|error| format!("{name}: scrub: {error}"))?;
    bar.finish_and_clear();
    let bad_blocks = bad_block_summary(fs.flash(), fs.missing_chip())?;
    let degraded = degraded_text(&fs, files.name());
    crate::volume_files::close(fs, files.name())?;
    if let Some(degraded) = degraded {
        println!("{name}: degraded: {degraded}");
    }
    println!(
        "{name}: {} pages read ({} tree nodes, {} data pages), {} corrected by the ECC, {} near its limit",
        report.pages_read,
        report.structure.directory_nodes + report.structure.allocation_nodes,
        report.data.pages,
        report.corrected_reads,
        report.weak_reads
    );
    let refresh_line = &report.refresh;
    if refresh {
        println!(
            "{name}: refreshed {} segments ({} pages moved); {} weak segments left for later, {} keep lost pages (retired), {} in the superblock and metaroot areas",
            refresh_line.segments_refreshed,
            refresh_line.pages_moved,
            refresh_line.segments_deferred,
            refresh_line.segments_with_lost_pages,
            refresh_line.reserved_area_segments
        );
    } else {
        println!("{name}: --check-only: nothing moved");
    }
    println!("{name}: bad blocks: {bad_blocks}");
    if report.is_clean() {
        println!("clean: every live page read back and matched its checksum");
        return Ok(true);
    }
    for violation in report.structure.violations.iter().chain(report.data.violations.iter()) {
        println!("damage: {violation}");
    }
    println!(
        "damaged: {} structure violations, {} data pages unreadable, {} failing their checksum, {} not tagged as their file's; run `fsoc fsck` for the whole list",
        report.structure.violation_count,
        report.data.unreadable_pages,
        report.data.checksum_failed_pages,
        report.data.misplaced_pages
    );
    Ok(false)
}

/// A crash test's progress bar for one workload, counting `unit`; without a terminal for it,
/// `line` is printed instead, so a run still shows it is moving.
fn workload_bar(workload: Workload, unit: &str, line: &str) -> ProgressBar {
    let bar = ProgressBar::new(0);
    let template = format!("{{msg:>14}} [{{bar:40}}] {{pos}}/{{len}} {unit} ({{eta}})");
    bar.set_style(
        ProgressStyle::with_template(&template).unwrap_or(ProgressStyle::default_bar()).progress_chars("=> "),
    );
    bar.set_message(workload.name());
    if bar.is_hidden() {
        eprintln!("{line}");
    }
    bar
}

/// Runs one workload's harness under its progress bar (`workload_bar`), which `run` moves
/// through the (done, total) callback it is given; the bar is cleared when it returns.
fn with_workload_bar<R>(
    workload: Workload,
    unit: &str,
    line: &str,
    run: impl FnOnce(&mut dyn FnMut(u64, u64)) -> Result<R, String>,
) -> Result<R, String> {
    let bar = workload_bar(workload, unit, line);
    let result = run(&mut |done, total| {
        bar.set_length(total);
        bar.set_position(done);
    });
    bar.finish_and_clear();
    result
}

/// The device and workload size of a crash test.
#[derive(Clone, Copy)]
pub struct CrashOptions {
    pub seed: u64,
    pub profile: Profile,
    pub chips: u32,
    pub blocks: u32,
    pub unstable_bits: bool,
    pub paired_pages: bool,
    pub scale: u32,
    /// What the test volumes keep across chips (`--redundancy`; parity with `--chip-loss`).
    pub redundancy: Redundancy,
}

impl CrashOptions {
    /// The harness's configuration, or why the volume cannot be formatted.
    fn config(&self) -> Result<CrashConfig, String> {
        if let Some(refusal) = redundancy_refusal(self.profile, self.chips, self.redundancy) {
            return Err(refusal);
        }
        if let Some(refusal) = volume_size_refusal(self.profile, self.chips, self.blocks) {
            return Err(format!("--blocks {}: {refusal}", self.blocks));
        }
        Ok(CrashConfig {
            profile: self.profile,
            chip_count: self.chips,
            block_count: self.blocks,
            unstable_bits: self.unstable_bits,
            paired_pages: self.paired_pages,
            scale: self.scale,
            fs: format_config(self.redundancy),
            ..CrashConfig::small(self.seed)
        })
    }

    /// Writes a run's JSON: its `totals` (an object), what it ran on, and the per-workload
    /// `reports`.
    fn write_json(
        &self,
        path: &Path,
        totals: serde_json::Value,
        reports: &impl serde::Serialize,
    ) -> Result<(), String> {
        let mut value = totals;
        let common = serde_json::json!({
            "seed": self.seed,
            "profile": self.profile.name(),
            "chips": self.chips,
            "blocks": self.blocks,
            "redundancy": self.redundancy.name(),
            "workloads": reports,
        });
        if let (Some(value), serde_json::Value::Object(common)) = (value.as_object_mut(), common) {
            value.extend(common);
        }
        let text = serde_json::to_string_pretty(&value).map_err(|error| format!("{}: {error}", path.display()))?;
        std::fs::write(path, text).map_err(|error| format!("{}: {error}", path.display()))
    }

    /// The closing line of a run: what it ran on and how long it took.
    fn summary(&self, started: Instant) -> String {
        let redundancy = match self.redundancy {
            Redundancy::None => String::new(),
            mode => format!(", {}", mode.name()),
        };
        format!(
            "(seed {}, {} {} chip(s) × {} blocks{redundancy}, {:.1} s)",
            self.seed,
            self.profile.name(),
            self.chips,
            self.blocks,
            started.elapsed().as_secs_f64()
        )
    }
}

/// `fsoc crashtest --chip-loss N`: for N sampled flash operations of each workload, a chip dies
/// there (`fsoc_sim::chip_loss_test`) on a volume with parity; answers the failures.
pub fn chip_loss_crashtest(
    workloads: &[Workload],
    options: &CrashOptions,
    samples: u64,
    json: Option<&Path>,
) -> Result<u64, String> {
    if options.redundancy == Redundancy::None {
        return Err(
            "--chip-loss runs on volumes with redundancy: drop --redundancy none (--chip-loss implies parity) or give \
             mirror-meta"
                .into(),
        );
    }
    if options.chips < 2 {
        return Err("--chip-loss needs --chips 2 or more: the volume loses one chip and goes on with the others".into());
    }
    let config = options.config()?;
    let started = Instant::now();
    let mut reports = Vec::new();
    for &workload in workloads {
        let report = with_workload_bar(
            workload,
            "chips lost",
            &format!("{}: a chip dies at {samples} sampled flash operations in turn…", workload.name()),
            |progress| fsoc_sim::chip_loss_test(workload, &config, samples, progress),
        )?;
        let outcome = if options.redundancy == Redundancy::MirrorMeta {
            format!("{} files read as lost (their data was on the lost chip)", report.files_lost)
        } else {
            format!("{} rebuilds cut and run again, {} pages rebuilt", report.rebuilds_cut, report.rebuilt_pages)
        };
        println!(
            "{:>14}: {} flash operations, {} kills (chips lost), {} died idle, {outcome}, {} failures",
            report.workload, report.flash_operations, report.kills, report.died_idle, report.failures
        );
        for example in &report.failure_examples {
            println!("  {example}");
        }
        reports.push(report);
    }
    let total = |field: fn(&fsoc_sim::ChipLossReport) -> u64| reports.iter().map(field).sum::<u64>();
    let (kills, failures) = (total(|report| report.kills), total(|report| report.failures));
    println!(
        "kills: {kills}, died idle: {}, rebuilds cut: {}, pages rebuilt: {}, files lost: {}, failures: {failures}",
        total(|report| report.died_idle),
        total(|report| report.rebuilds_cut),
        total(|report| report.rebuilt_pages),
        total(|report| report.files_lost)
    );
    println!("{}", options.summary(started));
    if let Some(path) = json {
        let totals = serde_json::json!({
            "kills": kills,
            "failures": failures,
            "died_idle": total(|report| report.died_idle),
            "rebuilds_cut": total(|report| report.rebuilds_cut),
            "rebuilt_pages": total(|report| report.rebuilt_pages),
            "files_lost": total(|report| report.files_lost),
            "samples": samples,
        });
        options.write_json(path, totals, &reports)?;
    }
    Ok(failures)
}

/// `fsoc crashtest --bad-blocks-every N`: grown bad blocks instead of power cuts
/// (`fsoc_sim::bad_block_test`); answers the failures.
pub fn bad_block_crashtest(
    workloads: &[Workload],
    options: &CrashOptions,
    stride: u64,
    json: Option<&Path>,
) -> Result<u64, String> {
    let config = options.config()?;
    let started = Instant::now();
    let mut reports = Vec::new();
    for &workload in workloads {
        let report = with_workload_bar(
            workload,
            "failures injected",
            &format!("{}: failing every {stride}th flash operation in turn…", workload.name()),
            |progress| fsoc_sim::bad_block_test(workload, &config, stride, progress),
        )?;
        println!(
            "{:>14}: {} flash operations, {} failures injected ({} metaroot, {} segment-table, {} node, {} data programs; \
             {} log and {} metaroot-area erases), {} runs then short of space, {} wrong",
            report.workload,
            report.flash_operations,
            report.injections,
            report.sites.metaroot_programs,
            report.sites.segment_table_programs,
            report.sites.tree_node_programs,
            report.sites.data_programs,
            report.sites.log_erases,
            report.sites.metaroot_area_erases,
            report.runs_short_of_space,
            report.failures
        );
        for example in &report.failure_examples {
            println!("  {example}");
        }
        reports.push(report);
    }
    let injections: u64 = reports.iter().map(|report| report.injections).sum();
    let failures: u64 = reports.iter().map(|report| report.failures).sum();
    println!("failures injected: {injections}, wrong outcomes: {failures}");
    println!("{}", options.summary(started));
    if let Some(path) = json {
        let totals = serde_json::json!({ "injections": injections, "failures": failures, "stride": stride });
        options.write_json(path, totals, &reports)?;
    }
    Ok(failures)
}

pub fn crashtest(
    workloads: &[Workload],
    options: &CrashOptions,
    json: Option<&Path>,
    max_cuts: Option<u64>,
    cut_after: Option<fsoc_sim::CutPoint>,
    nvram: Option<&str>,
) -> Result<u64, String> {
    let config = CrashConfig { max_cuts, nvram_bytes: nvram.map(nvram_size).transpose()?, ..options.config()? };
    if let Some(cut_after) = cut_after {
        let [workload] = workloads[..] else {
            return Err("--cut-after replays one workload: name it with --workload".into());
        };
        let outcome = fsoc_sim::crash::replay_cut(workload, &config, cut_after)?;
        println!("{} cut {cut_after:?}: {outcome:?}", workload.name());
        return Ok(u64::from(matches!(outcome, fsoc_sim::CrashOutcome::Failed(_))));
    }
    let started = Instant::now();
    let mut reports = Vec::new();
    for &workload in workloads {
        let report = with_workload_bar(
            workload,
            "cuts",
            &format!("{}: cutting power at every flash operation and NVRAM write…", workload.name()),
            |progress| crash_test(workload, &config, progress),
        )?;
        println!(
            "{:>14}: {} steps, {} flash operations, {} NVRAM writes, {} commits, {} cut points, {} failures",
            report.workload,
            report.steps,
            report.flash_operations,
            report.nvram_writes,
            report.commits,
            report.cut_points,
            report.failures
        );
        for example in &report.failure_examples {
            println!("  {example}");
        }
        reports.push(report);
    }
    let cut_points: u64 = reports.iter().map(|report| report.cut_points).sum();
    let failures: u64 = reports.iter().map(|report| report.failures).sum();
    println!("cut points: {cut_points}, failures: {failures}");
    println!("{}", options.summary(started));
    if let Some(path) = json {
        options.write_json(path, serde_json::json!({ "cut_points": cut_points, "failures": failures }), &reports)?;
    }
    Ok(failures)
}

/// The main job: a short tour of the simulator and of the file system on it.
pub fn demo(profile: Profile, chips: u32, seed: u64) -> Result<(), String> {
    let timing = profile.timing();
    let geometry = profile.geometry(256);
    println!("== fsoc demo: simulated {} NAND, {} chip(s), seed {seed}", profile.name(), chips);
    println!(
        "chip: {} B pages + {} B spare, {} pages/block, {} blocks; read {} us, program {} us, erase {} us, bus {} ns/B",
        geometry.page_data_bytes,
        geometry.spare_bytes,
        geometry.pages_per_block,
        geometry.block_count,
        timing.read_latency_ns / 1000,
        timing.program_latency_ns / 1000,
        timing.erase_latency_ns / 1000,
        timing.bus_ns_per_byte
    );
    let mut flash = SimFlash::create(SimConfig::new(profile, chips, 256, seed)).map_err(|e| e.to_string())?;
    let page = vec![0xA5u8; geometry.page_data_bytes as usize];
    let spare = vec![0xFFu8; geometry.spare_bytes as usize];
    // NAND rules, each refused with its typed error.
    flash.program_page(0, PageAddress::new(0, 5, 3), &page, &spare).map_err(|e| e.to_string())?;
    let again = flash.program_page(0, PageAddress::new(0, 5, 3), &page, &spare);
    let backwards = flash.program_page(0, PageAddress::new(0, 5, 1), &page, &spare);
    println!("NAND rules: reprogram -> {}; out of order -> {}", show(again), show(backwards));
    flash.erase_block(0, BlockAddress::new(0, 5)).map_err(|e| e.to_string())?;
    // Parallel chips: the same pages issued together on p chips cost one program time.
    let start = flash.all_done_ns();
    let mut done_ns = start;
    for chip in 0..chips {
        done_ns = done_ns.max(
            flash.program_page(start, PageAddress::new(chip, 9, 0), &page, &spare).map_err(|e| e.to_string())?.done_ns,
        );
    }
    println!(
        "{chips} pages on {chips} chips issued together: {:.0} us (one page: program + transfer)",
        (done_ns - start) as f64 / 1000.0
    );

    // The file system on a fresh array.
    let flash = SimFlash::create(SimConfig::new(profile, chips, 256, seed)).map_err(|e| e.to_string())?;
    let mut fs = FileSystem::format(flash, FsConfig::default(), seed).map_err(|e| e.to_string())?;
    io(fs.mkdir(b"/docs", 0o755))?;
    let create = OpenFlags { read: true, write: true, create: true, ..Default::default() };
    let fd = io(fs.open(b"/docs/hello.txt", create, 0o644))?;
    io(fs.write_fd(fd, b"hello, flash\n"))?;
    let before = counters(&fs);
    let clock_before = fs.device_now_ns();
    io(fs.fsync_fd(fd))?;
    let after = counters(&fs);
    println!(
        "fsync of a small file: {} page programs, {} erases, {:.0} us simulated",
        after.1 - before.1,
        after.2 - before.2,
        (fs.device_now_ns() - clock_before) as f64 / 1000.0
    );
    io(fs.close(fd))?;
    let big = OpenFlags { write: true, create: true, ..Default::default() };
    let fd = io(fs.open(b"/docs/big.bin", big, 0o644))?;
    let megabyte: Vec<u8> = (0..1 << 20).map(|i| (i % 251) as u8).collect();
    let clock_before = fs.device_now_ns();
    for _ in 0..8 {
        io(fs.write_fd(fd, &megabyte))?;
    }
    io(fs.fsync_fd(fd))?;
    let elapsed_ns = fs.device_now_ns() - clock_before;
    io(fs.close(fd))?;
    let raw_mib_per_s = f64::from(chips) * f64::from(geometry.page_data_bytes)
        / ((timing.program_latency_ns
            + timing.bus_ns_per_byte * u64::from(geometry.page_data_bytes + geometry.spare_bytes)) as f64
            / 1e9)
        / (1 << 20) as f64;
    println!(
        "8 MiB sequential write + fsync: {:.1} MiB/s simulated (array limit {:.1} MiB/s)",
        8.0 / (elapsed_ns as f64 / 1e9),
        raw_mib_per_s
    );
    let flash = io(fs.unmount())?;
    let mut fs = FileSystem::mount(flash, FsConfig::default()).map_err(|e| e.to_string())?;
    println!("mount: {} page reads", fs.mount_report().page_reads);
    let (_, record) = io(fs.stat(b"/docs/big.bin"))?;
    let (hello, _) = io(fs.resolve(b"/docs/hello.txt"))?;
    let text = io(fs.read(hello, 0, 100))?;
    println!("after remount: big.bin is {} bytes; hello.txt says {:?}", record.size, String::from_utf8_lossy(&text));
    let report = io(fs.fsck(true))?;
    println!("fsck: {} files, {} directories, {} violations", report.files, report.directories, report.violation_count);
    let totals = fs.flash().counters().totals();
    println!(
        "flash totals: {} reads, {} programs, {} erases, {:.3} J",
        totals.reads,
        totals.programs,
        totals.erases,
        totals.energy_nj as f64 / 1e9
    );
    if !report.is_clean() {
        let violations: Vec<String> = report.violations.iter().map(|violation| format!("{violation:?}")).collect();
        return Err(format!("fsck found violations: {}", violations.join("; ")));
    }
    println!();
    println!("next, on an image file of your own (README, \"Quick start\"):");
    println!("  fsoc mkfs disk.img --size 64M             a volume on one simulated MLC chip");
    println!("  fsoc put -r ./some/dir disk.img:/dir      copy a tree in (then fsoc ls -l disk.img:/dir, fsoc get)");
    println!("  fsoc mount disk.img /mnt                  the volume as a Linux file system (FUSE)");
    println!("  fsoc serve disk.img --listen unix:S       the file system on chip, for any 9P2000.L host");
    println!("  fsoc crashtest --workload all --seed 1    power cuts after every flash operation");
    println!("figures and how they were measured: README, \"Measured\" and the results/ directory");
    Ok(())
}

fn io<T>(result: Result<T, FsError>) -> Result<T, String> {
    result.map_err(|error| error.to_string())
}

fn counters<F: Flash + FlashStats>(fs: &FileSystem<F>) -> (u64, u64, u64) {
    let totals = fs.flash().counters().totals();
    (totals.reads, totals.programs, totals.erases)
}

fn show(result: Result<fsoc_media::Completed<()>, NandError>) -> String {
    match result {
        Ok(_) => "accepted (!)".into(),
        Err(error) => error.to_string(),
    }
}
