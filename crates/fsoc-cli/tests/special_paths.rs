//! Volume paths that are neither image files nor MTD raw NAND (issue 17, point 2): a FIFO, a
//! character device other than MTD (/dev/null) and a directory are refused by every command
//! that creates or opens a volume, with a message saying what the path is, promptly (a FIFO
//! is never opened, so nothing blocks on it), and are left exactly as they were: `fsoc mkfs
//! /dev/mtd0 --force` once replaced the device node with an image file.

mod support;

use std::fs;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use support::{run, FSOC};

/// Time one refused command may take: a FIFO opened for reading would block forever.
const REFUSAL_TIMEOUT: Duration = Duration::from_secs(20);

/// What must stay the same about a refused path: its type, device number, inode and, for a
/// directory, its listing.
fn fingerprint(path: &Path) -> (bool, bool, bool, u64, u64, Vec<String>) {
    let metadata = fs::symlink_metadata(path).expect("the refused path still exists");
    let file_type = metadata.file_type();
    let listing = if file_type.is_dir() {
        let mut names: Vec<String> = fs::read_dir(path)
            .expect("read_dir")
            .map(|entry| entry.expect("entry").file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    } else {
        Vec::new()
    };
    (file_type.is_fifo(), file_type.is_char_device(), file_type.is_dir(), metadata.rdev(), metadata.ino(), listing)
}

/// Runs `fsoc ARGS` and checks it fails with `expected` in its message, leaving `path` as it was.
fn check_refused(arguments: &[&str], path: &Path, expected: &str) {
    let before = fingerprint(path);
    let output = run(Command::new(FSOC).args(arguments), REFUSAL_TIMEOUT);
    assert!(!output.status.success(), "{arguments:?} was accepted:\n{}", output.text());
    assert!(output.stderr.contains(expected), "{arguments:?}: message lacks {expected:?}:\n{}", output.text());
    assert_eq!(fingerprint(path), before, "{arguments:?} changed {}", path.display());
}

/// Every volume command on each kind of special path.
#[test]
fn special_paths_are_refused_and_left_untouched() {
    let directory = tempfile::tempdir().expect("tempdir");
    let fifo = directory.path().join("fifo");
    let status = Command::new("mkfifo").arg(&fifo).status().expect("run mkfifo");
    assert!(status.success(), "mkfifo failed");
    let folder = directory.path().join("folder");
    fs::create_dir(&folder).expect("mkdir");
    fs::write(folder.join("inside.txt"), b"kept").expect("write");
    let local = directory.path().join("local.txt");
    fs::write(&local, b"local").expect("write");
    let mount_point = directory.path().join("mnt");
    fs::create_dir(&mount_point).expect("mkdir mnt");
    let (local, mount_point) = (local.to_str().expect("utf-8"), mount_point.to_str().expect("utf-8"));
    for (path, expected) in
        [(fifo.as_path(), "is a FIFO"), (Path::new("/dev/null"), "not an MTD device"), (&folder, "is a directory")]
    {
        let name = path.to_str().expect("utf-8");
        let target = format!("{name}:/x");
        let root = format!("{name}:/");
        let commands: [&[&str]; 14] = [
            &["mkfs", name, "--force"],
            &["mkfs", name],
            &["info", name],
            &["fsck", name],
            &["ls", &root],
            &["cat", &target],
            &["put", local, &target],
            &["get", &target, "never-written"],
            &["rm", &target],
            &["mkdir", &target],
            &["mount", name, mount_point],
            &["serve", name, "--listen", "tcp:127.0.0.1:0"],
            &["flash", "info", name],
            &["flash", "create", name],
        ];
        for arguments in commands {
            check_refused(arguments, path, expected);
        }
    }
    assert!(!Path::new("never-written").exists());
    // The folder's file was not touched either.
    assert_eq!(fs::read(folder.join("inside.txt")).expect("read"), b"kept");
}

/// A comma-separated list names MTD devices, one per chip: a regular file or a missing path
/// in it is refused with what it is, and nothing is created.
#[test]
fn a_device_list_must_name_mtd_devices() {
    let directory = tempfile::tempdir().expect("tempdir");
    let image = directory.path().join("a.img");
    fs::write(&image, b"not a device").expect("write");
    let missing = directory.path().join("mtd9");
    let list = format!("{},{}", image.display(), missing.display());
    let output = run(Command::new(FSOC).args(["mkfs", &list, "--force"]), REFUSAL_TIMEOUT);
    assert!(!output.status.success(), "{}", output.text());
    assert!(output.stderr.contains("is a regular file"), "{}", output.text());
    assert_eq!(fs::read(&image).expect("read"), b"not a device");
    let list = format!("{},/dev/null", missing.display());
    let output = run(Command::new(FSOC).args(["info", &list]), REFUSAL_TIMEOUT);
    assert!(output.stderr.contains("no such MTD device"), "{}", output.text());
    assert!(!missing.exists());
    let list = format!("/dev/null,{}", image.display());
    let output = run(Command::new(FSOC).args(["ls", &format!("{list}:/")]), REFUSAL_TIMEOUT);
    assert!(output.stderr.contains("not an MTD device"), "{}", output.text());
}
