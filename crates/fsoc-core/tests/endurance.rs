//! End of life (issue 12, point 5). A seeded workload keeps a small volume half full of cold
//! files and rewrites, creates and deletes hot files, with fsyncs, clean remounts and power
//! cuts, until the simulated chips wear out (a reduced endurance, so a run takes seconds in
//! release). Every file is checked against an in-memory model after every remount and cut. The
//! volume must keep every committed byte, end in `FsError::WornOut` (EROFS) rather than EIO or
//! a poisoned volume, mount again read-only with everything readable, and keep the log's erase
//! counts within max/mean 1.1. Figures print with the seed; `measure_end_of_life` (ignored)
//! runs any shape from the environment (FSOC_SEED, FSOC_CHIPS, FSOC_BLOCKS, FSOC_ENDURANCE,
//! FSOC_STEPS, FSOC_COLD_PERCENT, FSOC_COLD).
//!
//! Also here: a metaroot area that can no longer be erased (aged blocks), and erase counts
//! across power cuts.
mod common;

use std::collections::{BTreeMap, BTreeSet};

use common::*;
use fsoc_core::segment::layout::{FIRST_LOG_SEGMENT, SUPERBLOCK_HOMES};
use fsoc_core::txn::WornOut;
use fsoc_core::{FileSystem, FsConfig, FsError, OpenFlags};
use fsoc_media::rng::SeededRng;
use fsoc_media::{BlockAddress, FaultConfig, Flash, FlashStats, Profile, SimConfig, SimFlash};

/// What one endurance run is made of.
#[derive(Clone, Copy, Debug)]
struct Endurance {
    seed: u64,
    chips: u32,
    blocks: u32,
    endurance_cycles: u32,
    /// Share of the capacity filled with cold files first, in percent.
    cold_percent: u64,
    /// Steps (per 1,000) that rewrite a cold file instead of changing a hot one.
    cold_rewrites_per_mille: u64,
}

/// Largest hot file, and how many hot files there are at most.
const HOT_BYTES_MAX: u64 = 32 * 1024;
const HOT_FILES_MAX: usize = 24;

impl Endurance {
    fn new(seed: u64, chips: u32, blocks: u32, endurance_cycles: u32) -> Self {
        Endurance { seed, chips, blocks, endurance_cycles, cold_percent: 50, cold_rewrites_per_mille: 0 }
    }

    fn flash(&self) -> SimFlash {
        // MLC: 2 KiB pages, 64 pages a block; wear-out faults as the profile has them (erases
        // fail from 100% of the endurance on, certainly at 400%), bit errors rising with wear.
        let mut config = SimConfig::new(Profile::Mlc, self.chips, self.blocks, self.seed);
        config.endurance_cycles = self.endurance_cycles;
        SimFlash::create(config).expect("valid simulator config")
    }
}

/// How a run ended and what it measured.
#[derive(Debug, Default)]
struct Outcome {
    steps: u64,
    /// The first error other than ENOSPC that a change met, and at which step.
    end: Option<(u64, FsError)>,
    /// Bytes of file data written by calls that succeeded.
    user_bytes: u64,
    flash_programs: u64,
    flash_bytes_programmed: u64,
    flash_erases: u64,
    remounts: u64,
    power_cuts: u64,
    enospc: u64,
    retired_segments: u32,
    /// The superblock's generation at the end: how many times a metaroot area moved.
    area_moves: u32,
    /// Physical erase counts of the log blocks not retired.
    log_erase_min: u32,
    log_erase_mean: f64,
    log_erase_max: u32,
    /// Over every block but the superblock's homes: the log's (retired ones included) and the
    /// metaroot areas'.
    all_erase_mean: f64,
    all_erase_max: u32,
    /// Block 1, 2 and 3 of chip 0.
    metaroot_erases: Vec<u32>,
    /// File-system counters summed over the mounts.
    cleaner_runs: u64,
    pages_relocated: u64,
    commits: u64,
    /// What went wrong after the end (must stay empty): files lost or changed, calls that did
    /// not answer as a read-only volume should.
    after_end: Vec<String>,
}

impl Outcome {
    fn wear_ratio(&self) -> f64 {
        f64::from(self.log_erase_max) / self.log_erase_mean.max(1.0)
    }

    fn all_wear_ratio(&self) -> f64 {
        f64::from(self.all_erase_max) / self.all_erase_mean.max(1.0)
    }

    fn write_amplification(&self) -> f64 {
        self.flash_bytes_programmed as f64 / self.user_bytes.max(1) as f64
    }
}

type Files = BTreeMap<String, Vec<u8>>;

/// The files as the workload left them: `working` is what reads must return now, `durable`
/// the state at the last transaction point the workload asked for, and `since` every version a
/// file had after it (a commit the file system makes on its own, to reclaim space, may have
/// made any of them durable; `None` is a deletion, an empty file what O_TRUNC left).
#[derive(Default)]
struct Model {
    working: Files,
    durable: Files,
    since: BTreeMap<String, Vec<Option<Vec<u8>>>>,
}

impl Model {
    fn set(&mut self, path: &str, contents: Option<Vec<u8>>) {
        match &contents {
            Some(data) => self.working.insert(path.to_string(), data.clone()),
            None => self.working.remove(path),
        };
        self.since.entry(path.to_string()).or_default().push(contents);
    }

    fn committed(&mut self) {
        self.durable = self.working.clone();
        self.since.clear();
    }

