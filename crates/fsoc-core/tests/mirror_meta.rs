//! Mirror-meta (issue 12 point 2, format version 8): tree nodes, segment-table pages and
//! metaroots are written on two chips, file data once. Any one chip lost, before mount or in
//! use: every directory and file name is still listed, every file whose data pages are all on
//! the other chips reads back exactly, and a file with a page on the lost chip answers EIO
//! (never other bytes).

mod common;

use std::collections::{BTreeMap, BTreeSet};

use common::*;
use fsoc_core::fs::FileKind;
use fsoc_core::segment::{PageTag, Redundancy};
use fsoc_core::txn::{rebuild_chip, VolumeConfig};
use fsoc_core::{FileSystem, FsConfig, FsError};
use fsoc_media::store::PageStore;
use fsoc_media::{ChipIndex, Flash, FlashStats, PageAddress, Profile, SimFlash};

fn mirror_config() -> FsConfig {
    FsConfig {
        volume: VolumeConfig { redundancy: Redundancy::MirrorMeta, ..VolumeConfig::default() },
        ..FsConfig::default()
    }
}

/// The files a run writes, each once: inline ones (in the inode record, so mirrored), one-page
/// and several-page ones, in nested directories.
fn files() -> Vec<(String, Vec<u8>)> {
    (0..90)
        .map(|index| {
            let path = match index % 5 {
                0 => format!("/f{index}"),
                1 | 2 => format!("/d{}/f{index}", index % 6),
                _ => format!("/d{}/e{}/f{index}", index % 6, index % 3),
            };
            let length = match index % 4 {
                0 => 40 + index,
                1 => 2_048,
                2 => 1_000 + index * 97,
                _ => 5_000 + index * 311,
            };
            (path, pattern(length, index as u8))
        })
        .collect()
}

fn directories() -> Vec<String> {
    let mut directories = Vec::new();
    for d in 0..6 {
        directories.push(format!("/d{d}"));
        for e in 0..3 {
            directories.push(format!("/d{d}/e{e}"));
        }
    }
    directories
}

/// A mirror-meta volume on `chips` chips holding `files()`, written in several transactions
/// (the last a delta commit), then unmounted.
fn written(chips: u32, seed: u64) -> SimFlash {
    let mut fs = FileSystem::format(sim(Profile::Mlc, chips, 64, seed), mirror_config(), seed).expect("format");
    for directory in directories() {
        fs.mkdir(directory.as_bytes(), 0o755).expect("mkdir");
    }
    for (index, (path, contents)) in files().iter().enumerate() {
        write_file(&mut fs, path, contents).expect("write");
        if index % 25 == 24 {
            fs.commit().expect("commit");
        }
    }
    let (last, _) = fs.resolve(b"/f85").expect("resolve");
    fs.fsync(last).expect("delta commit");
    assert_clean(&mut fs, "written");
    fs.unmount().expect("unmount")
}

/// Every name under `/`, with its kind (a recursive listing).
fn listing<F: Flash>(fs: &FileSystem<F>) -> BTreeMap<String, FileKind> {
    let mut names = BTreeMap::new();
    let mut pending = vec![String::new()];
    while let Some(directory) = pending.pop() {
        let path = if directory.is_empty() { "/".to_string() } else { directory.clone() };
        for entry in fs.readdir_path(path.as_bytes()).unwrap_or_else(|error| panic!("readdir {path}: {error}")) {
            let name = format!("{directory}/{}", String::from_utf8_lossy(&entry.name));
            if entry.kind == FileKind::Directory {
                pending.push(name.clone());
            }
            names.insert(name, entry.kind);
        }
    }
    names
}

/// Every programmed page of `chips`: where, its data and its spare tag.
fn programmed_pages(flash: &SimFlash, chips: std::ops::Range<u32>) -> Vec<(PageAddress, Vec<u8>, Option<PageTag>)> {
    let geometry = flash.geometry();
    let mut pages = Vec::new();
    for chip in chips {
        for block in 0..geometry.block_count {
            for page in 0..geometry.pages_per_block {
                let page = PageAddress::new(chip, block, page);
                if flash.page_state(page).expect("state") == fsoc_media::store::PageState::Erased {
                    continue;
                }
                let (mut data, mut spare) =
                    (vec![0; geometry.page_data_bytes as usize], vec![0; geometry.spare_bytes as usize]);
                flash.inspect_store(|store| store.read_contents(page, &mut data, &mut spare)).expect("contents");
                pages.push((page, data, PageTag::decode(&spare)));
            }
        }
    }
    pages
}

