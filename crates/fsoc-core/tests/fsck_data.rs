//! fsck's data pass (`FileSystem::fsck_data`): every data page the allocation tree names is read
//! back; a page the ECC corrected is counted, a page it cannot correct is a violation naming the
//! file and page, and a clean volume is clean.

use fsoc_core::fs::FileKind;
use fsoc_core::{FileSystem, FsConfig};
use fsoc_flash::{Flash, Nanos, PageAddress};
use fsoc_media::{Profile, RamStore, SimConfig, SimFlash};

const PATTERN: u8 = 0xA5;

/// The flash pages whose data are all `PATTERN` (the victim file's, nothing else is written
/// with it).
fn pattern_pages(flash: &SimFlash<RamStore>) -> Vec<PageAddress> {
    let geometry = flash.geometry();
    let mut data = vec![0u8; geometry.page_data_bytes as usize];
    let mut spare = vec![0u8; geometry.spare_bytes as usize];
    let mut found = Vec::new();
    for block in 0..geometry.block_count {
        for page_index in 0..geometry.pages_per_block {
            let page = PageAddress::new(0, block, page_index);
            let now: Nanos = 0;
            if flash.read_page(now, page, &mut data, &mut spare).is_ok() && data.iter().all(|&byte| byte == PATTERN) {
                found.push(page);
            }
        }
    }
    found
}

#[test]
fn the_data_pass_reads_every_data_page_and_names_the_unreadable_ones() {
    let flash = SimFlash::create(SimConfig::new(Profile::Mlc, 1, 256, 7)).expect("flash");
    let mut fs = FileSystem::format(flash, FsConfig::default(), 1).expect("format");
    let page_bytes = fs.layout().geometry.page_data_bytes as usize;
    let victim = fs.create(1, b"victim", FileKind::File, 0o644, 0, 0, None).expect("create");
    fs.write(victim, 0, &vec![PATTERN; 3 * page_bytes]).expect("write");
    let other = fs.create(1, b"other", FileKind::File, 0o644, 0, 0, None).expect("create");
    fs.write(other, 0, &vec![0x11; 5 * page_bytes + 100]).expect("write");
    fs.fsync(victim).expect("fsync");

    let clean = fs.fsck_data(&mut |_| {}).expect("data pass");
    assert!(clean.is_clean(), "{clean:?}");
    // The other file's last 100 bytes are a short page (in the tree, format version 13).
    assert_eq!(clean.pages, 3 + 5, "every data page of both files");
    assert_eq!(clean.corrected_pages, 0);

    let pages = pattern_pages(fs.flash());
    assert_eq!(pages.len(), 3, "the victim's pages on flash: {pages:?}");
    fs.flash_mut().inject_bit_flips(pages[0], 1).expect("one flip");
    let corrected = fs.fsck_data(&mut |_| {}).expect("data pass");
    assert!(corrected.is_clean(), "a corrected page is readable: {corrected:?}");
    assert_eq!(corrected.corrected_pages, 1);

    fs.flash_mut().inject_bit_flips(pages[1], 400).expect("many flips");
    let mut progress_calls = 0;
    let damaged = fs.fsck_data(&mut |_| progress_calls += 1).expect("data pass");
    assert!(!damaged.is_clean());
    assert_eq!(damaged.unreadable_pages, 1, "{damaged:?}");
    assert_eq!(damaged.misplaced_pages, 0, "{damaged:?}");
    assert_eq!(damaged.violations.len(), 1);
    let violation = &damaged.violations[0];
    assert!(
        violation.contains(&format!("inode {victim} page 1")) && violation.contains("uncorrectable"),
        "{violation}"
    );
    assert!(progress_calls >= 1);
    // The metadata check does not read data pages: it still calls the volume clean.
    assert!(fs.fsck(true).expect("fsck").is_clean());
}