    /// After a power cut: every file must hold its durable contents or a later version; the
    /// model then takes what the volume holds. Returns what was lost.
    fn after_power_cut(&mut self, fs: &mut FileSystem<SimFlash>) -> Vec<String> {
        let found = volume_files(fs);
        let mut lost = Vec::new();
        let paths: BTreeSet<&String> = self.durable.keys().chain(self.since.keys()).chain(found.keys()).collect();
        for path in paths {
            let actual = match found.get(path).cloned().unwrap_or(Ok(None)) {
                Ok(actual) => actual,
                Err(error) => {
                    lost.push(format!("{path}: {error}"));
                    continue;
                }
            };
            let durable = self.durable.get(path).cloned();
            let later = self.since.get(path).is_some_and(|versions| versions.contains(&actual));
            if actual != durable && !later {
                lost.push(format!(
                    "{path}: {:?} bytes found, {:?} durable, {} later versions",
                    actual.as_ref().map(Vec::len),
                    durable.as_ref().map(Vec::len),
                    self.since.get(path).map_or(0, Vec::len)
                ));
            }
        }
        self.working = found.into_iter().filter_map(|(path, data)| Some((path, data.ok()??))).collect();
        self.committed();
        lost
    }

    /// Files on the volume that differ from the working state (while mounted, after a clean
    /// unmount).
    fn differences(&self, fs: &mut FileSystem<SimFlash>) -> Vec<String> {
        let found = volume_files(fs);
        let mut differences = Vec::new();
        for (path, expected) in &self.working {
            match found.get(path) {
                Some(Ok(Some(data))) if data == expected => {}
                Some(Ok(Some(data))) => {
                    differences.push(format!("{path}: {} bytes read, {} expected", data.len(), expected.len()))
                }
                Some(Err(error)) => differences.push(format!("{path}: {error}")),
                Some(Ok(None)) | None => differences.push(format!("{path}: missing")),
            }
        }
        for path in found.keys().filter(|path| !self.working.contains_key(*path)) {
            differences.push(format!("{path}: on the volume, not in the model"));
        }
        differences
    }
}

/// Every file under /cold and /hot with its contents (or the error reading it).
fn volume_files(fs: &mut FileSystem<SimFlash>) -> BTreeMap<String, Result<Option<Vec<u8>>, String>> {
    let mut files = BTreeMap::new();
    for directory in ["/cold", "/hot"] {
        let entries = match fs.readdir_path(directory.as_bytes()) {
            Ok(entries) => entries,
            Err(error) => {
                files.insert(directory.to_string(), Err(format!("readdir: {error}")));
                continue;
            }
        };
        for entry in entries {
            let path = format!("{directory}/{}", String::from_utf8_lossy(&entry.name));
            let contents = read_file(fs, &path).map(Some).map_err(|error| format!("read: {error}"));
            files.insert(path, contents);
        }
    }
    files
}

fn content(rng: &mut SeededRng, size: u64) -> Vec<u8> {
    let salt = rng.next_u64();
    (0..size).map(|offset| (fsoc_media::rng::hash64(salt, offset / 8, 0, 0) >> (8 * (offset % 8))) as u8).collect()
}

/// Writes `data` as the whole of `path`: open with O_TRUNC, one pwrite, close.
fn put(fs: &mut FileSystem<SimFlash>, path: &str, data: &[u8]) -> Result<(), FsError> {
    let flags = OpenFlags { truncate: true, ..CREATE };
    let fd = fs.open(path.as_bytes(), flags, 0o644)?;
    let result = fs.pwrite(fd, 0, data).map(|_| ());
    let closed = fs.close(fd);
    result.and(closed)
}

fn add_stats(fs: &FileSystem<SimFlash>, outcome: &mut Outcome) {
    outcome.cleaner_runs += fs.stats.cleaner_runs;
    outcome.pages_relocated += fs.stats.pages_relocated;
    outcome.commits += fs.stats.commits;
}

/// Physical wear (the simulator's erase counts) and the flash's counters.
fn wear(fs: &mut FileSystem<SimFlash>, outcome: &mut Outcome) {
    let _ = fs.space(); // loads the segment table
    let layout = fs.layout();
    let flash = fs.flash();
    let table = fs.segment_table();
    let mut in_service = Vec::new();
    let mut all = Vec::new();
    // Every block but the superblock's homes (block 0; block 4 from format version 9): the log's
    // and the metaroot areas', wherever they are (version 9 levels the areas with the log).
    for segment in (1..layout.segment_count()).filter(|segment| !SUPERBLOCK_HOMES.contains(segment)) {
        let retired = table.is_some_and(|table| table.entry(segment).retired || segment < FIRST_LOG_SEGMENT);
        for block in layout.blocks_of_segment(segment) {
            let count = flash.erase_count(block).expect("erase count");
            all.push(count);
            if !retired {
                in_service.push(count);
            }
        }
    }
    let mean = |counts: &[u32]| counts.iter().map(|&count| f64::from(count)).sum::<f64>() / counts.len().max(1) as f64;
    outcome.all_erase_max = all.iter().copied().max().unwrap_or(0);
    outcome.all_erase_mean = mean(&all);
    outcome.log_erase_max = in_service.iter().copied().max().unwrap_or(0);
    outcome.log_erase_min = in_service.iter().copied().min().unwrap_or(0);
    outcome.log_erase_mean = mean(&in_service);
    outcome.retired_segments = table.map_or(0, |table| table.retired_segment_count());
    outcome.area_moves = fs.superblock().generation;
    outcome.metaroot_erases =
        (1..4).map(|block| flash.erase_count(BlockAddress::new(0, block)).expect("erase count")).collect();
    let counters = flash.counters();
    let totals = counters.chips().iter().fold((0, 0, 0), |(programs, bytes, erases), chip| {
        (programs + chip.programs, bytes + chip.bytes_programmed, erases + chip.erases)
    });
    (outcome.flash_programs, outcome.flash_bytes_programmed, outcome.flash_erases) = totals;
}

