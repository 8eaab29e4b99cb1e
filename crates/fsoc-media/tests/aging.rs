//! Retention loss and read disturb (`AgingModel`): errors rise with retention age and with
//! reads of a block, both faster on worn blocks; an erase resets both; outcomes stay
//! deterministic; and a device without the aging model samples exactly as before it existed.

mod common;

use common::{erase, pattern, program, quiet_config, read};
use fsoc_media::aging::{NANOS_PER_DAY, NANOS_PER_YEAR};
use fsoc_media::ecc::BitErrorModel;
use fsoc_media::{
    AgingModel, BlockAddress, ChipIndex, Flash, FlashStats, PageAddress, Profile, ReadStatus, SimConfig, SimFlash,
};

/// Rated endurance of the MLC profile these tests use.
const ENDURANCE: u32 = 10_000;

/// A config with the default wear errors and nothing else random (aging off, the default).
fn wear_config(seed: u64) -> SimConfig {
    let mut config = quiet_config(Profile::Mlc, 1, 8, seed);
    config.bit_errors = BitErrorModel::default();
    config
}

/// `wear_config` with the published retention and read-disturb model.
fn aging_config(seed: u64) -> SimConfig {
    SimConfig { aging: AgingModel::published(), ..wear_config(seed) }
}

/// Tally of read outcomes: (clean, corrected, uncorrectable, corrected bits, reads whose
/// worst sector had at least 3 errors).
#[derive(Debug, Default, PartialEq, Eq)]
struct Tally {
    clean: u32,
    corrected: u32,
    uncorrectable: u32,
    corrected_bits: u32,
    heavily_corrected: u32,
}

impl Tally {
    fn add(&mut self, status: ReadStatus) {
        match status {
            ReadStatus::Clean => self.clean += 1,
            ReadStatus::Corrected { bits, max_per_sector } => {
                self.corrected += 1;
                self.corrected_bits += bits;
                if max_per_sector >= 3 {
                    self.heavily_corrected += 1;
                }
            }
            ReadStatus::Uncorrectable => self.uncorrectable += 1,
            ReadStatus::Erased => panic!("programmed page read as erased"),
        }
    }
}

/// FNV-1a over a sequence of statuses, to pin a whole run in one number.
fn fingerprint(statuses: &[ReadStatus]) -> u64 {
    let mut hash = 0xcbf2_9ce4_8422_2325u64;
    let mut mix = |word: u64| {
        for byte in word.to_le_bytes() {
            hash ^= u64::from(byte);
            hash = hash.wrapping_mul(0x0100_0000_01b3);
        }
    };
    for status in statuses {
        match *status {
            ReadStatus::Clean => mix(1),
            ReadStatus::Corrected { bits, max_per_sector } => {
                mix(2 << 32 | u64::from(bits) << 8 | u64::from(max_per_sector))
            }
            ReadStatus::Uncorrectable => mix(3),
            ReadStatus::Erased => mix(4),
        }
    }
    hash
}

/// The pinned workload: blocks 1..=4 aged to 0, 1x, 2x and 3x endurance, four pages each,
/// each page read 250 times at advancing virtual times. Returns every status in order.
fn pinned_workload(flash: &mut SimFlash) -> Vec<ReadStatus> {
    let endurance = flash.config().endurance_cycles;
    let geometry = flash.geometry();
    let (mut data, mut spare) =
        (vec![0u8; geometry.page_data_bytes as usize], vec![0u8; geometry.spare_bytes as usize]);
    let mut statuses = Vec::new();
    let mut now_ns = 0;
    for (block, wear) in [(1u32, 0u32), (2, 1), (3, 2), (4, 3)] {
        flash.set_erase_count(BlockAddress::new(0, block), wear * endurance).expect("age");
        for page_index in 0..4 {
            let page = PageAddress::new(0, block, page_index);
            let (intended_data, intended_spare) = pattern(flash, block * 8 + page_index);
            now_ns = flash.program_page(now_ns, page, &intended_data, &intended_spare).expect("program").done_ns;
        }
    }
    for round in 0..250 {
        for block in 1..=4 {
            for page_index in 0..4 {
                let page = PageAddress::new(0, block, (page_index + round) % 4);
                let done = flash.read_page(now_ns, page, &mut data, &mut spare).expect("read");
                now_ns = done.done_ns;
                statuses.push(done.value);
            }
        }
    }
    statuses
}

