//! The littlefs storage adapter and both littlefs targets on the simulator: files round-trip
//! across a remount, every littlefs prog is one whole-page program, the two targets agree
//! operation for operation, and NAND rule violations surface as errors.

use fsoc_bench::littlefs::{NandStorage, BLOCK_COUNT, BLOCK_SIZE_BYTES, PAGE_SIZE_BYTES};
use fsoc_bench::{
    BenchDevice, BenchError, BenchTarget, Durability, LittlefsConfig, LittlefsCrateTarget, LittlefsTarget, Snapshot,
};
use fsoc_media::FlashStats;
use fsoc_media::{NandError, Profile};
use littlefs2::driver::Storage;

fn device(seed: u64) -> BenchDevice {
    BenchDevice { profile: Profile::Mlc, chip_count: 1, block_count: BLOCK_COUNT as u32, seed }
}

fn contents(length_bytes: usize, salt: u8) -> Vec<u8> {
    (0..length_bytes).map(|index| (index as u8).wrapping_mul(31).wrapping_add(salt)).collect()
}

/// Sizes below, at and above the inline limit, across pages and across blocks.
const SIZES: [usize; 6] = [0, 1, 1022, 1024, PAGE_SIZE_BYTES + 1, 3 * BLOCK_SIZE_BYTES / 2];

/// Writes `SIZES` files, unmounts, mounts again on the same `SimFlash`, reads every file back
/// byte for byte, deletes one and checks it is gone. Returns the flash counts after writing.
fn check_round_trip<T: BenchTarget>(settings: &T::Settings) -> Snapshot {
    let mut target = T::format(device(7).create().expect("device"), 7, settings).expect("format");
    target.create_directory("/dir").expect("mkdir");
    for (index, &size) in SIZES.iter().enumerate() {
        let path = format!("/dir/file{index}");
        target.create_file(&path, &contents(size, index as u8), Durability::Commit).expect("create");
    }
    let written = Snapshot::take(&mut target);
    assert!(written.programs > 0 && written.erases > 0, "{}: nothing reached flash: {written:?}", T::NAME);
    // Each prog is whole pages, so programmed bytes are pages × (page + spare).
    let totals = target.flash().counters().totals();
    assert_eq!(totals.bytes_programmed, totals.programs * (PAGE_SIZE_BYTES as u64 + 64), "{}", T::NAME);
    // One chip, one operation at a time: the clock is the sum of busy times.
    assert_eq!(target.now_ns(), totals.busy_ns, "{}", T::NAME);

    let flash = target.unmount().expect("unmount");
    let mut target = T::mount(flash, settings).expect("mount");
    for (index, &size) in SIZES.iter().enumerate() {
        let path = format!("/dir/file{index}");
        let read = target.read_file(&path, 2 * BLOCK_SIZE_BYTES).expect("read");
        assert_eq!(read.len(), size, "{}: {path}", T::NAME);
        assert!(read == contents(size, index as u8), "{}: {path}: contents differ", T::NAME);
        target.open_file(&path).expect("open");
    }
    target.delete_file("/dir/file5", Durability::Commit).expect("delete");
    match target.open_file("/dir/file5") {
        Err(BenchError::Littlefs { code: -2, nand: None, .. }) => {}
        other => panic!("{}: open of a deleted file: {other:?}", T::NAME),
    }
    target.unmount().expect("unmount");
    written
}

#[test]
fn benchmark_target_round_trips() {
    check_round_trip::<LittlefsTarget>(&LittlefsConfig::BENCHMARK);
}

#[test]
fn crate_api_target_round_trips() {
    check_round_trip::<LittlefsCrateTarget>(&LittlefsConfig::CRATE_DEFAULTS);
}

// With the crate API's settings, the raw-bindings target does exactly the same flash
// operations as the crate's safe API: the two paths into littlefs agree.
#[test]
fn raw_target_matches_crate_api() {
    let raw = check_round_trip::<LittlefsTarget>(&LittlefsConfig::CRATE_DEFAULTS);
    let safe = check_round_trip::<LittlefsCrateTarget>(&LittlefsConfig::CRATE_DEFAULTS);
    assert_eq!(raw, safe);
}

// The crate API cannot take other settings, and the raw target refuses invalid ones.
#[test]
fn settings_are_checked() {
    let flash = || device(1).create().expect("device");
    let refused = LittlefsCrateTarget::format(flash(), 1, &LittlefsConfig::BENCHMARK).err();
    assert!(matches!(refused, Some(BenchError::InvalidConfig { .. })), "{refused:?}");
    let odd_cache = LittlefsConfig { cache_size_bytes: 3 * PAGE_SIZE_BYTES as u32, ..LittlefsConfig::BENCHMARK };
    let refused = LittlefsTarget::format(flash(), 1, &odd_cache).err();
    assert!(matches!(refused, Some(BenchError::InvalidConfig { .. })), "{refused:?}");
}

// Programming a page twice (a NAND rule violation) fails with LFS_ERR_IO and keeps the
// simulator's NotErased error for the report instead of hiding it.
#[test]
fn nand_rule_violation_is_reported() {
    let mut storage = NandStorage::new(device(1).create().expect("device")).expect("storage");
    let page = vec![0u8; PAGE_SIZE_BYTES];
    storage.erase(0, BLOCK_SIZE_BYTES).expect("erase");
    storage.write(0, &page).expect("first program");
    assert_eq!(storage.write(0, &page), Err(littlefs2::io::Error::IO));
    assert!(matches!(storage.take_error(), Some(NandError::NotErased { .. })));
    assert_eq!(storage.take_error(), None);
}

// A geometry that does not match the compile-time littlefs constants is refused.
#[test]
fn wrong_geometry_is_refused() {
    let small = BenchDevice { block_count: 512, ..device(1) };
    let error = NandStorage::new(small.create().expect("device")).err().expect("refused");
    assert!(matches!(error, BenchError::InvalidConfig { .. }), "{error}");
}
