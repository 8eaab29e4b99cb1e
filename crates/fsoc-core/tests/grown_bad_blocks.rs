//! Grown bad blocks in the metaroot areas and the segment table (issue 12 point 3): a program or
//! erase the flash reports failed no longer fails the commit. A metaroot is written again, with
//! the counter plus one, on page 0 of a freshly erased area; a segment-table page write retires
//! its segment and writes the table again. Here every flash operation of a run of small commits
//! that goes round all three metaroot areas fails once, in its own run, and each run must
//! commit everything, remount to the same files and pass fsck.

mod common;

use common::*;
use fsoc_core::{FileSystem, FsConfig, FsError};
use fsoc_media::{OperationKind, Profile, SimFlash};

#[test]
fn a_failure_at_any_operation_of_a_run_of_commits_loses_nothing() {
    let seed = 9;
    // SLC: 64 pages a block, so a metaroot area holds 64 records.
    let formatted = FileSystem::format(sim(Profile::Slc, 1, 40, seed), FsConfig::default(), seed).expect("format");
    let formatted = formatted.unmount().expect("unmount");
    let commits = 150;
    let mut reference = FileSystem::mount(formatted.clone(), FsConfig::default()).expect("mount");
    let expected = states(&mut reference, commits);
    let operations = reference.flash_operations_issued();
    let (mut metaroot_programs, mut metaroot_erases, mut table_programs, mut others, mut read_only) = (0, 0, 0, 0, 0);
    for point in 0..operations {
        let context = format!("failure at operation {}", point + 1);
        let mut flash = formatted.clone();
        flash.schedule_operation_failure(point);
        let mut fs = FileSystem::mount(flash, FsConfig::default()).expect("mount");
        let mut done = 0usize;
        for index in 0..commits {
            let path = format!("/f{}", index % 7);
            let result =
                write_file(&mut fs, &path, &pattern(300 + index as usize, index as u8)).and_then(|()| fs.transact());
            match result {
                Ok(()) => done += 1,
                // A metaroot area whose erase failed ends writing: there is no spare area.
                Err(FsError::WornOut(_)) => {
                    read_only += 1;
                    break;
                }
                Err(error) => panic!("{context}: commit {index}: {error}"),
            }
        }
        let hit = fs.flash().scheduled_failure_hit();
        match hit {
            Some(hit) if hit.block.block.0 < fsoc_core::segment::layout::FIRST_LOG_SEGMENT => match hit.kind {
                OperationKind::Erase => metaroot_erases += 1,
                _ => metaroot_programs += 1,
            },
            Some(hit) if hit.kind == OperationKind::Program && is_table_page(fs.flash(), hit.page) => {
                table_programs += 1
            }
            _ => others += 1,
        }
        if done == commits as usize {
            let flash = fs.unmount().expect("unmount");
            fs = FileSystem::mount(flash, FsConfig::default()).expect("remount");
        } else {
            fs = FileSystem::mount(fs.into_flash_without_commit(), FsConfig::default()).expect("remount");
        }
        let visible: Vec<Option<Vec<u8>>> = (0..7).map(|file| read_file(&mut fs, &format!("/f{file}")).ok()).collect();
        assert!(
            visible == expected[done] || expected.get(done + 1) == Some(&visible),
            "{context}: the files are neither commit {done} nor the one in flight"
        );
        assert_clean(&mut fs, &context);
    }
    println!(
        "{operations} runs: failures of {metaroot_programs} metaroot programs, {metaroot_erases} metaroot-area erases \
         ({read_only} runs then read-only), {table_programs} segment-table programs and {others} other operations, \
         none lost anything"
    );
    assert!(metaroot_programs > 100 && metaroot_erases >= 2 && table_programs > 0);
    assert!(read_only <= metaroot_erases, "only a failed metaroot-area erase ends writing");
}

fn is_table_page(flash: &SimFlash, page: Option<fsoc_media::PageAddress>) -> bool {
    use fsoc_media::store::PageStore;
    let Some(page) = page else { return false };
    let geometry = fsoc_media::Flash::geometry(flash);
    let mut data = vec![0u8; geometry.page_data_bytes as usize];
    let mut spare = vec![0u8; geometry.spare_bytes as usize];
    flash.inspect_store(|store| store.read_contents(page, &mut data, &mut spare)).is_ok()
        && matches!(fsoc_core::segment::PageTag::decode(&spare), Some(fsoc_core::segment::PageTag::SegmentTable { .. }))
}

