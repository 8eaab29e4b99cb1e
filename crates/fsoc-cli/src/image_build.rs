//! `fsoc mkfs IMAGE --from DIR`: a volume holding a local directory tree exactly (owners,
//! modes, times, hard links, symbolic links, device nodes, FIFOs, sockets, extended attributes
//! with ACLs and file capabilities), built into mkfs's temporary file with put's copy
//! (tools_put.rs `TreeCopy`) and renamed over IMAGE only once it is complete.
//!
//! Reproducible: the tree is walked in name order (inode numbers follow it), attributes are
//! set in name order, and with SOURCE_DATE_EPOCH every time the build writes (ctimes, the root's
//! times, the volume id through mkfs) derives from it and every later time is clamped to it;
//! nothing else the build writes depends on the host (the flash's clock is simulated). So the
//! same tree, options and SOURCE_DATE_EPOCH give the same image, byte for byte.
//!
//! `--size auto` measures instead of guessing: a first build in a volume sized from an
//! estimate (doubled while it runs out of space) says how many pages the tree takes; the
//! smallest volume whose capacity leaves the free margin over that (capacities are read from
//! empty volumes formatted in memory) is then built, and grown while it does not hold the tree
//! with the margin.

use std::collections::BTreeSet;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::Instant;

use fsoc_core::FileSystem;
use fsoc_media::{SimConfig, SimFlash};

use crate::arguments::IdMap;
use crate::tools_cmd::{progress_bar, Session};
use crate::tools_put::{CopyRules, CopyTally, Owners, TreeCopy};
use crate::volume_cmd::{block_count_range, set_new_label, size_text, MkfsOptions};
use crate::volume_files::{volume_config, VolumeFlash};

/// At most this many builds for `--size auto` (the measuring ones and the growing ones).
const AUTO_BUILDS_MAX: u32 = 12;

/// What `mkfs --from` was asked for beyond mkfs's own options.
pub struct BuildOptions {
    /// The directory whose tree the volume holds (its own owner, mode, times and attributes
    /// become the root directory's).
    pub from: PathBuf,
    /// Every owner becomes root:root.
    pub squash_uids: bool,
    pub uid_map: IdMap,
    pub gid_map: IdMap,
    /// `--size auto`: the share of the volume left free, in percent.
    pub free_margin_percent: u32,
}

impl BuildOptions {
    /// Refuses a DIR that is missing or not a directory, or one the image would be written
    /// into (it would be copied into itself), before anything is created.
    pub fn check_source(&self, image: &Path) -> Result<(), String> {
        let from = self.from.display();
        let metadata = std::fs::metadata(&self.from).map_err(|error| match error.kind() {
            std::io::ErrorKind::NotFound => format!("--from {from}: no such directory"),
            _ => format!("--from {from}: {error}"),
        })?;
        if !metadata.is_dir() {
            return Err(format!("--from {from}: is not a directory"));
        }
        let directory = self.from.canonicalize().map_err(|error| format!("--from {from}: {error}"))?;
        let parent = image.parent().filter(|parent| !parent.as_os_str().is_empty()).unwrap_or(Path::new("."));
        if parent.canonicalize().is_ok_and(|parent| parent.starts_with(&directory)) {
            return Err(format!(
                "{}: is inside --from {from}, so the image would be copied into itself; write it elsewhere",
                image.display()
            ));
        }
        Ok(())
    }

    /// The local path the copy starts from: DIR, or what it names when it is a symbolic link.
    fn source(&self) -> Result<PathBuf, String> {
        let is_link = std::fs::symlink_metadata(&self.from).is_ok_and(|metadata| metadata.file_type().is_symlink());
        if is_link {
            return self.from.canonicalize().map_err(|error| format!("--from {}: {error}", self.from.display()));
        }
        Ok(self.from.clone())
    }

    fn rules(&self, time_max_ns: Option<i64>) -> CopyRules {
        CopyRules {
            owners: Owners::Local { squash: self.squash_uids, uids: self.uid_map.clone(), gids: self.gid_map.clone() },
            time_max_ns,
            interruptible: true,
            command: "mkfs",
            hold_warnings: true,
        }
    }
}

/// Everything one build needs besides the erase blocks per chip.
pub struct Plan<'a> {
    /// The image to create (replaced with --force, once the new one is complete).
    pub image: &'a Path,
    /// Where the volume is built, beside the image.
    pub temporary: &'a Path,
    pub options: &'a MkfsOptions,
    pub volume_id: u64,
    /// The time stamped on what the build changes (ctimes): SOURCE_DATE_EPOCH or now.
    pub now_ns: i64,
    /// SOURCE_DATE_EPOCH, to which later access and modification times are clamped.
    pub time_max_ns: Option<i64>,
}

