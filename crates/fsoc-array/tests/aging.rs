//! Retention and read disturb on chip files: `ThreadedFlash` ages exactly as the RAM simulator
//! does (its pass-throughs reach the same model), and an array reopened from its files starts
//! its retention clock and read counts afresh (they are RAM state, not part of the format).

use fsoc_array::ThreadedFlash;
use fsoc_media::aging::NANOS_PER_YEAR;
use fsoc_media::store::PageStore;
use fsoc_media::{AgingModel, BlockAddress, Flash, PageAddress, Profile, ReadStatus, SimConfig, SimFlash};

/// The block the tests age: block 1 of chip 1.
fn block() -> BlockAddress {
    BlockAddress::new(1, 1)
}

fn config() -> SimConfig {
    SimConfig { aging: AgingModel::published(), ..SimConfig::new(Profile::Mlc, 2, 8, 0xA6E1) }
}

/// Ages `block()` to rated endurance and programs its first two pages.
fn prepare<S: PageStore>(sim: &mut SimFlash<S>) {
    sim.set_erase_count(block(), sim.config().endurance_cycles).expect("age");
    let geometry = sim.geometry();
    let data = vec![0x5A; geometry.page_data_bytes as usize];
    let spare = vec![0xA5; geometry.spare_bytes as usize];
    for page_index in 0..2 {
        sim.program_page(0, PageAddress::new(1, 1, page_index), &data, &spare).expect("program");
    }
}

/// Reads both pages of `block()` `reads` times in turn, issued at t = 0.
fn statuses(flash: &impl Flash, reads: u32) -> Vec<ReadStatus> {
    let geometry = flash.geometry();
    let mut data = vec![0u8; geometry.page_data_bytes as usize];
    let mut spare = vec![0u8; geometry.spare_bytes as usize];
    (0..reads)
        .map(|read| {
            let page = PageAddress::new(1, 1, read % 2);
            flash.read_page(0, page, &mut data, &mut spare).expect("read").value
        })
        .collect()
}

fn uncorrectable(statuses: &[ReadStatus]) -> usize {
    statuses.iter().filter(|&&status| status == ReadStatus::Uncorrectable).count()
}

// Checks that 3 years of shelf time through `ThreadedFlash::advance_retention_time` make a
// block at rated endurance mostly uncorrectable, with the very statuses the RAM simulator
// gives; and that reopening the chip files forgets the shelf time and the read count (and the
// model, which the file headers do not hold) while the wear persists.
#[test]
fn threaded_array_ages_as_the_simulator_and_reopens_afresh() {
    let directory = tempfile::tempdir().expect("tempdir");
    let base = directory.path().join("array");
    let mut threaded = ThreadedFlash::create(&base, config()).expect("create");
    let mut simulated = SimFlash::create(config()).expect("simulator");
    prepare(threaded.sim_mut());
    prepare(&mut simulated);
    threaded.advance_retention_time(3 * NANOS_PER_YEAR);
    simulated.advance_retention_time(3 * NANOS_PER_YEAR);
    let aged = statuses(&threaded, 200);
    assert_eq!(aged, statuses(&simulated, 200));
    assert!(uncorrectable(&aged) > 100, "{aged:?}");
    assert_eq!(threaded.sim().block_aging(block(), 0).expect("aging").reads_since_erase, 200);
    threaded.close().expect("close");

    let mut reopened = ThreadedFlash::open(&base).expect("reopen");
    assert_eq!(reopened.config().aging, AgingModel::disabled(), "the headers hold no aging model");
    reopened.set_aging_model(AgingModel::published());
    assert_eq!(reopened.sim().retention_offset_ns(), 0);
    let aging = reopened.sim().block_aging(block(), 0).expect("aging");
    assert_eq!((aging.retention_age_ns, aging.reads_since_erase), (0, 0), "{aging:?}");
    assert_eq!(reopened.erase_count(block()).expect("erase count"), config().endurance_cycles);
    let fresh_clock = statuses(&reopened, 200);
    assert_eq!(uncorrectable(&fresh_clock), 0, "{fresh_clock:?}");
    reopened.advance_retention_time(3 * NANOS_PER_YEAR);
    assert!(uncorrectable(&statuses(&reopened, 200)) > 100, "aged again after reopening");
    reopened.close().expect("close");
}