/// The files' contents after each commit of `workload` (index 0: before any).
fn states(fs: &mut FileSystem<SimFlash>, commits: u32) -> Vec<Vec<Option<Vec<u8>>>> {
    let snapshot = |fs: &mut FileSystem<SimFlash>| -> Vec<Option<Vec<u8>>> {
        (0..7).map(|file| read_file(fs, &format!("/f{file}")).ok()).collect()
    };
    let mut states = vec![snapshot(fs)];
    for index in 0..commits {
        write_file(fs, &format!("/f{}", index % 7), &pattern(300 + index as usize, index as u8)).expect("write");
        fs.transact().expect("commit");
        states.push(snapshot(fs));
    }
    states
}

/// A failure, then a power cut during the writes that answer it (the retried metaroot, the
/// table written again): after remount the files are those of the last commit that returned,
/// or of the one in flight, and fsck is clean.
#[test]
fn a_power_cut_while_a_failure_is_being_answered_loses_nothing() {
    let seed = 10;
    let formatted = FileSystem::format(sim(Profile::Slc, 1, 40, seed), FsConfig::default(), seed).expect("format");
    let formatted = formatted.unmount().expect("unmount");
    let commits = 140;
    let mut reference = FileSystem::mount(formatted.clone(), FsConfig::default()).expect("mount");
    let expected = states(&mut reference, commits);
    let operations = reference.flash_operations_issued();
    let mut runs = 0;
    for point in (0..operations).step_by(3) {
        for delay in 0..4 {
            let mut flash = formatted.clone();
            flash.schedule_operation_failure(point);
            flash.schedule_power_cut(point + 1 + delay);
            let mut fs = FileSystem::mount(flash, FsConfig::default()).expect("mount");
            let mut done = 0;
            for index in 0..commits {
                let path = format!("/f{}", index % 7);
                if write_file(&mut fs, &path, &pattern(300 + index as usize, index as u8)).is_err()
                    || fs.transact().is_err()
                {
                    break;
                }
                done += 1;
            }
            let mut flash = fs.into_flash_without_commit();
            if !flash.power_is_lost() {
                continue; // the run ended before the cut point
            }
            flash.restore_power();
            let context = format!("failure at operation {}, power cut {} operations later", point + 1, delay + 1);
            let mut fs =
                FileSystem::mount(flash, FsConfig::default()).unwrap_or_else(|error| panic!("{context}: {error}"));
            let visible: Vec<Option<Vec<u8>>> =
                (0..7).map(|file| read_file(&mut fs, &format!("/f{file}")).ok()).collect();
            let durable = &expected[done];
            let in_flight = expected.get(done + 1);
            assert!(
                &visible == durable || in_flight == Some(&visible),
                "{context}: the files are neither commit {done} nor the one in flight"
            );
            assert_clean(&mut fs, &context);
            runs += 1;
        }
    }
    println!("{runs} runs of a failure followed by a power cut: every one recovered a commit");
}

/// fsck reports the bad blocks of each chip (issue 12 point 3): the flash's marks, factory or
/// grown, counted without reading a page.
#[test]
fn fsck_counts_bad_blocks_per_chip() {
    use fsoc_media::{BlockAddress, Flash, FlashStats};
    let mut fs = FileSystem::format(sim(Profile::Mlc, 3, 40, 4), FsConfig::default(), 4).expect("format");
    assert_eq!(fs.fsck(false).expect("fsck").bad_blocks_per_chip, vec![0, 0, 0]);
    for (chip, block) in [(1, 30), (1, 31), (2, 39)] {
        fs.flash_mut().mark_bad_block(BlockAddress::new(chip, block)).expect("mark");
    }
    let reads = fs.flash().counters().totals().reads;
    assert_eq!(fs.bad_blocks_per_chip(), vec![0, 2, 1]);
    assert_eq!(fs.flash().counters().totals().reads, reads, "no page read");
    assert_eq!(fs.fsck(false).expect("fsck").bad_blocks_per_chip, vec![0, 2, 1]);
}