/// A local tree as counted before it is copied: for the progress bar, the first estimate of
/// `--size auto` and the size a volume too small needed.
struct TreeScan {
    /// Names in the tree, the root included.
    entries: u64,
    /// Bytes of regular files, each inode once.
    bytes: u64,
    /// Data pages those files take (holes left out), each inode once.
    data_pages: u64,
}

impl TreeScan {
    /// The pages the tree takes by its count: its data pages, a page of tree records per 8
    /// names and a little more for the trees' upper levels and a commit. What it really takes
    /// (measured on this machine's /usr: about 9% more, for the extents' records and nodes
    /// not full) is the first build's to say.
    fn estimated_pages(&self) -> u64 {
        self.data_pages + self.entries / 8 + 64
    }
}

/// Counts the tree under `root` (iteratively, not following links).
fn scan(root: &Path, page_bytes: u64) -> Result<TreeScan, String> {
    let mut tree = TreeScan { entries: 0, bytes: 0, data_pages: 0 };
    let mut linked = BTreeSet::new();
    let mut pending = vec![root.to_path_buf()];
    while let Some(path) = pending.pop() {
        let metadata = std::fs::symlink_metadata(&path).map_err(|error| format!("{}: {error}", path.display()))?;
        tree.entries += 1;
        if metadata.is_dir() {
            for entry in std::fs::read_dir(&path).map_err(|error| format!("{}: {error}", path.display()))? {
                pending.push(entry.map_err(|error| format!("{}: {error}", path.display()))?.path());
            }
        } else if metadata.is_file() && (metadata.nlink() < 2 || linked.insert((metadata.dev(), metadata.ino()))) {
            tree.bytes += metadata.len();
            let allocated = metadata.len().min(metadata.blocks().saturating_mul(512));
            tree.data_pages += allocated.div_ceil(page_bytes);
        }
    }
    Ok(tree)
}

/// What one build made, measured after its last commit.
struct Built {
    tally: CopyTally,
    total_pages: u64,
    free_pages: u64,
    /// What the copy could not keep (attributes the host would not let us read, files of no
    /// type fsoc stores), said once the build is chosen.
    warnings: Vec<String>,
}

impl Built {
    /// Whether at least `margin_percent` of the volume is left free.
    fn keeps_margin(&self, margin_percent: u32) -> bool {
        self.free_pages * 100 >= u64::from(margin_percent) * self.total_pages
    }
}

enum Failure {
    /// The tree did not fit.
    NoSpace,
    Other(String),
}

/// Builds the volume of `plan` and renames it over the image: `blocks` erase blocks per chip,
/// or (`None`) the smallest volume that holds the tree with the free margin. Prints what was
/// built. The caller removes the temporary file on failure.
pub fn build(plan: &Plan<'_>, from: &BuildOptions, blocks: Option<u32>) -> Result<(), String> {
    let started = Instant::now();
    let page_bytes = u64::from(plan.options.profile.geometry(1).page_data_bytes);
    let source = from.source()?;
    let tree = scan(&source, page_bytes)?;
    crate::interrupts::catch_interrupts();
    let (built, blocks, auto_builds) = match blocks {
        Some(blocks) => match build_once(plan, from, &source, blocks, &tree, "building") {
            Ok(built) => (built, blocks, None),
            Err(Failure::Other(message)) => return Err(message),
            Err(Failure::NoSpace) => return Err(too_small(plan, from, &tree, blocks)),
        },
        None => {
            let (built, blocks, builds) = auto_size(plan, from, &source, &tree)?;
            (built, blocks, Some(builds))
        }
    };
    std::fs::rename(plan.temporary, plan.image).map_err(|error| format!("{}: {error}", plan.image.display()))?;
    for warning in &built.warnings {
        eprintln!("{warning}");
    }
    report(plan, from, &built, blocks, auto_builds, started);
    Ok(())
}