// Checks that a device without the aging model (the default) samples exactly the outcomes the
// simulator gave before retention and read disturb existed: the tallies and the fingerprint
// of 4,000 reads over blocks at 0-3x endurance were recorded with the old code path.
#[test]
fn unaged_outcomes_are_pinned() {
    let mut flash = SimFlash::create(wear_config(2024)).expect("config");
    let statuses = pinned_workload(&mut flash);
    let mut tally = Tally::default();
    statuses.iter().for_each(|status| tally.add(*status));
    assert_eq!(statuses.len(), 4000);
    let expected =
        Tally { clean: 2163, corrected: 1715, uncorrectable: 122, corrected_bits: 7018, heavily_corrected: 575 };
    assert_eq!(tally, expected);
    assert_eq!(fingerprint(&statuses), 0x04d1_bc68_1eb8_1c73);
}

/// Reads `page` `reads` times, issued at t = 0 (retention age is then the shelf time since
/// the block was programmed), and tallies the outcomes.
fn tally_reads(flash: &mut SimFlash, page: PageAddress, reads: u32) -> Tally {
    let mut tally = Tally::default();
    for _ in 0..reads {
        tally.add(read(flash, page).expect("read").0);
    }
    tally
}

/// A device with block 1 at `erase_count` erases and its first page programmed.
fn programmed_device(seed: u64, erase_count: u32) -> (SimFlash, PageAddress) {
    let mut flash = SimFlash::create(aging_config(seed)).expect("config");
    flash.set_erase_count(BlockAddress::new(0, 1), erase_count).expect("age");
    let page = PageAddress::new(0, 1, 0);
    program(&mut flash, page, 7).expect("program");
    (flash, page)
}

/// Programs a block at `erase_count`, ages it by `age_ns` and tallies 1,000 reads.
fn tally_after_retention(erase_count: u32, age_ns: u64) -> Tally {
    let (mut flash, page) = programmed_device(31, erase_count);
    flash.advance_retention_time(age_ns);
    tally_reads(&mut flash, page, 1000)
}

// Checks retention against the calibration: at rated endurance a fresh program reads as the
// wear model alone (a few corrections); after 1 year reads are mostly corrected, often with
// 3 or more bits in a sector, and rarely uncorrectable; after 3 years most are
// uncorrectable. Half the wear ages far slower, and a fresh block is still readable after 10
// years.
#[test]
fn retention_errors_rise_with_age_and_faster_with_wear() {
    let rated_fresh_program = tally_after_retention(ENDURANCE, 0);
    assert!(rated_fresh_program.clean > 900, "rated, age 0: {rated_fresh_program:?}");
    assert_eq!(rated_fresh_program.uncorrectable, 0);

    let rated_one_year = tally_after_retention(ENDURANCE, NANOS_PER_YEAR);
    assert!(rated_one_year.corrected > 800, "rated, 1 year: {rated_one_year:?}");
    assert!(rated_one_year.heavily_corrected > 150, "rated, 1 year: {rated_one_year:?}");
    assert!((1..100).contains(&rated_one_year.uncorrectable), "rated, 1 year: {rated_one_year:?}");

    let rated_three_years = tally_after_retention(ENDURANCE, 3 * NANOS_PER_YEAR);
    assert!(rated_three_years.uncorrectable > 500, "rated, 3 years: {rated_three_years:?}");

    let half_one_year = tally_after_retention(ENDURANCE / 2, NANOS_PER_YEAR);
    assert!(half_one_year.corrected_bits * 3 < rated_one_year.corrected_bits, "half, 1 year: {half_one_year:?}");
    assert!(half_one_year.heavily_corrected * 5 < rated_one_year.heavily_corrected, "half, 1 year: {half_one_year:?}");
    assert!(half_one_year.uncorrectable <= 2, "half, 1 year: {half_one_year:?}");

    let fresh_ten_years = tally_after_retention(0, 10 * NANOS_PER_YEAR);
    assert_eq!(fresh_ten_years.uncorrectable, 0, "fresh, 10 years: {fresh_ten_years:?}");
    assert!(fresh_ten_years.clean > 300, "fresh, 10 years: {fresh_ten_years:?}");
    assert!(fresh_ten_years.heavily_corrected < 50, "fresh, 10 years: {fresh_ten_years:?}");

    let double_one_month = tally_after_retention(2 * ENDURANCE, 30 * NANOS_PER_DAY);
    let double_one_year = tally_after_retention(2 * ENDURANCE, NANOS_PER_YEAR);
    assert!(double_one_month.uncorrectable < 50, "2x, 1 month: {double_one_month:?}");
    assert!(double_one_year.uncorrectable > 700, "2x, 1 year: {double_one_year:?}");
}

