//! Power cut everywhere: run a workload once to learn, for every commit, the flash operation at
//! which it became durable and the visible state it made durable; then, for every operation
//! index k (or a seeded sample), replay the workload on a copy of the formatted device with
//! power cut after k operations (operation k+1 is torn or interrupted), remount, run fsck, and
//! require the visible state to equal the last durable commit or the one in flight.

use fsoc_core::fs::FsError;
use fsoc_core::{FileSystem, FsConfig};
use fsoc_media::{FaultConfig, Profile, SimConfig, SimFlash};

use crate::listing::{listing_cached, DigestCache, Listing};
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
        }
    }
}

#[derive(Clone, Debug, serde::Serialize)]
pub struct WorkloadReport {
    pub workload: String,
    pub steps: usize,
    pub flash_operations: u64,
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
    listing: Listing,
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

fn formatted_device(config: &CrashConfig) -> Result<SimFlash, String> {
    let flash = SimFlash::create(sim_config(config)).map_err(|error| format!("simulator: {error}"))?;
    let fs = FileSystem::format(flash, fs_config(config), config.seed).map_err(|error| format!("format: {error}"))?;
    fs.unmount().map_err(|error| format!("unmount after format: {error}"))
}

/// The reference run: every commit's durable operation index and visible state.
fn reference_run(device: &SimFlash, steps: &[Step], config: &CrashConfig) -> Result<(Vec<Snapshot>, u64), String> {
    let mut fs = FileSystem::mount(device.clone(), fs_config(config)).map_err(|error| format!("mount: {error}"))?;
    let mut cache = DigestCache::new();
    let mut current = listing_cached(&fs, &mut cache).map_err(|error| format!("listing: {error}"))?;
    let mut snapshots = vec![Snapshot { durable_after_operations: 0, listing: current.clone() }];
    let mut counter = fs.commit_counter();
    for (index, step) in steps.iter().enumerate() {
        let mut observer = |fs: &mut FileSystem<SimFlash>, commits_at_end: bool| -> Result<(), FsError> {
            fs.now_ns += 1;
            let after = listing_cached(fs, &mut cache)?;
            if fs.commit_counter() != counter {
                counter = fs.commit_counter();
                let visible = if commits_at_end { after.clone() } else { current.clone() };
                snapshots.push(Snapshot { durable_after_operations: fs.last_commit_operations(), listing: visible });
            }
            current = after;
            Ok(())
        };
        match apply(&mut fs, step, &mut observer) {
            Ok(_) => {}
            Err(error) => return Err(format!("reference run failed at step {index} {step:?}: {error}")),
        }
        let report = fs.fsck(false).map_err(|error| format!("fsck: {error}"))?;
        if !report.is_clean() {
            return Err(format!("reference run: fsck after step {index} {step:?}: {:?}", report.violations));
        }
    }
    let operations = fs.flash_operations_issued();
    Ok((snapshots, operations))
}

/// One cut: replay until the power fails, restore power, remount, check.
fn cut_run(
    device: &SimFlash,
    steps: &[Step],
    config: &CrashConfig,
    cut_after: u64,
    snapshots: &[Snapshot],
) -> CrashOutcome {
    let mut flash = device.clone();
    flash.schedule_power_cut(cut_after);
    let mut fs = match FileSystem::mount(flash, fs_config(config)) {
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
    if !flash.power_is_lost() {
        return CrashOutcome::Failed(String::from("the workload ended before the cut point"));
    }
    flash.restore_power();
    let mut fs = match FileSystem::mount(flash, fs_config(config)) {
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
    let durable = snapshots.iter().rposition(|snapshot| snapshot.durable_after_operations <= cut_after).unwrap_or(0);
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
    // Liveness: with faults off, the volume accepts a change, commits and remounts.
    let liveness = (|| -> Result<(), FsError> {
        let fd =
            fs.open(b"/liveness", fsoc_core::OpenFlags { write: true, create: true, ..Default::default() }, 0o644)?;
        fs.pwrite(fd, 0, b"alive")?;
        fs.close(fd)?;
        fs.transact()?;
        let flash = fs.unmount()?;
        let again = FileSystem::mount(flash, fs_config(config))?;
        again.stat(b"/liveness")?;
        Ok(())
    })();
    match liveness {
        Ok(()) => CrashOutcome::Passed,
        Err(FsError::NoSpace) => CrashOutcome::Passed, // a full volume may refuse; that is not a failure
        Err(error) => CrashOutcome::Failed(format!("liveness after recovery: {error}")),
    }
}

/// Runs the power-cut test for one workload. `progress` is called with (done, total).
pub fn crash_test(
    workload: Workload,
    config: &CrashConfig,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<WorkloadReport, String> {
    let steps = workload.steps(config.seed, config.scale);
    let device = formatted_device(config)?;
    let (snapshots, operations) = reference_run(&device, &steps, config)?;
    let cut_points: Vec<u64> = match config.max_cuts {
        // Cut after k operations for k in 0..operations: operation k+1 exists and is torn.
        Some(max_cuts) if max_cuts < operations => {
            let mut rng = SeededRng::new(config.seed ^ 0xC0FFEE);
            let mut points: Vec<u64> = (0..max_cuts).map(|_| rng.below(operations)).collect();
            points.sort_unstable();
            points.dedup();
            points
        }
        _ => (0..operations).collect(),
    };
    let mut failures = 0u64;
    let mut failure_examples = Vec::new();
    let total = cut_points.len() as u64;
    for (done, &cut_after) in cut_points.iter().enumerate() {
        if let CrashOutcome::Failed(reason) = cut_run(&device, &steps, config, cut_after, &snapshots) {
            failures += 1;
            if failure_examples.len() < 5 {
                failure_examples.push(format!(
                    "{}: cut after {cut_after}: {reason}\n  replay: fsoc crashtest --workload {} --seed {} --cut-after {cut_after}",
                    workload.name(),
                    workload.name(),
                    config.seed
                ));
            }
        }
        progress(done as u64 + 1, total);
    }
    Ok(WorkloadReport {
        workload: workload.name().to_string(),
        steps: steps.len(),
        flash_operations: operations,
        commits: snapshots.len() - 1,
        cut_points: total,
        failures,
        failure_examples,
    })
}

/// Replays a single cut point (for the `--cut-after` replay line).
pub fn replay_cut(workload: Workload, config: &CrashConfig, cut_after: u64) -> Result<CrashOutcome, String> {
    let steps = workload.steps(config.seed, config.scale);
    let device = formatted_device(config)?;
    let (snapshots, _) = reference_run(&device, &steps, config)?;
    Ok(cut_run(&device, &steps, config, cut_after, &snapshots))
}
