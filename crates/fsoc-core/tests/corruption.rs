//! Corrupted metadata never panics: bytes of tree nodes, segment-table pages, metaroots and
//! superblocks are changed behind ECC's back (as a misdirected or silently corrupted write
//! would), then the volume is mounted, listed, checked and written to. Every call must return
//! a value or a typed error (EIO / corrupt). Seeded; the failing case prints its seed.
mod common;
use common::*;
use fsoc_core::segment::PageTag;
use fsoc_core::{FileSystem, FsConfig, OpenFlags};
use fsoc_media::store::{PageState, PageStore, RamStore};
use fsoc_media::{PageAddress, Profile, SimConfig, SimFlash};

fn populated_store() -> (SimConfig, RamStore) {
    let config = SimConfig::new(Profile::Mlc, 1, 64, 21);
    let mut fs =
        FileSystem::format(SimFlash::create(config.clone()).expect("sim"), FsConfig::default(), 21).expect("format");
    for directory in 0..4 {
        fs.mkdir(format!("/d{directory}").as_bytes(), 0o755).expect("mkdir");
        for file in 0..60 {
            write_file(&mut fs, &format!("/d{directory}/file{file}"), &pattern(file * 97 % 5000, file as u8))
                .expect("write");
        }
        fs.symlink_path(b"/d0/file1", format!("/d{directory}/link").as_bytes()).expect("symlink");
        fs.transact().expect("commit");
    }
    let flash = fs.unmount().expect("unmount");
    (config, flash.into_store())
}

/// Metadata pages: everything programmed whose spare tag is not file data.
fn metadata_pages(config: &SimConfig, store: &RamStore) -> Vec<PageAddress> {
    let geometry = config.geometry;
    let mut pages = Vec::new();
    let mut data = vec![0u8; geometry.page_data_bytes as usize];
    let mut spare = vec![0u8; geometry.spare_bytes as usize];
    for block in 0..geometry.block_count {
        for page_index in 0..geometry.pages_per_block {
            let page = PageAddress::new(0, block, page_index);
            if store.page_meta(page).expect("meta").state != PageState::Programmed {
                continue;
            }
            store.read_contents(page, &mut data, &mut spare).expect("contents");
            if !matches!(PageTag::decode(&spare), Some(PageTag::Data { .. }) | None) {
                pages.push(page);
            }
        }
    }
    pages
}

/// Exercises a possibly corrupt volume; any error is fine, a panic is not. Returns whether
/// the damage was noticed (mount refused, fsck complained, or a call failed with EIO).
fn exercise(flash: SimFlash) -> bool {
    let Ok(mut fs) = FileSystem::mount(flash, FsConfig::default()) else { return true };
    let noticed = !matches!(fs.fsck(true), Ok(report) if report.is_clean());
    for directory in 0..4 {
        if let Ok(entries) = fs.readdir_path(format!("/d{directory}").as_bytes()) {
            for entry in entries.iter().take(20) {
                let _ = fs.read(entry.inode, 0, 10_000);
                let _ = fs.getattr(entry.inode);
            }
        }
    }
    let _ = fs.readlink_path(b"/d1/link");
    let create = OpenFlags { write: true, create: true, ..Default::default() };
    if let Ok(fd) = fs.open(b"/d2/new", create, 0o644) {
        let _ = fs.pwrite(fd, 0, &pattern(9000, 1));
        let _ = fs.close(fd);
    }
    let _ = fs.unlink(b"/d3/file5");
    let _ = fs.rename_path(b"/d1/file7", b"/d0/file7");
    let _ = fs.transact();
    if let Ok(flash) = fs.unmount() {
        let _ = FileSystem::mount(flash, FsConfig::default()).map(|mut fs| fs.fsck(true));
    }
    noticed
}

#[test]
fn corrupted_metadata_pages_give_errors_not_panics() {
    let (config, store) = populated_store();
    let pages = metadata_pages(&config, &store);
    assert!(pages.len() > 20, "only {} metadata pages", pages.len());
    let geometry = config.geometry;
    let mut rng = fsoc_media::rng::SeededRng::new(0x5EED);
    let mut data = vec![0u8; geometry.page_data_bytes as usize];
    let mut spare = vec![0u8; geometry.spare_bytes as usize];
    let mut noticed = 0;
    for case in 0..300 {
        let page = pages[(rng.next_u64() as usize) % pages.len()];
        let mut corrupted = store.clone();
        corrupted.read_contents(page, &mut data, &mut spare).expect("contents");
        // A few random bytes, or a run of bytes in the header, or the whole page garbage.
        match case % 3 {
            0 => {
                for _ in 0..(1 + rng.next_u64() % 4) {
                    let index = rng.next_u64() as usize % data.len();
                    data[index] ^= 1 << (rng.next_u64() % 8);
                }
            }
            1 => {
                let start = rng.next_u64() as usize % 64;
                for byte in &mut data[start..start + 8] {
                    *byte = rng.next_u64() as u8;
                }
            }
            _ => data.iter_mut().for_each(|byte| *byte = rng.next_u64() as u8),
        }
        corrupted.write_contents(page, &data, &spare).expect("write");
        let flash = SimFlash::with_store(config.clone(), corrupted).expect("sim");
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| exercise(flash)));
        assert!(result.is_ok(), "case {case}: corrupting page {page:?} made fsoc panic");
        noticed += usize::from(result.unwrap_or(false));
    }
    // Pages of old metaroots and stale nodes are not referenced, so not every corruption
    // matters; but most metadata pages are live and checksummed.
    println!("corruption noticed in {noticed} of 300 cases");
    assert!(noticed >= 100, "only {noticed} of 300 corruptions were noticed");
}
