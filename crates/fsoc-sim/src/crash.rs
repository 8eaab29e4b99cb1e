//! Power cut everywhere: run a workload once to learn, for every commit, the flash operation at
//! which it became durable and the visible state it made durable; then, for every operation
//! index k (or a seeded sample), replay the workload on a copy of the formatted device with
//! power cut after k operations (operation k+1 is torn or interrupted), remount, run fsck, and
//! require the visible state to equal the last durable commit or the one in flight.
//!
//! With an NVRAM (`CrashConfig::nvram_bytes`, the commit tier of issue 10), the cut points are
//! every flash operation and every NVRAM write (`CutPoint`); an NVRAM write in flight is torn at
//! 8-byte words as fsoc-media's model does, and the flash is not cut (power fails once).

use fsoc_core::fs::FsError;
use fsoc_core::{FileSystem, FsConfig};
use fsoc_media::{
    FaultConfig, Nvram, NvramConfig, NvramDevice, NvramTechnology, Profile, RamBacking, SharedNvram, SimConfig,
    SimFlash,
};

use crate::listing::{listing_cached, listing_with_lost_files, lost_files, matches_but_lost, DigestCache, Listing};
use crate::workloads::{apply, Step, Workload};
use fsoc_media::rng::SeededRng;

#[derive(Clone, Debug)]
pub struct CrashConfig {
    pub profile: Profile,
    pub chip_count: u32,
    pub block_count: u32,
    pub seed: u64,
    /// Cut at most this many points (a seeded sample); `None` cuts every operation index.
    pub max_cuts: Option<u64>,
    /// Workload size multiplier.
    pub scale: u32,
    pub fs: FsConfig,
    /// Enable the unstable-bits hazard of torn pages (off by default, as in fsoc-media).
    pub unstable_bits: bool,
    /// Enable the paired-page hazard (MLC/TLC) and fsoc's guard against it.
    pub paired_pages: bool,
    /// fsoc's paired-page guard, on by default with the hazard; turned off only to show the
    /// hazard is real.
    pub paired_page_guard: bool,
    /// Bytes of FeRAM for the NVRAM commit tier (`None`: transaction points on flash).
    pub nvram_bytes: Option<u64>,
}

impl CrashConfig {
    pub fn small(seed: u64) -> Self {
        CrashConfig {
            profile: Profile::Mlc,
            chip_count: 1,
            block_count: 40,
            seed,
            max_cuts: None,
            scale: 1,
            fs: FsConfig::default(),
            unstable_bits: false,
            paired_pages: false,
            paired_page_guard: true,
            nvram_bytes: None,
        }
    }
}

/// Where power fails: after `k` flash operations (operation k+1 torn), or after `k` NVRAM
/// writes (write k+1 torn).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CutPoint {
    Flash(u64),
    Nvram(u64),
}

impl CutPoint {
    /// The replay option naming this cut (`fsoc crashtest ... --cut-after K`).
    pub fn replay_option(self) -> String {
        match self {
            CutPoint::Flash(k) => format!("--cut-after {k}"),
            CutPoint::Nvram(k) => format!("--nvram-cut-after {k}"),
        }
    }
}

/// A formatted volume: its flash, and its NVRAM's configuration and bytes when it has one.
#[derive(Clone)]
struct Devices {
    flash: SimFlash,
    nvram: Option<(NvramConfig, RamBacking)>,
}

impl Devices {
    /// A fresh copy (power on, counters zero) to run on: the flash, and a handle on the NVRAM
    /// for the file system and one for the harness.
    fn copy(&self) -> (SimFlash, Option<SharedNvram>) {
        let nvram = self.nvram.as_ref().map(|(config, backing)| {
            SharedNvram::new(Nvram::new(*config, backing.clone()).expect("an NVRAM copy of a valid one"))
        });
        (self.flash.clone(), nvram)
    }

    /// The devices after a run: what the flash and NVRAM hold, powered on again.
    fn after(flash: SimFlash, nvram: Option<&SharedNvram>) -> Devices {
        let nvram = nvram.map(|nvram| nvram.with(|device| (*device.config(), device.backing().clone())));
        Devices { flash, nvram }
    }
}

fn boxed(nvram: Option<&SharedNvram>) -> Option<Box<dyn NvramDevice>> {
    nvram.map(|nvram| Box::new(nvram.clone()) as Box<dyn NvramDevice>)
}

fn nvram_writes(nvram: Option<&SharedNvram>) -> u64 {
    nvram.map_or(0, |nvram| nvram.with(|device| device.writes_count()))
}

