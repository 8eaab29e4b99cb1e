//! Redundancy across chips as a user meets it (issue 12 point 2): `fsoc mkfs --redundancy
//! parity` and `fsoc array mkfs --redundancy parity`, `fsoc info` and `fsoc fsck` on a volume
//! whole and degraded (a chip blank in its place), `fsoc rebuild` of an image's chip in place and
//! of an array's lost chip file (missing, blank, or replaced by a new file), the refusals, and
//! `fsoc crashtest --chip-loss`. Every file is compared byte for byte after each step; the
//! image's through `fsoc cat`, the array's through the library (the image tools read
//! single-file images only, and a mount needs FUSE).

mod support;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use fsoc_array::{chip_file_path, create_blank_chip_file, ThreadedFlash};
use fsoc_core::{FileSystem, FsConfig, OpenFlags};
use fsoc_media::{ChipIndex, Flash, SimFlash};
use support::{fsoc, Output};

/// The files every test writes: name and contents (sizes from under a page to several rows of
/// every chip, contents distinct per file).
fn files() -> BTreeMap<String, Vec<u8>> {
    (0..6u32)
        .map(|index| {
            let length: u32 = [100, 3_000, 20_000, 70_000, 150_000, 9][index as usize];
            let data = (0..length).map(|byte| (byte.wrapping_mul(31) ^ (index * 97)) as u8).collect();
            (format!("f{index}"), data)
        })
        .collect()
}

fn arg(path: &Path) -> &str {
    path.to_str().expect("utf-8 path")
}

/// Runs `fsoc` and fails the test unless it succeeds.
fn fsoc_ok(arguments: &[&str]) -> Output {
    let output = fsoc(arguments);
    assert!(output.status.success(), "fsoc {arguments:?}: {}", output.text());
    output
}

/// Runs `fsoc`, which must refuse with exit status 2 and say `expected` on stderr.
fn fsoc_refuses(arguments: &[&str], expected: &str) -> Output {
    let output = fsoc(arguments);
    assert_eq!(output.status.code(), Some(2), "fsoc {arguments:?}: {}", output.text());
    assert!(output.stderr.contains(expected), "fsoc {arguments:?} should say {expected:?}: {}", output.text());
    output
}

/// Every file of `files()` reads back from the image through `fsoc cat`.
fn check_image_files(image: &Path) {
    for (name, data) in files() {
        let output = std::process::Command::new(support::FSOC)
            .args(["cat", &format!("{}:/{name}", arg(image))])
            .output()
            .expect("run fsoc cat");
        assert!(output.status.success(), "cat {name}: {}", String::from_utf8_lossy(&output.stderr));
        assert!(output.stdout == data, "{name}: {} bytes read back, {} written", output.stdout.len(), data.len());
    }
}

/// Writes `files()` into the array `base` through the library (the image tools refuse arrays).
fn write_array_files(base: &Path) {
    let flash = ThreadedFlash::open(base).expect("open chip files");
    let mut fs = FileSystem::mount(flash, FsConfig::default()).expect("mount");
    let flags = OpenFlags { write: true, create: true, ..Default::default() };
    for (name, data) in files() {
        let fd = fs.open(format!("/{name}").as_bytes(), flags, 0o644).expect("create");
        fs.write_fd(fd, &data).expect("write");
        fs.close(fd).expect("close");
    }
    fs.unmount().expect("unmount").close().expect("close chip files");
}

/// Every file of `files()` reads back from the array `base` (mounted read-only through the
/// library), and whether the mount ran without a chip.
fn check_array_files(base: &Path) -> Option<u32> {
    let flash = ThreadedFlash::open(base).expect("open chip files");
    let mut config = FsConfig::default();
    config.volume.read_only = true;
    let fs = FileSystem::mount(flash, config).expect("mount");
    for (name, data) in files() {
        let path = format!("/{name}");
        let (inode, record) = fs.stat(path.as_bytes()).expect("stat");
        assert_eq!(record.size, data.len() as u64, "{name}");
        assert!(fs.read(inode, 0, data.len()).expect("read") == data, "{name}: contents differ");
    }
    let missing = fs.missing_chip();
    fs.into_flash_without_commit().close().expect("close chip files");
    missing
}