/// Runs the workload until a change fails with anything but ENOSPC (or `step_limit` steps),
/// then checks the volume as a read-only one: see `check_the_end`.
fn run(run: Endurance, step_limit: u64) -> Outcome {
    let seed = run.seed;
    let mut outcome = Outcome::default();
    let mut rng = SeededRng::new(seed);
    let config = FsConfig::default();
    let mut fs = FileSystem::format(run.flash(), config, seed).expect("format");
    let mut model = Model::default();
    fs.mkdir(b"/cold", 0o755).expect("mkdir");
    fs.mkdir(b"/hot", 0o755).expect("mkdir");
    let capacity = fs.space().expect("space").capacity_pages * fs.layout().page_size_bytes() as u64;
    let (mut cold_bytes, mut index) = (0, 0);
    while cold_bytes < capacity * run.cold_percent / 100 {
        let size = rng.range(1, 64 * 1024);
        let data = content(&mut rng, size);
        let path = format!("/cold/{index}");
        put(&mut fs, &path, &data).expect("cold file");
        model.set(&path, Some(data));
        (cold_bytes, index) = (cold_bytes + size, index + 1);
    }
    fs.transact().expect("commit");
    model.committed();
    let mut next_hot = 0u64;
    let mut failed_path = None;
    while outcome.steps < step_limit {
        outcome.steps += 1;
        let step = outcome.steps;
        let hot: Vec<String> = model.working.keys().filter(|path| path.starts_with("/hot/")).cloned().collect();
        let choice = rng.below(1000);
        let (path, data) = if choice < run.cold_rewrites_per_mille {
            let cold: Vec<&String> = model.working.keys().filter(|path| path.starts_with("/cold/")).collect();
            let path = cold[rng.below(cold.len() as u64) as usize].clone();
            let size = model.working[&path].len().max(1) as u64;
            (path, Some(content(&mut rng, size)))
        } else if choice < 550 && !hot.is_empty() {
            let path = hot[rng.below(hot.len() as u64) as usize].clone();
            let size = rng.range(1, HOT_BYTES_MAX);
            (path, Some(content(&mut rng, size)))
        } else if choice < 800 && hot.len() < HOT_FILES_MAX || hot.is_empty() {
            next_hot += 1;
            let size = rng.range(1, HOT_BYTES_MAX);
            (format!("/hot/{next_hot}"), Some(content(&mut rng, size)))
        } else {
            (hot[rng.below(hot.len() as u64) as usize].clone(), None)
        };
        let result = match &data {
            Some(data) => {
                // O_TRUNC first: a commit the file system makes in between may keep it empty.
                model.since.entry(path.clone()).or_default().push(Some(Vec::new()));
                put(&mut fs, &path, data).inspect(|()| outcome.user_bytes += data.len() as u64)
            }
            None => fs.unlink(path.as_bytes()),
        };
        match result {
            Ok(()) => model.set(&path, data),
            Err(FsError::NoSpace) => {
                outcome.enospc += 1;
                // The failed write may have left part of the file: take what the volume has.
                let found = read_file(&mut fs, &path).ok();
                model.set(&path, found);
                if let Some(victim) = hot.first() {
                    if fs.unlink(victim.as_bytes()).is_ok() {
                        model.set(victim, None);
                    }
                }
            }
            Err(error) => {
                if let Some(data) = data {
                    // Failed half-way: a commit may have kept the new contents.
                    model.since.entry(path.clone()).or_default().push(Some(data));
                }
                failed_path = Some(path);
                outcome.end = Some((step, error));
                break;
            }
        }
        if rng.below(2) == 0 {
            match fs.transact() {
                Ok(()) => model.committed(),
                Err(error) => {
                    outcome.end = Some((step, error));
                    break;
                }
            }
        }
        if step % 997 == 0 {
            let differences = model.differences(&mut fs);
            assert!(differences.is_empty(), "seed {seed:#x} step {step}: files differ: {differences:?}");
        }
        if step % 2003 == 0 {
            add_stats(&fs, &mut outcome);
            let flash = match fs.unmount() {
                Ok(flash) => flash,
                Err(error) => panic!("seed {seed:#x} step {step}: unmount: {error:?}"),
            };
            model.committed();
            outcome.remounts += 1;
            fs = FileSystem::mount(flash, config)
                .unwrap_or_else(|error| panic!("seed {seed:#x} step {step}: remount: {error:?}"));
            let differences = model.differences(&mut fs);
            assert!(
                differences.is_empty(),
                "seed {seed:#x} step {step}: files differ after a remount: {differences:?}"
            );
        } else if step % 1499 == 0 {
            add_stats(&fs, &mut outcome);
            let flash = fs.into_flash_without_commit();
            outcome.power_cuts += 1;
            fs = FileSystem::mount(flash, config)
                .unwrap_or_else(|error| panic!("seed {seed:#x} step {step}: mount after a cut: {error:?}"));
            let lost = model.after_power_cut(&mut fs);
            assert!(lost.is_empty(), "seed {seed:#x} step {step}: files lost at a cut: {lost:?}");
        }
    }
    wear(&mut fs, &mut outcome);
    add_stats(&fs, &mut outcome);
    if outcome.end.is_some() {
        check_the_end(fs, &mut model, failed_path, &mut outcome);
    }
    outcome
}

