//! Redundancy across chips (issue 12 point 2, format version 7): a volume formatted with parity
//! keeps every committed byte when any one chip dies (before mount or in use) or is replaced by
//! a blank chip; it mounts read-only without it, and `rebuild_chip` restores the new chip so
//! the volume is whole and writable again. A page the ECC cannot correct is rebuilt from its row.

mod common;
#[path = "common/data_pages.rs"]
mod shared_pages;

use common::*;
use fsoc_core::segment::{PageTag, Redundancy};
use fsoc_core::txn::{rebuild_chip, VolumeConfig};
use fsoc_core::{FileSystem, FsConfig, FsError};
use fsoc_media::{ChipIndex, Flash, PageAddress, Profile, SimFlash};

fn parity_config() -> FsConfig {
    FsConfig {
        volume: VolumeConfig { redundancy: Redundancy::Parity, ..VolumeConfig::default() },
        ..FsConfig::default()
    }
}

/// The files a run writes: (path, contents), some of several pages, some in directories.
fn files() -> Vec<(String, Vec<u8>)> {
    (0..24)
        .map(|index| {
            let path = if index % 3 == 0 { format!("/d{}/f{index}", index % 4) } else { format!("/f{index}") };
            (path, pattern(100 + index * 1_777, index as u8))
        })
        .collect()
}

/// A parity volume on `chips` chips holding `files()`, committed in three transactions (the
/// last a delta commit), then unmounted.
fn written(chips: u32, seed: u64) -> SimFlash {
    let mut fs = FileSystem::format(sim(Profile::Mlc, chips, 48, seed), parity_config(), seed).expect("format");
    for directory in 0..4 {
        fs.mkdir(format!("/d{directory}").as_bytes(), 0o755).expect("mkdir");
    }
    for (index, (path, contents)) in files().iter().enumerate() {
        write_file(&mut fs, path, contents).expect("write");
        if index % 8 == 7 {
            fs.commit().expect("commit");
        }
    }
    let (last, _) = fs.resolve(b"/f23").expect("resolve");
    fs.fsync(last).expect("delta commit");
    fs.unmount().expect("unmount")
}

fn assert_files<F: Flash>(fs: &mut FileSystem<F>, context: &str) {
    for (path, contents) in files() {
        let read = read_file(fs, &path).unwrap_or_else(|error| panic!("{context}: {path}: {error}"));
        assert!(read == contents, "{context}: {path} differs");
    }
}

fn parity_pages(flash: &SimFlash) -> u64 {
    use fsoc_media::store::PageStore;
    let geometry = flash.geometry();
    let (mut data, mut spare) = (vec![0; geometry.page_data_bytes as usize], vec![0; geometry.spare_bytes as usize]);
    let mut count = 0;
    for chip in 0..flash.chip_count() {
        for block in 0..geometry.block_count {
            for page in 0..geometry.pages_per_block {
                let page = PageAddress::new(chip, block, page);
                if flash.page_state(page).expect("state") != fsoc_media::store::PageState::Erased {
                    flash.inspect_store(|store| store.read_contents(page, &mut data, &mut spare)).expect("contents");
                    count += u64::from(PageTag::decode(&spare) == Some(PageTag::Parity));
                }
            }
        }
    }
    count
}

#[test]
fn any_one_dead_chip_loses_nothing_and_a_rebuilt_chip_makes_the_volume_whole() {
    for chips in [2, 3, 4] {
        let seed = 40 + u64::from(chips);
        let flash = written(chips, seed);
        assert!(parity_pages(&flash) > 10, "{chips} chips: the log carries parity pages");
        for dead in 0..chips {
            let context = format!("{chips} chips, chip {dead} dead");
            let mut broken = flash.clone();
            broken.fail_chip(ChipIndex(dead)).expect("fail chip");
            let mut fs = FileSystem::mount(broken, FsConfig::default()).expect("degraded mount");
            assert_eq!(fs.missing_chip(), Some(dead), "{context}");
            assert_eq!(fs.mount_report().missing_chip, Some(dead), "{context}");
            assert_files(&mut fs, &context);
            assert!(fs.rebuilt_reads() > 0, "{context}: pages were rebuilt");
            assert_clean(&mut fs, &context);
            let data = fs.fsck_data(&mut |_| {}).expect("fsck --data");
            assert!(data.is_clean(), "{context}: {:?}", data.violations);
            assert!(data.rebuilt_pages > 0, "{context}: the dead chip's data pages are rebuilt: {data:?}");
            // Degraded means read-only: nothing new would be protected.
            assert!(matches!(write_file(&mut fs, "/new", b"x"), Err(FsError::ReadOnly)), "{context}");

            // A blank chip in its place mounts degraded too, then a rebuild makes it whole.
            let mut replaced = fs.into_flash_without_commit();
            replaced.replace_chip(ChipIndex(dead)).expect("replace");
            let mut fs = FileSystem::mount(replaced, FsConfig::default()).expect("mount with a blank chip");
            assert_eq!(fs.missing_chip(), Some(dead), "{context}: the blank chip is taken for missing");
            assert_files(&mut fs, &format!("{context}, blank replacement"));
            let mut segments_done = 0;
            let (rebuilt, report) =
                rebuild_chip(fs.into_flash_without_commit(), dead, &mut |done, _| segments_done = done);
            let report = report.expect("rebuild");
            assert_eq!(segments_done, 48, "{context}: progress reached every segment");
            assert_eq!(report.unrecoverable_pages, 0, "{context}: {report:?}");
            assert!(report.pages_written > 20, "{context}: {report:?}");
            let mut fs = FileSystem::mount(rebuilt, FsConfig::default()).expect("mount after rebuild");
            assert_eq!(fs.missing_chip(), None, "{context}: whole again");
            let before = fs.rebuilt_reads();
            assert_files(&mut fs, &format!("{context}, rebuilt"));
            assert_eq!(fs.rebuilt_reads(), before, "{context}: nothing needs rebuilding after the rebuild");
            assert_clean(&mut fs, &format!("{context}, rebuilt"));
            // Writable, and the rebuilt chip takes part in new rows.
            write_file(&mut fs, "/after-rebuild", &pattern(9_000, 3)).expect("write after rebuild");
            let flash = fs.unmount().expect("unmount");
            let mut fs = FileSystem::mount(flash, FsConfig::default()).expect("remount");
            assert_eq!(read_file(&mut fs, "/after-rebuild").expect("read"), pattern(9_000, 3));
            assert_files(&mut fs, &format!("{context}, rebuilt and written"));
        }
    }
}