#[derive(Clone, Debug, serde::Serialize)]
pub struct WorkloadReport {
    pub workload: String,
    pub steps: usize,
    pub flash_operations: u64,
    /// NVRAM writes of the reference run (0 without NVRAM): cut points too.
    pub nvram_writes: u64,
    pub commits: usize,
    pub cut_points: u64,
    pub failures: u64,
    /// The first few failures, each with its replay line.
    pub failure_examples: Vec<String>,
}

#[derive(Clone, Debug)]
pub enum CrashOutcome {
    Passed,
    Failed(String),
}

struct Snapshot {
    /// Flash operations (since mount) after which this commit was durable.
    durable_after_operations: u64,
    /// NVRAM writes (since mount) after which this commit was durable.
    durable_after_nvram_writes: u64,
    listing: Listing,
}

impl Snapshot {
    fn durable_at(&self, cut: CutPoint) -> bool {
        match cut {
            CutPoint::Flash(k) => self.durable_after_operations <= k,
            CutPoint::Nvram(k) => self.durable_after_nvram_writes <= k,
        }
    }
}

fn sim_config(config: &CrashConfig) -> SimConfig {
    let mut sim = SimConfig::new(config.profile, config.chip_count, config.block_count, config.seed);
    sim.faults = FaultConfig {
        unstable_bits_hazard: config.unstable_bits,
        paired_page_hazard: config.paired_pages,
        ..FaultConfig::default()
    };
    sim
}

/// The file-system configuration a run uses: the caller's (whose paired-page guard follows the
/// chip), with the guard forced off when the test asks for that.
fn fs_config(config: &CrashConfig) -> FsConfig {
    let mut fs = config.fs;
    if !config.paired_page_guard {
        fs.volume.paired_page_distance = Some(0);
    }
    fs
}

fn formatted_device(config: &CrashConfig) -> Result<Devices, String> {
    let flash = SimFlash::create(sim_config(config)).map_err(|error| format!("simulator: {error}"))?;
    let nvram = match config.nvram_bytes {
        Some(bytes) => Some(SharedNvram::new(
            Nvram::in_ram(NvramConfig::new(bytes, NvramTechnology::FeRam, config.seed))
                .map_err(|error| format!("NVRAM: {error}"))?,
        )),
        None => None,
    };
    let fs = FileSystem::format_with_nvram(flash, boxed(nvram.as_ref()), fs_config(config), config.seed, 0)
        .map_err(|error| format!("format: {error}"))?;
    let flash = fs.unmount().map_err(|error| format!("unmount after format: {error}"))?;
    Ok(Devices::after(flash, nvram.as_ref()))
}

fn mount(flash: SimFlash, nvram: Option<&SharedNvram>, config: &CrashConfig) -> Result<FileSystem<SimFlash>, FsError> {
    FileSystem::mount_with_nvram(flash, boxed(nvram), fs_config(config))
}

/// The reference run: every commit's durable operation index and visible state, and the flash
/// operations and NVRAM writes it made.
fn reference_run(device: &Devices, steps: &[Step], config: &CrashConfig) -> Result<(Vec<Snapshot>, u64, u64), String> {
    reference_run_to_the_end(device, steps, config)
        .map(|(snapshots, operations, writes, _, _)| (snapshots, operations, writes))
}

/// What a step answered: `None` for success, else the refusal's errno.
type StepOutcome = Option<i32>;

/// A reference run: every commit's snapshot, the flash operations and NVRAM writes made, the
/// visible state after the last step, and what each step answered.
type ReferenceRun = (Vec<Snapshot>, u64, u64, Listing, Vec<StepOutcome>);

/// `reference_run`, the visible state after its last step and what each step answered.
fn reference_run_to_the_end(device: &Devices, steps: &[Step], config: &CrashConfig) -> Result<ReferenceRun, String> {
    let (flash, nvram) = device.copy();
    let nvram = nvram.as_ref();
    let mut fs = mount(flash, nvram, config).map_err(|error| format!("mount: {error}"))?;
    let mut cache = DigestCache::new();
    let mut current = listing_cached(&fs, &mut cache).map_err(|error| format!("listing: {error}"))?;
    let mut snapshots =
        vec![Snapshot { durable_after_operations: 0, durable_after_nvram_writes: 0, listing: current.clone() }];
    let mut counter = fs.commit_counter();
    let mut outcomes = Vec::with_capacity(steps.len());
    for (index, step) in steps.iter().enumerate() {
        let mut observer = |fs: &mut FileSystem<SimFlash>, commits_at_end: bool| -> Result<(), FsError> {
            fs.now_ns += 1;
            let after = listing_cached(fs, &mut cache)?;
            if fs.commit_counter() != counter {
                counter = fs.commit_counter();
                let visible = if commits_at_end { after.clone() } else { current.clone() };
                snapshots.push(Snapshot {
                    durable_after_operations: fs.last_commit_operations(),
                    durable_after_nvram_writes: nvram_writes(nvram),
                    listing: visible,
                });
            }
            current = after;
            Ok(())
        };
        match apply(&mut fs, step, &mut observer) {
            Ok(outcome) => outcomes.push(outcome.err().map(|refusal| refusal.errno())),
            Err(error) => return Err(format!("reference run failed at step {index} {step:?}: {error}")),
        }
        let report = fs.fsck(false).map_err(|error| format!("fsck: {error}"))?;
        if !report.is_clean() {
            return Err(format!("reference run: fsck after step {index} {step:?}: {:?}", report.violations));
        }
    }
    let operations = fs.flash_operations_issued();
    Ok((snapshots, operations, nvram_writes(nvram), current, outcomes))
}

