//! Mount detects the array from what is on the chips and refuses a chip set that does not
//! belong together: a missing chip, an extra chip, a chip of another volume, a blank chip, or
//! chips in the wrong order — each with its own typed error. Chip files make every such mix
//! easy to build: each is one chip, opened in whatever order the caller lists them.

use std::path::{Path, PathBuf};

use fsoc_array::{chip_file_path, ArrayConfig, ThreadedFlash};
use fsoc_core::txn::{ChipSetError, TxnError};
use fsoc_core::{FileSystem, FsConfig, FsError};
use fsoc_media::{Profile, SimConfig, SimFlash};

fn config(chips: u32) -> SimConfig {
    SimConfig::new(Profile::Slc, chips, 16, 11)
}

/// Formats a 4-chip volume `volume_id` in chip files `base.chip0..3`.
fn format_array(base: &Path, volume_id: u64) -> Vec<PathBuf> {
    let flash = ThreadedFlash::create(base, config(4)).expect("create");
    let fs = FileSystem::format(flash, FsConfig::default(), volume_id).expect("format");
    fs.unmount().expect("unmount").close().expect("close");
    (0..4).map(|chip| chip_file_path(base, chip)).collect()
}

/// Mounts the chip files in the order given and returns the chip-set error, if any.
fn check(paths: &[&PathBuf]) -> Result<(), ChipSetError> {
    let paths: Vec<PathBuf> = paths.iter().map(|path| (*path).clone()).collect();
    let flash = ThreadedFlash::open_files(&paths, ArrayConfig::default()).expect("open chip files");
    match FileSystem::mount(flash, FsConfig::default()) {
        Ok(fs) => {
            fs.unmount().expect("unmount").close().expect("close");
            Ok(())
        }
        Err(FsError::Io(TxnError::ChipSet(error))) => Err(error),
        Err(other) => panic!("expected a chip-set error, got {other}"),
    }
}

#[test]
fn mount_refuses_chip_sets_that_do_not_belong_together() {
    let directory = tempfile::tempdir().expect("tempdir");
    let a = format_array(&directory.path().join("a"), 0xAAAA);
    let b = format_array(&directory.path().join("b"), 0xBBBB);
    let blank_base = directory.path().join("blank");
    ThreadedFlash::create(&blank_base, config(1)).expect("blank").close().expect("close");
    let blank = chip_file_path(&blank_base, 0);

    assert_eq!(check(&[&a[0], &a[1], &a[2], &a[3]]), Ok(()));
    assert_eq!(
        check(&[&a[0], &a[1], &a[3]]),
        Err(ChipSetError::MissingChip { volume_chip_count: 4, array_chip_count: 3 })
    );
    assert_eq!(
        check(&[&a[0], &a[1], &a[2], &a[3], &b[0]]),
        Err(ChipSetError::ExtraChip { volume_chip_count: 4, array_chip_count: 5 })
    );
    assert_eq!(
        check(&[&a[0], &a[1], &b[2], &a[3]]),
        Err(ChipSetError::ForeignChip { position: 2, expected_volume_id: 0xAAAA, found_volume_id: 0xBBBB })
    );
    assert_eq!(check(&[&a[0], &a[2], &a[1], &a[3]]), Err(ChipSetError::WrongOrder { position: 1, chip_index: 2 }));
    assert_eq!(check(&[&a[3], &a[1], &a[2], &a[0]]), Err(ChipSetError::WrongOrder { position: 0, chip_index: 3 }));
    assert_eq!(check(&[&a[0], &a[1], &a[2], &blank]), Err(ChipSetError::NotAVolumeChip { position: 3 }));
    // After all the refusals, nothing was written: the right set still mounts.
    assert_eq!(check(&[&a[0], &a[1], &a[2], &a[3]]), Ok(()));
}

// A missing chip file in the middle (BASE.chip2 gone) makes `open` see a 2-chip array, which
// mount refuses as a missing chip rather than mounting half a volume.
#[test]
fn a_gap_in_the_chip_files_is_a_missing_chip() {
    let directory = tempfile::tempdir().expect("tempdir");
    let base = directory.path().join("vol");
    let paths = format_array(&base, 7);
    std::fs::remove_file(&paths[2]).expect("remove chip 2");
    let flash = ThreadedFlash::open(&base).expect("open");
    match FileSystem::mount(flash, FsConfig::default()) {
        Err(FsError::Io(TxnError::ChipSet(error))) => {
            assert_eq!(error, ChipSetError::MissingChip { volume_chip_count: 4, array_chip_count: 2 });
            assert!(error.to_string().contains("missing"), "{error}");
        }
        Err(other) => panic!("expected MissingChip, got {other}"),
        Ok(_) => panic!("mounted a volume with a chip missing"),
    }
}

// The chip-set check reads one superblock page per chip: mount page reads grow by one page per
// added chip, plus one step of the metaroot area's binary search per doubling (its stripes
// are p blocks long), so mount stays within p + a small constant.
#[test]
fn mount_reads_grow_by_one_page_per_chip() {
    let mut reads = Vec::new();
    for chips in [1u32, 2, 4, 8] {
        let flash = SimFlash::create(SimConfig::new(Profile::Mlc, chips, 32, 3)).expect("simulator");
        let fs = FileSystem::format(flash, FsConfig::default(), 9).expect("format");
        let flash = fs.unmount().expect("unmount");
        let fs = FileSystem::mount(flash, FsConfig::default()).expect("mount");
        reads.push((chips, fs.mount_report().page_reads));
    }
    let (_, one_chip_reads) = reads[0];
    for &(chips, page_reads) in &reads {
        let doublings = u64::from(chips.trailing_zeros());
        assert_eq!(page_reads, one_chip_reads + u64::from(chips - 1) + doublings, "{reads:?}");
    }
}
