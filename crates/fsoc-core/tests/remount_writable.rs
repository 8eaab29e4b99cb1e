//! `FileSystem::make_writable`: a volume mounted read-only becomes writable in place, as
//! `mount -o remount,rw` of a read-only mount needs (issue 18 point 2). It must end where a
//! writable mount would have begun: after an unclean unmount, the committed state re-anchored
//! before the first change, a crash's orphans removed; and the read-only session before it
//! writes nothing.
mod common;
use common::*;
use fsoc_core::segment::Redundancy;
use fsoc_core::txn::VolumeConfig;
use fsoc_core::{FileSystem, FsConfig, FsError};
use fsoc_media::{ChipIndex, FlashStats, Profile, SimFlash};

fn read_only() -> FsConfig {
    FsConfig { volume: VolumeConfig { read_only: true, ..VolumeConfig::default() }, ..FsConfig::default() }
}

fn programs_and_erases(flash: &SimFlash) -> (u64, u64) {
    let totals = flash.counters().totals();
    (totals.programs, totals.erases)
}

#[test]
fn a_clean_read_only_mount_becomes_writable_and_its_changes_last() {
    let mut fs = fresh(64);
    write_file(&mut fs, "/before", b"written before the read-only mount").expect("write");
    let flash = fs.unmount().expect("unmount");
    let mut fs = FileSystem::mount(flash, read_only()).expect("read-only mount");
    assert!(fs.mount_report().clean);
    assert_eq!(
        write_file(&mut fs, "/refused", b"x"),
        Err(FsError::ReadOnly),
        "a read-only mount takes a change before make_writable"
    );
    fs.make_writable().expect("make writable");
    fs.make_writable().expect("a second make_writable changes nothing");
    write_file(&mut fs, "/after", b"written after the remount").expect("write after make_writable");
    fs.transact().expect("commit");
    assert_clean(&mut fs, "after make_writable");
    let flash = fs.unmount().expect("unmount");
    let mut fs = FileSystem::mount(flash, FsConfig::default()).expect("mount");
    assert!(fs.mount_report().clean, "the writable session ended with a clean unmount");
    assert_eq!(read_file(&mut fs, "/before").expect("before"), b"written before the read-only mount");
    assert_eq!(read_file(&mut fs, "/after").expect("after"), b"written after the remount");
    assert_eq!(read_file(&mut fs, "/refused"), Err(FsError::NotFound));
    assert_clean(&mut fs, "remounted");
}

/// After a power cut the read-only mount programs nothing (it owes the re-anchoring); the
/// remount writable re-anchors before its first change, removes the crash's orphan, and a
/// second power cut later loses only what was not committed.
#[test]
fn after_a_power_cut_the_remount_reanchors_and_removes_orphans() {
    let mut fs = fresh(64);
    write_file(&mut fs, "/kept", &pattern(20_000, 3)).expect("write");
    // An orphan: a file open when its last name goes, committed so, then the power fails.
    let orphan = fs.open(b"/orphan", CREATE, 0o644).expect("create the orphan");
    fs.pwrite(orphan, 0, &pattern(30_000, 5)).expect("write the orphan");
    fs.unlink(b"/orphan").expect("unlink while open");
    fs.transact().expect("commit");
    write_file(&mut fs, "/uncommitted", b"lost in the power cut").expect("write");
    let mut flash = fs.into_flash_without_commit();
    flash.reset_counters();
    // What a writable mount of the same flash programs and erases before its first request.
    let writable = FileSystem::mount(flash.clone(), FsConfig::default()).expect("writable mount");
    let writable_mount_cost = programs_and_erases(writable.flash());
    assert!(writable_mount_cost.0 > 0, "a writable mount after a power cut re-anchors");

    let mut fs = FileSystem::mount(flash, read_only()).expect("read-only mount after a power cut");
    assert!(!fs.mount_report().clean, "the power cut left an unclean volume");
    assert_eq!(read_file(&mut fs, "/kept").expect("kept"), pattern(20_000, 3));
    assert_eq!(read_file(&mut fs, "/uncommitted"), Err(FsError::NotFound));
    assert_eq!(programs_and_erases(fs.flash()), (0, 0), "the read-only session wrote");
    let free_before = fs.statfs().expect("statfs").free_blocks;

    fs.make_writable().expect("make writable");
    assert_eq!(
        programs_and_erases(fs.flash()),
        writable_mount_cost,
        "the remount writable does what a writable mount does (re-anchoring, orphan removal), no more, no less"
    );
    let free_after = fs.statfs().expect("statfs").free_blocks;
    assert!(free_after > free_before, "the orphan's pages were not freed: {free_before} -> {free_after}");
    assert_clean(&mut fs, "after make_writable");
    write_file(&mut fs, "/committed-after", b"committed after the remount").expect("write");
    fs.transact().expect("commit");
    write_file(&mut fs, "/lost-again", b"not committed").expect("write");

    // A second power cut: the writable session's commit survives, its last change does not.
    let flash = fs.into_flash_without_commit();
    let mut fs = FileSystem::mount(flash, FsConfig::default()).expect("mount after the second power cut");
    assert_eq!(read_file(&mut fs, "/kept").expect("kept"), pattern(20_000, 3));
    assert_eq!(read_file(&mut fs, "/committed-after").expect("committed"), b"committed after the remount");
    assert_eq!(read_file(&mut fs, "/lost-again"), Err(FsError::NotFound));
    assert_clean(&mut fs, "after the second power cut");
}

/// A degraded volume (one chip of a parity array dead) mounts read-only whatever is asked and
/// stays so: make_writable says why instead of writing to an array it cannot protect.
#[test]
fn a_degraded_volume_stays_read_only() {
    let config = FsConfig {
        volume: VolumeConfig { redundancy: Redundancy::Parity, ..VolumeConfig::default() },
        ..FsConfig::default()
    };
    let mut fs = FileSystem::format(sim(Profile::Mlc, 3, 48, 5), config, 5).expect("format a parity array");
    write_file(&mut fs, "/file", &pattern(10_000, 1)).expect("write");
    let mut flash = fs.unmount().expect("unmount");
    flash.fail_chip(ChipIndex(1)).expect("chip 1 dies");
    let mut fs = FileSystem::mount(flash, FsConfig::default()).expect("degraded mount");
    assert_eq!(fs.missing_chip(), Some(1));
    assert_eq!(fs.make_writable(), Err(FsError::ReadOnly));
    assert_eq!(read_file(&mut fs, "/file").expect("read degraded"), pattern(10_000, 1));
    assert_eq!(write_file(&mut fs, "/new", b"x"), Err(FsError::ReadOnly));
}