/// After the change that found the flash worn out: the volume answers as a read-only one
/// (reads, statfs with nothing free, fsync, changes refused with EROFS), unmounts, mounts again
/// read-only with every file, and so again after a power cut.
fn check_the_end(mut fs: FileSystem<SimFlash>, model: &mut Model, failed_path: Option<String>, outcome: &mut Outcome) {
    let problems = &mut outcome.after_end;
    let read_only = |what: &str, result: Result<(), FsError>, problems: &mut Vec<String>| match result {
        Err(FsError::WornOut(_)) => {}
        other => problems.push(format!("{what}: {other:?}, not WornOut")),
    };
    // The change that failed was refused before it began, but its O_TRUNC may have come first.
    if let Some(path) = failed_path {
        if let Ok(found) = read_file(&mut fs, &path) {
            if model.working.get(&path) != Some(&found) && found.is_empty() {
                model.set(&path, Some(found));
            }
        }
    }
    problems.extend(model.differences(&mut fs).into_iter().map(|difference| format!("at the end: {difference}")));
    match fs.statfs() {
        Ok(statfs) if statfs.free_blocks == 0 => {}
        other => problems.push(format!("statfs at the end: {other:?}, not 0 blocks free")),
    }
    if let Err(error) = fs.transact() {
        problems.push(format!("fsync at the end: {error:?}"));
    }
    read_only("unlink at the end", fs.unlink(b"/cold/0"), problems);
    read_only("mkdir at the end", fs.mkdir(b"/new", 0o755).map(|_| ()), problems);
    let flash = match fs.unmount() {
        Ok(flash) => flash,
        Err(error) => {
            problems.push(format!("unmount at the end: {error:?}"));
            return;
        }
    };
    model.committed();
    for round in ["after the end", "after a power cut after the end"] {
        let mut mounted = match FileSystem::mount(flash.clone(), FsConfig::default()) {
            Ok(mounted) => mounted,
            Err(error) => {
                problems.push(format!("mount {round}: {error:?}"));
                return;
            }
        };
        problems.extend(model.differences(&mut mounted).into_iter().map(|difference| format!("{round}: {difference}")));
        read_only(round, put(&mut mounted, "/hot/after-the-end", b"data"), problems);
        match mounted.statfs() {
            Ok(statfs) if statfs.free_blocks == 0 => {}
            other => problems.push(format!("statfs {round}: {other:?}, not 0 blocks free")),
        }
        drop(mounted.into_flash_without_commit());
    }
}

fn report(run: &Endurance, outcome: &Outcome) -> String {
    let end = outcome.end.as_ref().map(|(step, error)| format!("step {step}: {error:?} (errno {})", error.errno()));
    format!(
        "seed {:#x}, MLC {} chip(s) x {} blocks, endurance {} cycles: {} steps, end {}\n  user bytes {} ({:.1} MiB), \
         flash programmed {} pages ({:.1} MiB), write amplification {:.2}, erases {}\n  log erase counts (segments in \
         service) min {} mean {:.1} max {}: max/mean {:.3}; every block mean {:.1} max {}: max/mean {:.3}; metaroot \
         areas {:?}; retired segments {}; area moves {}\n  remounts {}, power cuts {}, ENOSPC {}, cleaner runs {}, pages relocated {}, \
         full commits {}",
        run.seed,
        run.chips,
        run.blocks,
        run.endurance_cycles,
        outcome.steps,
        end.unwrap_or_else(|| "none".into()),
        outcome.user_bytes,
        outcome.user_bytes as f64 / 1048576.0,
        outcome.flash_programs,
        outcome.flash_bytes_programmed as f64 / 1048576.0,
        outcome.write_amplification(),
        outcome.flash_erases,
        outcome.log_erase_min,
        outcome.log_erase_mean,
        outcome.log_erase_max,
        outcome.wear_ratio(),
        outcome.all_erase_mean,
        outcome.all_erase_max,
        outcome.all_wear_ratio(),
        outcome.metaroot_erases,
        outcome.retired_segments,
        outcome.area_moves,
        outcome.remounts,
        outcome.power_cuts,
        outcome.enospc,
        outcome.cleaner_runs,
        outcome.pages_relocated,
        outcome.commits,
    )
}

fn env<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name).ok().and_then(|text| text.parse().ok()).unwrap_or(default)
}

fn seed_from_env(default: u64) -> u64 {
    std::env::var("FSOC_SEED")
        .ok()
        .and_then(|text| u64::from_str_radix(text.trim_start_matches("0x"), 16).ok())
        .unwrap_or(default)
}

/// Runs `shape` to its end of life and checks what every run must show.
/// The wear spread is checked over the log's segments in service and over every block but the
/// superblock's homes (retired ones and the metaroot areas' included).
fn end_of_life(shape: Endurance) -> Outcome {
    let outcome = run(shape, 1_000_000);
    let report = report(&shape, &outcome);
    println!("{report}");
    let seed = shape.seed;
    let Some((_, end)) = &outcome.end else { panic!("seed {seed:#x}: the chips never wore out\n{report}") };
    assert!(matches!(end, FsError::WornOut(_)), "seed {seed:#x}: the end was not EROFS (worn out)\n{report}");
    assert_eq!(end.errno(), 30, "seed {seed:#x}: EROFS");
    assert!(outcome.after_end.is_empty(), "seed {seed:#x}: after the end: {:#?}\n{report}", outcome.after_end);
    assert!(outcome.wear_ratio() <= 1.1, "seed {seed:#x}: wear spread\n{report}");
    assert!(outcome.all_wear_ratio() <= 1.1, "seed {seed:#x}: wear spread over every block\n{report}");
    outcome
}

/// The run ended worn out for the reason `expected` accepts.
fn assert_end(shape: Endurance, outcome: &Outcome, expected: impl Fn(&WornOut) -> bool) {
    assert!(
        matches!(&outcome.end, Some((_, FsError::WornOut(worn))) if expected(worn)),
        "seed {:#x}: {:?}",
        shape.seed,
        outcome.end
    );
}