/// Inodes with a data page on `chip`: the owner tags of its programmed pages (every file is
/// written once and the volume never cleans, so each tagged page is a live one).
fn inodes_with_data_on(flash: &SimFlash, chip: u32) -> BTreeSet<u64> {
    programmed_pages(flash, chip..chip + 1)
        .into_iter()
        .filter_map(|(_, _, tag)| match tag {
            Some(PageTag::Data { inode, .. }) => Some(inode),
            _ => None,
        })
        .collect()
}

/// Tags of the programmed pages of every chip: (first copies, second copies) of nodes and
/// table pages.
fn copies(flash: &SimFlash) -> (u64, u64) {
    let (mut first, mut second) = (0, 0);
    for (_, _, tag) in programmed_pages(flash, 0..flash.chip_count()) {
        match tag {
            Some(PageTag::Node { .. } | PageTag::SegmentTable { .. }) => first += 1,
            Some(PageTag::NodeCopy { .. } | PageTag::SegmentTableCopy { .. }) => second += 1,
            _ => {}
        }
    }
    (first, second)
}

/// Checks a degraded volume: the whole listing, and each file exact or EIO as its data pages'
/// chips say. Answers (files read whole, files lost).
fn check_degraded<F: Flash>(
    fs: &mut FileSystem<F>,
    expected: &BTreeMap<String, FileKind>,
    lost_inodes: &BTreeSet<u64>,
    context: &str,
) -> (u32, u32) {
    assert_eq!(&listing(fs), expected, "{context}: every name is listed");
    let (mut whole, mut lost) = (0, 0);
    for (path, contents) in files() {
        let (inode, _) = fs.resolve(path.as_bytes()).expect("resolve");
        fs.getattr(inode).unwrap_or_else(|error| panic!("{context}: stat {path}: {error}"));
        match read_file(fs, &path) {
            Ok(read) => {
                assert!(read == contents, "{context}: {path} reads other bytes");
                assert!(!lost_inodes.contains(&inode), "{context}: {path} has a page on the lost chip yet read");
                whole += 1;
            }
            Err(error) => {
                assert_eq!(error.errno(), 5, "{context}: {path}: {error} (EIO expected)");
                assert!(lost_inodes.contains(&inode), "{context}: {path} is on surviving chips yet fails: {error}");
                lost += 1;
            }
        }
    }
    (whole, lost)
}

#[test]
fn any_one_lost_chip_keeps_every_name_and_the_data_on_the_other_chips() {
    for chips in [2, 3, 4] {
        let seed = 70 + u64::from(chips);
        let flash = written(chips, seed);
        let (first, second) = copies(&flash);
        assert!(first > 10 && first == second, "{chips} chips: every node and table page twice ({first}, {second})");
        let expected = {
            let fs = FileSystem::mount(flash.clone(), FsConfig::default()).expect("mount");
            listing(&fs)
        };
        assert_eq!(expected.len(), files().len() + directories().len());
        for dead in 0..chips {
            let context = format!("{chips} chips, chip {dead} dead");
            let lost_inodes = inodes_with_data_on(&flash, dead);
            let mut broken = flash.clone();
            broken.fail_chip(ChipIndex(dead)).expect("fail chip");
            let mut fs = FileSystem::mount(broken, FsConfig::default()).expect("degraded mount");
            assert_eq!(fs.missing_chip(), Some(dead), "{context}");
            let (whole, lost) = check_degraded(&mut fs, &expected, &lost_inodes, &context);
            assert!(whole > 10 && lost > 5, "{context}: {whole} files whole, {lost} lost");
            // First copies sit at even stripe pages: on an even chip count, on even chips only.
            if chips % 2 == 1 || dead % 2 == 0 {
                assert!(fs.rebuilt_reads() > 0, "{context}: nodes came from their second copies");
            }
            // The structure is whole without the chip: fsck's tree and table checks pass.
            assert_clean(&mut fs, &context);
            assert!(matches!(write_file(&mut fs, "/new", b"x"), Err(FsError::ReadOnly)), "{context}");
            // A blank chip in its place: the same, and a rebuild is refused with the reason.
            let mut replaced = fs.into_flash_without_commit();
            replaced.replace_chip(ChipIndex(dead)).expect("replace");
            let mut fs = FileSystem::mount(replaced, FsConfig::default()).expect("mount with a blank chip");
            check_degraded(&mut fs, &expected, &lost_inodes, &format!("{context}, blank replacement"));
            let (_, report) = rebuild_chip(fs.into_flash_without_commit(), dead, &mut |_, _| {});
            let error = report.expect_err("mirror-meta cannot rebuild file data");
            assert!(error.to_string().contains("mirror-meta"), "{context}: {error}");
        }
        println!("{chips} chips: {first} node and table pages, each with its second copy");
    }
}