// Checks that retention age is the shelf time since the block's first program: data
// programmed after the device was aged is young, and a page added later to an old block
// shares the block's age (the documented simplification).
#[test]
fn retention_counts_from_the_first_program_of_the_block() {
    let mut flash = SimFlash::create(aging_config(5)).expect("config");
    let (old, young) = (BlockAddress::new(0, 1), BlockAddress::new(0, 2));
    program(&mut flash, PageAddress::new(0, 1, 0), 1).expect("program");
    flash.advance_retention_time(2 * NANOS_PER_YEAR);
    program(&mut flash, PageAddress::new(0, 1, 1), 2).expect("program");
    let young_done_ns = program(&mut flash, PageAddress::new(0, 2, 0), 3).expect("program");
    let old_aging = flash.block_aging(old, young_done_ns).expect("aging");
    let young_aging = flash.block_aging(young, young_done_ns).expect("aging");
    assert!(old_aging.retention_age_ns > 2 * NANOS_PER_YEAR, "{old_aging:?}");
    assert_eq!(young_aging.retention_age_ns, 0, "{young_aging:?}");
    assert!(old_aging.rber > young_aging.rber);
    assert_eq!(flash.block_aging(BlockAddress::new(0, 3), 0).expect("aging").retention_age_ns, 0, "erased block");
}

// Checks read disturb: a million reads of one page of a block at rated endurance leave
// another, never-read page of the block heavily corrected; an erase (and a new program)
// resets the count, and the block reads as the wear model alone again.
#[test]
fn read_disturb_rises_with_reads_and_resets_at_erase() {
    let (mut flash, hot) = programmed_device(47, ENDURANCE);
    let block = hot.block_address();
    let cold = PageAddress::new(0, 1, 1);
    program(&mut flash, cold, 8).expect("program");
    let before = tally_reads(&mut flash, cold, 300);
    assert!(before.clean > 270, "before disturb: {before:?}");

    let geometry = flash.geometry();
    let (mut data, mut spare) =
        (vec![0u8; geometry.page_data_bytes as usize], vec![0u8; geometry.spare_bytes as usize]);
    let mut rber_after = Vec::new();
    for reads in [100_000u64, 1_000_000] {
        let done = flash.block_aging(block, 0).expect("aging").reads_since_erase;
        for _ in done..reads {
            flash.read_page(0, hot, &mut data, &mut spare).expect("read");
        }
        rber_after.push(flash.block_aging(block, 0).expect("aging"));
    }
    assert_eq!(rber_after[1].reads_since_erase, 1_000_000, "every read of the block counts, of any page");
    assert!(rber_after[0].rber > 5.0 * before_rber(&flash), "1e5 reads: {:?}", rber_after[0]);
    assert!(rber_after[1].rber > 2e-4, "1e6 reads: {:?}", rber_after[1]);

    let disturbed = tally_reads(&mut flash, cold, 300);
    assert!(disturbed.corrected > 250, "after 1e6 reads: {disturbed:?}");
    assert!(disturbed.heavily_corrected > 40, "after 1e6 reads: {disturbed:?}");

    erase(&mut flash, block).expect("erase");
    assert_eq!(flash.block_aging(block, 0).expect("aging").reads_since_erase, 0);
    program(&mut flash, cold, 9).expect("program");
    let after_erase = tally_reads(&mut flash, cold, 300);
    assert!(after_erase.clean > 270, "after erase: {after_erase:?}");
    assert_eq!(after_erase.uncorrectable, 0);
}

/// The wear RBER of block 1 at rated endurance (no aging term).
fn before_rber(flash: &SimFlash) -> f64 {
    flash.config().bit_errors.rber(ENDURANCE, flash.config().endurance_cycles)
}

// Checks that an erase resets retention: a block aged 3 years at rated endurance reads mostly
// uncorrectable; erased and reprogrammed, it reads as new data.
#[test]
fn erase_resets_retention() {
    let (mut flash, page) = programmed_device(59, ENDURANCE);
    flash.advance_retention_time(3 * NANOS_PER_YEAR);
    assert!(tally_reads(&mut flash, page, 200).uncorrectable > 100);
    erase(&mut flash, page.block_address()).expect("erase");
    program(&mut flash, page, 7).expect("program");
    let renewed = tally_reads(&mut flash, page, 200);
    assert_eq!(renewed.uncorrectable, 0, "{renewed:?}");
    assert!(renewed.clean > 180, "{renewed:?}");
}

