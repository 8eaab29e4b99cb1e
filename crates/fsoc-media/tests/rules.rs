//! NAND rules: every violation is rejected with its typed error and has no effect.

mod common;

use common::{erase, pattern, program, quiet_config, quiet_sim, read};
use fsoc_media::FlashStats;
use fsoc_media::{
    BlockAddress, ChipIndex, FaultConfig, Flash, NandError, OperationKind, PageAddress, Profile, ReadStatus, SimFlash,
};

#[test]
fn erased_page_reads_all_ones_with_status_erased() {
    let mut flash = quiet_sim(Profile::Slc, 1, 8);
    let (status, data, spare) = read(&mut flash, PageAddress::new(0, 3, 5)).expect("read");
    assert_eq!(status, ReadStatus::Erased);
    assert!(data.iter().chain(&spare).all(|&byte| byte == 0xFF));
}

#[test]
fn program_then_read_returns_the_data_clean() {
    let mut flash = quiet_sim(Profile::Mlc8k, 2, 4);
    let page = PageAddress::new(1, 2, 0);
    program(&mut flash, page, 9).expect("program");
    let (status, data, spare) = read(&mut flash, page).expect("read");
    assert_eq!(status, ReadStatus::Clean);
    assert_eq!((data, spare), pattern(&flash, 9));
}

// Checks that programming a page twice without an erase fails with NotErased, and that the
// failed attempt leaves the first contents intact.
#[test]
fn reprogram_without_erase_is_not_erased() {
    let mut flash = quiet_sim(Profile::Slc, 1, 8);
    let page = PageAddress::new(0, 1, 0);
    program(&mut flash, page, 1).expect("first program");
    assert_eq!(program(&mut flash, page, 2), Err(NandError::NotErased { page }));
    assert_eq!(read(&mut flash, page).expect("read").1, pattern(&flash, 1).0);
    erase(&mut flash, page.block_address()).expect("erase");
    program(&mut flash, page, 2).expect("program after erase");
}

// Checks the ascending-order rule: after page 5, pages 0..=4 of the block are refused even
// though they are erased; a higher page and pages of other blocks are fine.
#[test]
fn out_of_order_program_is_rejected() {
    let mut flash = quiet_sim(Profile::Slc, 1, 8);
    program(&mut flash, PageAddress::new(0, 1, 5), 1).expect("page 5");
    let early = PageAddress::new(0, 1, 3);
    assert_eq!(program(&mut flash, early, 1), Err(NandError::OutOfOrder { page: early, last_programmed_index: 5 }));
    program(&mut flash, PageAddress::new(0, 1, 6), 1).expect("page 6");
    program(&mut flash, PageAddress::new(0, 2, 0), 1).expect("other block");
    erase(&mut flash, BlockAddress::new(0, 1)).expect("erase");
    program(&mut flash, early, 1).expect("page 3 after erase");
}

#[test]
fn out_of_range_addresses_are_rejected() {
    let mut flash = quiet_sim(Profile::Slc, 2, 8);
    let cases = [
        (PageAddress::new(2, 0, 0), "chip", 2, 2),
        (PageAddress::new(0, 8, 0), "block", 8, 8),
        (PageAddress::new(1, 0, 64), "page", 64, 64),
    ];
    for (page, what, value, limit) in cases {
        let expected = NandError::OutOfRange { what, value, limit };
        assert_eq!(program(&mut flash, page, 1), Err(expected.clone()), "program {page:?}");
        assert_eq!(read(&mut flash, page).map(|r| r.0), Err(expected.clone()), "read {page:?}");
    }
    let block = BlockAddress::new(0, 9);
    let expected = NandError::OutOfRange { what: "block", value: 9, limit: 8 };
    assert_eq!(erase(&mut flash, block), Err(expected.clone()));
    assert_eq!(flash.erase_count(block), Err(expected.clone()));
    assert_eq!(flash.is_bad_block(block), Err(expected));
    assert_eq!(flash.counters().totals().programs, 0, "rejected operations are not counted");
}

#[test]
fn wrong_buffer_sizes_are_rejected() {
    let mut flash = quiet_sim(Profile::Slc, 1, 8);
    let page = PageAddress::new(0, 0, 0);
    let short = NandError::BufferSize { what: "page data", expected_bytes: 2048, actual_bytes: 2047 };
    assert_eq!(flash.program_page(0, page, &[0; 2047], &[0; 64]), Err(short));
    let long_spare = NandError::BufferSize { what: "spare", expected_bytes: 64, actual_bytes: 65 };
    assert_eq!(flash.program_page(0, page, &[0; 2048], &[0; 65]), Err(long_spare.clone()));
    assert_eq!(flash.read_page(0, page, &mut [0; 2048], &mut [0; 65]), Err(long_spare));
    assert_eq!(flash.busy_until_ns(ChipIndex(0)), 0, "rejected operations take no time");
}

