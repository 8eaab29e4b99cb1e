//! Shared helpers for the fsoc-media integration tests: one place that builds simulators and
//! moves pages, so an API change touches one file.
#![allow(dead_code)]

use fsoc_media::ecc::BitErrorModel;
use fsoc_media::{BlockAddress, FaultConfig, Flash, NandError, PageAddress, Profile, ReadStatus, SimConfig, SimFlash};

/// A config without transient bit errors or wear-out, so outcomes depend only on the test.
pub fn quiet_config(profile: Profile, chip_count: u32, block_count: u32, seed: u64) -> SimConfig {
    let mut config = SimConfig::new(profile, chip_count, block_count, seed);
    config.faults = FaultConfig::none();
    config.bit_errors = BitErrorModel::disabled();
    config
}

pub fn quiet_sim(profile: Profile, chip_count: u32, block_count: u32) -> SimFlash {
    SimFlash::create(quiet_config(profile, chip_count, block_count, 1)).expect("valid config")
}

/// Data and spare buffers of the flash's page size, filled with a pattern derived from `seed`.
pub fn pattern(flash: &impl Flash, seed: u32) -> (Vec<u8>, Vec<u8>) {
    let geometry = flash.geometry();
    let byte = |index: usize| (index as u32).wrapping_mul(31).wrapping_add(seed.wrapping_mul(97)) as u8;
    let data = (0..geometry.page_data_bytes as usize).map(byte).collect();
    let spare = (0..geometry.spare_bytes as usize).map(|i| byte(i + 7)).collect();
    (data, spare)
}

/// Programs `page` with `pattern(seed)` issued at t = 0.
pub fn program(flash: &mut impl Flash, page: PageAddress, seed: u32) -> Result<u64, NandError> {
    let (data, spare) = pattern(flash, seed);
    flash.program_page(0, page, &data, &spare).map(|done| done.done_ns)
}

/// Reads `page` issued at t = 0 and returns status, data and spare.
pub fn read(flash: &mut impl Flash, page: PageAddress) -> Result<(ReadStatus, Vec<u8>, Vec<u8>), NandError> {
    let geometry = flash.geometry();
    let mut data = vec![0u8; geometry.page_data_bytes as usize];
    let mut spare = vec![0u8; geometry.spare_bytes as usize];
    let done = flash.read_page(0, page, &mut data, &mut spare)?;
    Ok((done.value, data, spare))
}

pub fn erase(flash: &mut impl Flash, block: BlockAddress) -> Result<u64, NandError> {
    flash.erase_block(0, block).map(|done| done.done_ns)
}

/// Reads every page of a block: statuses and whether each page equals `pattern(seed_of(page))`.
pub fn block_statuses(flash: &mut impl Flash, block: BlockAddress) -> Vec<ReadStatus> {
    (0..flash.geometry().pages_per_block)
        .map(|page_index| {
            let page = PageAddress { chip: block.chip, block: block.block, page_index };
            read(flash, page).expect("read").0
        })
        .collect()
}