// Checks that aging a device moves only the retention clock: chip clocks, counters and the
// seeded stream are untouched (a device aged by zero and one aged by a century agree on
// everything except what the aging model samples, which is off here).
#[test]
fn advancing_retention_time_moves_no_chip_clock() {
    let mut aged = SimFlash::create(wear_config(3)).expect("config");
    let mut unaged = SimFlash::create(wear_config(3)).expect("config");
    for flash in [&mut aged, &mut unaged] {
        program(flash, PageAddress::new(0, 1, 0), 1).expect("program");
    }
    aged.advance_retention_time(100 * NANOS_PER_YEAR);
    assert_eq!(aged.retention_offset_ns(), 100 * NANOS_PER_YEAR);
    assert_eq!(aged.busy_until_ns(ChipIndex(0)), unaged.busy_until_ns(ChipIndex(0)));
    assert_eq!(aged.counters(), unaged.counters());
    let statuses = |flash: &mut SimFlash| tally_reads(flash, PageAddress::new(0, 1, 0), 50);
    assert_eq!(statuses(&mut aged), statuses(&mut unaged));
    aged.advance_retention_time(u64::MAX);
    assert_eq!(aged.retention_offset_ns(), u64::MAX, "the clock saturates");
}

/// A mixed run with the aging model on: programs, shelf time, reads of worn blocks (statuses
/// and data), an erase and more reads.
fn aged_run(flash: &mut SimFlash) -> Vec<(ReadStatus, Vec<u8>)> {
    let mut outcomes = Vec::new();
    for block in 1..=4 {
        flash.set_erase_count(BlockAddress::new(0, block), block * ENDURANCE / 2).expect("age");
        for page_index in 0..3 {
            program(flash, PageAddress::new(0, block, page_index), block + page_index).expect("program");
        }
    }
    for (step, shelf_ns) in [NANOS_PER_YEAR / 4, NANOS_PER_YEAR / 2, NANOS_PER_YEAR].into_iter().enumerate() {
        flash.advance_retention_time(shelf_ns);
        for round in 0..60u32 {
            let page = PageAddress::new(0, 1 + round % 4, round % 3);
            let (status, data, _) = read(flash, page).expect("read");
            outcomes.push((status, data));
        }
        if step == 1 {
            erase(flash, BlockAddress::new(0, 2)).expect("erase");
            program(flash, PageAddress::new(0, 2, 0), 99).expect("program");
        }
    }
    outcomes
}

// Checks determinism with the model on: the same seed and operations give the same statuses
// and bytes, a clone replays the same future, and another seed differs.
#[test]
fn aging_is_deterministic() {
    let mut first = SimFlash::create(aging_config(77)).expect("config");
    let mut second = SimFlash::create(aging_config(77)).expect("config");
    let trace = aged_run(&mut first);
    assert_eq!(trace, aged_run(&mut second));
    let statuses: Vec<ReadStatus> = trace.iter().map(|(status, _)| *status).collect();
    assert!(statuses.iter().any(|s| matches!(s, ReadStatus::Corrected { max_per_sector: 3.., .. })), "{statuses:?}");
    assert!(statuses.contains(&ReadStatus::Uncorrectable), "{statuses:?}");

    let snapshot = first.clone();
    let mut replay = snapshot.clone();
    first.advance_retention_time(NANOS_PER_YEAR);
    replay.advance_retention_time(NANOS_PER_YEAR);
    let page = PageAddress::new(0, 3, 1);
    assert_eq!(tally_reads(&mut first, page, 100), tally_reads(&mut replay, page, 100));

    let mut other = SimFlash::create(aging_config(78)).expect("config");
    assert_ne!(aged_run(&mut other), trace);
}

// Checks the negligible floor: with the model on, a short run on worn blocks (each read at
// most 3 times, within a second of its program) samples exactly what the same run samples
// with the model off, although the wear errors alone make many of its reads corrected.
#[test]
fn enabled_but_unaged_device_samples_as_without_the_model() {
    let run = |config: SimConfig| {
        let mut config = config;
        config.geometry = Profile::Mlc.geometry(64);
        let mut flash = SimFlash::create(config).expect("config");
        let mut statuses = Vec::new();
        for block in 1..64 {
            flash.set_erase_count(BlockAddress::new(0, block), 2 * ENDURANCE).expect("age");
            let page = PageAddress::new(0, block, 0);
            program(&mut flash, page, block).expect("program");
            for _ in 0..3 {
                statuses.push(read(&mut flash, page).expect("read").0);
            }
        }
        statuses
    };
    let without = run(wear_config(11));
    let with = run(aging_config(11));
    assert_eq!(with, without);
    assert!(without.iter().filter(|s| matches!(s, ReadStatus::Corrected { .. })).count() > 50, "{without:?}");
}
