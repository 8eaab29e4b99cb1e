//! Power cuts (torn programs, interrupted erases), the unstable-bits and paired-page hazards,
//! and factory bad blocks.

mod common;

use common::{erase, pattern, program, quiet_config, read};
use fsoc_media::faults::FactoryBadBlocks;
use fsoc_media::store::PageState;
use fsoc_media::{BlockAddress, Flash, NandError, PageAddress, Profile, ReadStatus, SimConfig, SimFlash};

fn sim_with(profile: Profile, configure: impl FnOnce(&mut SimConfig)) -> SimFlash {
    let mut config = quiet_config(profile, 1, 8, 11);
    configure(&mut config);
    SimFlash::create(config).expect("config")
}

// Checks the cut-at-k rule on programs: with k = 2, programs 1 and 2 complete, program 3 is
// torn and returns PowerLost, later operations fail until restore; then the torn page reads
// uncorrectable with wrong data, cannot be programmed again, and later pages can.
#[test]
fn cut_during_program_tears_the_page() {
    let mut flash = sim_with(Profile::Slc, |config| config.faults.power_cut_after_operations = Some(2));
    let page = |index| PageAddress::new(0, 1, index);
    program(&mut flash, page(0), 0).expect("op 1");
    program(&mut flash, page(1), 1).expect("op 2");
    assert_eq!(program(&mut flash, page(2), 2), Err(NandError::PowerLost));
    assert!(flash.power_is_lost());
    assert_eq!(flash.operations_count(), 3);
    assert_eq!(read(&mut flash, page(0)).map(|r| r.0), Err(NandError::PowerLost));
    assert_eq!(program(&mut flash, page(3), 3), Err(NandError::PowerLost));
    flash.restore_power();

    assert_eq!(read(&mut flash, page(0)).expect("read").0, ReadStatus::Clean);
    assert_eq!(read(&mut flash, page(1)).expect("read").0, ReadStatus::Clean);
    let (status, data, _) = read(&mut flash, page(2)).expect("read torn");
    assert_eq!(status, ReadStatus::Uncorrectable);
    let intended = pattern(&flash, 2).0;
    assert_ne!(data, intended);
    // A torn program only fails to clear bits: every 0 read back was meant to be 0.
    assert!(data.iter().zip(&intended).all(|(got, want)| got & want == *want), "torn data set bits wrongly");
    assert_eq!(flash.page_state(page(2)), Ok(PageState::Torn));
    assert_eq!(program(&mut flash, page(2), 2), Err(NandError::NotErased { page: page(2) }));
    program(&mut flash, page(3), 3).expect("later page after restore");
    erase(&mut flash, BlockAddress::new(0, 1)).expect("erase");
    program(&mut flash, page(2), 2).expect("torn page programmable after erase");
}

// Checks the "mask happens to be empty or full" case: a page meant to clear a single bit
// either reads back as intended (Clean) or as erased after a torn program, never as an
// uncorrectable mix.
#[test]
fn tear_of_a_nearly_erased_page_is_all_or_nothing() {
    for seed in 0..8 {
        let mut flash = sim_with(Profile::Slc, |config| {
            config.seed = seed;
            config.faults.power_cut_after_operations = Some(0);
        });
        let page = PageAddress::new(0, 1, 0);
        let mut data = vec![0xFFu8; 2048];
        data[100] = 0xFE;
        assert_eq!(flash.program_page(0, page, &data, &[0xFF; 64]), Err(NandError::PowerLost));
        flash.restore_power();
        let (status, read_data, _) = read(&mut flash, page).expect("read");
        match status {
            ReadStatus::Clean => assert_eq!(read_data, data),
            ReadStatus::Erased => assert!(read_data.iter().all(|&byte| byte == 0xFF)),
            other => panic!("seed {seed}: torn single-bit page read {other:?}"),
        }
    }
}