#[test]
fn a_chip_that_dies_in_use_keeps_every_committed_name() {
    let seed = 9;
    let mut fs = FileSystem::format(sim(Profile::Mlc, 3, 64, seed), mirror_config(), seed).expect("format");
    for directory in directories() {
        fs.mkdir(directory.as_bytes(), 0o755).expect("mkdir");
    }
    for (path, contents) in files().iter().take(60) {
        write_file(&mut fs, path, contents).expect("write");
    }
    fs.commit().expect("commit");
    let committed = listing(&fs);
    // The chip dies in the middle of the next transaction.
    write_file(&mut fs, "/late", &pattern(30_000, 9)).expect("write before the failure");
    fs.flash_mut().fail_chip(ChipIndex(1)).expect("fail");
    let mut failed = false;
    for index in 0..40 {
        let result = write_file(&mut fs, &format!("/late{index}"), &pattern(9_000, 1)).and_then(|()| fs.commit());
        if result.is_err() {
            failed = true;
            break;
        }
    }
    assert!(failed, "a change reaching the dead chip fails");
    let flash = fs.into_flash_without_commit();
    let mut fs = FileSystem::mount(flash, FsConfig::default()).expect("degraded mount");
    assert_eq!(fs.missing_chip(), Some(1));
    let listed = listing(&fs);
    for (name, kind) in &committed {
        assert_eq!(listed.get(name), Some(kind), "{name} was committed");
    }
    assert_clean(&mut fs, "after the chip died");
}

#[test]
fn mirror_meta_costs_metadata_pages_only() {
    let mut programs = Vec::new();
    for redundancy in [Redundancy::None, Redundancy::MirrorMeta] {
        let config = FsConfig { volume: VolumeConfig { redundancy, ..VolumeConfig::default() }, ..FsConfig::default() };
        let mut fs = FileSystem::format(sim(Profile::Mlc, 2, 64, 3), config, 3).expect("format");
        let before = fs.flash().counters().totals().programs;
        // Data only: one large file.
        write_file(&mut fs, "/big", &pattern(400 * 2048, 1)).expect("write");
        fs.commit().expect("commit");
        let after_data = fs.flash().counters().totals().programs;
        // Metadata only: many empty files.
        for index in 0..300 {
            write_file(&mut fs, &format!("/empty{index}"), b"").expect("create");
        }
        fs.commit().expect("commit");
        let after_metadata = fs.flash().counters().totals().programs;
        assert_clean(&mut fs, redundancy.name());
        programs.push((after_data - before, after_metadata - after_data));
    }
    let [(plain_data, plain_metadata), (mirror_data, mirror_metadata)] = programs[..] else { unreachable!() };
    println!("pages programmed, none → mirror-meta: data {plain_data} → {mirror_data}, metadata {plain_metadata} → {mirror_metadata}");
    // File data is written once either way (its extent-tree leaves twice: a few pages).
    assert!(mirror_data <= plain_data + plain_data / 20, "data {plain_data} → {mirror_data}");
    // Metadata about twice.
    assert!(mirror_metadata >= plain_metadata * 18 / 10 && mirror_metadata <= plain_metadata * 22 / 10);
}