// Checks that a block marked bad refuses programs and erases, stays readable, and keeps its
// mark (marking is idempotent).
#[test]
fn bad_block_refuses_program_and_erase() {
    let mut flash = quiet_sim(Profile::Slc, 1, 8);
    let block = BlockAddress::new(0, 4);
    program(&mut flash, PageAddress::new(0, 4, 0), 3).expect("program before marking");
    flash.mark_bad_block(block).expect("mark");
    flash.mark_bad_block(block).expect("mark again");
    assert_eq!(flash.is_bad_block(block), Ok(true));
    assert_eq!(program(&mut flash, PageAddress::new(0, 4, 1), 1), Err(NandError::BadBlock { block }));
    assert_eq!(erase(&mut flash, block), Err(NandError::BadBlock { block }));
    let (status, data, _) = read(&mut flash, PageAddress::new(0, 4, 0)).expect("reads are allowed");
    assert_eq!((status, data), (ReadStatus::Clean, pattern(&flash, 3).0));
    assert_eq!(flash.is_bad_block(BlockAddress::new(0, 5)), Ok(false));
}

// Checks wear-out: with endurance 10 and failure certain at 100% of endurance, the 11th erase
// fails with WornOut, the erase count still rises, and the block refuses programs.
#[test]
fn erase_past_endurance_is_worn_out() {
    let mut config = quiet_config(Profile::Slc, 1, 8, 5);
    config.endurance_cycles = 10;
    config.faults =
        FaultConfig { wear_out_start_percent: 100, wear_out_certain_percent: 100, ..FaultConfig::default() };
    let mut flash = SimFlash::create(config).expect("config");
    let block = BlockAddress::new(0, 2);
    for _ in 0..10 {
        erase(&mut flash, block).expect("erase within endurance");
    }
    assert_eq!(erase(&mut flash, block), Err(NandError::WornOut { block, erase_count: 11 }));
    assert_eq!(flash.erase_count(block), Ok(11));
    let page = PageAddress::new(0, 2, 0);
    assert_eq!(program(&mut flash, page, 1), Err(NandError::NotErased { page }));
}

// Checks that a failed chip refuses every operation while other chips keep working.
#[test]
fn failed_chip_refuses_everything() {
    let mut flash = quiet_sim(Profile::Slc, 2, 8);
    flash.fail_chip(ChipIndex(1)).expect("fail chip 1");
    let failed = NandError::ChipFailed { chip: ChipIndex(1) };
    assert_eq!(program(&mut flash, PageAddress::new(1, 0, 0), 1), Err(failed.clone()));
    assert_eq!(read(&mut flash, PageAddress::new(1, 0, 0)).map(|r| r.0), Err(failed.clone()));
    assert_eq!(erase(&mut flash, BlockAddress::new(1, 0)), Err(failed));
    program(&mut flash, PageAddress::new(0, 0, 0), 1).expect("chip 0 still works");
    assert!(matches!(flash.fail_chip(ChipIndex(2)), Err(NandError::OutOfRange { what: "chip", .. })));
}

// Checks that after a cut every operation fails with PowerLost until restore_power.
#[test]
fn power_lost_refuses_everything_until_restored() {
    let mut flash = quiet_sim(Profile::Slc, 1, 8);
    flash.cut_power_now();
    assert!(flash.power_is_lost());
    assert_eq!(program(&mut flash, PageAddress::new(0, 0, 0), 1), Err(NandError::PowerLost));
    assert_eq!(read(&mut flash, PageAddress::new(0, 0, 0)).map(|r| r.0), Err(NandError::PowerLost));
    assert_eq!(erase(&mut flash, BlockAddress::new(0, 0)), Err(NandError::PowerLost));
    assert_eq!(flash.mark_bad_block(BlockAddress::new(0, 1)), Err(NandError::PowerLost));
    assert_eq!(flash.operations_count(), 0, "refused operations do not count");
    flash.restore_power();
    program(&mut flash, PageAddress::new(0, 0, 0), 1).expect("program after restore");
    assert_eq!(flash.operations_count(), 1);
}

// Checks that a configured program failure rate yields OperationFailed with the block named.
#[test]
fn program_failure_status_is_operation_failed() {
    let mut config = quiet_config(Profile::Slc, 1, 8, 5);
    config.faults.program_failure_ppm = 1_000_000;
    let mut flash = SimFlash::create(config).expect("config");
    let block = BlockAddress::new(0, 1);
    assert_eq!(
        program(&mut flash, PageAddress::new(0, 1, 0), 1),
        Err(NandError::OperationFailed { kind: OperationKind::Program, block })
    );
    assert_eq!(flash.counters().totals().programs, 1, "the failed program took chip time");
}

#[test]
fn invalid_configs_are_rejected() {
    let bad_geometry = quiet_config(Profile::Slc, 1, 2, 1);
    assert!(matches!(SimFlash::create(bad_geometry), Err(NandError::InvalidConfig { .. })));
    let no_chips = quiet_config(Profile::Slc, 0, 8, 1);
    assert!(matches!(SimFlash::create(no_chips), Err(NandError::InvalidConfig { .. })));
}