/// The line `fsoc info` and `fsoc fsck` print for a volume running without chip `chip`.
fn degraded_line(volume: &Path, chip: u32) -> String {
    format!(
        "chip {chip} is missing or dead: the volume is degraded and read-only; every page of it is rebuilt from the \
         other chips; run `fsoc rebuild {} --chip {chip}`",
        volume.display()
    )
}

/// Puts a blank chip in place of chip `chip` of an image file (its blocks erased, as a new
/// chip from the factory).
fn blank_image_chip(image: &Path, chip: u32) {
    let mut flash = SimFlash::open_image(image).expect("open image");
    flash.replace_chip(ChipIndex(chip)).expect("replace chip");
    flash.flush().expect("flush");
}

/// An image of three chips with parity: `fsoc info` states it; a rebuild of an intact chip
/// leaves every file and a clean fsck; with chip 1 blank the volume reads degraded (info and
/// fsck say so, fsck is clean, every file reads back, a write is refused), and `fsoc rebuild
/// --chip 1` makes it whole again.
#[test]
fn an_image_with_parity_reads_without_a_chip_and_is_rebuilt() {
    let directory = tempfile::tempdir().expect("tempdir");
    let source = directory.path().join("source");
    std::fs::create_dir(&source).expect("mkdir");
    for (name, data) in files() {
        std::fs::write(source.join(name), data).expect("write source");
    }
    let image = directory.path().join("parity.img");
    let output = fsoc_ok(&["mkfs", arg(&image), "--chips", "3", "--size", "24M", "--redundancy", "parity"]);
    assert!(output.stdout.contains("redundancy: parity"), "{}", output.text());
    let mut put: Vec<String> = vec!["put".into()];
    put.extend(files().keys().map(|name| source.join(name).display().to_string()));
    put.push(format!("{}:/", arg(&image)));
    fsoc_ok(&put.iter().map(String::as_str).collect::<Vec<_>>());
    let info = fsoc_ok(&["info", arg(&image)]);
    assert!(
        info.stdout.contains(
            "redundancy        parity (one parity page per row of 3 chips: capacity 2/3; any one chip may be lost)"
        ),
        "{}",
        info.text()
    );
    assert!(!info.stdout.contains("degraded"), "{}", info.text());
    check_image_files(&image);

    let rebuild = fsoc_ok(&["rebuild", arg(&image), "--chip", "2"]);
    assert!(rebuild.stdout.contains("chip 2 rebuilt from the other chips"), "{}", rebuild.text());
    assert!(rebuild.stdout.contains("mounted whole") && rebuild.stdout.contains("clean: no violations"));
    check_image_files(&image);

    blank_image_chip(&image, 1);
    let info = fsoc_ok(&["info", arg(&image)]);
    assert!(info.stdout.contains(&degraded_line(&image, 1)), "{}", info.text());
    assert!(info.stdout.contains("chip 1: missing"), "the bad-block count skips the missing chip: {}", info.text());
    let fsck = fsoc_ok(&["fsck", arg(&image)]);
    assert!(fsck.stdout.contains(&degraded_line(&image, 1)), "{}", fsck.text());
    assert!(fsck.stdout.contains("clean: no violations"), "degraded is no violation: {}", fsck.text());
    check_image_files(&image);
    let put = fsoc(&["put", &format!("{}/f0", arg(&source)), &format!("{}:/new", arg(&image))]);
    assert!(!put.status.success(), "a degraded volume is read-only: {}", put.text());
    assert!(put.stderr.contains(&degraded_line(&image, 1)), "{}", put.text());

    let rebuild = fsoc_ok(&["rebuild", arg(&image), "--chip", "1"]);
    assert!(rebuild.stdout.contains("mounted whole") && rebuild.stdout.contains("clean: no violations"));
    assert!(!rebuild.stdout.contains("warning"), "every page rebuilt: {}", rebuild.text());
    let info = fsoc_ok(&["info", arg(&image)]);
    assert!(!info.stdout.contains("degraded"), "{}", info.text());
    check_image_files(&image);
    fsoc_ok(&["put", &format!("{}/f0", arg(&source)), &format!("{}:/new", arg(&image))]);
}

