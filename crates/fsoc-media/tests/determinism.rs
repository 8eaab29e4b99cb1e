//! Determinism: the same seed and operation sequence give identical counters, contents and
//! statuses, also with wear errors, random failures and power cuts; clones replay identically.

mod common;

use fsoc_media::ecc::BitErrorModel;
use fsoc_media::faults::FactoryBadBlocks;
use fsoc_media::rng::SeededRng;
use fsoc_media::FlashStats;
use fsoc_media::{
    BlockAddress, Flash, FlashCounters, NandError, PageAddress, Profile, ReadStatus, SimConfig, SimFlash,
};

/// One operation's observable result: completion time, read status (reads only), data read.
type Outcome = Result<(u64, Option<ReadStatus>, Vec<u8>), NandError>;

/// Everything observable from one run: each operation's result, then the counters.
#[derive(Debug, PartialEq)]
struct Trace {
    outcomes: Vec<Outcome>,
    counters: FlashCounters,
}

fn stressed_config(seed: u64) -> SimConfig {
    let mut config = SimConfig::new(Profile::Mlc, 2, 16, seed);
    config.bit_errors = BitErrorModel::default();
    config.faults.factory_bad_blocks = FactoryBadBlocks::CountPerChip(2);
    config.faults.program_failure_ppm = 2_000;
    config.faults.erase_failure_ppm = 5_000;
    config.faults.paired_page_hazard = true;
    config.faults.unstable_bits_hazard = true;
    config
}

/// Ages every block to 3x endurance (so reads see many bit errors), then runs a workload of
/// programs, reads and erases chosen by `workload_seed`, with a power cut 10 state-changing operations into
/// every window of 97 steps.
fn run(flash: &mut SimFlash, workload_seed: u64, operation_count: u32) -> Trace {
    for chip in 0..2 {
        for block in 0..16 {
            flash.set_erase_count(BlockAddress::new(chip, block), 30_000).expect("age");
        }
    }
    let mut workload = SeededRng::new(workload_seed);
    let mut next_page = [[0u32; 16]; 2];
    let mut outcomes = Vec::new();
    let mut time_ns = 0;
    let (mut data, mut spare) = (vec![0u8; 2048], vec![0u8; 64]);
    for step in 0..operation_count {
        if step % 97 == 0 && step > 0 {
            flash.restore_power();
            flash.schedule_power_cut(10);
        }
        let chip = workload.below(2) as u32;
        let block = workload.below(16) as u32;
        let slot = &mut next_page[chip as usize][block as usize];
        let outcome = match workload.below(10) {
            0 => {
                *slot = 0;
                flash.erase_block(time_ns, BlockAddress::new(chip, block)).map(|done| (done.done_ns, None, Vec::new()))
            }
            1..=4 if *slot < 64 => {
                data.fill(step as u8);
                let page = PageAddress::new(chip, block, *slot);
                *slot += 1;
                flash.program_page(time_ns, page, &data, &spare).map(|done| (done.done_ns, None, Vec::new()))
            }
            _ => {
                let page = PageAddress::new(chip, block, workload.below(64) as u32);
                flash
                    .read_page(time_ns, page, &mut data, &mut spare)
                    .map(|done| (done.done_ns, Some(done.value), data.clone()))
            }
        };
        if let Ok((done_ns, _, _)) = &outcome {
            time_ns = time_ns.max(*done_ns / 2);
        }
        outcomes.push(outcome);
    }
    Trace { outcomes, counters: flash.counters().clone() }
}

// Checks that two simulators with the same seed, run through the same stressed workload,
// agree on every result, byte and counter, and that the workload really hit the interesting
// cases (corrected and uncorrectable reads, power cuts, failures).
#[test]
fn same_seed_same_everything() {
    let mut first = SimFlash::create(stressed_config(42)).expect("config");
    let mut second = SimFlash::create(stressed_config(42)).expect("config");
    let trace = run(&mut first, 7, 3000);
    assert_eq!(trace, run(&mut second, 7, 3000));
    let statuses: Vec<ReadStatus> = trace.outcomes.iter().filter_map(|o| o.as_ref().ok().and_then(|r| r.1)).collect();
    assert!(statuses.iter().any(|s| matches!(s, ReadStatus::Corrected { .. })), "no corrected reads");
    assert!(statuses.contains(&ReadStatus::Uncorrectable), "no uncorrectable reads");
    assert!(trace.outcomes.contains(&Err(NandError::PowerLost)), "no power cuts");
    assert!(
        trace.outcomes.iter().any(|o| matches!(o, Err(NandError::OperationFailed { .. } | NandError::WornOut { .. }))),
        "no failures"
    );
}

// Checks that a different seed gives a different run (the seed really drives the faults).
#[test]
fn different_seed_differs() {
    let mut first = SimFlash::create(stressed_config(42)).expect("config");
    let mut second = SimFlash::create(stressed_config(43)).expect("config");
    assert_ne!(run(&mut first, 7, 500), run(&mut second, 7, 500));
}

// Checks that a clone is a full snapshot: the clone and the original replay the same future,
// and operations on one do not leak into the other.
#[test]
fn clone_snapshots_the_device() {
    let mut original = SimFlash::create(stressed_config(9)).expect("config");
    run(&mut original, 1, 400);
    original.restore_power();
    let mut snapshot = original.clone();
    assert_eq!(run(&mut original, 2, 400), run(&mut snapshot, 2, 400));
    original.restore_power();
    snapshot.restore_power();
    let _ = original.erase_block(0, BlockAddress::new(0, 0));
    assert_ne!(original.counters(), snapshot.counters());
}
