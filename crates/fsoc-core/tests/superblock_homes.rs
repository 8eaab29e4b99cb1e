//! Format version 9: the superblock's two homes (block 0 and block 4) take its generations in
//! turn, so metaroot areas can move as often as wear levelling asks (issue 12, point 5). A
//! volume whose commits outrun its log's wear moves its areas through both homes and back into
//! block 0; every remount finds the newest generation; the areas stay within the log's wear;
//! and a power cut at every flash operation of a move that starts a home (erasing it, then
//! writing its first generation) loses nothing.
mod common;

use common::*;
use fsoc_core::segment::layout::{FIRST_LOG_SEGMENT, SUPERBLOCK_HOMES};
use fsoc_core::segment::Redundancy;
use fsoc_core::txn::AREA_WEAR_MARGIN;
use fsoc_core::{FileSystem, FsConfig, FsError};
use fsoc_media::{BlockAddress, FaultConfig, Flash, Profile, SimConfig, SimFlash};

type Files = std::collections::BTreeMap<String, Vec<u8>>;

/// One MLC chip of 64 blocks of 64 pages: a home holds 32 generations.
const GENERATIONS_PER_HOME: u32 = 32;

fn fresh_volume() -> (FileSystem<SimFlash>, Files) {
    fresh_array(1, Redundancy::None)
}

/// `fresh_volume` on `chips` chips of 64 blocks with `redundancy`.
fn fresh_array(chips: u32, redundancy: Redundancy) -> (FileSystem<SimFlash>, Files) {
    let mut config = SimConfig::new(Profile::Mlc, chips, 64, 0x5B_404E);
    config.faults = FaultConfig::none();
    let mut fs_config = FsConfig::default();
    fs_config.volume.redundancy = redundancy;
    let mut fs = FileSystem::format(SimFlash::create(config).expect("simulator"), fs_config, 9).expect("format");
    let mut files = Files::new();
    for index in 0..10 {
        let data = pattern(3000 * (index + 1), index as u8);
        write_file(&mut fs, &format!("/f{index}"), &data).expect("write");
        files.insert(format!("/f{index}"), data);
    }
    fs.transact().expect("commit");
    (fs, files)
}

/// Small fsync'd rewrites of seven files: many commits, few log pages each, so the metaroot
/// areas outwear the log unless they move. `step` numbers the rewrites across calls.
fn commit(fs: &mut FileSystem<SimFlash>, files: &mut Files, step: u64) -> Result<(), FsError> {
    let path = format!("/g{}", step % 7);
    let data = pattern(100 + (step % 1000) as usize, step as u8);
    write_file(fs, &path, &data)?;
    fs.transact()?;
    files.insert(path, data);
    Ok(())
}

fn check_files(fs: &mut FileSystem<SimFlash>, files: &Files, context: &str) {
    for (path, data) in files {
        let found = read_file(fs, path).unwrap_or_else(|error| panic!("{context}: {path}: {error:?}"));
        assert!(&found == data, "{context}: {path} differs");
    }
}

/// Commits until the superblock's generation reaches `generation` (at most `limit` commits),
/// remounting cleanly every 5,000 commits.
fn drive_to(mut fs: FileSystem<SimFlash>, files: &mut Files, step: &mut u64, generation: u32) -> FileSystem<SimFlash> {
    let limit = *step + 600_000;
    while fs.superblock().generation < generation {
        assert!(*step < limit, "generation {} after {step} commits", fs.superblock().generation);
        commit(&mut fs, files, *step).unwrap_or_else(|error| panic!("commit {step}: {error:?}"));
        *step += 1;
        if step.is_multiple_of(5_000) {
            let flash = fs.unmount().expect("unmount");
            fs = FileSystem::mount(flash, FsConfig::default()).expect("mount");
            check_files(&mut fs, files, &format!("remount after {step} commits"));
        }
    }
    fs
}

/// Physical erase counts of chip 0's blocks 1.. (every block but the superblock's homes).
fn erase_counts(fs: &FileSystem<SimFlash>) -> Vec<(u32, u32)> {
    let blocks = fs.layout().segment_count();
    (1..blocks)
        .filter(|block| !SUPERBLOCK_HOMES.contains(block))
        .map(|block| (block, fs.flash().erase_count(BlockAddress::new(0, block)).expect("count")))
        .collect()
}

#[test]
fn metaroot_areas_move_through_both_superblock_homes_within_the_logs_wear() {
    let (fs, mut files) = fresh_volume();
    let mut step = 0;
    // Through home 1 and back into block 0, which is erased and rewritten.
    let target = 2 * GENERATIONS_PER_HOME + 3;
    let fs = drive_to(fs, &mut files, &mut step, target);
    let superblock = *fs.superblock();
    println!("generation {} after {step} commits; areas {:?}", superblock.generation, superblock.metaroot_areas);
    // A clean remount and one after a power cut find the same generation and areas.
    let flash = fs.unmount().expect("unmount");
    let mut fs = FileSystem::mount(flash, FsConfig::default()).expect("mount");
    assert_eq!(*fs.superblock(), superblock, "a clean mount reads the newest generation");
    check_files(&mut fs, &files, "clean remount");
    let flash = fs.into_flash_without_commit();
    let mut fs = FileSystem::mount(flash, FsConfig::default()).expect("mount");
    assert_eq!(fs.superblock().metaroot_areas, superblock.metaroot_areas, "after a power cut");
    check_files(&mut fs, &files, "after a power cut");
    assert_clean(&mut fs, "after the moves");
    // The areas were levelled with the log: no block is more than the margin past the log's
    // most-erased segment (counts from the simulator, not the table). An area moves at the
    // switch after its count passes the margin (+ 1), and format erased blocks 1-3 once more
    // than the table counts (+ 1).
    let table = fs.segment_table().expect("loaded");
    for area in fs.superblock().metaroot_areas {
        if area >= FIRST_LOG_SEGMENT {
            assert!(table.is_lent(area) && !table.entry(area).retired, "area {area} is lent, not retired");
            assert!(!table.is_free(area), "area {area} is not free for the log");
        }
    }
    let (_, log_max) = table.erase_count_range();
    let counts = erase_counts(&fs);
    let highest = counts.iter().map(|&(_, count)| count).max().unwrap_or(0);
    let mean = counts.iter().map(|&(_, count)| f64::from(count)).sum::<f64>() / counts.len() as f64;
    println!("erase counts: max {highest}, mean {mean:.1}, the table's log max {log_max}");
    assert!(
        highest <= log_max + AREA_WEAR_MARGIN + 2,
        "a block at {highest} erases, the log's most-erased at {log_max}: {counts:?}"
    );
    // Both homes were erased once at format; block 4 once more for generation 32, block 0 for 64.
    for home in SUPERBLOCK_HOMES {
        let count = fs.flash().erase_count(BlockAddress::new(0, home)).expect("count");
        assert_eq!(count, 2, "home {home} erased at format and once for its generations");
    }
    // And it writes on.
    for _ in 0..200 {
        commit(&mut fs, &mut files, step).expect("commit");
        step += 1;
    }
    assert_clean(&mut fs, "writes on");
}