/// An array of three chip files with parity: with chip 1's file blank the volume reads
/// degraded; rebuilt in place it is whole; with chip 1's file deleted, mount names the missing
/// file and `fsoc rebuild` makes a new one; with `--replacement NEW` the new file takes chip
/// 2's place and the old one is kept as BASE.chip2.failed. Every file reads back each time
/// and fsck is clean.
#[test]
fn an_array_with_parity_rebuilds_a_lost_chip_file() {
    let directory = tempfile::tempdir().expect("tempdir");
    let base = directory.path().join("array");
    let output = fsoc_ok(&["array", "mkfs", arg(&base), "--chips", "3", "--blocks", "32", "--redundancy", "parity"]);
    assert!(output.stdout.contains("redundancy: parity"), "{}", output.text());
    write_array_files(&base);
    assert_eq!(check_array_files(&base), None);

    // A blank chip file in chip 1's place: degraded, every file still there.
    std::fs::remove_file(chip_file_path(&base, 1)).expect("remove chip 1");
    create_blank_chip_file(&chip_file_path(&base, 1), &chip_file_path(&base, 0)).expect("blank chip");
    let info = fsoc_ok(&["info", arg(&base)]);
    assert!(info.stdout.contains(&degraded_line(&base, 1)), "{}", info.text());
    let fsck = fsoc_ok(&["fsck", arg(&base)]);
    assert!(fsck.stdout.contains("degraded") && fsck.stdout.contains("clean: no violations"), "{}", fsck.text());
    assert_eq!(check_array_files(&base), Some(1), "read without chip 1");
    let rebuild = fsoc_ok(&["rebuild", arg(&base), "--chip", "1"]);
    assert!(rebuild.stdout.contains("mounted whole") && rebuild.stdout.contains("clean: no violations"));
    assert_eq!(check_array_files(&base), None);

    // Chip 1's file gone: named at mount, then made again by the rebuild.
    std::fs::remove_file(chip_file_path(&base, 1)).expect("remove chip 1");
    fsoc_refuses(&["info", arg(&base)], &format!("chip file {} is missing", chip_file_path(&base, 1).display()));
    fsoc_refuses(&["fsck", arg(&chip_file_path(&base, 2))], &format!("fsoc rebuild {} --chip 1", base.display()));
    let rebuild = fsoc_ok(&["rebuild", arg(&base), "--chip", "1"]);
    assert!(rebuild.stdout.contains("(it was missing)"), "{}", rebuild.text());
    assert!(rebuild.stdout.contains("clean: no violations"), "{}", rebuild.text());
    assert_eq!(check_array_files(&base), None);
    assert_eq!(leftovers(directory.path()), Vec::<String>::new());

    // A replacement file for chip 2 (given by a chip file's name): made blank, rebuilt, renamed.
    let new = directory.path().join("new-chip");
    let rebuild = fsoc_ok(&["rebuild", arg(&chip_file_path(&base, 0)), "--chip", "2", "--replacement", arg(&new)]);
    let failed = PathBuf::from(format!("{}.failed", chip_file_path(&base, 2).display()));
    assert!(rebuild.stdout.contains(&format!("kept as {}", failed.display())), "{}", rebuild.text());
    assert!(failed.exists() && !new.exists(), "{}", rebuild.text());
    assert_eq!(check_array_files(&base), None);
    fsoc_ok(&["fsck", arg(&base)]);
    // Once more: the kept file is in the way, and is never overwritten.
    fsoc_refuses(&["rebuild", arg(&base), "--chip", "2", "--replacement", arg(&new)], "move it away first");
    assert!(!new.exists(), "nothing made for a refused rebuild");
}