/// One chip: the log's segments wear out before the metaroot areas.
#[test]
fn end_of_life_on_one_chip() {
    let shape = Endurance::new(seed_from_env(0xE01), 1, 48, 150);
    let outcome = end_of_life(shape);
    assert_end(shape, &outcome, |worn| matches!(worn, WornOut::Segments { .. }));
    // The log's raw endurance (44 segments of 128 KiB, 150 cycles) is 825 MiB: at least half of
    // it reached files.
    let raw_bytes = 44 * 128 * 1024 * u64::from(shape.endurance_cycles);
    assert!(outcome.user_bytes >= raw_bytes / 2, "seed {:#x}: {} user bytes", shape.seed, outcome.user_bytes);
}

/// Two chips: a segment is a block on each, erased and retired together.
#[test]
fn end_of_life_on_two_chips() {
    let shape = Endurance::new(seed_from_env(0xE01), 2, 40, 150);
    let outcome = end_of_life(shape);
    assert_end(shape, &outcome, |worn| matches!(worn, WornOut::Segments { .. }));
    let raw_bytes = 36 * 256 * 1024 * u64::from(shape.endurance_cycles);
    assert!(outcome.user_bytes >= raw_bytes / 2, "seed {:#x}: {} user bytes", shape.seed, outcome.user_bytes);
}

/// A larger log wears more slowly than the three metaroot areas would, each taking a page at
/// every commit: on format version 9 they move to younger segments whenever they pass the
/// log's most-erased one (`AREA_WEAR_MARGIN`), through as many superblock generations as that
/// takes, so the log wears out first and the spread holds over every block, the areas' included.
#[test]
fn end_of_life_when_the_metaroot_areas_would_wear_out_first() {
    let shape = Endurance::new(seed_from_env(0xE01), 1, 128, 150);
    let outcome = end_of_life(shape);
    assert!(outcome.area_moves > 31, "seed {:#x}: more moves than block 0 held before version 9", shape.seed);
    // The log wears out first, or as the areas do: with compact deltas (version 11) most
    // commits program a metaroot page and no tree node, and this seed ends on an area whose
    // erase fails at a mount's re-anchoring (which cannot move it while a delta waits to be
    // replayed) when the log's mean erase count is past the rated cycles (158.4 of 150).
    let log_worn = outcome.log_erase_mean >= f64::from(shape.endurance_cycles);
    assert_end(shape, &outcome, |worn| {
        matches!(worn, WornOut::Segments { .. }) || (log_worn && matches!(worn, WornOut::MetarootArea { .. }))
    });
    assert!(outcome.log_erase_mean > 100.0, "seed {:#x}: the log did not wear out", shape.seed);
}

/// Any shape, from the environment, printing its figures; nothing asserted.
#[test]
#[ignore = "a measurement: FSOC_SEED, FSOC_CHIPS, FSOC_BLOCKS, FSOC_ENDURANCE, FSOC_STEPS, FSOC_COLD..."]
fn measure_end_of_life() {
    let mut shape =
        Endurance::new(seed_from_env(0xE01), env("FSOC_CHIPS", 1), env("FSOC_BLOCKS", 48), env("FSOC_ENDURANCE", 150));
    shape.cold_percent = env("FSOC_COLD_PERCENT", 50);
    shape.cold_rewrites_per_mille = env("FSOC_COLD", 0);
    let start = std::time::Instant::now();
    let outcome = run(shape, env("FSOC_STEPS", 1_000_000));
    println!("{}\n  after the end: {:?}", report(&shape, &outcome), outcome.after_end);
    println!("  wall {:.1} s", start.elapsed().as_secs_f64());
}

// ----- a metaroot area that can no longer be erased --------------------------------------------

const AREA_ENDURANCE: u32 = 100;

/// A one-chip volume of rated endurance 100 with `/f0`..`/f9`, committed, whose metaroot area
/// blocks in `aged` are past 4× their endurance: their next erase fails (`NandError::WornOut`).
fn volume_with_aged_metaroot_areas(aged: &[u32]) -> (FileSystem<SimFlash>, Files) {
    let mut config = SimConfig::new(Profile::Mlc, 1, 48, 0xA4EA);
    config.endurance_cycles = AREA_ENDURANCE;
    let mut fs =
        FileSystem::format(SimFlash::create(config).expect("simulator"), FsConfig::default(), 1).expect("format");
    let mut files = Files::new();
    for index in 0..10 {
        let data = pattern(3000 * (index + 1), index as u8);
        write_file(&mut fs, &format!("/f{index}"), &data).expect("write");
        files.insert(format!("/f{index}"), data);
    }
    // A full commit: a mount re-anchoring after a power cut cannot move a failed area while a
    // delta waits to be replayed (the segment table does not say what is free until then), and
    // compact deltas (version 11) would keep these files in one.
    fs.commit().expect("commit");
    for &block in aged {
        fs.flash_mut().set_erase_count(BlockAddress::new(0, block), 4 * AREA_ENDURANCE).expect("age");
    }
    (fs, files)
}

fn check_files(fs: &mut FileSystem<SimFlash>, files: &Files, context: &str) {
    for (path, data) in files {
        assert_eq!(
            &read_file(fs, path).unwrap_or_else(|error| panic!("{context}: {path}: {error:?}")),
            data,
            "{context}: {path}"
        );
    }
}

/// Commits (small fsync'd writes) until one fails or `limit` went through; returns the files
/// each successful fsync made durable and the first error.
fn commit_until_error(fs: &mut FileSystem<SimFlash>, files: &mut Files, limit: u32) -> Option<FsError> {
    for index in 0..limit {
        let path = format!("/g{}", index % 7);
        let data = pattern(100 + index as usize, index as u8);
        if let Err(error) = write_file(fs, &path, &data).and_then(|()| fs.transact()) {
            return Some(error);
        }
        files.insert(path, data);
    }
    None
}

