//! Scrubbing and refresh (issue 12 point 4; fs/scrub.rs): a read whose worst ECC sector needed
//! at least half the code's strength marks its segment weak, and the next change
//! (or a scrub) moves the segment's live data elsewhere before the flash loses it. Errors are
//! injected as persistent bit flips on the simulated chips (`SimFlash::inject_bit_flips_at`),
//! so the test controls exactly which page reads how; the simulator's own wear errors are
//! negligible on these fresh blocks.
mod common;
#[path = "common/data_pages.rs"]
mod shared_pages;

use common::*;
use fsoc_core::fs::errno;
use fsoc_core::fs::ScrubCursor;
use fsoc_core::{FileSystem, FsConfig};
use fsoc_flash::{Flash, PageAddress, ReadStatus};
use fsoc_media::{Profile, SimFlash};

/// The simulator's code corrects 4 bits per 512-byte sector; 2 or more in one sector is weak.
const WEAK_BITS: [u32; 3] = [3, 700, 2900];
/// Within the first sector too, but only 1: corrected, not weak.
const MILD_BITS: [u32; 1] = [11];
/// 5 in one sector: more than the code corrects.
const LOST_BITS: [u32; 5] = [5, 60, 900, 1800, 3000];

/// A volume of a few files over two chips, committed; answers the files' contents.
fn build() -> (FileSystem<SimFlash>, Vec<(String, Vec<u8>)>) {
    let mut fs = FileSystem::format(sim(Profile::Mlc, 2, 48, 11), FsConfig::default(), 11).expect("format");
    let mut files = Vec::new();
    for (index, size) in [5000usize, 40_000, 150_000, 300_000, 2049, 700_000].into_iter().enumerate() {
        let path = format!("/f{index}");
        let data = pattern(size, index as u8 + 1);
        write_file(&mut fs, &path, &data).expect("write");
        files.push((path, data));
    }
    fs.transact().expect("commit");
    (fs, files)
}

fn check_files(fs: &mut FileSystem<SimFlash>, files: &[(String, Vec<u8>)], context: &str) {
    for (path, data) in files {
        assert_eq!(&read_file(fs, path).expect(context), data, "{path}: {context}");
    }
}

/// (inode, file page, physical page) of every data page of `path`.
fn pages_of(fs: &mut FileSystem<SimFlash>, path: &str) -> Vec<(u64, u64, PageAddress)> {
    let (inode, _) = fs.resolve(path.as_bytes()).expect("resolve");
    shared_pages::data_pages(fs).into_iter().filter(|&(owner, _, _)| owner == inode).collect()
}

fn status_of(fs: &FileSystem<SimFlash>, page: PageAddress) -> ReadStatus {
    let flash = fs.flash();
    let geometry = flash.geometry();
    let mut data = vec![0u8; geometry.page_data_bytes as usize];
    let mut spare = vec![0u8; geometry.spare_bytes as usize];
    flash.read_page(flash.all_done_ns(), page, &mut data, &mut spare).expect("read").value
}

#[test]
fn a_read_near_the_ecc_limit_moves_its_segment_at_the_next_change() {
    let (mut fs, files) = build();
    let (_, file_page, weak_page) = pages_of(&mut fs, "/f2")[5];
    fs.flash_mut().inject_bit_flips_at(weak_page, &WEAK_BITS).expect("inject");
    let (_, _, mild_page) =
        pages_of(&mut fs, "/f3").into_iter().find(|&(_, _, page)| page.block != weak_page.block).expect("page");
    fs.flash_mut().inject_bit_flips_at(mild_page, &MILD_BITS).expect("inject");
    assert_eq!(fs.weak_segment_count(), 0);

    check_files(&mut fs, &files, "reads before the refresh");
    assert_eq!(fs.weak_segment_count(), 1, "only the page with 2 or more bits in a sector is weak");
    assert_eq!(fs.stats.segments_refreshed, 0, "reads alone change nothing");

    // The next change moves the weak segment's data first.
    write_file(&mut fs, "/new", b"a change").expect("write");
    assert_eq!(fs.stats.segments_refreshed, 1);
    assert_eq!(fs.weak_segment_count(), 0);
    let moved = pages_of(&mut fs, "/f2").into_iter().find(|&(_, page, _)| page == file_page).expect("page");
    assert_ne!(moved.2, weak_page, "the weak page's data moved");
    assert_eq!(status_of(&fs, moved.2), ReadStatus::Clean, "its new copy reads clean");
    assert!(pages_of(&mut fs, "/f3").iter().any(|&(_, _, page)| page == mild_page), "the mild page stayed");

    check_files(&mut fs, &files, "reads after the refresh");
    fs.transact().expect("commit");
    let mut fs = FileSystem::mount(fs.into_flash_without_commit(), FsConfig::default()).expect("remount");
    check_files(&mut fs, &files, "reads after a remount");
    assert_clean(&mut fs, "after the refresh");
}

