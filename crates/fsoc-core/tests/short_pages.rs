//! Short pages (format version 13, docs/FORMAT.md "Tree records"): a file's last page whose
//! bytes fit a tree entry stays in the allocation tree instead of costing a program. These
//! tests show it costs no program, survives power cuts and remounts, and that every data
//! operation around one (appends, overwrites, truncates, holes, fallocate, seeks) agrees with
//! a plain byte-vector model, with fsck clean throughout.
mod common;
use common::*;
use fsoc_core::{FileSystem, FsConfig};
use fsoc_media::{FlashStats, Profile, SimFlash};

const PAGE: u64 = 2048;

fn volume(seed: u64) -> FileSystem<SimFlash> {
    FileSystem::format(sim(Profile::Slc, 1, 64, seed), FsConfig::default(), seed).expect("format")
}

fn programs(fs: &FileSystem<SimFlash>) -> u64 {
    fs.flash().counters().totals().programs
}

#[test]
fn a_small_last_page_costs_no_program_and_survives_a_power_cut() {
    let mut fs = volume(3);
    let inline_max = fs.inline_bytes_max();
    let fd = fs.open(b"/tail", CREATE, 0o644).expect("create");
    let data = pattern(PAGE as usize + 100, 7);
    let before = programs(&fs);
    fs.write_fd(fd, &data).expect("write");
    assert_eq!(programs(&fs) - before, 1, "page 0 programmed, page 1 (100 bytes) kept in the tree");
    assert_eq!(fs.stats.short_pages_kept, 1);
    fs.fsync_fd(fd).expect("fsync");
    fs.close(fd).expect("close");
    let inode = fs.stat(b"/tail").expect("stat").0;
    assert_eq!(fs.getattr(inode).expect("getattr").pages, 2, "a short page counts as a page (st_blocks)");
    assert_eq!(read_file(&mut fs, "/tail").expect("read"), data);
    assert_clean(&mut fs, "after the fsync");

    // A power cut: the delta commit that holds the short page is replayed.
    let mut fs = FileSystem::mount(fs.into_flash_without_commit(), FsConfig::default()).expect("mount after a cut");
    assert_eq!(read_file(&mut fs, "/tail").expect("read"), data, "after the cut");
    assert_clean(&mut fs, "after the cut");
    // A full commit writes it with the tree's nodes; a clean remount reads it from there.
    let mut fs = FileSystem::mount(fs.unmount().expect("unmount"), FsConfig::default()).expect("remount");
    assert_eq!(read_file(&mut fs, "/tail").expect("read"), data, "after a clean remount");

    // One byte more than a tree entry holds: the last page is a data page.
    let data = pattern(PAGE as usize + inline_max + 1, 9);
    let fd = fs.open(b"/long-tail", CREATE, 0o644).expect("create");
    let before = programs(&fs);
    fs.write_fd(fd, &data).expect("write");
    assert_eq!(programs(&fs) - before, 2, "both pages programmed");
    fs.close(fd).expect("close");
    assert_eq!(read_file(&mut fs, "/long-tail").expect("read"), data);
    assert_clean(&mut fs, "a tail of a data page");
}

#[test]
fn an_append_to_a_short_page_programs_it_once() {
    let mut fs = volume(4);
    let fd = fs.open(b"/log", CREATE, 0o644).expect("create");
    let mut model = Vec::new();
    for round in 0..40u8 {
        let line = pattern(90 + usize::from(round), round);
        let before = programs(&fs);
        fs.write_fd(fd, &line).expect("append");
        model.extend_from_slice(&line);
        // Pages the append completed are programmed; the page it ends in stays short while
        // its bytes fit a tree entry.
        let tail = model.len() as u64 % PAGE;
        let completed = (model.len() as u64 / PAGE) - ((model.len() - line.len()) as u64 / PAGE);
        let tail_programmed = u64::from(tail > fs.inline_bytes_max() as u64);
        assert_eq!(programs(&fs) - before, completed + tail_programmed, "round {round}: {} bytes", model.len());
    }
    fs.fsync_fd(fd).expect("fsync");
    fs.close(fd).expect("close");
    assert_eq!(read_file(&mut fs, "/log").expect("read"), model);
    assert_clean(&mut fs, "appends");
}

#[test]
fn seeks_see_a_short_page_as_data_and_truncates_cut_it() {
    let mut fs = volume(5);
    let fd = fs.open(b"/sparse", CREATE, 0o644).expect("create");
    fs.pwrite(fd, 5 * PAGE + 10, b"far away").expect("write past a hole");
    fs.close(fd).expect("close");
    let inode = fs.stat(b"/sparse").expect("stat").0;
    assert_eq!(fs.getattr(inode).expect("getattr").pages, 1, "one short page, counted as a page");
    assert_eq!(fs.seek_data(inode, 0), Ok(5 * PAGE));
    assert_eq!(fs.seek_hole(inode, 0), Ok(0));
    assert_eq!(fs.seek_hole(inode, 5 * PAGE), Ok(5 * PAGE + 18), "the end of the file");
    // A truncate into the short page keeps its bytes below the size, and an extension reads
    // zeros past them.
    fs.truncate(inode, 5 * PAGE + 13).expect("truncate into it");
    fs.truncate(inode, 7 * PAGE).expect("extend");
    let content = fs.read(inode, 5 * PAGE, 2 * PAGE as usize).expect("read");
    let mut expected = vec![0u8; 2 * PAGE as usize];
    expected[10..13].copy_from_slice(b"far");
    assert_eq!(content, expected);
    assert_clean(&mut fs, "after the truncates");
    // A hole punched over it removes it.
    fs.punch_hole(inode, 5 * PAGE, PAGE).expect("punch");
    assert_eq!(fs.seek_data(inode, 0), Err(fsoc_core::FsError::NoSuchOffset));
    assert_clean(&mut fs, "after the punch");
}