/// Programs every page of block 0 past the superblock's first generation on chip 0 with
/// junk, and wears out the superblock's second home (block 4, format version 9) so it cannot be
/// erased: no room is left for a new generation, so a failed metaroot area cannot move.
fn fill_superblock_block(fs: &mut FileSystem<SimFlash>) {
    use fsoc_media::{Flash, PageAddress};
    let geometry = fs.flash().geometry();
    let junk = vec![0x5Au8; geometry.page_data_bytes as usize];
    let spare = vec![0u8; geometry.spare_bytes as usize];
    for page in 2..geometry.pages_per_block {
        fs.flash_mut().program_page(0, PageAddress::new(0, 0, page), &junk, &spare).expect("program junk");
    }
    fs.flash_mut().set_erase_count(BlockAddress::new(0, 4), 4 * AREA_ENDURANCE).expect("age");
}

/// The area a switch would erase fails (format version 7): it moves to the least-worn free log
/// segment, named by a new generation of the superblock on pages 2 and 3 of block 0; writing
/// goes on, a remount finds the moved area, the failed segment and the new area are out of the
/// log (retired in the table), and the dead block is never erased again. Then a power cut at
/// every operation of a run that makes the move: each remount finds every file committed
/// before, passes fsck and goes on writing.
#[test]
fn a_metaroot_area_that_cannot_be_erased_moves_to_a_fresh_segment() {
    let (mut fs, mut files) = volume_with_aged_metaroot_areas(&[2]);
    assert_eq!(commit_until_error(&mut fs, &mut files, 500), None, "the volume went on writing");
    let areas = fs.superblock().metaroot_areas;
    assert_eq!(fs.superblock().generation, 1, "one rewrite");
    assert_eq!((areas[0], areas[2]), (1, 3));
    assert!(areas[1] >= FIRST_LOG_SEGMENT, "area B moved into a log segment: {areas:?}");
    check_files(&mut fs, &files, "after the move");
    let flash = fs.unmount().expect("unmount");
    let mut fs = FileSystem::mount(flash, FsConfig::default()).expect("mount");
    assert!(fs.mount_report().clean);
    assert_eq!(fs.superblock().metaroot_areas, areas, "mount reads the newest generation");
    check_files(&mut fs, &files, "after a remount");
    assert_eq!(commit_until_error(&mut fs, &mut files, 300), None, "and writes on");
    let table = fs.segment_table().expect("loaded");
    assert!(table.entry(2).retired, "the failed area is retired");
    // Areas in log segments are lent, not retired (version 9); the levelling may have moved
    // them on since.
    for area in fs.superblock().metaroot_areas.into_iter().filter(|&area| area >= FIRST_LOG_SEGMENT) {
        assert!(table.is_lent(area) && !table.entry(area).retired && !table.is_free(area), "area {area}");
    }
    assert_eq!(fs.flash().erase_count(BlockAddress::new(0, 2)).expect("count"), 4 * AREA_ENDURANCE + 1, "tried once");
    assert_clean(&mut fs, "a moved metaroot area");

    let (fs, files) = volume_with_aged_metaroot_areas(&[2]);
    let base = fs.into_flash_without_commit();
    let mut reference = FileSystem::mount(base.clone(), FsConfig::default()).expect("mount");
    let after_mount = reference.flash_operations_issued();
    let mut reference_files = files.clone();
    assert_eq!(commit_until_error(&mut reference, &mut reference_files, 150), None);
    assert_eq!(reference.superblock().generation, 1, "the reference run moves the area");
    let operations = reference.flash_operations_issued() - after_mount;
    for cut in 0..operations {
        let mut fs = FileSystem::mount(base.clone(), FsConfig::default()).expect("mount");
        fs.flash_mut().schedule_power_cut(cut);
        let mut partial = files.clone();
        let _ = commit_until_error(&mut fs, &mut partial, 150);
        let mut flash = fs.into_flash_without_commit();
        flash.restore_power();
        let mut fs = FileSystem::mount(flash, FsConfig::default()).unwrap_or_else(|error| panic!("cut {cut}: {error}"));
        check_files(&mut fs, &files, &format!("cut {cut}"));
        assert_clean(&mut fs, &format!("cut {cut}"));
        let mut more = Files::new();
        assert_eq!(commit_until_error(&mut fs, &mut more, 40), None, "cut {cut}: writes on");
    }
}

/// No room for another superblock generation: the failed area cannot move, the other one
/// takes the records (the full area holds the newest record and its predecessor, so either
/// may), the failed one is recorded in the segment table, and the next change finds the volume
/// worn out: EROFS, everything written before durable, a remount read-only too, and the dead
/// block never erased again.
#[test]
fn a_metaroot_area_that_cannot_be_erased_or_moved_ends_writing_cleanly() {
    // The first commit used area 1 (segment 1); the next switch takes area 2 (segment 2).
    let (mut fs, mut files) = volume_with_aged_metaroot_areas(&[2]);
    fill_superblock_block(&mut fs);
    let error = commit_until_error(&mut fs, &mut files, 500).expect("the volume never ended");
    assert_eq!(error, FsError::WornOut(WornOut::MetarootArea { segment: 2 }));
    assert_eq!(error.errno(), 30, "EROFS");
    assert_eq!(
        error.to_string(),
        "read-only: the flash is worn out (the metaroot area in segment 2 can no longer be erased)"
    );
    assert!(!fs.is_poisoned(), "a clean end, not a failure");
    // The change refused made nothing; everything before it is durable.
    check_files(&mut fs, &files, "at the end");
    assert_eq!(fs.statfs().expect("statfs").free_blocks, 0, "nothing is writable");
    assert_eq!(fs.transact(), Ok(()), "fsync of nothing new");
    assert!(matches!(fs.unlink(b"/f0"), Err(FsError::WornOut(_))), "deletes are refused too");
    let flash = fs.unmount().expect("unmount returns the flash");
    let mut fs = FileSystem::mount(flash, FsConfig::default()).expect("mount");
    assert!(fs.mount_report().clean, "the end wrote a clean record: no re-anchoring at mount");
    assert_eq!(fs.segment_table().map(|table| table.entry(2).retired), None, "mount reads no table");
    assert!(matches!(write_file(&mut fs, "/new", b"x"), Err(FsError::WornOut(WornOut::MetarootArea { segment: 2 }))));
    assert!(fs.segment_table().expect("loaded").entry(2).retired, "the failed area is in the table");
    check_files(&mut fs, &files, "after a remount");
    assert_eq!(fs.flash().erase_count(BlockAddress::new(0, 2)).expect("count"), 4 * AREA_ENDURANCE + 1, "tried once");
    assert_clean(&mut fs, "worn-out volume");
}

