//! `fsoc scrub` as a user runs it (issue 12 point 4): on an image whose pages read clean it
//! moves nothing; a data page whose worst ECC sector needs 3 of the simulator's 4 correctable
//! bits is reported by `--check-only` and moved by a plain scrub, after which the tree reads
//! back exact and fsck is clean; a page whose bytes changed behind the ECC is damage: exit 1.
//! Errors are planted with the simulator's persistent bit flips, which the image file keeps.

#[path = "../../fsoc-core/tests/common/data_pages.rs"]
mod shared_pages;
mod support;

use std::fs;
use std::path::Path;

use fsoc_core::{FileSystem, FsConfig};
use fsoc_media::store::PageStore;
use fsoc_media::{ImageStore, PageAddress, SimFlash};
use support::fsoc;

/// Every data page in use, by physical address.
fn data_pages(image: &Path) -> Vec<PageAddress> {
    let mut fs =
        FileSystem::mount(SimFlash::open_image(image).expect("open image"), FsConfig::default()).expect("mount");
    shared_pages::data_pages(&mut fs).into_iter().map(|(_, _, page)| page).collect()
}

fn with_flash(image: &Path, change: impl FnOnce(&mut SimFlash<ImageStore>)) {
    let mut flash = SimFlash::open_image(image).expect("open image");
    change(&mut flash);
    fsoc_media::Flash::flush(&mut flash).expect("flush");
}

#[test]
fn scrub_moves_weak_data_and_reports_damage() {
    let directory = tempfile::tempdir().expect("tempdir");
    let source = directory.path().join("source");
    fs::create_dir_all(&source).expect("mkdir");
    for index in 0..12u32 {
        let data: Vec<u8> = (0..20_000 + index * 3000).map(|byte| (byte * 7 + index) as u8).collect();
        fs::write(source.join(format!("f{index}")), data).expect("write");
    }
    let image = directory.path().join("scrub.img");
    let image_arg = image.to_str().expect("utf-8");
    assert!(fsoc(&["mkfs", image_arg, "--size", "16M", "--seed", "5"]).status.success());
    let output = fsoc(&["put", "-r", source.to_str().expect("utf-8"), &format!("{image_arg}:/")]);
    assert!(output.status.success(), "put: {}", output.text());

    let output = fsoc(&["scrub", image_arg]);
    assert!(output.status.success(), "{}", output.text());
    assert!(
        output.stdout.contains("0 near its limit") && output.stdout.contains("refreshed 0 segments"),
        "{}",
        output.text()
    );

    // Three bits in one sector of a data page: near the limit of a 4-bit code.
    let pages = data_pages(&image);
    let weak = pages[pages.len() / 2];
    with_flash(&image, |flash| flash.inject_bit_flips_at(weak, &[9, 800, 3000]).expect("inject"));
    let output = fsoc(&["scrub", "--check-only", image_arg]);
    assert!(output.status.success(), "{}", output.text());
    assert!(output.stdout.contains("1 near its limit") && output.stdout.contains("nothing moved"), "{}", output.text());
    assert!(data_pages(&image).contains(&weak), "--check-only moves nothing");

    let output = fsoc(&["scrub", image_arg]);
    assert!(output.status.success(), "{}", output.text());
    assert!(output.stdout.contains("refreshed 1 segments"), "{}", output.text());
    assert!(!data_pages(&image).contains(&weak), "the weak page's data moved");
    let output = fsoc(&["scrub", image_arg]);
    assert!(output.stdout.contains("0 near its limit"), "the moved data reads clean: {}", output.text());
    let extracted = directory.path().join("out");
    fs::create_dir_all(&extracted).expect("mkdir");
    let output = fsoc(&["get", "-r", &format!("{image_arg}:/source"), extracted.to_str().expect("utf-8")]);
    assert!(output.status.success(), "{}", output.text());
    for entry in fs::read_dir(&source).expect("list") {
        let entry = entry.expect("entry");
        let back = fs::read(extracted.join("source").join(entry.file_name())).expect("extracted");
        assert!(back == fs::read(entry.path()).expect("source"), "{:?} read back other bytes", entry.file_name());
    }
    assert!(fsoc(&["fsck", image_arg]).status.success());

    // Bytes changed behind the ECC: the checksum catches them, and scrub says so.
    let damaged = data_pages(&image)[3];
    with_flash(&image, |flash| {
        let store = flash.store_mut();
        let geometry = store.geometry();
        let mut data = vec![0u8; geometry.page_data_bytes as usize];
        let mut spare = vec![0u8; geometry.spare_bytes as usize];
        store.read_contents(damaged, &mut data, &mut spare).expect("read");
        data[100] ^= 0x10;
        store.write_contents(damaged, &data, &spare).expect("write");
    });
    let output = fsoc(&["scrub", image_arg]);
    assert_eq!(output.status.code(), Some(1), "{}", output.text());
    assert!(output.stdout.contains("1 failing their checksum"), "{}", output.text());
}

/// The mount's background scrub (`-o scrub=N`) finds a weak page and moves its data while the
/// volume is served; the unmount's commit makes the move durable.
#[test]
fn the_mounts_background_scrub_moves_weak_data() {
    let volume = support::Volume::new("16M");
    let image = volume.image.clone();
    let data: Vec<u8> = (0..300_000u32).map(|byte| (byte % 253) as u8).collect();
    let mounted = volume.mount_with(&["-o", "scrub=0"]);
    fs::write(mounted.path("file"), &data).expect("write");
    mounted.unmount();
    let pages = data_pages(&image);
    let weak = pages[pages.len() / 3];
    with_flash(&image, |flash| flash.inject_bit_flips_at(weak, &[9, 800, 3000]).expect("inject"));

    let mounted = volume.mount_with(&["-o", "scrub=100000"]);
    // A pass over this volume's few hundred pages takes milliseconds at that rate.
    std::thread::sleep(std::time::Duration::from_secs(2));
    let back = fs::read(mounted.path("file"));
    if back.is_err() {
        eprintln!("{}", fs::read_to_string(volume.directory.path().join("mount.log")).unwrap_or_default());
    }
    assert!(back.expect("read") == data);
    mounted.unmount();
    assert!(!data_pages(&image).contains(&weak), "the background scrub moved the weak page's data");
    let output = fsoc(&["scrub", "--check-only", volume.image_arg()]);
    assert!(output.status.success() && output.stdout.contains("0 near its limit"), "{}", output.text());
    volume.fsck();
}
