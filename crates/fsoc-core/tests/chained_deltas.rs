//! Chained delta commits (format version 12, docs/FORMAT.md "Chained delta commits"): on flash
//! without paired pages, a delta commit whose changes since the full commit no longer fit one
//! metaroot page may hold only the changes since the previous delta commit (its base, on an
//! earlier page of the same area); mount replays the base's payload, then the record's.
//! These tests cut the power among fsync'd creates and check every fsync'd file, count the
//! mount's reads with a chained record, damage a base, and check that MLC never chains.
mod common;
use std::collections::BTreeMap;

use common::*;
use fsoc_core::txn::ChainLink;
use fsoc_core::{FileSystem, FsConfig, FsError};
use fsoc_media::rng::SeededRng;
use fsoc_media::store::PageStore;
use fsoc_media::{FaultConfig, Flash, Profile, SimConfig, SimFlash};

fn env(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|text| text.parse().ok()).unwrap_or(default)
}

fn slc(blocks: u32, seed: u64) -> FileSystem<SimFlash> {
    let mut config = SimConfig::new(Profile::Slc, 1, blocks, seed);
    config.faults = FaultConfig::none();
    FileSystem::format(SimFlash::create(config).expect("simulator"), FsConfig::default(), seed).expect("format")
}

/// Random bytes, 100 B to 4 KiB of them (as `fsoc bench mtd`'s small files).
fn small_file(rng: &mut SeededRng) -> Vec<u8> {
    let size = rng.range(100, 4096);
    contents(rng, size)
}

fn contents(rng: &mut SeededRng, size: u64) -> Vec<u8> {
    (0..size).map(|_| rng.next_u64() as u8).collect()
}

/// Creates, writes and fsyncs one file.
fn durable_create(fs: &mut FileSystem<SimFlash>, path: &str, data: &[u8]) -> Result<(), FsError> {
    let fd = fs.open(path.as_bytes(), CREATE, 0o644)?;
    let result = fs.write_fd(fd, data).and_then(|_| fs.fsync_fd(fd));
    let closed = fs.close(fd);
    result.and(closed)
}

/// Small fsync'd creates until the newest record is chained to a base past page 1 (so the
/// base costs mount a read); returns the link.
fn create_until_chained(
    fs: &mut FileSystem<SimFlash>,
    rng: &mut SeededRng,
    files: &mut BTreeMap<String, Vec<u8>>,
) -> ChainLink {
    for index in files.len().. {
        let path = format!("/d/f{index:05}");
        let data = small_file(rng);
        durable_create(fs, &path, &data).expect("create");
        files.insert(path, data);
        if let Some(link) = fs.committed().chain.filter(|link| link.page > 1) {
            return link;
        }
        assert!(index < 5_000, "no chained record after 5,000 creates");
    }
    unreachable!()
}

/// An SLC volume with a directory `/d` of small fsync'd files whose newest record is chained
/// to a base past page 1 (`create_until_chained`).
fn chained_volume(seed: u64) -> (FileSystem<SimFlash>, SeededRng, BTreeMap<String, Vec<u8>>, ChainLink) {
    let mut rng = SeededRng::new(seed);
    let mut fs = slc(256, seed);
    fs.mkdir(b"/d", 0o755).expect("mkdir");
    fs.transact().expect("commit");
    let mut files = BTreeMap::new();
    let link = create_until_chained(&mut fs, &mut rng, &mut files);
    (fs, rng, files, link)
}

fn check_files(fs: &mut FileSystem<SimFlash>, files: &BTreeMap<String, Vec<u8>>, context: &str) {
    for (path, data) in files {
        let read = read_file(fs, path).unwrap_or_else(|error| panic!("{context}: {path}: {error:?}"));
        assert!(read == *data, "{context}: {path} reads back different");
    }
}