/// Programs every page of block 1 with pattern(page index) and returns the flash.
fn full_block(flash: &mut SimFlash) {
    for page_index in 0..flash.geometry().pages_per_block {
        program(flash, PageAddress::new(0, 1, page_index), page_index).expect("fill");
    }
}

// Checks an interrupted erase: the block is neither intact nor fully erased, its erase count
// rose, programs are refused until a complete erase, after which it works normally.
#[test]
fn cut_during_erase_leaves_a_partially_erased_block() {
    let mut flash = sim_with(Profile::Slc, |_| {});
    full_block(&mut flash);
    let block = BlockAddress::new(0, 1);
    flash.schedule_power_cut(0);
    assert_eq!(erase(&mut flash, block), Err(NandError::PowerLost));
    flash.restore_power();
    assert_eq!(flash.erase_count(block), Ok(1));
    let mut intact_pages = 0;
    let mut erased_pages = 0;
    let mut garbage_pages = 0;
    for page_index in 0..64 {
        let (status, data, _) = read(&mut flash, PageAddress::new(0, 1, page_index)).expect("read");
        match status {
            ReadStatus::Erased => erased_pages += 1,
            ReadStatus::Uncorrectable => garbage_pages += 1,
            _ => {}
        }
        if data == pattern(&flash, page_index).0 {
            intact_pages += 1;
        }
    }
    assert_eq!(intact_pages, 0, "no page survives an interrupted erase unchanged");
    assert!(erased_pages > 0 && garbage_pages > 0, "erased {erased_pages}, garbage {garbage_pages}");
    assert_eq!(erased_pages + garbage_pages, 64);
    let first = PageAddress::new(0, 1, 0);
    assert_eq!(program(&mut flash, first, 0), Err(NandError::NotErased { page: first }));
    erase(&mut flash, block).expect("full erase");
    assert_eq!(flash.erase_count(block), Ok(2));
    program(&mut flash, first, 0).expect("program after full erase");
}

// Checks hazard (a) enabled: the torn page reads back as intended once after restore, then
// uncorrectable.
#[test]
fn unstable_bits_hazard_reads_correct_once() {
    let mut flash = sim_with(Profile::Slc, |config| {
        config.faults.unstable_bits_hazard = true;
        config.faults.power_cut_after_operations = Some(0);
    });
    let page = PageAddress::new(0, 1, 0);
    assert_eq!(program(&mut flash, page, 5), Err(NandError::PowerLost));
    flash.restore_power();
    let (first_status, first_data, _) = read(&mut flash, page).expect("first read");
    assert_eq!((first_status, first_data), (ReadStatus::Clean, pattern(&flash, 5).0));
    assert_eq!(read(&mut flash, page).expect("second read").0, ReadStatus::Uncorrectable);
    assert_eq!(program(&mut flash, page, 5), Err(NandError::NotErased { page }), "still torn underneath");
}

// Checks hazard (a) disabled (the default): the first read after restore already shows the tear.
#[test]
fn without_unstable_bits_hazard_the_first_read_is_torn() {
    let mut flash = sim_with(Profile::Slc, |config| config.faults.power_cut_after_operations = Some(0));
    let page = PageAddress::new(0, 1, 0);
    assert_eq!(program(&mut flash, page, 5), Err(NandError::PowerLost));
    flash.restore_power();
    assert_eq!(read(&mut flash, page).expect("read").0, ReadStatus::Uncorrectable);
}

/// Programs pages 0..=2 of block 1 on MLC (paired distance 2), cuts the program of page 3,
/// and returns the statuses of pages 0..=2 after restore.
fn paired_page_statuses(hazard: bool) -> Vec<ReadStatus> {
    let mut flash = sim_with(Profile::Mlc, |config| config.faults.paired_page_hazard = hazard);
    for page_index in 0..3 {
        program(&mut flash, PageAddress::new(0, 1, page_index), page_index).expect("program");
    }
    flash.schedule_power_cut(0);
    assert_eq!(program(&mut flash, PageAddress::new(0, 1, 3), 3), Err(NandError::PowerLost));
    flash.restore_power();
    (0..3).map(|page_index| read(&mut flash, PageAddress::new(0, 1, page_index)).expect("read").0).collect()
}