/// One cut: replay until the power fails, restore power, remount, check.
fn cut_run(
    device: &Devices,
    steps: &[Step],
    config: &CrashConfig,
    cut: CutPoint,
    snapshots: &[Snapshot],
) -> CrashOutcome {
    let (mut flash, nvram) = device.copy();
    match (cut, &nvram) {
        (CutPoint::Flash(k), _) => flash.schedule_power_cut(k),
        (CutPoint::Nvram(k), Some(nvram)) => nvram.with(|device| device.schedule_power_cut(k)),
        (CutPoint::Nvram(_), None) => return CrashOutcome::Failed(String::from("an NVRAM cut without NVRAM")),
    }
    let mut fs = match mount(flash, nvram.as_ref(), config) {
        Ok(fs) => fs,
        Err(error) => return CrashOutcome::Failed(format!("first mount: {error}")),
    };
    for step in steps {
        let mut observer = |fs: &mut FileSystem<SimFlash>, _: bool| -> Result<(), FsError> {
            fs.now_ns += 1;
            Ok(())
        };
        if apply(&mut fs, step, &mut observer).is_err() {
            break;
        }
    }
    let mut flash = fs.into_flash_without_commit();
    let power_lost = match cut {
        CutPoint::Flash(_) => flash.power_is_lost(),
        CutPoint::Nvram(_) => nvram.as_ref().is_some_and(|nvram| nvram.with(|device| device.power_is_lost())),
    };
    if !power_lost {
        return CrashOutcome::Failed(String::from("the workload ended before the cut point"));
    }
    flash.restore_power();
    let after = Devices::after(flash, nvram.as_ref());
    let (flash, nvram) = after.copy();
    let nvram = nvram.as_ref();
    let mut fs = match mount(flash, nvram, config) {
        Ok(fs) => fs,
        Err(error) => return CrashOutcome::Failed(format!("remount after the cut: {error}")),
    };
    match fs.fsck(true) {
        Ok(report) if report.is_clean() => {}
        Ok(report) => return CrashOutcome::Failed(format!("fsck: {:?}", report.violations)),
        Err(error) => return CrashOutcome::Failed(format!("fsck: {error}")),
    }
    let visible = match listing_cached(&fs, &mut DigestCache::new()) {
        Ok(visible) => visible,
        Err(error) => return CrashOutcome::Failed(format!("listing after remount: {error}")),
    };
    let durable = snapshots.iter().rposition(|snapshot| snapshot.durable_at(cut)).unwrap_or(0);
    let in_flight = snapshots.get(durable + 1);
    if visible != snapshots[durable].listing && in_flight.is_none_or(|snapshot| visible != snapshot.listing) {
        let difference = Listing::difference(&visible, &snapshots[durable].listing);
        // The first few differing paths are enough to start from; the replay line gives all.
        let text = difference.to_string();
        let lines: Vec<&str> = text.lines().take(8).map(str::trim).collect();
        return CrashOutcome::Failed(format!(
            "visible state is neither commit {durable} nor the one in flight (fs: after remount, \
             model: commit {durable}): {}",
            lines.join("; ")
        ));
    }
    // With parity, no power cut may leave committed pages under a stale or missing parity
    // (the write hole). Straight after the cut, the volume without one chip shows a state the
    // cut allows (the commit in flight may have only one of its metaroot's two copies, so it
    // may be there or not); once recovered, exactly the recovered state. With mirror-meta, the
    // same for names and metadata: files with data on the missing chip may read as lost.
    if config.fs.volume.redundancy != fsoc_core::segment::Redundancy::None {
        let mirror = config.fs.volume.redundancy == fsoc_core::segment::Redundancy::MirrorMeta;
        let same = |listing: &Listing, expected: &Listing| {
            if mirror {
                matches_but_lost(listing, expected)
            } else {
                listing == expected
            }
        };
        let allowed = |listing: &Listing| {
            same(listing, &snapshots[durable].listing)
                || in_flight.is_some_and(|snapshot| same(listing, &snapshot.listing))
        };
        let recovered = Devices::after(fs.flash().clone(), nvram);
        let checks = degraded_listing(&after, config, cut).and_then(|listing| {
            if allowed(&listing) {
                Ok(())
            } else {
                Err(format!(
                    "straight after the cut, without a chip the volume shows neither commit {durable} nor the one \
                     in flight: {}",
                    first_differences(&listing, &snapshots[durable].listing)
                ))
            }
        });
        let checks = checks.and_then(|()| degraded_listing(&recovered, config, cut)).and_then(|listing| {
            if same(&listing, &visible) {
                Ok(())
            } else {
                Err(format!(
                    "once recovered, without a chip the volume shows another state: {}",
                    first_differences(&listing, &visible)
                ))
            }
        });
        if let Err(reason) = checks {
            return CrashOutcome::Failed(reason);
        }
    }
    // Liveness: with faults off, the volume accepts a change, commits and remounts.
    let liveness = (|| -> Result<(), FsError> {
        let fd =
            fs.open(b"/liveness", fsoc_core::OpenFlags { write: true, create: true, ..Default::default() }, 0o644)?;
        fs.pwrite(fd, 0, b"alive")?;
        fs.close(fd)?;
        fs.transact()?;
        let flash = fs.unmount()?;
        let again = mount(flash, nvram, config)?;
        again.stat(b"/liveness")?;
        Ok(())
    })();
    match liveness {
        Ok(()) => CrashOutcome::Passed,
        Err(FsError::NoSpace) => CrashOutcome::Passed, // a full volume may refuse; that is not a failure
        Err(error) => CrashOutcome::Failed(format!("liveness after recovery: {error}")),
    }
}