#[test]
fn scrub_reads_everything_live_and_refreshes_what_is_weak() {
    let (mut fs, files) = build();
    // An unaged volume: the scrub reads everything and moves nothing.
    let data_pages = shared_pages::data_pages(&mut fs).len() as u64;
    let report = fs.scrub(&mut |_| {}).expect("scrub");
    assert!(report.is_clean(), "{report:?}");
    assert_eq!(report.passes, 1);
    assert_eq!(report.refresh.segments_refreshed, 0);
    assert_eq!(report.data.pages, data_pages);
    assert!(report.pages_read > data_pages, "nodes are read as well: {} pages", report.pages_read);
    assert_eq!(report.weak_reads, 0);

    // Weak pages in two segments, a mild one in a third.
    let f1 = pages_of(&mut fs, "/f1");
    let f3 = pages_of(&mut fs, "/f3");
    let weak = [f1[2].2, f3[f3.len() - 1].2];
    for page in weak {
        fs.flash_mut().inject_bit_flips_at(page, &WEAK_BITS).expect("inject");
    }
    let mild = shared_pages::data_pages(&mut fs)
        .into_iter()
        .map(|(_, _, page)| page)
        .find(|page| weak.iter().all(|weak| weak.block != page.block))
        .expect("a page in a third segment");
    fs.flash_mut().inject_bit_flips_at(mild, &MILD_BITS).expect("inject");
    // A segment is block s on every chip.
    assert_ne!(weak[0].block, weak[1].block, "the test wants two segments");

    let report = fs.scrub(&mut |_| {}).expect("scrub");
    assert!(report.is_clean(), "{report:?}");
    // Each weak page is read twice: by the pass, and by the evacuation that moves it.
    assert_eq!(report.weak_reads, 4);
    assert!(report.corrected_reads >= 5, "{report:?}");
    assert_eq!(report.refresh.segments_refreshed, 2);
    assert!(report.refresh.pages_moved >= 2);
    assert_eq!(fs.weak_segment_count(), 0);
    check_files(&mut fs, &files, "after the scrub");

    // The refreshed data no longer sits on the weak pages: a second scrub finds nothing.
    let again = fs.scrub(&mut |_| {}).expect("scrub");
    assert_eq!((again.weak_reads, again.refresh.segments_refreshed), (0, 0), "{again:?}");
    assert_eq!(again.corrected_reads, 1, "the mild page only");
    let mut fs = FileSystem::mount(fs.into_flash_without_commit(), FsConfig::default()).expect("remount");
    check_files(&mut fs, &files, "after a remount");
    assert_clean(&mut fs, "after scrubbing");
}

