//! The core's power-cut test on a 4-chip array. Consecutive log pages go to consecutive chips
//! and programs are issued without waiting, so a cut after operation k leaves a stripe row
//! with some chips programmed and others not (and erases of a stripe's blocks half done);
//! after each cut the volume must remount, pass its chip-set check and fsck, and show the
//! last committed state or the one in flight.

use fsoc_sim::{crash_test, CrashConfig, Workload};

/// Cuts at every operation, or at a seeded sample of `max_cuts` of them.
fn check(workload: Workload, seed: u64, max_cuts: Option<u64>) {
    let config = CrashConfig { chip_count: 4, max_cuts, ..CrashConfig::small(seed) };
    let report = crash_test(workload, &config, &mut |_, _| {}).expect("crash test runs");
    eprintln!("{report:?}");
    match max_cuts {
        None => assert_eq!(report.cut_points, report.flash_operations, "{report:?}"),
        Some(max_cuts) => assert!(report.cut_points >= max_cuts.min(report.flash_operations) / 2, "{report:?}"),
    }
    assert_eq!(report.failures, 0, "{:#?}", report.failure_examples);
}

#[test]
fn power_cut_at_every_operation_overwrite() {
    check(Workload::Overwrite, 4, None);
}

#[test]
fn power_cut_at_every_operation_small_files() {
    check(Workload::SmallFiles, 5, None);
}

#[test]
fn power_cut_at_every_operation_rename_storm() {
    check(Workload::RenameStorm, 6, None);
}

#[test]
fn power_cuts_sampled_cleaner() {
    check(Workload::Cleaner, 7, Some(400));
}

#[test]
fn power_cuts_sampled_fill_and_delete() {
    check(Workload::FillAndDelete, 8, Some(400));
}

#[test]
fn power_cuts_sampled_churn() {
    check(Workload::Churn, 9, Some(400));
}

// Cuts power at each of the first operations of a synced 64 KiB overwrite on 4 chips. Some
// cut must land mid-stripe: a torn page on chip c of a stripe row whose lower chips are
// programmed and higher chips still erased. Every cut must recover to the old or the new
// contents with a clean fsck.
#[test]
fn a_cut_mid_stripe_recovers_to_old_or_new_contents() {
    use fsoc_core::{FileSystem, FsConfig, OpenFlags};
    use fsoc_media::store::PageState;
    use fsoc_media::{Flash, PageAddress, Profile, SimConfig, SimFlash};

    let chips = 4u32;
    let flags = OpenFlags { read: true, write: true, create: true, ..OpenFlags::default() };
    let (old, new) = (vec![0x11u8; 65_536], vec![0x22u8; 65_536]);
    let flash = SimFlash::create(SimConfig::new(Profile::Mlc, chips, 40, 1)).expect("simulator");
    let mut fs = FileSystem::format(flash, FsConfig::default(), 1).expect("format");
    let fd = fs.open(b"/file", flags, 0o644).expect("open");
    fs.pwrite(fd, 0, &old).expect("pwrite");
    fs.fsync_fd(fd).expect("fsync");
    let device = fs.unmount().expect("unmount");
    let mut mid_stripe_cuts = 0;
    for cut_after in 0..48u64 {
        let mut flash = device.clone();
        flash.schedule_power_cut(cut_after);
        let mut fs = FileSystem::mount(flash, FsConfig::default()).expect("mount");
        let fd = fs.open(b"/file", flags, 0o644).expect("open");
        let result = fs.pwrite(fd, 0, &new).and_then(|_| fs.fsync_fd(fd));
        let mut flash = fs.into_flash_without_commit();
        if result.is_ok() && !flash.power_is_lost() {
            break; // the overwrite completed before the cut point
        }
        let geometry = flash.geometry();
        for segment in 0..geometry.block_count {
            for row in 0..geometry.pages_per_block {
                let states: Vec<PageState> = (0..chips)
                    .map(|chip| flash.page_state(PageAddress::new(chip, segment, row)).expect("state"))
                    .collect();
                if let Some(torn) = states.iter().position(|state| *state == PageState::Torn) {
                    let below = states[..torn].iter().all(|state| *state == PageState::Programmed);
                    let above = states[torn + 1..].iter().all(|state| *state == PageState::Erased);
                    if torn > 0 && torn + 1 < chips as usize && below && above {
                        mid_stripe_cuts += 1;
                    }
                }
            }
        }
        flash.restore_power();
        let mut fs = FileSystem::mount(flash, FsConfig::default()).expect("remount after the cut");
        let report = fs.fsck(true).expect("fsck");
        assert!(report.is_clean(), "cut after {cut_after}: {:?}", report.violations);
        let fd = fs.open(b"/file", OpenFlags { read: true, ..OpenFlags::default() }, 0).expect("open");
        let contents = fs.pread(fd, 0, 65_536).expect("pread");
        assert!(contents == old || contents == new, "cut after {cut_after}: neither old nor new contents");
    }
    assert!(mid_stripe_cuts > 0, "no cut fell mid-stripe");
}
