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
    let (flash, nvram) = device.copy();
    let nvram = nvram.as_ref();
    let mut fs = mount(flash, nvram, config).map_err(|error| format!("mount: {error}"))?;
    let mut cache = DigestCache::new();
    let mut current = listing_cached(&fs, &mut cache).map_err(|error| format!("listing: {error}"))?;
    let mut snapshots =
        vec![Snapshot { durable_after_operations: 0, durable_after_nvram_writes: 0, listing: current.clone() }];
    let mut counter = fs.commit_counter();
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
            Ok(_) => {}
            Err(error) => return Err(format!("reference run failed at step {index} {step:?}: {error}")),
        }
        let report = fs.fsck(false).map_err(|error| format!("fsck: {error}"))?;
        if !report.is_clean() {
            return Err(format!("reference run: fsck after step {index} {step:?}: {:?}", report.violations));
        }
    }
    let operations = fs.flash_operations_issued();
    Ok((snapshots, operations, nvram_writes(nvram)))
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
