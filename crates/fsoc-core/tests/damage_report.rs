//! Damage a power cut cannot explain is reported, never hidden (issue 14, O2). A clean
//! unmount writes its metaroot twice; losing the newest page then costs nothing and is
//! reported, and losing both copies rolls back one commit and is reported as lost commits.
mod common;
use common::*;
use fsoc_core::segment::layout::METAROOT_SEGMENTS;
use fsoc_core::txn::volume::MountDamage;
use fsoc_core::{FileSystem, FsConfig};
use fsoc_media::store::PageState;
use fsoc_media::{Flash, PageAddress, Profile, SimFlash};

/// The programmed pages of the newest metaroot area, in order (the area with the most
/// programmed pages whose page 0 was erased last is not needed: the newest record is in the
/// area holding the highest-counted page, which `mount_report` names).
fn programmed_metaroot_pages(flash: &SimFlash, fs_counter_area: u32) -> Vec<PageAddress> {
    let geometry = flash.geometry();
    (0..geometry.pages_per_block)
        .map(|page| PageAddress::new(0, fs_counter_area, page))
        .filter(|&page| flash.page_state(page).expect("page state") != PageState::Erased)
        .collect()
}

/// Formats, writes a file, commits, writes a second file and unmounts cleanly. Returns the
/// flash and the block of the metaroot area in use.
fn cleanly_unmounted_volume() -> (SimFlash, u32) {
    let mut fs = FileSystem::format(sim(Profile::Mlc, 1, 64, 11), FsConfig::default(), 11).expect("format");
    write_file(&mut fs, "/first", b"committed before the last session").expect("write");
    fs.transact().expect("commit");
    write_file(&mut fs, "/last-session", b"written in the last session").expect("write");
    let flash = fs.unmount().expect("unmount");
    // The area in use is the one whose last programmed page is newest: with few commits, the
    // first metaroot area. Find the area with programmed pages beyond page 1.
    let area = METAROOT_SEGMENTS
        .iter()
        .copied()
        .max_by_key(|&block| programmed_metaroot_pages(&flash, block).len())
        .expect("three areas");
    (flash, area)
}

fn destroy(flash: &mut SimFlash, page: PageAddress) {
    // Far more flipped bits than the ECC corrects: the page reads back uncorrectable.
    flash.inject_bit_flips(page, 400).expect("inject");
}

#[test]
fn a_lost_copy_of_the_clean_record_is_reported_and_nothing_is_lost() {
    let (mut flash, area) = cleanly_unmounted_volume();
    let pages = programmed_metaroot_pages(&flash, area);
    destroy(&mut flash, *pages.last().expect("a metaroot page"));
    let mut fs = FileSystem::mount(flash, FsConfig::default()).expect("mount");
    let report = fs.mount_report();
    assert!(matches!(report.damage, Some(MountDamage::CleanRecordCopyLost { .. })), "{report:?}");
    assert_eq!(read_file(&mut fs, "/last-session").expect("the last session's file"), b"written in the last session");
    let fsck = fs.fsck(false).expect("fsck runs");
    assert!(!fsck.is_clean(), "fsck calls a volume with a damaged metaroot clean");
}

#[test]
fn losing_both_copies_rolls_back_and_is_reported_as_lost_commits() {
    let (mut flash, area) = cleanly_unmounted_volume();
    let pages = programmed_metaroot_pages(&flash, area);
    let [.., before_last, last] = pages[..] else { panic!("fewer than two metaroot pages: {pages:?}") };
    destroy(&mut flash, before_last);
    destroy(&mut flash, last);
    let read_only =
        FsConfig { volume: fsoc_core::VolumeConfig { read_only: true, ..Default::default() }, ..Default::default() };
    let mut fs = FileSystem::mount(flash, read_only).expect("mount");
    let report = fs.mount_report();
    assert!(matches!(report.damage, Some(MountDamage::CommitsLost { unreadable_pages: 2, .. })), "{report:?}");
    assert!(read_file(&mut fs, "/first").is_ok(), "the previous commit is what mount found");
    let fsck = fs.fsck(false).expect("fsck runs");
    assert!(!fsck.is_clean(), "fsck calls a rolled-back volume clean");
}

#[test]
fn an_undamaged_clean_volume_reports_no_damage() {
    let (flash, _) = cleanly_unmounted_volume();
    let fs = FileSystem::mount(flash, FsConfig::default()).expect("mount");
    assert_eq!(fs.mount_report().damage, None);
    assert!(fs.mount_report().clean);
}

/// A lost superblock copy is reported: mount names the first copy of chip 0 when it had to
/// use the second; fsck reads both copies of every chip and names any that is lost.
#[test]
fn a_lost_superblock_copy_is_reported() {
    for copy in [0u32, 1] {
        let (mut flash, _) = cleanly_unmounted_volume();
        destroy(&mut flash, PageAddress::new(0, 0, copy));
        let read_only = FsConfig {
            volume: fsoc_core::VolumeConfig { read_only: true, ..Default::default() },
            ..Default::default()
        };
        let mut fs = FileSystem::mount(flash, read_only).expect("mount with one superblock copy");
        let expected_damage = if copy == 0 { Some(MountDamage::SuperblockCopyLost) } else { None };
        assert_eq!(fs.mount_report().damage, expected_damage, "copy {copy}");
        let report = fs.fsck(false).expect("fsck");
        assert!(
            report.violations.iter().any(|violation| violation.contains(&format!("superblock copy {copy} of chip 0"))),
            "copy {copy}: {:?}",
            report.violations
        );
    }
}
