//! Per-operation cost does not follow the volume size: the segment table answers the
//! allocator, the cleaner and the space account from maintained indexes, never by a pass over
//! every segment. Measured with `SegmentTable::entries_visited` (every entry an accessor,
//! search or pass looked at), a deterministic count, on volumes 16× apart.
mod common;
use common::*;
use fsoc_core::{FileSystem, FsConfig, FsError, VolumeConfig};
use fsoc_media::{BlockAddress, Flash, Profile, SimFlash};

fn visited(fs: &FileSystem<SimFlash>) -> u64 {
    fs.segment_table().expect("segment table loaded").entries_visited()
}

/// Runs one named operation and returns the entries it visited.
fn measure(fs: &mut FileSystem<SimFlash>, operation: impl FnOnce(&mut FileSystem<SimFlash>)) -> u64 {
    let before = visited(fs);
    operation(fs);
    visited(fs) - before
}

/// Entries visited by each of a fixed sequence of operations on a fresh volume.
fn fresh_volume_visits(chips: u32, blocks: u32) -> Vec<(&'static str, u64)> {
    let mut fs = FileSystem::format(sim(Profile::Mlc, chips, blocks, 5), FsConfig::default(), 5).expect("format");
    fs.statfs().expect("statfs"); // the table is loaded: what follows is per operation
    let mut visits = Vec::new();
    let big = pattern(64 * 1024, 1);
    visits.push((
        "create + write 100 B",
        measure(&mut fs, |fs| write_file(fs, "/small", b"a small file").expect("write")),
    ));
    visits.push(("write 64 KiB", measure(&mut fs, |fs| write_file(fs, "/big", &big).expect("write"))));
    visits.push(("fsync (delta commit)", measure(&mut fs, |fs| fs.transact().expect("transact"))));
    visits.push((
        "mkdir",
        measure(&mut fs, |fs| {
            fs.mkdir(b"/dir", 0o755).expect("mkdir");
        }),
    ));
    visits.push(("rename", measure(&mut fs, |fs| fs.rename_path(b"/small", b"/dir/small").expect("rename"))));
    visits.push(("full commit", measure(&mut fs, |fs| fs.commit().expect("commit"))));
    visits.push(("overwrite 64 KiB", measure(&mut fs, |fs| write_file(fs, "/big", &big).expect("write"))));
    visits.push(("unlink", measure(&mut fs, |fs| fs.unlink(b"/big").expect("unlink"))));
    visits.push((
        "statfs",
        measure(&mut fs, |fs| {
            fs.statfs().expect("statfs");
        }),
    ));
    visits.push(("full commit", measure(&mut fs, |fs| fs.commit().expect("commit"))));
    assert_clean(&mut fs, "after the measured operations");
    visits
}

/// The same operations on a 1 GiB and a 16 GiB volume (one MLC chip: 8,192 and 131,072
/// segments; four chips: 2,048 and 32,768) visit the same segment entries, and few: the only
/// difference is a full commit's index-page bookkeeping on the larger volumes, whose segment
/// tables are indexed (one reservation and one release per index page rewritten).
#[test]
fn operations_visit_the_same_entries_on_a_volume_16_times_larger() {
    for (chips, small_blocks) in [(1, 8192), (4, 2048)] {
        let small = fresh_volume_visits(chips, small_blocks);
        let large = fresh_volume_visits(chips, 16 * small_blocks);
        println!("entries visited per operation, 1 GiB / 16 GiB ({chips} chips): {small:?} / {large:?}");
        for (&(operation, small_visits), &(_, large_visits)) in small.iter().zip(&large) {
            let allowance = if operation == "full commit" { 4 } else { 0 };
            assert!(
                large_visits <= small_visits + allowance,
                "{chips} chips, {operation}: {large_visits} entries at 16 GiB vs {small_visits} at 1 GiB"
            );
            assert!(large_visits <= 256, "{chips} chips, {operation} visited {large_visits} entries");
        }
    }
}

/// Fills a volume whose usable segments are the same at both sizes (all others factory-bad,
/// so retired), then overwrites and deletes files so the cleaner runs. Returns the most
/// entries one operation visited and the cleaner runs.
fn full_volume_visits(blocks: u32) -> (u64, u64) {
    const USABLE_SEGMENTS: u32 = 48;
    let mut flash = sim(Profile::Mlc, 1, blocks, 6);
    for block in 4 + USABLE_SEGMENTS..blocks {
        flash.mark_bad_block(BlockAddress::new(0, block)).expect("mark bad");
    }
    let config =
        FsConfig { volume: VolumeConfig { reserve_segments: 8, ..VolumeConfig::default() }, ..FsConfig::default() };
    let mut fs = FileSystem::format(flash, config, 6).expect("format");
    fs.statfs().expect("statfs");
    let data = pattern(24 * 1024, 2);
    let mut most = 0u64;
    let mut written = 0u32;
    for round in 0..3 {
        loop {
            let before = visited(&fs);
            let result = write_file(&mut fs, &format!("/f{written}"), &data);
            most = most.max(visited(&fs) - before);
            match result {
                Ok(()) => written += 1,
                Err(FsError::NoSpace) => break,
                Err(error) => panic!("round {round}, file {written}: {error:?}"),
            }
        }
        for index in (0..written).filter(|index| index % 3 != round % 3) {
            let before = visited(&fs);
            let _ = fs.unlink(format!("/f{index}").as_bytes());
            most = most.max(visited(&fs) - before);
        }
    }
    assert_clean(&mut fs, "after the churn");
    // 16,384 segments have 64 table pages: more than a metaroot names directly, so the churn
    // also relocates the index page when its segment is a victim.
    assert_eq!(fs.segment_table().expect("segment table loaded").is_indexed(), blocks > 15_616, "{blocks} segments");
    (most, fs.stats.cleaner_runs)
}

/// With cleaning, the busiest operation visits no more entries on a volume with 16× the
/// segments (the extra segments retired): victim choice, allocation and the space account
/// do not pass over the table.
#[test]
fn cleaning_visits_do_not_follow_the_segment_count() {
    let (small_most, small_runs) = full_volume_visits(1024);
    let (large_most, large_runs) = full_volume_visits(16_384);
    println!("most entries visited by one operation with cleaning, 1,024 / 16,384 segments: {small_most} / {large_most} ({small_runs} / {large_runs} cleaner runs)");
    assert!(small_runs > 0 && large_runs > 0, "the cleaner never ran");
    assert!(large_most <= 2 * small_most + 1024, "{large_most} entries at 16,384 segments vs {small_most} at 1,024");
}
