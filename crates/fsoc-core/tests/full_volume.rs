//! A full volume always empties, and statfs tells the truth about free space (issue 14: S6,
//! O3, point 6 and 7). Each case fills a volume with files of random sizes until ENOSPC,
//! checks what statfs promised against what was really written, changes and deletes a random
//! subset (every one must succeed), and fills it again to the same level.
mod common;
use common::*;
use fsoc_core::{FileSystem, FsConfig, FsError};
use fsoc_media::rng::SeededRng;
use fsoc_media::FlashStats;
use fsoc_media::{Profile, SimFlash};

/// What a fill to ENOSPC reached.
#[derive(Debug)]
struct FillResult {
    files: Vec<String>,
    /// Pages the working state references at ENOSPC.
    valid_pages: u64,
    /// statfs free blocks at ENOSPC.
    free_blocks_at_enospc: u64,
    bytes_written: u64,
}

fn file_size(rng: &mut SeededRng, size_max: u64) -> usize {
    // Log-uniform between 1 byte and `size_max`: many small files, a few big ones.
    let bits = 64 - size_max.leading_zeros() as u64;
    let exponent = rng.below(bits + 1);
    (1 + rng.below(1u64 << exponent).min(size_max - 1)) as usize
}

/// Writes files of random sizes into `directory` until ENOSPC. Every ENOSPC must come with
/// statfs reporting less than the failed write's pages plus one segment (O3: no ENOSPC while
/// free space is reported).
fn fill(
    fs: &mut FileSystem<SimFlash>,
    directory: &str,
    rng: &mut SeededRng,
    size_max: u64,
    context: &str,
) -> FillResult {
    let page_bytes = u64::from(fs.statfs().expect("statfs").block_size_bytes);
    let pages_per_segment = u64::from(fs.layout().pages_per_segment());
    let mut result = FillResult { files: Vec::new(), valid_pages: 0, free_blocks_at_enospc: 0, bytes_written: 0 };
    for index in 0.. {
        let size = file_size(rng, size_max);
        let path = format!("{directory}/{index}");
        let data: Vec<u8> = (0..size).map(|offset| (offset as u64 ^ rng.next_u64()) as u8).collect();
        let free_before = fs.statfs().expect("statfs").free_blocks;
        match write_file(fs, &path, &data) {
            Ok(()) => {
                result.files.push(path);
                result.bytes_written += size as u64;
            }
            Err(FsError::NoSpace) => {
                let pages = (size as u64).div_ceil(page_bytes);
                assert!(
                    free_before < pages + pages_per_segment,
                    "{context}: ENOSPC writing {size} bytes ({pages} pages) while statfs promised {free_before} pages"
                );
                // The failed write may have left a partial file; it is a file like any other.
                if fs.stat(path.as_bytes()).is_ok() {
                    result.files.push(path);
                }
                // Fail fast: on the full volume a tiny create either succeeds or is refused
                // from the accounting, without a cleaner run or a single page program.
                let (programs_before, cleaner_runs_before) = (flash_programs(fs), fs.stats.cleaner_runs);
                match write_file(fs, &format!("{directory}/tiny{index}"), b"abc") {
                    Ok(()) => result.files.push(format!("{directory}/tiny{index}")),
                    Err(FsError::NoSpace) => {
                        assert_eq!(
                            fs.stats.cleaner_runs, cleaner_runs_before,
                            "{context}: a refused create ran the cleaner"
                        );
                        assert_eq!(flash_programs(fs), programs_before, "{context}: a refused create programmed pages");
                    }
                    Err(error) => panic!("{context}: tiny create: {error:?}"),
                }
                break;
            }
            Err(error) => panic!("{context}: writing {path}: {error:?}"),
        }
        assert!(index < 1_000_000, "{context}: never ran out of space");
    }
    result.valid_pages = fs.space().expect("space").valid_pages;
    fs.segment_table().expect("segment table loaded").check_totals();
    result.free_blocks_at_enospc = fs.statfs().expect("statfs").free_blocks;
    result
}

fn flash_programs(fs: &FileSystem<SimFlash>) -> u64 {
    fs.flash().counters().totals().programs
}