#[test]
fn a_chip_that_dies_in_use_loses_no_committed_byte() {
    let seed = 5;
    let mut fs = FileSystem::format(sim(Profile::Mlc, 3, 48, seed), parity_config(), seed).expect("format");
    for (path, contents) in files().iter().filter(|(path, _)| !path.starts_with("/d")) {
        write_file(&mut fs, path, contents).expect("write");
    }
    fs.commit().expect("commit");
    // The chip dies in the middle of the next transaction.
    write_file(&mut fs, "/f1", &pattern(50_000, 9)).expect("write before the failure");
    fs.flash_mut().fail_chip(ChipIndex(1)).expect("fail");
    let mut failed = false;
    for index in 0..40 {
        if write_file(&mut fs, &format!("/late{index}"), &pattern(5_000, 1)).and_then(|()| fs.commit()).is_err() {
            failed = true;
            break;
        }
    }
    assert!(failed, "programs on the dead chip fail the change");
    let flash = fs.into_flash_without_commit();
    let mut fs = FileSystem::mount(flash, FsConfig::default()).expect("degraded mount");
    assert_eq!(fs.missing_chip(), Some(1));
    for (path, contents) in files().iter().filter(|(path, _)| !path.starts_with("/d")) {
        assert_eq!(&read_file(&mut fs, path).expect("committed file"), contents, "{path}");
    }
    assert_clean(&mut fs, "chip died in use");
}

#[test]
fn a_page_the_ecc_cannot_correct_is_rebuilt_from_its_row() {
    let seed = 8;
    let flash = written(4, seed);
    let mut fs = FileSystem::mount(flash, FsConfig::default()).expect("mount");
    // Ruin data pages of one file behind the ECC's back, far more flips than it corrects, one
    // page in each row (two in a row would be two faults: parity rebuilds one).
    let (path, contents) = files().swap_remove(5);
    let (inode, _) = fs.resolve(path.as_bytes()).expect("resolve");
    let mut rows = std::collections::BTreeSet::new();
    let pages: Vec<PageAddress> = shared_pages::data_pages(&mut fs)
        .into_iter()
        .filter(|(owner, _, page)| *owner == inode && rows.insert((page.block, page.page_index)))
        .map(|(_, _, page)| page)
        .collect();
    assert!(pages.len() >= 2);
    let mut flash = fs.into_flash_without_commit();
    for page in &pages {
        flash.inject_bit_flips(*page, 200).expect("flips");
    }
    let mut fs = FileSystem::mount(flash, FsConfig::default()).expect("mount");
    assert_eq!(read_file(&mut fs, &path).expect("read"), contents);
    assert_eq!(fs.rebuilt_reads(), pages.len() as u64);
    let data = fs.fsck_data(&mut |_| {}).expect("fsck --data");
    assert!(data.is_clean(), "{:?}", data.violations);
}

#[test]
fn parity_costs_one_chip_in_p_of_the_space_and_needs_two_chips() {
    let plain = FileSystem::format(sim(Profile::Mlc, 4, 48, 1), FsConfig::default(), 1).expect("format");
    let mut parity = FileSystem::format(sim(Profile::Mlc, 4, 48, 1), parity_config(), 1).expect("format");
    let mut plain = plain;
    let (plain, parity) = (plain.statfs().expect("statfs"), parity.statfs().expect("statfs"));
    let ratio = parity.total_blocks as f64 / plain.total_blocks as f64;
    assert!((0.70..=0.76).contains(&ratio), "parity on 4 chips keeps about 3/4 of the space: {ratio}");
    let refused = FileSystem::format(sim(Profile::Mlc, 1, 48, 1), parity_config(), 1);
    assert!(matches!(refused, Err(FsError::Io(fsoc_core::txn::TxnError::CannotFormat { .. }))));
}