/// Neither other area can be erased (nor moved: block 0 is full): the commit that needs one fails (EROFS, the volume
/// stops), the last commit before it stays the volume's state, and a writable mount, which
/// after such an end would re-anchor into another area, comes up read-only instead.
#[test]
fn when_no_metaroot_area_can_be_erased_the_last_commit_stays_readable() {
    let (mut fs, mut files) = volume_with_aged_metaroot_areas(&[2, 3]);
    fill_superblock_block(&mut fs);
    let error = commit_until_error(&mut fs, &mut files, 500).expect("the volume never ended");
    assert!(matches!(error, FsError::WornOut(WornOut::MetarootArea { .. })), "{error:?}");
    assert_eq!(error.errno(), 30, "EROFS");
    assert!(fs.is_poisoned(), "the commit failed half-way: nothing more is written");
    assert!(matches!(write_file(&mut fs, "/new", b"x"), Err(FsError::WornOut(_))));
    let flash = fs.unmount().expect("unmount returns the flash");
    for round in 0..2 {
        let mut fs = FileSystem::mount(flash.clone(), FsConfig::default())
            .unwrap_or_else(|error| panic!("mount {round}: {error:?}"));
        check_files(&mut fs, &files, "after the end");
        assert!(matches!(write_file(&mut fs, "/new", b"x"), Err(FsError::WornOut(_))), "round {round}");
        assert_eq!(fs.transact(), Ok(()), "round {round}: fsync of nothing");
        assert_eq!(fs.statfs().expect("statfs").free_blocks, 0, "round {round}");
        // A second unmount of the read-only volume returns the flash too.
        fs.unmount().unwrap_or_else(|error| panic!("round {round}: unmount: {error:?}"));
    }
}

// ----- erase counts across power cuts ----------------------------------------------------------

/// Per log segment not retired and never seen as a metaroot area (`areas`, every segment the
/// superblock has named at a call so far: an area's erases are counted in its entry too, but
/// stored only with the next full commit): physical erases (the simulator's count, the same on
/// every chip of the stripe) minus the erase count the segment table holds.
fn erase_deficits(fs: &mut FileSystem<SimFlash>, areas: &mut BTreeSet<u32>) -> BTreeMap<u32, i64> {
    fs.space().expect("the segment table loads");
    areas.extend(fs.superblock().metaroot_areas);
    let layout = fs.layout();
    let table = fs.segment_table().expect("loaded");
    (FIRST_LOG_SEGMENT..layout.segment_count())
        .filter(|&segment| !table.entry(segment).retired && !areas.contains(&segment))
        .map(|segment| {
            let physical = layout
                .blocks_of_segment(segment)
                .map(|block| fs.flash().erase_count(block).expect("erase count"))
                .max()
                .unwrap_or(0);
            (segment, i64::from(physical) - i64::from(table.entry(segment).erase_count))
        })
        .collect()
}