/// The first differences between two listings, on one line.
fn first_differences(found: &Listing, expected: &Listing) -> String {
    let difference = Listing::difference(found, expected).to_string();
    difference.lines().take(8).map(str::trim).collect::<Vec<_>>().join("; ")
}

/// What `devices` show mounted without one chip (chosen by the cut point): read-only, so
/// nothing is re-anchored.
fn degraded_listing(devices: &Devices, config: &CrashConfig, cut: CutPoint) -> Result<Listing, String> {
    let chip = match cut {
        CutPoint::Flash(k) | CutPoint::Nvram(k) => (k % u64::from(config.chip_count)) as u32,
    };
    let (mut flash, nvram) = devices.copy();
    flash.fail_chip(fsoc_media::ChipIndex(chip)).map_err(|error| error.to_string())?;
    let degraded =
        mount(flash, nvram.as_ref(), config).map_err(|error| format!("mount without chip {chip}: {error}"))?;
    let listing = if config.fs.volume.redundancy == fsoc_core::segment::Redundancy::MirrorMeta {
        listing_with_lost_files(&degraded)
    } else {
        listing_cached(&degraded, &mut DigestCache::new())
    };
    listing.map_err(|error| format!("listing without chip {chip}: {error}"))
}

/// Runs the power-cut test for one workload. `progress` is called with (done, total).
pub fn crash_test(
    workload: Workload,
    config: &CrashConfig,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<WorkloadReport, String> {
    let steps = workload.steps(config.seed, config.scale);
    let device = formatted_device(config)?;
    let (snapshots, operations, writes) = reference_run(&device, &steps, config)?;
    // Cut after k operations for k in 0..operations: operation k+1 exists and is torn; the
    // same for NVRAM writes.
    let every: Vec<CutPoint> = (0..operations).map(CutPoint::Flash).chain((0..writes).map(CutPoint::Nvram)).collect();
    let cut_points: Vec<CutPoint> = match config.max_cuts {
        Some(max_cuts) if max_cuts < every.len() as u64 => {
            let mut rng = SeededRng::new(config.seed ^ 0xC0FFEE);
            let mut indices: Vec<u64> = (0..max_cuts).map(|_| rng.below(every.len() as u64)).collect();
            indices.sort_unstable();
            indices.dedup();
            indices.into_iter().filter_map(|index| every.get(index as usize).copied()).collect()
        }
        _ => every,
    };
    let mut failures = 0u64;
    let mut failure_examples = Vec::new();
    let total = cut_points.len() as u64;
    for (done, &cut) in cut_points.iter().enumerate() {
        if let CrashOutcome::Failed(reason) = cut_run(&device, &steps, config, cut, &snapshots) {
            failures += 1;
            if failure_examples.len() < 5 {
                let nvram = config.nvram_bytes.map_or(String::new(), |bytes| format!(" --nvram {bytes}"));
                failure_examples.push(format!(
                    "{}: cut {cut:?}: {reason}\n  replay: fsoc crashtest --workload {} --seed {}{nvram} {}",
                    workload.name(),
                    workload.name(),
                    config.seed,
                    cut.replay_option()
                ));
            }
        }
        progress(done as u64 + 1, total);
    }
    Ok(WorkloadReport {
        workload: workload.name().to_string(),
        steps: steps.len(),
        flash_operations: operations,
        nvram_writes: writes,
        commits: snapshots.len() - 1,
        cut_points: total,
        failures,
        failure_examples,
    })
}

/// Replays a single cut point (for the `--cut-after` replay line).
pub fn replay_cut(workload: Workload, config: &CrashConfig, cut: CutPoint) -> Result<CrashOutcome, String> {
    let steps = workload.steps(config.seed, config.scale);
    let device = formatted_device(config)?;
    let (snapshots, _, _) = reference_run(&device, &steps, config)?;
    Ok(cut_run(&device, &steps, config, cut, &snapshots))
}

/// Where the injected grown bad blocks struck (`bad_block_test`): what the failed program was
/// writing (from the spare tag of the torn page), or which erase failed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct FailureSites {
    pub metaroot_programs: u64,
    pub metaroot_area_erases: u64,
    pub segment_table_programs: u64,
    pub tree_node_programs: u64,
    pub data_programs: u64,
    pub log_erases: u64,
    /// Scheduled past the run's last operation (a run with failures may issue fewer).
    pub not_reached: u64,
}