/// Seeded random writes, truncates, punches, zero ranges and fallocates on a few files, against
/// byte vectors; fsck every few steps and a power cut or a clean remount now and then.
/// `FSOC_SEED` replays one seed; the seed is printed on failure.
#[test]
fn random_data_operations_agree_with_a_byte_model() {
    let seeds: Vec<u64> =
        match std::env::var("FSOC_SEED") {
            Ok(text) => vec![text.trim_start_matches("0x").parse::<u64>().ok().unwrap_or_else(|| {
                u64::from_str_radix(text.trim_start_matches("0x"), 16).expect("FSOC_SEED is a number")
            })],
            Err(_) => (1..=6).collect(),
        };
    let mut short_pages = 0;
    for seed in seeds {
        let result = std::panic::catch_unwind(|| run_model(seed));
        match result {
            Ok(kept) => short_pages += kept,
            Err(panic) => {
                eprintln!("random_data_operations_agree_with_a_byte_model failed: FSOC_SEED={seed}");
                std::panic::resume_unwind(panic);
            }
        }
    }
    println!("short pages kept: {short_pages}");
    assert!(short_pages > 100, "the runs made too few short pages to tell: {short_pages}");
}

fn run_model(seed: u64) -> u64 {
    let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut next = move |bound: u64| {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state % bound.max(1)
    };
    let mut fs = volume(seed);
    let names = ["/a", "/b", "/c"];
    let mut models: Vec<Vec<u8>> = vec![Vec::new(); names.len()];
    for name in names {
        let fd = fs.open(name.as_bytes(), CREATE, 0o644).expect("create");
        fs.close(fd).expect("close");
    }
    let mut kept = 0;
    for step in 0..400u64 {
        let which = next(names.len() as u64) as usize;
        let inode = fs.stat(names[which].as_bytes()).expect("stat").0;
        let model = &mut models[which];
        let size = model.len() as u64;
        // Offsets near the end of the file, or anywhere in its first few pages.
        let offset = match next(3) {
            0 => size.saturating_sub(next(600)),
            1 => size + next(3 * PAGE),
            _ => next(4 * PAGE),
        };
        let context = format!("seed {seed} step {step} file {} ({size} bytes)", names[which]);
        match next(10) {
            0..=4 => {
                let length = if next(2) == 0 { 1 + next(700) } else { 1 + next(3 * PAGE) } as usize;
                let data: Vec<u8> = (0..length).map(|_| next(256) as u8).collect();
                fs.write(inode, offset, &data).expect(&context);
                let end = offset as usize + length;
                if model.len() < end {
                    model.resize(end, 0);
                }
                model[offset as usize..end].copy_from_slice(&data);
            }
            5 | 6 => {
                let new_size = if next(2) == 0 { size.saturating_sub(next(700)) } else { next(5 * PAGE) };
                fs.truncate(inode, new_size).expect(&context);
                model.resize(new_size as usize, 0);
            }
            7 => {
                let length = 1 + next(2 * PAGE);
                fs.punch_hole(inode, offset, length).expect(&context);
                let end = (offset + length).min(size);
                if offset < end {
                    model[offset as usize..end as usize].fill(0);
                }
            }
            8 => {
                let length = 1 + next(2 * PAGE);
                let keep_size = next(2) == 0;
                fs.zero_range(inode, offset, length, keep_size).expect(&context);
                let end = offset + length;
                let zeroed_end = if keep_size { end.min(size) } else { end };
                if !keep_size && model.len() < end as usize {
                    model.resize(end as usize, 0);
                }
                if offset < zeroed_end {
                    model[offset as usize..zeroed_end as usize].fill(0);
                }
            }
            _ => {
                let length = 1 + next(2 * PAGE);
                fs.allocate(inode, offset, length, false).expect(&context);
                let end = (offset + length) as usize;
                if model.len() < end {
                    model.resize(end, 0);
                }
            }
        }
        let read = fs.read(inode, 0, model.len() + 10).expect(&context);
        assert!(read == *model, "{context}: content differs from the model");
        if step % 25 == 24 {
            assert_clean(&mut fs, &context);
            kept += fs.stats.short_pages_kept;
            fs.transact().expect("commit");
            fs = match next(2) {
                0 => FileSystem::mount(fs.into_flash_without_commit(), FsConfig::default()).expect("mount after a cut"),
                _ => FileSystem::mount(fs.unmount().expect("unmount"), FsConfig::default()).expect("remount"),
            };
            for (name, model) in names.iter().zip(&models) {
                assert!(read_file(&mut fs, name).expect("read") == *model, "{context}: {name} after the remount");
            }
        }
    }
    assert_clean(&mut fs, &format!("seed {seed}, the end"));
    kept + fs.stats.short_pages_kept
}
