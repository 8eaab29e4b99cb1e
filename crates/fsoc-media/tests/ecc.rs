//! ECC outcomes: the t / t+1 threshold per 512-byte sector with injected flips, and bit errors
//! that rise with wear.

mod common;

use common::{pattern, program, quiet_config, quiet_sim, read};
use fsoc_media::ecc::{BitErrorModel, SECTOR_DATA_BYTES};
use fsoc_media::{BlockAddress, Flash, PageAddress, Profile, ReadStatus, SimFlash};

const SECTOR_BITS: u32 = SECTOR_DATA_BYTES * 8;

/// Bits that differ between two byte strings.
fn differing_bits(left: &[u8], right: &[u8]) -> u32 {
    left.iter().zip(right).map(|(a, b)| (a ^ b).count_ones()).sum()
}

// Checks that exactly t = 4 flips in one sector are corrected and the data comes back intact.
#[test]
fn t_flips_in_one_sector_are_corrected() {
    let mut flash = quiet_sim(Profile::Slc, 1, 8);
    let page = PageAddress::new(0, 1, 0);
    program(&mut flash, page, 4).expect("program");
    flash
        .inject_bit_flips_at(page, &[SECTOR_BITS + 1, SECTOR_BITS + 100, SECTOR_BITS + 999, SECTOR_BITS + 4095])
        .expect("inject");
    let (status, data, spare) = read(&mut flash, page).expect("read");
    assert_eq!(status, ReadStatus::Corrected { bits: 4, max_per_sector: 4 });
    assert_eq!((data, spare), pattern(&flash, 4));
}

// Checks that t + 1 = 5 flips in one sector are uncorrectable and the returned data is the
// raw content: wrong in exactly those 5 bits.
#[test]
fn t_plus_one_flips_are_uncorrectable_with_wrong_data() {
    let mut flash = quiet_sim(Profile::Slc, 1, 8);
    let page = PageAddress::new(0, 1, 0);
    program(&mut flash, page, 4).expect("program");
    flash.inject_bit_flips_at(page, &[0, 8, 16, 24, 4095]).expect("inject");
    let (status, data, spare) = read(&mut flash, page).expect("read");
    assert_eq!(status, ReadStatus::Uncorrectable);
    let (intended_data, intended_spare) = pattern(&flash, 4);
    assert_eq!(differing_bits(&data, &intended_data), 5);
    assert_eq!(spare, intended_spare);
}

// Checks that t flips in every sector (16 flips over the 4 sectors of a 2 KiB page, the last
// one in the spare area, which the last sector's code covers) are all corrected.
#[test]
fn t_flips_per_sector_spread_over_sectors_are_corrected() {
    let mut flash = quiet_sim(Profile::Slc, 1, 8);
    let page = PageAddress::new(0, 1, 0);
    program(&mut flash, page, 4).expect("program");
    let mut positions: Vec<u32> = (0..4).flat_map(|sector| (0..4).map(move |k| sector * SECTOR_BITS + k * 7)).collect();
    positions[15] = 2048 * 8 + 3; // spare bit, counted against sector 3
    flash.inject_bit_flips_at(page, &positions).expect("inject");
    let (status, data, spare) = read(&mut flash, page).expect("read");
    assert_eq!(status, ReadStatus::Corrected { bits: 16, max_per_sector: 4 });
    assert_eq!((data, spare), pattern(&flash, 4));
}

// Checks that randomly placed injected flips persist across reads (same status every time)
// and disappear with an erase.
#[test]
fn random_injected_flips_persist_until_erase() {
    let mut flash = quiet_sim(Profile::Mlc8k, 1, 4);
    let page = PageAddress::new(0, 1, 0);
    program(&mut flash, page, 1).expect("program");
    flash.inject_bit_flips(page, 3).expect("inject");
    let first = read(&mut flash, page).expect("read").0;
    assert!(matches!(first, ReadStatus::Corrected { bits: 3, .. }), "{first:?}");
    assert_eq!(read(&mut flash, page).expect("read").0, first);
    flash.erase_block(0, BlockAddress::new(0, 1)).expect("erase");
    program(&mut flash, page, 1).expect("program");
    assert_eq!(read(&mut flash, page).expect("read").0, ReadStatus::Clean);
}

// Checks erased-page handling: a few stuck bits in an erased page still read as erased
// (all 0xFF), more than t in a sector read as uncorrectable.
#[test]
fn flips_in_erased_pages() {
    let mut flash = quiet_sim(Profile::Slc, 1, 8);
    let page = PageAddress::new(0, 2, 0);
    flash.inject_bit_flips_at(page, &[1, 2]).expect("inject");
    let (status, data, _) = read(&mut flash, page).expect("read");
    assert_eq!(status, ReadStatus::Erased);
    assert!(data.iter().all(|&byte| byte == 0xFF));
    flash.inject_bit_flips_at(page, &[3, 4, 5]).expect("inject");
    assert_eq!(read(&mut flash, page).expect("read").0, ReadStatus::Uncorrectable);
}

/// Reads one programmed page `reads` times on a block aged to `erase_count` and tallies
/// (clean, corrected, uncorrectable).
fn tally_reads_at_wear(erase_count: u32, reads: u32) -> (u32, u32, u32) {
    let mut config = quiet_config(Profile::Mlc, 1, 8, 77);
    config.bit_errors = BitErrorModel::default();
    let mut flash = SimFlash::create(config).expect("config");
    let block = BlockAddress::new(0, 3);
    flash.set_erase_count(block, erase_count).expect("age");
    let page = PageAddress::new(0, 3, 0);
    program(&mut flash, page, 2).expect("program");
    let mut tally = (0, 0, 0);
    for _ in 0..reads {
        match read(&mut flash, page).expect("read").0 {
            ReadStatus::Clean => tally.0 += 1,
            ReadStatus::Corrected { .. } => tally.1 += 1,
            ReadStatus::Uncorrectable => tally.2 += 1,
            ReadStatus::Erased => panic!("programmed page read as erased"),
        }
    }
    tally
}

// Checks the wear regimes of the default RBER model on MLC (endurance 10k): fresh reads are
// essentially all clean; at rated endurance a few reads need correction but none fail; at 3x
// endurance many are corrected and some are uncorrectable.
#[test]
fn bit_errors_rise_with_wear() {
    let (fresh_clean, _, fresh_uncorrectable) = tally_reads_at_wear(0, 1000);
    assert!(fresh_clean >= 995, "fresh: {fresh_clean} clean of 1000");
    assert_eq!(fresh_uncorrectable, 0);
    let (_, rated_corrected, rated_uncorrectable) = tally_reads_at_wear(10_000, 1000);
    assert!((10..300).contains(&rated_corrected), "rated: {rated_corrected} corrected of 1000");
    assert_eq!(rated_uncorrectable, 0);
    let (_, worn_corrected, worn_uncorrectable) = tally_reads_at_wear(30_000, 1000);
    assert!(worn_corrected > 500, "3x: {worn_corrected} corrected of 1000");
    assert!((10..500).contains(&worn_uncorrectable), "3x: {worn_uncorrectable} uncorrectable of 1000");
}