#[derive(Clone, Debug, serde::Serialize)]
pub struct BadBlockReport {
    pub workload: String,
    pub steps: usize,
    pub flash_operations: u64,
    /// Runs made, each with one program or erase failing as a block going bad under it.
    pub injections: u64,
    pub failures: u64,
    /// Where the failures struck.
    pub sites: FailureSites,
    /// Runs in which the retired block's capacity made a later step answer ENOSPC where the
    /// run without a failure did not (checked for durability and consistency, not against the
    /// reference state, which had more room).
    pub runs_short_of_space: u64,
    /// Runs that ended with a block masked out of its segment (the chip mask) rather than the
    /// segment retired.
    pub runs_with_masked_blocks: u64,
    pub failure_examples: Vec<String>,
}

/// Grown bad blocks everywhere: for every `stride`-th flash operation k of the workload's
/// reference run, the workload runs again with operation k failing (status fail: the block goes
/// bad under that program or erase; metaroot and segment-table writes included). Every step
/// must succeed, the visible state must equal the reference run's, and after a clean unmount
/// the volume must mount, pass fsck and show the same state. (Without NVRAM.)
pub fn bad_block_test(
    workload: Workload,
    config: &CrashConfig,
    stride: u64,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<BadBlockReport, String> {
    let steps = workload.steps(config.seed, config.scale);
    let config = CrashConfig { nvram_bytes: None, ..config.clone() };
    let device = formatted_device(&config)?;
    let (_, operations, _, expected, outcomes) = reference_run_to_the_end(&device, &steps, &config)?;
    let points: Vec<u64> = (0..operations).step_by(usize::try_from(stride.max(1)).unwrap_or(usize::MAX)).collect();
    let total = points.len() as u64;
    let mut report = BadBlockReport {
        workload: workload.name().to_string(),
        steps: steps.len(),
        flash_operations: operations,
        injections: total,
        failures: 0,
        sites: FailureSites::default(),
        runs_short_of_space: 0,
        runs_with_masked_blocks: 0,
        failure_examples: Vec::new(),
    };
    for (done, &point) in points.iter().enumerate() {
        let reference = Reference { listing: &expected, outcomes: &outcomes };
        if let Err(reason) = bad_block_run(&device, &steps, &config, point, reference, &mut report) {
            report.failures += 1;
            if report.failure_examples.len() < 5 {
                report.failure_examples.push(format!(
                    "{}: failure at operation {}: {reason}",
                    workload.name(),
                    point + 1
                ));
            }
        }
        progress(done as u64 + 1, total);
    }
    Ok(report)
}

/// What the run without a failure showed.
#[derive(Clone, Copy)]
struct Reference<'r> {
    listing: &'r Listing,
    outcomes: &'r [StepOutcome],
}