// Checks hazard (b): with it, a cut while programming page 3 destroys its paired page 1 beyond
// ECC; without it, earlier pages are untouched.
#[test]
fn paired_page_hazard_corrupts_the_lower_page_only_when_enabled() {
    assert_eq!(paired_page_statuses(true), vec![ReadStatus::Clean, ReadStatus::Uncorrectable, ReadStatus::Clean]);
    assert_eq!(paired_page_statuses(false), vec![ReadStatus::Clean; 3]);
}

// Checks factory bad blocks: an exact count per chip, never block 0, same seed same blocks.
#[test]
fn factory_bad_blocks_are_seeded_and_spare_block_zero() {
    let bad_blocks = |seed: u64| -> Vec<BlockAddress> {
        let mut config = quiet_config(Profile::Slc, 2, 64, seed);
        config.faults.factory_bad_blocks = FactoryBadBlocks::CountPerChip(5);
        let flash = SimFlash::create(config).expect("config");
        (0..2)
            .flat_map(|chip| (0..64).map(move |block| BlockAddress::new(chip, block)))
            .filter(|&block| flash.is_bad_block(block).expect("in range"))
            .collect()
    };
    let first = bad_blocks(3);
    assert_eq!(first.len(), 10);
    assert!(first.iter().all(|block| block.block.0 != 0), "block 0 must be good: {first:?}");
    assert_eq!(bad_blocks(3), first);
    assert_ne!(bad_blocks(4), first);

    let mut config = quiet_config(Profile::Slc, 1, 1000, 3);
    config.faults.factory_bad_blocks = FactoryBadBlocks::PartsPerMillion(1_000_000);
    let flash = SimFlash::create(config).expect("config");
    assert_eq!(flash.is_bad_block(BlockAddress::new(0, 0)), Ok(false));
    assert_eq!(flash.is_bad_block(BlockAddress::new(0, 999)), Ok(true));
}

// Checks that a random erase failure status names the block and leaves it unprogrammable.
#[test]
fn erase_failure_status_is_operation_failed() {
    let mut flash = sim_with(Profile::Slc, |config| config.faults.erase_failure_ppm = 1_000_000);
    let block = BlockAddress::new(0, 2);
    assert_eq!(
        erase(&mut flash, block),
        Err(NandError::OperationFailed { kind: fsoc_media::OperationKind::Erase, block })
    );
    let page = PageAddress::new(0, 2, 0);
    assert_eq!(program(&mut flash, page, 1), Err(NandError::NotErased { page }));
}

// Checks grown bad-block injection: the scheduled operation (the third here) reports status
// fail once, as a program (page left torn) and then as an erase (block left unerased); the
// operations around it succeed.
#[test]
fn a_scheduled_failure_fails_exactly_one_operation() {
    let mut flash = sim_with(Profile::Slc, |_| {});
    let page = |index| PageAddress::new(0, 1, index);
    flash.schedule_operation_failure(2);
    program(&mut flash, page(0), 0).expect("op 1");
    program(&mut flash, page(1), 1).expect("op 2");
    assert!(matches!(program(&mut flash, page(2), 2), Err(NandError::OperationFailed { .. })));
    assert_eq!(flash.page_state(page(2)), Ok(PageState::Torn));
    program(&mut flash, page(3), 3).expect("op 4: the failure happens once");
    flash.schedule_operation_failure(0);
    assert!(matches!(erase(&mut flash, BlockAddress::new(0, 1)), Err(NandError::OperationFailed { .. })));
    assert!(matches!(program(&mut flash, page(4), 4), Err(NandError::NotErased { .. })), "left unerased");
    erase(&mut flash, BlockAddress::new(0, 1)).expect("a later erase succeeds");
    program(&mut flash, page(0), 0).expect("and the block programs again");
}
