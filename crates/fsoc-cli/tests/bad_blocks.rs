//! `fsoc info` and `fsoc fsck` report the bad blocks of each chip (issue 12 point 3): a grown
//! bad block marked on the device after format shows up under its chip.

mod support;

use fsoc_media::{BlockAddress, Flash, SimFlash};
use support::fsoc;

#[test]
fn info_and_fsck_count_bad_blocks_per_chip() {
    let directory = tempfile::tempdir().expect("tempdir");
    let image = directory.path().join("two-chips.img");
    let image_arg = image.to_str().expect("utf-8");
    let output = fsoc(&["mkfs", image_arg, "--chips", "2", "--size", "32M", "--seed", "5"]);
    assert!(output.status.success(), "{}", output.text());
    let count = |text: &str| {
        text.lines()
            .find_map(|line| {
                line.split_once("bad blocks").map(|(_, rest)| rest.trim_start_matches(':').trim().to_string())
            })
            .unwrap_or_else(|| panic!("no bad-block line in:\n{text}"))
    };
    let before = count(&fsoc(&["info", image_arg]).stdout);
    let (total, _) = before.split_once(' ').expect("a count");
    let total: u32 = total.parse().expect("a number");
    // Grow one bad block on chip 1, in the last (unused) block of the volume.
    let mut flash = SimFlash::open_image(&image).expect("open image");
    let last = flash.geometry().block_count - 1;
    flash.mark_bad_block(BlockAddress::new(1, last)).expect("mark bad");
    flash.flush().expect("flush");
    drop(flash);
    let info = fsoc(&["info", image_arg]);
    assert!(info.status.success(), "{}", info.text());
    let after = count(&info.stdout);
    assert!(after.starts_with(&format!("{} (", total + 1)), "before: {before}; after: {after}");
    assert!(after.contains("chip 0: ") && after.contains("chip 1: "), "{after}");
    let fsck = fsoc(&["fsck", image_arg]);
    assert!(fsck.status.success(), "a bad block in an unused segment is no violation: {}", fsck.text());
    assert_eq!(count(&fsck.stdout), after, "fsck and info agree");
}

/// End of life through the tools (issue 12 point 5): an image whose blocks are all at twice their
/// rated endurance (a third of the erases fail) is written until the file system turns
/// read-only, even though the file system's own erase counts start at 0 there; `fsoc info` then
/// says the end is reached, fsck is clean, and the files written before are still there.
#[test]
fn a_worn_device_reaches_its_end_of_life_and_info_says_so() {
    use fsoc_core::{FileSystem, FsConfig, FsError, OpenFlags};
    let directory = tempfile::tempdir().expect("tempdir");
    let image = directory.path().join("worn.img");
    let image_arg = image.to_str().expect("utf-8");
    assert!(fsoc(&["mkfs", image_arg, "--size", "8M", "--seed", "6"]).status.success());
    let mut flash = SimFlash::open_image(&image).expect("open image");
    let endurance = fsoc_media::Profile::Mlc.endurance_cycles();
    for block in fsoc_core::segment::layout::FIRST_LOG_SEGMENT..flash.geometry().block_count {
        flash.set_erase_count(BlockAddress::new(0, block), 2 * endurance).expect("age");
    }
    let mut fs = FileSystem::mount(flash, FsConfig::default()).expect("mount");
    let flags = OpenFlags { write: true, create: true, truncate: true, ..Default::default() };
    let mut written: Vec<(String, usize)> = Vec::new();
    let end = (0..100_000u32).find_map(|round| {
        let path = format!("/f{}", round % 40);
        let data = vec![round as u8; 20_000];
        let result = fs.open(path.as_bytes(), flags, 0o644).and_then(|fd| {
            fs.pwrite(fd, 0, &data)?;
            fs.close(fd)?;
            fs.transact()
        });
        match result {
            Ok(()) => {
                written.retain(|(kept, _)| kept != &path);
                written.push((path, data.len()));
                None
            }
            // Blocks failing in the middle of a change may leave it short of room; the next
            // change finds out whether the flash is worn out.
            Err(FsError::NoSpace) => None,
            Err(error) => Some(error),
        }
    });
    assert!(matches!(end, Some(FsError::WornOut(_))), "the writes ended with {end:?}");
    let mut flash = fs.unmount().expect("unmount");
    flash.flush().expect("flush");
    drop(flash);
    let info = fsoc(&["info", image_arg]);
    assert!(info.stdout.contains("end of life       reached: the flash is worn out"), "{}", info.text());
    assert!(fsoc(&["fsck", image_arg]).status.success());
    for (index, (path, size)) in written.iter().rev().take(5).enumerate() {
        let copy = directory.path().join(format!("copy{index}"));
        let output = fsoc(&["get", &format!("{image_arg}:{path}"), copy.to_str().expect("utf-8")]);
        assert!(output.status.success(), "{path}: {}", output.text());
        assert_eq!(std::fs::metadata(&copy).expect("copied").len(), *size as u64, "{path}");
    }
}

/// End of life in `fsoc info` (issue 12 point 5): a fresh volume reports how far it is from the
/// end; a volume whose metaroot area could no longer be erased (recorded in its segment table,
/// as the file system records it: crafted here, the way there is tested in fsoc-core's
/// tests/endurance.rs) reports that the end is reached and why, still passes fsck, still reads
/// its files, and refuses a write with the reason.
#[test]
fn info_says_when_the_end_of_life_is_reached() {
    use fsoc_core::{FileSystem, FsConfig};
    let directory = tempfile::tempdir().expect("tempdir");
    let image = directory.path().join("worn.img");
    let image_arg = image.to_str().expect("utf-8");
    assert!(fsoc(&["mkfs", image_arg, "--size", "8M", "--seed", "6"]).status.success());
    let source = directory.path().join("kept");
    std::fs::write(&source, b"written before the end").expect("write");
    assert!(fsoc(&["put", source.to_str().expect("utf-8"), &format!("{image_arg}:/kept")]).status.success());
    let info = fsoc(&["info", image_arg]);
    assert!(
        info.stdout.contains("end of life       not reached: 0 of") && info.stdout.contains("(more than"),
        "{}",
        info.text()
    );

    let mut fs =
        FileSystem::mount(SimFlash::open_image(&image).expect("open image"), FsConfig::default()).expect("mount");
    fs.space().expect("the segment table loads");
    fs.craft().log.retire_area_segment(2);
    fs.commit().expect("commit");
    let mut flash = fs.into_flash_without_commit();
    flash.flush().expect("flush");
    drop(flash);

    let info = fsoc(&["info", image_arg]);
    assert!(info.status.success(), "{}", info.text());
    assert!(
        info.stdout.contains(
            "end of life       reached: the flash is worn out (the metaroot area in segment 2 can no longer be erased)"
        ),
        "{}",
        info.text()
    );
    let fsck = fsoc(&["fsck", image_arg]);
    assert!(fsck.status.success(), "{}", fsck.text());
    let output = fsoc(&["cat", &format!("{image_arg}:/kept")]);
    assert_eq!(output.stdout, "written before the end", "{}", output.text());
    let output = fsoc(&["put", source.to_str().expect("utf-8"), &format!("{image_arg}:/more")]);
    assert!(!output.status.success() && output.text().contains("worn out"), "{}", output.text());
}