fn bad_block_run(
    device: &Devices,
    steps: &[Step],
    config: &CrashConfig,
    point: u64,
    reference: Reference<'_>,
    report: &mut BadBlockReport,
) -> Result<(), String> {
    let (mut flash, _) = device.copy();
    flash.schedule_operation_failure(point);
    let mut short_of_space = false;
    let mut fs = mount(flash, None, config).map_err(|error| format!("mount: {error}"))?;
    for (index, step) in steps.iter().enumerate() {
        let mut observer = |fs: &mut FileSystem<SimFlash>, _: bool| -> Result<(), FsError> {
            fs.now_ns += 1;
            Ok(())
        };
        let outcome = apply(&mut fs, step, &mut observer).map_err(|error| format!("step {index} {step:?}: {error}"))?;
        let outcome = outcome.err().map(|refusal| refusal.errno());
        let expected = reference.outcomes.get(index).copied().flatten();
        // The one difference a retired block may make is less room: once this run is refused
        // for space with a segment retired, what fits after differs from the reference run
        // (a file it could still create may not fit now), so from then on the run is checked
        // for consistency and durability instead.
        let retired =
            fs.segment_table().is_some_and(|table| table.retired_segment_count() > 0 || table.masked_blocks() > 0);
        if outcome == Some(fsoc_core::fs::errno::ENOSPC) && retired {
            short_of_space = true;
        }
        if outcome != expected && !short_of_space {
            return Err(format!("step {index} {step:?} answered {outcome:?}, without the failure {expected:?}"));
        }
    }
    classify(fs.flash(), &mut report.sites);
    if fs.segment_table().is_some_and(|table| table.masked_blocks() > 0) {
        report.runs_with_masked_blocks += 1;
    }
    let visible = listing_cached(&fs, &mut DigestCache::new()).map_err(|error| format!("listing: {error}"))?;
    let expected = if short_of_space {
        report.runs_short_of_space += 1;
        &visible
    } else {
        reference.listing
    };
    if &visible != expected {
        let difference = Listing::difference(&visible, expected).to_string();
        let lines: Vec<&str> = difference.lines().take(8).map(str::trim).collect();
        return Err(format!("the visible state differs from the run without a failure: {}", lines.join("; ")));
    }
    let flash = fs.unmount().map_err(|error| format!("unmount: {error}"))?;
    let mut fs = mount(flash, None, config).map_err(|error| format!("remount: {error}"))?;
    match fs.fsck(true) {
        Ok(report) if report.is_clean() => {}
        Ok(report) => return Err(format!("fsck: {:?}", report.violations)),
        Err(error) => return Err(format!("fsck: {error}")),
    }
    let remounted = listing_cached(&fs, &mut DigestCache::new()).map_err(|error| format!("listing: {error}"))?;
    if &remounted != expected {
        return Err(String::from("after a remount the visible state differs from the one before it"));
    }
    Ok(())
}

/// Counts where the scheduled failure struck.
fn classify(flash: &SimFlash, sites: &mut FailureSites) {
    use fsoc_core::segment::layout::FIRST_LOG_SEGMENT;
    use fsoc_core::segment::PageTag;
    use fsoc_media::store::PageStore;
    let Some(hit) = flash.scheduled_failure_hit() else {
        sites.not_reached += 1;
        return;
    };
    let in_log = hit.block.block.0 >= FIRST_LOG_SEGMENT;
    let Some(page) = hit.page else {
        if in_log {
            sites.log_erases += 1;
        } else {
            sites.metaroot_area_erases += 1;
        }
        return;
    };
    let geometry = fsoc_media::Flash::geometry(flash);
    let mut data = vec![0u8; geometry.page_data_bytes as usize];
    let mut spare = vec![0u8; geometry.spare_bytes as usize];
    let tag = flash
        .inspect_store(|store| store.read_contents(page, &mut data, &mut spare))
        .ok()
        .and_then(|()| PageTag::decode(&spare));
    match tag {
        Some(PageTag::Metaroot) => sites.metaroot_programs += 1,
        Some(PageTag::SegmentTable { .. } | PageTag::SegmentTableCopy { .. }) => sites.segment_table_programs += 1,
        Some(PageTag::Node { .. } | PageTag::NodeCopy { .. }) => sites.tree_node_programs += 1,
        Some(PageTag::Data { .. }) => sites.data_programs += 1,
        Some(PageTag::Superblock | PageTag::Parity) | None => sites.not_reached += 1,
    }
}

/// What `chip_loss_test` found for one workload.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct ChipLossReport {
    pub workload: String,
    pub steps: usize,
    pub flash_operations: u64,
    /// Runs made, each with one chip dying after a sampled flash operation.
    pub kills: u64,
    /// Of those, runs in which the workload ended before the chip's next program or erase (the
    /// chip died idle: the degraded mount and the rebuild are still checked).
    pub died_idle: u64,
    /// Runs whose rebuild was cut by a power failure and run again.
    pub rebuilds_cut: u64,
    /// Pages the rebuilds wrote.
    pub rebuilt_pages: u64,
    /// Mirror-meta: files the degraded volumes listed whose data was on the lost chip (read as
    /// EIO), summed over the runs.
    pub files_lost: u64,
    pub failures: u64,
    pub failure_examples: Vec<String>,
}

