//! The per-segment chip mask (issue 12 point 3, format version 8): a log segment whose block on
//! one chip goes bad keeps using its blocks on the other chips instead of being retired whole.
//! Its masked blocks are recorded in the segment table, and its dead pages are counted from
//! the pages it can hold, so the cleaner never takes a full masked segment for a half-empty
//! one. Capacity drops by one block, not by one segment.

mod common;

use std::collections::BTreeMap;

use common::*;
use fsoc_core::segment::Redundancy;
use fsoc_core::txn::VolumeConfig;
use fsoc_core::{FileSystem, FsConfig};
use fsoc_media::{BlockAddress, Flash, FlashStats, Profile, SimFlash};

fn config(redundancy: Redundancy) -> FsConfig {
    FsConfig { volume: VolumeConfig { redundancy, ..VolumeConfig::default() }, ..FsConfig::default() }
}

/// (segments masked, masked blocks, retired log segments) from the table.
fn mask_census(fs: &mut FileSystem<SimFlash>) -> (u32, u32, u32) {
    fs.space().expect("table loaded");
    let table = fs.segment_table().expect("table");
    let (mut segments, mut blocks) = (0, 0);
    for segment in 4..table.segment_count() {
        let entry = table.entry(segment);
        if entry.masked_blocks > 0 && !entry.retired {
            segments += 1;
            blocks += entry.masked_blocks;
        }
    }
    (segments, blocks, table.retired_log_segment_count())
}

/// A program failing in the middle of a run on 4 chips: the segment goes on with 3 chips, not
/// retired; every file reads back, fsck is clean, the capacity drops by one block's pages; the
/// volume then runs on until the masked segment has been cleaned and used again, without the
/// bad block.
#[test]
fn a_block_failing_under_a_program_is_masked_and_its_segment_goes_on() {
    let seed = 23;
    let mut fs = FileSystem::format(sim(Profile::Mlc, 4, 24, seed), FsConfig::default(), seed).expect("format");
    let capacity_before = fs.space().expect("space").capacity_pages;
    for index in 0..10 {
        write_file(&mut fs, &format!("/before{index}"), &pattern(9_000, index)).expect("write");
    }
    fs.commit().expect("commit");
    // The 5th program or erase from now fails (a grown bad block).
    fs.flash_mut().schedule_operation_failure(4);
    let mut model = BTreeMap::new();
    for index in 0..10u8 {
        let contents = pattern(20_000, 100 + index);
        write_file(&mut fs, &format!("/during{index}"), &contents).expect("write through the failure");
        model.insert(format!("/during{index}"), contents);
    }
    fs.commit().expect("commit");
    assert!(fs.flash().scheduled_failure_hit().is_some(), "the failure was injected");
    let (masked_segments, masked_blocks, retired) = mask_census(&mut fs);
    assert_eq!((masked_segments, masked_blocks, retired), (1, 1, 0), "one block masked, no segment retired");
    let capacity_after = fs.space().expect("space").capacity_pages;
    assert_eq!(capacity_before - capacity_after, 64, "one MLC block's pages (64), not a segment's (256)");
    assert_eq!(fs.bad_blocks_per_chip().iter().sum::<u32>(), 1, "the block is marked bad");
    assert_clean(&mut fs, "after the failure");
    let flash = fs.unmount().expect("unmount");
    let mut fs = FileSystem::mount(flash, FsConfig::default()).expect("remount");
    assert_eq!(mask_census(&mut fs).1, 1, "the mask is in the table after a remount");
    for (path, contents) in &model {
        assert!(&read_file(&mut fs, path).expect("read") == contents, "{path}");
    }
    // Churn until every segment has been used again: the masked one is erased and refilled
    // on its three good chips (its erase count grows while its bad block is skipped).
    let masked_segment =
        (4..24).find(|&s| fs.segment_table().expect("table").entry(s).masked_blocks > 0).expect("masked");
    let erases_before = fs.segment_table().expect("table").entry(masked_segment).erase_count;
    for round in 0..400u32 {
        let path = format!("/churn{}", round % 13);
        let contents = pattern(10_000 + (round as usize * 331) % 30_000, round as u8);
        write_file(&mut fs, &path, &contents).expect("churn");
        model.insert(path, contents);
        if round % 40 == 39 {
            fs.commit().expect("commit");
        }
    }
    fs.commit().expect("commit");
    let entry = fs.segment_table().expect("table").entry(masked_segment);
    assert!(entry.erase_count > erases_before && !entry.retired, "the masked segment is used again: {entry:?}");
    assert_eq!(entry.masked_blocks, 1);
    for (path, contents) in &model {
        assert!(&read_file(&mut fs, path).expect("read") == contents, "{path}");
    }
    assert_clean(&mut fs, "after the churn");
}