/// Hidden or temporary files in `directory` (none may be left behind).
fn leftovers(directory: &Path) -> Vec<String> {
    std::fs::read_dir(directory)
        .expect("read_dir")
        .map(|entry| entry.expect("entry").file_name().to_string_lossy().into_owned())
        .filter(|name| name.starts_with('.'))
        .collect()
}

/// What cannot be had is refused with what to do, and nothing is left behind or erased:
/// parity on one chip, a rebuild of a volume without redundancy (image and
/// array, the volume still whole after), a chip beyond the volume, --replacement on an image,
/// a volume in use.
#[test]
fn redundancy_refusals_say_why_and_change_nothing() {
    let directory = tempfile::tempdir().expect("tempdir");
    let image = directory.path().join("one.img");
    fsoc_refuses(&["mkfs", arg(&image), "--chips", "1", "--redundancy", "parity"], "needs --chips 2 or more");
    let base = directory.path().join("array");
    fsoc_refuses(
        &["array", "mkfs", arg(&base), "--chips", "1", "--blocks", "32", "--redundancy", "parity"],
        "needs --chips 2 or more",
    );
    assert!(std::fs::read_dir(directory.path()).expect("read_dir").next().is_none(), "a refused mkfs left files");

    // No redundancy: the core refuses before it erases anything.
    let plain = directory.path().join("plain.img");
    fsoc_ok(&["mkfs", arg(&plain), "--chips", "2", "--size", "16M"]);
    let local = directory.path().join("local");
    std::fs::write(&local, vec![5u8; 30_000]).expect("write local");
    fsoc_ok(&["put", arg(&local), &format!("{}:/copy", arg(&plain))]);
    fsoc_refuses(
        &["rebuild", arg(&plain), "--chip", "1"],
        "cannot rebuild: the volume was formatted without redundancy",
    );
    let fsck = fsoc_ok(&["fsck", arg(&plain)]);
    assert!(fsck.stdout.contains("1 files") && fsck.stdout.contains("clean"), "nothing erased: {}", fsck.text());
    fsoc_ok(&["array", "mkfs", arg(&base), "--chips", "2", "--blocks", "32"]);
    std::fs::remove_file(chip_file_path(&base, 1)).expect("remove chip 1");
    fsoc_refuses(
        &["rebuild", arg(&base), "--chip", "1"],
        "cannot rebuild: the volume was formatted without redundancy",
    );
    assert!(!chip_file_path(&base, 1).exists());
    assert_eq!(leftovers(directory.path()), Vec::<String>::new());

    let parity = directory.path().join("parity.img");
    fsoc_ok(&["mkfs", arg(&parity), "--chips", "3", "--size", "24M", "--redundancy", "parity"]);
    fsoc_refuses(&["rebuild", arg(&parity), "--chip", "3"], "the volume has 3 chip(s), numbered 0 to 2");
    fsoc_refuses(
        &["rebuild", arg(&parity), "--chip", "1", "--replacement", arg(&directory.path().join("new"))],
        "chip 1 is rebuilt in place",
    );
    // In use: another process holds the image (as a mount does).
    let held = std::fs::File::open(&parity).expect("open");
    // SAFETY: flock on a descriptor this test owns.
    assert_eq!(unsafe { libc::flock(std::os::unix::io::AsRawFd::as_raw_fd(&held), libc::LOCK_SH) }, 0);
    fsoc_refuses(&["rebuild", arg(&parity), "--chip", "1"], "in use");
    drop(held);
    fsoc_ok(&["fsck", arg(&parity)]);
}