struct Case {
    profile: Profile,
    chip_count: u32,
    block_count: u32,
    size_max: u64,
}

fn run_case(case: &Case, seed: u64) {
    let context = format!(
        "{:?} x{} {} blocks, files up to {} B; replay: FSOC_SEED={seed:#x}",
        case.profile, case.chip_count, case.block_count, case.size_max
    );
    let mut rng = SeededRng::new(seed);
    let flash = sim(case.profile, case.chip_count, case.block_count, seed);
    let mut fs = FileSystem::format(flash, FsConfig::default(), seed).expect("format");
    fs.mkdir(b"/fill", 0o755).expect("mkdir");
    let first = fill(&mut fs, "/fill", &mut rng, case.size_max, &context);
    assert!(first.files.len() > 10, "{context}: only {} files fit", first.files.len());
    assert_clean(&mut fs, &context);

    // On the full volume: attribute changes, renames, truncates and deletes all succeed.
    let fraction_percent = 10 + rng.below(81);
    let mut kept = Vec::new();
    for (index, path) in first.files.iter().enumerate() {
        let chosen = rng.below(100) < fraction_percent;
        let result = match (chosen, index % 5) {
            (false, _) => {
                kept.push(path.clone());
                Ok(())
            }
            (true, 0) => fs.chmod(path.as_bytes(), 0o600).and_then(|()| fs.unlink(path.as_bytes())),
            (true, 1) => {
                let renamed = format!("{path}.renamed");
                fs.rename_path(path.as_bytes(), renamed.as_bytes()).and_then(|()| fs.unlink(renamed.as_bytes()))
            }
            (true, 2) => fs.truncate_path(path.as_bytes(), 0).and_then(|()| fs.unlink(path.as_bytes())),
            (true, 3) => fs.utimens(path.as_bytes(), 1, 2).and_then(|()| fs.unlink(path.as_bytes())),
            (true, _) => fs.unlink(path.as_bytes()),
        };
        result.unwrap_or_else(|error| panic!("{context}: change/delete of {path} on a full volume: {error:?}"));
    }
    assert_clean(&mut fs, &context);

    // Fill again: the volume takes as much as before, within one segment, less the dead pages
    // the cleaner cannot recover at a profit (statfs does not promise those), at most 4%; 9%
    // for the smallest files, whose extent records (with a data checksum a page, format
    // version 3) make each victim's tree rewrites dearer: the worst case here, seed 0x5f7,
    // went from 2.6% to 6.1% short with data checksums; with format version 5's 80-byte inode
    // records and deletes that clean before the reserve is gone (so that every delete
    // succeeds: seed 0x5f6 failed one before), seed 0x5f6 comes 8.3% short, and a sweep of 20
    // other seeds 7.5% to 8.3% in five of them.
    let second = fill(&mut fs, "/fill", &mut rng, case.size_max, &context);
    let pages_per_segment = u64::from(fs.layout().pages_per_segment());
    println!("{context}: cleaning overhead {} pages per victim", fs.stats.cleaning_overhead_pages_x16 as f64 / 16.0);
    let stranded_max = if case.size_max <= 16 * 1024 { first.valid_pages * 9 / 100 } else { first.valid_pages / 25 };
    assert!(
        second.valid_pages + pages_per_segment + stranded_max >= first.valid_pages,
        "{context}: refilled to {} valid pages, first fill reached {}",
        second.valid_pages,
        first.valid_pages
    );
    assert_clean(&mut fs, &context);
    // Everything is still there after a remount.
    let flash = fs.unmount().expect("unmount");
    let mut fs = FileSystem::mount(flash, FsConfig::default()).expect("mount");
    for path in kept.iter().take(20) {
        read_file(&mut fs, path).unwrap_or_else(|error| panic!("{context}: {path} after remount: {error:?}"));
    }
    println!(
        "{context}: fill 1 {} files, {} valid pages of {}, free at ENOSPC {}; deleted {fraction_percent}%; fill 2 {} valid pages",
        first.files.len(),
        first.valid_pages,
        fs.space().expect("space").capacity_pages,
        first.free_blocks_at_enospc,
        second.valid_pages
    );
}