/// Power cuts among fsync'd small creates (each file created, written and fsync'd, as in
/// `fsoc bench mtd`): after every cut, every file whose fsync returned is there with its
/// bytes and fsck is clean; many of the mounts replay a chained record.
#[test]
fn every_fsynced_file_survives_power_cuts_across_chained_records() {
    let seed = env("FSOC_SEED", 0xC4A1);
    let cuts = env("FSOC_CUTS", 40);
    let mut rng = SeededRng::new(seed);
    let mut fs = slc(256, seed);
    fs.mkdir(b"/d", 0o755).expect("mkdir");
    fs.transact().expect("commit");
    let mut files: BTreeMap<String, Vec<u8>> = BTreeMap::new();
    let (mut chained_mounts, mut next_index) = (0u64, 0u64);
    for cut in 0..cuts {
        let context = format!("replay: FSOC_SEED={seed:#x} cut {cut}");
        // Enough operations that a cut often falls among chained records (about 60 creates
        // after a full commit), and sometimes into the first commits after a mount.
        fs.flash_mut().schedule_power_cut(rng.range(20, 1_500));
        let mut in_flight = None;
        for step in 0.. {
            let path = format!("/d/f{next_index:05}");
            next_index += 1;
            let data = small_file(&mut rng);
            match durable_create(&mut fs, &path, &data) {
                Ok(()) => {
                    files.insert(path, data);
                }
                Err(FsError::NoSpace) => {
                    // Keep the volume from filling: remove the oldest third.
                    let old: Vec<String> = files.keys().take(files.len() / 3).cloned().collect();
                    for path in old {
                        if fs.unlink(path.as_bytes()).is_err() {
                            break;
                        }
                        files.remove(&path);
                    }
                }
                Err(_) => {
                    in_flight = Some(path);
                    break; // the power went
                }
            }
            assert!(step < 100_000, "{context}: the cut never came");
        }
        let mut flash = fs.into_flash_without_commit();
        flash.restore_power();
        fs =
            FileSystem::mount(flash, FsConfig::default()).unwrap_or_else(|error| panic!("{context}: mount: {error:?}"));
        chained_mounts += u64::from(fs.committed().chain.is_some());
        // At most: the 15 of a clean mount, the base, 4 candidates, and once the areas have
        // moved for wear, the superblock generations' search (a binary search of a home and
        // two tries).
        let report = fs.mount_report();
        assert!(report.page_reads <= 16 + 4 + 8, "{context}: mount read {} pages: {report:?}", report.page_reads);
        check_files(&mut fs, &files, &context);
        // The file whose fsync the cut interrupted may be there, whole or partly written.
        if let Some(path) = in_flight {
            if fs.stat(path.as_bytes()).is_ok() {
                fs.unlink(path.as_bytes()).unwrap_or_else(|error| panic!("{context}: unlink {path}: {error:?}"));
            }
        }
        assert_clean(&mut fs, &context);
    }
    println!(
        "{cuts} cuts, {} fsync'd files checked after each, {chained_mounts} mounts replayed a chained record",
        files.len()
    );
    assert!(chained_mounts >= cuts / 8, "only {chained_mounts} of {cuts} mounts replayed a chained record");
}

/// A chained record costs mount one read more than a record holding every change (its base,
/// when that is past the area's first two pages, which mount reads anyway): 16 on one SLC chip
/// of 64-page blocks, the bound.
#[test]
fn a_mount_that_replays_a_chained_record_reads_its_base_once() {
    let (fs, _, files, link) = chained_volume(0xC4A2);
    let counter = fs.committed().commit_counter;
    let fs = FileSystem::mount(fs.into_flash_without_commit(), FsConfig::default()).expect("mount");
    let report = fs.mount_report();
    // 1 superblock, 2 generation probes, pages 0 and 1 of 3 areas, 6 probes of the binary
    // search (whose last is the record), and the base.
    assert_eq!(report.page_reads, 16, "base at page {}", link.page);
    assert_eq!(report.commit_counter, counter, "the newest record");
    assert_eq!(report.damage, None);
    let mut fs = fs;
    check_files(&mut fs, &files, "after the mount");
    assert_clean(&mut fs, "after the mount");
}