#[test]
fn a_weak_segment_with_a_lost_page_moves_the_rest_and_is_retired() {
    let (mut fs, files) = build();
    let f3 = pages_of(&mut fs, "/f3");
    // Two pages of /f3 in one segment: one weak, one beyond the ECC.
    let (weak, lost) = (f3[0].2, f3[1].2);
    assert_eq!(weak.block, lost.block, "consecutive pages share a segment");
    fs.flash_mut().inject_bit_flips_at(weak, &WEAK_BITS).expect("inject");
    fs.flash_mut().inject_bit_flips_at(lost, &LOST_BITS).expect("inject");

    let report = fs.scrub(&mut |_| {}).expect("scrub");
    assert!(!report.is_clean(), "a lost page is damage: {report:?}");
    assert_eq!(report.data.unreadable_pages, 1);
    assert_eq!(report.refresh.segments_with_lost_pages, 1);
    assert_eq!(report.refresh.segments_refreshed, 0);
    assert_eq!(fs.stats.segments_with_lost_pages, 1);
    assert!(!pages_of(&mut fs, "/f3").iter().any(|&(_, _, page)| page == weak), "the weak page moved");

    // The lost page answers EIO; every other file reads back; the volume keeps working.
    let lost_read = read_file(&mut fs, "/f3");
    assert!(matches!(&lost_read, Err(error) if error.errno() == errno::EIO), "{lost_read:?}");
    let others: Vec<_> = files.iter().filter(|(path, _)| path != "/f3").cloned().collect();
    check_files(&mut fs, &others, "other files");
    for round in 0..40 {
        write_file(&mut fs, &format!("/more{round}"), &pattern(30_000, round as u8)).expect("the volume still writes");
    }
    fs.transact().expect("commit");
    // Deleting the damaged file lets the lost page go.
    fs.unlink(b"/f3").expect("unlink");
    fs.transact().expect("commit");
    let mut fs = FileSystem::mount(fs.into_flash_without_commit(), FsConfig::default()).expect("remount");
    check_files(&mut fs, &others, "after a remount");
    assert_clean(&mut fs, "after the damaged file went");
}

#[test]
fn the_background_step_goes_round_the_log_and_notes_what_it_reads() {
    let (mut fs, files) = build();
    let f2 = pages_of(&mut fs, "/f2");
    fs.flash_mut().inject_bit_flips_at(f2[7].2, &WEAK_BITS).expect("inject");
    let mut cursor = ScrubCursor::default();
    let mut pages_read = 0;
    let mut steps = 0;
    while cursor.passes == 0 {
        let step = fs.scrub_step(&mut cursor, 16).expect("step");
        assert!(step.pages_read <= 16);
        assert_eq!((step.unreadable_pages, step.checksum_failed_pages), (0, 0));
        pages_read += step.pages_read;
        steps += 1;
        assert!(steps < 10_000, "the cursor never went round");
    }
    let data_pages = shared_pages::data_pages(&mut fs).len() as u64;
    assert!(pages_read >= data_pages, "a pass reads every used segment: {pages_read} pages");
    assert_eq!(fs.weak_segment_count(), 1);
    assert_eq!(fs.refresh_weak_segments(8).expect("refresh").segments_refreshed, 1);
    check_files(&mut fs, &files, "after the background refresh");
}