/// Issue 14 point 6: several sizes and geometries, random file sizes, random subsets deleted.
#[test]
fn every_delete_succeeds_on_a_full_volume_and_it_refills() {
    let cases = [
        Case { profile: Profile::Mlc, chip_count: 1, block_count: 64, size_max: 64 * 1024 },
        Case { profile: Profile::Mlc, chip_count: 1, block_count: 256, size_max: 16 * 1024 },
        Case { profile: Profile::Slc, chip_count: 4, block_count: 48, size_max: 256 * 1024 },
        Case { profile: Profile::Mlc8k, chip_count: 2, block_count: 24, size_max: 512 * 1024 },
        Case { profile: Profile::Tlc, chip_count: 1, block_count: 48, size_max: 32 * 1024 },
    ];
    let seed_base: u64 = std::env::var("FSOC_SEED")
        .ok()
        .and_then(|text| u64::from_str_radix(text.trim_start_matches("0x"), 16).ok())
        .unwrap_or(0x5e6);
    for (index, case) in cases.iter().enumerate() {
        for round in 0..2 {
            run_case(case, seed_base + (index as u64) * 16 + round);
        }
    }
}

/// S6 exactly as reported: a 32 MiB MLC volume (seed 5) filled with 6,000-byte files until
/// ENOSPC, then a seeded random 25% unlinked; the 891st unlink used to fail with ENOSPC.
#[test]
fn s6_random_quarter_of_a_full_volume_unlinks() {
    let mut fs = FileSystem::format(sim(Profile::Mlc, 1, 256, 5), FsConfig::default(), 5).expect("format");
    fs.mkdir(b"/s", 0o755).expect("mkdir");
    let mut rng = SeededRng::new(7);
    let mut written = 0;
    loop {
        let data: Vec<u8> = (0..6000).map(|_| rng.next_u64() as u8).collect();
        match write_file(&mut fs, &format!("/s/{written}"), &data) {
            Ok(()) => written += 1,
            Err(FsError::NoSpace) => break,
            Err(error) => panic!("file {written}: {error:?}"),
        }
    }
    let mut unlinked = 0;
    for index in 0..written {
        if rng.below(4) == 0 {
            fs.unlink(format!("/s/{index}").as_bytes())
                .unwrap_or_else(|error| panic!("unlink {unlinked} (file {index}): {error:?}"));
            unlinked += 1;
        }
    }
    assert!(unlinked > 1000, "{unlinked} unlinks of {written} files");
    assert_clean(&mut fs, "after unlinks");
}

/// Point 7: the usable share of the logical capacity, per profile, for 64 KiB and 4 KiB files
/// (targets ≥ 95% and ≥ 90% at 2 KiB pages). Counts file bytes written until ENOSPC.
#[test]
fn usable_capacity_per_profile() {
    for profile in [Profile::Slc, Profile::Mlc, Profile::Tlc, Profile::Mlc8k] {
        for file_bytes in [64 * 1024, 4 * 1024] {
            let blocks = if profile == Profile::Mlc8k { 32 } else { 128 };
            let mut fs = FileSystem::format(sim(profile, 1, blocks, 3), FsConfig::default(), 3).expect("format");
            let capacity = fs.statfs().expect("statfs");
            let capacity_bytes = capacity.total_blocks * u64::from(capacity.block_size_bytes);
            let data = pattern(file_bytes, 9);
            let mut bytes = 0u64;
            for index in 0.. {
                match write_file(&mut fs, &format!("/{index}"), &data) {
                    Ok(()) => bytes += file_bytes as u64,
                    Err(FsError::NoSpace) => break,
                    Err(error) => panic!("{profile:?}: {error:?}"),
                }
            }
            let share = bytes as f64 / capacity_bytes as f64;
            println!(
                "usable capacity {profile:?}, {} KiB files: {:.1}% of {} KiB",
                file_bytes / 1024,
                share * 100.0,
                capacity_bytes / 1024
            );
            let page_bytes = capacity.block_size_bytes as usize;
            let target = if file_bytes >= 64 * 1024 {
                0.95
            } else if page_bytes <= 2048 {
                0.90
            } else {
                0.0
            };
            assert!(share >= target, "{profile:?}, {file_bytes} B files: {:.3} of capacity usable", share);
        }
    }
}