/// One build of the tree into a fresh volume of `blocks` erase blocks per chip in the
/// temporary file (replacing an earlier attempt), closed cleanly.
fn build_once(
    plan: &Plan<'_>,
    from: &BuildOptions,
    source: &Path,
    blocks: u32,
    tree: &TreeScan,
    message: &str,
) -> Result<Built, Failure> {
    let options = plan.options;
    let other = |what: &str, error: &dyn std::fmt::Display| Failure::Other(format!("{what}: {error}"));
    let image = plan.image.display().to_string();
    match std::fs::remove_file(plan.temporary) {
        Ok(()) => {}
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
        Err(error) => return Err(other(&plan.temporary.display().to_string(), &error)),
    }
    let config = SimConfig::new(options.profile, options.chips, blocks, options.seed);
    let flash = SimFlash::create_image(plan.temporary, config).map_err(|error| other(&image, &error))?;
    let mut fs = FileSystem::format_at(VolumeFlash::Image(flash), build_config(options), plan.volume_id, plan.now_ns)
        .map_err(|error| other("format", &error))?;
    set_new_label(&mut fs, options.label.as_deref()).map_err(Failure::Other)?;
    fs.now_ns = plan.now_ns;
    let mut session = Session::new(plan.temporary, fs, Vec::new());
    let bar = progress_bar(tree.bytes, message);
    let mut copy = TreeCopy::new(from.rules(plan.time_max_ns), &bar);
    let copied = copy.copy_tree(&mut session, source, b"/").and_then(|()| {
        // Measured after the last commit: what the finished volume holds.
        session.fs.commit().map_err(|error| session.error(b"/", error))?;
        session.fs.statfs().map_err(|error| session.error(b"/", error))
    });
    bar.finish_and_clear();
    let statfs = match copied {
        Ok(statfs) => statfs,
        Err(_) if session.ran_out_of_space() => return Err(Failure::NoSpace),
        // The message names the temporary file: name the image instead.
        Err(message) => return Err(Failure::Other(message.replace(&plan.temporary.display().to_string(), &image))),
    };
    let warnings = copy.take_warnings();
    let tally = copy.tally;
    let flash = match session.into_fs().unmount() {
        Ok(flash) => flash,
        Err(fsoc_core::fs::FsError::NoSpace) => return Err(Failure::NoSpace),
        Err(error) => return Err(other(&format!("{image}: unmount"), &error)),
    };
    flash.close().map_err(|error| other(&format!("{image}: close"), &error))?;
    Ok(Built { tally, total_pages: statfs.total_blocks, free_pages: statfs.free_blocks, warnings })
}

/// `--size auto`: measures the pages the tree takes in a first build, then builds the smallest
/// volume that holds them with the free margin (growing it while the build says otherwise).
/// Returns the build, its erase blocks per chip and how many builds it took.
fn auto_size(
    plan: &Plan<'_>,
    from: &BuildOptions,
    source: &Path,
    tree: &TreeScan,
) -> Result<(Built, u32, u32), String> {
    let options = plan.options;
    let margin = from.free_margin_percent;
    let (_, blocks_max) = block_count_range(options.profile, options.chips);
    // Generous, so the first build rarely runs out of space: a volume too large costs nothing
    // (the image file is sparse), one too small a second build.
    let estimate = tree.estimated_pages() * 5 / 4;
    let mut trial_blocks = smallest_holding(plan, with_margin(estimate, margin))?.unwrap_or(blocks_max);
    let mut builds = 0;
    let trial = loop {
        builds += 1;
        match build_once(plan, from, source, trial_blocks, tree, "measuring") {
            Ok(built) => break built,
            Err(Failure::NoSpace) if trial_blocks < blocks_max => {
                trial_blocks = trial_blocks.saturating_mul(2).min(blocks_max);
            }
            Err(Failure::NoSpace) => return Err(beyond_largest(plan, from)),
            Err(Failure::Other(message)) => return Err(message),
        }
    };
    let used = trial.total_pages - trial.free_pages;
    let Some(mut blocks) = smallest_holding(plan, with_margin(used, margin))? else {
        return Err(beyond_largest(plan, from));
    };
    if blocks >= trial_blocks && trial.keeps_margin(margin) {
        return Ok((trial, trial_blocks, builds));
    }
    loop {
        builds += 1;
        let outcome = build_once(plan, from, source, blocks, tree, "building");
        match outcome {
            Ok(built) if built.keeps_margin(margin) => return Ok((built, blocks, builds)),
            Ok(_) | Err(Failure::NoSpace) if blocks < blocks_max && builds < AUTO_BUILDS_MAX => {
                blocks = blocks.saturating_add((blocks / 32).max(1)).min(blocks_max);
            }
            Ok(_) | Err(Failure::NoSpace) => return Err(beyond_largest(plan, from)),
            Err(Failure::Other(message)) => return Err(message),
        }
    }
}

/// The configuration a volume is built with: the tools' (a larger node cache), with the
/// redundancy asked for (which sets the capacity `--size auto` measures).
fn build_config(options: &MkfsOptions) -> fsoc_core::FsConfig {
    let mut config = volume_config(false);
    config.volume.redundancy = options.redundancy;
    config
}

/// Pages a volume must offer for `used` of them to leave `margin_percent` free.
fn with_margin(used: u64, margin_percent: u32) -> u64 {
    (used * 100).div_ceil(u64::from(100 - margin_percent.min(99)))
}

