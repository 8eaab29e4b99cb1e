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
