//! Virtual time and accounting: exact completion times from the profile numbers, per-chip
//! overlap, counters, energy.

mod common;

use common::{pattern, quiet_sim};
use fsoc_media::energy::EnergyModel;
use fsoc_media::FlashStats;
use fsoc_media::{BlockAddress, ChipIndex, Flash, OperationKind, PageAddress, Profile};

/// SLC: program 200 us, read 25 us, erase 1.5 ms; 2048 + 64 bytes at 25 ns/byte = 52.8 us.
const SLC_TRANSFER_NS: u64 = (2048 + 64) * 25;
const SLC_PROGRAM_NS: u64 = 200_000 + SLC_TRANSFER_NS;
const SLC_READ_NS: u64 = 25_000 + SLC_TRANSFER_NS;
const SLC_ERASE_NS: u64 = 1_500_000;

// Checks that 4 programs issued at t = 0 on one chip serialize: the last completes at 4x.
#[test]
fn programs_on_one_chip_serialize() {
    let mut flash = quiet_sim(Profile::Slc, 4, 8);
    let (data, spare) = pattern(&flash, 1);
    let mut done = Vec::new();
    for page_index in 0..4 {
        let page = PageAddress::new(0, 0, page_index);
        done.push(flash.program_page(0, page, &data, &spare).expect("program").done_ns);
    }
    assert_eq!(done, vec![SLC_PROGRAM_NS, 2 * SLC_PROGRAM_NS, 3 * SLC_PROGRAM_NS, 4 * SLC_PROGRAM_NS]);
    assert_eq!(flash.busy_until_ns(ChipIndex(0)), 4 * SLC_PROGRAM_NS);
    assert_eq!(flash.busy_until_ns(ChipIndex(1)), 0);
    assert_eq!(flash.all_done_ns(), 4 * SLC_PROGRAM_NS);
}

// Checks that 4 programs issued at t = 0 on 4 chips overlap: all complete at 1x.
#[test]
fn programs_on_four_chips_overlap() {
    let mut flash = quiet_sim(Profile::Slc, 4, 8);
    let (data, spare) = pattern(&flash, 1);
    for chip in 0..4 {
        let done = flash.program_page(0, PageAddress::new(chip, 0, 0), &data, &spare).expect("program");
        assert_eq!(done.done_ns, SLC_PROGRAM_NS, "chip {chip}");
    }
    assert_eq!(flash.all_done_ns(), SLC_PROGRAM_NS);
}

// Checks reads and erases, an issue time later than busy_until (the chip idles until then),
// and an issue time earlier than busy_until (the operation queues).
#[test]
fn reads_erases_and_issue_times() {
    let mut flash = quiet_sim(Profile::Slc, 1, 8);
    let (mut data, mut spare) = pattern(&flash, 1);
    let page = PageAddress::new(0, 1, 0);
    let read = flash.read_page(1_000, page, &mut data, &mut spare).expect("read");
    assert_eq!(read.done_ns, 1_000 + SLC_READ_NS);
    let erase = flash.erase_block(0, BlockAddress::new(0, 1)).expect("erase");
    assert_eq!(erase.done_ns, 1_000 + SLC_READ_NS + SLC_ERASE_NS);
    let late = flash.read_page(10_000_000, page, &mut data, &mut spare).expect("read");
    assert_eq!(late.done_ns, 10_000_000 + SLC_READ_NS);
    let busy_ns = flash.counters().chip(ChipIndex(0)).expect("chip 0").busy_ns;
    assert_eq!(busy_ns, 2 * SLC_READ_NS + SLC_ERASE_NS, "busy time excludes idle gaps");
}

// Checks the 8 KiB MLC profile's numbers: program 1300 us + 8640 bytes x 25 ns.
#[test]
fn mlc8k_program_time() {
    let mut flash = quiet_sim(Profile::Mlc8k, 1, 4);
    let (data, spare) = pattern(&flash, 1);
    let done = flash.program_page(0, PageAddress::new(0, 0, 0), &data, &spare).expect("program");
    assert_eq!(done.done_ns, 1_300_000 + (8192 + 448) * 25);
}

// Checks per-chip and per-block counters, byte counts, reset, and that erase counts survive
// a counter reset.
#[test]
fn counters_track_and_reset() {
    let mut flash = quiet_sim(Profile::Slc, 2, 8);
    let (mut data, mut spare) = pattern(&flash, 1);
    let block = BlockAddress::new(1, 3);
    flash.erase_block(0, block).expect("erase");
    for page_index in 0..3 {
        flash.program_page(0, PageAddress::new(1, 3, page_index), &data, &spare).expect("program");
    }
    flash.read_page(0, PageAddress::new(1, 3, 0), &mut data, &mut spare).expect("read");
    let chip = flash.counters().chip(ChipIndex(1)).expect("chip 1").clone();
    assert_eq!((chip.reads, chip.programs, chip.erases), (1, 3, 1));
    assert_eq!((chip.bytes_read, chip.bytes_programmed), (2112, 3 * 2112));
    assert_eq!(chip.busy_ns, SLC_ERASE_NS + 3 * SLC_PROGRAM_NS + SLC_READ_NS);
    let block_counters = *flash.counters().block(block).expect("block");
    assert_eq!((block_counters.reads, block_counters.programs, block_counters.erases), (1, 3, 1));
    assert_eq!(flash.counters().chip(ChipIndex(0)).expect("chip 0").programs, 0);
    flash.reset_counters();
    assert_eq!(flash.counters().totals(), Default::default());
    assert_eq!(flash.erase_count(block), Ok(1), "wear survives a counter reset");
}

// Checks energy: nonzero, equal to seed 004's per-operation constants times the counts, and
// proportional to the number of operations.
#[test]
fn energy_is_per_operation_constant_times_count() {
    let mut flash = quiet_sim(Profile::Slc, 1, 8);
    let model = EnergyModel::default();
    let (timing, geometry) = (flash.timing(), flash.geometry());
    let program_nj = model.operation_energy_nj(OperationKind::Program, &timing, &geometry);
    let read_nj = model.operation_energy_nj(OperationKind::Read, &timing, &geometry);
    let erase_nj = model.operation_energy_nj(OperationKind::Erase, &timing, &geometry);
    assert!(program_nj > 0 && read_nj > 0 && erase_nj > 0);
    let (mut data, mut spare) = pattern(&flash, 1);
    for page_index in 0..4 {
        flash.program_page(0, PageAddress::new(0, 0, page_index), &data, &spare).expect("program");
    }
    let four_programs = flash.counters().totals().energy_nj;
    assert_eq!(four_programs, 4 * program_nj);
    for page_index in 0..4 {
        flash.program_page(0, PageAddress::new(0, 1, page_index), &data, &spare).expect("program");
    }
    assert_eq!(flash.counters().totals().energy_nj, 2 * four_programs, "energy proportional to work");
    flash.read_page(0, PageAddress::new(0, 0, 0), &mut data, &mut spare).expect("read");
    flash.erase_block(0, BlockAddress::new(0, 0)).expect("erase");
    assert_eq!(flash.counters().totals().energy_nj, 8 * program_nj + read_nj + erase_nj);
}