/// The pages an empty volume of `blocks` erase blocks per chip offers (statfs's total), read
/// from one formatted in memory with the image's profile, chips and seed (so its factory bad
/// blocks are the image's).
fn capacity_pages(plan: &Plan<'_>, blocks: u32) -> Result<u64, String> {
    let options = plan.options;
    let flash = SimFlash::create(SimConfig::new(options.profile, options.chips, blocks, options.seed))
        .map_err(|error| error.to_string())?;
    let mut fs = FileSystem::format_at(flash, build_config(options), plan.volume_id, plan.now_ns)
        .map_err(|error| format!("format: {error}"))?;
    Ok(fs.statfs().map_err(|error| format!("statfs: {error}"))?.total_blocks)
}

/// The fewest erase blocks per chip whose volume offers at least `pages`: doubling from the
/// smallest volume the format allows, then halving the last step (each probe formats a volume
/// in memory, whose cost follows its size, so no probe is much larger than the answer);
/// `None` when even the largest volume does not.
fn smallest_holding(plan: &Plan<'_>, pages: u64) -> Result<Option<u32>, String> {
    let (blocks_min, blocks_max) = block_count_range(plan.options.profile, plan.options.chips);
    let (mut low, mut high) = (blocks_min, blocks_min);
    while capacity_pages(plan, high)? < pages {
        if high == blocks_max {
            return Ok(None);
        }
        low = high + 1;
        high = high.saturating_mul(2).min(blocks_max);
    }
    while low < high {
        let middle = low + (high - low) / 2;
        if capacity_pages(plan, middle)? >= pages {
            high = middle;
        } else {
            low = middle + 1;
        }
    }
    Ok(Some(low))
}

/// Bytes of a volume of `blocks` erase blocks per chip.
fn volume_bytes(options: &MkfsOptions, blocks: u32) -> u64 {
    u64::from(options.chips) * u64::from(blocks) * options.profile.geometry(1).block_data_bytes()
}

/// The error for a tree that does not fit in the volume asked for, with the size it needs by
/// the tree's count (no free margin).
fn too_small(plan: &Plan<'_>, from: &BuildOptions, tree: &TreeScan, blocks: u32) -> String {
    let needed = match smallest_holding(plan, tree.estimated_pages() * 9 / 8) {
        Ok(Some(needed)) if needed > blocks => format!("about {}", size_text(volume_bytes(plan.options, needed))),
        _ => "more".to_string(),
    };
    format!(
        "{}: --from {} does not fit in {} ({blocks} erase blocks per chip): the volume ran out of space; {} files \
         and directories and {} of file data need {needed} (give a larger --size, or --size auto to measure the \
         smallest that holds them with a free margin)",
        plan.image.display(),
        from.from.display(),
        size_text(volume_bytes(plan.options, blocks)),
        tree.entries,
        size_text(tree.bytes),
    )
}

fn beyond_largest(plan: &Plan<'_>, from: &BuildOptions) -> String {
    let (_, blocks_max) = block_count_range(plan.options.profile, plan.options.chips);
    format!(
        "{}: --from {} does not fit, with a free margin of {}%, in the largest {} volume on {} chip(s) ({}): use \
         more --chips or a profile with larger blocks",
        plan.image.display(),
        from.from.display(),
        from.free_margin_percent,
        plan.options.profile.name(),
        plan.options.chips,
        size_text(volume_bytes(plan.options, blocks_max))
    )
}

/// Prints what was built.
fn report(
    plan: &Plan<'_>,
    from: &BuildOptions,
    built: &Built,
    blocks: u32,
    auto_builds: Option<u32>,
    started: Instant,
) {
    let options = plan.options;
    let tally = &built.tally;
    println!(
        "built {} from {}: {} files ({} bytes), {} directories, {} symbolic links, {} device nodes, FIFOs and \
         sockets, {} hard links",
        plan.image.display(),
        from.from.display(),
        tally.files,
        tally.bytes,
        tally.directories,
        tally.symlinks,
        tally.special_files,
        tally.hard_links
    );
    let used = built.total_pages - built.free_pages;
    println!(
        "volume {}: {} ({} chip(s) × {blocks} blocks × {} KiB), {used} of {} pages used, {:.1}% free, volume id \
         {:#018x}",
        size_text(volume_bytes(options, blocks)),
        options.profile.name(),
        options.chips,
        options.profile.geometry(1).block_data_bytes() / 1024,
        built.total_pages,
        100.0 * built.free_pages as f64 / built.total_pages.max(1) as f64,
        plan.volume_id
    );
    if let Some(builds) = auto_builds {
        println!(
            "--size auto: {} ({blocks} erase blocks per chip), the smallest that holds the tree with {}% free \
             (measured in {builds} {})",
            size_text(volume_bytes(options, blocks)),
            from.free_margin_percent,
            if builds == 1 { "build" } else { "builds" }
        );
    }
    println!("({:.1} s)", started.elapsed().as_secs_f64());
}