/// A rebuild cut by a power failure at any of its operations leaves a chip that mount takes for
/// missing (its superblock is erased first and written last): the volume mounts degraded with
/// every file exact, and the rebuild run again makes it whole.
#[test]
fn a_rebuild_cut_anywhere_leaves_a_degraded_volume_that_reads_whole() {
    let flash = written(3, 12);
    let (_, report) = rebuild_chip(flash.clone(), 1, &mut |_, _| {});
    let operations = report.expect("rebuild").pages_written + 48;
    for cut in (0..operations).step_by(7) {
        let mut cut_flash = flash.clone();
        cut_flash.schedule_power_cut(cut);
        let (mut cut_flash, result) = rebuild_chip(cut_flash, 1, &mut |_, _| {});
        let context = format!("rebuild cut after {cut} operations");
        if !cut_flash.power_is_lost() {
            assert!(result.is_ok(), "{context}");
            continue;
        }
        cut_flash.restore_power();
        let mut fs =
            FileSystem::mount(cut_flash, FsConfig::default()).unwrap_or_else(|error| panic!("{context}: {error}"));
        assert_eq!(fs.missing_chip(), Some(1), "{context}: a half-rebuilt chip is missing, not whole");
        assert_files(&mut fs, &context);
        let (again, result) = rebuild_chip(fs.into_flash_without_commit(), 1, &mut |_, _| {});
        result.expect("the rebuild run again");
        let mut fs = FileSystem::mount(again, FsConfig::default()).expect("mount");
        assert_eq!(fs.missing_chip(), None, "{context}: whole after the second rebuild");
        assert_files(&mut fs, &context);
    }
}

/// A block of the replacement chip that cannot be erased where the chip must hold pages: the
/// rebuild stops with the reason before it writes the chip's superblock, so the chip stays
/// missing and the volume reads whole, degraded; a good replacement then rebuilds it.
#[test]
fn a_replacement_block_that_cannot_be_erased_leaves_the_volume_degraded_not_broken() {
    let flash = written(3, 60);
    let mut replaced = flash.clone();
    replaced.replace_chip(ChipIndex(1)).expect("replace");
    // Operations 0 and 1 erase the superblock's homes (blocks 0 and 4), operation 2 the first
    // metaroot area's block.
    replaced.schedule_operation_failure(2);
    let (replaced, report) = rebuild_chip(replaced, 1, &mut |_, _| {});
    let error = report.expect_err("the rebuild cannot complete");
    assert!(error.to_string().contains("cannot be erased"), "{error}");
    let mut fs = FileSystem::mount(replaced, FsConfig::default()).expect("degraded mount");
    assert_eq!(fs.missing_chip(), Some(1), "the chip stays missing");
    assert_files(&mut fs, "after the failed rebuild");
    assert_clean(&mut fs, "after the failed rebuild");
    let mut again = fs.into_flash_without_commit();
    again.replace_chip(ChipIndex(1)).expect("another replacement");
    let (again, report) = rebuild_chip(again, 1, &mut |_, _| {});
    assert_eq!(report.expect("rebuild").unrecoverable_pages, 0);
    let mut fs = FileSystem::mount(again, FsConfig::default()).expect("mount");
    assert_eq!(fs.missing_chip(), None);
    assert_files(&mut fs, "rebuilt onto another chip");
}

/// A rebuild asked for one chip while another is blank too is refused before anything is
/// written: the volume is left as it was (degraded) and can still be rebuilt once the second
/// chip is back.
#[test]
fn a_rebuild_needs_every_other_chip_in_place() {
    let flash = written(4, 61);
    let mut two_gone = flash.clone();
    two_gone.replace_chip(ChipIndex(1)).expect("replace");
    let saved = two_gone.clone();
    two_gone.replace_chip(ChipIndex(2)).expect("replace");
    let (two_gone, report) = rebuild_chip(two_gone, 1, &mut |_, _| {});
    let error = report.expect_err("two chips gone");
    assert!(error.to_string().contains("another chip of the volume is missing"), "{error}");
    drop(two_gone);
    // With chip 2 back (as it was), chip 1 rebuilds.
    let (rebuilt, report) = rebuild_chip(saved, 1, &mut |_, _| {});
    assert_eq!(report.expect("rebuild").unrecoverable_pages, 0);
    let mut fs = FileSystem::mount(rebuilt, FsConfig::default()).expect("mount");
    assert_eq!(fs.missing_chip(), None);
    assert_files(&mut fs, "rebuilt");
}