/// Power cut at every flash operation of the commit whose area move starts the next home
/// (home 1 at generation 32: erased, then written; block 0 at generation 64: erased while home
/// 1 holds every newer generation), and of the two commits after it: each mount finds every
/// file committed before, passes fsck, and writes on.
#[test]
fn a_power_cut_anywhere_in_a_move_that_starts_a_superblock_home_loses_nothing() {
    cut_everywhere_in_home_starts(fresh_volume());
}

/// The same on three chips with parity: a generation is written chip after chip, so a cut
/// leaves the later chips a generation behind; the mount writes it again, and fsck finds every
/// chip's copies of the mounted generation whole.
#[test]
fn a_power_cut_anywhere_in_a_move_that_starts_a_superblock_home_loses_nothing_on_three_chips() {
    cut_everywhere_in_home_starts(fresh_array(3, Redundancy::Parity));
}

fn cut_everywhere_in_home_starts((fs, mut files): (FileSystem<SimFlash>, Files)) {
    let mut step = 0;
    let mut fs = fs;
    for first_of_home in [GENERATIONS_PER_HOME, 2 * GENERATIONS_PER_HOME] {
        fs = drive_to(fs, &mut files, &mut step, first_of_home - 1);
        let pristine = fs.unmount().expect("unmount");
        // The reference run: how many commits come before the move, and its operations.
        let mut reference = FileSystem::mount(pristine.clone(), FsConfig::default()).expect("mount");
        let mut reference_files = files.clone();
        let mut before_move = 0u64;
        while reference.superblock().generation < first_of_home {
            commit(&mut reference, &mut reference_files, step + before_move).expect("commit");
            before_move += 1;
        }
        before_move -= 1;
        let mut reference = FileSystem::mount(pristine.clone(), FsConfig::default()).expect("mount");
        let mut reference_files = files.clone();
        for index in 0..before_move {
            commit(&mut reference, &mut reference_files, step + index).expect("commit");
        }
        let settled = reference_files.clone();
        let operations_before = reference.flash_operations_issued();
        for index in before_move..before_move + 3 {
            commit(&mut reference, &mut reference_files, step + index).expect("commit");
        }
        assert_eq!(reference.superblock().generation, first_of_home, "the window holds the move");
        let operations = reference.flash_operations_issued() - operations_before;
        println!("generation {first_of_home}: the move's commit and two more, {operations} operations, cut at each");
        let mut repairs = 0;
        for cut in 0..operations {
            let context = format!("generation {first_of_home}, cut {cut}");
            let mut fs = FileSystem::mount(pristine.clone(), FsConfig::default()).expect("mount");
            let mut partial = files.clone();
            for index in 0..before_move {
                commit(&mut fs, &mut partial, step + index).expect("commit");
            }
            fs.flash_mut().schedule_power_cut(cut);
            for index in before_move..before_move + 3 {
                if commit(&mut fs, &mut partial, step + index).is_err() {
                    break;
                }
            }
            let mut flash = fs.into_flash_without_commit();
            flash.restore_power();
            let mut fs =
                FileSystem::mount(flash, FsConfig::default()).unwrap_or_else(|error| panic!("{context}: {error}"));
            // The move's generation or the one before; one more when the mount found a copy torn
            // and wrote the superblock again (`repair_superblock_copies`).
            let generation = fs.superblock().generation;
            assert!(
                (first_of_home - 1..=first_of_home + 1).contains(&generation),
                "{context}: generation {generation}"
            );
            repairs += u32::from(generation == first_of_home + 1);
            // Every file committed before the window is there (the window's own commits may be
            // lost or kept).
            for (path, data) in &settled {
                let found = read_file(&mut fs, path).unwrap_or_else(|error| panic!("{context}: {path}: {error:?}"));
                let rewritten =
                    (before_move..before_move + 3).any(|index| path == &format!("/g{}", (step + index) % 7));
                assert!(&found == data || rewritten, "{context}: {path} differs");
            }
            assert_clean(&mut fs, &context);
            let mut more = Files::new();
            for index in 0..40 {
                commit(&mut fs, &mut more, index).unwrap_or_else(|error| panic!("{context}: writes on: {error:?}"));
            }
        }
        println!("generation {first_of_home}: {repairs} mounts wrote the superblock again");
        fs = FileSystem::mount(pristine, FsConfig::default()).expect("mount");
    }
}
