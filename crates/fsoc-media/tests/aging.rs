//! Retention loss and read disturb (`AgingModel`): errors rise with retention age and with
//! reads of a block, both faster on worn blocks; an erase resets both; outcomes stay
//! deterministic; and a device without the aging model samples exactly as before it existed.

mod common;

use common::{pattern, quiet_config};
use fsoc_media::ecc::BitErrorModel;
use fsoc_media::{BlockAddress, Flash, PageAddress, Profile, ReadStatus, SimConfig, SimFlash};

/// A config with the default wear errors and nothing else random.
fn wear_config(seed: u64) -> SimConfig {
    let mut config = quiet_config(Profile::Mlc, 1, 8, seed);
    config.bit_errors = BitErrorModel::default();
    config
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