/// One chip lost (issue 12 point 2): for `samples` seeded flash operations k of the workload's
/// reference run, the workload runs again on a volume with parity with a seeded chip dying
/// after operation k (in the middle of whatever is being written: data, a row's parity, a
/// metaroot, an erase). The volume must then mount without that chip (read-only), show a
/// committed state no older than the last commit made before the chip died nor than any commit
/// the run reported, with every file's bytes, and pass fsck; a blank chip put in its place must
/// be rebuilt (every third run with a power cut in the middle of the rebuild, which is run
/// again) after which the volume must mount whole, pass fsck, show the same state and take a
/// change. `config.fs.volume.redundancy` must be parity and `config.chip_count` at least 2.
pub fn chip_loss_test(
    workload: Workload,
    config: &CrashConfig,
    samples: u64,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<ChipLossReport, String> {
    if config.fs.volume.redundancy == fsoc_core::segment::Redundancy::None || config.chip_count < 2 {
        return Err(String::from(
            "chip loss needs a volume with redundancy (parity or mirror-meta) on two chips or more",
        ));
    }
    let steps = workload.steps(config.seed, config.scale);
    let config = CrashConfig { nvram_bytes: None, ..config.clone() };
    let device = formatted_device(&config)?;
    let (snapshots, operations, _) = reference_run(&device, &steps, &config)?;
    let mut rng = SeededRng::new(config.seed ^ 0xD1E);
    let mut report = ChipLossReport {
        workload: workload.name().to_string(),
        steps: steps.len(),
        flash_operations: operations,
        ..ChipLossReport::default()
    };
    for done in 0..samples {
        let point = rng.below(operations.max(1));
        let chip = u32::try_from(rng.below(u64::from(config.chip_count))).unwrap_or(0);
        let cut_rebuild = done % 3 == 2;
        let rebuild_cut_after = rng.below(4 * u64::from(config.block_count));
        report.kills += 1;
        let run = ChipLossRun { point, chip, rebuild_cut_after: cut_rebuild.then_some(rebuild_cut_after) };
        if let Err(reason) = chip_loss_run(&device, &steps, &config, run, &snapshots, &mut report) {
            report.failures += 1;
            if report.failure_examples.len() < 5 {
                report.failure_examples.push(format!(
                    "{}: chip {chip} dies after operation {point}{}: {reason}",
                    workload.name(),
                    if cut_rebuild { format!(", rebuild cut after {rebuild_cut_after}") } else { String::new() }
                ));
            }
        }
        progress(done + 1, samples);
    }
    Ok(report)
}

#[derive(Clone, Copy)]
struct ChipLossRun {
    point: u64,
    chip: u32,
    rebuild_cut_after: Option<u64>,
}

fn chip_loss_run(
    device: &Devices,
    steps: &[Step],
    config: &CrashConfig,
    run: ChipLossRun,
    snapshots: &[Snapshot],
    report: &mut ChipLossReport,
) -> Result<(), String> {
    use fsoc_media::ChipIndex;
    let (mut flash, _) = device.copy();
    flash.schedule_chip_failure(run.point, ChipIndex(run.chip)).map_err(|error| error.to_string())?;
    let mut fs = mount(flash, None, config).map_err(|error| format!("mount: {error}"))?;
    // Commits the run saw made (as the reference run counts them): each is durable.
    let mut counter = fs.commit_counter();
    let mut commits_seen = 0usize;
    for step in steps {
        let mut observer = |fs: &mut FileSystem<SimFlash>, _: bool| -> Result<(), FsError> {
            fs.now_ns += 1;
            if fs.commit_counter() != counter {
                counter = fs.commit_counter();
                commits_seen += 1;
            }
            Ok(())
        };
        if apply(&mut fs, step, &mut observer).is_err() {
            break;
        }
    }
    let mut flash = fs.into_flash_without_commit();
    if !flash.chip_failed(ChipIndex(run.chip)) {
        // The workload ended first: the chip dies now, idle.
        report.died_idle += 1;
        flash.fail_chip(ChipIndex(run.chip)).map_err(|error| error.to_string())?;
    }
    let durable = snapshots.iter().rposition(|snapshot| snapshot.durable_at(CutPoint::Flash(run.point))).unwrap_or(0);
    let oldest = durable.max(commits_seen);
    let mut fs = mount(flash, None, config).map_err(|error| format!("degraded mount: {error}"))?;
    if fs.missing_chip() != Some(run.chip) {
        return Err(format!("the degraded mount runs without chip {:?}", fs.missing_chip()));
    }
    if config.fs.volume.redundancy == fsoc_core::segment::Redundancy::MirrorMeta {
        // Names and metadata only: the lost chip's file data is gone (EIO), nothing to rebuild.
        report.files_lost += check_names(&mut fs, snapshots, oldest)?;
        return Ok(());
    }
    let visible = check_state(&mut fs, snapshots, oldest, "degraded")?;
    // A new, blank chip in its place; the rebuild, perhaps cut by a power failure and run again.
    let mut flash = fs.into_flash_without_commit();
    flash.replace_chip(ChipIndex(run.chip)).map_err(|error| error.to_string())?;
    if let Some(after) = run.rebuild_cut_after {
        flash.schedule_power_cut(after);
        let (cut, _) = fsoc_core::txn::rebuild_chip(flash, run.chip, &mut |_, _| {});
        flash = cut;
        if flash.power_is_lost() {
            report.rebuilds_cut += 1;
            flash.restore_power();
        } else {
            // The rebuild ended first: the cut must not strike the checks below.
            flash.cancel_power_cut();
        }
    }
    let (flash, rebuilt) = fsoc_core::txn::rebuild_chip(flash, run.chip, &mut |_, _| {});
    let rebuilt = rebuilt.map_err(|error| format!("rebuild: {error}"))?;
    report.rebuilt_pages += rebuilt.pages_written;
    if rebuilt.unrecoverable_pages > 0 {
        return Err(format!("the rebuild could not rebuild {} pages", rebuilt.unrecoverable_pages));
    }
    let mut fs = mount(flash, None, config).map_err(|error| format!("mount after rebuild: {error}"))?;
    if fs.missing_chip().is_some() {
        return Err(String::from("after the rebuild the volume still runs without a chip"));
    }
    let after = check_state(&mut fs, snapshots, oldest, "rebuilt")?;
    if after != visible {
        return Err(String::from("the rebuilt volume shows another state than the degraded one"));
    }
    // Whole again: it takes a change, commits and remounts.
    let liveness = (|| -> Result<(), FsError> {
        let fd =
            fs.open(b"/liveness", fsoc_core::OpenFlags { write: true, create: true, ..Default::default() }, 0o644)?;
        fs.pwrite(fd, 0, b"alive")?;
        fs.close(fd)?;
        fs.transact()?;
        let flash = fs.unmount()?;
        let again = mount(flash, None, config)?;
        again.stat(b"/liveness")?;
        Ok(())
    })();
    match liveness {
        Ok(()) | Err(FsError::NoSpace) => Ok(()),
        Err(error) => Err(format!("liveness after the rebuild: {error}")),
    }
}

/// Mirror-meta without a chip: fsck's structure check must pass, and the volume must show a
/// committed state of the reference run no older than commit `oldest`, every name and
/// attribute, with each file's bytes or an I/O error (never other bytes). Answers the files
/// lost.
fn check_names(fs: &mut FileSystem<SimFlash>, snapshots: &[Snapshot], oldest: usize) -> Result<u64, String> {
    match fs.fsck(false) {
        Ok(report) if report.is_clean() => {}
        Ok(report) => return Err(format!("degraded: fsck: {:?}", report.violations)),
        Err(error) => return Err(format!("degraded: fsck: {error}")),
    }
    let visible = listing_with_lost_files(fs).map_err(|error| format!("degraded: listing: {error}"))?;
    if snapshots.iter().skip(oldest).any(|snapshot| matches_but_lost(&visible, &snapshot.listing)) {
        return Ok(lost_files(&visible) as u64);
    }
    let expected = snapshots.get(oldest).map_or(&visible, |snapshot| &snapshot.listing);
    Err(format!(
        "degraded: the names are those of no commit from {oldest} on: {}",
        first_differences(&visible, expected)
    ))
}

/// fsck must pass and the visible state must be a committed state of the reference run no
/// older than commit `oldest`.
fn check_state(
    fs: &mut FileSystem<SimFlash>,
    snapshots: &[Snapshot],
    oldest: usize,
    label: &str,
) -> Result<Listing, String> {
    match fs.fsck(false) {
        Ok(report) if report.is_clean() => {}
        Ok(report) => return Err(format!("{label}: fsck: {:?}", report.violations)),
        Err(error) => return Err(format!("{label}: fsck: {error}")),
    }
    let visible = listing_cached(fs, &mut DigestCache::new()).map_err(|error| format!("{label}: listing: {error}"))?;
    if snapshots.iter().skip(oldest).any(|snapshot| snapshot.listing == visible) {
        return Ok(visible);
    }
    let expected = snapshots.get(oldest).map_or(&visible, |snapshot| &snapshot.listing);
    let difference = Listing::difference(&visible, expected).to_string();
    let lines: Vec<&str> = difference.lines().take(8).map(str::trim).collect();
    Err(format!("{label}: the visible state is no commit from {oldest} on: {}", lines.join("; ")))
}