/// A base that reads back wrong (media damage, which a power cut cannot cause on SLC) makes
/// every record chained to it unusable: mount goes on below the base to the newest record
/// that holds every change, reports the lost commits, and the volume stays consistent.
#[test]
fn a_damaged_base_sends_mount_below_it_and_is_reported() {
    let (mut fs, mut rng, mut files, link) = chained_volume(0xC4A3);
    // Three more chained records, so the newest four candidates all need the base.
    for _ in 0..3 {
        let index = files.len();
        let data = contents(&mut rng, 500);
        durable_create(&mut fs, &format!("/d/f{index:05}"), &data).expect("create");
        files.insert(format!("/d/f{index:05}"), data);
    }
    assert_eq!(fs.committed().chain, Some(link), "still chained to the same base");
    let layout = fs.layout();
    let mut flash = fs.into_flash_without_commit();
    let page = layout.physical(layout.address(link.segment, link.page));
    let geometry = flash.geometry();
    let mut data = vec![0u8; geometry.page_data_bytes as usize];
    let mut spare = vec![0u8; geometry.spare_bytes as usize];
    flash.inspect_store(|store| store.read_contents(page, &mut data, &mut spare)).expect("read base");
    for byte in &mut data[200..260] {
        *byte ^= 0xA5;
    }
    flash.store_mut().write_contents(page, &data, &spare).expect("damage base");
    let mut fs = FileSystem::mount(flash, FsConfig::default()).expect("mount");
    let report = fs.mount_report();
    assert!(report.damage.is_some(), "lost commits unreported: {report:?}");
    assert!(fs.committed().chain.is_none(), "mounted a chained record");
    assert!(report.page_reads <= 16 + 8, "{} reads", report.page_reads);
    // Every file the mounted state names reads back as written; the newest ones are gone.
    let names = fs.readdir_path(b"/d").expect("list");
    assert!(!names.is_empty() && names.len() < files.len(), "{} of {} files", names.len(), files.len());
    for name in names {
        let path = format!("/d/{}", String::from_utf8_lossy(&name.name));
        let read = read_file(&mut fs, &path).expect("read");
        assert!(files.get(&path) == Some(&read), "{path} reads back different");
    }
    // fsck lists the lost commits (media damage), and nothing else.
    let violations = fs.fsck(false).expect("fsck").violations;
    assert!(
        violations.len() == 1 && violations[0].contains("newer commits are lost"),
        "fsck after the damaged base: {violations:?}"
    );
}

/// On MLC a later program may damage an earlier page it shares cells with, base included, so
/// records there always hold every change since the full commit: also with the paired-page
/// guard turned off (`Some(0)`), and on an SLC-looking chip the configuration declares paired
/// (an MLC chip behind MTD, which reports no pairing).
#[test]
fn flash_with_paired_pages_never_chains() {
    let guard_off = |distance| {
        let mut config = FsConfig::default();
        config.volume.paired_page_distance = Some(distance);
        config
    };
    for (profile, config) in
        [(Profile::Mlc, FsConfig::default()), (Profile::Mlc, guard_off(0)), (Profile::Slc, guard_off(2))]
    {
        let mut rng = SeededRng::new(0xC4A4);
        let mut fs = FileSystem::format(sim(profile, 1, 128, 0xC4A4), config, 0xC4A4).expect("format");
        fs.mkdir(b"/d", 0o755).expect("mkdir");
        for index in 0..300 {
            let data = small_file(&mut rng);
            durable_create(&mut fs, &format!("/d/f{index:05}"), &data).expect("create");
            assert_eq!(fs.committed().chain, None, "{profile:?}: chained record at create {index}");
        }
        let (full, delta) = (fs.stats.commits, fs.stats.delta_commits);
        assert!(full > 5 && delta > 200, "{profile:?}: {full} full and {delta} delta commits");
    }
}