/// `fsoc crashtest --chip-loss N`: a chip dies at N sampled operations of the workload on a
/// volume with parity; every run recovers (exit 0) and the kills are counted. It needs two
/// chips or more.
#[test]
fn crashtest_loses_a_chip_at_sampled_operations() {
    let output = fsoc_ok(&["crashtest", "--chip-loss", "3", "--chips", "3", "--workload", "small-files"]);
    assert!(output.stdout.contains("3 kills (chips lost)"), "{}", output.text());
    assert!(output.stdout.contains("kills: 3,") && output.stdout.contains("failures: 0"), "{}", output.text());
    assert!(output.stdout.contains("parity"), "{}", output.text());
    fsoc_refuses(&["crashtest", "--chip-loss", "3", "--workload", "small-files"], "needs --chips 2 or more");
    let output = fsoc_ok(&[
        "crashtest",
        "--redundancy",
        "parity",
        "--chips",
        "3",
        "--workload",
        "small-files",
        "--max-cuts",
        "10",
    ]);
    assert!(output.stdout.contains("failures: 0") && output.stdout.contains("parity"), "{}", output.text());
    let output = fsoc_ok(&[
        "crashtest",
        "--chip-loss",
        "4",
        "--redundancy",
        "mirror-meta",
        "--chips",
        "3",
        "--workload",
        "small-files",
    ]);
    assert!(output.stdout.contains("4 kills (chips lost)"), "{}", output.text());
    assert!(output.stdout.contains("files read as lost") && output.stdout.contains("failures: 0"), "{}", output.text());
    assert!(output.stdout.contains("mirror-meta"), "{}", output.text());
}

/// An image of three chips with mirror-meta: `fsoc info` states it; with chip 0 blank the
/// volume is degraded (info says what is lost), `ls -r` lists every directory and file, the
/// metadata fsck is clean while the data fsck names the lost pages, each file reads back whole
/// or fails (never other bytes), a write is refused, and `fsoc rebuild` refuses with the reason.
#[test]
fn an_image_with_mirror_meta_lists_every_name_without_a_chip() {
    let directory = tempfile::tempdir().expect("tempdir");
    let source = directory.path().join("source");
    for sub in ["a", "a/b", "c"] {
        std::fs::create_dir_all(source.join(sub)).expect("mkdir");
    }
    for (index, (name, data)) in files().into_iter().enumerate() {
        let sub = ["", "a", "a/b", "c", "a", ""][index];
        std::fs::write(source.join(sub).join(name), data).expect("write source");
    }
    let image = directory.path().join("mirror.img");
    let output = fsoc_ok(&["mkfs", arg(&image), "--chips", "3", "--size", "24M", "--redundancy", "mirror-meta"]);
    assert!(output.stdout.contains("redundancy: mirror-meta"), "{}", output.text());
    fsoc_ok(&["put", "-r", arg(&source), &format!("{}:/tree", arg(&image))]);
    let info = fsoc_ok(&["info", arg(&image)]);
    assert!(
        info.stdout.contains("redundancy        mirror-meta (tree nodes, segment table and metaroots"),
        "{}",
        info.text()
    );
    let listing = fsoc_ok(&["ls", "-r", &format!("{}:/tree", arg(&image))]).stdout;

    blank_image_chip(&image, 0);
    let info = fsoc_ok(&["info", arg(&image)]);
    assert!(info.stdout.contains("file data that was on chip 0 is lost (EIO)"), "{}", info.text());
    assert_eq!(fsoc_ok(&["ls", "-r", &format!("{}:/tree", arg(&image))]).stdout, listing, "every name listed");
    let fsck = fsoc_ok(&["fsck", "--metadata-only", arg(&image)]);
    assert!(fsck.stdout.contains("clean: no violations"), "the structure is whole: {}", fsck.text());
    let fsck = fsoc(&["fsck", arg(&image)]);
    assert!(!fsck.status.success(), "the data pass finds the lost pages: {}", fsck.text());
    let (mut whole, mut lost) = (0, 0);
    for (index, (name, data)) in files().into_iter().enumerate() {
        let sub = ["", "a/", "a/b/", "c/", "a/", ""][index];
        let output = std::process::Command::new(support::FSOC)
            .args(["cat", &format!("{}:/tree/{sub}{name}", arg(&image))])
            .output()
            .expect("run fsoc cat");
        if output.status.success() {
            assert!(output.stdout == data, "{name}: other bytes");
            whole += 1;
        } else {
            lost += 1;
        }
    }
    assert!(whole >= 2 && lost >= 1, "{whole} files whole, {lost} lost");
    let put = fsoc(&["put", &format!("{}/f0", arg(&source)), &format!("{}:/new", arg(&image))]);
    assert!(!put.status.success(), "a degraded volume is read-only: {}", put.text());
    let rebuild = fsoc(&["rebuild", arg(&image), "--chip", "0"]);
    assert!(!rebuild.status.success(), "{}", rebuild.text());
    assert!(rebuild.stderr.contains("mirror-meta"), "{}", rebuild.text());
}