/// The experiment behind scrubbing, on the simulator's retention model (fsoc-media `aging.rs`,
/// `AgingModel::published()`): a volume whose log blocks are at their rated endurance keeps
/// its files for two years when it is scrubbed once a month, and loses many of them (every
/// loss an EIO, never other bytes) when it is not. The superblock and metaroot blocks are
/// left young, as on a real device, where they are erased far less than the log.
#[test]
fn a_monthly_scrub_keeps_files_that_two_years_of_retention_would_lose() {
    use fsoc_media::aging::NANOS_PER_DAY;
    use fsoc_media::{AgingModel, BlockAddress};

    // The model draws bit errors afresh at each read, so a sector may pass the ECC's strength
    // at a read before any read of its segment came near it. Measured over FSOC_SEED 1..=80:
    // - refreshing at three quarters of the code's strength (3 of 4 bits), with the log's heads
    //   left open: only 2 of seeds 1..=24 kept every file (seed 1 lost a page in month 13);
    // - at half (2 bits, `refresh_threshold_bits`): 76 of 80;
    // - at half, and a scrub that makes every head open a fresh segment before it refreshes
    //   (pages refreshed into a segment opened months ago age from its first program): 79 of
    //   80. Seed 55 loses a page at the first scrub, a month after the files were written:
    //   nothing read them before, so no refresh could have come sooner.
    // Seed 1 by default: it failed before both changes. A run takes about 15 s.
    let seed = std::env::var("FSOC_SEED").ok().and_then(|seed| seed.parse().ok()).unwrap_or(1u64);
    let blocks = 64;
    let mut flash = sim(Profile::Mlc, 1, blocks, seed);
    let endurance = Profile::Mlc.endurance_cycles();
    let first_log_block = fsoc_core::segment::layout::FIRST_LOG_SEGMENT;
    for block in first_log_block..blocks {
        flash.set_erase_count(BlockAddress::new(0, block), endurance).expect("age the block");
    }
    flash.set_aging_model(AgingModel::published());
    let mut fs = FileSystem::format(flash, FsConfig::default(), seed).expect("format");
    let mut files = Vec::new();
    for index in 0..24u32 {
        let path = format!("/file{index}");
        let data = pattern(60_000 + 3_000 * index as usize, index as u8);
        write_file(&mut fs, &path, &data).expect("write");
        files.push((path, data));
    }
    fs.transact().expect("commit");
    let flash = fs.into_flash_without_commit();
    let mut unscrubbed = FileSystem::mount(flash.clone(), FsConfig::default()).expect("mount");
    let mut scrubbed = FileSystem::mount(flash, FsConfig::default()).expect("mount");

    let month = 30 * NANOS_PER_DAY;
    let (mut refreshed, mut moved) = (0, 0);
    for _month in 0..24 {
        unscrubbed.flash_mut().advance_retention_time(month);
        scrubbed.flash_mut().advance_retention_time(month);
        let report = scrubbed.scrub(&mut |_| {}).expect("scrub");
        assert!(report.is_clean(), "seed {seed}: a monthly scrub found damage: {report:?}");
        refreshed += report.refresh.segments_refreshed;
        moved += report.refresh.pages_moved;
    }

    let outcome = |fs: &mut FileSystem<SimFlash>| {
        let mut lost = 0;
        for (path, data) in &files {
            match read_file(fs, path) {
                Ok(back) => assert!(&back == data, "seed {seed}: {path} read back other bytes"),
                Err(error) => {
                    assert_eq!(error.errno(), errno::EIO, "seed {seed}: {path}: {error}");
                    lost += 1;
                }
            }
        }
        lost
    };
    let lost_unscrubbed = outcome(&mut unscrubbed);
    let lost_scrubbed = outcome(&mut scrubbed);
    println!(
        "two years at rated endurance: {lost_unscrubbed} of {} files lost without scrubbing, {lost_scrubbed} with a monthly \
         scrub ({refreshed} segment refreshes, {moved} pages moved)",
        files.len()
    );
    assert_eq!(lost_scrubbed, 0, "seed {seed}");
    assert!(lost_unscrubbed >= files.len() / 4, "seed {seed}: only {lost_unscrubbed} files lost without a scrub");
    assert!(refreshed > 0);
    let mut remounted = FileSystem::mount(scrubbed.into_flash_without_commit(), FsConfig::default()).expect("remount");
    assert_eq!(outcome(&mut remounted), 0, "seed {seed}: after a remount");
    assert_clean(&mut remounted, "the scrubbed volume after two years");
}