/// Erase counts live in the segment table, written at full commits; fsync makes delta commits,
/// which do not write it. Mount derives the erase of every segment the delta gave data pages
/// and that was free at the full commit. What a power cut still loses: segments opened after
/// the last transaction point, and metadata segments opened since the full commit; at most one
/// erase per segment per cut, each of them in flight. Measured with seed 0xC07: 7 erases lost
/// in 60 cuts (42 before the derivation), none counted twice.
#[test]
fn erase_counts_survive_power_cuts() {
    let seed = env("FSOC_SEED_CUTS", 0xC07u64);
    let cuts = env("FSOC_CUTS", 60u64);
    let mut rng = SeededRng::new(seed);
    let mut config = SimConfig::new(Profile::Mlc, 1, 64, seed);
    config.faults = FaultConfig::none();
    let mut fs =
        FileSystem::format(SimFlash::create(config).expect("simulator"), FsConfig::default(), seed).expect("format");
    fs.mkdir(b"/d", 0o755).expect("mkdir");
    let mut areas = BTreeSet::new();
    let mut deficits = erase_deficits(&mut fs, &mut areas);
    let (mut lost_total, mut over_total) = (0i64, 0i64);
    let mut lost_per_cut = Vec::new();
    let mut delta_commits = 0;
    for cut in 0..cuts {
        // Power goes after a random number of flash operations: programs tear, erases stop
        // half-way.
        fs.flash_mut().schedule_power_cut(rng.range(50, 3_000));
        for step in 0.. {
            let path = format!("/d/{}", rng.below(40));
            let result = if rng.below(5) == 0 {
                fs.unlink(path.as_bytes()).or_else(|error| if error == FsError::NotFound { Ok(()) } else { Err(error) })
            } else {
                let size = rng.range(1, 24 * 1024);
                put(&mut fs, &path, &content(&mut rng, size)).and_then(|()| fs.transact())
            };
            match result {
                Ok(()) | Err(FsError::NoSpace) => {}
                Err(_) => break, // the power went
            }
            assert!(step < 100_000, "seed {seed:#x} cut {cut}: the cut never came");
        }
        delta_commits += fs.stats.delta_commits;
        let mut flash = fs.into_flash_without_commit();
        flash.restore_power();
        fs = FileSystem::mount(flash, FsConfig::default())
            .unwrap_or_else(|error| panic!("seed {seed:#x} cut {cut}: mount: {error:?}"));
        let after = erase_deficits(&mut fs, &mut areas);
        let mut lost = 0;
        for (segment, &deficit) in &after {
            let change = deficit - deficits.get(segment).copied().unwrap_or(0);
            assert!(change <= 1, "seed {seed:#x} cut {cut}: segment {segment} lost {change} erases");
            assert!(change >= -1, "seed {seed:#x} cut {cut}: segment {segment} counted {} erases too many", -change);
            lost += change.max(0);
            over_total += (-change).max(0);
        }
        lost_total += lost;
        lost_per_cut.push(lost);
        deficits = after;
    }
    let worst = deficits.values().copied().max().unwrap_or(0);
    println!(
        "seed {seed:#x}: {cuts} cuts after {delta_commits} delta commits; erases lost {lost_total} ({lost_per_cut:?}), \
         counted too many {over_total}; largest deficit of one segment after all cuts {worst}"
    );
    assert!(delta_commits > cuts, "seed {seed:#x}: the workload made few delta commits");
    assert!(
        4 * lost_total <= i64::try_from(cuts).expect("cuts"),
        "seed {seed:#x}: {lost_total} erases lost in {cuts} cuts"
    );
}

// ----- power cuts while wear levelling moves cold data ---------------------------------------

/// A one-chip volume whose cold files sit on segments 40 erases younger than every free one
/// (the table's counts raised behind the file system's back), mounted afresh so no log head is
/// open: the next change moves the coldest segment's data (static wear levelling).
fn volume_due_for_levelling() -> (SimFlash, Files) {
    let mut config = SimConfig::new(Profile::Mlc, 1, 48, 0x1E7E1);
    config.faults = FaultConfig::none();
    let mut fs =
        FileSystem::format(SimFlash::create(config).expect("simulator"), FsConfig::default(), 2).expect("format");
    let mut rng = SeededRng::new(0x1E7E1);
    let mut files = Files::new();
    for index in 0..40 {
        let size = rng.range(1, 64 * 1024);
        let data = content(&mut rng, size);
        write_file(&mut fs, &format!("/c{index}"), &data).expect("cold file");
        files.insert(format!("/c{index}"), data);
    }
    fs.commit().expect("commit");
    {
        let craft = fs.craft();
        let table = craft.log.table_for_replay();
        let free: Vec<u32> = (FIRST_LOG_SEGMENT..table.segment_count()).filter(|&s| table.is_free(s)).collect();
        for segment in free {
            for _ in 0..40 {
                table.record_erase(segment);
            }
        }
    }
    fs.commit().expect("commit the aged table");
    (fs.unmount().expect("unmount"), files)
}

/// Power cut at every flash operation of a write that starts with a wear-levelling move (its
/// pages relocated without a commit of their own, then the write's fsync): after each, mount
/// finds every cold file intact, the new file absent or whole, and fsck clean.
#[test]
fn a_power_cut_anywhere_in_a_wear_levelling_move_loses_nothing() {
    let (pristine, files) = volume_due_for_levelling();
    let new_data = pattern(20_000, 9);
    let write = |fs: &mut FileSystem<SimFlash>| write_file(fs, "/new", &new_data).and_then(|()| fs.transact());
    // Without a cut: the move happens, and how many operations it all takes.
    let mut fs = FileSystem::mount(pristine.clone(), FsConfig::default()).expect("mount");
    fs.statfs().expect("statfs");
    let coldest = fs.segment_table().expect("loaded").coldest_used(|_| true).expect("a used segment");
    let operations_before = fs.flash_operations_issued();
    write(&mut fs).expect("write");
    let operations = fs.flash_operations_issued() - operations_before;
    assert!(fs.stats.cleaner_runs >= 1, "no wear-levelling move");
    assert_eq!(fs.segment_table().expect("loaded").entry(coldest).valid_pages, 0, "the coldest segment was emptied");
    assert_clean(&mut fs, "after the move");
    println!("a write with a wear-levelling move: {operations} flash operations, cut at each");
    for cut in 0..operations {
        let mut fs = FileSystem::mount(pristine.clone(), FsConfig::default()).expect("mount");
        fs.flash_mut().schedule_power_cut(cut);
        let result = write(&mut fs);
        let mut flash = fs.into_flash_without_commit();
        flash.restore_power();
        let mut fs =
            FileSystem::mount(flash, FsConfig::default()).unwrap_or_else(|error| panic!("cut {cut}: mount: {error:?}"));
        check_files(&mut fs, &files, &format!("cut {cut}"));
        match read_file(&mut fs, "/new") {
            Ok(data) if result.is_ok() => assert!(data == new_data, "cut {cut}: /new has {} bytes", data.len()),
            Ok(data) => assert!(data == new_data || data.is_empty(), "cut {cut}: /new has {} bytes", data.len()),
            Err(FsError::NotFound) => assert!(result.is_err(), "cut {cut}: an fsync that returned lost its file"),
            Err(error) => panic!("cut {cut}: /new: {error:?}"),
        }
        assert_clean(&mut fs, &format!("cut {cut}"));
    }
}