/// Blocks bad from the factory on a 4-chip volume are masked at format, not retired with their
/// segments: the capacity is that of the good blocks. On one chip, or with parity, a bad block
/// still retires its segment.
#[test]
fn factory_bad_blocks_are_masked_where_a_segment_can_go_on() {
    let bad = [BlockAddress::new(1, 6), BlockAddress::new(3, 6), BlockAddress::new(2, 9), BlockAddress::new(0, 15)];
    let mut capacities = Vec::new();
    for (redundancy, chips) in [(Redundancy::None, 4), (Redundancy::Parity, 4), (Redundancy::MirrorMeta, 4)] {
        let mut clean = sim(Profile::Mlc, chips, 24, 5);
        let mut flash = clean.clone();
        for block in bad {
            flash.mark_bad_block(block).expect("mark");
        }
        let mut fs = FileSystem::format(flash, config(redundancy), 5).expect("format");
        let (segments, blocks, retired) = mask_census(&mut fs);
        let capacity = fs.space().expect("space").capacity_pages;
        let whole =
            FileSystem::format(std::mem::replace(&mut clean, sim(Profile::Mlc, 1, 24, 5)), config(redundancy), 5)
                .expect("format")
                .space()
                .expect("space")
                .capacity_pages;
        match redundancy {
            Redundancy::Parity => {
                assert_eq!((segments, blocks, retired), (0, 0, 3), "parity retires the three segments");
            }
            _ => {
                assert_eq!((segments, blocks, retired), (3, 4, 0), "{redundancy:?}: four blocks masked");
                assert_eq!(whole - capacity, 4 * 64, "{redundancy:?}: four blocks' pages off the capacity");
            }
        }
        for index in 0..30u8 {
            write_file(&mut fs, &format!("/f{index}"), &pattern(25_000, index)).expect("write");
        }
        fs.commit().expect("commit");
        for index in 0..30u8 {
            assert_eq!(read_file(&mut fs, &format!("/f{index}")).expect("read"), pattern(25_000, index));
        }
        assert_clean(&mut fs, redundancy.name());
        capacities.push((redundancy, capacity, whole));
        // Nothing was ever programmed on a bad block.
        let programs_on_bad: u64 =
            bad.iter().map(|&block| fs.flash().counters().block(block).map_or(0, |counters| counters.programs)).sum();
        assert_eq!(programs_on_bad, 0, "{redundancy:?}");
    }
    println!("capacity with 4 bad blocks (of 96) against none: {capacities:?}");
    // One chip: the segment goes.
    let mut flash = sim(Profile::Mlc, 1, 24, 5);
    flash.mark_bad_block(BlockAddress::new(0, 7)).expect("mark");
    let mut fs = FileSystem::format(flash, FsConfig::default(), 5).expect("format");
    assert_eq!(mask_census(&mut fs), (0, 0, 1));
}

/// A masked segment full of live pages is no victim: on a volume whose blocks go bad one
/// after another under churn, the cleaner never picks a segment that would gain nothing, the
/// volume keeps every file, and fsck's recount of the table (masked totals included) is clean.
#[test]
fn the_cleaner_counts_a_masked_segment_by_the_pages_it_can_hold() {
    let seed = 31;
    let mut fs = FileSystem::format(sim(Profile::Mlc, 3, 40, seed), FsConfig::default(), seed).expect("format");
    let mut model = BTreeMap::new();
    // Cold files fill half the volume, side by side with hot ones in every segment.
    for index in 0..280u32 {
        let contents = pattern(25_000, index as u8);
        write_file(&mut fs, &format!("/cold{index}"), &contents).expect("write");
        model.insert(format!("/cold{index}"), contents);
        let hot = pattern(20_000, index as u8 ^ 0x55);
        write_file(&mut fs, &format!("/hot{}", index % 11), &hot).expect("write");
        model.insert(format!("/hot{}", index % 11), hot);
    }
    fs.commit().expect("commit");
    let mut injected = 0;
    for round in 0..900u32 {
        if round % 150 == 0 {
            fs.flash_mut().schedule_operation_failure(u64::from(round % 7) + 3);
            injected += 1;
        }
        let path = format!("/hot{}", round % 11);
        let contents = pattern(4_000 + (round as usize * 577) % 20_000, round as u8);
        write_file(&mut fs, &path, &contents).expect("write");
        model.insert(path, contents);
        if round % 50 == 49 {
            fs.commit().expect("commit");
            assert_clean(&mut fs, &format!("round {round}"));
        }
    }
    let (_, masked_blocks, retired) = mask_census(&mut fs);
    println!(
        "{injected} failures injected: {masked_blocks} blocks masked, {retired} segments retired, {} cleaner runs",
        fs.stats.cleaner_runs
    );
    assert!(masked_blocks + retired >= 3, "failures took effect: {masked_blocks} masked, {retired} retired");
    assert!(fs.stats.cleaner_runs > 10, "the cleaner ran");
    let flash = fs.unmount().expect("unmount");
    let mut fs = FileSystem::mount(flash, FsConfig::default()).expect("remount");
    for (path, contents) in &model {
        assert!(&read_file(&mut fs, path).expect("read") == contents, "{path}");
    }
    assert_clean(&mut fs, "remounted");
}
