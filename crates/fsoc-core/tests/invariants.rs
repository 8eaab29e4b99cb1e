//! Direct checks of the invariants DESIGN.md relies on, each with a crash where it matters.
mod common;
use common::*;
use fsoc_core::{FileSystem, FsConfig};

/// A segment that the working state stopped referencing in this transaction is still needed by
/// the committed state: overwrite a committed file several times (more than the free space
/// between), cut power before the commit, and the committed content must still read back.
#[test]
fn segments_dropped_in_a_transaction_are_not_reused_before_its_commit() {
    let mut fs = fresh(40);
    let original = pattern(300 * 1024, 1);
    write_file(&mut fs, "/file", &original).expect("write");
    fs.transact().expect("commit");
    for round in 0..6u8 {
        write_file(&mut fs, "/file", &pattern(300 * 1024, round + 2)).expect("rewrite");
    }
    let mut flash = fs.into_flash_without_commit();
    flash.cut_power_now();
    flash.restore_power();
    let mut fs = FileSystem::mount(flash, FsConfig::default()).expect("mount");
    assert_eq!(read_file(&mut fs, "/file").expect("read committed data"), original);
    assert_clean(&mut fs, "after crash");
}

/// Every mount of a clean volume costs the same small number of page reads, whatever is on it:
/// on one 64-page MLC chip exactly 14 (docs/DESIGN.md: 1 superblock + pages 0 and 1 of the 3
/// metaroot areas + log2(64) binary-search probes + the newest record; tests/bounds.rs checks
/// every geometry and the worst case).
#[test]
fn a_clean_mount_reads_few_pages() {
    let mut fs = fresh(64);
    for index in 0..300 {
        write_file(&mut fs, &format!("/f{index}"), &pattern(100, index as u8)).expect("write");
    }
    let flash = fs.unmount().expect("unmount");
    let fs = FileSystem::mount(flash, FsConfig::default()).expect("mount");
    let report = fs.mount_report();
    assert!(report.clean, "unmount was clean");
    // Superblock, its two generation probes, the areas' first pages, the search (whose last
    // programmed probe is the record, not read again from format version 11 on).
    assert_eq!(report.page_reads, 1 + 2 + 6 + 6, "mount page reads");
}