/// A degraded array (chip 1 blank) mounted read-only stays read-only: `mount -o remount,rw`
/// asks its server, which refuses and names the missing chip, and the mount keeps refusing
/// writes; every file still reads.
#[test]
fn a_degraded_array_refuses_remount_read_write() {
    let directory = tempfile::tempdir().expect("tempdir");
    let base = directory.path().join("array");
    fsoc_ok(&["array", "mkfs", arg(&base), "--chips", "3", "--blocks", "32", "--redundancy", "parity"]);
    write_array_files(&base);
    std::fs::remove_file(chip_file_path(&base, 1)).expect("remove chip 1");
    create_blank_chip_file(&chip_file_path(&base, 1), &chip_file_path(&base, 0)).expect("blank chip");
    let mount_point = directory.path().join("mnt");
    std::fs::create_dir(&mount_point).expect("mount point");
    let volume = support::Volume { directory, image: base.clone(), mount_point: mount_point.clone() };
    let mounted = volume.mount_with(&["-o", "ro"]);
    let output = fsoc(&["mount", "-o", "remount,rw", arg(&base), arg(&mount_point)]);
    assert!(!output.status.success(), "remount,rw of a degraded array:\n{}", output.text());
    assert!(output.stderr.contains("a chip of the volume is missing"), "{}", output.text());
    let refused = std::fs::write(mount_point.join("new"), b"x").expect_err("still read-only");
    assert_eq!(refused.raw_os_error(), Some(libc::EROFS));
    for (path, contents) in files() {
        assert_eq!(std::fs::read(mount_point.join(&path)).expect("read"), contents, "{path}");
    }
    mounted.unmount();

    // Rebuilt, the array mounts whole, writable: a remount read-only (the server asked to
    // commit, by SIGUSR1) and back read-write leaves its server running, and what was written
    // on either side of them is there after the unmount.
    fsoc_ok(&["rebuild", arg(&base), "--chip", "1"]);
    let mut mounted = volume.mount_with(&[]);
    std::fs::write(mount_point.join("before"), b"written before remount,ro").expect("write");
    for (options, what) in [("remount,ro", "read-only"), ("remount,rw", "read-write")] {
        let output = fsoc(&["mount", "-o", options, arg(&base), arg(&mount_point)]);
        assert!(output.status.success(), "{options} of the whole array:\n{}", output.text());
        assert!(mounted.is_running(), "the array's server died on the remount {what}");
    }
    std::fs::write(mount_point.join("after"), b"written after remount,rw").expect("write");
    mounted.unmount();
    let flash = ThreadedFlash::open(&base).expect("open chip files");
    let mut fs = FileSystem::mount(flash, FsConfig::default()).expect("mount");
    for (name, contents) in [("before", &b"written before remount,ro"[..]), ("after", b"written after remount,rw")] {
        let fd = fs.open(format!("/{name}").as_bytes(), OpenFlags { read: true, ..Default::default() }, 0).expect(name);
        assert_eq!(fs.read_fd(fd, 1 << 20).expect("read"), contents, "{name}");
        fs.close(fd).expect("close");
    }
    fs.unmount().expect("unmount").close().expect("close chip files");
}