/// A small mirror-meta volume churned well past its size: the cleaner moves node pairs and
/// table pairs many times (each released as a pair); the files stay exact, fsck's page counts
/// stay exact, and without either chip every name is still listed.
#[test]
fn the_cleaner_moves_and_releases_pages_in_pairs() {
    let seed = 17;
    let mut fs = FileSystem::format(sim(Profile::Mlc, 2, 20, seed), mirror_config(), seed).expect("format");
    let mut model: BTreeMap<String, Vec<u8>> = BTreeMap::new();
    // Cold and hot files side by side in every segment, then only the hot ones change: the
    // segments stay part-live and must be cleaned.
    for round in 0..1500u32 {
        let index = if round < 60 { round } else { 2 * (round % 30) + 1 };
        let path = format!("/r{index}");
        if round >= 60 && round % 7 == 3 {
            if model.remove(&path).is_some() {
                fs.unlink(path.as_bytes()).expect("unlink");
            }
        } else {
            let contents = pattern(2_000 + (round as usize * 7_919) % 50_000, round as u8);
            write_file(&mut fs, &path, &contents).expect("write");
            model.insert(path, contents);
        }
        if round % 100 == 99 {
            fs.commit().expect("commit");
            assert_clean(&mut fs, &format!("round {round}"));
        }
    }
    assert!(fs.stats.cleaner_runs > 20, "the cleaner ran {} times", fs.stats.cleaner_runs);
    let flash = fs.unmount().expect("unmount");
    let mut fs = FileSystem::mount(flash.clone(), FsConfig::default()).expect("mount");
    for (path, contents) in &model {
        assert!(&read_file(&mut fs, path).expect("read") == contents, "{path}");
    }
    assert_clean(&mut fs, "remounted");
    let expected = listing(&fs);
    for dead in 0..2 {
        let mut broken = flash.clone();
        broken.fail_chip(ChipIndex(dead)).expect("fail chip");
        let mut fs = FileSystem::mount(broken, FsConfig::default()).expect("degraded mount");
        assert_eq!(listing(&fs), expected, "chip {dead} dead");
        assert_clean(&mut fs, &format!("chip {dead} dead"));
    }
}

/// A node or table page whose first copy reads with no ECC error but holds other bytes (a
/// miscorrection, a firmware bug) is read from its second copy: with every first copy on one
/// chip damaged in turn, the volume lists and reads every file exactly, and a scrub moves the
/// damaged page away.
#[test]
fn a_first_copy_with_wrong_bytes_is_read_from_its_second() {
    let flash = written(3, 91);
    let expected = {
        let fs = FileSystem::mount(flash.clone(), FsConfig::default()).expect("mount");
        listing(&fs)
    };
    let (mut damaged, mut repaired) = (0, 0);
    for (page, data, tag) in programmed_pages(&flash, 1..2) {
        if !matches!(tag, Some(PageTag::Node { .. } | PageTag::SegmentTable { .. })) {
            continue;
        }
        let mut spare = vec![0xFF; flash.geometry().spare_bytes as usize];
        if let Some(tag) = tag {
            tag.encode(&mut spare);
        }
        let mut broken = flash.clone();
        let mut bad = data.clone();
        for byte in &mut bad[100..612] {
            *byte ^= 0x5A;
        }
        broken.store_mut().write_contents(page, &bad, &spare).expect("damage");
        damaged += 1;
        let context = format!("first copy at {page} damaged");
        let mut fs = FileSystem::mount(broken, FsConfig::default()).expect(&context);
        assert_eq!(listing(&fs), expected, "{context}");
        for (path, contents) in files() {
            assert!(read_file(&mut fs, &path).expect(&context) == contents, "{context}: {path}");
        }
        assert_clean(&mut fs, &context);
        repaired += u32::from(fs.rebuilt_reads() > 0);
    }
    // Pages of older commits are damaged too, and never read: some damage nothing live.
    assert!(damaged > 5 && repaired > 3, "{damaged} first copies damaged on chip 1, {repaired} read from a copy");
    println!("{damaged} first copies damaged in turn ({repaired} live ones), every name and byte read back");
}