/// Read disturb on the simulator's model: a file read over and over wears the charge of its
/// block's other cells; the read that first comes near the ECC's limit marks the segment weak,
/// every read before it returned the file exactly, and the next change moves the data to a
/// block whose read count starts again.
#[test]
fn reads_that_disturb_a_block_get_its_data_moved() {
    use fsoc_media::{AgingModel, BlockAddress};

    let seed = 5;
    let blocks = 48;
    let mut flash = sim(Profile::Mlc, 1, blocks, seed);
    for block in fsoc_core::segment::layout::FIRST_LOG_SEGMENT..blocks {
        // Half the rated endurance: wear alone would seldom come near the limit.
        flash.set_erase_count(BlockAddress::new(0, block), Profile::Mlc.endurance_cycles() / 2).expect("age the block");
    }
    flash.set_aging_model(AgingModel::published());
    let mut fs = FileSystem::format(flash, FsConfig::default(), seed).expect("format");
    let data = pattern(2048, 9);
    write_file(&mut fs, "/hot", &data).expect("write");
    fs.transact().expect("commit");
    let (_, _, page) = pages_of(&mut fs, "/hot")[0];
    let (inode, _) = fs.resolve(b"/hot").expect("resolve");
    let mut buffer = vec![0u8; data.len()];
    let mut reads = 0u64;
    while fs.weak_segment_count() == 0 {
        assert_eq!(fs.read_into(inode, 0, &mut buffer).expect("read"), data.len());
        assert!(buffer == data, "seed {seed}: read {reads} returned other bytes");
        reads += 1;
        assert!(reads < 2_000_000, "seed {seed}: no read came near the ECC's limit");
    }
    let disturbed = fs.flash().block_aging(page.block_address(), fs.device_now_ns()).expect("aging");
    assert!(disturbed.reads_since_erase >= reads, "{disturbed:?}");
    // With the refresh at half the code's strength (2 bits in a sector) the mark comes after
    // some thousands of reads (3,019 with seed 5; at three quarters it took over 20,000): the
    // first reads, at this wear alone, come nowhere near it.
    assert!(reads > 1_000, "seed {seed}: weak after only {reads} reads: that is wear, not disturb");
    println!("{reads} reads of one page before its block read near the ECC's limit ({disturbed:?})");
    write_file(&mut fs, "/other", b"a change").expect("write");
    assert_eq!(fs.stats.segments_refreshed, 1);
    let (_, _, moved) = pages_of(&mut fs, "/hot")[0];
    assert_ne!(moved.block, page.block, "the data left the disturbed block");
    let fresh = fs.flash().block_aging(moved.block_address(), fs.device_now_ns()).expect("aging");
    assert!(fresh.reads_since_erase < 100, "{fresh:?}");
    assert_eq!(read_file(&mut fs, "/hot").expect("read"), data);
}

/// A scrub that refreshes makes every log head open a fresh segment first: what it moves does
/// not go into the segment the data head was appending to before (opened long ago, its pages
/// age from its first program), and that segment keeps what it held.
#[test]
fn a_scrub_refreshes_into_fresh_segments_not_into_a_head_opened_before_it() {
    // SLC: no paired-page guard, so a commit leaves the data head open where it was.
    let mut fs = FileSystem::format(sim(Profile::Slc, 1, 64, 11), FsConfig::default(), 11).expect("format");
    let files = vec![("/f3".to_string(), pattern(150_000, 3))];
    write_file(&mut fs, "/f3", &files[0].1).expect("write");
    fs.transact().expect("commit");
    // A small file leaves the data head open in a segment with room to spare.
    write_file(&mut fs, "/small", &pattern(3000, 7)).expect("write");
    fs.transact().expect("commit");
    let head_segment = pages_of(&mut fs, "/small")[0].2.block;
    let before = pages_of(&mut fs, "/f3");
    let weak = before[0].2;
    assert_ne!(weak.block, head_segment, "the weak page is elsewhere");
    fs.flash_mut().inject_bit_flips_at(weak, &WEAK_BITS).expect("inject");

    let report = fs.scrub(&mut |_| {}).expect("scrub");
    assert_eq!(report.refresh.segments_refreshed, 1, "{report:?}");
    let refreshed: Vec<u64> =
        before.iter().filter(|&&(_, _, page)| page.block == weak.block).map(|&(_, file_page, _)| file_page).collect();
    for (_, file_page, page) in pages_of(&mut fs, "/f3") {
        if refreshed.contains(&file_page) {
            assert_ne!(page.block, weak.block, "page {file_page} of the weak segment moved");
            assert_ne!(page.block, head_segment, "page {file_page} went into the head opened before the scrub");
        }
    }
    assert_eq!(pages_of(&mut fs, "/small")[0].2.block, head_segment, "the old head's data stays");
    check_files(&mut fs, &files, "after the scrub");
    let mut fs = FileSystem::mount(fs.into_flash_without_commit(), FsConfig::default()).expect("remount");
    assert_eq!(read_file(&mut fs, "/small").expect("read"), pattern(3000, 7));
    assert_clean(&mut fs, "after the scrub");
}
